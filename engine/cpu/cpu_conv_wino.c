/* cpu_conv_wino.c - Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions (padding 1 or none) on activations in 8-channel blocks (AVX2)
 *
 * oneDNN's Winograd kernels need AVX-512; on an AVX2 CPU its direct
 * kernels ran the ResNet's and a CIFAR VGG's 3x3 layers at 80% of the
 * FMA peak, and those two models at 1.2-1.4x PyTorch where the AVX-512
 * Winograd gave 1.7-2x (bench/offlist's VGG, bench_train's ResNet, with
 * ONEDNN_MAX_CPU_ISA=AVX2 DLBENCH_CPU_AVX512=0 on an AVX-512 Xeon).
 * F(2x2, 3x3) computes a 2x2 output tile from a 4x4 input tile with 16
 * products a channel pair instead of 36:
 *   Y = A^T [ (G g G^T) . (B^T d B) ] A
 * summed over the input channels in the transformed domain, where the
 * sum is 16 matrix products (one per position xi of the 4x4 tile):
 *   M[xi][tile][k] = sum over c of V[xi][tile][c] * U[xi][c][k]
 * with V = B^T d B of each tile and channel, U = G g G^T of each filter.
 *
 * Activations are nChw8c (the layout plan's blocks with AVX2): an input
 * tile of a channel block is 16 vectors of 8 channels, transformed with
 * adds only. Tiles run in blocks of nt (a multiple of 6, sized so that a
 * block's V and M stay within L1; see BLOCK_FLOATS): the block's transform,
 * its 16 products on 6x16 register tiles (6 tiles times two vectors of
 * output channels), and the output transform back to 2x2 pixels. The
 * data gradient is the same computation on dy with the filter turned
 * 180 degrees and its channels swapped: the transpose of a 3x3
 * convolution padded by pad is one padded by 2 - pad (a "same" one's is
 * "same", a "valid" one's reads dy padded by 2). Tile (ti, tj) of the
 * output reads its 4x4 input from (2 ti - off, 2 tj - off), off the
 * padding. Each output sums its channels in a fixed order
 * within its own tile, so results do not depend on the thread count.
 * The filter gradient is the adjoint: per tile, x's B^T d B and dy's
 * A e A^T (e its 2x2 pixels), S[xi][k][c] += the product of the two over
 * the tiles of a chunk of images (chunks fixed by the shape, added in
 * order), then dW = G^T S G. The data and filter gradients run where the
 * tiles cover the plane with little spare (not 7x7: 8x8 covered).
 *
 * The transforms are exact in real arithmetic; in f32 they round
 * differently from the direct sum (relative differences near 1e-6 of
 * the output's scale, as with oneDNN's F(4x4, 3x3), which rounds more).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/cpu/cpu.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define WG_TARGET __attribute__((target("avx2,fma")))
#define WG_INLINE __attribute__((always_inline)) inline
#define UNROLL _Pragma("GCC unroll 16")

enum {
    BLK = 8,  /* channels in a block: AVX2's 8 lanes */
    NXI = 16, /* positions of a transformed 4x4 tile */
    MR = 6,   /* tiles of a register tile */
};

/* Floats of a tile block's V and M together, at most (then 6 tiles at
 * least). Forward and data gradient: 24 KiB, within L1 (12 tiles at 16
 * channels in and out, 6 from 32): each of a tile's 16 transformed
 * vectors goes to its own position's matrix, and with blocks of 96 tiles
 * (384 KiB) every one of those stores missed L1; BENCH_CONV_VS=wino,
 * AVX2: 16 -> 16 channels at 28x28 1.06x faster forward and data,
 * 128 -> 128 at 8x8 1.08x, the other shapes 1.00-1.03x. The filter
 * gradient reduces over the block's tiles (S += E^T V, its sums loaded
 * and stored once a block), so it keeps long blocks: 12 tiles ran it at
 * 0.85-0.95x of 96. */
#define BLOCK_FLOATS (6u << 10)
#define FILTER_BLOCK_FLOATS (96u << 10)

