/* cpu_backend.c - the CPU backend: op table, memory, timing events, the process-wide instance and private ones */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/cpu/cpu.h"
#include "engine/base/error.h"

void openblas_set_num_threads(int num_threads);

char *openblas_get_config(void);

static int cpu_copy(dl_backend *be, void *dst, const void *src, size_t bytes)
{
    if (dst != src && bytes)
        memcpy(dst, src, bytes);
    return DL_OK;
}

static int cpu_memset0(dl_backend *be, void *dst, size_t bytes)
{
    memset(dst, 0, bytes);
    return DL_OK;
}

static int cpu_sync(dl_backend *be) { return DL_OK; }

struct dl_event {
    struct timespec t;
};

static dl_event *cpu_event_create(dl_backend *be) { return calloc(1, sizeof(dl_event)); }

static void cpu_event_destroy(dl_backend *be, dl_event *ev) { free(ev); }

static int cpu_event_record(dl_backend *be, dl_event *ev)
{
    clock_gettime(CLOCK_MONOTONIC, &ev->t);
    return DL_OK;
}

static int cpu_event_elapsed(dl_backend *be, dl_event *a, dl_event *b, float *ms)
{
    *ms = (float)(dl_clock_diff_s(a->t, b->t) * 1e3);
    return DL_OK;
}

static void cpu_destroy(dl_backend *be)
{
    dl_cpu_ctx *c = dl_cpu(be);
    dl_pool_destroy(c->pool);
    dl_cpu_dnnl_free(c);
    dl_cpu_scratch_free(be);
    free(c);
}

static void cpu_trim(dl_backend *be) { dl_cpu_scratch_free(be); }

/* The workspace handed to a conv op holds what dl_cpu_conv_workspace
 * asks for d: 0 when it does, the error naming both sizes when not. */
static int check_ws(dl_backend *be, const dl_conv_desc *d, size_t given, dl_dtype compute,
                    const char *op)
{
    size_t need = dl_cpu_conv_workspace(be, d, compute);
    if (given >= need)
        return DL_OK;
    return dl_error(DL_EINVAL,
                    "cpu %s: workspace of %zu bytes given, %zu needed for x [%d, %d, %d, %d], "
                    "%d filters %dx%d (size it with conv_workspace for this batch)",
                    op, given, need, d->n, d->c, d->h, d->w, d->k, d->r, d->s);
}

static int conv_forward_op(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                           const float *w, const float *b, void *ws, size_t ws_bytes,
                           dl_dtype compute)
{
    DL_TRY(check_ws(be, d, ws ? ws_bytes : 0, compute, "conv_forward"));
    return dl_cpu_conv_forward(be, d, y, x, w, b, ws, compute);
}

static int conv_backward_data_op(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                 const float *w, void *ws, size_t ws_bytes, dl_dtype compute)
{
    DL_TRY(check_ws(be, d, ws ? ws_bytes : 0, compute, "conv_backward_data"));
    return dl_cpu_conv_backward_data(be, d, dx, dy, w, ws, compute);
}

static int conv_backward_filter_op(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                   const float *dy, const float *x, void *ws, size_t ws_bytes,
                                   dl_dtype compute)
{
    DL_TRY(check_ws(be, d, ws ? ws_bytes : 0, compute, "conv_backward_filter"));
    return dl_cpu_conv_backward_filter(be, d, dw, db, dy, x, ws, compute);
}

static int conv_backward_data_set_op(dl_backend *be, const dl_conv_desc *d, float *dx,
                                     const float *dy, const float *w, void *ws, size_t ws_bytes,
                                     dl_dtype compute)
{
    DL_TRY(check_ws(be, d, ws ? ws_bytes : 0, compute, "conv_backward_data"));
    return dl_cpu_conv_backward_data_set(be, d, dx, dy, w, ws, compute);
}

