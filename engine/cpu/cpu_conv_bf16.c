/* cpu_conv_bf16.c - bf16 convolutions on CPUs with vdpbf16ps: no unfold, shifted dot products over padded planes
 *
 * Filter gradient. At stride 1, with the input padded into planes Wp =
 * w + 2*pad wide and dy laid out on the same row pitch (its last s - 1
 * columns of each row zero), the unfolded input row (c, r, s) is the
 * padded plane read from offset r*Wp + s on, so
 *   dw [k, c, r, s] = sum over images n, j < p*Wp of
 *                     dyp_n [k, j] * xp_n [c, j + r*Wp + s]
 * Both operands run along j, so vdpbf16ps takes them straight from memory
 * (pairs of adjacent j), 32 products an instruction, whatever the offset.
 * A tile keeps 3 output channels times up to 9 offsets (27 accumulators of
 * 16 lanes) over the images of a chunk, loading 3 rows of dy and 9 shifted
 * rows of x per 27 instructions; the lanes are summed at the chunk's end.
 *
 * Forward and data gradient: channel pairs (see below), the same padded
 * planes with the pairs of channels interleaved, weight pairs broadcast.
 *
 * Stride 2 (forward and filter): the padded input is split into 4 phase
 * planes (rows 2u + a, columns 2v + b); tap (r, s) then reads phase
 * (r%2, s%2) at offset (r/2)*Wph + s/2, a stride-1 shift on the phase
 * plane, and the kernels above run unchanged on the offsets. Stride 2's
 * data gradient: each phase of dx is a stride-1 correlation of dy with
 * the taps of one parity (data2_geoms); the pair kernels run the four on
 * one layout of dy, each storing its outputs straight into every other
 * column of dx (a vector's 16 spread over 32 columns by two masked
 * stores).
 *
 * bf16 compute only: x, dy and w are rounded once as they are laid out
 * (round to nearest even as dl_f32_to_bf16; vcvtneps2bf16 flushes
 * denormals, which vdpbf16ps reads as 0 anyway), products are exact in f32
 * and summed in f32. Dense (groups 1), dilation 1, any kernel size,
 * padding and channel count (1x1 at stride 1: the filter's tiles then
 * take 9 input channels where they take 9 offsets). Where oneDNN is
 * the other choice, these take the shapes whose padded pitch and round-up
 * add under a fifth of extra products (pr_fits, the filter's fits).
 *
 * Threads: the forward and data kernels split the images into parts (an
 * image's result does not depend on the split); the filter cuts the
 * images into chunks by the shape alone, each chunk's sums land in its own
 * slot and are added in chunk order, in double: the same bits at any
 * thread count. While a tile computes, the next image's (chunk's)
 * operands are prefetched into L2 a slice at a time.
 *
 * Workspace: the filter's per part (one per pool thread) padded chunk (x
 * and dy) and per chunk partial dw; the pair kernels' packed weights,
 * store tables and offsets (one set per phase of stride 2's data
 * gradient) and per part padded image.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/half.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_BF16_FILTER 1
#include <immintrin.h>
#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,prfchw")))
#define BF_INLINE __attribute__((always_inline)) inline
#else
#define HAVE_BF16_FILTER 0
#endif
#define UNROLL _Pragma("GCC unroll 16")

#if HAVE_BF16_FILTER
/* The first n lanes (0 <= n <= 16); cpu_vmath.h has its own only where
 * the whole build targets AVX-512. */
static inline __mmask16 lanes(int n) { return (__mmask16)((1u << n) - 1u); }
#endif

/* Output channels and kernel offsets of a tile. */
#define KB 3
#define TB 9
/* bf16 bytes of x and dy one chunk lays out: with the next chunk's f32
 * operands on their way in, L2 holds both. */
#define CHUNK_BYTES ((size_t)256 << 10)
#define MAX_CHUNK_BYTES ((size_t)768 << 10)
#define MIN_STEPS 64

typedef struct bf_plan {
    int wp, hp;    /* padded plane */
    int st;        /* stride: st*st phase planes of x, each wph wide */
    int wph, hph;  /* a phase plane: every st-th row and column of the padded plane */
    size_t dyrow;  /* elements of one dy row set on the pitch wph: p*wph rounded up to 32 */
    size_t xphase; /* elements of one phase plane, with the slack the shifted reads need */
    size_t xplane; /* st*st phase planes: one channel of x */
    size_t img;    /* elements of one image in a chunk buffer: c planes, then k dy rows */
    int chunk, chunks, parts;
    size_t part_dw; /* floats of one chunk's partial dw (k*c*r*s rounded up to 16) */
} bf_plan;

