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
#include "engine/train/checkpoint_layout.h"

#define FORMAT "dlbench-checkpoint 2"
#define FORMAT_V1 "dlbench-checkpoint 1"
#define NCURSOR 17
#define LAYOUT_ATTR_MAX 60000 /* bytes: a longer layout is the dataset /layout */
#define NCURSOR_V1 10         /* written before the epoch and window totals were kept */

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

static int put_array(hid_t loc, const char *name, const float *data, size_t n)
{
    hsize_t dims[1] = {n};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(loc, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = d >= 0 ? H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : -1;
    if (d >= 0)
        H5Dclose(d);
    H5Sclose(space);
    return rc < 0 ? -1 : 0;
}

/* The link name of a tensor in its group: '/' would make a subgroup, so
 * it is written '_'; a name already taken (two layers named alike) gets
 * "~2", "~3"... */
static void link_name(hid_t group, const char *name, char *out, size_t size)
{
    char base[64];
    snprintf(base, sizeof base, "%s", name);
    for (char *p = base; *p; p++)
        if (*p == '/')
            *p = '_';
    if (!strcmp(base, ".") || !strcmp(base, ".."))
        base[0] = '_';
    snprintf(out, size, "%s", base);
    for (int k = 2; H5Lexists(group, out, H5P_DEFAULT) > 0; k++)
        snprintf(out, size, "%s~%d", base, k);
}

/* group/NAME: a virtual dataset of t's shape over the hyperslab [offset,
 * offset + count) of the 1-D arena dataset src (n floats) of this file. */
static int put_view(hid_t group, const char *src, size_t n, const dl_checkpoint_tensor *t)
{
    if (!t->count)
        return 0;
    hsize_t dims[DL_MAX_DIMS], sdims[1] = {n}, start[1] = {t->offset}, count[1] = {t->count};
    for (int k = 0; k < t->shape.ndim; k++)
        dims[k] = (hsize_t)t->shape.dim[k];
    hid_t vspace =
        t->shape.ndim ? H5Screate_simple(t->shape.ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t sspace = H5Screate_simple(1, sdims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int bad = vspace < 0 || sspace < 0 || dcpl < 0 ||
              H5Sselect_hyperslab(sspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
              H5Pset_virtual(dcpl, vspace, ".", src, sspace) < 0;
    char name[96];
    link_name(group, t->name, name, sizeof name);
    hid_t d =
        bad ? -1 : H5Dcreate2(group, name, H5T_IEEE_F32LE, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d >= 0)
        H5Dclose(d);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sspace >= 0)
        H5Sclose(sspace);
    if (vspace >= 0)
        H5Sclose(vspace);
    return d < 0 ? -1 : 0;
}

/* The layout as the root attribute "layout"; one too long for an
 * attribute of the default file format (64 KiB: thousands of tensors) as
 * a 1-D u8 dataset /layout instead. */
static int put_layout(hid_t f, const char *layout)
{
    size_t n = strlen(layout);
    if (n < LAYOUT_ATTR_MAX)
        return dl_h5_attr_write_string(f, "layout", layout, H5T_CSET_ASCII);
    hsize_t dims[1] = {n};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, "layout", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = d >= 0 ? H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, layout) : -1;
    if (d >= 0)
        H5Dclose(d);
    H5Sclose(space);
    return rc < 0 ? -1 : 0;
}

/* The layout attribute, else the /layout dataset (malloc'd text). */
static char *read_layout(hid_t f)
{
    char *text = dl_h5_attr_read_string(f, "layout");
    if (text || H5Lexists(f, "layout", H5P_DEFAULT) <= 0)
        return text;
    hid_t d = H5Dopen2(f, "layout", H5P_DEFAULT);
    hid_t space = d >= 0 ? H5Dget_space(d) : -1;
    hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (text && H5Dread(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) < 0) {
        free(text);
        text = NULL;
    }
    if (text)
        text[n] = 0;
    if (space >= 0)
        H5Sclose(space);
    if (d >= 0)
        H5Dclose(d);
    return text;
}

/* The arenas under /arena and one view per tensor in /params, /moment1,
 * /moment2 and /buffers. Frees h's regions as soon as HDF5 holds a copy. */
static int put_state(hid_t f, host_state *h, const dl_checkpoint_tensor *t, int nt)
{
    int bad = 0;
    hid_t arena = H5Gcreate2(f, "arena", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (arena < 0)
        return -1;
    size_t n[4];
    for (int i = 0; i < 4; i++) {
        n[i] = h->n[i];
        if (h->region[i])
            bad |= put_array(arena, region_names[i], h->region[i], h->n[i]);
        free(h->region[i]);
        h->region[i] = NULL;
    }
    H5Gclose(arena);
    for (int i = 0; i < 4 && !bad; i++) {
        if (!n[i])
            continue;
        char src[32];
        snprintf(src, sizeof src, "/arena/%s", region_names[i]);
        hid_t g = H5Gcreate2(f, region_names[i], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        bad |= g < 0;
        for (int k = 0; k < nt && !bad; k++)
            if (t[k].buffer == (i == 3))
                bad |= put_view(g, src, n[i], &t[k]);
        if (g >= 0)
            H5Gclose(g);
    }
    return bad ? -1 : 0;
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
                       const dl_checkpoint_tensor *t, int nt, const char *layout,
                       const dl_checkpoint_info *info, const double *cur, const char *hex,
                       void **image, size_t *size)
{
    size_t bytes = 0;
    for (int i = 0; i < 4; i++)
        bytes += h->n[i] * sizeof(float);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fapl_core(fapl, bytes + 65536 + (size_t)nt * 4096, 0) < 0) {
        if (fapl >= 0)
            H5Pclose(fapl);
        return dl_error(DL_ENOMEM, "%s: HDF5 cannot make an in-memory file", path);
    }
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0)
        return dl_error(DL_ENOMEM, "%s: HDF5 cannot make an in-memory file", path);
    int bad = put_state(f, h, t, nt);
    int moments = st->moments, version = DL_CHECKPOINT_VERSION;
    bad |= dl_h5_attr_write_string(f, "format", FORMAT, H5T_CSET_ASCII) < 0;
    bad |= dl_h5_attr_write(f, "version", H5T_NATIVE_INT, 1, &version) < 0;
    bad |= put_layout(f, layout) < 0;
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
    if (!buf) {
        char why[200];
        dl_hdf5_error_text(why, sizeof why);
        return dl_error(DL_ENOMEM,
                        "%s: HDF5 could not build the checkpoint in memory (%zd bytes): %s", path,
                        n, why);
    }
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

/* Writes image to a temporary file next to path and renames it into place. */
static int write_file(const char *path, const void *image, size_t size)
{
    char tmp[1100];
    DL_TRY(dl_fs_tmp_name(path, tmp, sizeof tmp));
    int err = write_synced(tmp, image, size);
    if (err) {
        unlink(tmp);
        return dl_error(DL_EIO, "%s: writing the checkpoint failed: %s", tmp, strerror(err));
    }
    fault_before_rename();
    return dl_fs_commit(tmp, path); /* removes tmp when it fails */
}

int dl_checkpoint_save(const char *path, dl_model *m, const dl_checkpoint_info *info)
{
    host_state h;
    dl_model_state st;
    DL_TRY(copy_to_host(m, &h, &st));
    dl_checkpoint_tensor *t = NULL;
    int nt = 0;
    int rc = dl_checkpoint_layout_of_model(m, &t, &nt);
    char *layout = rc == DL_OK ? dl_checkpoint_layout_text(t, nt, st.count, st.buffer_count,
                                                           DL_CHECKPOINT_VERSION)
                               : NULL;
    if (!layout) {
        free(t);
        host_state_free(&h);
        return rc < 0 ? rc : dl_error(DL_ENOMEM, "out of memory");
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
    rc = build_image(path, &h, &st, t, nt, layout, info, cur, hex, &image, &size);
    dl_hdf5_unlock();
    free(layout);
    free(t);
    host_state_free(&h);
    if (rc == DL_OK)
        rc = write_file(path, image, size);
    free(image);
    return rc;
}

/* --- load -------------------------------------------------------------------- */

/* The format attribute: version 1 or 2, else an error naming what it is. */
static int check_format(const char *path, hid_t f, int *version)
{
    char *format = dl_h5_attr_read_string(f, "format");
    int rc = DL_OK;
    if (format && !strcmp(format, FORMAT_V1)) {
        *version = 1;
    } else if (format && !strcmp(format, FORMAT)) {
        *version = 2;
        int v = 0;
        if (dl_h5_attr_read(f, "version", H5T_NATIVE_INT, 1, &v) != 1 || v != 2)
            rc = dl_error(DL_EINVAL, "%s: checkpoint version attribute missing or not 2", path);
    } else {
        rc = dl_error(DL_EINVAL, "%s: not a dlbench checkpoint (format %s%s%s)", path,
                      format ? "\"" : "", format ? format : "missing",
                      format ? "\", expected \"" FORMAT "\" or \"" FORMAT_V1 "\"" : "");
    }
    free(format);
    return rc;
}

/* The root attributes: cursor, seed, hashes, moments, layout. */
static int read_attrs(const char *path, hid_t f, dl_checkpoint_contents *c, double *cur,
                      int *ncursor, char **layout, char sha[65])
{
    *layout = read_layout(f);
    char *hash = dl_h5_attr_read_string(f, "config_hash");
    char *digest_attr = dl_h5_attr_read_string(f, "sha256");
    *ncursor = dl_h5_attr_read(f, "cursor", H5T_NATIVE_DOUBLE, NCURSOR, cur);
    int rc = DL_OK;
    if (!*layout || !hash || !digest_attr || (*ncursor != NCURSOR && *ncursor != NCURSOR_V1) ||
        dl_h5_attr_read(f, "seed", H5T_NATIVE_UINT64, 1, &c->info.seed) != 1 ||
        dl_h5_attr_read(f, "moments", H5T_NATIVE_INT, 1, &c->moments) != 1) {
        rc = dl_error(DL_EINVAL, "%s: checkpoint is incomplete (attributes missing)", path);
    } else {
        cursor_unpack(cur, &c->info.cursor);
        snprintf(c->info.config_hash, sizeof c->info.config_hash, "%s", hash);
        snprintf(sha, 65, "%s", digest_attr);
    }
    free(hash);
    free(digest_attr);
    return rc;
}

/* Each arena dataset present, with one H5Dread. */
static int read_arenas(const char *path, hid_t f, dl_checkpoint_contents *c)
{
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s%s", c->version >= 2 ? "arena/" : "", region_names[i]);
        if (c->version >= 2 && H5Lexists(f, "arena", H5P_DEFAULT) <= 0)
            return dl_error(DL_EIO, "%s: /arena is missing: the checkpoint is damaged", path);
        if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
            continue;
        hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
        hid_t space = d >= 0 ? H5Dget_space(d) : -1;
        hssize_t n = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
        int rc = DL_OK;
        if (n < 0) {
            rc = dl_error(DL_EIO, "%s: cannot read /%s", path, name);
        } else {
            c->n[i] = (size_t)n;
            c->region[i] = malloc((size_t)n * sizeof(float) + 1);
            if (!c->region[i])
                rc = dl_error(DL_ENOMEM, "%s: out of memory", path);
            else if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, c->region[i]) < 0)
                rc = dl_error(DL_EIO, "%s: /%s cannot be read: the checkpoint is damaged", path,
                              name);
        }
        if (space >= 0)
            H5Sclose(space);
        if (d >= 0)
            H5Dclose(d);
        if (rc < 0)
            return rc;
    }
    return DL_OK;
}

/* Opens path, checks the format, reads attributes and arenas; the HDF5
 * lock is held only here. */
static int read_file(const char *path, dl_checkpoint_contents *c, double *cur, int *ncursor,
                     char **layout, char sha[65])
{
    if (access(path, R_OK) < 0)
        return dl_error(DL_EIO, "%s: cannot read the checkpoint: %s", path, strerror(errno));
    dl_hdf5_lock();
    hid_t f = H5Fis_hdf5(path) > 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
    if (f < 0) {
        dl_hdf5_unlock();
        return dl_error(DL_EIO,
                        "%s: not a readable HDF5 file: the checkpoint is damaged or was cut "
                        "short (torn write?)",
                        path);
    }
    int rc = check_format(path, f, &c->version);
    if (rc == DL_OK)
        rc = read_attrs(path, f, c, cur, ncursor, layout, sha);
    if (rc == DL_OK)
        rc = read_arenas(path, f, c);
    H5Fclose(f);
    dl_hdf5_unlock();
    return rc;
}

int dl_checkpoint_read(const char *path, dl_checkpoint_contents *c)
{
    memset(c, 0, sizeof *c);
    double cur[NCURSOR] = {0};
    int ncursor = 0;
    char *layout = NULL, sha[65] = "";
    int rc = read_file(path, c, cur, &ncursor, &layout, sha);
    if (rc == DL_OK) {
        host_state h = {{c->region[0], c->region[1], c->region[2], c->region[3]},
                        {c->n[0], c->n[1], c->n[2], c->n[3]}};
        char hex[65];
        digest(&h, cur, ncursor, c->info.seed, c->info.config_hash, hex);
        if (strcmp(hex, sha))
            rc = dl_error(DL_EINVAL,
                          "%s: checksum mismatch (stored %.12s..., computed %.12s...): the "
                          "checkpoint is damaged",
                          path, sha, hex);
    }
    if (rc == DL_OK)
        rc = dl_checkpoint_layout_parse(path, layout, c->version, c);
    if (rc == DL_OK &&
        (c->n[0] != c->count || c->n[3] != c->buffer_count ||
         (c->moments >= 1 && c->n[1] != c->count) || (c->moments >= 2 && c->n[2] != c->count)))
        rc = dl_error(DL_EINVAL, "%s: the arrays' sizes do not match the layout", path);
    free(layout);
    if (rc < 0)
        dl_checkpoint_contents_done(c);
    return rc;
}

void dl_checkpoint_contents_done(dl_checkpoint_contents *c)
{
    for (int i = 0; i < 4; i++)
        free(c->region[i]);
    free(c->tensors);
    memset(c, 0, sizeof *c);
}

const dl_checkpoint_tensor *dl_checkpoint_find(const dl_checkpoint_contents *c, const char *name,
                                               int buffer)
{
    for (int i = 0; i < c->ntensors; i++)
        if (c->tensors[i].buffer == buffer && !strcmp(c->tensors[i].name, name))
            return &c->tensors[i];
    return NULL;
}

int dl_checkpoint_peek(const char *path, dl_checkpoint_info *info)
{
    dl_checkpoint_contents c;
    DL_TRY(dl_checkpoint_read(path, &c));
    *info = c.info;
    dl_checkpoint_contents_done(&c);
    return DL_OK;
}

/* Whether c fits m's state st: tensors, moments, region sizes. */
static int check_fits(const char *path, const dl_checkpoint_contents *c, dl_model *m,
                      const dl_model_state *st)
{
    if (!st->params)
        return dl_error(DL_EINVAL, "checkpoint: the model has no state to load into");
    DL_TRY(dl_checkpoint_layout_match(path, c, m));
    if (c->moments != st->moments)
        return dl_error(DL_EINVAL,
                        "%s: the checkpoint holds %d optimizer moment(s) per parameter, this "
                        "optimizer keeps %d",
                        path, c->moments, st->moments);
    if (c->n[0] != st->count || c->n[3] != st->buffer_count)
        return dl_error(DL_EINVAL,
                        "%s: the checkpoint's arrays (%zu parameter, %zu buffer values) do not "
                        "match the model's (%zu, %zu)",
                        path, c->n[0], c->n[3], st->count, st->buffer_count);
    return DL_OK;
}

int dl_checkpoint_load(const char *path, dl_model *m, dl_checkpoint_info *info)
{
    dl_checkpoint_contents c;
    DL_TRY(dl_checkpoint_read(path, &c));
    dl_model_state st;
    dl_model_get_state(m, &st);
    int rc = check_fits(path, &c, m, &st);
    float *dst[4] = {st.params, st.moment1, st.moment2, st.buffers};
    dl_backend *be = dl_model_backend(m);
    for (int i = 0; i < 4 && rc == DL_OK; i++)
        if (c.region[i] && c.n[i] && dst[i])
            rc = be->ops->to_device(be, dst[i], c.region[i], c.n[i] * sizeof(float));
    if (rc == DL_OK)
        *info = c.info;
    dl_checkpoint_contents_done(&c);
    return rc;
}
