/* cuda_kernels.cu - CUDA kernels: casts, elementwise ops, dropout, pooling (adaptive too), norms, embedding, losses, optimizers
 *
 * Each op mirrors the CPU backend's arithmetic (engine/cpu/) so results
 * agree to rounding; nvcc contracts a*b+c into FMAs where the CPU does
 * not, which moves the last bit. Reductions are deterministic (fixed
 * partition, fixed tree), except embedding_backward, whose atomic adds
 * make the order of repeated indices vary.
 */
#include <cuda_fp16.h>

#include "engine/cuda/cuda_internal.h"
#include "engine/cuda/cuda_attention.h"

extern "C" {
#include "engine/base/rng.h"
}

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* --- reductions ---------------------------------------------------------------- */

template <typename T> __device__ T warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block, returned to every thread (blockDim.x a multiple of
 * 32, at most 1024). Safe to call repeatedly. */
template <typename T> __device__ T block_sum(T v)
{
    __shared__ T sh[33];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* the previous call has read sh[32] */
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        T s = lane < nw ? sh[lane] : T(0);
        s = warp_sum(s);
        if (lane == 0)
            sh[32] = s;
    }
    __syncthreads();
    return sh[32];
}

/* stats[s] += sum of part[s * parts .. s * parts + parts) for s < nstats;
 * one block, so the order is fixed. */
__global__ void finish_stats_kernel(const double *part, int parts, int nstats, float *stats)
{
    for (int s = 0; s < nstats; s++) {
        double acc = 0;
        for (int i = threadIdx.x; i < parts; i += blockDim.x)
            acc += part[(size_t)s * parts + i];
        acc = block_sum(acc);
        if (threadIdx.x == 0)
            stats[s] += (float)acc;
    }
}

/* Blocks used by the partial-sum kernels over n elements: fixed for a
 * given n and device, so results repeat. */
static unsigned partial_blocks(dl_backend *be, size_t n)
{
    unsigned g = grid_for(be, n);
    return g > 1024 ? 1024 : g;
}

/* --- casts ----------------------------------------------------------------------- */

/* The same bit recipes as engine/half.h (round to nearest even, NaN kept
 * NaN with the same payload rule). */
__device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t f32_to_f16(float f)
{
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(((x >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(f)); /* IEEE RNE, overflow to Inf */
}

__device__ __forceinline__ float f16_to_f32(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

__global__ void cast_from_f32_kernel(uint16_t *d, const float *s, size_t n, int bf16)
{
    GRID_STRIDE(i, n) d[i] = bf16 ? f32_to_bf16(s[i]) : f32_to_f16(s[i]);
}

__global__ void cast_to_f32_kernel(float *d, const uint16_t *s, size_t n, int bf16)
{
    GRID_STRIDE(i, n) d[i] = bf16 ? bf16_to_f32(s[i]) : f16_to_f32(s[i]);
}

__global__ void round_copy_kernel(float *d, const float *s, size_t n, int bf16)
{
    GRID_STRIDE(i, n)
    d[i] = bf16 ? bf16_to_f32(f32_to_bf16(s[i])) : f16_to_f32(f32_to_f16(s[i]));
}

/* dst = src rounded through bf16 or f16 (staging for low-precision convs). */
int cuda_round_copy(dl_backend *be, float *dst, const float *src, dl_dtype via, size_t n)
{
    if (n == 0)
        return DL_OK;
    round_copy_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(dst, src, n,
                                                                        via == DL_BF16);
    LAUNCH_CHECK("round_copy");
    return DL_OK;
}

static size_t dtype_bytes(dl_dtype t)
{
    switch (t) {
    case DL_F32:
    case DL_I32: return 4;
    case DL_BF16:
    case DL_F16: return 2;
    case DL_U8: return 1;
    default: return 0;
    }
}

static const char *dtype_str(dl_dtype t)
{
    static const char *names[] = {"f32", "bf16", "f16", "u8", "i32"};
    return (unsigned)t < 5 ? names[t] : "?";
}

int cuda_cast(dl_backend *be, void *dst, dl_dtype dt, const void *src, dl_dtype st, size_t n)
{
    int ok_pair = dt == st || (st == DL_F32 && (dt == DL_BF16 || dt == DL_F16)) ||
                  (dt == DL_F32 && (st == DL_BF16 || st == DL_F16));
    if (!ok_pair || !dtype_bytes(dt))
        return cuda_error(DL_EUNSUPPORTED, "cast from %s to %s is not supported", dtype_str(st),
                          dtype_str(dt));
    if (n == 0)
        return DL_OK;
    cudaStream_t s = CTX(be)->stream;
    if (dt == st) {
        if (dst != src)
            CUDA_TRY(cudaMemcpyAsync(dst, src, n * dtype_bytes(dt), cudaMemcpyDefault, s));
        return DL_OK;
    }
    if (st == DL_F32)
        cast_from_f32_kernel<<<grid_for(be, n), THREADS, 0, s>>>(
            (uint16_t *)dst, (const float *)src, n, dt == DL_BF16);
    else
        cast_to_f32_kernel<<<grid_for(be, n), THREADS, 0, s>>>((float *)dst, (const uint16_t *)src,
                                                               n, st == DL_BF16);
    LAUNCH_CHECK("cast");
    return DL_OK;
}

int cuda_round_through(dl_backend *be, float *dst, const float *src, dl_dtype via, size_t n)
{
    if (via != DL_F32 && via != DL_BF16 && via != DL_F16)
        return cuda_error(DL_EUNSUPPORTED, "cannot round through %s", dtype_str(via));
    if (n == 0 || (via == DL_F32 && dst == src))
        return DL_OK;
    if (via == DL_F32) {
        CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, CTX(be)->stream));
        return DL_OK;
    }
    return cuda_round_copy(be, dst, src, via, n);
}

/* --- fill, input conversion, bias -------------------------------------------------- */

__global__ void fill_kernel(float *d, float v, size_t n) { GRID_STRIDE(i, n) d[i] = v; }

int cuda_fill(dl_backend *be, float *dst, float value, size_t n)
{
    if (n == 0)
        return DL_OK;
    fill_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(dst, value, n);
    LAUNCH_CHECK("fill");
    return DL_OK;
}

/* ms = [mean[channels], std[channels]] on the device, or NULL. */
__global__ void input_kernel(float *dst, const void *src, int type, size_t n, size_t per_row,
                             size_t plane, float scale, const float *ms, int channels)
{
    GRID_STRIDE(i, n)
    {
        float v;
        if (type == DL_U8)
            v = (float)((const uint8_t *)src)[i];
        else if (type == DL_I32)
            v = (float)((const int32_t *)src)[i];
        else
            v = ((const float *)src)[i];
        v *= scale;
        if (ms) {
            size_t ch = (i % per_row) / plane;
            v = (v - ms[ch]) / ms[channels + ch];
        }
        dst[i] = v;
    }
}

int cuda_input_to_f32(dl_backend *be, float *dst, const void *src, dl_dtype type, size_t rows,
                      int channels, size_t plane, float scale, const float *mean, const float *std)
{
    if (type != DL_U8 && type != DL_I32 && type != DL_F32)
        return cuda_error(DL_EUNSUPPORTED, "input dtype %s is not supported (u8, i32, f32)",
                          dtype_str(type));
    if (channels < 1) {
        channels = 1;
        mean = std = NULL;
    }
    size_t n = rows * (size_t)channels * plane;
    if (n == 0)
        return DL_OK;
    float *ms = NULL;
    if (mean) {
        /* pageable host arrays: cudaMemcpyAsync stages them before returning */
        size_t bytes = 2 * (size_t)channels * sizeof(float);
        ms = (float *)cuda_scratch(be, bytes);
        if (!ms)
            return DL_ENOMEM;
        float *host = (float *)malloc(bytes);
        if (!host)
            return cuda_error(DL_ENOMEM, "cuda: out of host memory");
        for (int c = 0; c < channels; c++) {
            host[c] = mean[c];
            host[channels + c] = std ? std[c] : 1.0f;
        }
        cudaError_t e = cudaMemcpyAsync(ms, host, bytes, cudaMemcpyHostToDevice, CTX(be)->stream);
        free(host);
        CUDA_TRY(e);
    }
    input_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(
        dst, src, (int)type, n, (size_t)channels * plane, plane, scale, ms, channels);
    LAUNCH_CHECK("input_to_f32");
    return DL_OK;
}

__global__ void bias_add_kernel(float *y, const float *b, size_t n, int cols, int inner)
{
    GRID_STRIDE(i, n) y[i] += b[(i / (size_t)inner) % (size_t)cols];
}

int cuda_bias_add(dl_backend *be, float *y, const float *b, int rows, int cols, int inner)
{
    if (rows <= 0 || cols <= 0 || inner <= 0)
        return DL_OK;
    size_t n = (size_t)rows * cols * inner;
    bias_add_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(y, b, n, cols, inner);
    LAUNCH_CHECK("bias_add");
    return DL_OK;
}

/* Column sums of x [rows, cols] (inner == 1): a 32-column tile per block,
 * 8 row lanes, then a fixed tree. out[c] += sum. */
__global__ void column_sum_kernel(float *out, const float *x, int rows, int cols)
{
    __shared__ float sh[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0;
    if (c < cols)
        for (int r = threadIdx.y; r < rows; r += 8)
            s += x[(size_t)r * cols + c];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = 0;
        for (int k = 0; k < 8; k++)
            t += sh[k][threadIdx.x];
        out[c] += t;
    }
}

/* db[c] += sum of dy[r, c, i]: one block per channel. */
__global__ void bias_grad_inner_kernel(float *db, const float *dy, int rows, int cols, int inner)
{
    int c = blockIdx.x;
    size_t per = (size_t)rows * inner;
    double s = 0;
    for (size_t j = threadIdx.x; j < per; j += blockDim.x) {
        size_t r = j / inner, i = j % inner;
        s += dy[(r * cols + c) * inner + i];
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        db[c] += (float)s;
}

int cuda_bias_grad(dl_backend *be, float *db, const float *dy, int rows, int cols, int inner)
{
    if (rows <= 0 || cols <= 0 || inner <= 0)
        return DL_OK;
    cudaStream_t s = CTX(be)->stream;
    if (inner == 1)
        column_sum_kernel<<<(cols + 31) / 32, dim3(32, 8), 0, s>>>(db, dy, rows, cols);
    else
        bias_grad_inner_kernel<<<cols, THREADS, 0, s>>>(db, dy, rows, cols, inner);
    LAUNCH_CHECK("bias_grad");
    return DL_OK;
}

/* --- activations and arithmetic ------------------------------------------------------- */

__global__ void act_fwd_kernel(int kind, float *y, const float *x, size_t n)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        switch (kind) {
        case DL_ACT_RELU: y[i] = v > 0 ? v : 0; break;
        case DL_ACT_GELU: y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118f)); break;
        case DL_ACT_TANH: y[i] = tanhf(v); break;
        case DL_ACT_SILU: y[i] = v / (1.0f + expf(-v)); break;
        default: y[i] = 1.0f / (1.0f + expf(-v)); break;
        }
    }
}

