/* text.c - a token file's vocabulary, UTF-8, and the batch source of context windows over a split */
#include "engine/data/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/h5util.h"
#include "engine/base/rng.h"

/* --- UTF-8 ---------------------------------------------------------------------- */

int dl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    int len = c < 0x80             ? 1
              : (c & 0xE0) == 0xC0 ? 2
              : (c & 0xF0) == 0xE0 ? 3
              : (c & 0xF8) == 0xF0 ? 4
                                   : 0;
    if (len == 0 || (size_t)len > n)
        return 0;
    if (len == 1) {
        *cp = c;
        return 1;
    }
    uint32_t v = c & (0x7Fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0; /* overlong, beyond Unicode, or a surrogate */
    *cp = v;
    return len;
}

int dl_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* --- the vocabulary ------------------------------------------------------------- */

void dl_text_vocab_done(dl_text_vocab *v)
{
    if (!v)
        return;
    free(v->cp);
    memset(v, 0, sizeof *v);
}

/* The "vocab" string of a chars file into v->cp: size distinct characters. */
static int vocab_chars(dl_text_vocab *v, const char *path, const char *s)
{
    size_t n = strlen(s);
    v->cp = malloc((size_t)v->size * sizeof *v->cp);
    if (!v->cp)
        return dl_error(DL_ENOMEM, "%s: out of memory for the vocabulary", path);
    int k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int len = dl_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (len == 0)
            return dl_error(DL_EINVAL, "%s: attribute vocab: invalid UTF-8 at byte %zu", path, i);
        if (k == v->size)
            return dl_error(DL_EINVAL,
                            "%s: attribute vocab holds more than vocab_size = %d characters", path,
                            v->size);
        v->cp[k++] = cp;
        i += (size_t)len;
    }
    if (k != v->size)
        return dl_error(DL_EINVAL, "%s: attribute vocab holds %d characters, vocab_size says %d",
                        path, k, v->size);
    return DL_OK;
}

/* Root attributes kind, vocab_kind, vocab_size and vocab (the lock held). */
static int read_vocab(dl_text_vocab *v, const char *path, hid_t f)
{
    char *kind = dl_h5_attr_read_string(f, "kind");
    int is_text = kind && !strcmp(kind, "text");
    free(kind);
    if (!is_text)
        return dl_error(DL_EINVAL,
                        "%s: not a text data file (no kind = \"text\" attribute; make one with "
                        "dlbench import --text FILE... %s)",
                        path, path);
    char *vk = dl_h5_attr_read_string(f, "vocab_kind");
    int chars = vk && !strcmp(vk, "chars"), bytes = vk && !strcmp(vk, "bytes");
    free(vk);
    int32_t size = 0;
    if (!chars && !bytes)
        return dl_error(DL_EINVAL, "%s: attribute vocab_kind: expected \"bytes\" or \"chars\"",
                        path);
    if (dl_h5_attr_read(f, "vocab_size", H5T_NATIVE_INT32, 1, &size) != 1 || size < 1 ||
        size > (bytes ? 256 : DL_TEXT_MAX_VOCAB))
        return dl_error(DL_EINVAL, "%s: attribute vocab_size: expected an integer in 1..%d", path,
                        bytes ? 256 : DL_TEXT_MAX_VOCAB);
    v->chars = chars;
    v->size = size;
    if (bytes)
        return DL_OK;
    char *s = dl_h5_attr_read_string(f, "vocab");
    if (!s)
        return dl_error(DL_EINVAL, "%s: a chars vocabulary needs the attribute vocab (a string)",
                        path);
    int rc = vocab_chars(v, path, s);
    free(s);
    return rc;
}

/* Opens path read-only under the lock (held on success). */
static int open_file(const char *path, hid_t *f)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return dl_error(DL_EINVAL,
                        "%s: no such file (make it with dlbench import --text FILE... %s)", path,
                        path);
    if (!S_ISREG(st.st_mode))
        return dl_error(DL_EINVAL, "%s: not a file", path);
    dl_hdf5_lock();
    if (H5Fis_hdf5(path) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        dl_hdf5_unlock();
        return dl_error(DL_EINVAL, "%s: not an HDF5 file (truncated or corrupt?)", path);
    }
    *f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (*f < 0) {
        int rc = dl_h5_fail(DL_EINVAL, __FILE__, __LINE__, "H5Fopen", "%s: cannot open", path);
        dl_hdf5_unlock();
        return rc;
    }
    return DL_OK;
}

