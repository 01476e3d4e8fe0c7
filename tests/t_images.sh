#!/usr/bin/env bash
# t_images.sh - `dlbench import DIR` for image folders: pixels against Pillow, labels, splits, workers, bad input, a CNN trained on the result
. "$(dirname "$0")/lib.sh"
test_init
PY=/usr/bin/python3
require_subcommand images import

if ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then
    skip images "needs /usr/bin/python3 with h5py and numpy (python3-h5py, python3-numpy)"
    exit 0
fi
have_pil=0
"$PY" -c 'import PIL.Image' 2>/dev/null && have_pil=1

# imp NAME STATUS ARGS...: dlbench import ARGS with stdout+stderr in $OUT/NAME.log
imp() {
    local name=$1 want=$2
    shift 2
    "$DLBENCH" import "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    [ "$rc" -eq "$want" ] && return 0
    fail "$name" "exit status $rc, expected $want: $(tail -c 400 "$OUT/$name.log")"
    return 1
}

# The folders, written by Pillow when it is there, else PNGs by hand (zlib).
"$PY" - "$OUT" "$have_pil" <<'PYEOF' || { fail images_setup "the python generator failed"; exit 1; }
import os, sys, struct, zlib
import numpy as np
out, have_pil = sys.argv[1], sys.argv[2] == "1"
rng = np.random.default_rng(7)

