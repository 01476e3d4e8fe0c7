/* tables.h - the screen's tables sampled from disk: the runs folder (F2) and a study's trials (F4)
 *
 * Sampling for the views (views/views.h dl_ui_runs, dl_ui_trials), on the
 * main loop's thread, when a screen is opened and about once a second while
 * it shows. Nothing here draws.
 */
#ifndef DL_TABLES_H
#define DL_TABLES_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "views/views.h"

/* Reads every RUNS_DIR/<run>/summary.json (and its config and tags) into
 * out->rows (newest first), replacing the rows it had (out->rows NULL or
 * from an earlier call); dl_tables_runs_free frees them. */
void dl_tables_load_runs(dl_ui_runs *out, const char *runs_dir);
void dl_tables_runs_free(dl_ui_runs *out);
/* A run's hyperparameters as "k=v" words: a trial's parameters, the
 * script's hparams, then the seed. */
void dl_tables_hparams_text(const cJSON *config, char *buf, size_t size);

/* Which study the trials screen follows: prefer (a name, or NULL) when
 * STUDIES_DIR/prefer/journal.jsonl exists, else the study whose journal
 * changed last. Returns 0 with the name, -1 when there is none. */
int dl_tables_pick_study(const char *studies_dir, const char *prefer, char *name, size_t size);

/* A study followed by the trials screen. Zero it before the first use. */
typedef struct dl_trials_follow {
    struct dl_study *st;
    char studies[1024];
    char name[128];
} dl_trials_follow;

/* Opens (once) and re-reads the study, then fills out (rows, best so far,
 * importance). On an error out->have is 0 and out->note says why. */
void dl_tables_sample_trials(dl_trials_follow *f, dl_ui_trials *out);
/* Closes the study; the struct may be reused with another name. */
void dl_tables_trials_close(dl_trials_follow *f);

#endif
