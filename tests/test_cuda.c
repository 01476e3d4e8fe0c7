/* test_cuda.c - every backend op on CUDA against the CPU backend; skips with the reason without a GPU
 *
 * Inputs are random (counter RNG, fixed seeds), the same on both sides;
 * results are compared element by element with |gpu - cpu| <= atol + rtol
 * |cpu|. Tolerances per dtype:
 *   f32 elementwise, norms, losses     1e-5 relative (FMA contraction and
 *                                      summation order differ)
 *   f32 products (gemm, conv)          1e-5 relative to sqrt(k); with TF32
 *                                      allowed (DLBENCH_CUDA_TF32=1) 2e-3
 *   bf16/f16 products                  both sides multiply the same rounded
 *                                      operands in f32: 1e-4 relative to sqrt(k)
 * This binary runs with DLBENCH_CUDA_TF32=0 unless the variable is set, so
 * f32 products are checked at full precision; tests/gpu/run.sh runs it a
 * second time with TF32 on.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "engine/core/backend.h"
#include "engine/base/error.h"
#include "engine/base/half.h"
#include "engine/base/rng.h"
#include "engine/core/tensor.h"

static dl_backend *cpu, *gpu;
static char why[512];
static int tf32;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (!gpu) {                                                                                \
            SKIP("%.240s", why);                                                                   \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* --- buffers mirrored on both backends ------------------------------------------- */

typedef struct pair {
    size_t bytes;
    void *c; /* CPU backend memory (host) */
    void *g; /* device memory */
} pair;

static pair pair_new(const void *host, size_t bytes)
{
    pair p = {bytes, cpu->ops->alloc(cpu, bytes), gpu->ops->alloc(gpu, bytes)};
    DL_ASSERT(p.c && p.g);
    memcpy(p.c, host, bytes);
    DL_ASSERT(gpu->ops->to_device(gpu, p.g, host, bytes) == DL_OK);
    return p;
}

static void pair_free(pair *p)
{
    cpu->ops->free(cpu, p->c);
    gpu->ops->free(gpu, p->g);
}

static float *rand_host(size_t n, float lo, float hi, uint64_t seed)
{
    float *h = malloc(n * sizeof *h + 1);
    DL_ASSERT(h);
    for (size_t i = 0; i < n; i++)
        h[i] = lo + (hi - lo) * dl_rng_uniform(seed, 77, 0, i);
    return h;
}

static pair pair_rand(size_t n, float lo, float hi, uint64_t seed)
{
    float *h = rand_host(n, lo, hi, seed);
    pair p = pair_new(h, n * sizeof(float));
    free(h);
    return p;
}

static pair pair_const(size_t n, float v)
{
    float *h = malloc(n * sizeof *h + 1);
    DL_ASSERT(h);
    for (size_t i = 0; i < n; i++)
        h[i] = v;
    pair p = pair_new(h, n * sizeof(float));
    free(h);
    return p;
}

/* Host copy of the device side (synchronises). */
static void *fetch(const pair *p)
{
    void *h = malloc(p->bytes + 1);
    DL_ASSERT(h);
    CHECK_OK(gpu->ops->to_host(gpu, h, p->g, p->bytes));
    return h;
}

/* Checks n floats of the device side against the CPU side. */
static void compare_f32(const pair *p, size_t n, double atol, double rtol, const char *what)
{
    float *g = fetch(p);
    const float *c = p->c;
    size_t worst = 0;
    double worst_excess = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)g[i] - (double)c[i]);
        double lim = atol + rtol * fabs((double)c[i]);
        int both_nan = isnan(g[i]) && isnan(c[i]);
        int same_inf = isinf(g[i]) && g[i] == c[i];
        if (both_nan || same_inf)
            continue;
        if (!(d <= lim) && (!bad || d - lim > worst_excess)) {
            worst = i;
            worst_excess = d - lim;
            bad = 1;
        }
    }
    CHECK_MSG(!bad, "%s: element %zu of %zu: gpu %.9g, cpu %.9g (atol %g, rtol %g)", what, worst, n,
              (double)g[worst], (double)c[worst], atol, rtol);
    free(g);
}

static void compare_bytes(const pair *p, const char *what)
{
    unsigned char *g = fetch(p);
    CHECK_MSG(memcmp(g, p->c, p->bytes) == 0, "%s: bytes differ", what);
    free(g);
}

#define TOL 1e-5

/* --- loader and memory --------------------------------------------------------------- */

static void test_open(void)
{
    dl_backend *b = dl_backend_by_name("cpu", NULL, 0);
    CHECK(b == cpu);
    char msg[256];
    CHECK(dl_backend_by_name("tpu", msg, sizeof msg) == NULL);
    CHECK(strstr(msg, "cpu") && strstr(msg, "cuda") && strstr(msg, "auto"));
    b = dl_backend_by_name("auto", msg, sizeof msg);
    CHECK(b == (gpu ? gpu : cpu));
    if (!gpu) {
        CHECK_MSG(why[0] != 0, "no reason given for the missing GPU");
        CHECK(msg[0] != 0);
        SKIP("%.240s", why);
        return;
    }
    CHECK(gpu->ops->api_version == DL_BACKEND_API_VERSION);
    CHECK(gpu->ops->device == DL_DEVICE_CUDA);
    CHECK(strncmp(gpu->description, "cuda: ", 6) == 0);
    printf("  %s%s\n", gpu->description, tf32 ? " (TF32 products)" : "");
}

static void test_memory(void)
{
    NEED_GPU();
    size_t n = 100003;
    pair a = pair_rand(n, -1, 1, 1), b = pair_const(n, 0);
    CHECK_OK(gpu->ops->copy(gpu, b.g, a.g, n * 4));
    memcpy(b.c, a.c, n * 4);
    compare_bytes(&b, "copy");
    CHECK_OK(gpu->ops->memset0(gpu, b.g, 1000 * 4));
    memset(b.c, 0, 1000 * 4);
    compare_bytes(&b, "memset0");
    CHECK_OK(gpu->ops->fill(gpu, b.g, 2.5f, 777));
    CHECK_OK(cpu->ops->fill(cpu, b.c, 2.5f, 777));
    compare_bytes(&b, "fill");
    /* pinned host memory round trip */
    float *pin = gpu->ops->host_alloc(gpu, n * 4);
    CHECK(pin != NULL);
    if (pin) {
        CHECK_OK(gpu->ops->to_host(gpu, pin, a.g, n * 4));
        CHECK(memcmp(pin, a.c, n * 4) == 0);
        /* a pinned source may be reused as soon as to_device returns (the
         * loaders refill their pinned batch buffers without a sync), even
         * with the stream busy */
        size_t big = (size_t)64 << 20;
        float *busy = gpu->ops->alloc(gpu, big * 4);
        CHECK(busy != NULL);
        if (busy) {
            CHECK_OK(gpu->ops->memset0(gpu, busy, big * 4));
            for (int i = 0; i < 20; i++)
                CHECK_OK(gpu->ops->scale(gpu, busy, 1.5f, big));
        }
        CHECK_OK(gpu->ops->to_device(gpu, b.g, pin, n * 4)); /* pin holds a */
        memset(pin, 0xff, n * 4);                            /* NaNs */
        float *back = fetch(&b);
        CHECK_MSG(memcmp(back, a.c, n * 4) == 0, "to_device read the pinned source late");
        free(back);
        gpu->ops->free(gpu, busy);
        gpu->ops->host_free(gpu, pin);
    }
    /* out of memory: NULL with the size asked and the memory free */
    dl_error_clear();
    void *huge = gpu->ops->alloc(gpu, (size_t)1 << 52);
    CHECK(huge == NULL);
    CHECK_MSG(strstr(dl_error_message(), "free") != NULL, "message: %s", dl_error_message());
    gpu->ops->free(gpu, huge);
    gpu->ops->free(gpu, NULL);
    /* the context still works after the failed allocation */
    CHECK_OK(gpu->ops->sync(gpu));
    pair_free(&a);
    pair_free(&b);
}

