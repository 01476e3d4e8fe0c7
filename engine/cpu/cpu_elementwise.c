/* cpu_elementwise.c - CPU casts, activations, dropout, embedding, losses and fused optimizer updates */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "cpu.h"
#include "engine/error.h"
#include "engine/half.h"
#include "engine/rng.h"

/* Elements per task below which a loop is not worth splitting. */
#define GRAIN 16384

typedef struct {
    float *y;
    const float *a, *b;
    const void *src;
    void *dst;
    float s0, s1, s2;
    int i0, i1;
    uint64_t u0, u1, u2;
    dl_dtype t0, t1;
} job;

static void par(dl_backend *be, size_t n, dl_pool_fn fn, job *j)
{
    dl_pool_for(dl_cpu(be)->pool, n, GRAIN, fn, j);
}

/* --- casts ---------------------------------------------------------------- */

static void cast_range(void *p, size_t b, size_t e)
{
    job *j = p;
    if (j->t0 == j->t1) {
        size_t sz = dl_dtype_size(j->t0);
        memcpy((char *)j->dst + b * sz, (const char *)j->src + b * sz, (e - b) * sz);
        return;
    }
    if (j->t1 == DL_F32) {
        const float *s = j->src;
        uint16_t *d = j->dst;
        if (j->t0 == DL_BF16)
            for (size_t i = b; i < e; i++)
                d[i] = dl_f32_to_bf16(s[i]);
        else
            for (size_t i = b; i < e; i++)
                d[i] = dl_f32_to_f16(s[i]);
    } else {
        const uint16_t *s = j->src;
        float *d = j->dst;
        if (j->t1 == DL_BF16)
            for (size_t i = b; i < e; i++)
                d[i] = dl_bf16_to_f32(s[i]);
        else
            for (size_t i = b; i < e; i++)
                d[i] = dl_f16_to_f32(s[i]);
    }
}

int dl_cpu_cast(dl_backend *be, void *dst, dl_dtype dt, const void *src, dl_dtype st, size_t n)
{
    int ok_pair = dt == st || (st == DL_F32 && (dt == DL_BF16 || dt == DL_F16)) ||
                  (dt == DL_F32 && (st == DL_BF16 || st == DL_F16));
    if (!ok_pair)
        return dl_error(DL_EUNSUPPORTED, "cast from %s to %s is not supported",
                        dl_dtype_name(st), dl_dtype_name(dt));
    job j = {.dst = dst, .src = src, .t0 = dt, .t1 = st};
    par(be, n, cast_range, &j);
    return DL_OK;
}

static void round_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float *x = j->y;
    if (j->t0 == DL_BF16)
        for (size_t i = b; i < e; i++)
            x[i] = dl_bf16_to_f32(dl_f32_to_bf16(x[i]));
    else
        for (size_t i = b; i < e; i++)
            x[i] = dl_f16_to_f32(dl_f32_to_f16(x[i]));
}

int dl_cpu_round_through(dl_backend *be, float *x, dl_dtype via, size_t n)
{
    if (via == DL_F32)
        return DL_OK;
    if (via != DL_BF16 && via != DL_F16)
        return dl_error(DL_EUNSUPPORTED, "cannot round through %s", dl_dtype_name(via));
    job j = {.y = x, .t0 = via};
    par(be, n, round_range, &j);
    return DL_OK;
}

typedef struct {
    float *dst;
    const void *src;
    dl_dtype type;
    int channels;
    size_t plane;
    float scale;
    const float *mean, *std;
} input_job;

static void input_range(void *p, size_t b, size_t e)
{
    input_job *j = p;
    size_t per_row = (size_t)j->channels * j->plane;
    for (size_t i = b; i < e; i++) {
        float v;
        switch (j->type) {
        case DL_U8: v = (float)((const uint8_t *)j->src)[i]; break;
        case DL_I32: v = (float)((const int32_t *)j->src)[i]; break;
        default: v = ((const float *)j->src)[i]; break;
        }
        v *= j->scale;
        if (j->mean) {
            size_t ch = (i % per_row) / j->plane;
            v = (v - j->mean[ch]) / j->std[ch];
        }
        j->dst[i] = v;
    }
}

