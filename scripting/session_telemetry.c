/* session_telemetry.c - what a session publishes: the run, the peak, the loader, the cost */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/core/backend.h"
#include "engine/observe/cost.h"
#include "engine/observe/telemetry.h"
#include "scripting/session_internal.h"

/* The run's description for opt.telemetry, in state st. */
void session_publish_run(dl_session *s, dl_tele_state st)
{
    dl_telemetry *tele = s->opt.telemetry;
    if (!tele || !s->trainer)
        return;
    const dl_trainer_config *cfg = dl_trainer_config_of(s->trainer);
    dl_tele_run r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "%s", s->exp->name);
    snprintf(r.device, sizeof r.device, "%s", s->device);
    dl_backend *be = dl_trainer_backend(s->trainer);
    snprintf(r.device_desc, sizeof r.device_desc, "%s", be ? be->description : "");
    if (be && be->ops->device != DL_DEVICE_CPU)
        snprintf(r.gpu_name, sizeof r.gpu_name, "%.63s", be->description);
    snprintf(r.run_dir, sizeof r.run_dir, "%s", s->run_dir);
    r.precision = cfg->precision;
    r.batch = cfg->batch;
    r.accumulate = cfg->accumulate;
    r.epochs = cfg->epochs;
    r.workers = s->exp->data.workers;
    r.compute_threads = be && be->ops->device == DL_DEVICE_CPU ? be->threads : 0;
    r.steps_per_epoch = dl_session_steps_per_epoch(s);
    r.total_steps = r.steps_per_epoch * cfg->epochs;
    if (cfg->max_steps > 0 && (r.total_steps <= 0 || cfg->max_steps < r.total_steps))
        r.total_steps = cfg->max_steps;
    r.step = dl_trainer_step_count(s->trainer);
    r.epoch = dl_trainer_epoch(s->trainer);
    r.state = st;
    r.loss_scale = 1;
    if (be && (be->lowp & DL_LOWP_KNOWN)) {
        r.bf16_native = be->lowp & DL_LOWP_BF16 ? 1 : -1;
        r.f16_native = be->lowp & DL_LOWP_F16 ? 1 : -1;
    }
    r.adaptive_optim = s->exp->optim.kind == DL_OPT_SGD ? -1 : 1;
    r.base_lr = dl_trainer_base_lr(s->trainer);
    r.val_every = cfg->val_every;
    for (int i = 0; i < s->exp->ncb; i++)
        r.early_stopping |= s->exp->cb[i].kind == DL_CB_EARLY_STOPPING;
    dl_telemetry_set_run(tele, &r);
}

/* The device's peak for the MFU: a GPU's from the table (by its
 * description), the CPU's from a short gemm calibration, measured once per
 * process and backend. */
void session_publish_peak(dl_session *s, dl_backend *be)
{
    static dl_backend *calibrated;
    static double cpu_peak;
    double peak = 0;
    char src[64] = "";
    dl_gpu_peak gp;
    dl_precision prec = dl_trainer_config_of(s->trainer)->precision;
    if (be->ops->device != DL_DEVICE_CPU && dl_cost_gpu_peak(be->description, &gp)) {
        peak = prec == DL_PREC_F32 ? (gp.tf32 > 0 ? gp.tf32 : gp.f32) : gp.bf16;
        snprintf(src, sizeof src, "table: %.40s", gp.name);
    } else if (be->ops->device == DL_DEVICE_CPU) {
        if (calibrated != be && dl_cost_calibrate(be, 512, 0.15, &cpu_peak) == DL_OK)
            calibrated = be;
        peak = calibrated == be ? cpu_peak : 0;
        snprintf(src, sizeof src, "sgemm calibration, %d threads", be->threads);
    }
    dl_telemetry_set_cost(s->opt.telemetry, s->opt.price_per_hour, peak, peak > 0 ? src : "");
}

/* summary.json's "cost": what the run cost, from the telemetry. */
void session_cost_json(dl_session *s, cJSON *extra)
{
    dl_telemetry_snapshot *snap = dl_telemetry_snapshot_create();
    if (!snap)
        return;
    dl_telemetry_read(s->opt.telemetry, snap);
    const dl_cost *c = &snap->cost;
    cJSON *j = cJSON_AddObjectToObject(extra, "cost");
    if (snap->price_per_hour > 0) {
        cJSON_AddNumberToObject(j, "price_per_hour", snap->price_per_hour);
        cJSON_AddNumberToObject(j, "cost", c->cost_so_far);
        if (c->cost_projected >= 0)
            cJSON_AddNumberToObject(j, "cost_projected", c->cost_projected);
    }
    if (c->achieved_flops > 0)
        cJSON_AddNumberToObject(j, "achieved_flops", c->achieved_flops);
    if (snap->peak_flops > 0) {
        cJSON_AddNumberToObject(j, "peak_flops", snap->peak_flops);
        cJSON_AddStringToObject(j, "peak_source", snap->peak_source);
    }
    if (c->mfu >= 0)
        cJSON_AddNumberToObject(j, "mfu", c->mfu);
    if (c->energy_j >= 0) {
        cJSON_AddNumberToObject(j, "energy_j", c->energy_j);
        cJSON_AddNumberToObject(j, "energy_kwh", c->energy_kwh);
    }
    dl_telemetry_snapshot_destroy(snap);
}

void session_publish_loader(dl_session *s)
{
    dl_loader_stats st;
    if (!dl_session_loader_stats(s, &st))
        return;
    dl_tele_loader l = {st.wait_s, st.batches, st.bytes_read, st.queue_fill, st.queue_size};
    dl_telemetry_loader(s->opt.telemetry, &l);
}

/* After prepare: the run (preparing), the model's FLOPs and the peak. */
void session_publish_prepared(dl_session *s)
{
    if (!s->opt.telemetry)
        return;
    session_publish_run(s, DL_TELE_PREPARING);
    dl_telemetry_set_model_flops(s->opt.telemetry, dl_model_train_flops(s->model));
    session_publish_peak(s, s->be);
}

void session_advice_json(dl_session *s, cJSON *extra)
{
    dl_telemetry_snapshot *snap = dl_telemetry_snapshot_create();
    if (!snap)
        return;
    dl_telemetry_read(s->opt.telemetry, snap);
    dl_advice adv[DL_ADV_NKINDS];
    int n = dl_telemetry_advise(snap, adv, DL_ADV_NKINDS);
    cJSON *arr = cJSON_AddArrayToObject(extra, "advice");
    for (int i = 0; i < n && arr; i++) {
        cJSON *j = dl_advice_json(&adv[i]);
        if (!j)
            break;
        char *text = cJSON_PrintUnformatted(j);
        if (text && s->log)
            dl_runlog_event(s->log, "advice", "%s", text);
        free(text);
        cJSON_AddItemToArray(arr, j);
    }
    dl_telemetry_snapshot_destroy(snap);
}
