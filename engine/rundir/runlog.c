/* runlog.c - run folders: atomic config and summary, appended metrics and events, final/best metrics */
#include "engine/rundir/runlog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/base/sha256.h"

extern char **environ;

#define MAX_METRICS 48
#define LOCK_NAME "run.lock"

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
    struct timespec start;
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

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        dl_error(DL_EIO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (n + 1 < cap)
            break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) {
        dl_error(DL_ENOMEM, "%s: out of memory", path);
        return NULL;
    }
    if (bad) { /* a short read is not the file */
        free(buf);
        dl_error(DL_EIO, "%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len)
        *len = n;
    return buf;
}

cJSON *dl_runlog_read_json(const char *path)
{
    char *text = read_file(path, NULL);
    if (!text)
        return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j)
        dl_error(DL_EINVAL, "%s: not valid JSON", path);
    return j;
}

static int copy_file(const char *from, const char *to)
{
    size_t n;
    char *text = read_file(from, &n);
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
        return dl_error(DL_EIO, "%s/metrics.jsonl: write failed: %s", r->dir, strerror(errno));
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
        return dl_error(DL_EIO, "%s/events.log: write failed: %s", r->dir, strerror(errno));
    return DL_OK;
}

int dl_runlog_append_event(const char *run_dir, const char *kind, const char *text)
{
    char path[1100], line[2200];
    snprintf(path, sizeof path, "%s/events.log", run_dir);
    int fd = open(path, O_WRONLY | O_APPEND);
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

/* --- the run lock -------------------------------------------------------------- */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* The holder's "PID HOST" from an open lock file: *pid 0 when unreadable. */
static void lock_holder(int fd, long *pid, char *host, size_t size)
{
    char text[128];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    *pid = 0;
    host[0] = 0;
    char *end;
    long p = strtol(text, &end, 10);
    if (end == text || p <= 0)
        return;
    *pid = p;
    while (*end == ' ')
        end++;
    size_t k = 0;
    while (end[k] && end[k] != '\n' && k + 1 < size) {
        host[k] = end[k];
        k++;
    }
    host[k] = 0;
}

static int busy_error(int fd, const char *run)
{
    long pid;
    char host[64], here[64] = "";
    lock_holder(fd, &pid, host, sizeof host);
    gethostname(here, sizeof here - 1);
    char who[160];
    if (pid <= 0)
        snprintf(who, sizeof who, "another process");
    else if (host[0] && strcmp(host, here))
        snprintf(who, sizeof who, "process %ld on %s", pid, host);
    else
        snprintf(who, sizeof who, "process %ld", pid);
    return dl_error(DL_EINVAL,
                    "run %s is in use by %s (a live run or another --resume of it): wait for "
                    "it to end, or stop it first",
                    run, who);
}

/* Takes the exclusive lock on dir/run.lock (created when missing) without
 * blocking and writes "PID HOST" into it; *fd keeps it until closed. A
 * holder that is busy for a second (not a dl_runlog_check_free probe,
 * which holds it for microseconds) makes it fail with busy_error. In a
 * folder being made (fresh), the file is locked under another name and
 * renamed: run.lock never exists unlocked there, which is how a cleaner
 * tells a live creator from a dead one. */
static int lock_run(const char *dir, const char *run, int fresh, int *fd_out)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/" LOCK_NAME "%s", dir, fresh ? ".new" : "");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return dl_error(DL_EIO, "%s: cannot open: %s", path, strerror(errno));
    for (int tries = 0;; tries++) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            break;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK) {
            int e = errno;
            close(fd);
            return dl_error(DL_EIO, "%s: flock: %s", path, strerror(e));
        }
        if (tries == 20) {
            int rc = busy_error(fd, run);
            close(fd);
            return rc;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    char text[128], host[64] = "";
    gethostname(host, sizeof host - 1);
    int n = snprintf(text, sizeof text, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return dl_error(DL_EIO, "%s: cannot write: %s", path, strerror(e));
    }
    if (fresh) {
        char final[1100];
        snprintf(final, sizeof final, "%s/" LOCK_NAME, dir);
        if (rename(path, final) != 0) {
            int e = errno;
            close(fd);
            return dl_error(DL_EIO, "%s: cannot rename into place: %s", final, strerror(e));
        }
    }
    *fd_out = fd;
    return DL_OK;
}

