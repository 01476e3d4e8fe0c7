/* onnx.c - a model as an ONNX graph: one emitter per layer kind, the graph's input and output, the file */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/export/export.h"
#include "engine/export/export_impl.h"
#include "engine/export/onnx_graph.h"

typedef struct ctx {
    og_graph g;
    dl_model *m;
    dl_model_state s;
    dl_export_names names;
    og_val int_input; /* the graph input when it holds int64 token ids ("" else) */
} ctx;

/* x -> *y for layer l; each kind has one. */
typedef int (*emit_fn)(ctx *c, const dl_layer *l, og_val x, og_val *y);
static int emit(ctx *c, const dl_layer *l, og_val x, og_val *y);

/* "<layer>/<what>": the name of an intermediate value or node of l. */
static og_val sub(const dl_layer *l, const char *what)
{
    og_val v;
    snprintf(v.s, sizeof v.s, "%s/%s", l->name, what);
    return v;
}

static int unsupported(const dl_layer *l, const char *why)
{
    char d[128];
    dl_layer_describe(l, d, sizeof d);
    return dl_error(DL_EUNSUPPORTED, "export onnx: layer %s (%s) cannot be expressed in ONNX: %s",
                    l->name, d, why);
}

/* Layer l's parameter (or buffer) `own` ("weight") as an initializer. */
static int tensor(ctx *c, const dl_layer *l, const char *own, og_val *out)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", l->name, own);
    const dl_shape *shape = NULL;
    const float *data = NULL;
    for (int i = 0; i < dl_model_num_params(c->m) && !shape; i++) {
        const dl_param *p = dl_model_param(c->m, i);
        if (p->layer == l && !strcmp(p->name, full)) {
            shape = &p->shape;
            data = c->s.params + p->offset;
        }
    }
    for (int i = 0; i < dl_model_num_buffers(c->m) && !shape; i++) {
        const dl_buffer *b = dl_model_buffer(c->m, i);
        if (b->layer == l && !strcmp(b->name, full)) {
            shape = &b->shape;
            data = c->s.buffers + b->offset;
        }
    }
    if (!shape)
        return dl_error(DL_EINVAL, "export onnx: layer %s has no tensor %s", l->name, full);
    char name[OG_NAME];
    DL_TRY(dl_export_tensor_name(c->m, l, full, c->names, name, sizeof name));
    *out = og_init_borrow(&c->g, name, shape->ndim, shape->dim, data);
    return DL_OK;
}

/* x [.., in] times W^T for W [out, in] (a Transpose of the initializer,
 * which runtimes fold), plus the bias when there is one. */
static og_val matmul_wt(ctx *c, const dl_layer *l, const char *what, og_val x, og_val w,
                        const og_val *bias, const char *out)
{
    char n[64];
    snprintf(n, sizeof n, "%s_t", what);
    og_val wt = og_node_add(&c->g, "Transpose", sub(l, n).s, sub(l, n).s, 1, &w);
    int64_t perm[2] = {1, 0};
    og_attr_ints(&c->g, "perm", 2, perm);
    og_val mm = {{0}}, in[2] = {x, wt};
    snprintf(n, sizeof n, "%s_mm", what);
    mm = og_node_add(&c->g, "MatMul", sub(l, n).s, bias ? sub(l, n).s : out, 2, in);
    if (!bias)
        return mm;
    og_val ab[2] = {mm, *bias};
    snprintf(n, sizeof n, "%s_add", what);
    return og_node_add(&c->g, "Add", sub(l, n).s, out, 2, ab);
}

/* Linear: Gemm on [batch, in]; MatMul with W^T (+ bias) on [batch, .., in]. */
static int emit_linear(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    dl_layer_config k;
    dl_layer_get_config(l, &k);
    og_val in[3] = {x};
    DL_TRY(tensor(c, l, "weight", &in[1]));
    if (k.bias)
        DL_TRY(tensor(c, l, "bias", &in[2]));
    if (l->in.ndim == 1) {
        *y = og_node_add(&c->g, "Gemm", l->name, l->name, k.bias ? 3 : 2, in);
        og_attr_int(&c->g, "transB", 1);
        return DL_OK;
    }
    *y = matmul_wt(c, l, "weight", x, in[1], k.bias ? &in[2] : NULL, l->name);
    return DL_OK;
}

