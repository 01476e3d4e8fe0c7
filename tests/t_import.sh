#!/usr/bin/env bash
# t_import.sh - `dlbench import` end to end: IDX folder and pair, CSV, synthetic, val split, bad input, atomic output
set -u
DLBENCH=${DLBENCH:-build/dlbench}
PY=/usr/bin/python3
FM=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d /tmp/dl-t-import-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0

. "$(dirname "$0")/lib.sh"

if [ ! -x "$DLBENCH" ]; then
    skip import "no binary at $DLBENCH"; exit 0
fi
if "$DLBENCH" import --help 2>&1 | grep -q "not part of this build"; then
    skip import "dlbench was linked without tui/cmd/cmd_import.o"; exit 0
fi
have_h5py=0
"$PY" -c 'import h5py, numpy' 2>/dev/null && have_h5py=1

# t NAME EXPECTED_STATUS GREP_PATTERN -- ARGS: runs import, checks status and stderr
t_status() {
    local name=$1 want=$2 pattern=$3; shift 3
    "$DLBENCH" import "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -ne "$want" ]; then
        fail "$name" "status $rc, want $want: $(head -c 300 "$tmp/err")"
    elif [ -n "$pattern" ] && ! grep -q -- "$pattern" "$tmp/err"; then
        fail "$name" "stderr lacks '$pattern': $(head -c 300 "$tmp/err")"
    else
        pass "$name"
    fi
}

# --- IDX folder: values equal to the source ------------------------------------
if [ -d "$FM" ]; then
    t_status import_fashion_mnist_folder 0 "" "$FM" "$tmp/fm.h5"
    if [ $have_h5py = 1 ] && [ -f "$tmp/fm.h5" ]; then
        if "$PY" - "$tmp/fm.h5" "$FM" <<'PYEOF'
import sys, gzip, hashlib, h5py, numpy as np
f = h5py.File(sys.argv[1], "r"); d = sys.argv[2]
def idx(name, off):
    raw = open(f"{d}/{name}", "rb").read()
    return np.frombuffer(gzip.decompress(raw), np.uint8, offset=off), hashlib.sha256(raw).hexdigest()
for split, prefix in (("train", "train"), ("test", "t10k")):
    x, hx = idx(f"{prefix}-images-idx3-ubyte.gz", 16)
    y, hy = idx(f"{prefix}-labels-idx1-ubyte.gz", 8)
    g = f[split]
    assert g["x"].shape == (len(y), 1, 28, 28) and g["x"].dtype == np.uint8
    assert (g["x"][:].reshape(-1) == x).all() and (g["y"][:] == y).all()
    assert g["x"].chunks[0] >= 1 and g["x"].chunks[1:] == (1, 28, 28)
    assert list(g.attrs["sample_shape"]) == [1, 28, 28] and g.attrs["classes"] == 10
    assert g.attrs["class_names"][0] == b"T-shirt/top"
    assert [s.decode() for s in g.attrs["source_sha256"]] == [hx, hy]
    assert abs(g.attrs["scale"] - 1 / 255) < 1e-9 and abs(g.attrs["mean"][0] - 0.286) < 0.001
PYEOF
        then pass import_roundtrip_equals_idx; else fail import_roundtrip_equals_idx "values or attributes differ"; fi
    else
        skip import_roundtrip_equals_idx "needs /usr/bin/python3 with h5py"
    fi
    # an uncompressed pair, split name from the file name, and a val split
    gunzip -c "$FM/t10k-images-idx3-ubyte.gz" >"$tmp/t10k-images-idx3-ubyte"
    gunzip -c "$FM/t10k-labels-idx1-ubyte.gz" >"$tmp/t10k-labels-idx1-ubyte"
    t_status import_idx_pair_val_fraction 0 "" --val-fraction 0.2 --seed 3 \
        "$tmp/t10k-images-idx3-ubyte" "$tmp/t10k-labels-idx1-ubyte" "$tmp/pair.h5"
    if [ $have_h5py = 1 ] && [ -f "$tmp/pair.h5" ]; then
        if "$PY" - "$tmp/pair.h5" "$tmp/t10k-labels-idx1-ubyte" <<'PYEOF'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
y = np.fromfile(sys.argv[2], np.uint8, offset=8)
assert set(f.keys()) == {"test", "val"}, list(f.keys())
assert len(f["val/y"]) == 2000 and len(f["test/y"]) == 8000
# together the two hold the source's labels (as a multiset)
assert (np.bincount(np.concatenate([f["val/y"][:], f["test/y"][:]])) == np.bincount(y)).all()
PYEOF
        then pass import_val_split_partitions; else fail import_val_split_partitions "bad val split"; fi
    fi