int dl_runlog_check_free(const char *run_dir)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/" LOCK_NAME, run_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return DL_OK; /* never locked: a folder from before run locks, or none */
    int rc = DL_OK;
    while (flock(fd, LOCK_SH | LOCK_NB) != 0) {
        if (errno == EINTR)
            continue;
        if (errno == EWOULDBLOCK)
            rc = busy_error(fd, base_name(run_dir));
        break;
    }
    close(fd); /* drops the probe's shared lock */
    return rc;
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
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
    if (!(r->metrics = open_log(path, truncate)))
        return dl_error(DL_EIO, "%s: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/events.log", r->dir);
    if (!(r->events = open_log(path, 0)))
        return dl_error(DL_EIO, "%s: %s", path, strerror(errno));
    return DL_OK;
}

int dl_runlog_is_temp_name(const char *name)
{
    return name[0] == '.' && strstr(name, ".tmp-") != NULL;
}

/* Removes a temporary run folder: its files, then itself (it holds no
 * sub-folders; one that does is left alone). */
static void remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) /* not a run being made: leave it whole */
        if (e->d_type == DT_DIR && strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            closedir(d);
            return;
        }
    rewinddir(d);
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* A temporary run folder whose creator is gone: its lock is free, or it
 * never got a lock file and is older than a minute. */
static int temp_is_stale(const char *dir)
{
    char path[1500];
    snprintf(path, sizeof path, "%s/" LOCK_NAME, dir);
    struct stat st;
    if (stat(path, &st) == 0) {
        int rc = dl_runlog_check_free(dir);
        dl_error_clear();
        return rc == DL_OK;
    }
    /* before the rename of run.lock.new: its creator holds that one */
    snprintf(path, sizeof path, "%s/" LOCK_NAME ".new", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
        close(fd);
        if (held)
            return 0; /* alive, only slow (or stopped) */
    }
    return stat(dir, &st) == 0 && time(NULL) - st.st_mtime > 60;
}

