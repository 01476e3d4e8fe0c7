#!/usr/bin/env bash
# t_compare.sh - the runs screen (F2) in tmux, as a user: two runs differing in lr and
# seed selected and compared (legend names, a diff of lr and seed only, deltas), smoothing
# changes the drawn line and not the data, three seeds grouped into one mean line and a
# band, sort, filter, tags, a run's page, a run folder deleted while shown (a note, no
# crash), a resize, 80x24 and 120x40, NO_COLOR and ASCII.
. "$(dirname "$0")/lib.sh"
test_init
DLBENCH=$(cd "$(dirname "$DLBENCH")" && pwd)/$(basename "$DLBENCH")
SOCK="dlbcmp$$"
TM() { tmux -L "$SOCK" "$@"; }
cleanup() { TM kill-server 2>/dev/null; }

if ! command -v tmux >/dev/null 2>&1; then
    skip t_compare "tmux is not installed"
    exit 0
fi
require_subcommand t_compare run
export LANG=C.UTF-8 LC_ALL=C.UTF-8
TM new-session -d -s keepalive "sleep 3600"
RUNS="$OUT/runs"
mkdir -p "$OUT/cwd" # the workbench's folder: E exports there

# four short runs: A lr=0.01 seed 1; B, C, D lr=0.03 seeds 2, 3, 4
for a in "lr=0.01 --seed 1" "lr=0.03 --seed 2" "lr=0.03 --seed 3" "lr=0.03 --seed 4"; do
    # shellcheck disable=SC2086
    "$DLBENCH" run tests/tui_spirals.lua epochs=3 n=1000 $a --out "$RUNS" >>"$OUT/runs.log" 2>&1 ||
        fail make_runs "dlbench run $a failed: $(tail -2 "$OUT/runs.log")"
done
folder_of() { # SEED: the run folder's name (config.json's seed)
    python3 - "$RUNS" "$1" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*", "config.json"))):
    if json.load(open(f)).get("seed") == int(sys.argv[2]):
        print(os.path.basename(os.path.dirname(f)))
PY
}
A=$(folder_of 1) B=$(folder_of 2) C=$(folder_of 3) D=$(folder_of 4)
label() { echo "${1:16}"; } # the folder less its time stamp, as the legend shows it

start() { # NAME COLS ROWS ENV...: the workbench on $RUNS
    local name=$1 cols=$2 rows=$3
    shift 3
    TM new-session -d -s "$name" -x "$cols" -y "$rows" \
        "cd '$OUT/cwd' && TERM=tmux-256color $* '$DLBENCH' '$PWD/tests/tui_spirals.lua' --out '$RUNS' 2>'$OUT/$name.err'; echo \$? >'$OUT/$name.rc'; sleep 600"
}
screen() { TM capture-pane -p -t "$1"; }
wait_for() { # NAME TEXT [SECONDS]
    local i
    for ((i = 0; i < ${3:-10} * 5; i++)); do
        screen "$1" | grep -qF -- "$2" && return 0
        sleep 0.2
    done
    return 1
}
keys() { TM send-keys -t "$1" "${@:2}"; sleep 0.4; }
# by_seed NAME: the table sorted by the seed column (> steps through the columns)
by_seed() {
    local i
    for ((i = 0; i < 20; i++)); do
        screen "$1" | grep -qF "sort seed" && return 0
        keys "$1" '>'
    done
    return 1
}
# the hyperparameter rows of the diff table: between "differs" and "final metrics"
hp_rows() { screen "$1" | sed -n '/differs/,/final metrics/p' | sed '1d;$d' | sed 's/^[|│] *//' | awk '{print $1}'; }
# the chart's rows: from the legend to the x labels
chart() { screen "$1" | sed -n '/^[|│] *[0-9.]* *[|│]/p'; }

