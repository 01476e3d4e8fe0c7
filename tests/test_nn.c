/* test_nn.c - layers and losses against finite differences; optimizers and schedules against hand-computed values */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/backend.h"
#include "engine/base/error.h"
#include "engine/base/half.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/base/rng.h"
#include "tests/check.h"

static dl_backend *be;

static void fill_random(float *x, size_t n, uint64_t seed, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * (2.0f * dl_rng_uniform(seed, 7, 0, i) - 1.0f);
}

/* A single layer wrapped in a model, driven directly so the input gradient
 * can be checked too. Loss L = sum(r * y) for fixed random r. */
typedef struct {
    dl_model *m;
    dl_layer *l;
    int n;
    size_t nin, nout;
    float *x, *r, *dx;
} harness;

static int harness_init(harness *h, dl_layer *l, const dl_shape *in, int n)
{
    memset(h, 0, sizeof *h);
    h->l = l;
    h->n = n;
    int rc = dl_model_create(&h->m, l, in);
    if (rc < 0)
        return rc;
    DL_TRY(dl_model_init_state(h->m, be, 0, 42));
    DL_TRY(dl_model_plan(h->m, n));
    h->nin = (size_t)n * (size_t)dl_shape_numel(in);
    h->nout = (size_t)n * (size_t)dl_shape_numel(dl_model_output_shape(h->m));
    h->x = calloc(h->nin, 4);
    h->r = calloc(h->nout, 4);
    h->dx = calloc(h->nin, 4);
    fill_random(h->x, h->nin, 1, 1.0f);
    fill_random(h->r, h->nout, 2, 1.0f);
    return DL_OK;
}

static void harness_done(harness *h)
{
    dl_model_destroy(h->m);
    free(h->x);
    free(h->r);
    free(h->dx);
}

static double harness_loss(harness *h, int training)
{
    dl_pass p;
    dl_model_pass(h->m, &p, h->n, training, DL_PREC_F32, 5, 3);
    float *y = dl_model_output(h->m);
    int rc = h->l->vt->forward(h->l, &p, h->x, y);
    if (rc < 0)
        return NAN;
    double s = 0;
    for (size_t i = 0; i < h->nout; i++)
        s += (double)h->r[i] * y[i];
    return s;
}

/* Analytic gradients of x and of every parameter versus central
 * differences, relative to the largest gradient. */
static void check_gradients(harness *h, float eps, double tol, int check_x, int training)
{
    dl_model_state s;
    dl_model_get_state(h->m, &s);
    memset(s.grads, 0, s.count * 4);
    memset(h->dx, 0, h->nin * 4);
    /* buffers (BatchNorm running stats) change with each training forward:
     * keep a copy to restore so every loss evaluation is the same function */
    float *buf = malloc((s.buffer_count + 1) * 4);
    memcpy(buf, s.buffers, s.buffer_count * 4);
    double l0 = harness_loss(h, training);
    CHECK(isfinite(l0));
    dl_pass p;
    dl_model_pass(h->m, &p, h->n, training, DL_PREC_F32, 5, 3);
    CHECK_OK(
        h->l->vt->backward(h->l, &p, h->x, dl_model_output(h->m), h->r, check_x ? h->dx : NULL));
    double gmax = 1e-6, worst = 0;
    if (check_x) {
        for (size_t i = 0; i < h->nin; i++)
            gmax = fmax(gmax, fabs(h->dx[i]));
        for (size_t i = 0; i < h->nin; i++) {
            float keep = h->x[i];
            h->x[i] = keep + eps;
            memcpy(s.buffers, buf, s.buffer_count * 4);
            double lp = harness_loss(h, training);
            h->x[i] = keep - eps;
            memcpy(s.buffers, buf, s.buffer_count * 4);
            double lm = harness_loss(h, training);
            h->x[i] = keep;
            double fd = (lp - lm) / (2 * eps);
            double err = fabs(fd - h->dx[i]) / gmax;
            if (err > worst)
                worst = err;
        }
        CHECK_MSG(worst <= tol, "input gradient: worst relative error %.3g > %.3g", worst, tol);
    }
    double pmax = 1e-6, pworst = 0;
    for (int k = 0; k < dl_model_num_params(h->m); k++) {
        const dl_param *pp = dl_model_param(h->m, k);
        for (size_t i = 0; i < pp->count; i++)
            pmax = fmax(pmax, fabs(s.grads[pp->offset + i]));
    }
    for (int k = 0; k < dl_model_num_params(h->m); k++) {
        const dl_param *pp = dl_model_param(h->m, k);
        for (size_t i = 0; i < pp->count; i++) {
            float *w = s.params + pp->offset + i;
            float keep = *w;
            *w = keep + eps;
            memcpy(s.buffers, buf, s.buffer_count * 4);
            double lp = harness_loss(h, training);
            *w = keep - eps;
            memcpy(s.buffers, buf, s.buffer_count * 4);
            double lm = harness_loss(h, training);
            *w = keep;
            double fd = (lp - lm) / (2 * eps);
            double err = fabs(fd - s.grads[pp->offset + i]) / pmax;
            if (err > pworst)
                pworst = err;
        }
    }
    CHECK_MSG(pworst <= tol, "parameter gradient: worst relative error %.3g > %.3g", pworst, tol);
    free(buf);
}

/* Tolerances: central differences in f32 with eps 1e-2 on O(1) values have
 * truncation error O(eps^2) and rounding error ~1e-7 * |L| / eps; 1e-2 of
 * the largest gradient separates a correct gradient from a wrong one. */
#define TOL 1e-2

/* Input preparation for ops with kinks: finite differences straddling a
 * kink are meaningless, so keep inputs 2.5 eps away from them. */
enum { PLAIN, AWAY_FROM_ZERO, DISTINCT };

static void gradcheck_prep(dl_layer *l, dl_shape in, int n, int check_x, int prep)
{
    harness h;
    int rc = harness_init(&h, l, &in, n);
    CHECK_OK(rc);
    if (prep == AWAY_FROM_ZERO)
        for (size_t i = 0; i < h.nin; i++)
            h.x[i] += h.x[i] >= 0 ? 0.05f : -0.05f;
    if (prep == DISTINCT) /* a permutation of values 0.05 apart: no ties in a window */
        for (size_t i = 0; i < h.nin; i++)
            h.x[i] = 0.05f * (float)((i * 37) % h.nin) - 1.0f;
    if (rc == DL_OK)
        check_gradients(&h, 1e-2f, TOL, check_x, 1);
    harness_done(&h);
}

static void gradcheck(dl_layer *l, dl_shape in, int n, int check_x)
{
    gradcheck_prep(l, in, n, check_x, PLAIN);
}

static void test_linear_grad(void) { gradcheck(dl_nn_linear(7, 5, 1), (dl_shape){1, {7}}, 3, 1); }
static void test_linear_seq_grad(void)
{
    /* Linear over the last dimension of a [4, 6] sample */
    gradcheck(dl_nn_linear(6, 3, 0), (dl_shape){2, {4, 6}}, 2, 1);
}
static void test_conv_grad(void)
{
    gradcheck(dl_nn_conv2d(2, 3, 3, 1, 1, 1), (dl_shape){3, {2, 5, 6}}, 2, 1);
}
static void test_conv_stride_grad(void)
{
    gradcheck(dl_nn_conv2d(3, 2, 3, 2, 0, 1), (dl_shape){3, {3, 7, 7}}, 2, 1);
}
static void test_maxpool_grad(void)
{
    gradcheck_prep(dl_nn_maxpool2d(2, 2, 0), (dl_shape){3, {2, 6, 6}}, 2, 1, DISTINCT);
}
static void test_maxpool_overlap_grad(void)
{
    gradcheck_prep(dl_nn_maxpool2d(3, 2, 1), (dl_shape){3, {1, 7, 7}}, 2, 1, DISTINCT);
}
static void test_avgpool_grad(void)
{
    gradcheck(dl_nn_avgpool2d(3, 2, 1), (dl_shape){3, {2, 6, 5}}, 2, 1);
}
static void test_relu_grad(void)
{
    gradcheck_prep(dl_nn_activation(DL_ACT_RELU), (dl_shape){1, {9}}, 3, 1, AWAY_FROM_ZERO);
}
static void test_gelu_grad(void)
{
    gradcheck(dl_nn_activation(DL_ACT_GELU), (dl_shape){1, {9}}, 3, 1);
}
static void test_tanh_grad(void)
{
    gradcheck(dl_nn_activation(DL_ACT_TANH), (dl_shape){1, {9}}, 3, 1);
}
static void test_sigmoid_grad(void)
{
    gradcheck(dl_nn_activation(DL_ACT_SIGMOID), (dl_shape){1, {9}}, 3, 1);
}
static void test_dropout_grad(void) { gradcheck(dl_nn_dropout(0.3f), (dl_shape){1, {40}}, 3, 1); }
static void test_batchnorm1d_grad(void)
{
    gradcheck(dl_nn_batchnorm(4, 1e-5f, 0.1f), (dl_shape){1, {4}}, 6, 1);
}
static void test_batchnorm2d_grad(void)
{
    gradcheck(dl_nn_batchnorm(3, 1e-5f, 0.1f), (dl_shape){3, {3, 4, 4}}, 2, 1);
}
static void test_layernorm_grad(void)
{
    gradcheck(dl_nn_layernorm(8, 1e-5f), (dl_shape){2, {3, 8}}, 2, 1);
}
static void test_flatten_grad(void) { gradcheck(dl_nn_flatten(), (dl_shape){3, {2, 3, 2}}, 2, 1); }
static void test_embedding_grad(void)
{
    harness h;
    CHECK_OK(harness_init(&h, dl_nn_embedding(11, 4), &(dl_shape){1, {5}}, 3));
    for (size_t i = 0; i < h.nin; i++)
        h.x[i] = (float)((i * 7) % 11); /* repeated indices accumulate */
    check_gradients(&h, 1e-2f, TOL, 0, 1);
    harness_done(&h);
}
static void test_residual_grad(void)
{
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_linear(6, 6, 1));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_TANH));
    gradcheck(dl_nn_residual(seq), (dl_shape){1, {6}}, 3, 1);
}
static dl_layer *conv_gd(int in, int out, int k, int stride, int pad, int groups, int dilation)
{
    dl_conv2d_opts o = {stride, pad, dilation, groups, 1};
    return dl_nn_conv2d_with(in, out, k, &o);
}
static void test_conv_grouped_grad(void)
{
    gradcheck(conv_gd(4, 6, 3, 1, 1, 2, 1), (dl_shape){3, {4, 5, 6}}, 2, 1);
}
static void test_conv_depthwise_grad(void)
{
    gradcheck(conv_gd(3, 3, 3, 2, 1, 3, 1), (dl_shape){3, {3, 7, 6}}, 2, 1);
    gradcheck(conv_gd(2, 4, 3, 1, 1, 2, 1), (dl_shape){3, {2, 5, 5}}, 2, 1); /* multiplier 2 */
}
static void test_conv_dilated_grad(void)
{
    gradcheck(conv_gd(2, 3, 3, 1, 2, 1, 2), (dl_shape){3, {2, 7, 6}}, 2, 1);
}
static void test_adaptive_pool_grad(void)
{
    gradcheck(dl_nn_adaptive_avgpool2d(1, 1), (dl_shape){3, {3, 5, 4}}, 2, 1);
    gradcheck(dl_nn_adaptive_avgpool2d(3, 2), (dl_shape){3, {2, 7, 5}}, 2, 1);
}
static void test_silu_grad(void)
{
    gradcheck(dl_nn_activation(DL_ACT_SILU), (dl_shape){1, {9}}, 3, 1);
    /* the values: x * sigmoid(x) */
    harness h;
    CHECK_OK(harness_init(&h, dl_nn_activation(DL_ACT_SILU), &(dl_shape){1, {4}}, 1));
    dl_pass p;
    dl_model_pass(h.m, &p, 1, 0, DL_PREC_F32, 0, 0);
    float *y = dl_model_output(h.m);
    CHECK_OK(h.l->vt->forward(h.l, &p, h.x, y));
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(y[i], h.x[i] / (1.0 + exp(-(double)h.x[i])), 1e-6);
    harness_done(&h);
}
static void test_identity_grad(void)
{
    gradcheck(dl_nn_identity(), (dl_shape){3, {2, 3, 2}}, 2, 1);
    /* after a layer in a Sequential: its backward_set writes the gradient */
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_linear(5, 4, 1));
    dl_nn_sequential_add(seq, dl_nn_identity());
    dl_nn_sequential_add(seq, dl_nn_linear(4, 3, 1));
    gradcheck(seq, (dl_shape){1, {5}}, 3, 1);
}

