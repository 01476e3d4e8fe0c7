/* runlog.c - run folders: atomic config and summary, appended metrics and events, final/best metrics */
#include "engine/rundir/runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/base/sha256.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog_private.h"

#define MAX_METRICS 48

typedef struct metric {
    char name[48];
    double final;
    double best;
    long best_step;
    int best_epoch;
    int dir; /* -1 lower is better, +1 higher is better, 0 no best */
} metric;

struct dl_runlog {
    char dir[1024];
    char run[256]; /* the folder's name under OUT (dir is a temporary one while created) */
    int lock_fd;   /* RUN/run.lock, flock(LOCK_EX) held for the runlog's life */
    FILE *metrics, *events;
    cJSON *config;
    double start;     /* dl_clock_mono_s when opened */
    double earlier_s; /* wall time before a resume */
    metric m[MAX_METRICS];
    int nm;
    char started[32];
};

/* --- files ------------------------------------------------------------------ */

static int write_json(const char *path, const cJSON *j)
{
    char *text = cJSON_Print(j);
    if (!text)
        return dl_error(DL_ENOMEM, "%s: out of memory formatting JSON", path);
    size_t n = strlen(text);
    char *withnl = realloc(text, n + 2);
    if (!withnl) {
        free(text);
        return dl_error(DL_ENOMEM, "out of memory");
    }
    withnl[n] = '\n';
    withnl[n + 1] = 0;
    int rc = dl_fs_write_atomic(path, withnl, n + 1);
    free(withnl);
    return rc;
}

static int copy_file(const char *from, const char *to)
{
    size_t n;
    char *text = dl_rundir_read_text(from, &n);
    if (!text)
        return DL_EIO;
    int rc = dl_fs_write_atomic(to, text, n);
    free(text);
    return rc;
}

/* --- canonical hashing ------------------------------------------------------- */

static int cmp_items(const void *a, const void *b)
{
    return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* A deep copy with object members sorted by key, so the hash does not
 * depend on insertion order. */
static cJSON *sorted_copy(const cJSON *j)
{
    if (cJSON_IsObject(j)) {
        int n = cJSON_GetArraySize(j);
        cJSON **items = calloc(n ? (size_t)n : 1, sizeof *items);
        cJSON *o = cJSON_CreateObject();
        if (!items || !o) {
            free(items);
            cJSON_Delete(o);
            return NULL;
        }
        int k = 0;
        for (cJSON *c = j->child; c; c = c->next)
            items[k++] = c;
        qsort(items, (size_t)k, sizeof *items, cmp_items);
        for (int i = 0; i < k; i++)
            cJSON_AddItemToObject(o, items[i]->string, sorted_copy(items[i]));
        free(items);
        return o;
    }
    if (cJSON_IsArray(j)) {
        cJSON *a = cJSON_CreateArray();
        for (cJSON *c = j->child; c && a; c = c->next)
            cJSON_AddItemToArray(a, sorted_copy(c));
        return a;
    }
    return cJSON_Duplicate(j, 1);
}

char *dl_runlog_hash_json(const cJSON *j, char hex[65])
{
    cJSON *s = sorted_copy(j);
    char *text = s ? cJSON_PrintUnformatted(s) : NULL;
    uint8_t d[32];
    dl_sha256_buffer(text ? text : "", text ? strlen(text) : 0, d);
    free(text);
    cJSON_Delete(s);
    return dl_sha256_hex(d, hex);
}

/* --- metrics ------------------------------------------------------------------ */

static int metric_dir(const char *name)
{
    if (strstr(name, "loss"))
        return -1;
    if (strstr(name, "acc"))
        return 1;
    return 0;
}

static void track(dl_runlog *r, const char *name, double v, long step, int epoch)
{
    if (!isfinite(v))
        return;
    metric *m = NULL;
    for (int i = 0; i < r->nm && !m; i++)
        if (!strcmp(r->m[i].name, name))
            m = &r->m[i];
    if (!m) {
        if (r->nm == MAX_METRICS)
            return;
        m = &r->m[r->nm++];
        snprintf(m->name, sizeof m->name, "%s", name);
        m->dir = metric_dir(name);
        m->best = v;
        m->best_step = step;
        m->best_epoch = epoch;
    }
    m->final = v;
    if ((m->dir < 0 && v < m->best) || (m->dir > 0 && v > m->best)) {
        m->best = v;
        m->best_step = step;
        m->best_epoch = epoch;
    }
}

/* A JSON number as a step or epoch count: 0 when missing, not a number or
 * out of range (a damaged file must not make the cast undefined). */
static long json_count(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 2e9))
        return cJSON_IsNumber(v) && v->valuedouble >= 2e9 ? 2000000000L : 0;
    return (long)v->valuedouble;
}

