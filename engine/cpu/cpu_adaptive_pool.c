/* cpu_adaptive_pool.c - adaptive average pooling on the CPU (global average pooling when p = q = 1)
 *
 * Output (i, j) of a [h, w] plane averages rows [floor(i*h/p), ceil((i+1)*h/p))
 * and columns [floor(j*w/q), ceil((j+1)*w/q)), PyTorch's windows. The
 * planes (n*c of them) are independent: the pool splits them, and the
 * backward scatters each output's share into its own plane only.
 */
#include "engine/base/error.h"
#include "engine/cpu/cpu.h"

static inline int win_lo(int i, int in, int out) { return (int)((long)i * in / out); }
static inline int win_hi(int i, int in, int out)
{
    return (int)(((long)(i + 1) * in + out - 1) / out);
}

static int check(const dl_pool_desc *d, const char *op)
{
    if (d->n < 1 || d->c < 1 || d->h < 1 || d->w < 1 || d->p < 1 || d->q < 1)
        return dl_error(DL_EINVAL, "%s: bad descriptor n %d c %d %dx%d -> %dx%d", op, d->n, d->c,
                        d->h, d->w, d->p, d->q);
    return DL_OK;
}

typedef struct aptask {
    const dl_pool_desc *d;
    float *out;
    const float *in;
} aptask;

/* Sum of x[0..n) in double, four running sums (a single one made global
 * pooling latency-bound: one dependent add per element). */
static double run_sum(const float *x, size_t n)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += x[i];
        s1 += x[i + 1];
        s2 += x[i + 2];
        s3 += x[i + 3];
    }
    for (; i < n; i++)
        s0 += x[i];
    return (s0 + s1) + (s2 + s3);
}

static void fwd_planes(void *arg, size_t begin, size_t end)
{
    const aptask *t = arg;
    const dl_pool_desc *d = t->d;
    if (d->p == 1 && d->q == 1) { /* global pooling: the plane is one run */
        size_t hw = (size_t)d->h * d->w;
        for (size_t pl = begin; pl < end; pl++)
            t->out[pl] = (float)(run_sum(t->in + pl * hw, hw) / (double)hw);
        return;
    }
    for (size_t pl = begin; pl < end; pl++) {
        const float *x = t->in + pl * (size_t)d->h * d->w;
        float *y = t->out + pl * (size_t)d->p * d->q;
        for (int i = 0; i < d->p; i++)
            for (int j = 0; j < d->q; j++) {
                int h0 = win_lo(i, d->h, d->p), h1 = win_hi(i, d->h, d->p);
                int w0 = win_lo(j, d->w, d->q), w1 = win_hi(j, d->w, d->q);
                double s = 0;
                for (int r = h0; r < h1; r++)
                    for (int c = w0; c < w1; c++)
                        s += x[(size_t)r * d->w + c];
                y[i * d->q + j] = (float)(s / ((double)(h1 - h0) * (w1 - w0)));
            }
    }
}

static void bwd_planes(void *arg, size_t begin, size_t end)
{
    const aptask *t = arg;
    const dl_pool_desc *d = t->d;
    if (d->p == 1 && d->q == 1) {
        size_t hw = (size_t)d->h * d->w;
        for (size_t pl = begin; pl < end; pl++) {
            float g = t->in[pl] / (float)hw, *dx = t->out + pl * hw;
            for (size_t k = 0; k < hw; k++)
                dx[k] += g;
        }
        return;
    }
    for (size_t pl = begin; pl < end; pl++) {
        float *dx = t->out + pl * (size_t)d->h * d->w;
        const float *dy = t->in + pl * (size_t)d->p * d->q;
        for (int i = 0; i < d->p; i++)
            for (int j = 0; j < d->q; j++) {
                int h0 = win_lo(i, d->h, d->p), h1 = win_hi(i, d->h, d->p);
                int w0 = win_lo(j, d->w, d->q), w1 = win_hi(j, d->w, d->q);
                float g = dy[i * d->q + j] / (float)((h1 - h0) * (w1 - w0));
                for (int r = h0; r < h1; r++)
                    for (int c = w0; c < w1; c++)
                        dx[(size_t)r * d->w + c] += g;
            }
    }
}