static size_t up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* Entries of the filter's offset table: one per tap, at least a tile's
 * (1x1: the tile's input channels). */
static size_t offsets(const dl_conv_desc *d) { return d->r * d->s > TB ? (size_t)d->r * d->s : TB; }

static bf_plan plan_of(dl_backend *be, const dl_conv_desc *d)
{
    bf_plan p;
    p.wp = d->w + 2 * d->pad;
    p.hp = d->h + 2 * d->pad;
    p.st = d->stride;
    p.wph = (p.wp + p.st - 1) / p.st;
    p.hph = (p.hp + p.st - 1) / p.st;
    p.dyrow = up((size_t)d->p * p.wph, 32);
    /* the last read starts at the largest offset and runs dyrow elements */
    size_t reach = p.dyrow + (size_t)((d->r - 1) / p.st) * p.wph + (d->s - 1) / p.st;
    size_t ph = (size_t)p.hph * p.wph;
    p.xphase = up(reach > ph ? reach : ph, 32);
    p.xplane = (size_t)p.st * p.st * p.xphase;
    p.img = (size_t)d->c * p.xplane + (size_t)d->k * p.dyrow;
    size_t nb = CHUNK_BYTES / (p.img * 2);
    /* but enough images that a tile's sums run MIN_STEPS steps before
     * their lanes are reduced (many channels: large images, short runs) */
    size_t steps = p.dyrow / 32, want = (MIN_STEPS + steps - 1) / steps;
    if (nb < want)
        nb = want * p.img * 2 <= MAX_CHUNK_BYTES ? want : MAX_CHUNK_BYTES / (p.img * 2);
    if (nb < 1)
        nb = 1;
    /* a multiple of 4 chunks of about equal size where the batch allows:
     * 2 or 4 threads get equal shares */
    size_t chunks = ((size_t)d->n + nb - 1) / nb;
    chunks = (chunks + 3) / 4 * 4;
    if (chunks > (size_t)d->n)
        chunks = (size_t)d->n;
    p.chunk = (int)(((size_t)d->n + chunks - 1) / chunks);
    p.chunks = (d->n + p.chunk - 1) / p.chunk;
    dl_pool *pool = dl_cpu(be)->pool;
    int t = pool ? dl_pool_threads(pool) : 1;
    p.parts = t < p.chunks ? t : p.chunks;
    p.part_dw = up((size_t)d->k * d->c * d->r * d->s, 16);
    return p;
}

/* What both kinds of kernel need of (d, compute): bf16 on a CPU with
 * AVX-512 BF16, dense, no dilation, stride 1 or 2 (1x1 at stride 1). */
static int kernels_take(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    return HAVE_BF16_FILTER && compute == DL_BF16 && dl_cpu(be)->has_avx512_bf16 &&
           dl_cpu_avx512() && dl_conv_groups(d) == 1 && dl_conv_dilation(d) == 1 &&
           d->stride >= 1 && d->stride <= 2 && (d->r * d->s > 1 || d->stride == 1);
}

/* Whether the kernels go ahead of oneDNN on a direction that computes
 * `used` positions for pq outputs over cin input channels: always where
 * oneDNN is not wanted (below 8 channels, DLBENCH_CONV=own), never under
 * DLBENCH_CONV=dnnl, else where the padded pitch and the round-up add
 * under a fifth of extra products, under a tenth over 32 input channels.
 * BENCH_CONV_VS=dnnl bench_conv 1 bf16: 1.40x at 16->16 28x28 (7% extra),
 * 1.03-1.18x at 14x14 (14%), 157 against 180-205 GFLOP/s at 7x7 (31%);
 * the CIFAR 64->64 at 16x16 (12.5%) 0.92-0.94x, 0.90x at 2 threads. */
static int ahead_of_dnnl(const dl_conv_desc *d, dl_dtype compute, int cin, size_t used, size_t pq)
{
    if (!dl_cpu_dnnl_conv_wanted(d, compute))
        return 1;
    const char *e = getenv("DLBENCH_CONV"); /* dnnl: oneDNN's kernels wherever it has them */
    if (e && !strcmp(e, "dnnl"))
        return 0;
    return cin > 32 ? used * 10 <= pq * 11 : used * 5 <= pq * 6;
}

int dl_cpu_conv_bf16_filter_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    if (!kernels_take(be, d, compute) || d->r > d->h + 2 * d->pad || d->s > d->w + 2 * d->pad)
        return 0;
    if (d->r * d->s == 1 && d->c >= 128) /* 256->64 at 14x14: 0.90x oneDNN's */
        return 0;
    return ahead_of_dnnl(d, compute, d->c, plan_of(be, d).dyrow, (size_t)d->p * d->q);
}

size_t dl_cpu_conv_bf16_filter_workspace(dl_backend *be, const dl_conv_desc *d)
{
    bf_plan p = plan_of(be, d);
    return (size_t)p.parts * p.chunk * p.img * 2 + (size_t)p.chunks * p.part_dw * 4 +
           up(offsets(d), 16) * sizeof(int) + 128;
}

/* ---------------------------------------------------------------------- */
/* forward and backward data: channel pairs                                */

/* Both are stride-1 correlations of a padded input with a kernel:
 *   out [m, y, x] = sum over i, r, s of wk [m, i, r, s] * inp [i, y + r, x + s]
 * the forward with inp = x padded by pad, wk = w; the data gradient with
 * inp = dy padded by r-1-pad (s-1-pad across), wk [c, k, r, s] = w [k, c,
 * r-1-r', s-1-s'] (the kernel turned round). The input is laid out as
 * padded planes of channel pairs, one 32-bit (bf16, bf16) element per
 * position, so a vector load at flat position j + r*Wp + s gives 16
 * positions of two channels, and vdpbf16ps with the broadcast weight pair
 * of those channels adds both products into 16 outputs. A tile keeps 4
 * output channels times 6 vectors of positions (24 accumulators); each
 * (pair, offset) step loads 6 vectors and 4 weight pairs for 24
 * instructions. Outputs on the padded pitch (the last s-1 of each row are
 * not outputs) are compressed into place with a per-vector mask. */

#define MK 4
#define NV 6

typedef struct pr_geom {
    int cin, hin, win, ph, pw; /* input planes and their padding */
    int kout, r, s, hout, wout;
    int wp, cp, kb;    /* padded width, channel pairs, 4-channel output blocks */
    int st, wph;       /* stride: st*st phase planes wph wide (the pitch of positions) */
    int nvec;          /* vectors of 16 positions covering hout * wph */
    size_t phase;      /* 32-bit elements of one phase plane, with the slack the reads need */
    size_t plane;      /* st*st phase planes: one channel pair */
    size_t wpk, table; /* 32-bit elements of the packed weights, of the store table */
    int parts;
    /* the packed weights' taps: offset (r', s') holds w's tap (r0 + step*r',
     * s0 + step*s'), turned round (from the last) when flip; tap reads
     * start dr rows and ds columns into the padded plane */
    int r0, s0, step, flip, dr, ds;
    /* stride 2's data gradient: the phase (pa, pb) of dx the outputs go to,
     * every other row and column of planes ow wide (pa < 0: outputs
     * stored densely, hout x wout a plane) */
    int pa, pb, ow;
    size_t out_plane; /* floats of one output channel's plane */
} pr_geom;

