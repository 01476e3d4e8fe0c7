/* usage.c - one command's help and option walk, from its row of the table (never the table itself) */
#include <stdio.h>
#include <string.h>

#include "tui/cmd/commands.h"

void dl_command_opts(dl_opts *p, const dl_command *c, int argc, char **argv)
{
    char prog[48];
    snprintf(prog, sizeof prog, "dlbench%s%s", c->name[0] ? " " : "", c->name);
    dl_opts_init(p, prog, c->opts, argc, argv);
}

/* text from column col on, wrapped at 80 columns, continued at column
 * indent; a newline in the text starts a new line. */
static void wrap(FILE *f, const char *text, int col, int indent)
{
    while (*text) {
        size_t len = strcspn(text, " \n");
        if (col > indent && col + 1 + (int)len > 80) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fprintf(f, "%.*s", (int)len, text);
        col += (int)len;
        text += len;
        if (*text == '\n') {
            fputc('\n', f);
            col = 0;
        }
        if (*text)
            text++;
    }
    fputc('\n', f);
}

/* "  -q, --quiet   help": the option's names, then its help at column 24. */
static void print_opt(const dl_opt *o, FILE *f)
{
    char names[96];
    if (o->id == 0)
        snprintf(names, sizeof names, "%s", o->name);
    else
        snprintf(names, sizeof names, "%s%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "",
                 o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    if (strlen(names) > 20)
        fprintf(f, "  %s\n%24s", names, "");
    else
        fprintf(f, "  %-20s  ", names);
    wrap(f, o->help, 24, 24);
}

void dl_command_usage(const dl_command *c, FILE *f)
{
    const char *line = c->synopsis;
    for (int n = 0; *line; n++) {
        size_t len = strcspn(line, "\n");
        fprintf(f, "%s dlbench%s%s %.*s\n", n ? "      " : "usage:", c->name[0] ? " " : "", c->name,
                (int)len, line);
        line += len + (line[len] == '\n');
    }
    fprintf(f, "%s\n\n", c->summary);
    for (const dl_opt *o = c->opts; o->name; o++)
        if (!o->hidden)
            print_opt(o, f);
    if (c->notes) {
        fputc('\n', f);
        wrap(f, c->notes, 0, 0);
    }
    if (!c->fn)
        fprintf(f, "\n(not part of this build)\n");
}
