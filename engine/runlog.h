/* runlog.h - the run folder: config.json, metrics.jsonl, events.log, summary.json
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

typedef struct dl_runlog dl_runlog;

/* Creates OUT/<yyyymmdd-hhmmss>-<name>-<hash8>/ (OUT made when missing),
 * writes config.json from config (borrowed; "config_hash" is added), a
 * copy of the script as script.lua (when script_path is set), an empty
 * metrics.jsonl and events.log, and summary.json with status "running".
 * Returns DL_EIO with a message naming the path on failure. */
int dl_runlog_create(dl_runlog **out, const char *out_dir, const char *name,
                     const char *config_hash, const cJSON *config, const char *script_path);

/* Reopens an existing run folder to continue it (resume): metrics
 * recorded after step resume_step are dropped (they will be recomputed),
 * final/best values are rebuilt from the rest (a torn last line is
 * dropped), wall time continues from summary.json, and temporary files
 * that a killed writer left (NAME.tmp.PID) are removed. */
int dl_runlog_reopen(dl_runlog **out, const char *run_dir, long resume_step);

/* Closes the files; accepts NULL. Does not write a summary. */
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
    double samples;        /* training samples processed (this run and before a resume) */
} dl_run_totals;

/* Writes summary.json atomically: status ("running", "finished",
 * "failed", "stopped"), the totals, wall time, samples_per_s, message
 * (NULL for none), the final and best value of every metric, and the
 * members of extra (borrowed, may be NULL). */
int dl_runlog_summary(dl_runlog *r, const char *status, const dl_run_totals *t,
                      const char *message, const cJSON *extra);

/* Seconds since the run started (plus earlier time when resumed). */
double dl_runlog_elapsed(const dl_runlog *r);

/* --- helpers shared with the run commands --------------------------------- */

/* Writes data to path atomically (tmp, fsync, rename, fsync of the folder). */
int dl_runlog_write_atomic(const char *path, const void *data, size_t n);
/* Reads and parses a JSON file; NULL (with dl_error) when missing or bad. */
cJSON *dl_runlog_read_json(const char *path);
/* SHA-256 of the canonical (unformatted, key-sorted) text of j. */
char *dl_runlog_hash_json(const cJSON *j, char hex[65]);
/* Appends a line to RUN/events.log of a run that may be live in another
 * process (O_APPEND: one write). */
int dl_runlog_append_event(const char *run_dir, const char *kind, const char *text);

/* The git commit of the repository containing dir (or the current folder
 * when NULL), found by running git with an argument vector (no shell).
 * Returns 1 with commit[41] and *dirty set, 0 when not in a repository or
 * git is missing. */
int dl_runlog_git(const char *dir, char commit[41], int *dirty);

/* Looks for a run folder under out_dir whose config_hash equals hash and
 * whose summary says "finished". Returns 1 and its path in found, else 0. */
int dl_runlog_find_finished(const char *out_dir, const char *hash, char *found, size_t size);

/* Resolves a run given as a path, a folder name under out_dir, or a unique
 * substring of one (e.g. its hash8). Returns DL_OK with the path, or
 * DL_EINVAL naming the candidates. */
int dl_runlog_resolve(const char *out_dir, const char *run, char *path, size_t size);

#endif