/* Global pooling of x in channel blocks (d->blk): plane pl is image pl /
 * nb's block pl % nb, h*w rows of blk channels; each lane's sum in
 * double, in row order. y and dy are [n, c] either way. */
static void fwd_blocked(void *arg, size_t begin, size_t end)
{
    const aptask *t = arg;
    const dl_pool_desc *d = t->d;
    size_t hw = (size_t)d->h * d->w, blk = (size_t)d->blk;
    for (size_t pl = begin; pl < end; pl++) {
        const float *x = t->in + pl * hw * blk;
        double s[64] = {0}; /* blk <= 64 (check) */
        for (size_t i = 0; i < hw; i++)
            for (size_t l = 0; l < blk; l++)
                s[l] += x[i * blk + l];
        for (size_t l = 0; l < blk; l++)
            t->out[pl * blk + l] = (float)(s[l] / (double)hw);
    }
}

static void bwd_blocked(void *arg, size_t begin, size_t end)
{
    const aptask *t = arg;
    const dl_pool_desc *d = t->d;
    size_t hw = (size_t)d->h * d->w, blk = (size_t)d->blk;
    for (size_t pl = begin; pl < end; pl++) {
        float g[64], *dx = t->out + pl * hw * blk;
        for (size_t l = 0; l < blk; l++)
            g[l] = t->in[pl * blk + l] / (float)hw;
        for (size_t i = 0; i < hw; i++)
            for (size_t l = 0; l < blk; l++)
                dx[i * blk + l] += g[l];
    }
}

/* The blocked layout's checks and task: planes of one image's blk channels. */
static int blocked_run(dl_backend *be, const dl_pool_desc *d, void (*fn)(void *, size_t, size_t),
                       aptask *t, const char *op)
{
    if (d->p != 1 || d->q != 1 || d->blk % 8 || d->blk > 64 || d->c % d->blk)
        return dl_error(DL_EINVAL,
                        "%s: channel blocks of %d need a 1x1 output and %d channels "
                        "a multiple of the block",
                        op, d->blk, d->c);
    size_t planes = (size_t)d->n * (d->c / d->blk);
    dl_pool_for(dl_cpu(be)->pool, planes, dl_cpu_plane_grain((size_t)d->h * d->w * d->blk), fn, t);
    return DL_OK;
}

/* y [n, c, p, q] = adaptive average pooling of x [n, c, h, w]. */
int dl_cpu_adaptive_avgpool_forward(dl_backend *be, const dl_pool_desc *d, float *y, const float *x)
{
    DL_TRY(check(d, "adaptive_avgpool_forward"));
    aptask t = {d, y, x};
    if (d->blk)
        return blocked_run(be, d, fwd_blocked, &t, "adaptive_avgpool_forward");
    dl_pool_for(dl_cpu(be)->pool, (size_t)d->n * d->c, dl_cpu_plane_grain((size_t)d->h * d->w),
                fwd_planes, &t);
    return DL_OK;
}

/* dx [n, c, h, w] += each window's dy / window area. */
int dl_cpu_adaptive_avgpool_backward(dl_backend *be, const dl_pool_desc *d, float *dx,
                                     const float *dy)
{
    DL_TRY(check(d, "adaptive_avgpool_backward"));
    aptask t = {d, dx, dy};
    if (d->blk)
        return blocked_run(be, d, bwd_blocked, &t, "adaptive_avgpool_backward");
    dl_pool_for(dl_cpu(be)->pool, (size_t)d->n * d->c, dl_cpu_plane_grain((size_t)d->h * d->w),
                bwd_planes, &t);
    return DL_OK;
}
