/* cpu_vmath.h - 8- and 16-lane building blocks of the CPU kernels: exp, erf, log, tail masks, sums, bf16 rounding
 *
 * Only for builds that target AVX2 with FMA (the Makefile's x86-64-v3);
 * kernels keep a scalar loop for other builds. A kernel runs its tail (the
 * last n % 8 elements) through the same vector code with a masked load and
 * store, so an element's result never depends on where a thread's range
 * or a row starts: the same input gives the same bits at any thread count.
 */
#ifndef DL_CPU_VMATH_H
#define DL_CPU_VMATH_H

#if defined(__AVX2__) && defined(__FMA__)
#define DL_CPU_VMATH 1
#include <immintrin.h>

#include "engine/cpu/cpu.h"

/* The two 8-lane exps' shared steps: x = n ln2 + r (n returned, r in *x),
 * the polynomial's first five Horner steps in r, and y * 2^n. */
static inline __m256 dl_v_exp_reduce(__m256 *x)
{
    __m256 fx = _mm256_floor_ps(
        _mm256_fmadd_ps(*x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    *x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), *x);
    *x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), *x);
    return fx;
}

static inline __m256 dl_v_exp_poly(__m256 x)
{
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    return _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
}

static inline __m256 dl_v_exp_scale(__m256 y, __m256 fx)
{
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* exp of 8 floats: range reduction by ln 2 in two parts and a degree-6
 * polynomial (Cephes' expf coefficients), within 2 ulp of expf; arguments
 * below -87.3 (masked scores, -INFINITY) give 0, above 88.3 saturate. */
static inline __m256 dl_v_exp(__m256 x)
{
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 fx = dl_v_exp_reduce(&x);
    __m256 y = dl_v_exp_poly(x);
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    return _mm256_andnot_ps(tiny, dl_v_exp_scale(y, fx));
}

/* exp of 8 floats x <= 0: the 16-lane dl_v512_exp_le0's operations (its
 * bits): no upper clamp, the last two Horner steps as FMAs. */
static inline __m256 dl_v_exp_le0(__m256 x)
{
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    __m256 fx = dl_v_exp_reduce(&x);
    __m256 y = dl_v_exp_poly(x);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.0f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.0f));
    return _mm256_andnot_ps(tiny, dl_v_exp_scale(y, fx));
}

/* 2^f for f in [-1/2, 1/2]: 1 + f (c1 + f (c2 + ... c5 f)), coefficients
 * fitted for this file (iteratively reweighted least squares on
 * Chebyshev nodes; the fit's relative error 9.2e-8, 1.7e-7 with the float
 * Horner steps). */
#define DL_EXP2_C1 6.9314697760e-01f
#define DL_EXP2_C2 2.4022242081e-01f
#define DL_EXP2_C3 5.5507337466e-02f
#define DL_EXP2_C4 9.6715129097e-03f
#define DL_EXP2_C5 1.3264726879e-03f

/* exp of 8 floats x <= 0 for softmax (z - max), shorter than
 * dl_v_exp_le0: n = round(x log2 e), 2^(x log2 e - n) by the polynomial
 * above, times 2^n. The rounding of x log2 e adds a relative error of
 * |x| 7.3e-8, so the result is within (1.7e-7 + |x| 7.3e-8) e^x of e^x:
 * as e^x |x| <= 1/e, a probability e^x / sum comes within about 4.5e-7
 * of itself, absolute, what a softmax's loss and gradient need (not an
 * exp for other uses). Below -87.3 (and -INFINITY) 0, NaN gives
 * exp(-87.3), as dl_v_exp_le0. dl_v512_exp_sm gives the same bits. */
static inline __m256 dl_v_exp_sm(__m256 x)
{
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
    __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(t, n);
    __m256 y = _mm256_set1_ps(DL_EXP2_C5);
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(DL_EXP2_C4));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(DL_EXP2_C3));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(DL_EXP2_C2));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(DL_EXP2_C1));
    y = _mm256_fmadd_ps(y, f, _mm256_set1_ps(1.0f));
    /* n >= -126: 2^n is a normal float, and the product rounds once (to
     * a subnormal below 2^-126), as scalef's does */
    return _mm256_andnot_ps(tiny, dl_v_exp_scale(y, n));
}

