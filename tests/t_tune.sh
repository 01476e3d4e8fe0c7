#!/usr/bin/env bash
# t_tune.sh - `dlbench tune` end to end on the spirals study: trials as run
# folders tied to the journal, --report and its reproduce command, reuse of
# equal trials, a torn journal line (--report and resume read on), kill -9
# and resume, --jobs 2, bad study scripts (exit 2).
. "$(dirname "$0")/lib.sh"
test_init

require_subcommand t_tune tune "(not built or not dispatched)"

STUDY=scripts/spirals_tune.lua

# summary_field RUN_DIR KEY: the number after "KEY": in summary.json's "final" object
final_of() {
    sed -n '/"final"/,/}/p' "$1/summary.json" | sed -n "s/^[[:space:]]*\"$2\":[[:space:]]*\([^,]*\),\{0,1\}$/\1/p" | head -1
}
field_of() { # file key -> first "key": value
    sed -n "s/^[[:space:]]*\"$2\":[[:space:]]*\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$1" | head -1
}
journal_numbers() { # JOURNAL OP -> the trial numbers of OP records, one a line
    grep "\"op\":\"$2\"" "$1" | sed -n 's/.*"trial":\([0-9]*\).*/\1/p'
}

# --- a short study: N trials, run folders tied to the journal ----------------------
A=$OUT/a
J=$A/studies/spirals-tune/journal.jsonl
if run study 0 tune $STUDY trials=5 epochs=4 --out "$A"; then
    lines=$(grep -c '^trial [0-9]' "$OUT/study.log")
    dirs=$(find "$A" -maxdepth 1 -name '*-spirals-trial-*' | wc -l)
    attrs=$(grep -c '"key":"run_dir"' "$J" 2>/dev/null)
    bad=""
    for d in "$A"/*-spirals-trial-*; do
        [ -d "$d" ] || continue
        n=$(sed -n '/"study"/,/}/p' "$d/config.json" | sed -n 's/^[[:space:]]*"trial":[[:space:]]*\([0-9-]*\).*/\1/p')
        grep -q "\"name\":[[:space:]]*\"spirals-tune\"" "$d/config.json" || bad="$bad $(basename "$d"):no-study"
        grep -q "\"key\":\"run_dir\",\"value\":\"$d\"" "$J" || bad="$bad $(basename "$d"):not-in-journal"
        grep -q "\"run_dir\".*\"trial\":$n\b\|\"trial\":$n,\"key\":\"run_dir\"" "$J" || bad="$bad $(basename "$d"):trial-$n"
        [ "$(field_of "$d/summary.json" status)" = finished ] || [ "$(field_of "$d/summary.json" status)" = stopped ] ||
            bad="$bad $(basename "$d"):status"
    done
    if [ "$lines" -ne 5 ]; then
        fail study_trials "$lines progress lines, expected 5"
    elif [ "$dirs" -lt 1 ] || [ "$dirs" -ne "$attrs" ] || [ -n "$bad" ]; then
        fail study_run_folders "$dirs folders, $attrs run_dir attributes;$bad"
    elif ! grep -q '^study spirals-tune: 5 trials' "$OUT/study.log" || ! grep -q '^best: trial' "$OUT/study.log"; then
        fail study_summary "$(tail -3 "$OUT/study.log")"
    else
        pass study_trials
        pass study_run_folders
    fi
    # each progress line's duration is the journal's finish time less its start time
    if python3 - "$OUT/study.log" "$J" <<'PY'; then
import json, re, sys
t = {}
for l in open(sys.argv[2]):
    r = json.loads(l)
    if r.get("op") in ("start", "finish"):
        t.setdefault(r["trial"], {})[r["op"]] = r["time"]
n = 0
for l in open(sys.argv[1]):
    m = re.match(r"trial (\d+) .*  ([0-9.]+) (ms|s)  best", l)
    if not m:
        continue
    d = float(m.group(2)) / (1000 if m.group(3) == "ms" else 1)
    want = t[int(m.group(1))]["finish"] - t[int(m.group(1))]["start"]
    assert want > 0 and abs(d - want) <= max(0.051 * want, 0.0006), (l, want)
    n += 1
