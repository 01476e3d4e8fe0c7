/* onnx_graph.c - an ONNX graph in memory and its encoding as onnx.proto's ModelProto (engine/export/onnx_graph.h) */
#include "engine/export/onnx_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/version.h"

/* onnx.proto's field numbers, for the messages written here. */
enum { MODEL_IR_VERSION = 1, MODEL_PRODUCER = 2, MODEL_PRODUCER_VERSION = 3, MODEL_GRAPH = 7 };
enum { MODEL_OPSET = 8, MODEL_METADATA = 14, OPSET_DOMAIN = 1, OPSET_VERSION = 2 };
enum { GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INIT = 5, GRAPH_INPUT = 11, GRAPH_OUTPUT = 12 };
enum { NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP = 4, NODE_ATTR = 5 };
enum { ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_INTS = 8, ATTR_TYPE = 20 };
enum { TENSOR_DIMS = 1, TENSOR_TYPE = 2, TENSOR_NAME = 8, TENSOR_RAW = 9 };
enum { VI_NAME = 1, VI_TYPE = 2, TYPE_TENSOR = 1, TT_ELEM = 1, TT_SHAPE = 2, SHAPE_DIM = 1 };
enum { DIM_VALUE = 1, DIM_PARAM = 2, ENTRY_KEY = 1, ENTRY_VALUE = 2 };
enum { AT_FLOAT = 1, AT_INT = 2, AT_INTS = 7 };
#define IR_VERSION 8 /* ONNX 1.10 to 1.12: opsets up to 17 */

void og_graph_init(og_graph *g) { memset(g, 0, sizeof *g); }

void og_graph_done(og_graph *g)
{
    for (int i = 0; i < g->ninits; i++)
        free(g->inits[i].owned);
    free(g->inits);
    free(g->nodes);
    memset(g, 0, sizeof *g);
}

static void fail(og_graph *g, int rc)
{
    if (g->rc == DL_OK)
        g->rc = rc;
}

static void copy_name(char *dst, const char *src) { snprintf(dst, OG_NAME, "%s", src); }

static og_val val(const char *s)
{
    og_val v;
    copy_name(v.s, s);
    return v;
}

void og_node_add_multi(og_graph *g, const char *op, const char *name, int nin, const og_val *in,
                       int nout, const og_val *out)
{
    if (g->rc != DL_OK)
        return;
    if (g->nnodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 64;
        og_node *n = realloc(g->nodes, (size_t)cap * sizeof *n);
        if (!n) {
            fail(g, dl_error(DL_ENOMEM, "out of memory building the ONNX graph"));
            return;
        }
        g->nodes = n;
        g->cap_nodes = cap;
    }
    og_node *n = &g->nodes[g->nnodes++];
    memset(n, 0, sizeof *n);
    snprintf(n->op, sizeof n->op, "%s", op);
    copy_name(n->name, name);
    n->nin = nin;
    for (int i = 0; i < nin; i++)
        n->in[i] = in[i];
    n->nout = nout;
    for (int i = 0; i < nout; i++)
        n->out[i] = out[i];
}

og_val og_node_add(og_graph *g, const char *op, const char *name, const char *out, int nin,
                   const og_val *in)
{
    og_val o = val(out);
    og_node_add_multi(g, op, name, nin, in, 1, &o);
    return o;
}

/* The next attribute slot of the node added last, or NULL. */
static og_attr *next_attr(og_graph *g, const char *name, int type)
{
    if (g->rc != DL_OK || g->nnodes == 0)
        return NULL;
    og_node *n = &g->nodes[g->nnodes - 1];
    if (n->nattr == (int)(sizeof n->attr / sizeof n->attr[0])) {
        fail(g, dl_error(DL_ERR, "ONNX node %s: too many attributes", n->name));
        return NULL;
    }
    og_attr *a = &n->attr[n->nattr++];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    a->type = type;
    return a;
}

void og_attr_int(og_graph *g, const char *name, int64_t v)
{
    og_attr *a = next_attr(g, name, AT_INT);
    if (a)
        a->i = v;
}

void og_attr_float(og_graph *g, const char *name, float v)
{
    og_attr *a = next_attr(g, name, AT_FLOAT);
    if (a)
        a->f = v;
}

void og_attr_ints(og_graph *g, const char *name, int n, const int64_t *v)
{
    og_attr *a = next_attr(g, name, AT_INTS);
    if (!a)
        return;
    a->nints = n < 8 ? n : 8;
    memcpy(a->ints, v, (size_t)a->nints * sizeof *v);
}

