/* cpu_norm.c - batch normalisation and layer normalisation on the CPU, forward and backward
 *
 * Statistics are summed in double (two passes: mean, then centred squares)
 * so large batches of similar values keep their variance. LayerNorm runs
 * row-parallel on the backend's pool.
 *
 * BatchNorm streams x [n, c, inner] as memory holds it: a pass of sums
 * over the planes p = i * c + ch in order, split over the pool, leaves
 * each plane's sums (shifted moments forward, sum dy and sum dy * xhat
 * backward) in a scratch slot; each channel adds its planes' sums in
 * image order, then a second pass in order writes y or dx. Walking one
 * channel's planes across the images instead reads runs of inner floats
 * strided by c * inner, which the prefetchers do not follow: on tensors
 * past the L3 (bench_membound 2 - 512) that ran at a quarter of memcpy,
 * the stream at about half to two thirds. Tried and dropped, each slower:
 * the writing pass walking the planes last to first (to meet in cache
 * what the sums read last), summing 2 or 4 planes at once with their
 * chains interleaved, and four chains a plane instead of two.
 * The per-plane sums and their order are those of the channel walk, which
 * short planes (under BN_STREAM_MIN floats) and builds without AVX2 keep:
 * the same bits either way, at any thread count.
 *
 * LayerNorm's backward is one pass over fixed blocks of rows: dx, and
 * each block's dgamma/dbeta partial sums, added in block order after.
 * LayerNorm rows have 16-lane bodies where the CPU has AVX-512F. */
#include <math.h>
#include <string.h>

#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"
#include "engine/base/error.h"

typedef struct bn_task {
    int n, c, inner, training;
    int set;        /* backward: dx written, not added */
    int relu;       /* a ReLU after the normalisation, fused */
    dl_dtype round; /* blocked: y, or a written dx, rounded to it (f32: not) */
    float momentum, eps;
    float *y, *dx, *dgamma, *dbeta;
    const float *x, *dy, *gamma, *beta;
    float *running_mean, *running_var;
    float *save_mean, *save_invstd;
    const float *smean, *sinvstd;
} bn_task;

/* --- sums over a plane of n floats, 8 lanes at a time (tails masked) ------
 * Each call sums its plane in float lanes and adds the lanes to the double
 * total in order, so a channel's statistics do not depend on the thread
 * count; a plane (a BatchNorm channel of one image, a LayerNorm row) is
 * short enough that float lanes lose nothing that matters. */

/* s[0] += sum (p[j] - k), s[1] += sum (p[j] - k)^2: one pass; k near the
 * mean (a sample of the same values) keeps the variance from cancelling. */
static void plane_moments(const float *p, int n, float k, double s[2])
{
#ifdef DL_CPU_VMATH
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), vk = _mm256_set1_ps(k);
    __m256 b0 = a0, b1 = a0;
    int j = 0;
    /* two chains each, so the adds do not wait on each other */
    for (; j + 16 <= n; j += 16) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(p + j), vk);
        __m256 e = _mm256_sub_ps(_mm256_loadu_ps(p + j + 8), vk);
        a0 = _mm256_add_ps(a0, d);
        a1 = _mm256_fmadd_ps(d, d, a1);
        b0 = _mm256_add_ps(b0, e);
        b1 = _mm256_fmadd_ps(e, e, b1);
    }
    a0 = _mm256_add_ps(a0, b0);
    a1 = _mm256_add_ps(a1, b1);
    for (; j + 8 <= n; j += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(p + j), vk);
        a0 = _mm256_add_ps(a0, d);
        a1 = _mm256_fmadd_ps(d, d, a1);
    }
    if (j < n) {
        __m256 live = _mm256_castsi256_ps(dl_v_mask(n - j));
        __m256 d = _mm256_and_ps(_mm256_sub_ps(dl_v_load_tail(p + j, n - j), vk), live);
        a0 = _mm256_add_ps(a0, d);
        a1 = _mm256_fmadd_ps(d, d, a1);
    }
    s[0] += dl_v_hsum(a0);
    s[1] += dl_v_hsum(a1);
#else
    for (int j = 0; j < n; j++) {
        double d = (double)p[j] - k;
        s[0] += d;
        s[1] += d * d;
    }
#endif
}

/* A channel's normalisation as one affine map, x * scale + shift: the
 * forward's output, and the backward's recomputation of the signs a
 * fused ReLU saw, both from this and from one fused multiply-add per
 * element, so the two agree bit for bit. */
static void bn_affine(float gamma, float beta, float mean, float invstd, float *scale, float *shift)
{
    *scale = gamma * invstd;
    *shift = fmaf(-mean, *scale, beta);
}

#ifdef DL_CPU_VMATH
/* v where keep > 0, else 0 (NaN: 0, as ReLU maps it) */
static inline __m256 pass_positive(__m256 v, __m256 keep)
{
    return _mm256_and_ps(v, _mm256_cmp_ps(keep, _mm256_setzero_ps(), _CMP_GT_OQ));
}
#endif

/* y[j] = x[j] * scale + shift, then max(., 0) with relu */
static void plane_affine(float *y, const float *x, int n, float scale, float shift, int relu)
{
#ifdef DL_CPU_VMATH
    __m256 a = _mm256_set1_ps(scale), b = _mm256_set1_ps(shift);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + j), a, b);
        _mm256_storeu_ps(y + j, relu ? pass_positive(v, v) : v);
    }
    if (j < n) {
        __m256 v = _mm256_fmadd_ps(dl_v_load_tail(x + j, n - j), a, b);
        dl_v_store_tail(y + j, relu ? pass_positive(v, v) : v, n - j);
    }
#else
    for (int j = 0; j < n; j++) {
        float v = fmaf(x[j], scale, shift);
        y[j] = relu && !(v > 0) ? 0.0f : v;
    }
#endif
}

/* The gradient reaching the normalisation's output: dy, or with a fused
 * ReLU dy where x * scale + shift > 0, else 0 (what a->relu says). */
typedef struct {
    int relu;
    float scale, shift;
} bn_gate;

#ifdef DL_CPU_VMATH
static inline __m256 gate_v(const bn_gate *gt, __m256 dy, __m256 x)
{
    if (!gt->relu)
        return dy;
    return pass_positive(dy,
                         _mm256_fmadd_ps(x, _mm256_set1_ps(gt->scale), _mm256_set1_ps(gt->shift)));
}
#endif
static inline float gate1(const bn_gate *gt, float dy, float x)
{
    return gt->relu && !(fmaf(x, gt->scale, gt->shift) > 0) ? 0.0f : dy;
}

/* s[0] += sum g, s[1] += sum g * (x - mean) * invstd, g the gated dy */
static void plane_dy_sums(const float *x, const float *dy, int n, float mean, float invstd,
                          const bn_gate *gt, double s[2])
{
#ifdef DL_CPU_VMATH
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 m = _mm256_set1_ps(mean), is = _mm256_set1_ps(invstd);
    __m256 b0 = a0, b1 = a0;
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + j + 8);
        __m256 g = gate_v(gt, _mm256_loadu_ps(dy + j), x0);
        __m256 h = gate_v(gt, _mm256_loadu_ps(dy + j + 8), x1);
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(x0, m), is);
        __m256 xk = _mm256_mul_ps(_mm256_sub_ps(x1, m), is);
        a0 = _mm256_add_ps(a0, g);
        a1 = _mm256_fmadd_ps(g, xh, a1);
        b0 = _mm256_add_ps(b0, h);
        b1 = _mm256_fmadd_ps(h, xk, b1);
    }
    a0 = _mm256_add_ps(a0, b0);
    a1 = _mm256_add_ps(a1, b1);
    for (; j + 8 <= n; j += 8) {
        __m256 x0 = _mm256_loadu_ps(x + j);
        __m256 g = gate_v(gt, _mm256_loadu_ps(dy + j), x0);
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(x0, m), is);
        a0 = _mm256_add_ps(a0, g);
        a1 = _mm256_fmadd_ps(g, xh, a1);
    }
    if (j < n) {
        __m256 x0 = dl_v_load_tail(x + j, n - j);
        __m256 g = gate_v(gt, dl_v_load_tail(dy + j, n - j), x0);
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(x0, m), is);
        a0 = _mm256_add_ps(a0, g);
        a1 = _mm256_fmadd_ps(g, xh, a1); /* g is 0 past the tail */
    }
    s[0] += dl_v_hsum(a0);
    s[1] += dl_v_hsum(a1);
#else
    for (int j = 0; j < n; j++) {
        float g = gate1(gt, dy[j], x[j]);
        s[0] += g;
        s[1] += g * ((x[j] - mean) * invstd);
    }
#endif
}

/* dx[j] (+)= k * (g[j] - mdy - (x[j] - mean) * invstd * mdyx), g the gated
 * dy; set: written (k * t + 0, so the values equal adding into zeros). */
