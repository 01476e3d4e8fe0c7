/* cuda_conv.cu - convolution through cuDNN with the algorithms chosen once per shape and cached
 *
 * Each (shape, compute dtype) gets an entry holding its descriptors and the
 * forward, backward-data and backward-filter algorithms, chosen by
 * cudnnFind* the first time the shape is seen (conv_workspace or the first
 * op), falling back to cuDNN's heuristics (Get_v7) when Find fails.
 * DLBENCH_CUDNN_FIND=0 uses the heuristics only (quicker start). Groups
 * (cudnnSetConvolutionGroupCount, filter [k, c/groups, r, s]) and dilation
 * are part of the descriptors and of the cache key.
 *
 * Precision. compute f32: f32 data; TF32 tensor cores allowed unless
 * DLBENCH_CUDA_TF32=0 (then FMA-only kernels). compute bf16/f16: the
 * operands (x, w, dy) are rounded through bf16/f16 into f32 staging
 * buffers in the workspace and the f32 convolution runs on them; a
 * bf16/f16 value is exact in TF32, so with f32 accumulation this equals a
 * bf16/f16 product accumulated in f32, as on the CPU. It runs at TF32, not
 * bf16, tensor-core rate: native bf16 tensors (half the staging, twice the
 * rate) are the next step if convolutions dominate a profile.
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

/* The first result that ran, fits the workspace cap and keeps the
 * precision asked for (never a down-conversion of f32 data; no tensor-core
 * math when fma_only); -1 when none does. */
template <typename P> static int pick(const P *perf, int count, int fma_only, size_t cap)
{
    for (int i = 0; i < count; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > cap)
            continue;
        if (perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
            continue;
        if (fma_only && perf[i].mathType == CUDNN_TENSOR_OP_MATH)
            continue;
        return i;
    }
    return -1;
}

static int use_find(void)
{
    const char *s = getenv("DLBENCH_CUDNN_FIND");
    return !(s && s[0] == '0');
}

/* Chooses the three algorithms of e and their workspace sizes. */
static int choose_algos(dl_backend *be, conv_entry *e, int fma_only)
{
    cudnnHandle_t h = CTX(be)->dnn;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        (void)cudaGetLastError();
    size_t cap = free_b / 8;
    if (cap < ((size_t)64 << 20))
        cap = (size_t)64 << 20;
    if (cap > ((size_t)1 << 30))
        cap = (size_t)1 << 30;
    int find = use_find();
    cudnnMathType_t keep = fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;

    {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int got = 0, i = -1;
        if (find && cudnnFindConvolutionForwardAlgorithm(h, e->xd, e->wd, e->cf, e->yd,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                         perf) == CUDNN_STATUS_SUCCESS)
            i = pick(perf, got, fma_only, cap);
        (void)cudaGetLastError();
        if (i < 0) {
            CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(
                h, e->xd, e->wd, e->cf, e->yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
            i = pick(perf, got, fma_only, cap);
        }
        if (i < 0)
            return cuda_error(DL_EUNSUPPORTED, "cudnn: no forward algorithm for this convolution");
        e->fwd = perf[i].algo;
        CUDNN_TRY(cudnnSetConvolutionMathType(e->cf, fma_only ? keep : perf[i].mathType));
        CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(h, e->xd, e->wd, e->cf, e->yd, e->fwd,
                                                          &e->ws_fwd));
    }
    {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int got = 0, i = -1;
        if (find && cudnnFindConvolutionBackwardDataAlgorithm(h, e->wd, e->yd, e->cbd, e->xd,
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                              &got, perf) == CUDNN_STATUS_SUCCESS)
            i = pick(perf, got, fma_only, cap);
        (void)cudaGetLastError();
        if (i < 0) {
            CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                h, e->wd, e->yd, e->cbd, e->xd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
            i = pick(perf, got, fma_only, cap);
        }
        if (i < 0)
            return cuda_error(DL_EUNSUPPORTED,
                              "cudnn: no backward-data algorithm for this convolution");
        e->bwd_data = perf[i].algo;
        CUDNN_TRY(cudnnSetConvolutionMathType(e->cbd, fma_only ? keep : perf[i].mathType));
        CUDNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(h, e->wd, e->yd, e->cbd, e->xd,
                                                               e->bwd_data, &e->ws_bwd_data));
    }
    {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int got = 0, i = -1;
        if (find && cudnnFindConvolutionBackwardFilterAlgorithm(
                        h, e->xd, e->yd, e->cbf, e->wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                        &got, perf) == CUDNN_STATUS_SUCCESS)
            i = pick(perf, got, fma_only, cap);
        (void)cudaGetLastError();
        if (i < 0) {
            CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                h, e->xd, e->yd, e->cbf, e->wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got,
                perf));
            i = pick(perf, got, fma_only, cap);
        }
        if (i < 0)
            return cuda_error(DL_EUNSUPPORTED,
                              "cudnn: no backward-filter algorithm for this convolution");
        e->bwd_filter = perf[i].algo;
        CUDNN_TRY(cudnnSetConvolutionMathType(e->cbf, fma_only ? keep : perf[i].mathType));
        CUDNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, e->xd, e->yd, e->cbf, e->wd,
                                                                 e->bwd_filter, &e->ws_bwd_filter));
    }
    return DL_OK;
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

