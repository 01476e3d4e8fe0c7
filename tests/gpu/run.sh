#!/usr/bin/env bash
# tests/gpu/run.sh - the one prepared script for a GPU machine: build, all tests (CUDA vs CPU twice: f32 and TF32), GPU benchmarks against PyTorch, bf16 CNN accuracy, a summary table
#
# Usage: bash tests/gpu/run.sh        (BUILD=build JOBS=16 STEP_TIMEOUT=300)
#
# Steps, in order:
#   build          make all (the CUDA module needs nvcc)
#   all tests      make test; GPU_SKIP_TESTS=1 skips it (then only test_cuda is built)
#   test_cuda      once more with TF32 products (DLBENCH_CUDA_TF32=1)
#   benchmarks     every bench/gpu_*.c and bench/gpu_*.py, RESULT lines tabulated:
#                  gpu_gemm (cuBLAS GEMM TFLOP/s: the peak), gpu_train (dlbench training
#                  throughput on the CUDA backend), gpu_torch (the PyTorch eager peer of
#                  gpu_train, and torch's bf16 matmul peak)
#   comparison     dlbench against PyTorch per model: samples/s ratio, target >= 1.2x on the
#                  batch-128 models; the large MLP (mlp-8192, bf16) in TFLOP/s as a share of
#                  the cuBLAS bf16 peak gpu_gemm measured in this run, target >= 60%
#   cnn accuracy   scripts/fmnist_cnn.lua for 1 epoch on --device cuda in fp32 and in bf16:
#                  passes when fp32 val_acc >= 0.85 and bf16 >= fp32 - 0.5 points. Needs
#                  data/fashion-mnist.h5 (made by scripts/prepare-data.sh from Debian's
#                  dataset-fashion-mnist, or FMNIST_DIR); without it the step skips and says why.
# Environment: GPU_SKIP_TESTS=1; GPU_PYTHON (the interpreter whose torch has CUDA; default:
# the first of python3, /usr/bin/python3 whose torch sees a GPU); GPU_BENCH_ARGS (extra
# arguments for gpu_train and gpu_torch, e.g. "--quick" or "--reps 2"); ACC_TIMEOUT (300 s
# per accuracy run). To check this script on a machine without a GPU:
# GPU_BENCH_ARGS="--device cpu --model mlp-sgd" runs both benchmark sides on the CPU, and
# GPU_ACC_DEVICE=cpu the accuracy step (its rows then say cpu).
#
# Every step is bounded by a timeout and says why when it is skipped; the
# exit status is 1 when anything failed, 0 otherwise (skips included). A
# missed performance target is shown as MISS and counted in the summary,
# but is not a failure: it is a measurement, not a broken build.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
JOBS=${JOBS:-16}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
ACC_TIMEOUT=${ACC_TIMEOUT:-300}
GPU_SKIP_TESTS=${GPU_SKIP_TESTS:-0}
GPU_BENCH_ARGS=${GPU_BENCH_ARGS:-}
GPU_ACC_DEVICE=${GPU_ACC_DEVICE:-cuda}
export BUILD
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT
t_start=$(date +%s)

rows=()
failed=0
met=0
missed=0
row() { # step status detail
    rows+=("$(printf '%-30s %-5s %s' "$1" "$2" "$3")")
    [ "$2" = FAIL ] && failed=1
    [ "$2" = met ] && met=$((met + 1))
    [ "$2" = MISS ] && missed=$((missed + 1))
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
# the value of key=value among the remaining arguments
field() {
    local k=$1 w
    shift
    for w in "$@"; do
        case $w in "$k="*) echo "${w#*=}"; return 0 ;; esac
    done
    echo "?"
}
# one summary row per RESULT line of a benchmark log
result_rows() {
    local _r bench a b rest tf ms
    while read -r _r bench a b rest; do
        if [ "$bench" = gpu_gemm ]; then # RESULT gpu_gemm dtype MxNxK TFLOP/s ms
            read -r tf ms _ <<<"$rest"
            row "  $bench $a $b" "" "$tf TFLOP/s ($ms ms)"
        elif [ "$a" = matmul ]; then # RESULT gpu_torch matmul bf16 shape= tflops= ms=
            # shellcheck disable=SC2086
            row "  $bench $a $b" "" "$(field tflops $rest) TFLOP/s ($(field shape $rest), $(field ms $rest) ms)"
        else # RESULT gpu_train|gpu_torch model prec batch= samples_per_s= ... tflops= ...
            # shellcheck disable=SC2086
            row "  $bench $a $b" "" "$(field samples_per_s $rest) samples/s, $(field tflops $rest) TFLOP/s, batch $(field batch $rest)"
        fi
    done < <(grep '^RESULT' "$1")
}

