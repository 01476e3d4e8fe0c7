/* cpu_conv.c - convolution (direct kernels or im2col + GEMM) and pooling on the CPU
 *
 * Single-input-channel, stride-1 convolutions (the first layer of an image
 * CNN) run direct AVX-512 kernels when the CPU has AVX-512F: an im2col GEMM
 * with K = r*s is mostly unfold traffic there. The forward pass keeps the
 * r*s shifted input vectors of 16 outputs in registers and sweeps the
 * output channels; the filter gradient keeps r*s accumulators per output
 * channel and image (the tasks split the channels, so no reduction).
 *
 * Everything else goes through im2col + GEMM. A chunk of nb images is
 * unfolded into columns, one column per output pixel:
 *   col [c*r*s, nb*pq]   (row (c, r, s) as w [k, c, r, s] is stored)
 * so the unfold copies contiguous runs of input rows and the products come
 * out channel-major, one contiguous run of pq per image and channel:
 *   forward          t [k, nb*pq]      = w . col, then copied into y (+ b)
 *   backward data    dcol [crs, nb*pq] = w^T . t(dy), then folded into dx
 *   backward filter  dw [k, crs]      += t(dy) . col^T
 * where t(dy) gathers dy of the chunk's images as [k, nb*pq]. The unfold,
 * fold and copies are parallel over the images of a chunk with the pool;
 * the GEMMs are threaded by OpenBLAS or the bf16 kernel. For bf16/f16
 * compute, col, t(dy) and w are written in that dtype (the direct kernels
 * round their operands the same way) and products accumulate in f32.
 *
 * Backward with a mostly-zero dy (behind ReLU and max pooling), f32 and
 * channels a multiple of 16: a sparse path that visits only dy's nonzeros
 * (see "sparse dy backward" below), chosen per call by measured density.
 *
 * Grouped, depthwise and dilated convolutions go to cpu_conv_grouped.c;
 * dense 1x1 ones with pad 0 (any stride) to cpu_conv_1x1.c where the CPU
 * has AVX-512 (use_1x1), ahead of oneDNN; bf16 ones (1x1 at stride 1
 * included) to cpu_conv_bf16.c where the CPU has AVX-512 BF16 and the
 * shape suits its kernels, direction by direction (its _fits), ahead of
 * both.
 *
 * Workspace (dl_cpu_conv_workspace): col [crs, chunk*pq] and t [k, chunk*pq]
 * at 4 bytes an element, plus a low-precision copy of w [k*crs].
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "engine/cpu/cpu.h"
#include "engine/cpu/cpu_vmath.h"
#include "engine/base/error.h"
#include "engine/base/half.h"

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
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->k <= 0 || d->r <= 0 || d->s <= 0 ||
        d->stride <= 0 || d->pad < 0)
        return dl_error(DL_EINVAL,
                        "%s: bad descriptor n %d c %d h %d w %d k %d r %d s %d "
                        "stride %d pad %d",
                        op, d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride, d->pad);
    if (d->p != (d->h + 2 * d->pad - d->r) / d->stride + 1 ||
        d->q != (d->w + 2 * d->pad - d->s) / d->stride + 1 || d->p <= 0 || d->q <= 0)
        return dl_error(DL_ESHAPE,
                        "%s: output %dx%d does not match input %dx%d, kernel "
                        "%dx%d, stride %d, pad %d",
                        op, d->p, d->q, d->h, d->w, d->r, d->s, d->stride, d->pad);
    if (d->s > 64)
        return dl_error(DL_EINVAL, "%s: kernel width %d over 64 not supported", op, d->s);
    if (compute != DL_F32 && compute != DL_BF16 && compute != DL_F16)
        return dl_error(DL_EINVAL, "%s: compute dtype %s not supported", op,
                        dl_dtype_name(compute));
    return DL_OK;
}

static int sparse_fits(const dl_conv_desc *d, dl_dtype compute);
static size_t sparse_workspace(const dl_conv_desc *d);

/* Grouped, depthwise or dilated: cpu_conv_grouped.c does those. */
static int is_grouped(const dl_conv_desc *d)
{
    return d->groups > 1 || d->dilation > 1 || d->groups < 0 || d->dilation < 0;
}

/* A grouped or dilated convolution that the depthwise kernels do not take
 * goes to oneDNN where it takes d (from 8 input channels): its kernels
 * handle groups and dilation in place, where the grouped path unfolds
 * each group's input and runs one small product per (image, group). In
 * the probes of the round (dlbench profile, 1 thread, batch 32): a 3x3
 * layer at 32 channels dilated by 2 on 28x28 ran at 42 GFLOP/s there
 * against 182 in oneDNN; 3x3 layers of 64 and 128 channels in 8 groups at
 * 17 and 28 against 67 and 150, in 32 groups (2 and 4 channels each) at
 * 3.7 and 6.9 against 6.1 and 22; bf16 alike. Direction and operands as
 * dl_cpu_dnnl_conv; 1 done, 0 for the grouped path, < 0 an error. */
static int grouped_dnnl(dl_backend *be, int dir, const dl_conv_desc *d, dl_dtype compute,
                        float *out, const float *in, const float *in2, const float *w,
                        const float *b, const char *op)
{
    if (d->groups < 0 || (d->groups <= 1 && d->dilation <= 1) || dl_cpu_conv_dw_fits(d, compute) ||
        !dl_cpu_dnnl_conv_wanted(d, compute))
        return 0;
    DL_TRY(dl_cpu_conv_grouped_check(d, compute, op));
    return dl_cpu_dnnl_conv(be, dir, d, compute, out, NULL, in, in2, w, b);
}

/* Dense 1x1 with pad 0 on an AVX-512 CPU: cpu_conv_1x1.c's kernels below
 * 128 input channels, except bf16 at stride 1 with k*c over 4096, and for
 * every such shape where oneDNN is not wanted (DLBENCH_CONV=own, builds
 * without it). bench_conv's 1x1 rows, 1 thread: below 128 input channels
 * they beat oneDNN's jit_1x1 with its NCHW <-> nChw16c reorders (the
 * stride-2 shortcuts by 1.3-3x in f32 and bf16); at 256->64 oneDNN's
 * filter gradient is faster, the other two about equal; in bf16 at
 * 64->256 stride 1 oneDNN's vdpbf16ps products are faster in all three. */
#define OWN_1X1_MAX_C 128
#define OWN_1X1_BF16_S1_MAX_KC 4096

static int use_1x1(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    if (!dl_cpu_conv_1x1_fits(d, compute))
        return 0;
    if (!dl_cpu_dnnl_conv_wanted(d, compute))
        return 1;
    /* the bf16 exception where oneDNN has bf16 dot products to run */
    if (dl_cpu_kernel_type(be, compute) == DL_BF16 && d->stride == 1 &&
        d->k * d->c > OWN_1X1_BF16_S1_MAX_KC)
        return 0;
    return d->c < OWN_1X1_MAX_C;
}

/* --- activations in channel blocks (dl_conv_desc x_blk, y_blk) -----------
 * oneDNN takes them as they are: no reorder of the chunk's input or
 * output (a fifth of the ResNet's step at one thread went to those). It
 * runs every direction it is wanted for, ahead of the own 1x1 and bf16
 * kernels, which read NCHW; a direction it does not run (the data
 * gradient below 8 input channels, a shape it has no primitive for) runs
 * the plain path on plain copies (cpu_layout.c). */

int dl_cpu_activation_blocks(dl_backend *be, dl_dtype compute)
{
#ifdef DL_HAVE_DNNL
    const char *e = getenv("DLBENCH_BLOCKED"); /* 0: plain NCHW everywhere (comparisons) */
    if ((e && !strcmp(e, "0")) || (compute != DL_F32 && compute != DL_BF16 && compute != DL_F16))
        return 0;
    /* oneDNN's f32 and bf16 convolutions: nChw16c with AVX-512, nChw8c with AVX2 */
    return dl_cpu_avx512() ? 16 : 8;
#else
    return 0;
#endif
}

/* Grouped and dilated convolutions that may take blocks: depthwise ones
 * (a channel a group) and groups of whole blocks, on oneDNN's kernels,
 * whose depthwise ones read nChw16c as it is. Kept plain, MobileNet's
 * depthwise layers had kept every activation of the model plain, its
 * BatchNorms on 7x7 to 28x28 planes a channel at a time (a fifth of the
 * step); on blocks it trained 1.3-1.4x as fast at one thread. But
 * oneDNN's depthwise filter gradient on blocks ran a 5x5 layer at 2.2
 * GFLOP/s against 23 on the plain path, with AVX-512 and with AVX2 (96
 * channels at 14x14, BENCH_CONV_VS=blocked): its three directions took
 * 4.5x as long as the plain ones, so depthwise layers wider than 3x3
 * stay plain. */
static int grouped_blocks_ok(const dl_conv_desc *d, int blk)
{
    if (d->groups < 0 || d->dilation < 0)
        return 0;
    int g = dl_conv_groups(d);
    if (g > 1 && d->c == g && d->k == g && (d->r > 3 || d->s > 3))
        return 0;
    return g == 1 || (d->c == g && d->k == g) || ((d->c / g) % blk == 0 && (d->k / g) % blk == 0);
}

int dl_cpu_conv_blocks(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    int blk = dl_cpu_activation_blocks(be, compute);
    if (!blk || !grouped_blocks_ok(d, blk) || d->x_blk || d->y_blk ||
        check_desc(d, compute, "conv") < 0)
        return 0;
    /* where the CPU has bf16 dot products, the own bf16 kernels (NCHW)
     * keep the shapes they take, as measured against oneDNN's */
    if (dl_cpu_conv_bf16_forward_fits(be, d, compute) ||
        dl_cpu_conv_bf16_data_fits(be, d, compute) || dl_cpu_conv_bf16_filter_fits(be, d, compute))
        return 0;
    dl_dtype pt = dl_cpu_kernel_type(be, compute);
    int fwd = dl_cpu_dnnl_conv_wanted_dir(d, pt, 0), data = dl_cpu_dnnl_conv_wanted_dir(d, pt, 1);
    int filter = dl_cpu_dnnl_conv_wanted_dir(d, pt, 2);
    /* y also where the data gradient runs on plain copies: below 8 input
     * channels, where x comes from the images and needs no gradient */
    return (d->c % blk == 0 && fwd && data && filter ? 1 : 0) |
           (d->k % blk == 0 && fwd && filter ? 2 : 0);
}

/* A plain copy of the blocked src [n, c, hw] (NULL: out of memory). */
static float *plain_copy(const float *src, int n, int c, size_t hw, int blk)
{
    float *p = malloc((size_t)n * c * hw * sizeof(float));
    if (p)
        dl_cpu_from_blocked(p, src, n, c, hw, blk, 0);
    return p;
}

typedef struct bdb_task {
    const dl_conv_desc *d;
    float *db;
    const float *dy;
} bdb_task;

/* db += the sums of dy (in blocks of y_blk channels) over images and
 * pixels, channel blocks [begin, end); in double, as the plain path's
 * (oneDNN's own sums would be of the rounded dy in bf16). */
static void bdb_fn(void *arg, size_t begin, size_t end)
{
    const bdb_task *t = arg;
    const dl_conv_desc *d = t->d;
    size_t blk = (size_t)d->y_blk, pq = (size_t)d->p * d->q;
    size_t nb = (size_t)d->k / blk;
    for (size_t cb = begin; cb < end; cb++) {
        double s[64] = {0};
#ifdef __AVX2__
        if (blk == 8 || blk == 16) { /* the same sums, four lanes a vector */
            __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                              _mm256_setzero_pd()};
            int wide = blk == 16; /* the vectors' count a constant: acc stays in registers */
            for (int i = 0; i < d->n; i++) {
                const float *p = t->dy + ((size_t)i * nb + cb) * pq * blk;
                for (size_t j = 0; j < pq; j++, p += blk) {
                    acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm_loadu_ps(p)));
                    acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm_loadu_ps(p + 4)));
                    if (wide) {
                        acc[2] = _mm256_add_pd(acc[2], _mm256_cvtps_pd(_mm_loadu_ps(p + 8)));
                        acc[3] = _mm256_add_pd(acc[3], _mm256_cvtps_pd(_mm_loadu_ps(p + 12)));
                    }
                }
            }
            for (size_t v = 0; v < blk / 4; v++)
                _mm256_storeu_pd(s + 4 * v, acc[v]);
        } else
#endif
            for (int i = 0; i < d->n; i++) {
                const float *p = t->dy + ((size_t)i * nb + cb) * pq * blk;
                for (size_t j = 0; j < pq; j++)
                    for (size_t l = 0; l < blk; l++)
                        s[l] += p[j * blk + l];
            }
        for (size_t l = 0; l < blk; l++)
            t->db[cb * blk + l] += (float)s[l];
    }
}

/* d's shape, and its blocks: 8 to 64 channels (bdb_fn's sums), whole (a
 * chunk of images starts at n0 * c * h * w either way). */
static int check_blocked(const dl_conv_desc *d, dl_dtype compute)
{
    DL_TRY(check_desc(d, compute, "conv (blocked)"));
    if ((d->x_blk && (d->x_blk % 8 || d->x_blk > 64 || d->c % d->x_blk)) ||
        (d->y_blk && (d->y_blk % 8 || d->y_blk > 64 || d->k % d->y_blk)))
        return dl_error(DL_EINVAL,
                        "conv (blocked): %d input and %d output channels in blocks of %d and %d: "
                        "expected 0 or a multiple of 8 up to 64 that divides the channels",
                        d->c, d->k, d->x_blk, d->y_blk);
    return DL_OK;
}

static void conv_db(dl_backend *be, const dl_conv_desc *d, float *db, const float *dy);

/* Direction dir (dl_cpu_dnnl_conv's) of d with x or y blocked: oneDNN's,
 * else the plain path on plain copies of the blocked operands. */
static int blocked_conv(dl_backend *be, int dir, const dl_conv_desc *d, dl_dtype compute,
                        float *out, float *out2, const float *in, const float *in2, const float *w,
                        const float *b, void *ws)
{
    DL_TRY(check_blocked(d, compute));
    if (dl_cpu_conv_wino_takes(be, d, compute, dir == 3 ? 1 : dir)) {
        if (dir != 2)
            return dir == 0 ? dl_cpu_conv_wino_forward(be, d, out, in, w, b, compute)
                            : dl_cpu_conv_wino_data(be, d, out, in, w, dir == 3, compute);
        DL_TRY(dl_cpu_conv_wino_filter(be, d, out, in2, in, compute));
        conv_db(be, d, out2, in2);
        return DL_OK;
    }
    if (dir && dl_cpu_conv_1x1_blocked_takes(be, d, compute, dir == 3 ? 1 : dir)) {
        if (dir != 2)
            return dl_cpu_conv_1x1_blocked_data(be, d, out, in, w, dir == 3, compute);
        DL_TRY(dl_cpu_conv_1x1_blocked_filter(be, d, out, in2, in, compute));
        conv_db(be, d, out2, in2);
        return DL_OK;
    }
    if (dir == 2 && dl_cpu_conv_small_lanes_takes(be, d, compute)) {
        DL_TRY(dl_cpu_conv_small_lanes_filter(be, d, out, in2, in, ws, compute));
        conv_db(be, d, out2, in2);
        return DL_OK;
    }
    dl_dtype pt = dl_cpu_kernel_type(be, compute);
    int done = dl_cpu_dnnl_conv_wanted_dir(d, pt, dir == 3 ? 1 : dir)
                   ? dl_cpu_dnnl_conv(be, dir, d, compute, out, NULL, in, in2, w, b)
                   : 0;
    if (done > 0 && dir == 2)
        conv_db(be, d, out2, in2);
    if (done)
        return done < 0 ? done : DL_OK;
    dl_conv_desc pd = *d;
    pd.x_blk = pd.y_blk = 0;
    size_t xhw = (size_t)d->h * d->w, yhw = (size_t)d->p * d->q;
    /* the operands read: x (forward, filter), dy (data, filter) */
    const float *xs = dir == 0 || dir == 2 ? in : NULL, *ys = dir == 2 ? in2 : dir & 1 ? in : NULL;
    float *xp = xs && d->x_blk ? plain_copy(xs, d->n, d->c, xhw, d->x_blk) : NULL;
    float *yp = ys && d->y_blk ? plain_copy(ys, d->n, d->k, yhw, d->y_blk) : NULL;
    /* the output written blocked: y (forward), dx (data) */
    int ob = dir == 0 ? d->y_blk : dir & 1 ? d->x_blk : 0;
    size_t on = dir == 0 ? (size_t)d->n * d->k * yhw : (size_t)d->n * d->c * xhw;
    float *op = ob ? calloc(on, sizeof(float)) : NULL;
    int rc = DL_OK;
    if ((xs && d->x_blk && !xp) || (ys && d->y_blk && !yp) || (ob && !op))
        rc = dl_error(DL_ENOMEM, "conv: out of memory for plain copies of blocked activations");
    const float *x = xp ? xp : xs, *dy = yp ? yp : ys;
    if (rc == DL_OK && dir == 0)
        rc = dl_cpu_conv_forward(be, &pd, op ? op : out, x, w, b, ws, compute);
    else if (rc == DL_OK && dir == 2)
        rc = dl_cpu_conv_backward_filter(be, &pd, out, out2, dy, x, ws, compute);
    else if (rc == DL_OK)
        rc = (op || dir == 1 ? dl_cpu_conv_backward_data : dl_cpu_conv_backward_data_set)(
            be, &pd, op ? op : out, dy, w, ws, compute);
    if (rc == DL_OK && op) {
        int c = dir == 0 ? d->k : d->c;
        size_t hw = dir == 0 ? yhw : xhw;
        if (dir == 1) { /* dx added into: the blocked dx's channels are op's */
            float *cur = plain_copy(out, d->n, c, hw, ob);
            if (!cur) {
                rc = dl_error(DL_ENOMEM, "conv: out of memory for a plain copy of dx");
            } else {
                for (size_t i = 0; i < on; i++)
                    cur[i] += op[i];
                dl_cpu_to_blocked(out, cur, d->n, c, hw, ob, 0);
                free(cur);
            }
        } else {
            dl_cpu_to_blocked(out, op, d->n, c, hw, ob, 0);
        }
    }
    free(xp);
    free(yp);
    free(op);
    return rc;
}

