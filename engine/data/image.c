/* image.c - PNG and JPEG decoding to u8 HWC, grey/RGB conversion, area resize and centre crop */
#include "engine/data/image.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef __SSSE3__
#include <immintrin.h>
#endif

/* after stdio.h, which jpeglib.h needs */
#include <jerror.h>
#include <jpeglib.h>

#include "engine/base/error.h"
#include "engine/base/sha256.h"

void dl_image_done(dl_image *img)
{
    free(img->px);
    memset(img, 0, sizeof *img);
}

const char *dl_image_format(const void *data, size_t n)
{
    const uint8_t *p = data;
    if (n >= 8 && !png_sig_cmp(p, 0, 8))
        return "png";
    if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
        return "jpeg";
    return NULL;
}

static int alloc_pixels(dl_image *img, int w, int h, int c, const char *name)
{
    if (w <= 0 || h <= 0 || w > DL_IMAGE_MAX_SIDE || h > DL_IMAGE_MAX_SIDE)
        return dl_error(DL_EINVAL, "%s: %dx%d pixels, expected sides in 1..%d", name, w, h,
                        DL_IMAGE_MAX_SIDE);
    img->px = malloc((size_t)w * (size_t)h * (size_t)c);
    if (!img->px)
        return dl_error(DL_ENOMEM, "%s: out of memory for %dx%d pixels", name, w, h);
    img->width = w;
    img->height = h;
    img->channels = c;
    return DL_OK;
}

/* ---- PNG ---- */

typedef struct png_src {
    const uint8_t *p;
    size_t n, at;
    char msg[200];
} png_src;

static void png_read_mem(png_structp png, png_bytep out, size_t len)
{
    png_src *m = png_get_io_ptr(png);
    if (len > m->n - m->at)
        png_error(png, "the file ends early (truncated)");
    memcpy(out, m->p + m->at, len);
    m->at += len;
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_src *m = png_get_error_ptr(png);
    snprintf(m->msg, sizeof m->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* warnings (an sRGB profile, a bad text chunk) do not spoil the pixels */
}

/* The transformations to 8-bit grey or RGB without alpha. */
static void png_to_8bit(png_structp png, png_infop info)
{
    int ct = png_get_color_type(png, info), bd = png_get_bit_depth(png, info);
    if (bd == 16)
        png_set_strip_16(png); /* the high byte, as Pillow */
    if (ct == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && bd < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (ct & PNG_COLOR_MASK_ALPHA)
        png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
}

static int decode_png(dl_image *img, const void *data, size_t n, const char *name)
{
    png_src m = {data, n, 0, "unknown error"};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &m, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return dl_error(DL_ENOMEM, "%s: out of memory for the PNG decoder", name);
    }
    png_bytep *volatile rows = NULL;
    volatile int rc = DL_OK;
    if (setjmp(png_jmpbuf(png))) {
        free(rows);
        dl_image_done(img);
        png_destroy_read_struct(&png, &info, NULL);
        return rc < 0 ? rc : dl_error(DL_EINVAL, "%s: PNG: %s", name, m.msg);
    }
    png_set_read_fn(png, &m, png_read_mem);
    png_set_user_limits(png, DL_IMAGE_MAX_SIDE, DL_IMAGE_MAX_SIDE);
    png_read_info(png, info);
    png_to_8bit(png, info);
    int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    int c = png_get_channels(png, info);
    if (c != 1 && c != 3)
        png_error(png, "unexpected channel count after conversion");
    if ((rc = alloc_pixels(img, w, h, c, name)) < 0)
        png_longjmp(png, 1);
    rows = malloc(sizeof *rows * (size_t)h);
    if (!rows) {
        rc = dl_error(DL_ENOMEM, "%s: out of memory", name);
        png_longjmp(png, 1);
    }
    for (int y = 0; y < h; y++)
        rows[y] = img->px + (size_t)y * (size_t)w * (size_t)c;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    return DL_OK;
}

/* ---- JPEG ---- */

typedef struct jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr c)
{
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

/* Warnings: only a premature end spoils the image (the rest is grey). */
static void jpeg_on_message(j_common_ptr c, int level)
{
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF)
        jpeg_on_error(c);
}

