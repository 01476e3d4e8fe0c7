/* test_data.c - IDX loading, epoch permutations, the in-memory batch source, opening a description, CSV and text import, the text source */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "tests/check.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/base/h5util.h"
#include "engine/base/rng.h"
#include "engine/data/h5write.h"
#include "engine/data/import_csv.h"
#include "engine/data/import_text.h"
#include "engine/data/open.h"
#include "engine/data/text.h"

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

/* The permutation is pinned to its definition: Fisher-Yates from the top,
 * each partner drawn in turn from dl_rng_philox, whatever batching of the
 * draws the library does (runs of 256, four or eight lanes at a time). Sizes around
 * the run and lane edges, a seed with high bits and a large epoch. */
static void test_shuffle_permutation_definition(void)
{
    enum { MAXN = 70000 };
    uint32_t *got = malloc(MAXN * sizeof *got), *want = malloc(MAXN * sizeof *want);
    const size_t sizes[] = {2, 3, 4, 5, 6, 255, 256, 257, 258, 259, 260, 261, 1023, 60000, 70000};
    const uint64_t seeds[] = {1, 0xFFFFFFFF12345678ull};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int k = 0; k < 2; k++) {
            size_t n = sizes[si];
            int epoch = k ? 123456 : 0;
            for (size_t i = 0; i < n; i++)
                want[i] = (uint32_t)i;
            for (size_t i = n; i-- > 1;) {
                dl_rng4 r = dl_rng_philox(seeds[k], DL_STREAM_SHUFFLE, (uint64_t)epoch, i);
                uint64_t bits = (uint64_t)r.v[0] << 32 | r.v[1];
                size_t j = (size_t)(((unsigned __int128)bits * (i + 1)) >> 64);
                uint32_t t = want[i];
                want[i] = want[j];
                want[j] = t;
            }
            dl_shuffle_permutation(got, n, seeds[k], epoch);
            CHECK(memcmp(got, want, n * sizeof *got) == 0);
        }
    free(got);
    free(want);
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

/* --- text: the importer and the window source ---------------------------------- */

enum { TEXT_N = 3000, TEXT_TRAIN = 2700, TEXT_TEST = 300 };
static unsigned char text_bytes[TEXT_N];

/* A 3000-byte ASCII text (lines of 60 letters) imported as bytes with
 * the default 10% tail: /train = its first 2700 bytes, /test the last 300. */
static const char *make_text_file(void)
{
    for (int i = 0; i < TEXT_N; i++)
        text_bytes[i] = i % 61 == 60 ? '\n' : (unsigned char)('a' + (i * 7 + i / 13) % 26);
    text_bytes[TEXT_N - 1] = '\n';
    write_file(tmp_path("text.txt"), text_bytes, TEXT_N, 0);
    const char *in[1] = {tmp_path("text.txt")}, *out = tmp_path("text.h5");
    dl_text_import_options o = {.chars = 0, .val_fraction = 0.1};
    dl_text_import_summary sum;
    CHECK_OK(dl_import_text(in, 1, out, &o, &sum));
    CHECK(sum.tokens == TEXT_N && sum.train == TEXT_TRAIN && sum.test == TEXT_TEST);
    CHECK(sum.vocab == 256 && sum.files == 1 && !sum.chars);
    return out;
}

static dl_source *open_text_split(const char *path, const char *group, int T, int batch,
                                  int shuffle, uint64_t seed, size_t limit)
{
    dl_text_options o = {.path = path,
                         .group = group,
                         .context = T,
                         .batch = batch,
                         .shuffle = shuffle,
                         .seed = seed,
                         .limit = limit};
    dl_source *s = NULL;
    CHECK_OK(dl_source_text(&s, &o));
    return s;
}

/* Reads the rest of the epoch's x windows (T floats each) into xs; checks
 * that every y is its x shifted by one and that x is the text at `base`
 * from some position; returns the windows read. */
