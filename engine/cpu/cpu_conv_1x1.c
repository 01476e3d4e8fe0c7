/* cpu_conv_1x1.c - dense 1x1 convolutions (pad 0, any stride) as per-image matrix products with AVX-512 micro-kernels
 *
 * A 1x1 convolution in NCHW needs no unfold: with xs_i [c, pq] the input
 * image i taken at the strided positions (x_i itself at stride 1),
 *   forward          y_i [k, pq]   = W [k, c] . xs_i (+ b)
 *   backward data    dxs_i [c, pq] = W^T [c, k] . dy_i, put at the strided
 *                    positions of dx_i (the others get nothing added, or 0
 *                    when dx is written)
 *   backward filter  dW [k, c]    += sum_i dy_i . xs_i^T,  db += sum of dy
 * W is small and stays in cache: the forward and data kernels keep 8 rows
 * of the output times 32 pixels in registers, broadcast the 8 weights of
 * one input row (W packed [rows/8][K][8], zero rows to a multiple of 8)
 * and stream the input rows. The filter lays a chunk's x and dy out as
 * rows of all its pixels end to end ([c, P] and [k, P]) and, from 32 input
 * channels, takes dW = dy . x^T as one product of the f32 library (its
 * kernels pack for a long reduction; per-image products have one of only
 * pq); below, own 4x4 tiles of (output, input channel) 16-lane sums over
 * the P pixels. At stride > 1 an image is first subsampled into a
 * small buffer (stride 2 by permutes); dx at stride 2 is written by
 * expanding each row of dxs into the even lanes.
 *
 * bf16 compute: W is rounded once into its packed copy, an image's x or
 * dy once into the part's buffer before its product (round to nearest
 * even, as half.h; rounding at each load cost the forward and data
 * kernels 60% more time than f32 on an AVX-512 Xeon); the filter rounds
 * a chunk's x and dy as it lays them out. Products are
 * summed in f32: the f32 math on rounded operands. db sums dy itself.
 *
 * Threads: forward and data split the images into parts (one per pool
 * thread); an image's result does not depend on the split. The filter
 * gradient is summed per fixed chunk of images (chunk size from the shape
 * alone), the chunks' partial sums added in chunk order: the same bits at
 * any thread count.
 *
 * Workspace (dl_cpu_conv_1x1_workspace): the packed W, per part a buffer
 * of a chunk's x and dy laid out (the forward and data subsample an image
 * into it), the chunks' partial sums.
 */
#include <stdint.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/half.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_1X1 1
#include <immintrin.h>
#define K1_TARGET __attribute__((target("avx512f")))
#define K1_INLINE __attribute__((always_inline)) inline
#else
#define HAVE_1X1 0
#endif
/* the register blocks' loops unrolled, so that their accumulators stay in
 * registers (at -O2 the arrays stay on the stack otherwise) */
#define UNROLL _Pragma("GCC unroll 16")

/* Output rows a forward/data micro-kernel computes, pixels per step. */
#define MR 8
#define NR 32
/* Bytes of dy and x a filter chunk keeps near (L2). */
#define FILTER_CHUNK_BYTES ((size_t)512 << 10)
/* Input channels from which the filter gradient is one f32 library
 * product per chunk; below, the own 4x4 tiles (bench_conv: at 16 the
 * library's product with 16 columns ran at two thirds of the tiles). */
#define FILTER_GEMM_MIN_C 32
/* Rows of input the subsampling prefetches ahead of its reads. */
#define PF_ROWS 4

int dl_cpu_conv_1x1_fits(const dl_conv_desc *d, dl_dtype compute)
{
    if (!HAVE_1X1 || (compute != DL_F32 && compute != DL_BF16))
        return 0;
    if (dl_conv_groups(d) != 1 || dl_conv_dilation(d) != 1 || d->r != 1 || d->s != 1 ||
        d->pad != 0 || d->stride < 1)
        return 0;
    return dl_cpu_avx512();
}

/* ---------------------------------------------------------------------- */
/* layout of the workspace                                                 */

typedef struct k1_plan {
    int pq, parts, chunk, chunks;
    size_t xs;   /* floats of one part's buffer: subsampled images, bf16 rounded chunk */
    size_t wpk;  /* floats of the packed W (either way round: rows to a multiple of 8) */
    size_t part; /* floats of one chunk's partial dw, then db in doubles */
} k1_plan;

static size_t up8(size_t v) { return (v + 7) & ~(size_t)7; }
static size_t up16(size_t v) { return (v + 15) & ~(size_t)15; }

