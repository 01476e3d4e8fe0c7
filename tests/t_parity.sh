#!/usr/bin/env bash
# t_parity.sh - `dlbench run --check-parity N` through $DLBENCH: the CPU
# against a CPU backend of 1 thread (small, measured differences; the
# losses equal a plain run's), against one of the same thread count and
# against itself (exactly 0: the restore is exact), an impossible
# tolerance, bad arguments (exit 2 naming the flag) and CUDA without a GPU
# (the reason, exit 1).
. "$(dirname "$0")/lib.sh"
test_init

if ! "$DLBENCH" run --help 2>/dev/null | grep -q -- --check-parity; then
    skip t_parity "$DLBENCH run has no --check-parity"
    exit 0
fi

# the run's own CPU backend has 2 threads wherever this runs
export DLBENCH_THREADS=2

# loss_diff / param_diff NAME: the largest relative differences reported
loss_diff() { sed -n 's/.*largest relative loss difference: \([^ ]*\).*/\1/p' "$OUT/$1.log"; }
param_diff() { sed -n 's/.*largest relative parameter difference: \([^ ]*\).*/\1/p' "$OUT/$1.log"; }
# the per-step table: "step lossA lossB"
losses() { awk '/^ +[0-9]+ +[-0-9.e+]+ +[-0-9.e+]+ +[-0-9.e+]+$/ { print $1, $2, $3 }' "$OUT/$1.log"; }
# below X Y: X < Y as numbers
below() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x != "" && x + 0 < y + 0) }'; }

# --- the CPU against a CPU backend of 1 thread ------------------------------------
if run cpu1 0 run scripts/spirals.lua --check-parity 5 --parity-device cpu:1 --out "$OUT/runs"; then
    l=$(loss_diff cpu1)
    p=$(param_diff cpu1)
    n=$(losses cpu1 | wc -l)
    if [ "$n" -ne 5 ]; then
        fail parity_cpu1 "$n step lines, expected 5"
    elif ! below "$l" 1e-3 || ! below "$p" 1e-3; then
        fail parity_cpu1 "differences loss '$l', parameters '$p', expected < 1e-3"
    elif ! grep -q '^parity: within tolerance 0.001 (fp32)' "$OUT/cpu1.log"; then
        fail parity_cpu1 "no 'within tolerance' line"
    elif [ -e "$OUT/runs" ]; then
        fail parity_cpu1 "a run folder was made: $(ls "$OUT/runs")"
    else
        pass parity_cpu1
        echo "  spirals, 5 steps, 2 threads vs 1: loss $l, parameters $p"
    fi
fi

# the parity check's losses are those a plain run logs, step by step
sed 's/batch = hp.batch, epochs = hp.epochs,/batch = hp.batch, epochs = hp.epochs, log_every = 1,/' \
    scripts/spirals.lua >"$OUT/spirals_every.lua"
if ! grep -q 'log_every = 1' "$OUT/spirals_every.lua"; then
    fail parity_losses_as_logged "could not make a log_every = 1 copy of scripts/spirals.lua"
