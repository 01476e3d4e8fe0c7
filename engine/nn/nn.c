/* nn.c - the model: shape inference, parameter and activation arenas, containers, whole-model passes */
#include "engine/nn/nn.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/error.h"
#include "engine/base/rng.h"
#include "engine/nn/layer_impl.h"

#define ALIGN_BYTES 64
#define ALIGN_FLOATS 16

struct dl_model {
    dl_layer *root;
    dl_shape input, output;
    int nlayers;
    /* parameters and buffers (registered by setup) */
    dl_param **params;
    int nparams, cap_params;
    size_t pcount, bcount;
    dl_buffer *buffers;
    int nbuffers, cap_buffers;
    /* state arena */
    dl_storage *state;
    int moments;
    size_t P, B; /* padded float counts */
    /* activation arena */
    dl_storage *act;
    size_t reserved[2];
    int planned_n;
    size_t x_off, y_off, dy_off;
    /* the convolution scratch all layers share (they run one at a time),
     * on the state's backend, sized by that backend for the planned batch
     * and precision, grown when a pass needs more */
    dl_storage *ws;
    size_t ws_need;
    dl_precision prec;
    /* what the layout plan was made for (layout_blk -1: none yet) */
    const dl_backend *layout_be;
    const dl_backend_ops *layout_ops;
    dl_dtype layout_compute;
    int layout_blk;
};

const char *dl_precision_name(dl_precision p)
{
    switch (p) {
    case DL_PREC_BF16: return "bf16";
    case DL_PREC_F16: return "fp16";
    default: return "fp32";
    }
}

int dl_precision_parse(const char *name)
{
    if (!strcmp(name, "fp32") || !strcmp(name, "f32"))
        return DL_PREC_F32;
    if (!strcmp(name, "bf16"))
        return DL_PREC_BF16;
    if (!strcmp(name, "fp16") || !strcmp(name, "f16"))
        return DL_PREC_F16;
    return -1;
}

const char *dl_loss_name(dl_loss_kind k)
{
    switch (k) {
    case DL_LOSS_MSE: return "MSE";
    case DL_LOSS_BCE: return "BCEWithLogits";
    default: return "CrossEntropy";
    }
}

/* --- layers in general -------------------------------------------------- */

void dl_layer_destroy(dl_layer *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->nchild; i++)
        dl_layer_destroy(l->child[i]);
    free(l->child);
    if (l->vt->destroy)
        l->vt->destroy(l);
    free(l);
}

int dl_layer_note(const dl_layer *l, char *buf, size_t size)
{
    if (size)
        buf[0] = '\0';
    return l->vt->note ? l->vt->note(l, buf, size) : 0;
}

void dl_layer_describe(const dl_layer *l, char *buf, size_t size)
{
    if (l->vt->describe)
        l->vt->describe(l, buf, size);
    else
        snprintf(buf, size, "%s()", l->vt->kind);
}

