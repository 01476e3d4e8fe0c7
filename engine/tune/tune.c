/* tune.c - studies and trials: the journal on disk, locking, recovery of lost trials */
#include "engine/tune/tune.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/tune/tune_study.h"

/* Journal records, one JSON object per line ("op" says which):
 *   study   {name, direction, version}                  first line
 *   start   {trial, host, pid, pstart, time, grid, queue?}
 *   param   {trial, name, kind, lo, hi, log, choices?, value}
 *   report  {trial, step, value}
 *   attr    {trial, key, value}
 *   finish  {trial, state, value, time, reason?}       first finish wins
 *   enqueue {queue, params: [param...], grid, from}    a lost trial's parameters
 */

#define JOURNAL "journal.jsonl"
#define LOCKFILE "journal.lock"

const char *dl_trial_state_name(dl_trial_state state)
{
    switch (state) {
    case DL_TRIAL_RUNNING: return "running";
    case DL_TRIAL_COMPLETE: return "complete";
    case DL_TRIAL_PRUNED: return "pruned";
    case DL_TRIAL_FAILED: return "failed";
    }
    return "?";
}

static int state_parse(const char *name)
{
    for (int i = 0; i <= DL_TRIAL_FAILED; i++)
        if (name && strcmp(name, dl_trial_state_name((dl_trial_state)i)) == 0)
            return i;
    return -1;
}

static const char *kind_name(dl_param_kind k)
{
    return k == DL_PARAM_FLOAT ? "float" : k == DL_PARAM_INT ? "int" : "choice";
}

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

/* --- trials ---------------------------------------------------------------------- */

/* Frees a parameter's own copies of its name and choices. */
static void param_free(dl_tune_param *p)
{
    free((char *)p->name);
    for (int j = 0; p->choices && j < p->n_choices; j++)
        free((char *)p->choices[j]);
    free((char **)p->choices);
}

static void trial_free(dl_trial *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nparams; i++)
        param_free(&t->params[i]);
    free(t->params);
    dl_tune_sampler_joint_done(&t->joint);
    free(t->steps);
    free(t->ivals);
    cJSON_Delete(t->attrs);
    cJSON_Delete(t->fixed);
    free(t);
}

static dl_trial *trial_get(dl_study *s, int number)
{
    return number >= 0 && number < s->ntrials ? s->trials[number] : NULL;
}

/* A copy of dist with value in *q, name and choices its own (param_free). */
static int param_copy(dl_tune_param *q, const dl_tune_param *dist, double value)
{
    *q = *dist;
    q->choices = NULL;
    q->value = value;
    char *name = strdup(dist->name);
    if (!name)
        return dl_error(DL_ENOMEM, "study: out of memory");
    q->name = name;
    if (dist->kind != DL_PARAM_CHOICE)
        return DL_OK;
    char **c = calloc((size_t)dist->n_choices, sizeof *c);
    q->choices = (const char *const *)c;
    for (int i = 0; c && i < dist->n_choices; i++)
        if (!(c[i] = strdup(dist->choices[i]))) {
            param_free(q);
            return dl_error(DL_ENOMEM, "study: out of memory");
        }
    if (!c) {
        param_free(q);
        return dl_error(DL_ENOMEM, "study: out of memory");
    }
    return DL_OK;
}

/* Adds a copy of dist with value to t. */
static int trial_add_param(dl_trial *t, const dl_tune_param *dist, double value)
{
    if (t->nparams == t->cap_params) {
        int cap = t->cap_params ? 2 * t->cap_params : 8;
        dl_tune_param *p = realloc(t->params, (size_t)cap * sizeof *p);
        if (!p)
            return dl_error(DL_ENOMEM, "study: out of memory");
        t->params = p;
        t->cap_params = cap;
    }
    DL_TRY(param_copy(&t->params[t->nparams], dist, value));
    t->nparams++;
    return DL_OK;
}