static void track_record(dl_runlog *r, const cJSON *rec)
{
    long step = json_count(cJSON_GetObjectItemCaseSensitive(rec, "step"));
    int epoch = (int)json_count(cJSON_GetObjectItemCaseSensitive(rec, "epoch"));
    for (const cJSON *c = rec->child; c; c = c->next) {
        if (!cJSON_IsNumber(c) || !strcmp(c->string, "step") || !strcmp(c->string, "epoch") ||
            !strcmp(c->string, "time"))
            continue;
        track(r, c->string, c->valuedouble, step, epoch);
    }
}

int dl_runlog_metrics(dl_runlog *r, const char *kind, long step, int epoch,
                      const char *const *names, const double *values, int n)
{
    cJSON *rec = cJSON_CreateObject();
    if (!rec)
        return dl_error(DL_ENOMEM, "out of memory");
    cJSON_AddStringToObject(rec, "kind", kind);
    cJSON_AddNumberToObject(rec, "step", (double)step);
    cJSON_AddNumberToObject(rec, "epoch", epoch);
    cJSON_AddNumberToObject(rec, "time", round(dl_runlog_elapsed(r) * 1000) / 1000);
    for (int i = 0; i < n; i++) {
        if (isfinite(values[i]))
            cJSON_AddNumberToObject(rec, names[i], values[i]);
        else
            cJSON_AddNullToObject(rec, names[i]);
        track(r, names[i], values[i], step, epoch);
    }
    char *line = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    if (!line)
        return dl_error(DL_ENOMEM, "out of memory");
    int ok = fprintf(r->metrics, "%s\n", line) > 0 && fflush(r->metrics) == 0;
    free(line);
    if (!ok)
        return dl_error(DL_EIO, "%s/" DL_RUN_FILE_METRICS ": write failed: %s", r->dir,
                        strerror(errno));
    return DL_OK;
}

/* --- events ------------------------------------------------------------------ */

static void event_line(char *buf, size_t size, const char *kind, const char *text)
{
    char when[32];
    dl_clock_iso_now(when, sizeof when);
    /* one line per event: newlines in text become spaces */
    int n = snprintf(buf, size, "%s %s: ", when, kind);
    size_t len = n > 0 && (size_t)n < size ? (size_t)n : 0;
    for (const char *p = text; *p && len + 2 < size; p++)
        buf[len++] = (*p == '\n' || *p == '\r') ? ' ' : *p;
    buf[len++] = '\n';
    buf[len] = 0;
}

int dl_runlog_event(dl_runlog *r, const char *kind, const char *fmt, ...)
{
    char text[2048], line[2200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    event_line(line, sizeof line, kind, text);
    if (fputs(line, r->events) < 0 || fflush(r->events) != 0)
        return dl_error(DL_EIO, "%s/" DL_RUN_FILE_EVENTS ": write failed: %s", r->dir,
                        strerror(errno));
    return DL_OK;
}

int dl_runlog_append_event(const char *run_dir, const char *kind, const char *text)
{
    char path[1100], line[2200];
    int fd =
        open(dl_rundir_path(run_dir, DL_RUN_FILE_EVENTS, path, sizeof path), O_WRONLY | O_APPEND);
    if (fd < 0)
        return dl_error(DL_EIO, "%s: %s", path, strerror(errno));
    event_line(line, sizeof line, kind, text);
    ssize_t w = write(fd, line, strlen(line));
    int e = errno;
    close(fd);
    if (w != (ssize_t)strlen(line))
        return dl_error(DL_EIO, "%s: write failed: %s", path, strerror(e));
    return DL_OK;
}

/* --- create / reopen ----------------------------------------------------------- */

/* fopen for writing with mode 0644 less the umask (fopen would use 0666):
 * a run folder holds no world-writable file. */
static FILE *open_log(const char *path, int truncate)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : O_APPEND), 0644);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, truncate ? "w" : "a");
    if (!f)
        close(fd);
    return f;
}

