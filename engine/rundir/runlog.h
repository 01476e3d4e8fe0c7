/* runlog.h - the run folder's writer: config.json, metrics.jsonl, events.log, summary.json, the run lock
 *
 * runlog.c writes a run; runlog_lock.c holds its lock; runlog_clean.c
 * removes what crashes leave; runlog_find.c finds runs under OUT;
 * runlog_git.c reads the git commit. File names: rundir.h; record
 * readers: records.h.
 *
 * Every run gets OUT/<time>-<name>-<hash8>/. Whole files (config.json,
 * summary.json, the script copy) are written atomically: a temporary file,
 * fsync, rename, fsync of the folder, so a crash never leaves a torn file
 * that looks whole. metrics.jsonl and events.log are appended and flushed
 * line by line. The runlog keeps the final and best value of every metric
 * it sees for summary.json. No Lua, no curses.
 */
#ifndef DL_RUNLOG_H
#define DL_RUNLOG_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "engine/rundir/rundir.h"

typedef struct dl_runlog dl_runlog;

/* Creates OUT/<yyyymmdd-hhmmss>-<name>-<hash8>/ (OUT made when missing;
 * "-2", "-3"... appended when taken), with config.json from config
 * (borrowed; "config_hash" and "run" are added), a copy of the script as
 * script.lua (when script_path is set), an empty metrics.jsonl and
 * events.log, summary.json with status "running" and run.lock, locked for
 * the runlog's life. The folder is filled under a hidden temporary name
 * (OUT/.<name>.tmp-PID-N) and renamed into place without replacing
 * anything, so a crash never leaves a half-made run where `runs` looks and
 * concurrent creators get distinct folders; temporary folders that dead
 * creators left are removed first. Returns DL_EIO with a message naming
 * the path on failure (the temporary folder is removed). */
int dl_runlog_create(dl_runlog **out, const char *out_dir, const char *name,
                     const char *config_hash, const cJSON *config, const char *script_path);

/* Reopens an existing run folder to continue it (resume). First takes the
 * run's lock (RUN/run.lock, an exclusive flock held until
 * dl_runlog_destroy; a killed holder's lock is gone with it): when another
 * process holds it, returns DL_EINVAL "run X is in use by process PID" and
 * changes nothing. Then metrics recorded after step resume_step are
 * dropped (they will be recomputed), final/best values are rebuilt from
 * the rest, wall time continues from summary.json, temporary files that a
 * killed writer left (NAME.tmp.PID) are removed, and torn lines (a writer
 * killed mid-line: unreadable metrics lines, a last line of events.log or
 * system.jsonl without its newline) are dropped with a warning in
 * events.log. */
int dl_runlog_reopen(dl_runlog **out, const char *run_dir, long resume_step);

/* A resume reads the run (its checkpoint) before it can reopen the log: it
 * takes the run's lock first, so that what it reads cannot change under
 * it, and hands the lock to dl_runlog_reopen_locked, which keeps it (and
 * closes it on failure). *fd is the lock; errors as dl_runlog_reopen's. */
int dl_runlog_lock(const char *run_dir, int *fd);
int dl_runlog_reopen_locked(dl_runlog **out, const char *run_dir, long resume_step, int lock_fd);

/* Closes the files and releases the run's lock; accepts NULL. Does not
 * write a summary. */
void dl_runlog_destroy(dl_runlog *r);

const char *dl_runlog_dir(const dl_runlog *r);
/* The config.json read back (owned by the runlog). */
const cJSON *dl_runlog_config(const dl_runlog *r);

/* Appends {"kind": kind, "step": step, "epoch": epoch, "time": seconds
 * since start, names[i]: values[i]...} to metrics.jsonl and flushes it.
 * NaN values are written as null and not tracked. */
int dl_runlog_metrics(dl_runlog *r, const char *kind, long step, int epoch,
                      const char *const *names, const double *values, int n);