static void attrs_2d(og_graph *g, const char *name, int64_t v)
{
    int64_t a[2] = {v, v};
    og_attr_ints(g, name, 2, a);
}

static void pads_2d(og_graph *g, int64_t p)
{
    int64_t a[4] = {p, p, p, p};
    og_attr_ints(g, "pads", 4, a);
}

static int emit_conv(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    dl_layer_config k;
    dl_layer_get_config(l, &k);
    og_val in[3] = {x};
    DL_TRY(tensor(c, l, "weight", &in[1]));
    if (k.bias)
        DL_TRY(tensor(c, l, "bias", &in[2]));
    *y = og_node_add(&c->g, "Conv", l->name, l->name, k.bias ? 3 : 2, in);
    attrs_2d(&c->g, "kernel_shape", k.kernel);
    attrs_2d(&c->g, "strides", k.stride);
    pads_2d(&c->g, k.pad);
    attrs_2d(&c->g, "dilations", k.dilation);
    og_attr_int(&c->g, "group", k.groups);
    return DL_OK;
}

/* MaxPool2d, AvgPool2d (padding counted in the divisor, as the engine and
 * PyTorch's default do). */
static int emit_pool(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    dl_layer_config k;
    dl_layer_get_config(l, &k);
    int avg = !strcmp(l->vt->kind, "AvgPool2d");
    *y = og_node_add(&c->g, avg ? "AveragePool" : "MaxPool", l->name, l->name, 1, &x);
    attrs_2d(&c->g, "kernel_shape", k.kernel);
    attrs_2d(&c->g, "strides", k.stride);
    pads_2d(&c->g, k.pad);
    if (avg)
        og_attr_int(&c->g, "count_include_pad", 1);
    return DL_OK;
}

/* AdaptiveAvgPool2d: GlobalAveragePool to 1x1, AveragePool when the
 * windows tile the input evenly; other sizes have uneven windows ONNX
 * cannot express in one op. */
static int emit_adaptive_pool(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    dl_layer_config k;
    dl_layer_get_config(l, &k);
    int64_t h = l->in.dim[1], w = l->in.dim[2];
    if (k.out_h == 1 && k.out_w == 1) {
        *y = og_node_add(&c->g, "GlobalAveragePool", l->name, l->name, 1, &x);
        return DL_OK;
    }
    if (h % k.out_h || w % k.out_w) {
        char why[160];
        snprintf(why, sizeof why,
                 "its %dx%d windows over a %lldx%lld input are uneven (ONNX pools with one "
                 "window size; use an output size that divides the input)",
                 k.out_h, k.out_w, (long long)h, (long long)w);
        return unsupported(l, why);
    }
    *y = og_node_add(&c->g, "AveragePool", l->name, l->name, 1, &x);
    int64_t ks[2] = {h / k.out_h, w / k.out_w};
    og_attr_ints(&c->g, "kernel_shape", 2, ks);
    og_attr_ints(&c->g, "strides", 2, ks);
    return DL_OK;
}

/* ONNX has Relu, Tanh and Sigmoid; SiLU is x * sigmoid(x); GELU (an op
 * only from opset 20) is the exact form 0.5 x (1 + erf(x / sqrt 2)). */
static int emit_activation(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    const char *kind = l->vt->kind;
    const char *op = !strcmp(kind, "ReLU")      ? "Relu"
                     : !strcmp(kind, "Tanh")    ? "Tanh"
                     : !strcmp(kind, "Sigmoid") ? "Sigmoid"
                                                : NULL;
    if (op) {
        *y = og_node_add(&c->g, op, l->name, l->name, 1, &x);
        return DL_OK;
    }
    if (!strcmp(kind, "SiLU")) {
        og_val s = og_node_add(&c->g, "Sigmoid", sub(l, "sigmoid").s, sub(l, "sigmoid").s, 1, &x);
        og_val in[2] = {x, s};
        *y = og_node_add(&c->g, "Mul", l->name, l->name, 2, in);
        return DL_OK;
    }
    og_val a[2] = {x, og_const(&c->g, "const.sqrt2", sqrtf(2.0f))};
    og_val e = og_node_add(&c->g, "Div", sub(l, "div").s, sub(l, "div").s, 2, a);
    e = og_node_add(&c->g, "Erf", sub(l, "erf").s, sub(l, "erf").s, 1, &e);
    og_val b[2] = {e, og_const(&c->g, "const.one", 1.0f)};
    e = og_node_add(&c->g, "Add", sub(l, "add").s, sub(l, "add").s, 2, b);
    og_val m[2] = {x, e};
    e = og_node_add(&c->g, "Mul", sub(l, "mul").s, sub(l, "mul").s, 2, m);
    og_val h[2] = {e, og_const(&c->g, "const.half", 0.5f)};
    *y = og_node_add(&c->g, "Mul", l->name, l->name, 2, h);
    return DL_OK;
}

