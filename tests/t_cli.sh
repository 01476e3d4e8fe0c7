#!/usr/bin/env bash
# t_cli.sh - the command line from the one command table: --help lists every
# command, help CMD and CMD --help, --version, option errors (exit 2, the
# option named), --opt=value and --, the man page (renders with groff
# without warnings, names every command) and the bash completion
# (subcommands, a flag, a run name, a script's hyperparameter).
set -u
cd "$(dirname "$0")/.."
DLBENCH=${DLBENCH:-build/dlbench}
DLBENCH=$(cd "$(dirname "$DLBENCH")" && pwd)/$(basename "$DLBENCH")
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

. "$(dirname "$0")/lib.sh"

if ! "$DLBENCH" --man >/dev/null 2>&1; then
    skip t_cli "$DLBENCH has no command table (--man)"
    exit 0
fi

# the commands, from the completion script's list (the table's order)
"$DLBENCH" --bash-completion >"$OUT/completion.bash"
commands=$(sed -n "s/^_dlbench_commands='\(.*\)'$/\1/p" "$OUT/completion.bash")
if [ "$(wc -w <<<"$commands")" -ge 7 ]; then
    pass cli_command_list
else
    fail cli_command_list "the completion lists '$commands'"
fi

# --- --help, help CMD, CMD --help, --version ------------------------------------------
if run help 0 --help; then
    missing=""
    for c in $commands; do
        grep -q "^  dlbench $c " "$OUT/help.log" || missing="$missing $c"
    done
    grep -q "^  dlbench \[SCRIPT\]" "$OUT/help.log" || missing="$missing (workbench)"
    [ -z "$missing" ] && pass cli_help_lists_every_command ||
        fail cli_help_lists_every_command "missing:$missing"
fi
ok=1
for c in $commands; do
    if ! run "help_$c" 0 help "$c" || ! grep -q "^usage: dlbench $c" "$OUT/help_$c.log" ||
        ! grep -q -- "--help" "$OUT/help_$c.log"; then
        ok=0
        fail "cli_help_$c" "$(head -2 "$OUT/help_$c.log")"
    fi
done
[ "$ok" = 1 ] && pass cli_help_each_command
# the commands whose parser is the table's: CMD --help prints the same text
for c in run runs note tune watch; do
    if run "dash_help_$c" 0 "$c" --help && cmp -s "$OUT/dash_help_$c.log" "$OUT/help_$c.log"; then
        pass "cli_${c}_dash_help"
    else
        fail "cli_${c}_dash_help" "differs from dlbench help $c: $(diff "$OUT/dash_help_$c.log" "$OUT/help_$c.log" | head -3)"
    fi
done
version=$(sed -n 's/^#define DL_VERSION "\(.*\)"$/\1/p' engine/base/version.h)
if run version 0 --version && [ "$(cat "$OUT/version.log")" = "dlbench $version" ]; then
    pass cli_version
else
    fail cli_version "got '$(head -1 "$OUT/version.log")', expected 'dlbench $version'"
fi

# --- option errors: exit 2, the option named ---------------------------------------------
expect() { # NAME FRAGMENT args...: exit status 2 and FRAGMENT in the output
    local name=$1 fragment=$2
    shift 2
    if run "$name" 2 "$@"; then
        grep -qF -- "$fragment" "$OUT/$name.log" && pass "$name" ||
            fail "$name" "no \"$fragment\" in: $(head -2 "$OUT/$name.log")"
    fi
}
expect cli_unknown_option "unknown option '--frobnicate'" run scripts/spirals.lua --frobnicate
expect cli_unknown_option_runs "unknown option '--frobnicate'" runs --frobnicate
expect cli_unknown_option_tune "unknown option '--frobnicate'" tune scripts/spirals_tune.lua --frobnicate
expect cli_unknown_option_top "unknown option '--frobnicate'" --frobnicate
expect cli_missing_value "--out needs a value" run scripts/spirals.lua --out
expect cli_missing_value_runs "--sort needs a value" runs --sort
expect cli_missing_value_watch "--study needs a value" watch --study
expect cli_flag_with_value "--force takes no value" run scripts/spirals.lua --force=yes
expect cli_equals_value "--seed expects a non-negative integer, got 'x'" run scripts/spirals.lua --seed=x
expect cli_not_a_command "no command 'frobnicate'" help frobnicate

