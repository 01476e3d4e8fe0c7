/* cpu_elementwise.c - CPU casts, activations, dropout, embedding, losses and fused optimizer updates
 *
 * The hot loops (casts, ReLU, bias, SGD, Adam, sum of squares, input
 * conversion) have an AVX2 body of 8 lanes when the build targets AVX2
 * (the Makefile's x86-64-v3) and a scalar loop for the tail and for other
 * builds. The vector bodies do the scalar code's operations in the same
 * order without contraction into FMA (ISO C mode compiles the scalar code
 * that way too), so vector and tail agree bit for bit and the results do
 * not depend on where a thread's range starts. At -O2 GCC does not
 * vectorise loops of unknown length by itself.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#endif

#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"
#include "engine/base/error.h"
#include "engine/base/half.h"
#include "engine/base/rng.h"

/* Elements per task below which a loop is not worth splitting: a simple
 * pass over 64K floats takes 10-20 us on one core, about what handing half
 * of it to another thread saves, and on a loaded machine a split can wait
 * far longer for a descheduled worker. The optimizer passes (GRAIN * 2)
 * split from about a quarter million parameters. */
#define GRAIN 65536

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

#ifdef __AVX2__
/* 8 floats rounded to bf16 and back, dl_f32_to_bf16's bits: round to
 * nearest even, a NaN kept with its quiet bit set. */
static inline __m256 round_bf16x8(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/* The bf16 bits of 8 floats (round_bf16x8's rounding). */
static inline __m128i bf16x8(__m256 x)
{
    __m256i r = _mm256_srli_epi32(_mm256_castps_si256(round_bf16x8(x)), 16);
    /* 32 -> 16 bits (values fit, so no saturation) in lane order */
    __m256i packed = _mm256_packus_epi32(r, r);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}
#endif

#ifdef DL_CPU_X86
/* 16 lanes where the CPU has AVX-512 (dl_cpu_avx512): the first whole
 * groups of 16 of the loops below, the same bits as their 8-lane and
 * scalar parts; each returns how many elements it did. */
__attribute__((target("avx512f"))) static size_t f32_to_bf16_512(uint16_t *d, const float *s,
                                                                 size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i r = _mm512_castps_si512(dl_v512_round_bf16(_mm512_loadu_ps(s + i)));
        _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    }
    return i;
}

__attribute__((target("avx512f"))) static size_t bf16_to_f32_512(float *d, const uint16_t *s,
                                                                 size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i)));
        _mm512_storeu_ps(d + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    return i;
}

__attribute__((target("avx512f"))) static size_t round_bf16_512(float *dst, const float *src,
                                                                size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, dl_v512_round_bf16(_mm512_loadu_ps(src + i)));
    return i;
}
#endif

void dl_cpu_f32_to_bf16(uint16_t *restrict d, const float *restrict s, size_t n)
{
    size_t i = 0;
#ifdef DL_CPU_X86
    if (dl_cpu_avx512())
        i = f32_to_bf16_512(d, s, n);
#endif
#ifdef __AVX2__
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), bf16x8(_mm256_loadu_ps(s + i)));
#endif
    for (; i < n; i++)
        d[i] = dl_f32_to_bf16(s[i]);
}

void dl_cpu_to_f32(float *restrict d, const uint16_t *restrict s, dl_dtype t, size_t n)
{
    size_t i = 0;
    if (t == DL_BF16) {
#ifdef DL_CPU_X86
        if (dl_cpu_avx512())
            i = bf16_to_f32_512(d, s, n);
#endif
#ifdef __AVX2__
        for (; i + 8 <= n; i += 8) {
            __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
            _mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
        }
#endif
        for (; i < n; i++)
            d[i] = dl_bf16_to_f32(s[i]);
    } else {
#ifdef DL_CPU_VF16
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(d + i, dl_v_f16_load8(s + i));
#endif
        for (; i < n; i++)
            d[i] = dl_f16_to_f32(s[i]);
    }
}

/* d[0..n) = s[0..n) cast to t (bf16 or f16), on this thread. */
static void f32_to_lowp(uint16_t *restrict d, const float *restrict s, dl_dtype t, size_t n)
{
    if (t == DL_BF16) {
        dl_cpu_f32_to_bf16(d, s, n);
        return;
    }
    size_t i = 0;
#ifdef DL_CPU_VF16
    for (; i + 8 <= n; i += 8)
        dl_v_f16_store8(d + i, _mm256_loadu_ps(s + i));
#endif
    for (; i < n; i++)
        d[i] = dl_f32_to_f16(s[i]);
}

static void cast_range(void *p, size_t b, size_t e)
{
    job *j = p;
    if (j->t0 == j->t1) {
        size_t sz = dl_dtype_size(j->t0);
        memcpy((char *)j->dst + b * sz, (const char *)j->src + b * sz, (e - b) * sz);
        return;
    }
    if (j->t1 == DL_F32)
        f32_to_lowp((uint16_t *)j->dst + b, (const float *)j->src + b, j->t0, e - b);
    else
        dl_cpu_to_f32((float *)j->dst + b, (const uint16_t *)j->src + b, j->t1, e - b);
}

int dl_cpu_cast(dl_backend *be, void *dst, dl_dtype dt, const void *src, dl_dtype st, size_t n)
{
    int ok_pair = dt == st || (st == DL_F32 && (dt == DL_BF16 || dt == DL_F16)) ||
                  (dt == DL_F32 && (st == DL_BF16 || st == DL_F16));
    if (!ok_pair)
        return dl_error(DL_EUNSUPPORTED, "cast from %s to %s is not supported", dl_dtype_name(st),
                        dl_dtype_name(dt));
    job j = {.dst = dst, .src = src, .t0 = dt, .t1 = st};
    par(be, n, cast_range, &j);
    return DL_OK;
}

void dl_cpu_round_run(float *dst, const float *src, dl_dtype via, size_t n)
{
    size_t i = 0;
    if (via == DL_BF16) {
#ifdef DL_CPU_X86
        if (dl_cpu_avx512())
            i = round_bf16_512(dst, src, n);
#endif
#ifdef __AVX2__
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, round_bf16x8(_mm256_loadu_ps(src + i)));
#endif
        for (; i < n; i++)
            dst[i] = dl_bf16_to_f32(dl_f32_to_bf16(src[i]));
    } else if (via == DL_F16) {
#ifdef DL_CPU_VF16
        for (; i + 8 <= n; i += 8) {
            uint16_t h[8];
            dl_v_f16_store8(h, _mm256_loadu_ps(src + i));
            _mm256_storeu_ps(dst + i, dl_v_f16_load8(h));
        }
#endif
        for (; i < n; i++)
            dst[i] = dl_f16_to_f32(dl_f32_to_f16(src[i]));
    } else if (dst != src) {
        memcpy(dst, src, n * sizeof(float));
    }
}

static void round_range(void *p, size_t b, size_t e)
{
    job *j = p;
    dl_cpu_round_run(j->y + b, j->a + b, j->t0, e - b);
}

int dl_cpu_round_through(dl_backend *be, float *dst, const float *src, dl_dtype via, size_t n)
{
    if (via != DL_F32 && via != DL_BF16 && via != DL_F16)
        return dl_error(DL_EUNSUPPORTED, "cannot round through %s", dl_dtype_name(via));
    if (via == DL_F32 && dst == src)
        return DL_OK;
    job j = {.y = dst, .a = src, .t0 = via};
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

/* dst[i] = src[i] * scale, src of the job's dtype. */
static void input_run(const input_job *j, size_t b, size_t e)
{
    float *restrict d = j->dst;
    const float scale = j->scale;
    size_t i = b;
    switch (j->type) {
    case DL_U8: {
        const uint8_t *restrict s = j->src;
#ifdef __AVX2__
        __m256 vs = _mm256_set1_ps(scale);
        for (; i + 8 <= e; i += 8) {
            __m128i u = _mm_loadl_epi64((const __m128i *)(s + i));
            __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(u));
            _mm256_storeu_ps(d + i, _mm256_mul_ps(v, vs));
        }
#endif
        for (; i < e; i++)
            d[i] = (float)s[i] * scale;
        break;
    }
    case DL_I32: {
        const int32_t *restrict s = j->src;
        for (; i < e; i++)
            d[i] = (float)s[i] * scale;
        break;
    }
    default: {
        const float *restrict s = j->src;
        for (; i < e; i++)
            d[i] = s[i] * scale;
        break;
    }
    }
}

static void input_range(void *p, size_t b, size_t e)
{
    input_job *j = p;
    input_run(j, b, e);
    if (!j->mean)
        return;
    /* per channel: runs of one plane share mean and std */
    size_t per_row = (size_t)j->channels * j->plane;
    float *restrict d = j->dst;
    for (size_t i = b; i < e;) {
        size_t in_row = i % per_row, ch = in_row / j->plane;
        size_t stop = i + (j->plane - in_row % j->plane);
        if (stop > e)
            stop = e;
        const float mean = j->mean[ch], sd = j->std[ch];
        for (; i < stop; i++)
            d[i] = (d[i] - mean) / sd;
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
    if (inner == 1) {
        for (int r = 0; r < rows; r++) {
            float *restrict row = y + (size_t)r * cols;
            const float *restrict bb = b;
            int c = 0;
#ifdef __AVX2__
            for (; c + 8 <= cols; c += 8)
                _mm256_storeu_ps(row + c,
                                 _mm256_add_ps(_mm256_loadu_ps(row + c), _mm256_loadu_ps(bb + c)));
#endif
            for (; c < cols; c++)
                row[c] += bb[c];
        }
        return DL_OK;
    }
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
            const float *restrict row = dy + (size_t)r * cols;
            float *restrict acc = db;
            int c = 0;
#ifdef __AVX2__
            for (; c + 8 <= cols; c += 8)
                _mm256_storeu_ps(acc + c,
                                 _mm256_add_ps(_mm256_loadu_ps(acc + c), _mm256_loadu_ps(row + c)));
#endif
            for (; c < cols; c++)
                acc[c] += row[c];
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

#ifdef DL_CPU_VMATH
/* GELU on vectors. Forward: y = x (1/2 + xc P(xc^2) / Q(xc^2)), x clamped
 * to +-4 sqrt 2 in xc: x (1 + erf(x / sqrt 2)) / 2 with cpu_vmath.h's
 * rational erf, the scaling by 1/sqrt 2 and the halving folded into its
 * coefficients (u = 2 t^2: the powers of two are exact). Backward:
 * Phi(-|x|) = t (a1 + .. + a5 t^4) exp(-x^2/2), t = 1 / (1 + p |x| /
 * sqrt 2) (Abramowitz and Stegun 7.1.26, within 7.5e-8 of Phi), which
 * shares its exp with the density phi = exp(-x^2/2) / sqrt(2 pi):
 * GELU'(x) = Phi(x) + x phi(x). The 8- and 16-lane versions do the same
 * operations, so they give the same bits. */
#define GELU_CLAMP 5.65685424949238f /* 4 sqrt 2: erf(4) is 1 in float */
#define GELU_P(k, c) ((float)((c)*0.5 * 0.70710678118654752 / (double)(1 << (k))))
#define GELU_Q(k, c) ((float)((c) / (double)(1 << (k))))
#define GELU_P6 GELU_P(6, -2.72614225801306e-10)
#define GELU_P5 GELU_P(5, 2.77068142495902e-08)
#define GELU_P4 GELU_P(4, -2.10102402082508e-06)
#define GELU_P3 GELU_P(3, -5.69250639462346e-05)
#define GELU_P2 GELU_P(2, -7.34990630326855e-04)
#define GELU_P1 GELU_P(1, -2.95459980854025e-03)
#define GELU_P0 GELU_P(0, -1.60960333262415e-02)
#define GELU_Q4 GELU_Q(4, -1.45660718464996e-05)
#define GELU_Q3 GELU_Q(3, -2.13374055278905e-04)
#define GELU_Q2 GELU_Q(2, -1.68282697438203e-03)
#define GELU_Q1 GELU_Q(1, -7.37332916720468e-03)
#define GELU_Q0 GELU_Q(0, -1.42647390514189e-02)
/* A&S 7.1.26: p / sqrt 2, and a1..a5 halved (Phi = erfc / 2) */
#define GELU_T ((float)(0.3275911 * 0.70710678118654752))
#define GELU_A1 0.127414796f
#define GELU_A2 -0.142248368f
#define GELU_A3 0.7107068705f
#define GELU_A4 -0.7265760135f
#define GELU_A5 0.5307027145f
#define GELU_PDF 0.39894228040143268f /* 1 / sqrt(2 pi) */

static inline __m256 gelu_v(__m256 x)
{
    __m256 xc =
        _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-GELU_CLAMP)), _mm256_set1_ps(GELU_CLAMP));
    __m256 u = _mm256_mul_ps(xc, xc);
    __m256 p = _mm256_set1_ps(GELU_P6);
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(GELU_P5));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(GELU_P4));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(GELU_P3));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(GELU_P2));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(GELU_P1));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(GELU_P0));
    __m256 q = _mm256_set1_ps(GELU_Q4);
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(GELU_Q3));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(GELU_Q2));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(GELU_Q1));
    q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(GELU_Q0));
    __m256 cdf = _mm256_fmadd_ps(xc, _mm256_div_ps(p, q), _mm256_set1_ps(0.5f));
    return _mm256_mul_ps(x, cdf);
}
/* GELU'(x) */
static inline __m256 gelu_grad_v(__m256 x)
{
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(a, _mm256_set1_ps(GELU_T), one));
    __m256 s = _mm256_set1_ps(GELU_A5);
    s = _mm256_fmadd_ps(s, t, _mm256_set1_ps(GELU_A4));
    s = _mm256_fmadd_ps(s, t, _mm256_set1_ps(GELU_A3));
    s = _mm256_fmadd_ps(s, t, _mm256_set1_ps(GELU_A2));
    s = _mm256_fmadd_ps(s, t, _mm256_set1_ps(GELU_A1));
    __m256 e = dl_v_exp_le0(_mm256_mul_ps(_mm256_mul_ps(x, _mm256_set1_ps(-0.5f)), x));
    __m256 lo = _mm256_mul_ps(_mm256_mul_ps(s, t), e); /* Phi(-|x|) */
    __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
    __m256 cdf = _mm256_blendv_ps(lo, _mm256_sub_ps(one, lo), pos);
    return _mm256_fmadd_ps(_mm256_mul_ps(x, e), _mm256_set1_ps(GELU_PDF), cdf);
}
static inline __m256 sigmoid_v(__m256 x)
{
    __m256 one = _mm256_set1_ps(1.0f);
    __m256 e = dl_v_exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(one, _mm256_add_ps(one, e));
}
/* tanh: Cephes' tanhf, an odd polynomial below |x| = 0.625, else
 * 1 - 2 / (exp(2|x|) + 1) with x's sign; NaN stays NaN. */
