/* cuda_backend.cu - the CUDA backend module: entry point, op table, memory, copies, events, GEMM */
#include <stdarg.h>

#include "engine/cuda/cuda_attention.h"
#include "engine/cuda/cuda_internal.h"

/* --- error recording -------------------------------------------------------- */

/* dlbench's dl_error, handed over by the loader before the module is
 * opened; until then messages land in a module-local buffer. */
static dl_cuda_error_fn error_sink;
static thread_local char local_message[1024];

/* Called by engine/core/backend.c right after dlopen: the module records its
 * errors through fn so that dl_error_message() in dlbench sees them. */
extern "C" __attribute__((visibility("default"))) void
dl_cuda_backend_set_error(dl_cuda_error_fn fn)
{
    error_sink = fn;
}

int cuda_error(int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (error_sink)
        return error_sink(code, "%s", msg);
    memcpy(local_message, msg, sizeof msg);
    return code;
}

/* "engine/cuda/x.cu:12" is long; the file's base name is enough. */
static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cuda_fail_rt(cudaError_t e, const char *file, int line, const char *call)
{
    int code = e == cudaErrorMemoryAllocation ? DL_ENOMEM : DL_ERR;
    if (e == cudaErrorMemoryAllocation)
        (void)cudaGetLastError(); /* not sticky: clear it */
    return cuda_error(code, "cuda: %s:%d: %s: %s (%s)", base_name(file), line, call,
                      cudaGetErrorString(e), cudaGetErrorName(e));
}

static const char *blas_status_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialised";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_MAPPING_ERROR: return "mapping error";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "license error";
    default: return "unknown status";
    }
}

int cuda_fail_blas(cublasStatus_t s, const char *file, int line, const char *call)
{
    int code = s == CUBLAS_STATUS_ALLOC_FAILED    ? DL_ENOMEM
               : s == CUBLAS_STATUS_NOT_SUPPORTED ? DL_EUNSUPPORTED
                                                  : DL_ERR;
    return cuda_error(code, "cublas: %s:%d: %s: %s (%d)", base_name(file), line, call,
                      blas_status_name(s), (int)s);
}

/* cuDNN 9 status codes are a category (x000) plus a specific error:
 * sorted by category (CUDNN_STATUS_CATEGORY), never compared whole, so
 * that every allocation failure reads as one. */
static int dnn_code(cudnnStatus_t s)
{
    if (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        return DL_ENOMEM;
    switch (CUDNN_STATUS_CATEGORY((int)s)) {
    case CUDNN_STATUS_NOT_SUPPORTED: return DL_EUNSUPPORTED;
    default: return DL_ERR;
    }
}

static const char *fmt_bytes(char *buf, size_t size, size_t bytes);

int cuda_fail_dnn_sized(cudnnStatus_t s, const char *file, int line, const char *call, size_t asked)
{
    char detail[256] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    int code = dnn_code(s);
    if (code != DL_ENOMEM)
        return cuda_error(code, "cudnn: %s:%d: %s: %s (status %d)%s%.240s", base_name(file), line,
                          call, cudnnGetErrorString(s), (int)s, detail[0] ? ": " : "", detail);
    /* out of memory: what was asked (when the caller knows) and what is free */
    size_t free_b = 0, total_b = 0;
    char a[32] = "an unknown amount", f[32] = "?", t[32] = "?";
    if (asked)
        fmt_bytes(a, sizeof a, asked);
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        fmt_bytes(f, sizeof f, free_b);
        fmt_bytes(t, sizeof t, total_b);
    } else {
        (void)cudaGetLastError();
    }
    return cuda_error(DL_ENOMEM,
                      "cudnn: %s:%d: %s: out of memory (%s, status %d): asked for %s of "
                      "workspace, %s free of %s; try a smaller batch, gradient accumulation or "
                      "DLBENCH_CUDNN_FIND=0",
                      base_name(file), line, call, cudnnGetErrorString(s), (int)s, a, f, t);
}