/* The workspace to use: the caller's (sized by conv_workspace), or ours. */
static char *workspace(dl_backend *be, const conv_entry *e, void *ws)
{
    cuda_ctx *c = CTX(be);
    if (ws || e->total == 0)
        return (char *)ws;
    if (c->conv_ws_size < e->total) {
        if (c->conv_ws)
            be->ops->free(be, c->conv_ws); /* as taken: through the op table */
        c->conv_ws = NULL;
        c->conv_ws_size = 0;
        c->conv_ws = be->ops->alloc(be, e->total);
        if (!c->conv_ws)
            return NULL;
        c->conv_ws_size = e->total;
    }
    return (char *)c->conv_ws;
}

int cuda_conv_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                      const float *w, const float *b, void *ws, dl_dtype compute)
{
    conv_entry *e;
    DL_TRY(lookup(be, d, compute, &e));
    char *buf = workspace(be, e, ws);
    if (!buf && e->total)
        return DL_ENOMEM;
    if (compute != DL_F32) {
        float *xr = (float *)(buf + e->off_x), *wr = (float *)(buf + e->off_w);
        DL_TRY(cuda_round_copy(be, xr, x, compute, (size_t)d->n * d->c * d->h * d->w));
        DL_TRY(cuda_round_copy(be, wr, w, compute, weight_count(d)));
        x = xr;
        w = wr;
    }
    const float one = 1.0f, zero = 0.0f;
    CUDNN_TRY(cudnnConvolutionForward(CTX(be)->dnn, &one, e->xd, x, e->wd, w, e->cf, e->fwd, buf,
                                      e->ws_fwd, &zero, e->yd, y));
    if (b)
        DL_TRY(cuda_bias_add(be, y, b, d->n, d->k, d->p * d->q));
    return DL_OK;
}

int cuda_conv_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                            const float *w, void *ws, dl_dtype compute)
{
    conv_entry *e;
    DL_TRY(lookup(be, d, compute, &e));
    char *buf = workspace(be, e, ws);
    if (!buf && e->total)
        return DL_ENOMEM;
    if (compute != DL_F32) {
        float *dyr = (float *)(buf + e->off_dy), *wr = (float *)(buf + e->off_w);
        DL_TRY(cuda_round_copy(be, dyr, dy, compute, (size_t)d->n * d->k * d->p * d->q));
        DL_TRY(cuda_round_copy(be, wr, w, compute, weight_count(d)));
        dy = dyr;
        w = wr;
    }
    const float one = 1.0f;
    CUDNN_TRY(cudnnConvolutionBackwardData(CTX(be)->dnn, &one, e->wd, w, e->yd, dy, e->cbd,
                                           e->bwd_data, buf, e->ws_bwd_data, &one, e->xd, dx));
    return DL_OK;
}

int cuda_conv_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                              const float *dy, const float *x, void *ws, dl_dtype compute)
{
    conv_entry *e;
    DL_TRY(lookup(be, d, compute, &e));
    char *buf = workspace(be, e, ws);
    if (!buf && e->total)
        return DL_ENOMEM;
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
    CUDNN_TRY(cudnnConvolutionBackwardFilter(CTX(be)->dnn, &one, e->xd, x, e->yd, dy, e->cbf,
                                             e->bwd_filter, buf, e->ws_bwd_filter, &one, e->wd,
                                             dw));
    return DL_OK;
}
