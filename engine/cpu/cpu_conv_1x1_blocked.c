/* cpu_conv_1x1_blocked.c - the filter gradient and the strided data gradient of 1x1 convolutions on activations in 16-channel blocks (AVX-512)
 *
 * With x [n, C/16, h*w, 16] and dy [n, K/16, p*q, 16] (nChw16c) a 1x1
 * convolution's gradients are matrix products with the channel block as
 * the vector:
 *   filter  dW [k, c] += sum over images and pixels of dy[k] * xs[c]
 *           (xs: x at the strided pixels)
 *   data    dx[c] at the strided pixels = sum over k of W[k, c] * dy[k],
 *           the other pixels untouched (added into) or 0 (written)
 * The filter kernel keeps 8 output channels times 3 input blocks (24
 * vectors of 16 sums) in registers and, per pixel, loads 3 vectors of x
 * and broadcasts 8 values of dy; the data kernel keeps 8 pixels times 3
 * input blocks, and per output channel loads 3 vectors of W and
 * broadcasts 8 values of dy. oneDNN's kernels for these two (its forward
 * and stride-1 data gradient are fast) ran at 28-84 GFLOP/s on an AVX-512
 * Xeon whose sgemm gives 170: bench_conv's 1x1 rows, BENCH_CONV_VS=blocked.
 *
 * f32 kernels. Low precision the CPU emulates (dl_cpu_kernel_type f32
 * for bf16/f16) runs them on operands rounded to it: the filter's x and
 * dy chunk by chunk into scratch (x packed at the strided pixels as it
 * is rounded), the data gradient's W once and dy; a
 * product of two rounded operands is exact in f32, as in the oneDNN
 * path's rounding (cpu_conv_dnnl.c), whose 1x1 backward ran the
 * ResNet's emulated bf16 step 7% slower than these. Sums run in
 * a fixed order whatever the thread count: the filter's over the images
 * of a chunk (a size from the shape alone) and pixel by pixel, chunk
 * after chunk into dW; the data's over k. Threads split the filter's
 * output tiles within a chunk and the data's (image, pixels, blocks)
 * tiles.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/cpu/cpu.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define KB_TARGET __attribute__((target("avx512f")))
#define KB_INLINE __attribute__((always_inline)) inline
#define UNROLL _Pragma("GCC unroll 24")

enum {
    BLK = 16, /* channels in a block: AVX-512's 16 lanes */
    FI = 8,   /* filter: output channels of a tile */
    TJ = 3,   /* input blocks of a tile (filter and data) */
    DR = 8,   /* data: pixels of a tile */
};

/* Images per chunk of the filter gradient: x and dy of a chunk near 512
 * KiB, so that the tiles after the first find them in L2. */
static int filter_chunk(const dl_conv_desc *d)
{
    size_t per = ((size_t)d->c * d->h * d->w + (size_t)d->k * d->p * d->q) * sizeof(float);
    size_t nc = per ? ((size_t)512 << 10) / per : 1;
    return nc < 1 ? 1 : nc > (size_t)d->n ? d->n : (int)nc;
}

typedef struct filter_task {
    const dl_conv_desc *d;
    const float *x, *dy;
    float *dw;
    int n0, nb, jt; /* the chunk's images; tiles of input blocks per row of tiles */
    /* x as the tiles read it: image n at (n - xn0) images from x, planes
     * of xhw pixels, rows xw pixels apart, every xst-th pixel (x itself:
     * 0, h * w, w, stride; the chunk subsampled: n0, p * q, q, 1) */
    int xn0, xw, xst;
    size_t xhw;
    int yn0; /* dy: image n at (n - yn0) images from dy (a rounded chunk: n0) */
} filter_task;

