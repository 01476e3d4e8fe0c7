/* h5write.c - writing a dlbench HDF5 data file: splits as chunked datasets with their attributes */
#include "engine/data/h5write.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/h5util.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif

/* The sum and the sum of squares of px[0..n), n <= 65536 (so that 32-bit
 * sums cannot overflow), exact. */
static void u8_sums(const uint8_t *px, size_t n, double *s, double *s2)
{
    uint32_t a = 0, a2 = 0;
    size_t p = 0;
#ifdef __AVX2__
    /* 32 bytes a step: sad against zero sums them in four 64-bit lanes,
     * madd of the widened bytes with themselves adds squares in pairs */
    __m256i zero = _mm256_setzero_si256(), sum = zero, sq = zero;
    for (; p + 32 <= n; p += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(px + p));
        sum = _mm256_add_epi64(sum, _mm256_sad_epu8(v, zero));
        __m256i lo = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(v));
        __m256i hi = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1));
        sq = _mm256_add_epi32(sq, _mm256_madd_epi16(lo, lo));
        sq = _mm256_add_epi32(sq, _mm256_madd_epi16(hi, hi));
    }
    uint64_t ls[4];
    uint32_t lq[8];
    _mm256_storeu_si256((__m256i *)ls, sum);
    _mm256_storeu_si256((__m256i *)lq, sq);
    for (int i = 0; i < 4; i++)
        a += (uint32_t)ls[i];
    for (int i = 0; i < 8; i++)
        a2 += lq[i];
#endif
    for (; p < n; p++) {
        a += px[p];
        a2 += (uint32_t)px[p] * px[p];
    }
    *s += (double)a;
    *s2 += (double)a2;
}

/* Per-channel mean and std of x * scale over d (channels = dim 0 of
 * [C, H, W] samples, else 1). Returns the channel count, 0 for too many. */
static int channel_stats(const dl_dataset *d, float *mean, float *std)
{
    const dl_data_info *in = &d->info;
    int ch = in->sample.ndim >= 3 ? (int)in->sample.dim[0] : 1;
    if (ch > DL_MAX_CHANNELS)
        return 0;
    size_t per = (size_t)dl_shape_numel(&in->sample), plane = per / (size_t)ch;
    for (int c = 0; c < ch; c++) {
        double s = 0, s2 = 0;
        for (size_t i = 0; i < in->count && in->x_dtype == DL_U8; i++) {
            /* u8 (images): exact integer sums, one plane at a time */
            const uint8_t *px = (const uint8_t *)d->x + i * per + (size_t)c * plane;
            for (size_t p0 = 0; p0 < plane; p0 += 65536)
                u8_sums(px + p0, plane - p0 < 65536 ? plane - p0 : 65536, &s, &s2);
        }
        for (size_t i = 0; i < in->count && in->x_dtype != DL_U8; i++)
            for (size_t p = 0; p < plane; p++) {
                size_t k = i * per + (size_t)c * plane + p;
                double v =
                    in->x_dtype == DL_I32 ? ((const int32_t *)d->x)[k] : ((const float *)d->x)[k];
                s += v;
                s2 += v * v;
            }
        double cnt = (double)in->count * (double)plane, m = s / cnt;
        double var = s2 / cnt - m * m;
        mean[c] = (float)(m * in->scale);
        std[c] = (float)(sqrt(var > 0 ? var : 0) * in->scale);
        if (!(std[c] > 0))
            std[c] = 1;
    }
    return ch;
}

/* The normalisation shared by every split: from /train. */
typedef struct norm {
    int channels;
    float mean[DL_MAX_CHANNELS], std[DL_MAX_CHANNELS];
} norm;

static int write_dataset(const char *path, const char *where, hid_t grp, const char *name,
                         dl_dtype dt, int rank, const hsize_t *dims, const void *data,
                         hsize_t chunk_rows, int gzip)
{
    hid_t mt = dt == DL_U8 ? H5T_NATIVE_UINT8 : dt == DL_I32 ? H5T_NATIVE_INT32 : H5T_NATIVE_FLOAT;
    hid_t ft = dt == DL_U8 ? H5T_STD_U8LE : dt == DL_I32 ? H5T_STD_I32LE : H5T_IEEE_F32LE;
    hsize_t chunk[H5S_MAX_RANK];
    memcpy(chunk, dims, sizeof(hsize_t) * (size_t)rank);
    chunk[0] = chunk_rows < dims[0] ? chunk_rows : dims[0];
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    DL_H5_TRY(DL_ERR, sp, "%s: writing %s", path, where);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, rank, chunk);
    H5Pset_obj_track_times(dcpl, 0); /* no timestamps: the same import gives the same bytes */
    if (gzip > 0) {
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, (unsigned)gzip);
    }
    hid_t ds = H5Dcreate2(grp, name, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    herr_t w = ds >= 0 ? H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : -1;
    if (ds >= 0)
        H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    DL_H5_TRY(DL_ERR, w, "%s: writing %s/%s", path, where, name);
    return DL_OK;
}