/* conv 3x3 (stride) -> BN -> act -> conv 3x3 -> BN, the ResNet block
 * (act ReLU; GELU for finite differences, which ReLU's kink would spoil). */
static dl_layer *basic_block_act(int cin, int cout, int stride, dl_act act)
{
    dl_layer *b = dl_nn_sequential();
    dl_conv2d_opts o1 = {stride, 1, 1, 1, 0}, o2 = {1, 1, 1, 1, 0};
    dl_nn_sequential_add(b, dl_nn_conv2d_with(cin, cout, 3, &o1));
    dl_nn_sequential_add(b, dl_nn_batchnorm(cout, 1e-5f, 0.1f));
    dl_nn_sequential_add(b, dl_nn_activation(act));
    dl_nn_sequential_add(b, dl_nn_conv2d_with(cout, cout, 3, &o2));
    dl_nn_sequential_add(b, dl_nn_batchnorm(cout, 1e-5f, 0.1f));
    return b;
}

static dl_layer *basic_block(int cin, int cout, int stride)
{
    return basic_block_act(cin, cout, stride, DL_ACT_RELU);
}

/* 1x1 conv (stride) -> BN: the projection shortcut. */
static dl_layer *projection(int cin, int cout, int stride)
{
    dl_layer *s = dl_nn_sequential();
    dl_conv2d_opts o = {stride, 0, 1, 1, 0};
    dl_nn_sequential_add(s, dl_nn_conv2d_with(cin, cout, 1, &o));
    dl_nn_sequential_add(s, dl_nn_batchnorm(cout, 1e-5f, 0.1f));
    return s;
}

static void test_residual_projection_grad(void)
{
    /* a stride-2 block that doubles the channels, the shortcut projects */
    gradcheck(dl_nn_residual_shortcut(basic_block_act(2, 4, 2, DL_ACT_GELU), projection(2, 4, 2)),
              (dl_shape){3, {2, 6, 6}}, 3, 1);
    /* inside a Sequential, after a layer: the residual writes its dx
     * (backward_set) with and without a shortcut */
    dl_layer *blk = dl_nn_sequential();
    dl_nn_sequential_add(blk, dl_nn_linear(6, 6, 1));
    dl_nn_sequential_add(blk, dl_nn_activation(DL_ACT_TANH));
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_linear(5, 6, 1));
    dl_nn_sequential_add(seq, dl_nn_residual_shortcut(blk, dl_nn_linear(6, 6, 0)));
    dl_nn_sequential_add(seq, dl_nn_residual(dl_nn_linear(6, 6, 1)));
    gradcheck(seq, (dl_shape){1, {5}}, 3, 1);
}

static void test_residual_shape_error(void)
{
    /* the block halves the image, the shortcut does not */
    dl_model *m = NULL;
    dl_layer *r = dl_nn_residual_shortcut(basic_block(2, 4, 2), projection(2, 4, 1));
    int rc = dl_model_create(&m, r, &(dl_shape){3, {2, 8, 8}});
    CHECK(rc == DL_ESHAPE && m == NULL);
    const char *msg = dl_error_message();
    CHECK_MSG(strstr(msg, "nn.Residual") && strstr(msg, "block Sequential1 gives [4, 4, 4]") &&
                  strstr(msg, "shortcut Sequential7 gives [4, 8, 8]"),
              "message: %s", msg);
    /* an identity shortcut on a block that changes the shape */
    rc = dl_model_create(&m, dl_nn_residual(dl_nn_linear(3, 4, 1)), &(dl_shape){1, {3}});
    CHECK(rc == DL_ESHAPE);
    CHECK_MSG(strstr(dl_error_message(), "gives [4] but the identity shortcut gives [3]"),
              "message: %s", dl_error_message());
    /* groups that do not divide the channels, a zero output size */
    CHECK(conv_gd(6, 4, 3, 1, 1, 4, 1) == NULL);
    CHECK_MSG(strstr(dl_error_message(), "divisible by groups 4"), "message: %s",
              dl_error_message());
    CHECK(dl_nn_adaptive_avgpool2d(0, 1) == NULL);
}

/* --- golden values from PyTorch (tests/golden/resnet_block.py) ------------ */

typedef struct golden {
    char name[16];
    size_t n;
    float *v;
} golden;

#define GOLDEN_MAX 32

/* Reads case `name` of tests/golden/resnet_block.txt: its tensors and its
 * meta integers. Returns the number of tensors (0: file or case missing). */
static int golden_read(const char *name, golden *g, int *meta, int nmeta)
{
    FILE *f = fopen("tests/golden/resnet_block.txt", "r");
    if (!f)
        return 0;
    char tok[64];
    int in_case = 0, count = 0;
    while (fscanf(f, "%63s", tok) == 1) {
        if (tok[0] == '#') {
            char line[256];
            if (!fgets(line, sizeof line, f))
                break;
        } else if (!strcmp(tok, "case")) {
            if (in_case || fscanf(f, "%63s", tok) != 1)
                break;
            in_case = !strcmp(tok, name);
        } else if (!strcmp(tok, "meta")) {
            for (int i = 0; i < nmeta; i++)
                if (fscanf(f, "%d", &meta[i]) != 1 || !in_case)
                    meta[i] = 0; /* another case's: skipped below as values */
        } else if (!strcmp(tok, "tensor")) {
            golden t = {{0}, 0, NULL};
            if (fscanf(f, "%15s %zu", t.name, &t.n) != 2)
                break;
            t.v = malloc((t.n + 1) * sizeof *t.v);
            for (size_t i = 0; i < t.n; i++)
                if (fscanf(f, "%f", &t.v[i]) != 1)
                    t.v[i] = NAN;
            if (in_case && count < GOLDEN_MAX)
                g[count++] = t;
            else
                free(t.v);
        }
    }
    fclose(f);
    return count;
}

static const golden *golden_find(const golden *g, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(g[i].name, name))
            return &g[i];
    return NULL;
}

/* got against want within 1e-4 of want's largest magnitude. */
static void golden_compare(const char *what, const float *got, const golden *want)
{
    double mx = 1e-12, worst = 0;
    for (size_t i = 0; i < want->n; i++)
        mx = fmax(mx, fabs(want->v[i]));
    for (size_t i = 0; i < want->n; i++)
        worst = fmax(worst, fabs(got[i] - want->v[i]) / mx);
    CHECK_MSG(worst <= 1e-4, "%s: worst error %.3g of its largest value (limit 1e-4)", what, worst);
}

/* Runs root (training mode) on the case's x and parameters; compares the
 * output, the input gradient and every parameter gradient of sum(r * y). */
static void golden_case(const char *name, dl_layer *root, dl_shape in, int n)
{
    golden g[GOLDEN_MAX];
    int meta[1];
    int ng = golden_read(name, g, meta, 0);
    harness h;
    CHECK_OK(harness_init(&h, root, &in, n));
    if (check_current_failed)
        return;
    CHECK_MSG(ng > 0,
              "tests/golden/resnet_block.txt lacks case %s (run tests/golden/resnet_block.py)",
              name);
    const golden *x = golden_find(g, ng, "x"), *r = golden_find(g, ng, "r");
    const golden *y = golden_find(g, ng, "y"), *dx = golden_find(g, ng, "dx");
    CHECK(x && r && y && dx && x->n == h.nin && r->n == h.nout && y->n == h.nout);
    dl_model_state s;
    dl_model_get_state(h.m, &s);
    int np = dl_model_num_params(h.m);
    for (int k = 0; k < np && !check_current_failed; k++) {
        char pn[16];
        snprintf(pn, sizeof pn, "p%d", k);
        const golden *pv = golden_find(g, ng, pn);
        const dl_param *pp = dl_model_param(h.m, k);
        CHECK_MSG(pv && pv->n == pp->count, "%s: parameter %s (%s)", name, pn, pp->name);
        if (pv && pv->n == pp->count)
            memcpy(s.params + pp->offset, pv->v, pv->n * 4);
    }
    if (!check_current_failed) {
        memcpy(h.x, x->v, h.nin * 4);
        memcpy(h.r, r->v, h.nout * 4);
        memset(s.grads, 0, s.count * 4);
        dl_pass p;
        dl_model_pass(h.m, &p, h.n, 1, DL_PREC_F32, 5, 3);
        float *out = dl_model_output(h.m);
        CHECK_OK(h.l->vt->forward(h.l, &p, h.x, out));
        golden_compare("y", out, y);
        CHECK_OK(h.l->vt->backward(h.l, &p, h.x, out, h.r, h.dx));
        golden_compare("dx", h.dx, dx);
        for (int k = 0; k < np; k++) {
            char gn[16];
            snprintf(gn, sizeof gn, "g%d", k);
            const golden *gv = golden_find(g, ng, gn);
            const dl_param *pp = dl_model_param(h.m, k);
            CHECK_MSG(gv && gv->n == pp->count, "%s: gradient %s", name, gn);
            if (gv && gv->n == pp->count)
                golden_compare(pp->name, s.grads + pp->offset, gv);
        }
    }
    for (int i = 0; i < ng; i++)
        free(g[i].v);
    harness_done(&h);
}

static void test_golden_convs(void)
{
    golden_case("grouped_conv", conv_gd(6, 4, 3, 1, 1, 2, 1), (dl_shape){3, {6, 7, 6}}, 2);
    golden_case("depthwise_conv", conv_gd(4, 4, 3, 2, 1, 4, 1), (dl_shape){3, {4, 8, 7}}, 2);
    golden_case("dilated_conv", conv_gd(3, 6, 3, 1, 2, 3, 2), (dl_shape){3, {3, 9, 8}}, 1);
}

static void test_golden_basic_block(void)
{
    /* relu(block(x) + projection(x)), 4 -> 8 channels, stride 2 */
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_residual_shortcut(basic_block(4, 8, 2), projection(4, 8, 2)));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
    golden_case("basic_block", seq, (dl_shape){3, {4, 8, 8}}, 3);
}

static void test_sequential_grad(void)
{
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_conv2d(1, 2, 3, 1, 1, 1));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_GELU));
    dl_nn_sequential_add(seq, dl_nn_avgpool2d(2, 2, 0));
    dl_nn_sequential_add(seq, dl_nn_flatten());
    dl_nn_sequential_add(seq, dl_nn_linear(8, 3, 1));
    gradcheck(seq, (dl_shape){3, {1, 4, 4}}, 2, 1);
}

/* One training forward and backward of h's model on backend b, from the
 * given running statistics (NULL: as they are), parameter gradients
 * zeroed and the caller's dx at 0.5 (it is added to): copies of the
 * output, the parameter gradients and dx. */
typedef struct {
    float *out, *grads, *dx;
} pass_result;

static void run_pass(harness *h, dl_backend *b, const float *buffers, pass_result *r)
{
    dl_model_state s;
    dl_model_get_state(h->m, &s);
    dl_pass p;
    dl_model_pass(h->m, &p, h->n, 1, DL_PREC_F32, 5, 3);
    p.be = b;
    if (buffers)
        memcpy(s.buffers, buffers, s.buffer_count * 4);
    memset(s.grads, 0, s.count * 4);
    for (size_t i = 0; i < h->nin; i++)
        h->dx[i] = 0.5f;
    float *y = dl_model_output(h->m);
    CHECK_OK(h->l->vt->forward(h->l, &p, h->x, y));
    CHECK_OK(h->l->vt->backward(h->l, &p, h->x, y, h->r, h->dx));
    r->out = malloc(h->nout * 4);
    r->grads = malloc(s.count * 4);
    r->dx = malloc(h->nin * 4);
    memcpy(r->out, y, h->nout * 4);
    memcpy(r->grads, s.grads, s.count * 4);
    memcpy(r->dx, h->dx, h->nin * 4);
}

static void pass_result_free(pass_result *r)
{
    free(r->out);
    free(r->grads);
    free(r->dx);
}

/* A Sequential runs ReLU -> MaxPool2d as one fused backend op and lets
 * Linear and Flatten overwrite their input gradients instead of zeroing
 * them: outputs, parameter gradients and the input gradient must be bit
 * for bit those of the same model on an op table without the fused ops
 * (each plain op is checked against finite differences above). The
 * fused table counts its calls to show the fused path ran. */
static int fused_calls;
static const dl_backend_ops *real_ops;
static int count_fwd(dl_backend *b, const dl_pool_desc *d, float *y, const float *x)
{
    fused_calls++;
    return real_ops->relu_maxpool_forward(b, d, y, x);
}
static int count_bwd(dl_backend *b, const dl_pool_desc *d, float *dx, const float *dy,
                     const float *x, const float *y)
{
    fused_calls++;
    return real_ops->relu_maxpool_backward(b, d, dx, dy, x, y);
}