static void test_storage_move(void)
{
    NEED_GPU();
    size_t bytes = 3 * 1000 * 1000 + 5;
    dl_storage *s = dl_storage_create(cpu, bytes);
    CHECK(s != NULL);
    if (!s)
        return;
    unsigned char *p = s->ptr;
    for (size_t i = 0; i < bytes; i++)
        p[i] = (unsigned char)(i * 131 + 7);
    CHECK_OK(dl_storage_move(s, gpu));
    CHECK(s->be == gpu);
    CHECK_OK(dl_storage_move(s, cpu));
    CHECK(s->be == cpu);
    p = s->ptr;
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++)
        bad += p[i] != (unsigned char)(i * 131 + 7);
    CHECK_MSG(bad == 0, "%zu bytes changed by the CPU->GPU->CPU move", bad);
    /* a zeroed storage created directly on the GPU */
    dl_storage *z = dl_storage_create(gpu, 4096);
    CHECK(z != NULL);
    if (z) {
        unsigned char h[4096];
        CHECK_OK(gpu->ops->to_host(gpu, h, z->ptr, sizeof h));
        int nz = 0;
        for (size_t i = 0; i < sizeof h; i++)
            nz += h[i] != 0;
        CHECK(nz == 0);
        dl_storage_release(z);
    }
    dl_storage_release(s);
}

/* --- products --------------------------------------------------------------------------- */

/* Stores f32 values as dtype t (f32 as is). */
static void *to_dtype(const float *x, size_t n, dl_dtype t)
{
    if (t == DL_F32) {
        void *h = malloc(n * 4 + 1);
        memcpy(h, x, n * 4);
        return h;
    }
    uint16_t *h = malloc(n * 2 + 1);
    for (size_t i = 0; i < n; i++)
        h[i] = t == DL_BF16 ? dl_f32_to_bf16(x[i]) : dl_f32_to_f16(x[i]);
    return h;
}

static void gemm_case(int ta, int tb, int m, int n, int k, float alpha, float beta, dl_dtype t,
                      int pad)
{
    int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb;
    float *ha = rand_host(na, -1, 1, 11), *hb = rand_host(nb, -1, 1, 12);
    void *ta_h = to_dtype(ha, na, t), *tb_h = to_dtype(hb, nb, t);
    size_t es = t == DL_F32 ? 4 : 2;
    pair a = pair_new(ta_h, na * es), b = pair_new(tb_h, nb * es);
    pair c = pair_rand((size_t)m * ldc, -1, 1, 13);
    CHECK_OK(cpu->ops->gemm(cpu, ta, tb, m, n, k, alpha, a.c, lda, b.c, ldb, t, beta, c.c, ldc));
    CHECK_OK(gpu->ops->gemm(gpu, ta, tb, m, n, k, alpha, a.g, lda, b.g, ldb, t, beta, c.g, ldc));
    double rel = t != DL_F32 ? 1e-4 : tf32 ? 2e-3 : 1e-5;
    char what[96];
    snprintf(what, sizeof what, "gemm %s ta %d tb %d %dx%dx%d", dl_dtype_name(t), ta, tb, m, n, k);
    compare_f32(&c, (size_t)m * ldc, rel * sqrt((double)k + 1), rel, what);
    pair_free(&a);
    pair_free(&b);
    pair_free(&c);
    free(ha);
    free(hb);
    free(ta_h);
    free(tb_h);
}

static void test_gemm(void)
{
    NEED_GPU();
    dl_dtype types[] = {DL_F32, DL_BF16, DL_F16};
    for (int ti = 0; ti < 3; ti++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                gemm_case(ta, tb, 37, 53, 71, 1.0f, 0.0f, types[ti], 0);
                gemm_case(ta, tb, 64, 96, 128, 0.5f, 1.0f, types[ti], 3);
            }
    gemm_case(0, 0, 300, 257, 513, 1.0f, 0.25f, DL_F32, 0);
    gemm_case(0, 1, 300, 257, 513, 1.0f, 0.0f, DL_BF16, 0);
    gemm_case(1, 0, 5, 7, 0, 1.0f, 0.5f, DL_F32, 0); /* k == 0: C = beta C */
    /* alpha == 0: A is not read, so its NaN does not reach C */
    int m = 6, n = 5, k = 4;
    float *ha = rand_host((size_t)m * k, -1, 1, 14), *hb = rand_host((size_t)k * n, -1, 1, 15);
    ha[7] = NAN;
    pair a = pair_new(ha, (size_t)m * k * 4), b = pair_new(hb, (size_t)k * n * 4);
    pair c = pair_rand((size_t)m * n, -1, 1, 16);
    CHECK_OK(cpu->ops->gemm(cpu, 0, 0, m, n, k, 0.0f, a.c, k, b.c, n, DL_F32, 0.5f, c.c, n));
    CHECK_OK(gpu->ops->gemm(gpu, 0, 0, m, n, k, 0.0f, a.g, k, b.g, n, DL_F32, 0.5f, c.g, n));
    compare_f32(&c, (size_t)m * n, 0, 0, "gemm alpha 0");
    float *hc = fetch(&c);
    int nans = 0;
    for (int i = 0; i < m * n; i++)
        nans += isnan(hc[i]);
    CHECK_MSG(nans == 0, "gemm alpha 0: %d NaNs from A reached C", nans);
    free(hc);
    pair_free(&a);
    pair_free(&b);
    pair_free(&c);
    free(ha);
    free(hb);
}