static int threads_of(dl_backend *be)
{
    dl_pool *pool = dl_cpu(be)->pool;
    return pool ? dl_pool_threads(pool) : 1;
}

static k1_plan plan_of(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    k1_plan p;
    p.pq = d->p * d->q;
    size_t per_image = ((size_t)d->k + d->c) * p.pq * sizeof(float);
    size_t nb = per_image ? FILTER_CHUNK_BYTES / per_image : (size_t)d->n;
    if (nb < 1)
        nb = 1;
    if (nb > (size_t)d->n)
        nb = (size_t)d->n;
    /* at least 8 chunks where the batch allows: the parts stay balanced */
    size_t eighth = ((size_t)d->n + 7) / 8;
    if (nb > eighth)
        nb = eighth;
    p.chunk = (int)nb;
    p.chunks = (d->n + p.chunk - 1) / p.chunk;
    int t = threads_of(be);
    p.parts = t < d->n ? t : d->n;
    /* the filter lays out a chunk's x and dy in this buffer; forward and
     * data subsample one image into it */
    p.xs = up16((size_t)p.chunk * d->c * p.pq) + up16((size_t)p.chunk * d->k * p.pq);
    p.wpk = up16(up8((size_t)(d->k > d->c ? d->k : d->c)) * (d->k > d->c ? d->k : d->c));
    p.part = up16(up16((size_t)d->k * d->c) + 2 * (size_t)d->k); /* dw, then db as doubles */
    return p;
}

size_t dl_cpu_conv_1x1_workspace(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    k1_plan p = plan_of(be, d, compute);
    return (p.wpk + (size_t)p.parts * p.xs + (size_t)p.chunks * p.part) * sizeof(float) + 64;
}

typedef struct k1_bufs {
    float *wpk, *xs, *parts;
} k1_bufs;

static k1_bufs carve(const k1_plan *p, void *ws)
{
    k1_bufs b;
    b.wpk = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    b.xs = b.wpk + p->wpk;
    b.parts = b.xs + (size_t)p->parts * p->xs;
    return b;
}

static inline float round_bf16(float v) { return dl_bf16_to_f32(dl_f32_to_bf16(v)); }

/* ap [rows8/8][K][8] = a [rows, K] (transposed from a [K, rows] when trans),
 * rounded through bf16 when asked; rows past `rows` are 0. */
static void pack_a(float *ap, const float *a, int rows, int kdim, int trans, int bf16)
{
    int rows8 = (int)up8((size_t)rows);
    for (int r0 = 0; r0 < rows8; r0 += MR)
        for (int kk = 0; kk < kdim; kk++)
            UNROLL
    for (int r = 0; r < MR; r++) {
        int row = r0 + r;
        float v = row >= rows ? 0.0f
                  : trans     ? a[(size_t)kk * rows + row]
                              : a[(size_t)row * kdim + kk];
        ap[((size_t)r0 * kdim) + (size_t)kk * MR + r] = bf16 ? round_bf16(v) : v;
    }
}

#if HAVE_1X1

K1_TARGET static K1_INLINE __m512 load_b(const float *p, __mmask16 m, int full)
{
    return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

/* How an output block is stored: written, written plus a bias per row, or
 * added to what is there. */
enum { OUT_SET, OUT_BIAS, OUT_ADD };

/* o [mr rows of ldo] (mode) ap [K][8] . b [K rows of ldb], nv vectors of
 * pixels (the last masked by m). */
K1_TARGET static K1_INLINE void mk(const float *ap, const float *b, size_t ldb, int kdim, float *o,
                                   size_t ldo, int mr, int nv, __mmask16 m, int mode,
                                   const float *bias)
{
    __m512 acc0[MR], acc1[MR];
    UNROLL
    for (int r = 0; r < MR; r++)
        acc0[r] = acc1[r] = _mm512_setzero_ps();
    for (int kk = 0; kk < kdim; kk++) {
        const float *bk = b + (size_t)kk * ldb;
        __m512 b0 = load_b(bk, m, nv == 2);
        __m512 b1 = nv == 2 ? load_b(bk + 16, m, 0) : b0;
        const float *a = ap + (size_t)kk * MR;
        UNROLL
        for (int r = 0; r < MR; r++) {
            __m512 av = _mm512_set1_ps(a[r]);
            acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
            if (nv == 2)
                acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
        }
    }
    __mmask16 m0 = nv == 2 ? (__mmask16)0xffff : m;
    UNROLL
    for (int r = 0; r < MR; r++) {
        if (r >= mr)
            break;
        float *orow = o + (size_t)r * ldo;
        __m512 v0 = acc0[r], v1 = acc1[r];
        if (mode == OUT_BIAS) {
            __m512 bv = _mm512_set1_ps(bias[r]);
            v0 = _mm512_add_ps(v0, bv);
            v1 = _mm512_add_ps(v1, bv);
        } else if (mode == OUT_ADD) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, orow));
            if (nv == 2)
                v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m, orow + 16));
        }
        _mm512_mask_storeu_ps(orow, m0, v0);
        if (nv == 2)
            _mm512_mask_storeu_ps(orow + 16, m, v1);
    }
}

