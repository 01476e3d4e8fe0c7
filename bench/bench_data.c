/* bench_data.c - batch assembly throughput of the loaders against memcpy, and data wait of an MLP-sized step
 *
 * On data/fashion-mnist.h5 (/train, batches of 128 x 784 u8): memcpy of
 * the same bytes; the in-memory source; the HDF5 source in memory and
 * streaming (budgets of half of x, the file twice the budget, and 16 MiB)
 * with 0, 1 and 2 workers; a sequential H5Dread of the whole x. The machine
 * may be shared, so each case is measured in ten slices alternating with
 * slices of memcpy (and, when streaming, an H5Dread of the whole x), and its
 * percentages are against those peers' throughput over the same stretch of
 * time. The memcpy walks through the same x (47 MB, more than the L3 holds
 * for a sequential walk) into one batch buffer that stays in cache, as the
 * loaders' batch buffers do: the same bytes, from the same memory, to the
 * same kind of destination; only the order differs. Then the share of step time
 * spent waiting for data when each step runs the CPU backend's gemms of a
 * 784-512-256-10 MLP (forward and backward, f32) after converting the batch
 * with input_to_f32. The h5py and numpy peers are bench/bench_data.py;
 * compare the lines.
 *
 * usage: bench_data [FILE.h5] [seconds per case, default 1] [only the cases whose name has this]
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/core/backend.h"
#include "engine/data/data.h"
#include "engine/base/clock.h"
#include "engine/base/mem.h"
#include "engine/base/error.h"
#include "engine/base/h5util.h"
#include "engine/data/h5data.h"

#include "bench/bench_cpu.h"

enum { BATCH = 128 };

static double seconds = 1.0;
static double memcpy_gbs, seq_gbs; /* the peers, measured next to each case */

static void line(const char *what, double batches, double bytes, double dt)
{
    double gbs = bytes / dt / 1e9;
    printf("%-44s %9.0f batches/s %7.2f GB/s", what, batches / dt, gbs);
    if (memcpy_gbs > 0)
        printf("  %5.1f%% of memcpy", 100.0 * gbs / memcpy_gbs);
    if (seq_gbs > 0)
        printf("  %5.1f%% of H5Dread", 100.0 * gbs / seq_gbs);
    printf("\n");
}

/* memcpy of batch-sized blocks walking through the array x [count, row]
 * into one reused buffer; the walk goes on where the last slice left it. */
typedef struct copier {
    const unsigned char *x;
    unsigned char *dst;
    size_t nb, k, row;
    double batches, t;
} copier;

static void copy_for(copier *c, double secs)
{
    double t0 = dl_clock_mono_s(), t;
    while ((t = dl_clock_mono_s()) - t0 < secs)
        for (int j = 0; j < 16; j++, c->batches++) {
            memcpy(c->dst, c->x + c->k * BATCH * c->row, BATCH * c->row);
            __asm__ volatile("" : : "r"(c->dst) : "memory"); /* keep the copy */
            c->k = c->k + 1 < c->nb ? c->k + 1 : 0;
        }
    c->t += t - t0;
}

static double copier_gbs(const copier *c) { return c->batches * BATCH * c->row / c->t / 1e9; }

/* Sequential H5Dread of the whole x into buf (already touched), reps
 * times with HDF5's default chunk cache and reps times without one (the
 * HDF5 source reads without: the cache only adds a copy of each chunk), so
 * that the streaming cases are held to the faster read. Returns the best
 * single read's GB/s; adds the time of each setting's reads to spent[0]
 * (without the cache) and spent[1] (with). */
