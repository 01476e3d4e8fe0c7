#!/usr/bin/env bash
# t_export.sh - dlbench's exports read by independent consumers:
#   - six models built in C by build/tests/test_export --write (an MLP, a CNN
#     with BatchNorm, Dropout, grouped and dilated convolutions and every
#     pooling, a ResNet stage with and without a projection shortcut, a
#     char-GPT with causal attention, the other activations and norms, a
#     non-causal attention without biases), each with its inputs and
#     dlbench's logits on 256 samples;
#   - python3-onnx's checker (full_check) and strict shape inference pass on
#     every ONNX file; onnxruntime-node runs each and its argmax equals
#     dlbench's on >= 99.9% of rows with logits within 1e-4 relative
#     (per row: max|diff| / max(1, max|dlbench|));
#   - PyTorch loads the safetensors files (parsed by hand: no safetensors
#     package needed) strictly into the equivalent torch modules and gives the
#     same outputs;
#   - end to end: a CNN trained here on a tiny IDX image set made here, then
#     `dlbench export RUN` in both formats, compared the same way on the run's
#     validation samples (after its normalisation), and onnxruntime on the
#     raw samples normalised as the ONNX metadata (dlbench_input_scale, _mean,
#     _std) says against `dlbench predict --logits` (the same 99.9% / 1e-4
#     bounds, tests/export/predict_inputs.py); an AdaptiveAvgPool2d with
#     uneven windows is refused naming the layer, exit 2, no file;
#   - bad input: an unknown --format, a run without a checkpoint, an unknown
#     checkpoint, -o into a missing folder: exit 2, a clear message, no file.
# Peers that are missing skip with the reason (ORT_DIR: the folder holding
# node_modules/onnxruntime-node, default build/ort, installed by
# scripts/deps.sh).
. "$(dirname "$0")/lib.sh"
test_init

require_subcommand t_export export "(not built or not dispatched)"
HELPER=$BUILD/tests/test_export
PY=/usr/bin/python3
ORT_DIR=${ORT_DIR:-build/ort}
if [ ! -x "$HELPER" ]; then
    skip t_export "$HELPER is not built (make $HELPER)"
    exit 0
fi

# --- the six models ------------------------------------------------------------------
kinds="mlp cnn resnet gpt acts attn"
dirs=()
ok=1
for k in $kinds; do
    mkdir -p "$OUT/m/$k"
    if ! "$HELPER" --write "$k" "$OUT/m/$k" >"$OUT/write-$k.log" 2>&1; then
        fail export_write_$k "$(tail -3 "$OUT/write-$k.log")"
        ok=0
    fi
    dirs+=("$OUT/m/$k")
done
[ $ok = 1 ] && pass export_write_models

# check_lines NAME LOG: PASS when every line of LOG starts with "ok", else FAIL
# with the bad lines
check_lines() {
    if grep -q '^bad\|Traceback\|Error' "$2" || ! grep -q '^ok' "$2"; then
        fail "$1" "$(grep -v '^ok' "$2" | head -5)"
    else
        pass "$1"
    fi
}

have_onnx=0
"$PY" -c 'import onnx, numpy' 2>/dev/null && have_onnx=1
have_torch=0
"$PY" -c 'import torch, numpy' 2>/dev/null && have_torch=1
have_ort=0
ort_why=""
if ! command -v node >/dev/null; then
    ort_why="node is not installed (Debian: nodejs)"
elif [ ! -d "$ORT_DIR/node_modules/onnxruntime-node" ]; then
    ort_why="no $ORT_DIR/node_modules/onnxruntime-node (scripts/deps.sh installs it: npm install --prefix $ORT_DIR onnxruntime-node --ignore-scripts)"
else
    have_ort=1
fi
ORT_ABS=$(cd "$ORT_DIR" 2>/dev/null && pwd)

if [ $have_onnx = 1 ]; then
    "$PY" tests/export/py_check.py onnx "${dirs[@]}" >"$OUT/onnx.log" 2>&1
    check_lines export_onnx_checker "$OUT/onnx.log"
else
    skip export_onnx_checker "$PY cannot import onnx (Debian: python3-onnx)"
fi

if [ $have_ort = 1 ]; then
    node tests/export/ort_check.js "$ORT_ABS" "${dirs[@]}" >"$OUT/ort.log" 2>&1
    check_lines export_onnxruntime_agrees "$OUT/ort.log"
else
    skip export_onnxruntime_agrees "$ort_why"
fi

if [ $have_torch = 1 ]; then
    "$PY" tests/export/py_check.py torch mlp "$OUT/m/mlp" cnn "$OUT/m/cnn" resnet "$OUT/m/resnet" \
        gpt "$OUT/m/gpt" >"$OUT/torch.log" 2>&1
    check_lines export_safetensors_torch "$OUT/torch.log"