static void test_relu_pool_fusion(void)
{
    real_ops = be->ops;
    if (!real_ops->relu_maxpool_forward) {
        SKIP("the CPU backend has no fused ReLU -> max pooling");
        return;
    }
    dl_backend_ops fused_ops = *be->ops, plain_ops = *be->ops;
    fused_ops.relu_maxpool_forward = count_fwd;
    fused_ops.relu_maxpool_backward = count_bwd;
    plain_ops.relu_maxpool_forward = NULL;
    plain_ops.relu_maxpool_backward = NULL;
    dl_backend fused = *be, plain = *be;
    fused.ops = &fused_ops;
    plain.ops = &plain_ops;

    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_conv2d(1, 4, 3, 1, 1, 1));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(seq, dl_nn_maxpool2d(2, 2, 0)); /* 4 x 5 x 5 */
    dl_nn_sequential_add(seq, dl_nn_conv2d(4, 4, 3, 1, 1, 1));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(seq, dl_nn_maxpool2d(3, 2, 1)); /* 4 x 3 x 3, overlapping */
    dl_nn_sequential_add(seq, dl_nn_flatten());
    dl_nn_sequential_add(seq, dl_nn_linear(36, 8, 1));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(seq, dl_nn_linear(8, 3, 1));
    harness h;
    dl_shape in = {3, {1, 10, 10}};
    CHECK_OK(harness_init(&h, seq, &in, 4));
    if (check_current_failed)
        return;
    dl_model_state s;
    dl_model_get_state(h.m, &s);
    size_t np = s.count;
    pass_result r[2];
    run_pass(&h, &fused, NULL, &r[0]);
    CHECK_MSG(fused_calls == 4, "fused op called %d times, expected 2 forward + 2 backward",
              fused_calls);
    run_pass(&h, &plain, NULL, &r[1]);
    CHECK(memcmp(r[0].out, r[1].out, h.nout * 4) == 0);
    CHECK(memcmp(r[0].grads, r[1].grads, np * 4) == 0);
    CHECK(memcmp(r[0].dx, r[1].dx, h.nin * 4) == 0);
    double gsum = 0;
    for (size_t i = 0; i < np; i++)
        gsum += fabs(r[0].grads[i]);
    CHECK(gsum > 0); /* the gradients compared are not all zero */
    pass_result_free(&r[0]);
    pass_result_free(&r[1]);
    harness_done(&h);
}

/* A Sequential lets Conv2d, BatchNorm and the activations WRITE their
 * input gradients where nothing else writes them (the op table's *_set
 * ops): outputs, parameter gradients and the input gradient must equal
 * those of the same model on an op table without the set ops, which
 * zeroes each such dx and adds into it. The set ops count their calls to
 * show they ran. */
static int set_calls;
static int count_act_set(dl_backend *b, dl_act kind, float *dx, const float *x, const float *y,
                         const float *dy, size_t n)
{
    set_calls++;
    return real_ops->act_backward_set(b, kind, dx, x, y, dy, n);
}
static int count_bn_set(dl_backend *b, int n, int c, int inner, float *dx, float *dgamma,
                        float *dbeta, const float *dy, const float *x, const float *gamma,
                        const float *sm, const float *si)
{
    set_calls++;
    return real_ops->batchnorm_backward_set(b, n, c, inner, dx, dgamma, dbeta, dy, x, gamma, sm,
                                            si);
}
static int count_conv_set(dl_backend *b, const dl_conv_desc *d, float *dx, const float *dy,
                          const float *w, void *ws, size_t wsb, dl_dtype compute)
{
    set_calls++;
    return real_ops->conv_backward_data_set(b, d, dx, dy, w, ws, wsb, compute);
}

static void test_backward_set_ops(void)
{
    real_ops = be->ops;
    if (!real_ops->act_backward_set || !real_ops->batchnorm_backward_set ||
        !real_ops->conv_backward_data_set) {
        SKIP("the CPU backend has no set ops");
        return;
    }
    dl_backend_ops set_ops = *be->ops, add_ops = *be->ops;
    set_ops.act_backward_set = count_act_set;
    set_ops.batchnorm_backward_set = count_bn_set;
    set_ops.conv_backward_data_set = count_conv_set;
    add_ops.act_backward_set = NULL;
    add_ops.batchnorm_backward_set = NULL;
    add_ops.conv_backward_data_set = NULL;
    /* the convolutions' separate ops, whose set op is counted */
    set_ops.conv_backward = add_ops.conv_backward = NULL;
    /* BatchNorm -> ReLU unfused in both, so each runs its own set op */
    set_ops.batchnorm_relu_forward = add_ops.batchnorm_relu_forward = NULL;
    set_ops.batchnorm_relu_backward_set = add_ops.batchnorm_relu_backward_set = NULL;
    dl_backend with_set = *be, adding = *be;
    with_set.ops = &set_ops;
    adding.ops = &add_ops;

    /* conv -> BN -> ReLU, a residual block with a projection shortcut
     * (8 and 16 channels: oneDNN's kernels where the build has them; the
     * shortcut a Sequential that writes its dx), a GELU, then the head */
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_conv2d(3, 8, 3, 1, 1, 1));
    dl_nn_sequential_add(seq, dl_nn_batchnorm(8, 1e-5f, 0.1f));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(seq, dl_nn_residual_shortcut(basic_block(8, 16, 2), projection(8, 16, 2)));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_GELU));
    dl_nn_sequential_add(seq, dl_nn_conv2d(16, 8, 1, 1, 0, 1));
    dl_nn_sequential_add(seq, dl_nn_flatten());
    dl_nn_sequential_add(seq, dl_nn_linear(8 * 5 * 5, 4, 1));
    harness h;
    dl_shape in = {3, {3, 10, 10}};
    CHECK_OK(harness_init(&h, seq, &in, 6));
    if (check_current_failed)
        return;
    dl_model_state s;
    dl_model_get_state(h.m, &s);
    size_t np = s.count;
    float *buf0 = malloc((s.buffer_count + 1) * 4); /* both from the same running statistics */
    memcpy(buf0, s.buffers, s.buffer_count * 4);
    pass_result r[2];
    run_pass(&h, &with_set, buf0, &r[0]);
    /* conv 1x1, GELU; the shortcut's BN and conv; the block's BN, conv,
     * ReLU, BN (its first conv adds into the residual's dx); ReLU, BN
     * (the first conv adds into the caller's dx) */
    CHECK_MSG(set_calls == 10, "set ops called %d times, expected 10", set_calls);
    run_pass(&h, &adding, buf0, &r[1]);
    size_t bad = 0;
    for (size_t i = 0; i < h.nout; i++)
        bad += !(r[0].out[i] == r[1].out[i]);
    for (size_t i = 0; i < np; i++)
        bad += !(r[0].grads[i] == r[1].grads[i]);
    for (size_t i = 0; i < h.nin; i++)
        bad += !(r[0].dx[i] == r[1].dx[i]);
    CHECK_MSG(bad == 0, "%zu values differ between the set ops and zero + add", bad);
    double gsum = 0, dsum = 0;
    for (size_t i = 0; i < np; i++)
        gsum += fabs(r[0].grads[i]);
    for (size_t i = 0; i < h.nin; i++)
        dsum += fabs(r[0].dx[i] - 0.5f);
    CHECK(gsum > 0 && dsum > 0); /* what is compared is not all zero */
    pass_result_free(&r[0]);
    pass_result_free(&r[1]);
    free(buf0);
    harness_done(&h);
}

/* A ReLU absorbs the BatchNorm before it (one op each way, the mask
 * recomputed from x in the backward): outputs, parameter gradients,
 * running statistics and the input gradient equal those of the same model
 * on a table without the fused pair. Covered: BatchNorm over channels and
 * over features, a BatchNorm -> ReLU -> MaxPool2d chain (the ReLU takes
 * the BatchNorm, the pool runs alone, in both directions), a fused
 * BatchNorm whose input gradient nobody wants (it follows a Flatten at the
 * model's start), and the eval forward. */
static int bn_relu_calls;
static int count_bn_relu_fwd(dl_backend *b, int training, int n, int c, int inner, float mom,
                             float eps, float *y, const float *x, const float *g, const float *bt,
                             float *rm, float *rv, float *sm, float *si)
{
    bn_relu_calls++;
    return real_ops->batchnorm_relu_forward(b, training, n, c, inner, mom, eps, y, x, g, bt, rm, rv,
                                            sm, si);
}
static int count_bn_relu_bwd(dl_backend *b, int n, int c, int inner, float *dx, float *dg,
                             float *db, const float *dy, const float *x, const float *g,
                             const float *bt, const float *sm, const float *si)
{
    bn_relu_calls++;
    return real_ops->batchnorm_relu_backward_set(b, n, c, inner, dx, dg, db, dy, x, g, bt, sm, si);
}

static void check_bn_relu_model(dl_layer *seq, dl_shape in, int fused_pairs)
{
    dl_backend_ops fused_ops = *be->ops, plain_ops = *be->ops;
    fused_ops.batchnorm_relu_forward = count_bn_relu_fwd;
    fused_ops.batchnorm_relu_backward_set = count_bn_relu_bwd;
    plain_ops.batchnorm_relu_forward = NULL;
    plain_ops.batchnorm_relu_backward_set = NULL;
    dl_backend fused = *be, plain = *be;
    fused.ops = &fused_ops;
    plain.ops = &plain_ops;
    harness h;
    CHECK_OK(harness_init(&h, seq, &in, 5));
    if (check_current_failed)
        return;
    dl_model_state s;
    dl_model_get_state(h.m, &s);
    size_t np = s.count, nb = s.buffer_count;
    /* gamma and beta away from 1 and 0, so the mask depends on them */
    for (size_t i = 0; i < np; i++)
        s.params[i] += 0.3f * (float)sin(1.7 * (double)i);
    float *buf0 = malloc((nb + 1) * 4), *buf_after[2];
    memcpy(buf0, s.buffers, nb * 4);
    pass_result r[2];
    dl_backend *tables[2] = {&fused, &plain};
    bn_relu_calls = 0;
    for (int k = 0; k < 2; k++) {
        run_pass(&h, tables[k], buf0, &r[k]);
        buf_after[k] = malloc((nb + 1) * 4);
        memcpy(buf_after[k], s.buffers, nb * 4);
    }
    CHECK_MSG(bn_relu_calls == 2 * fused_pairs, "fused ops called %d times, expected %d",
              bn_relu_calls, 2 * fused_pairs);
    size_t bad = 0, zeros = 0;
    for (size_t i = 0; i < h.nout; i++)
        bad += !(r[0].out[i] == r[1].out[i]);
    for (size_t i = 0; i < np; i++)
        bad += !(r[0].grads[i] == r[1].grads[i]);
    for (size_t i = 0; i < h.nin; i++)
        bad += !(r[0].dx[i] == r[1].dx[i]);
    for (size_t i = 0; i < nb; i++)
        bad += !(buf_after[0][i] == buf_after[1][i]);
    for (size_t i = 0; i < np; i++)
        zeros += r[0].grads[i] == 0;
    CHECK_MSG(bad == 0, "%zu values differ between the fused pair and the two ops", bad);
    CHECK_MSG(zeros < np / 2, "%zu of %zu parameter gradients are 0", zeros, np);

    /* eval: the running statistics, fused and not */
    dl_pass p;
    float *y = dl_model_output(h.m), *ey = malloc(h.nout * 4);
    for (int k = 0; k < 2; k++) {
        dl_model_pass(h.m, &p, h.n, 0, DL_PREC_F32, 5, 3);
        p.be = tables[k];
        CHECK_OK(h.l->vt->forward(h.l, &p, h.x, y));
        if (k == 0)
            memcpy(ey, y, h.nout * 4);
    }
    bad = 0;
    for (size_t i = 0; i < h.nout; i++)
        bad += !(ey[i] == y[i]);
    CHECK_MSG(bad == 0, "eval: %zu outputs differ", bad);
    free(ey);
    for (int k = 0; k < 2; k++) {
        pass_result_free(&r[k]);
        free(buf_after[k]);
    }
    free(buf0);
    harness_done(&h);
}

