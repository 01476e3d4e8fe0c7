#!/usr/bin/env bash
# tests/fuzz/run.sh SECONDS TARGET... - runs each built libFuzzer target
# (build-fuzz/fuzz_TARGET) for SECONDS on its corpus; prints one line per
# target and "fuzzing: N s, M crashes". Exit status 1 when any crashed.
set -u
cd "$(dirname "$0")/../.."
secs=${1:-60}
shift
total=0 crashes=0
mkdir -p build-fuzz/crashes
for t in "$@"; do
    bin=build-fuzz/fuzz_$t
    if [ ! -x "$bin" ]; then
        echo "FAIL fuzz_$t: $bin is not built (make fuzz builds it)"
        crashes=$((crashes + 1))
        continue
    fi
    mkdir -p "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t"
    log=build-fuzz/fuzz_$t.log
    "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -max_len=65536 -close_fd_mask=3 \
        -artifact_prefix="build-fuzz/crashes/$t-" -print_final_stats=1 \
        "build-fuzz/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    total=$((total + secs))
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    if [ "$rc" -ne 0 ]; then
        crashes=$((crashes + 1))
        echo "FAIL fuzz_$t: status $rc after ${runs:-?} runs; $(grep -m1 'ERROR:\|runtime error' "$log")"
        ls build-fuzz/crashes/"$t"-* 2>/dev/null | sed 's/^/    /'
    else
        echo "PASS fuzz_$t: ${runs:-?} runs in $secs s, corpus $(ls "build-fuzz/corpus/$t" | wc -l) inputs"
    fi
done
echo "fuzzing: $total s, $crashes crashed"
[ "$crashes" -eq 0 ]
