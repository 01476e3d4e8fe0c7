/* session_resume.c - continuing a run: its script and overrides, lock, checkpoint and callbacks' memory */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/rundir/records.h"
#include "engine/rundir/rundir.h"
#include "engine/base/error.h"
#include "engine/rundir/runlog.h"
#include "engine/train/checkpoint.h"
#include "scripting/session_internal.h"

/* The strings of config.json's array `name` (a copy each; *n of them). */
static char **string_list(const cJSON *c, const char *name, int *n)
{
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(c, name);
    char **list = calloc((size_t)cJSON_GetArraySize(ov) + 1, sizeof *list);
    int k = 0;
    for (const cJSON *o = ov ? ov->child : NULL; list && o; o = o->next)
        if (cJSON_IsString(o))
            list[k++] = strdup(o->valuestring);
    *n = k;
    return list;
}

static int load_resume_options(dl_session *s, char ***ovs, int *nov)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_CONFIG, s->run_dir);
    cJSON *c = dl_runlog_read_json(path);
    if (!c)
        return dl_error(DL_EINVAL, "--resume %s: %s", s->opt.resume, dl_error_message());
    snprintf(s->script_path, sizeof s->script_path, "%s/" DL_RUN_FILE_SCRIPT, s->run_dir);
    int k = 0;
    char **list = string_list(c, "overrides", &k);
    s->resume_sets = string_list(c, "sets", &s->resume_nsets);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(c, "seed");
    if (s->opt.seed < 0 && cJSON_IsNumber(seed) && seed->valuedouble >= 0 &&
        seed->valuedouble < 0x1p63)
        s->opt.seed = (long long)seed->valuedouble;
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(c, "device");
    if (!s->opt.device && cJSON_IsString(dev))
        snprintf(s->device, sizeof s->device, "%s", dev->valuestring);
    cJSON_Delete(c);
    *ovs = list;
    *nov = k;
    return list ? DL_OK : dl_error(DL_ENOMEM, "out of memory");
}

/* After a resume: early stopping and best-checkpoint state continue from
 * the epochs already logged (as if the run had not been interrupted). */
/* One epoch record of the run being resumed, replayed into the callbacks'
 * state (best value, epochs without improvement). */
static void replay_epoch(void *user, const dl_run_metrics *m)
{
    dl_session *s = user;
    if (strcmp(m->kind, "epoch"))
        return;
    for (int k = 0; k < s->exp->ncb; k++) {
        const dl_cb_spec *c = &s->exp->cb[k];
        cb_state *st = &s->cbs[k];
        const char *name = !strcmp(c->monitor, "loss")  ? "train_loss"
                           : !strcmp(c->monitor, "acc") ? "train_acc"
                                                        : c->monitor;
        double x = dl_records_value(m->v, m->n, name);
        if (c->kind == DL_CB_LUA || !c->monitor[0] || isnan(x))
            continue;
        if (!st->seen ||
            (c->mode_max ? x > st->best + c->min_delta : x < st->best - c->min_delta)) {
            st->best = x;
            st->bad_epochs = 0;
        } else {
            st->bad_epochs++;
        }
        st->seen = 1;
    }
}

/* The callbacks' state as it was when the run stopped, from its metrics. */
static void replay_callbacks(dl_session *s)
{
    dl_records_metrics_each(s->run_dir, replay_epoch, s);
}

int session_resume_begin(dl_session *s)
{
    DL_TRY(dl_runlog_resolve(s->opt.out_dir, s->opt.resume, s->run_dir, sizeof s->run_dir));
    if (s->opt.rank == 0) /* fail early; reopen takes the run's lock */
        DL_TRY(dl_runlog_check_free(s->run_dir));
    DL_TRY(load_resume_options(s, &s->resume_ovs, &s->resume_nov));
    s->opt.overrides = s->resume_ovs;
    s->opt.noverrides = s->resume_nov;
    s->opt.sets = s->resume_sets;
    s->opt.nsets = s->resume_nsets;
    s->opt.script = NULL;
    s->resumed = 1;
    return DL_OK;
}

/* The checkpoint's model and optimizer state, and the trainer's cursor. */
static int load_checkpoint(dl_session *s, const char *path, dl_checkpoint_info *info)
{
    DL_TRY(dl_checkpoint_load(path, s->model, info));
    return dl_trainer_set_cursor(s->trainer, &info->cursor);
}

/* The events a resume leaves, and the callbacks' state from the log. */
static void report_resume(dl_session *s, const dl_checkpoint_info *info, int fresh,
                          const char *path)
{
    if (fresh)
        session_emit(s, "warning",
                     "%s does not exist (the run ended before its first "
                     "checkpoint): training starts again from step 0",
                     path);
    replay_callbacks(s);
    s->steps_at_start = info->cursor.step;
    if (strcmp(info->config_hash, s->hash))
        session_emit(s, "warning",
                     "the configuration differs from the checkpoint's (hash %.8s, now %.8s): "
                     "the result may differ from an uninterrupted run",
                     info->config_hash, s->hash);
    session_emit(s, "resumed", "from step %ld (epoch %d) on %s", info->cursor.step,
                 info->cursor.epoch + 1, s->device);
}

int session_resume_finish(dl_session *s)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_CHECKPOINT, s->run_dir);
    dl_checkpoint_info info;
    memset(&info, 0, sizeof info);
    /* the run's lock before its checkpoint is read: another resume that
     * held it may have moved the run on meanwhile */
    int lock_fd = -1;
    int rc = DL_OK;
    if (s->opt.rank == 0) /* other ranks of a job write nothing */
        rc = dl_runlog_lock(s->run_dir, &lock_fd);
    /* killed before its first checkpoint: the run starts again from step 0 */
    int fresh = rc == DL_OK && access(path, F_OK) < 0 && errno == ENOENT;
    if (fresh)
        snprintf(info.config_hash, sizeof info.config_hash, "%s", s->hash);
    else if (rc == DL_OK)
        rc = load_checkpoint(s, path, &info);
    if (rc == DL_OK && s->opt.rank == 0) /* the log keeps the lock, also on failure */
        rc = dl_runlog_reopen_locked(&s->log, s->run_dir, info.cursor.step, lock_fd);
    else if (lock_fd >= 0)
        close(lock_fd);
    DL_TRY(rc);
    report_resume(s, &info, fresh, path);
    return DL_OK;
}
