#!/usr/bin/env bash
# t_predict_images.sh - `dlbench predict RUN INPUT` with PNG/JPEG files and
# folders: a tiny CNN trained on an image folder imported with --size 8x8
# (images of several sizes, RGB and grey, PNG and JPEG, written by Pillow),
# then predict on the folder, on one file, and on the imported HDF5 must
# give the same logits digit for digit, the rows naming the files in path
# order; bad input (a corrupt image, a PNG named .jpg, an empty folder, a
# run whose input is not [C, H, W]) exits 2 naming it and writes nothing.
. "$(dirname "$0")/lib.sh"
test_init
PY=/usr/bin/python3
require_subcommand predict_images predict
if ! "$PY" -c 'import numpy, PIL.Image' 2>/dev/null; then
    skip predict_images "needs $PY with numpy and Pillow (python3-numpy, python3-pil)"
    exit 0
fi
run_dir_of() { sed -n 's/^run folder: //p' "$OUT/$1.log" | tail -1; }

"$PY" - "$OUT" <<'PYEOF' || { fail predict_images_setup "the python generator failed"; exit 0; }
import os, sys
import numpy as np
from PIL import Image
out = sys.argv[1]
rng = np.random.default_rng(11)
# class "dark" and "light"; sizes and modes vary so resizing and conversion matter
for cls, base in (("light", 170), ("dark", 60)):
    os.makedirs(f"{out}/imgs/{cls}")
    for i in range(12):
        h, w = [(8, 8), (12, 10), (9, 16), (20, 20)][i % 4]
        a = np.clip(base + rng.integers(-50, 51, (h, w, 3)), 0, 255).astype(np.uint8)
        if i % 3 == 2:
            Image.fromarray(a[:, :, 0], "L").save(f"{out}/imgs/{cls}/{i:02d}.png")
        elif i % 3 == 1:
            Image.fromarray(a).save(f"{out}/imgs/{cls}/{i:02d}.jpg", quality=90)
        else:
            Image.fromarray(a).save(f"{out}/imgs/{cls}/{i:02d}.png")
open(f"{out}/imgs/README.txt", "w").write("not an image\n")
os.makedirs(f"{out}/empty/sub")
os.makedirs(f"{out}/bad")
png = open(f"{out}/imgs/light/00.png", "rb").read()
open(f"{out}/bad/broken.png", "wb").write(png[:len(png) // 2])
open(f"{out}/bad/renamed.jpg", "wb").write(png)
PYEOF

cat >"$OUT/cnn.lua" <<EOF
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { flat = false }
return dl.experiment {
  name = "img-cnn",
  data = dl.data.hdf5 { path = "$OUT/imgs.h5", train = "/train", val = "/train",
                        mean = { 0.5, 0.4, 0.45 }, std = { 0.25, 0.3, 0.2 }, flatten = hp.flat },
  model = hp.flat and nn.Sequential { nn.Linear(192, 2) } or nn.Sequential {
    nn.Conv2d(3, 4, 3, { pad = 1 }), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 2),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = 0.05, momentum = 0.9 },
  batch = 8, epochs = 2, device = "cpu", seed = 3,
}
EOF
run import 0 import "$OUT/imgs" "$OUT/imgs.h5" --size 8x8 --channels 3 || exit 0
run train 0 run "$OUT/cnn.lua" --out "$OUT/runs" -q || exit 0
d=$(run_dir_of train)

if run pred_h5 0 predict "$d" "$OUT/imgs.h5:/train" --logits --top-k 2 -o "$OUT/h5.csv" &&
    run pred_dir 0 predict "$d" "$OUT/imgs" --logits --top-k 2 -o "$OUT/dir.csv" &&
    run pred_one 0 predict "$d" "$OUT/imgs/dark/01.jpg" --logits --format jsonl &&
    run pred_dir_json 0 predict "$d" "$OUT/imgs" --logits --format jsonl -o "$OUT/dir.jsonl"; then
    if "$PY" - "$OUT" >"$OUT/cmp.log" 2>&1 <<'PYEOF'; then
import csv, json, os, sys
out = sys.argv[1]
h5 = list(csv.DictReader(open(f"{out}/h5.csv")))
dr = list(csv.DictReader(open(f"{out}/dir.csv")))
# the files in path order: what the importer read, in its order (class folders, names)
files = sorted(f"{out}/imgs/{c}/{n}" for c in ("dark", "light") for n in os.listdir(f"{out}/imgs/{c}"))
assert [r["file"] for r in dr] == files, [r["file"] for r in dr][:3]
assert len(h5) == len(dr) == 24
cols = [k for k in h5[0] if k.startswith("logit_") or k.startswith("class") or k.startswith("prob")]
assert "logit_1" in cols
for a, b in zip(h5, dr):
    for k in cols:
        assert a[k] == b[k], (b["file"], k, a[k], b[k])
# not all one class: the logits carry the images
assert len({r["class"] for r in dr}) == 2, {r["class"] for r in dr}
js = [json.loads(l) for l in open(f"{out}/dir.jsonl")]
assert [j["file"] for j in js] == files
assert all(abs(j["logits"][k] - float(r[f"logit_{k}"])) <= 1e-6 * max(1, abs(j["logits"][k]))
           for j, r in zip(js, dr) for k in range(2))
one = [json.loads(l) for l in open(f"{out}/pred_one.log") if l.startswith("{")]
i = files.index(f"{out}/imgs/dark/01.jpg")
assert len(one) == 1 and one[0]["file"] == files[i] and one[0]["logits"] == js[i]["logits"], one
print("ok", len(dr), "rows")
PYEOF
        pass predict_images_equal_h5
    else
        fail predict_images_equal_h5 "$(tail -5 "$OUT/cmp.log")"
    fi
fi

run train_flat 0 run "$OUT/cnn.lua" flat=true --out "$OUT/runs_flat" -q || exit 0
flat=$(run_dir_of train_flat)
bad() { # name pattern args...: exit 2, the pattern in the output, no $OUT/junk.* left
    local name=$1 pattern=$2
    shift 2
    if run "$name" 2 "$@" && grep -qF -- "$pattern" "$OUT/$name.log" && [ -z "$(ls "$OUT" | grep '^junk')" ]; then
        pass "$name"
    else
        fail "$name" "expected '$pattern': $(tail -2 "$OUT/$name.log"); $(ls "$OUT" | grep '^junk')"
    fi
}
bad predict_image_corrupt "$OUT/bad/broken.png: PNG" predict "$d" "$OUT/bad/broken.png" -o "$OUT/junk.csv"
bad predict_image_corrupt_in_folder "$OUT/bad/broken.png" predict "$d" "$OUT/bad" -o "$OUT/junk.csv"
bad predict_image_renamed "$OUT/bad/renamed.jpg: the file is a PNG image but its name does not end in .png" \
    predict "$d" "$OUT/bad/renamed.jpg" -o "$OUT/junk.csv"
bad predict_image_empty_folder "$OUT/empty: no PNG or JPEG files" predict "$d" "$OUT/empty" -o "$OUT/junk.jsonl"
bad predict_image_not_chw "image input needs a run trained on images" predict "$flat" "$OUT/imgs" -o "$OUT/junk.csv"
bad predict_image_missing "no such file or folder" predict "$d" "$OUT/nosuch.png" -o "$OUT/junk.csv"
