/* cpu_conv_small.c - direct kernels for convolutions with few input channels (LeNet's, a stem's): forward and filter gradient
 *
 * Below 4 input channels and 16 outputs oneDNN is not asked for the
 * forward (cpu_conv_dnnl.c's rule), and im2col + GEMM makes products of
 * depth c*r*s and width k: LeNet's 5x5 layer on RGB images (3 -> 6) ran
 * at 17 GFLOP/s that way. Here, per image, x's planes are copied
 * zero-padded into a scratch of hp = h + 2 pad rows of wp = w + 2 pad
 * floats, one plane after the other. Outputs are numbered o = oh*wp + ow
 * over rows of wp columns (the last s - 1 of a row lie outside y and are
 * dropped), so tap (c, r, s) of output o reads the scratch at
 * c*hp*wp + r*wp + s + o: consecutive outputs read consecutive floats,
 * across the ends of rows. A block of V vectors of outputs and KB output
 * channels stays in registers; per tap, V loads, KB broadcast weights and
 * KB*V multiply-adds. Each sum starts at the bias and takes the taps in
 * w's order (c, r, s), one multiply-add each: the same bits at any
 * vector width, block or thread count. A band of output rows is stored
 * into a scratch of KB planes of pitch wp, then its rows of q columns go
 * to y.
 *
 *   y[i, k, oh, ow] = b[k] + sum over (c, r, s) of w[k, c, r, s] * xpad[i, c, oh + r, ow + s]
 *
 * The filter gradient, on the same scratch: dy's planes of a block of
 * KB output channels are laid out at pitch wp with zeros in the dropped
 * columns (and past the last vector), so
 *
 *   dw[k, c, r, s] += sum over i, o of dypad[i, k, o] * xpad[i, c, o + r*wp + s]
 *
 * is a dot product of two runs of floats. KB channels by JB taps of
 * vector accumulators stay in registers over an image's outputs (per
 * output vector KB + JB loads, KB*JB multiply-adds), then are added to
 * lane sums kept over the images in order; each lane sum is reduced in
 * double at the end. Units of work are blocks of output channels, each
 * over every image, so the bits do not depend on the thread count. (A
 * dropped column multiplies a 0 of dy by an x of the next row: an
 * infinite x there would give NaN where the exact sum has none; such an
 * input makes the forward's y infinite anyway.) db is the caller's
 * (cpu_conv.c sums it the same way on every path).
 *
 * 16 lanes where the CPU has AVX-512F (up to 8 output channels a block,
 * 4 or 3 vectors), else 8 with AVX2 and FMA (up to 6 channels, 2
 * vectors). Stride 1, dilation 1, one group; f32, or bf16/f16 emulated
 * on operands rounded to the type as they are copied. Images are the
 * forward's units of work; a thread's scratch is its own (no allocation
 * in a step). DLBENCH_CONV_SMALL=0 leaves them out (comparisons). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/cpu/cpu.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define SMALL_VECTOR 1
#endif

#define SMALL_C 3       /* input channels up to */
#define SMALL_K 15      /* output channels up to */
#define SMALL_TAPS 160  /* c*r*s up to */
#define SMALL_X 16384   /* floats of an image's padded planes, with the spill past them */
#define SMALL_Y 8192    /* floats of a band of KB output planes of pitch wp */
#define SMALL_SPILL 128 /* floats past the planes a block may read: 16 * 4 vectors + s */

