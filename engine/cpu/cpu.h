/* cpu.h - private interface of the CPU backend: context, thread pool, kernel entry points */
#ifndef DL_CPU_H
#define DL_CPU_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/half.h"
#include "engine/core/backend.h"

/* A persistent pool of worker threads for parallel loops. fn is called
 * with disjoint [begin, end) ranges covering [0, n), each at least `grain`
 * long, from any of the threads (the calling thread works too); the
 * ranges depend only on n, grain and the thread count, never on timing.
 * Loops shorter than 2 * grain run inline. Not reentrant. */
typedef void (*dl_pool_fn)(void *arg, size_t begin, size_t end);
typedef struct dl_pool dl_pool;
dl_pool *dl_pool_create(int threads);
void dl_pool_destroy(dl_pool *p);
void dl_pool_for(dl_pool *p, size_t n, size_t grain, dl_pool_fn fn, void *arg);
int dl_pool_threads(const dl_pool *p);

/* Planes of `plane` floats a chunk of a memory-bound op over planes: at
 * least 256 KB, so that a tensor under 512 KB stays on the calling thread.
 * Such a tensor is in the cache of the core that wrote it; where the
 * cores share none (these 2-vCPU machines), a second thread reads its
 * half at a third of the speed (the ResNet at batch 8 was slower at two
 * threads than at one: its BatchNorm and ReLU twice as slow). */
static inline size_t dl_cpu_plane_grain(size_t plane) { return 1 + 65536 / (plane ? plane : 1); }

/* Whether the kernels may use AVX-512F (16-lane bodies; the AVX2 ones
 * otherwise): the CPU's answer, unless DLBENCH_CPU_AVX512=0 (the AVX2
 * kernels on an AVX-512 CPU, for comparisons and tests) or a test has
 * called dl_cpu_set_avx512. Read once, at the first call. */
extern _Atomic int dl_cpu_avx512_state; /* -1 until known */
int dl_cpu_avx512_detect(void);
static inline int dl_cpu_avx512(void)
{
    int u = atomic_load_explicit(&dl_cpu_avx512_state, memory_order_relaxed);
    return u >= 0 ? u : dl_cpu_avx512_detect();
}
/* Tests: on 0 the AVX2 kernels run from now on; on 1 the AVX-512 ones
 * where the CPU has them. Returns the setting now in force. Not while
 * kernels run. */
int dl_cpu_set_avx512(int on);

#define DL_CPU_SCRATCH_SLOTS 6

typedef struct dl_cpu_ctx {
    dl_pool *pool;
    int threads;
    int has_avx512_bf16; /* runtime CPU check */
    /* scratch reused across calls (grown, never shrunk): bf16/f16 operand
     * copies for low-precision products */
    void *scratch[DL_CPU_SCRATCH_SLOTS];
    size_t scratch_size[DL_CPU_SCRATCH_SLOTS];
    struct dl_cpu_dnnl *dnnl; /* oneDNN's engine and cached convolutions (cpu_conv_dnnl.c) */
} dl_cpu_ctx;

/* Scratch slots: 0-2 the GEMM's (cpu_gemm.c), 3 the oneDNN convolutions',
 * 4 the losses' per-block partial sums (cpu_elementwise.c), 5 LayerNorm
 * backward's per-block dgamma/dbeta and BatchNorm's per-plane sums
 * (cpu_norm.c). */
#define DL_CPU_SCRATCH_CONV 3
#define DL_CPU_SCRATCH_LOSS 4
#define DL_CPU_SCRATCH_NORM 5

static inline dl_cpu_ctx *dl_cpu(dl_backend *be) { return (dl_cpu_ctx *)be->ctx; }
/* The type whose kernels and algorithm rules compute runs on: f32 for bf16
 * where the CPU has no bf16 dot products, and for fp16 (no kernel here
 * computes in it), on operands rounded to the type. */
static inline dl_dtype dl_cpu_kernel_type(dl_backend *be, dl_dtype compute)
{
    return compute == DL_F16 || (compute == DL_BF16 && !dl_cpu(be)->has_avx512_bf16) ? DL_F32
                                                                                     : compute;
}