static size_t drain_windows(dl_source *s, int T, float *xs, size_t max, const unsigned char *base,
                            size_t len)
{
    dl_batch b;
    size_t got = 0;
    int rc;
    while ((rc = s->ops->next(s, &b)) == 1) {
        for (int k = 0; k < b.n && got < max; k++, got++) {
            const float *x = (const float *)b.x + (size_t)k * T;
            const int32_t *y = (const int32_t *)b.y + (size_t)k * T;
            memcpy(xs + got * T, x, (size_t)T * sizeof *x);
            /* y is x shifted by one, and x then y[T-1] is the text somewhere */
            for (int j = 0; j + 1 < T; j++)
                CHECK(y[j] == (int32_t)x[j + 1]);
            int found = 0;
            for (size_t p = 0; !found && p + T < len; p++) {
                found = base[p + T] == (unsigned char)y[T - 1];
                for (int j = 0; j < T && found; j++)
                    found = x[j] == (float)base[p + j];
            }
            CHECK(found);
        }
    }
    CHECK(rc == 0);
    return got;
}

/* Training windows: the text at the drawn position, y the next tokens, the
 * same for the same (seed, epoch), another epoch or seed moves them. */
static void test_text_source_windows(void)
{
    const char *path = make_text_file();
    enum { T = 16, B = 8, W = (TEXT_TRAIN - 1) / T };
    dl_source *s = open_text_split(path, "/train", T, B, 1, 42, 0);
    if (!s)
        return;
    CHECK(s->info.count == W && s->ops->batches(s) == (W + B - 1) / B);
    CHECK(s->info.sample.ndim == 1 && s->info.sample.dim[0] == T);
    CHECK(s->info.x_dtype == DL_F32 && s->info.y_dtype == DL_I32 && s->info.y_width == T);
    CHECK(s->info.classes == 256 && s->info.scale == 1.0f);
    static float e0[W * T], e0b[W * T], e1[W * T];
    CHECK(drain_windows(s, T, e0, W, text_bytes, TEXT_TRAIN) == W);
    /* window k is the text at dl_text_position(seed, epoch, k) */
    int at_position = 1;
    for (int k = 0; k < W; k++) {
        size_t p = dl_text_position(42, 0, (size_t)k, TEXT_TRAIN, T);
        at_position &= p + T < TEXT_TRAIN;
        for (int j = 0; j < T && p + T < TEXT_TRAIN; j++)
            at_position &= e0[k * T + j] == (float)text_bytes[p + j];
    }
    CHECK(at_position);
    CHECK_OK(s->ops->start_epoch(s, 1, 0));
    CHECK(drain_windows(s, T, e1, W, text_bytes, TEXT_TRAIN) == W);
    CHECK(memcmp(e0, e1, sizeof e0) != 0);
    CHECK_OK(s->ops->start_epoch(s, 0, 0));
    CHECK(drain_windows(s, T, e0b, W, text_bytes, TEXT_TRAIN) == W);
    CHECK(memcmp(e0, e0b, sizeof e0) == 0);
    dl_source_destroy(s);
    /* another source with the same seed: the same windows; another seed: others */
    s = open_text_split(path, "/train", T, B, 1, 42, 0);
    CHECK(s && drain_windows(s, T, e0b, W, text_bytes, TEXT_TRAIN) == W);
    CHECK(memcmp(e0, e0b, sizeof e0) == 0);
    dl_source_destroy(s);
    s = open_text_split(path, "/train", T, B, 1, 43, 0);
    CHECK(s && drain_windows(s, T, e0b, W, text_bytes, TEXT_TRAIN) == W);
    CHECK(memcmp(e0, e0b, sizeof e0) != 0);
    dl_source_destroy(s);
    /* limit: that many windows an epoch, more than the non-overlapping count too */
    s = open_text_split(path, "/train", T, B, 1, 42, 500);
    CHECK(s && s->info.count == 500 && s->ops->batches(s) == 63);
    dl_source_destroy(s);
}

/* A resumed epoch (start_epoch(e, skip)) yields the batches an
 * uninterrupted one does from batch skip on. */