static int trial_set_intermediate(dl_trial *t, long step, double value)
{
    int i = t->nint;
    while (i > 0 && t->steps[i - 1] > step)
        i--;
    if (i > 0 && t->steps[i - 1] == step) {
        t->ivals[i - 1] = value;
        return DL_OK;
    }
    if (t->nint == t->cap_int) {
        int cap = t->cap_int ? 2 * t->cap_int : 16;
        long *st = realloc(t->steps, (size_t)cap * sizeof *st);
        if (!st)
            return dl_error(DL_ENOMEM, "study: out of memory");
        t->steps = st;
        double *v = realloc(t->ivals, (size_t)cap * sizeof *v);
        if (!v)
            return dl_error(DL_ENOMEM, "study: out of memory");
        t->ivals = v;
        t->cap_int = cap;
    }
    memmove(t->steps + i + 1, t->steps + i, (size_t)(t->nint - i) * sizeof *t->steps);
    memmove(t->ivals + i + 1, t->ivals + i, (size_t)(t->nint - i) * sizeof *t->ivals);
    t->steps[i] = step;
    t->ivals[i] = value;
    t->nint++;
    return DL_OK;
}

/* --- records: JSON <-> structures -------------------------------------------- */

static double num_of(const cJSON *o, const char *key, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(v))
        return v->valuedouble;
    if (cJSON_IsNull(v))
        return NAN;
    return dflt;
}

static const char *str_of(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* cJSON writes NaN as null; keep that explicit. */
static void add_num(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

/* A param object (no "op") from a distribution and value. */
static cJSON *param_json(const dl_tune_param *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "name", p->name);
    cJSON_AddStringToObject(o, "kind", kind_name(p->kind));
    if (p->kind == DL_PARAM_CHOICE) {
        cJSON *a = cJSON_AddArrayToObject(o, "choices");
        for (int i = 0; a && i < p->n_choices; i++)
            cJSON_AddItemToArray(a, cJSON_CreateString(p->choices[i]));
    } else {
        cJSON_AddNumberToObject(o, "lo", p->lo);
        cJSON_AddNumberToObject(o, "hi", p->hi);
        cJSON_AddBoolToObject(o, "log", p->log);
    }
    cJSON_AddNumberToObject(o, "value", p->value);
    return o;
}

/* Reads a param object into *p; choices go to a temporary array owned by
 * the caller (free with free(), strings borrowed from o). */
static int param_parse(const cJSON *o, dl_tune_param *p, const char ***choices)
{
    memset(p, 0, sizeof *p);
    *choices = NULL;
    const char *name = str_of(o, "name"), *kind = str_of(o, "kind");
    if (!name || !kind)
        return -1;
    p->name = name;
    p->value = num_of(o, "value", NAN);
    if (!isfinite(p->value))
        return -1;
    if (strcmp(kind, "choice") == 0) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "choices");
        int n = cJSON_GetArraySize(a);
        if (!cJSON_IsArray(a) || n < 1)
            return -1;
        const char **c = calloc((size_t)n, sizeof *c);
        if (!c)
            return -1;
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a)
        {
            if (!cJSON_IsString(e)) {
                free(c);
                return -1;
            }
            c[i++] = e->valuestring;
        }
        p->kind = DL_PARAM_CHOICE;
        p->n_choices = n;
        p->choices = c;
        *choices = c;
        if (p->value < 0 || p->value >= n)
            goto bad;
        return 0;
    }
    p->kind = strcmp(kind, "int") == 0 ? DL_PARAM_INT : DL_PARAM_FLOAT;
    if (p->kind == DL_PARAM_FLOAT && strcmp(kind, "float") != 0)
        return -1;
    p->lo = num_of(o, "lo", NAN);
    p->hi = num_of(o, "hi", NAN);
    const cJSON *lg = cJSON_GetObjectItemCaseSensitive(o, "log");
    p->log = cJSON_IsTrue(lg);
    if (!(p->lo <= p->hi))
        return -1;
    return 0;
bad:
    free(*choices);
    *choices = NULL;
    return -1;
}

/* Applies one record to the in-memory study. Returns 0, or -1 when the
 * record does not fit (counted as skipped, never fatal: another version
 * or a bug elsewhere must not make a study unreadable). */