/* 64-byte aligned memory (the backend's alloc slot); NULL and dl_error()
 * when the machine has not that much available. dl_cpu_free releases it. */
void *dl_cpu_alloc(dl_backend *be, size_t bytes);
void dl_cpu_free(dl_backend *be, void *p);
/* Scratch buffer `slot` of at least bytes (64-byte aligned); NULL on OOM.
 * dl_cpu_scratch_free releases every slot (trim, destroy). */
void *dl_cpu_scratch(dl_backend *be, int slot, size_t bytes);
void dl_cpu_scratch_free(dl_backend *be);

/* Kernels, one group per file (cpu_<group>.c); signatures as in backend.h. */
/* The library behind f32 products on this CPU: "oneDNN" or "OpenBLAS". */
const char *dl_cpu_sgemm_name(void);
/* One f32 product (row-major, as cblas_sgemm) by that library on the
 * calling thread alone: for kernels that already run on the pool. */
void dl_cpu_sgemm_here(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       int lda, const float *b, int ldb, float beta, float *c, int ldc);
int dl_cpu_gemm(dl_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                const void *a, int lda, const void *b, int ldb, dl_dtype ab, float beta, float *c,
                int ldc);
size_t dl_cpu_conv_workspace(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
int dl_cpu_conv_algo(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, char *buf,
                     size_t size);
int dl_cpu_conv_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                        const float *w, const float *b, void *ws, dl_dtype compute);
int dl_cpu_conv_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                              const float *w, void *ws, dl_dtype compute);
/* dl_cpu_conv_backward_data, dx written instead of added (the op table's
 * conv_backward_data_set). */
int dl_cpu_conv_backward_data_set(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                  const float *w, void *ws, dl_dtype compute);
int dl_cpu_conv_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                const float *dy, const float *x, void *ws, dl_dtype compute);
/* dl_cpu_conv_backward_filter, then backward data into dx (written where
 * set; none where dx is NULL), the same bits (the op table's
 * conv_backward): one pass over oneDNN's chunks where it runs both. */
int dl_cpu_conv_backward(dl_backend *be, const dl_conv_desc *d, float *dw, float *db, float *dx,
                         int set, const float *dy, const float *x, const float *w, void *ws,
                         dl_dtype compute);
/* The window of pooling output (oh, ow) clipped to the input, rows [h0,
 * h1) and columns [w0, w1); *count is the divisor of average pooling:
 * the window clipped to the padded input, padding cells included
 * (PyTorch count_include_pad=True). */
static inline void dl_cpu_pool_window(const dl_pool_desc *d, int oh, int ow, int *h0, int *h1,
                                      int *w0, int *w1, int *count)
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
/* Pooling of x and y in channel blocks (d->blk; cpu_pool_blocked.c):
 * forward y = pool(x) (relu: max pooling of relu(x)); backward dx (+)=
 * the gradient (set: written), max pooling's to the first cell in scan
 * order equal to y. The plain ops' values (forward bit for bit; the
 * backward's additions where windows overlap may run in another order). */
int dl_cpu_pool_blocked_forward(dl_backend *be, dl_pool_kind kind, int relu, const dl_pool_desc *d,
                                float *y, const float *x);
int dl_cpu_pool_blocked_backward(dl_backend *be, dl_pool_kind kind, int relu, int set,
                                 const dl_pool_desc *d, float *dx, const float *dy, const float *x,
                                 const float *y);
/* Activations in channel blocks (the op table's activation_blocks and
 * conv_blocks; dl_conv_desc's x_blk, y_blk): cpu_conv.c. */
