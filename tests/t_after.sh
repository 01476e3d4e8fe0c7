#!/usr/bin/env bash
# t_after.sh - after training: the checkpoint's named tensors read by h5py
# (shapes from the architecture, values equal to the arena's), `dlbench
# eval`, `dlbench predict` and fine-tuning with dl.from_run on a 4-class
# blobs run (tests/run_scripts/after.lua), each checked against numpy or an
# independent count; bad input exits 2 and writes nothing.
. "$(dirname "$0")/lib.sh"
test_init
PY=/usr/bin/python3
have_h5py=0
"$PY" -c 'import h5py, numpy' 2>/dev/null && have_h5py=1

run_dir_of() { sed -n 's/^run folder: //p' "$OUT/$1.log" | tail -1; }

run import 0 import --synthetic blobs --classes 4 --samples 800 --noise 0.6 --seed 3 \
    --class-names north,east,south,west "$OUT/blobs.h5" || exit 0
run train 0 run tests/run_scripts/after.lua path="$OUT/blobs.h5" --out "$OUT/runs" || exit 0
d=$(run_dir_of train)

# --- the checkpoint as h5py sees it ------------------------------------------------------
if [ $have_h5py = 0 ]; then
    skip ckpt_named_h5py "no h5py/numpy for $PY"
elif "$PY" - "$d/checkpoint.h5" >"$OUT/h5py.log" 2>&1 <<'PYEOF'; then
import sys
import h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert f.attrs["version"] == 2, f.attrs["version"]
assert f.attrs["format"] == b"dlbench-checkpoint 2" or f.attrs["format"] == "dlbench-checkpoint 2"
# the shapes the architecture gives, PyTorch's convention (weight [out, in])
want = {"Linear1.weight": (16, 2), "Linear1.bias": (16,), "BatchNorm2.weight": (16,),
        "BatchNorm2.bias": (16,), "Linear4.weight": (4, 16), "Linear4.bias": (4,)}
bufs = {"BatchNorm2.running_mean": (16,), "BatchNorm2.running_var": (16,)}
layout = f.attrs["layout"]
layout = layout.decode() if isinstance(layout, bytes) else layout
place = {}
for line in layout.splitlines()[1:]:
    kind, name, off, n, dims = line.split(" ")
    place[(kind, name)] = (int(off), int(n))
for g, names, kind in (("params", want, "param"), ("moment1", want, "param"),
                       ("moment2", want, "param"), ("buffers", bufs, "buffer")):
    assert sorted(f[g].keys()) == sorted(names), (g, sorted(f[g].keys()))
    arena = f["arena/" + g][...]
    for name, shape in names.items():
        ds = f[g][name]
        assert ds.shape == shape, (g, name, ds.shape, shape)
        off, n = place[(kind, name)]
        assert np.array_equal(ds[...].ravel(), arena[off:off + n]), (g, name)
        assert np.all(np.isfinite(ds[...]))
# trained, not the init: running_var moved from 1, a moment is non-zero
assert not np.allclose(f["buffers/BatchNorm2.running_var"][...], 1.0)
assert np.abs(f["moment2/Linear4.weight"][...]).max() > 0
print("ok")
PYEOF
    pass ckpt_named_h5py
else
    fail ckpt_named_h5py "$(tail -5 "$OUT/h5py.log")"
fi
