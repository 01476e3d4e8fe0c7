/* cpu_conv_depthwise.c - depthwise convolution on the CPU: direct AVX2 kernels, eight channels in the lanes or on padded phase planes
 *
 * Without a channel multiplier and from 8 channels, planes up to 4096
 * padded pixels take the channels-in-lanes kernels (their section below):
 * eight channels of a pixel in one vector. The rest, described first,
 * run on padded planes, row vectors of one channel.
 *
 * cpu_conv_grouped.c hands over every descriptor whose groups equal its
 * input channels (one input channel per group, m = k/c output channels
 * from each: depthwise with a channel multiplier), any kernel size,
 * stride, padding and dilation. Per-group im2col + GEMM spends its time
 * on one-row products there (2 GFLOP/s); these kernels run the taps
 * straight from a padded copy of the input plane.
 *
 * Phase planes. An input plane, padded on every side, is stored as `st`
 * planes of its columns by phase: phase f holds padded columns f, f + st,
 * f + 2 st, ... in rows of `pitch` floats, zeros beyond. Tap (r, s) of
 * output (oh, ow) reads padded row oh*st + r*dil and padded column
 * ow*st + s*dil, which is column ow + (s*dil)/st of phase (s*dil)%st: for
 * every stride and dilation a row of outputs reads a contiguous run of
 * one phase plane, so 8 outputs are one unaligned load per tap. The pitch
 * leaves room for whole vectors past the last output. A part zeroes its
 * planes once; each fill writes only the places of values, so the pad
 * stays zero. The correlation sums 8 vectors at once (8 rows of one
 * vector, 4 of two, 2 of four), so that short rows do not wait on one
 * chain of multiply-adds.
 *
 *   forward   y[o]     = sum over taps t of w[o, t] * plane(x[c]) at t  (+ b[o])
 *   data      dx[c]   += sum over the m outputs o of c of the same correlation
 *                        of plane(dy[o]) with w[o] turned round (stride 1), or,
 *                        at larger strides, w[o, t] * dy[o] scattered at t
 *                        into a padded plane that is added without its pad
 *   filter    dw[o, t] += sum over images of dy[o] . plane(x[c]) at t
 *
 * with c = o / m. Work is cut into at most PARTS fixed parts, each with its
 * own slice of the workspace; a unit is one (image, output channel) plane
 * forward, one (image, input channel) plane for the data gradient (dx
 * written or added to) and one output channel (all images in order; a part
 * walks its channels image after image) for the filter gradient. No unit's
 * sums depend on how the units are cut, so the bits are the same at any
 * thread count. For bf16/f16 compute the operands are rounded through
 * that type as they are copied (a product of two rounded values is exact
 * in f32), as cpu_conv_grouped.c computes.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/half.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE __attribute__((always_inline)) inline

/* Parts the work is cut into (fixed: the workspace holds one slice each). */
#define PARTS 16
/* Largest phase planes (bytes) a slice holds; bigger planes stay with the
 * per-group products. */
#define MAX_PLANE_BYTES (4u << 20)
/* Taps summed a pass in the filter gradient: nine accumulators, one dy
 * vector and one load stay in the 16 registers; 3x3 is one pass. */
#define TAPS_A_PASS 9
/* Output vectors a correlation keeps in registers per tap. */
#define ROW_VECS 4

/* One plane's correlation: input [h, w] padded by padh rows and padw
 * columns, kernel [r, s], output [p, q]. */
typedef struct plane_geom {
    int st, dil, padh, padw, r, s, h, w, p, q;
    int hp, pitch, nvec; /* padded rows, floats per phase row, 8-float vectors per output row */
    size_t phase;        /* floats of one phase plane: hp * pitch */
    size_t plane;        /* floats of the st phase planes */
} plane_geom;

static plane_geom plane_geom_of(int h, int w, int p, int q, int r, int s, int st, int dil, int padh,
                                int padw)
{
    plane_geom g = {st, dil, padh, padw, r, s, h, w, p, q, 0, 0, 0, 0, 0};
    g.hp = h + 2 * padh;
    g.nvec = (q + 7) / 8;
    int cols = (w + 2 * padw + st - 1) / st;
    int need = g.nvec * 8 + (s - 1) * dil / st;
    g.pitch = cols > need ? cols : need;
    g.phase = (size_t)g.hp * g.pitch;
    g.plane = (size_t)st * g.phase;
    return g;
}

/* The descriptor's planes: x's for forward and filter, and where the data
 * gradient is a correlation (stride 1, padding within the kernel's
 * extent) dy's padded by the rest of the extent. */
typedef struct dw_geom {
    plane_geom x, dy;
    int gather;     /* the data gradient correlates dy's planes */
    int m, rs, rsp; /* outputs per input channel, taps, taps rounded up to TAPS_A_PASS */
    size_t dyrow;   /* floats per row of a dy copy: x.nvec * 8 */
    size_t slice;   /* bytes of one part's workspace */
} dw_geom;

static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

static dw_geom geom_of(const dl_conv_desc *d)
{
    dw_geom g;
    int dil = dl_conv_dilation(d);
    g.x = plane_geom_of(d->h, d->w, d->p, d->q, d->r, d->s, d->stride, dil, d->pad, d->pad);
    int eh = dil * (d->r - 1), ew = dil * (d->s - 1); /* dilated extent - 1 */
    g.gather = d->stride == 1 && d->pad <= eh && d->pad <= ew;
    g.dy = g.gather
               ? plane_geom_of(d->p, d->q, d->h, d->w, d->r, d->s, 1, dil, eh - d->pad, ew - d->pad)
               : g.x;
    g.m = d->k / d->c;
    g.rs = d->r * d->s;
    g.rsp = (g.rs + TAPS_A_PASS - 1) / TAPS_A_PASS * TAPS_A_PASS;
    g.dyrow = (size_t)g.x.nvec * 8;
    size_t plane = g.x.plane > g.dy.plane ? g.x.plane : g.dy.plane;
    size_t part_channels = ((size_t)d->k + PARTS - 1) / PARTS;
    g.slice = round64(plane * 4) + round64((size_t)d->p * g.dyrow * 4) + round64((size_t)g.rs * 4) +
              round64(part_channels * g.rsp * 32);
    return g;
}

/* What the CPU has, as libgcc reads it (the init is idempotent: it has
 * run before main unless this is called from another constructor). */
static int cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

