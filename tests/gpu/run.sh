#!/usr/bin/env bash
# tests/gpu/run.sh - the one prepared script for a GPU machine, made for one 10-minute try: preflight, build, the CUDA checks in the order of their value, a summary table written as it goes
#
# Usage: bash tests/gpu/run.sh [--dry-run]
#        (BUILD=build JOBS=16 OUT=<folder for logs and the table> GPU_BUDGET=570)
#
# Steps, in order (the most telling first, so a run cut short still says
# the most):
#   preflight      in the first seconds: driver, nvidia-smi, nvcc, cuBLAS, cuDNN, NCCL,
#                  compute-sanitizer, the build's dependencies (lua5.4, hdf5, openblas,
#                  cjson, ncursesw headers), python3 with torch. A missing piece is a line
#                  saying so; a step that needs it is skipped with that reason.
#   build          make all plus the test and GPU benchmark binaries
#   cuda module    the module opens on the GPU (bench/gpu_train --probe). Built but not
#                  loading while a GPU is present is a FAIL, not a SKIP.
#   test_cuda      every CUDA op against the CPU backend (f32 products, no TF32)
#   test_switch    CPU -> CUDA -> CPU round trip and the 100M-parameter move (< 1 s)
#   gpu_gemm       the cuBLAS peak on random data
#   gpu_train, gpu_torch, comparison
#                  dlbench against PyTorch eager per model: samples/s ratio, target
#                  >= 1.2x on the batch-128 models; the large MLP as a share of the
#                  cuBLAS bf16 peak (tests/gpu/compare.awk)
#   cnn accuracy   scripts/fmnist_cnn.lua 1 epoch on the GPU in fp32 and bf16: passes when
#                  fp32 val_acc >= 0.85 and bf16 >= fp32 - 0.5 points (data/fashion-mnist.h5,
#                  prepared by scripts/prepare-data.sh when missing)
#   memcheck       compute-sanitizer --tool memcheck over test_cuda, when installed
#   test_cuda TF32 once more with TF32 products (DLBENCH_CUDA_TF32=1)
#   cpu suite      make test with CUDA_VISIBLE_DEVICES= (the CUDA cases skip there: the
#                  steps above ran them once each; "auto" devices stay on the CPU)
# Each step runs once, under its own timeout, cut to what is left of GPU_BUDGET
# seconds (default 570: a 10-minute try less a margin); a step with too little
# time left is skipped and says so. --dry-run runs nothing that takes long: the
# preflight, then every step's decision (a GPU step without a GPU is skipped
# with the reason), and the table; on a machine without a GPU it takes seconds.
#
# Every log and the table go under $OUT/gpu-run when OUT is set (else a
# temporary folder, named at the end), written as the steps finish:
# summary.txt is rewritten after each row, so a run killed at its limit still
# leaves what it did. The exit status is 1 when anything failed, 0 otherwise
# (skips included). A missed performance target shows as MISS: a measurement,
# not a failure.
#
# Environment: GPU_PYTHON (the interpreter whose torch has CUDA; default: the
# first python3 whose torch sees a GPU); GPU_BENCH_ARGS (extra arguments for
# gpu_train and gpu_torch, e.g. "--quick"; "--device cpu" runs both on the CPU
# to check the comparison on a machine without a GPU); GPU_ACC_DEVICE=cpu runs
# the accuracy step on the CPU; ACC_TIMEOUT (240 s per accuracy run).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
JOBS=${JOBS:-16}
GPU_BUDGET=${GPU_BUDGET:-570}
ACC_TIMEOUT=${ACC_TIMEOUT:-240}
GPU_BENCH_ARGS=${GPU_BENCH_ARGS:-}
GPU_ACC_DEVICE=${GPU_ACC_DEVICE:-cuda}
export BUILD
DRY=0
case "${1:-}" in
--dry-run) DRY=1 ;;
"") ;;
*)
    echo "usage: bash tests/gpu/run.sh [--dry-run]" >&2
    exit 2
    ;;
esac
if [ -n "${OUT:-}" ]; then
    LOG=$OUT/gpu-run
    mkdir -p "$LOG" || exit 1
else
    LOG=$(mktemp -d)
fi
t_start=$(date +%s)
exec > >(tee -a "$LOG/run.log") 2>&1

