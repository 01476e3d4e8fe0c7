/* test_switch.c - the hot switch at a step boundary: state moved whole, old memory released, out of memory survived, CUDA round trip and timing
 *
 * The CPU backend is a process-wide singleton, so these tests build their
 * own backends: each wraps a backend instance (a private CPU one from
 * dl_backend_cpu_create, or the CUDA one) in a copy of its op table whose
 * alloc/free/host_alloc/host_free count live allocations and bytes and can
 * fail the Nth allocation on demand (a simulated out-of-memory). Two such
 * backends over CPU instances with the same thread count run the same
 * kernels, so a training moved between them must be bit-identical to one
 * that never moved.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/core/backend.h"
#include "engine/cpu/cpu.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/base/rng.h"
#include "engine/train/trainer.h"
#include "tests/check.h"

/* --- counting backends -------------------------------------------------------- */

typedef struct live_block {
    void *p;
    size_t bytes;
    int host;
} live_block;

typedef struct test_backend {
    dl_backend be; /* first: the ops receive &be */
    dl_backend_ops ops;
    dl_backend *base; /* whose kernels and memory are used */
    int own_base;     /* base came from dl_backend_cpu_create */
    char name[16];
    live_block *blocks;
    int nblocks, cap;
    size_t live_bytes, live_host_bytes;
    long allocs, host_allocs;   /* made so far (successful) */
    long fail_alloc, fail_host; /* > 0: that many calls from now, the last one fails */
    /* convolution workspace: this backend asks ws_extra bytes more than
     * its base, and small_extra more again for batches under small_n rows
     * (as a new algorithm search for a short batch may); each conv op
     * checks what it is handed against that and fills all of it */
    size_t ws_extra, small_extra;
    int small_n;
    long ws_asked, conv_ops, ws_short;
    size_t ws_need_max, ws_given_max;
    char ws_msg[256];
    long guard_calls; /* grad_guard calls (tb_enable_guard) */
    /* overlapped uploads (tb_enable_overlap): when each event was last
     * recorded and each destination last written, on one clock */
    long seq, after_ok, after_bad, first_uploads;
    struct {
        const dl_event *ev;
        long at;
    } recs[8];
    struct {
        const void *dst;
        long at;
    } ups[8];
    int nrecs, nups;
} test_backend;

static test_backend *tb_of(dl_backend *be) { return (test_backend *)be; }

/* Bytes of scratch a CPU backend keeps between ops (0 for others). */
static size_t cpu_scratch_bytes(dl_backend *be)
{
    if (be->ops->device != DL_DEVICE_CPU)
        return 0;
    size_t n = 0;
    for (int i = 0; i < 4; i++)
        n += dl_cpu(be)->scratch_size[i];
    return n;
}

static void tb_track(test_backend *tb, void *p, size_t bytes, int host)
{
    if (tb->nblocks == tb->cap) {
        tb->cap = tb->cap ? 2 * tb->cap : 64;
        tb->blocks = realloc(tb->blocks, (size_t)tb->cap * sizeof *tb->blocks);
        DL_ASSERT(tb->blocks);
    }
    tb->blocks[tb->nblocks++] = (live_block){p, bytes, host};
    if (host) {
        tb->live_host_bytes += bytes;
        tb->host_allocs++;
    } else {
        tb->live_bytes += bytes;
        tb->allocs++;
    }
}

/* Forgets p; 0 when it was not ours (a test failure, counted by the caller). */
static int tb_untrack(test_backend *tb, void *p, int host)
{
    for (int i = 0; i < tb->nblocks; i++) {
        if (tb->blocks[i].p != p || tb->blocks[i].host != host)
            continue;
        if (host)
            tb->live_host_bytes -= tb->blocks[i].bytes;
        else
            tb->live_bytes -= tb->blocks[i].bytes;
        tb->blocks[i] = tb->blocks[--tb->nblocks];
        return 1;
    }
    return 0;
}

static long foreign_frees; /* frees of pointers a backend never handed out */

/* The simulated failure, worded as the real backends word theirs. */
static int tb_due(test_backend *tb, long *countdown, size_t bytes, const char *what)
{
    if (*countdown <= 0 || --*countdown > 0)
        return 0;
    dl_error(DL_ENOMEM, "%s: out of %s memory: asked for %zu bytes, %zu bytes free (simulated)",
             tb->name, what, bytes, (size_t)4096);
    return 1;
}

/* Device (host 0) or host memory from base, counted; fails when due. */
static void *tb_take(dl_backend *be, size_t bytes, int host)
{
    test_backend *tb = tb_of(be);
    if (tb_due(tb, host ? &tb->fail_host : &tb->fail_alloc, bytes, host ? "host" : "device"))
        return NULL;
    dl_backend *base = tb->base;
    void *p = host ? base->ops->host_alloc(base, bytes) : base->ops->alloc(base, bytes);
    if (p)
        tb_track(tb, p, bytes, host);
    return p;
}

static void tb_forget_uploads(test_backend *tb, const void *p);

static void tb_give(dl_backend *be, void *p, int host)
{
    test_backend *tb = tb_of(be);
    if (!p)
        return;
    if (!host)
        tb_forget_uploads(tb, p);
    if (!tb_untrack(tb, p, host))
        foreign_frees++;
    if (host)
        tb->base->ops->host_free(tb->base, p);
    else
        tb->base->ops->free(tb->base, p);
}

static void *tb_alloc(dl_backend *be, size_t bytes) { return tb_take(be, bytes, 0); }
static void tb_free(dl_backend *be, void *p) { tb_give(be, p, 0); }
static void *tb_host_alloc(dl_backend *be, size_t bytes) { return tb_take(be, bytes, 1); }
static void tb_host_free(dl_backend *be, void *p) { tb_give(be, p, 1); }

/* The workspace this backend needs for d: its base's, plus the extras. */
static size_t tb_ws_need(test_backend *tb, const dl_conv_desc *d, dl_dtype compute)
{
    size_t need = tb->base->ops->conv_workspace(tb->base, d, compute) + tb->ws_extra;
    return d->n < tb->small_n ? need + tb->small_extra : need;
}

static size_t tb_conv_workspace(dl_backend *be, const dl_conv_desc *d, dl_dtype compute)
{
    test_backend *tb = tb_of(be);
    tb->ws_asked++;
    size_t need = tb_ws_need(tb, d, compute);
    if (need > tb->ws_need_max)
        tb->ws_need_max = need;
    return need;
}

/* 0 when [ws, ws + bytes) lies inside one live device block of tb. */
static int tb_ws_ours(const test_backend *tb, const void *ws, size_t bytes)
{
    const char *p = ws;
    for (int i = 0; i < tb->nblocks; i++) {
        const char *b = tb->blocks[i].p;
        if (!tb->blocks[i].host && p >= b && p + bytes <= b + tb->blocks[i].bytes)
            return 0;
    }
    return -1;
}

/* A conv op is handed at least what this backend asked for d, in memory
 * of its own: else the call is counted and refused. The whole workspace
 * is written first, as a backend that uses all it asked for would. */
