/* cmd_runs.c - `dlbench runs` (the experiment table, `runs diff A B`) and `dlbench note` */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/rundir/records.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog.h"
#include "tui/cmd/commands.h"
#include "engine/base/textout.h"

/* This command's row of the table (its options and help), set on entry. */
static const dl_command *note_cmd;

static const dl_command *this_cmd;

typedef struct run_row {
    char id[256];
    char tags[256]; /* space-separated (tags.txt) */
    cJSON *config, *summary;
} run_row;

static const cJSON *get(const cJSON *j, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(j, k);
}

static const char *str_of(const cJSON *j, const char *k, const char *def)
{
    const cJSON *v = get(j, k);
    return cJSON_IsString(v) ? v->valuestring : def;
}

/* A JSON value as short text ("0.05", "true", "relu"). */
static void value_text(const cJSON *v, char *buf, size_t size)
{
    if (!v)
        snprintf(buf, size, "-");
    else if (cJSON_IsString(v))
        snprintf(buf, size, "%s", v->valuestring);
    else if (cJSON_IsBool(v))
        snprintf(buf, size, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v))
        snprintf(buf, size, "%.6g", v->valuedouble);
    else if (cJSON_IsNull(v))
        snprintf(buf, size, "null");
    else {
        char *t = cJSON_PrintUnformatted(v);
        snprintf(buf, size, "%s", t ? t : "?");
        free(t);
    }
}

/* The metric a run is judged by: best val_acc, else best val_loss, else
 * the final training loss. */
static int headline(const run_row *r, char *name, size_t nsize, double *v)
{
    static const char *order[] = {"val_acc", "val_loss", "train_acc", "train_loss", "loss"};
    const cJSON *best = get(r->summary, "best");
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        const cJSON *b = get(get(best, order[i]), "value");
        if (cJSON_IsNumber(b)) {
            snprintf(name, nsize, "%s", order[i]);
            *v = b->valuedouble;
            return 1;
        }
    }
    return 0;
}

/* Looks up a key for sorting and filtering: a summary or config field, a
 * hyperparameter, or a metric (best value, else final). */
static const cJSON *lookup(const run_row *r, const char *key)
{
    const cJSON *v;
    if (!strcmp(key, "id") || !strcmp(key, "run"))
        return get(r->summary, "run");
    if ((v = get(get(r->config, "hparams"), key)))
        return v;
    if ((v = get(get(get(r->summary, "best"), key), "value")))
        return v;
    if ((v = get(get(r->summary, "final"), key)))
        return v;
    if (!strcmp(key, "duration"))
        return get(r->summary, "wall_s");
    if ((v = get(r->summary, key)))
        return v;
    return get(r->config, key);
}

static int load_runs(const char *dir, run_row **out, int *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char run[1400];
        snprintf(run, sizeof run, "%s/%s", dir, e->d_name);
        cJSON *c = dl_records_load(run, DL_RUN_FILE_CONFIG);
        if (!c)
            continue;
        cJSON *s = dl_records_load(run, DL_RUN_FILE_SUMMARY);
        if (!s)
            s = cJSON_CreateObject();
        if (*n == cap) {
            cap = cap ? cap * 2 : 32;
            run_row *nr = realloc(*out, (size_t)cap * sizeof *nr);
            if (!nr) {
                cJSON_Delete(c);
                cJSON_Delete(s);
                break;
            }
            *out = nr;
        }
        run_row *r = &(*out)[(*n)++];
        snprintf(r->id, sizeof r->id, "%s", e->d_name);
        dl_records_tags(run, r->tags, sizeof r->tags);
        r->config = c;
        r->summary = s;
    }
    closedir(d);
    dl_error_clear();
    return 0;
}

