/* open.c - opening the training and validation sources a dl_data_desc describes */
#include "engine/data/open.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/h5util.h"
#include "engine/base/sha256.h"
#include "engine/data/h5data.h"
#include "engine/data/synthetic.h"
#include "engine/data/text.h"

static int file_exists(const char *p)
{
    FILE *f = fopen(p, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

static int open_hdf5(const dl_data_desc *d, int batch, uint64_t seed, dl_backend *be,
                     dl_source **train, dl_source **val, char *fp, size_t fp_size)
{
    if (!file_exists(d->path))
        return dl_error(DL_EINVAL,
                        "%s: data file not found: run `make run` (it prepares "
                        "data/fashion-mnist.h5) or `dlbench import SRC %s`",
                        d->path, d->path);
    dl_hdf5_options o;
    dl_hdf5_options_init(&o);
    o.path = d->path;
    o.batch = batch;
    o.shuffle = d->shuffle;
    o.drop_last = d->drop_last;
    o.seed = seed;
    o.workers = d->workers;
    o.prefetch = d->prefetch;
    o.scale = d->scale;
    o.be = be;
    o.mode = (dl_hdf5_mode)d->mode;
    o.memory_budget = d->memory_budget > 0 ? (size_t)d->memory_budget : 0;
    o.shuffle_window = d->shuffle_window > 0 ? (size_t)d->shuffle_window : 0;
    if (d->x_name[0])
        o.x_name = d->x_name;
    if (d->y_name[0])
        o.y_name = d->y_name;
    o.crop_pad = d->crop_pad;
    o.hflip = d->hflip;
    if (d->channels > 0) {
        o.normalize = 1;
        o.channels = d->channels;
        memcpy(o.mean, d->mean, sizeof o.mean);
        memcpy(o.std, d->std, sizeof o.std);
    }
    o.group = d->train;
    o.limit = d->limit > 0 ? (size_t)d->limit : 0;
    DL_TRY(dl_source_hdf5(train, &o));
    if (d->val[0]) {
        o.group = d->val;
        o.shuffle = 0;
        o.drop_last = 0;
        o.crop_pad = 0; /* validation sees the images as they are */
        o.hflip = 0;
        o.limit = d->val_limit > 0 ? (size_t)d->val_limit : 0;
        DL_TRY(dl_source_hdf5(val, &o));
    }
    char hex[65];
    DL_TRY(dl_sha256_file(d->path, hex));
    snprintf(fp, fp_size, "hdf5:%s:%s:%s:train=%zu:val=%zu:sha256=%s", d->path, d->train, d->val,
             (*train)->info.count, *val ? (*val)->info.count : (size_t)0, hex);
    return DL_OK;
}

/* A token file's two splits: random windows for training, the fixed
 * windows in order for validation. */
static int open_text(const dl_data_desc *d, int batch, uint64_t seed, dl_backend *be,
                     dl_source **train, dl_source **val, char *fp, size_t fp_size)
{
    if (!file_exists(d->path))
        return dl_error(DL_EINVAL,
                        "%s: text file not found: make it with `dlbench import --text "
                        "FILE|DIR... %s`",
                        d->path, d->path);
    dl_text_options o = {.path = d->path,
                         .group = d->train,
                         .context = d->context,
                         .batch = batch,
                         .shuffle = d->shuffle,
                         .drop_last = d->drop_last,
                         .seed = seed,
                         .limit = d->limit > 0 ? (size_t)d->limit : 0,
                         .be = be};
    DL_TRY(dl_source_text(train, &o));
    if (d->val[0]) {
        o.group = d->val;
        o.shuffle = 0;
        o.drop_last = 0;
        o.limit = d->val_limit > 0 ? (size_t)d->val_limit : 0;
        DL_TRY(dl_source_text(val, &o));
    }
    char hex[65];
    DL_TRY(dl_sha256_file(d->path, hex));
    snprintf(fp, fp_size, "text:%s:%s:%s:context=%d:vocab=%d:train=%zu:val=%zu:sha256=%s", d->path,
             d->train, d->val, d->context, (*train)->info.classes, (*train)->info.count,
             *val ? (*val)->info.count : (size_t)0, hex);
    return DL_OK;
}

/* Fashion-MNIST or synthetic data into tr and (when asked) va; *have_val
 * says whether va was filled. fp receives the generator's description. */
static int load_memory(const dl_data_desc *d, dl_dataset *tr, dl_dataset *va, int *have_val,
                       char *fp, size_t fp_size)
{
    *have_val = 0;
    if (d->kind == DL_DATA_FASHION_MNIST) {
        snprintf(fp, fp_size, "fashion-mnist:%s", d->path);
        DL_TRY(dl_dataset_load_fashion_mnist(tr, d->path, "train"));
        if (d->val[0]) {
            DL_TRY(dl_dataset_load_fashion_mnist(va, d->path, "t10k"));
            *have_val = 1;
        }
        return DL_OK;
    }
    snprintf(fp, fp_size, "synthetic:%s:classes=%d:noise=%g:seed=%llu", d->synth, d->classes,
             d->noise, (unsigned long long)d->data_seed);
    DL_TRY(dl_dataset_synthetic(tr, d->synth, (size_t)d->n, d->classes, (float)d->noise,
                                d->data_seed));
    if (d->n_val > 0) {
        DL_TRY(dl_dataset_synthetic(va, d->synth, (size_t)d->n_val, d->classes, (float)d->noise,
                                    d->data_seed + 1));
        *have_val = 1;
    }
    return DL_OK;
}

/* limit, scale and mean/std of the description applied to ds. */
static void apply_desc(const dl_data_desc *d, dl_dataset *ds, long limit)
{
    if (limit > 0)
        dl_dataset_truncate(ds, (size_t)limit);
    if (d->scale > 0)
        ds->info.scale = d->scale;
    if (d->channels > 0) {
        ds->info.channels = d->channels;
        memcpy(ds->info.mean, d->mean, sizeof ds->info.mean);
        memcpy(ds->info.std, d->std, sizeof ds->info.std);
    }
}

/* Appends ":train=N:val=M:sha256=..." of the samples actually used, as
 * loaded: independent of compression. va may be NULL. */
static void fingerprint_memory(const dl_dataset *tr, const dl_dataset *va, char *fp, size_t fp_size)
{
    dl_sha256 c;
    dl_sha256_init(&c);
    const dl_dataset *sets[2] = {tr, va};
    for (int i = 0; i < 2; i++) {
        const dl_dataset *ds = sets[i];
        if (!ds)
            continue;
        size_t n = ds->info.count;
        dl_sha256_update(&c, ds->x,
                         n * (size_t)dl_shape_numel(&ds->info.sample) *
                             dl_dtype_size(ds->info.x_dtype));
        dl_sha256_update(&c, ds->y,
                         n * (size_t)(ds->info.y_width > 0 ? ds->info.y_width : 1) *
                             dl_dtype_size(ds->info.y_dtype));
    }
    uint8_t dg[32];
    char hex[65];
    dl_sha256_final(&c, dg);
    dl_sha256_hex(dg, hex);
    size_t l = strlen(fp);
    snprintf(fp + l, fp_size - l, ":train=%zu:val=%zu:sha256=%s", tr->info.count,
             va ? va->info.count : (size_t)0, hex);
}

static int open_memory(const dl_data_desc *d, int batch, uint64_t seed, dl_backend *be,
                       dl_source **train, dl_source **val, char *fp, size_t fp_size)
{
    dl_dataset tr = {0}, va = {0};
    int have_val;
    int rc = load_memory(d, &tr, &va, &have_val, fp, fp_size);
    if (rc == DL_OK) {
        apply_desc(d, &tr, d->limit);
        if (have_val)
            apply_desc(d, &va, d->val_limit);
        fingerprint_memory(&tr, have_val ? &va : NULL, fp, fp_size);
        rc = dl_source_memory_own(train, &tr, batch, d->shuffle, d->drop_last, seed);
    }
    if (rc == DL_OK && have_val)
        rc = dl_source_memory_own(val, &va, batch, 0, 0, seed);
    dl_dataset_done(&tr);
    dl_dataset_done(&va);
    if (rc == DL_OK && be) {
        rc = (*train)->ops->retarget(*train, be);
        if (rc == DL_OK && *val)
            rc = (*val)->ops->retarget(*val, be);
    }
    return rc;
}

int dl_data_open(const dl_data_desc *d, int batch, uint64_t seed, dl_backend *be, dl_source **train,
                 dl_source **val, char *fp, size_t fp_size)
{
    *train = *val = NULL;
    int rc = d->kind == DL_DATA_HDF5   ? open_hdf5(d, batch, seed, be, train, val, fp, fp_size)
             : d->kind == DL_DATA_TEXT ? open_text(d, batch, seed, be, train, val, fp, fp_size)
                                       : open_memory(d, batch, seed, be, train, val, fp, fp_size);
    if (rc == DL_OK && d->flatten) {
        dl_source *srcs[2] = {*train, *val};
        for (int i = 0; i < 2; i++)
            if (srcs[i]) {
                int64_t n = dl_shape_numel(&srcs[i]->info.sample);
                srcs[i]->info.sample = dl_shape_make(1, &n);
            }
    }
    if (rc < 0) {
        dl_source_destroy(*train);
        dl_source_destroy(*val);
        *train = *val = NULL;
    }
    return rc;
}

static int read_names(hid_t g, char **buf, size_t *len)
{
    if (H5Aexists(g, "class_names") <= 0)
        return 0;
    hid_t a = H5Aopen(g, "class_names", H5P_DEFAULT);
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1;
    int n = 0;
    if (ft >= 0 && sp >= 0 && H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft) &&
        H5Sget_simple_extent_ndims(sp) == 1) {
        hsize_t count;
        H5Sget_simple_extent_dims(sp, &count, NULL);
        size_t w = H5Tget_size(ft);
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, w);
        H5Tset_cset(mt, H5Tget_cset(ft));
        char *b = count > 0 && count <= 100000 ? calloc(count, w + 1) : NULL;
        char *tmp = b ? calloc(count, w) : NULL;
        if (tmp && H5Aread(a, mt, tmp) >= 0) {
            for (hsize_t i = 0; i < count; i++) /* each name NUL-terminated */
                memcpy(b + i * (w + 1), tmp + i * w, w);
            *buf = b;
            *len = w + 1;
            n = (int)count;
            b = NULL;
        }
        free(tmp);
        free(b);
        H5Tclose(mt);
    }
    if (sp >= 0)
        H5Sclose(sp);
    if (ft >= 0)
        H5Tclose(ft);
    if (a >= 0)
        H5Aclose(a);
    return n;
}

int dl_data_class_names(const char *path, const char *group, char **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    if (!file_exists(path))
        return 0;
    dl_hdf5_lock();
    int n = 0;
    if (H5Fis_hdf5(path) > 0) {
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t g =
            f >= 0 && H5Lexists(f, group, H5P_DEFAULT) > 0 ? H5Gopen2(f, group, H5P_DEFAULT) : -1;
        if (g >= 0) {
            n = read_names(g, buf, len);
            H5Gclose(g);
        }
        if (f >= 0)
            H5Fclose(f);
    }
    H5Eclear2(H5E_DEFAULT);
    dl_hdf5_unlock();
    return n;
}