/* Appends "<ISO time> <kind>: <text>" to events.log and flushes it. */
int dl_runlog_event(dl_runlog *r, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct dl_run_totals {
    long steps;
    int epochs;
    double samples; /* training samples processed (this run and before a resume) */
} dl_run_totals;

/* Writes summary.json atomically: status ("running", "finished",
 * "failed", "stopped"), the totals, wall time, samples_per_s, message
 * (NULL for none), the final and best value of every metric, and the
 * members of extra (borrowed, may be NULL). */
int dl_runlog_summary(dl_runlog *r, const char *status, const dl_run_totals *t, const char *message,
                      const cJSON *extra);

/* Marks a run that its writer can no longer finish failed: summary.json
 * rewritten atomically with status "failed" and message (other members
 * kept). For a run whose process is gone (a lost trial) or that a
 * watchdog ends. Returns DL_OK, or the read or write error. */
int dl_runlog_mark_failed(const char *run_dir, const char *message);

/* Seconds since the run started (plus earlier time when resumed). */
double dl_runlog_elapsed(const dl_runlog *r);

/* --- helpers shared with the run commands --------------------------------- */
/* dl_rundir_read_json under its older name (callers outside rundir). */
static inline cJSON *dl_runlog_read_json(const char *path) { return dl_rundir_read_json(path); }
/* SHA-256 of the canonical (unformatted, key-sorted) text of j. */
char *dl_runlog_hash_json(const cJSON *j, char hex[65]);
/* Appends a line to RUN/events.log of a run that may be live in another
 * process (O_APPEND: one write). */
int dl_runlog_append_event(const char *run_dir, const char *kind, const char *text);

/* Adds tag to RUN/tags.txt (remove: takes it away), rewriting the file
 * atomically; a run may be live in another process (its writer never
 * touches the tags). A tag is 1-63 characters of [A-Za-z0-9_.:+-]:
 * DL_EINVAL naming it otherwise. Returns 1 when the tags changed, 0 when
 * the run had it already (or did not, for remove), or the error. */
int dl_runlog_tag(const char *run_dir, const char *tag, int remove);

/* The git commit of the repository containing dir (or the current folder
 * when NULL), found by running git with an argument vector (no shell).
 * Returns 1 with commit[41] and *dirty set, 0 when not in a repository or
 * git is missing. */
int dl_runlog_git(const char *dir, char commit[41], int *dirty);

/* Looks for a run folder under out_dir whose config_hash equals hash and
 * whose summary says "finished". Returns 1 and its path in found, else 0. */
int dl_runlog_find_finished(const char *out_dir, const char *hash, char *found, size_t size);

/* Whether a process holds RUN's lock (a live run, or a resume of it):
 * DL_OK when none does (or the folder has no run.lock), DL_EINVAL with
 * "run X is in use by process PID" when one does. It probes with a shared
 * lock held for microseconds; the guard itself is the exclusive lock that
 * dl_runlog_create and dl_runlog_reopen hold. */
int dl_runlog_check_free(const char *run_dir);

/* 1 when a folder name under OUT is a run folder being made (or left
 * half-made by a crash): ".<name>.tmp-PID-N". Such folders are not runs. */
int dl_runlog_is_temp_name(const char *name);

/* Counts the temporary run folders under out_dir whose creator is gone
 * (lock free, or no lock after a minute), lists their names in names
 * (", "-separated, may be NULL) and removes them when remove is set. */
int dl_runlog_stale_temps(const char *out_dir, int remove, char *names, size_t size);

/* Resolves a run given as a path, a folder name under out_dir, or a unique
 * substring of one (e.g. its hash8). Returns DL_OK with the path, or
 * DL_EINVAL naming the candidates. */
int dl_runlog_resolve(const char *out_dir, const char *run, char *path, size_t size);

/* 1 when path is a run folder (it has a config.json), else 0. */
int dl_runlog_is_run(const char *path);

/* The newest run folder under out_dir (folder names start with the time):
 * 0 with OUT/NAME in path, -1 when there is none. */
int dl_runlog_newest(const char *out_dir, char *path, size_t size);

#endif
