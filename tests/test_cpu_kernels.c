/* test_cpu_kernels.c - CPU GEMM, convolution, pooling and normalisation kernels against naive double references and finite differences */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "engine/core/backend.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"
#include "engine/base/error.h"
#include "engine/base/half.h"
#include "engine/base/rng.h"

/* ---------------------------------------------------------------------- */
/* helpers                                                                 */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1). */
static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

/* Uniform integer in [lo, hi]. */
static int irand(int lo, int hi)
{
    frand();
    return lo + (int)((rng_state >> 33) % (uint64_t)(hi - lo + 1));
}

static float *frandv(size_t n)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = frand();
    return v;
}

static float *fcopy(const float *src, size_t n)
{
    float *v = malloc(n * sizeof *v);
    memcpy(v, src, n * sizeof *v);
    return v;
}

static dl_backend *cpu(void) { return dl_backend_cpu(0); }

/* ---------------------------------------------------------------------- */
/* GEMM                                                                    */

/* Reference C = alpha op(A) op(B) + beta C in double, reading A and B as
 * doubles through get(); also returns sum |alpha a b| + |beta c| per
 * element in absum for tolerances. beta == 0 ignores C. */
typedef double (*getter)(const void *x, size_t i);
static double get_f32(const void *x, size_t i) { return ((const float *)x)[i]; }
static double get_bf16(const void *x, size_t i) { return dl_bf16_to_f32(((const uint16_t *)x)[i]); }
static double get_f16(const void *x, size_t i) { return dl_f16_to_f32(((const uint16_t *)x)[i]); }

static void ref_gemm(int ta, int tb, int m, int n, int k, double alpha, const void *a, int lda,
                     const void *b, int ldb, getter get, double beta, const float *c0, int ldc,
                     double *out, double *absum)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0, as = 0;
            for (int p = 0; p < k; p++) {
                double av = get(a, ta ? (size_t)p * lda + i : (size_t)i * lda + p);
                double bv = get(b, tb ? (size_t)j * ldb + p : (size_t)p * ldb + j);
                s += av * bv;
                as += fabs(av * bv);
            }
            double cv = beta == 0 ? 0 : beta * c0[(size_t)i * ldc + j];
            out[(size_t)i * n + j] = alpha * s + cv;
            absum[(size_t)i * n + j] = fabs(alpha) * as + fabs(cv);
        }
}

/* Runs one gemm of dtype dt on random data and compares every element
 * (and the padding of C, which must stay untouched) with the reference:
 * |c - ref| <= rel * absum + 1e-6. */
static void gemm_case(dl_dtype dt, int ta, int tb, int m, int n, int k, float alpha, float beta,
                      double rel)
{
    int lda = (ta ? m : k) + irand(0, 3), ldb = (tb ? k : n) + irand(0, 3);
    int ldc = n + irand(0, 3);
    size_t asz = (size_t)(ta ? k : m) * lda, bsz = (size_t)(tb ? n : k) * ldb;
    size_t csz = (size_t)m * ldc;
    void *a, *b;
    getter get;
    if (dt == DL_F32) {
        a = frandv(asz);
        b = frandv(bsz);
        get = get_f32;
    } else {
        uint16_t *ha = malloc(asz * 2), *hb = malloc(bsz * 2);
        for (size_t i = 0; i < asz; i++)
            ha[i] = dt == DL_BF16 ? dl_f32_to_bf16(frand()) : dl_f32_to_f16(frand());
        for (size_t i = 0; i < bsz; i++)
            hb[i] = dt == DL_BF16 ? dl_f32_to_bf16(frand()) : dl_f32_to_f16(frand());
        a = ha;
        b = hb;
        get = dt == DL_BF16 ? get_bf16 : get_f16;
    }
    float *c = frandv(csz);
    if (beta == 0)
        for (size_t i = 0; i < csz; i++)
            c[i] = (i % 3) ? NAN : INFINITY; /* garbage that beta 0 must ignore */
    float *c0 = fcopy(c, csz);
    double *ref = malloc((size_t)m * n * sizeof *ref), *abs_ = malloc((size_t)m * n * sizeof *abs_);
    ref_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, get, beta, c0, ldc, ref, abs_);
    CHECK_OK(dl_cpu_gemm(cpu(), ta, tb, m, n, k, alpha, a, lda, b, ldb, dt, beta, c, ldc));
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < ldc; j++) {
            size_t at = (size_t)i * ldc + j;
            if (j >= n) { /* padding: bitwise untouched */
                CHECK_MSG(memcmp(&c[at], &c0[at], 4) == 0, "C padding (%d,%d) changed", i, j);
                continue;
            }
            double r = ref[(size_t)i * n + j], tol = rel * abs_[(size_t)i * n + j] + 1e-6;
            CHECK_MSG(fabs(c[at] - r) <= tol,
                      "%s t%d%d %dx%dx%d alpha %g beta %g: C(%d,%d) = %.9g, want %.9g (tol %g)",
                      dl_dtype_name(dt), ta, tb, m, n, k, alpha, beta, i, j, c[at], r, tol);
        }
    }
    free(a);
    free(b);
    free(c);
    free(c0);
    free(ref);
    free(abs_);
}

/* f32: OpenBLAS, every transposition, beta 0 (over NaN) / 1 / other, odd
 * sizes. Tolerance 1e-5 of the sum of |terms|. */
/* The thread pool runs every index of every job exactly once: jobs of 3
 * and 64 items alternate, a million of them, so a worker late from a small
 * job meets the set-up of a larger one (a chunk of it used to run twice,
 * about once in 300k jobs). */
static _Atomic int pool_hits[64];
static void pool_count(void *arg, size_t b, size_t e)
{
    for (size_t i = b; i < e; i++)
        atomic_fetch_add(&pool_hits[i], 1);
}

static void test_pool_each_index_once(void)
{
    dl_pool *p = dl_pool_create(2);
    long bad = 0, jobs = 1000000;
    for (long it = 0; it < jobs; it++) {
        size_t n = (it & 1) ? 64 : 3;
        for (size_t i = 0; i < n; i++)
            atomic_store(&pool_hits[i], 0);
        dl_pool_for(p, n, 1, pool_count, NULL);
        for (size_t i = 0; i < n; i++)
            if (atomic_load(&pool_hits[i]) != 1) {
                bad++;
                break;
            }
    }
    CHECK_MSG(bad == 0, "%ld of %ld jobs ran an index other than once", bad, jobs);
    dl_pool_destroy(p);
}

static void test_gemm_f32(void)
{
    for (int rep = 0; rep < 6; rep++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                float beta = rep % 3 == 0 ? 0.0f : rep % 3 == 1 ? 1.0f : -0.75f;
                gemm_case(DL_F32, ta, tb, irand(1, 40), irand(1, 40), irand(1, 70),
                          rep & 1 ? 1.0f : 0.625f, beta, 1e-5);
            }
}

/* bf16 operands, f32 accumulation, compared with a double product of the
 * same bf16 values: products are exact in f32, so only f32 summation
 * error remains: 1e-5 of the sum of |terms| for k < 1000 (observed
 * ~1e-7). Shapes cover the 8x32 tile edges, odd k (half pairs), k past
 * one 512-deep block, and products big enough to be split over threads. */
static void test_gemm_bf16(void)
{
    static const int shapes[][3] = {{1, 1, 1},      {8, 32, 2},    {9, 33, 3},    {7, 15, 17},
                                    {17, 16, 31},   {64, 48, 513}, {5, 70, 1031}, {33, 100, 40},
                                    {128, 10, 256}, {130, 90, 300}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            gemm_case(DL_BF16, t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                      t == 2 ? -1.5f : 1.0f,
                      s % 3 == 0   ? 0.0f
                      : s % 3 == 1 ? 1.0f
                                   : 0.5f,
                      1e-5);
    /* an MLP-sized product (threaded path when the pool has workers) */
    gemm_case(DL_BF16, 0, 0, 128, 512, 784, 1.0f, 0.0f, 1e-5);
    gemm_case(DL_BF16, 1, 0, 784, 512, 128, 1.0f, 1.0f, 1e-5);
    gemm_case(DL_BF16, 0, 1, 128, 784, 512, 1.0f, 0.0f, 1e-5);
}

/* The portable bf16 path (widen to f32, sgemm), forced by hiding the CPU
 * feature, and f16 (always widened). Same tolerance as f32. */
static void test_gemm_widened(void)
{
    dl_cpu_ctx *ctx = dl_cpu(cpu());
    int had = ctx->has_avx512_bf16;
    ctx->has_avx512_bf16 = 0;
    for (int t = 0; t < 4; t++) {
        gemm_case(DL_BF16, t & 1, t >> 1, irand(1, 30), irand(1, 30), irand(1, 50), 0.5f,
                  t & 1 ? 0.0f : 1.0f, 1e-5);
        gemm_case(DL_F16, t & 1, t >> 1, irand(1, 30), irand(1, 30), irand(1, 50), 1.0f,
                  t & 2 ? 0.0f : -2.0f, 1e-5);
    }
    ctx->has_avx512_bf16 = had;
    gemm_case(DL_F16, 0, 1, 128, 256, 512, 1.0f, 0.0f, 1e-5);
}

/* Degenerate sizes and bad arguments. */
static void test_gemm_edges(void)
{
    float a[6] = {1, 2, 3, 4, 5, 6}, c[4] = {NAN, NAN, 7, 8};
    /* k == 0, beta 0: C becomes 0 whatever it held; beta 2 scales */
    CHECK_OK(dl_cpu_gemm(cpu(), 0, 0, 1, 2, 0, 1.0f, a, 1, a, 2, DL_F32, 0.0f, c, 2));
    CHECK(c[0] == 0.0f && c[1] == 0.0f && c[2] == 7.0f);
    CHECK_OK(dl_cpu_gemm(cpu(), 0, 0, 1, 2, 0, 1.0f, a, 1, a, 2, DL_BF16, 2.0f, c + 2, 2));
    CHECK(c[2] == 14.0f && c[3] == 16.0f);
    /* m == 0 touches nothing */
    CHECK_OK(dl_cpu_gemm(cpu(), 0, 0, 0, 2, 3, 1.0f, a, 3, a, 2, DL_F32, 0.0f, c, 2));
    CHECK(dl_cpu_gemm(cpu(), 0, 0, 2, 2, 3, 1.0f, a, 2, a, 2, DL_F32, 0.0f, c, 2) == DL_EINVAL);
    CHECK(dl_cpu_gemm(cpu(), 0, 0, -1, 2, 3, 1.0f, a, 3, a, 2, DL_F32, 0.0f, c, 2) == DL_EINVAL);
    CHECK(dl_cpu_gemm(cpu(), 0, 0, 1, 1, 1, 1.0f, a, 1, a, 1, DL_U8, 0.0f, c, 1) == DL_EINVAL);
    CHECK(strstr(dl_error_message(), "u8") != NULL);
}

/* ---------------------------------------------------------------------- */
/* convolution                                                             */

/* A descriptor with groups and dilation (1: dense, adjacent taps). */
static dl_conv_desc conv_desc_gd(int n, int c, int h, int w, int k, int r, int s, int stride,
                                 int pad, int groups, int dilation)
{
    dl_conv_desc d = {n, c, h, w, k, r, s, stride, pad, 0, 0, groups, dilation, 0, 0, 0};
    d.p = (h + 2 * pad - dilation * (r - 1) - 1) / stride + 1;
    d.q = (w + 2 * pad - dilation * (s - 1) - 1) / stride + 1;
    return d;
}

static dl_conv_desc conv_desc(int n, int c, int h, int w, int k, int r, int s, int stride, int pad)
{
    return conv_desc_gd(n, c, h, w, k, r, s, stride, pad, 1, 1);
}

static size_t xsize(const dl_conv_desc *d) { return (size_t)d->n * d->c * d->h * d->w; }
static size_t ysize(const dl_conv_desc *d) { return (size_t)d->n * d->k * d->p * d->q; }
static size_t wsize(const dl_conv_desc *d)
{
    return (size_t)d->k * (d->c / dl_conv_groups(d)) * d->r * d->s;
}

/* Visits every (output, input, weight) triple of the convolution and
 * calls back with their flat indices: the one definition of the
 * correlation from which all three references follow. */
typedef void (*conv_visit)(void *ctx, size_t yi, size_t xi, size_t wi);
static void conv_for_each(const dl_conv_desc *d, conv_visit fn, void *ctx)
{
    /* output channel kk sees the cg input channels of its group */
    int cg = d->c / dl_conv_groups(d), kg = d->k / dl_conv_groups(d), dil = dl_conv_dilation(d);
    for (int i = 0; i < d->n; i++)
        for (int kk = 0; kk < d->k; kk++)
            for (int oh = 0; oh < d->p; oh++)
                for (int ow = 0; ow < d->q; ow++)
                    for (int cl = 0; cl < cg; cl++)
                        for (int kr = 0; kr < d->r; kr++)
                            for (int ks = 0; ks < d->s; ks++) {
                                int ch = kk / kg * cg + cl;
                                int ih = oh * d->stride - d->pad + kr * dil;
                                int iw = ow * d->stride - d->pad + ks * dil;
                                if (ih < 0 || ih >= d->h || iw < 0 || iw >= d->w)
                                    continue;
                                size_t yi = (((size_t)i * d->k + kk) * d->p + oh) * d->q + ow;
                                size_t xi = (((size_t)i * d->c + ch) * d->h + ih) * d->w + iw;
                                size_t wi = (((size_t)kk * cg + cl) * d->r + kr) * d->s + ks;
                                fn(ctx, yi, xi, wi);
                            }
}

typedef struct ref_ctx {
    const float *x, *w, *dy;
    double *y, *dx, *dw;    /* outputs in double */
    double *ay, *adx, *adw; /* sums of |terms| */
} ref_ctx;

static void visit_fwd(void *p, size_t yi, size_t xi, size_t wi)
{
    ref_ctx *r = p;
    r->y[yi] += (double)r->x[xi] * r->w[wi];
    r->ay[yi] += fabs((double)r->x[xi] * r->w[wi]);
}

static void visit_bwd(void *p, size_t yi, size_t xi, size_t wi)
{
    ref_ctx *r = p;
    r->dx[xi] += (double)r->dy[yi] * r->w[wi];
    r->adx[xi] += fabs((double)r->dy[yi] * r->w[wi]);
    r->dw[wi] += (double)r->dy[yi] * r->x[xi];
    r->adw[wi] += fabs((double)r->dy[yi] * r->x[xi]);
}

/* Rounds an array through bf16/f16 (for references of low-precision
 * compute). */
static void round_via(float *v, size_t n, dl_dtype t)
{
    for (size_t i = 0; i < n; i++)
        v[i] = t == DL_BF16  ? dl_bf16_to_f32(dl_f32_to_bf16(v[i]))
               : t == DL_F16 ? dl_f16_to_f32(dl_f32_to_f16(v[i]))
                             : v[i];
}

/* Forward, backward data (accumulating onto random dx) and backward
 * filter (onto random dw, db) against the direct double reference. For
 * bf16/f16 compute the reference uses the operands rounded the same way
 * (x, w forward; dy, w for dx; dy, x for dw); tolerance 1e-5 of the sum of
 * |terms| plus 1e-5. */
static void conv_case_dy(const dl_conv_desc *d, dl_dtype compute, int with_bias, double keep);

static void conv_case(const dl_conv_desc *d, dl_dtype compute, int with_bias)
{
    conv_case_dy(d, compute, with_bias, 1.0);
}

/* conv_case with dy zero except a fraction `keep` of its values (chosen
 * at random): under 0.3 the backward ops take their sparse path. */
static void conv_case_dy(const dl_conv_desc *d, dl_dtype compute, int with_bias, double keep)
{
    size_t nx = xsize(d), ny = ysize(d), nw = wsize(d);
    float *x = frandv(nx), *w = frandv(nw), *b = frandv((size_t)d->k), *dy = frandv(ny);
    if (keep < 1.0)
        for (size_t i = 0; i < ny; i++)
            if (0.5 * (frand() + 1.0) >= keep)
                dy[i] = 0.0f;
    float *y = frandv(ny), *dx = frandv(nx), *dw = frandv(nw), *db = frandv((size_t)d->k);
    float *dx0 = fcopy(dx, nx), *dw0 = fcopy(dw, nw), *db0 = fcopy(db, (size_t)d->k);
    size_t wsb = dl_cpu_conv_workspace(cpu(), d, compute);
    void *ws = malloc(wsb ? wsb : 1);
    CHECK_OK(dl_cpu_conv_forward(cpu(), d, y, x, w, with_bias ? b : NULL, ws, compute));
    CHECK_OK(dl_cpu_conv_backward_data(cpu(), d, dx, dy, w, ws, compute));
    /* dx written over NaN garbage (every place gets a value or a 0) */
    float *dxs = malloc(nx * sizeof(float));
    for (size_t i = 0; i < nx; i++)
        dxs[i] = NAN;
    CHECK_OK(dl_cpu_conv_backward_data_set(cpu(), d, dxs, dy, w, ws, compute));
    CHECK_OK(dl_cpu_conv_backward_filter(cpu(), d, dw, with_bias ? db : NULL, dy, x, ws, compute));
    float *xr = fcopy(x, nx), *wr = fcopy(w, nw), *dyr = fcopy(dy, ny);
    round_via(xr, nx, compute);
    round_via(wr, nw, compute);
    round_via(dyr, ny, compute);
    ref_ctx r = {xr,
                 wr,
                 dyr,
                 calloc(ny, 8),
                 calloc(nx, 8),
                 calloc(nw, 8),
                 calloc(ny, 8),
                 calloc(nx, 8),
                 calloc(nw, 8)};
    conv_for_each(d, visit_fwd, &r);
    conv_for_each(d, visit_bwd, &r);
    for (size_t i = 0; i < ny; i++) {
        double want = r.y[i] + (with_bias ? b[(i / ((size_t)d->p * d->q)) % d->k] : 0.0);
        CHECK_MSG(fabs(y[i] - want) <= 1e-5 * r.ay[i] + 1e-5, "y[%zu] = %.8g, want %.8g", i, y[i],
                  want);
    }
    for (size_t i = 0; i < nx; i++)
        CHECK_MSG(fabs(dx[i] - (dx0[i] + r.dx[i])) <= 1e-5 * r.adx[i] + 1e-5,
                  "dx[%zu] = %.8g, want %.8g", i, dx[i], dx0[i] + r.dx[i]);
    for (size_t i = 0; i < nx; i++)
        CHECK_MSG(fabs(dxs[i] - r.dx[i]) <= 1e-5 * r.adx[i] + 1e-5, "dx=[%zu] = %.8g, want %.8g", i,
                  dxs[i], r.dx[i]);
    for (size_t i = 0; i < nw; i++)
        CHECK_MSG(fabs(dw[i] - (dw0[i] + r.dw[i])) <= 1e-5 * r.adw[i] + 1e-5,
                  "dw[%zu] = %.8g, want %.8g", i, dw[i], dw0[i] + r.dw[i]);
    for (int kk = 0; kk < d->k; kk++) {
        double s = 0, as = 0;
        for (int i = 0; i < d->n; i++)
            for (int j = 0; j < d->p * d->q; j++) {
                s += dy[((size_t)i * d->k + kk) * d->p * d->q + j];
                as += fabs(dy[((size_t)i * d->k + kk) * d->p * d->q + j]);
            }
        /* a float sum of thousands of terms: relative to their size */
        CHECK_NEAR(db[kk], with_bias ? db0[kk] + s : db0[kk], 1e-4 + 1e-6 * as);
    }
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
    free(dx0), free(dw0), free(db0), free(ws), free(xr), free(wr), free(dyr), free(dxs);
    free(r.y), free(r.dx), free(r.dw), free(r.ay), free(r.adx), free(r.adw);
}

static void test_conv_reference(void)
{
    static const int cases[][9] = {
        /* n, c, h, w, k, r, s, stride, pad */
        {1, 1, 5, 5, 1, 3, 3, 1, 0},
        {2, 3, 7, 6, 4, 3, 3, 1, 1},
        {3, 2, 9, 8, 5, 3, 2, 2, 1},
        {2, 4, 6, 7, 3, 1, 1, 1, 0},
        {1, 3, 8, 8, 2, 5, 5, 2, 2},
        {4, 1, 28, 28, 32, 3, 3, 1, 0},
        {3, 32, 13, 13, 64, 3, 3, 1, 0},
        {2, 5, 11, 10, 7, 4, 3, 3, 2},
        /* stride 1 (the unfold by runs): padding wider than half the
         * kernel, image by image (pq >= 100); rows under 8 floats */
        {2, 3, 12, 11, 4, 5, 5, 1, 3},
        {3, 2, 5, 4, 3, 5, 3, 1, 2},
        /* 8 channels and more (oneDNN's path where the build has it):
         * batches that end in a shorter chunk, strides, padding, odd
         * kernels, 1x1 */
        {13, 8, 9, 11, 12, 3, 2, 2, 1},
        {9, 16, 10, 10, 16, 1, 1, 2, 0},
        {10, 12, 8, 8, 20, 5, 5, 1, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        dl_conv_desc d = conv_desc(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]);
        conv_case(&d, DL_F32, (int)(i & 1) || i == 5);
        conv_case(&d, DL_BF16, 1);
    }
    dl_conv_desc d = conv_desc(2, 3, 7, 6, 4, 3, 3, 1, 1);
    conv_case(&d, DL_F16, 1);
    /* under 8 channels oneDNN takes the filter gradient (and the forward
     * from 16 outputs), the own kernels the data gradient at 1-3 channels */
    {
        char buf[256];
        dl_conv_desc s3 = conv_desc(4, 3, 16, 16, 32, 3, 3, 1, 1);
        CHECK_OK(dl_cpu_conv_algo(cpu(), &s3, DL_F32, buf, sizeof buf));
        if (strstr(buf, "oneDNN"))
            CHECK_MSG(strstr(buf, "(filter)") && strstr(buf, "(fwd)") && !strstr(buf, "(data)") &&
                          strstr(buf, "own kernels for data"),
                      "algo: %s", buf);
        conv_case(&s3, DL_F32, 1);
    }
    /* a batch larger than one workspace chunk (several GEMM passes) */
    d = conv_desc(40, 16, 24, 24, 8, 3, 3, 1, 1);
    conv_case(&d, DL_F32, 1);
    /* the own kernels at 8 channels and more too */
    setenv("DLBENCH_CONV", "own", 1);
    for (size_t i = sizeof cases / sizeof cases[0] - 4; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        d = conv_desc(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]);
        conv_case(&d, DL_F32, 1);
    }
    unsetenv("DLBENCH_CONV");
}

