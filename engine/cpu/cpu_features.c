/* cpu_features.c - which vector kernels the CPU backend runs: AVX-512F where the CPU has it, else AVX2 */
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu.h"

_Atomic int dl_cpu_avx512_state = -1;

static int cpu_has_avx512(void)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
    return 0;
#endif
}

int dl_cpu_avx512_detect(void)
{
    const char *e = getenv("DLBENCH_CPU_AVX512");
    int on = cpu_has_avx512() && !(e && !strcmp(e, "0"));
    atomic_store_explicit(&dl_cpu_avx512_state, on, memory_order_relaxed);
    return on;
}

int dl_cpu_set_avx512(int on)
{
    on = on && cpu_has_avx512();
    atomic_store_explicit(&dl_cpu_avx512_state, on, memory_order_relaxed);
    return on;
}
