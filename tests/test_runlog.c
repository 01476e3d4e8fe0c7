/* test_runlog.c - run folders (atomic files, metrics, summary, hashing, made under a temporary name, the run lock, torn lines) and checkpoints (round trip, refusals) */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/core/backend.h"
#include "engine/train/checkpoint.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/nn/nn.h"
#include "engine/rundir/records.h"
#include "engine/rundir/runlog.h"
#include "engine/observe/telemetry.h"
#include "tests/check.h"
#include "tui/tables.h"

static char tmpdir[256];

static void path_in(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
}

static const char *hash64 = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

/* A fresh run NAME under tmpdir/SUB with an empty config; its folder into
 * dir. NULL (and a failed check) when it cannot be made. */
static dl_runlog *new_run(const char *sub, const char *name, char *dir, size_t size)
{
    char out[512];
    path_in(out, sizeof out, sub);
    cJSON *cfg = cJSON_CreateObject();
    dl_runlog *r = NULL;
    CHECK_OK(dl_runlog_create(&r, out, name, hash64, cfg, NULL));
    cJSON_Delete(cfg);
    if (r)
        snprintf(dir, size, "%s", dl_runlog_dir(r));
    return r;
}

static void test_atomic_write_and_hash(void)
{
    char p[512];
    path_in(p, sizeof p, "a.json");
    const char *text = "{\"b\": 1, \"a\": [1, 2]}";
    CHECK_OK(dl_fs_write_atomic(p, text, strlen(text)));
    cJSON *j = dl_runlog_read_json(p);
    CHECK(j != NULL);
    cJSON *k = cJSON_Parse("{\"a\": [1, 2], \"b\": 1}");
    char h1[65], h2[65];
    dl_runlog_hash_json(j, h1);
    dl_runlog_hash_json(k, h2);
    CHECK_MSG(!strcmp(h1, h2), "key order changed the hash");
    cJSON_ReplaceItemInObject(k, "b", cJSON_CreateNumber(2));
    dl_runlog_hash_json(k, h2);
    CHECK(strcmp(h1, h2) != 0);
    cJSON_Delete(j);
    cJSON_Delete(k);
    /* no temporary file is left behind */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);
}

static void test_run_folder(void)
{
    char out[512];
    path_in(out, sizeof out, "runs");
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "name", "t");
    const char *hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    dl_runlog *r = NULL;
    CHECK_OK(dl_runlog_create(&r, out, "my run/x", hash, cfg, NULL));
    if (!r) {
        cJSON_Delete(cfg);
        return;
    }
    CHECK(strstr(dl_runlog_dir(r), "-my_run_x-01234567") != NULL);
    const char *names[] = {"val_loss", "val_acc", "lr"};
    double a[] = {0.5, 0.8, 0.1}, b[] = {0.4, 0.7, 0.05}, c[] = {0.6, 0.9, 0.01};
    CHECK_OK(dl_runlog_metrics(r, "epoch", 10, 1, names, a, 3));
    CHECK_OK(dl_runlog_metrics(r, "epoch", 20, 2, names, b, 3));
    CHECK_OK(dl_runlog_metrics(r, "epoch", 30, 3, names, c, 3));
    CHECK_OK(dl_runlog_event(r, "note", "hello %d", 42));
    dl_run_totals t = {30, 3, 300};
    CHECK_OK(dl_runlog_summary(r, "finished", &t, NULL, NULL));
    char p[1200], found[1100];
    snprintf(p, sizeof p, "%s/summary.json", dl_runlog_dir(r));
    cJSON *s = dl_runlog_read_json(p);
    const cJSON *best = cJSON_GetObjectItem(s, "best");
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(best, "val_loss"), "value")->valuedouble,
               0.4, 1e-12);
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(best, "val_acc"), "value")->valuedouble, 0.9,
               1e-12);
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(s, "final"), "val_loss")->valuedouble, 0.6,
               1e-12);
    CHECK(cJSON_GetObjectItem(best, "lr") == NULL);
    CHECK(!strcmp(cJSON_GetObjectItem(s, "status")->valuestring, "finished"));
    cJSON_Delete(s);
    dl_run_summary *rs = malloc(sizeof *rs); /* the record reader sees the same */
    CHECK(rs && dl_records_summary(dl_runlog_dir(r), rs) == DL_OK);
    if (rs) {
        CHECK_NEAR(dl_records_value(rs->best, rs->nbest, "val_loss"), 0.4, 1e-12);
        CHECK_NEAR(dl_records_value(rs->final, rs->nfinal, "val_loss"), 0.6, 1e-12);
        CHECK(isnan(dl_records_value(rs->best, rs->nbest, "lr")) &&
              !strcmp(rs->status, "finished"));
    }
    free(rs);
    CHECK(dl_runlog_find_finished(out, hash, found, sizeof found) == 1);
    CHECK(dl_runlog_find_finished(out, "ffff", found, sizeof found) == 0);
    char dir[1100];
    snprintf(dir, sizeof dir, "%s", dl_runlog_dir(r));
    dl_runlog_destroy(r);
    /* reopen at step 20: the record of step 30 goes, bests are rebuilt */
    CHECK_OK(dl_runlog_reopen(&r, dir, 20));
    if (r) {
        dl_run_totals t2 = {20, 2, 200};
        CHECK_OK(dl_runlog_summary(r, "stopped", &t2, "test", NULL));
        s = dl_runlog_read_json(p);
        best = cJSON_GetObjectItem(s, "best");
        CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(best, "val_acc"), "value")->valuedouble,
                   0.8, 1e-12);
        cJSON_Delete(s);
        dl_runlog_destroy(r);
    }
    char resolved[1100];
    CHECK_OK(dl_runlog_resolve(out, "my_run_x", resolved, sizeof resolved));
    CHECK(dl_runlog_resolve(out, "nothing-like-it", resolved, sizeof resolved) == DL_EINVAL);
    cJSON_Delete(cfg);
}