typedef struct wino_job {
    int ci, co;   /* input and output channels */
    int h, w;     /* the input plane */
    int oh, ow;   /* the output plane: h + 2 pad - 2 (the data gradient: the input's) */
    int off;      /* tile (ti, tj) reads the input from (2 ti - off, 2 tj - off): pad,
                       * or 2 - pad for the data gradient */
    int th, tw;   /* tiles of the output plane: ceil(oh / 2), ceil(ow / 2) */
    size_t tiles; /* images x th x tw */
    int nt;       /* tiles a block (a multiple of MR) */
    size_t blocks, tasks;
    const float *in;   /* [n, ci / 8, h, w, 8] */
    const float *u;    /* [16, ci, co] */
    const float *bias; /* [co] or NULL */
    float *out;        /* [n, co / 8, oh, ow, 8] */
    int add;           /* out += instead of out = */
    float *scratch;    /* tasks x per_task floats */
    size_t per_task;   /* V [16, nt, ci], then M [16, nt, co] (filter: dy's [16, nt, co]) */
    /* the filter gradient: in = x, dy [n, co / 8, oh, ow, 8]; its chunks of
     * chunk_n images, each summing its tiles into parts [chunk][16, co, ci] */
    const float *dy;
    float *parts, *dw;
    int chunk_n;
    size_t chunks;
} wino_job;

/* Row r0 + i of a tile's 4x4 input (columns c0..c0 + 3, zeros outside
 * the plane, or none checked where inside) times B: u = d B. */
WG_TARGET static WG_INLINE void in_row(const wino_job *j, const float *p, int r, int c0, int inside,
                                       __m256 u[4])
{
    __m256 d[4];
    UNROLL for (int k = 0; k < 4; k++)
    {
        int c = c0 + k;
        d[k] = inside || (r >= 0 && c >= 0 && r < j->h && c < j->w)
                   ? _mm256_loadu_ps(p + ((size_t)r * j->w + c) * BLK)
                   : _mm256_setzero_ps();
    }
    u[0] = _mm256_sub_ps(d[0], d[2]);
    u[1] = _mm256_add_ps(d[1], d[2]);
    u[2] = _mm256_sub_ps(d[2], d[1]);
    u[3] = _mm256_sub_ps(d[1], d[3]);
}

/* B^T (d B) row by row: rows 0-2 give the first three rows of the
 * result, row 3 the last (with row 1), so at most 12 vectors are live
 * and none goes through the stack. (Written as a 4x4 array of d filled
 * by two branches, GCC copied the array in 16-byte halves and reloaded
 * it 32 bytes at a time: a store-forwarding stall on every load, the
 * transform a third of a 16-channel layer's time.) */
WG_TARGET static WG_INLINE void in_tile_at(const wino_job *j, const float *p, int r0, int c0,
                                           int inside, float *v, size_t xs)
{
    __m256 a[4], b[4], c[4];
    in_row(j, p, r0, c0, inside, a);
    in_row(j, p, r0 + 1, c0, inside, b);
    in_row(j, p, r0 + 2, c0, inside, c);
    UNROLL for (int q = 0; q < 4; q++)
    {
        _mm256_storeu_ps(v + (size_t)(0 + q) * xs, _mm256_sub_ps(a[q], c[q]));
        _mm256_storeu_ps(v + (size_t)(4 + q) * xs, _mm256_add_ps(b[q], c[q]));
        _mm256_storeu_ps(v + (size_t)(8 + q) * xs, _mm256_sub_ps(c[q], b[q]));
    }
    in_row(j, p, r0 + 3, c0, inside, a);
    UNROLL for (int q = 0; q < 4; q++)
        _mm256_storeu_ps(v + (size_t)(12 + q) * xs, _mm256_sub_ps(b[q], a[q]));
}

/* B^T d B of one channel block's 4x4 tile at (ti, tj) of plane p, its 16
 * vectors stored xs floats apart from v. */
WG_TARGET static void in_tile(const wino_job *j, const float *p, int ti, int tj, float *v,
                              size_t xs)
{
    int r0 = 2 * ti - j->off, c0 = 2 * tj - j->off;
    if (r0 >= 0 && c0 >= 0 && r0 + 3 < j->h && c0 + 3 < j->w)
        in_tile_at(j, p, r0, c0, 1, v, xs);
    else
        in_tile_at(j, p, r0, c0, 0, v, xs);
}

/* The register tile of all three directions' products: c[r][8 or 16]
 * = (or += where add) the sum over i < cnt of a[r * ra + i * ia] times
 * b[i * ldb ..], rows r < rows (up to 6), 16 columns where two, else 8.
 * The forward's M = V U: rows are tiles, i input channels; the filter's
 * S += E^T V: rows are output channels, i tiles. */
