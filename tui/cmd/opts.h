/* opts.h - the one option parser of the subcommands: long options with values, flags, `--` */
#ifndef DL_OPTS_H
#define DL_OPTS_H

/* One option a command accepts. The command table (tui/cmd/table.c) holds
 * the lists; --help, the man page and the bash completion are written from
 * them, so an option is declared once. */
typedef struct dl_opt {
    int id;            /* what dl_opts_next returns for it (> 0); 0: the line
                        * documents a positional argument (name "k=v") and
                        * is never matched */
    const char *name;  /* "--out" */
    const char *alias; /* "-q", or NULL */
    const char *arg;   /* the value's name ("DIR", "cpu|cuda|auto"); NULL: a flag */
    const char *help;  /* one line for --help and the man page */
    int hidden;        /* accepted, never shown (tune's internal --worker) */
} dl_opt;

/* dl_opts_next's answers besides an option's id. */
enum { DL_OPTS_END = 0, DL_OPTS_ARG = -1, DL_OPTS_ERROR = -2 };

/* A walk over argv[1..argc-1]; the caller owns the storage. */
typedef struct dl_opts {
    const char *prog; /* "dlbench run": the errors' prefix (progbuf) */
    char progbuf[48];
    const dl_opt *opts; /* ends with an entry whose name is NULL */
    int argc;
    char **argv;
    int next;          /* the argv index read next */
    int ended;         /* "--" was seen: the rest are positional */
    const char *value; /* the option's value, or the positional argument */
    const dl_opt *opt; /* the option matched (NULL for a positional) */
} dl_opts;

/* Starts a walk over argv[1..argc-1] (argv[0] is the command's name). prog
 * is copied; opts and argv are borrowed and must outlive the walk. */
void dl_opts_init(dl_opts *p, const char *prog, const dl_opt *opts, int argc, char **argv);

/* The next argument: an option's id (with p->value set to its value when it
 * takes one, given as `--out DIR` or `--out=DIR`; the value is taken as
 * it is, even when it starts with '-'), DL_OPTS_ARG for a positional
 * (p->value; "-" and anything after "--" are positional, as are k=v
 * overrides), DL_OPTS_END after the last. DL_OPTS_ERROR after printing to
 * stderr "PROG: unknown option '--x' (see PROG --help)", "PROG: --out needs
 * a value (DIR)" or "PROG: --force takes no value"; the caller then
 * exits with status 2 (DL_EXIT_USAGE). */
int dl_opts_next(dl_opts *p);

/* The option of the list named name ("--out", "--out=DIR", or an alias
 * "-q"), or NULL. */
const dl_opt *dl_opts_find(const dl_opt *opts, const char *name);

/* --price-per-hour VALUE (or DLBENCH_PRICE_PER_HOUR when text is NULL):
 * 0 with *out set (0 when unset), -1 when the text is not a number >= 0. */
int dl_price_parse(const char *text, double *out);

#endif