void dl_layer_get_config(const dl_layer *l, dl_layer_config *c)
{
    memset(c, 0, sizeof *c);
    if (l->vt->config)
        l->vt->config(l, c);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Whether a container runs child l fused with prev, the child before it,
 * through the layer table's fused slots: 0, DL_FUSE_SET or DL_FUSE_ADD. */
static int fuses(const dl_layer *l, const dl_layer *prev, const dl_pass *p)
{
    return l->vt->fuses ? l->vt->fuses(l, prev, p) : 0;
}

/* absorbs[i] = 1 where child i runs fused with child i - 1 on this pass:
 * pairs taken left to right, none in two pairs, and the absorbed child
 * the first only when the pair's backward can add (its input gradient is
 * the caller's, which may have to be added to). Forward and backward both
 * read this, so they pair alike whatever the chain. */
static void fused_pairs(const dl_layer *l, const dl_pass *p, char *absorbs)
{
    memset(absorbs, 0, (size_t)l->nchild);
    for (int i = 0; i + 1 < l->nchild; i++) {
        int f = fuses(l->child[i + 1], l->child[i], p);
        if (f == DL_FUSE_ADD || (f && i > 0))
            absorbs[++i] = 1;
    }
}

/* How a container runs a child's backward: adding into dx (the layer
 * contract), writing a dx nothing else writes (backward_set, or zeroing
 * dx first), or as the second half of a fused pair (ReLU -> MaxPool2d),
 * writing dx or adding into it. */
enum { RUN_ADD, RUN_SET, RUN_FUSED, RUN_FUSED_ADD };

/* prev: the child absorbed into c (fused), else NULL */
static int call_forward(dl_layer *c, dl_layer *prev, dl_pass *p, const float *x, float *y)
{
    return prev ? c->vt->forward_fused(c, prev, p, x, y) : c->vt->forward(c, p, x, y);
}

static int call_backward(dl_layer *c, dl_layer *prev, dl_pass *p, const float *x, const float *y,
                         const float *dy, float *dx, float *mid, int mode)
{
    if (mode == RUN_FUSED || mode == RUN_FUSED_ADD)
        return c->vt->backward_fused(c, prev, p, x, y, dy, dx, mid, mode == RUN_FUSED_ADD);
    if (mode == RUN_SET && dx) {
        if (c->vt->backward_set)
            return c->vt->backward_set(c, p, x, y, dy, dx);
        DL_TRY(p->be->ops->memset0(p->be, dx,
                                   (size_t)p->n * (size_t)dl_shape_numel(&c->in) * sizeof(float)));
    }
    return c->vt->backward(c, p, x, y, dy, dx);
}

/* The layer a fused pair's time shows under: the container when the
 * absorbed layer is one (its children's rows are timed inside it, and its
 * self time is what is left: Residual -> ReLU), else the absorbing layer. */
static dl_layer *timed_as(dl_layer *c, dl_layer *prev) { return prev && prev->nchild ? prev : c; }

/* Runs a child's forward or backward, timing it when profiling. */
static int child_forward(dl_layer *c, dl_layer *prev, dl_pass *p, const float *x, float *y)
{
    if (!p->profile)
        return call_forward(c, prev, p, x, y);
    dl_layer *t = timed_as(c, prev);
    p->be->ops->sync(p->be);
    double t0 = now_ms();
    int rc = call_forward(c, prev, p, x, y);
    p->be->ops->sync(p->be);
    double t1 = now_ms();
    t->prof.fwd_ms += t1 - t0;
    t->prof.calls++;
    if (p->prof_hook)
        p->prof_hook(p->prof_user, t, 0, p->n, t0, t1);
    return rc;
}

static int child_backward(dl_layer *c, dl_layer *prev, dl_pass *p, const float *x, const float *y,
                          const float *dy, float *dx, float *mid, int mode)
{
    if (!p->profile) {
        int rc = call_backward(c, prev, p, x, y, dy, dx, mid, mode);
        return rc == DL_OK && p->grad_hook ? p->grad_hook(p->grad_user, c) : rc;
    }
    dl_layer *t = timed_as(c, prev);
    p->be->ops->sync(p->be);
    double t0 = now_ms();
    int rc = call_backward(c, prev, p, x, y, dy, dx, mid, mode);
    p->be->ops->sync(p->be);
    double t1 = now_ms();
    t->prof.bwd_ms += t1 - t0;
    if (p->prof_hook)
        p->prof_hook(p->prof_user, t, 1, p->n, t0, t1);
    if (rc == DL_OK && p->grad_hook)
        rc = p->grad_hook(p->grad_user, c);
    return rc;
}

static int add_child(dl_layer *l, dl_layer *c)
{
    dl_layer **grown = realloc(l->child, (size_t)(l->nchild + 1) * sizeof *grown);
    if (!grown)
        return dl_error(DL_ENOMEM, "out of memory adding a layer");
    l->child = grown;
    l->child[l->nchild++] = c;
    return DL_OK;
}

/* --- Sequential ------------------------------------------------------------ */

typedef struct {
    dl_layer base;
    size_t *y_off, *dy_off; /* outputs of children 0..n-2 */
    char *params_before;    /* child i has a parameter somewhere before it */
    char *absorbs;          /* fused_pairs of the pass in flight */
    char *x_rounded;        /* child i's input was written rounded by the forward in flight */
} sequential;

static int seq_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    sequential *s = (sequential *)l;
    dl_shape cur = *in;
    s->y_off = calloc((size_t)l->nchild + 1, sizeof *s->y_off);
    s->dy_off = calloc((size_t)l->nchild + 1, sizeof *s->dy_off);
    s->params_before = calloc((size_t)l->nchild + 1, 1);
    s->absorbs = calloc((size_t)l->nchild + 1, 1);
    s->x_rounded = calloc((size_t)l->nchild + 1, 1);
    if (!s->y_off || !s->dy_off || !s->params_before || !s->absorbs || !s->x_rounded)
        return dl_error(DL_ENOMEM, "out of memory");
    int params_at_start = dl_model_num_params(m);
    for (int i = 0; i < l->nchild; i++) {
        dl_layer *c = l->child[i];
        s->params_before[i] = dl_model_num_params(m) > params_at_start;
        dl_shape next = {0};
        int rc = c->vt->setup(c, m, &cur, &next);
        if (rc < 0) {
            char msg[1024], prev[128] = "the model input", shp[64];
            snprintf(msg, sizeof msg, "%s", dl_error_message());
            if (i > 0) {
                char d[96];
                dl_layer_describe(l->child[i - 1], d, sizeof d);
                snprintf(prev, sizeof prev, "%s", d);
            }
            return dl_error(rc, "layer %s (#%d) after %s, which outputs %s: %s", c->name, c->id,
                            prev, dl_shape_format(&cur, shp, sizeof shp), msg);
        }
        c->in = cur;
        c->out = next;
        cur = next;
        l->flops += c->flops;
    }
    *out = cur;
    return DL_OK;
}

static int seq_plan(dl_layer *l, dl_model *m, int n)
{
    sequential *s = (sequential *)l;
    for (int i = 0; i < l->nchild; i++) {
        dl_layer *c = l->child[i];
        if (i < l->nchild - 1) {
            size_t bytes = (size_t)n * (size_t)dl_shape_numel(&c->out) * sizeof(float);
            s->y_off[i] = dl_model_reserve(m, 0, bytes);
            s->dy_off[i] = dl_model_reserve(m, 1, bytes);
        }
        DL_TRY(c->vt->plan(c, m, n));
    }
    return DL_OK;
}

/* c's DL_CONV_*_ROUNDED bits (dl_layer_vt.reads_rounded). */
static int reads_rounded(const dl_layer *c, const dl_pass *p)
{
    return c->vt->reads_rounded ? c->vt->reads_rounded(c, p) : 0;
}

static int seq_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    sequential *s = (sequential *)l;
    if (l->nchild == 0)
        return p->be->ops->copy(p->be, y, x,
                                (size_t)p->n * (size_t)dl_shape_numel(&l->in) * sizeof(float));
    const float *in = x;
    fused_pairs(l, p, s->absorbs);
    memset(s->x_rounded, 0, (size_t)l->nchild);
    for (int i = 0; i < l->nchild; i++) {
        /* a pair (ReLU -> MaxPool2d, BatchNorm -> ReLU): the second reads
         * the first's input */
        int fused = i + 1 < l->nchild && s->absorbs[i + 1];
        i += fused;
        float *out = i == l->nchild - 1 ? y : (float *)(p->act + s->y_off[i]);
        /* an output only the next child reads, which reads it rounded
         * (an emulated convolution): written rounded where the child, a
         * leaf (a container's inner calls must not see the request), can */
        int leaf = l->child[i]->nchild == 0 && (!fused || l->child[i - 1]->nchild == 0);
        int next = leaf && i + 1 < l->nchild ? reads_rounded(l->child[i + 1], p) : 0;
        p->round_out = next & DL_CONV_X_ROUNDED ? p->compute : DL_F32;
        p->operands_rounded = s->x_rounded[i - fused] ? DL_CONV_X_ROUNDED : 0;
        p->rounded = 0;
        int rc = child_forward(l->child[i], fused ? l->child[i - 1] : NULL, p, in, out);
        if (next)
            s->x_rounded[i + 1] = (char)p->rounded;
        p->round_out = DL_F32;
        p->operands_rounded = p->rounded = 0;
        DL_TRY(rc);
        in = out;
    }
    return DL_OK;
}