__global__ void act_bwd_kernel(int kind, float *dx, const float *x, const float *y, const float *dy,
                               size_t n)
{
    GRID_STRIDE(i, n)
    {
        switch (kind) {
        case DL_ACT_RELU: dx[i] += x[i] > 0 ? dy[i] : 0; break;
        case DL_ACT_GELU: {
            float v = x[i];
            float cdf = 0.5f * (1.0f + erff(v * 0.70710678118f));
            float pdf = 0.39894228040f * expf(-0.5f * v * v);
            dx[i] += dy[i] * (cdf + v * pdf);
            break;
        }
        case DL_ACT_TANH: dx[i] += dy[i] * (1.0f - y[i] * y[i]); break;
        case DL_ACT_SILU: { /* s(x) (1 + x (1 - s(x))) */
            float v = x[i], sg = 1.0f / (1.0f + expf(-v));
            dx[i] += dy[i] * sg * (1.0f + v * (1.0f - sg));
            break;
        }
        default: dx[i] += dy[i] * y[i] * (1.0f - y[i]); break;
        }
    }
}

static int check_act(dl_act kind)
{
    if (kind != DL_ACT_RELU && kind != DL_ACT_GELU && kind != DL_ACT_TANH &&
        kind != DL_ACT_SIGMOID && kind != DL_ACT_SILU)
        return cuda_error(DL_EINVAL, "unknown activation %d", (int)kind);
    return DL_OK;
}

int cuda_act_forward(dl_backend *be, dl_act kind, float *y, const float *x, size_t n)
{
    DL_TRY(check_act(kind));
    if (n == 0)
        return DL_OK;
    act_fwd_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>((int)kind, y, x, n);
    LAUNCH_CHECK("act_forward");
    return DL_OK;
}

int cuda_act_backward(dl_backend *be, dl_act kind, float *dx, const float *x, const float *y,
                      const float *dy, size_t n)
{
    DL_TRY(check_act(kind));
    if (n == 0)
        return DL_OK;
    act_bwd_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>((int)kind, dx, x, y, dy, n);
    LAUNCH_CHECK("act_backward");
    return DL_OK;
}