static void plane_dx(float *dx, const float *x, const float *dy, int n, float k, float mdy,
                     float mean, float invstd, float mdyx, const bn_gate *gt, int set)
{
#ifdef DL_CPU_VMATH
    __m256 vk = _mm256_set1_ps(k), vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(invstd);
    __m256 vmdy = _mm256_set1_ps(mdy), vmdyx = _mm256_set1_ps(mdyx);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 x0 = _mm256_loadu_ps(x + j);
        __m256 g = gate_v(gt, _mm256_loadu_ps(dy + j), x0);
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(x0, vm), vi);
        __m256 t = _mm256_fnmadd_ps(xh, vmdyx, _mm256_sub_ps(g, vmdy));
        __m256 old = set ? _mm256_setzero_ps() : _mm256_loadu_ps(dx + j);
        _mm256_storeu_ps(dx + j, _mm256_fmadd_ps(vk, t, old));
    }
    if (j < n) {
        int w = n - j;
        __m256 x0 = dl_v_load_tail(x + j, w);
        __m256 g = gate_v(gt, dl_v_load_tail(dy + j, w), x0);
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(x0, vm), vi);
        __m256 t = _mm256_fnmadd_ps(xh, vmdyx, _mm256_sub_ps(g, vmdy));
        __m256 old = set ? _mm256_setzero_ps() : dl_v_load_tail(dx + j, w);
        dl_v_store_tail(dx + j, _mm256_fmadd_ps(vk, t, old), w);
    }
#else
    for (int j = 0; j < n; j++) {
        float t = k * (gate1(gt, dy[j], x[j]) - mdy - (x[j] - mean) * invstd * mdyx);
        dx[j] = set ? t + 0.0f : dx[j] + t;
    }
#endif
}

/* Channel ch's batch statistics from its sums m about k (plane_moments):
 * mean and invstd (biased variance), saved and the running statistics
 * updated where t has the arrays. */
static void bn_channel_stats(const bn_task *t, size_t ch, float k, const double m[2], float *mean,
                             float *invstd)
{
    double count = (double)t->n * t->inner;
    double dmu = m[0] / count;
    double mu = k + dmu, ss = m[1] - dmu * m[0];
    ss = ss > 0 ? ss : 0;
    double var = ss / count; /* biased: used to normalise */
    *mean = (float)mu;
    *invstd = (float)(1.0 / sqrt(var + t->eps));
    if (t->save_mean)
        t->save_mean[ch] = *mean;
    if (t->save_invstd)
        t->save_invstd[ch] = *invstd;
    if (t->running_mean)
        t->running_mean[ch] = (1.0f - t->momentum) * t->running_mean[ch] + t->momentum * *mean;
    if (t->running_var) {
        double unbiased = count > 1 ? ss / (count - 1) : var;
        t->running_var[ch] =
            (1.0f - t->momentum) * t->running_var[ch] + t->momentum * (float)unbiased;
    }
}

/* Channel ch's map x * scale + shift: batch statistics from its sums m
 * about k in training, the running statistics in eval. */
static void bn_channel_map(const bn_task *t, size_t ch, float k, const double m[2], float *scale,
                           float *shift)
{
    float mean, invstd;
    if (t->training) {
        bn_channel_stats(t, ch, k, m, &mean, &invstd);
    } else {
        mean = t->running_mean[ch];
        invstd = (float)(1.0 / sqrt((double)t->running_var[ch] + t->eps));
    }
    bn_affine(t->gamma ? t->gamma[ch] : 1.0f, t->beta ? t->beta[ch] : 0.0f, mean, invstd, scale,
              shift);
}

/* Channels [begin, end): x [n, c, inner], stats over n*inner values, the
 * channel's planes walked image after image (short planes only). */
static void bn_fwd_task(void *arg, size_t begin, size_t end)
{
    const bn_task *t = arg;
    size_t plane = (size_t)t->c * t->inner;
    for (size_t ch = begin; ch < end; ch++) {
        float k = t->x[ch * t->inner];
        double m[2] = {0.0, 0.0};
        for (int i = 0; t->training && i < t->n; i++)
            plane_moments(t->x + i * plane + ch * t->inner, t->inner, k, m);
        float scale, shift;
        bn_channel_map(t, ch, k, m, &scale, &shift);
        for (int i = 0; i < t->n; i++)
            plane_affine(t->y + i * plane + ch * t->inner, t->x + i * plane + ch * t->inner,
                         t->inner, scale, shift, t->relu);
    }
}

/* per channel: the forward's (or a fused ReLU's) map, the backward's dx */
enum { BN_SCALE, BN_SHIFT, BN_K, BN_MDY, BN_MDYX, BN_COEFS };

#ifdef DL_CPU_VMATH
/* --- the streaming traversal, for planes of BN_STREAM_MIN floats and up
 * The tensor is walked as memory holds it, plane p = i * c + ch after
 * plane, so that each thread reads long contiguous runs. A pass of sums
 * leaves each plane's two double sums in part[p]; they are added per
 * channel in image order after (bn_sum_planes), the very additions the
 * channel walk makes, so both give the same bits at any thread count. */
#define BN_STREAM_MIN 32

typedef struct bn_stream {
    const bn_task *t;
    size_t planes; /* n * c */
    double *part;  /* [planes][2] a plane's sums */
    double *sum;   /* [c][2] a channel's sums */
    float *coef;   /* [c][BN_COEFS] */
} bn_stream;

/* Scratch for s's arrays; DL_ENOMEM when there is not enough memory. */
static int bn_stream_init(dl_backend *be, bn_stream *s, const bn_task *t)
{
    s->t = t;
    s->planes = (size_t)t->n * t->c;
    size_t doubles = 2 * s->planes + 2 * (size_t)t->c;
    size_t bytes = doubles * sizeof(double) + (size_t)t->c * BN_COEFS * sizeof(float);
    s->part = dl_cpu_scratch(be, DL_CPU_SCRATCH_NORM, bytes);
    if (!s->part)
        return dl_error(DL_ENOMEM, "batchnorm: out of memory for %zu planes' sums", s->planes);
    s->sum = s->part + 2 * s->planes;
    s->coef = (float *)(s->sum + 2 * (size_t)t->c);
    return DL_OK;
}

/* Planes [begin, end) a chunk: at least 256 KB of x (dl_cpu_plane_grain;
 * 64 KB split the batch-8 ResNet's tensors over two threads, slower). */
static size_t bn_stream_grain(const bn_task *t) { return dl_cpu_plane_grain((size_t)t->inner); }

/* sum[ch] = the sums part[i * c + ch] added in image order i */
static void bn_sum_planes(const bn_stream *s)
{
    size_t w = 2 * (size_t)s->t->c;
    memset(s->sum, 0, w * sizeof *s->sum);
    for (int i = 0; i < s->t->n; i++) {
        const double *pi = s->part + (size_t)i * w;
        for (size_t k = 0; k < w; k++)
            s->sum[k] += pi[k];
    }
}

static void bn_fwd_sums(void *arg, size_t begin, size_t end)
{
    const bn_stream *s = arg;
    const bn_task *t = s->t;
    for (size_t p = begin; p < end; p++) {
        double *m = s->part + 2 * p;
        m[0] = m[1] = 0.0;
        plane_moments(t->x + p * t->inner, t->inner, t->x[p % t->c * t->inner], m);
    }
}

static void bn_fwd_planes(void *arg, size_t begin, size_t end)
{
    const bn_stream *s = arg;
    const bn_task *t = s->t;
    for (size_t p = begin; p < end; p++) {
        const float *cf = s->coef + p % t->c * BN_COEFS;
        plane_affine(t->y + p * t->inner, t->x + p * t->inner, t->inner, cf[BN_SCALE], cf[BN_SHIFT],
                     t->relu);
    }
}

static int bn_fwd_stream(dl_backend *be, const bn_task *t)
{
    bn_stream s;
    DL_TRY(bn_stream_init(be, &s, t));
    dl_pool *pool = dl_cpu(be)->pool;
    if (t->training) {
        dl_pool_for(pool, s.planes, bn_stream_grain(t), bn_fwd_sums, &s);
        bn_sum_planes(&s);
    }
    for (size_t ch = 0; ch < (size_t)t->c; ch++) {
        float *cf = s.coef + ch * BN_COEFS;
        bn_channel_map(t, ch, t->x[ch * t->inner], s.sum + 2 * ch, &cf[BN_SCALE], &cf[BN_SHIFT]);
    }
    dl_pool_for(pool, s.planes, bn_stream_grain(t), bn_fwd_planes, &s);
    return DL_OK;
}
#endif

/* y [n, c, inner] = gamma * (x - mean) * invstd + beta per channel c.
 * training: batch statistics (biased variance), saved to save_mean /
 * save_invstd, and running_mean/var updated as (1 - momentum) * old +
 * momentum * batch value with the unbiased variance (PyTorch). Eval: the
 * running statistics. gamma/beta NULL mean 1/0; save and running arrays
 * may be NULL in training (not written). Returns DL_EINVAL for bad sizes
 * or missing running statistics in eval. */
#ifdef DL_CPU_VMATH
/* --- inner 1 (BatchNorm1d on [n, c]): blocks of columns, rows in order ---
 * A channel is one column of x [n, c]; the channel walk reads one float a
 * row for it. Here a task takes a block of BN_COLS columns and walks the
 * rows in order, 4 columns a vector, with the per-value terms the channel
 * walk's one-float planes add to their double totals (the float
 * difference and its square forward; the gated dy and its float product
 * with xhat backward), in the same order: the same bits, at any thread
 * count and block size. */
#define BN_COLS 64