#define TANH_SMALL 0.625f
#define TANH_P4 -5.70498872745e-3f
#define TANH_P3 2.06390887954e-2f
#define TANH_P2 -5.37397155531e-2f
#define TANH_P1 1.33314422036e-1f
#define TANH_P0 -3.33332819422e-1f
static inline __m256 tanh_v(__m256 x)
{
    __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign, x);
    __m256 e = dl_v_exp(_mm256_add_ps(a, a));
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    big = _mm256_or_ps(big, _mm256_and_ps(sign, x));
    __m256 z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(TANH_P4), z, _mm256_set1_ps(TANH_P3));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_P2));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_P1));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(TANH_P0));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    __m256 r =
        _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(TANH_SMALL), _CMP_LT_OQ));
    return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
static inline __m256 act_v(dl_act kind, __m256 x)
{
    switch (kind) {
    case DL_ACT_GELU: return gelu_v(x);
    case DL_ACT_TANH: return tanh_v(x);
    case DL_ACT_SIGMOID: return sigmoid_v(x);
    case DL_ACT_SILU: return _mm256_mul_ps(x, sigmoid_v(x));
    default: return x;
    }
}
/* act'(x) * dy for the kinds above. */
static inline __m256 act_grad_v(dl_act kind, __m256 x, __m256 dy)
{
    __m256 one = _mm256_set1_ps(1.0f);
    switch (kind) {
    case DL_ACT_GELU: return _mm256_mul_ps(dy, gelu_grad_v(x));
    case DL_ACT_SIGMOID: {
        __m256 sg = sigmoid_v(x);
        return _mm256_mul_ps(dy, _mm256_mul_ps(sg, _mm256_sub_ps(one, sg)));
    }
    case DL_ACT_SILU: {
        __m256 sg = sigmoid_v(x);
        __m256 k = _mm256_fmadd_ps(x, _mm256_sub_ps(one, sg), one);
        return _mm256_mul_ps(dy, _mm256_mul_ps(sg, k));
    }
    default: return dy;
    }
}
/* The kinds whose forward and backward run on the vector kernels; tanh's
 * forward too (its backward reads y: the scalar loop below). */
static int act_vectorised(dl_act kind)
{
    return kind == DL_ACT_GELU || kind == DL_ACT_SIGMOID || kind == DL_ACT_SILU;
}
static int act_fwd_vectorised(dl_act kind) { return act_vectorised(kind) || kind == DL_ACT_TANH; }
/* The same on 16 lanes (AVX-512F): the same operations per lane. */
DL_V512_TARGET static inline __m512 gelu_v512(__m512 x)
{
    __m512 xc =
        _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-GELU_CLAMP)), _mm512_set1_ps(GELU_CLAMP));
    __m512 u = _mm512_mul_ps(xc, xc);
    __m512 p = _mm512_set1_ps(GELU_P6);
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(GELU_P5));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(GELU_P4));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(GELU_P3));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(GELU_P2));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(GELU_P1));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(GELU_P0));
    __m512 q = _mm512_set1_ps(GELU_Q4);
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(GELU_Q3));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(GELU_Q2));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(GELU_Q1));
    q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(GELU_Q0));
    __m512 cdf = _mm512_fmadd_ps(xc, _mm512_div_ps(p, q), _mm512_set1_ps(0.5f));
    return _mm512_mul_ps(x, cdf);
}
DL_V512_TARGET static inline __m512 gelu_grad_v512(__m512 x)
{
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 a = _mm512_abs_ps(x);
    __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(a, _mm512_set1_ps(GELU_T), one));
    __m512 s = _mm512_set1_ps(GELU_A5);
    s = _mm512_fmadd_ps(s, t, _mm512_set1_ps(GELU_A4));
    s = _mm512_fmadd_ps(s, t, _mm512_set1_ps(GELU_A3));
    s = _mm512_fmadd_ps(s, t, _mm512_set1_ps(GELU_A2));
    s = _mm512_fmadd_ps(s, t, _mm512_set1_ps(GELU_A1));
    __m512 e = dl_v512_exp_le0(_mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(-0.5f)), x));
    __m512 lo = _mm512_mul_ps(_mm512_mul_ps(s, t), e); /* Phi(-|x|) */
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    __m512 cdf = _mm512_mask_sub_ps(lo, pos, one, lo);
    return _mm512_fmadd_ps(_mm512_mul_ps(x, e), _mm512_set1_ps(GELU_PDF), cdf);
}
DL_V512_TARGET static inline __m512 sigmoid_v512(__m512 x)
{
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 e = dl_v512_exp(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(one, _mm512_add_ps(one, e));
}
DL_V512_TARGET static inline __m512 tanh_v512(__m512 x)
{
    __m512 one = _mm512_set1_ps(1.0f);
    __m512 a = _mm512_abs_ps(x);
    __m512 e = dl_v512_exp(_mm512_add_ps(a, a));
    __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    big = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(big),
                        _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
    __m512 z = _mm512_mul_ps(x, x);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(TANH_P4), z, _mm512_set1_ps(TANH_P3));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_P2));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_P1));
    p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(TANH_P0));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
    __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(TANH_SMALL), _CMP_LT_OQ),
                                    big, small);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, x);
}
DL_V512_TARGET static inline __m512 act_v512(dl_act kind, __m512 x)
{
    switch (kind) {
    case DL_ACT_GELU: return gelu_v512(x);
    case DL_ACT_TANH: return tanh_v512(x);
    case DL_ACT_SIGMOID: return sigmoid_v512(x);
    case DL_ACT_SILU: return _mm512_mul_ps(x, sigmoid_v512(x));
    default: return x;
    }
}
DL_V512_TARGET static inline __m512 act_grad_v512(dl_act kind, __m512 x, __m512 dy)
{
    __m512 one = _mm512_set1_ps(1.0f);
    switch (kind) {
    case DL_ACT_GELU: return _mm512_mul_ps(dy, gelu_grad_v512(x));
    case DL_ACT_SIGMOID: {
        __m512 sg = sigmoid_v512(x);
        return _mm512_mul_ps(dy, _mm512_mul_ps(sg, _mm512_sub_ps(one, sg)));
    }
    case DL_ACT_SILU: {
        __m512 sg = sigmoid_v512(x);
        __m512 k = _mm512_fmadd_ps(x, _mm512_sub_ps(one, sg), one);
        return _mm512_mul_ps(dy, _mm512_mul_ps(sg, k));
    }
    default: return dy;
    }
}
DL_V512_TARGET static void act_fwd_v512(dl_act kind, float *y, const float *x, size_t b, size_t e)
{
    size_t i = b;
    /* two vectors a step: their long dependency chains interleave */
    for (; i + 32 <= e; i += 32) {
        __m512 v0 = act_v512(kind, _mm512_loadu_ps(x + i));
        __m512 v1 = act_v512(kind, _mm512_loadu_ps(x + i + 16));
        _mm512_storeu_ps(y + i, v0);
        _mm512_storeu_ps(y + i + 16, v1);
    }
    for (; i < e; i += 16) {
        __mmask16 m = dl_v512_mask(e - i < 16 ? (int)(e - i) : 16);
        _mm512_mask_storeu_ps(y + i, m, act_v512(kind, _mm512_maskz_loadu_ps(m, x + i)));
    }
}
/* dx += g, or with set dx = 0 + g (the adding op's bits on a zeroed dx). */
DL_V512_TARGET static void act_bwd_v512(dl_act kind, float *dx, const float *x, const float *dy,
                                        size_t b, size_t e, int set)
{
    size_t i = b;
    for (; i + 32 <= e; i += 32) {
        __m512 g0 = act_grad_v512(kind, _mm512_loadu_ps(x + i), _mm512_loadu_ps(dy + i));
        __m512 g1 = act_grad_v512(kind, _mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(dy + i + 16));
        __m512 base0 = set ? _mm512_setzero_ps() : _mm512_loadu_ps(dx + i);
        __m512 base1 = set ? _mm512_setzero_ps() : _mm512_loadu_ps(dx + i + 16);
        _mm512_storeu_ps(dx + i, _mm512_add_ps(base0, g0));
        _mm512_storeu_ps(dx + i + 16, _mm512_add_ps(base1, g1));
    }
    for (; i < e; i += 16) {
        __mmask16 m = dl_v512_mask(e - i < 16 ? (int)(e - i) : 16);
        __m512 g =
            act_grad_v512(kind, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, dy + i));
        __m512 base = set ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, dx + i);
        _mm512_mask_storeu_ps(dx + i, m, _mm512_add_ps(base, g));
    }
}

