/* cpu_conv_bf16.c - the bf16 filter gradient of stride-1 convolutions as shifted dot products with vdpbf16ps
 *
 * At stride 1, with the input padded into planes Wp = w + 2*pad wide and
 * dy laid out on the same row pitch (its last s - 1 columns of each row
 * zero), the unfolded input row (c, r, s) is the padded plane read from
 * offset r*Wp + s on. So the filter gradient needs no unfold at all:
 *   dw [k, c, r, s] = sum over images n, j < p*Wp of
 *                     dyp_n [k, j] * xp_n [c, j + r*Wp + s]
 * Both operands run along j, so vdpbf16ps takes them straight from memory
 * (pairs of adjacent j), 32 products an instruction, whatever the offset.
 * A tile keeps 3 output channels times up to 9 offsets (27 accumulators of
 * 16 lanes) over the images of a chunk, loading 3 rows of dy and 9 shifted
 * rows of x per 27 instructions; the lanes are summed at the chunk's end.
 *
 * bf16 compute only, on CPUs with AVX-512 BF16: x and dy are rounded once
 * per chunk as they are laid out (dl_f32_to_bf16's rounding, as the other
 * paths round their operands), products are exact in f32 and summed in
 * f32. Dense (groups 1), dilation 1, any kernel size, padding and channel
 * count; 1x1 goes to cpu_conv_1x1.c.
 *
 * Threads: the images are cut into chunks by the shape alone, each
 * chunk's sums land in its own slot and are added in chunk order, in
 * double: the same bits at any thread count.
 *
 * Workspace: per part (one per pool thread) the padded chunk (x and dy),
 * per chunk its partial dw.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_BF16_FILTER 1
#include <immintrin.h>
#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define BF_INLINE __attribute__((always_inline)) inline
#else
#define HAVE_BF16_FILTER 0
#endif
#define UNROLL _Pragma("GCC unroll 16")

/* Output channels and kernel offsets of a tile. */
#define KB 3
#define TB 9
/* bf16 bytes of x and dy one chunk lays out (near L2). */
#define CHUNK_BYTES ((size_t)512 << 10)

typedef struct bf_plan {
    int wp, hp;    /* padded plane */
    size_t dyrow;  /* elements of one padded dy row set: p*wp rounded up to 32 */
    size_t xplane; /* elements of one padded x plane, with the zero slack the shifted reads need */
    size_t img;    /* elements of one image in a chunk buffer: c planes, then k dy rows */
    int chunk, chunks, parts;
    size_t part_dw; /* floats of one chunk's partial dw (k*c*r*s rounded up to 16) */
} bf_plan;

static size_t up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static bf_plan plan_of(dl_backend *be, const dl_conv_desc *d)
{
    bf_plan p;
    p.wp = d->w + 2 * d->pad;
    p.hp = d->h + 2 * d->pad;
    p.dyrow = up((size_t)d->p * p.wp, 32);
    /* the last read starts at (r-1)*wp + s-1 and runs dyrow elements */
    p.xplane = up((size_t)p.hp * p.wp + d->s + 32, 32);
    p.img = (size_t)d->c * p.xplane + (size_t)d->k * p.dyrow;
    size_t nb = CHUNK_BYTES / (p.img * 2);
    if (nb < 1)
        nb = 1;
    size_t eighth = ((size_t)d->n + 3) / 4; /* at least 4 chunks where the batch allows */
    if (nb > eighth)
        nb = eighth;
    p.chunk = (int)nb;
    p.chunks = (d->n + p.chunk - 1) / p.chunk;
    dl_pool *pool = dl_cpu(be)->pool;
    int t = pool ? dl_pool_threads(pool) : 1;
    p.parts = t < p.chunks ? t : p.chunks;
    p.part_dw = up((size_t)d->k * d->c * d->r * d->s, 16);
    return p;
}

int dl_cpu_conv_bf16_filter_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    if (!HAVE_BF16_FILTER || compute != DL_BF16 || !dl_cpu(be)->has_avx512_bf16 || !dl_cpu_avx512())
        return 0;
    if (dl_conv_groups(d) != 1 || dl_conv_dilation(d) != 1 || d->stride != 1 || d->r * d->s == 1 ||
        d->r > d->h + 2 * d->pad || d->s > d->w + 2 * d->pad)
        return 0;
    if (!dl_cpu_dnnl_conv_wanted(d, compute))
        return 1;
    const char *e = getenv("DLBENCH_CONV"); /* dnnl: oneDNN's kernels wherever it has them */
    if (e && !strcmp(e, "dnnl"))
        return 0;
    /* Ahead of oneDNN where the padding columns and the round-up cost
     * under a fifth of extra products: bench_conv's bf16 rows, 1 thread,
     * 238 against 145 GFLOP/s at 16->16 28x28 (7% extra), 239 against 207
     * at 32->32 14x14 (14%), but 157 against 180-205 at 7x7 (31%). */
    size_t pq = (size_t)d->p * d->q;
    return plan_of(be, d).dyrow * 5 <= pq * 6;
}