/* ---------------------------------------------------------------------- */
/* 1x1 convolutions (cpu_conv_1x1.c on AVX-512, oneDNN or im2col without)  */

/* The first index where got and want (double) differ by more than
 * 1e-5 * abs + 1e-5, or -1. */
static long first_off(const float *got, const double *want, const double *abs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= 1e-5 * abs[i] + 1e-5))
            return (long)i;
    return -1;
}

/* Outputs of one backend on one 1x1 case: y (with bias), dx added onto
 * dx0, dx written over NaN garbage, dw added onto dw0 with db, dw again
 * without db (db untouched). */
typedef struct k1_out {
    float *y, *dxa, *dxs, *dw, *db, *dw2;
} k1_out;

static void k1_run(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, const float *x,
                   const float *w, const float *b, const float *dy, const float *dx0,
                   const float *dw0, const float *db0, k1_out *o)
{
    size_t nx = xsize(d), ny = ysize(d), nw = wsize(d);
    o->y = malloc(ny * 4), o->dxa = fcopy(dx0, nx), o->dxs = malloc(nx * 4);
    o->dw = fcopy(dw0, nw), o->db = fcopy(db0, (size_t)d->k), o->dw2 = fcopy(dw0, nw);
    for (size_t i = 0; i < nx; i++)
        o->dxs[i] = NAN;
    size_t wsb = be->ops->conv_workspace(be, d, compute);
    void *ws = malloc(wsb + 1);
    CHECK_OK(be->ops->conv_forward(be, d, o->y, x, w, b, ws, wsb, compute));
    CHECK_OK(be->ops->conv_backward_data(be, d, o->dxa, dy, w, ws, wsb, compute));
    CHECK_OK(be->ops->conv_backward_data_set(be, d, o->dxs, dy, w, ws, wsb, compute));
    CHECK_OK(be->ops->conv_backward_filter(be, d, o->dw, o->db, dy, x, ws, wsb, compute));
    CHECK_OK(be->ops->conv_backward_filter(be, d, o->dw2, NULL, dy, x, ws, wsb, compute));
    free(ws);
}

static void k1_free(k1_out *o)
{
    free(o->y), free(o->dxa), free(o->dxs), free(o->dw), free(o->db), free(o->dw2);
}

/* One 1x1 case against a scalar double reference on the operands rounded
 * through compute, at 1 and 2 threads (which must agree bit for bit). */
static void k1_case(const dl_conv_desc *d, dl_dtype compute)
{
    size_t nx = xsize(d), ny = ysize(d), nw = wsize(d), pq = (size_t)d->p * d->q;
    size_t plane = (size_t)d->h * d->w;
    float *x = frandv(nx), *w = frandv(nw), *b = frandv((size_t)d->k), *dy = frandv(ny);
    float *dx0 = frandv(nx), *dw0 = frandv(nw), *db0 = frandv((size_t)d->k);
    float *xr = fcopy(x, nx), *wr = fcopy(w, nw), *dyr = fcopy(dy, ny);
    round_via(xr, nx, compute);
    round_via(wr, nw, compute);
    round_via(dyr, ny, compute);
    /* reference: y = W xs + b, dxs = W^T dy, dw = sum dy xs^T, db = sum dy */
    double *ry = calloc(ny, 8), *ay = calloc(ny, 8), *rdx = calloc(nx, 8), *adx = calloc(nx, 8);
    double *rdw = calloc(nw, 8), *adw = calloc(nw, 8), *rdb = calloc((size_t)d->k, 8);
    char *hit = calloc(nx, 1);
    for (int i = 0; i < d->n; i++)
        for (int kk = 0; kk < d->k; kk++)
            for (int oh = 0; oh < d->p; oh++)
                for (int ow = 0; ow < d->q; ow++) {
                    size_t yi = ((size_t)i * d->k + kk) * pq + (size_t)oh * d->q + ow;
                    ry[yi] = b[kk];
                    ay[yi] = fabs(b[kk]);
                    rdb[kk] += dy[yi];
                    for (int ch = 0; ch < d->c; ch++) {
                        size_t xi = ((size_t)i * d->c + ch) * plane +
                                    (size_t)oh * d->stride * d->w + (size_t)ow * d->stride;
                        size_t wi = (size_t)kk * d->c + ch;
                        double xw = (double)xr[xi] * wr[wi], gw = (double)dyr[yi] * wr[wi];
                        double gx = (double)dyr[yi] * xr[xi];
                        ry[yi] += xw, ay[yi] += fabs(xw);
                        rdx[xi] += gw, adx[xi] += fabs(gw);
                        rdw[wi] += gx, adw[wi] += fabs(gx);
                        hit[xi] = 1;
                    }
                }
    double *want_dxa = malloc(nx * 8), *want_dw = malloc(nw * 8);
    for (size_t i = 0; i < nx; i++)
        want_dxa[i] = dx0[i] + rdx[i];
    for (size_t i = 0; i < nw; i++)
        want_dw[i] = dw0[i] + rdw[i];
    k1_out out[2];
    for (int t = 0; t < 2; t++) {
        dl_backend *be = dl_backend_cpu_create(t + 1);
        k1_run(be, d, compute, x, w, b, dy, dx0, dw0, db0, &out[t]);
        dl_backend_cpu_destroy(be);
        k1_out *o = &out[t];
        long at;
        CHECK_MSG((at = first_off(o->y, ry, ay, ny)) < 0, "y[%ld] = %.8g, want %.8g", at,
                  at < 0 ? 0 : o->y[at], at < 0 ? 0 : ry[at]);
        CHECK_MSG((at = first_off(o->dxa, want_dxa, adx, nx)) < 0, "dx+=[%ld] = %.8g, want %.8g",
                  at, at < 0 ? 0 : o->dxa[at], at < 0 ? 0 : want_dxa[at]);
        CHECK_MSG((at = first_off(o->dxs, rdx, adx, nx)) < 0, "dx=[%ld] = %.8g, want %.8g", at,
                  at < 0 ? 0 : o->dxs[at], at < 0 ? 0 : rdx[at]);
        size_t bad = 0;
        for (size_t i = 0; i < nx; i++)
            if (!hit[i] && (memcmp(&o->dxa[i], &dx0[i], 4) || o->dxs[i] != 0.0f))
                bad++;
        CHECK_MSG(bad == 0, "%zu positions no output reads were changed (or not zeroed)", bad);
        CHECK_MSG((at = first_off(o->dw, want_dw, adw, nw)) < 0, "dw[%ld] = %.8g, want %.8g", at,
                  at < 0 ? 0 : o->dw[at], at < 0 ? 0 : want_dw[at]);
        CHECK(memcmp(o->dw, o->dw2, nw * 4) == 0);
        for (int kk = 0; kk < d->k; kk++)
            CHECK_NEAR(o->db[kk], db0[kk] + rdb[kk], 1e-4);
    }
    CHECK_MSG(memcmp(out[0].y, out[1].y, ny * 4) == 0 &&
                  memcmp(out[0].dxa, out[1].dxa, nx * 4) == 0 &&
                  memcmp(out[0].dxs, out[1].dxs, nx * 4) == 0 &&
                  memcmp(out[0].dw, out[1].dw, nw * 4) == 0 &&
                  memcmp(out[0].db, out[1].db, (size_t)d->k * 4) == 0,
              "1 and 2 threads differ (n %d c %d h %d w %d k %d stride %d)", d->n, d->c, d->h, d->w,
              d->k, d->stride);
    k1_free(&out[0]), k1_free(&out[1]);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0), free(xr), free(wr);
    free(dyr), free(ry), free(ay), free(rdx), free(adx), free(rdw), free(adw), free(rdb), free(hit);
    free(want_dxa), free(want_dw);
}

/* Dense 1x1 convolutions, pad 0: strides 1-3, sizes that are not
 * multiples of the stride, widths that leave vector tails (pixel counts
 * under, between and over 16 and 32), channel counts 1, 3, 16, 17, 64 on
 * both sides, batches over and under the filter's chunks; f32 and bf16,
 * both ISA paths, the default choice and DLBENCH_CONV=own. */
static void test_conv_1x1(void)
{
    static const int cases[][6] = {
        /* n, c, h, w, k, stride */
        {2, 1, 5, 7, 3, 1},    {3, 3, 9, 11, 16, 2},   {2, 16, 14, 14, 32, 2},
        {5, 17, 7, 7, 17, 1},  {3, 64, 6, 9, 16, 3},   {2, 16, 13, 15, 64, 2},
        {4, 17, 10, 33, 1, 2}, {9, 32, 14, 14, 64, 2}, {3, 64, 7, 7, 64, 1},
        {2, 3, 20, 19, 17, 3}, {17, 16, 8, 8, 24, 1},  {1, 64, 3, 35, 3, 2},
    };
    int was = dl_cpu_avx512();
    for (int isa = 0; isa < 2; isa++) {
        if (isa && !dl_cpu_set_avx512(1))
            break; /* no AVX-512 here: the AVX2 round was all */
        dl_cpu_set_avx512(isa);
        for (int own = 0; own < 2; own++) {
            if (own)
                setenv("DLBENCH_CONV", "own", 1);
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                const int *c = cases[i];
                dl_conv_desc d = conv_desc(c[0], c[1], c[2], c[3], c[4], 1, 1, c[5], 0);
                k1_case(&d, DL_F32);
                k1_case(&d, DL_BF16);
            }
            unsetenv("DLBENCH_CONV");
        }
    }
    dl_cpu_set_avx512(was);
    /* with AVX-512 the own kernels take them, and say so */
    if (dl_cpu_avx512()) {
        char buf[128];
        dl_conv_desc d = conv_desc(4, 16, 14, 14, 32, 1, 1, 2, 0);
        CHECK_OK(dl_cpu_conv_algo(cpu(), &d, DL_F32, buf, sizeof buf));
        CHECK_MSG(strstr(buf, "1x1") != NULL, "algo: %s", buf);
    }
}

/* Stride-1 convolutions of 1-3 input channels and up to 15 outputs:
 * cpu_conv_small.c's direct forward and filter kernels, 16 and 8 lanes
 * (every output-channel block split, pads wider than the kernel, planes
 * whose padded rows end mid-vector, the forward's bands of rows), against
 * the double reference; their switch off gives the other paths, and the
 * algorithm text names them. */
static void test_conv_small(void)
{
    static const int cases[][9] =
        {
            /* n, c, h, w, k, r, s, stride, pad */
            {3, 3, 32, 32, 6, 5, 5, 1, 0}, /* LeNet on RGB */
            {2, 1, 28, 28, 6, 5, 5, 1, 2}, /* LeNet on MNIST */
            {3, 1, 28, 28, 15, 5, 5, 1, 2}, {2, 2, 9, 30, 7, 3, 3, 1, 4},
            {2, 3, 11, 5, 9, 3, 2, 1, 1},   {1, 1, 3, 3, 1, 3, 3, 1, 0},
            {2, 3, 60, 61, 8, 7, 7, 1, 3}, /* bands of rows; the filter's planes too large */
            {2, 2, 40, 13, 13, 1, 1, 1, 0},
        };
    int was = dl_cpu_avx512();
    for (int isa = 0; isa < 2; isa++) {
        if (isa && !dl_cpu_set_avx512(1))
            break; /* no AVX-512 here: the AVX2 round was all */
        dl_cpu_set_avx512(isa);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int *c = cases[i];
            dl_conv_desc d = conv_desc(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]);
            CHECK_MSG(dl_cpu_conv_small_fits(&d, DL_F32), "case %zu: small kernels expected", i);
            conv_case(&d, DL_F32, (int)(i & 1));
            conv_case(&d, DL_BF16, 1);
        }
    }
    dl_cpu_set_avx512(was);
    dl_conv_desc d = conv_desc(3, 3, 32, 32, 6, 5, 5, 1, 0);
    char buf[256];
    CHECK_OK(dl_cpu_conv_algo(cpu(), &d, DL_F32, buf, sizeof buf));
    CHECK_MSG(strstr(buf, "direct kernels for few channels") != NULL, "algo: %s", buf);
    setenv("DLBENCH_CONV_SMALL", "0", 1);
    CHECK(!dl_cpu_conv_small_fits(&d, DL_F32));
    conv_case(&d, DL_F32, 1);
    unsetenv("DLBENCH_CONV_SMALL");
    /* a grey stem's text names the lanes filter kernel, whole within the
     * layer's 192 bytes even behind oneDNN's clauses for emulated bf16 */
    {
        char algo[192];
        dl_conv_desc g = conv_desc(8, 1, 28, 28, 16, 3, 3, 1, 1);
        for (int t = 0; t < 2; t++) {
            CHECK_OK(dl_cpu_conv_algo(cpu(), &g, t ? DL_BF16 : DL_F32, algo, sizeof algo));
            if (strstr(algo, "oneDNN"))
                CHECK_MSG(strstr(algo, "own filter kernel if y blocked") != NULL, "algo: %s", algo);
        }
    }
    /* stride 2, 4 input channels, 16 outputs: not theirs */
    d = conv_desc(2, 3, 32, 32, 6, 5, 5, 2, 0);
    CHECK(!dl_cpu_conv_small_fits(&d, DL_F32));
    d = conv_desc(2, 4, 32, 32, 6, 5, 5, 1, 0);
    CHECK(!dl_cpu_conv_small_fits(&d, DL_F32));
    d = conv_desc(2, 3, 32, 32, 16, 5, 5, 1, 0);
    CHECK(!dl_cpu_conv_small_fits(&d, DL_F32));
}

/* 3x3 stride-1 convolutions from 32 channels on, in f32: oneDNN's
 * Winograd kernels (F(4x4, 3x3)) where the CPU has AVX-512, against the
 * double reference with the same tolerance as the direct ones: all three
 * directions; forward and filter only (pad 0); 32 input channels. */
static void test_conv_winograd(void)
{
    static const int cases[][9] = {
        /* n, c, h, w, k, r, s, stride, pad */
        {4, 64, 9, 10, 64, 3, 3, 1, 1},
        {3, 32, 16, 16, 64, 3, 3, 1, 1},
        {2, 64, 8, 8, 72, 3, 3, 1, 0},
        {35, 64, 6, 6, 64, 3, 3, 1, 1}, /* chunks of images and a shorter last one */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        dl_conv_desc d = conv_desc(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]);
        conv_case(&d, DL_F32, (int)(i & 1));
    }
    char buf[256];
    dl_conv_desc d = conv_desc(4, 64, 9, 10, 64, 3, 3, 1, 1);
    CHECK_OK(dl_cpu_conv_algo(cpu(), &d, DL_F32, buf, sizeof buf));
    if (strstr(buf, "oneDNN") && strstr(buf, "avx512"))
        CHECK_MSG(strstr(buf, "wino") != NULL, "algo: %s", buf);
    else if (strstr(buf, "oneDNN") && !dl_cpu_avx512()) /* the own F(2x2, 3x3) on blocks */
        CHECK_MSG(strstr(buf, "Winograd F(2x2, 3x3)") != NULL, "algo: %s", buf);
    else
        printf("  (no Winograd here: %s)\n", buf);
    /* the rule's off switch: the direct kernels, the same sums within
     * the tolerance */
    setenv("DLBENCH_CONV_WINO", "0", 1);
    CHECK_OK(dl_cpu_conv_algo(cpu(), &d, DL_F32, buf, sizeof buf));
    CHECK_MSG(strstr(buf, "wino") == NULL && strstr(buf, "Winograd") == NULL, "algo: %s", buf);
    conv_case(&d, DL_F32, 1);
    unsetenv("DLBENCH_CONV_WINO");
}

/* Convolutions give the same bits at 1 and 3 threads (oneDNN's chunks
 * are fixed; the own kernels split by image). */
