/* rng.h - counter-based random numbers (Philox4x32-10) keyed by (seed, stream, counter, index)
 *
 * No state: the same key gives the same numbers on any device, thread count
 * or after a resume. Dropout's masks use a cheaper keyed hash of the index
 * (dl_rng_dropout_keep), its key drawn from Philox. Streams separate uses (initialisation of parameter k,
 * dropout of layer k, shuffling) so they never overlap.
 */
#ifndef DL_RNG_H
#define DL_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct dl_rng4 {
    uint32_t v[4];
} dl_rng4;

#if defined(__CUDACC__)
#define DL_RNG_FN static inline __host__ __device__
#else
#define DL_RNG_FN static inline
#endif

/* Philox4x32's round multipliers and key increments (Salmon et al.), for
 * the vector versions of the rounds too. */
#define DL_PHILOX_M0 0xD2511F53u
#define DL_PHILOX_M1 0xCD9E8D57u
#define DL_PHILOX_W0 0x9E3779B9u
#define DL_PHILOX_W1 0xBB67AE85u

/* The 2 x 32-bit key of (seed, stream): every Philox draw, scalar or in
 * vector lanes, starts from it. */
DL_RNG_FN void dl_philox_key(uint64_t seed, uint64_t stream, uint32_t k[2])
{
    k[0] = (uint32_t)seed ^ (uint32_t)(stream * DL_PHILOX_W0);
    k[1] = (uint32_t)(seed >> 32) ^ (uint32_t)(stream >> 32) ^ (uint32_t)stream;
}

DL_RNG_FN void dl_philox_round(uint32_t c[4], const uint32_t k[2])
{
    const uint64_t p0 = (uint64_t)DL_PHILOX_M0 * c[0];
    const uint64_t p1 = (uint64_t)DL_PHILOX_M1 * c[2];
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

/* Four independent 32-bit words for key (seed, stream) and counter
 * (counter, index). */
DL_RNG_FN dl_rng4 dl_rng_philox(uint64_t seed, uint64_t stream, uint64_t counter, uint64_t index)
{
    uint32_t k[2];
    dl_philox_key(seed, stream, k);
    uint32_t c[4] = {(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)counter,
                     (uint32_t)(counter >> 32)};
    for (int i = 0; i < 10; i++) {
        dl_philox_round(c, k);
        k[0] += DL_PHILOX_W0;
        k[1] += DL_PHILOX_W1;
    }
    dl_rng4 r = {{c[0], c[1], c[2], c[3]}};
    return r;
}

/* Uniform in [0, 1) with 24 random bits. */
DL_RNG_FN float dl_rng_u01(uint32_t bits) { return (float)(bits >> 8) * (1.0f / 16777216.0f); }

/* Uniform in [0, 1) for element i of a stream: uses word i % 4 of block i / 4,
 * so a vectorised loop pays one Philox call per four numbers. */
DL_RNG_FN float dl_rng_uniform(uint64_t seed, uint64_t stream, uint64_t counter, uint64_t i)
{
    dl_rng4 r = dl_rng_philox(seed, stream, counter, i >> 2);
    return dl_rng_u01(r.v[i & 3]);
}

/* Standard normal for element i (Box-Muller on words 2j, 2j+1). */
DL_RNG_FN float dl_rng_normal(uint64_t seed, uint64_t stream, uint64_t counter, uint64_t i)
{
    dl_rng4 r = dl_rng_philox(seed, stream, counter, i >> 1);
    int j = (int)(i & 1) * 2;
    float u1 = ((float)(r.v[j] >> 8) + 1.0f) * (1.0f / 16777217.0f); /* (0, 1] */
    float u2 = dl_rng_u01(r.v[j + 1]);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
}

/* A keyed 32-bit hash of an element index, for dropout's masks: per
 * element one Philox block costs ten rounds of widening multiplies, and a
 * keep decision needs far less than 128 bits, so a mask draws one Philox
 * block per 2^32 elements for the key and hashes each index with it
 * (an odd multiplier and an offset, then a two-multiply mixer). Vector
 * lanes compute the same operations per element, in any order. */
typedef struct dl_rng_hkey {
    uint32_t a, b; /* index * a + b, a odd */
} dl_rng_hkey;

/* The mixer is Wellons' lowbias32: shifts 16, 15, 16 and these
 * multipliers, from his hash-prospector search (github.com/skeeto/
 * hash-prospector, README: "exact bias: 0.17353355999581582"). His
 * three-multiply triple32 (bias 0.0209), used before, took 1.3 times as
 * long in the 8-lane loop, which the multiplies bound, and
 * test_rng_dropout_hash sees no difference between the two. */
#define DL_RNG_HASH_M0 0x7FEB352Du
#define DL_RNG_HASH_M1 0x846CA68Bu
/* Philox indices at or above this draw hash keys: far above any element
 * index dl_rng_uniform or dl_rng_normal reaches. */
#define DL_RNG_HASH_KEY_BLOCK (1ull << 63)

/* The key of elements [hi 2^32, (hi + 1) 2^32) of (seed, stream, counter). */
DL_RNG_FN dl_rng_hkey dl_rng_hash_key(uint64_t seed, uint64_t stream, uint64_t counter, uint32_t hi)
{
    dl_rng4 r = dl_rng_philox(seed, stream, counter, DL_RNG_HASH_KEY_BLOCK | hi);
    dl_rng_hkey k = {r.v[0] | 1u, r.v[1]};
    return k;
}

/* 32 bits for the element whose index has low word lo, under key k. */
DL_RNG_FN uint32_t dl_rng_hash32(dl_rng_hkey k, uint32_t lo)
{
    uint32_t x = lo * k.a + k.b;
    x ^= x >> 16;
    x *= DL_RNG_HASH_M0;
    x ^= x >> 15;
    x *= DL_RNG_HASH_M1;
    x ^= x >> 16;
    return x;
}

/* The same for element i of (seed, stream, counter), key included. */
DL_RNG_FN uint32_t dl_rng_hash_bits(uint64_t seed, uint64_t stream, uint64_t counter, uint64_t i)
{
    return dl_rng_hash32(dl_rng_hash_key(seed, stream, counter, (uint32_t)(i >> 32)), (uint32_t)i);
}

/* Bits at or above this pass with probability 1 - p (to within 2^-32):
 * ceil(p 2^32) for p in [0, 1), exact in double. */
DL_RNG_FN uint32_t dl_rng_threshold(float p) { return (uint32_t)ceil((double)p * 4294967296.0); }

/* Dropout keeps element i of (seed, stream, counter) at probability p
 * when its hash bits reach dl_rng_threshold(p). One Philox call per
 * element here (the key): the rule for references; kernels draw the key
 * once and call dl_rng_hash32. */
DL_RNG_FN int dl_rng_dropout_keep(uint64_t seed, uint64_t stream, uint64_t counter, uint64_t i,
                                  float p)
{
    return dl_rng_hash_bits(seed, stream, counter, i) >= dl_rng_threshold(p);
}

/* Streams used by the engine (a layer's or parameter's index is added). */
enum {
    DL_STREAM_INIT = 1 << 20,
    DL_STREAM_DROPOUT = 2 << 20,
    DL_STREAM_SHUFFLE = 3 << 20,
    DL_STREAM_AUGMENT = 4 << 20,
    DL_STREAM_USER = 5 << 20
};

#endif
