/* cuda_conv.cu - convolution through cuDNN with the algorithms chosen once per shape and cached
 *
 * Each (shape, compute dtype) gets an entry holding its descriptors and the
 * forward, backward-data and backward-filter algorithms, chosen by
 * cudnnFind* the first time the shape is seen (conv_workspace or the first
 * op), falling back to cuDNN's heuristics (Get_v7) when Find fails.
 * DLBENCH_CUDNN_FIND=0 uses the heuristics only (quicker start). Groups
 * (cudnnSetConvolutionGroupCount, filter [k, c/groups, r, s]) and dilation
 * are part of the descriptors and of the cache key; so is the batch size,
 * so a shorter last batch is a new entry with its own choice and its own
 * workspace figure, which conv_workspace reports to the caller.
 *
 * The cuDNN handle is created with the first entry (cuda_dnn): a training
 * without convolutions never initialises cuDNN.
 *
 * Workspace. The caller hands each op a workspace and its size (sized by
 * conv_workspace for this backend, this batch and this compute type); an
 * op handed less than its entry needs fails naming both sizes instead of
 * letting cuDNN write past the end. Handed none (NULL), an op uses the
 * backend's own buffer, grown on demand and freed by trim.
 *
 * Precision. compute f32: f32 data; TF32 tensor cores allowed unless
 * DLBENCH_CUDA_TF32=0 (then FMA-only kernels). compute bf16/f16: the
 * operands (x, w, dy) are rounded through bf16/f16 into f32 staging
 * buffers in the workspace and the f32 convolution runs on them; a
 * bf16/f16 value is exact in TF32, so with f32 accumulation a matrix-
 * product algorithm equals a bf16/f16 product accumulated in f32, as on
 * the CPU. That holds for the GEMM family only (FFT and Winograd transform
 * the operands first), so low-precision entries choose among IMPLICIT_GEMM,
 * IMPLICIT_PRECOMP_GEMM and GEMM forward, ALGO_0/1 backward-data and
 * ALGO_0/1/3 backward-filter. DLBENCH_DETERMINISTIC=1 restricts every
 * entry further to the deterministic ones (no atomics: ALGO_1 backward).
 * The choice is reported by conv_algo (the profile prints it).
 * It runs at TF32, not bf16, tensor-core rate: native bf16 tensors (half
 * the staging, twice the rate) are the next step if convolutions dominate
 * a profile.
 */
#include "engine/cuda/cuda_internal.h"

typedef struct conv_entry {
    dl_conv_desc d;
    dl_dtype compute;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    /* one convolution descriptor per direction: each takes the math type
     * of the algorithm chosen for it */
    cudnnConvolutionDescriptor_t cf, cbd, cbf;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t ws_fwd, ws_bwd_data, ws_bwd_filter;
    cudnnMathType_t math_fwd, math_bwd_data, math_bwd_filter;
    /* f32 staging for rounded operands: offsets into the workspace */
    size_t off_x, off_w, off_dy, total;
    struct conv_entry *next;
} conv_entry;

struct conv_cache {
    conv_entry *head;
};

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

static void entry_destroy(conv_entry *e)
{
    if (!e)
        return;
    if (e->xd)
        cudnnDestroyTensorDescriptor(e->xd);
    if (e->yd)
        cudnnDestroyTensorDescriptor(e->yd);
    if (e->wd)
        cudnnDestroyFilterDescriptor(e->wd);
    if (e->cf)
        cudnnDestroyConvolutionDescriptor(e->cf);
    if (e->cbd)
        cudnnDestroyConvolutionDescriptor(e->cbd);
    if (e->cbf)
        cudnnDestroyConvolutionDescriptor(e->cbf);
    free(e);
}

void cuda_conv_cache_destroy(dl_backend *be)
{
    cuda_ctx *c = CTX(be);
    if (!c->conv)
        return;
    for (conv_entry *e = c->conv->head, *next; e; e = next) {
        next = e->next;
        entry_destroy(e);
    }
    free(c->conv);
    c->conv = NULL;
}

