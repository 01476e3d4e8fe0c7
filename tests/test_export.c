/* test_export.c - the exporters: protobuf wire bytes, torch names, safetensors read back, refused layers; and the peer-check helper of t_export.sh
 *
 * Without arguments: unit tests. With arguments it is the helper that
 * tests/t_export.sh drives to compare dlbench with independent readers:
 *   test_export --write KIND DIR   builds model KIND in C (mlp, cnn, resnet,
 *       gpt, acts, attn) with random parameters and BatchNorm statistics,
 *       runs N random samples forward (evaluation mode) and writes
 *       DIR/input.bin (float32, or int64 token ids), DIR/logits.bin
 *       (float32), DIR/meta.json (shapes) and the exports DIR/model.onnx,
 *       DIR/model.safetensors (torch names);
 *   test_export --run RUN DIR N    opens run folder RUN (as dlbench export
 *       does), runs the first N validation samples forward after the run's
 *       normalisation and writes the same input.bin, logits.bin, meta.json.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/base/rng.h"
#include "engine/core/backend.h"
#include "engine/export/export.h"
#include "engine/export/pb.h"
#include "engine/nn/nn.h"
#include "scripting/run_model.h"
#include "tests/check.h"

/* --- models ------------------------------------------------------------------ */

static dl_layer *seq(int n, dl_layer **ls)
{
    dl_layer *s = dl_nn_sequential();
    for (int i = 0; i < n; i++)
        dl_nn_sequential_add(s, ls[i]);
    return s;
}
#define SEQ(...)                                                                                   \
    seq(sizeof((dl_layer *[]){__VA_ARGS__}) / sizeof(dl_layer *), (dl_layer *[]){__VA_ARGS__})

static dl_layer *conv(int cin, int cout, int k, int stride, int pad, int dil, int groups, int bias)
{
    dl_conv2d_opts o = {stride, pad, dil, groups, bias};
    return dl_nn_conv2d_with(cin, cout, k, &o);
}

/* conv 3x3 -> BN -> ReLU -> conv 3x3 -> BN + shortcut, then ReLU (scripts/resnet_fmnist.lua) */
static dl_layer *basic_block(int cin, int cout, int stride)
{
    dl_layer *block = SEQ(conv(cin, cout, 3, stride, 1, 1, 1, 0),
                          dl_nn_batchnorm(cout, 1e-5f, 0.1f), dl_nn_activation(DL_ACT_RELU),
                          conv(cout, cout, 3, 1, 1, 1, 1, 0), dl_nn_batchnorm(cout, 1e-5f, 0.1f));
    dl_layer *sc = NULL;
    if (stride != 1 || cin != cout)
        sc = SEQ(conv(cin, cout, 1, stride, 0, 1, 1, 0), dl_nn_batchnorm(cout, 1e-5f, 0.1f));
    return SEQ(dl_nn_residual_shortcut(block, sc), dl_nn_activation(DL_ACT_RELU));
}

/* pre-norm transformer block (scripts/char_gpt.lua) */
static dl_layer *gpt_block(int d, int heads)
{
    dl_layer *att = SEQ(dl_nn_layernorm(d, 1e-5f), dl_nn_multihead_attention(d, heads, 1, 0, 1));
    dl_layer *mlp = SEQ(dl_nn_layernorm(d, 1e-5f), dl_nn_linear(d, 4 * d, 1),
                        dl_nn_activation(DL_ACT_GELU), dl_nn_linear(4 * d, d, 1));
    return SEQ(dl_nn_residual(att), dl_nn_residual(mlp));
}

enum { GPT_VOCAB = 20, GPT_T = 8 };

