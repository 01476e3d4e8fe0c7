#!/usr/bin/env bash
# t_text.sh - `dlbench import --text` and dl.data.text end to end: bytes and chars (multibyte, u16),
# the file read back with h5dump, folders, bad input (exit 2 naming the file), the fortunes corpus
. "$(dirname "$0")/lib.sh"
test_init
W=$OUT
require_subcommand t_text import

# imp NAME STATUS PATTERN ARGS...: dlbench import ARGS, its status and a pattern of its output
imp() {
    local name=$1 want=$2 pattern=$3
    shift 3
    "$DLBENCH" import "$@" >"$W/$name.log" 2>&1 </dev/null
    local rc=$?
    if [ $rc -ne "$want" ]; then
        fail "$name" "status $rc, want $want: $(head -c 300 "$W/$name.log")"
        return 1
    elif [ -n "$pattern" ] && ! grep -qF -- "$pattern" "$W/$name.log"; then
        fail "$name" "output lacks '$pattern': $(head -c 300 "$W/$name.log")"
        return 1
    fi
    pass "$name"
}
# raw FILE OBJECT -d|-a: the bytes of a dataset or attribute as stored
# (-b LE writes no string attribute; the file's own order is little-endian)
raw() {
    rm -f "$W/raw.bin"
    h5dump -b FILE "$3" "$2" -o "$W/raw.bin" "$1" >/dev/null 2>&1 && cat "$W/raw.bin"
}
have_h5dump=0
command -v h5dump >/dev/null && have_h5dump=1
# the same file through h5py when it is there (a second reader)
have_h5py=0
python3 -c 'import h5py' 2>/dev/null && have_h5py=1

# --- bytes: two files, tails of 30% each ------------------------------------------------
printf 'abcabc\n' >"$W/t1.txt"
printf 'xyz' >"$W/t2.txt"
imp text_bytes 0 "wrote $W/b.h5: 11 tokens (train 8, test 3), vocab 256 bytes, from 2 files" \
    --text "$W/t1.txt" "$W/t2.txt" "$W/b.h5" --vocab bytes --val-fraction 0.3
if [ $have_h5dump = 1 ] && [ -f "$W/b.h5" ]; then
    # t1: "abcab" | "c\n"; t2 (newline added): "xyz" | "\n"
    if [ "$(raw "$W/b.h5" /train/tokens -d | od -An -c | tr -s ' ')" = " a b c a b x y z" ] &&
        [ "$(raw "$W/b.h5" /test/tokens -d | od -An -c | tr -s ' ')" = ' c \n \n' ] &&
        h5dump -H -d /train/tokens "$W/b.h5" | grep -q H5T_STD_U8LE &&
        h5dump -a /vocab_kind "$W/b.h5" | grep -q '"bytes"' &&
        h5dump -a /vocab_size "$W/b.h5" | grep -q '(0): 256' &&
        h5dump -a /kind "$W/b.h5" | grep -q '"text"' &&
        ! h5dump -a /vocab "$W/b.h5" >/dev/null 2>&1 &&
        [ "$(raw "$W/b.h5" /sources -a | tr -d '\0')" = "$(sha256sum "$W/t1.txt" "$W/t2.txt")" ]; then
        pass text_bytes_read_back
    else
        fail text_bytes_read_back "tokens or attributes differ: $(h5dump "$W/b.h5" | head -c 600)"
    fi
else
    skip text_bytes_read_back "no h5dump (package hdf5-tools)"
fi

# compressed chunks hold the same ids
imp text_bytes_gzip 0 "11 tokens" --text "$W/t1.txt" "$W/t2.txt" "$W/bz.h5" --vocab bytes \
    --val-fraction 0.3 --gzip 6
if [ $have_h5dump = 1 ] && [ -f "$W/bz.h5" ]; then
    if [ "$(raw "$W/bz.h5" /train/tokens -d | od -An -c)" = "$(raw "$W/b.h5" /train/tokens -d | od -An -c)" ] &&
        h5dump -p -H -d /train/tokens "$W/bz.h5" | grep -q DEFLATE; then
        pass text_bytes_gzip_read_back
    else
        fail text_bytes_gzip_read_back "$(h5dump -p -H -d /train/tokens "$W/bz.h5" | head -c 400)"
    fi
fi

# --- chars: a multibyte vocabulary, ids by code point ------------------------------------
printf '\xc3\xa9\xe2\x82\xaca\n\xc3\xa9' >"$W/u.txt" # "é€a\né", a newline added
imp text_chars 0 "6 tokens (train 4, test 2), vocab 4 chars, from 1 file" \
    --text "$W/u.txt" "$W/c.h5" --val-fraction 0.34
