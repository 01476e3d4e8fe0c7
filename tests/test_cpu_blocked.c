/* test_cpu_blocked.c - activations in channel blocks (nChw16c / nChw8c): the transposes, the ops that take them against the plain ones, and the model's layout plan
 *
 * A blocked op must give what the plain op gives on the same values in
 * NCHW: the convolutions bit for bit (the same oneDNN primitive runs; only
 * the reorders around it go), BatchNorm and global pooling within a few
 * float roundings (their sums run in another order), and a whole model
 * trained a step with the plan on must match the same model with it off
 * (DLBENCH_BLOCKED=0). The plain ops are checked against references and
 * finite differences in test_cpu_kernels and test_nn.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check.h"
#include "engine/base/error.h"
#include "engine/base/rng.h"
#include "engine/core/backend.h"
#include "engine/cpu/cpu.h"
#include "engine/nn/nn.h"

static float *randv(size_t n, uint64_t seed, float scale)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = scale * (2.0f * dl_rng_uniform(seed, 13, 0, i) - 1.0f);
    return v;
}

/* v [n, c, hw] in blocks of blk channels (a new array). */
static float *blocked(const float *v, int n, int c, size_t hw, int blk)
{
    size_t cp = (size_t)(c + blk - 1) / blk * blk;
    float *b = malloc((size_t)n * cp * hw * sizeof *b);
    dl_cpu_to_blocked(b, v, n, c, hw, blk, 0);
    return b;
}

/* The blocked b back in [n, c, hw] (a new array). */
static float *plain(const float *b, int n, int c, size_t hw, int blk)
{
    float *v = malloc((size_t)n * c * hw * sizeof *v);
    dl_cpu_from_blocked(v, b, n, c, hw, blk, 0);
    return v;
}

/* The largest |a - b| over n values, relative to the largest |b| (at least 1e-3). */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0, big = 1e-3;
    for (size_t i = 0; i < n; i++)
        big = fmax(big, fabs(b[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        worst = isnan(d) ? INFINITY : fmax(worst, d);
    }
    return worst / big;
}

static size_t differing(const float *a, const float *b, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], sizeof *a) != 0;
    return bad;
}

/* --- the transposes against the index formula ------------------------------ */

static void test_layout_transposes(void)
{
    const int cs[] = {16, 24, 8, 5, 32, 3}, hws[] = {1, 7, 8, 9, 49, 196};
    for (int bi = 0; bi < 2; bi++) {
        int blk = bi ? 16 : 8;
        for (size_t ci = 0; ci < sizeof cs / sizeof *cs; ci++)
            for (size_t hi = 0; hi < sizeof hws / sizeof *hws; hi++) {
                int n = 3, c = cs[ci], nb = (c + blk - 1) / blk;
                size_t hw = (size_t)hws[hi], total = (size_t)n * c * hw;
                float *x = randv(total, 1 + ci, 1.0f), *b = blocked(x, n, c, hw, blk);
                size_t bad = 0;
                for (int i = 0; i < n; i++)
                    for (int ch = 0; ch < nb * blk; ch++)
                        for (size_t j = 0; j < hw; j++) {
                            float want = ch < c ? x[((size_t)i * c + ch) * hw + j] : 0.0f;
                            float got = b[(((size_t)i * nb + ch / blk) * hw + j) * blk + ch % blk];
                            bad += memcmp(&want, &got, sizeof got) != 0;
                        }
                CHECK_MSG(bad == 0, "to blocks of %d: c %d hw %zu: %zu wrong", blk, c, hw, bad);
                float *back = plain(b, n, c, hw, blk);
                CHECK_MSG(differing(back, x, total) == 0, "round trip blk %d c %d hw %zu", blk, c,
                          hw);
                /* adding: back + x from the blocks */
                float *sum = randv(total, 9, 1.0f), *want = malloc(total * sizeof *want);
                for (size_t i = 0; i < total; i++)
                    want[i] = sum[i] + x[i];
                dl_cpu_from_blocked(sum, b, n, c, hw, blk, 1);
                CHECK_MSG(differing(sum, want, total) == 0, "adding blk %d c %d hw %zu", blk, c,
                          hw);
                free(x), free(b), free(back), free(sum), free(want);
            }
    }
}

/* --- convolutions ------------------------------------------------------------ */

static dl_conv_desc cdesc(int n, int c, int h, int k, int r, int stride, int pad)
{
    dl_conv_desc d = {.n = n, .c = c, .h = h, .w = h, .k = k, .r = r, .s = r};
    d.stride = stride;
    d.pad = pad;
    d.p = d.q = (h + 2 * pad - r) / stride + 1;
    return d;
}

/* cdesc with groups and dilation. */
static dl_conv_desc cdesc_gd(int n, int c, int h, int k, int r, int stride, int pad, int groups,
                             int dilation)
{
    dl_conv_desc d = cdesc(n, c, h, k, r, stride, pad);
    d.groups = groups;
    d.dilation = dilation;
    d.p = d.q = (h + 2 * pad - dilation * (r - 1) - 1) / stride + 1;
    return d;
}

typedef struct conv_out {
    float *y, *dx_add, *dx_set, *dw, *db;
} conv_out;

static void conv_out_free(conv_out *o)
{
    free(o->y), free(o->dx_add), free(o->dx_set), free(o->dw), free(o->db);
}

/* The op table's conv_backward (both gradients in one call) against the
 * separate ops' results in o, dxa (added into dx0) and dxs (written), on
 * the same operands in d's layouts: the same bits, with dx added into,
 * written, and not wanted (dw and db alone; dw without db). */
static int fused_backward_case(dl_backend *be, const dl_conv_desc *d, dl_dtype compute,
                               const float *xi, const float *w, const float *dyi, const float *dxa,
                               const float *dxs, const float *dx0, const float *dw0,
                               const conv_out *o, void *ws, size_t wsb)
{
    size_t xhw = (size_t)d->h * d->w, nx = (size_t)d->n * d->c * xhw;
    size_t nw = (size_t)d->k * d->c * d->r * d->s, nk = (size_t)d->k;
    float *dx = d->x_blk ? blocked(dx0, d->n, d->c, xhw, d->x_blk) : malloc(nx * sizeof *dx);
    float *dw = malloc(nw * sizeof *dw), *db = malloc(nk * sizeof *db);
    int rc = DL_OK;
    for (int variant = 0; variant < 4 && rc == DL_OK; variant++) {
        int set = variant == 1, want_dx = variant < 2, want_db = variant != 3;
        if (!d->x_blk)
            memcpy(dx, dx0, nx * sizeof *dx);
        else if (variant == 1)
            dl_cpu_to_blocked(dx, dx0, d->n, d->c, xhw, d->x_blk, 0);
        memcpy(dw, dw0, nw * sizeof *dw);
        for (size_t i = 0; i < nk; i++)
            db[i] = 0.5f;
        rc = be->ops->conv_backward(be, d, dw, want_db ? db : NULL, want_dx ? dx : NULL, set, dyi,
                                    xi, w, ws, wsb, compute);
        if (rc != DL_OK)
            break;
        size_t nxb = d->x_blk ? (size_t)d->n * d->c * xhw : nx; /* c divides into blocks */
        CHECK_MSG(!want_dx || differing(dx, set ? dxs : dxa, nxb) == 0,
                  "conv_backward: dx %s differs from the separate op's (c %d k %d %dx%d, blocks "
                  "%d/%d, %s)",
                  set ? "written" : "added", d->c, d->k, d->r, d->s, d->x_blk, d->y_blk,
                  dl_dtype_name(compute));
        CHECK_MSG(differing(dw, o->dw, nw) == 0,
                  "conv_backward: dw differs (variant %d, c %d k %d, blocks %d/%d, %s)", variant,
                  d->c, d->k, d->x_blk, d->y_blk, dl_dtype_name(compute));
        CHECK_MSG(!want_db || differing(db, o->db, nk) == 0,
                  "conv_backward: db differs (variant %d, c %d k %d, blocks %d/%d)", variant, d->c,
                  d->k, d->x_blk, d->y_blk);
    }
    free(dx), free(dw), free(db);
    return rc;
}

