/* session_predict.c - predictions of a trained model for new inputs (HDF5, CSV, images) with the run's normalisation, or a prompt's continuation */
#include "scripting/session_predict.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdio.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/base/textout.h"
#include "engine/data/image_files.h"
#include "engine/data/import_csv.h"
#include "engine/data/open.h"
#include "engine/train/trainer.h"
#include "scripting/run_model.h"
#include "scripting/script.h"
#include "scripting/session_sample.h"

typedef struct writer {
    const dl_predict_options *o;
    int outs;     /* outputs per sample */
    int classes;  /* > 0: a classifier (softmax over outs) */
    char **names; /* [classes] or NULL: the class numbers */
    char **files; /* [rows] or NULL: the image file of each row */
    long index;   /* rows written */
    double *prob; /* [outs] */
    int *order;   /* [outs] */
} writer;

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcasecmp(s + n - m, tail);
}

/* FILE of FILE[:GROUP] exists. */
static int input_exists(const char *in)
{
    char path[1024];
    snprintf(path, sizeof path, "%s", in);
    struct stat st;
    if (stat(path, &st) == 0)
        return 1;
    char *colon = strrchr(path, ':');
    if (colon)
        *colon = 0;
    return colon && stat(path, &st) == 0;
}

static const char *class_name(const writer *w, int k, char *buf, size_t size)
{
    if (w->names)
        return w->names[k];
    snprintf(buf, size, "%d", k);
    return buf;
}

static void header(const writer *w)
{
    FILE *f = w->o->out;
    if (w->o->jsonl)
        return;
    fputs(w->files ? "index,file" : "index", f);
    if (w->classes) {
        fputs(",class,name,probability", f);
        for (int j = 2; j <= w->o->top_k && j <= w->classes; j++)
            fprintf(f, ",class_%d,name_%d,probability_%d", j, j, j);
    }
    if (w->o->logits || !w->classes)
        for (int k = 0; k < w->outs; k++)
            fprintf(f, ",%s_%d", w->classes ? "logit" : "output", k);
    fputc('\n', f);
}

static const double *sort_probs;
static int by_prob(const void *a, const void *b)
{
    double x = sort_probs[*(const int *)a], y = sort_probs[*(const int *)b];
    return (x < y) - (x > y) ? (x < y) - (x > y) : *(const int *)a - *(const int *)b;
}

/* Softmax of z into w->prob (in double), classes ordered by it. */
static void rank(writer *w, const float *z)
{
    double top = z[0], sum = 0;
    for (int k = 1; k < w->classes; k++)
        top = z[k] > top ? z[k] : top;
    for (int k = 0; k < w->classes; k++)
        sum += w->prob[k] = exp((double)z[k] - top);
    for (int k = 0; k < w->classes; k++) {
        w->prob[k] /= sum;
        w->order[k] = k;
    }
    sort_probs = w->prob;
    qsort(w->order, (size_t)w->classes, sizeof *w->order, by_prob);
}

static void row_csv(writer *w, const float *z)
{
    FILE *f = w->o->out;
    char buf[24];
    fprintf(f, "%ld", w->index);
    if (w->files) {
        fputc(',', f);
        dl_csv_field(f, w->files[w->index]);
    }
    for (int j = 0; w->classes && j < w->o->top_k && j < w->classes; j++) {
        int k = w->order[j];
        fprintf(f, ",%d,", k);
        dl_csv_field(f, class_name(w, k, buf, sizeof buf));
        fprintf(f, ",%.9g", w->prob[k]);
    }
    if (w->o->logits || !w->classes)
        for (int k = 0; k < w->outs; k++)
            fprintf(f, ",%.9g", (double)z[k]);
    fputc('\n', f);
}

