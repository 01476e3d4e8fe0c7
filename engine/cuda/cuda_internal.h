/* cuda_internal.h - private interface of the CUDA backend module: context, error macros, launch helpers
 *
 * The module (build/dlbench-cuda.so) is loaded by engine/core/backend.c with
 * dlopen. It links cudart, cuBLAS and cuDNN, never the driver library
 * (cudart loads libcuda.so.1 itself), and none of dlbench: errors are
 * recorded through the function the loader hands to
 * dl_cuda_backend_set_error() (dlbench's dl_error), so the module resolves
 * no dlbench symbol at load time and works from binaries not linked with
 * -rdynamic (the tests).
 *
 * Everything runs on one non-blocking stream per backend; cuBLAS and cuDNN
 * are bound to it. Ops are asynchronous unless their contract says a host
 * value comes back (to_host, sumsq, event_elapsed, sync); to_device returns
 * once its host source may be reused (for a pinned source, that waits for
 * the stream).
 *
 * Environment:
 *   DLBENCH_CUDA_TF32=0   f32 products (gemm, conv) without TF32 tensor
 *                         cores: full f32 accuracy, as on the CPU.
 */
#ifndef DL_CUDA_INTERNAL_H
#define DL_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* C headers of dlbench; the system headers they include are already in,
 * so nothing C++ lands inside the extern "C" block. */
extern "C" {
#include "engine/core/backend.h"
#include "engine/base/error.h"
}

/* --- error recording -------------------------------------------------------- */

typedef int (*dl_cuda_error_fn)(int code, const char *fmt, ...);

/* Records a message the way dl_error() does and returns code. */
int cuda_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int cuda_fail_rt(cudaError_t e, const char *file, int line, const char *call);
int cuda_fail_blas(cublasStatus_t s, const char *file, int line, const char *call);
int cuda_fail_dnn(cudnnStatus_t s, const char *file, int line, const char *call);
/* As cuda_fail_dnn; an out-of-memory status says asked bytes were asked
 * for (0: unknown) and how much device memory is free. */
int cuda_fail_dnn_sized(cudnnStatus_t s, const char *file, int line, const char *call,
                        size_t asked);

/* Each returns from the calling function with a negative code and a
 * message naming file, line and the call's text. */
