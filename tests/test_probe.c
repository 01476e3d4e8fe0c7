/* test_probe.c - what-if probes between two steps leave the training bit for bit as if they had not run */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/backend.h"
#include "engine/data/data.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/train/probe.h"
#include "engine/train/trainer.h"
#include "tests/check.h"
#include "tests/fixtures.h"

static dl_backend *be;

static dl_layer *mlp(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(16, 32, 1));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_dropout(0.2f));
    dl_nn_sequential_add(s, dl_nn_linear(32, 4, 1));
    return s;
}

typedef struct probe_ctx {
    int probe_at, posted, events;
    dl_probe_report *rep;
    int via_command;
    /* the run: 0 -> 3 epochs, no validation; else these epochs, and a
     * validation set (val_shift: its labels shifted by one class, so that
     * the validation loss rises as the training learns) */
    int epochs, val, val_shift;
    dl_backend *be; /* NULL: the test's */
} probe_ctx;

/* Between steps: the probes at step probe_at, directly. */
static int on_idle(void *user, dl_trainer *t)
{
    probe_ctx *c = user;
    if (c->via_command || c->posted || dl_trainer_step_count(t) != c->probe_at)
        return 0;
    c->posted = 1;
    dl_trainer_probe_variants(t, c->rep);
    CHECK_OK(dl_trainer_probe(t, 12, c->rep)); /* 12 steps: across an epoch end */
    return 0;
}

/* After a step: the command (as the workbench's A posts it). */
static int on_step(void *user, dl_trainer *t, const dl_step_info *i)
{
    probe_ctx *c = user;
    if (c->via_command && !c->posted && i->step == c->probe_at) {
        c->posted = 1;
        CHECK_OK(dl_trainer_post(t, DL_CMD_PROBE, 12, NULL));
    }
    return 0;
}

static void on_event(void *user, dl_trainer *t, const char *kind, const char *text)
{
    probe_ctx *c = user;
    if (!strcmp(kind, "probe") && strstr(text, "ms a step"))
        c->events++;
}

/* Trains 3 epochs of 10 steps (shuffling, dropout, Adam; c->epochs and a
 * validation set when asked), probing after c->probe_at steps (0: never);
 * returns the parameters (malloc'd, *n). */
static float *train(probe_ctx *c, size_t *n)
{
    dl_backend *b = c->be ? c->be : be;
    dl_dataset d, dv;
    fx_blobs spec = {{1, {16}}, 4, 3.0f, 0, 1.0f, 3, 1, "blobs"};
    fx_blobs_make(&d, 320, &spec);
    dl_source *src = NULL, *val = NULL;
    CHECK_OK(dl_source_memory(&src, &d, 32, 1, 0, 7));
    if (c->val) {
        fx_blobs vs = {{1, {16}}, 4, 3.0f, 0, 1.0f, 9, 2, "blobs-val"};
        fx_blobs_make(&dv, 128, &vs);
        if (c->val_shift)
            for (size_t i = 0; i < dv.info.count; i++)
                ((int32_t *)dv.y)[i] = (((int32_t *)dv.y)[i] + 1) % 4;
        CHECK_OK(dl_source_memory(&val, &dv, 32, 0, 0, 7));
    }
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 32;
    cfg.epochs = c->epochs > 0 ? c->epochs : 3;
    cfg.seed = 5;
    cfg.log_every = 1;
    dl_optim o = dl_optim_adam(0.01f, 0);
    dl_model *m = NULL;
    dl_trainer *t = NULL;
    CHECK_OK(dl_model_create(&m, mlp(), &src->info.sample));
    CHECK_OK(dl_trainer_create(&t, m, &(dl_loss){DL_LOSS_XENT, 0, DL_IGNORE_NONE}, &o, NULL, src,
                               val, &cfg, b));
    dl_trainer_set_devices(t, &dl_devices_builtin);
    dl_callbacks cb = {c, on_step, NULL, on_event, on_idle};
    dl_trainer_set_callbacks(t, &cb);
    CHECK_OK(dl_trainer_run(t));
    CHECK(dl_trainer_step_count(t) == 10 * cfg.epochs);
    *n = dl_model_param_count(m);
    float *p = malloc(*n * sizeof *p);
    dl_model_state ms;
    dl_model_get_state(m, &ms);
    CHECK_OK(b->ops->to_host(b, p, ms.params, *n * sizeof *p));
    dl_trainer_destroy(t);
    dl_model_destroy(m);
    dl_source_destroy(src);
    dl_dataset_done(&d);
    if (val) {
        dl_source_destroy(val);
        dl_dataset_done(&dv);
    }
    return p;
}

