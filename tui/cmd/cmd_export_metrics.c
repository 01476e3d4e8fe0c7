/* cmd_export_metrics.c - `dlbench export-metrics RUN...` (every metric of the runs as CSV or JSON lines) and `dlbench tag RUN TAG...` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/rundir/records.h"
#include "engine/rundir/runlog.h"
#include "tui/cmd/commands.h"
#include "tui/cmd/exit.h"
#include "tui/export_metrics.h"

/* The runs named on the command line, resolved under dir; -1 after
 * saying which one is not a run. */
static int resolve_runs(const char *dir, char **names, int n, dl_export_run *out)
{
    for (int i = 0; i < n; i++) {
        char path[1100];
        if (dl_runlog_resolve(dir, names[i], path, sizeof path) < 0 ||
            dl_export_run_open(&out[i], path) < 0) {
            fprintf(stderr, "dlbench export-metrics: %s\n", dl_error_message());
            return -1;
        }
    }
    return 0;
}

/* The export into FILE (whole or not at all) or stdout. */
static int emit(const char *output, dl_export_run *runs, int n, int jsonl)
{
    if (!output) {
        dl_export_metrics(stdout, runs, n, jsonl);
        return fflush(stdout) == 0 ? DL_EXIT_OK : DL_EXIT_FAILED;
    }
    long rows;
    if (dl_export_metrics_file(output, runs, n, jsonl, &rows) < 0) {
        fprintf(stderr, "dlbench export-metrics: %s\n", dl_error_message());
        return DL_EXIT_FAILED;
    }
    fprintf(stderr, "dlbench export-metrics: %ld rows of %d run%s written to %s\n", rows, n,
            n == 1 ? "" : "s", output);
    return DL_EXIT_OK;
}

int dl_cmd_export_metrics(const dl_command *self, int argc, char **argv)
{
    const char *dir = "runs", *output = NULL;
    int jsonl = 0, n = 0, status = -1;
    char **names = calloc((size_t)argc + 1, sizeof *names);
    dl_opts p;
    dl_command_opts(&p, self, argc, argv);
    int id;
    while (names && status < 0 && (id = dl_opts_next(&p)) != DL_OPTS_END) {
        switch (id) {
        case DL_OPTS_ERROR: status = DL_EXIT_USAGE; break;
        case DL_OPT_HELP: dl_command_usage(self, stdout), status = DL_EXIT_OK; break;
        case DL_OPT_OUT: dir = p.value; break;
        case DL_OPT_OUTPUT: output = p.value; break;
        case DL_OPT_CSV: jsonl = 0; break;
        case DL_OPT_JSONL: jsonl = 1; break;
        default: names[n++] = (char *)p.value; /* DL_OPTS_ARG */
        }
    }
    if (status < 0 && n == 0) {
        dl_command_usage(self, stderr);
        status = DL_EXIT_USAGE;
    }
    dl_export_run *runs = status < 0 ? calloc((size_t)n, sizeof *runs) : NULL;
    if (status < 0 && (!runs || resolve_runs(dir, names, n, runs) < 0))
        status = DL_EXIT_USAGE;
    if (status < 0)
        status = emit(output, runs, n, jsonl);
    for (int i = 0; runs && i < n; i++)
        dl_export_run_close(&runs[i]);
    free(runs);
    free(names);
    return status < 0 ? DL_EXIT_FAILED : status;
}

int dl_cmd_tag(const dl_command *self, int argc, char **argv)
{
    const char *dir = "runs", *run = NULL;
    int remove = 0, nt = 0, status = DL_EXIT_OK;
    char **tags = calloc((size_t)argc + 1, sizeof *tags);
    dl_opts p;
    dl_command_opts(&p, self, argc, argv);
    int id;
    while (tags && (id = dl_opts_next(&p)) != DL_OPTS_END) {
        if (id == DL_OPTS_ERROR || id == DL_OPT_HELP) {
            dl_command_usage(self, id == DL_OPT_HELP ? stdout : stderr);
            free(tags);
            return id == DL_OPT_HELP ? DL_EXIT_OK : DL_EXIT_USAGE;
        }
        if (id == DL_OPT_OUT)
            dir = p.value;
        else if (id == DL_OPT_REMOVE)
            remove = 1;
        else if (!run)
            run = p.value;
        else
            tags[nt++] = (char *)p.value;
    }
    char path[1100], list[512];
    if (!tags || !run || !nt) {
        dl_command_usage(self, stderr);
        status = DL_EXIT_USAGE;
    } else if (dl_runlog_resolve(dir, run, path, sizeof path) < 0) {
        fprintf(stderr, "dlbench tag: %s\n", dl_error_message());
        status = DL_EXIT_USAGE;
    }
    for (int i = 0; status == DL_EXIT_OK && i < nt; i++)
        if (!tags[i][0] || strlen(tags[i]) > 63 ||
            strspn(tags[i],
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:+-") !=
                strlen(tags[i])) { /* every tag checked before any is written */
            fprintf(stderr,
                    "dlbench tag: tag '%.80s': expected 1-63 letters, digits or _ . : + - (no "
                    "spaces)\n",
                    tags[i]);
            status = DL_EXIT_USAGE;
        }
    for (int i = 0; status == DL_EXIT_OK && i < nt; i++)
        if (dl_runlog_tag(path, tags[i], remove) < 0) {
            fprintf(stderr, "dlbench tag: %s\n", dl_error_message());
            status = DL_EXIT_USAGE;
        }
    if (status == DL_EXIT_OK) {
        dl_records_tags(path, list, sizeof list);
        printf("%s: tags: %s\n", path, list[0] ? list : "(none)");
    }
    free(tags);
    return status;
}
