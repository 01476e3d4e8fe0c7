/* session_eval.c - a trained model measured on a data set: the trainer's loss and accuracy, the confusion matrix from the outputs */
#include "scripting/session_eval.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/core/backend.h"
#include "engine/data/open.h"
#include "engine/train/trainer.h"
#include "scripting/run_model.h"
#include "scripting/script.h"

typedef struct counter {
    dl_eval_report *r;
    int outs;
} counter;

/* One batch of outputs [n, K] and labels [n] into the confusion matrix. */
static int count_batch(void *user, int n, const float *out, const void *y)
{
    counter *c = user;
    const int32_t *label = y;
    int K = c->r->classes;
    for (int i = 0; i < n; i++) {
        const float *z = out + (size_t)i * (size_t)c->outs;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > z[best])
                best = k;
        if (label[i] < 0 || label[i] >= K)
            return dl_error(DL_EINVAL, "eval: label %d of row %ld is outside the %d classes",
                            (int)label[i], c->r->samples + i, K);
        c->r->confusion[(size_t)label[i] * (size_t)K + (size_t)best]++;
    }
    c->r->samples += n;
    return DL_OK;
}

/* Class names from the data file's group, else the class numbers. */
static int class_names(dl_eval_report *r, const dl_run_model *run)
{
    r->names = calloc((size_t)r->classes, sizeof *r->names);
    if (!r->names)
        return dl_error(DL_ENOMEM, "out of memory");
    char *buf = NULL;
    size_t len = 0;
    int n = run->data_path[0] && run->data_group[0]
                ? dl_data_class_names(run->data_path, run->data_group, &buf, &len)
                : 0;
    r->named = n == r->classes;
    for (int k = 0; k < r->classes; k++) {
        if (r->named)
            snprintf(r->names[k], sizeof r->names[k], "%.*s", (int)len, buf + (size_t)k * len);
        else
            snprintf(r->names[k], sizeof r->names[k], "%d", k);
    }
    free(buf);
    return DL_OK;
}

static int confusion(dl_eval_report *r, dl_trainer *t, dl_source *src, const dl_run_model *run)
{
    int outs = (int)dl_shape_numel(dl_model_output_shape(run->model));
    r->classes = outs;
    r->confusion = calloc((size_t)outs * (size_t)outs, sizeof *r->confusion);
    if (!r->confusion)
        return dl_error(DL_ENOMEM, "out of memory for a %d x %d confusion matrix", outs, outs);
    DL_TRY(class_names(r, run));
    counter c = {r, outs};
    return dl_trainer_outputs(t, src, count_batch, &c);
}

static int measure(dl_eval_report *r, dl_run_model *run)
{
    dl_experiment *e = dl_run_model_experiment(run);
    dl_source *src = run->val;
    if (!src)
        return dl_error(DL_EINVAL,
                        "eval %s: the run has no validation split: name one with --data "
                        "FILE:GROUP",
                        run->dir);
    dl_trainer_config cfg = e->cfg;
    dl_trainer *t;
    DL_TRY(dl_trainer_create(&t, run->model, &e->loss, &e->optim, &e->schedule, run->train, src,
                             &cfg, dl_model_backend(run->model)));
    r->loss_name = dl_loss_name(e->loss.kind);
    int rc = dl_trainer_evaluate(t, src, &r->loss, &r->acc);
    if (rc == DL_OK && dl_trainer_tokens(t)) {
        r->lm = 1;
        r->ppl = exp(r->loss);
        r->bpc = r->loss / log(2.0);
        r->samples = (long)src->info.count;
    } else if (rc == DL_OK && e->loss.kind == DL_LOSS_XENT) {
        rc = confusion(r, t, src, run);
    } else if (rc == DL_OK) {
        r->samples = (long)src->info.count;
    }
    dl_trainer_destroy(t);
    return rc;
}

int dl_session_eval_run(const dl_eval_options *o, dl_eval_report *r)
{
    memset(r, 0, sizeof *r);
    dl_run_model run;
    dl_run_model_options ro = {o->run, o->out_dir, o->checkpoint, "eval", -1, o->data};
    DL_TRY(dl_run_model_open(&run, &ro));
    snprintf(r->run, sizeof r->run, "%s", run.dir);
    snprintf(r->checkpoint, sizeof r->checkpoint, "%s", run.checkpoint);
    if (run.data_path[0])
        snprintf(r->data, sizeof r->data, "%s:%s", run.data_path, run.data_group);
    else
        snprintf(r->data, sizeof r->data, "%s", run.val ? run.val->name : "");
    r->step = run.info.cursor.step;
    r->epoch = run.info.cursor.epoch;
    int rc = measure(r, &run);
    dl_run_model_close(&run);
    if (rc < 0)
        dl_eval_report_done(r);
    return rc;
}

void dl_eval_report_done(dl_eval_report *r)
{
    free(r->names);
    free(r->confusion);
    memset(r, 0, sizeof *r);
}

void dl_eval_report_class(const dl_eval_report *r, int k, double *precision, double *recall,
                          long *support)
{
    int K = r->classes;
    long tp = r->confusion[(size_t)k * (size_t)K + (size_t)k], predicted = 0, actual = 0;
    for (int j = 0; j < K; j++) {
        predicted += r->confusion[(size_t)j * (size_t)K + (size_t)k];
        actual += r->confusion[(size_t)k * (size_t)K + (size_t)j];
    }
    *precision = predicted ? (double)tp / (double)predicted : NAN;
    *recall = actual ? (double)tp / (double)actual : NAN;
    *support = actual;
}
