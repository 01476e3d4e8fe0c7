/* test_profiler.c - profiler: totals against wall time, call counts, FLOPs, trace round trip, overhead off */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/base/clock.h"
#include "engine/core/backend.h"
#include "engine/observe/cost.h"
#include "engine/data/data.h"
#include "engine/base/error.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/observe/profiler.h"
#include "engine/train/trainer.h"
#include "tests/check.h"
#include "tests/fixtures.h"

static dl_backend *be;

/* count x [count, 1, 8, 8] f32 images in 3 classes: pixel k carries 1.0 for label k % 3 */
static void make_images(dl_dataset *d, size_t count, int flat)
{
    fx_blobs spec = {
        flat ? (dl_shape){1, {64}} : (dl_shape){3, {1, 8, 8}}, 3, 1.0f, 0, 0.3f, 5, 7, "images"};
    fx_blobs_make(d, count, &spec);
}

typedef struct fixture {
    dl_dataset data;
    dl_source *src;
    dl_model *model;
    dl_trainer *t;
    dl_profiler *prof;
} fixture;

static int setup(fixture *f, dl_layer *root, int flat, int batch, size_t count,
                 const dl_profiler_options *po)
{
    memset(f, 0, sizeof *f);
    make_images(&f->data, count, flat);
    DL_TRY(dl_source_memory(&f->src, &f->data, batch, 1, 0, 1));
    DL_TRY(dl_model_create(&f->model, root, &f->data.info.sample));
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = batch;
    cfg.epochs = 100;
    dl_optim o = dl_optim_sgd(0.05f, 0.9f, 0, 0);
    DL_TRY(dl_trainer_create(&f->t, f->model, &(dl_loss){DL_LOSS_XENT, 0, DL_IGNORE_NONE}, &o, NULL,
                             f->src, NULL, &cfg, be));
    DL_TRY(dl_profiler_create(&f->prof, po));
    return dl_trainer_set_profiler(f->t, f->prof);
}

static void teardown(fixture *f)
{
    dl_trainer_destroy(f->t);
    dl_profiler_destroy(f->prof);
    dl_model_destroy(f->model);
    dl_source_destroy(f->src);
    dl_dataset_done(&f->data);
}

static dl_layer *mlp(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(64, 128, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(128, 3, 1));
    return s;
}

/* Runs n steps (starting new epochs as needed); returns wall seconds. */
static double run_steps(dl_trainer *t, int n)
{
    double t0 = dl_clock_mono_s();
    for (int done = 0; done < n;) {
        int rc = dl_trainer_step(t);
        if (rc < 0)
            return -1;
        if (rc == 0)
            done++;
        else
            return -2; /* the fixtures are sized so no epoch ends */
    }
    return dl_clock_mono_s() - t0;
}

static const dl_prof_row *find(const dl_prof_row *r, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(r[i].name, name))
            return &r[i];
    return NULL;
}

/* The summed step time matches the wall time of the loop within 5% or
 * 0.1 ms a step, whichever is larger (what runs outside the step span -
 * opening an epoch, the loop itself - is not step time), and the rows'
 * self times add up to the step time within 1%. */
static double wall_tolerance(double wall, int steps) { return fmax(0.05 * wall, 1e-4 * steps); }

static void test_totals_match_wall_time(void)
{
    fixture f;
    CHECK_OK(setup(&f, mlp(), 1, 64, 64 * 60, NULL));
    double wall = run_steps(f.t, 50);
    CHECK(wall > 0);
    dl_prof_totals tot;
    dl_profiler_totals(f.prof, &tot);
    CHECK(tot.steps == 50);
    CHECK_NEAR(tot.step_ms * 1e-3, wall, wall_tolerance(wall, 50));
    dl_prof_row rows[64];
    int n = dl_profiler_rows(f.prof, DL_PROF_BY_OP, DL_PROF_SORT_TOTAL, rows, 64);
    double self = 0, pct = 0;
    for (int i = 0; i < n; i++) {
        self += rows[i].self_ms;
        pct += rows[i].pct_step;
    }
    CHECK_NEAR(self, tot.step_ms, 0.01 * tot.step_ms);
    CHECK_NEAR(pct, 100, 1);
    /* the time outside every span is small */
    CHECK_MSG(tot.untimed_ms < 0.05 * tot.step_ms, "untimed %.3f of %.3f ms", tot.untimed_ms,
              tot.step_ms);
    teardown(&f);
}

