"""py_check.py - independent readers of dlbench's exports: python3-onnx's checker, and PyTorch loading the safetensors file.

usage: /usr/bin/python3 py_check.py onnx DIR...        every DIR/model.onnx passes
                                                       onnx.checker (full_check) and
                                                       strict shape inference, opset <= 17,
                                                       input "input", output "logits",
                                                       a symbolic batch dimension
       /usr/bin/python3 py_check.py torch KIND DIR...  the equivalent torch module of KIND
                                                       (mlp, cnn, resnet, gpt: as tests/test_export.c
                                                       builds them; pairs of KIND DIR) loads DIR/model.safetensors
                                                       strictly and gives DIR/logits.bin on
                                                       DIR/input.bin
Prints one line per check, "ok ..." or "bad ...", and exits 1 when one is bad.
The safetensors file is parsed here by hand (8-byte length, JSON header, raw
little-endian tensors), so the test needs no safetensors package.
"""
import json
import struct
import sys

import numpy as np


def check_onnx(dirs):
    import onnx
    bad = 0
    for d in dirs:
        try:
            m = onnx.load(f"{d}/model.onnx")
            onnx.checker.check_model(m, full_check=True)
            inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
            opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
            ins = [i.name for i in m.graph.input]
            outs = [o.name for o in m.graph.output]
            first = m.graph.input[0].type.tensor_type.shape.dim[0].dim_param
            assert opset <= 17, f"opset {opset}"
            assert ins == ["input"] and outs == ["logits"], f"{ins} -> {outs}"
            assert first == "batch", f"first input dimension {first!r}"
            print(f"ok {d} opset={opset} nodes={len(m.graph.node)} "
                  f"values={len(inferred.graph.value_info)}")
        except Exception as e:  # the checker's message is the point
            bad += 1
            print(f"bad {d} {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return bad


def read_safetensors(path):
    import torch
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        b0, b1 = e["data_offsets"]
        dtype = {"F32": "<f4", "I64": "<i8"}[e["dtype"]]
        arr = np.frombuffer(data[b0:b1], dtype=dtype).reshape(e["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


def torch_model(kind):
    import torch.nn as nn

    class Residual(nn.Module):
        """y = block(x) + shortcut(x), the identity when there is no shortcut (dlbench's nn.Residual)."""

        def __init__(self, block, shortcut=None):
            super().__init__()
            self.block = block
            if shortcut is not None:
                self.shortcut = shortcut

        def forward(self, x):
            s = self.shortcut(x) if hasattr(self, "shortcut") else x
            return self.block(x) + s

    def basic_block(cin, cout, stride):
        block = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                              nn.ReLU(), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                              nn.BatchNorm2d(cout))
        sc = None
        if stride != 1 or cin != cout:
            sc = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))
        return nn.Sequential(Residual(block, sc), nn.ReLU())

    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    if kind == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Dropout(0.25), nn.Conv2d(8, 16, 3, padding=2, dilation=2, groups=2),
            nn.BatchNorm2d(16), nn.ReLU(), nn.AvgPool2d(2, 2, 1), nn.AdaptiveAvgPool2d(4),
            nn.Flatten(), nn.Linear(256, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(32, 10))
    if kind == "resnet":
        return nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            basic_block(8, 8, 1), basic_block(8, 16, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(16, 10))
    if kind == "gpt":
        import torch

        class PositionalEmbedding(nn.Module):
            """x [n, t, d] + weight[:t] (dlbench's nn.PositionalEmbedding)."""

            def __init__(self, max_len, d):
                super().__init__()
                self.weight = nn.Parameter(torch.zeros(max_len, d))

            def forward(self, x):
                return x + self.weight[: x.shape[1]]

        class Attention(nn.MultiheadAttention):
            """Causal self-attention on [n, t, d] (nn.MultiheadAttention(causal = true))."""

            def forward(self, x):
                t = x.shape[1]
                mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
                return super().forward(x, x, x, attn_mask=mask, need_weights=False)[0]

        def block(d, heads):
            att = nn.Sequential(nn.LayerNorm(d), Attention(d, heads, batch_first=True))
            mlp = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            return nn.Sequential(Residual(att), Residual(mlp))

        return nn.Sequential(nn.Embedding(20, 16), PositionalEmbedding(12, 16), block(16, 4),
                             block(16, 4), nn.LayerNorm(16), nn.Linear(16, 20))
    raise SystemExit(f"py_check.py: no torch model {kind}")


def check_torch(kind, d):
    import torch
    meta = json.load(open(f"{d}/meta.json"))
    dtype = "<i8" if meta["input_dtype"] == "int64" else "<f4"
    x = np.fromfile(f"{d}/input.bin", dtype=dtype).reshape(meta["input_shape"])
    want = np.fromfile(f"{d}/logits.bin", dtype="<f4").reshape(meta["logits_shape"])
    model = torch_model(kind)
    try:
        model.load_state_dict(read_safetensors(f"{d}/model.safetensors"), strict=True)
    except Exception as e:
        print(f"bad {d} load_state_dict: {str(e).splitlines()[0]}")
        return 1
    model.eval()
    with torch.no_grad():
        got = model(torch.from_numpy(x)).numpy()
    scale = np.maximum(1.0, np.abs(want).max(axis=-1))
    rel = float((np.abs(got - want).max(axis=-1) / scale).max())
    agree = float((got.argmax(-1) == want.argmax(-1)).mean())
    line = f"{d} {kind} rows={len(want)} agree={agree:.4f} maxrel={rel:.2e} spread={want.std():.3f}"
    if agree >= 0.999 and rel <= 1e-4:
        print("ok " + line)
        return 0
    print("bad " + line)
    return 1


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "onnx":
        return check_onnx(sys.argv[2:])
    if len(sys.argv) >= 4 and len(sys.argv) % 2 == 0 and sys.argv[1] == "torch":
        pairs = sys.argv[2:]
        return sum(check_torch(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2))
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