/* o [rows, ldo] (mode) ap . b [K, ldb] over n pixels: the micro-kernel
 * over 32-pixel blocks (inner) and 8-row blocks. */
K1_TARGET static void product(const float *ap, int rows, int kdim, const float *b, size_t ldb,
                              int n, float *o, size_t ldo, int mode, const float *bias)
{
    for (int j = 0; j < n; j += NR) {
        int left = n - j;
        int nv = left > 16 ? 2 : 1;
        int tail = left >= NR ? 16 : left > 16 ? left - 16 : left;
        __mmask16 m = (__mmask16)((1u << tail) - 1);
        for (int r0 = 0; r0 < rows; r0 += MR) {
            int mr = rows - r0 < MR ? rows - r0 : MR;
            const float *a = ap + (size_t)r0 * kdim;
            float *orow = o + (size_t)r0 * ldo + j;
            const float *bj = b + j;
            const float *bi = bias ? bias + r0 : NULL;
#define MK_CASE(NV, MODE) mk(a, bj, ldb, kdim, orow, ldo, mr, NV, m, MODE, bi)
            if (nv == 2)
                mode == OUT_SET    ? MK_CASE(2, OUT_SET)
                : mode == OUT_BIAS ? MK_CASE(2, OUT_BIAS)
                                   : MK_CASE(2, OUT_ADD);
            else
                mode == OUT_SET    ? MK_CASE(1, OUT_SET)
                : mode == OUT_BIAS ? MK_CASE(1, OUT_BIAS)
                                   : MK_CASE(1, OUT_ADD);
#undef MK_CASE
        }
    }
}

/* xs [c, pq] = x_i [c, h, w] at the strided positions, channel rows ldc
 * floats apart. */
K1_TARGET static void subsample(float *xs, size_t ldc, const float *xi, const dl_conv_desc *d)
{
    int s = d->stride;
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int ch = 0; ch < d->c; ch++)
        for (int oh = 0; oh < d->p; oh++) {
            const float *src = xi + ((size_t)ch * d->h + (size_t)oh * s) * d->w;
            float *dst = xs + (size_t)ch * ldc + (size_t)oh * d->q;
            /* the rows PF_ROWS ahead (the next channel's past the
             * plane's end: planes follow each other) */
            const char *ahead = (const char *)(src + (size_t)PF_ROWS * s * d->w);
            for (size_t at = 0; at < (size_t)d->w * sizeof(float); at += 64)
                _mm_prefetch(ahead + at, _MM_HINT_T0);
            if (s == 2) {
                for (int ow = 0; ow < d->q; ow += 16) {
                    int in = d->w - 2 * ow, out = d->q - ow;
                    __mmask16 m0 = in >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << in) - 1);
                    __mmask16 m1 = in >= 32   ? (__mmask16)0xffff
                                   : in <= 16 ? 0
                                              : (__mmask16)((1u << (in - 16)) - 1);
                    __m512 a = _mm512_maskz_loadu_ps(m0, src + 2 * ow);
                    __m512 b = _mm512_maskz_loadu_ps(m1, src + 2 * ow + 16);
                    __mmask16 mo = out >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << out) - 1);
                    _mm512_mask_storeu_ps(dst + ow, mo, _mm512_permutex2var_ps(a, even, b));
                }
            } else {
                for (int ow = 0; ow < d->q; ow++)
                    dst[ow] = src[(size_t)ow * s];
            }
        }
}

/* dx_i [c, h, w] from dxs [c, pq] at the strided positions: written (the
 * other positions 0) or added (the others untouched). */