int dl_cpu_activation_blocks(dl_backend *be, dl_dtype compute);
int dl_cpu_conv_blocks(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
/* cpu_conv_1x1_blocked.c: 1x1 gradients on x and y both in 16-channel
 * blocks (f32 kernels, AVX-512; emulated bf16/f16 on rounded operands):
 * _takes says whether the own kernel runs direction dir (1 data, 2
 * filter) of d in compute on be; _filter adds dW (no db), _data adds
 * into dx or writes it (set). */
int dl_cpu_conv_1x1_blocked_takes(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, int dir);
int dl_cpu_conv_1x1_blocked_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                   const float *dy, const float *x, dl_dtype compute);
int dl_cpu_conv_1x1_blocked_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                 const float *w, int set, dl_dtype compute);
/* cpu_conv_small.c: direct forward kernels for stride-1 convolutions of
 * 1 to 3 input channels and up to 15 outputs (LeNet's, small stems), on
 * NCHW, f32 and emulated bf16/f16, AVX-512F or AVX2: _fits says whether
 * the shape and CPU suit them; _forward writes y (+ b). The filter
 * gradient likewise (_filter_fits: planes up to about 2700 outputs at
 * the padded pitch): _filter adds into dw (db is the caller's). */
int dl_cpu_conv_small_fits(const dl_conv_desc *d, dl_dtype compute);
int dl_cpu_conv_small_filter_fits(const dl_conv_desc *d, dl_dtype compute);
int dl_cpu_conv_small_filter(dl_backend *be, const dl_conv_desc *d, float *dw, const float *dy,
                             const float *x, dl_dtype compute);
/* The filter gradient of such a stem with one input channel (any number
 * of outputs) with dy in
 * blocks of the vector's width (y_blk 16 with AVX-512, 8 with AVX2), x
 * plain, f32 or emulated bf16/f16: _lanes_takes says whether it applies; _lanes_filter adds
 * into dw (not db) using _lanes_workspace bytes of ws. */
int dl_cpu_conv_small_lanes_takes(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
size_t dl_cpu_conv_small_lanes_workspace(const dl_conv_desc *d);
int dl_cpu_conv_small_lanes_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                   const float *dy, const float *x, void *ws, dl_dtype compute);
int dl_cpu_conv_small_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                              const float *w, const float *b, dl_dtype compute);
/* cpu_conv_wino.c: Winograd F(2x2, 3x3) for 3x3 stride-1 f32 (padding 1 or 0)
 * convolutions (and emulated bf16/f16: operands rounded first, as the
 * oneDNN path does) on x and y both in 8-channel blocks, AVX2 CPUs (where
 * oneDNN has no Winograd kernels), forward (0), data gradient (1) and
 * filter gradient (2). _fits: the shape and CPU, blocks aside
 * (DLBENCH_CONV_WINO=0|1 overrides); _takes: and the blocks are there.
 * _data adds into dx or writes it (set); _filter adds into dw (no db). */
int dl_cpu_conv_wino_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, int dir);
int dl_cpu_conv_wino_takes(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, int dir);
int dl_cpu_conv_wino_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                             const float *w, const float *b, dl_dtype compute);
int dl_cpu_conv_wino_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                          const float *w, int set, dl_dtype compute);
int dl_cpu_conv_wino_filter(dl_backend *be, const dl_conv_desc *d, float *dw, const float *dy,
                            const float *x, dl_dtype compute);
/* cpu_conv_dnnl.c: dense f32 and bf16 convolutions through oneDNN where the build
 * has it (DL_HAVE_DNNL). dl_cpu_dnnl_conv_wanted: whether to try it for d
 * (not when DLBENCH_CONV=own). dl_cpu_dnnl_conv runs direction dir (0
 * forward: out = y, in = x, b may be NULL; 1 backward data: out = dx +=,
 * in = dy; 2 backward filter: out = dw +=, out2 = db += (may be NULL),
 * in = x, in2 = dy; 3 backward data as 1 with dx written); returns 1 when done, 0 when oneDNN has no primitive
 * for d (the own kernels run), < 0 on error. dl_cpu_dnnl_free releases
 * the cache (backend destroy). */
int dl_cpu_dnnl_conv_wanted(const dl_conv_desc *d, dl_dtype compute);
/* The same for direction dir (0 forward, 1 data, 2 filter): also some
 * directions below 8 input channels in f32. */
int dl_cpu_dnnl_conv_wanted_dir(const dl_conv_desc *d, dl_dtype compute, int dir);
int dl_cpu_dnnl_conv(dl_backend *be, int dir, const dl_conv_desc *d, dl_dtype compute, float *out,
                     float *out2, const float *in, const float *in2, const float *w,
                     const float *b);
