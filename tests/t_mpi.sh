#!/usr/bin/env bash
# t_mpi.sh - data-parallel training under mpirun (2 ranks over loopback):
# 2 ranks x 64 rows give the parameters of 1 rank x 128 (bucketed and
# one-shot all-reduce), rank 1 writes nothing, a 2-rank resume equals the
# uninterrupted run, a killed rank and a hung rank fail the job with a clear
# message instead of hanging it. SKIPs without mpirun (Open MPI).
. "$(dirname "$0")/lib.sh"
test_init
JOB=
cleanup() {
    [ -n "$JOB" ] && kill "$JOB" 2>/dev/null
}

TOL=1e-5 # max |difference| of any parameter after 48 steps (values ~0.1)
SCRIPT=tests/mpi/dp.lua

if ! command -v mpirun >/dev/null 2>&1; then
    skip t_mpi "mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"
    exit 0
fi
if ! mpirun --version 2>/dev/null | grep -q "Open MPI"; then
    skip t_mpi "mpirun is not Open MPI's (dlbench loads libmpi.so.40)"
    exit 0
fi
require_subcommand t_mpi run
if ! command -v h5dump >/dev/null 2>&1; then
    skip t_mpi "h5dump (hdf5-tools) is needed to compare parameters"
    exit 0
fi

# one thread per rank; shared memory without ptrace-based single copy (containers)
export DLBENCH_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# under AddressSanitizer (make asan): Open MPI's own allocations at exit are not ours
printf 'leak:%s\n' libmpi.so libopen-pal.so libopen-rte.so libpmix.so libhwloc.so libevent \
    mca_ >"$OUT/lsan.supp"
export LSAN_OPTIONS="suppressions=$OUT/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# (its plugins stay loaded and stacks are unwound fully, so the suppressions match)
export OMPI_MCA_mca_base_component_disable_dlclose=1
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
MPI=(mpirun -np 2 --oversubscribe --mca btl self,vader --bind-to none)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)

# run NAME EXPECTED_STATUS cmd... : output in $OUT/NAME.log
run() {
    local name=$1 want=$2
    shift 2
    timeout 60 "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name" "exit status $rc, expected $want; output:"
        tr '\r' '\n' <"$OUT/$name.log" | sed 's/^/    /' | tail -12
        return 1
    fi
    return 0
}
run_dir_of() { sed -n 's/^run folder: //p' "$OUT/$1.log" | tail -1; }

# params CHECKPOINT: one parameter per line, full precision
params() {
    h5dump -d /arena/params -y -w 0 -m '%.9g' "$1" | sed -n '/DATA {/,/}/p' | tr ',' '\n' |
        grep -E '^[[:space:]]*-?[0-9]' | tr -d ' '
}
# maxdiff A B: largest |a - b| over the parameters of two checkpoints
maxdiff() {
    paste <(params "$1") <(params "$2") |
        awk 'NF != 2 { bad = 1 } { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ }
             END { if (bad || n == 0) print "mismatch"; else printf "%.3g\n", m }'
}
within() { awk -v d="$1" -v t="$TOL" 'BEGIN { exit !(d != "mismatch" && d + 0 <= t + 0) }'; }