/* Adds the members of object o to the ", "-separated list (once each). */
static void add_keys(char *list, size_t size, const cJSON *o)
{
    for (const cJSON *c = o ? o->child : NULL; c; c = c->next) {
        size_t l = strlen(list), k = c->string ? strlen(c->string) : 0;
        if (k == 0)
            continue; /* "" is not a key one can sort by (and strstr would not move) */
        int seen = 0;
        for (const char *p = list; !seen && (p = strstr(p, c->string)); p += k)
            seen = (p == list || p[-1] == ' ') && (p[k] == ',' || !p[k]);
        if (!seen)
            snprintf(list + l, size - l, ", %s", c->string);
    }
}

/* A --sort key must name something a run has: a column, a
 * hyperparameter or a metric (any key passes when there are no runs).
 * Returns 0, or 2 after saying which keys there are. */
static int check_sort_key(const char *key, const run_row *rows, int n)
{
    if (n == 0)
        return 0;
    static const char *columns[] = {"id",     "run",           "name",     "status",
                                    "device", "precision",     "duration", "steps",
                                    "epochs", "samples_per_s", "started"};
    for (size_t i = 0; i < sizeof columns / sizeof *columns; i++)
        if (!strcmp(key, columns[i]))
            return 0;
    for (int i = 0; i < n; i++)
        if (lookup(&rows[i], key))
            return 0;
    char list[2048] = "";
    for (size_t i = 0; i < sizeof columns / sizeof *columns; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 columns[i]);
    for (int i = 0; i < n; i++) {
        add_keys(list, sizeof list, get(rows[i].config, "hparams"));
        add_keys(list, sizeof list, get(rows[i].summary, "final"));
    }
    fprintf(stderr, "dlbench runs: --sort %s: no run has that key; expected one of: %s\n", key,
            list);
    return 2;
}

static void free_runs(run_row *r, int n)
{
    for (int i = 0; i < n; i++) {
        cJSON_Delete(r[i].config);
        cJSON_Delete(r[i].summary);
    }
    free(r);
}

static const char *sort_key;
static int sort_desc;

static int cmp_rows(const void *pa, const void *pb)
{
    const run_row *a = pa, *b = pb;
    int c;
    if (!sort_key) {
        c = strcmp(a->id, b->id);
    } else {
        const cJSON *x = lookup(a, sort_key), *y = lookup(b, sort_key);
        if (!x || !y)
            c = (x != NULL) - (y != NULL); /* runs without the key last */
        else if (cJSON_IsNumber(x) && cJSON_IsNumber(y))
            c = (x->valuedouble > y->valuedouble) - (x->valuedouble < y->valuedouble);
        else {
            char tx[128], ty[128];
            value_text(x, tx, sizeof tx);
            value_text(y, ty, sizeof ty);
            c = strcmp(tx, ty);
        }
        if (!x || !y)
            return -c;
    }
    return sort_desc ? -c : c;
}

static int matches(const run_row *r, char **filters, int nf)
{
    for (int i = 0; i < nf; i++) {
        const char *eq = strchr(filters[i], '=');
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - filters[i]), filters[i]);
        if (!strcmp(key, "tag")) {
            if (!dl_records_has_tag(r->tags, eq + 1))
                return 0;
            continue;
        }
        const cJSON *v = lookup(r, key);
        char text[256];
        value_text(v, text, sizeof text);
        if (!v || strcmp(text, eq + 1)) {
            /* numbers compare by value: lr=0.05 matches 0.050 */
            char *end;
            double want = strtod(eq + 1, &end);
            if (!v || !cJSON_IsNumber(v) || *end ||
                fabs(v->valuedouble - want) > 1e-12 * fabs(want))
                return 0;
        }
    }
    return 1;
}

/* "hidden=512 lr=0.05": a study trial's parameters, then the
 * hyperparameters, as config.json sorts them. */
