#!/usr/bin/env bash
# t_run.sh - end to end through $DLBENCH: example scripts (shortened), the
# run folder, duplicate guard, resume equivalence (parameters and metrics
# lines), SIGINT, runs/diff/note (a torn jsonl line, a bad --sort key),
# and the bad-script corpus (tests/bad_scripts: "-- expect:" fragment, exit 2).
. "$(dirname "$0")/lib.sh"
test_init

require_subcommand t_run run "(not built or not dispatched)"

run_dir_of() { sed -n 's/^run folder: //p' "$OUT/$1.log" | tail -1; }

# --- example scripts, shortened ------------------------------------------------
if run spirals 0 run scripts/spirals.lua epochs=3 --out "$OUT/runs"; then
    d=$(run_dir_of spirals)
    missing=""
    for f in config.json metrics.jsonl events.log summary.json checkpoint.h5 script.lua; do
        [ -s "$d/$f" ] || missing="$missing $f"
    done
    st=$(json_field "$d/summary.json" status)
    if [ -n "$missing" ]; then
        fail spirals_run_folder "missing:$missing"
    elif [ "$st" != finished ]; then
        fail spirals_run_folder "summary status '$st'"
    elif ! grep -q '"kind":"epoch"' "$d/metrics.jsonl" || ! grep -q '"val_acc"' "$d/summary.json" ||
        ! grep -q '"config_hash"' "$d/config.json" || ! grep -q '"script_sha256"' "$d/config.json" ||
        ! grep -q '"fingerprint"' "$d/config.json"; then
        fail spirals_run_folder "config/metrics/summary lack expected fields"
    else
        pass spirals_run_folder
    fi
    if grep -q $'\r' "$OUT/spirals.log"; then
        fail progress_on_pipe "carriage returns in piped output"
    else
        pass progress_on_pipe
    fi
    pass spirals
fi

if [ -d /usr/share/datasets/fashion-mnist ] || [ -n "${FMNIST_DIR:-}" ]; then
    # the examples read data/fashion-mnist.h5: prepared once, as `make run` does
    DLBENCH="$DLBENCH" bash scripts/prepare-data.sh >"$OUT/prepare.log" 2>&1 ||
        fail prepare_data "$(tail -n 3 "$OUT/prepare.log")"
    run fmnist_mlp 0 run scripts/fmnist_mlp.lua epochs=1 limit=2000 val_limit=500 hidden=32 \
        --out "$OUT/runs" && pass fmnist_mlp
    run fmnist_cnn 0 run scripts/fmnist_cnn.lua epochs=1 limit=512 val_limit=256 channels=4 \
        --out "$OUT/runs" && pass fmnist_cnn
else
    skip fmnist_mlp "no Fashion-MNIST IDX files in /usr/share/datasets/fashion-mnist"
    skip fmnist_cnn "no Fashion-MNIST IDX files in /usr/share/datasets/fashion-mnist"
fi
if run fmnist_tune 2 run scripts/fmnist_tune.lua --out "$OUT/runs"; then
    if grep -q "study parameter 'lr' has no value" "$OUT/fmnist_tune.log" &&
        grep -q "dlbench tune" "$OUT/fmnist_tune.log"; then
        pass fmnist_tune_refused
    else
        fail fmnist_tune_refused "no clear message"
    fi
fi

# --- custom Lua callbacks: metrics, set_lr, note, param, stop --------------------------
if run callbacks 0 run tests/run_scripts/callbacks.lua --out "$OUT/runs"; then
    d=$(run_dir_of callbacks)
    if grep -q "note: epoch 1: train_loss .*fc1.weight 8x2" "$d/events.log" &&
        grep -q "enough after 3 epochs" "$d/summary.json" &&
        [ "$(json_field "$d/summary.json" epochs)" = 3 ] &&
        grep -q '"lr":0.05' "$d/metrics.jsonl"; then
        pass lua_callbacks
    else
        fail lua_callbacks "events/summary do not show the callback's effects"
    fi
fi

# --- duplicate guard --------------------------------------------------------------
if run duplicate 3 run scripts/spirals.lua epochs=3 --out "$OUT/runs"; then
    if grep -q "same configuration" "$OUT/duplicate.log" && grep -q "val_acc" "$OUT/duplicate.log"; then
        pass duplicate_refused
    else
        fail duplicate_refused "message lacks the run and its result"
    fi