/* All four ops of d on x, w, b, dy (plain values); d's x_blk, y_blk say
 * which operands go in blocks (converted here, results converted back).
 * conv_backward, where the backend has it, is checked against them. */
static int run_conv(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, const float *x,
                    const float *w, const float *b, const float *dy, const float *dx0,
                    const float *dw0, conv_out *o)
{
    size_t xhw = (size_t)d->h * d->w, yhw = (size_t)d->p * d->q;
    size_t nx = (size_t)d->n * d->c * xhw, ny = (size_t)d->n * d->k * yhw;
    size_t nw = (size_t)d->k * d->c * d->r * d->s;
    dl_conv_desc plain_d = *d;
    plain_d.x_blk = plain_d.y_blk = 0;
    size_t wsb = be->ops->conv_workspace(be, &plain_d, compute);
    void *ws = malloc(wsb ? wsb : 1);
    const float *xi = d->x_blk ? blocked(x, d->n, d->c, xhw, d->x_blk) : x;
    const float *dyi = d->y_blk ? blocked(dy, d->n, d->k, yhw, d->y_blk) : dy;
    float *y = malloc(ny * sizeof *y), *dxa = NULL, *dxs = malloc(nx * sizeof *dxs);
    if (d->x_blk) {
        dxa = blocked(dx0, d->n, d->c, xhw, d->x_blk);
    } else {
        dxa = malloc(nx * sizeof *dxa);
        memcpy(dxa, dx0, nx * sizeof *dxa);
    }
    o->dw = malloc(nw * sizeof *o->dw);
    o->db = malloc((size_t)d->k * sizeof *o->db);
    memcpy(o->dw, dw0, nw * sizeof *o->dw);
    for (int i = 0; i < d->k; i++)
        o->db[i] = 0.5f;
    int rc = be->ops->conv_forward(be, d, y, xi, w, b, ws, wsb, compute);
    if (rc == DL_OK)
        rc = be->ops->conv_backward_data(be, d, dxa, dyi, w, ws, wsb, compute);
    if (rc == DL_OK)
        rc = be->ops->conv_backward_data_set(be, d, dxs, dyi, w, ws, wsb, compute);
    if (rc == DL_OK)
        rc = be->ops->conv_backward_filter(be, d, o->dw, o->db, dyi, xi, ws, wsb, compute);
    if (rc == DL_OK && be->ops->conv_backward)
        rc = fused_backward_case(be, d, compute, xi, w, dyi, dxa, dxs, dx0, dw0, o, ws, wsb);
    o->y = d->y_blk ? plain(y, d->n, d->k, yhw, d->y_blk) : y;
    o->dx_add = d->x_blk ? plain(dxa, d->n, d->c, xhw, d->x_blk) : dxa;
    o->dx_set = d->x_blk ? plain(dxs, d->n, d->c, xhw, d->x_blk) : dxs;
    if (d->y_blk)
        free(y);
    if (d->x_blk) {
        free(dxa), free(dxs);
        free((void *)xi);
    }
    if (d->y_blk)
        free((void *)dyi);
    free(ws);
    return rc;
}

static int wino_ran; /* blocked cases the own Winograd kernels took */

static void conv_blocked_case(dl_backend *be, dl_conv_desc d, dl_dtype compute, int blk)
{
    size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.k * d.p * d.q;
    size_t nw = (size_t)d.k * d.c * d.r * d.s;
    float *x = randv(nx, 1, 1.0f), *w = randv(nw, 2, 0.3f), *b = randv((size_t)d.k, 3, 0.5f);
    float *dy = randv(ny, 4, 1.0f), *dx0 = randv(nx, 5, 1.0f), *dw0 = randv(nw, 6, 1.0f);
    conv_out ref = {0};
    CHECK_OK(run_conv(be, &d, compute, x, w, b, dy, dx0, dw0, &ref));
    int can = be->ops->conv_blocks(be, &d, compute);
    /* what the backend allows: x from blk channels on (oneDNN's every
     * direction), y where k is a multiple (below 8 input channels, where
     * oneDNN runs the forward: the rule of the CPU's vector width) */
    /* NCHW may stay: the own bf16 kernels' shapes; dilated ones, blocked
     * only where oneDNN runs every direction */
    int plain_ok = (compute == DL_BF16 && dl_cpu(be)->has_avx512_bf16) || dl_conv_dilation(&d) > 1;
    CHECK_MSG(plain_ok || (can & 1) == (d.c % blk == 0), "conv_blocks x for c %d: %d", d.c, can);
    CHECK_MSG(plain_ok || d.c < 8 || !!(can & 2) == (d.k % blk == 0), "conv_blocks y for k %d: %d",
              d.k, can);
    for (int mode = 1; mode < 4; mode++) {
        dl_conv_desc bd = d;
        bd.x_blk = mode & 1 ? blk : 0;
        bd.y_blk = mode & 2 ? blk : 0;
        if ((bd.x_blk && !(can & 1)) || (bd.y_blk && !(can & 2)))
            continue;
        conv_out got = {0};
        CHECK_OK(run_conv(be, &bd, compute, x, w, b, dy, dx0, dw0, &got));
        const char *what = mode == 1 ? "x" : mode == 2 ? "y" : "x and y";
        /* the own Winograd (AVX2, x and y in blocks of 8): sums in
         * another order, close to the direct ones */
        if (dl_cpu_conv_wino_takes(be, &bd, compute, 0)) {
            wino_ran++;
            int wd = dl_cpu_conv_wino_takes(be, &bd, compute, 2);
            CHECK_MSG(
                rel_diff(got.y, ref.y, ny) < 1e-5 && rel_diff(got.dx_add, ref.dx_add, nx) < 1e-5 &&
                    rel_diff(got.dx_set, ref.dx_set, nx) < 1e-5 &&
                    (wd ? rel_diff(got.dw, ref.dw, nw) < 1e-5 : differing(got.dw, ref.dw, nw) == 0),
                "Winograd c %d k %d %dx%d n %d: y %g dx %g %g dw %g (%s)", d.c, d.k, d.h, d.w, d.n,
                rel_diff(got.y, ref.y, ny), rel_diff(got.dx_add, ref.dx_add, nx),
                rel_diff(got.dx_set, ref.dx_set, nx), rel_diff(got.dw, ref.dw, nw),
                wd ? "Winograd" : "direct");
        } else if (d.r == 1 || dl_conv_groups(&d) > 1 || dl_conv_dilation(&d) > 1 ||
                   dl_cpu_conv_small_lanes_takes(be, &bd, compute)) {
            /* plain 1x1 layers run the own 1x1 kernels, depthwise ones the
             * own depthwise kernels, other sums: close; everything else
             * the same primitive: the same bits */
            CHECK_MSG(rel_diff(got.y, ref.y, ny) < 1e-5 &&
                          rel_diff(got.dx_add, ref.dx_add, nx) < 1e-5 &&
                          rel_diff(got.dx_set, ref.dx_set, nx) < 1e-5 &&
                          rel_diff(got.dw, ref.dw, nw) < 1e-5,
                      "%dx%d g%d, %s blocked: y %g dx %g %g dw %g", d.r, d.s, dl_conv_groups(&d),
                      what, rel_diff(got.y, ref.y, ny), rel_diff(got.dx_add, ref.dx_add, nx),
                      rel_diff(got.dx_set, ref.dx_set, nx), rel_diff(got.dw, ref.dw, nw));
        } else {
            CHECK_MSG(differing(got.y, ref.y, ny) == 0, "y, %s blocked (c %d k %d %dx%d)", what,
                      d.c, d.k, d.h, d.w);
            CHECK_MSG(differing(got.dx_add, ref.dx_add, nx) == 0,
                      "dx added, %s blocked (c %d k %d)", what, d.c, d.k);
            CHECK_MSG(differing(got.dx_set, ref.dx_set, nx) == 0,
                      "dx written, %s blocked (c %d k %d)", what, d.c, d.k);
            CHECK_MSG(differing(got.dw, ref.dw, nw) == 0, "dw, %s blocked (c %d k %d)", what, d.c,
                      d.k);
        }
        /* db: oneDNN's sums against the plain path's double ones */
        CHECK_MSG(rel_diff(got.db, ref.db, (size_t)d.k) < 1e-5, "db, %s blocked: %g", what,
                  rel_diff(got.db, ref.db, (size_t)d.k));
        conv_out_free(&got);
    }
    conv_out_free(&ref);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0);
}

