#!/usr/bin/env bash
# wb_overhead.sh - what the workbench costs the training: the same script and steps headless
# (`dlbench run`) and in the workbench under tmux, interleaved, best of REPS each; samples/s
# from each run's summary.json; prints both and the ratio (target: workbench >= 0.99 x headless).
#
# Environment: DLBENCH (build/dlbench), WB_SCRIPT (tests/tui_spirals.lua), WB_ARGS
# ("n=100000 epochs=10"), BENCH_REPS (3). Needs tmux; says so and exits 0 without it.
set -u
cd "$(dirname "$0")/.."
DLBENCH=${DLBENCH:-build/dlbench}
SCRIPT=${WB_SCRIPT:-tests/tui_spirals.lua}
ARGS=${WB_ARGS:-n=100000 epochs=10}
REPS=${BENCH_REPS:-3}
if ! command -v tmux >/dev/null 2>&1; then
    echo "wb_overhead: skipped: tmux is not installed"
    exit 0
fi
OUT=$(mktemp -d)
SOCK="dlbwb$$"
trap 'tmux -L "$SOCK" kill-server 2>/dev/null; rm -rf "$OUT"' EXIT
export LANG=C.UTF-8 LC_ALL=C.UTF-8

sps() { # RUN_PARENT: samples/s of the only run in it
    python3 -c 'import json,sys,glob; print(json.load(open(glob.glob(sys.argv[1]+"/*/summary.json")[0]))["samples_per_s"])' "$1"
}
headless() {
    local d=$OUT/h$1
    "$DLBENCH" run "$SCRIPT" $ARGS --force --out "$d" -q >/dev/null 2>&1 && sps "$d"
}
workbench() {
    local d=$OUT/w$1 i
    tmux -L "$SOCK" new-session -d -s "w$1" -x 120 -y 40 \
        "TERM=tmux-256color '$DLBENCH' '$SCRIPT' $ARGS --force --start --out '$d'; sleep 60"
    for ((i = 0; i < 6000; i++)); do
        grep -qsE '"status":[[:space:]]*"finished"' "$d"/*/summary.json && break
        sleep 0.1
    done
    tmux -L "$SOCK" send-keys -t "w$1" q
    sleep 0.5
    tmux -L "$SOCK" kill-session -t "w$1" 2>/dev/null
    sps "$d"
}
best_h=0 best_w=0
for ((r = 1; r <= REPS; r++)); do
    h=$(headless "$r") || h=0
    w=$(workbench "$r") || w=0
    printf '  rep %d: headless %.0f samples/s, workbench %.0f samples/s\n' "$r" "$h" "$w"
    best_h=$(python3 -c "print(max($best_h, $h))")
    best_w=$(python3 -c "print(max($best_w, $w))")
done
python3 - "$best_h" "$best_w" <<'PY'
import sys
h, w = float(sys.argv[1]), float(sys.argv[2])
r = w / h if h > 0 else float("nan")
print(f"workbench overhead: headless {h:.0f} samples/s, workbench {w:.0f} samples/s (best of each); "
      f"ratio {r:.4f} ({(1 - r) * 100:+.2f}% cost; target < 1%)")
PY