/* y = act(x) over [b, e), the tail through a masked load and store. */
static void act_fwd_v(dl_act kind, float *y, const float *x, size_t b, size_t e)
{
    if (dl_v512_usable()) {
        act_fwd_v512(kind, y, x, b, e);
        return;
    }
    size_t i = b;
    /* two vectors a step, as in the 16-lane loop */
    for (; i + 16 <= e; i += 16) {
        __m256 v0 = act_v(kind, _mm256_loadu_ps(x + i));
        __m256 v1 = act_v(kind, _mm256_loadu_ps(x + i + 8));
        _mm256_storeu_ps(y + i, v0);
        _mm256_storeu_ps(y + i + 8, v1);
    }
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(y + i, act_v(kind, _mm256_loadu_ps(x + i)));
    if (i < e)
        dl_v_store_tail(y + i, act_v(kind, dl_v_load_tail(x + i, (int)(e - i))), (int)(e - i));
}
static void act_bwd_v(dl_act kind, float *dx, const float *x, const float *dy, size_t b, size_t e,
                      int set)
{
    if (dl_v512_usable()) {
        act_bwd_v512(kind, dx, x, dy, b, e, set);
        return;
    }
    size_t i = b;
    for (; i + 16 <= e; i += 16) {
        __m256 g0 = act_grad_v(kind, _mm256_loadu_ps(x + i), _mm256_loadu_ps(dy + i));
        __m256 g1 = act_grad_v(kind, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(dy + i + 8));
        __m256 base0 = set ? _mm256_setzero_ps() : _mm256_loadu_ps(dx + i);
        __m256 base1 = set ? _mm256_setzero_ps() : _mm256_loadu_ps(dx + i + 8);
        _mm256_storeu_ps(dx + i, _mm256_add_ps(base0, g0));
        _mm256_storeu_ps(dx + i + 8, _mm256_add_ps(base1, g1));
    }
    for (; i + 8 <= e; i += 8) {
        __m256 g = act_grad_v(kind, _mm256_loadu_ps(x + i), _mm256_loadu_ps(dy + i));
        __m256 base = set ? _mm256_setzero_ps() : _mm256_loadu_ps(dx + i);
        _mm256_storeu_ps(dx + i, _mm256_add_ps(base, g));
    }
    if (i < e) {
        int n = (int)(e - i);
        __m256 g = act_grad_v(kind, dl_v_load_tail(x + i, n), dl_v_load_tail(dy + i, n));
        __m256 base = set ? _mm256_setzero_ps() : dl_v_load_tail(dx + i, n);
        dl_v_store_tail(dx + i, _mm256_add_ps(base, g), n);
    }
}
#endif

static void act_fwd_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float *restrict y = j->y;
    const float *restrict x = j->a;
#ifdef DL_CPU_VMATH
    if (act_fwd_vectorised((dl_act)j->i0)) {
        act_fwd_v((dl_act)j->i0, y, x, b, e);
        return;
    }
#endif
    switch ((dl_act)j->i0) {
    case DL_ACT_RELU: {
        size_t i = b;
#ifdef __AVX2__
        /* x > 0 is false for NaN: NaN maps to 0 as in the scalar loop */
        for (; i + 8 <= e; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            __m256 keep = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ);
            _mm256_storeu_ps(y + i, _mm256_and_ps(v, keep));
        }
#endif
        for (; i < e; i++)
            y[i] = x[i] > 0 ? x[i] : 0;
        break;
    }
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
    case DL_ACT_SILU:
        for (size_t i = b; i < e; i++)
            y[i] = x[i] / (1.0f + expf(-x[i]));
        break;
    }
}

int dl_cpu_act_forward(dl_backend *be, dl_act kind, float *y, const float *x, size_t n)
{
    job j = {.y = y, .a = x, .i0 = (int)kind};
    par(be, n, act_fwd_range, &j);
    return DL_OK;
}

/* act_fwd_range, each 4096 values rounded (j->t0) while in cache. */
static void act_fwd_round_range(void *p, size_t b, size_t e)
{
    job *j = p;
    for (size_t s = b; s < e; s += 4096) {
        size_t t = e - s > 4096 ? s + 4096 : e;
        act_fwd_range(j, s, t);
        dl_cpu_round_run(j->y + s, j->y + s, j->t0, t - s);
    }
}

int dl_cpu_act_forward_round(dl_backend *be, dl_act kind, float *y, const float *x, size_t n,
                             dl_dtype round)
{
    if (round != DL_BF16 && round != DL_F16)
        return dl_error(DL_EINVAL, "act_forward_round: rounding to %s", dl_dtype_name(round));
    job j = {.y = y, .a = x, .i0 = (int)kind, .t0 = round};
    par(be, n, act_fwd_round_range, &j);
    return DL_OK;
}

typedef struct {
    float *dx;
    const float *x, *y, *dy;
    dl_act kind;
    int set; /* write dx instead of adding to it */
} act_bwd_job;

static void act_bwd_range(void *p, size_t b, size_t e)
{
    act_bwd_job *j = p;
    float *restrict dx = j->dx;
    const float *restrict x = j->x, *restrict y = j->y, *restrict dy = j->dy;
#ifdef DL_CPU_VMATH
    if (act_vectorised(j->kind)) {
        act_bwd_v(j->kind, dx, x, dy, b, e, j->set);
        return;
    }
#endif
    switch (j->kind) {
    case DL_ACT_RELU: {
        size_t i = b;
#ifdef __AVX2__
        for (; i + 8 <= e; i += 8) {
            __m256 keep = _mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps(), _CMP_GT_OQ);
            __m256 g = _mm256_and_ps(_mm256_loadu_ps(dy + i), keep);
            _mm256_storeu_ps(dx + i, _mm256_add_ps(_mm256_loadu_ps(dx + i), g));
        }
#endif
        /* branch-free: the sign of x is a coin toss after training starts */
        for (; i < e; i++) {
            float g = dy[i];
            dx[i] += x[i] > 0 ? g : 0;
        }
        break;
    }
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
    case DL_ACT_SILU: /* d/dx x s(x) = s(x) (1 + x (1 - s(x))) */
        for (size_t i = b; i < e; i++) {
            float sg = 1.0f / (1.0f + expf(-x[i]));
            dx[i] += dy[i] * sg * (1.0f + x[i] * (1.0f - sg));
        }
        break;
    }
}

int dl_cpu_act_backward(dl_backend *be, dl_act kind, float *dx, const float *x, const float *y,
                        const float *dy, size_t n)
{
    act_bwd_job j = {dx, x, y, dy, kind, 0};
    dl_pool_for(dl_cpu(be)->pool, n, GRAIN, act_bwd_range, &j);
    return DL_OK;
}

/* ReLU's gradient written: dx = dy where x > 0, else 0 (NaN: 0). */
static void relu_bwd_set_range(void *p, size_t b, size_t e)
{
    act_bwd_job *j = p;
    float *restrict dx = j->dx;
    const float *restrict x = j->x, *restrict dy = j->dy;
    size_t i = b;
#ifdef __AVX2__
    for (; i + 8 <= e; i += 8) {
        __m256 keep = _mm256_cmp_ps(_mm256_loadu_ps(x + i), _mm256_setzero_ps(), _CMP_GT_OQ);
        _mm256_storeu_ps(dx + i, _mm256_and_ps(_mm256_loadu_ps(dy + i), keep));
    }
#endif
    for (; i < e; i++)
        dx[i] = x[i] > 0 ? dy[i] : 0;
}

/* The other kinds: the values of the adding op into zeros (0 + g), the
 * vector kernels' written directly, the others' added into the range
 * zeroed while it is in cache. */
static void act_bwd_set_range(void *p, size_t b, size_t e)
{
    act_bwd_job *j = p;
#ifdef DL_CPU_VMATH
    if (act_vectorised(j->kind)) {
        act_bwd_v(j->kind, j->dx, j->x, j->dy, b, e, 1);
        return;
    }
#endif
    memset(j->dx + b, 0, (e - b) * sizeof(float));
    act_bwd_range(p, b, e);
}

int dl_cpu_act_backward_set(dl_backend *be, dl_act kind, float *dx, const float *x, const float *y,
                            const float *dy, size_t n)
{
    act_bwd_job j = {dx, x, y, dy, kind, 1};
    dl_pool_for(dl_cpu(be)->pool, n, GRAIN,
                kind == DL_ACT_RELU ? relu_bwd_set_range : act_bwd_set_range, &j);
    return DL_OK;
}

/* --- arithmetic ---------------------------------------------------------- */

static void add_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float *restrict y = j->y;
    const float *restrict a = j->a, *restrict c = j->b;
    size_t i = b;
#ifdef __AVX2__
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(c + i)));
#endif
    for (; i < e; i++)
        y[i] = a[i] + c[i];
}

int dl_cpu_add(dl_backend *be, float *y, const float *a, const float *b, size_t n)
{
    job j = {.y = y, .a = a, .b = b};
    par(be, n, add_range, &j);
    return DL_OK;
}

/* y = relu(a + b): the sum's sign decides, NaN gives 0 (as relu). */
static void add_relu_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float *restrict y = j->y;
    const float *restrict a = j->a, *restrict c = j->b;
    size_t i = b;
#ifdef __AVX2__
    for (; i + 8 <= e; i += 8) {
        __m256 v = _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(c + i));
        __m256 keep = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ);
        _mm256_storeu_ps(y + i, _mm256_and_ps(v, keep));
    }
#endif
    for (; i < e; i++) {
        float v = a[i] + c[i];
        y[i] = v > 0 ? v : 0;
    }
}

int dl_cpu_add_relu_forward(dl_backend *be, float *y, const float *a, const float *b, size_t n)
{
    job j = {.y = y, .a = a, .b = b};
    par(be, n, add_relu_range, &j);
    return DL_OK;
}

/* da (and db when not NULL) = dy where y > 0, else 0: y = relu(sum) is
 * positive exactly where the sum is, so these are the ReLU's written
 * gradient bits (relu_bwd_set_range) for both addends. */
static void add_relu_bwd_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float *restrict da = j->y, *restrict db = j->dst;
    const float *restrict y = j->a, *restrict dy = j->b;
    size_t i = b;
#ifdef __AVX2__
    for (; i + 8 <= e; i += 8) {
        __m256 keep = _mm256_cmp_ps(_mm256_loadu_ps(y + i), _mm256_setzero_ps(), _CMP_GT_OQ);
        __m256 g = _mm256_and_ps(_mm256_loadu_ps(dy + i), keep);
        _mm256_storeu_ps(da + i, g);
        if (db)
            _mm256_storeu_ps(db + i, g);
    }
#endif
    for (; i < e; i++) {
        float g = y[i] > 0 ? dy[i] : 0;
        da[i] = g;
        if (db)
            db[i] = g;
    }
}

int dl_cpu_add_relu_backward_set(dl_backend *be, float *da, float *db, const float *y,
                                 const float *dy, size_t n)
{
    job j = {.y = da, .dst = db, .a = y, .b = dy};
    par(be, n, add_relu_bwd_range, &j);
    return DL_OK;
}

static void axpy_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float *restrict y = j->y;
    const float *restrict x = j->a;
    const float alpha = j->s0;
    size_t i = b;
#ifdef __AVX2__
    __m256 va = _mm256_set1_ps(alpha);
    for (; i + 8 <= e; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i),
                                              _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
#endif
    for (; i < e; i++)
        y[i] += alpha * x[i];
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
    dl_v_scale(j->y + b, e - b, j->s0);
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

/* Element i is kept when dl_rng_hash_bits(seed, stream, counter, i) >=
 * dl_rng_threshold(p) (rng.h): a hash of the index under a key drawn once
 * per 2^32 elements, so any lane may compute any element, and masks agree
 * with the CUDA kernel, with any range split and on either vector width.
 * A kept element is x / (1 - p), a dropped one 0 * x. */