/* dW rows k0 .. k0 + 8, input blocks cb0 .. cb0 + nj: += the chunk's sums. */
KB_TARGET static KB_INLINE void filter_tile(const filter_task *t, int k0, int cb0, const int nj)
{
    const dl_conv_desc *d = t->d;
    size_t hw = t->xhw, pq = (size_t)d->p * d->q, st = (size_t)t->xst;
    int kblocks = d->k / BLK, cblocks = d->c / BLK;
    __m512 acc[FI][TJ];
    UNROLL
    for (int i = 0; i < FI; i++) {
        UNROLL
        for (int j = 0; j < TJ; j++)
            acc[i][j] = _mm512_setzero_ps();
    }
    for (int n = t->n0; n < t->n0 + t->nb; n++) {
        const float *dyn =
            t->dy + ((size_t)(n - t->yn0) * kblocks + k0 / BLK) * pq * BLK + k0 % BLK;
        const float *xn = t->x + ((size_t)(n - t->xn0) * cblocks + cb0) * hw * BLK;
        /* at stride 1 the pixels are one run: a row of p * q */
        int rows = st == 1 ? 1 : d->p, cols = st == 1 ? (int)pq : d->q;
        for (int p = 0; p < rows; p++) {
            const float *xr = xn + (size_t)p * st * (size_t)t->xw * BLK;
            const float *dr = dyn + (size_t)p * d->q * BLK;
            for (int q = 0; q < cols; q++) {
                __m512 xv[TJ];
                UNROLL
                for (int j = 0; j < nj; j++)
                    xv[j] = _mm512_loadu_ps(xr + (size_t)q * st * BLK + (size_t)j * hw * BLK);
                UNROLL
                for (int i = 0; i < FI; i++) {
                    __m512 b = _mm512_set1_ps(dr[(size_t)q * BLK + i]);
                    UNROLL
                    for (int j = 0; j < nj; j++)
                        acc[i][j] = _mm512_fmadd_ps(b, xv[j], acc[i][j]);
                }
            }
        }
    }
    UNROLL
    for (int i = 0; i < FI; i++) {
        UNROLL
        for (int j = 0; j < nj; j++) {
            float *o = t->dw + (size_t)(k0 + i) * d->c + (size_t)(cb0 + j) * BLK;
            _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), acc[i][j]));
        }
    }
}

KB_TARGET static void filter_fn(void *arg, size_t begin, size_t end)
{
    const filter_task *t = arg;
    int cblocks = t->d->c / BLK;
    for (size_t tile = begin; tile < end; tile++) {
        int k0 = (int)(tile / (size_t)t->jt) * FI, cb0 = (int)(tile % (size_t)t->jt) * TJ;
        int nj = cblocks - cb0 < TJ ? cblocks - cb0 : TJ;
        if (nj == 3)
            filter_tile(t, k0, cb0, 3);
        else if (nj == 2)
            filter_tile(t, k0, cb0, 2);
        else
            filter_tile(t, k0, cb0, 1);
    }
}

typedef struct sub_task {
    const dl_conv_desc *d;
    const float *x, *dy;
    float *xs, *dys; /* dys: NULL, or the chunk's dy rounded */
    int n0;
    dl_dtype via, via_dy; /* f32, or the type packed x and dys are rounded to */
} sub_task;

/* Images [begin, end) of a chunk from n0: x at the strided pixels, packed
 * (xs [image][block][p * q][16]), and rounded through via; with dys, the
 * images' dy rounded too. */
KB_TARGET static void sub_fn(void *arg, size_t begin, size_t end)
{
    const sub_task *t = arg;
    const dl_conv_desc *d = t->d;
    size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q, st = (size_t)d->stride;
    size_t planes = (size_t)(d->c / BLK);
    for (size_t i = begin; i < end; i++) {
        for (size_t cb = 0; t->xs && cb < planes; cb++) {
            const float *src = t->x + (((size_t)t->n0 + i) * planes + cb) * hw * BLK;
            float *dst = t->xs + (i * planes + cb) * pq * BLK;
            if (st == 1) {
                dl_cpu_round_run(dst, src, t->via, pq * BLK);
                continue;
            }
            for (int p = 0; p < d->p; p++)
                for (int q = 0; q < d->q; q++, dst += BLK)
                    _mm512_storeu_ps(
                        dst, _mm512_loadu_ps(src + ((size_t)p * st * d->w + (size_t)q * st) * BLK));
            dl_cpu_round_run(dst - pq * BLK, dst - pq * BLK, t->via, pq * BLK);
        }
        if (t->dys) {
            size_t per = (size_t)d->k * pq;
            dl_cpu_round_run(t->dys + i * per, t->dy + ((size_t)t->n0 + i) * per, t->via_dy, per);
        }
    }
}

typedef struct data_task {
    const dl_conv_desc *d;
    const float *dy, *w;
    float *dx;
    int set;
    size_t rt, jt; /* pixel tiles per image, block tiles per pixel tile */
} data_task;

/* dx of image n at output pixels start .. start + 8 (fewer at the end:
 * the tile then starts earlier and stores only its new pixels), input
 * blocks cb0 .. cb0 + nj. */
