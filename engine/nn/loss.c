/* loss.c - the per-token cross-entropy: mean over the tokens that are not ignored, on the backend's fused op */
#include "engine/base/error.h"
#include "engine/nn/nn.h"

/* See nn.h. */
int dl_loss_xent_tokens(dl_backend *be, const dl_loss *loss, int ignore_index, int rows,
                        int classes, const float *logits, const int32_t *targets, float grad_scale,
                        float *dlogits, float *stats)
{
    if (loss->kind != DL_LOSS_XENT)
        return dl_error(DL_EINVAL, "%s: per-token targets need CrossEntropy",
                        dl_loss_name(loss->kind));
    if (!be->ops->softmax_xent_tokens)
        return dl_error(DL_EINVAL, "CrossEntropy over tokens: the %s backend has no per-token op",
                        be->ops->name);
    if (rows < 0 || classes < 1)
        return dl_error(DL_EINVAL, "CrossEntropy over %d tokens of %d classes", rows, classes);
    int rc = be->ops->softmax_xent_tokens(be, rows, classes, logits, targets, ignore_index,
                                          loss->smoothing, grad_scale, dlogits, stats);
    if (rc < 0)
        return dl_error(rc, "CrossEntropy: %s", dl_error_message());
    return DL_OK;
}
