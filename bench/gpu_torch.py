#!/usr/bin/python3
"""gpu_torch.py - the PyTorch eager peer of gpu_train.c on the GPU, and torch's own bf16 matmul peak

    gpu_torch.py [--model NAME|all] [--reps R] [--quick] [--no-peak] [--cudnn-benchmark]
                 [--device cpu]

Same models, shapes, batches, optimizers, step counts and synthetic data
layout as bench/gpu_train.c (u8 [1, 28, 28] batches in pinned host memory,
copied to the GPU and scaled to f32 each step, as dlbench's trainer does);
bf16 models run their forward under torch.autocast(bfloat16) with f32
master weights. W warm-up steps, then R timed windows of S steps, each cut
short after a few seconds; torch.cuda.synchronize() before every clock
read at a window edge; the best window counts. f32 matmuls and
convolutions may use TF32 unless DLBENCH_CUDA_TF32=0, as in dlbench.
PyTorch runs eager with its defaults (cudnn.benchmark off unless
--cudnn-benchmark).

Prints per model
    RESULT gpu_torch <model> <prec> batch=B samples_per_s=X median=Y tflops=T ms_per_step=M
and the bf16 matmul peak as torch sees it (A [m, k] times B [n, k]^T, the
shapes bench/gpu_gemm.c times through cuBLAS)
    RESULT gpu_torch matmul bf16 shape=MxNxK tflops=T ms=M
TFLOP/s counts matrix-product FLOPs as gpu_train.c does: forward and
weight gradient of every Linear/Conv2d, input gradient of all but the first.

Prints "SKIP gpu_torch: reason" and exits 0 when torch cannot be imported
or has no usable CUDA device; a model that fails prints "FAIL gpu_torch
<model>: reason" and the exit status is 1. --device cpu runs the same on
the CPU (no pinned memory, no peak), to check the script without a GPU.
"""
import argparse
import contextlib
import os
import sys
import time

WINDOW_CAP_S = 2.0  # as gpu_train.c
WARMUP_CAP_S = 5.0
DATA_CAP_BYTES = 128 << 20

# name: (builder, optimizer, lr, precision, batch, warmup, steps) -- as gpu_train.c
MODELS = {
    "mlp-sgd": ("mlp", "sgd", 0.05, "fp32", 128, 100, 1000),
    "mlp-adam": ("mlp", "adam", 1e-3, "fp32", 128, 100, 1000),
    "cnn": ("cnn", "sgd", 0.01, "fp32", 128, 50, 500),
    "mlp-bf16": ("mlp", "sgd", 0.05, "bf16", 128, 100, 1000),
    "cnn-bf16": ("cnn", "sgd", 0.01, "bf16", 128, 50, 500),
    "mlp-8192": ("large", "sgd", 0.01, "bf16", 8192, 5, 25),
}
# bench/bench_models.h
WIDTHS = {"mlp": [784, 512, 256, 10], "large": [784, 8192, 8192, 8192, 8192, 10]}
PEAK_SHAPES = [(8192, 8192, 8192), (16384, 8192, 8192)]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="all", help="one of: all " + " ".join(MODELS))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="a quarter of the timed steps")
    p.add_argument("--no-peak", action="store_true", help="skip the matmul peak")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="torch.backends.cudnn.benchmark = True")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: check the script on a machine without a GPU")
    return p.parse_args()


def build(kind, nn):
    if kind == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    layers = [nn.Flatten()]
    w = WIDTHS[kind]
    for i in range(len(w) - 1):
        layers.append(nn.Linear(w[i], w[i + 1]))
        if i + 2 < len(w):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def gemm_flops(torch, model, dev):
    """Matrix-product FLOPs per training sample, counted as gpu_train.c does."""
    nn = torch.nn
    fwd = []

    def hook(mod, inp, out):
        if isinstance(mod, nn.Linear):
            fwd.append(2.0 * mod.in_features * mod.out_features)
        else:  # Conv2d, per output element: cin/groups * kh * kw multiply-adds
            kh, kw = mod.kernel_size
            fwd.append(2.0 * (mod.in_channels // mod.groups) * kh * kw * out[0].numel())

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (nn.Linear, nn.Conv2d))]
    with torch.no_grad():
        model(torch.zeros(1, 1, 28, 28, device=dev))
    for h in handles:
        h.remove()
    return sum((2.0 if i == 0 else 3.0) * f for i, f in enumerate(fwd))