int cuda_fail_dnn(cudnnStatus_t s, const char *file, int line, const char *call)
{
    return cuda_fail_dnn_sized(s, file, line, call, 0);
}

/* "1.50 GiB" / "512.0 MiB" / "123 bytes". */
static const char *fmt_bytes(char *buf, size_t size, size_t bytes)
{
    double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, size, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, size, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, size, "%zu bytes", bytes);
    return buf;
}

/* --- memory ------------------------------------------------------------------ */

static void *cu_alloc(dl_backend *be, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    char asked[32], fr[32], tot[32];
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError();
        cuda_error(DL_ENOMEM, "cuda: cannot allocate %s: %s", fmt_bytes(asked, sizeof asked, bytes),
                   cudaGetErrorString(e));
        return NULL;
    }
    cuda_error(e == cudaErrorMemoryAllocation ? DL_ENOMEM : DL_ERR,
               "cuda: out of device memory: asked for %s, %s free of %s (%s); try a smaller "
               "batch, gradient accumulation or bf16",
               fmt_bytes(asked, sizeof asked, bytes), fmt_bytes(fr, sizeof fr, free_b),
               fmt_bytes(tot, sizeof tot, total_b), cudaGetErrorString(e));
    return NULL;
}

static void cu_free(dl_backend *be, void *p)
{
    if (p)
        (void)cudaFree(p); /* waits for work using p; errors here are not actionable */
}

static void *cu_host_alloc(dl_backend *be, size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 64);
    if (e == cudaSuccess)
        return p;
    (void)cudaGetLastError();
    char asked[32];
    cuda_error(DL_ENOMEM, "cuda: cannot allocate %s of pinned host memory: %s",
               fmt_bytes(asked, sizeof asked, bytes), cudaGetErrorString(e));
    return NULL;
}

static void cu_host_free(dl_backend *be, void *p)
{
    if (p)
        (void)cudaFreeHost(p);
}

void *cuda_scratch(dl_backend *be, size_t bytes)
{
    cuda_ctx *c = CTX(be);
    if (c->scratch_size >= bytes)
        return c->scratch;
    size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    if (c->scratch)
        (void)cudaFree(c->scratch); /* synchronises: earlier users are done */
    c->scratch = NULL;
    c->scratch_size = 0;
    void *p = cu_alloc(be, want);
    if (!p)
        return NULL;
    c->scratch = p;
    c->scratch_size = want;
    return p;
}

/* Frees the scratch buffer and the convolution workspace (both taken
 * again on next use); cuBLAS keeps its workspace, which it was given. */
static void cu_trim(dl_backend *be)
{
    cuda_ctx *c = CTX(be);
    if (c->stream)
        (void)cudaStreamSynchronize(c->stream);
    cu_free(be, c->scratch);
    c->scratch = NULL;
    c->scratch_size = 0;
    be->ops->free(be, c->conv_ws); /* taken through the op table: see cuda_conv.cu */
    c->conv_ws = NULL;
    c->conv_ws_size = 0;
}

int cuda_check_flags(dl_backend *be)
{
    cuda_ctx *c = CTX(be);
    volatile int *f = c->host_flags;
    int kind = f[0];
    if (kind == FLAG_NONE)
        return DL_OK;
    int limit = f[1];
    float bad = *(volatile float *)c->host_badf;
    f[0] = FLAG_NONE;
    if (kind == FLAG_EMBED_INDEX)
        return cuda_error(DL_EINVAL,
                          "embedding index %g is not an integer in [0, %d) (found by the GPU "
                          "kernel, reported at the next synchronisation)",
                          (double)bad, limit);
    return cuda_error(DL_EINVAL,
                      "label %g is outside [0, %d) (found by the GPU kernel, reported at the "
                      "next synchronisation)",
                      (double)bad, limit);
}

/* --- copies ------------------------------------------------------------------- */

struct dl_event {
    cudaEvent_t ev;
};