int dl_cpu_conv_dw_fits(const dl_conv_desc *d, dl_dtype compute)
{
    if (d->groups <= 1 || d->c != d->groups || d->k % d->c || d->stride <= 0 || d->p <= 0 ||
        d->q <= 0 || !cpu_has_avx2())
        return 0;
    if (compute != DL_F32 && compute != DL_BF16 && compute != DL_F16)
        return 0;
    dw_geom g = geom_of(d);
    return g.x.plane * 4 <= MAX_PLANE_BYTES && g.dy.plane * 4 <= MAX_PLANE_BYTES;
}

/* --- operands ------------------------------------------------------------ */

/* A slice: phase planes, a dy copy, rounded weights, the filter
 * gradient's rsp vector accumulators for each channel of the part. */
typedef struct slice {
    float *plane, *dy, *w, *acc;
} slice;

typedef struct dwtask {
    const dl_conv_desc *d;
    dw_geom g;
    dl_dtype compute;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw;
    const int *toff, *toff_dy; /* per tap: its offset in x's and dy's phase planes */
    char *slices;
    size_t units;
    int nparts;
    int set; /* data gradient: dx written, not added to */
} dwtask;

static slice slice_of(const dwtask *t, size_t part)
{
    const dw_geom *g = &t->g;
    char *p = t->slices + part * g->slice;
    size_t plane = g->x.plane > g->dy.plane ? g->x.plane : g->dy.plane;
    slice s;
    s.plane = (float *)p;
    p += round64(plane * 4);
    s.dy = (float *)p;
    p += round64((size_t)t->d->p * g->dyrow * 4);
    s.w = (float *)p;
    s.acc = (float *)(p + round64((size_t)g->rs * 4));
    return s;
}

/* v rounded through bf16 (dl_f32_to_bf16's bits: nearest even, NaN stays
 * NaN) or f16 (the F16C conversion, nearest even) and back; f32 as is. */
AVX2 static INLINE __m256 round_vec(__m256 v, dl_dtype t)
{
    if (t == DL_F32)
        return v;
    if (t == DL_F16)
        return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i u = _mm256_castps_si256(v);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
    __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    return _mm256_castsi256_ps(
        _mm256_and_si256(_mm256_blendv_epi8(r, q, nan), _mm256_set1_epi32((int)0xffff0000u)));
}

/* Mask of the first n lanes (n in 1..8). */
AVX2 static INLINE __m256i lanes(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* dst[0 .. n) = src[0 .. n) rounded; with `whole`, the last vector is
 * stored whole, zeros past n. */
AVX2 static INLINE void copy_run(float *dst, const float *src, int n, dl_dtype compute, int whole)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, round_vec(_mm256_loadu_ps(src + i), compute));
    if (i < n) {
        __m256i m = lanes(n - i);
        __m256 v = round_vec(_mm256_maskload_ps(src + i, m), compute);
        if (whole)
            _mm256_storeu_ps(dst + i, v);
        else
            _mm256_maskstore_ps(dst + i, m, v);
    }
}

/* Stride 2: the even input columns to ev[0 ..), the odd ones to od[0 ..). */
AVX2 static void split_run(float *ev, float *od, const float *src, int n, dl_dtype compute)
{
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 e, o;
        dl_v_split2(_mm256_loadu_ps(src + i), _mm256_loadu_ps(src + i + 8), &e, &o);
        _mm256_storeu_ps(ev + i / 2, round_vec(e, compute));
        _mm256_storeu_ps(od + i / 2, round_vec(o, compute));
    }
    if (i < n) { /* the last 1 to 15 columns: ceil(left / 2) even ones, floor odd */
        int left = n - i;
        __m256 a = _mm256_maskload_ps(src + i, lanes(left < 8 ? left : 8));
        __m256 b =
            left > 8 ? _mm256_maskload_ps(src + i + 8, lanes(left - 8)) : _mm256_setzero_ps();
        __m256 e, o;
        dl_v_split2(a, b, &e, &o);
        _mm256_maskstore_ps(ev + i / 2, lanes((left + 1) / 2), round_vec(e, compute));
        if (left > 1)
            _mm256_maskstore_ps(od + i / 2, lanes(left / 2), round_vec(o, compute));
    }
}

/* The phase planes of plane src [g->h, g->w], rounded through compute:
 * only the places of src's values are written, so the pad and the room
 * past the rows keep the zeros of the first fill (zero_planes) from one
 * plane to the next. */
AVX2 static void fill_planes(float *P, const float *src, const plane_geom *g, dl_dtype compute)
{
    for (int ih = 0; ih < g->h; ih++) {
        const float *row = src + (size_t)ih * g->w;
        float *prow = P + (size_t)(ih + g->padh) * g->pitch;
        if (g->st == 1) {
            copy_run(prow + g->padw, row, g->w, compute, 0);
        } else if (g->st == 2) {
            /* padded column iw + padw: phase (iw + padw) % 2, column (iw + padw) / 2 */
            int f = g->padw & 1;
            split_run(prow + (size_t)f * g->phase + g->padw / 2,
                      prow + (size_t)(f ^ 1) * g->phase + (g->padw + 1) / 2, row, g->w, compute);
        } else {
            for (int iw = 0; iw < g->w; iw++) {
                int pc = iw + g->padw;
                prow[(size_t)(pc % g->st) * g->phase + pc / g->st] =
                    dl_cpu_round_to(row[iw], compute);
            }
        }
    }
}

/* Asks for the lines of [p, p + bytes): the next unit's plane, read
 * while this one's taps run (a plane is a few KB: the hardware's stream
 * detection alone leaves the first lines of each to wait for memory). */
static INLINE void prefetch_run(const void *p, size_t bytes)
{
    const char *c = p;
    for (size_t at = 0; at < bytes; at += 64)
        __builtin_prefetch(c + at);
}

/* Zeros over the phase planes of g, once per part before its fills. */
static void zero_planes(float *P, const plane_geom *g) { memset(P, 0, g->plane * sizeof *P); }

/* dy plane src [p, q] into rows of dyrow floats, zeros past q, rounded. */
AVX2 static void copy_dy(float *dst, const float *src, const plane_geom *g, size_t dyrow,
                         dl_dtype compute)
{
    for (int oh = 0; oh < g->p; oh++)
        copy_run(dst + (size_t)oh * dyrow, src + (size_t)oh * g->q, g->q, compute, 1);
}