static inline float drop_one(const job *j, size_t i, uint32_t bits, uint32_t thr, float ks)
{
    float m = bits >= thr ? ks : 0.0f;
    return j->i0 ? j->y[i] + m * j->a[i] : m * j->a[i];
}

#ifdef DL_CPU_VMATH
/* dl_rng_hash32's mixer on 8 lanes (x = index * a + b already). */
static inline __m256i hash_mix8(__m256i x)
{
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)DL_RNG_HASH_M0));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)DL_RNG_HASH_M1));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* One vector of 8 elements at y, x: m * x, added to y when add. */
static inline void drop8(float *y, const float *x, __m256i h, __m256i t, __m256 vks, int add)
{
    /* h >= thr unsigned: max(h, thr) == h */
    __m256i keep = _mm256_cmpeq_epi32(_mm256_max_epu32(h, t), h);
    __m256 v = _mm256_mul_ps(_mm256_and_ps(vks, _mm256_castsi256_ps(keep)), _mm256_loadu_ps(x));
    if (add)
        v = _mm256_add_ps(_mm256_loadu_ps(y), v);
    _mm256_storeu_ps(y, v);
}

/* Elements [i, e) by 16 while 16 remain (two independent hashes in
 * flight), all in one key's 2^32 elements; returns where it stopped. */
static size_t drop_v256(const job *j, dl_rng_hkey k, uint32_t thr, float ks, size_t i, size_t e)
{
    float *y = j->y;
    const float *x = j->a;
    const int add = j->i0;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i h0 = _mm256_add_epi32(
        _mm256_mullo_epi32(_mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)i), lane),
                           _mm256_set1_epi32((int)k.a)),
        _mm256_set1_epi32((int)k.b));
    const __m256i step = _mm256_set1_epi32((int)(8u * k.a)), t = _mm256_set1_epi32((int)thr);
    __m256i h1 = _mm256_add_epi32(h0, step);
    const __m256i step2 = _mm256_add_epi32(step, step);
    const __m256 vks = _mm256_set1_ps(ks);
    for (; i + 16 <= e; i += 16) {
        __m256i m0 = hash_mix8(h0), m1 = hash_mix8(h1);
        h0 = _mm256_add_epi32(h0, step2);
        h1 = _mm256_add_epi32(h1, step2);
        drop8(y + i, x + i, m0, t, vks, add);
        drop8(y + i + 8, x + i + 8, m1, t, vks, add);
    }
    return i;
}

/* The same on 16 lanes. */
DL_V512_TARGET static inline __m512i hash_mix16(__m512i x)
{
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)DL_RNG_HASH_M0));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)DL_RNG_HASH_M1));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

DL_V512_TARGET static inline void drop16(float *y, const float *x, __m512i h, __m512i t, __m512 vks,
                                         int add)
{
    /* m * x as the 8-lane code does it (0 * x keeps its sign) */
    __m512 v =
        _mm512_mul_ps(_mm512_maskz_mov_ps(_mm512_cmpge_epu32_mask(h, t), vks), _mm512_loadu_ps(x));
    if (add)
        v = _mm512_add_ps(_mm512_loadu_ps(y), v);
    _mm512_storeu_ps(y, v);
}

DL_V512_TARGET static size_t drop_v512(const job *j, dl_rng_hkey k, uint32_t thr, float ks,
                                       size_t i, size_t e)
{
    float *y = j->y;
    const float *x = j->a;
    const int add = j->i0;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i h0 = _mm512_add_epi32(
        _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)i), lane),
                           _mm512_set1_epi32((int)k.a)),
        _mm512_set1_epi32((int)k.b));
    const __m512i step = _mm512_set1_epi32((int)(16u * k.a)), t = _mm512_set1_epi32((int)thr);
    __m512i h1 = _mm512_add_epi32(h0, step);
    const __m512i step2 = _mm512_add_epi32(step, step);
    const __m512 vks = _mm512_set1_ps(ks);
    for (; i + 32 <= e; i += 32) {
        __m512i m0 = hash_mix16(h0), m1 = hash_mix16(h1);
        h0 = _mm512_add_epi32(h0, step2);
        h1 = _mm512_add_epi32(h1, step2);
        drop16(y + i, x + i, m0, t, vks, add);
        drop16(y + i + 16, x + i + 16, m1, t, vks, add);
    }
    return i;
}
#endif

/* Elements [b, e), all under key k (one 2^32 segment of indices). */
static void drop_segment(const job *j, dl_rng_hkey k, uint32_t thr, float ks, size_t b, size_t e)
{
    size_t i = b;
#ifdef DL_CPU_VMATH
    i = dl_v512_usable() ? drop_v512(j, k, thr, ks, i, e) : drop_v256(j, k, thr, ks, i, e);
#endif
    for (; i < e; i++)
        j->y[i] = drop_one(j, i, dl_rng_hash32(k, (uint32_t)i), thr, ks);
}

static void dropout_range(void *p, size_t b, size_t e)
{
    job *j = p;
    float ks = 1.0f / (1.0f - j->s0);
    uint32_t thr = dl_rng_threshold(j->s0);
    while (b < e) {
        uint32_t hi = (uint32_t)((uint64_t)b >> 32);
        uint64_t seg_end = ((uint64_t)hi + 1) << 32;
        size_t end = (uint64_t)e < seg_end ? e : (size_t)seg_end;
        drop_segment(j, dl_rng_hash_key(j->u0, j->u1, j->u2, hi), thr, ks, b, end);
        b = end;
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
        return dl_error(DL_EINVAL, "embedding index %g is not an integer in [0, %d)", (double)v,
                        vocab);
    *out = (int)v;
    return DL_OK;
}

int dl_cpu_embedding_forward(dl_backend *be, int n, int vocab, int dim, float *y, const float *idx,
                             const float *table)
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

/* exp(z[c] - mx) summed over the row, and z[c] - mx summed (in double). */
static void row_exp_sums(const float *z, int classes, float mx, float *ez, double *sum,
                         double *zsum)
{
    int c = 0;
#ifdef DL_CPU_VMATH
    __m256 s = _mm256_setzero_ps(), zs = _mm256_setzero_ps(), m = _mm256_set1_ps(mx);
    for (; c + 8 <= classes; c += 8) {
        __m256 v = _mm256_sub_ps(_mm256_loadu_ps(z + c), m), e = dl_v_exp(v);
        s = _mm256_add_ps(s, e);
        zs = _mm256_add_ps(zs, v);
        if (ez)
            _mm256_storeu_ps(ez + c, e);
    }
    if (c < classes) {
        __m256 live = _mm256_castsi256_ps(dl_v_mask(classes - c));
        __m256 v = _mm256_and_ps(_mm256_sub_ps(dl_v_load_tail(z + c, classes - c), m), live);
        __m256 e = _mm256_and_ps(dl_v_exp(v), live);
        s = _mm256_add_ps(s, e);
        zs = _mm256_add_ps(zs, v);
        if (ez)
            _mm256_storeu_ps(ez + c, e); /* ez has room for a whole vector */
    }
    *sum = dl_v_hsum(s);
    *zsum = dl_v_hsum(zs);
    return;
#endif
    *sum = *zsum = 0;
    for (; c < classes; c++) {
        *sum += exp((double)(z[c] - mx));
        *zsum += z[c] - mx;
    }
}

/* d[c] += grad_scale * (softmax(z)[c] - target[c]), the target smoothed;
 * ez (may be NULL) holds exp(z - mx) from row_exp_sums. */
static void row_grad(float *d, const float *z, const float *ez, int classes, int y, float mx,
                     float inv, float smoothing, float grad_scale)
{
    float off = smoothing / (float)classes;
    int c = 0;
#ifdef DL_CPU_VMATH
    __m256 m = _mm256_set1_ps(mx), vi = _mm256_set1_ps(inv), vo = _mm256_set1_ps(off);
    __m256 gs = _mm256_set1_ps(grad_scale);
    for (; c < classes; c += 8) {
        int w = classes - c < 8 ? classes - c : 8;
        __m256 e;
        if (ez)
            e = _mm256_loadu_ps(ez + c);
        else
            e = dl_v_exp(
                _mm256_sub_ps(w == 8 ? _mm256_loadu_ps(z + c) : dl_v_load_tail(z + c, w), m));
        __m256 pc = _mm256_mul_ps(e, vi);
        __m256 g = _mm256_mul_ps(gs, _mm256_sub_ps(pc, vo));
        __m256 o = _mm256_add_ps(w == 8 ? _mm256_loadu_ps(d + c) : dl_v_load_tail(d + c, w), g);
        if (w == 8)
            _mm256_storeu_ps(d + c, o);
        else
            dl_v_store_tail(d + c, o, w);
    }
    d[y] -= grad_scale * (1.0f - smoothing);
    return;
#endif
    for (; c < classes; c++) {
        float pc = expf(z[c] - mx) * inv;
        float target = off + (c == y ? 1.0f - smoothing : 0.0f);
        d[c] += grad_scale * (pc - target);
    }
}

/* The index of the first largest of z[0..n) (NaN never wins, as in a
 * scalar scan with >). */
static int row_argmax(const float *z, int n)
{
    int c = 0;
    float mx = z[0];
#ifdef DL_CPU_VMATH
    if (n >= 16) {
        __m256 m = _mm256_loadu_ps(z);
        for (c = 8; c + 8 <= n; c += 8)
            m = _mm256_max_ps(m, _mm256_loadu_ps(z + c));
        float part[8];
        _mm256_storeu_ps(part, m);
        for (int k = 0; k < 8; k++)
            mx = part[k] > mx ? part[k] : mx;
        for (; c < n; c++)
            mx = z[c] > mx ? z[c] : mx;
        for (c = 0; c < n; c++)
            if (z[c] == mx)
                return c;
        mx = z[0]; /* only NaN in the lanes: the scalar scan below decides */
    }
    c = 0;
#endif
    int arg = 0;
    for (c = 1; c < n; c++)
        if (z[c] > mx) {
            mx = z[c];
            arg = c;
        }
    return arg;
}

/* (1 - s) nll + s mean_nll; without smoothing the mean is left out, so a
 * masked (-inf) logit does not turn the loss into 0 * inf = NaN, but a
 * NaN logit (zsum NaN) still gives NaN. */
static inline double xent_mix(double nll, double mean_nll, double zsum, float s)
{
    if (s == 0)
        return zsum != zsum ? zsum : nll;
    return (1.0 - s) * nll + s * mean_nll;
}

/* Loss of one row of logits z [classes] with label y and smoothing;
 * d (may be NULL) += grad_scale * dloss/dz; *correct += argmax == y.
 * Any values, NaN and infinities included (the vector rows below hand
 * over rows whose maximum is not finite). */
static double xent_row(const float *z, int classes, int y, float smoothing, float grad_scale,
                       float *d, int *correct)
{
    int arg = row_argmax(z, classes);
    float mx = z[arg];
    double sum, zsum;
    /* rows of up to 4K classes keep their exps for the gradient */
    float ez[4096 + 8];
    float *keep = d && classes <= 4096 ? ez : NULL;
    row_exp_sums(z, classes, mx, keep, &sum, &zsum);
    double lse = log(sum); /* log-sum-exp minus mx */
    /* -log p_y = lse - (z_y - mx); the smoothed part averages -log p_c */
    double nll = lse - (z[y] - mx);
    double mean_nll = lse - zsum / classes;
    *correct += arg == y;
    if (d)
        row_grad(d, z, keep, classes, y, mx, (float)(1.0 / sum), smoothing, grad_scale);
    return xent_mix(nll, mean_nll, zsum, smoothing);
}

/* Rows run in fixed blocks on the pool; each block's loss and count land
 * in its own slot and are summed in block order, so the result does not
 * depend on the thread count. */
#define XENT_BLOCK 16

typedef struct xent_job {
    const float *logits;
    const int32_t *labels;
    int rows, classes, ignore; /* rows whose label is ignore are skipped */
    float smoothing, grad_scale;
    float *dlogits;
    double *loss; /* [blocks] */
    int *correct; /* [blocks] */
} xent_job;

#ifdef DL_CPU_VMATH
/* The vector rows: a group of rows goes through each pass before the
 * next starts (the largest value of each row, NaN ignored; exp(z - mx),
 * kept, with its sums; then losses and gradients), so that the rows'
 * long chains (a reduction, the exps, a sum, a division) overlap instead
 * of waiting on each other. A group's exps stay in L1 (XENT_KEEP
 * floats). The argmax is only needed as "is it y": z[y] == mx and no
 * earlier class equal to mx. A row whose maximum is not finite (all NaN
 * or -inf, or a +inf) goes to xent_row. The loss is xent_row's
 * expression to float rounding: the exps are dl_v_exp_sm's, the lane
 * sums are reduced in float, log(sum) is dl_v_log_pos's; the 8- and
 * 16-lane kernels give the same exps and run the same gradient
 * operations (their sums differ in the order of the lanes). */
#define XENT_KEEP 4096

typedef struct xent_group {
    int r0, r1; /* rows [r0, r1) */
    int stride; /* floats between two rows' exps in ez (0: not kept) */
    float mx[XENT_BLOCK];
    double sum[XENT_BLOCK], zsum[XENT_BLOCK];
    float lse[XENT_BLOCK]; /* log(sum), of the 16 at once */
    float ez[XENT_KEEP + 16];
} xent_group;

/* Rows of a group: as many as keep their exps in ez, 1 to XENT_BLOCK.
 * The rows' exps lie end to end (stride = classes), as their gradients
 * do in dlogits, so that the gradient pass runs over the group as one
 * flat array (xent_grad_v512, xent_grad_v256). */
static void xent_group_size(const xent_job *j, xent_group *g)
{
    g->stride = j->dlogits && j->classes <= XENT_KEEP ? j->classes : 0;
    int rows = g->stride ? XENT_KEEP / g->stride : XENT_BLOCK;
    g->r1 = g->r0 + (rows < XENT_BLOCK ? rows : XENT_BLOCK);
}

/* The loss of row r of the group from its sums and log-sum-exp. */
static inline double xent_loss(const xent_job *j, const xent_group *g, int r)
{
    const float *z = j->logits + (size_t)r * j->classes;
    int i = r - g->r0, y = j->labels[r];
    double nll = (double)g->lse[i] - (z[y] - g->mx[i]);
    if (j->smoothing == 0)
        return xent_mix(nll, 0, g->zsum[i], 0);
    return xent_mix(nll, (double)g->lse[i] - g->zsum[i] / j->classes, g->zsum[i], j->smoothing);
}

/* Whether row r of the group takes the vector path: not ignored, and a
 * finite maximum. */
static inline int xent_vector_row(const xent_job *j, const xent_group *g, int r)
{
    float mx = g->mx[r - g->r0];
    return j->labels[r] != j->ignore && mx > -INFINITY && mx < INFINITY;
}

/* A row that does not: nothing when ignored, else xent_row. */
static void xent_other_row(const xent_job *j, int r, double *loss, int *correct)
{
    if (j->labels[r] == j->ignore)
        return;
    const float *z = j->logits + (size_t)r * j->classes;
    float *d = j->dlogits ? j->dlogits + (size_t)r * j->classes : NULL;
    *loss += xent_row(z, j->classes, j->labels[r], j->smoothing, j->grad_scale, d, correct);
}

/* The losses of the group's rows in row order, after their sums: a row
 * off the vector path goes through xent_other_row (its gradient too).
 * first_max(j, g, r): the first class of row r equal to its maximum, or
 * -1; asked only when the label's logit is the maximum. Returns the mask
 * of the group's vector rows (bit i: row r0 + i). */
static unsigned xent_group_losses(const xent_job *j, const xent_group *g, double *loss,
                                  int *correct,
                                  int (*first_max)(const xent_job *, const xent_group *, int))
{
    unsigned live = 0;
    double sum = *loss; /* in a register, not through the pointer */
    int hits = *correct;
    for (int r = g->r0; r < g->r1; r++) {
        if (!xent_vector_row(j, g, r)) {
            xent_other_row(j, r, &sum, &hits);
            continue;
        }
        int y = j->labels[r];
        live |= 1u << (r - g->r0);
        sum += xent_loss(j, g, r);
        hits +=
            j->logits[(size_t)r * j->classes + y] == g->mx[r - g->r0] && first_max(j, g, r) == y;
    }
    *loss = sum;
    *correct = hits;
    return live;
}

/* Per vector row i of the group (bit i of live): a[i] = grad_scale / sum
 * (the float product), y[i] its label's place in the group's flat array
 * (i classes + label); 0 and -1 for the others of the 16. */
static void xent_grad_coefs(const xent_job *j, const xent_group *g, unsigned live, float *a,
                            int32_t *y)
{
    for (int i = 0; i < XENT_BLOCK; i++) {
        int on = g->r0 + i < g->r1 && (live >> i & 1);
        a[i] = on ? j->grad_scale * (float)(1.0 / g->sum[i]) : 0.0f;
        y[i] = on ? i * j->classes + j->labels[g->r0 + i] : -1;
    }
}

/* The last n % 16 floats of a row at p (lanes past them: missing): a
 * whole vector when that stays inside the array (it ends at end), a
 * masked load otherwise. Which one is used never changes a result. */
DL_V512_TARGET static inline __m512 tail_v512(const float *p, const float *end, __mmask16 k,
                                              __m512 missing)
{
    if (end - p >= 16)
        return _mm512_mask_blend_ps(k, missing, _mm512_loadu_ps(p));
    return _mm512_mask_loadu_ps(missing, k, p);
}

DL_V512_TARGET static int first_max_v512(const xent_job *j, const xent_group *g, int r)
{
    const int n = j->classes, y = j->labels[r];
    const float *z = j->logits + (size_t)r * n;
    const float mx = g->mx[r - g->r0];
    const __m512 vm = _mm512_set1_ps(mx);
    for (int c = 0; z[y] == mx && c <= y; c += 16) {
        __mmask16 k = n - c >= 16 ? (__mmask16)0xffff : dl_v512_mask(n - c);
        __mmask16 eq = _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, z + c), vm, _CMP_EQ_OQ);
        if (eq)
            return c + __builtin_ctz(eq);
    }
    return -1;
}

