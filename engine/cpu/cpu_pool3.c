/* cpu_pool3.c - 3x3 pooling on 16 and 8 lanes: max with stride 2 (the ResNet stem's), average with stride 1
 *
 * Max pooling, 3x3, stride 2. The window of output column o starts at
 * input column 2o - pad, so tap column k of 16 neighbouring outputs o0..
 * is every other float of the 32 from column 2 o0 - pad (k = 0: even
 * lanes, k = 1: odd) or of the 32 from one further (k = 2: odd lanes):
 * four whole loads and three two-source permutes. A group is 16 outputs
 * of a row, a strip of 32 input columns. A tap outside the input is never
 * used: forward its permute index takes the output's tap 1 instead (a
 * column inside the input; a value stepped in twice is the same maximum,
 * bits and NaN alike), backward its compares are masked off. Loads are
 * whole vectors (masked loads cost more here) except in planes where one
 * would leave the caller's planes: there they are masked to the input's
 * columns.
 *
 * Forward: per input row the maximum over each output's three columns
 * (H), then over the window's three rows, each step the scalar loop's
 * (a larger value or a NaN replaces the running maximum): the first
 * largest value or the last NaN in row-major order, the same bits as the
 * scalar scan and the 8-lane windows (the argument is cpu_conv.c's, at
 * win8_max_planes). Row 2 oh + 2 - pad of output row oh is row 0 of the
 * next: its H is carried, so each input row is read once per strip.
 *
 * Backward: per output, the first of its nine cells in scan order equal
 * to y gets dy: the nine equalities at once, then a vector of the dy not
 * yet given goes tap by tap to the first equal one. Column k's
 * contributions of a group, summed per row and column parity (even
 * columns: k = 0 plus k = 2 of the output to the left, a lane shift that
 * carries the previous group's last lane; odd: k = 1) and interleaved
 * back, give 32 columns of a row. A row takes window row 1 of one output
 * row, or row 2 of one and row 0 of the next (carried, per group), into
 * one of two scratch planes; dx (+)= the scratch as one flat array a
 * plane later (0 + it when dx is written, as adding into zeros gives).
 * Rows and columns no window reaches add 0.
 *
 * Average pooling, 3x3, stride 1 (an Inception branch's). Every window
 * of it with pad 0 or 1 covers 9 cells of the padded input, the divisor
 * (count_include_pad). Forward, per 16 outputs of a row: 0 + the
 * window's cells inside the input in row-major order, then / 9, each
 * lane's adds the scalar loop's in its order (a tap outside the input is
 * masked off its add), so the same bits; two output rows at once, as
 * each sum is a chain of nine adds. Backward (adding; nothing writes
 * average pooling's dx): g = dy / 9 into a scratch plane (rows of whole
 * vectors, room around), then per 16 cells of a dx row dx + the g of
 * each output whose window holds the cell, in output order: the scalar
 * loop's additions, in its order (an output outside is masked off its
 * add: adding a 0 would turn a dx of -0 into +0). The next row's dx is
 * loaded before this row's masked store (a load that meets such a store
 * waits for it to retire).
 *
 * The 16-lane kernels are described here; the 8-lane ones (AVX2), in
 * their sections below, follow them. Taken where the CPU has AVX-512F or
 * AVX2, the window is 3x3 with stride 2 (max) or 1 (average) and pad 0
 * or 1, the output rows hold at most MAX_GROUPS groups (MAX_GROUPS8 on 8
 * lanes), the planes fit the scratch, and DLBENCH_POOL3 is not 0 (read
 * per call: the tests and bench_membound compare against cpu_conv.c's
 * 8-lane windows with it). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define MAX3_VECTOR 1
#define MAX3_TARGET __attribute__((target("avx512f")))
/* the plane loops are instantiated twice, whole loads or masked */
#define MAX3_INLINE MAX3_TARGET static inline __attribute__((always_inline))
#endif

#define MAX_GROUPS 64   /* output rows up to 1024 */
#define MAX_GROUPS8 64  /* on 8 lanes: up to 512 */
#define MAX_PLANE 65536 /* floats of two input planes the backward's scratch holds */

#ifdef MAX3_VECTOR
/* A thread's backward scratch: two planes' contributions (no allocation
 * in a training step). */
static _Thread_local float plane_acc[MAX_PLANE + 64];
#endif

/* The window is 3x3 with this stride, pad 0 or 1, and the kernels may run
 * (avx2: the 8-lane ones will do). */
static int takes(const dl_pool_desc *d, int stride, int avx2)
{
#ifdef MAX3_VECTOR
    const char *e = getenv("DLBENCH_POOL3");
    if (e && !strcmp(e, "0"))
        return 0;
    if (d->size != 3 || d->stride != stride || (d->pad != 0 && d->pad != 1))
        return 0;
    if (dl_cpu_avx512())
        return (d->q + 15) / 16 <= MAX_GROUPS;
    return avx2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           (d->q + 7) / 8 <= MAX_GROUPS8;
#else
    (void)d, (void)stride, (void)avx2;
    return 0;
#endif
}

/* The 8-lane backward's floats between two scratch rows: every group's
 * 16 columns and the carry group's, room on both sides. */
static size_t pitch8(const dl_pool_desc *d) { return (size_t)((d->q + 7) / 8 + 1) * 16 + 32; }

int dl_cpu_max3s2_takes(const dl_pool_desc *d)
{
    if (!takes(d, 2, 1))
        return 0;
    if (dl_cpu_avx512())
        return (size_t)d->h * d->w <= MAX_PLANE / 2;
    return 2 * ((size_t)d->h * pitch8(d) + 32) <= MAX_PLANE;
}

/* the backward's g plane: rows of the groups' vectors, a row above and
 * below, 32 floats on each side */
static size_t avg_pitch(const dl_pool_desc *d) { return (size_t)(d->q + 15) / 16 * 16 + 64; }

int dl_cpu_avg3s1_takes(const dl_pool_desc *d)
{
    return takes(d, 1, 1) && (size_t)(d->p + 2) * avg_pitch(d) <= MAX_PLANE;
}

#ifdef MAX3_VECTOR
/* Lanes i of 16 columns from c0 with 0 <= c0 + i < w. */
static __mmask16 cols_in(int c0, int w)
{
    int lo = c0 < 0 ? -c0 : 0, hi = w - c0;
    if (hi <= lo)
        return 0;
    unsigned top = hi >= 16 ? 0xffffu : (1u << hi) - 1u;
    return (__mmask16)(top & ~((1u << (lo > 16 ? 16 : lo)) - 1u));
}

