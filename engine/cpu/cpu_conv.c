/* cpu_conv.c - convolution (im2row + GEMM over chunks of images) and pooling on the CPU
 *
 * A chunk of nb images is unfolded into rows, one row per output pixel:
 *   col [nb*p*q, c*r*s]   (c, r, s fastest-last, as w [k, c, r, s] is stored)
 * so each pass is one tall GEMM that OpenBLAS (f32) or the bf16 kernel
 * (both threaded) runs near peak even for the small per-image products of
 * a small CNN:
 *   forward          yt [nb*pq, k]   = col . w^T, then transposed into y
 *   backward data    dcol [nb*pq, crs] = dyt . w, then folded back into dx
 *   backward filter  dw [k, crs]    += dyt^T . col
 * where dyt [nb*pq, k] is dy transposed per image. The unfold, fold and
 * transposes are parallel over the images of a chunk with the pool. For
 * bf16/f16 compute, col, dyt and w are written in that dtype and products
 * accumulate in f32.
 *
 * Workspace (dl_cpu_conv_workspace): col [chunk*pq*crs] and t [chunk*pq*k]
 * at 4 bytes an element, plus a low-precision copy of w [k*crs].
 */
#include <math.h>
#include <string.h>

#include "engine/cpu/cpu.h"
#include "engine/error.h"
#include "engine/half.h"

/* Unfolded rows of one chunk are kept near this size (L2/L3-friendly). */
#define COL_TARGET_BYTES ((size_t)4 << 20)

static int chunk_images(const dl_conv_desc *d)
{
    size_t row = (size_t)d->p * d->q * d->c * d->r * d->s * 4;
    size_t nb = row ? COL_TARGET_BYTES / row : (size_t)d->n;
    if (nb < 1)
        nb = 1;
    if (nb > (size_t)d->n)
        nb = (size_t)d->n;
    return (int)nb;
}

static int check_desc(const dl_conv_desc *d, dl_dtype compute, const char *op)
{
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->k <= 0 || d->r <= 0 ||
        d->s <= 0 || d->stride <= 0 || d->pad < 0)
        return dl_error(DL_EINVAL, "%s: bad descriptor n %d c %d h %d w %d k %d r %d s %d "
                        "stride %d pad %d", op, d->n, d->c, d->h, d->w, d->k, d->r, d->s,
                        d->stride, d->pad);
    if (d->p != (d->h + 2 * d->pad - d->r) / d->stride + 1 ||
        d->q != (d->w + 2 * d->pad - d->s) / d->stride + 1 || d->p <= 0 || d->q <= 0)
        return dl_error(DL_ESHAPE, "%s: output %dx%d does not match input %dx%d, kernel "
                        "%dx%d, stride %d, pad %d", op, d->p, d->q, d->h, d->w, d->r, d->s,
                        d->stride, d->pad);
    if (d->s > 64)
        return dl_error(DL_EINVAL, "%s: kernel width %d over 64 not supported", op, d->s);
    if (compute != DL_F32 && compute != DL_BF16 && compute != DL_F16)
        return dl_error(DL_EINVAL, "%s: compute dtype %s not supported", op,
                        dl_dtype_name(compute));
    return DL_OK;
}

/* Bytes of workspace the three conv ops need for d: see the file comment. */
size_t dl_cpu_conv_workspace(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    if (check_desc(d, compute, "conv_workspace") < 0)
        return 0;
    size_t rows = (size_t)chunk_images(d) * d->p * d->q;
    size_t crs = (size_t)d->c * d->r * d->s;
    size_t bytes = rows * crs * 4 + rows * (size_t)d->k * 4 + 128;
    if (compute != DL_F32)
        bytes += (size_t)d->k * crs * 2 + 64;
    return bytes;
}

typedef struct conv_work {
    float *col;    /* [nb*pq, crs], f32 or 16-bit */
    float *t;      /* [nb*pq, k], f32 or 16-bit */
    uint16_t *w16; /* [k, crs] low-precision copy of w, or NULL */
    int chunk;
} conv_work;