static void test_text_source_resume(void)
{
    const char *path = tmp_path("text.h5");
    enum { T = 8, B = 5, W = (TEXT_TRAIN - 1) / T };
    dl_source *a = open_text_split(path, "/train", T, B, 1, 7, 0);
    dl_source *b = open_text_split(path, "/train", T, B, 1, 7, 0);
    if (!a || !b) {
        dl_source_destroy(a);
        dl_source_destroy(b);
        return;
    }
    static float full[W * T], rest[W * T];
    CHECK_OK(a->ops->start_epoch(a, 3, 0));
    CHECK(drain_windows(a, T, full, W, text_bytes, TEXT_TRAIN) == W);
    for (size_t skip = 0; skip <= b->ops->batches(b); skip += 7) {
        CHECK_OK(b->ops->start_epoch(b, 3, skip));
        size_t from = skip * B < W ? skip * B : W;
        CHECK(drain_windows(b, T, rest, W, text_bytes, TEXT_TRAIN) == W - from);
        CHECK(memcmp(rest, full + from * T, (W - from) * T * sizeof *rest) == 0);
    }
    CHECK(b->ops->start_epoch(b, 3, b->ops->batches(b) + 1) == DL_EINVAL);
    dl_source_destroy(a);
    dl_source_destroy(b);
}

/* Validation: the non-overlapping windows k*T of /test, in order, every epoch. */
static void test_text_source_validation(void)
{
    const char *path = tmp_path("text.h5");
    const unsigned char *test = text_bytes + TEXT_TRAIN;
    enum { T = 16, W = (TEXT_TEST - 1) / T };
    dl_source *s = open_text_split(path, "/test", T, 4, 0, 42, 0);
    if (!s)
        return;
    CHECK(s->info.count == W);
    static float e0[W * T], e1[W * T];
    CHECK(drain_windows(s, T, e0, W, test, TEXT_TEST) == W);
    int fixed = 1;
    for (int k = 0; k < W * T; k++)
        fixed &= e0[k] == (float)test[k];
    CHECK(fixed);
    CHECK_OK(s->ops->start_epoch(s, 5, 0));
    CHECK(drain_windows(s, T, e1, W, test, TEXT_TEST) == W);
    CHECK(memcmp(e0, e1, sizeof e0) == 0);
    dl_source_destroy(s);
    /* a limit takes the first windows; above their number, all of them */
    s = open_text_split(path, "/test", T, 4, 0, 42, 5);
    CHECK(s && s->info.count == 5);
    dl_source_destroy(s);
    s = open_text_split(path, "/test", T, 4, 0, 42, 1000);
    CHECK(s && s->info.count == W);
    dl_source_destroy(s);
}

/* Streaming reads each window from the file: the same batches as in
 * memory, for training (and after a resume) and validation; auto mode
 * streams a split over the budget. */
