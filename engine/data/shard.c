/* shard.c - a batch source that hands one rank its rows of every global batch */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/data/shard.h"

typedef struct shard {
    dl_source base;
    dl_source *inner; /* borrowed */
    int rank, world;
    size_t x_row, y_row; /* bytes per sample */
    int global_n;        /* rows of the last global batch */
} shard;

static int shard_start_epoch(dl_source *s, int epoch, size_t skip)
{
    shard *h = (shard *)s;
    return h->inner->ops->start_epoch(h->inner, epoch, skip);
}

static int shard_next(dl_source *s, dl_batch *out)
{
    shard *h = (shard *)s;
    int rc = h->inner->ops->next(h->inner, out);
    if (rc <= 0)
        return rc;
    /* rows [rank*n/world, (rank+1)*n/world): every row goes to exactly one rank */
    long n = out->n;
    h->global_n = out->n;
    long lo = n * h->rank / h->world, hi = n * (h->rank + 1) / h->world;
    out->x = (const char *)out->x + (size_t)lo * h->x_row;
    out->y = (const char *)out->y + (size_t)lo * h->y_row;
    out->n = (int)(hi - lo);
    return 1;
}

int dl_source_shard_global_rows(const dl_source *s) { return ((const shard *)s)->global_n; }

static size_t shard_batches(dl_source *s)
{
    shard *h = (shard *)s;
    return h->inner->ops->batches(h->inner);
}

static void shard_stats(dl_source *s, dl_loader_stats *out)
{
    shard *h = (shard *)s;
    if (h->inner->ops->stats)
        h->inner->ops->stats(h->inner, out);
    else
        memset(out, 0, sizeof *out);
}

static int shard_retarget(dl_source *s, dl_backend *be)
{
    shard *h = (shard *)s;
    return h->inner->ops->retarget ? h->inner->ops->retarget(h->inner, be) : DL_OK;
}

static void shard_destroy(dl_source *s) { free(s); }

static const dl_source_ops shard_ops = {
    .start_epoch = shard_start_epoch,
    .next = shard_next,
    .batches = shard_batches,
    .stats = shard_stats,
    .retarget = shard_retarget,
    .destroy = shard_destroy,
};

int dl_source_shard(dl_source **out, dl_source *inner, int rank, int world)
{
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world)
        return dl_error(DL_EINVAL, "rank %d of %d ranks is not a valid shard", rank, world);
    shard *h = calloc(1, sizeof *h);
    if (!h)
        return dl_error(DL_ENOMEM, "out of memory");
    h->base.ops = &shard_ops;
    h->base.info = inner->info;
    snprintf(h->base.name, sizeof h->base.name, "%s", inner->name);
    h->inner = inner;
    h->rank = rank;
    h->world = world;
    const dl_data_info *in = &inner->info;
    h->x_row = (size_t)dl_shape_numel(&in->sample) * dl_dtype_size(in->x_dtype);
    h->y_row = (size_t)(in->y_width > 0 ? in->y_width : 1) * dl_dtype_size(in->y_dtype);
    *out = &h->base;
    return DL_OK;
}
