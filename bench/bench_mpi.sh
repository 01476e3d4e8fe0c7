#!/usr/bin/env bash
# bench_mpi.sh - data-parallel scaling on this machine: 1 CPU rank against 2
# (one BLAS thread each, the same global batch), with the gradient all-reduce
# bucketed (overlapping backward) or in one piece; prints throughput, scaling
# efficiency and the all-reduce share of the step. Needs Open MPI's mpirun.
#   bash bench/bench_mpi.sh [HIDDEN...]      (default: 256 1024)
set -u
cd "$(dirname "$0")/.."
DLBENCH=${DLBENCH:-${BUILD:-build}/dlbench}
BATCH=${BATCH:-256}
N=${N:-16384}
REPS=${REPS:-3} # best of REPS runs: the machine may be shared
HIDDENS=${*:-256 1024}
if ! command -v mpirun >/dev/null 2>&1 || ! mpirun --version 2>/dev/null | grep -q "Open MPI"; then
    echo "bench_mpi: Open MPI's mpirun not found (apt-get install openmpi-bin libopenmpi-dev): skipped"
    exit 0
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
CORES=$(nproc --all)
LOAD=$(cut -d' ' -f1 /proc/loadavg)
export DLBENCH_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPI=(mpirun -np 2 --oversubscribe --mca btl self,vader --mca mpi_yield_when_idle 1 --bind-to core)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)

# stats RUN_OUT: "samples/s allreduce_ms share" averaged over the step records
# after the first (warm-up)
stats() {
    local m
    m=$(ls "$1"/*/metrics.jsonl 2>/dev/null | head -1)
    [ -n "$m" ] || { echo "- - -"; return; }
    grep '"kind":"step"' "$m" | tail -n +2 | awk '
        { sps = ar = sh = 0
          if (match($0, /"samples_per_s":[0-9.e+-]+/)) sps = substr($0, RSTART + 16, RLENGTH - 16)
          if (match($0, /"allreduce_s":[0-9.e+-]+/)) ar = substr($0, RSTART + 14, RLENGTH - 14)
          if (match($0, /"allreduce_share":[0-9.e+-]+/)) sh = substr($0, RSTART + 18, RLENGTH - 18)
          s += sps; a += ar; h += sh; n++ }
        END { if (n) printf "%.0f %.3f %.1f\n", s / n, 1000 * a / n, 100 * h / n; else print "- - -" }'
}

# best CMD...: runs a configuration REPS times (output folder $DIR.N), prints
# the stats of the fastest run
best() {
    local r line bestline="- - -"
    for r in $(seq "$REPS"); do
        "$@" --out "$DIR.$r" >/dev/null 2>&1
        line=$(stats "$DIR.$r")
        awk -v a="${line%% *}" -v b="${bestline%% *}" 'BEGIN { exit !(a + 0 > b + 0) }' &&
            bestline=$line
    done
    echo "$bestline"
}

args() { echo "tests/mpi/dp.lua hidden=$1 batch=$BATCH n=$N epochs=1 lr=0.01 --quiet --force"; }

echo "data-parallel scaling, CPU, 1 BLAS thread per rank, global batch $BATCH, MLP 2-H-H-2 on $N spirals"
echo "($CORES cores, load average $LOAD before the runs; $(mpirun --version | head -1))"
printf "%-8s %-10s %-6s %-16s %12s %11s %16s %10s\n" hidden params ranks all-reduce samples/s efficiency "all-reduce ms" "share"
for h in $HIDDENS; do
    params=$(( (2 * h + h) + (h * h + h) + (h * 2 + 2) ))
    DIR="$OUT/one_$h"
    # shellcheck disable=SC2046
    read -r s1 _ _ <<<"$(best "$DLBENCH" run $(args "$h"))"
    printf "%-8s %-10s %-6s %-16s %12s %11s %16s %10s\n" "$h" "$params" 1 "-" "$s1" "1.00" "-" "-"
    for mode in "bucketed 4 MiB:4096" "bucketed 256 KiB:256" "one piece:0"; do
        name=${mode%%:*} kb=${mode##*:}
        DIR="$OUT/two_${h}_$kb"
        export DLBENCH_COMM_BUCKET_KB=$kb
        # shellcheck disable=SC2046
        read -r s2 ar sh <<<"$(best "${MPI[@]}" -x DLBENCH_COMM_BUCKET_KB "$DLBENCH" run $(args "$h"))"
        eff=$(awk -v a="$s2" -v b="$s1" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / (2 * b); else print "-" }')
        printf "%-8s %-10s %-6s %-16s %12s %11s %16s %9s%%\n" "$h" "$params" 2 "$name" "$s2" "$eff" "$ar" "$sh"
    done
done
echo "best of $REPS runs each; efficiency = samples/s of 2 ranks / (2 x samples/s of 1 rank); all-reduce ms: per step,"
echo "mean over ranks, waiting included (the part overlapped with backward is not counted)"