static void test_text_source_streaming(void)
{
    const char *path = tmp_path("text.h5");
    enum { T = 16, B = 8, W = (TEXT_TRAIN - 1) / T };
    static float mem[W * T], str[W * T];
    for (int split = 0; split < 2; split++) {
        const char *g = split ? "/test" : "/train";
        dl_text_options o = {.path = path,
                             .group = g,
                             .context = T,
                             .batch = B,
                             .shuffle = !split,
                             .seed = 9,
                             .mode = DL_TEXT_MEMORY};
        dl_source *m = NULL, *st = NULL;
        CHECK_OK(dl_source_text(&m, &o));
        o.mode = DL_TEXT_STREAM;
        CHECK_OK(dl_source_text(&st, &o));
        if (!m || !st) {
            dl_source_destroy(m);
            dl_source_destroy(st);
            return;
        }
        CHECK(!strcmp(dl_source_text_mode(m), "memory"));
        CHECK(!strcmp(dl_source_text_mode(st), "streaming"));
        CHECK(m->info.count == st->info.count && m->ops->batches(m) == st->ops->batches(st));
        const unsigned char *base = split ? text_bytes + TEXT_TRAIN : text_bytes;
        size_t len = split ? TEXT_TEST : TEXT_TRAIN, n = m->info.count;
        size_t skip = split ? 1 : 3;
        CHECK_OK(m->ops->start_epoch(m, 2, skip));
        CHECK_OK(st->ops->start_epoch(st, 2, skip));
        size_t a = drain_windows(m, T, mem, W, base, len),
               b = drain_windows(st, T, str, W, base, len);
        CHECK(a == n - skip * B && a == b && memcmp(mem, str, a * T * sizeof *mem) == 0);
        dl_source_destroy(m);
        dl_source_destroy(st);
    }
    CHECK(dl_source_text_mode(NULL) == NULL);
    /* compressed chunks stream through a small chunk cache: the same windows */
    const char *in[1] = {tmp_path("text.txt")}, *gz = tmp_path("text_gz.h5");
    dl_text_import_options io = {.chars = 0, .val_fraction = 0.1, .gzip = 6};
    dl_text_import_summary sum;
    CHECK_OK(dl_import_text(in, 1, gz, &io, &sum));
    dl_text_options go = {.path = gz,
                          .group = "/train",
                          .context = T,
                          .batch = B,
                          .shuffle = 1,
                          .seed = 9,
                          .mode = DL_TEXT_STREAM};
    dl_source *zs = NULL, *ms = open_text_split(path, "/train", T, B, 1, 9, 0);
    CHECK_OK(dl_source_text(&zs, &go));
    if (zs && ms) {
        CHECK(drain_windows(zs, T, str, W, text_bytes, TEXT_TRAIN) == W);
        CHECK(drain_windows(ms, T, mem, W, text_bytes, TEXT_TRAIN) == W);
        CHECK(memcmp(mem, str, sizeof mem) == 0);
    }
    dl_source_destroy(zs);
    dl_source_destroy(ms);
    dl_text_options o = {.path = path,
                         .group = "/train",
                         .context = T,
                         .batch = B,
                         .memory_budget = 2 * TEXT_TRAIN - 2};
    dl_source *s = NULL;
    CHECK_OK(dl_source_text(&s, &o));
    CHECK(s && !strcmp(dl_source_text_mode(s), "streaming"));
    dl_source_destroy(s);
    o.memory_budget = 2 * TEXT_TRAIN;
    CHECK_OK(dl_source_text(&s, &o));
    CHECK(s && !strcmp(dl_source_text_mode(s), "memory"));
    dl_source_destroy(s);
}

/* A file whose ids reach past vocab_size: refused when the split is read
 * whole, reported by next() when streaming. */
static void test_text_source_ids_beyond_vocab(void)
{
    const char *good = tmp_path("text.h5"), *bad = tmp_path("badvocab.h5");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", good, bad);
    CHECK(system(cmd) == 0);
    int32_t v = 100; /* the text's letters are ids 97..122: 'a', then 'h' */
    dl_hdf5_lock();
    hid_t f = H5Fopen(bad, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(f >= 0 && H5Adelete(f, "vocab_size") >= 0);
    CHECK(dl_h5_attr_write(f, "vocab_size", H5T_NATIVE_INT32, 0, &v) >= 0);
    H5Fclose(f);
    dl_hdf5_unlock();
    dl_text_options o = {
        .path = bad, .group = "/train", .context = 4, .batch = 2, .mode = DL_TEXT_MEMORY};
    dl_source *s = NULL;
    CHECK(dl_source_text(&s, &o) == DL_EINVAL && !s);
    CHECK_MSG(strstr(dl_error_message(), "badvocab.h5:/train/tokens: id 104 at position 1 is not "
                                         "below vocab_size 100"),
              "%s", dl_error_message());
    o.mode = DL_TEXT_STREAM;
    CHECK_OK(dl_source_text(&s, &o));
    dl_batch b;
    CHECK(s && s->ops->next(s, &b) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "is not below vocab_size 100"), "%s", dl_error_message());
    dl_source_destroy(s);
}