else
    skip import_fashion_mnist_folder "no $FM (package dataset-fashion-mnist)"
fi

# --- CSV ------------------------------------------------------------------------
cat >"$tmp/iris.csv" <<'CSV'
sepal_length,sepal_width,species,petal_length
5.1,3.5,setosa,1.4
7.0,3.2,versicolor,4.7
6.3,3.3,virginica,6.0
4.9,3.0,"setosa",1.4

6.4,3.2,versicolor,4.5
CSV
t_status import_csv_string_labels 0 "" --label species "$tmp/iris.csv" "$tmp/iris.h5"
if [ $have_h5py = 1 ] && [ -f "$tmp/iris.h5" ]; then
    if "$PY" - "$tmp/iris.h5" <<'PYEOF'
import sys, h5py, numpy as np
g = h5py.File(sys.argv[1], "r")["train"]
assert g["x"].shape == (5, 3) and g["x"].dtype == np.float32
assert np.allclose(g["x"][1], [7.0, 3.2, 4.7])
assert list(g["y"][:]) == [0, 1, 2, 0, 1]
assert [s.decode() for s in g.attrs["class_names"]] == ["setosa", "versicolor", "virginica"]
PYEOF
    then pass import_csv_values; else fail import_csv_values "values differ"; fi
fi
printf 'a,b,label\n1,2,0\n3,x,1\n' >"$tmp/bad.csv"
t_status import_csv_not_a_number 2 'bad.csv:3: column "b": "x" is not a number' \
    --label label "$tmp/bad.csv" "$tmp/bad.h5"
printf 'a,b,label\n1,2,0\n3,1\n' >"$tmp/short.csv"
t_status import_csv_short_row 2 'short.csv:3: 2 fields, expected 3' --label label "$tmp/short.csv" "$tmp/bad.h5"
t_status import_csv_no_label_flag 2 'needs --label' "$tmp/iris.csv" "$tmp/bad.h5"
t_status import_csv_unknown_label 2 'no column "kind"' --label kind "$tmp/iris.csv" "$tmp/bad.h5"

# --- synthetic --------------------------------------------------------------------
t_status import_synthetic_spirals 0 "" --synthetic spirals --samples 400 --classes 3 "$tmp/sp.h5"
t_status import_synthetic_blobs 0 "" --synthetic blobs --samples 100 --val-fraction 0.1 "$tmp/bl.h5"
if [ $have_h5py = 1 ] && [ -f "$tmp/sp.h5" ] && [ -f "$tmp/bl.h5" ]; then
    if "$PY" - "$tmp/sp.h5" "$tmp/bl.h5" <<'PYEOF'
import sys, h5py, numpy as np
s = h5py.File(sys.argv[1], "r"); b = h5py.File(sys.argv[2], "r")
assert s["train/x"].shape == (400, 2) and s["test/x"].shape == (100, 2)
assert set(s["train/y"][:]) == {0, 1, 2}
assert set(b.keys()) == {"train", "test", "val"} and len(b["val/y"]) == 10
PYEOF
    then pass import_synthetic_layout; else fail import_synthetic_layout "bad layout"; fi
fi
t_status import_synthetic_unknown 2 'expected "spirals" or "blobs"' --synthetic moons "$tmp/bad.h5"

# --- bad input and atomic output ------------------------------------------------------
t_status import_missing_source 2 'nothing-here: no such file' "$tmp/nothing-here" "$tmp/bad.h5"
mkdir -p "$tmp/empty"
t_status import_empty_folder 2 'no IDX files' "$tmp/empty" "$tmp/bad.h5"
t_status import_no_args 2 "usage" 
t_status import_bad_option 2 "unknown option '--frobnicate'" --frobnicate 1 a b
t_status import_bad_fraction 2 'val-fraction' --val-fraction 1.5 --synthetic blobs "$tmp/bad.h5"
t_status import_output_folder_missing 2 "the folder $tmp/missing/dir does not exist" \
    --synthetic spirals --samples 100 "$tmp/missing/dir/x.h5"
[ -e "$tmp/missing" ] && fail import_output_folder_not_made "$tmp/missing was created"
t_status import_output_is_folder 2 "$tmp: is a folder" --synthetic spirals --samples 100 "$tmp"
if [ -e "$tmp/bad.h5" ] || ls "$tmp"/bad.h5.tmp* >/dev/null 2>&1; then
    fail import_no_output_on_error "a failed import left $tmp/bad.h5 or .tmp"