static void hparams_text(const run_row *r, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    static const char *groups[] = {"trial_params", "hparams"};
    for (int g = 0; g < 2; g++) {
        const cJSON *hps = get(r->config, groups[g]);
        for (const cJSON *h = hps ? hps->child : NULL; h; h = h->next) {
            char v[64];
            value_text(h, v, sizeof v);
            int n = snprintf(buf + len, len < size ? size - len : 0, "%s%s=%s", len ? " " : "",
                             h->string, v);
            if (n < 0 || len + (size_t)n >= size)
                return;
            len += (size_t)n;
        }
    }
}

/* Prints the leaves that differ between a and b ("optimizer.lr"); objects
 * recurse, anything else compares as text. Returns the count. */
static int diff_json(const char *name, const cJSON *a, const cJSON *b)
{
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        int n = 0;
        for (int pass = 0; pass < 2; pass++) {
            const cJSON *from = pass ? b : a, *other = pass ? a : b;
            for (const cJSON *c = from->child; c; c = c->next) {
                if (pass && get(other, c->string))
                    continue;
                char sub[160];
                snprintf(sub, sizeof sub, "%s.%s", name, c->string);
                n += diff_json(sub, get(a, c->string), get(b, c->string));
            }
        }
        return n;
    }
    char va[512], vb[512];
    value_text(a, va, sizeof va);
    value_text(b, vb, sizeof vb);
    if (!strcmp(va, vb))
        return 0;
    printf("%-24s %-24s %s\n", name, va, vb);
    return 1;
}

static int runs_diff(const char *dir, const char *a, const char *b)
{
    char pa[1100], pb[1100];
    if (dl_runlog_resolve(dir, a, pa, sizeof pa) < 0 ||
        dl_runlog_resolve(dir, b, pb, sizeof pb) < 0) {
        fprintf(stderr, "dlbench runs diff: %s\n", dl_error_message());
        return 2;
    }
    run_row r[2];
    const char *paths[2] = {pa, pb};
    for (int i = 0; i < 2; i++) {
        r[i].config = dl_records_load(paths[i], DL_RUN_FILE_CONFIG);
        r[i].summary = dl_records_load(paths[i], DL_RUN_FILE_SUMMARY);
        const char *slash = strrchr(paths[i], '/');
        snprintf(r[i].id, sizeof r[i].id, "%s", slash ? slash + 1 : paths[i]);
    }
    if (!r[0].config || !r[1].config) {
        fprintf(stderr, "dlbench runs diff: %s\n", dl_error_message());
        for (int i = 0; i < 2; i++) {
            cJSON_Delete(r[i].config);
            cJSON_Delete(r[i].summary);
        }
        return 2;
    }
    printf("A: %s\nB: %s\n", r[0].id, r[1].id);
    int diffs = 0;
    /* hyperparameters: the union of both */
    printf("\n%-24s %-24s %-24s\n", "hyperparameter", "A", "B");
    const cJSON *ha = get(r[0].config, "hparams"), *hb = get(r[1].config, "hparams");
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *from = pass ? hb : ha, *other = pass ? ha : hb;
        for (const cJSON *h = from ? from->child : NULL; h; h = h->next) {
            if (pass && get(other, h->string))
                continue;
            char va[64], vb[64];
            value_text(get(ha, h->string), va, sizeof va);
            value_text(get(hb, h->string), vb, sizeof vb);
            if (strcmp(va, vb)) {
                printf("%-24s %-24s %-24s\n", h->string, va, vb);
                diffs++;
            }
        }
    }
    static const char *fields[] = {"model",     "optimizer",     "schedule", "loss",
                                   "batch",     "accumulate",    "epochs",   "max_steps",
                                   "precision", "device",        "seed",     "data",
                                   "callbacks", "script_sha256", "version"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        diffs += diff_json(fields[i], get(r[0].config, fields[i]), get(r[1].config, fields[i]));
    if (!diffs)
        printf("(same configuration)\n");
    printf("\n%-24s %-24s %-24s\n", "result", "A", "B");
    static const char *res[] = {"status", "steps", "epochs", "wall_s", "samples_per_s"};
    for (size_t i = 0; i < sizeof res / sizeof *res; i++) {
        char va[64], vb[64];
        value_text(get(r[0].summary, res[i]), va, sizeof va);
        value_text(get(r[1].summary, res[i]), vb, sizeof vb);
        printf("%-24s %-24s %-24s\n", res[i], va, vb);
    }
    static const char *metrics[] = {"val_acc", "val_loss", "train_acc", "train_loss"};
    for (size_t i = 0; i < sizeof metrics / sizeof *metrics; i++) {
        const cJSON *fa = get(get(r[0].summary, "final"), metrics[i]);
        const cJSON *fb = get(get(r[1].summary, "final"), metrics[i]);
        if (!fa && !fb)
            continue;
        char va[64], vb[64], name[48];
        value_text(fa, va, sizeof va);
        value_text(fb, vb, sizeof vb);
        snprintf(name, sizeof name, "final %s", metrics[i]);
        printf("%-24s %-24s %-24s\n", name, va, vb);
        value_text(get(get(get(r[0].summary, "best"), metrics[i]), "value"), va, sizeof va);
        value_text(get(get(get(r[1].summary, "best"), metrics[i]), "value"), vb, sizeof vb);
        snprintf(name, sizeof name, "best %s", metrics[i]);
        printf("%-24s %-24s %-24s\n", name, va, vb);
    }
    for (int i = 0; i < 2; i++) {
        cJSON_Delete(r[i].config);
        cJSON_Delete(r[i].summary);
    }
    return 0;
}