/* Bytes of workspace the three conv ops need for d: see the file comment. */
size_t dl_cpu_conv_workspace(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    if (is_grouped(d))
        return dl_cpu_conv_grouped_workspace(d, compute);
    if (check_desc(d, compute, "conv_workspace") < 0)
        return 0;
    size_t own = 0; /* cpu_conv_bf16.c's, where it takes a direction */
    if (dl_cpu_conv_bf16_filter_fits(be, d, compute))
        own = dl_cpu_conv_bf16_filter_workspace(be, d);
    if ((dl_cpu_conv_bf16_forward_fits(be, d, compute) ||
         dl_cpu_conv_bf16_data_fits(be, d, compute)) &&
        dl_cpu_conv_bf16_pairs_workspace(be, d) > own)
        own = dl_cpu_conv_bf16_pairs_workspace(be, d);
    if (d->c <= 3 &&
        dl_cpu_conv_small_lanes_workspace(d) > own) /* whatever blocks the plan gives */
        own = dl_cpu_conv_small_lanes_workspace(d);
    if (use_1x1(be, d, compute)) {
        size_t k1 = dl_cpu_conv_1x1_workspace(be, d, compute);
        return k1 > own ? k1 : own;
    }
    size_t rows = (size_t)chunk_images(d) * d->p * d->q;
    size_t crs = (size_t)d->c * d->r * d->s;
    size_t bytes = rows * crs * 4 + rows * (size_t)d->k * 4 + 128;
    if (compute != DL_F32)
        bytes += (size_t)d->k * crs * 2 + 64;
    if (sparse_fits(d, compute) && sparse_workspace(d) > bytes)
        bytes = sparse_workspace(d);
    return own > bytes ? own : bytes;
}

int dl_cpu_conv_algo(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, char *buf,
                     size_t size)
{
    if (is_grouped(d)) {
        if (!dl_cpu_conv_dw_fits(d, compute) && dl_cpu_dnnl_conv_wanted(d, compute) &&
            dl_cpu_conv_grouped_check(d, compute, "conv_algo") == DL_OK &&
            dl_cpu_dnnl_conv_describe(be, d, compute, buf, size))
            return DL_OK;
        snprintf(buf, size, "%s",
                 !dl_cpu_conv_dw_fits(d, compute) ? "cpu grouped im2col + GEMM per group"
                 : dl_cpu_conv_dw_lanes(d)
                     ? "cpu depthwise direct kernels (AVX2), 8 channels in the lanes"
                     : "cpu depthwise direct kernels (AVX2) on padded planes");
        return DL_OK;
    }
    DL_TRY(check_desc(d, compute, "conv_algo"));
    int own_f = dl_cpu_conv_bf16_forward_fits(be, d, compute),
        own_d = dl_cpu_conv_bf16_data_fits(be, d, compute),
        own_w = dl_cpu_conv_bf16_filter_fits(be, d, compute);
    if (own_f && own_d && own_w) {
        snprintf(buf, size,
                 "cpu bf16 kernels (vdpbf16ps): forward and data on channel pairs, "
                 "filter as shifted products");
        return DL_OK;
    }
    if (use_1x1(be, d, compute))
        snprintf(buf, size, "cpu 1x1 kernels (AVX-512), per-image products%s",
                 d->stride > 1 ? ", strided input subsampled" : "");
    else if (dl_cpu_conv_small_fits(d, compute))
        snprintf(buf, size,
                 "cpu direct kernels for few channels (%s): forward%s; im2col + GEMM for data",
                 dl_cpu_avx512() ? "AVX-512" : "AVX2",
                 dl_cpu_conv_small_filter_fits(d, compute) ? " and filter" : "");
    else if (!dl_cpu_dnnl_conv_wanted_dir(d, dl_cpu_kernel_type(be, compute), 2) ||
             !dl_cpu_dnnl_conv_describe(be, d, compute, buf, size))
        snprintf(buf, size, "cpu im2col + GEMM, %d images a chunk%s", chunk_images(d),
                 sparse_fits(d, compute) ? "; direct kernels when dy is sparse" : "");
    else if (!dl_cpu_dnnl_conv_wanted(d, compute)) {
        /* under 8 input channels: the directions oneDNN does not take */
        size_t used = strlen(buf);
        int f = dl_cpu_dnnl_conv_wanted_dir(d, dl_cpu_kernel_type(be, compute), 0),
            g = dl_cpu_dnnl_conv_wanted_dir(d, dl_cpu_kernel_type(be, compute), 1);
        if (!f || !g)
            snprintf(buf + used, size - used, "; own kernels for %s",
                     !f && !g ? "forward and data"
                     : !f     ? "forward"
                              : "data");
    }
    if (dl_cpu_conv_wino_fits(be, d, compute, 0)) { /* with the blocks the plan gives it */
        size_t used = strlen(buf);
        snprintf(buf + used, size - used,
                 "; with x and y in 8-channel blocks, own Winograd F(2x2, 3x3) (AVX2) for the "
                 "forward%s",
                 dl_cpu_conv_wino_fits(be, d, compute, 1)
                     ? (dl_cpu_conv_wino_fits(be, d, compute, 2) ? " and both gradients"
                                                                 : " and the data gradient")
                 : dl_cpu_conv_wino_fits(be, d, compute, 2) ? " and the filter gradient"
                                                            : "");
    }
    dl_conv_desc yb = *d; /* with the blocks the plan may give y */
    yb.y_blk = dl_cpu_avx512() ? 16 : 8;
    if (d->k % yb.y_blk == 0 && dl_cpu_conv_small_lanes_takes(be, &yb, compute)) {
        size_t used = strlen(buf);
        /* short: the layer's algo text holds 192 bytes, and oneDNN's
         * clauses for emulated bf16 take most of them */
        snprintf(buf + used, size - used, "; own filter kernel if y blocked");
    }
    if (own_f || own_d || own_w) {
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "; own vdpbf16ps kernels for%s%s%s",
                 own_f ? " forward" : "", own_d ? " data" : "", own_w ? " filter" : "");
    }
    return DL_OK;
}

typedef struct conv_work {
    void *col;     /* [crs, nb*pq], f32 or 16-bit */
    void *t;       /* [k, nb*pq], f32 or 16-bit */
    uint16_t *w16; /* [k, crs] low-precision copy of w, or NULL */
    int chunk;
} conv_work;

static void carve(conv_work *cw, const dl_conv_desc *d, void *ws, dl_dtype compute)
{
    size_t crs = (size_t)d->c * d->r * d->s;
    cw->chunk = chunk_images(d);
    size_t cols = (size_t)cw->chunk * d->p * d->q;
    char *p = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    cw->col = p;
    p += (cols * crs * 4 + 63) & ~(size_t)63;
    cw->t = p;
    p += (cols * (size_t)d->k * 4 + 63) & ~(size_t)63;
    cw->w16 = compute == DL_F32 ? NULL : (uint16_t *)p;
}

static inline uint16_t to_half(float v, dl_dtype t)
{
    return t == DL_BF16 ? dl_f32_to_bf16(v) : dl_f32_to_f16(v);
}

