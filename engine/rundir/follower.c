/* follower.c - a run folder's new lines and changed documents, read as records for a callback */
#include "engine/rundir/follower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog.h"

/* The 1-based number of the line that starts at byte off of path. */
static long line_number(const char *path, long off)
{
    FILE *f = fopen(path, "r");
    long n = 1;
    for (int c; f && off-- > 0 && (c = getc(f)) != EOF;)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

static void warn(const dl_follower_ops *ops, const char *text)
{
    if (ops->warning)
        ops->warning(ops->user, text);
}

/* One line of a followed file handed on: < 0 when it is not a record. */
typedef int (*line_fn)(const dl_follower_ops *ops, const char *line);

static int metrics_line(const dl_follower_ops *ops, const char *line)
{
    dl_run_metrics *m = malloc(sizeof *m);
    int rc = m ? dl_records_metrics_parse(line, m) : 0;
    if (rc > 0 && ops->metrics)
        ops->metrics(ops->user, m);
    free(m);
    return rc;
}

static int events_line(const dl_follower_ops *ops, const char *line)
{
    dl_run_event *e = malloc(sizeof *e);
    if (e) {
        dl_records_event_parse(line, e);
        if (ops->event)
            ops->event(ops->user, e);
    }
    free(e);
    return 0;
}

static int system_line(const dl_follower_ops *ops, const char *line)
{
    dl_run_system *s = malloc(sizeof *s);
    int rc = s ? dl_records_system_parse(line, s) : 0;
    if (rc > 0 && ops->sample)
        ops->sample(ops->user, s);
    free(s);
    return rc;
}

/* A last line without its newline: reported once, when no process holds
 * the run's lock (else it is being written and waits for the next call). */
static void torn_line(const dl_follower_ops *ops, const char *dir, const char *name,
                      const char *path, long off, long *torn_at, long n)
{
    if (*torn_at != off + 1 && dl_runlog_check_free(dir) == DL_OK) {
        char msg[240];
        *torn_at = off + 1;
        snprintf(msg, sizeof msg,
                 "%s line %ld: cut short (%ld bytes without a newline: "
                 "its writer was killed mid-line): ignored",
                 name, line_number(path, off), n);
        warn(ops, msg);
    }
    dl_error_clear();
}

/* Reads complete new lines of dir/name from *off; calls fn for each. A
 * line fn cannot read is skipped with a warning naming file and line. */
static void follow_lines(const dl_follower_ops *ops, const char *dir, const char *name, long *off,
                         long *torn_at, line_fn fn)
{
    char path[1200];
    FILE *f = fopen(dl_rundir_path(dir, name, path, sizeof path), "r");
    if (!f)
        return;
    if (fseek(f, *off, SEEK_SET) != 0) {
        fclose(f);
        return;
    }
    char *line = NULL, msg[240];
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] != '\n') {
            torn_line(ops, dir, name, path, *off, torn_at, (long)n);
            break;
        }
        line[n - 1] = 0;
        if (fn(ops, line) < 0) {
            snprintf(msg, sizeof msg,
                     "%s line %ld: not a JSON object (a torn or damaged "
                     "line): ignored",
                     name, line_number(path, *off));
            warn(ops, msg);
        }
        *off += (long)n;
    }
    free(line);
    fclose(f);
}

/* dir/name parsed when its modification time is not *mtime (then updated). */
static cJSON *read_if_changed(const char *dir, const char *name, double *mtime)
{
    char path[1200];
    struct stat st;
    if (stat(dl_rundir_path(dir, name, path, sizeof path), &st) != 0)
        return NULL;
    double m = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
    if (m == *mtime)
        return NULL;
    cJSON *j = dl_rundir_read_json(path);
    if (j)
        *mtime = m;
    else
        dl_error_clear();
    return j;
}

/* metrics.jsonl replaced by a resume (another file), or cut: what was read
 * may be gone (a "stop" record, steps after the checkpoint), so the
 * records are read again from the top. */
static void check_replaced(dl_follower *f, const dl_follower_ops *ops)
{
    char path[1200];
    struct stat st;
    if (stat(dl_rundir_path(f->dir, DL_RUN_FILE_METRICS, path, sizeof path), &st) != 0)
        return;
    if (f->metrics_ino &&
        ((unsigned long long)st.st_ino != f->metrics_ino || (long)st.st_size < f->off_metrics)) {
        if (ops->metrics_restart)
            ops->metrics_restart(ops->user);
        f->off_metrics = 0;
        f->torn_at[0] = 0;
    }
    f->metrics_ino = (unsigned long long)st.st_ino;
}

static void documents(dl_follower *f, const dl_follower_ops *ops)
{
    cJSON *p = read_if_changed(f->dir, DL_RUN_FILE_PROFILE, &f->profile_mtime);
    if (p && ops->profile)
        ops->profile(ops->user, p);
    cJSON_Delete(p);
    cJSON *s = read_if_changed(f->dir, DL_RUN_FILE_SUMMARY, &f->summary_mtime);
    if (s && ops->summary) {
        dl_run_summary *sum = malloc(sizeof *sum);
        if (sum) {
            dl_records_summary_parse(s, sum);
            ops->summary(ops->user, sum);
        }
        free(sum);
    }
    cJSON_Delete(s);
}

int dl_follower_poll(dl_follower *f, const dl_follower_ops *ops)
{
    if (!f->have_config) {
        dl_run_config c;
        if (dl_records_config(f->dir, &c) < 0)
            return dl_error(DL_EIO, "%s: not a run folder (no readable " DL_RUN_FILE_CONFIG ")",
                            f->dir);
        if (ops->config)
            ops->config(ops->user, &c);
        f->have_config = 1;
    }
    check_replaced(f, ops);
    follow_lines(ops, f->dir, DL_RUN_FILE_METRICS, &f->off_metrics, &f->torn_at[0], metrics_line);
    follow_lines(ops, f->dir, DL_RUN_FILE_EVENTS, &f->off_events, &f->torn_at[1], events_line);
    follow_lines(ops, f->dir, DL_RUN_FILE_SYSTEM, &f->off_system, &f->torn_at[2], system_line);
    documents(f, ops);
    return DL_OK;
}