/* wr [rs] = w [rs] rounded, in reverse order when turned. */
static void round_weights(float *wr, const float *w, int rs, dl_dtype compute, int turned)
{
    for (int t = 0; t < rs; t++)
        wr[t] = dl_cpu_round_to(w[turned ? rs - 1 - t : t], compute);
}

/* --- correlation of one plane (forward; data gradient at stride 1) ------- */

/* RB output rows (q floats apart in out) times NV vectors from column
 * v0*8 on: the sum over taps of wr[t] times the plane at toff[t] (rows
 * rstep floats apart), on top of the outputs' values (add) or of bias.
 * RB x NV sums at once, so that the taps' chains of multiply-adds overlap
 * (a row of one vector alone waits on each add's latency); each output's
 * sum runs over the taps in order whatever the block. */
AVX2 static INLINE void block_vecs(float *out, size_t q, const float *base, size_t rstep,
                                   const float *wr, const int *toff, int rs, float bias, int add,
                                   int v0, int RB, int NV)
{
    __m256 acc[8][4];
#pragma GCC unroll 8
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            int col = (v0 + j) * 8;
            const float *o = out + i * q + col;
            acc[i][j] = !add                ? _mm256_set1_ps(bias)
                        : col + 8 <= (int)q ? _mm256_loadu_ps(o)
                                            : _mm256_maskload_ps(o, lanes((int)q - col));
        }
    const float *b = base + (size_t)v0 * 8;
    for (int t = 0; t < rs; t++) {
        __m256 wv = _mm256_broadcast_ss(wr + t);
        const float *bt = b + toff[t];
#pragma GCC unroll 8
        for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                acc[i][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(bt + i * rstep + j * 8), acc[i][j]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < RB; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            int col = (v0 + j) * 8;
            float *o = out + i * q + col;
            if (col + 8 <= (int)q)
                _mm256_storeu_ps(o, acc[i][j]);
            else
                _mm256_maskstore_ps(o, lanes((int)q - col), acc[i][j]);
        }
}

/* Rows [oh, oh + rows) of the output, rows <= 8 / nv, in vectors v0 ..
 * v0 + nv (nv 1, 2 or 4): block_vecs with both counts constant. */
AVX2 static void rows_vecs(float *out, const float *P, const float *wr, const int *toff,
                           const plane_geom *g, int rs, float bias, int add, int oh, int rows,
                           int v0, int nv)
{
    size_t rstep = (size_t)g->st * g->pitch, q = (size_t)g->q;
    float *o = out + (size_t)oh * q;
    const float *base = P + (size_t)oh * rstep;
#define BV(RB, NV) block_vecs(o, q, base, rstep, wr, toff, rs, bias, add, v0, RB, NV)
    if (nv == 1) {
        switch (rows) {
        case 1: BV(1, 1); break;
        case 2: BV(2, 1); break;
        case 3: BV(3, 1); break;
        case 4: BV(4, 1); break;
        case 5: BV(5, 1); break;
        case 6: BV(6, 1); break;
        case 7: BV(7, 1); break;
        default: BV(8, 1); break;
        }
    } else if (nv == 2) {
        switch (rows) {
        case 1: BV(1, 2); break;
        case 2: BV(2, 2); break;
        case 3: BV(3, 2); break;
        default: BV(4, 2); break;
        }
    } else {
        if (rows == 1)
            BV(1, 4);
        else
            BV(2, 4);
    }
#undef BV
}

/* out plane [p, q] (=, plus bias, or += with add) from the phase planes P:
 * blocks of 8 sums (8 rows of one vector, 4 rows of two, 2 rows of four). */
AVX2 static void corr_plane(float *out, const float *P, const float *wr, const int *toff,
                            const plane_geom *g, int rs, float bias, int add)
{
    int v = 0;
    for (; v < g->nvec; v += g->nvec - v >= 4 ? 4 : g->nvec - v >= 2 ? 2 : 1) {
        int nv = g->nvec - v >= 4 ? 4 : g->nvec - v >= 2 ? 2 : 1, rb = 8 / nv;
        for (int oh = 0; oh < g->p; oh += rb)
            rows_vecs(out, P, wr, toff, g, rs, bias, add, oh, g->p - oh < rb ? g->p - oh : rb, v,
                      nv);
    }
}

/* Units [*u0, *u1) of part `part` of nparts (either path's tasks). */
static void unit_range(size_t units, int nparts, size_t part, size_t *u0, size_t *u1)
{
    *u0 = part * units / (size_t)nparts;
    *u1 = (part + 1) * units / (size_t)nparts;
}

static void fwd_task(void *arg, size_t begin, size_t end)
{
    const dwtask *t = arg;
    const dw_geom *g = &t->g;
    const dl_conv_desc *d = t->d;
    for (size_t part = begin; part < end; part++) {
        slice sl = slice_of(t, part);
        size_t u0, u1, filled = SIZE_MAX; /* the (image, channel) plane sl.plane holds */
        unit_range(t->units, t->nparts, part, &u0, &u1);
        zero_planes(sl.plane, &g->x);
        for (size_t u = u0; u < u1; u++) { /* u = (image, output channel) */
            size_t i = u / (size_t)d->k, o = u % (size_t)d->k;
            size_t src = i * (size_t)d->c + o / (size_t)g->m;
            if (src != filled) {
                size_t hw = (size_t)d->h * d->w;
                fill_planes(sl.plane, t->x + src * hw, &g->x, t->compute);
                if (u + 1 < u1)
                    prefetch_run(t->x + (src + 1) * hw, hw * sizeof(float));
                filled = src;
            }
            round_weights(sl.w, t->w + o * (size_t)g->rs, g->rs, t->compute, 0);
            corr_plane(t->y + u * (size_t)d->p * d->q, sl.plane, sl.w, t->toff, &g->x, g->rs,
                       t->b ? t->b[o] : 0.0f, 0);
        }
    }
}

/* --- backward data at larger strides: scatter ---------------------------- */

/* D += w[t] * dy shifted to tap t's place, for every tap: one tap over the
 * whole plane at a time, so that a store is out of the store buffer before
 * the next tap's overlapping load reads it. */