else
    pass import_no_output_on_error
fi
# a corrupt source leaves an existing output untouched
printf 'a,label\n1,0\n' >"$tmp/one.csv"
"$DLBENCH" import --label label "$tmp/one.csv" "$tmp/keep.h5" >/dev/null 2>&1
before=$(sha256sum "$tmp/keep.h5" 2>/dev/null)
printf '\x00\x00\x08\x03\x00\x00\x00\x05' >"$tmp/x-images-idx3-ubyte"
printf '\x00\x00\x08\x01\x00\x00\x00\x05\x01' >"$tmp/x-labels-idx1-ubyte"
t_status import_truncated_idx 2 'x-images-idx3-ubyte: truncated' "$tmp/x-images-idx3-ubyte" "$tmp/keep.h5"
after=$(sha256sum "$tmp/keep.h5" 2>/dev/null)
if [ -n "$before" ] && [ "$before" = "$after" ] && ! ls "$tmp"/keep.h5.tmp* >/dev/null 2>&1; then
    pass import_failure_keeps_old_output
else
    fail import_failure_keeps_old_output "keep.h5 changed or a .tmp was left"
fi
# --text: the help names the options; a bad text file leaves an existing output untouched
# (the round trips and the rest of the bad inputs are in t_text.sh)
if "$DLBENCH" import --help | grep -q -- "--vocab bytes|chars"; then
    pass import_help_text_options
else
    fail import_help_text_options "import --help lacks --text / --vocab"
fi
printf 'caf\xc3\xa9 cr\xc3\xa8me\n' >"$tmp/ok.txt"
t_status import_text_ok 0 "" --text "$tmp/ok.txt" "$tmp/keep_text.h5" --val-fraction 0.2
grep -q "11 tokens (train 9, test 2), vocab 10 chars, from 1 file" "$tmp/out" &&
    pass import_text_summary || fail import_text_summary "summary: $(cat "$tmp/out")"
before=$(sha256sum "$tmp/keep_text.h5" 2>/dev/null)
printf 'caf\xe9\n' >"$tmp/latin1.txt"
t_status import_text_latin1 2 "latin1.txt: not UTF-8 text: invalid byte 0xe9 at byte offset 3" \
    --text "$tmp/latin1.txt" "$tmp/keep_text.h5"
after=$(sha256sum "$tmp/keep_text.h5" 2>/dev/null)
if [ -n "$before" ] && [ "$before" = "$after" ] && [ ! -e "$tmp/keep_text.h5.tmp" ]; then
    pass import_text_failure_keeps_old_output
else
    fail import_text_failure_keeps_old_output "keep_text.h5 changed or a .tmp was left"
fi

