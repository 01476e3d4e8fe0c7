/* bench_attention.c - MultiheadAttention forward + backward on the CPU backend against PyTorch's nn.MultiheadAttention, side by side
 *
 *   build/bench/bench_attention [THREADS [BATCH]]
 *
 * Prints the CPU model line, then for d = 128, 4 heads, T = 64 and 256,
 * causal and not: milliseconds per forward + backward step of dlbench's
 * layer (a model of that one layer, input gradient included, best of 3
 * windows), the same for PyTorch (bench/bench_attention.py, run after it
 * with the same thread count) and the ratio torch / dlbench (above 1:
 * dlbench is faster). Without torch the peer column says so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_cpu.h"
#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/core/backend.h"
#include "engine/nn/nn.h"

#define D 128
#define HEADS 4

/* One forward + backward of the model, the output gradient set to 1e-3. */
static int step(dl_model *m, dl_pass *p, size_t nout)
{
    DL_TRY(dl_model_forward(m, p));
    DL_TRY(p->be->ops->fill(p->be, dl_model_output_grad(m), 1e-3f, nout));
    return dl_model_backward(m, p);
}

/* Best milliseconds per step over 3 windows of ~0.3 s; < 0 on error. */
static double time_dlbench(dl_backend *be, int batch, int t, int causal)
{
    dl_model *m = NULL;
    dl_shape in = {2, {t, D}};
    if (dl_model_create(&m, dl_nn_multihead_attention(D, HEADS, causal, 0, 1), &in) < 0 ||
        dl_model_init_state(m, be, 0, 1) < 0 || dl_model_plan(m, batch) < 0) {
        dl_model_destroy(m);
        return -1;
    }
    size_t nin = (size_t)batch * t * D;
    DL_ASSERT(be->ops->fill(be, dl_model_input(m), 0.5f, nin) == DL_OK);
    dl_pass p;
    dl_model_pass(m, &p, batch, 1, DL_PREC_F32, 1, 0);
    double best = 1e30;
    for (int w = 0; w < 4; w++) { /* the first window warms up */
        int reps = 0;
        double t0 = dl_clock_mono_s(), el;
        do {
            if (step(m, &p, nin) < 0) {
                dl_model_destroy(m);
                return -1;
            }
            reps++;
            el = dl_clock_mono_s() - t0;
        } while (el < 0.3);
        if (w > 0 && el / reps < best)
            best = el / reps;
    }
    dl_model_destroy(m);
    return best * 1e3;
}

/* PyTorch's milliseconds per step, or < 0 when it cannot run. */
static double time_torch(int threads, int batch, int t, int causal)
{
    char cmd[256], line[128];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/bench_attention.py %d %d %d %d %d %d 2>&1",
             threads, batch, t, D, HEADS, causal);
    FILE *f = popen(cmd, "r");
    double ms = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "torch ms=", 9))
            ms = atof(line + 9);
    if (f)
        pclose(f);
    return ms;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1, batch = argc > 2 ? atoi(argv[2]) : 8;
    bench_cpu_line();
    dl_backend *be = dl_backend_cpu_create(threads);
    if (!be) {
        fprintf(stderr, "bench_attention: %s\n", dl_error_message());
        return 1;
    }
    printf("MultiheadAttention(%d, %d) forward+backward, batch %d, %d thread%s (ms per step)\n", D,
           HEADS, batch, threads, threads == 1 ? "" : "s");
    printf("%-6s %-7s %10s %10s %8s\n", "T", "causal", "dlbench", "torch", "ratio");
    static const int ts[] = {64, 256};
    for (int i = 0; i < 2; i++)
        for (int causal = 0; causal < 2; causal++) {
            double a = time_dlbench(be, batch, ts[i], causal);
            double b = time_torch(threads, batch, ts[i], causal);
            if (a < 0) {
                fprintf(stderr, "bench_attention: %s\n", dl_error_message());
                return 1;
            }
            if (b < 0)
                printf("%-6d %-7s %10.3f %10s %8s\n", ts[i], causal ? "yes" : "no", a, "n/a", "-");
            else
                printf("%-6d %-7s %10.3f %10.3f %8.2f\n", ts[i], causal ? "yes" : "no", a, b,
                       b / a);
        }
    dl_backend_cpu_destroy(be);
    return 0;
}