static void test_conv_blocked(void)
{
    for (int threads = 1; threads <= 2; threads++) {
        dl_backend *be = dl_backend_cpu_create(threads);
        CHECK(be != NULL);
        if (!be)
            return;
        int blk = be->ops->activation_blocks(be, DL_F32);
        if (!blk) {
            SKIP("the CPU backend keeps NCHW here (built without oneDNN)");
            dl_backend_cpu_destroy(be);
            return;
        }
        const dl_conv_desc cases[] = {
            cdesc(10, 16, 14, 32, 3, 1, 1), /* direct, a short last chunk */
            cdesc(5, 32, 7, 16, 1, 2, 0),   /* 1x1 stride 2: the own 1x1 kernels when plain */
            cdesc(9, 3, 12, 16, 3, 1, 1),   /* a stem: dx runs the own kernels on copies */
            /* grey stems: with y in blocks of the vector's width the
             * filter gradient runs cpu_conv_small.c's lanes kernel (a
             * 5x5 one: taps in two groups with AVX2) */
            cdesc(9, 1, 12, 16, 3, 1, 1),
            cdesc(6, 1, 11, 32, 5, 1, 2),
            cdesc(4, 16, 8, 24, 3, 2, 1), /* k not a multiple of 16 */
            cdesc(3, 64, 7, 64, 3, 1, 1), /* Winograd */
            cdesc(6, 16, 9, 16, 5, 1, 2), /* 5x5 */
            /* 1x1 on blocks: the own filter kernel (tiles of 3, 2 and 1
             * input blocks; several chunks of images) and the own strided
             * data kernel (a last tile of pixels that starts early) */
            cdesc(5, 64, 28, 32, 1, 1, 0),
            cdesc(3, 48, 9, 32, 1, 2, 0),
            cdesc(4, 80, 8, 16, 1, 2, 0),
            /* depthwise (MobileNet's, stride 1 and 2), groups of whole
             * blocks, dilated: oneDNN's kernels on blocks */
            cdesc_gd(4, 32, 14, 32, 3, 1, 1, 32, 1),
            cdesc_gd(3, 48, 15, 48, 3, 2, 1, 48, 1),
            cdesc_gd(2, 64, 9, 64, 3, 1, 1, 2, 1),
            cdesc_gd(3, 16, 12, 32, 3, 1, 2, 1, 2),
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            conv_blocked_case(be, cases[i], DL_F32, blk);
            conv_blocked_case(be, cases[i], DL_BF16, blk);
        }
        /* AVX2's blocks of 8 run on any x86-64-v3 CPU */
        /* AVX2's blocks of 8 (oneDNN may still run its 16-channel
         * kernels: then its reorders go between the two block sizes) */
        int was = dl_cpu_avx512();
        dl_cpu_set_avx512(0);
        if (blk == 16 || !was) {
            CHECK(be->ops->activation_blocks(be, DL_F32) == 8);
            for (size_t i = 0; i < 5; i++)
                conv_blocked_case(be, cases[i], DL_F32, 8);
            /* the own Winograd F(2x2, 3x3) (x and y in blocks of 8, from
             * 16 channels): odd planes (tiles half outside), 8 output
             * channels past the last 16, several tile blocks and a short
             * last one (blocks of 6 tiles, of 12 at 16 channels), a plane
             * that is not square, 1x1 planes */
            dl_conv_desc wide = cdesc(2, 40, 9, 32, 3, 1, 1);
            wide.w = wide.q = 14;
            /* and no padding ("valid": the data gradient pads dy by 2):
             * the benchmark CNN's 32 -> 64 at 13x13, an even output
             * plane, a non-square one, a 2x2 one */
            dl_conv_desc wide0 = cdesc(2, 24, 9, 16, 3, 1, 0);
            wide0.w = 14;
            wide0.q = 12;
            const dl_conv_desc wcases[] = {cdesc(3, 32, 7, 40, 3, 1, 1),
                                           cdesc(37, 32, 6, 32, 3, 1, 1),
                                           wide,
                                           cdesc(4, 64, 1, 48, 3, 1, 1),
                                           cdesc(2, 128, 8, 128, 3, 1, 1),
                                           cdesc(5, 16, 9, 16, 3, 1, 1),
                                           cdesc(3, 32, 13, 64, 3, 1, 0),
                                           cdesc(2, 16, 10, 24, 3, 1, 0),
                                           wide0,
                                           cdesc(4, 16, 4, 16, 3, 1, 0)};
            /* and emulated bf16 (f32 kernels on rounded operands), where
             * this CPU has no bf16 arithmetic */
            int emulated = dl_cpu_kernel_type(be, DL_BF16) == DL_F32;
            wino_ran = 0;
            for (size_t i = 0; i < sizeof wcases / sizeof *wcases; i++) {
                conv_blocked_case(be, wcases[i], DL_F32, 8);
                if (emulated)
                    conv_blocked_case(be, wcases[i], DL_BF16, 8);
            }
            CHECK_MSG(wino_ran == (1 + emulated) * (int)(sizeof wcases / sizeof *wcases),
                      "Winograd took %d of the cases", wino_ran);
            /* its off switch: oneDNN's direct kernels */
            setenv("DLBENCH_CONV_WINO", "0", 1);
            dl_conv_desc off = wcases[0];
            off.x_blk = off.y_blk = 8;
            CHECK(!dl_cpu_conv_wino_takes(be, &off, DL_F32, 0));
            unsetenv("DLBENCH_CONV_WINO");
            CHECK(dl_cpu_conv_wino_takes(be, &off, DL_F32, 0));
        }
        dl_cpu_set_avx512(was);
        /* depthwise wider than 3x3 stays plain (oneDNN's filter gradient
         * on blocks: a tenth of the plain path's speed); 3x3 takes them */
        dl_conv_desc dw5 = cdesc_gd(2, 32, 14, 32, 5, 1, 2, 32, 1);
        dl_conv_desc dw3 = cdesc_gd(2, 32, 14, 32, 3, 1, 1, 32, 1);
        CHECK(be->ops->conv_blocks(be, &dw5, DL_F32) == 0);
        CHECK(be->ops->conv_blocks(be, &dw3, DL_F32) == 3);
        /* blocks that do not divide the channels are refused, naming both */
        dl_conv_desc bad = cdesc(2, 24, 6, 16, 3, 1, 1);
        bad.x_blk = 16;
        float v[2 * 24 * 36];
        size_t wsb = be->ops->conv_workspace(be, &bad, DL_F32);
        void *ws = malloc(wsb ? wsb : 1);
        CHECK(be->ops->conv_forward(be, &bad, v, v, v, NULL, ws, wsb, DL_F32) == DL_EINVAL);
        free(ws);
        CHECK(strstr(dl_error_message(), "conv (blocked): 24 input") != NULL);
        dl_backend_cpu_destroy(be);
    }
}

