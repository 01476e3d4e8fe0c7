/* follower.h - following a run folder as it grows: new records handed to callbacks
 *
 * A follower remembers where it left off in each file of a run folder.
 * Each dl_follower_poll reads config.json once, the complete lines
 * appended to metrics.jsonl, events.log and system.jsonl since the last
 * call, and profile.json and summary.json when they changed, and hands
 * each record to a callback as a struct (records.h). It knows nothing of
 * what the records become: observe/telemetry turns them into telemetry for
 * `dlbench watch`.
 */
#ifndef DL_FOLLOWER_H
#define DL_FOLLOWER_H

#include <cjson/cJSON.h>

#include "engine/rundir/records.h"

/* Where the follower left off. Zero it, then set dir. */
typedef struct dl_follower {
    char dir[1024];
    long off_metrics, off_events, off_system;
    double profile_mtime, summary_mtime;
    int have_config;
    /* metrics.jsonl as last read: a resume replaces it (rename) with the
     * records up to its checkpoint, so the records are read again */
    unsigned long long metrics_ino;
    long torn_at[3]; /* offset + 1 of a torn last line reported, per file */
} dl_follower;

/* What the follower hands on; any slot may be NULL. Records are borrowed
 * for the call. */
typedef struct dl_follower_ops {
    void *user;
    void (*config)(void *user, const dl_run_config *c); /* once, first */
    void (*metrics_restart)(void *user); /* metrics.jsonl was replaced: read again from the top */
    void (*metrics)(void *user, const dl_run_metrics *m);
    void (*event)(void *user, const dl_run_event *e);
    void (*sample)(void *user, const dl_run_system *s); /* a system.jsonl line */
    void (*profile)(void *user, const cJSON *trace);    /* the profiler's trace, whole */
    void (*summary)(void *user, const dl_run_summary *s);
    /* a line that cannot be read, or a torn last line: "metrics.jsonl line 3: ..." */
    void (*warning)(void *user, const char *text);
} dl_follower_ops;

/* Reads what was added to the run folder since the last call and hands it
 * to ops. Returns DL_OK, or DL_EIO when f->dir is not a run folder (no
 * readable config.json). A last line without its newline is left for the
 * next call while a process holds the run's lock (it is being written);
 * when none does, its writer was killed mid-line: it is reported once, as
 * torn, and ignored. */
int dl_follower_poll(dl_follower *f, const dl_follower_ops *ops);

#endif