static int decode_jpeg(dl_image *img, const void *data, size_t n, const char *name)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_err e;
    cinfo.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = jpeg_on_error;
    e.pub.emit_message = jpeg_on_message;
    snprintf(e.msg, sizeof e.msg, "unknown error");
    volatile int rc = DL_OK;
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&cinfo);
        dl_image_done(img);
        return rc < 0 ? rc : dl_error(DL_EINVAL, "%s: JPEG: %s", name, e.msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, (const unsigned char *)data, (unsigned long)n);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&cinfo);
        return dl_error(DL_EINVAL, "%s: JPEG: CMYK is not supported", name);
    }
    cinfo.out_color_space = cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    int w = (int)cinfo.output_width, h = (int)cinfo.output_height, c = cinfo.output_components;
    if ((rc = alloc_pixels(img, w, h, c, name)) < 0)
        longjmp(e.jb, 1);
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = img->px + (size_t)cinfo.output_scanline * (size_t)w * (size_t)c;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return DL_OK;
}

int dl_image_decode(dl_image *img, const void *data, size_t n, const char *name)
{
    const char *f = dl_image_format(data, n);
    if (!f)
        return dl_error(DL_EINVAL, "%s: not a PNG or JPEG file", name);
    return f[0] == 'p' ? decode_png(img, data, n, name) : decode_jpeg(img, data, n, name);
}

