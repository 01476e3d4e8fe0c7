#!/usr/bin/env bash
# t_security.sh - run folders follow the user's umask and hold no
# world-writable file even under umask 000; control.sock is 0600 while a
# run is live; no source file hands a string to a shell (system, popen).
set -u
cd "$(dirname "$0")/.."
DLBENCH=${DLBENCH:-build/dlbench}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

. "$(dirname "$0")/lib.sh"

if ! "$DLBENCH" run --help >/dev/null 2>&1; then
    skip t_security "$DLBENCH cannot run the 'run' subcommand"
    exit 0
fi
args=(tests/run_scripts/crash.lua epochs=1 n=640 every=4 --quiet)

# umask 077: nothing for group or others, anywhere in the run folder
(umask 077 && "$DLBENCH" run "${args[@]}" --out "$OUT/private" >"$OUT/private.log" 2>&1)
open=$(find "$OUT/private" -mindepth 1 -perm /077 -printf '%m %P\n' | head -5)
if [ -n "$(find "$OUT/private" -name checkpoint.h5)" ] && [ -z "$open" ]; then
    pass umask_077_respected
else
    fail umask_077_respected "group/other bits set: ${open:-no run folder: $(tail -2 "$OUT/private.log")}"
fi

# umask 000: still no world-writable file or folder
(umask 000 && "$DLBENCH" run "${args[@]}" --out "$OUT/open" >"$OUT/open.log" 2>&1)
ww=$(find "$OUT/open" -mindepth 1 -perm -o+w ! -type l -printf '%m %P\n' | head -5)
if [ -n "$(find "$OUT/open" -name checkpoint.h5)" ] && [ -z "$ww" ]; then
    pass no_world_writable_files
else
    fail no_world_writable_files "${ww:-no run folder: $(tail -2 "$OUT/open.log")}"
fi

# control.sock of a live run: mode 0600
(umask 000 && exec "$DLBENCH" run tests/run_scripts/long.lua --out "$OUT/live" >"$OUT/live.log" 2>&1) &
pid=$!
sock=""
for _ in $(seq 50); do
    sock=$(find "$OUT/live" -name control.sock 2>/dev/null | head -1)
    [ -n "$sock" ] && break
    sleep 0.1
done
if [ -z "$sock" ]; then
    skip control_sock_mode "no control.sock appeared (not part of this build?)"
elif [ "$(stat -c %a "$sock")" = 600 ]; then
    pass control_sock_mode
else
    fail control_sock_mode "mode $(stat -c %a "$sock")"
fi
kill -INT "$pid" 2>/dev/null
wait "$pid" 2>/dev/null

# no shell: no system() or popen() outside the tests; programs run by argument vector
hits=$(grep -rnE '\b(system|popen)[[:space:]]*\(' engine scripting tui views --include='*.c' --include='*.h' |
    grep -v '^[^:]*:[0-9]*:[[:space:]]*\(/\*\|\*\)' | head -5)
if [ -z "$hits" ]; then
    pass no_shell_calls
else
    fail no_shell_calls "$hits"
fi
