# tests/lib.sh - helpers shared by the shell tests (tests/t_*.sh), sourced
# from the repository root. Results are lines tests/run.sh counts:
#   PASS name | FAIL name: why | SKIP name: reason
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