static int open_logs(dl_runlog *r, int truncate)
{
    char path[1100];
    dl_rundir_path(r->dir, DL_RUN_FILE_METRICS, path, sizeof path);
    if (!(r->metrics = open_log(path, truncate)))
        return dl_error(DL_EIO, "%s: %s", path, strerror(errno));
    dl_rundir_path(r->dir, DL_RUN_FILE_EVENTS, path, sizeof path);
    if (!(r->events = open_log(path, 0)))
        return dl_error(DL_EIO, "%s: %s", path, strerror(errno));
    return DL_OK;
}

/* Fault injection for tests/t_crash.sh (DLBENCH_FAULT unset in normal use):
 * "runlog-kill=N" dies by SIGKILL while a new run folder is made under
 * its temporary name: 1 right after the folder and its lock exist, 2 after
 * config.json, 3 with every initial file written, just before the rename. */
static void fault_in_create(int stage)
{
    const char *f = getenv("DLBENCH_FAULT");
    if (f && !strncmp(f, "runlog-kill=", 12) && strtol(f + 12, NULL, 10) == stage)
        raise(SIGKILL);
}

/* The first free folder name OUT/BASE, OUT/BASE-2, ... from *attempt on:
 * sets r->run and advances *attempt. DL_EIO after 99. */
static int next_free_name(dl_runlog *r, const char *out_dir, const char *base, int *attempt)
{
    for (; *attempt < 100; (*attempt)++) {
        if (*attempt == 1)
            snprintf(r->run, sizeof r->run, "%s", base);
        else
            snprintf(r->run, sizeof r->run, "%s-%d", base, *attempt);
        char path[1400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", out_dir, r->run);
        if (lstat(path, &st) != 0 && errno == ENOENT) {
            (*attempt)++;
            return DL_OK;
        }
    }
    return dl_error(DL_EIO, "%s/%s: 99 run folders of that name already exist", out_dir, base);
}

/* Writes config.json, with "run" naming the final folder r->run. */
static int write_config(dl_runlog *r)
{
    char path[1100];
    cJSON_DeleteItemFromObjectCaseSensitive(r->config, "run");
    cJSON_AddStringToObject(r->config, "run", r->run);
    return write_json(dl_rundir_path(r->dir, DL_RUN_FILE_CONFIG, path, sizeof path), r->config);
}

/* Moves the complete temporary folder r->dir to OUT/r->run without
 * replacing anything: a name another process took in the meantime makes
 * it try the next one (config.json and summary.json are rewritten to
 * say so). On success r->dir is the final path. */
static int move_into_place(dl_runlog *r, const char *out_dir, const char *base, int attempt)
{
    for (;;) {
        char final[sizeof r->dir];
        if (snprintf(final, sizeof final, "%s/%s", out_dir, r->run) >= (int)sizeof final)
            return dl_error(DL_EIO, "%s/%s: path too long", out_dir, r->run);
        int rc = renameat2(AT_FDCWD, r->dir, AT_FDCWD, final, RENAME_NOREPLACE);
        if (rc != 0 && (errno == EINVAL || errno == ENOSYS))
            rc = rename(r->dir,
                        final); /* no RENAME_NOREPLACE here: a full folder is never replaced */
        if (rc == 0) {
            snprintf(r->dir, sizeof r->dir, "%s", final);
            dl_fs_fsync_dir_of(final);
            return DL_OK;
        }
        if (errno != EEXIST && errno != ENOTEMPTY)
            return dl_error(DL_EIO, "%s: cannot move the new run folder into place: %s", final,
                            strerror(errno));
        DL_TRY(next_free_name(r, out_dir, base, &attempt));
        DL_TRY(write_config(r));
        dl_run_totals t = {0};
        DL_TRY(dl_runlog_summary(r, "running", &t, NULL, NULL));
    }
}

/* OUT/<yyyymmdd-hhmmss>-<name>-<hash8>: name with anything but
 * [A-Za-z0-9._-] made '_' ("run" when empty). */
static void folder_base(char *base, size_t size, const char *name, const char *config_hash)
{
    char stamp[32], clean[48];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < sizeof clean; p++)
        clean[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.'
                                ? *p
                                : '_');
    clean[k] = 0;
    if (!k)
        snprintf(clean, sizeof clean, "run");
    snprintf(base, size, "%s-%s-%.8s", stamp, clean, config_hash);
}

