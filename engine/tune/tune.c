/* tune.c - the study API: ask, suggest, report, tell; heartbeats and recovery of lost trials */
#include "engine/tune/tune.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/tune/tune_journal.h"

/* --- process identity ---------------------------------------------------------- */

/* Start time of pid in clock ticks since boot (field 22 of /proc/pid/stat),
 * 0 when unknown: with the pid it names a process even after pid reuse. */
static unsigned long long proc_start(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p)
        return 0;
    p++;
    /* after ')' come fields 3.. ; starttime is field 22 */
    for (int field = 3; field < 22 && *p; field++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
    }
    return strtoull(p, NULL, 10);
}

static int pid_alive(long pid, unsigned long long pstart)
{
    if (pid <= 0)
        return 0;
    if (kill((pid_t)pid, 0) != 0 && errno != EPERM)
        return 0;
    if (pstart) {
        unsigned long long now = proc_start(pid);
        if (now && now != pstart)
            return 0; /* the pid was reused */
    }
    return 1;
}

/* --- heartbeats and recovery ------------------------------------------------------ */

static void heartbeat_path(const dl_study *s, const char *host, long pid, char *path, size_t n)
{
    snprintf(path, n, "%s/workers/%s-%ld", s->dir, host, pid);
}

int dl_study_heartbeat(dl_study *s)
{
    if (!dl_tune_journal_on_disk(s))
        return DL_OK;
    double now = dl_clock_wall_s();
    char path[1200], text[64];
    heartbeat_path(s, s->host, s->pid, path, sizeof path);
    int len = snprintf(text, sizeof text, "%.3f\n", now);
    DL_TRY(dl_fs_write_atomic(path, text, (size_t)len));
    s->last_hb = now;
    return DL_OK;
}

/* Refreshes the heartbeat when a quarter of the timeout has passed. */
static void heartbeat_maybe(dl_study *s)
{
    if (dl_tune_journal_on_disk(s) && dl_clock_wall_s() - s->last_hb > s->hb_timeout / 4)
        dl_study_heartbeat(s);
}

/* The owner of running trial t is gone. */
static int trial_lost(dl_study *s, const dl_trial *t)
{
    if (strcmp(t->host, s->host) == 0) {
        if (t->pid == s->pid && t->pstart == s->pstart)
            return 0; /* this process (another handle or this one) */
        return !pid_alive(t->pid, t->pstart);
    }
    char path[1200], text[64] = "";
    heartbeat_path(s, t->host, t->pid, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(text, sizeof text, f))
            text[0] = 0;
        fclose(f);
    }
    double last = f ? strtod(text, NULL) : t->t_start;
    return dl_clock_wall_s() - last > s->hb_timeout;
}

/* With the lock held and the journal read: marks trials of dead owners
 * failed and queues their parameters again. */
static int recover_locked(dl_study *s)
{
    for (int i = 0; i < s->ntrials; i++) {
        dl_trial *t = s->trials[i];
        if (t->state != DL_TRIAL_RUNNING || t->mine || !trial_lost(s, t))
            continue;
        char why[160];
        snprintf(why, sizeof why, "lost: process %ld on %s is gone", t->pid, t->host);
        cJSON *f = dl_tune_journal_finish(t->number, DL_TRIAL_FAILED, NAN, why);
        DL_TRY(dl_tune_journal_append(s, f, 0));
        if (t->nparams == 0 && !t->fixed)
            continue;
        DL_TRY(dl_tune_journal_append(s, dl_tune_journal_enqueue(s, t), 0));
    }
    return DL_OK;
}

int dl_study_refresh(dl_study *s)
{
    if (!dl_tune_journal_on_disk(s))
        return DL_OK;
    int rc = dl_tune_journal_lock(s);
    if (rc < 0)
        return rc;
    rc = dl_tune_journal_refresh(s);
    if (rc == DL_OK)
        rc = recover_locked(s);
    dl_tune_journal_unlock(s);
    return rc;
}

/* --- opening and closing ------------------------------------------------------------ */