if [ $have_h5dump = 1 ] && [ -f "$W/c.h5" ]; then
    # vocab "\n" a é €: é € a \n é \n -> 2 3 1 0 | 2 0
    if [ "$(raw "$W/c.h5" /train/tokens -d | od -An -tu1 | tr -s ' ')" = " 2 3 1 0" ] &&
        [ "$(raw "$W/c.h5" /test/tokens -d | od -An -tu1 | tr -s ' ')" = " 2 0" ] &&
        [ "$(raw "$W/c.h5" /vocab -a | tr -d '\0' | od -An -tx1 | tr -s ' ')" = " 0a 61 c3 a9 e2 82 ac" ] &&
        h5dump -a /vocab_kind "$W/c.h5" | grep -q '"chars"' &&
        h5dump -a /vocab_size "$W/c.h5" | grep -q '(0): 4'; then
        pass text_chars_read_back
    else
        fail text_chars_read_back "tokens or vocab differ: $(h5dump "$W/c.h5" | head -c 600)"
    fi
    # more than 256 characters: u16 ids
    python3 -c 'import sys; sys.stdout.write("".join(chr(0x100 + i) for i in range(300)) * 2)' >"$W/wide.txt"
    imp text_chars_u16 0 "vocab 301 chars" --text "$W/wide.txt" "$W/w.h5"
    if h5dump -H -d /train/tokens "$W/w.h5" | grep -q H5T_STD_U16LE &&
        [ "$(raw "$W/w.h5" /train/tokens -d | od -An -tu2 -N6 | tr -s ' ')" = " 1 2 3" ]; then
        pass text_chars_u16_ids
    else
        fail text_chars_u16_ids "expected u16 ids 1 2 3 ...: $(h5dump -H "$W/w.h5" | head -c 400)"
    fi
else
    skip text_chars_read_back "no h5dump (package hdf5-tools)"
fi
if [ $have_h5py = 1 ] && [ -f "$W/c.h5" ]; then
    if python3 - "$W/c.h5" <<'PYEOF'; then pass text_chars_h5py; else fail text_chars_h5py "h5py reads other values"; fi
import sys, h5py
f = h5py.File(sys.argv[1], "r")
v = f.attrs["vocab"]
v = v.decode() if isinstance(v, bytes) else v
assert v == "\na\u00e9\u20ac", repr(v)
assert list(f["train/tokens"][:]) == [2, 3, 1, 0] and list(f["test/tokens"][:]) == [2, 0]
assert "".join(v[i] for i in f["train/tokens"][:]) == "\u00e9\u20aca\n"
PYEOF
else
    skip text_chars_h5py "python3 -c 'import h5py' fails (package python3-h5py); h5dump checked the file"
fi

# --- a folder: regular files by name, no *.dat, no link to a file taken -------------------
mkdir -p "$W/corpus" "$W/corpus/sub" "$W/emptydir"
printf 'one\n' >"$W/corpus/b"
printf 'two two\n' >"$W/corpus/a"
printf '\0\0\0\2' >"$W/corpus/a.dat"
ln -s a "$W/corpus/a.u8"
printf 'not read\n' >"$W/corpus/sub/c"
printf 'hidden\n' >"$W/corpus/.hidden"
imp text_folder 0 "12 tokens (train 10, test 2), vocab 7 chars, from 2 files" \
    --text "$W/corpus" "$W/f.h5" --val-fraction 0.15
if [ $have_h5dump = 1 ] && [ -f "$W/f.h5" ]; then
    if raw "$W/f.h5" /sources -a | grep -q "$W/corpus/a$" &&
        [ "$(raw "$W/f.h5" /sources -a | tr -d '\0' | awk '{print $2}' | tr '\n' ' ')" = "$W/corpus/a $W/corpus/b " ]; then
        pass text_folder_sources
    else
        fail text_folder_sources "sources: $(raw "$W/f.h5" /sources -a)"
    fi
fi

# --- bad input: exit 2 naming the file; nothing written -------------------------------------
printf 'GIF89a\0\1\2' >"$W/blob.gif"
printf 'caf\xe9\n' >"$W/latin1.txt"
: >"$W/empty.txt"
imp text_empty_folder 2 "emptydir: no text files in the folder" --text "$W/emptydir" "$W/o.h5"
imp text_binary_file 2 "blob.gif: not a text file: a NUL byte at byte offset 6" \
    --text "$W/t1.txt" "$W/blob.gif" "$W/o.h5"
imp text_binary_bytes 2 "blob.gif: not a text file" --text "$W/blob.gif" "$W/o.h5" --vocab bytes
imp text_invalid_utf8 2 "latin1.txt: not UTF-8 text: invalid byte 0xe9 at byte offset 3" \
    --text "$W/latin1.txt" "$W/o.h5" --vocab chars
