/* bench_conv.c - GFLOP/s of the CPU backend's convolutions at the shapes of small CNNs, against the sgemm ceiling of the same run
 *
 * Each shape runs forward, backward data and backward filter through the
 * op table, as Conv2d calls them; the ceiling is the backend's own f32
 * GEMM (dl_cpu_gemm: oneDNN's sgemm where the build has oneDNN, else
 * OpenBLAS's, split over the pool) on a 512^3 product. Run it with DLBENCH_CONV=own to time the own kernels
 * (im2col + GEMM, direct, sparse) instead of oneDNN's, with DLBENCH_CONV=dnnl for oneDNN's wherever it
 * has the shape (the peer of the own bf16 kernels), with BENCH_CONV_COLD=1 to time each call with its
 * operands in memory rather than in cache, as a model's layers find them, and with BENCH_CONV_VS=dnnl to
 * time the default choice and oneDNN's alternately in the same process, with their ratio; with
 * BENCH_CONV_VS=wino, the Winograd kernels (oneDNN's with AVX-512, the own F(2x2, 3x3) with AVX2) against
 * oneDNN's direct ones (DLBENCH_CONV_WINO=1, =0), both on the channel blocks a model keeps.
 * BENCH_CONV_VS=lanes, the depthwise kernels with channels in lanes against those on planes
 * (DLBENCH_DW_LANES=1, =0). BENCH_CONV_VS=blocked, x and y in oneDNN's channel blocks (as the layout
 * plan keeps a model's activations, where the backend allows it for the shape) against NCHW.
 *
 * usage: bench_conv [threads] [f32|bf16] [only]   (default 1 thread, f32 compute;
 *        only: run just the shapes whose name contains it)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_cpu.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/core/backend.h"
#include "engine/cpu/cpu.h"

typedef struct shape {
    const char *what;
    int n, c, h, k, r, stride, pad, groups; /* groups 0: 1 */
} shape;

static const shape shapes[] = {
    {"stem 1->16 28x28", 64, 1, 28, 16, 3, 1, 1, 0},
    {"16->16 28x28", 64, 16, 28, 16, 3, 1, 1, 0},
    {"16->32 14x14", 64, 16, 14, 32, 3, 1, 1, 0},
    {"32->32 14x14", 64, 32, 14, 32, 3, 1, 1, 0},
    {"32->64 7x7 s1", 64, 32, 7, 64, 3, 1, 1, 0},
    {"16->32 s2 28x28", 128, 16, 28, 32, 3, 2, 1, 0},
    {"32->64 s2 14x14", 128, 32, 14, 64, 3, 2, 1, 0},
    {"64->64 7x7", 64, 64, 7, 64, 3, 1, 1, 0},
    {"1x1 32->64 s2", 64, 32, 14, 64, 1, 2, 0, 0},
    {"1x1 16->32 s2 28x28", 128, 16, 28, 32, 1, 2, 0, 0},
    {"1x1 32->64 s1 7x7", 64, 32, 7, 64, 1, 1, 0, 0},
    {"1x1 64->256 s1 14x14", 64, 64, 14, 256, 1, 1, 0, 0},
    {"1x1 256->64 s1 14x14", 64, 256, 14, 64, 1, 1, 0, 0},
    {"bench cnn 32->64 13x13", 128, 32, 13, 64, 3, 1, 0, 0},
    /* shapes no kernel was tuned for: a CIFAR VGG/ResNet's */
    {"cifar stem 3->32 32x32", 64, 3, 32, 32, 3, 1, 1, 0},
    {"cifar 64->64 16x16", 64, 64, 16, 64, 3, 1, 1, 0},
    {"cifar 128->128 8x8", 64, 128, 8, 128, 3, 1, 1, 0},
    {"cifar 128->128 16x16 5x5", 32, 128, 16, 128, 5, 1, 2, 0},
    {"cifar 32->32 32x32", 64, 32, 32, 32, 3, 1, 1, 0},
    {"cifar 32->64 16x16", 64, 32, 16, 64, 3, 1, 1, 0},
    {"cifar 64->128 8x8", 64, 64, 8, 128, 3, 1, 1, 0},
    {"256->256 7x7", 32, 256, 7, 256, 3, 1, 1, 0},
    /* LeNet-5's, batch 128: 5x5 kernels on 1 and 6 channels */
    {"lenet 1->6 5x5 28x28", 128, 1, 28, 6, 5, 1, 2, 0},
    {"lenet 6->16 5x5 14x14", 128, 6, 14, 16, 5, 1, 0, 0},
    /* the PyTorch CIFAR tutorial's first: 5x5 on 3 channels, no padding */
    {"cifar lenet 3->6 5x5 32x32", 64, 3, 32, 6, 5, 1, 0, 0},
    /* depthwise (groups = channels), a MobileNet's on CIFAR: memory-bound,
     * so GB/s of x, y and w read or written once is the figure to watch */
    {"dw 32 32x32", 64, 32, 32, 32, 3, 1, 1, 32},
    {"dw 64 s2 32x32", 64, 64, 32, 64, 3, 2, 1, 64},
    {"dw 128 16x16", 64, 128, 16, 128, 3, 1, 1, 128},
    {"dw 256 8x8", 64, 256, 8, 256, 3, 1, 1, 256},
    {"dw 96 5x5 14x14", 64, 96, 14, 96, 5, 1, 2, 96},
    /* and a MobileNet's on 28x28 (bench_models.h) */
    {"dw 64 s2 28x28", 64, 64, 28, 64, 3, 2, 1, 64},
    {"dw 128 14x14", 64, 128, 14, 128, 3, 1, 1, 128},
    {"dw 128 s2 14x14", 64, 128, 14, 128, 3, 2, 1, 128},
    {"dw 256 7x7", 64, 256, 7, 256, 3, 1, 1, 256},
};