fi
run forced 0 run scripts/spirals.lua epochs=3 --force --out "$OUT/runs" && pass duplicate_force
run not_dup 0 run scripts/spirals.lua epochs=3 --seed 7 --out "$OUT/runs" && pass duplicate_other_seed

# --- resume equivalence -------------------------------------------------------------
if run full 0 run scripts/spirals.lua epochs=4 hidden=16 --out "$OUT/resume" &&
    run part 0 run scripts/spirals.lua epochs=4 hidden=16 --force --stop-after 45 --out "$OUT/resume"; then
    part=$(run_dir_of part)
    full=$(run_dir_of full)
    if [ "$(json_field "$part/summary.json" status)" != stopped ]; then
        fail resume "interrupted run's status is not 'stopped'"
    elif run resumed 0 run --resume "$part" --out "$OUT/resume"; then
        a=$(json_field "$full/summary.json" params_sha256)
        b=$(json_field "$part/summary.json" params_sha256)
        if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(json_field "$part/summary.json" status)" = finished ]; then
            pass resume_equivalence
        else
            fail resume_equivalence "final parameters differ ($a vs $b)"
        fi
        # the same metrics.jsonl lines as the uninterrupted run (timings aside):
        # no extra record for the partial window at the stop step
        untimed() { sed -E 's/"(time|samples_per_s|data_wait|seconds)":[^,}]*,?//g' "$1/metrics.jsonl"; }
        if diff <(untimed "$full") <(untimed "$part") >"$OUT/metrics.diff"; then
            pass resume_metrics_lines_equal
        else
            fail resume_metrics_lines_equal "stop at 45 + resume vs uninterrupted: $(head -4 "$OUT/metrics.diff" | tr '\n' ' ' | cut -c1-300)"
        fi
    fi
fi

# --- a damaged checkpoint is refused ---------------------------------------------------
if [ -n "${part:-}" ] && [ -f "$part/checkpoint.h5" ]; then
    cp -r "$part" "$OUT/resume/torn"
    head -c 2000 "$part/checkpoint.h5" >"$OUT/resume/torn/checkpoint.h5"
    if run torn 2 run --resume "$OUT/resume/torn" --out "$OUT/resume" &&
        grep -q "damaged\|cut short" "$OUT/torn.log"; then
        pass torn_checkpoint_refused
    else
        fail torn_checkpoint_refused "$(tail -2 "$OUT/torn.log")"
    fi
fi

# --- SIGINT: stop at a step boundary, checkpoint, "stopped" ------------------------------
"$DLBENCH" run tests/run_scripts/long.lua --out "$OUT/sig" >"$OUT/sig.log" 2>&1 &
pid=$!
for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    grep -q '^run folder\|^training' "$OUT/sig.log" 2>/dev/null && break
    sleep 0.2
done
sleep 0.5
kill -INT $pid
wait $pid
rc=$?
d=$(sed -n 's/^training: .*run folder //p' "$OUT/sig.log")
if [ "$rc" -eq 130 ] && [ "$(json_field "$d/summary.json" status)" = stopped ] && [ -f "$d/checkpoint.h5" ]; then
    pass sigint_stops_cleanly
else
    fail sigint_stops_cleanly "exit $rc, status $(json_field "$d/summary.json" status 2>/dev/null)"
fi

# --- runs, runs diff, note ------------------------------------------------------------------
if run runs 0 runs --out "$OUT/runs" && grep -q spirals "$OUT/runs.log" && grep -q finished "$OUT/runs.log"; then
    pass runs_table
else
    fail runs_table "$(head -3 "$OUT/runs.log")"
fi
if run runs_json 0 runs --out "$OUT/runs" --json --filter seed=7 && grep -q '"seed":	7' "$OUT/runs_json.log" &&
    ! grep -q '"seed":	0' "$OUT/runs_json.log"; then
    pass runs_json_filter
else
    fail runs_json_filter "filter seed=7 did not select the right runs"
fi
a=$(ls "$OUT/runs" | grep spirals | head -1)
b=$(basename "$(run_dir_of not_dup)")
if run diff 0 runs diff "$a" "$b" --out "$OUT/runs" && grep -q '^seed ' "$OUT/diff.log"; then
    pass runs_diff