/* A group: its first window column c0; the masks of its loads' columns
 * inside the input (the 32 from c0: k[0], k[1]; from c0 + 1: k[2],
 * k[3]), for masked loads; per tap column the lanes of outputs (< q)
 * whose tap lies inside the input (v); the forward's permute indices. */
typedef struct grp {
    __m512i idx[3];
    int c0;
    __mmask16 k[4], v[3];
} grp;

/* Groups 0..groups of a row (one past the last: the backward's carry
 * column); returns the number of output groups. */
MAX3_TARGET static int groups_of(const dl_pool_desc *d, grp *g)
{
    int groups = (d->q + 15) / 16;
    for (int i = 0; i <= groups; i++) {
        int c0 = 32 * i - d->pad;
        int32_t idx[3][16];
        g[i].c0 = c0;
        g[i].k[0] = cols_in(c0, d->w);
        g[i].k[1] = cols_in(c0 + 16, d->w);
        g[i].k[2] = cols_in(c0 + 1, d->w);
        g[i].k[3] = cols_in(c0 + 17, d->w);
        g[i].v[0] = g[i].v[1] = g[i].v[2] = 0;
        for (int l = 0; l < 16; l++) {
            int real = 16 * i + l < d->q;
            for (int k = 0; k < 3; k++) {
                int col = c0 + 2 * l + k, in = col >= 0 && col < d->w;
                if (real && in)
                    g[i].v[k] |= (__mmask16)(1u << l);
            }
            /* tap 1 of a real output is inside the input (pad <= 1) */
            idx[0][l] = real && c0 + 2 * l < 0 ? 2 * l + 1 : 2 * l;
            idx[1][l] = 2 * l + 1;
            idx[2][l] = real && c0 + 2 * l + 2 >= d->w ? 2 * l : 2 * l + 1;
        }
        for (int k = 0; k < 3; k++)
            g[i].idx[k] = _mm512_loadu_si512(idx[k]);
    }
    return groups;
}

/* The running maximum's step: x where x > v or x is NaN (maxps(x, v) is
 * x > v ? x : v, v on ties and where x is NaN). */