typedef struct bufs {
    dl_backend *be;
    dl_conv_desc d;
    float *x, *w, *b, *y, *dx, *dw, *db;
    void *ws;
    size_t ws_bytes;
    dl_dtype compute;
} bufs;

static void call(bufs *B, int dir)
{
    int rc = dir == 0   ? B->be->ops->conv_forward(B->be, &B->d, B->y, B->x, B->w, B->b, B->ws,
                                                   B->ws_bytes, B->compute)
             : dir == 1 ? B->be->ops->conv_backward_data(B->be, &B->d, B->dx, B->y, B->w, B->ws,
                                                         B->ws_bytes, B->compute)
                        : B->be->ops->conv_backward_filter(B->be, &B->d, B->dw, B->db, B->y, B->x,
                                                           B->ws, B->ws_bytes, B->compute);
    DL_ASSERT(rc == DL_OK);
}

/* BENCH_CONV_COLD=1: every call finds its operands in memory, as in a
 * model (each call times alone, after 64 MB written elsewhere). */
static double best_cold(bufs *B, int dir)
{
    static char *flush;
    size_t fb = (size_t)64 << 20;
    if (!flush)
        DL_ASSERT((flush = malloc(fb)) != NULL);
    double best = 1e30;
    for (int i = 0; i < 12; i++) {
        memset(flush, i, fb);
        double t0 = dl_clock_mono_s();
        call(B, dir);
        double t = dl_clock_mono_s() - t0;
        if (i > 1 && t < best)
            best = t;
    }
    return best;
}

static double best_of(bufs *B, int dir)
{
    const char *cold = getenv("BENCH_CONV_COLD");
    if (cold && !strcmp(cold, "1"))
        return best_cold(B, dir);
    double best = 1e30;
    for (int w = 0; w < 4; w++) { /* the first window warms up */
        int reps = 0;
        double t0 = dl_clock_mono_s(), t;
        do {
            call(B, dir);
            reps++;
            t = dl_clock_mono_s() - t0;
        } while (t < 0.15);
        if (w > 0 && t / reps < best)
            best = t / reps;
    }
    return best;
}

