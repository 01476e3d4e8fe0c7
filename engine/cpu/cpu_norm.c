/* cpu_norm.c - batch normalisation and layer normalisation on the CPU, forward and backward
 *
 * Statistics are summed in double (two passes: mean, then centred squares)
 * so large batches of similar values keep their variance. BatchNorm runs
 * channel-parallel, LayerNorm row-parallel (its dgamma/dbeta column-
 * parallel), both on the backend's pool.
 */
#include <math.h>
#include <string.h>

#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"
#include "engine/base/error.h"

typedef struct bn_task {
    int n, c, inner, training;
    int set; /* backward: dx written, not added */
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

/* y[j] = x[j] * scale + shift */
static void plane_affine(float *y, const float *x, int n, float scale, float shift)
{
#ifdef DL_CPU_VMATH
    __m256 a = _mm256_set1_ps(scale), b = _mm256_set1_ps(shift);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(y + j, _mm256_fmadd_ps(_mm256_loadu_ps(x + j), a, b));
    if (j < n)
        dl_v_store_tail(y + j, _mm256_fmadd_ps(dl_v_load_tail(x + j, n - j), a, b), n - j);
#else
    for (int j = 0; j < n; j++)
        y[j] = x[j] * scale + shift;
#endif
}

/* s[0] += sum dy, s[1] += sum dy * (x - mean) * invstd */
static void plane_dy_sums(const float *x, const float *dy, int n, float mean, float invstd,
                          double s[2])
{
#ifdef DL_CPU_VMATH
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 m = _mm256_set1_ps(mean), is = _mm256_set1_ps(invstd);
    __m256 b0 = a0, b1 = a0;
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 g = _mm256_loadu_ps(dy + j), h = _mm256_loadu_ps(dy + j + 8);
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), m), is);
        __m256 xk = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), m), is);
        a0 = _mm256_add_ps(a0, g);
        a1 = _mm256_fmadd_ps(g, xh, a1);
        b0 = _mm256_add_ps(b0, h);
        b1 = _mm256_fmadd_ps(h, xk, b1);
    }
    a0 = _mm256_add_ps(a0, b0);
    a1 = _mm256_add_ps(a1, b1);
    for (; j + 8 <= n; j += 8) {
        __m256 g = _mm256_loadu_ps(dy + j);
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), m), is);
        a0 = _mm256_add_ps(a0, g);
        a1 = _mm256_fmadd_ps(g, xh, a1);
    }
    if (j < n) {
        __m256 g = dl_v_load_tail(dy + j, n - j);
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(dl_v_load_tail(x + j, n - j), m), is);
        a0 = _mm256_add_ps(a0, g);
        a1 = _mm256_fmadd_ps(g, xh, a1); /* g is 0 past the tail */
    }
    s[0] += dl_v_hsum(a0);
    s[1] += dl_v_hsum(a1);
#else
    for (int j = 0; j < n; j++) {
        s[0] += dy[j];
        s[1] += dy[j] * ((x[j] - mean) * invstd);
    }
#endif
}

/* dx[j] += k * (dy[j] - mdy - (x[j] - mean) * invstd * mdyx) */
static void plane_dx(float *dx, const float *x, const float *dy, int n, float k, float mdy,
                     float mean, float invstd, float mdyx)
{
#ifdef DL_CPU_VMATH
    __m256 vk = _mm256_set1_ps(k), vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(invstd);
    __m256 vmdy = _mm256_set1_ps(mdy), vmdyx = _mm256_set1_ps(mdyx);
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm), vi);
        __m256 t = _mm256_fnmadd_ps(xh, vmdyx, _mm256_sub_ps(_mm256_loadu_ps(dy + j), vmdy));
        _mm256_storeu_ps(dx + j, _mm256_fmadd_ps(vk, t, _mm256_loadu_ps(dx + j)));
    }
    if (j < n) {
        int w = n - j;
        __m256 xh = _mm256_mul_ps(_mm256_sub_ps(dl_v_load_tail(x + j, w), vm), vi);
        __m256 t = _mm256_fnmadd_ps(xh, vmdyx, _mm256_sub_ps(dl_v_load_tail(dy + j, w), vmdy));
        dl_v_store_tail(dx + j, _mm256_fmadd_ps(vk, t, dl_v_load_tail(dx + j, w)), w);
    }
#else
    for (int j = 0; j < n; j++)
        dx[j] += k * (dy[j] - mdy - (x[j] - mean) * invstd * mdyx);
#endif
}