K1_TARGET static void scatter(float *dxi, const float *dxs, const dl_conv_desc *d, int set)
{
    int s = d->stride;
    for (int ch = 0; ch < d->c; ch++)
        for (int ih = 0; ih < d->h; ih++) {
            float *dst = dxi + ((size_t)ch * d->h + ih) * d->w;
            int oh = ih / s;
            if (ih % s || oh >= d->p) {
                if (set)
                    memset(dst, 0, (size_t)d->w * sizeof(float));
                continue;
            }
            const float *src = dxs + ((size_t)ch * d->p + oh) * d->q;
            if (s == 2) {
                /* 8 values into the even lanes of 16 floats of dx */
                for (int ow = 0; ow < d->q; ow += 8) {
                    int out = d->w - 2 * ow, in = d->q - ow;
                    __mmask16 mo = out >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << out) - 1);
                    __mmask16 mi = in >= 8 ? (__mmask16)0xff : (__mmask16)((1u << in) - 1);
                    __m512 v = _mm512_maskz_expand_ps(0x5555, _mm512_maskz_loadu_ps(mi, src + ow));
                    if (!set)
                        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mo, dst + 2 * ow));
                    _mm512_mask_storeu_ps(dst + 2 * ow, mo, v);
                }
            } else if (set) {
                memset(dst, 0, (size_t)d->w * sizeof(float));
                for (int ow = 0; ow < d->q; ow++)
                    dst[(size_t)ow * s] = src[ow];
            } else {
                for (int ow = 0; ow < d->q; ow++)
                    dst[(size_t)ow * s] += src[ow];
            }
        }
}

typedef struct k1_task {
    const dl_conv_desc *d;
    const k1_plan *p;
    k1_bufs bufs;
    const float *x, *dy, *b;
    float *y, *dx;
    int bf16, set;
} k1_task;

/* The images of part `part`. */
static void part_images(const k1_task *t, size_t part, int *i0, int *i1)
{
    *i0 = (int)(part * (size_t)t->d->n / (size_t)t->p->parts);
    *i1 = (int)((part + 1) * (size_t)t->d->n / (size_t)t->p->parts);
}

K1_TARGET static void fwd_task(void *arg, size_t begin, size_t end)
{
    const k1_task *t = arg;
    const dl_conv_desc *d = t->d;
    int pq = t->p->pq;
    size_t plane = (size_t)d->h * d->w;
    for (size_t part = begin; part < end; part++) {
        int i0, i1;
        part_images(t, part, &i0, &i1);
        float *xs = t->bufs.xs + part * t->p->xs;
        for (int i = i0; i < i1; i++) {
            const float *xi = t->x + (size_t)i * d->c * plane;
            if (d->stride > 1) {
                subsample(xs, (size_t)pq, xi, d);
                xi = xs;
            }
            if (t->bf16) { /* rounded once, not at each of its k / MR loads */
                dl_cpu_round_run(xs, xi, DL_BF16, (size_t)d->c * pq);
                xi = xs;
            }
            product(t->bufs.wpk, d->k, d->c, xi, (size_t)pq, pq, t->y + (size_t)i * d->k * pq,
                    (size_t)pq, t->b ? OUT_BIAS : OUT_SET, t->b);
        }
    }
}

K1_TARGET static void data_task(void *arg, size_t begin, size_t end)
{
    const k1_task *t = arg;
    const dl_conv_desc *d = t->d;
    int pq = t->p->pq;
    size_t plane = (size_t)d->h * d->w;
    for (size_t part = begin; part < end; part++) {
        int i0, i1;
        part_images(t, part, &i0, &i1);
        float *xs = t->bufs.xs + part * t->p->xs;
        /* dy rounded once into the buffer's second region (k * pq floats
         * and more), the strided dxs in its first (c * pq) */
        float *dyr = xs + up16((size_t)t->p->chunk * d->c * pq);
        for (int i = i0; i < i1; i++) {
            const float *dyi = t->dy + (size_t)i * d->k * pq;
            float *dxi = t->dx + (size_t)i * d->c * plane;
            if (t->bf16) {
                dl_cpu_round_run(dyr, dyi, DL_BF16, (size_t)d->k * pq);
                dyi = dyr;
            }
            if (d->stride == 1) {
                product(t->bufs.wpk, d->c, d->k, dyi, (size_t)pq, pq, dxi, (size_t)pq,
                        t->set ? OUT_SET : OUT_ADD, NULL);
            } else {
                product(t->bufs.wpk, d->c, d->k, dyi, (size_t)pq, pq, xs, (size_t)pq, OUT_SET,
                        NULL);
                scatter(dxi, xs, d, t->set);
            }
        }
    }
}

