/* gpu_gemm.c - cuBLAS GEMM throughput (bf16, f16, f32/TF32) through the backend; the peak other GPU numbers are measured against
 *
 * Prints one line per case and a machine-readable line
 *   RESULT gpu_gemm <dtype> <m>x<n>x<k> <TFLOP/s> <ms per product>
 * Without a GPU it prints "SKIP gpu_gemm: reason" and exits 0. f32 runs
 * on TF32 tensor cores unless DLBENCH_CUDA_TF32=0.
 *
 * The operands are random (uniform in [-1, 1), from the counter RNG):
 * constant data flatters a GPU, whose power draw, and so its clock under
 * a power cap, grows with the bits that toggle. A block of RANDOM_BLOCK
 * values (a prime, so rows do not repeat it in step) is made on the host
 * and copied along each matrix. Eight entries of each product are checked
 * against a host product of the same (rounded) operands: a wrong result
 * is a FAIL, not a fast number.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/backend.h"
#include "engine/base/error.h"
#include "engine/base/half.h"
#include "engine/base/rng.h"

#include "bench/bench_cpu.h"

#define RANDOM_BLOCK 4194301 /* values: 16 MiB of f32 */

/* Fills the device array dst [n] with the host block, repeated. */
static int fill_random(dl_backend *be, float *dst, size_t n, const float *block)
{
    for (size_t at = 0; at < n; at += RANDOM_BLOCK) {
        size_t len = n - at < RANDOM_BLOCK ? n - at : RANDOM_BLOCK;
        DL_TRY(be->ops->to_device(be, dst + at, block, len * sizeof(float)));
    }
    return DL_OK;
}

/* x as the product reads it: rounded through bf16/f16 for those types. */
static double operand(const float *block, size_t i, dl_dtype t)
{
    float v = block[i % RANDOM_BLOCK];
    if (t == DL_BF16)
        return dl_bf16_to_f32(dl_f32_to_bf16(v));
    if (t == DL_F16)
        return dl_f16_to_f32(dl_f32_to_f16(v));
    return v;
}

/* Eight entries of c [m, n] = a [m, k] b [n, k]^T (a's values start at
 * the block's first, b's at boff) against the host's double sum; 0 when each is
 * within tol * sqrt(k) (the operands are in [-1, 1)). */
static int check_product(dl_backend *be, const float *c, int m, int n, int k, dl_dtype t,
                         const float *block, size_t boff, double tol, double *worst)
{
    *worst = 0;
    for (int e = 0; e < 8; e++) {
        size_t i = (size_t)(e * 7919) % (size_t)m, j = (size_t)(e * 104729 + 3) % (size_t)n;
        float got;
        DL_TRY(be->ops->to_host(be, &got, c + i * (size_t)n + j, sizeof got));
        double want = 0;
        for (size_t kk = 0; kk < (size_t)k; kk++)
            want += operand(block, i * (size_t)k + kk, t) *
                    operand(block, boff + j * (size_t)k + kk, t);
        double err = fabs((double)got - want) / sqrt((double)k);
        if (err > *worst)
            *worst = err;
    }
    return *worst <= tol ? DL_OK : DL_ERR;
}

/* Times `iters` products of the given shape on device buffers a, b, c
 * (timed with device events). Returns milliseconds per product, or -1. */
static double time_gemm(dl_backend *be, int m, int n, int k, dl_dtype t, const void *a,
                        const void *b, float *c, int iters)
{
    const dl_backend_ops *o = be->ops;
    for (int i = 0; i < 3; i++) /* warm-up: cuBLAS picks and loads kernels */
        if (o->gemm(be, 0, 1, m, n, k, 1.0f, a, k, b, k, t, 0.0f, c, n) < 0)
            return -1;
    dl_event *e0 = o->event_create(be), *e1 = o->event_create(be);
    if (!e0 || !e1)
        return -1;
    double ms_per = -1;
    if (o->event_record(be, e0) == DL_OK) {
        int ok = 1;
        for (int i = 0; i < iters && ok; i++)
            ok = o->gemm(be, 0, 1, m, n, k, 1.0f, a, k, b, k, t, 0.0f, c, n) == DL_OK;
        float ms = 0;
        if (ok && o->event_record(be, e1) == DL_OK && o->event_elapsed(be, e0, e1, &ms) == DL_OK)
            ms_per = ms / iters;
    }
    o->event_destroy(be, e0);
    o->event_destroy(be, e1);
    return ms_per;
}

