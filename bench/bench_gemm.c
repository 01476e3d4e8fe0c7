/* bench_gemm.c - GFLOP/s of sgemm and of the CPU backend's bf16 GEMM at the MLP's shapes (and oneDNN's bf16 matmul for comparison)
 *
 * Shapes are those of a 784-512-256-10 MLP at batch 128, as engine/nn/layers.c
 * calls gemm: forward y = x w^T (t01), weight gradient dw = dy^T x (t10),
 * input gradient dx = dy w (t00). sgemm runs with 1 and 2 OpenBLAS
 * threads; the bf16 kernel without and with the backend's pool; oneDNN
 * (when built with DL_HAVE_DNNL) with its OpenMP default, so run with
 * OMP_NUM_THREADS=1 to see its single-thread rate.
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/base/clock.h"
#include "engine/core/backend.h"
#include "engine/cpu/cpu.h"
#include "engine/base/half.h"

#ifdef DL_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

#include "bench/bench_cpu.h"
#endif

void openblas_set_num_threads(int num_threads);

typedef struct shape {
    const char *what;
    int ta, tb, m, n, k;
} shape;

static const shape shapes[] = {
    {"fc1 fwd", 0, 1, 128, 512, 784}, {"fc2 fwd", 0, 1, 128, 256, 512},
    {"fc3 fwd", 0, 1, 128, 10, 256},  {"fc1 dW", 1, 0, 512, 784, 128},
    {"fc2 dW", 1, 0, 256, 512, 128},  {"fc3 dW", 1, 0, 10, 256, 128},
    {"fc2 dX", 0, 0, 128, 512, 256},  {"fc3 dX", 0, 0, 128, 256, 10},
};

/* Seconds per call of fn, repeated for ~0.15 s after a warm-up. */
typedef struct call {
    dl_backend *be;
    const shape *s;
    const void *a, *b;
    dl_dtype t;
    float *c;
} call;

static void run_gemm(const call *c)
{
    const shape *s = c->s;
    dl_cpu_gemm(c->be, s->ta, s->tb, s->m, s->n, s->k, 1.0f, c->a, s->ta ? s->m : s->k, c->b,
                s->tb ? s->k : s->n, c->t, 0.0f, c->c, s->n);
}

static double time_calls(void (*fn)(const call *), const call *c)
{
    for (int i = 0; i < 3; i++)
        fn(c);
    int reps = 0;
    double t0 = dl_clock_mono_s(), t;
    do {
        fn(c);
        reps++;
        t = dl_clock_mono_s() - t0;
    } while (t < 0.15);
    return t / reps;
}

#ifdef DL_HAVE_DNNL
/* A oneDNN bf16 matmul for s (strides express the transpositions). */
typedef struct dnnl_mm {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t prim;
    dnnl_memory_t am, bm, cm;
} dnnl_mm;

static int dnnl_setup(dnnl_mm *d, const shape *s, void *a, void *b, float *c)
{
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_dims_t da = {s->m, s->k}, db = {s->k, s->n}, dc = {s->m, s->n};
    dnnl_dims_t sa = {s->ta ? 1 : s->k, s->ta ? s->m : 1};
    dnnl_dims_t sb = {s->tb ? 1 : s->n, s->tb ? s->k : 1}, sc = {s->n, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) || dnnl_stream_create(&d->st, d->eng, 0) ||
        dnnl_memory_desc_init_by_strides(&ad, 2, da, dnnl_bf16, sa) ||
        dnnl_memory_desc_init_by_strides(&bd, 2, db, dnnl_bf16, sb) ||
        dnnl_memory_desc_init_by_strides(&cd, 2, dc, dnnl_f32, sc) ||
        dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd) ||
        dnnl_primitive_desc_create(&pd, &md, NULL, d->eng, NULL))
        return -1;
    int rc = dnnl_primitive_create(&d->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (rc || dnnl_memory_create(&d->am, &ad, d->eng, a) ||
        dnnl_memory_create(&d->bm, &bd, d->eng, b) || dnnl_memory_create(&d->cm, &cd, d->eng, c))
        return -1;
    return 0;
}

static dnnl_mm *current_mm;
static void run_dnnl(const call *c)
{
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, current_mm->am},
                               {DNNL_ARG_WEIGHTS, current_mm->bm},
                               {DNNL_ARG_DST, current_mm->cm}};
    dnnl_primitive_execute(current_mm->prim, current_mm->st, 3, args);
    dnnl_stream_wait(current_mm->st);
}

