#!/usr/bin/env bash
# t_gpu_dry.sh - tests/gpu/run.sh --dry-run on this machine: the preflight, every
# GPU step with its decision (skipped with a reason where there is no GPU), the
# table in $OUT/gpu-run/summary.txt, in well under a minute.
. "$(dirname "$0")/lib.sh"
test_init
for b in "$BUILD/bench/gpu_train" "$BUILD/bench/gpu_gemm"; do
    [ -x "$b" ] || make -s BUILD="$BUILD" "$b" >/dev/null 2>&1 || { fail gpu_dry "cannot build $b"; exit 0; }
done
t0=$(date +%s)
OUT="$OUT" BUILD="$BUILD" timeout 60 bash tests/gpu/run.sh --dry-run >"$OUT/dry.log" 2>&1
rc=$?
secs=$(($(date +%s) - t0))
table=$OUT/gpu-run/summary.txt
if [ $rc -ne 0 ]; then
    fail gpu_dry_status "exit status $rc after $secs s; output:"
    tail -20 "$OUT/dry.log" | sed 's/^/    /'
else
    pass gpu_dry_status
fi
[ -f "$table" ] && pass gpu_dry_table || fail gpu_dry_table "no $table"
# the preflight names each piece, found or not
missing=""
for p in driver nvidia-smi nvcc cudart cublas cudnn nccl compute-sanitizer "build deps" python3-torch; do
    grep -q "^preflight: $p: \(ok\|MISSING\)" "$OUT/dry.log" || missing="$missing '$p'"
done
[ -z "$missing" ] && pass gpu_dry_preflight || fail gpu_dry_preflight "no preflight line for$missing"
# every step has a row with a state; without a GPU each GPU step is a SKIP with a reason
steps=("cuda module" test_cuda "test_switch (cuda, 100M)" gpu_gemm gpu_train gpu_torch
    "cnn accuracy (bf16 vs fp32)" memcheck "test_cuda (TF32)" "cpu suite")
bad=""
for s in "${steps[@]}"; do
    re=$(printf '%s' "$s" | sed 's/[()]/\\&/g')
    line=$(grep -m1 -E "^$re +(ok|SKIP|FAIL) " "$table" 2>/dev/null)
    if [ -z "$line" ]; then
        bad="$bad '$s' (no row)"
    elif ! command -v nvidia-smi >/dev/null 2>&1; then
        echo "$line" | grep -qE ' SKIP +[^ ]' || bad="$bad '$s' ($line)"
    fi
done
[ -z "$bad" ] && pass gpu_dry_steps || fail gpu_dry_steps "rows missing or not skipped with a reason:$bad"
if ! command -v nvidia-smi >/dev/null 2>&1; then
    grep -q '^test_cuda  *SKIP  *no GPU: ' "$table" && pass gpu_dry_reason ||
        fail gpu_dry_reason "test_cuda's row does not say 'no GPU': $(grep '^test_cuda ' "$table")"
fi
[ "$secs" -lt 60 ] && pass gpu_dry_quick || fail gpu_dry_quick "took $secs s"
