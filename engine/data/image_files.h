/* image_files.h - a user's image files (one file or a folder's tree) decoded into one u8 dataset
 *
 * What dlbench predict reads when INPUT is a picture or a folder of them:
 * every image is decoded by image.h and brought to one sample shape
 * [C, H, W] the way dlbench import --size HxW does it (scaled on the
 * shorter side and centre-cropped, then converted to C channels), so an
 * image read here equals the same image imported.
 */
#ifndef DL_IMAGE_FILES_H
#define DL_IMAGE_FILES_H

#include <stddef.h>

#include "engine/data/data.h"

typedef struct dl_image_files {
    size_t n;
    char **paths; /* [n], malloc'd */
} dl_image_files;

/* 1 when path names an image input: a folder, a name ending in .png,
 * .jpg, .jpeg (or another picture suffix: .gif .bmp .ppm .pgm .webp, refused
 * when read), or a file whose bytes start as a PNG or JPEG. */
int dl_image_files_is_input(const char *path);

/* Lists path's images into f (zeroed first): path itself when it is a
 * file, else every file under the folder whose name ends in .png, .jpg or
 * .jpeg (any case), recursively; dot-files and dot-folders are left out,
 * and so are other files (a README beside the images). The order is
 * depth-first with names compared bytewise in each folder, the order
 * dlbench import and ImageFolder give a DIR/<class>/<image> tree.
 * DL_EINVAL "PATH: no PNG or JPEG files" for none, DL_EIO naming a folder
 * that cannot be read, DL_ENOMEM. */
int dl_image_files_list(dl_image_files *f, const char *path);

/* Frees f's list; f is zeroed. */
void dl_image_files_done(dl_image_files *f);

/* Decodes f's files into d (filled anew): x u8 [n, channels, height,
 * width], y zero i32 labels (y width 1, no classes), scale 1. A file whose
 * name's suffix does not match its bytes (a PNG named .jpg, a JPEG named
 * .bin) is DL_EINVAL naming it; a corrupt file as dl_image_load; channels
 * other than 1 or 3 DL_EINVAL. On error d is empty. */
int dl_image_files_load(const dl_image_files *f, int channels, int height, int width,
                        dl_dataset *d);

#endif