/* `runs --json`: the matching runs' config and summary, whole. */
static void print_json(const run_row *rows, int n, char **filters, int nf)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        if (!matches(&rows[i], filters, nf))
            continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", rows[i].id);
        cJSON_AddItemToObject(o, "config", cJSON_Duplicate(rows[i].config, 1));
        cJSON_AddItemToObject(o, "summary", cJSON_Duplicate(rows[i].summary, 1));
        cJSON_AddItemToArray(arr, o);
    }
    char *t = cJSON_Print(arr);
    printf("%s\n", t ? t : "[]");
    free(t);
    cJSON_Delete(arr);
}

/* `runs`: one line per matching run. */
static void print_table(const run_row *rows, int n, char **filters, int nf, const char *dir)
{
    printf("%-40s %-10s %-8s %-5s %-5s %-20s %9s  %s\n", "id", "name", "status", "dev", "prec",
           "best", "duration", "hyperparameters");
    int shown = 0;
    for (int i = 0; i < n; i++) {
        const run_row *r = &rows[i];
        if (!matches(r, filters, nf))
            continue;
        char metric[48] = "-", best[32] = "", hp[512];
        double v;
        if (headline(r, metric, sizeof metric, &v))
            snprintf(best, sizeof best, " %.4f", v);
        char bestcol[80];
        snprintf(bestcol, sizeof bestcol, "%s%s", metric, best);
        const cJSON *w = get(r->summary, "wall_s");
        char dur[32] = "-";
        if (cJSON_IsNumber(w))
            snprintf(dur, sizeof dur, "%.1f s", w->valuedouble);
        hparams_text(r, hp, sizeof hp);
        printf("%-40s %-10.10s %-8s %-5s %-5s %-20s %9s  %s%s%s\n", r->id,
               str_of(r->config, "name", "?"), str_of(r->summary, "status", "?"),
               str_of(r->config, "device", "?"), str_of(r->config, "precision", "?"), bestcol, dur,
               hp, r->tags[0] ? "  #" : "", r->tags);
        shown++;
    }
    if (!shown)
        printf("(no runs in %s%s)\n", dir, nf ? " match the filter" : "");
}