MAX3_TARGET static inline __m512 step(__m512 v, __m512 x)
{
    return _mm512_mask_mov_ps(_mm512_max_ps(x, v), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

MAX3_TARGET static inline __m512 relu(__m512 v)
{
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
}

/* 16 floats at p: whole, or only the lanes of k (the others 0). */
MAX3_INLINE __m512 load(const float *p, __mmask16 k, int whole)
{
    return whole ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}

/* Tap columns 0, 1, 2 of a group's 16 outputs in input row xr, by the
 * permute indices (relu'd when fused: NaN maps to 0, as the ReLU
 * kernel's). */
MAX3_INLINE void taps(const float *xr, const grp *g, int fused, int whole, __m512 t[3])
{
    const float *p = xr + g->c0;
    __m512 a = load(p, g->k[0], whole), b = load(p + 16, g->k[1], whole);
    __m512 c = load(p + 1, g->k[2], whole), e = load(p + 17, g->k[3], whole);
    if (fused)
        a = relu(a), b = relu(b), c = relu(c), e = relu(e);
    t[0] = _mm512_permutex2var_ps(a, g->idx[0], b);
    t[1] = _mm512_permutex2var_ps(a, g->idx[1], b);
    t[2] = _mm512_permutex2var_ps(c, g->idx[2], e);
}

/* H of input row r for group g: the maxima over each output's columns;
 * -inf for a row outside the input. */
MAX3_INLINE __m512 row_max(const dl_pool_desc *d, const float *xp, int r, const grp *g, int fused,
                           int whole)
{
    if (r < 0 || r >= d->h)
        return _mm512_set1_ps(-INFINITY);
    __m512 t[3];
    taps(xp + (size_t)r * d->w, g, fused, whole, t);
    return step(step(t[0], t[1]), t[2]);
}

MAX3_INLINE void fwd_plane(const dl_pool_desc *d, const grp *g, int groups, int fused, int whole,
                           const float *xp, float *yp)
{
    for (int i = 0; i < groups; i++) {
        /* copies the stores cannot alias: nothing reloaded after each */
        const grp gi = g[i];
        __mmask16 kq = cols_in(16 * i, d->q);
        __m512 h0 = row_max(d, xp, -d->pad, &gi, fused, whole);
        for (int oh = 0; oh < d->p; oh++) {
            int r0 = 2 * oh - d->pad;
            __m512 h1 = row_max(d, xp, r0 + 1, &gi, fused, whole);
            __m512 h2 = row_max(d, xp, r0 + 2, &gi, fused, whole);
            _mm512_mask_storeu_ps(yp + (size_t)oh * d->q + 16 * i, kq, step(step(h0, h1), h2));
            h0 = h2;
        }
    }
}

/* Whether plane pl's whole loads stay inside planes [begin, end) of n
 * floats each: they start at most a float before the plane (x's, with
 * pad 1: before) and end under 48 past it. */
static int plane_whole(size_t pl, size_t begin, size_t end, size_t n, int before)
{
    return (!before || pl > begin) && (end - pl - 1) * n >= 48;
}

MAX3_TARGET static void fwd_planes(const dl_pool_desc *d, int fused, const float *x, float *y,
                                   size_t begin, size_t end)
{
    grp g[MAX_GROUPS + 1];
    int groups = groups_of(d, g);
    const dl_pool_desc dd = *d; /* a copy the stores cannot alias */
    size_t hw = (size_t)dd.h * dd.w;
    for (size_t pl = begin; pl < end; pl++) {
        const float *xp = x + pl * hw;
        float *yp = y + pl * dd.p * dd.q;
        if (plane_whole(pl, begin, end, hw, dd.pad))
            fwd_plane(&dd, g, groups, fused, 1, xp, yp);
        else
            fwd_plane(&dd, g, groups, fused, 0, xp, yp);
    }
}

/* Row r's 32 columns of group g, masked to the input, into the plane's
 * scratch. */
MAX3_TARGET static inline void put_row(float *row, const grp *g, __m512 lo, __m512 hi)
{
    _mm512_mask_storeu_ps(row + g->c0, g->k[0], lo);
    _mm512_mask_storeu_ps(row + g->c0 + 16, g->k[1], hi);
}

typedef struct bwd_args {
    const dl_pool_desc *d;
    int fused;
    const float *xp, *yp, *gp; /* the plane's x, y and dy */
    float *acc;                /* [h, w]: the plane's contributions */
} bwd_args;

/* The contributions of output row oh's group g to its three window rows:
 * c[kh][k] (dy where tap (kh, k) is the output's first cell equal to y). */
MAX3_INLINE void hits(const bwd_args *a, const grp *g, int i, int oh, int whole, __m512 c[3][3])
{
    const dl_pool_desc *d = a->d;
    size_t at = (size_t)oh * d->q + 16 * i;
    __m512 yv = load(a->yp + at, g->v[1], whole), gv = load(a->gp + at, g->v[1], whole);
    if (a->fused) /* relu'(x) of the chosen cell is 0 where y <= 0 */
        gv = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(yv, _mm512_setzero_ps(), _CMP_GT_OQ), gv);
    /* every tap's equality first (lanes of taps outside the input, or
     * past q, off), then the first of them: a found mask carried from
     * tap to tap through the mask registers was a chain as slow as the
     * 8-lane kernel, a vector of what is left of dy is not */
    __mmask16 eq[9];
#pragma GCC unroll 3
    for (int kh = 0; kh < 3; kh++) {
        int r = 2 * oh - d->pad + kh;
        if (r < 0 || r >= d->h) {
            eq[3 * kh] = eq[3 * kh + 1] = eq[3 * kh + 2] = 0;
            continue;
        }
        __m512 t[3];
        /* raw x: where y > 0, relu(x) == y exactly where x == y */
        taps(a->xp + (size_t)r * d->w, g, 0, whole, t);
#pragma GCC unroll 3
        for (int k = 0; k < 3; k++)
            eq[3 * kh + k] = _mm512_mask_cmp_ps_mask(g->v[k], t[k], yv, _CMP_EQ_OQ);
    }
    /* dy not yet given, taken by the first equal tap */
    __m512 rest = gv;
#pragma GCC unroll 9
    for (int k = 0; k < 9; k++) {
        c[k / 3][k % 3] = _mm512_maskz_mov_ps(eq[k], rest);
        rest = _mm512_mask_mov_ps(rest, eq[k], _mm512_setzero_ps());
    }
}

/* Row r's columns from a group's even and odd column sums, interleaved. */
MAX3_INLINE void put_cols(float *acc, int w, int r, const grp *g, __m512 ev, __m512 od)
{
    /* lanes 2j, 2j+1 of the 32 columns: even j, odd j */
    const __m512i il0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i il1 =
        _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    put_row(acc + (size_t)r * w, g, _mm512_permutex2var_ps(ev, il0, od),
            _mm512_permutex2var_ps(ev, il1, od));
}

MAX3_INLINE void bwd_rows(const bwd_args *a, const grp *g, int groups, int whole)
{
    const dl_pool_desc *d = a->d;
    const __m512 zero = _mm512_setzero_ps();
    /* groups that reach the input: the one past the last only where its
     * carried column (the last output's tap 2) is inside */
    int reach = g[groups].k[0] ? groups + 1 : groups;
    /* window row 2 of the last output row, per group: its even and odd
     * column sums, added to row 0 of the next before they are interleaved */
    __m512 carry[MAX_GROUPS + 1][2];
    for (int i = 0; i < reach; i++)
        carry[i][0] = carry[i][1] = zero;
    for (int oh = 0; oh < d->p; oh++) {
        int r0 = 2 * oh - d->pad;
        __m512 prev[3] = {zero, zero, zero}; /* column 2 of the group to the left */
        for (int i = 0; i < reach; i++) {
            __m512 c[3][3];
            const grp gi = g[i]; /* a copy the stores cannot alias */
            if (i < groups)
                hits(a, &gi, i, oh, whole, c);
            else /* past the last group: only the carried column */
#pragma GCC unroll 3
                for (int kh = 0; kh < 3; kh++)
                    c[kh][0] = c[kh][1] = c[kh][2] = zero;
            __m512 ev[3];
#pragma GCC unroll 3
            for (int kh = 0; kh < 3; kh++) {
                ev[kh] = _mm512_add_ps(c[kh][0], _mm512_castsi512_ps(_mm512_alignr_epi32(
                                                     _mm512_castps_si512(c[kh][2]),
                                                     _mm512_castps_si512(prev[kh]), 15)));
                prev[kh] = c[kh][2];
            }
            if (r0 >= 0)
                put_cols(a->acc, d->w, r0, &gi, _mm512_add_ps(carry[i][0], ev[0]),
                         _mm512_add_ps(carry[i][1], c[0][1]));
            if (r0 + 1 < d->h)
                put_cols(a->acc, d->w, r0 + 1, &gi, ev[1], c[1][1]);
            carry[i][0] = ev[2];
            carry[i][1] = c[2][1];
        }
    }
    int last = 2 * d->p - d->pad; /* window row 2 of the last output row */
    if (last < d->h)
        for (int i = 0; i < reach; i++)
            put_cols(a->acc, d->w, last, &g[i], carry[i][0], carry[i][1]);
    if (last + 1 < d->h) /* rows no window reaches */
        memset(a->acc + (size_t)(last + 1) * d->w, 0,
               (size_t)(d->h - last - 1) * d->w * sizeof(float));
}

/* dx (+)= the scratch plane as one flat array: dx's loads never meet the
 * masked stores of a row before (such an overlap waits for the store to
 * retire), 0 + it when dx is written. */
MAX3_TARGET static void add_plane(float *dx, const float *acc, size_t n, int set)
{
    const __m512 zero = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 old = set ? zero : _mm512_loadu_ps(dx + i);
        _mm512_storeu_ps(dx + i, _mm512_add_ps(old, _mm512_loadu_ps(acc + i)));
    }
    if (i < n) {
        __mmask16 k = cols_in(0, (int)(n - i));
        __m512 old = set ? zero : _mm512_maskz_loadu_ps(k, dx + i);
        _mm512_mask_storeu_ps(dx + i, k, _mm512_add_ps(old, _mm512_maskz_loadu_ps(k, acc + i)));
    }
}