/* The variant labelled label in r; NULL when there is none. */
static const dl_probe_variant *variant(const dl_probe_report *r, const char *label)
{
    for (int i = 0; i < r->n; i++)
        if (!strncmp(r->v[i].label, label, strlen(label)))
            return &r->v[i];
    return NULL;
}

/* A run probed after 5 steps ends with the same parameters, bit for bit,
 * as the run that never probed; the probes measured every variant. */
static void test_probe_changes_nothing(void)
{
    dl_probe_report rep;
    memset(&rep, 0, sizeof rep);
    size_t na, nb, nc;
    probe_ctx never = {0, 0, 0, &rep, 0, 0, 0, 0, NULL}, direct = {5, 0, 0, &rep, 0, 0, 0, 0, NULL};
    float *a = train(&never, &na);
    float *b = train(&direct, &nb);
    CHECK(direct.posted);
    CHECK(na == nb && na > 0);
    CHECK(memcmp(a, b, na * sizeof *a) == 0);
    CHECK(rep.n >= 3);
    CHECK(rep.first_step == 5);
    for (int i = 0; i < rep.n; i++) {
        CHECK_MSG(!rep.v[i].failed, "%s: %s", rep.v[i].label, rep.v[i].why);
        CHECK(rep.v[i].steps == 12);
        CHECK(rep.v[i].step_s > 0 && isfinite(rep.v[i].loss));
    }
    /* the variants did differ: lr x3 is not the baseline's loss */
    CHECK(rep.v[2].lr_factor == 3 && rep.v[2].loss != rep.v[0].loss);
    CHECK(!strcmp(rep.v[2].command, "--set lr=0.03"));
    /* bf16 where this CPU computes it natively (AVX-512 BF16): run from the
     * same state, a loss near the baseline's but not its bits; never where
     * it would be emulated */
    const dl_probe_variant *bf = variant(&rep, "bf16");
    if ((be->lowp & DL_LOWP_KNOWN) && (be->lowp & DL_LOWP_BF16)) {
        CHECK(bf && bf->precision == DL_PREC_BF16 && !strcmp(bf->command, "--set precision=bf16"));
        if (bf) {
            CHECK(bf->steps == 12 && !bf->failed && bf->loss != rep.v[0].loss);
            CHECK_NEAR(bf->loss, rep.v[0].loss, 0.05 * rep.v[0].loss);
        }
    } else {
        CHECK(!bf);
    }
    /* no validation set: no projections */
    CHECK(!variant(&rep, "validate every") && !variant(&rep, "early stopping"));
    /* another thread count trains the same steps: the same loss to rounding */
    if (rep.n > 3) {
        CHECK(rep.v[3].threads > 0);
        CHECK_NEAR(rep.v[3].loss, rep.v[0].loss, 1e-4 * rep.v[0].loss);
    }
    /* through the command queue (the workbench's and watch's A): the same */
    dl_probe_report unused;
    probe_ctx cmd = {7, 0, 0, &unused, 1, 0, 0, 0, NULL};
    float *c = train(&cmd, &nc);
    CHECK(cmd.posted && cmd.events == rep.n);
    CHECK(nc == na && memcmp(a, c, na * sizeof *a) == 0);
    free(a);
    free(b);
    free(c);
}

