#!/usr/bin/python3
"""bench_images.py - image-folder import: dlbench import against Pillow decoding the same files, side by side.

usage: /usr/bin/python3 bench/bench_images.py DLBENCH [IMAGES per set, default 1500] [REPS, default 2]

Writes two folders under a temporary directory (JPEG 160x120 quality 90 and
PNG 64x64, IMAGES files each over 10 classes), then for 1 and 2 workers
times `dlbench import DIR OUT.h5 --workers N` (the whole import: listing,
decoding, hashing, writing the HDF5 file) and two peers: Pillow opening each
file, converting to RGB and stacking into one numpy array (one process, or
a multiprocessing pool of N), and the same followed by writing it to HDF5
with h5py and an fsync (what the import does, less the hashing). Best of REPS each; images/s and the ratio
dlbench / Pillow at the same worker count. The CPU line first.
"""
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
from PIL import Image


def cpu_line():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def make_folder(root, kind, n, rng):
    h, w = (120, 160) if kind == "jpeg" else (64, 64)
    y, x = np.mgrid[0:h, 0:w]
    files = []
    for i in range(n):
        cls = f"{root}/c{i % 10}"
        os.makedirs(cls, exist_ok=True)
        ph = rng.uniform(0, 6, 3)
        a = np.stack([127 + 100 * np.sin(x / (4 + k) + y / (7 + k) + ph[k]) for k in range(3)], -1)
        a = np.clip(a + rng.integers(-20, 21, (h, w, 3)), 0, 255).astype(np.uint8)
        p = f"{cls}/{i:05d}." + ("jpg" if kind == "jpeg" else "png")
        if kind == "jpeg":
            Image.fromarray(a).save(p, quality=90)
        else:
            Image.fromarray(a).save(p)
        files.append(p)
    return sorted(files)


def decode(p):
    with Image.open(p) as im:
        return np.asarray(im.convert("RGB"))


def pillow(files, workers):
    if workers == 1:
        arrs = [decode(p) for p in files]
    else:
        with mp.Pool(workers) as pool:
            arrs = pool.map(decode, files, chunksize=64)
    return np.stack(arrs)


def pillow_h5(files, workers, out):
    """The whole import in Python: decode, stack to [N, 3, H, W], write HDF5, fsync."""
    x = pillow(files, workers).transpose(0, 3, 1, 2)
    with h5py.File(out, "w") as f:
        f.create_dataset("train/x", data=x, chunks=(max(1, (1 << 20) // x[0].nbytes),) + x.shape[1:])
    fd = os.open(out, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def best(fn, reps):
    t = 1e9
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main():
    dlbench = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    print(f"cpu: {cpu_line()}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp(prefix="dl-bench-images-")
    try:
        for kind in ("jpeg", "png"):
            root = f"{tmp}/{kind}"
            files = make_folder(root, kind, n, rng)
            mb = sum(os.path.getsize(p) for p in files) / 1e6
            print(f"-- {kind}: {n} files, {mb:.1f} MB, {decode(files[0]).shape}")
            for w in (1, 2):
                out = f"{tmp}/{kind}{w}.h5"
                cmd = [dlbench, "import", root, out, "--workers", str(w)]

                def run_dl():
                    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

                t_dl = best(run_dl, reps)
                t_py = best(lambda: pillow(files, w), reps)
                t_h5 = best(lambda: pillow_h5(files, w, f"{tmp}/peer.h5"), reps)
                print(f"dlbench-images kind={kind} workers={w} dlbench_images_per_s={n / t_dl:.0f} "
                      f"pillow_images_per_s={n / t_py:.0f} ratio={t_py / t_dl:.2f} "
                      f"pillow_h5py_images_per_s={n / t_h5:.0f} ratio_h5py={t_h5 / t_dl:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("  (dlbench: the whole import (list, decode, SHA-256 of each file, CHW, statistics, HDF5, fsync);")
    print("   pillow: decode + np.stack only; pillow_h5py: that + transpose + h5py write + fsync;")
    print("   ratio = dlbench / pillow, ratio_h5py = dlbench / pillow_h5py, at the same worker count)")


if __name__ == "__main__":
    main()