MAX3_TARGET static void bwd_planes(const dl_pool_desc *d, int fused, int set, const float *x,
                                   const float *y, const float *dy, float *dx, size_t begin,
                                   size_t end)
{
    grp g[MAX_GROUPS + 1];
    int groups = groups_of(d, g);
    const dl_pool_desc dd = *d; /* a copy the stores cannot alias */
    /* two scratch planes: a plane's is added to dx after the next one's
     * rows, when its masked stores have left the store buffer (loads
     * that meet them wait for that) */
    size_t hw = (size_t)dd.h * dd.w, pq = (size_t)dd.p * dd.q;
    float *acc[2] = {plane_acc + 16, plane_acc + 16 + MAX_PLANE / 2 + 32}; /* column -1: room */
    for (size_t pl = begin; pl < end; pl++) {
        bwd_args a = {&dd, fused, x + pl * hw, y + pl * pq, dy + pl * pq, acc[pl & 1]};
        if (plane_whole(pl, begin, end, hw, dd.pad) && plane_whole(pl, begin, end, pq, 0))
            bwd_rows(&a, g, groups, 1);
        else
            bwd_rows(&a, g, groups, 0);
        if (pl > begin)
            add_plane(dx + (pl - 1) * hw, acc[(pl - 1) & 1], hw, set);
    }
    add_plane(dx + (end - 1) * hw, acc[(end - 1) & 1], hw, set);
}

/* --- average, 3x3, stride 1 ------------------------------------------- */

/* A group of 16 columns: the lanes inside the row (k: outputs < q, or dx
 * cells < w) and per tap column the lanes whose other end (the input
 * column of an output's tap, or the output of a cell's) lies inside. */
typedef struct avg_grp {
    __mmask16 k, v[3];
} avg_grp;

/* Output groups (dx 0): tap kw of output ow is column ow - pad + kw.
 * dx groups (dx 1): cell c gets output c + pad - 2 + kw. */
static int avg_groups(const dl_pool_desc *d, int dx, avg_grp *g)
{
    int n = dx ? d->w : d->q, groups = (n + 15) / 16;
    for (int i = 0; i < groups; i++) {
        g[i].k = cols_in(16 * i, n);
        for (int kw = 0; kw < 3; kw++)
            g[i].v[kw] = g[i].k & (dx ? cols_in(16 * i + d->pad - 2 + kw, d->q)
                                      : cols_in(16 * i - d->pad + kw, d->w));
    }
    return groups;
}

/* Output row oh's sum for group g, tap after tap (0 for a row past p). */
MAX3_INLINE __m512 avg_sum(const dl_pool_desc *d, const avg_grp *g, int i, int oh, int whole,
                           const float *xp)
{
    __m512 s = _mm512_setzero_ps();
    int hs = oh - d->pad;
    int k0 = hs < 0 ? -hs : 0, k1 = d->h - hs < 3 ? d->h - hs : 3;
    for (int kh = k0; oh < d->p && kh < k1; kh++) {
        const float *p = xp + (size_t)(hs + kh) * d->w + 16 * i - d->pad;
#pragma GCC unroll 3
        for (int kw = 0; kw < 3; kw++)
            s = _mm512_mask_add_ps(s, g->v[kw], s, load(p + kw, g->v[kw], whole));
    }
    return s;
}

MAX3_INLINE void avg_fwd_plane(const dl_pool_desc *d, const avg_grp *g, int groups, int whole,
                               const float *xp, float *yp)
{
    const __m512 nine = _mm512_set1_ps(9.0f);
    /* two output rows at once: each sum is a chain of nine adds */
    for (int oh = 0; oh < d->p; oh += 2)
        for (int i = 0; i < groups; i++) {
            const avg_grp gi = g[i]; /* a copy the stores cannot alias */
            __m512 s0 = avg_sum(d, &gi, i, oh, whole, xp);
            __m512 s1 = avg_sum(d, &gi, i, oh + 1, whole, xp);
            _mm512_mask_storeu_ps(yp + (size_t)oh * d->q + 16 * i, gi.k, _mm512_div_ps(s0, nine));
            if (oh + 1 < d->p)
                _mm512_mask_storeu_ps(yp + (size_t)(oh + 1) * d->q + 16 * i, gi.k,
                                      _mm512_div_ps(s1, nine));
        }
}

MAX3_TARGET static void avg_fwd_planes(const dl_pool_desc *d, const float *x, float *y,
                                       size_t begin, size_t end)
{
    avg_grp g[MAX_GROUPS];
    int groups = avg_groups(d, 0, g);
    const dl_pool_desc dd = *d; /* a copy the stores cannot alias */
    size_t hw = (size_t)dd.h * dd.w, pq = (size_t)dd.p * dd.q;
    for (size_t pl = begin; pl < end; pl++) {
        if (plane_whole(pl, begin, end, hw, dd.pad))
            avg_fwd_plane(&dd, g, groups, 1, x + pl * hw, y + pl * pq);
        else
            avg_fwd_plane(&dd, g, groups, 0, x + pl * hw, y + pl * pq);
    }
}

/* dx rows of one plane from its g plane G (row oh at G + (oh + 1) pitch
 * + 32), added: row r's cells take the outputs from row r + pad - 2 on.
 * dx is loaded a row ahead, before the masked stores of the
 * row before can meet it. */
MAX3_INLINE void avg_dx_rows(const dl_pool_desc *d, const avg_grp *g, int groups, int whole,
                             const float *G, size_t pitch, float *dxp)
{
    __m512 old[2][MAX_GROUPS + 1]; /* w up to q + 2: one more group than the outputs */
    for (int j = 0; j < groups; j++)
        old[0][j] = load(dxp + 16 * j, g[j].k, whole);
    for (int r = 0; r < d->h; r++) {
        float *xr = dxp + (size_t)r * d->w;
        for (int j = 0; j < groups && r + 1 < d->h; j++)
            old[(r + 1) & 1][j] = load(xr + d->w + 16 * j, g[j].k, whole);
        int o0 = r + d->pad - 2;
        int k0 = o0 < 0 ? -o0 : 0, k1 = d->p - o0 < 3 ? d->p - o0 : 3;
        for (int j = 0; j < groups; j++) {
            const avg_grp gj = g[j]; /* a copy the stores cannot alias */
            __m512 s = old[r & 1][j];
            for (int kh = k0; kh < k1; kh++) {
                const float *gp = G + (size_t)(o0 + kh + 1) * pitch + 32 + 16 * j + d->pad - 2;
#pragma GCC unroll 3
                for (int kw = 0; kw < 3; kw++)
                    s = _mm512_mask_add_ps(s, gj.v[kw], s, _mm512_loadu_ps(gp + kw));
            }
            _mm512_mask_storeu_ps(xr + 16 * j, gj.k, s);
        }
    }
}

