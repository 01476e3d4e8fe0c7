/* test_data.c - IDX loading, epoch permutations, the in-memory batch source, opening a description, CSV import */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/check.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/data/import_csv.h"
#include "engine/data/open.h"

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void put_be32(unsigned char *b, uint32_t v)
{
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

/* Writes bytes to path, gzipped when gz is set. */
static void write_file(const char *path, const void *data, size_t n, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        gzwrite(f, data, (unsigned)n);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

/* An IDX pair of count images rows x cols: pixel = (i * 7 + p) & 255,
 * label = i % classes. Header fields can be spoiled for the bad-input
 * tests: magic, label_count and extra (bytes cut (<0) or added (>0)). */
typedef struct idx_spec {
    uint32_t count, rows, cols;
    int classes, gz;
    uint32_t image_magic, label_count;
    int image_extra;
} idx_spec;

static void write_idx(const char *images, const char *labels, idx_spec s)
{
    size_t plane = (size_t)s.rows * s.cols, n = 16 + (size_t)s.count * plane;
    unsigned char *b = calloc(n + 16, 1);
    put_be32(b, s.image_magic ? s.image_magic : 0x803);
    put_be32(b + 4, s.count);
    put_be32(b + 8, s.rows);
    put_be32(b + 12, s.cols);
    for (size_t i = 0; i < s.count; i++)
        for (size_t p = 0; p < plane; p++)
            b[16 + i * plane + p] = (unsigned char)((i * 7 + p) & 255);
    write_file(images, b, (size_t)((long)n + s.image_extra), s.gz);
    uint32_t lc = s.label_count ? s.label_count : s.count;
    unsigned char *l = calloc(8 + lc, 1);
    put_be32(l, 0x801);
    put_be32(l + 4, lc);
    for (size_t i = 0; i < lc; i++)
        l[8 + i] = (unsigned char)(i % (size_t)s.classes);
    write_file(labels, l, 8 + lc, s.gz);
    free(b);
    free(l);
}

static void test_idx_roundtrip_plain_and_gz(void)
{
    for (int gz = 0; gz < 2; gz++) {
        const char *im = tmp_path(gz ? "a-images.gz" : "a-images");
        const char *lb = tmp_path(gz ? "a-labels.gz" : "a-labels");
        write_idx(im, lb, (idx_spec){.count = 37, .rows = 5, .cols = 3, .classes = 4, .gz = gz});
        dl_dataset d;
        CHECK_OK(dl_dataset_load_idx(&d, im, lb));
        CHECK(d.info.count == 37);
        CHECK(d.info.sample.ndim == 3 && d.info.sample.dim[0] == 1 && d.info.sample.dim[1] == 5 &&
              d.info.sample.dim[2] == 3);
        CHECK(d.info.x_dtype == DL_U8 && d.info.y_dtype == DL_I32 && d.info.y_width == 1);
        CHECK(d.info.classes == 4);
        CHECK(d.info.scale == 1.0f);
        const unsigned char *x = d.x;
        const int32_t *y = d.y;
        int bad = 0;
        for (size_t i = 0; i < 37 && x; i++) {
            for (size_t p = 0; p < 15; p++)
                bad += x[i * 15 + p] != (unsigned char)((i * 7 + p) & 255);
            bad += y[i] != (int32_t)(i % 4);
        }
        CHECK(bad == 0);
        dl_dataset_truncate(&d, 10);
        CHECK(d.info.count == 10);
        dl_dataset_truncate(&d, 100);
        CHECK(d.info.count == 10);
        dl_dataset_done(&d);
        CHECK(d.x == NULL && d.y == NULL);
    }
}

/* Loads a spoiled pair and checks the error code and that the message
 * names the file and contains `what`. */
static void expect_idx_error(idx_spec s, int code, const char *file, const char *what)
{
    const char *im = tmp_path("bad-images"), *lb = tmp_path("bad-labels");
    write_idx(im, lb, s);
    dl_dataset d;
    int rc = dl_dataset_load_idx(&d, im, lb);
    CHECK_MSG(rc == code, "rc %d, want %d (%s)", rc, code, dl_error_message());
    CHECK_MSG(strstr(dl_error_message(), file) != NULL, "message \"%s\" lacks %s",
              dl_error_message(), file);
    CHECK_MSG(strstr(dl_error_message(), what) != NULL, "message \"%s\" lacks \"%s\"",
              dl_error_message(), what);
    CHECK(d.x == NULL && d.y == NULL);
}

static void test_idx_bad_input(void)
{
    idx_spec ok = {.count = 20, .rows = 4, .cols = 4, .classes = 3};
    idx_spec s = ok;
    s.image_magic = 0x801;
    expect_idx_error(s, DL_EINVAL, "bad-images", "expected magic 0x00000803");
    s = ok;
    s.label_count = 19;
    expect_idx_error(s, DL_EINVAL, "bad-labels", "19 labels");
    s = ok;
    s.image_extra = -5;
    expect_idx_error(s, DL_EINVAL, "bad-images", "truncated");
    s.gz = 1;
    expect_idx_error(s, DL_EINVAL, "bad-images", "truncated");
    s = ok;
    s.image_extra = 3;
    expect_idx_error(s, DL_EINVAL, "bad-images", "more data");
    s = ok;
    s.image_extra = -(16 + 4 * 4 * 20 - 2); /* not even a header */
    expect_idx_error(s, DL_EINVAL, "bad-images", "truncated");

    dl_dataset d;
    int rc = dl_dataset_load_idx(&d, tmp_path("missing-images"), tmp_path("bad-labels"));
    CHECK(rc == DL_EIO && strstr(dl_error_message(), "missing-images"));

    /* a gzip stream with its middle overwritten */
    write_idx(tmp_path("c-images.gz"), tmp_path("c-labels.gz"),
              (idx_spec){.count = 200, .rows = 8, .cols = 8, .classes = 3, .gz = 1});
    FILE *f = fopen(tmp_path("c-images.gz"), "r+b");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size / 2, SEEK_SET);
    for (int i = 0; i < 64; i++)
        fputc(0x5a ^ i, f);
    fclose(f);
    rc = dl_dataset_load_idx(&d, tmp_path("c-images.gz"), tmp_path("c-labels.gz"));
    CHECK_MSG(rc == DL_EIO || rc == DL_EINVAL, "rc %d", rc);
    CHECK(strstr(dl_error_message(), "c-images.gz") != NULL);

    rc = dl_dataset_load_fashion_mnist(&d, tmpdir, "valid");
    CHECK(rc == DL_EINVAL && strstr(dl_error_message(), "valid"));
    rc = dl_dataset_load_fashion_mnist(&d, tmpdir, "train");
    CHECK(rc == DL_EIO && strstr(dl_error_message(), "train-images-idx3-ubyte"));
}

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

static void test_fashion_mnist_t10k(void)
{
    if (access(FMNIST_DIR "/t10k-labels-idx1-ubyte.gz", R_OK) != 0 &&
        access(FMNIST_DIR "/t10k-labels-idx1-ubyte", R_OK) != 0) {
        SKIP("no Fashion-MNIST under " FMNIST_DIR " (package dataset-fashion-mnist)");
        return;
    }
    dl_dataset d;
    CHECK_OK(dl_dataset_load_fashion_mnist(&d, FMNIST_DIR, "t10k"));
    CHECK(d.info.count == 10000);
    CHECK(d.info.classes == 10);
    CHECK(d.info.sample.dim[1] == 28 && d.info.sample.dim[2] == 28);
    CHECK_NEAR(d.info.scale, 1.0 / 255.0, 1e-9);
    int hist[10] = {0};
    const int32_t *y = d.y;
    for (size_t i = 0; y && i < d.info.count; i++)
        if (y[i] >= 0 && y[i] < 10)
            hist[y[i]]++;
    for (int c = 0; c < 10; c++)
        CHECK(hist[c] == 1000); /* the test split is balanced */
    dl_dataset_done(&d);
}

static int is_permutation(const uint32_t *p, size_t n)
{
    char *seen = calloc(n, 1);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= n || seen[p[i]])
            ok = 0;
        else
            seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_shuffle_permutation(void)
{
    enum { N = 1000 };
    static uint32_t a[N], b[N], c[N], e[N];
    dl_shuffle_permutation(a, N, 42, 0);
    dl_shuffle_permutation(b, N, 42, 0);
    dl_shuffle_permutation(c, N, 43, 0);
    dl_shuffle_permutation(e, N, 42, 1);
    CHECK(is_permutation(a, N) && is_permutation(c, N) && is_permutation(e, N));
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    CHECK(memcmp(a, e, sizeof a) != 0);
    int fixed = 0;
    for (int i = 0; i < N; i++)
        fixed += a[i] == (uint32_t)i;
    CHECK(fixed < 10); /* about 1 expected for a uniform permutation */
    /* uniformity: where element 0 lands, over many seeds, in 4 quarters */
    int quarter[4] = {0};
    uint32_t small[8];
    for (int s = 0; s < 4000; s++) {
        dl_shuffle_permutation(small, 8, (uint64_t)s, 0);
        for (int i = 0; i < 8; i++)
            if (small[i] == 0)
                quarter[i / 2]++;
    }
    for (int q = 0; q < 4; q++)
        CHECK_NEAR(quarter[q], 1000, 150);
    dl_shuffle_permutation(small, 1, 7, 3);
    CHECK(small[0] == 0);
    dl_shuffle_permutation(small, 0, 7, 3);
}

/* A dataset whose sample i is x = 4 bytes of i, y = i. */
static void make_index_dataset(dl_dataset *d, size_t n)
{
    memset(d, 0, sizeof *d);
    uint8_t *x = malloc(n * 4);
    int32_t *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        memcpy(x + 4 * i, &(uint32_t){(uint32_t)i}, 4);
        y[i] = (int32_t)i;
    }
    d->x = x;
    d->y = y;
    d->info.sample = dl_shape_make(1, (const int64_t[]){4});
    d->info.x_dtype = DL_U8;
    d->info.y_dtype = DL_I32;
    d->info.y_width = 1;
    d->info.count = n;
    d->info.scale = 1;
    snprintf(d->name, sizeof d->name, "index-dataset");
}

