/* make_checkpoint_v1.c - writes tests/data/checkpoint-v1.h5 with the checkpoint code of commit 43dc696 (format "dlbench-checkpoint 1")
 *
 * Kept to show how the committed file was made; it is not built by make.
 * At commit 43dc696, after make:
 *   cc -std=c11 -D_GNU_SOURCE -I. $(pkg-config --cflags hdf5) tests/data/make_checkpoint_v1.c \
 *      build/libdlbench.a $(pkg-config --libs lua5.4 hdf5 openblas libcjson ncursesw) \
 *      -lz -ldl -lm -pthread -ldnnl -o /tmp/mkv1 && /tmp/mkv1 tests/data/checkpoint-v1.h5
 */
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/core/backend.h"
#include "engine/train/checkpoint.h"
#include "tests/data/checkpoint_v1_model.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUT.h5\n", argv[0]);
        return 2;
    }
    dl_model *m;
    dl_shape in = {1, {4}};
    dl_backend *cpu = dl_backend_cpu(0);
    if (dl_model_create(&m, v1_model_root(), &in) < 0 || dl_model_init_state(m, cpu, 2, 7) < 0) {
        fprintf(stderr, "%s\n", dl_error_message());
        return 1;
    }
    dl_model_state st;
    dl_model_get_state(m, &st);
    float *r[4] = {st.params, st.moment1, st.moment2, st.buffers};
    size_t n[4] = {st.count, st.count, st.count, st.buffer_count};
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < n[k]; i++)
            r[k][i] = v1_pattern(k, i);
    dl_checkpoint_info info;
    memset(&info, 0, sizeof info);
    info.cursor.step = 42;
    info.cursor.epoch = 3;
    info.cursor.base_lr = 0.01f;
    info.cursor.loss_scale = 1;
    info.seed = 7;
    snprintf(info.config_hash, sizeof info.config_hash, "%064d", 0);
    int rc = dl_checkpoint_save(argv[1], m, &info);
    if (rc < 0)
        fprintf(stderr, "%s\n", dl_error_message());
    dl_model_destroy(m);
    return rc < 0;
}
