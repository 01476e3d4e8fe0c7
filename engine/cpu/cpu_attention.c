/* cpu_attention.c - scaled dot-product attention on the CPU, flash style: tiles of queries and keys, online softmax, scores recomputed in backward
 *
 * Per (sample, head), queries go in tiles of BQ rows against tiles of BK
 * keys. The forward keeps, per query, the running maximum m and sum l of
 * exp(score - m) and rescales its output accumulator when m grows (the
 * online softmax of flash attention); only the log-sum-exp m + log l is
 * saved. The backward recomputes each BQ x BK tile of probabilities from
 * it, P = exp(S - lse), with D_i = do_i . o_i:
 *   dV_j += sum_i P_ij do_i        dP_ij = do_i . v_j
 *   dS_ij = P_ij (dP_ij - D_i)     dQ_i += scale sum_j dS_ij k_j
 *   dK_j += scale sum_i dS_ij q_i
 * So no thread ever holds more than a BQ x BK tile of the T x T scores:
 * per task the scratch is tile_floats() floats. Every tile product goes
 * through one small kernel, mm_acc, that keeps 32-column strips of its
 * output in AVX2 registers (K and V are transposed per tile for the
 * products that take them as columns).
 * The forward runs in parallel over (sample, head, query tile), the
 * backward over (sample, head): its dK and dV sum over query tiles, and
 * distinct heads write distinct columns of dqkv.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"
#include "engine/base/error.h"

#define BQ 32 /* queries per tile */
#define BK 32 /* keys per tile */

typedef struct attn_task {
    int n, t, heads, d, dh, causal, tiles;
    float scale;
    const float *qkv, *o, *lse, *dout;
    float *out, *lse_out, *dqkv;
    atomic_int failed;
} attn_task;

/* Scratch of one task: kt, vt [dh, BK]; s, dp [BQ, BK]; acc [BQ, dh];
 * m, l [BQ]. */
static size_t tile_floats(int dh)
{
    return 2 * (size_t)dh * BK + 2 * (size_t)BQ * BK + (size_t)BQ * dh + 2 * BQ;
}

/* dst [dh, nk] = rows j0.. of src (row stride ld), transposed. */
static void transpose_tile(float *dst, const float *src, int ld, int nk, int dh)
{
    for (int j = 0; j < nk; j++)
        for (int c = 0; c < dh; c++)
            dst[c * BK + j] = src[(size_t)j * ld + c];
}

#if defined(__AVX2__) && defined(__FMA__)
/* Columns [j0, j0 + 32) of rows i, i + 1 (rows2: both) of mm_acc. */
static void mm_strip32(float *restrict c, int ldc, const float *restrict a, int ars, int acs,
                       const float *restrict b, int ldb, int kk, int i, int j0, int rows2)
{
    float *c0 = c + (size_t)i * ldc + j0, *c1 = c0 + (rows2 ? ldc : 0);
    __m256 x0 = _mm256_loadu_ps(c0), x1 = _mm256_loadu_ps(c0 + 8);
    __m256 x2 = _mm256_loadu_ps(c0 + 16), x3 = _mm256_loadu_ps(c0 + 24);
    __m256 y0 = _mm256_loadu_ps(c1), y1 = _mm256_loadu_ps(c1 + 8);
    __m256 y2 = _mm256_loadu_ps(c1 + 16), y3 = _mm256_loadu_ps(c1 + 24);
    const float *a0 = a + (size_t)i * ars, *a1 = a0 + (rows2 ? ars : 0);
    for (int k = 0; k < kk; k++) {
        const float *bk = b + (size_t)k * ldb + j0;
        __m256 b0 = _mm256_loadu_ps(bk), b1 = _mm256_loadu_ps(bk + 8);
        __m256 b2 = _mm256_loadu_ps(bk + 16), b3 = _mm256_loadu_ps(bk + 24);
        __m256 u = _mm256_broadcast_ss(a0 + (size_t)k * acs);
        __m256 v = _mm256_broadcast_ss(a1 + (size_t)k * acs);
        x0 = _mm256_fmadd_ps(u, b0, x0), x1 = _mm256_fmadd_ps(u, b1, x1);
        x2 = _mm256_fmadd_ps(u, b2, x2), x3 = _mm256_fmadd_ps(u, b3, x3);
        y0 = _mm256_fmadd_ps(v, b0, y0), y1 = _mm256_fmadd_ps(v, b1, y1);
        y2 = _mm256_fmadd_ps(v, b2, y2), y3 = _mm256_fmadd_ps(v, b3, y3);
    }
    if (rows2) { /* row i + 1 first: with one row, c1 is c0 and x wins */
        _mm256_storeu_ps(c1, y0), _mm256_storeu_ps(c1 + 8, y1);
        _mm256_storeu_ps(c1 + 16, y2), _mm256_storeu_ps(c1 + 24, y3);
    }
    _mm256_storeu_ps(c0, x0), _mm256_storeu_ps(c0 + 8, x1);
    _mm256_storeu_ps(c0 + 16, x2), _mm256_storeu_ps(c0 + 24, x3);
}

