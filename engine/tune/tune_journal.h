/* tune_journal.h - a study's journal: its records (spelt only here), the lock, reads, appends
 *
 * Records, one JSON object per line ("op" says which):
 *   study   {name, direction, version, time}              first line
 *   start   {trial, host, pid, pstart, time, grid, queue?}
 *   param   {trial, name, kind, lo, hi, log, choices?, value}
 *   report  {trial, step, value}
 *   attr    {trial, key, value}
 *   finish  {trial, state, value, time, reason?}         first finish wins
 *   enqueue {queue, params: [param...], grid, from}      a lost trial's parameters
 * A record is applied to the in-memory study (tune_study.h) as it is read
 * or appended, so the study is always the journal replayed. An in-memory
 * study (no folder) applies records without writing them.
 */
#ifndef DL_TUNE_JOURNAL_H
#define DL_TUNE_JOURNAL_H

#include <cjson/cJSON.h>

#include "engine/tune/tune_study.h"

#define DL_TUNE_JOURNAL "journal.jsonl"
#define DL_TUNE_LOCKFILE "journal.lock"

/* 1 when s lives in a folder (its journal is open). */
int dl_tune_journal_on_disk(const dl_study *s);

/* Opens (creating) DIR/journal.lock and DIR/journal.jsonl for s->dir.
 * DL_EIO naming the file. */
int dl_tune_journal_open(dl_study *s);

/* Takes and drops the exclusive lock that every writer holds (no-ops in
 * memory). DL_EIO naming the lock file. */
int dl_tune_journal_lock(dl_study *s);
void dl_tune_journal_unlock(dl_study *s);

/* Reads and applies the journal lines after the ones already read. Under
 * the exclusive lock a torn last line is terminated and skipped (see
 * tune_journal.c); without it, left for later. DL_EIO, DL_ENOMEM. */
int dl_tune_journal_refresh(dl_study *s);

/* The same under a shared lock, taken and dropped here (readers). */
int dl_tune_journal_read(dl_study *s);

/* Appends record r and applies it, with the lock held and the journal read
 * to its end; sync: fdatasync after. Consumes r (NULL: DL_ENOMEM). */
int dl_tune_journal_append(dl_study *s, cJSON *r, int sync);

/* Lock, read to the end, append r, unlock. Consumes r. */
int dl_tune_journal_commit(dl_study *s, cJSON *r, int sync);

/* Records, NULL when out of memory (append and commit take NULL as DL_ENOMEM). */
cJSON *dl_tune_journal_study(const char *name, int direction);
cJSON *dl_tune_journal_start(const dl_study *s, long grid_slot, int queued);
cJSON *dl_tune_journal_param(int trial, const dl_tune_param *p);
cJSON *dl_tune_journal_report(int trial, long step, double value);
cJSON *dl_tune_journal_attr(int trial, const char *key, const char *value);
/* reason may be NULL. */
cJSON *dl_tune_journal_finish(int trial, dl_trial_state state, double value, const char *reason);
/* Lost trial t's parameters queued again: its queued ones, overridden by
 * those it suggested before it was lost. */
cJSON *dl_tune_journal_enqueue(const dl_study *s, const dl_trial *t);

/* The queued value of dist's name for re-run trial t when the queued
 * parameter has dist's distribution: 1 and *value, else 0. */
int dl_tune_journal_fixed_value(const dl_trial *t, const dl_tune_param *dist, double *value);

#endif