static void carve(conv_work *cw, const dl_conv_desc *d, void *ws, dl_dtype compute)
{
    size_t crs = (size_t)d->c * d->r * d->s;
    cw->chunk = chunk_images(d);
    size_t rows = (size_t)cw->chunk * d->p * d->q;
    char *p = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    cw->col = (float *)p;
    p += (rows * crs * 4 + 63) & ~(size_t)63;
    cw->t = (float *)p;
    p += (rows * (size_t)d->k * 4 + 63) & ~(size_t)63;
    cw->w16 = compute == DL_F32 ? NULL : (uint16_t *)p;
}

static inline uint16_t to_half(float v, dl_dtype t)
{
    return t == DL_BF16 ? dl_f32_to_bf16(v) : dl_f32_to_f16(v);
}

static void convert_w(uint16_t *dst, const float *w, size_t n, dl_dtype t)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = to_half(w[i], t);
}

static void run(dl_backend *be, size_t n, dl_pool_fn fn, void *arg)
{
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool)
        dl_pool_for(pool, n, 1, fn, arg);
    else
        fn(arg, 0, n);
}

/* Shared by the per-image tasks of one chunk. */
typedef struct conv_task {
    const dl_conv_desc *d;
    dl_dtype compute;
    int n0;          /* first image of the chunk */
    const float *x;  /* [n, c, h, w] */
    float *dx;       /* [n, c, h, w] */
    const float *b;  /* [k] or NULL */
    float *y;        /* [n, k, p, q] */
    const float *dy; /* [n, k, p, q] */
    void *col, *t;
} conv_task;

/* Unfolds images [n0+begin, n0+end) into rows of col. */
static void im2row_task(void *arg, size_t begin, size_t end)
{
    const conv_task *ct = arg;
    const dl_conv_desc *d = ct->d;
    int pq = d->p * d->q, crs = d->c * d->r * d->s;
    for (size_t i = begin; i < end; i++) {
        const float *xi = ct->x + (size_t)(ct->n0 + i) * d->c * d->h * d->w;
        for (int oh = 0; oh < d->p; oh++) {
            for (int ow = 0; ow < d->q; ow++) {
                size_t row = (i * pq + (size_t)oh * d->q + ow) * crs;
                float *rf = (float *)ct->col + row;
                uint16_t *rh = (uint16_t *)ct->col + row;
                int col = 0, iw0 = ow * d->stride - d->pad;
                int inside = iw0 >= 0 && iw0 + d->s <= d->w; /* no column clipping */
                for (int ch = 0; ch < d->c; ch++) {
                    const float *xc = xi + (size_t)ch * d->h * d->w;
                    for (int kr = 0; kr < d->r; kr++, col += d->s) {
                        int ih = oh * d->stride - d->pad + kr;
                        float v[64];
                        float *dst = ct->compute == DL_F32 ? rf + col : v;
                        if (ih < 0 || ih >= d->h) {
                            for (int ks = 0; ks < d->s; ks++)
                                dst[ks] = 0.0f;
                        } else if (inside) {
                            const float *src = xc + (size_t)ih * d->w + iw0;
                            for (int ks = 0; ks < d->s; ks++)
                                dst[ks] = src[ks];
                        } else {
                            const float *xrow = xc + (size_t)ih * d->w;
                            for (int ks = 0; ks < d->s; ks++) {
                                int iw = iw0 + ks;
                                dst[ks] = iw >= 0 && iw < d->w ? xrow[iw] : 0.0f;
                            }
                        }
                        if (ct->compute != DL_F32)
                            for (int ks = 0; ks < d->s; ks++)
                                rh[col + ks] = to_half(v[ks], ct->compute);
                    }
                }
            }
        }
    }
}

/* Folds dcol rows (f32) of images [n0+begin, n0+end) back into dx (+=). */
static void row2im_task(void *arg, size_t begin, size_t end)
{
    const conv_task *ct = arg;
    const dl_conv_desc *d = ct->d;
    int pq = d->p * d->q, crs = d->c * d->r * d->s;
    for (size_t i = begin; i < end; i++) {
        float *dxi = ct->dx + (size_t)(ct->n0 + i) * d->c * d->h * d->w;
        for (int oh = 0; oh < d->p; oh++) {
            for (int ow = 0; ow < d->q; ow++) {
                const float *rf = (const float *)ct->col + (i * pq + (size_t)oh * d->q + ow) * crs;
                int col = 0;
                for (int ch = 0; ch < d->c; ch++) {
                    float *dxc = dxi + (size_t)ch * d->h * d->w;
                    for (int kr = 0; kr < d->r; kr++) {
                        int ih = oh * d->stride - d->pad + kr;
                        for (int ks = 0; ks < d->s; ks++, col++) {
                            int iw = ow * d->stride - d->pad + ks;
                            if (ih >= 0 && ih < d->h && iw >= 0 && iw < d->w)
                                dxc[(size_t)ih * d->w + iw] += rf[col];
                        }
                    }
                }
            }
        }
    }
}