static void conv_threads_case(dl_conv_desc d, dl_dtype compute);
static void test_conv_threads(void)
{
    conv_threads_case(conv_desc(19, 16, 12, 12, 24, 3, 3, 1, 1), DL_F32);
    /* dilated, dense, and grouped: oneDNN's chunks */
    conv_threads_case(conv_desc_gd(19, 32, 9, 9, 32, 3, 3, 1, 1, 8, 1), DL_F32);
    conv_threads_case(conv_desc_gd(19, 16, 12, 12, 24, 3, 3, 1, 2, 1, 2), DL_F32);
    /* the 1x1 kernels: images split by part, dw summed per chunk */
    conv_threads_case(conv_desc(37, 16, 13, 13, 24, 1, 1, 2, 0), DL_F32);
    conv_threads_case(conv_desc(37, 32, 7, 7, 64, 1, 1, 1, 0), DL_F32);
    /* the bf16 kernels (cpu_conv_bf16.c): the filter's chunks, stride 2's
     * phase planes, 1x1 */
    conv_threads_case(conv_desc(23, 16, 14, 14, 20, 3, 3, 1, 1), DL_BF16);
    conv_threads_case(conv_desc(21, 16, 28, 28, 32, 3, 3, 2, 1), DL_BF16);
    conv_threads_case(conv_desc(19, 24, 14, 14, 40, 1, 1, 1, 0), DL_BF16);
    /* under 8 input channels on AVX-512: oneDNN's forward and filter, own
     * data (3), all three oneDNN's (6). Elsewhere these run im2col +
     * GEMM, whose filter gradient splits its long k over the threads and
     * adds the parts (cpu_gemm.c): fixed for a thread count, not across */
    if (dl_cpu_avx512()) {
        conv_threads_case(conv_desc(19, 3, 20, 20, 32, 3, 3, 1, 1), DL_F32);
        conv_threads_case(conv_desc(21, 6, 14, 14, 16, 5, 5, 1, 0), DL_F32);
    }
    /* oneDNN's Winograd kernels (f32, 64 channels) */
    conv_threads_case(conv_desc(37, 64, 8, 8, 64, 3, 3, 1, 1), DL_F32);
    /* the depthwise kernels with channels in lanes: blocks split by part */
    conv_threads_case(conv_desc_gd(9, 20, 9, 9, 20, 3, 3, 1, 1, 20, 1), DL_F32);
    conv_threads_case(conv_desc_gd(9, 20, 10, 10, 20, 3, 3, 2, 1, 20, 1), DL_F32);
    /* the depthwise kernels: planes split by part, dw summed per channel */
    conv_threads_case(conv_desc_gd(21, 24, 14, 14, 48, 3, 3, 1, 1, 24, 1), DL_F32);
    conv_threads_case(conv_desc_gd(17, 40, 16, 16, 40, 3, 3, 2, 1, 40, 1), DL_BF16);
}

static void conv_threads_case(dl_conv_desc d, dl_dtype compute)
{
    size_t nx = xsize(&d), ny = ysize(&d), nw = wsize(&d);
    float *x = frandv(nx), *w = frandv(nw), *dy = frandv(ny), *out[2][4];
    for (int k = 0; k < 2; k++) {
        dl_backend *be = dl_backend_cpu_create(k == 0 ? 1 : 3);
        float *y = out[k][0] = malloc(ny * 4), *dx = out[k][1] = calloc(nx, 4);
        float *dw = out[k][2] = calloc(nw, 4), *db = out[k][3] = calloc((size_t)d.k, 4);
        size_t wsb = be->ops->conv_workspace(be, &d, compute);
        void *ws = malloc(wsb + 1);
        CHECK_OK(be->ops->conv_forward(be, &d, y, x, w, NULL, ws, wsb, compute));
        CHECK_OK(be->ops->conv_backward_data(be, &d, dx, dy, w, ws, wsb, compute));
        CHECK_OK(be->ops->conv_backward_filter(be, &d, dw, db, dy, x, ws, wsb, compute));
        free(ws);
        dl_backend_cpu_destroy(be);
    }
    size_t sizes[4] = {ny, nx, nw, (size_t)d.k};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(memcmp(out[0][i], out[1][i], sizes[i] * 4) == 0, "output %d differs", i);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++)
            free(out[k][i]);
    free(x), free(w), free(dy);
}

/* The bf16 kernels of stride-1 convolutions (cpu_conv_bf16.c: forward and
 * data on channel pairs, the filter as shifted dot products) against the
 * double reference on rounded operands: kernels with more offsets than a
 * filter tile (5x5, 7x7), channel counts that leave short tiles and an
 * unpaired channel (1, 3, 7, 12, 20), rectangular kernels, padding 0 to 3
 * (so the data gradient's own padding r-1-pad is 0 to 3 too), planes of
 * 1 to 3 vectors a row, batches that end in a shorter chunk, stride 2;
 * the wide planes take them by default, the narrow ones under
 * DLBENCH_CONV=own. */
static void test_conv_bf16_kernels(void)
{
    static const int cases[][9] = {
        /* n, c, h, w, k, r, s, stride, pad */
        {5, 16, 28, 28, 16, 3, 3, 1, 1},
        {11, 16, 14, 14, 32, 3, 3, 1, 1},
        {7, 3, 12, 11, 4, 5, 5, 1, 3},
        {3, 8, 20, 17, 7, 3, 2, 1, 0},
        {2, 1, 9, 40, 5, 7, 7, 1, 3},
        {4, 12, 7, 7, 20, 3, 3, 1, 1},
        /* 1x1 at stride 1 (the filter's tiles over input channels),
         * padded too */
        {3, 20, 14, 14, 36, 1, 1, 1, 0},
        {2, 7, 9, 15, 11, 1, 1, 1, 0},
        {2, 5, 6, 7, 9, 1, 1, 1, 1},
        /* stride 2 (forward and filter on phase planes, data as four
         * phase correlations; odd and even sizes and padding, so either
         * parity starts a row and the phases differ in size and taps) */
        {6, 16, 28, 28, 32, 3, 3, 2, 1},
        {3, 3, 13, 12, 5, 3, 3, 2, 1},
        {2, 4, 11, 9, 6, 5, 5, 2, 2},
        {2, 1, 10, 10, 4, 4, 4, 2, 1},
        {3, 8, 9, 14, 7, 3, 2, 2, 0},
        {2, 2, 37, 35, 3, 3, 3, 2, 1},
        /* a 7x7 stem; 2x3 planes; padding past r-1 (a phase's first tap
         * reads below dy's first row); more output channels than pairs */
        {2, 5, 15, 17, 9, 7, 7, 2, 3},
        {3, 6, 2, 3, 5, 2, 2, 2, 0},
        {2, 4, 8, 9, 4, 3, 3, 2, 3},
        {2, 40, 14, 14, 12, 3, 3, 2, 1},
        /* dy rows of 16, a whole vector: the pitch needs its column past */
        {2, 6, 10, 32, 5, 3, 3, 2, 1},
    };
    dl_backend *be = cpu();
    for (int own = 0; own < 2; own++) {
        if (own)
            setenv("DLBENCH_CONV", "own", 1);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int *c = cases[i];
            dl_conv_desc d = conv_desc(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]);
            conv_case(&d, DL_BF16, (int)(i & 1));
        }
        unsetenv("DLBENCH_CONV");
    }
    /* where the CPU has vdpbf16ps, the ResNet shape takes the kernel and says so */
    dl_conv_desc d = conv_desc(5, 16, 28, 28, 16, 3, 3, 1, 1);
    char buf[256];
    CHECK_OK(dl_cpu_conv_algo(be, &d, DL_BF16, buf, sizeof buf));
    int want = dl_cpu(be)->has_avx512_bf16 && dl_cpu_avx512();
    CHECK_MSG((strstr(buf, "vdpbf16ps") != NULL) == want, "algo: %s", buf);
    CHECK_MSG(!want || strstr(buf, "channel pairs") != NULL, "algo: %s", buf);
    /* and its stride-2 layer, data gradient included */
    dl_conv_desc d2 = conv_desc(5, 16, 28, 28, 32, 3, 3, 2, 1);
    CHECK_OK(dl_cpu_conv_algo(be, &d2, DL_BF16, buf, sizeof buf));
    CHECK_MSG(!want || strstr(buf, "channel pairs") != NULL, "algo (stride 2): %s", buf);
    CHECK_OK(dl_cpu_conv_algo(be, &d, DL_F32, buf, sizeof buf));
    CHECK_MSG(strstr(buf, "vdpbf16ps") == NULL, "algo (f32): %s", buf);
}

/* bf16 where the CPU has no bf16 arithmetic (forced here, whatever this
 * CPU has), and fp16 on every CPU: oneDNN's f32 primitives on operands
 * rounded to the type, not its emulated bf16 kernels nor the own im2col
 * path. Each direction against the double reference on rounded operands
 * (conv_case): without the rounding the errors are bf16's (~4e-3 of the
 * sums), 400 times the tolerance. Shapes from 8 channels (oneDNN's),
 * Winograd's (32 -> 64 3x3), a shorter last chunk, stride 2, 1x1 from
 * 128 channels; fp16 below 8 channels too (f32's rule by direction). */
static void test_conv_lowp_emulated(void)
{
    static const int cases[][9] = {
        /* n, c, h, w, k, r, s, stride, pad */
        {5, 16, 28, 28, 16, 3, 3, 1, 1}, {3, 32, 13, 13, 64, 3, 3, 1, 1},
        {13, 8, 9, 11, 12, 3, 2, 2, 1},  {9, 16, 10, 10, 16, 1, 1, 2, 0},
        {6, 16, 28, 28, 32, 3, 3, 2, 1}, {2, 130, 7, 7, 20, 1, 1, 1, 0},
        {4, 3, 16, 16, 32, 3, 3, 1, 1},
    };
    dl_backend *be = cpu();
    int had = dl_cpu(be)->has_avx512_bf16;
    dl_cpu(be)->has_avx512_bf16 = 0;
    int on_dnnl = 0;
    for (int t = 0; t < 2; t++) {
        dl_dtype type = t ? DL_F16 : DL_BF16;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int *c = cases[i];
            dl_conv_desc d = conv_desc(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]);
            conv_case(&d, type, (int)(i & 1));
            char buf[256];
            CHECK_OK(dl_cpu_conv_algo(be, &d, type, buf, sizeof buf));
            CHECK_MSG(!strstr(buf, "oneDNN") ||
                          strstr(buf, t ? "rounded to fp16" : "rounded to bf16"),
                      "algo: %s", buf);
            on_dnnl += strstr(buf, "oneDNN") != NULL;
            CHECK_MSG(!strstr(buf, "jit_bf16") && !strstr(buf, "vdpbf16ps"), "algo: %s", buf);
        }
    }
    dl_cpu(be)->has_avx512_bf16 = had;
#ifdef DL_HAVE_DNNL
    /* the path under test ran: from 8 channels the shapes are oneDNN's
     * (1x1 below 128 channels is the own kernels' where AVX-512 is) */
    CHECK_MSG(on_dnnl >= 6, "%d of the 14 cases on oneDNN", on_dnnl);
#endif
}

/* Grouped, depthwise and dilated convolutions against the same double
 * reference, in f32, bf16 and f16, by default (oneDNN from 8 channels
 * where the build has it) and with DLBENCH_CONV=own (cpu_conv_grouped.c;
 * more (image, group) pairs than its 16 parts): groups of 1 to 8
 * channels, with and without a channel multiplier. */
static void test_conv_grouped(void)
{
    static const int cases[][11] = {
        /* n, c, h, w, k, r, s, stride, pad, groups, dilation */
        {2, 6, 7, 6, 4, 3, 3, 1, 1, 2, 1},   {3, 4, 8, 7, 4, 3, 3, 2, 1, 4, 1},
        {2, 3, 6, 6, 6, 3, 3, 1, 1, 3, 1},   {1, 3, 9, 8, 6, 3, 3, 1, 2, 3, 2},
        {2, 4, 10, 9, 5, 3, 2, 1, 2, 1, 2},  {5, 8, 5, 5, 8, 1, 1, 1, 0, 8, 1},
        {9, 16, 6, 6, 32, 3, 3, 2, 1, 4, 1}, {2, 16, 12, 12, 16, 5, 5, 1, 2, 16, 1},
        {3, 64, 7, 7, 64, 3, 3, 1, 1, 8, 1}, {2, 32, 9, 8, 64, 3, 3, 1, 1, 16, 1},
        {2, 24, 8, 8, 48, 1, 1, 1, 0, 3, 1}, {2, 16, 10, 10, 16, 3, 3, 2, 2, 2, 2},
    };
    for (int own = 0; own < 2; own++) {
        if (own)
            setenv("DLBENCH_CONV", "own", 1);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int *c = cases[i];
            dl_conv_desc d =
                conv_desc_gd(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]);
            conv_case(&d, DL_F32, (int)(i & 1));
            conv_case(&d, i % 2 ? DL_BF16 : DL_F16, 1);
        }
        char buf[256];
        dl_conv_desc d = conv_desc_gd(3, 64, 7, 7, 64, 3, 3, 1, 1, 8, 1);
        CHECK_OK(dl_cpu_conv_algo(cpu(), &d, DL_F32, buf, sizeof buf));
        if (own)
            CHECK_MSG(strstr(buf, "grouped im2col") != NULL, "algo (own): %s", buf);
        else if (!strstr(buf, "oneDNN"))
            printf("  (no oneDNN in this build: %s)\n", buf);
        unsetenv("DLBENCH_CONV");
    }
    /* channels not divisible by the groups, dilation that leaves no output */
    float buf[256] = {0};
    dl_conv_desc d = conv_desc_gd(1, 6, 5, 5, 4, 3, 3, 1, 1, 4, 1);
    CHECK(dl_cpu_conv_forward(cpu(), &d, buf, buf, buf, NULL, buf, DL_F32) == DL_EINVAL);
    CHECK(strstr(dl_error_message(), "divisible") != NULL);
    d = conv_desc_gd(1, 2, 5, 5, 2, 3, 3, 1, 0, 2, 3);
    CHECK(dl_cpu_conv_backward_data(cpu(), &d, buf, buf, buf, buf, DL_F32) == DL_ESHAPE);
}

/* Dense dilated convolutions from 8 input channels: oneDNN where the
 * build has it (its kernels dilate in place), the grouped path otherwise
 * and with DLBENCH_CONV=own, both against the double reference: "same"
 * padding at dilation 2, stride 2 at dilation 3, a rectangular kernel,
 * f32 and bf16 (oneDNN) and f16 (always the grouped path). */
static void test_conv_dilated(void)
{
    static const int cases[][11] = {
        /* n, c, h, w, k, r, s, stride, pad, groups, dilation */
        {3, 16, 12, 11, 24, 3, 3, 1, 2, 1, 2},
        {2, 8, 13, 13, 8, 3, 3, 2, 3, 1, 3},
        {2, 12, 9, 14, 16, 3, 5, 1, 2, 1, 2},
    };
    for (int own = 0; own < 2; own++) {
        if (own)
            setenv("DLBENCH_CONV", "own", 1);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const int *c = cases[i];
            dl_conv_desc d =
                conv_desc_gd(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]);
            conv_case(&d, DL_F32, (int)(i & 1));
            conv_case(&d, DL_BF16, 1);
            conv_case(&d, DL_F16, 0);
        }
        char buf[256];
        dl_conv_desc d = conv_desc_gd(3, 16, 12, 11, 24, 3, 3, 1, 2, 1, 2);
        CHECK_OK(dl_cpu_conv_algo(cpu(), &d, DL_F32, buf, sizeof buf));
        if (own)
            CHECK_MSG(strstr(buf, "grouped") != NULL, "algo (own): %s", buf);
        else if (!strstr(buf, "oneDNN"))
            printf("  (no oneDNN in this build: %s)\n", buf);
        unsetenv("DLBENCH_CONV");
    }
}

/* The depthwise kernels (cpu_conv_depthwise.c: groups = input channels)
 * against the same double reference, in f32, bf16 and f16: the data
 * gradient as a correlation (stride 1, padding within the kernel) and as
 * a scatter (strides 2 and 3, padding past the kernel, rectangular kernels
 * padded past their short side); stride 2 with rows long enough for the
 * vector split and either parity of padding; dilation; 1x1, 5x5, 7x7
 * (taps past a multiple of nine); channel multipliers 2 and 3; rows of 1,
 * 7, 9, 17 and 33 outputs (vector tails); more units than the 16 parts. */
static void test_conv_depthwise(void)
{
    static const int cases[][11] = {
        /* n, c, h, w, k, r, s, stride, pad, groups, dilation */
        {3, 8, 12, 33, 8, 3, 3, 1, 1, 8, 1}, {2, 6, 9, 17, 6, 3, 3, 1, 0, 6, 1},
        {2, 4, 7, 9, 4, 3, 3, 1, 3, 4, 1},   {3, 5, 10, 36, 5, 3, 3, 2, 1, 5, 1},
        {2, 4, 11, 35, 8, 3, 3, 2, 0, 4, 1}, {2, 3, 12, 40, 3, 5, 5, 2, 2, 3, 1},
        {2, 3, 13, 14, 6, 3, 3, 3, 1, 3, 1}, {2, 4, 14, 13, 4, 3, 3, 1, 2, 4, 2},
        {1, 3, 15, 16, 9, 3, 3, 2, 3, 3, 3}, {2, 5, 8, 19, 5, 3, 5, 1, 2, 5, 1},
        {2, 4, 16, 16, 4, 5, 5, 1, 2, 4, 1}, {2, 3, 11, 12, 3, 7, 7, 1, 3, 3, 1},
        {3, 7, 5, 7, 7, 1, 1, 1, 0, 7, 1},   {2, 2, 6, 1, 4, 3, 1, 1, 1, 2, 1},
        {9, 4, 6, 6, 8, 3, 3, 1, 1, 4, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        dl_conv_desc d =
            conv_desc_gd(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]);
        conv_case(&d, DL_F32, (int)(i & 1));
        conv_case(&d, DL_BF16, 1);
        conv_case(&d, DL_F16, 0);
    }
    /* from 8 channels without a multiplier: channels in lanes (blocks of
     * 8, the last one short), the data gradient gathered (stride 1, pad
     * within a square extent) or scattered (strides 2 and 3, pad past the
     * extent, a rectangular kernel), 49 taps (six passes of the filter's
     * nine), dilation, rows of 7 to 40 outputs, more units than parts */
    static const int lane_cases[][11] = {
        {3, 8, 7, 7, 8, 3, 3, 1, 1, 8, 1},     {2, 12, 14, 14, 12, 3, 3, 2, 1, 12, 1},
        {2, 20, 9, 13, 20, 3, 3, 1, 0, 20, 1}, {2, 16, 11, 10, 16, 5, 5, 1, 2, 16, 1},
        {1, 9, 12, 12, 9, 7, 7, 1, 3, 9, 1},   {2, 16, 13, 15, 16, 3, 3, 3, 1, 16, 1},
        {2, 8, 12, 12, 8, 3, 3, 1, 2, 8, 2},   {2, 8, 10, 10, 8, 3, 5, 1, 1, 8, 1},
        {7, 24, 6, 6, 24, 3, 3, 1, 1, 24, 1},  {2, 8, 12, 12, 8, 3, 3, 1, 3, 8, 1},
        {2, 8, 40, 40, 8, 3, 3, 1, 1, 8, 1},   {3, 10, 15, 16, 10, 3, 3, 2, 0, 10, 1},
    };
    for (size_t i = 0; i < sizeof lane_cases / sizeof lane_cases[0]; i++) {
        const int *c = lane_cases[i];
        dl_conv_desc d =
            conv_desc_gd(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]);
        conv_case(&d, DL_F32, (int)(i & 1));
        conv_case(&d, DL_BF16, 1);
        conv_case(&d, DL_F16, 0);
    }
    char buf[160];
    dl_conv_desc d = conv_desc_gd(2, 8, 12, 12, 8, 3, 3, 1, 1, 8, 1);
    CHECK_OK(dl_cpu_conv_algo(cpu(), &d, DL_F32, buf, sizeof buf));
    CHECK_MSG(strstr(buf, "depthwise") != NULL, "algo: %s", buf);
    /* grouped with two channels a group is not depthwise: oneDNN or the
     * per-group products */
    d = conv_desc_gd(2, 8, 12, 12, 8, 3, 3, 1, 1, 4, 1);
    CHECK_OK(dl_cpu_conv_algo(cpu(), &d, DL_F32, buf, sizeof buf));
    CHECK_MSG(strstr(buf, "depthwise") == NULL, "algo: %s", buf);
}

