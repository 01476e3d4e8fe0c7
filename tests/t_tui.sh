#!/usr/bin/env bash
# t_tui.sh - the workbench in tmux: pane titles at 80x24 and 200x50, cost/MFU in the status
# bar (--price-per-hour) and summary.json, the trials screen (F4, watch --study) of a small
# study, named checkpoints (Lua prompt, socket), headless cost and advice, live chart,
# pause/resume, notes, Lua prompt, resize, quit with a summary, watch on a finished
# and a live run, the control socket (every command, malformed ones refused), and
# SIGHUP leaving the training running to its end.
. "$(dirname "$0")/lib.sh"
test_init
DLBENCH=$(cd "$(dirname "$DLBENCH")" && pwd)/$(basename "$DLBENCH")
SOCK="dlbtest$$"
TM() { tmux -L "$SOCK" "$@"; }
cleanup() {
    TM kill-server 2>/dev/null
    [ -n "${HEADLESS:-}" ] && kill "$HEADLESS" 2>/dev/null
}

if ! command -v tmux >/dev/null 2>&1; then
    skip t_tui "tmux is not installed"
    exit 0
fi
if ! "$DLBENCH" --help >/dev/null 2>&1 || ! "$DLBENCH" watch --help >/dev/null 2>&1; then
    skip t_tui "$DLBENCH has no workbench/watch in this build"
    exit 0
fi
export LANG=C.UTF-8 LC_ALL=C.UTF-8
# one idle session for the whole test: killing a test's last session would
# make the server exit, and the next new-session could reach the dying
# server ("no server running"), as a CI run saw once
TM new-session -d -s keepalive "sleep 3600"

SCRIPT="tests/tui_spirals.lua" # spirals without early stopping
LONG="n=200000 --out $OUT/runs" # minutes: every test stops it