/* Sequentials nested three deep: the op view's Sequential.forward and
 * .backward totals count the nested ones once (within the outer one's
 * time, so never above the step), while their calls count all three and
 * the mean is every call's time over the calls. */
static void test_nested_kind_totals(void)
{
    dl_layer *inner = mlp(), *mid = dl_nn_sequential(), *outer = dl_nn_sequential();
    dl_nn_sequential_add(mid, inner);
    dl_nn_sequential_add(mid, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(outer, mid);
    fixture f;
    CHECK_OK(setup(&f, outer, 1, 32, 32 * 40, NULL));
    CHECK(run_steps(f.t, 20) > 0);
    dl_prof_totals tot;
    dl_profiler_totals(f.prof, &tot);
    dl_prof_row ops[64], layers[64];
    int n = dl_profiler_rows(f.prof, DL_PROF_BY_OP, DL_PROF_SORT_NONE, ops, 64);
    int nl = dl_profiler_rows(f.prof, DL_PROF_BY_LAYER, DL_PROF_SORT_NONE, layers, 64);
    CHECK(nl >= 3 && layers[0].depth == 0);
    for (int dir = 0; dir < 2 && nl >= 3; dir++) {
        const dl_prof_row *r = find(ops, n, dir ? "Sequential.backward" : "Sequential.forward");
        CHECK(r != NULL);
        if (!r)
            continue;
        double outer_ms = dir ? layers[0].bwd_ms : layers[0].fwd_ms;
        CHECK_MSG(fabs(r->total_ms - outer_ms) <= 1e-9 * (1 + outer_ms),
                  "%s total %.4f ms, the outermost Sequential's %.4f", r->name, r->total_ms,
                  outer_ms);
        CHECK_MSG(r->total_ms <= tot.step_ms, "%s total %.4f ms above the step's %.4f", r->name,
                  r->total_ms, tot.step_ms);
        CHECK(r->calls == 3 * 20);
        /* the mean is over every call: above the total's share */
        CHECK(r->mean_ms > r->total_ms / (double)r->calls);
    }
    teardown(&f);
}

/* Calls per layer and per op equal what the model does: each leaf runs
 * forward and backward once per step. */
static void test_call_counts(void)
{
    fixture f;
    CHECK_OK(setup(&f, mlp(), 1, 32, 32 * 40, NULL));
    CHECK(run_steps(f.t, 20) > 0);
    dl_prof_row rows[64];
    int n = dl_profiler_rows(f.prof, DL_PROF_BY_OP, DL_PROF_SORT_NAME, rows, 64);
    const dl_prof_row *lf = find(rows, n, "Linear.forward");
    const dl_prof_row *lb = find(rows, n, "Linear.backward");
    const dl_prof_row *rf = find(rows, n, "ReLU.forward");
    const dl_prof_row *sf = find(rows, n, "Sequential.forward");
    const dl_prof_row *op = find(rows, n, "optimizer step");
    const dl_prof_row *dw = find(rows, n, "data wait");
    CHECK(lf && lb && rf && sf && op && dw);
    if (lf && lb && rf && sf && op && dw) {
        CHECK(lf->calls == 40);
        CHECK(lb->calls == 40);
        CHECK(rf->calls == 20);
        CHECK(sf->calls == 20);
        CHECK(op->calls == 20);
        CHECK(dw->calls == 20);
    }
    dl_prof_row lr[16];
    int nl = dl_profiler_rows(f.prof, DL_PROF_BY_LAYER, DL_PROF_SORT_NONE, lr, 16);
    CHECK(nl == 4);
    CHECK(lr[0].depth == 0 && lr[1].depth == 1);
    for (int i = 0; i < nl; i++)
        CHECK(lr[i].calls == 20);
    dl_prof_totals tot;
    dl_profiler_totals(f.prof, &tot);
    CHECK_NEAR(tot.leaf_calls_per_step, 6, 1e-9); /* 3 leaves, forward and backward */
    teardown(&f);
}

/* FLOPs against hand-computed values: Linear(64, 128) forward on a batch
 * of 32 is 2*64*128*32; backward twice that (weight and input gradient),
 * except for a first layer, whose input gradient nothing reads: its
 * backward is the weight gradient alone, and the profile must not count
 * the work that is skipped (else the MFU can pass 100%). Conv2d(1->4,
 * 3x3, pad 1) on 8x8 is 2*1*9*4*64 per sample. */
static void test_flops_linear_conv(void)
{
    fixture f;
    CHECK_OK(setup(&f, mlp(), 1, 32, 32 * 20, NULL));
    CHECK(run_steps(f.t, 10) > 0);
    dl_prof_row lr[16];
    int nl = dl_profiler_rows(f.prof, DL_PROF_BY_LAYER, DL_PROF_SORT_NONE, lr, 16);
    CHECK(nl == 4);
    double fwd1 = 2.0 * 64 * 128 * 32, fwd3 = 2.0 * 128 * 3 * 32;
    CHECK_NEAR(lr[1].flops, 10 * (fwd1 + fwd1), 1e-6 * fwd1);
    CHECK_NEAR(lr[3].flops, 10 * (fwd3 + 2 * fwd3), 1e-6 * fwd3);
    CHECK(lr[1].gflops > 0);
    dl_prof_row rows[64];
    int n = dl_profiler_rows(f.prof, DL_PROF_BY_OP, DL_PROF_SORT_TOTAL, rows, 64);
    const dl_prof_row *lf = find(rows, n, "Linear.forward");
    CHECK(lf && fabs(lf->flops - 10 * (fwd1 + fwd3)) < 1);
    /* the table's total is the model's own count of a step's work, less
     * one pass of the ReLU (128 per sample): the model counts every
     * backward at twice its forward, the profile a parameter-free layer's
     * once */
    dl_prof_totals tot;
    dl_profiler_totals(f.prof, &tot);
    CHECK_NEAR(tot.flops, 10 * 32 * (dl_model_train_flops(f.model) - 128), 1e-6 * fwd1);
    /* bytes: forward reads x and W, writes y */
    CHECK(lf && lf->bytes > 10 * 4 * (32.0 * (64 + 128) + 64 * 128));
    teardown(&f);

    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_conv2d(1, 4, 3, 1, 1, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_flatten());
    dl_nn_sequential_add(s, dl_nn_linear(4 * 64, 3, 1));
    CHECK_OK(setup(&f, s, 0, 16, 16 * 20, NULL));
    CHECK(run_steps(f.t, 5) > 0);
    nl = dl_profiler_rows(f.prof, DL_PROF_BY_LAYER, DL_PROF_SORT_NONE, lr, 16);
    CHECK(nl == 5);
    double conv = 2.0 * 1 * 9 * 4 * 64 * 16; /* per batch */
    CHECK(!strcmp(lr[1].kind, "Conv2d"));
    CHECK_NEAR(lr[1].flops, 5 * 2 * conv, 1e-6 * conv);
    /* the table ends with the algorithm the backend chose for the conv,
     * as the backend words it for the planned batch of 16 */
    dl_backend *cpu = dl_backend_cpu(0);
    dl_conv_desc d = {.n = 16,
                      .c = 1,
                      .h = 8,
                      .w = 8,
                      .k = 4,
                      .r = 3,
                      .s = 3,
                      .stride = 1,
                      .pad = 1,
                      .p = 8,
                      .q = 8,
                      .groups = 1,
                      .dilation = 1};
    char algo[192], want[320];
    CHECK_OK(cpu->ops->conv_algo(cpu, &d, DL_F32, algo, sizeof algo));
    snprintf(want, sizeof want, "Algorithms:\n  %s (Conv2d): %s\n", lr[1].name, algo);
    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    dl_profiler_print(f.prof, DL_PROF_BY_LAYER, DL_PROF_SORT_NONE, 0, mf);
    fclose(mf);
    /* one channel in: oneDNN's filter gradient where the build has it,
     * else im2col + GEMM */
    CHECK_MSG(text && strstr(text, want) && (strstr(algo, "(filter)") || strstr(algo, "im2col")),
              "want \"%s\" in:\n%s", want, text ? text : "");
    free(text);
    teardown(&f);
}

/* The trace parses back with cJSON and holds the last ring_steps steps:
 * step events, layer forward/backward events, the phases, and the table. */
static void test_trace_round_trip(void)
{
    dl_profiler_options po;
    dl_profiler_options_default(&po);
    po.ring_steps = 3;
    fixture f;
    CHECK_OK(setup(&f, mlp(), 1, 32, 32 * 40, &po));
    CHECK(run_steps(f.t, 12) > 0);
    char path[] = "/tmp/dl_trace_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(dl_profiler_write_trace(f.prof, path));
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL);
    char *buf = calloc(1, 1 << 22);
    size_t n = fp ? fread(buf, 1, (1 << 22) - 1, fp) : 0;
    if (fp)
        fclose(fp);
    cJSON *j = cJSON_Parse(buf);
    CHECK(j != NULL);
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(j, "traceEvents");
    CHECK(cJSON_IsArray(ev));
    int steps = 0, lin_f = 0, lin_b = 0, opt = 0, min_step = 1 << 30, bad = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ev)
    {
        const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        if (!cJSON_IsString(ph) || !cJSON_IsString(name)) {
            bad++;
            continue;
        }
        if (strcmp(ph->valuestring, "X"))
            continue;
        const cJSON *dur = cJSON_GetObjectItemCaseSensitive(e, "dur");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(e, "ts");
        if (!cJSON_IsNumber(dur) || !cJSON_IsNumber(ts) || dur->valuedouble < 0)
            bad++;
        const cJSON *st =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(e, "args"), "step");
        if (cJSON_IsNumber(st) && st->valueint < min_step)
            min_step = st->valueint;
        if (!strncmp(name->valuestring, "step ", 5))
            steps++;
        else if (!strcmp(name->valuestring, "Linear1.forward"))
            lin_f++;
        else if (!strcmp(name->valuestring, "Linear1.backward"))
            lin_b++;
        else if (!strcmp(name->valuestring, "optimizer step"))
            opt++;
    }
    CHECK(bad == 0);
    CHECK_MSG(steps == 3, "%d step events", steps);
    CHECK(lin_f == 3 && lin_b == 3 && opt == 3);
    CHECK(min_step == 10);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(j, "dlbench");
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(meta, "ops")) > 5);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(meta, "layers")) == 4);
    CHECK(n > 0);
    cJSON_Delete(j);
    free(buf);
    unlink(path);
    teardown(&f);
}