static int conv_backward_op(dl_backend *be, const dl_conv_desc *d, float *dw, float *db, float *dx,
                            int set, const float *dy, const float *x, const float *w, void *ws,
                            size_t ws_bytes, dl_dtype compute)
{
    DL_TRY(check_ws(be, d, ws ? ws_bytes : 0, compute, "conv_backward"));
    return dl_cpu_conv_backward(be, d, dw, db, dx, set, dy, x, w, ws, compute);
}

static const dl_backend_ops cpu_ops = {
    .api_version = DL_BACKEND_API_VERSION,
    .name = "cpu",
    .device = DL_DEVICE_CPU,
    .alloc = dl_cpu_alloc,
    .free = dl_cpu_free,
    .host_alloc = dl_cpu_alloc,
    .host_free = dl_cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .copy = cpu_copy,
    .memset0 = cpu_memset0,
    .fill = dl_cpu_fill,
    .sync = cpu_sync,
    .gemm = dl_cpu_gemm,
    .cast = dl_cpu_cast,
    .round_through = dl_cpu_round_through,
    .input_to_f32 = dl_cpu_input_to_f32,
    .bias_add = dl_cpu_bias_add,
    .bias_grad = dl_cpu_bias_grad,
    .act_forward = dl_cpu_act_forward,
    .act_backward = dl_cpu_act_backward,
    .add = dl_cpu_add,
    .axpy = dl_cpu_axpy,
    .scale = dl_cpu_scale,
    .dropout_forward = dl_cpu_dropout_forward,
    .dropout_backward = dl_cpu_dropout_backward,
    .conv_workspace = dl_cpu_conv_workspace,
    .conv_forward = conv_forward_op,
    .conv_backward_data = conv_backward_data_op,
    .conv_backward_filter = conv_backward_filter_op,
    .pool_forward = dl_cpu_pool_forward,
    .pool_backward = dl_cpu_pool_backward,
    .batchnorm_forward = dl_cpu_batchnorm_forward,
    .batchnorm_backward = dl_cpu_batchnorm_backward,
    .layernorm_forward = dl_cpu_layernorm_forward,
    .layernorm_backward = dl_cpu_layernorm_backward,
    .embedding_forward = dl_cpu_embedding_forward,
    .embedding_backward = dl_cpu_embedding_backward,
    .softmax_xent = dl_cpu_softmax_xent,
    .mse = dl_cpu_mse,
    .bce_logits = dl_cpu_bce_logits,
    .sgd_update = dl_cpu_sgd_update,
    .adam_update = dl_cpu_adam_update,
    .sumsq = dl_cpu_sumsq,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_elapsed = cpu_event_elapsed,
    .destroy = cpu_destroy,
    .relu_maxpool_forward = dl_cpu_relu_maxpool_forward,
    .relu_maxpool_backward = dl_cpu_relu_maxpool_backward,
    .trim = cpu_trim,
    .adaptive_avgpool_forward = dl_cpu_adaptive_avgpool_forward,
    .adaptive_avgpool_backward = dl_cpu_adaptive_avgpool_backward,
    .attention_forward = dl_cpu_attention_forward,
    .attention_backward = dl_cpu_attention_backward,
    .softmax_xent_tokens = dl_cpu_softmax_xent_tokens,
    .conv_algo = dl_cpu_conv_algo,
    .act_backward_set = dl_cpu_act_backward_set,
    .batchnorm_backward_set = dl_cpu_batchnorm_backward_set,
    .conv_backward_data_set = conv_backward_data_set_op,
    .batchnorm_relu_forward = dl_cpu_batchnorm_relu_forward,
    .batchnorm_relu_backward_set = dl_cpu_batchnorm_relu_backward_set,
    .add_relu_forward = dl_cpu_add_relu_forward,
    .add_relu_backward_set = dl_cpu_add_relu_backward_set,
    .sgd_update_lowp = dl_cpu_sgd_update_lowp,
    .adam_update_lowp = dl_cpu_adam_update_lowp,
    .activation_blocks = dl_cpu_activation_blocks,
    .conv_blocks = dl_cpu_conv_blocks,
    .batchnorm_blocked_forward = dl_cpu_batchnorm_blocked_forward,
    .batchnorm_blocked_backward = dl_cpu_batchnorm_blocked_backward,
    .blocks_to_plain = dl_cpu_blocks_to_plain,
    .plain_to_blocks = dl_cpu_plain_to_blocks,
    .conv_backward = conv_backward_op,
    .act_forward_round = dl_cpu_act_forward_round,
};

