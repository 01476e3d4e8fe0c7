/* test_h5data.c - the HDF5 batch source: order, resume, streaming, workers, augmentation, bad input; h5util */
#include <hdf5.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/check.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/base/h5util.h"
#include "engine/data/h5data.h"

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* One dataset to write: rank dims of type, data, chunk rows (0:
 * contiguous), gzip level (0: none). */
typedef struct dset {
    const char *name;
    hid_t type;
    int rank;
    hsize_t dims[5];
    const void *data;
    hsize_t chunk_rows;
    int gzip;
} dset;

static void write_dset(hid_t grp, const dset *d)
{
    hid_t sp = H5Screate_simple(d->rank, d->dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (d->chunk_rows) {
        hsize_t c[5];
        memcpy(c, d->dims, sizeof c);
        c[0] = d->chunk_rows;
        H5Pset_chunk(dcpl, d->rank, c);
        if (d->gzip)
            H5Pset_deflate(dcpl, (unsigned)d->gzip);
    }
    hid_t ds = H5Dcreate2(grp, d->name, d->type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(ds, d->type, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->data);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
}

/* Writes path with group "/train" holding the given datasets and a float
 * attribute scale when scale > 0. */
static void write_h5(const char *path, const dset *a, const dset *b, float scale)
{
    dl_hdf5_lock();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "/train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (a)
        write_dset(g, a);
    if (b)
        write_dset(g, b);
    if (scale > 0) {
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t at = H5Acreate2(g, "scale", H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(at, H5T_NATIVE_FLOAT, &scale);
        H5Aclose(at);
        H5Sclose(sp);
    }
    H5Gclose(g);
    H5Fclose(f);
    dl_hdf5_unlock();
}

/* An id dataset: n samples of 1 x h x w u8, sample i starting with its id
 * (4 bytes little-endian), then (i + p) & 255; labels i % 10. */
typedef struct id_data {
    uint8_t *x;
    int32_t *y;
    size_t n, row;
} id_data;

static id_data make_ids(size_t n, int h, int w)
{
    id_data d = {malloc(n * (size_t)h * w), malloc(n * sizeof(int32_t)), n, (size_t)h * w};
    for (size_t i = 0; i < n; i++) {
        for (size_t p = 0; p < d.row; p++)
            d.x[i * d.row + p] = (uint8_t)((i + p) & 255);
        memcpy(d.x + i * d.row, &(uint32_t){(uint32_t)i}, 4);
        d.y[i] = (int32_t)(i % 10);
    }
    return d;
}

static void write_ids(const char *path, const id_data *d, int h, int w, hsize_t chunk, int gzip)
{
    dset x = {"x", H5T_NATIVE_UINT8, 4, {d->n, 1, (hsize_t)h, (hsize_t)w}, d->x, chunk, gzip};
    dset y = {"y", H5T_NATIVE_INT32, 1, {d->n}, d->y, chunk, gzip};
    write_h5(path, &x, &y, 1.0f / 255.0f);
}

/* Drains the rest of an epoch into ids[]; checks each sample against its id.
 * Returns the number of samples or -1 on an error. */
static long drain(dl_source *s, const id_data *d, uint32_t *ids, long max, int *short_batches)
{
    dl_batch b;
    long got = 0;
    int rc, shorts = 0;
    size_t bs = 0;
    while ((rc = s->ops->next(s, &b)) == 1) {
        if (bs == 0)
            bs = (size_t)b.n;
        shorts += (size_t)b.n != bs;
        for (int k = 0; k < b.n; k++) {
            const uint8_t *x = (const uint8_t *)b.x + (size_t)k * d->row;
            uint32_t id;
            memcpy(&id, x, 4);
            if (id >= d->n || memcmp(x, d->x + id * d->row, d->row) != 0 ||
                ((const int32_t *)b.y)[k] != d->y[id]) {
                CHECK_MSG(0, "sample %ld of the epoch does not match its id %u", got, id);
                return -1;
            }
            if (got < max)
                ids[got] = id;
            got++;
        }
    }
    if (short_batches)
        *short_batches = shorts;
    return rc < 0 ? -1 : got;
}

static int once_each(const uint32_t *ids, size_t n)
{
    char *seen = calloc(n, 1);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= n || seen[ids[i]])
            ok = 0;
        else
            seen[ids[i]] = 1;
    }
    free(seen);
    return ok;
}

static dl_hdf5_options opts(const char *path, int batch, int workers)
{
    dl_hdf5_options o;
    dl_hdf5_options_init(&o);
    o.path = path;
    o.batch = batch;
    o.workers = workers;
    o.seed = 7;
    return o;
}

enum { N = 2000, H = 8, W = 10 };

static void test_memory_mode_matches_memory_source(void)
{
    id_data d = make_ids(N, H, W);
    const char *path = tmp_path("ids.h5");
    write_ids(path, &d, H, W, 128, 0);
    static uint32_t a[N], b[N];
    dl_dataset ds = {0};
    ds.x = d.x;
    ds.y = d.y;
    ds.info.sample = dl_shape_make(3, (const int64_t[]){1, H, W});
    ds.info.x_dtype = DL_U8;
    ds.info.y_dtype = DL_I32;
    ds.info.y_width = 1;
    ds.info.count = N;
    snprintf(ds.name, sizeof ds.name, "ids");
    dl_source *m, *h;
    CHECK_OK(dl_source_memory(&m, &ds, 64, 1, 0, 7));
    for (int workers = 0; workers <= 2; workers++) {
        dl_hdf5_options o = opts(path, 64, workers);
        CHECK_OK(dl_source_hdf5(&h, &o));
        if (!h)
            break;
        CHECK(strcmp(dl_source_hdf5_mode(h), "memory") == 0);
        CHECK(h->info.count == N && h->info.classes == 10 && h->info.x_dtype == DL_U8);
        CHECK(h->info.sample.ndim == 3 && h->info.sample.dim[2] == W);
        CHECK_NEAR(h->info.scale, 1.0 / 255.0, 1e-9);
        CHECK(strstr(h->name, "ids.h5:/train") != NULL);
        for (int epoch = 0; epoch < 2; epoch++) {
            CHECK_OK(m->ops->start_epoch(m, epoch, 0));
            CHECK_OK(h->ops->start_epoch(h, epoch, 0));
            dl_batch mb;
            long n = 0;
            while (m->ops->next(m, &mb) == 1)
                for (int k = 0; k < mb.n; k++)
                    memcpy(&a[n++], (const uint8_t *)mb.x + (size_t)k * d.row, 4);
            CHECK(drain(h, &d, b, N, NULL) == N);
            CHECK(memcmp(a, b, sizeof a) == 0);
        }
        dl_loader_stats st;
        h->ops->stats(h, &st);
        CHECK(st.batches == 2 * ((N + 63) / 64));
        CHECK(st.bytes_read >= (double)N * d.row);
        CHECK(st.queue_size == (workers ? 4 : 1));
        dl_source_destroy(h);
    }
    dl_source_destroy(m);
    free(d.x);
    free(d.y);
}

/* limit: only the first samples of the file, each once per epoch, in
 * memory and streaming modes. */
static void test_limit(void)
{
    id_data d = make_ids(N, H, W);
    const char *path = tmp_path("limit.h5");
    write_ids(path, &d, H, W, 128, 0);
    static uint32_t ids[N];
    for (int mode = 0; mode < 2; mode++) {
        dl_hdf5_options o = opts(path, 64, 1);
        o.limit = 300;
        o.shuffle = 1;
        o.mode = mode ? DL_HDF5_STREAM : DL_HDF5_MEMORY;
        dl_source *h = NULL;
        CHECK_OK(dl_source_hdf5(&h, &o));
        if (!h)
            break;
        CHECK(h->info.count == 300);
        CHECK(h->ops->batches(h) == (300 + 63) / 64);
        CHECK_OK(h->ops->start_epoch(h, 1, 0));
        CHECK(drain(h, &d, ids, N, NULL) == 300);
        static char seen[N];
        memset(seen, 0, sizeof seen);
        int dup = 0, beyond = 0;
        for (int i = 0; i < 300; i++) {
            beyond += ids[i] >= 300;
            dup += seen[ids[i]]++ > 0;
        }
        CHECK_MSG(beyond == 0 && dup == 0, "%s: %d samples beyond the limit, %d repeated",
                  mode ? "streaming" : "memory", beyond, dup);
        dl_source_destroy(h);
    }
    free(d.x);
    free(d.y);
}

/* Streaming with a budget a quarter of the file: every sample once, same
 * order for any worker count, seed decides, resume continues the order. */
static void test_streaming_budget_smaller_than_file(void)
{
    id_data d = make_ids(N, H, W);
    const char *path = tmp_path("stream.h5");
    write_ids(path, &d, H, W, 50, 0);
    static uint32_t ref[N], got[N], other[N];
    size_t file_bytes = (size_t)N * (d.row + 4);
    for (int workers = 0; workers <= 3; workers++) {
        dl_hdf5_options o = opts(path, 32, workers);
        o.memory_budget = file_bytes / 4;
        dl_source *s;
        CHECK_OK(dl_source_hdf5(&s, &o));
        if (!s)
            return;
        CHECK(strcmp(dl_source_hdf5_mode(s), "streaming") == 0);
        CHECK(s->ops->batches(s) == (N + 31) / 32);
        for (int epoch = 0; epoch < 2; epoch++) {
            CHECK_OK(s->ops->start_epoch(s, epoch, 0));
            uint32_t *dst = workers == 0 && epoch == 0 ? ref : got;
            int shorts;
            CHECK(drain(s, &d, dst, N, &shorts) == N);
            CHECK(shorts == 1); /* 2000 = 62 * 32 + 16 */
            CHECK(once_each(dst, N));
            if (epoch == 0)
                CHECK(memcmp(ref, dst, sizeof ref) == 0);
            else
                CHECK(memcmp(ref, dst, sizeof ref) != 0);
        }
        /* resume in the middle of epoch 0 */
        for (size_t skip = 1; skip < s->ops->batches(s); skip += 17) {
            CHECK_OK(s->ops->start_epoch(s, 0, skip));
            long n = drain(s, &d, got, N, NULL);
            CHECK(n == (long)(N - skip * 32));
            CHECK(n > 0 && memcmp(got, ref + skip * 32, (size_t)n * 4) == 0);
        }
        /* stop in the middle and restart the epoch: nothing stale leaks */
        dl_batch b;
        CHECK_OK(s->ops->start_epoch(s, 0, 0));
        CHECK(s->ops->next(s, &b) == 1);
        CHECK_OK(s->ops->start_epoch(s, 0, 0));
        CHECK(drain(s, &d, got, N, NULL) == N && memcmp(got, ref, sizeof ref) == 0);
        dl_loader_stats st;
        s->ops->stats(s, &st);
        CHECK(st.bytes_read > (double)N * d.row); /* read more than once */
        dl_source_destroy(s);
    }
    /* another seed, another order; no shuffle, file order */
    dl_hdf5_options o = opts(path, 32, 2);
    o.memory_budget = file_bytes / 4;
    o.seed = 8;
    dl_source *s;
    CHECK_OK(dl_source_hdf5(&s, &o));
    CHECK(s && drain(s, &d, other, N, NULL) == N && memcmp(other, ref, sizeof ref) != 0);
    dl_source_destroy(s);
    o.shuffle = 0;
    o.drop_last = 1;
    CHECK_OK(dl_source_hdf5(&s, &o));
    int in_order = 1, shorts = 0;
    CHECK(s && drain(s, &d, other, N, &shorts) == (N / 32) * 32 && shorts == 0);
    for (int i = 0; i < (N / 32) * 32; i++)
        in_order &= other[i] == (uint32_t)i;
    CHECK(in_order);
    dl_source_destroy(s);
    free(d.x);
    free(d.y);
}

/* Crop and flip: deterministic, equal for any worker count, and each output
 * is the input shifted by at most pad and possibly mirrored. */
static void test_augmentation(void)
{
    enum { AN = 300, AH = 6, AW = 7, PAD = 2 };
    id_data d = make_ids(AN, AH, AW);
    /* labels carry the id so the source sample is known after augmenting */
    for (int i = 0; i < AN; i++)
        d.y[i] = i;
    const char *path = tmp_path("aug.h5");
    write_ids(path, &d, AH, AW, 64, 0);
    static uint8_t first[AN * AH * AW];
    int flips = 0, shifts = 0;
    for (int workers = 0; workers <= 2; workers += 2) {
        dl_hdf5_options o = opts(path, 16, workers);
        o.crop_pad = PAD;
        o.hflip = 1;
        dl_source *s;
        CHECK_OK(dl_source_hdf5(&s, &o));
        if (!s)
            return;
        dl_batch b;
        size_t n = 0;
        while (s->ops->next(s, &b) == 1) {
            for (int k = 0; k < b.n; k++, n++) {
                const uint8_t *out = (const uint8_t *)b.x + (size_t)k * AH * AW;
                int id = ((const int32_t *)b.y)[k];
                const uint8_t *in = d.x + (size_t)id * AH * AW;
                if (workers == 0)
                    memcpy(first + n * AH * AW, out, AH * AW);
                else
                    CHECK(memcmp(first + n * AH * AW, out, AH * AW) == 0);
                /* find the (dy, dx, flip) that explains out */
                int found = 0;
                for (int f = 0; f < 2 && !found; f++)
                    for (int dy = -PAD; dy <= PAD && !found; dy++)
                        for (int dx = -PAD; dx <= PAD && !found; dx++) {
                            int ok = 1;
                            for (int i = 0; i < AH && ok; i++)
                                for (int j = 0; j < AW && ok; j++) {
                                    int si = i + dy, sj = (f ? AW - 1 - j : j) + dx;
                                    int v = si < 0 || si >= AH || sj < 0 || sj >= AW
                                                ? 0
                                                : in[si * AW + sj];
                                    ok = out[i * AW + j] == v;
                                }
                            if (ok) {
                                found = 1;
                                flips += f;
                                shifts += dx != 0 || dy != 0;
                            }
                        }
                CHECK_MSG(found, "sample %zu (id %d) is no crop/flip of its source", n, id);
            }
        }
        CHECK(n == AN);
        dl_source_destroy(s);
    }
    /* both kinds happen, about half flipped (two passes of AN) */
    CHECK(flips > AN / 2 && flips < 3 * AN / 2);
    CHECK(shifts > AN);
    free(d.x);
    free(d.y);
}

/* A backend that only hands out host buffers, to check retarget. */
static int fake_allocs;
static void *fake_host_alloc(dl_backend *be, size_t bytes)
{
    fake_allocs++;
    return malloc(bytes);
}
static void fake_host_free(dl_backend *be, void *p)
{
    if (p)
        fake_allocs--;
    free(p);
}

static void test_retarget_keeps_cursor(void)
{
    id_data d = make_ids(N, H, W);
    const char *path = tmp_path("ids.h5");
    write_ids(path, &d, H, W, 128, 0);
    static uint32_t ref[N], got[N];
    dl_backend_ops ops = {.host_alloc = fake_host_alloc, .host_free = fake_host_free};
    dl_backend be = {.ops = &ops};
    dl_hdf5_options o = opts(path, 100, 2);
    dl_source *s;
    CHECK_OK(dl_source_hdf5(&s, &o));
    if (!s)
        return;
    CHECK(drain(s, &d, ref, N, NULL) == N);
    CHECK_OK(s->ops->start_epoch(s, 0, 0));
    dl_batch b;
    long n = 0;
    for (int i = 0; i < 5; i++) {
        CHECK(s->ops->next(s, &b) == 1);
        for (int k = 0; k < b.n; k++)
            memcpy(&got[n++], (const uint8_t *)b.x + (size_t)k * d.row, 4);
    }
    CHECK_OK(s->ops->retarget(s, &be));
    CHECK(fake_allocs == 2 * 4);
    CHECK(drain(s, &d, got + n, N - n, NULL) == N - n);
    CHECK(memcmp(got, ref, sizeof ref) == 0);
    dl_source_destroy(s);
    CHECK(fake_allocs == 0);
    free(d.x);
    free(d.y);
}

static void test_normalisation_and_dtypes(void)
{
    enum { M = 40 };
    static float x[M][3][2][2], t[M][2];
    for (int i = 0; i < M; i++) {
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 4; p++)
                x[i][c][p / 2][p % 2] = (float)(i * 100 + c * 10 + p);
        t[i][0] = (float)i;
        t[i][1] = (float)-i;
    }
    dset xs = {"x", H5T_NATIVE_FLOAT, 4, {M, 3, 2, 2}, x, 0, 0};
    dset ys = {"y", H5T_NATIVE_FLOAT, 2, {M, 2}, t, 0, 0};
    const char *path = tmp_path("f32.h5");
    write_h5(path, &xs, &ys, 0);
    /* mean/std attributes on the group */
    dl_hdf5_lock();
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5Gopen2(f, "/train", H5P_DEFAULT);
    float mean[3] = {1, 2, 3}, std[3] = {4, 5, 6};
    hsize_t three = 3;
    hid_t sp = H5Screate_simple(1, &three, NULL);
    hid_t a = H5Acreate2(g, "mean", H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_FLOAT, mean);
    H5Aclose(a);
    a = H5Acreate2(g, "std", H5T_NATIVE_FLOAT, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_FLOAT, std);
    H5Aclose(a);
    H5Sclose(sp);
    H5Gclose(g);
    H5Fclose(f);
    dl_hdf5_unlock();

    dl_hdf5_options o = opts(path, 16, 1);
    o.shuffle = 0;
    o.normalize = 1;
    dl_source *s;
    CHECK_OK(dl_source_hdf5(&s, &o));
    if (!s)
        return;
    CHECK(s->info.x_dtype == DL_F32 && s->info.y_dtype == DL_F32 && s->info.y_width == 2);
    CHECK(s->info.classes == 0 && s->info.scale == 1.0f);
    CHECK(s->info.channels == 3 && s->info.mean[2] == 3 && s->info.std[1] == 5);
    dl_batch b;
    CHECK(s->ops->next(s, &b) == 1 && b.n == 16);
    CHECK(((const float *)b.x)[12 * 12 + 7] == 1200 + 10 + 3);
    CHECK(((const float *)b.y)[2 * 1 + 1] == -1);
    dl_source_destroy(s);

    o.normalize = 1;
    o.channels = 1;
    o.mean[0] = 0.5f;
    o.std[0] = 0;
    CHECK(dl_source_hdf5(&s, &o) == DL_EINVAL && s == NULL);
    CHECK(strstr(dl_error_message(), "std[0]") != NULL);
}