MAX3_TARGET static void avg_bwd_planes(const dl_pool_desc *d, const float *dy, float *dx,
                                       size_t begin, size_t end)
{
    avg_grp go[MAX_GROUPS], gx[MAX_GROUPS + 1];
    int groups = avg_groups(d, 0, go), xgroups = avg_groups(d, 1, gx);
    const dl_pool_desc dd = *d; /* a copy the stores cannot alias */
    size_t hw = (size_t)dd.h * dd.w, pq = (size_t)dd.p * dd.q, pitch = avg_pitch(&dd);
    const __m512 nine = _mm512_set1_ps(9.0f);
    float *G = plane_acc;
    for (size_t pl = begin; pl < end; pl++) {
        const float *gp = dy + pl * pq;
        int whole = plane_whole(pl, begin, end, pq, 0);
        /* g = dy / 9, as the scalar loop divides */
        for (int oh = 0; oh < dd.p; oh++)
            for (int i = 0; i < groups; i++) {
                const float *p = gp + (size_t)oh * dd.q + 16 * i;
                __m512 v = whole ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(go[i].k, p);
                _mm512_storeu_ps(G + (size_t)(oh + 1) * pitch + 32 + 16 * i,
                                 _mm512_div_ps(v, nine));
            }
        if (plane_whole(pl, begin, end, hw, 0))
            avg_dx_rows(&dd, gx, xgroups, 1, G, pitch, dx + pl * hw);
        else
            avg_dx_rows(&dd, gx, xgroups, 0, G, pitch, dx + pl * hw);
    }
}

/* --- max, 3x3, stride 2, on 8 lanes (AVX2) ----------------------------
 * The 16-lane kernels' scheme with 8 outputs a group: 16 input columns
 * from c0 = 16 i - pad (taps 0 and 1: their even and odd lanes, by a
 * shuffle and a lane permute) and 16 from c0 + 1 (tap 2: odd lanes).
 * Forward, a tap outside the input is replaced by the output's tap 1 (a
 * blend, in the edge groups only); backward its equalities are masked
 * off. AVX2 has no cheap masked store, so the backward's scratch rows
 * have a pitch of their own, wide enough for every group's whole stores,
 * and reach dx row by row a plane later, each row's dx loaded before the
 * row above is stored (that row's last vector runs into this one, adding
 * the scratch's zeros). */
#define V8_TARGET __attribute__((target("avx2,fma")))
#define V8_INLINE V8_TARGET static inline __attribute__((always_inline))

typedef struct grp8 {
    __m256i k[4];       /* load masks: lanes inside the input, as k above */
    __m256i kq;         /* lanes of outputs < q */
    __m256 v[3];        /* lanes of outputs < q whose tap k is inside */
    __m256 left, right; /* forward: lanes whose tap 0 / tap 2 is outside */
    int c0, edge;       /* edge: left or right has a lane */
} grp8;

/* All ones in lanes i of 8 columns from c0 with lo <= c0 + i < hi. */
V8_TARGET static __m256i cols_in8(int c0, int lo, int hi)
{
    __m256i c = _mm256_add_epi32(_mm256_set1_epi32(c0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), c),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), c));
}

/* Groups 0..groups (one past the last: the backward's carry column). */
V8_TARGET static int groups_of8(const dl_pool_desc *d, grp8 *g)
{
    int groups = (d->q + 7) / 8;
    for (int i = 0; i <= groups; i++) {
        int c0 = 16 * i - d->pad, o0 = 8 * i;
        g[i].c0 = c0;
        g[i].k[0] = cols_in8(c0, 0, d->w);
        g[i].k[1] = cols_in8(c0 + 8, 0, d->w);
        g[i].k[2] = cols_in8(c0 + 1, 0, d->w);
        g[i].k[3] = cols_in8(c0 + 9, 0, d->w);
        g[i].kq = cols_in8(o0, 0, d->q);
        float v[3][8], left[8], right[8];
        g[i].edge = 0;
        for (int l = 0; l < 8; l++) {
            int real = o0 + l < d->q;
            for (int k = 0; k < 3; k++) {
                int col = c0 + 2 * l + k;
                v[k][l] = real && col >= 0 && col < d->w ? -1.0f : 0.0f; /* sign bit: blendv */
            }
            left[l] = real && c0 + 2 * l < 0 ? -1.0f : 0.0f;
            right[l] = real && c0 + 2 * l + 2 >= d->w ? -1.0f : 0.0f;
            g[i].edge |= left[l] != 0 || right[l] != 0;
        }
        /* masks as all-ones lanes (and), from the sign-bit floats */
        for (int k = 0; k < 3; k++)
            g[i].v[k] = _mm256_castsi256_ps(
                _mm256_srai_epi32(_mm256_castps_si256(_mm256_loadu_ps(v[k])), 31));
        g[i].left =
            _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(_mm256_loadu_ps(left)), 31));
        g[i].right =
            _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(_mm256_loadu_ps(right)), 31));
    }
    return groups;
}

V8_INLINE __m256 load8(const float *p, __m256i k, int whole)
{
    return whole ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, k);
}

/* The even (odd) lanes of the 16 floats a, b, in order. */
V8_INLINE __m256 even8(__m256 a, __m256 b)
{
    return _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
}
V8_INLINE __m256 odd8(__m256 a, __m256 b)
{
    return _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

V8_INLINE __m256 relu8(__m256 v)
{
    return _mm256_and_ps(v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ));
}