int dl_cpu_input_to_f32(dl_backend *be, float *dst, const void *src, dl_dtype type, size_t rows,
                        int channels, size_t plane, float scale, const float *mean,
                        const float *std)
{
    if (type != DL_U8 && type != DL_I32 && type != DL_F32)
        return dl_error(DL_EUNSUPPORTED, "input dtype %s is not supported (u8, i32, f32)",
                        dl_dtype_name(type));
    input_job j = {dst, src, type, channels < 1 ? 1 : channels, plane, scale, mean, std};
    if (channels < 1)
        j.mean = j.std = NULL;
    dl_pool_for(dl_cpu(be)->pool, rows * (size_t)j.channels * plane, GRAIN, input_range, &j);
    return DL_OK;
}

/* --- bias ------------------------------------------------------------------ */

int dl_cpu_bias_add(dl_backend *be, float *y, const float *b, int rows, int cols, int inner)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float *row = y + ((size_t)r * cols + c) * inner;
            float bc = b[c];
            for (int i = 0; i < inner; i++)
                row[i] += bc;
        }
    return DL_OK;
}

int dl_cpu_bias_grad(dl_backend *be, float *db, const float *dy, int rows, int cols, int inner)
{
    if (inner == 1) {
        /* column sums of dy [rows, cols]: row by row keeps the access linear */
        for (int r = 0; r < rows; r++) {
            const float *row = dy + (size_t)r * cols;
            for (int c = 0; c < cols; c++)
                db[c] += row[c];
        }
        return DL_OK;
    }
    for (int c = 0; c < cols; c++) {
        double s = 0;
        for (int r = 0; r < rows; r++) {
            const float *p = dy + ((size_t)r * cols + c) * inner;
            float part = 0;
            for (int i = 0; i < inner; i++)
                part += p[i];
            s += part;
        }
        db[c] += (float)s;
    }
    return DL_OK;
}

/* --- activations -------------------------------------------------------- */

static void act_fwd_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float *y = j->y;
    const float *x = j->a;
    switch ((dl_act)j->i0) {
    case DL_ACT_RELU:
        for (size_t i = b; i < e; i++)
            y[i] = x[i] > 0 ? x[i] : 0;
        break;
    case DL_ACT_GELU:
        for (size_t i = b; i < e; i++)
            y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118f));
        break;
    case DL_ACT_TANH:
        for (size_t i = b; i < e; i++)
            y[i] = tanhf(x[i]);
        break;
    case DL_ACT_SIGMOID:
        for (size_t i = b; i < e; i++)
            y[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    }
}

int dl_cpu_act_forward(dl_backend *be, dl_act kind, float *y, const float *x, size_t n)
{
    job j = {.y = y, .a = x, .i0 = (int)kind};
    par(be, n, act_fwd_range, &j);
    return DL_OK;
}

typedef struct {
    float *dx;
    const float *x, *y, *dy;
    dl_act kind;
} act_bwd_job;

static void act_bwd_range(void *p, size_t b, size_t e)
{
    act_bwd_job *j = p;
    float *dx = j->dx;
    const float *x = j->x, *y = j->y, *dy = j->dy;
    switch (j->kind) {
    case DL_ACT_RELU:
        for (size_t i = b; i < e; i++)
            dx[i] += x[i] > 0 ? dy[i] : 0;
        break;
    case DL_ACT_GELU:
        for (size_t i = b; i < e; i++) {
            float cdf = 0.5f * (1.0f + erff(x[i] * 0.70710678118f));
            float pdf = 0.39894228040f * expf(-0.5f * x[i] * x[i]);
            dx[i] += dy[i] * (cdf + x[i] * pdf);
        }
        break;
    case DL_ACT_TANH:
        for (size_t i = b; i < e; i++)
            dx[i] += dy[i] * (1.0f - y[i] * y[i]);
        break;
    case DL_ACT_SIGMOID:
        for (size_t i = b; i < e; i++)
            dx[i] += dy[i] * y[i] * (1.0f - y[i]);
        break;
    }
}