static void conv_case(dl_conv_desc d, dl_dtype compute, int with_bias)
{
    int dil = dl_conv_dilation(&d), cg = d.c / dl_conv_groups(&d);
    d.p = (d.h + 2 * d.pad - dil * (d.r - 1) - 1) / d.stride + 1;
    d.q = (d.w + 2 * d.pad - dil * (d.s - 1) - 1) / d.stride + 1;
    size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.k * cg * d.r * d.s;
    size_t ny = (size_t)d.n * d.k * d.p * d.q;
    pair x = pair_rand(nx, -1, 1, 21), w = pair_rand(nw, -1, 1, 22), b = pair_rand(d.k, -1, 1, 23);
    pair y = pair_const(ny, 0), dy = pair_rand(ny, -1, 1, 24);
    pair dx = pair_rand(nx, -1, 1, 25), dw = pair_rand(nw, -1, 1, 26),
         db = pair_rand(d.k, -1, 1, 27);
    size_t wsc = cpu->ops->conv_workspace(cpu, &d, compute);
    size_t wsg = gpu->ops->conv_workspace(gpu, &d, compute);
    void *bc = wsc ? cpu->ops->alloc(cpu, wsc) : NULL, *bg = wsg ? gpu->ops->alloc(gpu, wsg) : NULL;
    const float *bias_c = with_bias ? b.c : NULL, *bias_g = with_bias ? b.g : NULL;
    CHECK_OK(cpu->ops->conv_forward(cpu, &d, y.c, x.c, w.c, bias_c, bc, wsc, compute));
    CHECK_OK(gpu->ops->conv_forward(gpu, &d, y.g, x.g, w.g, bias_g, bg, wsg, compute));
    CHECK_OK(cpu->ops->conv_backward_data(cpu, &d, dx.c, dy.c, w.c, bc, wsc, compute));
    CHECK_OK(gpu->ops->conv_backward_data(gpu, &d, dx.g, dy.g, w.g, bg, wsg, compute));
    CHECK_OK(cpu->ops->conv_backward_filter(cpu, &d, dw.c, with_bias ? db.c : NULL, dy.c, x.c, bc,
                                            wsc, compute));
    CHECK_OK(gpu->ops->conv_backward_filter(gpu, &d, dw.g, with_bias ? db.g : NULL, dy.g, x.g, bg,
                                            wsg, compute));
    double rel = compute != DL_F32 ? 1e-4 : tf32 ? 2e-3 : 1e-5;
    char what[128];
    snprintf(what, sizeof what, "conv %s n%d c%d %dx%d k%d %dx%d s%d p%d g%d d%d",
             dl_dtype_name(compute), d.n, d.c, d.h, d.w, d.k, d.r, d.s, d.stride, d.pad,
             dl_conv_groups(&d), dil);
    double kf = sqrt((double)cg * d.r * d.s), kd = sqrt((double)d.k * d.r * d.s),
           kw = sqrt((double)d.n * d.p * d.q);
    compare_f32(&y, ny, rel * kf, rel, what);
    compare_f32(&dx, nx, rel * kd, rel, what);
    compare_f32(&dw, nw, rel * kw, rel, what);
    compare_f32(&db, d.k, TOL * kw, TOL, what);
    /* a second call reuses the cached algorithms, without a workspace */
    CHECK_OK(gpu->ops->conv_forward(gpu, &d, y.g, x.g, w.g, bias_g, NULL, 0, compute));
    compare_f32(&y, ny, rel * kf, rel, what);
    /* a workspace one byte short is refused, naming both sizes */
    if (wsg > 0) {
        CHECK(gpu->ops->conv_forward(gpu, &d, y.g, x.g, w.g, bias_g, bg, wsg - 1, compute) ==
              DL_EINVAL);
        CHECK_MSG(strstr(dl_error_message(), "needed"), "%s", dl_error_message());
    }
    /* low precision chooses matrix-product algorithms only (exact in TF32) */
    char algo[256] = "";
    CHECK_OK(gpu->ops->conv_algo(gpu, &d, compute, algo, sizeof algo));
    if (compute != DL_F32)
        CHECK_MSG(!strstr(algo, "FFT") && !strstr(algo, "WINOGRAD") && !strstr(algo, "DIRECT"),
                  "%s: %s", what, algo);
    cpu->ops->free(cpu, bc);
    gpu->ops->free(gpu, bg);
    pair *all[] = {&x, &w, &b, &y, &dy, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

static void test_conv(void)
{
    NEED_GPU();
    dl_conv_desc shapes[] = {
        {.n = 2, .c = 3, .h = 9, .w = 9, .k = 4, .r = 3, .s = 3, .stride = 1, .pad = 1},
        {.n = 3, .c = 8, .h = 12, .w = 11, .k = 16, .r = 3, .s = 3, .stride = 2, .pad = 1},
        {.n = 4, .c = 16, .h = 7, .w = 7, .k = 8, .r = 1, .s = 1, .stride = 1, .pad = 0},
        {.n = 2, .c = 1, .h = 28, .w = 28, .k = 6, .r = 5, .s = 5, .stride = 1, .pad = 2},
        /* grouped, depthwise (groups == c, with a multiplier of 2), dilated */
        {.n = 2,
         .c = 8,
         .h = 9,
         .w = 10,
         .k = 12,
         .r = 3,
         .s = 3,
         .stride = 1,
         .pad = 1,
         .groups = 4},
        {.n = 3,
         .c = 16,
         .h = 14,
         .w = 14,
         .k = 16,
         .r = 3,
         .s = 3,
         .stride = 2,
         .pad = 1,
         .groups = 16},
        {.n = 2,
         .c = 6,
         .h = 8,
         .w = 8,
         .k = 12,
         .r = 3,
         .s = 3,
         .stride = 1,
         .pad = 1,
         .groups = 6},
        {.n = 2,
         .c = 4,
         .h = 11,
         .w = 9,
         .k = 6,
         .r = 3,
         .s = 3,
         .stride = 1,
         .pad = 2,
         .groups = 2,
         .dilation = 2},
    };
    dl_dtype types[] = {DL_F32, DL_BF16, DL_F16};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int t = 0; t < 3; t++)
            conv_case(shapes[i], types[t], (int)(i + t) % 2 == 0);
}

/* --- conversions ----------------------------------------------------------------------------- */

static void test_cast(void)
{
    NEED_GPU();
    size_t n = 4099;
    float *h = rand_host(n, -70000, 70000, 31);
    float special[] = {0.0f,
                       -0.0f,
                       INFINITY,
                       -INFINITY,
                       NAN,
                       65504.0f,
                       65519.0f,
                       65520.0f,
                       1e-8f,
                       6e-8f,
                       3e-5f,
                       1.0f + 1.0f / 256,
                       1.0f + 1.0f / 128,
                       3.3895314e38f};
    memcpy(h, special, sizeof special);
    for (size_t i = sizeof special / sizeof special[0]; i < 1000; i++)
        h[i] *= 1e-9f; /* subnormal range of f16 */
    pair x = pair_new(h, n * 4);
    dl_dtype lows[] = {DL_BF16, DL_F16};
    for (int t = 0; t < 2; t++) {
        pair lo = pair_const(n / 2 + 1, 0), back = pair_const(n, 0), r = pair_new(h, n * 4);
        CHECK_OK(cpu->ops->cast(cpu, lo.c, lows[t], x.c, DL_F32, n));
        CHECK_OK(gpu->ops->cast(gpu, lo.g, lows[t], x.g, DL_F32, n));
        compare_bytes(&lo, lows[t] == DL_BF16 ? "f32 -> bf16" : "f32 -> f16");
        CHECK_OK(cpu->ops->cast(cpu, back.c, DL_F32, lo.c, lows[t], n));
        CHECK_OK(gpu->ops->cast(gpu, back.g, DL_F32, lo.g, lows[t], n));
        compare_f32(&back, n, 0, 0, "low -> f32");
        CHECK_OK(cpu->ops->round_through(cpu, r.c, r.c, lows[t], n));
        CHECK_OK(gpu->ops->round_through(gpu, r.g, r.g, lows[t], n));
        compare_f32(&r, n, 0, 0, "round_through");
        pair_free(&lo);
        pair_free(&back);
        pair_free(&r);
    }
    CHECK(gpu->ops->cast(gpu, x.g, DL_U8, x.g, DL_F32, 1) == DL_EUNSUPPORTED);
    pair_free(&x);
    free(h);
}

static void test_input(void)
{
    NEED_GPU();
    size_t rows = 5, plane = 7 * 3;
    int ch = 3;
    size_t n = rows * ch * plane;
    uint8_t *u8 = malloc(n);
    int32_t *i32 = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        u8[i] = (uint8_t)(i * 37);
        i32[i] = (int32_t)(i * 7919) - 50000;
    }
    float mean[3] = {0.5f, 0.25f, -0.1f}, stdv[3] = {0.2f, 0.3f, 2.0f};
    pair s8 = pair_new(u8, n), s32 = pair_new(i32, n * 4), sf = pair_rand(n, -5, 5, 41);
    pair out = pair_const(n, 0);
    CHECK_OK(
        cpu->ops->input_to_f32(cpu, out.c, s8.c, DL_U8, rows, ch, plane, 1 / 255.0f, mean, stdv));
    CHECK_OK(
        gpu->ops->input_to_f32(gpu, out.g, s8.g, DL_U8, rows, ch, plane, 1 / 255.0f, mean, stdv));
    compare_f32(&out, n, 1e-6, TOL, "u8 input");
    CHECK_OK(cpu->ops->input_to_f32(cpu, out.c, s32.c, DL_I32, rows, ch, plane, 0.5f, NULL, NULL));
    CHECK_OK(gpu->ops->input_to_f32(gpu, out.g, s32.g, DL_I32, rows, ch, plane, 0.5f, NULL, NULL));
    compare_f32(&out, n, 0, TOL, "i32 input");
    CHECK_OK(
        cpu->ops->input_to_f32(cpu, out.c, sf.c, DL_F32, rows * ch, 0, plane, 2.0f, NULL, NULL));
    CHECK_OK(
        gpu->ops->input_to_f32(gpu, out.g, sf.g, DL_F32, rows * ch, 0, plane, 2.0f, NULL, NULL));
    compare_f32(&out, n, 0, TOL, "f32 input");
    pair_free(&s8);
    pair_free(&s32);
    pair_free(&sf);
    pair_free(&out);
    free(u8);
    free(i32);
}