int dl_cpu_conv_small_fits(const dl_conv_desc *d, dl_dtype compute)
{
#ifdef SMALL_VECTOR
    const char *e = getenv("DLBENCH_CONV_SMALL"); /* 0: never (comparisons; read per call) */
    if ((e && !strcmp(e, "0")) || (compute != DL_F32 && compute != DL_BF16 && compute != DL_F16))
        return 0;
    if (d->c < 1 || d->c > SMALL_C || d->k < 1 || d->k > SMALL_K || d->stride != 1 ||
        dl_conv_groups(d) != 1 || d->dilation > 1 || d->x_blk || d->y_blk)
        return 0;
    if (d->c * d->r * d->s > SMALL_TAPS || d->s >= SMALL_SPILL - 64 || d->p < 1 || d->q < 1)
        return 0;
    size_t wp = (size_t)d->w + 2 * d->pad, hp = (size_t)d->h + 2 * d->pad;
    /* one row of outputs for the largest block must fit the y band */
    if ((size_t)d->c * hp * wp + SMALL_SPILL > SMALL_X || 8 * (wp + 64) > SMALL_Y)
        return 0;
    if (!dl_cpu_avx512() && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
        return 0;
    return 1;
#else
    (void)d, (void)compute;
    return 0;
#endif
}

#ifdef SMALL_VECTOR
/* A thread's scratch: an image's padded planes, a band of output planes. */
static _Thread_local float xs[SMALL_X] __attribute__((aligned(64)));
static _Thread_local float ys[SMALL_Y] __attribute__((aligned(64)));

typedef struct small_task {
    const dl_conv_desc *d;
    dl_dtype compute;
    const float *x, *b;
    float *y;
    const float *wt; /* per block of output channels: [taps][kb] */
    int off[SMALL_TAPS];
    int blocks, kb[SMALL_K]; /* channels of each block */
} small_task;

/* y rows oh of [o0 / wp, ...) in a band of the KB planes at ys, pitch
 * `pitch`: outputs o in [o0, o1) (a multiple of the block's floats). */
typedef void (*small_fn)(const float *xp, const int *off, int taps, const float *wt,
                         const float *bias, float *out, size_t pitch, size_t o0, size_t o1);

#define SMALL_INLINE static inline __attribute__((always_inline))

#define T512 __attribute__((target("avx512f")))
#define T256 __attribute__((target("avx2,fma")))

T512 SMALL_INLINE void body512(int KB, int V, const float *xp, const int *off, int taps,
                               const float *wt, const float *bias, float *out, size_t pitch,
                               size_t o0, size_t o1)
{
    for (size_t o = o0; o < o1; o += 16 * (size_t)V) {
        __m512 acc[8][4];
#pragma GCC unroll 8
        for (int k = 0; k < KB; k++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[k][v] = _mm512_set1_ps(bias[k]);
        const float *xo = xp + o;
        for (int j = 0; j < taps; j++) {
            __m512 xv[4];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                xv[v] = _mm512_loadu_ps(xo + off[j] + 16 * v);
#pragma GCC unroll 8
            for (int k = 0; k < KB; k++) {
                __m512 wv = _mm512_set1_ps(wt[j * KB + k]);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    acc[k][v] = _mm512_fmadd_ps(wv, xv[v], acc[k][v]);
            }
        }
#pragma GCC unroll 8
        for (int k = 0; k < KB; k++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                _mm512_storeu_ps(out + k * pitch + (o - o0) + 16 * v, acc[k][v]);
    }
}

T256 SMALL_INLINE void body256(int KB, int V, const float *xp, const int *off, int taps,
                               const float *wt, const float *bias, float *out, size_t pitch,
                               size_t o0, size_t o1)
{
    for (size_t o = o0; o < o1; o += 8 * (size_t)V) {
        __m256 acc[6][2];
#pragma GCC unroll 8
        for (int k = 0; k < KB; k++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                acc[k][v] = _mm256_set1_ps(bias[k]);
        const float *xo = xp + o;
        for (int j = 0; j < taps; j++) {
            __m256 xv[2];
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                xv[v] = _mm256_loadu_ps(xo + off[j] + 8 * v);
#pragma GCC unroll 8
            for (int k = 0; k < KB; k++) {
                __m256 wv = _mm256_broadcast_ss(wt + j * KB + k);
#pragma GCC unroll 4
                for (int v = 0; v < V; v++)
                    acc[k][v] = _mm256_fmadd_ps(wv, xv[v], acc[k][v]);
            }
        }
#pragma GCC unroll 8
        for (int k = 0; k < KB; k++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++)
                _mm256_storeu_ps(out + k * pitch + (o - o0) + 8 * v, acc[k][v]);
    }
}

#define K512(KB, V)                                                                                \
    T512 static void k512_##KB(const float *xp, const int *off, int taps, const float *wt,         \
                               const float *bias, float *out, size_t pitch, size_t o0, size_t o1)  \
    {                                                                                              \
        body512(KB, V, xp, off, taps, wt, bias, out, pitch, o0, o1);                               \
    }                                                                                              \
    typedef int k512_##KB##_defined
#define K256(KB)                                                                                   \
    T256 static void k256_##KB(const float *xp, const int *off, int taps, const float *wt,         \
                               const float *bias, float *out, size_t pitch, size_t o0, size_t o1)  \
    {                                                                                              \
        body256(KB, 2, xp, off, taps, wt, bias, out, pitch, o0, o1);                               \
    }                                                                                              \
    typedef int k256_##KB##_defined
/* the kernels, each use a declaration (a typedef closes the macro) */
K512(1, 4);
K512(2, 4);
K512(3, 4);
K512(4, 4);
K512(5, 4);
K512(6, 4);
K512(7, 3);
K512(8, 3);
K256(1);
K256(2);
K256(3);
K256(4);
K256(5);
K256(6);
#undef K512
#undef K256

static const small_fn fns512[9] = {NULL,   k512_1, k512_2, k512_3, k512_4,
                                   k512_5, k512_6, k512_7, k512_8};
static const small_fn fns256[7] = {NULL, k256_1, k256_2, k256_3, k256_4, k256_5, k256_6};

/* Outputs one call of the block's kernel makes: V vectors. */
static size_t block_floats(int kb) { return dl_cpu_avx512() ? (kb <= 6 ? 64 : 48) : 16; }

/* x's planes of image i, zero-padded and rounded via compute, into xs. */
static void pad_planes(const small_task *t, const float *x)
{
    const dl_conv_desc *d = t->d;
    int wp = d->w + 2 * d->pad, hp = d->h + 2 * d->pad;
    size_t plane = (size_t)hp * wp;
    memset(xs, 0, (d->c * plane + SMALL_SPILL) * sizeof(float));
    for (int c = 0; c < d->c; c++)
        for (int ih = 0; ih < d->h; ih++) {
            float *dst = xs + c * plane + (size_t)(ih + d->pad) * wp + d->pad;
            dl_cpu_round_run(dst, x + ((size_t)c * d->h + ih) * d->w, t->compute, (size_t)d->w);
        }
}

/* off[j] = where tap j = (c, r, s), in w's order, reads the padded
 * planes, relative to the output: c*hp*wp + r*wp + s. */
static void tap_offsets(const dl_conv_desc *d, int *off)
{
    int wp = d->w + 2 * d->pad, hp = d->h + 2 * d->pad;
    for (int c = 0, j = 0; c < d->c; c++)
        for (int r = 0; r < d->r; r++)
            for (int s = 0; s < d->s; s++, j++)
                off[j] = c * hp * wp + r * wp + s;
}

static void small_task_fn(void *arg, size_t begin, size_t end)
{
    const small_task *t = arg;
    const dl_conv_desc *d = t->d;
    int wp = d->w + 2 * d->pad, taps = d->c * d->r * d->s;
    size_t pq = (size_t)d->p * d->q;
    const float zero[SMALL_K] = {0};
    for (size_t i = begin; i < end; i++) {
        pad_planes(t, t->x + i * (size_t)d->c * d->h * d->w);
        float *yi = t->y + i * (size_t)d->k * pq;
        const float *wt = t->wt;
        for (int bl = 0, k0 = 0; bl < t->blocks;
             k0 += t->kb[bl], wt += (size_t)taps * t->kb[bl], bl++) {
            int kb = t->kb[bl];
            small_fn fn = dl_cpu_avx512() ? fns512[kb] : fns256[kb];
            size_t blk = block_floats(kb);
            /* rows a band: kb planes of rows * wp outputs, rounded up to blocks */
            size_t rows = (SMALL_Y / kb - blk) / wp;
            const float *bias = t->b ? t->b + k0 : zero;
            for (int oh0 = 0; oh0 < d->p; oh0 += (int)rows) {
                int oh1 = oh0 + (int)rows < d->p ? oh0 + (int)rows : d->p;
                size_t o0 = (size_t)oh0 * wp, n = (size_t)(oh1 - oh0) * wp;
                size_t pitch = (n + blk - 1) / blk * blk;
                fn(xs, t->off, taps, wt, bias, ys, pitch, o0, o0 + pitch);
                for (int k = 0; k < kb; k++)
                    for (int oh = oh0; oh < oh1; oh++)
                        memcpy(yi + (size_t)(k0 + k) * pq + (size_t)oh * d->q,
                               ys + k * pitch + (size_t)(oh - oh0) * wp,
                               (size_t)d->q * sizeof(float));
            }
        }
    }
}
#endif

/* --- filter gradient --------------------------------------------------- */

#define FILTER_KB512 3 /* channels a block: 3 x up to 8 taps of accumulators */
#define FILTER_JB512 8
#define FILTER_KB256 2 /* AVX2: 2 x up to 5 */
#define FILTER_JB256 5

#ifdef SMALL_VECTOR
typedef struct filter_task {
    const dl_conv_desc *d;
    dl_dtype compute;
    const float *x, *dy;
    float *dw;
    int off[SMALL_TAPS];
    size_t nvirt; /* outputs a plane at pitch wp, rounded up to vectors */
} filter_task;

/* acc[k][j] (lane sums in memory, 16 or 8 floats each) += the dot
 * products of KB dy runs at dys (pitch nvirt) with JB x runs at
 * xp + off[j], over nvirt outputs. */
typedef void (*filter_fn)(const float *dys, size_t nvirt, const float *xp, const int *off,
                          float *acc, size_t acc_pitch);

T512 SMALL_INLINE void fbody512(int KB, int JB, const float *dys, size_t nvirt, const float *xp,
                                const int *off, float *acc, size_t acc_pitch)
{
    __m512 a[FILTER_KB512][FILTER_JB512];
#pragma GCC unroll 4
    for (int k = 0; k < KB; k++)
#pragma GCC unroll 8
        for (int j = 0; j < JB; j++)
            a[k][j] = _mm512_setzero_ps();
    for (size_t o = 0; o < nvirt; o += 16) {
        __m512 g[FILTER_KB512];
#pragma GCC unroll 4
        for (int k = 0; k < KB; k++)
            g[k] = _mm512_loadu_ps(dys + k * nvirt + o);
#pragma GCC unroll 8
        for (int j = 0; j < JB; j++) {
            __m512 xv = _mm512_loadu_ps(xp + off[j] + o);
            /* one load for the KB products: GCC would fold it into each
             * (a misaligned load splits over two cache lines, twice the cost) */
            __asm__("" : "+v"(xv));
#pragma GCC unroll 4
            for (int k = 0; k < KB; k++)
                a[k][j] = _mm512_fmadd_ps(g[k], xv, a[k][j]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < KB; k++)
#pragma GCC unroll 8
        for (int j = 0; j < JB; j++) {
            float *p = acc + k * acc_pitch + 16 * j;
            _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), a[k][j]));
        }
}

T256 SMALL_INLINE void fbody256(int KB, int JB, const float *dys, size_t nvirt, const float *xp,
                                const int *off, float *acc, size_t acc_pitch)
{
    __m256 a[FILTER_KB256][FILTER_JB256];
#pragma GCC unroll 4
    for (int k = 0; k < KB; k++)
#pragma GCC unroll 8
        for (int j = 0; j < JB; j++)
            a[k][j] = _mm256_setzero_ps();
    for (size_t o = 0; o < nvirt; o += 8) {
        __m256 g[FILTER_KB256];
#pragma GCC unroll 4
        for (int k = 0; k < KB; k++)
            g[k] = _mm256_loadu_ps(dys + k * nvirt + o);
#pragma GCC unroll 8
        for (int j = 0; j < JB; j++) {
            __m256 xv = _mm256_loadu_ps(xp + off[j] + o);
            __asm__("" : "+x"(xv)); /* one load for the KB products, as above */
#pragma GCC unroll 4
            for (int k = 0; k < KB; k++)
                a[k][j] = _mm256_fmadd_ps(g[k], xv, a[k][j]);
        }
    }
#pragma GCC unroll 4
    for (int k = 0; k < KB; k++)
#pragma GCC unroll 8
        for (int j = 0; j < JB; j++) {
            float *p = acc + k * acc_pitch + 8 * j;
            _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), a[k][j]));
        }
}

