/* h5data.c - HDF5 batch source: one reader thread, assembly workers and a bounded ring of ready batches */
#include "engine/data/h5data.h"

#include <errno.h>
#include <hdf5.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/mem.h"
#include "engine/base/h5util.h"
#include "engine/base/rng.h"
#include "engine/data/gather.h"

/* Reads rows [0, count) of a [rows, ...] dataset into buf (the caller
 * holds the HDF5 lock). Returns DL_EIO when HDF5 fails. */
static int read_first_rows(hid_t set, hid_t memtype, size_t count, void *buf)
{
    int rc = DL_EIO;
    hid_t fspace = H5Dget_space(set), mspace = H5I_INVALID_HID;
    if (fspace < 0)
        return DL_EIO;
    int rank = H5Sget_simple_extent_ndims(fspace);
    hsize_t dims[H5S_MAX_RANK], start[H5S_MAX_RANK] = {0};
    if (rank >= 1 && rank <= H5S_MAX_RANK && H5Sget_simple_extent_dims(fspace, dims, NULL) >= 0) {
        dims[0] = count;
        if (H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, dims, NULL) >= 0 &&
            (mspace = H5Screate_simple(rank, dims, NULL)) >= 0 &&
            H5Dread(set, memtype, mspace, fspace, H5P_DEFAULT, buf) >= 0)
            rc = DL_OK;
    }
    if (mspace >= 0)
        H5Sclose(mspace);
    H5Sclose(fspace);
    return rc;
}

void dl_hdf5_options_init(dl_hdf5_options *o)
{
    memset(o, 0, sizeof *o);
    o->group = "/train";
    o->x_name = "x";
    o->y_name = "y";
    o->batch = 128;
    o->shuffle = 1;
    o->workers = -1;
    o->prefetch = 4;
}

/* --- the source --------------------------------------------------------------- */

enum { WIN_EMPTY, WIN_LOADING, WIN_READY };
enum { SLOT_FREE, SLOT_FILLING, SLOT_READY };
#define NWIN 2 /* streaming double buffer: a batch spans at most two windows */

/* A shuffle window: a run of whole chunks resident in memory. In memory
 * mode there is one window, the whole split, always ready. */
typedef struct window {
    int state;
    size_t w;        /* window index in the epoch plan */
    size_t n;        /* samples held */
    size_t gathered; /* samples copied out; the window is freed at n */
    uint8_t *x;      /* [n, x_row] */
    uint32_t *rows;  /* [n] global row of buffer row l (NULL: l itself) */
    uint32_t *perm;  /* [n] epoch order inside the window (NULL: in order) */
} window;

typedef struct slot {
    int state, n;
    void *x, *y;
} slot;

/* Slot states are written under mu; the consumer also watches its next
 * slot without it (h5_next), so the writes are atomic. */
static void slot_set(slot *sl, int state) { __atomic_store_n(&sl->state, state, __ATOMIC_RELEASE); }

/* How long the consumer watches a slot a worker is filling, yielding its
 * core meanwhile, before it sleeps on the condition variable. */
#define SPIN_S 50e-6

typedef struct h5_source {
    dl_source base;
    dl_hdf5_options opt;
    char path[1024], xpath[1024]; /* file and "/train/x" for messages */
    int streaming, nworkers, prefetch, batch;
    size_t count, x_row, y_row;
    size_t x_elem, x_rows_elems; /* element size, elements per sample */
    hid_t file, xset, xtype;     /* open while streaming */
    void *x_all;                 /* memory mode: [count, x_row] */
    void *y_all;                 /* always: [count, y_row] */
    int img_h, img_w, img_c;     /* augmentation geometry: planes of h x w */

    /* epoch plan */
    int epoch;
    size_t nbatches, end_pos; /* positions [0, end_pos) are used */
    size_t block_rows, nblocks, win_blocks, nwin;
    uint32_t *block_order; /* [nblocks] */
    size_t *win_start;     /* [nwin + 1] epoch positions */
    uint32_t *perm;        /* memory mode: [count] */
    window win[NWIN];
    size_t first_pos; /* where this epoch's pass started */
    size_t next_win;  /* reader: next window to load */

    /* pipeline, under mu */
    pthread_mutex_t mu;
    /* one condition per kind of waiter, so that a finished batch wakes
     * only the consumer and a released slot only the workers: with one
     * for all, every batch woke every thread (the reader too) to find
     * nothing to do, a futex call and a context switch each on a machine
     * with fewer cores than threads */
    pthread_cond_t ready; /* the consumer: a batch is ready */
    pthread_cond_t work;  /* workers: a slot is free or a window loaded */
    pthread_cond_t room;  /* the reader: a window is free */
    pthread_cond_t idle;  /* start_pipeline: no worker is assembling */
    slot *ring;
    size_t next_job, consumed, released;
    int holding, stop, err, running;
    int hold, busy; /* workers take no job while hold; busy: assembling now */
    char errmsg[1024];
    pthread_t *threads, reader;
    int reader_running;
    dl_backend *be;
    dl_loader_stats st;
} h5_source;

static const dl_source_ops h5_ops;

/* A 64-bit key derived from (seed, purpose, index) for the nested shuffles. */
static uint64_t derive_seed(uint64_t seed, uint64_t purpose, uint64_t index)
{
    dl_rng4 r = dl_rng_philox(seed, DL_STREAM_SHUFFLE + purpose, index, 0);
    return (uint64_t)r.v[0] << 32 | r.v[1];
}

static void wake_all(h5_source *s)
{
    pthread_cond_broadcast(&s->ready);
    pthread_cond_broadcast(&s->work);
    pthread_cond_broadcast(&s->room);
}

static void set_error(h5_source *s, int code)
{
    /* first error wins; the message comes from this thread's dl_error */
    if (!s->err) {
        s->err = code;
        snprintf(s->errmsg, sizeof s->errmsg, "%s", dl_error_message());
    }
    wake_all(s);
}

/* Reads window w of the current plan into win (HDF5 lock held per chunk).
 * Touches only win and the plan, so s->mu may or may not be held. */
