/* gpu_gemm.c - cuBLAS GEMM throughput (bf16, f16, f32/TF32) through the backend; the peak other GPU numbers are measured against
 *
 * Prints one line per case and a machine-readable line
 *   RESULT gpu_gemm <dtype> <m>x<n>x<k> <TFLOP/s> <ms per product>
 * Without a GPU it prints "SKIP gpu_gemm: reason" and exits 0. f32 runs
 * on TF32 tensor cores unless DLBENCH_CUDA_TF32=0.
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/core/backend.h"
#include "engine/base/error.h"

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

int main(void)
{
    char why[512];
    dl_backend *be = dl_backend_cuda(why, sizeof why);
    if (!be) {
        printf("SKIP gpu_gemm: %s\n", why);
        return 0;
    }
    const char *tf = getenv("DLBENCH_CUDA_TF32");
    int tf32 = !(tf && tf[0] == '0');
    printf("# %s\n", be->description);
    /* y = x w^T as a Linear layer does it: A [m, k], B [n, k] transposed */
    static const int shapes[][3] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {16384, 8192, 8192}};
    static const dl_dtype types[] = {DL_BF16, DL_F16, DL_F32};
    const dl_backend_ops *o = be->ops;
    int failed = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        size_t na = (size_t)m * k, nb = (size_t)n * k, nc = (size_t)m * n;
        float *af = o->alloc(be, na * 4), *bf = o->alloc(be, nb * 4), *c = o->alloc(be, nc * 4);
        void *al = o->alloc(be, na * 2), *bl = o->alloc(be, nb * 2);
        if (!af || !bf || !c || !al || !bl) {
            printf("SKIP gpu_gemm %dx%dx%d: %s\n", m, n, k, dl_error_message());
            o->free(be, af), o->free(be, bf), o->free(be, c), o->free(be, al), o->free(be, bl);
            continue;
        }
        o->fill(be, af, 0.01f, na);
        o->fill(be, bf, 0.02f, nb);
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
            int iters = flop > 1e12 ? 10 : 30;
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
    return failed;
}