elif run every_parity 0 run "$OUT/spirals_every.lua" --check-parity 5 --parity-device cpu:1 &&
    run every_plain 0 run "$OUT/spirals_every.lua" --stop-after 5 --out "$OUT/plain"; then
    d=$(sed -n 's/^run folder: //p' "$OUT/every_plain.log" | tail -1)
    grep '"kind":"step"' "$d/metrics.jsonl" |
        sed -n 's/.*"step":\([0-9]*\),.*"loss":\([-0-9.eE+]*\).*/\1 \2/p' >"$OUT/logged.txt"
    losses every_parity >"$OUT/checked.txt"
    bad=$(awk 'NR == FNR { logged[$1] = $2; next }
               { if (!($1 in logged)) { print "step " $1 " not logged"; next }
                 for (c = 2; c <= 3; c++) {
                   d = $c - logged[$1]; if (d < 0) d = -d
                   if (d > 1e-8 * logged[$1]) print "step " $1 ": " $c " vs logged " logged[$1] } }' \
        "$OUT/logged.txt" "$OUT/checked.txt")
    if [ "$(wc -l <"$OUT/checked.txt")" -ne 5 ] || [ "$(wc -l <"$OUT/logged.txt")" -lt 5 ]; then
        fail parity_losses_as_logged "steps: $(wc -l <"$OUT/checked.txt") checked, $(wc -l <"$OUT/logged.txt") logged"
    elif [ -n "$bad" ]; then
        fail parity_losses_as_logged "$bad"
    else
        pass parity_losses_as_logged
    fi
fi

# --- a tolerance of 0 where 1 and 2 threads differ -------------------------------------
# batch 1024: a weight gradient's product ([64 x 1024] x [1024 x 64]) is long
# enough in k to be split across 2 threads and summed in another order
if run tol0 1 run scripts/spirals.lua batch=1024 --check-parity 3 --parity-device cpu:1 \
    --parity-tol 0; then
    p=$(param_diff tol0)
    if ! grep -q '^parity: OVER tolerance 0 ' "$OUT/tol0.log"; then
        fail parity_tol0_over "no 'OVER tolerance 0' line"
    elif below "$p" 1e-12 || ! below "$p" 1e-3; then
        fail parity_tol0_over "parameter difference '$p': expected small but not 0"
    else
        pass parity_tol0_over
        echo "  spirals batch=1024, 3 steps, 2 threads vs 1: parameters $p"
    fi
fi

# --- the restore is exact: the same kernels give exactly 0 ---------------------------
for dev in cpu:2 cpu; do
    name=exact_${dev/:/}
    if run "$name" 0 run scripts/spirals.lua batch=1024 --check-parity 6 --parity-device "$dev" \
        --parity-tol 0; then
        if grep -q 'largest relative loss difference: 0 ' "$OUT/$name.log" &&
            grep -q 'largest relative parameter difference: 0 (every parameter bit-identical)' \
                "$OUT/$name.log"; then
            pass "parity_exact_$dev"
        else
            fail "parity_exact_$dev" "differences: loss '$(loss_diff "$name")', parameters '$(param_diff "$name")'"
        fi
    fi
done
# the same through the HDF5 loader (prefetch threads restarted), BatchNorm and AdamW
if [ -f data/fashion-mnist.h5 ]; then
    if run exact_cnn 0 run scripts/fmnist_cnn.lua epochs=1 limit=512 val_limit=256 channels=4 \
        --check-parity 4 --parity-device cpu:2 --parity-tol 0; then
        pass parity_exact_hdf5_cnn
    fi
else
    skip parity_exact_hdf5_cnn "data/fashion-mnist.h5 not prepared (make run, or t_run.sh, prepares it)"
fi

# --- bad arguments: exit 2, the flag named -------------------------------------------
bad() { # NAME FLAG args...
    local name=$1 flag=$2
    shift 2
    if run "$name" 2 run scripts/spirals.lua "$@"; then
        if grep -q -- "$flag" "$OUT/$name.log"; then
            pass "$name"
        else
            fail "$name" "the message does not name $flag: $(head -1 "$OUT/$name.log")"
        fi
    fi
}
bad parity_bad_zero --check-parity --check-parity 0
bad parity_bad_word --check-parity --check-parity many
bad parity_bad_missing --check-parity --check-parity
bad parity_bad_device --parity-device --check-parity 2 --parity-device tpu
bad parity_bad_threads --parity-device --check-parity 2 --parity-device cpu:0
bad parity_bad_tol --parity-tol --check-parity 2 --parity-tol -1
bad parity_device_alone --check-parity --parity-device cpu:1

# --- CUDA: the reason without a GPU, the check with one ----------------------------------
"$DLBENCH" run scripts/spirals.lua --check-parity 3 >"$OUT/cuda.log" 2>&1
rc=$?
if grep -q 'cannot check parity against cuda: ' "$OUT/cuda.log"; then
    why=$(sed -n 's/.*cannot check parity against cuda: //p' "$OUT/cuda.log")
    if [ "$rc" -eq 1 ] && [ -n "$why" ]; then
        pass parity_cuda_unavailable
        echo "  $why"
    else
        fail parity_cuda_unavailable "exit status $rc (expected 1), reason '$why'"
    fi
elif DLBENCH_CUDA_TF32=0 run cuda_f32 0 run scripts/spirals.lua --check-parity 5; then
    pass parity_cuda
    echo "  spirals, 5 steps, CPU vs CUDA (no TF32): loss $(loss_diff cuda_f32), parameters $(param_diff cuda_f32)"
fi
exit 0
