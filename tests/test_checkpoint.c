/* test_checkpoint.c - checkpoints: version 1 files still load, version 2 names every tensor with its shape, wrong models and damaged files are refused */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/h5util.h"
#include "engine/core/backend.h"
#include "engine/train/checkpoint.h"
#include "tests/check.h"
#include "tests/data/checkpoint_v1_model.h"

#define V1_FILE "tests/data/checkpoint-v1.h5"

static dl_model *new_model(dl_layer *root, int moments)
{
    dl_model *m = NULL;
    dl_shape in = {1, {4}};
    if (dl_model_create(&m, root, &in) < 0 ||
        dl_model_init_state(m, dl_backend_cpu(0), moments, 1) < 0)
        return NULL;
    return m;
}

/* How many state values of m differ from v1_pattern (padding included). */
static size_t pattern_mismatches(dl_model *m)
{
    dl_model_state st;
    dl_model_get_state(m, &st);
    const float *r[4] = {st.params, st.moment1, st.moment2, st.buffers};
    size_t n[4] = {st.count, st.count, st.count, st.buffer_count}, bad = 0;
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < n[k]; i++)
            bad += r[k][i] != v1_pattern(k, i);
    return bad;
}

static void fill_pattern(dl_model *m)
{
    dl_model_state st;
    dl_model_get_state(m, &st);
    float *r[4] = {st.params, st.moment1, st.moment2, st.buffers};
    size_t n[4] = {st.count, st.count, st.count, st.buffer_count};
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < n[k]; i++)
            r[k][i] = v1_pattern(k, i);
}

static void test_v1_file_loads(void)
{
    dl_model *m = new_model(v1_model_root(), 2);
    CHECK(m != NULL);
    if (!m)
        return;
    CHECK(pattern_mismatches(m) > 0); /* a fresh model is not the pattern */
    dl_checkpoint_info info;
    CHECK_OK(dl_checkpoint_load(V1_FILE, m, &info));
    CHECK(pattern_mismatches(m) == 0);
    CHECK(info.cursor.step == 42 && info.cursor.epoch == 3 && info.seed == 7);
    dl_checkpoint_contents c;
    CHECK_OK(dl_checkpoint_read(V1_FILE, &c));
    CHECK(c.version == 1 && c.moments == 2 && c.ntensors == dl_model_num_params(m));
    const dl_checkpoint_tensor *t = dl_checkpoint_find(&c, "Linear4.weight", 0);
    CHECK(t && t->count == 18 && t->shape.ndim == 1 && t->shape.dim[0] == 18);
    dl_checkpoint_contents_done(&c);
    dl_model_destroy(m);
}

/* Reads dataset name of path through HDF5 itself: its dims and values. */
static int read_named(const char *path, const char *name, hsize_t *dims, int *rank, float *v,
                      size_t max)
{
    dl_hdf5_lock();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    hid_t s = d >= 0 ? H5Dget_space(d) : -1;
    *rank = s >= 0 ? H5Sget_simple_extent_dims(s, dims, NULL) : -1;
    int ok = *rank >= 0 && (size_t)H5Sget_simple_extent_npoints(s) <= max &&
             H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0;
    if (s >= 0)
        H5Sclose(s);
    if (d >= 0)
        H5Dclose(d);
    if (f >= 0)
        H5Fclose(f);
    dl_hdf5_unlock();
    return ok ? 0 : -1;
}

/* Every parameter, moment and buffer as its own dataset: its shape, its
 * values at its place in the state. */
