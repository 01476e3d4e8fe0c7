#!/usr/bin/python3
"""bench_attention.py - the PyTorch peer of bench_attention.c: nn.MultiheadAttention forward+backward

    bench_attention.py THREADS BATCH T D HEADS CAUSAL

Sets OMP_NUM_THREADS and OPENBLAS_NUM_THREADS before importing torch, then
times forward + backward of nn.MultiheadAttention(D, HEADS, batch_first=True)
on [BATCH, T, D] (with a causal attn_mask when CAUSAL is 1), parameters and
input gradients as in dlbench, best of 3 windows. Prints one line:
    torch ms=X
Exits 3 when torch cannot be imported.
"""
import os
import sys
import time

threads, batch, t, d, heads, causal = (int(v) for v in sys.argv[1:7])
os.environ["OMP_NUM_THREADS"] = str(threads)
os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
try:
    import torch
except ImportError:
    sys.exit(3)
torch.set_num_threads(threads)
torch.manual_seed(0)
mha = torch.nn.MultiheadAttention(d, heads, batch_first=True)
x = torch.randn(batch, t, d, requires_grad=True)
r = torch.randn(batch, t, d)
mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1) if causal else None


def step():
    y = mha(x, x, x, attn_mask=mask, need_weights=False)[0]
    y.backward(r)


for _ in range(3):
    step()
best = float("inf")
for _ in range(3):
    reps, t0 = 0, time.perf_counter()
    while True:
        step()
        reps += 1
        el = time.perf_counter() - t0
        if el > 0.3:
            break
    best = min(best, el / reps)
print("torch ms=%.4f" % (best * 1e3))
