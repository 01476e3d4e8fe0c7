/* test_runlog.c - run folders (atomic files, metrics, summary, hashing) and checkpoints (round trip, refusals) */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/checkpoint.h"
#include "engine/error.h"
#include "engine/nn.h"
#include "engine/runlog.h"
#include "tests/check.h"

static char tmpdir[256];

static void path_in(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
}

static void test_atomic_write_and_hash(void)
{
    char p[512];
    path_in(p, sizeof p, "a.json");
    const char *text = "{\"b\": 1, \"a\": [1, 2]}";
    CHECK_OK(dl_runlog_write_atomic(p, text, strlen(text)));
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
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(best, "val_loss"), "value")->valuedouble, 0.4, 1e-12);
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(best, "val_acc"), "value")->valuedouble, 0.9, 1e-12);
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(s, "final"), "val_loss")->valuedouble, 0.6, 1e-12);
    CHECK(cJSON_GetObjectItem(best, "lr") == NULL);
    CHECK(!strcmp(cJSON_GetObjectItem(s, "status")->valuestring, "finished"));
    cJSON_Delete(s);
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
        CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(best, "val_acc"), "value")->valuedouble, 0.8, 1e-12);
        cJSON_Delete(s);
        dl_runlog_destroy(r);
    }
    char resolved[1100];
    CHECK_OK(dl_runlog_resolve(out, "my_run_x", resolved, sizeof resolved));
    CHECK(dl_runlog_resolve(out, "nothing-like-it", resolved, sizeof resolved) == DL_EINVAL);
    cJSON_Delete(cfg);
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
    /* flipped data bytes: the checksum catches it (the params array is
     * stored contiguously; flip one byte in the last quarter) */
    memcpy(buf + n - n / 8, "XXXX", 4);
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

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dlbench-test-runlog-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL setup: mkdtemp\n");
        return 1;
    }
    RUN(test_atomic_write_and_hash);
    RUN(test_run_folder);
    RUN(test_checkpoint_round_trip);
    RUN(test_checkpoint_refusals);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        printf("  (could not remove %s)\n", tmpdir);
    CHECK_EXIT();
}
