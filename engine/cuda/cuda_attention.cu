/* cuda_attention.cu - scaled dot-product attention on the GPU: a warp per query, online softmax, scores recomputed in backward
 *
 * Simple and plainly right rather than fast: a warp owns one query row of
 * one (sample, head) and walks its keys in order, each lane holding
 * ceil(dh / 32) of the head's dh output columns. The forward keeps the
 * running maximum and sum (online softmax) and saves only the
 * log-sum-exp; the backward recomputes each probability from it and adds
 * dK, dV with atomics (so their summation order varies, like the CPU's
 * only to rounding). Head sizes up to 32 * MAX_PER_LANE = 256.
 */
#include "engine/cuda/cuda_internal.h"
#include "engine/cuda/cuda_attention.h"

#define MAX_PER_LANE 8
#define WARPS_PER_BLOCK (THREADS / 32)

__device__ __forceinline__ float attn_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The query a warp owns: (sample b, head h, position i) from its index. */
struct attn_query {
    int b, h, i;
};

__device__ __forceinline__ attn_query attn_which(size_t w, int t, int heads)
{
    attn_query q;
    q.i = (int)(w % (size_t)t);
    q.h = (int)(w / (size_t)t % (size_t)heads);
    q.b = (int)(w / ((size_t)t * heads));
    return q;
}

__global__ void attn_fwd_kernel(int n, int t, int heads, int d, int causal, float scale,
                                const float *qkv, float *o, float *lse)
{
    size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31, dh = d / heads, ld = 3 * d;
    if (w >= (size_t)n * heads * t)
        return;
    attn_query a = attn_which(w, t, heads);
    const float *rows = qkv + (size_t)a.b * t * ld + a.h * dh;
    const float *q = rows + (size_t)a.i * ld;
    float qr[MAX_PER_LANE], acc[MAX_PER_LANE];
    for (int k = 0; k < MAX_PER_LANE; k++) {
        int c = lane + 32 * k;
        qr[k] = c < dh ? q[c] : 0.0f;
        acc[k] = 0;
    }
    float m = -INFINITY, l = 0;
    int jend = causal ? a.i + 1 : t;
    for (int j = 0; j < jend; j++) {
        const float *kj = rows + (size_t)j * ld + d, *vj = kj + d;
        float part = 0;
        for (int k = 0; k < MAX_PER_LANE; k++) {
            int c = lane + 32 * k;
            if (c < dh)
                part += qr[k] * kj[c];
        }
        float s = attn_warp_sum(part) * scale;
        float mx = fmaxf(m, s), corr = expf(m - mx), p = expf(s - mx);
        l = l * corr + p;
        m = mx;
        for (int k = 0; k < MAX_PER_LANE; k++) {
            int c = lane + 32 * k;
            acc[k] = acc[k] * corr + (c < dh ? p * vj[c] : 0.0f);
        }
    }
    float *out = o + ((size_t)a.b * t + a.i) * d + a.h * dh, inv = 1.0f / l;
    for (int k = 0; k < MAX_PER_LANE; k++) {
        int c = lane + 32 * k;
        if (c < dh)
            out[c] = acc[k] * inv;
    }
    if (lane == 0)
        lse[((size_t)a.b * heads + a.h) * t + a.i] = m + logf(l);
}

__global__ void attn_bwd_kernel(int n, int t, int heads, int d, int causal, float scale,
                                const float *qkv, const float *o, const float *lse,
                                const float *dout, float *dqkv)
{
    size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31, dh = d / heads, ld = 3 * d;
    if (w >= (size_t)n * heads * t)
        return;
    attn_query a = attn_which(w, t, heads);
    size_t row = (size_t)a.b * t + a.i;
    const float *rows = qkv + (size_t)a.b * t * ld + a.h * dh;
    float *drows = dqkv + (size_t)a.b * t * ld + a.h * dh;
    const float *q = rows + (size_t)a.i * ld, *oi = o + row * d + a.h * dh;
    const float *doi = dout + row * d + a.h * dh;
    float qr[MAX_PER_LANE], dor[MAX_PER_LANE], dq[MAX_PER_LANE], part = 0;
    for (int k = 0; k < MAX_PER_LANE; k++) {
        int c = lane + 32 * k;
        qr[k] = c < dh ? q[c] : 0.0f;
        dor[k] = c < dh ? doi[c] : 0.0f;
        dq[k] = 0;
        part += c < dh ? dor[k] * oi[c] : 0.0f;
    }
    float dsum = attn_warp_sum(part), li = lse[((size_t)a.b * heads + a.h) * t + a.i];
    int jend = causal ? a.i + 1 : t;
    for (int j = 0; j < jend; j++) {
        const float *kj = rows + (size_t)j * ld + d, *vj = kj + d;
        float *dkj = drows + (size_t)j * ld + d, *dvj = dkj + d;
        float ps = 0, pd = 0;
        for (int k = 0; k < MAX_PER_LANE; k++) {
            int c = lane + 32 * k;
            if (c < dh) {
                ps += qr[k] * kj[c];
                pd += dor[k] * vj[c];
            }
        }
        float p = expf(attn_warp_sum(ps) * scale - li);
        float ds = p * (attn_warp_sum(pd) - dsum) * scale;
        for (int k = 0; k < MAX_PER_LANE; k++) {
            int c = lane + 32 * k;
            if (c < dh) {
                dq[k] += ds * kj[c];
                atomicAdd(&dkj[c], ds * qr[k]);
                atomicAdd(&dvj[c], p * dor[k]);
            }
        }
    }
    float *dqi = drows + (size_t)a.i * ld; /* this warp alone writes its query's row */
    for (int k = 0; k < MAX_PER_LANE; k++) {
        int c = lane + 32 * k;
        if (c < dh)
            dqi[c] += dq[k];
    }
}

static int attn_check(int n, int t, int heads, int d)
{
    if (n < 0 || t < 1 || heads < 1 || d < 1 || d % heads)
        return cuda_error(DL_EINVAL,
                          "attention over n %d, t %d, %d heads, d %d: heads must divide d", n, t,
                          heads, d);
    if (d / heads > 32 * MAX_PER_LANE)
        return cuda_error(DL_EINVAL, "attention: head size %d is over the GPU kernel's %d",
                          d / heads, 32 * MAX_PER_LANE);
    return DL_OK;
}

static unsigned attn_blocks(int n, int t, int heads)
{
    size_t warps = (size_t)n * heads * t;
    return (unsigned)((warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
}

int cuda_attention_forward(dl_backend *be, int n, int t, int heads, int d, int causal, float scale,
                           const float *qkv, float *o, float *lse)
{
    int rc = attn_check(n, t, heads, d);
    if (rc < 0 || n == 0)
        return rc;
    attn_fwd_kernel<<<attn_blocks(n, t, heads), THREADS, 0, CTX(be)->stream>>>(
        n, t, heads, d, causal, scale, qkv, o, lse);
    LAUNCH_CHECK("attention_forward");
    return DL_OK;
}

int cuda_attention_backward(dl_backend *be, int n, int t, int heads, int d, int causal, float scale,
                            const float *qkv, const float *o, const float *lse, const float *dout,
                            float *dqkv)
{
    int rc = attn_check(n, t, heads, d);
    if (rc < 0 || n == 0)
        return rc;
    attn_bwd_kernel<<<attn_blocks(n, t, heads), THREADS, 0, CTX(be)->stream>>>(
        n, t, heads, d, causal, scale, qkv, o, lse, dout, dqkv);
    LAUNCH_CHECK("attention_backward");
    return DL_OK;
}
