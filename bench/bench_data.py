#!/usr/bin/python3
"""bench_data.py - the peers of bench_data.c: h5py random batches, numpy gather against numpy copy, sequential read.

usage: /usr/bin/python3 bench/bench_data.py [FILE.h5] [seconds per case]
Batches of 128 x 784 u8 from /train, as in bench_data.c.
"""
import sys
import time

import h5py
import numpy as np

path = sys.argv[1] if len(sys.argv) > 1 else "data/fashion-mnist.h5"
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
B = 128
rng = np.random.default_rng(1)


def run(what, fn, nbytes):
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        fn()
        n += 1
    dt = time.perf_counter() - t0
    print(f"{what:38s} {n / dt:9.0f} batches/s {n * nbytes / dt / 1e9:7.2f} GB/s")
    return n * nbytes / dt / 1e9


with h5py.File(path, "r") as f:
    dx = f["train/x"]
    count = dx.shape[0]
    row = int(np.prod(dx.shape[1:]))
    best = 1e9
    for _ in range(3):
        t0 = time.perf_counter()
        x = dx[...]
        best = min(best, time.perf_counter() - t0)
    print(f"{'h5py sequential read of the whole x':38s} {'':9s}            "
          f"{x.nbytes / best / 1e9:7.2f} GB/s")
    # h5py needs increasing indices for a point selection
    run("h5py random batches", lambda: dx[np.sort(rng.choice(count, B, replace=False))], B * row)
nb = count // B
buf = np.empty((B, row), np.uint8)
flat = x.reshape(count, row)
k = [0]


def seq_copy():
    i = k[0] % nb
    np.copyto(buf, flat[i * B:(i + 1) * B])
    k[0] += 1


copy_gbs = run("numpy copy of sequential batches", seq_copy, B * row)
gather_gbs = run("numpy gather of random rows (memory)", lambda: x[rng.integers(0, count, B)], B * row)
print(f"{'numpy gather / numpy copy':38s} {'':9s}            {100 * gather_gbs / copy_gbs:6.1f}%")