static void bn_cols_range(const bn_task *t, size_t blk, int *c0, int *c1)
{
    *c0 = (int)blk * BN_COLS;
    *c1 = *c0 + BN_COLS < t->c ? *c0 + BN_COLS : t->c;
}

/* y = x * scale + shift (then ReLU) over columns [c0, c1) of every row. */
static void cols_affine(const bn_task *t, int c0, int c1, const float *scale, const float *shift)
{
    for (int i = 0; i < t->n; i++) {
        const float *xr = t->x + (size_t)i * t->c;
        float *yr = t->y + (size_t)i * t->c;
        int j = c0;
        for (; j + 8 <= c1; j += 8) {
            __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(xr + j), _mm256_loadu_ps(scale + j - c0),
                                       _mm256_loadu_ps(shift + j - c0));
            _mm256_storeu_ps(yr + j, t->relu ? pass_positive(v, v) : v);
        }
        for (; j < c1; j++) {
            float v = fmaf(xr[j], scale[j - c0], shift[j - c0]);
            yr[j] = t->relu && !(v > 0) ? 0.0f : v;
        }
    }
}

static void bn_fwd_cols(void *arg, size_t begin, size_t end)
{
    const bn_task *t = arg;
    for (size_t blk = begin; blk < end; blk++) {
        int c0, c1;
        bn_cols_range(t, blk, &c0, &c1);
        double s0[BN_COLS] = {0}, s1[BN_COLS] = {0};
        float k[BN_COLS], scale[BN_COLS], shift[BN_COLS];
        memcpy(k, t->x + c0, (size_t)(c1 - c0) * sizeof *k); /* row 0, as the channel walk */
        for (int i = 0; t->training && i < t->n; i++) {
            const float *xr = t->x + (size_t)i * t->c;
            int j = c0;
            for (; j + 4 <= c1; j += 4) {
                __m128 d = _mm_sub_ps(_mm_loadu_ps(xr + j), _mm_loadu_ps(k + j - c0));
                double *a = s0 + j - c0, *b = s1 + j - c0;
                _mm256_storeu_pd(a, _mm256_add_pd(_mm256_loadu_pd(a), _mm256_cvtps_pd(d)));
                _mm256_storeu_pd(
                    b, _mm256_add_pd(_mm256_loadu_pd(b), _mm256_cvtps_pd(_mm_mul_ps(d, d))));
            }
            for (; j < c1; j++) {
                float d = xr[j] - k[j - c0];
                s0[j - c0] += (double)d;
                s1[j - c0] += (double)(d * d);
            }
        }
        for (int j = c0; j < c1; j++) {
            double m[2] = {s0[j - c0], s1[j - c0]};
            bn_channel_map(t, (size_t)j, k[j - c0], m, &scale[j - c0], &shift[j - c0]);
        }
        cols_affine(t, c0, c1, scale, shift);
    }
}

#endif

/* The blocked layout (below): checks, and the passes for a task. */
/* The type DL_BN_ROUND_* in flags asks the output to be rounded to. */
static dl_dtype bn_round(int flags)
{
    return flags & DL_BN_ROUND_BF16 ? DL_BF16 : flags & DL_BN_ROUND_F16 ? DL_F16 : DL_F32;
}

static int bnb_check(int blk, int n, int c, int inner, const char *op);
static int bnb_forward(dl_backend *be, const bn_task *t, int blk);
static int bnb_backward(dl_backend *be, const bn_task *t, int blk);

static int bn_forward(dl_backend *be, int training, int n, int c, int inner, float momentum,
                      float eps, float *y, const float *x, const float *gamma, const float *beta,
                      float *running_mean, float *running_var, float *save_mean, float *save_invstd,
                      int flags, int blk)
{
    if (blk)
        DL_TRY(bnb_check(blk, n, c, inner, "batchnorm_forward (blocked)"));
    else if (n <= 0 || c <= 0 || inner <= 0)
        return dl_error(DL_EINVAL, "batchnorm_forward: bad shape [%d, %d, %d]", n, c, inner);
    if (!training && (!running_mean || !running_var))
        return dl_error(DL_EINVAL, "batchnorm_forward: eval mode needs running statistics");
    bn_task t = {.n = n,
                 .c = c,
                 .inner = inner,
                 .training = training,
                 .momentum = momentum,
                 .eps = eps,
                 .y = y,
                 .x = x,
                 .gamma = gamma,
                 .beta = beta,
                 .running_mean = running_mean,
                 .running_var = running_var,
                 .save_mean = save_mean,
                 .save_invstd = save_invstd,
                 .relu = flags & DL_BN_RELU,
                 .round = bn_round(flags)};
    if (blk)
        return bnb_forward(be, &t, blk);
#ifdef DL_CPU_VMATH
    if (inner >= BN_STREAM_MIN)
        return bn_fwd_stream(be, &t);
    if (inner == 1) {
        dl_pool_for(dl_cpu(be)->pool, ((size_t)c + BN_COLS - 1) / BN_COLS, 1, bn_fwd_cols, &t);
        return DL_OK;
    }
#endif
    size_t grain = 1 + 32768 / ((size_t)n * inner);
    dl_pool_for(dl_cpu(be)->pool, (size_t)c, grain, bn_fwd_task, &t);
    return DL_OK;
}

int dl_cpu_batchnorm_forward(dl_backend *be, int training, int n, int c, int inner, float momentum,
                             float eps, float *y, const float *x, const float *gamma,
                             const float *beta, float *running_mean, float *running_var,
                             float *save_mean, float *save_invstd)
{
    return bn_forward(be, training, n, c, inner, momentum, eps, y, x, gamma, beta, running_mean,
                      running_var, save_mean, save_invstd, 0, 0);
}

/* y = relu(batchnorm(x)) in the same pass. */
int dl_cpu_batchnorm_relu_forward(dl_backend *be, int training, int n, int c, int inner,
                                  float momentum, float eps, float *y, const float *x,
                                  const float *gamma, const float *beta, float *running_mean,
                                  float *running_var, float *save_mean, float *save_invstd)
{
    return bn_forward(be, training, n, c, inner, momentum, eps, y, x, gamma, beta, running_mean,
                      running_var, save_mean, save_invstd, 1, 0);
}

/* Channel ch's gate: the forward's map when a ReLU is fused, from the
 * same floats. */
static bn_gate bn_channel_gate(const bn_task *t, size_t ch)
{
    bn_gate gt = {.relu = t->relu};
    if (t->relu)
        bn_affine(t->gamma ? t->gamma[ch] : 1.0f, t->beta ? t->beta[ch] : 0.0f, t->smean[ch],
                  t->sinvstd[ch], &gt.scale, &gt.shift);
    return gt;
}

/* Channel ch's dgamma and dbeta from its sums (sum g, sum g * xhat), and
 * dx's coefficients: dx = k * (g - mdy - xhat * mdyx). */
static void bn_channel_grad(const bn_task *t, size_t ch, const double sums[2], float *k, float *mdy,
                            float *mdyx)
{
    double count = (double)t->n * t->inner;
    double sdy = sums[0], sdyx = sums[1];
    if (t->dgamma)
        t->dgamma[ch] += (float)sdyx;
    if (t->dbeta)
        t->dbeta[ch] += (float)sdy;
    /* dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)) */
    double g = t->gamma ? t->gamma[ch] : 1.0;
    *k = (float)(g * (double)t->sinvstd[ch]);
    *mdy = (float)(sdy / count);
    *mdyx = (float)(sdyx / count);
}

/* Channels [begin, end), walked image after image (short planes only). */
static void bn_bwd_task(void *arg, size_t begin, size_t end)
{
    const bn_task *t = arg;
    size_t plane = (size_t)t->c * t->inner;
    for (size_t ch = begin; ch < end; ch++) {
        float fm = t->smean[ch], fi = t->sinvstd[ch];
        bn_gate gt = bn_channel_gate(t, ch);
        double sums[2] = {0.0, 0.0}; /* sum g, sum g * xhat */
        for (int i = 0; i < t->n; i++)
            plane_dy_sums(t->x + i * plane + ch * t->inner, t->dy + i * plane + ch * t->inner,
                          t->inner, fm, fi, &gt, sums);
        float k, mdy, mdyx;
        bn_channel_grad(t, ch, sums, &k, &mdy, &mdyx);
        if (!t->dx)
            continue;
        for (int i = 0; i < t->n; i++) {
            size_t at = i * plane + ch * t->inner;
            plane_dx(t->dx + at, t->x + at, t->dy + at, t->inner, k, mdy, fm, fi, mdyx, &gt,
                     t->set);
        }
    }
}

#ifdef DL_CPU_VMATH
/* The backward's passes over the planes as bn_fwd_sums, bn_fwd_planes */
static void bn_bwd_sums(void *arg, size_t begin, size_t end)
{
    const bn_stream *s = arg;
    const bn_task *t = s->t;
    for (size_t p = begin; p < end; p++) {
        size_t ch = p % t->c;
        const float *cf = s->coef + ch * BN_COEFS;
        bn_gate gt = {.relu = t->relu, .scale = cf[BN_SCALE], .shift = cf[BN_SHIFT]};
        double *m = s->part + 2 * p;
        m[0] = m[1] = 0.0;
        plane_dy_sums(t->x + p * t->inner, t->dy + p * t->inner, t->inner, t->smean[ch],
                      t->sinvstd[ch], &gt, m);
    }
}

