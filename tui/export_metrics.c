/* export_metrics.c - every metric of some runs in one CSV or JSON-lines file: columns, header, a row per record */
#include "tui/export_metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/rundir/records.h"
#include "engine/rundir/rundir.h"
#include "engine/base/textout.h"

#define MAX_COLS 256

typedef dl_export_run xrun;

/* The columns: hyperparameters (a trial's, the script's, the seed) and
 * metrics, each once, in the order first seen. */
typedef struct cols {
    int nh, nm;
    char hp[MAX_COLS][48];  /* the key in config */
    char hpc[MAX_COLS][52]; /* the column: the key, "hp_KEY" when it clashes */
    char m[MAX_COLS][48];
} cols;

typedef struct writer {
    FILE *f;
    const xrun *run;
    cols *c;
    int jsonl;
    long rows;
} writer;

static void add_name(char (*list)[48], int *n, const char *name)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp(list[i], name))
            return;
    if (*n < MAX_COLS)
        snprintf(list[(*n)++], sizeof list[0], "%s", name);
}

static void collect_metrics(void *user, const dl_run_metrics *m)
{
    cols *c = user;
    for (int i = 0; i < m->n; i++)
        add_name(c->m, &c->nm, m->v[i].name);
}

/* A run's hyperparameter (or the seed) by key; NULL when it has none. */
static const cJSON *hp_of(const xrun *r, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(r->config, "trial_params"), key);
    if (!v)
        v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r->config, "hparams"),
                                             key);
    if (!v && !strcmp(key, "seed"))
        v = cJSON_GetObjectItemCaseSensitive(r->config, "seed");
    return v;
}

static void collect_hparams(cols *c, const xrun *r)
{
    static const char *groups[] = {"trial_params", "hparams"};
    for (int g = 0; g < 2; g++) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(r->config, groups[g]);
        for (h = h ? h->child : NULL; h; h = h->next)
            if (h->string)
                add_name((char(*)[48])c->hp, &c->nh, h->string);
    }
    if (cJSON_GetObjectItemCaseSensitive(r->config, "seed"))
        add_name((char(*)[48])c->hp, &c->nh, "seed");
}

/* Column names: a hyperparameter named like a fixed column or a metric
 * gets "hp_" before it. */
static void name_columns(cols *c)
{
    static const char *fixed[] = {"run", "name", "tags", "kind", "step", "epoch", "time"};
    for (int i = 0; i < c->nh; i++) {
        int clash = 0;
        for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++)
            clash |= !strcmp(c->hp[i], fixed[k]);
        for (int k = 0; k < c->nm; k++)
            clash |= !strcmp(c->hp[i], c->m[k]);
        /* hpc [52] holds "hp_" and the whole key (hp [48]) */
        size_t pre = clash ? 3 : 0, len = strnlen(c->hp[i], sizeof c->hp[i] - 1);
        memcpy(c->hpc[i], "hp_", pre);
        memcpy(c->hpc[i] + pre, c->hp[i], len);
        c->hpc[i][pre + len] = 0;
    }
}

static void csv_header(FILE *f, const cols *c)
{
    fputs("run,name,tags", f);
    for (int i = 0; i < c->nh; i++)
        fputc(',', f), dl_csv_field(f, c->hpc[i]);
    fputs(",kind,step,epoch,time", f);
    for (int i = 0; i < c->nm; i++)
        fputc(',', f), dl_csv_field(f, c->m[i]);
    fputc('\n', f);
}

static void csv_row(const writer *w, const dl_run_metrics *m)
{
    FILE *f = w->f;
    dl_csv_field(f, w->run->id);
    fputc(',', f), dl_csv_field(f, w->run->name);
    fputc(',', f), dl_csv_field(f, w->run->tags);
    for (int i = 0; i < w->c->nh; i++)
        fputc(',', f), dl_csv_json(f, hp_of(w->run, w->c->hp[i]));
    fputc(',', f), dl_csv_field(f, m->kind);
    fputc(',', f), dl_csv_number(f, m->step);
    fputc(',', f), dl_csv_number(f, m->epoch);
    fputc(',', f), dl_csv_number(f, m->time);
    for (int i = 0; i < w->c->nm; i++) {
        fputc(',', f);
        dl_csv_number(f, dl_records_value(m->v, m->n, w->c->m[i]));
    }
    fputc('\n', f);
}

static void json_row(const writer *w, const dl_run_metrics *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "run", w->run->id);
    cJSON_AddStringToObject(o, "name", w->run->name);
    cJSON_AddStringToObject(o, "tags", w->run->tags);
    for (int i = 0; i < w->c->nh; i++) {
        const cJSON *v = hp_of(w->run, w->c->hp[i]);
        if (v)
            cJSON_AddItemToObject(o, w->c->hpc[i], cJSON_Duplicate(v, 1));
    }
    cJSON_AddStringToObject(o, "kind", m->kind);
    static const char *const xs[] = {"step", "epoch", "time"};
    const double xv[] = {m->step, m->epoch, m->time};
    for (int k = 0; k < 3; k++)
        if (isfinite(xv[k]))
            cJSON_AddNumberToObject(o, xs[k], xv[k]);
    for (int i = 0; i < m->n; i++) {
        if (isfinite(m->v[i].v))
            cJSON_AddNumberToObject(o, m->v[i].name, m->v[i].v);
        else
            cJSON_AddNullToObject(o, m->v[i].name);
    }
    char *t = cJSON_PrintUnformatted(o);
    if (t)
        fprintf(w->f, "%s\n", t);
    free(t);
    cJSON_Delete(o);
}

static void write_record(void *user, const dl_run_metrics *m)
{
    writer *w = user;
    w->rows++;
    if (w->jsonl)
        json_row(w, m);
    else
        csv_row(w, m);
}

long dl_export_metrics(FILE *f, const dl_export_run *runs, int n, int jsonl)
{
    cols *c = calloc(1, sizeof *c);
    if (!c)
        return 0;
    for (int i = 0; i < n; i++) {
        collect_hparams(c, &runs[i]);
        dl_records_metrics_each(runs[i].path, collect_metrics, c);
    }
    name_columns(c);
    if (!jsonl)
        csv_header(f, c);
    long rows = 0;
    for (int i = 0; i < n; i++) {
        writer w = {f, &runs[i], c, jsonl, 0};
        dl_records_metrics_each(runs[i].path, write_record, &w);
        rows += w.rows;
    }
    free(c);
    return rows;
}

int dl_export_metrics_file(const char *path, const dl_export_run *runs, int n, int jsonl,
                           long *rows)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        return dl_error(DL_ENOMEM, "%s: no memory for the export", path);
    *rows = dl_export_metrics(m, runs, n, jsonl);
    fclose(m);
    int rc = dl_fs_write_atomic(path, buf, len);
    free(buf);
    return rc;
}

int dl_export_run_open(dl_export_run *r, const char *path)
{
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    if (!(r->config = dl_records_load(r->path, DL_RUN_FILE_CONFIG)))
        return DL_EIO; /* the message names the file */
    const char *slash = strrchr(r->path, '/');
    snprintf(r->id, sizeof r->id, "%.255s", slash ? slash + 1 : r->path);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(r->config, "name");
    snprintf(r->name, sizeof r->name, "%s", cJSON_IsString(name) ? name->valuestring : "");
    dl_records_tags(r->path, r->tags, sizeof r->tags);
    return DL_OK;
}

void dl_export_run_close(dl_export_run *r)
{
    cJSON_Delete(r->config);
    r->config = NULL;
}