/* Both backward directions of d at once, as dl_cpu_dnnl_conv 2 (dw +=, no
 * db) then 1 or 3 (dx added into, or written where set) with the same
 * bits, chunk by chunk: a chunk's dy is read (and rounded) once for both.
 * Returns as dl_cpu_dnnl_conv. */
int dl_cpu_dnnl_conv_backward(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, float *dw,
                              float *dx, int set, const float *x, const float *dy, const float *w);
/* The kernels oneDNN runs for d (made now if new) into buf: 1, or 0 when
 * oneDNN does not take d. */
int dl_cpu_dnnl_conv_describe(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, char *buf,
                              size_t size);
void dl_cpu_dnnl_free(dl_cpu_ctx *c);
/* oneDNN's sgemm (row-major, as cblas_sgemm) on the calling thread alone;
 * -1 where the build has no oneDNN or it refuses (the caller runs
 * OpenBLAS). */
int dl_cpu_dnnl_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc);
/* v rounded through bf16 or f16 and back (f32: v): the operands of the
 * own low-precision convolutions, computed in f32 on rounded values. */
static inline float dl_cpu_round_to(float v, dl_dtype t)
{
    if (t == DL_BF16)
        return dl_bf16_to_f32(dl_f32_to_bf16(v));
    if (t == DL_F16)
        return dl_f16_to_f32(dl_f32_to_f16(v));
    return v;
}
/* cpu_conv_grouped.c: descriptors with groups > 1 or dilation > 1 (the
 * conv entry points above hand them over; same contracts; backward data
 * writes dx when set, else adds). */
int dl_cpu_conv_grouped_check(const dl_conv_desc *d, dl_dtype compute, const char *op);
size_t dl_cpu_conv_grouped_workspace(const dl_conv_desc *d, dl_dtype compute);
int dl_cpu_conv_grouped_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                                const float *w, const float *b, void *ws, dl_dtype compute);
int dl_cpu_conv_grouped_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx,
                                      const float *dy, const float *w, void *ws, dl_dtype compute,
                                      int set);
int dl_cpu_conv_grouped_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                        const float *dy, const float *x, void *ws,
                                        dl_dtype compute);
/* cpu_conv_depthwise.c: groups equal to the input channels (k a multiple
 * of c), direct AVX2 kernels; cpu_conv_grouped.c's entry points hand such
 * descriptors over when _fits says so (an AVX2 CPU, planes up to 4 MiB).
 * Same contracts, on already checked descriptors; the filter gradient
 * leaves db to the caller. */
int dl_cpu_conv_dw_fits(const dl_conv_desc *d, dl_dtype compute);
/* Whether a descriptor that fits runs with eight channels in the lanes
 * (no multiplier, 8 channels or more, planes up to 4096 padded pixels;
 * DLBENCH_DW_LANES=0: never) rather than on padded planes. */
int dl_cpu_conv_dw_lanes(const dl_conv_desc *d);
size_t dl_cpu_conv_dw_workspace(const dl_conv_desc *d);
int dl_cpu_conv_dw_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                           const float *w, const float *b, void *ws, dl_dtype compute);
int dl_cpu_conv_dw_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                 const float *w, void *ws, dl_dtype compute, int set);
int dl_cpu_conv_dw_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                   const float *dy, const float *x, void *ws, dl_dtype compute);
/* cpu_pool3.c: 3x3 stride-2 max pooling with pad 0 or 1 on 16 lanes
 * (AVX-512F) or 8 (AVX2), planes [begin, end) of n*c of an already
 * checked descriptor, the same contracts as the pooling entry points
 * (fused: of relu(x); set: dx written, not added). _takes: whether it
 * runs d (one of the two, output rows up to 1024 / 512, planes that fit
 * its scratch, DLBENCH_POOL3 not 0, read per call). */
int dl_cpu_max3s2_takes(const dl_pool_desc *d);
void dl_cpu_max3s2_forward(const dl_pool_desc *d, int fused, const float *x, float *y, size_t begin,
                           size_t end);
void dl_cpu_max3s2_backward(const dl_pool_desc *d, int fused, int set, const float *x,
                            const float *y, const float *dy, float *dx, size_t begin, size_t end);
