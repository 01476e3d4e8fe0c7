/* sha256.c - SHA-256 (FIPS 180-4) of memory and files */
#include "engine/base/sha256.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"

static const uint32_t round_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

/* One 64-byte block into the state. */
static void compress(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 =
            k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + round_k[i] + w[i];
        uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_SHA_NI 1

/* compress() for n blocks with the SHA extensions (sha256rnds2 does two
 * rounds, sha256msg1/2 the message schedule): several times the portable
 * one, which matters when an image import hashes every file. */
__attribute__((target("sha,sse4.1"))) static void compress_ni(uint32_t h[8], const uint8_t *p,
                                                              size_t n)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    /* the state as the instructions want it: ABEF and CDGH */
    __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)h), 0xB1);
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(h + 4)), 0x1B);
    __m128i s0 = _mm_alignr_epi8(t, s1, 8);
    s1 = _mm_blend_epi16(s1, t, 0xF0);
    for (; n > 0; n--, p += 64) {
        __m128i abef = s0, cdgh = s1, w[4];
        for (int g = 0; g < 16; g++) { /* rounds 4g .. 4g + 3 */
            __m128i m;
            if (g < 4) {
                m = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
            } else {
                m = _mm_add_epi32(_mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]),
                                  _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
                m = _mm_sha256msg2_epu32(m, w[(g + 3) & 3]);
            }
            w[g & 3] = m;
            m = _mm_add_epi32(m, _mm_loadu_si128((const __m128i *)(round_k + 4 * g)));
            s1 = _mm_sha256rnds2_epu32(s1, s0, m);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    t = _mm_shuffle_epi32(s0, 0x1B);
    s1 = _mm_shuffle_epi32(s1, 0xB1);
    _mm_storeu_si128((__m128i *)h, _mm_blend_epi16(t, s1, 0xF0));
    _mm_storeu_si128((__m128i *)(h + 4), _mm_alignr_epi8(s1, t, 8));
}

/* CPUID leaf 7: SHA is EBX bit 29; SSSE3 and SSE4.1 come with every CPU
 * that has it. */
static int have_sha_ni(void)
{
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        unsigned a, b, c, d;
        v = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 29 & 1);
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

/* n consecutive blocks into the state. */
static void compress_blocks(uint32_t h[8], const uint8_t *p, size_t n)
{
#ifdef HAVE_SHA_NI
    if (have_sha_ni()) {
        compress_ni(h, p, n);
        return;
    }
#endif
    for (; n > 0; n--, p += 64)
        compress(h, p);
}

void dl_sha256_init(dl_sha256 *c)
{
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, h0, sizeof h0);
    c->bytes = 0;
    c->used = 0;
}

void dl_sha256_update(dl_sha256 *c, const void *data, size_t n)
{
    const uint8_t *p = data;
    c->bytes += n;
    if (c->used) {
        size_t take = 64 - c->used < n ? 64 - c->used : n;
        memcpy(c->block + c->used, p, take);
        c->used += take;
        p += take;
        n -= take;
        if (c->used < 64)
            return;
        compress_blocks(c->h, c->block, 1);
        c->used = 0;
    }
    compress_blocks(c->h, p, n / 64);
    p += n / 64 * 64;
    n %= 64;
    memcpy(c->block, p, n);
    c->used = n;
}

void dl_sha256_final(dl_sha256 *c, uint8_t digest[32])
{
    uint64_t bits = c->bytes * 8;
    /* 0x80, zeros to 56 mod 64, then the length in bits, big-endian */
    c->block[c->used++] = 0x80;
    if (c->used > 56) {
        memset(c->block + c->used, 0, 64 - c->used);
        compress_blocks(c->h, c->block, 1);
        c->used = 0;
    }
    memset(c->block + c->used, 0, 56 - c->used);
    for (int i = 0; i < 8; i++)
        c->block[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    compress_blocks(c->h, c->block, 1);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++)
            digest[4 * i + j] = (uint8_t)(c->h[i] >> (24 - 8 * j));
}

char *dl_sha256_hex(const uint8_t digest[32], char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = 0;
    return hex;
}

void dl_sha256_buffer(const void *data, size_t n, uint8_t digest[32])
{
    dl_sha256 c;
    dl_sha256_init(&c);
    dl_sha256_update(&c, data, n);
    dl_sha256_final(&c, digest);
}

int dl_sha256_file(const char *path, char hex[65])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dl_error(DL_EIO, "%s: cannot open: %s", path, strerror(errno));
    dl_sha256 c;
    dl_sha256_init(&c);
    static _Thread_local uint8_t buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        dl_sha256_update(&c, buf, n);
    int failed = ferror(f);
    fclose(f);
    if (failed)
        return dl_error(DL_EIO, "%s: read error", path);
    uint8_t d[32];
    dl_sha256_final(&c, d);
    dl_sha256_hex(d, hex);
    return DL_OK;
}