/* yt [nb*pq, k] (f32) -> y[n0+i] [k, pq] (+ b). */
static void yt_to_y_task(void *arg, size_t begin, size_t end)
{
    const conv_task *ct = arg;
    const dl_conv_desc *d = ct->d;
    int pq = d->p * d->q;
    for (size_t i = begin; i < end; i++) {
        const float *ti = (const float *)ct->t + i * pq * d->k;
        float *yi = ct->y + (size_t)(ct->n0 + i) * d->k * pq;
        for (int kk = 0; kk < d->k; kk++) {
            float bias = ct->b ? ct->b[kk] : 0.0f;
            float *yk = yi + (size_t)kk * pq;
            for (int j = 0; j < pq; j++)
                yk[j] = ti[(size_t)j * d->k + kk] + bias;
        }
    }
}

/* dy[n0+i] [k, pq] -> dyt [nb*pq, k] in the compute dtype. */
static void dy_to_t_task(void *arg, size_t begin, size_t end)
{
    const conv_task *ct = arg;
    const dl_conv_desc *d = ct->d;
    int pq = d->p * d->q;
    for (size_t i = begin; i < end; i++) {
        const float *dyi = ct->dy + (size_t)(ct->n0 + i) * d->k * pq;
        for (int j = 0; j < pq; j++) {
            size_t row = (i * pq + j) * d->k;
            if (ct->compute == DL_F32) {
                float *tf = (float *)ct->t + row;
                for (int kk = 0; kk < d->k; kk++)
                    tf[kk] = dyi[(size_t)kk * pq + j];
            } else {
                uint16_t *th = (uint16_t *)ct->t + row;
                for (int kk = 0; kk < d->k; kk++)
                    th[kk] = to_half(dyi[(size_t)kk * pq + j], ct->compute);
            }
        }
    }
}

/* y [n, k, p, q] = conv(x [n, c, h, w], w [k, c, r, s]) + b [k] (b may be
 * NULL). ws holds dl_cpu_conv_workspace(d, compute) bytes. Returns DL_OK,
 * or DL_EINVAL/DL_ESHAPE for a bad descriptor (y untouched). */
int dl_cpu_conv_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                        const float *w, const float *b, void *ws, dl_dtype compute)
{
    DL_TRY(check_desc(d, compute, "conv_forward"));
    conv_work cw;
    carve(&cw, d, ws, compute);
    int pq = d->p * d->q, crs = d->c * d->r * d->s;
    const void *wop = w;
    if (compute != DL_F32) {
        convert_w(cw.w16, w, (size_t)d->k * crs, compute);
        wop = cw.w16;
    }
    for (int n0 = 0; n0 < d->n; n0 += cw.chunk) {
        int nb = d->n - n0 < cw.chunk ? d->n - n0 : cw.chunk;
        conv_task ct = {d, compute, n0, x, NULL, b, y, NULL, cw.col, cw.t};
        run(be, (size_t)nb, im2row_task, &ct);
        /* yt [nb*pq, k] = col [nb*pq, crs] . w^T */
        DL_TRY(dl_cpu_gemm(be, 0, 1, nb * pq, d->k, crs, 1.0f, cw.col, crs, wop, crs, compute,
                           0.0f, cw.t, d->k));
        run(be, (size_t)nb, yt_to_y_task, &ct);
    }
    return DL_OK;
}

