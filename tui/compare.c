/* compare.c - the runs compared: curves read into columns, series on the chosen axis, seed groups, the diff table */
#include "tui/compare.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/rundir/records.h"
#include "engine/rundir/rundir.h"
#include "tui/tables.h"

#define MAX_KV 48

typedef struct kv {
    char key[40];
    char text[24];
    double num; /* NaN: not a number */
} kv;

struct dl_run_curves {
    char folder[96], label[64];
    long long size;
    double mtime;
    int n, cap;            /* records */
    double *x[DL_X_NAXES]; /* each record's x on each axis */
    int nm;                /* metrics */
    char names[DL_RUN_MAX_VALUES][48];
    double *col[DL_RUN_MAX_VALUES]; /* n values each, NaN where a record has none */
    double samples_per_step;        /* batch x accumulate (0: unknown) */
    int nhp, nfin;
    kv hp[MAX_KV], fin[MAX_KV];
};

const char *dl_compare_folder(const dl_run_curves *c) { return c->folder; }
const char *dl_compare_label(const dl_run_curves *c) { return c->label; }
int dl_compare_records(const dl_run_curves *c) { return c->n; }

static void metrics_stat(const char *runs_dir, const char *folder, long long *size, double *mtime)
{
    char run[1400], path[1500];
    snprintf(run, sizeof run, "%s/%s", runs_dir, folder);
    struct stat st;
    if (stat(dl_rundir_path(run, DL_RUN_FILE_METRICS, path, sizeof path), &st) != 0) {
        *size = -1, *mtime = 0;
        return;
    }
    *size = (long long)st.st_size;
    *mtime = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec * 1e-9;
}

int dl_compare_fresh(const dl_run_curves *c, const char *runs_dir)
{
    long long size;
    double mtime;
    metrics_stat(runs_dir, c->folder, &size, &mtime);
    return size >= 0 && size == c->size && mtime == c->mtime;
}

void dl_compare_free(dl_run_curves *c)
{
    if (!c)
        return;
    for (int k = 0; k < DL_X_NAXES; k++)
        free(c->x[k]);
    for (int k = 0; k < c->nm; k++)
        free(c->col[k]);
    free(c);
}

static int grow(dl_run_curves *c)
{
    int cap = c->cap ? c->cap * 2 : 256;
    for (int k = 0; k < DL_X_NAXES; k++) {
        double *p = realloc(c->x[k], (size_t)cap * sizeof *p);
        if (!p)
            return 0;
        c->x[k] = p;
    }
    for (int k = 0; k < c->nm; k++) {
        double *p = realloc(c->col[k], (size_t)cap * sizeof *p);
        if (!p)
            return 0;
        c->col[k] = p;
    }
    c->cap = cap;
    return 1;
}

static int column(dl_run_curves *c, const char *name)
{
    for (int k = 0; k < c->nm; k++)
        if (!strcmp(c->names[k], name))
            return k;
    if (c->nm == DL_RUN_MAX_VALUES)
        return -1;
    double *p = malloc((size_t)(c->cap ? c->cap : 1) * sizeof *p);
    if (!p)
        return -1;
    for (int i = 0; i < c->n; i++)
        p[i] = NAN;
    snprintf(c->names[c->nm], sizeof c->names[0], "%s", name);
    c->col[c->nm] = p;
    return c->nm++;
}

/* One record of metrics.jsonl appended to the columns. */
static void add_record(void *user, const dl_run_metrics *m)
{
    dl_run_curves *c = user;
    if (!m->has_step || (c->n == c->cap && !grow(c)))
        return;
    int i = c->n;
    c->x[DL_X_STEP][i] = m->step;
    c->x[DL_X_EPOCH][i] = m->has_epoch ? m->epoch : NAN;
    c->x[DL_X_SAMPLES][i] = m->step * c->samples_per_step;
    c->x[DL_X_WALL][i] = m->has_time ? m->time : NAN;
    for (int k = 0; k < c->nm; k++)
        c->col[k][i] = NAN;
    for (int j = 0; j < m->n; j++) {
        int k = column(c, m->v[j].name);
        if (k >= 0)
            c->col[k][i] = m->v[j].v;
    }
    c->n++;
}

/* The epoch axis as a fraction: step / steps per epoch, where an epoch
 * record says how many steps its epochs had. */