static void bn_bwd_planes(void *arg, size_t begin, size_t end)
{
    const bn_stream *s = arg;
    const bn_task *t = s->t;
    for (size_t p = begin; p < end; p++) {
        size_t ch = p % t->c, at = p * t->inner;
        const float *cf = s->coef + ch * BN_COEFS;
        bn_gate gt = {.relu = t->relu, .scale = cf[BN_SCALE], .shift = cf[BN_SHIFT]};
        plane_dx(t->dx + at, t->x + at, t->dy + at, t->inner, cf[BN_K], cf[BN_MDY], t->smean[ch],
                 t->sinvstd[ch], cf[BN_MDYX], &gt, t->set);
    }
}

static int bn_bwd_stream(dl_backend *be, const bn_task *t)
{
    bn_stream s;
    DL_TRY(bn_stream_init(be, &s, t));
    for (size_t ch = 0; ch < (size_t)t->c; ch++) {
        bn_gate gt = bn_channel_gate(t, ch);
        s.coef[ch * BN_COEFS + BN_SCALE] = gt.scale;
        s.coef[ch * BN_COEFS + BN_SHIFT] = gt.shift;
    }
    dl_pool *pool = dl_cpu(be)->pool;
    dl_pool_for(pool, s.planes, bn_stream_grain(t), bn_bwd_sums, &s);
    bn_sum_planes(&s);
    for (size_t ch = 0; ch < (size_t)t->c; ch++) {
        float *cf = s.coef + ch * BN_COEFS;
        bn_channel_grad(t, ch, s.sum + 2 * ch, &cf[BN_K], &cf[BN_MDY], &cf[BN_MDYX]);
    }
    if (t->dx)
        dl_pool_for(pool, s.planes, bn_stream_grain(t), bn_bwd_planes, &s);
    return DL_OK;
}
#endif

#ifdef DL_CPU_VMATH
static void bn_bwd_cols(void *arg, size_t begin, size_t end)
{
    const bn_task *t = arg;
    for (size_t blk = begin; blk < end; blk++) {
        int c0, c1;
        bn_cols_range(t, blk, &c0, &c1);
        int w = c1 - c0;
        double s0[BN_COLS] = {0}, s1[BN_COLS] = {0};
        float sc[BN_COLS], sh[BN_COLS], k[BN_COLS], mdy[BN_COLS], mdyx[BN_COLS];
        for (int j = 0; j < w; j++) {
            bn_gate gt = bn_channel_gate(t, (size_t)(c0 + j));
            sc[j] = gt.scale, sh[j] = gt.shift;
        }
        const float *mean = t->smean + c0, *inv = t->sinvstd + c0;
        for (int i = 0; i < t->n; i++) {
            const float *xr = t->x + (size_t)i * t->c + c0, *dyr = t->dy + (size_t)i * t->c + c0;
            int j = 0;
            for (; j + 4 <= w; j += 4) {
                __m128 x = _mm_loadu_ps(xr + j), g = _mm_loadu_ps(dyr + j);
                if (t->relu) {
                    __m128 v = _mm_fmadd_ps(x, _mm_loadu_ps(sc + j), _mm_loadu_ps(sh + j));
                    g = _mm_and_ps(g, _mm_cmp_ps(v, _mm_setzero_ps(), _CMP_GT_OQ));
                }
                __m128 xh =
                    _mm_mul_ps(_mm_sub_ps(x, _mm_loadu_ps(mean + j)), _mm_loadu_ps(inv + j));
                _mm256_storeu_pd(s0 + j,
                                 _mm256_add_pd(_mm256_loadu_pd(s0 + j), _mm256_cvtps_pd(g)));
                _mm256_storeu_pd(s1 + j, _mm256_add_pd(_mm256_loadu_pd(s1 + j),
                                                       _mm256_cvtps_pd(_mm_mul_ps(g, xh))));
            }
            for (; j < w; j++) {
                bn_gate gt = {.relu = t->relu, .scale = sc[j], .shift = sh[j]};
                float g = gate1(&gt, dyr[j], xr[j]);
                s0[j] += (double)g;
                s1[j] += (double)(g * ((xr[j] - mean[j]) * inv[j]));
            }
        }
        for (int j = 0; j < w; j++) {
            double sums[2] = {s0[j], s1[j]};
            bn_channel_grad(t, (size_t)(c0 + j), sums, &k[j], &mdy[j], &mdyx[j]);
        }
        for (int i = 0; t->dx && i < t->n; i++) {
            size_t at = (size_t)i * t->c + c0;
            const float *xr = t->x + at, *dyr = t->dy + at;
            float *dxr = t->dx + at;
            int j = 0;
            /* plane_dx's operations, a column's coefficients a lane */
            for (; j + 8 <= w; j += 8) {
                __m256 x = _mm256_loadu_ps(xr + j), g = _mm256_loadu_ps(dyr + j);
                if (t->relu)
                    g = pass_positive(
                        g, _mm256_fmadd_ps(x, _mm256_loadu_ps(sc + j), _mm256_loadu_ps(sh + j)));
                __m256 xh = _mm256_mul_ps(_mm256_sub_ps(x, _mm256_loadu_ps(mean + j)),
                                          _mm256_loadu_ps(inv + j));
                __m256 d = _mm256_fnmadd_ps(xh, _mm256_loadu_ps(mdyx + j),
                                            _mm256_sub_ps(g, _mm256_loadu_ps(mdy + j)));
                __m256 old = t->set ? _mm256_setzero_ps() : _mm256_loadu_ps(dxr + j);
                _mm256_storeu_ps(dxr + j, _mm256_fmadd_ps(_mm256_loadu_ps(k + j), d, old));
            }
            for (; j < w; j++) {
                bn_gate gt = {.relu = t->relu, .scale = sc[j], .shift = sh[j]};
                plane_dx(dxr + j, xr + j, dyr + j, 1, k[j], mdy[j], mean[j], inv[j], mdyx[j], &gt,
                         t->set);
            }
        }
    }
}
#endif

/* Training-mode BatchNorm backward over x [n, c, inner] with the saved
 * batch statistics: dx += d loss / dx (through the batch statistics),
 * dgamma[c] += sum dy * xhat, dbeta[c] += sum dy. dx, dgamma, dbeta may be
 * NULL (skipped); gamma NULL means 1. */
static int bn_backward(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                       float *dbeta, const float *dy, const float *x, const float *gamma,
                       const float *beta, const float *save_mean, const float *save_invstd, int set,
                       int flags, int blk)
{
    if (blk)
        DL_TRY(bnb_check(blk, n, c, inner, "batchnorm_backward (blocked)"));
    else if (n <= 0 || c <= 0 || inner <= 0)
        return dl_error(DL_EINVAL, "batchnorm_backward: bad shape [%d, %d, %d]", n, c, inner);
    bn_task t = {.n = n,
                 .c = c,
                 .inner = inner,
                 .dx = dx,
                 .dgamma = dgamma,
                 .dbeta = dbeta,
                 .dy = dy,
                 .x = x,
                 .gamma = gamma,
                 .beta = beta,
                 .smean = save_mean,
                 .sinvstd = save_invstd,
                 .set = set,
                 .relu = flags & DL_BN_RELU,
                 .round = set ? bn_round(flags) : DL_F32};
    if (blk)
        return bnb_backward(be, &t, blk);
#ifdef DL_CPU_VMATH
    if (inner >= BN_STREAM_MIN)
        return bn_bwd_stream(be, &t);
    if (inner == 1) {
        dl_pool_for(dl_cpu(be)->pool, ((size_t)c + BN_COLS - 1) / BN_COLS, 1, bn_bwd_cols, &t);
        return DL_OK;
    }
#endif
    size_t grain = 1 + 32768 / ((size_t)n * inner);
    dl_pool_for(dl_cpu(be)->pool, (size_t)c, grain, bn_bwd_task, &t);
    return DL_OK;
}

int dl_cpu_batchnorm_backward(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                              float *dbeta, const float *dy, const float *x, const float *gamma,
                              const float *save_mean, const float *save_invstd)
{
    return bn_backward(be, n, c, inner, dx, dgamma, dbeta, dy, x, gamma, NULL, save_mean,
                       save_invstd, 0, 0, 0);
}

/* The same with dx written (the op table's batchnorm_backward_set). */
int dl_cpu_batchnorm_backward_set(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                                  float *dbeta, const float *dy, const float *x, const float *gamma,
                                  const float *save_mean, const float *save_invstd)
{
    return bn_backward(be, n, c, inner, dx, dgamma, dbeta, dy, x, gamma, NULL, save_mean,
                       save_invstd, 1, 0, 0);
}

/* The gradient through ReLU(BatchNorm(x)), dy that of the ReLU's output,
 * dx written; the ReLU's pass/zero decisions recomputed from x. */
int dl_cpu_batchnorm_relu_backward_set(dl_backend *be, int n, int c, int inner, float *dx,
                                       float *dgamma, float *dbeta, const float *dy, const float *x,
                                       const float *gamma, const float *beta,
                                       const float *save_mean, const float *save_invstd)
{
    return bn_backward(be, n, c, inner, dx, dgamma, dbeta, dy, x, gamma, beta, save_mean,
                       save_invstd, 1, 1, 0);
}