/* The model KIND and its per-sample input shape; NULL when unknown. */
static dl_layer *make_model(const char *kind, dl_shape *in)
{
    if (!strcmp(kind, "mlp")) {
        *in = (dl_shape){3, {1, 28, 28}};
        return SEQ(dl_nn_flatten(), dl_nn_linear(784, 64, 1), dl_nn_activation(DL_ACT_RELU),
                   dl_nn_linear(64, 10, 1));
    }
    if (!strcmp(kind, "cnn")) { /* 28 -> 28 -> 14 -> 14 -> 8 -> 4 */
        *in = (dl_shape){3, {1, 28, 28}};
        return SEQ(conv(1, 8, 3, 1, 1, 1, 1, 1), dl_nn_batchnorm(8, 1e-5f, 0.1f),
                   dl_nn_activation(DL_ACT_RELU), dl_nn_maxpool2d(2, 2, 0), dl_nn_dropout(0.25f),
                   conv(8, 16, 3, 1, 2, 2, 2, 1), dl_nn_batchnorm(16, 1e-5f, 0.1f),
                   dl_nn_activation(DL_ACT_RELU), dl_nn_avgpool2d(2, 2, 1),
                   dl_nn_adaptive_avgpool2d(4, 4), dl_nn_flatten(), dl_nn_linear(256, 32, 1),
                   dl_nn_batchnorm(32, 1e-5f, 0.1f), dl_nn_activation(DL_ACT_RELU),
                   dl_nn_dropout(0.5f), dl_nn_linear(32, 10, 1));
    }
    if (!strcmp(kind, "resnet")) {
        *in = (dl_shape){3, {1, 28, 28}};
        return SEQ(conv(1, 8, 3, 1, 1, 1, 1, 0), dl_nn_batchnorm(8, 1e-5f, 0.1f),
                   dl_nn_activation(DL_ACT_RELU), basic_block(8, 8, 1), basic_block(8, 16, 2),
                   dl_nn_adaptive_avgpool2d(1, 1), dl_nn_flatten(), dl_nn_linear(16, 10, 1));
    }
    if (!strcmp(kind, "gpt")) {
        *in = (dl_shape){1, {GPT_T}};
        return SEQ(dl_nn_embedding(GPT_VOCAB, 16), dl_nn_positional_embedding(12, 16),
                   gpt_block(16, 4), gpt_block(16, 4), dl_nn_layernorm(16, 1e-5f),
                   dl_nn_linear(16, GPT_VOCAB, 1));
    }
    if (!strcmp(kind, "acts")) {
        *in = (dl_shape){1, {10}};
        return SEQ(dl_nn_linear(10, 32, 1), dl_nn_batchnorm(32, 1e-3f, 0.1f),
                   dl_nn_activation(DL_ACT_GELU), dl_nn_linear(32, 32, 0),
                   dl_nn_activation(DL_ACT_SILU), dl_nn_dropout(0.1f), dl_nn_linear(32, 32, 1),
                   dl_nn_activation(DL_ACT_TANH), dl_nn_layernorm(32, 1e-5f),
                   dl_nn_linear(32, 32, 1), dl_nn_activation(DL_ACT_SIGMOID), dl_nn_identity(),
                   dl_nn_linear(32, 5, 1));
    }
    if (!strcmp(kind, "attn")) { /* non-causal, without biases; PositionalEmbedding at max_len */
        *in = (dl_shape){2, {6, 8}};
        return SEQ(dl_nn_positional_embedding(6, 8), dl_nn_multihead_attention(8, 2, 0, 0, 0),
                   dl_nn_residual(SEQ(dl_nn_linear(8, 8, 1), dl_nn_activation(DL_ACT_GELU))),
                   dl_nn_flatten(), dl_nn_linear(48, 4, 1));
    }
    return NULL;
}

/* Parameters from their init, then BatchNorm's affine parameters and
 * running statistics drawn away from 1 and 0 so the evaluation form shows. */