/* chars: the code points seen, sorted, as ids (a multibyte character
 * among them); the vocabulary read back, encoded and decoded. */
static void test_text_import_chars(void)
{
    const char *txt = "h\xc3\xa9llo \xe2\x82\xac"; /* "héllo €", no final newline */
    write_file(tmp_path("chars.txt"), txt, strlen(txt), 0);
    const char *in[1] = {tmp_path("chars.txt")}, *out = tmp_path("chars.h5");
    dl_text_import_options o = {.chars = 1, .val_fraction = 0.25};
    dl_text_import_summary sum;
    CHECK_OK(dl_import_text(in, 1, out, &o, &sum));
    /* h é l l o ' ' € '\n' -> ids 2 5 3 3 4 1 6 0: /train the first 6, /test the last 2 */
    CHECK(sum.tokens == 8 && sum.train == 6 && sum.test == 2 && sum.vocab == 7 && sum.chars);
    dl_text_vocab v;
    CHECK_OK(dl_text_vocab_read(&v, out));
    static const uint32_t want[7] = {0x0A, 0x20, 0x68, 0x6C, 0x6F, 0xE9, 0x20AC};
    CHECK(v.chars && v.size == 7 && v.cp && memcmp(v.cp, want, sizeof want) == 0);
    int32_t ids[8];
    CHECK(dl_text_vocab_encode(&v, "h\xc3\xa9\xe2\x82\xac", 6, ids, 8) == 3);
    CHECK(ids[0] == 2 && ids[1] == 5 && ids[2] == 6);
    CHECK(dl_text_vocab_encode(&v, "hx", 2, ids, 8) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "'x' (U+0078) is not in the vocabulary (byte 1)"), "%s",
              dl_error_message());
    char ch[4];
    CHECK(dl_text_vocab_decode(&v, 6, ch) == 3 && !memcmp(ch, "\xe2\x82\xac", 3));
    CHECK(dl_text_vocab_decode(&v, 7, ch) == 0);
    dl_text_vocab_done(&v);

    dl_source *s = open_text_split(out, "/train", 5, 2, 0, 1, 0);
    dl_batch b;
    CHECK(s && s->info.classes == 7 && s->info.count == 1 && s->ops->next(s, &b) == 1);
    if (s && b.n == 1) {
        const float *x = b.x;
        const int32_t *y = b.y;
        CHECK(x[0] == 2 && x[1] == 5 && x[2] == 3 && x[3] == 3 && x[4] == 4);
        CHECK(y[0] == 5 && y[1] == 3 && y[2] == 3 && y[3] == 4 && y[4] == 1);
    }
    dl_source_destroy(s);
    s = open_text_split(out, "/test", 1, 2, 0, 1, 0);
    CHECK(s && s->ops->next(s, &b) == 1 && b.n == 1);
    if (s && b.n == 1)
        CHECK(((const float *)b.x)[0] == 6 && ((const int32_t *)b.y)[0] == 0);
    dl_source_destroy(s);
}

static void expect_text_error(const char *const *in, int n, int chars, int code, const char *what)
{
    dl_text_import_options o = {.chars = chars, .val_fraction = 0.1};
    dl_text_import_summary sum;
    CHECK(dl_import_text(in, n, tmp_path("bad.h5"), &o, &sum) == code);
    CHECK_MSG(strstr(dl_error_message(), what), "wanted \"%s\", got \"%s\"", what,
              dl_error_message());
    CHECK(access(tmp_path("bad.h5"), F_OK) != 0 && access(tmp_path("bad.h5.tmp"), F_OK) != 0);
}

/* A folder: regular files by name, not *.dat, not a link to a file taken;
 * the bad inputs named with the file (and the byte offset). */
