/* run_model.h - a finished run opened for use: its configuration, script copy, data, model and checkpoint
 *
 * dlbench sample, eval, predict and export all start from a run folder:
 * config.json gives the overrides, the seed and the data; script.lua is
 * the copy the run was started from; the checkpoint (last, best or a
 * name given to checkpoint(NAME)) is loaded into the model on the CPU
 * backend. Everything here is read-only: a run folder is never written.
 */
#ifndef DL_RUN_MODEL_H
#define DL_RUN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/data/data.h"
#include "engine/nn/nn.h"
#include "engine/train/checkpoint.h"

typedef struct dl_script dl_script; /* scripting/script.h */

typedef struct dl_run_model_options {
    const char *run;        /* a run folder, its name or hash (as --resume) */
    const char *out_dir;    /* where run folders are (NULL: "runs") */
    const char *checkpoint; /* "last" (NULL), "best", or a name given to checkpoint(NAME) */
    const char *verb;       /* the command, for messages ("eval"; NULL: "run") */
    int batch;              /* rows to plan the model for (0: 1; < 0: the experiment's batch) */
    const char *data;       /* FILE[:GROUP]: this HDF5 (or token) file's group instead of the
                             * run's data (GROUP default: the run's validation group); NULL: the
                             * run's own. Both sources then read GROUP, whole and in order. */
} dl_run_model_options;

typedef struct dl_run_model {
    char dir[1024];        /* the run folder */
    char data_kind[32];    /* config.json's data.kind: "hdf5", "text", ... */
    char data_path[1024];  /* config.json's data.path (relative to where the run started), or
                            * the file of o->data */
    char data_group[128];  /* the group the validation source reads ("" none) */
    char checkpoint[1200]; /* the checkpoint file loaded */
    uint64_t seed;         /* the run's */
    char **overrides;      /* the run's k=v overrides */
    int noverrides;
    dl_script *script;       /* the script copy, loaded with the overrides */
    dl_model *model;         /* on the CPU backend, planned for o->batch rows */
    dl_source *train, *val;  /* the run's data as its script opens it (val may be NULL) */
    dl_checkpoint_info info; /* of the checkpoint loaded */
} dl_run_model;

/* The checkpoint file of run folder dir for name: NULL or "last" ->
 * checkpoint.h5, "best" -> checkpoint-best.h5, NAME -> the file
 * checkpoint(NAME) wrote. DL_EINVAL for a name with a '/' or a leading
 * '.'; the file may not exist (the load says so). */
int dl_run_model_checkpoint_path(const char *dir, const char *name, char *path, size_t size);

/* The experiment of an open run (its loss, optimizer, data description). */
struct dl_experiment *dl_run_model_experiment(const dl_run_model *r);

/* Opens run o->run: resolves the folder, reads config.json, loads the
 * script copy with the run's overrides, opens its data (the sample shape
 * comes from it), builds the model and loads the checkpoint into it on
 * the CPU backend. r is zeroed first; on error everything opened so far is
 * closed and the message names the run and the file. */
int dl_run_model_open(dl_run_model *r, const dl_run_model_options *o);

/* Releases everything dl_run_model_open opened (r may be partly open). */
void dl_run_model_close(dl_run_model *r);

#endif