static double h5dread_peer(const char *path, void *buf, size_t bytes, int reps, double spent[2])
{
    dl_hdf5_lock();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    double best = 1e9;
    for (int cache = 0; cache < 2; cache++) {
        hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
        if (!cache)
            H5Pset_chunk_cache(dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, 1.0);
        hid_t xs = H5Dopen2(f, "/train/x", dapl);
        for (int i = 0; i < reps; i++) {
            double t0 = dl_clock_mono_s();
            H5Dread(xs, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
            double dt = dl_clock_mono_s() - t0;
            best = dt < best ? dt : best;
            spent[cache] += dt;
        }
        H5Dclose(xs);
        H5Pclose(dapl);
    }
    H5Fclose(f);
    dl_hdf5_unlock();
    return (double)bytes / best / 1e9;
}

/* Batches pulled from a source (restarting epochs) over several slices. */
typedef struct puller {
    dl_source *s;
    int epoch, failed;
    double bytes, batches, t;
} puller;

static void pull_for(puller *p, double secs)
{
    dl_batch b;
    dl_source *s = p->s;
    size_t row = (size_t)dl_shape_numel(&s->info.sample) * dl_dtype_size(s->info.x_dtype);
    volatile unsigned char sink = 0;
    double t0 = dl_clock_mono_s(), t;
    while (!p->failed && (t = dl_clock_mono_s()) - t0 < secs) {
        int rc = s->ops->next(s, &b);
        if (rc < 0) {
            p->failed = 1;
            return;
        }
        if (rc == 0) {
            s->ops->start_epoch(s, ++p->epoch, 0);
            continue;
        }
        sink ^= ((const unsigned char *)b.x)[0];
        p->batches++;
        p->bytes += (double)b.n * (double)row;
    }
    p->t += t - t0;
}

/* Runs source s for `seconds` in slices, alternating with slices of
 * memcpy (c) and, when streaming, sequential reads of x (into buf), and
 * prints its line against them. */
static void run_source(const char *what, dl_source *s, copier *c, const char *path, void *buf,
                       size_t xbytes, int streaming)
{
    enum { SLICES = 10 };
    puller p = {.s = s};
    copier mine = *c;
    mine.batches = mine.t = 0;
    double spent[2] = {0, 0};
    int reads = 0;
    for (int i = 0; i < SLICES && !p.failed; i++) {
        copy_for(&mine, seconds / SLICES);
        pull_for(&p, seconds / SLICES);
        if (streaming) {
            h5dread_peer(path, buf, xbytes, 1, spent);
            reads++;
        }
    }
    if (p.failed) {
        fprintf(stderr, "%s: %s\n", what, dl_error_message());
        return;
    }
    c->k = mine.k;
    memcpy_gbs = copier_gbs(&mine);
    /* the faster setting over the same stretch of time as the case */
    double t_read = spent[0] < spent[1] ? spent[0] : spent[1];
    seq_gbs = reads ? (double)reads * (double)xbytes / t_read / 1e9 : 0;
    line(what, p.batches, p.bytes, p.t);
}

static dl_hdf5_options options(const char *path, int workers, size_t streaming_budget)
{
    dl_hdf5_options o;
    dl_hdf5_options_init(&o);
    o.path = path;
    o.batch = BATCH;
    o.workers = workers;
    o.seed = 1;
    if (streaming_budget) {
        o.mode = DL_HDF5_STREAM;
        o.memory_budget = streaming_budget;
    }
    return o;
}

/* The gemms of one training step of a 784-512-256-10 MLP on a batch. */
typedef struct mlp {
    dl_backend *be;
    float *x, *w[3], *h[3], *dh[3], *dw[3];
} mlp;

static const int dims[4] = {784, 512, 256, 10};

static void mlp_init(mlp *m, dl_backend *be)
{
    m->be = be;
    m->x = calloc((size_t)BATCH * 784, sizeof(float));
    for (int l = 0; l < 3; l++) {
        size_t nw = (size_t)dims[l] * dims[l + 1];
        m->w[l] = malloc(nw * sizeof(float));
        m->dw[l] = calloc(nw, sizeof(float));
        for (size_t i = 0; i < nw; i++)
            m->w[l][i] = (float)((i * 2654435761u) % 1000) * 1e-5f;
        m->h[l] = calloc((size_t)BATCH * dims[l + 1], sizeof(float));
        m->dh[l] = calloc((size_t)BATCH * dims[l + 1], sizeof(float));
    }
}

static void mlp_done(mlp *m)
{
    free(m->x);
    for (int l = 0; l < 3; l++) {
        free(m->w[l]);
        free(m->dw[l]);
        free(m->h[l]);
        free(m->dh[l]);
    }
}

static void mlp_step(mlp *m, const dl_batch *b, float scale)
{
    const dl_backend_ops *op = m->be->ops;
    op->input_to_f32(m->be, m->x, b->x, DL_U8, (size_t)b->n, 1, 784, scale, NULL, NULL);
    const float *in = m->x;
    for (int l = 0; l < 3; l++) { /* y = x w^T */
        op->gemm(m->be, 0, 1, b->n, dims[l + 1], dims[l], 1, in, dims[l], m->w[l], dims[l], DL_F32,
                 0, m->h[l], dims[l + 1]);
        in = m->h[l];
    }
    for (int l = 2; l >= 0; l--) { /* dw = dy^T x, dx = dy w */
        const float *x = l ? m->h[l - 1] : m->x;
        op->gemm(m->be, 1, 0, dims[l + 1], dims[l], b->n, 1, m->h[l], dims[l + 1], x, dims[l],
                 DL_F32, 0, m->dw[l], dims[l]);
        if (l)
            op->gemm(m->be, 0, 0, b->n, dims[l], dims[l + 1], 1, m->h[l], dims[l + 1], m->w[l],
                     dims[l], DL_F32, 0, m->dh[l - 1], dims[l]);
    }
}

static void wait_share(const char *path, int workers, mlp *m)
{
    dl_hdf5_options o = options(path, workers, 0);
    dl_source *s;
    if (dl_source_hdf5(&s, &o) < 0) {
        fprintf(stderr, "%s\n", dl_error_message());
        return;
    }
    dl_batch b;
    double wait = 0, t0 = dl_clock_mono_s(), t;
    long steps = 0;
    int epoch = 0;
    while ((t = dl_clock_mono_s()) - t0 < seconds) {
        int rc = s->ops->next(s, &b);
        if (rc <= 0) {
            s->ops->start_epoch(s, ++epoch, 0);
            continue;
        }
        wait += b.wait_s;
        mlp_step(m, &b, s->info.scale);
        steps++;
    }
    printf(
        "MLP step, hdf5 memory, %d worker%s            %6.2f ms/step  data wait %5.2f%% of step\n",
        workers, workers == 1 ? " " : "s", 1e3 * (t - t0) / (double)steps, 100.0 * wait / (t - t0));
    dl_source_destroy(s);
}

int main(int argc, char **argv)
{
    bench_cpu_line();
    const char *path = argc > 1 ? argv[1] : "data/fashion-mnist.h5";
    if (argc > 2)
        seconds = atof(argv[2]);
    const char *only = argc > 3 ? argv[3] : NULL;
    dl_hdf5_options o = options(path, 0, 0);
    o.shuffle = 0;
    dl_source *probe;
    if (dl_source_hdf5(&probe, &o) < 0) {
        fprintf(stderr, "bench_data: %s (run `make run` or scripts/prepare-data.sh first)\n",
                dl_error_message());
        return 2;
    }
    size_t count = probe->info.count, row = 784;
    dl_source_destroy(probe);
    printf("bench_data: %s:/train, %zu samples, batches of %d x %zu u8\n", path, count, BATCH, row);

    /* the whole x in memory, for memcpy and the in-memory source */
    dl_dataset d = {0};
    d.x = dl_mem_alloc_big(count * row); /* as the HDF5 source holds it in memory */
    d.y = dl_mem_alloc_big(count * 4);
    dl_hdf5_lock();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ys = H5Dopen2(f, "/train/y", H5P_DEFAULT);
    H5Dread(ys, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.y);
    H5Dclose(ys);
    H5Fclose(f);
    dl_hdf5_unlock();
    /* into memory already touched, like the peers */
    memset(d.x, 0, count * row);
    double spent[2] = {0, 0};
    double seq = h5dread_peer(path, d.x, count * row, 3, spent);
    d.info.sample = dl_shape_make(1, (const int64_t[]){784});
    d.info.x_dtype = DL_U8;
    d.info.y_dtype = DL_I32;
    d.info.y_width = 1;
    d.info.count = count;
    snprintf(d.name, sizeof d.name, "%s:/train (in memory)", path);

    copier c = {.x = d.x, .dst = malloc(BATCH * row), .nb = count / BATCH, .row = row};
    copy_for(&c, seconds);
    memcpy_gbs = copier_gbs(&c);
    line("memcpy of the same bytes", c.batches, c.batches * BATCH * row, c.t);
    printf("%-44s %9s            %7.2f GB/s\n", "H5Dread of the whole x, sequential", "", seq);

    dl_source *s;
    const char *mem_what = "memory source, shuffled, sync";
    if ((!only || strstr(mem_what, only)) && dl_source_memory(&s, &d, BATCH, 1, 0, 1) == DL_OK) {
        run_source(mem_what, s, &c, path, d.x, count * row, 0);
        dl_source_destroy(s);
    }
    /* streaming: the case (a file twice the budget: x / 2) and a
     * tighter 16 MiB */
    size_t budgets[3] = {0, count * row / 2, (size_t)16 << 20};
    for (int b = 0; b < 3; b++)
        for (int w = 0; w <= 2; w++) {
            char what[80];
            if (budgets[b])
                snprintf(what, sizeof what, "hdf5 streaming %.1f MiB, shuffled, %d worker%s",
                         (double)budgets[b] / (1 << 20), w, w == 1 ? "" : "s");
            else
                snprintf(what, sizeof what, "hdf5 memory, shuffled, %d worker%s", w,
                         w == 1 ? "" : "s");
            if (only && !strstr(what, only))
                continue;
            o = options(path, w, budgets[b]);
            if (dl_source_hdf5(&s, &o) < 0) {
                fprintf(stderr, "%s\n", dl_error_message());
                continue;
            }
            run_source(what, s, &c, path, d.x, count * row, budgets[b] != 0);
            dl_source_destroy(s);
        }
    seq_gbs = 0;
    free(c.dst);
    if (only && !strstr("MLP step", only)) {
        dl_dataset_done(&d);
        return 0;
    }

    dl_backend *be = dl_backend_cpu(0);
    if (be) {
        mlp m;
        mlp_init(&m, be);
        for (int w = 0; w <= 2; w++)
            wait_share(path, w, &m);
        mlp_done(&m);
    }
    dl_dataset_done(&d);
    return 0;
}