/* The same for NV (1 or 2) vectors of 8 columns from j0: head sizes of 8,
 * 16 or 48, whose products with dh columns would otherwise fall to the
 * scalar loop. */
static inline __attribute__((always_inline)) void
mm_strip8n(float *restrict c, int ldc, const float *restrict a, int ars, int acs,
           const float *restrict b, int ldb, int kk, int i, int j0, int rows2, int nv)
{
    float *c0 = c + (size_t)i * ldc + j0, *c1 = c0 + (rows2 ? ldc : 0);
    __m256 x0 = _mm256_loadu_ps(c0), y0 = _mm256_loadu_ps(c1);
    __m256 x1 = nv > 1 ? _mm256_loadu_ps(c0 + 8) : x0, y1 = nv > 1 ? _mm256_loadu_ps(c1 + 8) : y0;
    const float *a0 = a + (size_t)i * ars, *a1 = a0 + (rows2 ? ars : 0);
    for (int k = 0; k < kk; k++) {
        const float *bk = b + (size_t)k * ldb + j0;
        __m256 u = _mm256_broadcast_ss(a0 + (size_t)k * acs);
        __m256 v = _mm256_broadcast_ss(a1 + (size_t)k * acs);
        __m256 b0 = _mm256_loadu_ps(bk);
        x0 = _mm256_fmadd_ps(u, b0, x0), y0 = _mm256_fmadd_ps(v, b0, y0);
        if (nv > 1) {
            __m256 b1 = _mm256_loadu_ps(bk + 8);
            x1 = _mm256_fmadd_ps(u, b1, x1), y1 = _mm256_fmadd_ps(v, b1, y1);
        }
    }
    if (rows2) {
        _mm256_storeu_ps(c1, y0);
        if (nv > 1)
            _mm256_storeu_ps(c1 + 8, y1);
    }
    _mm256_storeu_ps(c0, x0);
    if (nv > 1)
        _mm256_storeu_ps(c0 + 8, x1);
}
#endif

/* c [m, n] += A [m, kk] b [kk, n], A(i, k) = a[i * ars + k * acs] (acs 1:
 * row-major; ars 1: a transposed), row strides ldc and ldb. */
static void mm_acc(float *restrict c, int ldc, const float *restrict a, int ars, int acs,
                   const float *restrict b, int ldb, int m, int n, int kk)
{
    int j0 = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; j0 + 32 <= n; j0 += 32)
        for (int i = 0; i < m; i += 2)
            mm_strip32(c, ldc, a, ars, acs, b, ldb, kk, i, j0, i + 1 < m);
    if (j0 + 16 <= n) {
        for (int i = 0; i < m; i += 2)
            mm_strip8n(c, ldc, a, ars, acs, b, ldb, kk, i, j0, i + 1 < m, 2);
        j0 += 16;
    }
    if (j0 + 8 <= n) {
        for (int i = 0; i < m; i += 2)
            mm_strip8n(c, ldc, a, ars, acs, b, ldb, kk, i, j0, i + 1 < m, 1);
        j0 += 8;
    }
#endif
    if (j0 == n) /* no columns left: skip the m x kk walk of an empty loop */
        return;
    for (int i = 0; i < m; i++) {
        float *ci = c + (size_t)i * ldc;
        const float *ai = a + (size_t)i * ars;
        for (int k = 0; k < kk; k++) {
            float av = ai[(size_t)k * acs];
            const float *bk = b + (size_t)k * ldb;
            for (int j = j0; j < n; j++)
                ci[j] += av * bk[j];
        }
    }
}