AVX2 static void scatter_plane(float *D, const float *dyc, const float *wr, const int *toff,
                               const plane_geom *g, size_t dyrow)
{
    for (int t = 0; t < g->r * g->s; t++) {
        __m256 wv = _mm256_broadcast_ss(wr + t);
        for (int oh = 0; oh < g->p; oh++) {
            float *drow = D + (size_t)oh * g->st * g->pitch + toff[t];
            const float *dyr = dyc + (size_t)oh * dyrow;
            for (int v = 0; v < g->nvec; v++) {
                __m256 s = _mm256_loadu_ps(drow + v * 8);
                _mm256_storeu_ps(drow + v * 8,
                                 _mm256_fmadd_ps(wv, _mm256_loadu_ps(dyr + v * 8), s));
            }
        }
    }
}

/* Stride 2: dst[2i] += ev[i], dst[2i + 1] += od[i] for i < n/2
 * (split_run's adjoint); = instead of += when set. */
AVX2 static void merge_add(float *dst, const float *ev, const float *od, int n, int set)
{
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a, b;
        dl_v_zip2(_mm256_loadu_ps(ev + i / 2), _mm256_loadu_ps(od + i / 2), &a, &b);
        if (!set) {
            a = _mm256_add_ps(_mm256_loadu_ps(dst + i), a);
            b = _mm256_add_ps(_mm256_loadu_ps(dst + i + 8), b);
        }
        _mm256_storeu_ps(dst + i, a);
        _mm256_storeu_ps(dst + i + 8, b);
    }
    if (i < n) { /* the last 1 to 15 columns */
        int left = n - i;
        __m256 e = _mm256_maskload_ps(ev + i / 2, lanes((left + 1) / 2));
        __m256 o = left > 1 ? _mm256_maskload_ps(od + i / 2, lanes(left / 2)) : _mm256_setzero_ps();
        __m256 a, b;
        dl_v_zip2(e, o, &a, &b);
        __m256i m0 = lanes(left < 8 ? left : 8);
        if (!set)
            a = _mm256_add_ps(_mm256_maskload_ps(dst + i, m0), a);
        _mm256_maskstore_ps(dst + i, m0, a);
        if (left > 8) {
            __m256i m1 = lanes(left - 8);
            if (!set)
                b = _mm256_add_ps(_mm256_maskload_ps(dst + i + 8, m1), b);
            _mm256_maskstore_ps(dst + i + 8, m1, b);
        }
    }
}

/* dx plane [h, w] += D's rows and columns that are not pad (fill_planes'
 * adjoint); = when set. */
AVX2 static void add_unpadded(float *dx, const float *D, const plane_geom *g, int set)
{
    for (int ih = 0; ih < g->h; ih++) {
        float *xr = dx + (size_t)ih * g->w;
        const float *drow = D + (size_t)(ih + g->padh) * g->pitch;
        if (g->st == 2) {
            int f = g->padw & 1;
            merge_add(xr, drow + (size_t)f * g->phase + g->padw / 2,
                      drow + (size_t)(f ^ 1) * g->phase + (g->padw + 1) / 2, g->w, set);
            continue;
        }
        for (int iw = 0; iw < g->w; iw++) {
            int pc = iw + g->padw;
            float v = drow[(size_t)(pc % g->st) * g->phase + pc / g->st];
            xr[iw] = set ? v : xr[iw] + v;
        }
    }
}

static void data_task(void *arg, size_t begin, size_t end)
{
    const dwtask *t = arg;
    const dw_geom *g = &t->g;
    const dl_conv_desc *d = t->d;
    size_t pq = (size_t)d->p * d->q, hw = (size_t)d->h * d->w;
    for (size_t part = begin; part < end; part++) {
        slice sl = slice_of(t, part);
        size_t u0, u1;
        unit_range(t->units, t->nparts, part, &u0, &u1);
        if (g->gather)
            zero_planes(sl.plane, &g->dy);
        for (size_t u = u0; u < u1; u++) { /* u = (image, input channel) */
            size_t i = u / (size_t)d->c, c = u % (size_t)d->c;
            if (!g->gather)
                memset(sl.plane, 0, g->x.plane * sizeof(float));
            for (int j = 0; j < g->m; j++) {
                size_t o = c * (size_t)g->m + (size_t)j;
                const float *dyo = t->dy + (i * (size_t)d->k + o) * pq;
                round_weights(sl.w, t->w + o * (size_t)g->rs, g->rs, t->compute, g->gather);
                prefetch_run(dyo + pq, pq * sizeof(float));
                if (g->gather) {
                    fill_planes(sl.plane, dyo, &g->dy, t->compute);
                    corr_plane(t->dx + u * hw, sl.plane, sl.w, t->toff_dy, &g->dy, g->rs, 0,
                               !t->set || j > 0);
                    continue;
                }
                copy_dy(sl.dy, dyo, &g->x, g->dyrow, t->compute);
                scatter_plane(sl.plane, sl.dy, sl.w, t->toff, &g->x, g->dyrow);
            }
            if (!g->gather)
                add_unpadded(t->dx + u * hw, sl.plane, &g->x, t->set);
        }
    }
}

/* --- backward filter ----------------------------------------------------- */

/* acc[j] += dy . plane at tap toff[j] over the plane's outputs, for the
 * TAPS_A_PASS taps of toff (the table is padded to a multiple of them
 * with offset 0, whose sums are dropped). The dy copy's zeros past q
 * cancel the plane values the last vector reads beyond the outputs. */
AVX2 static INLINE void filter_taps(__m256 *acc, const float *P, const float *dyc, const int *toff,
                                    const plane_geom *g, size_t dyrow)
{
    __m256 a[TAPS_A_PASS];
#pragma GCC unroll 9
    for (int j = 0; j < TAPS_A_PASS; j++)
        a[j] = acc[j];
    for (int oh = 0; oh < g->p; oh++) {
        const float *base = P + (size_t)oh * g->st * g->pitch;
        const float *dyr = dyc + (size_t)oh * dyrow;
        for (int v = 0; v < g->nvec; v++) {
            __m256 dv = _mm256_loadu_ps(dyr + v * 8);
#pragma GCC unroll 9
            for (int j = 0; j < TAPS_A_PASS; j++)
                a[j] = _mm256_fmadd_ps(dv, _mm256_loadu_ps(base + toff[j] + v * 8), a[j]);
        }
    }
#pragma GCC unroll 9
    for (int j = 0; j < TAPS_A_PASS; j++)
        acc[j] = a[j];
}

AVX2 static void filter_plane(__m256 *acc, const float *P, const float *dyc, const int *toff,
                              const dw_geom *g)
{
    for (int t = 0; t < g->rs; t += TAPS_A_PASS)
        filter_taps(acc + t, P, dyc, toff + t, &g->x, g->dyrow);
}

