#!/usr/bin/env bash
# bench/run.sh - make bench: dlbench against PyTorch side by side, then one summary table
#
# For each thread count (1, 2) and each model, dlbench (bench_train, one
# process per thread count since the CPU backend fixes it at first use) and
# PyTorch (bench_torch.py, one process per thread set-up: its OpenMP and
# OpenBLAS pools are sized at import) run back to back, dlbench before and
# after PyTorch, so both see the same machine load; each side's best counts. The MLP-SGD process also times OpenBLAS sgemm on the MLP's
# shapes (the ceiling). Then bf16 against f32 accuracy after 3 epochs
# (skipped with BENCH_QUICK=1), the data-pipeline benchmarks when present,
# and the summary. Raw result lines are kept in $BUILD/bench/results.txt.
#
# Environment: BUILD (build), BENCH_QUICK=1 (no accuracy run), BENCH_WB=0 (no
# workbench overhead), BENCH_TUNE=0 (no tuner comparison), BENCH_RUNS=0 (no runs-at-scale bench), BENCH_IMAGES=0 (no image
# import comparison; BENCH_IMAGES_N files per set, default 1500),
# BENCH_MODELS ("mlp-sgd mlp-adam tiny-mlp cnn mlp-bf16 resnet char-gpt"; resnet is
# scripts/resnet_fmnist.lua's network, char-gpt scripts/char_gpt.lua's on synthetic
# tokens at batch 32, ~1.5 minutes each at 1 and 2 threads), BENCH_THREADS ("1 2"),
# BENCH_REPS (3 timed windows per measurement; the best counts), BENCH_EMULATED=0 (no
# emulated-bf16 against f32 comparison on a CPU without bf16 dot products),
# BENCH_OFFLIST=0 (no models outside the zoo, bench/offlist/run.sh), BENCH_ISA=avx2 (an AVX2 CPU
# played on an AVX-512 one, both peers: oneDNN capped at AVX2, OpenBLAS's Haswell kernels, the own
# kernels' AVX2 versions, ATen's AVX2 ones; no bf16 models).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PY=/usr/bin/python3
TRAIN=$BUILD/bench/bench_train
if [ "${BENCH_ISA:-}" = avx2 ]; then
    export ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 DLBENCH_CPU_AVX512=0 \
        OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2
elif [ -n "${BENCH_ISA:-}" ]; then
    echo "bench: BENCH_ISA=$BENCH_ISA: expected avx2 (or unset: the CPU as it is)" >&2
    exit 2
fi
# bf16 models only where the CPU has bf16 dot products (AVX-512 BF16 or AMX)
if [ "${BENCH_ISA:-}" = avx2 ]; then
    BF16_MODELS=""
elif grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
    BF16_MODELS="cnn-user-bf16 resnet-bf16 mobilenet-bf16"
else
    BF16_MODELS=""
fi
MODELS=${BENCH_MODELS:-mlp-sgd mlp-adam tiny-mlp cnn cnn-user mlp-bf16 resnet char-gpt mobilenet $BF16_MODELS}
THREADS=${BENCH_THREADS:-1 2}
REPS=${BENCH_REPS:-3}
QUICK=${BENCH_QUICK:-0}
EPOCHS=3
results=$BUILD/bench/results.txt
mkdir -p "$BUILD/bench"
: >"$results"
t_start=$(date +%s)

if [ ! -x "$TRAIN" ]; then
    echo "bench: $TRAIN not built (run make bench)" >&2
    exit 1
fi

# PyTorch is optional: without it the peer columns say so.
torch_why=""
if [ ! -x "$PY" ]; then
    torch_why="$PY not found"
elif ! torch_err=$("$PY" -c 'import torch' 2>&1); then
    torch_why="python3-torch not importable ($(echo "$torch_err" | tail -n 1))"
fi
if [ -n "$torch_why" ]; then
    echo "bench: PyTorch peer skipped: $torch_why"
fi

# PyTorch thread set-ups per thread count: its OpenMP pool (elementwise ops,
# oneDNN convolutions) and OpenBLAS's (Linear) fight each other on 2 cores.
torch_setups() {
    if [ "$1" = 1 ]; then
        echo "--omp 1 --blas 1"
    else
        echo "--omp $1 --blas $1"
        echo "--omp $1 --blas 1"
        echo "--omp 1 --blas $1"
        echo "--omp $1 --blas $1 --passive"
    fi
}

