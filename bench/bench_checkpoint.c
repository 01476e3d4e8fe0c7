/* bench_checkpoint.c - checkpoint load time of a ~100M-parameter model: the arenas read whole (what dl_checkpoint_load does) against one dataset per tensor read one by one
 *
 * Model: Sequential of 6 Linear(4096, 4096) = 100.7M parameters, no
 * optimizer moments. Cases, each the best of 3 after the page cache holds
 * the file:
 *   dl_checkpoint_save / dl_checkpoint_load (v2: arena + virtual views;
 *     the load is one H5Dread per arena plus the SHA-256 and the copy);
 *   raw H5Dread of /arena/params into one buffer (one read per arena:
 *     version 1's and version 2's way);
 *   raw H5Dread of each /params/NAME virtual view into its place;
 *   raw H5Dread of each tensor written as its own ordinary dataset (the
 *     other design: named datasets, no arena dataset);
 *   SHA-256 of the same bytes (the digest a load verifies).
 * The h5py peer: /usr/bin/python3 bench/bench_checkpoint.py FILE.
 *
 * usage: bench_checkpoint [DIR (default /tmp)]
 */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/h5util.h"
#include "engine/base/sha256.h"
#include "engine/core/backend.h"
#include "engine/train/checkpoint.h"

#include "bench/bench_cpu.h"

enum { LAYERS = 6, WIDTH = 4096, REPS = 3 };

static double best(double a, double b) { return a < b ? a : b; }

static int read_one(hid_t f, const char *name, float *dst)
{
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    herr_t rc = d >= 0 ? H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) : -1;
    if (d >= 0)
        H5Dclose(d);
    return rc < 0 ? -1 : 0;
}

/* Reads the tensors of m from path's datasets PREFIX/NAME into buf. */
static double read_named(const char *path, const char *prefix, dl_model *m, float *buf)
{
    double t0 = dl_clock_mono_s();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        char name[128];
        snprintf(name, sizeof name, "%s/%s", prefix, p->name);
        if (read_one(f, name, buf + p->offset) < 0)
            fprintf(stderr, "cannot read %s\n", name);
    }
    H5Fclose(f);
    return dl_clock_mono_s() - t0;
}

/* The other design: each tensor its own ordinary dataset under /params. */
static void write_named(const char *path, dl_model *m, const float *params)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        hsize_t dims[4];
        for (int k = 0; k < p->shape.ndim; k++)
            dims[k] = (hsize_t)p->shape.dim[k];
        hid_t s = H5Screate_simple(p->shape.ndim, dims, NULL);
        hid_t d = H5Dcreate2(g, p->name, H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, params + p->offset);
        H5Dclose(d);
        H5Sclose(s);
    }
    H5Gclose(g);
    H5Fclose(f);
}

int main(int argc, char **argv)
{
    bench_cpu_line();
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char v2[1024], named[1024];
    snprintf(v2, sizeof v2, "%s/bench-ckpt-v2.h5", dir);
    snprintf(named, sizeof named, "%s/bench-ckpt-named.h5", dir);
    dl_layer *s = dl_nn_sequential();
    for (int i = 0; i < LAYERS; i++)
        dl_nn_sequential_add(s, dl_nn_linear(WIDTH, WIDTH, 1));
    dl_shape in = {1, {WIDTH}};
    dl_model *m;
    if (dl_model_create(&m, s, &in) < 0 || dl_model_init_state(m, dl_backend_cpu(0), 0, 1) < 0) {
        fprintf(stderr, "%s\n", dl_error_message());
        return 1;
    }
    dl_model_state st;
    dl_model_get_state(m, &st);
    size_t bytes = st.count * sizeof(float);
    printf("model: %d x Linear(%d, %d) = %.1fM parameters, %.0f MB\n", LAYERS, WIDTH, WIDTH,
           (double)st.count / 1e6, (double)bytes / 1e6);
    dl_checkpoint_info info = {0}, got;
    double t_save = 1e9, t_load = 1e9, t_arena = 1e9, t_views = 1e9, t_named = 1e9, t_sha = 1e9;
    float *buf = malloc(bytes);
    dl_hdf5_lock();
    write_named(named, m, st.params);
    dl_hdf5_unlock();
    for (int r = 0; r < REPS; r++) {
        double t0 = dl_clock_mono_s();
        if (dl_checkpoint_save(v2, m, &info) < 0)
            fprintf(stderr, "%s\n", dl_error_message());
        double t1 = dl_clock_mono_s();
        if (dl_checkpoint_load(v2, m, &got) < 0)
            fprintf(stderr, "%s\n", dl_error_message());
        double t2 = dl_clock_mono_s();
        t_save = best(t_save, t1 - t0);
        t_load = best(t_load, t2 - t1);
        dl_hdf5_lock();
        t0 = dl_clock_mono_s();
        hid_t f = H5Fopen(v2, H5F_ACC_RDONLY, H5P_DEFAULT);
        read_one(f, "arena/params", buf);
        H5Fclose(f);
        t_arena = best(t_arena, dl_clock_mono_s() - t0);
        t_views = best(t_views, read_named(v2, "params", m, buf));
        t_named = best(t_named, read_named(named, "params", m, buf));
        dl_hdf5_unlock();
        t0 = dl_clock_mono_s();
        dl_sha256 c;
        uint8_t d[32];
        dl_sha256_init(&c);
        dl_sha256_update(&c, buf, bytes);
        dl_sha256_final(&c, d);
        t_sha = best(t_sha, dl_clock_mono_s() - t0);
    }
    printf("%-52s %7.3f s\n", "dl_checkpoint_save (v2, arena + views)", t_save);
    printf("%-52s %7.3f s\n", "dl_checkpoint_load (v2: read, verify, copy)", t_load);
    printf("%-52s %7.3f s  %5.2f GB/s\n", "H5Dread /arena/params (one read per arena)", t_arena,
           (double)bytes / t_arena / 1e9);
    printf("%-52s %7.3f s  %5.2f GB/s  x%.2f\n", "H5Dread each /params/NAME view (12 reads)",
           t_views, (double)bytes / t_views / 1e9, t_views / t_arena);
    printf("%-52s %7.3f s  %5.2f GB/s  x%.2f\n", "H5Dread each ordinary named dataset (12 reads)",
           t_named, (double)bytes / t_named / 1e9, t_named / t_arena);
    printf("%-52s %7.3f s  %5.2f GB/s\n", "SHA-256 of the parameters", t_sha,
           (double)bytes / t_sha / 1e9);
    free(buf);
    dl_model_destroy(m);
    unlink(named);
    printf("files: %s (kept for the h5py peer: bench/bench_checkpoint.py %s)\n", v2, v2);
    return 0;
}