assert n == 5, n
PY
        pass trial_durations_real
    else
        fail trial_durations_real "progress-line durations disagree with the journal"
    fi
fi

# --- --report, and its command reproduces the best run -----------------------------
if run report 0 tune $STUDY trials=5 epochs=4 --out "$A" --report; then
    cmd=$(sed -n '/^reproduce the best run:/{n;s/^ *//;p}' "$OUT/report.log")
    best=$(sed -n 's/^best: trial \([0-9]*\).*/\1/p' "$OUT/report.log")
    bdir=$(grep "\"trial\":$best,\"key\":\"run_dir\"" "$J" | sed -n 's/.*"value":"\([^"]*\)".*/\1/p')
    if [ -z "$cmd" ] || [ -z "$best" ] || ! grep -q '^ *trial *state' "$OUT/report.log"; then
        fail report "no best trial, table or command: $(head -3 "$OUT/report.log")"
    else
        pass report
        case "$cmd" in
        "dlbench run $STUDY "*) ;;
        *) fail report_command "unexpected command: $cmd" ;;
        esac
        eval "set -- ${cmd#dlbench }"
        if run repro 0 "$@" --out "$OUT/repro"; then
            rdir=$(sed -n 's/^run folder: //p' "$OUT/repro.log" | tail -1)
            a=$(final_of "$bdir" val_acc)
            b=$(final_of "$rdir" val_acc)
            pa=$(field_of "$bdir/summary.json" params_sha256)
            pb=$(field_of "$rdir/summary.json" params_sha256)
            if [ -n "$a" ] && [ "$a" = "$b" ] && [ -n "$pa" ] && [ "$pa" = "$pb" ]; then
                pass report_command_reproduces
            else
                fail report_command_reproduces "val_acc $a vs $b, params $pa vs $pb ($cmd)"
            fi
        fi
    fi
fi
run nothing_left 0 tune $STUDY trials=5 epochs=4 --out "$A" && grep -q "nothing to do" "$OUT/nothing_left.log" &&
    pass finished_study_is_not_repeated

# --- equal parameters reuse the finished trial's result --------------------------------
cat >"$OUT/tiny.lua" <<'EOF'
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.study {
  name = "tiny", metric = "val_loss", sampler = "random", trials = 6,
  objective = function (trial)
    local h = trial:choice("hidden", { 4, 8 })
    return dl.experiment {
      name = "tiny-trial",
      data = dl.data.synthetic { kind = "spirals", n = 256, val = 64, classes = 2 },
      model = nn.Sequential { nn.Linear(2, h), nn.Tanh(), nn.Linear(h, 2) },
      optimizer = optim.Adam { lr = 0.01 }, batch = 32, epochs = 2, device = "cpu",
    }
  end,
}
EOF
if run reuse 0 tune "$OUT/tiny.lua" --out "$OUT/r"; then
    reused=$(grep -c 'reused trial' "$OUT/reuse.log")
    dirs=$(find "$OUT/r" -maxdepth 1 -name '*-tiny-trial-*' | wc -l)
    if [ "$reused" -ge 4 ] && [ "$dirs" -le 2 ] && [ $((reused + dirs)) -eq 6 ]; then
        pass equal_trials_reused
    else
        fail equal_trials_reused "$reused reused, $dirs run folders for 6 trials of 2 distinct"
    fi
fi