static void test_bn_relu_fusion(void)
{
    real_ops = be->ops;
    if (!real_ops->batchnorm_relu_forward || !real_ops->batchnorm_relu_backward_set) {
        SKIP("the CPU backend has no fused BatchNorm -> ReLU");
        return;
    }
    /* conv-BN-ReLU; conv-BN-ReLU-MaxPool; a residual block inside; then
     * Linear-BN(features)-ReLU */
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_conv2d(2, 6, 3, 1, 1, 1));
    dl_nn_sequential_add(seq, dl_nn_batchnorm(6, 1e-5f, 0.1f));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(seq, dl_nn_conv2d(6, 8, 3, 1, 1, 1));
    dl_nn_sequential_add(seq, dl_nn_batchnorm(8, 1e-5f, 0.1f));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(seq, dl_nn_maxpool2d(2, 2, 0)); /* 8 x 4 x 4 */
    dl_nn_sequential_add(seq, dl_nn_residual(basic_block(8, 8, 1)));
    dl_nn_sequential_add(seq, dl_nn_flatten());
    dl_nn_sequential_add(seq, dl_nn_linear(8 * 4 * 4, 12, 1));
    dl_nn_sequential_add(seq, dl_nn_batchnorm(12, 1e-5f, 0.1f));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(seq, dl_nn_linear(12, 3, 1));
    /* the basic block has one BN -> ReLU pair of its own */
    check_bn_relu_model(seq, (dl_shape){3, {2, 9, 9}}, 4);

    /* Flatten first: the fused BatchNorm's input gradient is not wanted */
    dl_layer *head = dl_nn_sequential();
    dl_nn_sequential_add(head, dl_nn_flatten());
    dl_nn_sequential_add(head, dl_nn_batchnorm(20, 1e-5f, 0.1f));
    dl_nn_sequential_add(head, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(head, dl_nn_linear(20, 4, 1));
    check_bn_relu_model(head, (dl_shape){3, {5, 2, 2}}, 1);
}

/* Residual -> ReLU: the ReLU absorbs the Residual where the backend has
 * add_relu_forward / add_relu_backward_set; the model against the same
 * model on a table without them, bit for bit, with and without the input
 * gradient wanted. */
static int res_relu_calls;
static int count_add_relu_fwd(dl_backend *b, float *y, const float *a, const float *c, size_t n)
{
    res_relu_calls++;
    return real_ops->add_relu_forward(b, y, a, c, n);
}
static int count_add_relu_bwd(dl_backend *b, float *da, float *db, const float *y, const float *dy,
                              size_t n)
{
    res_relu_calls++;
    return real_ops->add_relu_backward_set(b, da, db, y, dy, n);
}

static void check_res_relu_model(dl_layer *seq, dl_shape in, int fused_pairs, int want_dx)
{
    dl_backend_ops fused_ops = *be->ops, plain_ops = *be->ops;
    fused_ops.add_relu_forward = count_add_relu_fwd;
    fused_ops.add_relu_backward_set = count_add_relu_bwd;
    plain_ops.add_relu_forward = NULL;
    plain_ops.add_relu_backward_set = NULL;
    dl_backend fused = *be, plain = *be;
    fused.ops = &fused_ops;
    plain.ops = &plain_ops;
    harness h;
    CHECK_OK(harness_init(&h, seq, &in, 5));
    if (check_current_failed)
        return;
    dl_model_state s;
    dl_model_get_state(h.m, &s);
    size_t np = s.count, nb = s.buffer_count;
    for (size_t i = 0; i < np; i++)
        s.params[i] += 0.3f * (float)sin(1.7 * (double)i);
    float *buf0 = malloc((nb + 1) * 4), *out[2], *grads[2], *dx[2], *bufs[2];
    memcpy(buf0, s.buffers, nb * 4);
    dl_backend *tables[2] = {&fused, &plain};
    res_relu_calls = 0;
    for (int k = 0; k < 2; k++) {
        dl_pass p;
        dl_model_pass(h.m, &p, h.n, 1, DL_PREC_F32, 5, 3);
        p.be = tables[k];
        memcpy(s.buffers, buf0, nb * 4);
        memset(s.grads, 0, np * 4);
        for (size_t i = 0; i < h.nin; i++)
            h.dx[i] = 0.5f;
        float *y = dl_model_output(h.m);
        CHECK_OK(h.l->vt->forward(h.l, &p, h.x, y));
        CHECK_OK(h.l->vt->backward(h.l, &p, h.x, y, h.r, want_dx ? h.dx : NULL));
        out[k] = malloc(h.nout * 4);
        grads[k] = malloc(np * 4);
        dx[k] = malloc(h.nin * 4);
        bufs[k] = malloc((nb + 1) * 4);
        memcpy(out[k], y, h.nout * 4);
        memcpy(grads[k], s.grads, np * 4);
        memcpy(dx[k], h.dx, h.nin * 4);
        memcpy(bufs[k], s.buffers, nb * 4);
    }
    CHECK_MSG(res_relu_calls == 2 * fused_pairs, "fused ops called %d times, expected %d",
              res_relu_calls, 2 * fused_pairs);
    size_t bad = 0, zeros = 0, moved = 0;
    for (size_t i = 0; i < h.nout; i++)
        bad += !(out[0][i] == out[1][i]);
    for (size_t i = 0; i < np; i++)
        bad += !(grads[0][i] == grads[1][i]);
    for (size_t i = 0; i < h.nin; i++) {
        bad += !(dx[0][i] == dx[1][i]) || signbit(dx[0][i]) != signbit(dx[1][i]);
        moved += dx[0][i] != 0.5f;
    }
    for (size_t i = 0; i < nb; i++)
        bad += !(bufs[0][i] == bufs[1][i]);
    for (size_t i = 0; i < np; i++)
        zeros += grads[0][i] == 0;
    CHECK_MSG(bad == 0, "%zu values differ between the fused pair and the two ops", bad);
    CHECK_MSG(zeros < np / 2, "%zu of %zu parameter gradients are 0", zeros, np);
    /* the input gradient was added to where wanted, left alone where not */
    CHECK_MSG(want_dx ? moved > h.nin / 2 : moved == 0, "%zu of %zu input gradients changed", moved,
              h.nin);
    for (int k = 0; k < 2; k++) {
        free(out[k]);
        free(grads[k]);
        free(dx[k]);
        free(bufs[k]);
    }
    free(buf0);
    harness_done(&h);
}

static void test_residual_relu_fusion(void)
{
    real_ops = be->ops;
    if (!real_ops->add_relu_forward || !real_ops->add_relu_backward_set) {
        SKIP("the CPU backend has no fused add + ReLU");
        return;
    }
    for (int want_dx = 0; want_dx < 2; want_dx++) {
        /* a stem, an identity block and a projection block, each
         * followed by a ReLU; the Residual never first (a container's
         * first child adds into the caller's dx) */
        dl_layer *seq = dl_nn_sequential();
        dl_nn_sequential_add(seq, dl_nn_conv2d(2, 4, 3, 1, 1, 1));
        dl_nn_sequential_add(seq, dl_nn_residual(basic_block(4, 4, 1)));
        dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
        dl_nn_sequential_add(seq,
                             dl_nn_residual_shortcut(basic_block(4, 6, 2), projection(4, 6, 2)));
        dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
        dl_nn_sequential_add(seq, dl_nn_flatten());
        dl_nn_sequential_add(seq, dl_nn_linear(6 * 4 * 4, 3, 1));
        check_res_relu_model(seq, (dl_shape){3, {2, 7, 7}}, 2, want_dx);

        /* nothing with parameters before the Residual: with the caller's
         * dx not wanted, the fused backward computes no input gradient */
        dl_layer *head = dl_nn_sequential();
        dl_nn_sequential_add(head, dl_nn_flatten());
        dl_nn_sequential_add(head, dl_nn_residual(dl_nn_linear(12, 12, 1)));
        dl_nn_sequential_add(head, dl_nn_activation(DL_ACT_RELU));
        dl_nn_sequential_add(head, dl_nn_linear(12, 2, 1));
        check_res_relu_model(head, (dl_shape){3, {3, 2, 2}}, 1, want_dx);

        /* ResNet's habit, Sequential { Residual, ReLU } per block: the pair
         * first in its container, which writes its dx (inside) or adds
         * into the caller's (outermost: identity and projection) */
        dl_layer *net = dl_nn_sequential(), *b1 = dl_nn_sequential(), *b2 = dl_nn_sequential();
        dl_nn_sequential_add(net, dl_nn_conv2d(2, 4, 3, 1, 1, 1));
        dl_nn_sequential_add(b1, dl_nn_residual(basic_block(4, 4, 1)));
        dl_nn_sequential_add(b1, dl_nn_activation(DL_ACT_RELU));
        dl_nn_sequential_add(net, b1);
        dl_nn_sequential_add(b2,
                             dl_nn_residual_shortcut(basic_block(4, 6, 2), projection(4, 6, 2)));
        dl_nn_sequential_add(b2, dl_nn_activation(DL_ACT_RELU));
        dl_nn_sequential_add(net, b2);
        dl_nn_sequential_add(net, dl_nn_flatten());
        dl_nn_sequential_add(net, dl_nn_linear(6 * 4 * 4, 3, 1));
        check_res_relu_model(net, (dl_shape){3, {2, 7, 7}}, 2, want_dx);
        for (int proj = 0; proj < 2; proj++) {
            dl_layer *top = dl_nn_sequential();
            dl_nn_sequential_add(
                top, proj ? dl_nn_residual_shortcut(basic_block(2, 3, 1), projection(2, 3, 1))
                          : dl_nn_residual(basic_block(2, 2, 1)));
            dl_nn_sequential_add(top, dl_nn_activation(DL_ACT_RELU));
            dl_nn_sequential_add(top, dl_nn_flatten());
            dl_nn_sequential_add(top, dl_nn_linear((proj ? 3 : 2) * 5 * 5, 2, 1));
            check_res_relu_model(top, (dl_shape){3, {2, 5, 5}}, 1, want_dx);
        }
    }
}

/* Dropout writes its input gradient with the forward op on dy: the same
 * values as its adding backward into zeros, whatever dx held. */
static void test_dropout_backward_set(void)
{
    harness h;
    dl_layer *l = dl_nn_dropout(0.3f);
    dl_shape in = {1, {300}};
    CHECK_OK(harness_init(&h, l, &in, 7));
    if (check_current_failed)
        return;
    dl_pass p;
    dl_model_pass(h.m, &p, h.n, 1, DL_PREC_F32, 5, 3);
    float *y = dl_model_output(h.m), *set = malloc(h.nin * 4);
    CHECK_OK(l->vt->forward(l, &p, h.x, y));
    memset(h.dx, 0, h.nin * 4);
    for (size_t i = 0; i < h.nin; i++)
        set[i] = NAN;
    CHECK_OK(l->vt->backward(l, &p, h.x, y, h.r, h.dx));
    CHECK_OK(l->vt->backward_set(l, &p, h.x, y, h.r, set));
    size_t bad = 0, dropped = 0;
    for (size_t i = 0; i < h.nin; i++) {
        bad += !(set[i] == h.dx[i]);
        dropped += h.dx[i] == 0.0f;
    }
    CHECK_MSG(bad == 0, "%zu of %zu differ", bad, h.nin);
    /* about 30% dropped: the mask was applied */
    CHECK_MSG(dropped > h.nin / 5 && dropped < h.nin * 2 / 5, "%zu of %zu dropped", dropped, h.nin);
    free(set);
    harness_done(&h);
}

static void test_train_flops(void)
{
    /* Flatten -> Linear(784, 512) -> ReLU -> Linear(512, 10): backward is
     * twice the forward except the first Linear's input gradient */
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(784, 512, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(512, 10, 1));
    dl_model *m;
    CHECK_OK(dl_model_create(&m, s, &(dl_shape){3, {1, 28, 28}}));
    double fwd = 2.0 * 784 * 512 + 512 + 2.0 * 512 * 10;
    CHECK_NEAR(dl_model_flops(m), fwd, 0);
    CHECK_NEAR(dl_model_train_flops(m), 3 * fwd - 2.0 * 784 * 512, 0);
    dl_model_destroy(m);
    /* a Residual first: every input gradient is computed */
    dl_layer *r = dl_nn_residual(dl_nn_linear(4, 4, 0));
    CHECK_OK(dl_model_create(&m, r, &(dl_shape){1, {4}}));
    CHECK_NEAR(dl_model_train_flops(m), 3 * dl_model_flops(m), 0);
    dl_model_destroy(m);
}

static void test_batchnorm_eval(void)
{
    /* eval mode normalises with the running statistics */
    harness h;
    CHECK_OK(harness_init(&h, dl_nn_batchnorm(2, 1e-5f, 0.1f), &(dl_shape){1, {2}}, 4));
    dl_model_state s;
    dl_model_get_state(h.m, &s);
    s.buffers[0] = 0.5f;  /* running mean of channel 0 */
    s.buffers[16] = 4.0f; /* running var of channel 0 (buffers padded to 16) */
    s.params[0] = 2.0f;   /* gamma 0 */
    s.params[16] = 1.0f;  /* beta 0 */
    dl_pass p;
    dl_model_pass(h.m, &p, 4, 0, DL_PREC_F32, 0, 0);
    float *y = dl_model_output(h.m);
    CHECK_OK(h.l->vt->forward(h.l, &p, h.x, y));
    for (int r = 0; r < 4; r++)
        CHECK_NEAR(y[r * 2], 2.0 * (h.x[r * 2] - 0.5) / sqrt(4.0 + 1e-5) + 1.0, 1e-5);
    /* training updates the running mean with momentum 0.1 */
    dl_model_pass(h.m, &p, 4, 1, DL_PREC_F32, 0, 0);
    CHECK_OK(h.l->vt->forward(h.l, &p, h.x, y));
    double mean = 0;
    for (int r = 0; r < 4; r++)
        mean += h.x[r * 2] / 4.0;
    CHECK_NEAR(s.buffers[0], 0.9 * 0.5 + 0.1 * mean, 1e-6);
    harness_done(&h);
}

