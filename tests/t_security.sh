#!/usr/bin/env bash
# t_security.sh - run folders follow the user's umask and hold no
# world-writable file even under umask 000; control.sock is 0600 while a
# run is live and refuses another user by SO_PEERCRED even when opened up;
# no source file hands a string to a shell (system, popen).
. "$(dirname "$0")/lib.sh"
test_init

require_subcommand t_security run
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
# another user: refused by the socket's mode, and by SO_PEERCRED behind it
# (the socket opened up to 0666 to get past the mode). Needs root, the
# user nobody, runuser and python3 for the client.
peer() { # prints the reply of one status request as user nobody
    runuser -u nobody -- python3 - "$sock" <<'PY' 2>&1
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("connect:", e.strerror)
    sys.exit(0)
try:
    s.sendall(b'{"cmd":"status"}\n')
except BrokenPipeError:
    pass  # refused before the request arrived: the reply is still there to read
s.settimeout(5)
print(s.recv(4096).decode(errors="replace").strip())
PY
}
if [ -z "$sock" ]; then
    skip control_sock_other_user "no control.sock"
elif [ "$(id -u)" != 0 ] || ! id nobody >/dev/null 2>&1 || ! command -v runuser >/dev/null ||
    ! command -v python3 >/dev/null; then
    skip control_sock_other_user "needs root, the user nobody, runuser and python3"
else
    # let nobody reach the folder: every directory above the socket searchable
    dir=$(dirname "$sock")
    while [ "$dir" != / ]; do
        chmod o+x "$dir" 2>/dev/null
        dir=$(dirname "$dir")
    done
    by_mode=$(peer)
    chmod 0666 "$sock"
    by_cred=$(peer)
    if [[ "$by_mode" == *"Permission denied"* ]] &&
        [[ "$by_cred" == *"refused: connection from another user"* ]]; then
        pass control_sock_other_user
    else
        fail control_sock_other_user "mode 0600: '$by_mode'; mode 0666: '$by_cred'"
    fi
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