__global__ void add_kernel(float *y, const float *a, const float *b, size_t n)
{
    GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void axpy_kernel(float *y, float alpha, const float *x, size_t n)
{
    GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

__global__ void scale_kernel(float *x, float alpha, size_t n) { GRID_STRIDE(i, n) x[i] *= alpha; }

int cuda_add(dl_backend *be, float *y, const float *a, const float *b, size_t n)
{
    if (n == 0)
        return DL_OK;
    add_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(y, a, b, n);
    LAUNCH_CHECK("add");
    return DL_OK;
}

int cuda_axpy(dl_backend *be, float *y, float alpha, const float *x, size_t n)
{
    if (n == 0)
        return DL_OK;
    axpy_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(y, alpha, x, n);
    LAUNCH_CHECK("axpy");
    return DL_OK;
}

int cuda_scale(dl_backend *be, float *x, float alpha, size_t n)
{
    if (n == 0)
        return DL_OK;
    scale_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(x, alpha, n);
    LAUNCH_CHECK("scale");
    return DL_OK;
}

/* --- dropout ------------------------------------------------------------------------ */

/* Element i is kept when its hash bits reach thr (dl_rng_hash32 under
 * the key of i's 2^32 segment: k0 for the first, drawn here beyond it),
 * the CPU's rule through the same rng.h functions, so masks equal. */
__global__ void dropout_kernel(float *y, const float *x, size_t n, uint32_t thr, float keep_scale,
                               dl_rng_hkey k0, uint64_t seed, uint64_t stream, uint64_t counter,
                               int backward)
{
    GRID_STRIDE(i, n)
    {
        uint32_t hi = (uint32_t)((uint64_t)i >> 32);
        dl_rng_hkey k = hi == 0 ? k0 : dl_rng_hash_key(seed, stream, counter, hi);
        float m = dl_rng_hash32(k, (uint32_t)i) >= thr ? keep_scale : 0.0f;
        if (backward)
            y[i] += m * x[i];
        else
            y[i] = m * x[i];
    }
}

static int dropout(dl_backend *be, int backward, float *y, const float *x, size_t n, float p,
                   uint64_t seed, uint64_t stream, uint64_t counter)
{
    if (!(p >= 0 && p < 1))
        return cuda_error(DL_EINVAL, "dropout probability %g is outside [0, 1)", (double)p);
    if (n == 0)
        return DL_OK;
    float keep_scale = 1.0f / (1.0f - p);
    dl_rng_hkey k0 = dl_rng_hash_key(seed, stream, counter, 0);
    dropout_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(
        y, x, n, dl_rng_threshold(p), keep_scale, k0, seed, stream, counter, backward);
    LAUNCH_CHECK("dropout");
    return DL_OK;
}

int cuda_dropout_forward(dl_backend *be, float *y, const float *x, size_t n, float p, uint64_t seed,
                         uint64_t stream, uint64_t counter)
{
    return dropout(be, 0, y, x, n, p, seed, stream, counter);
}

int cuda_dropout_backward(dl_backend *be, float *dx, const float *dy, size_t n, float p,
                          uint64_t seed, uint64_t stream, uint64_t counter)
{
    return dropout(be, 1, dx, dy, n, p, seed, stream, counter);
}

/* --- pooling ---------------------------------------------------------------------------- */

/* Window of output (oh, ow): rows [h0, h1), cols [w0, w1) clipped to the
 * input; avg divides by the window clipped to the padded input
 * (count_include_pad, as PyTorch's default). */
struct pool_geom {
    int n, c, h, w, size, stride, pad, p, q;
};

__device__ __forceinline__ void pool_window(const pool_geom &g, int oh, int ow, int *h0, int *h1,
                                            int *w0, int *w1, int *count)
{
    int hs = oh * g.stride - g.pad, ws = ow * g.stride - g.pad;
    int he = min(hs + g.size, g.h + g.pad), we = min(ws + g.size, g.w + g.pad);
    *count = (he - hs) * (we - ws);
    *h0 = max(hs, 0);
    *w0 = max(ws, 0);
    *h1 = min(he, g.h);
    *w1 = min(we, g.w);
}

__global__ void pool_fwd_kernel(pool_geom g, int is_max, float *y, const float *x)
{
    size_t total = (size_t)g.n * g.c * g.p * g.q;
    GRID_STRIDE(o, total)
    {
        int ow = (int)(o % g.q), oh = (int)(o / g.q % g.p);
        size_t plane = o / ((size_t)g.p * g.q);
        const float *xp = x + plane * g.h * g.w;
        int h0, h1, w0, w1, count;
        pool_window(g, oh, ow, &h0, &h1, &w0, &w1, &count);
        if (is_max) {
            float m = -INFINITY;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                    float v = xp[ih * g.w + iw];
                    if (v > m || isnan(v)) /* NaN propagates, as on the CPU */
                        m = v;
                }
            y[o] = m;
        } else {
            float s = 0;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++)
                    s += xp[ih * g.w + iw];
            y[o] = s / (float)count;
        }
    }
}

/* Gather form: each input element collects from the windows that contain
 * it, so no atomics and a fixed order. For max, a window routes its
 * gradient to its first element (row-major) equal to the window's output. */
__global__ void pool_bwd_kernel(pool_geom g, int is_max, float *dx, const float *dy, const float *x,
                                const float *y)
{
    size_t total = (size_t)g.n * g.c * g.h * g.w;
    GRID_STRIDE(e, total)
    {
        int iw = (int)(e % g.w), ih = (int)(e / g.w % g.h);
        size_t plane = e / ((size_t)g.h * g.w);
        const float *xp = x + plane * g.h * g.w;
        const float *yp = y ? y + plane * g.p * g.q : NULL;
        const float *dyp = dy + plane * g.p * g.q;
        /* outputs whose window [oh*stride - pad, +size) holds ih */
        int oh_lo = ih + g.pad - g.size + 1;
        oh_lo = oh_lo <= 0 ? 0 : (oh_lo + g.stride - 1) / g.stride;
        int oh_hi = min((ih + g.pad) / g.stride, g.p - 1);
        int ow_lo = iw + g.pad - g.size + 1;
        ow_lo = ow_lo <= 0 ? 0 : (ow_lo + g.stride - 1) / g.stride;
        int ow_hi = min((iw + g.pad) / g.stride, g.q - 1);
        float acc = 0;
        for (int oh = oh_lo; oh <= oh_hi; oh++)
            for (int ow = ow_lo; ow <= ow_hi; ow++) {
                int h0, h1, w0, w1, count;
                pool_window(g, oh, ow, &h0, &h1, &w0, &w1, &count);
                size_t o = (size_t)oh * g.q + ow;
                if (is_max) {
                    float m = yp[o];
                    int fh = -1, fw = -1;
                    for (int a = h0; a < h1 && fh < 0; a++)
                        for (int b = w0; b < w1; b++)
                            if (xp[a * g.w + b] == m) {
                                fh = a;
                                fw = b;
                                break;
                            }
                    if (fh == ih && fw == iw)
                        acc += dyp[o];
                } else {
                    acc += dyp[o] / (float)count;
                }
            }
        dx[e] += acc;
    }
}

static int pool_check(dl_pool_kind kind, const dl_pool_desc *d, pool_geom *g)
{
    if (kind != DL_POOL_MAX && kind != DL_POOL_AVG)
        return cuda_error(DL_EINVAL, "unknown pooling kind %d", (int)kind);
    if (d->n <= 0 || d->c <= 0 || d->h <= 0 || d->w <= 0 || d->size <= 0 || d->stride <= 0 ||
        d->pad < 0 || 2 * d->pad > d->size)
        return cuda_error(DL_EINVAL,
                          "pool: bad descriptor n %d c %d h %d w %d size %d stride "
                          "%d pad %d",
                          d->n, d->c, d->h, d->w, d->size, d->stride, d->pad);
    if (d->p != (d->h + 2 * d->pad - d->size) / d->stride + 1 ||
        d->q != (d->w + 2 * d->pad - d->size) / d->stride + 1 || d->p <= 0 || d->q <= 0)
        return cuda_error(DL_ESHAPE,
                          "pool: output %dx%d does not match input %dx%d, window "
                          "%d, stride %d, pad %d",
                          d->p, d->q, d->h, d->w, d->size, d->stride, d->pad);
    *g = pool_geom{d->n, d->c, d->h, d->w, d->size, d->stride, d->pad, d->p, d->q};
    return DL_OK;
}

int cuda_pool_forward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *y,
                      const float *x)
{
    pool_geom g;
    DL_TRY(pool_check(kind, d, &g));
    size_t total = (size_t)d->n * d->c * d->p * d->q;
    if (total == 0)
        return DL_OK;
    pool_fwd_kernel<<<grid_for(be, total), THREADS, 0, CTX(be)->stream>>>(g, kind == DL_POOL_MAX, y,
                                                                          x);
    LAUNCH_CHECK("pool_forward");
    return DL_OK;
}

