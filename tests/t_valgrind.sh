#!/usr/bin/env bash
# t_valgrind.sh - a short headless run (train, checkpoint, resume) under
# valgrind's memcheck: no invalid reads or writes, no use of uninitialised
# values, no definite leaks. SKIP without valgrind or in a sanitizer build.
. "$(dirname "$0")/lib.sh"
test_init

if ! command -v valgrind >/dev/null 2>&1; then
    skip valgrind "valgrind is not installed"
    exit 0
fi
require_subcommand valgrind run
if nm "$DLBENCH" 2>/dev/null | grep -q '__asan_init\|__tsan_init'; then
    skip valgrind "$DLBENCH is a sanitizer build"
    exit 0
fi
# OpenBLAS and the CPU pool: one thread keeps it short and deterministic
export OPENBLAS_NUM_THREADS=1
vg() { # name args...
    local name=$1
    shift
    valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite --num-callers=20 "$DLBENCH" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -eq 0 ]; then
        pass "valgrind_$name"
    else
        fail "valgrind_$name" "exit status $rc:"
        grep -m12 '==[0-9]*==' "$OUT/$name.log" | sed 's/^/    /'
    fi
}
args=(epochs=2 n=320 hidden=16 every=4 --quiet --out "$OUT/runs")
vg run run tests/run_scripts/crash.lua "${args[@]}" --stop-after 12
d=$(find "$OUT/runs" -mindepth 1 -maxdepth 1 -type d | head -1)
if [ -n "$d" ]; then
    vg resume run --resume "$d" --quiet --out "$OUT/runs"
else
    fail valgrind_resume "the first run left no run folder"
fi