int dl_text_vocab_read(dl_text_vocab *v, const char *path)
{
    memset(v, 0, sizeof *v);
    hid_t f;
    DL_TRY(open_file(path, &f));
    int rc = read_vocab(v, path, f);
    H5Fclose(f);
    dl_hdf5_unlock();
    if (rc < 0)
        dl_text_vocab_done(v);
    return rc;
}

int dl_text_vocab_decode(const dl_text_vocab *v, int id, char out[4])
{
    if (id < 0 || id >= v->size)
        return 0;
    if (!v->chars) {
        out[0] = (char)id;
        return 1;
    }
    return dl_utf8_encode(v->cp[id], out);
}

long dl_text_vocab_encode(const dl_text_vocab *v, const char *text, size_t len, int32_t *ids,
                          size_t max)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp = s[i];
        int l = v->chars ? dl_utf8_decode(s + i, len - i, &cp) : 1;
        if (l == 0)
            return dl_error(DL_EINVAL, "invalid UTF-8 at byte %zu", i);
        int id = -1;
        if (!v->chars)
            id = (int)cp < v->size ? (int)cp : -1;
        for (int k = 0; v->chars && k < v->size && id < 0; k++)
            id = v->cp[k] == cp ? k : -1;
        if (id < 0)
            return dl_error(DL_EINVAL,
                            "the character '%.*s' (U+%04X) is not in the vocabulary (byte %zu)", l,
                            text + i, (unsigned)cp, i);
        if (n == max)
            return dl_error(DL_EINVAL, "more than %zu tokens (at byte %zu)", max, i);
        ids[n++] = id;
        i += (size_t)l;
    }
    return (long)n;
}

/* --- the source ------------------------------------------------------------------ */

typedef struct text_source {
    dl_source base;
    size_t len;    /* the split's tokens */
    uint16_t *tok; /* memory mode: [len] the split's ids */
    /* streaming: the file and dataset stay open; each window is one
     * hyperslab read of T + 1 ids into win (the HDF5 lock held per batch) */
    int streaming;
    hid_t file, ds, fspace, mspace;
    uint16_t *win; /* [T + 1] */
    int T, batch, shuffle, drop_last, vocab;
    uint64_t seed;
    int epoch;
    size_t windows; /* per epoch */
    size_t pos;     /* next sample index in the epoch */
    dl_backend *be; /* where x and y come from; NULL: malloc */
    float *x;       /* [batch, T] */
    int32_t *y;     /* [batch, T] */
    dl_loader_stats st;
} text_source;

size_t dl_text_position(uint64_t seed, int epoch, size_t k, size_t tokens, int context)
{
    /* p + T <= tokens - 1: the window and its next-token targets fit */
    size_t span = tokens - (size_t)context;
    dl_rng4 r = dl_rng_philox(seed, DL_STREAM_SHUFFLE + 1, (uint64_t)epoch, k);
    uint64_t bits = (uint64_t)r.v[0] << 32 | r.v[1];
    return (size_t)(((unsigned __int128)bits * span) >> 64);
}

static size_t text_batches(dl_source *s)
{
    text_source *t = (text_source *)s;
    size_t b = (size_t)t->batch;
    return t->drop_last ? t->windows / b : (t->windows + b - 1) / b;
}

static int text_start_epoch(dl_source *s, int epoch, size_t skip)
{
    text_source *t = (text_source *)s;
    size_t nb = text_batches(s);
    if (epoch < 0 || skip > nb)
        return dl_error(DL_EINVAL, "%s: cannot resume at epoch %d batch %zu (%zu per epoch)",
                        s->name, epoch, skip, nb);
    t->epoch = epoch;
    t->pos = skip * (size_t)t->batch;
    return DL_OK;
}

/* Streaming: ids p .. p+T into t->win (the lock held), checked against
 * the vocabulary (memory mode checked them all when it opened). */