#define F512(KB, JB)                                                                               \
    T512 static void f512_##KB##_##JB(const float *dys, size_t nvirt, const float *xp,             \
                                      const int *off, float *acc, size_t acc_pitch)                \
    {                                                                                              \
        fbody512(KB, JB, dys, nvirt, xp, off, acc, acc_pitch);                                     \
    }                                                                                              \
    typedef int f512_##KB##_##JB##_defined
#define F256(KB, JB)                                                                               \
    T256 static void f256_##KB##_##JB(const float *dys, size_t nvirt, const float *xp,             \
                                      const int *off, float *acc, size_t acc_pitch)                \
    {                                                                                              \
        fbody256(KB, JB, dys, nvirt, xp, off, acc, acc_pitch);                                     \
    }                                                                                              \
    typedef int f256_##KB##_##JB##_defined
F512(1, 1);
F512(1, 2);
F512(1, 3);
F512(1, 4);
F512(1, 5);
F512(1, 6);
F512(1, 7);
F512(1, 8);
F512(2, 1);
F512(2, 2);
F512(2, 3);
F512(2, 4);
F512(2, 5);
F512(2, 6);
F512(2, 7);
F512(2, 8);
F512(3, 1);
F512(3, 2);
F512(3, 3);
F512(3, 4);
F512(3, 5);
F512(3, 6);
F512(3, 7);
F512(3, 8);
F256(1, 1);
F256(1, 2);
F256(1, 3);
F256(1, 4);
F256(1, 5);
F256(2, 1);
F256(2, 2);
F256(2, 3);
F256(2, 4);
F256(2, 5);
static const filter_fn ffns512[3][8] = {
    {f512_1_1, f512_1_2, f512_1_3, f512_1_4, f512_1_5, f512_1_6, f512_1_7, f512_1_8},
    {f512_2_1, f512_2_2, f512_2_3, f512_2_4, f512_2_5, f512_2_6, f512_2_7, f512_2_8},
    {f512_3_1, f512_3_2, f512_3_3, f512_3_4, f512_3_5, f512_3_6, f512_3_7, f512_3_8}};