/* --- the run folder's making, its lock, torn lines --------------------------------- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* Visible entries of dir (not starting with '.'), and hidden temporary run folders. */
static void count_entries(const char *dir, int *visible, int *temps)
{
    *visible = *temps = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (e->d_name[0] != '.')
            (*visible)++;
        else if (dl_runlog_is_temp_name(e->d_name))
            (*temps)++;
    }
    if (d)
        closedir(d);
}

/* Several processes creating a run of the same name in the same second get
 * distinct folders, each whole, each named in its own config.json. */
static void test_concurrent_create(void)
{
    char out[512];
    path_in(out, sizeof out, "race");
    cJSON *cfg = cJSON_CreateObject();
    enum { KIDS = 6 };
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            dl_runlog *r = NULL;
            int rc = dl_runlog_create(&r, out, "same", hash64, cfg, NULL);
            dl_runlog_destroy(r);
            _exit(rc == DL_OK ? 0 : 1);
        }
    }
    int ok = 0;
    for (int i = 0; i < KIDS; i++) {
        int st;
        if (kids[i] > 0 && waitpid(kids[i], &st, 0) == kids[i] && WIFEXITED(st) &&
            WEXITSTATUS(st) == 0)
            ok++;
    }
    CHECK(ok == KIDS);
    int visible, temps;
    count_entries(out, &visible, &temps);
    CHECK_MSG(visible == KIDS && temps == 0, "%d folders, %d temporary ones", visible, temps);
    DIR *d = opendir(out);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s/config.json", out, e->d_name);
        cJSON *c = dl_runlog_read_json(p);
        const cJSON *run = cJSON_GetObjectItem(c, "run");
        CHECK_MSG(cJSON_IsString(run) && !strcmp(run->valuestring, e->d_name), "%s says %s",
                  e->d_name, cJSON_IsString(run) ? run->valuestring : "nothing");
        cJSON_Delete(c);
        snprintf(p, sizeof p, "%s/%s/summary.json", out, e->d_name);
        c = dl_runlog_read_json(p);
        run = cJSON_GetObjectItem(c, "run");
        CHECK(cJSON_IsString(run) && !strcmp(run->valuestring, e->d_name));
        cJSON_Delete(c);
    }
    if (d)
        closedir(d);
    cJSON_Delete(cfg);
}

/* A temporary folder whose creator died is not a run and goes at the next
 * create; one whose creator lives (its lock held) stays. */