/* Expects dl_source_hdf5 to fail with code, naming file and `what`. */
static void expect_open_error(dl_hdf5_options o, int code, const char *what)
{
    dl_source *s = (dl_source *)1;
    int rc = dl_source_hdf5(&s, &o);
    CHECK_MSG(rc == code, "rc %d, want %d: %s", rc, code, dl_error_message());
    CHECK(s == NULL);
    const char *base = strrchr(o.path, '/');
    CHECK_MSG(strstr(dl_error_message(), base + 1) != NULL, "message \"%s\" lacks the file",
              dl_error_message());
    CHECK_MSG(strstr(dl_error_message(), what) != NULL, "message \"%s\" lacks \"%s\"",
              dl_error_message(), what);
}

static void copy_truncated(const char *from, const char *to, double fraction)
{
    FILE *f = fopen(from, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    f = fopen(to, "wb");
    fwrite(buf, 1, (size_t)((double)got * fraction), f);
    fclose(f);
    free(buf);
}

static void test_bad_input(void)
{
    enum { BN = 500 };
    id_data d = make_ids(BN, H, W);
    char good[512], bad[512];
    snprintf(good, sizeof good, "%s", tmp_path("good.h5"));
    snprintf(bad, sizeof bad, "%s", tmp_path("corrupt.h5"));
    write_ids(good, &d, H, W, 100, 0);

    expect_open_error(opts(tmp_path("missing.h5"), 32, 1), DL_EINVAL, "no such file");
    FILE *f = fopen(tmp_path("text.h5"), "w");
    fputs("this is not an HDF5 file\n", f);
    fclose(f);
    expect_open_error(opts(tmp_path("text.h5"), 32, 1), DL_EINVAL, "not an HDF5 file");
    copy_truncated(good, tmp_path("trunc.h5"), 0.5);
    dl_hdf5_options o = opts(tmp_path("trunc.h5"), 32, 1);
    dl_source *s = NULL;
    int rc = dl_source_hdf5(&s, &o);
    CHECK_MSG(rc == DL_EIO || rc == DL_EINVAL, "truncated file opened: rc %d", rc);
    CHECK(s == NULL && strstr(dl_error_message(), "trunc.h5") != NULL);

    o = opts(good, 32, 1);
    o.group = "/val";
    expect_open_error(o, DL_EINVAL, "no group /val");
    o.group = "/train/deeper/still";
    expect_open_error(o, DL_EINVAL, "no group /train/deeper/still");
    o = opts(good, 32, 1);
    o.y_name = "labels";
    expect_open_error(o, DL_EINVAL, "no dataset /train/labels");
    o = opts(good, 32, 1);
    o.expect_sample = dl_shape_make(1, (const int64_t[]){784});
    expect_open_error(o, DL_EINVAL, "do not fit the model's input [784]");
    o.expect_sample = dl_shape_make(3, (const int64_t[]){1, W, H});
    expect_open_error(o, DL_EINVAL, "[1, 8, 10] do not fit");
    o.expect_sample = dl_shape_make(1, (const int64_t[]){H * W});
    CHECK_OK(dl_source_hdf5(&s, &o)); /* flattened input of the same size fits */
    dl_source_destroy(s);
    o = opts(good, 32, 1);
    o.classes = 5;
    expect_open_error(o, DL_EINVAL, "label 5 at row 5");
    o = opts(good, 32, 1);
    o.mode = DL_HDF5_STREAM;
    o.memory_budget = 4096;
    expect_open_error(o, DL_EINVAL, "memory budget of 4096 bytes is too small");

    /* x and y lengths differ */
    dset x = {"x", H5T_NATIVE_UINT8, 4, {BN, 1, H, W}, d.x, 0, 0};
    dset y = {"y", H5T_NATIVE_INT32, 1, {BN - 1}, d.y, 0, 0};
    write_h5(tmp_path("len.h5"), &x, &y, 0);
    expect_open_error(opts(tmp_path("len.h5"), 32, 1), DL_EINVAL,
                      "/train/x has 500 samples but /train/y has 499");
    /* unsupported dtypes */
    double *xd = calloc(BN * H * W, sizeof *xd);
    dset x64 = {"x", H5T_NATIVE_DOUBLE, 4, {BN, 1, H, W}, xd, 0, 0};
    y.dims[0] = BN;
    write_h5(tmp_path("f64.h5"), &x64, &y, 0);
    expect_open_error(opts(tmp_path("f64.h5"), 32, 1), DL_EINVAL,
                      "/train/x: unsupported dtype f64");
    dset x16 = {"x", H5T_NATIVE_INT16, 2, {BN, 2}, xd, 0, 0};
    write_h5(tmp_path("i16.h5"), &x16, &y, 0);
    expect_open_error(opts(tmp_path("i16.h5"), 32, 1), DL_EINVAL, "unsupported dtype i16");
    free(xd);
    /* negative labels */
    d.y[17] = -3;
    write_ids(tmp_path("neg.h5"), &d, H, W, 100, 0);
    expect_open_error(opts(tmp_path("neg.h5"), 32, 1), DL_EINVAL, "label -3 at row 17");
    d.y[17] = 7;

    /* a corrupt compressed chunk: found by next() while streaming, with the
     * dataset path, and by the constructor in memory mode */
    write_ids(bad, &d, H, W, 100, 6);
    dl_hdf5_lock();
    hid_t hf = H5Fopen(bad, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(hf, "/train/x", H5P_DEFAULT);
    haddr_t off = 0;
    hsize_t csize = 0;
    hid_t fsp = H5Dget_space(ds);
    H5Dget_chunk_info(ds, fsp, 2, NULL, NULL, &off, &csize);
    H5Sclose(fsp);
    H5Dclose(ds);
    H5Fclose(hf);
    dl_hdf5_unlock();
    CHECK(off > 0 && csize > 8);
    f = fopen(bad, "r+b");
    fseek(f, (long)off, SEEK_SET);
    for (hsize_t i = 0; i < csize; i++)
        fputc(0xA5, f);
    fclose(f);
    expect_open_error(opts(bad, 32, 1), DL_EIO, "/train/x");
    for (int workers = 0; workers <= 2; workers += 2) {
        o = opts(bad, 32, workers);
        o.mode = DL_HDF5_STREAM;
        o.shuffle = 0;
        CHECK_OK(dl_source_hdf5(&s, &o));
        if (!s)
            break;
        dl_batch b;
        int batches = 0;
        while ((rc = s->ops->next(s, &b)) == 1)
            batches++;
        CHECK_MSG(rc == DL_EIO, "rc %d after %d batches", rc, batches);
        CHECK(batches < 300 / 32 + 1);
        CHECK_MSG(strstr(dl_error_message(), "corrupt.h5:/train/x") != NULL, "message: %s",
                  dl_error_message());
        CHECK(s->ops->next(s, &b) == DL_EIO); /* stays failed, no hang */
        dl_source_destroy(s);
    }
    free(d.x);
    free(d.y);
}

/* Two sources read the same file from their own threads at once. */
static void test_concurrent_sources(void)
{
    id_data d = make_ids(N, H, W);
    const char *path = tmp_path("ids2.h5");
    write_ids(path, &d, H, W, 40, 0);
    dl_hdf5_options o = opts(path, 50, 2);
    o.mode = DL_HDF5_STREAM;
    o.shuffle_window = 200;
    dl_source *a, *b;
    CHECK_OK(dl_source_hdf5(&a, &o));
    o.seed = 99;
    CHECK_OK(dl_source_hdf5(&b, &o));
    if (!a || !b)
        return;
    static uint32_t ia[N], ib[N];
    for (int epoch = 0; epoch < 3; epoch++) {
        CHECK_OK(a->ops->start_epoch(a, epoch, 0));
        CHECK_OK(b->ops->start_epoch(b, epoch, 0));
        dl_batch ba, bb;
        long na = 0, nb = 0;
        int ra = 1, rb = 1;
        while (ra == 1 || rb == 1) {
            if (ra == 1 && (ra = a->ops->next(a, &ba)) == 1)
                for (int k = 0; k < ba.n; k++)
                    memcpy(&ia[na++], (const uint8_t *)ba.x + (size_t)k * d.row, 4);
            if (rb == 1 && (rb = b->ops->next(b, &bb)) == 1)
                for (int k = 0; k < bb.n; k++)
                    memcpy(&ib[nb++], (const uint8_t *)bb.x + (size_t)k * d.row, 4);
        }
        CHECK(ra == 0 && rb == 0 && na == N && nb == N);
        CHECK(once_each(ia, N) && once_each(ib, N));
    }
    dl_source_destroy(a);
    dl_source_destroy(b);
    free(d.x);
    free(d.y);
}

/* engine/base/h5util.h: attributes written and read back, counts and
 * limits, and the checking macro's message. */
static int h5_try_fails(hid_t f)
{
    DL_H5_TRY(DL_EIO, H5Gopen2(f, "/nowhere", H5P_DEFAULT), "%s: opening", "t.h5");
    return DL_OK;
}

static void test_h5util_attributes(void)
{
    const char *path = tmp_path("attrs.h5");
    dl_hdf5_lock();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    double d3[3] = {1.5, -2, 1e300};
    int one = 7;
    const char *names[] = {"a", "longer name"};
    CHECK(dl_h5_attr_write(f, "d3", H5T_NATIVE_DOUBLE, 3, d3) == 0);
    CHECK(dl_h5_attr_write(f, "one", H5T_NATIVE_INT, 0, &one) == 0);
    CHECK(dl_h5_attr_write_string(f, "s", "dlbench-data 1", H5T_CSET_UTF8) == 0);
    CHECK(dl_h5_attr_write_strings(f, "names", names, 2, H5T_CSET_UTF8) == 0);
    CHECK(dl_h5_attr_write(f, "one", H5T_NATIVE_INT, 0, &one) < 0); /* exists */
    H5Eclear2(H5E_DEFAULT);

    double got[3] = {0};
    int i = 0;
    CHECK(dl_h5_attr_read(f, "d3", H5T_NATIVE_DOUBLE, 3, got) == 3 && got[2] == 1e300);
    CHECK(dl_h5_attr_read(f, "d3", H5T_NATIVE_DOUBLE, 2, got) == -1);
    CHECK(dl_h5_attr_read(f, "absent", H5T_NATIVE_DOUBLE, 3, got) == 0);
    CHECK(dl_h5_attr_read(f, "one", H5T_NATIVE_INT, 1, &i) == 1 && i == 7);
    char *str = dl_h5_attr_read_string(f, "s");
    CHECK(str && !strcmp(str, "dlbench-data 1"));
    free(str);
    CHECK(dl_h5_attr_read_string(f, "d3") == NULL);
    CHECK(h5_try_fails(f) == DL_EIO);
    CHECK_MSG(strstr(dl_error_message(), "t.h5: opening: ") &&
                  strstr(dl_error_message(), "(test_h5data.c:"),
              "%s", dl_error_message());
    H5Fclose(f);
    dl_hdf5_unlock();
}

/* Reads (dy, dx, flip) back from an augmented ramp image (pixel (i, j) =
 * 1 + i * w + j, padding 0). Returns 0 when out is no crop/flip of it. */
static int read_offsets(const uint8_t *out, int h, int w, int *dy, int *dx, int *flip)
{
    for (int i = 0; i < h; i++)
        for (int j = 0; j + 1 < w; j++) {
            int a = out[i * w + j], b = out[i * w + j + 1];
            if (!a || !b)
                continue;
            int si = (a - 1) / w, sj = (a - 1) % w;
            *flip = b == a - 1;
            *dy = si - i;
            *dx = *flip ? sj - (w - 1 - j) : sj - j;
            return b == a + 1 || b == a - 1;
        }
    return 0;
}

/* Crop offsets cover all of [-pad, pad] on both axes about evenly, flips
 * land near half, and a resume in the middle of an augmented epoch gives
 * the batches (pixels and labels) of the uninterrupted run. */
static void test_augmentation_statistics_and_resume(void)
{
    enum { SN = 4000, SH = 9, SW = 9, PAD = 3, SB = 50 };
    id_data d = {malloc((size_t)SN * SH * SW), malloc(SN * sizeof(int32_t)), SN, SH * SW};
    for (int i = 0; i < SN; i++) {
        for (int p = 0; p < SH * SW; p++)
            d.x[(size_t)i * SH * SW + p] = (uint8_t)(1 + p);
        d.y[i] = i;
    }
    const char *path = tmp_path("augstats.h5");
    write_ids(path, &d, SH, SW, 256, 0);
    dl_hdf5_options o = opts(path, SB, 2);
    o.crop_pad = PAD;
    o.hflip = 1;
    dl_source *s;
    CHECK_OK(dl_source_hdf5(&s, &o));
    if (!s)
        return;
    CHECK_OK(s->ops->start_epoch(s, 1, 0));
    static uint8_t ref[SN * SH * SW];
    static int32_t ref_y[SN];
    int cy[2 * PAD + 1] = {0}, cx[2 * PAD + 1] = {0}, flips = 0, bad = 0;
    dl_batch b;
    size_t n = 0;
    while (s->ops->next(s, &b) == 1 && n + (size_t)b.n <= SN) {
        memcpy(ref + n * SH * SW, b.x, (size_t)b.n * SH * SW);
        memcpy(ref_y + n, b.y, (size_t)b.n * sizeof(int32_t));
        for (int k = 0; k < b.n; k++) {
            int dy, dx, f;
            if (!read_offsets(ref + (n + k) * SH * SW, SH, SW, &dy, &dx, &f) || dy < -PAD ||
                dy > PAD || dx < -PAD || dx > PAD) {
                bad++;
                continue;
            }
            cy[dy + PAD]++;
            cx[dx + PAD]++;
            flips += f;
        }
        n += (size_t)b.n;
    }
    CHECK(n == SN && bad == 0);
    /* each of the 7 offsets expects SN / 7 = 571 (sd ~22): within 20% */
    for (int k = 0; k < 2 * PAD + 1; k++)
        CHECK_MSG(cy[k] > SN / 7 * 8 / 10 && cy[k] < SN / 7 * 12 / 10 && cx[k] > SN / 7 * 8 / 10 &&
                      cx[k] < SN / 7 * 12 / 10,
                  "offset %d: dy %d, dx %d times of %d", k - PAD, cy[k], cx[k], SN);
    CHECK_MSG(flips > SN * 45 / 100 && flips < SN * 55 / 100, "%d flips of %d", flips, SN);
    /* resume epoch 1 at batch 31: the same pixels and labels */
    CHECK_OK(s->ops->start_epoch(s, 1, 31));
    n = 31 * SB;
    int same = 1;
    while (s->ops->next(s, &b) == 1 && n + (size_t)b.n <= SN) {
        same &= memcmp(ref + n * SH * SW, b.x, (size_t)b.n * SH * SW) == 0;
        same &= memcmp(ref_y + n, b.y, (size_t)b.n * sizeof(int32_t)) == 0;
        n += (size_t)b.n;
    }
    CHECK(n == SN && same);
    dl_source_destroy(s);
    free(d.x);
    free(d.y);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dl-test-h5data-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_memory_mode_matches_memory_source);
    RUN(test_streaming_budget_smaller_than_file);
    RUN(test_limit);
    RUN(test_augmentation);
    RUN(test_retarget_keeps_cursor);
    RUN(test_normalisation_and_dtypes);
    RUN(test_bad_input);
    RUN(test_concurrent_sources);
    RUN(test_h5util_attributes);
    RUN(test_augmentation_statistics_and_resume);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (getenv("KEEP"))
        return check_failed_tests ? 1 : 0;
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    CHECK_EXIT();
}