int dl_cpu_act_backward(dl_backend *be, dl_act kind, float *dx, const float *x, const float *y,
                        const float *dy, size_t n)
{
    act_bwd_job j = {dx, x, y, dy, kind};
    dl_pool_for(dl_cpu(be)->pool, n, GRAIN, act_bwd_range, &j);
    return DL_OK;
}

/* --- arithmetic ---------------------------------------------------------- */

static void add_range(void *p, size_t b, size_t e)
{
    job *j = p;
    for (size_t i = b; i < e; i++)
        j->y[i] = j->a[i] + j->b[i];
}

int dl_cpu_add(dl_backend *be, float *y, const float *a, const float *b, size_t n)
{
    job j = {.y = y, .a = a, .b = b};
    par(be, n, add_range, &j);
    return DL_OK;
}

static void axpy_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float alpha = j->s0;
    for (size_t i = b; i < e; i++)
        j->y[i] += alpha * j->a[i];
}

int dl_cpu_axpy(dl_backend *be, float *y, float alpha, const float *x, size_t n)
{
    job j = {.y = y, .a = x, .s0 = alpha};
    par(be, n, axpy_range, &j);
    return DL_OK;
}

static void scale_range(void *p, size_t b, size_t e)
{
    job *j = p;
    for (size_t i = b; i < e; i++)
        j->y[i] *= j->s0;
}

int dl_cpu_scale(dl_backend *be, float *x, float alpha, size_t n)
{
    job j = {.y = x, .s0 = alpha};
    par(be, n, scale_range, &j);
    return DL_OK;
}

static void fill_range(void *p, size_t b, size_t e)
{
    job *j = p;
    for (size_t i = b; i < e; i++)
        j->y[i] = j->s0;
}

int dl_cpu_fill(dl_backend *be, float *dst, float value, size_t n)
{
    job j = {.y = dst, .s0 = value};
    par(be, n, fill_range, &j);
    return DL_OK;
}

/* --- dropout -------------------------------------------------------------- */

/* Blocks of four elements share one Philox call (dl_rng_uniform's layout). */
static void dropout_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float keep_scale = 1.0f / (1.0f - j->s0);
    int backward = j->i0;
    for (size_t i = b; i < e; i++) {
        float u = dl_rng_uniform(j->u0, j->u1, j->u2, i);
        float m = u >= j->s0 ? keep_scale : 0.0f;
        if (backward)
            j->y[i] += m * j->a[i];
        else
            j->y[i] = m * j->a[i];
    }
}

static int dropout(dl_backend *be, int backward, float *y, const float *x, size_t n, float p,
                   uint64_t seed, uint64_t stream, uint64_t counter)
{
    if (!(p >= 0 && p < 1))
        return dl_error(DL_EINVAL, "dropout probability %g is outside [0, 1)", (double)p);
    job j = {.y = y, .a = x, .s0 = p, .i0 = backward, .u0 = seed, .u1 = stream, .u2 = counter};
    par(be, n, dropout_range, &j);
    return DL_OK;
}

int dl_cpu_dropout_forward(dl_backend *be, float *y, const float *x, size_t n, float p,
                           uint64_t seed, uint64_t stream, uint64_t counter)
{
    return dropout(be, 0, y, x, n, p, seed, stream, counter);
}

int dl_cpu_dropout_backward(dl_backend *be, float *dx, const float *dy, size_t n, float p,
                            uint64_t seed, uint64_t stream, uint64_t counter)
{
    return dropout(be, 1, dx, dy, n, p, seed, stream, counter);
}

/* --- embedding -------------------------------------------------------------- */

static int check_index(float v, int vocab, int *out)
{
    if (!(v >= 0 && v < (float)vocab) || v != floorf(v))
        return dl_error(DL_EINVAL, "embedding index %g is not an integer in [0, %d)",
                        (double)v, vocab);
    *out = (int)v;
    return DL_OK;
}

int dl_cpu_embedding_forward(dl_backend *be, int n, int vocab, int dim, float *y,
                             const float *idx, const float *table)
{
    for (int i = 0; i < n; i++) {
        int k = 0;
        DL_TRY(check_index(idx[i], vocab, &k));
        memcpy(y + (size_t)i * dim, table + (size_t)k * dim, (size_t)dim * sizeof *y);
    }
    return DL_OK;
}