int cuda_pool_backward(dl_backend *be, dl_pool_kind kind, const dl_pool_desc *d, float *dx,
                       const float *dy, const float *x, const float *y)
{
    pool_geom g;
    DL_TRY(pool_check(kind, d, &g));
    size_t total = (size_t)d->n * d->c * d->h * d->w;
    if (total == 0)
        return DL_OK;
    pool_bwd_kernel<<<grid_for(be, total), THREADS, 0, CTX(be)->stream>>>(g, kind == DL_POOL_MAX,
                                                                          dx, dy, x, y);
    LAUNCH_CHECK("pool_backward");
    return DL_OK;
}

/* --- adaptive average pooling --------------------------------------------------------- */

/* PyTorch's window of output i over an input of `in` cells, out outputs. */
__device__ __forceinline__ int awin_lo(int i, int in, int out)
{
    return (int)((long long)i * in / out);
}
__device__ __forceinline__ int awin_hi(int i, int in, int out)
{
    return (int)(((long long)(i + 1) * in + out - 1) / out);
}

/* One thread per output: the mean of its window. */
__global__ void apool_fwd_kernel(pool_geom g, float *y, const float *x)
{
    size_t total = (size_t)g.n * g.c * g.p * g.q;
    GRID_STRIDE(i, total)
    {
        int ow = (int)(i % g.q), oh = (int)(i / g.q % g.p);
        size_t plane = i / ((size_t)g.p * g.q);
        int h0 = awin_lo(oh, g.h, g.p), h1 = awin_hi(oh, g.h, g.p);
        int w0 = awin_lo(ow, g.w, g.q), w1 = awin_hi(ow, g.w, g.q);
        const float *xp = x + plane * g.h * g.w;
        float s = 0;
        for (int r = h0; r < h1; r++)
            for (int c = w0; c < w1; c++)
                s += xp[r * g.w + c];
        y[i] = s / (float)((h1 - h0) * (w1 - w0));
    }
}

/* One thread per input cell: the shares of the outputs whose windows hold
 * it (rows [r*p/h - 1, (r+1)*p/h + 1] cover them; the test keeps the exact
 * ones). */
__global__ void apool_bwd_kernel(pool_geom g, float *dx, const float *dy)
{
    size_t total = (size_t)g.n * g.c * g.h * g.w;
    GRID_STRIDE(i, total)
    {
        int iw = (int)(i % g.w), ih = (int)(i / g.w % g.h);
        size_t plane = i / ((size_t)g.h * g.w);
        const float *dyp = dy + plane * g.p * g.q;
        int i0 = max(0, (int)((long long)ih * g.p / g.h) - 1);
        int i1 = min(g.p - 1, (int)((long long)(ih + 1) * g.p / g.h) + 1);
        int j0 = max(0, (int)((long long)iw * g.q / g.w) - 1);
        int j1 = min(g.q - 1, (int)((long long)(iw + 1) * g.q / g.w) + 1);
        float s = 0;
        for (int oh = i0; oh <= i1; oh++) {
            int h0 = awin_lo(oh, g.h, g.p), h1 = awin_hi(oh, g.h, g.p);
            if (ih < h0 || ih >= h1)
                continue;
            for (int ow = j0; ow <= j1; ow++) {
                int w0 = awin_lo(ow, g.w, g.q), w1 = awin_hi(ow, g.w, g.q);
                if (iw >= w0 && iw < w1)
                    s += dyp[oh * g.q + ow] / (float)((h1 - h0) * (w1 - w0));
            }
        }
        dx[i] += s;
    }
}

static int apool_check(const dl_pool_desc *d, pool_geom *g)
{
    if (d->n < 1 || d->c < 1 || d->h < 1 || d->w < 1 || d->p < 1 || d->q < 1)
        return cuda_error(DL_EINVAL, "adaptive pool: bad descriptor n %d c %d %dx%d -> %dx%d", d->n,
                          d->c, d->h, d->w, d->p, d->q);
    *g = pool_geom{d->n, d->c, d->h, d->w, 0, 0, 0, d->p, d->q};
    return DL_OK;
}

int cuda_adaptive_avgpool_forward(dl_backend *be, const dl_pool_desc *d, float *y, const float *x)
{
    pool_geom g;
    DL_TRY(apool_check(d, &g));
    size_t total = (size_t)d->n * d->c * d->p * d->q;
    apool_fwd_kernel<<<grid_for(be, total), THREADS, 0, CTX(be)->stream>>>(g, y, x);
    LAUNCH_CHECK("adaptive_avgpool_forward");
    return DL_OK;
}

int cuda_adaptive_avgpool_backward(dl_backend *be, const dl_pool_desc *d, float *dx,
                                   const float *dy)
{
    pool_geom g;
    DL_TRY(apool_check(d, &g));
    size_t total = (size_t)d->n * d->c * d->h * d->w;
    apool_bwd_kernel<<<grid_for(be, total), THREADS, 0, CTX(be)->stream>>>(g, dx, dy);
    LAUNCH_CHECK("adaptive_avgpool_backward");
    return DL_OK;
}

/* --- batch norm ---------------------------------------------------------------------------- */

#define NORM_THREADS 512

/* Element j of channel ch in x [n, c, inner]. */
__device__ __forceinline__ size_t bn_at(size_t j, int ch, int c, int inner)
{
    size_t r = j / inner, i = j % inner;
    return (r * c + ch) * inner + i;
}

/* One block per channel: mean, then the biased variance about it (two
 * passes, in double), then y. */
__global__ void bn_train_kernel(int n, int c, int inner, float momentum, float eps, float *y,
                                const float *x, const float *gamma, const float *beta, float *rmean,
                                float *rvar, float *smean, float *sinv)
{
    int ch = blockIdx.x;
    size_t cnt = (size_t)n * inner;
    double s = 0;
    for (size_t j = threadIdx.x; j < cnt; j += blockDim.x)
        s += x[bn_at(j, ch, c, inner)];
    double mean = block_sum(s) / (double)cnt;
    double q = 0;
    for (size_t j = threadIdx.x; j < cnt; j += blockDim.x) {
        double d = x[bn_at(j, ch, c, inner)] - mean;
        q += d * d;
    }
    double var = block_sum(q) / (double)cnt;
    float inv = (float)(1.0 / sqrt(var + (double)eps));
    float fmean = (float)mean;
    if (threadIdx.x == 0) {
        if (smean)
            smean[ch] = fmean;
        if (sinv)
            sinv[ch] = inv;
        if (rmean)
            rmean[ch] = (1.0f - momentum) * rmean[ch] + momentum * fmean;
        if (rvar) {
            double unbiased = cnt > 1 ? var * (double)cnt / (double)(cnt - 1) : var;
            rvar[ch] = (1.0f - momentum) * rvar[ch] + momentum * (float)unbiased;
        }
    }
    float g = gamma ? gamma[ch] : 1.0f, b = beta ? beta[ch] : 0.0f;
    float scale = g * inv, shift = b - fmean * scale;
    for (size_t j = threadIdx.x; j < cnt; j += blockDim.x) {
        size_t at = bn_at(j, ch, c, inner);
        y[at] = x[at] * scale + shift;
    }
}

