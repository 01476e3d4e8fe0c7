/* cost.c - GPU peak table, CPU peak calibration, MFU, energy and money */
#include "engine/observe/cost.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"

/* Dense peaks from the vendors' data sheets (SXM parts unless named).
 * More specific names come first: the first substring match wins. */
static const dl_gpu_peak table[] = {
    {"H200", 67e12, 494.5e12, 989.5e12},
    {"H100 PCIe", 51e12, 378e12, 756e12},
    {"H100", 67e12, 494.5e12, 989.5e12},
    {"GH200", 67e12, 494.5e12, 989.5e12},
    {"B200", 80e12, 1100e12, 2250e12},
    {"A100", 19.5e12, 156e12, 312e12},
    {"A10G", 31.2e12, 35e12, 70e12},
    {"A10", 31.2e12, 62.5e12, 125e12},
    {"L40S", 91.6e12, 183e12, 362e12},
    {"L40", 90.5e12, 90.5e12, 181e12},
    {"L4", 30.3e12, 60e12, 121e12},
    {"A6000", 38.7e12, 77.4e12, 154.8e12},
    {"RTX 4090", 82.6e12, 82.6e12, 165.2e12},
    {"RTX 3090", 35.6e12, 35.6e12, 71e12},
    {"V100", 15.7e12, 0, 125e12},
    {"T4", 8.1e12, 0, 65e12},
};

static int contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

int dl_cost_gpu_peak(const char *device_name, dl_gpu_peak *out)
{
    if (!device_name)
        return 0;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (contains_nocase(device_name, table[i].name)) {
            *out = table[i];
            return 1;
        }
    return 0;
}

int dl_cost_calibrate(dl_backend *be, int n, double seconds, double *flops_per_s)
{
    *flops_per_s = 0;
    if (n <= 0)
        n = 512;
    if (seconds <= 0)
        seconds = 0.3;
    size_t bytes = (size_t)n * (size_t)n * sizeof(float);
    float *host = malloc(bytes);
    float *a = be->ops->alloc(be, bytes), *b = be->ops->alloc(be, bytes),
          *c = be->ops->alloc(be, bytes);
    int rc = host && a && b && c ? DL_OK : dl_error(DL_ENOMEM, "calibration: out of memory");
    if (rc == DL_OK) {
        for (size_t i = 0; i < (size_t)n * (size_t)n; i++)
            host[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
        rc = be->ops->to_device(be, a, host, bytes);
        if (rc == DL_OK)
            rc = be->ops->to_device(be, b, host, bytes);
    }
    double best = 0, t_end = dl_clock_mono_s() + seconds;
    /* one warm-up product, then timed ones until the time is spent */
    for (int it = 0; rc == DL_OK && (it < 3 || dl_clock_mono_s() < t_end); it++) {
        double t0 = dl_clock_mono_s();
        rc = be->ops->gemm(be, 0, 0, n, n, n, 1.0f, a, n, b, n, DL_F32, 0.0f, c, n);
        if (rc == DL_OK)
            rc = be->ops->sync(be);
        double dt = dl_clock_mono_s() - t0;
        if (it > 0 && dt > 0) {
            double f = 2.0 * n * (double)n * (double)n / dt;
            if (f > best)
                best = f;
        }
        if (it > 10000)
            break;
    }
    be->ops->free(be, a);
    be->ops->free(be, b);
    be->ops->free(be, c);
    free(host);
    if (rc == DL_OK)
        *flops_per_s = best;
    return rc;
}

void dl_cost_estimate(const dl_cost_input *in, dl_cost *out)
{
    memset(out, 0, sizeof *out);
    double step_s = in->step_s > 0 ? in->step_s : in->elapsed_s;
    out->achieved_flops = step_s > 0 ? in->flops_done / step_s : 0;
    out->mfu = in->peak_flops > 0 ? out->achieved_flops / in->peak_flops : -1;
    if (out->mfu > 1)
        out->mfu = 1; /* a calibration below what the model reached: cap, not nonsense */
    int have_progress = in->progress > 0 && in->progress <= 1 && in->elapsed_s > 0;
    out->eta_s = have_progress ? in->elapsed_s * (1 - in->progress) / in->progress : -1;
    if (in->price_per_hour > 0) {
        out->cost_so_far = in->price_per_hour * in->elapsed_s / 3600.0;
        out->cost_projected = have_progress ? out->cost_so_far / in->progress : -1;
    } else {
        out->cost_so_far = out->cost_projected = -1;
    }
    out->energy_j = in->energy_j;
    out->energy_kwh = in->energy_j >= 0 ? in->energy_j / 3.6e6 : -1;
}