/* y[j] += x[j] for j < n. */
static void add_row(float *y, const float *x, int n)
{
    int j = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_loadu_ps(y + j), _mm256_loadu_ps(x + j)));
#endif
    for (; j < n; j++)
        y[j] += x[j];
}

/* The sum of x[j] y[j] for j < n (eight partial sums, added in order). */
static float dot_row(const float *x, const float *y, int n)
{
    int j = 0;
    float sum = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (; j + 8 <= n; j += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j), acc);
    sum = (float)dl_v_hsum(acc);
#endif
    for (; j < n; j++)
        sum += x[j] * y[j];
    return sum;
}

/* The largest of m and x[j] for j < n (a NaN in x is passed over, as by
 * the scalar compare). */
static float max_row(const float *x, int n, float m)
{
    int j = 0;
#if defined(__AVX2__) && defined(__FMA__)
    if (n >= 8) {
        __m256 acc = _mm256_set1_ps(m);
        for (; j + 8 <= n; j += 8)
            acc = _mm256_max_ps(_mm256_loadu_ps(x + j), acc); /* NaN in x: acc kept */
        float part[8];
        _mm256_storeu_ps(part, acc);
        for (int k = 0; k < 8; k++)
            m = part[k] > m ? part[k] : m;
    }
#endif
    for (; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

/* s[j] = s[j] (dp[j] - sub) scale for j < n: P becomes scale * dS. */
static void ds_row(float *s, const float *dp, int n, float sub, float scale)
{
    int j = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 sub8 = _mm256_set1_ps(sub), sc8 = _mm256_set1_ps(scale);
    for (; j + 8 <= n; j += 8) {
        __m256 g = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(dp + j), sub8), sc8);
        _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), g));
    }
#endif
    for (; j < n; j++)
        s[j] *= (dp[j] - sub) * scale;
}

/* s [nq, BK] = scale * q [nq, dh] kt [dh, nk]; masked (causal, key after
 * query) entries get -INFINITY. */
static void scores(float *s, const float *q, int ld, const float *kt, int nq, int nk, int dh,
                   float scale, int causal, int i0, int j0)
{
    for (int i = 0; i < nq; i++)
        memset(s + i * BK, 0, (size_t)nk * sizeof *s);
    mm_acc(s, BK, q, ld, 1, kt, BK, nq, nk, dh);
    for (int i = 0; i < nq; i++) {
        float *si = s + i * BK;
        int seen = causal ? i0 + i - j0 + 1 : nk; /* keys visible in the tile */
        seen = seen < 0 ? 0 : seen > nk ? nk : seen;
        dl_v_scale(si, (size_t)seen, scale);
        for (int j = seen; j < nk; j++)
            si[j] = -INFINITY;
    }
}