static pr_geom pr_geom_of(dl_backend *be, int n, int cin, int hin, int win, int ph, int pw,
                          int kout, int r, int s, int st)
{
    pr_geom g;
    g.cin = cin, g.hin = hin, g.win = win, g.ph = ph, g.pw = pw;
    g.kout = kout, g.r = r, g.s = s, g.st = st;
    g.hout = (hin + 2 * ph - r) / st + 1;
    g.wout = (win + 2 * pw - s) / st + 1;
    g.wp = win + 2 * pw;
    g.wph = (g.wp + st - 1) / st;
    g.cp = (cin + 1) / 2;
    g.kb = (kout + MK - 1) / MK;
    g.nvec = (int)(((size_t)g.hout * g.wph + 15) / 16);
    /* the last vector read starts at the largest offset past the last position */
    size_t reach = (size_t)g.nvec * 16 + (size_t)((r - 1) / st) * g.wph + (s - 1) / st;
    size_t hph = (size_t)(hin + 2 * ph + st - 1) / st * g.wph;
    g.phase = up(reach > hph ? reach : hph, 16);
    g.plane = (size_t)st * st * g.phase;
    g.wpk = (size_t)g.kb * g.cp * r * s * MK;
    g.table = 2 * (size_t)g.nvec;
    dl_pool *pool = dl_cpu(be)->pool;
    int t = pool ? dl_pool_threads(pool) : 1;
    g.parts = t < n ? t : n;
    g.r0 = g.s0 = g.dr = g.ds = g.flip = 0;
    g.step = 1;
    g.pa = g.pb = -1, g.ow = g.wout;
    g.out_plane = (size_t)g.hout * g.wout;
    return g;
}

/* The data gradient at stride 2, as four stride-1 correlations of dy: dx's
 * phase (a, b) (rows 2u + a, columns 2v + b) gets the taps r = ra + 2t
 * (ra = (a + pad) % 2) and s likewise, tap t reading dy row u + A - t
 * (A = (a + pad) / 2). With the phase's taps turned round (t' = T-1-t) that
 * is a correlation over dy padded by T-1-A rows on top: one layout of dy,
 * padded by the largest of those (and as many rows and columns at the end
 * as the last outputs read), serves all four, each tap read shifted by
 * the difference. The layout's pitch is a multiple of 16, so that each
 * vector of positions lies in one row of its phase and its outputs go to
 * every other column of one row of dx. Returns the number of phases (4),
 * 0 where a phase would have no taps (r or s under 2). */
static int data2_geoms(dl_backend *be, const dl_conv_desc *d, pr_geom g[4])
{
    if (d->stride != 2 || d->r < 2 || d->s < 2)
        return 0;
    int t[2][2], sh[2][2], out[2][2], lo[2] = {0, 0}, hi[2] = {0, 0};
    int size[2] = {d->h, d->w}, taps[2] = {d->r, d->s}, dyn[2] = {d->p, d->q};
    for (int ax = 0; ax < 2; ax++)
        for (int a = 0; a < 2; a++) {
            int ra = (a + d->pad) % 2, A = (a + d->pad) / 2;
            t[ax][a] = (taps[ax] - ra + 1) / 2;
            sh[ax][a] = t[ax][a] - 1 - A; /* the padding this phase wants */
            out[ax][a] = (size[ax] - a + 1) / 2;
            if (sh[ax][a] > lo[ax])
                lo[ax] = sh[ax][a];
            /* dy rows (columns) past the end its last output reads */
            int past = out[ax][a] + A - dyn[ax];
            if (past > hi[ax])
                hi[ax] = past;
        }
    pr_geom base = pr_geom_of(be, d->n, d->k, d->p, d->q, lo[0], lo[1], d->c, 1, 1, 1);
    base.wp = (int)up((size_t)(d->q + lo[1] + hi[1]), 16);
    base.wph = base.wp;
    size_t plane = (size_t)(d->p + lo[0] + hi[0]) * base.wp;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            pr_geom *p = &g[2 * a + b];
            *p = base;
            p->r = t[0][a], p->s = t[1][b];
            p->hout = out[0][a], p->wout = out[1][b];
            p->nvec = (int)(((size_t)p->hout * p->wph + 15) / 16);
            p->wpk = (size_t)p->kb * p->cp * p->r * p->s * MK;
            p->table = 2 * (size_t)p->nvec;
            p->r0 = (a + d->pad) % 2, p->s0 = (b + d->pad) % 2;
            p->step = 2, p->flip = 1;
            p->dr = lo[0] - sh[0][a], p->ds = lo[1] - sh[1][b];
            p->pa = a, p->pb = b, p->ow = d->w;
            p->out_plane = (size_t)d->h * d->w;
            size_t reach =
                (size_t)p->nvec * 16 + (size_t)(p->dr + p->r - 1) * p->wph + p->ds + p->s - 1;
            if (reach > plane)
                plane = reach;
        }
    for (int i = 0; i < 4; i++)
        g[i].phase = g[i].plane = up(plane, 16);
    return 4;
}

/* Workspace pieces of the passes g [0, npass): their packed weights, store
 * tables and offsets (32-bit elements, each piece rounded up to 16); then
 * come the parts' laid-out inputs. */
static size_t pr_pieces(const pr_geom *g, int npass)
{
    size_t n = 0;
    for (int p = 0; p < npass; p++)
        n += up(g[p].wpk, 16) + up(g[p].table, 16) + up((size_t)g[p].r * g[p].s, 16);
    return n;
}

