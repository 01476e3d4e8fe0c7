/* cpu_pool_blocked.c - max and average pooling of activations in channel blocks ([n, c / blk, h, w, blk], nn.c's layout plan)
 *
 * A window cell is blk channels side by side, so a vector of 8 lanes
 * pools 8 channels at once, with the scan order, the comparisons and the
 * sums of the plain kernels (cpu_conv.c): NaN wins a maximum, the first
 * cell equal to the maximum takes its gradient, sums run in scan order
 * and are divided by the count with padding cells. The bits are those
 * of the plain ops' scan on the same values (the plain 3x3 stride-2
 * backward adds a cell's contributions from overlapping windows in
 * another order: the last bit there may differ). Planes (one image's
 * block) go to the pool's threads.
 */
#include <math.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"

typedef struct bp_task {
    const dl_pool_desc *d;
    dl_pool_kind kind;
    int relu, set;
    float *y, *dx;
    const float *x, *dy, *yc;
} bp_task;

#ifndef DL_CPU_VMATH
static inline float relu_in(int relu, float x) { return !relu || x > 0 ? x : 0; }

/* Lanes [g, g + 8) of output (oh, ow) of plane xp, scalar. */
static void fwd_lanes(const bp_task *t, const float *xp, float *yo, int g, int h0, int h1, int w0,
                      int w1, int count)
{
    const dl_pool_desc *d = t->d;
    for (int l = g; l < g + 8; l++) {
        float v = t->kind == DL_POOL_MAX ? -INFINITY : 0.0f;
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) {
                float e = xp[((size_t)ih * d->w + iw) * d->blk + l];
                if (t->kind == DL_POOL_AVG)
                    v += e;
                else if ((e = relu_in(t->relu, e)) > v || isnan(e))
                    v = e;
            }
        yo[l] = t->kind == DL_POOL_MAX ? v : v / (float)count;
    }
}
#endif

#ifdef DL_CPU_X86
#define BP512 __attribute__((target("avx512f")))

/* Output (oh, ow) of plane xp, blk 16: one 16-lane vector a cell. */
BP512 static void fwd16(const bp_task *t, const float *xp, float *yo, int h0, int h1, int w0,
                        int w1, int count)
{
    const dl_pool_desc *d = t->d;
    int max = t->kind == DL_POOL_MAX;
    __m512 v = _mm512_set1_ps(max ? -INFINITY : 0.0f), zero = _mm512_setzero_ps();
    for (int ih = h0; ih < h1; ih++) {
        const float *row = xp + (size_t)ih * d->w * 16;
        for (int iw = w0; iw < w1; iw++) {
            __m512 e = _mm512_loadu_ps(row + (size_t)iw * 16);
            if (!max) {
                v = _mm512_add_ps(v, e);
                continue;
            }
            if (t->relu) /* NaN and x <= 0 give 0, as the ReLU */
                e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(e, zero, _CMP_GT_OQ), e);
            __mmask16 take =
                _mm512_cmp_ps_mask(e, v, _CMP_GT_OQ) | _mm512_cmp_ps_mask(e, e, _CMP_UNORD_Q);
            v = _mm512_mask_mov_ps(v, take, e);
        }
    }
    if (!max)
        v = _mm512_div_ps(v, _mm512_set1_ps((float)count));
    _mm512_storeu_ps(yo, v);
}

/* Output (oh, ow)'s gradient into plane dxp, blk 16; lanes not served
 * keep dx's bits (a masked add). */
BP512 static void bwd16(const bp_task *t, const float *xp, float *dxp, const float *go,
                        const float *mo, int h0, int h1, int w0, int w1, int count)
{
    const dl_pool_desc *d = t->d;
    __m512 g = _mm512_loadu_ps(go), zero = _mm512_setzero_ps();
    if (t->kind == DL_POOL_AVG) {
        g = _mm512_div_ps(g, _mm512_set1_ps((float)count));
        for (int ih = h0; ih < h1; ih++)
            for (int iw = w0; iw < w1; iw++) {
                float *p = dxp + ((size_t)ih * d->w + iw) * 16;
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), g));
            }
        return;
    }
    __m512 m = _mm512_loadu_ps(mo);
    /* lanes already served; with the ReLU a maximum not above 0 passes none */
    __mmask16 found = t->relu ? _mm512_cmp_ps_mask(m, zero, _CMP_NGT_UQ) : 0;
    for (int ih = h0; ih < h1 && found != 0xffff; ih++)
        for (int iw = w0; iw < w1 && found != 0xffff; iw++) {
            size_t at = ((size_t)ih * d->w + iw) * 16;
            __m512 e = _mm512_loadu_ps(xp + at);
            if (t->relu)
                e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(e, zero, _CMP_GT_OQ), e);
            __mmask16 hit = _mm512_cmp_ps_mask(e, m, _CMP_EQ_OQ) & (__mmask16)~found;
            if (!hit)
                continue;
            found |= hit;
            float *p = dxp + at;
            __m512 o = _mm512_loadu_ps(p);
            _mm512_storeu_ps(p, _mm512_mask_add_ps(o, hit, o, g));
        }
}
#endif