# Runs a command, appends its result lines to $results and shows them.
record() {
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    echo "$out" | grep -v -e '^#' -e '^cpu: ' | sed 's/^/  /' # the cores line stays: it changes
    echo "$out" | grep -E '^(dlbench|torch)' >>"$results"
    if [ $rc -ne 0 ]; then
        echo "  (exited with status $rc: $*)"
    fi
    return 0
}

echo "cpu:$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); flags: $(grep -m1 '^flags' /proc/cpuinfo |
    tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512bw|avx512_bf16|avx512_fp16|amx_tile|amx_bf16' | tr '\n' ' ')${BENCH_ISA:+; played as an AVX2 CPU (BENCH_ISA=avx2)}"
echo "== throughput: batch 128, Fashion-MNIST (char-gpt: batch 32, synthetic tokens), best of $REPS windows; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for t in $THREADS; do
    for m in $MODELS; do
        echo "-- $m, $t thread(s)"
        extra=""
        [ "$m" = mlp-sgd ] && extra="--ceiling"
        record env DLBENCH_THREADS="$t" OPENBLAS_NUM_THREADS="$t" "$TRAIN" --threads "$t" \
            --model "$m" --reps "$REPS" $extra
        if [ -z "$torch_why" ]; then
            while read -r setup; do
                # shellcheck disable=SC2086
                record "$PY" bench/bench_torch.py $setup --threads "$t" --model "$m" --reps "$REPS"
            done < <(torch_setups "$t")
            # dlbench again after PyTorch's set-ups, so that both peers
            # sample the machine's changing load over the same span
            record env DLBENCH_THREADS="$t" OPENBLAS_NUM_THREADS="$t" "$TRAIN" --threads "$t" \
                --model "$m" --reps "$REPS"
        fi
    done
done

# bf16 where the CPU has no bf16 dot products is emulated (f32 kernels on
# operands rounded to bf16): against f32 on the same model, the two
# alternating twice, the best window of each; target >= 0.9x
if [ -z "$BF16_MODELS" ] && [ "${BENCH_EMULATED:-1}" != 0 ]; then
    echo "== bf16 emulated (no AVX-512 BF16 or AMX here) against f32, alternating (target >= 0.9x; BENCH_EMULATED=0 skips)"
    best_rate() {
        env DLBENCH_THREADS="$1" OPENBLAS_NUM_THREADS="$1" "$TRAIN" --threads "$1" --model "$2" \
            --reps "$REPS" 2>/dev/null | awk '/^dlbench / { for (i = 1; i <= NF; i++)
                if ($i ~ /^samples_per_s=/) print substr($i, 15) }'
    }
    for t in $THREADS; do
        for pair in "mlp-sgd mlp-bf16" "cnn-user cnn-user-bf16" "resnet resnet-bf16" "mobilenet mobilenet-bf16"; do
            read -r f32m bf16m <<<"$pair"
            f=0 b=0
            for _ in 1 2; do
                x=$(best_rate "$t" "$f32m"); y=$(best_rate "$t" "$bf16m")
                f=$(awk -v a="$f" -v b="${x:-0}" 'BEGIN { print (b > a ? b : a) }')
                b=$(awk -v a="$b" -v c="${y:-0}" 'BEGIN { print (c > a ? c : a) }')
            done
            line=$(awk -v m="$bf16m" -v t="$t" -v f="$f" -v b="$b" 'BEGIN {
                printf "dlbench-emulated model=%s threads=%s f32_samples_per_s=%.0f bf16_samples_per_s=%.0f ratio=%.2f\n",
                    m, t, f, b, (f > 0 ? b / f : 0) }')
            echo "$line" >>"$results"
            echo "  $line"
        done
    done
fi