/* The 8 lanes of v added in a fixed order. */
AVX2 static float lane_sum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* A part's output channels [o0, o1), image after image (the planes of
 * an image's channels lie end to end: one stream through x and dy rather
 * than a jump of a whole image per plane); each channel's sums still run
 * over the images in order, so the bits are those of any cut. */
AVX2 static void filter_task(void *arg, size_t begin, size_t end)
{
    const dwtask *t = arg;
    const dw_geom *g = &t->g;
    const dl_conv_desc *d = t->d;
    size_t pq = (size_t)d->p * d->q, hw = (size_t)d->h * d->w;
    for (size_t part = begin; part < end; part++) {
        slice sl = slice_of(t, part);
        __m256 *acc = (__m256 *)sl.acc;
        size_t o0, o1, filled = SIZE_MAX;
        unit_range(t->units, t->nparts, part, &o0, &o1);
        for (size_t j = 0; j < (o1 - o0) * (size_t)g->rsp; j++)
            acc[j] = _mm256_setzero_ps();
        zero_planes(sl.plane, &g->x);
        for (int i = 0; i < d->n; i++)
            for (size_t o = o0; o < o1; o++) {
                size_t src = (size_t)i * d->c + o / (size_t)g->m;
                if (src != filled) {
                    fill_planes(sl.plane, t->x + src * hw, &g->x, t->compute);
                    prefetch_run(t->x + (src + 1) * hw, hw * sizeof(float));
                    filled = src;
                }
                const float *dyo = t->dy + ((size_t)i * d->k + o) * pq;
                copy_dy(sl.dy, dyo, &g->x, g->dyrow, t->compute);
                prefetch_run(dyo + pq, pq * sizeof(float));
                filter_plane(acc + (o - o0) * (size_t)g->rsp, sl.plane, sl.dy, t->toff, g);
            }
        for (size_t o = o0; o < o1; o++) {
            float *dwo = t->dw + o * (size_t)g->rs;
            for (int j = 0; j < g->rs; j++)
                dwo[j] += lane_sum(acc[(o - o0) * (size_t)g->rsp + (size_t)j]);
        }
    }
}

/* --- channels in lanes: short rows -------------------------------------- */

/* Short rows waste most of a row vector's lanes and pay each plane's
 * fixed costs for few outputs (a MobileNet's 14x14 and 7x7 stages ran at
 * 5-14 GFLOP/s on the planes above). Without a channel multiplier, eight
 * channels of an image share the eight lanes instead:
 * a padded buffer holds each pixel's eight values ([hp][wp][8], filled by
 * 8x8 transposes of eight pixels of the eight planes' rows), a tap of
 * eight output pixels is eight aligned loads times the vector of the
 * channels' weights, and the eight outputs turn back into the planes' rows
 * by the same transpose. The last block's missing channels are zero lanes
 * that are never stored. Units: (image, block of 8 channels) forward and
 * data, a block over every image (in order) for the filter; each lane's
 * sums run in the same order as the planes' (taps in order; images, then
 * pixels), at any thread count. */
/* Padded pixels of one block's buffer: 32 bytes each (at most 128 KB). */
#define LANES_MAX_PIXELS 4096

/* One correlation in lanes: input [h, w] padded by pad (rows and
 * columns), kernel [r, s], output [p, q], taps st and dil apart. */
typedef struct lane_geom {
    int h, w, pad, st, dil, r, s, p, q, hp, wp;
    size_t floats; /* of the padded buffer, with room for reads past its end */
} lane_geom;

static lane_geom lane_geom_of(int h, int w, int pad, int st, int dil, int r, int s, int p, int q)
{
    lane_geom g = {h, w, pad, st, dil, r, s, p, q, h + 2 * pad, w + 2 * pad, 0};
    /* the eighth pixel of a row's last block may read 8 st columns past it */
    g.floats = ((size_t)g.hp * g.wp + 8u * st + 8) * 8;
    return g;
}

typedef struct lanes_plan {
    int ok;            /* the lanes path takes d */
    int blocks;        /* of 8 channels */
    lane_geom x, dy;   /* x for forward, filter and the scatter; dy for a gathered dx */
    int gather;        /* dx as the correlation of dy (stride 1, pad within the extent) */
    size_t buf, dybuf; /* floats of a part's buffer and of its dy pixels (filter) */
} lanes_plan;

static lanes_plan lanes_plan_of(const dl_conv_desc *d)
{
    lanes_plan L = {0};
    int dil = dl_conv_dilation(d);
    int eh = dil * (d->r - 1), ew = dil * (d->s - 1);
    L.x = lane_geom_of(d->h, d->w, d->pad, d->stride, dil, d->r, d->s, d->p, d->q);
    L.gather = d->stride == 1 && d->pad <= eh && d->pad <= ew && eh == ew;
    L.dy = L.gather ? lane_geom_of(d->p, d->q, eh - d->pad, 1, dil, d->r, d->s, d->h, d->w) : L.x;
    L.blocks = (d->c + 7) / 8;
    L.buf = L.x.floats > L.dy.floats ? L.x.floats : L.dy.floats;
    L.dybuf = (size_t)d->p * d->q * 8;
    L.ok = d->k == d->c && d->c >= 8 && d->r * d->s <= 64 &&
           (size_t)L.x.hp * L.x.wp <= LANES_MAX_PIXELS &&
           (size_t)L.dy.hp * L.dy.wp <= LANES_MAX_PIXELS;
    /* DLBENCH_DW_LANES=0 keeps the planes (read per call: bench_conv's
     * BENCH_CONV_VS=lanes switches it) */
    const char *e = getenv("DLBENCH_DW_LANES");
    if (e && !strcmp(e, "0"))
        L.ok = 0;
    return L;
}

int dl_cpu_conv_dw_lanes(const dl_conv_desc *d) { return lanes_plan_of(d).ok; }

/* Bytes: the blocks' weights [blocks][rs][8], then per part the padded
 * buffer and the dy pixels. */
static size_t lanes_workspace(const dl_conv_desc *d, const lanes_plan *L)
{
    size_t w = round64((size_t)L->blocks * d->r * d->s * 8 * sizeof(float));
    return 64 + w + PARTS * (round64(L->buf * 4) + round64(L->dybuf * 4));
}