KB_TARGET static KB_INLINE void data_tile(const data_task *t, int n, size_t start, int cb0,
                                          const int nj)
{
    const dl_conv_desc *d = t->d;
    size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q, st = (size_t)d->stride;
    size_t r0 = start + DR <= pq ? start : pq - DR;
    int kblocks = d->k / BLK, cblocks = d->c / BLK;
    const float *dyn = t->dy + (size_t)n * kblocks * pq * BLK;
    __m512 acc[DR][TJ];
    UNROLL
    for (int r = 0; r < DR; r++) {
        UNROLL
        for (int j = 0; j < TJ; j++)
            acc[r][j] = _mm512_setzero_ps();
    }
    for (int k = 0; k < d->k; k++) {
        const float *dk = dyn + ((size_t)(k / BLK) * pq + r0) * BLK + k % BLK;
        const float *wk = t->w + (size_t)k * d->c + (size_t)cb0 * BLK;
        __m512 wv[TJ];
        UNROLL
        for (int j = 0; j < nj; j++)
            wv[j] = _mm512_loadu_ps(wk + j * BLK);
        UNROLL
        for (int r = 0; r < DR; r++) {
            __m512 b = _mm512_set1_ps(dk[(size_t)r * BLK]);
            UNROLL
            for (int j = 0; j < nj; j++)
                acc[r][j] = _mm512_fmadd_ps(b, wv[j], acc[r][j]);
        }
    }
    UNROLL
    for (int r = 0; r < DR; r++) {
        if (r0 + (size_t)r < start)
            continue;
        size_t p = (r0 + (size_t)r) / (size_t)d->q, q = (r0 + (size_t)r) % (size_t)d->q;
        float *o = t->dx + ((size_t)n * cblocks + cb0) * hw * BLK + (p * st * d->w + q * st) * BLK;
        UNROLL
        for (int j = 0; j < nj; j++) {
            float *oj = o + (size_t)j * hw * BLK;
            _mm512_storeu_ps(oj,
                             t->set ? acc[r][j] : _mm512_add_ps(_mm512_loadu_ps(oj), acc[r][j]));
        }
    }
}

KB_TARGET static void data_fn(void *arg, size_t begin, size_t end)
{
    const data_task *t = arg;
    int cblocks = t->d->c / BLK;
    for (size_t tile = begin; tile < end; tile++) {
        size_t j = tile % t->jt, rest = tile / t->jt;
        int n = (int)(rest / t->rt), cb0 = (int)j * TJ;
        size_t start = rest % t->rt * DR;
        int nj = cblocks - cb0 < TJ ? cblocks - cb0 : TJ;
        if (nj == 3)
            data_tile(t, n, start, cb0, 3);
        else if (nj == 2)
            data_tile(t, n, start, cb0, 2);
        else
            data_tile(t, n, start, cb0, 1);
    }
}

typedef struct zero_task {
    float *p;
    size_t per; /* floats per image */
} zero_task;

static void zero_fn(void *arg, size_t begin, size_t end)
{
    const zero_task *t = arg;
    memset(t->p + begin * t->per, 0, (end - begin) * t->per * sizeof(float));
}

int dl_cpu_conv_1x1_blocked_takes(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, int dir)
{
    const char *e = getenv("DLBENCH_CONV"); /* dnnl: oneDNN's wherever it runs (read per call) */
    if ((e && !strcmp(e, "dnnl")) || !dl_cpu_avx512() ||
        dl_cpu_kernel_type(be, compute) != DL_F32 || d->r != 1 || d->s != 1 || d->pad != 0 ||
        dl_conv_dilation(d) != 1 || dl_conv_groups(d) != 1 || d->x_blk != BLK || d->y_blk != BLK ||
        d->c % BLK || d->k % BLK || d->n <= 0)
        return 0;
    if (dir == 2)
        return 1;
    /* the data gradient at stride 1 is oneDNN's (as fast as its forward) */
    return dir == 1 && d->stride > 1 && (size_t)d->p * d->q >= DR;
}

/* Scratch of the conv slot, 64-byte aligned, for floats floats. */
static float *scratch_floats(dl_backend *be, size_t floats)
{
    size_t bytes = floats * sizeof(float) + 64;
    char *s = dl_cpu_scratch(be, DL_CPU_SCRATCH_CONV, bytes);
    if (!s) {
        dl_error(DL_ENOMEM, "conv 1x1 (blocked): out of memory for %zu bytes", bytes);
        return NULL;
    }
    return (float *)(((uintptr_t)s + 63) & ~(uintptr_t)63);
}