static int read_window(text_source *t, size_t p)
{
    hsize_t start = p, count = (hsize_t)t->T + 1;
    if (H5Sselect_hyperslab(t->fspace, H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
        H5Dread(t->ds, H5T_NATIVE_UINT16, t->mspace, t->fspace, H5P_DEFAULT, t->win) < 0)
        return dl_h5_fail(DL_EIO, __FILE__, __LINE__, "H5Dread", "%s: reading tokens %zu..%zu",
                          t->base.name, p, p + (size_t)t->T);
    for (int j = 0; j <= t->T; j++)
        if (t->win[j] >= t->vocab)
            return dl_error(DL_EINVAL,
                            "%s/tokens: id %u at position %zu is not below vocab_size %d",
                            t->base.name, t->win[j], p + (size_t)j, t->vocab);
    return DL_OK;
}

/* Windows pos .. pos+n of the epoch into x (ids as floats) and y (the next ids). */
static int fill(text_source *t, int n)
{
    int T = t->T, rc = DL_OK;
    if (t->streaming)
        dl_hdf5_lock();
    for (int k = 0; k < n && rc == DL_OK; k++) {
        size_t i = t->pos + (size_t)k;
        size_t p = t->shuffle ? dl_text_position(t->seed, t->epoch, i, t->len, T) : i * (size_t)T;
        if (t->streaming && (rc = read_window(t, p)) < 0)
            break;
        const uint16_t *w = t->streaming ? t->win : t->tok + p;
        float *x = t->x + (size_t)k * (size_t)T;
        int32_t *y = t->y + (size_t)k * (size_t)T;
        for (int j = 0; j < T; j++) {
            x[j] = (float)w[j];
            y[j] = w[j + 1];
        }
    }
    if (t->streaming)
        dl_hdf5_unlock();
    return rc;
}

static int text_next(dl_source *s, dl_batch *out)
{
    text_source *t = (text_source *)s;
    double t0 = dl_clock_mono_s();
    size_t left = t->windows - (t->pos < t->windows ? t->pos : t->windows);
    if (left == 0 || (t->drop_last && left < (size_t)t->batch))
        return 0;
    int n = left < (size_t)t->batch ? (int)left : t->batch;
    DL_TRY(fill(t, n));
    t->pos += (size_t)n;
    out->n = n;
    out->x = t->x;
    out->y = t->y;
    out->wait_s = dl_clock_mono_s() - t0;
    t->st.wait_s += out->wait_s;
    t->st.batches++;
    t->st.bytes_read += (double)n * (double)(t->T + 1) * sizeof(uint16_t);
    return 1;
}

static void text_stats(dl_source *s, dl_loader_stats *out) { *out = ((text_source *)s)->st; }

static void free_buffers(dl_backend *be, float *x, int32_t *y)
{
    if (be) {
        if (x)
            be->ops->host_free(be, x);
        if (y)
            be->ops->host_free(be, y);
    } else {
        free(x);
        free(y);
    }
}

/* The current batch is invalidated; on error the old buffers stay. */
static int text_retarget(dl_source *s, dl_backend *be)
{
    text_source *t = (text_source *)s;
    size_t bytes = (size_t)t->batch * (size_t)t->T * 4;
    float *x = be ? be->ops->host_alloc(be, bytes) : malloc(bytes);
    int32_t *y = be ? be->ops->host_alloc(be, bytes) : malloc(bytes);
    if (!x || !y) {
        free_buffers(be, x, y);
        return dl_error(DL_ENOMEM, "%s: batch buffers (%zu bytes): %s", s->name, 2 * bytes,
                        be ? dl_error_message() : "malloc failed");
    }
    free_buffers(t->be, t->x, t->y);
    t->be = be;
    t->x = x;
    t->y = y;
    return DL_OK;
}

/* Closes what the source holds open in HDF5 (the lock taken here). */
static void close_h5(text_source *t)
{
    if (t->file <= 0 && t->ds <= 0)
        return;
    dl_hdf5_lock();
    if (t->mspace > 0)
        H5Sclose(t->mspace);
    if (t->fspace > 0)
        H5Sclose(t->fspace);
    if (t->ds > 0)
        H5Dclose(t->ds);
    if (t->file > 0)
        H5Fclose(t->file);
    dl_hdf5_unlock();
    t->file = t->ds = t->fspace = t->mspace = 0;
}

static void text_destroy(dl_source *s)
{
    text_source *t = (text_source *)s;
    close_h5(t);
    free_buffers(t->be, t->x, t->y);
    free(t->tok);
    free(t->win);
    free(t);
}

static const dl_source_ops text_ops = {
    .start_epoch = text_start_epoch,
    .next = text_next,
    .batches = text_batches,
    .stats = text_stats,
    .retarget = text_retarget,
    .destroy = text_destroy,
};

const char *dl_source_text_mode(const dl_source *s)
{
    if (!s || s->ops != &text_ops)
        return NULL;
    return ((const text_source *)s)->streaming ? "streaming" : "memory";
}

/* --- opening ---------------------------------------------------------------------- */

/* Every prefix of an absolute path names a link (the lock held). */
static int link_exists(hid_t f, const char *path)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++)
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (p > buf + 1 && H5Lexists(f, buf, H5P_DEFAULT) <= 0)
                return 0;
            *p = c;
            if (!c)
                return 1;
        }
}

