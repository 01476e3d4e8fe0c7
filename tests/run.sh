#!/usr/bin/env bash
# tests/run.sh - runs every test binary and test script, then prints
# "N passed, N failed, N skipped". Each test prints PASS/FAIL/SKIP lines;
# a binary or script that exits non-zero without a FAIL line counts as one.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export DLBENCH=$PWD/$BUILD/dlbench
export BUILD
log=$(mktemp)
out=$(mktemp)
trap 'rm -f "$log" "$out"' EXIT

run_one() {
    local name=$1; shift
    echo "== $name"
    "$@" >"$out" 2>&1
    local rc=$?
    cat "$out"
    cat "$out" >>"$log"
    if [ $rc -ne 0 ] && ! grep -q '^FAIL' "$out"; then
        echo "FAIL $name: exited with status $rc" | tee -a "$log"
    fi
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    run_one "$(basename "$t")" "$t"
done
# shell-driven tests (end to end, tmux, script corpora): tests/t_*.sh;
# TESTS=binaries leaves them out (make tsan)
for t in tests/t_*.sh; do
    [ "${TESTS:-all}" = binaries ] && break
    [ -f "$t" ] || continue
    run_one "$(basename "$t")" bash "$t"
done

pass=$(grep -c '^PASS' "$log")
fail=$(grep -c '^FAIL' "$log")
skip=$(grep -c '^SKIP' "$log")
echo
grep -E '^(FAIL|SKIP)' "$log"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