int dl_cpu_embedding_backward(dl_backend *be, int n, int vocab, int dim, float *dtable,
                              const float *idx, const float *dy)
{
    for (int i = 0; i < n; i++) {
        int k = 0;
        DL_TRY(check_index(idx[i], vocab, &k));
        float *row = dtable + (size_t)k * dim;
        const float *g = dy + (size_t)i * dim;
        for (int d = 0; d < dim; d++)
            row[d] += g[d];
    }
    return DL_OK;
}

/* --- losses --------------------------------------------------------------- */

int dl_cpu_softmax_xent(dl_backend *be, int rows, int classes, const float *logits,
                        const int32_t *labels, float smoothing, float grad_scale,
                        float *dlogits, float *stats)
{
    double loss = 0;
    int correct = 0;
    float off = smoothing / (float)classes;
    for (int r = 0; r < rows; r++) {
        const float *z = logits + (size_t)r * classes;
        int y = labels[r];
        if (y < 0 || y >= classes)
            return dl_error(DL_EINVAL, "label %d of row %d is outside [0, %d)", y, r, classes);
        float mx = z[0];
        int arg = 0;
        for (int c = 1; c < classes; c++)
            if (z[c] > mx) {
                mx = z[c];
                arg = c;
            }
        double sum = 0, zsum = 0;
        for (int c = 0; c < classes; c++) {
            sum += exp((double)(z[c] - mx));
            zsum += z[c] - mx;
        }
        double lse = log(sum); /* log-sum-exp minus mx */
        /* -log p_y = lse - (z_y - mx); the smoothed part averages -log p_c */
        double nll = lse - (z[y] - mx);
        double mean_nll = lse - zsum / classes;
        loss += (1.0 - smoothing) * nll + smoothing * mean_nll;
        correct += arg == y;
        if (dlogits) {
            float *d = dlogits + (size_t)r * classes;
            float inv = (float)(1.0 / sum);
            for (int c = 0; c < classes; c++) {
                float pc = expf(z[c] - mx) * inv;
                float target = off + (c == y ? 1.0f - smoothing : 0.0f);
                d[c] += grad_scale * (pc - target);
            }
        }
    }
    stats[0] += (float)loss;
    stats[1] += (float)correct;
    return DL_OK;
}

int dl_cpu_mse(dl_backend *be, size_t n, const float *pred, const float *target, float grad_scale,
               float *dpred, float *stats)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        float d = pred[i] - target[i];
        s += (double)d * d;
        if (dpred)
            dpred[i] += grad_scale * 2.0f * d;
    }
    stats[0] += (float)s;
    return DL_OK;
}

int dl_cpu_bce_logits(dl_backend *be, size_t n, const float *logits, const float *target,
                      float grad_scale, float *dlogits, float *stats)
{
    double s = 0;
    int correct = 0;
    for (size_t i = 0; i < n; i++) {
        float z = logits[i], t = target[i];
        /* log(1 + e^-|z|) + max(z, 0) - z t: stable for any z */
        s += (double)fmaxf(z, 0) - (double)z * t + log1p(exp(-fabs((double)z)));
        correct += (z > 0) == (t > 0.5f);
        if (dlogits)
            dlogits[i] += grad_scale * (1.0f / (1.0f + expf(-z)) - t);
    }
    stats[0] += (float)s;
    stats[1] += (float)correct;
    return DL_OK;
}

/* --- optimizers -------------------------------------------------------------- */

typedef struct {
    float *w, *g, *m, *v;
    float lr, momentum, wd, grad_scale, beta1, beta2, eps, bc1, bc2;
    int nesterov, decoupled;
} opt_job;

