/* cmd_predict.c - `dlbench predict RUN INPUT`: class, probability and top-k per sample as CSV or JSON lines, written atomically with -o */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "scripting/session_predict.h"
#include "tui/cmd/commands.h"
#include "tui/cmd/exit.h"
#include "tui/cmd/opts.h"

static int bad_usage(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dlbench predict: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see dlbench predict --help)\n");
    return DL_EXIT_USAGE;
}

static int parse_int(const char *s, int lo, int hi, int *v)
{
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (!*s || *end || errno || x < lo || x > hi)
        return 0;
    *v = (int)x;
    return 1;
}

/* One option's value into o; returns -1 when taken, else the exit status. */
static int take(dl_predict_options *o, const char **output, int *format, const dl_opt *opt,
                const char *val)
{
    switch (opt->id) {
    case DL_OPT_CHECKPOINT: o->checkpoint = val; return -1;
    case DL_OPT_OUT: o->out_dir = val; return -1;
    case DL_OPT_OUTPUT: *output = val; return -1;
    case DL_OPT_LABEL: o->label = val; return -1;
    case DL_OPT_LOGITS: o->logits = 1; return -1;
    case DL_OPT_FORMAT:
        if (strcmp(val, "csv") && strcmp(val, "jsonl"))
            return bad_usage("--format expects csv or jsonl, got '%s'%s", val, "");
        *format = !strcmp(val, "jsonl");
        return -1;
    case DL_OPT_TOP_K:
        if (!parse_int(val, 1, 1000000, &o->top_k))
            return bad_usage("--top-k expects an integer >= 1, got '%s'%s", val, "");
        return -1;
    case DL_OPT_TOKENS:
        if (!parse_int(val, 0, 100000000, &o->tokens))
            return bad_usage("--tokens expects a non-negative integer, got '%s'%s", val, "");
        return -1;
    }
    return bad_usage("%s%s: not an option of predict", opt->name, "");
}

/* Runs the prediction into output (a temporary file renamed over it on
 * success, removed on failure) or stdout. */
static int predict_to(dl_predict_options *o, const char *output)
{
    if (!output) {
        o->out = stdout;
        int rc = dl_session_predict(o);
        fflush(stdout);
        return rc;
    }
    char tmp[1200];
    DL_TRY(dl_fs_tmp_name(output, tmp, sizeof tmp));
    FILE *f = fopen(tmp, "w");
    if (!f)
        return dl_error(DL_EIO, "%s: cannot write: %s", output, strerror(errno));
    o->out = f;
    int rc = dl_session_predict(o);
    if (rc == DL_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        rc = dl_error(DL_EIO, "%s: writing failed: %s", output, strerror(errno));
    if (fclose(f) != 0 && rc == DL_OK)
        rc = dl_error(DL_EIO, "%s: writing failed: %s", output, strerror(errno));
    if (rc == DL_OK)
        return dl_fs_commit(tmp, output);
    unlink(tmp);
    return rc;
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

int dl_cmd_predict(const dl_command *self, int argc, char **argv)
{
    dl_predict_options o = {0};
    o.top_k = 1;
    o.tokens = 200;
    const char *output = NULL;
    int format = -1;
    dl_opts p;
    dl_command_opts(&p, self, argc, argv);
    int id;
    while ((id = dl_opts_next(&p)) != DL_OPTS_END) {
        if (id == DL_OPTS_ERROR)
            return DL_EXIT_USAGE;
        if (id == DL_OPT_HELP) {
            dl_command_usage(self, stdout);
            return DL_EXIT_OK;
        }
        if (id == DL_OPTS_ARG && o.input)
            return bad_usage("one run and one input, got also '%s'%s", p.value, "");
        if (id == DL_OPTS_ARG)
            *(o.run ? &o.input : &o.run) = p.value;
        else {
            int rc = take(&o, &output, &format, p.opt, p.value);
            if (rc >= 0)
                return rc;
        }
    }
    if (!o.input) {
        dl_command_usage(self, stderr);
        return DL_EXIT_USAGE;
    }
    o.jsonl = format >= 0 ? format
                          : output && (ends_with(output, ".jsonl") || ends_with(output, ".json"));
    int rc = predict_to(&o, output);
    if (rc < 0) {
        fprintf(stderr, "dlbench predict: %s\n", dl_error_message());
        return dl_exit_for(rc);
    }
    return DL_EXIT_OK;
}