/* The sparse-dy backward (f32, channels a multiple of 16) against the
 * same double reference: the CNN's second convolution, stride and
 * padding, 1x1 and 5x5 kernels, kernel rows done one at a time (48
 * channels), an all-zero dy, and a density just under the threshold. */
static void test_conv_sparse_dy(void)
{
    static const int cases[][9] = {
        /* n, c, h, w, k, r, s, stride, pad */
        {3, 32, 13, 13, 64, 3, 3, 1, 0}, {2, 16, 9, 8, 8, 3, 3, 2, 1},
        {2, 16, 6, 7, 5, 1, 1, 1, 0},    {2, 32, 9, 9, 4, 5, 5, 1, 2},
        {2, 48, 7, 7, 3, 3, 3, 1, 1},    {5, 64, 4, 4, 20, 1, 1, 1, 0},
    };
    static const double keep[] = {0.2, 0.05, 0.0, 0.28};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        dl_conv_desc d = conv_desc(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]);
        for (size_t j = 0; j < sizeof keep / sizeof keep[0]; j++)
            conv_case_dy(&d, DL_F32, (int)((i + j) & 1), keep[j]);
    }
    /* sparse dy in bf16 compute goes through the dense path */
    dl_conv_desc d = conv_desc(3, 32, 13, 13, 64, 3, 3, 1, 0);
    conv_case_dy(&d, DL_BF16, 1, 0.2);
}

/* Loss L = sum_i g_i y_i(x, w) computed with the kernel's own forward, in
 * double. */
static double conv_loss(const dl_conv_desc *d, const float *x, const float *w, const float *b,
                        const float *g, void *ws)
{
    size_t ny = ysize(d);
    float *y = malloc(ny * sizeof *y);
    dl_cpu_conv_forward(cpu(), d, y, x, w, b, ws, DL_F32);
    double s = 0;
    for (size_t i = 0; i < ny; i++)
        s += (double)g[i] * y[i];
    free(y);
    return s;
}

/* Backward of the kernel against central differences of its forward.
 * Convolution is linear in x, w and b, so with step 0.05 the difference
 * quotient carries only f32 rounding of y: tolerance 2e-3 absolute. */
static void test_conv_fd(void)
{
    dl_conv_desc d = conv_desc(2, 3, 6, 5, 2, 3, 2, 2, 1);
    size_t nx = xsize(&d), nw = wsize(&d), ny = ysize(&d);
    float *x = frandv(nx), *w = frandv(nw), *b = frandv(2), *g = frandv(ny);
    float *dx = calloc(nx, 4), *dw = calloc(nw, 4), *db = calloc(2, 4);
    void *ws = malloc(dl_cpu_conv_workspace(cpu(), &d, DL_F32));
    CHECK_OK(dl_cpu_conv_backward_data(cpu(), &d, dx, g, w, ws, DL_F32));
    CHECK_OK(dl_cpu_conv_backward_filter(cpu(), &d, dw, db, g, x, ws, DL_F32));
    const float h = 0.05f;
    struct {
        float *v, *grad;
        size_t n;
    } params[3] = {{x, dx, nx}, {w, dw, nw}, {b, db, 2}};
    for (int p = 0; p < 3; p++)
        for (size_t i = 0; i < params[p].n; i++) {
            float keep = params[p].v[i];
            params[p].v[i] = keep + h;
            double lp = conv_loss(&d, x, w, b, g, ws);
            params[p].v[i] = keep - h;
            double lm = conv_loss(&d, x, w, b, g, ws);
            params[p].v[i] = keep;
            CHECK_NEAR(params[p].grad[i], (lp - lm) / (2 * h), 2e-3);
        }
    free(x), free(w), free(b), free(g), free(dx), free(dw), free(db), free(ws);
}

static void test_conv_errors(void)
{
    dl_conv_desc d = conv_desc(1, 1, 5, 5, 1, 3, 3, 1, 0);
    d.p = 4;
    float buf[64] = {0};
    CHECK(dl_cpu_conv_forward(cpu(), &d, buf, buf, buf, NULL, buf, DL_F32) == DL_ESHAPE);
    d = conv_desc(1, 1, 5, 5, 1, 3, 3, 1, 0);
    CHECK(dl_cpu_conv_forward(cpu(), &d, buf, buf, buf, NULL, buf, DL_I32) == DL_EINVAL);
    d.stride = 0;
    CHECK(dl_cpu_conv_backward_data(cpu(), &d, buf, buf, buf, buf, DL_F32) == DL_EINVAL);
}

/* ---------------------------------------------------------------------- */
/* pooling                                                                 */

static dl_pool_desc pool_desc(int n, int c, int h, int w, int size, int stride, int pad)
{
    dl_pool_desc d = {n, c, h, w, size, stride, pad, 0, 0, 0};
    d.p = (h + 2 * pad - size) / stride + 1;
    d.q = (w + 2 * pad - size) / stride + 1;
    return d;
}

/* Reference pooling: for each output, the padded window scanned row by
 * row; max keeps the first strict maximum (its flat input index in arg),
 * avg divides the sum by size*size (every case here keeps windows inside
 * the padded input, so that is PyTorch's count_include_pad divisor). */
static void ref_pool(dl_pool_kind kind, const dl_pool_desc *d, const float *x, double *y, long *arg)
{
    for (int pl = 0; pl < d->n * d->c; pl++)
        for (int oh = 0; oh < d->p; oh++)
            for (int ow = 0; ow < d->q; ow++) {
                double best = -INFINITY, sum = 0;
                long where = -1;
                for (int a = 0; a < d->size; a++)
                    for (int b2 = 0; b2 < d->size; b2++) {
                        int ih = oh * d->stride - d->pad + a, iw = ow * d->stride - d->pad + b2;
                        if (ih < 0 || iw < 0 || ih >= d->h || iw >= d->w)
                            continue;
                        long xi = ((long)pl * d->h + ih) * d->w + iw;
                        sum += x[xi];
                        if (x[xi] > best) {
                            best = x[xi];
                            where = xi;
                        }
                    }
                size_t yi = ((size_t)pl * d->p + oh) * d->q + ow;
                y[yi] = kind == DL_POOL_MAX ? best : sum / (d->size * d->size);
                arg[yi] = where;
            }
}

static void pool_case(dl_pool_kind kind, const dl_pool_desc *d, int ties)
{
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->c * d->p * d->q;
    float *x = frandv(nx), *y = malloc(ny * 4), *dy = frandv(ny), *dx = frandv(nx);
    if (ties) /* few distinct values: max windows hold ties */
        for (size_t i = 0; i < nx; i++)
            x[i] = (float)(int)(x[i] * 2.0f);
    float *dx0 = fcopy(dx, nx);
    double *yr = malloc(ny * 8), *dxr = calloc(nx, 8);
    long *arg = malloc(ny * sizeof *arg);
    ref_pool(kind, d, x, yr, arg);
    CHECK_OK(dl_cpu_pool_forward(cpu(), kind, d, y, x));
    CHECK_OK(dl_cpu_pool_backward(cpu(), kind, d, dx, dy, x, y));
    for (size_t i = 0; i < ny; i++)
        CHECK_NEAR(y[i], yr[i], 1e-6);
    for (int pl = 0; pl < d->n * d->c; pl++)
        for (int oh = 0; oh < d->p; oh++)
            for (int ow = 0; ow < d->q; ow++) {
                size_t yi = ((size_t)pl * d->p + oh) * d->q + ow;
                if (kind == DL_POOL_MAX) {
                    dxr[arg[yi]] += dy[yi];
                    continue;
                }
                for (int a = 0; a < d->size; a++)
                    for (int b2 = 0; b2 < d->size; b2++) {
                        int ih = oh * d->stride - d->pad + a, iw = ow * d->stride - d->pad + b2;
                        if (ih >= 0 && iw >= 0 && ih < d->h && iw < d->w)
                            dxr[((size_t)pl * d->h + ih) * d->w + iw] +=
                                dy[yi] / (d->size * d->size);
                    }
            }
    for (size_t i = 0; i < nx; i++)
        CHECK_NEAR(dx[i], dx0[i] + dxr[i], 1e-5);
    /* average pooling: the scalar loop's float sums over the window
     * clipped to the input, in its order, over the count with padding,
     * bit for bit (the vector paths keep them) */
    for (int pl = 0; kind == DL_POOL_AVG && pl < d->n * d->c; pl++)
        for (int oh = 0; oh < d->p; oh++)
            for (int ow = 0; ow < d->q; ow++) {
                int hs = oh * d->stride - d->pad, ws = ow * d->stride - d->pad;
                int he = hs + d->size, we = ws + d->size;
                int cnt = ((he < d->h + d->pad ? he : d->h + d->pad) - hs) *
                          ((we < d->w + d->pad ? we : d->w + d->pad) - ws);
                float sum = 0.0f;
                for (int ih = hs < 0 ? 0 : hs; ih < (he < d->h ? he : d->h); ih++)
                    for (int iw = ws < 0 ? 0 : ws; iw < (we < d->w ? we : d->w); iw++)
                        sum += x[((size_t)pl * d->h + ih) * d->w + iw];
                float want = sum / (float)cnt;
                size_t yi = ((size_t)pl * d->p + oh) * d->q + ow;
                CHECK_MSG(memcmp(&y[yi], &want, 4) == 0, "avg %dx%d/%d y[%zu] = %.9g, want %.9g",
                          d->size, d->size, d->stride, yi, y[yi], want);
            }
    if (kind == DL_POOL_AVG && d->size == 2 && d->stride == 2 && d->pad == 0)
        for (int pl = 0; pl < d->n * d->c; pl++)
            for (int oh = 0; oh < d->p; oh++)
                for (int ow = 0; ow < d->q; ow++) {
                    size_t yi = ((size_t)pl * d->p + oh) * d->q + ow;
                    size_t x0 = ((size_t)pl * d->h + 2 * oh) * d->w + 2 * ow;
                    float want = (((x[x0] + x[x0 + 1]) + x[x0 + d->w]) + x[x0 + d->w + 1]) / 4.0f;
                    CHECK_MSG(memcmp(&y[yi], &want, 4) == 0, "avg y[%zu] = %.9g, want %.9g", yi,
                              y[yi], want);
                    float dwant = dx0[x0] + dy[yi] / 4.0f;
                    CHECK_MSG(memcmp(&dx[x0], &dwant, 4) == 0, "avg dx[%zu] = %.9g, want %.9g", x0,
                              dx[x0], dwant);
                }
    free(x), free(y), free(dy), free(dx), free(dx0), free(yr), free(dxr), free(arg);
}

