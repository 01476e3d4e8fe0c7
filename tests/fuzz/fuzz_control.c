/* fuzz_control.c - libFuzzer target: the control-socket request parser (dl_control_handle), one line at a time */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/backend.h"
#include "engine/data/data.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/train/trainer.h"
#include "tui/control.h"

static dl_trainer *trainer(void)
{
    static dl_trainer *t;
    static dl_dataset d;
    if (t)
        return t;
    static float x[64 * 2];
    static int32_t y[64];
    for (int i = 0; i < 64; i++)
        y[i] = i % 2, x[2 * i] = (float)i, x[2 * i + 1] = (float)-i;
    d.info.sample = (dl_shape){1, {2}};
    d.info.x_dtype = DL_F32;
    d.info.y_dtype = DL_I32;
    d.info.y_width = 1;
    d.info.classes = 2;
    d.info.count = 64;
    d.info.scale = 1;
    d.x = x;
    d.y = y;
    dl_backend *be = dl_backend_cpu(1);
    dl_layer *s = dl_nn_sequential();
    dl_nn_sequential_add(s, dl_nn_linear(2, 2, 1));
    dl_model *m;
    dl_source *src;
    dl_optim opt = dl_optim_sgd(0.1f, 0, 0, 0);
    dl_trainer_config cfg = dl_trainer_config_default();
    cfg.batch = 8;
    dl_loss loss = {DL_LOSS_XENT, 0, DL_IGNORE_NONE};
    if (dl_model_create(&m, s, &d.info.sample) < 0 || dl_source_memory(&src, &d, 8, 0, 0, 1) < 0 ||
        dl_model_init_state(m, be, 0, 1) < 0 ||
        dl_trainer_create(&t, m, &loss, &opt, NULL, src, NULL, &cfg, be) < 0)
        abort();
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dl_trainer *t = trainer();
    char *line = malloc(size + 1);
    if (!line)
        return 0;
    memcpy(line, data, size);
    line[size] = 0;
    char reply[1024];
    dl_control_handle(t, line, reply, sizeof reply);
    if (!memchr(reply, 0, sizeof reply))
        abort(); /* the reply must be a terminated string */
    /* queued commands are never applied: once the queue is full, "queue
     * full" is the (tested) reply */
    free(line);
    return 0;
}