/* --- elementwise ------------------------------------------------------------------------------ */

static void test_bias(void)
{
    NEED_GPU();
    int shapes[][3] = {{17, 33, 1}, {6, 5, 49}, {300, 10, 1}};
    for (int s = 0; s < 3; s++) {
        int rows = shapes[s][0], cols = shapes[s][1], inner = shapes[s][2];
        size_t n = (size_t)rows * cols * inner;
        pair y = pair_rand(n, -1, 1, 51), b = pair_rand(cols, -1, 1, 52);
        pair db = pair_rand(cols, -1, 1, 53);
        CHECK_OK(cpu->ops->bias_add(cpu, y.c, b.c, rows, cols, inner));
        CHECK_OK(gpu->ops->bias_add(gpu, y.g, b.g, rows, cols, inner));
        compare_f32(&y, n, 1e-6, TOL, "bias_add");
        CHECK_OK(cpu->ops->bias_grad(cpu, db.c, y.c, rows, cols, inner));
        CHECK_OK(gpu->ops->bias_grad(gpu, db.g, y.g, rows, cols, inner));
        compare_f32(&db, cols, 1e-5 * sqrt((double)rows * inner), TOL, "bias_grad");
        pair_free(&y);
        pair_free(&b);
        pair_free(&db);
    }
}

static void test_act(void)
{
    NEED_GPU();
    size_t n = 10007;
    dl_act kinds[] = {DL_ACT_RELU, DL_ACT_GELU, DL_ACT_TANH, DL_ACT_SIGMOID, DL_ACT_SILU};
    const char *names[] = {"relu", "gelu", "tanh", "sigmoid", "silu"};
    for (int k = 0; k < 5; k++) {
        pair x = pair_rand(n, -6, 6, 61), y = pair_const(n, 0), dy = pair_rand(n, -1, 1, 62);
        pair dx = pair_rand(n, -1, 1, 63);
        CHECK_OK(cpu->ops->act_forward(cpu, kinds[k], y.c, x.c, n));
        CHECK_OK(gpu->ops->act_forward(gpu, kinds[k], y.g, x.g, n));
        compare_f32(&y, n, 1e-6, TOL, names[k]);
        /* both sides take the CPU's y, so backward differences are their own */
        CHECK_OK(gpu->ops->to_device(gpu, y.g, y.c, n * 4));
        CHECK_OK(cpu->ops->act_backward(cpu, kinds[k], dx.c, x.c, y.c, dy.c, n));
        CHECK_OK(gpu->ops->act_backward(gpu, kinds[k], dx.g, x.g, y.g, dy.g, n));
        compare_f32(&dx, n, 1e-6, TOL, names[k]);
        pair_free(&x);
        pair_free(&y);
        pair_free(&dy);
        pair_free(&dx);
    }
}

static void test_arith(void)
{
    NEED_GPU();
    size_t n = 65537;
    pair a = pair_rand(n, -1, 1, 71), b = pair_rand(n, -1, 1, 72), y = pair_const(n, 0);
    CHECK_OK(cpu->ops->add(cpu, y.c, a.c, b.c, n));
    CHECK_OK(gpu->ops->add(gpu, y.g, a.g, b.g, n));
    compare_f32(&y, n, 0, 0, "add");
    CHECK_OK(cpu->ops->axpy(cpu, y.c, -0.37f, a.c, n));
    CHECK_OK(gpu->ops->axpy(gpu, y.g, -0.37f, a.g, n));
    compare_f32(&y, n, 1e-7, 1e-6, "axpy");
    CHECK_OK(cpu->ops->scale(cpu, y.c, 3.5f, n));
    CHECK_OK(gpu->ops->scale(gpu, y.g, 3.5f, n));
    compare_f32(&y, n, 1e-7, 1e-6, "scale");
    pair_free(&a);
    pair_free(&b);
    pair_free(&y);
}

static void test_dropout(void)
{
    NEED_GPU();
    size_t n = 10001; /* not a multiple of the CPU's vector width: a scalar tail */
    pair x = pair_rand(n, 0.5f, 1.5f, 81), y = pair_const(n, -1), dx = pair_rand(n, -1, 1, 82);
    uint64_t seed = 0x1234567890abcdefull, stream = DL_STREAM_DROPOUT + 3, counter = 42;
    CHECK_OK(cpu->ops->dropout_forward(cpu, y.c, x.c, n, 0.3f, seed, stream, counter));
    CHECK_OK(gpu->ops->dropout_forward(gpu, y.g, x.g, n, 0.3f, seed, stream, counter));
    compare_f32(&y, n, 0, 0, "dropout mask"); /* same zeros, same scaled values */
    CHECK_OK(cpu->ops->dropout_backward(cpu, dx.c, x.c, n, 0.3f, seed, stream, counter));
    CHECK_OK(gpu->ops->dropout_backward(gpu, dx.g, x.g, n, 0.3f, seed, stream, counter));
    compare_f32(&dx, n, 1e-6, TOL, "dropout backward");
    CHECK(gpu->ops->dropout_forward(gpu, y.g, x.g, n, 1.0f, seed, stream, counter) == DL_EINVAL);
    pair_free(&x);
    pair_free(&y);
    pair_free(&dx);
}

/* --- pooling and normalisation ------------------------------------------------------------------ */