/* The split's x and y, chunked alike. */
static int write_xy(const char *path, const char *where, hid_t g, const dl_import_split *s,
                    long chunk_arg, int gzip)
{
    const dl_data_info *in = &s->d.info;
    hsize_t xd[DL_MAX_DIMS + 1] = {in->count}, yd[2] = {in->count, (hsize_t)in->y_width};
    for (int i = 0; i < in->sample.ndim; i++)
        xd[i + 1] = (hsize_t)in->sample.dim[i];
    size_t row = (size_t)dl_shape_numel(&in->sample) * dl_dtype_size(in->x_dtype);
    hsize_t chunk = chunk_arg > 0 ? (hsize_t)chunk_arg : (hsize_t)((1u << 20) / row);
    if (chunk == 0)
        chunk = 1;
    DL_TRY(write_dataset(path, where, g, "x", in->x_dtype, in->sample.ndim + 1, xd, s->d.x, chunk,
                         gzip));
    return write_dataset(path, where, g, "y", in->y_dtype, in->y_width > 1 ? 2 : 1, yd, s->d.y,
                         chunk, gzip);
}

#define ATTR(call) DL_H5_TRY(DL_ERR, call, "%s: writing %s", path, where)

/* The split's attributes: shape, count, scale, classes, names, statistics, sources. */
static int write_attrs(const char *path, const char *where, hid_t g, const dl_import *im,
                       const dl_import_split *s, const norm *nm)
{
    const dl_data_info *in = &s->d.info;
    int64_t shape[DL_MAX_DIMS], count = (int64_t)in->count;
    for (int i = 0; i < in->sample.ndim; i++)
        shape[i] = in->sample.dim[i];
    const char *srcs[DL_IMPORT_MAX_SOURCES], *shas[DL_IMPORT_MAX_SOURCES];
    for (int i = 0; i < s->nsrc; i++) {
        srcs[i] = s->src[i];
        shas[i] = s->sha[i];
    }
    ATTR(dl_h5_attr_write(g, "sample_shape", H5T_NATIVE_INT64, in->sample.ndim, shape));
    ATTR(dl_h5_attr_write(g, "count", H5T_NATIVE_INT64, 0, &count));
    ATTR(dl_h5_attr_write(g, "scale", H5T_NATIVE_FLOAT, 0, &in->scale));
    if (in->classes > 0)
        ATTR(dl_h5_attr_write(g, "classes", H5T_NATIVE_INT32, 0, &in->classes));
    if (im->nnames > 0)
        ATTR(dl_h5_attr_write_strings(g, "class_names", (const char *const *)im->names, im->nnames,
                                      H5T_CSET_UTF8));
    if (nm->channels > 0) {
        ATTR(dl_h5_attr_write(g, "mean", H5T_NATIVE_FLOAT, nm->channels, nm->mean));
        ATTR(dl_h5_attr_write(g, "std", H5T_NATIVE_FLOAT, nm->channels, nm->std));
    }
    if (s->nsrc > 0) {
        ATTR(dl_h5_attr_write_strings(g, "source", srcs, s->nsrc, H5T_CSET_UTF8));
        ATTR(dl_h5_attr_write_strings(g, "source_sha256", shas, s->nsrc, H5T_CSET_UTF8));
    }
    return DL_OK;
}

static int write_split(const char *path, hid_t file, const dl_import *im, const dl_import_split *s,
                       const norm *nm, long chunk, int gzip)
{
    char where[32];
    snprintf(where, sizeof where, "/%s", s->name);
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0);
    hid_t g = H5Gcreate2(file, where, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    DL_H5_TRY(DL_ERR, g, "%s: writing %s", path, where);
    int rc = write_xy(path, where, g, s, chunk, gzip);
    if (rc == DL_OK)
        rc = write_attrs(path, where, g, im, s, nm);
    H5Gclose(g);
    return rc;
}

/* The root attributes and every split (the HDF5 lock held). */
static int write_contents(const char *path, hid_t f, const dl_import *im, long chunk, int gzip)
{
    const char *where = "/";
    norm nm = {0};
    for (int i = 0; i < im->nsplits; i++)
        if (!strcmp(im->sp[i].name, "train"))
            nm.channels = channel_stats(&im->sp[i].d, nm.mean, nm.std);
    ATTR(dl_h5_attr_write_string(f, "format", "dlbench-data 1", H5T_CSET_UTF8));
    ATTR(dl_h5_attr_write_string(f, "created_by", "dlbench import", H5T_CSET_UTF8));
    ATTR(dl_h5_attr_write_string(f, "origin", im->origin, H5T_CSET_UTF8));
    for (int i = 0; i < im->nsplits; i++)
        DL_TRY(write_split(path, f, im, &im->sp[i], &nm, chunk, gzip));
    return DL_OK;
}

int dl_h5write_import(const char *path, const dl_import *im, long chunk, int gzip)
{
    dl_hdf5_lock();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        int rc = dl_h5_fail(DL_ERR, __FILE__, __LINE__, "H5Fcreate", "%s: writing /", path);
        dl_hdf5_unlock();
        return rc;
    }
    int rc = write_contents(path, f, im, chunk, gzip);
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
