/* main.c - the dlbench executable: dispatches subcommands */
#include <stdio.h>
#include <string.h>

#include "tui/cmd/commands.h"
#include "engine/base/version.h"

/* Subcommands live in their own files; a build without one of them still
 * links and says so (weak references). */
#pragma weak dl_cmd_import
#pragma weak dl_cmd_run
#pragma weak dl_cmd_runs
#pragma weak dl_cmd_note
#pragma weak dl_cmd_watch
#pragma weak dl_cmd_tune
#pragma weak dl_cmd_profile
#pragma weak dl_cmd_workbench

typedef int (*command_fn)(int argc, char **argv);

static const struct {
    const char *name;
    const char *usage;
} usage_lines[] = {
    {"", "dlbench [SCRIPT]             the workbench (default: scripts/fmnist_mlp.lua)"},
    {"run", "dlbench run SCRIPT [k=v..]   headless training, progress on stdout"},
    {"watch", "dlbench watch [RUN]          attach the workbench to a live or finished run"},
    {"tune", "dlbench tune SCRIPT          a hyperparameter study"},
    {"runs", "dlbench runs [diff A B]      the experiment table; differences of two runs"},
    {"note", "dlbench note RUN TEXT        add a note to a run's events.log"},
    {"profile", "dlbench profile SCRIPT       profile N steps, print the table, write a trace"},
    {"import", "dlbench import SRC OUT.h5    IDX or CSV into HDF5 (--synthetic NAME too)"},
};

static void usage(FILE *f)
{
    fprintf(f, "dlbench %s - a terminal workbench for training neural networks cheaply\n\n",
            DL_VERSION);
    for (size_t i = 0; i < sizeof usage_lines / sizeof *usage_lines; i++)
        fprintf(f, "  %s\n", usage_lines[i].usage);
    fprintf(f, "\n  dlbench --help | --version\n");
}

static command_fn lookup(const char *name)
{
    if (!strcmp(name, "import"))
        return dl_cmd_import;
    if (!strcmp(name, "run"))
        return dl_cmd_run;
    if (!strcmp(name, "runs"))
        return dl_cmd_runs;
    if (!strcmp(name, "note"))
        return dl_cmd_note;
    if (!strcmp(name, "watch"))
        return dl_cmd_watch;
    if (!strcmp(name, "tune"))
        return dl_cmd_tune;
    if (!strcmp(name, "profile"))
        return dl_cmd_profile;
    return NULL;
}

static int is_command(const char *name)
{
    static const char *names[] = {"import", "run", "runs", "note", "watch", "tune", "profile"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--version")) {
        printf("dlbench %s\n", DL_VERSION);
        return 0;
    }
    if (argc > 1 && is_command(argv[1])) {
        command_fn fn = lookup(argv[1]);
        if (!fn) {
            fprintf(stderr, "dlbench: '%s' is not part of this build yet\n", argv[1]);
            return 2;
        }
        return fn(argc - 1, argv + 1);
    }
    if (argc > 1 && argv[1][0] == '-') {
        fprintf(stderr, "dlbench: unknown option '%s'\n\n", argv[1]);
        usage(stderr);
        return 2;
    }
    if (dl_cmd_workbench)
        return dl_cmd_workbench(argc, argv);
    /* no workbench in this build: train the script headless */
    if (dl_cmd_run) {
        char *run_argv[3] = {"run", argc > 1 ? argv[1] : "scripts/fmnist_mlp.lua", NULL};
        return dl_cmd_run(2, run_argv);
    }
    usage(stderr);
    return 2;
}