# memory-bound layers against memcpy, convolutions against sgemm (same process each)
for t in $THREADS; do
    if [ -x "$BUILD/bench/bench_membound" ]; then
        echo "== memory-bound layers against memcpy, $t thread(s) (bench_membound; target >= 50%)"
        "$BUILD/bench/bench_membound" "$t" | tee -a "$results" | grep -v '^RESULT' | sed 's/^/  /'
    fi
    if [ -x "$BUILD/bench/bench_conv" ]; then
        for algo in default own; do
            echo "== convolutions against sgemm, $t thread(s), $algo kernels (bench_conv; target >= 60% at >= 32 channels)"
            env $([ $algo = own ] && echo DLBENCH_CONV=own) "$BUILD/bench/bench_conv" "$t" |
                tee -a "$results" | grep -v '^RESULT' | sed 's/^/  /'
        done
        # what a model runs: activations in the layout plan's channel blocks
        # wherever the backend allows the shape, NCHW beside it
        echo "== convolutions in channel blocks (as the layout plan keeps a model's activations) against NCHW, $t thread(s) (bench_conv, BENCH_CONV_VS=blocked)"
        env BENCH_CONV_VS=blocked "$BUILD/bench/bench_conv" "$t" |
            tee -a "$results" | grep -v '^RESULT' | sed 's/^/  /'
        if grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then
            echo "== bf16 convolutions, $t thread(s), operands in memory: the default choice (own vdpbf16ps kernels where they fit) against oneDNN's (bench_conv, BENCH_CONV_VS=dnnl BENCH_CONV_COLD=1)"
            env BENCH_CONV_VS=dnnl BENCH_CONV_COLD=1 "$BUILD/bench/bench_conv" "$t" bf16 |
                tee -a "$results" | grep -v '^RESULT' | sed 's/^/  /'
        fi
    fi
done

# models outside the zoo, nothing tuned for them (BENCH_OFFLIST=0 skips; ~1 minute)
if [ "${BENCH_OFFLIST:-1}" != 0 ] && [ -x "$PY" ]; then
    echo "== models outside the zoo against PyTorch (bench/offlist/run.sh; target >= 1.5x)"
    BUILD="$BUILD" OFFLIST_THREADS="$THREADS" bash bench/offlist/run.sh | tee -a "$results" |
        sed 's/^/  /'
fi

if [ "$QUICK" = 1 ]; then
    echo "== bf16 against f32 accuracy: skipped (BENCH_QUICK=1)"
else
    acc_t=$(echo "$THREADS" | tr ' ' '\n' | sort -n | tail -n 1)
    echo "== bf16 against f32 accuracy: MLP, SGD-momentum, cosine LR, $EPOCHS epochs, $acc_t thread(s)"
    record env DLBENCH_THREADS="$acc_t" "$TRAIN" --threads "$acc_t" --accuracy "$EPOCHS"
fi

if [ -f bench/bench_data.c ] && [ -x "$BUILD/bench/bench_data" ]; then
    echo "== data pipeline (bench_data)"
    "$BUILD/bench/bench_data" || echo "  (bench_data exited with status $?)"
fi
if [ -f bench/bench_data.py ]; then
    echo "== data pipeline (bench_data.py)"
    if [ -x "$PY" ]; then
        "$PY" bench/bench_data.py || echo "  (bench_data.py exited with status $?)"
    else
        echo "  skipped: $PY not found"
    fi
fi
# image-folder import against Pillow decoding the same files (BENCH_IMAGES=0 skips; ~1 minute)
if [ "${BENCH_IMAGES:-1}" != 0 ] && [ -f bench/bench_images.py ] && [ -x "$BUILD/dlbench" ]; then
    echo "== image-folder import (bench/bench_images.py against Pillow)"
    if [ -x "$PY" ] && "$PY" -c 'import PIL.Image, numpy' 2>/dev/null; then
        "$PY" bench/bench_images.py "$BUILD/dlbench" "${BENCH_IMAGES_N:-1500}" "$REPS" | tee -a "$results" |
            sed 's/^/  /' || echo "  (bench_images.py failed)"
    else
        echo "  skipped: $PY with Pillow and numpy (python3-pil, python3-numpy) not found"
    fi
fi

echo
# The workbench's cost on throughput: the same run headless and under tmux, side by side.
if [ "${BENCH_WB:-1}" != 0 ] && [ -x "$BUILD/dlbench" ]; then
    echo "== workbench overhead (bench/wb_overhead.sh; BENCH_WB=0 skips)"
    DLBENCH="$BUILD/dlbench" BENCH_REPS="$REPS" bench/wb_overhead.sh | tee -a "$results" |
        grep -v '^workbench overhead' || true
    grep '^workbench overhead' "$results" | tail -1 | sed 's/^/  /'