size_t dl_cpu_conv_bf16_filter_workspace(dl_backend *be, const dl_conv_desc *d)
{
    bf_plan p = plan_of(be, d);
    return (size_t)p.parts * p.chunk * p.img * 2 + (size_t)p.chunks * p.part_dw * 4 + 128;
}

#if HAVE_BF16_FILTER

/* dst [0, n) = src [0, n) as bf16, 16 at a time (vcvtneps2bf16: round to
 * nearest even as dl_f32_to_bf16, except that it flushes denormals to 0,
 * which vdpbf16ps would read as 0 anyway). */
BF_TARGET static BF_INLINE void cvt_run(uint16_t *dst, const float *src, int n)
{
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
    if (i < n) {
        __mmask16 m = dl_v512_mask(n - i);
        __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, v);
    }
}

/* Image i of the chunk into buf: c padded planes of x, k rows of dy on
 * the planes' pitch. Only the values are written: the padding is zeroed
 * once per call (pad_zero) and every chunk writes the same places. */
BF_TARGET static void lay_out(uint16_t *buf, const bf_plan *p, const dl_conv_desc *d,
                              const float *x, const float *dy)
{
    for (int c = 0; c < d->c; c++) {
        uint16_t *pl = buf + (size_t)c * p->xplane + (size_t)d->pad * p->wp + d->pad;
        const float *xc = x + (size_t)c * d->h * d->w;
        if (d->pad == 0)
            cvt_run(pl, xc, d->h * d->w);
        else
            for (int h = 0; h < d->h; h++)
                cvt_run(pl + (size_t)h * p->wp, xc + (size_t)h * d->w, d->w);
    }
    uint16_t *g = buf + (size_t)d->c * p->xplane;
    size_t pq = (size_t)d->p * d->q;
    for (int k = 0; k < d->k; k++) {
        uint16_t *row = g + (size_t)k * p->dyrow;
        const float *src = dy + k * pq;
        if (p->wp == d->q)
            cvt_run(row, src, (int)pq);
        else
            for (int y = 0; y < d->p; y++)
                cvt_run(row + (size_t)y * p->wp, src + (size_t)y * d->q, d->q);
    }
}

BF_TARGET static BF_INLINE __m512bh load_bh(const uint16_t *p)
{
    return (__m512bh)_mm512_loadu_si512((const void *)p);
}

/* out [r * t + o] = sum over nimg images (img elements apart) and the
 * dyrow elements j of dy rows r (rows past kr repeat the last; their sums
 * are dropped) times x at off[o] + j, o < t <= TB. Inlined twice: for
 * the full tile with constants, and for the rest. */
BF_TARGET static BF_INLINE void tile_body(float *out, const uint16_t *dy, const uint16_t *x,
                                          size_t img, size_t dyrow, int kr, const int *off, int t,
                                          int nimg)
{
    __m512 acc[KB][TB];
    UNROLL
    for (int r = 0; r < KB; r++)
        UNROLL
    for (int o = 0; o < TB; o++)
        acc[r][o] = _mm512_setzero_ps();
    size_t ro[KB];
    UNROLL
    for (int r = 0; r < KB; r++)
        ro[r] = (size_t)(r < kr ? r : kr - 1) * dyrow;
    for (int i = 0; i < nimg; i++) {
        const uint16_t *g = dy + (size_t)i * img, *xi = x + (size_t)i * img;
        for (size_t j = 0; j < dyrow; j += 32) {
            __m512bh gv[KB];
            UNROLL
            for (int r = 0; r < KB; r++)
                gv[r] = load_bh(g + ro[r] + j);
            UNROLL
            for (int o = 0; o < TB; o++) {
                if (o < t) {
                    __m512bh xv = load_bh(xi + off[o] + j);
                    UNROLL
                    for (int r = 0; r < KB; r++)
                        acc[r][o] = _mm512_dpbf16_ps(acc[r][o], gv[r], xv);
                }
            }
        }
    }
    UNROLL
    for (int r = 0; r < KB; r++)
        UNROLL
    for (int o = 0; o < TB; o++)
        if (r < kr && o < t)
            out[r * t + o] = _mm512_reduce_add_ps(acc[r][o]);
}