/* group/tokens: 1-D unsigned 8 or 16 bits; its length into t->len. The
 * dataset is opened into t->ds (the lock held). */
static int open_tokens(text_source *t, const char *path, const char *group, char *dpath,
                       size_t size)
{
    if (group[0] != '/' || strlen(group) > 200)
        return dl_error(DL_EINVAL, "%s: group \"%s\": expected an absolute path like \"/train\"",
                        path, group);
    snprintf(dpath, size, "%s/tokens", strcmp(group, "/") ? group : "");
    if (!link_exists(t->file, group))
        return dl_error(DL_EINVAL, "%s: no group %s", path, group);
    if (!link_exists(t->file, dpath))
        return dl_error(DL_EINVAL, "%s: no dataset %s (not a text split)", path, dpath);
    int rc = DL_OK;
    hid_t sp = -1, ty = -1;
    hsize_t n = 0;
    DL_H5_CHECK(t->ds = H5Dopen2(t->file, dpath, H5P_DEFAULT), "%s: %s is not a dataset", path,
                dpath);
    DL_H5_CHECK(sp = H5Dget_space(t->ds), "%s:%s", path, dpath);
    DL_H5_CHECK(ty = H5Dget_type(t->ds), "%s:%s", path, dpath);
    if (H5Sget_simple_extent_ndims(sp) != 1 || H5Tget_class(ty) != H5T_INTEGER ||
        H5Tget_sign(ty) != H5T_SGN_NONE || H5Tget_size(ty) > 2) {
        rc = dl_error(DL_EINVAL, "%s:%s: expected a 1-D dataset of u8 or u16 token ids", path,
                      dpath);
        goto fail;
    }
    H5Sget_simple_extent_dims(sp, &n, NULL);
    t->len = (size_t)n;
fail:
    if (ty >= 0)
        H5Tclose(ty);
    if (sp >= 0)
        H5Sclose(sp);
    return rc;
}

/* Memory mode: every id read into t->tok (the lock held). */
static int read_all_tokens(text_source *t, const char *path, const char *dpath)
{
    int rc = DL_OK;
    if (!(t->tok = malloc((t->len ? t->len : 1) * sizeof *t->tok)))
        return dl_error(DL_ENOMEM, "%s:%s: out of memory for %zu tokens", path, dpath, t->len);
    if (t->len > 0)
        DL_H5_CHECK(H5Dread(t->ds, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->tok),
                    "%s: reading %s", path, dpath);
fail:
    return rc;
}

/* Chunk cache bytes for streaming: none for raw chunks (a window's bytes
 * are read directly instead of its whole chunk); 4 chunks when they are
 * compressed, which must be inflated whole (the lock held). */
static size_t stream_cache_bytes(hid_t ds)
{
    hid_t dcpl = H5Dget_create_plist(ds), ty = H5Dget_type(ds);
    hsize_t chunk = 0;
    size_t bytes = 0;
    if (dcpl >= 0 && H5Pget_nfilters(dcpl) > 0 && H5Pget_chunk(dcpl, 1, &chunk) == 1 && ty >= 0)
        bytes = 4 * (size_t)chunk * H5Tget_size(ty);
    if (ty >= 0)
        H5Tclose(ty);
    if (dcpl >= 0)
        H5Pclose(dcpl);
    return bytes;
}

/* Streaming: the dataset reopened with the chunk cache above, its space
 * and a [T + 1] memory space kept for the windows (the lock held). */