static void test_stale_temp_folders(void)
{
    char out[512], dead[700], live[700], p[800], names[256];
    path_in(out, sizeof out, "stale");
    mkdir(out, 0755);
    snprintf(dead, sizeof dead, "%s/.20250101-000000-x-01234567.tmp-999999-1", out);
    snprintf(live, sizeof live, "%s/.20250101-000000-y-01234567.tmp-999998-1", out);
    mkdir(dead, 0755);
    mkdir(live, 0755);
    snprintf(p, sizeof p, "%s/run.lock", dead);
    write_text(p, "999999 nowhere\n");
    snprintf(p, sizeof p, "%s/config.json", dead);
    write_text(p, "{\"name\":");
    snprintf(p, sizeof p, "%s/run.lock", live);
    write_text(p, "1 here\n");
    int fd = open(p, O_RDONLY);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
    CHECK(dl_runlog_stale_temps(out, 0, names, sizeof names) == 1);
    CHECK_MSG(strstr(names, ".tmp-999999-1") && !strstr(names, "999998"), "%s", names);
    char found[1100];
    CHECK(dl_runlog_resolve(out, "x-0123", found, sizeof found) == DL_EINVAL);
    cJSON *cfg = cJSON_CreateObject();
    dl_runlog *r = NULL;
    CHECK_OK(dl_runlog_create(&r, out, "fresh", hash64, cfg, NULL));
    dl_runlog_destroy(r);
    cJSON_Delete(cfg);
    struct stat st;
    CHECK_MSG(stat(dead, &st) != 0, "the dead creator's folder is still there");
    CHECK_MSG(stat(live, &st) == 0, "the live creator's folder was removed");
    if (fd >= 0)
        close(fd);
    CHECK(dl_runlog_stale_temps(out, 1, NULL, 0) == 1);
    CHECK(stat(live, &st) != 0);

    /* a creator stopped for minutes before it renamed run.lock.new into
     * place is still alive: it holds that lock, so its folder stays */
    char slow[700];
    snprintf(slow, sizeof slow, "%s/.20250101-000000-z-01234567.tmp-999997-1", out);
    mkdir(slow, 0755);
    snprintf(p, sizeof p, "%s/run.lock.new", slow);
    write_text(p, "2 here\n");
    fd = open(p, O_RDONLY);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
    struct timeval old[2] = {{time(NULL) - 300, 0}, {time(NULL) - 300, 0}};
    CHECK(utimes(slow, old) == 0);
    CHECK(dl_runlog_stale_temps(out, 1, NULL, 0) == 0);
    CHECK_MSG(stat(slow, &st) == 0, "a slow creator's folder was removed");
    if (fd >= 0)
        close(fd);
    CHECK(dl_runlog_stale_temps(out, 1, NULL, 0) == 1); /* gone with its creator */
    CHECK(stat(slow, &st) != 0);
}

/* A run is used by one process at a time: a fresh run holds its lock from
 * the start; a reopen while it is held fails, naming the holder, and
 * changes nothing; once released it succeeds. */
static void test_run_lock(void)
{
    char dir[1100], p[1200];
    dl_runlog *b = NULL, *a = new_run("lock", "locked", dir, sizeof dir);
    if (!a)
        return;
    const char *names[] = {"loss"};
    double v[] = {0.5};
    CHECK_OK(dl_runlog_metrics(a, "step", 10, 1, names, v, 1));
    char want[64];
    snprintf(want, sizeof want, "in use by process %ld", (long)getpid());
    CHECK(dl_runlog_check_free(dir) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), want), "%s", dl_error_message());
    CHECK(dl_runlog_reopen(&b, dir, 0) == DL_EINVAL && b == NULL);
    CHECK_MSG(strstr(dl_error_message(), want) && strstr(dl_error_message(), "locked"), "%s",
              dl_error_message());
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    CHECK_MSG(strstr(slurp(p) ? slurp(p) : "", "\"step\":10"), "the refused reopen cut metrics");
    dl_runlog_destroy(a);
    CHECK_OK(dl_runlog_check_free(dir));
    CHECK_OK(dl_runlog_reopen(&b, dir, 100));
    CHECK(dl_runlog_check_free(dir) == DL_EINVAL);
    dl_runlog_destroy(b);
    CHECK_OK(dl_runlog_check_free(dir));
}

/* Lines a killed writer cut short: a resume drops them (with a warning in
 * events.log) so new lines start clean; the telemetry follower (watch)
 * skips them with a warning and reads every whole line. */