static void convert_w(uint16_t *dst, const float *w, size_t n, dl_dtype t)
{
    if (t == DL_BF16) {
        dl_cpu_f32_to_bf16(dst, w, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = to_half(w[i], t);
}

/* w [k, crs] as the products read it: w itself in f32, else its 16-bit
 * copy in cw->w16. */
static const void *gemm_weights(const conv_work *cw, const dl_conv_desc *d, const float *w,
                                dl_dtype compute)
{
    if (compute == DL_F32)
        return w;
    convert_w(cw->w16, w, (size_t)d->k * d->c * d->r * d->s, compute);
    return cw->w16;
}

/* dst[j] = src[j] in the compute dtype (f32 copy or 16-bit rounding). */
static inline void store_run(void *dst, size_t at, const float *src, int n, dl_dtype t)
{
    if (t == DL_F32) {
        memcpy((float *)dst + at, src, (size_t)n * sizeof(float));
    } else if (t == DL_BF16) {
        dl_cpu_f32_to_bf16((uint16_t *)dst + at, src, (size_t)n);
    } else {
        uint16_t *h = (uint16_t *)dst + at;
        for (int j = 0; j < n; j++)
            h[j] = to_half(src[j], t);
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

/* Sum of p[0..n) in f32 with 8 independent partial sums. */
static float plane_sum(const float *p, int n)
{
    float s[8] = {0};
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++)
            s[u] += p[j + u];
    for (; j < n; j++)
        s[0] += p[j];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* Shared by the per-image tasks of one chunk. */
typedef struct conv_task {
    const dl_conv_desc *d;
    dl_dtype compute;
    int n0, nb;      /* first image of the chunk, images in it */
    const float *x;  /* [n, c, h, w] */
    float *dx;       /* [n, c, h, w] */
    const float *b;  /* [k] or NULL */
    float *y;        /* [n, k, p, q] */
    const float *dy; /* [n, k, p, q] */
    void *col, *t;
} conv_task;

/* Output columns [ow0, ow1) of kernel column ks read input columns
 * ow*stride - pad + ks inside [0, w). */
static void col_range(const dl_conv_desc *d, int ks, int *ow0, int *ow1)
{
    int off = ks - d->pad;
    int lo = off >= 0 ? 0 : (-off + d->stride - 1) / d->stride;
    int hi = d->w - 1 - off < 0 ? 0 : (d->w - 1 - off) / d->stride + 1;
    if (hi > d->q)
        hi = d->q;
    if (lo > hi)
        lo = hi;
    *ow0 = lo;
    *ow1 = hi;
}

/* dst[0..n) = src[0..n) for the short runs of an unfold (often a dozen
 * floats, where a call to memcpy costs more than the copy). From 8 floats
 * on, the last vector overlaps the one before it instead of a masked tail. */
static inline void copy_run(float *dst, const float *src, int n)
{
#ifdef __AVX2__
    if (n >= 8) {
        int j = 0;
        for (; j + 8 < n; j += 8)
            _mm256_storeu_ps(dst + j, _mm256_loadu_ps(src + j));
        _mm256_storeu_ps(dst + n - 8, _mm256_loadu_ps(src + n - 8));
        return;
    }
#endif
    for (int j = 0; j < n; j++)
        dst[j] = src[j];
}

/* f32, stride 1: the columns of one image xi, col [crs, ld] from column 0
 * (ld >= pq). Per (channel, kernel row, kernel column) the output rows
 * whose input row is inside the image are runs of the input row, with the
 * padding columns and rows zeroed around them. */
static void unfold_s1(float *col, size_t ld, const float *xi, const dl_conv_desc *d)
{
    int q = d->q;
    size_t row = 0;
    for (int ch = 0; ch < d->c; ch++) {
        const float *xc = xi + (size_t)ch * d->h * d->w;
        for (int kr = 0; kr < d->r; kr++) {
            int lo = d->pad - kr > 0 ? d->pad - kr : 0;
            int hi = d->h + d->pad - kr < d->p ? d->h + d->pad - kr : d->p;
            if (hi < lo)
                hi = lo;
            for (int ks = 0; ks < d->s; ks++, row++) {
                float *dst = col + row * ld;
                int ow0, ow1;
                col_range(d, ks, &ow0, &ow1);
                memset(dst, 0, (size_t)lo * q * sizeof(float));
                memset(dst + (size_t)hi * q, 0, (size_t)(d->p - hi) * q * sizeof(float));
                const float *src = xc + (size_t)(lo - d->pad + kr) * d->w + (ow0 - d->pad + ks);
                float *o = dst + (size_t)lo * q;
                if (ow0 == 0 && ow1 == q) {
                    for (int oh = lo; oh < hi; oh++, o += q, src += d->w)
                        copy_run(o, src, q);
                } else {
                    for (int oh = lo; oh < hi; oh++, o += q, src += d->w) {
                        for (int ow = 0; ow < ow0; ow++)
                            o[ow] = 0.0f;
                        copy_run(o + ow0, src, ow1 - ow0);
                        for (int ow = ow1; ow < q; ow++)
                            o[ow] = 0.0f;
                    }
                }
            }
        }
    }
}

/* Unfolds images [n0+begin, n0+end) into their columns of col. */
static void im2col_task(void *arg, size_t begin, size_t end)
{
    const conv_task *ct = arg;
    const dl_conv_desc *d = ct->d;
    size_t pq = (size_t)d->p * d->q, ncols = (size_t)ct->nb * pq;
    float run_buf[512];
    for (size_t i = begin; i < end; i++) {
        const float *xi = ct->x + (size_t)(ct->n0 + i) * d->c * d->h * d->w;
        if (ct->compute == DL_F32 && d->stride == 1) {
            unfold_s1((float *)ct->col + i * pq, ncols, xi, d);
            continue;
        }
        size_t row = 0;
        for (int ch = 0; ch < d->c; ch++) {
            const float *xc = xi + (size_t)ch * d->h * d->w;
            for (int kr = 0; kr < d->r; kr++) {
                for (int ks = 0; ks < d->s; ks++, row++) {
                    int ow0, ow1;
                    col_range(d, ks, &ow0, &ow1);
                    size_t at = row * ncols + i * pq;
                    for (int oh = 0; oh < d->p; oh++, at += d->q) {
                        int ih = oh * d->stride - d->pad + kr;
                        float *v = d->q <= 512 ? run_buf : NULL;
                        float *dst = ct->compute == DL_F32 ? (float *)ct->col + at : v;
                        if (!dst) { /* a very wide output row: element by element */
                            for (int ow = 0; ow < d->q; ow++) {
                                int iw = ow * d->stride - d->pad + ks;
                                float e = ih >= 0 && ih < d->h && iw >= 0 && iw < d->w
                                              ? xc[(size_t)ih * d->w + iw]
                                              : 0.0f;
                                ((uint16_t *)ct->col)[at + ow] = to_half(e, ct->compute);
                            }
                            continue;
                        }
                        if (ih < 0 || ih >= d->h) {
                            memset(dst, 0, (size_t)d->q * sizeof(float));
                        } else {
                            const float *xr = xc + (size_t)ih * d->w;
                            int iw0 = ow0 * d->stride - d->pad + ks;
                            for (int ow = 0; ow < ow0; ow++)
                                dst[ow] = 0.0f;
                            if (d->stride == 1)
                                memcpy(dst + ow0, xr + iw0, (size_t)(ow1 - ow0) * sizeof(float));
                            else
                                for (int ow = ow0; ow < ow1; ow++)
                                    dst[ow] = xr[iw0 + (ow - ow0) * d->stride];
                            for (int ow = ow1; ow < d->q; ow++)
                                dst[ow] = 0.0f;
                        }
                        if (ct->compute != DL_F32)
                            store_run(ct->col, at, v, d->q, ct->compute);
                    }
                }
            }
        }
    }
}

/* Folds dcol (f32) columns of images [n0+begin, n0+end) back into dx (+=). */
static void col2im_task(void *arg, size_t begin, size_t end)
{
    const conv_task *ct = arg;
    const dl_conv_desc *d = ct->d;
    size_t pq = (size_t)d->p * d->q, ncols = (size_t)ct->nb * pq;
    for (size_t i = begin; i < end; i++) {
        float *dxi = ct->dx + (size_t)(ct->n0 + i) * d->c * d->h * d->w;
        size_t row = 0;
        for (int ch = 0; ch < d->c; ch++) {
            float *dxc = dxi + (size_t)ch * d->h * d->w;
            for (int kr = 0; kr < d->r; kr++) {
                for (int ks = 0; ks < d->s; ks++, row++) {
                    int ow0, ow1;
                    col_range(d, ks, &ow0, &ow1);
                    const float *src = (const float *)ct->col + row * ncols + i * pq;
                    for (int oh = 0; oh < d->p; oh++, src += d->q) {
                        int ih = oh * d->stride - d->pad + kr;
                        if (ih < 0 || ih >= d->h)
                            continue;
                        float *dst = dxc + (size_t)ih * d->w + (ow0 * d->stride - d->pad + ks);
                        if (d->stride == 1)
                            for (int ow = ow0; ow < ow1; ow++)
                                dst[ow - ow0] += src[ow];
                        else
                            for (int ow = ow0; ow < ow1; ow++)
                                dst[(ow - ow0) * d->stride] += src[ow];
                    }
                }
            }
        }
    }
}

/* t [k, nb*pq] (f32) -> y[n0+i] [k, pq] (+ b). */
static void t_to_y_task(void *arg, size_t begin, size_t end)
{
    const conv_task *ct = arg;
    const dl_conv_desc *d = ct->d;
    size_t pq = (size_t)d->p * d->q, ncols = (size_t)ct->nb * pq;
    for (size_t i = begin; i < end; i++) {
        float *yi = ct->y + (size_t)(ct->n0 + i) * d->k * pq;
        for (int kk = 0; kk < d->k; kk++) {
            const float *src = (const float *)ct->t + kk * ncols + i * pq;
            float *yk = yi + (size_t)kk * pq;
            float bias = ct->b ? ct->b[kk] : 0.0f;
            for (size_t j = 0; j < pq; j++)
                yk[j] = src[j] + bias;
        }
    }
}

/* dy[n0+i] [k, pq] -> t [k, nb*pq] in the compute dtype. */
static void dy_to_t_task(void *arg, size_t begin, size_t end)
{
    const conv_task *ct = arg;
    const dl_conv_desc *d = ct->d;
    size_t pq = (size_t)d->p * d->q, ncols = (size_t)ct->nb * pq;
    for (size_t i = begin; i < end; i++) {
        const float *dyi = ct->dy + (size_t)(ct->n0 + i) * d->k * pq;
        for (int kk = 0; kk < d->k; kk++)
            store_run(ct->t, kk * ncols + i * pq, dyi + kk * pq, (int)pq, ct->compute);
    }
}

/* ---------------------------------------------------------------------- */
/* direct kernels for one input channel, stride 1 (AVX-512)               */

/* Padded input plane limit of the direct kernels (floats, on the stack). */
#define DIRECT_PLANE 4096
#define DIRECT_RS 25
#define DIRECT_K 256

static int have_avx512(void) { return dl_cpu_avx512(); }

static int use_direct(const dl_conv_desc *d)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    if (d->c != 1 || d->stride != 1 || d->r * d->s > DIRECT_RS || d->k > DIRECT_K ||
        (size_t)(d->h + 2 * d->pad) * (d->w + 2 * d->pad) + 16 > DIRECT_PLANE ||
        (size_t)d->p * d->q > DIRECT_PLANE)
        return 0;
    return have_avx512();
#else
    (void)d;
    return 0;
#endif
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

#define DIRECT_TARGET __attribute__((target("avx512f")))

/* dst[0..n) = src rounded through bf16 and back, 16 lanes at a time. The
 * scalar rounding was most of the bf16 stem's time: its filter gradient
 * ran at a third of the f32 one. */
DIRECT_TARGET static void round_run_bf16(float *dst, const float *src, int n)
{
    for (int j = 0; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        _mm512_mask_storeu_ps(dst + j, m, dl_v512_round_bf16(_mm512_maskz_loadu_ps(m, src + j)));
    }
}

/* xp [(h+2pad) * (w+2pad)] = x plane zero-padded, rounded via compute;
 * 16 spare zeros at the end for the masked tails. */
static void padded_plane(float *xp, const float *x, const dl_conv_desc *d, dl_dtype compute)
{
    int wp = d->w + 2 * d->pad, hp = d->h + 2 * d->pad;
    if (d->pad)
        memset(xp, 0, ((size_t)hp * wp + 16) * sizeof(float));
    else
        memset(xp + (size_t)hp * wp, 0, 16 * sizeof(float));
    for (int ih = 0; ih < d->h; ih++) {
        float *dst = xp + (size_t)(ih + d->pad) * wp + d->pad;
        const float *src = x + (size_t)ih * d->w;
        if (compute == DL_F32)
            memcpy(dst, src, (size_t)d->w * sizeof(float));
        else if (compute == DL_BF16)
            round_run_bf16(dst, src, d->w);
        else
            for (int iw = 0; iw < d->w; iw++)
                dst[iw] = dl_cpu_round_to(src[iw], compute);
    }
}

typedef struct direct_task {
    const dl_conv_desc *d;
    dl_dtype compute;
    const float *x, *dy, *w, *b; /* w rounded via compute */
    float *y, *dw, *db;
} direct_task;

/* y of images [begin, end). */
DIRECT_TARGET static void direct_fwd_task(void *arg, size_t begin, size_t end)
{
    const direct_task *t = arg;
    const dl_conv_desc *d = t->d;
    int wp = d->w + 2 * d->pad, rs = d->r * d->s, pq = d->p * d->q;
    float xp[DIRECT_PLANE];
    for (size_t i = begin; i < end; i++) {
        padded_plane(xp, t->x + i * (size_t)d->h * d->w, d, t->compute);
        float *yi = t->y + i * (size_t)d->k * pq;
        for (int oh = 0; oh < d->p; oh++) {
            for (int ow = 0; ow < d->q; ow += 16) {
                int left = d->q - ow;
                __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
                __m512 xv[DIRECT_RS];
                for (int kr = 0, j = 0; kr < d->r; kr++)
                    for (int ks = 0; ks < d->s; ks++, j++)
                        xv[j] = _mm512_maskz_loadu_ps(m, xp + (size_t)(oh + kr) * wp + ow + ks);
                float *yo = yi + (size_t)oh * d->q + ow;
                for (int kk = 0; kk < d->k; kk++) {
                    const float *wk = t->w + (size_t)kk * rs;
                    __m512 acc = _mm512_set1_ps(t->b ? t->b[kk] : 0.0f);
                    for (int j = 0; j < rs; j++)
                        acc = _mm512_fmadd_ps(_mm512_set1_ps(wk[j]), xv[j], acc);
                    _mm512_mask_storeu_ps(yo + (size_t)kk * pq, m, acc);
                }
            }
        }
    }
}

/* dw, db of output channels [begin, end), summed over all images. */
DIRECT_TARGET static void direct_bwd_filter_task(void *arg, size_t begin, size_t end)
{
    const direct_task *t = arg;
    const dl_conv_desc *d = t->d;
    int wp = d->w + 2 * d->pad, rs = d->r * d->s, pq = d->p * d->q;
    float xp[DIRECT_PLANE], gp[DIRECT_PLANE];
    double sw[64 * DIRECT_RS], sb[64];
    for (size_t k0 = begin; k0 < end; k0 += 64) {
        size_t k1 = end - k0 > 64 ? k0 + 64 : end;
        memset(sw, 0, sizeof sw);
        memset(sb, 0, sizeof sb);
        for (int i = 0; i < d->n; i++) {
            padded_plane(xp, t->x + (size_t)i * d->h * d->w, d, t->compute);
            for (size_t kk = k0; kk < k1; kk++) {
                const float *g = t->dy + ((size_t)i * d->k + kk) * pq;
                if (t->compute == DL_BF16) {
                    round_run_bf16(gp, g, pq);
                    g = gp;
                } else if (t->compute != DL_F32) {
                    for (int j = 0; j < pq; j++)
                        gp[j] = dl_cpu_round_to(g[j], t->compute);
                    g = gp;
                }
                __m512 acc[DIRECT_RS], gs = _mm512_setzero_ps();
                for (int j = 0; j < rs; j++)
                    acc[j] = _mm512_setzero_ps();
                for (int oh = 0; oh < d->p; oh++) {
                    for (int ow = 0; ow < d->q; ow += 16) {
                        int left = d->q - ow;
                        __mmask16 m =
                            left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
                        __m512 gv = _mm512_maskz_loadu_ps(m, g + (size_t)oh * d->q + ow);
                        gs = _mm512_add_ps(gs, gv);
                        const float *xo = xp + (size_t)oh * wp + ow;
                        for (int kr = 0, j = 0; kr < d->r; kr++)
                            for (int ks = 0; ks < d->s; ks++, j++)
                                acc[j] = _mm512_fmadd_ps(
                                    gv, _mm512_loadu_ps(xo + (size_t)kr * wp + ks), acc[j]);
                    }
                }
                for (int j = 0; j < rs; j++)
                    sw[(kk - k0) * rs + j] += _mm512_reduce_add_ps(acc[j]);
                /* db sums dy itself, not its bf16/f16 rounding */
                sb[kk - k0] += t->compute == DL_F32
                                   ? (double)_mm512_reduce_add_ps(gs)
                                   : (double)plane_sum(t->dy + ((size_t)i * d->k + kk) * pq, pq);
            }
        }
        for (size_t kk = k0; kk < k1; kk++) {
            for (int j = 0; j < rs; j++)
                t->dw[kk * rs + j] += (float)sw[(kk - k0) * rs + j];
            if (t->db)
                t->db[kk] += (float)sb[kk - k0];
        }
    }
}
#endif

static int direct_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                          const float *w, const float *b, dl_dtype compute)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    float wr[DIRECT_K * DIRECT_RS];
    for (int j = 0; j < d->k * d->r * d->s; j++)
        wr[j] = dl_cpu_round_to(w[j], compute);
    direct_task t = {d, compute, x, NULL, wr, b, y, NULL, NULL};
    run(be, (size_t)d->n, direct_fwd_task, &t);
    return DL_OK;
#else
    return dl_error(DL_EINVAL, "conv_forward: no direct kernel");
#endif
}

/* ---------------------------------------------------------------------- */
/* sparse dy backward (f32, AVX-512)                                       */
/*
 * Behind ReLU and a 2x2 max pool at most a quarter of a convolution's dy
 * is nonzero. When the measured density of dy is under SPARSE_DENSITY,
 * both backward ops visit only the nonzeros, in a channels-last layout in
 * which the r*s*c inputs under one output pixel are r runs of s*c
 * contiguous floats:
 *   xh [n, hp, wp, c]   zero-padded x, channels last (workspace)
 *   wt [k, r, s, c]     w with channels last (workspace)
 *   filter  per output channel kk: acc [r, s, c] += g * (runs of xh under
 *           the pixel of g) for each nonzero g of the channel, then dw[kk]
 *           += acc permuted back to [c, r, s]; tasks split the channels;
 *   data    per image and output pixel: acc [r, s, c] += g_k * wt[k] for
 *           each nonzero g_k of the pixel (dy transposed to [pq, k]), added
 *           into a padded channels-last dx plane that is then added into
 *           dx; tasks split the images.
 * Kernel rows are done G at a time so that G*s*c/16 accumulators stay in
 * registers (sp_G_V below, V = s*c/16).
 */
#define SPARSE_DENSITY 0.3
#define SPARSE_PLANE 8192 /* floats per image on a task's stack: hp*wp*c and k*p*q */
#define SPARSE_K 1024
#define SPARSE_CRS 2048

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
typedef void (*sp_fn)(float *out, size_t ostride, const float *base, size_t bstride, const int *off,
                      const float *val, int cnt);

/* out[gr*ostride + 16u ...] += sum over e of val[e] * base[off[e] + gr*bstride + 16u ...]
 * for G rows of V vectors. */
#define SP_DEF(G, V)                                                                               \
    DIRECT_TARGET static void sp_##G##_##V(float *out, size_t os, const float *base, size_t bs,    \
                                           const int *off, const float *val, int cnt)              \
    {                                                                                              \
        __m512 acc[(G) * (V)];                                                                     \
        _Pragma("GCC unroll 32") for (int a = 0; a < (G) * (V); a++) acc[a] =                      \
            _mm512_loadu_ps(out + (size_t)(a / (V)) * os + 16 * (a % (V)));                        \
        for (int e = 0; e < cnt; e++) {                                                            \
            __m512 g = _mm512_set1_ps(val[e]);                                                     \
            const float *p = base + off[e];                                                        \
            _Pragma("GCC unroll 32") for (int a = 0; a < (G) * (V); a++) acc[a] = _mm512_fmadd_ps( \
                g, _mm512_loadu_ps(p + (size_t)(a / (V)) * bs + 16 * (a % (V))), acc[a]);          \
        }                                                                                          \
        _Pragma("GCC unroll 32") for (int a = 0; a < (G) * (V); a++)                               \
            _mm512_storeu_ps(out + (size_t)(a / (V)) * os + 16 * (a % (V)), acc[a]);               \
    }
// clang-format off: one kernel a line (clang-format joins macro calls without a semicolon)
SP_DEF(1, 1)
SP_DEF(1, 2)
SP_DEF(1, 3)
SP_DEF(1, 4)
SP_DEF(1, 5)
SP_DEF(1, 6)
SP_DEF(1, 7)
SP_DEF(1, 8)
SP_DEF(1, 9)
SP_DEF(1, 10)
SP_DEF(1, 11)
SP_DEF(1, 12)
SP_DEF(3, 1)
SP_DEF(3, 2)
SP_DEF(3, 3)
SP_DEF(3, 4)
SP_DEF(3, 5)
SP_DEF(3, 6)
SP_DEF(3, 7)
SP_DEF(3, 8)
// clang-format on
#undef SP_DEF

static const sp_fn sp_rows1[13] = {NULL,   sp_1_1, sp_1_2, sp_1_3,  sp_1_4,  sp_1_5, sp_1_6,
                                   sp_1_7, sp_1_8, sp_1_9, sp_1_10, sp_1_11, sp_1_12};
static const sp_fn sp_rows3[9] = {NULL,   sp_3_1, sp_3_2, sp_3_3, sp_3_4,
                                  sp_3_5, sp_3_6, sp_3_7, sp_3_8};

/* The kernel for d and the rows it does per call (*g). */
static sp_fn sp_pick(const dl_conv_desc *d, int *g)
{
    int v = d->s * d->c / 16;
    if (d->r == 3 && v <= 8) {
        *g = 3;
        return sp_rows3[v];
    }
    *g = 1;
    return v <= 12 ? sp_rows1[v] : NULL;
}

typedef struct sparse_task {
    const dl_conv_desc *d;
    const float *x, *dy, *w;
    float *dx, *dw, *db;
    float *xh, *wt;
    sp_fn fn;
    int g;
} sparse_task;

/* Compresses the nonzeros (NaN included) of v[0..n) into val, with
 * idx[j] in off; returns their count. val and off have room for n + 16. */
DIRECT_TARGET static int sp_nonzeros(const float *v, int n, const int *idx, int *off, float *val)
{
    int cnt = 0;
    for (int j = 0; j < n; j += 16) {
        int left = n - j;
        __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, v + j);
        __mmask16 nz = _mm512_mask_cmp_ps_mask(m, x, _mm512_setzero_ps(), _CMP_NEQ_UQ);
        if (!nz)
            continue;
        /* compress in registers, then a full store: a compressing store
         * to memory is microcoded (slow) on some CPUs */
        _mm512_storeu_ps(val + cnt, _mm512_maskz_compress_ps(nz, x));
        _mm512_storeu_si512(off + cnt,
                            _mm512_maskz_compress_epi32(nz, _mm512_maskz_loadu_epi32(m, idx + j)));
        cnt += __builtin_popcount(nz);
    }
    return cnt;
}

/* Offsets in a padded channels-last plane of the first input under each
 * output pixel. */
static void sp_pixel_offsets(const dl_conv_desc *d, int *poff)
{
    int wp = d->w + 2 * d->pad;
    for (int oh = 0, j = 0; oh < d->p; oh++)
        for (int ow = 0; ow < d->q; ow++, j++)
            poff[j] = ((oh * d->stride) * wp + ow * d->stride) * d->c;
}

/* xh of images [begin, end). */
static void sp_xh_task(void *arg, size_t begin, size_t end)
{
    const sparse_task *t = arg;
    const dl_conv_desc *d = t->d;
    int hp = d->h + 2 * d->pad, wp = d->w + 2 * d->pad;
    size_t plane = (size_t)hp * wp * d->c;
    for (size_t i = begin; i < end; i++) {
        float *xh = t->xh + i * plane;
        const float *xi = t->x + i * (size_t)d->c * d->h * d->w;
        if (d->pad)
            memset(xh, 0, plane * sizeof(float));
        for (int ih = 0; ih < d->h; ih++)
            for (int iw = 0; iw < d->w; iw++) {
                float *dst = xh + ((size_t)(ih + d->pad) * wp + iw + d->pad) * d->c;
                const float *src = xi + (size_t)ih * d->w + iw;
                for (int ch = 0; ch < d->c; ch++)
                    dst[ch] = src[(size_t)ch * d->h * d->w];
            }
    }
}

/* dw, db of output channels [begin, end). */
static void sp_filter_task(void *arg, size_t begin, size_t end)
{
    const sparse_task *t = arg;
    const dl_conv_desc *d = t->d;
    int hp = d->h + 2 * d->pad, wp = d->w + 2 * d->pad, pq = d->p * d->q;
    int sc = d->s * d->c, crs = d->r * sc;
    size_t plane = (size_t)hp * wp * d->c;
    int poff[SPARSE_PLANE], off[SPARSE_PLANE + 16];
    float val[SPARSE_PLANE + 16], acc[SPARSE_CRS];
    sp_pixel_offsets(d, poff);
    for (size_t kk = begin; kk < end; kk++) {
        memset(acc, 0, (size_t)crs * sizeof(float));
        double sb = 0.0;
        for (int i = 0; i < d->n; i++) {
            const float *g = t->dy + ((size_t)i * d->k + kk) * pq;
            int cnt = sp_nonzeros(g, pq, poff, off, val);
            if (!cnt)
                continue;
            sb += (double)plane_sum(val, cnt);
            const float *xh = t->xh + (size_t)i * plane;
            for (int kr = 0; kr < d->r; kr += t->g)
                t->fn(acc + (size_t)kr * sc, (size_t)sc, xh + (size_t)kr * wp * d->c,
                      (size_t)wp * d->c, off, val, cnt);
        }
        /* acc [r, s, c] -> dw [c, r, s] */
        float *dwk = t->dw + kk * (size_t)crs;
        for (int ch = 0; ch < d->c; ch++)
            for (int kr = 0; kr < d->r; kr++)
                for (int ks = 0; ks < d->s; ks++)
                    dwk[(ch * d->r + kr) * d->s + ks] += acc[kr * sc + ks * d->c + ch];
        if (t->db)
            t->db[kk] += (float)sb;
    }
}

/* dx of images [begin, end). */
static void sp_data_task(void *arg, size_t begin, size_t end)
{
    const sparse_task *t = arg;
    const dl_conv_desc *d = t->d;
    int hp = d->h + 2 * d->pad, wp = d->w + 2 * d->pad, pq = d->p * d->q;
    int sc = d->s * d->c, crs = d->r * sc;
    size_t plane = (size_t)hp * wp * d->c;
    int poff[SPARSE_PLANE], koff[SPARSE_K], off[SPARSE_K + 16];
    float dyt[SPARSE_PLANE], dxh[SPARSE_PLANE], val[SPARSE_K + 16];
    sp_pixel_offsets(d, poff);
    for (int kk = 0; kk < d->k; kk++)
        koff[kk] = kk * crs;
    for (size_t i = begin; i < end; i++) {
        /* dy [k, pq] -> dyt [pq, k] */
        const float *g = t->dy + i * (size_t)d->k * pq;
        for (int kk = 0; kk < d->k; kk++)
            for (int j = 0; j < pq; j++)
                dyt[(size_t)j * d->k + kk] = g[(size_t)kk * pq + j];
        memset(dxh, 0, plane * sizeof(float));
        for (int j = 0; j < pq; j++) {
            int cnt = sp_nonzeros(dyt + (size_t)j * d->k, d->k, koff, off, val);
            if (!cnt)
                continue;
            for (int kr = 0; kr < d->r; kr += t->g)
                t->fn(dxh + poff[j] + (size_t)kr * wp * d->c, (size_t)wp * d->c,
                      t->wt + (size_t)kr * sc, (size_t)sc, off, val, cnt);
        }
        float *dxi = t->dx + i * (size_t)d->c * d->h * d->w;
        for (int ch = 0; ch < d->c; ch++)
            for (int ih = 0; ih < d->h; ih++) {
                float *dst = dxi + ((size_t)ch * d->h + ih) * d->w;
                const float *src = dxh + ((size_t)(ih + d->pad) * wp + d->pad) * d->c + ch;
                for (int iw = 0; iw < d->w; iw++)
                    dst[iw] += src[(size_t)iw * d->c];
            }
    }
}