static size_t pr_bytes(const pr_geom *g, int npass)
{
    return (pr_pieces(g, npass) + (size_t)g->parts * up((size_t)g->cp * g->plane, 16)) * 4 + 128;
}

/* Whether the pair kernels take the correlations g [0, npass) of d (with
 * oneDNN there as the other choice: only where the padded pitch and the
 * round-up cost under a fifth of extra products, as for the filter). */
static int pr_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, const pr_geom *g,
                   int npass)
{
    if (npass == 0 || !kernels_take(be, d, compute))
        return 0;
    size_t used = 0, pq = 0;
    for (int p = 0; p < npass; p++) {
        if (g[p].ph < 0 || g[p].pw < 0 || g[p].hout <= 0 || g[p].wout <= 0)
            return 0;
        used += (size_t)g[p].nvec * 16;
        pq += (size_t)g[p].hout * g[p].wout;
    }
    /* 1x1 with many input channels: a tile's 4 output channels reuse too
     * little of what it loads (bench_conv, 256->64 at 14x14: 0.88x the 1x1
     * kernels' forward) */
    if (d->r * d->s == 1 && g->cin > 128)
        return 0;
    return ahead_of_dnnl(d, compute, g->cin, used, pq);
}

static pr_geom fwd_geom(dl_backend *be, const dl_conv_desc *d)
{
    return pr_geom_of(be, d->n, d->c, d->h, d->w, d->pad, d->pad, d->k, d->r, d->s, d->stride);
}

/* The data gradient's passes into g: at stride 1 one correlation of dy
 * padded by r-1-pad (s-1-pad across) with the kernel turned round, at
 * stride 2 the four phases of data2_geoms; returns their count (0: none). */
static int data_geoms(dl_backend *be, const dl_conv_desc *d, pr_geom g[4])
{
    if (d->stride == 2)
        return data2_geoms(be, d, g);
    g[0] = pr_geom_of(be, d->n, d->k, d->p, d->q, d->r - 1 - d->pad, d->s - 1 - d->pad, d->c, d->r,
                      d->s, 1);
    g[0].flip = 1;
    return 1;
}

int dl_cpu_conv_bf16_forward_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    pr_geom g = fwd_geom(be, d);
    return pr_fits(be, d, compute, &g, 1);
}

int dl_cpu_conv_bf16_data_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    pr_geom g[4];
    int n = data_geoms(be, d, g);
    return pr_fits(be, d, compute, g, n);
}

size_t dl_cpu_conv_bf16_pairs_workspace(dl_backend *be, const dl_conv_desc *d)
{
    pr_geom f = fwd_geom(be, d), b[4];
    int n = data_geoms(be, d, b);
    size_t a = pr_bytes(&f, 1), c = n && b[0].ph >= 0 && b[0].pw >= 0 ? pr_bytes(b, n) : 0;
    return a > c ? a : c;
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
        __mmask16 m = lanes(n - i);
        __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, v);
    }
}

/* n zero elements of 16 bits (a padding gap: short ones by one store). */
BF_TARGET static BF_INLINE void zero16(uint16_t *dst, size_t n)
{
    if (n <= 32)
        _mm512_mask_storeu_epi16(dst, (__mmask32)(n == 32 ? ~0u : (1u << n) - 1u),
                                 _mm512_setzero_si512());
    else
        memset(dst, 0, n * 2);
}

/* Stride 2: one channel xc [h, w] of x into its 4 phase planes at pl
 * (phase (a, b) holds the padded rows 2u + a, columns 2v + b), only the
 * values: the rest was zeroed once per call (filter_task). */
BF_TARGET static void lay_out_phases(uint16_t *pl, const bf_plan *p, const dl_conv_desc *d,
                                     const float *xc)
{
    /* the even lanes into the low half, the odd ones into the high half */
    const __m256i split = _mm256_set_epi16(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
    for (int h = 0; h < d->h; h++) {
        int hh = h + d->pad;
        uint16_t *prow = pl + (size_t)(hh & 1) * 2 * p->xphase + (size_t)(hh >> 1) * p->wph;
        const float *src = xc + (size_t)h * d->w;
        for (int x0 = 0; x0 < d->w; x0 += 16) {
            int n = d->w - x0 < 16 ? d->w - x0 : 16, ww = x0 + d->pad, e = ww & 1;
            __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes(n), src + x0));
            v = _mm256_permutexvar_epi16(split, v);
            /* even lanes: columns of parity e from ww/2 on; odd ones: 1-e from (ww+1)/2 */
            _mm_mask_storeu_epi16(prow + (size_t)e * p->xphase + (ww >> 1),
                                  (__mmask8)((1u << ((n + 1) / 2)) - 1), _mm256_castsi256_si128(v));
            _mm_mask_storeu_epi16(prow + (size_t)(1 - e) * p->xphase + ((ww + 1) >> 1),
                                  (__mmask8)((1u << (n / 2)) - 1), _mm256_extracti128_si256(v, 1));
        }
    }
}

/* Image i of the chunk into buf: c padded planes of x (stride 2: phase
 * planes), k rows of dy on the planes' pitch, the padding between them
 * zeroed as it goes by. */
