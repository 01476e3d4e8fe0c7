/* tune_trial.c - trials in memory: parameters, reports, attributes, their history entry, readers */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/tune/tune_study.h"

const char *dl_trial_state_name(dl_trial_state state)
{
    switch (state) {
    case DL_TRIAL_RUNNING: return "running";
    case DL_TRIAL_COMPLETE: return "complete";
    case DL_TRIAL_PRUNED: return "pruned";
    case DL_TRIAL_FAILED: return "failed";
    }
    return "?";
}

/* Frees a parameter's own copies of its name and choices. */
static void param_free(dl_tune_param *p)
{
    free((char *)p->name);
    for (int j = 0; p->choices && j < p->n_choices; j++)
        free((char *)p->choices[j]);
    free((char **)p->choices);
}

void dl_tune_trial_free(dl_trial *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nparams; i++)
        param_free(&t->params[i]);
    free(t->params);
    dl_tune_sampler_joint_done(&t->joint);
    free(t->steps);
    free(t->ivals);
    cJSON_Delete(t->attrs);
    cJSON_Delete(t->fixed);
    free(t);
}

dl_trial *dl_tune_trial_get(dl_study *s, int number)
{
    return number >= 0 && number < s->ntrials ? s->trials[number] : NULL;
}

/* A copy of dist with value in *q, name and choices its own (param_free). */
static int param_copy(dl_tune_param *q, const dl_tune_param *dist, double value)
{
    *q = *dist;
    q->choices = NULL;
    q->value = value;
    char *name = strdup(dist->name);
    if (!name)
        return dl_error(DL_ENOMEM, "study: out of memory");
    q->name = name;
    if (dist->kind != DL_PARAM_CHOICE)
        return DL_OK;
    char **c = calloc((size_t)dist->n_choices, sizeof *c);
    q->choices = (const char *const *)c;
    for (int i = 0; c && i < dist->n_choices; i++)
        if (!(c[i] = strdup(dist->choices[i]))) {
            param_free(q);
            return dl_error(DL_ENOMEM, "study: out of memory");
        }
    if (!c) {
        param_free(q);
        return dl_error(DL_ENOMEM, "study: out of memory");
    }
    return DL_OK;
}

int dl_tune_trial_add_param(dl_trial *t, const dl_tune_param *dist, double value)
{
    if (t->nparams == t->cap_params) {
        int cap = t->cap_params ? 2 * t->cap_params : 8;
        dl_tune_param *p = realloc(t->params, (size_t)cap * sizeof *p);
        if (!p)
            return dl_error(DL_ENOMEM, "study: out of memory");
        t->params = p;
        t->cap_params = cap;
    }
    DL_TRY(param_copy(&t->params[t->nparams], dist, value));
    t->nparams++;
    return DL_OK;
}

int dl_tune_trial_set_intermediate(dl_trial *t, long step, double value)
{
    int i = t->nint;
    while (i > 0 && t->steps[i - 1] > step)
        i--;
    if (i > 0 && t->steps[i - 1] == step) {
        t->ivals[i - 1] = value;
        return DL_OK;
    }
    if (t->nint == t->cap_int) {
        int cap = t->cap_int ? 2 * t->cap_int : 16;
        long *st = realloc(t->steps, (size_t)cap * sizeof *st);
        if (!st)
            return dl_error(DL_ENOMEM, "study: out of memory");
        t->steps = st;
        double *v = realloc(t->ivals, (size_t)cap * sizeof *v);
        if (!v)
            return dl_error(DL_ENOMEM, "study: out of memory");
        t->ivals = v;
        t->cap_int = cap;
    }
    memmove(t->steps + i + 1, t->steps + i, (size_t)(t->nint - i) * sizeof *t->steps);
    memmove(t->ivals + i + 1, t->ivals + i, (size_t)(t->nint - i) * sizeof *t->ivals);
    t->steps[i] = step;
    t->ivals[i] = value;
    t->nint++;
    return DL_OK;
}

dl_trial *dl_tune_trial_add(dl_study *s, int number)
{
    if (s->ntrials == s->cap_trials) {
        int cap = s->cap_trials ? 2 * s->cap_trials : 64;
        dl_trial **tt = realloc(s->trials, (size_t)cap * sizeof *tt);
        if (!tt)
            return NULL;
        s->trials = tt;
        dl_tune_entry *h = realloc(s->hist, (size_t)cap * sizeof *h);
        if (!h)
            return NULL;
        s->hist = h;
        s->cap_trials = cap;
    }
    dl_trial *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->study = s;
    t->number = number;
    t->state = DL_TRIAL_RUNNING;
    t->value = NAN;
    t->grid_slot = -1;
    t->attrs = cJSON_CreateObject();
    s->trials[s->ntrials++] = t;
    dl_tune_trial_sync(s, t);
    return t;
}

int dl_tune_trial_set_attr(dl_trial *t, const char *key, const char *value)
{
    if (!t->attrs)
        return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(t->attrs, key);
    cJSON_AddStringToObject(t->attrs, key, value);
    return 0;
}

void dl_tune_trial_sync(dl_study *s, const dl_trial *t)
{
    s->hist[t->number] = (dl_tune_entry){t->number,  t->state, t->value, t->grid_slot, t->params,
                                         t->nparams, t->steps, t->ivals, t->nint};
}

void dl_tune_trial_history(const dl_study *s, dl_tune_history *h)
{
    h->direction = s->direction;
    h->trials = s->hist;
    h->ntrials = s->ntrials;
}

/* --- reading ------------------------------------------------------------------------ */

int dl_trial_number(const dl_trial *t) { return t->number; }
dl_trial_state dl_trial_state_of(const dl_trial *t) { return t->state; }
double dl_trial_value(const dl_trial *t) { return t->value; }
int dl_trial_param_count(const dl_trial *t) { return t->nparams; }
double dl_trial_start_time(const dl_trial *t) { return t->t_start; }
double dl_trial_end_time(const dl_trial *t) { return t->t_end; }

const dl_tune_param *dl_trial_param(const dl_trial *t, int i)
{
    return i >= 0 && i < t->nparams ? &t->params[i] : NULL;
}

const dl_tune_param *dl_trial_param_find(const dl_trial *t, const char *name)
{
    return dl_tune_history_find(t->params, t->nparams, name);
}

int dl_trial_intermediate(const dl_trial *t, long *steps, double *values, int cap)
{
    for (int i = 0; i < t->nint && i < cap; i++) {
        if (steps)
            steps[i] = t->steps[i];
        if (values)
            values[i] = t->ivals[i];
    }
    return t->nint;
}

const char *dl_trial_attr(const dl_trial *t, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t->attrs, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
