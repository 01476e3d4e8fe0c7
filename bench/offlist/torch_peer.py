#!/usr/bin/python3
"""torch_peer.py - the PyTorch peer of bench/offlist/models.lua: the same models, batch and optimizer

    torch_peer.py MODEL THREADS [f32|bf16] [BLAS_THREADS]

Times training steps (forward, cross-entropy, backward, AdamW) on random
batches held in memory, OMP_NUM_THREADS=THREADS and BLAS_THREADS (default
1) OpenBLAS threads (run.sh keeps the faster of 1 and THREADS), and
prints the best of three windows of 20 steps (each cut after 1.5 s):
    torch MODEL threads=T precision=P ms_per_step=X
"""
import contextlib
import os
import sys
import time


def build(torch, name):
    nn = torch.nn

    def cbr(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    if name == "vgg":
        return nn.Sequential(*cbr(3, 32), *cbr(32, 32), nn.MaxPool2d(2),
                             *cbr(32, 64), *cbr(64, 64), nn.MaxPool2d(2),
                             *cbr(64, 128), *cbr(128, 128), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Dropout(0.2), nn.Linear(128 * 16, 10))
    if name == "mlp-ln":
        return nn.Sequential(nn.Flatten(),
                             nn.Linear(3072, 1024), nn.LayerNorm(1024), nn.GELU(), nn.Dropout(0.1),
                             nn.Linear(1024, 512), nn.LayerNorm(512), nn.GELU(), nn.Dropout(0.1),
                             nn.Linear(512, 10))
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    if name == "strided":
        def cbs(cin, cout, stride):
            return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                    nn.BatchNorm2d(cout), nn.SiLU()]
        return nn.Sequential(*cbs(3, 32, 1), *cbs(32, 64, 2), *cbs(64, 64, 1),
                             *cbs(64, 128, 2), *cbs(128, 128, 1),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    raise SystemExit(f"torch_peer.py: model must be vgg, mlp-ln, lenet or strided, got {name}")


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    name, threads = sys.argv[1], int(sys.argv[2])
    prec = sys.argv[3] if len(sys.argv) > 3 else "f32"
    blas = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(blas)
    try:
        import torch
    except ImportError as e:
        print(f"torch_peer.py: torch not available ({e})", file=sys.stderr)
        return 3
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = build(torch, name)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    n, batch = 10000, 64
    x_all, y_all = torch.rand(n, 3, 32, 32), torch.randint(0, 10, (n,))
    F = torch.nn.functional

    def step():
        idx = torch.randint(0, n, (batch,))
        opt.zero_grad(set_to_none=True)
        ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if prec == "bf16"
               else contextlib.nullcontext())
        with ctx:
            out = model(x_all[idx])
        F.cross_entropy(out.float(), y_all[idx]).backward()
        opt.step()

    for _ in range(5):
        step()
    best = float("inf")
    for _ in range(3):
        t0, k = time.perf_counter(), 0
        while k < 20 and (k < 1 or time.perf_counter() - t0 < 1.5):
            step()
            k += 1
        best = min(best, (time.perf_counter() - t0) / k)
    print(f"torch {name} threads={threads} precision={prec} ms_per_step={best * 1e3:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