static const filter_fn ffns256[2][5] = {{f256_1_1, f256_1_2, f256_1_3, f256_1_4, f256_1_5},
                                        {f256_2_1, f256_2_2, f256_2_3, f256_2_4, f256_2_5}};
#undef F512
#undef F256

/* A thread's lane sums: up to 3 channels x SMALL_TAPS taps x 16 lanes. */
static _Thread_local float lane_acc[FILTER_KB512 * SMALL_TAPS * 16];

/* dw and db of the channel blocks [begin, end), over every image. */
static void filter_task_fn(void *arg, size_t begin, size_t end)
{
    const filter_task *t = arg;
    const dl_conv_desc *d = t->d;
    int avx512 = dl_cpu_avx512(), lanes = avx512 ? 16 : 8;
    int kbmax = avx512 ? FILTER_KB512 : FILTER_KB256, jbmax = avx512 ? FILTER_JB512 : FILTER_JB256;
    int wp = d->w + 2 * d->pad, taps = d->c * d->r * d->s;
    size_t pq = (size_t)d->p * d->q, acc_pitch = (size_t)taps * lanes;
    small_task pt = {.d = d, .compute = t->compute};
    for (size_t bl = begin; bl < end; bl++) {
        int k0 = (int)bl * kbmax, kb = d->k - k0 < kbmax ? d->k - k0 : kbmax;
        memset(lane_acc, 0, (size_t)kb * acc_pitch * sizeof(float));
        for (int i = 0; i < d->n; i++) {
            pad_planes(&pt, t->x + (size_t)i * d->c * d->h * d->w);
            /* dy rows at pitch wp into ys, zeros elsewhere, rounded via compute */
            memset(ys, 0, (size_t)kb * t->nvirt * sizeof(float));
            for (int k = 0; k < kb; k++) {
                const float *g = t->dy + ((size_t)i * d->k + k0 + k) * pq;
                for (int oh = 0; oh < d->p; oh++)
                    dl_cpu_round_run(ys + k * t->nvirt + (size_t)oh * wp, g + (size_t)oh * d->q,
                                     t->compute, (size_t)d->q);
            }
            for (int j0 = 0; j0 < taps; j0 += jbmax) {
                int jb = taps - j0 < jbmax ? taps - j0 : jbmax;
                filter_fn fn = avx512 ? ffns512[kb - 1][jb - 1] : ffns256[kb - 1][jb - 1];
                fn(ys, t->nvirt, xs, t->off + j0, lane_acc + (size_t)j0 * lanes, acc_pitch);
            }
        }
        for (int k = 0; k < kb; k++)
            for (int j = 0; j < taps; j++) {
                const float *a = lane_acc + k * acc_pitch + (size_t)j * lanes;
                double sum = 0.0;
                for (int l = 0; l < lanes; l++)
                    sum += a[l];
                t->dw[(size_t)(k0 + k) * taps + j] += (float)sum;
            }
    }
}
#endif