/* dst rows (ldd floats apart) = src [rows, n], rounded to bf16 when asked;
 * sum[r] (when sum) += the sum of src's row r itself. */
K1_TARGET static void pack_rows(float *dst, size_t ldd, const float *src, int rows, int n,
                                double *sum, int bf16)
{
    for (int r = 0; r < rows; r++) {
        const float *sr = src + (size_t)r * n;
        float *dr = dst + (size_t)r * ldd;
        __m512 acc = _mm512_setzero_ps();
        for (int j = 0; j < n; j += 16) {
            int left = n - j;
            __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            __m512 v = _mm512_maskz_loadu_ps(m, sr + j);
            acc = _mm512_add_ps(acc, v);
            _mm512_mask_storeu_ps(dr + j, m, bf16 ? dl_v512_round_bf16(v) : v);
        }
        if (sum)
            sum[r] += _mm512_reduce_add_ps(acc);
    }
}

/* The filter's 4x4 tile: s[r][c'] = sum over the n pixels of dy rows r
 * times x rows c' (rows ld floats apart; rows past kr, cr repeat the last
 * one, their sums dropped), in 16 lanes reduced at the end. */
#define FR 4
#define FC 4
K1_TARGET static K1_INLINE void filter_tile(const float *dy, const float *x, size_t ld, int kr,
                                            int cr, float s[FR][FC])
{
    __m512 acc[FR][FC];
    UNROLL
    for (int r = 0; r < FR; r++)
        UNROLL
    for (int c = 0; c < FC; c++)
        acc[r][c] = _mm512_setzero_ps();
    const float *gr[FR], *xr[FC];
    UNROLL
    for (int r = 0; r < FR; r++)
        gr[r] = dy + (size_t)(r < kr ? r : kr - 1) * ld;
    UNROLL
    for (int c = 0; c < FC; c++)
        xr[c] = x + (size_t)(c < cr ? c : cr - 1) * ld;
    for (size_t j = 0; j < ld; j += 16) {
        size_t left = ld - j;
        __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512 gv[FR], xv[FC];
        UNROLL
        for (int r = 0; r < FR; r++)
            gv[r] = _mm512_maskz_loadu_ps(m, gr[r] + j);
        UNROLL
        for (int c = 0; c < FC; c++)
            xv[c] = _mm512_maskz_loadu_ps(m, xr[c] + j);
        UNROLL
        for (int r = 0; r < FR; r++)
            UNROLL
        for (int c = 0; c < FC; c++)
            acc[r][c] = _mm512_fmadd_ps(gv[r], xv[c], acc[r][c]);
    }
    UNROLL
    for (int r = 0; r < FR; r++)
        UNROLL
    for (int c = 0; c < FC; c++)
        s[r][c] = _mm512_reduce_add_ps(acc[r][c]);
}

typedef struct k1_filter_task {
    const dl_conv_desc *d;
    const k1_plan *p;
    k1_bufs bufs;
    const float *x, *dy;
    int bf16, want_db;
} k1_filter_task;

/* Partial sums of the chunks of part `part` (chunks split over parts):
 * the chunk's x (subsampled) and dy laid out as [c, P] and [k, P] with
 * P = its images' pixels end to end (rounded to bf16 when asked), then
 * one product dw = dy . x^T over the P pixels by the f32 library on this
 * thread, which packs them for its own kernels (per-image products have
 * a reduction of only pq). db from dy itself as it is laid out. */