static void test_shape_errors(void)
{
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_flatten());
    dl_nn_sequential_add(seq, dl_nn_linear(100, 10, 1));
    dl_model *m = NULL;
    int rc = dl_model_create(&m, seq, &(dl_shape){3, {1, 28, 28}});
    CHECK(rc == DL_ESHAPE);
    CHECK_MSG(strstr(dl_error_message(), "Linear(100, 10)") &&
                  strstr(dl_error_message(), "Flatten") && strstr(dl_error_message(), "[784]"),
              "message: %s", dl_error_message());
    CHECK(m == NULL);
    CHECK(dl_nn_linear(0, 3, 1) == NULL);
    CHECK(dl_nn_dropout(1.5f) == NULL);
    CHECK(dl_nn_conv2d(1, 1, 3, 0, 0, 1) == NULL);
}

/* --- losses ------------------------------------------------------------------ */

static void test_xent(void)
{
    const int rows = 3, classes = 5;
    float z[15], d[15] = {0}, stats[2] = {0};
    int32_t y[3] = {0, 4, 2};
    fill_random(z, 15, 9, 2.0f);
    float smooth = 0.1f;
    CHECK_OK(be->ops->softmax_xent(be, rows, classes, z, y, smooth, 1.0f, d, stats));
    /* reference in double */
    double ref = 0;
    for (int r = 0; r < rows; r++) {
        double mx = -1e30, s = 0;
        for (int c = 0; c < classes; c++)
            mx = fmax(mx, z[r * classes + c]);
        for (int c = 0; c < classes; c++)
            s += exp(z[r * classes + c] - mx);
        for (int c = 0; c < classes; c++) {
            double logp = z[r * classes + c] - mx - log(s);
            double t = smooth / classes + (c == y[r] ? 1 - smooth : 0);
            ref -= t * logp;
        }
    }
    CHECK_NEAR(stats[0], ref, 1e-4);
    /* gradient against finite differences of the summed loss */
    for (int i = 0; i < 15; i++) {
        float keep = z[i], st[2] = {0};
        z[i] = keep + 1e-2f;
        be->ops->softmax_xent(be, rows, classes, z, y, smooth, 1, NULL, st);
        double lp = st[0];
        st[0] = 0;
        z[i] = keep - 1e-2f;
        be->ops->softmax_xent(be, rows, classes, z, y, smooth, 1, NULL, st);
        z[i] = keep;
        CHECK_NEAR(d[i], (lp - st[0]) / 2e-2, 2e-3);
    }
    /* accuracy counter: argmax of each row against the label */
    int correct = 0;
    for (int r = 0; r < rows; r++) {
        int arg = 0;
        for (int c = 1; c < classes; c++)
            if (z[r * classes + c] > z[r * classes + arg])
                arg = c;
        correct += arg == y[r];
    }
    CHECK_NEAR(stats[1], correct, 0);
}

static void test_mse_bce(void)
{
    float p[6], t[6], d[6] = {0}, st[2] = {0};
    fill_random(p, 6, 3, 2.0f);
    for (int i = 0; i < 6; i++)
        t[i] = (float)(i % 2);
    CHECK_OK(be->ops->mse(be, 6, p, t, 1.0f, d, st));
    double ref = 0;
    for (int i = 0; i < 6; i++) {
        ref += (p[i] - t[i]) * (p[i] - t[i]);
        CHECK_NEAR(d[i], 2 * (p[i] - t[i]), 1e-6);
    }
    CHECK_NEAR(st[0], ref, 1e-5);
    memset(d, 0, sizeof d);
    st[0] = st[1] = 0;
    CHECK_OK(be->ops->bce_logits(be, 6, p, t, 1.0f, d, st));
    ref = 0;
    for (int i = 0; i < 6; i++) {
        double s = 1 / (1 + exp(-(double)p[i]));
        ref -= t[i] * log(s) + (1 - t[i]) * log(1 - s);
        CHECK_NEAR(d[i], s - t[i], 1e-6);
    }
    CHECK_NEAR(st[0], ref, 1e-5);
    /* large logits stay finite */
    float big[2] = {80.0f, -80.0f}, tb[2] = {0.0f, 1.0f}, s2[2] = {0};
    CHECK_OK(be->ops->bce_logits(be, 2, big, tb, 1.0f, NULL, s2));
    CHECK_NEAR(s2[0], 160.0, 1e-3);
}

/* --- optimizers ---------------------------------------------------------------- */

/* A model of one Linear(2, 1) without bias: two parameters. */
static dl_model *tiny_model(int moments)
{
    dl_model *m;
    dl_model_create(&m, dl_nn_linear(2, 1, 0), &(dl_shape){1, {2}});
    dl_model_init_state(m, be, moments, 1);
    dl_model_state s;
    dl_model_get_state(m, &s);
    s.params[0] = 1.0f;
    s.params[1] = -2.0f;
    return m;
}

static void set_grads(dl_model *m, float g0, float g1)
{
    dl_model_state s;
    dl_model_get_state(m, &s);
    s.grads[0] = g0;
    s.grads[1] = g1;
}

static void test_sgd(void)
{
    /* momentum 0.9, weight decay 0.1 (the weight decays), lr 0.5,
     * hand-computed: d = g + wd w; m = 0.9 m + d; w -= lr m */
    dl_optim o = dl_optim_sgd(0.5f, 0.9f, 0, 0.1f);
    dl_model *m = tiny_model(1);
    dl_model_state s;
    dl_model_get_state(m, &s);
    set_grads(m, 0.2f, 0.4f);
    CHECK_OK(dl_optim_step(&o, m, 0.5f, 1, 1.0f));
    /* d0 = 0.2 + 0.1 = 0.3 -> w0 = 1 - 0.15 = 0.85; d1 = 0.4 - 0.2 = 0.2 -> w1 = -2.1 */
    CHECK_NEAR(s.params[0], 0.85, 1e-6);
    CHECK_NEAR(s.params[1], -2.1, 1e-6);
    CHECK(s.grads[0] == 0 && s.grads[1] == 0);
    set_grads(m, 0.2f, 0.4f);
    CHECK_OK(dl_optim_step(&o, m, 0.5f, 2, 1.0f));
    /* d0 = 0.2 + 0.085 = 0.285; m0 = 0.27 + 0.285 = 0.555; w0 = 0.85 - 0.2775 */
    CHECK_NEAR(s.params[0], 0.5725, 1e-6);
    dl_model_destroy(m);

    /* Nesterov: w -= lr (d + mu m) */
    o = dl_optim_sgd(0.1f, 0.5f, 1, 0);
    m = tiny_model(1);
    dl_model_get_state(m, &s);
    set_grads(m, 1.0f, 0);
    CHECK_OK(dl_optim_step(&o, m, 0.1f, 1, 1.0f));
    CHECK_NEAR(s.params[0], 1 - 0.1 * (1 + 0.5 * 1), 1e-6);
    set_grads(m, 1.0f, 0);
    CHECK_OK(dl_optim_step(&o, m, 0.1f, 2, 1.0f));
    /* m = 0.5 + 1 = 1.5; step = 1 + 0.75 */
    CHECK_NEAR(s.params[0], 0.85 - 0.1 * 1.75, 1e-6);
    dl_model_destroy(m);
}

static void test_adam(void)
{
    for (int decoupled = 0; decoupled < 2; decoupled++) {
        dl_optim o = decoupled ? dl_optim_adamw(0.01f, 0.1f) : dl_optim_adam(0.01f, 0.1f);
        dl_model *m = tiny_model(2);
        dl_model_state s;
        dl_model_get_state(m, &s);
        double w = 1.0, mm = 0, vv = 0;
        const double g[3] = {0.3, -0.1, 0.5};
        for (int t = 1; t <= 3; t++) {
            set_grads(m, (float)g[t - 1], 0);
            CHECK_OK(dl_optim_step(&o, m, 0.01f, t, 1.0f));
            double gi = g[t - 1] + (decoupled ? 0 : 0.1 * w);
            mm = 0.9 * mm + 0.1 * gi;
            vv = 0.999 * vv + 0.001 * gi * gi;
            double mh = mm / (1 - pow(0.9, t)), vh = vv / (1 - pow(0.999, t));
            if (decoupled)
                w -= 0.01 * 0.1 * w;
            w -= 0.01 * mh / (sqrt(vh) + 1e-8);
            CHECK_NEAR(s.params[0], w, 2e-6);
        }
        dl_model_destroy(m);
    }
}

/* Optimizer state that no gradient reaches any more decays by the
 * momentum each step; it must decay to 0, not stop in the denormals
 * (where 0.9 times the smallest one rounds back to it and every update
 * then runs on microcode assists): SGD with momentum and Adam, 1000 steps
 * of zero gradients, on 1 and 2 threads (each pool thread sets its own
 * flush-to-zero). */
static void test_optimizer_state_leaves_denormals(void)
{
    enum { N = 1 << 16, STEPS = 1000 };
    float *w = malloc(N * sizeof *w), *g = malloc(N * sizeof *g);
    float *m = malloc(N * sizeof *m), *v = malloc(N * sizeof *v);
    for (int threads = 1; threads <= 2; threads++) {
        dl_backend *b = dl_backend_cpu_create(threads);
        CHECK(b != NULL);
        if (!b)
            break;
        for (int adam = 0; adam < 2; adam++) {
            for (int i = 0; i < N; i++) {
                w[i] = 0.5f + (float)(i % 97) / 97.0f;
                m[i] = 1e-3f * (float)(1 + i % 13);
                v[i] = 1e-6f;
                g[i] = 0;
            }
            for (int t = 1; t <= STEPS; t++) {
                int rc = adam ? b->ops->adam_update(b, N, w, g, m, v, 1e-3f, 0.9f, 0.999f, 1e-8f,
                                                    0.0f, 1, t, 1.0f)
                              : b->ops->sgd_update(b, N, w, g, m, 1e-3f, 0.9f, 0.0f, 0, 1.0f);
                CHECK_OK(rc);
            }
            size_t sub = 0, nonzero = 0;
            for (int i = 0; i < N; i++) {
                sub += fpclassify(m[i]) == FP_SUBNORMAL || fpclassify(w[i]) == FP_SUBNORMAL ||
                       fpclassify(v[i]) == FP_SUBNORMAL;
                nonzero += m[i] != 0;
            }
            CHECK_MSG(sub == 0 && nonzero == 0,
                      "%s, %d thread%s: after %d steps without gradients %zu denormal values, "
                      "%zu momenta not 0 (m[0] = %g)",
                      adam ? "adam" : "sgd", threads, threads > 1 ? "s" : "", STEPS, sub, nonzero,
                      (double)m[0]);
        }
        dl_backend_cpu_destroy(b);
    }
    free(w), free(g), free(m), free(v);
}

/* dl_optim_step_lowp writes the low-precision copy in the update's pass
 * (the backend's _lowp ops): the weights and the copy must be the same
 * bits as the update followed by a cast (the path of a backend without
 * those ops), and the copy must be each weight rounded as half.h rounds
 * it. Every optimizer kind, bf16 and f16, weight-decay runs (the biases
 * skip decay, so the update is split), 1 and 2 threads, two steps. */
static int lowp_calls;
static const dl_backend_ops *lowp_real;
static int count_sgd_lowp(dl_backend *b, size_t n, float *w, float *g, float *m, float lr,
                          float momentum, float wd, int nesterov, float grad_scale, void *w_lp,
                          dl_dtype lp)
{
    lowp_calls++;
    return lowp_real->sgd_update_lowp(b, n, w, g, m, lr, momentum, wd, nesterov, grad_scale, w_lp,
                                      lp);
}
static int count_adam_lowp(dl_backend *b, size_t n, float *w, float *g, float *m, float *v,
                           float lr, float beta1, float beta2, float eps, float wd, int decoupled,
                           long step, float grad_scale, void *w_lp, dl_dtype lp)
{
    lowp_calls++;
    return lowp_real->adam_update_lowp(b, n, w, g, m, v, lr, beta1, beta2, eps, wd, decoupled, step,
                                       grad_scale, w_lp, lp);
}

