/* tune.h - hyperparameter studies: search spaces, samplers, pruners, a journal on disk
 *
 * A study is a set of trials. A trial is asked for, suggests its
 * parameters one by one (define by run: the objective decides which
 * parameters exist), optionally reports intermediate values and asks
 * whether it should be pruned, and is told its final state and value.
 *
 * Persistence: a study opened with a folder lives in DIR/NAME/ as
 * journal.jsonl, one JSON object per line, appended with O_APPEND under an
 * flock(2) on journal.lock. Every change re-reads the new lines of the
 * journal under the lock before it appends, so several processes (or
 * machines sharing the folder over a file system with working flock, e.g.
 * NFSv4) never lose or duplicate a trial and trial numbers are unique. A
 * torn last line (writer killed mid-write) is terminated and skipped.
 * A running trial whose process is gone (same host: pid and its start time;
 * other host: no heartbeat for heartbeat_timeout seconds) is marked failed
 * and its parameters are queued again, so a killed study resumes where it
 * stopped and never repeats a completed trial.
 *
 * Randomness comes from engine/base/rng.h keyed by (seed, parameter name, trial
 * number): the same seed and history give the same suggestions in any
 * process. A study handle is not thread-safe; open one per process (never
 * share a handle across fork(): flock is per open file). No Lua, no curses.
 *
 * The module is "tune"; its public names follow the objects they act on:
 * dl_study_*, dl_trial_*, dl_tune_*. Samplers and pruners are functions
 * over a read-only history of the study (tune_history.h) that the study
 * builds and hands them: they never call back into it.
 */
#ifndef DL_TUNE_H
#define DL_TUNE_H

#include <stdint.h>

#include "engine/tune/tune_history.h"
#include "engine/tune/tune_pruner.h"
#include "engine/tune/tune_sampler.h"

typedef struct dl_study dl_study;
typedef struct dl_trial dl_trial;

/* dl_study_ask's "nothing left to ask" status (positive: not an error). */
enum { DL_STUDY_DONE = 1 };

/* The directions (DL_STUDY_MINIMIZE, DL_STUDY_MAXIMIZE), trial states,
 * parameter kinds and dl_tune_param are in tune_history.h; the sampler
 * and pruner kinds, their settings, defaults and parsers in
 * tune_sampler.h and tune_pruner.h. */

/* Opens (creating when missing) study NAME in DIR/NAME/ (DIR and the
 * folder made when missing), replays its journal and marks trials of dead
 * processes failed, queueing their parameters again. dir NULL keeps the
 * study in memory only (tests, benchmarks). sampler and pruner NULL mean
 * TPE and no pruning; they are this process's choice and may differ
 * between processes sharing a study. direction must match the journal's:
 * DL_EINVAL otherwise. DL_EIO naming the path when the folder or journal
 * cannot be used. On success *out is owned by the caller (dl_study_destroy). */
int dl_study_open(dl_study **out, const char *dir, const char *name, int direction,
                  const dl_sampler_config *sampler, const dl_pruner_config *pruner, uint64_t seed);

/* Closes the journal; accepts NULL. Trials still running stay running in
 * the journal and are recovered by the next open once this process is gone. */
void dl_study_destroy(dl_study *s);

/* Stops dl_study_ask once this many trials are running, complete, pruned
 * or queued (failed trials do not count: they are retried). 0: no limit. */
void dl_study_set_budget(dl_study *s, int n_trials);

/* Seconds without a heartbeat after which another host's running trial is
 * taken as lost (120). Same-host trials are checked by pid at once. */
void dl_study_set_heartbeat_timeout(dl_study *s, double seconds);

/* Starts a new trial, numbered after every trial in the journal, taking a
 * queued parameter set first when there is one. *trial is owned by the
 * study and valid until dl_study_destroy. Returns DL_OK, DL_STUDY_DONE
 * when the budget is reached or the grid is exhausted, or a negative code. */
int dl_study_ask(dl_study *s, dl_trial **trial);