def bench(torch, name, reps, quick, dev):
    F = torch.nn.functional
    kind, opt_kind, lr, prec, batch, warmup, steps = MODELS[name]
    if quick:
        steps //= 4
    torch.manual_seed(1)
    model = build(kind, torch.nn).to(dev)
    if opt_kind == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    flops = gemm_flops(torch, model, dev)

    # synthetic u8 batches in pinned memory, sized as gpu_train.c sizes them
    row = 28 * 28 + 4
    nb = min(warmup + reps * steps + 2, DATA_CAP_BYTES // (batch * row))
    nb = max(nb, 4)
    g = torch.Generator().manual_seed(1)
    x_all = torch.randint(0, 256, (nb * batch, 1, 28, 28), dtype=torch.uint8, generator=g)
    y_all = torch.randint(0, 10, (nb * batch,), dtype=torch.int64, generator=g)
    cuda = dev.type == "cuda"
    if cuda:
        x_all, y_all = x_all.pin_memory(), y_all.pin_memory()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    state = {"i": 0}
    autocast = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if prec == "bf16" \
        else contextlib.nullcontext

    def step():
        i = state["i"]
        state["i"] = (i + 1) % nb
        x = x_all[i * batch:(i + 1) * batch].to(dev, non_blocking=True).float().div_(255.0)
        y = y_all[i * batch:(i + 1) * batch].to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with autocast():
            out = model(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()

    def window(count, cap):
        sync()
        t0 = time.perf_counter()
        n = 0
        while n < count and (n < 1 or time.perf_counter() - t0 < cap):
            step()
            n += 1
        sync()
        return n * batch / (time.perf_counter() - t0)

    window(warmup, WARMUP_CAP_S)
    rates = sorted(window(steps, WINDOW_CAP_S) for _ in range(reps))
    best, med = rates[-1], rates[len(rates) // 2]
    print(f"gpu_torch {name:<9} {prec:<4} batch {batch:5d}  samples/s {best:10.0f} (median "
          f"{med:10.0f})  TFLOP/s {best * flops * 1e-12:7.2f}  ms/step {1e3 * batch / best:8.3f}")
    print(f"RESULT gpu_torch {name} {prec} batch={batch} samples_per_s={best:.0f} "
          f"median={med:.0f} tflops={best * flops * 1e-12:.3f} ms_per_step={1e3 * batch / best:.4f}",
          flush=True)


def matmul_peak(torch, dev):
    for m, n, k in PEAK_SHAPES:
        a = torch.full((m, k), 0.01, dtype=torch.bfloat16, device=dev)
        b = torch.full((n, k), 0.02, dtype=torch.bfloat16, device=dev)
        for _ in range(3):
            c = torch.matmul(a, b.t())
        iters = 10
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            c = torch.matmul(a, b.t())
        e1.record()
        e1.synchronize()
        ms = e0.elapsed_time(e1) / iters
        tflops = 2.0 * m * n * k / (ms * 1e-3) / 1e12
        print(f"gpu_torch matmul bf16 {m:5d}x{n:5d}x{k:5d}  {tflops:8.1f} TFLOP/s  {ms:8.3f} ms")
        print(f"RESULT gpu_torch matmul bf16 shape={m}x{n}x{k} tflops={tflops:.1f} ms={ms:.4f}",
              flush=True)
        del a, b, c
    torch.cuda.empty_cache()


def first_line(e):
    lines = str(e).strip().splitlines()
    return type(e).__name__ + (": " + lines[0] if lines else "")


def main():
    a = parse_args()
    if a.reps < 1 or a.reps > 16:
        print("gpu_torch: --reps must be 1..16", file=sys.stderr)
        return 2
    names = list(MODELS) if a.model == "all" else [a.model]
    for name in names:
        if name not in MODELS:
            print(f"gpu_torch: unknown model {name}; models: {' '.join(MODELS)}", file=sys.stderr)
            return 2
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising anything
        print(f"SKIP gpu_torch: torch not importable by {sys.executable} ({e})")
        return 0
    if a.device == "cpu":
        dev = torch.device("cpu")
        print(f"# torch {torch.__version__} on the CPU (--device cpu: a check of this script)",
              flush=True)
    elif not torch.cuda.is_available():
        why = ("this torch is built without CUDA" if torch.version.cuda is None
               else f"no usable CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda})")
        print(f"SKIP gpu_torch: torch.cuda.is_available() is false: {why}")
        return 0
    else:
        dev = torch.device("cuda")
        tf32 = os.environ.get("DLBENCH_CUDA_TF32", "1")[:1] != "0"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = a.cudnn_benchmark
        print(f"# torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN "
              f"{torch.backends.cudnn.version()}) on {torch.cuda.get_device_name(0)}; TF32 "
              f"{'on' if tf32 else 'off'}; cudnn.benchmark {a.cudnn_benchmark}", flush=True)
    failed = 0
    for name in names:
        try:
            bench(torch, name, a.reps, a.quick, dev)
        except Exception as e:  # an out-of-memory or a CUDA error: say so, go on
            print(f"FAIL gpu_torch {name}: {first_line(e)}", flush=True)
            failed = 1
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if not a.no_peak and dev.type == "cuda":
        try:
            matmul_peak(torch, dev)
        except Exception as e:
            print(f"FAIL gpu_torch matmul: {first_line(e)}", flush=True)
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