# --- compare two runs that differ in lr and seed, at 80x24 and 120x40 -------------
for size in 80x24 120x40; do
    c=${size%x*} r=${size#*x} s="cmp$size"
    start "$s" "$c" "$r"
    wait_for "$s" "4 Log" 15 || fail "start_$size" "no workbench"
    keys "$s" F2
    wait_for "$s" "5 Runs in" 5 || fail "runs_screen_$size" "no runs screen"
    by_seed "$s" || fail "sort_$size" "no 'sort seed' after > presses"
    first=$(screen "$s" | grep -m1 -F "tui-spirals-" | grep -o 'tui-spirals-[0-9a-f]*')
    [ "$first" = "$(label "$A")" ] && pass "sort_by_seed_$size" ||
        fail "sort_by_seed_$size" "first row $first, expected $(label "$A") (seed 1)"
    keys "$s" Space Space
    wait_for "$s" "2 selected" 3 && pass "select_two_$size" || fail "select_two_$size" "no '2 selected'"
    keys "$s" c
    if wait_for "$s" "Runs compared: 2" 5; then
        scr=$(screen "$s")
        screen "$s" >"$OUT/compare-$size.txt"
        grep -qF "$(label "$A")" <<<"$scr" && grep -qF "$(label "$B")" <<<"$scr" &&
            pass "legend_names_$size" || fail "legend_names_$size" "legend lacks $(label "$A") or $(label "$B")"
        rows=$(hp_rows "$s" | sort | tr '\n' ' ')
        [ "$rows" = "lr seed " ] && pass "diff_lr_seed_only_$size" ||
            fail "diff_lr_seed_only_$size" "hyperparameter rows: '$rows'"
        # the delta of B's lr against the baseline A (0.01): +0.02
        grep -E "^[|│] *lr +0\.01 +0\.03 \(\+0\.02\)" <<<"$scr" >/dev/null &&
            pass "delta_$size" || fail "delta_$size" "no 'lr 0.01 0.03 (+0.02)' row"
    else
        fail "compare_$size" "no comparison screen"
        screen "$s" | head -5 | sed 's/^/    /'
    fi
    # smoothing: the drawn line changes, the legend's raw value and the file do not
    before=$(chart "$s") legend0=$(screen "$s" | grep -F "$(label "$A")" | head -1)
    sum0=$(cat "$RUNS/$A/metrics.jsonl" "$RUNS/$B/metrics.jsonl" | md5sum)
    keys "$s" S S
    wait_for "$s" "smooth 0.90" 3 || fail "smooth_title_$size" "no 'smooth 0.90'"
    after=$(chart "$s") legend1=$(screen "$s" | grep -F "$(label "$A")" | head -1)
    sum1=$(cat "$RUNS/$A/metrics.jsonl" "$RUNS/$B/metrics.jsonl" | md5sum)
    [ -n "$before" ] && [ "$before" != "$after" ] && pass "smooth_changes_line_$size" ||
        fail "smooth_changes_line_$size" "the chart did not change"
    [ "$legend0" = "$legend1" ] && [ "$sum0" = "$sum1" ] && pass "smooth_keeps_data_$size" ||
        fail "smooth_keeps_data_$size" "legend '$legend0' -> '$legend1' or metrics changed"
    keys "$s" x
    wait_for "$s" "x epoch" 3 && pass "x_axis_$size" || fail "x_axis_$size" "no 'x epoch'"
    keys "$s" m
    screen "$s" | grep -q "m loss " && fail "metric_$size" "m did not change the metric" || pass "metric_$size"
    # E: every step of both compared runs into ./dlbench-export-TIME.csv
    rm -f "$OUT"/cwd/dlbench-export-*.csv
    keys "$s" E
    wait_for "$s" "exported" 3 || fail "export_key_$size" "no 'exported' note"
    if python3 - "$RUNS" "$A" "$B" "$OUT"/cwd/dlbench-export-*.csv <<'PY'; then
import csv, json, os, sys
runs, a, b, path = sys.argv[1:5]
rows = list(csv.DictReader(open(path)))
for n in (a, b):
    recs = [json.loads(l) for l in open(os.path.join(runs, n, "metrics.jsonl"))]
    mine = [r for r in rows if r["run"] == n]
    assert len(mine) == len(recs), (n, len(mine), len(recs))
    for r, rec in zip(mine, recs):
        assert float(r["step"]) == rec["step"] and r["kind"] == rec["kind"]
        for k in ("loss", "val_loss"):
            if k in rec:
                assert float(r[k]) == rec[k], (n, rec["step"], k)
assert {r["run"] for r in rows} == {a, b}
PY
        pass "export_key_every_step_$size"
    else
        fail "export_key_every_step_$size" "the export lacks records of $A or $B"
    fi
    TM kill-session -t "$s"
done

# --- three seeds grouped: one mean line and a band (ASCII marks, no colour) -------
s=grp
start "$s" 80 24 NO_COLOR=1 DLBENCH_ASCII=1
wait_for "$s" "4 Log" 15
keys "$s" F2
by_seed "$s"
keys "$s" Down Space Space Space c
wait_for "$s" "Runs compared: 3" 5 || fail group_compare "no comparison of 3"
keys "$s" G
if wait_for "$s" "group seed" 3; then
    scr=$(screen "$s")
    screen "$s" >"$OUT/group.txt"
    n=$(grep -c "mean of" <<<"$scr")
    [ "$n" = 1 ] && grep -qF "mean of A+B+C (3 seeds)" <<<"$scr" && pass group_one_mean ||
        fail group_one_mean "$n 'mean of' lines"
    band=$(chart "$s" | grep -c ':')
    mark=$(chart "$s" | grep -c '\*')
    other=$(chart "$s" | grep -c '[+xo#]')
    [ "$band" -gt 0 ] && [ "$mark" -gt 0 ] && [ "$other" = 0 ] && pass group_band ||
        fail group_band "band rows $band, mean rows $mark, other marks $other"
else
    fail group_seed "G did not group by seed"
fi
# a compared run's folder deleted while the screen shows it: dropped with a note
rm -rf "${RUNS:?}/$D"
if wait_for "$s" "dropped from the selection" 6 && wait_for "$s" "Runs compared: 2" 3; then
    pass deleted_run_dropped
else
    fail deleted_run_dropped "no note or the run still compared:"
    screen "$s" | head -4 | sed 's/^/    /'
fi
# a resize keeps the comparison
TM resize-window -t "$s" -x 120 -y 40 2>/dev/null || TM refresh-client -t "$s" -C 120,40
sleep 0.8
screen "$s" | grep -qF "differs" && [ "$(screen "$s" | wc -l)" -ge 40 ] && pass resize_compare ||
    fail resize_compare "no diff table after the resize"

# --- the mouse: a click selects the row under it, the wheel moves the cursor -------
# (xterm X10 reports, as a terminal sends them once the program asks for the mouse)
mouse() { # NAME BUTTON COL ROW (0-based)
    TM send-keys -t "$1" -l "$(python3 -c 'import sys; b, x, y = map(int, sys.argv[1:]); print("\x1b[M" + chr(32 + b) + chr(33 + x) + chr(33 + y), end="")' "$2" "$3" "$4")"
    sleep 0.3
}
keys "$s" Escape
wait_for "$s" "5 Runs in" 3 || fail back_to_table "Esc did not go back to the table"
keys "$s" u Home
[ "$(TM display -p -t "$s" '#{mouse_any_flag}')" = 1 ] && pass mouse_on || fail mouse_on "the workbench did not ask for the mouse"
row=$(screen "$s" | grep -n -F "$(label "$C")" | head -1 | cut -d: -f1) # 1-based screen row
mouse "$s" 0 10 $((row - 1))
mouse "$s" 3 10 $((row - 1))
screen "$s" | grep -E "^[|│]\*>.*$(label "$C")" >/dev/null && wait_for "$s" "1 selected" 2 &&
    pass mouse_click_selects || { fail mouse_click_selects "a click on $(label "$C")'s row $row did not select it:"; screen "$s" | head -8 | sed "s/^/    /"; }
mouse "$s" 65 10 5 # the wheel down: the cursor moves on
screen "$s" | grep -qE "^[|│][ *]>$(label "$D")|^[|│][ *]>" && pass mouse_wheel || fail mouse_wheel "no cursor after the wheel"
keys "$s" u
TM kill-session -t nomouse 2>/dev/null
TM new-session -d -s nomouse -x 80 -y 24 "cd '$OUT/cwd' && TERM=tmux-256color '$DLBENCH' '$PWD/tests/tui_spirals.lua' --out '$RUNS' --no-mouse; sleep 600"
wait_for nomouse "4 Log" 15
[ "$(TM display -p -t nomouse '#{mouse_any_flag}')" = 0 ] && pass no_mouse_option ||
    fail no_mouse_option "--no-mouse still asked for the mouse"
TM kill-session -t nomouse

# --- a run's page, tags, filter, help -------------------------------------------
keys "$s" Home Enter
wait_for "$s" "5 Run $A" 3 && wait_for "$s" "config:" 2 && wait_for "$s" "events" 2 &&
    pass run_page || fail run_page "no page of $A"
keys "$s" Escape
keys "$s" u Home t
keys "$s" b e s t Enter
wait_for "$s" "tagged best: 1 run" 3 && grep -qx best "$RUNS/$A/tags.txt" && pass tag_key ||
    fail tag_key "no tag: $(cat "$RUNS/$A/tags.txt" 2>/dev/null)"
keys "$s" / t a g = b e s t Enter
wait_for "$s" "Runs in $RUNS: 1" 3 && pass filter_tag || { fail filter_tag "tag=best did not leave 1 run"; screen "$s" | head -6; }
keys "$s" / BSpace BSpace BSpace BSpace BSpace BSpace BSpace BSpace l r = 0 . 0 3 Enter
wait_for "$s" "Runs in $RUNS: 2" 3 && pass filter_kv || fail filter_kv "lr=0.03 did not leave 2 runs"
keys "$s" '?'
wait_for "$s" "6 Help" 3 && keys "$s" Down Down Down Down Down Down Down Down Down Down Down Down &&
    wait_for "$s" "compare the selected runs" 3 && pass help_lists_runs_keys ||
    fail help_lists_runs_keys "help has no runs-screen keys"
keys "$s" q
sleep 1
[ "$(cat "$OUT/$s.rc" 2>/dev/null)" = 0 ] && pass quit_clean || fail quit_clean "exit $(cat "$OUT/$s.rc" 2>/dev/null): $(tail -3 "$OUT/$s.err")"