/* The same file: 3x3 stride-1 average pooling with pad 0 or 1 (divisor
 * 9, count_include_pad), forward and backward (dx added to). */
int dl_cpu_avg3s1_takes(const dl_pool_desc *d);
void dl_cpu_avg3s1_forward(const dl_pool_desc *d, const float *x, float *y, size_t begin,
                           size_t end);
void dl_cpu_avg3s1_backward(const dl_pool_desc *d, const float *dy, float *dx, size_t begin,
                            size_t end);
/* cpu_conv_1x1.c: dense 1x1 convolutions with pad 0 and any stride, f32
 * and bf16 compute, AVX-512 kernels (same contracts as the conv entry
 * points; backward data writes dx when set, else adds). _fits: whether
 * they can take (d, compute) on this CPU (not with DLBENCH_CPU_AVX512=0);
 * _workspace: the bytes they need for d on this backend. */
int dl_cpu_conv_1x1_fits(const dl_conv_desc *d, dl_dtype compute);
size_t dl_cpu_conv_1x1_workspace(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
int dl_cpu_conv_1x1_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                            const float *w, const float *b, void *ws, dl_dtype compute);
int dl_cpu_conv_1x1_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                  const float *w, void *ws, dl_dtype compute, int set);
int dl_cpu_conv_1x1_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                    const float *dy, const float *x, void *ws, dl_dtype compute);
/* cpu_conv_bf16.c: bf16 kernels of dense convolutions (not 1x1) at
 * stride 1 and 2 (all three directions; the data gradient at stride 2
 * for kernels of 2 or more taps each way) as shifted dot products, on
 * CPUs with AVX-512 BF16. _fits: whether one takes (d,
 * compute) here (not with DLBENCH_CONV=dnnl where oneDNN has the shape);
 * _workspace: its bytes; backward_filter: dw += the gradient (db is the
 * caller's). */
int dl_cpu_conv_bf16_filter_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
size_t dl_cpu_conv_bf16_filter_workspace(dl_backend *be, const dl_conv_desc *d);
int dl_cpu_conv_bf16_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw,
                                     const float *dy, const float *x, void *ws);
/* The same file's forward and backward data, on channel pairs (backward
 * data writes dx when set, else adds). */
int dl_cpu_conv_bf16_forward_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
int dl_cpu_conv_bf16_data_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
size_t dl_cpu_conv_bf16_pairs_workspace(dl_backend *be, const dl_conv_desc *d);
int dl_cpu_conv_bf16_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                             const float *w, const float *b, void *ws);
int dl_cpu_conv_bf16_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx,
                                   const float *dy, const float *w, void *ws, int set);
/* cpu_adaptive_pool.c */
int dl_cpu_adaptive_avgpool_forward(dl_backend *be, const dl_pool_desc *d, float *y,
                                    const float *x);
int dl_cpu_adaptive_avgpool_backward(dl_backend *be, const dl_pool_desc *d, float *dx,
                                     const float *dy);
int dl_cpu_pool_forward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *y,
                        const float *x);
int dl_cpu_relu_maxpool_forward(dl_backend *be, const dl_pool_desc *d, float *y, const float *x);
int dl_cpu_relu_maxpool_backward(dl_backend *be, const dl_pool_desc *d, float *dx, const float *dy,
                                 const float *x, const float *y);
int dl_cpu_pool_backward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *dx,
                         const float *dy, const float *x, const float *y);
int dl_cpu_batchnorm_forward(dl_backend *be, int training, int n, int c, int inner, float momentum,
                             float eps, float *y, const float *x, const float *gamma,
                             const float *beta, float *running_mean, float *running_var,
                             float *save_mean, float *save_invstd);
int dl_cpu_batchnorm_backward(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                              float *dbeta, const float *dy, const float *x, const float *gamma,
                              const float *save_mean, const float *save_invstd);
/* The same with dx written, not added (dgamma, dbeta still accumulate). */
int dl_cpu_batchnorm_backward_set(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                                  float *dbeta, const float *dy, const float *x, const float *gamma,
                                  const float *save_mean, const float *save_invstd);
/* BatchNorm then ReLU in one pass each way (the op table's
 * batchnorm_relu_forward / batchnorm_relu_backward_set). */
