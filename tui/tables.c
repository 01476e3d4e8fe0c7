/* tables.c - the runs table and a study's trials, read from disk for the F2 and F4 screens */
#include "tui/tables.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/rundir/records.h"
#include "engine/rundir/rundir.h"
#include "engine/tune/tune.h"

/* --- runs ----------------------------------------------------------------------- */

static int cmp_runs(const void *a, const void *b)
{
    return strcmp(((const dl_ui_run *)b)->folder, ((const dl_ui_run *)a)->folder);
}

/* "hidden=64 lr=0.05 seed=1": a trial's parameters, the hyperparameters,
 * then the seed, as config.json orders them. */
void dl_tables_hparams_text(const cJSON *config, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    static const char *groups[] = {"trial_params", "hparams"};
    for (int g = 0; g < 2; g++) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(config, groups[g]);
        for (h = h ? h->child : NULL; h && h->string; h = h->next) {
            char v[64];
            if (cJSON_IsString(h))
                snprintf(v, sizeof v, "%s", h->valuestring);
            else if (cJSON_IsNumber(h))
                snprintf(v, sizeof v, "%.6g", h->valuedouble);
            else
                snprintf(v, sizeof v, "%s", cJSON_IsTrue(h) ? "true" : "false");
            int n = snprintf(buf + len, len < size ? size - len : 0, "%s%s=%s", len ? " " : "",
                             h->string, v);
            if (n < 0 || len + (size_t)n >= size)
                return;
            len += (size_t)n;
        }
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(config, "seed");
    if (cJSON_IsNumber(seed))
        snprintf(buf + len, len < size ? size - len : 0, "%sseed=%.0f", len ? " " : "",
                 seed->valuedouble);
}

/* A row of the runs table from a run's summary and config (NULL: none). */
static void run_row(dl_ui_run *r, const char *dir, const char *folder, const dl_run_summary *s,
                    const cJSON *config)
{
    memset(r, 0, sizeof *r);
    snprintf(r->folder, sizeof r->folder, "%.95s", folder);
    snprintf(r->name, sizeof r->name, "%.39s", s->name);
    snprintf(r->status, sizeof r->status, "%.11s", s->status[0] ? s->status : "?");
    snprintf(r->device, sizeof r->device, "%.7s", s->device[0] ? s->device : "-");
    r->steps = isfinite(s->steps) ? (long)s->steps : 0;
    r->wall_s = s->wall_s;
    r->val_acc = dl_records_value(s->final, s->nfinal, "val_acc");
    r->val_loss = dl_records_value(s->final, s->nfinal, "val_loss");
    r->cost = s->cost;
    r->slot = -1;
    if (config)
        dl_tables_hparams_text(config, r->hparams, sizeof r->hparams);
    dl_records_tags(dir, r->tags, sizeof r->tags);
}

/* The value of key in "k=v" words, "" when missing. */
static void word_value(const char *words, const char *key, char *buf, size_t size)
{
    size_t k = strlen(key);
    buf[0] = 0;
    for (const char *p = words; k && (p = strstr(p, key)); p += k)
        if ((p == words || p[-1] == ' ') && p[k] == '=') {
            snprintf(buf, size, "%.*s", (int)strcspn(p + k + 1, " "), p + k + 1);
            return;
        }
}

/* Each row's varying words: its hyperparameters less those every row has
 * with the same value (what tells the runs apart on a narrow screen). */
static void mark_varying(dl_ui_run *rows, int n)
{
    for (int i = 0; i < n; i++) {
        char words[200], *save = NULL;
        size_t len = 0;
        snprintf(words, sizeof words, "%s", rows[i].hparams);
        rows[i].varying[0] = 0;
        for (char *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
            char key[64], mine[64], other[64];
            snprintf(key, sizeof key, "%.*s", (int)strcspn(w, "="), w);
            word_value(rows[i].hparams, key, mine, sizeof mine);
            int differs = 0;
            for (int j = 0; j < n && !differs; j++) {
                word_value(rows[j].hparams, key, other, sizeof other);
                differs = strcmp(mine, other) != 0;
            }
            if (differs && len + strlen(w) + 2 < sizeof rows[i].varying)
                len += (size_t)snprintf(rows[i].varying + len, sizeof rows[i].varying - len, "%s%s",
                                        len ? " " : "", w);
        }
    }
}

void dl_tables_load_runs(dl_ui_runs *out, const char *runs_dir)
{
    dl_run_summary *sum = malloc(sizeof *sum);
    dl_ui_run *rows = NULL;
    int n = 0, cap = 0;
    DIR *d = sum ? opendir(runs_dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char dir[1400];
        snprintf(dir, sizeof dir, "%s/%s", runs_dir, e->d_name);
        if (dl_records_summary(dir, sum) != DL_OK)
            continue;
        if (n == cap) {
            dl_ui_run *nr = realloc(rows, (size_t)(cap = cap ? cap * 2 : 64) * sizeof *nr);
            if (!nr)
                break;
            rows = nr;
        }
        cJSON *config = dl_records_load(dir, DL_RUN_FILE_CONFIG);
        run_row(&rows[n++], dir, e->d_name, sum, config);
        cJSON_Delete(config);
    }
    if (d)
        closedir(d);
    dl_error_clear();
    free(sum);
    if (n > 1)
        qsort(rows, (size_t)n, sizeof *rows, cmp_runs);
    mark_varying(rows, n);
    free(out->rows);
    out->rows = rows;
    out->n = n;
    snprintf(out->dir, sizeof out->dir, "%s", runs_dir);
}

