/* onnx_graph.h - an ONNX graph built in memory (nodes, attributes, initializers) and encoded as a ModelProto
 *
 * Internal to engine/export. Values are named strings (og_val); a node
 * reads values and writes one to three new ones. Initializers either
 * borrow their float data (the model's parameters, which outlive the
 * graph) or own a copy (constants the exporter makes). Errors are sticky:
 * the first failure (out of memory, a full node) is kept and
 * og_graph_encode returns it.
 */
#ifndef DL_ONNX_GRAPH_H
#define DL_ONNX_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "engine/export/pb.h"

#define OG_NAME 160

typedef struct og_val {
    char s[OG_NAME];
} og_val;

/* ONNX TensorProto.DataType values used here. */
enum { OG_FLOAT = 1, OG_INT64 = 7 };

typedef struct og_attr {
    char name[32];
    int type; /* AttributeProto.AttributeType: 1 FLOAT, 2 INT, 7 INTS */
    float f;
    int64_t i;
    int64_t ints[8];
    int nints;
} og_attr;

typedef struct og_node {
    char op[32];
    char name[OG_NAME];
    og_val in[5], out[3];
    int nin, nout;
    og_attr attr[8];
    int nattr;
} og_node;

typedef struct og_init {
    char name[OG_NAME];
    int dtype;
    int64_t dims[8];
    int ndim;
    const void *data; /* dtype values, count of them */
    void *owned;      /* data when the graph owns it */
    size_t count;
} og_init;

typedef struct og_graph {
    og_node *nodes;
    int nnodes, cap_nodes;
    og_init *inits;
    int ninits, cap_inits;
    int rc; /* the first error (DL_OK while none) */
} og_graph;

void og_graph_init(og_graph *g);
void og_graph_done(og_graph *g);

/* Adds node op named name reading nin values of in and writing out (one
 * output); returns out. Attributes go on the node added last. */
og_val og_node_add(og_graph *g, const char *op, const char *name, const char *out, int nin,
                   const og_val *in);
/* The same with nout outputs named out[]. */
void og_node_add_multi(og_graph *g, const char *op, const char *name, int nin, const og_val *in,
                       int nout, const og_val *out);
void og_attr_int(og_graph *g, const char *name, int64_t v);
void og_attr_float(og_graph *g, const char *name, float v);
void og_attr_ints(og_graph *g, const char *name, int n, const int64_t *v);

/* A float initializer borrowing data (ndim dims); returns its value. */
og_val og_init_borrow(og_graph *g, const char *name, int ndim, const int64_t *dims,
                      const float *data);
/* Initializers owning a copy of data: floats of shape dims, or a 1-d
 * int64 vector. One of the same name already there is reused. */
og_val og_init_floats(og_graph *g, const char *name, int ndim, const int64_t *dims,
                      const float *data);
og_val og_init_int64s(og_graph *g, const char *name, int n, const int64_t *v);
/* A float scalar constant (shape []), shared by name. */
og_val og_const(og_graph *g, const char *name, float v);

/* Renames value `from` to `to` wherever a node reads or writes it. */
void og_rename(og_graph *g, const char *from, const char *to);

/* A graph input or output: name, element type, dims with a symbolic first
 * dimension ("batch") followed by ndim fixed ones. */
typedef struct og_io {
    const char *name;
    int elem;
    int ndim;
    const int64_t *dims;
} og_io;

/* The ModelProto of g (IR version 8, opset `opset` of the default domain)
 * with one input and one output and meta key/value pairs into *out (the
 * caller frees it with dl_pb_done). Returns g's error or DL_OK. */
int og_graph_encode(og_graph *g, int opset, const og_io *input, const og_io *output,
                    const char *const (*meta)[2], int nmeta, dl_pb *out);

#endif