static void test_text_import_folder_and_bad_input(void)
{
    char dir[600], p[700], one[600]; /* tmp_path's buffers rotate: keep copies */
    snprintf(dir, sizeof dir, "%s", tmp_path("corpus"));
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/b", dir);
    write_file(p, "bbbb\n", 5, 0);
    snprintf(p, sizeof p, "%s/a", dir);
    write_file(p, "aaaaaaaaa", 9, 0);
    snprintf(p, sizeof p, "%s/a.dat", dir);
    write_file(p, "\0\0\0\x02", 4, 0);
    snprintf(p, sizeof p, "%s/a.u8", dir);
    CHECK(symlink("a", p) == 0);
    const char *in[1] = {dir};
    dl_text_import_options o = {.chars = 1, .val_fraction = 0.2};
    dl_text_import_summary sum;
    CHECK_OK(dl_import_text(in, 1, tmp_path("corpus.h5"), &o, &sum));
    /* a: 9 + newline = 10 tokens (tail 2), b: 5 (tail 1) */
    CHECK(sum.files == 2 && sum.tokens == 15 && sum.test == 3 && sum.train == 12);
    CHECK(sum.vocab == 3);
    dl_source *s = open_text_split(tmp_path("corpus.h5"), "/train", 11, 1, 0, 0, 0);
    dl_batch b;
    CHECK(s && s->ops->next(s, &b) == 1);
    if (s) /* ids: '\n' 0, a 1, b 2: a's head then b's head */
        CHECK(((const float *)b.x)[7] == 1 && ((const float *)b.x)[8] == 2 &&
              ((const int32_t *)b.y)[10] == 2);
    dl_source_destroy(s);

    snprintf(dir, sizeof dir, "%s", tmp_path("empty_corpus"));
    mkdir(dir, 0755);
    expect_text_error(in, 1, 1, DL_EINVAL, "empty_corpus: no text files in the folder");
    expect_text_error(in, 0, 1, DL_EINVAL, "no text files given");
    write_file(tmp_path("nul.txt"), "abc\0def", 7, 0);
    snprintf(one, sizeof one, "%s", tmp_path("nul.txt"));
    in[0] = one;
    expect_text_error(in, 1, 0, DL_EINVAL, "nul.txt: not a text file: a NUL byte at byte offset 3");
    write_file(tmp_path("latin1.txt"), "ab\xff cd\n", 6, 0);
    snprintf(one, sizeof one, "%s", tmp_path("latin1.txt"));
    in[0] = one;
    expect_text_error(in, 1, 1, DL_EINVAL,
                      "latin1.txt: not UTF-8 text: invalid byte 0xff at byte offset 2");
    o.chars = 0; /* bytes take any byte but NUL; the newline is added */
    o.val_fraction = 0.3;
    CHECK_OK(dl_import_text(in, 1, tmp_path("latin1.h5"), &o, &sum));
    CHECK(sum.tokens == 7 && sum.test == 2 && sum.vocab == 256);
    write_file(tmp_path("overlong.txt"), "a\xc0\xafz\n", 5, 0);
    snprintf(one, sizeof one, "%s", tmp_path("overlong.txt"));
    in[0] = one;
    expect_text_error(in, 1, 1, DL_EINVAL, "overlong.txt: not UTF-8 text: invalid byte 0xc0");
    write_file(tmp_path("empty.txt"), "", 0, 0);
    snprintf(one, sizeof one, "%s", tmp_path("empty.txt"));
    in[0] = one;
    expect_text_error(in, 1, 1, DL_EINVAL, "empty.txt: empty file");
    snprintf(one, sizeof one, "%s", tmp_path("absent.txt"));
    in[0] = one;
    expect_text_error(in, 1, 1, DL_EINVAL, "absent.txt: no such file or folder");
    write_file(tmp_path("tiny.txt"), "ab\n", 3, 0);
    snprintf(one, sizeof one, "%s", tmp_path("tiny.txt"));
    in[0] = one;
    expect_text_error(in, 1, 1, DL_EINVAL, "leaves /test with 0");
}