/* Dropout (evaluation: the identity), Identity. */
static int emit_identity(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    *y = og_node_add(&c->g, "Identity", l->name, l->name, 1, &x);
    return DL_OK;
}

static int emit_flatten(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    *y = og_node_add(&c->g, "Flatten", l->name, l->name, 1, &x);
    og_attr_int(&c->g, "axis", 1);
    return DL_OK;
}

/* BatchNorm in evaluation form: the running statistics. [batch, f] and
 * [batch, c, h, w] are both BatchNormalization's N x C x ... */
static int emit_batchnorm(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    dl_layer_config k;
    dl_layer_get_config(l, &k);
    og_val in[5] = {x};
    DL_TRY(tensor(c, l, "weight", &in[1]));
    DL_TRY(tensor(c, l, "bias", &in[2]));
    DL_TRY(tensor(c, l, "running_mean", &in[3]));
    DL_TRY(tensor(c, l, "running_var", &in[4]));
    *y = og_node_add(&c->g, "BatchNormalization", l->name, l->name, 5, in);
    og_attr_float(&c->g, "epsilon", k.eps);
    return DL_OK;
}

static int emit_layernorm(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    dl_layer_config k;
    dl_layer_get_config(l, &k);
    og_val in[3] = {x};
    DL_TRY(tensor(c, l, "weight", &in[1]));
    DL_TRY(tensor(c, l, "bias", &in[2]));
    *y = og_node_add(&c->g, "LayerNormalization", l->name, l->name, 3, in);
    og_attr_int(&c->g, "axis", -1);
    og_attr_float(&c->g, "epsilon", k.eps);
    return DL_OK;
}

/* Embedding: Gather of the table's rows; ids that arrive as floats (the
 * engine's own input type) are cast to int64 first. */
static int emit_embedding(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    og_val in[2];
    DL_TRY(tensor(c, l, "weight", &in[0]));
    in[1] = x;
    if (strcmp(x.s, c->int_input.s)) {
        in[1] = og_node_add(&c->g, "Cast", sub(l, "ids").s, sub(l, "ids").s, 1, &x);
        og_attr_int(&c->g, "to", OG_INT64);
    }
    *y = og_node_add(&c->g, "Gather", l->name, l->name, 2, in);
    og_attr_int(&c->g, "axis", 0);
    return DL_OK;
}

/* x [batch, t, d] + P[0..t): the table sliced to the sample's t rows. */
static int emit_posemb(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    dl_layer_config k;
    dl_layer_get_config(l, &k);
    int64_t t = l->in.dim[0];
    og_val p;
    DL_TRY(tensor(c, l, "weight", &p));
    if (t < k.in) {
        char n[OG_NAME];
        int64_t zero = 0, axis = 0;
        og_val in[4] = {p};
        snprintf(n, sizeof n, "%s/starts", l->name);
        in[1] = og_init_int64s(&c->g, n, 1, &zero);
        snprintf(n, sizeof n, "%s/ends", l->name);
        in[2] = og_init_int64s(&c->g, n, 1, &t);
        snprintf(n, sizeof n, "%s/axes", l->name);
        in[3] = og_init_int64s(&c->g, n, 1, &axis);
        p = og_node_add(&c->g, "Slice", sub(l, "rows").s, sub(l, "rows").s, 4, in);
    }
    og_val in[2] = {x, p};
    *y = og_node_add(&c->g, "Add", l->name, l->name, 2, in);
    return DL_OK;
}