static void test_pool_reference(void)
{
    static const int cases[][7] = {{2, 3, 8, 8, 2, 2, 0},
                                   {1, 2, 7, 9, 3, 2, 1},
                                   {2, 2, 26, 26, 2, 2, 0},
                                   {1, 4, 11, 11, 2, 2, 0},
                                   {3, 1, 6, 5, 3, 1, 1},
                                   {1, 1, 5, 5, 5, 1, 2},
                                   {2, 3, 10, 40, 2, 2, 0},
                                   {1, 2, 9, 33, 2, 2, 0},
                                   /* rows of 8 outputs and more: the 8-lane windows */
                                   {2, 3, 20, 33, 3, 2, 1},
                                   {1, 2, 12, 19, 3, 1, 1},
                                   {2, 2, 9, 40, 4, 2, 2},
                                   {1, 1, 16, 64, 3, 2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        dl_pool_desc d = pool_desc(c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
        pool_case(DL_POOL_MAX, &d, 0);
        pool_case(DL_POOL_MAX, &d, 1);
        pool_case(DL_POOL_AVG, &d, 0);
    }
    /* a NaN wins every max window that holds it, and only those */
    {
        dl_pool_desc dn = pool_desc(1, 1, 9, 21, 3, 2, 1);
        float xn[9 * 21], yn[5 * 11];
        for (int i = 0; i < 9 * 21; i++)
            xn[i] = (float)(i % 7);
        xn[4 * 21 + 10] = NAN; /* row 4, column 10 */
        CHECK_OK(dl_cpu_pool_forward(cpu(), DL_POOL_MAX, &dn, yn, xn));
        for (int oh = 0; oh < dn.p; oh++)
            for (int ow = 0; ow < dn.q; ow++) {
                int hit =
                    4 >= 2 * oh - 1 && 4 <= 2 * oh + 1 && 10 >= 2 * ow - 1 && 10 <= 2 * ow + 1;
                CHECK_MSG(isnan(yn[oh * dn.q + ow]) == hit, "NaN at (%d, %d): %g", oh, ow,
                          yn[oh * dn.q + ow]);
            }
    }
    /* avg with padding counts padded cells: a 3x3 window at a corner of a
     * ones image with pad 1 averages 4 ones over 9 */
    dl_pool_desc d = pool_desc(1, 1, 4, 4, 3, 1, 1);
    float x[16], y[16];
    for (int i = 0; i < 16; i++)
        x[i] = 1.0f;
    CHECK_OK(dl_cpu_pool_forward(cpu(), DL_POOL_AVG, &d, y, x));
    CHECK_NEAR(y[0], 4.0 / 9.0, 1e-7);
    CHECK_NEAR(y[5], 1.0, 1e-7);
    d.pad = 2;
    CHECK(dl_cpu_pool_forward(cpu(), DL_POOL_AVG, &d, y, x) == DL_EINVAL);
}

/* The fused ReLU -> max pooling against the two plain ops, bit for bit:
 * values with ties, zeros, negative windows and NaN; backward writes every
 * cell of dx (it starts as garbage) with exactly what pool_backward then
 * act_backward add into zeroed buffers. Shapes: the AVX-512 2x2 path (even
 * and odd planes, rows longer than 16), overlapping and padded windows. */
static void test_relu_maxpool_fused(void)
{
    static const int cases[][7] = {{2, 3, 8, 8, 2, 2, 0},   {2, 2, 26, 26, 2, 2, 0},
                                   {1, 4, 11, 13, 2, 2, 0}, {1, 2, 40, 36, 2, 2, 0},
                                   {1, 2, 7, 9, 3, 2, 1},   {3, 1, 6, 5, 3, 1, 1},
                                   {2, 2, 20, 33, 3, 2, 1}, {1, 3, 11, 19, 3, 1, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *c = cases[ci];
        dl_pool_desc d = pool_desc(c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
        size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.p * d.q;
        float *x = malloc(nx * 4), *r = malloc(nx * 4), *dy = frandv(ny);
        float *y0 = malloc(ny * 4), *y1 = malloc(ny * 4);
        float *dr = calloc(nx, 4), *dx0 = calloc(nx, 4), *dx1 = malloc(nx * 4);
        for (size_t i = 0; i < nx; i++) { /* coarse values: ties and exact zeros */
            int v = (int)((i * 7919) % 9) - 5;
            x[i] = 0.25f * (float)v;
        }
        x[nx / 3] = NAN;
        for (size_t i = 0; i < nx; i++)
            dx1[i] = 1234.5f;
        CHECK_OK(cpu()->ops->act_forward(cpu(), DL_ACT_RELU, r, x, nx));
        CHECK_OK(dl_cpu_pool_forward(cpu(), DL_POOL_MAX, &d, y0, r));
        CHECK_OK(dl_cpu_pool_backward(cpu(), DL_POOL_MAX, &d, dr, dy, r, y0));
        CHECK_OK(cpu()->ops->act_backward(cpu(), DL_ACT_RELU, dx0, x, r, dr, nx));
        CHECK_OK(dl_cpu_relu_maxpool_forward(cpu(), &d, y1, x));
        CHECK_OK(dl_cpu_relu_maxpool_backward(cpu(), &d, dx1, dy, x, y1));
        CHECK_MSG(memcmp(y0, y1, ny * 4) == 0, "case %zu: forward differs", ci);
        CHECK_MSG(memcmp(dx0, dx1, nx * 4) == 0, "case %zu: backward differs", ci);
        float *bufs[] = {x, r, dy, y0, y1, dr, dx0, dx1};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
            free(bufs[k]);
    }
}

/* One 3x3 stride-2 max pooling run (forward, backward adding, and the
 * fused ReLU pair writing dx) with DLBENCH_POOL3 as given. */
static void max3_run(const dl_pool_desc *d, const char *pool3, const float *x, const float *dy,
                     const float *dx0, float *y, float *dx, float *yf, float *dxf)
{
    size_t nx = (size_t)d->n * d->c * d->h * d->w;
    setenv("DLBENCH_POOL3", pool3, 1);
    memcpy(dx, dx0, nx * 4);
    for (size_t i = 0; i < nx; i++)
        dxf[i] = 1234.5f; /* garbage: the fused backward writes every cell */
    CHECK_OK(dl_cpu_pool_forward(cpu(), DL_POOL_MAX, d, y, x));
    CHECK_OK(dl_cpu_pool_backward(cpu(), DL_POOL_MAX, d, dx, dy, x, y));
    CHECK_OK(dl_cpu_relu_maxpool_forward(cpu(), d, yf, x));
    CHECK_OK(dl_cpu_relu_maxpool_backward(cpu(), d, dxf, dy, x, yf));
    unsetenv("DLBENCH_POOL3");
}

/* test_maxpool3_kernels' shapes, under the instruction set in force. */
static void maxpool3_cases(void)
{
    static const int cases[][5] = {/* n*c, h, w, pad */
                                   {3, 28, 28, 1},  {4, 14, 14, 1}, {2, 7, 7, 1},   {5, 1, 1, 1},
                                   {7, 2, 3, 1},    {3, 5, 31, 1},  {3, 6, 32, 1},  {2, 9, 33, 1},
                                   {2, 8, 34, 0},   {2, 11, 63, 0}, {2, 4, 64, 1},  {2, 5, 65, 1},
                                   {1, 17, 112, 1}, {6, 3, 3, 0},   {3, 12, 29, 0}, {9, 4, 5, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *c = cases[ci];
        dl_pool_desc d = pool_desc(1, c[0], c[1], c[2], 3, 2, c[3]);
        CHECK_MSG(!__builtin_cpu_supports("avx2") || getenv("DLBENCH_POOL3") ||
                      dl_cpu_max3s2_takes(&d),
                  "case %zu not taken", ci);
        size_t nx = (size_t)c[0] * d.h * d.w, ny = (size_t)c[0] * d.p * d.q;
        float *x = malloc(nx * 4), *dy = malloc(ny * 4), *dx0 = malloc(nx * 4);
        float *r[2][4]; /* per run: y, dx, y fused, dx fused */
        for (int k = 0; k < 2; k++) {
            r[k][0] = malloc(ny * 4), r[k][1] = malloc(nx * 4);
            r[k][2] = malloc(ny * 4), r[k][3] = malloc(nx * 4);
        }
        for (size_t i = 0; i < nx; i++) {
            int v = (int)((i * 7919 + ci * 31) % 11) - 6; /* ties, zeros, negatives */
            x[i] = v == -6 ? -0.0f : 0.5f * (float)v;
            dx0[i] = (float)((int)(i % 7) - 3);
        }
        for (size_t i = 0; i < ny; i++)
            dy[i] = (float)((int)((i * 13) % 9) - 4);
        if (nx > 8) {
            x[nx / 2] = NAN;
            x[nx / 3] = -INFINITY;
            x[nx - 1] = INFINITY;
        }
        max3_run(&d, "0", x, dy, dx0, r[0][0], r[0][1], r[0][2], r[0][3]);
        max3_run(&d, "1", x, dy, dx0, r[1][0], r[1][1], r[1][2], r[1][3]);
        const char *what[] = {"forward", "backward", "fused forward", "fused backward"};
        for (int k = 0; k < 4; k++)
            CHECK_MSG(memcmp(r[0][k], r[1][k], (k % 2 ? nx : ny) * 4) == 0,
                      "case %zu (%dx%d pad %d): %s differs", ci, d.h, d.w, d.pad, what[k]);
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 4; j++)
                free(r[k][j]);
        free(x), free(dy), free(dx0);
    }
}

static void maxpool3_threads(void)
{
    /* a thread pool's parts meet mid-tensor (over 512 KB, so that the
     * pool splits it): the same as one part */
    dl_pool_desc d = pool_desc(4, 64, 28, 28, 3, 2, 1);
    size_t nx = (size_t)4 * 64 * 28 * 28, ny = (size_t)4 * 64 * 14 * 14;
    float *x = frandv(nx), *dy = frandv(ny), *y1 = malloc(ny * 4), *y2 = malloc(ny * 4);
    float *dx1 = calloc(nx, 4), *dx2 = calloc(nx, 4);
    CHECK_OK(dl_cpu_pool_forward(cpu(), DL_POOL_MAX, &d, y1, x));
    CHECK_OK(dl_cpu_pool_backward(cpu(), DL_POOL_MAX, &d, dx1, dy, x, y1));
    dl_backend *be2 = dl_backend_cpu_create(3);
    CHECK(be2 != NULL);
    if (be2) {
        CHECK_OK(be2->ops->pool_forward(be2, DL_POOL_MAX, &d, y2, x));
        CHECK_OK(be2->ops->pool_backward(be2, DL_POOL_MAX, &d, dx2, dy, x, y2));
        CHECK(memcmp(y1, y2, ny * 4) == 0);
        CHECK(memcmp(dx1, dx2, nx * 4) == 0);
        dl_backend_cpu_destroy(be2);
    }
    free(x), free(dy), free(y1), free(y2), free(dx1), free(dx2);
}

/* The 3x3 stride-2 max pooling kernels (cpu_pool3.c: 16 lanes with
 * AVX-512F, 8 with AVX2) against the 8-lane windows and the scalar loop
 * (DLBENCH_POOL3=0), bit for bit: rows of 1 to 4 groups and their edges
 * (w 31..34, 63..65), odd and even sizes, pad 0 and 1, planes so small
 * that whole loads would leave the planes, values with ties, signed
 * zeros, -inf and NaN. dy and dx hold small integers, so every sum is
 * exact in any order. Both instruction sets, and 1 against 3 threads. */
static void test_maxpool3_kernels(void)
{
    int was = dl_cpu_avx512();
    for (int isa = 1; isa >= 0; isa--) {
        dl_cpu_set_avx512(isa);
        maxpool3_cases();
        maxpool3_threads();
    }
    dl_cpu_set_avx512(was);
}

/* The 3x3 stride-1 average pooling kernels (cpu_pool3.c, 16 and 8 lanes) against the
 * scalar loop's float sums written out here, bit for bit: forward 0 +
 * the window's cells inside the input in row-major order, / 9; backward
 * each cell dx + dy / 9 of every output whose window holds it, in output
 * order. Rows of 1 to 3 groups and their edges, pad 0 and 1, tiny
 * planes, signed zeros among the values. */
static void avgpool3_cases(void)
{
    /* n*c, h, w, pad; the last row has 1024 outputs: a dx group more than
     * output groups (16 lanes; past the 8-lane kernels' 512) */
    static const int cases[][4] = {{3, 28, 28, 1}, {4, 14, 14, 1}, {5, 1, 1, 1},  {3, 2, 3, 1},
                                   {2, 5, 16, 1},  {2, 6, 17, 1},  {2, 7, 31, 0}, {2, 4, 33, 1},
                                   {1, 9, 40, 0},  {6, 3, 3, 0},   {2, 5, 18, 0}, {1, 13, 47, 1},
                                   {1, 3, 1026, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *c = cases[ci];
        dl_pool_desc d = pool_desc(1, c[0], c[1], c[2], 3, 1, c[3]);
        CHECK_MSG(!__builtin_cpu_supports("avx2") || getenv("DLBENCH_POOL3") ||
                      dl_cpu_avg3s1_takes(&d) || (!dl_cpu_avx512() && d.q > 512),
                  "case %zu not taken", ci);
        size_t nx = (size_t)c[0] * d.h * d.w, ny = (size_t)c[0] * d.p * d.q;
        float *x = frandv(nx), *dy = frandv(ny), *dx = frandv(nx), *y = malloc(ny * 4);
        float *dxr = fcopy(dx, nx);
        for (size_t i = 0; i < nx; i += 7)
            x[i] = -0.0f;
        for (size_t i = 0; i < nx; i += 11)
            dxr[i] = dx[i] = -0.0f;
        CHECK_OK(dl_cpu_pool_forward(cpu(), DL_POOL_AVG, &d, y, x));
        CHECK_OK(dl_cpu_pool_backward(cpu(), DL_POOL_AVG, &d, dx, dy, NULL, NULL));
        int bad = 0;
        for (int pl = 0; pl < c[0]; pl++)
            for (int oh = 0; oh < d.p; oh++)
                for (int ow = 0; ow < d.q; ow++) {
                    float sum = 0.0f, g = dy[((size_t)pl * d.p + oh) * d.q + ow] / 9.0f;
                    for (int kh = 0; kh < 3; kh++)
                        for (int kw = 0; kw < 3; kw++) {
                            int ih = oh - d.pad + kh, iw = ow - d.pad + kw;
                            if (ih < 0 || iw < 0 || ih >= d.h || iw >= d.w)
                                continue;
                            size_t xi = ((size_t)pl * d.h + ih) * d.w + iw;
                            sum += x[xi];
                            dxr[xi] += g;
                        }
                    float want = sum / 9.0f;
                    bad += memcmp(&want, &y[((size_t)pl * d.p + oh) * d.q + ow], 4) != 0;
                }
        CHECK_MSG(bad == 0, "case %zu (%dx%d pad %d): %d outputs differ", ci, d.h, d.w, d.pad, bad);
        if (dl_cpu_avg3s1_takes(&d)) /* the 8-lane windows sum in another order */
            CHECK_MSG(memcmp(dx, dxr, nx * 4) == 0, "case %zu (%dx%d pad %d): dx differs", ci, d.h,
                      d.w, d.pad);
        for (size_t i = 0; i < nx; i++)
            CHECK_NEAR(dx[i], dxr[i], 1e-5);
        free(x), free(dy), free(dx), free(y), free(dxr);
    }
}

static void test_avgpool3_kernels(void)
{
    int was = dl_cpu_avx512();
    for (int isa = 1; isa >= 0; isa--) {
        dl_cpu_set_avx512(isa); /* the 16-lane kernels, then the 8-lane ones */
        avgpool3_cases();
    }
    dl_cpu_set_avx512(was);
}

/* x as a fused ReLU -> MaxPool2d sees it. */
static float ref_pin(int relu, float v) { return !relu || v > 0 ? v : 0; }

/* The 2x2, stride-2 max pooling by definition: the window's cells in
 * row-major order, the running maximum replaced by a greater cell or a
 * NaN (so the last NaN, else the first maximum, bits of -0/+0 included);
 * dy to the first cell equal to y (none for a NaN), times relu'(y) when
 * fused. Adding: every window cell gets dx + its share (0 or dy), cells
 * outside windows keep their bits. Writing (fused): the share, 0 outside. */
static void ref_max2(const dl_pool_desc *d, int relu, const float *x, float *y, const float *dy,
                     float *dx, int set)
{
    size_t planes = (size_t)d->n * d->c, hw = (size_t)d->h * d->w;
    if (set)
        memset(dx, 0, planes * hw * sizeof *dx);
    for (size_t pl = 0; pl < planes; pl++)
        for (int oh = 0; oh < d->p; oh++)
            for (int ow = 0; ow < d->q; ow++) {
                size_t a = pl * hw + (size_t)(2 * oh) * d->w + 2 * (size_t)ow;
                size_t cell[4] = {a, a + 1, a + d->w, a + d->w + 1};
                float v = ref_pin(relu, x[cell[0]]);
                for (int k = 1; k < 4; k++) {
                    float e = ref_pin(relu, x[cell[k]]);
                    if (e > v || e != e)
                        v = e;
                }
                size_t o = (pl * d->p + oh) * d->q + ow;
                y[o] = v;
                float g = relu && !(v > 0) ? 0.0f : dy[o];
                int won = 0;
                for (int k = 0; k < 4; k++) {
                    int here = !won && ref_pin(relu, x[cell[k]]) == v;
                    won |= here;
                    if (set)
                        dx[cell[k]] = here ? g : 0.0f;
                    else if (here) /* the other cells untouched (a dx of -0 stays) */
                        dx[cell[k]] += g;
                }
            }
}

/* The 2x2 max pooling kernels (plain, and fused with ReLU: its written
 * backward) against ref_max2 bit for bit, on both vector paths (AVX-512:
 * the small-plane kernels for w <= 32 with blocks that run across planes,
 * the row kernel for wider planes; AVX2: the 8-lane kernels for rows of
 * q < 8, 8..16 and more outputs, and the scalar loops for the tails), 1
 * and 2 threads; odd and tiny planes (7x7, 15x15, 3x5, 2x2), planes wider
 * than 32, more planes than a task; values with ties, -0 and +0 in one
 * window, NaN; a dx with -0 cells, which adding keeps. */
static void test_maxpool2_paths(void)
{
    /* the last is over 512 KB: the pool splits it (dl_cpu_plane_grain) */
    static const int shapes[][4] = {{3, 5, 7, 7},    {2, 7, 14, 14}, {2, 3, 15, 15}, {1, 9, 28, 28},
                                    {2, 3, 13, 11},  {1, 5, 6, 4},   {4, 3, 3, 5},   {1, 3, 2, 2},
                                    {2, 3, 4, 32},   {1, 3, 9, 33},  {1, 2, 40, 36}, {1, 2, 16, 31},
                                    {8, 8, 14, 14},  {5, 7, 7, 7},   {2, 9, 5, 2},   {3, 4, 12, 10},
                                    {16, 16, 28, 28}};
    int was = dl_cpu_avx512();
    for (int isa = 1; isa >= 0; isa--)
        for (int threads = 1; threads <= 2; threads++) {
            dl_cpu_set_avx512(isa);
            dl_backend *be = dl_backend_cpu_create(threads);
            for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
                dl_pool_desc d =
                    pool_desc(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], 2, 2, 0);
                size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.p * d.q;
                float *x = malloc(nx * 4), *dy = frandv(ny), *dx0 = frandv(nx);
                float *y = malloc(ny * 4), *yr = malloc(ny * 4);
                float *dx = malloc(nx * 4), *dxr = malloc(nx * 4);
                for (size_t i = 0; i < nx; i++) { /* coarse values: ties, zeros */
                    int v = (int)((i * 7919 + s) % 9) - 5;
                    x[i] = i % 5 == 2 ? frand() : 0.25f * (float)v;
                    if (v == 0 && i % 2)
                        x[i] = -0.0f;
                }
                x[nx / 3] = NAN;
                x[(2 * nx) / 3] = -NAN;
                for (size_t i = 0; i < nx; i += 3) /* adding must keep a dx of -0 */
                    dx0[i] = -0.0f;
                for (int relu = 0; relu < 2; relu++) {
                    memcpy(dx, dx0, nx * 4);
                    memcpy(dxr, dx0, nx * 4);
                    ref_max2(&d, relu, x, yr, dy, dxr, relu);
                    if (relu) {
                        for (size_t i = 0; i < nx; i++)
                            dx[i] = 1234.5f;
                        CHECK_OK(dl_cpu_relu_maxpool_forward(be, &d, y, x));
                        CHECK_OK(dl_cpu_relu_maxpool_backward(be, &d, dx, dy, x, y));
                    } else {
                        CHECK_OK(dl_cpu_pool_forward(be, DL_POOL_MAX, &d, y, x));
                        CHECK_OK(dl_cpu_pool_backward(be, DL_POOL_MAX, &d, dx, dy, x, y));
                    }
                    CHECK_MSG(memcmp(y, yr, ny * 4) == 0,
                              "isa %d, %d threads, %dx%dx%dx%d, relu %d: forward", isa, threads,
                              d.n, d.c, d.h, d.w, relu);
                    CHECK_MSG(memcmp(dx, dxr, nx * 4) == 0,
                              "isa %d, %d threads, %dx%dx%dx%d, relu %d: backward", isa, threads,
                              d.n, d.c, d.h, d.w, relu);
                }
                free(x), free(dy), free(dx0), free(y), free(yr), free(dx), free(dxr);
            }
            dl_backend_cpu_destroy(be);
        }
    dl_cpu_set_avx512(was);
}

/* Pooling backward against central differences of the kernel's forward
 * (inputs spaced at least 0.01 apart so the step 1e-3 never changes the
 * argmax; both kinds are piecewise linear: tolerance 1e-3). */
static void test_pool_fd(void)
{
    dl_pool_desc d = pool_desc(2, 2, 7, 6, 3, 2, 1);
    size_t nx = (size_t)2 * 2 * 7 * 6, ny = (size_t)2 * 2 * d.p * d.q;
    float *x = malloc(nx * 4), *g = frandv(ny), *y = malloc(ny * 4), *dx = calloc(nx, 4);
    for (size_t i = 0; i < nx; i++) /* a shuffled ramp: distinct values */
        x[i] = 0.01f * (float)((i * 37) % nx) - 0.5f;
    for (int kind = 0; kind < 2; kind++) {
        dl_pool_kind pk = kind ? DL_POOL_AVG : DL_POOL_MAX;
        memset(dx, 0, nx * 4);
        CHECK_OK(dl_cpu_pool_forward(cpu(), pk, &d, y, x));
        CHECK_OK(dl_cpu_pool_backward(cpu(), pk, &d, dx, g, x, y));
        for (size_t i = 0; i < nx; i++) {
            float keep = x[i];
            double l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                x[i] = keep + (sgn ? -1e-3f : 1e-3f);
                dl_cpu_pool_forward(cpu(), pk, &d, y, x);
                l[sgn] = 0;
                for (size_t j = 0; j < ny; j++)
                    l[sgn] += (double)g[j] * y[j];
            }
            x[i] = keep;
            CHECK_NEAR(dx[i], (l[0] - l[1]) / (double)(2 * 1e-3f), 1e-3);
        }
    }
    free(x), free(g), free(y), free(dx);
}

/* Adaptive average pooling against a reference that lists each window by
 * PyTorch's formula (floor(i*h/p) .. ceil((i+1)*h/p)): global, windows
 * that overlap (7 -> 3, 9 -> 4), an output larger than the input; the
 * backward onto a random dx against the adjoint sum. */
static void test_adaptive_pool(void)
{
    static const int cases[][6] = {
        {2, 3, 7, 7, 1, 1},
        {2, 2, 8, 6, 4, 3},
        {1, 3, 7, 9, 3, 4},
        {1, 2, 3, 2, 5, 4},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int *c = cases[ci];
        dl_pool_desc d = {c[0], c[1], c[2], c[3], 0, 0, 0, c[4], c[5], 0};
        size_t planes = (size_t)d.n * d.c, nx = planes * d.h * d.w, ny = planes * d.p * d.q;
        float *x = frandv(nx), *y = frandv(ny), *dy = frandv(ny), *dx = frandv(nx);
        float *dx0 = fcopy(dx, nx);
        double *want_dx = calloc(nx, sizeof *want_dx);
        CHECK_OK(dl_cpu_adaptive_avgpool_forward(cpu(), &d, y, x));
        CHECK_OK(dl_cpu_adaptive_avgpool_backward(cpu(), &d, dx, dy));
        for (size_t pl = 0; pl < planes; pl++)
            for (int i = 0; i < d.p; i++)
                for (int j = 0; j < d.q; j++) {
                    int h0 = i * d.h / d.p, h1 = ((i + 1) * d.h + d.p - 1) / d.p;
                    int w0 = j * d.w / d.q, w1 = ((j + 1) * d.w + d.q - 1) / d.q;
                    double s = 0, area = (double)(h1 - h0) * (w1 - w0);
                    size_t yi = (pl * d.p + i) * d.q + j;
                    for (int r = h0; r < h1; r++)
                        for (int cc = w0; cc < w1; cc++) {
                            s += x[(pl * d.h + r) * d.w + cc];
                            want_dx[(pl * d.h + r) * d.w + cc] += dy[yi] / area;
                        }
                    CHECK_NEAR(y[yi], s / area, 1e-6);
                }
        for (size_t i = 0; i < nx; i++)
            CHECK_NEAR(dx[i], dx0[i] + want_dx[i], 1e-5);
        free(x), free(y), free(dy), free(dx), free(dx0), free(want_dx);
    }
    dl_pool_desc bad = {1, 1, 4, 4, 0, 0, 0, 0, 1, 0};
    float buf[16];
    CHECK(dl_cpu_adaptive_avgpool_forward(cpu(), &bad, buf, buf) == DL_EINVAL);
}

/* ---------------------------------------------------------------------- */
/* normalisation                                                           */

/* Double reference BatchNorm (training) over x [n, c, inner]: y, and the
 * loss sum g*y for finite differences. */
static double ref_bn(int n, int c, int inner, double eps, const double *x, const double *gam,
                     const double *bet, const double *g, double *y)
{
    double loss = 0;
    for (int ch = 0; ch < c; ch++) {
        double s = 0, ss = 0, cnt = (double)n * inner;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < inner; j++)
                s += x[((size_t)i * c + ch) * inner + j];
        double mu = s / cnt;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < inner; j++) {
                double dv = x[((size_t)i * c + ch) * inner + j] - mu;
                ss += dv * dv;
            }
        double is = 1.0 / sqrt(ss / cnt + eps);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < inner; j++) {
                size_t at = ((size_t)i * c + ch) * inner + j;
                double v = gam[ch] * (x[at] - mu) * is + bet[ch];
                if (y)
                    y[at] = v;
                loss += g[at] * v;
            }
    }
    return loss;
}

