#!/usr/bin/env bash
# bench/advise_accept.sh - the advisor's acceptance: deliberately wasteful
# experiments (tests/advise/*.lua, and bench/advise/*.lua, which no test
# uses), each run as written, then run again
# following only the advisor's commands (the warnings' and critical
# advice's "command" in the first run's summary.json, merged in order);
# prints experiment, advice, wall time and accuracy before and after, and
# the median speed-up. Runs with make bench (bench/run.sh), not make test.
#
# Environment: BUILD (build), DLBENCH ($BUILD/dlbench), ADVISE_REPS (1:
# runs per side, the median counts), ADVISE_EXPERIMENTS (all of
# tests/advise/*.lua bench/advise/*.lua). The "tests" column says whether
# a test under tests/ runs the experiment (yes) or not (no). bf16_cpu.lua runs with DLBENCH_CPU_BF16=0: the
# emulated path, as on a CPU without AVX-512 BF16.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DLBENCH=${DLBENCH:-$BUILD/dlbench}
REPS=${ADVISE_REPS:-1}
EXPS=${ADVISE_EXPERIMENTS:-$(ls tests/advise/*.lua bench/advise/*.lua)}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
if [ ! -f data/fashion-mnist.h5 ]; then
    echo "advise_accept: data/fashion-mnist.h5 missing (make run or scripts/prepare-data.sh)"
    exit 0
fi
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
    "flags: $(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16|avx512_fp16)$' | tr '\n' ' ')"

# one NAME ENV SCRIPT ARGS...: REPS runs; prints "wall val_acc dir" of the median run
one() {
    local name=$1 env=$2 script=$3
    shift 3
    local i
    for i in $(seq "$REPS"); do
        env $env DLBENCH_THREADS=2 "$DLBENCH" run "$script" "$@" --out "$OUT/runs" --force -q \
            >"$OUT/$name.$i.log" 2>&1 || { echo "0 0 -"; return; }
        local d
        d=$(sed -n 's/^run folder: //p' "$OUT/$name.$i.log" | tail -1)
        python3 -c "
import json; s = json.load(open('$d/summary.json'))
print(s['wall_s'], s['final'].get('val_acc', float('nan')), '$d')"
    done | sort -n | awk -v r="$REPS" 'NR == int((r + 1) / 2)'
}

# commands DIR: the --set arguments of the warnings' and critical advice, merged
commands() {
    python3 - "$1/summary.json" <<'PY'
import json, sys, shlex
s = json.load(open(sys.argv[1]))
sets, kinds = {}, []
for a in s.get("advice", []):
    if a["level"] == "info" or not a.get("command"):
        continue
    kinds.append(a["kind"])
    words = shlex.split(a["command"])
    for i, w in enumerate(words):
        if w == "--set":
            k, v = words[i + 1].split("=", 1)
            sets[k] = v
print(" ".join(f"--set {k}={v}" for k, v in sets.items()) + "|" + ",".join(kinds))
PY
}

printf '%-18s %-5s %-64s %9s %9s %7s %8s %8s\n' experiment tests advice "before s" "after s" \
    speedup "acc bef" "acc aft"
ratios=""
failed=""
for script in $EXPS; do
    name=$(basename "$script" .lua)
    used=no
    grep -rlq --exclude-dir=advise "advise/$name.lua" tests/ && used=yes
    env=""
    [ "$name" = bf16_cpu ] && env="DLBENCH_CPU_BF16=0"
    read -r wb ab db <<<"$(one "$name-before" "$env" "$script")"
    if [ "$db" = "-" ]; then
        echo "$name: the first run failed: $(tail -3 "$OUT/$name-before.1.log")"
        continue
    fi
    c=$(commands "$db")
    sets=${c%%|*}
    kinds=${c##*|}
    if [ -z "$sets" ]; then
        printf '%-18s %-5s %-64s %9.1f %9s %7s %8.4f %8s\n' "$name" "$used" "(none)" "$wb" - - \
            "$ab" -
        continue
    fi
    # shellcheck disable=SC2086
    read -r wa aa da <<<"$(one "$name-after" "$env" "$script" $sets)"
    r=$(awk -v a="$wb" -v b="$wa" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    ratios="$ratios $r"
    # slower, or more than half a point less accurate: the advice failed
    worse=$(awk -v wb="$wb" -v wa="$wa" -v ab="$ab" -v aa="$aa" \
        'BEGIN { print (wa > wb || aa < ab - 0.005) ? 1 : 0 }')
    [ "$worse" = 1 ] && failed="$failed $name"
    printf '%-18s %-5s %-64s %9.1f %9.1f %6sx %8.4f %8.4f\n' "$name" "$used" "$kinds: $sets" \
        "$wb" "$wa" "$r" "$ab" "$aa"
done
echo "$ratios" | tr ' ' '\n' | grep . | sort -n |
    awk '{ v[NR] = $1 } END { if (NR) printf "median speed-up %.2fx over %d experiments\n",
        (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), NR }'
if [ -n "$failed" ]; then
    echo "advice made these slower or worse (more than 0.5 point of accuracy):$failed"
else
    echo "no advice made a run slower or more than 0.5 point less accurate"
fi