static int apply_record(dl_study *s, const cJSON *r)
{
    const char *op = str_of(r, "op");
    if (!op)
        return -1;
    if (strcmp(op, "study") == 0) {
        if (s->created)
            return -1;
        s->created = 1;
        const char *d = str_of(r, "direction");
        s->direction = d && strcmp(d, "maximize") == 0 ? DL_STUDY_MAXIMIZE : DL_STUDY_MINIMIZE;
        return 0;
    }
    if (strcmp(op, "enqueue") == 0) {
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(r, "params");
        if ((int)num_of(r, "queue", -1) != s->nqueue || !cJSON_IsArray(params))
            return -1;
        if (s->nqueue == s->cap_queue) {
            int cap = s->cap_queue ? 2 * s->cap_queue : 8;
            tune_queued *q = realloc(s->queue, (size_t)cap * sizeof *q);
            if (!q)
                return -1;
            s->queue = q;
            s->cap_queue = cap;
        }
        tune_queued *q = &s->queue[s->nqueue];
        q->params = cJSON_Duplicate(params, 1);
        if (!q->params)
            return -1;
        q->grid_slot = (long)num_of(r, "grid", -1);
        q->claimed = 0;
        s->nqueue++;
        return 0;
    }
    double numd = num_of(r, "trial", -1);
    if (!(numd >= 0) || numd != floor(numd) || numd > 1e9)
        return -1;
    int num = (int)numd;
    if (strcmp(op, "start") == 0) {
        if (num != s->ntrials)
            return -1;
        if (s->ntrials == s->cap_trials) {
            int cap = s->cap_trials ? 2 * s->cap_trials : 64;
            dl_trial **tt = realloc(s->trials, (size_t)cap * sizeof *tt);
            if (!tt)
                return -1;
            s->trials = tt;
            s->cap_trials = cap;
        }
        dl_trial *t = calloc(1, sizeof *t);
        if (!t)
            return -1;
        t->study = s;
        t->number = num;
        t->state = DL_TRIAL_RUNNING;
        t->value = NAN;
        t->attrs = cJSON_CreateObject();
        const char *host = str_of(r, "host");
        snprintf(t->host, sizeof t->host, "%s", host ? host : "");
        t->pid = (long)num_of(r, "pid", 0);
        t->pstart = (unsigned long long)num_of(r, "pstart", 0);
        t->t_start = num_of(r, "time", 0);
        t->grid_slot = (long)num_of(r, "grid", -1);
        int qi = (int)num_of(r, "queue", -1);
        if (qi >= 0 && qi < s->nqueue && !s->queue[qi].claimed) {
            s->queue[qi].claimed = 1;
            t->fixed = cJSON_Duplicate(s->queue[qi].params, 1);
        }
        s->trials[s->ntrials++] = t;
        return 0;
    }
    dl_trial *t = trial_get(s, num);
    if (!t)
        return -1;
    if (strcmp(op, "param") == 0) {
        dl_tune_param p;
        const char **choices;
        if (param_parse(r, &p, &choices) != 0 || dl_trial_param_find(t, p.name)) {
            free(choices);
            return -1;
        }
        int rc = trial_add_param(t, &p, p.value);
        free(choices);
        return rc < 0 ? -1 : 0;
    }
    if (strcmp(op, "report") == 0) {
        double step = num_of(r, "step", NAN);
        if (!isfinite(step))
            return -1;
        return trial_set_intermediate(t, (long)step, num_of(r, "value", NAN)) < 0 ? -1 : 0;
    }
    if (strcmp(op, "attr") == 0) {
        const char *key = str_of(r, "key"), *val = str_of(r, "value");
        if (!key || !val || !t->attrs)
            return -1;
        cJSON_DeleteItemFromObjectCaseSensitive(t->attrs, key);
        cJSON_AddStringToObject(t->attrs, key, val);
        return 0;
    }
    if (strcmp(op, "finish") == 0) {
        int st = state_parse(str_of(r, "state"));
        if (st <= DL_TRIAL_RUNNING || t->state != DL_TRIAL_RUNNING)
            return -1;
        t->state = (dl_trial_state)st;
        t->value = num_of(r, "value", NAN);
        t->t_end = num_of(r, "time", 0);
        const char *why = str_of(r, "reason");
        if (why && t->attrs) {
            cJSON_DeleteItemFromObjectCaseSensitive(t->attrs, "reason");
            cJSON_AddStringToObject(t->attrs, "reason", why);
        }
        return 0;
    }
    return -1;
}