/* Reads the rest of the epoch's sample ids into ids; returns how many.
 * Checks every batch's x against its y. */
static size_t drain(dl_source *s, int32_t *ids, size_t max, int *batches, int *short_batches,
                    int full)
{
    dl_batch b;
    size_t got = 0;
    int rc;
    *batches = *short_batches = 0;
    while ((rc = s->ops->next(s, &b)) == 1) {
        (*batches)++;
        if (b.n != full)
            (*short_batches)++;
        for (int k = 0; k < b.n && got < max; k++) {
            uint32_t xi;
            memcpy(&xi, (const uint8_t *)b.x + 4 * k, 4);
            int32_t yi = ((const int32_t *)b.y)[k];
            CHECK(xi == (uint32_t)yi);
            ids[got++] = yi;
        }
    }
    CHECK(rc == 0);
    return got;
}

static void test_memory_source_epochs(void)
{
    enum { N = 1003, B = 64 };
    dl_dataset d;
    make_index_dataset(&d, N);
    dl_source *s;
    CHECK_OK(dl_source_memory(&s, &d, B, 1, 0, 1234));
    if (!s)
        return;
    CHECK(s->ops->batches(s) == (N + B - 1) / B);
    CHECK(s->info.count == N && strcmp(s->name, "index-dataset") == 0);
    static int32_t e0[N], e0b[N], e1[N];
    int nb, ns;
    /* epoch 0 is started by the constructor */
    CHECK(drain(s, e0, N, &nb, &ns, B) == N);
    CHECK(nb == (N + B - 1) / B && ns == 1);
    CHECK(is_permutation((const uint32_t *)e0, N));
    int in_order = 1;
    for (int i = 0; i < N; i++)
        in_order &= e0[i] == i;
    CHECK(!in_order);
    CHECK_OK(s->ops->start_epoch(s, 1, 0));
    CHECK(drain(s, e1, N, &nb, &ns, B) == N);
    CHECK(is_permutation((const uint32_t *)e1, N));
    CHECK(memcmp(e0, e1, sizeof e0) != 0);
    CHECK_OK(s->ops->start_epoch(s, 0, 0));
    CHECK(drain(s, e0b, N, &nb, &ns, B) == N);
    CHECK(memcmp(e0, e0b, sizeof e0) == 0);
    dl_loader_stats st;
    s->ops->stats(s, &st);
    CHECK(st.batches == 3 * ((N + B - 1) / B));
    dl_source_destroy(s);

    /* same seed, another source: same order; another seed: another order */
    CHECK_OK(dl_source_memory(&s, &d, B, 1, 0, 1234));
    CHECK(drain(s, e0b, N, &nb, &ns, B) == N && memcmp(e0, e0b, sizeof e0) == 0);
    dl_source_destroy(s);
    CHECK_OK(dl_source_memory(&s, &d, B, 1, 0, 1235));
    CHECK(drain(s, e0b, N, &nb, &ns, B) == N && memcmp(e0, e0b, sizeof e0) != 0);
    dl_source_destroy(s);

    /* no shuffle: in order; drop_last: only full batches */
    CHECK_OK(dl_source_memory(&s, &d, B, 0, 1, 0));
    CHECK(s->ops->batches(s) == N / B);
    CHECK(drain(s, e0b, N, &nb, &ns, B) == (N / B) * B && ns == 0);
    in_order = 1;
    for (int i = 0; i < (N / B) * B; i++)
        in_order &= e0b[i] == i;
    CHECK(in_order);
    dl_source_destroy(s);
    dl_dataset_done(&d);
}