static void test_torn_lines(void)
{
    char dir[1024], p[1200];
    dl_runlog *r = new_run("torn", "torn", dir, sizeof dir);
    if (!r)
        return;
    dl_runlog_destroy(r);
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    write_text(p, "{\"kind\":\"step\",\"step\":10,\"epoch\":1,\"loss\":0.5}\n"
                  "{\"kind\":\"step\",\"step\":20,\"epoch\":1,\"loss\":0.4}\n"
                  "{\"kind\":\"step\",\"step\":30,\"ep");
    snprintf(p, sizeof p, "%s/system.jsonl", dir);
    write_text(p, "{\"t\":0.5,\"cpu_total\":10}\n{\"t\":1.0,\"cpu_total\":20}\n{\"t\":1.5,\"cpu_t");
    snprintf(p, sizeof p, "%s/events.log", dir);
    write_text(p, "2025-01-01T00:00:00Z started: x\n2025-01-01T00:00:01Z note: half");

    /* watch: every whole line, a warning per torn file, no failure */
    dl_telemetry *t = NULL;
    dl_telemetry_snapshot *snap = dl_telemetry_snapshot_create();
    CHECK_OK(dl_telemetry_create(&t));
    dl_tele_follow fw;
    memset(&fw, 0, sizeof fw);
    snprintf(fw.dir, sizeof fw.dir, "%s", dir);
    if (t && snap) {
        CHECK_OK(dl_telemetry_follow(t, &fw));
        CHECK_OK(dl_telemetry_follow(t, &fw)); /* again: the warnings are not repeated */
        dl_telemetry_read(t, snap);
        CHECK_MSG(snap->nsys == 2, "%d system samples", snap->nsys);
        CHECK(snap->run.step == 20);
        int warn_sys = 0, warn_metrics = 0, warn_events = 0, notes = 0;
        for (int i = 0; i < snap->nevents; i++) {
            const dl_tele_event *e = &snap->events[i];
            if (!strcmp(e->kind, "warning") && strstr(e->text, "cut short")) {
                warn_sys += strstr(e->text, "system.jsonl line 3") != NULL;
                warn_metrics += strstr(e->text, "metrics.jsonl line 3") != NULL;
                warn_events += strstr(e->text, "events.log line 2") != NULL;
            }
            notes += !strcmp(e->kind, "note");
        }
        CHECK_MSG(warn_sys == 1 && warn_metrics == 1 && warn_events == 1,
                  "warnings: system %d, metrics %d, events %d", warn_sys, warn_metrics,
                  warn_events);
        CHECK(notes == 0);
    }

    /* resume: the torn lines go, with warnings; appended lines are whole */
    CHECK_OK(dl_runlog_reopen(&r, dir, 1000));
    if (r) {
        const char *names[] = {"loss"};
        double v[] = {0.3};
        CHECK_OK(dl_runlog_metrics(r, "step", 30, 1, names, v, 1));
        CHECK_OK(dl_runlog_event(r, "note", "after"));
        dl_runlog_destroy(r);
    }
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    const char *m = slurp(p);
    CHECK(m && !strstr(m, "\"ep\n") && strstr(m, "\"step\":20") && strstr(m, "\"step\":30"));
    snprintf(p, sizeof p, "%s/system.jsonl", dir);
    m = slurp(p);
    CHECK(m && !strcmp(m, "{\"t\":0.5,\"cpu_total\":10}\n{\"t\":1.0,\"cpu_total\":20}\n"));
    snprintf(p, sizeof p, "%s/events.log", dir);
    m = slurp(p);
    CHECK_MSG(m && !strstr(m, "half") &&
                  strstr(m, "warning: metrics.jsonl: 1 unreadable line "
                            "dropped (first: line 3") &&
                  strstr(m, "warning: system.jsonl: a torn last line (15 bytes) dropped") &&
                  strstr(m, "warning: events.log: a torn last line") && strstr(m, " note: after\n"),
              "events.log:\n%s", m ? m : "");

    /* the follower reads on from where the torn line was: the new lines */
    if (t && snap) {
        CHECK_OK(dl_telemetry_follow(t, &fw));
        dl_telemetry_read(t, snap);
        int after = 0;
        for (int i = 0; i < snap->nevents; i++)
            after +=
                !strcmp(snap->events[i].kind, "note") && !strcmp(snap->events[i].text, "after");
        CHECK(after == 1);
    }
    dl_telemetry_snapshot_destroy(snap);
    dl_telemetry_destroy(t);
}