/* Whether p is page-locked host memory (host_alloc, cudaHostRegister). */
static int is_pinned(const void *p)
{
    cudaPointerAttributes attr;
    memset(&attr, 0, sizeof attr);
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* not CUDA memory: pageable */
        return 0;
    }
    return attr.type == cudaMemoryTypeHost;
}

/* Returns when the host may reuse src, as on the CPU. A pageable source is
 * staged by the driver before cudaMemcpyAsync returns. A pinned one
 * (host_alloc, cudaHostRegister) is read by the copy engine only when the
 * stream reaches the copy, so that is waited for: the loaders hand their
 * pinned batch buffers back to their workers at the next next() (see
 * engine/data/data.h), with no sync in between, and the host may be whole
 * steps ahead of the GPU. */
static int cu_to_device(dl_backend *be, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return DL_OK;
    cudaStream_t s = CTX(be)->stream;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    if (is_pinned(src))
        CUDA_TRY(cudaStreamSynchronize(s));
    return DL_OK;
}

/* Synchronous: the host sees the data when this returns. */
static int cu_to_host(dl_backend *be, void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = CTX(be)->stream;
    if (bytes)
        CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    CUDA_TRY(cudaStreamSynchronize(s));
    return cuda_check_flags(be);
}

/* to_device on the copy stream: it waits for `after` only, the compute
 * stream waits for the copy (on the device: the host is not held), and
 * the host waits for the copy alone when src is pinned (the loader reuses
 * it at its next batch), not for the work queued on the compute stream. */

/* The copy stream and its event, made on first use. */
static int copy_engine(cuda_ctx *c)
{
    if (c->copy_stream)
        return DL_OK;
    CUDA_TRY(cudaEventCreateWithFlags(&c->copy_done, cudaEventDisableTiming));
    cudaError_t e = cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        (void)cudaEventDestroy(c->copy_done);
        c->copy_done = NULL;
        c->copy_stream = NULL;
        return cuda_fail_rt(e, __FILE__, __LINE__, "cudaStreamCreateWithFlags(copy stream)");
    }
    return DL_OK;
}

static int cu_to_device_after(dl_backend *be, void *dst, const void *src, size_t bytes,
                              dl_event *after)
{
    if (!bytes)
        return DL_OK;
    cuda_ctx *c = CTX(be);
    DL_TRY(copy_engine(c));
    if (after)
        CUDA_TRY(cudaStreamWaitEvent(c->copy_stream, after->ev, 0));
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->copy_stream));
    CUDA_TRY(cudaEventRecord(c->copy_done, c->copy_stream));
    CUDA_TRY(cudaStreamWaitEvent(c->stream, c->copy_done, 0));
    if (is_pinned(src))
        CUDA_TRY(cudaEventSynchronize(c->copy_done));
    return DL_OK;
}

static int cu_copy(dl_backend *be, void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src)
        return DL_OK;
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, CTX(be)->stream));
    return DL_OK;
}

static int cu_memset0(dl_backend *be, void *dst, size_t bytes)
{
    if (!bytes)
        return DL_OK;
    CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, CTX(be)->stream));
    return DL_OK;
}

static int cu_sync(dl_backend *be)
{
    CUDA_TRY(cudaStreamSynchronize(CTX(be)->stream));
    return cuda_check_flags(be);
}

/* --- events ----------------------------------------------------------------------- */

static dl_event *cu_event_create(dl_backend *be)
{
    dl_event *e = (dl_event *)calloc(1, sizeof *e);
    if (!e) {
        cuda_error(DL_ENOMEM, "cuda: out of host memory for an event");
        return NULL;
    }
    cudaError_t rc = cudaEventCreate(&e->ev);
    if (rc != cudaSuccess) {
        cuda_fail_rt(rc, __FILE__, __LINE__, "cudaEventCreate(&e->ev)");
        free(e);
        return NULL;
    }
    return e;
}

