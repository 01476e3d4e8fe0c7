/* checkpoint.c - checkpoint.h5 through HDF5: save atomically, verify and load */
#include "engine/train/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/base/h5util.h"
#include "engine/base/sha256.h"

#define FORMAT "dlbench-checkpoint 1"
#define NCURSOR 17
#define NCURSOR_V1 10 /* written before the epoch and window totals were kept */

static const char *region_names[4] = {"params", "moment1", "moment2", "buffers"};

static void cursor_pack(const dl_trainer_cursor *c, double v[NCURSOR])
{
    v[0] = (double)c->step;
    v[1] = c->epoch;
    v[2] = (double)c->epoch_step;
    v[3] = c->loss_scale;
    v[4] = c->clean_steps;
    v[5] = (double)c->skipped;
    v[6] = c->base_lr;
    v[7] = c->sched_scale;
    v[8] = c->sched_best;
    v[9] = c->sched_bad;
    v[10] = c->ep_loss;
    v[11] = c->ep_correct;
    v[12] = (double)c->ep_samples;
    v[13] = (double)c->rep_samples;
    v[14] = (double)c->rep_steps;
    v[15] = c->rep_loss;
    v[16] = c->rep_correct;
}

static void cursor_unpack(const double v[NCURSOR], dl_trainer_cursor *c)
{
    memset(c, 0, sizeof *c);
    c->step = (long)v[0];
    c->epoch = (int)v[1];
    c->epoch_step = (long)v[2];
    c->loss_scale = (float)v[3];
    c->clean_steps = (int)v[4];
    c->skipped = (long)v[5];
    c->base_lr = (float)v[6];
    c->sched_scale = (float)v[7];
    c->sched_best = v[8];
    c->sched_bad = (int)v[9];
    c->ep_loss = v[10];
    c->ep_correct = v[11];
    c->ep_samples = (long)v[12];
    c->rep_samples = (long)v[13];
    c->rep_steps = (long)v[14];
    c->rep_loss = (float)v[15];
    c->rep_correct = (float)v[16];
}

/* One "name offset count" line per parameter, plus the region sizes. */
static char *model_layout(dl_model *m, const dl_model_state *st)
{
    /* a name is under 64 bytes, two numbers under 21 each */
    size_t cap = 256 + (size_t)dl_model_num_params(m) * (64 + 2 * 21 + 3), len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    len += (size_t)snprintf(buf, cap, "count %zu buffers %zu\n", st->count, st->buffer_count);
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        len += (size_t)snprintf(buf + len, cap - len, "%s %zu %zu\n", p->name, p->offset, p->count);
    }
    return buf;
}

typedef struct host_state {
    float *region[4];
    size_t n[4];
} host_state;

static void host_state_free(host_state *h)
{
    for (int i = 0; i < 4; i++)
        free(h->region[i]);
}

static void digest(const host_state *h, const double *cursor, int ncursor, uint64_t seed,
                   const char *config_hash, char hex[65])
{
    dl_sha256 c;
    dl_sha256_init(&c);
    for (int i = 0; i < 4; i++)
        if (h->region[i])
            dl_sha256_update(&c, h->region[i], h->n[i] * sizeof(float));
    dl_sha256_update(&c, cursor, (size_t)ncursor * sizeof(double));
    uint8_t s[8];
    for (int i = 0; i < 8; i++)
        s[i] = (uint8_t)(seed >> (8 * i));
    dl_sha256_update(&c, s, 8);
    dl_sha256_update(&c, config_hash, strlen(config_hash));
    uint8_t d[32];
    dl_sha256_final(&c, d);
    dl_sha256_hex(d, hex);
}

/* --- HDF5 helpers (called with the HDF5 lock held; attributes: h5util.h) ---- */

static int put_array(hid_t f, const char *name, const float *data, size_t n)
{
    hsize_t dims[1] = {n};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = d >= 0 ? H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : -1;
    if (d >= 0)
        H5Dclose(d);
    H5Sclose(space);
    return rc < 0 ? -1 : 0;
}

/* --- save -------------------------------------------------------------------- */

