#!/usr/bin/env bash
# t_crash.sh - crash safety of headless runs: SIGKILL at random moments and
# inside checkpoint writes (DLBENCH_FAULT=checkpoint-kill=N), a resume after
# each kill, and final parameters equal to an uninterrupted run's; a full
# disk during a checkpoint (a small tmpfs, else DLBENCH_FAULT=checkpoint-enospc)
# keeps the previous checkpoint and reports the error; a kill while a run
# folder is made (DLBENCH_FAULT=runlog-kill=N) leaves no visible run.
# CRASH_KILLS (default 24) and CRASH_SEED (default: random, printed) vary it.
. "$(dirname "$0")/lib.sh"
test_init
SCRIPT=tests/run_scripts/crash.lua
KILLS=${CRASH_KILLS:-24}
SEED=${CRASH_SEED:-$(( $(date +%s) % 100000 ))}
RANDOM=$SEED
MNT=""
cleanup() {
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
}

require_subcommand t_crash run

# the (step, loss) sequence of a run's metrics: what an uninterrupted run logs
step_losses() { sed -n 's/^{"kind":"step","step":\([0-9]*\),.*"loss":\([^,]*\),.*/\1 \2/p' "$1/metrics.jsonl"; }
only_dir() { find "$1" -mindepth 1 -maxdepth 1 -type d ! -name '.*' 2>/dev/null | head -1; }

echo "seed $SEED (CRASH_SEED=$SEED reproduces the kill times)"

# --- the uninterrupted reference ----------------------------------------------------
if ! "$DLBENCH" run "$SCRIPT" --quiet --out "$OUT/ref" >"$OUT/ref.log" 2>&1; then
    fail crash_reference "the uninterrupted run failed: $(tail -3 "$OUT/ref.log")"
    exit 0
fi
ref=$(only_dir "$OUT/ref")
ref_sha=$(json_field "$ref/summary.json" params_sha256)
step_losses "$ref" >"$OUT/ref.steps"