int dl_image_load(dl_image *img, const char *path, char sha[65])
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return dl_error(DL_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        return dl_error(DL_EIO, "%s: not a regular file", path);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n + 1);
    if (!buf) {
        fclose(fp);
        return dl_error(DL_ENOMEM, "%s: out of memory for %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, fp);
    int bad = ferror(fp);
    fclose(fp);
    if (bad || got != n) {
        free(buf);
        return dl_error(DL_EIO, "%s: read failed", path);
    }
    if (sha) {
        uint8_t dig[32];
        dl_sha256_buffer(buf, n, dig);
        dl_sha256_hex(dig, sha);
    }
    int rc = dl_image_decode(img, buf, n, path);
    free(buf);
    return rc;
}

int dl_image_convert(dl_image *dst, const dl_image *src, int channels)
{
    if (channels != 1 && channels != 3)
        return dl_error(DL_EINVAL, "channels %d: expected 1 or 3", channels);
    DL_TRY(alloc_pixels(dst, src->width, src->height, channels, "image"));
    size_t np = (size_t)src->width * (size_t)src->height;
    const uint8_t *s = src->px;
    uint8_t *d = dst->px;
    if (src->channels == channels) {
        memcpy(d, s, np * (size_t)channels);
    } else if (channels == 3) {
        for (size_t i = 0; i < np; i++)
            d[3 * i] = d[3 * i + 1] = d[3 * i + 2] = s[i];
    } else {
        for (size_t i = 0; i < np; i++)
            d[i] = (uint8_t)((s[3 * i] * 19595u + s[3 * i + 1] * 38470u + s[3 * i + 2] * 7471u +
                              0x8000u) >>
                             16);
    }
    return DL_OK;
}

/* ---- area resize ---- */

/* One axis: output i covers source [(i + off) f, (i + off + 1) f) with
 * f = src / scaled; first[i], count[i] and the normalised weights
 * w[i * stride ..] of the source pixels it touches. */
typedef struct axis {
    int *first, *count, stride;
    float *w;
} axis;

static void axis_free(axis *a)
{
    free(a->first);
    free(a->count);
    free(a->w);
}

static int axis_make(axis *a, int src, int scaled, int out)
{
    double f = (double)src / scaled;
    int off = (scaled - out) / 2;
    a->stride = (int)ceil(f) + 2;
    a->first = malloc(sizeof(int) * (size_t)out);
    a->count = malloc(sizeof(int) * (size_t)out);
    a->w = malloc(sizeof(float) * (size_t)out * (size_t)a->stride);
    if (!a->first || !a->count || !a->w) {
        axis_free(a);
        return dl_error(DL_ENOMEM, "out of memory for a resize");
    }
    for (int i = 0; i < out; i++) {
        double lo = (i + off) * f, hi = (i + off + 1) * f;
        int k0 = (int)floor(lo), k1 = (int)ceil(hi);
        if (k1 > src)
            k1 = src;
        a->first[i] = k0;
        a->count[i] = k1 - k0;
        for (int k = k0; k < k1; k++) {
            double cover = fmin(hi, k + 1) - fmax(lo, k);
            a->w[(size_t)i * (size_t)a->stride + (size_t)(k - k0)] = (float)(cover / (hi - lo));
        }
    }
    return DL_OK;
}

/* Columns then rows: tmp [src h, out w, c] as float, then dst. */
static void resample(dl_image *dst, const dl_image *src, const axis *ax, const axis *ay, float *tmp)
{
    int c = src->channels, sw = src->width, ow = dst->width;
    for (int y = 0; y < src->height; y++) {
        const uint8_t *row = src->px + (size_t)y * (size_t)sw * (size_t)c;
        float *t = tmp + (size_t)y * (size_t)ow * (size_t)c;
        for (int x = 0; x < ow; x++) {
            const float *w = ax->w + (size_t)x * (size_t)ax->stride;
            for (int ch = 0; ch < c; ch++) {
                float s = 0;
                for (int k = 0; k < ax->count[x]; k++)
                    s += w[k] * row[(size_t)(ax->first[x] + k) * (size_t)c + (size_t)ch];
                t[x * c + ch] = s;
            }
        }
    }
    size_t rowlen = (size_t)ow * (size_t)c;
    for (int y = 0; y < dst->height; y++) {
        const float *w = ay->w + (size_t)y * (size_t)ay->stride;
        uint8_t *out = dst->px + (size_t)y * rowlen;
        for (size_t j = 0; j < rowlen; j++) {
            float s = 0;
            for (int k = 0; k < ay->count[y]; k++)
                s += w[k] * tmp[(size_t)(ay->first[y] + k) * rowlen + j];
            long v = lroundf(s);
            out[j] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

int dl_image_resize_crop(dl_image *dst, const dl_image *src, int height, int width)
{
    if (height < 1 || width < 1 || height > DL_IMAGE_MAX_SIDE || width > DL_IMAGE_MAX_SIDE)
        return dl_error(DL_EINVAL, "size %dx%d: expected sides in 1..%d", height, width,
                        DL_IMAGE_MAX_SIDE);
    if (src->height == height && src->width == width)
        return dl_image_convert(dst, src, src->channels);
    /* the scale at which the image covers height x width */
    double s = fmax((double)height / src->height, (double)width / src->width);
    int sh = (int)lround(src->height * s), sw = (int)lround(src->width * s);
    sh = sh < height ? height : sh;
    sw = sw < width ? width : sw;
    axis ax = {0}, ay = {0};
    DL_TRY(axis_make(&ax, src->width, sw, width));
    int rc = axis_make(&ay, src->height, sh, height);
    float *tmp =
        rc == DL_OK
            ? malloc(sizeof(float) * (size_t)src->height * (size_t)width * (size_t)src->channels)
            : NULL;
    if (rc == DL_OK && !tmp)
        rc = dl_error(DL_ENOMEM, "out of memory for a resize");
    if (rc == DL_OK)
        rc = alloc_pixels(dst, width, height, src->channels, "image");
    if (rc == DL_OK)
        resample(dst, src, &ax, &ay, tmp);
    free(tmp);
    axis_free(&ax);
    axis_free(&ay);
    return rc;
}

void dl_image_to_chw(const dl_image *img, uint8_t *out)
{
    size_t np = (size_t)img->width * (size_t)img->height;
    int c = img->channels;
    if (c == 1) {
        memcpy(out, img->px, np);
        return;
    }
    if (c == 3) { /* one pass over the pixels, three planes written */
        uint8_t *r = out, *g = out + np, *b = out + 2 * np;
        const uint8_t *p = img->px;
        size_t i = 0;
#ifdef __SSSE3__
        /* 16 pixels a step: each plane's bytes picked out of the three
         * 16-byte loads by a shuffle apiece (-1: a zero byte) and or-ed */
        const __m128i r0 =
            _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        const __m128i r1 =
            _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1);
        const __m128i r2 =
            _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13);
        const __m128i g0 =
            _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        const __m128i g1 =
            _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1);
        const __m128i g2 =
            _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14);
        const __m128i b0 =
            _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
        const __m128i b1 =
            _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1);
        const __m128i b2 =
            _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
        for (; i + 16 <= np; i += 16, p += 48) {
            __m128i v0 = _mm_loadu_si128((const __m128i *)p);
            __m128i v1 = _mm_loadu_si128((const __m128i *)(p + 16));
            __m128i v2 = _mm_loadu_si128((const __m128i *)(p + 32));
            _mm_storeu_si128(
                (__m128i *)(r + i),
                _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(v0, r0), _mm_shuffle_epi8(v1, r1)),
                             _mm_shuffle_epi8(v2, r2)));
            _mm_storeu_si128(
                (__m128i *)(g + i),
                _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(v0, g0), _mm_shuffle_epi8(v1, g1)),
                             _mm_shuffle_epi8(v2, g2)));
            _mm_storeu_si128(
                (__m128i *)(b + i),
                _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(v0, b0), _mm_shuffle_epi8(v1, b1)),
                             _mm_shuffle_epi8(v2, b2)));
        }
#endif
        for (; i < np; i++, p += 3) {
            r[i] = p[0];
            g[i] = p[1];
            b[i] = p[2];
        }
        return;
    }
    for (int ch = 0; ch < c; ch++)
        for (size_t i = 0; i < np; i++)
            out[(size_t)ch * np + i] = img->px[i * (size_t)c + (size_t)ch];
}