/* Makes the hidden OUT/.BASE.tmp-PID-N as r->dir; *made set once it exists. */
static int make_temp_dir(dl_runlog *r, const char *out_dir, const char *base, int *made)
{
    static _Atomic int seq;
    for (int tries = 0;; tries++) {
        snprintf(r->dir, sizeof r->dir, "%s/.%s.tmp-%ld-%d", out_dir, base, (long)getpid(), ++seq);
        if (mkdir(r->dir, 0755) == 0) {
            *made = 1;
            return DL_OK;
        }
        if (errno != EEXIST || tries == 99)
            return dl_error(DL_EIO, "%s: cannot create the run folder: %s", r->dir,
                            strerror(errno));
    }
}

/* The new run's files in its temporary folder: lock, config.json (with
 * config_hash), the script's copy, empty logs, a "running" summary. */
static int fill_new_run(dl_runlog *r, const char *out_dir, const char *base,
                        const char *config_hash, const cJSON *config, const char *script_path,
                        int *attempt)
{
    DL_TRY(dl_runlog_take_lock(r->dir, base, 1, &r->lock_fd));
    fault_in_create(1);
    DL_TRY(next_free_name(r, out_dir, base, attempt));
    r->config = cJSON_Duplicate(config, 1);
    if (!r->config)
        return dl_error(DL_ENOMEM, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(r->config, "config_hash");
    cJSON_AddStringToObject(r->config, "config_hash", config_hash);
    DL_TRY(write_config(r));
    fault_in_create(2);
    char path[1100];
    if (script_path)
        DL_TRY(
            copy_file(script_path, dl_rundir_path(r->dir, DL_RUN_FILE_SCRIPT, path, sizeof path)));
    DL_TRY(open_logs(r, 1));
    dl_run_totals t = {0};
    DL_TRY(dl_runlog_summary(r, "running", &t, NULL, NULL));
    fault_in_create(3);
    return DL_OK;
}

int dl_runlog_create(dl_runlog **out, const char *out_dir, const char *name,
                     const char *config_hash, const cJSON *config, const char *script_path)
{
    *out = NULL;
    DL_TRY(dl_fs_mkdir_p(out_dir));
    dl_runlog_stale_temps(out_dir, 1, NULL, 0);
    dl_runlog *r = calloc(1, sizeof *r);
    if (!r)
        return dl_error(DL_ENOMEM, "out of memory");
    r->lock_fd = -1;
    r->start = dl_clock_mono_s();
    dl_clock_iso_now(r->started, sizeof r->started);
    char base[160];
    folder_base(base, sizeof base, name, config_hash);
    /* made as OUT/.BASE.tmp-PID-N with its files and lock, then renamed
     * into place: `runs` never sees a half-made run, and a crash leaves a
     * hidden folder that the next run here removes */
    int made = 0, attempt = 1;
    int rc = make_temp_dir(r, out_dir, base, &made);
    if (rc == DL_OK)
        rc = fill_new_run(r, out_dir, base, config_hash, config, script_path, &attempt);
    if (rc == DL_OK)
        rc = move_into_place(r, out_dir, base, attempt);
    if (rc < 0) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", r->dir);
        int temp = dl_runlog_is_temp_name(dl_runlog_base_name(tmp));
        dl_runlog_destroy(r);
        if (made && temp)
            dl_runlog_remove_temp_dir(tmp);
        return rc;
    }
    *out = r;
    return DL_OK;
}

/* Wall time and start time from summary.json (a resume continues them). */
static void read_earlier(dl_runlog *r)
{
    char path[1100];
    cJSON *sum =
        dl_rundir_read_json(dl_rundir_path(r->dir, DL_RUN_FILE_SUMMARY, path, sizeof path));
    if (sum) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(sum, "wall_s");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(sum, "started");
        r->earlier_s = cJSON_IsNumber(w) ? w->valuedouble : 0;
        if (cJSON_IsString(st))
            snprintf(r->started, sizeof r->started, "%s", st->valuestring);
        cJSON_Delete(sum);
    }
    if (!r->started[0])
        dl_clock_iso_now(r->started, sizeof r->started);
}

/* Torn or unreadable lines of metrics.jsonl dropped on a resume. */
typedef struct dropped {
    long bad, first_bad;
} dropped;

/* Keeps the lines of text (n bytes, cut in place) that are records up to
 * resume_step into kept (k bytes), tracking final/best from them. */