/* Fills be as a CPU backend with its own context and `threads` workers
 * (0: $DLBENCH_THREADS, else the number of cores). */
static void cpu_setup(dl_backend *be, dl_cpu_ctx *c, int threads)
{
    if (threads <= 0) {
        const char *env = getenv("DLBENCH_THREADS");
        threads = env ? atoi(env) : 0;
    }
    if (threads <= 0)
        threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1)
        threads = 1;
    c->pool = dl_pool_create(threads);
    if (c->pool)
        threads = dl_pool_threads(c->pool); /* fewer when a thread could not start */
    c->threads = threads;
    __builtin_cpu_init();
    /* AVX-512 switched off (DLBENCH_CPU_AVX512=0) takes its bf16 along */
    c->has_avx512_bf16 = __builtin_cpu_supports("avx512bf16") && dl_cpu_avx512();
    /* DLBENCH_CPU_BF16=0: the emulated path, as on a CPU without bf16 */
    const char *bf = getenv("DLBENCH_CPU_BF16");
    if (bf && !strcmp(bf, "0"))
        c->has_avx512_bf16 = 0;
    /* no kernel here computes in fp16: it is converted around fp32 ones */
    be->lowp = DL_LOWP_KNOWN | (c->has_avx512_bf16 ? DL_LOWP_BF16 : 0);
    /* One runtime owns the cores: OpenBLAS runs on the calling thread and
     * dl_cpu_gemm splits big products over the pool (cpu_gemm.c). With
     * OpenBLAS's own workers the two pools spun and yielded against each
     * other, and two threads were slower than one. */
    openblas_set_num_threads(1);
    be->ops = &cpu_ops;
    be->ctx = c;
    be->threads = threads;
    snprintf(be->description, sizeof be->description, "cpu: %d thread%s%s", threads,
             threads == 1 ? "" : "s", c->has_avx512_bf16 ? ", AVX-512 BF16" : "");
}

static dl_backend cpu_backend;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static int cpu_requested_threads;

static void cpu_init(void)
{
    dl_cpu_ctx *c = calloc(1, sizeof *c);
    DL_ASSERT(c);
    cpu_setup(&cpu_backend, c, cpu_requested_threads);
}

dl_backend *dl_backend_cpu(int threads)
{
    cpu_requested_threads = threads;
    pthread_once(&cpu_once, cpu_init);
    return &cpu_backend;
}

dl_backend *dl_backend_cpu_create(int threads)
{
    if (threads < 0 || threads > DL_CPU_MAX_THREADS) {
        dl_error(DL_EINVAL, "cpu backend: %d threads asked for, expected 0 to %d", threads,
                 DL_CPU_MAX_THREADS);
        return NULL;
    }
    dl_backend *be = calloc(1, sizeof *be);
    dl_cpu_ctx *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        dl_error(DL_ENOMEM, "cpu backend: out of memory");
        return NULL;
    }
    cpu_setup(be, c, threads);
    if (!c->pool) {
        free(c);
        free(be);
        dl_error(DL_ENOMEM, "cpu backend: out of memory for a pool of %d threads", threads);
        return NULL;
    }
    return be;
}

void dl_backend_cpu_destroy(dl_backend *be)
{
    if (!be || be == &cpu_backend)
        return;
    cpu_destroy(be);
    free(be);
}