static void check_named(const char *path, dl_model *m)
{
    static const char *groups[3] = {"params", "moment1", "moment2"};
    dl_model_state st;
    dl_model_get_state(m, &st);
    const float *r[3] = {st.params, st.moment1, st.moment2};
    float v[64];
    hsize_t dims[4];
    int rank;
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        for (int g = 0; g < 3; g++) {
            char name[128];
            snprintf(name, sizeof name, "/%s/%s", groups[g], p->name);
            CHECK_MSG(read_named(path, name, dims, &rank, v, 64) == 0, "%s", name);
            CHECK_MSG(rank == p->shape.ndim, "%s: rank %d", name, rank);
            for (int k = 0; k < rank && k < p->shape.ndim; k++)
                CHECK((int64_t)dims[k] == p->shape.dim[k]);
            for (size_t k = 0; k < p->count; k++)
                CHECK_MSG(v[k] == r[g][p->offset + k], "%s[%zu]", name, k);
        }
    }
    for (int i = 0; i < dl_model_num_buffers(m); i++) {
        const dl_buffer *b = dl_model_buffer(m, i);
        char name[128];
        snprintf(name, sizeof name, "/buffers/%s", b->name);
        CHECK_MSG(read_named(path, name, dims, &rank, v, 64) == 0, "%s", name);
        CHECK(rank == 1 && (int64_t)dims[0] == b->shape.dim[0]);
        for (size_t k = 0; k < b->count; k++)
            CHECK(v[k] == st.buffers[b->offset + k]);
    }
}

static void test_v2_names_tensors(void)
{
    char path[] = "/tmp/dl-test-ckpt-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    dl_model *m = new_model(v1_model_root(), 2), *back = new_model(v1_model_root(), 2);
    CHECK(m && back);
    if (!m || !back)
        return;
    fill_pattern(m);
    dl_checkpoint_info info = {0}, got;
    info.cursor.step = 5;
    info.seed = 11;
    snprintf(info.config_hash, sizeof info.config_hash, "abc");
    CHECK_OK(dl_checkpoint_save(path, m, &info));
    check_named(path, m);
    CHECK_OK(dl_checkpoint_load(path, back, &got));
    CHECK(pattern_mismatches(back) == 0 && got.cursor.step == 5 && got.seed == 11);
    dl_checkpoint_contents c;
    CHECK_OK(dl_checkpoint_read(path, &c));
    CHECK(c.version == 2 && c.ntensors == dl_model_num_params(m) + dl_model_num_buffers(m));
    const dl_checkpoint_tensor *t = dl_checkpoint_find(&c, "Linear1.weight", 0);
    CHECK(t && t->shape.ndim == 2 && t->shape.dim[0] == 6 && t->shape.dim[1] == 4);
    t = dl_checkpoint_find(&c, "BatchNorm2.running_var", 1);
    CHECK(t && t->shape.ndim == 1 && t->shape.dim[0] == 6 &&
          c.region[3][t->offset] == v1_pattern(3, t->offset));
    dl_checkpoint_contents_done(&c);
    dl_model_destroy(m);
    dl_model_destroy(back);
    unlink(path);
}

/* Another head: the error names the tensor and both shapes. */
static void test_other_model_refused(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(4, 6, 1));
    dl_nn_sequential_add(s, dl_nn_batchnorm(6, 1e-5f, 0.1f));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(6, 5, 1));
    dl_model *m = new_model(s, 2);
    CHECK(m != NULL);
    if (!m)
        return;
    char path[] = "/tmp/dl-test-ckpt-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    dl_model *src = new_model(v1_model_root(), 2);
    dl_checkpoint_info info = {0}, got;
    CHECK_OK(dl_checkpoint_save(path, src, &info));
    dl_model_state st;
    dl_model_get_state(m, &st);
    float before = st.params[0];
    CHECK(dl_checkpoint_load(path, m, &got) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "Linear4.weight is [3, 6] in the checkpoint, [5, 6]"),
              "%s", dl_error_message());
    CHECK(st.params[0] == before);
    CHECK(dl_checkpoint_load(V1_FILE, m, &got) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "Linear4.weight holds 18 values in the checkpoint, 30"),
              "%s", dl_error_message());
    dl_model *one = new_model(v1_model_root(), 1); /* SGD with momentum: one moment */
    CHECK(dl_checkpoint_load(path, one, &got) == DL_EINVAL);
    CHECK(strstr(dl_error_message(), "2 optimizer moment(s)") != NULL);
    dl_model_destroy(one);
    dl_model_destroy(src);
    dl_model_destroy(m);
    unlink(path);
}