/* dx [n, c, h, w] += conv_transpose(dy [n, k, p, q], w [k, c, r, s]). */
int dl_cpu_conv_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx,
                              const float *dy, const float *w, void *ws, dl_dtype compute)
{
    DL_TRY(check_desc(d, compute, "conv_backward_data"));
    conv_work cw;
    carve(&cw, d, ws, compute);
    int pq = d->p * d->q, crs = d->c * d->r * d->s;
    const void *wop = w;
    if (compute != DL_F32) {
        convert_w(cw.w16, w, (size_t)d->k * crs, compute);
        wop = cw.w16;
    }
    for (int n0 = 0; n0 < d->n; n0 += cw.chunk) {
        int nb = d->n - n0 < cw.chunk ? d->n - n0 : cw.chunk;
        conv_task ct = {d, compute, n0, NULL, dx, NULL, NULL, dy, cw.col, cw.t};
        run(be, (size_t)nb, dy_to_t_task, &ct);
        /* dcol [nb*pq, crs] (f32) = dyt [nb*pq, k] . w [k, crs] */
        DL_TRY(dl_cpu_gemm(be, 0, 0, nb * pq, crs, d->k, 1.0f, cw.t, d->k, wop, crs, compute,
                           0.0f, cw.col, crs));
        run(be, (size_t)nb, row2im_task, &ct);
    }
    return DL_OK;
}

/* Pool task: db[kk] += sum over images and pixels of dy, channels
 * [begin, end). */
typedef struct db_task {
    const dl_conv_desc *d;
    float *db;
    const float *dy;
} db_task;

static void db_task_fn(void *arg, size_t begin, size_t end)
{
    const db_task *t = arg;
    int pq = t->d->p * t->d->q;
    for (size_t kk = begin; kk < end; kk++) {
        double s = 0.0;
        for (int i = 0; i < t->d->n; i++) {
            const float *p = t->dy + ((size_t)i * t->d->k + kk) * pq;
            for (int j = 0; j < pq; j++)
                s += p[j];
        }
        t->db[kk] += (float)s;
    }
}

/* dw [k, c, r, s] += sum over images of dy (x) unfolded x; db [k] += sum
 * of dy over images and pixels (db may be NULL). */
int dl_cpu_conv_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                const float *dy, const float *x, void *ws, dl_dtype compute)
{
    DL_TRY(check_desc(d, compute, "conv_backward_filter"));
    conv_work cw;
    carve(&cw, d, ws, compute);
    int pq = d->p * d->q, crs = d->c * d->r * d->s;
    for (int n0 = 0; n0 < d->n; n0 += cw.chunk) {
        int nb = d->n - n0 < cw.chunk ? d->n - n0 : cw.chunk;
        conv_task ct = {d, compute, n0, x, NULL, NULL, NULL, dy, cw.col, cw.t};
        run(be, (size_t)nb, im2row_task, &ct);
        run(be, (size_t)nb, dy_to_t_task, &ct);
        /* dw [k, crs] += dyt^T [k, nb*pq] . col [nb*pq, crs] */
        DL_TRY(dl_cpu_gemm(be, 1, 0, d->k, crs, nb * pq, 1.0f, cw.t, d->k, cw.col, crs,
                           compute, 1.0f, dw, crs));
    }
    if (db) {
        db_task t = {d, db, dy};
        dl_pool_for(dl_cpu(be)->pool, (size_t)d->k, 8, db_task_fn, &t);
    }
    return DL_OK;
}

/* ---------------------------------------------------------------------- */
/* pooling                                                                 */

typedef struct pool_task {
    const dl_pool_desc *d;
    dl_pool_kind kind;
    float *y, *dx;
    const float *x, *dy, *yc;
} pool_task;

/* Window of output (oh, ow), clipped to the input; *count is the divisor
 * of average pooling: the window clipped to the padded input, padding
 * cells included (PyTorch count_include_pad=True). */
static void window(const dl_pool_desc *d, int oh, int ow, int *h0, int *h1, int *w0, int *w1,
                   int *count)
{
    int hs = oh * d->stride - d->pad, ws = ow * d->stride - d->pad;
    int he = hs + d->size, we = ws + d->size;
    int hpad = he < d->h + d->pad ? he : d->h + d->pad;
    int wpad = we < d->w + d->pad ? we : d->w + d->pad;
    *count = (hpad - hs) * (wpad - ws);
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = he < d->h ? he : d->h;
    *w1 = we < d->w ? we : d->w;
}