K1_TARGET static void filter_task(void *arg, size_t begin, size_t end)
{
    const k1_filter_task *t = arg;
    const dl_conv_desc *d = t->d;
    const k1_plan *p = t->p;
    int pq = p->pq;
    size_t plane = (size_t)d->h * d->w;
    for (size_t part = begin; part < end; part++) {
        size_t ch0 = part * (size_t)p->chunks / (size_t)p->parts;
        size_t ch1 = (part + 1) * (size_t)p->chunks / (size_t)p->parts;
        float *xb = t->bufs.xs + part * p->xs;
        float *gb = xb + up16((size_t)p->chunk * d->c * pq);
        for (size_t ci = ch0; ci < ch1; ci++) {
            int i0 = (int)ci * p->chunk;
            int i1 = i0 + p->chunk < d->n ? i0 + p->chunk : d->n;
            size_t np = (size_t)(i1 - i0) * pq;
            float *dw = t->bufs.parts + ci * p->part;
            double *db = t->want_db ? (double *)(dw + up16((size_t)d->k * d->c)) : NULL;
            if (db)
                memset(db, 0, (size_t)d->k * sizeof(double));
            for (int i = i0; i < i1; i++) {
                size_t at = (size_t)(i - i0) * pq;
                const float *xi = t->x + (size_t)i * d->c * plane;
                if (d->stride > 1) {
                    subsample(xb + at, np, xi, d);
                    if (t->bf16)
                        for (int ch = 0; ch < d->c; ch++)
                            pack_rows(xb + ch * np + at, 0, xb + ch * np + at, 1, pq, NULL, 1);
                } else {
                    pack_rows(xb + at, np, xi, d->c, pq, NULL, t->bf16);
                }
                pack_rows(gb + at, np, t->dy + (size_t)i * d->k * pq, d->k, pq, db, t->bf16);
            }
            if (d->c >= FILTER_GEMM_MIN_C) {
                dl_cpu_sgemm_here(0, 1, d->k, d->c, (int)np, 1.0f, gb, (int)np, xb, (int)np, 0.0f,
                                  dw, d->c);
                continue;
            }
            for (int kb = 0; kb < d->k; kb += FR) {
                int kr = d->k - kb < FR ? d->k - kb : FR;
                for (int cb = 0; cb < d->c; cb += FC) {
                    int cr = d->c - cb < FC ? d->c - cb : FC;
                    float sums[FR][FC];
                    filter_tile(gb + (size_t)kb * np, xb + (size_t)cb * np, np, kr, cr, sums);
                    for (int r = 0; r < kr; r++)
                        for (int c = 0; c < cr; c++)
                            dw[(size_t)(kb + r) * d->c + cb + c] = sums[r][c];
                }
            }
        }
    }
}

static void run_parts(dl_backend *be, size_t parts, dl_pool_fn fn, void *arg)
{
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool)
        dl_pool_for(pool, parts, 1, fn, arg);
    else
        fn(arg, 0, parts);
}

#endif /* HAVE_1X1 */

int dl_cpu_conv_1x1_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                            const float *w, const float *b, void *ws, dl_dtype compute)
{
#if HAVE_1X1
    k1_plan p = plan_of(be, d, compute);
    k1_task t = {d, &p, carve(&p, ws), x, NULL, b, y, NULL, compute == DL_BF16, 0};
    pack_a(t.bufs.wpk, w, d->k, d->c, 0, t.bf16);
    run_parts(be, (size_t)p.parts, fwd_task, &t);
    return DL_OK;
#else
    return dl_error(DL_EINVAL, "conv_forward: no 1x1 kernels in this build");
#endif
}

int dl_cpu_conv_1x1_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                  const float *w, void *ws, dl_dtype compute, int set)
{
#if HAVE_1X1
    k1_plan p = plan_of(be, d, compute);
    k1_task t = {d, &p, carve(&p, ws), NULL, dy, NULL, NULL, dx, compute == DL_BF16, set};
    /* W^T [c, k] from w [k, c] */
    pack_a(t.bufs.wpk, w, d->c, d->k, 1, t.bf16);
    run_parts(be, (size_t)p.parts, data_task, &t);
    return DL_OK;
#else
    return dl_error(DL_EINVAL, "conv_backward_data: no 1x1 kernels in this build");
#endif
}

int dl_cpu_conv_1x1_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                    const float *dy, const float *x, void *ws, dl_dtype compute)
{
#if HAVE_1X1
    k1_plan p = plan_of(be, d, compute);
    /* the filter's parts split the chunks */
    if (p.parts > p.chunks)
        p.parts = p.chunks;
    k1_filter_task t = {d, &p, carve(&p, ws), x, dy, compute == DL_BF16, db != NULL};
    run_parts(be, (size_t)p.parts, filter_task, &t);
    size_t kc = (size_t)d->k * d->c;
    for (size_t j = 0; j < kc; j++) {
        double s = 0.0;
        for (int ci = 0; ci < p.chunks; ci++)
            s += t.bufs.parts[(size_t)ci * p.part + j];
        dw[j] += (float)s;
    }
    if (db)
        for (int kk = 0; kk < d->k; kk++) {
            double s = 0.0;
            for (int ci = 0; ci < p.chunks; ci++)
                s += ((const double *)(t.bufs.parts + (size_t)ci * p.part + up16(kc)))[kk];
            db[kk] += (float)s;
        }
    return DL_OK;
#else
    return dl_error(DL_EINVAL, "conv_backward_filter: no 1x1 kernels in this build");
#endif
}