/* Whole-run mode keeps every step until max_events, then counts drops. */
static void test_trace_bounded(void)
{
    dl_profiler_options po;
    dl_profiler_options_default(&po);
    po.whole_run = 1;
    po.max_events = 100;
    fixture f;
    CHECK_OK(setup(&f, mlp(), 1, 32, 32 * 40, &po));
    CHECK(run_steps(f.t, 20) > 0);
    dl_prof_totals tot;
    dl_profiler_totals(f.prof, &tot);
    CHECK(tot.events_kept == 100);
    CHECK(tot.events_dropped > 0);
    teardown(&f);
}

/* Disabled, the profiler records nothing; events from the backend's timing
 * slots (forced on the CPU) give the same phases as the clock. */
static void test_disabled_and_events(void)
{
    fixture f;
    CHECK_OK(setup(&f, mlp(), 1, 32, 32 * 40, NULL));
    dl_profiler_set_enabled(f.prof, 0);
    CHECK(run_steps(f.t, 5) > 0);
    dl_prof_totals tot;
    dl_profiler_totals(f.prof, &tot);
    CHECK(tot.steps == 0 && tot.events_kept == 0);
    teardown(&f);

    dl_profiler_options po;
    dl_profiler_options_default(&po);
    po.force_events = 1;
    CHECK_OK(setup(&f, mlp(), 1, 32, 32 * 40, &po));
    double wall = run_steps(f.t, 20);
    dl_profiler_totals(f.prof, &tot);
    CHECK(tot.steps == 20);
    CHECK_NEAR(tot.step_ms * 1e-3, wall, wall_tolerance(wall, 20));
    dl_prof_row rows[64];
    int n = dl_profiler_rows(f.prof, DL_PROF_BY_OP, DL_PROF_SORT_TOTAL, rows, 64);
    const dl_prof_row *op = find(rows, n, "optimizer step");
    CHECK(op && op->calls == 20 && op->total_ms > 0);
    teardown(&f);
}

