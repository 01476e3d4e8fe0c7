/* bench_tune.c - study samplers against Optuna: best value after 20 and 60 trials, sampler time per trial
 *
 * Problems (all minimised):
 *   hartmann6   the 6-D Hartmann function on [0, 1]^6, minimum -3.32237
 *   rosenbrock5 sum_{i<5} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2 on [-5, 10]^5, minimum 0
 *   mixed       opt in {"sgd", "adam", "rmsprop"}, lr log-uniform on [1e-5, 1e-1],
 *               layers int on [1, 8]; with u = log10(lr) - m[opt]:
 *               f = u^2 + 0.1 (layers - 5)^2 + 0.05 u (layers - 5) + c[opt],
 *               m = {-1.5, -3.3, -2.7}, c = {0.3, 0, 0.15}; minimum 0 at
 *               adam, lr = 10^-3.3, layers = 5
 * For each sampler (random, TPE) and seed 0..9: the best value after 20 and
 * 60 trials; the median over seeds is reported. Sampler time per trial:
 * ask + suggestions + tell (objective excluded), in memory, averaged over a
 * whole study of 60 or 200 trials on hartmann6 (median of 3 seeds).
 *
 * Usage: bench_tune [--seeds N] [--no-optuna] [--python PATH]
 * Prints result lines ("tune impl=dlbench problem=... sampler=...
 * best20=... best60=...", "tune-time impl=... sampler=... trials=...
 * ms_per_trial=...") then, unless --no-optuna, runs bench/bench_tune.py
 * with the same seeds and prints a table side by side with ratios.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/tune/tune.h"

#include "bench/bench_cpu.h"

#define MAX_SEEDS 64

static double hartmann6(const double *x)
{
    static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
    static const double a[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                   {0.05, 10, 17, 0.1, 8, 14},
                                   {3, 3.5, 1.7, 10, 17, 8},
                                   {17, 8, 0.05, 10, 0.1, 14}};
    static const double p[4][6] = {{1312, 1696, 5569, 124, 8283, 5886},
                                   {2329, 4135, 8307, 3736, 1004, 9991},
                                   {2348, 1451, 3522, 2883, 3047, 6650},
                                   {4047, 8828, 8732, 5743, 1091, 381}};
    double f = 0;
    for (int i = 0; i < 4; i++) {
        double e = 0;
        for (int j = 0; j < 6; j++) {
            double d = x[j] - 1e-4 * p[i][j];
            e += a[i][j] * d * d;
        }
        f -= alpha[i] * exp(-e);
    }
    return f;
}

static double rosenbrock5(const double *x)
{
    double f = 0;
    for (int i = 0; i < 4; i++)
        f += 100 * (x[i + 1] - x[i] * x[i]) * (x[i + 1] - x[i] * x[i]) + (1 - x[i]) * (1 - x[i]);
    return f;
}

static double mixed(int opt, double lr, long layers)
{
    static const double m[3] = {-1.5, -3.3, -2.7}, c[3] = {0.3, 0, 0.15};
    double u = log10(lr) - m[opt], l = (double)layers - 5;
    return u * u + 0.1 * l * l + 0.05 * u * l + c[opt];
}

static const char *const problems[] = {"hartmann6", "rosenbrock5", "mixed"};
static const char *const sampler_names[] = {"random", "grid", "tpe"};

/* Suggests the problem's parameters for t and returns the objective. */
static int evaluate(int problem, dl_trial *t, double *f)
{
    static const char *const names[] = {"x0", "x1", "x2", "x3", "x4", "x5"};
    static const char *const opts[] = {"sgd", "adam", "rmsprop"};
    double x[6];
    if (problem == 0 || problem == 1) {
        int d = problem == 0 ? 6 : 5;
        for (int j = 0; j < d; j++)
            DL_TRY(dl_trial_suggest_float(t, names[j], problem == 0 ? 0 : -5, problem == 0 ? 1 : 10,
                                          0, &x[j]));
        *f = problem == 0 ? hartmann6(x) : rosenbrock5(x);
        return DL_OK;
    }
    int opt;
    double lr;
    long layers;
    DL_TRY(dl_trial_suggest_choice(t, "opt", opts, 3, &opt));
    DL_TRY(dl_trial_suggest_float(t, "lr", 1e-5, 1e-1, 1, &lr));
    DL_TRY(dl_trial_suggest_int(t, "layers", 1, 8, 0, &layers));
    *f = mixed(opt, lr, layers);
    return DL_OK;
}