static void dnnl_done(dnnl_mm *d)
{
    dnnl_memory_destroy(d->am);
    dnnl_memory_destroy(d->bm);
    dnnl_memory_destroy(d->cm);
    dnnl_primitive_destroy(d->prim);
    dnnl_stream_destroy(d->st);
    dnnl_engine_destroy(d->eng);
}
#endif

int main(void)
{
    bench_cpu_line();
    dl_backend *be = dl_backend_cpu(0);
    dl_cpu_ctx *ctx = dl_cpu(be);
    dl_pool *pool = ctx->pool;
    int threads = dl_pool_threads(pool);
    printf("%s\n", be->description);
    printf("bf16 path: %s\n",
           ctx->has_avx512_bf16 ? "own AVX-512 BF16 kernel (vdpbf16ps)" : "widened to f32 + sgemm");
    printf("\n%-8s %-4s %15s | %8s %8s | %8s %8s | %7s %7s", "layer", "op", "m x n x k", "sgemm1",
           "sgemm2", "bf16_1", "bf16_2", "ratio1", "ratio2");
#ifdef DL_HAVE_DNNL
    printf(" | %8s %7s", "dnnl", "dn/own1");
#endif
    printf("\n");
    double tot_s1 = 0, tot_s2 = 0, tot_b1 = 0, tot_b2 = 0, tot_d = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n;
        float *fa = malloc(na * 4), *fb = malloc(nb * 4), *c = malloc((size_t)s->m * s->n * 4);
        uint16_t *ha = malloc(na * 2), *hb = malloc(nb * 2);
        for (size_t j = 0; j < na; j++)
            ha[j] = dl_f32_to_bf16(fa[j] = (float)((j * 7919) % 1000) * 1e-3f - 0.5f);
        for (size_t j = 0; j < nb; j++)
            hb[j] = dl_f32_to_bf16(fb[j] = (float)((j * 104729) % 1000) * 1e-3f - 0.5f);
        double flop = 2.0 * s->m * s->n * s->k;
        call cf = {be, s, fa, fb, DL_F32, c}, ch = {be, s, ha, hb, DL_BF16, c};
        openblas_set_num_threads(1);
        double s1 = time_calls(run_gemm, &cf);
        ctx->pool = NULL; /* the bf16 kernel on the calling thread only */
        double b1 = time_calls(run_gemm, &ch);
        ctx->pool = pool;
        /* bf16 on the pool before sgemm wakes OpenBLAS's workers: those
         * spin for a while after each call and would steal the second
         * core from the pool */
        double b2 = time_calls(run_gemm, &ch);
        openblas_set_num_threads(threads);
        double s2 = time_calls(run_gemm, &cf);
        openblas_set_num_threads(1);
        tot_s1 += s1, tot_s2 += s2, tot_b1 += b1, tot_b2 += b2;
        char dims[32];
        snprintf(dims, sizeof dims, "%dx%dx%d", s->m, s->n, s->k);
        printf("%-8.*s %-4s %15s | %8.1f %8.1f | %8.1f %8.1f | %7.2f %7.2f", 3, s->what,
               s->what + 4, dims, flop / s1 * 1e-9, flop / s2 * 1e-9, flop / b1 * 1e-9,
               flop / b2 * 1e-9, s1 / b1, s2 / b2);
#ifdef DL_HAVE_DNNL
        dnnl_mm mm;
        if (dnnl_setup(&mm, s, ha, hb, c) == 0) {
            current_mm = &mm;
            double d = time_calls(run_dnnl, &ch);
            tot_d += d;
            printf(" | %8.1f %7.2f", flop / d * 1e-9, b1 / d);
            dnnl_done(&mm);
        } else {
            printf(" | %8s", "n/a");
        }
#endif
        printf("\n");
        free(fa), free(fb), free(c), free(ha), free(hb);
    }
    printf("%-29s | %8.3f %8.3f | %8.3f %8.3f | %7.2f %7.2f", "total ms per MLP step", tot_s1 * 1e3,
           tot_s2 * 1e3, tot_b1 * 1e3, tot_b2 * 1e3, tot_s1 / tot_b1, tot_s2 / tot_b2);
#ifdef DL_HAVE_DNNL
    printf(" | %8.3f %7.2f", tot_d * 1e3, tot_b1 / tot_d);
#endif
    printf("\n(GFLOP/s; suffix 1/2 = threads; ratio = sgemm time / bf16 time)\n");
    return 0;
}