# --- CIFAR-10 / CIFAR-100 binary batches written here in the documented format ---------
# mk_cifar DIR KIND: CIFAR-10 (data_batch_1.bin 3 records, data_batch_2.bin 2, test_batch.bin 2)
# or CIFAR-100 (train.bin 4, test.bin 2, name files); expected pixels and labels beside them
mk_cifar() {
    mkdir -p "$1" && /usr/bin/python3 - "$1" "$2" <<'PYEOF'
import sys, random, struct
d, kind = sys.argv[1], sys.argv[2]
r = random.Random(7)
def batch(name, n, split):
    recs, px, lab, coarse = b"", b"", [], []
    for i in range(n):
        p = bytes(r.randrange(256) for _ in range(3072))
        fine, co = r.randrange(100 if kind == "100" else 10), r.randrange(20)
        recs += (bytes([co, fine]) if kind == "100" else bytes([fine])) + p
        px += p; lab.append(fine); coarse.append(co)
    open(f"{d}/{name}", "wb").write(recs)
    return px, lab, coarse
sp = {"train": [], "test": []}
files = {"10": [("data_batch_1.bin", 3, "train"), ("data_batch_2.bin", 2, "train"),
                ("test_batch.bin", 2, "test")],
         "100": [("train.bin", 4, "train"), ("test.bin", 2, "test")]}[kind]
for name, n, split in files:
    sp[split].append(batch(name, n, split))
for split, parts in sp.items():
    open(f"{d}/want_{split}_x", "wb").write(b"".join(p[0] for p in parts))
    fine = [v for p in parts for v in p[1]]; co = [v for p in parts for v in p[2]]
    open(f"{d}/want_{split}_fine", "wb").write(struct.pack(f"<{len(fine)}i", *fine))
    open(f"{d}/want_{split}_coarse", "wb").write(struct.pack(f"<{len(co)}i", *co))
if kind == "100":
    open(f"{d}/fine_label_names.txt", "w").write("".join(f"fine{i}\n" for i in range(100)))
    open(f"{d}/coarse_label_names.txt", "w").write("".join(f"coarse{i}\n" for i in range(20)))
PYEOF
}
# same_h5 NAME FILE DATASET WANT: the dataset's raw little-endian bytes equal WANT
same_h5() {
    rm -f "$tmp/raw"
    if h5dump -d "$3" -b LE -o "$tmp/raw" "$2" >/dev/null 2>&1 && cmp -s "$tmp/raw" "$4"; then
        pass "$1"
    else
        fail "$1" "$3 of $2 differs from $4"
    fi
}
if command -v h5dump >/dev/null; then
    mk_cifar "$tmp/c10" 10
    t_status import_cifar10 0 "" "$tmp/c10" "$tmp/c10.h5"
    grep -q "CIFAR-10" "$tmp/out" && grep -q "/train        5 x \[3, 32, 32\] u8, y i32, 10 classes" "$tmp/out" &&
        pass import_cifar10_summary || fail import_cifar10_summary "$(cat "$tmp/out")"
    h5dump -H -d /train/x "$tmp/c10.h5" 2>/dev/null | grep -q "H5T_STD_U8LE" &&
        h5dump -H -d /train/x "$tmp/c10.h5" | grep -q "( 5, 3, 32, 32 )" &&
        h5dump -H -d /test/x "$tmp/c10.h5" | grep -q "( 2, 3, 32, 32 )" &&
        pass import_cifar10_shape || fail import_cifar10_shape "$(h5dump -H -d /train/x "$tmp/c10.h5" 2>&1 | head -8)"
    same_h5 import_cifar10_train_pixels "$tmp/c10.h5" /train/x "$tmp/c10/want_train_x"
    same_h5 import_cifar10_train_labels "$tmp/c10.h5" /train/y "$tmp/c10/want_train_fine"
    same_h5 import_cifar10_test_pixels "$tmp/c10.h5" /test/x "$tmp/c10/want_test_x"
    same_h5 import_cifar10_test_labels "$tmp/c10.h5" /test/y "$tmp/c10/want_test_fine"
    h5dump -a /train/class_names "$tmp/c10.h5" | grep -q "SIMPLE { ( 10 )" &&
        h5dump -a /train/class_names "$tmp/c10.h5" | grep -q "\"airplane\", \"automobile\"" &&
        h5dump -a /train/class_names "$tmp/c10.h5" | grep -q "\"truck\"" &&
        h5dump -a /train/classes "$tmp/c10.h5" | grep -q "(0): 10" &&
        pass import_cifar10_names || fail import_cifar10_names "$(h5dump -a /train/class_names "$tmp/c10.h5" 2>&1 | head)"
    printf 'a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n\n' >"$tmp/c10/batches.meta.txt"
    t_status import_cifar10_meta 0 "" "$tmp/c10" "$tmp/c10m.h5"
    h5dump -a /test/class_names "$tmp/c10m.h5" | grep -q "SIMPLE { ( 10 )" && h5dump -a /test/class_names "$tmp/c10m.h5" | grep -q "\"a\", \"b\"" &&
        pass import_cifar10_meta_names || fail import_cifar10_meta_names "batches.meta.txt not used"
    t_status import_cifar10_no_label 2 "CIFAR-10 has one label" --label coarse "$tmp/c10" "$tmp/o.h5"

    mk_cifar "$tmp/c100" 100
    t_status import_cifar100_fine 0 "" "$tmp/c100" "$tmp/c100f.h5"
    same_h5 import_cifar100_fine_labels "$tmp/c100f.h5" /train/y "$tmp/c100/want_train_fine"
    same_h5 import_cifar100_pixels "$tmp/c100f.h5" /train/x "$tmp/c100/want_train_x"
    h5dump -a /train/classes "$tmp/c100f.h5" | grep -q "(0): 100" &&
        h5dump -a /train/class_names "$tmp/c100f.h5" | grep -q '"fine0"' &&
        pass import_cifar100_fine_names || fail import_cifar100_fine_names "classes or names"
    t_status import_cifar100_coarse 0 "" --label coarse "$tmp/c100" "$tmp/c100c.h5"
    same_h5 import_cifar100_coarse_labels "$tmp/c100c.h5" /train/y "$tmp/c100/want_train_coarse"
    same_h5 import_cifar100_coarse_test "$tmp/c100c.h5" /test/y "$tmp/c100/want_test_coarse"
    h5dump -a /train/classes "$tmp/c100c.h5" | grep -q "(0): 20" &&
        h5dump -a /test/class_names "$tmp/c100c.h5" | grep -q '"coarse19"' &&
        pass import_cifar100_coarse_names || fail import_cifar100_coarse_names "classes or names"
    t_status import_cifar100_bad_label 2 'expected fine or coarse' --label medium "$tmp/c100" "$tmp/o.h5"

    # a truncated batch: the file and its byte count, no output
    mkdir -p "$tmp/ctrunc"
    head -c 6246 /dev/zero >"$tmp/ctrunc/data_batch_1.bin"
    t_status import_cifar_truncated 2 \
        'data_batch_1.bin: 6246 bytes, not a whole number of 3073-byte CIFAR records' \
        "$tmp/ctrunc" "$tmp/ctrunc.h5"
    [ ! -e "$tmp/ctrunc.h5" ] && [ ! -e "$tmp/ctrunc.h5.tmp" ] &&
        pass import_cifar_truncated_no_output || fail import_cifar_truncated_no_output "output left"
