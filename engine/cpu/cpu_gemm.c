/* cpu_gemm.c - matrix products on the CPU: f32 via OpenBLAS, bf16 via an AVX-512 BF16 kernel, f16 via f32
 *
 * Paths, chosen per call:
 *   f32          single-threaded sgemm calls, oneDNN's where the CPU has
 *                AVX-512 (sgemm_one), else OpenBLAS's; big products are
 *                split into one block of C per thread over the pool.
 *   bf16         when the CPU has AVX-512 BF16: our own packed kernel built
 *                on vdpbf16ps (two bf16 products per f32 lane per
 *                instruction, so about twice the sgemm rate), threaded over
 *                output tiles with the backend's pool. bench/bench_gemm.c
 *                measured it against oneDNN's bf16 matmul: oneDNN is a little
 *                faster on one thread but its OpenMP team fights OpenBLAS's
 *                threads on two cores, and it adds a primitive cache, so the
 *                own kernel stays. Elsewhere: widen to f32 and sgemm.
 *   f16          no fast f16 arithmetic on these CPUs (no AVX-512 FP16):
 *                operands are widened to f32 in scratch and sgemm'd. Results
 *                equal an f32 product of the f16-rounded inputs.
 *
 * Scratch: slots 0 and 1 of dl_cpu_scratch (packed or widened A and B),
 * slot 2 (partial products of a k-split f32 product).
 */
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu.h"
#include "engine/base/error.h"

enum { SCRATCH_A = 0, SCRATCH_B = 1, SCRATCH_KSPLIT = 2 };

/* ---------------------------------------------------------------------- */
/* portable helpers                                                        */

/* C[m,n] = beta * C, with beta == 0 writing zeros (garbage in C ignored). */
static void scale_c(int m, int n, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++) {
        float *row = c + (size_t)i * ldc;
        if (beta == 0.0f)
            memset(row, 0, (size_t)n * sizeof(float));
        else if (beta != 1.0f)
            for (int j = 0; j < n; j++)
                row[j] *= beta;
    }
}

/* Widening a stored [rows, cols] bf16/f16 matrix with leading dimension
 * ld into a dense f32 [rows, cols], rows split over the pool. */
typedef struct widen_job {
    float *dst;
    const uint16_t *src;
    int cols, ld;
    dl_dtype t;
} widen_job;

static void widen_rows(void *p, size_t begin, size_t end)
{
    const widen_job *j = p;
    for (size_t i = begin; i < end; i++)
        dl_cpu_to_f32(j->dst + i * j->cols, j->src + i * j->ld, j->t, (size_t)j->cols);
}

static void widen(dl_backend *be, float *dst, const uint16_t *src, int rows, int cols, int ld,
                  dl_dtype t)
{
    widen_job j = {dst, src, cols, ld, t};
    size_t grain = (size_t)(cols < 16384 ? 16384 / cols : 1); /* 64 KB of output a task */
    dl_pool_for(dl_cpu(be)->pool, (size_t)rows, grain, widen_rows, &j);
}

static void sgemm_split(dl_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc);

/* Low-precision operands by way of f32: widen both into scratch, sgemm. */
static int gemm_widened(dl_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                        const uint16_t *a, int lda, const uint16_t *b, int ldb, dl_dtype ab,
                        float beta, float *c, int ldc)
{
    int ar = trans_a ? k : m, ac = trans_a ? m : k; /* A as stored */
    int br = trans_b ? n : k, bc = trans_b ? k : n;
    float *fa = dl_cpu_scratch(be, SCRATCH_A, (size_t)ar * ac * sizeof(float));
    float *fb = dl_cpu_scratch(be, SCRATCH_B, (size_t)br * bc * sizeof(float));
    if (!fa || !fb)
        return dl_error(DL_ENOMEM, "gemm: no scratch for %s operands (%dx%dx%d)", dl_dtype_name(ab),
                        m, n, k);
    widen(be, fa, a, ar, ac, lda, ab);
    widen(be, fb, b, br, bc, ldb, ab);
    sgemm_split(be, trans_a, trans_b, m, n, k, alpha, fa, ac, fb, bc, beta, c, ldc);
    return DL_OK;
}

/* ---------------------------------------------------------------------- */
/* f32: OpenBLAS, split over the pool                                      */
/*
 * OpenBLAS runs single-threaded (cpu_backend.c): its own workers spin and
 * yield after each call and fought the pool for the cores. A product big
 * enough to share is cut into one block of C per thread along its larger
 * dimension (each thread then packs all of the smaller operand and its
 * share of the larger one), at multiples of 16 so that no two threads
 * write one cache line of C; each block is an independent sgemm call.
 * Every element of C is summed over the same k by one call, so the result
 * depends on the thread count only through OpenBLAS's choice of kernel for
 * the block size, never on timing.
 *
 * A product whose k dwarfs m and n (a convolution's filter gradient: m =
 * output channels, n = c*r*s, k = pixels of a chunk of images) is split
 * along k instead: there packing costs about as much as the arithmetic,
 * and a split of m or n would pack the whole of the other operand in every
 * thread. Part 0 accumulates into C with the caller's beta, the others into
 * scratch with beta 0; C then adds the partial products in part order, so
 * the result is again fixed for a given thread count.
 */