__global__ void bn_eval_kernel(size_t total, int c, int inner, float eps, float *y, const float *x,
                               const float *gamma, const float *beta, const float *rmean,
                               const float *rvar)
{
    GRID_STRIDE(i, total)
    {
        int ch = (int)((i / (size_t)inner) % (size_t)c);
        float inv = (float)(1.0 / sqrt((double)rvar[ch] + (double)eps));
        float g = gamma ? gamma[ch] : 1.0f, b = beta ? beta[ch] : 0.0f;
        float scale = g * inv, shift = b - rmean[ch] * scale;
        y[i] = x[i] * scale + shift;
    }
}

int cuda_batchnorm_forward(dl_backend *be, int training, int n, int c, int inner, float momentum,
                           float eps, float *y, const float *x, const float *gamma,
                           const float *beta, float *running_mean, float *running_var,
                           float *save_mean, float *save_invstd)
{
    if (n <= 0 || c <= 0 || inner <= 0)
        return cuda_error(DL_EINVAL, "batchnorm_forward: bad shape [%d, %d, %d]", n, c, inner);
    cudaStream_t s = CTX(be)->stream;
    if (training) {
        bn_train_kernel<<<c, NORM_THREADS, 0, s>>>(n, c, inner, momentum, eps, y, x, gamma, beta,
                                                   running_mean, running_var, save_mean,
                                                   save_invstd);
    } else {
        if (!running_mean || !running_var)
            return cuda_error(DL_EINVAL, "batchnorm in eval mode needs running statistics");
        size_t total = (size_t)n * c * inner;
        bn_eval_kernel<<<grid_for(be, total), THREADS, 0, s>>>(total, c, inner, eps, y, x, gamma,
                                                               beta, running_mean, running_var);
    }
    LAUNCH_CHECK("batchnorm_forward");
    return DL_OK;
}

/* dx += gamma invstd (dy - mean(dy) - xhat mean(dy xhat)); dbeta += sum dy;
 * dgamma += sum dy xhat. One block per channel. */
__global__ void bn_bwd_kernel(int n, int c, int inner, float *dx, float *dgamma, float *dbeta,
                              const float *dy, const float *x, const float *gamma,
                              const float *smean, const float *sinv)
{
    int ch = blockIdx.x;
    size_t cnt = (size_t)n * inner;
    float mean = smean[ch], inv = sinv[ch];
    double a = 0, b = 0;
    for (size_t j = threadIdx.x; j < cnt; j += blockDim.x) {
        size_t at = bn_at(j, ch, c, inner);
        float g = dy[at];
        a += g;
        /* xhat in double, as the CPU forms it */
        b += (double)g * (((double)x[at] - (double)mean) * (double)inv);
    }
    double sdy = block_sum(a);
    double sdyx = block_sum(b);
    if (threadIdx.x == 0) {
        if (dbeta)
            dbeta[ch] += (float)sdy;
        if (dgamma)
            dgamma[ch] += (float)sdyx;
    }
    if (!dx)
        return;
    float k = (gamma ? gamma[ch] : 1.0f) * inv;
    float mdy = (float)(sdy / (double)cnt), mdyx = (float)(sdyx / (double)cnt);
    for (size_t j = threadIdx.x; j < cnt; j += blockDim.x) {
        size_t at = bn_at(j, ch, c, inner);
        float xhat = (x[at] - mean) * inv;
        dx[at] += k * (dy[at] - mdy - xhat * mdyx);
    }
}

int cuda_batchnorm_backward(dl_backend *be, int n, int c, int inner, float *dx, float *dgamma,
                            float *dbeta, const float *dy, const float *x, const float *gamma,
                            const float *save_mean, const float *save_invstd)
{
    if (n <= 0 || c <= 0 || inner <= 0)
        return cuda_error(DL_EINVAL, "batchnorm_backward: bad shape [%d, %d, %d]", n, c, inner);
    bn_bwd_kernel<<<c, NORM_THREADS, 0, CTX(be)->stream>>>(n, c, inner, dx, dgamma, dbeta, dy, x,
                                                           gamma, save_mean, save_invstd);
    LAUNCH_CHECK("batchnorm_backward");
    return DL_OK;
}

/* --- layer norm --------------------------------------------------------------------------- */

#define LN_THREADS 256

__global__ void ln_fwd_kernel(int cols, float eps, float *y, const float *x, const float *gamma,
                              const float *beta, float *smean, float *sinv)
{
    size_t row = blockIdx.x;
    const float *xr = x + row * cols;
    float *yr = y + row * cols;
    double s = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        s += xr[j];
    double mean = block_sum(s) / cols;
    double q = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        double d = xr[j] - mean;
        q += d * d;
    }
    double var = block_sum(q) / cols;
    float inv = (float)(1.0 / sqrt(var + (double)eps));
    float fmean = (float)mean;
    if (threadIdx.x == 0) {
        if (smean)
            smean[row] = fmean;
        if (sinv)
            sinv[row] = inv;
    }
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = (xr[j] - fmean) * inv;
        yr[j] = v * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
    }
}

int cuda_layernorm_forward(dl_backend *be, int rows, int cols, float eps, float *y, const float *x,
                           const float *gamma, const float *beta, float *save_mean,
                           float *save_invstd)
{
    if (rows <= 0 || cols <= 0)
        return cuda_error(DL_EINVAL, "layernorm_forward: bad shape [%d, %d]", rows, cols);
    ln_fwd_kernel<<<rows, LN_THREADS, 0, CTX(be)->stream>>>(cols, eps, y, x, gamma, beta, save_mean,
                                                            save_invstd);
    LAUNCH_CHECK("layernorm_forward");
    return DL_OK;
}

/* dx += invstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma; a block per row. */
__global__ void ln_bwd_dx_kernel(int cols, float *dx, const float *dy, const float *x,
                                 const float *gamma, const float *smean, const float *sinv)
{
    size_t row = blockIdx.x;
    const float *xr = x + row * cols, *dyr = dy + row * cols;
    float mean = smean[row], inv = sinv[row];
    double a = 0, b = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        double g = (double)dyr[j] * (gamma ? gamma[j] : 1.0f); /* in double, as on the CPU */
        a += g;
        b += g * ((xr[j] - mean) * inv);
    }
    float mg = (float)(block_sum(a) / cols);
    float mgx = (float)(block_sum(b) / cols);
    float *dxr = dx + row * cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        float g = dyr[j] * (gamma ? gamma[j] : 1.0f);
        float xhat = (xr[j] - mean) * inv;
        dxr[j] += inv * (g - mg - xhat * mgx);
    }
}

/* dgamma[j] += sum_r dy xhat, dbeta[j] += sum_r dy: 32 columns per block. */
__global__ void ln_bwd_params_kernel(int rows, int cols, float *dgamma, float *dbeta,
                                     const float *dy, const float *x, const float *smean,
                                     const float *sinv)
{
    __shared__ double sg[8][33], sb[8][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    double a = 0, b = 0;
    if (j < cols)
        for (int r = threadIdx.y; r < rows; r += 8) {
            size_t at = (size_t)r * cols + j;
            float g = dy[at];
            a += g * ((x[at] - smean[r]) * sinv[r]);
            b += g;
        }
    sg[threadIdx.y][threadIdx.x] = a;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        double ta = 0, tb = 0;
        for (int k = 0; k < 8; k++) {
            ta += sg[k][threadIdx.x];
            tb += sb[k][threadIdx.x];
        }
        if (dgamma)
            dgamma[j] += (float)ta;
        if (dbeta)
            dbeta[j] += (float)tb;
    }
}