/* Fraction of nonzero (or NaN) values in v[0..n). */
DIRECT_TARGET static double density(const float *v, size_t n)
{
    size_t nz = 0;
    for (size_t i = 0; i < n; i += 16) {
        size_t left = n - i;
        __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, v + i);
        nz += (size_t)__builtin_popcount(
            _mm512_mask_cmp_ps_mask(m, x, _mm512_setzero_ps(), _CMP_NEQ_UQ));
    }
    return n ? (double)nz / (double)n : 0.0;
}
#endif

/* Whether the sparse backward applies to d at all (density aside). */
static int sparse_fits(const dl_conv_desc *d, dl_dtype compute)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    int g;
    if (compute != DL_F32 || d->c % 16 || d->k > SPARSE_K ||
        (size_t)d->c * d->r * d->s > SPARSE_CRS ||
        (size_t)(d->h + 2 * d->pad) * (d->w + 2 * d->pad) * d->c > SPARSE_PLANE ||
        (size_t)d->k * d->p * d->q > SPARSE_PLANE || !sp_pick(d, &g))
        return 0;
    return have_avx512();
#else
    (void)d;
    (void)compute;
    return 0;
#endif
}

/* Workspace bytes of the sparse path: xh then wt. */
static size_t sparse_workspace(const dl_conv_desc *d)
{
    size_t plane = (size_t)(d->h + 2 * d->pad) * (d->w + 2 * d->pad) * d->c;
    return ((size_t)d->n * plane + (size_t)d->k * d->c * d->r * d->s) * sizeof(float) + 128;
}

/* The sparse path for this call: it fits and dy is sparse enough. */
static int use_sparse(const dl_conv_desc *d, dl_dtype compute, const float *dy)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    return sparse_fits(d, compute) &&
           density(dy, (size_t)d->n * d->k * d->p * d->q) < SPARSE_DENSITY;
#else
    (void)dy;
    return sparse_fits(d, compute);
#endif
}

static void sparse_carve(sparse_task *t, const dl_conv_desc *d, void *ws)
{
    size_t plane = (size_t)(d->h + 2 * d->pad) * (d->w + 2 * d->pad) * d->c;
    t->xh = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    t->wt = t->xh + (((size_t)d->n * plane + 15) & ~(size_t)15);
}

/* ---------------------------------------------------------------------- */
/* entry points                                                            */

/* y [n, k, p, q] = conv(x [n, c, h, w], w [k, c, r, s]) + b [k] (b may be
 * NULL). ws holds dl_cpu_conv_workspace(d, compute) bytes. Returns DL_OK,
 * or DL_EINVAL/DL_ESHAPE for a bad descriptor (y untouched). */
/* f32 forward image by image: each part of the batch unfolds one image at
 * a time into its own slice of the workspace, col_i [crs, pq] (an L2-sized
 * block), and multiplies straight into y_i [k, pq] = w . col_i, which is
 * already y's layout: no t buffer, no copy, and the columns are still in
 * cache for the product. Parts run on the pool; each product runs on one
 * thread, so the result does not depend on the thread count. */
typedef struct image_task {
    const dl_conv_desc *d;
    const float *x, *w, *b;
    float *y, *col;
    size_t slice; /* floats of one part's col */
    int parts;
} image_task;

static void fwd_image_task(void *arg, size_t begin, size_t end)
{
    const image_task *t = arg;
    const dl_conv_desc *d = t->d;
    int pq = d->p * d->q, crs = d->c * d->r * d->s;
    for (size_t part = begin; part < end; part++) {
        float *col = t->col + part * t->slice;
        int i0 = (int)(part * (size_t)d->n / (size_t)t->parts);
        int i1 = (int)((part + 1) * (size_t)d->n / (size_t)t->parts);
        for (int i = i0; i < i1; i++) {
            unfold_s1(col, (size_t)pq, t->x + (size_t)i * d->c * d->h * d->w, d);
            float *yi = t->y + (size_t)i * d->k * pq;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d->k, pq, crs, 1.0f, t->w, crs,
                        col, pq, 0.0f, yi, pq);
            if (t->b)
                for (int kk = 0; kk < d->k; kk++) {
                    float *yk = yi + (size_t)kk * pq, bias = t->b[kk];
                    for (int j = 0; j < pq; j++)
                        yk[j] += bias;
                }
        }
    }
}

/* Outputs of at least this many pixels per image go image by image (a
 * product of width pq keeps OpenBLAS near its peak); smaller ones batch
 * images into one wide product. */
#define IMAGE_MIN_PQ 100

int dl_cpu_conv_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                        const float *w, const float *b, void *ws, dl_dtype compute)
{
    if (d->x_blk || d->y_blk)
        return blocked_conv(be, 0, d, compute, y, NULL, x, NULL, w, b, ws);
    if (is_grouped(d)) {
        int done = grouped_dnnl(be, 0, d, compute, y, x, NULL, w, b, "conv_forward");
        if (done)
            return done < 0 ? done : DL_OK;
        return dl_cpu_conv_grouped_forward(be, d, y, x, w, b, ws, compute);
    }
    DL_TRY(check_desc(d, compute, "conv_forward"));
    if (dl_cpu_conv_bf16_forward_fits(be, d, compute))
        return dl_cpu_conv_bf16_forward(be, d, y, x, w, b, ws);
    if (use_1x1(be, d, compute))
        return dl_cpu_conv_1x1_forward(be, d, y, x, w, b, ws, compute);
    int done = dl_cpu_dnnl_conv_wanted_dir(d, dl_cpu_kernel_type(be, compute), 0)
                   ? dl_cpu_dnnl_conv(be, 0, d, compute, y, NULL, x, NULL, w, b)
                   : 0;
    if (done)
        return done < 0 ? done : DL_OK;
    if (dl_cpu_conv_small_fits(d, compute))
        return dl_cpu_conv_small_forward(be, d, y, x, w, b, compute);
    if (use_direct(d))
        return direct_forward(be, d, y, x, w, b, compute);
    conv_work cw;
    carve(&cw, d, ws, compute);
    int threads = dl_cpu(be)->pool ? dl_pool_threads(dl_cpu(be)->pool) : 1;
    if (compute == DL_F32 && d->stride == 1 && d->p * d->q >= IMAGE_MIN_PQ && threads <= cw.chunk) {
        int parts = threads < d->n ? threads : d->n;
        image_task t = {d, x, w, b, y, cw.col, (size_t)d->c * d->r * d->s * d->p * d->q, parts};
        run(be, (size_t)parts, fwd_image_task, &t);
        return DL_OK;
    }
    int pq = d->p * d->q, crs = d->c * d->r * d->s;
    const void *wop = gemm_weights(&cw, d, w, compute);
    for (int n0 = 0; n0 < d->n; n0 += cw.chunk) {
        int nb = d->n - n0 < cw.chunk ? d->n - n0 : cw.chunk;
        conv_task ct = {d, compute, n0, nb, x, NULL, b, y, NULL, cw.col, cw.t};
        run(be, (size_t)nb, im2col_task, &ct);
        /* t [k, nb*pq] = w [k, crs] . col [crs, nb*pq] */
        DL_TRY(dl_cpu_gemm(be, 0, 0, d->k, nb * pq, crs, 1.0f, wop, crs, cw.col, nb * pq, compute,
                           0.0f, cw.t, nb * pq));
        run(be, (size_t)nb, t_to_y_task, &ct);
    }
    return DL_OK;
}

/* dx [n, c, h, w] += conv_transpose(dy [n, k, p, q], w [k, c, r, s]), or
 * = when set: oneDNN writes it from its own layout, the other kernels add
 * into a zeroed dx. */
static int backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                         const float *w, void *ws, dl_dtype compute, int set)
{
    size_t dx_bytes = (size_t)d->n * d->c * d->h * d->w * sizeof(float);
    if (d->x_blk || d->y_blk)
        return blocked_conv(be, set ? 3 : 1, d, compute, dx, NULL, dy, NULL, w, NULL, ws);
    if (is_grouped(d)) {
        int done =
            grouped_dnnl(be, set ? 3 : 1, d, compute, dx, dy, NULL, w, NULL, "conv_backward_data");
        if (done)
            return done < 0 ? done : DL_OK;
        return dl_cpu_conv_grouped_backward_data(be, d, dx, dy, w, ws, compute, set);
    }
    DL_TRY(check_desc(d, compute, "conv_backward_data"));
    if (dl_cpu_conv_bf16_data_fits(be, d, compute))
        return dl_cpu_conv_bf16_backward_data(be, d, dx, dy, w, ws, set);
    if (use_1x1(be, d, compute))
        return dl_cpu_conv_1x1_backward_data(be, d, dx, dy, w, ws, compute, set);
    int done = dl_cpu_dnnl_conv_wanted_dir(d, dl_cpu_kernel_type(be, compute), 1)
                   ? dl_cpu_dnnl_conv(be, set ? 3 : 1, d, compute, dx, NULL, dy, NULL, w, NULL)
                   : 0;
    if (done)
        return done < 0 ? done : DL_OK;
    if (set)
        memset(dx, 0, dx_bytes);
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    if (use_sparse(d, compute, dy)) {
        sparse_task t = {d, NULL, dy, w, dx, NULL, NULL, NULL, NULL, NULL, 0};
        sparse_carve(&t, d, ws);
        t.fn = sp_pick(d, &t.g);
        /* wt [k, r, s, c] */
        int crs = d->c * d->r * d->s;
        for (int kk = 0; kk < d->k; kk++)
            for (int ch = 0; ch < d->c; ch++)
                for (int kr = 0; kr < d->r; kr++)
                    for (int ks = 0; ks < d->s; ks++)
                        t.wt[(size_t)kk * crs + (kr * d->s + ks) * d->c + ch] =
                            w[(size_t)kk * crs + (ch * d->r + kr) * d->s + ks];
        run(be, (size_t)d->n, sp_data_task, &t);
        return DL_OK;
    }
#endif
    conv_work cw;
    carve(&cw, d, ws, compute);
    int pq = d->p * d->q, crs = d->c * d->r * d->s;
    const void *wop = gemm_weights(&cw, d, w, compute);
    for (int n0 = 0; n0 < d->n; n0 += cw.chunk) {
        int nb = d->n - n0 < cw.chunk ? d->n - n0 : cw.chunk;
        conv_task ct = {d, compute, n0, nb, NULL, dx, NULL, NULL, dy, cw.col, cw.t};
        run(be, (size_t)nb, dy_to_t_task, &ct);
        /* dcol [crs, nb*pq] (f32) = w^T [crs, k] . t [k, nb*pq] */
        DL_TRY(dl_cpu_gemm(be, 1, 0, crs, nb * pq, d->k, 1.0f, wop, crs, cw.t, nb * pq, compute,
                           0.0f, cw.col, nb * pq));
        run(be, (size_t)nb, col2im_task, &ct);
    }
    return DL_OK;
}

int dl_cpu_conv_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                              const float *w, void *ws, dl_dtype compute)
{
    return backward_data(be, d, dx, dy, w, ws, compute, 0);
}

int dl_cpu_conv_backward_data_set(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                  const float *w, void *ws, dl_dtype compute)
{
    return backward_data(be, d, dx, dy, w, ws, compute, 1);
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
        for (int i = 0; i < t->d->n; i++)
            s += plane_sum(t->dy + ((size_t)i * t->d->k + kk) * pq, pq);
        t->db[kk] += (float)s;
    }
}

/* db += the sums of dy over images and pixels as the filter gradient
 * makes them (db may be NULL): bdb_fn's for dy in blocks, else
 * db_task_fn's (a plain dy, x blocked or not: bdb_fn's one-channel
 * blocks summed a value at a time on one double chain, 11% of the
 * benchmark CNN's step for its last convolution, whose y the Flatten
 * keeps plain). */
static void conv_db(dl_backend *be, const dl_conv_desc *d, float *db, const float *dy)
{
    if (!db)
        return;
    if (d->y_blk) {
        bdb_task t = {d, db, dy};
        dl_pool_for(dl_cpu(be)->pool, (size_t)(d->k / d->y_blk), 1, bdb_fn, &t);
    } else {
        db_task t = {d, db, dy};
        dl_pool_for(dl_cpu(be)->pool, (size_t)d->k, 8, db_task_fn, &t);
    }
}

/* dw [k, c, r, s] += sum over images of dy (x) unfolded x; db [k] += sum
 * of dy over images and pixels (db may be NULL). */
int dl_cpu_conv_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                const float *dy, const float *x, void *ws, dl_dtype compute)
{
    /* blocked: oneDNN's dw and db (its per-chunk sums, added in order) */
    if (d->x_blk || d->y_blk)
        return blocked_conv(be, 2, d, compute, dw, db, x, dy, NULL, NULL, ws);
    /* the own bf16 kernel's or oneDNN's dw (grouped or dilated: oneDNN's
     * or the grouped path's); db as below, summed in double */
    int done = 0;
    if (is_grouped(d)) {
        done = grouped_dnnl(be, 2, d, compute, dw, x, dy, NULL, NULL, "conv_backward_filter");
        if (!done)
            return dl_cpu_conv_grouped_backward_filter(be, d, dw, db, dy, x, ws, compute);
    } else {
        DL_TRY(check_desc(d, compute, "conv_backward_filter"));
        if (dl_cpu_conv_bf16_filter_fits(be, d, compute)) {
            DL_TRY(dl_cpu_conv_bf16_backward_filter(be, d, dw, dy, x, ws));
            done = 1;
        } else if (use_1x1(be, d, compute)) {
            return dl_cpu_conv_1x1_backward_filter(be, d, dw, db, dy, x, ws, compute);
        } else if (dl_cpu_conv_small_filter_fits(d, compute)) {
            DL_TRY(dl_cpu_conv_small_filter(be, d, dw, dy, x, compute));
            done = 1;
        } else if (dl_cpu_dnnl_conv_wanted_dir(d, dl_cpu_kernel_type(be, compute), 2)) {
            done = dl_cpu_dnnl_conv(be, 2, d, compute, dw, NULL, x, dy, NULL, NULL);
        }
    }
    if (done < 0)
        return done;
    if (done) {
        conv_db(be, d, db, dy);
        return DL_OK;
    }
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    if (use_direct(d)) {
        direct_task t = {d, compute, x, dy, NULL, NULL, NULL, dw, db};
        run(be, (size_t)d->k, direct_bwd_filter_task, &t);
        return DL_OK;
    }
    if (use_sparse(d, compute, dy)) {
        sparse_task t = {d, x, dy, NULL, NULL, dw, db, NULL, NULL, NULL, 0};
        sparse_carve(&t, d, ws);
        t.fn = sp_pick(d, &t.g);
        run(be, (size_t)d->n, sp_xh_task, &t);
        run(be, (size_t)d->k, sp_filter_task, &t);
        return DL_OK;
    }
#endif
    conv_work cw;
    carve(&cw, d, ws, compute);
    int pq = d->p * d->q, crs = d->c * d->r * d->s;
    for (int n0 = 0; n0 < d->n; n0 += cw.chunk) {
        int nb = d->n - n0 < cw.chunk ? d->n - n0 : cw.chunk;
        conv_task ct = {d, compute, n0, nb, x, NULL, NULL, NULL, dy, cw.col, cw.t};
        run(be, (size_t)nb, im2col_task, &ct);
        run(be, (size_t)nb, dy_to_t_task, &ct);
        /* dw [k, crs] += t [k, nb*pq] . col^T [nb*pq, crs] */
        DL_TRY(dl_cpu_gemm(be, 0, 1, d->k, crs, nb * pq, 1.0f, cw.t, nb * pq, cw.col, nb * pq,
                           compute, 1.0f, dw, crs));
    }
    conv_db(be, d, db, dy);
    return DL_OK;
}

/* Whether both backward directions of d run oneDNN's kernels, as the
 * filter and data ops above route them (< 0: d is invalid). */
static int dnnl_takes_backward(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    dl_dtype pt = dl_cpu_kernel_type(be, compute);
    if (d->x_blk || d->y_blk) {
        DL_TRY(check_blocked(d, compute));
        if (dl_cpu_conv_1x1_blocked_takes(be, d, compute, 1) ||
            dl_cpu_conv_1x1_blocked_takes(be, d, compute, 2) ||
            dl_cpu_conv_wino_takes(be, d, compute, 1) || dl_cpu_conv_wino_takes(be, d, compute, 2))
            return 0;
    } else if (is_grouped(d) || check_desc(d, compute, "conv_backward") < 0 ||
               dl_cpu_conv_bf16_data_fits(be, d, compute) ||
               dl_cpu_conv_bf16_filter_fits(be, d, compute) || use_1x1(be, d, compute))
        return 0;
    return dl_cpu_dnnl_conv_wanted_dir(d, pt, 1) && dl_cpu_dnnl_conv_wanted_dir(d, pt, 2);
}

int dl_cpu_conv_backward(dl_backend *be, const dl_conv_desc *d, float *dw, float *db, float *dx,
                         int set, const float *dy, const float *x, const float *w, void *ws,
                         dl_dtype compute)
{
    int takes = dx ? dnnl_takes_backward(be, d, compute) : 0;
    if (takes < 0)
        return takes;
    int done = takes ? dl_cpu_dnnl_conv_backward(be, d, compute, dw, dx, set, x, dy, w) : 0;
    if (done < 0)
        return done;
    if (done) {
        conv_db(be, d, db, dy); /* as the filter op sums it on each path */
        return DL_OK;
    }
    DL_TRY(dl_cpu_conv_backward_filter(be, d, dw, db, dy, x, ws, compute));
    return dx ? backward_data(be, d, dx, dy, w, ws, compute, set) : DL_OK;
}