/* The first child adds into dx (RUN_ADD) or writes it (RUN_SET: the
 * container's own dx has no other writer either). */
static int seq_grads(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                     float *dx, int first_mode)
{
    sequential *s = (sequential *)l;
    size_t count = (size_t)p->n * (size_t)dl_shape_numel(&l->in);
    if (l->nchild == 0 && dx && first_mode == RUN_SET)
        return p->be->ops->copy(p->be, dx, dy, count * sizeof(float));
    if (l->nchild == 0)
        return dx ? p->be->ops->axpy(p->be, dx, 1.0f, dy, count) : DL_OK;
    fused_pairs(l, p, s->absorbs);
    int dy_rounded = 0; /* child i's output gradient was written rounded */
    for (int i = l->nchild - 1; i >= 0; i--) {
        /* as in forward: child i - 1 fused into child i */
        int fused = s->absorbs[i];
        int first = i - fused; /* the child whose input gradient this computes */
        const float *in = first == 0 ? x : (const float *)(p->act + s->y_off[first - 1]);
        const float *out = i == l->nchild - 1 ? y : (const float *)(p->act + s->y_off[i]);
        const float *dout = i == l->nchild - 1 ? dy : (const float *)(p->act_grad + s->dy_off[i]);
        /* an input gradient nobody reads is not computed: in Flatten ->
         * Linear, the Linear skips its dx product entirely. The buffers
         * of this container have one writer each, which overwrites them;
         * the caller's dx is added to. */
        float *din = first == 0                      ? dx
                     : dx || s->params_before[first] ? (float *)(p->act_grad + s->dy_off[first - 1])
                                                     : NULL;
        int mode = first > 0 ? (fused ? RUN_FUSED : RUN_SET)
                   : fused   ? (first_mode == RUN_ADD ? RUN_FUSED_ADD : RUN_FUSED)
                             : first_mode;
        /* a fused pair leaves the gradient buffer between its two alone */
        float *mid = fused ? (float *)(p->act_grad + s->dy_off[first]) : NULL;
        /* the gradient written for the child before, which reads it
         * rounded: written so where this child can */
        int leaf = l->child[i]->nchild == 0 && l->child[first]->nchild == 0;
        int prev = leaf && first > 0 && din && (mode == RUN_SET || mode == RUN_FUSED)
                       ? reads_rounded(l->child[first - 1], p)
                       : 0;
        p->round_out = prev & DL_CONV_DY_ROUNDED ? p->compute : DL_F32;
        p->operands_rounded =
            (s->x_rounded[first] ? DL_CONV_X_ROUNDED : 0) | (dy_rounded ? DL_CONV_DY_ROUNDED : 0);
        p->rounded = 0;
        int rc = child_backward(l->child[i], fused ? l->child[first] : NULL, p, in, out, dout, din,
                                mid, mode);
        dy_rounded = prev && p->rounded;
        p->round_out = DL_F32;
        p->operands_rounded = p->rounded = 0;
        DL_TRY(rc);
        if (fused && p->grad_hook)
            DL_TRY(p->grad_hook(p->grad_user, l->child[first]));
        i = first;
    }
    return DL_OK;
}

static int seq_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                        float *dx)
{
    return seq_grads(l, p, x, y, dy, dx, RUN_ADD);
}

static int seq_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y,
                            const float *dy, float *dx)
{
    return seq_grads(l, p, x, y, dy, dx, RUN_SET);
}

static void seq_destroy(dl_layer *l)
{
    sequential *s = (sequential *)l;
    free(s->y_off);
    free(s->dy_off);
    free(s->params_before);
    free(s->absorbs);
    free(s->x_rounded);
}

static void seq_describe(const dl_layer *l, char *buf, size_t size)
{
    snprintf(buf, size, "Sequential(%d layers)", l->nchild);
}

static const dl_layer_vt sequential_vt = {
    .kind = "Sequential",
    .setup = seq_setup,
    .plan = seq_plan,
    .forward = seq_forward,
    .backward = seq_backward,
    .backward_set = seq_backward_set,
    .destroy = seq_destroy,
    .describe = seq_describe,
};

dl_layer *dl_nn_sequential(void)
{
    sequential *s = calloc(1, sizeof *s);
    if (!s) {
        dl_error(DL_ENOMEM, "out of memory");
        return NULL;
    }
    s->base.vt = &sequential_vt;
    return &s->base;
}

int dl_nn_sequential_add(dl_layer *seq, dl_layer *child)
{
    if (seq->vt != &sequential_vt)
        return dl_error(DL_EINVAL, "%s is not a Sequential container", seq->vt->kind);
    if (seq->model)
        return dl_error(DL_EINVAL, "cannot add layers to a Sequential already in a model");
    return add_child(seq, child);
}

/* --- Residual ------------------------------------------------------------- */
/* y = block(x) + shortcut(x): child 0 is the block, child 1 the shortcut
 * when there is one (else the identity: y = x + block(x)). Both branches
 * read the same x; their input gradients both add into dx. */

typedef struct {
    dl_layer base;
    size_t yb_off, ys_off; /* the block's and the shortcut's outputs */
} residual;

static dl_layer *shortcut_of(const dl_layer *l) { return l->nchild > 1 ? l->child[1] : NULL; }

static int setup_child(dl_layer *c, dl_model *m, const dl_shape *in, dl_shape *out)
{
    DL_TRY(c->vt->setup(c, m, in, out));
    c->in = *in;
    c->out = *out;
    return DL_OK;
}

static int same_shape(const dl_shape *a, const dl_shape *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i])
            return 0;
    return 1;
}

static int res_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    dl_layer *b = l->child[0], *sc = shortcut_of(l);
    dl_shape bo = {0}, so = *in;
    DL_TRY(setup_child(b, m, in, &bo));
    if (sc)
        DL_TRY(setup_child(sc, m, in, &so));
    if (!same_shape(&bo, &so)) {
        char a[64], c[64], which[96] = "the identity shortcut";
        if (sc)
            snprintf(which, sizeof which, "shortcut %s", sc->name);
        return dl_error(DL_ESHAPE, "nn.Residual %s: block %s gives %s but %s gives %s", l->name,
                        b->name, dl_shape_format(&bo, a, sizeof a), which,
                        dl_shape_format(&so, c, sizeof c));
    }
    l->flops = b->flops + (sc ? sc->flops : 0) + (double)dl_shape_numel(&bo);
    *out = bo;
    return DL_OK;
}

