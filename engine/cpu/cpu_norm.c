/* cpu_norm.c - batch normalisation and layer normalisation on the CPU, forward and backward
 *
 * Statistics are summed in double (two passes: mean, then centred squares)
 * so large batches of similar values keep their variance. BatchNorm runs
 * channel-parallel, LayerNorm row-parallel (its dgamma/dbeta column-
 * parallel), both on the backend's pool.
 */
#include <math.h>

#include "engine/cpu/cpu.h"
#include "engine/base/error.h"

typedef struct bn_task {
    int n, c, inner, training;
    float momentum, eps;
    float *y, *dx, *dgamma, *dbeta;
    const float *x, *dy, *gamma, *beta;
    float *running_mean, *running_var;
    float *save_mean, *save_invstd;
    const float *smean, *sinvstd;
} bn_task;

/* Channels [begin, end): x [n, c, inner], stats over n*inner values. */
static void bn_fwd_task(void *arg, size_t begin, size_t end)
{
    const bn_task *t = arg;
    size_t plane = (size_t)t->c * t->inner;
    double count = (double)t->n * t->inner;
    for (size_t ch = begin; ch < end; ch++) {
        float mean, invstd;
        if (t->training) {
            double s = 0.0;
            for (int i = 0; i < t->n; i++) {
                const float *xp = t->x + i * plane + ch * t->inner;
                for (int j = 0; j < t->inner; j++)
                    s += xp[j];
            }
            double mu = s / count, ss = 0.0;
            for (int i = 0; i < t->n; i++) {
                const float *xp = t->x + i * plane + ch * t->inner;
                for (int j = 0; j < t->inner; j++)
                    ss += (xp[j] - mu) * (xp[j] - mu);
            }
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
        for (int i = 0; i < t->n; i++) {
            const float *xp = t->x + i * plane + ch * t->inner;
            float *yp = t->y + i * plane + ch * t->inner;
            for (int j = 0; j < t->inner; j++)
                yp[j] = xp[j] * scale + shift;
        }
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
        double sdy = 0.0, sdyx = 0.0; /* sum dy, sum dy * xhat */
        for (int i = 0; i < t->n; i++) {
            const float *xp = t->x + i * plane + ch * t->inner;
            const float *dyp = t->dy + i * plane + ch * t->inner;
            for (int j = 0; j < t->inner; j++) {
                sdy += dyp[j];
                sdyx += dyp[j] * ((xp[j] - mean) * invstd);
            }
        }
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
            const float *xp = t->x + i * plane + ch * t->inner;
            const float *dyp = t->dy + i * plane + ch * t->inner;
            float *dxp = t->dx + i * plane + ch * t->inner;
            for (int j = 0; j < t->inner; j++)
                dxp[j] += k * (dyp[j] - mdy - (xp[j] - fm) * fi * mdyx);
        }
    }
}

/* Training-mode BatchNorm backward over x [n, c, inner] with the saved
 * batch statistics: dx += d loss / dx (through the batch statistics),
 * dgamma[c] += sum dy * xhat, dbeta[c] += sum dy. dx, dgamma, dbeta may be
 * NULL (skipped); gamma NULL means 1. */
int dl_cpu_batchnorm_backward(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                              float *dbeta, const float *dy, const float *x, const float *gamma,
                              const float *save_mean, const float *save_invstd)
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
                 .sinvstd = save_invstd};
    size_t grain = 1 + 32768 / ((size_t)n * inner);
    dl_pool_for(dl_cpu(be)->pool, (size_t)c, grain, bn_bwd_task, &t);
    return DL_OK;
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

static void ln_fwd_task(void *arg, size_t begin, size_t end)
{
    const ln_task *t = arg;
    for (size_t r = begin; r < end; r++) {
        const float *xr = t->x + r * t->cols;
        float *yr = t->y + r * t->cols;
        double s = 0.0, ss = 0.0;
        for (int j = 0; j < t->cols; j++)
            s += xr[j];
        double mu = s / t->cols;
        for (int j = 0; j < t->cols; j++)
            ss += (xr[j] - mu) * (xr[j] - mu);
        float mean = (float)mu, invstd = (float)(1.0 / sqrt(ss / t->cols + t->eps));
        if (t->save_mean)
            t->save_mean[r] = mean;
        if (t->save_invstd)
            t->save_invstd[r] = invstd;
        for (int j = 0; j < t->cols; j++) {
            float v = (xr[j] - mean) * invstd;
            yr[j] = (t->gamma ? t->gamma[j] : 1.0f) * v + (t->beta ? t->beta[j] : 0.0f);
        }
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

/* dx rows [begin, end). */
static void ln_bwd_rows(void *arg, size_t begin, size_t end)
{
    const ln_task *t = arg;
    for (size_t r = begin; r < end; r++) {
        const float *xr = t->x + r * t->cols, *dyr = t->dy + r * t->cols;
        float *dxr = t->dx + r * t->cols;
        float mean = t->smean[r], invstd = t->sinvstd[r];
        double sg = 0.0, sgx = 0.0; /* sum of g = gamma*dy, sum g * xhat */
        for (int j = 0; j < t->cols; j++) {
            double g = (double)dyr[j] * (t->gamma ? t->gamma[j] : 1.0f);
            sg += g;
            sgx += g * ((xr[j] - mean) * invstd);
        }
        float mg = (float)(sg / t->cols), mgx = (float)(sgx / t->cols);
        for (int j = 0; j < t->cols; j++) {
            float g = dyr[j] * (t->gamma ? t->gamma[j] : 1.0f);
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