# start NAME COLS ROWS CMD: a detached session running CMD; its exit status goes to $OUT/NAME.rc
start() {
    local name=$1 cols=$2 rows=$3
    shift 3
    TM new-session -d -s "$name" -x "$cols" -y "$rows" \
        "cd '$PWD' && TERM=tmux-256color $*; echo \$? > '$OUT/$name.rc'; sleep 600"
}
screen() { TM capture-pane -p -t "$1"; }
# wait_for NAME TEXT [SECONDS]: until the screen shows TEXT
wait_for() {
    local i
    for ((i = 0; i < ${3:-20} * 5; i++)); do
        screen "$1" | grep -qF -- "$2" && return 0
        sleep 0.2
    done
    return 1
}
wait_file() { # FILE PATTERN SECONDS
    local i
    for ((i = 0; i < ${3:-20} * 5; i++)); do
        [ -f "$1" ] && grep -q -- "$2" "$1" && return 0
        sleep 0.2
    done
    return 1
}
step_of() { screen "$1" | sed -n 's/.*step \([0-9][0-9]*\).*/\1/p' | head -1; }
newest_run() { ls -d "$OUT"/runs/*/ 2>/dev/null | sort | tail -1 | sed 's:/$::'; }
titles_ok() {
    local s missing=""
    s=$(screen "$1")
    for t in "1 Loss" "2 System" "3 Profile" "4 Log" "dlbench"; do
        grep -qF "$t" <<<"$s" || missing="$missing '$t'"
    done
    echo "$missing"
}
# ctl RUN JSON: one line to RUN/control.sock, prints the reply
ctl() {
    python3 - "$1/control.sock" "$2" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
buf = b""
while not buf.endswith(b"\n"):
    d = s.recv(4096)
    if not d:
        break
    buf += d
print(buf.decode().strip())
PY
}

# --- titles at both sizes, help and runs screens ------------------------------
for size in 80x24 200x50; do
    c=${size%x*} r=${size#*x}
    start "t$size" "$c" "$r" "$DLBENCH" "$SCRIPT" "$LONG"
    if ! wait_for "t$size" "4 Log" 15; then
        fail "titles_$size" "no workbench screen; got:"
        screen "t$size" | head -5 | sed 's/^/    /'
        continue
    fi
    m=$(titles_ok "t$size")
    [ -z "$m" ] && pass "titles_$size" || fail "titles_$size" "missing$m"
    screen "t$size" >"$OUT/screen-$size.txt"
    TM send-keys -t "t$size" '?'
    wait_for "t$size" "6 Help" 5 && pass "help_$size" || fail "help_$size" "no help screen"
    TM send-keys -t "t$size" '?' F2
    wait_for "t$size" "5 Runs" 5 && pass "runs_screen_$size" || fail "runs_screen_$size" "no runs screen"
    TM send-keys -t "t$size" F2
    TM kill-session -t "t$size"
done

# --- cost, advisor, trials (F4), named checkpoints: a workbench next to a small study ----
TUNE="$OUT/tune"
"$DLBENCH" tune scripts/spirals_tune.lua trials=4 epochs=2 n=400 --out "$TUNE" >"$OUT/tune.log" 2>&1 ||
    fail tune_study "dlbench tune failed: $(tail -2 "$OUT/tune.log")"
for size in 80x24 200x50; do
    c=${size%x*} r=${size#*x}
    start "c$size" "$c" "$r" "$DLBENCH" "$SCRIPT" n=200000 --out "$TUNE" --price-per-hour 3 --start --force
    # 80 columns keep the cost (so far/projected); 200 also show MFU and ETA
    if wait_for "c$size" '$0.' 20 && { [ "$c" -lt 100 ] || wait_for "c$size" "MFU" 5; }; then
        pass "cost_in_status_$size"
    else
        fail "cost_in_status_$size" "no cost/MFU in the status bar:"
        screen "c$size" | head -1 | sed 's/^/    /'
    fi
    screen "c$size" >"$OUT/screen-cost-$size.txt"
    TM send-keys -t "c$size" F4
    if wait_for "c$size" "7 Trials of spirals-tune" 5 && wait_for "c$size" "importance" 3 &&
        [ "$(screen "c$size" | grep -c ' complete ')" -ge 4 ]; then
        pass "trials_screen_$size"
    else
        fail "trials_screen_$size" "no trials table; screen:"
        screen "c$size" | head -8 | sed 's/^/    /'
    fi
    screen "c$size" >"$OUT/screen-trials-$size.txt"
    long=$(screen "c$size" | python3 -c "import sys; print(sum(len(l.rstrip('\\n')) > $c for l in sys.stdin))")
    [ "$long" -eq 0 ] && pass "trials_fit_$size" || fail "trials_fit_$size" "$long lines wider than $c"
    TM send-keys -t "c$size" F4
    if [ "$size" = 80x24 ]; then # a named checkpoint from the Lua prompt
        CRUN=$(ls -d "$TUNE"/*-tui-spirals-*/ 2>/dev/null | sort | tail -1 | sed 's:/$::')
        TM send-keys -t "c$size" :
        TM send-keys -t "c$size" -l 'run.checkpoint("mark1")'
        TM send-keys -t "c$size" Enter
        wait_file "$CRUN/events.log" "checkpoint-mark1.h5 saved" 10 && [ -f "$CRUN/checkpoint-mark1.h5" ] &&
            pass named_checkpoint_lua || fail named_checkpoint_lua "no $CRUN/checkpoint-mark1.h5"
    fi
    TM send-keys -t "c$size" q
    wait_for "c$size" "quit? [y/N]" 5
    TM send-keys -t "c$size" y
    wait_file "$OUT/c$size.rc" . 30 || fail "cost_quit_$size" "the workbench did not exit"
done
CRUN=$(ls -d "$TUNE"/*-tui-spirals-*/ 2>/dev/null | sort | tail -1 | sed 's:/$::')
python3 - "$CRUN/summary.json" <<'PY' && pass cost_in_summary || fail cost_in_summary "no cost in $CRUN/summary.json"
import json, sys
c = json.load(open(sys.argv[1]))["cost"]
assert c["price_per_hour"] == 3 and c["cost"] > 0 and 0 <= c["mfu"] <= 1, c
PY
# watch --study: straight to the trials screen
start ws 80 24 "$DLBENCH" watch --study spirals-tune --out "$TUNE"
wait_for ws "7 Trials of spirals-tune" 10 && pass watch_study || fail watch_study "no trials screen"
TM send-keys -t ws q
wait_file "$OUT/ws.rc" . 10 || fail watch_study_quits "watch --study did not exit"
start wa 80 24 "$DLBENCH" watch --study auto --out "$TUNE"
wait_for wa "7 Trials of spirals-tune" 10 && pass watch_study_auto || fail watch_study_auto "no trials screen"
TM send-keys -t wa q
# the headless run prints cost and advice at its end
"$DLBENCH" run "$SCRIPT" epochs=2 --out "$OUT/hl" --price-per-hour 2 >"$OUT/hl.log" 2>&1
grep -q '^  cost \$' "$OUT/hl.log" && grep -q '^  advisor: ' "$OUT/hl.log" && pass headless_cost_advice ||
    fail headless_cost_advice "$(tail -4 "$OUT/hl.log")"