static int tb_ws_check(dl_backend *be, const dl_conv_desc *d, void *ws, size_t bytes,
                       dl_dtype compute, const char *op)
{
    test_backend *tb = tb_of(be);
    size_t need = tb_ws_need(tb, d, compute);
    tb->conv_ops++;
    if (bytes > tb->ws_given_max)
        tb->ws_given_max = bytes;
    if (bytes < need || (need > 0 && (!ws || tb_ws_ours(tb, ws, bytes) != 0))) {
        tb->ws_short++;
        snprintf(tb->ws_msg, sizeof tb->ws_msg, "%s %s: n %d, %zu bytes given, %zu needed%s",
                 tb->name, op, d->n, bytes, need, ws && bytes >= need ? " (not ours)" : "");
        return dl_error(DL_EINVAL, "%s", tb->ws_msg);
    }
    if (ws && tb->base->ops->device == DL_DEVICE_CPU)
        memset(ws, 0xA5, bytes);
    else if (ws)
        DL_TRY(tb->base->ops->memset0(be, ws, bytes));
    return DL_OK;
}

static int tb_conv_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                           const float *w, const float *b, void *ws, size_t bytes, dl_dtype compute)
{
    DL_TRY(tb_ws_check(be, d, ws, bytes, compute, "conv_forward"));
    dl_backend *base = tb_of(be)->base;
    return base->ops->conv_forward(be, d, y, x, w, b, ws, bytes, compute);
}

static int tb_conv_backward_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                                 const float *w, void *ws, size_t bytes, dl_dtype compute)
{
    DL_TRY(tb_ws_check(be, d, ws, bytes, compute, "conv_backward_data"));
    dl_backend *base = tb_of(be)->base;
    return base->ops->conv_backward_data(be, d, dx, dy, w, ws, bytes, compute);
}

static int tb_conv_backward_filter(dl_backend *be, const dl_conv_desc *d, float *dw, float *db,
                                   const float *dy, const float *x, void *ws, size_t bytes,
                                   dl_dtype compute)
{
    DL_TRY(tb_ws_check(be, d, ws, bytes, compute, "conv_backward_filter"));
    dl_backend *base = tb_of(be)->base;
    return base->ops->conv_backward_filter(be, d, dw, db, dy, x, ws, bytes, compute);
}

/* The gradient check "on the device" (backend.h, grad_guard) over the
 * base's ops, with dl_clip_grad_norm's arithmetic: a CPU stand-in for the
 * CUDA backend's, so the trainer's device-side path runs here. */
static int tb_grad_guard(dl_backend *be, float *g, size_t n, float grad_scale, float max_norm,
                         float *cells)
{
    dl_backend *base = tb_of(be)->base;
    tb_of(be)->guard_calls++;
    double ss = 0;
    DL_TRY(base->ops->sumsq(be, g, n, &ss));
    double norm = sqrt(ss) * grad_scale;
    if (!isfinite(norm)) {
        cells[1] = 0;
        cells[2] = 1;
        cells[3] += 1;
        return DL_OK;
    }
    cells[0] = (float)norm;
    cells[1] = max_norm > 0 && norm > max_norm ? (float)(max_norm / norm) : 1.0f;
    cells[2] = 0;
    return cells[1] != 1.0f ? base->ops->scale(be, g, cells[1], n) : DL_OK;
}

static int tb_sgd_guarded(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                          float momentum, float wd, int nesterov, float grad_scale,
                          const float *cells)
{
    dl_backend *base = tb_of(be)->base;
    if (cells[2] != 0)
        return base->ops->memset0(be, g, n * sizeof *g);
    return base->ops->sgd_update(be, n, w, g, m, lr, momentum, wd, nesterov, grad_scale);
}

static int tb_adam_guarded(dl_backend *be, size_t n, float *w, float *g, float *m, float *v,
                           float lr, float beta1, float beta2, float eps, float wd, int decoupled,
                           long step, float grad_scale, const float *cells)
{
    dl_backend *base = tb_of(be)->base;
    if (cells[2] != 0)
        return base->ops->memset0(be, g, n * sizeof *g);
    return base->ops->adam_update(be, n, w, g, m, v, lr, beta1, beta2, eps, wd, decoupled, step,
                                  grad_scale);
}

static void tb_enable_guard(test_backend *tb)
{
    tb->ops.grad_guard = tb_grad_guard;
    tb->ops.sgd_update_guarded = tb_sgd_guarded;
    tb->ops.adam_update_guarded = tb_adam_guarded;
}

static int tb_event_record(dl_backend *be, dl_event *ev)
{
    test_backend *tb = tb_of(be);
    int i = 0;
    while (i < tb->nrecs && tb->recs[i].ev != ev)
        i++;
    if (i == tb->nrecs && tb->nrecs < 8)
        tb->recs[tb->nrecs++].ev = ev;
    if (i < 8)
        tb->recs[i].at = ++tb->seq;
    return tb->base->ops->event_record(be, ev);
}

/* The block at p is freed: its destinations are new when taken again. */
static void tb_forget_uploads(test_backend *tb, const void *p)
{
    size_t bytes = 0;
    for (int i = 0; i < tb->nblocks; i++)
        if (tb->blocks[i].p == p && !tb->blocks[i].host)
            bytes = tb->blocks[i].bytes;
    const char *b = p;
    for (int u = 0; u < tb->nups;) {
        const char *d = tb->ups[u].dst;
        if (d >= b && d < b + bytes)
            tb->ups[u] = tb->ups[--tb->nups];
        else
            u++;
    }
}

/* An upload that may overlap earlier work: legal when dst is new, or when
 * `after` was recorded after dst was last written (its reader is done). */
static int tb_to_device_after(dl_backend *be, void *dst, const void *src, size_t bytes,
                              dl_event *after)
{
    test_backend *tb = tb_of(be);
    int u = 0;
    while (u < tb->nups && tb->ups[u].dst != dst)
        u++;
    if (u == tb->nups) {
        if (tb->nups < 8)
            tb->ups[tb->nups++].dst = dst;
        tb->first_uploads++;
        tb->after_bad += after != NULL; /* a fresh slot waits for nothing */
    } else {
        long rec = -1;
        for (int i = 0; i < tb->nrecs; i++)
            if (after && tb->recs[i].ev == after)
                rec = tb->recs[i].at;
        if (rec > tb->ups[u].at)
            tb->after_ok++;
        else
            tb->after_bad++;
    }
    if (u < 8)
        tb->ups[u].at = ++tb->seq;
    return tb->base->ops->to_device(be, dst, src, bytes);
}

/* A stand-in for a GPU with a copy engine: device memory is the CPU's, but
 * the trainer stages its batches as for a GPU and overlaps the uploads. */
static void tb_enable_overlap(test_backend *tb)
{
    tb->ops.device = DL_DEVICE_CUDA;
    tb->ops.to_device_after = tb_to_device_after;
    tb->ops.event_record = tb_event_record;
}

/* A counting backend over base (taken over when own_base). */
static test_backend *tb_wrap(const char *name, dl_backend *base, int own_base)
{
    test_backend *tb = calloc(1, sizeof *tb);
    DL_ASSERT(tb);
    tb->base = base;
    tb->own_base = own_base;
    snprintf(tb->name, sizeof tb->name, "%s", name);
    tb->ops = *base->ops;
    tb->ops.name = tb->name;
    tb->ops.alloc = tb_alloc;
    tb->ops.free = tb_free;
    tb->ops.host_alloc = tb_host_alloc;
    tb->ops.host_free = tb_host_free;
    tb->ops.conv_workspace = tb_conv_workspace;
    tb->ops.conv_forward = tb_conv_forward;
    tb->ops.conv_backward_data = tb_conv_backward_data;
    tb->ops.conv_backward_filter = tb_conv_backward_filter;
    tb->ops.destroy = NULL; /* the base is released by tb_destroy */
    tb->be.ops = &tb->ops;
    tb->be.ctx = base->ctx; /* the kernels find their context here */
    tb->be.threads = base->threads;
    snprintf(tb->be.description, sizeof tb->be.description, "%s over %.100s", name,
             base->description);
    return tb;
}