static void fwd_task(void *arg, size_t begin, size_t end)
{
    const bp_task *t = arg;
    const dl_pool_desc *d = t->d;
    size_t blk = (size_t)d->blk, in = (size_t)d->h * d->w * blk, out = (size_t)d->p * d->q * blk;
    int wide = blk == 16 && dl_cpu_avx512();
    (void)wide;
    for (size_t pl = begin; pl < end; pl++) {
        const float *xp = t->x + pl * in;
        for (int oh = 0; oh < d->p; oh++)
            for (int ow = 0; ow < d->q; ow++) {
                int h0, h1, w0, w1, count;
                dl_cpu_pool_window(d, oh, ow, &h0, &h1, &w0, &w1, &count);
                float *yo = t->y + pl * out + ((size_t)oh * d->q + ow) * blk;
#ifdef DL_CPU_X86
                if (wide) {
                    fwd16(t, xp, yo, h0, h1, w0, w1, count);
                    continue;
                }
#endif
                for (int g = 0; g < d->blk; g += 8) {
#ifdef DL_CPU_VMATH
                    __m256 v = _mm256_set1_ps(t->kind == DL_POOL_MAX ? -INFINITY : 0.0f);
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++) {
                            __m256 e = _mm256_loadu_ps(xp + ((size_t)ih * d->w + iw) * blk + g);
                            if (t->kind == DL_POOL_AVG) {
                                v = _mm256_add_ps(v, e);
                                continue;
                            }
                            if (t->relu) /* NaN and x <= 0 give 0, as the ReLU */
                                e = _mm256_and_ps(
                                    e, _mm256_cmp_ps(e, _mm256_setzero_ps(), _CMP_GT_OQ));
                            __m256 take = _mm256_or_ps(_mm256_cmp_ps(e, v, _CMP_GT_OQ),
                                                       _mm256_cmp_ps(e, e, _CMP_UNORD_Q));
                            v = _mm256_blendv_ps(v, e, take);
                        }
                    if (t->kind == DL_POOL_AVG)
                        v = _mm256_div_ps(v, _mm256_set1_ps((float)count));
                    _mm256_storeu_ps(yo + g, v);
#else
                    fwd_lanes(t, xp, yo, g, h0, h1, w0, w1, count);
#endif
                }
            }
    }
}

#ifndef DL_CPU_VMATH
/* Lanes [g, g + 8) of output (oh, ow)'s gradient into plane dxp, scalar. */
static void bwd_lanes(const bp_task *t, const float *xp, float *dxp, const float *go,
                      const float *mo, int g, int h0, int h1, int w0, int w1, int count)
{
    const dl_pool_desc *d = t->d;
    for (int l = g; l < g + 8; l++) {
        float gv = go[l];
        int found = t->kind == DL_POOL_MAX && t->relu && !(mo[l] > 0);
        for (int ih = h0; ih < h1 && !found; ih++)
            for (int iw = w0; iw < w1 && !found; iw++) {
                size_t at = ((size_t)ih * d->w + iw) * d->blk + l;
                if (t->kind == DL_POOL_AVG) {
                    dxp[at] += gv / (float)count;
                } else if (relu_in(t->relu, xp[at]) == mo[l]) {
                    dxp[at] += gv;
                    found = 1;
                }
            }
    }
}
#endif