int dl_cpu_conv_small_filter_fits(const dl_conv_desc *d, dl_dtype compute)
{
    /* a block's dy planes at pitch wp in the y scratch */
    return dl_cpu_conv_small_fits(d, compute) &&
           FILTER_KB512 * (((size_t)d->p * (d->w + 2 * d->pad) + 15) / 16 * 16) <= SMALL_Y;
}

int dl_cpu_conv_small_filter(dl_backend *be, const dl_conv_desc *d, float *dw, const float *dy,
                             const float *x, dl_dtype compute)
{
#ifdef SMALL_VECTOR
    if (!dl_cpu_conv_small_filter_fits(d, compute))
        return dl_error(DL_EINVAL, "conv_backward_filter: no small-channel kernel for this shape");
    filter_task t = {.d = d, .compute = compute, .x = x, .dy = dy, .dw = dw};
    tap_offsets(d, t.off);
    t.nvirt = ((size_t)d->p * (d->w + 2 * d->pad) + 15) / 16 * 16;
    int kbmax = dl_cpu_avx512() ? FILTER_KB512 : FILTER_KB256;
    size_t blocks = (size_t)(d->k + kbmax - 1) / kbmax;
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool)
        dl_pool_for(pool, blocks, 1, filter_task_fn, &t);
    else
        filter_task_fn(&t, 0, blocks);
    return DL_OK;