static og_val node1(ctx *c, const char *op, const dl_layer *l, const char *what, int nin,
                    const og_val *in)
{
    return og_node_add(&c->g, op, sub(l, what).s, sub(l, what).s, nin, in);
}

static og_val transpose(ctx *c, const dl_layer *l, const char *what, og_val x, const int64_t *perm)
{
    og_val v = node1(c, "Transpose", l, what, 1, &x);
    og_attr_ints(&c->g, "perm", 4, perm);
    return v;
}

/* [batch, t, d] q, k or v -> [batch, heads, t, dh] (k: [batch, heads, dh, t]). */
static og_val split_heads(ctx *c, const dl_layer *l, const char *what, og_val v, og_val shape,
                          int keys)
{
    static const int64_t qv[4] = {0, 2, 1, 3}, kt[4] = {0, 2, 3, 1};
    char n[32];
    snprintf(n, sizeof n, "%s_heads", what);
    og_val in[2] = {v, shape};
    og_val r = node1(c, "Reshape", l, n, 2, in);
    snprintf(n, sizeof n, "%s_t", what);
    return transpose(c, l, n, r, keys ? kt : qv);
}

/* MultiheadAttention as PyTorch's: qkv = x W_in^T + b_in, per head
 * softmax(q k^T / sqrt(dh) + causal mask) v, the heads joined, then the
 * output projection. The mask is an initializer [t, t]: 0 on and below the
 * diagonal, -inf above. */
static int emit_mha(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    dl_layer_config k;
    dl_layer_get_config(l, &k);
    int64_t t = l->in.dim[0], d = k.in, h = k.heads, dh = d / h;
    og_val w_in, b_in, w_out, b_out;
    DL_TRY(tensor(c, l, "in_proj_weight", &w_in));
    DL_TRY(tensor(c, l, "out_proj.weight", &w_out));
    if (k.bias) {
        DL_TRY(tensor(c, l, "in_proj_bias", &b_in));
        DL_TRY(tensor(c, l, "out_proj.bias", &b_out));
    }
    og_val qkv = matmul_wt(c, l, "in_proj", x, w_in, k.bias ? &b_in : NULL, sub(l, "qkv").s);
    char n[OG_NAME];
    int64_t split[3] = {d, d, d}, heads[4] = {0, t, h, dh}, joined[3] = {0, t, d};
    snprintf(n, sizeof n, "%s/split", l->name);
    og_val in[2] = {qkv, og_init_int64s(&c->g, n, 3, split)};
    og_val qkv3[3] = {sub(l, "q"), sub(l, "k"), sub(l, "v")};
    og_node_add_multi(&c->g, "Split", sub(l, "split").s, 2, in, 3, qkv3);
    og_attr_int(&c->g, "axis", 2);
    snprintf(n, sizeof n, "%s/heads_shape", l->name);
    og_val hs = og_init_int64s(&c->g, n, 4, heads);
    og_val q = split_heads(c, l, "q", qkv3[0], hs, 0), kk = split_heads(c, l, "k", qkv3[1], hs, 1);
    og_val v = split_heads(c, l, "v", qkv3[2], hs, 0);
    og_val qk[2] = {q, kk};
    og_val s = node1(c, "MatMul", l, "scores", 2, qk);
    snprintf(n, sizeof n, "%s/scale", l->name);
    og_val sc[2] = {s, og_const(&c->g, n, 1.0f / sqrtf((float)dh))};
    s = node1(c, "Mul", l, "scaled", 2, sc);
    if (k.causal) {
        float *mask = malloc((size_t)(t * t) * sizeof *mask);
        if (!mask)
            return dl_error(DL_ENOMEM, "out of memory");
        for (int64_t i = 0; i < t; i++)
            for (int64_t j = 0; j < t; j++)
                mask[i * t + j] = j > i ? -INFINITY : 0.0f;
        int64_t dims[2] = {t, t};
        snprintf(n, sizeof n, "%s/causal_mask", l->name);
        og_val sm[2] = {s, og_init_floats(&c->g, n, 2, dims, mask)};
        free(mask);
        s = node1(c, "Add", l, "masked", 2, sm);
    }
    og_val p = node1(c, "Softmax", l, "probs", 1, &s);
    og_attr_int(&c->g, "axis", -1);
    og_val pv[2] = {p, v};
    og_val o = node1(c, "MatMul", l, "context", 2, pv);
    static const int64_t back[4] = {0, 2, 1, 3};
    o = transpose(c, l, "context_t", o, back);
    snprintf(n, sizeof n, "%s/joined_shape", l->name);
    og_val js[2] = {o, og_init_int64s(&c->g, n, 3, joined)};
    o = node1(c, "Reshape", l, "joined", 2, js);
    *y = matmul_wt(c, l, "out_proj", o, w_out, k.bias ? &b_out : NULL, l->name);
    return DL_OK;
}