echo "== machine"
if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 60 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    row "gpu" ok "$(timeout 60 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
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
if [ "$GPU_SKIP_TESTS" = 1 ]; then
    echo "skipped: GPU_SKIP_TESTS=1"
    row "all tests" SKIP "GPU_SKIP_TESTS=1"
else
    t0=$(date +%s)
    if timeout $((STEP_TIMEOUT * 2)) make -j"$JOBS" test >"$logdir/test.log" 2>&1; then
        st=ok
    else
        st=FAIL
    fi
    tail -60 "$logdir/test.log"
    total=$(grep -E '^[0-9]+ passed, ' "$logdir/test.log" | tail -1)
    row "all tests" "$st" "${total:-no summary line: see the output above} ($(($(date +%s) - t0)) s)"
fi

echo "== test_cuda with TF32 products (DLBENCH_CUDA_TF32=1)"
timeout 300 make "$BUILD/tests/test_cuda" >"$logdir/test_cuda.build" 2>&1 || tail -20 "$logdir/test_cuda.build"
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
    args=()
    # shellcheck disable=SC2206
    [ "$name" = gpu_train ] && args=($GPU_BENCH_ARGS)
    if ! timeout 300 make "$BUILD/bench/$name" >"$logdir/$name.build" 2>&1; then
        tail -20 "$logdir/$name.build"
        row "$name" FAIL "does not build"
        continue
    fi
    echo "-- $name ${args[*]}"
    t0=$(date +%s)
    timeout "$STEP_TIMEOUT" "$BUILD/bench/$name" "${args[@]}" >"$logdir/$name.log" 2>&1
    rc=$?
    cat "$logdir/$name.log"
    if grep -q '^SKIP' "$logdir/$name.log" && ! grep -q '^RESULT' "$logdir/$name.log"; then
        row "$name" SKIP "$(grep -m1 '^SKIP' "$logdir/$name.log")"
    elif [ $rc -eq 124 ]; then
        echo "FAIL $name: timed out after $STEP_TIMEOUT s" >>"$logdir/$name.log"
        row "$name" FAIL "timed out after $STEP_TIMEOUT s"
    elif [ $rc -ne 0 ]; then
        row "$name" FAIL "exit status $rc"
    else
        row "$name" ok "$(grep -c '^RESULT' "$logdir/$name.log") results, $(($(date +%s) - t0)) s"
    fi
    result_rows "$logdir/$name.log"
done

# The interpreter for bench/gpu_*.py: GPU_PYTHON, else the first candidate
# whose torch sees a GPU, else the first that imports torch at all (the
# script then skips and says why).
py="" py_why=""
if [ -n "${GPU_PYTHON:-}" ]; then
    py=$GPU_PYTHON
else
    tried=""
    for c in python3 /usr/bin/python3; do
        command -v "$c" >/dev/null 2>&1 || continue
        case " $tried " in *" $(command -v "$c") "*) continue ;; esac
        tried="$tried $(command -v "$c")"
        if timeout 120 "$c" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
            py=$c
            break
        fi
        [ -z "$py_why" ] && timeout 120 "$c" -c 'import torch' >/dev/null 2>&1 && py_why=$c
    done
    if [ -z "$py" ]; then
        py=$py_why
        py_why="no python3 with torch (tried:${tried:- none}; GPU_PYTHON=... names one)"
    fi