static dl_model *lowp_model(dl_backend *b, int moments)
{
    dl_layer *seq = dl_nn_sequential();
    dl_nn_sequential_add(seq, dl_nn_linear(37, 29, 1));
    dl_nn_sequential_add(seq, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(seq, dl_nn_linear(29, 5, 1));
    dl_model *m;
    dl_model_create(&m, seq, &(dl_shape){1, {37}});
    dl_model_init_state(m, b, moments, 7);
    return m;
}

static void lowp_grads(dl_model *m, int step)
{
    dl_model_state s;
    dl_model_get_state(m, &s);
    for (size_t i = 0; i < s.count; i++)
        s.grads[i] = (float)sin(0.37 * (double)i + step) * (i % 3 ? 0.5f : 2.0f);
}

static void test_optim_lowp_copy(void)
{
    lowp_real = be->ops;
    if (!be->ops->sgd_update_lowp || !be->ops->adam_update_lowp) {
        SKIP("the CPU backend has no update that writes the low-precision copy");
        return;
    }
    const dl_optim opts[] = {
        dl_optim_sgd(0.1f, 0, 0, 0.01f),    dl_optim_sgd(0.1f, 0.9f, 0, 0.01f),
        dl_optim_sgd(0.1f, 0.9f, 1, 0.05f), dl_optim_adam(0.01f, 0.01f),
        dl_optim_adamw(0.01f, 0.1f),
    };
    const dl_dtype lps[] = {DL_BF16, DL_F16};
    for (int threads = 1; threads <= 2; threads++) {
        dl_backend *cpu = dl_backend_cpu(threads);
        dl_backend_ops fused_ops = *cpu->ops, plain_ops = *cpu->ops;
        fused_ops.sgd_update_lowp = count_sgd_lowp;
        fused_ops.adam_update_lowp = count_adam_lowp;
        plain_ops.sgd_update_lowp = NULL;
        plain_ops.adam_update_lowp = NULL;
        lowp_real = cpu->ops;
        dl_backend fused = *cpu, plain = *cpu;
        fused.ops = &fused_ops;
        plain.ops = &plain_ops;
        for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++)
            for (int l = 0; l < 2; l++) {
                const dl_optim *o = &opts[k];
                dl_model *a = lowp_model(&fused, dl_optim_moments(o));
                dl_model *b = lowp_model(&plain, dl_optim_moments(o));
                lowp_calls = 0;
                for (int step = 1; step <= 2; step++) {
                    lowp_grads(a, step);
                    lowp_grads(b, step);
                    CHECK_OK(dl_optim_step_lowp(o, a, o->lr, step, 0.5f, NULL, lps[l]));
                    CHECK_OK(dl_optim_step_lowp(o, b, o->lr, step, 0.5f, NULL, lps[l]));
                }
                CHECK(lowp_calls >= 2 * 2); /* decay runs: at least two calls a step */
                dl_model_state sa, sb;
                dl_model_get_state(a, &sa);
                dl_model_get_state(b, &sb);
                CHECK(sa.count == sb.count);
                CHECK(!memcmp(sa.params, sb.params, sa.count * sizeof(float)));
                /* the copy in the backend's operand type: the bf16/f16
                 * bits, or the f32 they stand for where it emulates */
                int wide = dl_backend_operand_type(cpu, lps[l]) == DL_F32;
                CHECK(!memcmp(sa.params_lp, sb.params_lp, sa.count * (wide ? 4 : 2)));
                size_t bad = 0;
                for (size_t i = 0; i < sa.count; i++) {
                    uint16_t want = lps[l] == DL_BF16 ? dl_f32_to_bf16(sa.params[i])
                                                      : dl_f32_to_f16(sa.params[i]);
                    if (wide) {
                        float f = lps[l] == DL_BF16 ? dl_bf16_to_f32(want) : dl_f16_to_f32(want);
                        bad += memcmp((const float *)sa.params_lp + i, &f, 4) != 0;
                    } else {
                        bad += ((const uint16_t *)sa.params_lp)[i] != want;
                    }
                }
                CHECK(bad == 0);
                dl_model_destroy(a);
                dl_model_destroy(b);
            }
        dl_backend_cpu_destroy(cpu);
    }
}

/* bf16 forward of a planned lowp_model on its backend: y (n x 5). */
static void lowp_forward(dl_model *m, int n, float *y)
{
    dl_pass p;
    dl_model_pass(m, &p, n, 0, DL_PREC_BF16, 1, 0);
    float *x = dl_model_input(m);
    for (int i = 0; i < n * 37; i++)
        x[i] = (float)cos(0.11 * i) * 1.7f;
    CHECK_OK(dl_model_forward(m, &p));
    memcpy(y, dl_model_output(m), (size_t)n * 5 * sizeof(float));
}

/* Whether the model's low-precision copy is its params rounded to bf16,
 * stored as the backend keeps it (bits, or the f32 they stand for). */
static int lowp_copy_ok(dl_model *m)
{
    dl_model_state s;
    dl_model_get_state(m, &s);
    int wide = dl_backend_operand_type(s.storage->be, DL_BF16) == DL_F32;
    size_t bad = 0;
    for (size_t i = 0; i < s.count; i++) {
        uint16_t h = dl_f32_to_bf16(s.params[i]);
        float f = dl_bf16_to_f32(h);
        bad += wide ? memcmp((const float *)s.params_lp + i, &f, 4) != 0
                    : ((const uint16_t *)s.params_lp)[i] != h;
    }
    return bad == 0;
}

/* A model moved between backends that keep the copy in bf16 (ones that
 * say they have bf16 arithmetic: the CPU's ops, lowp bits set; one of
 * them emulating fp16, so 4 bytes a parameter too) and the CPU, which
 * emulates bf16 and keeps rounded f32 (when it has no AVX512_BF16): the
 * arena is resized where needed, the copy written again in the other
 * type, and
 * the outputs and an optimizer step agree bit for bit with a model that
 * stayed. */
static void test_move_lowp_format(void)
{
    dl_backend native = *be, bf16_only = *be;
    native.lowp = DL_LOWP_KNOWN | DL_LOWP_BF16 | DL_LOWP_F16;
    /* bf16 native, fp16 emulated: 4 bytes a parameter like the CPU's,
     * the bf16 copy kept as bits all the same */
    bf16_only.lowp = DL_LOWP_KNOWN | DL_LOWP_BF16;
    CHECK(dl_backend_operand_type(&native, DL_BF16) == DL_BF16);
    CHECK(dl_backend_operand_type(&bf16_only, DL_BF16) == DL_BF16);
    CHECK(dl_backend_operand_type(&bf16_only, DL_F16) == DL_F32);
    dl_model *a = lowp_model(&native, 1), *b = lowp_model(&native, 1);
    enum { N = 6 };
    float ya[N * 5], yb[N * 5];
    dl_optim o = dl_optim_sgd(0.1f, 0.9f, 0, 0.01f);
    dl_model *ms[] = {a, b};
    for (int k = 0; k < 2; k++) {
        dl_model_set_precision(ms[k], DL_PREC_BF16);
        CHECK_OK(dl_model_plan(ms[k], N));
        CHECK_OK(dl_model_refresh_lowp(ms[k], DL_BF16));
    }
    CHECK(lowp_copy_ok(a));
    dl_backend *tos[] = {be, &native, &bf16_only, be, &bf16_only, &native};
    for (int round = 0; round < 6; round++) {
        /* b moves between the three; a stays */
        dl_backend *to = tos[round];
        CHECK_OK(dl_model_move(b, to));
        CHECK(lowp_copy_ok(b));
        lowp_forward(a, N, ya);
        lowp_forward(b, N, yb);
        CHECK_MSG(!memcmp(ya, yb, sizeof ya), "outputs after move %d", round + 1);
        lowp_grads(a, round + 1);
        lowp_grads(b, round + 1);
        CHECK_OK(dl_optim_step_lowp(&o, a, o.lr, round + 1, 1.0f, NULL, DL_BF16));
        CHECK_OK(dl_optim_step_lowp(&o, b, o.lr, round + 1, 1.0f, NULL, DL_BF16));
        CHECK(lowp_copy_ok(b));
        dl_model_state sa, sb;
        dl_model_get_state(a, &sa);
        dl_model_get_state(b, &sb);
        CHECK(!memcmp(sa.params, sb.params, sa.count * sizeof(float)));
    }
    dl_model_destroy(a);
    dl_model_destroy(b);
}

static void test_weight_decay_skips_bias(void)
{
    dl_model *m;
    dl_model_create(&m, dl_nn_linear(1, 1, 1), &(dl_shape){1, {1}});
    dl_model_init_state(m, be, 0, 1);
    dl_model_state s;
    dl_model_get_state(m, &s);
    const dl_param *w = dl_model_param(m, 0), *b = dl_model_param(m, 1);
    s.params[w->offset] = 2.0f;
    s.params[b->offset] = 3.0f;
    dl_optim o = dl_optim_sgd(0.1f, 0, 0, 0.5f);
    CHECK_OK(dl_optim_step(&o, m, 0.1f, 1, 1.0f));
    CHECK_NEAR(s.params[w->offset], 2.0 - 0.1 * 0.5 * 2.0, 1e-6);
    CHECK_NEAR(s.params[b->offset], 3.0, 0);
    dl_model_destroy(m);
}

static void test_clip(void)
{
    dl_model *m = tiny_model(0);
    set_grads(m, 3.0f, 4.0f);
    double norm;
    CHECK_OK(dl_clip_grad_norm(m, 1.0f, 1.0f, &norm));
    CHECK_NEAR(norm, 5.0, 1e-6);
    dl_model_state s;
    dl_model_get_state(m, &s);
    CHECK_NEAR(s.grads[0], 0.6, 1e-6);
    CHECK_NEAR(s.grads[1], 0.8, 1e-6);
    set_grads(m, INFINITY, 0);
    CHECK_OK(dl_clip_grad_norm(m, 1.0f, 1.0f, &norm));
    CHECK(!isfinite(norm));
    dl_model_destroy(m);
}

static void test_schedules(void)
{
    dl_schedule s = dl_schedule_constant();
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 50, 100), 0.1, 1e-7);
    s.kind = DL_SCHED_STEP;
    s.step_size = 10;
    s.gamma = 0.5f;
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 9, 100), 0.1, 1e-7);
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 25, 100), 0.025, 1e-7);
    s = dl_schedule_constant();
    s.kind = DL_SCHED_WARMUP;
    s.warmup = 4;
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 0, 100), 0.025, 1e-7);
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 3, 100), 0.1, 1e-7);
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 50, 100), 0.1, 1e-7);
    s.kind = DL_SCHED_COSINE;
    s.warmup = 10;
    s.min_lr = 0;
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 4, 110), 0.05, 1e-7);
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 10, 110), 0.1, 1e-7);
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 60, 110), 0.05, 1e-6); /* half way: cos(pi/2) */
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 110, 110), 0.0, 1e-7);
    s = dl_schedule_constant();
    s.kind = DL_SCHED_ONECYCLE;
    s.max_lr = 1.0f; /* start 1/25, end 1/25/1e4, peak at 30% */
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 0, 101), 0.04, 1e-6);
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 29, 101), 1.0 - 0.96 * 0.5 * (1 + cos(M_PI * 29 / 29.3)),
               1e-5);
    CHECK_NEAR(dl_schedule_lr(&s, 0.1f, 100, 101), 0.04 / 1e4, 1e-8);
    s = dl_schedule_constant();
    s.kind = DL_SCHED_PLATEAU;
    s.patience = 1;
    s.factor = 0.5f;
    CHECK(dl_schedule_epoch_end(&s, 1.0) == 0);
    CHECK(dl_schedule_epoch_end(&s, 0.9) == 0);  /* improved */
    CHECK(dl_schedule_epoch_end(&s, 0.95) == 0); /* 1 bad epoch: within patience */
    CHECK(dl_schedule_epoch_end(&s, 0.95) == 1); /* 2 bad: reduce */
    CHECK_NEAR(dl_schedule_lr(&s, 0.2f, 0, 10), 0.1, 1e-7);
}

/* --- precision ------------------------------------------------------------------ */

