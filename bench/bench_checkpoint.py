#!/usr/bin/env python3
"""bench_checkpoint.py - the h5py peer of bench_checkpoint.c: a checkpoint's arena and its named views read by h5py"""
import sys
import time

import h5py
import numpy as np


def best(fn, reps=3):
    t = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/bench-ckpt-v2.h5"
with h5py.File(path, "r") as f:
    n = f["arena/params"].shape[0]
    arena = best(lambda: f["arena/params"][...])
    views = best(lambda: [f["params"][k][...] for k in f["params"]])
    print(f"h5py /arena/params ({n / 1e6:.1f}M floats)             {arena:7.3f} s  {4 * n / arena / 1e9:5.2f} GB/s")
    print(f"h5py each /params/NAME view ({len(f['params'])} reads)         {views:7.3f} s  x{views / arena:.2f}")
    a = f["arena/params"][...]
    w = f["params/Linear1.weight"][...]
    assert np.array_equal(a[: w.size].reshape(w.shape), w)