/* Opening errors name the file and the group or field. */
static void test_text_source_bad_input(void)
{
    const char *path = tmp_path("text.h5");
    dl_text_options o = {.path = path, .group = "/train", .context = 0, .batch = 4};
    dl_source *s = (dl_source *)&o;
    CHECK(dl_source_text(&s, &o) == DL_EINVAL && s == NULL);
    CHECK_MSG(strstr(dl_error_message(), "text.h5:/train: context 0, expected at least 1"), "%s",
              dl_error_message());
    o.context = TEXT_TRAIN;
    CHECK(dl_source_text(&s, &o) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "context 2700 is longer than the split allows: 2700 "
                                         "tokens"),
              "%s", dl_error_message());
    o.context = TEXT_TRAIN - 1; /* exactly one window */
    CHECK_OK(dl_source_text(&s, &o));
    CHECK(s && s->info.count == 1);
    dl_source_destroy(s);
    o.context = 4;
    o.group = "/nosuch";
    CHECK(dl_source_text(&s, &o) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "text.h5: no group /nosuch"), "%s", dl_error_message());
    /* an x/y data file is not a text file */
    dl_import im;
    memset(&im, 0, sizeof im);
    CHECK_OK(dl_import_synthetic(&im, "spirals", 40, 2, 0.1f, 1));
    CHECK_OK(dl_h5write_import(tmp_path("xy.h5"), &im, 0, 0));
    dl_import_done(&im);
    o.path = tmp_path("xy.h5");
    o.group = "/train";
    CHECK(dl_source_text(&s, &o) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "xy.h5: not a text data file"), "%s", dl_error_message());
    dl_text_vocab v;
    CHECK(dl_text_vocab_read(&v, tmp_path("absent.h5")) == DL_EINVAL && v.size == 0);
    CHECK_MSG(strstr(dl_error_message(), "absent.h5: no such file"), "%s", dl_error_message());
    CHECK(dl_text_vocab_read(&v, tmp_path("text.txt")) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "text.txt: not an HDF5 file"), "%s", dl_error_message());
}

/* A text description opens both splits with a fingerprint naming the context. */
static void test_data_open_text(void)
{
    dl_data_desc d;
    memset(&d, 0, sizeof d);
    d.kind = DL_DATA_TEXT;
    snprintf(d.path, sizeof d.path, "%s", tmp_path("text.h5"));
    snprintf(d.train, sizeof d.train, "/train");
    snprintf(d.val, sizeof d.val, "/test");
    d.context = 16;
    d.shuffle = 1;
    dl_source *tr = NULL, *va = NULL;
    char fp[1400], want[1100];
    CHECK_OK(dl_data_open(&d, 32, 5, NULL, &tr, &va, fp, sizeof fp));
    CHECK(tr && va && tr->info.count == 168 && va->info.count == 18);
    snprintf(want, sizeof want,
             "text:%s:/train:/test:context=16:vocab=256:train=168:val=18:sha256=", d.path);
    CHECK_MSG(!strncmp(fp, want, strlen(want)) && strlen(fp) == strlen(want) + 64, "%s", fp);
    dl_source_destroy(tr);
    dl_source_destroy(va);
    snprintf(d.path, sizeof d.path, "%s", tmp_path("absent.h5"));
    CHECK(dl_data_open(&d, 32, 5, NULL, &tr, &va, fp, sizeof fp) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "absent.h5: text file not found: make it with"), "%s",
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
    RUN(test_shuffle_permutation_definition);
    RUN(test_memory_source_epochs);
    RUN(test_memory_source_resume);
    RUN(test_csv_import_many_lines);
    RUN(test_data_open_synthetic_and_missing);
    RUN(test_text_source_windows);
    RUN(test_text_source_resume);
    RUN(test_text_source_validation);
    RUN(test_text_source_streaming);
    RUN(test_text_source_ids_beyond_vocab);
    RUN(test_text_import_chars);
    RUN(test_text_import_folder_and_bad_input);
    RUN(test_text_source_bad_input);
    RUN(test_data_open_text);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    CHECK_EXIT();
}