static void epoch_axis(dl_run_curves *c)
{
    double per = 0;
    int ek = -1;
    for (int k = 0; k < c->nm && ek < 0; k++)
        if (!strcmp(c->names[k], "val_loss") || !strcmp(c->names[k], "train_loss"))
            ek = k;
    for (int i = 0; i < c->n && per <= 0 && ek >= 0; i++)
        if (isfinite(c->col[ek][i]) && c->x[DL_X_EPOCH][i] > 0)
            per = c->x[DL_X_STEP][i] / c->x[DL_X_EPOCH][i];
    for (int i = 0; i < c->n && per > 0; i++)
        c->x[DL_X_EPOCH][i] = c->x[DL_X_STEP][i] / per;
}

static void put_kv(kv *list, int *n, const char *key, const cJSON *v)
{
    if (*n == MAX_KV || !key || !key[0] || cJSON_IsObject(v) || cJSON_IsArray(v) || !v)
        return;
    for (int i = 0; i < *n; i++)
        if (!strcmp(list[i].key, key))
            return; /* the first one wins: epochs is a hyperparameter and a config field */
    kv *e = &list[(*n)++];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->num = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (cJSON_IsString(v))
        snprintf(e->text, sizeof e->text, "%s", v->valuestring);
    else if (cJSON_IsNumber(v))
        snprintf(e->text, sizeof e->text, "%.6g", v->valuedouble);
    else
        snprintf(e->text, sizeof e->text, "%s", cJSON_IsTrue(v) ? "true" : "false");
}

/* The hyperparameters: a trial's, the script's, then the config fields
 * that change a result; the final metrics but the bookkeeping ones. */
static void read_config(dl_run_curves *c, const char *run)
{
    cJSON *cfg = dl_records_load(run, DL_RUN_FILE_CONFIG);
    cJSON *sum = dl_records_load(run, DL_RUN_FILE_SUMMARY);
    static const char *groups[] = {"trial_params", "hparams"};
    for (int g = 0; g < 2; g++) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(cfg, groups[g]);
        for (h = h ? h->child : NULL; h; h = h->next)
            put_kv(c->hp, &c->nhp, h->string, h);
    }
    static const char *fields[] = {"seed",      "batch",     "accumulate", "epochs",
                                   "max_steps", "precision", "device"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        put_kv(c->hp, &c->nhp, fields[i], cJSON_GetObjectItemCaseSensitive(cfg, fields[i]));
    double batch = NAN, acc = 1;
    for (int i = 0; i < c->nhp; i++) {
        if (!strcmp(c->hp[i].key, "batch") && isfinite(c->hp[i].num))
            batch = c->hp[i].num;
        if (!strcmp(c->hp[i].key, "accumulate") && isfinite(c->hp[i].num))
            acc = c->hp[i].num;
    }
    c->samples_per_step = isfinite(batch) ? batch * acc : 0;
    static const char *skip[] = {"lr", "samples_per_s", "data_wait", "seconds"};
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(sum, "final");
    for (f = f ? f->child : NULL; f; f = f->next) {
        int bookkeeping = 0;
        for (size_t i = 0; i < sizeof skip / sizeof *skip; i++)
            bookkeeping |= f->string && !strcmp(f->string, skip[i]);
        if (!bookkeeping)
            put_kv(c->fin, &c->nfin, f->string, f);
    }
    cJSON_Delete(cfg);
    cJSON_Delete(sum);
    dl_error_clear();
}

dl_run_curves *dl_compare_load(const char *runs_dir, const char *folder)
{
    char run[1400];
    snprintf(run, sizeof run, "%s/%s", runs_dir, folder);
    struct stat st;
    char path[1500];
    if (stat(dl_rundir_path(run, DL_RUN_FILE_CONFIG, path, sizeof path), &st) != 0)
        return NULL;
    dl_run_curves *c = calloc(1, sizeof *c);
    if (!c || !grow(c)) {
        dl_compare_free(c);
        return NULL;
    }
    snprintf(c->folder, sizeof c->folder, "%s", folder);
    /* "20261201-212142-name-hash8": the time stamp is 16 characters */
    const char *l =
        strlen(folder) > 16 && folder[8] == '-' && folder[15] == '-' ? folder + 16 : folder;
    snprintf(c->label, sizeof c->label, "%s", l);
    metrics_stat(runs_dir, folder, &c->size, &c->mtime);
    read_config(c, run);
    dl_records_metrics_each(run, add_record, c);
    epoch_axis(c);
    return c;
}

/* --- series ------------------------------------------------------------------------ */

void dl_compare_store_free(dl_compare_store *st)
{
    for (int i = 0; i < st->n; i++)
        free(st->a[i]);
    st->n = 0;
}

static double *store(dl_compare_store *st, int n)
{
    if (st->n == DL_UI_SERIES * 4)
        return NULL;
    double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (p)
        st->a[st->n++] = p;
    return p;
}

