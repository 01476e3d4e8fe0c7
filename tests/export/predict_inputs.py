"""predict_inputs.py - the raw samples of an HDF5 group normalised as an ONNX file's metadata says, beside dlbench predict's logits, for ort_check.js.

usage: /usr/bin/python3 predict_inputs.py MODEL.onnx DATA.h5 GROUP PREDICT.jsonl OUTDIR
Reads dlbench_input_scale / _mean / _std from MODEL.onnx's metadata_props
(python3-onnx), the group's x (h5py), computes x * scale, then (x - mean[c]) /
std[c] on the channel axis (axis 1) when mean and std are there, and writes
OUTDIR/input.bin (float32), OUTDIR/logits.bin (the "logits" of every row of
PREDICT.jsonl, `dlbench predict RUN DATA.h5:GROUP --logits --format jsonl`) and
OUTDIR/meta.json, the files ort_check.js compares (MODEL.onnx linked as
OUTDIR/model.onnx). Checks on the way: one prediction row per sample, indices
in order, and each row's "class" the argmax of its logits. Prints "ok ..." or
"bad ..." (exit 1).
"""
import json
import os
import sys

import h5py
import numpy as np
import onnx


def main(model, data, group, jsonl, out):
    meta = {p.key: p.value for p in onnx.load(model).metadata_props}
    if "dlbench_input_scale" not in meta:
        return f"bad {model}: no dlbench_input_scale in the metadata ({sorted(meta)})"
    with h5py.File(data, "r") as f:
        x = f[group]["x"][...].astype(np.float64)
    x = x * float(meta["dlbench_input_scale"])
    if meta.get("dlbench_input_mean"):
        mean = np.array([float(v) for v in meta["dlbench_input_mean"].split(",")])
        std = np.array([float(v) for v in meta["dlbench_input_std"].split(",")])
        shape = (1, -1) + (1,) * (x.ndim - 2)
        x = (x - mean.reshape(shape)) / std.reshape(shape)
    rows = [json.loads(line) for line in open(jsonl) if line.strip()]
    if len(rows) != len(x) or [r["index"] for r in rows] != list(range(len(x))):
        return f"bad {jsonl}: {len(rows)} rows for {len(x)} samples"
    logits = np.array([r["logits"] for r in rows], dtype=np.float32)
    if any(r["class"] != int(np.argmax(r["logits"])) for r in rows):
        return f"bad {jsonl}: a class that is not the argmax of its logits"
    os.makedirs(out, exist_ok=True)
    x.astype(np.float32).tofile(f"{out}/input.bin")
    logits.tofile(f"{out}/logits.bin")
    json.dump({"input_dtype": "float32", "input_shape": list(x.shape),
               "logits_shape": list(logits.shape)}, open(f"{out}/meta.json", "w"))
    link = f"{out}/model.onnx"
    if not os.path.exists(link):
        os.symlink(os.path.abspath(model), link)
    return f"ok {out} samples={len(x)} scale={meta['dlbench_input_scale']} " \
           f"mean={meta.get('dlbench_input_mean', '')} std={meta.get('dlbench_input_std', '')}"


line = main(*sys.argv[1:6])
print(line)
sys.exit(0 if line.startswith("ok") else 1)