static void test_half_roundtrip(void)
{
    /* exact values survive, rounding is to nearest even, overflow is Inf */
    const float exact[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        CHECK_NEAR(dl_f16_to_f32(dl_f32_to_f16(exact[i])), exact[i], 0);
    CHECK(isinf(dl_f16_to_f32(dl_f32_to_f16(65520.0f))));
    CHECK_NEAR(dl_f16_to_f32(dl_f32_to_f16(65519.0f)), 65504.0, 0);
    CHECK_NEAR(dl_f16_to_f32(dl_f32_to_f16(1.0f + 1.0f / 2048)), 1.0, 0); /* tie to even */
    CHECK_NEAR(dl_f16_to_f32(dl_f32_to_f16(1.0f + 3.0f / 2048)), 1.0 + 2.0 / 1024, 0);
    CHECK(dl_f32_to_f16(1e-9f) == 0);
    CHECK(isnan(dl_f16_to_f32(dl_f32_to_f16(NAN))));
    CHECK_NEAR(dl_bf16_to_f32(dl_f32_to_bf16(1.0f + 1.0f / 256)), 1.0, 0); /* tie: even */
    CHECK_NEAR(dl_bf16_to_f32(dl_f32_to_bf16(1.0f + 3.0f / 256)), 1.0 + 2.0 / 128, 0);
    CHECK(isnan(dl_bf16_to_f32(dl_f32_to_bf16(NAN))));
    /* every f16 value round-trips through f32 exactly */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t v = (uint16_t)h;
        float f = dl_f16_to_f32(v);
        if (!isnan(f) && dl_f32_to_f16(f) != v)
            bad++;
    }
    CHECK_MSG(bad == 0, "%d f16 values do not round-trip", bad);
    /* the backend's vector casts agree with the scalar ones */
    float x[100], back[100];
    uint16_t h16[100];
    fill_random(x, 100, 4, 1000.0f);
    CHECK_OK(be->ops->cast(be, h16, DL_BF16, x, DL_F32, 100));
    CHECK_OK(be->ops->cast(be, back, DL_F32, h16, DL_BF16, 100));
    for (int i = 0; i < 100; i++)
        CHECK_NEAR(back[i], dl_bf16_to_f32(dl_f32_to_bf16(x[i])), 0);
    CHECK_OK(be->ops->cast(be, h16, DL_F16, x, DL_F32, 100));
    CHECK_OK(be->ops->cast(be, back, DL_F32, h16, DL_F16, 100));
    for (int i = 0; i < 100; i++)
        CHECK_NEAR(back[i], dl_f16_to_f32(dl_f32_to_f16(x[i])), 0);
    /* fp16 bit for bit with half.h, the edges too: NaNs in a vector group
     * of their own and among ordinary values, infinities, the overflow
     * boundary (65519 stays, 65520 becomes inf), subnormals and their
     * rounding, signed zeros; and every one of the 65536 halves back */
    static const uint32_t edge[24] = {
        0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa00000u, 0x3f800000u, 0x477fefffu,
        0x477ff000u, 0xc77ff000u, 0x7f800000u, 0xff800000u, 0x33000000u, 0x33000001u,
        0x387fc000u, 0x38800000u, 0x80000000u, 0x00000000u, 0x33800000u, 0xb3c00000u,
        0x3f801000u, 0x3f803000u, 0x00000001u, 0x3c7fffffu, 0x7fffffffu, 0x40490fdbu};
    float ef[24];
    uint16_t eh[24];
    memcpy(ef, edge, sizeof ef);
    CHECK_OK(be->ops->cast(be, eh, DL_F16, ef, DL_F32, 24));
    for (int i = 0; i < 24; i++)
        CHECK_MSG(eh[i] == dl_f32_to_f16(ef[i]), "f16 of %08x: %04x, want %04x", edge[i], eh[i],
                  dl_f32_to_f16(ef[i]));
    CHECK_OK(be->ops->round_through(be, ef, ef, DL_F16, 24));
    for (int i = 0; i < 24; i++) {
        float want = dl_f16_to_f32(eh[i]);
        CHECK_MSG(!memcmp(&ef[i], &want, 4), "round through f16 of %08x", edge[i]);
    }
    /* bf16 rounding through the backend, bit for bit with half.h over
     * 16-lane groups, an 8-lane one and a scalar tail (24 + 3 values) */
    float bf[27];
    memcpy(bf, edge, sizeof edge);
    bf[24] = 1.00390625f, bf[25] = 1.01171875f, bf[26] = -3.0e38f; /* ties, near the top */
    float bw[27];
    for (int i = 0; i < 27; i++)
        bw[i] = dl_bf16_to_f32(dl_f32_to_bf16(bf[i]));
    CHECK_OK(be->ops->round_through(be, bf, bf, DL_BF16, 27));
    for (int i = 0; i < 27; i++)
        CHECK_MSG(!memcmp(&bf[i], &bw[i], 4), "round through bf16 of value %d", i);
    uint16_t *all = malloc(65536 * sizeof *all);
    float *wide = malloc(65536 * sizeof *wide);
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    CHECK_OK(be->ops->cast(be, wide, DL_F32, all, DL_F16, 65536));
    int off = 0;
    for (int i = 0; i < 65536; i++) {
        float want = dl_f16_to_f32(all[i]);
        off += memcmp(&wide[i], &want, 4) != 0;
    }
    CHECK_MSG(off == 0, "%d of the 65536 halves widen differently from half.h", off);
    free(all);
    free(wide);
}

static void test_rng(void)
{
    /* counter-based: the same key gives the same number in any order */
    float a = dl_rng_uniform(1, 2, 3, 17), b = dl_rng_uniform(1, 2, 3, 17);
    CHECK(a == b);
    CHECK(dl_rng_uniform(1, 2, 3, 17) != dl_rng_uniform(2, 2, 3, 17));
    CHECK(dl_rng_uniform(1, 2, 3, 17) != dl_rng_uniform(1, 2, 4, 17));
    /* moments of 100k uniforms and normals */
    double s = 0, s2 = 0, n1 = 0, n2 = 0;
    const int N = 100000;
    for (int i = 0; i < N; i++) {
        double u = dl_rng_uniform(9, 1, 0, (uint64_t)i);
        CHECK(u >= 0 && u < 1);
        s += u;
        s2 += u * u;
        double z = dl_rng_normal(9, 1, 0, (uint64_t)i);
        n1 += z;
        n2 += z * z;
    }
    CHECK_NEAR(s / N, 0.5, 0.005);
    CHECK_NEAR(s2 / N - 0.25, 1.0 / 12 - 0, 0.005);
    CHECK_NEAR(n1 / N, 0.0, 0.01);
    CHECK_NEAR(n2 / N, 1.0, 0.02);
}

/* Dropout's keep decisions (dl_rng_dropout_keep): draw k of 4 for sample
 * q, along the index (4 neighbours), the counter (4 steps), the stream
 * (4 layers) or the seed. */
static int keep4(int along, uint64_t q, int k, float p)
{
    uint64_t seed = 0x5eed, stream = DL_STREAM_DROPOUT + 3, counter = 40, i = q;
    if (along == 0)
        i = 4 * q + (uint64_t)k;
    else if (along == 1)
        counter += (uint64_t)k;
    else if (along == 2)
        stream += (uint64_t)k;
    else
        seed += (uint64_t)k;
    return dl_rng_dropout_keep(seed, stream, counter, i, p);
}

/* Chi-square of the 16 keep patterns of 4 draws against independent
 * draws at 1 - p each. */
static double pattern_chi2(int along, float p, uint64_t samples)
{
    double count[16] = {0}, chi2 = 0;
    for (uint64_t q = 0; q < samples; q++) {
        int c = 0;
        for (int k = 0; k < 4; k++)
            c |= keep4(along, q, k, p) << k;
        count[c]++;
    }
    for (int c = 0; c < 16; c++) {
        double e = (double)samples;
        for (int k = 0; k < 4; k++)
            e *= (c >> k & 1) ? 1.0 - p : p;
        chi2 += (count[c] - e) * (count[c] - e) / e;
    }
    return chi2;
}

/* The hash behind dropout's masks: keep rates within 4 standard errors
 * for several p, including the endpoints' exact rules; no dependence
 * between 4 neighbouring elements, 4 consecutive counters, 4 streams or
 * 4 seeds (chi-square of the 16 patterns, 15 degrees of freedom: above
 * 60 has probability 3e-7), nor between elements 16 or 1000 apart
 * (vector lanes, rows). */
static void test_rng_dropout_hash(void)
{
    const uint64_t N = 1 << 20;
    const float ps[] = {0.01f, 0.1f, 0.3f, 0.5f, 0.9f};
    for (size_t t = 0; t < sizeof ps / sizeof *ps; t++) {
        double kept = 0, p = ps[t];
        for (uint64_t i = 0; i < N; i++)
            kept += dl_rng_dropout_keep(7, DL_STREAM_DROPOUT, 1, i, ps[t]);
        double se = sqrt((double)N * p * (1 - p));
        CHECK_MSG(fabs(kept - (double)N * (1 - p)) < 4 * se, "p %g: kept %.0f of %llu", p, kept,
                  (unsigned long long)N);
    }
    CHECK(dl_rng_threshold(0.0f) == 0); /* p = 0 keeps everything */
    CHECK(dl_rng_threshold(0.5f) == 1u << 31);
    CHECK(dl_rng_threshold(nextafterf(1.0f, 0.0f)) == 0xFFFFFF00u);
    for (int along = 0; along < 4; along++)
        for (int t = 0; t < 2; t++) {
            float p = t ? 0.5f : 0.2f;
            double c2 = pattern_chi2(along, p, N / 4);
            CHECK_MSG(c2 < 60, "along %d, p %g: chi-square %.1f", along, (double)p, c2);
        }
    /* pairs (i, i + d): 2 x 2 patterns, 3 degrees of freedom */
    const uint64_t lags[] = {16, 1000, 1u << 16};
    for (size_t t = 0; t < sizeof lags / sizeof *lags; t++) {
        double count[4] = {0}, chi2 = 0, p = 0.5;
        for (uint64_t i = 0; i < N; i++)
            count[dl_rng_dropout_keep(3, 4, 5, i, 0.5f) * 2 +
                  dl_rng_dropout_keep(3, 4, 5, i + lags[t], 0.5f)]++;
        for (int c = 0; c < 4; c++)
            chi2 += (count[c] - N * p * p) * (count[c] - N * p * p) / (N * p * p);
        CHECK_MSG(chi2 < 30, "lag %llu: chi-square %.1f", (unsigned long long)lags[t], chi2);
    }
    /* the key of a second 2^32 segment is another */
    CHECK(dl_rng_hash_bits(1, 2, 3, 5) != dl_rng_hash_bits(1, 2, 3, 5 + (1ull << 32)));
}

/* --- transformer layers (engine/nn/attention.c) and the per-token loss ------- */

static dl_layer *seq_of(dl_layer **layers, int n)
{
    dl_layer *seq = dl_nn_sequential();
    for (int i = 0; i < n; i++)
        dl_nn_sequential_add(seq, layers[i]);
    return seq;
}

static void test_mha_grad(void)
{
    gradcheck(dl_nn_multihead_attention(8, 2, 0, 0, 1), (dl_shape){2, {5, 8}}, 2, 1);
}
static void test_mha_causal_grad(void)
{
    gradcheck(dl_nn_multihead_attention(8, 4, 1, 0, 0), (dl_shape){2, {6, 8}}, 2, 1);
}
static void test_mha_tiles_grad(void)
{
    /* 37 positions: a full 32-query tile and a partial one, causal across both */
    gradcheck(dl_nn_multihead_attention(4, 2, 1, 0, 1), (dl_shape){2, {37, 4}}, 1, 1);
}
static void test_posemb_grad(void)
{
    gradcheck(dl_nn_positional_embedding(6, 4), (dl_shape){2, {5, 4}}, 2, 1);
}
static void test_token_model_grad(void)
{
    /* ids [t] -> Embedding -> PositionalEmbedding -> causal MHA -> Linear [t, vocab] */
    dl_layer *l[] = {dl_nn_embedding(11, 8), dl_nn_positional_embedding(8, 8),
                     dl_nn_multihead_attention(8, 2, 1, 0, 1), dl_nn_linear(8, 11, 1)};
    harness h;
    CHECK_OK(harness_init(&h, seq_of(l, 4), &(dl_shape){1, {6}}, 2));
    for (size_t i = 0; i < h.nin; i++)
        h.x[i] = (float)((i * 5) % 11);
    CHECK(dl_shape_numel(dl_model_output_shape(h.m)) == 6 * 11);
    check_gradients(&h, 1e-2f, TOL, 0, 1);
    harness_done(&h);
}

/* Reference mean over kept rows of the smoothed cross-entropy. */
static double xent_mean_ref(const float *z, const int32_t *y, int rows, int classes, int ignore,
                            float smooth)
{
    double sum = 0;
    int kept = 0;
    for (int r = 0; r < rows; r++) {
        if (y[r] == ignore)
            continue;
        double mx = -1e30, s = 0;
        for (int c = 0; c < classes; c++)
            mx = fmax(mx, z[r * classes + c]);
        for (int c = 0; c < classes; c++)
            s += exp(z[r * classes + c] - mx);
        for (int c = 0; c < classes; c++) {
            double t = smooth / classes + (c == y[r] ? 1 - smooth : 0);
            sum -= t * (z[r * classes + c] - mx - log(s));
        }
        kept++;
    }
    return sum / (kept ? kept : 1);
}