/* d += grad_scale (e / sum - target) over the group's rows as one flat
 * array of rows x classes floats (the exps in ez alike), vectors at every
 * 16th float: a masked store per row made the next row's loads of d wait
 * for it to retire, here only the group's last vector is masked. A
 * vector inside a row takes the row's a and label; one that straddles
 * rows finds each lane's row from its place q, as floor((q + 1/2) /
 * classes) in float (q < 4112: the product's error stays far below the
 * 1/2 classes it has), and the row's a and label place from the 16 in
 * one register. Per element: fma(e, a, -grad_scale smoothing / classes),
 * less grad_scale (1 - smoothing) at the label, added to d; lanes of rows
 * not in live keep d as it is. */
DL_V512_TARGET static void xent_grad_v512(const xent_job *j, const xent_group *g, unsigned live)
{
    const int n = j->classes, rows = g->r1 - g->r0, len = rows * n;
    float a[XENT_BLOCK];
    int32_t y[XENT_BLOCK];
    xent_grad_coefs(j, g, live, a, y);
    float *d = j->dlogits + (size_t)g->r0 * n;
    const float *ez = g->ez; /* room for a vector past len */
    const __m512 va = _mm512_loadu_ps(a), inv = _mm512_set1_ps(1.0f / (float)n);
    const __m512 half = _mm512_set1_ps(0.5f / (float)n);
    const __m512 vb = _mm512_set1_ps(-j->grad_scale * (j->smoothing / (float)n));
    const __m512 vt = _mm512_set1_ps(j->grad_scale * (1.0f - j->smoothing));
    const __m512i vy = _mm512_loadu_si512(y), one = _mm512_set1_epi32(1);
    const __m512i vlive = _mm512_set1_epi32((int)live);
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int p = 0;
    for (int i = 0; i < rows; i++) {
        const int end = (i + 1) * n;
        if (live >> i & 1) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            for (; p + 16 <= end; p += 16) {
                __m512 gr = _mm512_fmadd_ps(_mm512_loadu_ps(ez + p), ai, vb);
                unsigned at = (unsigned)(y[i] - p);
                gr = _mm512_mask_sub_ps(gr, at < 16 ? (__mmask16)(1u << at) : 0, gr, vt);
                _mm512_storeu_ps(d + p, _mm512_add_ps(_mm512_loadu_ps(d + p), gr));
            }
        } else {
            p += (end - p) / 16 * 16;
        }
        if (p >= end)
            continue;
        /* the vector from p straddles rows i, i + 1, ... */
        __m512i q = _mm512_add_epi32(_mm512_set1_epi32(p), lanes);
        __m512i row = _mm512_cvttps_epi32(_mm512_fmadd_ps(_mm512_cvtepi32_ps(q), inv, half));
        __m512 gr = _mm512_fmadd_ps(_mm512_loadu_ps(ez + p), _mm512_permutexvar_ps(row, va), vb);
        __mmask16 at = _mm512_cmpeq_epi32_mask(q, _mm512_permutexvar_epi32(row, vy));
        gr = _mm512_mask_sub_ps(gr, at, gr, vt);
        __mmask16 on = _mm512_test_epi32_mask(_mm512_srlv_epi32(vlive, row), one);
        __mmask16 k = len - p >= 16 ? (__mmask16)0xffff : dl_v512_mask(len - p);
        __m512 o = _mm512_maskz_loadu_ps(k, d + p);
        _mm512_mask_storeu_ps(d + p, k, _mm512_mask_add_ps(o, on, o, gr));
        p += 16;
    }
}

/* The same for rows too long to keep their exps (more than XENT_KEEP
 * classes): row by row, the exps again (the same bits as their sums'). */
DL_V512_TARGET static void xent_grad_rows_v512(const xent_job *j, const xent_group *g,
                                               unsigned live)
{
    const int n = j->classes, full = n & ~15;
    const __mmask16 tail = dl_v512_mask(n - full);
    const __m512 zero = _mm512_setzero_ps();
    const float *zend = j->logits + (size_t)j->rows * n;
    const float *dend = j->dlogits + (size_t)j->rows * n;
    float a[XENT_BLOCK];
    int32_t ys[XENT_BLOCK];
    xent_grad_coefs(j, g, live, a, ys);
    const __m512 vb = _mm512_set1_ps(-j->grad_scale * (j->smoothing / (float)n));
    const __m512 vt = _mm512_set1_ps(j->grad_scale * (1.0f - j->smoothing));
    for (int r = g->r0; r < g->r1; r++) {
        int i = r - g->r0, y = ys[i] - i * n;
        if (!(live >> i & 1))
            continue;
        const float *z = j->logits + (size_t)r * n;
        float *d = j->dlogits + (size_t)r * n;
        const __m512 vm = _mm512_set1_ps(g->mx[i]), va = _mm512_set1_ps(a[i]);
        int c = 0;
        for (; c + 16 <= n; c += 16) {
            __m512 e = dl_v512_exp_sm(_mm512_sub_ps(_mm512_loadu_ps(z + c), vm));
            __m512 gr = _mm512_fmadd_ps(e, va, vb);
            unsigned at = (unsigned)(y - c);
            gr = _mm512_mask_sub_ps(gr, at < 16 ? (__mmask16)(1u << at) : 0, gr, vt);
            _mm512_storeu_ps(d + c, _mm512_add_ps(_mm512_loadu_ps(d + c), gr));
        }
        if (tail) {
            __m512 e = dl_v512_exp_sm(_mm512_sub_ps(tail_v512(z + c, zend, tail, zero), vm));
            __m512 gr = _mm512_fmadd_ps(e, va, vb);
            unsigned at = (unsigned)(y - c);
            gr = _mm512_mask_sub_ps(gr, at < 16 ? (__mmask16)(1u << at) : 0, gr, vt);
            __m512 o = _mm512_add_ps(tail_v512(d + c, dend, tail, zero), gr);
            _mm512_mask_storeu_ps(d + c, tail, o);
        }
    }
}

