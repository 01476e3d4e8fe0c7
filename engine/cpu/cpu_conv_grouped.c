/* cpu_conv_grouped.c - grouped, depthwise and dilated convolution on the CPU (per-group im2col + GEMM)
 *
 * cpu_conv.c hands every descriptor with groups > 1 or dilation > 1 here
 * that oneDNN does not take (its kernels run them from 8 input channels,
 * f32 and bf16; cpu_conv.c's grouped_dnnl); depthwise ones (groups =
 * input channels) go on to cpu_conv_depthwise.c where it takes them.
 * With cg = c/groups input and kg = k/groups output channels per group, one
 * (image i, group g) pair is one small product:
 *   col [cg*r*s, pq]      unfold of x[i, g*cg .. (g+1)*cg) (dilated taps)
 *   forward          y[i, g*kg ..] [kg, pq]  = w_g [kg, cg*r*s] . col
 *   backward data    dcol [cg*r*s, pq]        = w_g^T . dy[i, g*kg ..], folded into dx
 *   backward filter  dw_g [kg, cg*r*s]       += dy[i, g*kg ..] . col^T
 * The (image, group) pairs are cut into at most PARTS fixed parts, each
 * with its own col and dy slices of the workspace, run on the thread pool;
 * the filter gradient is cut by groups instead (each part owns its dw_g
 * rows, so no reduction). Depthwise (cg = kg = 1) is the same code with
 * products of one row. For bf16/f16 compute the operands are rounded
 * through that type into the f32 buffers and the products run in f32: a
 * product of two rounded values is exact in f32, so this equals a
 * low-precision product accumulated in f32, as the dense path computes.
 */
#include <cblas.h>
#include <stdint.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/half.h"
#include "engine/cpu/cpu.h"

/* Parts the work is cut into (fixed: results never depend on threads). */
#define PARTS 16

/* The shape of one group's product. */
typedef struct gshape {
    int g, cg, kg, rs, pq, dil;
    size_t col, t; /* floats of one part's col and dy slices */
} gshape;

static gshape shape_of(const dl_conv_desc *d)
{
    gshape s;
    s.g = dl_conv_groups(d);
    s.cg = d->c / s.g;
    s.kg = d->k / s.g;
    s.rs = d->r * d->s;
    s.pq = d->p * d->q;
    s.dil = dl_conv_dilation(d);
    s.col = (size_t)s.cg * s.rs * s.pq;
    s.t = (size_t)s.kg * s.pq;
    return s;
}

int dl_cpu_conv_grouped_check(const dl_conv_desc *d, dl_dtype compute, const char *op)
{
    int g = dl_conv_groups(d), dil = dl_conv_dilation(d);
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->k <= 0 || d->r <= 0 || d->s <= 0 ||
        d->stride <= 0 || d->pad < 0 || d->groups < 0 || d->dilation < 0)
        return dl_error(DL_EINVAL,
                        "%s: bad descriptor n %d c %d h %d w %d k %d r %d s %d stride %d pad %d "
                        "groups %d dilation %d",
                        op, d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride, d->pad, d->groups,
                        d->dilation);
    if (d->c % g || d->k % g)
        return dl_error(DL_EINVAL,
                        "%s: %d input and %d output channels are not divisible by %d groups", op,
                        d->c, d->k, g);
    int er = dil * (d->r - 1) + 1, es = dil * (d->s - 1) + 1; /* dilated extent */
    if (d->p != (d->h + 2 * d->pad - er) / d->stride + 1 ||
        d->q != (d->w + 2 * d->pad - es) / d->stride + 1 || d->p <= 0 || d->q <= 0)
        return dl_error(DL_ESHAPE,
                        "%s: output %dx%d does not match input %dx%d, kernel %dx%d, stride %d, "
                        "pad %d, dilation %d",
                        op, d->p, d->q, d->h, d->w, d->r, d->s, d->stride, d->pad, dil);
    if (compute != DL_F32 && compute != DL_BF16 && compute != DL_F16)
        return dl_error(DL_EINVAL, "%s: compute dtype %s not supported", op,
                        dl_dtype_name(compute));
    return DL_OK;
}