imp text_latin1_as_bytes 0 "5 tokens" --text "$W/latin1.txt" "$W/l.h5" --vocab bytes --val-fraction 0.4
imp text_empty_file 2 "empty.txt: empty file" --text "$W/t1.txt" "$W/empty.txt" "$W/o.h5"
imp text_missing_file 2 "nosuch.txt: no such file or folder" --text "$W/nosuch.txt" "$W/o.h5"
imp text_bad_vocab 2 "--vocab \"words\": expected bytes or chars" --text "$W/t1.txt" "$W/o.h5" --vocab words
imp text_only_output 2 "" --text "$W/o.h5"
imp text_too_short 2 "leaves /test with 0" --text "$W/t2.txt" "$W/o.h5"
if [ "$(id -u)" -ne 0 ]; then
    cp "$W/t1.txt" "$W/locked.txt" && chmod 000 "$W/locked.txt"
    imp text_unreadable 2 "locked.txt: cannot open: Permission denied" --text "$W/locked.txt" "$W/o.h5"
else
    skip text_unreadable "running as root: a mode-000 file is still readable"
fi
if [ -e "$W/o.h5" ] || ls "$W"/*.tmp >/dev/null 2>&1; then
    fail text_bad_input_writes_nothing "left $(ls "$W"/o.h5 "$W"/*.tmp 2>/dev/null)"
else
    pass text_bad_input_writes_nothing
fi

# --- dl.data.text in a script --------------------------------------------------------------
# lua NAME PATTERN FIELDS: a script whose data is dl.data.text { FIELDS }; it raises
# "DATA vocab context" once the description is made, so only the data is tested
lua() {
    cat >"$W/$1.lua" <<EOF
local dl = require "dlbench"
local data = dl.data.text { $3 }
error(("DATA %d %d"):format(data.vocab, data.context))
EOF
    run "$1" 2 run "$W/$1.lua" --out "$W/runs" || return 1
    if grep -qF -- "$2" "$W/$1.log"; then pass "$1"; else fail "$1" "lacks '$2': $(head -c 300 "$W/$1.log")"; fi
}
"$DLBENCH" import --synthetic spirals "$W/xy.h5" >/dev/null 2>&1
lua text_lua_vocab "DATA 4 16" "path = '$W/c.h5', context = 16"
lua text_lua_vocab_bytes "DATA 256 3" "path = '$W/b.h5', context = 3, val = '/test', limit = 10"
lua text_lua_missing "dl.data.text: path: $W/nosuch.h5: no such file" "path = '$W/nosuch.h5', context = 4"
lua text_lua_not_text "xy.h5: not a text data file" "path = '$W/xy.h5', context = 4"
lua text_lua_not_hdf5 "t1.txt: not an HDF5 file" "path = '$W/t1.txt', context = 4"
lua text_lua_context "bad field 'context' to dl.data.text" "path = '$W/c.h5', context = 0"
lua text_lua_unknown_field "unknown option 'contxt'" "path = '$W/c.h5', contxt = 4"
# what only opening the splits finds: a context longer than the split, a missing group
exp() {
    cat >"$W/$1.lua" <<EOF
local dl = require "dlbench"
local nn, optim = dl.nn, dl.optim
local data = dl.data.text { $3 }
return dl.experiment {
  data = data, model = nn.Sequential { nn.Embedding(data.vocab, 8), nn.Linear(8, data.vocab) },
  optimizer = optim.SGD { lr = 0.1 }, batch = 2, epochs = 1,
}
EOF
    run "$1" 2 run "$W/$1.lua" --out "$W/runs" || return 1
    if grep -qF -- "$2" "$W/$1.log"; then pass "$1"; else fail "$1" "lacks '$2': $(head -c 300 "$W/$1.log")"; fi
}
exp text_run_context_too_long "b.h5:/train: context 8 is longer than the split allows: 8 tokens" \
    "path = '$W/b.h5', context = 8"
exp text_run_missing_group "b.h5: no group /valid" "path = '$W/b.h5', context = 2, val = '/valid'"
if [ -d "$W/runs" ] && [ -n "$(ls -A "$W/runs")" ]; then
    fail text_run_no_folder "a bad data description left a run folder: $(ls "$W/runs")"
else
    pass text_run_no_folder
fi

# --- the fortunes corpus (Debian's fortunes; scripts/deps.sh installs it) ------------------
FORT=/usr/share/games/fortunes
if [ -d "$FORT" ]; then
    files=$(find "$FORT" -maxdepth 1 -type f ! -name '*.dat' ! -name '.*' | wc -l)
    t0=$(date +%s.%N)
    if imp text_fortunes 0 "from $files files" --text "$FORT" "$W/fortunes.h5"; then
        t1=$(date +%s.%N)
        echo "  $(cat "$W/text_fortunes.log") in $(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }") s"
        tokens=$(sed -n 's/.*: \([0-9]*\) tokens.*/\1/p' "$W/text_fortunes.log")
        if [ "${tokens:-0}" -gt 1000000 ]; then pass text_fortunes_size; else fail text_fortunes_size "only ${tokens:-?} tokens"; fi
    fi
else
    skip text_fortunes "no $FORT (package fortunes)"
fi