/* ---------------------------------------------------------------------- */
/* pooling                                                                 */

typedef struct pool_task {
    const dl_pool_desc *d;
    dl_pool_kind kind;
    float *y, *dx;
    const float *x, *dy, *yc;
    int avx512; /* the CPU has AVX-512F */
    int relu;   /* max pooling of relu(x) (the fused ReLU -> MaxPool2d) */
    int set;    /* backward writes dx instead of adding to it */
    int max3;   /* max pooling by cpu_pool3.c (dl_cpu_max3s2_takes) */
    int avg3;   /* average pooling by cpu_pool3.c (dl_cpu_avg3s1_takes) */
} pool_task;

/* x as the pooling sees it: relu(x) when fused (NaN maps to 0, as in the
 * ReLU kernel). */
static inline float pool_in(const pool_task *t, float x) { return !t->relu || x > 0 ? x : 0; }

/* The common 2x2, stride 2, unpadded max pooling, without window
 * clipping; same results as the general loops (NaN wins, first maximum
 * gets the gradient). */
static int is_max2(const pool_task *t)
{
    const dl_pool_desc *d = t->d;
    return t->kind == DL_POOL_MAX && d->size == 2 && d->stride == 2 && d->pad == 0;
}

static inline float max_step(float v, float x) { return (x > v) | (x != x) ? x : v; }

/* max_step and pool_in for the scalar 2x2 loops, without branches where
 * the build has SSE4.1 (random data makes the compares coin tosses). */
#ifdef __AVX2__
static inline float max_step_nb(float v, float x)
{
    __m128 X = _mm_set_ss(x), m = _mm_max_ss(X, _mm_set_ss(v)); /* x > v ? x : v */
    return _mm_cvtss_f32(_mm_blendv_ps(m, X, _mm_cmpunord_ss(X, X)));
}
static inline float pool_in_nb(const pool_task *t, float x)
{
    if (!t->relu)
        return x;
    __m128 X = _mm_set_ss(x);
    return _mm_cvtss_f32(_mm_and_ps(X, _mm_cmpgt_ss(X, _mm_setzero_ps())));
}
#else
#define max_step_nb max_step
#define pool_in_nb pool_in
#endif

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
/* Vector max_step: x where x > v or x is NaN. maxps(x, v) is x > v ? x :
 * v (v where x is NaN, v on ties, so the first of equal zeros), then x
 * where it is NaN. */
DIRECT_TARGET static inline __m512 vmax_step(__m512 v, __m512 x)
{
    return _mm512_mask_mov_ps(_mm512_max_ps(x, v), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}
#define VMAX_STEP(v, x) vmax_step(v, x)

/* relu: x where x > 0, else 0 (NaN too). */
#define VRELU(x) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), x)

/* 16 outputs at a time: even and odd input columns split with permutes;
 * masked loads and stores cover the row tails (w may be odd: the last
 * column is never read then). */
DIRECT_TARGET static void max2_fwd_avx512(const pool_task *t, size_t pl)
{
    const dl_pool_desc *d = t->d;
    const float *xp = t->x + pl * d->h * d->w;
    float *yp = t->y + pl * d->p * d->q;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    for (int oh = 0; oh < d->p; oh++) {
        const float *r0 = xp + (size_t)(2 * oh) * d->w, *r1 = r0 + d->w;
        for (int ow = 0; ow < d->q; ow += 16) {
            int left = d->q - ow, in = 2 * (left < 16 ? left : 16);
            __mmask16 mo = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            __mmask16 ml = in >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << in) - 1);
            __mmask16 mh =
                in >= 32 ? (__mmask16)0xffff : (__mmask16)((1u << (in > 16 ? in - 16 : 0)) - 1);
            const float *a = r0 + 2 * ow, *b = r1 + 2 * ow;
            __m512 a0 = _mm512_maskz_loadu_ps(ml, a), a1 = _mm512_maskz_loadu_ps(mh, a + 16);
            __m512 b0 = _mm512_maskz_loadu_ps(ml, b), b1 = _mm512_maskz_loadu_ps(mh, b + 16);
            if (t->relu) {
                a0 = VRELU(a0);
                a1 = VRELU(a1);
                b0 = VRELU(b0);
                b1 = VRELU(b1);
            }
            __m512 v = _mm512_permutex2var_ps(a0, ev, a1);
            __m512 x = _mm512_permutex2var_ps(a0, od, a1);
            v = VMAX_STEP(v, x);
            x = _mm512_permutex2var_ps(b0, ev, b1);
            v = VMAX_STEP(v, x);
            x = _mm512_permutex2var_ps(b0, od, b1);
            v = VMAX_STEP(v, x);
            _mm512_mask_storeu_ps(yp + (size_t)oh * d->q + ow, mo, v);
        }
    }
}

DIRECT_TARGET static void max2_bwd_avx512(const pool_task *t, size_t pl)
{
    const dl_pool_desc *d = t->d;
    const float *xp = t->x + pl * d->h * d->w;
    const float *yp = t->yc + pl * d->p * d->q;
    const float *dyp = t->dy + pl * d->p * d->q;
    float *dxp = t->dx + pl * d->h * d->w;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    /* interleave even (first operand) and odd (second) back into columns */
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    for (int oh = 0; oh < d->p; oh++) {
        const float *r0 = xp + (size_t)(2 * oh) * d->w, *r1 = r0 + d->w;
        float *g0 = dxp + (size_t)(2 * oh) * d->w, *g1 = g0 + d->w;
        for (int ow = 0; ow < d->q; ow += 16) {
            int left = d->q - ow, in = 2 * (left < 16 ? left : 16);
            __mmask16 mo = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            __mmask16 ml = in >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << in) - 1);
            __mmask16 mh =
                in >= 32 ? (__mmask16)0xffff : (__mmask16)((1u << (in > 16 ? in - 16 : 0)) - 1);
            size_t c = 2 * (size_t)ow;
            __m512 a0 = _mm512_maskz_loadu_ps(ml, r0 + c),
                   a1 = _mm512_maskz_loadu_ps(mh, r0 + c + 16);
            __m512 b0 = _mm512_maskz_loadu_ps(ml, r1 + c),
                   b1 = _mm512_maskz_loadu_ps(mh, r1 + c + 16);
            __m512 m = _mm512_maskz_loadu_ps(mo, yp + (size_t)oh * d->q + ow);
            __m512 g = _mm512_maskz_loadu_ps(mo, dyp + (size_t)oh * d->q + ow);
            if (t->relu) {
                a0 = VRELU(a0);
                a1 = VRELU(a1);
                b0 = VRELU(b0);
                b1 = VRELU(b1);
                /* relu'(x) of the chosen cell is 1 exactly when the max is > 0 */
                mo &= _mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_GT_OQ);
            }
            __mmask16 e0 =
                _mm512_cmp_ps_mask(_mm512_permutex2var_ps(a0, ev, a1), m, _CMP_EQ_OQ) & mo;
            __mmask16 e1 =
                _mm512_cmp_ps_mask(_mm512_permutex2var_ps(a0, od, a1), m, _CMP_EQ_OQ) & mo & ~e0;
            __mmask16 e2 = _mm512_cmp_ps_mask(_mm512_permutex2var_ps(b0, ev, b1), m, _CMP_EQ_OQ) &
                           mo & ~(e0 | e1);
            __mmask16 e3 = _mm512_cmp_ps_mask(_mm512_permutex2var_ps(b0, od, b1), m, _CMP_EQ_OQ) &
                           mo & ~(e0 | e1 | e2);
            /* the other cells' 0 when writing, else -0 (which keeps a dx of -0) */
            const __m512 other = _mm512_set1_ps(t->set ? 0.0f : -0.0f);
            __m512 ga = _mm512_mask_mov_ps(other, e0, g), gb = _mm512_mask_mov_ps(other, e1, g);
            __m512 gc = _mm512_mask_mov_ps(other, e2, g), gd = _mm512_mask_mov_ps(other, e3, g);
            __m512 v00 = _mm512_permutex2var_ps(ga, lo, gb),
                   v01 = _mm512_permutex2var_ps(ga, hi, gb);
            __m512 v10 = _mm512_permutex2var_ps(gc, lo, gd),
                   v11 = _mm512_permutex2var_ps(gc, hi, gd);
            if (!t->set) {
                v00 = _mm512_add_ps(_mm512_maskz_loadu_ps(ml, g0 + c), v00);
                v01 = _mm512_add_ps(_mm512_maskz_loadu_ps(mh, g0 + c + 16), v01);
                v10 = _mm512_add_ps(_mm512_maskz_loadu_ps(ml, g1 + c), v10);
                v11 = _mm512_add_ps(_mm512_maskz_loadu_ps(mh, g1 + c + 16), v11);
            }
            _mm512_mask_storeu_ps(g0 + c, ml, v00);
            _mm512_mask_storeu_ps(g0 + c + 16, mh, v01);
            _mm512_mask_storeu_ps(g1 + c, ml, v10);
            _mm512_mask_storeu_ps(g1 + c + 16, mh, v11);
        }
    }
}

/* Small planes (w <= 32, so q <= 16): a block of g = 32 / w row pairs,
 * at most 64 floats of x in four vectors, gives g * q outputs in one
 * vector, whatever the plane size; blocks run on across planes when h is
 * even (row pairs are then evenly spaced through the whole range). Each
 * output lane takes its four window cells from the four vectors with two
 * permutes and a blend; the maximum ((a0 . a1) . (b0 . b1)) equals the
 * row-major scan's (max_step keeps the last NaN, else the first maximum,
 * and that does not depend on the grouping). The backward compares x
 * with y spread back over the cells, picks the first equal cell of each
 * window with bit operations on the block's 64-bit mask and sends dy
 * there. */
typedef struct max2s {
    int w, q, g;
    int cell[4][16];   /* per window cell (a0 a1 b0 b1): x offset in the block per output lane */
    int owner[64];     /* per x offset in the block: its output lane */
    uint64_t where[4]; /* per window cell: the x offsets it takes, as bits */
    int pair[2][16];   /* w even: the upper and lower pair's index among the block's
                        * 32 pairs of neighbours (x[2i], x[2i + 1]) per output lane */
} max2s;

static int max2s_fits(const dl_pool_desc *d) { return d->w >= 2 && d->w <= 32; }

static void max2s_init(max2s *b, const dl_pool_desc *d)
{
    memset(b, 0, sizeof *b);
    b->w = d->w, b->q = d->q, b->g = 32 / d->w;
    for (int o = 0; o < b->g * b->q; o++) {
        int f = o / b->q * 2 * b->w + 2 * (o % b->q);
        int at[4] = {f, f + 1, f + b->w, f + b->w + 1};
        for (int c = 0; c < 4; c++) {
            b->cell[c][o] = at[c];
            b->owner[at[c]] = o;
            b->where[c] |= 1ull << at[c];
        }
        b->pair[0][o] = f / 2, b->pair[1][o] = (f + b->w) / 2;
    }
}

/* The first n of 64 bits. */
static inline uint64_t bits64(int n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

#define VLOAD_IDX(p) _mm512_loadu_si512((const void *)(p))
#define INLINE512 DIRECT_TARGET static inline __attribute__((always_inline))

/* The four x vectors of a block, the lanes of `valid` loaded (the others
 * 0), relu'd when fused. */
typedef struct xblock {
    __m512 v0, v1, v2, v3;
} xblock;

INLINE512 xblock max2s_load(const float *xb, uint64_t valid, int relu)
{
    xblock X = {_mm512_maskz_loadu_ps((__mmask16)valid, xb),
                _mm512_maskz_loadu_ps((__mmask16)(valid >> 16), xb + 16),
                _mm512_maskz_loadu_ps((__mmask16)(valid >> 32), xb + 32),
                _mm512_maskz_loadu_ps((__mmask16)(valid >> 48), xb + 48)};
    if (relu) {
        X.v0 = VRELU(X.v0), X.v1 = VRELU(X.v1);
        X.v2 = VRELU(X.v2), X.v3 = VRELU(X.v3);
    }
    return X;
}

/* Lane o: x[i[o]] of the block's 64 floats (hi: the lanes with i >= 32). */
INLINE512 __m512 max2s_cell(const xblock *X, __m512i i, __mmask16 hi)
{
    return _mm512_mask_blend_ps(hi, _mm512_permutex2var_ps(X->v0, i, X->v1),
                                _mm512_permutex2var_ps(X->v2, i, X->v3));
}

/* w even: the maxima of the block's 32 pairs of neighbours, (x[2i] .
 * x[2i + 1]) in P0 (i < 16) and P1, then of the upper and the lower pair
 * of each window. */
INLINE512 __m512 max2s_even(const xblock *X, __m512i up, __m512i lo)
{
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    __m512 p0 = VMAX_STEP(_mm512_permutex2var_ps(X->v0, ev, X->v1),
                          _mm512_permutex2var_ps(X->v0, od, X->v1));
    __m512 p1 = VMAX_STEP(_mm512_permutex2var_ps(X->v2, ev, X->v3),
                          _mm512_permutex2var_ps(X->v2, od, X->v3));
    return VMAX_STEP(_mm512_permutex2var_ps(p0, up, p1), _mm512_permutex2var_ps(p0, lo, p1));
}

INLINE512 void max2s_fwd_body(const max2s *b, const float *x, float *y, size_t pairs, int relu,
                              int even)
{
    const __m512i up = VLOAD_IDX(b->pair[0]), lo = VLOAD_IDX(b->pair[1]);
    const __m512i i0 = VLOAD_IDX(b->cell[0]), i1 = VLOAD_IDX(b->cell[1]);
    const __m512i i2 = VLOAD_IDX(b->cell[2]), i3 = VLOAD_IDX(b->cell[3]);
    const __m512i top = _mm512_set1_epi32(31);
    const __mmask16 h0 = _mm512_cmpgt_epi32_mask(i0, top), h1 = _mm512_cmpgt_epi32_mask(i1, top);
    const __mmask16 h2 = _mm512_cmpgt_epi32_mask(i2, top), h3 = _mm512_cmpgt_epi32_mask(i3, top);
    const size_t in = 2 * (size_t)b->w, g = (size_t)b->g, q = (size_t)b->q;
    const uint64_t full = bits64((int)(g * in));
    const __mmask16 fo = (__mmask16)bits64((int)(g * q));
    for (size_t r = 0; r < pairs; r += g) {
        uint64_t valid = full;
        __mmask16 mo = fo;
        if (pairs - r < g) {
            valid = bits64((int)((pairs - r) * in));
            mo = (__mmask16)bits64((int)((pairs - r) * q));
        }
        xblock X = max2s_load(x + r * in, valid, relu);
        if (even) {
            _mm512_mask_storeu_ps(y + r * q, mo, max2s_even(&X, up, lo));
            continue;
        }
        __m512 a = VMAX_STEP(max2s_cell(&X, i0, h0), max2s_cell(&X, i1, h1));
        __m512 c = VMAX_STEP(max2s_cell(&X, i2, h2), max2s_cell(&X, i3, h3));
        _mm512_mask_storeu_ps(y + r * q, mo, VMAX_STEP(a, c));
    }
}

/* x and y of `pairs` row pairs, evenly spaced (2w floats of x, q of y). */
DIRECT_TARGET static void max2s_fwd(const pool_task *t, const max2s *b, const float *x, float *y,
                                    size_t pairs)
{
    int even = b->w % 2 == 0;
    if (t->relu && even)
        max2s_fwd_body(b, x, y, pairs, 1, 1);
    else if (t->relu)
        max2s_fwd_body(b, x, y, pairs, 1, 0);
    else if (even)
        max2s_fwd_body(b, x, y, pairs, 0, 1);
    else
        max2s_fwd_body(b, x, y, pairs, 0, 0);
}

/* The winners' g spread back to x vector v, added to dx or written. */
INLINE512 void max2s_put(float *db, __m512i own, __m512 gy, uint64_t win, uint64_t store, int set)
{
    /* the other cells' 0 when writing, else -0 (which keeps a dx of -0) */
    __m512 gv = _mm512_mask_mov_ps(_mm512_set1_ps(set ? 0.0f : -0.0f), (__mmask16)win,
                                   _mm512_permutexvar_ps(own, gy));
    if (!set)
        gv = _mm512_add_ps(_mm512_maskz_loadu_ps((__mmask16)store, db), gv);
    _mm512_mask_storeu_ps(db, (__mmask16)store, gv);
}

/* The backward's per-call constants. */
typedef struct max2s_k {
    __m512i o0, o1, o2, o3;             /* output lane of each x lane */
    uint64_t a0w, a1w, b0w, b1w, cells; /* cell positions */
    int w;
} max2s_k;

/* One block: x at xb, dx at db, y and dy at yb, dyb; valid: its x lanes,
 * mo: its outputs. */
INLINE512 void max2s_bwd_block(const max2s_k *K, const float *xb, const float *yb, const float *dyb,
                               float *db, uint64_t valid, __mmask16 mo, int relu, int set)
{
    __m512 m = _mm512_maskz_loadu_ps(mo, yb);
    __m512 gy = _mm512_maskz_loadu_ps(mo, dyb);
    if (relu) /* relu'(x) of the chosen cell is 1 exactly when the max is > 0 */
        gy = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_GT_OQ), gy);
    xblock X = max2s_load(xb, valid, relu);
    /* lanes past `valid` only meet cells of outputs past mo, whose dy is 0 */
    uint64_t e = (uint64_t)_mm512_cmp_ps_mask(X.v0, _mm512_permutexvar_ps(K->o0, m), _CMP_EQ_OQ);
    e |= (uint64_t)_mm512_cmp_ps_mask(X.v1, _mm512_permutexvar_ps(K->o1, m), _CMP_EQ_OQ) << 16;
    e |= (uint64_t)_mm512_cmp_ps_mask(X.v2, _mm512_permutexvar_ps(K->o2, m), _CMP_EQ_OQ) << 32;
    e |= (uint64_t)_mm512_cmp_ps_mask(X.v3, _mm512_permutexvar_ps(K->o3, m), _CMP_EQ_OQ) << 48;
    /* the first cell equal to the max, in the order a0 a1 b0 b1 */
    uint64_t a0 = e & K->a0w, a1 = e & K->a1w & ~(a0 << 1);
    uint64_t upper = a0 | a1 >> 1; /* at a0: the upper row has it */
    uint64_t b0 = e & K->b0w & ~(upper << K->w);
    uint64_t b1 = e & K->b1w & ~(upper << (K->w + 1)) & ~(b0 << 1);
    uint64_t win = a0 | a1 | b0 | b1, store = K->cells & valid;
    max2s_put(db, K->o0, gy, win, store, set);
    max2s_put(db + 16, K->o1, gy, win >> 16, store >> 16, set);
    max2s_put(db + 32, K->o2, gy, win >> 32, store >> 32, set);
    max2s_put(db + 48, K->o3, gy, win >> 48, store >> 48, set);
}