int cuda_layernorm_backward(dl_backend *be, int rows, int cols, float *dx, float *dgamma,
                            float *dbeta, const float *dy, const float *x, const float *gamma,
                            const float *save_mean, const float *save_invstd)
{
    if (rows <= 0 || cols <= 0)
        return cuda_error(DL_EINVAL, "layernorm_backward: bad shape [%d, %d]", rows, cols);
    cudaStream_t s = CTX(be)->stream;
    if (dx) {
        ln_bwd_dx_kernel<<<rows, LN_THREADS, 0, s>>>(cols, dx, dy, x, gamma, save_mean,
                                                     save_invstd);
        LAUNCH_CHECK("layernorm_backward");
    }
    if (dgamma || dbeta) {
        ln_bwd_params_kernel<<<(cols + 31) / 32, dim3(32, 8), 0, s>>>(rows, cols, dgamma, dbeta, dy,
                                                                      x, save_mean, save_invstd);
        LAUNCH_CHECK("layernorm_backward");
    }
    return DL_OK;
}

/* --- embedding ------------------------------------------------------------------------------ */

/* A bad value is reported through the mapped flag cells (plain stores: any
 * one writer's value is fine) and the op's output row is left zero or
 * untouched; the error surfaces at the next sync or to_host. */
__device__ __forceinline__ int embed_index(float v, int vocab, int *flags, float *badf)
{
    if (!(v >= 0 && v < (float)vocab) || v != floorf(v)) {
        flags[1] = vocab;
        *badf = v;
        __threadfence_system();
        flags[0] = FLAG_EMBED_INDEX;
        return -1;
    }
    return (int)v;
}

__global__ void embed_fwd_kernel(size_t total, int dim, int vocab, float *y, const float *idx,
                                 const float *table, int *flags, float *badf)
{
    GRID_STRIDE(e, total)
    {
        size_t i = e / dim, d = e % dim;
        int k = embed_index(idx[i], vocab, flags, badf);
        y[e] = k < 0 ? 0.0f : table[(size_t)k * dim + d];
    }
}

__global__ void embed_bwd_kernel(size_t total, int dim, int vocab, float *dtable, const float *idx,
                                 const float *dy, int *flags, float *badf)
{
    GRID_STRIDE(e, total)
    {
        size_t i = e / dim, d = e % dim;
        int k = embed_index(idx[i], vocab, flags, badf);
        if (k >= 0)
            atomicAdd(&dtable[(size_t)k * dim + d], dy[e]);
    }
}

int cuda_embedding_forward(dl_backend *be, int n, int vocab, int dim, float *y, const float *idx,
                           const float *table)
{
    size_t total = (size_t)n * (dim > 0 ? dim : 0);
    if (n <= 0 || dim <= 0)
        return DL_OK;
    cuda_ctx *c = CTX(be);
    embed_fwd_kernel<<<grid_for(be, total), THREADS, 0, c->stream>>>(
        total, dim, vocab, y, idx, table, c->dev_flags, c->dev_badf);
    LAUNCH_CHECK("embedding_forward");
    return DL_OK;
}

int cuda_embedding_backward(dl_backend *be, int n, int vocab, int dim, float *dtable,
                            const float *idx, const float *dy)
{
    if (n <= 0 || dim <= 0)
        return DL_OK;
    size_t total = (size_t)n * dim;
    cuda_ctx *c = CTX(be);
    embed_bwd_kernel<<<grid_for(be, total), THREADS, 0, c->stream>>>(total, dim, vocab, dtable, idx,
                                                                     dy, c->dev_flags, c->dev_badf);
    LAUNCH_CHECK("embedding_backward");
    return DL_OK;
}

/* --- losses ------------------------------------------------------------------------------------ */

/* One row of logits z [classes] with label y, by the 32 lanes of a warp:
 * max and first argmax, then the sums, then the gradient d (may be NULL)
 * += grad_scale * dloss/dz. Returns the row's loss to every lane and sets
 * *hit when the argmax is the label. */
__device__ double xent_row_warp(const float *z, int classes, int y, float smoothing,
                                float grad_scale, float *d, int lane, int *hit)
{
    /* each lane scans its strided elements keeping the first maximum */
    float mx = -INFINITY;
    int arg = 0x7fffffff;
    for (int c = lane; c < classes; c += 32) {
        float v = z[c];
        if (arg == 0x7fffffff || v > mx) {
            mx = v;
            arg = c;
        }
    }
    /* lanes hold (max, first index among their elements); combine keeping
     * the larger value, and on ties the smaller index: the CPU's first max */
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, mx, o);
        int oa = __shfl_xor_sync(0xffffffffu, arg, o);
        if (oa != 0x7fffffff && (arg == 0x7fffffff || om > mx || (om == mx && oa < arg))) {
            mx = om;
            arg = oa;
        }
    }
    double sum = 0, zsum = 0;
    for (int c = lane; c < classes; c += 32) {
        float dz = z[c] - mx;
        sum += exp((double)dz);
        zsum += dz;
    }
    sum = warp_sum(sum);
    zsum = warp_sum(zsum);
    double lse = log(sum);
    double nll = lse - (z[y] - mx);
    double mean_nll = lse - zsum / classes;
    if (d) {
        float inv = (float)(1.0 / sum);
        float off = smoothing / (float)classes;
        for (int c = lane; c < classes; c += 32) {
            float pc = expf(z[c] - mx) * inv;
            float target = off + (c == y ? 1.0f - smoothing : 0.0f);
            d[c] += grad_scale * (pc - target);
        }
    }
    *hit = arg == y;
    return (1.0 - smoothing) * nll + smoothing * mean_nll;
}

/* Raises the bad-label flag for label y (one lane). */
__device__ void flag_label(int y, int classes, int *flags, float *badf)
{
    flags[1] = classes;
    *badf = (float)y;
    __threadfence_system();
    flags[0] = FLAG_LABEL;
}

/* A warp per row. part[row] = row loss, part[rows + row] = 1 when the
 * argmax is the label. */
__global__ void xent_kernel(int rows, int classes, const float *logits, const int32_t *labels,
                            float smoothing, float grad_scale, float *dlogits, double *part,
                            int *flags, float *badf)
{
    int warp = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (warp >= rows)
        return;
    int y = labels[warp];
    if (y < 0 || y >= classes) {
        if (lane == 0) {
            flag_label(y, classes, flags, badf);
            part[warp] = 0;
            part[rows + warp] = 0;
        }
        return;
    }
    int hit = 0;
    double loss = xent_row_warp(logits + (size_t)warp * classes, classes, y, smoothing, grad_scale,
                                dlogits ? dlogits + (size_t)warp * classes : NULL, lane, &hit);
    if (lane == 0) {
        part[warp] = loss;
        part[rows + warp] = hit ? 1.0 : 0.0;
    }
}

