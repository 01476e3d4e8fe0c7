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

# --- dlbench eval ----------------------------------------------------------------------
# the last checkpoint against the last epoch's val_loss / val_acc, the best
# against the best val_acc; precision and recall against numpy on the
# confusion matrix; the matrix against a count from numpy's own forward
# pass over the h5py tensors
if run eval_last 0 eval "$d" --json --out "$OUT/runs" && run eval_best 0 eval "$d" --checkpoint best --json &&
    run eval_text 0 eval "$d"; then
    if [ $have_h5py = 0 ]; then
        skip eval_numbers "no h5py/numpy for $PY"
    elif "$PY" - "$OUT/eval_last.log" "$OUT/eval_best.log" "$d" "$OUT/blobs.h5" >"$OUT/evalpy.log" 2>&1 <<'PYEOF'; then
import json, math, sys
import h5py, numpy as np
last, best = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
run, data = sys.argv[3], sys.argv[4]
epochs = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"kind":"epoch"' in l]
assert last["accuracy"] == epochs[-1]["val_acc"], (last["accuracy"], epochs[-1]["val_acc"])
assert math.isclose(last["loss"], epochs[-1]["val_loss"], rel_tol=1e-6), (last["loss"], epochs[-1])
assert best["accuracy"] == max(e["val_acc"] for e in epochs), best["accuracy"]
assert [c["name"] for c in last["classes"]] == ["north", "east", "south", "west"]
for rep in (last, best):
    cm = np.array(rep["confusion"])
    assert cm.sum() == rep["samples"] == 200
    assert math.isclose(np.trace(cm) / cm.sum(), rep["accuracy"], rel_tol=1e-12)
    for k, c in enumerate(rep["classes"]):
        assert math.isclose(c["precision"], cm[k, k] / cm[:, k].sum(), rel_tol=1e-12), (k, c)
        assert math.isclose(c["recall"], cm[k, k] / cm[k, :].sum(), rel_tol=1e-12), (k, c)
        assert c["support"] == cm[k, :].sum()
# an independent count: the forward pass in numpy from the checkpoint's named tensors
ck = h5py.File(run + "/checkpoint.h5", "r")
P = {k: ck["params"][k][...].astype(np.float64) for k in ck["params"]}
B = {k: ck["buffers"][k][...].astype(np.float64) for k in ck["buffers"]}
x = h5py.File(data, "r")["test/x"][...].astype(np.float64)
y = h5py.File(data, "r")["test/y"][...]
h = x @ P["Linear1.weight"].T + P["Linear1.bias"]
h = (h - B["BatchNorm2.running_mean"]) / np.sqrt(B["BatchNorm2.running_var"] + 1e-5)
h = np.maximum(h * P["BatchNorm2.weight"] + P["BatchNorm2.bias"], 0)
z = h @ P["Linear4.weight"].T + P["Linear4.bias"]
top2 = np.sort(z, axis=1)[:, -2:]
clear = (top2[:, 1] - top2[:, 0]) > 1e-4  # leave out near-ties that rounding may flip
cm = np.zeros((4, 4), int)
np.add.at(cm, (y, z.argmax(1)), 1)
mine = np.array(last["confusion"])
assert clear.sum() >= 195
assert np.abs(cm - mine).sum() <= 2 * (~clear).sum(), (cm, mine)
print("ok")
PYEOF
        pass eval_numbers
    else
        fail eval_numbers "$(tail -5 "$OUT/evalpy.log")"
    fi
    if grep -q "^accuracy    $(sed -n 's/.*"accuracy":[[:space:]]*\([0-9.]*\).*/\1/p' "$OUT/eval_last.log")" "$OUT/eval_text.log" ||
        grep -Eq '^accuracy +0\.[0-9]+ \([0-9]+ of 200\)' "$OUT/eval_text.log"; then
        pass eval_text_report
    else
        fail eval_text_report "$(head -8 "$OUT/eval_text.log")"
    fi
fi

# ten classes with long names: the confusion matrix fits 80 columns
names=$(seq -f 'category-number-%g' 0 9 | paste -sd,)
if run import10 0 import --synthetic blobs --classes 10 --samples 1000 --noise 0.3 \
    --class-names "$names" "$OUT/ten.h5" &&
    run train10 0 run tests/run_scripts/after.lua path="$OUT/ten.h5" head=10 epochs=1 --out "$OUT/runs10" &&
    run eval10 0 eval "$(run_dir_of train10)"; then
    wide=$(awk 'length($0) > 80' "$OUT/eval10.log" | grep -v '^run \|^checkpoint \|^data ' | head -2)
    rows=$(grep -c '^category-' "$OUT/eval10.log")
    # the common prefix "category-number-" left out: columns 0..9, rows 0..9
    if [ -z "$wide" ] && [ "$rows" -eq 10 ] && grep -Eq '^ +0 +1 +2 +3 +4 +5 +6 +7 +8 +9$' "$OUT/eval10.log" &&
        [ "$(grep -Ec '^[0-9] +[0-9]' "$OUT/eval10.log")" -eq 10 ]; then
        pass eval_confusion_80_columns
    else
        fail eval_confusion_80_columns "rows $rows, too wide: $wide"
    fi
fi