int main(int argc, char **argv)
{
    bench_cpu_line();
    /* --device cpu: the same checks on the CPU backend, one small shape
     * (a dry run of this program on a machine without a GPU) */
    int on_cpu = argc == 3 && !strcmp(argv[1], "--device") && !strcmp(argv[2], "cpu");
    if (argc > 1 && !on_cpu) {
        fprintf(stderr, "usage: gpu_gemm [--device cpu]\n");
        return 2;
    }
    char why[512] = "";
    dl_backend *be = on_cpu ? dl_backend_cpu(0) : dl_backend_cuda(why, sizeof why);
    if (!be) {
        printf("SKIP gpu_gemm: %s\n", why);
        return 0;
    }
    const char *tf = getenv("DLBENCH_CUDA_TF32");
    int tf32 = !on_cpu && !(tf && tf[0] == '0');
    printf("# %s\n", be->description);
    /* y = x w^T as a Linear layer does it: A [m, k], B [n, k] transposed */
    static const int gpu_shapes[][3] = {
        {4096, 4096, 4096}, {8192, 8192, 8192}, {16384, 8192, 8192}};
    static const int cpu_shapes[][3] = {{384, 320, 4100}};
    const int(*shapes)[3] = on_cpu ? cpu_shapes : gpu_shapes;
    size_t nshapes = on_cpu ? 1 : sizeof gpu_shapes / sizeof gpu_shapes[0];
    static const dl_dtype types[] = {DL_BF16, DL_F16, DL_F32};
    const dl_backend_ops *o = be->ops;
    int failed = 0;
    float *block = malloc(RANDOM_BLOCK * sizeof *block);
    if (!block) {
        printf("FAIL gpu_gemm: out of host memory\n");
        return 1;
    }
    for (size_t i = 0; i < RANDOM_BLOCK; i++)
        block[i] = 2.0f * dl_rng_uniform(20, 1, 0, i) - 1.0f;
    for (size_t s = 0; s < nshapes; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        size_t na = (size_t)m * k, nb = (size_t)n * k, nc = (size_t)m * n;
        float *af = o->alloc(be, na * 4), *bf = o->alloc(be, nb * 4), *c = o->alloc(be, nc * 4);
        void *al = o->alloc(be, na * 2), *bl = o->alloc(be, nb * 2);
        if (!af || !bf || !c || !al || !bl) {
            printf("SKIP gpu_gemm %dx%dx%d: %s\n", m, n, k, dl_error_message());
            o->free(be, af), o->free(be, bf), o->free(be, c), o->free(be, al), o->free(be, bl);
            continue;
        }
        if (fill_random(be, af, na, block) < 0 || fill_random(be, bf, nb, block) < 0) {
            printf("FAIL gpu_gemm %dx%dx%d: %s\n", m, n, k, dl_error_message());
            failed = 1;
            o->free(be, af), o->free(be, bf), o->free(be, c), o->free(be, al), o->free(be, bl);
            continue;
        }
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
            dl_dtype ty = types[t];
            const void *a = af, *b = bf;
            if (ty != DL_F32) {
                o->cast(be, al, ty, af, DL_F32, na);
                o->cast(be, bl, ty, bf, DL_F32, nb);
                a = al;
                b = bl;
            }
            double flop = 2.0 * m * n * (double)k;
            int iters = on_cpu ? 3 : flop > 1e12 ? 10 : 30;
            double ms = time_gemm(be, m, n, k, ty, a, b, c, iters);
            const char *name = ty == DL_BF16  ? "bf16"
                               : ty == DL_F16 ? "f16"
                               : tf32         ? "tf32"
                                              : "f32";
            if (ms <= 0) {
                printf("FAIL gpu_gemm %s %dx%dx%d: %s\n", name, m, n, k, dl_error_message());
                failed = 1;
                continue;
            }
            /* f32 products in f32 accumulation: TF32 rounds operands to 10 bits */
            double tol = ty == DL_F32 && !tf32 ? 1e-5 : ty == DL_F16 ? 1e-3 : 1e-2, worst;
            if (check_product(be, c, m, n, k, ty, block, 0, tol, &worst) != DL_OK) {
                printf("FAIL gpu_gemm %s %dx%dx%d: wrong product (error %.3g x sqrt(k), "
                       "tolerance %.3g)\n",
                       name, m, n, k, worst, tol);
                failed = 1;
                continue;
            }
            double tflops = flop / (ms * 1e-3) / 1e12;
            printf("gpu_gemm %-4s %5dx%5dx%5d  %8.1f TFLOP/s  %8.3f ms\n", name, m, n, k, tflops,
                   ms);
            printf("RESULT gpu_gemm %s %dx%dx%d %.1f %.4f\n", name, m, n, k, tflops, ms);
        }
        o->free(be, af);
        o->free(be, bf);
        o->free(be, c);
        o->free(be, al);
        o->free(be, bl);
    }
    free(block);
    return failed;
}