INLINE512 void max2s_bwd_body(const max2s *b, const float *x, const float *yc, const float *dy,
                              float *dx, size_t pairs, int relu, int set)
{
    max2s_k K = {VLOAD_IDX(b->owner),
                 VLOAD_IDX(b->owner + 16),
                 VLOAD_IDX(b->owner + 32),
                 VLOAD_IDX(b->owner + 48),
                 b->where[0],
                 b->where[1],
                 b->where[2],
                 b->where[3],
                 b->where[0] | b->where[1] | b->where[2] | b->where[3],
                 b->w};
    const size_t in = 2 * (size_t)b->w, g = (size_t)b->g, q = (size_t)b->q;
    const uint64_t full = bits64((int)(g * in));
    const __mmask16 fo = (__mmask16)bits64((int)(g * q));
    size_t r = 0;
    for (; r + g <= pairs; r += g)
        max2s_bwd_block(&K, x + r * in, yc + r * q, dy + r * q, dx + r * in, full, fo, relu, set);
    if (r < pairs)
        max2s_bwd_block(&K, x + r * in, yc + r * q, dy + r * q, dx + r * in,
                        bits64((int)((pairs - r) * in)), (__mmask16)bits64((int)((pairs - r) * q)),
                        relu, set);
}

/* dx of `pairs` evenly spaced row pairs += (or, with t->set, =) the
 * gradient routed from dy; x and yc as the forward saw and wrote them. */
DIRECT_TARGET static void max2s_bwd(const pool_task *t, const max2s *b, const float *x,
                                    const float *yc, const float *dy, float *dx, size_t pairs)
{
    if (t->relu && t->set)
        max2s_bwd_body(b, x, yc, dy, dx, pairs, 1, 1);
    else if (t->relu)
        max2s_bwd_body(b, x, yc, dy, dx, pairs, 1, 0);
    else if (t->set)
        max2s_bwd_body(b, x, yc, dy, dx, pairs, 0, 1);
    else
        max2s_bwd_body(b, x, yc, dy, dx, pairs, 0, 0);
}
#undef INLINE512
#undef VLOAD_IDX
#endif

/* The scalar 2x2 loops over `pairs` evenly spaced row pairs (2w floats
 * of x, q of y each): a plane, or the tail of a run. */
static void max2_fwd_rows(const pool_task *t, const float *xp, float *yp, size_t pairs)
{
    const dl_pool_desc *d = t->d;
    for (size_t oh = 0; oh < pairs; oh++) {
        const float *r0 = xp + 2 * oh * d->w, *r1 = r0 + d->w;
        float *yo = yp + oh * d->q;
        for (int ow = 0; ow < d->q; ow++) {
            float v = max_step_nb(pool_in_nb(t, r0[2 * ow]), pool_in_nb(t, r0[2 * ow + 1]));
            v = max_step_nb(v, pool_in_nb(t, r1[2 * ow]));
            yo[ow] = max_step_nb(v, pool_in_nb(t, r1[2 * ow + 1]));
        }
    }
}

static void max2_bwd_rows(const pool_task *t, const float *xp, const float *yp, const float *dyp,
                          float *dxp, size_t pairs)
{
    const dl_pool_desc *d = t->d;
    for (size_t oh = 0; oh < pairs; oh++) {
        size_t i0 = 2 * oh * d->w, o = oh * d->q;
        for (int ow = 0; ow < d->q; ow++) {
            size_t a = i0 + 2 * (size_t)ow;
            size_t cell[4] = {a, a + 1, a + d->w, a + d->w + 1};
            float m = yp[o + ow], g = dyp[o + ow];
            if (t->relu && !(m > 0))
                g = 0; /* relu'(x) of the chosen cell */
            /* the first cell equal to m (4: none, m is NaN) */
            unsigned eq = 1;
            for (int j = 3; j >= 0; j--)
                eq = eq << 1 | (pool_in_nb(t, xp[cell[j]]) == m);
            int k = __builtin_ctz(eq);
            if (t->set)
                for (int j = 0; j < 4; j++)
                    dxp[cell[j]] = j == k ? g : 0.0f;
            else if (k < 4)
                dxp[cell[k]] += g;
        }
    }
}

static void max2_fwd(const pool_task *t, size_t pl)
{
    const dl_pool_desc *d = t->d;
    max2_fwd_rows(t, t->x + pl * d->h * d->w, t->y + pl * d->p * d->q, (size_t)d->p);
}

static void max2_bwd(const pool_task *t, size_t pl)
{
    const dl_pool_desc *d = t->d;
    size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q;
    max2_bwd_rows(t, t->x + pl * hw, t->yc + pl * pq, t->dy + pl * pq, t->dx + pl * hw,
                  (size_t)d->p);
}

#ifdef __AVX2__
/* The 2x2 max pooling in 8 lanes (AVX2), for CPUs without AVX-512: 8
 * outputs of one row pair at a time from 16 floats of each row, split
 * into even and odd columns by in-lane shuffles, which leave the outputs
 * in the order S = 0 1 4 5 2 3 6 7 (one 64-bit permute, its own inverse,
 * converts). The maximum is ((a0 . a1) . (b0 . b1)) as in the AVX-512
 * kernels. Rows of q >= 8 outputs end with a chunk that overlaps the one
 * before; shorter rows run one chunk per row pair that reads and writes
 * past the pair into the next one (written again right after), and the
 * last pairs of a run, where that would leave the run, go to the scalar
 * loops. The backward routes dy in the same chunks: the winners' dy and
 * the other cells' -0 (adding -0 keeps every dx, -0 included) or, when
 * writing, 0, interleaved back into columns by unpacks. */
#define INLINE256 static inline __attribute__((always_inline))

INLINE256 __m256 vmax_step8(__m256 v, __m256 x)
{
    return _mm256_blendv_ps(_mm256_max_ps(x, v), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

INLINE256 __m256 vrelu8(__m256 x)
{
    return _mm256_and_ps(x, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));
}

/* S order <-> output order */
INLINE256 __m256 perm_s(__m256 v)
{
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xd8));
}

/* The even (cell 0) and odd (cell 1) columns of 16 floats at p, in S order. */
INLINE256 void split8(const float *p, int relu, __m256 *c0, __m256 *c1)
{
    __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
    if (relu)
        lo = vrelu8(lo), hi = vrelu8(hi);
    *c0 = _mm256_shuffle_ps(lo, hi, 0x88);
    *c1 = _mm256_shuffle_ps(lo, hi, 0xdd);
}

/* 8 outputs from the upper row at a and the lower at b, in output order. */
INLINE256 __m256 max2_chunk8(const float *a, const float *b, int relu)
{
    __m256 c0, c1, v;
    split8(a, relu, &c0, &c1);
    v = vmax_step8(c0, c1);
    split8(b, relu, &c0, &c1);
    return perm_s(vmax_step8(v, vmax_step8(c0, c1)));
}

INLINE256 void max2_fwd8_body(const pool_task *t, const float *x, float *y, size_t pairs, int relu)
{
    const int w = t->d->w, q = t->d->q;
    const size_t in = 2 * (size_t)w;
    size_t r = 0;
    if (q >= 8) {
        for (; r < pairs; r++) {
            const float *a = x + r * in;
            float *yo = y + r * q;
            for (int j = 0; j < q; j += 8) {
                int s = j + 8 <= q ? j : q - 8;
                _mm256_storeu_ps(yo + s, max2_chunk8(a + 2 * s, a + w + 2 * s, relu));
            }
        }
    } else {
        for (; r < pairs && r * in + w + 16 <= pairs * in && r * q + 8 <= pairs * q; r++)
            _mm256_storeu_ps(y + r * q, max2_chunk8(x + r * in, x + r * in + w, relu));
    }
    if (r < pairs)
        max2_fwd_rows(t, x + r * in, y + r * q, pairs - r);
}

/* x and y of `pairs` evenly spaced row pairs. */
static void max2_fwd_avx2(const pool_task *t, const float *x, float *y, size_t pairs)
{
    if (t->relu)
        max2_fwd8_body(t, x, y, pairs, 1);
    else
        max2_fwd8_body(t, x, y, pairs, 0);
}

/* The lanes (S order) of outputs lo <= j < hi of a chunk. */
INLINE256 __m256 lanes8(int lo, int hi)
{
    const __m256 s = _mm256_setr_ps(0, 1, 4, 5, 2, 3, 6, 7);
    return _mm256_and_ps(_mm256_cmp_ps(s, _mm256_set1_ps((float)lo), _CMP_GE_OQ),
                         _mm256_cmp_ps(s, _mm256_set1_ps((float)hi), _CMP_LT_OQ));
}

/* The gradient of a chunk's 32 cells, in column order: the upper row's
 * 16 (u0 u1) and the lower's (l0 l1). */
typedef struct g8x4 {
    __m256 u0, u1, l0, l1;
} g8x4;

INLINE256 g8x4 g8x4_load(const float *da, const float *db)
{
    g8x4 v = {_mm256_loadu_ps(da), _mm256_loadu_ps(da + 8), _mm256_loadu_ps(db),
              _mm256_loadu_ps(db + 8)};
    return v;
}

/* c, plus dx's old values v unless writing, to dx at da (upper row) and db. */
INLINE256 void g8x4_store(float *da, float *db, g8x4 c, g8x4 v, int set)
{
    if (!set) {
        c.u0 = _mm256_add_ps(v.u0, c.u0), c.u1 = _mm256_add_ps(v.u1, c.u1);
        c.l0 = _mm256_add_ps(v.l0, c.l0), c.l1 = _mm256_add_ps(v.l1, c.l1);
    }
    _mm256_storeu_ps(da, c.u0);
    _mm256_storeu_ps(da + 8, c.u1);
    _mm256_storeu_ps(db, c.l0);
    _mm256_storeu_ps(db + 8, c.l1);
}

/* The gradient of 8 outputs (y at ym, dy at gy; the lanes of `keep`
 * only) to the cells of x at a (upper row) and b: the winners' dy, the
 * others' 0 when writing, else -0. */
INLINE256 g8x4 max2_grad8(const float *a, const float *b, const float *ym, const float *gy,
                          __m256 keep, int relu, int set)
{
    __m256 m = perm_s(_mm256_loadu_ps(ym)), g = perm_s(_mm256_loadu_ps(gy));
    if (relu) /* relu'(x) of the chosen cell is 1 exactly when the max is > 0 */
        g = _mm256_and_ps(g, _mm256_cmp_ps(m, _mm256_setzero_ps(), _CMP_GT_OQ));
    __m256 a0, a1, b0, b1;
    split8(a, relu, &a0, &a1);
    split8(b, relu, &b0, &b1);
    /* the first cell equal to the max, in the order a0 a1 b0 b1 */
    __m256 k0 = _mm256_and_ps(_mm256_cmp_ps(a0, m, _CMP_EQ_OQ), keep);
    __m256 rest = _mm256_andnot_ps(k0, keep);
    __m256 k1 = _mm256_and_ps(_mm256_cmp_ps(a1, m, _CMP_EQ_OQ), rest);
    rest = _mm256_andnot_ps(k1, rest);
    __m256 k2 = _mm256_and_ps(_mm256_cmp_ps(b0, m, _CMP_EQ_OQ), rest);
    rest = _mm256_andnot_ps(k2, rest);
    __m256 k3 = _mm256_and_ps(_mm256_cmp_ps(b1, m, _CMP_EQ_OQ), rest);
    const __m256 other = set ? _mm256_setzero_ps() : _mm256_set1_ps(-0.0f);
    __m256 g0 = _mm256_blendv_ps(other, g, k0), g1 = _mm256_blendv_ps(other, g, k1);
    __m256 g2 = _mm256_blendv_ps(other, g, k2), g3 = _mm256_blendv_ps(other, g, k3);
    g8x4 c = {_mm256_unpacklo_ps(g0, g1), _mm256_unpackhi_ps(g0, g1), _mm256_unpacklo_ps(g2, g3),
              _mm256_unpackhi_ps(g2, g3)};
    return c;
}

/* Adding, every load of dx comes before the stores that overlap it (a
 * load that only partly overlaps a recent store waits for it): the q >= 8
 * path (q <= 16) loads both chunks first and stores the overlapping last
 * one first (the first chunk's stores then replace the cells both have);
 * the q < 8 path loads the next row pair's dx
 * before storing this one's (the overrun into it writes back its old
 * values). */
INLINE256 void max2_bwd8_body(const pool_task *t, const float *x, const float *yc, const float *dy,
                              float *dx, size_t pairs, int relu, int set)
{
    const int w = t->d->w, q = t->d->q;
    const size_t in = 2 * (size_t)w;
    const g8x4 none = {0};
    size_t r = 0;
    if (q >= 8 && q <= 16) {
        const __m256 all = lanes8(0, 8);
        const int s = q - 8;
        for (; r < pairs; r++) {
            const float *a = x + r * in;
            float *g = dx + r * in;
            size_t o = r * q;
            g8x4 v0 = none, v1 = none;
            if (!set) {
                v0 = g8x4_load(g, g + w);
                v1 = g8x4_load(g + 2 * s, g + w + 2 * s);
            }
            g8x4 c0 = max2_grad8(a, a + w, yc + o, dy + o, all, relu, set);
            g8x4 c1 = max2_grad8(a + 2 * s, a + w + 2 * s, yc + o + s, dy + o + s, all, relu, set);
            g8x4_store(g + 2 * s, g + w + 2 * s, c1, v1, set);
            g8x4_store(g, g + w, c0, v0, set);
        }
    } else if (q > 16) {
        const __m256 all = lanes8(0, 8);
        /* the last chunk's lanes already done: written again the same when
         * writing, skipped when adding */
        const __m256 last = set ? all : lanes8(8 - q % 8, 8);
        for (; r < pairs; r++) {
            const float *a = x + r * in;
            float *g = dx + r * in;
            size_t o = r * q;
            for (int j = 0; j < q; j += 8) {
                int s = j + 8 <= q ? j : q - 8;
                float *da = g + 2 * s, *db = g + w + 2 * s;
                g8x4 v = set ? none : g8x4_load(da, db);
                g8x4 c = max2_grad8(a + 2 * s, a + w + 2 * s, yc + o + s, dy + o + s,
                                    s == j ? all : last, relu, set);
                g8x4_store(da, db, c, v, set);
            }
        }
    } else {
        const __m256 keep = lanes8(0, q);
        size_t n = 0; /* the row pairs whose chunk stays inside the run */
        while (n < pairs && n * in + w + 16 <= pairs * in && n * q + 8 <= pairs * q)
            n++;
        g8x4 v = n && !set ? g8x4_load(dx, dx + w) : none;
        for (; r < n; r++) {
            float *g = dx + r * in;
            g8x4 c =
                max2_grad8(x + r * in, x + r * in + w, yc + r * q, dy + r * q, keep, relu, set);
            g8x4 next = r + 1 < n && !set ? g8x4_load(g + in, g + in + w) : none;
            g8x4_store(g, g + w, c, v, set);
            v = next;
        }
    }
    if (r < pairs)
        max2_bwd_rows(t, x + r * in, yc + r * q, dy + r * q, dx + r * in, pairs - r);
}

/* dx of `pairs` evenly spaced row pairs += (or, with t->set, =) the
 * gradient routed from dy. */
static void max2_bwd_avx2(const pool_task *t, const float *x, const float *yc, const float *dy,
                          float *dx, size_t pairs)
{
    if (t->relu && t->set)
        max2_bwd8_body(t, x, yc, dy, dx, pairs, 1, 1);
    else if (t->relu)
        max2_bwd8_body(t, x, yc, dy, dx, pairs, 1, 0);
    else if (t->set)
        max2_bwd8_body(t, x, yc, dy, dx, pairs, 0, 1);
    else
        max2_bwd8_body(t, x, yc, dy, dx, pairs, 0, 0);
}
#undef INLINE256
#endif

/* Planes [begin, end) of a 2x2, stride-2 max pooling by the AVX2 kernels
 * (CPUs without AVX-512); returns 0, doing nothing, where they do not
 * apply. */
static int max2_avx2_planes(const pool_task *t, size_t begin, size_t end, int backward)
{
#ifdef __AVX2__
    const dl_pool_desc *d = t->d;
    if (!is_max2(t) || t->avx512)
        return 0;
    size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q;
    /* with h even the row pairs of all planes are evenly spaced: one run */
    size_t step = d->h % 2 ? 1 : end - begin;
    for (size_t pl = begin; pl < end; pl += step) {
        size_t pairs = (size_t)d->p * step;
        if (backward)
            max2_bwd_avx2(t, t->x + pl * hw, t->yc + pl * pq, t->dy + pl * pq, t->dx + pl * hw,
                          pairs);
        else
            max2_fwd_avx2(t, t->x + pl * hw, t->y + pl * pq, pairs);
    }
    return 1;
#else
    (void)t, (void)begin, (void)end, (void)backward;
    return 0;
#endif
}

/* Plane pl of a 2x2, stride-2 max pooling (forward, or backward), by the
 * AVX-512 kernels where the CPU has them. Returns 0, doing nothing, for
 * any other pooling. */
