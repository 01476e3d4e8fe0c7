/* tune_journal.c - a study's journal: records <-> the study in memory, the lock, reads, appends */
#include "engine/tune/tune_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"

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

/* --- applying records ------------------------------------------------------------ */

/* Each apply_* returns 0, or -1 when the record does not fit (counted as
 * skipped, never fatal: another version or a bug elsewhere must not make a
 * study unreadable). */

static int apply_study(dl_study *s, const cJSON *r)
{
    if (s->created)
        return -1;
    s->created = 1;
    const char *d = str_of(r, "direction");
    s->direction = d && strcmp(d, "maximize") == 0 ? DL_STUDY_MAXIMIZE : DL_STUDY_MINIMIZE;
    return 0;
}

static int apply_enqueue(dl_study *s, const cJSON *r)
{
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

static dl_trial *apply_start(dl_study *s, const cJSON *r, int num)
{
    if (num != s->ntrials)
        return NULL;
    dl_trial *t = dl_tune_trial_add(s, num);
    if (!t)
        return NULL;
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
    return t;
}

static int apply_param(dl_trial *t, const cJSON *r)
{
    dl_tune_param p;
    const char **choices;
    if (param_parse(r, &p, &choices) != 0 || dl_trial_param_find(t, p.name)) {
        free(choices);
        return -1;
    }
    int rc = dl_tune_trial_add_param(t, &p, p.value);
    free(choices);
    return rc < 0 ? -1 : 0;
}

static int apply_report(dl_trial *t, const cJSON *r)
{
    double step = num_of(r, "step", NAN);
    if (!isfinite(step))
        return -1;
    return dl_tune_trial_set_intermediate(t, (long)step, num_of(r, "value", NAN)) < 0 ? -1 : 0;
}

static int apply_attr(dl_trial *t, const cJSON *r)
{
    const char *key = str_of(r, "key"), *val = str_of(r, "value");
    if (!key || !val)
        return -1;
    return dl_tune_trial_set_attr(t, key, val);
}

static int apply_finish(dl_trial *t, const cJSON *r)
{
    int st = state_parse(str_of(r, "state"));
    if (st <= DL_TRIAL_RUNNING || t->state != DL_TRIAL_RUNNING)
        return -1;
    t->state = (dl_trial_state)st;
    t->value = num_of(r, "value", NAN);
    t->t_end = num_of(r, "time", 0);
    const char *why = str_of(r, "reason");
    if (why)
        dl_tune_trial_set_attr(t, "reason", why);
    return 0;
}

/* A record about trial number num. */
static int apply_trial_record(dl_study *s, const char *op, int num, const cJSON *r)
{
    dl_trial *t;
    int rc = -1;
    if (strcmp(op, "start") == 0) {
        t = apply_start(s, r, num);
        rc = t ? 0 : -1;
    } else if (!(t = dl_tune_trial_get(s, num)))
        return -1;
    else if (strcmp(op, "param") == 0)
        rc = apply_param(t, r);
    else if (strcmp(op, "report") == 0)
        rc = apply_report(t, r);
    else if (strcmp(op, "attr") == 0)
        rc = apply_attr(t, r);
    else if (strcmp(op, "finish") == 0)
        rc = apply_finish(t, r);
    if (t)
        dl_tune_trial_sync(s, t); /* also after a failure: its arrays may have moved */
    return rc;
}

/* Applies one record to the in-memory study: 0, or -1 when it does not fit. */
static int apply_record(dl_study *s, const cJSON *r)
{
    const char *op = str_of(r, "op");
    if (!op)
        return -1;
    if (strcmp(op, "study") == 0)
        return apply_study(s, r);
    if (strcmp(op, "enqueue") == 0)
        return apply_enqueue(s, r);
    double numd = num_of(r, "trial", -1);
    if (!(numd >= 0) || numd != floor(numd) || numd > 1e9)
        return -1;
    return apply_trial_record(s, op, (int)numd, r);
}
/* --- the journal file --------------------------------------------------------- */

int dl_tune_journal_on_disk(const dl_study *s) { return s->fd_journal >= 0; }

int dl_tune_journal_open(dl_study *s)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/" DL_TUNE_LOCKFILE, s->dir);
    s->fd_lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->fd_lock < 0)
        return dl_error(DL_EIO, "%s: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/" DL_TUNE_JOURNAL, s->dir);
    s->fd_journal = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (s->fd_journal < 0)
        return dl_error(DL_EIO, "%s: %s", path, strerror(errno));
    return DL_OK;
}

int dl_tune_journal_lock(dl_study *s)
{
    if (!dl_tune_journal_on_disk(s))
        return DL_OK;
    if (dl_fs_flock(s->fd_lock, LOCK_EX) != 0)
        return dl_error(DL_EIO, "%s/" DL_TUNE_LOCKFILE ": flock: %s", s->dir, strerror(errno));
    s->locked = 1;
    return DL_OK;
}

void dl_tune_journal_unlock(dl_study *s)
{
    if (dl_tune_journal_on_disk(s) && s->locked) {
        dl_fs_flock(s->fd_lock, LOCK_UN);
        s->locked = 0;
    }
}

