/* cost.h - what training costs: MFU against the device's peak, energy, money so far and projected
 *
 * Peak FLOP/s: on the CPU from a short calibration (a square f32 product
 * through the backend's gemm, best of a few runs); on a GPU from a table
 * by device name (dense, no sparsity). MFU = achieved FLOP/s (the model's
 * forward + backward FLOPs per second of step time) / peak. Money is the
 * price per hour times the wall time; the projection scales by the share
 * of the steps done.
 */
#ifndef DL_COST_H
#define DL_COST_H

#include "engine/core/backend.h"

/* Dense peak throughput of a GPU in FLOP/s; 0 where the part lacks it. */
typedef struct dl_gpu_peak {
    const char *name; /* the table's key, matched as a substring */
    double f32;       /* plain FP32 (CUDA cores) */
    double tf32;      /* tensor cores, TF32 */
    double bf16;      /* tensor cores, BF16/FP16 */
} dl_gpu_peak;

/* Looks up a GPU by its NVML/CUDA name ("NVIDIA H100 80GB HBM3"): returns
 * 1 and fills *out, or 0 when the name is not in the table. */
int dl_cost_gpu_peak(const char *device_name, dl_gpu_peak *out);

/* Measures the backend's f32 gemm peak with products of size n (0: 512)
 * for about `seconds` (0: 0.3). Returns DL_OK with *flops_per_s, or the
 * backend's error (allocation, gemm). */
int dl_cost_calibrate(dl_backend *be, int n, double seconds, double *flops_per_s);

typedef struct dl_cost_input {
    double elapsed_s;      /* wall time of the run so far */
    double step_s;         /* time spent in training steps (profiler or wall) */
    double flops_done;     /* model FLOPs done (forward + backward) */
    double peak_flops;     /* 0: MFU unknown */
    double progress;       /* share of the planned steps done, (0, 1] */
    double price_per_hour; /* 0: no money figures */
    double energy_j;       /* from NVML; < 0 unknown */
    double energy_epoch_j; /* energy of the last epoch; < 0 unknown */
} dl_cost_input;

typedef struct dl_cost {
    double achieved_flops; /* flops_done / step_s */
    double mfu;            /* achieved / peak, [0, 1]; < 0 unknown */
    double cost_so_far;    /* price units; < 0 without a price */
    double cost_projected; /* to the end of the planned steps; < 0 unknown */
    double eta_s;          /* seconds left; < 0 unknown */
    double energy_j;       /* < 0 unknown */
    double energy_kwh;
} dl_cost;

/* Pure arithmetic over in (no I/O). */
void dl_cost_estimate(const dl_cost_input *in, dl_cost *out);

#endif