else
    skip import_cifar "needs h5dump (hdf5-tools)"
fi

# --- --inspect: what a file holds -------------------------------------------------
# inspect NAME FILE PATTERN...: exit 0 and every pattern (grep -F) in the description
inspect() {
    local name=$1 file=$2; shift 2
    if ! "$DLBENCH" import --inspect "$file" >"$tmp/insp" 2>"$tmp/err"; then
        fail "$name" "status $?: $(head -c 300 "$tmp/err")"; return
    fi
    for p in "$@"; do
        grep -qF -- "$p" "$tmp/insp" || { fail "$name" "lacks '$p': $(head -c 600 "$tmp/insp")"; return; }
    done
    pass "$name"
}
# a small IDX pair: 3 images 2x2, labels 0 1 4
printf '\x00\x00\x08\x03\x00\x00\x00\x03\x00\x00\x00\x02\x00\x00\x00\x02' >"$tmp/s-images-idx3-ubyte"
head -c 12 /dev/zero >>"$tmp/s-images-idx3-ubyte"
printf '\x00\x00\x08\x01\x00\x00\x00\x03\x00\x01\x04' >"$tmp/s-labels-idx1-ubyte"
t_status import_small_idx 0 "" "$tmp/s-images-idx3-ubyte" "$tmp/s.h5"
inspect import_inspect_idx "$tmp/s.h5" "kind: labelled samples, 5 classes" "/train" \
    "  x        [3, 1, 2, 2] u8" "  y        [3] i32" "classes = 5" \
    'source = ["'"$tmp"'/s-images-idx3-ubyte", "'"$tmp"'/s-labels-idx1-ubyte"]' \
    'origin = "IDX '"$tmp"'/s-images-idx3-ubyte"'
inspect import_inspect_csv "$tmp/keep.h5" "kind: labelled samples" "  x        [1, 1] f32" "count = 1"
"$DLBENCH" import --synthetic blobs --classes 3 --samples 40 "$tmp/syn.h5" >/dev/null 2>&1
inspect import_inspect_synthetic "$tmp/syn.h5" "kind: labelled samples, 3 classes" \
    "/test" "  x        [10, 2] f32" "/train" "  x        [40, 2] f32" "origin = \"synthetic blobs"
inspect import_inspect_text "$tmp/keep_text.h5" "kind: text, vocabulary chars, 10 ids" \
    "vocab_size = 10" "  tokens   [9] " "(9 tokens)" "(2 tokens)" 'vocab_kind = "chars"'
if [ -f "$tmp/c10.h5" ]; then
    inspect import_inspect_cifar "$tmp/c10.h5" "kind: labelled samples, 10 classes" \
        "  x        [5, 3, 32, 32] u8" "  x        [2, 3, 32, 32] u8" '"airplane", "automobile"' \
        'origin = "CIFAR-10 '"$tmp"'/c10"'
    inspect import_inspect_cifar100 "$tmp/c100c.h5" "20 classes" '"coarse0", "coarse1"' "(coarse labels)"
fi
t_status import_inspect_missing 2 "nope.h5: No such file or directory" --inspect "$tmp/nope.h5"
t_status import_inspect_not_hdf5 2 "one.csv: not an HDF5 file" --inspect "$tmp/one.csv"
t_status import_inspect_two_paths 2 "--inspect takes one FILE.h5" --inspect "$tmp/s.h5" "$tmp/syn.h5"
[ $fails -eq 0 ]