/* Forward (train and eval) against the double reference: y within 1e-5,
 * saved statistics, running mean and unbiased running variance;
 * backward against central differences (step 1e-6) of the double
 * reference forward: relative tolerance 1e-4 plus 1e-5. */
/* BatchNorm of x [n, c, inner] (c <= BN_CASE_C) against the double
 * reference: outputs, statistics, running statistics, dx, dgamma and
 * dbeta by finite differences, eval mode. */
#define BN_CASE_C 80
static void batchnorm_case(int n, int c, int inner)
{
    const float eps = 1e-5f, mom = 0.1f;
    size_t nx = (size_t)n * c * inner;
    float *x = frandv(nx), *g = frandv(nx), *y = malloc(nx * 4), *dx = frandv(nx);
    for (size_t i = 0; i < nx; i++)
        x[i] = 2.0f * x[i] + 0.5f;
    float *dx0 = fcopy(dx, nx);
    float gamma[BN_CASE_C] = {0}, beta[BN_CASE_C] = {0}, rm[BN_CASE_C] = {0}, rv[BN_CASE_C] = {0};
    float sm[BN_CASE_C] = {0}, si[BN_CASE_C] = {0}, dgamma[BN_CASE_C] = {0}, dbeta[BN_CASE_C] = {0};
    float rm0[BN_CASE_C], rv0[BN_CASE_C], dg0[BN_CASE_C], db0[BN_CASE_C];
    for (int ch = 0; ch < c; ch++) {
        gamma[ch] = 1.5f - 0.07f * (float)ch, beta[ch] = 0.1f * (float)(ch % 5) - 0.2f;
        rm[ch] = 0.2f - 0.03f * (float)ch, rv[ch] = 0.5f + 0.25f * (float)(ch % 7);
        dgamma[ch] = dg0[ch] = (float)(ch % 4), dbeta[ch] = db0[ch] = (float)(ch % 3) - 1.0f;
    }
    memcpy(rm0, rm, sizeof rm);
    memcpy(rv0, rv, sizeof rv);
    CHECK_OK(dl_cpu_batchnorm_forward(cpu(), 1, n, c, inner, mom, eps, y, x, gamma, beta, rm, rv,
                                      sm, si));
    double *xd = malloc(nx * 8), *gd = malloc(nx * 8), *yd = malloc(nx * 8), gam[BN_CASE_C],
           bet[BN_CASE_C];
    for (size_t i = 0; i < nx; i++)
        xd[i] = x[i], gd[i] = g[i];
    for (int ch = 0; ch < c; ch++)
        gam[ch] = gamma[ch], bet[ch] = beta[ch];
    ref_bn(n, c, inner, eps, xd, gam, bet, gd, yd);
    for (size_t i = 0; i < nx; i++)
        CHECK_NEAR(y[i], yd[i], 1e-5);
    for (int ch = 0; ch < c; ch++) {
        double s = 0, ss = 0, cnt = n * inner;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < inner; j++)
                s += xd[((size_t)i * c + ch) * inner + j];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < inner; j++)
                ss += pow(xd[((size_t)i * c + ch) * inner + j] - s / cnt, 2);
        CHECK_NEAR(sm[ch], s / cnt, 1e-6);
        CHECK_NEAR(si[ch], 1.0 / sqrt(ss / cnt + eps), 1e-5);
        CHECK_NEAR(rm[ch], 0.9 * rm0[ch] + 0.1 * s / cnt, 1e-6);
        CHECK_NEAR(rv[ch], 0.9 * rv0[ch] + 0.1 * ss / (cnt - 1), 1e-6); /* unbiased */
    }
    CHECK_OK(dl_cpu_batchnorm_backward(cpu(), n, c, inner, dx, dgamma, dbeta, g, x, gamma, sm, si));
    const double h = 1e-6;
    for (size_t i = 0; i < nx; i++) {
        double keep = xd[i];
        xd[i] = keep + h;
        double lp = ref_bn(n, c, inner, eps, xd, gam, bet, gd, NULL);
        xd[i] = keep - h;
        double lm = ref_bn(n, c, inner, eps, xd, gam, bet, gd, NULL);
        xd[i] = keep;
        double fd = (lp - lm) / (2 * h);
        CHECK_NEAR(dx[i] - dx0[i], fd, 1e-4 * fabs(fd) + 1e-5);
    }
    for (int ch = 0; ch < c; ch++) {
        double keep = gam[ch];
        gam[ch] = keep + h;
        double lp = ref_bn(n, c, inner, eps, xd, gam, bet, gd, NULL);
        gam[ch] = keep - h;
        double lm = ref_bn(n, c, inner, eps, xd, gam, bet, gd, NULL);
        gam[ch] = keep;
        CHECK_NEAR(dgamma[ch] - dg0[ch], (lp - lm) / (2 * h), 1e-4);
        keep = bet[ch];
        bet[ch] = keep + h;
        lp = ref_bn(n, c, inner, eps, xd, gam, bet, gd, NULL);
        bet[ch] = keep - h;
        lm = ref_bn(n, c, inner, eps, xd, gam, bet, gd, NULL);
        bet[ch] = keep;
        CHECK_NEAR(dbeta[ch] - db0[ch], (lp - lm) / (2 * h), 1e-4);
    }
    /* eval: y = gamma (x - rm) / sqrt(rv + eps) + beta, stats untouched */
    float rmk[BN_CASE_C], rvk[BN_CASE_C];
    memcpy(rmk, rm, sizeof rm);
    memcpy(rvk, rv, sizeof rv);
    CHECK_OK(dl_cpu_batchnorm_forward(cpu(), 0, n, c, inner, mom, eps, y, x, gamma, beta, rm, rv,
                                      NULL, NULL));
    for (size_t i = 0; i < nx; i++) {
        int ch = (int)(i / inner) % c;
        CHECK_NEAR(y[i], gamma[ch] * (x[i] - rmk[ch]) / sqrt(rvk[ch] + eps) + beta[ch], 1e-5);
    }
    CHECK(memcmp(rm, rmk, sizeof rm) == 0 && memcmp(rv, rvk, sizeof rv) == 0);
    CHECK(dl_cpu_batchnorm_forward(cpu(), 0, n, c, inner, mom, eps, y, x, gamma, beta, NULL, NULL,
                                   NULL, NULL) == DL_EINVAL);
    free(x), free(g), free(y), free(dx), free(dx0), free(xd), free(gd), free(yd);
}

/* Planes of 7 (the channel walk); planes of one, BatchNorm1d on [n, c]
 * (blocks of columns: vector lanes, tails, two blocks). */
static void test_batchnorm(void)
{
    batchnorm_case(5, 3, 7);
    batchnorm_case(6, 11, 1);
    batchnorm_case(4, 70, 1);
}

/* A large BatchNorm (channel-parallel path): statistics of a shifted
 * input stay exact to 1e-5 thanks to the double sums. */
static void test_batchnorm_large(void)
{
    const int n = 64, c = 32, inner = 121;
    size_t nx = (size_t)n * c * inner;
    float *x = frandv(nx), *y = malloc(nx * 4);
    for (size_t i = 0; i < nx; i++)
        x[i] = 100.0f + x[i];
    float *rm = calloc(c, 4), *rv = calloc(c, 4), *sm = malloc(c * 4), *si = malloc(c * 4);
    CHECK_OK(dl_cpu_batchnorm_forward(cpu(), 1, n, c, inner, 1.0f, 1e-5f, y, x, NULL, NULL, rm, rv,
                                      sm, si));
    for (int ch = 0; ch < c; ch++) {
        double s = 0, ss = 0, cnt = (double)n * inner;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < inner; j++)
                s += x[((size_t)i * c + ch) * inner + j];
        for (int i = 0; i < n; i++)
            for (int j = 0; j < inner; j++)
                ss += pow(x[((size_t)i * c + ch) * inner + j] - s / cnt, 2);
        CHECK_NEAR(sm[ch], s / cnt, 1e-4);
        CHECK_NEAR(rv[ch], ss / (cnt - 1), 1e-5);
        CHECK_NEAR(si[ch], 1.0 / sqrt(ss / cnt + 1e-5), 1e-4);
    }
    free(x), free(y), free(rm), free(rv), free(sm), free(si);
}

static double ref_ln(int rows, int cols, double eps, const double *x, const double *gam,
                     const double *bet, const double *g, double *y)
{
    double loss = 0;
    for (int r = 0; r < rows; r++) {
        double s = 0, ss = 0;
        for (int j = 0; j < cols; j++)
            s += x[(size_t)r * cols + j];
        double mu = s / cols;
        for (int j = 0; j < cols; j++)
            ss += pow(x[(size_t)r * cols + j] - mu, 2);
        double is = 1.0 / sqrt(ss / cols + eps);
        for (int j = 0; j < cols; j++) {
            size_t at = (size_t)r * cols + j;
            double v = gam[j] * (x[at] - mu) * is + bet[j];
            if (y)
                y[at] = v;
            loss += g[at] * v;
        }
    }
    return loss;
}

/* LayerNorm forward against the double reference (1e-5) and backward
 * (dx, dgamma, dbeta, all accumulating) against central differences
 * (step 1e-6) of it: relative 1e-4 plus 1e-5. */
static void test_layernorm(void)
{
    enum { R = 6, C = 13 };
    const float eps = 1e-5f;
    float *x = frandv(R * C), *g = frandv(R * C), *y = malloc(R * C * 4), *dx = frandv(R * C);
    float *gamma = frandv(C), *beta = frandv(C), *dg = frandv(C), *db = frandv(C);
    float *dx0 = fcopy(dx, R * C), *dg0 = fcopy(dg, C), *db0 = fcopy(db, C);
    float sm[R], si[R];
    CHECK_OK(dl_cpu_layernorm_forward(cpu(), R, C, eps, y, x, gamma, beta, sm, si));
    double xd[R * C], gd[R * C], yd[R * C], gam[C], bet[C];
    for (int i = 0; i < R * C; i++)
        xd[i] = x[i], gd[i] = g[i];
    for (int j = 0; j < C; j++)
        gam[j] = gamma[j], bet[j] = beta[j];
    ref_ln(R, C, eps, xd, gam, bet, gd, yd);
    for (int i = 0; i < R * C; i++)
        CHECK_NEAR(y[i], yd[i], 1e-5);
    CHECK_OK(dl_cpu_layernorm_backward(cpu(), R, C, dx, dg, db, g, x, gamma, sm, si));
    const double h = 1e-6;
    double *sets[3] = {xd, gam, bet};
    float *grads[3] = {dx, dg, db}, *bases[3] = {dx0, dg0, db0};
    int counts[3] = {R * C, C, C};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < counts[s]; i++) {
            double keep = sets[s][i];
            sets[s][i] = keep + h;
            double lp = ref_ln(R, C, eps, xd, gam, bet, gd, NULL);
            sets[s][i] = keep - h;
            double lm = ref_ln(R, C, eps, xd, gam, bet, gd, NULL);
            sets[s][i] = keep;
            double fd = (lp - lm) / (2 * h);
            CHECK_NEAR(grads[s][i] - bases[s][i], fd, 1e-4 * fabs(fd) + 1e-5);
        }
    free(x), free(g), free(y), free(dx), free(gamma), free(beta), free(dg), free(db);
    free(dx0), free(dg0), free(db0);
}

/* LayerNorm on the AVX-512 and the AVX2 kernels, rows of every tail
 * length and more rows than one backward block (64) with a partial last
 * one: y within 1e-5 of the double reference, dx within 1e-5 between the
 * two, dgamma/dbeta from the same statistics (summed per column, row
 * after row) bit for bit, and
 * all of them against the plain sums in double. */
static void test_layernorm_isa(void)
{
    static const int widths[] = {1, 7, 16, 45, 256, 300};
    const int rows = 131, was = dl_cpu_avx512();
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
        int cols = widths[k];
        size_t nx = (size_t)rows * cols;
        float *x = frandv(nx), *dy = frandv(nx), *gm = frandv(cols), *bt = frandv(cols);
        float *y[2], *dx[2], *dg[2], *db[2], sm[2][131], si[2][131];
        for (size_t i = 0; i < nx; i++)
            x[i] = 3.0f * x[i] + 1.0f;
        for (int isa = 0; isa < 2; isa++) {
            dl_cpu_set_avx512(isa);
            y[isa] = malloc(nx * 4), dx[isa] = calloc(nx, 4);
            dg[isa] = calloc(cols, 4), db[isa] = calloc(cols, 4);
            CHECK_OK(dl_cpu_layernorm_forward(cpu(), rows, cols, 1e-5f, y[isa], x, gm, bt, sm[isa],
                                              si[isa]));
        }
        for (int isa = 0; isa < 2; isa++) { /* both from the same statistics */
            dl_cpu_set_avx512(isa);
            CHECK_OK(dl_cpu_layernorm_backward(cpu(), rows, cols, dx[isa], dg[isa], db[isa], dy, x,
                                               gm, sm[1], si[1]));
        }
        dl_cpu_set_avx512(was);
        double wy = 0, wdx = 0;
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * cols;
            double mu = 0, var = 0;
            for (int j = 0; j < cols; j++)
                mu += xr[j] / (double)cols;
            for (int j = 0; j < cols; j++)
                var += (xr[j] - mu) * (xr[j] - mu) / cols;
            for (int j = 0; j < cols; j++) {
                size_t at = (size_t)r * cols + j;
                double ref = gm[j] * (xr[j] - mu) / sqrt(var + 1e-5) + bt[j];
                for (int isa = 0; isa < 2; isa++)
                    wy = fmax(wy, fabs(y[isa][at] - ref));
                wdx = fmax(wdx, fabs(dx[0][at] - dx[1][at]) / fmax(fabs(dx[0][at]), 1.0));
            }
        }
        CHECK_MSG(wy < 1e-5, "cols %d: worst forward error %g", cols, wy);
        CHECK_MSG(wdx < 1e-5, "cols %d: dx differs by %g between the kernels", cols, wdx);
        CHECK_MSG(memcmp(dg[0], dg[1], cols * 4) == 0 && memcmp(db[0], db[1], cols * 4) == 0,
                  "cols %d: dgamma/dbeta differ between the kernels", cols);
        for (int j = 0; j < cols; j++) {
            double g = 0, b = 0;
            for (int r = 0; r < rows; r++) {
                size_t at = (size_t)r * cols + j;
                g += (double)dy[at] * ((x[at] - sm[1][r]) * si[1][r]);
                b += dy[at];
            }
            CHECK_NEAR(dg[1][j], g, 1e-4);
            CHECK_NEAR(db[1][j], b, 1e-4);
        }
        free(x), free(dy), free(gm), free(bt);
        for (int isa = 0; isa < 2; isa++)
            free(y[isa]), free(dx[isa]), free(dg[isa]), free(db[isa]);
    }
}

/* The norms' backward against central differences of the kernels' own
 * f32 forward (step 1e-2, loss in double): ties each kernel's forward to
 * its backward. Truncation and f32 rounding allow 1e-2 relative. */
static void test_norm_fd_own_forward(void)
{
    enum { N = 4, C = 2, I = 5, NX = N * C * I };
    float *x = frandv(NX), *g = frandv(NX), y[NX], dx[NX] = {0}, sm[N], si[N];
    float gamma[C] = {1.2f, 0.7f}, beta[C] = {0.3f, -0.2f}, bm[C], bi[C];
    const float h = 1e-2f;
    /* BatchNorm over [N, C, I] */
    CHECK_OK(dl_cpu_batchnorm_forward(cpu(), 1, N, C, I, 0.1f, 1e-5f, y, x, gamma, beta, NULL, NULL,
                                      bm, bi));
    CHECK_OK(dl_cpu_batchnorm_backward(cpu(), N, C, I, dx, NULL, NULL, g, x, gamma, bm, bi));
    for (int i = 0; i < NX; i++) {
        float keep = x[i];
        double l[2] = {0, 0};
        for (int s = 0; s < 2; s++) {
            x[i] = keep + (s ? -h : h);
            dl_cpu_batchnorm_forward(cpu(), 1, N, C, I, 0.1f, 1e-5f, y, x, gamma, beta, NULL, NULL,
                                     NULL, NULL);
            for (int j = 0; j < NX; j++)
                l[s] += (double)g[j] * y[j];
        }
        x[i] = keep;
        double fd = (l[0] - l[1]) / (2.0 * h);
        CHECK_NEAR(dx[i], fd, 1e-2 * fabs(fd) + 2e-3);
    }
    /* LayerNorm over [N, C*I] */
    memset(dx, 0, sizeof dx);
    CHECK_OK(dl_cpu_layernorm_forward(cpu(), N, C * I, 1e-5f, y, x, NULL, NULL, sm, si));
    CHECK_OK(dl_cpu_layernorm_backward(cpu(), N, C * I, dx, NULL, NULL, g, x, NULL, sm, si));
    for (int i = 0; i < NX; i++) {
        float keep = x[i];
        double l[2] = {0, 0};
        for (int s = 0; s < 2; s++) {
            x[i] = keep + (s ? -h : h);
            dl_cpu_layernorm_forward(cpu(), N, C * I, 1e-5f, y, x, NULL, NULL, NULL, NULL);
            for (int j = 0; j < NX; j++)
                l[s] += (double)g[j] * y[j];
        }
        x[i] = keep;
        double fd = (l[0] - l[1]) / (2.0 * h);
        CHECK_NEAR(dx[i], fd, 1e-2 * fabs(fd) + 2e-3);
    }
    free(x), free(g);
}

/* ---------------------------------------------------------------------- */
/* attention (cpu_attention.c)                                              */

/* Naive attention of one (sample, head) in double: o and lse, then, with
 * dout, dqkv += the gradient. The T x T probabilities are held whole. */