int cuda_softmax_xent(dl_backend *be, int rows, int classes, const float *logits,
                      const int32_t *labels, float smoothing, float grad_scale, float *dlogits,
                      float *stats)
{
    if (rows <= 0)
        return DL_OK;
    if (classes <= 0)
        return cuda_error(DL_EINVAL, "softmax cross-entropy over %d classes", classes);
    cuda_ctx *c = CTX(be);
    double *part = (double *)cuda_scratch(be, 2 * (size_t)rows * sizeof(double));
    if (!part)
        return DL_ENOMEM;
    int per_block = THREADS / 32;
    unsigned blocks = (unsigned)((rows + per_block - 1) / per_block);
    xent_kernel<<<blocks, THREADS, 0, c->stream>>>(rows, classes, logits, labels, smoothing,
                                                   grad_scale, dlogits, part, c->dev_flags,
                                                   c->dev_badf);
    LAUNCH_CHECK("softmax_xent");
    finish_stats_kernel<<<1, 1024, 0, c->stream>>>(part, rows, 2, stats);
    LAUNCH_CHECK("softmax_xent");
    return DL_OK;
}

/* part[2 rows + r] = 1 for a kept row (label != ignore), else 0; a kept
 * label out of range raises the flag. */
__global__ void xent_keep_kernel(int rows, int classes, const int32_t *labels, int ignore,
                                 double *part, int *flags, float *badf)
{
    GRID_STRIDE(r, (size_t)rows)
    {
        int y = labels[r];
        int keep = y != ignore;
        if (keep && (y < 0 || y >= classes))
            flag_label(y, classes, flags, badf);
        part[2 * (size_t)rows + r] = keep ? 1.0 : 0.0;
    }
}

/* *count = the number of kept rows, summed in a fixed order (one block). */
__global__ void xent_count_kernel(int rows, const double *part, float *count)
{
    double acc = 0;
    for (int i = threadIdx.x; i < rows; i += blockDim.x)
        acc += part[2 * (size_t)rows + i];
    acc = block_sum(acc);
    if (threadIdx.x == 0)
        *count = (float)acc;
}

/* A warp per row as xent_kernel, skipping ignored rows; the gradient is
 * scaled by grad_scale / max(count, 1). */
__global__ void xent_tokens_kernel(int rows, int classes, const float *logits,
                                   const int32_t *labels, int ignore, float smoothing,
                                   float grad_scale, const float *count, float *dlogits,
                                   double *part)
{
    int warp = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (warp >= rows)
        return;
    int y = labels[warp];
    if (y == ignore || y < 0 || y >= classes) { /* ignored, or flagged by xent_keep_kernel */
        if (lane == 0)
            part[warp] = part[rows + warp] = 0;
        return;
    }
    float scale = grad_scale / fmaxf(*count, 1.0f);
    int hit = 0;
    double loss = xent_row_warp(logits + (size_t)warp * classes, classes, y, smoothing, scale,
                                dlogits ? dlogits + (size_t)warp * classes : NULL, lane, &hit);
    if (lane == 0) {
        part[warp] = loss;
        part[rows + warp] = hit ? 1.0 : 0.0;
    }
}

/* See backend.h (softmax_xent_tokens). */
int cuda_softmax_xent_tokens(dl_backend *be, int rows, int classes, const float *logits,
                             const int32_t *labels, int ignore_index, float smoothing,
                             float grad_scale, float *dlogits, float *stats)
{
    if (rows <= 0)
        return DL_OK;
    if (classes <= 0)
        return cuda_error(DL_EINVAL, "softmax cross-entropy over %d classes", classes);
    cuda_ctx *c = CTX(be);
    /* part [3, rows] (loss, hit, kept), then the count */
    double *part = (double *)cuda_scratch(be, (3 * (size_t)rows + 1) * sizeof(double));
    if (!part)
        return DL_ENOMEM;
    float *count = (float *)(part + 3 * (size_t)rows);
    xent_keep_kernel<<<grid_for(be, (size_t)rows), THREADS, 0, c->stream>>>(
        rows, classes, labels, ignore_index, part, c->dev_flags, c->dev_badf);
    LAUNCH_CHECK("softmax_xent_tokens");
    xent_count_kernel<<<1, 1024, 0, c->stream>>>(rows, part, count);
    LAUNCH_CHECK("softmax_xent_tokens");
    int per_block = THREADS / 32;
    unsigned blocks = (unsigned)((rows + per_block - 1) / per_block);
    xent_tokens_kernel<<<blocks, THREADS, 0, c->stream>>>(
        rows, classes, logits, labels, ignore_index, smoothing, grad_scale, count, dlogits, part);
    LAUNCH_CHECK("softmax_xent_tokens");
    finish_stats_kernel<<<1, 1024, 0, c->stream>>>(part, rows, 3, stats);
    LAUNCH_CHECK("softmax_xent_tokens");
    return DL_OK;
}