WG_TARGET static WG_INLINE void tile_kern(const float *a, size_t ra, size_t ia, const float *b,
                                          size_t ldb, float *c, size_t ldc, int cnt, int rows,
                                          int two, int add)
{
    __m256 a0[MR], a1[MR];
    UNROLL for (int r = 0; r < rows; r++)
    {
        a0[r] = add ? _mm256_loadu_ps(c + (size_t)r * ldc) : _mm256_setzero_ps();
        a1[r] = add && two ? _mm256_loadu_ps(c + (size_t)r * ldc + BLK) : _mm256_setzero_ps();
    }
    for (int i = 0; i < cnt; i++) {
        __m256 b0 = _mm256_loadu_ps(b + (size_t)i * ldb);
        __m256 b1 = two ? _mm256_loadu_ps(b + (size_t)i * ldb + BLK) : b0;
        UNROLL for (int r = 0; r < rows; r++)
        {
            __m256 x = _mm256_broadcast_ss(a + (size_t)r * ra + (size_t)i * ia);
            a0[r] = _mm256_fmadd_ps(x, b0, a0[r]);
            if (two)
                a1[r] = _mm256_fmadd_ps(x, b1, a1[r]);
        }
    }
    UNROLL for (int r = 0; r < rows; r++)
    {
        _mm256_storeu_ps(c + (size_t)r * ldc, a0[r]);
        if (two)
            _mm256_storeu_ps(c + (size_t)r * ldc + BLK, a1[r]);
    }
}

#define TILE_KERN(R, T, ADD)                                                                       \
    WG_TARGET static void kern##R##_##T##_##ADD(const float *a, size_t ra, size_t ia,              \
                                                const float *b, size_t ldb, float *c, size_t ldc,  \
                                                int cnt)                                           \
    {                                                                                              \
        tile_kern(a, ra, ia, b, ldb, c, ldc, cnt, R, T, ADD);                                      \
    }
TILE_KERN(6, 1, 0)
TILE_KERN(6, 0, 0)
TILE_KERN(6, 1, 1)
TILE_KERN(6, 0, 1)
TILE_KERN(4, 1, 1)
TILE_KERN(4, 0, 1)
TILE_KERN(2, 1, 1)
TILE_KERN(2, 0, 1)

typedef void (*tile_fn)(const float *, size_t, size_t, const float *, size_t, float *, size_t, int);

/* The instance for rows (6; where add also 4 or 2), two and add. */
static tile_fn tile_for(int rows, int two, int add)
{
    if (!add)
        return two ? kern6_1_0 : kern6_0_0;
    if (rows == 6)
        return two ? kern6_1_1 : kern6_0_1;
    if (rows == 4)
        return two ? kern4_1_1 : kern4_0_1;
    return two ? kern2_1_1 : kern2_0_1;
}

/* A^T m A of output block kb's 16 vectors (xs floats apart from m), plus
 * the bias, into the 2x2 pixels at (ti, tj) of plane p that lie inside
 * it. */
WG_TARGET static void out_tile(const wino_job *j, const float *m, size_t xs, __m256 bias, float *p,
                               int ti, int tj)
{
    __m256 s0[4], s1[4];
    for (int k = 0; k < 4; k++) { /* A^T m: rows */
        __m256 m0 = _mm256_loadu_ps(m + (size_t)(0 + k) * xs),
               m1 = _mm256_loadu_ps(m + (size_t)(4 + k) * xs),
               m2 = _mm256_loadu_ps(m + (size_t)(8 + k) * xs),
               m3 = _mm256_loadu_ps(m + (size_t)(12 + k) * xs);
        s0[k] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
        s1[k] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
    }
    __m256 y[2][2] = {{_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0[0], s0[1]), s0[2]), bias),
                       _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s0[1], s0[2]), s0[3]), bias)},
                      {_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s1[0], s1[1]), s1[2]), bias),
                       _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s1[1], s1[2]), s1[3]), bias)}};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int r = 2 * ti + a, c = 2 * tj + b;
            if (r >= j->oh || c >= j->ow)
                continue;
            float *o = p + ((size_t)r * j->ow + c) * BLK;
            __m256 val = j->add ? _mm256_add_ps(_mm256_loadu_ps(o), y[a][b]) : y[a][b];
            _mm256_storeu_ps(o, val);
        }
}