/* --- activations in channel blocks: x [n, c / blk, inner, blk] ------------
 * (nn.c's layout plan keeps the activations between oneDNN's convolutions
 * in its nChw16c / nChw8c). A plane is one image's block of blk channels,
 * inner rows of blk floats; a lane is a channel. The passes are the
 * streaming ones above: per plane sums in float lanes (two chains, even
 * and odd rows) added to the channel's double totals in image order, then
 * a pass that writes y or dx; the same bits at any thread count. The
 * shift k of a channel's moments is its first value, as above. */

typedef struct bnb {
    const bn_task *t;
    int blk, nb;         /* channels a block, blocks an image */
    size_t planes;       /* n * nb */
    double *part;        /* [planes][2][blk] */
    double *sum;         /* [c][2] */
    float *co[BN_COEFS]; /* [c] each: scale, shift, k (the shift), mdy, mdyx */
} bnb;

static int bnb_init(dl_backend *be, bnb *b, const bn_task *t, int blk)
{
    b->t = t;
    b->blk = blk;
    b->nb = t->c / blk;
    b->planes = (size_t)t->n * b->nb;
    size_t doubles = 2 * b->planes * blk + 2 * (size_t)t->c;
    size_t bytes = doubles * sizeof(double) + (size_t)t->c * BN_COEFS * sizeof(float);
    b->part = dl_cpu_scratch(be, DL_CPU_SCRATCH_NORM, bytes);
    if (!b->part)
        return dl_error(DL_ENOMEM, "batchnorm: out of memory for %zu planes' sums", b->planes);
    b->sum = b->part + 2 * b->planes * blk;
    for (int i = 0; i < BN_COEFS; i++)
        b->co[i] = (float *)(b->sum + 2 * (size_t)t->c) + (size_t)i * t->c;
    return DL_OK;
}

/* sum[ch] = the planes' lane sums of channel ch added in image order */
static void bnb_sum_planes(const bnb *b)
{
    const bn_task *t = b->t;
    memset(b->sum, 0, 2 * (size_t)t->c * sizeof *b->sum);
    for (int i = 0; i < t->n; i++)
        for (int cb = 0; cb < b->nb; cb++) {
            const double *pp = b->part + ((size_t)i * b->nb + cb) * 2 * b->blk;
            for (int l = 0; l < b->blk; l++) {
                b->sum[2 * (cb * b->blk + l)] += pp[l];
                b->sum[2 * (cb * b->blk + l) + 1] += pp[b->blk + l];
            }
        }
}

#ifdef DL_CPU_VMATH
/* 8 lanes of a row: dy gated by the fused ReLU's mask (x * sc + sh > 0)
 * where relu is set, and xhat = (x - m) * is in *xh. */
static inline __m256 bnb_gated(const float *x, const float *dy, int relu, __m256 sc, __m256 sh,
                               __m256 m, __m256 is, __m256 *xh)
{
    __m256 xv = _mm256_loadu_ps(x), gv = _mm256_loadu_ps(dy);
    if (relu)
        gv = pass_positive(gv, _mm256_fmadd_ps(xv, sc, sh));
    *xh = _mm256_mul_ps(_mm256_sub_ps(xv, m), is);
    return gv;
}
#endif

/* Plane p's lane sums: forward (dy NULL) sum (x - k), sum (x - k)^2;
 * backward sum g, sum g * (x - mean) * invstd, g the gated dy. */
static void bnb_plane_sums(const bnb *b, size_t p)
{
    const bn_task *t = b->t;
    int blk = b->blk, cb = (int)(p % b->nb);
    size_t at = p * t->inner * blk;
    const float *x = t->x + at, *dy = t->dy ? t->dy + at : NULL;
    double *out = b->part + p * 2 * blk;
    for (int g = 0; g < blk; g += 8) {
        size_t ch = (size_t)cb * blk + g;
#ifdef DL_CPU_VMATH
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, u0 = s0, u1 = s0;
        if (!dy) {
            __m256 k = _mm256_loadu_ps(b->co[BN_K] + ch);
            int i = 0;
            for (; i + 2 <= t->inner; i += 2) {
                __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + (size_t)i * blk + g), k);
                __m256 e = _mm256_sub_ps(_mm256_loadu_ps(x + (size_t)(i + 1) * blk + g), k);
                s0 = _mm256_add_ps(s0, d);
                s1 = _mm256_fmadd_ps(d, d, s1);
                u0 = _mm256_add_ps(u0, e);
                u1 = _mm256_fmadd_ps(e, e, u1);
            }
            for (; i < t->inner; i++) {
                __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + (size_t)i * blk + g), k);
                s0 = _mm256_add_ps(s0, d);
                s1 = _mm256_fmadd_ps(d, d, s1);
            }
        } else {
            __m256 m = _mm256_loadu_ps(t->smean + ch), is = _mm256_loadu_ps(t->sinvstd + ch);
            __m256 sc = _mm256_loadu_ps(b->co[BN_SCALE] + ch);
            __m256 sh = _mm256_loadu_ps(b->co[BN_SHIFT] + ch);
            for (int i = 0; i < t->inner; i++) {
                size_t o = (size_t)i * blk + g;
                __m256 xh, gv = bnb_gated(x + o, dy + o, t->relu, sc, sh, m, is, &xh);
                if (i & 1) {
                    u0 = _mm256_add_ps(u0, gv);
                    u1 = _mm256_fmadd_ps(gv, xh, u1);
                } else {
                    s0 = _mm256_add_ps(s0, gv);
                    s1 = _mm256_fmadd_ps(gv, xh, s1);
                }
            }
        }
        float a[8], q[8];
        _mm256_storeu_ps(a, _mm256_add_ps(s0, u0));
        _mm256_storeu_ps(q, _mm256_add_ps(s1, u1));
        for (int l = 0; l < 8; l++) {
            out[g + l] = a[l];
            out[blk + g + l] = q[l];
        }
#else
        for (int l = 0; l < 8; l++) {
            double a = 0, q = 0;
            for (int i = 0; i < t->inner; i++) {
                float xv = x[(size_t)i * blk + g + l];
                if (!dy) {
                    double d = (double)xv - b->co[BN_K][ch + l];
                    a += d;
                    q += d * d;
                } else {
                    bn_gate gt = {t->relu, b->co[BN_SCALE][ch + l], b->co[BN_SHIFT][ch + l]};
                    float gv = gate1(&gt, dy[(size_t)i * blk + g + l], xv);
                    a += gv;
                    q += gv * ((xv - t->smean[ch + l]) * t->sinvstd[ch + l]);
                }
            }
            out[g + l] = a;
            out[blk + g + l] = q;
        }
#endif
    }
}

static void bnb_sums_task(void *arg, size_t begin, size_t end)
{
    for (size_t p = begin; p < end; p++)
        bnb_plane_sums(arg, p);
}

/* Plane p's output: y = x * scale + shift (then ReLU) forward (dy NULL),
 * dx (+)= k * (g - mdy - xhat * mdyx) backward: plane_affine's and
 * plane_dx's operations, a channel's coefficients a lane. */
static void bnb_plane_out(const bnb *b, size_t p)
{
    const bn_task *t = b->t;
    int blk = b->blk, cb = (int)(p % b->nb);
    size_t at = p * t->inner * blk;
    const float *x = t->x + at, *dy = t->dy ? t->dy + at : NULL;
    float *out = dy ? t->dx + at : t->y + at;
    for (int g = 0; g < blk; g += 8) {
        size_t ch = (size_t)cb * blk + g;
#ifdef DL_CPU_VMATH
        __m256 sc = _mm256_loadu_ps(b->co[BN_SCALE] + ch),
               sh = _mm256_loadu_ps(b->co[BN_SHIFT] + ch);
        if (!dy) {
            for (int i = 0; i < t->inner; i++) {
                size_t o = (size_t)i * blk + g;
                __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(x + o), sc, sh);
                _mm256_storeu_ps(out + o, t->relu ? pass_positive(v, v) : v);
            }
            continue;
        }
        __m256 vk = _mm256_loadu_ps(b->co[BN_K] + ch), vmdy = _mm256_loadu_ps(b->co[BN_MDY] + ch);
        __m256 vmdyx = _mm256_loadu_ps(b->co[BN_MDYX] + ch);
        __m256 m = _mm256_loadu_ps(t->smean + ch), is = _mm256_loadu_ps(t->sinvstd + ch);
        for (int i = 0; i < t->inner; i++) {
            size_t o = (size_t)i * blk + g;
            __m256 xh, gv = bnb_gated(x + o, dy + o, t->relu, sc, sh, m, is, &xh);
            __m256 d = _mm256_fnmadd_ps(xh, vmdyx, _mm256_sub_ps(gv, vmdy));
            __m256 old = t->set ? _mm256_setzero_ps() : _mm256_loadu_ps(out + o);
            _mm256_storeu_ps(out + o, _mm256_fmadd_ps(vk, d, old));
        }
#else
        for (int i = 0; i < t->inner; i++)
            for (int l = 0; l < 8; l++) {
                size_t o = (size_t)i * blk + g + l;
                if (!dy) {
                    plane_affine(out + o, x + o, 1, b->co[BN_SCALE][ch + l],
                                 b->co[BN_SHIFT][ch + l], t->relu);
                } else {
                    bn_gate gt = {t->relu, b->co[BN_SCALE][ch + l], b->co[BN_SHIFT][ch + l]};
                    plane_dx(out + o, x + o, dy + o, 1, b->co[BN_K][ch + l], b->co[BN_MDY][ch + l],
                             t->smean[ch + l], t->sinvstd[ch + l], b->co[BN_MDYX][ch + l], &gt,
                             t->set);
                }
            }
#endif
    }
}