void dl_tables_runs_free(dl_ui_runs *out)
{
    free(out->rows);
    out->rows = NULL;
    out->n = 0;
}

/* --- studies -------------------------------------------------------------------- */

int dl_tables_pick_study(const char *studies_dir, const char *prefer, char *name, size_t size)
{
    char path[1400];
    struct stat st;
    if (prefer && prefer[0]) {
        snprintf(path, sizeof path, "%s/%s/journal.jsonl", studies_dir, prefer);
        if (stat(path, &st) == 0) {
            snprintf(name, size, "%s", prefer);
            return 0;
        }
    }
    DIR *d = opendir(studies_dir);
    if (!d)
        return -1;
    double newest = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s/journal.jsonl", studies_dir, e->d_name);
        if (stat(path, &st) != 0)
            continue;
        double m = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
        if (m > newest) {
            newest = m;
            snprintf(name, size, "%s", e->d_name);
        }
    }
    closedir(d);
    return newest >= 0 ? 0 : -1;
}

/* Average ranks (ties share the mean of their positions). */
static void ranks(const double *v, int n, double *r)
{
    for (int i = 0; i < n; i++) {
        int less = 0, same = 0;
        for (int j = 0; j < n; j++)
            less += v[j] < v[i], same += v[j] == v[i];
        r[i] = less + (same + 1) / 2.0;
    }
}

static double pearson(const double *x, const double *y, int n)
{
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++)
        mx += x[i] / n, my += y[i] / n;
    for (int i = 0; i < n; i++) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0;
}

/* Importance of one parameter over n (value, objective) pairs: |Spearman
 * rho| for a number; for a choice (x = index) the correlation ratio eta,
 * the share of the objective's spread explained by the choice. [0, 1];
 * NaN below 3 pairs. */
static double importance(const double *x, const double *y, int n, int choice)
{
    if (n < 3)
        return NAN;
    if (!choice) {
        double *rx = malloc((size_t)n * sizeof *rx), *ry = malloc((size_t)n * sizeof *ry);
        double rho = NAN;
        if (rx && ry) {
            ranks(x, n, rx);
            ranks(y, n, ry);
            rho = fabs(pearson(rx, ry, n));
        }
        free(rx);
        free(ry);
        return rho;
    }
    double mean = 0, total = 0, between = 0;
    for (int i = 0; i < n; i++)
        mean += y[i] / n;
    for (int i = 0; i < n; i++)
        total += (y[i] - mean) * (y[i] - mean);
    for (int i = 0; i < n; i++) {
        int first = 1; /* each group once: at its first member */
        for (int j = 0; j < i && first; j++)
            first = x[j] != x[i];
        if (!first)
            continue;
        double sum = 0;
        int k = 0;
        for (int j = 0; j < n; j++)
            if (x[j] == x[i])
                sum += y[j], k++;
        between += k * (sum / k - mean) * (sum / k - mean);
    }
    return total > 0 ? sqrt(between / total) : 0;
}

static void fmt_param(char *buf, size_t size, const dl_tune_param *p)
{
    if (p->kind == DL_PARAM_CHOICE) {
        int i = (int)p->value;
        snprintf(buf, size, "%s=%s", p->name,
                 i >= 0 && i < p->n_choices && p->choices ? p->choices[i] : "?");
    } else if (p->kind == DL_PARAM_INT) {
        snprintf(buf, size, "%s=%.0f", p->name, p->value);
    } else {
        snprintf(buf, size, "%s=%.4g", p->name, p->value);
    }
}

/* Where a parameter's value sits in its search space, [0, 1]. */
static double place(const dl_tune_param *p)
{
    if (p->kind == DL_PARAM_CHOICE)
        return p->n_choices > 1 ? p->value / (p->n_choices - 1) : 0.5;
    double lo = p->lo, hi = p->hi, v = p->value;
    if (p->log && lo > 0 && hi > 0 && v > 0)
        lo = log(lo), hi = log(hi), v = log(v);
    return hi > lo ? fmin(1, fmax(0, (v - lo) / (hi - lo))) : 0.5;
}

/* The axis ends of parameter j: its bounds, or its first and last choice. */
static void axis_ends(dl_ui_trials *out, int j, const dl_tune_param *p)
{
    if (p->kind == DL_PARAM_CHOICE && p->choices && p->n_choices > 0) {
        snprintf(out->plo[j], sizeof out->plo[j], "%.15s", p->choices[0]);
        snprintf(out->phi[j], sizeof out->phi[j], "%.15s", p->choices[p->n_choices - 1]);
    } else {
        snprintf(out->plo[j], sizeof out->plo[j], "%.4g", p->lo);
        snprintf(out->phi[j], sizeof out->phi[j], "%.4g", p->hi);
    }
}