static test_backend *tb_cpu(const char *name, int threads)
{
    dl_backend *base = dl_backend_cpu_create(threads);
    DL_ASSERT(base);
    return tb_wrap(name, base, 1);
}

static void tb_destroy(test_backend *tb)
{
    if (!tb)
        return;
    if (tb->own_base)
        dl_backend_cpu_destroy(tb->base);
    free(tb->blocks);
    free(tb);
}

/* --- data, model, runs -------------------------------------------------------------- */

/* Three Gaussian clusters in 8 dimensions, labels i % 3. */
static void blobs(dl_dataset *d, size_t count, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->info.sample = (dl_shape){1, {8}};
    d->info.x_dtype = DL_F32;
    d->info.y_dtype = DL_I32;
    d->info.y_width = 1;
    d->info.classes = 3;
    d->info.count = count;
    d->info.scale = 1;
    float *x = malloc(count * 8 * sizeof *x);
    int32_t *y = malloc(count * sizeof *y);
    DL_ASSERT(x && y);
    for (size_t i = 0; i < count; i++) {
        y[i] = (int32_t)(i % 3);
        for (int k = 0; k < 8; k++)
            x[i * 8 + k] =
                1.5f * (k == y[i] || k == y[i] + 3) + dl_rng_normal(seed, 7, i, (uint64_t)k);
    }
    d->x = x;
    d->y = y;
    snprintf(d->name, sizeof d->name, "blobs-%llu", (unsigned long long)seed);
}

/* Linear-BatchNorm-ReLU-Dropout-Linear: parameters, running statistics
 * (buffers) and a dropout mask keyed by the micro-batch counter. */
static dl_layer *bn_net(int in, int hidden, int out, float dropout)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(in, hidden, 1));
    dl_nn_sequential_add(s, dl_nn_batchnorm(hidden, 1e-5f, 0.1f));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    if (dropout > 0)
        dl_nn_sequential_add(s, dl_nn_dropout(dropout));
    dl_nn_sequential_add(s, dl_nn_linear(hidden, out, 1));
    return s;
}

typedef struct variant {
    const char *name;
    dl_precision prec;
    int accumulate;
    float loss_scale; /* fp16: initial scale */
    int window;       /* fp16: clean steps before it doubles */
} variant;

#define MAX_STEPS 64
#define MAX_SWITCH 4

/* A training of `steps` steps that starts on `start` and, at the step
 * boundaries at[i], moves to to[i]; what it saw is recorded. */
typedef struct plan {
    dl_backend *start;
    int nswitch;
    long at[MAX_SWITCH];
    dl_backend *to[MAX_SWITCH];
    /* the task (NULL / 0: bn_net on blobs, 256 + 96 samples, batch 32) */
    dl_layer *(*net)(void);
    void (*data)(dl_dataset *d, size_t count, uint64_t seed);
    size_t ntrain, nvalset;
    int batch;
    float clip;         /* gradient clipping norm (0: none) */
    int sgd;            /* SGD with momentum instead of Adam */
    int nonfinite_skip; /* DL_NONFINITE_SKIP instead of STOP */
    /* on_idle hook for a test (NULL: the plain switch above) */
    void (*idle)(struct plan *p, dl_trainer *t);
    void *user;
    /* recorded */
    int done; /* switches made */
    int switch_rc[MAX_SWITCH];
    size_t left_bytes[MAX_SWITCH]; /* on the old backend right after each switch */
    size_t left_host[MAX_SWITCH];
    size_t scratch_before[MAX_SWITCH]; /* CPU scratch (operand copies) of the old backend */
    size_t left_scratch[MAX_SWITCH];
    float scale_at[MAX_SWITCH];
    double loss[MAX_STEPS];
    double grad_norm[MAX_STEPS];
    long skipped; /* at the last report */
    float scale[MAX_STEPS];
    int nsteps;
    double val_loss[MAX_STEPS];
    int nval;
    void *state; /* the final state arena, host copy */
    size_t state_bytes;
    float final_scale;
    int rc;
    char msg[512];
} plan;

static int is_test_backend(dl_backend *be) { return be->ops->alloc == tb_alloc; }

static int plan_step(void *user, dl_trainer *t, const dl_step_info *i)
{
    plan *p = user;
    p->skipped = i->skipped_steps;
    if (p->nsteps < MAX_STEPS) {
        p->loss[p->nsteps] = i->loss;
        p->grad_norm[p->nsteps] = i->grad_norm;
        p->scale[p->nsteps] = i->loss_scale;
        p->nsteps++;
    }
    return 0;
}

static int plan_epoch(void *user, dl_trainer *t, const dl_epoch_info *i)
{
    plan *p = user;
    if (p->nval < MAX_STEPS)
        p->val_loss[p->nval++] = i->val_loss;
    return 0;
}

static int plan_idle(void *user, dl_trainer *t)
{
    plan *p = user;
    if (p->idle) {
        p->idle(p, t);
        return 0;
    }
    if (p->done >= p->nswitch || dl_trainer_step_count(t) != p->at[p->done])
        return 0;
    dl_backend *old = dl_trainer_backend(t);
    int k = p->done++;
    p->scale_at[k] = dl_trainer_loss_scale(t);
    p->scratch_before[k] = cpu_scratch_bytes(old);
    p->switch_rc[k] = dl_trainer_switch_device(t, p->to[k]);
    p->left_scratch[k] = cpu_scratch_bytes(old);
    if (p->switch_rc[k] < 0)
        snprintf(p->msg, sizeof p->msg, "%s", dl_error_message());
    if (is_test_backend(old)) {
        p->left_bytes[k] = tb_of(old)->live_bytes;
        p->left_host[k] = tb_of(old)->live_host_bytes;
    }
    return 0;
}

/* Trains bn_net on blobs for `steps` steps with variant v, following the
 * plan; fills p's records. */