static void pool_case(dl_pool_desc d, dl_pool_kind kind)
{
    d.p = (d.h + 2 * d.pad - d.size) / d.stride + 1;
    d.q = (d.w + 2 * d.pad - d.size) / d.stride + 1;
    size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.p * d.q;
    /* values on a coarse grid, so windows hold ties: max routes to the first */
    float *h = rand_host(nx, -2, 2, 91);
    for (size_t i = 0; i < nx; i++)
        h[i] = roundf(h[i] * 2) / 2;
    pair x = pair_new(h, nx * 4), y = pair_const(ny, 0), dy = pair_rand(ny, -1, 1, 92);
    pair dx = pair_rand(nx, -1, 1, 93);
    CHECK_OK(cpu->ops->pool_forward(cpu, kind, &d, y.c, x.c));
    CHECK_OK(gpu->ops->pool_forward(gpu, kind, &d, y.g, x.g));
    compare_f32(&y, ny, 1e-6, TOL, kind == DL_POOL_MAX ? "max pool" : "avg pool");
    CHECK_OK(cpu->ops->pool_backward(cpu, kind, &d, dx.c, dy.c, x.c, y.c));
    CHECK_OK(gpu->ops->pool_backward(gpu, kind, &d, dx.g, dy.g, x.g, y.g));
    compare_f32(&dx, nx, 1e-6, TOL, kind == DL_POOL_MAX ? "max pool dx" : "avg pool dx");
    pair_free(&x);
    pair_free(&y);
    pair_free(&dy);
    pair_free(&dx);
    free(h);
}

static void test_pool(void)
{
    NEED_GPU();
    dl_pool_desc shapes[] = {
        {.n = 2, .c = 3, .h = 8, .w = 8, .size = 2, .stride = 2, .pad = 0},
        {.n = 2, .c = 4, .h = 9, .w = 7, .size = 3, .stride = 2, .pad = 1},
        {.n = 1, .c = 2, .h = 6, .w = 6, .size = 3, .stride = 1, .pad = 1},
    };
    for (int i = 0; i < 3; i++) {
        pool_case(shapes[i], DL_POOL_MAX);
        pool_case(shapes[i], DL_POOL_AVG);
    }
}

/* Adaptive average pooling: global (1x1), divisible and overlapping
 * windows (9 -> 4), an output larger than the input. */
static void test_adaptive_pool(void)
{
    NEED_GPU();
    if (!gpu->ops->adaptive_avgpool_forward || !cpu->ops->adaptive_avgpool_forward) {
        SKIP("a backend has no adaptive average pooling");
        return;
    }
    dl_pool_desc shapes[] = {
        {.n = 3, .c = 16, .h = 7, .w = 7, .p = 1, .q = 1},
        {.n = 2, .c = 5, .h = 8, .w = 6, .p = 4, .q = 3},
        {.n = 2, .c = 3, .h = 9, .w = 7, .p = 4, .q = 5},
        {.n = 1, .c = 2, .h = 3, .w = 2, .p = 5, .q = 4},
    };
    for (int i = 0; i < 4; i++) {
        dl_pool_desc d = shapes[i];
        size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.c * d.p * d.q;
        pair x = pair_rand(nx, -1, 1, 121), y = pair_const(ny, 0);
        pair dy = pair_rand(ny, -1, 1, 122), dx = pair_rand(nx, -1, 1, 123);
        CHECK_OK(cpu->ops->adaptive_avgpool_forward(cpu, &d, y.c, x.c));
        CHECK_OK(gpu->ops->adaptive_avgpool_forward(gpu, &d, y.g, x.g));
        compare_f32(&y, ny, 1e-6, TOL, "adaptive avgpool y");
        CHECK_OK(cpu->ops->adaptive_avgpool_backward(cpu, &d, dx.c, dy.c));
        CHECK_OK(gpu->ops->adaptive_avgpool_backward(gpu, &d, dx.g, dy.g));
        compare_f32(&dx, nx, 1e-6, TOL, "adaptive avgpool dx");
        pair_free(&x);
        pair_free(&y);
        pair_free(&dy);
        pair_free(&dx);
    }
}

static void test_batchnorm(void)
{
    NEED_GPU();
    int shapes[][3] = {{8, 5, 49}, {64, 12, 1}};
    for (int s = 0; s < 2; s++) {
        int n = shapes[s][0], c = shapes[s][1], inner = shapes[s][2];
        size_t total = (size_t)n * c * inner;
        pair x = pair_rand(total, -2, 3, 101), y = pair_const(total, 0);
        pair g = pair_rand(c, 0.5f, 1.5f, 102), b = pair_rand(c, -1, 1, 103);
        pair rm = pair_rand(c, -1, 1, 104), rv = pair_rand(c, 0.5f, 2, 105);
        pair sm = pair_const(c, 0), si = pair_const(c, 0);
        CHECK_OK(cpu->ops->batchnorm_forward(cpu, 1, n, c, inner, 0.1f, 1e-5f, y.c, x.c, g.c, b.c,
                                             rm.c, rv.c, sm.c, si.c));
        CHECK_OK(gpu->ops->batchnorm_forward(gpu, 1, n, c, inner, 0.1f, 1e-5f, y.g, x.g, g.g, b.g,
                                             rm.g, rv.g, sm.g, si.g));
        compare_f32(&y, total, 1e-5, TOL, "batchnorm y");
        compare_f32(&rm, c, 1e-6, TOL, "running mean");
        compare_f32(&rv, c, 1e-6, TOL, "running var");
        compare_f32(&sm, c, 1e-6, TOL, "save mean");
        compare_f32(&si, c, 1e-6, TOL, "save invstd");
        pair dy = pair_rand(total, -1, 1, 106), dx = pair_rand(total, -1, 1, 107);
        pair dg = pair_rand(c, -1, 1, 108), dbt = pair_rand(c, -1, 1, 109);
        CHECK_OK(cpu->ops->batchnorm_backward(cpu, n, c, inner, dx.c, dg.c, dbt.c, dy.c, x.c, g.c,
                                              sm.c, si.c));
        CHECK_OK(gpu->ops->batchnorm_backward(gpu, n, c, inner, dx.g, dg.g, dbt.g, dy.g, x.g, g.g,
                                              sm.g, si.g));
        compare_f32(&dx, total, 1e-5, 1e-4, "batchnorm dx");
        compare_f32(&dg, c, 1e-4, TOL, "batchnorm dgamma");
        compare_f32(&dbt, c, 1e-4, TOL, "batchnorm dbeta");
        CHECK_OK(cpu->ops->batchnorm_forward(cpu, 0, n, c, inner, 0.1f, 1e-5f, y.c, x.c, g.c, b.c,
                                             rm.c, rv.c, NULL, NULL));
        CHECK_OK(gpu->ops->batchnorm_forward(gpu, 0, n, c, inner, 0.1f, 1e-5f, y.g, x.g, g.g, b.g,
                                             rm.g, rv.g, NULL, NULL));
        compare_f32(&y, total, 1e-5, TOL, "batchnorm eval");
        pair *all[] = {&x, &y, &g, &b, &rm, &rv, &sm, &si, &dy, &dx, &dg, &dbt};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            pair_free(all[i]);
    }
}