# --- a journal whose last line a killed writer cut short: report and resume read on ------------
TJ=$OUT/r/studies/tiny/journal.jsonl
if [ -f "$TJ" ]; then
    printf '{"op":"finish","trial":5,"state":"compl' >>"$TJ"
    torn_line=$(($(wc -l <"$TJ") + 1))
    if run torn_report 0 tune "$OUT/tiny.lua" --out "$OUT/r" --report &&
        grep -q "warning: .*journal.jsonl line $torn_line: unreadable" "$OUT/torn_report.log" &&
        grep -q '; 6 trials: 6 complete' "$OUT/torn_report.log"; then
        pass tune_report_skips_torn_line
    else
        fail tune_report_skips_torn_line "$(head -3 "$OUT/torn_report.log")"
    fi
    if run torn_resume 0 tune "$OUT/tiny.lua" --trials 7 --out "$OUT/r" &&
        run torn_report2 0 tune "$OUT/tiny.lua" --out "$OUT/r" --report &&
        grep -q '; 7 trials: 7 complete' "$OUT/torn_report2.log"; then
        pass tune_resume_after_torn_line
    else
        fail tune_resume_after_torn_line "$(tail -n 3 "$OUT/torn_resume.log" "$OUT/torn_report2.log")"
    fi
fi

# --- kill -9 while a trial trains, then resume ----------------------------------------------
K=$OUT/k
KJ=$K/studies/spirals-tune/journal.jsonl
kargs=(tune $STUDY trials=4 epochs=40 n=30000 --out "$K")
"$DLBENCH" "${kargs[@]}" >"$OUT/killed.log" 2>&1 &
pid=$!
killed=0
for _ in $(seq 1 300); do
    if [ -f "$KJ" ]; then
        starts=$(journal_numbers "$KJ" start | wc -l)
        ends=$(journal_numbers "$KJ" finish | wc -l)
        last=$((starts - 1))
        # a trial after the first is training: it has reported an epoch
        if [ "$ends" -ge 1 ] && [ "$starts" -gt "$ends" ] && grep -q "\"op\":\"report\",\"trial\":$last," "$KJ"; then
            kill -9 $pid 2>/dev/null && killed=1
            break
        fi
    fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
done
wait $pid 2>/dev/null
if [ "$killed" -ne 1 ]; then
    skip kill_resume "the study finished before it could be killed mid-trial"
else
    done_before=$(grep '"op":"finish"' "$KJ" | grep -c '"state":"complete"\|"state":"pruned"')
    if run resumed 0 "${kargs[@]}"; then
        done_after=$(grep '"op":"finish"' "$KJ" | grep -c '"state":"complete"\|"state":"pruned"')
        lost=$(grep '"op":"finish"' "$KJ" | grep -c '"reason":"lost')
        dup=$(journal_numbers "$KJ" finish | sort | uniq -d | wc -l)
        # every completed trial of the first process is still there, none ran again:
        # a trial runs in a new run folder only for a trial that never finished
        folders=$(find "$K" -maxdepth 1 -name '*-spirals-trial-*' | wc -l)
        tied=$(grep '"key":"run_dir"' "$KJ" | sed -n 's/.*"value":"\([^"]*\)".*/\1/p' | sort -u | wc -l)
        running=$(grep -l '"status":[[:space:]]*"running"' "$K"/*-spirals-trial-*/summary.json 2>/dev/null | wc -l)
        if [ "$done_after" -ne 4 ] || [ "$lost" -ne 1 ] || [ "$dup" -ne 0 ]; then
            fail kill_resume "complete/pruned $done_before then $done_after (want 4), lost $lost, duplicate finishes $dup"
        elif [ "$tied" -lt 4 ] || [ "$folders" -lt "$tied" ] || [ "$folders" -gt 5 ] || [ "$running" -ne 0 ]; then
            # the lost trial's folder exists when it was killed after making it
            fail kill_resume "$folders run folders ($tied tied to trials; want 4 and the lost one's), $running still 'running'"
        elif ! grep -q '^resuming: ' "$OUT/resumed.log" || [ "$(grep -c '^trial [0-9]' "$OUT/resumed.log")" -ne $((4 - done_before)) ]; then
            fail kill_resume "resume ran $(grep -c '^trial [0-9]' "$OUT/resumed.log") trials, expected $((4 - done_before))"
        else
            pass kill_resume
        fi
    fi
fi