/* Channels [begin, end): x [n, c, inner], stats over n*inner values. */
static void bn_fwd_task(void *arg, size_t begin, size_t end)
{
    const bn_task *t = arg;
    size_t plane = (size_t)t->c * t->inner;
    double count = (double)t->n * t->inner;
    for (size_t ch = begin; ch < end; ch++) {
        float mean, invstd;
        if (t->training) {
            float shift0 = t->x[ch * t->inner];
            double m[2] = {0.0, 0.0};
            for (int i = 0; i < t->n; i++)
                plane_moments(t->x + i * plane + ch * t->inner, t->inner, shift0, m);
            double dmu = m[0] / count;
            double mu = shift0 + dmu, ss = m[1] - dmu * m[0];
            ss = ss > 0 ? ss : 0;
            double var = ss / count; /* biased: used to normalise */
            mean = (float)mu;
            invstd = (float)(1.0 / sqrt(var + t->eps));
            if (t->save_mean)
                t->save_mean[ch] = mean;
            if (t->save_invstd)
                t->save_invstd[ch] = invstd;
            if (t->running_mean)
                t->running_mean[ch] =
                    (1.0f - t->momentum) * t->running_mean[ch] + t->momentum * mean;
            if (t->running_var) {
                double unbiased = count > 1 ? ss / (count - 1) : var;
                t->running_var[ch] =
                    (1.0f - t->momentum) * t->running_var[ch] + t->momentum * (float)unbiased;
            }
        } else {
            mean = t->running_mean[ch];
            invstd = (float)(1.0 / sqrt((double)t->running_var[ch] + t->eps));
        }
        float g = t->gamma ? t->gamma[ch] : 1.0f, b = t->beta ? t->beta[ch] : 0.0f;
        float scale = g * invstd, shift = b - mean * scale;
        for (int i = 0; i < t->n; i++)
            plane_affine(t->y + i * plane + ch * t->inner, t->x + i * plane + ch * t->inner,
                         t->inner, scale, shift);
    }
}

/* y [n, c, inner] = gamma * (x - mean) * invstd + beta per channel c.
 * training: batch statistics (biased variance), saved to save_mean /
 * save_invstd, and running_mean/var updated as (1 - momentum) * old +
 * momentum * batch value with the unbiased variance (PyTorch). Eval: the
 * running statistics. gamma/beta NULL mean 1/0; save and running arrays
 * may be NULL in training (not written). Returns DL_EINVAL for bad sizes
 * or missing running statistics in eval. */
int dl_cpu_batchnorm_forward(dl_backend *be, int training, int n, int c, int inner, float momentum,
                             float eps, float *y, const float *x, const float *gamma,
                             const float *beta, float *running_mean, float *running_var,
                             float *save_mean, float *save_invstd)
{
    if (n <= 0 || c <= 0 || inner <= 0)
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
                 .save_invstd = save_invstd};
    size_t grain = 1 + 32768 / ((size_t)n * inner);
    dl_pool_for(dl_cpu(be)->pool, (size_t)c, grain, bn_fwd_task, &t);
    return DL_OK;
}

static void bn_bwd_task(void *arg, size_t begin, size_t end)
{
    const bn_task *t = arg;
    size_t plane = (size_t)t->c * t->inner;
    double count = (double)t->n * t->inner;
    for (size_t ch = begin; ch < end; ch++) {
        double mean = t->smean[ch], invstd = t->sinvstd[ch];
        double sums[2] = {0.0, 0.0}; /* sum dy, sum dy * xhat */
        for (int i = 0; i < t->n; i++)
            plane_dy_sums(t->x + i * plane + ch * t->inner, t->dy + i * plane + ch * t->inner,
                          t->inner, (float)mean, (float)invstd, sums);
        double sdy = sums[0], sdyx = sums[1];
        if (t->dgamma)
            t->dgamma[ch] += (float)sdyx;
        if (t->dbeta)
            t->dbeta[ch] += (float)sdy;
        if (!t->dx)
            continue;
        /* dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)) */
        double g = t->gamma ? t->gamma[ch] : 1.0;
        float k = (float)(g * invstd), mdy = (float)(sdy / count), mdyx = (float)(sdyx / count);
        float fm = (float)mean, fi = (float)invstd;
        for (int i = 0; i < t->n; i++) {
            size_t at = i * plane + ch * t->inner;
            if (t->set) /* zeroed in cache, then added into */
                memset(t->dx + at, 0, (size_t)t->inner * sizeof(float));
            plane_dx(t->dx + at, t->x + at, t->dy + at, t->inner, k, mdy, fm, fi, mdyx);
        }
    }
}

/* Training-mode BatchNorm backward over x [n, c, inner] with the saved
 * batch statistics: dx += d loss / dx (through the batch statistics),
 * dgamma[c] += sum dy * xhat, dbeta[c] += sum dy. dx, dgamma, dbeta may be
 * NULL (skipped); gamma NULL means 1. */
static int bn_backward(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                       float *dbeta, const float *dy, const float *x, const float *gamma,
                       const float *save_mean, const float *save_invstd, int set)
{
    if (n <= 0 || c <= 0 || inner <= 0)
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
                 .smean = save_mean,
                 .sinvstd = save_invstd,
                 .set = set};
    size_t grain = 1 + 32768 / ((size_t)n * inner);
    dl_pool_for(dl_cpu(be)->pool, (size_t)c, grain, bn_bwd_task, &t);
    return DL_OK;
}

int dl_cpu_batchnorm_backward(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                              float *dbeta, const float *dy, const float *x, const float *gamma,
                              const float *save_mean, const float *save_invstd)
{
    return bn_backward(be, n, c, inner, dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd, 0);
}

