/* import_text.c - `dlbench import --text`: files gathered and read, token ids, per-file tail split, the HDF5 file */
#include "engine/data/import_text.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/base/h5util.h"
#include "engine/base/sha256.h"
#include "engine/data/text.h"

#define MAX_CP 0x110000u

typedef struct tfile {
    char *path;
    dev_t dev;
    ino_t ino;
    size_t size;     /* bytes on disk when gathered */
    size_t off, len; /* its bytes in the text buffer, the added newline included */
    size_t ntok;     /* its tokens */
    char sha[65];
} tfile;

typedef struct corpus {
    tfile *f;
    int nf, cap;
    size_t total; /* bytes on disk, for the progress */
    unsigned char *text;
    size_t len, tcap;
    uint16_t *ids; /* [tokens] */
    size_t tokens;
    uint32_t *cp; /* chars: [nvocab] the code points in id order */
    int nvocab;
    uint16_t *train, *test;
    size_t ntrain, ntest;
} corpus;

static void corpus_done(corpus *c)
{
    for (int i = 0; i < c->nf; i++)
        free(c->f[i].path);
    free(c->f);
    free(c->text);
    free(c->ids);
    free(c->cp);
    free(c->train);
    free(c->test);
    memset(c, 0, sizeof *c);
}

/* --- gathering the files ------------------------------------------------------ */

/* Adds path (a regular file, st its stat) unless the same file is already taken. */
static int add_file(corpus *c, const char *path, const struct stat *st)
{
    for (int i = 0; i < c->nf; i++)
        if (c->f[i].dev == st->st_dev && c->f[i].ino == st->st_ino)
            return DL_OK; /* a symlink or hard link to a file already taken */
    if (c->nf == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        tfile *f = realloc(c->f, (size_t)cap * sizeof *f);
        if (!f)
            return dl_error(DL_ENOMEM, "out of memory for the file list");
        c->f = f;
        c->cap = cap;
    }
    tfile *t = &c->f[c->nf];
    memset(t, 0, sizeof *t);
    if (!(t->path = strdup(path)))
        return dl_error(DL_ENOMEM, "out of memory for the file list");
    t->dev = st->st_dev;
    t->ino = st->st_ino;
    t->size = (size_t)st->st_size;
    c->total += t->size;
    c->nf++;
    return DL_OK;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Not a dot-file, not a fortune index (*.dat). */
static int wanted(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return e->d_name[0] != '.' && !(n >= 4 && !strcmp(e->d_name + n - 4, ".dat"));
}

/* The folder's regular files (symlinks followed), sorted by name. */
static int add_dir(corpus *c, const char *dir)
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, wanted, by_name), before = c->nf, rc = DL_OK;
    if (n < 0)
        return dl_error(DL_EIO, "%s: cannot read the folder: %s", dir, strerror(errno));
    for (int i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        int len = snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (rc == DL_OK && len < (int)sizeof path && stat(path, &st) == 0 && S_ISREG(st.st_mode))
            rc = add_file(c, path, &st);
        free(names[i]);
    }
    free(names);
    if (rc == DL_OK && c->nf == before)
        rc = dl_error(DL_EINVAL,
                      "%s: no text files in the folder (it takes regular files, not "
                      "sub-folders, dot-files or *.dat)",
                      dir);
    return rc;
}

static int gather(corpus *c, const char *const *paths, int n)
{
    if (n < 1)
        return dl_error(DL_EINVAL, "no text files given");
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0)
            return dl_error(errno == ENOENT ? DL_EINVAL : DL_EIO, "%s: %s", paths[i],
                            errno == ENOENT ? "no such file or folder" : strerror(errno));
        if (S_ISDIR(st.st_mode))
            DL_TRY(add_dir(c, paths[i]));
        else if (S_ISREG(st.st_mode))
            DL_TRY(add_file(c, paths[i], &st));
        else
            return dl_error(DL_EINVAL, "%s: not a regular file or a folder", paths[i]);
    }
    return DL_OK;
}

/* --- reading -------------------------------------------------------------------- */

static int reserve(corpus *c, size_t more)
{
    if (c->len + more <= c->tcap)
        return DL_OK;
    size_t cap = c->tcap ? c->tcap : ((size_t)1 << 20);
    while (cap < c->len + more)
        cap *= 2;
    unsigned char *t = realloc(c->text, cap);
    if (!t)
        return dl_error(DL_ENOMEM, "out of memory for %zu bytes of text", c->len + more);
    c->text = t;
    c->tcap = cap;
    return DL_OK;
}