static int metric_col(const dl_run_curves *c, const char *metric)
{
    for (int k = 0; k < c->nm; k++)
        if (!strcmp(c->names[k], metric))
            return k;
    return -1;
}

/* Run c's points of metric on axis x into s (arrays from st). */
static void run_series(dl_compare_store *st, dl_ui_series *s, const dl_run_curves *c,
                       const char *metric, dl_ui_xaxis x, int slot, const char *label)
{
    memset(s, 0, sizeof *s);
    snprintf(s->label, sizeof s->label, "%s", label);
    s->slot = slot;
    int k = metric_col(c, metric);
    double *xs = store(st, c->n), *ys = store(st, c->n);
    if (k < 0 || !xs || !ys)
        return;
    for (int i = 0; i < c->n; i++)
        if (isfinite(c->col[k][i]) && isfinite(c->x[x][i]))
            xs[s->n] = c->x[x][i], ys[s->n++] = c->col[k][i];
    s->x = xs, s->y = ys;
}

/* y of series s at x by linear interpolation; NaN outside its range. */
static double at(const dl_ui_series *s, double x)
{
    if (s->n == 0 || x < s->x[0] || x > s->x[s->n - 1])
        return NAN;
    int lo = 0, hi = s->n - 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (s->x[mid] <= x)
            lo = mid;
        else
            hi = mid;
    }
    if (s->x[hi] == s->x[lo] || x <= s->x[lo])
        return s->y[lo];
    double f = (x - s->x[lo]) / (s->x[hi] - s->x[lo]);
    return s->y[lo] + f * (s->y[hi] - s->y[lo]);
}

/* A group's mean with its min-max band, on the x of its longest member. */
static void group_series(dl_compare_store *st, dl_ui_series *out, const dl_ui_series *members,
                         const int *idx, int m)
{
    const dl_ui_series *ref = &members[idx[0]];
    for (int j = 1; j < m; j++)
        if (members[idx[j]].n > ref->n)
            ref = &members[idx[j]];
    double *x = store(st, ref->n), *y = store(st, ref->n), *lo = store(st, ref->n),
           *hi = store(st, ref->n);
    out->n = 0;
    if (!x || !y || !lo || !hi)
        return;
    for (int i = 0; i < ref->n; i++) {
        double sum = 0, mn = INFINITY, mx = -INFINITY;
        int k = 0;
        for (int j = 0; j < m; j++) {
            double v = at(&members[idx[j]], ref->x[i]);
            if (isfinite(v))
                sum += v, k++, mn = fmin(mn, v), mx = fmax(mx, v);
        }
        if (k)
            x[out->n] = ref->x[i], y[out->n] = sum / k, lo[out->n] = mn, hi[out->n++] = mx;
    }
    out->x = x, out->y = y;
    if (m > 1) /* one run has no spread to show */
        out->lo = lo, out->hi = hi;
}

static const kv *find_kv(const kv *list, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i].key, key))
            return &list[i];
    return NULL;
}

/* The key a run groups under: every hyperparameter but the seed
 * (group "seed"), else the value of the grouping hyperparameter. */
static void group_key(const dl_run_curves *c, const char *group, char *buf, size_t size)
{
    buf[0] = 0;
    if (strcmp(group, "seed")) {
        const kv *e = find_kv(c->hp, c->nhp, group);
        snprintf(buf, size, "%s=%s", group, e ? e->text : "-");
        return;
    }
    size_t len = 0;
    for (int i = 0; i < c->nhp && len < size; i++)
        if (strcmp(c->hp[i].key, "seed"))
            len += (size_t)snprintf(buf + len, size - len, "%s%s=%s", len ? " " : "", c->hp[i].key,
                                    c->hp[i].text);
}