/* A plane's output, rounded where asked while it is in cache. */
static void bnb_out_task(void *arg, size_t begin, size_t end)
{
    const bnb *b = arg;
    const bn_task *t = b->t;
    size_t per = (size_t)t->inner * b->blk;
    for (size_t p = begin; p < end; p++) {
        bnb_plane_out(b, p);
        if (t->round != DL_F32) {
            float *out = (t->dy ? t->dx : t->y) + p * per;
            dl_cpu_round_run(out, out, t->round, per);
        }
    }
}

static int bnb_check(int blk, int n, int c, int inner, const char *op)
{
    if (n <= 0 || c <= 0 || inner <= 0 || blk <= 0 || blk % 8 || c % blk)
        return dl_error(DL_EINVAL, "%s: bad shape [%d, %d / %d, %d, %d]", op, n, c, blk, inner,
                        blk);
    return DL_OK;
}

/* The blocked layout's passes for a task bn_forward set up. */
static int bnb_forward(dl_backend *be, const bn_task *t, int blk)
{
    bnb b;
    DL_TRY(bnb_init(be, &b, t, blk));
    dl_pool *pool = dl_cpu(be)->pool;
    size_t grain = dl_cpu_plane_grain((size_t)t->inner * blk);
    for (int ch = 0; ch < t->c; ch++) /* a channel's first value: image 0, row 0 */
        b.co[BN_K][ch] = t->x[(size_t)(ch / blk) * t->inner * blk + ch % blk];
    if (t->training) {
        dl_pool_for(pool, b.planes, grain, bnb_sums_task, &b);
        bnb_sum_planes(&b);
    }
    for (int ch = 0; ch < t->c; ch++)
        bn_channel_map(t, (size_t)ch, b.co[BN_K][ch], b.sum + 2 * ch, &b.co[BN_SCALE][ch],
                       &b.co[BN_SHIFT][ch]);
    dl_pool_for(pool, b.planes, grain, bnb_out_task, &b);
    return DL_OK;
}

/* The same for bn_backward's task. */
static int bnb_backward(dl_backend *be, const bn_task *t, int blk)
{
    bnb b;
    DL_TRY(bnb_init(be, &b, t, blk));
    for (int ch = 0; ch < t->c; ch++) {
        bn_gate gt = bn_channel_gate(t, (size_t)ch);
        b.co[BN_SCALE][ch] = gt.scale;
        b.co[BN_SHIFT][ch] = gt.shift;
    }
    dl_pool *pool = dl_cpu(be)->pool;
    size_t grain = dl_cpu_plane_grain((size_t)t->inner * blk);
    dl_pool_for(pool, b.planes, grain, bnb_sums_task, &b);
    bnb_sum_planes(&b);
    for (int ch = 0; ch < t->c; ch++)
        bn_channel_grad(t, (size_t)ch, b.sum + 2 * ch, &b.co[BN_K][ch], &b.co[BN_MDY][ch],
                        &b.co[BN_MDYX][ch]);
    if (t->dx)
        dl_pool_for(pool, b.planes, grain, bnb_out_task, &b);
    return DL_OK;
}

int dl_cpu_batchnorm_blocked_forward(dl_backend *be, int blk, int relu, int training, int n, int c,
                                     int inner, float momentum, float eps, float *y, const float *x,
                                     const float *gamma, const float *beta, float *running_mean,
                                     float *running_var, float *save_mean, float *save_invstd)
{
    return bn_forward(be, training, n, c, inner, momentum, eps, y, x, gamma, beta, running_mean,
                      running_var, save_mean, save_invstd, relu, blk > 0 ? blk : -1);
}

int dl_cpu_batchnorm_blocked_backward(dl_backend *be, int blk, int relu, int set, int n, int c,
                                      int inner, float *dx, float *dgamma, float *dbeta,
                                      const float *dy, const float *x, const float *gamma,
                                      const float *beta, const float *save_mean,
                                      const float *save_invstd)
{
    return bn_backward(be, n, c, inner, dx, dgamma, dbeta, dy, x, gamma, beta, save_mean,
                       save_invstd, set, relu, blk > 0 ? blk : -1);
}

/* ---------------------------------------------------------------------- */

typedef struct ln_task {
    int rows, cols;
    float eps;
    float *y, *dx, *dgamma, *dbeta;
    const float *x, *dy, *gamma, *beta;
    float *save_mean, *save_invstd;
    const float *smean, *sinvstd;
} ln_task;

/* y[j] = (x[j] - mean) * invstd * gamma[j] + beta[j] (gamma/beta NULL: 1/0) */
static void row_norm(float *y, const float *x, int n, float mean, float invstd, const float *gamma,
                     const float *beta)
{
    int j = 0;
#ifdef DL_CPU_VMATH
    __m256 vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(invstd), one = _mm256_set1_ps(1.0f);
    for (; j < n; j += 8) {
        int w = n - j < 8 ? n - j : 8;
        __m256 v = w == 8 ? _mm256_loadu_ps(x + j) : dl_v_load_tail(x + j, w);
        __m256 g = !gamma   ? one
                   : w == 8 ? _mm256_loadu_ps(gamma + j)
                            : dl_v_load_tail(gamma + j, w);
        __m256 b = !beta    ? _mm256_setzero_ps()
                   : w == 8 ? _mm256_loadu_ps(beta + j)
                            : dl_v_load_tail(beta + j, w);
        __m256 r = _mm256_fmadd_ps(g, _mm256_mul_ps(_mm256_sub_ps(v, vm), vi), b);
        if (w == 8)
            _mm256_storeu_ps(y + j, r);
        else
            dl_v_store_tail(y + j, r, w);
    }
#endif
    for (; j < n; j++) {
        float v = (x[j] - mean) * invstd;
        y[j] = (gamma ? gamma[j] : 1.0f) * v + (beta ? beta[j] : 0.0f);
    }
}

#ifdef DL_CPU_VMATH
/* The first w <= 8 floats of p (gamma NULL: ones). */
static inline __m256 load_w(const float *p, int w, float missing)
{
    return !p ? _mm256_set1_ps(missing) : w == 8 ? _mm256_loadu_ps(p) : dl_v_load_tail(p, w);
}
#endif

#ifdef DL_CPU_VMATH
/* --- LayerNorm rows on 16 lanes (AVX-512F): a group of rows gets its
 * shifted moments (one pass, as plane_moments) before any is normalised,
 * so that the rows' reductions and square roots overlap; the group stays
 * in L1. */
#define LN_GROUP_FLOATS 4096

DL_V512_TARGET static void ln_stats_v512(const ln_task *t, size_t r)
{
    const int n = t->cols, full = n & ~15;
    const float *x = t->x + r * n;
    const __m512 vk = _mm512_set1_ps(x[0]);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;
    int j = 0;
    for (; j + 32 <= full; j += 32) {
        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + j), vk);
        __m512 e = _mm512_sub_ps(_mm512_loadu_ps(x + j + 16), vk);
        a0 = _mm512_add_ps(a0, d);
        a1 = _mm512_fmadd_ps(d, d, a1);
        b0 = _mm512_add_ps(b0, e);
        b1 = _mm512_fmadd_ps(e, e, b1);
    }
    for (; j < n; j += 16) {
        __mmask16 k = dl_v512_mask(n - j < 16 ? n - j : 16);
        __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + j), vk);
        a0 = _mm512_add_ps(a0, d);
        a1 = _mm512_fmadd_ps(d, d, a1);
    }
    double m[2];
    dl_v512_hsum2(_mm512_add_ps(a0, b0), _mm512_add_ps(a1, b1), &m[0], &m[1]);
    double dmu = m[0] / n, ss = m[1] - dmu * m[0];
    t->save_mean[r] = (float)(x[0] + dmu);
    t->save_invstd[r] = (float)(1.0 / sqrt((ss > 0 ? ss : 0) / n + t->eps));
}

DL_V512_TARGET static void ln_norm_v512(const ln_task *t, size_t r)
{
    const int n = t->cols, full = n & ~15;
    const float *x = t->x + r * n, *gm = t->gamma, *bt = t->beta;
    float *y = t->y + r * n;
    const __m512 vm = _mm512_set1_ps(t->save_mean[r]), vi = _mm512_set1_ps(t->save_invstd[r]);
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    int j = 0;
    if (gm && bt)
        for (; j < full; j += 16) {
            __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm), vi);
            _mm512_storeu_ps(y + j,
                             _mm512_fmadd_ps(_mm512_loadu_ps(gm + j), v, _mm512_loadu_ps(bt + j)));
        }
    for (; j < n; j += 16) {
        __mmask16 k = dl_v512_mask(n - j < 16 ? n - j : 16);
        __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), vm), vi);
        __m512 g = gm ? _mm512_maskz_loadu_ps(k, gm + j) : one;
        __m512 b = bt ? _mm512_maskz_loadu_ps(k, bt + j) : zero;
        _mm512_mask_storeu_ps(y + j, k, _mm512_fmadd_ps(g, v, b));
    }
}