static int build(dl_model **m, const char *kind, int n, uint64_t seed)
{
    dl_shape in;
    dl_layer *root = make_model(kind, &in);
    if (!root)
        return dl_error(DL_EINVAL, "unknown model kind %s", kind);
    DL_TRY(dl_model_create(m, root, &in));
    DL_TRY(dl_model_init_state(*m, dl_backend_cpu(0), 0, seed));
    DL_TRY(dl_model_plan(*m, n));
    dl_model_state s;
    dl_model_get_state(*m, &s);
    for (int i = 0; i < dl_model_num_params(*m); i++) {
        const dl_param *p = dl_model_param(*m, i);
        if (strcmp(p->layer->vt->kind, "BatchNorm"))
            continue;
        int gamma = strstr(p->name, ".weight") != NULL;
        for (size_t k = 0; k < p->count; k++)
            s.params[p->offset + k] =
                (gamma ? 1.0f : 0.0f) + dl_rng_uniform(seed, 7, (uint64_t)i, k) - 0.5f;
    }
    for (int i = 0; i < dl_model_num_buffers(*m); i++) {
        const dl_buffer *b = dl_model_buffer(*m, i);
        int var = strstr(b->name, "running_var") != NULL;
        for (size_t k = 0; k < b->count; k++) {
            float u = dl_rng_uniform(seed, 8, (uint64_t)i, k);
            s.buffers[b->offset + k] = var ? 0.5f + 1.5f * u : u - 0.5f;
        }
    }
    return DL_OK;
}

/* Forward of n samples x (f32, the engine's input) in evaluation mode; the
 * output goes to y (n * outs floats). */
static int forward(dl_model *m, int n, const float *x, float *y)
{
    size_t ins = (size_t)dl_shape_numel(dl_model_input_shape(m));
    size_t outs = (size_t)dl_shape_numel(dl_model_output_shape(m));
    memcpy(dl_model_input(m), x, (size_t)n * ins * sizeof *x);
    dl_pass p;
    dl_model_pass(m, &p, n, 0, DL_PREC_F32, 1, 0);
    DL_TRY(dl_model_forward(m, &p));
    memcpy(y, dl_model_output(m), (size_t)n * outs * sizeof *y);
    return DL_OK;
}

/* --- the helper's files ------------------------------------------------------- */

static int write_file(const char *dir, const char *name, const void *data, size_t bytes)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0)
        return dl_error(DL_EIO, "cannot write %s", path);
    return DL_OK;
}

static cJSON *shape_json(int n, const dl_shape *s)
{
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber(n));
    for (int i = 0; i < s->ndim; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->dim[i]));
    return a;
}

/* input.bin (f32, or the ids as int64 when ids), logits.bin, meta.json. */
static int write_io(const char *dir, dl_model *m, int n, const float *x, const float *y, int ids)
{
    size_t ins = (size_t)n * (size_t)dl_shape_numel(dl_model_input_shape(m));
    size_t outs = (size_t)n * (size_t)dl_shape_numel(dl_model_output_shape(m));
    if (ids) {
        int64_t *v = malloc(ins * sizeof *v);
        if (!v)
            return dl_error(DL_ENOMEM, "out of memory");
        for (size_t i = 0; i < ins; i++)
            v[i] = (int64_t)x[i];
        int rc = write_file(dir, "input.bin", v, ins * sizeof *v);
        free(v);
        DL_TRY(rc);
    } else {
        DL_TRY(write_file(dir, "input.bin", x, ins * sizeof *x));
    }
    DL_TRY(write_file(dir, "logits.bin", y, outs * sizeof *y));
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "input_shape", shape_json(n, dl_model_input_shape(m)));
    cJSON_AddStringToObject(j, "input_dtype", ids ? "int64" : "float32");
    cJSON_AddItemToObject(j, "logits_shape", shape_json(n, dl_model_output_shape(m)));
    char *text = cJSON_Print(j);
    int rc = write_file(dir, "meta.json", text, strlen(text));
    free(text);
    cJSON_Delete(j);
    return rc;
}

static int first_is_embedding(dl_model *m)
{
    const dl_layer *l = dl_model_root(m);
    while (l->nchild)
        l = l->child[0];
    return !strcmp(l->vt->kind, "Embedding");
}

enum { HELPER_N = 256 };