static void attn_reference(int n, int t, int heads, int d, int causal, const float *qkv,
                           const float *dout, double *o, double *lse, double *dqkv)
{
    int dh = d / heads, ld = 3 * d;
    double scale = 1.0 / sqrt((double)dh);
    double *p = malloc((size_t)t * t * sizeof *p), *dp = malloc((size_t)t * t * sizeof *dp);
    for (int b = 0; b < n; b++)
        for (int h = 0; h < heads; h++) {
            const float *base = qkv + (size_t)b * t * ld + h * dh;
#define Q(i, c) base[(size_t)(i)*ld + (c)]
#define K(j, c) base[(size_t)(j)*ld + d + (c)]
#define V(j, c) base[(size_t)(j)*ld + 2 * d + (c)]
            for (int i = 0; i < t; i++) {
                double mx = -INFINITY, sum = 0;
                int jend = causal ? i + 1 : t;
                for (int j = 0; j < jend; j++) {
                    double s = 0;
                    for (int c = 0; c < dh; c++)
                        s += (double)Q(i, c) * K(j, c);
                    p[(size_t)i * t + j] = s * scale;
                    mx = fmax(mx, s * scale);
                }
                for (int j = 0; j < jend; j++)
                    sum += exp(p[(size_t)i * t + j] - mx);
                for (int j = 0; j < t; j++)
                    p[(size_t)i * t + j] = j < jend ? exp(p[(size_t)i * t + j] - mx) / sum : 0;
                lse[((size_t)b * heads + h) * t + i] = mx + log(sum);
                for (int c = 0; c < dh; c++) {
                    double acc = 0;
                    for (int j = 0; j < t; j++)
                        acc += p[(size_t)i * t + j] * V(j, c);
                    o[((size_t)b * t + i) * d + h * dh + c] = acc;
                }
            }
            if (!dout)
                continue;
            double *db = dqkv + (size_t)b * t * ld + h * dh;
            const float *dob = dout + (size_t)b * t * d + h * dh;
            for (int i = 0; i < t; i++) {
                double dsum = 0;
                for (int j = 0; j < t; j++) {
                    double s = 0;
                    for (int c = 0; c < dh; c++)
                        s += (double)dob[(size_t)i * d + c] * V(j, c);
                    dp[(size_t)i * t + j] = s;
                    dsum += p[(size_t)i * t + j] * s;
                }
                for (int j = 0; j < t; j++) {
                    double pij = p[(size_t)i * t + j], ds = pij * (dp[(size_t)i * t + j] - dsum);
                    for (int c = 0; c < dh; c++) {
                        db[(size_t)j * ld + 2 * d + c] += pij * dob[(size_t)i * d + c];
                        db[(size_t)i * ld + c] += ds * scale * K(j, c);
                        db[(size_t)j * ld + d + c] += ds * scale * Q(i, c);
                    }
                }
            }
#undef Q
#undef K
#undef V
        }
    free(p);
    free(dp);
}

static double max_rel(const float *got, const double *want, size_t n)
{
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs(got[i] - want[i]));
        den = fmax(den, fabs(want[i]));
    }
    return num / den;
}

static void attention_reference_case(int n, int t, int heads, int d, int causal)
{
    size_t nq = (size_t)n * t * 3 * d, no = (size_t)n * t * d, nl = (size_t)n * heads * t;
    float *qkv = frandv(nq), *dout = frandv(no), *dq0 = frandv(nq);
    float *o = calloc(no, 4), *lse = calloc(nl, 4), *dqkv = fcopy(dq0, nq);
    double *ro = calloc(no, 8), *rl = calloc(nl, 8), *rdq = calloc(nq, 8);
    for (size_t i = 0; i < nq; i++)
        rdq[i] = dq0[i];
    dl_backend *be = cpu();
    float scale = 1.0f / sqrtf((float)(d / heads));
    CHECK_OK(be->ops->attention_forward(be, n, t, heads, d, causal, scale, qkv, o, lse));
    CHECK_OK(
        be->ops->attention_backward(be, n, t, heads, d, causal, scale, qkv, o, lse, dout, dqkv));
    attn_reference(n, t, heads, d, causal, qkv, dout, ro, rl, rdq);
    double eo = max_rel(o, ro, no), el = max_rel(lse, rl, nl), eg = max_rel(dqkv, rdq, nq);
    CHECK_MSG(eo < 1e-5 && el < 1e-5 && eg < 1e-5,
              "t %d d %d heads %d causal %d: o %.3g, lse %.3g, dqkv %.3g", t, d, heads, causal, eo,
              el, eg);
    free(qkv), free(dout), free(dq0), free(o), free(lse), free(dqkv);
    free(ro), free(rl), free(rdq);
}

static void test_attention_reference(void)
{
    attention_reference_case(2, 1, 1, 4, 1);
    attention_reference_case(2, 31, 2, 8, 0);
    attention_reference_case(2, 33, 2, 8, 1);
    attention_reference_case(1, 100, 4, 64, 1); /* 4 query tiles, the last partial */
    attention_reference_case(3, 64, 3, 48, 0);
    attention_reference_case(2, 70, 2, 128, 1); /* heads of 64: two register strips */
    attention_reference_case(1, 45, 1, 40, 0);  /* a strip of 32 and one of 8 */
    attention_reference_case(2, 37, 4, 64, 1);  /* heads of 16: the 16-column strip */
    attention_reference_case(1, 40, 2, 56, 0);  /* heads of 28: 16, 8 and a scalar tail of 4 */
    attention_reference_case(2, 35, 3, 24, 1);  /* heads of 8 */
}

/* The kernel's results do not depend on the thread count: each task's
 * sums run in a fixed order. */
static void test_attention_threads(void)
{
    int n = 3, t = 90, heads = 2, d = 56; /* heads of 28: every kind of strip */
    size_t nq = (size_t)n * t * 3 * d, no = (size_t)n * t * d, nl = (size_t)n * heads * t;
    float *qkv = frandv(nq), *dout = frandv(no);
    float *o[2], *lse[2], *dq[2];
    for (int k = 0; k < 2; k++) {
        dl_backend *be = dl_backend_cpu_create(k == 0 ? 1 : 3);
        o[k] = calloc(no, 4), lse[k] = calloc(nl, 4), dq[k] = calloc(nq, 4);
        CHECK_OK(be->ops->attention_forward(be, n, t, heads, d, 1, 0.3f, qkv, o[k], lse[k]));
        CHECK_OK(be->ops->attention_backward(be, n, t, heads, d, 1, 0.3f, qkv, o[k], lse[k], dout,
                                             dq[k]));
        dl_backend_cpu_destroy(be);
    }
    CHECK(memcmp(o[0], o[1], no * 4) == 0);
    CHECK(memcmp(lse[0], lse[1], nl * 4) == 0);
    CHECK(memcmp(dq[0], dq[1], nq * 4) == 0);
    for (int k = 0; k < 2; k++)
        free(o[k]), free(lse[k]), free(dq[k]);
    dl_backend *be = cpu(); /* 3 heads do not divide 8 */
    CHECK(be->ops->attention_forward(be, 1, 4, 3, 8, 0, 1, qkv, NULL, NULL) == DL_EINVAL);
    free(qkv), free(dout);
}

/* ---------------------------------------------------------------------- */
/* memory-bound kernels: accuracy against double references, the same     */
/* bits at any thread count                                                */

static double gelu_ref(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double gelu_grad_ref(double x)
{
    return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
}
static double sigmoid_ref(double x) { return 1 / (1 + exp(-x)); }

/* GELU, sigmoid, SiLU and tanh forward and backward within a few float ulps of
 * the double formulas (GELU: PyTorch's exact erf form), over [-12, 12]
 * in a length with a tail and densely over [-6, 6], on the AVX-512 and
 * the AVX2 kernels, which give the same bits. */
static void test_smooth_activations(void)
{
    size_t n = 4803 + 240007;
    float *x = malloc(n * 4), *y[2], *dx[2], *dy = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        x[i] = i < 4803 ? (float)(-12.0 + 24.0 * (double)i / 4802.0)
                        : (float)(-6.0 + 12.0 * (double)(i - 4803) / 240006.0);
        dy[i] = 1.0f + 0.5f * frand();
    }
    dl_act kinds[] = {DL_ACT_GELU, DL_ACT_SIGMOID, DL_ACT_SILU, DL_ACT_TANH};
    int was = dl_cpu_avx512();
    for (int k = 0; k < 4; k++) {
        for (int isa = 0; isa < 2; isa++) {
            dl_cpu_set_avx512(isa);
            dl_backend *be = cpu();
            y[isa] = malloc(n * 4), dx[isa] = malloc(n * 4);
            CHECK_OK(be->ops->act_forward(be, kinds[k], y[isa], x, n));
            for (size_t i = 0; i < n; i++)
                dx[isa][i] = 0.25f;
            CHECK_OK(be->ops->act_backward(be, kinds[k], dx[isa], x, y[isa], dy, n));
            double worst_y = 0, worst_g = 0, worst_rel = 0;
            for (size_t i = 0; i < n; i++) {
                double v = x[i], s = sigmoid_ref(v);
                double ry = kinds[k] == DL_ACT_GELU      ? gelu_ref(v)
                            : kinds[k] == DL_ACT_SIGMOID ? s
                            : kinds[k] == DL_ACT_TANH    ? tanh(v)
                                                         : v * s;
                double rg = kinds[k] == DL_ACT_GELU      ? gelu_grad_ref(v)
                            : kinds[k] == DL_ACT_SIGMOID ? s * (1 - s)
                            : kinds[k] == DL_ACT_TANH    ? 1 - tanh(v) * tanh(v)
                                                         : s * (1 + v * (1 - s));
                /* relative error, absolute below 1 */
                double ey = fabs(y[isa][i] - ry) / fmax(fabs(ry), 1.0);
                double want = 0.25 + dy[i] * rg;
                double eg = fabs(dx[isa][i] - want) / fmax(fabs(want), 1.0);
                worst_y = ey > worst_y ? ey : worst_y;
                worst_g = eg > worst_g ? eg : worst_g;
                /* tanh is odd and near x at 0: relative there too */
                if (kinds[k] == DL_ACT_TANH && ry != 0)
                    worst_rel = fmax(worst_rel, fabs(y[isa][i] - ry) / fabs(ry));
            }
            CHECK_MSG(worst_rel < 2e-6, "tanh, isa %d: worst relative error %g", isa, worst_rel);
            CHECK_MSG(worst_y < 2e-6, "act %d, isa %d forward: worst relative error %g", k, isa,
                      worst_y);
            CHECK_MSG(worst_g < 2e-6, "act %d, isa %d backward: worst relative error %g", k, isa,
                      worst_g);
        }
        if (dl_cpu_set_avx512(1)) {
            CHECK_MSG(memcmp(y[0], y[1], n * 4) == 0, "act %d: forward differs between ISAs", k);
            CHECK_MSG(memcmp(dx[0], dx[1], n * 4) == 0, "act %d: backward differs between ISAs", k);
        }
        for (int isa = 0; isa < 2; isa++)
            free(y[isa]), free(dx[isa]);
    }
    dl_cpu_set_avx512(was);
    free(x), free(dy);
}

/* Dropout keeps element i exactly when dl_rng_dropout_keep(seed, stream,
 * counter, i, p), on the AVX2 and the AVX-512 path, at 1 and 2 threads
 * (whose ranges start off the vector width: 200003 / 3 chunks), for
 * short odd lengths; backward adds m * dy. */
static void test_dropout_masks(void)
{
    const size_t n = 200003, lens[] = {1, 7, 15, 17, 33, 100};
    const int was = dl_cpu_avx512();
    float p = 0.3f, ks = 1.0f / (1.0f - p);
    float *x = frandv(n), *y[4], *dx[4], *ys[4];
    for (int isa = 0; isa < 2; isa++)
        for (int k = 0; k < 2; k++) {
            int at = 2 * isa + k;
            dl_cpu_set_avx512(isa);
            dl_backend *be = dl_backend_cpu_create(k + 1);
            y[at] = malloc(n * 4), dx[at] = malloc(n * 4), ys[at] = malloc(n * 4);
            for (size_t i = 0; i < n; i++)
                dx[at][i] = 0.5f, ys[at][i] = NAN;
            CHECK_OK(be->ops->dropout_forward(be, y[at], x, n, p, 11, 22, 33));
            CHECK_OK(be->ops->dropout_backward(be, dx[at], x, n, p, 11, 22, 34));
            /* short calls, one after another (each from element 0) */
            for (size_t t = 0, off = 0; t < sizeof lens / sizeof *lens; off += lens[t++])
                CHECK_OK(be->ops->dropout_forward(be, ys[at] + off, x + off, lens[t], p, 11, 22,
                                                  33 + t));
            dl_backend_cpu_destroy(be);
        }
    dl_cpu_set_avx512(was);
    size_t wrong = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        float m = dl_rng_dropout_keep(11, 22, 33, i, p) ? ks : 0.0f;
        float m2 = dl_rng_dropout_keep(11, 22, 34, i, p) ? ks : 0.0f;
        wrong += y[0][i] != m * x[i];
        wrong += dx[0][i] != 0.5f + m2 * x[i];
        kept += m2 > 0;
    }
    for (size_t t = 0, off = 0; t < sizeof lens / sizeof *lens; off += lens[t++])
        for (size_t i = 0; i < lens[t]; i++) {
            float m = dl_rng_dropout_keep(11, 22, 33 + t, i, p) ? ks : 0.0f;
            wrong += ys[0][off + i] != m * x[off + i];
        }
    CHECK_MSG(wrong == 0, "%zu elements differ from the scalar rule", wrong);
    for (int at = 1; at < 4; at++)
        CHECK_MSG(memcmp(y[0], y[at], n * 4) == 0 && memcmp(dx[0], dx[at], n * 4) == 0 &&
                      memcmp(ys[0], ys[at], 173 * 4) == 0,
                  "isa %d, %d threads differ from the AVX2 path at 1 thread", at / 2, at % 2 + 1);
    CHECK_NEAR((double)kept / (double)n, 0.7, 0.005);
    for (int at = 0; at < 4; at++)
        free(y[at]), free(dx[at]), free(ys[at]);
    free(x);
}

/* Softmax cross-entropy against a double reference (loss, correct count,
 * gradient with smoothing), the same bits at 1 and 3 threads. */
static void test_softmax_xent_reference(void)
{
    int rows = 2003, classes = 37; /* enough blocks for the pool to split */
    float sm = 0.1f, gs = 0.5f;
    float *z = frandv((size_t)rows * classes), *d[2], st[2][2];
    int32_t *lab = malloc(rows * sizeof *lab);
    for (int r = 0; r < rows; r++)
        lab[r] = irand(0, classes - 1);
    for (size_t i = 0; i < (size_t)rows * classes; i++)
        z[i] *= 6;
    for (int k = 0; k < 2; k++) {
        dl_backend *be = dl_backend_cpu_create(k == 0 ? 1 : 3);
        d[k] = calloc((size_t)rows * classes, 4);
        st[k][0] = st[k][1] = 0;
        CHECK_OK(be->ops->softmax_xent(be, rows, classes, z, lab, sm, gs, d[k], st[k]));
        dl_backend_cpu_destroy(be);
    }
    double loss = 0, worst = 0;
    int correct = 0;
    for (int r = 0; r < rows; r++) {
        const float *zr = z + (size_t)r * classes;
        double mx = zr[0], sum = 0, zs = 0;
        int arg = 0;
        for (int c = 1; c < classes; c++)
            if (zr[c] > mx)
                mx = zr[c], arg = c;
        for (int c = 0; c < classes; c++)
            sum += exp(zr[c] - mx), zs += zr[c] - mx;
        double lse = log(sum);
        loss += (1 - sm) * (lse - (zr[lab[r]] - mx)) + sm * (lse - zs / classes);
        correct += arg == lab[r];
        for (int c = 0; c < classes; c++) {
            double t = sm / classes + (c == lab[r] ? 1 - sm : 0);
            double g = gs * (exp(zr[c] - mx) / sum - t),
                   e = fabs(d[0][(size_t)r * classes + c] - g);
            worst = e > worst ? e : worst;
        }
    }
    CHECK_NEAR(st[0][0], loss, 1e-5 * loss);
    CHECK(st[0][1] == (float)correct);
    CHECK_MSG(worst < 1e-6, "worst gradient error %g", worst);
    CHECK(memcmp(d[0], d[1], (size_t)rows * classes * 4) == 0 && st[0][0] == st[1][0]);
    free(d[0]), free(d[1]), free(z), free(lab);
}

/* Softmax cross-entropy of rows of every tail length (1 to 4100 classes,
 * past the 4K rows that keep their exps) on the AVX-512 and the AVX2
 * kernels against a double reference: loss, correct count (ties: the
 * first maximum), gradient added onto a nonzero one. Without smoothing
 * some logits are -inf (masked classes: they add nothing, the loss stays
 * finite); some rows have their label's logit tied with an earlier
 * maximum; a row with a NaN gives a NaN loss. */
static void xent_case(int rows, int classes, float sm, float gs)
{
    size_t nz = (size_t)rows * classes;
    float *z = frandv(nz), *d = frandv(nz), *d0 = NULL, st[2] = {0, 0};
    int32_t *lab = malloc(rows * sizeof *lab);
    for (size_t i = 0; i < nz; i++)
        z[i] = 8 * z[i];
    for (int r = 0; r < rows; r++) {
        float *zr = z + (size_t)r * classes;
        lab[r] = irand(0, classes - 1);
        int masked = irand(0, classes - 1);
        if (sm == 0 && r % 3 == 1 && masked != lab[r])
            zr[masked] = -INFINITY;
        if (r % 5 == 2) { /* the label ties with an earlier maximum, or is it */
            int a = irand(0, lab[r]);
            zr[a] = zr[lab[r]] = 9.0f;
        }
    }
    d0 = fcopy(d, nz);
    CHECK_OK(cpu()->ops->softmax_xent(cpu(), rows, classes, z, lab, sm, gs, d, st));
    double loss = 0, worst = 0;
    int correct = 0;
    for (int r = 0; r < rows; r++) {
        const float *zr = z + (size_t)r * classes;
        double mx = zr[0], sum = 0, zs = 0;
        int arg = 0;
        for (int c = 1; c < classes; c++)
            if (zr[c] > mx)
                mx = zr[c], arg = c;
        for (int c = 0; c < classes; c++)
            sum += exp(zr[c] - mx), zs += zr[c] - mx;
        double lse = log(sum);
        double nll = lse - (zr[lab[r]] - mx);
        loss += sm ? (1 - sm) * nll + sm * (lse - zs / classes) : nll;
        correct += arg == lab[r];
        for (int c = 0; c < classes; c++) {
            double t = sm / classes + (c == lab[r] ? 1 - sm : 0);
            size_t at = (size_t)r * classes + c;
            double g = d0[at] + gs * (exp(zr[c] - mx) / sum - t), e = fabs(d[at] - g);
            worst = e > worst ? e : worst;
        }
    }
    CHECK_MSG(fabs(st[0] - loss) <= 1e-5 * fabs(loss), "%d x %d: loss %.9g, want %.9g", rows,
              classes, st[0], loss);
    CHECK_MSG(st[1] == (float)correct, "%d x %d: correct %g, want %d", rows, classes, st[1],
              correct);
    CHECK_MSG(worst < 2e-6, "%d x %d: worst gradient error %g", rows, classes, worst);
    free(z), free(d), free(d0), free(lab);
}

static void test_softmax_xent_tails(void)
{
    static const int classes[] = {1, 2, 7, 15, 16, 17, 31, 33, 65, 96, 100, 257, 1000, 4100};
    int was = dl_cpu_avx512();
    for (int isa = 1; isa >= 0; isa--) {
        dl_cpu_set_avx512(isa);
        for (size_t k = 0; k < sizeof classes / sizeof *classes; k++) {
            int rows = classes[k] > 1000 ? 5 : classes[k] == 1000 ? 11 : 41;
            xent_case(rows, classes[k], 0.0f, 1.0f);
            xent_case(rows, classes[k], 0.1f, 0.25f);
        }
        /* a NaN in a row: its loss is NaN, whatever the path */
        float z[40], st[2] = {0, 0};
        int32_t lab[2] = {3, 17};
        for (int i = 0; i < 40; i++)
            z[i] = 0.1f * (float)i;
        z[25] = NAN;
        CHECK_OK(cpu()->ops->softmax_xent(cpu(), 2, 20, z, lab, 0.0f, 1.0f, NULL, st));
        CHECK_MSG(isnan(st[0]), "isa %d: loss %g of a row with a NaN", isa, st[0]);
    }
    dl_cpu_set_avx512(was);
}