/* On a CPU made to emulate bf16 (DLBENCH_CPU_BF16=0, as on one without
 * AVX-512 BF16) there is no bf16 variant, and probing still changes
 * nothing. */
static void test_probe_precisions(void)
{
    setenv("DLBENCH_CPU_BF16", "0", 1);
    dl_backend *emu = dl_backend_cpu_create(2);
    unsetenv("DLBENCH_CPU_BF16");
    CHECK(emu && (emu->lowp & DL_LOWP_KNOWN) && !(emu->lowp & DL_LOWP_BF16));
    if (!emu)
        return;
    dl_probe_report rep;
    memset(&rep, 0, sizeof rep);
    size_t na, nb;
    probe_ctx never = {0, 0, 0, &rep, 0, 0, 0, 0, emu}, direct = {5, 0, 0, &rep, 0, 0, 0, 0, emu};
    float *a = train(&never, &na);
    float *b = train(&direct, &nb);
    CHECK(direct.posted && na == nb && memcmp(a, b, na * sizeof *a) == 0);
    CHECK(!variant(&rep, "bf16"));
    free(a);
    free(b);
    dl_backend_cpu_destroy(emu);
}

/* With a validation set: validation every k epochs projected from the
 * validations so far (no steps run), and early stopping once the
 * validation loss has not improved for 3 validations (labels shifted by a
 * class: it rises from the start) - not on the curve that keeps falling;
 * the runs after the probes equal the runs that never probed. */
static void test_probe_projections(void)
{
    dl_probe_report rep;
    memset(&rep, 0, sizeof rep);
    size_t na, nb;
    /* falling validation loss, 8 epochs, probed after 50 steps (4 epochs closed) */
    probe_ctx never = {0, 0, 0, &rep, 0, 8, 1, 0, NULL},
              direct = {50, 0, 0, &rep, 0, 8, 1, 0, NULL};
    float *a = train(&never, &na);
    float *b = train(&direct, &nb);
    CHECK(direct.posted && na == nb && memcmp(a, b, na * sizeof *a) == 0);
    const dl_probe_variant *ve = variant(&rep, "validate every");
    CHECK(ve != NULL);
    if (ve) {
        int k = atoi(ve->label + strlen("validate every "));
        char cmd[64];
        snprintf(cmd, sizeof cmd, "--set val_every=%d", k);
        CHECK(ve->projected && ve->steps == 0 && k >= 2 && k <= 8 && !strcmp(ve->command, cmd));
        /* after step 50 epoch 5's end has not run: epochs 5..8 left (0-based
         * 4..7), each validating now; with k the last and every k-th */
        int skipped = 0;
        for (int e = 4; e < 7; e++)
            skipped += (e + 1) % k != 0;
        CHECK_MSG(strstr(ve->note, "validations left skipped") != NULL, "%s", ve->note);
        CHECK(ve->saves_s >= 0 && (skipped == 0) == (ve->saves_s == 0));
    }
    CHECK(!variant(&rep, "early stopping"));
    free(a);
    free(b);
    /* a rising validation loss: early stopping with patience 3 stops now */
    memset(&rep, 0, sizeof rep);
    probe_ctx never2 = {0, 0, 0, &rep, 0, 8, 1, 1, NULL},
              direct2 = {50, 0, 0, &rep, 0, 8, 1, 1, NULL};
    a = train(&never2, &na);
    b = train(&direct2, &nb);
    CHECK(direct2.posted && na == nb && memcmp(a, b, na * sizeof *a) == 0);
    const dl_probe_variant *es = variant(&rep, "early stopping");
    CHECK(es && es->projected && !strcmp(es->command, "--set early_stopping=3"));
    if (es)
        CHECK_MSG(es->saves_s > 0 && strstr(es->note, "4 epochs left"), "%s", es->note);
    free(a);
    free(b);
}

int main(void)
{
    be = dl_backend_cpu(2);
    RUN(test_probe_changes_nothing);
    RUN(test_probe_precisions);
    RUN(test_probe_projections);
    CHECK_EXIT();
}