# --- --jobs 2: two workers, one study, no lost or repeated trial ------------------------------
P=$OUT/p
PJ=$P/studies/spirals-tune/journal.jsonl
if run jobs 0 tune $STUDY trials=8 epochs=5 n=20000 --jobs 2 --out "$P"; then
    starts=$(journal_numbers "$PJ" start | wc -l)
    ustarts=$(journal_numbers "$PJ" start | sort -u | wc -l)
    ends=$(journal_numbers "$PJ" finish | sort -u | wc -l)
    pids=$(grep '"op":"start"' "$PJ" | sed -n 's/.*"pid":\([0-9]*\).*/\1/p' | sort -u | wc -l)
    maxn=$(journal_numbers "$PJ" start | sort -n | tail -1)
    if [ "$starts" -eq 8 ] && [ "$ustarts" -eq 8 ] && [ "$ends" -eq 8 ] && [ "$maxn" -eq 7 ] && [ "$pids" -eq 2 ] &&
        grep -q '^\[job 1\] trial' "$OUT/jobs.log" && grep -q '^\[job 2\] trial' "$OUT/jobs.log"; then
        pass jobs_2
    else
        fail jobs_2 "$starts starts ($ustarts unique, last $maxn), $ends finished, $pids processes"
    fi
fi

# --- bad study scripts and usage: exit 2 with a clear message -----------------------------------
bad_study() { # NAME EXPECTED-FRAGMENT LUA-BODY-OF-OBJECTIVE [STUDY-FIELDS]
    cat >"$OUT/$1.lua" <<EOF
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.study {
  name = "$1", metric = "val_acc", trials = 2, ${4:-}
  objective = function (trial)
    $3
    return dl.experiment {
      data = dl.data.synthetic { kind = "spirals", n = 128, val = 32 },
      model = nn.Sequential { nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 2) },
      optimizer = optim.SGD { lr = 0.1 }, epochs = 1, device = "cpu",
    }
  end,
}
EOF
    if run "bad_$1" 2 tune "$OUT/$1.lua" --out "$OUT/bad"; then
        if grep -qF -- "$2" "$OUT/bad_$1.log"; then
            pass "bad_$1"
        else
            fail "bad_$1" "message lacks \"$2\"; got: $(head -2 "$OUT/bad_$1.log")"
        fi
    fi
}
bad_study bounds "$OUT/bounds.lua:6: bad argument #4 (hi) to trial:float: expected a number >= lo (0.1)" \
    'trial:float("lr", 0.1, 0.001)'
bad_study log_bounds "bad argument #3 (lo) to trial:float: expected a number > 0" \
    'trial:float("lr", 0, 1, { log = true })'
bad_study int_bounds "bad argument #3 (lo) to trial:int: expected an integer" 'trial:int("n", 1.5, 4)'
bad_study sampler 'sampler must be "tpe", "random" or "grid", got "bayes"' '' 'sampler = "bayes",'
bad_study pruner 'pruner must be "none", "median" or "asha"' '' 'pruner = "hyperband",'
bad_study metric "monitor 'accuracy' is not a metric" '' 'metric = "accuracy",'
bad_study choices 'bad argument #3 (choices) to trial:choice' 'trial:choice("act", {})'
if [ -d "$OUT/bad" ] && [ -n "$(find "$OUT/bad" -maxdepth 1 -name '*-*' 2>/dev/null)" ]; then
    fail bad_studies_leave_no_run "run folders were created for bad studies"
fi
run not_a_study 2 tune scripts/spirals.lua --out "$OUT/bad" && grep -q "returns an experiment, not a study" "$OUT/not_a_study.log" &&
    pass not_a_study
run report_missing 2 tune $STUDY --out "$OUT/none" --report && grep -q "no study 'spirals-tune'" "$OUT/report_missing.log" &&
    pass report_without_study
run bad_jobs 2 tune $STUDY --jobs 0 && pass usage_bad_jobs
run run_study_no_params 2 run $STUDY --out "$OUT/bad" && grep -q "study parameter 'lr' has no value" "$OUT/run_study_no_params.log" &&
    pass run_study_needs_parameters