int dl_cpu_batchnorm_relu_forward(dl_backend *be, int training, int n, int c, int inner,
                                  float momentum, float eps, float *y, const float *x,
                                  const float *gamma, const float *beta, float *running_mean,
                                  float *running_var, float *save_mean, float *save_invstd);
/* The BatchNorm ops on x [n, c / blk, inner, blk] (the op table's
 * batchnorm_blocked_forward / _backward, cpu_norm.c). */
int dl_cpu_batchnorm_blocked_forward(dl_backend *be, int blk, int relu, int training, int n, int c,
                                     int inner, float momentum, float eps, float *y, const float *x,
                                     const float *gamma, const float *beta, float *running_mean,
                                     float *running_var, float *save_mean, float *save_invstd);
int dl_cpu_batchnorm_blocked_backward(dl_backend *be, int blk, int relu, int set, int n, int c,
                                      int inner, float *dx, float *dgamma, float *dbeta,
                                      const float *dy, const float *x, const float *gamma,
                                      const float *beta, const float *save_mean,
                                      const float *save_invstd);
int dl_cpu_batchnorm_relu_backward_set(dl_backend *be, int n, int c, int inner, float *dx,
                                       float *dgamma, float *dbeta, const float *dy, const float *x,
                                       const float *gamma, const float *beta,
                                       const float *save_mean, const float *save_invstd);
/* A residual add and the ReLU after it (backend.h: add_relu_forward /
 * add_relu_backward_set). */
int dl_cpu_add_relu_forward(dl_backend *be, float *y, const float *a, const float *b, size_t n);
int dl_cpu_add_relu_backward_set(dl_backend *be, float *da, float *db, const float *y,
                                 const float *dy, size_t n);
int dl_cpu_layernorm_forward(dl_backend *be, int rows, int cols, float eps, float *y,
                             const float *x, const float *gamma, const float *beta,
                             float *save_mean, float *save_invstd);
int dl_cpu_layernorm_backward(dl_backend *be, int rows, int cols, float *dx, float *dgamma,
                              float *dbeta, const float *dy, const float *x, const float *gamma,
                              const float *save_mean, const float *save_invstd);

/* cpu_attention.c */
int dl_cpu_attention_forward(dl_backend *be, int n, int t, int heads, int d, int causal,
                             float scale, const float *qkv, float *o, float *lse);
int dl_cpu_attention_backward(dl_backend *be, int n, int t, int heads, int d, int causal,
                              float scale, const float *qkv, const float *o, const float *lse,
                              const float *do_, float *dqkv);

/* cpu_elementwise.c */
int dl_cpu_cast(dl_backend *be, void *dst, dl_dtype dt, const void *src, dl_dtype st, size_t n);
/* d[0..n) = the bf16 bits of s[0..n) (dl_f32_to_bf16's rounding), on
 * this thread: the cast's loop, for kernels that convert inside a pool
 * task (the im2col columns). */
void dl_cpu_f32_to_bf16(uint16_t *restrict d, const float *restrict s, size_t n);
/* d[0..n) = the bf16 or f16 values s[0..n) as floats, on this thread: the
 * cast's loop, for the emulated GEMM's widening. */
void dl_cpu_to_f32(float *restrict d, const uint16_t *restrict s, dl_dtype t, size_t n);
int dl_cpu_round_through(dl_backend *be, float *dst, const float *src, dl_dtype via, size_t n);
/* dst[0..n) = src[0..n) rounded through via (bf16 or f16; f32 copies) and
 * back, on this thread; dst may be src. The operands of low-precision
 * compute that the CPU has no arithmetic for, run on f32 kernels. */
void dl_cpu_round_run(float *dst, const float *src, dl_dtype via, size_t n);
/* Activations between [n, c, hw] and channel blocks [n, ceil(c / blk),
 * hw, blk] (nChw8c, nChw16c; blk a multiple of 8), on this thread
 * (cpu_layout.c). To the blocks, the channels past c are zeros; either
 * way dst is written, or added into where add is set. The op table's
 * blocks_to_plain and plain_to_blocks: the same over the pool, images
 * split. */