/* Floats from one position xi of V or M to the next: nt x ch and a cache
 * line more. Without it the 16 stores of a tile's transform (and the
 * output transform's 16 loads) went to one L1 set at multiples of 4 KiB
 * (nt x ch = 96 x 32 floats = 3 x 4 KiB): 1.01x of oneDNN's direct
 * kernels on 32 -> 32 channels at 14x14 planes, 1.26x with it. */
static inline size_t xi_stride(int nt, int ch) { return (size_t)nt * ch + 16; }

/* Tile block b with V and M from the task's scratch. */
WG_TARGET static void run_block(const wino_job *j, size_t b, float *V, float *M)
{
    size_t t0 = b * (size_t)j->nt, plane_tiles = (size_t)j->th * j->tw;
    int cnt = (int)(j->tiles - t0 < (size_t)j->nt ? j->tiles - t0 : (size_t)j->nt);
    size_t vxs = xi_stride(j->nt, j->ci), mxs = xi_stride(j->nt, j->co);
    size_t in_plane = (size_t)j->h * j->w * BLK;
    int rows = (cnt + MR - 1) / MR * MR; /* whole register tiles */
    for (int t = 0; t < rows; t++) {
        if (t >= cnt) { /* the last block's rows past the end: zeros */
            for (int xi = 0; xi < NXI; xi++)
                memset(V + xi * vxs + (size_t)t * j->ci, 0, (size_t)j->ci * sizeof(float));
            continue;
        }
        size_t g = t0 + (size_t)t, n = g / plane_tiles, r = g % plane_tiles;
        int ti = (int)(r / (size_t)j->tw), tj = (int)(r % (size_t)j->tw);
        const float *img = j->in + n * (size_t)j->ci * j->h * j->w;
        for (int cb = 0; cb < j->ci / BLK; cb++)
            in_tile(j, img + (size_t)cb * in_plane, ti, tj, V + (size_t)t * j->ci + cb * BLK, vxs);
    }
    for (int xi = 0; xi < NXI; xi++) {
        const float *v = V + xi * vxs, *u = j->u + (size_t)xi * j->ci * j->co;
        float *m = M + xi * mxs;
        for (int k = 0; k < j->co; k += 2 * BLK) {
            tile_fn f = tile_for(MR, k + 2 * BLK <= j->co, 0);
            for (int t = 0; t < rows; t += MR)
                f(v + (size_t)t * j->ci, j->ci, 1, u + k, j->co, m + (size_t)t * j->co + k, j->co,
                  j->ci);
        }
    }
    size_t out_plane = (size_t)j->oh * j->ow * BLK;
    for (int t = 0; t < cnt; t++) {
        size_t g = t0 + (size_t)t, n = g / plane_tiles, r = g % plane_tiles;
        int ti = (int)(r / (size_t)j->tw), tj = (int)(r % (size_t)j->tw);
        float *img = j->out + n * (size_t)j->co * j->oh * j->ow;
        for (int kb = 0; kb < j->co / BLK; kb++) {
            __m256 bias = j->bias ? _mm256_loadu_ps(j->bias + kb * BLK) : _mm256_setzero_ps();
            out_tile(j, M + (size_t)t * j->co + kb * BLK, mxs, bias, img + (size_t)kb * out_plane,
                     ti, tj);
        }
    }
}

static void block_task(void *arg, size_t begin, size_t end)
{
    const wino_job *j = arg;
    for (size_t task = begin; task < end; task++) {
        float *V = j->scratch + task * j->per_task;
        float *M = V + (size_t)NXI * xi_stride(j->nt, j->ci);
        for (size_t b = task * j->blocks / j->tasks; b < (task + 1) * j->blocks / j->tasks; b++)
            run_block(j, b, V, M);
    }
}

/* A e A^T of output block kb's 2x2 pixels e at (ti, tj) of dy's plane p
 * (zeros outside it), its 16 vectors stored xs floats apart from o: the
 * transformed domain's view of a tile's dy (the adjoint of out_tile). */
