#!/usr/bin/env bash
# t_lm.sh - language models end to end through $DLBENCH: a tiny text file made
# here, imported with --vocab chars; scripts/char_gpt.lua shortened (2 layers,
# d = 32, context 16, 60 steps) trains and its per-token val_loss falls
# (ln 16 = 2.77 nats untrained; below 1.8 after 3 epochs, by 0.1 from the first;
# val_ppl and val_bpc logged); `dlbench sample` prints N characters of the
# vocabulary, the same --seed gives the same text, a prompt character outside
# the vocabulary and a run that is not a language model are refused (exit 2);
# token ids above an Embedding's vocabulary are refused before a run folder
# is made.
. "$(dirname "$0")/lib.sh"
test_init

require_subcommand t_lm sample "(not built or not dispatched)"
if ! "$DLBENCH" import --help 2>&1 | grep -q -- '--text'; then
    skip t_lm "the text importer (dlbench import --text) is not in this build"
    exit 0
fi

run_dir_of() { sed -n 's/^run folder: //p' "$OUT/$1.log" | tail -1; }

# 400 lines of words drawn from 13 by a fixed linear congruential sequence
awk 'BEGIN {
    split("the cat sat on a mat dog ran to and big red hat", w, " ");
    x = 12345;
    for (i = 0; i < 400; i++) {
        x = (x * 1103515245 + 12345) % 2147483648; n = 3 + x % 6; line = "";
        for (k = 0; k < n; k++) {
            x = (x * 1103515245 + 12345) % 2147483648;
            line = line (k ? " " : "") w[1 + int(x / 65536) % 13];
        }
        print line;
    }
}' >"$OUT/tiny.txt"
run import 0 import --text "$OUT/tiny.txt" "$OUT/tiny.h5" --vocab chars || exit 0

# --- training --------------------------------------------------------------------
if run train 0 run scripts/char_gpt.lua path="$OUT/tiny.h5" layers=2 d=32 context=16 \
    limit=640 val_limit=64 epochs=3 warmup=5 lr=3e-3 --out "$OUT/runs"; then
    d=$(run_dir_of train)
    vals=$(sed -n 's/.*"kind":"epoch".*"val_loss":\([0-9.e+-]*\).*/\1/p' "$d/metrics.jsonl")
    first=$(echo "$vals" | head -1)
    last=$(echo "$vals" | tail -1)
    if [ "$(echo "$vals" | wc -l)" -ne 3 ]; then
        fail lm_val_loss "expected 3 epoch records with val_loss, got: $vals"
    elif ! awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.1 && b < 1.8) }'; then
        fail lm_val_loss "val_loss $first -> $last: expected a fall of 0.1 nats to below 1.8"
    elif ! grep -q '"val_ppl"' "$d/metrics.jsonl" || ! grep -q '"val_bpc"' "$d/summary.json"; then
        fail lm_val_loss "no val_ppl in metrics.jsonl or val_bpc in summary.json"
    else
        pass lm_val_loss
    fi
else
    exit 0
fi

