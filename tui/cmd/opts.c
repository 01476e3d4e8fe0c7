/* opts.c - the one option parser of the subcommands: long options with values, flags, `--` */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tui/cmd/opts.h"

void dl_opts_init(dl_opts *p, const char *prog, const dl_opt *opts, int argc, char **argv)
{
    memset(p, 0, sizeof *p);
    snprintf(p->progbuf, sizeof p->progbuf, "%s", prog);
    p->prog = p->progbuf;
    p->opts = opts;
    p->argc = argc;
    p->argv = argv;
    p->next = 1;
}

/* The option named by the first len bytes of word. */
static const dl_opt *find_len(const dl_opt *opts, const char *word, size_t len)
{
    for (const dl_opt *o = opts; o && o->name; o++) {
        if (o->id <= 0)
            continue;
        if ((strlen(o->name) == len && !strncmp(o->name, word, len)) ||
            (o->alias && strlen(o->alias) == len && !strncmp(o->alias, word, len)))
            return o;
    }
    return NULL;
}

const dl_opt *dl_opts_find(const dl_opt *opts, const char *name)
{
    const char *eq = name[0] == '-' && name[1] == '-' ? strchr(name, '=') : NULL;
    return find_len(opts, name, eq ? (size_t)(eq - name) : strlen(name));
}

int dl_opts_next(dl_opts *p)
{
    p->value = NULL;
    p->opt = NULL;
    if (p->next >= p->argc)
        return DL_OPTS_END;
    const char *a = p->argv[p->next++];
    if (!p->ended && !strcmp(a, "--")) {
        p->ended = 1;
        return dl_opts_next(p);
    }
    if (p->ended || a[0] != '-' || !a[1]) {
        p->value = a;
        return DL_OPTS_ARG;
    }
    /* --name=value: only long options carry their value in the word */
    const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const dl_opt *o = find_len(p->opts, a, len);
    if (!o) {
        fprintf(stderr, "%s: unknown option '%.*s' (see %s --help)\n", p->prog, (int)len, a,
                p->prog);
        return DL_OPTS_ERROR;
    }
    p->opt = o;
    if (!o->arg) {
        if (eq) {
            fprintf(stderr, "%s: %s takes no value, got '%s'\n", p->prog, o->name, eq + 1);
            return DL_OPTS_ERROR;
        }
        return o->id;
    }
    if (eq) {
        p->value = eq + 1;
    } else if (p->next < p->argc) {
        p->value = p->argv[p->next++];
    } else {
        fprintf(stderr, "%s: %s needs a value (%s)\n", p->prog, o->name, o->arg);
        return DL_OPTS_ERROR;
    }
    return o->id;
}

int dl_price_parse(const char *text, double *out)
{
    *out = 0;
    if (!text) {
        text = getenv("DLBENCH_PRICE_PER_HOUR");
        if (!text || !text[0])
            return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !(v >= 0) || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}