/* Suggests a value for parameter name in [lo, hi] (log: uniformly in log
 * space, lo > 0). Asking again for the same name in a trial returns the
 * same value; a different distribution for the same name is DL_EINVAL, as
 * are bad bounds. A queued (re-run) trial returns its recorded value when
 * it fits the distribution. The parameter is written to the journal. */
int dl_trial_suggest_float(dl_trial *t, const char *name, double lo, double hi, int log,
                           double *value);
int dl_trial_suggest_int(dl_trial *t, const char *name, long lo, long hi, int log, long *value);
/* One of n choices (strings are copied); *index is the chosen one. */
int dl_trial_suggest_choice(dl_trial *t, const char *name, const char *const *choices, int n,
                            int *index);

/* Records an intermediate value (a metric after step, e.g. an epoch); a
 * step reported twice keeps the last value. NaN is allowed and counts as
 * the worst value. Also refreshes this process's heartbeat. */
int dl_trial_report(dl_trial *t, long step, double value);

/* 1 when the study's pruner says this trial should stop now, judged from
 * its last reported step against the other trials' reports (re-read from
 * the journal), 0 to continue; negative on error. */
int dl_trial_should_prune(dl_trial *t);

/* Stores a string attribute (e.g. "run_dir") with the trial, in the journal. */
int dl_trial_set_attr(dl_trial *t, const char *key, const char *value);

/* Finishes a trial: DL_TRIAL_COMPLETE with value (a non-finite value
 * makes it failed, as a diverged training), DL_TRIAL_PRUNED (value NaN:
 * the last reported value is kept) or DL_TRIAL_FAILED. DL_EINVAL when the
 * trial is not running in this process. */
int dl_study_tell(dl_study *s, dl_trial *t, dl_trial_state state, double value);

/* When a complete trial has exactly the same parameters as t, finishes t
 * as complete with that trial's value (attribute "reused_from" = its
 * number) and returns 1; else returns 0 and leaves t running. */
int dl_study_reuse(dl_study *s, dl_trial *t);

/* Re-reads the journal (shared lock) so the trial list includes other
 * processes' changes, and recovers trials of dead processes. */
int dl_study_refresh(dl_study *s);

/* Writes this process's heartbeat now (done by ask, report and tell too);
 * call it at least every heartbeat_timeout/4 seconds while a trial runs
 * without reporting. */
int dl_study_heartbeat(dl_study *s);

/* --- reading a study (reports, the trials screen) ------------------------- */

const char *dl_study_name(const dl_study *s);
int dl_study_direction(const dl_study *s);
/* The study folder ("" in memory). */
const char *dl_study_dir(const dl_study *s);
/* Trials in number order: dl_study_trial(s, i) has number i. */
int dl_study_count(const dl_study *s);
const dl_trial *dl_study_trial(const dl_study *s, int i);
/* The complete trial with the best value (lowest number on ties), or NULL. */
const dl_trial *dl_study_best(const dl_study *s);
/* Lines of the journal that could not be read (torn or foreign), and the
 * line number of the first of them (0 when none). */
int dl_study_skipped_lines(const dl_study *s);
long dl_study_first_skipped_line(const dl_study *s);

int dl_trial_number(const dl_trial *t);
dl_trial_state dl_trial_state_of(const dl_trial *t);
/* Final value (complete), last reported value (pruned), else NaN. */
double dl_trial_value(const dl_trial *t);
int dl_trial_param_count(const dl_trial *t);
/* Parameter i in suggestion order, or NULL. */
const dl_tune_param *dl_trial_param(const dl_trial *t, int i);
/* The parameter called name, or NULL. */
const dl_tune_param *dl_trial_param_find(const dl_trial *t, const char *name);
/* Intermediate values in step order; returns the count, fills at most cap. */
int dl_trial_intermediate(const dl_trial *t, long *steps, double *values, int cap);
/* A string attribute, or NULL. */
const char *dl_trial_attr(const dl_trial *t, const char *key);
/* Wall-clock start and end (seconds since the epoch; end 0 while running). */
double dl_trial_start_time(const dl_trial *t);
double dl_trial_end_time(const dl_trial *t);

/* "running", "complete", "pruned", "failed". */
const char *dl_trial_state_name(dl_trial_state state);

#endif
