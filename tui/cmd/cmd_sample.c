/* cmd_sample.c - `dlbench sample RUN`: text from a trained language model, streamed to stdout */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "scripting/session_sample.h"
#include "tui/cmd/commands.h"
#include "tui/cmd/exit.h"
#include "tui/cmd/opts.h"

/* This command's row of the table (its options and help), set on entry. */
static const dl_command *this_cmd;

static int bad_usage(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dlbench sample: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see dlbench sample --help)\n");
    return DL_EXIT_USAGE;
}

static int parse_count(const char *s, long long max, long long *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (!*s || *end || errno || x < 0 || x > max)
        return 0;
    *v = x;
    return 1;
}

/* One option's value into o; returns -1 when taken, else the exit status. */
static int take(dl_sample_options *o, const dl_opt *opt, const char *val)
{
    long long n;
    char *end;
    switch (opt->id) {
    case DL_OPT_PROMPT: o->prompt = val; return -1;
    case DL_OPT_CHECKPOINT: o->checkpoint = val; return -1;
    case DL_OPT_OUT: o->out_dir = val; return -1;
    case DL_OPT_TEMPERATURE:
        errno = 0;
        o->temperature = strtod(val, &end);
        if (!*val || *end || errno || !(o->temperature >= 0) || !isfinite(o->temperature))
            return bad_usage("%s expects a number >= 0, got '%s'", opt->name, val);
        return -1;
    case DL_OPT_TOKENS:
    case DL_OPT_TOP_K:
        if (!parse_count(val, 100000000, &n))
            return bad_usage("%s expects a non-negative integer, got '%s'", opt->name, val);
        *(opt->id == DL_OPT_TOKENS ? &o->tokens : &o->top_k) = (int)n;
        return -1;
    case DL_OPT_SEED:
        if (!parse_count(val, 0x7fffffffffffffffLL, &n))
            return bad_usage("%s expects a non-negative integer, got '%s'", opt->name, val);
        o->seed = (uint64_t)n;
        return -1;
    }
    return bad_usage("%s%s: not an option of sample", opt->name, "");
}

/* What stdout has had: the prompt goes first, before the first token. */
typedef struct out_state {
    const char *prompt;
    size_t written;
} out_state;

static void emit_stdout(void *user, const char *text, size_t len)
{
    out_state *st = user;
    if (st->written == 0 && st->prompt)
        fputs(st->prompt, stdout);
    st->written += len;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

int dl_cmd_sample(const dl_command *self, int argc, char **argv)
{
    this_cmd = self;
    dl_sample_options o = {0};
    o.tokens = 200;
    o.temperature = 1.0;
    out_state st = {NULL, 0};
    o.emit = emit_stdout;
    o.user = &st;
    dl_opts p;
    dl_command_opts(&p, this_cmd, argc, argv);
    int id;
    while ((id = dl_opts_next(&p)) != DL_OPTS_END) {
        if (id == DL_OPTS_ERROR)
            return DL_EXIT_USAGE;
        if (id == DL_OPT_HELP) {
            dl_command_usage(this_cmd, stdout);
            return DL_EXIT_OK;
        }
        if (id == DL_OPTS_ARG && o.run)
            return bad_usage("one run at a time, got '%s' and '%s'", o.run, p.value);
        if (id == DL_OPTS_ARG)
            o.run = p.value;
        else {
            int rc = take(&o, p.opt, p.value);
            if (rc >= 0)
                return rc;
        }
    }
    if (!o.run) {
        dl_command_usage(this_cmd, stderr);
        return DL_EXIT_USAGE;
    }
    st.prompt = o.prompt;
    int rc = dl_session_sample(&o);
    if (st.written > 0)
        fputc('\n', stdout);
    fflush(stdout);
    if (rc < 0) {
        fprintf(stderr, "dlbench sample: %s\n", dl_error_message());
        return dl_exit_for(rc);
    }
    return DL_EXIT_OK;
}
