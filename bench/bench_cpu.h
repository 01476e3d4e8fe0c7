/* bench_cpu.h - the CPU line every benchmark prints first: the model and the vector features kernels are chosen by
 *
 * Header-only (static inline), so each bench binary stays one bench/<name>.c.
 */
#ifndef DL_BENCH_CPU_H
#define DL_BENCH_CPU_H

#include <stdio.h>
#include <string.h>

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
    printf("cpu: %s; flags:%s\n", model, feats);
}

#endif