# --- a training in the workbench ------------------------------------------------
start wb 80 24 "$DLBENCH" "$SCRIPT" "$LONG"
wait_for wb "4 Log" 15
TM send-keys -t wb r
if wait_for wb "running" 20 && sleep 2 && [ "$(step_of wb)" -gt 0 ] 2>/dev/null; then
    if screen wb | grep -q "no points yet"; then
        fail chart_points "the loss chart shows no points"
    elif screen wb | grep -qP '[\x{2801}-\x{28ff}]'; then
        pass chart_points
    else
        fail chart_points "no braille dots in the chart"
    fi
else
    fail chart_points "the training did not start; screen:"
    screen wb | tail -8 | sed 's/^/    /'
fi
RUN=$(newest_run)

# Space pauses (the counter stops) and resumes
TM send-keys -t wb Space
if wait_for wb "paused" 10; then
    a=$(step_of wb); sleep 1.5; b=$(step_of wb)
    if [ -n "$a" ] && [ "$a" = "$b" ]; then pass pause_stops_steps; else fail pause_stops_steps "step $a -> $b while paused"; fi
else
    fail pause_stops_steps "status never said paused"
fi
TM send-keys -t wb Space
a=$(step_of wb); sleep 2; b=$(step_of wb)
if [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt "$a" ]; then pass resume; else fail resume "step $a -> $b after resume"; fi

# P: a parity check against the other device; here there is no GPU, so the
# reason, in events.log, and training goes on
TM send-keys -t wb P
if wait_file "$RUN/events.log" "cannot check parity against cuda: " 10; then
    a=$(step_of wb); sleep 1.5; b=$(step_of wb)
    if [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt "$a" ]; then pass parity_key_reports
    else fail parity_key_reports "step $a -> $b after P"; fi
else
    fail parity_key_reports "no parity outcome in $RUN/events.log"
fi

# n adds a note to events.log
TM send-keys -t wb n
TM send-keys -t wb -l "hello from tmux"
TM send-keys -t wb Enter
wait_file "$RUN/events.log" "note: hello from tmux" 10 && pass note_in_events_log ||
    fail note_in_events_log "no note in $RUN/events.log"

# the Lua prompt: a result, and an error that does not stop the training
TM send-keys -t wb :
TM send-keys -t wb -l "'lr=' .. string.format('%.3f', run.base_lr * 2)"
TM send-keys -t wb Enter
wait_for wb "lua lr=0.060" 10 && pass lua_prompt_result || fail lua_prompt_result "no result in the log"
TM send-keys -t wb :
TM send-keys -t wb -l "error('boom')"
TM send-keys -t wb Enter
if wait_for wb "lua error" 10; then
    a=$(step_of wb); sleep 1.5; b=$(step_of wb)
    [ "$b" -gt "$a" ] 2>/dev/null && pass lua_error_keeps_training || fail lua_error_keeps_training "steps $a -> $b"
else
    fail lua_error_keeps_training "no lua error in the log"
fi

# the control socket of the workbench's training answers
r=$(ctl "$RUN" '{"cmd":"status"}' 2>&1)
grep -q '"ok":true' <<<"$r" && pass workbench_control_socket || fail workbench_control_socket "$r"

# resize: a clean screen at each size, the too-small message
TM resize-window -t wb -x 100 -y 30
sleep 1
m=$(titles_ok wb)
long=$(screen wb | python3 -c 'import sys; print(sum(len(l.rstrip("\n")) > 100 for l in sys.stdin))')
[ -z "$m" ] && [ "$long" -eq 0 ] && pass resize_larger || fail resize_larger "missing$m, $long long lines"
TM resize-window -t wb -x 40 -y 10
wait_for wb "enlarge the terminal" 5 && pass too_small_message || fail too_small_message "no message at 40x10"
TM resize-window -t wb -x 80 -y 24
sleep 1
m=$(titles_ok wb)
stale=$(screen wb | grep -c "enlarge")
[ -z "$m" ] && [ "$stale" -eq 0 ] && pass resize_back_clean || fail resize_back_clean "missing$m, stale lines $stale"

