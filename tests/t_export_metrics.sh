#!/usr/bin/env bash
# t_export_metrics.sh - `dlbench export-metrics` (CSV and JSON lines, -o written whole), `runs --csv`,
# `dlbench tag` and `runs --filter tag=T`: every step of every run checked against its
# metrics.jsonl with python3's csv and json readers.
. "$(dirname "$0")/lib.sh"
test_init
require_subcommand t_export export-metrics
RUNS="$OUT/runs"
for a in "lr=0.01 --seed 1" "lr=0.03 --seed 2"; do
    # shellcheck disable=SC2086
    run make_runs 0 run tests/tui_spirals.lua epochs=2 n=800 $a --out "$RUNS" || exit 0
done
A=$(ls "$RUNS" | sort | head -1) B=$(ls "$RUNS" | sort | tail -1)

# check FORMAT FILE: every record of both runs, in order, with the run's hyperparameters
check() {
    python3 - "$RUNS" "$1" "$2" "$A" "$B" <<'PY'
import csv, json, math, os, sys
runs, fmt, path, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = list(csv.DictReader(open(path))) if fmt == "csv" else [json.loads(l) for l in open(path)]
want = []
for n in names:
    cfg = json.load(open(os.path.join(runs, n, "config.json")))
    for line in open(os.path.join(runs, n, "metrics.jsonl")):
        want.append((n, cfg, json.loads(line)))
assert len(rows) == len(want), f"{len(rows)} rows, {len(want)} records"
for row, (n, cfg, rec) in zip(rows, want):
    assert row["run"] == n, (row["run"], n)
    assert float(row["seed"]) == cfg["seed"], row["seed"]
    # lr is also a logged metric: the hyperparameter's column is hp_lr
    assert float(row["hp_lr"]) == cfg["hparams"]["lr"], row["hp_lr"]
    assert float(row["hidden"]) == cfg["hparams"]["hidden"]
    for k, v in rec.items():
        got = row.get(k)
        if isinstance(v, str):
            assert got == v, (k, got, v)
        elif v is None:
            assert got in ("", None), (k, got)
        else:
            assert got not in ("", None) and float(got) == v, (n, rec.get("step"), k, got, v)
print(len(rows))
PY
}
if run export_csv 0 export-metrics "$A" "$B" --out "$RUNS" -o "$OUT/m.csv" &&
    n=$(check csv "$OUT/m.csv" 2>"$OUT/check.err"); then
    pass "export_csv_every_step ($n rows)"
else
    fail export_csv_every_step "$(tail -3 "$OUT/check.err" 2>/dev/null)"
fi
"$DLBENCH" export-metrics "$A" "$B" --out "$RUNS" --jsonl >"$OUT/m.jsonl" 2>"$OUT/j.err"
if n=$(check jsonl "$OUT/m.jsonl" 2>"$OUT/check.err"); then
    pass "export_jsonl_every_step ($n rows)"
else
    fail export_jsonl_every_step "$(tail -3 "$OUT/check.err")"
fi
run export_missing 2 export-metrics no-such-run --out "$RUNS" -o "$OUT/none.csv" &&
    [ ! -e "$OUT/none.csv" ] && grep -q "no-such-run" "$OUT/export_missing.log" &&
    pass export_missing_run || fail export_missing_run "expected exit 2 naming it, no file"

# runs --csv: a line per run with its hyperparameters and final metrics
"$DLBENCH" runs --out "$RUNS" --csv >"$OUT/runs.csv"
if python3 - "$RUNS" "$OUT/runs.csv" <<'PY'
import csv, json, os, sys
rows = {r["run"]: r for r in csv.DictReader(open(sys.argv[2]))}
assert len(rows) == 2, len(rows)
for n, r in rows.items():
    cfg = json.load(open(os.path.join(sys.argv[1], n, "config.json")))
    s = json.load(open(os.path.join(sys.argv[1], n, "summary.json")))
    assert float(r["lr"]) == cfg["hparams"]["lr"] and int(r["seed"]) == cfg["seed"]
    assert float(r["final_val_loss"]) == s["final"]["val_loss"]
    assert int(r["steps"]) == s["steps"] and r["status"] == "finished"
PY
then pass runs_csv; else fail runs_csv "runs --csv disagrees with the runs' files"; fi

# tags
run tag_add 0 tag "$A" best baseline --out "$RUNS" && grep -q "tags: best baseline" "$OUT/tag_add.log" &&
    pass tag_add || fail tag_add "$(cat "$OUT/tag_add.log")"
run tag_bad 2 tag "$B" "two words" --out "$RUNS" && [ ! -e "$RUNS/$B/tags.txt" ] &&
    pass tag_bad_refused || fail tag_bad_refused "a bad tag was not refused whole"
"$DLBENCH" runs --out "$RUNS" --filter tag=best >"$OUT/f.txt"
grep -q "$A" "$OUT/f.txt" && ! grep -q "$B" "$OUT/f.txt" && pass runs_filter_tag ||
    fail runs_filter_tag "$(cat "$OUT/f.txt")"
run tag_remove 0 tag "$A" best --remove --out "$RUNS" && [ "$(cat "$RUNS/$A/tags.txt")" = baseline ] &&
    pass tag_remove || fail tag_remove "tags.txt: $(cat "$RUNS/$A/tags.txt")"