/* x[j] = exp(x[j] - sub) for j < n; returns the sum of the results. */
static float exp_sub(float *x, int n, float sub)
{
    int j = 0;
    float sum = 0;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps(), s8 = _mm256_set1_ps(sub);
    for (; j + 8 <= n; j += 8) {
        __m256 e = dl_v_exp(_mm256_sub_ps(_mm256_loadu_ps(x + j), s8));
        _mm256_storeu_ps(x + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float part[8];
    _mm256_storeu_ps(part, acc);
    for (int k = 0; k < 8; k++)
        sum += part[k];
#endif
    for (; j < n; j++) {
        x[j] = expf(x[j] - sub);
        sum += x[j];
    }
    return sum;
}

/* Keys a query tile [i0, i0 + nq) looks at: all, or up to its last query. */
static int key_end(const attn_task *a, int i0, int nq) { return a->causal ? i0 + nq : a->t; }

/* Online softmax step for row si [nk] of scores: si becomes exp(si - m'),
 * m and l move to the new maximum; returns the factor the row's output
 * accumulator must be scaled by. A row with every key masked adds 0. */
static float online_row(float *si, int nk, float *m, float *l)
{
    float mx = max_row(si, nk, *m);
    if (mx == -INFINITY) {
        memset(si, 0, (size_t)nk * sizeof *si);
        return 1.0f;
    }
    float corr = expf(*m - mx), sum = exp_sub(si, nk, mx);
    *l = *l * corr + sum;
    *m = mx;
    return corr;
}

/* One query tile of one (sample, head): online softmax over key tiles. */
static void fwd_tile(const attn_task *a, float *w, int b, int h, int i0)
{
    int dh = a->dh, ld = 3 * a->d, nq = a->t - i0 < BQ ? a->t - i0 : BQ;
    float *kt = w, *vt = kt + dh * BK, *s = vt + dh * BK, *acc = s + 2 * BQ * BK;
    float *m = acc + BQ * dh, *l = m + BQ;
    const float *base = a->qkv + (size_t)b * a->t * ld + h * dh;
    for (int i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
    }
    memset(acc, 0, (size_t)BQ * dh * sizeof *acc);
    int jend = key_end(a, i0, nq);
    for (int j0 = 0; j0 < jend; j0 += BK) {
        int nk = jend - j0 < BK ? jend - j0 : BK;
        const float *k = base + (size_t)j0 * ld + a->d, *v = k + a->d;
        transpose_tile(kt, k, ld, nk, dh);
        scores(s, base + (size_t)i0 * ld, ld, kt, nq, nk, dh, a->scale, a->causal, i0, j0);
        for (int i = 0; i < nq; i++) {
            float corr = online_row(s + i * BK, nk, m + i, l + i);
            if (corr != 1.0f)
                dl_v_scale(acc + i * dh, (size_t)dh, corr);
        }
        mm_acc(acc, dh, s, BK, 1, v, ld, nq, dh, nk); /* acc [nq, dh] += P V */
    }
    for (int i = 0; i < nq; i++) {
        float *oi = a->out + ((size_t)b * a->t + i0 + i) * a->d + h * dh, inv = 1.0f / l[i];
        for (int c = 0; c < dh; c++)
            oi[c] = acc[i * dh + c] * inv;
        a->lse_out[((size_t)b * a->heads + h) * a->t + i0 + i] = m[i] + logf(l[i]);
    }
}

/* Tasks [begin, end) of (sample, head, query tile). */
static void fwd_task(void *arg, size_t begin, size_t end)
{
    attn_task *a = arg;
    float *w = malloc(tile_floats(a->dh) * sizeof *w);
    if (!w) {
        atomic_store(&a->failed, 1);
        return;
    }
    for (size_t k = begin; k < end; k++) {
        int tile = (int)(k % (size_t)a->tiles), bh = (int)(k / (size_t)a->tiles);
        fwd_tile(a, w, bh / a->heads, bh % a->heads, tile * BQ);
    }
    free(w);
}

/* For one query tile against one key tile: s holds P on entry (0 where
 * masked), dp holds dO V^T; s becomes scale * dS = scale * P (dP - D),
 * then dV [nk, dh] += P^T dO, dK += (scale dS)^T Q, dq [nq, dh] +=
 * (scale dS) K. */
static void bwd_accumulate(const attn_task *a, float *s, const float *dp, const float *dsum,
                           const float *q, const float *dout_rows, float *dk, float *dv,
                           const float *k, float *dq, int nq, int nk)
{
    int dh = a->dh, ld = 3 * a->d;
    mm_acc(dv, ld, s, 1, BK, dout_rows, a->d, nk, dh, nq);
    for (int i = 0; i < nq; i++)
        ds_row(s + i * BK, dp + i * BK, nk, dsum[i], a->scale);
    mm_acc(dk, ld, s, 1, BK, q, ld, nk, dh, nq);
    mm_acc(dq, dh, s, BK, 1, k, ld, nq, dh, nk);
}

/* One (sample, head): every query tile against its key tiles. */
static void bwd_head(const attn_task *a, float *w, int b, int h)
{
    int dh = a->dh, ld = 3 * a->d;
    float *kt = w, *vt = kt + dh * BK, *s = vt + dh * BK, *dp = s + BQ * BK, *dq = dp + BQ * BK;
    float *dsum = dq + BQ * dh, *lse_rows = dsum + BQ;
    size_t row0 = (size_t)b * a->t;
    const float *base = a->qkv + row0 * ld + h * dh;
    float *dbase = a->dqkv + row0 * ld + h * dh;
    for (int i0 = 0; i0 < a->t; i0 += BQ) {
        int nq = a->t - i0 < BQ ? a->t - i0 : BQ;
        const float *dout_rows = a->dout + (row0 + i0) * a->d + h * dh;
        for (int i = 0; i < nq; i++) {
            const float *oi = a->o + (row0 + i0 + i) * a->d + h * dh;
            dsum[i] = dot_row(dout_rows + (size_t)i * a->d, oi, dh);
            lse_rows[i] = a->lse[((size_t)b * a->heads + h) * a->t + i0 + i];
        }
        memset(dq, 0, (size_t)BQ * dh * sizeof *dq);
        int jend = key_end(a, i0, nq);
        for (int j0 = 0; j0 < jend; j0 += BK) {
            int nk = jend - j0 < BK ? jend - j0 : BK;
            const float *k = base + (size_t)j0 * ld + a->d, *v = k + a->d;
            transpose_tile(kt, k, ld, nk, dh);
            transpose_tile(vt, v, ld, nk, dh);
            scores(s, base + (size_t)i0 * ld, ld, kt, nq, nk, dh, a->scale, a->causal, i0, j0);
            /* P = exp(S - lse); dP = dO V^T, as scores() with no scale or mask */
            scores(dp, dout_rows, a->d, vt, nq, nk, dh, 1.0f, 0, 0, 0);
            for (int i = 0; i < nq; i++)
                exp_sub(s + i * BK, nk, lse_rows[i]);
            bwd_accumulate(a, s, dp, dsum, base + (size_t)i0 * ld, dout_rows,
                           dbase + (size_t)j0 * ld + a->d, dbase + (size_t)j0 * ld + 2 * a->d, k,
                           dq, nq, nk);
        }
        for (int i = 0; i < nq; i++)
            add_row(dbase + (size_t)(i0 + i) * ld, dq + i * dh, dh);
    }
}

/* Tasks [begin, end) of (sample, head). */
static void bwd_task(void *arg, size_t begin, size_t end)
{
    attn_task *a = arg;
    float *w = malloc(tile_floats(a->dh) * sizeof *w);
    if (!w) {
        atomic_store(&a->failed, 1);
        return;
    }
    for (size_t k = begin; k < end; k++)
        bwd_head(a, w, (int)(k / (size_t)a->heads), (int)(k % (size_t)a->heads));
    free(w);
}

static int check_dims(int n, int t, int heads, int d)
{
    if (n < 0 || t < 1 || heads < 1 || d < 1 || d % heads)
        return dl_error(DL_EINVAL, "attention over n %d, t %d, %d heads, d %d: heads must divide d",
                        n, t, heads, d);
    return DL_OK;
}

/* See backend.h (attention_forward). */
int dl_cpu_attention_forward(dl_backend *be, int n, int t, int heads, int d, int causal,
                             float scale, const float *qkv, float *o, float *lse)
{
    DL_TRY(check_dims(n, t, heads, d));
    attn_task a = {.n = n,
                   .t = t,
                   .heads = heads,
                   .d = d,
                   .dh = d / heads,
                   .causal = causal,
                   .tiles = (t + BQ - 1) / BQ,
                   .scale = scale,
                   .qkv = qkv,
                   .out = o,
                   .lse_out = lse};
    atomic_init(&a.failed, 0);
    dl_pool_for(dl_cpu(be)->pool, (size_t)n * heads * a.tiles, 1, fwd_task, &a);
    if (atomic_load(&a.failed))
        return dl_error(DL_ENOMEM, "attention: out of memory for a %dx%d score tile", BQ, BK);
    return DL_OK;
}

/* See backend.h (attention_backward). */
int dl_cpu_attention_backward(dl_backend *be, int n, int t, int heads, int d, int causal,
                              float scale, const float *qkv, const float *o, const float *lse,
                              const float *do_, float *dqkv)
{
    DL_TRY(check_dims(n, t, heads, d));
    attn_task a = {.n = n,
                   .t = t,
                   .heads = heads,
                   .d = d,
                   .dh = d / heads,
                   .causal = causal,
                   .tiles = (t + BQ - 1) / BQ,
                   .scale = scale,
                   .qkv = qkv,
                   .o = o,
                   .lse = lse,
                   .dout = do_,
                   .dqkv = dqkv};
    atomic_init(&a.failed, 0);
    dl_pool_for(dl_cpu(be)->pool, (size_t)n * heads, 1, bwd_task, &a);
    if (atomic_load(&a.failed))
        return dl_error(DL_ENOMEM, "attention: out of memory for a %dx%d score tile", BQ, BK);
    return DL_OK;
}