/* --- the journal --------------------------------------------------------------- */

static int persistent(const dl_study *s) { return s->fd_journal >= 0; }

static int lock_ex(dl_study *s)
{
    if (!persistent(s))
        return DL_OK;
    if (dl_fs_flock(s->fd_lock, LOCK_EX) != 0)
        return dl_error(DL_EIO, "%s/" LOCKFILE ": flock: %s", s->dir, strerror(errno));
    s->locked = 1;
    return DL_OK;
}

static void unlock(dl_study *s)
{
    if (persistent(s) && s->locked) {
        dl_fs_flock(s->fd_lock, LOCK_UN);
        s->locked = 0;
    }
}

static void skip_line(dl_study *s)
{
    s->skipped++;
    if (!s->first_skipped)
        s->first_skipped = s->lines;
}

/* Reads and applies the journal lines after read_off. Under the exclusive
 * lock a last line without its newline was torn (its writer died mid-write:
 * writers hold the lock): it is terminated with a newline so the next
 * record starts on its own line, and applied when it happens to be a
 * whole record, else skipped as unparseable. Without the lock it is left
 * for later (a writer may be busy with it). */
static int journal_refresh(dl_study *s)
{
    if (!persistent(s))
        return DL_OK;
    struct stat st;
    if (fstat(s->fd_journal, &st) != 0)
        return dl_error(DL_EIO, "%s/" JOURNAL ": %s", s->dir, strerror(errno));
    if (st.st_size <= s->read_off)
        return DL_OK;
    size_t n = (size_t)(st.st_size - s->read_off);
    char *buf = malloc(n + 1);
    if (!buf)
        return dl_error(DL_ENOMEM, "study: out of memory reading the journal");
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(s->fd_journal, buf + got, n - got, s->read_off + (off_t)got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    buf[got] = 0;
    size_t pos = 0;
    while (pos < got) {
        char *nl = memchr(buf + pos, '\n', got - pos);
        if (!nl)
            break;
        *nl = 0;
        s->lines++;
        if (nl > buf + pos) {
            cJSON *r = cJSON_Parse(buf + pos);
            if (!r || apply_record(s, r) != 0)
                skip_line(s);
            cJSON_Delete(r);
        }
        pos = (size_t)(nl - buf) + 1;
    }
    s->read_off += (off_t)pos;
    if (pos < got && s->locked) {
        if (write(s->fd_journal, "\n", 1) == 1) {
            s->read_off += (off_t)(got - pos) + 1;
            s->lines++;
            cJSON *r = memchr(buf + pos, 0, got - pos) ? NULL : cJSON_Parse(buf + pos);
            if (!r || apply_record(s, r) != 0)
                skip_line(s);
            cJSON_Delete(r);
        }
    }
    free(buf);
    return DL_OK;
}

/* Appends r (and applies it) with the lock held and the journal read to
 * its end. Consumes r. */
static int journal_append(dl_study *s, cJSON *r, int sync)
{
    if (!r)
        return dl_error(DL_ENOMEM, "study: out of memory");
    int rc = DL_OK;
    if (persistent(s)) {
        char *text = cJSON_PrintUnformatted(r);
        if (!text) {
            cJSON_Delete(r);
            return dl_error(DL_ENOMEM, "study: out of memory");
        }
        size_t n = strlen(text);
        text[n] = '\n'; /* replaces the terminator: the line goes out in one write */
        size_t done = 0;
        while (done < n + 1) {
            ssize_t k = write(s->fd_journal, text + done, n + 1 - done);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                rc = dl_error(DL_EIO, "%s/" JOURNAL ": write: %s", s->dir,
                              k < 0 ? strerror(errno) : "short write");
                break;
            }
            done += (size_t)k;
        }
        free(text);
        if (rc == DL_OK && sync)
            fdatasync(s->fd_journal);
        if (rc < 0) {
            /* a partial line is terminated and skipped by the next writer */
            cJSON_Delete(r);
            return rc;
        }
        s->read_off += (off_t)(n + 1);
    }
    if (apply_record(s, r) != 0)
        rc = dl_error(DL_ERR, "study %s: internal error applying a record", s->name);
    cJSON_Delete(r);
    return rc;
}

