/* dist_reducer.c - a communicator as the trainer's reducer (engine/train/reducer.h), on top of dl_comm */
#include "engine/dist/comm.h"

static const char *describe(void *ctx) { return dl_comm_describe(ctx); }
static const char *grad_path(void *ctx) { return dl_comm_grad_path(ctx); }

static int grad_plan(void *ctx, dl_backend *be, float *p, size_t n, const size_t *cuts, int ncuts)
{
    return dl_comm_grad_plan(ctx, be, p, n, cuts, ncuts);
}

static void grad_begin(void *ctx) { dl_comm_grad_begin(ctx); }
static int grad_ready(void *ctx, size_t from) { return dl_comm_grad_ready(ctx, from); }
static int grad_finish(void *ctx) { return dl_comm_grad_finish(ctx); }
static double take_seconds(void *ctx) { return dl_comm_take_seconds(ctx); }
static int sum(void *ctx, double *v, int n) { return dl_comm_allreduce(ctx, v, n, DL_COMM_SUM); }

static int bcast(void *ctx, void *buf, size_t bytes, int root)
{
    return dl_comm_bcast(ctx, buf, bytes, root);
}

static int bcast_floats(void *ctx, dl_backend *be, float *p, size_t n, int root)
{
    return dl_comm_bcast_floats(ctx, be, p, n, root);
}

static int barrier(void *ctx) { return dl_comm_barrier(ctx); }

void dl_comm_reducer(dl_comm *c, dl_reducer *out)
{
    *out = (dl_reducer){
        .ctx = c,
        .rank = dl_comm_rank(c),
        .size = dl_comm_size(c),
        .describe = describe,
        .grad_path = grad_path,
        .grad_plan = grad_plan,
        .grad_begin = grad_begin,
        .grad_ready = grad_ready,
        .grad_finish = grad_finish,
        .take_seconds = take_seconds,
        .sum = sum,
        .bcast = bcast,
        .bcast_floats = bcast_floats,
        .barrier = barrier,
    };
}