static og_init *find_init(og_graph *g, const char *name)
{
    for (int i = 0; i < g->ninits; i++)
        if (!strcmp(g->inits[i].name, name))
            return &g->inits[i];
    return NULL;
}

static og_init *new_init(og_graph *g, const char *name, int dtype, int ndim, const int64_t *dims)
{
    if (g->rc != DL_OK)
        return NULL;
    if (g->ninits == g->cap_inits) {
        int cap = g->cap_inits ? 2 * g->cap_inits : 64;
        og_init *n = realloc(g->inits, (size_t)cap * sizeof *n);
        if (!n) {
            fail(g, dl_error(DL_ENOMEM, "out of memory building the ONNX graph"));
            return NULL;
        }
        g->inits = n;
        g->cap_inits = cap;
    }
    og_init *t = &g->inits[g->ninits++];
    memset(t, 0, sizeof *t);
    copy_name(t->name, name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->count = 1;
    for (int i = 0; i < ndim; i++) {
        t->dims[i] = dims[i];
        t->count *= (size_t)dims[i];
    }
    return t;
}

og_val og_init_borrow(og_graph *g, const char *name, int ndim, const int64_t *dims,
                      const float *data)
{
    og_init *t = new_init(g, name, OG_FLOAT, ndim, dims);
    if (t)
        t->data = data;
    return val(name);
}

/* An initializer owning a copy of count values of elem bytes. */
static og_val init_copy(og_graph *g, const char *name, int dtype, int ndim, const int64_t *dims,
                        const void *data, size_t elem)
{
    if (find_init(g, name))
        return val(name);
    og_init *t = new_init(g, name, dtype, ndim, dims);
    if (!t)
        return val(name);
    t->owned = malloc(t->count * elem + 1);
    if (!t->owned) {
        fail(g, dl_error(DL_ENOMEM, "out of memory building the ONNX graph"));
        return val(name);
    }
    memcpy(t->owned, data, t->count * elem);
    t->data = t->owned;
    return val(name);
}

og_val og_init_floats(og_graph *g, const char *name, int ndim, const int64_t *dims,
                      const float *data)
{
    return init_copy(g, name, OG_FLOAT, ndim, dims, data, sizeof(float));
}

og_val og_init_int64s(og_graph *g, const char *name, int n, const int64_t *v)
{
    int64_t dims[1] = {n};
    return init_copy(g, name, OG_INT64, 1, dims, v, sizeof(int64_t));
}

og_val og_const(og_graph *g, const char *name, float v)
{
    return init_copy(g, name, OG_FLOAT, 0, NULL, &v, sizeof v);
}

void og_rename(og_graph *g, const char *from, const char *to)
{
    for (int i = 0; i < g->nnodes; i++) {
        og_node *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++)
            if (!strcmp(n->in[k].s, from))
                copy_name(n->in[k].s, to);
        for (int k = 0; k < n->nout; k++)
            if (!strcmp(n->out[k].s, from))
                copy_name(n->out[k].s, to);
    }
}

/* --- encoding -------------------------------------------------------------- */

static void enc_attr(dl_pb *b, const og_attr *a)
{
    dl_pb_string(b, ATTR_NAME, a->name);
    if (a->type == AT_FLOAT)
        dl_pb_float(b, ATTR_F, a->f);
    else if (a->type == AT_INT)
        dl_pb_int64(b, ATTR_I, a->i);
    else
        for (int i = 0; i < a->nints; i++)
            dl_pb_int64(b, ATTR_INTS, a->ints[i]);
    dl_pb_varint(b, ATTR_TYPE, (uint64_t)a->type);
}

static void enc_node(dl_pb *b, const og_node *n)
{
    for (int i = 0; i < n->nin; i++)
        dl_pb_string(b, NODE_INPUT, n->in[i].s);
    for (int i = 0; i < n->nout; i++)
        dl_pb_string(b, NODE_OUTPUT, n->out[i].s);
    dl_pb_string(b, NODE_NAME, n->name);
    dl_pb_string(b, NODE_OP, n->op);
    for (int i = 0; i < n->nattr; i++) {
        dl_pb a;
        dl_pb_init(&a);
        enc_attr(&a, &n->attr[i]);
        dl_pb_message(b, NODE_ATTR, &a);
        dl_pb_done(&a);
    }
}