# q asks, y stops the training: summary written, clean exit
TM send-keys -t wb q
wait_for wb "quit? [y/N]" 5 && pass quit_asks || fail quit_asks "no question"
TM send-keys -t wb y
if wait_file "$OUT/wb.rc" . 30; then
    st=$(sed -n 's/.*"status":[[:space:]]*"\([a-z]*\)".*/\1/p' "$RUN/summary.json")
    rc=$(cat "$OUT/wb.rc")
    [ "$rc" = 0 ] && [ "$st" = stopped ] && pass quit_writes_summary || fail quit_writes_summary "exit $rc, status '$st'"
    [ -S "$RUN/control.sock" ] && fail socket_removed "control.sock left behind" || pass socket_removed
else
    fail quit_writes_summary "the workbench did not exit"
fi
FINISHED_RUN=$RUN

# --- watch: a finished run ---------------------------------------------------------
start wf 80 24 "$DLBENCH" watch "$FINISHED_RUN"
if wait_for wf "stopped" 10 && wait_for wf "1 Loss" 2; then
    m=$(titles_ok wf)
    if [ -n "$m" ]; then fail watch_finished "missing$m"
    elif screen wf | grep -q "no points yet"; then fail watch_finished "no chart points"
    else pass watch_finished; fi
else
    fail watch_finished "screen:"; screen wf | head -3 | sed 's/^/    /'
fi
TM send-keys -t wf q
wait_file "$OUT/wf.rc" . 10 && pass watch_quits || fail watch_quits "watch did not exit"

# --- a live headless run: watch, control socket ------------------------------------
"$DLBENCH" run "$SCRIPT" $LONG --force -q >"$OUT/headless.log" 2>&1 &
HEADLESS=$!
for ((i = 0; i < 100; i++)); do
    RUN=$(newest_run)
    [ "$RUN" != "$FINISHED_RUN" ] && [ -S "$RUN/control.sock" ] && break
    sleep 0.2
done
if [ ! -S "$RUN/control.sock" ]; then
    fail headless_socket "no control.sock in $RUN"
else
    mode=$(stat -c %a "$RUN/control.sock")
    [ "$mode" = 600 ] && pass socket_mode_0600 || fail socket_mode_0600 "mode $mode"
    start wl 80 24 "$DLBENCH" watch "$RUN"
    wait_for wl "running" 15 && pass watch_live || fail watch_live "no running status"
    TM send-keys -t wl Space
    wait_file "$RUN/events.log" "paused:" 10 && pass watch_pause_through_socket ||
        fail watch_pause_through_socket "no pause in events.log"
    wait_for wl "paused" 10
    TM send-keys -t wl Space
    wait_file "$RUN/events.log" "resumed:" 10 && pass watch_resume_through_socket ||
        fail watch_resume_through_socket "no resume in events.log"
    TM send-keys -t wl q
    # every command through the socket
    ok=1
    for msg in '{"cmd":"status"}' '{"cmd":"pause"}' '{"cmd":"resume"}' '{"cmd":"lr","value":0.01}' \
        '{"cmd":"checkpoint","name":"socket-test"}' '{"cmd":"note","text":"via socket"}' \
        '{"cmd":"device","device":"cpu"}' '{"cmd":"device","device":"cuda"}'; do
        r=$(ctl "$RUN" "$msg" 2>&1)
        grep -q '"ok":true' <<<"$r" || { ok=0; fail "socket $msg" "$r"; }
    done
    [ $ok = 1 ] && pass socket_commands_accepted
    wait_file "$RUN/events.log" "note: via socket" 10 &&
        wait_file "$RUN/events.log" "learning rate .* -> 0.01" 10 &&
        wait_file "$RUN/events.log" "checkpoint-socket-test.h5" 10 &&
        [ -f "$RUN/checkpoint-socket-test.h5" ] && pass socket_commands_applied ||
        fail socket_commands_applied "events.log lacks the note, lr or checkpoint-socket-test.h5"
    wait_file "$RUN/events.log" "cuda" 10 && pass socket_switch_reports ||
        fail socket_switch_reports "no outcome of the switch to cuda in events.log"
    # a parity check against a second CPU backend: reported, within tolerance
    r=$(ctl "$RUN" '{"cmd":"parity","device":"cpu:1","steps":3}' 2>&1)
    if grep -q '"ok":true' <<<"$r" &&
        wait_file "$RUN/events.log" "parity: step [0-9]*, 3 steps on cpu and cpu:1: .* within" 10; then
        pass socket_parity_check
    else
        fail socket_parity_check "$r; $(grep parity "$RUN/events.log" | tail -2)"
    fi
    r=$(ctl "$RUN" '{"cmd":"parity","steps":0}' 2>&1)
    grep -q '"ok":false.*steps' <<<"$r" && pass socket_parity_bad_steps ||
        fail socket_parity_bad_steps "$r"
    sleep 1
    before=$(wc -l <"$RUN/events.log")
    ok=1
    for msg in 'not json' '{"cmd":"fly"}' '{"cmd":"lr","value":-1}' '{"cmd":"lr"}' \
        '{"cmd":"device","device":"tpu"}' '{"cmd":"note"}' '[1,2]'; do
        r=$(ctl "$RUN" "$msg" 2>&1)
        grep -q '"ok":false' <<<"$r" && grep -q '"error"' <<<"$r" || { ok=0; fail "socket refuses $msg" "$r"; }
    done
    sleep 0.5
    after=$(wc -l <"$RUN/events.log")
    [ $ok = 1 ] && [ "$before" = "$after" ] && pass socket_malformed_refused ||
        fail socket_malformed_refused "events.log grew $before -> $after"
    r=$(ctl "$RUN" '{"cmd":"stop"}' 2>&1)
    wait "$HEADLESS"
    rc=$?
    HEADLESS=
    st=$(sed -n 's/.*"status":[[:space:]]*"\([a-z]*\)".*/\1/p' "$RUN/summary.json")
    [ "$rc" = 0 ] && [ "$st" = stopped ] && pass socket_stop || fail socket_stop "exit $rc, status '$st'"