/* The lane sums (max: the largest lanes) of 16 vectors v[0..16) at
 * once: lane i of the result is v[i]'s, by a tree of shuffles (46
 * operations, where a reduction of each vector takes 10 and waits on
 * each step). */
DL_V512_TARGET static inline __m512 hred16_v512(const __m512 *v, int max)
{
#define RED(p, q) (max ? _mm512_max_ps(p, q) : _mm512_add_ps(p, q))
    __m512 a[8], b[4], c[2];
    for (int k = 0; k < 8; k++) /* rows 2k, 2k+1: 8 partial sums each */
        a[k] = RED(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                   _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
    for (int m = 0; m < 4; m++) /* block i: row 4m + i, 4 partial sums */
        b[m] = RED(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x88),
                   _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xDD));
    for (int t = 0; t < 2; t++) /* block i: rows 8t + i, 8t + 4 + i, 2 each */
        c[t] = RED(_mm512_shuffle_ps(b[2 * t], b[2 * t + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                   _mm512_shuffle_ps(b[2 * t], b[2 * t + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane 4i + k: row 4k + i */
    __m512 s = RED(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                   _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
#undef RED
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(order, s);
}

/* The group's sums and log-sum-exps from its rows' lane sums. */
DL_V512_TARGET static void xent_sums_v512(xent_group *g, const __m512 *sums, const __m512 *zsums)
{
    float sum[XENT_BLOCK], zsum[XENT_BLOCK];
    __m512 s = hred16_v512(sums, 0);
    _mm512_storeu_ps(sum, s);
    _mm512_storeu_ps(zsum, hred16_v512(zsums, 0));
    /* rows off the vector path have a sum of 0: log(1) instead */
    __mmask16 none = _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_EQ_OQ);
    _mm512_storeu_ps(g->lse, dl_v512_log_pos(_mm512_mask_mov_ps(s, none, _mm512_set1_ps(1.0f))));
    for (int i = 0; i < g->r1 - g->r0; i++) {
        g->sum[i] = sum[i];
        g->zsum[i] = zsum[i];
    }
}

DL_V512_TARGET static void xent_group_v512(const xent_job *j, xent_group *g, double *loss,
                                           int *correct)
{
    const int n = j->classes, full = n & ~15;
    const __mmask16 tail = dl_v512_mask(n - full);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    const float *zend = j->logits + (size_t)j->rows * n;
    __m512 maxes[XENT_BLOCK];
    for (int r = g->r0; r < g->r1; r++) {
        const float *z = j->logits + (size_t)r * n;
        /* max(v, m) gives m where v is NaN: NaN never wins */
        __m512 m0 = ninf, m1 = ninf;
        int c = 0;
        for (; c + 32 <= full; c += 32) {
            m0 = _mm512_max_ps(_mm512_loadu_ps(z + c), m0);
            m1 = _mm512_max_ps(_mm512_loadu_ps(z + c + 16), m1);
        }
        if (c < full)
            m0 = _mm512_max_ps(_mm512_loadu_ps(z + c), m0);
        if (tail)
            m1 = _mm512_max_ps(tail_v512(z + full, zend, tail, ninf), m1);
        maxes[r - g->r0] = _mm512_max_ps(m0, m1);
    }
    for (int i = g->r1 - g->r0; i < XENT_BLOCK; i++)
        maxes[i] = ninf;
    _mm512_storeu_ps(g->mx, hred16_v512(maxes, 1));
    /* each row's lane sums, reduced together after the rows */
    __m512 sums[XENT_BLOCK], zsums[XENT_BLOCK];
    for (int r = g->r0; r < g->r0 + XENT_BLOCK; r++) {
        int i = r - g->r0;
        const float *z = j->logits + (size_t)r * n;
        float *keep = g->stride ? g->ez + (size_t)i * g->stride : NULL;
        sums[i] = zsums[i] = zero;
        if (r >= g->r1 || !xent_vector_row(j, g, r))
            continue;
        const __m512 vm = _mm512_set1_ps(g->mx[i]);
        __m512 s0 = zero, s1 = zero, zs = zero;
        int c = 0;
        for (; c + 32 <= full; c += 32) {
            __m512 v0 = _mm512_sub_ps(_mm512_loadu_ps(z + c), vm);
            __m512 v1 = _mm512_sub_ps(_mm512_loadu_ps(z + c + 16), vm);
            __m512 e0 = dl_v512_exp_sm(v0), e1 = dl_v512_exp_sm(v1);
            s0 = _mm512_add_ps(s0, e0);
            s1 = _mm512_add_ps(s1, e1);
            zs = _mm512_add_ps(zs, _mm512_add_ps(v0, v1));
            if (keep) {
                _mm512_storeu_ps(keep + c, e0);
                _mm512_storeu_ps(keep + c + 16, e1);
            }
        }
        if (c < full) {
            __m512 v = _mm512_sub_ps(_mm512_loadu_ps(z + c), vm), e = dl_v512_exp_sm(v);
            s0 = _mm512_add_ps(s0, e);
            zs = _mm512_add_ps(zs, v);
            if (keep)
                _mm512_storeu_ps(keep + c, e);
        }
        if (tail) {
            /* lanes past the row: v = 0 - 0 and e = 0 */
            __m512 v = _mm512_maskz_sub_ps(tail, tail_v512(z + full, zend, tail, zero), vm);
            __m512 e = _mm512_maskz_mov_ps(tail, dl_v512_exp_sm(v));
            s1 = _mm512_add_ps(s1, e);
            zs = _mm512_add_ps(zs, v);
            if (keep) /* over the next row's start, written after this */
                _mm512_storeu_ps(keep + full, e);
        }
        sums[i] = _mm512_add_ps(s0, s1);
        zsums[i] = zs;
    }
    xent_sums_v512(g, sums, zsums);
    unsigned live = xent_group_losses(j, g, loss, correct, first_max_v512);
    if (!j->dlogits)
        return;
    if (g->stride)
        xent_grad_v512(j, g, live);
    else
        xent_grad_rows_v512(j, g, live);
}

/* The same on 8 lanes (AVX2): the same exps and gradient operations. */
static inline __m256 load_or(const float *p, int w, __m256 missing)
{
    if (w == 8)
        return _mm256_loadu_ps(p);
    return _mm256_blendv_ps(missing, dl_v_load_tail(p, w), _mm256_castsi256_ps(dl_v_mask(w)));
}

/* The first w < 8 floats at p, the other lanes anything: a whole vector
 * when that stays inside the array (it ends at end). */
static inline __m256 tail_v256(const float *p, const float *end, int w)
{
    return end - p >= 8 ? _mm256_loadu_ps(p) : dl_v_load_tail(p, w);
}

static int first_max_v256(const xent_job *j, const xent_group *g, int r)
{
    const int n = j->classes, y = j->labels[r];
    const float *z = j->logits + (size_t)r * n;
    const float mx = g->mx[r - g->r0];
    const __m256 vm = _mm256_set1_ps(mx), ninf = _mm256_set1_ps(-INFINITY);
    for (int c = 0; z[y] == mx && c <= y; c += 8) {
        int w = n - c < 8 ? n - c : 8;
        int eq = _mm256_movemask_ps(_mm256_cmp_ps(load_or(z + c, w, ninf), vm, _CMP_EQ_OQ));
        if (eq)
            return c + __builtin_ctz((unsigned)eq);
    }
    return -1;
}

/* hred16_v512 on 8 lanes: lane i of the result is v[i]'s sum (max). */
static inline __m256 hred8_v256(const __m256 *v, int max)
{
#define RED(p, q) (max ? _mm256_max_ps(p, q) : _mm256_add_ps(p, q))
    __m256 a[4], c[2];
    for (int k = 0; k < 4; k++) /* rows 2k, 2k+1: 4 partial sums each */
        a[k] = RED(_mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x20),
                   _mm256_permute2f128_ps(v[2 * k], v[2 * k + 1], 0x31));
    for (int t = 0; t < 2; t++) /* half h: rows 4t + h, 4t + 2 + h, 2 each */
        c[t] = RED(_mm256_shuffle_ps(a[2 * t], a[2 * t + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                   _mm256_shuffle_ps(a[2 * t], a[2 * t + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* half h: rows h, 2 + h, 4 + h, 6 + h */
    __m256 s = RED(_mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                   _mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
#undef RED
    return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* xent_sums_v512 on 8 lanes. */
static void xent_sums_v256(xent_group *g, const __m256 *sums, const __m256 *zsums)
{
    for (int h = 0; h < XENT_BLOCK; h += 8) {
        float sum[8], zsum[8];
        __m256 s = hred8_v256(sums + h, 0);
        _mm256_storeu_ps(sum, s);
        _mm256_storeu_ps(zsum, hred8_v256(zsums + h, 0));
        __m256 none = _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_EQ_OQ);
        _mm256_storeu_ps(g->lse + h, dl_v_log_pos(_mm256_blendv_ps(s, _mm256_set1_ps(1.0f), none)));
        for (int i = h; i < h + 8 && i < g->r1 - g->r0; i++) {
            g->sum[i] = sum[i - h];
            g->zsum[i] = zsum[i - h];
        }
    }
}

/* Row r's lanes of the sums of exp(z - mx) and of z - mx, the exps kept
 * in ez when the group keeps them. */
static void xent_row_v256(const xent_job *j, xent_group *g, int r, __m256 *sum, __m256 *zsum)
{
    const int n = j->classes, i = r - g->r0;
    const float *z = j->logits + (size_t)r * n, *zend = j->logits + (size_t)j->rows * n;
    float *keep = g->stride ? g->ez + (size_t)i * g->stride : NULL;
    const __m256 vm = _mm256_set1_ps(g->mx[i]), zero = _mm256_setzero_ps();
    __m256 s0 = zero, s1 = zero, zs = zero;
    int c = 0;
    for (; c + 16 <= n; c += 16) {
        __m256 v0 = _mm256_sub_ps(_mm256_loadu_ps(z + c), vm);
        __m256 v1 = _mm256_sub_ps(_mm256_loadu_ps(z + c + 8), vm);
        __m256 e0 = dl_v_exp_sm(v0), e1 = dl_v_exp_sm(v1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
        zs = _mm256_add_ps(zs, _mm256_add_ps(v0, v1));
        if (keep) {
            _mm256_storeu_ps(keep + c, e0);
            _mm256_storeu_ps(keep + c + 8, e1);
        }
    }
    if (c + 8 <= n) {
        __m256 v = _mm256_sub_ps(_mm256_loadu_ps(z + c), vm), e = dl_v_exp_sm(v);
        s0 = _mm256_add_ps(s0, e);
        zs = _mm256_add_ps(zs, v);
        if (keep)
            _mm256_storeu_ps(keep + c, e);
        c += 8;
    }
    if (c < n) {
        /* lanes past the row: v = 0 and e = 0 */
        __m256 in = _mm256_castsi256_ps(dl_v_mask(n - c));
        __m256 v = _mm256_and_ps(_mm256_sub_ps(tail_v256(z + c, zend, n - c), vm), in);
        __m256 e = _mm256_and_ps(dl_v_exp_sm(v), in);
        s1 = _mm256_add_ps(s1, e);
        zs = _mm256_add_ps(zs, v);
        if (keep) /* over the next row's start, written after this */
            _mm256_storeu_ps(keep + c, e);
    }
    *sum = _mm256_add_ps(s0, s1);
    *zsum = zs;
}

/* xent_grad_v512 on 8 lanes: in a straddling vector, a row's a and
 * label place from the two halves of the 16 by two permutes and a blend. */
static void xent_grad_v256(const xent_job *j, const xent_group *g, unsigned live)
{
    const int n = j->classes, rows = g->r1 - g->r0, len = rows * n;
    float a[XENT_BLOCK];
    int32_t y[XENT_BLOCK];
    xent_grad_coefs(j, g, live, a, y);
    float *d = j->dlogits + (size_t)g->r0 * n;
    const float *ez = g->ez;
    const __m256 a0 = _mm256_loadu_ps(a), a1 = _mm256_loadu_ps(a + 8);
    const __m256i y0 = _mm256_loadu_si256((const __m256i *)y);
    const __m256i y1 = _mm256_loadu_si256((const __m256i *)(y + 8));
    const __m256 inv = _mm256_set1_ps(1.0f / (float)n), half = _mm256_set1_ps(0.5f / (float)n);
    const __m256 vb = _mm256_set1_ps(-j->grad_scale * (j->smoothing / (float)n));
    const __m256 vt = _mm256_set1_ps(j->grad_scale * (1.0f - j->smoothing));
    const __m256i seven = _mm256_set1_epi32(7), one = _mm256_set1_epi32(1);
    const __m256i vlive = _mm256_set1_epi32((int)live);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int p = 0;
    for (int i = 0; i < rows; i++) {
        const int end = (i + 1) * n;
        if (live >> i & 1) {
            const __m256 ai = _mm256_set1_ps(a[i]);
            const __m256i yi = _mm256_set1_epi32(y[i]);
            for (; p + 8 <= end; p += 8) {
                __m256 gr = _mm256_fmadd_ps(_mm256_loadu_ps(ez + p), ai, vb);
                /* gr - 0 is gr: the label's lane alone changes */
                __m256i at = _mm256_cmpeq_epi32(_mm256_add_epi32(_mm256_set1_epi32(p), lanes), yi);
                gr = _mm256_sub_ps(gr, _mm256_and_ps(_mm256_castsi256_ps(at), vt));
                _mm256_storeu_ps(d + p, _mm256_add_ps(_mm256_loadu_ps(d + p), gr));
            }
        } else {
            p += (end - p) / 8 * 8;
        }
        if (p >= end)
            continue;
        __m256i q = _mm256_add_epi32(_mm256_set1_epi32(p), lanes);
        __m256i row = _mm256_cvttps_epi32(_mm256_fmadd_ps(_mm256_cvtepi32_ps(q), inv, half));
        __m256i hi = _mm256_cmpgt_epi32(row, seven);
        __m256 ar = _mm256_blendv_ps(_mm256_permutevar8x32_ps(a0, row),
                                     _mm256_permutevar8x32_ps(a1, row), _mm256_castsi256_ps(hi));
        __m256i yr = _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(y0, row),
                                        _mm256_permutevar8x32_epi32(y1, row), hi);
        __m256 gr = _mm256_fmadd_ps(_mm256_loadu_ps(ez + p), ar, vb);
        gr = _mm256_sub_ps(gr, _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(q, yr)), vt));
        int w = len - p < 8 ? len - p : 8;
        __m256 o = w == 8 ? _mm256_loadu_ps(d + p) : dl_v_load_tail(d + p, w);
        __m256i on = _mm256_and_si256(_mm256_srlv_epi32(vlive, row), one);
        __m256 s = _mm256_blendv_ps(o, _mm256_add_ps(o, gr),
                                    _mm256_castsi256_ps(_mm256_cmpeq_epi32(on, one)));
        if (w == 8)
            _mm256_storeu_ps(d + p, s);
        else
            dl_v_store_tail(d + p, s, w);
        p += 8;
    }
}

/* xent_grad_rows_v512 on 8 lanes. */
static void xent_grad_rows_v256(const xent_job *j, const xent_group *g, unsigned live)
{
    const int n = j->classes;
    float a[XENT_BLOCK];
    int32_t ys[XENT_BLOCK];
    xent_grad_coefs(j, g, live, a, ys);
    const __m256 vb = _mm256_set1_ps(-j->grad_scale * (j->smoothing / (float)n));
    const __m256 vt = _mm256_set1_ps(j->grad_scale * (1.0f - j->smoothing));
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int r = g->r0; r < g->r1; r++) {
        int i = r - g->r0;
        if (!(live >> i & 1))
            continue;
        const float *z = j->logits + (size_t)r * n;
        float *d = j->dlogits + (size_t)r * n;
        const __m256 vm = _mm256_set1_ps(g->mx[i]), va = _mm256_set1_ps(a[i]);
        for (int c = 0; c < n; c += 8) {
            int w = n - c < 8 ? n - c : 8;
            __m256 zc = w == 8 ? _mm256_loadu_ps(z + c) : dl_v_load_tail(z + c, w);
            __m256 gr = _mm256_fmadd_ps(dl_v_exp_sm(_mm256_sub_ps(zc, vm)), va, vb);
            __m256i at = _mm256_cmpeq_epi32(lanes, _mm256_set1_epi32(ys[i] - i * n - c));
            gr = _mm256_sub_ps(gr, _mm256_and_ps(_mm256_castsi256_ps(at), vt));
            if (w == 8)
                _mm256_storeu_ps(d + c, _mm256_add_ps(_mm256_loadu_ps(d + c), gr));
            else
                dl_v_store_tail(d + c, _mm256_add_ps(dl_v_load_tail(d + c, w), gr), w);
        }
    }
}

static void xent_group_v256(const xent_job *j, xent_group *g, double *loss, int *correct)
{
    const int n = j->classes;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 maxes[XENT_BLOCK];
    for (int r = g->r0; r < g->r1; r++) {
        const float *z = j->logits + (size_t)r * n;
        __m256 m0 = ninf, m1 = ninf;
        int c = 0;
        for (; c + 16 <= n; c += 16) {
            m0 = _mm256_max_ps(_mm256_loadu_ps(z + c), m0);
            m1 = _mm256_max_ps(_mm256_loadu_ps(z + c + 8), m1);
        }
        for (; c < n; c += 8)
            m0 = _mm256_max_ps(load_or(z + c, n - c < 8 ? n - c : 8, ninf), m0);
        maxes[r - g->r0] = _mm256_max_ps(m0, m1);
    }
    for (int i = g->r1 - g->r0; i < XENT_BLOCK; i++)
        maxes[i] = ninf;
    _mm256_storeu_ps(g->mx, hred8_v256(maxes, 1));
    _mm256_storeu_ps(g->mx + 8, hred8_v256(maxes + 8, 1));
    __m256 sums[XENT_BLOCK], zsums[XENT_BLOCK];
    for (int r = g->r0; r < g->r0 + XENT_BLOCK; r++) {
        int i = r - g->r0;
        sums[i] = zsums[i] = _mm256_setzero_ps();
        if (r < g->r1 && xent_vector_row(j, g, r))
            xent_row_v256(j, g, r, &sums[i], &zsums[i]);
    }
    xent_sums_v256(g, sums, zsums);
    unsigned live = xent_group_losses(j, g, loss, correct, first_max_v256);
    if (!j->dlogits)
        return;
    if (g->stride)
        xent_grad_v256(j, g, live);
    else
        xent_grad_rows_v256(j, g, live);
}
#endif

/* Rows [r0, r1) of one block: *loss += their losses in row order,
 * *correct += their argmax hits. */
static void xent_rows(const xent_job *j, int r0, int r1, double *loss, int *correct)
{
#ifdef DL_CPU_VMATH
    xent_group g;
    for (g.r0 = r0; g.r0 < r1; g.r0 = g.r1) {
        xent_group_size(j, &g);
        if (g.r1 > r1)
            g.r1 = r1;
        if (dl_v512_usable())
            xent_group_v512(j, &g, loss, correct);
        else
            xent_group_v256(j, &g, loss, correct);
    }
    return;
#endif
    for (int r = r0; r < r1; r++)
        if (j->labels[r] != j->ignore)
            *loss += xent_row(j->logits + (size_t)r * j->classes, j->classes, j->labels[r],
                              j->smoothing, j->grad_scale,
                              j->dlogits ? j->dlogits + (size_t)r * j->classes : NULL, correct);
}

static void xent_blocks(void *arg, size_t begin, size_t end)
{
    const xent_job *j = arg;
    for (size_t b = begin; b < end; b++) {
        double loss = 0;
        int correct = 0, r0 = (int)b * XENT_BLOCK;
        xent_rows(j, r0, r0 + XENT_BLOCK < j->rows ? r0 + XENT_BLOCK : j->rows, &loss, &correct);
        j->loss[b] = loss;
        j->correct[b] = correct;
    }
}

static int xent_run(dl_backend *be, xent_job *j, float *stats)
{
    size_t blocks = ((size_t)j->rows + XENT_BLOCK - 1) / XENT_BLOCK;
    double *loss = dl_cpu_scratch(be, DL_CPU_SCRATCH_LOSS, blocks * (sizeof *loss + sizeof(int)));
    if (!loss)
        return dl_error(DL_ENOMEM, "softmax cross-entropy: out of memory for %zu blocks", blocks);
    j->loss = loss;
    j->correct = (int *)(loss + blocks);
    size_t grain = 1 + 32768 / ((size_t)XENT_BLOCK * (size_t)j->classes);
    dl_pool_for(dl_cpu(be)->pool, blocks, grain, xent_blocks, j);
    double total = 0;
    long correct = 0;
    for (size_t b = 0; b < blocks; b++) {
        total += loss[b];
        correct += j->correct[b];
    }
    stats[0] += (float)total;
    stats[1] += (float)correct;
    return DL_OK;
}

int dl_cpu_softmax_xent(dl_backend *be, int rows, int classes, const float *logits,
                        const int32_t *labels, float smoothing, float grad_scale, float *dlogits,
                        float *stats)
{
    for (int r = 0; r < rows; r++)
        if (labels[r] < 0 || labels[r] >= classes)
            return dl_error(DL_EINVAL, "label %d of row %d is outside [0, %d)", labels[r], r,
                            classes);
    xent_job j = {logits,    labels,     rows,    classes, INT32_MIN,
                  smoothing, grad_scale, dlogits, NULL,    NULL};
    return xent_run(be, &j, stats);
}

/* See backend.h (softmax_xent_tokens): labels are checked and counted
 * first, so the gradient can be scaled by the count of kept rows. */
int dl_cpu_softmax_xent_tokens(dl_backend *be, int rows, int classes, const float *logits,
                               const int32_t *labels, int ignore_index, float smoothing,
                               float grad_scale, float *dlogits, float *stats)
{
    int kept = 0;
    for (int r = 0; r < rows; r++) {
        int y = labels[r];
        if (y == ignore_index)
            continue;
        if (y < 0 || y >= classes)
            return dl_error(DL_EINVAL,
                            "target %d of token %d is outside [0, %d) and not the ignore_index %d",
                            y, r, classes, ignore_index);
        kept++;
    }
    float scale = grad_scale / (float)(kept > 0 ? kept : 1);
    xent_job j = {logits,    labels, rows,    classes, ignore_index,
                  smoothing, scale,  dlogits, NULL,    NULL};
    DL_TRY(xent_run(be, &j, stats));
    stats[2] += (float)kept;
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
    void *lp;     /* the low-precision copy of w to write (NULL: none) */
    dl_dtype lpt; /* its precision: DL_BF16 or DL_F16 */
    int lp_f32;   /* stored as rounded f32 (the backend emulates lpt), else as lpt */
} opt_job;

/* The updated w[b, e) into the low-precision copy, with cast's rounding:
 * run per block of OPT_BLOCK just after its update, while w is in L1 (a
 * store per vector inside the update loop measured slower). */
#define OPT_BLOCK 1024

static void opt_store_lp(const opt_job *j, size_t b, size_t e)
{
    if (j->lp_f32)
        dl_cpu_round_run((float *)j->lp + b, j->w + b, j->lpt, e - b);
    else
        f32_to_lowp((uint16_t *)j->lp + b, j->w + b, j->lpt, e - b);
}

/* The updates run with denormals flushed to zero (results) and read as
 * zero (operands). State that stops receiving gradients (a dead unit, a
 * parameter the loss no longer reaches) decays by the momentum each step:
 * after some 850 steps it reaches the denormals, where 0.9 times the
 * smallest of them rounds back to it, so it stays there for good, and
 * every multiply on it takes a microcode assist: the SGD and Adam updates
 * of such a tensor ran 23-28x slower on the Xeon. Flushed, it decays to 0;
 * only values under 1.2e-38 change. Returns the caller's control word. */
static unsigned opt_ftz_begin(void)
{
#ifdef HAVE_MXCSR
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040); /* FTZ (bit 15), DAZ (bit 6) */
    return csr;
#else
    return 0;
#endif
}

static void opt_ftz_end(unsigned csr)
{
#ifdef HAVE_MXCSR
    _mm_setcsr(csr);
#else
    (void)csr;
#endif
}

static void sgd_block(const opt_job *j, size_t b, size_t e)
{
    float *restrict w = j->w, *restrict g = j->g, *restrict m = j->m;
    const float lr = j->lr, mu = j->momentum, wd = j->wd, gs = j->grad_scale;
    /* kind: 0 plain, 1 momentum, 2 Nesterov */
    const int kind = mu == 0 ? 0 : j->nesterov ? 2 : 1;
    size_t i = b;
#ifdef __AVX2__
    const __m256 vlr = _mm256_set1_ps(lr), vmu = _mm256_set1_ps(mu), vwd = _mm256_set1_ps(wd),
                 vgs = _mm256_set1_ps(gs), zero = _mm256_setzero_ps();
    for (; i + 8 <= e; i += 8) {
        __m256 wi = _mm256_loadu_ps(w + i);
        __m256 d =
            _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), vgs), _mm256_mul_ps(vwd, wi));
        __m256 step = d;
        if (kind) {
            __m256 mi = _mm256_add_ps(_mm256_mul_ps(vmu, _mm256_loadu_ps(m + i)), d);
            _mm256_storeu_ps(m + i, mi);
            step = kind == 2 ? _mm256_add_ps(d, _mm256_mul_ps(vmu, mi)) : mi;
        }
        __m256 wn = _mm256_sub_ps(wi, _mm256_mul_ps(vlr, step));
        _mm256_storeu_ps(w + i, wn);
        _mm256_storeu_ps(g + i, zero);
    }
#endif
    for (; i < e; i++) {
        float d = g[i] * gs + wd * w[i];
        float step = d;
        if (kind) {
            float mi = mu * m[i] + d;
            m[i] = mi;
            step = kind == 2 ? d + mu * mi : mi;
        }
        w[i] -= lr * step;
        g[i] = 0;
    }
}

/* An update kernel over [b, e) blocks of OPT_BLOCK, each block's copy
 * written right after it, with denormals flushed. */
static void opt_range(const opt_job *j, size_t b, size_t e,
                      void (*block)(const opt_job *, size_t, size_t))
{
    unsigned csr = opt_ftz_begin();
    for (size_t s = b; s < e; s += OPT_BLOCK) {
        size_t t = e - s > OPT_BLOCK ? s + OPT_BLOCK : e;
        block(j, s, t);
        if (j->lp)
            opt_store_lp(j, s, t);
    }
    opt_ftz_end(csr);
}

static void sgd_range(void *p, size_t b, size_t e) { opt_range(p, b, e, sgd_block); }

int dl_cpu_sgd_update_lowp(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                           float momentum, float wd, int nesterov, float grad_scale, void *w_lp,
                           dl_dtype lp)
{
    if (w_lp && lp != DL_BF16 && lp != DL_F16)
        return dl_error(DL_EINVAL, "sgd update: low-precision copy of dtype %s", dl_dtype_name(lp));
    opt_job j = {.w = w,
                 .g = g,
                 .m = m,
                 .lr = lr,
                 .momentum = momentum,
                 .wd = wd,
                 .grad_scale = grad_scale,
                 .nesterov = nesterov,
                 .lp = w_lp,
                 .lpt = lp,
                 .lp_f32 = dl_backend_operand_type(be, lp) == DL_F32};
    dl_pool_for(dl_cpu(be)->pool, n, GRAIN * 2, sgd_range, &j);
    return DL_OK;
}

int dl_cpu_sgd_update(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                      float momentum, float wd, int nesterov, float grad_scale)
{
    return dl_cpu_sgd_update_lowp(be, n, w, g, m, lr, momentum, wd, nesterov, grad_scale, NULL,
                                  DL_F32);
}

static void adam_block(const opt_job *j, size_t b, size_t e)
{
    float *restrict w = j->w, *restrict g = j->g, *restrict m = j->m, *restrict v = j->v;
    const float lr = j->lr, b1 = j->beta1, b2 = j->beta2, eps = j->eps, wd = j->wd;
    const float gs = j->grad_scale, bc1 = j->bc1, bc2 = j->bc2;
    const float cw = j->decoupled ? 0.0f : wd;                 /* L2 into the gradient */
    const float shrink = j->decoupled ? 1.0f - lr * wd : 1.0f; /* AdamW decay */
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
    size_t i = b;
#ifdef __AVX2__
    const __m256 vgs = _mm256_set1_ps(gs), vcw = _mm256_set1_ps(cw), vb1 = _mm256_set1_ps(b1),
                 vb2 = _mm256_set1_ps(b2), vc1 = _mm256_set1_ps(c1), vc2 = _mm256_set1_ps(c2),
                 vbc1 = _mm256_set1_ps(bc1), vbc2 = _mm256_set1_ps(bc2), veps = _mm256_set1_ps(eps),
                 vlr = _mm256_set1_ps(lr), vshrink = _mm256_set1_ps(shrink),
                 zero = _mm256_setzero_ps();
    for (; i + 8 <= e; i += 8) {
        __m256 wi = _mm256_loadu_ps(w + i);
        __m256 gi =
            _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(g + i), vgs), _mm256_mul_ps(vcw, wi));
        __m256 mi =
            _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(vc1, gi));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)),
                                  _mm256_mul_ps(_mm256_mul_ps(vc2, gi), gi));
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        __m256 den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_mul_ps(vi, vbc2)), veps);
        __m256 upd = _mm256_div_ps(_mm256_mul_ps(vlr, _mm256_mul_ps(mi, vbc1)), den);
        __m256 wn = _mm256_sub_ps(_mm256_mul_ps(wi, vshrink), upd);
        _mm256_storeu_ps(w + i, wn);
        _mm256_storeu_ps(g + i, zero);
    }