#define CUDA_TRY(call)                                                                             \
    do {                                                                                           \
        cudaError_t cuda_try_e_ = (call);                                                          \
        if (cuda_try_e_ != cudaSuccess)                                                            \
            return cuda_fail_rt(cuda_try_e_, __FILE__, __LINE__, #call);                           \
    } while (0)
#define CUBLAS_TRY(call)                                                                           \
    do {                                                                                           \
        cublasStatus_t cublas_try_s_ = (call);                                                     \
        if (cublas_try_s_ != CUBLAS_STATUS_SUCCESS)                                                \
            return cuda_fail_blas(cublas_try_s_, __FILE__, __LINE__, #call);                       \
    } while (0)
#define CUDNN_TRY(call)                                                                            \
    do {                                                                                           \
        cudnnStatus_t cudnn_try_s_ = (call);                                                       \
        if (cudnn_try_s_ != CUDNN_STATUS_SUCCESS)                                                  \
            return cuda_fail_dnn(cudnn_try_s_, __FILE__, __LINE__, #call);                         \
    } while (0)
/* CUDNN_TRY for a call handed a workspace of ws bytes. */
#define CUDNN_TRY_WS(call, ws)                                                                     \
    do {                                                                                           \
        cudnnStatus_t cudnn_try_s_ = (call);                                                       \
        if (cudnn_try_s_ != CUDNN_STATUS_SUCCESS)                                                  \
            return cuda_fail_dnn_sized(cudnn_try_s_, __FILE__, __LINE__, #call, (ws));             \
    } while (0)
/* After a kernel launch: configuration errors show up here, faults at the
 * next synchronising call. what (a string literal) names the op. */
#define LAUNCH_CHECK(what)                                                                         \
    do {                                                                                           \
        cudaError_t launch_e_ = cudaGetLastError();                                                \
        if (launch_e_ != cudaSuccess)                                                              \
            return cuda_fail_rt(launch_e_, __FILE__, __LINE__, "kernel launch: " what);            \
    } while (0)

/* --- context ---------------------------------------------------------------- */

struct conv_cache; /* per-shape convolution descriptors and algorithms (cuda_conv.cu) */

typedef struct cuda_ctx {
    int device;
    int sm_count;
    int tf32; /* f32 products may use TF32 tensor cores */
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn; /* NULL until the first convolution: see cuda_dnn */
    void *blas_ws;     /* cuBLAS workspace bound to the stream */
    /* grown-on-demand device scratch for reductions and staging; reused
     * in stream order, so one op's use never overlaps another's */
    void *scratch;
    size_t scratch_size;
    /* pinned host cells: a result read back (sumsq) and the asynchronous
     * error flags kernels raise (bad embedding index or label) */
    double *host_result;
    int *host_flags;  /* [0] = error kind (0 none), [1] = bad value as int */
    float *host_badf; /* the offending value as written by the kernel */
    int *dev_flags;   /* device alias of host_flags */
    float *dev_badf;
    /* to_device_after: the copy engine's stream and its last copy (made
     * on first use) */
    cudaStream_t copy_stream;
    cudaEvent_t copy_done;
    struct conv_cache *conv;
    void *conv_ws; /* used when a conv op is handed no workspace */
    size_t conv_ws_size;
} cuda_ctx;

static inline cuda_ctx *CTX(dl_backend *be) { return (cuda_ctx *)be->ctx; }

/* Device scratch of at least bytes; NULL with the error set on failure. */
void *cuda_scratch(dl_backend *be, size_t bytes);
/* Reports (and clears) an error a kernel flagged since the last check;
 * call after the stream has been synchronised. */
int cuda_check_flags(dl_backend *be);

/* Error kinds written to host_flags[0]. */
enum { FLAG_NONE = 0, FLAG_EMBED_INDEX = 1, FLAG_LABEL = 2 };

/* --- launch helpers ----------------------------------------------------------- */

#define THREADS 256

/* Blocks for a grid-stride loop over n elements. */
static inline unsigned grid_for(dl_backend *be, size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    size_t cap = (size_t)CTX(be)->sm_count * 32;
    if (b > cap)
        b = cap;
    return b ? (unsigned)b : 1u;
}

/* --- op entry points (signatures as in backend.h) --------------------------------- */

int cuda_cast(dl_backend *be, void *dst, dl_dtype dt, const void *src, dl_dtype st, size_t n);
int cuda_round_through(dl_backend *be, float *dst, const float *src, dl_dtype via, size_t n);
int cuda_fill(dl_backend *be, float *dst, float value, size_t n);
int cuda_input_to_f32(dl_backend *be, float *dst, const void *src, dl_dtype type, size_t rows,
                      int channels, size_t plane, float scale, const float *mean, const float *std);
int cuda_bias_add(dl_backend *be, float *y, const float *b, int rows, int cols, int inner);
int cuda_bias_grad(dl_backend *be, float *db, const float *dy, int rows, int cols, int inner);
int cuda_act_forward(dl_backend *be, dl_act kind, float *y, const float *x, size_t n);
int cuda_act_backward(dl_backend *be, dl_act kind, float *dx, const float *x, const float *y,
                      const float *dy, size_t n);
int cuda_add(dl_backend *be, float *y, const float *a, const float *b, size_t n);
int cuda_axpy(dl_backend *be, float *y, float alpha, const float *x, size_t n);
int cuda_scale(dl_backend *be, float *x, float alpha, size_t n);
int cuda_dropout_forward(dl_backend *be, float *y, const float *x, size_t n, float p, uint64_t seed,
                         uint64_t stream, uint64_t counter);
int cuda_dropout_backward(dl_backend *be, float *dx, const float *dy, size_t n, float p,
                          uint64_t seed, uint64_t stream, uint64_t counter);
int cuda_pool_forward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *y,
                      const float *x);
int cuda_pool_backward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *dx,
                       const float *dy, const float *x, const float *y);
int cuda_adaptive_avgpool_forward(dl_backend *be, const dl_pool_desc *d, float *y, const float *x);
int cuda_adaptive_avgpool_backward(dl_backend *be, const dl_pool_desc *d, float *dx,
                                   const float *dy);
int cuda_batchnorm_forward(dl_backend *be, int training, int n, int c, int inner, float momentum,
                           float eps, float *y, const float *x, const float *gamma,
                           const float *beta, float *running_mean, float *running_var,
                           float *save_mean, float *save_invstd);
int cuda_batchnorm_backward(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                            float *dbeta, const float *dy, const float *x, const float *gamma,
                            const float *save_mean, const float *save_invstd);
int cuda_layernorm_forward(dl_backend *be, int rows, int cols, float eps, float *y, const float *x,
                           const float *gamma, const float *beta, float *save_mean,
                           float *save_invstd);
int cuda_layernorm_backward(dl_backend *be, int rows, int cols, float *dx, float *dgamma,
                            float *dbeta, const float *dy, const float *x, const float *gamma,
                            const float *save_mean, const float *save_invstd);
int cuda_embedding_forward(dl_backend *be, int n, int vocab, int dim, float *y, const float *idx,
                           const float *table);
int cuda_embedding_backward(dl_backend *be, int n, int vocab, int dim, float *dtable,
                            const float *idx, const float *dy);
int cuda_softmax_xent(dl_backend *be, int rows, int classes, const float *logits,
                      const int32_t *labels, float smoothing, float grad_scale, float *dlogits,
                      float *stats);
int cuda_mse(dl_backend *be, size_t n, const float *pred, const float *target, float grad_scale,
             float *dpred, float *stats);
int cuda_bce_logits(dl_backend *be, size_t n, const float *logits, const float *target,
                    float grad_scale, float *dlogits, float *stats);
int cuda_sgd_update(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                    float momentum, float wd, int nesterov, float grad_scale);
int cuda_adam_update(dl_backend *be, size_t n, float *w, float *g, float *m, float *v, float lr,
                     float beta1, float beta2, float eps, float wd, int decoupled, long step,
                     float grad_scale);
int cuda_sumsq(dl_backend *be, const float *x, size_t n, double *host_result);
int cuda_grad_guard(dl_backend *be, float *g, size_t n, float grad_scale, float max_norm,
                    float *cells);
int cuda_sgd_update_guarded(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                            float momentum, float wd, int nesterov, float grad_scale,
                            const float *cells);
int cuda_adam_update_guarded(dl_backend *be, size_t n, float *w, float *g, float *m, float *v,
                             float lr, float beta1, float beta2, float eps, float wd, int decoupled,
                             long step, float grad_scale, const float *cells);

/* dst = src rounded through bf16/f16 (cuda_kernels.cu). */
int cuda_round_copy(dl_backend *be, float *dst, const float *src, dl_dtype via, size_t n);

/* cuda_conv.cu */
size_t cuda_conv_workspace(dl_backend *be, const dl_conv_desc *d, dl_dtype compute);
int cuda_conv_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                      const float *w, const float *b, void *ws, size_t ws_bytes, dl_dtype compute);
int cuda_conv_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                            const float *w, void *ws, size_t ws_bytes, dl_dtype compute);
int cuda_conv_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                              const float *dy, const float *x, void *ws, size_t ws_bytes,
                              dl_dtype compute);
int cuda_conv_algo(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, char *buf, size_t size);
void cuda_conv_cache_destroy(dl_backend *be);

#endif