# --- the kill loop -----------------------------------------------------------------------
# kills: SIGKILLs that landed; survived: of those, the ones after which the
# next start resumed (or began again) and trained on; in_ckpt: kills that
# left a checkpoint temporary file, i.e. hit a checkpoint write.
kills=0 survived=0 pending=0 in_ckpt=0 seam=0 runs=0 attempts=0 ok=1
while [ "$kills" -lt "$KILLS" ] && [ "$ok" = 1 ]; do
    runs=$((runs + 1))
    base="$OUT/k$runs"
    while :; do
        attempts=$((attempts + 1))
        dir=$(only_dir "$base")
        if [ -n "$dir" ] && [ ! -f "$dir/config.json" ]; then
            fail crash_half_made_run "a visible run folder without config.json: $dir"
            ok=0
            break
        fi
        if [ -n "$dir" ]; then
            args=(run --resume "$dir" --out "$base")
        else
            args=(run "$SCRIPT" --force --out "$base")
        fi
        log="$OUT/attempt$attempts.log"
        if [ "$kills" -lt "$KILLS" ] && [ $((attempts % 3)) -eq 0 ]; then
            # dies inside the N-th checkpoint save, between the temporary file and the rename
            DLBENCH_FAULT=checkpoint-kill=$((1 + RANDOM % 8)) "$DLBENCH" "${args[@]}" >"$log" 2>&1 &
            pid=$!
            seam=$((seam + 1))
        elif [ "$kills" -lt "$KILLS" ]; then
            "$DLBENCH" "${args[@]}" >"$log" 2>&1 &
            pid=$!
            sleep "0.$(printf '%03d' $((20 + RANDOM % 380)))"
            kill -KILL "$pid" 2>/dev/null
        else
            "$DLBENCH" "${args[@]}" >"$log" 2>&1 &
            pid=$!
        fi
        wait "$pid" 2>/dev/null
        rc=$?
        if grep -q '^resuming: \|^training: ' "$log" || [ "$rc" -eq 0 ]; then
            survived=$((survived + pending))
            pending=0
        fi
        if [ "$rc" -eq 137 ]; then
            kills=$((kills + 1))
            pending=$((pending + 1))
            d=$(only_dir "$base")
            if [ -n "$d" ] && ls "$d"/checkpoint*.h5.tmp.* >/dev/null 2>&1; then
                in_ckpt=$((in_ckpt + 1))
            fi
            continue
        fi
        if [ "$rc" -ne 0 ]; then
            fail crash_resume "attempt $attempts (${args[*]}) exited with status $rc:"
            sed 's/^/    /' "$log" | tail -6
            ok=0
        fi
        break
    done
    [ "$ok" = 1 ] || break
    dir=$(only_dir "$base")
    sha=$(json_field "$dir/summary.json" params_sha256)
    st=$(json_field "$dir/summary.json" status)
    if [ "$st" != finished ] || [ -z "$sha" ] || [ "$sha" != "$ref_sha" ]; then
        fail crash_params_equal "run $runs: status '$st', params $sha, uninterrupted $ref_sha"
        ok=0
    elif ! step_losses "$dir" | cmp -s - "$OUT/ref.steps"; then
        fail crash_metrics_equal "run $runs: metrics.jsonl steps/losses differ from the uninterrupted run's"
        ok=0
    elif ls "$dir"/*.tmp.* >/dev/null 2>&1; then
        fail crash_no_temp_files "run $runs left $(ls "$dir" | grep '\.tmp\.' | head -3)"
        ok=0
    fi
done
echo "kills survived / tried: $survived / $kills ($in_ckpt inside a checkpoint write, $seam through the fault seam; $runs runs, $attempts starts)"
if [ "$ok" = 1 ] && [ "$kills" -ge 20 ] && [ "$survived" -eq "$kills" ] && [ "$in_ckpt" -ge 1 ]; then
    pass crash_kill_loop
    pass crash_params_equal
    pass crash_metrics_equal
elif [ "$ok" = 1 ]; then
    fail crash_kill_loop "$survived / $kills survived, $in_ckpt inside a checkpoint write"
fi

# --- a full disk during a checkpoint ------------------------------------------------------
FULL="$OUT/full"
mkdir -p "$FULL"
how=seam
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=1m dlbench-test "$FULL" 2>/dev/null; then
    MNT=$FULL
    how=tmpfs
fi
if ! "$DLBENCH" run "$SCRIPT" --quiet --stop-after 20 --out "$FULL/runs" >"$OUT/full1.log" 2>&1; then
    fail full_disk "the first leg failed: $(tail -3 "$OUT/full1.log")"
    exit 0
fi
d=$(only_dir "$FULL/runs")
before=$(sha256sum <"$d/checkpoint.h5")
fault=""
if [ "$how" = tmpfs ]; then
    # fill it, then free 64 KiB: room for the logs, none for a 200 KiB checkpoint
    dd if=/dev/zero of="$FULL/filler" bs=4k >/dev/null 2>&1
    truncate -s -64K "$FULL/filler"
else
    fault=checkpoint-enospc
fi
DLBENCH_FAULT=$fault "$DLBENCH" run --resume "$d" --stop-after 40 --out "$FULL/runs" >"$OUT/full2.log" 2>&1
rc=$?
after=$(sha256sum <"$d/checkpoint.h5")
if [ "$rc" -ne 1 ]; then
    fail full_disk "($how) exit status $rc, expected 1: $(tail -3 "$OUT/full2.log")"
elif ! grep -q "No space left on device" "$OUT/full2.log" ||
    ! grep -q "final checkpoint could not be written" "$OUT/full2.log"; then
    fail full_disk "($how) the error is not reported: $(tail -3 "$OUT/full2.log")"
elif [ "$before" != "$after" ]; then
    fail full_disk "($how) the previous checkpoint.h5 changed"
elif ls "$d"/*.tmp.* >/dev/null 2>&1; then
    fail full_disk "($how) temporary files left: $(ls "$d" | grep '\.tmp\.')"
else
    pass "full_disk_keeps_checkpoint ($how)"
fi
# space again: the run continues from the kept checkpoint to the same end
rm -f "$FULL/filler"
if "$DLBENCH" run --resume "$d" --quiet --out "$FULL/runs" >"$OUT/full3.log" 2>&1 &&
    [ "$(json_field "$d/summary.json" params_sha256)" = "$ref_sha" ]; then
    pass full_disk_resume_after
else
    fail full_disk_resume_after "$(tail -3 "$OUT/full3.log")"
fi

# --- a kill while the run folder is made --------------------------------------------------
# runlog-kill=1: the temporary folder and its lock exist; 2: config.json
# too; 3: every initial file, just before the rename into place
made_ok=1
for stage in 1 2 3; do
    R="$OUT/made$stage"
    DLBENCH_FAULT=runlog-kill=$stage "$DLBENCH" run "$SCRIPT" --quiet --out "$R" >"$OUT/made$stage.log" 2>&1 &
    wait $! 2>/dev/null
    rc=$?
    visible=$(find "$R" -mindepth 1 -maxdepth 1 ! -name '.*' 2>/dev/null | wc -l)
    hidden=$(find "$R" -mindepth 1 -maxdepth 1 -name '.*.tmp-*' 2>/dev/null | wc -l)
    "$DLBENCH" runs --out "$R" >"$OUT/made$stage.runs" 2>"$OUT/made$stage.err"
    rrc=$?
    if [ "$rc" -ne 137 ] || [ "$visible" -ne 0 ] || [ "$hidden" -ne 1 ]; then
        fail "crash_making_run_folder_$stage" "exit $rc, $visible visible and $hidden hidden entries"
        made_ok=0
    elif [ "$rrc" -ne 0 ] || ! grep -q '(no runs in' "$OUT/made$stage.runs" ||
        ! grep -q '1 half-made run folder left by a crash' "$OUT/made$stage.err"; then
        fail "crash_making_run_folder_$stage" "runs (exit $rrc): $(cat "$OUT/made$stage.runs" "$OUT/made$stage.err" | head -3)"
        made_ok=0
    elif ! "$DLBENCH" run "$SCRIPT" --quiet --stop-after 5 --out "$R" >"$OUT/made$stage.next" 2>&1 ||
        [ "$(find "$R" -mindepth 1 -maxdepth 1 -name '.*' | wc -l)" -ne 0 ] ||
        [ "$(find "$R" -mindepth 1 -maxdepth 1 ! -name '.*' | wc -l)" -ne 1 ]; then
        fail "crash_making_run_folder_$stage" "the next run did not clear the leftover: $(ls -A "$R")"
        made_ok=0
    fi
done
[ "$made_ok" = 1 ] && pass crash_making_run_folder_leaves_no_run