static int max2_plane(const pool_task *t, size_t pl, int backward)
{
    if (!is_max2(t))
        return 0;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    if (t->avx512) {
        if (backward)
            max2_bwd_avx512(t, pl);
        else
            max2_fwd_avx512(t, pl);
        return 1;
    }
#endif
    if (backward)
        max2_bwd(t, pl);
    else
        max2_fwd(t, pl);
    return 1;
}

/* Planes [begin, end) of a 2x2, stride-2 max pooling by the small-plane
 * AVX-512 kernels; returns 0, doing nothing, where they do not apply. */
static int max2s_planes(const pool_task *t, size_t begin, size_t end, int backward)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    const dl_pool_desc *d = t->d;
    if (!is_max2(t) || !t->avx512 || !max2s_fits(d))
        return 0;
    max2s b;
    max2s_init(&b, d);
    size_t hw = (size_t)d->h * d->w, pq = (size_t)d->p * d->q;
    /* with h even the row pairs of all planes are evenly spaced: one run */
    size_t step = d->h % 2 ? 1 : end - begin;
    for (size_t pl = begin; pl < end; pl += step) {
        size_t pairs = (size_t)d->p * step;
        if (backward)
            max2s_bwd(t, &b, t->x + pl * hw, t->yc + pl * pq, t->dy + pl * pq, t->dx + pl * hw,
                      pairs);
        else
            max2s_fwd(t, &b, t->x + pl * hw, t->y + pl * pq, pairs);
    }
    return 1;
#else
    (void)t, (void)begin, (void)end, (void)backward;
    return 0;
#endif
}

/* --- 2x2, stride-2 average pooling on 8 lanes ------------------------------
 * The scalar loop's sums in its order, ((x00 + x01) + x10) + x11, then /4
 * (a multiply by 0.25, exact either way): the same bits, 8 outputs a step
 * from the even and odd columns of the two rows (split by shuffles). */
#ifdef __AVX2__
static int is_avg2(const pool_task *t)
{
    const dl_pool_desc *d = t->d;
    return t->kind == DL_POOL_AVG && d->size == 2 && d->stride == 2 && d->pad == 0;
}

/* The 8 even and 8 odd floats of 16 at p (m: outputs live, 1..8). */
static inline void avg2_split(const float *p, int m, __m256 *ev, __m256 *od)
{
    __m256 a, b;
    if (m == 8) {
        a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    } else {
        a = dl_v_load_tail(p, 2 * m < 8 ? 2 * m : 8);
        b = 2 * m > 8 ? dl_v_load_tail(p + 8, 2 * m - 8) : _mm256_setzero_ps();
    }
    dl_v_split2(a, b, ev, od);
}

/* p[2i] += g[i], p[2i + 1] += g[i] for the m live outputs. */
static inline void avg2_spread(float *p, __m256 g, int m)
{
    __m256 a, b;
    dl_v_zip2(g, g, &a, &b);
    if (m == 8) {
        _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), a));
        _mm256_storeu_ps(p + 8, _mm256_add_ps(_mm256_loadu_ps(p + 8), b));
        return;
    }
    int na = 2 * m < 8 ? 2 * m : 8, nb = 2 * m - na;
    dl_v_store_tail(p, _mm256_add_ps(dl_v_load_tail(p, na), a), na);
    if (nb > 0)
        dl_v_store_tail(p + 8, _mm256_add_ps(dl_v_load_tail(p + 8, nb), b), nb);
}
#endif

/* Planes [begin, end) of a 2x2, stride-2 average pooling; returns 0,
 * doing nothing, for any other pooling or a build without AVX2. */
static int avg2_planes(const pool_task *t, size_t begin, size_t end, int backward)
{
#ifdef __AVX2__
    const dl_pool_desc *d = t->d;
    if (!is_avg2(t))
        return 0;
    __m256 quarter = _mm256_set1_ps(0.25f);
    for (size_t pl = begin; pl < end; pl++)
        for (int oh = 0; oh < d->p; oh++) {
            size_t r0 = pl * d->h * d->w + (size_t)2 * oh * d->w, o = (pl * d->p + oh) * d->q;
            for (int ow = 0; ow < d->q; ow += 8) {
                int m = d->q - ow < 8 ? d->q - ow : 8;
                if (backward) {
                    __m256 g = _mm256_mul_ps(m == 8 ? _mm256_loadu_ps(t->dy + o + ow)
                                                    : dl_v_load_tail(t->dy + o + ow, m),
                                             quarter);
                    avg2_spread(t->dx + r0 + 2 * ow, g, m);
                    avg2_spread(t->dx + r0 + d->w + 2 * ow, g, m);
                    continue;
                }
                __m256 e0, o0, e1, o1;
                avg2_split(t->x + r0 + 2 * ow, m, &e0, &o0);
                avg2_split(t->x + r0 + d->w + 2 * ow, m, &e1, &o1);
                __m256 v = _mm256_mul_ps(
                    _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(e0, o0), e1), o1), quarter);
                if (m == 8)
                    _mm256_storeu_ps(t->y + o + ow, v);
                else
                    dl_v_store_tail(t->y + o + ow, v, m);
            }
        }
    return 1;
#else
    (void)t, (void)begin, (void)end, (void)backward;
    return 0;
#endif
}

/* --- max and average pooling of any window at stride 1 or 2 on 8 lanes ---
 * Per output row, each input row of its windows is laid out once as its
 * stride's phases (padded with -inf for max, as the scalar loop skips the
 * padding, with 0 for average; ReLU'd first when fused), so that tap kw of
 * 8 neighbouring outputs is one load at column ow + kw/stride of phase
 * kw%stride. Taps are taken in the scalar loop's order with its step (max:
 * a larger value or a NaN replaces the running maximum; average: the sum,
 * the padding's zeros adding nothing, then the division by the window's
 * count): the same values, NaN included. */
#define WIN8_COLS 2048   /* floats of a phase row the stack buffers hold */
#define WIN8_PLANE 32768 /* floats of the backward's padded dx plane, per thread */

#ifdef __AVX2__
/* A thread's scratch for the 8-lane windows (no allocation in a training
 * step): the forward's phase rows and row maxima, or the backward's padded
 * dx plane and its operands' planes; a thread runs one at a time. */
static _Thread_local float win8_tls[3 * WIN8_PLANE];
#endif

static int win8_fits(const pool_task *t)
{
    const dl_pool_desc *d = t->d;
#ifdef __AVX2__
    return (d->stride == 1 || d->stride == 2) &&
           (d->w + 2 * d->pad) / d->stride + d->size + 16 <= WIN8_COLS;
#else
    (void)d;
    return 0;
#endif
}

#ifdef __AVX2__
static inline __m256 max_step_v(__m256 v, __m256 x)
{
    __m256 take = _mm256_or_ps(_mm256_cmp_ps(x, v, _CMP_GT_OQ), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return _mm256_blendv_ps(v, x, take);
}

/* x as pool_in sees it, 8 lanes: relu(x) when fused (NaN: 0). */
static inline __m256 pool_in_v(const pool_task *t, __m256 v)
{
    return t->relu ? _mm256_and_ps(v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ)) : v;
}

/* Floats of one phase of a padded row, with room for a vector read past
 * the last output's window. */
static int win8_cols(const dl_pool_desc *d)
{
    return (d->w + 2 * d->pad + d->stride - 1) / d->stride + d->size + 8;
}

/* Window column kw's place in a padded row's phases (pitch floats apart):
 * stride 1 or 2, so its phase and index by a mask and a shift. */
static inline int win8_col(int kw, int st, int pitch)
{
    return (kw & (st - 1)) * pitch + (kw >> (st - 1));
}

/* Output row oh's window rows: it starts at input row *hs, and its rows
 * inside the input are kh in [*k0, *k1). */
static inline void win8_window_rows(const dl_pool_desc *d, int oh, int *hs, int *k0, int *k1)
{
    *hs = oh * d->stride - d->pad;
    *k0 = *hs < 0 ? -*hs : 0;
    *k1 = d->h - *hs < d->size ? d->h - *hs : d->size;
}

/* The first left (1 to 8, more meaning 8) lanes of v to p. */
static inline void win8_store_upto(float *p, __m256 v, int left)
{
    if (left >= 8)
        _mm256_storeu_ps(p, v);
    else
        dl_v_store_tail(p, v, left);
}

/* The borders of the phases of a padded row: -inf (0 for average
 * pooling) left of the input and from its end on. win8_phases writes only
 * the input's places, so a plane loop sets them once. */
static void win8_borders(float *ph, size_t pitch, const pool_task *t)
{
    const dl_pool_desc *d = t->d;
    int st = d->stride, cols = win8_cols(d);
    float edge = t->kind == DL_POOL_MAX ? -INFINITY : 0.0f;
    for (int f = 0; f < st; f++) {
        int first = (d->pad - f + st - 1) / st; /* first i with i*st + f >= pad */
        int last = (d->pad + d->w - f + st - 1) / st;
        for (int i = 0; i < first; i++)
            ph[f * pitch + i] = edge;
        for (int i = last; i < cols; i++)
            ph[f * pitch + i] = edge;
    }
}

/* Input row xr [w] as the phases of its padded row: ph[f pitch + i] =
 * padded column i*stride + f (the borders as win8_borders left them). */
static void win8_phases(float *ph, size_t pitch, const float *xr, const pool_task *t)
{
    const dl_pool_desc *d = t->d;
    int iw = 0;
    if (d->stride == 1) {
        for (; iw + 8 <= d->w; iw += 8)
            _mm256_storeu_ps(ph + d->pad + iw, pool_in_v(t, _mm256_loadu_ps(xr + iw)));
        if (iw < d->w)
            dl_v_store_tail(ph + d->pad + iw, pool_in_v(t, dl_v_load_tail(xr + iw, d->w - iw)),
                            d->w - iw);
        return;
    }
    /* padded column iw + pad: the even input columns to phase pad % 2 */
    float *ev = ph + (d->pad & 1) * pitch + d->pad / 2;
    float *od = ph + ((d->pad & 1) ^ 1) * pitch + (d->pad + 1) / 2;
    for (; iw + 16 <= d->w; iw += 16) {
        __m256 e, o;
        dl_v_split2(_mm256_loadu_ps(xr + iw), _mm256_loadu_ps(xr + iw + 8), &e, &o);
        _mm256_storeu_ps(ev + iw / 2, pool_in_v(t, e));
        _mm256_storeu_ps(od + iw / 2, pool_in_v(t, o));
    }
    if (iw < d->w) { /* the last 1 to 15 columns: ceil(left / 2) even, floor odd */
        int left = d->w - iw;
        __m256 a = dl_v_load_tail(xr + iw, left < 8 ? left : 8);
        __m256 b = left > 8 ? dl_v_load_tail(xr + iw + 8, left - 8) : _mm256_setzero_ps();
        __m256 e, o;
        dl_v_split2(a, b, &e, &o);
        dl_v_store_tail(ev + iw / 2, pool_in_v(t, e), (left + 1) / 2);
        if (left > 1)
            dl_v_store_tail(od + iw / 2, pool_in_v(t, o), left / 2);
    }
}
#endif

#ifdef __AVX2__
/* wc[ow] = the columns of output ow's window, padding counted (the scalar
 * loop's count is rows * columns). */
static void win8_widths(float wc[WIN8_COLS], const dl_pool_desc *d)
{
    for (int ow = 0; ow < d->q; ow++) {
        int ws = ow * d->stride - d->pad, we = ws + d->size;
        wc[ow] = (float)((we < d->w + d->pad ? we : d->w + d->pad) - ws);
    }
}

/* rows of output row oh's window, padding counted */
static float win8_rows(const dl_pool_desc *d, int oh)
{
    int hs = oh * d->stride - d->pad, he = hs + d->size;
    return (float)((he < d->h + d->pad ? he : d->h + d->pad) - hs);
}
#endif

/* Max pooling, forward, separable: each input row's maximum over each
 * output column's window columns (hm [h][q]), then the maximum of those
 * over the window's rows. The same bits as the scalar loop's scan, NaN
 * and signed zeros included: its step keeps the first of equal values
 * and takes every NaN, so the result is the first largest value or the
 * last NaN in row-major order, and a maximum of the rows' own such
 * results (rows in order) is the same cell. Returns 0 where hm does not
 * fit its buffer. */
static int win8_max_planes(const pool_task *t, size_t begin, size_t end)
{
#ifdef __AVX2__
    const dl_pool_desc *d = t->d;
    int st = d->stride, nq = (d->q + 7) / 8 * 8;
    float *hm = win8_tls + 2 * WIN8_PLANE;
    if ((size_t)d->h * nq > WIN8_PLANE || d->size > 64)
        return 0;
    /* a ring of phase rows, filled AHEAD rows before they are read: the
     * reads straddle the (masked) stores that made them, which cannot be
     * forwarded, so they wait until those have left the store buffer */
    enum { RING = 4, AHEAD = 2 };
    float(*ph)[2][WIN8_COLS] = (float(*)[2][WIN8_COLS])win8_tls; /* half a WIN8_PLANE */
    for (int k = 0; k < RING; k++)
        win8_borders(ph[k][0], WIN8_COLS, t);
    int off[64]; /* column kw's place: st is 1 or 2, its phase and index */
    for (int kw = 0; kw < d->size; kw++)
        off[kw] = win8_col(kw, st, WIN8_COLS);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    for (size_t pl = begin; pl < end; pl++) {
        const float *xp = t->x + pl * d->h * d->w;
        float *yp = t->y + pl * d->p * d->q;
        for (int ih = 0; ih < AHEAD && ih < d->h; ih++)
            win8_phases(ph[ih % RING][0], WIN8_COLS, xp + (size_t)ih * d->w, t);
        for (int ih = 0; ih < d->h; ih++) {
            if (ih + AHEAD < d->h)
                win8_phases(ph[(ih + AHEAD) % RING][0], WIN8_COLS, xp + (size_t)(ih + AHEAD) * d->w,
                            t);
            const float *pr = ph[ih % RING][0];
            float *hr = hm + (size_t)ih * nq;
            /* the first tap alone: the step from -inf gives it, bits and all */
            if (d->size == 3) { /* the usual window, its taps unrolled */
                const float *p0 = pr + off[0], *p1 = pr + off[1], *p2 = pr + off[2];
                for (int ow = 0; ow < d->q; ow += 8)
                    _mm256_storeu_ps(hr + ow, max_step_v(max_step_v(_mm256_loadu_ps(p0 + ow),
                                                                    _mm256_loadu_ps(p1 + ow)),
                                                         _mm256_loadu_ps(p2 + ow)));
                continue;
            }
            for (int ow = 0; ow < d->q; ow += 8) {
                __m256 acc = _mm256_loadu_ps(pr + off[0] + ow);
                for (int kw = 1; kw < d->size; kw++)
                    acc = max_step_v(acc, _mm256_loadu_ps(pr + off[kw] + ow));
                _mm256_storeu_ps(hr + ow, acc);
            }
        }
        for (int oh = 0; oh < d->p; oh++) {
            int hs, k0, k1;
            win8_window_rows(d, oh, &hs, &k0, &k1);
            float *yr = yp + (size_t)oh * d->q;
            const float *h0 = hm + (size_t)(hs + k0) * nq;
            int full3 = k0 == 0 && k1 == 3;
            for (int ow = 0; ow < d->q; ow += 8) {
                /* (a window always meets the input: pad <= size / 2) */
                __m256 acc = k0 < k1 ? _mm256_loadu_ps(h0 + ow) : ninf;
                if (full3) {
                    acc = max_step_v(acc, _mm256_loadu_ps(h0 + nq + ow));
                    acc = max_step_v(acc, _mm256_loadu_ps(h0 + 2 * nq + ow));
                } else {
                    for (int kh = k0 + 1; kh < k1; kh++)
                        acc = max_step_v(acc, _mm256_loadu_ps(hm + (size_t)(hs + kh) * nq + ow));
                }
                win8_store_upto(yr + ow, acc, d->q - ow);
            }
        }
    }
    return 1;
#else
    (void)t, (void)begin, (void)end;
    return 0;
#endif
}

/* Forward: each input row's phases once (a ring of `size` rows, row ih in
 * slot ih % size), then per 8 outputs of a row the window's taps in
 * registers, in the scalar loop's order (rows, then columns). Returns 0,
 * doing nothing, where the ring does not fit its buffer. */
static int win8_planes(const pool_task *t, size_t begin, size_t end)
{
#ifdef __AVX2__
    const dl_pool_desc *d = t->d;
    int st = d->stride, avg = t->kind == DL_POOL_AVG;
    size_t slot = (size_t)2 * WIN8_COLS;
    float *ring = win8_tls;
    if ((size_t)d->size * slot > WIN8_PLANE)
        return 0;
    float wcount[WIN8_COLS];
    int nq = (d->q + 7) / 8 * 8;
    for (int ow = 0; ow < nq; ow++) /* the window's width, padding counted */
        wcount[ow] = 1.0f;
    if (avg)
        win8_widths(wcount, d);
    for (int k = 0; k < d->size; k++)
        win8_borders(ring + k * slot, WIN8_COLS, t);
    const __m256 init = _mm256_set1_ps(avg ? 0.0f : -INFINITY);
    int off[8]; /* column kw's place in a slot: st is 1 or 2, its phase and index */
    for (int kw = 0; kw < d->size; kw++)
        off[kw] = win8_col(kw, st, WIN8_COLS);
    for (size_t pl = begin; pl < end; pl++) {
        const float *xp = t->x + pl * d->h * d->w;
        float *yp = t->y + pl * d->p * d->q;
        int held[8]; /* the input row each slot holds (size <= 8 by the buffer) */
        for (int k = 0; k < d->size; k++)
            held[k] = -1;
        for (int oh = 0; oh < d->p; oh++) {
            int hs, k0, k1;
            win8_window_rows(d, oh, &hs, &k0, &k1);
            const float *rows[8];
            for (int kh = k0; kh < k1; kh++) {
                int ih = hs + kh, k = ih % d->size;
                float *ph = ring + k * slot;
                if (held[k] != ih) {
                    win8_phases(ph, WIN8_COLS, xp + (size_t)ih * d->w, t);
                    held[k] = ih;
                }
                rows[kh] = ph;
            }
            float *yr = yp + (size_t)oh * d->q;
            float rcount = avg ? win8_rows(d, oh) : 1.0f;
            /* the window's taps as pointers, rows then columns */
            const float *tap[64];
            int nt = 0;
            for (int kh = k0; kh < k1; kh++)
                for (int kw = 0; kw < d->size; kw++)
                    tap[nt++] = rows[kh] + off[kw];
            for (int ow = 0; ow < d->q; ow += 8) {
                __m256 acc = init;
                if (avg)
                    for (int k = 0; k < nt; k++)
                        acc = _mm256_add_ps(acc, _mm256_loadu_ps(tap[k] + ow));
                else
                    for (int k = 0; k < nt; k++)
                        acc = max_step_v(acc, _mm256_loadu_ps(tap[k] + ow));
                if (avg) /* s / count, count = rows * columns of the padded window */
                    acc = _mm256_div_ps(
                        acc, _mm256_mul_ps(_mm256_set1_ps(rcount), _mm256_loadu_ps(wcount + ow)));
                if (ow + 8 <= d->q)
                    _mm256_storeu_ps(yr + ow, acc);
                else
                    dl_v_store_tail(yr + ow, acc, d->q - ow);
            }
        }
    }
    return 1;
#else
    (void)t, (void)begin, (void)end;
    return 0;
#endif
}

