/* checkpoint_v1_model.h - the model and state pattern of tests/data/checkpoint-v1.h5, shared by its generator and by tests/test_checkpoint.c
 *
 * Sequential { Linear(4, 6), BatchNorm(6), ReLU, Linear(6, 3) } on [4]
 * inputs, two optimizer moments (Adam), every state value set from
 * pattern(region, i) so a load can be checked against the formula.
 */
#ifndef DL_CHECKPOINT_V1_MODEL_H
#define DL_CHECKPOINT_V1_MODEL_H

#include <math.h>

#include "engine/nn/nn.h"

static dl_layer *v1_model_root(void)
{
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(4, 6, 1));
    dl_nn_sequential_add(s, dl_nn_batchnorm(6, 1e-5f, 0.1f));
    dl_nn_sequential_add(s, dl_nn_activation(DL_ACT_RELU));
    dl_nn_sequential_add(s, dl_nn_linear(6, 3, 1));
    return s;
}

/* Region 0 params, 1 moment1, 2 moment2, 3 buffers; distinct everywhere. */
static float v1_pattern(int region, size_t i)
{
    return (float)(sin(0.37 * (double)i + 1.3 * region) * (1.0 + region) + 0.01 * region);
}

#endif