/* Floats of the filter w [k, c/groups, r, s]. */
static size_t weight_count(const dl_conv_desc *d)
{
    return (size_t)d->k * (d->c / dl_conv_groups(d)) * d->r * d->s;
}

static int same_desc(const dl_conv_desc *a, const dl_conv_desc *b)
{
    return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
           a->r == b->r && a->s == b->s && a->stride == b->stride && a->pad == b->pad &&
           a->p == b->p && a->q == b->q && dl_conv_groups(a) == dl_conv_groups(b) &&
           dl_conv_dilation(a) == dl_conv_dilation(b);
}

/* The GEMM family of each direction: matrix products on the operands as
 * given (FFT and Winograd transform them first). */
static int gemm_family(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}
static int gemm_family(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}
static int gemm_family(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

/* What an entry may choose: fma_only (no tensor-core math), gemm_only
 * (low precision or deterministic), deterministic (no atomics). */
typedef struct algo_rule {
    int fma_only, gemm_only, deterministic;
} algo_rule;

/* The first result that ran, fits the workspace cap, keeps the precision
 * asked for (never a down-conversion of f32 data; no tensor-core math when
 * fma_only) and follows the rule; -1 when none does. */
template <typename P> static int pick(const P *perf, int count, const algo_rule *r, size_t cap)
{
    for (int i = 0; i < count; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > cap)
            continue;
        if (perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
            continue;
        if (r->fma_only && perf[i].mathType == CUDNN_TENSOR_OP_MATH)
            continue;
        if (r->gemm_only && !gemm_family(perf[i].algo))
            continue;
        if (r->deterministic && perf[i].determinism != CUDNN_DETERMINISTIC)
            continue;
        return i;
    }
    return -1;
}

/* The library handle, created on first use and bound to the stream. */
static int cuda_dnn(dl_backend *be, cudnnHandle_t *out)
{
    cuda_ctx *c = CTX(be);
    if (!c->dnn) {
        cudnnHandle_t h = NULL;
        CUDNN_TRY(cudnnCreate(&h));
        cudnnStatus_t st = cudnnSetStream(h, c->stream);
        if (st != CUDNN_STATUS_SUCCESS) {
            cudnnDestroy(h);
            return cuda_fail_dnn(st, __FILE__, __LINE__, "cudnnSetStream(h, c->stream)");
        }
        c->dnn = h;
    }
    *out = c->dnn;
    return DL_OK;
}

static int deterministic(void)
{
    const char *s = getenv("DLBENCH_DETERMINISTIC");
    return s && s[0] == '1';
}

static int use_find(void)
{
    const char *s = getenv("DLBENCH_CUDNN_FIND");
    return !(s && s[0] == '0');
}

/* The workspace cap of a choice: an eighth of the free memory, within
 * [64 MiB, 1 GiB]. */
static size_t choice_cap(void)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        (void)cudaGetLastError();
    size_t cap = free_b / 8;
    if (cap < ((size_t)64 << 20))
        cap = (size_t)64 << 20;
    if (cap > ((size_t)1 << 30))
        cap = (size_t)1 << 30;
    return cap;
}

/* What was ruled out, for the error when nothing is left. */
static const char *rule_text(const algo_rule *r)
{
    if (r->deterministic)
        return " among the deterministic GEMM-family algorithms (DLBENCH_DETERMINISTIC=1)";
    if (r->gemm_only)
        return " among the GEMM-family algorithms (low precision)";
    return "";
}