static int read_window(h5_source *s, window *win, size_t w)
{
    int rc = DL_OK;
    size_t n = 0;
    hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
    size_t b0 = w * s->win_blocks, b1 = b0 + s->win_blocks;
    if (b1 > s->nblocks)
        b1 = s->nblocks;
    dl_hdf5_lock();
    DL_H5_CHECK(fspace = H5Dget_space(s->xset), "%s:%s: reading", s->path, s->xpath);
    for (size_t b = b0; b < b1; b++) {
        size_t start = (size_t)s->block_order[b] * s->block_rows;
        size_t rows = s->count - start < s->block_rows ? s->count - start : s->block_rows;
        hsize_t fstart[DL_MAX_DIMS + 1] = {start}, fcount[DL_MAX_DIMS + 1] = {rows};
        int rank = H5Sget_simple_extent_ndims(fspace);
        hsize_t dims[DL_MAX_DIMS + 1];
        H5Sget_simple_extent_dims(fspace, dims, NULL);
        for (int i = 1; i < rank; i++)
            fcount[i] = dims[i];
        DL_H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, fstart, NULL, fcount, NULL),
                    "%s:%s: selecting rows %zu..%zu", s->path, s->xpath, start, start + rows);
        /* the memory space has the selection's shape: a flat one sends
         * HDF5 down an element-by-element path, 100x slower */
        DL_H5_CHECK(mspace = H5Screate_simple(rank, fcount, NULL), "%s:%s", s->path, s->xpath);
        DL_H5_CHECK(H5Dread(s->xset, s->xtype, mspace, fspace, H5P_DEFAULT, win->x + n * s->x_row),
                    "%s:%s: reading rows %zu..%zu", s->path, s->xpath, start, start + rows - 1);
        H5Sclose(mspace);
        mspace = H5I_INVALID_HID;
        for (size_t r = 0; r < rows; r++)
            win->rows[n + r] = (uint32_t)(start + r);
        n += rows;
    }
fail:
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    dl_hdf5_unlock();
    if (rc < 0)
        return rc;
    DL_ASSERT(n == s->win_start[w + 1] - s->win_start[w]);
    if (s->opt.shuffle)
        dl_shuffle_permutation(win->perm, n, derive_seed(s->opt.seed, 2, w), s->epoch);
    else
        for (size_t i = 0; i < n; i++)
            win->perm[i] = (uint32_t)i;
    win->n = n;
    win->w = w;
    win->gathered =
        w == s->next_win && s->win_start[w] < s->first_pos ? s->first_pos - s->win_start[w] : 0;
    return DL_OK;
}