static void test_layernorm(void)
{
    NEED_GPU();
    int rows = 33, cols = 300;
    size_t total = (size_t)rows * cols;
    pair x = pair_rand(total, -2, 3, 111), y = pair_const(total, 0);
    pair g = pair_rand(cols, 0.5f, 1.5f, 112), b = pair_rand(cols, -1, 1, 113);
    pair sm = pair_const(rows, 0), si = pair_const(rows, 0);
    CHECK_OK(cpu->ops->layernorm_forward(cpu, rows, cols, 1e-5f, y.c, x.c, g.c, b.c, sm.c, si.c));
    CHECK_OK(gpu->ops->layernorm_forward(gpu, rows, cols, 1e-5f, y.g, x.g, g.g, b.g, sm.g, si.g));
    compare_f32(&y, total, 1e-5, TOL, "layernorm y");
    compare_f32(&sm, rows, 1e-6, TOL, "layernorm mean");
    compare_f32(&si, rows, 1e-6, TOL, "layernorm invstd");
    pair dy = pair_rand(total, -1, 1, 114), dx = pair_rand(total, -1, 1, 115);
    pair dg = pair_rand(cols, -1, 1, 116), dbt = pair_rand(cols, -1, 1, 117);
    CHECK_OK(cpu->ops->layernorm_backward(cpu, rows, cols, dx.c, dg.c, dbt.c, dy.c, x.c, g.c, sm.c,
                                          si.c));
    CHECK_OK(gpu->ops->layernorm_backward(gpu, rows, cols, dx.g, dg.g, dbt.g, dy.g, x.g, g.g, sm.g,
                                          si.g));
    compare_f32(&dx, total, 1e-5, 1e-4, "layernorm dx");
    compare_f32(&dg, cols, 1e-5, TOL, "layernorm dgamma");
    compare_f32(&dbt, cols, 1e-5, TOL, "layernorm dbeta");
    pair *all[] = {&x, &y, &g, &b, &sm, &si, &dy, &dx, &dg, &dbt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

/* --- embedding and losses -------------------------------------------------------------------------- */

static void test_embedding(void)
{
    NEED_GPU();
    int n = 50, vocab = 13, dim = 17;
    float idx[50];
    for (int i = 0; i < n; i++)
        idx[i] = (float)((i * 7) % vocab); /* repeats: backward accumulates */
    pair ix = pair_new(idx, sizeof idx), table = pair_rand((size_t)vocab * dim, -1, 1, 121);
    pair y = pair_const((size_t)n * dim, 0), dy = pair_rand((size_t)n * dim, -1, 1, 122);
    pair dt = pair_rand((size_t)vocab * dim, -1, 1, 123);
    CHECK_OK(cpu->ops->embedding_forward(cpu, n, vocab, dim, y.c, ix.c, table.c));
    CHECK_OK(gpu->ops->embedding_forward(gpu, n, vocab, dim, y.g, ix.g, table.g));
    compare_f32(&y, (size_t)n * dim, 0, 0, "embedding forward");
    CHECK_OK(cpu->ops->embedding_backward(cpu, n, vocab, dim, dt.c, ix.c, dy.c));
    CHECK_OK(gpu->ops->embedding_backward(gpu, n, vocab, dim, dt.g, ix.g, dy.g));
    compare_f32(&dt, (size_t)vocab * dim, 1e-6, TOL, "embedding backward");
    /* a bad index is an error: on the GPU at the next synchronisation */
    idx[3] = (float)vocab;
    CHECK_OK(gpu->ops->to_device(gpu, ix.g, idx, sizeof idx));
    int rc = gpu->ops->embedding_forward(gpu, n, vocab, dim, y.g, ix.g, table.g);
    if (rc == DL_OK)
        rc = gpu->ops->sync(gpu);
    CHECK(rc == DL_EINVAL);
    CHECK_OK(gpu->ops->sync(gpu)); /* reported once */
    pair *all[] = {&ix, &table, &y, &dy, &dt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

static void xent_case(int rows, int classes, float smoothing)
{
    int32_t *lab = malloc(rows * sizeof *lab);
    for (int r = 0; r < rows; r++)
        lab[r] = (int32_t)((r * 7 + 3) % classes);
    float *hz = rand_host((size_t)rows * classes, -4, 4, 131);
    hz[0] = hz[1] = 5.0f; /* a tie for the argmax: the first wins */
    lab[0] = 1;
    pair z = pair_new(hz, (size_t)rows * classes * 4), l = pair_new(lab, rows * sizeof *lab);
    pair d = pair_rand((size_t)rows * classes, -1, 1, 132);
    float st[2] = {1.0f, 2.0f};
    pair stats = pair_new(st, sizeof st);
    CHECK_OK(
        cpu->ops->softmax_xent(cpu, rows, classes, z.c, l.c, smoothing, 1.0f / rows, d.c, stats.c));
    CHECK_OK(
        gpu->ops->softmax_xent(gpu, rows, classes, z.g, l.g, smoothing, 1.0f / rows, d.g, stats.g));
    compare_f32(&d, (size_t)rows * classes, 1e-7, TOL, "softmax_xent dlogits");
    compare_f32(&stats, 2, 1e-5, TOL, "softmax_xent stats");
    /* without dlogits */
    CHECK_OK(cpu->ops->softmax_xent(cpu, rows, classes, z.c, l.c, smoothing, 1.0f, NULL, stats.c));
    CHECK_OK(gpu->ops->softmax_xent(gpu, rows, classes, z.g, l.g, smoothing, 1.0f, NULL, stats.g));
    compare_f32(&stats, 2, 1e-5, TOL, "softmax_xent stats (no grad)");
    /* a label out of range */
    lab[rows - 1] = classes;
    CHECK_OK(gpu->ops->to_device(gpu, l.g, lab, rows * sizeof *lab));
    int rc = gpu->ops->softmax_xent(gpu, rows, classes, z.g, l.g, smoothing, 1.0f, NULL, stats.g);
    if (rc == DL_OK)
        rc = gpu->ops->sync(gpu);
    CHECK(rc == DL_EINVAL);
    pair_free(&z);
    pair_free(&l);
    pair_free(&d);
    pair_free(&stats);
    free(lab);
    free(hz);
}

static void test_softmax_xent(void)
{
    NEED_GPU();
    xent_case(37, 10, 0.0f);
    xent_case(37, 10, 0.1f);
    xent_case(64, 1000, 0.05f);
    xent_case(3, 33, 0.0f);
}

static void test_mse_bce(void)
{
    NEED_GPU();
    size_t n = 12345;
    pair p = pair_rand(n, -2, 2, 141), t = pair_rand(n, -2, 2, 142), d = pair_rand(n, -1, 1, 143);
    float st[2] = {0.5f, 0.25f};
    pair stats = pair_new(st, sizeof st);
    CHECK_OK(cpu->ops->mse(cpu, n, p.c, t.c, 0.01f, d.c, stats.c));
    CHECK_OK(gpu->ops->mse(gpu, n, p.g, t.g, 0.01f, d.g, stats.g));
    compare_f32(&d, n, 1e-7, TOL, "mse dpred");
    compare_f32(&stats, 2, 1e-4, TOL, "mse stats");
    pair tb = pair_rand(n, 0, 1, 144);
    CHECK_OK(cpu->ops->bce_logits(cpu, n, p.c, tb.c, 0.01f, d.c, stats.c));
    CHECK_OK(gpu->ops->bce_logits(gpu, n, p.g, tb.g, 0.01f, d.g, stats.g));
    compare_f32(&d, n, 1e-7, TOL, "bce dlogits");
    compare_f32(&stats, 2, 1e-4, TOL, "bce stats");
    CHECK_OK(cpu->ops->bce_logits(cpu, n, p.c, tb.c, 1.0f, NULL, stats.c));
    CHECK_OK(gpu->ops->bce_logits(gpu, n, p.g, tb.g, 1.0f, NULL, stats.g));
    compare_f32(&stats, 2, 1e-4, TOL, "bce stats (no grad)");
    pair *all[] = {&p, &t, &d, &stats, &tb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

/* --- optimizers and reductions ---------------------------------------------------------------- */

static void test_sgd(void)
{
    NEED_GPU();
    size_t n = 4097;
    struct {
        float momentum, wd;
        int nesterov;
    } cases[] = {{0, 0, 0}, {0.9f, 0, 0}, {0.9f, 1e-2f, 1}, {0, 5e-4f, 0}};
    for (int c = 0; c < 4; c++) {
        pair w = pair_rand(n, -1, 1, 151), m = pair_const(n, 0), g = pair_const(n, 0);
        for (int step = 0; step < 3; step++) {
            float *hg = rand_host(n, -1, 1, 152 + step);
            memcpy(g.c, hg, n * 4);
            CHECK_OK(gpu->ops->to_device(gpu, g.g, hg, n * 4));
            free(hg);
            CHECK_OK(cpu->ops->sgd_update(cpu, n, w.c, g.c, m.c, 0.1f, cases[c].momentum,
                                          cases[c].wd, cases[c].nesterov, 0.5f));
            CHECK_OK(gpu->ops->sgd_update(gpu, n, w.g, g.g, m.g, 0.1f, cases[c].momentum,
                                          cases[c].wd, cases[c].nesterov, 0.5f));
        }
        compare_f32(&w, n, 1e-6, TOL, "sgd w");
        compare_f32(&m, n, 1e-6, TOL, "sgd m");
        compare_f32(&g, n, 0, 0, "sgd zeroes g");
        pair_free(&w);
        pair_free(&m);
        pair_free(&g);
    }
}

static void test_adam(void)
{
    NEED_GPU();
    size_t n = 4097;
    for (int decoupled = 0; decoupled < 2; decoupled++) {
        pair w = pair_rand(n, -1, 1, 161), m = pair_const(n, 0), v = pair_const(n, 0);
        pair g = pair_const(n, 0);
        for (long step = 1; step <= 3; step++) {
            float *hg = rand_host(n, -1, 1, 162 + (uint64_t)step);
            memcpy(g.c, hg, n * 4);
            CHECK_OK(gpu->ops->to_device(gpu, g.g, hg, n * 4));
            free(hg);
            CHECK_OK(cpu->ops->adam_update(cpu, n, w.c, g.c, m.c, v.c, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                           0.01f, decoupled, step, 1.0f));
            CHECK_OK(gpu->ops->adam_update(gpu, n, w.g, g.g, m.g, v.g, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                           0.01f, decoupled, step, 1.0f));
        }
        compare_f32(&w, n, 1e-6, TOL, "adam w");
        compare_f32(&m, n, 1e-7, TOL, "adam m");
        compare_f32(&v, n, 1e-8, TOL, "adam v");
        compare_f32(&g, n, 0, 0, "adam zeroes g");
        CHECK(gpu->ops->adam_update(gpu, n, w.g, g.g, m.g, v.g, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 0, 0,
                                    1.0f) == DL_EINVAL);
        pair_free(&w);
        pair_free(&m);
        pair_free(&v);
        pair_free(&g);
    }
}

static void test_sumsq(void)
{
    NEED_GPU();
    size_t n = 3000001;
    pair x = pair_rand(n, -1, 1, 171);
    double a = 0, b = 0;
    CHECK_OK(cpu->ops->sumsq(cpu, x.c, n, &a));
    CHECK_OK(gpu->ops->sumsq(gpu, x.g, n, &b));
    CHECK_NEAR(b, a, 1e-6 * a);
    float nan = NAN;
    CHECK_OK(gpu->ops->to_device(gpu, (float *)x.g + 12345, &nan, 4));
    CHECK_OK(gpu->ops->sumsq(gpu, x.g, n, &b));
    CHECK(isnan(b));
    pair_free(&x);
}

static void test_grad_guard(void)
{
    /* the gradient check on the GPU against dl_clip_grad_norm's host
     * arithmetic on the CPU: norm, clip factor, clipped g; a NaN skips
     * the guarded update (g zeroed, w and the moments kept) and counts */
    NEED_GPU();
    CHECK(gpu->ops->grad_guard && gpu->ops->sgd_update_guarded && gpu->ops->adam_update_guarded);
    if (!gpu->ops->grad_guard)
        return;
    size_t n = 1000003;
    pair g = pair_rand(n, -1, 1, 191), w = pair_rand(n, -1, 1, 192);
    pair m = pair_const(n, 0), v = pair_const(n, 0), cells = pair_const(4, 0);
    double ss = 0;
    CHECK_OK(cpu->ops->sumsq(cpu, g.c, n, &ss));
    float grad_scale = 0.25f, max_norm = 10.0f;
    double norm = sqrt(ss) * grad_scale;
    float f = norm > max_norm ? (float)(max_norm / norm) : 1.0f;
    CHECK(f < 1.0f); /* sqrt(n / 3) / 4 = 144 > 10: clipped */
    CHECK_OK(cpu->ops->scale(cpu, g.c, f, n));
    CHECK_OK(gpu->ops->grad_guard(gpu, g.g, n, grad_scale, max_norm, cells.g));
    float c[4];
    CHECK_OK(gpu->ops->to_host(gpu, c, cells.g, sizeof c));
    CHECK_NEAR(c[0], norm, 1e-6 * norm);
    CHECK_NEAR(c[1], f, 1e-6 * f);
    CHECK(c[2] == 0 && c[3] == 0);
    compare_f32(&g, n, 1e-6, 1e-6, "grad_guard clipped g");
    /* a NaN: flagged and counted, g and the norm cell left */
    float nan = NAN;
    CHECK_OK(gpu->ops->to_device(gpu, (float *)g.g + 777, &nan, 4));
    CHECK_OK(gpu->ops->grad_guard(gpu, g.g, n, grad_scale, max_norm, cells.g));
    CHECK_OK(gpu->ops->to_host(gpu, c, cells.g, sizeof c));
    CHECK(c[2] == 1 && c[3] == 1 && c[1] == 0);
    CHECK_NEAR(c[0], norm, 1e-6 * norm);
    CHECK_OK(gpu->ops->adam_update_guarded(gpu, n, w.g, g.g, m.g, v.g, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                           0, 0, 1, 1.0f, cells.g));
    compare_f32(&w, n, 0, 0, "skipped adam: w kept");
    CHECK_OK(cpu->ops->fill(cpu, g.c, 0, n));
    compare_f32(&g, n, 0, 0, "skipped adam: g zeroed");
    pair *all[] = {&g, &w, &m, &v, &cells};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

static void test_events(void)
{
    NEED_GPU();
    CHECK(gpu->ops->event_create && gpu->ops->event_elapsed);
    dl_event *a = gpu->ops->event_create(gpu), *b = gpu->ops->event_create(gpu);
    CHECK(a && b);
    if (!a || !b)
        return;
    size_t n = 1 << 20;
    pair x = pair_rand(n, -1, 1, 181);
    CHECK_OK(gpu->ops->event_record(gpu, a));
    for (int i = 0; i < 10; i++)
        CHECK_OK(gpu->ops->scale(gpu, x.g, 1.0001f, n));
    CHECK_OK(gpu->ops->event_record(gpu, b));
    float ms = -1;
    CHECK_OK(gpu->ops->event_elapsed(gpu, a, b, &ms));
    CHECK(ms >= 0 && ms < 10000);
    gpu->ops->event_destroy(gpu, a);
    gpu->ops->event_destroy(gpu, b);
    pair_free(&x);
}

/* --- attention and the per-token loss ---------------------------------------------------- */

static void attention_case(int n, int t, int heads, int d, int causal)
{
    char what[96];
    size_t nq = (size_t)n * t * 3 * d, no = (size_t)n * t * d, nl = (size_t)n * heads * t;
    float scale = 1.0f / sqrtf((float)(d / heads));
    pair qkv = pair_rand(nq, -1, 1, 191), o = pair_const(no, 0), lse = pair_const(nl, 0);
    pair dout = pair_rand(no, -1, 1, 192), dqkv = pair_rand(nq, -1, 1, 193);
    CHECK_OK(cpu->ops->attention_forward(cpu, n, t, heads, d, causal, scale, qkv.c, o.c, lse.c));
    CHECK_OK(gpu->ops->attention_forward(gpu, n, t, heads, d, causal, scale, qkv.g, o.g, lse.g));
    snprintf(what, sizeof what, "attention t %d d %d heads %d causal %d: o", t, d, heads, causal);
    compare_f32(&o, no, 1e-5, 1e-4, what);
    snprintf(what, sizeof what, "attention t %d causal %d: lse", t, causal);
    compare_f32(&lse, nl, 1e-5, 1e-5, what);
    /* backward accumulates into a non-zero dqkv, from the CPU's o and lse on both sides */
    CHECK_OK(gpu->ops->to_device(gpu, o.g, o.c, no * 4));
    CHECK_OK(gpu->ops->to_device(gpu, lse.g, lse.c, nl * 4));
    CHECK_OK(cpu->ops->attention_backward(cpu, n, t, heads, d, causal, scale, qkv.c, o.c, lse.c,
                                          dout.c, dqkv.c));
    CHECK_OK(gpu->ops->attention_backward(gpu, n, t, heads, d, causal, scale, qkv.g, o.g, lse.g,
                                          dout.g, dqkv.g));
    snprintf(what, sizeof what, "attention t %d causal %d: dqkv", t, causal);
    compare_f32(&dqkv, nq, 1e-5, 1e-4, what);
    pair *all[] = {&qkv, &o, &lse, &dout, &dqkv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
}

static void test_attention(void)
{
    NEED_GPU();
    CHECK(gpu->ops->attention_forward && gpu->ops->attention_backward);
    if (!gpu->ops->attention_forward || !gpu->ops->attention_backward)
        return;
    attention_case(2, 5, 2, 8, 0);
    attention_case(2, 37, 2, 16, 1); /* a full and a partial CPU tile */
    attention_case(1, 70, 4, 128, 0);
    attention_case(3, 70, 2, 64, 1);
    /* a head over the GPU kernel's limit is an error, not a wrong answer */
    pair q = pair_const(3 * 512, 0), o = pair_const(512, 0), l = pair_const(1, 0);
    CHECK(gpu->ops->attention_forward(gpu, 1, 1, 1, 512, 0, 1.0f, q.g, o.g, l.g) == DL_EINVAL);
    pair_free(&q);
    pair_free(&o);
    pair_free(&l);
}

static void test_xent_tokens(void)
{
    NEED_GPU();
    CHECK(gpu->ops->softmax_xent_tokens != NULL);
    if (!gpu->ops->softmax_xent_tokens)
        return;
    int rows = 300, classes = 65, ignore = -1;
    int32_t *lab = malloc(rows * sizeof *lab);
    for (int r = 0; r < rows; r++)
        lab[r] = r % 7 == 3 ? ignore : (int32_t)((r * 11 + 5) % classes);
    float *hz = rand_host((size_t)rows * classes, -4, 4, 201);
    pair z = pair_new(hz, (size_t)rows * classes * 4), l = pair_new(lab, rows * sizeof *lab);
    pair d = pair_rand((size_t)rows * classes, -1, 1, 202);
    float st[3] = {1.0f, 2.0f, 3.0f};
    pair stats = pair_new(st, sizeof st);
    CHECK_OK(cpu->ops->softmax_xent_tokens(cpu, rows, classes, z.c, l.c, ignore, 0.1f, 2.0f, d.c,
                                           stats.c));
    CHECK_OK(gpu->ops->softmax_xent_tokens(gpu, rows, classes, z.g, l.g, ignore, 0.1f, 2.0f, d.g,
                                           stats.g));
    compare_f32(&d, (size_t)rows * classes, 1e-7, TOL, "softmax_xent_tokens dlogits");
    compare_f32(&stats, 3, 1e-5, TOL, "softmax_xent_tokens stats");
    CHECK_OK(cpu->ops->softmax_xent_tokens(cpu, rows, classes, z.c, l.c, ignore, 0, 1.0f, NULL,
                                           stats.c));
    CHECK_OK(gpu->ops->softmax_xent_tokens(gpu, rows, classes, z.g, l.g, ignore, 0, 1.0f, NULL,
                                           stats.g));
    compare_f32(&stats, 3, 1e-5, TOL, "softmax_xent_tokens stats (no grad)");
    /* a kept target out of range is an error at the next synchronisation */
    lab[0] = classes;
    CHECK_OK(gpu->ops->to_device(gpu, l.g, lab, rows * sizeof *lab));
    int rc =
        gpu->ops->softmax_xent_tokens(gpu, rows, classes, z.g, l.g, ignore, 0, 1.0f, NULL, stats.g);
    if (rc == DL_OK)
        rc = gpu->ops->sync(gpu);
    CHECK(rc == DL_EINVAL);
    CHECK_OK(gpu->ops->sync(gpu));
    pair *all[] = {&z, &l, &d, &stats};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        pair_free(all[i]);
    free(lab);
    free(hz);
}

int main(void)
{
    /* f32 products at full precision unless the caller chose */
    if (!getenv("DLBENCH_CUDA_TF32"))
        setenv("DLBENCH_CUDA_TF32", "0", 1);
    tf32 = getenv("DLBENCH_CUDA_TF32")[0] != '0';
    cpu = dl_backend_cpu(0);
    gpu = dl_backend_cuda(why, sizeof why);
    RUN(test_open);
    RUN(test_memory);
    RUN(test_storage_move);
    RUN(test_gemm);
    RUN(test_conv);
    RUN(test_cast);
    RUN(test_input);
    RUN(test_bias);
    RUN(test_act);
    RUN(test_arith);
    RUN(test_dropout);
    RUN(test_pool);
    RUN(test_adaptive_pool);
    RUN(test_batchnorm);
    RUN(test_layernorm);
    RUN(test_embedding);
    RUN(test_softmax_xent);
    RUN(test_mse_bce);
    RUN(test_sgd);
    RUN(test_adam);
    RUN(test_sumsq);
    RUN(test_grad_guard);
    RUN(test_events);
    RUN(test_attention);
    RUN(test_xent_tokens);
    CHECK_EXIT();
}
