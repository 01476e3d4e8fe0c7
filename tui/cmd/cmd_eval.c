/* cmd_eval.c - `dlbench eval RUN`: loss, accuracy, per-class precision and recall, a confusion matrix in the terminal (or --json) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "scripting/session_eval.h"
#include "tui/cmd/commands.h"
#include "tui/cmd/exit.h"
#include "tui/cmd/opts.h"

static int bad_usage(const dl_command *self, const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dlbench eval: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see dlbench %s --help)\n", self->name);
    return DL_EXIT_USAGE;
}

/* A class name cut to width characters (bytes of UTF-8 kept whole). */
static void abbrev(const char *name, int width, char *out)
{
    int n = 0, chars = 0;
    while (name[n] && chars < width) {
        int len = 1;
        while ((name[n + len] & 0xc0) == 0x80)
            len++;
        memcpy(out + n, name + n, (size_t)len);
        n += len;
        chars++;
    }
    out[n] = 0;
}

/* The length of the prefix all class names share (kept short of the
 * shortest name, so that every name keeps something), in bytes. */
static size_t common_prefix(const dl_eval_report *r)
{
    size_t n = strlen(r->names[0]);
    for (int k = 1; k < r->classes; k++) {
        size_t i = 0;
        while (i < n && r->names[k][i] == r->names[0][i])
            i++;
        n = i;
    }
    for (int k = 0; k < r->classes; k++)
        if (strlen(r->names[k]) <= n)
            return 0;
    while (n > 0 && (r->names[0][n] & 0xc0) == 0x80)
        n--;
    return r->classes > 1 ? n : 0;
}

static void print_classes(const dl_eval_report *r)
{
    printf("\n%-16s %9s %9s %9s\n", "class", "precision", "recall", "support");
    for (int k = 0; k < r->classes; k++) {
        double p, rc;
        long support;
        dl_eval_report_class(r, k, &p, &rc, &support);
        char name[80];
        abbrev(r->names[k], 16, name);
        printf("%-16s %9.4f %9.4f %9ld\n", name, p, rc, support);
    }
}

/* Rows: the true class (10 characters), columns: the predicted one (5
 * characters of its name, counts right-aligned in 6): 10 classes fit 80
 * columns. */
static void print_confusion(const dl_eval_report *r)
{
    int K = r->classes;
    long most = 0;
    for (int i = 0; i < K * K; i++)
        most = r->confusion[i] > most ? r->confusion[i] : most;
    size_t skip = common_prefix(r);
    int w = 6;
    while (most >= 100000 && w < 12) {
        most /= 10;
        w++;
    }
    printf("\nconfusion (rows: true class, columns: predicted; * marks the diagonal)\n");
    if (skip)
        printf("(names without their common prefix \"%.*s\")\n", (int)skip, r->names[0]);
    printf("%10s", "");
    for (int k = 0; k < K; k++) {
        char name[40];
        abbrev(r->names[k] + skip, w - 1, name);
        printf(" %*s", w - 1, name);
    }
    printf("\n");
    for (int i = 0; i < K; i++) {
        char name[80];
        abbrev(r->names[i] + skip, 9, name);
        printf("%-10s", name);
        for (int k = 0; k < K; k++) {
            long v = r->confusion[(size_t)i * (size_t)K + (size_t)k];
            printf("%*ld%s", w - 1, v, i == k ? "*" : " ");
        }
        printf("\n");
    }
}

static void print_text(const dl_eval_report *r)
{
    printf("run         %s\n", r->run);
    printf("checkpoint  %s (step %ld, epoch %d)\n", r->checkpoint, r->step, r->epoch);
    printf("data        %s (%ld samples)\n", r->data, r->samples);
    printf("loss        %.6f (%s)\n", r->loss, r->loss_name);
    if (!isnan(r->acc) && r->classes > 0) {
        long correct = 0;
        for (int k = 0; k < r->classes; k++)
            correct += r->confusion[(size_t)k * (size_t)r->classes + (size_t)k];
        printf("accuracy    %.6f (%ld of %ld)\n", r->acc, correct, r->samples);
    } else if (!isnan(r->acc)) {
        printf("accuracy    %.6f\n", r->acc);
    }
    if (r->lm) {
        printf("perplexity  %.4f\n", r->ppl);
        printf("bits/char   %.4f\n", r->bpc);
    }
    if (r->classes > 0) {
        print_classes(r);
        print_confusion(r);
    }
}