static int copy_to_host(dl_model *m, host_state *h, dl_model_state *st)
{
    memset(h, 0, sizeof *h);
    dl_model_get_state(m, st);
    if (!st->params)
        return dl_error(DL_EINVAL, "checkpoint: the model has no state yet");
    const float *src[4] = {st->params, st->moment1, st->moment2, st->buffers};
    size_t n[4] = {st->count, st->moments >= 1 ? st->count : 0, st->moments >= 2 ? st->count : 0,
                   st->buffer_count};
    dl_backend *be = dl_model_backend(m);
    for (int i = 0; i < 4; i++) {
        if (!src[i] || !n[i])
            continue;
        h->n[i] = n[i];
        h->region[i] = malloc(n[i] * sizeof(float));
        if (!h->region[i]) {
            host_state_free(h);
            return dl_error(DL_ENOMEM, "checkpoint: out of memory for %zu floats", n[i]);
        }
        int rc = be->ops->to_host(be, h->region[i], src[i], n[i] * sizeof(float));
        if (rc < 0) {
            host_state_free(h);
            return rc;
        }
    }
    return DL_OK;
}

/* Fault injection for tests/t_crash.sh, read from DLBENCH_FAULT (unset in
 * normal use): "checkpoint-kill=N" dies by SIGKILL in the N-th save, after
 * the temporary file is complete and before the rename; "checkpoint-delay=MS"
 * sleeps there in every save; "checkpoint-enospc" makes every save fail as
 * on a full disk. */
typedef enum { FAULT_NONE, FAULT_KILL, FAULT_DELAY, FAULT_ENOSPC } fault_kind;

static fault_kind fault(long *arg)
{
    const char *f = getenv("DLBENCH_FAULT");
    *arg = 0;
    if (!f)
        return FAULT_NONE;
    if (!strncmp(f, "checkpoint-kill=", 16)) {
        *arg = strtol(f + 16, NULL, 10);
        return FAULT_KILL;
    }
    if (!strncmp(f, "checkpoint-delay=", 17)) {
        *arg = strtol(f + 17, NULL, 10);
        return FAULT_DELAY;
    }
    return !strcmp(f, "checkpoint-enospc") ? FAULT_ENOSPC : FAULT_NONE;
}

