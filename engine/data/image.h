/* image.h - one image decoded (PNG with libpng, JPEG with libjpeg-turbo), converted, resized
 *
 * The one decoder of image files in dlbench: the image-folder importer
 * uses it, and so can anything that reads a user's picture (predict).
 * A dl_image is u8 pixels in HWC order (rows packed, channel fastest),
 * 1 channel (grey) or 3 (RGB). Decoding drops alpha (no compositing),
 * expands palettes to RGB and grey below 8 bits to 8, and keeps the high
 * byte of 16-bit samples, as Pillow does. Every error names the image (the
 * name given) and what was wrong. The caller owns a dl_image (zero it or
 * let a function fill it) and frees it with dl_image_done.
 *
 * A typical use:
 *     dl_image a = {0}, b = {0}, c = {0};
 *     DL_TRY(dl_image_load(&a, path));
 *     DL_TRY(dl_image_convert(&b, &a, 3));
 *     DL_TRY(dl_image_resize_crop(&c, &b, 32, 32));
 *     dl_image_to_chw(&c, dst);               (dst: 3 * 32 * 32 bytes)
 */
#ifndef DL_IMAGE_H
#define DL_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* The largest side accepted (a guard against absurd headers). */
#define DL_IMAGE_MAX_SIDE 32768

typedef struct dl_image {
    int width, height, channels; /* channels 1 or 3 */
    uint8_t *px;                 /* [height, width, channels], malloc'd */
} dl_image;

/* Frees img's pixels; img is zeroed. Accepts an image never filled. */
void dl_image_done(dl_image *img);

/* "png" or "jpeg" when the bytes start with that format's signature,
 * else NULL. */
const char *dl_image_format(const void *data, size_t n);

/* Decodes the PNG or JPEG in data[0..n) into img (any old pixels are not
 * freed: pass a zeroed img). name is only for messages. Returns DL_OK, or
 * DL_EINVAL "NAME: not a PNG or JPEG file", "NAME: PNG: <libpng's
 * message>", "NAME: JPEG: <libjpeg's message>" for corrupt or truncated
 * data (a JPEG that ends early is an error too, though libjpeg only warns
 * about it), "NAME: JPEG: CMYK is not supported"; DL_ENOMEM. On error
 * img stays empty. */
int dl_image_decode(dl_image *img, const void *data, size_t n, const char *name);

/* Reads the file path and decodes it (dl_image_decode, path as the name).
 * When sha is not NULL, the SHA-256 of the file's bytes goes there
 * (hex). DL_EIO naming the file when it cannot be read, else as
 * dl_image_decode. */
int dl_image_load(dl_image *img, const char *path, char sha[65]);

/* dst = src with channels channels (1 or 3): grey to RGB copies the
 * value, RGB to grey is Pillow's "L" conversion (ITU-R 601-2 luma,
 * L = (19595 R + 38470 G + 7471 B + 32768) >> 16). dst is filled anew
 * (pass it zeroed). DL_EINVAL for a bad count, DL_ENOMEM. */
int dl_image_convert(dl_image *dst, const dl_image *src, int channels);

/* dst = src scaled so that its shorter side fits (the scaled image covers
 * height x width, one side exactly), then cropped to height x width around
 * the centre. The scaling is area averaging: each output pixel is the
 * mean of the source area it covers, with fractional coverage at the
 * edges (on enlargement that is nearest-neighbour with blended seams),
 * rounded to the nearest level. A src already height x width is copied
 * as it is. DL_EINVAL for a size outside 1..DL_IMAGE_MAX_SIDE, DL_ENOMEM. */
int dl_image_resize_crop(dl_image *dst, const dl_image *src, int height, int width);

/* Writes img's pixels planar to out [channels, height, width]. */
void dl_image_to_chw(const dl_image *img, uint8_t *out);

#endif