#ifdef DL_CPU_VMATH
/* The softmax's exp and log (cpu_vmath.h) against libm: exp within its
 * stated bound (1.7e-7 + |x| 7.3e-8) e^x over [-90, 0], 0 below -87.3
 * and at -inf; log within 3 ulp over [1, 91] (below e^(1/8), 3 ulp of
 * 1/8); the 16-lane versions
 * the same bits as the 8-lane ones where the CPU has AVX-512F. */
DL_V512_TARGET static void softmax_vmath_v512(float x, float *e16, float *l16)
{
    float e[16], l[16];
    _mm512_storeu_ps(e, dl_v512_exp_sm(_mm512_set1_ps(x)));
    _mm512_storeu_ps(l, dl_v512_log_pos(_mm512_set1_ps(1.0f - x)));
    *e16 = e[5], *l16 = l[11];
}

static void test_softmax_vmath(void)
{
    const int wide = __builtin_cpu_supports("avx512f");
    double worst_e = 0, worst_l = 0;
    int same = 1;
    for (int i = 0; i <= 3000000; i++) {
        float x = -90.0f * (float)i / 3000000.0f, e8[8], l8[8], e16 = 0, l16 = 0;
        _mm256_storeu_ps(e8, dl_v_exp_sm(_mm256_set1_ps(x)));
        _mm256_storeu_ps(l8, dl_v_log_pos(_mm256_set1_ps(1.0f - x)));
        double want = exp((double)x), bound = (1.7e-7 + fabs(x) * 7.3e-8) * want;
        if (x < -87.3f)
            CHECK_MSG(e8[3] == 0, "exp_sm(%g) = %g, want 0", x, e8[3]);
        else
            worst_e = fmax(worst_e, fabs(e8[3] - want) / bound);
        /* near log 1 = 0 an ulp shrinks while the error does not: there
         * in ulps of 1/8 */
        double lw = log((double)(1.0f - x)), at = fmax(lw, 0.125);
        double ulp = nextafterf((float)at, 1e9f) - (float)at;
        if (x < 0)
            worst_l = fmax(worst_l, fabs(l8[6] - lw) / ulp);
        if (wide) {
            softmax_vmath_v512(x, &e16, &l16);
            same &= e16 == e8[3] && l16 == l8[6];
        }
    }
    float ninf[8];
    _mm256_storeu_ps(ninf, dl_v_exp_sm(_mm256_set1_ps(-INFINITY)));
    CHECK(ninf[0] == 0);
    CHECK_MSG(worst_e <= 1.0, "exp_sm: worst error %.3g of its bound", worst_e);
    CHECK_MSG(worst_l <= 3.0, "log_pos: worst error %.3g ulp", worst_l);
    CHECK_MSG(same, "the 16-lane exp_sm / log_pos differ from the 8-lane ones");
}
#endif

/* Per-token softmax cross-entropy with ignored rows among the kept ones
 * (groups whose gradient pass skips some rows), on both kernels and row
 * lengths with every kind of tail, against a double reference: summed
 * loss, correct count, kept count, gradient of the mean (grad_scale =
 * kept, so a scale of 1) added onto a nonzero one; ignored rows' d keeps
 * its bits (a -0 among them stays -0). The same bits at 1 and 3 threads. */
static void xent_tokens_case(int rows, int classes)
{
    size_t nz = (size_t)rows * classes;
    float *z = frandv(nz), *d0 = frandv(nz), *d[2], st[2][3];
    int32_t *lab = malloc(rows * sizeof *lab);
    int kept = 0;
    for (size_t i = 0; i < nz; i++)
        z[i] *= 8;
    for (int r = 0; r < rows; r++) {
        lab[r] = r % 4 == 1 || r % 7 == 3 ? -100 : irand(0, classes - 1);
        kept += lab[r] != -100;
        if (lab[r] == -100)
            d0[(size_t)r * classes] = -0.0f;
    }
    for (int k = 0; k < 2; k++) {
        dl_backend *be = dl_backend_cpu_create(k == 0 ? 1 : 3);
        d[k] = fcopy(d0, nz);
        st[k][0] = st[k][1] = st[k][2] = 0;
        CHECK_OK(be->ops->softmax_xent_tokens(be, rows, classes, z, lab, -100, 0.1f, (float)kept,
                                              d[k], st[k]));
        dl_backend_cpu_destroy(be);
    }
    double loss = 0, worst = 0;
    int correct = 0, untouched = 1;
    for (int r = 0; r < rows; r++) {
        const float *zr = z + (size_t)r * classes;
        size_t at0 = (size_t)r * classes;
        if (lab[r] == -100) {
            untouched &= memcmp(d[0] + at0, d0 + at0, (size_t)classes * 4) == 0;
            continue;
        }
        double mx = zr[0], sum = 0, zs = 0;
        int arg = 0;
        for (int c = 1; c < classes; c++)
            if (zr[c] > mx)
                mx = zr[c], arg = c;
        for (int c = 0; c < classes; c++)
            sum += exp(zr[c] - mx), zs += zr[c] - mx;
        double lse = log(sum);
        loss += 0.9 * (lse - (zr[lab[r]] - mx)) + 0.1 * (lse - zs / classes);
        correct += arg == lab[r];
        for (int c = 0; c < classes; c++) {
            double t = 0.1 / classes + (c == lab[r] ? 0.9 : 0);
            double g = d0[at0 + c] + (exp(zr[c] - mx) / sum - t), e = fabs(d[0][at0 + c] - g);
            worst = e > worst ? e : worst;
        }
    }
    CHECK_MSG(fabs(st[0][0] - loss) <= 1e-5 * fabs(loss), "%d x %d: loss %.9g, want %.9g", rows,
              classes, st[0][0], loss);
    CHECK_MSG(st[0][1] == (float)correct && st[0][2] == (float)kept,
              "%d x %d: correct %g kept %g, want %d %d", rows, classes, st[0][1], st[0][2], correct,
              kept);
    CHECK_MSG(worst < 2e-6, "%d x %d: worst gradient error %g", rows, classes, worst);
    CHECK_MSG(untouched, "%d x %d: an ignored row's gradient changed", rows, classes);
    CHECK_MSG(memcmp(d[0], d[1], nz * 4) == 0 && memcmp(st[0], st[1], sizeof st[0]) == 0,
              "%d x %d: 1 and 3 threads differ", rows, classes);
    free(z), free(d0), free(d[0]), free(d[1]), free(lab);
}

static void test_softmax_xent_tokens_tails(void)
{
    static const int classes[] = {1, 7, 15, 16, 17, 33, 65, 96, 100, 1000, 4100};
    int was = dl_cpu_avx512();
    for (int isa = 1; isa >= 0; isa--) {
        dl_cpu_set_avx512(isa);
        for (size_t k = 0; k < sizeof classes / sizeof *classes; k++)
            xent_tokens_case(classes[k] >= 1000 ? 23 : 301, classes[k]);
    }
    dl_cpu_set_avx512(was);
}

/* Rows with extreme logits, each on its own and all in one call, on both
 * kernels: a logit of 1e30 (the label's: loss 0, gradient 0; another's:
 * loss 1e30 - z_y, gradient +1 there and -1 at the label), every class
 * -inf but the label (loss 0, gradient 0), -inf but the label and one
 * other equal to it (loss log 2, gradient +-1/2). */
static void test_softmax_xent_extremes(void)
{
    static const int classes[] = {5, 17, 100};
    int was = dl_cpu_avx512();
    for (int isa = 1; isa >= 0; isa--) {
        dl_cpu_set_avx512(isa);
        for (size_t k = 0; k < sizeof classes / sizeof *classes; k++) {
            const int n = classes[k], rows = 4;
            float *z = frandv((size_t)rows * n), *d = calloc((size_t)rows * n, 4), all[2] = {0, 0};
            int32_t lab[4] = {3, 4, 2, 1};
            z[0 * n + 3] = 1e30f;
            z[1 * n + 3] = 1e30f;
            for (int c = 0; c < n; c++) {
                z[2 * n + c] = c == 2 ? 0.5f : -INFINITY;
                z[3 * n + c] = c == 1 || c == 4 ? -7.0f : -INFINITY;
            }
            double want_loss[4] = {0, 1e30 - (double)z[1 * n + 4], 0, log(2.0)};
            double want_d[4][5] = {
                {0, 0, 0, 0, 0}, {0, 0, 0, 1, -1}, {0, 0, 0, 0, 0}, {0, -0.5, 0, 0, 0.5}};
            for (int r = 0; r < rows; r++) {
                float st[2] = {0, 0}, *dr = calloc(n, 4);
                CHECK_OK(cpu()->ops->softmax_xent(cpu(), 1, n, z + (size_t)r * n, lab + r, 0.0f,
                                                  1.0f, dr, st));
                CHECK_MSG(fabs(st[0] - want_loss[r]) <= 1e-6 * fabs(want_loss[r]) + 1e-6,
                          "isa %d, %d classes, row %d: loss %g, want %g", isa, n, r, st[0],
                          want_loss[r]);
                CHECK_MSG(st[1] == (r == 0 || r == 2 || r == 3 ? 1.0f : 0.0f),
                          "isa %d, %d classes, row %d: correct %g", isa, n, r, st[1]);
                double worst = 0;
                for (int c = 0; c < n; c++) {
                    double e = fabs(dr[c] - (c < 5 ? want_d[r][c] : 0));
                    worst = e > worst ? e : worst;
                }
                CHECK_MSG(worst < 1e-6, "isa %d, %d classes, row %d: gradient off by %g", isa, n, r,
                          worst);
                memcpy(d + (size_t)r * n, dr, (size_t)n * 4);
                free(dr);
            }
            /* all four in one call: the same gradients, the losses summed */
            float *d2 = calloc((size_t)rows * n, 4);
            CHECK_OK(cpu()->ops->softmax_xent(cpu(), rows, n, z, lab, 0.0f, 1.0f, d2, all));
            CHECK_MSG(memcmp(d, d2, (size_t)rows * n * 4) == 0 && all[1] == 3.0f,
                      "isa %d, %d classes: rows together differ from rows alone", isa, n);
            CHECK_NEAR(all[0], 1e30, 1e24);
            free(z), free(d), free(d2);
        }
    }
    dl_cpu_set_avx512(was);
}

/* BatchNorm and LayerNorm, forward and backward, give the same bits at 1
 * and 3 threads (planes and rows with tails). */
static void test_norm_threads(void)
{
    /* big enough that the pool splits channels, rows and columns */
    int n = 9, c = 6, inner = 3701, rows = 800, cols = 45;
    size_t nb = (size_t)n * c * inner, nl = (size_t)rows * cols;
    size_t nx = nb > nl ? nb : nl;
    float *x = frandv(nx), *dy = frandv(nx), *g = frandv(64), *b = frandv(64);
    float *out[2][6];
    for (int k = 0; k < 2; k++) {
        dl_backend *be = dl_backend_cpu_create(k == 0 ? 1 : 3);
        float *y = out[k][0] = malloc(nb * 4), *dx = out[k][1] = calloc(nb, 4);
        float *st = out[k][2] = calloc(4 * 64 + 2 * 64, 4);
        float *rm = st, *rv = st + 64, *sm = st + 128, *si = st + 192, *dg = st + 256;
        for (int i = 0; i < 64; i++)
            rv[i] = 1;
        CHECK_OK(be->ops->batchnorm_forward(be, 1, n, c, inner, 0.1f, 1e-5f, y, x, g, b, rm, rv, sm,
                                            si));
        CHECK_OK(be->ops->batchnorm_backward(be, n, c, inner, dx, dg, dg + 32, dy, x, g, sm, si));
        float *ly = out[k][3] = malloc(nl * 4), *ldx = out[k][4] = calloc(nl, 4);
        float *ls = out[k][5] = calloc(2 * rows + 2 * cols, 4);
        CHECK_OK(be->ops->layernorm_forward(be, rows, cols, 1e-5f, ly, x, g, b, ls, ls + rows));
        CHECK_OK(be->ops->layernorm_backward(be, rows, cols, ldx, ls + 2 * rows,
                                             ls + 2 * rows + cols, dy, x, g, ls, ls + rows));
        dl_backend_cpu_destroy(be);
    }
    size_t sizes[6] = {nb, nb, 4 * 64 + 2 * 64, nl, nl, 2 * (size_t)rows + 2 * (size_t)cols};
    for (int i = 0; i < 6; i++)
        for (size_t j = 0; j < sizes[i]; j++)
            if (memcmp(&out[0][i][j], &out[1][i][j], 4)) {
                CHECK_MSG(0, "output %d differs at %zu: %.9g vs %.9g", i, j, out[0][i][j],
                          out[1][i][j]);
                break;
            }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 6; i++)
            free(out[k][i]);
    free(x), free(dy), free(g), free(b);
}

/* BatchNorm streams its tensor plane after plane and adds each channel's
 * plane sums in image order: every channel of x [n, c, inner] must get
 * the very bits it gets alone, as x[:, ch] [n, 1, inner], forward
 * (train, plain and with the ReLU fused) and backward, at 2 threads; at
 * inner 1 likewise for the blocks of columns. */
static void batchnorm_channels_alone(int n, int c, int inner)
{
    size_t nx = (size_t)n * c * inner, nc = (size_t)n * inner;
    float *x = frandv(nx), *dy = frandv(nx), *g = frandv(c), *b = frandv(c);
    for (size_t i = 0; i < nx; i++)
        x[i] = 3.0f * x[i] + 10.0f;
    dl_backend *be = dl_backend_cpu_create(2);
    for (int relu = 0; relu < 2; relu++) {
        float *y = malloc(nx * 4), *dx = calloc(nx, 4), *st = calloc(6 * (size_t)c, 4);
        float *sm = st, *si = st + c, *dg = st + 2 * c, *db = st + 3 * c;
        if (relu) {
            CHECK_OK(be->ops->batchnorm_relu_forward(be, 1, n, c, inner, 0.1f, 1e-5f, y, x, g, b,
                                                     NULL, NULL, sm, si));
            CHECK_OK(be->ops->batchnorm_relu_backward_set(be, n, c, inner, dx, dg, db, dy, x, g, b,
                                                          sm, si));
        } else {
            CHECK_OK(be->ops->batchnorm_forward(be, 1, n, c, inner, 0.1f, 1e-5f, y, x, g, b, NULL,
                                                NULL, sm, si));
            CHECK_OK(be->ops->batchnorm_backward(be, n, c, inner, dx, dg, db, dy, x, g, sm, si));
        }
        for (int ch = 0; ch < c; ch++) {
            float *xc = malloc(nc * 4), *dyc = malloc(nc * 4), *yc = malloc(nc * 4);
            float *dxc = calloc(nc, 4), one[4] = {0, 0, 0, 0}; /* sm, si, dg, db */
            for (int i = 0; i < n; i++) {
                memcpy(xc + (size_t)i * inner, x + ((size_t)i * c + ch) * inner, inner * 4);
                memcpy(dyc + (size_t)i * inner, dy + ((size_t)i * c + ch) * inner, inner * 4);
            }
            if (relu) {
                CHECK_OK(be->ops->batchnorm_relu_forward(be, 1, n, 1, inner, 0.1f, 1e-5f, yc, xc,
                                                         g + ch, b + ch, NULL, NULL, one, one + 1));
                CHECK_OK(be->ops->batchnorm_relu_backward_set(
                    be, n, 1, inner, dxc, one + 2, one + 3, dyc, xc, g + ch, b + ch, one, one + 1));
            } else {
                CHECK_OK(be->ops->batchnorm_forward(be, 1, n, 1, inner, 0.1f, 1e-5f, yc, xc, g + ch,
                                                    b + ch, NULL, NULL, one, one + 1));
                CHECK_OK(be->ops->batchnorm_backward(be, n, 1, inner, dxc, one + 2, one + 3, dyc,
                                                     xc, g + ch, one, one + 1));
            }
            float whole[4] = {sm[ch], si[ch], dg[ch], db[ch]};
            CHECK_MSG(memcmp(whole, one, sizeof one) == 0,
                      "relu %d channel %d: statistics or dgamma/dbeta differ from it alone", relu,
                      ch);
            int same = 1;
            for (int i = 0; i < n; i++) {
                size_t at = ((size_t)i * c + ch) * inner, ac = (size_t)i * inner;
                same &= memcmp(y + at, yc + ac, inner * 4) == 0;
                same &= memcmp(dx + at, dxc + ac, inner * 4) == 0;
            }
            CHECK_MSG(same, "relu %d channel %d: y or dx differ from it alone", relu, ch);
            free(xc), free(dyc), free(yc), free(dxc);
        }
        free(y), free(dx), free(st);
    }
    dl_backend_cpu_destroy(be);
    free(x), free(dy), free(g), free(b);
}

static void test_batchnorm_channels_alone(void)
{
    batchnorm_channels_alone(6, 5, 40);
    /* BatchNorm1d: a column block's vector lanes against one column alone */
    batchnorm_channels_alone(7, 75, 1);
}

int main(void)
{
    RUN(test_pool_each_index_once);
    RUN(test_conv_bf16_kernels);
    RUN(test_conv_lowp_emulated);
    RUN(test_gemm_f32);
    RUN(test_gemm_bf16);
    RUN(test_gemm_widened);
    RUN(test_gemm_edges);
    RUN(test_conv_reference);
    RUN(test_conv_small);
    RUN(test_conv_threads);
    RUN(test_conv_1x1);
    RUN(test_conv_grouped);
    RUN(test_conv_depthwise);
    RUN(test_conv_dilated);
    RUN(test_conv_winograd);
    RUN(test_conv_sparse_dy);
    RUN(test_conv_fd);
    RUN(test_conv_errors);
    RUN(test_pool_reference);
    RUN(test_adaptive_pool);
    RUN(test_pool_fd);
    RUN(test_relu_maxpool_fused);
    RUN(test_maxpool3_kernels);
    RUN(test_avgpool3_kernels);
    RUN(test_maxpool2_paths);
    RUN(test_batchnorm);
    RUN(test_batchnorm_large);
    RUN(test_batchnorm_channels_alone);
    RUN(test_layernorm);
    RUN(test_layernorm_isa);
    RUN(test_norm_fd_own_forward);
    RUN(test_attention_reference);
    RUN(test_attention_threads);
    RUN(test_smooth_activations);
    RUN(test_dropout_masks);
    RUN(test_softmax_xent_reference);
    RUN(test_softmax_xent_tails);
#ifdef DL_CPU_VMATH
    RUN(test_softmax_vmath);
#endif
    RUN(test_softmax_xent_tokens_tails);
    RUN(test_softmax_xent_extremes);
    RUN(test_norm_threads);
    CHECK_EXIT();
}
