/* tune_history.c - the judgements on a history that samplers, pruners and studies share */
#include "engine/tune/tune_history.h"

#include <math.h>
#include <string.h>

double dl_tune_history_loss(int direction, double value)
{
    if (isnan(value))
        return INFINITY;
    return direction == DL_STUDY_MAXIMIZE ? -value : value;
}

int dl_tune_history_same_dist(const dl_tune_param *a, const dl_tune_param *b)
{
    if (a->kind != b->kind)
        return 0;
    if (a->kind == DL_PARAM_CHOICE) {
        if (a->n_choices != b->n_choices)
            return 0;
        for (int i = 0; i < a->n_choices; i++)
            if (strcmp(a->choices[i], b->choices[i]) != 0)
                return 0;
        return 1;
    }
    return a->lo == b->lo && a->hi == b->hi && !a->log == !b->log;
}

const dl_tune_param *dl_tune_history_find(const dl_tune_param *params, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(params[i].name, name) == 0)
            return &params[i];
    return NULL;
}

int dl_tune_history_finished(const dl_tune_entry *e)
{
    return e->state == DL_TRIAL_COMPLETE || e->state == DL_TRIAL_PRUNED;
}
