/* bench_runs.c - the runs table and the comparison at scale: 1,000 run folders of 500 logged steps
 *
 * Generates N run folders (default 1000) through the run-folder writer
 * (engine/rundir/runlog.h: config.json, S metrics records each (default
 * 500), summary.json), then times, best of 3:
 *   runs     `dlbench runs --out DIR` (a process, its output to /dev/null)
 *   screen   the runs screen opened: the table read, filtered, sorted and
 *            drawn at 120x40 (tui/runs_screen.h, views/runs.c)
 *   overlay  10 runs selected and compared: their metrics read, the
 *            series and the diff table built and drawn
 * and the same reads done by a peer, python3 (json, as a notebook would
 * read these folders): every config.json and summary.json, then 10
 * metrics.jsonl. Prints "runs-bench what=... dlbench_s=... peer_s=..."
 * lines and a table with the ratios and the bounds (0.5 s, 1 s, 0.1 s).
 *
 * Usage: bench_runs [--runs N] [--steps S] [--dir DIR] [--dlbench PATH]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curses.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/observe/telemetry.h"
#include "engine/rundir/runlog.h"
#include "tui/runs_screen.h"
#include "views/views.h"

#include "bench/bench_cpu.h"

/* One finished run: lr and seed vary, 500 step records like a training's. */
static int make_run(const char *dir, int i, int steps)
{
    cJSON *cfg = cJSON_CreateObject(), *hp = cJSON_AddObjectToObject(cfg, "hparams");
    cJSON_AddNumberToObject(hp, "lr", 0.001 * (1 + i % 10));
    cJSON_AddNumberToObject(hp, "hidden", 64 << (i % 3));
    cJSON_AddStringToObject(cfg, "name", "bench");
    cJSON_AddNumberToObject(cfg, "seed", i);
    cJSON_AddNumberToObject(cfg, "batch", 64);
    /* the rest of a training's config.json, so the files are their real size */
    cJSON *model = cJSON_AddArrayToObject(cfg, "model");
    for (int k = 0; k < 8; k++) {
        cJSON *layer = cJSON_CreateObject();
        cJSON_AddStringToObject(layer, "type", k % 2 ? "ReLU" : "Linear");
        cJSON_AddNumberToObject(layer, "in", 64), cJSON_AddNumberToObject(layer, "out", 64);
        cJSON_AddItemToArray(model, layer);
    }
    cJSON *opt = cJSON_AddObjectToObject(cfg, "optimizer");
    cJSON_AddStringToObject(opt, "type", "Adam");
    cJSON_AddNumberToObject(opt, "lr", 0.001 * (1 + i % 10));
    cJSON *data = cJSON_AddObjectToObject(cfg, "data");
    cJSON_AddStringToObject(data, "kind", "hdf5");
    cJSON_AddStringToObject(data, "path", "data/fashion-mnist.h5");
    cJSON_AddStringToObject(data, "sha256",
                            "8d4fb7e6c68d591d4c3dfef9ec88bf0d8d4fb7e6c68d591d4c3dfef9ec88bf0d");
    cJSON_AddStringToObject(cfg, "script_sha256",
                            "1415e2b3772e9a48db7d066a37bd6eea5f2381be5d02e68024ab743ca0e110c3");
    char hash[65];
    dl_runlog_hash_json(cfg, hash);
    dl_runlog *r = NULL;
    int rc = dl_runlog_create(&r, dir, "bench", hash, cfg, NULL);
    cJSON_Delete(cfg);
    if (rc < 0)
        return rc;
    static const char *const names[] = {"loss", "acc", "lr", "grad_norm"};
    double loss = 2.3;
    unsigned s = (unsigned)i * 2654435761u + 1;
    for (int k = 1; k <= steps && rc == DL_OK; k++) {
        s = s * 1103515245u + 12345u;
        loss *= 0.995 + (double)(s >> 16 & 0x7fff) / 32768.0 * 0.004;
        double v[4] = {loss, 1 - loss / 3, 0.001 * (1 + i % 10), 0.5};
        rc = dl_runlog_metrics(r, "step", k * 10L, 1 + k / 100, names, v, 4);
    }
    dl_run_totals t = {steps * 10L, 1 + steps / 100, steps * 640.0};
    if (rc == DL_OK)
        rc = dl_runlog_summary(r, "finished", &t, NULL, NULL);
    dl_runlog_destroy(r);
    return rc;
}

static int count_runs(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls -1 '%s' 2>/dev/null | grep -c -- '-bench-'", dir);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (p && fscanf(p, "%d", &n) != 1)
        n = 0;
    if (p)
        pclose(p);
    return n;
}

static double best_of_3_cmd(const char *cmd)
{
    double best = INFINITY;
    for (int k = 0; k < 3; k++) {
        double t0 = dl_clock_mono_s();
        if (system(cmd) != 0)
            return NAN;
        best = fmin(best, dl_clock_mono_s() - t0);
    }
    return best;
}