/* Runs n trials; best[i] is the best value after i + 1 trials; returns the
 * sampler's seconds (objective excluded) or a negative code. */
static double run_study(int problem, int sampler, uint64_t seed, int n, double *best)
{
    dl_sampler_config sc = dl_tune_sampler_defaults(sampler);
    dl_study *s;
    if (dl_study_open(&s, NULL, problems[problem], DL_STUDY_MINIMIZE, &sc, NULL, seed) < 0)
        return -1;
    double spent = 0, b = INFINITY;
    for (int i = 0; i < n; i++) {
        dl_trial *t;
        double t0 = dl_clock_mono_s(), f;
        if (dl_study_ask(s, &t) != DL_OK || evaluate(problem, t, &f) < 0) {
            dl_study_destroy(s);
            return -1;
        }
        double t1 = dl_clock_mono_s();
        if (dl_study_tell(s, t, DL_TRIAL_COMPLETE, f) < 0) {
            dl_study_destroy(s);
            return -1;
        }
        spent += t1 - t0 + (dl_clock_mono_s() - t1);
        if (f < b)
            b = f;
        if (best)
            best[i] = b;
    }
    dl_study_destroy(s);
    return spent;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Result table: [impl][problem][sampler][20/60] and [impl][sampler][60/200]. */
static double quality[2][3][3][2], timing[2][3][2];
static int have[2][3][3], have_t[2][3][2];

static int sampler_index(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, sampler_names[i]) == 0)
            return i;
    return -1;
}

static int problem_index(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(name, problems[i]) == 0)
            return i;
    return -1;
}

/* Reads one result line (ours or the peer's) into the tables. */
static void parse_line(const char *line)
{
    char impl[32] = "", prob[32] = "", samp[32] = "";
    double a, b;
    int n;
    if (sscanf(line, "tune impl=%31s problem=%31s sampler=%31s best20=%lf best60=%lf", impl, prob,
               samp, &a, &b) == 5) {
        int i = strcmp(impl, "optuna") == 0, p = problem_index(prob), s = sampler_index(samp);
        if (p >= 0 && s >= 0) {
            quality[i][p][s][0] = a;
            quality[i][p][s][1] = b;
            have[i][p][s] = 1;
        }
    } else if (sscanf(line, "tune-time impl=%31s sampler=%31s trials=%d ms_per_trial=%lf", impl,
                      samp, &n, &a) == 4) {
        int i = strcmp(impl, "optuna") == 0, s = sampler_index(samp), k = n == 200;
        if (s >= 0 && (n == 60 || n == 200)) {
            timing[i][s][k] = a;
            have_t[i][s][k] = 1;
        }
    }
}

static void emit(const char *line)
{
    printf("%s\n", line);
    fflush(stdout);
    parse_line(line);
}

/* Runs the Optuna peer, passing its result lines through. Returns 0 when it ran. */
static int run_peer(const char *python, int seeds)
{
    int fds[2];
    if (access(python, X_OK) != 0) {
        printf("# optuna peer skipped: %s not found\n", python);
        return -1;
    }
    if (pipe(fds) != 0)
        return -1;
    char seeds_s[16];
    snprintf(seeds_s, sizeof seeds_s, "%d", seeds);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char *argv[] = {(char *)python, "bench/bench_tune.py", "--seeds", seeds_s, NULL};
        execv(python, argv);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        emit(line);
    }
    if (f)
        fclose(f);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("# optuna peer exited with status %d\n",
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return -1;
    }
    return 0;
}

/* "-" for a missing peer value. */
static const char *fmt(char *buf, size_t n, int ok, double v)
{
    if (ok)
        snprintf(buf, n, "%.4g", v);
    else
        snprintf(buf, n, "-");
    return buf;
}