/* A follower (watch, the workbench) of a run that is stopped and resumed:
 * the resume replaces metrics.jsonl without the "stop" record, and the
 * follower reads the series again instead of going on from its offset in
 * the old file (which lost the step after the record, or landed mid-line). */
static void test_follow_across_resume(void)
{
    char dir[1024];
    dl_runlog *r = new_run("follow-resume", "fr", dir, sizeof dir);
    if (!r)
        return;
    const char *names[] = {"loss"};
    double v[] = {0.5};
    CHECK_OK(dl_runlog_metrics(r, "step", 10, 1, names, v, 1));
    v[0] = 0.45;
    CHECK_OK(dl_runlog_metrics(r, "stop", 15, 1, names, v, 1));
    dl_runlog_destroy(r);

    dl_telemetry *t = NULL;
    dl_telemetry_snapshot *snap = dl_telemetry_snapshot_create();
    CHECK_OK(dl_telemetry_create(&t));
    dl_tele_follow fw;
    memset(&fw, 0, sizeof fw);
    snprintf(fw.dir, sizeof fw.dir, "%s", dir);
    if (!t || !snap)
        goto done;
    CHECK_OK(dl_telemetry_follow(t, &fw));
    dl_telemetry_read(t, snap);
    const dl_tele_series *loss = dl_telemetry_series(snap, "loss");
    CHECK(loss && loss->n == 2 && loss->x[1] == 15);

    CHECK_OK(dl_runlog_reopen(&r, dir, 15)); /* drops the stop record */
    if (r) {
        for (int step = 20; step <= 40; step += 10) {
            v[0] = 0.4 - step * 1e-3;
            CHECK_OK(dl_runlog_metrics(r, "step", step, 1, names, v, 1));
        }
        dl_runlog_destroy(r);
    }
    CHECK_OK(dl_telemetry_follow(t, &fw));
    dl_telemetry_read(t, snap);
    loss = dl_telemetry_series(snap, "loss");
    static const double want[] = {10, 20, 30, 40};
    int same = loss && loss->n == 4;
    for (int i = 0; same && i < 4; i++)
        same = loss->x[i] == want[i];
    CHECK_MSG(same, "loss points after the resume: %d (want steps 10 20 30 40)",
              loss ? loss->n : -1);
    int warnings = 0;
    for (int i = 0; i < snap->nevents; i++)
        warnings += !strcmp(snap->events[i].kind, "warning");
    CHECK(warnings == 0);

    /* a metrics.jsonl that cannot be read is not rewritten empty: here a
     * folder in its place (fopen succeeds, the read fails) */
    char m[1200], moved[1300];
    snprintf(m, sizeof m, "%s/metrics.jsonl", dir);
    snprintf(moved, sizeof moved, "%s.kept", m);
    CHECK(rename(m, moved) == 0 && mkdir(m, 0700) == 0);
    CHECK(dl_runlog_reopen(&r, dir, 40) == DL_EIO && r == NULL);
    CHECK_MSG(strstr(dl_error_message(), "metrics.jsonl") != NULL, "%s", dl_error_message());
    struct stat st;
    CHECK(stat(m, &st) == 0 && S_ISDIR(st.st_mode));
done:
    dl_telemetry_snapshot_destroy(snap);
    dl_telemetry_destroy(t);
}

/* The workbench's runs screen (F2) lists whole runs only: not a folder
 * being made or left half-made, and a torn jsonl line changes nothing. */
static void test_workbench_runs_view(void)
{
    char out[512], p[1200], dir[1024];
    path_in(out, sizeof out, "view");
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "name", "shown");
    dl_runlog *r = NULL;
    CHECK_OK(dl_runlog_create(&r, out, "shown", hash64, cfg, NULL));
    cJSON_Delete(cfg);
    if (!r)
        return;
    snprintf(dir, sizeof dir, "%s", dl_runlog_dir(r));
    dl_run_totals t = {10, 1, 100};
    CHECK_OK(dl_runlog_summary(r, "finished", &t, NULL, NULL));
    dl_runlog_destroy(r);
    snprintf(p, sizeof p, "%s/system.jsonl", dir);
    write_text(p, "{\"t\":0.5}\n{\"t\":1");
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    write_text(p, "{\"kind\":\"step\",\"st");
    snprintf(p, sizeof p, "%s/.20250101-000000-half-01234567.tmp-999999-1", out);
    mkdir(p, 0755);
    snprintf(p + strlen(p), sizeof p - strlen(p), "/summary.json");
    write_text(p, "{\"name\":\"half\",\"status\":\"running\"}\n");
    static dl_ui_runs view;
    dl_tables_load_runs(&view, out);
    CHECK_MSG(view.n == 1, "%d rows", view.n);
    CHECK(view.n < 1 || (!strcmp(view.rows[0].name, "shown") &&
                         !strcmp(view.rows[0].status, "finished") && view.rows[0].steps == 10));
}