static cJSON *record(const char *op, int trial)
{
    cJSON *r = cJSON_CreateObject();
    if (!r)
        return NULL;
    cJSON_AddStringToObject(r, "op", op);
    if (trial >= 0)
        cJSON_AddNumberToObject(r, "trial", trial);
    return r;
}

/* Lock, read to the end, append one record, unlock. */
static int commit(dl_study *s, cJSON *r, int sync)
{
    int rc = lock_ex(s);
    if (rc < 0) {
        cJSON_Delete(r);
        return rc;
    }
    rc = journal_refresh(s);
    if (rc == DL_OK)
        rc = journal_append(s, r, sync);
    else
        cJSON_Delete(r);
    unlock(s);
    return rc;
}

/* --- heartbeats and recovery ------------------------------------------------------ */

static void heartbeat_path(const dl_study *s, const char *host, long pid, char *path, size_t n)
{
    snprintf(path, n, "%s/workers/%s-%ld", s->dir, host, pid);
}

int dl_study_heartbeat(dl_study *s)
{
    if (!persistent(s))
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
    if (persistent(s) && dl_clock_wall_s() - s->last_hb > s->hb_timeout / 4)
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
        cJSON *f = record("finish", t->number);
        if (!f)
            return dl_error(DL_ENOMEM, "study: out of memory");
        cJSON_AddStringToObject(f, "state", "failed");
        cJSON_AddNullToObject(f, "value");
        cJSON_AddNumberToObject(f, "time", dl_clock_wall_s());
        cJSON_AddStringToObject(f, "reason", why);
        DL_TRY(journal_append(s, f, 0));
        if (t->nparams == 0 && !t->fixed)
            continue;
        cJSON *q = record("enqueue", -1);
        cJSON *params = t->fixed ? cJSON_Duplicate(t->fixed, 1) : cJSON_CreateArray();
        if (!q || !params) {
            cJSON_Delete(q);
            cJSON_Delete(params);
            return dl_error(DL_ENOMEM, "study: out of memory");
        }
        /* parameters suggested before the loss override the queued ones */
        for (int j = 0; j < t->nparams; j++) {
            int idx = 0, found = -1;
            const cJSON *e;
            cJSON_ArrayForEach(e, params)
            {
                const char *n = str_of(e, "name");
                if (n && strcmp(n, t->params[j].name) == 0)
                    found = idx;
                idx++;
            }
            if (found >= 0)
                cJSON_DeleteItemFromArray(params, found);
            cJSON_AddItemToArray(params, param_json(&t->params[j]));
        }
        cJSON_AddNumberToObject(q, "queue", s->nqueue);
        cJSON_AddItemToObject(q, "params", params);
        cJSON_AddNumberToObject(q, "grid", (double)t->grid_slot);
        cJSON_AddNumberToObject(q, "from", t->number);
        DL_TRY(journal_append(s, q, 0));
    }
    return DL_OK;
}

int dl_study_refresh(dl_study *s)
{
    if (!persistent(s))
        return DL_OK;
    int rc = lock_ex(s);
    if (rc < 0)
        return rc;
    rc = journal_refresh(s);
    if (rc == DL_OK)
        rc = recover_locked(s);
    unlock(s);
    return rc;
}

/* --- opening and closing ------------------------------------------------------------ */

static int name_ok(const char *name)
{
    if (!name || !*name || strlen(name) >= 128 || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0)
        return 0;
    for (const char *p = name; *p; p++)
        if (*p == '/' || (unsigned char)*p < 32)
            return 0;
    return 1;
}