int dl_runlog_stale_temps(const char *out_dir, int remove, char *names, size_t size)
{
    if (names && size)
        names[0] = 0;
    DIR *d = opendir(out_dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!dl_runlog_is_temp_name(e->d_name))
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", out_dir, e->d_name);
        if (!temp_is_stale(path))
            continue;
        n++;
        if (names && size) {
            size_t l = strlen(names);
            snprintf(names + l, size - l, "%s%s", l ? ", " : "", e->d_name);
        }
        if (remove)
            remove_flat_dir(path);
    }
    closedir(d);
    return n;
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
    snprintf(path, sizeof path, "%s/config.json", r->dir);
    return write_json(path, r->config);
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
            rc = rename(r->dir, final); /* no RENAME_NOREPLACE here: a full folder is never replaced */
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
    clock_gettime(CLOCK_MONOTONIC, &r->start);
    dl_clock_iso_now(r->started, sizeof r->started);
    char stamp[32], clean[48], base[160];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < sizeof clean; p++)
        clean[k++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                    (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
                                    *p == '.'
                                ? *p
                                : '_');
    clean[k] = 0;
    if (!k)
        snprintf(clean, sizeof clean, "run");
    snprintf(base, sizeof base, "%s-%s-%.8s", stamp, clean, config_hash);
    /* made as OUT/.BASE.tmp-PID-N with its files and lock, then renamed
     * into place: `runs` never sees a half-made run, and a crash leaves a
     * hidden folder that the next run here removes */
    static _Atomic int seq;
    int rc = DL_OK, made = 0;
    for (int tries = 0; !made && rc == DL_OK; tries++) {
        snprintf(r->dir, sizeof r->dir, "%s/.%s.tmp-%ld-%d", out_dir, base, (long)getpid(),
                 ++seq);
        if (mkdir(r->dir, 0755) == 0)
            made = 1;
        else if (errno != EEXIST || tries == 99)
            rc = dl_error(DL_EIO, "%s: cannot create the run folder: %s", r->dir, strerror(errno));
    }
    if (rc == DL_OK)
        rc = lock_run(r->dir, base, 1, &r->lock_fd);
    if (rc == DL_OK)
        fault_in_create(1);
    int attempt = 1;
    if (rc == DL_OK)
        rc = next_free_name(r, out_dir, base, &attempt);
    char path[1100];
    if (rc == DL_OK) {
        r->config = cJSON_Duplicate(config, 1);
        if (!r->config)
            rc = dl_error(DL_ENOMEM, "out of memory");
    }
    if (rc == DL_OK) {
        cJSON_DeleteItemFromObjectCaseSensitive(r->config, "config_hash");
        cJSON_AddStringToObject(r->config, "config_hash", config_hash);
        rc = write_config(r);
    }
    if (rc == DL_OK)
        fault_in_create(2);
    if (rc == DL_OK && script_path) {
        snprintf(path, sizeof path, "%s/script.lua", r->dir);
        rc = copy_file(script_path, path);
    }
    if (rc == DL_OK)
        rc = open_logs(r, 1);
    if (rc == DL_OK) {
        dl_run_totals t = {0};
        rc = dl_runlog_summary(r, "running", &t, NULL, NULL);
    }
    if (rc == DL_OK)
        fault_in_create(3);
    if (rc == DL_OK)
        rc = move_into_place(r, out_dir, base, attempt);
    if (rc < 0) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", r->dir);
        int temp = dl_runlog_is_temp_name(base_name(tmp));
        dl_runlog_destroy(r);
        if (made && temp)
            remove_flat_dir(tmp);
        return rc;
    }
    *out = r;
    return DL_OK;
}

/* Removes NAME.tmp.PID files that a writer killed between its temporary
 * write and the rename left in the run folder (never read as whole). */
static void remove_stale_temps(const char *run_dir)
{
    DIR *dir = opendir(run_dir);
    if (!dir)
        return;
    struct dirent *e;
    while ((e = readdir(dir))) {
        const char *t = strstr(e->d_name, ".tmp.");
        if (!t || t == e->d_name || !t[5] || strspn(t + 5, "0123456789") != strlen(t + 5))
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", run_dir, e->d_name);
        unlink(path);
    }
    closedir(dir);
}

/* Cuts a last line that has no newline (its writer was killed mid-write)
 * off dir/name, so that appended lines start on a line of their own.
 * Returns the bytes cut (0: none, or no such file). */
static long cut_torn_tail(const char *dir, const char *name)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    long cut = 0;
    char buf[4096];
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        off_t end = st.st_size, keep = 0;
        int found = 0;
        while (end > 0 && !found) {
            off_t from = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
            ssize_t n = pread(fd, buf, (size_t)(end - from), from);
            if (n != end - from)
                break;
            for (ssize_t i = n - 1; i >= 0 && !found; i--)
                if (buf[i] == '\n') {
                    keep = from + i + 1;
                    found = 1;
                }
            end = from;
        }
        if ((found || end == 0) && keep < st.st_size && ftruncate(fd, keep) == 0)
            cut = (long)(st.st_size - keep);
    }
    close(fd);
    return cut;
}

int dl_runlog_lock(const char *run_dir, int *fd)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", run_dir);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dir[--dl] = 0;
    *fd = -1;
    return lock_run(dir, base_name(dir), 0, fd);
}

int dl_runlog_reopen(dl_runlog **out, const char *run_dir, long resume_step)
{
    return dl_runlog_reopen_locked(out, run_dir, resume_step, -1);
}

