/* cmd_export.c - `dlbench export RUN --format onnx|safetensors`: a trained model for other tools */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/base/version.h"
#include "engine/export/export.h"
#include "scripting/run_model.h"
#include "tui/cmd/commands.h"
#include "tui/cmd/exit.h"
#include "tui/cmd/opts.h"

typedef struct export_args {
    const char *run, *format, *output, *checkpoint, *out_dir, *names;
} export_args;

static int bad_usage(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dlbench export: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see dlbench export --help)\n");
    return DL_EXIT_USAGE;
}

/* argv into a; returns -1 when the command goes on, else the exit status. */
static int parse(const dl_command *self, int argc, char **argv, export_args *a)
{
    dl_opts p;
    dl_command_opts(&p, self, argc, argv);
    int id;
    while ((id = dl_opts_next(&p)) != DL_OPTS_END) {
        switch (id) {
        case DL_OPTS_ERROR: return DL_EXIT_USAGE;
        case DL_OPT_HELP: dl_command_usage(self, stdout); return DL_EXIT_OK;
        case DL_OPTS_ARG:
            if (a->run)
                return bad_usage("one run at a time, got '%s' and '%s'", a->run, p.value);
            a->run = p.value;
            break;
        case DL_OPT_FORMAT: a->format = p.value; break;
        case DL_OPT_OUTPUT: a->output = p.value; break;
        case DL_OPT_CHECKPOINT: a->checkpoint = p.value; break;
        case DL_OPT_OUT: a->out_dir = p.value; break;
        case DL_OPT_NAMES: a->names = p.value; break;
        default: return bad_usage("%s%s: not an option of export", p.opt->name, "");
        }
    }
    if (!a->run) {
        dl_command_usage(self, stderr);
        return DL_EXIT_USAGE;
    }
    if (!a->format)
        return bad_usage("--format is needed: onnx or safetensors%s%s", "", "");
    if (strcmp(a->format, "onnx") && strcmp(a->format, "safetensors"))
        return bad_usage("--format %s: expected onnx or safetensors%s", a->format, "");
    if (a->names && strcmp(a->names, "torch") && strcmp(a->names, "dlbench"))
        return bad_usage("--names %s: expected torch or dlbench%s", a->names, "");
    return -1;
}

/* -o FILE must go into a folder that exists (nothing is made on the way). */
static int check_output_folder(const char *path)
{
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    const char *dir = dirname(copy);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "dlbench export: -o %s: folder %s does not exist\n", path, dir);
        return DL_EXIT_USAGE;
    }
    return -1;
}

/* The default output: the run folder's name (and the checkpoint's when it
 * is not the last) with the format's extension, in the current folder. */
static void default_output(const dl_run_model *r, const export_args *a, char *buf, size_t size)
{
    char copy[sizeof r->dir];
    snprintf(copy, sizeof copy, "%s", r->dir);
    const char *ext = !strcmp(a->format, "onnx") ? "onnx" : "safetensors";
    if (a->checkpoint && strcmp(a->checkpoint, "last"))
        snprintf(buf, size, "%s-%s.%s", basename(copy), a->checkpoint, ext);
    else
        snprintf(buf, size, "%s.%s", basename(copy), ext);
}

/* The run's input normalisation as text: what a consumer must apply to
 * raw samples before "input" (x * scale, then (x - mean) / std per channel). */
static void norm_text(const dl_data_info *in, char *scale, char *mean, char *std, size_t size)
{
    snprintf(scale, size, "%.9g", (double)(in->scale != 0 ? in->scale : 1.0f));
    mean[0] = std[0] = 0;
    for (int c = 0; c < in->channels; c++) {
        size_t m = strlen(mean), s = strlen(std);
        snprintf(mean + m, size - m, "%s%.9g", c ? "," : "", (double)in->mean[c]);
        snprintf(std + s, size - s, "%s%.9g", c ? "," : "", (double)in->std[c]);
    }
}

static int export_run(const export_args *a, dl_run_model *r, const char *path)
{
    char run_name[1024], step[32], scale[32], mean[256], std[256];
    snprintf(run_name, sizeof run_name, "%s", r->dir);
    snprintf(step, sizeof step, "%ld", r->info.cursor.step);
    norm_text(&r->train->info, scale, mean, std, sizeof mean);
    const char *names = a->names ? a->names : "torch";
    const char *meta[][2] = {{"dlbench_version", DL_VERSION},
                             {"dlbench_run", basename(run_name)},
                             {"dlbench_checkpoint", a->checkpoint ? a->checkpoint : "last"},
                             {"dlbench_step", step},
                             {"dlbench_names", names},
                             {"dlbench_input_scale", scale},
                             {"dlbench_input_mean", mean},
                             {"dlbench_input_std", std}};
    dl_export_options o = {!strcmp(names, "torch") ? DL_EXPORT_NAMES_TORCH
                                                   : DL_EXPORT_NAMES_DLBENCH,
                           meta, r->train->info.channels > 0 ? 8 : 6};
    if (!strcmp(a->format, "onnx"))
        return dl_export_onnx(r->model, path, &o);
    return dl_export_safetensors(r->model, path, &o);
}

int dl_cmd_export(const dl_command *self, int argc, char **argv)
{
    export_args a = {0};
    int rc = parse(self, argc, argv, &a);
    if (rc >= 0)
        return rc;
    if (a.output && (rc = check_output_folder(a.output)) >= 0)
        return rc;
    dl_run_model r;
    dl_run_model_options ro = {a.run, a.out_dir, a.checkpoint, "export", 1, NULL};
    if ((rc = dl_run_model_open(&r, &ro)) < 0) {
        fprintf(stderr, "dlbench export: %s\n", dl_error_message());
        return dl_exit_for(rc);
    }
    char path[2048];
    if (a.output)
        snprintf(path, sizeof path, "%s", a.output);
    else
        default_output(&r, &a, path, sizeof path);
    rc = export_run(&a, &r, path);
    if (rc < 0)
        fprintf(stderr, "dlbench export: %s\n", dl_error_message());
    else
        printf("wrote %s (%s, %d parameters, %zu floats, checkpoint step %ld)\n", path, a.format,
               dl_model_num_params(r.model), dl_model_param_count(r.model), r.info.cursor.step);
    dl_run_model_close(&r);
    return rc < 0 ? dl_exit_for(rc) : DL_EXIT_OK;
}