int dl_tune_journal_read(dl_study *s)
{
    if (!dl_tune_journal_on_disk(s))
        return DL_OK;
    /* a shared lock is enough to read: writers hold the exclusive one */
    if (dl_fs_flock(s->fd_lock, LOCK_SH) != 0)
        return dl_error(DL_EIO, "%s/" DL_TUNE_LOCKFILE ": flock: %s", s->dir, strerror(errno));
    int rc = dl_tune_journal_refresh(s);
    dl_fs_flock(s->fd_lock, LOCK_UN);
    return rc;
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
int dl_tune_journal_refresh(dl_study *s)
{
    if (!dl_tune_journal_on_disk(s))
        return DL_OK;
    struct stat st;
    if (fstat(s->fd_journal, &st) != 0)
        return dl_error(DL_EIO, "%s/" DL_TUNE_JOURNAL ": %s", s->dir, strerror(errno));
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
int dl_tune_journal_append(dl_study *s, cJSON *r, int sync)
{
    if (!r)
        return dl_error(DL_ENOMEM, "study: out of memory");
    int rc = DL_OK;
    if (dl_tune_journal_on_disk(s)) {
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
                rc = dl_error(DL_EIO, "%s/" DL_TUNE_JOURNAL ": write: %s", s->dir,
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

int dl_tune_journal_commit(dl_study *s, cJSON *r, int sync)
{
    int rc = dl_tune_journal_lock(s);
    if (rc < 0) {
        cJSON_Delete(r);
        return rc;
    }
    rc = dl_tune_journal_refresh(s);
    if (rc == DL_OK)
        rc = dl_tune_journal_append(s, r, sync);
    else
        cJSON_Delete(r);
    dl_tune_journal_unlock(s);
    return rc;
}

/* --- records ---------------------------------------------------------------------- */

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

cJSON *dl_tune_journal_study(const char *name, int direction)
{
    cJSON *r = record("study", -1);
    if (r) {
        cJSON_AddStringToObject(r, "name", name);
        cJSON_AddStringToObject(r, "direction",
                                direction == DL_STUDY_MAXIMIZE ? "maximize" : "minimize");
        cJSON_AddNumberToObject(r, "version", 1);
        cJSON_AddNumberToObject(r, "time", dl_clock_wall_s());
    }
    return r;
}

cJSON *dl_tune_journal_start(const dl_study *s, long grid_slot, int queued)
{
    double now = dl_clock_wall_s();
    cJSON *r = record("start", s->ntrials);
    if (r) {
        cJSON_AddStringToObject(r, "host", s->host);
        cJSON_AddNumberToObject(r, "pid", (double)s->pid);
        cJSON_AddNumberToObject(r, "pstart", (double)s->pstart);
        cJSON_AddNumberToObject(r, "time", now);
        cJSON_AddNumberToObject(r, "grid", (double)grid_slot);
        if (queued >= 0)
            cJSON_AddNumberToObject(r, "queue", queued);
    }
    return r;
}

cJSON *dl_tune_journal_param(int trial, const dl_tune_param *p)
{
    cJSON *r = record("param", trial);
    cJSON *pj = param_json(p);
    if (!r || !pj) {
        cJSON_Delete(r);
        cJSON_Delete(pj);
        return NULL;
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
    return r;
}

cJSON *dl_tune_journal_report(int trial, long step, double value)
{
    cJSON *r = record("report", trial);
    if (r) {
        cJSON_AddNumberToObject(r, "step", (double)step);
        add_num(r, "value", value);
    }
    return r;
}

cJSON *dl_tune_journal_attr(int trial, const char *key, const char *value)
{
    cJSON *r = record("attr", trial);
    if (r) {
        cJSON_AddStringToObject(r, "key", key);
        cJSON_AddStringToObject(r, "value", value);
    }
    return r;
}

cJSON *dl_tune_journal_finish(int trial, dl_trial_state state, double value, const char *reason)
{
    cJSON *r = record("finish", trial);
    if (r) {
        cJSON_AddStringToObject(r, "state", dl_trial_state_name(state));
        add_num(r, "value", value);
        cJSON_AddNumberToObject(r, "time", dl_clock_wall_s());
        if (reason)
            cJSON_AddStringToObject(r, "reason", reason);
    }
    return r;
}

/* Replaces (or adds) the param object called p->name in array params. */
static void params_put(cJSON *params, const dl_tune_param *p)
{
    int idx = 0, found = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, params)
    {
        const char *n = str_of(e, "name");
        if (n && strcmp(n, p->name) == 0)
            found = idx;
        idx++;
    }
    if (found >= 0)
        cJSON_DeleteItemFromArray(params, found);
    cJSON_AddItemToArray(params, param_json(p));
}

cJSON *dl_tune_journal_enqueue(const dl_study *s, const dl_trial *t)
{
    cJSON *q = record("enqueue", -1);
    cJSON *params = t->fixed ? cJSON_Duplicate(t->fixed, 1) : cJSON_CreateArray();
    if (!q || !params) {
        cJSON_Delete(q);
        cJSON_Delete(params);
        return NULL;
    }
    /* parameters suggested before the loss override the queued ones */
    for (int j = 0; j < t->nparams; j++)
        params_put(params, &t->params[j]);
    cJSON_AddNumberToObject(q, "queue", s->nqueue);
    cJSON_AddItemToObject(q, "params", params);
    cJSON_AddNumberToObject(q, "grid", (double)t->grid_slot);
    cJSON_AddNumberToObject(q, "from", t->number);
    return q;
}
int dl_tune_journal_fixed_value(const dl_trial *t, const dl_tune_param *dist, double *value)
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