static void test_memory_source_resume(void)
{
    enum { N = 517, B = 32 };
    dl_dataset d;
    make_index_dataset(&d, N);
    dl_source *s;
    CHECK_OK(dl_source_memory(&s, &d, B, 1, 0, 99));
    if (!s)
        return;
    static int32_t full[N], rest[N];
    int nb, ns;
    CHECK_OK(s->ops->start_epoch(s, 3, 0));
    CHECK(drain(s, full, N, &nb, &ns, B) == N);
    for (size_t skip = 0; skip <= s->ops->batches(s); skip += 5) {
        CHECK_OK(s->ops->start_epoch(s, 3, skip));
        size_t got = drain(s, rest, N, &nb, &ns, B);
        size_t from = skip * B < N ? skip * B : N;
        CHECK(got == N - from);
        CHECK(memcmp(rest, full + from, got * sizeof *rest) == 0);
    }
    CHECK(s->ops->start_epoch(s, 3, s->ops->batches(s) + 1) == DL_EINVAL);
    CHECK(s->ops->start_epoch(s, -1, 0) == DL_EINVAL);
    dl_source_destroy(s);

    CHECK(dl_source_memory(&s, &d, 0, 1, 0, 99) == DL_EINVAL && s == NULL);
    dl_dataset_done(&d);
}