#else
    (void)be, (void)dw, (void)dy, (void)x, (void)compute;
    return dl_error(DL_EINVAL,
                    "conv_backward_filter: no small-channel kernel for this shape (%dx%d)", d->r,
                    d->s);
#endif
}

/* --- filter gradient with dy in channel blocks ---------------------------
 * A stem whose y the layout plan keeps in blocks of the vector's width
 * (16 channels with AVX-512, 8 with AVX2): the output channels of a
 * block are the lanes, so per output pixel one load of dy and,
 * per tap, a broadcast x and a multiply-add into the tap's accumulator:
 *
 *   dw[k0 + l, j] += sum over i, oh, ow of dy[i, kblk, oh, ow, l] * xpad[i, c_j, oh + r_j, ow + s_j]
 *
 * One input channel (see _lanes_takes for why not three). Taps go in
 * groups of up to 24 (12 with AVX2) accumulators; each image's
 * sums are added in double. Units are (channel block, tap group, part of
 * the images): PARTS fixed parts whatever the thread count, their double
 * sums added in order at the end, so the bits do not depend on it. f32,
 * and bf16 or f16 where the CPU has no arithmetic for them: x rounded as
 * it is padded, dy (unless its producer wrote it rounded) into a
 * thread's scratch an image at a time. */

#define LANES_JB512 24
#define LANES_JB256 12
#define PARTS 4

#ifdef SMALL_VECTOR
typedef struct lanes_task {
    const dl_conv_desc *d;
    dl_dtype compute; /* emulated bf16/f16: x and dy rounded to it first */
    int round_dy;     /* dy not rounded by its producer (dl_conv_desc.rounded) */
    const float *x, *dy;
    double *part; /* [PARTS][k][taps] */
    int off[SMALL_TAPS];
    int groups, gsize; /* tap groups, taps a group (the last may be short) */
} lanes_task;

typedef void (*lanes_fn)(const float *dyb, const float *xp, const int *off, int p, int q, int wp,
                         double *sum, size_t sum_pitch);

/* One image: acc[j] over its p*q pixels, then sum[l * sum_pitch + j] += acc[j][l]. */
T512 SMALL_INLINE void lbody512(int JB, const float *dyb, const float *xp, const int *off, int p,
                                int q, int wp, double *sum, size_t sum_pitch)
{
    __m512 a[LANES_JB512];
#pragma GCC unroll 24
    for (int j = 0; j < JB; j++)
        a[j] = _mm512_setzero_ps();
    for (int oh = 0; oh < p; oh++) {
        const float *xr = xp + (size_t)oh * wp, *g = dyb + (size_t)oh * q * 16;
        for (int ow = 0; ow < q; ow++) {
            __m512 gv = _mm512_loadu_ps(g + (size_t)ow * 16);
#pragma GCC unroll 24
            for (int j = 0; j < JB; j++)
                a[j] = _mm512_fmadd_ps(gv, _mm512_set1_ps(xr[off[j] + ow]), a[j]);
        }
    }
    float lane[16];
    for (int j = 0; j < JB; j++) {
        _mm512_storeu_ps(lane, a[j]);
        for (int l = 0; l < 16; l++)
            sum[l * sum_pitch + j] += lane[l];
    }
}

T256 SMALL_INLINE void lbody256(int JB, const float *dyb, const float *xp, const int *off, int p,
                                int q, int wp, double *sum, size_t sum_pitch)
{
    __m256 a[LANES_JB256];
#pragma GCC unroll 12
    for (int j = 0; j < JB; j++)
        a[j] = _mm256_setzero_ps();
    for (int oh = 0; oh < p; oh++) {
        const float *xr = xp + (size_t)oh * wp, *g = dyb + (size_t)oh * q * 8;
        for (int ow = 0; ow < q; ow++) {
            __m256 gv = _mm256_loadu_ps(g + (size_t)ow * 8);
#pragma GCC unroll 12
            for (int j = 0; j < JB; j++)
                a[j] = _mm256_fmadd_ps(gv, _mm256_broadcast_ss(xr + off[j] + ow), a[j]);
        }
    }
    float lane[8];
    for (int j = 0; j < JB; j++) {
        _mm256_storeu_ps(lane, a[j]);
        for (int l = 0; l < 8; l++)
            sum[l * sum_pitch + j] += lane[l];
    }
}