def png(path, a):
    """An 8-bit grey or RGB PNG written by hand (the fallback without Pillow)."""
    h, w = a.shape[:2]
    ct = 0 if a.ndim == 2 else 2
    raw = b"".join(b"\0" + a[y].tobytes() for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, ct, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

def save(path, a, mode=None, **kw):
    if have_pil:
        from PIL import Image
        (Image.fromarray(a, mode) if mode else Image.fromarray(a)).save(path, **kw)
    else:
        png(path, a)

def smooth(h, w, c):
    """An image with structure (so JPEG and resizing have something to keep)."""
    y, x = np.mgrid[0:h, 0:w]
    planes = [(127 + 120 * np.sin(x / (3 + k) + y / (5 + 2 * k) + rng.uniform(0, 6))) for k in range(c)]
    a = np.stack(planes, -1) + rng.integers(-6, 7, (h, w, c))
    a = np.clip(a, 0, 255).astype(np.uint8)
    return a[:, :, 0] if c == 1 else a

# f1: three classes created out of order, 5 PNGs each (RGB, 20x24)
for cls in ["zebra", "ant", "moth"]:
    os.makedirs(f"{out}/f1/{cls}")
    for i in range(5):
        save(f"{out}/f1/{cls}/img{4 - i}.png", smooth(20, 24, 3))
# strat: 2 classes of 8 and 12, for the stratified split and the workers
for cls, n in (("a", 8), ("b", 12)):
    os.makedirs(f"{out}/strat/{cls}")
    for i in range(n):
        save(f"{out}/strat/{cls}/{i:02d}.png", smooth(16, 16, 3))
# resize: sizes that must be scaled (down, up, non-square), grey and RGB
os.makedirs(f"{out}/resize/big"); os.makedirs(f"{out}/resize/small")
save(f"{out}/resize/big/a.png", smooth(30, 45, 3))
save(f"{out}/resize/big/b.png", smooth(41, 29, 3))
save(f"{out}/resize/small/c.png", smooth(10, 12, 3))
save(f"{out}/resize/small/d.png", smooth(16, 16, 3))
# layered: train/val folders, a val class that train lacks
for split, n in (("train", 4), ("val", 2)):
    for cls in ("cat", "dog"):
        os.makedirs(f"{out}/layered/{split}/{cls}")
        for i in range(n):
            save(f"{out}/layered/{split}/{cls}/{i}.png", smooth(8, 8, 3))
os.makedirs(f"{out}/layered/val/yak")
save(f"{out}/layered/val/yak/0.png", smooth(8, 8, 3))
# bad: each kind of bad entry beside good images
for cls in ("good", "mixed", "empty"):
    os.makedirs(f"{out}/bad/{cls}")
for i in range(3):
    save(f"{out}/bad/good/{i}.png", smooth(12, 12, 3))
save(f"{out}/bad/mixed/ok.png", smooth(12, 12, 3))
save(f"{out}/bad/mixed/wrong_size.png", smooth(14, 12, 3))
good = open(f"{out}/bad/good/0.png", "rb").read()
open(f"{out}/bad/mixed/truncated.png", "wb").write(good[: len(good) // 2])
open(f"{out}/bad/mixed/corrupt.png", "wb").write(good[:8] + bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
open(f"{out}/bad/mixed/notes.txt", "w").write("not an image\n")
os.makedirs(f"{out}/nothing/only")
open(f"{out}/nothing/only/x.png", "wb").write(b"\x89PNG\r\n\x1a\n garbage")
if have_pil:
    # modes: what Pillow reads in other colour types, and JPEG
    os.makedirs(f"{out}/modes/m")
    from PIL import Image
    save(f"{out}/modes/m/1grey.png", smooth(10, 10, 1))
    Image.fromarray(smooth(10, 10, 3)).convert("P", palette=Image.ADAPTIVE, colors=50).save(f"{out}/modes/m/2palette.png")
    Image.fromarray(np.dstack([smooth(10, 10, 3), smooth(10, 10, 1)]), "RGBA").save(f"{out}/modes/m/3rgba.png")
    Image.fromarray(np.dstack([smooth(10, 10, 1)] * 2), "LA").save(f"{out}/modes/m/4greyalpha.png")
    Image.fromarray((smooth(10, 10, 1).astype(np.uint16) * 257 + 3).astype(np.uint16), "I;16").save(f"{out}/modes/m/5grey16.png")
    Image.fromarray(smooth(10, 10, 3)).save(f"{out}/modes/m/6photo.jpg", quality=85)
    Image.fromarray(smooth(10, 10, 1)).save(f"{out}/modes/m/7grey.jpg", quality=85)
    os.makedirs(f"{out}/jpeg/j")
    for i in range(3):
        Image.fromarray(smooth(24, 32, 3)).save(f"{out}/jpeg/j/{i}.jpg", quality=80)
    open(f"{out}/bad/mixed/truncated.jpg", "wb").write(open(f"{out}/jpeg/j/0.jpg", "rb").read()[:300])
PYEOF

# ---- round trip: pixels and labels ----------------------------------------------
check() { # check NAME PYTHON-ARGS... (the script on stdin): PASS or FAIL with its message
    local name=$1
    shift
    local msg
    if msg=$("$PY" - "$@" 2>&1); then pass "$name"; else fail "$name" "$(echo "$msg" | tail -3)"; fi
}

if imp images_folder 0 "$OUT/f1" "$OUT/f1.h5" && grep -q "15 images, 3 classes" "$OUT/images_folder.log"; then
    check images_pixels_labels "$OUT/f1" "$OUT/f1.h5" "$have_pil" <<'PYEOF'
import os, sys, zlib, struct, h5py, numpy as np
d, f = sys.argv[1], h5py.File(sys.argv[2], "r")
def decode(p):
    if sys.argv[3] == "1":
        from PIL import Image
        return np.asarray(Image.open(p).convert("RGB"))
    raw = open(p, "rb").read()  # the hand-written PNG: one IDAT, filter 0
    w, h = struct.unpack(">II", raw[16:24]); n = struct.unpack(">I", raw[33:37])[0]
    rows = np.frombuffer(zlib.decompress(raw[41:41 + n]), np.uint8).reshape(h, -1)
    return rows[:, 1:].reshape(h, w, 3)
classes = sorted(os.listdir(d))
want_x, want_y = [], []
for k, c in enumerate(classes):
    for name in sorted(os.listdir(f"{d}/{c}")):
        want_x.append(decode(f"{d}/{c}/{name}").transpose(2, 0, 1)); want_y.append(k)
g = f["train"]
assert g["x"].dtype == np.uint8 and g["x"].shape == (15, 3, 20, 24), g["x"].shape
assert (g["x"][:] == np.stack(want_x)).all(), "pixels differ from the decoder's"
assert (g["y"][:] == want_y).all(), list(g["y"][:])
assert [s.decode() for s in g.attrs["class_names"]] == classes == ["ant", "moth", "zebra"]
assert g.attrs["classes"] == 3 and abs(g.attrs["scale"] - 1 / 255) < 1e-9
assert g.attrs["source"][0].decode().endswith("/f1")
px = g["x"][:].astype(np.float64) / 255  # the per-channel statistics the writer sums as integers
assert np.allclose(g.attrs["mean"], px.mean(axis=(0, 2, 3)), atol=1e-6), g.attrs["mean"]
assert np.allclose(g.attrs["std"], px.std(axis=(0, 2, 3)), atol=1e-5), g.attrs["std"]
PYEOF
fi
"$DLBENCH" import --inspect "$OUT/f1.h5" >"$OUT/inspect.log" 2>&1
if grep -q 'class_names = \["ant", "moth", "zebra"\]' "$OUT/inspect.log" && grep -q 'source = \[".*/f1"\]' "$OUT/inspect.log" &&
    grep -q 'origin = "image folder' "$OUT/inspect.log"; then
    pass images_inspect
else
    fail images_inspect "$(head -c 600 "$OUT/inspect.log")"
fi

# ---- colour types and JPEG against Pillow ---------------------------------------
if [ $have_pil = 1 ]; then
    for ch in 3 1; do
        imp images_modes_c$ch 0 "$OUT/modes" "$OUT/modes$ch.h5" --channels $ch &&
            check images_modes_channels_$ch "$OUT/modes/m" "$OUT/modes$ch.h5" $ch <<'PYEOF'
import os, sys, h5py, numpy as np
from PIL import Image
d, x, ch = sys.argv[1], h5py.File(sys.argv[2], "r")["train/x"][:], int(sys.argv[3])
names = sorted(os.listdir(d))
assert x.shape == (len(names), ch, 10, 10), x.shape
for i, n in enumerate(names):
    im = Image.open(f"{d}/{n}")
    if n == "5grey16.png":  # 16-bit grey: the high byte
        g = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
        want = np.stack([g] * ch)
    elif ch == 3 or im.mode in ("L", "LA"):
        a = np.asarray(im.convert("RGB" if ch == 3 else "L"))
        want = a.transpose(2, 0, 1) if ch == 3 else a[None]
    else:  # colour to grey: Pillow's L of the RGB (alpha dropped, palette expanded)
        want = np.asarray(im.convert("RGB").convert("L"))[None]
    diff = np.abs(x[i].astype(int) - want).max()
    assert diff == 0, f"{n}: largest difference {diff} from Pillow"
PYEOF
    done
    imp images_jpeg 0 "$OUT/jpeg" "$OUT/jpeg.h5" --workers 2 &&
        check images_jpeg_equals_pillow "$OUT/jpeg/j" "$OUT/jpeg.h5" <<'PYEOF'
import os, sys, h5py, numpy as np
from PIL import Image
d, x = sys.argv[1], h5py.File(sys.argv[2], "r")["train/x"][:]
want = np.stack([np.asarray(Image.open(f"{d}/{n}").convert("RGB")).transpose(2, 0, 1)
                 for n in sorted(os.listdir(d))])
diff = np.abs(x.astype(int) - want).max()
assert diff <= 1, f"largest difference {diff} from Pillow's libjpeg"
print("largest difference", diff)
PYEOF
else
    skip images_modes "needs Pillow (python3-pil) to write palette, alpha, 16-bit and JPEG files"
fi

# ---- --size: area averaging and centre crop against numpy -------------------------
imp images_size 0 "$OUT/resize" "$OUT/resize.h5" --size 16x16 --channels 1 &&
    check images_resize_area "$OUT/resize" "$OUT/resize.h5" "$have_pil" <<'PYEOF'
import os, sys, math, zlib, struct, h5py, numpy as np
d, x = sys.argv[1], h5py.File(sys.argv[2], "r")["train/x"][:]
def decode(p):
    if sys.argv[3] == "1":
        from PIL import Image
        return np.asarray(Image.open(p).convert("RGB"))
    raw = open(p, "rb").read()
    w, h = struct.unpack(">II", raw[16:24]); n = struct.unpack(">I", raw[33:37])[0]
    return np.frombuffer(zlib.decompress(raw[41:41 + n]), np.uint8).reshape(h, -1)[:, 1:].reshape(h, w, 3)
def weights(src, scaled, out):
    """Area coverage: output i averages source [(i+off) f, (i+off+1) f)."""
    f, off, m = src / scaled, (scaled - out) // 2, np.zeros((out, src))
    for i in range(out):
        lo, hi = (i + off) * f, (i + off + 1) * f
        for k in range(int(math.floor(lo)), min(src, int(math.ceil(hi)))):
            m[i, k] = (min(hi, k + 1) - max(lo, k)) / (hi - lo)
    return m
i = 0
for c in sorted(os.listdir(d)):
    for n in sorted(os.listdir(f"{d}/{c}")):
        a = decode(f"{d}/{c}/{n}").astype(np.int64)
        H, W = a.shape[:2]
        s = max(16 / H, 16 / W)
        sh, sw = max(16, round(H * s)), max(16, round(W * s))
        if (H, W) != (16, 16):  # each channel scaled and rounded, then Pillow's L
            wy, wx = weights(H, sh, 16), weights(W, sw, 16)
            a = np.stack([np.rint(wy @ a[..., k] @ wx.T) for k in range(3)], -1).astype(np.int64)
        want = (a[..., 0] * 19595 + a[..., 1] * 38470 + a[..., 2] * 7471 + 32768) >> 16
        diff = np.abs(x[i, 0].astype(int) - want).max()
        assert diff <= 1, f"{c}/{n} ({H}x{W}): largest difference {diff}"
        i += 1
assert x.shape == (4, 1, 16, 16) and i == 4
PYEOF

# ---- stratified --val-fraction, deterministic; --workers does not change bytes ----
imp images_val 0 "$OUT/strat" "$OUT/s1.h5" --val-fraction 0.25 --seed 5 --workers 1 &&
    imp images_val_w2 0 "$OUT/strat" "$OUT/s2.h5" --val-fraction 0.25 --seed 5 --workers 2 &&
    imp images_val_w4 0 "$OUT/strat" "$OUT/s4.h5" --val-fraction 0.25 --seed 5 --workers 4 &&
    imp images_val_seed 0 "$OUT/strat" "$OUT/s6.h5" --val-fraction 0.25 --seed 6 &&
    check images_val_stratified "$OUT/s1.h5" "$OUT/s6.h5" <<'PYEOF'
import sys, h5py, numpy as np
f, g = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for h in (f, g):
    assert list(np.bincount(h["val/y"][:])) == [2, 3], list(np.bincount(h["val/y"][:]))
    assert list(np.bincount(h["train/y"][:])) == [6, 9]
    xs = np.concatenate([h["train/x"][:], h["val/x"][:]]).reshape(20, -1)
    assert len({r.tobytes() for r in xs}) == 20, "an image lost or doubled"
assert not (f["val/x"][:] == g["val/x"][:]).all(), "another seed chose the same images"
PYEOF
if cmp -s "$OUT/s1.h5" "$OUT/s2.h5" && cmp -s "$OUT/s1.h5" "$OUT/s4.h5"; then
    pass images_workers_byte_identical
else
    fail images_workers_byte_identical "--workers 1, 2 and 4 wrote different files"
fi

# ---- train/val folders -------------------------------------------------------------
imp images_layered 0 "$OUT/layered" "$OUT/layered.h5" &&
    check images_layered_splits "$OUT/layered.h5" "$OUT/images_layered.log" <<'PYEOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert sorted(f.keys()) == ["train", "val"], list(f.keys())
assert list(f["train/y"][:]) == [0] * 4 + [1] * 4 and list(f["val/y"][:]) == [0, 0, 1, 1]
assert [s.decode() for s in f["val"].attrs["class_names"]] == ["cat", "dog"]
log = open(sys.argv[2]).read()
assert "skipped 1 entry" in log and 'class "yak" is not in' in log, log
PYEOF

# ---- bad input ----------------------------------------------------------------------
nbad=6 more="and 1 more" # an empty class folder, corrupt PNG, a text file, truncated JPEG and PNG, wrong size
[ $have_pil = 1 ] || { nbad=5; more=wrong_size.png; }
if imp images_bad_skipped 0 "$OUT/bad" "$OUT/bad.h5"; then
    log="$OUT/images_bad_skipped.log"
    if grep -q "skipped $nbad entries (imported 4 images)" "$log" && grep -q "empty: empty class folder" "$log" &&
        grep -q "corrupt.png: PNG: " "$log" && grep -q "truncated.png: PNG: " "$log" &&
        grep -q "$more" "$log"; then
        pass images_bad_skipped
    else
        fail images_bad_skipped "the skip lines: $(head -c 700 "$log")"
    fi
    check images_bad_result "$OUT/bad.h5" <<'PYEOF'
import sys, h5py
g = h5py.File(sys.argv[1], "r")["train"]
assert g["x"].shape == (4, 3, 12, 12) and list(g["y"][:]) == [0, 0, 0, 1], (g["x"].shape, g["y"][:])
assert [s.decode() for s in g.attrs["class_names"]] == ["good", "mixed"]
PYEOF
fi
# a FIFO and a dangling link: skipped without being opened (a FIFO would block)
mkfifo "$OUT/bad/good/zz.fifo" && ln -s "$OUT/nowhere.png" "$OUT/bad/good/zz_link.png"
imp images_special_files 0 "$OUT/bad" "$OUT/special.h5" &&
    { grep -q "skipped $((nbad + 2)) entries (imported 4 images)" "$OUT/images_special_files.log" &&
        pass images_special_files || fail images_special_files "$(head -c 500 "$OUT/images_special_files.log")"; }
rm -f "$OUT/bad/good/zz.fifo" "$OUT/bad/good/zz_link.png" "$OUT/strict.h5"
if imp images_strict 2 "$OUT/bad" "$OUT/strict.h5" --strict; then
    if grep -q "empty: empty class folder (--strict)" "$OUT/images_strict.log" && [ ! -e "$OUT/strict.h5" ] &&
        ! ls "$OUT"/strict.h5.tmp* >/dev/null 2>&1; then
        pass images_strict
    else
        fail images_strict "$(head -c 400 "$OUT/images_strict.log"); or a file was left"
    fi
fi
rm -rf "$OUT/bad/empty"
imp images_strict_decode 2 "$OUT/bad" "$OUT/strict.h5" --strict &&
    { grep -q "corrupt.png: PNG: .*(--strict)" "$OUT/images_strict_decode.log" && pass images_strict_decode ||
        fail images_strict_decode "$(head -c 400 "$OUT/images_strict_decode.log")"; }
imp images_nothing 2 "$OUT/nothing" "$OUT/nothing.h5" &&
    { grep -q "nothing: no image could be read (1 skipped)" "$OUT/images_nothing.log" && [ ! -e "$OUT/nothing.h5" ] &&
        pass images_nothing || fail images_nothing "$(head -c 400 "$OUT/images_nothing.log")"; }
imp images_size_bad 2 "$OUT/f1" "$OUT/x.h5" --size 0x3 &&
    { grep -q -- '--size "0x3": expected HxW' "$OUT/images_size_bad.log" && pass images_size_bad ||
        fail images_size_bad "$(cat "$OUT/images_size_bad.log")"; }

# an unreadable class folder: permissions do not stop root, so as nobody then
mkdir -p "$OUT/perm/ok" "$OUT/perm/locked" && cp "$OUT/f1/ant/img0.png" "$OUT/perm/ok/" &&
    cp "$OUT/f1/ant/img1.png" "$OUT/perm/locked/" && chmod 000 "$OUT/perm/locked"
as=()
if [ "$(id -u)" -eq 0 ]; then
    if command -v runuser >/dev/null && id nobody >/dev/null 2>&1; then
        as=(runuser -u nobody --)
        chmod 755 "$OUT" && mkdir -p "$OUT/w" && chmod 777 "$OUT/w"
    fi
fi
if [ "$(id -u)" -ne 0 ] || [ ${#as[@]} -gt 0 ]; then
    mkdir -p "$OUT/w" && "${as[@]}" "$DLBENCH" import "$OUT/perm" "$OUT/w/perm.h5" >"$OUT/perm.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "locked: cannot read the folder: Permission denied" "$OUT/perm.log" &&
        grep -q "skipped 1 entry" "$OUT/perm.log"; then
        pass images_unreadable_folder
    else
        fail images_unreadable_folder "status $rc: $(head -c 400 "$OUT/perm.log")"
    fi
else
    skip images_unreadable_folder "running as root without runuser and the user nobody"
fi
chmod 755 "$OUT/perm/locked"

# ---- end to end: a tiny CNN trains on the imported file ------------------------------
cat >"$OUT/cnn.lua" <<EOF
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  name = "images-cnn",
  data = dl.data.hdf5 { path = "$OUT/s1.h5", train = "/train", val = "/val", shuffle = true },
  model = nn.Sequential {
    nn.Conv2d(3, 4, 3, { pad = 1 }), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(4 * 8 * 8, 2),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = 0.05 },
  batch = 4, epochs = 1, device = "cpu",
}
EOF
if [ -f "$OUT/s1.h5" ] && run images_cnn 0 run "$OUT/cnn.lua" --out "$OUT/runs"; then
    d=$(ls -d "$OUT"/runs/*/ | head -1)
    st=$(json_field "$d/summary.json" status)
    if [ "$st" = finished ] && grep -q '"val_acc"' "$d/summary.json" && grep -q '"kind":"epoch"' "$d/metrics.jsonl"; then
        pass images_cnn_trains
    else
        fail images_cnn_trains "summary status '$st'"
    fi
fi
exit "$((${fails:-0} > 0))"