static int helper_write(const char *kind, const char *dir)
{
    dl_model *m = NULL;
    int n = HELPER_N;
    int rc = build(&m, kind, n, 42);
    size_t ins = (size_t)n * (size_t)(m ? dl_shape_numel(dl_model_input_shape(m)) : 0);
    size_t outs = (size_t)n * (size_t)(m ? dl_shape_numel(dl_model_output_shape(m)) : 0);
    float *x = malloc(ins * sizeof *x + 4), *y = malloc(outs * sizeof *y + 4);
    if (rc == DL_OK && (!x || !y))
        rc = dl_error(DL_ENOMEM, "out of memory");
    int ids = rc == DL_OK && first_is_embedding(m);
    for (size_t i = 0; rc == DL_OK && i < ins; i++)
        x[i] = ids ? (float)(dl_rng_uniform(3, 1, 0, i) * GPT_VOCAB * 0.9999f)
                   : dl_rng_normal(3, 1, 0, i);
    if (ids)
        for (size_t i = 0; i < ins; i++)
            x[i] = floorf(x[i]);
    if (rc == DL_OK)
        rc = forward(m, n, x, y);
    if (rc == DL_OK)
        rc = write_io(dir, m, n, x, y, ids);
    char path[1200];
    dl_export_options o = {DL_EXPORT_NAMES_TORCH, NULL, 0};
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    if (rc == DL_OK)
        rc = dl_export_onnx(m, path, &o);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (rc == DL_OK)
        rc = dl_export_safetensors(m, path, &o);
    free(x);
    free(y);
    dl_model_destroy(m);
    if (rc < 0)
        fprintf(stderr, "test_export --write %s: %s\n", kind, dl_error_message());
    return rc < 0 ? 2 : 0;
}

/* The first n validation samples of a run, after its normalisation. */
static int helper_run(const char *run, const char *dir, int n)
{
    dl_run_model r;
    dl_run_model_options o = {run, NULL, NULL, "test_export", n, NULL};
    int rc = dl_run_model_open(&r, &o);
    float *y = NULL;
    if (rc == DL_OK && !r.val)
        rc = dl_error(DL_EINVAL, "%s has no validation split", run);
    dl_batch b = {0};
    if (rc == DL_OK)
        rc = r.val->ops->start_epoch(r.val, 0, 0);
    if (rc == DL_OK && (rc = r.val->ops->next(r.val, &b)) >= 0)
        rc = rc == 1 ? DL_OK : dl_error(DL_EINVAL, "%s: the validation split is empty", run);
    if (rc == DL_OK) {
        const dl_data_info *in = &r.val->info;
        dl_backend *be = dl_model_backend(r.model);
        size_t sample = (size_t)dl_shape_numel(&in->sample);
        int ch = in->channels;
        rc = be->ops->input_to_f32(be, dl_model_input(r.model), b.x, in->x_dtype, (size_t)b.n,
                                   ch > 0 ? ch : 1, ch > 0 ? sample / (size_t)ch : sample,
                                   in->scale != 0 ? in->scale : 1.0f, ch > 0 ? in->mean : NULL,
                                   ch > 0 ? in->std : NULL);
    }
    size_t outs =
        (size_t)b.n * (size_t)(r.model ? dl_shape_numel(dl_model_output_shape(r.model)) : 0);
    if (rc == DL_OK && !(y = malloc(outs * sizeof *y + 4)))
        rc = dl_error(DL_ENOMEM, "out of memory");
    if (rc == DL_OK) {
        size_t ins = (size_t)b.n * (size_t)dl_shape_numel(dl_model_input_shape(r.model));
        float *x = malloc(ins * sizeof *x + 4);
        if (!x)
            rc = dl_error(DL_ENOMEM, "out of memory");
        if (rc == DL_OK) {
            memcpy(x, dl_model_input(r.model), ins * sizeof *x);
            rc = forward(r.model, b.n, x, y);
        }
        if (rc == DL_OK)
            rc = write_io(dir, r.model, b.n, x, y, first_is_embedding(r.model));
        free(x);
    }
    free(y);
    if (rc < 0)
        fprintf(stderr, "test_export --run %s: %s\n", run, dl_error_message());
    dl_run_model_close(&r);
    return rc < 0 ? 2 : 0;
}

/* --- unit tests ---------------------------------------------------------------- */