# --- dlbench predict ---------------------------------------------------------------------
# logits against numpy's forward pass from the h5py tensors (x times the
# run's scale), probabilities against their softmax, the class against the
# argmax; the CSV of the same features gives the same rows; -o is atomic
run train_s 0 run tests/run_scripts/after.lua path="$OUT/blobs.h5" scale=0.5 epochs=2 --out "$OUT/runs_s" || exit 0
ds=$(run_dir_of train_s)
if [ $have_h5py = 0 ]; then
    skip predict_numbers "no h5py/numpy for $PY"
else
    "$PY" - "$OUT/blobs.h5" "$OUT/feat.csv" "$OUT/feat_label.csv" <<'PYEOF'
import sys
import h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
x, y = f["test/x"][...], f["test/y"][...]
with open(sys.argv[2], "w") as o:
    o.write("u,v\n")
    for r in x:
        o.write("%.9g,%.9g\n" % tuple(r))
with open(sys.argv[3], "w") as o:  # no header, the label in the middle
    for r, l in zip(x, y):
        o.write("%.9g,%d,%.9g\n" % (r[0], l, r[1]))
PYEOF
    if run pred_h5 0 predict "$ds" "$OUT/blobs.h5:/test" --logits --top-k 4 -o "$OUT/pred.csv" &&
        run pred_csv 0 predict "$ds" "$OUT/feat.csv" --logits --top-k 4 &&
        run pred_csv_label 0 predict "$ds" "$OUT/feat_label.csv" --label 1 --logits --top-k 4 &&
        run pred_jsonl 0 predict "$ds" "$OUT/blobs.h5" --top-k 3 --format jsonl; then
        if "$PY" - "$ds" "$OUT/blobs.h5" "$OUT/pred.csv" "$OUT/pred_csv.log" "$OUT/pred_csv_label.log" \
            "$OUT/pred_jsonl.log" >"$OUT/predpy.log" 2>&1 <<'PYEOF'; then
import csv, json, sys
import h5py, numpy as np
run, data, pred, pcsv, plabel, pjson = sys.argv[1:7]
ck = h5py.File(run + "/checkpoint.h5", "r")
P = {k: ck["params"][k][...].astype(np.float64) for k in ck["params"]}
B = {k: ck["buffers"][k][...].astype(np.float64) for k in ck["buffers"]}
x = h5py.File(data, "r")["test/x"][...].astype(np.float64) * 0.5  # the run's scale
h = x @ P["Linear1.weight"].T + P["Linear1.bias"]
h = (h - B["BatchNorm2.running_mean"]) / np.sqrt(B["BatchNorm2.running_var"] + 1e-5)
h = np.maximum(h * P["BatchNorm2.weight"] + P["BatchNorm2.bias"], 0)
z = h @ P["Linear4.weight"].T + P["Linear4.bias"]
p = np.exp(z - z.max(1, keepdims=True)); p /= p.sum(1, keepdims=True)
rows = list(csv.DictReader(open(pred)))
assert len(rows) == 200 and [int(r["index"]) for r in rows] == list(range(200))
names = ["north", "east", "south", "west"]
logits = np.array([[float(r["logit_%d" % k]) for k in range(4)] for r in rows])
assert np.allclose(logits, z, rtol=1e-4, atol=1e-5), np.abs(logits - z).max()
for i, r in enumerate(rows):
    order = [int(r["class"])] + [int(r["class_%d" % j]) for j in (2, 3, 4)]
    probs = [float(r["probability"])] + [float(r["probability_%d" % j]) for j in (2, 3, 4)]
    assert sorted(order) == [0, 1, 2, 3] and probs == sorted(probs, reverse=True), r
    assert np.allclose(probs, p[i, order], rtol=1e-5, atol=1e-7), (r, p[i])
    assert r["name"] == names[order[0]]
    margin = np.sort(z[i])[-1] - np.sort(z[i])[-2]
    assert order[0] == z[i].argmax() or margin < 1e-4, (i, r, z[i])
for other in (pcsv, plabel):  # the same features through the CSV reader
    o = list(csv.DictReader(open(other)))
    assert len(o) == 200
    ol = np.array([[float(r["logit_%d" % k]) for k in range(4)] for r in o])
    assert np.allclose(ol, logits, rtol=1e-5, atol=1e-6), (other, np.abs(ol - logits).max())
js = [json.loads(l) for l in open(pjson)]
assert len(js) == 200 and all(len(j["top"]) == 3 and j["top"][0]["class"] == j["class"] for j in js)
assert all(j["class"] == int(r["class"]) and j["name"] == r["name"] for j, r in zip(js, rows))
print("ok")
PYEOF
            pass predict_numbers
        else
            fail predict_numbers "$(tail -5 "$OUT/predpy.log")"
        fi
    fi
fi
# wrong shape: both shapes named, exit 2, nothing at -o (nor a temporary file)
printf 'a,b,c\n1,2,3\n' >"$OUT/three.csv"
if run pred_shape 2 predict "$ds" "$OUT/three.csv" -o "$OUT/nothing.csv" &&
    grep -q 'samples of shape \[3\] do not fit the model input \[2\]' "$OUT/pred_shape.log" &&
    [ -z "$(ls "$OUT" | grep nothing)" ]; then
    pass predict_wrong_shape
else
    fail predict_wrong_shape "$(cat "$OUT/pred_shape.log"; ls "$OUT" | grep nothing)"
fi