void dl_tables_trials_close(dl_trials_follow *f)
{
    dl_study_destroy(f->st);
    f->st = NULL;
}

void dl_tables_sample_trials(dl_trials_follow *f, dl_ui_trials *out)
{
    out->have = 0;
    if (!f->st) {
        /* the journal knows the direction; a mismatch is DL_EINVAL: try the other */
        int rc = dl_study_open(&f->st, f->studies, f->name, DL_STUDY_MINIMIZE, NULL, NULL, 0);
        if (rc == DL_EINVAL)
            rc = dl_study_open(&f->st, f->studies, f->name, DL_STUDY_MAXIMIZE, NULL, NULL, 0);
        if (rc < 0) {
            f->st = NULL;
            snprintf(out->note, sizeof out->note, "study %.60s: %.120s", f->name,
                     dl_error_message());
            return;
        }
    } else if (dl_study_refresh(f->st) < 0) {
        snprintf(out->note, sizeof out->note, "study %.60s: %.120s", f->name, dl_error_message());
        return;
    }
    dl_study *st = f->st;
    out->have = 1;
    snprintf(out->name, sizeof out->name, "%s", dl_study_name(st));
    snprintf(out->dir, sizeof out->dir, "%s", dl_study_dir(st));
    out->maximize = dl_study_direction(st) == DL_STUDY_MAXIMIZE;
    int count = dl_study_count(st);
    int first = count > DL_UI_TRIALS ? count - DL_UI_TRIALS : 0;
    out->n = 0;
    out->ncomplete = out->npruned = out->nfailed = out->nrunning = 0;
    out->best_number = -1;
    out->best_value = NAN;
    out->nparams = 0;
    double best = NAN;
    for (int i = 0; i < count; i++) {
        const dl_trial *t = dl_study_trial(st, i);
        if (!t)
            continue;
        dl_trial_state state = dl_trial_state_of(t);
        double v = dl_trial_value(t);
        out->ncomplete += state == DL_TRIAL_COMPLETE;
        out->npruned += state == DL_TRIAL_PRUNED;
        out->nfailed += state == DL_TRIAL_FAILED;
        out->nrunning += state == DL_TRIAL_RUNNING;
        if (state == DL_TRIAL_COMPLETE && isfinite(v) &&
            (!isfinite(best) || (out->maximize ? v > best : v < best))) {
            best = v;
            out->best_number = dl_trial_number(t);
            out->best_value = v;
        }
        for (int k = 0; k < dl_trial_param_count(t); k++) {
            const dl_tune_param *p = dl_trial_param(t, k);
            int known = 0;
            for (int j = 0; j < out->nparams && !known; j++)
                known = !strcmp(out->param[j], p->name);
            if (!known && out->nparams < DL_UI_PARAMS) {
                axis_ends(out, out->nparams, p);
                snprintf(out->param[out->nparams++], sizeof out->param[0], "%s", p->name);
            }
        }
        if (i < first)
            continue;
        dl_ui_trial *r = &out->rows[out->n++];
        r->number = dl_trial_number(t);
        snprintf(r->state, sizeof r->state, "%s", dl_trial_state_name(state));
        r->value = v;
        r->best_so_far = best;
        double t0 = dl_trial_start_time(t), t1 = dl_trial_end_time(t);
        r->duration_s = t0 > 0 && t1 >= t0 ? t1 - t0 : -1;
        r->params[0] = 0;
        for (int j = 0; j < DL_UI_PARAMS; j++) {
            const dl_tune_param *p =
                j < out->nparams ? dl_trial_param_find(t, out->param[j]) : NULL;
            r->pv[j] = p ? place(p) : NAN;
        }
        for (int k = 0; k < dl_trial_param_count(t); k++) {
            char one[80];
            fmt_param(one, sizeof one, dl_trial_param(t, k));
            size_t len = strlen(r->params);
            snprintf(r->params + len, sizeof r->params - len, "%s%s", k ? " " : "", one);
        }
    }
    /* importance over the complete trials with a finite value */
    double *x = malloc((size_t)(count + 1) * sizeof *x),
           *y = malloc((size_t)(count + 1) * sizeof *y);
    for (int j = 0; j < out->nparams; j++) {
        int n = 0, choice = 0;
        for (int i = 0; x && y && i < count; i++) {
            const dl_trial *t = dl_study_trial(st, i);
            if (!t || dl_trial_state_of(t) != DL_TRIAL_COMPLETE || !isfinite(dl_trial_value(t)))
                continue;
            const dl_tune_param *p = dl_trial_param_find(t, out->param[j]);
            if (!p)
                continue;
            choice = p->kind == DL_PARAM_CHOICE;
            x[n] = p->kind == DL_PARAM_FLOAT && p->log && p->value > 0 ? log(p->value) : p->value;
            y[n++] = dl_trial_value(t);
        }
        out->importance[j] = x && y ? importance(x, y, n, choice) : NAN;
    }
    free(x);
    free(y);
}