/* ui's series: a line per run, or per group (mean and band). */
static void build_series(dl_compare_store *st, dl_ui_runs *ui, dl_run_curves *const *runs,
                         const int *slots, int n)
{
    dl_ui_series one[DL_UI_SEL];
    for (int k = 0; k < n && k < DL_UI_SEL; k++)
        run_series(st, &one[k], runs[k], ui->metric, ui->xaxis, slots[k],
                   dl_compare_label(runs[k]));
    ui->nseries = 0;
    if (!ui->group[0]) {
        for (int k = 0; k < n && k < DL_UI_SEL; k++)
            ui->series[ui->nseries++] = one[k];
        return;
    }
    int done[DL_UI_SEL] = {0};
    for (int k = 0; k < n && k < DL_UI_SEL; k++) {
        if (done[k])
            continue;
        char key[512], other[512];
        group_key(runs[k], ui->group, key, sizeof key);
        int idx[DL_UI_SEL], m = 0;
        for (int j = k; j < n && j < DL_UI_SEL; j++) {
            group_key(runs[j], ui->group, other, sizeof other);
            if (!done[j] && !strcmp(key, other))
                idx[m++] = j, done[j] = 1;
        }
        dl_ui_series *g = &ui->series[ui->nseries++];
        memset(g, 0, sizeof *g);
        g->slot = slots[k];
        char letters[2 * DL_UI_SEL + 1] = "";
        for (int j = 0; j < m; j++)
            letters[2 * j] = (char)('A' + idx[j]), letters[2 * j + 1] = j + 1 < m ? '+' : 0;
        if (!strcmp(ui->group, "seed"))
            snprintf(g->label, sizeof g->label, "mean of %s (%d seed%s)", letters, m,
                     m == 1 ? "" : "s");
        else
            snprintf(g->label, sizeof g->label, "%.28s: mean of %s", key, letters);
        group_series(st, g, one, idx, m);
    }
}

/* Rows for every key of list (hp or fin) whose text is not the same in
 * every run; returns how many were the same. */
static int diff_rows(dl_ui_runs *ui, dl_run_curves *const *runs, int n, int metric)
{
    int same = 0;
    for (int k = 0; k < n; k++) {
        const kv *list = metric ? runs[k]->fin : runs[k]->hp;
        int nl = metric ? runs[k]->nfin : runs[k]->nhp;
        for (int i = 0; i < nl; i++) {
            int seen = 0; /* listed by an earlier run */
            for (int j = 0; j < k && !seen; j++)
                seen = find_kv(metric ? runs[j]->fin : runs[j]->hp,
                               metric ? runs[j]->nfin : runs[j]->nhp, list[i].key) != NULL;
            if (seen)
                continue;
            dl_ui_diff d;
            memset(&d, 0, sizeof d);
            snprintf(d.key, sizeof d.key, "%.39s", list[i].key);
            d.metric = metric;
            int differ = 0;
            for (int j = 0; j < n; j++) {
                const kv *e = find_kv(metric ? runs[j]->fin : runs[j]->hp,
                                      metric ? runs[j]->nfin : runs[j]->nhp, list[i].key);
                snprintf(d.text[j], sizeof d.text[j], "%s", e ? e->text : "-");
                d.num[j] = e ? e->num : NAN;
                differ |= strcmp(d.text[j], d.text[0]) != 0;
            }
            if (!differ)
                same++;
            else if (ui->ndiff < DL_UI_DIFF)
                ui->diff[ui->ndiff++] = d;
        }
    }
    return same;
}

void dl_compare_next_metric(dl_run_curves *const *runs, int n, const char *cur, int step, char *out,
                            size_t size)
{
    char names[DL_RUN_MAX_VALUES * 2][48];
    int nn = 0, at_cur = -1;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < runs[k]->nm && nn < DL_RUN_MAX_VALUES * 2; i++) {
            int seen = 0;
            for (int j = 0; j < nn && !seen; j++)
                seen = !strcmp(names[j], runs[k]->names[i]);
            if (!seen)
                snprintf(names[nn++], sizeof names[0], "%.47s", runs[k]->names[i]);
        }
    for (int j = 0; j < nn; j++)
        if (!strcmp(names[j], cur))
            at_cur = j;
    if (!nn) {
        snprintf(out, size, "%s", cur);
        return;
    }
    if (at_cur < 0) { /* the default: loss when there is one */
        for (int j = 0; j < nn; j++)
            if (!strcmp(names[j], "loss"))
                at_cur = j;
        snprintf(out, size, "%s", names[at_cur >= 0 ? at_cur : 0]);
        return;
    }
    snprintf(out, size, "%s", names[((at_cur + step) % nn + nn) % nn]);
}

void dl_compare_next_group(dl_run_curves *const *runs, int n, const char *cur, char *out,
                           size_t size)
{
    char order[MAX_KV + 1][40];
    int no = 0;
    snprintf(order[no++], sizeof order[0], "seed");
    for (int i = 0; n > 0 && i < runs[0]->nhp; i++) {
        const char *key = runs[0]->hp[i].key;
        int differ = 0;
        for (int k = 1; k < n && !differ; k++) {
            const kv *e = find_kv(runs[k]->hp, runs[k]->nhp, key);
            differ = !e || strcmp(e->text, runs[0]->hp[i].text);
        }
        if (differ && strcmp(key, "seed"))
            snprintf(order[no++], sizeof order[0], "%s", key);
    }
    if (!cur[0]) {
        snprintf(out, size, "%s", order[0]);
        return;
    }
    for (int j = 0; j < no; j++)
        if (!strcmp(order[j], cur)) {
            snprintf(out, size, "%s", j + 1 < no ? order[j + 1] : "");
            return;
        }
    out[0] = 0;
}