static float *filled(size_t n)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    DL_ASSERT(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

/* sgemm GFLOP/s at m x n x k through the backend (the ceiling). */
static double sgemm_rate(dl_backend *be, int m, int n, int k)
{
    float *a = filled((size_t)m * k), *b = filled((size_t)k * n), *c = filled((size_t)m * n);
    double best = 1e30;
    for (int w = 0; w < 4; w++) {
        int reps = 0;
        double t0 = dl_clock_mono_s(), t;
        do {
            dl_cpu_gemm(be, 0, 0, m, n, k, 1.0f, a, k, b, n, DL_F32, 0.0f, c, n);
            reps++;
            t = dl_clock_mono_s() - t0;
        } while (t < 0.15);
        if (w > 0 && t / reps < best)
            best = t / reps;
    }
    free(a), free(b), free(c);
    return 2.0 * m * n * k / best / 1e9;
}

int main(int argc, char **argv)
{
    dl_backend *be = dl_backend_cpu(argc > 1 ? atoi(argv[1]) : 1);
    bench_cpu_line();
    dl_dtype compute = argc > 2 && !strcmp(argv[2], "bf16") ? DL_BF16 : DL_F32;
    const char *algo = getenv("DLBENCH_CONV"), *cold = getenv("BENCH_CONV_COLD");
    const char *tag = algo && !strcmp(algo, "own")    ? "own"
                      : algo && !strcmp(algo, "dnnl") ? "dnnl"
                                                      : "default";
    printf("backend: %s; convolutions: %s, %s compute%s\n", be->description,
           !strcmp(tag, "own")    ? "own kernels (DLBENCH_CONV=own)"
           : !strcmp(tag, "dnnl") ? "oneDNN's where it has the shape (DLBENCH_CONV=dnnl)"
                                  : "default choice",
           dl_dtype_name(compute),
           cold && !strcmp(cold, "1") ? ", operands in memory (BENCH_CONV_COLD=1)" : "");
    const char *vse = getenv("BENCH_CONV_VS");
    int wino = vse && !strcmp(vse, "wino"), lanes = vse && !strcmp(vse, "lanes");
    int blocked = vse && !strcmp(vse, "blocked");
    int vs = wino || lanes || blocked || (vse && !strcmp(vse, "dnnl"));
    /* the two settings a comparison switches between */
    const char *var = wino ? "DLBENCH_CONV_WINO" : lanes ? "DLBENCH_DW_LANES" : NULL;
    double ceil = sgemm_rate(be, 512, 512, 512);
    printf("sgemm ceiling (512^3): %.1f GFLOP/s\n\n", ceil);
    if (vs)
        printf("  %-24s %21s %21s %21s\n  %-24s %s\n", "shape (batch 64/128)", "fwd", "bwd data",
               "bwd w", "",
               wino    ? "  (GFLOP/s: Winograd where there is one for the shape, direct, the ratio)"
               : lanes ? "  (GFLOP/s: depthwise with channels in lanes, on planes, the ratio)"
               : blocked ? "  (GFLOP/s: x and y in channel blocks where allowed, NCHW, the ratio)"
                         : "  (GFLOP/s: the default choice, oneDNN's, the ratio)");
    else
        printf("  %-24s %9s %9s %9s %9s\n", "shape (batch 64/128)", "fwd", "bwd data", "bwd w",
               "/sgemm");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *s = &shapes[i];
        if (argc > 3 && !strstr(s->what, argv[3]))
            continue;
        int p = (s->h + 2 * s->pad - s->r) / s->stride + 1;
        int groups = s->groups > 0 ? s->groups : 1, cg = s->c / groups;
        bufs B = {.be = be,
                  .d = {s->n, s->c, s->h, s->h, s->k, s->r, s->r, s->stride, s->pad, p, p, groups,
                        1, 0, 0},
                  .compute = compute};
        B.x = filled((size_t)s->n * s->c * s->h * s->h);
        B.dx = filled((size_t)s->n * s->c * s->h * s->h);
        B.w = filled((size_t)s->k * cg * s->r * s->r);
        B.dw = filled((size_t)s->k * cg * s->r * s->r);
        B.b = filled((size_t)s->k);
        B.db = filled((size_t)s->k);
        B.y = filled((size_t)s->n * s->k * p * p);
        B.ws_bytes = be->ops->conv_workspace(be, &B.d, compute);
        if (var) { /* room for either setting */
            setenv(var, "1", 1);
            size_t a = be->ops->conv_workspace(be, &B.d, compute);
            setenv(var, "0", 1);
            size_t b = be->ops->conv_workspace(be, &B.d, compute);
            unsetenv(var);
            B.ws_bytes = a > B.ws_bytes ? a : B.ws_bytes;
            B.ws_bytes = b > B.ws_bytes ? b : B.ws_bytes;
        }
        B.ws = malloc(B.ws_bytes + 64);
        double flops = 2.0 * s->n * s->k * p * p * cg * s->r * s->r, g[3];
        /* the blocks the backend allows this shape (what the layout plan would use) */
        int can =
            (blocked || wino) && be->ops->conv_blocks ? be->ops->conv_blocks(be, &B.d, compute) : 0;
        int blk = be->ops->activation_blocks ? be->ops->activation_blocks(be, compute) : 0;
        if (vs) {
            /* the default choice against oneDNN's, alternating in this
             * process (the machine's speed drifts between runs) */
            double own[3] = {1e30, 1e30, 1e30}, dn[3] = {1e30, 1e30, 1e30};
            for (int round = 0; round < 2; round++)
                for (int dir = 0; dir < 3; dir++) {
                    if (var)
                        setenv(var, "1", 1);
                    else
                        unsetenv("DLBENCH_CONV");
                    B.d.x_blk = can & 1 ? blk : 0;
                    B.d.y_blk = can & 2 ? blk : 0;
                    double a = best_of(&B, dir);
                    if (!wino) /* Winograd against direct: both on the blocks a model has */
                        B.d.x_blk = B.d.y_blk = 0;
                    if (var)
                        setenv(var, "0", 1);
                    else if (!blocked)
                        setenv("DLBENCH_CONV", "dnnl", 1);
                    double b = best_of(&B, dir);
                    own[dir] = a < own[dir] ? a : own[dir];
                    dn[dir] = b < dn[dir] ? b : dn[dir];
                }
            unsetenv("DLBENCH_CONV");
            if (var)
                unsetenv(var);
            printf("  %-24s", s->what);
            for (int dir = 0; dir < 3; dir++)
                printf(" %7.1f %6.1f %5.2fx", flops / own[dir] / 1e9, flops / dn[dir] / 1e9,
                       dn[dir] / own[dir]);
            printf("\nRESULT conv%s %s %s %.2f %.2f %.2f\n",
                   wino      ? "wino"
                   : lanes   ? "lanes"
                   : blocked ? "blocked"
                             : "vs",
                   s->what, dl_dtype_name(compute), dn[0] / own[0], dn[1] / own[1], dn[2] / own[2]);
            void *all[] = {B.x, B.dx, B.w, B.dw, B.b, B.db, B.y, B.ws};
            for (size_t k = 0; k < sizeof all / sizeof *all; k++)
                free(all[k]);
            continue;
        }
        for (int dir = 0; dir < 3; dir++)
            g[dir] = flops / best_of(&B, dir) / 1e9;
        printf("  %-24s %9.1f %9.1f %9.1f %8.0f%%\n", s->what, g[0], g[1], g[2],
               100 * 3 / (1 / g[0] + 1 / g[1] + 1 / g[2]) / ceil);
        printf("RESULT conv %s %s %.2f %.2f %.2f %.3f\n", s->what, tag, g[0], g[1], g[2],
               3 / (1 / g[0] + 1 / g[1] + 1 / g[2]) / ceil);
        void *all[] = {B.x, B.dx, B.w, B.dw, B.b, B.db, B.y, B.ws};
        for (size_t k = 0; k < sizeof all / sizeof *all; k++)
            free(all[k]);
    }
    return 0;
}