fi

# --- SIGHUP: the workbench's training runs on to the end ---------------------------
start hup 80 24 "$DLBENCH" "$SCRIPT" epochs=30 n=200000 --out "$OUT/runs" --start --force
PREV=$(newest_run)
wait_for hup "running" 15
sleep 1
RUN=$(newest_run)
PID=$(pgrep -f "dlbench $SCRIPT epochs=30" | head -1)
TM kill-session -t hup
if [ -z "$PID" ]; then
    fail sighup_keeps_training "no workbench process found"
elif wait_file "$RUN/summary.json" '"finished"' 120; then
    grep -q "detached" "$RUN/events.log" && pass sighup_keeps_training ||
        fail sighup_keeps_training "finished but no 'detached' event"
else
    fail sighup_keeps_training "$RUN/summary.json never says finished"
fi
for ((i = 0; i < 50; i++)); do kill -0 "$PID" 2>/dev/null || break; sleep 0.2; done
kill -0 "$PID" 2>/dev/null && fail sighup_exits "process $PID still there after the end" || pass sighup_exits

# --- e: --set's FIELD=VALUE for fields the script does not declare --------------------
# (tui_spirals declares lr, hidden, epochs and n; batch and val_every are the
# experiment's own fields, which a k=v override could not reach)
start wbe 100 30 "$DLBENCH" "$SCRIPT" epochs=4 n=600 --out "$OUT/eruns"
wait_for wbe "4 Log" 15
TM send-keys -t wbe e
TM send-keys -t wbe -l "batch=24 val_every=3 precision=fp8"
TM send-keys -t wbe Enter
wait_for wbe "applies from the next start" 10
wait_for wbe "precision=fp8: precision takes" 5 && e_refused=1 || e_refused=0
TM send-keys -t wbe r
ERUN=""
for ((i = 0; i < 150; i++)); do
    ERUN=$(ls -d "$OUT"/eruns/*/ 2>/dev/null | head -1)
    [ -n "$ERUN" ] && [ -f "$ERUN/summary.json" ] && grep -q '"finished"' "$ERUN/summary.json" && break
    sleep 0.2
done
if [ -z "$ERUN" ] || ! grep -q '"finished"' "$ERUN/summary.json" 2>/dev/null; then
    fail e_set_fields "the run after e did not finish; screen:"
    screen wbe | tail -6 | sed 's/^/    /'
else
    got=$(python3 -c "
import json; c = json.load(open('${ERUN}config.json'))
print(c['batch'], c['val_every'], ' '.join(c.get('sets', [])))")
    if [ "$got" != "24 3 batch=24 val_every=3" ]; then
        fail e_set_fields "config.json after e: '$got'"
    elif [ "$e_refused" != 1 ]; then
        fail e_set_fields "no error for precision=fp8 on the screen"
    else
        pass e_set_fields
    fi
fi
TM send-keys -t wbe q