# --- 1 rank x 128 against 2 ranks x 64 -----------------------------------------
run one 0 "$DLBENCH" run $SCRIPT batch=128 --out "$OUT/one" || exit 0
ONE=$(run_dir_of one)/checkpoint.h5
for mode in bucketed:4 oneshot:0; do
    name=${mode%%:*} kb=${mode##*:}
    if run "two_$name" 0 env DLBENCH_COMM_BUCKET_KB=$kb "${MPI[@]}" -x DLBENCH_COMM_BUCKET_KB \
        "$DLBENCH" run $SCRIPT batch=128 --out "$OUT/two_$name"; then
        d=$(maxdiff "$ONE" "$(run_dir_of "two_$name")/checkpoint.h5")
        if within "$d"; then
            pass "dp_equivalence_$name (max |diff| $d <= $TOL after 48 steps)"
        else
            fail "dp_equivalence_$name" "max |diff| $d > $TOL"
        fi
    fi
done

# rank 0 alone writes the run folder; metrics carry the job's view
d=$(run_dir_of two_bucketed)
if [ -n "$d" ]; then
    folders=$(ls "$OUT/two_bucketed" | wc -l)
    if [ "$folders" -ne 1 ]; then
        fail dp_run_folder "$folders run folders for one job"
    elif ! grep -q '"allreduce_s"' "$d/metrics.jsonl" ||
        ! grep -q '"rank1_samples_per_s"' "$d/metrics.jsonl" ||
        ! grep -q '"ranks":[[:space:]]*2' "$d/config.json"; then
        fail dp_run_folder "metrics or config lack allreduce_s / rank1_samples_per_s / ranks"
    elif [ "$(grep -c '^finished' "$OUT/two_bucketed.log")" -ne 1 ]; then
        fail dp_run_folder "expected one 'finished' line (rank 0's) in the output"
    else
        pass dp_run_folder
    fi
fi

# --- resume of a 2-rank run ----------------------------------------------------------
if run resume_stop 0 "${MPI[@]}" "$DLBENCH" run $SCRIPT batch=128 --stop-after 20 \
    --out "$OUT/resume"; then
    rd=$(run_dir_of resume_stop)
    if run resume_go 0 "${MPI[@]}" "$DLBENCH" run --resume "$rd" --out "$OUT/resume"; then
        st=$(grep -o '"status":[[:space:]]*"[a-z]*"' "$rd/summary.json" | grep -o '[a-z]*"$')
        d=$(maxdiff "$(run_dir_of two_bucketed)/checkpoint.h5" "$rd/checkpoint.h5")
        # same ranks, same order of sums: a resume should match to the bit
        if [ "$st" != 'finished"' ]; then
            fail dp_resume "summary status $st"
        elif within "$d"; then
            pass "dp_resume (stopped at step 20, resumed on 2 ranks; max |diff| $d)"
        else
            fail dp_resume "max |diff| $d against the uninterrupted 2-rank run"
        fi
    fi
fi

# --- a dead or hung rank fails the job ------------------------------------------------
# rank_pid MPIRUN_PID R: the pid of rank R among mpirun's children
rank_pid() {
    local c
    for c in $(ps -o pid= --ppid "$1"); do
        if tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
            echo "$c"
            return
        fi
    done
}
# fault NAME SIGNAL EXPECT: starts the long script on 2 ranks, signals rank 1 once
# training runs, expects the job to end within 30 s with EXPECT in its output
fault() {
    local name=$1 sig=$2 expect=$3
    DLBENCH_COMM_TIMEOUT=3 "${MPI[@]}" -x DLBENCH_COMM_TIMEOUT "$DLBENCH" run \
        tests/run_scripts/long.lua --out "$OUT/$name" >"$OUT/$name.log" 2>&1 &
    JOB=$!
    local i r1= t0
    for i in $(seq 100); do
        ls "$OUT/$name"/*/metrics.jsonl >/dev/null 2>&1 &&
            [ -s "$(ls "$OUT/$name"/*/metrics.jsonl | head -1)" ] && break
        sleep 0.1
    done
    r1=$(rank_pid "$JOB" 1)
    if [ -z "$r1" ]; then
        fail "$name" "could not find rank 1 of the job"
        kill "$JOB" 2>/dev/null
        wait "$JOB" 2>/dev/null
        JOB=
        return
    fi
    t0=$(date +%s)
    kill "-$sig" "$r1"
    for i in $(seq 300); do
        kill -0 "$JOB" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$JOB" 2>/dev/null; then
        fail "$name" "the job still runs 30 s after rank 1 got SIG$sig"
        kill "$JOB" 2>/dev/null
        kill -9 "$r1" 2>/dev/null
        wait "$JOB" 2>/dev/null
        JOB=
        return
    fi
    wait "$JOB"
    local rc=$? took=$(($(date +%s) - t0))
    JOB=
    local sum
    sum=$(ls "$OUT/$name"/*/summary.json 2>/dev/null | head -1)
    if [ "$rc" -eq 0 ]; then
        fail "$name" "the job exited 0"
    elif ! grep -q "$expect" "$OUT/$name.log"; then
        fail "$name" "no message '$expect'; output:"
        tr '\r' '\n' <"$OUT/$name.log" | grep -v '^epoch' | sed 's/^/    /' | tail -8
    elif [ -z "$sum" ] || ! grep -q '"status":[[:space:]]*"failed"' "$sum"; then
        fail "$name" "rank 0's summary.json does not say failed"
    else
        pass "$name (exit $rc after ${took} s: $(grep -o "rank 0 of 2: .*$expect" "$OUT/$name.log" | head -1 | cut -c1-60)...)"
    fi
}
fault dp_rank_killed KILL "another rank has died"
fault dp_rank_hung STOP "made no progress for"
exit 0