static void fault_before_rename(void)
{
    static _Atomic long saves;
    long arg;
    fault_kind k = fault(&arg);
    long n = ++saves;
    if (k == FAULT_KILL && n == arg)
        raise(SIGKILL);
    if (k == FAULT_DELAY && arg > 0) {
        struct timespec ts = {arg / 1000, (arg % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Builds the checkpoint file in memory (HDF5's core driver, no backing
 * store) and returns its image in *image (malloc'd). Frees h's regions as
 * soon as HDF5 holds a copy, so the peak is twice the state, not three
 * times. Called with the HDF5 lock held. */
static int build_image(const char *path, host_state *h, const dl_model_state *st,
                       const char *layout, const dl_checkpoint_info *info, const double *cur,
                       const char *hex, void **image, size_t *size)
{
    size_t bytes = 0;
    for (int i = 0; i < 4; i++)
        bytes += h->n[i] * sizeof(float);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fapl_core(fapl, bytes + 65536, 0) < 0) {
        if (fapl >= 0)
            H5Pclose(fapl);
        return dl_error(DL_ENOMEM, "%s: HDF5 cannot make an in-memory file", path);
    }
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0)
        return dl_error(DL_ENOMEM, "%s: HDF5 cannot make an in-memory file", path);
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        if (h->region[i])
            bad |= put_array(f, region_names[i], h->region[i], h->n[i]);
        free(h->region[i]);
        h->region[i] = NULL;
    }
    int moments = st->moments;
    bad |= dl_h5_attr_write_string(f, "format", FORMAT, H5T_CSET_ASCII) < 0;
    bad |= dl_h5_attr_write_string(f, "layout", layout, H5T_CSET_ASCII) < 0;
    bad |= dl_h5_attr_write_string(f, "config_hash", info->config_hash, H5T_CSET_ASCII) < 0;
    bad |= dl_h5_attr_write_string(f, "sha256", hex, H5T_CSET_ASCII) < 0;
    bad |= dl_h5_attr_write(f, "cursor", H5T_NATIVE_DOUBLE, NCURSOR, cur) < 0;
    bad |= dl_h5_attr_write(f, "seed", H5T_NATIVE_UINT64, 1, &info->seed) < 0;
    bad |= dl_h5_attr_write(f, "moments", H5T_NATIVE_INT, 1, &moments) < 0;
    ssize_t n = bad || H5Fflush(f, H5F_SCOPE_LOCAL) < 0 ? -1 : H5Fget_file_image(f, NULL, 0);
    void *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (buf && H5Fget_file_image(f, buf, (size_t)n) != n) {
        free(buf);
        buf = NULL;
    }
    H5Fclose(f); /* memory only: cannot fail for want of disk */
    if (!buf)
        return dl_error(DL_ENOMEM, "%s: HDF5 could not build the checkpoint in memory (%zd bytes)",
                        path, n);
    *image = buf;
    *size = (size_t)n;
    return DL_OK;
}

/* Writes data to tmp (created 0644 less the umask) and syncs it; returns 0
 * or an errno value. */
static int write_synced(const char *tmp, const void *data, size_t n)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno;
    long arg;
    int err = fault(&arg) == FAULT_ENOSPC ? ENOSPC : 0;
    for (size_t done = 0; !err && done < n;) {
        ssize_t w = write(fd, (const char *)data + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            err = w < 0 ? errno : EIO;
        else
            done += (size_t)w;
    }
    if (!err && fsync(fd) < 0)
        err = errno;
    if (close(fd) < 0 && !err)
        err = errno;
    return err;
}

int dl_checkpoint_save(const char *path, dl_model *m, const dl_checkpoint_info *info)
{
    host_state h;
    dl_model_state st;
    DL_TRY(copy_to_host(m, &h, &st));
    char *layout = model_layout(m, &st);
    if (!layout) {
        host_state_free(&h);
        return dl_error(DL_ENOMEM, "out of memory");
    }
    double cur[NCURSOR];
    cursor_pack(&info->cursor, cur);
    char hex[65];
    digest(&h, cur, NCURSOR, info->seed, info->config_hash, hex);

    /* HDF5 writes to memory; the disk is written here, where a full disk
     * is an errno and not a half-closed HDF5 file */
    void *image = NULL;
    size_t size = 0;
    dl_hdf5_lock();
    int rc = build_image(path, &h, &st, layout, info, cur, hex, &image, &size);
    dl_hdf5_unlock();
    free(layout);
    host_state_free(&h);
    if (rc < 0)
        return rc;
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int err = write_synced(tmp, image, size);
    free(image);
    if (err) {
        rc = dl_error(DL_EIO, "%s: writing the checkpoint failed: %s", tmp, strerror(err));
    } else {
        fault_before_rename();
        if (rename(tmp, path) < 0)
            rc = dl_error(DL_EIO, "%s: cannot rename the checkpoint into place: %s", path,
                          strerror(errno));
    }
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    dl_fs_fsync_dir_of(path); /* the rename is done: a folder that cannot be synced is no error */
    return DL_OK;
}

/* --- load -------------------------------------------------------------------- */

/* Opens and checks the file (format attribute); reads cursor, seed,
 * hashes, layout and, when want_arrays, the arrays into h. */
static int read_checkpoint(const char *path, dl_checkpoint_info *info, char **layout, char sha[65],
                           int *moments, host_state *h, int want_arrays)
{
    memset(h, 0, sizeof *h);
    *layout = NULL;
    if (access(path, R_OK) < 0)
        return dl_error(DL_EIO, "%s: cannot read the checkpoint: %s", path, strerror(errno));
    int rc = DL_OK;
    dl_hdf5_lock();
    hid_t f = H5Fis_hdf5(path) > 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
    if (f < 0) {
        dl_hdf5_unlock();
        return dl_error(DL_EIO,
                        "%s: not a readable HDF5 file: the checkpoint is damaged or was cut "
                        "short (torn write?)",
                        path);
    }
    char *format = dl_h5_attr_read_string(f, "format");
    if (!format || strcmp(format, FORMAT)) {
        rc = dl_error(DL_EINVAL, "%s: not a dlbench checkpoint (format %s%s%s)", path,
                      format ? "\"" : "", format ? format : "missing",
                      format ? "\", expected \"" FORMAT "\"" : "");
    }
    free(format);
    double cur[NCURSOR] = {0};
    int ncursor = 0;
    char *hash = NULL, *digest_attr = NULL;
    if (rc == DL_OK) {
        *layout = dl_h5_attr_read_string(f, "layout");
        hash = dl_h5_attr_read_string(f, "config_hash");
        digest_attr = dl_h5_attr_read_string(f, "sha256");
        ncursor = dl_h5_attr_read(f, "cursor", H5T_NATIVE_DOUBLE, NCURSOR, cur);
        if (ncursor != NCURSOR && ncursor != NCURSOR_V1)
            ncursor = -1;
        if (!*layout || !hash || !digest_attr || ncursor < 0 ||
            dl_h5_attr_read(f, "seed", H5T_NATIVE_UINT64, 1, &info->seed) != 1 ||
            dl_h5_attr_read(f, "moments", H5T_NATIVE_INT, 1, moments) != 1)
            rc = dl_error(DL_EINVAL, "%s: checkpoint is incomplete (attributes missing)", path);
    }
    if (rc == DL_OK) {
        cursor_unpack(cur, &info->cursor);
        snprintf(info->config_hash, sizeof info->config_hash, "%s", hash);
        snprintf(sha, 65, "%s", digest_attr);
    }
    for (int i = 0; i < 4 && rc == DL_OK; i++) {
        if (H5Lexists(f, region_names[i], H5P_DEFAULT) <= 0)
            continue;
        hid_t d = H5Dopen2(f, region_names[i], H5P_DEFAULT);
        hid_t space = d >= 0 ? H5Dget_space(d) : -1;
        hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
        if (n < 0) {
            rc = dl_error(DL_EIO, "%s: cannot read /%s", path, region_names[i]);
        } else {
            h->n[i] = (size_t)n;
            if (want_arrays) {
                h->region[i] = malloc((size_t)n * sizeof(float) + 1);
                if (!h->region[i])
                    rc = dl_error(DL_ENOMEM, "%s: out of memory", path);
                else if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, h->region[i]) <
                         0)
                    rc = dl_error(DL_EIO, "%s: /%s cannot be read: the checkpoint is damaged", path,
                                  region_names[i]);
            }
        }
        if (space >= 0)
            H5Sclose(space);
        if (d >= 0)
            H5Dclose(d);
    }
    H5Fclose(f);
    dl_hdf5_unlock();
    if (rc == DL_OK && want_arrays) {
        char hex[65];
        digest(h, cur, ncursor, info->seed, info->config_hash, hex);
        if (strcmp(hex, sha))
            rc = dl_error(DL_EINVAL,
                          "%s: checksum mismatch (stored %.12s..., computed %.12s...): the "
                          "checkpoint is damaged",
                          path, sha, hex);
    }
    free(hash);
    free(digest_attr);
    if (rc < 0) {
        free(*layout);
        *layout = NULL;
        host_state_free(h);
    }
    return rc;
}