# --out=DIR and -- : the run table of an empty folder, an argument after --
mkdir -p "$OUT/empty"
run cli_out_equals 0 runs --out="$OUT/empty" && grep -q "(no runs in $OUT/empty)" "$OUT/cli_out_equals.log" &&
    pass cli_out_equals
expect cli_double_dash "unexpected argument '--force'" run scripts/spirals.lua -- --force

# --- --hparams: what the completion offers after a script ---------------------------------
if run hparams 0 run scripts/spirals.lua --hparams && grep -qx "lr=0.03" "$OUT/hparams.log" &&
    grep -qx "hidden=64" "$OUT/hparams.log"; then
    pass cli_run_hparams
else
    fail cli_run_hparams "$(head -3 "$OUT/hparams.log")"
fi

# --- the man page ---------------------------------------------------------------------------
"$DLBENCH" --man >"$OUT/dlbench.1"
if ! command -v groff >/dev/null; then
    skip cli_man_renders "groff is not installed"
else
    groff -man -Tutf8 -ww "$OUT/dlbench.1" >"$OUT/man.txt" 2>"$OUT/man.err"
    if [ $? -eq 0 ] && [ ! -s "$OUT/man.err" ]; then
        pass cli_man_renders
    else
        fail cli_man_renders "groff: $(head -3 "$OUT/man.err")"
    fi
    missing=""
    for c in $commands; do
        grep -q "dlbench $c" <(sed 's/.\x08//g' "$OUT/man.txt") || missing="$missing $c"
    done
    [ -z "$missing" ] && pass cli_man_names_every_command ||
        fail cli_man_names_every_command "missing:$missing"
fi
if [ -f "$(dirname "$DLBENCH")/dlbench.1" ] && ! cmp -s "$(dirname "$DLBENCH")/dlbench.1" "$OUT/dlbench.1"; then
    fail cli_man_built "$(dirname "$DLBENCH")/dlbench.1 differs from dlbench --man (run make)"
fi

# --- the bash completion ----------------------------------------------------------------------
mkdir -p "$OUT/runs/20260101-000000-spirals-abcd1234"
echo '{}' >"$OUT/runs/20260101-000000-spirals-abcd1234/config.json"
mkdir -p "$OUT/runs/not-a-run"
# complete WORDS...: COMPREPLY, one a line, for the command line WORDS (the last is the one completed)
complete_words() {
    bash -c '
        source "$1"
        shift
        COMP_WORDS=("$@")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        COMPREPLY=()
        _dlbench
        printf "%s\n" "${COMPREPLY[@]}"' complete "$OUT/completion.bash" "$DLBENCH" "$@"
}
has() { # NAME WANT WORDS...: WANT among the completions of WORDS
    local name=$1 want=$2
    shift 2
    local got
    got=$(complete_words "$@")
    if grep -qx -- "$want" <<<"$got"; then
        pass "$name"
    else
        fail "$name" "'$want' not in: $(tr '\n' ' ' <<<"$got")"
    fi
}
if bash -n "$OUT/completion.bash"; then
    pass cli_completion_syntax
else
    fail cli_completion_syntax "bash -n fails"
fi
has cli_complete_command run ru
has cli_complete_command_runs runs ru
has cli_complete_help_command profile help pro
has cli_complete_flag --check-parity run scripts/spirals.lua --check-p
has cli_complete_flag_tune --report tune scripts/spirals_tune.lua --rep
has cli_complete_device cuda run scripts/spirals.lua --device ""
has cli_complete_run_name 20260101-000000-spirals-abcd1234 watch --out "$OUT/runs" ""
has cli_complete_run_name_equals 20260101-000000-spirals-abcd1234 note --out = "$OUT/runs" 2026
has cli_complete_runs_diff 20260101-000000-spirals-abcd1234 runs diff --out "$OUT/runs" ""
has cli_complete_hparam lr= run scripts/spirals.lua ""
has cli_complete_hparam_prefix hidden= run scripts/spirals.lua epochs=3 hi
if complete_words watch --out "$OUT/runs" "" | grep -q not-a-run; then
    fail cli_complete_only_runs "a folder without config.json is offered as a run"
else
    pass cli_complete_only_runs
fi