/* --- BatchNorm and global pooling ----------------------------------------------- */

/* The own Winograd's results do not depend on the thread count: tiles
 * are whole in one task, the filter gradient sums fixed chunks of images
 * in order. */
static void test_conv_wino_threads(void)
{
    dl_conv_desc d = cdesc(13, 32, 10, 24, 3, 1, 1);
    d.x_blk = d.y_blk = 8;
    size_t nx = (size_t)d.n * d.c * d.h * d.w, ny = (size_t)d.n * d.k * d.p * d.q;
    size_t nw = (size_t)d.k * d.c * 9;
    float *x = randv(nx, 11, 1.0f), *w = randv(nw, 12, 0.3f), *b = randv((size_t)d.k, 13, 0.5f);
    float *dy = randv(ny, 14, 1.0f), *dx0 = randv(nx, 15, 1.0f), *dw0 = randv(nw, 16, 1.0f);
    conv_out o[2] = {{0}, {0}};
    int was = dl_cpu_avx512(), ran = 0;
    dl_cpu_set_avx512(0);
    for (int i = 0; i < 2; i++) {
        dl_backend *be = dl_backend_cpu_create(i ? 3 : 1);
        CHECK(be != NULL);
        if (!be)
            break;
        if (be->ops->activation_blocks(be, DL_F32) == 8) {
            ran += dl_cpu_conv_wino_takes(be, &d, DL_F32, 0) &&
                   dl_cpu_conv_wino_takes(be, &d, DL_F32, 1) &&
                   dl_cpu_conv_wino_takes(be, &d, DL_F32, 2);
            CHECK_OK(run_conv(be, &d, DL_F32, x, w, b, dy, dx0, dw0, &o[i]));
        }
        dl_backend_cpu_destroy(be);
    }
    dl_cpu_set_avx512(was);
    if (ran == 2) {
        CHECK(differing(o[0].y, o[1].y, ny) == 0);
        CHECK(differing(o[0].dx_add, o[1].dx_add, nx) == 0);
        CHECK(differing(o[0].dx_set, o[1].dx_set, nx) == 0);
        CHECK(differing(o[0].dw, o[1].dw, nw) == 0);
    } else {
        SKIP("no channel blocks here (built without oneDNN)");
    }
    conv_out_free(&o[0]), conv_out_free(&o[1]);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0);
}

static void bn_case(dl_backend *be, int n, int c, int inner, int blk, int relu, int training)
{
    size_t total = (size_t)n * c * inner;
    float *x = randv(total, 21, 2.0f), *dy = randv(total, 22, 1.0f);
    for (size_t i = 0; i < total; i++)
        x[i] += 0.5f; /* a mean away from 0 */
    float *g = randv((size_t)c, 23, 1.0f), *bt = randv((size_t)c, 24, 0.5f);
    float *st[2][8]; /* per layout: rm, rv, sm, si, dg, db, y, dx */
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 8; a++) {
            size_t cnt = a < 6 ? (size_t)c : total;
            st[k][a] = malloc(cnt * sizeof(float));
            for (size_t i = 0; i < cnt; i++)
                st[k][a][i] = a == 1 ? 1.0f + 0.01f * (float)i : a < 6 ? 0.1f : NAN;
        }
    /* plain */
    float **p = st[0], **q = st[1];
    CHECK_OK((relu ? be->ops->batchnorm_relu_forward : be->ops->batchnorm_forward)(
        be, training, n, c, inner, 0.1f, 1e-5f, p[6], x, g, bt, p[0], p[1], p[2], p[3]));
    float *xb = blocked(x, n, c, (size_t)inner, blk), *dyb = blocked(dy, n, c, (size_t)inner, blk);
    float *yb = malloc(total * sizeof *yb), *dxb = malloc(total * sizeof *dxb);
    CHECK_OK(be->ops->batchnorm_blocked_forward(be, blk, relu, training, n, c, inner, 0.1f, 1e-5f,
                                                yb, xb, g, bt, q[0], q[1], q[2], q[3]));
    free(q[6]);
    q[6] = plain(yb, n, c, (size_t)inner, blk);
    double tol = 1e-5;
    CHECK_MSG(rel_diff(q[6], p[6], total) < tol,
              "y (n %d c %d inner %d blk %d relu %d train %d): %g", n, c, inner, blk, relu,
              training, rel_diff(q[6], p[6], total));
    for (int a = 0; a < 4 && training; a++)
        CHECK_MSG(rel_diff(q[a], p[a], (size_t)c) < tol, "statistic %d: %g", a,
                  rel_diff(q[a], p[a], (size_t)c));
    if (training) {
        for (int set = 0; set <= 1; set++) {
            if (relu && !set)
                continue; /* the fused pair only writes */
            float *dx0 = randv(total, 25, 1.0f);
            memcpy(p[7], dx0, total * sizeof(float));
            if (relu)
                CHECK_OK(be->ops->batchnorm_relu_backward_set(be, n, c, inner, p[7], p[4], p[5], dy,
                                                              x, g, bt, p[2], p[3]));
            else
                CHECK_OK((set ? be->ops->batchnorm_backward_set : be->ops->batchnorm_backward)(
                    be, n, c, inner, p[7], p[4], p[5], dy, x, g, p[2], p[3]));
            float *dx0b = blocked(dx0, n, c, (size_t)inner, blk);
            memcpy(dxb, dx0b, total * sizeof(float));
            CHECK_OK(be->ops->batchnorm_blocked_backward(be, blk, relu, set, n, c, inner, dxb, q[4],
                                                         q[5], dyb, xb, g, bt, p[2], p[3]));
            float *dx = plain(dxb, n, c, (size_t)inner, blk);
            CHECK_MSG(rel_diff(dx, p[7], total) < 1e-4, "dx (set %d relu %d): %g", set, relu,
                      rel_diff(dx, p[7], total));
            CHECK_MSG(rel_diff(q[4], p[4], (size_t)c) < 1e-4 &&
                          rel_diff(q[5], p[5], (size_t)c) < 1e-4,
                      "dgamma %g dbeta %g", rel_diff(q[4], p[4], (size_t)c),
                      rel_diff(q[5], p[5], (size_t)c));
            free(dx0), free(dx0b), free(dx);
        }
    }
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 8; a++)
            free(st[k][a]);
    free(x), free(dy), free(g), free(bt), free(xb), free(dyb), free(yb), free(dxb);
}