/* Appends the file's bytes (plus a newline when it lacks one), its SHA-256. */
static int read_file(corpus *c, tfile *t)
{
    int fd = open(t->path, O_RDONLY);
    if (fd < 0)
        return dl_error(DL_EIO, "%s: cannot open: %s", t->path, strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? reserve(c, (size_t)st.st_size + 1)
                                 : dl_error(DL_EIO, "%s: %s", t->path, strerror(errno));
    size_t got = 0;
    while (rc == DL_OK) {
        if (c->len + got + 1 >= c->tcap && (rc = reserve(c, got + 4096)) < 0)
            break;
        ssize_t r = read(fd, c->text + c->len + got, c->tcap - c->len - got - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = dl_error(DL_EIO, "%s: cannot read: %s", t->path, strerror(errno));
        else if (r == 0)
            break;
        else
            got += (size_t)r;
    }
    close(fd);
    DL_TRY(rc);
    unsigned char *p = c->text + c->len, *nul = memchr(p, 0, got);
    if (got == 0)
        return dl_error(DL_EINVAL, "%s: empty file (no text)", t->path);
    if (nul)
        return dl_error(DL_EINVAL, "%s: not a text file: a NUL byte at byte offset %zu", t->path,
                        (size_t)(nul - p));
    uint8_t dg[32];
    dl_sha256_buffer(p, got, dg);
    dl_sha256_hex(dg, t->sha);
    if (p[got - 1] != '\n')
        p[got++] = '\n';
    t->off = c->len;
    t->len = got;
    c->len += got;
    return DL_OK;
}

static int read_all(corpus *c, const dl_text_import_options *o)
{
    for (int i = 0; i < c->nf; i++) {
        DL_TRY(read_file(c, &c->f[i]));
        if (o->progress)
            o->progress(o->progress_ctx, "reading", c->len, c->total);
    }
    return DL_OK;
}

/* --- token ids ---------------------------------------------------------------------- */

static int tokens_bytes(corpus *c)
{
    if (!(c->ids = malloc(c->len * sizeof *c->ids)))
        return dl_error(DL_ENOMEM, "out of memory for %zu tokens", c->len);
    for (size_t i = 0; i < c->len; i++)
        c->ids[i] = c->text[i];
    for (int i = 0; i < c->nf; i++)
        c->f[i].ntok = c->f[i].len;
    c->tokens = c->len;
    c->nvocab = 256;
    return DL_OK;
}

/* Pass 1 of chars: every file valid UTF-8; the code points seen into a bitmap. */
static int scan_chars(corpus *c, uint8_t *seen)
{
    for (int i = 0; i < c->nf; i++) {
        tfile *t = &c->f[i];
        const unsigned char *p = c->text + t->off;
        for (size_t k = 0; k < t->len;) {
            uint32_t cp;
            int l = dl_utf8_decode(p + k, t->len - k, &cp);
            if (l == 0)
                return dl_error(DL_EINVAL,
                                "%s: not UTF-8 text: invalid byte 0x%02x at byte offset %zu "
                                "(--vocab bytes takes any bytes)",
                                t->path, p[k], k);
            seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
            t->ntok++;
            k += (size_t)l;
        }
        c->tokens += t->ntok;
    }
    return DL_OK;
}

/* The vocabulary (code points seen, ascending) and pass 2: the ids. */
static int map_chars(corpus *c, const uint8_t *seen, uint16_t *id_of)
{
    int n = 0;
    for (uint32_t cp = 0; cp < MAX_CP; cp++)
        n += seen[cp >> 3] >> (cp & 7) & 1;
    if (n > DL_TEXT_MAX_VOCAB)
        return dl_error(DL_EINVAL,
                        "%d distinct characters: at most %d fit u16 ids (--vocab bytes "
                        "has 256)",
                        n, DL_TEXT_MAX_VOCAB);
    c->cp = malloc((size_t)n * sizeof *c->cp);
    c->ids = malloc(c->tokens * sizeof *c->ids + 1);
    if (!c->cp || !c->ids)
        return dl_error(DL_ENOMEM, "out of memory for %zu tokens", c->tokens);
    for (uint32_t cp = 0; cp < MAX_CP; cp++)
        if (seen[cp >> 3] >> (cp & 7) & 1) {
            id_of[cp] = (uint16_t)c->nvocab;
            c->cp[c->nvocab++] = cp;
        }
    size_t k = 0;
    for (size_t i = 0; i < c->len;) {
        uint32_t cp = 0;
        i += (size_t)dl_utf8_decode(c->text + i, c->len - i, &cp);
        c->ids[k++] = id_of[cp];
    }
    return DL_OK;
}

static int tokens_chars(corpus *c)
{
    uint8_t *seen = calloc(MAX_CP / 8, 1);
    uint16_t *id_of = malloc(MAX_CP * sizeof *id_of);
    int rc = seen && id_of ? DL_OK : dl_error(DL_ENOMEM, "out of memory for the vocabulary");
    if (rc == DL_OK)
        rc = scan_chars(c, seen);
    if (rc == DL_OK)
        rc = map_chars(c, seen, id_of);
    free(seen);
    free(id_of);
    return rc;
}

/* /test: the last round(F * n) tokens of each file, in file order; /train the rest. */
static int split(corpus *c, double fraction)
{
    c->train = malloc(c->tokens * sizeof *c->train + 1);
    c->test = malloc(c->tokens * sizeof *c->test + 1);
    if (!c->train || !c->test)
        return dl_error(DL_ENOMEM, "out of memory for %zu tokens", c->tokens);
    size_t at = 0;
    for (int i = 0; i < c->nf; i++) {
        size_t n = c->f[i].ntok, tail = (size_t)llround(fraction * (double)n);
        memcpy(c->train + c->ntrain, c->ids + at, (n - tail) * sizeof *c->ids);
        memcpy(c->test + c->ntest, c->ids + at + n - tail, tail * sizeof *c->ids);
        c->ntrain += n - tail;
        c->ntest += tail;
        at += n;
    }
    if (c->ntrain < 2 || c->ntest < 2)
        return dl_error(DL_EINVAL,
                        "--val-fraction %g of %zu tokens leaves /%s with %zu: a split needs at "
                        "least 2 tokens (one window of context 1)",
                        fraction, c->tokens, c->ntest < 2 ? "test" : "train",
                        c->ntest < 2 ? c->ntest : c->ntrain);
    return DL_OK;
}

/* --- writing ---------------------------------------------------------------------- */

#define ATTR(call) DL_H5_TRY(DL_ERR, call, "%s: writing the attributes of /", path)

/* "SHA-256  path" a line, as sha256sum prints them (malloc'd). */
static char *sources_text(const corpus *c)
{
    size_t n = 1;
    for (int i = 0; i < c->nf; i++)
        n += strlen(c->f[i].path) + 68;
    char *s = malloc(n), *p = s;
    for (int i = 0; s && i < c->nf; i++)
        p += sprintf(p, "%s  %s\n", c->f[i].sha, c->f[i].path);
    if (s)
        *p = 0;
    return s;
}

static int write_root(const char *path, hid_t f, const corpus *c, const char *origin, int chars)
{
    int64_t n[5] = {c->nf, (int64_t)c->tokens, (int64_t)c->ntrain, (int64_t)c->ntest, 0};
    int32_t vs = c->nvocab;
    ATTR(dl_h5_attr_write_string(f, "format", "dlbench-text 1", H5T_CSET_UTF8));
    ATTR(dl_h5_attr_write_string(f, "created_by", "dlbench import --text", H5T_CSET_UTF8));
    ATTR(dl_h5_attr_write_string(f, "origin", origin, H5T_CSET_UTF8));
    ATTR(dl_h5_attr_write_string(f, "kind", "text", H5T_CSET_UTF8));
    ATTR(dl_h5_attr_write_string(f, "vocab_kind", chars ? "chars" : "bytes", H5T_CSET_UTF8));
    ATTR(dl_h5_attr_write(f, "vocab_size", H5T_NATIVE_INT32, 0, &vs));
    ATTR(dl_h5_attr_write(f, "files", H5T_NATIVE_INT64, 0, &n[0]));
    ATTR(dl_h5_attr_write(f, "tokens", H5T_NATIVE_INT64, 0, &n[1]));
    ATTR(dl_h5_attr_write(f, "train_tokens", H5T_NATIVE_INT64, 0, &n[2]));
    ATTR(dl_h5_attr_write(f, "test_tokens", H5T_NATIVE_INT64, 0, &n[3]));
    char *src = sources_text(c);
    if (!src)
        return dl_error(DL_ENOMEM, "out of memory for the sources attribute");
    int w = dl_h5_attr_write_string(f, "sources", src, H5T_CSET_UTF8);
    free(src);
    ATTR(w);
    if (!chars)
        return DL_OK;
    char *v = malloc((size_t)c->nvocab * 4 + 1), *p = v;
    if (!v)
        return dl_error(DL_ENOMEM, "out of memory for the vocab attribute");
    for (int i = 0; i < c->nvocab; i++)
        p += dl_utf8_encode(c->cp[i], p);
    *p = 0;
    w = dl_h5_attr_write_string(f, "vocab", v, H5T_CSET_UTF8);
    free(v);
    ATTR(w);
    return DL_OK;
}

/* /NAME/tokens: u8 or u16, chunks of 1 Mi tokens, optionally compressed. */
static int write_split(const char *path, hid_t f, const char *name, const uint16_t *ids, size_t n,
                       int u8, int gzip)
{
    char where[64];
    snprintf(where, sizeof where, "/%s/tokens", name);
    hsize_t dim = n, chunk = n < ((size_t)1 << 20) ? n : ((size_t)1 << 20);
    hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    DL_H5_TRY(DL_ERR, g, "%s: writing /%s", path, name);
    hid_t sp = H5Screate_simple(1, &dim, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    if (gzip > 0) {
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, (unsigned)gzip);
    }
    hid_t ds = H5Dcreate2(g, "tokens", u8 ? H5T_STD_U8LE : H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl,
                          H5P_DEFAULT);
    herr_t w = ds >= 0 ? H5Dwrite(ds, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, ids) : -1;
    if (ds >= 0)
        H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Gclose(g);
    DL_H5_TRY(DL_ERR, w, "%s: writing %s", path, where);
    return DL_OK;
}

/* The whole file at path (created or truncated), flushed to disk. */
static int write_file(const char *path, const corpus *c, const char *origin, int chars, int gzip)
{
    dl_hdf5_lock();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        int rc = dl_h5_fail(DL_ERR, __FILE__, __LINE__, "H5Fcreate", "%s: creating", path);
        dl_hdf5_unlock();
        return rc;
    }
    int u8 = c->nvocab <= 256;
    int rc = write_root(path, f, c, origin, chars);
    if (rc == DL_OK)
        rc = write_split(path, f, "train", c->train, c->ntrain, u8, gzip);
    if (rc == DL_OK)
        rc = write_split(path, f, "test", c->test, c->ntest, u8, gzip);
    if (H5Fclose(f) < 0 && rc == DL_OK) {
        char why[256];
        rc = dl_error(DL_ERR, "%s: closing: %s", path, dl_hdf5_error_text(why, sizeof why));
    }
    dl_hdf5_unlock();
    if (rc == DL_OK) {
        int fd = open(path, O_RDONLY);
        if (fd < 0 || fsync(fd) != 0)
            rc = dl_error(DL_ERR, "%s: flushing to disk: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return rc;
}

/* Through a temporary file (dl_fs_tmp_name), committed over out when whole. */
static int write_atomic(const char *out, const corpus *c, const char *const *paths, int n,
                        const dl_text_import_options *o)
{
    char tmp[4200], origin[1100];
    DL_TRY(dl_fs_tmp_name(out, tmp, sizeof tmp));
    int len = snprintf(origin, sizeof origin, "text (%s): %d files from",
                       o->chars ? "chars" : "bytes", c->nf);
    for (int i = 0; i < n && len < (int)sizeof origin; i++)
        len += snprintf(origin + len, sizeof origin - (size_t)len, " %s", paths[i]);
    if (o->progress)
        o->progress(o->progress_ctx, "writing", c->len, c->total);
    int rc = write_file(tmp, c, origin, o->chars, o->gzip);
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    return dl_fs_commit(tmp, out);
}

int dl_import_text(const char *const *paths, int n, const char *out,
                   const dl_text_import_options *o, dl_text_import_summary *sum)
{
    memset(sum, 0, sizeof *sum);
    if (!(o->val_fraction > 0 && o->val_fraction < 1))
        return dl_error(DL_EINVAL, "--val-fraction %g: expected a number in (0, 1)",
                        o->val_fraction);
    corpus c;
    memset(&c, 0, sizeof c);
    int rc = gather(&c, paths, n);
    if (rc == DL_OK)
        rc = read_all(&c, o);
    if (rc == DL_OK)
        rc = o->chars ? tokens_chars(&c) : tokens_bytes(&c);
    if (rc == DL_OK)
        rc = split(&c, o->val_fraction);
    if (rc == DL_OK)
        rc = write_atomic(out, &c, paths, n, o);
    if (rc == DL_OK) {
        sum->tokens = c.tokens;
        sum->train = c.ntrain;
        sum->test = c.ntest;
        sum->vocab = c.nvocab;
        sum->files = c.nf;
        sum->chars = o->chars;
        sum->bytes = (double)c.total;
    }
    corpus_done(&c);
    return rc;
}
