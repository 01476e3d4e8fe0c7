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

# --- fine-tuning: init = dl.from_run(d, { checkpoint = "best", exclude = { "Linear4" } }) ---
# a 3-class head on 4-class features: one step at lr 1e-7 from the run's
# best checkpoint; the body equals the source's (h5py), the head equals a
# fresh run's of the same seed, the log names what was loaded / skipped / new
run import3 0 import --synthetic blobs --classes 3 --samples 600 --noise 0.6 --seed 4 "$OUT/b3.h5" || exit 0
if run ft 0 run tests/run_scripts/after.lua path="$OUT/b3.h5" head=3 from="$d" exclude=Linear4 \
    lr=1e-7 --stop-after 1 --out "$OUT/ft" &&
    run fresh 0 run tests/run_scripts/after.lua path="$OUT/b3.h5" head=3 lr=1e-7 --stop-after 1 \
        --out "$OUT/fresh"; then
    ft=$(run_dir_of ft)
    fr=$(run_dir_of fresh)
    loaded='loaded 6: Linear1.weight, Linear1.bias, BatchNorm2.weight, BatchNorm2.bias, BatchNorm2.running_mean, BatchNorm2.running_var'
    if ! grep -qF "init: $loaded" "$ft/events.log" || ! grep -qF "[init] $loaded" "$OUT/ft.log" ||
        ! grep -qF 'init: skipped (excluded) 2: Linear4.weight, Linear4.bias' "$ft/events.log" ||
        ! grep -qF 'init: new (initialised afresh) 0: none' "$ft/events.log" ||
        ! grep -qF "checkpoint-best.h5" "$ft/events.log"; then
        fail from_run_log "$(grep init "$ft/events.log")"
    else
        pass from_run_log
    fi
    if [ $have_h5py = 0 ]; then
        skip from_run_values "no h5py/numpy for $PY"
    elif "$PY" - "$d/checkpoint-best.h5" "$ft/checkpoint.h5" "$fr/checkpoint.h5" >"$OUT/ftpy.log" 2>&1 <<'PYEOF'; then
import sys
import h5py, numpy as np
src, ft, fr = (h5py.File(p, "r") for p in sys.argv[1:4])
for k in ("Linear1.weight", "Linear1.bias", "BatchNorm2.weight", "BatchNorm2.bias"):
    a, b, c = src["params"][k][...], ft["params"][k][...], fr["params"][k][...]
    assert a.shape == b.shape
    assert np.abs(a - b).max() < 1e-5, (k, np.abs(a - b).max())   # loaded (one step of 1e-7)
    assert np.abs(c - b).max() > 1e-2, k                            # not what a fresh run has
for k in ("Linear4.weight", "Linear4.bias"):
    b, c = ft["params"][k][...], fr["params"][k][...]
    assert b.shape == ((3, 16) if k.endswith("weight") else (3,)) and src["params"][k].shape[0] == 4
    assert np.abs(c - b).max() < 1e-5, (k, np.abs(c - b).max())    # freshly initialised
# the running statistics start from the source's: one step of momentum 0.1 from it
for k in ("BatchNorm2.running_mean", "BatchNorm2.running_var"):
    a, b, c = src["buffers"][k][...], ft["buffers"][k][...], fr["buffers"][k][...]
    assert np.abs(b - a).max() < np.abs(c - a).max(), k
print("ok")
PYEOF
        pass from_run_values
    else
        fail from_run_values "$(tail -5 "$OUT/ftpy.log")"
    fi
fi
# a layer the source lacks: everything else loaded, its tensors new
if run ft_new 0 run tests/run_scripts/after.lua path="$OUT/blobs.h5" from="$d" extra=true epochs=1 \
    --out "$OUT/ft_new"; then
    e=$(run_dir_of ft_new)/events.log
    if grep -qF 'init: loaded 8: Linear1.weight' "$e" && grep -qF 'init: skipped (excluded) 0: none' "$e" &&
        grep -qF 'init: new (initialised afresh) 2: Linear6.weight, Linear6.bias' "$e"; then
        pass from_run_new_tensors
    else
        fail from_run_new_tensors "$(grep init "$e")"
    fi
fi
# without the exclusion the head's shapes differ: exit 2 naming both, no run folder
if run ft_shape 2 run tests/run_scripts/after.lua path="$OUT/b3.h5" head=3 from="$d" --out "$OUT/ft_bad" &&
    grep -qF 'Linear4.weight is [4, 16] in' "$OUT/ft_shape.log" &&
    grep -qF '[3, 16] in this model (exclude "Linear4"' "$OUT/ft_shape.log" &&
    [ -z "$(ls -A "$OUT/ft_bad" 2>/dev/null)" ]; then
    pass from_run_shape_mismatch
