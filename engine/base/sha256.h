/* sha256.h - SHA-256 (FIPS 180-4) of memory and files, for data fingerprints and run logs */
#ifndef DL_SHA256_H
#define DL_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct dl_sha256 {
    uint32_t h[8];
    uint64_t bytes;    /* message length so far */
    uint8_t block[64]; /* pending partial block */
    size_t used;
} dl_sha256;

/* Streaming use: init, update any number of times, final. The context
 * owns nothing (no _done needed). */
void dl_sha256_init(dl_sha256 *c);
void dl_sha256_update(dl_sha256 *c, const void *data, size_t n);
/* Writes the 32-byte digest; c must be re-initialised before reuse. */
void dl_sha256_final(dl_sha256 *c, uint8_t digest[32]);

/* Lower-case hex of a digest into hex[65] (NUL-terminated); returns hex. */
char *dl_sha256_hex(const uint8_t digest[32], char hex[65]);

/* One-shot digests: of a buffer, and of a file's bytes (as stored, not
 * decompressed). dl_sha256_file returns DL_OK, or DL_EIO with a message
 * naming the file. */
void dl_sha256_buffer(const void *data, size_t n, uint8_t digest[32]);
int dl_sha256_file(const char *path, char hex[65]);

#endif