WG_TARGET static void dy_tile(const wino_job *j, const float *p, int ti, int tj, float *o,
                              size_t xs)
{
    __m256 z = _mm256_setzero_ps(), e[2][2], zz[4][2];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int r = 2 * ti + a, c = 2 * tj + b;
            e[a][b] =
                r < j->oh && c < j->ow ? _mm256_loadu_ps(p + ((size_t)r * j->ow + c) * BLK) : z;
        }
    for (int b = 0; b < 2; b++) { /* A e: rows */
        zz[0][b] = e[0][b];
        zz[1][b] = _mm256_add_ps(e[0][b], e[1][b]);
        zz[2][b] = _mm256_sub_ps(e[0][b], e[1][b]);
        zz[3][b] = _mm256_sub_ps(z, e[1][b]);
    }
    for (int i = 0; i < 4; i++) { /* (A e) A^T: columns */
        _mm256_storeu_ps(o + (size_t)(i * 4 + 0) * xs, zz[i][0]);
        _mm256_storeu_ps(o + (size_t)(i * 4 + 1) * xs, _mm256_add_ps(zz[i][0], zz[i][1]));
        _mm256_storeu_ps(o + (size_t)(i * 4 + 2) * xs, _mm256_sub_ps(zz[i][0], zz[i][1]));
        _mm256_storeu_ps(o + (size_t)(i * 4 + 3) * xs, _mm256_sub_ps(z, zz[i][1]));
    }
}

/* Tiles [t0, t0 + cnt) of the filter gradient into the chunk's sums S
 * [16, co, ci]: x's tiles into V, dy's into E, then per position xi
 * S[xi] += E[xi]^T V[xi]. */
WG_TARGET static void filter_block(const wino_job *j, size_t t0, int cnt, float *V, float *E,
                                   float *S)
{
    size_t plane_tiles = (size_t)j->th * j->tw, plane = (size_t)j->h * j->w * BLK;
    size_t oplane = (size_t)j->oh * j->ow * BLK;
    size_t vxs = xi_stride(j->nt, j->ci), exs = xi_stride(j->nt, j->co);
    for (int t = 0; t < cnt; t++) {
        size_t g = t0 + (size_t)t, n = g / plane_tiles, r = g % plane_tiles;
        int ti = (int)(r / (size_t)j->tw), tj = (int)(r % (size_t)j->tw);
        const float *img = j->in + n * (size_t)j->ci * j->h * j->w;
        for (int cb = 0; cb < j->ci / BLK; cb++)
            in_tile(j, img + (size_t)cb * plane, ti, tj, V + (size_t)t * j->ci + cb * BLK, vxs);
        const float *dimg = j->dy + n * (size_t)j->co * j->oh * j->ow;
        for (int kb = 0; kb < j->co / BLK; kb++)
            dy_tile(j, dimg + (size_t)kb * oplane, ti, tj, E + (size_t)t * j->co + kb * BLK, exs);
    }
    for (int xi = 0; xi < NXI; xi++) {
        const float *v = V + xi * vxs, *e = E + xi * exs;
        float *sx = S + (size_t)xi * j->co * j->ci;
        for (int k = 0; k < j->co;) {
            int rows = j->co - k >= MR ? MR : j->co - k; /* 6, else 4 or 2 (co: 8s) */
            for (int c = 0; c < j->ci; c += 2 * BLK)
                tile_for(rows, c + 2 * BLK <= j->ci, 1)(e + k, 1, j->co, v + c, j->ci,
                                                        sx + (size_t)k * j->ci + c, j->ci, cnt);
            k += rows;
        }
    }
}

/* Chunks [begin, end): each its images' tiles, block by block, into its
 * own sums (zeroed first). */
static void filter_chunk_task(void *arg, size_t begin, size_t end)
{
    const wino_job *j = arg;
    size_t plane_tiles = (size_t)j->th * j->tw, sums = (size_t)NXI * j->co * j->ci;
    for (size_t ch = begin; ch < end; ch++) {
        float *V = j->scratch + ch * j->per_task, *E = V + (size_t)NXI * xi_stride(j->nt, j->ci);
        float *S = j->parts + ch * sums;
        memset(S, 0, sums * sizeof(float));
        size_t first = ch * (size_t)j->chunk_n * plane_tiles;
        size_t last = (ch + 1) * (size_t)j->chunk_n * plane_tiles;
        if (last > j->tiles)
            last = j->tiles;
        for (size_t t0 = first; t0 < last; t0 += (size_t)j->nt)
            filter_block(j, t0, (int)(last - t0 < (size_t)j->nt ? last - t0 : (size_t)j->nt), V, E,
                         S);
    }
}