/* The protobuf encoding guide's examples: field 1 = 150 is 08 96 01; a
 * string "testing" in field 2 is 12 07 74 65 73 74 69 6e 67; int64 -1 is
 * ten bytes (ff x9, 01); a float in field 2 is 15 + 4 LE bytes. */
static void test_pb_wire_bytes(void)
{
    dl_pb b;
    dl_pb_init(&b);
    dl_pb_varint(&b, 1, 150);
    dl_pb_string(&b, 2, "testing");
    dl_pb_int64(&b, 3, -1);
    dl_pb_float(&b, 2, 1.0f);
    static const unsigned char want[] = {0x08, 0x96, 0x01, 0x12, 0x07, 't',  'e',  's',  't',  'i',
                                         'n',  'g',  0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0x01, 0x15, 0x00, 0x00, 0x80, 0x3f};
    CHECK(dl_pb_ok(&b));
    CHECK_MSG(b.len == sizeof want, "%zu bytes, expected %zu", b.len, sizeof want);
    CHECK(b.len == sizeof want && !memcmp(b.data, want, sizeof want));
    dl_pb child;
    dl_pb_init(&child);
    dl_pb_varint(&child, 1, 150);
    dl_pb outer;
    dl_pb_init(&outer);
    dl_pb_message(&outer, 3, &child); /* the guide's embedded message: 1a 03 08 96 01 */
    static const unsigned char want2[] = {0x1a, 0x03, 0x08, 0x96, 0x01};
    CHECK(outer.len == 5 && !memcmp(outer.data, want2, 5));
    dl_pb_done(&b);
    dl_pb_done(&b); /* twice is fine */
    dl_pb_done(&child);
    dl_pb_done(&outer);
}

static const char *name_of(dl_model *m, int i, dl_export_names names, char *buf, size_t size)
{
    const dl_param *p = dl_model_param(m, i);
    if (dl_export_tensor_name(m, p->layer, p->name, names, buf, size) < 0)
        return "(error)";
    return buf;
}

/* The torch names of the resnet: stem 0/1, block 3 = Sequential(Residual,
 * ReLU) with block and shortcut, then the head; the engine's names as they
 * are. */
static void test_torch_names(void)
{
    dl_model *m = NULL;
    CHECK_OK(build(&m, "resnet", 2, 1));
    if (!m)
        return;
    char buf[160];
    static const char *want[] = {"0.weight",           "1.weight",           "1.bias",
                                 "3.0.block.0.weight", "3.0.block.1.weight", "3.0.block.1.bias",
                                 "3.0.block.3.weight", "3.0.block.4.weight", "3.0.block.4.bias",
                                 "4.0.block.0.weight"};
    for (int i = 0; i < 10; i++)
        CHECK_MSG(!strcmp(name_of(m, i, DL_EXPORT_NAMES_TORCH, buf, sizeof buf), want[i]),
                  "param %d: %s, expected %s", i, buf, want[i]);
    int found_shortcut = 0;
    for (int i = 0; i < dl_model_num_params(m); i++)
        found_shortcut +=
            !strcmp(name_of(m, i, DL_EXPORT_NAMES_TORCH, buf, sizeof buf), "4.0.shortcut.0.weight");
    CHECK(found_shortcut == 1);
    CHECK(!strcmp(name_of(m, 0, DL_EXPORT_NAMES_DLBENCH, buf, sizeof buf),
                  dl_model_param(m, 0)->name));
    const dl_buffer *b = dl_model_buffer(m, 0);
    CHECK(dl_export_tensor_name(m, b->layer, b->name, DL_EXPORT_NAMES_TORCH, buf, sizeof buf) ==
              DL_OK &&
          !strcmp(buf, "1.running_mean"));
    dl_model_destroy(m);
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        buf[size] = 0;
    *n = (size_t)size;
    return buf;
}

/* The file read back by hand: header length, 8-byte alignment, every
 * parameter's bytes at its offsets equal to the model's. */