int dl_study_open(dl_study **out, const char *dir, const char *name, int direction,
                  const dl_sampler_config *sampler, const dl_pruner_config *pruner, uint64_t seed)
{
    *out = NULL;
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
    dl_study *s = calloc(1, sizeof *s);
    if (!s)
        return dl_error(DL_ENOMEM, "study: out of memory");
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
    if (!dir) {
        s->created = 1;
        *out = s;
        return DL_OK;
    }
    int rc = DL_OK;
    char path[1200];
    if (snprintf(s->dir, sizeof s->dir, "%s/%s", dir, name) >= (int)sizeof s->dir) {
        rc = dl_error(DL_EINVAL, "study folder %s/%s: path too long", dir, name);
        goto fail;
    }
    snprintf(path, sizeof path, "%s/workers", s->dir);
    if ((rc = dl_fs_mkdir_p(path)) != DL_OK)
        goto fail;
    snprintf(path, sizeof path, "%s/" LOCKFILE, s->dir);
    s->fd_lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->fd_lock < 0) {
        rc = dl_error(DL_EIO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    snprintf(path, sizeof path, "%s/" JOURNAL, s->dir);
    s->fd_journal = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (s->fd_journal < 0) {
        rc = dl_error(DL_EIO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if ((rc = lock_ex(s)) < 0)
        goto fail;
    rc = journal_refresh(s);
    if (rc == DL_OK && !s->created) {
        cJSON *r = record("study", -1);
        if (r) {
            cJSON_AddStringToObject(r, "name", name);
            cJSON_AddStringToObject(r, "direction",
                                    direction == DL_STUDY_MAXIMIZE ? "maximize" : "minimize");
            cJSON_AddNumberToObject(r, "version", 1);
            cJSON_AddNumberToObject(r, "time", dl_clock_wall_s());
        }
        rc = journal_append(s, r, 1);
    }
    if (rc == DL_OK && s->direction != direction)
        rc = dl_error(DL_EINVAL, "study %s in %s was created to %s, not to %s", name, s->dir,
                      s->direction == DL_STUDY_MAXIMIZE ? "maximize" : "minimize",
                      direction == DL_STUDY_MAXIMIZE ? "maximize" : "minimize");
    if (rc == DL_OK)
        rc = recover_locked(s);
    unlock(s);
    if (rc < 0)
        goto fail;
    *out = s;
    return DL_OK;
fail:
    dl_study_destroy(s);
    return rc;
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
        trial_free(s->trials[i]);
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

/* --- the history samplers and pruners read ----------------------------------- */

/* Views every trial of s into *h (in s->hist, valid until the next change). */
static int history_of(dl_study *s, dl_tune_history *h)
{
    if (s->ntrials > s->cap_hist) {
        int cap = s->ntrials + 64;
        dl_tune_entry *e = realloc(s->hist, (size_t)cap * sizeof *e);
        if (!e)
            return dl_error(DL_ENOMEM, "study: out of memory");
        s->hist = e;
        s->cap_hist = cap;
    }
    for (int i = 0; i < s->ntrials; i++) {
        const dl_trial *t = s->trials[i];
        s->hist[i] = (dl_tune_entry){t->number, t->state,   t->value, t->grid_slot, t->params,
                                     t->nparams, t->steps, t->ivals, t->nint};
    }
    h->direction = s->direction;
    h->trials = s->hist;
    h->ntrials = s->ntrials;
    return DL_OK;
}

/* The sampler's value of dist for t, drawn from the study's history. */
static int sample(dl_study *s, dl_trial *t, const dl_tune_param *dist, double *value)
{
    dl_tune_history h;
    DL_TRY(history_of(s, &h));
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

int dl_study_ask(dl_study *s, dl_trial **trial)
{
    *trial = NULL;
    int rc = lock_ex(s);
    if (rc < 0)
        return rc;
    if ((rc = journal_refresh(s)) < 0 || (rc = recover_locked(s)) < 0)
        goto out;
    int queued = -1, pending = 0, active = 0;
    for (int i = 0; i < s->nqueue; i++)
        if (!s->queue[i].claimed) {
            pending++;
            if (queued < 0)
                queued = i;
        }
    for (int i = 0; i < s->ntrials; i++)
        active += s->trials[i]->state != DL_TRIAL_FAILED;
    if (queued < 0 && s->budget && active + pending >= s->budget) {
        rc = DL_STUDY_DONE;
        goto out;
    }
    long slot = -1;
    if (queued >= 0)
        slot = s->queue[queued].grid_slot;
    else if (s->sampler.kind == DL_SAMPLER_GRID) {
        slot = grid_free_slot(s);
        double total = grid_total(s);
        if (total > 0 && (double)slot >= total) {
            rc = DL_STUDY_DONE;
            goto out;
        }
    }
    double now = dl_clock_wall_s();
    cJSON *r = record("start", s->ntrials);
    if (r) {
        cJSON_AddStringToObject(r, "host", s->host);
        cJSON_AddNumberToObject(r, "pid", (double)s->pid);
        cJSON_AddNumberToObject(r, "pstart", (double)s->pstart);
        cJSON_AddNumberToObject(r, "time", now);
        cJSON_AddNumberToObject(r, "grid", (double)slot);
        if (queued >= 0)
            cJSON_AddNumberToObject(r, "queue", queued);
    }
    int number = s->ntrials;
    if ((rc = journal_append(s, r, 1)) < 0)
        goto out;
    if (number >= s->ntrials) {
        rc = dl_error(DL_ERR, "study %s: trial %d was not recorded", s->name, number);
        goto out;
    }
    s->trials[number]->mine = 1;
    *trial = s->trials[number];
    rc = DL_OK;
out:
    unlock(s);
    if (rc == DL_OK)
        heartbeat_maybe(s);
    return rc;
}

/* The queued value of name for a re-run trial when it fits dist. */
static int fixed_value(const dl_trial *t, const dl_tune_param *dist, double *value)
{
    if (!t->fixed)
        return 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, t->fixed)
    {
        const char *n = str_of(e, "name");
        if (!n || strcmp(n, dist->name) != 0)
            continue;
        dl_tune_param p;
        const char **choices;
        if (param_parse(e, &p, &choices) != 0)
            return 0;
        int same = dl_tune_history_same_dist(&p, dist);
        free(choices);
        if (!same)
            return 0;
        *value = p.value;
        return 1;
    }
    return 0;
}

static int suggest(dl_trial *t, const dl_tune_param *dist, double *value)
{
    dl_study *s = t->study;
    if (t->state != DL_TRIAL_RUNNING || !t->mine)
        return dl_error(DL_EINVAL, "trial %d of study %s is not running here", t->number,
                        s->name);
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
    if (!fixed_value(t, dist, &v))
        DL_TRY(sample(s, t, dist, &v));
    dl_tune_param p = *dist;
    p.value = v;
    cJSON *r = record("param", t->number);
    cJSON *pj = param_json(&p);
    if (!r || !pj) {
        cJSON_Delete(r);
        cJSON_Delete(pj);
        return dl_error(DL_ENOMEM, "study: out of memory");
    }
    cJSON *e = pj->child;
    pj->child = NULL;
    cJSON_Delete(pj);
    while (e) { /* move the param's members into the record */
        cJSON *next = e->next;
        e->prev = e->next = NULL;
        cJSON_AddItemToObject(r, e->string, e);
        e = next;
    }
    DL_TRY(commit(s, r, 0));
    *value = v;
    return DL_OK;
}

int dl_trial_suggest_float(dl_trial *t, const char *name, double lo, double hi, int log,
                           double *value)
{
    if (!name || !*name)
        return dl_error(DL_EINVAL, "trial:float: expected a parameter name");
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return dl_error(DL_EINVAL, "trial:float(\"%s\"): bounds [%g, %g]: expected lo <= hi",
                        name, lo, hi);
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
        return dl_error(DL_EINVAL, "trial:int(\"%s\"): bounds [%ld, %ld]: expected lo <= hi",
                        name, lo, hi);
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
    cJSON *r = record("report", t->number);
    if (r) {
        cJSON_AddNumberToObject(r, "step", (double)step);
        add_num(r, "value", value);
    }
    DL_TRY(commit(t->study, r, 0));
    heartbeat_maybe(t->study);
    return DL_OK;
}

int dl_trial_should_prune(dl_trial *t)
{
    dl_study *s = t->study;
    if (s->pruner.kind == DL_PRUNER_NONE || t->state != DL_TRIAL_RUNNING || t->nint == 0)
        return 0;
    if (persistent(s)) {
        /* a shared lock is enough to read: writers hold the exclusive one */
        if (dl_fs_flock(s->fd_lock, LOCK_SH) != 0)
            return dl_error(DL_EIO, "%s/" LOCKFILE ": flock: %s", s->dir, strerror(errno));
        int rc = journal_refresh(s);
        dl_fs_flock(s->fd_lock, LOCK_UN);
        if (rc < 0)
            return rc;
    }
    dl_tune_history h;
    DL_TRY(history_of(s, &h));
    return dl_tune_pruner_judge(&s->pruner, &h, t->number, &t->rung_checked);
}

int dl_trial_set_attr(dl_trial *t, const char *key, const char *value)
{
    if (!key || !*key || !value)
        return dl_error(DL_EINVAL, "trial %d: attribute needs a key and a value", t->number);
    cJSON *r = record("attr", t->number);
    if (r) {
        cJSON_AddStringToObject(r, "key", key);
        cJSON_AddStringToObject(r, "value", value);
    }
    return commit(t->study, r, 0);
}

static int finish(dl_study *s, dl_trial *t, dl_trial_state state, double value,
                  const char *reason)
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
    int rc = lock_ex(s);
    if (rc < 0)
        return rc;
    rc = journal_refresh(s);
    if (rc == DL_OK && t->state != DL_TRIAL_RUNNING)
        rc = dl_error(DL_EINVAL, "trial %d of study %s is already %s%s%s", t->number, s->name,
                      dl_trial_state_name(t->state), dl_trial_attr(t, "reason") ? ": " : "",
                      dl_trial_attr(t, "reason") ? dl_trial_attr(t, "reason") : "");
    if (rc == DL_OK) {
        cJSON *r = record("finish", t->number);
        if (r) {
            cJSON_AddStringToObject(r, "state", dl_trial_state_name(state));
            add_num(r, "value", value);
            cJSON_AddNumberToObject(r, "time", dl_clock_wall_s());
            if (reason)
                cJSON_AddStringToObject(r, "reason", reason);
        }
        rc = journal_append(s, r, 1);
    }
    unlock(s);
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
            (!best || dl_tune_history_loss(s->direction, t->value) < dl_tune_history_loss(s->direction, best->value)))
            best = t;
    }
    return best;
}

int dl_trial_number(const dl_trial *t) { return t->number; }
dl_trial_state dl_trial_state_of(const dl_trial *t) { return t->state; }
double dl_trial_value(const dl_trial *t) { return t->value; }
int dl_trial_param_count(const dl_trial *t) { return t->nparams; }
double dl_trial_start_time(const dl_trial *t) { return t->t_start; }
double dl_trial_end_time(const dl_trial *t) { return t->t_end; }

const dl_tune_param *dl_trial_param(const dl_trial *t, int i)
{
    return i >= 0 && i < t->nparams ? &t->params[i] : NULL;
}

const dl_tune_param *dl_trial_param_find(const dl_trial *t, const char *name)
{
    return dl_tune_history_find(t->params, t->nparams, name);
}

int dl_trial_intermediate(const dl_trial *t, long *steps, double *values, int cap)
{
    for (int i = 0; i < t->nint && i < cap; i++) {
        if (steps)
            steps[i] = t->steps[i];
        if (values)
            values[i] = t->ivals[i];
    }
    return t->nint;
}

const char *dl_trial_attr(const dl_trial *t, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t->attrs, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