/* dw[k] += G^T S G of the chunks' sums, added in chunk order, outputs
 * [begin, end). */
static void filter_out_fn(void *arg, size_t begin, size_t end)
{
    const wino_job *j = arg;
    size_t sums = (size_t)NXI * j->co * j->ci, pos = (size_t)j->co * j->ci;
    for (size_t k = begin; k < end; k++)
        for (int c = 0; c < j->ci; c++) {
            float sv[4][4], rr[3][4];
            size_t at = k * j->ci + c;
            for (int xi = 0; xi < NXI; xi++) {
                float v = j->parts[xi * pos + at];
                for (size_t ch = 1; ch < j->chunks; ch++)
                    v += j->parts[ch * sums + xi * pos + at];
                sv[xi / 4][xi % 4] = v;
            }
            for (int q = 0; q < 4; q++) { /* G^T S: rows */
                rr[0][q] = sv[0][q] + 0.5f * (sv[1][q] + sv[2][q]);
                rr[1][q] = 0.5f * (sv[1][q] - sv[2][q]);
                rr[2][q] = 0.5f * (sv[1][q] + sv[2][q]) + sv[3][q];
            }
            float *o = j->dw + at * 9;
            for (int i = 0; i < 3; i++) { /* (G^T S) G: columns */
                o[i * 3 + 0] += rr[i][0] + 0.5f * (rr[i][1] + rr[i][2]);
                o[i * 3 + 1] += 0.5f * (rr[i][1] - rr[i][2]);
                o[i * 3 + 2] += 0.5f * (rr[i][1] + rr[i][2]) + rr[i][3];
            }
        }
}

/* U [16, ci, co] = G g G^T of each filter: g = w[k, c] (forward: ci = c,
 * co = k) or w[k, c] turned 180 degrees (data: ci = k, co = c). */
typedef struct filter_task {
    const float *w;
    float *u;
    int k, c, data;
    dl_dtype via; /* emulated low precision: w rounded to it first */
} filter_task;

static void filter_fn(void *arg, size_t begin, size_t end)
{
    const filter_task *f = arg;
    int ci = f->data ? f->k : f->c, co = f->data ? f->c : f->k;
    for (size_t k = begin; k < end; k++)
        for (int c = 0; c < f->c; c++) {
            const float *src = f->w + (k * (size_t)f->c + c) * 9;
            float g[3][3], t[4][3];
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++)
                    g[r][s] = dl_cpu_round_to(f->data ? src[(2 - r) * 3 + (2 - s)] : src[r * 3 + s],
                                              f->via);
            for (int s = 0; s < 3; s++) { /* G g */
                t[0][s] = g[0][s];
                t[1][s] = 0.5f * (g[0][s] + g[1][s] + g[2][s]);
                t[2][s] = 0.5f * (g[0][s] - g[1][s] + g[2][s]);
                t[3][s] = g[2][s];
            }
            size_t i_in = f->data ? k : (size_t)c, i_out = f->data ? (size_t)c : k;
            for (int i = 0; i < 4; i++) { /* (G g) G^T */
                float row[4] = {t[i][0], 0.5f * (t[i][0] + t[i][1] + t[i][2]),
                                0.5f * (t[i][0] - t[i][1] + t[i][2]), t[i][2]};
                for (int q = 0; q < 4; q++)
                    f->u[((size_t)(i * 4 + q) * ci + i_in) * co + i_out] = row[q];
            }
        }
}

int dl_cpu_conv_wino_takes(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, int dir)
{
    if (!dl_cpu_conv_wino_fits(be, d, compute, dir))
        return 0;
    return d->x_blk == BLK && d->y_blk == BLK;
}