static void run_plan(plan *p, const variant *v, long steps)
{
    dl_dataset train, val;
    void (*data)(dl_dataset *, size_t, uint64_t) = p->data ? p->data : blobs;
    int batch = p->batch ? p->batch : 32;
    data(&train, p->ntrain ? p->ntrain : 256, 1);
    data(&val, p->nvalset ? p->nvalset : 96, 2);
    dl_model *m = NULL;
    dl_source *tr = NULL, *va = NULL;
    dl_trainer *t = NULL;
    p->rc = dl_model_create(&m, p->net ? p->net() : bn_net(8, 32, 3, 0.1f), &train.info.sample);
    if (p->rc == DL_OK)
        p->rc = dl_source_memory(&tr, &train, batch, 1, 0, 5);
    if (p->rc == DL_OK)
        p->rc = dl_source_memory(&va, &val, batch, 0, 0, 5);
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = batch;
    cfg.accumulate = v->accumulate;
    cfg.epochs = 100;
    cfg.max_steps = steps;
    cfg.seed = 11;
    cfg.precision = v->prec;
    cfg.log_every = 1;
    if (v->loss_scale > 0)
        cfg.loss_scale = v->loss_scale;
    if (v->window > 0)
        cfg.loss_scale_window = v->window;
    if (p->nonfinite_skip)
        cfg.nonfinite = DL_NONFINITE_SKIP;
    dl_optim opt = p->sgd ? dl_optim_sgd(0.05f, 0.9f, 1, 1e-4f) : dl_optim_adam(1e-2f, 1e-4f);
    opt.clip_norm = p->clip;
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    if (p->rc == DL_OK)
        p->rc = dl_trainer_create(&t, m, &loss, &opt, NULL, tr, va, &cfg, p->start);
    if (p->rc == DL_OK) {
        dl_callbacks cb = {p, plan_step, plan_epoch, NULL, plan_idle};
        dl_trainer_set_callbacks(t, &cb);
        p->rc = dl_trainer_run(t);
    }
    if (p->rc < 0 && !p->msg[0])
        snprintf(p->msg, sizeof p->msg, "%s", dl_error_message());
    if (p->rc == DL_OK) {
        dl_model_state s;
        dl_model_get_state(m, &s);
        p->state_bytes = s.storage->bytes;
        p->state = malloc(p->state_bytes);
        dl_backend *be = s.storage->be;
        p->rc = be->ops->to_host(be, p->state, s.storage->ptr, p->state_bytes);
        p->final_scale = dl_trainer_loss_scale(t);
    }
    dl_trainer_destroy(t);
    dl_model_destroy(m);
    dl_source_destroy(tr);
    dl_source_destroy(va);
    dl_dataset_done(&train);
    dl_dataset_done(&val);
}

static void plan_done(plan *p)
{
    free(p->state);
    p->state = NULL;
}

/* Same losses, loss scales, validation losses and final state, bit for bit. */
static void check_identical(const plan *a, const plan *b)
{
    CHECK_MSG(a->rc == DL_OK && b->rc == DL_OK, "runs failed: %s / %s", a->msg, b->msg);
    CHECK(a->nsteps == b->nsteps && a->nsteps > 0);
    for (int i = 0; i < a->nsteps && i < b->nsteps; i++) {
        CHECK_MSG(a->loss[i] == b->loss[i], "step %d: loss %.9g vs %.9g", i + 1, a->loss[i],
                  b->loss[i]);
        CHECK_MSG(a->scale[i] == b->scale[i], "step %d: loss scale %g vs %g", i + 1,
                  (double)a->scale[i], (double)b->scale[i]);
    }
    CHECK(a->nval == b->nval && a->nval > 0);
    for (int i = 0; i < a->nval && i < b->nval; i++)
        CHECK_MSG(a->val_loss[i] == b->val_loss[i], "epoch %d: val_loss %.9g vs %.9g", i + 1,
                  a->val_loss[i], b->val_loss[i]);
    CHECK(a->state && b->state && a->state_bytes == b->state_bytes);
    if (a->state && b->state && a->state_bytes == b->state_bytes)
        CHECK_MSG(memcmp(a->state, b->state, a->state_bytes) == 0,
                  "final state arenas differ (%zu bytes)", a->state_bytes);
    CHECK(a->final_scale == b->final_scale);
}

/* --- tests -------------------------------------------------------------------------- */

#define K 6 /* steps between switches */

/* A -> B at K, B -> A at 2K, 3K steps in all, against 3K steps on A. */
static void round_trip(const variant *v)
{
    test_backend *a = tb_cpu("cpuA", 2), *b = tb_cpu("cpuB", 2);
    plan ref = {.start = &a->be};
    run_plan(&ref, v, 3 * K);
    CHECK_MSG(a->live_bytes == 0 && a->live_host_bytes == 0, "reference run left %zu + %zu bytes",
              a->live_bytes, a->live_host_bytes);

    plan sw = {.start = &a->be, .nswitch = 2, .at = {K, 2 * K}, .to = {&b->be, &a->be}};
    run_plan(&sw, v, 3 * K);
    CHECK_MSG(sw.done == 2 && sw.switch_rc[0] == DL_OK && sw.switch_rc[1] == DL_OK,
              "switches made %d: %s", sw.done, sw.msg);
    check_identical(&ref, &sw);
    /* the old backend holds nothing after each move: arenas, staging and
     * the loaders' batch buffers went with the training */
    CHECK_MSG(sw.left_bytes[0] == 0 && sw.left_host[0] == 0,
              "A keeps %zu device + %zu host bytes after the move to B", sw.left_bytes[0],
              sw.left_host[0]);
    CHECK_MSG(sw.left_bytes[1] == 0 && sw.left_host[1] == 0,
              "B keeps %zu device + %zu host bytes after the move back", sw.left_bytes[1],
              sw.left_host[1]);
    /* nor its cached scratch (bf16 operand copies): trimmed by the switch */
    CHECK_MSG(sw.left_scratch[0] == 0 && sw.left_scratch[1] == 0,
              "scratch kept: %zu bytes on A, %zu on B", sw.left_scratch[0], sw.left_scratch[1]);
    if (v->prec == DL_PREC_BF16) /* there was some to free */
        CHECK_MSG(sw.scratch_before[0] > 0, "bf16 on A used no scratch");
    /* B was really used: model state, activations, staging, 2 loaders x 2 buffers */
    CHECK_MSG(b->allocs == 3 && b->host_allocs == 4, "B: %ld allocations, %ld host allocations",
              b->allocs, b->host_allocs);
    CHECK(a->live_bytes == 0 && a->live_host_bytes == 0 && b->live_bytes == 0 &&
          b->live_host_bytes == 0);
    CHECK(foreign_frees == 0);
    if (v->prec == DL_PREC_F16)
        CHECK_MSG(sw.scale_at[0] != v->loss_scale && sw.scale_at[1] != sw.scale_at[0],
                  "loss scale %g at the first switch, %g at the second (initial %g)",
                  (double)sw.scale_at[0], (double)sw.scale_at[1], (double)v->loss_scale);
    plan_done(&ref);
    plan_done(&sw);
    tb_destroy(a);
    tb_destroy(b);
}

static void test_round_trip_f32(void)
{
    /* BatchNorm running statistics, Adam moments, dropout, shuffled batches */
    variant v = {"f32", DL_PREC_F32, 1, 0, 0};
    round_trip(&v);
}

static void test_round_trip_fp16_loss_scale(void)
{
    /* the scale doubles every 2 clean steps: 8 -> 64 at step 6, 512 at 12 */
    variant v = {"fp16", DL_PREC_F16, 1, 8.0f, 2};
    round_trip(&v);
}

static void test_round_trip_bf16(void)
{
    variant v = {"bf16", DL_PREC_BF16, 1, 0, 0};
    round_trip(&v);
}

static void test_round_trip_accumulate(void)
{
    /* accumulate 2: a step is 2 micro-batches; a switch (between steps)
     * never splits one, and the micro-batch counter carries on */
    variant v = {"f32 accumulate 2", DL_PREC_F32, 2, 0, 0};
    round_trip(&v);
}

typedef struct oom_probe {
    test_backend *b;
    int tried;
    int failures;     /* attempts that failed as they should */
    int named_cause;  /* ... with a message naming the size */
    int stayed;       /* ... with the training still on A */
    int state_intact; /* ... with the state arena unchanged */
    int b_clean;      /* ... leaving nothing on B */
    int attempts;
    char msg[512];
} oom_probe;