static dl_model *small_model(int moments, uint64_t seed)
{
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_linear(4, 8, 1));
    dl_nn_sequential_add(seq, dl_nn_batchnorm(8, 1e-5f, 0.1f));
    dl_nn_sequential_add(seq, dl_nn_linear(8, 3, 1));
    dl_shape in = dl_shape_make(1, (int64_t[]){4});
    dl_model *m = NULL;
    if (dl_model_create(&m, seq, &in) < 0 ||
        dl_model_init_state(m, dl_backend_cpu(1), moments, seed) < 0) {
        dl_model_destroy(m);
        return NULL;
    }
    return m;
}

static void test_checkpoint_round_trip(void)
{
    dl_model *a = small_model(2, 1), *b = small_model(2, 2);
    CHECK(a && b);
    if (!a || !b)
        goto done;
    dl_model_state sa, sb;
    dl_model_get_state(a, &sa);
    dl_model_get_state(b, &sb);
    for (size_t i = 0; i < sa.count; i++)
        sa.moment1[i] = (float)i * 0.5f, sa.moment2[i] = 1.0f / (float)(i + 1);
    CHECK(memcmp(sa.params, sb.params, sa.count * 4) != 0);
    char p[512];
    path_in(p, sizeof p, "ck.h5");
    dl_checkpoint_info info;
    memset(&info, 0, sizeof info);
    info.cursor.step = 123;
    info.cursor.epoch = 2;
    info.cursor.loss_scale = 1;
    info.cursor.base_lr = 0.25f;
    info.seed = 99;
    snprintf(info.config_hash, sizeof info.config_hash, "abc");
    CHECK_OK(dl_checkpoint_save(p, a, &info));
    dl_checkpoint_info got;
    CHECK_OK(dl_checkpoint_load(p, b, &got));
    CHECK(memcmp(sa.params, sb.params, sa.count * 4) == 0);
    CHECK(memcmp(sa.moment1, sb.moment1, sa.count * 4) == 0);
    CHECK(memcmp(sa.moment2, sb.moment2, sa.count * 4) == 0);
    CHECK(memcmp(sa.buffers, sb.buffers, sa.buffer_count * 4) == 0);
    CHECK(got.cursor.step == 123 && got.cursor.epoch == 2 && got.seed == 99);
    CHECK_NEAR(got.cursor.base_lr, 0.25, 0);
    CHECK(!strcmp(got.config_hash, "abc"));
done:
    dl_model_destroy(a);
    dl_model_destroy(b);
}

static void test_checkpoint_refusals(void)
{
    dl_model *a = small_model(2, 1), *one = small_model(1, 1);
    CHECK(a && one);
    if (!a || !one)
        goto done;
    char p[512], q[512];
    path_in(p, sizeof p, "ck2.h5");
    dl_checkpoint_info info;
    memset(&info, 0, sizeof info);
    info.cursor.loss_scale = 1;
    CHECK_OK(dl_checkpoint_save(p, a, &info));
    /* another optimizer */
    dl_checkpoint_info got;
    CHECK(dl_checkpoint_load(p, one, &got) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "moment"), "%s", dl_error_message());
    /* torn: the first half of the file */
    FILE *f = fopen(p, "rb");
    char buf[1 << 16];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    path_in(q, sizeof q, "torn.h5");
    f = fopen(q, "wb");
    if (f) {
        fwrite(buf, 1, n / 2, f);
        fclose(f);
    }
    CHECK(dl_checkpoint_load(q, a, &got) < 0);
    CHECK_MSG(strstr(dl_error_message(), "torn.h5"), "%s", dl_error_message());
    /* flipped data bytes: the checksum catches it (the params arena is
     * stored contiguously: flip bytes inside it, found by its values) */
    dl_model_state st;
    dl_model_get_state(a, &st);
    char *at = memmem(buf, n, st.params, 8 * sizeof(float));
    CHECK(at != NULL);
    if (at)
        memcpy(at + 4, "XXXX", 4);
    f = fopen(q, "wb");
    if (f) {
        fwrite(buf, 1, n, f);
        fclose(f);
    }
    CHECK(dl_checkpoint_load(q, a, &got) < 0);
    /* foreign: a text file */
    f = fopen(q, "wb");
    if (f) {
        fputs("not hdf5\n", f);
        fclose(f);
    }
    CHECK(dl_checkpoint_load(q, a, &got) == DL_EIO);
    CHECK_MSG(strstr(dl_error_message(), "not a readable HDF5 file"), "%s", dl_error_message());