static void enc_tensor(dl_pb *b, const og_init *t)
{
    for (int i = 0; i < t->ndim; i++)
        dl_pb_int64(b, TENSOR_DIMS, t->dims[i]);
    dl_pb_varint(b, TENSOR_TYPE, (uint64_t)t->dtype);
    dl_pb_string(b, TENSOR_NAME, t->name);
    if (t->dtype == OG_FLOAT) {
        dl_pb_floats_le(b, TENSOR_RAW, t->data, t->count);
        return;
    }
    /* int64 as little-endian bytes */
    unsigned char *raw = malloc(t->count * 8 + 1);
    if (!raw) {
        b->failed = 1;
        return;
    }
    const int64_t *v = t->data;
    for (size_t i = 0; i < t->count; i++)
        for (int k = 0; k < 8; k++)
            raw[8 * i + k] = (unsigned char)((uint64_t)v[i] >> (8 * k));
    dl_pb_bytes(b, TENSOR_RAW, raw, t->count * 8);
    free(raw);
}

/* child encoded by fn(child, arg) appended to b as field. */
static void nested(dl_pb *b, int field, void (*fn)(dl_pb *, const void *), const void *arg)
{
    dl_pb c;
    dl_pb_init(&c);
    fn(&c, arg);
    dl_pb_message(b, field, &c);
    dl_pb_done(&c);
}

static void enc_shape(dl_pb *b, const void *arg)
{
    const og_io *io = arg;
    dl_pb d;
    dl_pb_init(&d);
    dl_pb_string(&d, DIM_PARAM, "batch");
    dl_pb_message(b, SHAPE_DIM, &d);
    for (int i = 0; i < io->ndim; i++) {
        dl_pb_done(&d);
        dl_pb_init(&d);
        dl_pb_int64(&d, DIM_VALUE, io->dims[i]);
        dl_pb_message(b, SHAPE_DIM, &d);
    }
    dl_pb_done(&d);
}

static void enc_tensor_type(dl_pb *b, const void *arg)
{
    dl_pb_varint(b, TT_ELEM, (uint64_t)((const og_io *)arg)->elem);
    nested(b, TT_SHAPE, enc_shape, arg);
}

static void enc_type(dl_pb *b, const void *arg) { nested(b, TYPE_TENSOR, enc_tensor_type, arg); }

static void enc_value_info(dl_pb *b, const void *arg)
{
    dl_pb_string(b, VI_NAME, ((const og_io *)arg)->name);
    nested(b, VI_TYPE, enc_type, arg);
}

typedef struct graph_arg {
    const og_graph *g;
    const og_io *input, *output;
} graph_arg;

static void enc_node_fn(dl_pb *b, const void *arg) { enc_node(b, arg); }
static void enc_tensor_fn(dl_pb *b, const void *arg) { enc_tensor(b, arg); }

static void enc_graph(dl_pb *b, const void *arg)
{
    const graph_arg *ga = arg;
    for (int i = 0; i < ga->g->nnodes; i++)
        nested(b, GRAPH_NODE, enc_node_fn, &ga->g->nodes[i]);
    dl_pb_string(b, GRAPH_NAME, "dlbench");
    for (int i = 0; i < ga->g->ninits; i++)
        nested(b, GRAPH_INIT, enc_tensor_fn, &ga->g->inits[i]);
    nested(b, GRAPH_INPUT, enc_value_info, ga->input);
    nested(b, GRAPH_OUTPUT, enc_value_info, ga->output);
}

static void enc_opset(dl_pb *b, const void *arg)
{
    dl_pb_string(b, OPSET_DOMAIN, "");
    dl_pb_varint(b, OPSET_VERSION, (uint64_t) * (const int *)arg);
}

static void enc_entry(dl_pb *b, const void *arg)
{
    const char *const *kv = arg;
    dl_pb_string(b, ENTRY_KEY, kv[0]);
    dl_pb_string(b, ENTRY_VALUE, kv[1]);
}

int og_graph_encode(og_graph *g, int opset, const og_io *input, const og_io *output,
                    const char *const (*meta)[2], int nmeta, dl_pb *out)
{
    dl_pb_init(out);
    if (g->rc != DL_OK)
        return g->rc;
    graph_arg ga = {g, input, output};
    dl_pb_varint(out, MODEL_IR_VERSION, IR_VERSION);
    dl_pb_string(out, MODEL_PRODUCER, "dlbench");
    dl_pb_string(out, MODEL_PRODUCER_VERSION, DL_VERSION);
    nested(out, MODEL_GRAPH, enc_graph, &ga);
    nested(out, MODEL_OPSET, enc_opset, &opset);
    for (int i = 0; i < nmeta; i++)
        nested(out, MODEL_METADATA, enc_entry, meta[i]);
    if (!dl_pb_ok(out)) {
        dl_pb_done(out);
        return dl_error(DL_ENOMEM, "out of memory encoding the ONNX model");
    }
    return DL_OK;
}