/* log of 8 floats x, positive, finite and normal (a softmax's sum of
 * exps, >= 1): x = m 2^k with m in [sqrt(1/2), sqrt(2)], log m =
 * 2 atanh(s) with s = (m - 1) / (m + 1) by its series to s^9 (|s| <=
 * 0.1716: the next term 2e-9), plus k ln 2; within 3 ulp of log x for x
 * in [1, 70000] (checked over every float there; the division's and the
 * steps' rounding). dl_v512_log_pos gives the same bits. */
static inline __m256 dl_v_log_pos(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256i xi = _mm256_castps_si256(x);
    __m256i k = _mm256_sub_epi32(_mm256_srli_epi32(xi, 23), _mm256_set1_epi32(127));
    __m256 m = _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_and_si256(xi, _mm256_set1_epi32(0x7fffff)), _mm256_set1_epi32(0x3f800000)));
    __m256 big = _mm256_cmp_ps(m, _mm256_set1_ps(1.41421356f), _CMP_GT_OQ);
    m = _mm256_blendv_ps(m, _mm256_mul_ps(m, _mm256_set1_ps(0.5f)), big);
    k = _mm256_sub_epi32(k, _mm256_castps_si256(big)); /* big is -1 */
    __m256 s = _mm256_div_ps(_mm256_sub_ps(m, one), _mm256_add_ps(m, one));
    __m256 s2 = _mm256_mul_ps(s, s);
    __m256 p = _mm256_set1_ps(1.0f / 9);
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 7));
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 5));
    p = _mm256_fmadd_ps(p, s2, _mm256_set1_ps(1.0f / 3));
    p = _mm256_fmadd_ps(p, s2, one);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(k), _mm256_set1_ps(0.693147180559945f),
                           _mm256_mul_ps(_mm256_add_ps(s, s), p));
}

/* exp of 16 floats x <= 0 (softmax's z - max, a Gaussian's -x^2/2):
 * dl_v512_exp's reduction, its polynomial's coefficients by Horner's
 * rule in FMAs (two operations fewer; within 1.3 ulp of expf), 2^n by
 * scalef; below -87.3 (and -INFINITY) 0, NaN gives exp(-87.3) as in
 * dl_v512_exp. Not for x > 0. Defined below with the 16-lane kernels. */

/* erf of 8 floats: x clamped to [-4, 4], then x P(x^2) / Q(x^2) with odd
 * degree-13 and even degree-8 polynomials (the rational form used by
 * Eigen's and XLA's float erf); within 4.3e-7 of erf everywhere (checked
 * by tests/test_cpu_kernels.c against libm). */
static inline __m256 dl_v_erf(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-4.0f)), _mm256_set1_ps(4.0f));
    __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.77068142495902e-08f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
    p = _mm256_mul_ps(p, x);
    __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-2.13374055278905e-04f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
    return _mm256_div_ps(p, q);
}

/* A mask of the first n lanes (0 <= n <= 8) for maskload / maskstore. */
static inline __m256i dl_v_mask(int n)
{
    __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* The first n lanes of p (0 <= n < 8; the others read as 0). */
static inline __m256 dl_v_load_tail(const float *p, int n)
{
    return _mm256_maskload_ps(p, dl_v_mask(n));
}
static inline void dl_v_store_tail(float *p, __m256 v, int n)
{
    _mm256_maskstore_ps(p, dl_v_mask(n), v);
}

/* The sum of the 8 lanes in double, lanes in order. */
static inline double dl_v_hsum(__m256 v)
{
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    __m256d s = _mm256_add_pd(lo, hi);
    __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(t) + _mm_cvtsd_f64(_mm_unpackhi_pd(t, t));
}

/* --- the same on 16 lanes, for CPUs with AVX-512F (callers check
 * dl_v512_usable() and call these from functions compiled with
 * DL_V512_TARGET). Each lane runs the very operations of the 8-lane
 * versions, so both give the same bits. */
#define DL_V512_TARGET __attribute__((target("avx512f")))

static inline int dl_v512_usable(void) { return dl_cpu_avx512(); }

/* exp's range reduction of x (clamped by the caller): returns the power
 * of two fx and leaves in *x the remainder r = x - fx ln 2; then Cephes'
 * polynomial in r by Horner's rule down to its 1/2 coefficient (the
 * callers finish it their own way). */
DL_V512_TARGET static inline __m512 dl_v512_exp_reduce(__m512 *x)
{
    __m512 fx = _mm512_roundscale_ps(
        _mm512_fmadd_ps(*x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    *x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), *x);
    *x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), *x);
    return fx;
}

