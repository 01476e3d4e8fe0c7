/* session_set.c - --set FIELD=VALUE: the experiment's own fields changed after the script ran
 *
 * A k=v override reaches only what the script declares with dl.hparams;
 * --set reaches the experiment itself (batch, precision, epochs, the
 * loader, validation, early stopping, the learning rate), so every piece
 * of the advisor's advice comes with a command that applies it. The sets
 * are applied after the script ran and before the data is opened; the
 * values they give are hashed as part of the experiment (config.json's
 * batch, optimizer, callbacks...) and config.json lists them as "sets".
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "engine/base/error.h"
#include "scripting/session_internal.h"

/* The fields --set knows, with what each takes (for the error message). */
static const struct {
    const char *name, *takes;
} fields[] = {
    {"batch", "an integer >= 1"},
    {"accumulate", "an integer >= 1"},
    {"epochs", "an integer >= 1"},
    {"max_steps", "an integer >= 0 (0: no limit)"},
    {"precision", "fp32, bf16 or fp16"},
    {"lr", "a number > 0"},
    {"workers", "an integer >= 0"},
    {"prefetch", "an integer >= 1"},
    {"mode", "auto, memory or streaming"},
    {"val_every", "an integer >= 1 (epochs between validations)"},
    {"val_limit", "an integer >= 0 (validation samples; 0: all)"},
    {"early_stopping", "an integer >= 0 (patience on val_loss; 0: off)"},
    {"log_every", "an integer >= 1"},
};
#define NFIELDS (sizeof fields / sizeof *fields)

static int bad(const char *kv, int f)
{
    return dl_error(DL_EINVAL, "--set %s: %s takes %s", kv, fields[f].name, fields[f].takes);
}

static int parse_int(const char *v, long lo, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo)
        return 0;
    *out = x;
    return 1;
}

/* An early-stopping callback on val_loss with this patience (0: the
 * script's early-stopping callbacks removed). */
static int set_early_stopping(dl_experiment *e, long patience, const char *kv)
{
    int k = 0;
    for (int i = 0; i < e->ncb; i++)
        if (e->cb[i].kind != DL_CB_EARLY_STOPPING)
            e->cb[k++] = e->cb[i];
    e->ncb = k;
    if (patience == 0)
        return DL_OK;
    if (e->ncb >= DL_MAX_CALLBACKS)
        return dl_error(DL_EINVAL, "--set %s: the experiment has %d callbacks already", kv,
                        DL_MAX_CALLBACKS);
    dl_cb_spec *c = &e->cb[e->ncb++];
    memset(c, 0, sizeof *c);
    c->kind = DL_CB_EARLY_STOPPING;
    snprintf(c->monitor, sizeof c->monitor, "val_loss");
    c->patience = (int)patience;
    c->ref_step = c->ref_epoch = c->ref_validation = LUA_NOREF;
    snprintf(c->name, sizeof c->name, "early_stopping");
    return DL_OK;
}

/* The text values: precision and mode. */
static int set_text(dl_experiment *e, int f, const char *v, const char *kv)
{
    if (!strcmp(fields[f].name, "precision")) {
        int p = dl_precision_parse(v);
        if (p < 0)
            return bad(kv, f);
        e->cfg.precision = (dl_precision)p;
        return DL_OK;
    }
    int m = !strcmp(v, "auto") ? 0 : !strcmp(v, "memory") ? 1 : !strcmp(v, "streaming") ? 2 : -1;
    if (m < 0)
        return bad(kv, f);
    if (e->data.kind != DL_DATA_HDF5)
        return dl_error(DL_EINVAL, "--set %s: mode is for dl.data.hdf5 data", kv);
    e->data.mode = m;
    return DL_OK;
}

/* One FIELD=VALUE into e. */
static int apply_one(dl_experiment *e, const char *kv)
{
    const char *eq = strchr(kv, '=');
    size_t len = eq ? (size_t)(eq - kv) : 0;
    size_t f = 0;
    while (f < NFIELDS && !(strlen(fields[f].name) == len && !strncmp(fields[f].name, kv, len)))
        f++;
    if (!eq || f == NFIELDS) {
        char names[512] = "";
        size_t n = 0;
        for (size_t i = 0; i < NFIELDS && n < sizeof names; i++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "",
                                  fields[i].name);
        return dl_error(DL_EINVAL, "--set '%s': expected FIELD=VALUE with FIELD one of %s", kv,
                        names);
    }
    const char *name = fields[f].name, *v = eq + 1;
    if (!strcmp(name, "precision") || !strcmp(name, "mode"))
        return set_text(e, (int)f, v, kv);
    if (!strcmp(name, "lr")) {
        char *end;
        double x = strtod(v, &end);
        if (!*v || *end || !(x > 0) || !isfinite(x))
            return bad(kv, (int)f);
        e->optim.lr = (float)x;
        return DL_OK;
    }
    long lo = !strcmp(name, "max_steps") || !strcmp(name, "workers") ||
                      !strcmp(name, "val_limit") || !strcmp(name, "early_stopping")
                  ? 0
                  : 1;
    long x;
    if (!parse_int(v, lo, &x) || x > 1000000000L)
        return bad(kv, (int)f);
    if (!strcmp(name, "batch"))
        e->cfg.batch = (int)x;
    else if (!strcmp(name, "accumulate"))
        e->cfg.accumulate = (int)x;
    else if (!strcmp(name, "epochs"))
        e->cfg.epochs = (int)x;
    else if (!strcmp(name, "max_steps"))
        e->cfg.max_steps = x;
    else if (!strcmp(name, "workers"))
        e->data.workers = (int)x;
    else if (!strcmp(name, "prefetch"))
        e->data.prefetch = (int)x;
    else if (!strcmp(name, "val_every"))
        e->cfg.val_every = (int)x;
    else if (!strcmp(name, "val_limit"))
        e->data.val_limit = x;
    else if (!strcmp(name, "log_every"))
        e->cfg.log_every = (int)x;
    else
        return set_early_stopping(e, x, kv);
    return DL_OK;
}

int session_apply_sets(dl_session *s)
{
    if (s->opt.nsets > 0 && s->exp->is_study && !s->exp->model)
        return dl_error(DL_EINVAL, "--set changes an experiment; %s is a study", s->script_path);
    for (int i = 0; i < s->opt.nsets; i++) {
        /* the same field twice: the last one wins, as on a command line */
        int rc = apply_one(s->exp, s->opt.sets[i]);
        if (rc < 0)
            return rc;
    }
    return DL_OK;
}

int dl_session_set_field(const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq)
        return 0;
    for (size_t f = 0; f < NFIELDS; f++)
        if (strlen(fields[f].name) == (size_t)(eq - kv) &&
            !strncmp(fields[f].name, kv, (size_t)(eq - kv)))
            return 1;
    return 0;
}

int dl_session_set_check(const char *kv)
{
    dl_experiment e;
    memset(&e, 0, sizeof e);
    e.data.kind = DL_DATA_HDF5; /* mode is checked against the data when applied */
    return apply_one(&e, kv);
}