static void row_json(writer *w, const float *z)
{
    FILE *f = w->o->out;
    char buf[24];
    fprintf(f, "{\"index\":%ld", w->index);
    if (w->files) {
        fputs(",\"file\":", f);
        dl_json_string(f, w->files[w->index]);
    }
    if (w->classes) {
        int k = w->order[0];
        fprintf(f, ",\"class\":%d,\"name\":", k);
        dl_json_string(f, class_name(w, k, buf, sizeof buf));
        fprintf(f, ",\"probability\":%.9g,\"top\":[", w->prob[k]);
        for (int j = 0; j < w->o->top_k && j < w->classes; j++) {
            k = w->order[j];
            fprintf(f, "%s{\"class\":%d,\"name\":", j ? "," : "", k);
            dl_json_string(f, class_name(w, k, buf, sizeof buf));
            fprintf(f, ",\"probability\":%.9g}", w->prob[k]);
        }
        fputc(']', f);
    }
    if (w->o->logits || !w->classes) {
        fprintf(f, ",\"%s\":[", w->classes ? "logits" : "outputs");
        for (int k = 0; k < w->outs; k++)
            fprintf(f, "%s%.9g", k ? "," : "", (double)z[k]);
        fputc(']', f);
    }
    fputs("}\n", f);
}

static int write_batch(void *user, int n, const float *out, const void *y)
{
    writer *w = user;
    for (int i = 0; i < n; i++, w->index++) {
        const float *z = out + (size_t)i * (size_t)w->outs;
        if (w->classes)
            rank(w, z);
        if (w->o->jsonl)
            row_json(w, z);
        else
            row_csv(w, z);
    }
    return ferror(w->o->out) ? dl_error(DL_EIO, "predict: writing the predictions failed") : DL_OK;
}

/* d (CSV features or decoded images) as a memory source with the run's
 * normalisation and sample shape (when the feature count fits it: the
 * trainer checks), so the trainer treats it as the run's own data. */
static int run_source(dl_dataset *d, const dl_run_model *run, dl_source **src)
{
    const dl_data_info *ri = &run->train->info;
    d->info.scale = ri->scale;
    d->info.channels = ri->channels;
    memcpy(d->info.mean, ri->mean, sizeof d->info.mean);
    memcpy(d->info.std, ri->std, sizeof d->info.std);
    if (dl_shape_numel(&d->info.sample) == dl_shape_numel(&ri->sample))
        d->info.sample = ri->sample;
    dl_experiment *e = dl_run_model_experiment(run);
    return dl_source_memory_own(src, d, e->cfg.batch, 0, 0, 0);
}

static int csv_source(const dl_predict_options *o, const dl_run_model *run, dl_source **src)
{
    dl_dataset d;
    DL_TRY(dl_import_csv_features(o->input, o->label, &d));
    return run_source(&d, run, src);
}

/* The image files of o->input decoded to the run's [C, H, W] as a memory
 * source; their names into *files. */
static int image_source(const dl_predict_options *o, const dl_run_model *run, dl_image_files *files,
                        dl_source **src)
{
    const dl_data_info *ri = &run->train->info;
    char a[64];
    if (ri->sample.ndim != 3 || (ri->sample.dim[0] != 1 && ri->sample.dim[0] != 3) ||
        ri->x_dtype != DL_U8)
        return dl_error(DL_EINVAL,
                        "predict %s: image input needs a run trained on images, [C, H, W] u8 "
                        "pixels with C 1 or 3; run %s reads %s%s",
                        o->input, run->dir, dl_shape_format(&ri->sample, a, sizeof a),
                        ri->x_dtype != DL_U8 ? " (not u8)" : "");
    DL_TRY(dl_image_files_list(files, o->input));
    dl_dataset d;
    DL_TRY(dl_image_files_load(files, (int)ri->sample.dim[0], (int)ri->sample.dim[1],
                               (int)ri->sample.dim[2], &d));
    return run_source(&d, run, src);
}

static void free_names(char **names, int n)
{
    for (int k = 0; names && k < n; k++)
        free(names[k]);
    free(names);
}