fi

# the advisor's acceptance: wasteful experiments, before and after its commands
if [ "${BENCH_ADVISE:-1}" != 0 ] && [ -x "$BUILD/dlbench" ]; then
    echo "== advisor acceptance (bench/advise_accept.sh; BENCH_ADVISE=0 skips; ~3 minutes)"
    BUILD=$BUILD bash bench/advise_accept.sh | tee -a "$results" || echo "  (advise_accept.sh exited with status $?)"
fi

# the profiler's cost (on against off, same process)
if [ -x "$BUILD/bench/bench_profiler" ]; then
    echo "== profiler overhead (bench_profiler)"
    "$BUILD/bench/bench_profiler" | tee -a "$results" || echo "  (bench_profiler exited with status $?)"
fi
# data-parallel scaling over MPI (skips itself without mpirun)
if [ -f bench/bench_mpi.sh ]; then
    echo "== data parallel, 2 ranks against 1 (bench/bench_mpi.sh)"
    BUILD=$BUILD bash bench/bench_mpi.sh || echo "  (bench_mpi.sh exited with status $?)"
fi
# the tuner against Optuna (BENCH_TUNE=0 skips; ~1 minute)
if [ "${BENCH_TUNE:-1}" != 0 ] && [ -x "$BUILD/bench/bench_tune" ]; then
    echo "== tuner (bench_tune against Optuna)"
    "$BUILD/bench/bench_tune" | tee -a "$results" | grep -v '^tune' || echo "  (bench_tune exited with status $?)"
fi
# the runs table and comparison at 1,000 run folders of 500 steps against python3's json
# (BENCH_RUNS=0 skips; the folders are generated once, ~10-30 s, under $BUILD/bench)
if [ "${BENCH_RUNS:-1}" != 0 ] && [ -x "$BUILD/bench/bench_runs" ]; then
    echo "== runs at scale (bench_runs: 1000 run folders x 500 steps)"
    "$BUILD/bench/bench_runs" --dlbench "$BUILD/dlbench" | tee -a "$results" | grep -v '^runs-bench what' ||
        echo "  (bench_runs exited with status $?)"
fi