int dl_runlog_reopen_locked(dl_runlog **out, const char *run_dir, long resume_step,
                            int lock_fd)
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
    snprintf(r->run, sizeof r->run, "%s", base_name(r->dir));
    clock_gettime(CLOCK_MONOTONIC, &r->start);
    char path[1100];
    snprintf(path, sizeof path, "%s/config.json", run_dir);
    int rc = (r->config = dl_runlog_read_json(path)) ? DL_OK : DL_EINVAL;
    /* before anything is changed: one process at a time continues a run */
    if (rc == DL_OK && r->lock_fd < 0)
        rc = lock_run(r->dir, r->run, 0, &r->lock_fd);
    snprintf(path, sizeof path, "%s/summary.json", run_dir);
    cJSON *sum = rc == DL_OK ? dl_runlog_read_json(path) : NULL;
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
    if (rc == DL_OK)
        remove_stale_temps(run_dir);
    /* keep the metric records up to the checkpoint's step, rebuild final/best */
    size_t n = 0;
    char *text = NULL;
    long line_no = 0, bad = 0, first_bad = 0;
    if (rc == DL_OK) {
        snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
        text = read_file(path, &n);
        /* only a missing file counts as no records: one that cannot be read
         * is not rewritten (emptied) */
        if (!text && access(path, F_OK) < 0 && errno == ENOENT) {
            text = calloc(1, 1);
            n = 0;
            if (!text)
                rc = dl_error(DL_ENOMEM, "out of memory");
        } else if (!text) {
            char why[700];
            snprintf(why, sizeof why, "%s", dl_error_message());
            rc = dl_error(DL_EIO, "%s (the run is left as it was)", why);
        }
    }
    if (rc == DL_OK && text) {
        char *kept = malloc(n + 1);
        size_t k = 0;
        for (char *line = text; kept && line && *line;) {
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
                bad++; /* a torn line (or damage): not a record */
                if (!first_bad)
                    first_bad = line_no;
            }
            cJSON_Delete(rec);
            line = nl ? nl + 1 : NULL;
        }
        if (kept)
            rc = dl_fs_write_atomic(path, kept, k);
        else
            rc = dl_error(DL_ENOMEM, "out of memory");
        free(kept);
    }
    free(text);
    /* events.log and system.jsonl are appended to: a torn last line would
     * swallow the first new one */
    long cut_events = rc == DL_OK ? cut_torn_tail(run_dir, "events.log") : 0;
    long cut_system = rc == DL_OK ? cut_torn_tail(run_dir, "system.jsonl") : 0;
    if (rc == DL_OK)
        rc = open_logs(r, 0);
    if (rc == DL_OK && bad)
        dl_runlog_event(r, "warning",
                        "metrics.jsonl: %ld unreadable line%s dropped (first: line %ld; a line "
                        "cut by a killed writer)",
                        bad, bad == 1 ? "" : "s", first_bad);
    if (rc == DL_OK && cut_events)
        dl_runlog_event(r, "warning", "events.log: a torn last line (%ld bytes) dropped",
                        cut_events);
    if (rc == DL_OK && cut_system)
        dl_runlog_event(r, "warning", "system.jsonl: a torn last line (%ld bytes) dropped",
                        cut_system);
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
    double start = (double)r->start.tv_sec + (double)r->start.tv_nsec * 1e-9;
    return r->earlier_s + (dl_clock_mono_s() - start);
}

/* --- summary ------------------------------------------------------------------- */

int dl_runlog_summary(dl_runlog *r, const char *status, const dl_run_totals *t,
                      const char *message, const cJSON *extra)
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
    snprintf(path, sizeof path, "%s/summary.json", r->dir);
    int rc = write_json(path, s);
    cJSON_Delete(s);
    return rc;
}

/* --- git ------------------------------------------------------------------------ */