/* The run's class names (its data file's validation group), when it has them. */
static char **read_names(const dl_run_model *run, int classes)
{
    char *buf = NULL;
    size_t len = 0;
    int n = run->data_path[0] && run->data_group[0]
                ? dl_data_class_names(run->data_path, run->data_group, &buf, &len)
                : 0;
    char **names = n == classes ? calloc((size_t)classes, sizeof *names) : NULL;
    for (int k = 0; names && k < classes; k++)
        if (!(names[k] = strndup(buf + (size_t)k * len, len))) {
            free_names(names, k);
            names = NULL;
        }
    free(buf);
    return names;
}

static int predict_with(const dl_predict_options *o, dl_run_model *run, dl_source *src,
                        char **names, char **files)
{
    dl_experiment *e = dl_run_model_experiment(run);
    dl_trainer_config cfg = e->cfg;
    dl_trainer *t;
    DL_TRY(dl_trainer_create(&t, run->model, &e->loss, &e->optim, &e->schedule, run->train, src,
                             &cfg, dl_model_backend(run->model)));
    writer w = {
        o, (int)dl_shape_numel(dl_model_output_shape(run->model)), 0, names, files, 0, NULL, NULL};
    if (e->loss.kind == DL_LOSS_XENT && !dl_trainer_tokens(t))
        w.classes = w.outs;
    w.prob = malloc((size_t)w.outs * sizeof *w.prob);
    w.order = malloc((size_t)w.outs * sizeof *w.order);
    int rc = w.prob && w.order ? DL_OK : dl_error(DL_ENOMEM, "out of memory");
    if (rc == DL_OK) {
        header(&w);
        rc = dl_trainer_outputs(t, src, write_batch, &w);
    }
    free(w.prob);
    free(w.order);
    dl_trainer_destroy(t);
    return rc;
}

static void emit_file(void *user, const char *text, size_t len) { fwrite(text, 1, len, user); }

/* A language model: the prompt continued, as dlbench sample does. */
static int predict_lm(const dl_predict_options *o)
{
    dl_sample_options so = {0};
    so.run = o->run;
    so.out_dir = o->out_dir;
    so.checkpoint = o->checkpoint;
    so.prompt = o->input;
    so.tokens = o->tokens;
    so.temperature = 1.0;
    so.top_k = o->top_k > 1 ? o->top_k : 0;
    so.emit = emit_file;
    so.user = o->out;
    fputs(o->input, o->out);
    DL_TRY(dl_session_sample(&so));
    fputc('\n', o->out);
    return DL_OK;
}

int dl_session_predict(const dl_predict_options *o)
{
    if (o->top_k < 1)
        return dl_error(DL_EINVAL, "predict: --top-k must be >= 1, got %d", o->top_k);
    dl_run_model run;
    dl_run_model_options ro = {o->run, o->out_dir, o->checkpoint, "predict", -1, NULL};
    DL_TRY(dl_run_model_open(&run, &ro));
    if (!strcmp(run.data_kind, "text")) {
        dl_run_model_close(&run);
        return predict_lm(o);
    }
    int classes = (int)dl_shape_numel(dl_model_output_shape(run.model));
    char **names = read_names(&run, classes);
    dl_source *src = NULL;
    int rc = DL_OK;
    if (dl_image_files_is_input(o->input)) {
        dl_image_files files = {0};
        rc = image_source(o, &run, &files, &src);
        if (rc == DL_OK)
            rc = predict_with(o, &run, src, names, files.paths);
        dl_source_destroy(src);
        dl_image_files_done(&files);
    } else if (ends_with(o->input, ".csv")) {
        rc = csv_source(o, &run, &src);
        if (rc == DL_OK)
            rc = predict_with(o, &run, src, names, NULL);
        dl_source_destroy(src);
    } else if (!input_exists(o->input)) {
        rc = dl_error(DL_EINVAL, "predict: %s: no such file (INPUT is FILE.h5[:GROUP] or FILE.csv)",
                      o->input);
    } else {
        /* an HDF5 file's group read as the run reads its data */
        dl_run_model_close(&run);
        ro.data = o->input;
        rc = dl_run_model_open(&run, &ro);
        if (rc == DL_OK)
            rc = predict_with(o, &run, run.val, names, NULL);
    }
    free_names(names, classes);
    dl_run_model_close(&run);
    return rc;
}
