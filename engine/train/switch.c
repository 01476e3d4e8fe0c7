/* switch.c - the hot switch: the whole training moves to another backend at a step boundary */
#include <stdio.h>

#include "engine/base/error.h"
#include "engine/train/trainer_internal.h"

/* Puts every piece back on old after a failed move (each undo may find
 * the piece never left). */
static void move_back(dl_trainer *t, dl_backend *old)
{
    dl_model_move(t->m, old);
    if (t->stage->be != old)
        dl_trainer_alloc_stage(t, old);
    if (t->train->ops->retarget)
        t->train->ops->retarget(t->train, old);
    if (t->val && t->val->ops->retarget)
        t->val->ops->retarget(t->val, old);
}

int dl_trainer_switch_device(dl_trainer *t, dl_backend *be)
{
    dl_backend *old = t->be;
    if (be == old)
        return DL_OK;
    DL_TRY(dl_trainer_fold_guard(t)); /* the check's cells stay behind */
    DL_TRY(dl_model_move(t->m, be));
    int rc = dl_trainer_alloc_stage(t, be);
    if (rc == DL_OK && t->train->ops->retarget)
        rc = t->train->ops->retarget(t->train, be);
    if (rc == DL_OK && t->val && t->val->ops->retarget)
        rc = t->val->ops->retarget(t->val, be);
    if (rc < 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", dl_error_message());
        move_back(t, old);
        return dl_error(rc, "%s", msg);
    }
    t->be = be;
    if (old->ops->trim)
        old->ops->trim(old); /* its cached scratch too: the old device keeps nothing */
    dl_profiler_attach(t->prof, t->m, be); /* fails only for a new model: cannot here */
    return DL_OK;
}