static void test_xent_tokens(void)
{
    enum { ROWS = 6, CLASSES = 5 };
    float z[ROWS * CLASSES], d[ROWS * CLASSES] = {0}, stats[3] = {0};
    int32_t y[ROWS] = {0, -1, 4, 2, -1, 3};
    fill_random(z, ROWS * CLASSES, 19, 2.0f);
    dl_loss loss = {DL_LOSS_XENT, 0.1f, DL_IGNORE_NONE};
    CHECK_OK(dl_loss_xent_tokens(be, &loss, -1, ROWS, CLASSES, z, y, 1.0f, d, stats));
    CHECK_NEAR(stats[2], 4, 0);
    double ref = xent_mean_ref(z, y, ROWS, CLASSES, -1, 0.1f);
    CHECK_NEAR(stats[0] / stats[2], ref, 1e-5);
    for (int i = 0; i < ROWS * CLASSES; i++) {
        float keep = z[i];
        z[i] = keep + 1e-2f;
        double lp = xent_mean_ref(z, y, ROWS, CLASSES, -1, 0.1f);
        z[i] = keep - 1e-2f;
        double lm = xent_mean_ref(z, y, ROWS, CLASSES, -1, 0.1f);
        z[i] = keep;
        CHECK_NEAR(d[i], (lp - lm) / 2e-2, 1e-4);
        if (y[i / CLASSES] == -1)
            CHECK(d[i] == 0);
    }
    /* without ignore_index (PyTorch's -100): -1 is an out-of-range target */
    dl_loss plain = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    CHECK(dl_loss_xent_tokens(be, &plain, DL_IGNORE_NONE, ROWS, CLASSES, z, y, 1.0f, NULL, stats) ==
          DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "CrossEntropy") && strstr(dl_error_message(), "-1"),
              "message: %s", dl_error_message());
    /* every token ignored: no loss, no gradient, no division by zero */
    int32_t all[ROWS] = {-1, -1, -1, -1, -1, -1};
    float s3[3] = {0}, g[ROWS * CLASSES] = {0};
    CHECK_OK(dl_loss_xent_tokens(be, &loss, -1, ROWS, CLASSES, z, all, 1.0f, g, s3));
    CHECK(s3[0] == 0 && s3[2] == 0 && g[0] == 0);
}

static void test_transformer_errors(void)
{
    CHECK(dl_nn_multihead_attention(10, 3, 0, 0, 1) == NULL);
    CHECK_MSG(strstr(dl_error_message(), "MultiheadAttention(10, 3)") &&
                  strstr(dl_error_message(), "divide"),
              "message: %s", dl_error_message());
    CHECK(dl_nn_multihead_attention(8, 2, 0, 0.1f, 1) == NULL);
    CHECK(strstr(dl_error_message(), "dropout") != NULL);
    dl_model *m = NULL;
    CHECK(dl_model_create(&m, dl_nn_positional_embedding(4, 8), &(dl_shape){2, {6, 8}}) ==
          DL_ESHAPE);
    CHECK_MSG(strstr(dl_error_message(), "PositionalEmbedding(4, 8)") &&
                  strstr(dl_error_message(), "max_len 4"),
              "message: %s", dl_error_message());
    CHECK(dl_model_create(&m, dl_nn_multihead_attention(8, 2, 0, 0, 1), &(dl_shape){1, {8}}) ==
          DL_ESHAPE);
    CHECK(strstr(dl_error_message(), "MultiheadAttention(8, 2)") != NULL);
    /* a token id at the vocabulary size */
    harness h;
    CHECK_OK(harness_init(&h, dl_nn_embedding(5, 4), &(dl_shape){1, {3}}, 1));
    h.x[0] = 1, h.x[1] = 5, h.x[2] = 0;
    CHECK(isnan(harness_loss(&h, 0)));
    CHECK_MSG(strstr(dl_error_message(), "Embedding(5, 4)") && strstr(dl_error_message(), "5"),
              "message: %s", dl_error_message());
    harness_done(&h);
}

/* --- against PyTorch (tests/golden/attention.py writes attention.txt) --------- */

/* Reads the array header "name count" and count values into dst (floats
 * of the expected count); 0 on success. */
static int attn_golden_read(FILE *f, const char *name, float *dst, size_t count)
{
    char got[96];
    size_t n = 0;
    if (fscanf(f, "%95s %zu", got, &n) != 2 || strcmp(got, name) || n != count) {
        printf("  golden: expected %s (%zu values), found %s (%zu)\n", name, count, got, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        double v;
        if (fscanf(f, "%lf", &v) != 1)
            return -1;
        dst[i] = (float)v;
    }
    return 0;
}

/* max |a - b| / max |b|: the relative error of a whole array. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

static dl_layer *golden_model(int d, int heads, int causal, int block)
{
    if (!block)
        return dl_nn_multihead_attention(d, heads, causal, 0, 1);
    dl_layer *a[] = {dl_nn_layernorm(d, 1e-5f), dl_nn_multihead_attention(d, heads, causal, 0, 1)};
    dl_layer *b[] = {dl_nn_layernorm(d, 1e-5f), dl_nn_linear(d, 4 * d, 1),
                     dl_nn_activation(DL_ACT_GELU), dl_nn_linear(4 * d, d, 1)};
    dl_layer *top[] = {dl_nn_residual(seq_of(a, 2)), dl_nn_residual(seq_of(b, 4))};
    return seq_of(top, 2);
}

/* Compares the golden array `name` (count values) with got. */
static void attn_golden_compare(FILE *f, const char *cname, const char *name, const float *got,
                                size_t count)
{
    float *want = malloc(count * sizeof *want);
    CHECK(attn_golden_read(f, name, want, count) == 0);
    double e = rel_err(got, want, count);
    CHECK_MSG(e <= 1e-4, "%s %s: relative error %.3g > 1e-4", cname, name, e);
    free(want);
}

/* One case: loads x, the parameters and r, runs forward and backward,
 * compares y, dx and every parameter gradient. */
static int attn_golden_case(FILE *f)
{
    char cname[64];
    int n, t, d, heads, causal, block;
    if (fscanf(f, " case %63s %d %d %d %d %d %d", cname, &n, &t, &d, &heads, &causal, &block) != 7)
        return 0;
    harness h;
    CHECK_OK(harness_init(&h, golden_model(d, heads, causal, block), &(dl_shape){2, {t, d}}, n));
    dl_model_state s;
    dl_model_get_state(h.m, &s);
    int np = dl_model_num_params(h.m);
    CHECK(attn_golden_read(f, "x", h.x, h.nin) == 0);
    char pname[96];
    for (int k = 0; k < np; k++) {
        const dl_param *pp = dl_model_param(h.m, k);
        CHECK(fscanf(f, "%95s", pname) == 1); /* torch's name; the order is the contract */
        fseek(f, -(long)strlen(pname), SEEK_CUR);
        CHECK(attn_golden_read(f, pname, s.params + pp->offset, pp->count) == 0);
    }
    CHECK(attn_golden_read(f, "r", h.r, h.nout) == 0);
    CHECK(isfinite(harness_loss(&h, 1)));
    attn_golden_compare(f, cname, "y", dl_model_output(h.m), h.nout);
    memset(s.grads, 0, s.count * 4);
    memset(h.dx, 0, h.nin * 4);
    dl_pass p;
    dl_model_pass(h.m, &p, n, 1, DL_PREC_F32, 5, 3);
    CHECK_OK(h.l->vt->backward(h.l, &p, h.x, dl_model_output(h.m), h.r, h.dx));
    attn_golden_compare(f, cname, "dx", h.dx, h.nin);
    for (int k = 0; k < np; k++) {
        const dl_param *pp = dl_model_param(h.m, k);
        CHECK(fscanf(f, "%95s", pname) == 1);
        fseek(f, -(long)strlen(pname), SEEK_CUR);
        attn_golden_compare(f, cname, pname, s.grads + pp->offset, pp->count);
    }
    harness_done(&h);
    return 1;
}

static void test_attention_golden(void)
{
    FILE *f = fopen("tests/golden/attention.txt", "r");
    CHECK_MSG(f != NULL, "tests/golden/attention.txt: run from the repository root");
    if (!f)
        return;
    char line[256];
    CHECK(fgets(line, sizeof line, f) != NULL); /* the comment line */
    int cases = 0;
    while (attn_golden_case(f))
        cases++;
    CHECK(cases == 3);
    fclose(f);
}

/* MultiheadAttention in bf16: the products take the low-precision copies
 * of x, ctx, dy, dqkv and the weights; outputs and gradients stay near
 * the f32 ones (bf16 keeps 8 bits of mantissa). */
static void test_mha_bf16(void)
{
    harness h;
    CHECK_OK(
        harness_init(&h, dl_nn_multihead_attention(32, 4, 1, 0, 1), &(dl_shape){2, {20, 32}}, 3));
    dl_model_state s;
    dl_model_get_state(h.m, &s);
    float *y32 = malloc(h.nout * 4), *g32 = malloc(s.count * 4), *dx32 = malloc(h.nin * 4);
    for (int pass = 0; pass < 2; pass++) {
        dl_precision prec = pass ? DL_PREC_BF16 : DL_PREC_F32;
        CHECK_OK(dl_model_refresh_lowp(h.m, pass ? DL_BF16 : DL_F32));
        dl_pass p;
        dl_model_pass(h.m, &p, h.n, 1, prec, 5, 3);
        float *y = dl_model_output(h.m);
        CHECK_OK(h.l->vt->forward(h.l, &p, h.x, y));
        memset(s.grads, 0, s.count * 4);
        memset(h.dx, 0, h.nin * 4);
        CHECK_OK(h.l->vt->backward(h.l, &p, h.x, y, h.r, h.dx));
        if (!pass) {
            memcpy(y32, y, h.nout * 4);
            memcpy(g32, s.grads, s.count * 4);
            memcpy(dx32, h.dx, h.nin * 4);
            continue;
        }
        double ey = rel_err(y, y32, h.nout), eg = rel_err(s.grads, g32, s.count);
        double ex = rel_err(h.dx, dx32, h.nin);
        CHECK_MSG(ey < 2e-2 && eg < 3e-2 && ex < 3e-2,
                  "bf16 against f32: y %.3g, grads %.3g, dx %.3g", ey, eg, ex);
        CHECK(ey > 0); /* the bf16 path ran */
    }
    free(y32), free(g32), free(dx32);
    harness_done(&h);
}

int main(void)
{
    be = dl_backend_cpu(0);
    RUN(test_linear_grad);
    RUN(test_linear_seq_grad);
    RUN(test_conv_grad);
    RUN(test_conv_stride_grad);
    RUN(test_maxpool_grad);
    RUN(test_maxpool_overlap_grad);
    RUN(test_avgpool_grad);
    RUN(test_relu_grad);
    RUN(test_gelu_grad);
    RUN(test_tanh_grad);
    RUN(test_sigmoid_grad);
    RUN(test_dropout_grad);
    RUN(test_batchnorm1d_grad);
    RUN(test_batchnorm2d_grad);
    RUN(test_layernorm_grad);
    RUN(test_flatten_grad);
    RUN(test_embedding_grad);
    RUN(test_residual_grad);
    RUN(test_sequential_grad);
    RUN(test_conv_grouped_grad);
    RUN(test_conv_depthwise_grad);
    RUN(test_conv_dilated_grad);
    RUN(test_adaptive_pool_grad);
    RUN(test_silu_grad);
    RUN(test_identity_grad);
    RUN(test_residual_projection_grad);
    RUN(test_residual_shape_error);
    RUN(test_golden_convs);
    RUN(test_golden_basic_block);
    RUN(test_relu_pool_fusion);
    RUN(test_backward_set_ops);
    RUN(test_bn_relu_fusion);
    RUN(test_residual_relu_fusion);
    RUN(test_dropout_backward_set);
    RUN(test_train_flops);
    RUN(test_batchnorm_eval);
    RUN(test_shape_errors);
    RUN(test_xent);
    RUN(test_mse_bce);
    RUN(test_sgd);
    RUN(test_adam);
    RUN(test_optimizer_state_leaves_denormals);
    RUN(test_optim_lowp_copy);
    RUN(test_move_lowp_format);
    RUN(test_weight_decay_skips_bias);
    RUN(test_clip);
    RUN(test_schedules);
    RUN(test_half_roundtrip);
    RUN(test_rng);
    RUN(test_rng_dropout_hash);
    RUN(test_mha_grad);
    RUN(test_mha_causal_grad);
    RUN(test_mha_tiles_grad);
    RUN(test_posemb_grad);
    RUN(test_token_model_grad);
    RUN(test_xent_tokens);
    RUN(test_transformer_errors);
    RUN(test_attention_golden);
    RUN(test_mha_bf16);
    CHECK_EXIT();
}