#endif
    for (; i < e; i++) {
        float gi = g[i] * gs + cw * w[i];
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float den = sqrtf(vi * bc2) + eps; /* sqrt(v_hat) + eps */
        w[i] = w[i] * shrink - lr * (mi * bc1) / den;
        g[i] = 0;
    }
}

static void adam_range(void *p, size_t b, size_t e) { opt_range(p, b, e, adam_block); }

int dl_cpu_adam_update(dl_backend *be, size_t n, float *w, float *g, float *m, float *v, float lr,
                       float beta1, float beta2, float eps, float wd, int decoupled, long step,
                       float grad_scale)
{
    return dl_cpu_adam_update_lowp(be, n, w, g, m, v, lr, beta1, beta2, eps, wd, decoupled, step,
                                   grad_scale, NULL, DL_F32);
}

int dl_cpu_adam_update_lowp(dl_backend *be, size_t n, float *w, float *g, float *m, float *v,
                            float lr, float beta1, float beta2, float eps, float wd, int decoupled,
                            long step, float grad_scale, void *w_lp, dl_dtype lp)
{
    if (step < 1)
        return dl_error(DL_EINVAL, "adam step %ld must count from 1", step);
    if (w_lp && lp != DL_BF16 && lp != DL_F16)
        return dl_error(DL_EINVAL, "adam update: low-precision copy of dtype %s",
                        dl_dtype_name(lp));
    opt_job j = {.w = w,
                 .g = g,
                 .m = m,
                 .v = v,
                 .lr = lr,
                 .beta1 = beta1,
                 .beta2 = beta2,
                 .eps = eps,
                 .wd = wd,
                 .grad_scale = grad_scale,
                 .decoupled = decoupled,
                 .lp = w_lp,
                 .lpt = lp,
                 .lp_f32 = dl_backend_operand_type(be, lp) == DL_F32};
    j.bc1 = (float)(1.0 / (1.0 - pow(beta1, (double)step)));
    j.bc2 = (float)(1.0 / (1.0 - pow(beta2, (double)step)));
    dl_pool_for(dl_cpu(be)->pool, n, GRAIN * 2, adam_range, &j);
    return DL_OK;
}