/* The same with dx written (the op table's batchnorm_backward_set). */
int dl_cpu_batchnorm_backward_set(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                                  float *dbeta, const float *dy, const float *x, const float *gamma,
                                  const float *save_mean, const float *save_invstd)
{
    return bn_backward(be, n, c, inner, dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd, 1);
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

static void ln_fwd_task(void *arg, size_t begin, size_t end)
{
    const ln_task *t = arg;
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

#ifdef DL_CPU_VMATH
/* The first w <= 8 floats of p (gamma NULL: ones). */
static inline __m256 load_w(const float *p, int w, float missing)
{
    return !p ? _mm256_set1_ps(missing) : w == 8 ? _mm256_loadu_ps(p) : dl_v_load_tail(p, w);
}
#endif

/* dx rows [begin, end): g = gamma * dy, dx += invstd (g - mean g - xhat
 * mean(g xhat)). */
static void ln_bwd_rows(void *arg, size_t begin, size_t end)
{
    const ln_task *t = arg;
    int n = t->cols;
    for (size_t r = begin; r < end; r++) {
        const float *xr = t->x + r * n, *dyr = t->dy + r * n, *gm = t->gamma;
        float *dxr = t->dx + r * n;
        float mean = t->smean[r], invstd = t->sinvstd[r];
        double sg = 0.0, sgx = 0.0; /* sum of g = gamma*dy, sum g * xhat */
        int j = 0;
#ifdef DL_CPU_VMATH
        __m256 vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(invstd);
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (; j < n; j += 8) {
            int w = n - j < 8 ? n - j : 8;
            __m256 g = _mm256_mul_ps(load_w(dyr + j, w, 0), load_w(gm ? gm + j : NULL, w, 1));
            __m256 xh = _mm256_mul_ps(_mm256_sub_ps(load_w(xr + j, w, 0), vm), vi);
            a0 = _mm256_add_ps(a0, g);
            a1 = _mm256_fmadd_ps(g, xh, a1); /* g is 0 past the row */
        }
        sg = dl_v_hsum(a0);
        sgx = dl_v_hsum(a1);
        float mg = (float)(sg / n), mgx = (float)(sgx / n);
        __m256 vmg = _mm256_set1_ps(mg), vmgx = _mm256_set1_ps(mgx);
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
#else
        for (; j < n; j++) {
            double g = (double)dyr[j] * (gm ? gm[j] : 1.0f);
            sg += g;
            sgx += g * ((xr[j] - mean) * invstd);
        }
        float mg = (float)(sg / n), mgx = (float)(sgx / n);
        for (j = 0; j < n; j++) {
            float g = dyr[j] * (gm ? gm[j] : 1.0f);
            dxr[j] += invstd * (g - mg - (xr[j] - mean) * invstd * mgx);
        }
#endif
    }
}

/* dgamma/dbeta columns [begin, end): each column's sums over the rows run
 * in the same order whatever lane it lands in, so the split does not
 * change them. Float lanes are flushed to double every 64 rows. */
static void ln_bwd_cols(void *arg, size_t begin, size_t end)
{
    const ln_task *t = arg;
    size_t j = begin;
#ifdef DL_CPU_VMATH
    for (; j < end; j += 8) {
        int w = end - j < 8 ? (int)(end - j) : 8;
        double sg[8] = {0}, sb[8] = {0};
        for (int r0 = 0; r0 < t->rows; r0 += 64) {
            __m256 ag = _mm256_setzero_ps(), ab = _mm256_setzero_ps();
            int r1 = r0 + 64 < t->rows ? r0 + 64 : t->rows;
            for (int r = r0; r < r1; r++) {
                size_t at = (size_t)r * t->cols + j;
                __m256 dy = load_w(t->dy + at, w, 0);
                __m256 xh = _mm256_mul_ps(
                    _mm256_sub_ps(load_w(t->x + at, w, 0), _mm256_set1_ps(t->smean[r])),
                    _mm256_set1_ps(t->sinvstd[r]));
                ag = _mm256_fmadd_ps(dy, xh, ag);
                ab = _mm256_add_ps(ab, dy);
            }
            float pg[8], pb[8];
            _mm256_storeu_ps(pg, ag);
            _mm256_storeu_ps(pb, ab);
            for (int k = 0; k < 8; k++) {
                sg[k] += pg[k];
                sb[k] += pb[k];
            }
        }
        for (int k = 0; k < w; k++) {
            if (t->dgamma)
                t->dgamma[j + k] += (float)sg[k];
            if (t->dbeta)
                t->dbeta[j + k] += (float)sb[k];
        }
    }
#endif
    for (; j < end; j++) {
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
    if (dx)
        dl_pool_for(dl_cpu(be)->pool, (size_t)rows, 1 + 16384 / (size_t)cols, ln_bwd_rows, &t);
    if (dgamma || dbeta)
        dl_pool_for(dl_cpu(be)->pool, (size_t)cols, 1 + 16384 / (size_t)rows, ln_bwd_cols, &t);
    return DL_OK;
}
