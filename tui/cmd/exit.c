/* exit.c - the one exit-status map of dlbench: what an engine status means to the shell */
#include "tui/cmd/exit.h"
#include "engine/base/error.h"

int dl_exit_for(int rc)
{
    switch (rc) {
    case DL_EINVAL:
    case DL_ESHAPE:
    case DL_ENODEV:
    case DL_EIO:
    case DL_EUNSUPPORTED: return DL_EXIT_USAGE;
    default: return rc >= 0 ? DL_EXIT_OK : DL_EXIT_FAILED;
    }
}

static const struct {
    int status;
    const char *meaning;
} codes[] = {
    {DL_EXIT_OK, "done: the run finished, or stopped as asked"},
    {DL_EXIT_FAILED, "a run or trial failed, or a result could not be written"},
    {DL_EXIT_USAGE, "bad input: an argument, script, data file or run folder (the message "
                    "names it)"},
    {DL_EXIT_DUPLICATE, "refused: a finished run has the same configuration (--force runs "
                        "it again)"},
    {DL_EXIT_INTERRUPTED, "interrupted by Ctrl-C or SIGTERM"},
};

int dl_exit_describe(int i, int *status, const char **meaning)
{
    if (i < 0 || i >= (int)(sizeof codes / sizeof *codes))
        return 0;
    *status = codes[i].status;
    *meaning = codes[i].meaning;
    return 1;
}