static int emit_sequential(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    if (l->nchild == 0)
        return emit_identity(c, l, x, y);
    for (int i = 0; i < l->nchild; i++) {
        DL_TRY(emit(c, l->child[i], x, y));
        x = *y;
    }
    return DL_OK;
}

/* block(x) + shortcut(x), the shortcut the identity when there is none. */
static int emit_residual(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    og_val in[2] = {{{0}}, x};
    DL_TRY(emit(c, l->child[0], x, &in[0]));
    if (l->nchild > 1)
        DL_TRY(emit(c, l->child[1], x, &in[1]));
    *y = og_node_add(&c->g, "Add", l->name, l->name, 2, in);
    return DL_OK;
}

static const struct {
    const char *kind;
    emit_fn fn;
} emitters[] = {
    {"Linear", emit_linear},
    {"Conv2d", emit_conv},
    {"MaxPool2d", emit_pool},
    {"AvgPool2d", emit_pool},
    {"AdaptiveAvgPool2d", emit_adaptive_pool},
    {"ReLU", emit_activation},
    {"GELU", emit_activation},
    {"Tanh", emit_activation},
    {"Sigmoid", emit_activation},
    {"SiLU", emit_activation},
    {"Dropout", emit_identity},
    {"Identity", emit_identity},
    {"Flatten", emit_flatten},
    {"BatchNorm", emit_batchnorm},
    {"LayerNorm", emit_layernorm},
    {"Embedding", emit_embedding},
    {"PositionalEmbedding", emit_posemb},
    {"MultiheadAttention", emit_mha},
    {"Sequential", emit_sequential},
    {"Residual", emit_residual},
};

static int emit(ctx *c, const dl_layer *l, og_val x, og_val *y)
{
    for (size_t i = 0; i < sizeof emitters / sizeof *emitters; i++)
        if (!strcmp(l->vt->kind, emitters[i].kind)) {
            DL_TRY(emitters[i].fn(c, l, x, y));
            return c->g.rc;
        }
    return unsupported(l, "the exporter knows no ONNX form for this kind of layer");
}

/* Whether the model's first leaf layer is an Embedding (ids in). */
static int starts_with_embedding(const dl_layer *l)
{
    while (l->nchild > 0)
        l = l->child[0];
    return !strcmp(l->vt->kind, "Embedding");
}

static int build(ctx *c)
{
    og_val x = {"input"}, y;
    if (starts_with_embedding(dl_model_root(c->m)))
        c->int_input = x;
    DL_TRY(emit(c, dl_model_root(c->m), x, &y));
    og_rename(&c->g, y.s, "logits");
    return c->g.rc;
}

int dl_export_onnx(dl_model *m, const char *path, const dl_export_options *o)
{
    ctx c = {.m = m, .names = o ? o->names : DL_EXPORT_NAMES_TORCH};
    DL_TRY(dl_export_host_state(m, &c.s));
    og_graph_init(&c.g);
    int rc = build(&c);
    dl_pb pb = {0};
    if (rc == DL_OK) {
        const dl_shape *in = dl_model_input_shape(m), *out = dl_model_output_shape(m);
        og_io input = {"input", c.int_input.s[0] ? OG_INT64 : OG_FLOAT, in->ndim, in->dim};
        og_io output = {"logits", OG_FLOAT, out->ndim, out->dim};
        rc = og_graph_encode(&c.g, DL_EXPORT_ONNX_OPSET, &input, &output, o ? o->meta : NULL,
                             o ? o->nmeta : 0, &pb);
    }
    if (rc == DL_OK)
        rc = dl_fs_write_atomic(path, pb.data, pb.len);
    dl_pb_done(&pb);
    og_graph_done(&c.g);
    return rc;
}