#define L512(JB)                                                                                   \
    T512 static void l512_##JB(const float *dyb, const float *xp, const int *off, int p, int q,    \
                               int wp, double *sum, size_t sum_pitch)                              \
    {                                                                                              \
        lbody512(JB, dyb, xp, off, p, q, wp, sum, sum_pitch);                                      \
    }                                                                                              \
    typedef int l512_##JB##_defined
#define L256(JB)                                                                                   \
    T256 static void l256_##JB(const float *dyb, const float *xp, const int *off, int p, int q,    \
                               int wp, double *sum, size_t sum_pitch)                              \
    {                                                                                              \
        lbody256(JB, dyb, xp, off, p, q, wp, sum, sum_pitch);                                      \
    }                                                                                              \
    typedef int l256_##JB##_defined
L512(1);
L512(2);
L512(3);
L512(4);
L512(5);
L512(6);
L512(7);
L512(8);
L512(9);
L512(10);
L512(11);
L512(12);
L512(13);
L512(14);
L512(15);
L512(16);
L512(17);
L512(18);
L512(19);
L512(20);
L512(21);
L512(22);
L512(23);
L512(24);
L256(1);
L256(2);
L256(3);
L256(4);
L256(5);
L256(6);
L256(7);
L256(8);
L256(9);
L256(10);
L256(11);
L256(12);
static const lanes_fn lfns512[LANES_JB512] = {l512_1,  l512_2,  l512_3,  l512_4,  l512_5,  l512_6,
                                              l512_7,  l512_8,  l512_9,  l512_10, l512_11, l512_12,
                                              l512_13, l512_14, l512_15, l512_16, l512_17, l512_18,
                                              l512_19, l512_20, l512_21, l512_22, l512_23, l512_24};
static const lanes_fn lfns256[LANES_JB256] = {l256_1, l256_2, l256_3, l256_4,  l256_5,  l256_6,
                                              l256_7, l256_8, l256_9, l256_10, l256_11, l256_12};
#undef L512
#undef L256

/* A thread's copy of one image's block of dy rounded to the compute type. */
#define SMALL_DYR 32768
static _Thread_local float dyr[SMALL_DYR] __attribute__((aligned(64)));

/* unit u = (block, group, part), part fastest */
static void lanes_task_fn(void *arg, size_t begin, size_t end)
{
    const lanes_task *t = arg;
    const dl_conv_desc *d = t->d;
    int blk = d->y_blk, taps = d->c * d->r * d->s, wp = d->w + 2 * d->pad;
    size_t pq = (size_t)d->p * d->q;
    small_task pt = {.d = d, .compute = t->compute};
    for (size_t u = begin; u < end; u++) {
        int part = (int)(u % PARTS), grp = (int)(u / PARTS % (size_t)t->groups);
        int kblk = (int)(u / PARTS / (size_t)t->groups);
        int j0 = grp * t->gsize, jb = taps - j0 < t->gsize ? taps - j0 : t->gsize;
        int i0 = part * d->n / PARTS, i1 = (part + 1) * d->n / PARTS;
        double *sum = t->part + ((size_t)part * d->k + (size_t)kblk * blk) * taps + j0;
        lanes_fn fn = blk == 16 ? lfns512[jb - 1] : lfns256[jb - 1];
        for (int i = i0; i < i1; i++) {
            pad_planes(&pt, t->x + (size_t)i * d->c * d->h * d->w);
            const float *g = t->dy + ((size_t)i * d->k + (size_t)kblk * blk) * pq;
            if (t->round_dy) {
                dl_cpu_round_run(dyr, g, t->compute, pq * blk);
                g = dyr;
            }
            fn(g, xs, t->off + j0, d->p, d->q, wp, sum, (size_t)taps);
        }
    }
}
#endif

/* One input channel only: from 3 (27 taps, the cifar stem 3 -> 32 of
 * bench_conv) oneDNN's kernel was the faster, 95 against 70 GFLOP/s with
 * AVX-512 and 41 against 37 with AVX2; at one (the grey stems 1 -> 16 and
 * 1 -> 32) this one, 54 against 49 and 34 against 7.7. */