/* The 8x8 transpose: r[i] lane j becomes r[j] lane i. */
AVX2 static INLINE void tr8(__m256 r[8])
{
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* Eight pixels from column col of row `row` of the nch planes at src
 * (plane floats apart, rows of w): r[j] = pixel col + j's channels; n of
 * them exist, the other lanes and channels 0. */
AVX2 static INLINE void load_pixels(__m256 r[8], const float *src, size_t plane, int nch, int w,
                                    int row, int col, int n)
{
    __m256i m = lanes(n);
#pragma GCC unroll 8
    for (int ch = 0; ch < 8; ch++) {
        const float *p = src + (size_t)ch * plane + (size_t)row * w + col;
        r[ch] = ch >= nch ? _mm256_setzero_ps()
                : n == 8  ? _mm256_loadu_ps(p)
                          : _mm256_maskload_ps(p, m);
    }
    tr8(r);
}

/* Eight pixel vectors back into the nch planes at dst: r[j] is pixel col
 * + j, n of them stored (written, or added to when add). */
AVX2 static INLINE void store_pixels(float *dst, size_t plane, int nch, int w, int row, int col,
                                     int n, __m256 r[8], int add)
{
    tr8(r);
    __m256i m = lanes(n);
#pragma GCC unroll 8
    for (int ch = 0; ch < nch; ch++) {
        float *p = dst + (size_t)ch * plane + (size_t)row * w + col;
        __m256 v = r[ch];
        if (n == 8) {
            if (add)
                v = _mm256_add_ps(_mm256_loadu_ps(p), v);
            _mm256_storeu_ps(p, v);
        } else {
            if (add)
                v = _mm256_add_ps(_mm256_maskload_ps(p, m), v);
            _mm256_maskstore_ps(p, m, v);
        }
    }
}

/* The buffer B's interior from the nch planes at src (g's input), rounded;
 * the pad keeps the zeros of the part's first fill. */
AVX2 static void pack_lanes(float *B, const float *src, int nch, const lane_geom *g,
                            dl_dtype compute)
{
    size_t plane = (size_t)g->h * g->w;
    for (int ih = 0; ih < g->h; ih++) {
        float *row = B + ((size_t)(ih + g->pad) * g->wp + g->pad) * 8;
        for (int iw = 0; iw < g->w; iw += 8) {
            int n = g->w - iw < 8 ? g->w - iw : 8;
            __m256 r[8];
            load_pixels(r, src, plane, nch, g->w, ih, iw, n);
            for (int j = 0; j < n; j++)
                _mm256_storeu_ps(row + (size_t)(iw + j) * 8, round_vec(r[j], compute));
        }
    }
}

/* Tap (r, s)'s offset in floats in g's buffer. */
static int lane_tap(const lane_geom *g, int r, int s)
{
    return (r * g->dil * g->wp + s * g->dil) * 8;
}

/* The nch output planes at out [p, q] (+ bias per lane, or += when add)
 * from buffer B: the sum over taps t of W[t] times B at tap t. */
AVX2 static void corr_lanes(float *out, int nch, const float *B, const float *W, const lane_geom *g,
                            __m256 bias, int add)
{
    size_t plane = (size_t)g->p * g->q, step = (size_t)g->st * 8;
    for (int oh = 0; oh < g->p; oh++) {
        const float *brow = B + (size_t)oh * g->st * g->wp * 8;
        for (int ow = 0; ow < g->q; ow += 8) {
            int n = g->q - ow < 8 ? g->q - ow : 8;
            __m256 acc[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                acc[j] = bias;
            const float *b0 = brow + (size_t)ow * step;
            for (int r = 0; r < g->r; r++)
                for (int s = 0; s < g->s; s++) {
                    __m256 wv = _mm256_loadu_ps(W + (size_t)(r * g->s + s) * 8);
                    const float *bt = b0 + lane_tap(g, r, s);
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++)
                        acc[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(bt + j * step), acc[j]);
                }
            store_pixels(out, plane, nch, g->q, oh, ow, n, acc, add);
        }
    }
}

/* The weights of every block, [blocks][rs][8] (tap order reversed when
 * turned: the data gradient's correlation), rounded; missing channels 0. */
static void pack_lane_weights(float *W, const float *w, const dl_conv_desc *d, int blocks,
                              dl_dtype compute, int turned)
{
    int rs = d->r * d->s;
    for (int b = 0; b < blocks; b++)
        for (int t = 0; t < rs; t++)
#pragma GCC unroll 8
            for (int ch = 0; ch < 8; ch++) {
                int c = b * 8 + ch, tap = turned ? rs - 1 - t : t;
                W[((size_t)b * rs + t) * 8 + ch] =
                    c < d->c ? dl_cpu_round_to(w[(size_t)c * rs + tap], compute) : 0.0f;
            }
}

typedef struct lanes_task {
    const dl_conv_desc *d;
    lanes_plan L;
    dl_dtype compute;
    const float *x, *b, *dy, *W;
    float *y, *dx, *dw;
    char *slices;
    size_t units, slice;
    int nparts, set;
} lanes_task;

/* Channels of the block of 8 from c0 that exist: the last block's may be
 * fewer. */
static int block_channels(const dl_conv_desc *d, size_t c0)
{
    return d->c - (int)c0 < 8 ? d->c - (int)c0 : 8;
}

static float *lanes_buf(const lanes_task *t, size_t part)
{
    return (float *)(t->slices + part * t->slice);
}

AVX2 static void lanes_fwd_task(void *arg, size_t begin, size_t end)
{
    const lanes_task *t = arg;
    const dl_conv_desc *d = t->d;
    const lane_geom *g = &t->L.x;
    size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q, rs = (size_t)d->r * d->s;
    for (size_t part = begin; part < end; part++) {
        float *B = lanes_buf(t, part);
        size_t u0, u1;
        unit_range(t->units, t->nparts, part, &u0, &u1);
        memset(B, 0, t->L.buf * sizeof(float));
        for (size_t u = u0; u < u1; u++) { /* (image, block) */
            size_t i = u / (size_t)t->L.blocks, blk = u % (size_t)t->L.blocks, c0 = blk * 8;
            int nch = block_channels(d, c0);
            const float *xb = t->x + (i * d->c + c0) * hw;
            /* the next unit's planes (they follow these) while this one
             * runs: eight planes at once are eight streams, which the
             * hardware's prefetch alone leaves waiting on memory */
            if (u + 1 < u1)
                prefetch_run(xb + (size_t)nch * hw, (size_t)8 * hw * sizeof(float));
            pack_lanes(B, xb, nch, g, t->compute);
            __m256 bias = _mm256_setzero_ps();
            if (t->b)
                bias = _mm256_maskload_ps(t->b + c0, lanes(nch));
            corr_lanes(t->y + (i * d->k + c0) * pq, nch, B, t->W + blk * rs * 8, g, bias, 0);
        }
    }
}

/* dx at strides over 1: each dy pixel vector times each tap's weights is
 * added into the padded buffer at the tap's place, then the interior goes
 * back into the planes. */
AVX2 static void scatter_lanes(float *dx, int nch, float *B, const float *dyb, const float *W,
                               const lane_geom *g, int set, dl_dtype compute)
{
    size_t pq = (size_t)g->p * g->q, step = (size_t)g->st * 8;
    memset(B, 0, (size_t)g->hp * g->wp * 8 * sizeof(float));
    for (int oh = 0; oh < g->p; oh++) {
        float *brow = B + (size_t)oh * g->st * g->wp * 8;
        for (int ow = 0; ow < g->q; ow += 8) {
            int n = g->q - ow < 8 ? g->q - ow : 8;
            __m256 v[8];
            load_pixels(v, dyb, pq, nch, g->q, oh, ow, n);
            for (int j = 0; j < n; j++)
                v[j] = round_vec(v[j], compute);
            for (int r = 0; r < g->r; r++)
                for (int s = 0; s < g->s; s++) {
                    __m256 wv = _mm256_loadu_ps(W + (size_t)(r * g->s + s) * 8);
                    float *bt = brow + (size_t)ow * step + lane_tap(g, r, s);
                    for (int j = 0; j < n; j++) {
                        float *p = bt + j * step;
                        _mm256_storeu_ps(p, _mm256_fmadd_ps(wv, v[j], _mm256_loadu_ps(p)));
                    }
                }
        }
    }
    size_t hw = (size_t)g->h * g->w;
    for (int ih = 0; ih < g->h; ih++) {
        const float *row = B + ((size_t)(ih + g->pad) * g->wp + g->pad) * 8;
        for (int iw = 0; iw < g->w; iw += 8) {
            int n = g->w - iw < 8 ? g->w - iw : 8;
            __m256 v[8];
            for (int j = 0; j < 8; j++)
                v[j] = j < n ? _mm256_loadu_ps(row + (size_t)(iw + j) * 8) : _mm256_setzero_ps();
            store_pixels(dx, hw, nch, g->w, ih, iw, n, v, !set);
        }
    }
}

AVX2 static void lanes_data_task(void *arg, size_t begin, size_t end)
{
    const lanes_task *t = arg;
    const dl_conv_desc *d = t->d;
    size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q, rs = (size_t)d->r * d->s;
    for (size_t part = begin; part < end; part++) {
        float *B = lanes_buf(t, part);
        size_t u0, u1;
        unit_range(t->units, t->nparts, part, &u0, &u1);
        memset(B, 0, t->L.buf * sizeof(float));
        for (size_t u = u0; u < u1; u++) { /* (image, block) */
            size_t i = u / (size_t)t->L.blocks, blk = u % (size_t)t->L.blocks, c0 = blk * 8;
            int nch = block_channels(d, c0);
            const float *dyo = t->dy + (i * d->k + c0) * pq;
            float *dxo = t->dx + (i * d->c + c0) * hw;
            const float *W = t->W + blk * rs * 8;
            if (u + 1 < u1) {
                prefetch_run(dyo + (size_t)nch * pq, (size_t)8 * pq * sizeof(float));
                if (!t->set)
                    prefetch_run(dxo + (size_t)nch * hw, (size_t)8 * hw * sizeof(float));
            }
            if (t->L.gather) {
                pack_lanes(B, dyo, nch, &t->L.dy, t->compute);
                corr_lanes(dxo, nch, B, W, &t->L.dy, _mm256_setzero_ps(), !t->set);
            } else {
                scatter_lanes(dxo, nch, B, dyo, W, &t->L.x, t->set, t->compute);
            }
        }
    }
}

/* acc[j] += dy . B at tap j over the outputs, for the nt taps from tap t0. */
AVX2 static INLINE void filter_lanes_taps(__m256 *acc, const float *B, const float *dyb,
                                          const lane_geom *g, int t0, int nt)
{
    __m256 a[9];
    int off[9];
    for (int j = 0; j < 9; j++) {
        int t = t0 + (j < nt ? j : 0);
        a[j] = acc[j];
        off[j] = lane_tap(g, t / g->s, t % g->s);
    }
    size_t step = (size_t)g->st * 8;
    for (int oh = 0; oh < g->p; oh++) {
        const float *brow = B + (size_t)oh * g->st * g->wp * 8;
        const float *drow = dyb + (size_t)oh * g->q * 8;
        for (int ow = 0; ow < g->q; ow++) {
            __m256 dv = _mm256_loadu_ps(drow + (size_t)ow * 8);
            const float *bp = brow + (size_t)ow * step;
#pragma GCC unroll 9
            for (int j = 0; j < 9; j++)
                a[j] = _mm256_fmadd_ps(dv, _mm256_loadu_ps(bp + off[j]), a[j]);
        }
    }
    for (int j = 0; j < nt; j++)
        acc[j] = a[j];
}

AVX2 static void lanes_filter_task(void *arg, size_t begin, size_t end)
{
    const lanes_task *t = arg;
    const dl_conv_desc *d = t->d;
    const lane_geom *g = &t->L.x;
    size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q;
    int rs = d->r * d->s;
    for (size_t part = begin; part < end; part++) {
        float *B = lanes_buf(t, part), *dyb = B + t->L.buf;
        size_t u0, u1;
        unit_range(t->units, t->nparts, part, &u0, &u1);
        memset(B, 0, t->L.buf * sizeof(float));
        for (size_t blk = u0; blk < u1; blk++) { /* a block, every image */
            size_t c0 = blk * 8;
            int nch = block_channels(d, c0);
            __m256 acc[64 + 9]; /* rs <= 64 (lanes_plan_of), a pass reads 9 */
            for (int j = 0; j < rs + 9; j++)
                acc[j] = _mm256_setzero_ps();
            for (int i = 0; i < d->n; i++) {
                const float *xb = t->x + ((size_t)i * d->c + c0) * hw;
                const float *dyo = t->dy + ((size_t)i * d->k + c0) * pq;
                if (i + 1 < d->n) { /* the next image's block */
                    prefetch_run(xb + (size_t)d->c * hw, (size_t)nch * hw * sizeof(float));
                    prefetch_run(dyo + (size_t)d->k * pq, (size_t)nch * pq * sizeof(float));
                }
                pack_lanes(B, xb, nch, g, t->compute);
                /* dy's pixels in lanes, [p][q][8] */
                for (int oh = 0; oh < d->p; oh++)
                    for (int ow = 0; ow < d->q; ow += 8) {
                        int n = d->q - ow < 8 ? d->q - ow : 8;
                        __m256 v[8];
                        load_pixels(v, dyo, pq, nch, d->q, oh, ow, n);
                        for (int j = 0; j < n; j++)
                            _mm256_storeu_ps(dyb + ((size_t)oh * d->q + ow + j) * 8,
                                             round_vec(v[j], t->compute));
                    }
                for (int t0 = 0; t0 < rs; t0 += 9)
                    filter_lanes_taps(acc + t0, B, dyb, g, t0, rs - t0 < 9 ? rs - t0 : 9);
            }
            for (int j = 0; j < rs; j++) {
                float s[8];
                _mm256_storeu_ps(s, acc[j]);
                for (int ch = 0; ch < nch; ch++)
                    t->dw[(c0 + (size_t)ch) * rs + j] += s[ch];
            }
        }
    }
}

static lanes_task lanes_task_of(const dl_conv_desc *d, dl_dtype compute, void *ws, size_t units,
                                const float *w, int turned)
{
    lanes_task t = {0};
    t.d = d;
    t.L = lanes_plan_of(d);
    t.compute = compute;
    t.units = units;
    t.nparts = units < PARTS ? (int)units : PARTS;
    char *p = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    float *W = (float *)p;
    if (w)
        pack_lane_weights(W, w, d, t.L.blocks, compute, turned);
    t.W = W;
    t.slices = p + round64((size_t)t.L.blocks * d->r * d->s * 8 * sizeof(float));
    t.slice = round64(t.L.buf * 4) + round64(t.L.dybuf * 4);
    return t;
}

/* Workspace: the two tap tables, then PARTS slices (or the lanes path's). */
size_t dl_cpu_conv_dw_workspace(const dl_conv_desc *d)
{
    lanes_plan L = lanes_plan_of(d);
    if (L.ok)
        return lanes_workspace(d, &L);
    dw_geom g = geom_of(d);
    return 64 + 2 * round64((size_t)g.rsp * sizeof(int)) + PARTS * g.slice;
}

/* --- entry points -------------------------------------------------------- */

/* Tap (r, s)'s offset in g's phase planes, for every tap; the rest of the
 * rsp entries 0. */
static void tap_table(int *toff, const plane_geom *g, int rsp)
{
    int rs = g->r * g->s;
    for (int r = 0; r < g->r; r++)
        for (int s = 0; s < g->s; s++) {
            int col = s * g->dil;
            toff[r * g->s + s] = (int)((size_t)(col % g->st) * g->phase +
                                       (size_t)r * g->dil * g->pitch + (size_t)(col / g->st));
        }
    for (int j = rs; j < rsp; j++)
        toff[j] = 0;
}

static dwtask task_of(const dl_conv_desc *d, dl_dtype compute, void *ws, size_t units)
{
    dwtask t = {0};
    t.d = d;
    t.g = geom_of(d);
    t.compute = compute;
    t.units = units;
    t.nparts = units < PARTS ? (int)units : PARTS;
    char *p = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    size_t table = round64((size_t)t.g.rsp * sizeof(int));
    tap_table((int *)p, &t.g.x, t.g.rsp);
    tap_table((int *)(p + table), &t.g.dy, t.g.rsp);
    t.toff = (const int *)p;
    t.toff_dy = (const int *)(p + table);
    t.slices = p + 2 * table;
    return t;
}

/* Parts [0, nparts) of a task (either path's) on the pool. */
static void run_parts(dl_backend *be, int nparts, dl_pool_fn fn, void *task)
{
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool)
        dl_pool_for(pool, (size_t)nparts, 1, fn, task);
    else
        fn(task, 0, (size_t)nparts);
}