else
    fail runs_diff "$(head -5 "$OUT/diff.log")"
fi
if run note 0 note "$b" "looks good" --out "$OUT/runs" && grep -q "note: looks good" "$OUT/runs/$b/events.log"; then
    pass note
else
    fail note "note not in events.log"
fi

# torn last lines (a writer killed mid-line) in a run's jsonl files: runs and diff read on
cp -r "$OUT/runs/$b" "$OUT/runs/$b-torn"
printf '{"kind":"step","step":99,"lo' >>"$OUT/runs/$b-torn/metrics.jsonl"
printf '{"t":1.0,"cpu_total":5}\n{"t":1.5,"cpu' >>"$OUT/runs/$b-torn/system.jsonl"
if run runs_torn 0 runs --out "$OUT/runs" && grep -q "^$b-torn " "$OUT/runs_torn.log" &&
    run diff_torn 0 runs diff "$b" "$b-torn" --out "$OUT/runs" && grep -q '(same configuration)' "$OUT/diff_torn.log"; then
    pass runs_read_past_torn_lines
else
    fail runs_read_past_torn_lines "$(tail -3 "$OUT/runs_torn.log" "$OUT/diff_torn.log" 2>/dev/null)"
fi
rm -rf "$OUT/runs/$b-torn"

# --- --sort KEY: an unknown key is bad input ----------------------------------------------------
if run sort_bad 2 runs --out "$OUT/runs" --sort nosuchkey &&
    grep -q -- "--sort nosuchkey: no run has that key; expected one of: id, .*status.*, epochs.*, val_acc" "$OUT/sort_bad.log"; then
    pass runs_sort_unknown_key
else
    fail runs_sort_unknown_key "$(head -2 "$OUT/sort_bad.log")"
fi
if run sort_good 0 runs --out "$OUT/runs" --sort val_acc --desc; then
    pass runs_sort_metric
fi
# a metric named "" (fuzzing found the key list looping on it forever)
one=$(find "$OUT/runs" -mindepth 2 -maxdepth 2 -name summary.json | head -1)
if [ -n "$one" ]; then
    cp -r "$(dirname "$one")" "$OUT/runs/zz-empty-key"
    sed -i 's/"final":[[:space:]]*{/"final": {"": 1,/' "$OUT/runs/zz-empty-key/summary.json"
    timeout 20 "$DLBENCH" runs --out "$OUT/runs" --sort nosuchkey >"$OUT/sort_empty.log" 2>&1
    rc=$?
    if grep -q '"final": {"": 1,' "$OUT/runs/zz-empty-key/summary.json" && [ "$rc" -eq 2 ]; then
        pass runs_sort_empty_metric_name
    else
        fail runs_sort_empty_metric_name "exit $rc (124: hung): $(head -c 200 "$OUT/sort_empty.log")"
    fi
    rm -rf "$OUT/runs/zz-empty-key"
fi

# --- usage errors -----------------------------------------------------------------------------
run bad_option 2 run scripts/spirals.lua --frobnicate && pass usage_unknown_option
run bad_device 2 run scripts/spirals.lua --device tpu && pass usage_bad_device
run no_script 2 run tests/bad_scripts/does-not-exist.lua --out "$OUT/runs" && pass usage_missing_script

# --- bad scripts corpus ---------------------------------------------------------------------
for f in tests/bad_scripts/*.lua; do
    name=bad_$(basename "$f" .lua)
    expect=$(sed -n 's/^-- expect: //p' "$f" | head -1)
    args=$(sed -n 's/^-- args: //p' "$f" | head -1)
    # shellcheck disable=SC2086
    if run "$name" 2 run "$f" $args --out "$OUT/bad"; then
        if grep -qF -- "$expect" "$OUT/$name.log"; then
            pass "$name"
        else
            fail "$name" "message lacks \"$expect\"; got: $(head -2 "$OUT/$name.log")"
        fi
    fi
done
if [ -d "$OUT/bad" ] && [ -n "$(ls -A "$OUT/bad")" ]; then
    fail bad_scripts_no_folder "a bad script left a run folder: $(ls "$OUT/bad")"
else
    pass bad_scripts_no_folder
fi
