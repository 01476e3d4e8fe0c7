#!/usr/bin/env bash
# t_profile_pane.sh - the profile reads the same in `dlbench profile` and the workbench's pane
# (F3): self and total time apart (a container's total holds its children, its self does
# not), the step's rows sum to 100% of the step, validation outside that 100%.
. "$(dirname "$0")/lib.sh"
test_init
require_subcommand t_profile_pane profile
DLBENCH=$(cd "$(dirname "$DLBENCH")" && pwd)/$(basename "$DLBENCH")

# --- dlbench profile: validation after the table, in steps --------------------------
if run prof 0 profile tests/tui_spirals.lua n=2000 epochs=2 --trace "$OUT/prof.json"; then
    table=$(sed -n '/^Name /,/^Steps:/p' "$OUT/prof.log")
    after=$(sed -n '/^Outside the step/,/^$/p' "$OUT/prof.log")
    sum=$(sed -n '/^Name /,/^Steps:/p' "$OUT/prof.log" | awk '$0 ~ /%  / {for (i = 1; i <= NF; i++) if ($i ~ /%$/) {s += $i; break}} END {printf "%.1f", s}')
    if grep -q '^validation' <<<"$table"; then
        fail profile_validation_outside "validation is in the step's table"
    elif ! grep -q '^validation .* st ' <<<"$after"; then
        fail profile_validation_outside "no validation row after the table"
    else
        pass profile_validation_outside
    fi
    awk -v s="$sum" 'BEGIN {exit !(s >= 98 && s <= 102)}' && pass "profile_step_is_100pct ($sum%)" ||
        fail profile_step_is_100pct "the step's rows sum to $sum%"
fi

# --- dlbench profile --set: the experiment's own fields, declared or not ----------------
# tui_spirals.lua declares neither batch nor precision as a hyperparameter
if run prof_set 0 profile tests/tui_spirals.lua n=2000 --set batch=48 --set precision=bf16 \
    --steps 3 --warmup 1 --trace -; then
    if head -1 "$OUT/prof_set.log" | grep -q 'batch 48, bf16,'; then
        pass profile_set
    else
        fail profile_set "header: $(head -1 "$OUT/prof_set.log")"
    fi
fi
if run prof_set_bad 2 profile tests/tui_spirals.lua --set nosuch=1; then
    grep -q "expected FIELD=VALUE" "$OUT/prof_set_bad.log" && pass profile_set_bad ||
        fail profile_set_bad "the message does not list the known fields"
fi

# --- --trace into a device or a pipe (/dev/null, /dev/stdout, mkfifo) ----------------
# is written through, not renamed over: as root a rename replaced /dev/null with a file;
# its temporary file goes to TMPDIR
mkfifo "$OUT/trace.fifo"
mkdir -p "$OUT/tmpdir"
python3 -c 'import json, sys; json.load(open(sys.argv[1])); print("ok")' "$OUT/trace.fifo" \
    >"$OUT/fifo_read.txt" 2>&1 &
reader=$!
if TMPDIR="$OUT/tmpdir" run prof_fifo 0 profile tests/tui_spirals.lua n=2000 --steps 3 \
    --warmup 1 --trace "$OUT/trace.fifo"; then
    for ((i = 0; i < 50; i++)); do kill -0 "$reader" 2>/dev/null && sleep 0.1; done
    kill "$reader" 2>/dev/null # still waiting: nothing was written into the pipe
    wait "$reader" 2>/dev/null
    if [ ! -p "$OUT/trace.fifo" ]; then
        fail profile_trace_fifo "the pipe was replaced: $(ls -l "$OUT/trace.fifo")"
    elif [ "$(cat "$OUT/fifo_read.txt")" != ok ]; then
        fail profile_trace_fifo "the reader got no JSON: $(head -c 300 "$OUT/fifo_read.txt")"
    elif [ -n "$(ls -A "$OUT/tmpdir")" ] || ls "$OUT"/trace.fifo.tmp* >/dev/null 2>&1; then
        fail profile_trace_fifo "a temporary file was left"
    else
        pass profile_trace_fifo
    fi
else
    kill "$reader" 2>/dev/null
fi

# --- --trace through a symbolic link: the file it leads to is written, the link kept --
mkdir -p "$OUT/real"
echo old >"$OUT/real/trace.json"
ln -s "$OUT/real/trace.json" "$OUT/trace-link.json"
if run prof_link 0 profile tests/tui_spirals.lua n=2000 --steps 3 --warmup 1 \
    --trace "$OUT/trace-link.json"; then
    if [ ! -L "$OUT/trace-link.json" ]; then
        fail profile_trace_link "the link was replaced by a file"
    elif ! python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$OUT/real/trace.json" 2>/dev/null; then
        fail profile_trace_link "the linked file holds no trace: $(head -c 100 "$OUT/real/trace.json")"
    elif ls "$OUT"/real/trace.json.tmp* "$OUT"/trace-link.json.tmp* >/dev/null 2>&1; then
        fail profile_trace_link "a temporary file was left"
    else
        pass profile_trace_link
    fi
fi

# --- the pane (F3) of a training in the workbench -------------------------------------
if ! command -v tmux >/dev/null 2>&1; then
    skip t_profile_pane_tui "tmux is not installed"
    exit 0
fi
SOCK="dlbprof$$"
TM() { tmux -L "$SOCK" "$@"; }
cleanup() { TM kill-server 2>/dev/null; }
TM new-session -d -s keepalive "sleep 3600"
TM new-session -d -s p -x 120 -y 40 "cd '$PWD' && TERM=tmux-256color LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DLBENCH' tests/tui_spirals.lua n=200000 --out '$OUT/runs' --start; sleep 600"
screen() { TM capture-pane -p -t p; }
sleep 2
TM send-keys -t p F3
# the profile reaches the pane a few times a second: wait for validation's row
ok=0
for ((i = 0; i < 100; i++)); do
    screen | grep -q "outside the step" && ok=1 && break
    sleep 0.2
done
sleep 0.3
screen >"$OUT/pane.txt"
if [ "$ok" = 1 ] && grep -q "outside the step" "$OUT/pane.txt"; then
    # rows: op calls self total self% total% GF/s; the step's rows above the "outside" line
    read -r sum seq_self seq_total < <(sed -n '/self%/,/outside the step/p' "$OUT/pane.txt" | sed 's/[│|]/ /g' |
        awk 'NF >= 7 && $(NF-5) ~ /^[0-9]+$/ {s += $(NF-2)} /Sequential.forward/ {a = $(NF-2); b = $(NF-1)} END {printf "%.1f %s %s\n", s, a, b}')
    awk -v s="$sum" 'BEGIN {exit !(s >= 97 && s <= 103)}' && pass "pane_step_is_100pct ($sum%)" ||
        fail pane_step_is_100pct "the pane's step rows sum to $sum%"
    awk -v a="$seq_self" -v b="$seq_total" 'BEGIN {exit !(b > 10 * a && b > 20)}' &&
        pass "pane_self_total_apart (Sequential.forward self $seq_self%, total $seq_total%)" ||
        fail pane_self_total_apart "Sequential.forward self '$seq_self' total '$seq_total'"
    grep -q "^[│|]validation .* steps" "$OUT/pane.txt" && pass pane_validation_in_steps ||
        fail pane_validation_in_steps "no 'validation ... steps' row"
else
    fail pane_outside_step "no profile pane with an 'outside the step' part:"
    head -5 "$OUT/pane.txt" | sed 's/^/    /'
fi
TM send-keys -t p q y
sleep 1