static void cu_event_destroy(dl_backend *be, dl_event *e)
{
    if (!e)
        return;
    (void)cudaEventDestroy(e->ev);
    free(e);
}

static int cu_event_record(dl_backend *be, dl_event *e)
{
    CUDA_TRY(cudaEventRecord(e->ev, CTX(be)->stream));
    return DL_OK;
}

static int cu_event_elapsed(dl_backend *be, dl_event *start, dl_event *stop, float *ms)
{
    CUDA_TRY(cudaEventSynchronize(stop->ev));
    CUDA_TRY(cudaEventElapsedTime(ms, start->ev, stop->ev));
    return DL_OK;
}

/* --- GEMM ------------------------------------------------------------------------- */

/* C = beta * C for k == 0 or alpha == 0 (cuBLAS is not asked about empty
 * products); beta == 0 writes zeros over whatever C held. */
__global__ void scale_matrix_kernel(float *c, int m, int n, int ldc, float beta)
{
    size_t total = (size_t)m * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / n, col = i % n;
        float *p = c + r * ldc + col;
        *p = beta == 0.0f ? 0.0f : *p * beta;
    }
}

/* Row-major C[m,n] = alpha op(A) op(B) + beta C is column-major
 * C^T[n,m] = alpha op(B)^T op(A)^T + beta C^T; a row-major matrix read
 * column-major is its transpose, so B goes first with the same op flags. */
static int cu_gemm(dl_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                   const void *a, int lda, const void *b, int ldb, dl_dtype ab, float beta,
                   float *c, int ldc)
{
    cuda_ctx *cx = CTX(be);
    if (m < 0 || n < 0 || k < 0)
        return cuda_error(DL_EINVAL, "gemm: negative size %dx%dx%d", m, n, k);
    if (m == 0 || n == 0)
        return DL_OK;
    if (ldc < n || lda < (trans_a ? m : k) || ldb < (trans_b ? k : n) || lda < 1 || ldb < 1)
        return cuda_error(DL_EINVAL,
                          "gemm: leading dimension too small (lda %d, ldb %d, ldc %d "
                          "for %dx%dx%d)",
                          lda, ldb, ldc, m, n, k);
    cudaDataType_t t;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    switch (ab) {
    case DL_F32:
        t = CUDA_R_32F;
        if (cx->tf32)
            compute = CUBLAS_COMPUTE_32F_FAST_TF32;
        break;
    case DL_BF16: t = CUDA_R_16BF; break;
    case DL_F16: t = CUDA_R_16F; break;
    default:
        return cuda_error(DL_EUNSUPPORTED, "gemm: operand dtype %d is not f32, bf16 or f16",
                          (int)ab);
    }
    /* alpha == 0: A and B are not read (NaN in them does not reach C), as on
     * the CPU */
    if (k == 0 || alpha == 0.0f) {
        scale_matrix_kernel<<<grid_for(be, (size_t)m * n), THREADS, 0, cx->stream>>>(c, m, n, ldc,
                                                                                     beta);
        LAUNCH_CHECK("scale_matrix");
        return DL_OK;
    }
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_TRY(cublasGemmEx(cx->blas, op_b, op_a, n, m, k, &alpha, b, t, ldb, a, t, lda, &beta, c,
                            CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT));
    return DL_OK;
}

/* --- the table ---------------------------------------------------------------------- */

static void cu_destroy(dl_backend *be);

