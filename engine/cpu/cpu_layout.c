/* cpu_layout.c - activations between the plain NCHW layout and oneDNN's channel blocks (nChw8c, nChw16c)
 *
 * Where the model keeps its activations in channel blocks (nn.c's layout
 * plan), a convolution direction oneDNN does not run (a data gradient
 * below 8 input channels) works on plain copies made here, and the tests
 * compare the two layouts through these. 8x8 transposes in AVX2
 * registers, eight floats of eight channels at a time, for both block
 * sizes; the adding direction does one f32 addition per element.
 */
#include "engine/base/error.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"

#ifdef DL_CPU_VMATH
/* Eight rows of eight floats, src + k * ss, stored transposed: dst + k *
 * ds holds the k-th element of every row (or adds it where add is set).
 * Named registers, not an array: the array went through the stack. */
static inline void transpose8(float *dst, size_t ds, const float *src, size_t ss, int add)
{
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ss);
    __m256 r2 = _mm256_loadu_ps(src + 2 * ss), r3 = _mm256_loadu_ps(src + 3 * ss);
    __m256 r4 = _mm256_loadu_ps(src + 4 * ss), r5 = _mm256_loadu_ps(src + 5 * ss);
    __m256 r6 = _mm256_loadu_ps(src + 6 * ss), r7 = _mm256_loadu_ps(src + 7 * ss);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 o[8] = {
        _mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
        _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
        _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
        _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31),
    };
    for (int k = 0; k < 8; k++) {
        float *d = dst + k * ds;
        _mm256_storeu_ps(d, add ? _mm256_add_ps(_mm256_loadu_ps(d), o[k]) : o[k]);
    }
}
#endif

/* One block of one image: rows channels (<= blk; the rest zeros) of hw
 * floats, plane stride hw, into hw rows of blk. */
static void block_in(float *restrict dst, const float *restrict src, int rows, size_t hw, int blk,
                     int add)
{
    size_t i = 0;
#ifdef DL_CPU_VMATH
    if (rows == blk)
        for (; i + 8 <= hw; i += 8)
            for (int g = 0; g < blk; g += 8)
                transpose8(dst + i * blk + g, blk, src + (size_t)g * hw + i, hw, add);
#endif
    for (; i < hw; i++)
        for (int k = 0; k < blk; k++) {
            float v = k < rows ? src[(size_t)k * hw + i] : 0.0f;
            dst[i * blk + k] = add ? dst[i * blk + k] + v : v;
        }
}

/* The inverse of block_in for the first rows channels, written or added. */
static void block_out(float *restrict dst, const float *restrict src, int rows, size_t hw, int blk,
                      int add)
{
    size_t i = 0;
#ifdef DL_CPU_VMATH
    if (rows == blk)
        for (; i + 8 <= hw; i += 8)
            for (int g = 0; g < blk; g += 8)
                transpose8(dst + (size_t)g * hw + i, hw, src + i * blk + g, blk, add);
#endif
    for (; i < hw; i++)
        for (int k = 0; k < rows; k++) {
            float v = src[i * blk + k];
            float *o = dst + (size_t)k * hw + i;
            *o = add ? *o + v : v;
        }
}

void dl_cpu_to_blocked(float *restrict dst, const float *restrict src, int n, int c, size_t hw,
                       int blk, int add)
{
    int nblk = (c + blk - 1) / blk;
    for (int img = 0; img < n; img++)
        for (int b = 0; b < nblk; b++) {
            int rows = c - b * blk < blk ? c - b * blk : blk;
            block_in(dst + ((size_t)img * nblk + b) * hw * blk,
                     src + ((size_t)img * c + (size_t)b * blk) * hw, rows, hw, blk, add);
        }
}

void dl_cpu_from_blocked(float *restrict dst, const float *restrict src, int n, int c, size_t hw,
                         int blk, int add)
{
    int nblk = (c + blk - 1) / blk;
    for (int img = 0; img < n; img++)
        for (int b = 0; b < nblk; b++) {
            int rows = c - b * blk < blk ? c - b * blk : blk;
            block_out(dst + ((size_t)img * c + (size_t)b * blk) * hw,
                      src + ((size_t)img * nblk + b) * hw * blk, rows, hw, blk, add);
        }
}

/* --- the op table's conversions (a Flatten reading blocks) ---------------- */

typedef struct layout_task {
    int blk, add, c;
    size_t hw;
    float *dst;
    const float *src;
    int to_plain;
} layout_task;

static void layout_task_fn(void *arg, size_t begin, size_t end)
{
    const layout_task *t = arg;
    size_t img = (size_t)t->c * t->hw; /* floats an image (c divisible by blk) */
    if (t->to_plain)
        dl_cpu_from_blocked(t->dst + begin * img, t->src + begin * img, (int)(end - begin), t->c,
                            t->hw, t->blk, 0);
    else
        dl_cpu_to_blocked(t->dst + begin * img, t->src + begin * img, (int)(end - begin), t->c,
                          t->hw, t->blk, t->add);
}

static int layout_run(dl_backend *be, layout_task *t, int n)
{
    if (t->blk <= 0 || t->blk % 8 || t->c % t->blk)
        return dl_error(DL_EINVAL,
                        "layout: %d channels in blocks of %d: expected a multiple of 8 "
                        "that divides the channels",
                        t->c, t->blk);
    dl_pool *pool = dl_cpu(be)->pool;
    if (pool && n > 0)
        dl_pool_for(pool, (size_t)n, dl_cpu_plane_grain((size_t)t->c * t->hw), layout_task_fn, t);
    else if (n > 0)
        layout_task_fn(t, 0, (size_t)n);
    return DL_OK;
}

int dl_cpu_blocks_to_plain(dl_backend *be, int blk, int n, int c, size_t hw, float *dst,
                           const float *src)
{
    layout_task t = {blk, 0, c, hw, dst, src, 1};
    return layout_run(be, &t, n);
}

int dl_cpu_plain_to_blocks(dl_backend *be, int blk, int add, int n, int c, size_t hw, float *dst,
                           const float *src)
{
    layout_task t = {blk, add, c, hw, dst, src, 0};
    return layout_run(be, &t, n);
}