DL_V512_TARGET static inline __m512 dl_v512_exp_poly(__m512 x)
{
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    return _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
}

DL_V512_TARGET static inline __m512 dl_v512_exp(__m512 x)
{
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    __m512 fx = dl_v512_exp_reduce(&x);
    __m512 y = dl_v512_exp_poly(x);
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    /* y * 2^fx in one step: fx is an integer in [-126, 127], so this is
     * the 8-lane code's product with the float 2^fx, bit for bit */
    return _mm512_maskz_scalef_ps((__mmask16)~tiny, y, fx);
}

/* exp for x <= 0 (softmax's z - max): no upper clamp, and the last two
 * Horner steps as FMAs (within 1.3 ulp of exp). */
DL_V512_TARGET static inline __m512 dl_v512_exp_le0(__m512 x)
{
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 fx = dl_v512_exp_reduce(&x);
    __m512 y = dl_v512_exp_poly(x);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.0f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps((__mmask16)~tiny, y, fx);
}

/* dl_v_exp_sm on 16 lanes (its operations, its bits). */
DL_V512_TARGET static inline __m512 dl_v512_exp_sm(__m512 x)
{
    __mmask16 tiny = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 y = _mm512_set1_ps(DL_EXP2_C5);
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(DL_EXP2_C4));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(DL_EXP2_C3));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(DL_EXP2_C2));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(DL_EXP2_C1));
    y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps((__mmask16)~tiny, y, n);
}

/* dl_v_log_pos on 16 lanes (its operations, its bits). */
DL_V512_TARGET static inline __m512 dl_v512_log_pos(__m512 x)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512i xi = _mm512_castps_si512(x);
    __m512i k = _mm512_sub_epi32(_mm512_srli_epi32(xi, 23), _mm512_set1_epi32(127));
    __m512 m = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_and_si512(xi, _mm512_set1_epi32(0x7fffff)), _mm512_set1_epi32(0x3f800000)));
    __mmask16 big = _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.41421356f), _CMP_GT_OQ);
    m = _mm512_mask_mul_ps(m, big, m, _mm512_set1_ps(0.5f));
    k = _mm512_mask_add_epi32(k, big, k, _mm512_set1_epi32(1));
    __m512 s = _mm512_div_ps(_mm512_sub_ps(m, one), _mm512_add_ps(m, one));
    __m512 s2 = _mm512_mul_ps(s, s);
    __m512 p = _mm512_set1_ps(1.0f / 9);
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 7));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 5));
    p = _mm512_fmadd_ps(p, s2, _mm512_set1_ps(1.0f / 3));
    p = _mm512_fmadd_ps(p, s2, one);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(k), _mm512_set1_ps(0.693147180559945f),
                           _mm512_mul_ps(_mm512_add_ps(s, s), p));
}

DL_V512_TARGET static inline __m512 dl_v512_erf(__m512 x)
{
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-4.0f)), _mm512_set1_ps(4.0f));
    __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(-2.72614225801306e-10f);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.77068142495902e-08f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.10102402082508e-06f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-5.69250639462346e-05f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-7.34990630326855e-04f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-2.95459980854025e-03f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-1.60960333262415e-02f));
    p = _mm512_mul_ps(p, x);
    __m512 q = _mm512_set1_ps(-1.45660718464996e-05f);
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-2.13374055278905e-04f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.68282697438203e-03f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-7.37332916720468e-03f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.42647390514189e-02f));
    return _mm512_div_ps(p, q);
}

