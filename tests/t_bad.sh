#!/usr/bin/env bash
# t_bad.sh - the bad-input corpus of tests/bad/: hostile scripts
# (tests/bad/scripts, "-- expect:" fragment), and the cases of tests/bad/cases
# (CSV, IDX and HDF5 files, command-line flags and overrides, damaged run
# folders). Each must exit with status 2 and the expected message: never a
# crash, a sanitizer report or a core dump. Prints "bad inputs handled / tried".
. "$(dirname "$0")/lib.sh"
test_init
BAD=$PWD/tests/bad
W=$OUT

require_subcommand t_bad run

# --- fixtures --------------------------------------------------------------------------
be32() { # a big-endian 32-bit number
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) \
        $(($1 >> 8 & 255)) $(($1 & 255)))"
}
zeros() { head -c "$1" /dev/zero; }
idx_images() { { be32 $((0x803)); be32 "$2"; be32 "$3"; be32 "$4"; zeros "$5"; } >"$W/$1-images-idx3-ubyte"; }
idx_labels() { { be32 $((0x801)); be32 "$2"; zeros "$3"; } >"$W/$1-labels-idx1-ubyte"; }
idx_images ok 10 4 4 160
idx_labels ok 10 10
idx_images huge 2147483647 28 28 100
idx_labels huge 2147483647 100
idx_images ovf 4294967295 4294967295 4294967295 100
idx_labels ovf 10 10
idx_images short 10 4 4 100
idx_labels short 10 10
{ be32 $((0x804)); be32 1; be32 1; be32 1; be32 1; } >"$W/magic-images-idx3-ubyte"
idx_labels magic 1 1
idx_images count 10 4 4 160
idx_labels count 9 9
idx_images zero 0 4 4 0
idx_labels zero 0 0
idx_images zerodim 10 0 4 0
idx_labels zerodim 10 10
gzip -c "$W/ok-images-idx3-ubyte" | head -c 30 >"$W/tgz-images-idx3-ubyte.gz"
gzip -c "$W/ok-labels-idx1-ubyte" >"$W/tgz-labels-idx1-ubyte.gz"
printf '\x00\x00\x08' >"$W/header-images-idx3-ubyte"
idx_labels header 10 10
mkdir -p "$W/emptydir"
{
    for _ in $(seq 100000); do printf 'a,'; done
    echo label
} >"$W/wide.csv"

"$DLBENCH" import --synthetic spirals "$W/ok.h5" >/dev/null 2>&1
"$DLBENCH" import --synthetic blobs --classes 3 "$W/blobs.h5" >/dev/null 2>&1
head -c 3000 "$W/ok.h5" >"$W/truncated.h5"
head -c 2000 /dev/urandom >"$W/junk.h5"
use_h5() { # name file group model
    cat >"$W/use_$1.lua" <<EOF
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
return dl.experiment {
  data = dl.data.hdf5 { path = "$W/$2", train = "$3" },
  model = nn.Sequential { $4 },
  optimizer = optim.SGD { lr = 0.1 }, batch = 16, epochs = 1,
}
EOF
}
use_h5 truncated truncated.h5 /train 'nn.Linear(2, 2)'
use_h5 junk junk.h5 /train 'nn.Linear(2, 2)'
use_h5 nogroup ok.h5 /nosuch 'nn.Linear(2, 2)'
use_h5 width ok.h5 /train 'nn.Linear(5, 2)'

# a good run folder, and damaged copies of it
"$DLBENCH" run tests/run_scripts/crash.lua epochs=1 --stop-after 10 --quiet --out "$W/r1" >/dev/null 2>&1
"$DLBENCH" run tests/run_scripts/crash.lua epochs=1 hidden=16 --stop-after 10 --quiet --out "$W/r2" >/dev/null 2>&1
good=$(find "$W/r1" -mindepth 1 -maxdepth 1 -type d | head -1)
other=$(find "$W/r2" -mindepth 1 -maxdepth 1 -type d | head -1)
if [ -z "$good" ] || [ ! -f "$good/checkpoint.h5" ] || [ ! -f "$other/checkpoint.h5" ]; then
    fail t_bad_fixtures "could not make the run folders for the run-folder cases"
    exit 0
fi
cp -r "$good" "$W/run"
damaged() { cp -r "$good" "$W/$1"; }
damaged no_config && rm "$W/no_config/config.json"
damaged bad_config && echo '{"overrides": [' >"$W/bad_config/config.json"
damaged no_script && rm "$W/no_script/script.lua"
damaged bad_script && echo 'return 42' >"$W/bad_script/script.lua"
damaged ckpt_flipped
size=$(stat -c %s "$W/ckpt_flipped/checkpoint.h5")
printf '\x55\xaa\x55\xaa' | dd of="$W/ckpt_flipped/checkpoint.h5" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
damaged ckpt_foreign && cp "$W/ok.h5" "$W/ckpt_foreign/checkpoint.h5"
damaged ckpt_torn && head -c $((size / 3)) "$good/checkpoint.h5" >"$W/ckpt_torn/checkpoint.h5"
damaged ckpt_empty && : >"$W/ckpt_empty/checkpoint.h5"
damaged ckpt_folder && rm "$W/ckpt_folder/checkpoint.h5" && mkdir "$W/ckpt_folder/checkpoint.h5"
damaged ckpt_other && cp "$other/checkpoint.h5" "$W/ckpt_other/checkpoint.h5"
damaged no_events && rm "$W/no_events/events.log"

# --- one case ------------------------------------------------------------------------------
tried=0 handled=0
check() { # name expect args...
    local name=$1 expect=$2
    shift 2
    tried=$((tried + 1))
    local log="$W/case.log"
    timeout -s KILL 60 "$DLBENCH" "$@" >"$log" 2>&1 </dev/null
    local rc=$?
    if [ "$rc" -ge 124 ] || grep -q 'AddressSanitizer\|runtime error:\|LeakSanitizer\|core dumped' "$log"; then
        fail "$name" "crashed or hung (status $rc): $(grep -m1 'Sanitizer\|runtime error' "$log")"
    elif [ "$rc" -ne 2 ]; then
        fail "$name" "exit status $rc, expected 2: $(head -2 "$log" | tr '\n' ' ')"
    elif ! grep -qF -- "$expect" "$log"; then
        fail "$name" "message lacks \"$expect\"; got: $(head -2 "$log" | tr '\n' ' ')"
    else
        handled=$((handled + 1))
        pass "$name"
    fi
}

for f in "$BAD"/scripts/*.lua; do
    expect=$(sed -n 's/^-- expect: //p' "$f" | head -1)
    check "bad_$(basename "$f" .lua)" "$expect" run "$f" --out "$W/noruns"
done
while IFS=$'\t' read -r name expect args; do
    case "$name" in '' | '#'*) continue ;; esac
    eval "set -- $args"
    check "$name" "$expect" "$@"
done <"$BAD/cases"
if [ -d "$W/noruns" ] && [ -n "$(ls -A "$W/noruns")" ]; then
    fail bad_no_run_folder "a bad input left a run folder: $(ls "$W/noruns")"
else
    pass bad_no_run_folder
fi
echo "bad inputs handled / tried: $handled / $tried (tests/bad; tests/bad_scripts runs in t_run.sh)"