static void oom_try(oom_probe *o, dl_trainer *t, long *countdown, long n)
{
    dl_model *m = dl_trainer_model(t);
    dl_backend *a = dl_trainer_backend(t);
    dl_model_state s;
    dl_model_get_state(m, &s);
    size_t bytes = s.storage->bytes;
    void *before = malloc(bytes), *after = malloc(bytes);
    DL_ASSERT(before && after);
    a->ops->to_host(a, before, s.storage->ptr, bytes);
    dl_trainer_cursor c0, c1;
    dl_trainer_get_cursor(t, &c0);
    *countdown = n;
    dl_error_clear();
    int rc = dl_trainer_switch_device(t, &o->b->be);
    *countdown = 0;
    o->attempts++;
    if (rc < 0) {
        o->failures++;
        const char *msg = dl_error_message();
        if (strstr(msg, "out of") && strstr(msg, "bytes"))
            o->named_cause++;
        else
            snprintf(o->msg, sizeof o->msg, "%s", msg);
        dl_model_get_state(m, &s);
        o->stayed += dl_trainer_backend(t) == a && dl_model_backend(m) == a && s.storage->be == a;
        a->ops->to_host(a, after, s.storage->ptr, bytes);
        dl_trainer_get_cursor(t, &c1);
        o->state_intact += memcmp(before, after, bytes) == 0 && memcmp(&c0, &c1, sizeof c0) == 0;
        o->b_clean += o->b->live_bytes == 0 && o->b->live_host_bytes == 0 && o->b->nblocks == 0;
    }
    free(before);
    free(after);
}

/* At step K: every allocation of a switch to B fails in turn, device ones
 * (model state, activations, staging) then host ones (batch buffers). */
static void oom_idle(plan *p, dl_trainer *t)
{
    oom_probe *o = p->user;
    if (o->tried || dl_trainer_step_count(t) != K)
        return;
    o->tried = 1;
    for (long n = 1; n <= 3; n++)
        oom_try(o, t, &o->b->fail_alloc, n);
    for (long n = 1; n <= 4; n++)
        oom_try(o, t, &o->b->fail_host, n);
}

static void test_out_of_memory(void)
{
    test_backend *a = tb_cpu("cpuA", 2), *b = tb_cpu("cpuB", 2);
    variant v = {"f32", DL_PREC_F32, 1, 0, 0};
    plan ref = {.start = &a->be};
    run_plan(&ref, &v, 3 * K);

    oom_probe o = {.b = b};
    plan tried = {.start = &a->be, .idle = oom_idle, .user = &o};
    run_plan(&tried, &v, 3 * K);
    CHECK_MSG(o.tried && o.attempts == 7, "attempts %d", o.attempts);
    CHECK_MSG(o.failures == o.attempts, "%d of %d failed", o.failures, o.attempts);
    CHECK_MSG(o.named_cause == o.failures, "%d of %d messages name the cause; one said: %s",
              o.named_cause, o.failures, o.msg);
    CHECK_MSG(o.stayed == o.failures, "stayed on A %d of %d", o.stayed, o.failures);
    CHECK_MSG(o.state_intact == o.failures, "state intact %d of %d", o.state_intact, o.failures);
    CHECK_MSG(o.b_clean == o.failures, "B clean %d of %d (now %zu + %zu bytes)", o.b_clean,
              o.failures, b->live_bytes, b->live_host_bytes);
    /* continuing on A gives the run that never tried */
    check_identical(&ref, &tried);
    CHECK(a->live_bytes == 0 && a->live_host_bytes == 0 && b->live_bytes == 0 &&
          b->live_host_bytes == 0);
    CHECK(foreign_frees == 0);
    plan_done(&ref);
    plan_done(&tried);
    tb_destroy(a);
    tb_destroy(b);
}

static void snapshot_case(int guard)
{
    /* a snapshot taken at step K and restored after 2K more steps gives
     * the same next K steps again, bit for bit */
    test_backend *a = tb_cpu("cpuA", 2);
    if (guard)
        tb_enable_guard(a);
    dl_dataset train;
    blobs(&train, 1024, 1); /* 32 steps an epoch: no epoch end below */
    dl_model *m;
    dl_source *tr;
    dl_trainer *t;
    CHECK_OK(dl_model_create(&m, bn_net(8, 32, 3, 0.1f), &train.info.sample));
    CHECK_OK(dl_source_memory(&tr, &train, 32, 1, 0, 5));
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 32;
    cfg.epochs = 100;
    cfg.seed = 3;
    dl_optim opt = dl_optim_adam(1e-2f, 0);
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    CHECK_OK(dl_trainer_create(&t, m, &loss, &opt, NULL, tr, NULL, &cfg, &a->be));
    for (int i = 0; i < K; i++)
        CHECK(dl_trainer_step(t) == 0);
    dl_trainer_snapshot *snap = NULL;
    CHECK_OK(dl_trainer_snapshot_take(t, &snap));
    dl_model_state s;
    dl_model_get_state(m, &s);
    size_t bytes = s.storage->bytes;
    float *first = malloc(bytes), *second = malloc(bytes);
    for (int i = 0; i < K; i++)
        CHECK(dl_trainer_step(t) == 0);
    memcpy(first, s.storage->ptr, bytes);
    for (int i = 0; i < K; i++)
        CHECK(dl_trainer_step(t) == 0);
    CHECK(dl_trainer_step_count(t) == 3 * K);
    if (snap)
        CHECK_OK(dl_trainer_snapshot_restore(t, snap));
    CHECK(dl_trainer_step_count(t) == K);
    for (int i = 0; i < K; i++)
        CHECK(dl_trainer_step(t) == 0);
    dl_model_get_state(m, &s);
    memcpy(second, s.storage->ptr, bytes);
    CHECK_MSG(memcmp(first, second, bytes) == 0, "state after restore + %d steps differs", K);
    dl_trainer_snapshot_destroy(snap);
    free(first);
    free(second);
    dl_trainer_destroy(t);
    dl_model_destroy(m);
    dl_source_destroy(tr);
    dl_dataset_done(&train);
    tb_destroy(a);
}

static void test_snapshot_restore(void) { snapshot_case(0); }

/* the same with the gradient check on the device (its cells restart) */
static void test_snapshot_restore_guarded(void) { snapshot_case(1); }