static void test_batchnorm_blocked(void)
{
    dl_backend *be = dl_backend_cpu(0);
    CHECK(be && be->ops->batchnorm_blocked_forward && be->ops->batchnorm_blocked_backward);
    if (!be || !be->ops->batchnorm_blocked_forward)
        return;
    const int shapes[][3] = {{6, 16, 49}, {3, 32, 9}, {2, 8, 1}, {5, 48, 196}, {2, 16, 33}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int blk = 8; blk <= 16; blk += 8) {
            if (shapes[s][1] % blk)
                continue;
            for (int relu = 0; relu <= 1; relu++)
                for (int training = 0; training <= 1; training++)
                    bn_case(be, shapes[s][0], shapes[s][1], shapes[s][2], blk, relu, training);
        }
    /* bad shapes are refused, naming the op */
    float v[64];
    CHECK(be->ops->batchnorm_blocked_forward(be, 16, 0, 1, 2, 24, 1, 0.1f, 1e-5f, v, v, NULL, NULL,
                                             NULL, NULL, NULL, NULL) == DL_EINVAL);
    CHECK(strstr(dl_error_message(), "batchnorm_forward (blocked)") != NULL);
}

/* The same bits at one and two threads. */
static void test_batchnorm_blocked_threads(void)
{
    int n = 7, c = 32, inner = 100, blk = 16;
    size_t total = (size_t)n * c * inner;
    float *x = randv(total, 31, 1.0f), *dy = randv(total, 32, 1.0f);
    float *out[2][2];
    for (int t = 0; t < 2; t++) {
        dl_backend *be = dl_backend_cpu_create(t + 1);
        CHECK(be != NULL);
        if (!be)
            return;
        float sm[32], si[32], dg[32] = {0}, db[32] = {0};
        out[t][0] = malloc(total * sizeof(float));
        out[t][1] = malloc(total * sizeof(float));
        CHECK_OK(be->ops->batchnorm_blocked_forward(be, blk, 1, 1, n, c, inner, 0.1f, 1e-5f,
                                                    out[t][0], x, NULL, NULL, NULL, NULL, sm, si));
        CHECK_OK(be->ops->batchnorm_blocked_backward(be, blk, 1, 1, n, c, inner, out[t][1], dg, db,
                                                     dy, x, NULL, NULL, sm, si));
        dl_backend_cpu_destroy(be);
    }
    CHECK(differing(out[0][0], out[1][0], total) == 0);
    CHECK(differing(out[0][1], out[1][1], total) == 0);
    for (int t = 0; t < 2; t++)
        free(out[t][0]), free(out[t][1]);
    free(x), free(dy);
}

static void test_global_pool_blocked(void)
{
    dl_backend *be = dl_backend_cpu(0);
    const int shapes[][3] = {{4, 16, 49}, {3, 32, 1}, {2, 64, 196}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int blk = 8; blk <= 16; blk += 8) {
            int n = shapes[s][0], c = shapes[s][1], hw = shapes[s][2], side = (int)sqrt(hw);
            dl_pool_desc d = {.n = n, .c = c, .h = side, .w = hw / side, .p = 1, .q = 1};
            size_t total = (size_t)n * c * hw;
            float *x = randv(total, 41, 1.0f), *dy = randv((size_t)n * c, 42, 1.0f);
            float *y = malloc((size_t)n * c * sizeof *y), *yb = malloc((size_t)n * c * sizeof *yb);
            float *dx = randv(total, 43, 1.0f), *dx0 = randv(total, 43, 1.0f);
            float *xb = blocked(x, n, c, (size_t)hw, blk),
                  *dxb = blocked(dx0, n, c, (size_t)hw, blk);
            CHECK_OK(be->ops->adaptive_avgpool_forward(be, &d, y, x));
            CHECK_OK(be->ops->adaptive_avgpool_backward(be, &d, dx, dy));
            d.blk = blk;
            CHECK_OK(be->ops->adaptive_avgpool_forward(be, &d, yb, xb));
            CHECK_OK(be->ops->adaptive_avgpool_backward(be, &d, dxb, dy));
            float *dxp = plain(dxb, n, c, (size_t)hw, blk);
            CHECK_MSG(rel_diff(yb, y, (size_t)n * c) < 1e-6, "y c %d hw %d blk %d", c, hw, blk);
            CHECK_MSG(differing(dxp, dx, total) == 0, "dx c %d hw %d blk %d", c, hw, blk);
            free(x), free(dy), free(y), free(yb), free(dx), free(dx0), free(xb), free(dxb),
                free(dxp);
        }
    dl_pool_desc bad = {.n = 1, .c = 24, .h = 2, .w = 2, .p = 1, .q = 1, .blk = 16};
    float v[96];
    CHECK(be->ops->adaptive_avgpool_forward(be, &bad, v, v) == DL_EINVAL);
}

/* Pooling blocked against plain: max (NaN included) and average, the
 * ReLU -> MaxPool2d fused ops, written and added dx; bit for bit but
 * where windows overlap in the backward. */
