/* cuda_attention.h - entry points of the CUDA attention and per-token loss ops (signatures as in backend.h) */
#ifndef DL_CUDA_ATTENTION_H
#define DL_CUDA_ATTENTION_H

#include "engine/cuda/cuda_internal.h"

/* cuda_attention.cu */
int cuda_attention_forward(dl_backend *be, int n, int t, int heads, int d, int causal, float scale,
                           const float *qkv, float *o, float *lse);
int cuda_attention_backward(dl_backend *be, int n, int t, int heads, int d, int causal, float scale,
                            const float *qkv, const float *o, const float *lse, const float *dout,
                            float *dqkv);
/* cuda_kernels.cu, next to softmax_xent */
int cuda_softmax_xent_tokens(dl_backend *be, int rows, int classes, const float *logits,
                             const int32_t *labels, int ignore_index, float smoothing,
                             float grad_scale, float *dlogits, float *stats);

#endif