static void test_parity_same_kernels(void)
{
    /* parity of two CPU backends with one thread count: every difference 0,
     * and the training is back on A where it was */
    test_backend *a = tb_cpu("cpuA", 2), *b = tb_cpu("cpuB", 2);
    dl_dataset train, val;
    blobs(&train, 256, 1);
    blobs(&val, 96, 2);
    dl_model *m;
    dl_source *tr, *va;
    dl_trainer *t;
    CHECK_OK(dl_model_create(&m, bn_net(8, 32, 3, 0.1f), &train.info.sample));
    CHECK_OK(dl_source_memory(&tr, &train, 32, 1, 0, 5));
    CHECK_OK(dl_source_memory(&va, &val, 32, 0, 0, 5));
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 32;
    cfg.epochs = 100;
    cfg.seed = 3;
    dl_optim opt = dl_optim_adam(1e-2f, 0);
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    CHECK_OK(dl_trainer_create(&t, m, &loss, &opt, NULL, tr, va, &cfg, &a->be));
    for (int i = 0; i < 3; i++)
        CHECK(dl_trainer_step(t) == 0);
    dl_model_state s;
    dl_model_get_state(m, &s);
    size_t bytes = s.storage->bytes;
    void *before = malloc(bytes), *after = malloc(bytes);
    memcpy(before, s.storage->ptr, bytes);
    dl_parity_report r;
    /* 12 steps cross the end of epoch 1 (8 steps): validation runs on both */
    CHECK_OK(dl_trainer_check_parity(t, &b->be, 12, &r));
    CHECK(r.steps == 12 && r.first_step == 3);
    CHECK(r.max_loss_rel == 0 && r.max_param_rel == 0 && r.params_identical);
    CHECK(r.loss_a && r.loss_a[0] > 0 && isfinite(r.loss_a[11]));
    CHECK(dl_trainer_backend(t) == &a->be && dl_trainer_step_count(t) == 3);
    dl_model_get_state(m, &s);
    CHECK(s.storage->be == &a->be);
    memcpy(after, s.storage->ptr, bytes);
    CHECK_MSG(memcmp(before, after, bytes) == 0, "the state after the check differs");
    CHECK(b->live_bytes == 0 && b->live_host_bytes == 0 && b->allocs == 3);
    dl_parity_report_done(&r);
    /* B out of memory: an error naming it, the training still on A, intact */
    b->fail_alloc = 2;
    CHECK(dl_trainer_check_parity(t, &b->be, 4, &r) == DL_ENOMEM);
    CHECK_MSG(strstr(dl_error_message(), "cannot move the training to cpuB") &&
                  strstr(dl_error_message(), "asked for"),
              "%s", dl_error_message());
    b->fail_alloc = 0;
    dl_parity_report_done(&r);
    CHECK(dl_trainer_backend(t) == &a->be && b->live_bytes == 0 && b->live_host_bytes == 0);
    dl_model_get_state(m, &s);
    memcpy(after, s.storage->ptr, bytes);
    CHECK(memcmp(before, after, bytes) == 0);
    /* A out of memory for the move back: the training stays on B, but with
     * its state put back (step and parameters as before the check) */
    long a_allocs = a->allocs;
    a->fail_alloc = 1;
    CHECK(dl_trainer_check_parity(t, &b->be, 4, &r) == DL_ENOMEM);
    CHECK_MSG(strstr(dl_error_message(), "cpuA: out of device memory"), "%s", dl_error_message());
    a->fail_alloc = 0;
    dl_parity_report_done(&r);
    CHECK(a->allocs == a_allocs && dl_trainer_backend(t) == &b->be);
    CHECK_MSG(dl_trainer_step_count(t) == 3, "step %ld after a failed move back",
              dl_trainer_step_count(t));
    CHECK_OK(dl_trainer_switch_device(t, &a->be));
    dl_model_get_state(m, &s);
    memcpy(after, s.storage->ptr, bytes);
    CHECK_MSG(memcmp(before, after, bytes) == 0, "the state after a failed move back differs");
    CHECK(dl_trainer_check_parity(t, &b->be, 0, &r) == DL_EINVAL);
    dl_parity_report_done(&r);
    free(before);
    free(after);
    dl_trainer_destroy(t);
    dl_model_destroy(m);
    dl_source_destroy(tr);
    dl_source_destroy(va);
    dl_dataset_done(&train);
    dl_dataset_done(&val);
    CHECK(a->live_bytes == 0 && a->live_host_bytes == 0);
    tb_destroy(a);
    tb_destroy(b);
}

/* --- convolution workspaces ------------------------------------------------------------ */

/* 1x8x8 images of three classes: a bright row, column or diagonal, plus noise. */
static void stripes(dl_dataset *d, size_t count, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->info.sample = (dl_shape){3, {1, 8, 8}};
    d->info.x_dtype = DL_F32;
    d->info.y_dtype = DL_I32;
    d->info.y_width = 1;
    d->info.classes = 3;
    d->info.count = count;
    d->info.scale = 1;
    float *x = malloc(count * 64 * sizeof *x);
    int32_t *y = malloc(count * sizeof *y);
    DL_ASSERT(x && y);
    for (size_t i = 0; i < count; i++) {
        y[i] = (int32_t)(i % 3);
        int at = (int)(i / 3 % 8);
        for (int r = 0; r < 8; r++)
            for (int c = 0; c < 8; c++) {
                int on = y[i] == 0 ? r == at : y[i] == 1 ? c == at : r == c;
                x[i * 64 + r * 8 + c] =
                    (float)on + 0.3f * dl_rng_normal(seed, 9, i, (uint64_t)(r * 8 + c));
            }
    }
    d->x = x;
    d->y = y;
    snprintf(d->name, sizeof d->name, "stripes-%llu", (unsigned long long)seed);
}

/* Conv-ReLU-Conv(stride 2)-ReLU-Flatten-Linear: two convolutions of
 * different shapes share the model's workspace. */