/* Workspace: the rounded weights (low precision only), then PARTS pairs
 * of col and dy slices, each 64-byte aligned. */
static size_t round64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

size_t dl_cpu_conv_grouped_workspace(const dl_conv_desc *d, dl_dtype compute)
{
    if (dl_cpu_conv_grouped_check(d, compute, "conv_workspace") < 0)
        return 0;
    if (dl_cpu_conv_dw_fits(d, compute))
        return dl_cpu_conv_dw_workspace(d);
    gshape s = shape_of(d);
    size_t wbytes = compute == DL_F32 ? 0 : round64((size_t)d->k * s.cg * s.rs * 4);
    return 64 + wbytes + PARTS * (round64(s.col * 4) + round64(s.t * 4));
}

typedef struct gtask {
    const dl_conv_desc *d;
    gshape s;
    dl_dtype compute;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw;
    char *parts; /* PARTS slices of col then dy */
    size_t slice;
    int nparts;
} gtask;

/* Sets up t's workspace slices; returns the weights to multiply by (w,
 * or its rounded copy). */
static const float *carve(gtask *t, void *ws, const float *w)
{
    char *p = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    const float *wop = w;
    if (t->compute != DL_F32 && w) {
        size_t nw = (size_t)t->d->k * t->s.cg * t->s.rs;
        float *wr = (float *)p;
        for (size_t i = 0; i < nw; i++)
            wr[i] = dl_cpu_round_to(w[i], t->compute);
        wop = wr;
    }
    if (t->compute != DL_F32)
        p += round64((size_t)t->d->k * t->s.cg * t->s.rs * 4);
    t->parts = p;
    t->slice = round64(t->s.col * 4) + round64(t->s.t * 4);
    return wop;
}

static float *col_of(const gtask *t, size_t part) { return (float *)(t->parts + part * t->slice); }
static float *dyb_of(const gtask *t, size_t part)
{
    return (float *)(t->parts + part * t->slice + round64(t->s.col * 4));
}

/* Input row of output row o for kernel row kr (may be out of range). */
static inline int in_row(const dl_conv_desc *d, int dil, int o, int kr)
{
    return o * d->stride - d->pad + kr * dil;
}

/* col [cg*r*s, pq] = unfold of xg [cg, h, w], rounded through compute. */
static void unfold(float *col, const float *xg, const dl_conv_desc *d, const gshape *s,
                   dl_dtype compute)
{
    for (int ch = 0; ch < s->cg; ch++)
        for (int kr = 0; kr < d->r; kr++)
            for (int ks = 0; ks < d->s; ks++) {
                float *row = col + ((size_t)(ch * d->r + kr) * d->s + ks) * s->pq;
                for (int oh = 0; oh < d->p; oh++) {
                    int ih = in_row(d, s->dil, oh, kr);
                    float *out = row + (size_t)oh * d->q;
                    if (ih < 0 || ih >= d->h) {
                        memset(out, 0, (size_t)d->q * sizeof *out);
                        continue;
                    }
                    const float *xr = xg + ((size_t)ch * d->h + ih) * d->w;
                    for (int ow = 0; ow < d->q; ow++) {
                        int iw = in_row(d, s->dil, ow, ks);
                        out[ow] = iw >= 0 && iw < d->w ? dl_cpu_round_to(xr[iw], compute) : 0.0f;
                    }
                }
            }
}

/* dxg [cg, h, w] += fold of dcol [cg*r*s, pq] (unfold's adjoint). */
static void fold(float *dxg, const float *dcol, const dl_conv_desc *d, const gshape *s)
{
    for (int ch = 0; ch < s->cg; ch++)
        for (int kr = 0; kr < d->r; kr++)
            for (int ks = 0; ks < d->s; ks++) {
                const float *row = dcol + ((size_t)(ch * d->r + kr) * d->s + ks) * s->pq;
                for (int oh = 0; oh < d->p; oh++) {
                    int ih = in_row(d, s->dil, oh, kr);
                    if (ih < 0 || ih >= d->h)
                        continue;
                    float *xr = dxg + ((size_t)ch * d->h + ih) * d->w;
                    for (int ow = 0; ow < d->q; ow++) {
                        int iw = in_row(d, s->dil, ow, ks);
                        if (iw >= 0 && iw < d->w)
                            xr[iw] += row[(size_t)oh * d->q + ow];
                    }
                }
            }
}