fi
for src in bench/gpu_*.py; do
    [ -f "$src" ] || continue
    found=1
    name=$(basename "$src" .py)
    if [ -z "$py" ]; then
        echo "SKIP $name: $py_why" >"$logdir/$name.log"
        row "$name" SKIP "$py_why"
        continue
    fi
    args=()
    # shellcheck disable=SC2206
    [ "$name" = gpu_torch ] && args=($GPU_BENCH_ARGS)
    echo "-- $name ($py) ${args[*]}"
    t0=$(date +%s)
    timeout "$STEP_TIMEOUT" "$py" "$src" "${args[@]}" >"$logdir/$name.log" 2>&1
    rc=$?
    cat "$logdir/$name.log"
    if grep -q '^SKIP' "$logdir/$name.log" && ! grep -q '^RESULT' "$logdir/$name.log"; then
        row "$name" SKIP "$(grep -m1 '^SKIP' "$logdir/$name.log")"
    elif [ $rc -eq 124 ]; then
        echo "FAIL $name: timed out after $STEP_TIMEOUT s" >>"$logdir/$name.log"
        row "$name" FAIL "timed out after $STEP_TIMEOUT s"
    elif [ $rc -ne 0 ]; then
        row "$name" FAIL "exit status $rc"
    else
        row "$name" ok "$(grep -c '^RESULT' "$logdir/$name.log") results, $(($(date +%s) - t0)) s"
    fi
    result_rows "$logdir/$name.log"
done
[ $found = 1 ] || row "benchmarks" SKIP "no bench/gpu_* files"

echo
echo "== dlbench against PyTorch on this GPU"
cat "$logdir"/gpu_*.log 2>/dev/null | grep '^RESULT' >"$logdir/results.txt"
awk '
function field(key,    i) {
    for (i = 5; i <= NF; i++)
        if (index($i, key "=") == 1)
            return substr($i, length(key) + 2)
    return ""
}
$2 == "gpu_gemm" && $3 == "bf16" { if ($5 + 0 > peak) { peak = $5 + 0; pshape = $4 }; next }
$2 == "gpu_torch" && $3 == "matmul" {
    v = field("tflops") + 0
    if (v > tpeak) { tpeak = v; tshape = field("shape") }
    next
}
$2 == "gpu_train" || $2 == "gpu_torch" {
    k = $3 " " $4
    if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    s = ($2 == "gpu_train") ? "dl" : "pt"
    sps[s, k] = field("samples_per_s") + 0
    tf[s, k] = field("tflops") + 0
    batch[k] = field("batch")
}
END {
    if (n == 0) {
        print "nothing to compare: no gpu_train or gpu_torch results (see their SKIP or FAIL lines above)"
        print "ROW|comparison|SKIP|no gpu_train or gpu_torch results"
        exit
    }
    printf "%-9s %-4s %5s %11s %11s %7s %7s %8s %8s %5s\n", "model", "prec", "batch", "dlbench/s",
        "pytorch/s", "ratio", "target", "dl TF/s", "pt TF/s", "met"
    for (i = 1; i <= n; i++) {
        k = order[i]
        split(k, mp, " ")
        m = mp[1]
        have = ((("dl", k) in sps) && (("pt", k) in sps) && sps["pt", k] > 0)
        ratio = have ? sps["dl", k] / sps["pt", k] : 0
        large = (batch[k] + 0 > 128)
        tg = large ? "-" : ">=1.20x"
        state = "-"
        if (!large && have) state = (ratio >= 1.2) ? "yes" : "NO"
        printf "%-9s %-4s %5s %11s %11s %7s %7s %8s %8s %5s\n", m, mp[2], batch[k],
            (("dl", k) in sps) ? sprintf("%.0f", sps["dl", k]) : "-",
            (("pt", k) in sps) ? sprintf("%.0f", sps["pt", k]) : "-",
            have ? sprintf("%.2fx", ratio) : "-", tg,
            (("dl", k) in tf) ? sprintf("%.2f", tf["dl", k]) : "-",
            (("pt", k) in tf) ? sprintf("%.2f", tf["pt", k]) : "-", state
        name = "vs torch " m " " mp[2]
        if (large) {
            if (!(("dl", k) in tf))
                print "ROW|" name "|SKIP|no dlbench figure (see gpu_train)"
            else if (peak <= 0)
                print "ROW|" name "|SKIP|" sprintf("%.1f TFLOP/s; no cuBLAS bf16 peak (gpu_gemm) to compare with", tf["dl", k])
            else {
                pct = 100 * tf["dl", k] / peak
                print "ROW|" name "|" (pct >= 60 ? "met" : "MISS") "|" \
                    sprintf("%.1f TFLOP/s = %.0f%% of cuBLAS bf16 %.1f (target >= 60%%)%s", tf["dl", k], pct, peak,
                            have ? sprintf("; %.2fx torch", ratio) : "")
            }
        } else if (!(("dl", k) in sps)) {
            print "ROW|" name "|SKIP|no dlbench figure (see gpu_train)"
        } else if (!have) {
            print "ROW|" name "|SKIP|no PyTorch figure (see gpu_torch)"
        } else {
            print "ROW|" name "|" (ratio >= 1.2 ? "met" : "MISS") "|" \
                sprintf("%.2fx PyTorch eager samples/s (target >= 1.2x)", ratio)
        }
    }
    print "  (ratio = dlbench / PyTorch eager samples/s, best of the timed windows each; TF/s counts"
    print "   matrix-product FLOPs: forward, weight and input gradients, about 6 x params per sample)"
    for (i = 1; i <= n; i++) {
        k = order[i]
        if (batch[k] + 0 <= 128 || !(("dl", k) in tf)) continue
        split(k, mp, " ")
        if (peak > 0)
            printf "large MLP %s: dlbench %.1f TFLOP/s = %.0f%% of the cuBLAS bf16 peak %.1f TFLOP/s (gpu_gemm %s); target >= 60%%: %s\n",
                mp[1], tf["dl", k], 100 * tf["dl", k] / peak, peak, pshape, (100 * tf["dl", k] / peak >= 60 ? "yes" : "NO")
        else
            printf "large MLP %s: dlbench %.1f TFLOP/s; no cuBLAS bf16 peak from gpu_gemm in this run\n", mp[1], tf["dl", k]
        if (("pt", k) in tf) {
            if (peak > 0)
                printf "  PyTorch: %.1f TFLOP/s = %.0f%% of the cuBLAS peak", tf["pt", k], 100 * tf["pt", k] / peak
            else
                printf "  PyTorch: %.1f TFLOP/s", tf["pt", k]
            if (tpeak > 0)
                printf "; torch.matmul bf16 peak %.1f TFLOP/s (%s): dlbench %.0f%%, PyTorch %.0f%% of it",
                    tpeak, tshape, 100 * tf["dl", k] / tpeak, 100 * tf["pt", k] / tpeak
            printf "\n"
        }
    }
}' "$logdir/results.txt" >"$logdir/compare.out"
grep -v '^ROW|' "$logdir/compare.out"
while IFS='|' read -r _ name st detail; do
    row "$name" "$st" "$detail"