static int res_plan(dl_layer *l, dl_model *m, int n)
{
    residual *r = (residual *)l;
    size_t bytes = (size_t)n * (size_t)dl_shape_numel(&l->out) * sizeof(float);
    r->yb_off = dl_model_reserve(m, 0, bytes);
    if (shortcut_of(l)) {
        r->ys_off = dl_model_reserve(m, 0, bytes);
        DL_TRY(shortcut_of(l)->vt->plan(shortcut_of(l), m, n));
    }
    return l->child[0]->vt->plan(l->child[0], m, n);
}

/* y = block(x) + shortcut(x), or relu of it (the ReLU after the Residual
 * absorbed: the sum is never written). */
static int res_run(dl_layer *l, dl_pass *p, const float *x, float *y, int relu)
{
    residual *r = (residual *)l;
    size_t count = (size_t)p->n * (size_t)dl_shape_numel(&l->out);
    float *yb = (float *)(p->act + r->yb_off);
    DL_TRY(child_forward(l->child[0], NULL, p, x, yb));
    dl_layer *sc = shortcut_of(l);
    const float *other = x;
    if (sc) {
        float *ys = (float *)(p->act + r->ys_off);
        DL_TRY(child_forward(sc, NULL, p, x, ys));
        other = ys;
    }
    return relu ? p->be->ops->add_relu_forward(p->be, y, other, yb, count)
                : p->be->ops->add(p->be, y, other, yb, count);
}

static int res_forward(dl_layer *l, dl_pass *p, const float *x, float *y)
{
    return res_run(l, p, x, y, 0);
}

/* dx += block'(x)^T dy: the block's share, always added (after the
 * shortcut's). */
static int res_block_grads(dl_layer *l, dl_pass *p, const float *x, const float *dy, float *dx)
{
    residual *r = (residual *)l;
    return child_backward(l->child[0], NULL, p, x, (const float *)(p->act + r->yb_off), dy, dx,
                          NULL, RUN_ADD);
}

/* dx (+)= shortcut'(x)^T dy + block'(x)^T dy; the shortcut's share is
 * added (RUN_ADD) or written (RUN_SET), the block's always added. */
static int res_grads(dl_layer *l, dl_pass *p, const float *x, const float *dy, float *dx, int mode)
{
    residual *r = (residual *)l;
    size_t count = (size_t)p->n * (size_t)dl_shape_numel(&l->in);
    dl_layer *sc = shortcut_of(l);
    if (sc)
        DL_TRY(child_backward(sc, NULL, p, x, (const float *)(p->act + r->ys_off), dy, dx, NULL,
                              mode));
    else if (dx && mode == RUN_SET)
        DL_TRY(p->be->ops->copy(p->be, dx, dy, count * sizeof(float)));
    else if (dx)
        DL_TRY(p->be->ops->axpy(p->be, dx, 1.0f, dy, count));
    return res_block_grads(l, p, x, dy, dx);
}

static int res_backward(dl_layer *l, dl_pass *p, const float *x, const float *y, const float *dy,
                        float *dx)
{
    return res_grads(l, p, x, dy, dx, RUN_ADD);
}

static const dl_layer_vt residual_vt;

int dl_residual_relu_fuses(const dl_layer *res, const dl_pass *p)
{
    return res->vt == &residual_vt && p->be->ops->add_relu_forward &&
                   p->be->ops->add_relu_backward_set
               ? DL_FUSE_ADD
               : 0;
}

int dl_residual_relu_forward(dl_layer *res, dl_pass *p, const float *x, float *y)
{
    return res_run(res, p, x, y, 1);
}

/* g, the gradient of the sum, is written into mid; when dx is written
 * and the shortcut is the identity, the same op also writes g into dx,
 * the shortcut's share, so the copy res_grads would make is not a pass
 * of its own. Then the branches as in res_grads. */
int dl_residual_relu_backward(dl_layer *res, dl_pass *p, const float *x, const float *y,
                              const float *dy, float *dx, float *mid, int add)
{
    size_t count = (size_t)p->n * (size_t)dl_shape_numel(&res->out);
    if (add || shortcut_of(res)) {
        DL_TRY(p->be->ops->add_relu_backward_set(p->be, mid, NULL, y, dy, count));
        return res_grads(res, p, x, mid, dx, add ? RUN_ADD : RUN_SET);
    }
    DL_TRY(p->be->ops->add_relu_backward_set(p->be, mid, dx, y, dy, count));
    return res_block_grads(res, p, x, mid, dx);
}

static int res_backward_set(dl_layer *l, dl_pass *p, const float *x, const float *y,
                            const float *dy, float *dx)
{
    return res_grads(l, p, x, dy, dx, RUN_SET);
}

static void res_describe(const dl_layer *l, char *buf, size_t size)
{
    char inner[96], sc[96];
    dl_layer_describe(l->child[0], inner, sizeof inner);
    if (!shortcut_of(l)) {
        snprintf(buf, size, "Residual(%s)", inner);
        return;
    }
    dl_layer_describe(shortcut_of(l), sc, sizeof sc);
    snprintf(buf, size, "Residual(%s, shortcut=%s)", inner, sc);
}

static const dl_layer_vt residual_vt = {
    .kind = "Residual",
    .setup = res_setup,
    .plan = res_plan,
    .forward = res_forward,
    .backward = res_backward,
    .describe = res_describe,
    .backward_set = res_backward_set,
};

dl_layer *dl_nn_residual_shortcut(dl_layer *block, dl_layer *shortcut)
{
    if (!block) {
        dl_error(DL_EINVAL, "Residual needs a block");
        return NULL;
    }
    if (block == shortcut) {
        dl_error(DL_EINVAL, "Residual: the block and the shortcut must be different layers");
        return NULL;
    }
    residual *r = calloc(1, sizeof *r);
    if (!r) {
        dl_error(DL_ENOMEM, "out of memory");
        return NULL;
    }
    r->base.vt = &residual_vt;
    if (add_child(&r->base, block) < 0 || (shortcut && add_child(&r->base, shortcut) < 0)) {
        free(r->base.child); /* the caller keeps block and shortcut */
        free(r);
        return NULL;
    }
    return &r->base;
}