/* The lanes of a and of b summed: the halves of each added in float,
 * then the 8 + 8 lanes in double. */
DL_V512_TARGET static inline void dl_v512_hsum2(__m512 a, __m512 b, double *sa, double *sb)
{
    /* 4-lane blocks a0+a2 a1+a3 b0+b2 b1+b3 */
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    __m512d da = _mm512_cvtps_pd(_mm512_castps512_ps256(s));
    __m512d db = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    *sa = _mm512_reduce_add_pd(da);
    *sb = _mm512_reduce_add_pd(db);
}

/* The first n lanes (0 <= n <= 16). */
static inline __mmask16 dl_v512_mask(int n) { return (__mmask16)((1u << n) - 1u); }

#ifdef __F16C__
/* --- fp16 conversions on 8 lanes (F16C) with half.h's results: checked
 * against dl_f32_to_f16 / dl_f16_to_f32 on every float and half that is
 * not a NaN. A group holding a NaN goes through the scalar functions,
 * whose NaNs differ from the instructions' in their payload bits. */

/* d[0..8) = the f16 bits of v. */
static inline void dl_v_f16_store8(uint16_t *d, __m256 v)
{
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
        float t[8];
        _mm256_storeu_ps(t, v);
        for (int k = 0; k < 8; k++)
            d[k] = dl_f32_to_f16(t[k]);
        return;
    }
    _mm_storeu_si128((__m128i *)d,
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* The 8 halves at s as floats. */
static inline __m256 dl_v_f16_load8(const uint16_t *s)
{
    __m128i h = _mm_loadu_si128((const __m128i *)s);
    __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7c00)))) {
        float t[8];
        for (int k = 0; k < 8; k++)
            t[k] = dl_f16_to_f32(s[k]);
        return _mm256_loadu_ps(t);
    }
    return _mm256_cvtph_ps(h);
}
#define DL_CPU_VF16 1
#endif
#endif

/* --- bf16 rounding on 16 lanes, for any x86 build: the kernels that call
 * it are compiled with target("avx512f") themselves and chosen at run
 * time (the direct stem and 1x1 convolutions). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define DL_CPU_X86 1 /* the 16-lane helpers below exist */
#include <immintrin.h>

/* v rounded to bf16 and back: dl_f32_to_bf16's bits (round to nearest
 * even; a NaN stays NaN with its quiet bit set). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 dl_v512_round_bf16(__m512 v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x400000));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}

/* Stride 2 on 8 lanes (the depthwise kernels' and the pooling windows'
 * phase rows), for any x86 build: callers target AVX2 themselves. The 8
 * even and the 8 odd floats of the 16 in a, b. */
__attribute__((target("avx2"), always_inline)) static inline void
dl_v_split2(__m256 a, __m256 b, __m256 *ev, __m256 *od)
{
    /* [a0 a2 b0 b2 | a4 a6 b4 b6], then 64-bit lanes 0 2 1 3 */
    __m256 e = _mm256_shuffle_ps(a, b, 0x88), o = _mm256_shuffle_ps(a, b, 0xdd);
    *ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), 0xd8));
    *od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xd8));
}

/* dl_v_split2's inverse: lo = e0 o0 .. e3 o3, hi = e4 o4 .. e7 o7. */
__attribute__((target("avx2"), always_inline)) static inline void dl_v_zip2(__m256 e, __m256 o,
                                                                            __m256 *lo, __m256 *hi)
{
    __m256 l = _mm256_unpacklo_ps(e, o), h = _mm256_unpackhi_ps(e, o);
    *lo = _mm256_permute2f128_ps(l, h, 0x20);
    *hi = _mm256_permute2f128_ps(l, h, 0x31);
}
#endif

#include <stddef.h>

/* x[i] *= f for i < n: 8 lanes at a time where the build has AVX2, the
 * tail (and every element elsewhere) one at a time; the same product
 * either way. */
static inline void dl_v_scale(float *x, size_t n, float f)
{
    size_t i = 0;
#ifdef DL_CPU_VMATH
    __m256 f8 = _mm256_set1_ps(f);
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), f8));
#endif
    for (; i < n; i++)
        x[i] *= f;
}

#endif
