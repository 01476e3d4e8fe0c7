#!/usr/bin/env bash
# t_lock.sh - one process per run folder: a live run holds RUN/run.lock, a
# --resume of it is refused (exit 2, naming the holder's pid), two resumes
# started at once never both train, a kill -9 leaves no lock behind, and
# runs started at once get distinct, whole folders.
. "$(dirname "$0")/lib.sh"
test_init
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
}

require_subcommand t_lock run

# wait_for FILE PATTERN: up to 10 s for a line matching PATTERN
wait_for() {
    for _ in $(seq 50); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

# --- a live run refuses a resume ----------------------------------------------------
"$DLBENCH" run tests/run_scripts/long.lua --out "$OUT/live" >"$OUT/live.log" 2>&1 &
live=$!
pids+=("$live")
if ! wait_for "$OUT/live.log" '^training: '; then
    fail lock_live_run "the run did not start: $(tail -3 "$OUT/live.log")"
    exit 0
fi
d=$(sed -n 's/^training: .*run folder //p' "$OUT/live.log")
"$DLBENCH" run --resume "$d" --out "$OUT/live" >"$OUT/second.log" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "is in use by process $live" "$OUT/second.log"; then
    pass lock_live_run_refuses_resume
else
    fail lock_live_run_refuses_resume "exit $rc: $(tail -2 "$OUT/second.log")"
fi
if [ "$(grep -c ' resumed: ' "$d/events.log")" -eq 0 ]; then
    pass lock_refused_resume_writes_nothing
else
    fail lock_refused_resume_writes_nothing "events.log has a 'resumed' line"
fi

# --- kill -9: the lock goes with the process -----------------------------------------
kill -KILL "$live"
wait "$live" 2>/dev/null
if "$DLBENCH" run --resume "$d" --stop-after 5 --out "$OUT/live" >"$OUT/after.log" 2>&1; then
    pass lock_gone_after_kill
else
    fail lock_gone_after_kill "$(tail -2 "$OUT/after.log")"
fi

# --- two resumes at once: one trains, the other is refused ---------------------------
good=0
for round in 1 2 3; do
    "$DLBENCH" run --resume "$d" --out "$OUT/live" >"$OUT/a$round.log" 2>&1 &
    a=$!
    "$DLBENCH" run --resume "$d" --out "$OUT/live" >"$OUT/b$round.log" 2>&1 &
    b=$!
    pids+=("$a" "$b")
    # the loser exits within about a second; the winner trains on
    for _ in $(seq 50); do
        ! kill -0 "$a" 2>/dev/null || ! kill -0 "$b" 2>/dev/null && break
        sleep 0.1
    done
    sleep 0.3
    kill -INT "$a" "$b" 2>/dev/null
    wait "$a"
    ra=$?
    wait "$b"
    rb=$?
    # "by process PID", or "by another process" when the loser looked
    # between the winner's flock and its writing its PID into the lock
    refused=$(cat "$OUT/a$round.log" "$OUT/b$round.log" | grep -c "is in use by")
    if { [ "$ra" = 130 ] && [ "$rb" = 2 ]; } || { [ "$ra" = 2 ] && [ "$rb" = 130 ]; } &&
        [ "$refused" -eq 1 ]; then
        good=$((good + 1))
    else
        echo "  round $round: exit statuses $ra and $rb, $refused refusals"
        tail -n 2 "$OUT/a$round.log" "$OUT/b$round.log" | sed 's/^/    /'
    fi
done
if [ "$good" -eq 3 ] && [ "$(json_field "$d/summary.json" status)" = stopped ]; then
    pass lock_two_resumes_at_once
else
    fail lock_two_resumes_at_once "$good of 3 rounds had exactly one run training"
fi

# --- fresh runs started at once: distinct, whole folders -------------------------------
n=4
for i in $(seq $n); do
    "$DLBENCH" run scripts/spirals.lua epochs=1 --force --quiet --out "$OUT/many" \
        >"$OUT/many$i.log" 2>&1 &
    pids+=("$!")
done
st=0
for p in "${pids[@]: -$n}"; do
    wait "$p" || st=$?
done
dirs=$(find "$OUT/many" -mindepth 1 -maxdepth 1 -type d ! -name '.*' | wc -l)
hidden=$(find "$OUT/many" -mindepth 1 -maxdepth 1 -name '.*' | wc -l)
named=0
for dd in "$OUT"/many/*/; do
    dd=${dd%/}
    [ "$(json_field "$dd/config.json" run)" = "$(basename "$dd")" ] &&
        [ "$(json_field "$dd/summary.json" status)" = finished ] && named=$((named + 1))
done
if [ "$st" -eq 0 ] && [ "$dirs" -eq $n ] && [ "$hidden" -eq 0 ] && [ "$named" -eq $n ]; then
    pass lock_concurrent_runs_distinct_folders
else
    fail lock_concurrent_runs_distinct_folders \
        "status $st, $dirs folders ($named whole and named so), $hidden hidden left"
fi
