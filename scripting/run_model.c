/* run_model.c - a finished run opened for use: config.json, the script copy with its overrides, the data, the model and its checkpoint */
#include "scripting/run_model.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/core/backend.h"
#include "engine/nn/optim.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog.h"
#include "scripting/script.h"

int dl_run_model_checkpoint_path(const char *dir, const char *name, char *path, size_t size)
{
    if (!name || !strcmp(name, "last"))
        snprintf(path, size, "%s/" DL_RUN_FILE_CHECKPOINT, dir);
    else if (!strcmp(name, "best"))
        snprintf(path, size, "%s/" DL_RUN_FILE_CHECKPOINT_BEST, dir);
    else if (!name[0] || strchr(name, '/') || name[0] == '.')
        return dl_error(DL_EINVAL, "--checkpoint %s: expected best, last or a checkpoint name",
                        name);
    else
        snprintf(path, size, "%s/" DL_RUN_FILE_CHECKPOINT_TAG, dir, name);
    return DL_OK;
}

static int read_overrides(dl_run_model *r, const cJSON *c)
{
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(c, "overrides");
    int n = cJSON_GetArraySize(ov);
    r->overrides = calloc((size_t)n + 1, sizeof *r->overrides);
    if (!r->overrides)
        return dl_error(DL_ENOMEM, "out of memory");
    for (const cJSON *x = ov ? ov->child : NULL; x; x = x->next)
        if (cJSON_IsString(x) && (r->overrides[r->noverrides] = strdup(x->valuestring)))
            r->noverrides++;
    return DL_OK;
}

/* config.json: the overrides, the seed, the data's kind and path. */
static int read_config(dl_run_model *r, const char *verb)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_CONFIG, r->dir);
    cJSON *c = dl_runlog_read_json(path);
    if (!c)
        return dl_error(DL_EINVAL, "%s %s: %s", verb, r->dir, dl_error_message());
    int rc = read_overrides(r, c);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(c, "seed");
    if (cJSON_IsNumber(seed) && seed->valuedouble >= 0 && seed->valuedouble < 0x1p63)
        r->seed = (uint64_t)seed->valuedouble;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(c, "data");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(data, "kind");
    const cJSON *dpath = cJSON_GetObjectItemCaseSensitive(data, "path");
    if (cJSON_IsString(kind))
        snprintf(r->data_kind, sizeof r->data_kind, "%s", kind->valuestring);
    if (cJSON_IsString(dpath))
        snprintf(r->data_path, sizeof r->data_path, "%s", dpath->valuestring);
    cJSON_Delete(c);
    return rc;
}

/* o->data (FILE[:GROUP]) in place of the run's data: both splits read
 * GROUP, whole and in order, with the run's scale, mean and std. */
static int override_data(dl_run_model *r, dl_data_desc *d, const char *spec)
{
    const char *colon = strrchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (!len || len >= sizeof d->path || (colon && !colon[1]))
        return dl_error(DL_EINVAL, "--data %s: expected FILE or FILE:GROUP", spec);
    char group[128];
    if (colon)
        snprintf(group, sizeof group, "%s%s", colon[1] == '/' ? "" : "/", colon + 1);
    else
        snprintf(group, sizeof group, "%s", d->val[0] ? d->val : "/test");
    memcpy(d->path, spec, len);
    d->path[len] = 0;
    if (d->kind != DL_DATA_TEXT)
        d->kind = DL_DATA_HDF5;
    snprintf(d->train, sizeof d->train, "%s", group);
    snprintf(d->val, sizeof d->val, "%s", group);
    d->limit = d->val_limit = 0;
    d->shuffle = d->drop_last = d->crop_pad = d->hflip = 0;
    snprintf(r->data_path, sizeof r->data_path, "%s", d->path);
    return DL_OK;
}