else
    skip export_safetensors_torch "$PY cannot import torch (Debian: python3-torch)"
fi

# --- end to end through dlbench export ------------------------------------------------
# a 7x7 image set: label 1 when the top half is brighter than the bottom
mkdir -p "$OUT/idx"
"$PY" - "$OUT/idx" <<'PYEOF'
import random, struct, sys
random.seed(7)
def write(prefix, n):
    imgs, labels = bytearray(), bytearray()
    for _ in range(n):
        px = [random.randrange(256) for _ in range(49)]
        imgs += bytes(px)
        labels.append(1 if sum(px[:21]) > sum(px[28:]) else 0)
    with open(f"{sys.argv[1]}/{prefix}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 7, 7) + imgs)
    with open(f"{sys.argv[1]}/{prefix}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels)
write("train", 256)
write("t10k", 128)
PYEOF
cat >"$OUT/tiny_cnn.lua" <<EOF
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local hp = dl.hparams { pool = 1, epochs = 2 }
return dl.experiment {
  name = "tiny-cnn",
  data = dl.data.hdf5 { path = "$OUT/tiny.h5", train = "/train", val = "/test",
                        mean = { 0.5 }, std = { 0.3 } },
  model = nn.Sequential {
    nn.Conv2d(1, 4, 3, { pad = 1 }), nn.BatchNorm(4), nn.ReLU(), nn.Dropout(0.2),
    nn.AdaptiveAvgPool2d(hp.pool), nn.Flatten(), nn.Linear(4 * hp.pool * hp.pool, 2),
  },
  loss = nn.CrossEntropy(),
  optimizer = optim.SGD { lr = 0.05, momentum = 0.9 },
  batch = 32, epochs = hp.epochs, device = "cpu",
}
EOF
run_dir_of() { sed -n 's/^run folder: //p' "$OUT/$1.log" | tail -1; }
run import 0 import "$OUT/idx" "$OUT/tiny.h5" || exit 0
run train 0 run "$OUT/tiny_cnn.lua" --out "$OUT/runs" -q || exit 0
RUN_DIR=$(run_dir_of train)
mkdir -p "$OUT/e2e"
if run export_onnx 0 export "$RUN_DIR" --format onnx -o "$OUT/e2e/model.onnx"; then
    run export_st 0 export "$RUN_DIR" --format safetensors -o "$OUT/e2e/model.safetensors" --names dlbench
    "$HELPER" --run "$RUN_DIR" "$OUT/e2e" 128 >"$OUT/e2e.log" 2>&1 || fail export_cli_logits "$(tail -3 "$OUT/e2e.log")"
    if [ $have_onnx = 1 ]; then
        "$PY" tests/export/py_check.py onnx "$OUT/e2e" >"$OUT/e2e-onnx.log" 2>&1
        check_lines export_cli_onnx_checker "$OUT/e2e-onnx.log"
    fi
    if [ $have_ort = 1 ]; then
        node tests/export/ort_check.js "$ORT_ABS" "$OUT/e2e" >"$OUT/e2e-ort.log" 2>&1
        check_lines export_cli_onnxruntime_agrees "$OUT/e2e-ort.log"
    else
        skip export_cli_onnxruntime_agrees "$ort_why"
    fi
    # onnxruntime against `dlbench predict` itself: the raw /test samples
    # normalised as the ONNX metadata says (so the metadata is checked too)
    if [ $have_ort = 0 ]; then
        skip export_predict_onnxruntime_agrees "$ort_why"
    elif [ $have_onnx = 0 ] || ! "$PY" -c 'import h5py' 2>/dev/null; then
        skip export_predict_onnxruntime_agrees "$PY cannot import onnx and h5py (python3-onnx, python3-h5py)"
    elif run predict_test 0 predict "$RUN_DIR" "$OUT/tiny.h5:/test" --logits --format jsonl \
        -o "$OUT/e2e_pred.jsonl"; then
        if "$PY" tests/export/predict_inputs.py "$OUT/e2e/model.onnx" "$OUT/tiny.h5" /test \
            "$OUT/e2e_pred.jsonl" "$OUT/e2e_pred" >"$OUT/e2e-pred.log" 2>&1 &&
            node tests/export/ort_check.js "$ORT_ABS" "$OUT/e2e_pred" >>"$OUT/e2e-pred.log" 2>&1; then
            check_lines export_predict_onnxruntime_agrees "$OUT/e2e-pred.log"
        else
            fail export_predict_onnxruntime_agrees "$(tail -3 "$OUT/e2e-pred.log")"
        fi
    fi
    # the engine's names with --names dlbench, and the run's normalisation in the metadata
    if head -c 4096 "$OUT/e2e/model.safetensors" | grep -q '"Conv2d1.weight"' &&
        head -c 4096 "$OUT/e2e/model.safetensors" | grep -q '"dlbench_input_mean":"0.5"'; then
        pass export_cli_safetensors_names
    else
        fail export_cli_safetensors_names "no Conv2d1.weight or dlbench_input_mean in the header"
    fi
fi

# the char-GPT of scripts/char_gpt.lua, shortened, on a small text made here
awk 'BEGIN { for (i = 0; i < 300; i++) print "the cat sat on the mat " i % 7 " and ran" }' >"$OUT/text.txt"
if run import_text 0 import --text "$OUT/text.txt" "$OUT/text.h5" --vocab chars &&
    run train_gpt 0 run scripts/char_gpt.lua path="$OUT/text.h5" layers=1 d=16 heads=2 context=8 \
        limit=64 val_limit=32 epochs=1 warmup=1 batch=16 --out "$OUT/runs_gpt" -q; then
    GPT_RUN=$(run_dir_of train_gpt)
    mkdir -p "$OUT/e2e_gpt"
    if run export_gpt 0 export "$GPT_RUN" --format onnx -o "$OUT/e2e_gpt/model.onnx" &&
        "$HELPER" --run "$GPT_RUN" "$OUT/e2e_gpt" 32 >"$OUT/e2e_gpt.log" 2>&1; then
        if [ $have_onnx = 1 ]; then
            "$PY" tests/export/py_check.py onnx "$OUT/e2e_gpt" >"$OUT/gpt-onnx.log" 2>&1
            check_lines export_cli_gpt_onnx_checker "$OUT/gpt-onnx.log"
        fi
        if [ $have_ort = 1 ]; then
            node tests/export/ort_check.js "$ORT_ABS" "$OUT/e2e_gpt" >"$OUT/gpt-ort.log" 2>&1
            check_lines export_cli_gpt_onnxruntime_agrees "$OUT/gpt-ort.log"
        else
            skip export_cli_gpt_onnxruntime_agrees "$ort_why"
        fi
    else
        fail export_cli_gpt "$(tail -3 "$OUT/e2e_gpt.log" 2>/dev/null)"
    fi
fi

# an AdaptiveAvgPool2d(3) over 7x7 has uneven windows: refused naming it
run train3 0 run "$OUT/tiny_cnn.lua" pool=3 epochs=1 --out "$OUT/runs3" -q || exit 0
RUN3=$(run_dir_of train3)
if run export_refused 2 export "$RUN3" --format onnx -o "$OUT/refused.onnx"; then
    if ! grep -q 'AdaptiveAvgPool2d5.*cannot be expressed in ONNX' "$OUT/export_refused.log"; then
        fail export_refuses_layer "message: $(cat "$OUT/export_refused.log")"
    elif ls "$OUT"/refused.onnx* >/dev/null 2>&1; then
        fail export_refuses_layer "a file was left: $(ls "$OUT"/refused.onnx*)"
    else
        pass export_refuses_layer
    fi
fi

# --- bad input ---------------------------------------------------------------------------
# bad NAME WHAT-THE-MESSAGE-SAYS FILE args...: exit 2, the message, no FILE
bad() {
    local name=$1 want=$2 file=$3
    shift 3
    run "$name" 2 export "$@" || return
    if ! grep -qi -- "$want" "$OUT/$name.log"; then
        fail "$name" "expected '$want' in: $(cat "$OUT/$name.log")"
    elif ls "$file"* >/dev/null 2>&1; then
        fail "$name" "left $(ls "$file"*)"
    else
        pass "$name"
    fi
}
bad export_bad_format "expected onnx or safetensors" "$OUT/b1.x" "$RUN_DIR" --format tflite -o "$OUT/b1.x"
bad export_no_format "--format is needed" "$OUT/b2.onnx" "$RUN_DIR" -o "$OUT/b2.onnx"
bad export_missing_folder "does not exist" "$OUT/nowhere" "$RUN_DIR" --format onnx -o "$OUT/nowhere/m.onnx"
bad export_bad_checkpoint "nosuch" "$OUT/b3.onnx" "$RUN_DIR" --format onnx --checkpoint nosuch -o "$OUT/b3.onnx"
cp -r "$RUN_DIR" "$OUT/nockpt"
rm -f "$OUT/nockpt"/checkpoint*.h5
bad export_no_checkpoint "checkpoint" "$OUT/b4.onnx" "$OUT/nockpt" --format onnx -o "$OUT/b4.onnx"
bad export_bad_names "expected torch or dlbench" "$OUT/b5.st" "$RUN_DIR" --format safetensors --names jax -o "$OUT/b5.st"