/* Runs argv with stdout into buf (stderr discarded); returns the exit
 * status, or -1 when it could not run. */
static int run_capture(char *const argv[], char *buf, size_t size)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return -1;
    }
    size_t n = 0;
    for (;;) {
        char tmp[512];
        ssize_t r = read(fds[0], tmp, sizeof tmp);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r && n + 1 < size; i++)
            buf[n++] = tmp[i];
    }
    if (size)
        buf[n < size ? n : size - 1] = 0;
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int dl_runlog_git(const char *dir, char commit[41], int *dirty)
{
    char out[4096];
    const char *d = dir ? dir : ".";
    char *rev[] = {"git", "-C", (char *)d, "rev-parse", "--verify", "-q", "HEAD", NULL};
    if (run_capture(rev, out, sizeof out) != 0)
        return 0;
    size_t k = 0;
    while (k < 40 && ((out[k] >= '0' && out[k] <= '9') || (out[k] >= 'a' && out[k] <= 'f')))
        k++;
    if (k != 40)
        return 0;
    memcpy(commit, out, 40);
    commit[40] = 0;
    char *st[] = {"git", "-C", (char *)d, "status", "--porcelain", "--untracked-files=no", NULL};
    *dirty = run_capture(st, out, sizeof out) == 0 ? out[0] != 0 : 0;
    return 1;
}

/* --- finding runs ---------------------------------------------------------------- */

int dl_runlog_find_finished(const char *out_dir, const char *hash, char *found, size_t size)
{
    DIR *dir = opendir(out_dir);
    if (!dir)
        return 0;
    int hit = 0;
    struct dirent *e;
    char best_name[256] = "";
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.' || !strstr(e->d_name, "-"))
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s/summary.json", out_dir, e->d_name);
        cJSON *s = dl_runlog_read_json(path);
        if (!s)
            continue;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(s, "status");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(s, "config_hash");
        if (cJSON_IsString(st) && !strcmp(st->valuestring, "finished") && cJSON_IsString(h) &&
            !strcmp(h->valuestring, hash) && strcmp(e->d_name, best_name) > 0) {
            snprintf(best_name, sizeof best_name, "%s", e->d_name); /* the latest */
            snprintf(found, size, "%s/%s", out_dir, e->d_name);
            hit = 1;
        }
        cJSON_Delete(s);
    }
    closedir(dir);
    dl_error_clear();
    return hit;
}

static int is_run_dir(const char *path)
{
    char p[1600];
    snprintf(p, sizeof p, "%s/config.json", path);
    struct stat st;
    return stat(p, &st) == 0;
}

int dl_runlog_resolve(const char *out_dir, const char *run, char *path, size_t size)
{
    if (is_run_dir(run)) {
        snprintf(path, size, "%s", run);
        size_t l = strlen(path);
        while (l > 1 && path[l - 1] == '/')
            path[--l] = 0;
        return DL_OK;
    }
    DIR *dir = opendir(out_dir);
    if (!dir)
        return dl_error(DL_EINVAL, "no run '%s': %s is not a run folder and %s cannot be read",
                        run, run, out_dir);
    int hits = 0;
    char names[512] = "";
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", out_dir, e->d_name);
        if (!is_run_dir(p))
            continue;
        if (!strcmp(e->d_name, run)) {
            hits = 1;
            snprintf(path, size, "%s", p);
            break;
        }
        if (strstr(e->d_name, run)) {
            if (hits++ == 0)
                snprintf(path, size, "%s", p);
            size_t l = strlen(names);
            snprintf(names + l, sizeof names - l, "%s%s", l ? ", " : "", e->d_name);
        }
    }
    closedir(dir);
    if (hits == 1)
        return DL_OK;
    if (hits == 0)
        return dl_error(DL_EINVAL, "no run matches '%s' in %s", run, out_dir);
    return dl_error(DL_EINVAL, "'%s' matches %d runs in %s: %s", run, hits, out_dir, names);
}