static int choose_fwd(cudnnHandle_t h, conv_entry *e, const algo_rule *r, size_t cap, int find)
{
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0, i = -1;
    if (find && cudnnFindConvolutionForwardAlgorithm(h, e->xd, e->wd, e->cf, e->yd,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                     perf) == CUDNN_STATUS_SUCCESS)
        i = pick(perf, got, r, cap);
    (void)cudaGetLastError();
    if (i < 0) {
        CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(
            h, e->xd, e->wd, e->cf, e->yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        i = pick(perf, got, r, cap);
    }
    if (i < 0)
        return cuda_error(DL_EUNSUPPORTED, "cudnn: no forward algorithm for this convolution%s",
                          rule_text(r));
    e->fwd = perf[i].algo;
    e->math_fwd = r->fma_only ? CUDNN_FMA_MATH : perf[i].mathType;
    CUDNN_TRY(cudnnSetConvolutionMathType(e->cf, e->math_fwd));
    CUDNN_TRY(
        cudnnGetConvolutionForwardWorkspaceSize(h, e->xd, e->wd, e->cf, e->yd, e->fwd, &e->ws_fwd));
    return DL_OK;
}

static int choose_bwd_data(cudnnHandle_t h, conv_entry *e, const algo_rule *r, size_t cap, int find)
{
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0, i = -1;
    if (find && cudnnFindConvolutionBackwardDataAlgorithm(h, e->wd, e->yd, e->cbd, e->xd,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                          &got, perf) == CUDNN_STATUS_SUCCESS)
        i = pick(perf, got, r, cap);
    (void)cudaGetLastError();
    if (i < 0) {
        CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            h, e->wd, e->yd, e->cbd, e->xd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
        i = pick(perf, got, r, cap);
    }
    if (i < 0)
        return cuda_error(DL_EUNSUPPORTED,
                          "cudnn: no backward-data algorithm for this convolution%s", rule_text(r));
    e->bwd_data = perf[i].algo;
    e->math_bwd_data = r->fma_only ? CUDNN_FMA_MATH : perf[i].mathType;
    CUDNN_TRY(cudnnSetConvolutionMathType(e->cbd, e->math_bwd_data));
    CUDNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(h, e->wd, e->yd, e->cbd, e->xd,
                                                           e->bwd_data, &e->ws_bwd_data));
    return DL_OK;
}

static int choose_bwd_filter(cudnnHandle_t h, conv_entry *e, const algo_rule *r, size_t cap,
                             int find)
{
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int got = 0, i = -1;
    if (find && cudnnFindConvolutionBackwardFilterAlgorithm(h, e->xd, e->yd, e->cbf, e->wd,
                                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                            &got, perf) == CUDNN_STATUS_SUCCESS)
        i = pick(perf, got, r, cap);
    (void)cudaGetLastError();
    if (i < 0) {
        CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            h, e->xd, e->yd, e->cbf, e->wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
        i = pick(perf, got, r, cap);
    }
    if (i < 0)
        return cuda_error(DL_EUNSUPPORTED,
                          "cudnn: no backward-filter algorithm for this convolution%s",
                          rule_text(r));
    e->bwd_filter = perf[i].algo;
    e->math_bwd_filter = r->fma_only ? CUDNN_FMA_MATH : perf[i].mathType;
    CUDNN_TRY(cudnnSetConvolutionMathType(e->cbf, e->math_bwd_filter));
    CUDNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, e->xd, e->yd, e->cbf, e->wd,
                                                             e->bwd_filter, &e->ws_bwd_filter));
    return DL_OK;
}

/* Chooses the three algorithms of e and their workspace sizes. */
static int choose_algos(dl_backend *be, conv_entry *e, int fma_only)
{
    cudnnHandle_t h;
    DL_TRY(cuda_dnn(be, &h));
    algo_rule r;
    r.fma_only = fma_only;
    r.deterministic = deterministic();
    r.gemm_only = e->compute != DL_F32 || r.deterministic;
    size_t cap = choice_cap();
    int find = use_find();
    DL_TRY(choose_fwd(h, e, &r, cap, find));
    DL_TRY(choose_bwd_data(h, e, &r, cap, find));
    return choose_bwd_filter(h, e, &r, cap, find);
}