/* Rows [begin, end); the statistics go to save_mean / save_invstd (the
 * caller points them at scratch when not kept). */
DL_V512_TARGET static void ln_fwd_rows_v512(const ln_task *t, size_t begin, size_t end)
{
    size_t group = LN_GROUP_FLOATS / (size_t)t->cols;
    group = group < 1 ? 1 : group > 16 ? 16 : group;
    for (size_t r0 = begin; r0 < end; r0 += group) {
        size_t r1 = r0 + group < end ? r0 + group : end;
        for (size_t r = r0; r < r1; r++)
            ln_stats_v512(t, r);
        for (size_t r = r0; r < r1; r++)
            ln_norm_v512(t, r);
    }
}

/* The forward on 8 lanes (AVX2), grouped as ln_fwd_rows_v512: the
 * statistics as plane_moments computes them (its bits), the
 * normalisation as row_norm's (its bits) with gamma and beta loaded
 * whole but in the tail. */
static void ln_stats_v256(const ln_task *t, size_t r)
{
    const int n = t->cols;
    const float *x = t->x + r * n;
    double m[2] = {0.0, 0.0};
    plane_moments(x, n, x[0], m);
    double dmu = m[0] / n, ss = m[1] - dmu * m[0];
    t->save_mean[r] = (float)(x[0] + dmu);
    t->save_invstd[r] = (float)(1.0 / sqrt((ss > 0 ? ss : 0) / n + t->eps));
}

/* row_norm with gamma and beta: two vectors a step, then row_norm for
 * the rest (the same operations, the same bits). */
static void ln_norm_v256(const ln_task *t, size_t r)
{
    const int n = t->cols;
    const float *x = t->x + r * n, *gm = t->gamma, *bt = t->beta;
    float *y = t->y + r * n;
    const __m256 vm = _mm256_set1_ps(t->save_mean[r]), vi = _mm256_set1_ps(t->save_invstd[r]);
    int j = 0;
    if (gm && bt)
        for (; j + 16 <= n; j += 16) {
            __m256 v0 = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm), vi);
            __m256 v1 = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), vm), vi);
            _mm256_storeu_ps(y + j,
                             _mm256_fmadd_ps(_mm256_loadu_ps(gm + j), v0, _mm256_loadu_ps(bt + j)));
            _mm256_storeu_ps(y + j + 8, _mm256_fmadd_ps(_mm256_loadu_ps(gm + j + 8), v1,
                                                        _mm256_loadu_ps(bt + j + 8)));
        }
    if (j < n)
        row_norm(y + j, x + j, n - j, t->save_mean[r], t->save_invstd[r], gm ? gm + j : NULL,
                 bt ? bt + j : NULL);
}

static void ln_fwd_rows_v256(const ln_task *t, size_t begin, size_t end)
{
    size_t group = LN_GROUP_FLOATS / (size_t)t->cols;
    group = group < 1 ? 1 : group > 16 ? 16 : group;
    for (size_t r0 = begin; r0 < end; r0 += group) {
        size_t r1 = r0 + group < end ? r0 + group : end;
        for (size_t r = r0; r < r1; r++)
            ln_stats_v256(t, r);
        for (size_t r = r0; r < r1; r++)
            ln_norm_v256(t, r);
    }
}

/* Rows [r0, r1) of the backward: dx as ln_bwd_rows, and (pg, pb not
 * NULL) pg[j] += dy xhat, pb[j] += dy in float, row after row, as
 * ln_bwd_cols sums a block. */
/* The floats of p in mask k: an unmasked load for a whole vector (the
 * same values). */
DL_V512_TARGET static inline __m512 ld512(__mmask16 k, const float *p)
{
    return k == 0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}

DL_V512_TARGET static void ln_bwd_block_v512(const ln_task *t, int r0, int r1, float *pg, float *pb)
{
    const int n = t->cols;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int r = r0; r < r1; r++) {
        const float *xr = t->x + (size_t)r * n, *dyr = t->dy + (size_t)r * n, *gm = t->gamma;
        const __m512 vm = _mm512_set1_ps(t->smean[r]), vi = _mm512_set1_ps(t->sinvstd[r]);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0;
        for (int j = 0; j < n; j += 16) {
            __mmask16 k = dl_v512_mask(n - j < 16 ? n - j : 16);
            __m512 dy = ld512(k, dyr + j);
            __m512 xh = _mm512_mul_ps(_mm512_sub_ps(ld512(k, xr + j), vm), vi);
            __m512 g = _mm512_mul_ps(dy, gm ? ld512(k, gm + j) : one);
            a0 = _mm512_add_ps(a0, g);
            a1 = _mm512_fmadd_ps(g, xh, a1); /* g is 0 past the row */
            if (pg && k == 0xffff) {
                /* whole vectors unmasked: the next row's loads of a
                 * masked store's floats wait for it to retire */
                _mm512_storeu_ps(pg + j, _mm512_fmadd_ps(dy, xh, _mm512_loadu_ps(pg + j)));
                _mm512_storeu_ps(pb + j, _mm512_add_ps(_mm512_loadu_ps(pb + j), dy));
            } else if (pg) {
                _mm512_mask_storeu_ps(pg + j, k, _mm512_fmadd_ps(dy, xh, ld512(k, pg + j)));
                _mm512_mask_storeu_ps(pb + j, k, _mm512_add_ps(ld512(k, pb + j), dy));
            }
        }
        if (!t->dx)
            continue;
        double sg, sgx;
        dl_v512_hsum2(a0, a1, &sg, &sgx);
        const __m512 vmg = _mm512_set1_ps((float)(sg / n)), vmgx = _mm512_set1_ps((float)(sgx / n));
        float *dxr = t->dx + (size_t)r * n;
        for (int j = 0; j < n; j += 16) {
            __mmask16 k = dl_v512_mask(n - j < 16 ? n - j : 16);
            __m512 g = _mm512_mul_ps(ld512(k, dyr + j), gm ? ld512(k, gm + j) : one);
            __m512 xh = _mm512_mul_ps(_mm512_sub_ps(ld512(k, xr + j), vm), vi);
            __m512 d = _mm512_fnmadd_ps(xh, vmgx, _mm512_sub_ps(g, vmg));
            if (k == 0xffff)
                _mm512_storeu_ps(dxr + j, _mm512_fmadd_ps(vi, d, _mm512_loadu_ps(dxr + j)));
            else
                _mm512_mask_storeu_ps(dxr + j, k, _mm512_fmadd_ps(vi, d, ld512(k, dxr + j)));
        }
    }
}

/* The same on 8 lanes (AVX2): whole pairs of vectors first (two chains
 * for the row's sums), then the rest one vector a step. */
static void ln_bwd_block_v256(const ln_task *t, int r0, int r1, float *pg, float *pb)
{
    const int n = t->cols, pairs = n & ~15;
    for (int r = r0; r < r1; r++) {
        const float *xr = t->x + (size_t)r * n, *dyr = t->dy + (size_t)r * n, *gm = t->gamma;
        const __m256 vm = _mm256_set1_ps(t->smean[r]), vi = _mm256_set1_ps(t->sinvstd[r]);
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, c0 = a0, c1 = a0;
        int j = 0;
        for (; j < pairs; j += 8) {
            /* even and odd vectors in two chains each */
            __m256 dy = _mm256_loadu_ps(dyr + j);
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + j), vm), vi);
            __m256 g = _mm256_mul_ps(dy, load_w(gm ? gm + j : NULL, 8, 1));
            if (j & 8) {
                c0 = _mm256_add_ps(c0, g);
                c1 = _mm256_fmadd_ps(g, xh, c1);
            } else {
                a0 = _mm256_add_ps(a0, g);
                a1 = _mm256_fmadd_ps(g, xh, a1);
            }
            if (pg) {
                _mm256_storeu_ps(pg + j, _mm256_fmadd_ps(dy, xh, _mm256_loadu_ps(pg + j)));
                _mm256_storeu_ps(pb + j, _mm256_add_ps(_mm256_loadu_ps(pb + j), dy));
            }
        }
        a0 = _mm256_add_ps(a0, c0);
        a1 = _mm256_add_ps(a1, c1);
        for (; j < n; j += 8) {
            int w = n - j < 8 ? n - j : 8;
            __m256 dy = load_w(dyr + j, w, 0);
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(load_w(xr + j, w, 0), vm), vi);
            __m256 g = _mm256_mul_ps(dy, load_w(gm ? gm + j : NULL, w, 1));
            a0 = _mm256_add_ps(a0, g);
            a1 = _mm256_fmadd_ps(g, xh, a1);
            if (pg) {
                __m256 og = _mm256_fmadd_ps(dy, xh, load_w(pg + j, w, 0));
                __m256 ob = _mm256_add_ps(load_w(pb + j, w, 0), dy);
                if (w == 8) {
                    _mm256_storeu_ps(pg + j, og);
                    _mm256_storeu_ps(pb + j, ob);
                } else {
                    dl_v_store_tail(pg + j, og, w);
                    dl_v_store_tail(pb + j, ob, w);
                }
            }
        }
        if (!t->dx)
            continue;
        float mg = (float)(dl_v_hsum(a0) / n), mgx = (float)(dl_v_hsum(a1) / n);
        __m256 vmg = _mm256_set1_ps(mg), vmgx = _mm256_set1_ps(mgx);
        float *dxr = t->dx + (size_t)r * n;
        for (j = 0; j < n; j += 8) {
            int w = n - j < 8 ? n - j : 8;
            __m256 g = _mm256_mul_ps(load_w(dyr + j, w, 0), load_w(gm ? gm + j : NULL, w, 1));
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(load_w(xr + j, w, 0), vm), vi);
            __m256 d = _mm256_fnmadd_ps(xh, vmgx, _mm256_sub_ps(g, vmg));
            __m256 o = _mm256_fmadd_ps(vi, d, load_w(dxr + j, w, 0));
            if (w == 8)
                _mm256_storeu_ps(dxr + j, o);
            else
                dl_v_store_tail(dxr + j, o, w);
        }
    }
}