int dl_checkpoint_peek(const char *path, dl_checkpoint_info *info)
{
    char *layout, sha[65];
    int moments;
    host_state h;
    int rc = read_checkpoint(path, info, &layout, sha, &moments, &h, 1);
    free(layout);
    host_state_free(&h);
    return rc;
}

int dl_checkpoint_load(const char *path, dl_model *m, dl_checkpoint_info *info)
{
    dl_checkpoint_info got;
    char *layout, sha[65];
    int moments;
    host_state h;
    DL_TRY(read_checkpoint(path, &got, &layout, sha, &moments, &h, 1));
    dl_model_state st;
    dl_model_get_state(m, &st);
    int rc = DL_OK;
    char *mine = st.params ? model_layout(m, &st) : NULL;
    if (!mine) {
        rc = dl_error(DL_EINVAL, "checkpoint: the model has no state to load into");
    } else if (strcmp(mine, layout)) {
        rc = dl_error(DL_EINVAL,
                      "%s: the checkpoint was written for a different model (its layout "
                      "starts \"%.60s\", this model's \"%.60s\")",
                      path, layout, mine);
    } else if (moments != st.moments) {
        rc = dl_error(DL_EINVAL,
                      "%s: the checkpoint holds %d optimizer moment(s) per parameter, this "
                      "optimizer keeps %d",
                      path, moments, st.moments);
    } else if (h.n[0] != st.count || h.n[3] != st.buffer_count ||
               (st.moments >= 1 && h.n[1] != st.count) || (st.moments >= 2 && h.n[2] != st.count)) {
        rc = dl_error(DL_EINVAL, "%s: array sizes do not match the model", path);
    }
    float *dst[4] = {st.params, st.moment1, st.moment2, st.buffers};
    dl_backend *be = dl_model_backend(m);
    for (int i = 0; i < 4 && rc == DL_OK; i++)
        if (h.region[i] && h.n[i] && dst[i])
            rc = be->ops->to_device(be, dst[i], h.region[i], h.n[i] * sizeof(float));
    free(mine);
    free(layout);
    host_state_free(&h);
    if (rc == DL_OK)
        *info = got;
    return rc;
}