done < <(grep '^ROW|' "$logdir/compare.out")

# --- bf16 against fp32 accuracy of the Fashion-MNIST CNN on the GPU -----------
# A FAIL or SKIP line goes to acc.log, so the summary's lists see it.
acc_skip() {
    echo "SKIP cnn-accuracy: $1" | tee -a "$logdir/acc.log"
    row "cnn accuracy (bf16 vs fp32)" SKIP "$1"
}
acc_fail() {
    echo "FAIL cnn-accuracy: $1" | tee -a "$logdir/acc.log"
    row "cnn accuracy (bf16 vs fp32)" FAIL "$1"
}
# Prints "val_acc samples_per_s wall_s device status" of a run's summary.json.
acc_summary() {
    local f=$1 k v out=""
    for k in val_acc samples_per_s wall_s; do
        v=$(grep -m1 -oE "\"$k\":[[:space:]]*[0-9.eE+-]+" "$f" | grep -oE '[0-9.eE+-]+$')
        out="$out ${v:-?}"
    done
    for k in device status; do
        v=$(grep -m1 -oE "\"$k\":[[:space:]]*\"[^\"]*\"" "$f" | sed -E 's/.*"([^"]*)"$/\1/')
        out="$out ${v:-?}"
    done
    echo "$out"
}
acc_check() {
    local probe rc p f x acc=() line
    if [ ! -x "$BUILD/dlbench" ]; then
        acc_fail "$BUILD/dlbench not built"
        return
    fi
    if ! timeout 300 make "$BUILD/bench/gpu_train" >"$logdir/probe.build" 2>&1; then
        acc_fail "$BUILD/bench/gpu_train (the CUDA probe) does not build"
        return
    fi
    local dev=$GPU_ACC_DEVICE
    if [ "$dev" = cpu ]; then
        probe=$(timeout 120 "$BUILD/bench/gpu_train" --probe --device cpu 2>&1)
    else
        probe=$(timeout 120 "$BUILD/bench/gpu_train" --probe 2>&1)
    fi
    rc=$?
    if [ $rc -eq 3 ]; then
        acc_skip "no GPU: ${probe#SKIP gpu_train: }"
        return
    elif [ $rc -ne 0 ]; then
        acc_fail "the CUDA probe exited with status $rc: $(echo "$probe" | tail -1)"
        return
    fi
    echo "# $probe"
    if [ ! -f data/fashion-mnist.h5 ]; then
        echo "-- data/fashion-mnist.h5 missing: bash scripts/prepare-data.sh"
        timeout 600 bash scripts/prepare-data.sh >"$logdir/prepare.txt" 2>&1
        cat "$logdir/prepare.txt"
    fi
    if [ ! -f data/fashion-mnist.h5 ]; then
        acc_skip "data/fashion-mnist.h5 could not be prepared ($(grep -v '^$' "$logdir/prepare.txt" | tail -1 | cut -c1-160)); FMNIST_DIR=<IDX files> or copy data/fashion-mnist.h5"
        return
    fi
    for p in fp32 bf16; do
        echo "-- $p: $BUILD/dlbench run scripts/fmnist_cnn.lua epochs=1 precision=$p --device $dev --seed 1"
        timeout "$ACC_TIMEOUT" "$BUILD/dlbench" run scripts/fmnist_cnn.lua epochs=1 precision="$p" \
            --device "$dev" --seed 1 --out "$logdir/acc-$p" --force --quiet >"$logdir/acc-$p.txt" 2>&1
        rc=$?
        tail -12 "$logdir/acc-$p.txt"
        f=""
        for x in "$logdir/acc-$p"/*/summary.json; do
            [ -f "$x" ] && f=$x && break
        done
        if [ $rc -eq 124 ]; then
            acc_fail "$p run timed out after $ACC_TIMEOUT s"
            return
        elif [ $rc -ne 0 ] || [ -z "$f" ]; then
            acc_fail "$p run exited with status $rc: $(grep -v '^$' "$logdir/acc-$p.txt" | tail -1 | cut -c1-160)"
            return
        fi
        line=$(acc_summary "$f")
        # shellcheck disable=SC2086
        set -- $line
        if [ "$4" != "$dev" ] || [ "$5" != finished ] || [ "$1" = "?" ]; then
            acc_fail "$p run: device $4, status $5, val_acc $1 (expected $dev, finished, a number)"
            return
        fi
        row "  cnn $p 1 epoch ($dev)" "" "val_acc $1, $(printf '%.0f' "$2") samples/s, $3 s"
        acc+=("$1")
    done
    line=$(awk -v f="${acc[0]}" -v b="${acc[1]}" 'BEGIN {
        ok = (f >= 0.85 && b >= f - 0.005)
        printf "%s|fp32 %.2f%%, bf16 %.2f%% (%+.2f points); pass: fp32 >= 85%% and bf16 >= fp32 - 0.5\n",
            ok ? "ok" : "FAIL", 100 * f, 100 * b, 100 * (b - f)
    }')
    echo "${line#*|}"
    if [ "${line%%|*}" = ok ]; then
        row "cnn accuracy (bf16 vs fp32)" ok "${line#*|}"
    else
        acc_fail "${line#*|}"
    fi
}
echo
echo "== bf16 against fp32 accuracy: scripts/fmnist_cnn.lua, 1 epoch, --device $GPU_ACC_DEVICE"
acc_check

echo
echo "== summary ($(($(date +%s) - t_start)) s)"
printf '%-30s %-5s %s\n' step state detail
for r in "${rows[@]}"; do
    echo "$r"
done
echo
echo "performance targets: $met met, $missed missed (MISS rows; not failures)"
echo "failures:"
cat "$logdir"/*.log 2>/dev/null | grep -E '^FAIL' | sort -u | sed 's/^/  /'
echo "skip reasons (count):"
cat "$logdir"/*.log 2>/dev/null | grep -E '^SKIP' | sort -u | sed -E 's/^SKIP [^:]*: //' |
    sort | uniq -c | sort -rn | head -10
exit $failed