static void test_safetensors_read_back(void)
{
    dl_model *m = NULL;
    CHECK_OK(build(&m, "cnn", 2, 5));
    if (!m)
        return;
    char path[] = "/tmp/test_export_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    const char *meta[][2] = {{"run", "r1"}};
    dl_export_options o = {DL_EXPORT_NAMES_TORCH, meta, 1};
    CHECK_OK(dl_export_safetensors(m, path, &o));
    size_t n = 0;
    char *buf = read_all(path, &n);
    CHECK(buf && n > 8);
    if (!buf || n <= 8)
        goto out;
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)(unsigned char)buf[i] << (8 * i);
    CHECK(hl % 8 == 0 && 8 + hl <= n);
    char *h = strndup(buf + 8, hl);
    cJSON *j = cJSON_Parse(h);
    CHECK(j != NULL);
    cJSON *md = cJSON_GetObjectItem(j, "__metadata__");
    CHECK(md && !strcmp(cJSON_GetObjectItem(md, "run")->valuestring, "r1"));
    dl_model_state s;
    dl_model_get_state(m, &s);
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        char name[160];
        name_of(m, i, DL_EXPORT_NAMES_TORCH, name, sizeof name);
        cJSON *e = cJSON_GetObjectItem(j, name);
        CHECK_MSG(e != NULL, "no %s in the header", name);
        if (!e)
            continue;
        cJSON *off = cJSON_GetObjectItem(e, "data_offsets");
        size_t b0 = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
        size_t b1 = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        CHECK(b1 - b0 == p->count * 4 && 8 + hl + b1 <= n);
        CHECK(!memcmp(buf + 8 + hl + b0, s.params + p->offset, p->count * 4));
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(e, "shape")) == p->shape.ndim);
    }
    cJSON *nbt = cJSON_GetObjectItem(j, "1.num_batches_tracked");
    CHECK(nbt && !strcmp(cJSON_GetObjectItem(nbt, "dtype")->valuestring, "I64"));
    cJSON_Delete(j);
    free(h);
out:
    free(buf);
    unlink(path);
    dl_model_destroy(m);
}

/* A layer kind the exporter does not know: refused naming it, no file. */
static int mystery_setup(dl_layer *l, dl_model *m, const dl_shape *in, dl_shape *out)
{
    *out = *in;
    return DL_OK;
}
static int mystery_plan(dl_layer *l, dl_model *m, int n) { return DL_OK; }
static int mystery_forward(dl_layer *l, dl_pass *p, const float *x, float *y) { return DL_OK; }
static const dl_layer_vt mystery_vt = {
    .kind = "Mystery", .setup = mystery_setup, .plan = mystery_plan, .forward = mystery_forward};

static void check_refused(dl_layer *root, const dl_shape *in, const char *needle)
{
    dl_model *m = NULL;
    CHECK_OK(dl_model_create(&m, root, in));
    if (!m)
        return;
    CHECK_OK(dl_model_init_state(m, dl_backend_cpu(0), 0, 1));
    char path[] = "/tmp/test_export_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    unlink(path);
    int rc = dl_export_onnx(m, path, NULL);
    CHECK(rc == DL_EUNSUPPORTED);
    CHECK_MSG(strstr(dl_error_message(), needle) != NULL, "message: %s", dl_error_message());
    CHECK(access(path, F_OK) != 0);
    dl_model_destroy(m);
}

static void test_onnx_refuses_inexpressible_layers(void)
{
    dl_layer *x = calloc(1, sizeof *x);
    x->vt = &mystery_vt;
    dl_shape in1 = {1, {4}};
    check_refused(SEQ(dl_nn_linear(4, 4, 1), x), &in1, "Mystery2");
    dl_shape in3 = {3, {2, 7, 7}};
    check_refused(SEQ(dl_nn_adaptive_avgpool2d(3, 3)), &in3, "AdaptiveAvgPool2d1");
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--write"))
        return helper_write(argv[2], argv[3]);
    if (argc == 5 && !strcmp(argv[1], "--run"))
        return helper_run(argv[2], argv[3], atoi(argv[4]));
    RUN(test_pb_wire_bytes);
    RUN(test_torch_names);
    RUN(test_safetensors_read_back);
    RUN(test_onnx_refuses_inexpressible_layers);
    CHECK_EXIT();
}