static int name_ok(const char *name)
{
    if (!name || !*name || strlen(name) >= 128 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    for (const char *p = name; *p; p++)
        if (*p == '/' || (unsigned char)*p < 32)
            return 0;
    return 1;
}

/* DL_EINVAL naming the study when an argument of dl_study_open is out of range. */
static int check_settings(const char *name, int direction, const dl_sampler_config *sampler,
                          const dl_pruner_config *pruner)
{
    if (!name_ok(name))
        return dl_error(DL_EINVAL, "study name \"%s\": expected a non-empty name without '/'",
                        name ? name : "(null)");
    if (direction != DL_STUDY_MINIMIZE && direction != DL_STUDY_MAXIMIZE)
        return dl_error(DL_EINVAL, "study %s: direction must be minimize or maximize", name);
    if (sampler && (sampler->kind < DL_SAMPLER_RANDOM || sampler->kind > DL_SAMPLER_TPE ||
                    sampler->n_ei_candidates < 1 || sampler->grid_points < 1 ||
                    !(sampler->gamma > 0 && sampler->gamma <= 1) || sampler->gamma_max < 1))
        return dl_error(DL_EINVAL, "study %s: bad sampler settings", name);
    if (pruner && (pruner->kind < DL_PRUNER_NONE || pruner->kind > DL_PRUNER_ASHA ||
                   pruner->min_resource < 1 || pruner->reduction_factor < 2 ||
                   pruner->min_early_stopping_rate < 0 || pruner->min_trials < 0))
        return dl_error(DL_EINVAL, "study %s: bad pruner settings", name);
    return DL_OK;
}

/* A study in memory with this process's identity, or NULL. */
static dl_study *study_new(const char *name, int direction, const dl_sampler_config *sampler,
                           const dl_pruner_config *pruner, uint64_t seed)
{
    dl_study *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->direction = direction;
    s->sampler = sampler ? *sampler : dl_tune_sampler_defaults(DL_SAMPLER_TPE);
    s->pruner = pruner ? *pruner : dl_tune_pruner_defaults(DL_PRUNER_NONE);
    s->seed = seed;
    s->fd_journal = s->fd_lock = -1;
    s->hb_timeout = 120;
    s->pid = (long)getpid();
    s->pstart = proc_start(s->pid);
    if (gethostname(s->host, sizeof s->host - 1) != 0)
        snprintf(s->host, sizeof s->host, "localhost");
    for (char *p = s->host; *p; p++)
        if (*p == '/')
            *p = '_';
    return s;
}

/* With the lock held: replays the journal, writes its "study" record when
 * it is new, checks the direction and recovers lost trials. */
static int replay_locked(dl_study *s, int direction)
{
    DL_TRY(dl_tune_journal_refresh(s));
    if (!s->created)
        DL_TRY(dl_tune_journal_append(s, dl_tune_journal_study(s->name, direction), 1));
    if (s->direction != direction)
        return dl_error(DL_EINVAL, "study %s in %s was created to %s, not to %s", s->name, s->dir,
                        s->direction == DL_STUDY_MAXIMIZE ? "maximize" : "minimize",
                        direction == DL_STUDY_MAXIMIZE ? "maximize" : "minimize");
    return recover_locked(s);
}

/* Opens s's folder DIR/NAME: workers/, the lock, the journal replayed. */
static int study_load(dl_study *s, const char *dir, int direction)
{
    char path[1200];
    if (snprintf(s->dir, sizeof s->dir, "%s/%s", dir, s->name) >= (int)sizeof s->dir)
        return dl_error(DL_EINVAL, "study folder %s/%s: path too long", dir, s->name);
    snprintf(path, sizeof path, "%s/workers", s->dir);
    DL_TRY(dl_fs_mkdir_p(path));
    DL_TRY(dl_tune_journal_open(s));
    DL_TRY(dl_tune_journal_lock(s));
    int rc = replay_locked(s, direction);
    dl_tune_journal_unlock(s);
    return rc;
}

int dl_study_open(dl_study **out, const char *dir, const char *name, int direction,
                  const dl_sampler_config *sampler, const dl_pruner_config *pruner, uint64_t seed)
{
    *out = NULL;
    DL_TRY(check_settings(name, direction, sampler, pruner));
    dl_study *s = study_new(name, direction, sampler, pruner, seed);
    if (!s)
        return dl_error(DL_ENOMEM, "study: out of memory");
    if (!dir) {
        s->created = 1;
        *out = s;
        return DL_OK;
    }
    int rc = study_load(s, dir, direction);
    if (rc < 0) {
        dl_study_destroy(s);
        return rc;
    }
    *out = s;
    return DL_OK;
}

void dl_study_destroy(dl_study *s)
{
    if (!s)
        return;
    if (s->fd_journal >= 0)
        close(s->fd_journal);
    if (s->fd_lock >= 0)
        close(s->fd_lock);
    if (s->dir[0] && s->last_hb > 0) {
        char path[1200];
        heartbeat_path(s, s->host, s->pid, path, sizeof path);
        int running = 0;
        for (int i = 0; i < s->ntrials; i++)
            running |= s->trials[i]->mine && s->trials[i]->state == DL_TRIAL_RUNNING;
        if (!running)
            unlink(path);
    }
    for (int i = 0; i < s->ntrials; i++)
        dl_tune_trial_free(s->trials[i]);
    free(s->trials);
    for (int i = 0; i < s->nqueue; i++)
        cJSON_Delete(s->queue[i].params);
    free(s->queue);
    free(s->hist);
    free(s);
}

void dl_study_set_budget(dl_study *s, int n_trials) { s->budget = n_trials > 0 ? n_trials : 0; }

void dl_study_set_heartbeat_timeout(dl_study *s, double seconds)
{
    if (seconds > 0)
        s->hb_timeout = seconds;
}

/* The sampler's value of dist for t, drawn from the study's history. */
static int sample(dl_study *s, dl_trial *t, const dl_tune_param *dist, double *value)
{
    dl_tune_history h;
    dl_tune_trial_history(s, &h);
    return dl_tune_sampler_suggest(&s->sampler, s->seed, &h, t->number, &t->joint, dist, value);
}

/* --- asking and telling ------------------------------------------------------------- */

/* Grid slots: the lowest slot not held by a running, complete or pruned
 * trial, so a failed trial's point is tried again and workers never share one. */
static long grid_free_slot(const dl_study *s)
{
    long n = s->ntrials + s->nqueue + 1;
    unsigned char *used = calloc((size_t)n, 1);
    if (!used)
        return s->ntrials;
    for (int i = 0; i < s->ntrials; i++) {
        const dl_trial *t = s->trials[i];
        if (t->state != DL_TRIAL_FAILED && t->grid_slot >= 0 && t->grid_slot < n)
            used[t->grid_slot] = 1;
    }
    for (int i = 0; i < s->nqueue; i++)
        if (!s->queue[i].claimed && s->queue[i].grid_slot >= 0 && s->queue[i].grid_slot < n)
            used[s->queue[i].grid_slot] = 1;
    long slot = 0;
    while (slot < n && used[slot])
        slot++;
    free(used);
    return slot;
}

/* Product of grid sizes over the parameters of the trials seen so far
 * (the largest one), 0 while no trial has parameters. */
static double grid_total(const dl_study *s)
{
    double best = 0;
    for (int i = 0; i < s->ntrials; i++) {
        const dl_trial *t = s->trials[i];
        if (t->nparams == 0)
            continue;
        double prod = 1;
        for (int j = 0; j < t->nparams; j++)
            prod *= (double)dl_tune_sampler_grid_size(&s->sampler, &t->params[j]);
        if (prod > best)
            best = prod;
    }
    return best;
}

/* With the lock held and the journal read: the queue entry (-1: none) and
 * grid slot (-1: none) of the next trial, or DL_STUDY_DONE when the budget
 * is reached or the grid is exhausted. */
static int next_trial(const dl_study *s, int *queued, long *slot)
{
    int pending = 0, active = 0;
    *queued = -1;
    *slot = -1;
    for (int i = 0; i < s->nqueue; i++)
        if (!s->queue[i].claimed) {
            pending++;
            if (*queued < 0)
                *queued = i;
        }
    for (int i = 0; i < s->ntrials; i++)
        active += s->trials[i]->state != DL_TRIAL_FAILED;
    if (*queued < 0 && s->budget && active + pending >= s->budget)
        return DL_STUDY_DONE;
    if (*queued >= 0)
        *slot = s->queue[*queued].grid_slot;
    else if (s->sampler.kind == DL_SAMPLER_GRID) {
        *slot = grid_free_slot(s);
        double total = grid_total(s);
        if (total > 0 && (double)*slot >= total)
            return DL_STUDY_DONE;
    }
    return DL_OK;
}

/* With the lock held: starts the next trial in the journal, or DL_STUDY_DONE. */
static int ask_locked(dl_study *s, dl_trial **trial)
{
    DL_TRY(dl_tune_journal_refresh(s));
    DL_TRY(recover_locked(s));
    int queued, rc;
    long slot;
    if ((rc = next_trial(s, &queued, &slot)) != DL_OK)
        return rc;
    int number = s->ntrials;
    DL_TRY(dl_tune_journal_append(s, dl_tune_journal_start(s, slot, queued), 1));
    if (number >= s->ntrials)
        return dl_error(DL_ERR, "study %s: trial %d was not recorded", s->name, number);
    s->trials[number]->mine = 1;
    *trial = s->trials[number];
    return DL_OK;
}

int dl_study_ask(dl_study *s, dl_trial **trial)
{
    *trial = NULL;
    DL_TRY(dl_tune_journal_lock(s));
    int rc = ask_locked(s, trial);
    dl_tune_journal_unlock(s);
    if (rc == DL_OK)
        heartbeat_maybe(s);
    return rc;
}

static int suggest(dl_trial *t, const dl_tune_param *dist, double *value)
{
    dl_study *s = t->study;
    if (t->state != DL_TRIAL_RUNNING || !t->mine)
        return dl_error(DL_EINVAL, "trial %d of study %s is not running here", t->number, s->name);
    const dl_tune_param *old = dl_trial_param_find(t, dist->name);
    if (old) {
        if (!dl_tune_history_same_dist(old, dist))
            return dl_error(DL_EINVAL,
                            "trial %d: parameter \"%s\" was suggested before with another "
                            "distribution",
                            t->number, dist->name);
        *value = old->value;
        return DL_OK;
    }
    double v;
    if (!dl_tune_journal_fixed_value(t, dist, &v))
        DL_TRY(sample(s, t, dist, &v));
    dl_tune_param p = *dist;
    p.value = v;
    DL_TRY(dl_tune_journal_commit(s, dl_tune_journal_param(t->number, &p), 0));
    *value = v;
    return DL_OK;
}

int dl_trial_suggest_float(dl_trial *t, const char *name, double lo, double hi, int log,
                           double *value)
{
    if (!name || !*name)
        return dl_error(DL_EINVAL, "trial:float: expected a parameter name");
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return dl_error(DL_EINVAL, "trial:float(\"%s\"): bounds [%g, %g]: expected lo <= hi", name,
                        lo, hi);
    if (log && lo <= 0)
        return dl_error(DL_EINVAL, "trial:float(\"%s\"): log scale needs lo > 0 (got %g)", name,
                        lo);
    dl_tune_param d = {name, DL_PARAM_FLOAT, lo, hi, !!log, 0, NULL, 0};
    return suggest(t, &d, value);
}

int dl_trial_suggest_int(dl_trial *t, const char *name, long lo, long hi, int log, long *value)
{
    if (!name || !*name)
        return dl_error(DL_EINVAL, "trial:int: expected a parameter name");
    if (lo > hi)
        return dl_error(DL_EINVAL, "trial:int(\"%s\"): bounds [%ld, %ld]: expected lo <= hi", name,
                        lo, hi);
    if (log && lo < 1)
        return dl_error(DL_EINVAL, "trial:int(\"%s\"): log scale needs lo >= 1 (got %ld)", name,
                        lo);
    dl_tune_param d = {name, DL_PARAM_INT, (double)lo, (double)hi, !!log, 0, NULL, 0};
    double v;
    DL_TRY(suggest(t, &d, &v));
    *value = (long)llround(v);
    return DL_OK;
}

int dl_trial_suggest_choice(dl_trial *t, const char *name, const char *const *choices, int n,
                            int *index)
{
    if (!name || !*name)
        return dl_error(DL_EINVAL, "trial:choice: expected a parameter name");
    if (!choices || n < 1)
        return dl_error(DL_EINVAL, "trial:choice(\"%s\"): expected at least one choice", name);
    for (int i = 0; i < n; i++)
        if (!choices[i])
            return dl_error(DL_EINVAL, "trial:choice(\"%s\"): choice %d is missing", name, i + 1);
    dl_tune_param d = {name, DL_PARAM_CHOICE, 0, 0, 0, n, choices, 0};
    double v;
    DL_TRY(suggest(t, &d, &v));
    *index = (int)v;
    return DL_OK;
}

int dl_trial_report(dl_trial *t, long step, double value)
{
    if (t->state != DL_TRIAL_RUNNING || !t->mine)
        return dl_error(DL_EINVAL, "trial %d: report on a trial that is not running here",
                        t->number);
    DL_TRY(dl_tune_journal_commit(t->study, dl_tune_journal_report(t->number, step, value), 0));
    heartbeat_maybe(t->study);
    return DL_OK;
}

int dl_trial_should_prune(dl_trial *t)
{
    dl_study *s = t->study;
    if (s->pruner.kind == DL_PRUNER_NONE || t->state != DL_TRIAL_RUNNING || t->nint == 0)
        return 0;
    DL_TRY(dl_tune_journal_read(s));
    dl_tune_history h;
    dl_tune_trial_history(s, &h);
    return dl_tune_pruner_judge(&s->pruner, &h, t->number, &t->rung_checked);
}

int dl_trial_set_attr(dl_trial *t, const char *key, const char *value)
{
    if (!key || !*key || !value)
        return dl_error(DL_EINVAL, "trial %d: attribute needs a key and a value", t->number);
    return dl_tune_journal_commit(t->study, dl_tune_journal_attr(t->number, key, value), 0);
}

static int finish(dl_study *s, dl_trial *t, dl_trial_state state, double value, const char *reason)
{
    if (!t->mine || t->study != s)
        return dl_error(DL_EINVAL, "trial %d was not asked by this study handle", t->number);
    if (state == DL_TRIAL_COMPLETE && !isfinite(value)) {
        state = DL_TRIAL_FAILED;
        reason = "the objective returned a non-finite value";
    }
    if (state == DL_TRIAL_PRUNED && isnan(value))
        value = t->nint ? t->ivals[t->nint - 1] : NAN;
    if (state == DL_TRIAL_FAILED)
        value = NAN;
    int rc = dl_tune_journal_lock(s);
    if (rc < 0)
        return rc;
    rc = dl_tune_journal_refresh(s);
    if (rc == DL_OK && t->state != DL_TRIAL_RUNNING)
        rc = dl_error(DL_EINVAL, "trial %d of study %s is already %s%s%s", t->number, s->name,
                      dl_trial_state_name(t->state), dl_trial_attr(t, "reason") ? ": " : "",
                      dl_trial_attr(t, "reason") ? dl_trial_attr(t, "reason") : "");
    if (rc == DL_OK)
        rc = dl_tune_journal_append(s, dl_tune_journal_finish(t->number, state, value, reason), 1);
    dl_tune_journal_unlock(s);
    heartbeat_maybe(s);
    return rc;
}

int dl_study_tell(dl_study *s, dl_trial *t, dl_trial_state state, double value)
{
    if (state <= DL_TRIAL_RUNNING || state > DL_TRIAL_FAILED)
        return dl_error(DL_EINVAL, "trial %d: tell needs complete, pruned or failed", t->number);
    return finish(s, t, state, value, NULL);
}

int dl_study_reuse(dl_study *s, dl_trial *t)
{
    if (t->nparams == 0)
        return 0;
    for (int i = 0; i < s->ntrials; i++) {
        const dl_trial *o = s->trials[i];
        if (o == t || o->state != DL_TRIAL_COMPLETE || o->nparams != t->nparams)
            continue;
        int same = 1;
        for (int j = 0; same && j < t->nparams; j++) {
            const dl_tune_param *p = &t->params[j], *q = dl_trial_param_find(o, p->name);
            same = q && dl_tune_history_same_dist(p, q) && p->value == q->value;
        }
        if (!same)
            continue;
        char num[32];
        snprintf(num, sizeof num, "%d", o->number);
        double v = o->value;
        DL_TRY(dl_trial_set_attr(t, "reused_from", num));
        DL_TRY(finish(s, t, DL_TRIAL_COMPLETE, v, NULL));
        return 1;
    }
    return 0;
}

/* --- reading ------------------------------------------------------------------------ */

const char *dl_study_name(const dl_study *s) { return s->name; }
int dl_study_direction(const dl_study *s) { return s->direction; }
const char *dl_study_dir(const dl_study *s) { return s->dir; }
int dl_study_count(const dl_study *s) { return s->ntrials; }
int dl_study_skipped_lines(const dl_study *s) { return s->skipped; }
long dl_study_first_skipped_line(const dl_study *s) { return s->first_skipped; }

const dl_trial *dl_study_trial(const dl_study *s, int i)
{
    return i >= 0 && i < s->ntrials ? s->trials[i] : NULL;
}

const dl_trial *dl_study_best(const dl_study *s)
{
    const dl_trial *best = NULL;
    for (int i = 0; i < s->ntrials; i++) {
        const dl_trial *t = s->trials[i];
        if (t->state == DL_TRIAL_COMPLETE &&
            (!best || dl_tune_history_loss(s->direction, t->value) <
                          dl_tune_history_loss(s->direction, best->value)))
            best = t;
    }
    return best;
}