/* Per-block partial sums: part[b] = loss. */
__global__ void mse_kernel(size_t n, const float *p, const float *t, float grad_scale, float *dp,
                           double *part)
{
    double s = 0;
    GRID_STRIDE(i, n)
    {
        float d = p[i] - t[i];
        s += (double)d * d;
        if (dp)
            dp[i] += grad_scale * 2.0f * d;
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

/* part[b] = loss, part[blocks + b] = correct, per block. */
__global__ void bce_kernel(size_t n, const float *zs, const float *ts, float grad_scale, float *dz,
                           double *part)
{
    double s = 0, ok = 0;
    GRID_STRIDE(i, n)
    {
        float z = zs[i], t = ts[i];
        s += (double)fmaxf(z, 0) - (double)z * t + log1p(exp(-fabs((double)z)));
        ok += (z > 0) == (t > 0.5f) ? 1.0 : 0.0;
        if (dz)
            dz[i] += grad_scale * (1.0f / (1.0f + expf(-z)) - t);
    }
    s = block_sum(s);
    ok = block_sum(ok);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = s;
        part[gridDim.x + blockIdx.x] = ok;
    }
}

int cuda_mse(dl_backend *be, size_t n, const float *pred, const float *target, float grad_scale,
             float *dpred, float *stats)
{
    if (n == 0)
        return DL_OK;
    unsigned blocks = partial_blocks(be, n);
    double *part = (double *)cuda_scratch(be, blocks * sizeof(double));
    if (!part)
        return DL_ENOMEM;
    cudaStream_t s = CTX(be)->stream;
    mse_kernel<<<blocks, THREADS, 0, s>>>(n, pred, target, grad_scale, dpred, part);
    LAUNCH_CHECK("mse");
    finish_stats_kernel<<<1, 1024, 0, s>>>(part, (int)blocks, 1, stats);
    LAUNCH_CHECK("mse");
    return DL_OK;
}

int cuda_bce_logits(dl_backend *be, size_t n, const float *logits, const float *target,
                    float grad_scale, float *dlogits, float *stats)
{
    if (n == 0)
        return DL_OK;
    unsigned blocks = partial_blocks(be, n);
    double *part = (double *)cuda_scratch(be, 2 * blocks * sizeof(double));
    if (!part)
        return DL_ENOMEM;
    cudaStream_t s = CTX(be)->stream;
    bce_kernel<<<blocks, THREADS, 0, s>>>(n, logits, target, grad_scale, dlogits, part);
    LAUNCH_CHECK("bce_logits");
    finish_stats_kernel<<<1, 1024, 0, s>>>(part, (int)blocks, 2, stats);
    LAUNCH_CHECK("bce_logits");
    return DL_OK;
}

/* --- optimizers --------------------------------------------------------------------------------- */

/* cells: a grad_guard's (NULL: unguarded); a skipped step only zeroes g. */
__global__ void sgd_kernel(size_t n, float *w, float *g, float *m, float lr, float mu, float wd,
                           int nesterov, float gs, const float *cells)
{
    const bool skip = cells && cells[2] != 0.0f;
    GRID_STRIDE(i, n)
    {
        if (skip) {
            g[i] = 0;
            continue;
        }
        float d = g[i] * gs + wd * w[i];
        if (mu != 0) {
            float mi = mu * m[i] + d;
            m[i] = mi;
            d = nesterov ? d + mu * mi : mi;
        }
        w[i] -= lr * d;
        g[i] = 0;
    }
}

int cuda_sgd_update_guarded(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                            float momentum, float wd, int nesterov, float grad_scale,
                            const float *cells)
{
    if (n == 0)
        return DL_OK;
    if (momentum != 0 && !m)
        return cuda_error(DL_EINVAL, "sgd with momentum needs a momentum buffer");
    sgd_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(n, w, g, m, lr, momentum, wd,
                                                                 nesterov, grad_scale, cells);
    LAUNCH_CHECK("sgd_update");
    return DL_OK;
}

int cuda_sgd_update(dl_backend *be, size_t n, float *w, float *g, float *m, float lr,
                    float momentum, float wd, int nesterov, float grad_scale)
{
    return cuda_sgd_update_guarded(be, n, w, g, m, lr, momentum, wd, nesterov, grad_scale, NULL);
}

/* bc1, bc2 are 1 / (1 - beta^step); decay is L2 into the gradient (cw) or
 * decoupled (shrink = 1 - lr wd). */
__global__ void adam_kernel(size_t n, float *w, float *g, float *m, float *v, float lr, float b1,
                            float b2, float eps, float cw, float shrink, float bc1, float bc2,
                            float gs, const float *cells)
{
    const bool skip = cells && cells[2] != 0.0f;
    GRID_STRIDE(i, n)
    {
        if (skip) {
            g[i] = 0;
            continue;
        }
        float gi = g[i] * gs + cw * w[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float den = sqrtf(vi * bc2) + eps;
        w[i] = w[i] * shrink - lr * (mi * bc1) / den;
        g[i] = 0;
    }
}

int cuda_adam_update(dl_backend *be, size_t n, float *w, float *g, float *m, float *v, float lr,
                     float beta1, float beta2, float eps, float wd, int decoupled, long step,
                     float grad_scale)
{
    return cuda_adam_update_guarded(be, n, w, g, m, v, lr, beta1, beta2, eps, wd, decoupled, step,
                                    grad_scale, NULL);
}

int cuda_adam_update_guarded(dl_backend *be, size_t n, float *w, float *g, float *m, float *v,
                             float lr, float beta1, float beta2, float eps, float wd, int decoupled,
                             long step, float grad_scale, const float *cells)
{
    if (step < 1)
        return cuda_error(DL_EINVAL, "adam step %ld must count from 1", step);
    if (n == 0)
        return DL_OK;
    float bc1 = (float)(1.0 / (1.0 - pow((double)beta1, (double)step)));
    float bc2 = (float)(1.0 / (1.0 - pow((double)beta2, (double)step)));
    float cw = decoupled ? 0.0f : wd;
    float shrink = decoupled ? 1.0f - lr * wd : 1.0f;
    adam_kernel<<<grid_for(be, n), THREADS, 0, CTX(be)->stream>>>(
        n, w, g, m, v, lr, beta1, beta2, eps, cw, shrink, bc1, bc2, grad_scale, cells);
    LAUNCH_CHECK("adam_update");
    return DL_OK;
}

/* --- sum of squares -------------------------------------------------------------------------- */

__global__ void sumsq_kernel(size_t n, const float *x, double *part)
{
    double s = 0;
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        s += (double)(v * v);
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = s;
}

__global__ void sum_parts_kernel(const double *part, int parts, double *out)
{
    double acc = 0;
    for (int i = threadIdx.x; i < parts; i += blockDim.x)
        acc += part[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0)
        *out = acc;
}

/* Synchronous: waits for the stream to read the result back. */
int cuda_sumsq(dl_backend *be, const float *x, size_t n, double *host_result)
{
    cuda_ctx *c = CTX(be);
    if (n == 0) {
        *host_result = 0;
        return DL_OK;
    }
    unsigned blocks = partial_blocks(be, n);
    double *part = (double *)cuda_scratch(be, (blocks + 1) * sizeof(double));
    if (!part)
        return DL_ENOMEM;
    sumsq_kernel<<<blocks, THREADS, 0, c->stream>>>(n, x, part);
    LAUNCH_CHECK("sumsq");
    sum_parts_kernel<<<1, 1024, 0, c->stream>>>(part, (int)blocks, part + blocks);
    LAUNCH_CHECK("sumsq");
    CUDA_TRY(cudaMemcpyAsync(c->host_result, part + blocks, sizeof(double), cudaMemcpyDeviceToHost,
                             c->stream));
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    *host_result = *c->host_result;
    return cuda_check_flags(be);
}

/* --- the gradient check on the device ---------------------------------------------------------- */

/* One thread: the norm from the partial sums, the clip factor, the skip
 * flag, with the arithmetic of dl_clip_grad_norm (double, then a float
 * factor), so the two paths scale alike. */
__global__ void guard_finish_kernel(const double *sum, float grad_scale, float max_norm,
                                    float *cells)
{
    double norm = sqrt(*sum) * (double)grad_scale;
    if (!isfinite(norm)) {
        cells[1] = 0.0f;
        cells[2] = 1.0f;
        cells[3] += 1.0f;
        return;
    }
    cells[0] = (float)norm;
    cells[1] = max_norm > 0 && norm > (double)max_norm ? (float)((double)max_norm / norm) : 1.0f;
    cells[2] = 0.0f;
}

/* x *= cells[1] when the check clipped (the factor is not 1). */
__global__ void guard_scale_kernel(float *x, size_t n, const float *cells)
{
    const float f = cells[1];
    if (cells[2] != 0.0f || f == 1.0f)
        return;
    GRID_STRIDE(i, n) { x[i] *= f; }
}

int cuda_grad_guard(dl_backend *be, float *g, size_t n, float grad_scale, float max_norm,
                    float *cells)
{
    cuda_ctx *c = CTX(be);
    /* the sum as cuda_sumsq makes it (same kernels, same order) */
    unsigned blocks = n ? partial_blocks(be, n) : 1;
    double *part = (double *)cuda_scratch(be, (blocks + 1) * sizeof(double));
    if (!part)
        return DL_ENOMEM;
    if (n == 0) {
        CUDA_TRY(cudaMemsetAsync(part + blocks, 0, sizeof(double), c->stream));
    } else {
        sumsq_kernel<<<blocks, THREADS, 0, c->stream>>>(n, g, part);
        LAUNCH_CHECK("grad_guard");
        sum_parts_kernel<<<1, 1024, 0, c->stream>>>(part, (int)blocks, part + blocks);
        LAUNCH_CHECK("grad_guard");
    }
    guard_finish_kernel<<<1, 1, 0, c->stream>>>(part + blocks, grad_scale, max_norm, cells);
    LAUNCH_CHECK("grad_guard");
    if (n > 0) {
        guard_scale_kernel<<<grid_for(be, n), THREADS, 0, c->stream>>>(g, n, cells);
        LAUNCH_CHECK("grad_guard");
    }
    return DL_OK;
}