/* The runs screen in a 120x40 curses screen written to /dev/null. */
static void time_screen(const char *dir, int n, double *open_s, double *overlay_s)
{
    FILE *null = fopen("/dev/null", "w");
    SCREEN *scr = newterm("xterm-256color", null, stdin);
    set_term(scr);
    resize_term(40, 120);
    WINDOW *w = newwin(38, 120, 1, 0);
    dl_screen *s = calloc(1, sizeof *s);
    s->tele = dl_telemetry_snapshot_create();
    dl_view_state v;
    memset(&v, 0, sizeof v);
    *open_s = *overlay_s = INFINITY;
    for (int k = 0; k < 3; k++) {
        dl_runs_screen *rs = dl_runs_screen_create();
        memset(&s->runs, 0, sizeof s->runs);
        double t0 = dl_clock_mono_s();
        dl_runs_screen_open(rs, &s->runs, dir);
        dl_runs_screen_sample(rs, &s->runs, "");
        dl_view_runs(w, s, &v);
        wnoutrefresh(w);
        doupdate();
        double t1 = dl_clock_mono_s();
        for (int i = 0; i < 10; i++)
            dl_runs_screen_key(rs, &s->runs, ' ');
        dl_runs_screen_key(rs, &s->runs, 'c');
        dl_view_runs(w, s, &v);
        wnoutrefresh(w);
        doupdate();
        double t2 = dl_clock_mono_s();
        if (s->runs.n != n || s->runs.mode != DL_UI_COMPARE || s->runs.ncols != 10)
            fprintf(stderr, "bench_runs: %d rows, %d compared (expected %d and 10)\n", s->runs.n,
                    s->runs.ncols, n);
        *open_s = fmin(*open_s, t1 - t0), *overlay_s = fmin(*overlay_s, t2 - t1);
        dl_runs_screen_destroy(rs, &s->runs);
    }
    dl_telemetry_snapshot_destroy(s->tele);
    free(s);
    delwin(w);
    endwin();
    delscreen(scr);
    fclose(null);
}

static const char *peer_py =
    "import glob, json, os, sys, time\n"
    "d = sys.argv[1]\n"
    "best = [9e9, 9e9]\n"
    "for _ in range(3):\n"
    "    t0 = time.monotonic()\n"
    "    runs = sorted(glob.glob(os.path.join(d, '*-bench-*')))\n"
    "    table = [(json.load(open(r + '/config.json')), json.load(open(r + '/summary.json')))"
    " for r in runs]\n"
    "    t1 = time.monotonic()\n"
    "    curves = [[json.loads(l) for l in open(r + '/metrics.jsonl')] for r in runs[:10]]\n"
    "    t2 = time.monotonic()\n"
    "    best = [min(best[0], t1 - t0), min(best[1], t2 - t1)]\n"
    "print(best[0], best[1])\n";

int main(int argc, char **argv)
{
    bench_cpu_line();
    int n = 1000, steps = 500;
    const char *dir = NULL, *exe = "build/dlbench";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--runs"))
            n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--dlbench"))
            exe = argv[i + 1];
    }
    char def[256];
    snprintf(def, sizeof def, "build/bench/runs-%d-%d-v2", n, steps);
    dir = dir ? dir : def;
    int have = count_runs(dir);
    if (have != n) {
        char rm[600];
        snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
        if (system(rm) != 0)
            return 1;
        double t0 = dl_clock_mono_s();
        for (int i = 0; i < n; i++)
            if (make_run(dir, i, steps) < 0) {
                fprintf(stderr, "bench_runs: %s\n", dl_error_message());
                return 1;
            }
        printf("runs-bench generated %d runs of %d steps in %s: %.1f s\n", n, steps, dir,
               dl_clock_mono_s() - t0);
    }
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "'%s' runs --out '%s' >/dev/null", exe, dir);
    double runs_s = best_of_3_cmd(cmd), open_s, overlay_s;
    time_screen(dir, n, &open_s, &overlay_s);
    double peer_table = NAN, peer_curves = NAN;
    FILE *py = fopen("build/bench/bench_runs_peer.py", "w");
    if (py) {
        fputs(peer_py, py);
        fclose(py);
        snprintf(cmd, sizeof cmd, "python3 build/bench/bench_runs_peer.py '%s'", dir);
        FILE *p = popen(cmd, "r");
        if (p && fscanf(p, "%lf %lf", &peer_table, &peer_curves) != 2)
            peer_table = peer_curves = NAN;
        if (p)
            pclose(p);
    }
    printf("runs-bench what=runs dlbench_s=%.3f peer_s=%.3f bound_s=0.5\n", runs_s, peer_table);
    printf("runs-bench what=screen dlbench_s=%.3f peer_s=%.3f bound_s=1\n", open_s, peer_table);
    printf("runs-bench what=overlay10 dlbench_s=%.4f peer_s=%.4f bound_s=0.1\n", overlay_s,
           peer_curves);
    printf("\n%d runs x %d steps   dlbench     python3 json   ratio   bound\n", n, steps);
    printf("  dlbench runs        %7.3f s   %7.3f s     %5.1fx   %s\n", runs_s, peer_table,
           peer_table / runs_s, runs_s < 0.5 ? "< 0.5 s ok" : "OVER 0.5 s");
    printf("  runs screen opens   %7.3f s   %7.3f s     %5.1fx   %s\n", open_s, peer_table,
           peer_table / open_s, open_s < 1 ? "< 1 s ok" : "OVER 1 s");
    printf("  overlay of 10 runs  %7.4f s   %7.4f s     %5.1fx   %s\n", overlay_s, peer_curves,
           peer_curves / overlay_s, overlay_s < 0.1 ? "< 0.1 s ok" : "OVER 0.1 s");
    return 0;
}