int dl_cpu_conv_wino_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, int dir)
{
    if (dir < 0 || dir > 2 || dl_cpu_avx512() || dl_cpu_kernel_type(be, compute) != DL_F32 ||
        (compute != DL_F32 && compute != DL_BF16 && compute != DL_F16) || d->r != 3 || d->s != 3 ||
        d->stride != 1 || d->pad < 0 || d->pad > 1 || dl_conv_dilation(d) != 1 ||
        dl_conv_groups(d) != 1 || d->c % BLK || d->k % BLK || d->n <= 0 ||
        d->p != d->h + 2 * d->pad - 2 || d->q != d->w + 2 * d->pad - 2 || d->p < 1 || d->q < 1)
        return 0;
    const char *e = getenv("DLBENCH_CONV_WINO"); /* read per call: benches switch */
    if (e && (!strcmp(e, "0") || !strcmp(e, "1")))
        return e[0] == '1';
    e = getenv("DLBENCH_CONV"); /* dnnl: oneDNN's wherever it runs */
    if (e && !strcmp(e, "dnnl"))
        return 0;
    /* BENCH_CONV_VS=wino bench_conv at 1 and 2 threads, AVX2 played on an
     * AVX-512 Xeon: 1.2-1.65x oneDNN's direct kernels forward and 1.05-1.6x
     * for the data gradient from 16 to 128 channels; at 256 (U no longer
     * near the cache) 0.74x; the data gradient on 7x7 planes, whose tiles
     * cover 8x8, 0.89-1.03x. */
    if (d->c < 16 || d->k < 16 || (size_t)d->c * d->k > 128 * 128)
        return 0;
    /* the plane the direction's tiles cover: y's, dx's (x's) for the data
     * gradient */
    int th = dir == 1 ? d->h : d->p, tw = dir == 1 ? d->w : d->q;
    size_t covered = (size_t)4 * ((th + 1) / 2) * ((tw + 1) / 2);
    return dir == 0 || covered * 5 <= (size_t)th * tw * 6;
}

/* Emulated low precision (f32 kernels on operands rounded to compute):
 * the type operand bit of d is to be rounded through, F32 where it needs
 * none (f32 compute, or its producer wrote it rounded). */
static dl_dtype via_for(const dl_conv_desc *d, dl_dtype compute, int bit)
{
    return compute == DL_F32 || (d->rounded & bit) ? DL_F32 : compute;
}

/* src rounded through via into dst (n floats), or src itself. */
static const float *rounded(dl_backend *be, float *dst, const float *src, dl_dtype via, size_t n)
{
    if (via == DL_F32)
        return src;
    dl_cpu_round_through(be, dst, src, via, n);
    return dst;
}

/* out (y, or dx written or added into) from in (x, or dy) through w. */
static int wino_run(dl_backend *be, const dl_conv_desc *d, int data, float *out, const float *in,
                    const float *w, const float *bias, int add, dl_dtype compute)
{
    dl_dtype via = via_for(d, compute, data ? DL_CONV_DY_ROUNDED : DL_CONV_X_ROUNDED);
    /* the data gradient: dy (p x q) to dx (h x w), a 3x3 convolution
     * padded by 2 - pad */
    wino_job j = {.ci = data ? d->k : d->c,
                  .co = data ? d->c : d->k,
                  .h = data ? d->p : d->h,
                  .w = data ? d->q : d->w,
                  .oh = data ? d->h : d->p,
                  .ow = data ? d->w : d->q,
                  .off = data ? 2 - d->pad : d->pad,
                  .bias = bias,
                  .out = out,
                  .add = add};
    j.th = (j.oh + 1) / 2;
    j.tw = (j.ow + 1) / 2;
    size_t nin = (size_t)d->n * j.ci * j.h * j.w;
    j.tiles = (size_t)d->n * j.th * j.tw;
    size_t per_tile = (size_t)NXI * (j.ci + j.co);
    size_t nt = BLOCK_FLOATS / per_tile / MR * MR;
    j.nt = nt < MR ? MR : nt > 96 ? 96 : (int)nt;
    j.blocks = (j.tiles + j.nt - 1) / j.nt;
    size_t threads = (size_t)dl_cpu(be)->threads;
    j.tasks = j.blocks < 3 * threads ? j.blocks : 3 * threads;
    j.per_task = (size_t)NXI * (xi_stride(j.nt, j.ci) + xi_stride(j.nt, j.co));
    size_t uf = (size_t)NXI * j.ci * j.co, rf = via == DL_F32 ? 0 : nin;
    size_t bytes = (uf + j.tasks * j.per_task + rf) * sizeof(float) + 64;
    char *s = dl_cpu_scratch(be, DL_CPU_SCRATCH_CONV, bytes);
    if (!s)
        return dl_error(DL_ENOMEM, "conv (Winograd): out of memory for %zu bytes of scratch",
                        bytes);
    float *u = (float *)(((uintptr_t)s + 63) & ~(uintptr_t)63);
    j.u = u;
    j.scratch = u + uf;
    j.in = rounded(be, j.scratch + j.tasks * j.per_task, in, via, nin);
    filter_task f = {w, u, d->k, d->c, data, compute};
    dl_pool_for(dl_cpu(be)->pool, (size_t)d->k, 1, filter_fn, &f);
    dl_pool_for(dl_cpu(be)->pool, j.tasks, 1, block_task, &j);
    return DL_OK;
}

