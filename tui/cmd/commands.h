/* commands.h - the subcommands of dlbench and the one command table main() dispatches through */
#ifndef DL_COMMANDS_H
#define DL_COMMANDS_H

#include <stdio.h>

#include "tui/cmd/exit.h"
#include "tui/cmd/opts.h"

typedef struct dl_command dl_command;

/* Each takes its own row of the table (its options and help: a command
 * never looks itself up, so the table depends on the commands and not
 * the other way round), the arguments after the subcommand name (argv[0]
 * is the subcommand itself; "dlbench" for the workbench), and returns the
 * process exit status (tui/cmd/exit.h): 0 success, 1 failed run, 2 bad
 * input, 3 refused as a duplicate, 130 interrupted. */
int dl_cmd_import(const dl_command *self, int argc, char **argv);    /* import SRC OUT.h5 */
int dl_cmd_run(const dl_command *self, int argc, char **argv);       /* run SCRIPT [k=v..] */
int dl_cmd_runs(const dl_command *self, int argc, char **argv);      /* runs [diff A B] */
int dl_cmd_note(const dl_command *self, int argc, char **argv);      /* note RUN "text" */
int dl_cmd_sample(const dl_command *self, int argc, char **argv);    /* sample RUN */
int dl_cmd_export(const dl_command *self, int argc, char **argv);    /* export RUN --format F */
int dl_cmd_eval(const dl_command *self, int argc, char **argv);      /* eval RUN */
int dl_cmd_predict(const dl_command *self, int argc, char **argv);   /* predict RUN INPUT */
int dl_cmd_watch(const dl_command *self, int argc, char **argv);     /* watch [RUN] */
int dl_cmd_tune(const dl_command *self, int argc, char **argv);      /* tune SCRIPT */
int dl_cmd_profile(const dl_command *self, int argc, char **argv);   /* profile SCRIPT */
int dl_cmd_advise(const dl_command *self, int argc, char **argv);    /* advise SCRIPT */
int dl_cmd_workbench(const dl_command *self, int argc, char **argv); /* [SCRIPT] */
int dl_cmd_export_metrics(const dl_command *self, int argc, char **argv); /* export-metrics RUN.. */
int dl_cmd_tag(const dl_command *self, int argc, char **argv);            /* tag RUN TAG.. */

/* The options' ids (dl_opt.id): one per spelling, shared by the commands
 * that accept it. */
enum {
    DL_OPT_HELP = 1,
    DL_OPT_OUT,
    DL_OPT_DEVICE,
    DL_OPT_SEED,
    DL_OPT_FORCE,
    DL_OPT_QUIET,
    DL_OPT_PRICE,
    /* run */
    DL_OPT_RESUME,
    DL_OPT_STOP_AFTER,
    DL_OPT_HPARAMS,
    DL_OPT_CHECK_PARITY,
    DL_OPT_PARITY_DEVICE,
    DL_OPT_PARITY_TOL,
    /* the workbench, watch */
    DL_OPT_START,
    DL_OPT_STUDY,
    /* runs */
    DL_OPT_JSON,
    DL_OPT_SORT,
    DL_OPT_DESC,
    DL_OPT_FILTER,
    /* tune */
    DL_OPT_TRIALS,
    DL_OPT_JOBS,
    DL_OPT_WORKER,
    DL_OPT_REPORT,
    /* profile */
    DL_OPT_STEPS,
    DL_OPT_WARMUP,
    DL_OPT_BY,
    DL_OPT_TRACE,
    DL_OPT_WHOLE_RUN,
    DL_OPT_RING,
    DL_OPT_ROWS,
    DL_OPT_NO_MONITOR,
    /* sample */
    DL_OPT_PROMPT,
    DL_OPT_TOKENS,
    DL_OPT_TEMPERATURE,
    DL_OPT_TOP_K,
    DL_OPT_CHECKPOINT,
    /* export */
    DL_OPT_FORMAT,
    DL_OPT_OUTPUT,
    DL_OPT_NAMES,
    /* import */
    DL_OPT_LABEL,
    DL_OPT_TEXT,
    DL_OPT_VOCAB,
    DL_OPT_VAL_FRACTION,
    DL_OPT_SPLIT,
    DL_OPT_CLASS_NAMES,
    DL_OPT_SYNTHETIC,
    DL_OPT_SAMPLES,
    DL_OPT_CLASSES,
    DL_OPT_NOISE,
    DL_OPT_CHUNK,
    DL_OPT_GZIP,
    DL_OPT_INSPECT,
    DL_OPT_SIZE,
    DL_OPT_CHANNELS,
    DL_OPT_WORKERS,
    DL_OPT_STRICT,
    DL_OPT_REGRESSION,
    /* eval, predict (and --output, --format as export) */
    DL_OPT_DATA,
    DL_OPT_LOGITS,
    /* runs --csv, export-metrics, tag */
    DL_OPT_CSV,
    DL_OPT_JSONL,
    DL_OPT_REMOVE,
    DL_OPT_NO_MOUSE,
    /* run, advise */
    DL_OPT_SET,
    DL_OPT_BUDGET,
    DL_OPT_LR_RANGE,
    DL_OPT_TARGET
};

typedef int (*dl_command_fn)(const dl_command *self, int argc, char **argv);

/* What the bash completion offers for a command's positional words. */
typedef enum {
    DL_COMPLETE_NONE,
    DL_COMPLETE_SCRIPT, /* a *.lua file, then its hyperparameters as k= */
    DL_COMPLETE_RUN,    /* a run folder's name under --out DIR (default runs) */
    DL_COMPLETE_RUNS,   /* "diff", then two run names */
    DL_COMPLETE_FILE,   /* any file */
    DL_COMPLETE_COMMAND /* a command's name (help) */
} dl_complete;

/* One row of the command table (tui/cmd/table.c). */
struct dl_command {
    const char *name;     /* "run"; "" for the workbench (dlbench [SCRIPT]) */
    dl_command_fn fn;     /* NULL: not part of this build (a weak reference) */
    const char *brief;    /* the arguments in the overview: "SCRIPT [k=v..]" */
    const char *synopsis; /* the full forms after "dlbench NAME", one a line */
    const char *summary;  /* one line: what it does */
    const dl_opt *opts;   /* ends with an entry whose name is NULL */
    const char *notes;    /* more help text after the options, or NULL */
    dl_complete complete;
};

/* The command named name ("" the workbench), or NULL. */
const dl_command *dl_command_find(const char *name);

/* The i-th row of the table (0-based, the workbench first), NULL past the last. */
const dl_command *dl_command_at(int i);

/* Starts the option walk of command c over argv (its options, errors
 * prefixed "dlbench NAME"). In tui/cmd/usage.c, which knows one row and
 * not the table. */
void dl_command_opts(dl_opts *p, const dl_command *c, int argc, char **argv);

/* The command's help (usage lines, summary, options, notes) to f: what
 * `dlbench NAME --help` and `dlbench help NAME` print (tui/cmd/usage.c). */
void dl_command_usage(const dl_command *c, FILE *f);

/* Every command, one line each, to f: `dlbench --help`. */
void dl_command_overview(FILE *f);

/* The man page, in man(7) roff, to f (`dlbench --man`; make writes
 * build/dlbench.1 with it). Returns 0, or -1 when f could not be written. */
int dl_command_man(FILE *f);

/* The bash completion script to f (`dlbench --bash-completion`; make
 * writes build/dlbench.bash-completion with it). Returns 0 or -1. */
int dl_command_completion(FILE *f);

#endif