static cJSON *number_or_null(double v)
{
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static void add_classes(cJSON *o, const dl_eval_report *r)
{
    cJSON *classes = cJSON_AddArrayToObject(o, "classes");
    cJSON *matrix = cJSON_AddArrayToObject(o, "confusion");
    for (int k = 0; k < r->classes; k++) {
        double p, rc;
        long support;
        dl_eval_report_class(r, k, &p, &rc, &support);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "name", r->names[k]);
        cJSON_AddItemToObject(c, "precision", number_or_null(p));
        cJSON_AddItemToObject(c, "recall", number_or_null(rc));
        cJSON_AddNumberToObject(c, "support", (double)support);
        cJSON_AddItemToArray(classes, c);
        cJSON *row = cJSON_CreateArray();
        for (int j = 0; j < r->classes; j++)
            cJSON_AddItemToArray(
                row, cJSON_CreateNumber(
                         (double)r->confusion[(size_t)k * (size_t)r->classes + (size_t)j]));
        cJSON_AddItemToArray(matrix, row);
    }
}

static int print_json(const dl_eval_report *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run", r->run);
    cJSON_AddStringToObject(o, "checkpoint", r->checkpoint);
    cJSON_AddNumberToObject(o, "step", (double)r->step);
    cJSON_AddNumberToObject(o, "epoch", r->epoch);
    cJSON_AddStringToObject(o, "data", r->data);
    cJSON_AddNumberToObject(o, "samples", (double)r->samples);
    cJSON_AddStringToObject(o, "loss_name", r->loss_name ? r->loss_name : "");
    cJSON_AddItemToObject(o, "loss", number_or_null(r->loss));
    cJSON_AddItemToObject(o, "accuracy", number_or_null(r->acc));
    if (r->lm) {
        cJSON_AddItemToObject(o, "perplexity", number_or_null(r->ppl));
        cJSON_AddItemToObject(o, "bits_per_char", number_or_null(r->bpc));
    }
    if (r->classes > 0)
        add_classes(o, r);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text)
        return DL_EXIT_FAILED;
    printf("%s\n", text);
    free(text);
    return DL_EXIT_OK;
}

int dl_cmd_eval(const dl_command *self, int argc, char **argv)
{
    dl_eval_options o = {0};
    int json = 0;
    dl_opts p;
    dl_command_opts(&p, self, argc, argv);
    int id;
    while ((id = dl_opts_next(&p)) != DL_OPTS_END) {
        switch (id) {
        case DL_OPTS_ERROR: return DL_EXIT_USAGE;
        case DL_OPT_HELP: dl_command_usage(self, stdout); return DL_EXIT_OK;
        case DL_OPT_DATA: o.data = p.value; break;
        case DL_OPT_CHECKPOINT: o.checkpoint = p.value; break;
        case DL_OPT_OUT: o.out_dir = p.value; break;
        case DL_OPT_JSON: json = 1; break;
        case DL_OPTS_ARG:
            if (o.run)
                return bad_usage(self, "one run at a time, got '%s' and '%s'", o.run, p.value);
            o.run = p.value;
            break;
        default: return bad_usage(self, "%s%s: not an option of eval", p.opt->name, "");
        }
    }
    if (!o.run) {
        dl_command_usage(self, stderr);
        return DL_EXIT_USAGE;
    }
    dl_eval_report r;
    int rc = dl_session_eval_run(&o, &r);
    if (rc < 0) {
        fprintf(stderr, "dlbench eval: %s\n", dl_error_message());
        return dl_exit_for(rc);
    }
    int status = DL_EXIT_OK;
    if (json)
        status = print_json(&r);
    else
        print_text(&r);
    dl_eval_report_done(&r);
    fflush(stdout);
    return status;
}