/* step on 8 lanes: x where x > v or x is NaN */
V8_INLINE __m256 step8(__m256 v, __m256 x)
{
    return _mm256_blendv_ps(_mm256_max_ps(x, v), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* Tap columns 0, 1, 2 of a group's 8 outputs in input row xr; fix: taps
 * outside the input replaced by tap 1 (forward). */
V8_INLINE void taps8(const float *xr, const grp8 *g, int fused, int whole, int fix, __m256 t[3])
{
    const float *p = xr + g->c0;
    __m256 a = load8(p, g->k[0], whole), b = load8(p + 8, g->k[1], whole);
    __m256 c = load8(p + 1, g->k[2], whole), e = load8(p + 9, g->k[3], whole);
    if (fused)
        a = relu8(a), b = relu8(b), c = relu8(c), e = relu8(e);
    t[0] = even8(a, b);
    t[1] = odd8(a, b);
    t[2] = odd8(c, e);
    if (fix && g->edge) {
        t[0] = _mm256_blendv_ps(t[0], t[1], g->left);
        t[2] = _mm256_blendv_ps(t[2], t[1], g->right);
    }
}

V8_INLINE __m256 row_max8(const dl_pool_desc *d, const float *xp, int r, const grp8 *g, int fused,
                          int whole)
{
    if (r < 0 || r >= d->h)
        return _mm256_set1_ps(-INFINITY);
    __m256 t[3];
    taps8(xp + (size_t)r * d->w, g, fused, whole, 1, t);
    return step8(step8(t[0], t[1]), t[2]);
}

V8_INLINE void fwd_plane8(const dl_pool_desc *d, const grp8 *g, int groups, int fused, int whole,
                          const float *xp, float *yp)
{
    for (int i = 0; i < groups; i++) {
        const grp8 gi = g[i]; /* a copy the stores cannot alias */
        int full = d->q - 8 * i >= 8;
        __m256 h0 = row_max8(d, xp, -d->pad, &gi, fused, whole);
        for (int oh = 0; oh < d->p; oh++) {
            int r0 = 2 * oh - d->pad;
            __m256 h1 = row_max8(d, xp, r0 + 1, &gi, fused, whole);
            __m256 h2 = row_max8(d, xp, r0 + 2, &gi, fused, whole);
            __m256 out = step8(step8(h0, h1), h2);
            float *yr = yp + (size_t)oh * d->q + 8 * i;
            if (full)
                _mm256_storeu_ps(yr, out);
            else
                _mm256_maskstore_ps(yr, gi.kq, out);
            h0 = h2;
        }
    }
}

V8_TARGET static void fwd_planes8(const dl_pool_desc *d, int fused, const float *x, float *y,
                                  size_t begin, size_t end)
{
    grp8 g[MAX_GROUPS8 + 1];
    int groups = groups_of8(d, g);
    const dl_pool_desc dd = *d; /* a copy the stores cannot alias */
    size_t hw = (size_t)dd.h * dd.w;
    for (size_t pl = begin; pl < end; pl++) {
        const float *xp = x + pl * hw;
        float *yp = y + pl * dd.p * dd.q;
        if (plane_whole(pl, begin, end, hw, dd.pad))
            fwd_plane8(&dd, g, groups, fused, 1, xp, yp);
        else
            fwd_plane8(&dd, g, groups, fused, 0, xp, yp);
    }
}

V8_INLINE void hits8(const bwd_args *a, const grp8 *g, int i, int oh, int whole, __m256 c[3][3])
{
    const dl_pool_desc *d = a->d;
    size_t at = (size_t)oh * d->q + 8 * i;
    __m256 yv = load8(a->yp + at, g->kq, whole), gv = load8(a->gp + at, g->kq, whole);
    if (a->fused) /* relu'(x) of the chosen cell is 0 where y <= 0 */
        gv = _mm256_and_ps(gv, _mm256_cmp_ps(yv, _mm256_setzero_ps(), _CMP_GT_OQ));
    __m256 eq[9];
#pragma GCC unroll 3
    for (int kh = 0; kh < 3; kh++) {
        int r = 2 * oh - d->pad + kh;
        if (r < 0 || r >= d->h) {
            eq[3 * kh] = eq[3 * kh + 1] = eq[3 * kh + 2] = _mm256_setzero_ps();
            continue;
        }
        __m256 t[3];
        taps8(a->xp + (size_t)r * d->w, g, 0, whole, 0, t);
#pragma GCC unroll 3
        for (int k = 0; k < 3; k++)
            eq[3 * kh + k] = _mm256_and_ps(_mm256_cmp_ps(t[k], yv, _CMP_EQ_OQ), g->v[k]);
    }
    __m256 rest = gv; /* dy not yet given, taken by the first equal tap */
#pragma GCC unroll 9
    for (int k = 0; k < 9; k++) {
        c[k / 3][k % 3] = _mm256_and_ps(eq[k], rest);
        rest = _mm256_andnot_ps(eq[k], rest);
    }
}

/* Row r's 16 columns of a group from its even and odd column sums. */
V8_INLINE void put_cols8(float *row, const grp8 *g, __m256 ev, __m256 od)
{
    __m256 lo = _mm256_unpacklo_ps(ev, od), hi = _mm256_unpackhi_ps(ev, od);
    _mm256_storeu_ps(row + g->c0, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(row + g->c0 + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

V8_INLINE void bwd_rows8(const bwd_args *a, const grp8 *g, int groups, int whole, size_t pitch)
{
    const dl_pool_desc *d = a->d;
    const __m256 zero = _mm256_setzero_ps();
    const __m256i rot = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
    __m256 carry[MAX_GROUPS8 + 1][2];
    for (int i = 0; i <= groups; i++)
        carry[i][0] = carry[i][1] = zero;
    for (int oh = 0; oh < d->p; oh++) {
        int r0 = 2 * oh - d->pad;
        __m256 prev[3] = {zero, zero, zero};
        for (int i = 0; i <= groups; i++) {
            __m256 c[3][3];
            const grp8 gi = g[i]; /* a copy the stores cannot alias */
            if (i < groups)
                hits8(a, &gi, i, oh, whole, c);
            else
#pragma GCC unroll 3
                for (int kh = 0; kh < 3; kh++)
                    c[kh][0] = c[kh][1] = c[kh][2] = zero;
            __m256 ev[3];
#pragma GCC unroll 3
            for (int kh = 0; kh < 3; kh++) {
                /* column 2 one lane up, the group to the left's last lane in */
                __m256 up = _mm256_blend_ps(_mm256_permutevar8x32_ps(c[kh][2], rot),
                                            _mm256_permutevar8x32_ps(prev[kh], rot), 0x01);
                ev[kh] = _mm256_add_ps(c[kh][0], up);
                prev[kh] = c[kh][2];
            }
            if (r0 >= 0)
                put_cols8(a->acc + (size_t)r0 * pitch, &gi, _mm256_add_ps(carry[i][0], ev[0]),
                          _mm256_add_ps(carry[i][1], c[0][1]));
            if (r0 + 1 < d->h)
                put_cols8(a->acc + (size_t)(r0 + 1) * pitch, &gi, ev[1], c[1][1]);
            carry[i][0] = ev[2];
            carry[i][1] = c[2][1];
        }
    }
    int last = 2 * d->p - d->pad;
    if (last < d->h)
        for (int i = 0; i <= groups; i++)
            put_cols8(a->acc + (size_t)last * pitch, &g[i], carry[i][0], carry[i][1]);
    for (int r = last + 1; r < d->h; r++) /* rows no window reaches */
        memset(a->acc + (size_t)r * pitch - 16, 0, pitch * sizeof(float));
}

/* dx (+)= the scratch rows, whole vectors: a row's last one runs into the
 * next row (adding the scratch's zeros), whose dx was loaded before. One
 * that would run past the plane is masked to its row in a part's last
 * planes (whole 0). */
V8_TARGET static void add_rows8(const dl_pool_desc *d, float *dx, const float *acc, size_t pitch,
                                int set, int whole)
{
    const __m256 zero = _mm256_setzero_ps();
    int nv = (d->w + 7) / 8, tail = d->w - 8 * (nv - 1);
    size_t hw = (size_t)d->h * d->w;
    __m256 old[2][MAX_GROUPS8 * 2 + 2];
    const __m256i kt = cols_in8(0, 0, tail);
#define OUT_OF_PLANE(r, j) (!whole && (size_t)(r)*d->w + 8 * (j) + 8 > hw)
    for (int r = 0; r < d->h; r++) {
        float *xr = dx + (size_t)r * d->w;
        for (int j = 0; j < nv && !set; j++) {
            if (r == 0)
                old[0][j] = OUT_OF_PLANE(0, j) ? _mm256_maskload_ps(xr + 8 * j, kt)
                                               : _mm256_loadu_ps(xr + 8 * j);
            if (r + 1 < d->h)
                old[(r + 1) & 1][j] = OUT_OF_PLANE(r + 1, j)
                                          ? _mm256_maskload_ps(xr + d->w + 8 * j, kt)
                                          : _mm256_loadu_ps(xr + d->w + 8 * j);
        }
        const float *ar = acc + (size_t)r * pitch;
        for (int j = 0; j < nv; j++) {
            __m256 v = _mm256_add_ps(set ? zero : old[r & 1][j], _mm256_loadu_ps(ar + 8 * j));
            if (OUT_OF_PLANE(r, j))
                _mm256_maskstore_ps(xr + 8 * j, kt, v);
            else
                _mm256_storeu_ps(xr + 8 * j, v);
        }
    }
#undef OUT_OF_PLANE
}

V8_TARGET static void bwd_planes8(const dl_pool_desc *d, int fused, int set, const float *x,
                                  const float *y, const float *dy, float *dx, size_t begin,
                                  size_t end)
{
    grp8 g[MAX_GROUPS8 + 1];
    int groups = groups_of8(d, g);
    const dl_pool_desc dd = *d; /* a copy the stores cannot alias */
    size_t hw = (size_t)dd.h * dd.w, pq = (size_t)dd.p * dd.q, pitch = pitch8(&dd);
    size_t half = (size_t)dd.h * pitch + 32;
    float *acc[2] = {plane_acc + 16, plane_acc + 16 + half};
    for (size_t pl = begin; pl < end; pl++) {
        bwd_args a = {&dd, fused, x + pl * hw, y + pl * pq, dy + pl * pq, acc[pl & 1]};
        if (plane_whole(pl, begin, end, hw, dd.pad) && plane_whole(pl, begin, end, pq, 0))
            bwd_rows8(&a, g, groups, 1, pitch);
        else
            bwd_rows8(&a, g, groups, 0, pitch);
        if (pl > begin)
            add_rows8(&dd, dx + (pl - 1) * hw, acc[(pl - 1) & 1], pitch, set,
                      plane_whole(pl - 1, begin, end, hw, 0));
    }
    add_rows8(&dd, dx + (end - 1) * hw, acc[(end - 1) & 1], pitch, set,
              plane_whole(end - 1, begin, end, hw, 0));
}

/* --- average, 3x3, stride 1, on 8 lanes (AVX2) --------------------------
 * The 16-lane kernels' sums in the same order. Without masked adds a tap
 * outside the input adds a 0 in the forward (its sum starts at +0 and is
 * never -0, so a 0 changes no bit) and is blended off in the backward
 * (whose sum starts at dx, which may be -0). A dx row's last vector runs
 * into the next row, whose dx was loaded before (its lanes keep their
 * values), except where it would leave a part's last planes. */
typedef struct avg_grp8 {
    __m256i k;     /* lanes inside the row */
    __m256i v[3];  /* per tap column: lanes whose other end is inside */
    int full, all; /* 8 lanes inside; and every tap inside */
} avg_grp8;

V8_TARGET static int avg_groups8(const dl_pool_desc *d, int dx, avg_grp8 *g)
{
    int n = dx ? d->w : d->q, groups = (n + 7) / 8;
    for (int i = 0; i < groups; i++) {
        g[i].k = cols_in8(8 * i, 0, n);
        g[i].full = n - 8 * i >= 8;
        g[i].all = g[i].full;
        for (int kw = 0; kw < 3; kw++) {
            int c0 = dx ? 8 * i + d->pad - 2 + kw : 8 * i - d->pad + kw;
            g[i].v[kw] = _mm256_and_si256(g[i].k, cols_in8(c0, 0, dx ? d->q : d->w));
            g[i].all &= _mm256_movemask_ps(_mm256_castsi256_ps(g[i].v[kw])) == 0xff;
        }
    }
    return groups;
}

/* Output row oh's sum for group i (0 for a row past p). */
V8_INLINE __m256 avg_sum8(const dl_pool_desc *d, const avg_grp8 *g, int i, int oh, int whole,
                          const float *xp)
{
    __m256 s = _mm256_setzero_ps();
    int hs = oh - d->pad;
    int k0 = hs < 0 ? -hs : 0, k1 = d->h - hs < 3 ? d->h - hs : 3;
    for (int kh = k0; oh < d->p && kh < k1; kh++) {
        const float *p = xp + (size_t)(hs + kh) * d->w + 8 * i - d->pad;
#pragma GCC unroll 3
        for (int kw = 0; kw < 3; kw++) {
            __m256 t = load8(p + kw, g->v[kw], whole);
            s = _mm256_add_ps(s, g->all ? t : _mm256_and_ps(t, _mm256_castsi256_ps(g->v[kw])));
        }
    }
    return s;
}

V8_INLINE void avg_fwd_plane8(const dl_pool_desc *d, const avg_grp8 *g, int groups, int whole,
                              const float *xp, float *yp)
{
    const __m256 nine = _mm256_set1_ps(9.0f);
    for (int oh = 0; oh < d->p; oh += 2)
        for (int i = 0; i < groups; i++) {
            const avg_grp8 gi = g[i]; /* a copy the stores cannot alias */
            __m256 s0 = avg_sum8(d, &gi, i, oh, whole, xp);
            __m256 s1 = avg_sum8(d, &gi, i, oh + 1, whole, xp);
            for (int k = 0; k < 2 && oh + k < d->p; k++) {
                float *yr = yp + (size_t)(oh + k) * d->q + 8 * i;
                __m256 v = _mm256_div_ps(k ? s1 : s0, nine);
                if (gi.full)
                    _mm256_storeu_ps(yr, v);
                else
                    _mm256_maskstore_ps(yr, gi.k, v);
            }
        }
}

V8_TARGET static void avg_fwd_planes8(const dl_pool_desc *d, const float *x, float *y, size_t begin,
                                      size_t end)
{
    avg_grp8 g[MAX_GROUPS8];
    int groups = avg_groups8(d, 0, g);
    const dl_pool_desc dd = *d; /* a copy the stores cannot alias */
    size_t hw = (size_t)dd.h * dd.w, pq = (size_t)dd.p * dd.q;
    for (size_t pl = begin; pl < end; pl++) {
        if (plane_whole(pl, begin, end, hw, dd.pad))
            avg_fwd_plane8(&dd, g, groups, 1, x + pl * hw, y + pl * pq);
        else
            avg_fwd_plane8(&dd, g, groups, 0, x + pl * hw, y + pl * pq);
    }
}

V8_INLINE void avg_dx_rows8(const dl_pool_desc *d, const avg_grp8 *g, int groups, int whole,
                            const float *G, size_t pitch, float *dxp)
{
    size_t hw = (size_t)d->h * d->w;
    __m256 old[2][2 * MAX_GROUPS8];
#define OUT_OF_PLANE(r, j) (!whole && (size_t)(r)*d->w + 8 * (j) + 8 > hw)
#define LOAD_DX(r, j)                                                                              \
    (OUT_OF_PLANE(r, j) ? _mm256_maskload_ps(dxp + (size_t)(r)*d->w + 8 * (j), g[j].k)             \
                        : _mm256_loadu_ps(dxp + (size_t)(r)*d->w + 8 * (j)))
    for (int j = 0; j < groups; j++)
        old[0][j] = LOAD_DX(0, j);
    for (int r = 0; r < d->h; r++) {
        for (int j = 0; j < groups && r + 1 < d->h; j++)
            old[(r + 1) & 1][j] = LOAD_DX(r + 1, j);
        int o0 = r + d->pad - 2;
        int k0 = o0 < 0 ? -o0 : 0, k1 = d->p - o0 < 3 ? d->p - o0 : 3;
        for (int j = 0; j < groups; j++) {
            const avg_grp8 gj = g[j]; /* a copy the stores cannot alias */
            __m256 s = old[r & 1][j];
            for (int kh = k0; kh < k1; kh++) {
                const float *gp = G + (size_t)(o0 + kh + 1) * pitch + 32 + 8 * j + d->pad - 2;
#pragma GCC unroll 3
                for (int kw = 0; kw < 3; kw++) {
                    __m256 a = _mm256_add_ps(s, _mm256_loadu_ps(gp + kw));
                    s = gj.all ? a : _mm256_blendv_ps(s, a, _mm256_castsi256_ps(gj.v[kw]));
                }
            }
            float *xr = dxp + (size_t)r * d->w + 8 * j;
            if (OUT_OF_PLANE(r, j))
                _mm256_maskstore_ps(xr, gj.k, s);
            else
                _mm256_storeu_ps(xr, s);
        }
    }
#undef LOAD_DX
#undef OUT_OF_PLANE
}

V8_TARGET static void avg_bwd_planes8(const dl_pool_desc *d, const float *dy, float *dx,
                                      size_t begin, size_t end)
{
    avg_grp8 go[MAX_GROUPS8 * 2], gx[MAX_GROUPS8 * 2 + 1];
    int groups = avg_groups8(d, 0, go), xgroups = avg_groups8(d, 1, gx);
    const dl_pool_desc dd = *d; /* a copy the stores cannot alias */
    size_t hw = (size_t)dd.h * dd.w, pq = (size_t)dd.p * dd.q, pitch = avg_pitch(&dd);
    const __m256 nine = _mm256_set1_ps(9.0f);
    float *G = plane_acc;
    for (size_t pl = begin; pl < end; pl++) {
        const float *gp = dy + pl * pq;
        int whole = plane_whole(pl, begin, end, pq, 0);
        for (int oh = 0; oh < dd.p; oh++)
            for (int i = 0; i < groups; i++) {
                const float *p = gp + (size_t)oh * dd.q + 8 * i;
                __m256 v = whole ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, go[i].k);
                _mm256_storeu_ps(G + (size_t)(oh + 1) * pitch + 32 + 8 * i, _mm256_div_ps(v, nine));
            }
        if (plane_whole(pl, begin, end, hw, 0))
            avg_dx_rows8(&dd, gx, xgroups, 1, G, pitch, dx + pl * hw);
        else
            avg_dx_rows8(&dd, gx, xgroups, 0, G, pitch, dx + pl * hw);
    }
}
#endif

void dl_cpu_max3s2_forward(const dl_pool_desc *d, int fused, const float *x, float *y, size_t begin,
                           size_t end)
{
#ifdef MAX3_VECTOR
    if (dl_cpu_avx512())
        fwd_planes(d, fused, x, y, begin, end);
    else
        fwd_planes8(d, fused, x, y, begin, end);
#else
    (void)d, (void)fused, (void)x, (void)y, (void)begin, (void)end;
#endif
}

void dl_cpu_max3s2_backward(const dl_pool_desc *d, int fused, int set, const float *x,
                            const float *y, const float *dy, float *dx, size_t begin, size_t end)
{
#ifdef MAX3_VECTOR
    if (dl_cpu_avx512())
        bwd_planes(d, fused, set, x, y, dy, dx, begin, end);
    else
        bwd_planes8(d, fused, set, x, y, dy, dx, begin, end);
#else
    (void)d, (void)fused, (void)set, (void)x, (void)y, (void)dy, (void)dx, (void)begin, (void)end;
#endif
}

void dl_cpu_avg3s1_forward(const dl_pool_desc *d, const float *x, float *y, size_t begin,
                           size_t end)
{
#ifdef MAX3_VECTOR
    if (dl_cpu_avx512())
        avg_fwd_planes(d, x, y, begin, end);
    else
        avg_fwd_planes8(d, x, y, begin, end);
#else
    (void)d, (void)x, (void)y, (void)begin, (void)end;
#endif
}

void dl_cpu_avg3s1_backward(const dl_pool_desc *d, const float *dy, float *dx, size_t begin,
                            size_t end)
{
#ifdef MAX3_VECTOR
    if (dl_cpu_avx512())
        avg_bwd_planes(d, dy, dx, begin, end);
    else
        avg_bwd_planes8(d, dy, dx, begin, end);
#else
    (void)d, (void)dy, (void)dx, (void)begin, (void)end;
#endif
}