/* Detached, a trainer holds the shared off profiler: it reports none,
 * steps record nothing into the detached one, and the off profiler
 * stays off whatever is asked of it. */
static void test_detached_is_off(void)
{
    fixture f;
    CHECK_OK(setup(&f, mlp(), 1, 32, 32 * 40, NULL));
    CHECK(dl_trainer_profiler(f.t) == f.prof);
    CHECK(run_steps(f.t, 3) > 0);
    CHECK_OK(dl_trainer_set_profiler(f.t, NULL));
    CHECK(dl_trainer_profiler(f.t) == NULL);
    CHECK(run_steps(f.t, 4) > 0);
    dl_prof_totals tot;
    dl_profiler_totals(f.prof, &tot);
    CHECK(tot.steps == 3);
    dl_profiler *off = dl_profiler_off();
    dl_profiler_set_enabled(off, 1);
    CHECK(!dl_profiler_enabled(off) && !dl_profiler_wants_step(off, 1));
    dl_prof_step_begin(off, 1);
    CHECK(!dl_prof_recording(off) && !dl_prof_begin(off).on && !dl_prof_begin_aside(off).on);
    dl_profiler_destroy(off); /* leaves it alone */
    CHECK(dl_profiler_off() == off && !dl_profiler_enabled(off));
    teardown(&f);
}