/* The union of the members of o over the rows (by name, first seen first). */
static int keys_of(const run_row *rows, int n, char **filters, int nf, const char *cfg_member,
                   const char *sum_member, char (*keys)[64], int max)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!matches(&rows[i], filters, nf))
            continue;
        const cJSON *o =
            cfg_member ? get(rows[i].config, cfg_member) : get(rows[i].summary, sum_member);
        for (const cJSON *c = o ? o->child : NULL; c && k < max; c = c->next) {
            int seen = !c->string;
            for (int j = 0; j < k && !seen; j++)
                seen = !strcmp(keys[j], c->string);
            if (!seen)
                snprintf(keys[k++], sizeof keys[0], "%.63s", c->string);
        }
    }
    return k;
}

/* `runs --csv`: a line per matching run: its columns, tags, every
 * hyperparameter, the seed, final_METRIC and best_METRIC. */
static void print_csv(const run_row *rows, int n, char **filters, int nf)
{
    static char hp[128][64], fin[128][64], best[128][64];
    int nh = keys_of(rows, n, filters, nf, "hparams", NULL, hp, 128);
    int nfin = keys_of(rows, n, filters, nf, NULL, "final", fin, 128);
    int nbest = keys_of(rows, n, filters, nf, NULL, "best", best, 128);
    static const char *cols[] = {"run",   "name",        "status", "device", "precision",
                                 "steps", "epochs_done", "wall_s", "tags"};
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++)
        printf("%s%s", i ? "," : "", cols[i]);
    for (int i = 0; i < nh; i++)
        printf(",%s%s", !strcmp(hp[i], "seed") ? "hp_" : "", hp[i]);
    printf(",seed");
    for (int i = 0; i < nfin; i++)
        printf(",final_%s", fin[i]);
    for (int i = 0; i < nbest; i++)
        printf(",best_%s", best[i]);
    printf("\n");
    for (int i = 0; i < n; i++) {
        const run_row *r = &rows[i];
        if (!matches(r, filters, nf))
            continue;
        dl_csv_field(stdout, r->id);
        const cJSON *cells[] = {get(r->config, "name"),   get(r->summary, "status"),
                                get(r->config, "device"), get(r->config, "precision"),
                                get(r->summary, "steps"), get(r->summary, "epochs"),
                                get(r->summary, "wall_s")};
        for (size_t k = 0; k < sizeof cells / sizeof *cells; k++)
            putchar(','), dl_csv_json(stdout, cells[k]);
        putchar(','), dl_csv_field(stdout, r->tags);
        for (int k = 0; k < nh; k++)
            putchar(','), dl_csv_json(stdout, get(get(r->config, "hparams"), hp[k]));
        putchar(','), dl_csv_json(stdout, get(r->config, "seed"));
        for (int k = 0; k < nfin; k++)
            putchar(','), dl_csv_json(stdout, get(get(r->summary, "final"), fin[k]));
        for (int k = 0; k < nbest; k++)
            putchar(','), dl_csv_json(stdout, get(get(get(r->summary, "best"), best[k]), "value"));
        putchar('\n');
    }
}

static void usage_runs(FILE *f) { dl_command_usage(this_cmd, f); }

typedef struct runs_args {
    const char *dir;
    int json, csv;
    char **filters; /* --filter k=v: pointers into argv */
    int nf;
    const char *pos[3];
    int npos;
} runs_args;

/* dlbench runs' arguments into a (a->filters is the caller's to free,
 * also on an early return); --sort and --desc set sort_key and sort_desc.
 * Returns -1 to go on, else the exit status. */