int dl_cpu_conv_wino_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                             const float *w, const float *b, dl_dtype compute)
{
    return wino_run(be, d, 0, y, x, w, b, 0, compute);
}

int dl_cpu_conv_wino_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                          const float *w, int set, dl_dtype compute)
{
    return wino_run(be, d, 1, dx, dy, w, NULL, !set, compute);
}

int dl_cpu_conv_wino_filter(dl_backend *be, const dl_conv_desc *d, float *dw, const float *dy,
                            const float *x, dl_dtype compute)
{
    dl_dtype via_x = via_for(d, compute, DL_CONV_X_ROUNDED);
    dl_dtype via_dy = via_for(d, compute, DL_CONV_DY_ROUNDED);
    size_t nx = (size_t)d->n * d->c * d->h * d->w, ny = (size_t)d->n * d->k * d->p * d->q;
    wino_job j = {.ci = d->c,
                  .co = d->k,
                  .h = d->h,
                  .w = d->w,
                  .oh = d->p,
                  .ow = d->q,
                  .off = d->pad,
                  .dw = dw};
    j.th = (j.oh + 1) / 2;
    j.tw = (j.ow + 1) / 2;
    j.tiles = (size_t)d->n * j.th * j.tw;
    size_t nt = FILTER_BLOCK_FLOATS / ((size_t)NXI * (j.ci + j.co)) / MR * MR;
    j.nt = nt < MR ? MR : nt > 96 ? 96 : (int)nt;
    /* chunks of images from the shape alone (the sums' order): 8 at most */
    int most = d->n < 8 ? d->n : 8;
    j.chunk_n = (d->n + most - 1) / most;
    j.chunks = (size_t)((d->n + j.chunk_n - 1) / j.chunk_n);
    j.per_task = (size_t)NXI * (xi_stride(j.nt, j.ci) + xi_stride(j.nt, j.co));
    size_t sums = (size_t)NXI * j.co * j.ci;
    size_t rf = (via_x == DL_F32 ? 0 : nx) + (via_dy == DL_F32 ? 0 : ny);
    size_t bytes = (j.chunks * (sums + j.per_task) + rf) * sizeof(float) + 64;
    char *s = dl_cpu_scratch(be, DL_CPU_SCRATCH_CONV, bytes);
    if (!s)
        return dl_error(DL_ENOMEM, "conv (Winograd): out of memory for %zu bytes of scratch",
                        bytes);
    j.parts = (float *)(((uintptr_t)s + 63) & ~(uintptr_t)63);
    j.scratch = j.parts + j.chunks * sums;
    float *r = j.scratch + j.chunks * j.per_task;
    j.in = rounded(be, r, x, via_x, nx);
    j.dy = rounded(be, r + (via_x == DL_F32 ? 0 : nx), dy, via_dy, ny);
    dl_pool_for(dl_cpu(be)->pool, j.chunks, 1, filter_chunk_task, &j);
    dl_pool_for(dl_cpu(be)->pool, (size_t)d->k, 1, filter_out_fn, &j);
    return DL_OK;
}

#else

int dl_cpu_conv_wino_fits(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, int dir)
{
    return 0;
}

int dl_cpu_conv_wino_takes(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, int dir)
{
    return 0;
}

int dl_cpu_conv_wino_forward(dl_backend *be, const dl_conv_desc *d, float *y, const float *x,
                             const float *w, const float *b, dl_dtype compute)
{
    return dl_error(DL_ERR, "conv (Winograd): not built for this CPU");
}

int dl_cpu_conv_wino_data(dl_backend *be, const dl_conv_desc *d, float *dx, const float *dy,
                          const float *w, int set, dl_dtype compute)
{
    return dl_error(DL_ERR, "conv (Winograd): not built for this CPU");
}

int dl_cpu_conv_wino_filter(dl_backend *be, const dl_conv_desc *d, float *dw, const float *dy,
                            const float *x, dl_dtype compute)
{
    return dl_error(DL_ERR, "conv (Winograd): not built for this CPU");
}

#endif