/* One single-threaded f32 product: oneDNN's sgemm where the build has
 * oneDNN, else OpenBLAS. With AVX-512, OpenBLAS 0.3.21 ran its AVX2 kernel
 * on a Zen 5 at 105-114 GFLOP/s a core where oneDNN's gave 190-225 on the
 * MLP's and char-GPT's shapes; with AVX2 only (an AVX-512 Xeon played as
 * AVX2: oneDNN's jit:avx2 against OpenBLAS's Haswell kernel) oneDNN's was
 * 1-25% faster on the same shapes, so it is the choice on both.
 * DLBENCH_SGEMM=openblas or dnnl chooses (measurements); read once. */
static int sgemm_dnnl(void)
{
    static int use = -1;
    if (use < 0) {
#ifdef DL_HAVE_DNNL
        const char *e = getenv("DLBENCH_SGEMM");
        use = !(e && !strcmp(e, "openblas"));
#else
        use = 0;
#endif
    }
    return use;
}

static void sgemm_one(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    if (sgemm_dnnl() &&
        dl_cpu_dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0)
        return;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char *dl_cpu_sgemm_name(void) { return sgemm_dnnl() ? "oneDNN" : "OpenBLAS"; }

void dl_cpu_sgemm_here(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    sgemm_one(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Products below this many FLOPs run whole on the calling thread: a job on
 * the pool costs a few microseconds, and a split of a product under ~8
 * MFLOP (the tiny MLP's) measured slower than running it whole. */
#define SPLIT_MIN_FLOPS 8e6

typedef struct sgemm_job {
    int trans_a, trans_b, m, n, k, lda, ldb, ldc, split_n, parts, step;
    float alpha, beta;
    const float *a, *b;
    float *c;
    float *partial; /* k-split: parts - 1 blocks of [m, n] */
} sgemm_job;

static void sgemm_kparts(void *arg, size_t begin, size_t end)
{
    const sgemm_job *j = arg;
    for (size_t part = begin; part < end; part++) {
        int lo = (int)part * j->step, hi = lo + j->step < j->k ? lo + j->step : j->k;
        const float *a = j->a + (j->trans_a ? (size_t)lo * j->lda : (size_t)lo);
        const float *b = j->b + (j->trans_b ? (size_t)lo : (size_t)lo * j->ldb);
        float *c = j->c, beta = j->beta;
        int ldc = j->ldc;
        if (part > 0) {
            c = j->partial + (part - 1) * (size_t)j->m * j->n;
            beta = 0.0f;
            ldc = j->n;
        }
        sgemm_one(j->trans_a, j->trans_b, j->m, j->n, hi - lo, j->alpha, a, j->lda, b, j->ldb, beta,
                  c, ldc);
    }
}

static void sgemm_blocks(void *arg, size_t begin, size_t end)
{
    const sgemm_job *j = arg;
    int dim = j->split_n ? j->n : j->m;
    int lo = (int)begin * j->step, hi = (int)end * j->step;
    if (hi > dim)
        hi = dim;
    if (lo >= hi)
        return;
    const float *a = j->a, *b = j->b;
    float *c = j->c;
    int m = j->m, n = j->n;
    if (j->split_n) { /* columns [lo, hi) of op(B) and C */
        b += j->trans_b ? (size_t)lo * j->ldb : (size_t)lo;
        c += lo;
        n = hi - lo;
    } else { /* rows [lo, hi) of op(A) and C */
        a += j->trans_a ? (size_t)lo : (size_t)lo * j->lda;
        c += (size_t)lo * j->ldc;
        m = hi - lo;
    }
    sgemm_one(j->trans_a, j->trans_b, m, n, j->k, j->alpha, a, j->lda, b, j->ldb, j->beta, c,
              j->ldc);
}

static void sgemm_split(dl_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                        const float *a, int lda, const float *b, int ldb, float beta, float *c,
                        int ldc)
{
    dl_pool *pool = dl_cpu(be)->pool;
    int threads = dl_pool_threads(pool);
    sgemm_job j = {trans_a, trans_b, m,     n,    k, lda, ldb, ldc, n >= m,
                   1,       0,       alpha, beta, a, b,   c,   NULL};
    int dim = j.split_n ? n : m;
    if (threads > 1 && 2.0 * m * n * k >= SPLIT_MIN_FLOPS && k >= 8 * (m > n ? m : n)) {
        j.step = ((k + threads - 1) / threads + 15) & ~15;
        j.parts = (k + j.step - 1) / j.step;
        j.partial =
            dl_cpu_scratch(be, SCRATCH_KSPLIT, (size_t)(j.parts - 1) * m * n * sizeof(float));
        if (j.partial && j.parts > 1) {
            dl_pool_for(pool, (size_t)j.parts, 1, sgemm_kparts, &j);
            for (int i = 0; i < m; i++) {
                float *restrict row = c + (size_t)i * ldc;
                for (int part = 1; part < j.parts; part++) {
                    const float *restrict q = j.partial + ((size_t)(part - 1) * m + i) * n;
                    for (int x = 0; x < n; x++)
                        row[x] += q[x];
                }
            }
            return;
        }
        j.parts = 1; /* no scratch: split m or n as below */
    }
    if (threads > 1 && 2.0 * m * n * k >= SPLIT_MIN_FLOPS && dim >= 32) {
        /* one block per thread, rounded up to 16 */
        j.step = ((dim + threads - 1) / threads + 15) & ~15;
        j.parts = (dim + j.step - 1) / j.step;
    }
    if (j.parts < 2) {
        sgemm_one(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    dl_pool_for(pool, (size_t)j.parts, 1, sgemm_blocks, &j);
}

/* ---------------------------------------------------------------------- */
/* AVX-512 BF16 kernel                                                     */
/*
 * vdpbf16ps multiplies bf16 pairs: lane j of the f32 accumulator gains
 * a[2j]*b[2j] + a[2j+1]*b[2j+1]. So k is walked two at a time ("pairs"),
 * and both operands are packed pair-interleaved:
 *   A panel (MR rows):  [kp][MR] uint32, each = (A[r,2p], A[r,2p+1])
 *   B panel (NR cols):  [kp][NR] uint32, each = (B[2p,j], B[2p+1,j])
 * A pair is broadcast to all 16 lanes and multiplied with a row of the B
 * panel, giving an MR x NR tile in 2*MR zmm accumulators. An odd k is
 * padded with a zero pair half; rows and columns past the edge with zeros.
 * k is blocked by KC pairs so a B panel (KC*NR*4 = 32 KiB) stays near L1.
 */
#define MR 8
#define NR 32
#define KC 256

#define BF16_TARGET __attribute__((target("avx512bf16,avx512f,avx512vl,avx512bw,fma")))

/* Element (r, kk) of op(X) from a stored bf16 matrix. */
static inline uint16_t elem(const uint16_t *x, int ld, int trans, int r, int kk)
{
    return trans ? x[(size_t)kk * ld + r] : x[(size_t)r * ld + kk];
}

/* Mask of the first min(left, 16) lanes (left > 0). */
static inline __mmask16 clip16(int left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* Packs rows [r0, r0+rows) x pairs [p0, p0+kp) of op(X) (op(X)[r, kk] as
 * elem() reads it) into dst [kp][width] uint32 pairs, zero-filling rows >=
 * rows and the k at or past kend. */
BF16_TARGET static void pack_pairs(uint32_t *dst, const uint16_t *x, int ld, int trans, int r0,
                                   int rows, int width, int p0, int kp, int kend)
{
    /* pairs that lie wholly below kend take a fast path */
    int full = kend / 2 - p0;
    full = full < 0 ? 0 : full > kp ? kp : full;
    if (!trans) {
        /* a pair is adjacent in a stored row: a transpose of 32-bit words,
         * 8 rows x 8 pairs at a time, then the rest word by word */
        int r8 = 0;
        for (; r8 + 8 <= rows && r8 + 8 <= width; r8 += 8) {
            const uint16_t *s = x + (size_t)(r0 + r8) * ld + 2 * p0;
            uint32_t *d = dst + r8;
            int p = 0;
            for (; p + 8 <= full; p += 8) {
                __m256 v[8], t[8], u[8];
                for (int i = 0; i < 8; i++)
                    v[i] = _mm256_loadu_ps((const float *)(s + (size_t)i * ld + 2 * p));
                for (int i = 0; i < 8; i += 2) {
                    t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
                    t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
                }
                for (int i = 0; i < 8; i += 4) {
                    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
                    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
                    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
                    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
                }
                for (int q = 0; q < 4; q++) {
                    _mm256_storeu_ps((float *)(d + (size_t)(p + q) * width),
                                     _mm256_permute2f128_ps(u[q], u[q + 4], 0x20));
                    _mm256_storeu_ps((float *)(d + (size_t)(p + q + 4) * width),
                                     _mm256_permute2f128_ps(u[q], u[q + 4], 0x31));
                }
            }
            for (; p < full; p++)
                for (int i = 0; i < 8; i++) {
                    uint32_t w;
                    memcpy(&w, s + (size_t)i * ld + 2 * p, 4);
                    d[(size_t)p * width + i] = w;
                }
        }
        for (int r = r8; r < width; r++) {
            uint32_t *d = dst + r;
            if (r >= rows) {
                for (int p = 0; p < full; p++)
                    d[(size_t)p * width] = 0;
                continue;
            }
            const uint16_t *s = x + (size_t)(r0 + r) * ld + 2 * p0;
            for (int p = 0; p < full; p++) {
                uint32_t v;
                memcpy(&v, s + 2 * p, 4);
                d[(size_t)p * width] = v;
            }
        }
    } else {
        /* stored rows k0 and k0+1 hold contiguous r: interleave 16-bit */
        const __m512i idx_lo =
            _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7,
                             38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
        const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
        for (int p = 0; p < full; p++) {
            uint32_t *d = dst + (size_t)p * width;
            const uint16_t *s0 = x + (size_t)2 * (p0 + p) * ld + r0;
            const uint16_t *s1 = s0 + ld;
            int r = 0;
            for (; r < rows && r < width; r += 32) {
                int left = rows - r;
                __mmask32 mk = left >= 32 ? 0xffffffffu : (((__mmask32)1 << left) - 1);
                __m512i v0 = _mm512_maskz_loadu_epi16(mk, s0 + r);
                __m512i v1 = _mm512_maskz_loadu_epi16(mk, s1 + r);
                /* 16 pairs per zmm, clipped to the panel width */
                _mm512_mask_storeu_epi32(d + r, clip16(width - r),
                                         _mm512_permutex2var_epi16(v0, idx_lo, v1));
                if (r + 16 < width)
                    _mm512_mask_storeu_epi32(d + r + 16, clip16(width - r - 16),
                                             _mm512_permutex2var_epi16(v0, idx_hi, v1));
            }
            for (; r < width; r++)
                d[r] = 0;
        }
    }
    /* the odd last k (its pair half is zero) and pairs past kend */
    for (int p = full; p < kp; p++) {
        int k0 = 2 * (p0 + p);
        uint32_t *d = dst + (size_t)p * width;
        for (int r = 0; r < width; r++) {
            uint32_t lo = 0;
            if (r < rows && k0 < kend)
                lo = elem(x, ld, trans, r0 + r, k0);
            d[r] = lo;
        }
    }
}

/* Stores an accumulated tile row: row[0..cols) = alpha * acc + beta * row
 * (beta == 0: row is not read). */
BF16_TARGET static inline void store_row(float *row, __m512 a0, __m512 a1, int cols, float alpha,
                                         float beta)
{
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    __m512 acc[2] = {a0, a1};
    for (int h = 0; h < 2 && cols > 16 * h; h++) {
        __mmask16 mk = clip16(cols - 16 * h);
        __m512 v = _mm512_mul_ps(acc[h], va);
        if (beta != 0.0f)
            v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk, row + 16 * h), v);
        _mm512_mask_storeu_ps(row + 16 * h, mk, v);
    }
}

/* The upper eight floats of x (AVX-512F only: no DQ extract). */
BF16_TARGET static inline __m256 upper8(__m512 x)
{
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
}

/* Stores the tile transposed: tile row i, lane l goes to c[l * ldc + i]
 * (C^T was computed), for i < rows and l < cols, scaled as store_row.
 * Each 8 x 16 half is transposed in registers: pairs, then quads within
 * 128-bit lanes, then the lanes across registers, leaving output row l's
 * eight floats in one half of a zmm. */
BF16_TARGET static void store_tile_t(float *c, int ldc, __m512 acc[MR][2], int rows, int cols,
                                     float alpha, float beta)
{
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    __mmask8 mk = (__mmask8)((1u << rows) - 1);
    for (int h = 0; h < 2 && cols > 16 * h; h++) {
        __m512 t[8], u[8];
        for (int i = 0; i < 8; i += 2) {
            t[i] = _mm512_unpacklo_ps(acc[i][h], acc[i + 1][h]);
            t[i + 1] = _mm512_unpackhi_ps(acc[i][h], acc[i + 1][h]);
        }
        for (int i = 0; i < 8; i += 4) {
            u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
            u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
            u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
            u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
        }
        /* u[q] lane L holds column 4L+q's rows 0-3, u[q+4] its rows 4-7 */
        for (int q = 0; q < 4; q++) {
            __m512 lo = _mm512_shuffle_f32x4(u[q], u[q + 4], _MM_SHUFFLE(1, 0, 1, 0));
            __m512 hi = _mm512_shuffle_f32x4(u[q], u[q + 4], _MM_SHUFFLE(3, 2, 3, 2));
            lo = _mm512_shuffle_f32x4(lo, lo, _MM_SHUFFLE(3, 1, 2, 0));
            hi = _mm512_shuffle_f32x4(hi, hi, _MM_SHUFFLE(3, 1, 2, 0));
            __m256 out[4] = {_mm512_castps512_ps256(lo), upper8(lo), _mm512_castps512_ps256(hi),
                             upper8(hi)};
            for (int L = 0; L < 4; L++) {
                int l = 16 * h + 4 * L + q;
                if (l >= cols)
                    continue;
                float *row = c + (size_t)l * ldc;
                __m256 v = _mm256_mul_ps(out[L], va);
                if (beta != 0.0f)
                    v = _mm256_fmadd_ps(vb, _mm256_maskz_loadu_ps(mk, row), v);
                _mm256_mask_storeu_ps(row, mk, v);
            }
        }
    }
}

/* Where a tile's broadcast operand comes from: MR rows at row_at(i) =
 * base + i * rstride bytes, pair p at + p * pstride. A packed panel has
 * pstride MR * 4 and rstride 4; a matrix stored with k contiguous is read
 * as it is (pstride 4, rstride its row in bytes), with no packing. half:
 * after the kp pairs, one pair of which only the low bf16 is in the
 * matrix (an odd k read in place: the high one lies past the row). */
typedef struct bsrc {
    const char *base;
    size_t pstride, rstride;
    int half;
} bsrc;

/* One MR x NR tile: C = alpha * A . Bpanel + beta * C over kp pairs,
 * storing only rows x cols of it (transposed: see store_tile_t). cols <=
 * 16 takes a half-width loop (the narrow last layer of a classifier). */
BF16_TARGET static inline __attribute__((always_inline)) void
tile_8x32_body(int kp, const bsrc *as, const size_t ps, const size_t rs, const uint32_t *pb,
               float *c, int ldc, int rows, int cols, float alpha, float beta, int transposed)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();
    __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
    __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();
    __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
    __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();
    __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
    __m512 c60 = _mm512_setzero_ps(), c61 = _mm512_setzero_ps();
    __m512 c70 = _mm512_setzero_ps(), c71 = _mm512_setzero_ps();
    const char *r0 = as->base, *r1 = r0 + rs, *r2 = r1 + rs, *r3 = r2 + rs, *r4 = r3 + rs;
    const char *r5 = r4 + rs, *r6 = r5 + rs, *r7 = r6 + rs;
    size_t off = 0;
    __m512bh a, b0, b1;
    uint32_t w;
#define ROW1(r, x0)                                                                                \
    memcpy(&w, (r) + off, 4);                                                                      \
    a = (__m512bh)_mm512_set1_epi32((int)w);                                                       \
    x0 = _mm512_dpbf16_ps(x0, a, b0);
#define ROW2(r, x0, x1)                                                                            \
    ROW1(r, x0)                                                                                    \
    x1 = _mm512_dpbf16_ps(x1, a, b1);
    if (cols <= 16) {
        for (int p = 0; p < kp; p++, off += ps, pb += NR) {
            b0 = (__m512bh)_mm512_loadu_si512(pb);
            ROW1(r0, c00)
            ROW1(r1, c10)
            ROW1(r2, c20)
            ROW1(r3, c30)
            ROW1(r4, c40)
            ROW1(r5, c50)
            ROW1(r6, c60)
            ROW1(r7, c70)
        }
    } else {
        for (int p = 0; p < kp; p++, off += ps, pb += NR) {
            b0 = (__m512bh)_mm512_loadu_si512(pb);
            b1 = (__m512bh)_mm512_loadu_si512(pb + 16);
            ROW2(r0, c00, c01)
            ROW2(r1, c10, c11)
            ROW2(r2, c20, c21)
            ROW2(r3, c30, c31)
            ROW2(r4, c40, c41)
            ROW2(r5, c50, c51)
            ROW2(r6, c60, c61)
            ROW2(r7, c70, c71)
        }
    }
#undef ROW1
#undef ROW2
    if (as->half) { /* the last k alone: its pair partner is zero */
        const char *rr[MR] = {r0, r1, r2, r3, r4, r5, r6, r7};
        __m512 *acc0[MR] = {&c00, &c10, &c20, &c30, &c40, &c50, &c60, &c70};
        __m512 *acc1[MR] = {&c01, &c11, &c21, &c31, &c41, &c51, &c61, &c71};
        b0 = (__m512bh)_mm512_loadu_si512(pb);
        b1 = (__m512bh)_mm512_loadu_si512(pb + 16);
        for (int i = 0; i < MR; i++) {
            uint16_t lo;
            memcpy(&lo, rr[i] + off, 2);
            a = (__m512bh)_mm512_set1_epi32((int)lo);
            *acc0[i] = _mm512_dpbf16_ps(*acc0[i], a, b0);
            *acc1[i] = _mm512_dpbf16_ps(*acc1[i], a, b1);
        }
    }
    __m512 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                         {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
    if (transposed) {
        store_tile_t(c, ldc, acc, rows, cols, alpha, beta);
        return;
    }
    for (int i = 0; i < rows; i++)
        store_row(c + (size_t)i * ldc, acc[i][0], acc[i][1], cols, alpha, beta);
}

/* The same tile on a packed A panel, stored as it is (C, not C^T): the
 * loop of tile_8x32_body with its strides constant measured 5-7% slower
 * on the weight gradient's product (512x784x128, t10) in three
 * alternations on an idle machine, so the packed case keeps this one. */
BF16_TARGET static void tile_8x32_packed(int kp, const uint32_t *pa, const uint32_t *pb, float *c,
                                         int ldc, int rows, int cols, float alpha, float beta)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();
    __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
    __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();
    __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
    __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();
    __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
    __m512 c60 = _mm512_setzero_ps(), c61 = _mm512_setzero_ps();
    __m512 c70 = _mm512_setzero_ps(), c71 = _mm512_setzero_ps();
    __m512bh a, b0, b1;
#define ROW1(i, x0)                                                                                \
    a = (__m512bh)_mm512_set1_epi32((int)pa[i]);                                                   \
    x0 = _mm512_dpbf16_ps(x0, a, b0);
#define ROW2(i, x0, x1)                                                                            \
    ROW1(i, x0)                                                                                    \
    x1 = _mm512_dpbf16_ps(x1, a, b1);
    if (cols <= 16) {
        for (int p = 0; p < kp; p++, pa += MR, pb += NR) {
            b0 = (__m512bh)_mm512_loadu_si512(pb);
            ROW1(0, c00)
            ROW1(1, c10)
            ROW1(2, c20)
            ROW1(3, c30)
            ROW1(4, c40)
            ROW1(5, c50)
            ROW1(6, c60)
            ROW1(7, c70)
        }
    } else {
        for (int p = 0; p < kp; p++, pa += MR, pb += NR) {
            b0 = (__m512bh)_mm512_loadu_si512(pb);
            b1 = (__m512bh)_mm512_loadu_si512(pb + 16);
            ROW2(0, c00, c01)
            ROW2(1, c10, c11)
            ROW2(2, c20, c21)
            ROW2(3, c30, c31)
            ROW2(4, c40, c41)
            ROW2(5, c50, c51)
            ROW2(6, c60, c61)
            ROW2(7, c70, c71)
        }
    }
#undef ROW1
#undef ROW2
    __m512 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                         {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
    for (int i = 0; i < rows; i++)
        store_row(c + (size_t)i * ldc, acc[i][0], acc[i][1], cols, alpha, beta);
}

/* The tile with its pair stride a constant, so that the eight rows are
 * addressed as base + offset with one offset register: a packed panel
 * (MR * 4) or a matrix read in place (4). */
BF16_TARGET static void tile_8x32(int kp, const bsrc *as, const uint32_t *pb, float *c, int ldc,
                                  int rows, int cols, float alpha, float beta, int transposed)
{
    if (as->pstride == 4)
        tile_8x32_body(kp, as, 4, as->rstride, pb, c, ldc, rows, cols, alpha, beta, transposed);
    else if (!transposed)
        tile_8x32_packed(kp, (const uint32_t *)as->base, pb, c, ldc, rows, cols, alpha, beta);
    else
        tile_8x32_body(kp, as, MR * 4, 4, pb, c, ldc, rows, cols, alpha, beta, transposed);
}

typedef struct pack_job {
    uint32_t *dst;
    const uint16_t *x;
    int ld, trans, rows, width, kpairs, kend;
} pack_job;

/* Pool task: panels [begin, end) of A, each packed over all of k as
 * consecutive KC blocks of [kp][MR]. */
BF16_TARGET static void pack_a_panels(void *arg, size_t begin, size_t end)
{
    const pack_job *j = arg;
    for (size_t t = begin; t < end; t++) {
        int r0 = (int)t * j->width;
        int rows = j->rows - r0 < j->width ? j->rows - r0 : j->width;
        uint32_t *dst = j->dst + t * (size_t)j->kpairs * j->width;
        for (int p0 = 0; p0 < j->kpairs; p0 += KC) {
            int kp = j->kpairs - p0 < KC ? j->kpairs - p0 : KC;
            pack_pairs(dst + (size_t)p0 * j->width, j->x, j->ld, j->trans, r0, rows, j->width, p0,
                       kp, j->kend);
        }
    }
}

typedef struct bf16_job {
    const uint32_t *pa;    /* packed A: mt panels of [kpairs][MR] (KC blocks); NULL: direct */
    const uint32_t *pedge; /* direct with m % MR: the last panel, packed likewise */
    const uint16_t *ax;    /* direct: A stored [m][k], k contiguous */
    int lda;
    pack_job b; /* how to pack B panels */
    float *c;
    int m, n, kpairs, kend, ldc, mt, nt, groups, transposed;
    float alpha, beta;
} bf16_job;

/* Pool task: tasks [begin, end), task = (B panel, group of A panels).
 * Per KC block the task packs its B panel into a stack buffer that stays
 * in L1 while the group's A panels stream past it. An A read in place
 * whose last panel has fewer than MR rows has that panel packed (pedge),
 * so that no row past m is ever read. */
BF16_TARGET static void bf16_tasks(void *arg, size_t begin, size_t end)
{
    const bf16_job *j = arg;
    _Alignas(64) uint32_t bbuf[KC * NR];
    int per = (j->mt + j->groups - 1) / j->groups;
    for (size_t t = begin; t < end; t++) {
        int jt = (int)(t / (size_t)j->groups), g = (int)(t % (size_t)j->groups);
        int c0 = jt * NR, cols = j->n - c0 < NR ? j->n - c0 : NR;
        int i0 = g * per, i1 = i0 + per < j->mt ? i0 + per : j->mt;
        for (int p0 = 0; p0 < j->kpairs; p0 += KC) {
            int kp = j->kpairs - p0 < KC ? j->kpairs - p0 : KC;
            pack_pairs(bbuf, j->b.x, j->b.ld, j->b.trans, c0, cols, NR, p0, kp, j->b.kend);
            float beta = p0 == 0 ? j->beta : 1.0f;
            for (int it = i0; it < i1; it++) {
                int r0 = it * MR, rows = j->m - r0 < MR ? j->m - r0 : MR;
                bsrc as = {NULL, MR * 4, 4, 0};
                int kpt = kp;
                if (j->pa) {
                    as.base = (const char *)(j->pa + ((size_t)it * j->kpairs + p0) * MR);
                } else if (rows < MR) {
                    as.base = (const char *)(j->pedge + (size_t)p0 * MR);
                } else {
                    as.base = (const char *)(j->ax + (size_t)r0 * j->lda + 2 * (size_t)p0);
                    as.pstride = 4;
                    as.rstride = (size_t)j->lda * 2;
                    /* an odd k's last pair, read in place: the low half only */
                    as.half = (j->kend & 1) && p0 + kp == j->kpairs;
                    kpt = kp - as.half;
                }
                float *ct = j->transposed ? j->c + (size_t)c0 * j->ldc + r0
                                          : j->c + (size_t)r0 * j->ldc + c0;
                tile_8x32(kpt, &as, bbuf, ct, j->ldc, rows, cols, j->alpha, beta, j->transposed);
            }
        }
    }
}

/* C = alpha op(A) op(B) + beta C with bf16 A and B. The tiles broadcast
 * one operand's pairs and multiply them with packed panels of the other;
 * an operand stored with k contiguous can be broadcast from where it lies,
 * with no packing. Packing costs about a fifth of a product like an MLP's
 * forward (x [128, 784] times w^T [784, 512], 0.4 ns per element), so:
 *   - op(A) = A (k contiguous): A is read in place;
 *   - op(B) = B^T with B stored [n][k] (k contiguous), and op(A) either
 *     transposed or the smaller: the roles swap, C^T = op(B)^T op(A)^T is
 *     computed with B read in place and only A packed, and the tiles are
 *     stored transposed. A Linear's forward (x w^T) packs x, not w.
 * Each element of C is summed over k in the same order whichever way, so
 * the result does not depend on the thread count. */
static int gemm_bf16_avx512(dl_backend *be, int trans_a, int trans_b, int m, int n, int k,
                            float alpha, const uint16_t *a, int lda, const uint16_t *b, int ldb,
                            float beta, float *c, int ldc)
{
    dl_pool *pool = dl_cpu(be)->pool;
    int threads = pool ? dl_pool_threads(pool) : 1;
    /* A waking of the pool costs tens of microseconds: only products of a
     * few MFLOP and more are split. */
    double flops = 2.0 * m * n * k;
    int par = pool && threads > 1 && flops >= 4e6;
    /* Split over threads, the in-place reads measured slower (the bf16
     * MLP at 2 threads: 76-78k samples/s swapped, 83k in place without
     * the swap, 86-95k packed): each thread then streams a whole operand
     * through its own caches. So the threaded path packs as before. */
    int inplace = !par;
    int swap = inplace && trans_b && (trans_a || m < n);
    if (swap) { /* C^T [n, m] = op(B)^T op(A)^T: B [n][k] broadcast in place */
        const uint16_t *tx = a;
        int tm = m, tl = lda, tt = trans_a;
        a = b;
        lda = ldb;
        trans_a = 0;
        b = tx;
        ldb = tl;
        trans_b = !tt;
        m = n;
        n = tm;
    }
    int mt = (m + MR - 1) / MR, nt = (n + NR - 1) / NR;
    int kpairs = (k + 1) / 2;
    uint32_t *pa = NULL, *pedge = NULL;
    if (trans_a || !inplace) {
        pa = dl_cpu_scratch(be, SCRATCH_A, (size_t)mt * MR * kpairs * 4);
        if (!pa)
            return dl_error(DL_ENOMEM, "gemm: no scratch for bf16 packing (%dx%dx%d)", m, n, k);
        /* op(A)[r, kk] is A[r*lda+kk], or A[kk*lda+r] transposed */
        pack_job ja = {pa, a, lda, trans_a, m, MR, kpairs, k};
        if (par && (size_t)m * k >= 65536)
            dl_pool_for(pool, (size_t)mt, 1, pack_a_panels, &ja);
        else
            pack_a_panels(&ja, 0, (size_t)mt);
    } else if (m % MR) {
        pedge = dl_cpu_scratch(be, SCRATCH_A, (size_t)MR * kpairs * 4);
        if (!pedge)
            return dl_error(DL_ENOMEM, "gemm: no scratch for bf16 packing (%dx%dx%d)", m, n, k);
        int r0 = (mt - 1) * MR;
        for (int p0 = 0; p0 < kpairs; p0 += KC)
            pack_pairs(pedge + (size_t)p0 * MR, a, lda, 0, r0, m - r0, MR, p0,
                       kpairs - p0 < KC ? kpairs - p0 : KC, k);
    }
    int groups = 1;
    if (par && nt < 2 * threads) /* too few B panels to share: split M too */
        groups = (2 * threads + nt - 1) / nt < mt ? (2 * threads + nt - 1) / nt : mt;
    /* the B panel is op(B)^T[j, kk] = op(B)[kk, j]: B[kk*ldb+j], or
     * B[j*ldb+kk] */
    bf16_job job = {pa,    pedge, a,  lda,    {NULL, b, ldb, !trans_b, n, NR, kpairs, k},
                    c,     m,     n,  kpairs, k,
                    ldc,   mt,    nt, groups, swap,
                    alpha, beta};
    size_t tasks = (size_t)nt * groups;
    if (par)
        dl_pool_for(pool, tasks, 1, bf16_tasks, &job);
    else
        bf16_tasks(&job, 0, tasks);
    return DL_OK;
}

/* ---------------------------------------------------------------------- */

/* C[m,n] = alpha * op(A) op(B) + beta * C (row-major; op(A) [m,k], op(B)
 * [k,n]); A and B of dtype ab (f32, or bf16/f16 as uint16), C f32, f32
 * accumulation. beta == 0 overwrites C whatever it held. Returns DL_OK,
 * DL_EINVAL for bad sizes or dtype, DL_ENOMEM when scratch cannot grow
 * (C untouched then). */
int dl_cpu_gemm(dl_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                const void *a, int lda, const void *b, int ldb, dl_dtype ab, float beta, float *c,
                int ldc)
{
    if (m < 0 || n < 0 || k < 0)
        return dl_error(DL_EINVAL, "gemm: negative size %dx%dx%d", m, n, k);
    if (lda < (trans_a ? m : k) || lda < 1 || ldb < (trans_b ? k : n) || ldb < 1 || ldc < n ||
        ldc < 1)
        return dl_error(DL_EINVAL,
                        "gemm: leading dimension too small (lda %d, ldb %d, ldc %d "
                        "for %dx%dx%d, trans %d%d)",
                        lda, ldb, ldc, m, n, k, trans_a, trans_b);
    if (ab != DL_F32 && ab != DL_BF16 && ab != DL_F16)
        return dl_error(DL_EINVAL, "gemm: operand dtype %s not supported", dl_dtype_name(ab));
    if (m == 0 || n == 0)
        return DL_OK;
    if (k == 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        return DL_OK;
    }
    if (ab == DL_F32) {
        sgemm_split(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return DL_OK;
    }
    if (ab == DL_BF16 && dl_cpu(be)->has_avx512_bf16)
        return gemm_bf16_avx512(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return gemm_widened(be, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, ab, beta, c, ldc);
}