BF_TARGET static void lay_out(uint16_t *buf, const bf_plan *p, const dl_conv_desc *d,
                              const float *x, const float *dy)
{
    size_t lead = (size_t)d->pad * p->wp + d->pad;
    for (int c = 0; c < d->c && p->st == 2; c++)
        lay_out_phases(buf + (size_t)c * p->xplane, p, d, x + (size_t)c * d->h * d->w);
    for (int c = 0; c < d->c && p->st == 1; c++) {
        uint16_t *pl = buf + (size_t)c * p->xplane;
        const float *xc = x + (size_t)c * d->h * d->w;
        zero16(pl, lead);
        for (int h = 0; h < d->h; h++) {
            size_t at = lead + (size_t)h * p->wp;
            cvt_run(pl + at, xc + (size_t)h * d->w, d->w);
            size_t next = h + 1 < d->h ? at + p->wp : p->xplane;
            zero16(pl + at + d->w, next - at - d->w);
        }
    }
    uint16_t *g = buf + (size_t)d->c * p->xplane;
    size_t pq = (size_t)d->p * d->q;
    for (int k = 0; k < d->k; k++) {
        uint16_t *row = g + (size_t)k * p->dyrow;
        const float *src = dy + k * pq;
        for (int y = 0; y < d->p; y++) {
            size_t at = (size_t)y * p->wph;
            cvt_run(row + at, src + (size_t)y * d->q, d->q);
            size_t next = y + 1 < d->p ? at + p->wph : p->dyrow;
            zero16(row + at + d->q, next - at - d->q);
        }
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
        /* stride 2: the phase planes' padding once (every image writes the
         * same places) */
        for (int i = 0; i < p->chunk && p->st == 2; i++)
            memset(buf + (size_t)i * p->img, 0, (size_t)d->c * p->xplane * 2);
        for (size_t ci = ch0; ci < ch1; ci++) {
            int i0 = (int)ci * p->chunk;
            int nb = d->n - i0 < p->chunk ? d->n - i0 : p->chunk;
            for (int i = 0; i < nb; i++)
                lay_out(buf + (size_t)i * p->img, p, d, t->x + (size_t)(i0 + i) * xs_img,
                        t->dy + (size_t)(i0 + i) * dy_img);
            float *dw = t->parts + ci * p->part_dw;
            const uint16_t *g = buf + (size_t)d->c * p->xplane;
            /* the next chunk's x and dy are asked for (into L2) a slice per
             * tile, so that its layout does not wait on memory */
            int n1 = ci + 1 < ch1 ? i0 + nb : d->n,
                nb1 = d->n - n1 < p->chunk ? d->n - n1 : p->chunk;
            const char *nx = (const char *)(t->x + (size_t)n1 * xs_img);
            const char *ng = (const char *)(t->dy + (size_t)n1 * dy_img);
            size_t xl = (size_t)nb1 * xs_img * 4 / 64, gl = (size_t)nb1 * dy_img * 4 / 64;
            /* a tile: 3 output channels x up to 9 offsets of one input
             * channel; 1x1: x up to 9 input channels (t->off steps over
             * their planes), so dw's index is the same formula */
            int cstep = rs == 1 ? TB : 1;
            size_t tiles = (size_t)((d->c + cstep - 1) / cstep) * ((d->k + KB - 1) / KB) *
                           ((rs + TB - 1) / TB);
            size_t xper = (xl + tiles - 1) / tiles, gper = (gl + tiles - 1) / tiles, xa = 0, ga = 0;
            for (int c = 0; c < d->c; c += cstep) {
                const uint16_t *xc = buf + (size_t)c * p->xplane;
                for (int kb = 0; kb < d->k; kb += KB) {
                    int kr = d->k - kb < KB ? d->k - kb : KB;
                    for (int o0 = 0; o0 < rs; o0 += TB) {
                        for (size_t e = xa + xper; xa < e && xa < xl; xa++)
                            _mm_prefetch(nx + xa * 64, _MM_HINT_T1);
                        for (size_t e = ga + gper; ga < e && ga < gl; ga++)
                            _mm_prefetch(ng + ga * 64, _MM_HINT_T1);
                        int left = rs == 1 ? d->c - c : rs - o0, nt = left < TB ? left : TB;
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

enum { PR_SET, PR_BIAS, PR_ADD };

/* One correlation over the laid-out input: its geometry, packed weights,
 * store table (per vector its valid-lane mask, then its first output; for
 * a phase of dx, the masks of its two spread stores, then where the first
 * goes) and tap offsets. */
typedef struct pr_pass {
    const pr_geom *g;
    const uint32_t *wpk, *table;
    const int *off;
} pr_pass;

typedef struct pr_task {
    const float *in, *bias;
    float *out;
    pr_pass pass[4]; /* one, or the data gradient's four phases at stride 2 */
    int npass;
    uint32_t *bufs;
    size_t out_img; /* floats of one image of out */
    int n, mode;
} pr_task;

/* n zero elements of 32 bits. */
BF_TARGET static BF_INLINE void zero32(uint32_t *dst, size_t n)
{
    if (n <= 16)
        _mm512_mask_storeu_epi32(dst, lanes((int)n), _mm512_setzero_si512());
    else
        memset(dst, 0, n * 4);
}

/* Stride 2: pair elements v (16 positions of padded row hh from padded
 * column ww on, n of them real) into the phase planes of one pair at pl. */
BF_TARGET static BF_INLINE void pr_store_phases(uint32_t *pl, const pr_geom *g, __m512i v, int hh,
                                                int ww, int n)
{
    const __m512i split = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
    v = _mm512_permutexvar_epi32(split, v);
    uint32_t *prow = pl + (size_t)(hh & 1) * 2 * g->phase + (size_t)(hh >> 1) * g->wph;
    int e = ww & 1;
    _mm256_mask_storeu_epi32(prow + (size_t)e * g->phase + (ww >> 1),
                             (__mmask8)((1u << ((n + 1) / 2)) - 1), _mm512_castsi512_si256(v));
    _mm256_mask_storeu_epi32(prow + (size_t)(1 - e) * g->phase + ((ww + 1) >> 1),
                             (__mmask8)((1u << (n / 2)) - 1), _mm512_extracti64x4_epi64(v, 1));
}

/* Image `in` [cin, hin, win] into the pair planes at buf, the padding
 * between rows zeroed as it goes by (stride 2: the values into the phase
 * planes, whose padding was zeroed once per call). */
BF_TARGET static void pr_lay_out(uint32_t *buf, const pr_geom *g, const float *in)
{
    /* lanes 2i, 2i+1 of a pair element: channel a, channel b at position i */
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    size_t hw = (size_t)g->hin * g->win, lead = (size_t)g->ph * g->wp + g->pw;
    for (int cp = 0; cp < g->cp; cp++) {
        const float *a = in + (size_t)(2 * cp) * hw;
        const float *b = 2 * cp + 1 < g->cin ? a + hw : NULL;
        uint32_t *pl = buf + (size_t)cp * g->plane;
        if (g->st == 1)
            zero32(pl, lead);
        for (int y = 0; y < g->hin; y++) {
            const float *ar = a + (size_t)y * g->win, *br = b ? b + (size_t)y * g->win : NULL;
            size_t at = lead + (size_t)y * g->wp;
            uint32_t *dst = pl + at;
            for (int x0 = 0; x0 < g->win; x0 += 16) {
                __mmask16 m = g->win - x0 >= 16 ? (__mmask16)0xffff : lanes(g->win - x0);
                __m512 va = _mm512_maskz_loadu_ps(m, ar + x0);
                __m512 vb = br ? _mm512_maskz_loadu_ps(m, br + x0) : _mm512_setzero_ps();
                __m512i t = (__m512i)_mm512_cvtne2ps_pbh(vb, va); /* a low, b high */
                t = _mm512_permutexvar_epi16(idx, t);
                if (g->st == 1)
                    _mm512_mask_storeu_epi32(dst + x0, m, t);
                else
                    pr_store_phases(pl, g, t, y + g->ph, x0 + g->pw,
                                    g->win - x0 < 16 ? g->win - x0 : 16);
            }
            if (g->st > 1)
                continue;
            size_t next = y + 1 < g->hin ? at + g->wp : g->plane;
            zero32(pl + at + g->win, next - at - g->win);
        }
    }
}

/* One tile: output channels kb*MK.. of vectors t0 .. t0+nv of one image. */
BF_TARGET static BF_INLINE void pr_tile_body(const pr_pass *t, const float *bias_in, int mode,
                                             const uint32_t *xi, float *out, int kb, int t0, int nv)
{
    const pr_geom *g = t->g;
    int rs = g->r * g->s;
    __m512 acc[MK][NV];
    UNROLL
    for (int m = 0; m < MK; m++)
        UNROLL
    for (int v = 0; v < NV; v++)
        acc[m][v] = _mm512_setzero_ps();
    for (int cp = 0; cp < g->cp; cp++) {
        const uint32_t *xp = xi + (size_t)cp * g->plane + (size_t)t0 * 16;
        const uint32_t *wq = t->wpk + ((size_t)kb * g->cp + cp) * rs * MK;
        for (int o = 0; o < rs; o++) {
            const uint32_t *xo = xp + t->off[o];
            __m512bh xv[NV];
            UNROLL
            for (int v = 0; v < NV; v++)
                xv[v] = v < nv ? (__m512bh)_mm512_loadu_si512((const void *)(xo + 16 * v))
                               : (__m512bh)_mm512_setzero_si512();
            UNROLL
            for (int m = 0; m < MK; m++) {
                __m512bh wv = (__m512bh)_mm512_set1_epi32((int)wq[o * MK + m]);
                UNROLL
                for (int v = 0; v < NV; v++)
                    if (v < nv)
                        acc[m][v] = _mm512_dpbf16_ps(acc[m][v], wv, xv[v]);
            }
        }
    }
    size_t plane_out = g->out_plane;
    /* a phase of dx: lane l to column 2l of the 32 from the first */
    const __m512i lo_half = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i hi_half =
        _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    UNROLL
    for (int m = 0; m < MK; m++) {
        int k = kb * MK + m;
        if (k >= g->kout)
            break;
        float *ob = out + (size_t)k * plane_out;
        __m512 bias = mode == PR_BIAS ? _mm512_set1_ps(bias_in[k]) : _mm512_setzero_ps();
        UNROLL
        for (int v = 0; v < NV; v++) {
            if (v >= nv)
                break;
            int tv = t0 + v;
            if (g->pa >= 0) {
                uint32_t ms = t->table[tv];
                __mmask16 ml = (__mmask16)ms, mh = (__mmask16)(ms >> 16);
                float *dst = ob + t->table[g->nvec + tv];
                __m512 l = _mm512_permutexvar_ps(lo_half, acc[m][v]);
                __m512 h = _mm512_permutexvar_ps(hi_half, acc[m][v]);
                if (mode == PR_ADD) {
                    l = _mm512_add_ps(l, _mm512_maskz_loadu_ps(ml, dst));
                    h = _mm512_add_ps(h, _mm512_maskz_loadu_ps(mh, dst + 16));
                }
                _mm512_mask_storeu_ps(dst, ml, l);
                _mm512_mask_storeu_ps(dst + 16, mh, h);
                continue;
            }
            __mmask16 valid = (__mmask16)t->table[tv];
            __mmask16 sm = lanes(__builtin_popcount(valid));
            float *dst = ob + t->table[g->nvec + tv];
            __m512 c = _mm512_maskz_compress_ps(valid, _mm512_add_ps(acc[m][v], bias));
            if (mode == PR_ADD)
                c = _mm512_add_ps(c, _mm512_maskz_loadu_ps(sm, dst));
            _mm512_mask_storeu_ps(dst, sm, c);
        }
    }
}

BF_TARGET static void pr_tile(const pr_pass *t, const float *bias, int mode, const uint32_t *xi,
                              float *out, int kb, int t0, int nv)
{
    switch (nv) { /* the block sizes the balanced split gives, with constants */
    case NV: pr_tile_body(t, bias, mode, xi, out, kb, t0, NV); break;
    case NV - 1: pr_tile_body(t, bias, mode, xi, out, kb, t0, NV - 1); break;
    case NV - 2: pr_tile_body(t, bias, mode, xi, out, kb, t0, NV - 2); break;
    default: pr_tile_body(t, bias, mode, xi, out, kb, t0, nv);
    }
}

BF_TARGET static void pr_task_fn(void *arg, size_t begin, size_t end)
{
    const pr_task *t = arg;
    const pr_geom *g = t->pass[0].g; /* the input's layout: the same in every pass */
    size_t in_img = (size_t)g->cin * g->hin * g->win, out_img = t->out_img;
    size_t tiles = 0;
    for (int p = 0; p < t->npass; p++)
        tiles += (size_t)t->pass[p].g->kb * ((t->pass[p].g->nvec + NV - 1) / NV);
    for (size_t part = begin; part < end; part++) {
        int i0 = (int)(part * (size_t)t->n / (size_t)g->parts);
        int i1 = (int)((part + 1) * (size_t)t->n / (size_t)g->parts);
        uint32_t *xi = t->bufs + part * up((size_t)g->cp * g->plane, 16);
        if (g->st > 1) /* the phase planes' padding, once */
            memset(xi, 0, (size_t)g->cp * g->plane * 4);
        for (int i = i0; i < i1; i++) {
            pr_lay_out(xi, g, t->in + (size_t)i * in_img);
            float *out = t->out + (size_t)i * out_img;
            /* the next image's input is asked for (into L2) a slice per
             * tile, so that its layout does not wait on memory */
            const char *next = i + 1 < i1 ? (const char *)(t->in + (size_t)(i + 1) * in_img) : NULL;
            char *next_out = next ? (char *)(out + out_img) : NULL;
            size_t lines = in_img * 4 / 64, olines = out_img * 4 / 64;
            size_t per = (lines + tiles - 1) / tiles, oper = (olines + tiles - 1) / tiles;
            size_t line = 0, oline = 0;
            for (int p = 0; p < t->npass; p++) {
                const pr_pass *ps = &t->pass[p];
                const pr_geom *pg = ps->g;
                /* blocks of about equal size (14 vectors: 5, 5, 4 rather
                 * than 6, 6, 2, whose last has too few sums in flight) */
                int blocks = (pg->nvec + NV - 1) / NV;
                for (int kb = 0; kb < pg->kb; kb++)
                    for (int bi = 0; bi < blocks; bi++) {
                        for (size_t e = line + per; next && line < e && line < lines; line++)
                            _mm_prefetch(next + line * 64, _MM_HINT_T1);
                        /* and its output, for writing (and reading when added to) */
                        for (size_t e = oline + oper; next_out && oline < e && oline < olines;
                             oline++)
                            __builtin_prefetch(next_out + oline * 64, 1, 2);
                        int t0 = bi * pg->nvec / blocks, t1 = (bi + 1) * pg->nvec / blocks;
                        pr_tile(ps, t->bias, t->mode, xi, out, kb, t0, t1 - t0);
                    }
            }
        }
    }
}

/* wpk [kb][cp][o][MK] for output blocks [begin, end): the bf16 pair of
 * input channels (2cp, 2cp+1) of output channel kb*MK+m at offset o =
 * r'*s + s', channel 2cp in the low half; zero past kout and cin. The
 * forward's weight (m, i, o) is w [m, i, tap], the data gradient's w [i,
 * m, tap], tap the kernel's (r, s) that g maps (r', s') to (pr_geom: the
 * data gradient's kernel is turned round). */
typedef struct pack_task {
    const pr_geom *g;
    const dl_conv_desc *d;
    const float *w;
    uint32_t *wpk;
    int data;
} pack_task;

static void pack_range(void *arg, size_t begin, size_t end)
{
    const pack_task *t = arg;
    const pr_geom *g = t->g;
    int rs = g->r * g->s, cin = g->cin, krs = t->d->r * t->d->s;
    for (size_t kb = begin; kb < end; kb++)
        for (int m = 0; m < MK; m++) {
            int k = (int)kb * MK + m;
            for (int cp = 0; cp < g->cp; cp++) {
                uint32_t *dst = t->wpk + ((kb * g->cp + cp) * rs) * MK + m;
                const float *a = NULL, *b = NULL;
                size_t other = t->data ? (size_t)t->d->c * krs : (size_t)krs; /* channel 2cp+1 */
                if (k < g->kout) {
                    a = t->data ? t->w + ((size_t)(2 * cp) * t->d->c + k) * krs
                                : t->w + ((size_t)k * cin + 2 * cp) * krs;
                    b = 2 * cp + 1 < cin ? a + other : NULL;
                }
                for (int o = 0; o < rs; o++) {
                    int r = o / g->s, q = o % g->s;
                    if (g->flip)
                        r = g->r - 1 - r, q = g->s - 1 - q;
                    size_t at = (size_t)(g->r0 + g->step * r) * t->d->s + g->s0 + g->step * q;
                    uint32_t lo = a ? dl_f32_to_bf16(a[at]) : 0;
                    uint32_t hi = b ? dl_f32_to_bf16(b[at]) : 0;
                    dst[(size_t)o * MK] = lo | hi << 16;
                }
            }
        }
}

/* Runs the correlations g [0, npass) over the images of d into out (mode:
 * written, written plus bias, added); several passes are the phases of
 * stride 2's data gradient (data2_geoms), each into its own rows and
 * columns of out. */
static int pr_run(dl_backend *be, const dl_conv_desc *d, const pr_geom *g, int npass, int data,
                  const float *w, const float *in, const float *bias, float *out, void *ws,
                  int mode)
{
    uint32_t *at = (uint32_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    dl_pool *pool = dl_cpu(be)->pool;
    pr_task t = {in, bias, out, {{0}}, npass, NULL, 0, d->n, mode};
    for (int p = 0; p < npass; p++) {
        const pr_geom *pg = &g[p];
        uint32_t *wpk = at, *table = wpk + up(pg->wpk, 16);
        int *off = (int *)(table + up(pg->table, 16));
        at = (uint32_t *)off + up((size_t)pg->r * pg->s, 16);
        t.pass[p] = (pr_pass){pg, wpk, table, off};
        pack_task pk = {pg, d, w, wpk, data};
        if (pool)
            dl_pool_for(pool, (size_t)pg->kb, 1, pack_range, &pk);
        else
            pack_range(&pk, 0, (size_t)pg->kb);
        for (int o = 0; o < pg->r * pg->s; o++) {
            int r = o / pg->s + pg->dr, s = o % pg->s + pg->ds;
            off[o] = (int)(((size_t)(r % pg->st) * pg->st + s % pg->st) * pg->phase +
                           (size_t)(r / pg->st) * pg->wph + s / pg->st);
        }
        /* per vector of 16 positions: which lanes are outputs, where the first goes */
        uint32_t first = 0;
        for (int v = 0; v < pg->nvec && pg->pa >= 0; v++) {
            /* a phase: one row u of it (the pitch is a multiple of 16) */
            int u = v * 16 / pg->wph, c0 = v * 16 % pg->wph;
            uint32_t ms = 0;
            for (int l = 0; l < 16; l++)
                if (c0 + l < pg->wout)
                    ms |= 1u << (l < 8 ? 2 * l : 16 + 2 * (l - 8));
            table[v] = ms;
            table[pg->nvec + v] = (uint32_t)((size_t)(2 * u + pg->pa) * pg->ow + 2 * c0 + pg->pb);
        }
        for (int v = 0; v < pg->nvec && pg->pa < 0; v++) {
            uint32_t mask = 0;
            for (int l = 0; l < 16; l++) {
                size_t j = (size_t)v * 16 + l;
                if (j < (size_t)pg->hout * pg->wph && (int)(j % pg->wph) < pg->wout)
                    mask |= 1u << l;
            }
            table[v] = mask;
            table[pg->nvec + v] = first;
            first += (uint32_t)__builtin_popcount(mask);
        }
    }
    t.out_img = (size_t)g->kout * g->out_plane;
    t.bufs = at;
    if (pool)
        dl_pool_for(pool, (size_t)g->parts, 1, pr_task_fn, &t);
    else
        pr_task_fn(&t, 0, (size_t)g->parts);
    return DL_OK;
}

#endif /* HAVE_BF16_FILTER */

typedef struct sum_task {
    float *dw;
    const float *parts;
    size_t stride;
    int chunks;
} sum_task;

static void sum_range(void *arg, size_t begin, size_t end)
{
    const sum_task *t = arg;
    for (size_t j = begin; j < end; j++) {
        double s = 0.0;
        for (int ci = 0; ci < t->chunks; ci++)
            s += t->parts[(size_t)ci * t->stride + j];
        t->dw[j] += (float)s;
    }
}

/* dw [k, c, r, s] += the filter gradient of dy and x (db is the caller's). */
int dl_cpu_conv_bf16_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                     const float *dy, const float *x, void *ws)
{
#if HAVE_BF16_FILTER
    bf_plan p = plan_of(be, d);
    int rs = d->r * d->s;
    uint16_t *bufs = (uint16_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    float *parts = (float *)(bufs + up((size_t)p.parts * p.chunk * p.img, 32));
    int *off = (int *)(parts + (size_t)p.chunks * p.part_dw);
    for (int r = 0; r < d->r; r++)
        for (int s = 0; s < d->s; s++)
            off[r * d->s + s] = (int)(((size_t)(r % p.st) * p.st + s % p.st) * p.xphase +
                                      (size_t)(r / p.st) * p.wph + s / p.st);
    if (rs == 1) /* 1x1: the tiles' offsets step over input channels */
        for (int o = 0; o < TB; o++)
            off[o] = (int)((size_t)o * p.xplane);
    bf_task t = {d, &p, x, dy, bufs, parts, off};
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool)
        dl_pool_for(pool, (size_t)p.parts, 1, filter_task, &t);
    else
        filter_task(&t, 0, (size_t)p.parts);
    /* each weight summed over the chunks in order: any split of j is the same */
    sum_task st = {dw, parts, p.part_dw, p.chunks};
    size_t n = (size_t)d->k * d->c * rs;
    if (pool)
        dl_pool_for(pool, n, 1024, sum_range, &st);
    else
        sum_range(&st, 0, n);
    return DL_OK;
#else
    (void)be, (void)d, (void)dw, (void)dy, (void)x, (void)ws;
    return dl_error(DL_EINVAL, "conv_backward_filter: no bf16 filter kernel in this build");
#endif
}

int dl_cpu_conv_bf16_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                             const float *w, const float *b, void *ws)
{
#if HAVE_BF16_FILTER
    pr_geom g = fwd_geom(be, d);
    return pr_run(be, d, &g, 1, 0, w, x, b, y, ws, b ? PR_BIAS : PR_SET);
#else
    (void)be, (void)d, (void)y, (void)x, (void)w, (void)b, (void)ws;
    return dl_error(DL_EINVAL, "conv_forward: no bf16 pair kernel in this build");
#endif
}

int dl_cpu_conv_bf16_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx,
                                   const float *dy, const float *w, void *ws, int set)
{
#if HAVE_BF16_FILTER
    pr_geom g[4];
    int n = data_geoms(be, d, g);
    return pr_run(be, d, g, n, 1, w, dy, NULL, dx, ws, set ? PR_SET : PR_ADD);
#else
    (void)be, (void)d, (void)dx, (void)dy, (void)w, (void)ws, (void)set;
    return dl_error(DL_EINVAL, "conv_backward_data: no bf16 pair kernel in this build");
#endif
}