dl_layer *dl_nn_residual(dl_layer *block) { return dl_nn_residual_shortcut(block, NULL); }

/* --- the model -------------------------------------------------------------- */

static void assign_ids(dl_layer *l, dl_model *m)
{
    l->id = m->nlayers++;
    l->model = m;
    if (!l->name[0])
        snprintf(l->name, sizeof l->name, "%s%d", l->vt->kind, l->id);
    for (int i = 0; i < l->nchild; i++)
        assign_ids(l->child[i], m);
}

int dl_model_create(dl_model **out, dl_layer *root, const dl_shape *input)
{
    *out = NULL;
    if (!root)
        return dl_error(DL_EINVAL, "model has no layers");
    if (root->model) {
        return dl_error(DL_EINVAL, "layer %s already belongs to a model", root->name);
    }
    dl_model *m = calloc(1, sizeof *m);
    if (!m) {
        dl_layer_destroy(root);
        return dl_error(DL_ENOMEM, "out of memory");
    }
    m->root = root;
    m->input = *input;
    m->layout_blk = -1;
    assign_ids(root, m);
    dl_shape o = {0};
    int rc = root->vt->setup(root, m, input, &o);
    if (rc < 0) {
        dl_model_destroy(m);
        return rc;
    }
    root->in = *input;
    root->out = o;
    m->output = o;
    *out = m;
    return DL_OK;
}

void dl_model_destroy(dl_model *m)
{
    if (!m)
        return;
    dl_layer_destroy(m->root);
    for (int i = 0; i < m->nparams; i++)
        free(m->params[i]);
    free(m->params);
    free(m->buffers);
    dl_storage_release(m->state);
    dl_storage_release(m->act);
    dl_storage_release(m->ws);
    free(m);
}