static void test_pool_blocked(void)
{
    dl_backend *be = dl_backend_cpu(0);
    /* n, c, h, window, stride, pad */
    const int cases[][6] = {{3, 16, 8, 2, 2, 0},
                            {2, 32, 9, 3, 2, 1},
                            {2, 16, 7, 3, 1, 1},
                            {4, 8, 10, 5, 1, 2},
                            {2, 16, 14, 2, 2, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int blk = 8; blk <= 16; blk += 8)
            for (int kind = 0; kind < 3; kind++) { /* max, average, relu + max */
                const int *c = cases[ci];
                if (c[1] % blk)
                    continue;
                int p = (c[2] + 2 * c[5] - c[3]) / c[4] + 1;
                dl_pool_desc d = {c[0], c[1], c[2], c[2], c[3], c[4], c[5], p, p, 0};
                dl_pool_kind pk = kind == 1 ? DL_POOL_AVG : DL_POOL_MAX;
                size_t hw = (size_t)c[2] * c[2], pq = (size_t)p * p;
                size_t nx = (size_t)c[0] * c[1] * hw, ny = (size_t)c[0] * c[1] * pq;
                float *x = randv(nx, 61 + ci, 1.0f), *dy = randv(ny, 62, 1.0f);
                for (size_t i = 0; i < nx; i += 37) /* ties for the first-maximum rule */
                    x[i] = x[i / 2];
                if (kind == 0)
                    x[5] = NAN;
                float *y = malloc(ny * sizeof *y), *yb = malloc(ny * sizeof *yb);
                float *dx = randv(nx, 63, 1.0f), *dxb0 = randv(nx, 63, 1.0f);
                if (kind == 2) {
                    CHECK_OK(be->ops->relu_maxpool_forward(be, &d, y, x));
                    CHECK_OK(be->ops->relu_maxpool_backward(be, &d, dx, dy, x, y));
                } else {
                    CHECK_OK(be->ops->pool_forward(be, pk, &d, y, x));
                    CHECK_OK(be->ops->pool_backward(be, pk, &d, dx, dy, x, y));
                }
                float *xb = blocked(x, c[0], c[1], hw, blk),
                      *dyb = blocked(dy, c[0], c[1], pq, blk);
                float *dxb = blocked(dxb0, c[0], c[1], hw, blk);
                d.blk = blk;
                if (kind == 2) {
                    CHECK_OK(be->ops->relu_maxpool_forward(be, &d, yb, xb));
                    CHECK_OK(be->ops->relu_maxpool_backward(be, &d, dxb, dyb, xb, yb));
                } else {
                    CHECK_OK(be->ops->pool_forward(be, pk, &d, yb, xb));
                    CHECK_OK(be->ops->pool_backward(be, pk, &d, dxb, dyb, xb, yb));
                }
                float *yp = plain(yb, c[0], c[1], pq, blk), *dxp = plain(dxb, c[0], c[1], hw, blk);
                CHECK_MSG(differing(yp, y, ny) == 0, "y case %zu kind %d blk %d: %zu differ", ci,
                          kind, blk, differing(yp, y, ny));
                /* overlapping windows: a cell's contributions add up in
                 * scan order here, by row and column parity in the plain
                 * 3x3 stride-2 kernels (cpu_pool3.c) */
                if (c[4] < c[3])
                    CHECK_MSG(rel_diff(dxp, dx, nx) < 1e-6, "dx case %zu kind %d blk %d: %g", ci,
                              kind, blk, rel_diff(dxp, dx, nx));
                else
                    CHECK_MSG(differing(dxp, dx, nx) == 0, "dx case %zu kind %d blk %d: %zu differ",
                              ci, kind, blk, differing(dxp, dx, nx));
                free(x), free(dy), free(y), free(yb), free(dx), free(dxb0), free(xb), free(dyb),
                    free(dxb), free(yp), free(dxp);
            }
    dl_pool_desc bad = {2, 24, 4, 4, 2, 2, 0, 2, 2, 16};
    float v[768];
    CHECK(be->ops->pool_forward(be, DL_POOL_MAX, &bad, v, v) == DL_EINVAL);
    CHECK(strstr(dl_error_message(), "blocked") != NULL);
}

/* --- the model's layout plan -------------------------------------------------- */

static dl_layer *conv(int cin, int cout, int k, int stride)
{
    dl_conv2d_opts o = {.stride = stride, .padding = k / 2};
    return dl_nn_conv2d_with(cin, cout, k, &o);
}

static dl_layer *seq(int n, dl_layer **ls)
{
    dl_layer *s = dl_nn_sequential();
    for (int i = 0; i < n; i++)
        dl_nn_sequential_add(s, ls[i]);
    return s;
}

/* A small ResNet on [3, 8, 8]: stem, a block with the identity shortcut,
 * a strided block with a 1x1 projection, global pooling, a classifier;
 * after the stem's ReLU, variant 0 an Identity, 1 a Dropout (NCHW only),
 * 2 a max pooling (fused with the ReLU). */
static dl_layer *small_resnet(int variant, dl_layer **stem, dl_layer **mid_conv, dl_layer **gpool)
{
    dl_layer *b1[] = {conv(16, 16, 3, 1), dl_nn_batchnorm(16, 1e-5f, 0.1f),
                      dl_nn_activation(DL_ACT_RELU), conv(16, 16, 3, 1),
                      dl_nn_batchnorm(16, 1e-5f, 0.1f)};
    *mid_conv = b1[0];
    dl_layer *b2[] = {conv(16, 32, 3, 2), dl_nn_batchnorm(32, 1e-5f, 0.1f),
                      dl_nn_activation(DL_ACT_GELU), conv(32, 32, 3, 1),
                      dl_nn_batchnorm(32, 1e-5f, 0.1f)};
    dl_layer *sc[] = {conv(16, 32, 1, 2), dl_nn_batchnorm(32, 1e-5f, 0.1f)};
    *stem = conv(3, 16, 3, 1);
    *gpool = dl_nn_adaptive_avgpool2d(1, 1);
    dl_layer *ls[] = {*stem,
                      dl_nn_batchnorm(16, 1e-5f, 0.1f),
                      dl_nn_activation(DL_ACT_RELU),
                      variant == 1   ? dl_nn_dropout(0.2f)
                      : variant == 2 ? dl_nn_maxpool2d(3, 1, 1)
                                     : dl_nn_identity(),
                      dl_nn_residual(seq(5, b1)),
                      dl_nn_activation(DL_ACT_RELU),
                      dl_nn_residual_shortcut(seq(5, b2), seq(2, sc)),
                      dl_nn_activation(DL_ACT_RELU),
                      *gpool,
                      dl_nn_flatten(),
                      dl_nn_linear(32, 5, 1)};
    return seq(11, ls);
}

/* On [3, 8, 8]: conv(3 -> 16), GELU, conv(16 -> 16) (*mid), BatchNorm,
 * ReLU, global pooling, Flatten, Linear(16 -> 5). */
static dl_layer *gelu_chain(dl_layer **mid)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, conv(3, 16, 3, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_GELU));
    *mid = conv(16, 16, 3, 1);
    dl_nn_sequential_add(s, *mid);
    dl_nn_sequential_add(s, dl_nn_batchnorm(16, 1e-5f, 0.1f));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_adaptive_avgpool2d(1, 1));
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(16, 5, 1));
    return s;
}

/* One training step's output and gradients of m (input and output
 * gradient fixed), DLBENCH_BLOCKED as given. */
static void model_step_in(dl_model *m, int n, const char *blocked_env, dl_precision prec,
                          float *out, float *grads);

static void model_step(dl_model *m, int n, const char *blocked_env, float *out, float *grads)
{
    model_step_in(m, n, blocked_env, DL_PREC_F32, out, grads);
}

static void model_step_in(dl_model *m, int n, const char *blocked_env, dl_precision prec,
                          float *out, float *grads)
{
    if (blocked_env)
        setenv("DLBENCH_BLOCKED", blocked_env, 1);
    else
        unsetenv("DLBENCH_BLOCKED");
    dl_model_state s;
    dl_model_get_state(m, &s);
    memset(s.grads, 0, s.count * sizeof(float));
    size_t nin = (size_t)n * dl_shape_numel(dl_model_input_shape(m));
    size_t nout = (size_t)n * dl_shape_numel(dl_model_output_shape(m));
    float *x = randv(nin, 51, 1.0f), *r = randv(nout, 52, 1.0f);
    memcpy(dl_model_input(m), x, nin * sizeof *x);
    dl_pass p;
    dl_model_pass(m, &p, n, 1, prec, 5, 3);
    CHECK_OK(dl_model_forward(m, &p));
    memcpy(out, dl_model_output(m), nout * sizeof *out);
    memcpy(dl_model_output_grad(m), r, nout * sizeof *r);
    CHECK_OK(dl_model_backward(m, &p));
    memcpy(grads, s.grads, s.count * sizeof *grads);
    unsetenv("DLBENCH_BLOCKED");
    free(x), free(r);
}

/* One training step of m (planned for n rows, `classes` outputs) in the
 * plain layout (where `probe` then has no blocks), then one in the
 * plan's, from the same running statistics (they move with each step):
 * the outputs within 1e-5, the gradients within 1e-4. */
static void steps_both_layouts(dl_model *m, int n, int classes, const dl_layer *probe,
                               const char *what)
{
    CHECK_OK(dl_model_plan(m, n));
    size_t nout = (size_t)n * classes, np = dl_model_param_count(m);
    float *o[2] = {malloc(nout * 4), malloc(nout * 4)}, *g[2] = {malloc(np * 4), malloc(np * 4)};
    dl_model_state s;
    dl_model_get_state(m, &s);
    float *buf = malloc((s.buffer_count + 1) * 4);
    memcpy(buf, s.buffers, s.buffer_count * 4);
    model_step(m, n, "0", o[0], g[0]);
    CHECK(probe->blk_in == 0 && probe->blk_out == 0);
    memcpy(s.buffers, buf, s.buffer_count * 4);
    model_step(m, n, NULL, o[1], g[1]);
    CHECK_MSG(rel_diff(o[1], o[0], nout) < 1e-5, "%s: outputs %g", what,
              rel_diff(o[1], o[0], nout));
    CHECK_MSG(rel_diff(g[1], g[0], np) < 1e-4, "%s: gradients %g", what, rel_diff(g[1], g[0], np));
    free(o[0]), free(o[1]), free(g[0]), free(g[1]), free(buf);
}