/* Planes [begin, end) of n*c. */
static void pool_fwd_task(void *arg, size_t begin, size_t end)
{
    const pool_task *t = arg;
    const dl_pool_desc *d = t->d;
    for (size_t pl = begin; pl < end; pl++) {
        const float *xp = t->x + pl * d->h * d->w;
        float *yp = t->y + pl * d->p * d->q;
        for (int oh = 0; oh < d->p; oh++) {
            for (int ow = 0; ow < d->q; ow++) {
                int h0, h1, w0, w1, count;
                window(d, oh, ow, &h0, &h1, &w0, &w1, &count);
                float v;
                if (t->kind == DL_POOL_MAX) {
                    v = -INFINITY;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++)
                            if (xp[ih * d->w + iw] > v || isnan(xp[ih * d->w + iw]))
                                v = xp[ih * d->w + iw];
                } else {
                    float s = 0.0f;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++)
                            s += xp[ih * d->w + iw];
                    v = s / (float)count;
                }
                yp[oh * d->q + ow] = v;
            }
        }
    }
}

static void pool_bwd_task(void *arg, size_t begin, size_t end)
{
    const pool_task *t = arg;
    const dl_pool_desc *d = t->d;
    for (size_t pl = begin; pl < end; pl++) {
        const float *xp = t->x ? t->x + pl * d->h * d->w : NULL;
        const float *yp = t->yc ? t->yc + pl * d->p * d->q : NULL;
        const float *dyp = t->dy + pl * d->p * d->q;
        float *dxp = t->dx + pl * d->h * d->w;
        for (int oh = 0; oh < d->p; oh++) {
            for (int ow = 0; ow < d->q; ow++) {
                int h0, h1, w0, w1, count;
                window(d, oh, ow, &h0, &h1, &w0, &w1, &count);
                float g = dyp[oh * d->q + ow];
                if (t->kind == DL_POOL_MAX) {
                    /* the first cell, in scan order, equal to the output */
                    float m = yp[oh * d->q + ow];
                    int found = 0;
                    for (int ih = h0; ih < h1 && !found; ih++)
                        for (int iw = w0; iw < w1 && !found; iw++)
                            if (xp[ih * d->w + iw] == m) {
                                dxp[ih * d->w + iw] += g;
                                found = 1;
                            }
                } else {
                    g /= (float)count;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++)
                            dxp[ih * d->w + iw] += g;
                }
            }
        }
    }
}

static int check_pool(dl_pool_kind kind, const dl_pool_desc *d, const char *op)
{
    if (kind != DL_POOL_MAX && kind != DL_POOL_AVG)
        return dl_error(DL_EINVAL, "%s: unknown pooling kind %d", op, (int)kind);
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->size <= 0 || d->stride <= 0 ||
        d->pad < 0 || 2 * d->pad > d->size)
        return dl_error(DL_EINVAL, "%s: bad descriptor n %d c %d h %d w %d size %d stride %d "
                        "pad %d", op, d->n, d->c, d->h, d->w, d->size, d->stride, d->pad);
    if (d->p != (d->h + 2 * d->pad - d->size) / d->stride + 1 ||
        d->q != (d->w + 2 * d->pad - d->size) / d->stride + 1 || d->p <= 0 || d->q <= 0)
        return dl_error(DL_ESHAPE, "%s: output %dx%d does not match input %dx%d, window %d, "
                        "stride %d, pad %d", op, d->p, d->q, d->h, d->w, d->size, d->stride,
                        d->pad);
    return DL_OK;
}

/* y [n, c, p, q] = max or average over square windows of x [n, c, h, w].
 * Average pooling divides by the window size including padding cells. */
int dl_cpu_pool_forward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *y,
                        const float *x)
{
    DL_TRY(check_pool(kind, d, "pool_forward"));
    pool_task t = {d, kind, y, NULL, x, NULL, NULL};
    size_t planes = (size_t)d->n * d->c;
    dl_pool_for(dl_cpu(be)->pool, planes, 16, pool_fwd_task, &t);
    return DL_OK;
}

/* dx [n, c, h, w] += pool'(dy [n, c, p, q]). Max pooling routes each dy to
 * the first window cell equal to y (found again by comparing x with y);
 * x and y are read only for max pooling. */
int dl_cpu_pool_backward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *dx,
                         const float *dy, const float *x, const float *y)
{
    DL_TRY(check_pool(kind, d, "pool_backward"));
    pool_task t = {d, kind, NULL, dx, x, dy, y};
    size_t planes = (size_t)d->n * d->c;
    dl_pool_for(dl_cpu(be)->pool, planes, 16, pool_bwd_task, &t);
    return DL_OK;
}