static void bwd_task(void *arg, size_t begin, size_t end)
{
    const bp_task *t = arg;
    const dl_pool_desc *d = t->d;
    size_t blk = (size_t)d->blk, in = (size_t)d->h * d->w * blk, out = (size_t)d->p * d->q * blk;
    int wide = blk == 16 && dl_cpu_avx512();
    (void)wide;
    for (size_t pl = begin; pl < end; pl++) {
        const float *xp = t->x ? t->x + pl * in : NULL;
        float *dxp = t->dx + pl * in;
        if (t->set)
            memset(dxp, 0, in * sizeof *dxp);
        for (int oh = 0; oh < d->p; oh++)
            for (int ow = 0; ow < d->q; ow++) {
                int h0, h1, w0, w1, count;
                dl_cpu_pool_window(d, oh, ow, &h0, &h1, &w0, &w1, &count);
                size_t o = pl * out + ((size_t)oh * d->q + ow) * blk;
                const float *go = t->dy + o, *mo = t->yc ? t->yc + o : NULL;
#ifdef DL_CPU_X86
                if (wide) {
                    bwd16(t, xp, dxp, go, mo, h0, h1, w0, w1, count);
                    continue;
                }
#endif
                for (int g = 0; g < d->blk; g += 8) {
#ifdef DL_CPU_VMATH
                    __m256 gv = _mm256_loadu_ps(go + g);
                    if (t->kind == DL_POOL_AVG) {
                        gv = _mm256_div_ps(gv, _mm256_set1_ps((float)count));
                        for (int ih = h0; ih < h1; ih++)
                            for (int iw = w0; iw < w1; iw++) {
                                float *p = dxp + ((size_t)ih * d->w + iw) * blk + g;
                                _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), gv));
                            }
                        continue;
                    }
                    __m256 m = _mm256_loadu_ps(mo + g), zero = _mm256_setzero_ps();
                    /* lanes already served; with the ReLU, a maximum not
                     * above 0 passes no gradient */
                    __m256 found = t->relu ? _mm256_cmp_ps(m, zero, _CMP_NGT_UQ) : zero;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++) {
                            size_t at = ((size_t)ih * d->w + iw) * blk + g;
                            __m256 e = _mm256_loadu_ps(xp + at);
                            if (t->relu)
                                e = _mm256_and_ps(e, _mm256_cmp_ps(e, zero, _CMP_GT_OQ));
                            __m256 hit = _mm256_andnot_ps(found, _mm256_cmp_ps(e, m, _CMP_EQ_OQ));
                            found = _mm256_or_ps(found, hit);
                            float *p = dxp + at;
                            __m256 old = _mm256_loadu_ps(p);
                            _mm256_storeu_ps(p, _mm256_blendv_ps(old, _mm256_add_ps(old, gv), hit));
                        }
#else
                    bwd_lanes(t, xp, dxp, go, mo, g, h0, h1, w0, w1, count);
#endif
                }
            }
    }
}

static int check(dl_pool_kind kind, const dl_pool_desc *d, const char *op)
{
    if ((kind != DL_POOL_MAX && kind != DL_POOL_AVG) || d->n <= 0 || d->c <= 0 || d->blk <= 0 ||
        d->blk % 8 || d->c % d->blk || d->size <= 0 || d->stride <= 0 || d->pad < 0 ||
        2 * d->pad > d->size || d->p != (d->h + 2 * d->pad - d->size) / d->stride + 1 ||
        d->q != (d->w + 2 * d->pad - d->size) / d->stride + 1 || d->p <= 0 || d->q <= 0)
        return dl_error(DL_EINVAL,
                        "%s (blocked): bad descriptor n %d c %d in blocks of %d, %dx%d -> %dx%d, "
                        "window %d stride %d pad %d",
                        op, d->n, d->c, d->blk, d->h, d->w, d->p, d->q, d->size, d->stride, d->pad);
    return DL_OK;
}

int dl_cpu_pool_blocked_forward(dl_backend *be, dl_pool_kind kind, int relu, const dl_pool_desc *d,
                                float *y, const float *x)
{
    DL_TRY(check(kind, d, "pool_forward"));
    bp_task t = {.d = d, .kind = kind, .relu = relu, .y = y, .x = x};
    size_t planes = (size_t)d->n * (d->c / d->blk);
    dl_pool_for(dl_cpu(be)->pool, planes, dl_cpu_plane_grain((size_t)d->h * d->w * d->blk),
                fwd_task, &t);
    return DL_OK;
}

int dl_cpu_pool_blocked_backward(dl_backend *be, dl_pool_kind kind, int relu, int set,
                                 const dl_pool_desc *d, float *dx, const float *dy, const float *x,
                                 const float *y)
{
    DL_TRY(check(kind, d, "pool_backward"));
    bp_task t = {
        .d = d, .kind = kind, .relu = relu, .set = set, .dx = dx, .x = x, .dy = dy, .yc = y};
    size_t planes = (size_t)d->n * (d->c / d->blk);
    dl_pool_for(dl_cpu(be)->pool, planes, dl_cpu_plane_grain((size_t)d->h * d->w * d->blk),
                bwd_task, &t);
    return DL_OK;
}
