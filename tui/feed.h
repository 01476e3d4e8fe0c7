/* feed.h - the workbench's live data: published by the training side, copied by the screen each frame
 *
 * A dl_feed holds one dl_snapshot (views/views.h) under a mutex. Writers
 * (the trainer thread through the session's sinks, the monitor thread, the
 * main loop) hold the lock for a few assignments; the main loop copies the
 * whole snapshot once a frame and draws from its copy, so slow drawing
 * never slows training. `dlbench watch` fills the same snapshot from a run
 * folder's files with dl_feed_follow.
 */
#ifndef DL_FEED_H
#define DL_FEED_H

#include <stdio.h>

#include "engine/monitor.h"
#include "engine/profiler.h"
#include "engine/trainer.h"
#include "views/views.h"

typedef struct dl_feed dl_feed;

dl_feed *dl_feed_create(void); /* NULL when out of memory */
void dl_feed_destroy(dl_feed *f); /* accepts NULL */

/* Direct access for small updates: lock, change fields, unlock. */
dl_snapshot *dl_feed_lock(dl_feed *f);
void dl_feed_unlock(dl_feed *f);
/* Copies the snapshot (the main loop, once a frame). */
void dl_feed_copy(dl_feed *f, dl_snapshot *out);
/* Forgets series, log and progress (a restart), keeps system and runs. */
void dl_feed_reset_run(dl_feed *f);

/* Writers. */
void dl_feed_step(dl_feed *f, const dl_step_info *i);
void dl_feed_epoch(dl_feed *f, long step, int epoch, double train_loss, double train_acc,
                   double val_loss, double val_acc);
/* A log line; when: "HH:MM:SS" or NULL for now. Also reacts to the kinds
 * that change the status (paused, resumed, device, finished...). */
void dl_feed_event(dl_feed *f, const char *kind, const char *text, const char *when);
/* Copies the profiler's op table (call on the thread that records). */
void dl_feed_profile(dl_feed *f, const dl_profiler *p);
/* For dl_monitor_options.sink with user = the feed. */
void dl_feed_monitor_sink(void *feed, const dl_sys_sample *s);

/* Reads the runs folder into the runs table (newest first). */
void dl_feed_load_runs(dl_feed *f, const char *runs_dir);

/* --- following a run folder (watch) ---------------------------------------- */
typedef struct dl_follow {
    char dir[1024];
    long off_metrics, off_events, off_system;
    int have_config;
    int batch;
} dl_follow;

/* Reads what was appended to RUN's files since the last call (config.json
 * once, metrics.jsonl, events.log, system.jsonl, summary.json). A torn
 * last line is left for the next call; a line that does not parse is
 * skipped. Returns 0, or -1 when dir has no config.json. */
int dl_feed_follow(dl_feed *f, dl_follow *fw);

#endif
