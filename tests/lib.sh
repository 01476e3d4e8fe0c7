# tests/lib.sh - the set-up and helpers shared by the shell tests (tests/t_*.sh).
# A test starts with
#   . "$(dirname "$0")/lib.sh"
#   test_init
# Results are lines tests/run.sh counts:
#   PASS name | FAIL name: why | SKIP name: reason

# test_init: `set -u`, the repository root as the working folder, DLBENCH
# (default build/dlbench) and BUILD (default build), and OUT, a fresh
# temporary folder removed at exit. A test that started processes, mounts or
# servers defines cleanup(), anywhere in it: the exit runs it before OUT goes.
test_init() {
    set -u
    cd "$(dirname "$0")/.." || exit 1
    DLBENCH=${DLBENCH:-build/dlbench}
    BUILD=${BUILD:-build}
    OUT=$(mktemp -d)
    trap test_exit EXIT
}
test_exit() {
    if declare -F cleanup >/dev/null; then cleanup; fi
    rm -rf "$OUT"
}

# require_subcommand NAME SUBCOMMAND [NOTE]: a SKIP line and exit 0 unless
# "$DLBENCH" SUBCOMMAND --help runs
require_subcommand() {
    "$DLBENCH" "$2" --help >/dev/null 2>&1 && return 0
    skip "$1" "$DLBENCH cannot run the '$2' subcommand${3:+ $3}"
    exit 0
}

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((${fails:-0} + 1)); }
skip() { echo "SKIP $1: $2"; }

# json_field FILE KEY: the value of the first "KEY": value line of a
# pretty-printed JSON file (quotes and trailing comma removed)
json_field() {
    sed -n "s/^[[:space:]]*\"$2\":[[:space:]]*\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$1" | head -1
}

# run NAME EXPECTED_STATUS args...: "$DLBENCH" args with its output in
# $OUT/NAME.log; on another exit status a FAIL line and the output's tail
run() {
    local name=$1 want=$2
    shift 2
    "$DLBENCH" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name" "exit status $rc, expected $want; output:"
        sed 's/^/    /' "$OUT/$name.log" | tail -12
        return 1
    fi
    return 0
}