static dl_layer *small_cnn(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_conv2d(1, 4, 3, 1, 1, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_conv2d(4, 6, 3, 2, 1, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(6 * 4 * 4, 3, 1));
    return s;
}

static void workspace_case(dl_precision prec)
{
    /* 100 samples in batches of 12: 8 full batches and one of 4 each
     * epoch; validation 30: 2 of 12 and one of 6. B asks 4 KiB more than
     * the CPU for every shape and 256 KiB more again under 8 rows, so the
     * workspace planned on A is too small on B, and B's planned one too
     * small for the short batches. */
    test_backend *a = tb_cpu("cpuA", 2), *b = tb_cpu("cpuB", 2);
    b->ws_extra = 4096;
    b->small_extra = (size_t)256 << 10;
    b->small_n = 8;
    variant v = {"ws", prec, 1, 0, 0};
    plan base = {.net = small_cnn, .data = stripes, .ntrain = 100, .nvalset = 30, .batch = 12};
    plan ref = base, sw = base;
    ref.start = &a->be;
    run_plan(&ref, &v, 22);
    /* to B at step 3: steps 4-9 (the short batch 9) and validation on B,
     * back to A at step 11 */
    sw.start = &a->be;
    sw.nswitch = 2;
    sw.at[0] = 3;
    sw.at[1] = 11;
    sw.to[0] = &b->be;
    sw.to[1] = &a->be;
    run_plan(&sw, &v, 22);
    CHECK_MSG(sw.done == 2 && sw.switch_rc[0] == DL_OK && sw.switch_rc[1] == DL_OK, "%s", sw.msg);
    CHECK_MSG(b->ws_short == 0 && a->ws_short == 0, "short workspaces: %s%s", b->ws_msg, a->ws_msg);
    /* B was asked for its own figures and ran every conv op with them */
    CHECK_MSG(b->ws_asked > 0 && b->conv_ops > 0, "B asked %ld times, ran %ld conv ops",
              b->ws_asked, b->conv_ops);
    CHECK_MSG(b->ws_given_max >= b->small_extra && b->ws_need_max >= b->small_extra,
              "B was handed at most %zu bytes, needed at most %zu (short batch +%zu)",
              b->ws_given_max, b->ws_need_max, b->small_extra);
    /* A's workspace went with the training: nothing left on it after the move */
    CHECK_MSG(sw.left_bytes[0] == 0 && sw.left_bytes[1] == 0,
              "left behind: %zu bytes on A, %zu on B", sw.left_bytes[0], sw.left_bytes[1]);
    /* the workspace holds no state: the same training as one that never moved */
    check_identical(&ref, &sw);
    CHECK(a->live_bytes == 0 && b->live_bytes == 0 && foreign_frees == 0);
    plan_done(&ref);
    plan_done(&sw);
    tb_destroy(a);
    tb_destroy(b);
}

static void test_workspace_switch_f32(void) { workspace_case(DL_PREC_F32); }

static void test_workspace_switch_bf16(void) { workspace_case(DL_PREC_BF16); }

static void test_workspace_refused(void)
{
    /* a conv op handed less than conv_workspace fails naming both sizes */
    dl_backend *cpu = dl_backend_cpu(0);
    dl_conv_desc d = {.n = 2,
                      .c = 3,
                      .h = 6,
                      .w = 6,
                      .k = 4,
                      .r = 3,
                      .s = 3,
                      .stride = 1,
                      .pad = 1,
                      .p = 6,
                      .q = 6};
    size_t need = cpu->ops->conv_workspace(cpu, &d, DL_F32);
    CHECK(need > 0);
    float *x = calloc(2 * 3 * 36, sizeof *x), *w = calloc(4 * 27, sizeof *w);
    float *y = calloc(2 * 4 * 36, sizeof *y);
    char *ws = malloc(need);
    CHECK(cpu->ops->conv_forward(cpu, &d, y, x, w, NULL, ws, need - 1, DL_F32) == DL_EINVAL);
    char want[64];
    snprintf(want, sizeof want, "%zu bytes given, %zu needed", need - 1, need);
    CHECK_MSG(strstr(dl_error_message(), want), "%s", dl_error_message());
    CHECK(cpu->ops->conv_backward_data(cpu, &d, x, y, w, NULL, 0, DL_F32) == DL_EINVAL);
    CHECK_OK(cpu->ops->conv_forward(cpu, &d, y, x, w, NULL, ws, need, DL_F32));
    free(x);
    free(w);
    free(y);
    free(ws);
}

/* --- the gradient check on the device ------------------------------------------------- */

/* x == y, or both NaN. */
static int same(double x, double y) { return x == y || (isnan(x) && isnan(y)); }

/* Blobs whose training sample 101 holds an infinity: each batch that draws
 * it has a non-finite gradient. */
static void blobs_inf(dl_dataset *d, size_t count, uint64_t seed)
{
    blobs(d, count, seed);
    if (seed == 1)
        ((float *)d->x)[101 * 8 + 2] = INFINITY;
}

static dl_layer *plain_net(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(8, 16, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(16, 3, 1));
    return s;
}

/* The same training on a host-checked and a device-checked backend. */
static void guard_case(plan base, const variant *v, long steps)
{
    test_backend *a = tb_cpu("cpuA", 2), *g = tb_cpu("cpuG", 2);
    tb_enable_guard(g);
    plan host = base, dev = base;
    host.start = &a->be;
    dev.start = &g->be;
    run_plan(&host, v, steps);
    run_plan(&dev, v, steps);
    CHECK_MSG(g->guard_calls > 0 && a->guard_calls == 0, "device checks: %ld on G, %ld on A",
              g->guard_calls, a->guard_calls);
    CHECK_MSG(host.rc == dev.rc, "host path: %d (%s), device path: %d (%s)", host.rc, host.msg,
              dev.rc, dev.msg);
    CHECK_MSG(host.nsteps == dev.nsteps && (host.nsteps > 0 || host.rc < 0),
              "%d steps on the host path, %d on the device path", host.nsteps, dev.nsteps);
    if (host.rc < 0)
        CHECK_MSG(host.rc == DL_ENONFINITE && strstr(host.msg, "non-finite gradient") &&
                      strstr(dev.msg, "non-finite gradient"),
                  "host: %s; device: %s", host.msg, dev.msg);
    for (int i = 0; i < host.nsteps && i < dev.nsteps; i++) {
        CHECK_MSG(same(host.loss[i], dev.loss[i]), "step %d: loss %.9g vs %.9g", i + 1,
                  host.loss[i], dev.loss[i]);
        /* the device keeps the norm as a float */
        CHECK_MSG(same(host.grad_norm[i], dev.grad_norm[i]) ||
                      fabs(host.grad_norm[i] - dev.grad_norm[i]) <= 1e-7 * fabs(host.grad_norm[i]),
                  "step %d: grad norm %.9g vs %.9g", i + 1, host.grad_norm[i], dev.grad_norm[i]);
    }
    CHECK_MSG(host.skipped == dev.skipped, "skipped %ld vs %ld", host.skipped, dev.skipped);
    printf("  %d steps, %ld skipped, %s\n", dev.nsteps, dev.skipped,
           dev.rc < 0 ? dev.msg : "finished");
    if (host.rc == DL_OK) {
        CHECK(host.state && dev.state && host.state_bytes == dev.state_bytes);
        if (host.state && dev.state && host.state_bytes == dev.state_bytes)
            CHECK_MSG(memcmp(host.state, dev.state, host.state_bytes) == 0, "final states differ");
    }
    plan_done(&host);
    plan_done(&dev);
    tb_destroy(a);
    tb_destroy(g);
}

static void test_guard_clip_adam(void)
{
    /* clipped at 0.5 (every step here): the device path, bit for bit */
    variant v = {"f32", DL_PREC_F32, 1, 0, 0};
    plan p = {.clip = 0.5f};
    guard_case(p, &v, 20);
}

static void test_guard_sgd_bf16(void)
{
    variant v = {"bf16", DL_PREC_BF16, 2, 0, 0};
    plan p = {.sgd = 1, .clip = 1.0f};
    guard_case(p, &v, 12);
}

static void test_guard_nonfinite_skip(void)
{
    /* the batches with the infinity are skipped on both paths alike; the
     * host learns of them at the report */
    variant v = {"f32", DL_PREC_F32, 1, 0, 0};
    plan p = {.net = plain_net, .data = blobs_inf, .nonfinite_skip = 1};
    guard_case(p, &v, 20);
}

static void test_guard_nonfinite_stop(void)
{
    /* DL_NONFINITE_STOP: both fail at the step with the infinity (the
     * device path at its report, which follows every step here) */
    variant v = {"f32", DL_PREC_F32, 1, 0, 0};
    plan p = {.net = plain_net, .data = blobs_inf};
    guard_case(p, &v, 20);
}

/* --- overlapped uploads ----------------------------------------------------------------- */

static void test_overlapped_uploads(void)
{
    /* on a backend that overlaps uploads: the two stage slots alternate,
     * each copy waits for the last reader of its slot (never for nothing,
     * never for an older reader), training and validation alike, through
     * a switch away and back (fresh slots); the run is the plain one */
    test_backend *a = tb_cpu("cpuA", 2), *g = tb_cpu("gpuG", 2);
    tb_enable_overlap(g);
    variant v = {"f32", DL_PREC_F32, 2, 0, 0};
    plan ref = {.start = &a->be};
    run_plan(&ref, &v, 3 * K);
    plan sw = {.start = &g->be, .nswitch = 2, .at = {K, 2 * K}, .to = {&a->be, &g->be}};
    run_plan(&sw, &v, 3 * K);
    CHECK_MSG(sw.done == 2 && sw.switch_rc[0] == DL_OK && sw.switch_rc[1] == DL_OK, "%s", sw.msg);
    check_identical(&ref, &sw);
    printf("  %ld overlapped uploads waited for their slot's reader, %ld to fresh slots\n",
           g->after_ok, g->first_uploads);
    CHECK_MSG(g->after_bad == 0, "%ld uploads waited for the wrong event", g->after_bad);
    /* x and y of two slots, twice (the stage is made anew on the way back) */
    CHECK_MSG(g->first_uploads == 8 && g->after_ok > 20, "%ld fresh, %ld waited", g->first_uploads,
              g->after_ok);
    plan_done(&ref);
    plan_done(&sw);
    tb_destroy(a);
    tb_destroy(g);
}

/* --- CUDA ----------------------------------------------------------------------------- */

static char cuda_why[512];
static dl_backend *cuda;

static void test_cuda_round_trip(void)
{
    /* CPU -> CUDA at K, back at 2K: losses within 1e-4 of a CPU-only run
     * (f32 products without TF32), the GPU's memory released after */
    if (!cuda) {
        SKIP("%.240s", cuda_why);
        return;
    }
    test_backend *a = tb_cpu("cpuA", 0), *g = tb_wrap("cudaG", cuda, 0);
    variant v = {"f32", DL_PREC_F32, 1, 0, 0};
    plan ref = {.start = &a->be};
    run_plan(&ref, &v, 3 * K);
    plan sw = {.start = &a->be, .nswitch = 2, .at = {K, 2 * K}, .to = {&g->be, &a->be}};
    run_plan(&sw, &v, 3 * K);
    CHECK_MSG(sw.rc == DL_OK && sw.done == 2 && sw.switch_rc[0] == DL_OK &&
                  sw.switch_rc[1] == DL_OK,
              "%s", sw.msg);
    CHECK(ref.nsteps == sw.nsteps && ref.nsteps == 3 * K);
    double worst = 0;
    for (int i = 0; i < ref.nsteps && i < sw.nsteps; i++)
        worst = fmax(worst, fabs(sw.loss[i] - ref.loss[i]) / fabs(ref.loss[i]));
    printf("  largest relative loss difference CPU->CUDA->CPU vs CPU: %.3g\n", worst);
    CHECK_MSG(worst <= 1e-4, "relative loss difference %.3g", worst);
    for (int i = 0; i < K; i++) /* before the switch: the same run */
        CHECK(sw.loss[i] == ref.loss[i]);
    CHECK_MSG(sw.left_bytes[0] == 0 && sw.left_host[0] == 0 && sw.left_bytes[1] == 0 &&
                  sw.left_host[1] == 0,
              "left behind: %zu + %zu on the CPU, %zu + %zu on the GPU", sw.left_bytes[0],
              sw.left_host[0], sw.left_bytes[1], sw.left_host[1]);
    CHECK(g->live_bytes == 0 && g->live_host_bytes == 0 && g->allocs >= 3);
    plan_done(&ref);
    plan_done(&sw);
    tb_destroy(a);
    tb_destroy(g);
}

static void test_cuda_switch_100m(void)
{
    /* an MLP of 100.7M parameters with Adam moments (1.8 GB of state):
     * CPU -> GPU -> CPU, one step on each side; target under 1 s a move */
    if (!cuda) {
        SKIP("%.240s", cuda_why);
        return;
    }
    dl_backend *cpu = dl_backend_cpu(0);
    dl_dataset d;
    memset(&d, 0, sizeof d);
    d.info.sample = (dl_shape){1, {8192}};
    d.info.x_dtype = DL_F32;
    d.info.y_dtype = DL_I32;
    d.info.y_width = 1;
    d.info.classes = 10;
    d.info.count = 32;
    d.info.scale = 1;
    float *x = malloc(32 * 8192 * sizeof *x);
    int32_t *y = malloc(32 * sizeof *y);
    for (size_t i = 0; i < 32; i++) {
        y[i] = (int32_t)(i % 10);
        for (size_t k = 0; k < 8192; k++)
            x[i * 8192 + k] = dl_rng_normal(5, 1, i, k);
    }
    d.x = x;
    d.y = y;
    snprintf(d.name, sizeof d.name, "noise-8192");
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(8192, 8192, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(8192, 4096, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(4096, 10, 1));
    dl_model *m;
    dl_source *src;
    dl_trainer *t = NULL;
    CHECK_OK(dl_model_create(&m, s, &d.info.sample));
    CHECK_OK(dl_source_memory(&src, &d, 16, 0, 0, 1));
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 16;
    cfg.epochs = 100;
    dl_optim opt = dl_optim_adam(1e-4f, 0);
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    CHECK_OK(dl_trainer_create(&t, m, &loss, &opt, NULL, src, NULL, &cfg, cpu));
    printf("  %.1fM parameters\n", (double)dl_model_param_count(m) / 1e6);
    if (t) {
        CHECK(dl_trainer_step(t) == 0);
        double t0 = dl_clock_mono_s();
        CHECK_OK(dl_trainer_switch_device(t, cuda));
        double to_gpu = dl_clock_mono_s() - t0;
        CHECK(dl_trainer_step(t) == 0);
        CHECK_OK(cuda->ops->sync(cuda));
        t0 = dl_clock_mono_s();
        CHECK_OK(dl_trainer_switch_device(t, cpu));
        double to_cpu = dl_clock_mono_s() - t0;
        CHECK(dl_trainer_step(t) == 0);
        CHECK(dl_trainer_backend(t) == cpu && dl_trainer_step_count(t) == 3);
        printf("RESULT switch_100M_to_gpu %.3f\n", to_gpu);
        printf("RESULT switch_100M_to_cpu %.3f\n", to_cpu);
        printf("RESULT switch_100M %.3f\n", to_gpu > to_cpu ? to_gpu : to_cpu);
        CHECK_MSG(to_gpu < 1.0 && to_cpu < 1.0, "moves took %.3f s and %.3f s (target < 1 s)",
                  to_gpu, to_cpu);
    }
    dl_trainer_destroy(t);
    dl_model_destroy(m);
    dl_source_destroy(src);
    dl_dataset_done(&d);
}

int main(void)
{
    /* f32 products at full precision on the GPU unless the caller chose */
    if (!getenv("DLBENCH_CUDA_TF32"))
        setenv("DLBENCH_CUDA_TF32", "0", 1);
    cuda = dl_backend_cuda(cuda_why, sizeof cuda_why);
    RUN(test_round_trip_f32);
    RUN(test_round_trip_fp16_loss_scale);
    RUN(test_round_trip_bf16);
    RUN(test_round_trip_accumulate);
    RUN(test_out_of_memory);
    RUN(test_snapshot_restore);
    RUN(test_snapshot_restore_guarded);
    RUN(test_parity_same_kernels);
    RUN(test_workspace_switch_f32);
    RUN(test_workspace_switch_bf16);
    RUN(test_workspace_refused);
    RUN(test_guard_clip_adam);
    RUN(test_guard_sgd_bf16);
    RUN(test_guard_nonfinite_skip);
    RUN(test_guard_nonfinite_stop);
    RUN(test_overlapped_uploads);
    RUN(test_cuda_round_trip);
    RUN(test_cuda_switch_100m);
    CHECK_EXIT();
}