/* A flipped byte in an arena, a truncated file: refused, model untouched. */
static void test_damaged_refused(void)
{
    char path[] = "/tmp/dl-test-ckpt-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    dl_model *m = new_model(v1_model_root(), 2);
    fill_pattern(m);
    dl_checkpoint_info info = {0}, got;
    CHECK_OK(dl_checkpoint_save(path, m, &info));
    dl_model_state st;
    dl_model_get_state(m, &st);
    size_t first = (size_t)dl_model_param(m, 0)->count;
    /* find the arena's bytes in the file by their values and change one */
    FILE *f = fopen(path, "r+b");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    char *img = malloc((size_t)size);
    fseek(f, 0, SEEK_SET);
    CHECK(fread(img, 1, (size_t)size, f) == (size_t)size);
    char *at = memmem(img, (size_t)size, st.params, first * sizeof(float));
    CHECK(at != NULL);
    if (at) {
        fseek(f, (long)(at - img) + 4, SEEK_SET);
        fputc(at[4] ^ 0x5a, f);
    }
    fclose(f);
    dl_model *other = new_model(v1_model_root(), 2);
    CHECK(dl_checkpoint_load(path, other, &got) == DL_EINVAL);
    CHECK(strstr(dl_error_message(), "checksum mismatch") != NULL);
    CHECK(pattern_mismatches(other) > 0);
    CHECK(truncate(path, size / 2) == 0);
    CHECK(dl_checkpoint_load(path, other, &got) == DL_EIO);
    CHECK(strstr(dl_error_message(), "not a readable HDF5 file") != NULL);
    free(img);
    dl_model_destroy(other);
    dl_model_destroy(m);
    unlink(path);
}

/* Thousands of tensors: a layout over an attribute's 64 KiB still saves and loads. */
static void test_many_tensors(void)
{
    dl_layer *s = dl_nn_sequential();
    for (int i = 0; i < 1500; i++)
        dl_nn_sequential_add(s, dl_nn_linear(4, 4, 1));
    dl_model *m = new_model(s, 0), *back = NULL;
    dl_layer *s2 = dl_nn_sequential();
    for (int i = 0; i < 1500; i++)
        dl_nn_sequential_add(s2, dl_nn_linear(4, 4, 1));
    back = new_model(s2, 0);
    CHECK(m && back);
    if (!m || !back)
        return;
    char path[] = "/tmp/dl-test-ckpt-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    dl_model_state a, b;
    dl_model_get_state(m, &a);
    dl_model_get_state(back, &b);
    for (size_t i = 0; i < a.count; i++)
        a.params[i] = (float)i;
    dl_checkpoint_info info = {0}, got;
    CHECK_OK(dl_checkpoint_save(path, m, &info));
    CHECK_OK(dl_checkpoint_load(path, back, &got));
    CHECK(memcmp(a.params, b.params, a.count * sizeof(float)) == 0);
    float v[16];
    hsize_t dims[4];
    int rank;
    CHECK(read_named(path, "/params/Linear1500.weight", dims, &rank, v, 16) == 0 && rank == 2);
    const dl_param *p = dl_model_param(m, dl_model_num_params(m) - 2);
    CHECK(!strcmp(p->name, "Linear1500.weight") && v[5] == a.params[p->offset + 5]);
    dl_model_destroy(m);
    dl_model_destroy(back);
    unlink(path);
}

int main(void)
{
    RUN(test_v1_file_loads);
    RUN(test_v2_names_tensors);
    RUN(test_other_model_refused);
    RUN(test_damaged_refused);
    RUN(test_many_tensors);
    CHECK_EXIT();
}
