/* exit.h - the one exit-status map of dlbench: what an engine status means to the shell */
#ifndef DL_EXIT_H
#define DL_EXIT_H

/* The statuses every subcommand exits with. */
enum {
    DL_EXIT_OK = 0,           /* done: finished, or stopped as asked */
    DL_EXIT_FAILED = 1,       /* a run or trial failed while it ran, or a write failed */
    DL_EXIT_USAGE = 2,        /* bad input: arguments, script, data or run folder */
    DL_EXIT_DUPLICATE = 3,    /* refused: a finished run has the same configuration */
    DL_EXIT_INTERRUPTED = 130 /* stopped by Ctrl-C or SIGTERM */
};

/* The exit status for a negative engine status (engine/base/error.h):
 * bad input - DL_EINVAL, DL_ESHAPE, DL_ENODEV, DL_EUNSUPPORTED and DL_EIO
 * (a file that cannot be read: a missing or corrupt script, data file,
 * checkpoint or run folder) - is DL_EXIT_USAGE; anything else (out of
 * memory, non-finite values, DL_ERR) is DL_EXIT_FAILED. DL_OK and
 * positive outcomes are DL_EXIT_OK. */
int dl_exit_for(int rc);

/* The statuses above with a one-line meaning, for --help and the man page:
 * the i-th (0-based) in *status and *meaning; returns 0 past the last. */
int dl_exit_describe(int i, int *status, const char **meaning);

#endif
