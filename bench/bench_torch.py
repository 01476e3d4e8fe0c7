#!/usr/bin/python3
"""bench_torch.py - the PyTorch peer of bench_train.c: same models, batch, optimizers and step counts

Run with Debian's interpreter (/usr/bin/python3, which has python3-torch):

    bench_torch.py --omp N --blas N [--torch-threads N] [--passive] [--setup NAME]
                   [--model NAME|all] [--warmup W] [--steps S] [--reps R]

The thread pools are fixed when torch is imported, so OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS (and OMP_WAIT_POLICY with --passive) are set in the
environment before the import; torch.set_num_threads follows. One thread
set-up per process: bench/run.sh runs several and keeps PyTorch's best.

Prints, per model, the best of R windows of S steps after W warm-up steps
(each window cut short after 1.5 s, as in bench_train.c):
    torch <model> threads=T setup=NAME samples_per_s=X median=X
Exits 3 when torch cannot be imported.
"""
import argparse
import gzip
import os
import sys
import time

FMNIST = "/usr/share/datasets/fashion-mnist"
BATCH = 128
WINDOW_CAP_S = 1.5  # as bench_train.c

# name: (optimizer, lr, precision, warmup, steps) -- as in bench_train.c
MODELS = {
    "mlp-sgd": ("sgd", 0.05, "f32", 30, 200),
    "mlp-adam": ("adam", 1e-3, "f32", 30, 200),
    "tiny-mlp": ("sgd", 0.05, "f32", 300, 3000),
    "cnn": ("sgd", 0.01, "f32", 5, 40),
    "mlp-bf16": ("sgd", 0.05, "bf16", 30, 300),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--omp", type=int, default=1, help="OMP_NUM_THREADS")
    p.add_argument("--blas", type=int, default=1, help="OPENBLAS_NUM_THREADS")
    p.add_argument("--torch-threads", type=int, default=0,
                   help="torch.set_num_threads (default: --omp)")
    p.add_argument("--passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE")
    p.add_argument("--setup", default=None, help="label printed with the results")
    p.add_argument("--threads", type=int, default=0,
                   help="thread count reported (default: max of --omp and --blas)")
    p.add_argument("--model", default="all")
    p.add_argument("--warmup", type=int, default=-1)
    p.add_argument("--steps", type=int, default=-1)
    p.add_argument("--reps", type=int, default=3)
    return p.parse_args()


def read_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def build(name, nn):
    if name == "tiny-mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(),
                         nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


def bench(torch, name, x_all, y_all, warmup, steps, reps):
    import contextlib
    nn, F = torch.nn, torch.nn.functional
    opt_kind, lr, prec, _, _ = MODELS[name]
    torch.manual_seed(1)
    model = build(name, nn)
    if opt_kind == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    n = x_all.shape[0]
    per_epoch = n // BATCH  # drop_last, as bench_train.c
    gen = torch.Generator().manual_seed(1)
    state = {"perm": torch.randperm(n, generator=gen), "i": 0}

    def step():
        if state["i"] == per_epoch:
            state["perm"], state["i"] = torch.randperm(n, generator=gen), 0
        idx = state["perm"][state["i"] * BATCH:(state["i"] + 1) * BATCH]
        state["i"] += 1
        x, y = x_all[idx], y_all[idx]
        opt.zero_grad(set_to_none=True)
        ctx = (torch.autocast("cpu", dtype=torch.bfloat16) if prec == "bf16"
               else contextlib.nullcontext())
        with ctx:
            out = model(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()

    def window(count):
        # count steps or WINDOW_CAP_S seconds, whichever ends first
        t0 = time.perf_counter()
        n, dt = 0, 0.0
        while n < count and (n < 1 or dt < WINDOW_CAP_S):
            step()
            n += 1
            dt = time.perf_counter() - t0
        return n * BATCH / dt if n else 0.0

    window(warmup)
    rates = [window(steps) for _ in range(reps)]
    rates.sort()
    return rates[-1], rates[len(rates) // 2]


def main():
    a = parse_args()
    # before torch (and its OpenMP and OpenBLAS) is loaded
    os.environ["OMP_NUM_THREADS"] = str(a.omp)
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.blas)
    os.environ["MKL_NUM_THREADS"] = str(a.omp)
    if a.passive:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        import torch
    except ImportError as e:
        print(f"bench_torch: torch not available ({e})", file=sys.stderr)
        return 3
    torch.set_num_threads(a.torch_threads or a.omp)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    threads = a.threads or max(a.omp, a.blas)
    setup = a.setup or f"omp{a.omp}-blas{a.blas}" + ("-passive" if a.passive else "")
    print(f"# torch {torch.__version__}, setup {setup}: torch.get_num_threads()="
          f"{torch.get_num_threads()}", flush=True)

    images = read_idx(os.path.join(FMNIST, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(FMNIST, "train-labels-idx1-ubyte.gz"))
    x_all = torch.from_numpy(images.copy()).float().div_(255.0).unsqueeze(1)  # [N, 1, 28, 28]
    y_all = torch.from_numpy(labels.astype("int64"))

    names = list(MODELS) if a.model == "all" else [a.model]
    for name in names:
        if name not in MODELS:
            print(f"bench_torch: unknown model {name}; models: {' '.join(MODELS)}",
                  file=sys.stderr)
            return 2
        _, _, _, warmup, steps = MODELS[name]
        best, med = bench(torch, name, x_all, y_all,
                          a.warmup if a.warmup >= 0 else warmup,
                          a.steps if a.steps > 0 else steps, a.reps)
        print(f"torch {name} threads={threads} setup={setup} samples_per_s={best:.0f} "
              f"median={med:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
