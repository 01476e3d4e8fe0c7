#!/usr/bin/env bash
# t_studies.sh - the trials screen (F4) of a small study in tmux, ASCII and no colour:
# v shows parallel coordinates (an axis per parameter and the objective, whose top is the
# best value), then the objective against a parameter (the best trial, #, on the top row),
# p the next parameter.
. "$(dirname "$0")/lib.sh"
test_init
require_subcommand t_studies tune
if ! command -v tmux >/dev/null 2>&1; then
    skip t_studies "tmux is not installed"
    exit 0
fi
DLBENCH=$(cd "$(dirname "$DLBENCH")" && pwd)/$(basename "$DLBENCH")
run study 0 tune scripts/spirals_tune.lua trials=12 epochs=1 n=300 --out "$OUT/t" -q || exit 0
SOCK="dlbstud$$"
TM() { tmux -L "$SOCK" "$@"; }
cleanup() { TM kill-server 2>/dev/null; }
TM new-session -d -s keepalive "sleep 3600"
TM new-session -d -s s -x 80 -y 24 "cd '$PWD' && TERM=tmux-256color NO_COLOR=1 DLBENCH_ASCII=1 '$DLBENCH' watch --out '$OUT/t' --study auto; sleep 600"
screen() { TM capture-pane -p -t s; }
wait_for() {
    local i
    for ((i = 0; i < ${2:-10} * 5; i++)); do
        screen | grep -qF -- "$1" && return 0
        sleep 0.2
    done
    return 1
}
wait_for "7 Trials of" 15 || fail trials_screen "no trials screen"
# the best value, from the journal (maximize)
best=$(python3 -c 'import json, sys
v = [json.loads(l).get("value") for l in open(sys.argv[1]) if "\"finish\"" in l]
print("%.4g" % max(x for x in v if x is not None))' "$OUT"/t/studies/*/journal.jsonl)
TM send-keys -t s v
if wait_for "parallel coordinates" 3; then
    scr=$(screen)
    axes=$(tail -3 <<<"$scr" | head -1)
    for a in lr hidden act objective; do
        grep -qw "$a" <<<"$axes" || fail "parallel_axis_$a" "no '$a' axis: $axes"
    done
    top=$(sed -n '5p' <<<"$scr" | grep -o '[0-9.][0-9.]*' | tail -1) # the axes' top labels
    awk -v a="$top" -v b="$best" 'BEGIN {exit !(a + 0 == b + 0)}' && pass parallel_objective_top_is_best ||
        fail parallel_objective_top_is_best "top of the objective axis '$top', best '$best'"
    grep -q '#' <<<"$(sed -n '5,20p' <<<"$scr")" && pass parallel_best_drawn || fail parallel_best_drawn "no # line"
else
    fail parallel_view "v did not show parallel coordinates"
fi
TM send-keys -t s v
if wait_for "objective against a parameter" 3; then
    hi_row=$(screen | grep -n "^| *$best  " | head -1 | cut -d: -f1)
    mark_row=$(screen | sed -n '5,$p' | grep -n '#' | head -1 | cut -d: -f1)
    mark_row=$((mark_row + 4))
    [ -n "$hi_row" ] && [ "$hi_row" = "$mark_row" ] && pass scatter_best_on_top ||
        fail scatter_best_on_top "best's row $mark_row, top label row $hi_row"
    p1=$(screen | tail -4 | head -1)
    TM send-keys -t s p
    sleep 0.5
    p2=$(screen | tail -4 | head -1)
    grep -qw lr <<<"$p1" && grep -qw hidden <<<"$p2" && pass scatter_next_param ||
        fail scatter_next_param "'$p1' then '$p2'"
else
    fail scatter_view "v v did not show the scatter"
fi
TM send-keys -t s q