/* The backward of the 8-lane windows, a tap at a time over the whole
 * plane (taps in the scalar loop's order): for max pooling each output's
 * first window cell equal to y (found again by comparing x's phases, laid
 * out for the plane first; a mask per output remembers which have found
 * theirs), for average pooling every cell; the output's dy (over the
 * window's count) is added at that cell of a padded phase-plane copy of
 * dx, 8 outputs at a time (their cells are distinct); then the copy,
 * without its padding, onto dx. A tap's adds never straddle the last
 * tap's stores, which would wait for them to leave the store buffer.
 * Returns 0, doing nothing, where the planes do not fit the buffers. */
static int win8_bwd_planes(const pool_task *t, size_t begin, size_t end)
{
#ifdef __AVX2__
    const dl_pool_desc *d = t->d;
    int st = d->stride, hp = d->h + 2 * d->pad, avg = t->kind == DL_POOL_AVG;
    int cols = win8_cols(d);
    int nq = (d->q + 7) / 8 * 8, nv = nq / 8;
    size_t planef = (size_t)hp * st * cols;
    /* a thread's padded dx plane, and x's phases, dy (scaled), y and the
     * found masks of the plane: no allocation in a training step (a
     * 112x112 stride-2 input needs 16K floats for dx); larger planes take
     * the scalar loop */
    float *acc = win8_tls, *aux = win8_tls + WIN8_PLANE; /* aux: 2 WIN8_PLANE floats */
    size_t xph = avg ? 0 : (size_t)d->h * st * cols, outs = (size_t)d->p * nq;
    if (planef > WIN8_PLANE || xph + 3 * outs > 2 * WIN8_PLANE)
        return 0;
    float *XP = aux, *G = aux + xph, *Y = G + outs, *F = Y + outs;
    float wcount[WIN8_COLS];
    __m256 zero = _mm256_setzero_ps();
    if (avg)
        win8_widths(wcount, d);
    else
        for (int ih = 0; ih < d->h; ih++)
            win8_borders(XP + (size_t)ih * st * cols, (size_t)cols, t);
    for (size_t pl = begin; pl < end; pl++) {
        /* x and y are read for max pooling only (average may pass NULL) */
        const float *xp = avg ? NULL : t->x + pl * d->h * d->w;
        const float *yp = avg ? NULL : t->yc + pl * d->p * d->q, *gp = t->dy + pl * d->p * d->q;
        memset(acc, 0, planef * sizeof *acc);
        for (int ih = 0; !avg && ih < d->h; ih++)
            win8_phases(XP + (size_t)ih * st * cols, (size_t)cols, xp + (size_t)ih * d->w, t);
        for (int oh = 0; oh < d->p; oh++)
            for (int v = 0; v < nv; v++) {
                int m = d->q - 8 * v < 8 ? d->q - 8 * v : 8;
                size_t at = (size_t)oh * nq + 8 * v;
                __m256 g = dl_v_load_tail(gp + (size_t)oh * d->q + 8 * v, m);
                __m256 lanes = _mm256_castsi256_ps(dl_v_mask(m));
                if (avg) { /* dy / count to every cell of the window */
                    g = _mm256_div_ps(g, _mm256_mul_ps(_mm256_set1_ps(win8_rows(d, oh)),
                                                       dl_v_load_tail(wcount + 8 * v, m)));
                    _mm256_storeu_ps(G + at, _mm256_and_ps(g, lanes));
                    continue;
                }
                __m256 y = dl_v_load_tail(yp + (size_t)oh * d->q + 8 * v, m);
                if (t->relu) /* relu'(x) of the chosen cell is 0 where y <= 0 */
                    g = _mm256_and_ps(g, _mm256_cmp_ps(y, zero, _CMP_GT_OQ));
                _mm256_storeu_ps(G + at, g);
                _mm256_storeu_ps(Y + at, y);
                /* lanes past the row, and NaN outputs, find nothing */
                _mm256_storeu_ps(F + at,
                                 _mm256_xor_ps(lanes, _mm256_castsi256_ps(_mm256_set1_epi32(-1))));
            }
        for (int kh = 0; kh < d->size; kh++)
            for (int kw = 0; kw < d->size; kw++) {
                size_t coff = (size_t)win8_col(kw, st, cols);
                for (int oh = 0; oh < d->p; oh++) {
                    int ih = oh * st - d->pad + kh;
                    if (ih < 0 || ih >= d->h)
                        continue;
                    float *as = acc + (size_t)(ih + d->pad) * st * cols + coff;
                    const float *xs = XP + (size_t)ih * st * cols + coff;
                    for (int v = 0; v < nv; v++) {
                        size_t at = (size_t)oh * nq + 8 * v;
                        __m256 add = _mm256_loadu_ps(G + at);
                        if (!avg) {
                            __m256 f = _mm256_loadu_ps(F + at);
                            __m256 hit = _mm256_andnot_ps(
                                f, _mm256_cmp_ps(_mm256_loadu_ps(xs + 8 * v),
                                                 _mm256_loadu_ps(Y + at), _CMP_EQ_OQ));
                            _mm256_storeu_ps(F + at, _mm256_or_ps(f, hit));
                            add = _mm256_and_ps(add, hit);
                        }
                        float *a = as + 8 * v;
                        _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), add));
                    }
                }
            }
        float *dxp = t->dx + pl * d->h * d->w;
        for (int ih = 0; ih < d->h; ih++) {
            const float *arow = acc + (size_t)(ih + d->pad) * st * cols;
            float *xr = dxp + (size_t)ih * d->w;
            int iw = 0;
            /* dx (+)= the row without its padding (set: 0 + it, as adding
             * into zeros gives) */
            if (st == 1)
                for (; iw + 8 <= d->w; iw += 8) {
                    __m256 old = t->set ? zero : _mm256_loadu_ps(xr + iw);
                    _mm256_storeu_ps(xr + iw,
                                     _mm256_add_ps(old, _mm256_loadu_ps(arow + d->pad + iw)));
                }
            else {
                const float *ev = arow + (size_t)(d->pad & 1) * cols + d->pad / 2;
                const float *od = arow + (size_t)((d->pad & 1) ^ 1) * cols + (d->pad + 1) / 2;
                for (; iw + 16 <= d->w; iw += 16) {
                    __m256 a, b;
                    dl_v_zip2(_mm256_loadu_ps(ev + iw / 2), _mm256_loadu_ps(od + iw / 2), &a, &b);
                    __m256 oa = t->set ? zero : _mm256_loadu_ps(xr + iw);
                    __m256 ob = t->set ? zero : _mm256_loadu_ps(xr + iw + 8);
                    _mm256_storeu_ps(xr + iw, _mm256_add_ps(oa, a));
                    _mm256_storeu_ps(xr + iw + 8, _mm256_add_ps(ob, b));
                }
                if (iw < d->w) { /* the last 1 to 15 columns: ceil(left / 2) even, floor odd */
                    int left = d->w - iw, m0 = left < 8 ? left : 8;
                    __m256 a, b;
                    dl_v_zip2(_mm256_loadu_ps(ev + iw / 2), _mm256_loadu_ps(od + iw / 2), &a, &b);
                    __m256 oa = t->set ? zero : dl_v_load_tail(xr + iw, m0);
                    dl_v_store_tail(xr + iw, _mm256_add_ps(oa, a), m0);
                    if (left > 8) {
                        __m256 ob = t->set ? zero : dl_v_load_tail(xr + iw + 8, left - 8);
                        dl_v_store_tail(xr + iw + 8, _mm256_add_ps(ob, b), left - 8);
                    }
                    iw = d->w;
                }
            }
            if (st == 1 && iw < d->w) {
                int m = d->w - iw;
                __m256 old = t->set ? zero : dl_v_load_tail(xr + iw, m);
                dl_v_store_tail(xr + iw, _mm256_add_ps(old, _mm256_loadu_ps(arow + d->pad + iw)),
                                m);
            }
        }
    }
    return 1;
#else
    (void)t, (void)begin, (void)end;
    return 0;
#endif
}

/* The 8-lane windows for every pooling but the 2x2 stride-2 unpadded
 * ones, which have kernels of their own. */
static int win8_takes(const pool_task *t)
{
    const dl_pool_desc *d = t->d;
    return win8_fits(t) && !(d->size == 2 && d->stride == 2 && d->pad == 0);
}

/* Planes [begin, end) of n*c. */
static void pool_fwd_task(void *arg, size_t begin, size_t end)
{
    const pool_task *t = arg;
    const dl_pool_desc *d = t->d;
    if (t->max3) {
        dl_cpu_max3s2_forward(d, t->relu, t->x, t->y, begin, end);
        return;
    }
    if (t->avg3) {
        dl_cpu_avg3s1_forward(d, t->x, t->y, begin, end);
        return;
    }
    if (max2s_planes(t, begin, end, 0) || max2_avx2_planes(t, begin, end, 0) ||
        avg2_planes(t, begin, end, 0))
        return;
    if (win8_takes(t) &&
        ((t->kind == DL_POOL_MAX && win8_max_planes(t, begin, end)) || win8_planes(t, begin, end)))
        return;
    for (size_t pl = begin; pl < end; pl++) {
        if (max2_plane(t, pl, 0))
            continue;
        const float *xp = t->x + pl * d->h * d->w;
        float *yp = t->y + pl * d->p * d->q;
        for (int oh = 0; oh < d->p; oh++) {
            for (int ow = 0; ow < d->q; ow++) {
                int h0, h1, w0, w1, count;
                dl_cpu_pool_window(d, oh, ow, &h0, &h1, &w0, &w1, &count);
                float v;
                if (t->kind == DL_POOL_MAX) {
                    v = -INFINITY;
                    for (int ih = h0; ih < h1; ih++)
                        for (int iw = w0; iw < w1; iw++) {
                            float e = pool_in(t, xp[ih * d->w + iw]);
                            if (e > v || isnan(e))
                                v = e;
                        }
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
    const pool_task *t0 = arg;
    const dl_pool_desc *d = t0->d;
    /* a 2x2 pooling of even planes covers every cell, so its kernels can
     * write dx; otherwise a written dx is zeroed plane by plane first */
    pool_task local = *t0;
    const pool_task *t = &local;
    if (t0->max3) {
        dl_cpu_max3s2_backward(d, t0->relu, t0->set, t0->x, t0->yc, t0->dy, t0->dx, begin, end);
        return;
    }
    if (t0->avg3 && !t0->set) {
        dl_cpu_avg3s1_backward(d, t0->dy, t0->dx, begin, end);
        return;
    }
    /* the 8-lane windows write dx too (unless their scratch is refused) */
    if (win8_takes(t0) && win8_bwd_planes(t0, begin, end))
        return;
    int cover = is_max2(t0) && d->h % 2 == 0 && d->w % 2 == 0;
    if (t0->set && !cover) {
        local.set = 0;
        memset(t->dx + begin * d->h * d->w, 0, (end - begin) * d->h * d->w * sizeof(float));
    }
    if (max2s_planes(t, begin, end, 1) || max2_avx2_planes(t, begin, end, 1) ||
        avg2_planes(t, begin, end, 1))
        return;
    for (size_t pl = begin; pl < end; pl++) {
        if (max2_plane(t, pl, 1))
            continue;
        const float *xp = t->x ? t->x + pl * d->h * d->w : NULL;
        const float *yp = t->yc ? t->yc + pl * d->p * d->q : NULL;
        const float *dyp = t->dy + pl * d->p * d->q;
        float *dxp = t->dx + pl * d->h * d->w;
        for (int oh = 0; oh < d->p; oh++) {
            for (int ow = 0; ow < d->q; ow++) {
                int h0, h1, w0, w1, count;
                dl_cpu_pool_window(d, oh, ow, &h0, &h1, &w0, &w1, &count);
                float g = dyp[oh * d->q + ow];
                if (t->kind == DL_POOL_MAX) {
                    /* the first cell, in scan order, equal to the output */
                    float m = yp[oh * d->q + ow];
                    if (t->relu && !(m > 0))
                        continue; /* relu'(x) of the chosen cell is 0 */
                    int found = 0;
                    for (int ih = h0; ih < h1 && !found; ih++)
                        for (int iw = w0; iw < w1 && !found; iw++)
                            if (pool_in(t, xp[ih * d->w + iw]) == m) {
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
        return dl_error(DL_EINVAL,
                        "%s: bad descriptor n %d c %d h %d w %d size %d stride %d "
                        "pad %d",
                        op, d->n, d->c, d->h, d->w, d->size, d->stride, d->pad);
    if (d->p != (d->h + 2 * d->pad - d->size) / d->stride + 1 ||
        d->q != (d->w + 2 * d->pad - d->size) / d->stride + 1 || d->p <= 0 || d->q <= 0)
        return dl_error(DL_ESHAPE,
                        "%s: output %dx%d does not match input %dx%d, window %d, "
                        "stride %d, pad %d",
                        op, d->p, d->q, d->h, d->w, d->size, d->stride, d->pad);
    return DL_OK;
}

/* y [n, c, p, q] = max or average over square windows of x [n, c, h, w].
 * Average pooling divides by the window size including padding cells. */
int dl_cpu_pool_forward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *y,
                        const float *x)
{
    if (d->blk)
        return dl_cpu_pool_blocked_forward(be, kind, 0, d, y, x);
    DL_TRY(check_pool(kind, d, "pool_forward"));
    pool_task t = {d, kind, y, NULL, x, NULL, NULL, have_avx512(), 0, 0, 0, 0};
    t.max3 = kind == DL_POOL_MAX && dl_cpu_max3s2_takes(d);
    t.avg3 = kind == DL_POOL_AVG && dl_cpu_avg3s1_takes(d);
    size_t planes = (size_t)d->n * d->c;
    dl_pool_for(dl_cpu(be)->pool, planes, dl_cpu_plane_grain((size_t)d->h * d->w), pool_fwd_task,
                &t);
    return DL_OK;
}

/* y = max pooling of relu(x), without writing relu(x). */
int dl_cpu_relu_maxpool_forward(dl_backend *be, const dl_pool_desc *d, float *y, const float *x)
{
    if (d->blk)
        return dl_cpu_pool_blocked_forward(be, DL_POOL_MAX, 1, d, y, x);
    DL_TRY(check_pool(DL_POOL_MAX, d, "relu_maxpool_forward"));
    pool_task t = {d, DL_POOL_MAX, y, NULL, x, NULL, NULL, have_avx512(), 1, 0, 0, 0};
    t.max3 = dl_cpu_max3s2_takes(d);
    dl_pool_for(dl_cpu(be)->pool, (size_t)d->n * d->c, dl_cpu_plane_grain((size_t)d->h * d->w),
                pool_fwd_task, &t);
    return DL_OK;
}

/* dx [n, c, h, w] = the gradient of maxpool(relu(x)): written, not added. */
int dl_cpu_relu_maxpool_backward(dl_backend *be, const dl_pool_desc *d, float *dx, const float *dy,
                                 const float *x, const float *y)
{
    if (d->blk)
        return dl_cpu_pool_blocked_backward(be, DL_POOL_MAX, 1, 1, d, dx, dy, x, y);
    DL_TRY(check_pool(DL_POOL_MAX, d, "relu_maxpool_backward"));
    pool_task t = {d, DL_POOL_MAX, NULL, dx, x, dy, y, have_avx512(), 1, 1, 0, 0};
    t.max3 = dl_cpu_max3s2_takes(d);
    dl_pool_for(dl_cpu(be)->pool, (size_t)d->n * d->c, dl_cpu_plane_grain((size_t)d->h * d->w),
                pool_bwd_task, &t);
    return DL_OK;
}

/* dx [n, c, h, w] += pool'(dy [n, c, p, q]). Max pooling routes each dy to
 * the first window cell equal to y (found again by comparing x with y);
 * x and y are read only for max pooling. */
int dl_cpu_pool_backward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *dx,
                         const float *dy, const float *x, const float *y)
{
    if (d->blk)
        return dl_cpu_pool_blocked_backward(be, kind, 0, 0, d, dx, dy, x, y);
    DL_TRY(check_pool(kind, d, "pool_backward"));
    pool_task t = {d, kind, NULL, dx, x, dy, y, have_avx512(), 0, 0, 0, 0};
    t.max3 = kind == DL_POOL_MAX && dl_cpu_max3s2_takes(d);
    t.avg3 = kind == DL_POOL_AVG && dl_cpu_avg3s1_takes(d);
    size_t planes = (size_t)d->n * d->c;
    dl_pool_for(dl_cpu(be)->pool, planes, dl_cpu_plane_grain((size_t)d->h * d->w), pool_bwd_task,
                &t);
    return DL_OK;
}
