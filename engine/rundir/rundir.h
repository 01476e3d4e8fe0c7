/* rundir.h - the run folder's file names, spelled once, and the path of a file in a run
 *
 * A run folder OUT/<time>-<name>-<hash8>/ holds the files below. Only
 * engine/rundir/ spells their names: everything else builds a path with
 * dl_rundir_path (or uses the constants in a message) and reads and writes
 * through runlog.h (the writer) and records.h (the record readers).
 */
#ifndef DL_RUNDIR_H
#define DL_RUNDIR_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define DL_RUN_FILE_CONFIG "config.json"       /* resolved configuration, written once */
#define DL_RUN_FILE_METRICS "metrics.jsonl"    /* one record per logged step or epoch */
#define DL_RUN_FILE_EVENTS "events.log"        /* "<ISO time> <kind>: <text>" lines */
#define DL_RUN_FILE_SYSTEM "system.jsonl"      /* one system sample per line */
#define DL_RUN_FILE_PROFILE "profile.json"     /* the profiler's Chrome trace */
#define DL_RUN_FILE_SUMMARY "summary.json"     /* status, totals, final and best metrics */
#define DL_RUN_FILE_SCRIPT "script.lua"        /* the experiment script's copy */
#define DL_RUN_FILE_CHECKPOINT "checkpoint.h5" /* the latest checkpoint (resume reads it) */
#define DL_RUN_FILE_CHECKPOINT_BEST "checkpoint-best.h5"
#define DL_RUN_FILE_CHECKPOINT_TAG "checkpoint-%s.h5" /* printf format: a named checkpoint */
#define DL_RUN_FILE_CONTROL "control.sock"            /* the live run's command socket */
#define DL_RUN_FILE_LOCK "run.lock"                   /* flock held by the run's writer */
#define DL_RUN_FILE_OUTPUT "output.log"               /* a detached workbench's stdout and stderr */
#define DL_RUN_FILE_TAGS "tags.txt"                   /* the user's tags, one a line */

/* Writes RUN_DIR/FILE into buf (truncated like snprintf) and returns buf,
 * so that it can be handed on at once: fopen(dl_rundir_path(...), "r"). */
char *dl_rundir_path(const char *run_dir, const char *file, char *buf, size_t size);

/* The whole of a file: a NUL-terminated buffer the caller frees, its
 * length in *len (may be NULL). NULL with dl_error (DL_EIO naming the
 * path, DL_ENOMEM) when it cannot be read whole. */
char *dl_rundir_read_text(const char *path, size_t *len);

/* Reads and parses a JSON file (the caller deletes it); NULL with dl_error
 * when missing or not valid JSON. */
cJSON *dl_rundir_read_json(const char *path);

#endif