/* Past the first 1024 lines the line table grows: values and line numbers
 * stay right. */
static void test_csv_import_many_lines(void)
{
    const char *path = tmp_path("many.csv");
    FILE *f = fopen(path, "w");
    fprintf(f, "a,b,label\n");
    for (int i = 0; i < 3000; i++)
        fprintf(f, "%d,%d.5,%d\n", i, i, i % 3);
    fclose(f);
    dl_import im;
    memset(&im, 0, sizeof im);
    CHECK_OK(dl_import_csv_load(&im, path, "label"));
    CHECK(im.nsplits == 1 && !strcmp(im.sp[0].name, "train"));
    const dl_data_info *in = &im.sp[0].d.info;
    CHECK(in->count == 3000 && in->x_dtype == DL_F32 && in->y_dtype == DL_I32);
    CHECK(in->classes == 3 && in->sample.ndim == 1 && in->sample.dim[0] == 2);
    const float *x = im.sp[0].d.x;
    const int32_t *y = im.sp[0].d.y;
    CHECK(x[2 * 2999] == 2999.0f && x[2 * 2999 + 1] == 2999.5f && y[2999] == 2999 % 3);
    CHECK(strstr(im.origin, "many.csv") != NULL);
    dl_import_done(&im);

    f = fopen(path, "a");
    fprintf(f, "1,x,0\n");
    fclose(f);
    CHECK(dl_import_csv_load(&im, path, "label") == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "many.csv:3002: column \"b\": \"x\" is not a number"),
              "%s", dl_error_message());
    CHECK(im.nsplits == 0);
    dl_import_done(&im);
}

/* A synthetic description opens two memory sources that own their data;
 * a missing HDF5 file says how to make one. */
static void test_data_open_synthetic_and_missing(void)
{
    dl_data_desc d;
    memset(&d, 0, sizeof d);
    d.kind = DL_DATA_SYNTHETIC;
    snprintf(d.synth, sizeof d.synth, "spirals");
    d.n = 100;
    d.n_val = 20;
    d.classes = 2;
    d.noise = 0.1;
    d.data_seed = 1;
    d.limit = 90;
    d.shuffle = 1;
    d.flatten = 1;
    dl_source *tr = NULL, *va = NULL;
    char fp[512];
    CHECK_OK(dl_data_open(&d, 16, 3, NULL, &tr, &va, fp, sizeof fp));
    CHECK(tr && va && tr->info.count == 90 && va->info.count == 20);
    const char *want = "synthetic:spirals:classes=2:noise=0.1:seed=1:train=90:val=20:sha256=";
    CHECK_MSG(!strncmp(fp, want, strlen(want)) && strlen(fp) == strlen(want) + 64, "%s", fp);
    dl_batch b;
    CHECK(tr->ops->next(tr, &b) == 1 && b.n == 16);
    dl_source_destroy(tr);
    dl_source_destroy(va);

    memset(&d, 0, sizeof d);
    d.kind = DL_DATA_HDF5;
    snprintf(d.path, sizeof d.path, "%s", tmp_path("absent.h5"));
    snprintf(d.train, sizeof d.train, "/train");
    CHECK(dl_data_open(&d, 16, 3, NULL, &tr, &va, fp, sizeof fp) == DL_EINVAL);
    CHECK(tr == NULL && va == NULL);
    CHECK_MSG(strstr(dl_error_message(), "absent.h5: data file not found"), "%s",
              dl_error_message());
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dl-test-data-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_idx_roundtrip_plain_and_gz);
    RUN(test_idx_bad_input);
    RUN(test_fashion_mnist_t10k);
    RUN(test_shuffle_permutation);
    RUN(test_memory_source_epochs);
    RUN(test_memory_source_resume);
    RUN(test_csv_import_many_lines);
    RUN(test_data_open_synthetic_and_missing);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    CHECK_EXIT();
}