echo "== summary ($(($(date +%s) - t_start)) s; raw lines in $results)"
awk -v torch_why="$torch_why" -v bf16_native="$([ -n "$BF16_MODELS" ] && echo 1 || echo 0)" '
function field(line, key,    n, i, kv, parts) {
    n = split(line, parts, " ")
    for (i = 1; i <= n; i++)
        if (index(parts[i], key "=") == 1)
            return substr(parts[i], length(key) + 2)
    return ""
}
{
    t = field($0, "threads")
    if ($1 == "dlbench") {
        s = field($0, "samples_per_s") + 0
        if (s > dl[$2, t]) { dl[$2, t] = s; gf[$2, t] = field($0, "gflops") + 0; dtok[$2, t] = field($0, "tokens_per_s") }
        if (!($2 in seen)) { order[++nm] = $2; seen[$2] = 1 }
        if (!(t in tseen)) { tord[++nt] = t; tseen[t] = 1 }
    } else if ($1 == "torch") {
        s = field($0, "samples_per_s") + 0
        setup = field($0, "setup")
        all[$2, t, setup] = s
        if (!(setup in sseen)) { sord[++ns] = setup; sseen[setup] = 1 }
        if (s > pt[$2, t]) { pt[$2, t] = s; ps[$2, t] = setup; ptok[$2, t] = field($0, "tokens_per_s") }
    } else if ($1 == "dlbench-ceiling") {
        # the best f32 GEMM at the MLP shapes in this process: OpenBLAS
        # threaded sgemm or the backend own products (oneDNN on AVX-512)
        ceil[t] = field($0, "sgemm_gflops") + 0
        eng = field($0, "engine_f32_gflops") + 0
        if (eng > ceil[t]) ceil[t] = eng
        bceil[t] = field($0, "bf16_gemm_gflops") + 0
        # the other models: one 512^3 product, f32 (its better path) or bf16
        sqf[t] = field($0, "square_f32_gflops") + 0
        sqb[t] = field($0, "square_bf16_gflops") + 0
    } else if ($1 == "dlbench-emulated") {
        emu[++ne] = sprintf("%s %st %s/%s = %sx%s", field($0, "model"), t, field($0, "bf16_samples_per_s"),
            field($0, "f32_samples_per_s"), field($0, "ratio"), (field($0, "ratio") + 0 >= 0.9 ? "" : " (NO)"))
    } else if ($1 == "dlbench-accuracy") {
        p = field($0, "precision")
        if (p != "bf16") p = "f32"
        acc[p] = field($0, "test_acc") + 0
        accrate[p] = field($0, "samples_per_s") + 0
        acct = t
    }
}
END {
    target["mlp-sgd", 1] = 1.5; target["mlp-sgd", 2] = 1.5
    target["mlp-adam", 1] = 1.5; target["mlp-adam", 2] = 1.5
    target["tiny-mlp", 1] = 1.5; target["tiny-mlp", 2] = 1.5
    target["cnn", 1] = 2.0; target["cnn", 2] = 2.0
    # every other zoo model: 1.5x PyTorch (issue "Fast on every model")
    split("cnn-user resnet char-gpt mobilenet cnn-user-bf16 resnet-bf16 mobilenet-bf16", zoo, " ")
    for (z in zoo) { target[zoo[z], 1] = 1.5; target[zoo[z], 2] = 1.5 }
    printf "%-13s %3s %11s %11s %-18s %6s %7s %4s %8s %8s %6s\n", "model", "thr", "dlbench/s",
        "pytorch/s", "pytorch setup", "ratio", "target", "met", "GFLOP/s", "sgemm", "%ceil"
    for (i = 1; i <= nm; i++) {
        m = order[i]
        for (j = 1; j <= nt; j++) {
            t = tord[j]
            if (!((m, t) in dl)) continue
            ps_ = ((m, t) in pt) ? sprintf("%11.0f", pt[m, t]) : sprintf("%11s", "skipped")
            setup = ((m, t) in pt) ? ps[m, t] : "-"
            ratio = ((m, t) in pt) && pt[m, t] > 0 ? dl[m, t] / pt[m, t] : -1
            tg = ((m, t) in target) ? sprintf(">=%.1fx", target[m, t]) : "-"
            met = (ratio > 0 && ((m, t) in target)) ? (ratio >= target[m, t] ? "yes" : "NO") : "-"
            gcol = "-"; ccol = "-"; pcol = "-"
            if (m ~ /^mlp-/ && (t in ceil)) {
                gcol = sprintf("%.1f", gf[m, t])
                ccol = sprintf("%.1f", m == "mlp-bf16" ? bceil[t] : ceil[t])
                pcol = sprintf("%.0f%%", 100 * gf[m, t] / (m == "mlp-bf16" ? bceil[t] : ceil[t]))
            } else if (gf[m, t] > 0 && (t in sqf) && sqf[t] > 0) {
                cl = m ~ /-bf16$/ ? sqb[t] : sqf[t]
                gcol = sprintf("%.1f", gf[m, t])
                ccol = sprintf("%.1f", cl)
                pcol = cl > 0 ? sprintf("%.0f%%", 100 * gf[m, t] / cl) : "-"
            }
            printf "%-13s %3s %11.0f %s %-18s %6s %7s %4s %8s %8s %6s\n", m, t, dl[m, t], ps_,
                setup, (ratio > 0 ? sprintf("%.2fx", ratio) : "-"), tg, met, gcol, ccol, pcol
        }
    }
    print "  (ratio = dlbench / PyTorch best set-up; %ceil = achieved GFLOP/s, 2.41 MFLOP/sample counted"
    print "   exactly, over the best f32 GEMM (OpenBLAS sgemm or the backend own) at the same 8 shapes and"
    print "   threads, same process; for mlp-bf16"
    print "   over the backend bf16 GEMM on those shapes; MLP target at 2 threads also >= 85% of sgemm;"
    print "   the other models: their FLOPs as the model counts them, over one 512^3 product at the same"
    print "   threads, f32 (the better of OpenBLAS and the backend) or bf16 for the -bf16 models)"
    for (j = 1; j <= nt; j++) {
        t = tord[j]
        if (("char-gpt", t) in dl && dtok["char-gpt", t] != "")
            printf "  char-gpt at %s thread(s): dlbench %s tokens/s, PyTorch %s tokens/s (64 per sample)\n", t,
                dtok["char-gpt", t], ((("char-gpt", t) in ptok) && ptok["char-gpt", t] != "") ? ptok["char-gpt", t] : "-"
    }
    if (ne > 0) {
        printf "\nbf16 emulated against f32 (samples/s; target >= 0.9x):\n"
        for (k = 1; k <= ne; k++) printf "  %s\n", emu[k]
    }
    if (torch_why != "") print "  PyTorch peer skipped: " torch_why
    if (ns > 1) {
        printf "\nPyTorch thread set-ups at 2 threads (samples/s):\n%-9s", "model"
        for (k = 1; k <= ns; k++) if (sord[k] != "omp1-blas1") printf " %18s", sord[k]
        printf "\n"
        for (i = 1; i <= nm; i++) {
            m = order[i]; printf "%-9s", m
            for (k = 1; k <= ns; k++) if (sord[k] != "omp1-blas1")
                printf " %18s", ((m, 2, sord[k]) in all) ? sprintf("%.0f", all[m, 2, sord[k]]) : "-"
            printf "\n"
        }
    }
    if (("1" in tseen) && ("2" in tseen)) {
        printf "\ntwo threads never slower than one (dlbench 2t / 1t):"
        for (i = 1; i <= nm; i++) {
            m = order[i]
            if ((m, 1) in dl && (m, 2) in dl && dl[m, 1] > 0)
                printf "  %s %.2fx%s", m, dl[m, 2] / dl[m, 1], (dl[m, 2] < dl[m, 1] ? " (SLOWER)" : "")
        }
        printf "\n"
    }
    printf "\nbf16 against f32 (dlbench MLP, SGD-momentum, cosine LR for the accuracy):\n"
    for (j = 1; j <= nt; j++) {
        t = tord[j]
        if (("mlp-bf16", t) in dl && ("mlp-sgd", t) in dl && dl["mlp-sgd", t] > 0) {
            # without bf16 dot products bf16 is emulated: the target is >= 0.9x
            r = dl["mlp-bf16", t] / dl["mlp-sgd", t]; want = bf16_native ? 1.5 : 0.9
            printf "  throughput %s thread(s): %.0f / %.0f = %.2fx (target >= %.1fx%s: %s)\n", t,
                dl["mlp-bf16", t], dl["mlp-sgd", t], r, want, (bf16_native ? "" : ", emulated here"),
                (r >= want ? "yes" : "NO")
        }
    }
    split("cnn-user resnet mobilenet", pair, " ")
    for (q in pair)
        for (j = 1; j <= nt; j++) {
            t = tord[j]; b = pair[q] "-bf16"
            if ((b, t) in dl && (pair[q], t) in dl && dl[pair[q], t] > 0)
                printf "  %s throughput %s thread(s): bf16 %.0f / f32 %.0f = %.2fx (target >= 1.5x: %s)\n",
                    pair[q], t, dl[b, t], dl[pair[q], t], dl[b, t] / dl[pair[q], t],
                    (dl[b, t] >= 1.5 * dl[pair[q], t] ? "yes" : "NO")
        }
    if (("f32" in acc) && ("bf16" in acc)) {
        d = 100 * (acc["bf16"] - acc["f32"])
        printf "  test accuracy after 3 epochs (%s threads): f32 %.2f%%, bf16 %.2f%%, difference %+.2f points (target within 0.5: %s)\n",
            acct, 100 * acc["f32"], 100 * acc["bf16"], d, (d >= -0.5 && d <= 0.5) ? "yes" : "NO"
        printf "  over those 3-epoch runs: f32 %.0f, bf16 %.0f samples/s (%.2fx)\n",
            accrate["f32"], accrate["bf16"], (accrate["f32"] > 0 ? accrate["bf16"] / accrate["f32"] : 0)
    } else {
        printf "  test accuracy: not measured (BENCH_QUICK=1 or the run failed)\n"
    }
}' "$results"