/* Sum of squares in fixed blocks: each block sums in float lanes (four
 * 8-lane accumulators), folded into double at the block's end; the block
 * sums are added in order. So the result depends on n only, not on the
 * thread count, and the float part of the rounding error stays that of a
 * SUMSQ_BLOCK-element sum. An Inf or NaN anywhere carries through. */
#define SUMSQ_BLOCK 8192
#define SUMSQ_MAX_BLOCKS 4096

typedef struct {
    const float *x;
    size_t n, block;
    double *part;
} sumsq_job;

static double sumsq_block(const float *restrict x, size_t n)
{
    size_t i = 0;
    double total = 0;
#ifdef __AVX2__
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 32 <= n; i += 32) {
        __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        __m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(v0, v0));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(v1, v1));
        a2 = _mm256_add_ps(a2, _mm256_mul_ps(v2, v2));
        a3 = _mm256_add_ps(a3, _mm256_mul_ps(v3, v3));
    }
    float lane[8];
    _mm256_storeu_ps(lane, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (int k = 0; k < 8; k++)
        total += lane[k];
#endif
    float rest = 0;
    for (; i < n; i++)
        rest += x[i] * x[i];
    return total + rest;
}

static void sumsq_range(void *p, size_t b, size_t e)
{
    sumsq_job *j = p;
    for (size_t k = b; k < e; k++) {
        size_t at = k * j->block, len = j->n - at < j->block ? j->n - at : j->block;
        j->part[k] = sumsq_block(j->x + at, len);
    }
}

int dl_cpu_sumsq(dl_backend *be, const float *x, size_t n, double *host_result)
{
    double part[SUMSQ_MAX_BLOCKS];
    size_t block = SUMSQ_BLOCK;
    if (n > block * SUMSQ_MAX_BLOCKS)
        block = ((n + SUMSQ_MAX_BLOCKS - 1) / SUMSQ_MAX_BLOCKS + 31) & ~(size_t)31;
    size_t blocks = (n + block - 1) / block;
    sumsq_job j = {x, n, block, part};
    /* about GRAIN * 2 elements per task, as the optimizer updates */
    dl_pool_for(dl_cpu(be)->pool, blocks, (GRAIN * 2 + block - 1) / block, sumsq_range, &j);
    double total = 0;
    for (size_t k = 0; k < blocks; k++)
        total += part[k];
    *host_result = total;
    return DL_OK;
}