static size_t keep_records(dl_runlog *r, char *text, long resume_step, char *kept, dropped *d)
{
    size_t k = 0;
    long line_no = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        line_no++;
        cJSON *rec = cJSON_Parse(line);
        const cJSON *st = rec ? cJSON_GetObjectItemCaseSensitive(rec, "step") : NULL;
        const cJSON *kd = rec ? cJSON_GetObjectItemCaseSensitive(rec, "kind") : NULL;
        /* a "stop" record is the window the checkpoint kept open: the
         * resumed run reports it whole */
        int stop = cJSON_IsString(kd) && !strcmp(kd->valuestring, "stop");
        if (rec && cJSON_IsNumber(st) && json_count(st) <= resume_step && !stop) {
            track_record(r, rec);
            size_t l = strlen(line);
            memcpy(kept + k, line, l);
            kept[k + l] = '\n';
            k += l + 1;
        } else if (!rec && line[strspn(line, " \t\r")]) {
            d->bad++; /* a torn line (or damage): not a record */
            if (!d->first_bad)
                d->first_bad = line_no;
        }
        cJSON_Delete(rec);
        line = nl ? nl + 1 : NULL;
    }
    return k;
}

/* Rewrites metrics.jsonl with the records up to resume_step (the rest will
 * be recomputed) and rebuilds final/best from them. */
static int trim_metrics(dl_runlog *r, long resume_step, dropped *d)
{
    char path[1100];
    dl_rundir_path(r->dir, DL_RUN_FILE_METRICS, path, sizeof path);
    size_t n = 0;
    char *text = dl_rundir_read_text(path, &n);
    /* only a missing file counts as no records: one that cannot be read is
     * not rewritten (emptied) */
    if (!text && access(path, F_OK) < 0 && errno == ENOENT) {
        if (!(text = calloc(1, 1)))
            return dl_error(DL_ENOMEM, "out of memory");
        n = 0;
    } else if (!text) {
        char why[700];
        snprintf(why, sizeof why, "%s", dl_error_message());
        return dl_error(DL_EIO, "%s (the run is left as it was)", why);
    }
    char *kept = malloc(n + 1);
    int rc;
    if (kept)
        rc = dl_fs_write_atomic(path, kept, keep_records(r, text, resume_step, kept, d));
    else
        rc = dl_error(DL_ENOMEM, "out of memory");
    free(kept);
    free(text);
    return rc;
}

/* The steps of a reopen after the lock: trimmed metrics, torn tails cut,
 * logs open, warnings for what was dropped. */
static int continue_run(dl_runlog *r, long resume_step)
{
    read_earlier(r);
    dl_runlog_remove_stale_files(r->dir);
    dropped d = {0, 0};
    DL_TRY(trim_metrics(r, resume_step, &d));
    /* events.log and system.jsonl are appended to: a torn last line would
     * swallow the first new one */
    long cut_events = dl_runlog_cut_torn_tail(r->dir, DL_RUN_FILE_EVENTS);
    long cut_system = dl_runlog_cut_torn_tail(r->dir, DL_RUN_FILE_SYSTEM);
    DL_TRY(open_logs(r, 0));
    if (d.bad)
        dl_runlog_event(r, "warning",
                        DL_RUN_FILE_METRICS ": %ld unreadable line%s dropped (first: line %ld; a "
                                            "line cut by a killed writer)",
                        d.bad, d.bad == 1 ? "" : "s", d.first_bad);
    if (cut_events)
        dl_runlog_event(r, "warning", DL_RUN_FILE_EVENTS ": a torn last line (%ld bytes) dropped",
                        cut_events);
    if (cut_system)
        dl_runlog_event(r, "warning", DL_RUN_FILE_SYSTEM ": a torn last line (%ld bytes) dropped",
                        cut_system);
    return DL_OK;
}

int dl_runlog_reopen(dl_runlog **out, const char *run_dir, long resume_step)
{
    return dl_runlog_reopen_locked(out, run_dir, resume_step, -1);
}

int dl_runlog_reopen_locked(dl_runlog **out, const char *run_dir, long resume_step, int lock_fd)
{
    *out = NULL;
    dl_runlog *r = calloc(1, sizeof *r);
    if (!r) {
        if (lock_fd >= 0)
            close(lock_fd);
        return dl_error(DL_ENOMEM, "out of memory");
    }
    r->lock_fd = lock_fd;
    snprintf(r->dir, sizeof r->dir, "%s", run_dir);
    size_t dl = strlen(r->dir);
    while (dl > 1 && r->dir[dl - 1] == '/')
        r->dir[--dl] = 0;
    snprintf(r->run, sizeof r->run, "%s", dl_runlog_base_name(r->dir));
    r->start = dl_clock_mono_s();
    char path[1100];
    int rc = (r->config = dl_rundir_read_json(
                  dl_rundir_path(r->dir, DL_RUN_FILE_CONFIG, path, sizeof path)))
                 ? DL_OK
                 : DL_EINVAL;
    /* before anything is changed: one process at a time continues a run */
    if (rc == DL_OK && r->lock_fd < 0)
        rc = dl_runlog_take_lock(r->dir, r->run, 0, &r->lock_fd);
    if (rc == DL_OK)
        rc = continue_run(r, resume_step);
    if (rc < 0) {
        dl_runlog_destroy(r);
        return rc;
    }
    *out = r;
    return DL_OK;
}