static const dl_backend_ops cuda_ops = {
    DL_BACKEND_API_VERSION,
    "cuda",
    DL_DEVICE_CUDA,
    cu_alloc,
    cu_free,
    cu_host_alloc,
    cu_host_free,
    cu_to_device,
    cu_to_host,
    cu_copy,
    cu_memset0,
    cuda_fill,
    cu_sync,
    cu_gemm,
    cuda_cast,
    cuda_round_through,
    cuda_input_to_f32,
    cuda_bias_add,
    cuda_bias_grad,
    cuda_act_forward,
    cuda_act_backward,
    cuda_add,
    cuda_axpy,
    cuda_scale,
    cuda_dropout_forward,
    cuda_dropout_backward,
    cuda_conv_workspace,
    cuda_conv_forward,
    cuda_conv_backward_data,
    cuda_conv_backward_filter,
    cuda_pool_forward,
    cuda_pool_backward,
    cuda_batchnorm_forward,
    cuda_batchnorm_backward,
    cuda_layernorm_forward,
    cuda_layernorm_backward,
    cuda_embedding_forward,
    cuda_embedding_backward,
    cuda_softmax_xent,
    cuda_mse,
    cuda_bce_logits,
    cuda_sgd_update,
    cuda_adam_update,
    cuda_sumsq,
    cu_event_create,
    cu_event_destroy,
    cu_event_record,
    cu_event_elapsed,
    cu_destroy,
    NULL, /* relu_maxpool_forward: the layers run the two plain ops */
    NULL, /* relu_maxpool_backward */
    cu_trim,
    cuda_adaptive_avgpool_forward,
    cuda_adaptive_avgpool_backward,
    cuda_attention_forward,
    cuda_attention_backward,
    cuda_softmax_xent_tokens,
    cuda_conv_algo,
    cuda_grad_guard,
    cuda_sgd_update_guarded,
    cuda_adam_update_guarded,
    cu_to_device_after,
};

/* Releases everything a (possibly half-built) context holds. */
static void ctx_release(dl_backend *be)
{
    cuda_ctx *c = CTX(be);
    if (!c)
        return;
    if (c->stream)
        (void)cudaStreamSynchronize(c->stream);
    cuda_conv_cache_destroy(be);
    if (c->dnn)
        cudnnDestroy(c->dnn);
    if (c->blas)
        cublasDestroy(c->blas);
    cu_free(be, c->blas_ws);
    cu_free(be, c->scratch);
    cu_free(be, c->conv_ws);
    cu_host_free(be, c->host_result);
    cu_host_free(be, c->host_flags);
    if (c->copy_stream) {
        (void)cudaStreamSynchronize(c->copy_stream);
        (void)cudaStreamDestroy(c->copy_stream);
    }
    if (c->copy_done)
        (void)cudaEventDestroy(c->copy_done);
    if (c->stream)
        (void)cudaStreamDestroy(c->stream);
    free(c);
    be->ctx = NULL;
}

static void cu_destroy(dl_backend *be)
{
    ctx_release(be);
    free(be);
}

/* Finds the device and says plainly why when there is none. */
static int probe_device(cudaDeviceProp *prop)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaSuccess) {
        int driver = 0, runtime = 0;
        (void)cudaDriverGetVersion(&driver);
        (void)cudaRuntimeGetVersion(&runtime);
        (void)cudaGetLastError();
        if (e == cudaErrorInsufficientDriver) {
            if (driver == 0)
                return cuda_error(DL_ENODEV, "no CUDA driver (libcuda.so.1 not found)");
            return cuda_error(DL_ENODEV,
                              "CUDA driver too old: it supports CUDA %d.%d, the module needs "
                              "%d.%d",
                              driver / 1000, driver % 1000 / 10, runtime / 1000,
                              runtime % 1000 / 10);
        }
        if (e == cudaErrorNoDevice || count == 0)
            return cuda_error(DL_ENODEV, "no CUDA device (driver %d.%d found, no GPU visible%s)",
                              driver / 1000, driver % 1000 / 10,
                              getenv("CUDA_VISIBLE_DEVICES") ? "; check CUDA_VISIBLE_DEVICES" : "");
    } else if (e == cudaErrorStubLibrary) {
        (void)cudaGetLastError();
        return cuda_error(DL_ENODEV, "no CUDA driver (libcuda.so.1 found is the toolkit's stub, "
                                     "not a driver)");
    } else {
        (void)cudaGetLastError();
        return cuda_error(DL_ENODEV, "CUDA initialisation failed: %s (%s)", cudaGetErrorString(e),
                          cudaGetErrorName(e));
    }
    CUDA_TRY(cudaGetDeviceProperties(prop, 0));
    if (prop->major < 9)
        return cuda_error(DL_ENODEV,
                          "GPU %s is sm_%d%d; this module is built for sm_90 (Hopper) and newer",
                          prop->name, prop->major, prop->minor);
    return DL_OK;
}