int dl_cpu_conv_small_lanes_takes(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    if (!d->y_blk || d->x_blk || d->c != 1 || d->y_blk != (dl_cpu_avx512() ? 16 : 8))
        return 0;
    /* bf16 and f16 where the CPU has no arithmetic for them (dl_cpu_kernel_type):
     * the f32 kernel on rounded operands, as the other paths emulate them */
    if (compute != DL_F32 &&
        ((compute != DL_BF16 && compute != DL_F16) || dl_cpu_kernel_type(be, compute) != DL_F32 ||
         (size_t)d->p * d->q * d->y_blk > SMALL_DYR))
        return 0;
    dl_conv_desc pd = *d; /* the plain kernels' rules, any number of outputs */
    pd.y_blk = 0;
    pd.k = d->k < SMALL_K ? d->k : SMALL_K;
    return dl_cpu_conv_small_fits(&pd, compute);
}

size_t dl_cpu_conv_small_lanes_workspace(const dl_conv_desc *d)
{
    return (size_t)PARTS * d->k * d->c * d->r * d->s * sizeof(double) + 64;
}

int dl_cpu_conv_small_lanes_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                   const float *dy, const float *x, void *ws, dl_dtype compute)
{
#ifdef SMALL_VECTOR
    if (!dl_cpu_conv_small_lanes_takes(be, d, compute))
        return dl_error(DL_EINVAL, "conv_backward_filter: no blocked small-channel kernel here");
    lanes_task t = {.d = d, .compute = compute, .x = x, .dy = dy};
    t.round_dy = compute != DL_F32 && !(d->rounded & DL_CONV_DY_ROUNDED);
    int taps = d->c * d->r * d->s;
    tap_offsets(d, t.off);
    int most = d->y_blk == 16 ? LANES_JB512 : LANES_JB256;
    t.groups = (taps + most - 1) / most;
    t.gsize = (taps + t.groups - 1) / t.groups;
    t.part = (double *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    size_t n = (size_t)PARTS * d->k * taps;
    memset(t.part, 0, n * sizeof(double));
    size_t units = (size_t)(d->k / d->y_blk) * t.groups * PARTS;
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool)
        dl_pool_for(pool, units, 1, lanes_task_fn, &t);
    else
        lanes_task_fn(&t, 0, units);
    for (size_t e = 0; e < (size_t)d->k * taps; e++) {
        double s = 0.0;
        for (int part = 0; part < PARTS; part++)
            s += t.part[(size_t)part * d->k * taps + e];
        dw[e] += (float)s;
    }
    return DL_OK;
#else
    (void)be, (void)dw, (void)dy, (void)x, (void)ws, (void)compute;
    return dl_error(DL_EINVAL, "conv_backward_filter: no blocked small-channel kernel (%d)", d->k);
#endif
}

int dl_cpu_conv_small_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                              const float *w, const float *b, dl_dtype compute)
{
#ifdef SMALL_VECTOR
    if (!dl_cpu_conv_small_fits(d, compute))
        return dl_error(DL_EINVAL, "conv_forward: no small-channel kernel for this shape");
    small_task t;
    float wt[SMALL_K * SMALL_TAPS];
    int taps = d->c * d->r * d->s;
    t.d = d, t.compute = compute, t.x = x, t.b = b, t.y = y, t.wt = wt;
    tap_offsets(d, t.off);
    /* blocks of nearly equal size, each up to the widest kernel's */
    int most = dl_cpu_avx512() ? 8 : 6;
    t.blocks = (d->k + most - 1) / most;
    for (int bl = 0, left = d->k; bl < t.blocks; bl++) {
        t.kb[bl] = (left + (t.blocks - bl) - 1) / (t.blocks - bl);
        left -= t.kb[bl];
    }
    /* w [k, taps] into [taps][kb] per block, rounded via compute */
    float *dst = wt;
    for (int bl = 0, k0 = 0; bl < t.blocks; k0 += t.kb[bl], bl++)
        for (int j = 0; j < taps; j++)
            for (int k = 0; k < t.kb[bl]; k++)
                *dst++ = dl_cpu_round_to(w[(size_t)(k0 + k) * taps + j], compute);
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool)
        dl_pool_for(pool, (size_t)d->n, 1, small_task_fn, &t);
    else
        small_task_fn(&t, 0, (size_t)d->n);
    return DL_OK;
#else
    (void)be, (void)y, (void)x, (void)w, (void)b, (void)compute;
    return dl_error(DL_EINVAL, "conv_forward: no small-channel kernel for this shape (%dx%d)", d->r,
                    d->s);
#endif
}
