/* main.c - the dlbench executable: dispatches subcommands through the command table */
#include <stdio.h>
#include <string.h>

#include "engine/base/version.h"
#include "tui/cmd/commands.h"

/* dlbench help [COMMAND]: a command's help, or the list of commands. */
static int help(int argc, char **argv)
{
    if (argc < 3) {
        dl_command_overview(stdout);
        return DL_EXIT_OK;
    }
    const dl_command *c = dl_command_find(argv[2]);
    if (!c || !argv[2][0]) {
        fprintf(stderr, "dlbench help: no command '%s'\n\n", argv[2]);
        dl_command_overview(stderr);
        return DL_EXIT_USAGE;
    }
    dl_command_usage(c, stdout);
    return DL_EXIT_OK;
}

/* The options of dlbench itself; NULL when arg is none of them. */
static const char *global_option(const char *arg)
{
    static const char *names[] = {"--help", "-h", "--version", "--man", "--bash-completion"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(arg, names[i]))
            return names[i];
    return NULL;
}

static int global(const char *opt)
{
    if (!strcmp(opt, "--version")) {
        printf("dlbench %s\n", DL_VERSION);
        return DL_EXIT_OK;
    }
    /* hidden: make writes build/dlbench.1 and the completion with these */
    if (!strcmp(opt, "--man"))
        return dl_command_man(stdout) < 0 ? DL_EXIT_FAILED : DL_EXIT_OK;
    if (!strcmp(opt, "--bash-completion"))
        return dl_command_completion(stdout) < 0 ? DL_EXIT_FAILED : DL_EXIT_OK;
    dl_command_overview(stdout);
    return DL_EXIT_OK;
}

int main(int argc, char **argv)
{
    const char *opt = argc > 1 ? global_option(argv[1]) : NULL;
    if (opt)
        return global(opt);
    if (argc > 1 && !strcmp(argv[1], "help"))
        return help(argc, argv);
    const dl_command *c = argc > 1 && argv[1][0] ? dl_command_find(argv[1]) : NULL;
    if (c) {
        if (!c->fn) {
            fprintf(stderr, "dlbench: '%s' is not part of this build yet\n", argv[1]);
            return DL_EXIT_USAGE;
        }
        return c->fn(c, argc - 1, argv + 1);
    }
    /* the workbench: dlbench [SCRIPT] [k=v ...] [options] */
    const dl_command *wb = dl_command_find("");
    if (argc > 1 && argv[1][0] == '-' && argv[1][1] && strcmp(argv[1], "--") &&
        !dl_opts_find(wb->opts, argv[1])) {
        fprintf(stderr, "dlbench: unknown option '%s'\n\n", argv[1]);
        dl_command_overview(stderr);
        return DL_EXIT_USAGE;
    }
    if (wb->fn)
        return wb->fn(wb, argc, argv);
    /* no workbench in this build: train the script headless */
    c = dl_command_find("run");
    if (c->fn) {
        char *run_argv[3] = {"run", argc > 1 ? argv[1] : "scripts/fmnist_mlp.lua", NULL};
        return c->fn(c, 2, run_argv);
    }
    dl_command_overview(stderr);
    return DL_EXIT_USAGE;
}