int dl_cpu_conv_dw_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                           const float *w, const float *b, void *ws, dl_dtype compute)
{
    lanes_plan L = lanes_plan_of(d);
    if (L.ok) {
        lanes_task lt = lanes_task_of(d, compute, ws, (size_t)d->n * L.blocks, w, 0);
        lt.x = x;
        lt.b = b;
        lt.y = y;
        run_parts(be, lt.nparts, lanes_fwd_task, &lt);
        return DL_OK;
    }
    dwtask t = task_of(d, compute, ws, (size_t)d->n * d->k);
    t.x = x;
    t.w = w;
    t.b = b;
    t.y = y;
    run_parts(be, t.nparts, fwd_task, &t);
    return DL_OK;
}

int dl_cpu_conv_dw_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                 const float *w, void *ws, dl_dtype compute, int set)
{
    lanes_plan L = lanes_plan_of(d);
    if (L.ok) {
        lanes_task lt = lanes_task_of(d, compute, ws, (size_t)d->n * L.blocks, w, L.gather);
        lt.dy = dy;
        lt.dx = dx;
        lt.set = set;
        run_parts(be, lt.nparts, lanes_data_task, &lt);
        return DL_OK;
    }
    dwtask t = task_of(d, compute, ws, (size_t)d->n * d->c);
    t.set = set;
    t.dy = dy;
    t.w = w;
    t.dx = dx;
    run_parts(be, t.nparts, data_task, &t);
    return DL_OK;
}

int dl_cpu_conv_dw_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                   const float *dy, const float *x, void *ws, dl_dtype compute)
{
    lanes_plan L = lanes_plan_of(d);
    if (L.ok) {
        lanes_task lt = lanes_task_of(d, compute, ws, (size_t)L.blocks, NULL, 0);
        lt.dy = dy;
        lt.x = x;
        lt.dw = dw;
        run_parts(be, lt.nparts, lanes_filter_task, &lt);
        return DL_OK;
    }
    dwtask t = task_of(d, compute, ws, (size_t)d->k);
    t.dy = dy;
    t.x = x;
    t.dw = dw;
    run_parts(be, t.nparts, filter_task, &t);
    return DL_OK;
}