static int parse_runs_args(runs_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->dir = "runs";
    sort_key = NULL;
    sort_desc = 0;
    a->filters = calloc((size_t)argc + 1, sizeof *a->filters);
    if (!a->filters)
        return DL_EXIT_FAILED;
    dl_opts p;
    dl_command_opts(&p, this_cmd, argc, argv);
    int id;
    while ((id = dl_opts_next(&p)) != DL_OPTS_END) {
        switch (id) {
        case DL_OPTS_ERROR: return DL_EXIT_USAGE;
        case DL_OPT_HELP: usage_runs(stdout); return DL_EXIT_OK;
        case DL_OPT_JSON: a->json = 1; break;
        case DL_OPT_CSV: a->csv = 1; break;
        case DL_OPT_DESC: sort_desc = 1; break;
        case DL_OPT_OUT: a->dir = p.value; break;
        case DL_OPT_SORT: sort_key = p.value; break;
        case DL_OPT_FILTER:
            if (!strchr(p.value, '=') || p.value[0] == '=') {
                fprintf(stderr, "dlbench runs: --filter expects KEY=VALUE, got '%s'\n", p.value);
                return DL_EXIT_USAGE;
            }
            a->filters[a->nf++] = (char *)p.value;
            break;
        default: /* DL_OPTS_ARG */
            if (a->npos == 3) {
                usage_runs(stderr);
                return DL_EXIT_USAGE;
            }
            a->pos[a->npos++] = p.value;
        }
    }
    if (a->npos > 0 && (strcmp(a->pos[0], "diff") || a->npos != 3)) {
        usage_runs(stderr);
        return DL_EXIT_USAGE;
    }
    return -1;
}

int dl_cmd_runs(const dl_command *self, int argc, char **argv)
{
    this_cmd = self;
    runs_args a;
    int status = parse_runs_args(&a, argc, argv);
    if (status < 0 && a.npos > 0)
        status = runs_diff(a.dir, a.pos[1], a.pos[2]);
    if (status >= 0) {
        free(a.filters);
        return status;
    }
    const char *dir = a.dir;
    int json = a.json;
    char **filters = a.filters;
    int nf = a.nf;
    run_row *rows;
    int n;
    load_runs(dir, &rows, &n);
    if (sort_key && check_sort_key(sort_key, rows, n)) {
        free_runs(rows, n);
        free(filters);
        return 2;
    }
    char left[512];
    int nleft = dl_runlog_stale_temps(dir, 0, left, sizeof left);
    if (nleft > 0)
        fprintf(stderr,
                "dlbench runs: note: %d half-made run folder%s left by a crash (not "
                "runs; the next run in %s removes %s): %s\n",
                nleft, nleft == 1 ? "" : "s", dir, nleft == 1 ? "it" : "them", left);
    if (n > 1) /* rows is NULL when there are none */
        qsort(rows, (size_t)n, sizeof *rows, cmp_rows);
    if (json)
        print_json(rows, n, filters, nf);
    else if (a.csv)
        print_csv(rows, n, filters, nf);
    else
        print_table(rows, n, filters, nf, dir);
    free_runs(rows, n);
    free(filters);
    return 0;
}

int dl_cmd_note(const dl_command *self, int argc, char **argv)
{
    note_cmd = self;
    const char *dir = "runs", *run = NULL, *text = NULL;
    dl_opts p;
    dl_command_opts(&p, note_cmd, argc, argv);
    int id;
    while ((id = dl_opts_next(&p)) != DL_OPTS_END) {
        if (id == DL_OPTS_ERROR)
            return DL_EXIT_USAGE;
        if (id == DL_OPT_HELP) {
            dl_command_usage(note_cmd, stdout);
            return DL_EXIT_OK;
        }
        if (id == DL_OPT_OUT) {
            dir = p.value;
        } else if (!run) {
            run = p.value;
        } else if (!text) {
            text = p.value;
        } else {
            fprintf(stderr, "dlbench note: quote the note: dlbench note RUN \"text\"\n");
            return DL_EXIT_USAGE;
        }
    }
    if (!run || !text || !text[0]) {
        dl_command_usage(note_cmd, stderr);
        return DL_EXIT_USAGE;
    }
    char path[1100];
    if (dl_runlog_resolve(dir, run, path, sizeof path) < 0 ||
        dl_runlog_append_event(path, "note", text) < 0) {
        fprintf(stderr, "dlbench note: %s\n", dl_error_message());
        return 2;
    }
    printf("note added to %s/" DL_RUN_FILE_EVENTS "\n", path);
    return 0;
}