/* Rows are cut into fixed blocks of LN_BLOCK; each block's dgamma/dbeta
 * sums land in its own slot (float, as ln_bwd_cols flushes every 64
 * rows) and are added in double in block order: the same bits as the
 * column pass, at any thread count. */
#define LN_BLOCK 64

typedef struct ln_bwd_job {
    const ln_task *t;
    float *part; /* [blocks][2][stride]: dgamma, dbeta partials, or NULL */
    size_t stride;
} ln_bwd_job;

static void ln_bwd_blocks(void *arg, size_t begin, size_t end)
{
    const ln_bwd_job *j = arg;
    const ln_task *t = j->t;
    for (size_t b = begin; b < end; b++) {
        int r0 = (int)b * LN_BLOCK, r1 = r0 + LN_BLOCK < t->rows ? r0 + LN_BLOCK : t->rows;
        float *pg = j->part ? j->part + b * 2 * j->stride : NULL, *pb = pg ? pg + j->stride : NULL;
        if (pg)
            memset(pg, 0, 2 * j->stride * sizeof *pg);
        if (dl_v512_usable())
            ln_bwd_block_v512(t, r0, r1, pg, pb);
        else
            ln_bwd_block_v256(t, r0, r1, pg, pb);
    }
}

static int ln_bwd_fused(dl_backend *be, const ln_task *t)
{
    size_t blocks = ((size_t)t->rows + LN_BLOCK - 1) / LN_BLOCK;
    size_t stride = ((size_t)t->cols + 15) & ~(size_t)15;
    ln_bwd_job j = {t, NULL, stride};
    if (t->dgamma || t->dbeta) {
        j.part = dl_cpu_scratch(be, DL_CPU_SCRATCH_NORM, blocks * 2 * stride * sizeof(float));
        if (!j.part)
            return dl_error(DL_ENOMEM, "layernorm_backward: out of memory for %zu blocks", blocks);
    }
    size_t grain = 1 + 16384 / ((size_t)LN_BLOCK * t->cols);
    dl_pool_for(dl_cpu(be)->pool, blocks, grain, ln_bwd_blocks, &j);
    for (int c = 0; j.part && c < t->cols; c++) {
        double sg = 0.0, sb = 0.0;
        for (size_t b = 0; b < blocks; b++) {
            sg += j.part[b * 2 * stride + c];
            sb += j.part[b * 2 * stride + stride + c];
        }
        if (t->dgamma)
            t->dgamma[c] += (float)sg;
        if (t->dbeta)
            t->dbeta[c] += (float)sb;
    }
    return DL_OK;
}
#endif

static void ln_fwd_task(void *arg, size_t begin, size_t end)
{
    const ln_task *t = arg;
#ifdef DL_CPU_VMATH
    if (t->save_mean && t->save_invstd) {
        if (dl_v512_usable())
            ln_fwd_rows_v512(t, begin, end);
        else
            ln_fwd_rows_v256(t, begin, end);
        return;
    }
#endif
    for (size_t r = begin; r < end; r++) {
        const float *xr = t->x + r * t->cols;
        double m[2] = {0.0, 0.0};
        plane_moments(xr, t->cols, xr[0], m);
        double dmu = m[0] / t->cols, ss = m[1] - dmu * m[0];
        float mean = (float)(xr[0] + dmu);
        float invstd = (float)(1.0 / sqrt((ss > 0 ? ss : 0) / t->cols + t->eps));
        if (t->save_mean)
            t->save_mean[r] = mean;
        if (t->save_invstd)
            t->save_invstd[r] = invstd;
        row_norm(t->y + r * t->cols, xr, t->cols, mean, invstd, t->gamma, t->beta);
    }
}

/* y [rows, cols] = gamma * (x - mean_r) * invstd_r + beta with per-row
 * statistics (biased variance); saves mean and invstd per row when the
 * save arrays are non-NULL. gamma/beta [cols] NULL mean 1/0. */
int dl_cpu_layernorm_forward(dl_backend *be, int rows, int cols, float eps, float *y,
                             const float *x, const float *gamma, const float *beta,
                             float *save_mean, float *save_invstd)
{
    if (rows <= 0 || cols <= 0)
        return dl_error(DL_EINVAL, "layernorm_forward: bad shape [%d, %d]", rows, cols);
    ln_task t = {.rows = rows,
                 .cols = cols,
                 .eps = eps,
                 .y = y,
                 .x = x,
                 .gamma = gamma,
                 .beta = beta,
                 .save_mean = save_mean,
                 .save_invstd = save_invstd};
    dl_pool_for(dl_cpu(be)->pool, (size_t)rows, 1 + 16384 / (size_t)cols, ln_fwd_task, &t);
    return DL_OK;
}

#ifndef DL_CPU_VMATH
/* Builds without AVX2: dx rows [begin, end): g = gamma * dy, dx += invstd
 * (g - mean g - xhat mean(g xhat)). */
static void ln_bwd_rows(void *arg, size_t begin, size_t end)
{
    const ln_task *t = arg;
    int n = t->cols;
    for (size_t r = begin; r < end; r++) {
        const float *xr = t->x + r * n, *dyr = t->dy + r * n, *gm = t->gamma;
        float *dxr = t->dx + r * n;
        float mean = t->smean[r], invstd = t->sinvstd[r];
        double sg = 0.0, sgx = 0.0; /* sum of g = gamma*dy, sum g * xhat */
        for (int j = 0; j < n; j++) {
            double g = (double)dyr[j] * (gm ? gm[j] : 1.0f);
            sg += g;
            sgx += g * ((xr[j] - mean) * invstd);
        }
        float mg = (float)(sg / n), mgx = (float)(sgx / n);
        for (int j = 0; j < n; j++) {
            float g = dyr[j] * (gm ? gm[j] : 1.0f);
            dxr[j] += invstd * (g - mg - (xr[j] - mean) * invstd * mgx);
        }
    }
}

/* dgamma/dbeta columns [begin, end). */
static void ln_bwd_cols(void *arg, size_t begin, size_t end)
{
    const ln_task *t = arg;
    for (size_t j = begin; j < end; j++) {
        double sg = 0.0, sb = 0.0;
        for (int r = 0; r < t->rows; r++) {
            float dy = t->dy[(size_t)r * t->cols + j];
            sg += dy * ((t->x[(size_t)r * t->cols + j] - t->smean[r]) * t->sinvstd[r]);
            sb += dy;
        }
        if (t->dgamma)
            t->dgamma[j] += (float)sg;
        if (t->dbeta)
            t->dbeta[j] += (float)sb;
    }
}
#endif

/* LayerNorm backward with the saved per-row statistics: dx [rows, cols]
 * += d loss / dx, dgamma[j] += sum_r dy * xhat, dbeta[j] += sum_r dy. dx,
 * dgamma, dbeta may be NULL (skipped); gamma NULL means 1. */
int dl_cpu_layernorm_backward(dl_backend *be, int rows, int cols, float *dx, float *dgamma,
                              float *dbeta, const float *dy, const float *x, const float *gamma,
                              const float *save_mean, const float *save_invstd)
{
    if (rows <= 0 || cols <= 0)
        return dl_error(DL_EINVAL, "layernorm_backward: bad shape [%d, %d]", rows, cols);
    ln_task t = {.rows = rows,
                 .cols = cols,
                 .dx = dx,
                 .dgamma = dgamma,
                 .dbeta = dbeta,
                 .dy = dy,
                 .x = x,
                 .gamma = gamma,
                 .smean = save_mean,
                 .sinvstd = save_invstd};
#ifdef DL_CPU_VMATH
    if (!dx && !dgamma && !dbeta)
        return DL_OK;
    return ln_bwd_fused(be, &t);
#else
    if (dx)
        dl_pool_for(dl_cpu(be)->pool, (size_t)rows, 1 + 16384 / (size_t)cols, ln_bwd_rows, &t);
    if (dgamma || dbeta)
        dl_pool_for(dl_cpu(be)->pool, (size_t)cols, 1 + 16384 / (size_t)rows, ln_bwd_cols, &t);
    return DL_OK;
#endif
}