/* A CNN whose last convolution leads through BatchNorm, ReLU and a max
 * pooling to Flatten and the classifier (the benchmark CNN's and
 * fmnist_cnn.lua's shape): the Flatten reads the blocks and writes NCHW,
 * so that stack stays blocked; its outputs and gradients those of the
 * plain layout. */
static void flatten_case(dl_backend *be, int blk)
{
    dl_layer *c2 = conv(16, 32, 3, 1), *flat = dl_nn_flatten();
    dl_layer *ls[] = {conv(3, 16, 3, 1),
                      dl_nn_activation(DL_ACT_RELU),
                      dl_nn_maxpool2d(2, 2, 0),
                      c2,
                      dl_nn_batchnorm(32, 1e-5f, 0.1f),
                      dl_nn_activation(DL_ACT_RELU),
                      dl_nn_maxpool2d(2, 2, 0),
                      flat,
                      dl_nn_linear(32 * 3 * 3, 5, 1)};
    dl_model *m = NULL;
    dl_shape in = {3, {3, 12, 12}};
    CHECK_OK(dl_model_create(&m, seq(9, ls), &in));
    if (!m)
        return;
    CHECK_OK(dl_model_init_state(m, be, 0, 11));
    steps_both_layouts(m, 5, 5, flat, "CNN ending in Flatten");
    CHECK_MSG(flat->blk_in == blk && flat->blk_out == 0 && c2->blk_out == blk,
              "flatten in %d out %d, conv out %d (blocks of %d)", flat->blk_in, flat->blk_out,
              c2->blk_out, blk);
    dl_model_destroy(m);
}

/* With AVX-512 (where the CPU has it) and with AVX2's kernels: the stem
 * runs oneDNN's forward on either, so its y is blocked on both; and the
 * CNN ending in Flatten. */
static void test_model_layout(void)
{
    dl_backend *be = dl_backend_cpu(0);
    if (!be->ops->activation_blocks(be, DL_F32)) {
        SKIP("the CPU backend keeps NCHW here (built without oneDNN)");
        dl_backend_cpu_destroy(be);
        return;
    }
    int was = dl_cpu_avx512();
    for (int isa = was; isa >= 0; isa--) {
        for (int variant = 0; variant <= 2; variant++) {
            dl_cpu_set_avx512(isa);
            int blk = be->ops->activation_blocks(be, DL_F32);
            CHECK(blk == (isa ? 16 : 8));
            int plain_stem = variant == 1;
            dl_layer *stem, *mid, *gpool;
            dl_layer *root = small_resnet(variant, &stem, &mid, &gpool);
            dl_model *m = NULL;
            dl_shape in = {3, {3, 8, 8}};
            CHECK_OK(dl_model_create(&m, root, &in));
            if (!m)
                break; /* AVX-512 is switched back on below */
            CHECK_OK(dl_model_init_state(m, be, 0, 7));
            steps_both_layouts(m, 6, 5, mid, "small ResNet");
            /* the stem reads the images as they are; the flatten needs NCHW */
            CHECK(stem->blk_in == 0);
            CHECK_MSG(stem->blk_out == (plain_stem ? 0 : blk),
                      "stem out %d (variant %d, AVX-512 %d)", stem->blk_out, variant, isa);
            CHECK_MSG(mid->blk_in == (plain_stem ? 0 : blk) && mid->blk_out == blk,
                      "block conv in %d out %d", mid->blk_in, mid->blk_out);
            CHECK(gpool->blk_in == blk && gpool->blk_out == 0);
            dl_model_destroy(m);
        }
        flatten_case(be, be->ops->activation_blocks(be, DL_F32));
    }
    dl_cpu_set_avx512(was);
    dl_backend_cpu_destroy(be);
}

/* The conversions Flatten runs on blocks: blocks to NCHW and back,
 * written and added; a block that does not divide the channels refused. */
static void test_layout_conversions(void)
{
    dl_backend *be = dl_backend_cpu(0);
    int n = 3, c = 16, blk = 8;
    size_t hw = 7, len = (size_t)n * c * hw;
    float *x = randv(len, 61, 1.0f), *b = malloc(len * 4), *pl = malloc(len * 4);
    float *acc = randv(len, 62, 1.0f), *acc0 = malloc(len * 4);
    memcpy(acc0, acc, len * 4);
    dl_cpu_to_blocked(b, x, n, c, hw, blk, 0);
    CHECK_OK(be->ops->blocks_to_plain(be, blk, n, c, hw, pl, b));
    CHECK(differing(pl, x, len) == 0);
    CHECK_OK(be->ops->plain_to_blocks(be, blk, 1, n, c, hw, acc, x));
    for (size_t i = 0; i < len; i++)
        CHECK_MSG(acc[i] == acc0[i] + b[i], "added [%zu] %g, want %g", i, acc[i], acc0[i] + b[i]);
    CHECK(be->ops->plain_to_blocks(be, 16, 0, n, 24, hw, acc, x) == DL_EINVAL);
    free(x), free(b), free(pl), free(acc), free(acc0);
    dl_backend_cpu_destroy(be);
}

/* Activations written rounded by their producer (emulated bf16): a
 * backend whose BatchNorm ops pass the rounding on (on) or drop it and
 * whose convolutions then round every operand themselves (off). */
static const dl_backend_ops *round_real;
static int round_asked, act_asked, conv_told;

static int bn_fwd_on(dl_backend *be, int blk, int flags, int training, int n, int c, int inner,
                     float momentum, float eps, float *y, const float *x, const float *gamma,
                     const float *beta, float *rm, float *rv, float *sm, float *si)
{
    round_asked += (flags & DL_BN_ROUND_BF16) != 0;
    return round_real->batchnorm_blocked_forward(be, blk, flags, training, n, c, inner, momentum,
                                                 eps, y, x, gamma, beta, rm, rv, sm, si);
}

static int bn_bwd_on(dl_backend *be, int blk, int flags, int set, int n, int c, int inner,
                     float *dx, float *dg, float *db, const float *dy, const float *x,
                     const float *gamma, const float *beta, const float *sm, const float *si)
{
    round_asked += (flags & DL_BN_ROUND_BF16) != 0;
    return round_real->batchnorm_blocked_backward(be, blk, flags, set, n, c, inner, dx, dg, db, dy,
                                                  x, gamma, beta, sm, si);
}

static int bn_fwd_off(dl_backend *be, int blk, int flags, int training, int n, int c, int inner,
                      float momentum, float eps, float *y, const float *x, const float *gamma,
                      const float *beta, float *rm, float *rv, float *sm, float *si)
{
    return round_real->batchnorm_blocked_forward(
        be, blk, flags & ~(DL_BN_ROUND_BF16 | DL_BN_ROUND_F16), training, n, c, inner, momentum,
        eps, y, x, gamma, beta, rm, rv, sm, si);
}

