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