else
    fail from_run_shape_mismatch "$(tail -2 "$OUT/ft_shape.log"); left: $(ls "$OUT/ft_bad" 2>/dev/null)"
fi

# --- bad input: exit 2, a message naming the problem, nothing written ----------------------
cp -r "$d" "$OUT/nockpt" && rm -f "$OUT/nockpt"/checkpoint*.h5
cp -r "$d" "$OUT/foreign" && cp "$(run_dir_of train10)/checkpoint.h5" "$OUT/foreign/checkpoint.h5"
cp -r "$d" "$OUT/flipped"
size=$(stat -c %s "$d/checkpoint.h5")
"$PY" - "$OUT/flipped/checkpoint.h5" <<'PYEOF' 2>/dev/null || printf '\x55\xaa\x55\xaa' | dd of="$OUT/flipped/checkpoint.h5" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
import sys, h5py
f = h5py.File(sys.argv[1], "r")
off = f["arena/params"].id.get_offset()  # a byte inside the parameters
f.close()
with open(sys.argv[1], "r+b") as o:
    o.seek(off + 5); b = o.read(1); o.seek(off + 5); o.write(bytes([b[0] ^ 0x5a]))
PYEOF
cp -r "$d" "$OUT/torn" && head -c $((size / 3)) "$d/checkpoint.h5" >"$OUT/torn/checkpoint.h5"
printf 'a,b,c\n1,2,3\n4,5,6\n' >"$OUT/three_l.csv"
run import_three 0 import --label c "$OUT/three_l.csv" "$OUT/three.h5" >/dev/null
printf 'w,x,y,z\n1,2,3,0\n4,5,6,3\n' >"$OUT/wide.csv"
run import_wide 0 import --label z "$OUT/wide.csv" "$OUT/wide.h5" >/dev/null
bad() { # name pattern args...: exit 2, the pattern in the output, no $OUT/junk.* left
    local name=$1 pattern=$2
    shift 2
    if run "$name" 2 "$@" && grep -qF -- "$pattern" "$OUT/$name.log" && [ -z "$(ls "$OUT" | grep '^junk')" ]; then
        pass "$name"
    else
        fail "$name" "expected '$pattern': $(tail -2 "$OUT/$name.log"); $(ls "$OUT" | grep '^junk')"
    fi
}
bad bad_no_checkpoint "the run has no checkpoint" eval "$OUT/nockpt"
bad bad_no_checkpoint_predict "the run has no checkpoint" predict "$OUT/nockpt" "$OUT/blobs.h5" -o "$OUT/junk.csv"
bad bad_foreign_checkpoint "Linear4.weight is [10, 16] in the checkpoint, [4, 16] in this model" eval "$OUT/foreign"
bad bad_foreign_predict "written for another model" predict "$OUT/foreign" "$OUT/feat.csv" -o "$OUT/junk.csv"
bad bad_corrupt_checkpoint "checksum mismatch" eval "$OUT/flipped" --json
bad bad_truncated_checkpoint "not a readable HDF5 file" predict "$OUT/torn" "$OUT/feat.csv" -o "$OUT/junk.jsonl"
bad bad_unknown_checkpoint 'no checkpoint "nosuch"' eval "$d" --checkpoint nosuch
bad bad_unknown_checkpoint_lists "the run has: " eval "$d" --checkpoint nosuch
bad bad_checkpoint_name "expected best, last or a checkpoint name" eval "$d" --checkpoint ../x
bad bad_eval_shape "expects 2 features in its last dimension, got per-sample input [3]" eval "$d" --data "$OUT/wide.h5:/train"
bad bad_eval_no_group "/nosuch" eval "$d" --data "$OUT/blobs.h5:/nosuch"
bad bad_predict_no_file "no such file" predict "$d" "$OUT/nosuch.h5" -o "$OUT/junk.csv"
bad bad_predict_image "image input needs a run trained on images" predict "$d" "$OUT/photo.png" -o "$OUT/junk.csv"
bad bad_from_run_missing "init = dl.from_run" run tests/run_scripts/after.lua path="$OUT/b3.h5" head=3 from="$OUT/nosuchrun" --out "$OUT/junkruns"
# eval --data on another group: the training split, counted by numpy
if run eval_data 0 eval "$d" --data "$OUT/blobs.h5:/train" --json && grep -q '"samples":[[:space:]]*800' "$OUT/eval_data.log" &&
    grep -q '"data":[[:space:]]*".*blobs.h5:/train"' "$OUT/eval_data.log"; then
    pass eval_data_group
else
    fail eval_data_group "$(head -c 300 "$OUT/eval_data.log")"
fi
