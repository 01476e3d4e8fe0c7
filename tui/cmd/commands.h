/* commands.h - the subcommands of dlbench; main() dispatches to these */
#ifndef DL_COMMANDS_H
#define DL_COMMANDS_H

/* Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand itself) and returns the process exit status: 0 success,
 * 1 failed run, 2 bad input, 3 refused as a duplicate. */
int dl_cmd_import(int argc, char **argv);  /* dlbench import SRC OUT.h5 */
int dl_cmd_run(int argc, char **argv);     /* dlbench run SCRIPT [k=v..] */
int dl_cmd_runs(int argc, char **argv);    /* dlbench runs [diff A B] */
int dl_cmd_note(int argc, char **argv);    /* dlbench note RUN "text" */
int dl_cmd_watch(int argc, char **argv);   /* dlbench watch [RUN] */
int dl_cmd_tune(int argc, char **argv);    /* dlbench tune SCRIPT */
int dl_cmd_profile(int argc, char **argv); /* dlbench profile SCRIPT */
int dl_cmd_workbench(int argc, char **argv); /* dlbench [SCRIPT] */

/* --price-per-hour VALUE (or DLBENCH_PRICE_PER_HOUR when text is NULL):
 * 0 with *out set (0 when unset), -1 when the text is not a number >= 0. */
int dl_price_parse(const char *text, double *out);

#endif