# --- the table -------------------------------------------------------------------------------
rows=()
failed=0
met=0
missed=0
# row STEP STATE DETAIL: one line of the table, which is rewritten at once
row() {
    rows+=("$(printf '%-30s %-7s %s' "$1" "$2" "$3")")
    [ "$2" = FAIL ] && failed=1
    [ "$2" = met ] && met=$((met + 1))
    [ "$2" = MISS ] && missed=$((missed + 1))
    write_table
    return 0
}
write_table() {
    {
        echo "tests/gpu/run.sh$([ $DRY = 1 ] && echo ' --dry-run'): $(($(date +%s) - t_start)) s so far"
        printf '%-30s %-7s %s\n' step state detail
        local r
        for r in "${rows[@]}"; do echo "$r"; done
    } >"$LOG/summary.txt.tmp" && mv "$LOG/summary.txt.tmp" "$LOG/summary.txt"
}
# counts of PASS/FAIL/SKIP lines in a log
counts() {
    echo "$(grep -c '^PASS' "$1") passed, $(grep -c '^FAIL' "$1") failed, $(grep -c '^SKIP' "$1") skipped"
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

# --- time -----------------------------------------------------------------------------------
left() { echo $((GPU_BUDGET - ($(date +%s) - t_start))); }
# budget WANT: the timeout a step gets (WANT, cut to what is left less a
# margin); 0 when fewer than 20 s would be left
budget() {
    local l
    l=$(($(left) - 10))
    [ "$l" -lt 20 ] && { echo 0; return; }
    [ "$1" -lt "$l" ] && echo "$1" || echo "$l"
}
# timed LOGNAME SECONDS CMD...: CMD with its output in $LOG/LOGNAME.log
# (shown too), killed after SECONDS; its status (124: timed out)
timed() {
    local name=$1 t=$2
    shift 2
    timeout --kill-after=10 "$t" "$@" >"$LOG/$name.log" 2>&1
    local rc=$?
    cat "$LOG/$name.log"
    [ $rc -eq 137 ] && rc=124
    return $rc
}

# --- preflight --------------------------------------------------------------------------------
have_lib() { # NAME-GLOB: the first file of that name on the library path or in the usual places
    local hit d
    hit=$(ldconfig -p 2>/dev/null | grep -m1 -oE "=> .*/$1\$" | cut -c4-)
    [ -n "$hit" ] && { echo "$hit"; return 0; }
    for d in ${CUDNN_HOME:+$CUDNN_HOME/lib $CUDNN_HOME/lib64} ${CUDA_HOME:+$CUDA_HOME/lib64} \
        /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu \
        /usr/local/lib/python3*/dist-packages/nvidia/*/lib /usr/lib/python3/dist-packages/nvidia/*/lib \
        "$HOME"/.local/lib/python3*/site-packages/nvidia/*/lib; do
        for hit in "$d"/$1; do
            [ -e "$hit" ] && { echo "$hit"; return 0; }
        done
    done
    return 1
}
pre() { # WHAT STATE DETAIL: a preflight line and row
    echo "preflight: $1: $2${3:+ ($3)}"
    row "preflight $1" "$2" "$3"
}
echo "== preflight ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), logs in $LOG)"
gpu_present=0
gpu_why="no NVIDIA GPU visible"
if [ -r /proc/driver/nvidia/version ]; then
    pre driver ok "$(head -1 /proc/driver/nvidia/version | grep -oE 'Kernel Module[^ ]* +[0-9.]+' | head -1)"
elif lib=$(have_lib libcuda.so.1); then
    pre driver ok "$lib (no /proc/driver/nvidia: a container?)"
else
    pre driver MISSING "no /proc/driver/nvidia/version, no libcuda.so.1"
    gpu_why="no NVIDIA driver"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    smi=$(timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4)
    if [ -n "$smi" ] && timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
        gpu_present=1
        pre nvidia-smi ok "$(echo "$smi" | head -1)"
    else
        pre nvidia-smi MISSING "nvidia-smi lists no GPU: ${smi:-no output}"
        gpu_why="nvidia-smi lists no GPU"
    fi
else
    pre nvidia-smi MISSING "not on PATH"
fi
NVCC=$(command -v nvcc 2>/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
if [ -n "$NVCC" ]; then
    pre nvcc ok "$NVCC, $("$NVCC" --version 2>/dev/null | grep -oE 'release [0-9.]+' | head -1)"
else
    pre nvcc MISSING "not on PATH nor /usr/local/cuda/bin: the CUDA module cannot be built"
fi
for l in cudart:libcudart.so.* cublas:libcublas.so.* cudnn:libcudnn.so.* nccl:libnccl.so.*; do
    if hit=$(have_lib "${l#*:}"); then pre "${l%%:*}" ok "$hit"; else pre "${l%%:*}" MISSING "no ${l#*:}"; fi
done
SANITIZER=$(command -v compute-sanitizer 2>/dev/null || { [ -x /usr/local/cuda/bin/compute-sanitizer ] && echo /usr/local/cuda/bin/compute-sanitizer; })
if [ -n "$SANITIZER" ]; then pre compute-sanitizer ok "$SANITIZER"; else pre compute-sanitizer MISSING "memcheck skipped"; fi
deps_missing=""
for p in lua5.4 hdf5 openblas libcjson ncursesw; do
    pkg-config --exists "$p" 2>/dev/null || deps_missing="$deps_missing $p"
done
command -v cc >/dev/null 2>&1 || deps_missing="$deps_missing cc"
if [ -z "$deps_missing" ]; then
    pre "build deps" ok "lua5.4 hdf5 openblas libcjson ncursesw (pkg-config), cc"
else
    pre "build deps" MISSING "pkg-config lacks:$deps_missing (bash scripts/deps.sh installs them)"
fi
py=${GPU_PYTHON:-}
py_why=""
if [ -z "$py" ]; then
    for c in python3 /usr/bin/python3; do
        command -v "$c" >/dev/null 2>&1 || continue
        v=$(timeout 30 "$c" -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>/dev/null)
        [ -z "$v" ] && continue
        [ -z "$py" ] && py=$c py_v=$v
        case $v in *True) py=$c py_v=$v; break ;; esac
    done
fi
if [ -n "$py" ]; then
    pre python3-torch ok "$py: torch ${py_v:-?} (version, CUDA available)"
else
    py_why="no python3 with torch (GPU_PYTHON=... names one; Debian: python3-torch)"
    pre python3-torch MISSING "$py_why"
fi

# --- build ------------------------------------------------------------------------------------
bins=("$BUILD/tests/test_cuda" "$BUILD/tests/test_switch" "$BUILD/bench/gpu_gemm" "$BUILD/bench/gpu_train")
echo "== build"
built=1
if [ $DRY = 1 ]; then
    for b in "$BUILD/dlbench" "${bins[@]}"; do [ -x "$b" ] || built=0; done
    if [ $built = 1 ]; then row build SKIP "dry run: using the binaries in $BUILD"; else
        row build SKIP "dry run: $BUILD not built (make all $BUILD/tests/test_cuda ...)"
    fi
elif [ -n "$deps_missing" ]; then
    built=0
    row build SKIP "cannot build: missing$deps_missing"
else
    t0=$(date +%s)
    t=$(budget 420)
    if [ "$t" = 0 ]; then
        built=0
        row build SKIP "time budget spent"
    elif timed build "$t" make -j"$JOBS" all "${bins[@]}" >/dev/null; then
        row build ok "$(($(date +%s) - t0)) s"
    else
        built=0
        tail -30 "$LOG/build.log"
        row build FAIL "make failed or timed out after $t s: $LOG/build.log"
    fi
fi

# --- the CUDA module: built, and opening on the GPU -------------------------------------------
echo "== cuda module"
cuda_ok=0
cuda_why=""
if [ ! -f "$BUILD/dlbench-cuda.so" ]; then
    if [ -z "$NVCC" ]; then
        cuda_why="module not built: no nvcc"
        row "cuda module" SKIP "$cuda_why"
    elif [ $DRY = 1 ] || [ $built = 0 ]; then
        cuda_why="module not built ($BUILD/dlbench-cuda.so missing)"
        row "cuda module" SKIP "$cuda_why"
    else
        cuda_why="module not built although nvcc is here: see $LOG/build.log"
        row "cuda module" FAIL "$cuda_why"
    fi
elif [ ! -x "$BUILD/bench/gpu_train" ]; then
    cuda_why="$BUILD/bench/gpu_train (the probe) not built"
    row "cuda module" SKIP "$cuda_why"
else
    probe=$(timeout 120 "$BUILD/bench/gpu_train" --probe 2>&1)
    rc=$?
    echo "$probe" >"$LOG/probe.log"
    echo "$probe"
    if [ $rc -eq 0 ]; then
        cuda_ok=1
        row "cuda module" ok "$(echo "$probe" | tail -1)"
    else
        cuda_why=$(echo "$probe" | tail -1 | sed 's/^SKIP gpu_train: //')
        if [ $gpu_present = 1 ]; then
            row "cuda module" FAIL "a GPU is here but the module does not open: $cuda_why"
        else
            row "cuda module" SKIP "no GPU ($gpu_why): $cuda_why"
        fi
    fi
fi
# gpu_step NAME: 0 when GPU steps may run; else a SKIP row for NAME with the reason
gpu_step() {
    if [ $cuda_ok = 1 ]; then
        [ $DRY = 0 ] && return 0
        row "$1" SKIP "dry run (the GPU is usable)"
        return 1
    fi
    if [ $gpu_present = 1 ]; then
        row "$1" SKIP "the CUDA module does not open (cuda module row)"
    else
        row "$1" SKIP "no GPU: $gpu_why${cuda_why:+; $cuda_why}"
    fi
    return 1
}

# test_step NAME LOGNAME SECONDS CMD...: a C test binary under a timeout, one row
test_step() {
    local name=$1 log=$2 want=$3 t rc st
    shift 3
    gpu_step "$name" || return 0
    t=$(budget "$want")
    [ "$t" = 0 ] && { row "$name" SKIP "time budget spent"; return 0; }
    echo "-- $*"
    timed "$log" "$t" "$@"
    rc=$?
    st=ok
    if [ $rc -eq 124 ]; then st=FAIL; elif [ $rc -ne 0 ] || grep -q '^FAIL' "$LOG/$log.log"; then st=FAIL; fi
    grep -q '^PASS' "$LOG/$log.log" || { [ $st = ok ] && st=SKIP; }
    row "$name" "$st" "$(counts "$LOG/$log.log")$([ $rc -eq 124 ] && echo ", timed out after $t s")"
}

echo "== test_cuda: every CUDA op against the CPU backend"
test_step "test_cuda" test_cuda 240 env DLBENCH_CUDA_TF32=0 "$BUILD/tests/test_cuda"
echo "== test_switch: CPU -> CUDA -> CPU, the 100M-parameter move"
test_step "test_switch (cuda, 100M)" test_switch 240 "$BUILD/tests/test_switch"
if [ -f "$LOG/test_switch.log" ] && grep -q '^RESULT switch_100M ' "$LOG/test_switch.log"; then
    s=$(grep -m1 '^RESULT switch_100M ' "$LOG/test_switch.log" | awk '{print $3}')
    row "  100M-parameter move" "$(awk -v s="$s" 'BEGIN { print (s < 1.0) ? "met" : "MISS" }')" "$s s the slower way (target < 1 s)"
fi

# --- benchmarks -------------------------------------------------------------------------------
# one summary row per RESULT line of a benchmark log
result_rows() {
    local _r bench a b rest tf ms
    while read -r _r bench a b rest; do
        if [ "$bench" = gpu_gemm ]; then # RESULT gpu_gemm dtype MxNxK TFLOP/s ms
            read -r tf ms _ <<<"$rest"
            row "  $bench $a $b" "" "$tf TFLOP/s ($ms ms)"
        elif [ "$a" = matmul ]; then
            # shellcheck disable=SC2086
            row "  $bench $a $b" "" "$(field tflops $rest) TFLOP/s ($(field shape $rest), $(field ms $rest) ms)"
        else
            # shellcheck disable=SC2086
            row "  $bench $a $b" "" "$(field samples_per_s $rest) samples/s, $(field tflops $rest) TFLOP/s, batch $(field batch $rest)"
        fi
    done < <(grep '^RESULT' "$1")
}
bench_on_cpu=0
case " $GPU_BENCH_ARGS " in *" --device cpu "*) bench_on_cpu=1 ;; esac
# bench_step NAME WANT CMD...: a benchmark under a timeout, its row and result rows
bench_step() {
    local name=$1 want=$2 t rc
    shift 2
    if [ $bench_on_cpu = 0 ] || [ $DRY = 1 ]; then gpu_step "$name" || return 0; fi
    t=$(budget "$want")
    [ "$t" = 0 ] && { row "$name" SKIP "time budget spent"; return 0; }
    echo "-- $*"
    timed "$name" "$t" "$@"
    rc=$?
    if grep -q '^SKIP' "$LOG/$name.log" && ! grep -q '^RESULT' "$LOG/$name.log"; then
        row "$name" SKIP "$(grep -m1 '^SKIP' "$LOG/$name.log")"
    elif [ $rc -eq 124 ]; then
        echo "FAIL $name: timed out after $t s" >>"$LOG/$name.log"
        row "$name" FAIL "timed out after $t s"
    elif [ $rc -ne 0 ]; then
        row "$name" FAIL "exit status $rc"
    else
        row "$name" ok "$(grep -c '^RESULT' "$LOG/$name.log") results"
    fi
    result_rows "$LOG/$name.log"
}
echo "== benchmarks"
# shellcheck disable=SC2206
bargs=($GPU_BENCH_ARGS)
gemm_args=()
[ $bench_on_cpu = 1 ] && gemm_args=(--device cpu)
bench_step gpu_gemm 120 "$BUILD/bench/gpu_gemm" "${gemm_args[@]}"
bench_step gpu_train 200 "$BUILD/bench/gpu_train" "${bargs[@]}"
if [ -z "$py" ]; then
    row gpu_torch SKIP "$py_why"
else
    bench_step gpu_torch 200 "$py" bench/gpu_torch.py "${bargs[@]}"
fi
if ls "$LOG"/gpu_train.log "$LOG"/gpu_torch.log >/dev/null 2>&1; then
    echo "== dlbench against PyTorch on this GPU"
    cat "$LOG"/gpu_*.log 2>/dev/null | grep '^RESULT' >"$LOG/results.txt"
    awk -f tests/gpu/compare.awk "$LOG/results.txt" >"$LOG/compare.out"
    grep -v '^ROW|' "$LOG/compare.out"
    while IFS='|' read -r _ name st detail; do
        row "$name" "$st" "$detail"
    done < <(grep '^ROW|' "$LOG/compare.out")
else
    row comparison SKIP "no gpu_train and gpu_torch results"
fi

# --- bf16 against fp32 accuracy of the Fashion-MNIST CNN ----------------------------------------
acc_name="cnn accuracy (bf16 vs fp32)"
acc_fail() {
    echo "FAIL cnn-accuracy: $1" | tee -a "$LOG/acc.log"
    row "$acc_name" FAIL "$1"
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
    local dev=$GPU_ACC_DEVICE p f x rc t line acc=()
    if [ "$dev" != cpu ] || [ $DRY = 1 ]; then gpu_step "$acc_name" || return 0; fi
    [ -x "$BUILD/dlbench" ] || { acc_fail "$BUILD/dlbench not built"; return; }
    if [ ! -f data/fashion-mnist.h5 ]; then
        t=$(budget 120)
        [ "$t" = 0 ] && { row "$acc_name" SKIP "time budget spent"; return; }
        echo "-- data/fashion-mnist.h5 missing: bash scripts/prepare-data.sh"
        timed prepare "$t" bash scripts/prepare-data.sh
    fi
    if [ ! -f data/fashion-mnist.h5 ]; then
        row "$acc_name" SKIP "data/fashion-mnist.h5 could not be prepared ($(grep -v '^$' "$LOG/prepare.log" 2>/dev/null | tail -1 | cut -c1-120)); FMNIST_DIR=<IDX files>"
        return
    fi
    for p in fp32 bf16; do
        t=$(budget "$ACC_TIMEOUT")
        [ "$t" = 0 ] && { row "$acc_name" SKIP "time budget spent before the $p run"; return; }
        echo "-- $p: $BUILD/dlbench run scripts/fmnist_cnn.lua epochs=1 precision=$p --device $dev --seed 1"
        timed "acc-$p" "$t" "$BUILD/dlbench" run scripts/fmnist_cnn.lua epochs=1 precision="$p" \
            --device "$dev" --seed 1 --out "$LOG/acc-$p" --force --quiet >/dev/null
        rc=$?
        tail -8 "$LOG/acc-$p.log"
        f=""
        for x in "$LOG/acc-$p"/*/summary.json; do [ -f "$x" ] && f=$x && break; done
        if [ $rc -eq 124 ]; then
            acc_fail "$p run timed out after $t s"
            return
        elif [ $rc -ne 0 ] || [ -z "$f" ]; then
            acc_fail "$p run exited with status $rc: $(grep -v '^$' "$LOG/acc-$p.log" | tail -1 | cut -c1-160)"
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
    if [ "${line%%|*}" = ok ]; then row "$acc_name" ok "${line#*|}"; else acc_fail "${line#*|}"; fi
}
echo "== bf16 against fp32 accuracy: scripts/fmnist_cnn.lua, 1 epoch, --device $GPU_ACC_DEVICE"
acc_check

# --- memcheck, TF32, the CPU suite -----------------------------------------------------------------
echo "== compute-sanitizer --tool memcheck over test_cuda"
if [ -z "$SANITIZER" ]; then
    row memcheck SKIP "compute-sanitizer not installed"
elif gpu_step memcheck; then
    t=$(budget 300)
    if [ "$t" = 0 ]; then
        row memcheck SKIP "time budget spent"
    else
        # the variable set here, not through env(1): the sanitizer watches the
        # process it starts, test_cuda itself
        DLBENCH_CUDA_TF32=0 timed memcheck "$t" "$SANITIZER" --tool memcheck --error-exitcode 99 \
            "$BUILD/tests/test_cuda" | tail -20
        rc=${PIPESTATUS[0]}
        errs=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$LOG/memcheck.log" | tail -1)
        if [ "$rc" -eq 124 ]; then
            # a slow run is not a memory error: what ran before the limit was clean or not
            if grep -q '========= Invalid\|========= Program hit' "$LOG/memcheck.log"; then
                row memcheck FAIL "errors before the $t s limit: see $LOG/memcheck.log"
            else
                row memcheck SKIP "timed out after $t s (memcheck slows kernels); no error reported before"
            fi
        elif [ "$rc" -eq 99 ] || grep -q '^FAIL' "$LOG/memcheck.log"; then
            row memcheck FAIL "${errs:-errors}: see $LOG/memcheck.log"
        else
            row memcheck ok "${errs:-no error summary}; $(counts "$LOG/memcheck.log")"
        fi
    fi
fi
echo "== test_cuda with TF32 products (DLBENCH_CUDA_TF32=1)"
test_step "test_cuda (TF32)" test_cuda_tf32 240 env DLBENCH_CUDA_TF32=1 "$BUILD/tests/test_cuda"
echo "== the CPU suite (make test, CUDA_VISIBLE_DEVICES=)"
if [ $DRY = 1 ]; then
    row "cpu suite" SKIP "dry run (make test takes minutes)"
elif [ $built = 0 ]; then
    row "cpu suite" SKIP "not built"
else
    t=$(budget 900)
    if [ "$t" = 0 ]; then
        row "cpu suite" SKIP "time budget spent (GPU_BUDGET=$GPU_BUDGET s; CI runs it)"
    else
        t0=$(date +%s)
        CUDA_VISIBLE_DEVICES='' timed cpu_suite "$t" make -j"$JOBS" test | tail -30
        rc=${PIPESTATUS[0]}
        total=$(grep -E '^[0-9]+ passed, ' "$LOG/cpu_suite.log" | tail -1)
        if [ "$rc" -eq 124 ] && [ "$t" -lt 900 ]; then
            # stopped by the budget, not by a hang: what it got through is in the log
            row "cpu suite" SKIP "stopped at the time budget after $t s ($(counts "$LOG/cpu_suite.log") so far)"
        else
            st=ok
            [ "$rc" -ne 0 ] && st=FAIL
            row "cpu suite" "$st" "${total:-no summary line}$([ "$rc" -eq 124 ] && echo ", timed out after $t s") ($(($(date +%s) - t0)) s)"
        fi
    fi
fi

# --- summary ----------------------------------------------------------------------------------------
echo
echo "== summary ($(($(date +%s) - t_start)) s; logs and summary.txt in $LOG)"
cat "$LOG/summary.txt"
echo
echo "performance targets: $met met, $missed missed (MISS rows; not failures)"
echo "failures:"
cat "$LOG"/*.log 2>/dev/null | grep -E '^FAIL' | sort -u | sed 's/^/  /'
exit $failed