BF_TARGET static void tile(float *out, const uint16_t *dy, const uint16_t *x, size_t img,
                           size_t dyrow, int kr, const int *off, int t, int nimg)
{
    if (kr == KB && t == TB)
        tile_body(out, dy, x, img, dyrow, KB, off, TB, nimg);
    else
        tile_body(out, dy, x, img, dyrow, kr, off, t, nimg);
}

typedef struct bf_task {
    const dl_conv_desc *d;
    const bf_plan *p;
    const float *x, *dy;
    uint16_t *bufs;
    float *parts;
    const int *off; /* r*s offsets into a padded plane */
} bf_task;

BF_TARGET static void filter_task(void *arg, size_t begin, size_t end)
{
    const bf_task *t = arg;
    const dl_conv_desc *d = t->d;
    const bf_plan *p = t->p;
    int rs = d->r * d->s;
    size_t xs_img = (size_t)d->c * d->h * d->w, dy_img = (size_t)d->k * d->p * d->q;
    for (size_t part = begin; part < end; part++) {
        size_t ch0 = part * (size_t)p->chunks / (size_t)p->parts;
        size_t ch1 = (part + 1) * (size_t)p->chunks / (size_t)p->parts;
        uint16_t *buf = t->bufs + part * (size_t)p->chunk * p->img;
        memset(buf, 0, (size_t)p->chunk * p->img * 2); /* the padding, once */
        for (size_t ci = ch0; ci < ch1; ci++) {
            int i0 = (int)ci * p->chunk;
            int nb = d->n - i0 < p->chunk ? d->n - i0 : p->chunk;
            for (int i = 0; i < nb; i++)
                lay_out(buf + (size_t)i * p->img, p, d, t->x + (size_t)(i0 + i) * xs_img,
                        t->dy + (size_t)(i0 + i) * dy_img);
            float *dw = t->parts + ci * p->part_dw;
            const uint16_t *g = buf + (size_t)d->c * p->xplane;
            for (int c = 0; c < d->c; c++) {
                const uint16_t *xc = buf + (size_t)c * p->xplane;
                for (int kb = 0; kb < d->k; kb += KB) {
                    int kr = d->k - kb < KB ? d->k - kb : KB;
                    for (int o0 = 0; o0 < rs; o0 += TB) {
                        int nt = rs - o0 < TB ? rs - o0 : TB;
                        float s[KB * TB];
                        tile(s, g + (size_t)kb * p->dyrow, xc, p->img, p->dyrow, kr, t->off + o0,
                             nt, nb);
                        for (int r = 0; r < kr; r++)
                            memcpy(dw + ((size_t)(kb + r) * d->c + c) * rs + o0, s + r * nt,
                                   (size_t)nt * sizeof(float));
                    }
                }
            }
        }
    }
}

#endif /* HAVE_BF16_FILTER */

/* dw [k, c, r, s] += the filter gradient of dy and x (db is the caller's). */
int dl_cpu_conv_bf16_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                     const float *dy, const float *x, void *ws)
{
#if HAVE_BF16_FILTER
    bf_plan p = plan_of(be, d);
    int rs = d->r * d->s;
    int *off = malloc((size_t)rs * sizeof *off);
    if (!off)
        return dl_error(DL_ENOMEM, "conv_backward_filter (bf16): out of memory");
    for (int r = 0; r < d->r; r++)
        for (int s = 0; s < d->s; s++)
            off[r * d->s + s] = r * p.wp + s;
    uint16_t *bufs = (uint16_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    float *parts = (float *)(bufs + up((size_t)p.parts * p.chunk * p.img, 32));
    bf_task t = {d, &p, x, dy, bufs, parts, off};
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool)
        dl_pool_for(pool, (size_t)p.parts, 1, filter_task, &t);
    else
        filter_task(&t, 0, (size_t)p.parts);
    size_t n = (size_t)d->k * d->c * rs;
    for (size_t j = 0; j < n; j++) {
        double s = 0.0;
        for (int ci = 0; ci < p.chunks; ci++)
            s += parts[(size_t)ci * p.part_dw + j];
        dw[j] += (float)s;
    }
    free(off);
    return DL_OK;
#else
    (void)be, (void)d, (void)dw, (void)dy, (void)x, (void)ws;
    return dl_error(DL_EINVAL, "conv_backward_filter: no bf16 filter kernel in this build");
#endif
}