/* Builds descriptors for d and checks the output size. */
static int entry_init(dl_backend *be, conv_entry *e, int fma_only)
{
    const dl_conv_desc *d = &e->d;
    CUDNN_TRY(cudnnCreateTensorDescriptor(&e->xd));
    CUDNN_TRY(cudnnCreateTensorDescriptor(&e->yd));
    CUDNN_TRY(cudnnCreateFilterDescriptor(&e->wd));
    CUDNN_TRY(cudnnCreateConvolutionDescriptor(&e->cf));
    CUDNN_TRY(cudnnCreateConvolutionDescriptor(&e->cbd));
    CUDNN_TRY(cudnnCreateConvolutionDescriptor(&e->cbf));
    CUDNN_TRY(cudnnSetTensor4dDescriptor(e->xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, d->c,
                                         d->h, d->w));
    /* grouped: the filter holds c/groups input channels per output channel */
    int groups = dl_conv_groups(d), dil = dl_conv_dilation(d);
    CUDNN_TRY(cudnnSetFilter4dDescriptor(e->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, d->k,
                                         d->c / groups, d->r, d->s));
    cudnnConvolutionDescriptor_t cds[3] = {e->cf, e->cbd, e->cbf};
    for (int i = 0; i < 3; i++) {
        CUDNN_TRY(cudnnSetConvolution2dDescriptor(cds[i], d->pad, d->pad, d->stride, d->stride, dil,
                                                  dil, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        CUDNN_TRY(cudnnSetConvolutionGroupCount(cds[i], groups));
        CUDNN_TRY(
            cudnnSetConvolutionMathType(cds[i], fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
    }
    int on, ok, op, oq;
    CUDNN_TRY(cudnnGetConvolution2dForwardOutputDim(e->cf, e->xd, e->wd, &on, &ok, &op, &oq));
    if (on != d->n || ok != d->k || op != d->p || oq != d->q)
        return cuda_error(DL_ESHAPE,
                          "conv: %dx%d kernel, stride %d, pad %d, dilation %d on [%d, %d, %d, "
                          "%d] gives [%d, %d, %d, %d], not [%d, %d, %d, %d]",
                          d->r, d->s, d->stride, d->pad, dil, d->n, d->c, d->h, d->w, on, ok, op,
                          oq, d->n, d->k, d->p, d->q);
    CUDNN_TRY(cudnnSetTensor4dDescriptor(e->yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, d->n, d->k,
                                         d->p, d->q));
    DL_TRY(choose_algos(be, e, fma_only));
    size_t ws = e->ws_fwd;
    if (e->ws_bwd_data > ws)
        ws = e->ws_bwd_data;
    if (e->ws_bwd_filter > ws)
        ws = e->ws_bwd_filter;
    ws = align256(ws);
    if (e->compute == DL_F32) {
        e->off_x = e->off_w = e->off_dy = 0;
        e->total = ws;
    } else {
        e->off_x = ws;
        e->off_w = e->off_x + align256((size_t)d->n * d->c * d->h * d->w * sizeof(float));
        e->off_dy = e->off_w + align256(weight_count(d) * sizeof(float));
        e->total = e->off_dy + align256((size_t)d->n * d->k * d->p * d->q * sizeof(float));
    }
    return DL_OK;
}

/* The cached entry for (d, compute), created (and its algorithms found) on
 * first use. */
static int lookup(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, conv_entry **out)
{
    cuda_ctx *c = CTX(be);
    if (compute != DL_F32 && compute != DL_BF16 && compute != DL_F16)
        return cuda_error(DL_EUNSUPPORTED, "conv: compute dtype %d is not f32, bf16 or f16",
                          (int)compute);
    if (d->n < 1 || d->c < 1 || d->h < 1 || d->w < 1 || d->k < 1 || d->r < 1 || d->s < 1 ||
        d->stride < 1 || d->pad < 0)
        return cuda_error(DL_ESHAPE,
                          "conv: bad shape (n %d, c %d, %dx%d, k %d, %dx%d, stride "
                          "%d, pad %d)",
                          d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->stride, d->pad);
    if (d->groups < 0 || d->dilation < 0 || d->c % dl_conv_groups(d) || d->k % dl_conv_groups(d))
        return cuda_error(DL_EINVAL,
                          "conv: %d input and %d output channels with groups %d, dilation %d", d->c,
                          d->k, d->groups, d->dilation);
    if (!c->conv) {
        c->conv = (struct conv_cache *)calloc(1, sizeof *c->conv);
        if (!c->conv)
            return cuda_error(DL_ENOMEM, "conv: out of host memory");
    }
    for (conv_entry *e = c->conv->head; e; e = e->next)
        if (e->compute == compute && same_desc(&e->d, d)) {
            *out = e;
            return DL_OK;
        }
    conv_entry *e = (conv_entry *)calloc(1, sizeof *e);
    if (!e)
        return cuda_error(DL_ENOMEM, "conv: out of host memory");
    e->d = *d;
    e->compute = compute;
    int rc = entry_init(be, e, compute == DL_F32 && !c->tf32);
    if (rc < 0) {
        entry_destroy(e);
        return rc;
    }
    e->next = c->conv->head;
    c->conv->head = e;
    *out = e;
    return DL_OK;
}

size_t cuda_conv_workspace(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    conv_entry *e;
    if (lookup(be, d, compute, &e) < 0)
        return 0; /* the op itself reports the error */
    return e->total;
}

/* The workspace of an op on e: the caller's when it holds e->total bytes
 * (an error naming both sizes when it holds fewer), or, handed none, the
 * backend's own, grown to e->total. */
static int workspace(dl_backend *be, const conv_entry *e, void *ws, size_t ws_bytes, const char *op,
                     char **out)
{
    cuda_ctx *c = CTX(be);
    *out = (char *)ws;
    if (e->total == 0)
        return DL_OK;
    if (ws) {
        if (ws_bytes >= e->total)
            return DL_OK;
        const dl_conv_desc *d = &e->d;
        return cuda_error(DL_EINVAL,
                          "cuda %s: workspace of %zu bytes given, %zu needed for x [%d, %d, %d, "
                          "%d], %d filters %dx%d (size it with conv_workspace for this batch)",
                          op, ws_bytes, e->total, d->n, d->c, d->h, d->w, d->k, d->r, d->s);
    }
    if (c->conv_ws_size < e->total) {
        if (c->conv_ws)
            be->ops->free(be, c->conv_ws); /* as taken: through the op table */
        c->conv_ws = NULL;
        c->conv_ws_size = 0;
        c->conv_ws = be->ops->alloc(be, e->total); /* its message: size asked, memory free */
        if (!c->conv_ws)
            return DL_ENOMEM;
        c->conv_ws_size = e->total;
    }
    *out = (char *)c->conv_ws;
    return DL_OK;
}

int cuda_conv_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                      const float *w, const float *b, void *ws, size_t ws_bytes, dl_dtype compute)
{
    conv_entry *e;
    char *buf;
    DL_TRY(lookup(be, d, compute, &e));
    DL_TRY(workspace(be, e, ws, ws_bytes, "conv_forward", &buf));
    if (compute != DL_F32) {
        float *xr = (float *)(buf + e->off_x), *wr = (float *)(buf + e->off_w);
        DL_TRY(cuda_round_copy(be, xr, x, compute, (size_t)d->n * d->c * d->h * d->w));
        DL_TRY(cuda_round_copy(be, wr, w, compute, weight_count(d)));
        x = xr;
        w = wr;
    }
    const float one = 1.0f, zero = 0.0f;
    CUDNN_TRY_WS(cudnnConvolutionForward(CTX(be)->dnn, &one, e->xd, x, e->wd, w, e->cf, e->fwd, buf,
                                         e->ws_fwd, &zero, e->yd, y),
                 e->ws_fwd);
    if (b)
        DL_TRY(cuda_bias_add(be, y, b, d->n, d->k, d->p * d->q));
    return DL_OK;
}

int cuda_conv_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                            const float *w, void *ws, size_t ws_bytes, dl_dtype compute)
{
    conv_entry *e;
    char *buf;
    DL_TRY(lookup(be, d, compute, &e));
    DL_TRY(workspace(be, e, ws, ws_bytes, "conv_backward_data", &buf));
    if (compute != DL_F32) {
        float *dyr = (float *)(buf + e->off_dy), *wr = (float *)(buf + e->off_w);
        DL_TRY(cuda_round_copy(be, dyr, dy, compute, (size_t)d->n * d->k * d->p * d->q));
        DL_TRY(cuda_round_copy(be, wr, w, compute, weight_count(d)));
        dy = dyr;
        w = wr;
    }
    const float one = 1.0f;
    CUDNN_TRY_WS(cudnnConvolutionBackwardData(CTX(be)->dnn, &one, e->wd, w, e->yd, dy, e->cbd,
                                              e->bwd_data, buf, e->ws_bwd_data, &one, e->xd, dx),
                 e->ws_bwd_data);
    return DL_OK;
}

int cuda_conv_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                              const float *dy, const float *x, void *ws, size_t ws_bytes,
                              dl_dtype compute)
{
    conv_entry *e;
    char *buf;
    DL_TRY(lookup(be, d, compute, &e));
    DL_TRY(workspace(be, e, ws, ws_bytes, "conv_backward_filter", &buf));
    /* the bias gradient sums the f32 dy, rounded or not */
    if (db)
        DL_TRY(cuda_bias_grad(be, db, dy, d->n, d->k, d->p * d->q));
    if (compute != DL_F32) {
        float *dyr = (float *)(buf + e->off_dy), *xr = (float *)(buf + e->off_x);
        DL_TRY(cuda_round_copy(be, dyr, dy, compute, (size_t)d->n * d->k * d->p * d->q));
        DL_TRY(cuda_round_copy(be, xr, x, compute, (size_t)d->n * d->c * d->h * d->w));
        dy = dyr;
        x = xr;
    }
    const float one = 1.0f;
    CUDNN_TRY_WS(cudnnConvolutionBackwardFilter(CTX(be)->dnn, &one, e->xd, x, e->yd, dy, e->cbf,
                                                e->bwd_filter, buf, e->ws_bwd_filter, &one, e->wd,
                                                dw),
                 e->ws_bwd_filter);
    return DL_OK;
}

/* --- the choice, in words ------------------------------------------------------ */

static const char *fwd_name(cudnnConvolutionFwdAlgo_t a)
{
    static const char *const n[] = {
        "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
        "WINOGRAD",      "WINOGRAD_NONFUSED"};
    return (unsigned)a < sizeof n / sizeof n[0] ? n[a] : "?";
}

static const char *bwd_data_name(cudnnConvolutionBwdDataAlgo_t a)
{
    static const char *const n[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                    "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    return (unsigned)a < sizeof n / sizeof n[0] ? n[a] : "?";
}

static const char *bwd_filter_name(cudnnConvolutionBwdFilterAlgo_t a)
{
    static const char *const n[] = {
        "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
    return (unsigned)a < sizeof n / sizeof n[0] ? n[a] : "?";
}

static const char *math_name(cudnnMathType_t m)
{
    return m == CUDNN_TENSOR_OP_MATH ? "tensor op" : m == CUDNN_FMA_MATH ? "fma" : "default";
}

int cuda_conv_algo(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, char *buf, size_t size)
{
    conv_entry *e;
    DL_TRY(lookup(be, d, compute, &e));
    snprintf(buf, size, "cudnn fwd %s (%s), data %s (%s), filter %s (%s), workspace %zu bytes",
             fwd_name(e->fwd), math_name(e->math_fwd), bwd_data_name(e->bwd_data),
             math_name(e->math_bwd_data), bwd_filter_name(e->bwd_filter),
             math_name(e->math_bwd_filter), e->total);
    return DL_OK;
}
