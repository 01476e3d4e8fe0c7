/* snapshot.c - what the trainer publishes: its status for other threads, snapshots of the whole state */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/train/snapshot.h"
#include "engine/train/trainer_internal.h"

void dl_trainer_publish_locked(dl_trainer *t)
{
    t->pub.step = t->step;
    t->pub.epoch = t->epoch;
    t->pub.paused = t->paused;
    t->pub.stopping = t->stop;
    t->pub.lr = t->lr_now;
    snprintf(t->pub.device, sizeof t->pub.device, "%s", t->be->ops->name);
}

void dl_trainer_publish(dl_trainer *t)
{
    pthread_mutex_lock(&t->lock);
    dl_trainer_publish_locked(t);
    pthread_mutex_unlock(&t->lock);
}

void dl_trainer_status_get(dl_trainer *t, dl_trainer_status *out)
{
    pthread_mutex_lock(&t->lock);
    *out = t->pub;
    pthread_mutex_unlock(&t->lock);
}

struct dl_trainer_snapshot {
    const dl_trainer *owner;
    void *state; /* the model's state arena, byte for byte */
    size_t state_bytes;
    dl_trainer_cursor cursor;
    double lr_now, grad_norm;
    uint64_t micro; /* as it was, not as the cursor would derive it */
};

int dl_trainer_snapshot_take(dl_trainer *t, dl_trainer_snapshot **out)
{
    *out = NULL;
    DL_TRY(dl_trainer_fold_guard(t)); /* the skip count and norm, as of now */
    dl_model_state ms;
    dl_model_get_state(t->m, &ms);
    dl_trainer_snapshot *s = calloc(1, sizeof *s);
    size_t bytes = ms.storage->bytes;
    void *host = s ? malloc(bytes ? bytes : 1) : NULL;
    if (!host) {
        free(s);
        return dl_error(DL_ENOMEM,
                        "no host memory for a snapshot of the training state (%zu bytes)", bytes);
    }
    dl_backend *be = ms.storage->be;
    int rc = be->ops->to_host(be, host, ms.storage->ptr, bytes);
    if (rc < 0) {
        free(host);
        free(s);
        return rc;
    }
    s->owner = t;
    s->state = host;
    s->state_bytes = bytes;
    dl_trainer_get_cursor(t, &s->cursor);
    s->lr_now = t->lr_now;
    s->grad_norm = t->grad_norm;
    s->micro = t->micro;
    *out = s;
    return DL_OK;
}

int dl_trainer_snapshot_restore(dl_trainer *t, const dl_trainer_snapshot *s)
{
    dl_model_state ms;
    dl_model_get_state(t->m, &ms);
    if (s->owner != t || s->state_bytes != ms.storage->bytes)
        return dl_error(DL_EINVAL,
                        "snapshot of another training (%zu state bytes, this one has "
                        "%zu)",
                        s->state_bytes, ms.storage->bytes);
    dl_backend *be = ms.storage->be;
    DL_TRY(be->ops->to_device(be, ms.storage->ptr, s->state, s->state_bytes));
    DL_TRY(be->ops->sync(be));
    DL_TRY(dl_trainer_set_cursor(t, &s->cursor));
    t->lr_now = s->lr_now;
    t->grad_norm = s->grad_norm;
    t->micro = s->micro;
    return DL_OK;
}

void dl_trainer_snapshot_destroy(dl_trainer_snapshot *s)
{
    if (!s)
        return;
    free(s->state);
    free(s);
}