/* Window containing epoch position p. */
static size_t window_of(const h5_source *s, size_t p)
{
    size_t lo = 0, hi = s->nwin;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (s->win_start[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static window *find_window(h5_source *s, size_t w)
{
    for (int i = 0; i < NWIN; i++)
        if (s->win[i].state == WIN_READY && s->win[i].w == w)
            return &s->win[i];
    return NULL;
}

/* Reader thread: loads the plan's windows in order into free buffers. */
static void *reader_main(void *arg)
{
    h5_source *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop && !s->err && s->next_win < s->nwin && s->win_start[s->next_win] < s->end_pos) {
        window *free_win = NULL;
        for (int i = 0; i < NWIN && !free_win; i++)
            if (s->win[i].state == WIN_EMPTY)
                free_win = &s->win[i];
        if (!free_win) {
            pthread_cond_wait(&s->room, &s->mu);
            continue;
        }
        free_win->state = WIN_LOADING;
        size_t w = s->next_win;
        pthread_mutex_unlock(&s->mu);
        int rc = read_window(s, free_win, w);
        pthread_mutex_lock(&s->mu);
        if (rc < 0) {
            free_win->state = WIN_EMPTY;
            set_error(s, rc);
            break;
        }
        free_win->state = WIN_READY;
        s->next_win++;
        s->st.bytes_read += (double)free_win->n * (double)s->x_row;
        pthread_cond_broadcast(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Makes windows wa..wb resident (waiting for the reader, or reading in the
 * caller's thread when there are no workers). Called with mu held. */
static int acquire_windows(h5_source *s, size_t wa, size_t wb, window **a, window **b)
{
    for (;;) {
        if (s->err)
            return s->err;
        if (s->stop)
            return DL_ERR;
        *a = find_window(s, wa);
        *b = find_window(s, wb);
        if (*a && *b)
            return DL_OK;
        if (s->nworkers > 0) {
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        /* synchronous: the windows are used in order, so a free one exists */
        window *free_win = NULL;
        for (int i = 0; i < NWIN && !free_win; i++)
            if (s->win[i].state == WIN_EMPTY)
                free_win = &s->win[i];
        DL_ASSERT(free_win != NULL);
        size_t w = *a ? wb : wa;
        DL_ASSERT(w == s->next_win);
        int rc = read_window(s, free_win, w);
        if (rc < 0) {
            set_error(s, rc);
            return rc;
        }
        free_win->state = WIN_READY;
        s->next_win++;
        s->st.bytes_read += (double)free_win->n * (double)s->x_row;
    }
}

/* Copies one sample (x_row bytes) applying the seeded crop and flip for
 * epoch position p. Images are [planes, h, w] of x_elem-byte elements; the
 * padding is zero. */
static void copy_augmented(const h5_source *s, uint8_t *dst, const uint8_t *src, size_t p)
{
    int pad = s->opt.crop_pad, h = s->img_h, w = s->img_w;
    size_t es = s->x_elem;
    dl_rng4 r = dl_rng_philox(s->opt.seed, DL_STREAM_AUGMENT, (uint64_t)s->epoch, p);
    int dy = pad ? (int)(r.v[0] % (uint32_t)(2 * pad + 1)) - pad : 0;
    int dx = pad ? (int)(r.v[1] % (uint32_t)(2 * pad + 1)) - pad : 0;
    int flip = s->opt.hflip && (r.v[2] & 1);
    for (int c = 0; c < s->img_c; c++) {
        const uint8_t *sp = src + (size_t)c * h * w * es;
        uint8_t *dp = dst + (size_t)c * h * w * es;
        for (int i = 0; i < h; i++) {
            uint8_t *drow = dp + (size_t)i * w * es;
            int si = i + dy;
            if (si < 0 || si >= h) {
                memset(drow, 0, (size_t)w * es);
                continue;
            }
            const uint8_t *srow = sp + (size_t)si * w * es;
            if (!flip) {
                /* out[j] = in[j + dx] where in range */
                int j0 = dx < 0 ? -dx : 0, j1 = dx > 0 ? w - dx : w;
                memset(drow, 0, (size_t)j0 * es);
                memcpy(drow + (size_t)j0 * es, srow + (size_t)(j0 + dx) * es,
                       (size_t)(j1 - j0) * es);
                memset(drow + (size_t)j1 * es, 0, (size_t)(w - j1) * es);
            } else {
                /* out[j] = in[w - 1 - j + dx] */
                for (int j = 0; j < w; j++) {
                    int sj = w - 1 - j + dx;
                    if (sj < 0 || sj >= w)
                        memset(drow + (size_t)j * es, 0, es);
                    else
                        memcpy(drow + (size_t)j * es, srow + (size_t)sj * es, es);
                }
            }
        }
    }
}

/* Copies the n samples at epoch positions [p, p + n), all in window win
 * (number w), to dx and dy, with the crop and flip when asked. Rows up to
 * position reach (within win) are asked for ahead: the next call's. */
static void gather_run(const h5_source *s, uint8_t *dx, uint8_t *dy, const window *win, size_t w,
                       size_t p, size_t n, size_t reach)
{
    size_t o = p - s->win_start[w], xr = s->x_row;
    if (!win->perm) { /* in file order: memory mode without shuffling */
        DL_ASSERT(!win->rows);
        if (s->opt.crop_pad > 0 || s->opt.hflip)
            for (size_t i = 0; i < n; i++)
                copy_augmented(s, dx + i * xr, win->x + (o + i) * xr, p + i);
        else
            memcpy(dx, win->x + o * xr, n * xr);
        memcpy(dy, (const uint8_t *)s->y_all + o * s->y_row, n * s->y_row);
        return;
    }
    const uint32_t *idx = win->perm + o;
    if (s->opt.crop_pad > 0 || s->opt.hflip) {
        size_t ahead = dl_gather_ahead(xr), far = reach - p;
        for (size_t i = 0; i < ahead && i < far; i++)
            DL_PREFETCH_ROW(win->x + (size_t)idx[i] * xr, xr);
        for (size_t i = 0; i < n; i++) {
            if (i + ahead < far)
                DL_PREFETCH_ROW(win->x + (size_t)idx[i + ahead] * xr, xr);
            copy_augmented(s, dx + i * xr, win->x + (size_t)idx[i] * xr, p + i);
        }
    } else {
        dl_gather_rows(dx, win->x, xr, idx, n, reach - p);
    }
    dl_gather_labels(dy, s->y_all, s->y_row, idx, win->rows, n);
}

/* Assembles batch k into sl. Called with mu held; returns with mu held. */
static int assemble(h5_source *s, size_t k, slot *sl)
{
    size_t p0 = k * (size_t)s->batch;
    size_t n = s->count - p0 < (size_t)s->batch ? s->count - p0 : (size_t)s->batch;
    size_t end = p0 + n, wa = window_of(s, p0), wb = window_of(s, end - 1);
    window *a = NULL, *b = NULL;
    if (s->streaming) {
        int rc = acquire_windows(s, wa, wb, &a, &b);
        if (rc < 0)
            return rc;
    } else {
        a = b = &s->win[0];
    }
    pthread_mutex_unlock(&s->mu);

    /* Without workers the next batch is this thread's too, so the rows
     * asked for ahead go past this batch (within its window: the next one
     * may not be loaded yet) and the next call finds its first rows on the
     * way. A worker's next batch is another one's. */
    size_t reach = end + (s->nworkers == 0 ? dl_gather_ahead(s->x_row) : 0);
    if (reach > s->win_start[wb + 1])
        reach = s->win_start[wb + 1];
    size_t split = wa == wb ? end : s->win_start[wa + 1], na = split - p0;
    uint8_t *dx = sl->x, *dy = sl->y;
    gather_run(s, dx, dy, a, wa, p0, na, wa == wb ? reach : split);
    if (wb != wa)
        gather_run(s, dx + na * s->x_row, dy + na * s->y_row, b, wb, split, n - na, reach);
    sl->n = (int)n;

    pthread_mutex_lock(&s->mu);
    if (s->streaming) {
        a->gathered += na;
        if (b != a)
            b->gathered += n - na;
        int freed = 0;
        for (int i = 0; i < NWIN; i++)
            if (s->win[i].state == WIN_READY && s->win[i].gathered == s->win[i].n) {
                s->win[i].state = WIN_EMPTY;
                freed = 1;
            }
        if (freed)
            pthread_cond_signal(&s->room); /* only the reader waits for it */
    }
    return DL_OK;
}

static void *worker_main(void *arg)
{
    h5_source *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop && !s->err) {
        if (s->hold || s->next_job >= s->nbatches ||
            s->next_job >= s->released + (size_t)s->prefetch) {
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        size_t k = s->next_job++;
        slot *sl = &s->ring[k % (size_t)s->prefetch];
        slot_set(sl, SLOT_FILLING);
        s->busy++;
        int rc = assemble(s, k, sl);
        if (--s->busy == 0 && s->hold)
            pthread_cond_signal(&s->idle);
        if (rc < 0) {
            if (rc != DL_ERR || !s->stop)
                set_error(s, rc);
            break;
        }
        slot_set(sl, SLOT_READY);
        pthread_cond_signal(&s->ready); /* only the consumer waits for it */
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void stop_threads(h5_source *s)
{
    if (!s->running)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    wake_all(s);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nworkers; i++)
        pthread_join(s->threads[i], NULL);
    if (s->reader_running)
        pthread_join(s->reader, NULL);
    s->reader_running = 0;
    s->running = 0;
    s->stop = 0;
}

/* Epoch `epoch` from batch `skip`: positions, counters and the ring (no
 * thread may be assembling). */
static void reset_positions(h5_source *s, int epoch, size_t skip)
{
    s->epoch = epoch;
    s->first_pos = skip * (size_t)s->batch;
    if (s->first_pos > s->end_pos)
        s->first_pos = s->end_pos;
    s->next_job = s->consumed = s->released = skip;
    s->holding = 0;
    for (int i = 0; i < s->prefetch; i++)
        slot_set(&s->ring[i], SLOT_FREE);
}

/* In memory, the workers outlive the epoch: stopping and starting them,
 * with the shuffle, took 615 us of every 3.5 ms epoch of Fashion-MNIST's
 * 469 batches on the Xeon. Held off new jobs, the ones assembling
 * finished, the epoch is laid out under the lock while they wait, and
 * they go on. Returns 1 when done so, 0 when the threads must restart
 * (streaming, none running, or one stopped on an error). */
static int restart_in_place(h5_source *s, int epoch, size_t skip)
{
    if (s->streaming || !s->running)
        return 0;
    pthread_mutex_lock(&s->mu);
    if (s->err) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    s->hold = 1;
    while (s->busy > 0)
        pthread_cond_wait(&s->idle, &s->mu);
    reset_positions(s, epoch, skip);
    if (s->opt.shuffle)
        dl_shuffle_permutation(s->perm, s->count, s->opt.seed, epoch);
    s->hold = 0;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    return 1;
}

/* Lays out epoch `epoch` from batch `skip` on and starts the threads. */
static int start_pipeline(h5_source *s, int epoch, size_t skip)
{
    if (restart_in_place(s, epoch, skip))
        return DL_OK;
    stop_threads(s);
    s->err = 0;
    s->errmsg[0] = 0;
    reset_positions(s, epoch, skip);
    if (s->streaming) {
        if (s->opt.shuffle)
            dl_shuffle_permutation(s->block_order, s->nblocks, derive_seed(s->opt.seed, 1, 0),
                                   epoch);
        else
            for (size_t b = 0; b < s->nblocks; b++)
                s->block_order[b] = (uint32_t)b;
        s->win_start[0] = 0;
        for (size_t w = 0; w < s->nwin; w++) {
            size_t n = 0;
            for (size_t b = w * s->win_blocks; b < (w + 1) * s->win_blocks && b < s->nblocks; b++)
                n += s->count - (size_t)s->block_order[b] * s->block_rows < s->block_rows
                         ? s->count - (size_t)s->block_order[b] * s->block_rows
                         : s->block_rows;
            s->win_start[w + 1] = s->win_start[w] + n;
        }
        for (int i = 0; i < NWIN; i++)
            s->win[i].state = WIN_EMPTY;
        s->next_win = window_of(s, s->first_pos < s->count ? s->first_pos : s->count - 1);
    } else if (s->opt.shuffle) {
        dl_shuffle_permutation(s->perm, s->count, s->opt.seed, epoch);
    }
    if (s->nworkers == 0 || skip >= s->nbatches)
        return DL_OK;
    if (s->streaming) {
        if (pthread_create(&s->reader, NULL, reader_main, s) != 0)
            return dl_error(DL_ERR, "%s: cannot start the reader thread", s->base.name);
        s->reader_running = 1;
    }
    s->running = 1;
    for (int i = 0; i < s->nworkers; i++) {
        if (pthread_create(&s->threads[i], NULL, worker_main, s) != 0) {
            /* join the ones started; the rest never ran */
            int started = i;
            s->nworkers = started;
            stop_threads(s);
            return dl_error(DL_ERR, "%s: cannot start loader worker %d", s->base.name, i);
        }
    }
    return DL_OK;
}

static size_t h5_batches(dl_source *src) { return ((h5_source *)src)->nbatches; }

static int h5_start_epoch(dl_source *src, int epoch, size_t skip)
{
    h5_source *s = (h5_source *)src;
    if (epoch < 0 || skip > s->nbatches)
        return dl_error(DL_EINVAL, "%s: cannot resume at epoch %d batch %zu (%zu per epoch)",
                        src->name, epoch, skip, s->nbatches);
    return start_pipeline(s, epoch, skip);
}

static int h5_next(dl_source *src, dl_batch *out)
{
    h5_source *s = (h5_source *)src;
    double t0 = dl_clock_mono_s();
    pthread_mutex_lock(&s->mu);
    if (s->holding) {
        slot_set(&s->ring[(s->consumed - 1) % (size_t)s->prefetch], SLOT_FREE);
        s->released++;
        s->holding = 0;
        pthread_cond_broadcast(&s->work);
    }
    if (s->consumed >= s->nbatches) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    size_t k = s->consumed;
    slot *sl = &s->ring[k % (size_t)s->prefetch];
    int rc = DL_OK;
    if (s->nworkers == 0) {
        if (s->err)
            rc = s->err;
        else if ((rc = assemble(s, k, sl)) == DL_OK)
            slot_set(sl, SLOT_READY);
    } else {
        while (sl->state != SLOT_READY && !s->err) {
            if (s->next_job < s->nbatches && s->next_job < s->released + (size_t)s->prefetch) {
                /* batches are waiting for a worker while this one is not
                 * ready: assemble the next of them here rather than sit
                 * idle (the same bytes: a batch depends only on its index).
                 * When the workers keep up, the ring is full and this never
                 * runs. */
                size_t j = s->next_job++;
                slot *o = &s->ring[j % (size_t)s->prefetch];
                slot_set(o, SLOT_FILLING);
                if ((rc = assemble(s, j, o)) < 0) {
                    if (!s->err)
                        set_error(s, rc);
                    break;
                }
                slot_set(o, SLOT_READY);
                continue;
            }
            /* a worker is on it and done within a batch's time: sooner
             * than a sleep and a wake-up (tens of microseconds each on a
             * busy machine), so watch the slot for a while first */
            pthread_mutex_unlock(&s->mu);
            double until = dl_clock_mono_s() + SPIN_S;
            while (__atomic_load_n(&sl->state, __ATOMIC_ACQUIRE) != SLOT_READY &&
                   dl_clock_mono_s() < until)
                sched_yield(); /* the worker may be waiting for this core */
            pthread_mutex_lock(&s->mu);
            if (sl->state != SLOT_READY && !s->err)
                pthread_cond_wait(&s->ready, &s->mu);
        }
        if (sl->state != SLOT_READY)
            rc = s->err;
    }
    if (rc < 0) {
        pthread_mutex_unlock(&s->mu);
        return dl_error(rc, "%s", s->errmsg[0] ? s->errmsg : dl_error_message());
    }
    s->consumed++;
    s->holding = 1;
    out->n = sl->n;
    out->x = sl->x;
    out->y = sl->y;
    out->wait_s = dl_clock_mono_s() - t0;
    s->st.wait_s += out->wait_s;
    s->st.batches++;
    pthread_mutex_unlock(&s->mu);
    return 1;
}

static void h5_stats(dl_source *src, dl_loader_stats *out)
{
    h5_source *s = (h5_source *)src;
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    int fill = 0;
    for (int i = 0; i < s->prefetch; i++)
        fill += s->ring[i].state == SLOT_READY;
    out->queue_fill = fill - s->holding;
    out->queue_size = s->prefetch;
    pthread_mutex_unlock(&s->mu);
}

static void free_ring(h5_source *s)
{
    if (!s->ring)
        return;
    for (int i = 0; i < s->prefetch; i++) {
        if (s->be) {
            s->be->ops->host_free(s->be, s->ring[i].x);
            s->be->ops->host_free(s->be, s->ring[i].y);
        } else {
            free(s->ring[i].x);
            free(s->ring[i].y);
        }
        s->ring[i].x = s->ring[i].y = NULL;
    }
}

static int alloc_ring(h5_source *s, dl_backend *be)
{
    size_t xb = (size_t)s->batch * s->x_row, yb = (size_t)s->batch * s->y_row;
    s->be = be;
    for (int i = 0; i < s->prefetch; i++) {
        s->ring[i].x = be ? be->ops->host_alloc(be, xb) : malloc(xb);
        s->ring[i].y = be ? be->ops->host_alloc(be, yb) : malloc(yb);
        if (!s->ring[i].x || !s->ring[i].y) {
            /* the backend's message says how much memory there is */
            char why[400];
            snprintf(why, sizeof why, "%s", be ? dl_error_message() : "malloc failed");
            return dl_error(DL_ENOMEM, "%s: %d batch buffers of %zu bytes: %s", s->base.name,
                            s->prefetch, xb + yb, why);
        }
    }
    return DL_OK;
}

/* Buffers move to be; the pipeline restarts at the current cursor. */
static int h5_retarget(dl_source *src, dl_backend *be)
{
    h5_source *s = (h5_source *)src;
    stop_threads(s);
    size_t cursor = s->consumed;
    free_ring(s);
    int rc = alloc_ring(s, be);
    if (rc < 0) {
        free_ring(s);
        s->be = NULL;
        DL_TRY(alloc_ring(s, NULL));
        start_pipeline(s, s->epoch, cursor);
        return rc;
    }
    return start_pipeline(s, s->epoch, cursor);
}

static void h5_destroy(dl_source *src)
{
    h5_source *s = (h5_source *)src;
    if (!s)
        return;
    stop_threads(s);
    free_ring(s);
    free(s->ring);
    free(s->threads);
    if (s->streaming)
        for (int i = 0; i < NWIN; i++) {
            free(s->win[i].x);
            free(s->win[i].rows);
            free(s->win[i].perm);
        }
    free(s->x_all);
    free(s->y_all);
    free(s->perm);
    free(s->block_order);
    free(s->win_start);
    if (s->xset > 0 || s->file > 0) {
        dl_hdf5_lock();
        if (s->xset > 0)
            H5Dclose(s->xset);
        if (s->file > 0)
            H5Fclose(s->file);
        dl_hdf5_unlock();
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->ready);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->room);
    pthread_cond_destroy(&s->idle);
    free(s);
}

static const dl_source_ops h5_ops = {
    .start_epoch = h5_start_epoch,
    .next = h5_next,
    .batches = h5_batches,
    .stats = h5_stats,
    .retarget = h5_retarget,
    .destroy = h5_destroy,
};

const char *dl_source_hdf5_mode(const dl_source *src)
{
    if (!src || src->ops != &h5_ops)
        return NULL;
    return ((const h5_source *)src)->streaming ? "streaming" : "memory";
}

/* --- opening ------------------------------------------------------------------ */

/* Checks that every prefix of an absolute path names a link. */
static int path_exists(hid_t file, const char *path)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (p > buf + 1 && H5Lexists(file, buf, H5P_DEFAULT) <= 0)
                return 0;
            *p = c;
            if (!c)
                return 1;
        }
    }
}

/* Reads a float attribute array of up to max values (0 when absent). */
static int read_float_attr(hid_t obj, const char *name, float *v, int max)
{
    int n = dl_h5_attr_read(obj, name, H5T_NATIVE_FLOAT, (size_t)max, v);
    return n > 0 ? n : 0;
}

static size_t default_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return (size_t)1 << 30;
    return (size_t)pages * (size_t)page / 2;
}

/* Which in-memory dtype an HDF5 x type reads as; -1 when unsupported. */
static int x_dtype_of(hid_t t)
{
    H5T_class_t c = H5Tget_class(t);
    size_t size = H5Tget_size(t);
    if (c == H5T_INTEGER && size == 1 && H5Tget_sign(t) == H5T_SGN_NONE)
        return DL_U8;
    if (c == H5T_INTEGER && size == 4 && H5Tget_sign(t) == H5T_SGN_2)
        return DL_I32;
    if (c == H5T_FLOAT && size == 4)
        return DL_F32;
    return -1;
}

static const char *h5_type_text(hid_t t, char *buf, size_t size)
{
    H5T_class_t c = H5Tget_class(t);
    const char *kind = c == H5T_INTEGER    ? (H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "i")
                       : c == H5T_FLOAT    ? "f"
                       : c == H5T_STRING   ? "string"
                       : c == H5T_COMPOUND ? "compound"
                                           : "other";
    if (c == H5T_INTEGER || c == H5T_FLOAT)
        snprintf(buf, size, "%s%zu", kind, H5Tget_size(t) * 8);
    else
        snprintf(buf, size, "%s", kind);
    return buf;
}

/* What open_split holds open while it reads a split's metadata. */
typedef struct split_objs {
    hid_t grp, yset, xsp, ysp, xft, yft, dcpl, dapl;
    char gpath[512], ypath[1024];
    int xrank, yrank;
    hsize_t xd[H5S_MAX_RANK], yd[H5S_MAX_RANK];
} split_objs;

/* Opens the file, the group and both datasets with their spaces and types. */
static int open_objects(h5_source *s, const dl_hdf5_options *o, split_objs *c)
{
    const char *path = o->path;
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return dl_error(DL_EINVAL, "%s: not an HDF5 file (truncated or corrupt?)", path);
    }
    DL_H5_TRY(DL_EIO, s->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT),
              "%s: cannot open (truncated or corrupt file?)", path);
    if (c->gpath[0] != '/')
        return dl_error(DL_EINVAL, "%s: group \"%s\" must be an absolute path like \"/train\"",
                        path, c->gpath);
    if (!path_exists(s->file, c->gpath))
        return dl_error(DL_EINVAL, "%s: no group %s", path, c->gpath);
    DL_H5_TRY(DL_EIO, c->grp = H5Gopen2(s->file, c->gpath, H5P_DEFAULT), "%s: %s is not a group",
              path, c->gpath);
    for (int i = 0; i < 2; i++) {
        const char *p = i ? c->ypath : s->xpath;
        if (!path_exists(s->file, p))
            return dl_error(DL_EINVAL, "%s: no dataset %s", path, p);
    }
    /* x is read in whole chunks, each once per epoch: HDF5's chunk cache
     * (1 MiB by default) would only add a copy of each chunk on the way
     * (1.2x the read time), so x is opened without one */
    DL_H5_TRY(DL_EIO, c->dapl = H5Pcreate(H5P_DATASET_ACCESS), "%s:%s", path, s->xpath);
    DL_H5_TRY(DL_EIO, H5Pset_chunk_cache(c->dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0, 1.0), "%s:%s",
              path, s->xpath);
    DL_H5_TRY(DL_EIO, s->xset = H5Dopen2(s->file, s->xpath, c->dapl), "%s: %s is not a dataset",
              path, s->xpath);
    DL_H5_TRY(DL_EIO, c->yset = H5Dopen2(s->file, c->ypath, H5P_DEFAULT), "%s: %s is not a dataset",
              path, c->ypath);
    DL_H5_TRY(DL_EIO, c->xsp = H5Dget_space(s->xset), "%s:%s", path, s->xpath);
    DL_H5_TRY(DL_EIO, c->ysp = H5Dget_space(c->yset), "%s:%s", path, c->ypath);
    DL_H5_TRY(DL_EIO, c->xft = H5Dget_type(s->xset), "%s:%s", path, s->xpath);
    DL_H5_TRY(DL_EIO, c->yft = H5Dget_type(c->yset), "%s:%s", path, c->ypath);
    return DL_OK;
}

/* x: [count, sample...] of u8, i32 or f32; y: [count] or [count, width]
 * of integer labels or f32 targets. */
static int check_layout(h5_source *s, const dl_hdf5_options *o, split_objs *c)
{
    const char *path = o->path, *ypath = c->ypath;
    char tbuf[32];
    c->xrank = H5Sget_simple_extent_ndims(c->xsp);
    c->yrank = H5Sget_simple_extent_ndims(c->ysp);
    if (c->xrank < 2 || c->xrank > DL_MAX_DIMS + 1)
        return dl_error(DL_EINVAL,
                        "%s:%s: %d dimensions, expected [count, sample...] with 1 to "
                        "%d sample dimensions",
                        path, s->xpath, c->xrank, DL_MAX_DIMS);
    if (c->yrank < 1 || c->yrank > 2)
        return dl_error(DL_EINVAL, "%s:%s: %d dimensions, expected [count] or [count, width]", path,
                        ypath, c->yrank);
    H5Sget_simple_extent_dims(c->xsp, c->xd, NULL);
    H5Sget_simple_extent_dims(c->ysp, c->yd, NULL);
    if (x_dtype_of(c->xft) < 0)
        return dl_error(DL_EINVAL, "%s:%s: unsupported dtype %s, expected u8, f32 or i32", path,
                        s->xpath, h5_type_text(c->xft, tbuf, sizeof tbuf));
    H5T_class_t yc = H5Tget_class(c->yft);
    if (yc != H5T_INTEGER && yc != H5T_FLOAT)
        return dl_error(DL_EINVAL,
                        "%s:%s: unsupported dtype %s, expected integer labels or f32 "
                        "targets",
                        path, ypath, h5_type_text(c->yft, tbuf, sizeof tbuf));
    if (yc == H5T_INTEGER && c->yrank == 2 && c->yd[1] != 1)
        return dl_error(DL_EINVAL,
                        "%s:%s: integer labels of width %llu, expected one label "
                        "per sample",
                        path, ypath, (unsigned long long)c->yd[1]);
    if (c->xd[0] != c->yd[0])
        return dl_error(DL_EINVAL, "%s: %s has %llu samples but %s has %llu", path, s->xpath,
                        (unsigned long long)c->xd[0], ypath, (unsigned long long)c->yd[0]);
    if (c->xd[0] == 0 || c->xd[0] > UINT32_MAX)
        return dl_error(DL_EINVAL, "%s:%s: %llu samples, expected 1 to %u", path, s->xpath,
                        (unsigned long long)c->xd[0], UINT32_MAX);
    return DL_OK;
}

/* Fills info and the row sizes from the checked layout; the sample must
 * fit o->expect_sample when one is given. */
static int set_info(h5_source *s, const dl_hdf5_options *o, const split_objs *c)
{
    dl_data_info *info = &s->base.info;
    int xdt = x_dtype_of(c->xft);
    info->sample.ndim = c->xrank - 1;
    for (int i = 1; i < c->xrank; i++)
        info->sample.dim[i - 1] = (int64_t)c->xd[i];
    info->x_dtype = (dl_dtype)xdt;
    info->y_dtype = H5Tget_class(c->yft) == H5T_INTEGER ? DL_I32 : DL_F32;
    info->y_width = c->yrank == 2 ? (int)c->yd[1] : 1;
    info->count = o->limit > 0 && o->limit < c->xd[0] ? o->limit : c->xd[0];
    s->count = info->count;
    s->x_elem = dl_dtype_size(info->x_dtype);
    s->x_rows_elems = (size_t)dl_shape_numel(&info->sample);
    s->x_row = s->x_rows_elems * s->x_elem;
    s->y_row = (size_t)info->y_width * 4;
    s->xtype = xdt == DL_U8    ? H5T_NATIVE_UINT8
               : xdt == DL_I32 ? H5T_NATIVE_INT32
                               : H5T_NATIVE_FLOAT;
    if (o->expect_sample.ndim > 0) {
        const dl_shape *e = &o->expect_sample;
        int fits = dl_shape_numel(e) == dl_shape_numel(&info->sample);
        if (fits && e->ndim > 1) {
            fits = e->ndim == info->sample.ndim;
            for (int i = 0; fits && i < e->ndim; i++)
                fits = e->dim[i] == info->sample.dim[i];
        }
        if (!fits) {
            char a[64], b[64];
            return dl_error(DL_EINVAL,
                            "%s:%s: samples of shape %s do not fit the model's "
                            "input %s",
                            o->path, s->xpath, dl_shape_format(&info->sample, a, sizeof a),
                            dl_shape_format(e, b, sizeof b));
        }
    }
    return DL_OK;
}

/* The group's attributes: scale, classes, and mean/std when normalising. */
static int read_group_attrs(h5_source *s, const dl_hdf5_options *o, const split_objs *c)
{
    const char *path = o->path, *gpath = c->gpath;
    dl_data_info *info = &s->base.info;
    float v[DL_MAX_CHANNELS];
    info->scale = o->scale > 0 ? o->scale : read_float_attr(c->grp, "scale", v, 1) ? v[0] : 1.0f;
    if (read_float_attr(c->grp, "classes", v, 1) && v[0] >= 1)
        info->classes = (int)v[0];
    if (!o->normalize)
        return DL_OK;
    int ch = o->channels;
    if (ch > 0) {
        memcpy(info->mean, o->mean, sizeof(float) * (size_t)ch);
        memcpy(info->std, o->std, sizeof(float) * (size_t)ch);
    } else {
        ch = read_float_attr(c->grp, "mean", info->mean, DL_MAX_CHANNELS);
        if (!ch || read_float_attr(c->grp, "std", info->std, DL_MAX_CHANNELS) != ch)
            return dl_error(DL_EINVAL,
                            "%s:%s: normalisation asked but no mean/std given and "
                            "no \"mean\" and \"std\" attributes of equal length",
                            path, gpath);
    }
    int planes = info->sample.ndim >= 3 ? (int)info->sample.dim[0] : 1;
    if (ch != 1 && ch != planes)
        return dl_error(DL_EINVAL, "%s:%s: %d normalisation channels for samples with %d", path,
                        s->xpath, ch, planes);
    for (int i = 0; i < ch; i++)
        if (!(info->std[i] > 0))
            return dl_error(DL_EINVAL, "%s:%s: std[%d] = %g, expected > 0", path, gpath, i,
                            (double)info->std[i]);
    info->channels = ch;
    return DL_OK;
}

/* The chunk layout decides the streaming block. */
static int read_block_rows(h5_source *s, const dl_hdf5_options *o, split_objs *c)
{
    DL_H5_TRY(DL_EIO, c->dcpl = H5Dget_create_plist(s->xset), "%s:%s", o->path, s->xpath);
    hsize_t chunk[H5S_MAX_RANK];
    if (H5Pget_layout(c->dcpl) == H5D_CHUNKED && H5Pget_chunk(c->dcpl, H5S_MAX_RANK, chunk) > 0)
        s->block_rows = chunk[0];
    else
        s->block_rows = ((size_t)1 << 20) / s->x_row;
    if (s->block_rows == 0)
        s->block_rows = 1;
    return DL_OK;
}

/* Labels: always in memory, checked against the classes. */
static int read_labels(h5_source *s, const dl_hdf5_options *o, const split_objs *c)
{
    const char *path = o->path, *ypath = c->ypath;
    dl_data_info *info = &s->base.info;
    s->y_all = dl_mem_alloc_big(s->count * s->y_row);
    if (!s->y_all)
        return dl_error(DL_ENOMEM, "%s:%s: out of memory for %zu labels", path, ypath, s->count);
    if (read_first_rows(c->yset, info->y_dtype == DL_I32 ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT,
                        s->count, s->y_all) < 0) {
        char e[256];
        return dl_error(DL_EIO, "%s:%s: reading: %s", path, ypath, dl_hdf5_error_text(e, sizeof e));
    }
    s->st.bytes_read += (double)(s->count * s->y_row);
    if (info->y_dtype != DL_I32)
        return DL_OK;
    const int32_t *y = s->y_all;
    int maxlab = -1;
    for (size_t i = 0; i < s->count; i++) {
        if (y[i] < 0 || (o->classes > 0 && y[i] >= o->classes) ||
            (o->classes <= 0 && info->classes > 0 && y[i] >= info->classes)) {
            int lim = o->classes > 0 ? o->classes : info->classes;
            return dl_error(DL_EINVAL, "%s:%s: label %d at row %zu, expected 0..%d", path, ypath,
                            y[i], i, lim > 0 ? lim - 1 : INT32_MAX);
        }
        if (y[i] > maxlab)
            maxlab = y[i];
    }
    if (o->classes > 0)
        info->classes = o->classes;
    else if (info->classes <= 0)
        info->classes = maxlab + 1;
    return DL_OK;
}

/* In memory when asked or when x and y fit the budget: x read whole. */
static int read_x_if_resident(h5_source *s, const dl_hdf5_options *o)
{
    size_t budget = o->memory_budget ? o->memory_budget : default_budget();
    size_t all = s->count * (s->x_row + s->y_row);
    s->streaming = o->mode == DL_HDF5_STREAM || (o->mode == DL_HDF5_AUTO && all > budget);
    if (s->streaming)
        return DL_OK;
    s->x_all = dl_mem_alloc_big(s->count * s->x_row);
    if (!s->x_all)
        return dl_error(DL_ENOMEM, "%s:%s: out of memory for %zu bytes", o->path, s->xpath,
                        s->count * s->x_row);
    if (read_first_rows(s->xset, s->xtype, s->count, s->x_all) < 0) {
        char e[256];
        return dl_error(DL_EIO, "%s:%s: reading: %s", o->path, s->xpath,
                        dl_hdf5_error_text(e, sizeof e));
    }
    s->st.bytes_read += (double)(s->count * s->x_row);
    return DL_OK;
}

static void close_objects(h5_source *s, split_objs *c, int rc)
{
    if (c->dcpl >= 0)
        H5Pclose(c->dcpl);
    if (c->dapl >= 0)
        H5Pclose(c->dapl);
    if (c->xft >= 0)
        H5Tclose(c->xft);
    if (c->yft >= 0)
        H5Tclose(c->yft);
    if (c->xsp >= 0)
        H5Sclose(c->xsp);
    if (c->ysp >= 0)
        H5Sclose(c->ysp);
    if (c->yset >= 0)
        H5Dclose(c->yset);
    if (c->grp >= 0)
        H5Gclose(c->grp);
    /* streaming keeps the file and x open for the reader */
    if (!s->streaming || rc < 0) {
        if (s->xset >= 0)
            H5Dclose(s->xset);
        if (s->file >= 0)
            H5Fclose(s->file);
        s->xset = s->file = H5I_INVALID_HID;
    }
}

/* Opens o->path:o->group, checks it, reads its labels (and x in memory
 * mode). The file stays open only when streaming. */
static int open_split(h5_source *s, const dl_hdf5_options *o)
{
    split_objs c = {.grp = H5I_INVALID_HID,
                    .yset = H5I_INVALID_HID,
                    .xsp = H5I_INVALID_HID,
                    .ysp = H5I_INVALID_HID,
                    .xft = H5I_INVALID_HID,
                    .yft = H5I_INVALID_HID,
                    .dcpl = H5I_INVALID_HID,
                    .dapl = H5I_INVALID_HID};
    const char *path = o->path;
    snprintf(c.gpath, sizeof c.gpath, "%s", o->group && *o->group ? o->group : "/");
    const char *sep = c.gpath[strlen(c.gpath) - 1] == '/' ? "" : "/";
    snprintf(s->xpath, sizeof s->xpath, "%s%s%s", c.gpath, sep, o->x_name);
    snprintf(c.ypath, sizeof c.ypath, "%s%s%s", c.gpath, sep, o->y_name);
    snprintf(s->path, sizeof s->path, "%s", path);
    snprintf(s->base.name, sizeof s->base.name, "%.180s:%.70s", path, c.gpath);

    if (access(path, R_OK) != 0)
        return dl_error(errno == ENOENT ? DL_EINVAL : DL_EIO, "%s: %s", path,
                        errno == ENOENT ? "no such file" : strerror(errno));
    dl_hdf5_lock();
    int rc = open_objects(s, o, &c);
    if (rc == DL_OK)
        rc = check_layout(s, o, &c);
    if (rc == DL_OK)
        rc = set_info(s, o, &c);
    if (rc == DL_OK)
        rc = read_group_attrs(s, o, &c);
    if (rc == DL_OK)
        rc = read_block_rows(s, o, &c);
    if (rc == DL_OK)
        rc = read_labels(s, o, &c);
    if (rc == DL_OK)
        rc = read_x_if_resident(s, o);
    close_objects(s, &c, rc);
    dl_hdf5_unlock();
    return rc;
}

/* Sizes the streaming windows within the budget and allocates them. */
static int plan_streaming(h5_source *s, const dl_hdf5_options *o)
{
    size_t budget = o->memory_budget ? o->memory_budget : default_budget();
    /* o->prefetch, not the effective one: the window size, and so the
     * order, must not depend on the number of workers */
    size_t fixed =
        s->count * s->y_row + (size_t)o->prefetch * (size_t)s->batch * (s->x_row + s->y_row);
    size_t per_sample = s->x_row + 2 * sizeof(uint32_t);
    s->nblocks = (s->count + s->block_rows - 1) / s->block_rows;
    size_t min_blocks = ((size_t)s->batch + s->block_rows - 1) / s->block_rows;
    size_t blocks;
    if (o->shuffle_window > 0)
        blocks = (o->shuffle_window + s->block_rows - 1) / s->block_rows;
    else
        blocks = budget > fixed ? (budget - fixed) / (NWIN * per_sample * s->block_rows) : 0;
    if (blocks > (s->nblocks + 1) / 2)
        blocks = (s->nblocks + 1) / 2;
    if (blocks < min_blocks)
        blocks = min_blocks;
    size_t need = fixed + NWIN * blocks * s->block_rows * per_sample;
    if (need > budget)
        return dl_error(DL_EINVAL,
                        "%s:%s: memory budget of %zu bytes is too small to stream "
                        "it: needs at least %zu (labels, %d batches, two windows of %zu rows)",
                        s->path, s->xpath, budget, need, s->prefetch, blocks * s->block_rows);
    s->win_blocks = blocks;
    s->nwin = (s->nblocks + blocks - 1) / blocks;
    s->block_order = malloc(s->nblocks * sizeof *s->block_order);
    s->win_start = malloc((s->nwin + 1) * sizeof *s->win_start);
    if (!s->block_order || !s->win_start)
        return dl_error(DL_ENOMEM, "%s: out of memory for the streaming plan", s->base.name);
    size_t rows = blocks * s->block_rows;
    for (int i = 0; i < NWIN; i++) {
        /* on huge pages: rows are picked at random from the window, and
         * with 4 KiB pages nearly each one would miss the TLB */
        s->win[i].x = dl_mem_alloc_big(rows * s->x_row);
        s->win[i].rows = malloc(rows * sizeof(uint32_t));
        s->win[i].perm = malloc(rows * sizeof(uint32_t));
        if (!s->win[i].x || !s->win[i].rows || !s->win[i].perm)
            return dl_error(DL_ENOMEM, "%s: out of memory for shuffle windows of %zu rows",
                            s->base.name, rows);
        /* the pages now, not in the first epoch's reads */
        memset(s->win[i].x, 0, rows * s->x_row);
    }
    return DL_OK;
}

/* Sets up the single always-ready window of memory mode. */
static int plan_memory(h5_source *s)
{
    s->nwin = 1;
    s->nblocks = 1;
    s->win_start = malloc(2 * sizeof *s->win_start);
    if (!s->win_start)
        return dl_error(DL_ENOMEM, "%s: out of memory", s->base.name);
    s->win_start[0] = 0;
    s->win_start[1] = s->count;
    if (s->opt.shuffle && !(s->perm = malloc(s->count * sizeof *s->perm)))
        return dl_error(DL_ENOMEM, "%s: out of memory for the shuffle order", s->base.name);
    window *w = &s->win[0];
    w->state = WIN_READY;
    w->n = s->count;
    w->x = s->x_all;
    w->rows = NULL;
    w->perm = s->perm;
    return DL_OK;
}

int dl_source_hdf5(dl_source **out, const dl_hdf5_options *o)
{
    *out = NULL;
    if (!o->path || !o->x_name || !o->y_name)
        return dl_error(DL_EINVAL, "HDF5 source: path and dataset names are required");
    if (o->batch <= 0)
        return dl_error(DL_EINVAL, "%s: batch size %d, expected at least 1", o->path, o->batch);
    if (o->prefetch < 1)
        return dl_error(DL_EINVAL, "%s: prefetch %d, expected at least 1", o->path, o->prefetch);
    if (o->crop_pad < 0 || o->channels < 0 || o->channels > DL_MAX_CHANNELS)
        return dl_error(DL_EINVAL, "%s: crop padding %d / %d channels out of range", o->path,
                        o->crop_pad, o->channels);
    h5_source *s = calloc(1, sizeof *s);
    if (!s)
        return dl_error(DL_ENOMEM, "out of memory");
    s->base.ops = &h5_ops;
    s->opt = *o;
    s->opt.path = s->path;
    s->opt.group = NULL; /* the copies live in base.name and xpath */
    s->file = s->xset = H5I_INVALID_HID;
    s->batch = o->batch;
    s->prefetch = o->prefetch;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->ready, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->room, NULL);
    pthread_cond_init(&s->idle, NULL);
    int rc = open_split(s, o);
    if (rc < 0)
        goto fail;
    const dl_data_info *info = &s->base.info;
    if (o->crop_pad > 0 || o->hflip) {
        if (info->sample.ndim < 2) {
            rc = dl_error(DL_EINVAL,
                          "%s:%s: augmentation needs image samples [.., H, W], "
                          "found %d dimension",
                          s->path, s->xpath, info->sample.ndim);
            goto fail;
        }
        s->img_h = (int)info->sample.dim[info->sample.ndim - 2];
        s->img_w = (int)info->sample.dim[info->sample.ndim - 1];
        s->img_c = (int)(s->x_rows_elems / ((size_t)s->img_h * (size_t)s->img_w));
        if (o->crop_pad >= s->img_h || o->crop_pad >= s->img_w) {
            rc = dl_error(DL_EINVAL, "%s:%s: crop padding %d for %dx%d images", s->path, s->xpath,
                          o->crop_pad, s->img_h, s->img_w);
            goto fail;
        }
    }
    s->nbatches = o->drop_last ? s->count / (size_t)s->batch
                               : (s->count + (size_t)s->batch - 1) / (size_t)s->batch;
    s->end_pos = o->drop_last ? s->nbatches * (size_t)s->batch : s->count;
    if (s->nbatches == 0) {
        rc = dl_error(DL_EINVAL, "%s: %zu samples make no full batch of %d", s->base.name, s->count,
                      s->batch);
        goto fail;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    s->nworkers = o->workers >= 0 ? o->workers : (int)(cores > 0 ? cores : 1);
    if (s->nworkers > 64)
        s->nworkers = 64;
    if (s->nworkers == 0)
        s->prefetch = 1;
    s->ring = calloc((size_t)s->prefetch, sizeof *s->ring);
    s->threads = calloc((size_t)s->nworkers + 1, sizeof *s->threads);
    if (!s->ring || !s->threads) {
        rc = dl_error(DL_ENOMEM, "out of memory");
        goto fail;
    }
    rc = s->streaming ? plan_streaming(s, o) : plan_memory(s);
    if (rc < 0)
        goto fail;
    if ((rc = alloc_ring(s, o->be)) < 0 || (rc = start_pipeline(s, 0, 0)) < 0)
        goto fail;
    *out = &s->base;
    return DL_OK;
fail:
    h5_destroy(&s->base);
    return rc;
}