int dl_cpu_conv_1x1_blocked_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                   const float *dy, const float *x, dl_dtype compute)
{
    int chunk = filter_chunk(d);
    /* f32, or the emulated type the operands are rounded to (not those
     * their producer wrote rounded) */
    dl_dtype via = d->rounded & DL_CONV_X_ROUNDED ? DL_F32 : compute;
    dl_dtype via_dy = d->rounded & DL_CONV_DY_ROUNDED ? DL_F32 : compute;
    filter_task t = {
        d, x, dy, dw, 0, 0, (d->c / BLK + TJ - 1) / TJ, 0, d->w, d->stride, (size_t)d->h * d->w, 0};
    size_t tiles = (size_t)(d->k / FI) * (size_t)t.jt;
    size_t pq = (size_t)d->p * d->q;
    /* strided, on one thread: each chunk's x subsampled first, so that
     * the tiles read whole lines of it from L2 rather than a quarter of
     * each from a 4x larger span (32->64 at stride 2: 97 -> 111 GFLOP/s).
     * Not on more: a tile would read the half its thread did not pack
     * from the other core's cache (97 -> 176 at 2 threads strided, 98
     * packed, on a machine whose cores share no cache). The sums and
     * their order are the same either way. Rounded operands are always
     * packed, x and dy. */
    float *xs = NULL, *dys = NULL;
    int pack = via != DL_F32 || (d->stride > 1 && dl_pool_threads(dl_cpu(be)->pool) == 1);
    size_t xf = pack ? ((size_t)chunk * d->c * pq + 15) / 16 * 16 : 0;
    size_t yf = via_dy != DL_F32 ? (size_t)chunk * d->k * pq : 0;
    if (xf || yf) {
        float *sc = scratch_floats(be, xf + yf);
        if (!sc)
            return DL_ENOMEM;
        xs = xf ? sc : NULL;
        dys = yf ? sc + xf : NULL;
    }
    if (xs) {
        t.x = xs;
        t.xw = d->q;
        t.xst = 1;
        t.xhw = pq;
    }
    if (dys)
        t.dy = dys;
    for (int n0 = 0; n0 < d->n; n0 += chunk) {
        t.n0 = n0;
        t.nb = d->n - n0 < chunk ? d->n - n0 : chunk;
        if (xs || dys) {
            sub_task st = {d, x, dy, xs, dys, n0, via, via_dy};
            t.xn0 = xs ? n0 : 0;
            t.yn0 = dys ? n0 : 0;
            dl_pool_for(dl_cpu(be)->pool, (size_t)t.nb, 1, sub_fn, &st);
        }
        dl_pool_for(dl_cpu(be)->pool, tiles, 1, filter_fn, &t);
    }
    return DL_OK;
}

int dl_cpu_conv_1x1_blocked_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                 const float *w, int set, dl_dtype compute)
{
    size_t pq = (size_t)d->p * d->q;
    if (compute != DL_F32) { /* rounded: W once, dy (unless it is), into scratch */
        int dy_too = !(d->rounded & DL_CONV_DY_ROUNDED);
        size_t wf = ((size_t)d->k * d->c + 15) / 16 * 16, per = (size_t)d->k * pq;
        float *ws = scratch_floats(be, wf + (dy_too ? (size_t)d->n * per : 0));
        if (!ws)
            return DL_ENOMEM;
        dl_cpu_round_run(ws, w, compute, (size_t)d->k * d->c);
        if (dy_too) {
            DL_TRY(dl_cpu_round_through(be, ws + wf, dy, compute, (size_t)d->n * per));
            dy = ws + wf;
        }
        w = ws;
    }
    data_task t = {d, dy, w, dx, set, (pq + DR - 1) / DR, (size_t)(d->c / BLK + TJ - 1) / TJ};
    if (set) { /* the pixels off the stride get 0 */
        zero_task z = {dx, (size_t)d->c * d->h * d->w};
        dl_pool_for(dl_cpu(be)->pool, (size_t)d->n, 1, zero_fn, &z);
    }
    dl_pool_for(dl_cpu(be)->pool, (size_t)d->n * t.rt * t.jt, 1, data_fn, &t);
    return DL_OK;
}

#else
int dl_cpu_conv_1x1_blocked_takes(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, int dir)
{
    return 0;
}
int dl_cpu_conv_1x1_blocked_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                   const float *dy, const float *x, dl_dtype compute)
{
    return DL_EUNSUPPORTED;
}
int dl_cpu_conv_1x1_blocked_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                 const float *w, int set, dl_dtype compute)
{
    return DL_EUNSUPPORTED;
}
#endif