static void print_table(void)
{
    static const double optimum[3] = {-3.32237, 0, 0};
    char b1[32], b2[32], b3[32];
    printf("\nmedian best value over the seeds (lower is better); regret ratio = "
           "(dlbench - min) / (optuna - min), < 1: dlbench closer\n");
    printf("%-12s %-7s %10s %10s %7s %10s %10s %7s %5s\n", "problem", "sampler", "dlbench@20",
           "optuna@20", "ratio", "dlbench@60", "optuna@60", "ratio", "met");
    for (int p = 0; p < 3; p++)
        for (int s = 0; s < 3; s += 2) {
            if (!have[0][p][s])
                continue;
            int ok = have[1][p][s];
            double r20 = NAN, r60 = NAN;
            if (ok) {
                r20 = (quality[0][p][s][0] - optimum[p]) / (quality[1][p][s][0] - optimum[p]);
                r60 = (quality[0][p][s][1] - optimum[p]) / (quality[1][p][s][1] - optimum[p]);
            }
            printf("%-12s %-7s %10.4g %10s %7s", problems[p], sampler_names[s], quality[0][p][s][0],
                   fmt(b1, sizeof b1, ok, quality[1][p][s][0]), fmt(b2, sizeof b2, ok, r20));
            printf(" %10.4g %10s %7s %5s\n", quality[0][p][s][1],
                   fmt(b1, sizeof b1, ok, quality[1][p][s][1]), fmt(b3, sizeof b3, ok, r60),
                   !ok || s != 2                                ? "-"
                   : quality[0][p][s][1] <= quality[1][p][s][1] ? "yes"
                                                                : "NO");
        }
    printf("  (met: TPE median best after 60 trials at least as good as Optuna's)\n");
    printf(
        "\nsampler time per trial, ms (ask + suggestions + tell, objective excluded; hartmann6)\n");
    printf("%-7s %10s %10s %8s %10s %10s %8s %12s\n", "sampler", "dlbench@60", "optuna@60",
           "speedup", "dlbench@200", "optuna@200", "speedup", "<=1ms@200");
    for (int s = 0; s < 3; s += 2) {
        if (!have_t[0][s][0] || !have_t[0][s][1])
            continue;
        int ok60 = have_t[1][s][0], ok200 = have_t[1][s][1];
        printf("%-7s %10.4f %10s %8s", sampler_names[s], timing[0][s][0],
               fmt(b1, sizeof b1, ok60, timing[1][s][0]),
               fmt(b2, sizeof b2, ok60, timing[1][s][0] / timing[0][s][0]));
        printf(" %10.4f %10s %8s %12s\n", timing[0][s][1],
               fmt(b1, sizeof b1, ok200, timing[1][s][1]),
               fmt(b2, sizeof b2, ok200, timing[1][s][1] / timing[0][s][1]),
               timing[0][s][1] <= 1.0 ? "yes" : "NO");
    }
}

int main(int argc, char **argv)
{
    bench_cpu_line();
    int seeds = 10, peer = 1;
    const char *python = "/usr/bin/python3";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc)
            seeds = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-optuna") == 0)
            peer = 0;
        else if (strcmp(argv[i], "--python") == 0 && i + 1 < argc)
            python = argv[++i];
        else {
            fprintf(stderr, "usage: bench_tune [--seeds N] [--no-optuna] [--python PATH]\n");
            return 2;
        }
    }
    if (seeds < 1 || seeds > MAX_SEEDS) {
        fprintf(stderr, "bench_tune: --seeds must be 1..%d\n", MAX_SEEDS);
        return 2;
    }
    char line[512];
    for (int p = 0; p < 3; p++)
        for (int s = 0; s < 3; s += 2) {
            double b20[MAX_SEEDS], b60[MAX_SEEDS], best[60];
            for (int k = 0; k < seeds; k++) {
                if (run_study(p, s, (uint64_t)k, 60, best) < 0) {
                    fprintf(stderr, "bench_tune: %s\n", dl_error_message());
                    return 1;
                }
                b20[k] = best[19];
                b60[k] = best[59];
            }
            snprintf(line, sizeof line,
                     "tune impl=dlbench problem=%s sampler=%s best20=%.6g best60=%.6g seeds=%d",
                     problems[p], sampler_names[s], median(b20, seeds), median(b60, seeds), seeds);
            emit(line);
        }
    for (int s = 0; s < 3; s += 2)
        for (int k = 0; k < 2; k++) {
            int n = k ? 200 : 60;
            double ms[3];
            for (int r = 0; r < 3; r++)
                ms[r] = 1e3 * run_study(0, s, (uint64_t)r, n, NULL) / n;
            snprintf(line, sizeof line,
                     "tune-time impl=dlbench sampler=%s trials=%d ms_per_trial=%.4f",
                     sampler_names[s], n, median(ms, 3));
            emit(line);
        }
    if (peer)
        run_peer(python, seeds);
    print_table();
    return 0;
}