done:
    dl_model_destroy(a);
    dl_model_destroy(one);
}

/* The record readers: each line shape parsed as runlog and the monitor
 * write it; a failed run marked in its summary. */
static void test_records(void)
{
    dl_run_event e;
    dl_records_event_parse("2026-12-01T18:31:28Z note: a: b", &e);
    CHECK(e.wall == 1796149888.0 && !strcmp(e.kind, "note") && !strcmp(e.text, "a: b"));
    dl_records_event_parse("no stamp", &e);
    CHECK(e.wall == 0 && !strcmp(e.kind, "log") && !strcmp(e.text, "no stamp"));
    dl_run_metrics m;
    CHECK(dl_records_metrics_parse("{\"kind\":\"step\",\"step\":5,\"loss\":null,\"acc\":0.5}",
                                   &m) == 1);
    CHECK(!strcmp(m.kind, "step") && m.has_step && m.step == 5 && !m.has_epoch && m.n == 2);
    CHECK(isnan(dl_records_value(m.v, m.n, "loss")) && dl_records_value(m.v, m.n, "acc") == 0.5);
    CHECK(dl_records_metrics_parse("  ", &m) == 0 && dl_records_metrics_parse("{\"ki", &m) == -1);
    dl_run_system s, back;
    memset(&s, 0, sizeof s);
    s.t = 1.5;
    s.ncpu = 2;
    s.cpu_pct[1] = 50;
    s.ngpu = 1;
    snprintf(s.gpu[0].name, sizeof s.gpu[0].name, "GPU \"x\"");
    s.gpu[0].util_pct = 99;
    char line[4096];
    CHECK(dl_records_system_format(&s, line, sizeof line) < (int)sizeof line);
    CHECK(dl_records_system_parse(line, &back) == 1);
    CHECK(back.t == 1.5 && back.ncpu == 2 && back.cpu_pct[1] == 50 && back.ngpu == 1 &&
          !strcmp(back.gpu[0].name, "GPU x") && back.gpu[0].util_pct == 99);
    char dir[1024];
    dl_runlog *r = new_run("records", "rec", dir, sizeof dir);
    if (!r)
        return;
    dl_runlog_destroy(r);
    CHECK_OK(dl_runlog_mark_failed(dir, "gone"));
    dl_run_summary sum;
    CHECK_OK(dl_records_summary(dir, &sum));
    CHECK(!strcmp(sum.status, "failed") && sum.has_message && !strcmp(sum.message, "gone"));
    CHECK(sum.steps == 0 && isnan(sum.cost) && sum.nfinal == 0 && sum.nbest == 0);
    dl_run_config cfg;
    CHECK_OK(dl_records_config(dir, &cfg));
    CHECK(cfg.accumulate == 1 && cfg.workers == -1 && !cfg.study[0] && isnan(cfg.trial));
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dlbench-test-runlog-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(test_atomic_write_and_hash);
    RUN(test_run_folder);
    RUN(test_concurrent_create);
    RUN(test_stale_temp_folders);
    RUN(test_run_lock);
    RUN(test_torn_lines);
    RUN(test_follow_across_resume);
    RUN(test_workbench_runs_view);
    RUN(test_checkpoint_round_trip);
    RUN(test_checkpoint_refusals);
    RUN(test_records);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        printf("  (could not remove %s)\n", tmpdir);
    CHECK_EXIT();
}