void dl_cpu_to_blocked(float *restrict dst, const float *restrict src, int n, int c, size_t hw,
                       int blk, int add);
void dl_cpu_from_blocked(float *restrict dst, const float *restrict src, int n, int c, size_t hw,
                         int blk, int add);
int dl_cpu_blocks_to_plain(dl_backend *be, int blk, int n, int c, size_t hw, float *dst,
                           const float *src);
int dl_cpu_plain_to_blocks(dl_backend *be, int blk, int add, int n, int c, size_t hw, float *dst,
                           const float *src);
int dl_cpu_input_to_f32(dl_backend *be, float *dst, const void *src, dl_dtype type, size_t rows,
                        int channels, size_t plane, float scale, const float *mean,
                        const float *std);
int dl_cpu_bias_add(dl_backend *be, float *y, const float *b, int rows, int cols, int inner);
int dl_cpu_bias_grad(dl_backend *be, float *db, const float *dy, int rows, int cols, int inner);
int dl_cpu_act_forward(dl_backend *be, dl_act kind, float *y, const float *x, size_t n);
int dl_cpu_act_forward_round(dl_backend *be, dl_act kind, float *y, const float *x, size_t n,
                             dl_dtype round);
int dl_cpu_act_backward(dl_backend *be, dl_act kind, float *dx, const float *x, const float *y,
                        const float *dy, size_t n);
/* dx = act'(x) * dy: dx written, not added. */
int dl_cpu_act_backward_set(dl_backend *be, dl_act kind, float *dx, const float *x, const float *y,
                            const float *dy, size_t n);
int dl_cpu_add(dl_backend *be, float *y, const float *a, const float *b, size_t n);
int dl_cpu_axpy(dl_backend *be, float *y, float alpha, const float *x, size_t n);
int dl_cpu_scale(dl_backend *be, float *x, float alpha, size_t n);
int dl_cpu_fill(dl_backend *be, float *dst, float value, size_t n);
int dl_cpu_dropout_forward(dl_backend *be, float *y, const float *x, size_t n, float p,
                           uint64_t seed, uint64_t stream, uint64_t counter);
int dl_cpu_dropout_backward(dl_backend *be, float *dx, const float *dy, size_t n, float p,
                            uint64_t seed, uint64_t stream, uint64_t counter);
int dl_cpu_embedding_forward(dl_backend *be, int n, int vocab, int dim, float *y, const float *idx,
                             const float *table);
int dl_cpu_embedding_backward(dl_backend *be, int n, int vocab, int dim, float *dtable,
                              const float *idx, const float *dy);
int dl_cpu_softmax_xent(dl_backend *be, int rows, int classes, const float *logits,
                        const int32_t *labels, float smoothing, float grad_scale, float *dlogits,
                        float *stats);
int dl_cpu_softmax_xent_tokens(dl_backend *be, int rows, int classes, const float *logits,
                               const int32_t *labels, int ignore_index, float smoothing,
                               float grad_scale, float *dlogits, float *stats);
int dl_cpu_mse(dl_backend *be, size_t n, const float *pred, const float *target, float grad_scale,
               float *dpred, float *stats);
int dl_cpu_bce_logits(dl_backend *be, size_t n, const float *logits, const float *target,
                      float grad_scale, float *dlogits, float *stats);
int dl_cpu_sgd_update(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                      float momentum, float wd, int nesterov, float grad_scale);
int dl_cpu_adam_update(dl_backend *be, size_t n, float *w, float *g, float *m, float *v, float lr,
                       float beta1, float beta2, float eps, float wd, int decoupled, long step,
                       float grad_scale);
int dl_cpu_sgd_update_lowp(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                           float momentum, float wd, int nesterov, float grad_scale, void *w_lp,
                           dl_dtype lp);
int dl_cpu_adam_update_lowp(dl_backend *be, size_t n, float *w, float *g, float *m, float *v,
                            float lr, float beta1, float beta2, float eps, float wd, int decoupled,
                            long step, float grad_scale, void *w_lp, dl_dtype lp);
int dl_cpu_sumsq(dl_backend *be, const float *x, size_t n, double *host_result);

#endif