# the script's dropout hyperparameter: dropout on both branches, a run that
# trains (it was refused by the attention layer when passed to its weights)
if run train_dropout 0 run scripts/char_gpt.lua path="$OUT/tiny.h5" layers=1 d=16 heads=2 \
    context=8 limit=128 val_limit=32 epochs=1 warmup=2 dropout=0.1 --out "$OUT/runs_dropout"; then
    dd=$(ls -d "$OUT"/runs_dropout/*/ 2>/dev/null | head -1)
    v=$(sed -n 's/.*"kind":"epoch".*"val_loss":\([0-9.e+-]*\).*/\1/p' "$dd/metrics.jsonl" 2>/dev/null)
    if [ -z "$v" ] || ! awk -v a="$v" 'BEGIN { exit !(a > 0 && a < 10) }'; then
        fail lm_dropout "expected an epoch with a finite val_loss, got '$v'"
    else
        pass lm_dropout
    fi
fi

# --- sampling --------------------------------------------------------------------
vocab=$(fold -w1 <"$OUT/tiny.txt" | sort -u | tr -d '\n')
if run sample1 0 sample "$d" --tokens 40 --seed 7 && run sample2 0 sample "$d" --tokens 40 --seed 7 &&
    run sample3 0 sample "$d" --tokens 40 --seed 8; then
    n=$(head -c -1 "$OUT/sample1.log" | wc -m)
    stray=$(head -c -1 "$OUT/sample1.log" | tr -d "$vocab\n")
    if [ "$n" -ne 40 ]; then
        fail lm_sample "expected 40 characters, got $n: $(cat "$OUT/sample1.log")"
    elif [ -n "$stray" ]; then
        fail lm_sample "characters outside the vocabulary: '$stray'"
    elif ! cmp -s "$OUT/sample1.log" "$OUT/sample2.log"; then
        fail lm_sample "the same --seed gave different text"
    elif cmp -s "$OUT/sample1.log" "$OUT/sample3.log"; then
        fail lm_sample "--seed 7 and --seed 8 gave the same text"
    else
        pass lm_sample
    fi
fi
if run sample_prompt 0 sample "$d" --prompt "the cat" --tokens 20 --top-k 3 --temperature 0.5 \
    --checkpoint best && [ "$(head -c -1 "$OUT/sample_prompt.log" | wc -m)" -eq 27 ] &&
    [ "$(head -c 7 "$OUT/sample_prompt.log")" = "the cat" ]; then
    pass lm_sample_prompt
else
    fail lm_sample_prompt "$(head -3 "$OUT/sample_prompt.log")"
fi
run sample_unknown 2 sample "$d" --prompt "the Zebra" &&
    grep -qF "character 'Z' (U+005A) is not in the vocabulary" "$OUT/sample_unknown.log" &&
    pass lm_sample_unknown_char
run sample_bad_temp 2 sample "$d" --temperature -1 && pass lm_sample_bad_temperature

# --- eval: per-token loss, perplexity and bits per character as training logged ----
if run lm_eval 0 eval "$d" --json && run lm_eval_text 0 eval "$d"; then
    last=$(grep '"kind":"epoch"' "$d/metrics.jsonl" | tail -1)
    if awk -v j="$(tr -d '\n\t ' <"$OUT/lm_eval.log")" -v m="$last" 'function num(s, k,   r) {
            if (!match(s, "\"" k "\":[-0-9.e+]+")) return "none";
            r = substr(s, RSTART + length(k) + 3, RLENGTH - length(k) - 3); return r + 0 }
        BEGIN { l = num(j, "loss"); v = num(m, "val_loss"); p = num(j, "perplexity");
                b = num(j, "bits_per_char"); a = num(j, "accuracy"); va = num(m, "val_acc");
                d = l - v; if (d < 0) d = -d;
                e = p - exp(l); if (e < 0) e = -e; f = b - l / log(2); if (f < 0) f = -f;
                exit !(d <= 1e-6 * v && e <= 1e-9 * p && f <= 1e-9 * b && a == va) }'; then
        if grep -q '^perplexity ' "$OUT/lm_eval_text.log" && grep -q '^bits/char ' "$OUT/lm_eval_text.log"; then
            pass lm_eval
        else
            fail lm_eval "the text report lacks perplexity or bits/char: $(cat "$OUT/lm_eval_text.log")"
        fi
    else
        fail lm_eval "eval $(tr -d '\n\t' <"$OUT/lm_eval.log" | head -c 300) against $last"
    fi
fi

# --- predict with a prompt: what sample prints, also through -o ------------------
if run lm_predict 0 predict "$d" "the cat" --tokens 20 && run lm_predict_sample 0 sample "$d" \
    --prompt "the cat" --tokens 20 && run lm_predict_file 0 predict "$d" "the cat" --tokens 20 \
    -o "$OUT/cont.txt"; then
    if cmp -s "$OUT/lm_predict.log" "$OUT/lm_predict_sample.log" &&
        cmp -s "$OUT/cont.txt" "$OUT/lm_predict_sample.log" &&
        [ "$(head -c 7 "$OUT/cont.txt")" = "the cat" ]; then
        pass lm_predict_prompt
    else
        fail lm_predict_prompt "predict: $(head -c 80 "$OUT/lm_predict.log"), sample: $(head -c 80 "$OUT/lm_predict_sample.log")"
    fi
fi

# --- not a language model --------------------------------------------------------
if run spirals 0 run scripts/spirals.lua epochs=1 --out "$OUT/runs" -q; then
    run sample_not_lm 2 sample "$(run_dir_of spirals)" &&
        grep -q "not a language model" "$OUT/sample_not_lm.log" && pass lm_sample_not_lm
fi

# --- token ids above the Embedding's vocabulary -----------------------------------
cat >"$OUT/small_vocab.lua" <<EOF
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local data = dl.data.text { path = "$OUT/tiny.h5", context = 8 }
return dl.experiment {
  data = data,
  model = nn.Sequential { nn.Embedding(4, 8), nn.Linear(8, data.vocab) },
  optimizer = optim.AdamW { lr = 1e-3 },
  epochs = 1, batch = 8,
}
EOF
max=$(printf '%s' "$vocab" | wc -m) # the letters, the space and the newline: ids 0 .. max
if run small_vocab 2 run "$OUT/small_vocab.lua" --out "$OUT/bad"; then
    if ! grep -q "Embedding" "$OUT/small_vocab.log" || ! grep -q "up to $max " "$OUT/small_vocab.log"; then
        fail lm_vocab_check "message lacks the layer or the id $max: $(cat "$OUT/small_vocab.log")"
    elif [ -d "$OUT/bad" ] && [ -n "$(ls -A "$OUT/bad")" ]; then
        fail lm_vocab_check "a run folder was left: $(ls "$OUT/bad")"
    else
        pass lm_vocab_check
    fi
fi
exit 0
