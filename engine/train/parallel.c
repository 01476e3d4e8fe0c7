/* parallel.c - data parallelism in the trainer, through the dl_reducer it is handed */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/data/shard.h"
#include "engine/train/trainer_internal.h"

/* dl_pass grad_hook, data parallel: layer l's gradients are final, and
 * with them those of every layer after it (registered later, so at higher
 * offsets): buckets above its first parameter can be reduced. */
int dl_trainer_grad_ready(void *user, const dl_layer *l)
{
    dl_trainer *t = user;
    size_t lo = SIZE_MAX;
    int np = dl_model_num_params(t->m);
    for (int i = 0; i < np; i++) {
        const dl_param *q = dl_model_param(t->m, i);
        if (q->layer == l && q->offset < lo)
            lo = q->offset;
    }
    return lo == SIZE_MAX ? DL_OK : t->dp->grad_ready(t->dp->ctx, lo);
}

/* Plans the gradient sum: buckets may start at every parameter. */
static int plan_grads(dl_trainer *t, const dl_reducer *r)
{
    int np = dl_model_num_params(t->m);
    size_t *cuts = malloc(((size_t)np + 1) * sizeof *cuts);
    if (!cuts)
        return dl_error(DL_ENOMEM, "out of memory");
    for (int i = 0; i < np; i++)
        cuts[i] = dl_model_param(t->m, i)->offset; /* ascending: registration order */
    dl_model_state s;
    dl_model_get_state(t->m, &s);
    int rc = r->grad_plan(r->ctx, t->be, s.grads, s.count, cuts, np);
    free(cuts);
    return rc;
}

/* Rank 0's state, [params | grads | moments | buffers], then its cursor. */
static int take_rank0_state(dl_trainer *t, const dl_reducer *r)
{
    dl_model_state s;
    dl_model_get_state(t->m, &s);
    size_t floats = (size_t)(2 + s.moments) * s.count + s.buffer_count;
    DL_TRY(r->bcast_floats(r->ctx, t->be, s.params, floats, 0));
    dl_trainer_cursor c;
    dl_trainer_get_cursor(t, &c);
    DL_TRY(r->bcast(r->ctx, &c, sizeof c, 0));
    return dl_trainer_set_cursor(t, &c);
}

int dl_trainer_set_reducer(dl_trainer *t, const dl_reducer *r)
{
    if (t->dp || !r || r->size < 2)
        return DL_OK;
    t->sync = calloc((size_t)(4 + r->size), sizeof *t->sync);
    if (!t->sync)
        return dl_error(DL_ENOMEM, "out of memory");
    DL_TRY(plan_grads(t, r));
    DL_TRY(take_rank0_state(t, r));
    DL_TRY(dl_source_shard(&t->shard, t->train, r->rank, r->size));
    t->whole = t->train;
    t->train = t->shard;
    t->red = *r;
    t->dp = &t->red;
    dl_trainer_event(t, "ranks", "rank %d of %d: %s; gradients by %s", r->rank, r->size,
                     r->describe(r->ctx), r->grad_path(r->ctx));
    return DL_OK;
}

int dl_trainer_sync_report(dl_trainer *t, double *loss_sum, double *correct, double dt,
                           double *comm_s)
{
    int ranks = t->dp->size, me = t->dp->rank;
    double *v = t->sync;
    memset(v, 0, (size_t)(4 + ranks) * sizeof *v);
    v[0] = *loss_sum;
    v[1] = *correct;
    v[2] = (double)t->rep_samples;
    v[3] = t->rep_comm;
    v[4 + me] = dt > 0 ? (double)t->rep_samples / dt : 0;
    DL_TRY(t->dp->sum(t->dp->ctx, v, 4 + ranks));
    *loss_sum = v[0];
    *correct = v[1];
    t->rep_samples = (long)v[2];
    *comm_s = v[3] / ranks;
    t->rep_comm = 0;
    return DL_OK;
}

int dl_trainer_agree(dl_trainer *t, int *paused)
{
    double v[3] = {t->stop, t->paused, t->dp->rank == 0 ? t->base_lr : 0};
    DL_TRY(t->dp->sum(t->dp->ctx, v, 3));
    t->stop = v[0] > 0;
    *paused = v[1] > 0;
    t->base_lr = (float)v[2];
    return DL_OK;
}