/* MFU parts: the CPU calibration gives a plausible peak; the GPU table
 * knows the common parts; the cost arithmetic. */
static void test_cost(void)
{
    double peak = 0;
    CHECK_OK(dl_cost_calibrate(be, 256, 0.1, &peak));
    CHECK_MSG(peak > 1e8 && peak < 1e13, "peak %g", peak);
    dl_gpu_peak gp;
    CHECK(dl_cost_gpu_peak("NVIDIA H100 80GB HBM3", &gp) && gp.bf16 > 9e14);
    CHECK(dl_cost_gpu_peak("NVIDIA H100 PCIe", &gp) && gp.bf16 < 8e14);
    CHECK(dl_cost_gpu_peak("NVIDIA A100-SXM4-40GB", &gp) && gp.f32 == 19.5e12);
    CHECK(!dl_cost_gpu_peak("Matrox G200", &gp));
    dl_cost_input in = {0};
    in.elapsed_s = 1800;
    in.step_s = 1500;
    in.flops_done = 1.5e15;
    in.peak_flops = 1e13;
    in.progress = 0.25;
    in.price_per_hour = 2.0;
    in.energy_j = 3.6e6;
    dl_cost c;
    dl_cost_estimate(&in, &c);
    CHECK_NEAR(c.achieved_flops, 1e12, 1);
    CHECK_NEAR(c.mfu, 0.1, 1e-12);
    CHECK_NEAR(c.cost_so_far, 1.0, 1e-12);
    CHECK_NEAR(c.cost_projected, 4.0, 1e-12);
    CHECK_NEAR(c.eta_s, 5400, 1e-9);
    CHECK_NEAR(c.energy_kwh, 1.0, 1e-12);
}

int main(void)
{
    be = dl_backend_cpu(0);
    RUN(test_totals_match_wall_time);
    RUN(test_call_counts);
    RUN(test_nested_kind_totals);
    RUN(test_flops_linear_conv);
    RUN(test_trace_round_trip);
    RUN(test_trace_bounded);
    RUN(test_disabled_and_events);
    RUN(test_detached_is_off);
    RUN(test_cost);
    CHECK_EXIT();
}