static void sgd_range(void *p, size_t b, size_t e)
{
    opt_job *j = p;
    float *w = j->w, *g = j->g, *m = j->m;
    const float lr = j->lr, mu = j->momentum, wd = j->wd, gs = j->grad_scale;
    if (mu == 0) {
        for (size_t i = b; i < e; i++) {
            float d = g[i] * gs + wd * w[i];
            w[i] -= lr * d;
            g[i] = 0;
        }
    } else if (j->nesterov) {
        for (size_t i = b; i < e; i++) {
            float d = g[i] * gs + wd * w[i];
            float mi = mu * m[i] + d;
            m[i] = mi;
            w[i] -= lr * (d + mu * mi);
            g[i] = 0;
        }
    } else {
        for (size_t i = b; i < e; i++) {
            float d = g[i] * gs + wd * w[i];
            float mi = mu * m[i] + d;
            m[i] = mi;
            w[i] -= lr * mi;
            g[i] = 0;
        }
    }
}

int dl_cpu_sgd_update(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                      float momentum, float wd, int nesterov, float grad_scale)
{
    opt_job j = {.w = w, .g = g, .m = m, .lr = lr, .momentum = momentum, .wd = wd,
                 .grad_scale = grad_scale, .nesterov = nesterov};
    dl_pool_for(dl_cpu(be)->pool, n, GRAIN * 4, sgd_range, &j);
    return DL_OK;
}

static void adam_range(void *p, size_t b, size_t e)
{
    opt_job *j = p;
    float *w = j->w, *g = j->g, *m = j->m, *v = j->v;
    const float lr = j->lr, b1 = j->beta1, b2 = j->beta2, eps = j->eps, wd = j->wd;
    const float gs = j->grad_scale, bc1 = j->bc1, bc2 = j->bc2;
    const float cw = j->decoupled ? 0.0f : wd;          /* L2 into the gradient */
    const float shrink = j->decoupled ? 1.0f - lr * wd : 1.0f; /* AdamW decay */
    for (size_t i = b; i < e; i++) {
        float gi = g[i] * gs + cw * w[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float den = sqrtf(vi * bc2) + eps; /* sqrt(v_hat) + eps */
        w[i] = w[i] * shrink - lr * (mi * bc1) / den;
        g[i] = 0;
    }
}

int dl_cpu_adam_update(dl_backend *be, size_t n, float *w, float *g, float *m, float *v, float lr,
                       float beta1, float beta2, float eps, float wd, int decoupled, long step,
                       float grad_scale)
{
    if (step < 1)
        return dl_error(DL_EINVAL, "adam step %ld must count from 1", step);
    opt_job j = {.w = w, .g = g, .m = m, .v = v, .lr = lr, .beta1 = beta1, .beta2 = beta2,
                 .eps = eps, .wd = wd, .grad_scale = grad_scale, .decoupled = decoupled};
    j.bc1 = (float)(1.0 / (1.0 - pow(beta1, (double)step)));
    j.bc2 = (float)(1.0 / (1.0 - pow(beta2, (double)step)));
    dl_pool_for(dl_cpu(be)->pool, n, GRAIN * 4, adam_range, &j);
    return DL_OK;
}

typedef struct {
    const float *x;
    double total;
    pthread_mutex_t lock;
} sumsq_job;

static void sumsq_range(void *p, size_t b, size_t e)
{
    sumsq_job *j = p;
    /* eight float lanes, folded into double every block: vectorises while
     * keeping the rounding error of a 10M-element sum small */
    double total = 0;
    for (size_t i = b; i < e;) {
        size_t stop = i + 4096 < e ? i + 4096 : e;
        float lane[8] = {0};
        for (; i + 8 <= stop; i += 8)
            for (int k = 0; k < 8; k++)
                lane[k] += j->x[i + k] * j->x[i + k];
        for (; i < stop; i++)
            lane[0] += j->x[i] * j->x[i];
        for (int k = 0; k < 8; k++)
            total += lane[k];
    }
    pthread_mutex_lock(&j->lock);
    j->total += total;
    pthread_mutex_unlock(&j->lock);
}

int dl_cpu_sumsq(dl_backend *be, const float *x, size_t n, double *host_result)
{
    sumsq_job j = {.x = x, .total = 0};
    pthread_mutex_init(&j.lock, NULL);
    dl_pool_for(dl_cpu(be)->pool, n, GRAIN * 4, sumsq_range, &j);
    pthread_mutex_destroy(&j.lock);
    *host_result = j.total;
    return DL_OK;
}