void dl_runlog_destroy(dl_runlog *r)
{
    if (!r)
        return;
    if (r->metrics)
        fclose(r->metrics);
    if (r->events)
        fclose(r->events);
    if (r->lock_fd >= 0)
        close(r->lock_fd); /* releases the run */
    cJSON_Delete(r->config);
    free(r);
}

const char *dl_runlog_dir(const dl_runlog *r) { return r->dir; }
const cJSON *dl_runlog_config(const dl_runlog *r) { return r->config; }

double dl_runlog_elapsed(const dl_runlog *r)
{
    return r->earlier_s + (dl_clock_mono_s() - r->start);
}

/* --- summary ------------------------------------------------------------------- */

int dl_runlog_summary(dl_runlog *r, const char *status, const dl_run_totals *t, const char *message,
                      const cJSON *extra)
{
    cJSON *s = cJSON_CreateObject();
    if (!s)
        return dl_error(DL_ENOMEM, "out of memory");
    char now[32];
    dl_clock_iso_now(now, sizeof now);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(r->config, "name");
    const cJSON *hash = cJSON_GetObjectItemCaseSensitive(r->config, "config_hash");
    cJSON_AddStringToObject(s, "run", r->run);
    if (cJSON_IsString(name))
        cJSON_AddStringToObject(s, "name", name->valuestring);
    cJSON_AddStringToObject(s, "status", status);
    if (message)
        cJSON_AddStringToObject(s, "message", message);
    if (cJSON_IsString(hash))
        cJSON_AddStringToObject(s, "config_hash", hash->valuestring);
    cJSON_AddStringToObject(s, "started", r->started);
    cJSON_AddStringToObject(s, "updated", now);
    double wall = dl_runlog_elapsed(r);
    cJSON_AddNumberToObject(s, "steps", (double)t->steps);
    cJSON_AddNumberToObject(s, "epochs", t->epochs);
    cJSON_AddNumberToObject(s, "samples", t->samples);
    cJSON_AddNumberToObject(s, "wall_s", round(wall * 1000) / 1000);
    cJSON_AddNumberToObject(s, "samples_per_s", wall > 0 ? round(t->samples / wall * 10) / 10 : 0);
    cJSON *fin = cJSON_AddObjectToObject(s, "final");
    cJSON *best = cJSON_AddObjectToObject(s, "best");
    for (int i = 0; i < r->nm; i++) {
        const metric *m = &r->m[i];
        cJSON_AddNumberToObject(fin, m->name, m->final);
        if (m->dir) {
            cJSON *b = cJSON_AddObjectToObject(best, m->name);
            cJSON_AddNumberToObject(b, "value", m->best);
            cJSON_AddNumberToObject(b, "step", (double)m->best_step);
            cJSON_AddNumberToObject(b, "epoch", m->best_epoch);
        }
    }
    if (extra)
        for (const cJSON *c = extra->child; c; c = c->next)
            cJSON_AddItemToObject(s, c->string, cJSON_Duplicate(c, 1));
    char path[1100];
    int rc = write_json(dl_rundir_path(r->dir, DL_RUN_FILE_SUMMARY, path, sizeof path), s);
    cJSON_Delete(s);
    return rc;
}

int dl_runlog_mark_failed(const char *run_dir, const char *message)
{
    char path[1100];
    cJSON *sum =
        dl_rundir_read_json(dl_rundir_path(run_dir, DL_RUN_FILE_SUMMARY, path, sizeof path));
    if (!sum)
        return DL_EIO; /* the message names the file */
    cJSON *failed = cJSON_CreateString("failed");
    if (!cJSON_ReplaceItemInObjectCaseSensitive(sum, "status", failed))
        cJSON_AddItemToObject(sum, "status", failed);
    cJSON_DeleteItemFromObjectCaseSensitive(sum, "message");
    cJSON_AddStringToObject(sum, "message", message);
    int rc = write_json(path, sum);
    cJSON_Delete(sum);
    return rc;
}