/* The checkpoints dir holds, as --checkpoint names them ("last, best, x"). */
static void list_checkpoints(const char *dir, char *out, size_t size)
{
    out[0] = 0;
    size_t len = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        size_t k = strlen(n);
        char name[256];
        if (!strcmp(n, DL_RUN_FILE_CHECKPOINT))
            snprintf(name, sizeof name, "last");
        else if (!strncmp(n, "checkpoint-", 11) && k > 14 && k < 200 && !strcmp(n + k - 3, ".h5"))
            snprintf(name, sizeof name, "%.*s", (int)(k - 14), n + 11);
        else
            continue;
        len +=
            (size_t)snprintf(out + len, len < size ? size - len : 0, "%s%s", len ? ", " : "", name);
    }
    if (d)
        closedir(d);
}

/* The checkpoint file chosen exists, or an error says which ones do. */
static int check_checkpoint(const dl_run_model *r, const char *name)
{
    if (access(r->checkpoint, F_OK) == 0)
        return DL_OK;
    char have[512];
    list_checkpoints(r->dir, have, sizeof have);
    if (!have[0])
        return dl_error(DL_EINVAL,
                        "%s: the run has no checkpoint (no %s): it stopped or failed before its "
                        "first one",
                        r->dir, DL_RUN_FILE_CHECKPOINT);
    return dl_error(DL_EINVAL, "%s: no checkpoint \"%s\" (%s); the run has: %s", r->dir,
                    name ? name : "last", r->checkpoint, have);
}

/* The script copy with the run's overrides, the model on the data's
 * sample shape, the checkpoint on the CPU backend. */
static int load_model(dl_run_model *r, const dl_run_model_options *o)
{
    char script[1200], fp[512];
    snprintf(script, sizeof script, "%s/" DL_RUN_FILE_SCRIPT, r->dir);
    dl_script_options so = {script, r->overrides, r->noverrides, 0};
    DL_TRY(dl_script_load_study(&r->script, &so, NULL, 0));
    dl_experiment *e = dl_script_experiment(r->script);
    dl_backend *cpu = dl_backend_cpu(0);
    if (o->data)
        DL_TRY(override_data(r, &e->data, o->data));
    snprintf(r->data_group, sizeof r->data_group, "%s", e->data.val);
    int batch = o->batch > 0 ? o->batch : o->batch < 0 ? e->cfg.batch : 1;
    DL_TRY(dl_script_open_data(r->script, batch, r->seed, cpu, &r->train, &r->val, fp, sizeof fp));
    DL_TRY(dl_model_create(&r->model, dl_script_take_model(r->script), &r->train->info.sample));
    DL_TRY(
        dl_run_model_checkpoint_path(r->dir, o->checkpoint, r->checkpoint, sizeof r->checkpoint));
    DL_TRY(check_checkpoint(r, o->checkpoint));
    DL_TRY(dl_model_init_state(r->model, cpu, dl_optim_moments(&e->optim), r->seed));
    DL_TRY(dl_checkpoint_load(r->checkpoint, r->model, &r->info));
    return dl_model_plan(r->model, batch);
}

struct dl_experiment *dl_run_model_experiment(const dl_run_model *r)
{
    return r->script ? dl_script_experiment(r->script) : NULL;
}

int dl_run_model_open(dl_run_model *r, const dl_run_model_options *o)
{
    memset(r, 0, sizeof *r);
    const char *verb = o->verb ? o->verb : "run";
    int rc = dl_runlog_resolve(o->out_dir ? o->out_dir : "runs", o->run, r->dir, sizeof r->dir);
    if (rc == DL_OK)
        rc = read_config(r, verb);
    if (rc == DL_OK)
        rc = load_model(r, o);
    if (rc < 0)
        dl_run_model_close(r);
    return rc;
}

void dl_run_model_close(dl_run_model *r)
{
    for (int i = 0; i < r->noverrides; i++)
        free(r->overrides[i]);
    free(r->overrides);
    dl_model_destroy(r->model);
    dl_source_destroy(r->train);
    dl_source_destroy(r->val);
    dl_script_destroy(r->script);
    memset(r, 0, sizeof *r);
}
