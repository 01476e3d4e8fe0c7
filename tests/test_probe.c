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

/* Trains 3 epochs of 10 steps (shuffling, dropout, Adam), probing after
 * c->probe_at steps (0: never); returns the parameters (malloc'd, *n). */
static float *train(probe_ctx *c, size_t *n)
{
    dl_dataset d;
    fx_blobs spec = {{1, {16}}, 4, 3.0f, 0, 1.0f, 3, 1, "blobs"};
    fx_blobs_make(&d, 320, &spec);
    dl_source *src = NULL;
    CHECK_OK(dl_source_memory(&src, &d, 32, 1, 0, 7));
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 32;
    cfg.epochs = 3;
    cfg.seed = 5;
    cfg.log_every = 1;
    dl_optim o = dl_optim_adam(0.01f, 0);
    dl_model *m = NULL;
    dl_trainer *t = NULL;
    CHECK_OK(dl_model_create(&m, mlp(), &src->info.sample));
    CHECK_OK(dl_trainer_create(&t, m, &(dl_loss){DL_LOSS_XENT, 0, DL_IGNORE_NONE}, &o, NULL, src,
                               NULL, &cfg, be));
    dl_trainer_set_devices(t, &dl_devices_builtin);
    dl_callbacks cb = {c, on_step, NULL, on_event, on_idle};
    dl_trainer_set_callbacks(t, &cb);
    CHECK_OK(dl_trainer_run(t));
    CHECK(dl_trainer_step_count(t) == 30);
    *n = dl_model_param_count(m);
    float *p = malloc(*n * sizeof *p);
    dl_model_state ms;
    dl_model_get_state(m, &ms);
    CHECK_OK(be->ops->to_host(be, p, ms.params, *n * sizeof *p));
    dl_trainer_destroy(t);
    dl_model_destroy(m);
    dl_source_destroy(src);
    dl_dataset_done(&d);
    return p;
}

/* A run probed after 5 steps ends with the same parameters, bit for bit,
 * as the run that never probed; the probes measured every variant. */
static void test_probe_changes_nothing(void)
{
    dl_probe_report rep;
    memset(&rep, 0, sizeof rep);
    size_t na, nb, nc;
    probe_ctx never = {0, 0, 0, &rep, 0}, direct = {5, 0, 0, &rep, 0};
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
    /* another thread count trains the same steps: the same loss to rounding */
    if (rep.n > 3) {
        CHECK(rep.v[3].threads > 0);
        CHECK_NEAR(rep.v[3].loss, rep.v[0].loss, 1e-4 * rep.v[0].loss);
    }
    /* through the command queue (the workbench's and watch's A): the same */
    dl_probe_report unused;
    probe_ctx cmd = {7, 0, 0, &unused, 1};
    float *c = train(&cmd, &nc);
    CHECK(cmd.posted && cmd.events == rep.n);
    CHECK(nc == na && memcmp(a, c, na * sizeof *a) == 0);
    free(a);
    free(b);
    free(c);
}

int main(void)
{
    be = dl_backend_cpu(2);
    RUN(test_probe_changes_nothing);
    CHECK_EXIT();
}