void dl_compare_build(dl_compare_store *st, dl_ui_runs *ui, dl_run_curves *const *runs,
                      const int *slots, int n)
{
    dl_compare_store_free(st);
    if (n > DL_UI_SEL)
        n = DL_UI_SEL;
    char metric[48];
    dl_compare_next_metric(runs, n, ui->metric, 0, metric, sizeof metric);
    snprintf(ui->metric, sizeof ui->metric, "%s", metric);
    ui->ncols = n;
    for (int k = 0; k < n; k++) {
        snprintf(ui->col[k], sizeof ui->col[k], "%s", dl_compare_label(runs[k]));
        ui->colslot[k] = slots[k];
    }
    if (ui->baseline >= n)
        ui->baseline = 0;
    ui->ndiff = 0;
    ui->nsame = diff_rows(ui, runs, n, 0);
    diff_rows(ui, runs, n, 1);
    build_series(st, ui, runs, slots, n);
}

/* --- a run's page ------------------------------------------------------------------ */

static void add_line(dl_ui_runs *ui, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_line(dl_ui_runs *ui, const char *fmt, ...)
{
    if (ui->nlines == DL_UI_LINES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ui->lines[ui->nlines++], sizeof ui->lines[0], fmt, ap);
    va_end(ap);
}

/* The last events of the run, notes first among them. */
static void detail_events(dl_ui_runs *ui, const char *run)
{
    char path[1500];
    FILE *f = fopen(dl_rundir_path(run, DL_RUN_FILE_EVENTS, path, sizeof path), "r");
    if (!f)
        return;
    char ring[12][160], line[2200];
    int n = 0;
    dl_run_event *e = malloc(sizeof *e);
    while (e && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        dl_records_event_parse(line, e);
        snprintf(ring[n % 12], sizeof ring[0], "%.40s: %.110s", e->kind, e->text);
        n++;
    }
    free(e);
    fclose(f);
    add_line(ui, "events (%d, the last %d):", n, n < 12 ? n : 12);
    for (int i = n > 12 ? n - 12 : 0; i < n; i++)
        add_line(ui, "  %s", ring[i % 12]);
}

void dl_compare_detail(dl_compare_store *st, dl_ui_runs *ui, const dl_run_curves *c,
                       const char *runs_dir)
{
    char run[1400];
    snprintf(run, sizeof run, "%s/%s", runs_dir, c->folder);
    ui->nlines = 0;
    dl_run_summary *s = malloc(sizeof *s);
    if (s && dl_records_summary(run, s) == DL_OK) {
        char wall[32] = "-";
        if (isfinite(s->wall_s))
            snprintf(wall, sizeof wall, "%.1f s", s->wall_s);
        add_line(ui, "status %s  steps %.0f  epochs %.0f  wall %s  device %s", s->status,
                 isfinite(s->steps) ? s->steps : 0, isfinite(s->epochs) ? s->epochs : 0, wall,
                 s->device[0] ? s->device : "-");
        if (s->has_message)
            add_line(ui, "message: %s", s->message);
    }
    free(s);
    dl_error_clear();
    char line[160] = "";
    size_t len = 0;
    for (int i = 0; i < c->nhp; i++)
        len += (size_t)snprintf(line + len, len < sizeof line ? sizeof line - len : 0, "%s%s=%s",
                                i ? " " : "", c->hp[i].key, c->hp[i].text);
    add_line(ui, "config: %s", line);
    len = 0, line[0] = 0;
    for (int i = 0; i < c->nfin; i++)
        len += (size_t)snprintf(line + len, len < sizeof line ? sizeof line - len : 0, "%s%s %.4g",
                                i ? "  " : "", c->fin[i].key, c->fin[i].num);
    add_line(ui, "final: %s", line);
    char tags[96];
    if (dl_records_tags(run, tags, sizeof tags))
        add_line(ui, "tags: %s", tags);
    detail_events(ui, run);
    dl_compare_store_free(st);
    ui->nseries = 0;
    static const char *const two[] = {"loss", "val_loss"};
    for (int k = 0; k < 2; k++) {
        run_series(st, &ui->series[ui->nseries], c, two[k], ui->xaxis, k, two[k]);
        ui->nseries += ui->series[ui->nseries].n > 0;
    }
}