static int prepare_streaming(text_source *t, const char *path, const char *dpath, int T)
{
    int rc = DL_OK;
    hsize_t n = (hsize_t)T + 1;
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    DL_H5_CHECK(dapl, "%s:%s", path, dpath);
    H5Pset_chunk_cache(dapl, H5D_CHUNK_CACHE_NSLOTS_DEFAULT, stream_cache_bytes(t->ds),
                       H5D_CHUNK_CACHE_W0_DEFAULT);
    H5Dclose(t->ds);
    t->ds = H5Dopen2(t->file, dpath, dapl);
    H5Pclose(dapl);
    DL_H5_CHECK(t->ds, "%s: reopening %s", path, dpath);
    DL_H5_CHECK(t->fspace = H5Dget_space(t->ds), "%s:%s", path, dpath);
    DL_H5_CHECK(t->mspace = H5Screate_simple(1, &n, NULL), "%s:%s", path, dpath);
    if (!(t->win = malloc((size_t)n * sizeof *t->win)))
        rc = dl_error(DL_ENOMEM, "%s: out of memory", path);
fail:
    return rc;
}

static size_t default_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return (size_t)1 << 30;
    return (size_t)pages * (size_t)page / 2;
}

/* Context, ids below the vocabulary (memory mode), windows per epoch, info. */
static int check_split(text_source *t, const dl_text_options *o)
{
    const char *path = o->path, *g = o->group;
    if (o->context < 1)
        return dl_error(DL_EINVAL, "%s:%s: context %d, expected at least 1", path, g, o->context);
    if (t->len < (size_t)o->context + 1)
        return dl_error(DL_EINVAL,
                        "%s:%s: context %d is longer than the split allows: %zu tokens, a window "
                        "needs context + 1 = %d",
                        path, g, o->context, t->len, o->context + 1);
    for (size_t i = 0; t->tok && i < t->len; i++)
        if (t->tok[i] >= t->vocab)
            return dl_error(DL_EINVAL,
                            "%s:%s/tokens: id %u at position %zu is not below vocab_size %d", path,
                            g, t->tok[i], i, t->vocab);
    t->T = o->context;
    size_t fixed = (t->len - 1) / (size_t)t->T;
    t->windows = o->limit > 0 ? o->limit : fixed;
    if (!o->shuffle && t->windows > fixed)
        t->windows = fixed;
    dl_data_info *in = &t->base.info;
    int64_t T = t->T;
    in->sample = dl_shape_make(1, &T);
    in->x_dtype = DL_F32;
    in->y_dtype = DL_I32;
    in->y_width = t->T;
    in->classes = t->vocab;
    in->count = t->windows;
    in->scale = 1.0f;
    return DL_OK;
}

/* The vocabulary, then the split's tokens read whole or (streaming) the
 * dataset kept open. Takes and releases the lock; in memory mode the file
 * is closed again. */
static int load(text_source *t, const dl_text_options *o)
{
    DL_TRY(open_file(o->path, &t->file));
    dl_text_vocab v;
    memset(&v, 0, sizeof v);
    char dpath[300];
    int rc = read_vocab(&v, o->path, t->file);
    t->vocab = v.size;
    dl_text_vocab_done(&v);
    if (rc == DL_OK)
        rc = open_tokens(t, o->path, o->group, dpath, sizeof dpath);
    size_t budget = o->memory_budget ? o->memory_budget : default_budget();
    t->streaming =
        o->mode == DL_TEXT_STREAM || (o->mode == DL_TEXT_AUTO && t->len > budget / sizeof *t->tok);
    if (rc == DL_OK && t->streaming && o->context >= 1 && t->len > (size_t)o->context)
        rc = prepare_streaming(t, o->path, dpath, o->context);
    else if (rc == DL_OK && !t->streaming)
        rc = read_all_tokens(t, o->path, dpath);
    dl_hdf5_unlock();
    if (rc < 0 || !t->streaming)
        close_h5(t);
    return rc;
}

int dl_source_text(dl_source **out, const dl_text_options *o)
{
    *out = NULL;
    if (o->batch <= 0)
        return dl_error(DL_EINVAL, "%s: batch size %d, expected at least 1", o->path, o->batch);
    text_source *t = calloc(1, sizeof *t);
    if (!t)
        return dl_error(DL_ENOMEM, "%s: out of memory", o->path);
    t->base.ops = &text_ops;
    snprintf(t->base.name, sizeof t->base.name, "%s:%s", o->path, o->group);
    t->batch = o->batch;
    t->shuffle = o->shuffle;
    t->drop_last = o->drop_last;
    t->seed = o->seed;
    int rc = load(t, o);
    if (rc == DL_OK)
        rc = check_split(t, o);
    if (rc == DL_OK)
        rc = text_retarget(&t->base, o->be);
    if (rc < 0) {
        text_destroy(&t->base);
        return rc;
    }
    *out = &t->base;
    return DL_OK;
}
