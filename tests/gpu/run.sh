#!/usr/bin/env bash
# tests/gpu/run.sh - the one prepared script for a GPU machine: build, all tests (CUDA vs CPU twice: f32 and TF32), GPU benchmarks, a summary table
#
# Usage: bash tests/gpu/run.sh        (BUILD=build JOBS=16 STEP_TIMEOUT=300)
# Every step is bounded by a timeout and says why when it is skipped; the
# exit status is 1 when anything failed, 0 otherwise (skips included).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
JOBS=${JOBS:-16}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
export BUILD
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

rows=()
failed=0
row() { # step status detail
    rows+=("$(printf '%-30s %-5s %s' "$1" "$2" "$3")")
    [ "$2" = FAIL ] && failed=1
    return 0
}
# counts of PASS/FAIL/SKIP lines in a log
counts() {
    local p f s
    p=$(grep -c '^PASS' "$1")
    f=$(grep -c '^FAIL' "$1")
    s=$(grep -c '^SKIP' "$1")
    echo "$p passed, $f failed, $s skipped"
}

echo "== machine"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    row "gpu" ok "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
else
    echo "nvidia-smi not found: no NVIDIA driver on this machine"
    row "gpu" SKIP "nvidia-smi not found"
fi

echo "== build (make -j$JOBS)"
t0=$(date +%s)
if timeout 900 make -j"$JOBS" all >"$logdir/build.log" 2>&1; then
    row "build" ok "$(($(date +%s) - t0)) s"
else
    tail -40 "$logdir/build.log"
    row "build" FAIL "see the make output above"
fi
if [ -f "$BUILD/dlbench-cuda.so" ]; then
    row "cuda module" ok "$BUILD/dlbench-cuda.so"
else
    row "cuda module" FAIL "$BUILD/dlbench-cuda.so not built (nvcc: $(command -v nvcc || echo none))"
fi

echo "== tests (make test)"
if timeout $((STEP_TIMEOUT * 2)) make -j"$JOBS" test >"$logdir/test.log" 2>&1; then
    st=ok
else
    st=FAIL
fi
tail -60 "$logdir/test.log"
total=$(grep -E '^[0-9]+ passed, ' "$logdir/test.log" | tail -1)
row "all tests" "$st" "${total:-no summary line: see the output above}"

echo "== test_cuda with TF32 products (DLBENCH_CUDA_TF32=1)"
if [ -x "$BUILD/tests/test_cuda" ]; then
    DLBENCH_CUDA_TF32=1 timeout "$STEP_TIMEOUT" "$BUILD/tests/test_cuda" >"$logdir/tf32.log" 2>&1
    rc=$?
    cat "$logdir/tf32.log"
    if [ $rc -ne 0 ] || grep -q '^FAIL' "$logdir/tf32.log"; then st=FAIL; else st=ok; fi
    grep -q '^PASS' "$logdir/tf32.log" || { [ $st = ok ] && st=SKIP; }
    row "test_cuda (TF32)" "$st" "$(counts "$logdir/tf32.log")"
else
    row "test_cuda (TF32)" FAIL "$BUILD/tests/test_cuda not built"
fi

echo "== benchmarks"
found=0
for src in bench/gpu_*.c; do
    [ -f "$src" ] || continue
    found=1
    name=$(basename "$src" .c)
    if ! timeout 300 make "$BUILD/bench/$name" >"$logdir/$name.build" 2>&1; then
        tail -20 "$logdir/$name.build"
        row "$name" FAIL "does not build"
        continue
    fi
    timeout "$STEP_TIMEOUT" "$BUILD/bench/$name" >"$logdir/$name.log" 2>&1
    rc=$?
    cat "$logdir/$name.log"
    if grep -q '^SKIP' "$logdir/$name.log" && ! grep -q '^RESULT' "$logdir/$name.log"; then
        row "$name" SKIP "$(grep -m1 '^SKIP' "$logdir/$name.log")"
    elif [ $rc -ne 0 ]; then
        row "$name" FAIL "exit status $rc"
    else
        row "$name" ok "$(grep -c '^RESULT' "$logdir/$name.log") results"
    fi
    while read -r _ bench dtype shape tflops ms; do
        row "  $bench $dtype $shape" "" "$tflops TFLOP/s ($ms ms)"
    done < <(grep '^RESULT' "$logdir/$name.log")
done
for src in bench/gpu_*.py; do
    [ -f "$src" ] || continue
    found=1
    name=$(basename "$src" .py)
    if ! python3 -c 'import torch' >/dev/null 2>&1; then
        row "$name" SKIP "python3 with torch not available"
        continue
    fi
    timeout "$STEP_TIMEOUT" python3 "$src" >"$logdir/$name.log" 2>&1
    rc=$?
    cat "$logdir/$name.log"
    if [ $rc -ne 0 ]; then st=FAIL; else st=ok; fi
    row "$name" "$st" "$(grep -c '^RESULT' "$logdir/$name.log") results"
    while read -r _ rest; do
        row "  $rest" "" ""
    done < <(grep '^RESULT' "$logdir/$name.log")
done
[ $found = 1 ] || row "benchmarks" SKIP "no bench/gpu_* files"

echo
echo "== summary"
printf '%-30s %-5s %s\n' step state detail
for r in "${rows[@]}"; do
    echo "$r"
done
echo
echo "failures:"
cat "$logdir"/*.log 2>/dev/null | grep -E '^FAIL' | sort -u | sed 's/^/  /'
echo "skip reasons (count):"
cat "$logdir"/*.log 2>/dev/null | grep -E '^SKIP' | sort -u | sed -E 's/^SKIP [^:]*: //' |
    sort | uniq -c | sort -rn | head -10
exit $failed