/* dy[i, group] [kg, pq] as the products read it: itself in f32, else a
 * rounded copy in buf. */
static const float *dy_operand(const gtask *t, float *buf, int i, int g)
{
    const float *src = t->dy + ((size_t)i * t->d->k + (size_t)g * t->s.kg) * t->s.pq;
    if (t->compute == DL_F32)
        return src;
    for (size_t j = 0; j < t->s.t; j++)
        buf[j] = dl_cpu_round_to(src[j], t->compute);
    return buf;
}

/* The (image, group) pairs [j0, j1) of part `part`. */
static void pair_range(const gtask *t, size_t part, size_t *j0, size_t *j1)
{
    size_t pairs = (size_t)t->d->n * t->s.g;
    *j0 = part * pairs / (size_t)t->nparts;
    *j1 = (part + 1) * pairs / (size_t)t->nparts;
}

static void fwd_task(void *arg, size_t begin, size_t end)
{
    const gtask *t = arg;
    const dl_conv_desc *d = t->d;
    const gshape *s = &t->s;
    int crs = s->cg * s->rs;
    for (size_t part = begin; part < end; part++) {
        size_t j0, j1;
        pair_range(t, part, &j0, &j1);
        float *col = col_of(t, part);
        for (size_t j = j0; j < j1; j++) {
            int i = (int)(j / (size_t)s->g), g = (int)(j % (size_t)s->g);
            unfold(col, t->x + ((size_t)i * d->c + (size_t)g * s->cg) * d->h * d->w, d, s,
                   t->compute);
            float *yg = t->y + ((size_t)i * d->k + (size_t)g * s->kg) * s->pq;
            /* y_g [kg, pq] = w_g [kg, crs] . col [crs, pq] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->kg, s->pq, crs, 1.0f,
                        t->w + (size_t)g * s->kg * crs, crs, col, s->pq, 0.0f, yg, s->pq);
            if (t->b)
                for (int kk = 0; kk < s->kg; kk++) {
                    float bias = t->b[g * s->kg + kk], *yk = yg + (size_t)kk * s->pq;
                    for (int q = 0; q < s->pq; q++)
                        yk[q] += bias;
                }
        }
    }
}

static void bwd_data_task(void *arg, size_t begin, size_t end)
{
    const gtask *t = arg;
    const dl_conv_desc *d = t->d;
    const gshape *s = &t->s;
    int crs = s->cg * s->rs;
    for (size_t part = begin; part < end; part++) {
        size_t j0, j1;
        pair_range(t, part, &j0, &j1);
        float *dcol = col_of(t, part);
        for (size_t j = j0; j < j1; j++) {
            int i = (int)(j / (size_t)s->g), g = (int)(j % (size_t)s->g);
            const float *dyg = dy_operand(t, dyb_of(t, part), i, g);
            /* dcol [crs, pq] = w_g^T [crs, kg] . dy_g [kg, pq] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, crs, s->pq, s->kg, 1.0f,
                        t->w + (size_t)g * s->kg * crs, crs, dyg, s->pq, 0.0f, dcol, s->pq);
            fold(t->dx + ((size_t)i * d->c + (size_t)g * s->cg) * d->h * d->w, dcol, d, s);
        }
    }
}

/* Part `part` owns groups [g0, g1): their dw rows and db entries. */
static void bwd_filter_task(void *arg, size_t begin, size_t end)
{
    const gtask *t = arg;
    const dl_conv_desc *d = t->d;
    const gshape *s = &t->s;
    int crs = s->cg * s->rs;
    for (size_t part = begin; part < end; part++) {
        int g0 = (int)(part * (size_t)s->g / (size_t)t->nparts);
        int g1 = (int)((part + 1) * (size_t)s->g / (size_t)t->nparts);
        float *col = col_of(t, part);
        for (int g = g0; g < g1; g++)
            for (int i = 0; i < d->n; i++) {
                unfold(col, t->x + ((size_t)i * d->c + (size_t)g * s->cg) * d->h * d->w, d, s,
                       t->compute);
                const float *dyg = dy_operand(t, dyb_of(t, part), i, g);
                /* dw_g [kg, crs] += dy_g [kg, pq] . col^T [pq, crs] */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->kg, crs, s->pq, 1.0f, dyg,
                            s->pq, col, s->pq, 1.0f, t->dw + (size_t)g * s->kg * crs, crs);
            }
    }
}

static void run(dl_backend *be, size_t n, dl_pool_fn fn, void *arg)
{
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool)
        dl_pool_for(pool, n, 1, fn, arg);
    else
        fn(arg, 0, n);
}

static gtask task_of(const dl_conv_desc *d, dl_dtype compute, size_t units)
{
    gtask t = {0};
    t.d = d;
    t.s = shape_of(d);
    t.compute = compute;
    t.nparts = units < PARTS ? (int)units : PARTS;
    return t;
}

/* y [n, k, p, q] = grouped conv(x, w) + b (b may be NULL). */
int dl_cpu_conv_grouped_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                                const float *w, const float *b, void *ws, dl_dtype compute)
{
    DL_TRY(dl_cpu_conv_grouped_check(d, compute, "conv_forward"));
    if (dl_cpu_conv_dw_fits(d, compute))
        return dl_cpu_conv_dw_forward(be, d, y, x, w, b, ws, compute);
    gtask t = task_of(d, compute, (size_t)d->n * dl_conv_groups(d));
    t.w = carve(&t, ws, w);
    t.x = x;
    t.b = b;
    t.y = y;
    run(be, (size_t)t.nparts, fwd_task, &t);
    return DL_OK;
}