size_t dl_model_add_param(dl_model *m, dl_layer *l, const char *name, const dl_shape *shape,
                          dl_init init, float init_scale, int decay)
{
    if (m->nparams == m->cap_params) {
        int cap = m->cap_params ? m->cap_params * 2 : 16;
        dl_param **grown = realloc(m->params, (size_t)cap * sizeof *grown);
        DL_ASSERT(grown);
        m->params = grown;
        m->cap_params = cap;
    }
    dl_param *p = calloc(1, sizeof *p);
    DL_ASSERT(p);
    p->layer = l;
    snprintf(p->name, sizeof p->name, "%s.%s", l->name, name);
    p->shape = *shape;
    p->count = (size_t)dl_shape_numel(shape);
    p->offset = m->pcount;
    p->init = init;
    p->init_scale = init_scale;
    p->decay = decay;
    /* pad each parameter to 64 bytes so vector kernels start aligned */
    m->pcount += (p->count + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    m->params[m->nparams++] = p;
    return p->offset;
}

size_t dl_model_add_buffer(dl_model *m, dl_layer *l, const char *name, const dl_shape *shape,
                           float value)
{
    if (m->nbuffers == m->cap_buffers) {
        int cap = m->cap_buffers ? m->cap_buffers * 2 : 8;
        dl_buffer *grown = realloc(m->buffers, (size_t)cap * sizeof *grown);
        DL_ASSERT(grown);
        m->buffers = grown;
        m->cap_buffers = cap;
    }
    dl_buffer *b = &m->buffers[m->nbuffers++];
    memset(b, 0, sizeof *b);
    b->layer = l;
    snprintf(b->name, sizeof b->name, "%s.%s", l->name, name);
    b->shape = *shape;
    b->count = (size_t)dl_shape_numel(shape);
    b->offset = m->bcount;
    b->value = value;
    m->bcount += (b->count + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    return b->offset;
}

size_t dl_model_reserve(dl_model *m, int region, size_t bytes)
{
    DL_ASSERT(region == 0 || region == 1);
    size_t off = m->reserved[region];
    m->reserved[region] += (bytes + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
    return off;
}

void dl_model_need_workspace(dl_model *m, size_t bytes)
{
    if (bytes > m->ws_need)
        m->ws_need = bytes;
}

void dl_model_set_precision(dl_model *m, dl_precision p) { m->prec = p; }

dl_dtype dl_model_compute(const dl_model *m)
{
    return m->prec == DL_PREC_BF16 ? DL_BF16 : m->prec == DL_PREC_F16 ? DL_F16 : DL_F32;
}

/* The shared workspace holds ws_need bytes on the state's backend; one it
 * has on another backend is released first (its contents never matter
 * between ops). */
static int fit_workspace(dl_model *m)
{
    dl_backend *be = m->state->be;
    if (m->ws && (m->ws->be != be || m->ws->bytes < m->ws_need)) {
        dl_storage_release(m->ws);
        m->ws = NULL;
    }
    if (m->ws || m->ws_need == 0)
        return DL_OK;
    m->ws = dl_storage_create(be, m->ws_need);
    return m->ws ? DL_OK : DL_ENOMEM;
}

int dl_model_workspace(dl_model *m, size_t bytes, void **ws, size_t *size)
{
    dl_model_need_workspace(m, bytes);
    DL_TRY(fit_workspace(m));
    *ws = m->ws ? m->ws->ptr : NULL;
    *size = m->ws ? m->ws->bytes : 0;
    return DL_OK;
}

size_t dl_model_workspace_bytes(const dl_model *m) { return m->ws ? m->ws->bytes : 0; }

static int replan(dl_model *m);

/* Float offsets of the regions in the state arena. */
static size_t region_grads(const dl_model *m) { return m->P; }
static size_t region_m1(const dl_model *m) { return 2 * m->P; }
static size_t region_m2(const dl_model *m) { return 3 * m->P; }
static size_t region_buffers(const dl_model *m) { return (size_t)(2 + m->moments) * m->P; }
static size_t region_lp_bytes(const dl_model *m)
{
    return (region_buffers(m) + m->B) * sizeof(float);
}
/* Bytes per element of the low-precision copy on be: 4 where be emulates
 * either low precision (the copy is then rounded f32), else 2. */
static size_t lp_size(const dl_backend *be)
{
    return dl_backend_operand_type(be, DL_BF16) == DL_F32 ||
                   dl_backend_operand_type(be, DL_F16) == DL_F32
               ? sizeof(float)
               : sizeof(uint16_t);
}

int dl_model_init_state(dl_model *m, dl_backend *be, int moments, uint64_t seed)
{
    if (moments < 0 || moments > 2)
        return dl_error(DL_EINVAL, "optimizer moments must be 0, 1 or 2, not %d", moments);
    dl_storage_release(m->state);
    m->state = NULL;
    m->moments = moments;
    m->P = (m->pcount + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    m->B = (m->bcount + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
    /* [params | grads | moments | buffers] + the low-precision copy: the
     * byte count must not wrap (Linear(2e9, 2e9) has 4e18 parameters) */
    if (m->P > (SIZE_MAX / 32 - m->B) / 5)
        return dl_error(DL_ENOMEM, "%zu parameters: more than any machine's memory", m->pcount);
    size_t bytes = region_lp_bytes(m) + m->P * lp_size(be);
    /* the arena first: a model too big for the device fails before the
     * host has filled gigabytes of initial values */
    m->state = dl_storage_create(be, bytes);
    if (!m->state)
        return DL_ENOMEM;
    /* initial values on the host, then one upload */
    size_t host_floats = m->P + m->B;
    float *host = calloc(host_floats ? host_floats : 1, sizeof *host);
    if (!host) {
        dl_storage_release(m->state);
        m->state = NULL;
        return dl_error(DL_ENOMEM, "out of host memory initialising %zu parameters", m->P);
    }
    for (int i = 0; i < m->nparams; i++) {
        const dl_param *p = m->params[i];
        float *w = host + p->offset;
        for (size_t k = 0; k < p->count; k++) {
            switch (p->init) {
            case DL_INIT_ZERO: w[k] = 0; break;
            case DL_INIT_ONE: w[k] = 1; break;
            case DL_INIT_UNIFORM_FAN_IN:
                w[k] = p->init_scale *
                       (2.0f * dl_rng_uniform(seed, DL_STREAM_INIT + (uint64_t)i, 0, k) - 1.0f);
                break;
            case DL_INIT_NORMAL:
                w[k] = p->init_scale * dl_rng_normal(seed, DL_STREAM_INIT + (uint64_t)i, 0, k);
                break;
            }
        }
    }
    for (int i = 0; i < m->nbuffers; i++)
        for (size_t k = 0; k < m->buffers[i].count; k++)
            host[m->P + m->buffers[i].offset + k] = m->buffers[i].value;
    int rc = be->ops->to_device(be, m->state->ptr, host, m->P * sizeof(float));
    if (rc == DL_OK && m->B)
        rc = be->ops->to_device(be, (float *)m->state->ptr + region_buffers(m), host + m->P,
                                m->B * sizeof(float));
    free(host);
    if (rc < 0) {
        dl_storage_release(m->state);
        m->state = NULL;
        return rc;
    }
    /* activations move with the state */
    if (m->act && m->act->be != be) {
        DL_TRY(dl_storage_move(m->act, be));
        DL_TRY(replan(m));
    }
    return DL_OK;
}

int dl_model_plan(dl_model *m, int n)
{
    if (!m->state)
        return dl_error(DL_EINVAL, "model state not initialised before planning");
    if (n < 1)
        return dl_error(DL_EINVAL, "batch size %d must be at least 1", n);
    if (m->act && m->planned_n == n)
        return DL_OK;
    m->reserved[0] = m->reserved[1] = 0;
    m->ws_need = 0;
    size_t in_bytes = (size_t)n * (size_t)dl_shape_numel(&m->input) * sizeof(float);
    size_t out_bytes = (size_t)n * (size_t)dl_shape_numel(&m->output) * sizeof(float);
    m->x_off = dl_model_reserve(m, 0, in_bytes);
    m->y_off = dl_model_reserve(m, 0, out_bytes);
    m->dy_off = dl_model_reserve(m, 1, out_bytes);
    DL_TRY(m->root->vt->plan(m->root, m, n));
    dl_storage *act = dl_storage_create(m->state->be, m->reserved[0] + m->reserved[1]);
    if (!act)
        return DL_ENOMEM;
    dl_storage_release(m->act);
    m->act = act;
    m->planned_n = n;
    return fit_workspace(m);
}

/* After a move: the layers plan again on the new backend, which sizes the
 * shared workspace for itself (the activation layout does not change). */
static int replan(dl_model *m)
{
    size_t keep[2] = {m->reserved[0], m->reserved[1]};
    m->reserved[0] = m->reserved[1] = 0;
    m->ws_need = 0;
    size_t in_bytes = (size_t)m->planned_n * (size_t)dl_shape_numel(&m->input) * sizeof(float);
    size_t out_bytes = (size_t)m->planned_n * (size_t)dl_shape_numel(&m->output) * sizeof(float);
    dl_model_reserve(m, 0, in_bytes);
    dl_model_reserve(m, 0, out_bytes);
    dl_model_reserve(m, 1, out_bytes);
    int rc = m->root->vt->plan(m->root, m, m->planned_n);
    DL_ASSERT(rc < 0 || (m->reserved[0] == keep[0] && m->reserved[1] == keep[1]));
    m->reserved[0] = keep[0];
    m->reserved[1] = keep[1];
    return rc < 0 ? rc : fit_workspace(m);
}

/* The state arena onto be, its low-precision copy sized for be and,
 * where the type it is kept in changes with the backend, written again. */
static int move_state(dl_model *m, dl_backend *be)
{
    dl_dtype t = dl_model_compute(m);
    int retype = dl_backend_operand_type(m->state->be, t) != dl_backend_operand_type(be, t);
    DL_TRY(dl_storage_move_resize(m->state, be, region_lp_bytes(m) + m->P * lp_size(be)));
    return retype ? dl_model_refresh_lowp(m, t) : DL_OK;
}

int dl_model_move(dl_model *m, dl_backend *be)
{
    if (!m->state)
        return dl_error(DL_EINVAL, "model state not initialised");
    dl_backend *old = m->state->be;
    DL_TRY(move_state(m, be));
    if (!m->act)
        return DL_OK;
    int rc = dl_storage_move(m->act, be);
    if (rc == DL_OK)
        rc = replan(m);
    if (rc < 0) {
        /* keep everything on one backend: the old one, planned as before */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dl_error_message());
        if (m->act->be != old)
            dl_storage_move(m->act, old);
        move_state(m, old);
        (void)replan(m); /* a workspace not retaken now is taken by the next pass */
        return dl_error(rc, "%s", msg);
    }
    return DL_OK;
}

dl_backend *dl_model_backend(const dl_model *m) { return m->state ? m->state->be : NULL; }

void dl_model_pass(dl_model *m, dl_pass *p, int n, int training, dl_precision prec, uint64_t seed,
                   uint64_t counter)
{
    memset(p, 0, sizeof *p);
    p->be = m->state->be;
    float *base = m->state->ptr;
    p->params = base;
    p->grads = base + region_grads(m);
    p->buffers = base + region_buffers(m);
    p->params_lp = (char *)m->state->ptr + region_lp_bytes(m);
    p->act = m->act ? m->act->ptr : NULL;
    p->act_grad = m->act ? (char *)m->act->ptr + m->reserved[0] : NULL;
    p->n = n;
    p->training = training;
    p->compute = prec == DL_PREC_BF16 ? DL_BF16 : prec == DL_PREC_F16 ? DL_F16 : DL_F32;
    p->operand = dl_backend_operand_type(p->be, p->compute);
    p->seed = seed;
    p->counter = counter;
}

float *dl_model_input(dl_model *m) { return (float *)((char *)m->act->ptr + m->x_off); }
float *dl_model_output(dl_model *m) { return (float *)((char *)m->act->ptr + m->y_off); }
float *dl_model_output_grad(dl_model *m)
{
    return (float *)((char *)m->act->ptr + m->reserved[0] + m->dy_off);
}

/* --- the layout plan ----------------------------------------------------------
 * A backend whose convolutions run in channel blocks (oneDNN's nChw16c on
 * the CPU) reorders each chunk of a convolution's input into them and its
 * output back; at one thread on the ResNet that was a fifth of the step.
 * So activations stay in the blocks between layers that can take them.
 * Each layer has an input and an output port; a container joins its
 * children's ports into the edges data flows over (a Sequential's output
 * to the next child's input, a Residual's input to both branches', its
 * output to both branches' outputs or, for the identity shortcut, to its
 * input), and an elementwise layer (BatchNorm, the activations) joins its
 * own two. Union-find gives the classes of ports that must share one
 * layout. A class is blocked when every port in it may be (the layers'
 * blocks hook: Conv2d where the backend's conv_blocks says so, the
 * elementwise layers on [c, h, w] with c a multiple of the block,
 * AdaptiveAvgPool2d's input for a 1x1 output) and a convolution is in it
 * (otherwise nothing is saved); the model's input and output are plain,
 * as is everything inside a container this plan does not know. */

typedef struct lplan {
    const dl_pass *p;
    int blk;
    int *parent;         /* [2 * layers] ports: in 2 * id, out 2 * id + 1 */
    unsigned char *flag; /* LP_* of the port (of its class, at the root) */
} lplan;

enum { LP_PLAIN = 1, LP_CONV = 2 };

static int lp_find(lplan *lp, int a)
{
    while (lp->parent[a] != a)
        a = lp->parent[a] = lp->parent[lp->parent[a]];
    return a;
}

static void lp_join(lplan *lp, int a, int b)
{
    a = lp_find(lp, a), b = lp_find(lp, b);
    if (a != b) {
        lp->parent[b] = a;
        lp->flag[a] |= lp->flag[b];
    }
}

static void lp_mark(lplan *lp, int port, int flag) { lp->flag[lp_find(lp, port)] |= flag; }

/* Joins l's ports as data flows through it (plain: everything under a
 * container the plan does not know). */
static void lp_visit(lplan *lp, dl_layer *l, int plain)
{
    int in = 2 * l->id, out = in + 1;
    if (plain || (l->nchild && l->vt != &sequential_vt && l->vt != &residual_vt)) {
        lp_mark(lp, in, LP_PLAIN);
        lp_mark(lp, out, LP_PLAIN);
        for (int i = 0; i < l->nchild; i++)
            lp_visit(lp, l->child[i], 1);
        return;
    }
    if (l->vt == &sequential_vt) {
        int prev = in;
        for (int i = 0; i < l->nchild; i++) {
            lp_visit(lp, l->child[i], 0);
            lp_join(lp, prev, 2 * l->child[i]->id);
            prev = 2 * l->child[i]->id + 1;
        }
        lp_join(lp, prev, out);
        return;
    }
    if (l->vt == &residual_vt) {
        for (int i = 0; i < l->nchild; i++) {
            lp_visit(lp, l->child[i], 0);
            lp_join(lp, in, 2 * l->child[i]->id);
            lp_join(lp, out, 2 * l->child[i]->id + 1);
        }
        if (!shortcut_of(l))
            lp_join(lp, in, out);
        return;
    }
    int f = l->vt->blocks ? l->vt->blocks(l, lp->p, lp->blk) : 0;
    if (!(f & DL_BLOCK_IN))
        lp_mark(lp, in, LP_PLAIN);
    if (!(f & DL_BLOCK_OUT))
        lp_mark(lp, out, LP_PLAIN);
    if (f & DL_BLOCK_CONV) {
        lp_mark(lp, in, LP_CONV);
        lp_mark(lp, out, LP_CONV);
    }
    if (f & DL_BLOCK_THROUGH)
        lp_join(lp, in, out);
}

static void lp_assign(lplan *lp, dl_layer *l)
{
    int a = lp->flag[lp_find(lp, 2 * l->id)], b = lp->flag[lp_find(lp, 2 * l->id + 1)];
    l->blk_in = a == LP_CONV ? lp->blk : 0;
    l->blk_out = b == LP_CONV ? lp->blk : 0;
    for (int i = 0; i < l->nchild; i++)
        lp_assign(lp, l->child[i]);
}

static void lp_clear(dl_layer *l)
{
    l->blk_in = l->blk_out = 0;
    for (int i = 0; i < l->nchild; i++)
        lp_clear(l->child[i]);
}

/* Sets every layer's blk_in and blk_out for p's backend and compute type
 * (again only when those change). */
static int layout_plan(dl_model *m, const dl_pass *p)
{
    int blk = p->be->ops->activation_blocks ? p->be->ops->activation_blocks(p->be, p->compute) : 0;
    if (m->layout_blk == blk && m->layout_be == p->be && m->layout_ops == p->be->ops &&
        m->layout_compute == p->compute)
        return DL_OK;
    lp_clear(m->root);
    if (blk > 0) {
        int ports = 2 * m->nlayers;
        lplan lp = {p, blk, malloc((size_t)ports * sizeof(int)), calloc((size_t)ports, 1)};
        if (!lp.parent || !lp.flag) {
            free(lp.parent);
            free(lp.flag);
            return dl_error(DL_ENOMEM, "out of memory planning the activations' layout");
        }
        for (int i = 0; i < ports; i++)
            lp.parent[i] = i;
        lp_visit(&lp, m->root, 0);
        lp_mark(&lp, 2 * m->root->id, LP_PLAIN);
        lp_mark(&lp, 2 * m->root->id + 1, LP_PLAIN);
        lp_assign(&lp, m->root);
        free(lp.parent);
        free(lp.flag);
    }
    m->layout_blk = blk;
    m->layout_be = p->be;
    m->layout_ops = p->be->ops;
    m->layout_compute = p->compute;
    return DL_OK;
}

int dl_model_forward(dl_model *m, dl_pass *p)
{
    DL_TRY(layout_plan(m, p));
    if (p->n > m->planned_n)
        return dl_error(DL_EINVAL, "batch of %d rows exceeds the planned %d", p->n, m->planned_n);
    /* the loss adds into the output gradient; the containers overwrite
     * (or zero) the rest of region 1 as they go */
    if (p->training)
        DL_TRY(
            p->be->ops->memset0(p->be, dl_model_output_grad(m),
                                (size_t)p->n * (size_t)dl_shape_numel(&m->output) * sizeof(float)));
    return child_forward(m->root, NULL, p, dl_model_input(m), dl_model_output(m));
}

int dl_model_backward(dl_model *m, dl_pass *p)
{
    return child_backward(m->root, NULL, p, dl_model_input(m), dl_model_output(m),
                          dl_model_output_grad(m), NULL, NULL, RUN_ADD);
}

int dl_model_refresh_lowp(dl_model *m, dl_dtype t)
{
    dl_backend *be = m->state->be;
    if (t == DL_F32)
        return DL_OK;
    void *lp = (char *)m->state->ptr + region_lp_bytes(m);
    if (dl_backend_operand_type(be, t) == DL_F32)
        return be->ops->round_through(be, lp, m->state->ptr, t, m->P);
    return be->ops->cast(be, lp, t, m->state->ptr, DL_F32, m->P);
}

size_t dl_model_param_count(const dl_model *m) { return m->pcount; }
int dl_model_num_params(const dl_model *m) { return m->nparams; }
const dl_param *dl_model_param(const dl_model *m, int i)
{
    return i >= 0 && i < m->nparams ? m->params[i] : NULL;
}
int dl_model_num_buffers(const dl_model *m) { return m->nbuffers; }
const dl_buffer *dl_model_buffer(const dl_model *m, int i)
{
    return i >= 0 && i < m->nbuffers ? &m->buffers[i] : NULL;
}
const dl_shape *dl_model_output_shape(const dl_model *m) { return &m->output; }
const dl_shape *dl_model_input_shape(const dl_model *m) { return &m->input; }
dl_layer *dl_model_root(const dl_model *m) { return m->root; }
double dl_model_flops(const dl_model *m) { return m->root->flops; }

static int owns_params(const dl_model *m, const dl_layer *l)
{
    for (int k = 0; k < m->nparams; k++)
        if (m->params[k]->layer == l)
            return 1;
    return 0;
}

/* The first parameter layer of the model when only parameter-free leaves
 * and nested Sequentials come before it: its input gradient is never
 * computed. NULL when another container comes first. */
static const dl_layer *leading_param_leaf(const dl_model *m, const dl_layer *l)
{
    if (l->vt != &sequential_vt)
        return l->nchild == 0 && owns_params(m, l) ? l : NULL;
    for (int i = 0; i < l->nchild; i++) {
        const dl_layer *c = l->child[i];
        if (c->vt == &sequential_vt)
            return leading_param_leaf(m, c);
        if (c->nchild > 0)
            return NULL;
        if (owns_params(m, c))
            return c;
    }
    return NULL;
}

const dl_layer *dl_model_input_grad_skipped(const dl_model *m)
{
    return leading_param_leaf(m, m->root);
}

double dl_model_train_flops(const dl_model *m)
{
    const dl_layer *lead = leading_param_leaf(m, m->root);
    return 3.0 * m->root->flops - (lead ? lead->flops : 0.0);
}

static void each(dl_layer *l, int depth, void (*fn)(dl_layer *, int, void *), void *arg)
{
    fn(l, depth, arg);
    for (int i = 0; i < l->nchild; i++)
        each(l->child[i], depth + 1, fn, arg);
}

void dl_model_each_layer(dl_model *m, void (*fn)(dl_layer *l, int depth, void *arg), void *arg)
{
    each(m->root, 0, fn, arg);
}

void dl_model_get_state(dl_model *m, dl_model_state *s)
{
    memset(s, 0, sizeof *s);
    if (!m->state)
        return;
    float *base = m->state->ptr;
    s->params = base;
    s->grads = base + region_grads(m);
    s->moment1 = m->moments >= 1 ? base + region_m1(m) : NULL;
    s->moment2 = m->moments >= 2 ? base + region_m2(m) : NULL;
    s->buffers = base + region_buffers(m);
    s->params_lp = (char *)m->state->ptr + region_lp_bytes(m);
    s->count = m->P;
    s->buffer_count = m->B;
    s->storage = m->state;
    s->moments = m->moments;
}