static int bn_bwd_off(dl_backend *be, int blk, int flags, int set, int n, int c, int inner,
                      float *dx, float *dg, float *db, const float *dy, const float *x,
                      const float *gamma, const float *beta, const float *sm, const float *si)
{
    return round_real->batchnorm_blocked_backward(
        be, blk, flags & ~(DL_BN_ROUND_BF16 | DL_BN_ROUND_F16), set, n, c, inner, dx, dg, db, dy, x,
        gamma, beta, sm, si);
}

static int act_round_on(dl_backend *be, dl_act kind, float *y, const float *x, size_t n,
                        dl_dtype round)
{
    act_asked++;
    return round_real->act_forward_round(be, kind, y, x, n, round);
}

/* d with rounded kept (on: counted) or cleared (off). */
static dl_conv_desc told(dl_backend *be, const dl_conv_desc *d)
{
    dl_conv_desc t = *d;
    if (be->ops->batchnorm_blocked_forward == bn_fwd_off)
        t.rounded = 0;
    conv_told += t.rounded != 0;
    return t;
}

static int cf(dl_backend *be, const dl_conv_desc *d, float *y, const float *x, const float *w,
              const float *b, void *ws, size_t wsb, dl_dtype compute)
{
    dl_conv_desc t = told(be, d);
    return round_real->conv_forward(be, &t, y, x, w, b, ws, wsb, compute);
}

static int cbd(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy, const float *w,
               void *ws, size_t wsb, dl_dtype compute)
{
    dl_conv_desc t = told(be, d);
    return round_real->conv_backward_data(be, &t, dx, dy, w, ws, wsb, compute);
}

static int cbds(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy, const float *w,
                void *ws, size_t wsb, dl_dtype compute)
{
    dl_conv_desc t = told(be, d);
    return round_real->conv_backward_data_set(be, &t, dx, dy, w, ws, wsb, compute);
}

static int cbf(dl_backend *be, const dl_conv_desc *d, float *dw, float *db, const float *dy,
               const float *x, void *ws, size_t wsb, dl_dtype compute)
{
    dl_conv_desc t = told(be, d);
    return round_real->conv_backward_filter(be, &t, dw, db, dy, x, ws, wsb, compute);
}

static int cb(dl_backend *be, const dl_conv_desc *d, float *dw, float *db, float *dx, int set,
              const float *dy, const float *x, const float *w, void *ws, size_t wsb,
              dl_dtype compute)
{
    dl_conv_desc t = told(be, d);
    return round_real->conv_backward(be, &t, dw, db, dx, set, dy, x, w, ws, wsb, compute);
}

/* The same bf16 step, bit for bit, with the activations a convolution
 * reads rounded by their producer (a BatchNorm, alone or with its ReLU:
 * its output forward, its input gradient, the convolution's dy,
 * backward; a GELU: its output) and by the convolution itself; and the
 * rounding did happen. */
static void test_rounded_activations(void)
{
    setenv("DLBENCH_CPU_BF16", "0", 1); /* emulated bf16 on any CPU */
    dl_backend *cpu = dl_backend_cpu_create(1);
    unsetenv("DLBENCH_CPU_BF16");
    CHECK(cpu != NULL);
    if (!cpu)
        return;
    if (!cpu->ops->activation_blocks(cpu, DL_BF16)) {
        SKIP("the CPU backend keeps NCHW here (built without oneDNN)");
        dl_backend_cpu_destroy(cpu);
        return;
    }
    round_real = cpu->ops;
    dl_backend_ops ops[2] = {*cpu->ops, *cpu->ops};
    ops[0].batchnorm_blocked_forward = bn_fwd_on;
    ops[0].batchnorm_blocked_backward = bn_bwd_on;
    ops[1].batchnorm_blocked_forward = bn_fwd_off;
    ops[1].batchnorm_blocked_backward = bn_bwd_off;
    CHECK(cpu->ops->act_forward_round != NULL);
    ops[0].act_forward_round = act_round_on;
    ops[1].act_forward_round = NULL;
    for (int k = 0; k < 2; k++) {
        ops[k].conv_forward = cf;
        ops[k].conv_backward_data = cbd;
        ops[k].conv_backward_data_set = cbds;
        ops[k].conv_backward_filter = cbf;
        if (ops[k].conv_backward)
            ops[k].conv_backward = cb;
    }
    dl_backend bes[2] = {*cpu, *cpu};
    bes[0].ops = &ops[0];
    bes[1].ops = &ops[1];
    int n = 6;
    size_t nout = (size_t)n * 5;
    /* model 0: the small ResNet (BatchNorm, fused with its ReLU or GELU or
     * not, before each convolution); 1: a GELU alone between two */
    for (int model = 0; model < 2; model++) {
        float *o[2] = {NULL, NULL}, *g[2] = {NULL, NULL};
        size_t np = 0;
        int told_on = 0;
        for (int k = 0; k < 2; k++) {
            dl_layer *stem, *mid, *gpool;
            dl_model *m = NULL;
            dl_shape in = {3, {3, 8, 8}};
            CHECK_OK(dl_model_create(
                &m, model == 0 ? small_resnet(0, &stem, &mid, &gpool) : gelu_chain(&mid), &in));
            if (!m)
                break;
            CHECK_OK(dl_model_init_state(m, &bes[k], 0, 7));
            dl_model_set_precision(m, DL_PREC_BF16);
            CHECK_OK(dl_model_plan(m, n));
            CHECK_OK(dl_model_refresh_lowp(m, DL_BF16));
            np = dl_model_param_count(m);
            o[k] = malloc(nout * 4), g[k] = malloc(np * 4);
            round_asked = act_asked = conv_told = 0;
            model_step_in(m, n, NULL, DL_PREC_BF16, o[k], g[k]);
            CHECK(mid->blk_in && mid->blk_out); /* the convolutions run blocked */
            if (k == 0 && model == 0) {
                /* forward: the stem's and b1's inner BatchNorm(+ReLU), b2's
                 * GELU, the shortcut's none (added); backward: the dy of the
                 * convolutions a BatchNorm follows */
                CHECK_MSG(round_asked >= 4 && act_asked == 1, "roundings asked: %d, %d",
                          round_asked, act_asked);
            }
            if (k == 0 && model == 1)
                CHECK_MSG(act_asked == 1, "GELU roundings asked: %d", act_asked);
            if (k == 0)
                told_on = conv_told;
            dl_model_destroy(m);
        }
        CHECK_MSG(told_on >= (model == 0 ? 4 : 2), "convolutions told of rounded operands: %d",
                  told_on);
        if (o[0] && o[1]) {
            CHECK_MSG(!memcmp(o[0], o[1], nout * 4), "model %d: outputs differ: %g", model,
                      rel_diff(o[0], o[1], nout));
            CHECK_MSG(!memcmp(g[0], g[1], np * 4), "model %d: gradients differ: %g", model,
                      rel_diff(g[0], g[1], np));
        }
        free(o[0]), free(o[1]), free(g[0]), free(g[1]);
    }
    dl_backend_cpu_destroy(cpu);
}

int main(void)
{
    RUN(test_layout_transposes);
    RUN(test_conv_blocked);
    RUN(test_conv_wino_threads);
    RUN(test_batchnorm_blocked);
    RUN(test_batchnorm_blocked_threads);
    RUN(test_global_pool_blocked);
    RUN(test_pool_blocked);
    RUN(test_model_layout);
    RUN(test_layout_conversions);
    RUN(test_rounded_activations);
    CHECK_EXIT();
}
