/* bench_cpu.h - the CPU line every benchmark prints first: the model, the vector features kernels are chosen by, and how close the two first cores are
 *
 * Header-only (static inline), so each bench binary stays one bench/<name>.c.
 */
#ifndef DL_BENCH_CPU_H
#define DL_BENCH_CPU_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The cores line: how fast CPU 1 copies 256 KB that CPU 0 has just
 * written, against the same copy after writing it itself. On a virtual
 * machine the two vCPUs can sit on cores that share an L3 or on two that
 * share none, and the host may move them during a session; the second
 * case made the 2-thread figures 10-40% lower (measured 28 against 103
 * GB/s there, 68 against 112 when they shared it). */
enum { BENCH_XC_BYTES = 256 << 10, BENCH_XC_ROUNDS = 200 };

typedef struct bench_xc {
    float *src, *dst;
    _Atomic int turn; /* 2r + 1: the writer's turn in round r; 2r + 2: the reader's */
    double other_s, self_s;
} bench_xc;

static inline double bench_xc_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline void bench_xc_fill(float *x, int r)
{
    for (size_t i = 0; i < BENCH_XC_BYTES / sizeof(float); i++)
        x[i] = (float)(i + (size_t)r);
}

static inline void bench_xc_pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static inline void *bench_xc_writer(void *p)
{
    bench_xc *x = p;
    bench_xc_pin(0);
    for (int r = 0; r < BENCH_XC_ROUNDS; r++) {
        while (atomic_load(&x->turn) != 2 * r + 1)
            ;
        bench_xc_fill(x->src, r);
        atomic_store(&x->turn, 2 * r + 2);
    }
    return NULL;
}

static inline void *bench_xc_reader(void *p)
{
    bench_xc *x = p;
    bench_xc_pin(1);
    for (int r = 0; r < BENCH_XC_ROUNDS; r++) {
        atomic_store(&x->turn, 2 * r + 1);
        while (atomic_load(&x->turn) != 2 * r + 2)
            ;
        double t0 = bench_xc_now();
        memcpy(x->dst, x->src, BENCH_XC_BYTES);
        double t1 = bench_xc_now();
        bench_xc_fill(x->src, -r);
        double t2 = bench_xc_now();
        memcpy(x->dst, x->src, BENCH_XC_BYTES);
        x->other_s += t1 - t0;
        x->self_s += bench_xc_now() - t2;
    }
    return NULL;
}

static inline void bench_cores_line(void)
{
    cpu_set_t saved;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2 ||
        pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) != 0 ||
        !CPU_ISSET(0, &saved) || !CPU_ISSET(1, &saved)) {
        printf("cores: not measured (this process may not run on both CPU 0 and CPU 1)\n");
        return;
    }
    bench_xc x = {aligned_alloc(64, BENCH_XC_BYTES), aligned_alloc(64, BENCH_XC_BYTES), 0, 0, 0};
    pthread_t w;
    if (!x.src || !x.dst || pthread_create(&w, NULL, bench_xc_writer, &x) != 0) {
        free(x.src);
        free(x.dst);
        return;
    }
    memset(x.dst, 0, BENCH_XC_BYTES);
    bench_xc_reader(&x); /* on this thread, pinned to CPU 1 for the while */
    pthread_join(w, NULL);
    pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    double other = BENCH_XC_BYTES * (double)BENCH_XC_ROUNDS / x.other_s / 1e9;
    double self = BENCH_XC_BYTES * (double)BENCH_XC_ROUNDS / x.self_s / 1e9;
    printf("cores: CPU 1 copies 256 KB that CPU 0 wrote at %.0f GB/s, its own at %.0f (%.2fx%s)\n",
           other, self, other / self,
           other / self < 0.5 ? ": the cores share no cache now, 2-thread figures suffer" : "");
    free(x.src);
    free(x.dst);
}

static inline void bench_cpu_line(void)
{
    static const char *const flags[] = {"avx2",        "fma",         "avx512f",  "avx512bw",
                                        "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"};
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096], model[256] = "unknown", feats[256] = "";
    while (f && fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        if (!v)
            continue;
        if (!strncmp(line, "model name", 10) && !strcmp(model, "unknown"))
            snprintf(model, sizeof model, "%s", v + 2);
        if (!strncmp(line, "flags", 5) && !feats[0]) {
            size_t end = strcspn(line, "\n");
            if (end + 1 < sizeof line) /* a space after the last flag too */
                line[end] = ' ', line[end + 1] = 0;
            for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
                char want[32];
                snprintf(want, sizeof want, " %s ", flags[i]);
                if (strstr(v, want))
                    snprintf(feats + strlen(feats), sizeof feats - strlen(feats), " %s", flags[i]);
            }
            if (!feats[0])
                snprintf(feats, sizeof feats, " (none of avx2, avx512)");
        }
    }
    if (f)
        fclose(f);
    model[strcspn(model, "\n")] = 0;
    /* an AVX2 CPU played on an AVX-512 one (bench/run.sh BENCH_ISA=avx2) */
    const char *off = getenv("DLBENCH_CPU_AVX512"), *isa = getenv("ONEDNN_MAX_CPU_ISA");
    printf("cpu: %s; flags:%s%s%s%s\n", model, feats,
           off && !strcmp(off, "0") && strstr(feats, "avx512f")
               ? "; AVX-512 off (DLBENCH_CPU_AVX512=0)"
               : "",
           isa ? "; oneDNN up to " : "", isa ? isa : "");
    bench_cores_line();
}

#endif