/* Creates the stream, library handles and pinned cells of a context. */
static int ctx_init(dl_backend *be, const cudaDeviceProp *prop)
{
    cuda_ctx *c = CTX(be);
    c->device = 0;
    c->sm_count = prop->multiProcessorCount > 0 ? prop->multiProcessorCount : 1;
    const char *tf32 = getenv("DLBENCH_CUDA_TF32");
    c->tf32 = !(tf32 && tf32[0] == '0');
    CUDA_TRY(cudaSetDevice(0));
    CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUBLAS_TRY(cublasCreate(&c->blas));
    CUBLAS_TRY(cublasSetStream(c->blas, c->stream));
    /* a workspace of our own keeps cuBLAS from allocating behind our back;
     * 32 MiB is what NVIDIA recommends for Hopper */
    const size_t blas_ws = (size_t)32 << 20;
    CUDA_TRY(cudaMalloc(&c->blas_ws, blas_ws));
    CUBLAS_TRY(cublasSetWorkspace(c->blas, c->blas_ws, blas_ws));
    CUBLAS_TRY(
        cublasSetMathMode(c->blas, c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    /* cuDNN is created by the first convolution (cuda_dnn): an MLP never
     * loads its kernels */
    CUDA_TRY(cudaHostAlloc((void **)&c->host_result, sizeof(double), cudaHostAllocDefault));
    /* kernels raise flags with plain stores into mapped pinned memory, read
     * by the host after a stream synchronisation */
    CUDA_TRY(cudaHostAlloc((void **)&c->host_flags, 4 * sizeof(int), cudaHostAllocMapped));
    memset(c->host_flags, 0, 4 * sizeof(int));
    c->host_badf = (float *)(c->host_flags + 2);
    CUDA_TRY(cudaHostGetDevicePointer((void **)&c->dev_flags, c->host_flags, 0));
    c->dev_badf = (float *)(c->dev_flags + 2);
    return DL_OK;
}

/* The module's entry point (DL_BACKEND_MODULE_SYMBOL): checks the API
 * version and the device, then creates the backend. The caller owns *out
 * and releases it with ops->destroy. On error *out is untouched and the
 * reason is recorded (dl_error_message() once the loader set the sink). */
extern "C" __attribute__((visibility("default"))) int dl_cuda_backend_open(int api_version,
                                                                           dl_backend **out)
{
    if (api_version != DL_BACKEND_API_VERSION)
        return cuda_error(DL_ENODEV, "module API version %d, dlbench expects %d",
                          DL_BACKEND_API_VERSION, api_version);
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    DL_TRY(probe_device(&prop));

    dl_backend *be = (dl_backend *)calloc(1, sizeof *be);
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return cuda_error(DL_ENOMEM, "cuda: out of host memory for the backend");
    }
    be->ops = &cuda_ops;
    be->ctx = c;
    be->threads = 0;
    /* tensor cores: fp16 from sm_70, bf16 from sm_80 */
    be->lowp =
        DL_LOWP_KNOWN | (prop.major >= 7 ? DL_LOWP_F16 : 0) | (prop.major >= 8 ? DL_LOWP_BF16 : 0);
    int rc = ctx_init(be, &prop);
    if (rc < 0) {
        ctx_release(be);
        free(be);
        return rc;
    }
    double gib = (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024);
    snprintf(be->description, sizeof be->description, "cuda: %s, %.0f GiB, sm_%d%d%s", prop.name,
             gib, prop.major, prop.minor, c->tf32 ? "" : ", no TF32");
    *out = be;
    return DL_OK;
}
