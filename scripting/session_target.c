/* session_target.c - --target METRIC=VALUE: after each epoch, the time and cost to reach it, projected */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/observe/target.h"
#include "scripting/session_internal.h"

/* "12.3 s" or "never" */
static void fmt_s(double s, char *buf, size_t n)
{
    if (!isfinite(s))
        snprintf(buf, n, "never");
    else if (s >= 3600)
        snprintf(buf, n, "%.1f h", s / 3600);
    else if (s >= 120)
        snprintf(buf, n, "%.1f min", s / 60);
    else
        snprintf(buf, n, "%.1f s", s);
}

static void keep_json(dl_session *s, const dl_target_projection *p, int epoch)
{
    cJSON_Delete(s->tgt_json);
    cJSON *j = s->tgt_json = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "metric", s->opt.target_metric);
    cJSON_AddNumberToObject(j, "value", s->opt.target_value);
    cJSON_AddNumberToObject(j, "as_of_epoch", epoch);
    cJSON_AddBoolToObject(j, "reached", p->reached);
    cJSON_AddBoolToObject(j, "reachable", p->reachable);
    /* JSON has no infinity: null where the trend never gets there */
    const double v[] = {p->epoch,      p->epoch_lo, p->epoch_hi, p->seconds, p->seconds_lo,
                        p->seconds_hi, p->cost,     p->cost_lo,  p->cost_hi};
    const char *k[] = {"epoch",      "epoch_lo", "epoch_hi", "seconds", "seconds_lo",
                       "seconds_hi", "cost",     "cost_lo",  "cost_hi"};
    for (int i = 0; i < 9; i++) {
        if (i >= 6 && s->opt.price_per_hour <= 0)
            break;
        if (isfinite(v[i]))
            cJSON_AddNumberToObject(j, k[i], v[i]);
        else
            cJSON_AddNullToObject(j, k[i]);
    }
    cJSON_AddBoolToObject(j, "beyond_plan", p->beyond_plan);
}

void session_target_epoch(dl_session *s, const dl_epoch_info *i, const char *const *names,
                          const double *values, int n)
{
    const char *m = s->opt.target_metric;
    s->tgt_secs += i->seconds;
    double v = NAN;
    for (int k = 0; k < n; k++)
        if (!strcmp(names[k], m))
            v = values[k];
    if (!isfinite(v) || s->tgt_n >= 1024)
        return;
    s->tgt_x[s->tgt_n] = i->epoch + 1;
    s->tgt_y[s->tgt_n++] = v;
    int maximize = strstr(m, "acc") != NULL;
    int planned = dl_trainer_config_of(s->trainer)->epochs;
    dl_target_projection p;
    dl_target_project(s->tgt_x, s->tgt_y, s->tgt_n, s->opt.target_value, maximize,
                      s->tgt_secs / (i->epoch + 1), s->opt.price_per_hour, planned, &p);
    if (!p.ok)
        return;
    keep_json(s, &p, i->epoch + 1);
    if (p.reached) {
        session_emit(s, "target", "%s %g reached at epoch %.0f", m, s->opt.target_value, p.epoch);
        s->opt.target_metric[0] = 0; /* said once */
        return;
    }
    char t[24], lo[24], hi[24], cost[96] = "";
    fmt_s(p.seconds, t, sizeof t);
    fmt_s(p.seconds_lo, lo, sizeof lo);
    fmt_s(p.seconds_hi, hi, sizeof hi);
    if (s->opt.price_per_hour > 0 && isfinite(p.cost) && isfinite(p.cost_hi))
        snprintf(cost, sizeof cost, ", $%.4f ($%.4f to $%.4f)", p.cost, p.cost_lo, p.cost_hi);
    else if (s->opt.price_per_hour > 0 && isfinite(p.cost))
        snprintf(cost, sizeof cost, ", $%.4f ($%.4f to never)", p.cost, p.cost_lo);
    if (p.reachable)
        session_emit(s, "target",
                     "%s %g: projected at epoch %.1f (%.1f to %.1f), %s more (%s to %s)%s", m,
                     s->opt.target_value, p.epoch, p.epoch_lo, p.epoch_hi, t, lo, hi, cost);
    else
        session_emit(s, "target", "%s %g: the trend so far does not reach it", m,
                     s->opt.target_value);
    if ((p.beyond_plan || !p.reachable) && !s->tgt_warned) {
        s->tgt_warned = 1;
        session_emit(s, "warning",
                     "the planned %d epochs will not reach %s %g: the curve so far projects it at "
                     "epoch %.1f at the earliest; more epochs (--set epochs=N), a higher learning "
                     "rate or a larger model",
                     planned, m, s->opt.target_value, p.epoch_lo);
    }
}

void session_target_json(dl_session *s, cJSON *extra)
{
    if (s->tgt_json)
        cJSON_AddItemToObject(extra, "target", cJSON_Duplicate(s->tgt_json, 1));
}