/* dx [n, c, h, w] += grouped conv_transpose(dy, w), or = when set. */
int dl_cpu_conv_grouped_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx,
                                      const float *dy, const float *w, void *ws, dl_dtype compute,
                                      int set)
{
    DL_TRY(dl_cpu_conv_grouped_check(d, compute, "conv_backward_data"));
    if (dl_cpu_conv_dw_fits(d, compute))
        return dl_cpu_conv_dw_backward_data(be, d, dx, dy, w, ws, compute, set);
    if (set)
        memset(dx, 0, (size_t)d->n * d->c * d->h * d->w * sizeof(float));
    gtask t = task_of(d, compute, (size_t)d->n * dl_conv_groups(d));
    t.w = carve(&t, ws, w);
    t.dy = dy;
    t.dx = dx;
    run(be, (size_t)t.nparts, bwd_data_task, &t);
    return DL_OK;
}

/* dw [k, c/groups, r, s] += correlation of x and dy per group; db [k] +=
 * the sum of dy over images and pixels (db may be NULL; in f32). */
int dl_cpu_conv_grouped_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                        const float *dy, const float *x, void *ws, dl_dtype compute)
{
    DL_TRY(dl_cpu_conv_grouped_check(d, compute, "conv_backward_filter"));
    if (dl_cpu_conv_dw_fits(d, compute)) {
        DL_TRY(dl_cpu_conv_dw_backward_filter(be, d, dw, dy, x, ws, compute));
        return db ? dl_cpu_bias_grad(be, db, dy, d->n, d->k, d->p * d->q) : DL_OK;
    }
    gtask t = task_of(d, compute, (size_t)dl_conv_groups(d));
    carve(&t, ws, NULL);
    t.x = x;
    t.dy = dy;
    t.dw = dw;
    run(be, (size_t)t.nparts, bwd_filter_task, &t);
    if (db)
        DL_TRY(dl_cpu_bias_grad(be, db, dy, d->n, d->k, d->p * d->q));
    return DL_OK;
}
