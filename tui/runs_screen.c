/* runs_screen.c - the runs screen's state: selection by folder, sort, filter, tags, a run's page, the comparison */
#include "tui/runs_screen.h"

#include <curses.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/rundir/records.h"
#include "engine/rundir/runlog.h"
#include "tui/compare.h"
#include "tui/export_metrics.h"
#include "tui/tables.h"

#define RELOAD_S 2.0

struct dl_runs_screen {
    char dir[256];
    double next_load;
    int *shown, cap;
    char filter[64];
    char sel[DL_UI_SEL][96]; /* the folder in each selection slot ("": free) */
    dl_run_curves *data[DL_UI_SEL];
    dl_run_curves *detail;
    char cursor[96]; /* the folder under the cursor, kept across re-reads */
    dl_compare_store st;
};

dl_runs_screen *dl_runs_screen_create(void) { return calloc(1, sizeof(dl_runs_screen)); }

void dl_runs_screen_destroy(dl_runs_screen *rs, dl_ui_runs *ui)
{
    if (ui)
        dl_tables_runs_free(ui);
    if (!rs)
        return;
    for (int k = 0; k < DL_UI_SEL; k++)
        dl_compare_free(rs->data[k]);
    dl_compare_free(rs->detail);
    dl_compare_store_free(&rs->st);
    free(rs->shown);
    free(rs);
}

/* --- filter and sort ------------------------------------------------------------------ */

/* The value of hyperparameter key in a row's "k=v" words into buf; 0 when
 * it has none. */
static int hp_value(const dl_ui_run *r, const char *key, char *buf, size_t size)
{
    size_t k = strlen(key);
    for (const char *p = r->hparams; k && (p = strstr(p, key)); p += k)
        if ((p == r->hparams || p[-1] == ' ') && p[k] == '=') {
            size_t n = strcspn(p + k + 1, " ");
            snprintf(buf, size, "%.*s", (int)n, p + k + 1);
            return 1;
        }
    return 0;
}

static int same_value(const char *have, const char *want)
{
    if (!strcmp(have, want))
        return 1;
    char *e1, *e2;
    double a = strtod(have, &e1), b = strtod(want, &e2);
    return *have && *want && !*e1 && !*e2 && a == b; /* lr=0.05 matches 0.050 */
}

/* One filter word: k=v (tag=, status=, name=, device=, a hyperparameter),
 * else text anywhere in the row. */
static int word_matches(const dl_ui_run *r, const char *w)
{
    const char *eq = strchr(w, '=');
    if (!eq)
        return strstr(r->folder, w) || strstr(r->status, w) || strstr(r->hparams, w) ||
               strstr(r->tags, w);
    char key[64], have[64];
    snprintf(key, sizeof key, "%.*s", (int)(eq - w), w);
    if (!strcmp(key, "tag"))
        return dl_records_has_tag(r->tags, eq + 1);
    if (!strcmp(key, "status"))
        return !strcmp(r->status, eq + 1);
    if (!strcmp(key, "name"))
        return !strcmp(r->name, eq + 1);
    if (!strcmp(key, "device"))
        return !strcmp(r->device, eq + 1);
    return hp_value(r, key, have, sizeof have) && same_value(have, eq + 1);
}

static int row_matches(const dl_ui_run *r, const char *filter)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", filter);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save))
        if (!word_matches(r, w))
            return 0;
    return 1;
}

static const dl_ui_run *sort_rows; /* qsort's context (the main thread only) */
static const char *sort_col;

/* A row's sort value: a number (1) or text (0). */
static int sort_value(const dl_ui_run *r, const char *col, double *num, char *text, size_t size)
{
    text[0] = 0;
    *num = NAN;
    if (!strcmp(col, "steps"))
        *num = (double)r->steps;
    else if (!strcmp(col, "val_acc"))
        *num = r->val_acc;
    else if (!strcmp(col, "val_loss"))
        *num = r->val_loss;
    else if (!strcmp(col, "wall"))
        *num = r->wall_s;
    else if (!strcmp(col, "name") || !strcmp(col, "status") || !strcmp(col, "tags"))
        snprintf(text, size, "%.63s",
                 !strcmp(col, "name")     ? r->name
                 : !strcmp(col, "status") ? r->status
                                          : r->tags);
    else if (hp_value(r, col, text, size)) {
        char *end;
        double v = strtod(text, &end);
        if (!*end && end != text)
            *num = v;
    }
    return isfinite(*num);
}

static int cmp_shown(const void *pa, const void *pb)
{
    const dl_ui_run *a = &sort_rows[*(const int *)pa], *b = &sort_rows[*(const int *)pb];
    double x, y;
    char tx[64], tyy[64];
    int na = sort_value(a, sort_col, &x, tx, sizeof tx),
        nb = sort_value(b, sort_col, &y, tyy, sizeof tyy);
    int c;
    if (na && nb)
        c = (x > y) - (x < y);
    else if (na != nb)
        c = nb - na; /* numbers before the rest */
    else
        c = (!tx[0]) - (!tyy[0]) ? (!tx[0]) - (!tyy[0]) : strcmp(tx, tyy);
    return c ? c : strcmp(b->folder, a->folder);
}

/* shown: the rows through the filter in the sort order; the slots from
 * the selection; the cursor on the same run as before. */
static void apply(dl_runs_screen *rs, dl_ui_runs *ui)
{
    if (rs->cap < ui->n) {
        int *p = realloc(rs->shown, (size_t)ui->n * sizeof *p);
        if (!p)
            return;
        rs->shown = p, rs->cap = ui->n;
    }
    ui->nsel = 0;
    int n = 0;
    for (int i = 0; i < ui->n; i++) {
        dl_ui_run *r = &ui->rows[i];
        r->slot = -1;
        for (int k = 0; k < DL_UI_SEL; k++)
            if (rs->sel[k][0] && !strcmp(rs->sel[k], r->folder))
                r->slot = k, ui->nsel++;
        if (row_matches(r, rs->filter))
            rs->shown[n++] = i;
    }
    if (ui->sort[0] && n > 1) {
        sort_rows = ui->rows, sort_col = ui->sort;
        qsort(rs->shown, (size_t)n, sizeof *rs->shown, cmp_shown);
        if (ui->desc)
            for (int i = 0; i < n / 2; i++) {
                int t = rs->shown[i];
                rs->shown[i] = rs->shown[n - 1 - i], rs->shown[n - 1 - i] = t;
            }
    }
    ui->shown = rs->shown, ui->nshown = n;
    if (ui->cursor >= n)
        ui->cursor = n ? n - 1 : 0;
    for (int i = 0; i < n && rs->cursor[0]; i++)
        if (!strcmp(ui->rows[rs->shown[i]].folder, rs->cursor))
            ui->cursor = i;
}

static const dl_ui_run *at_cursor(const dl_ui_runs *ui)
{
    return ui->nshown && ui->cursor < ui->nshown ? &ui->rows[ui->shown[ui->cursor]] : NULL;
}

/* The sort column after (step 1) or before (step -1) the current one:
 * newest first, the table's columns, then every hyperparameter. */
static void next_sort(dl_ui_runs *ui, int step)
{
    char cols[40][40] = {"", "name", "status", "steps", "val_acc", "val_loss", "wall", "tags"};
    int nc = 8;
    for (int i = 0; i < ui->n && nc < 40; i++) {
        char buf[200];
        snprintf(buf, sizeof buf, "%s", ui->rows[i].hparams);
        for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && nc < 40;
             w = strtok_r(NULL, " ", &save)) {
            w[strcspn(w, "=")] = 0;
            int seen = 0;
            for (int j = 0; j < nc && !seen; j++)
                seen = !strcmp(cols[j], w);
            if (!seen)
                snprintf(cols[nc++], sizeof cols[0], "%s", w);
        }
    }
    int at = 0;
    for (int j = 0; j < nc; j++)
        if (!strcmp(cols[j], ui->sort))
            at = j;
    snprintf(ui->sort, sizeof ui->sort, "%s", cols[((at + step) % nc + nc) % nc]);
    ui->desc = !strcmp(ui->sort, "val_acc"); /* the best first */
}

/* --- the comparison and a run's page --------------------------------------------------- */

/* "name-hash8": a folder less its time stamp, short enough for a note. */
static const char *short_name(const char *folder)
{
    return strlen(folder) > 16 && folder[8] == '-' && folder[15] == '-' ? folder + 16 : folder;
}

static void drop_slot(dl_runs_screen *rs, dl_ui_runs *ui, int k, const char *why)
{
    snprintf(ui->note, sizeof ui->note, "run %.80s %s: dropped from the selection",
             short_name(rs->sel[k]), why);
    rs->sel[k][0] = 0;
    dl_compare_free(rs->data[k]);
    rs->data[k] = NULL;
}

/* The compared runs read (again when their metrics grew) and ui's
 * series and diff rebuilt. */
static void build_compare(dl_runs_screen *rs, dl_ui_runs *ui)
{
    dl_run_curves *runs[DL_UI_SEL];
    int slots[DL_UI_SEL], n = 0;
    for (int k = 0; k < DL_UI_SEL; k++) {
        if (!rs->sel[k][0])
            continue;
        if (rs->data[k] && !dl_compare_fresh(rs->data[k], rs->dir)) {
            dl_compare_free(rs->data[k]);
            rs->data[k] = NULL;
        }
        if (!rs->data[k] && !(rs->data[k] = dl_compare_load(rs->dir, rs->sel[k]))) {
            drop_slot(rs, ui, k, "was deleted");
            continue;
        }
        runs[n] = rs->data[k], slots[n++] = k;
    }
    dl_compare_build(&rs->st, ui, runs, slots, n);
    if (n == 0 && ui->mode == DL_UI_COMPARE)
        ui->mode = DL_UI_TABLE;
}

static void build_detail(dl_runs_screen *rs, dl_ui_runs *ui)
{
    if (rs->detail && (strcmp(dl_compare_folder(rs->detail), ui->detail) ||
                       !dl_compare_fresh(rs->detail, rs->dir))) {
        dl_compare_free(rs->detail);
        rs->detail = NULL;
    }
    if (!rs->detail && !(rs->detail = dl_compare_load(rs->dir, ui->detail))) {
        snprintf(ui->note, sizeof ui->note, "run %.80s was deleted: its page is closed",
                 short_name(ui->detail));
        ui->mode = DL_UI_TABLE;
        return;
    }
    dl_compare_detail(&rs->st, ui, rs->detail, rs->dir);
}

static void rebuild(dl_runs_screen *rs, dl_ui_runs *ui)
{
    if (ui->mode == DL_UI_COMPARE)
        build_compare(rs, ui);
    else if (ui->mode == DL_UI_DETAIL)
        build_detail(rs, ui);
}

static void load(dl_runs_screen *rs, dl_ui_runs *ui)
{
    dl_tables_load_runs(ui, rs->dir);
    for (int k = 0; k < DL_UI_SEL; k++) {
        int found = !rs->sel[k][0];
        for (int i = 0; i < ui->n && !found; i++)
            found = !strcmp(ui->rows[i].folder, rs->sel[k]);
        if (!found)
            drop_slot(rs, ui, k, "was deleted");
    }
    apply(rs, ui);
    rebuild(rs, ui);
    rs->next_load = dl_clock_mono_s() + RELOAD_S;
}

void dl_runs_screen_open(dl_runs_screen *rs, dl_ui_runs *ui, const char *runs_dir)
{
    snprintf(rs->dir, sizeof rs->dir, "%s", runs_dir);
    load(rs, ui);
}

void dl_runs_screen_sample(dl_runs_screen *rs, dl_ui_runs *ui, const char *filter)
{
    if (strcmp(filter, rs->filter)) {
        snprintf(rs->filter, sizeof rs->filter, "%s", filter);
        ui->cursor = 0, rs->cursor[0] = 0;
        apply(rs, ui);
    }
    if (dl_clock_mono_s() >= rs->next_load)
        load(rs, ui);
}

/* E: every metric of the selected runs (else the one under the cursor)
 * into ./dlbench-export-TIME.csv, written whole; the note says where. */
static void export_selected(dl_runs_screen *rs, dl_ui_runs *ui)
{
    dl_export_run *runs = calloc(DL_UI_SEL, sizeof *runs);
    const dl_ui_run *cur = at_cursor(ui);
    int n = 0;
    for (int i = 0; runs && i < ui->n && n < DL_UI_SEL; i++) {
        const dl_ui_run *r = &ui->rows[i];
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", rs->dir, r->folder);
        if ((ui->nsel ? r->slot >= 0 : r == cur) && dl_export_run_open(&runs[n], path) == DL_OK)
            n++;
    }
    char file[64], stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    snprintf(file, sizeof file, "dlbench-export-%s.csv", stamp);
    long rows = 0;
    if (!runs || !n)
        snprintf(ui->note, sizeof ui->note, "export: no run to export (Space selects)");
    else if (dl_export_metrics_file(file, runs, n, 0, &rows) < 0)
        snprintf(ui->note, sizeof ui->note, "export: %.180s", dl_error_message());
    else
        snprintf(ui->note, sizeof ui->note, "exported %ld rows of %d run%s to %s", rows, n,
                 n == 1 ? "" : "s", file);
    for (int i = 0; i < n; i++)
        dl_export_run_close(&runs[i]);
    free(runs);
    dl_error_clear();
}

/* --- keys ------------------------------------------------------------------------------ */

static void toggle(dl_runs_screen *rs, dl_ui_runs *ui, const dl_ui_run *r)
{
    if (r->slot >= 0) {
        rs->sel[r->slot][0] = 0;
        dl_compare_free(rs->data[r->slot]);
        rs->data[r->slot] = NULL;
    } else {
        int k = 0;
        while (k < DL_UI_SEL && rs->sel[k][0])
            k++;
        if (k == DL_UI_SEL) {
            snprintf(ui->note, sizeof ui->note, "%d runs are selected, the most at once",
                     DL_UI_SEL);
            return;
        }
        snprintf(rs->sel[k], sizeof rs->sel[k], "%s", r->folder);
    }
    apply(rs, ui);
}

static void move_cursor(dl_runs_screen *rs, dl_ui_runs *ui, int to)
{
    ui->cursor = to < 0 ? 0 : to >= ui->nshown ? (ui->nshown ? ui->nshown - 1 : 0) : to;
    const dl_ui_run *r = at_cursor(ui);
    snprintf(rs->cursor, sizeof rs->cursor, "%s", r ? r->folder : "");
}

static int table_key(dl_runs_screen *rs, dl_ui_runs *ui, int ch)
{
    const dl_ui_run *r = at_cursor(ui);
    switch (ch) {
    case KEY_UP: move_cursor(rs, ui, ui->cursor - 1); return 1;
    case KEY_DOWN: move_cursor(rs, ui, ui->cursor + 1); return 1;
    case KEY_PPAGE: move_cursor(rs, ui, ui->cursor - 10); return 1;
    case KEY_NPAGE: move_cursor(rs, ui, ui->cursor + 10); return 1;
    case KEY_HOME: move_cursor(rs, ui, 0); return 1;
    case KEY_END: move_cursor(rs, ui, ui->nshown - 1); return 1;
    case '<':
    case '>': next_sort(ui, ch == '>' ? 1 : -1), apply(rs, ui); return 1;
    case 'I': ui->desc = !ui->desc, apply(rs, ui); return 1;
    case 'u':
        memset(rs->sel, 0, sizeof rs->sel);
        apply(rs, ui);
        return 1;
    case ' ':
        if (r)
            toggle(rs, ui, r), move_cursor(rs, ui, ui->cursor + 1);
        return 1;
    case '\n':
    case '\r':
    case KEY_ENTER:
        if (!r)
            return 1;
        snprintf(ui->detail, sizeof ui->detail, "%s", r->folder);
        ui->mode = DL_UI_DETAIL;
        rebuild(rs, ui);
        return 1;
    case 'c':
        if (!ui->nsel && r)
            toggle(rs, ui, r); /* nothing selected: the run under the cursor */
        if (!ui->nsel)
            return 1;
        ui->mode = DL_UI_COMPARE;
        ui->note[0] = 0;
        rebuild(rs, ui);
        return 1;
    default: return 0;
    }
}

/* Keys of the comparison (and of a run's page, which shares x and Esc). */
static int compare_key(dl_runs_screen *rs, dl_ui_runs *ui, int ch)
{
    dl_run_curves *runs[DL_UI_SEL];
    int n = 0;
    for (int k = 0; k < DL_UI_SEL; k++)
        if (rs->data[k])
            runs[n++] = rs->data[k];
    switch (ch) {
    case 27:
    case '\n':
    case '\r':
    case KEY_ENTER:
    case KEY_BACKSPACE:
    case 127: ui->mode = DL_UI_TABLE; return 1;
    case 'x': ui->xaxis = (ui->xaxis + 1) % DL_X_NAXES; break;
    case 'S': ui->smooth = (ui->smooth + 1) % DL_UI_SMOOTH_STEPS; return 1;
    case 'm':
    case 'M':
        if (ui->mode != DL_UI_COMPARE)
            return 1;
        dl_compare_next_metric(runs, n, ui->metric, ch == 'm' ? 1 : -1, ui->metric,
                               sizeof ui->metric);
        break;
    case 'b':
        if (ui->ncols)
            ui->baseline = (ui->baseline + 1) % ui->ncols;
        return 1;
    case 'G':
        if (ui->mode != DL_UI_COMPARE)
            return 1;
        dl_compare_next_group(runs, n, ui->group, ui->group, sizeof ui->group);
        break;
    case ' ':
        if (ui->mode == DL_UI_DETAIL)
            for (int i = 0; i < ui->n; i++)
                if (!strcmp(ui->rows[i].folder, ui->detail))
                    toggle(rs, ui, &ui->rows[i]);
        return 1;
    default: return 0;
    }
    rebuild(rs, ui);
    return 1;
}

int dl_runs_screen_key(dl_runs_screen *rs, dl_ui_runs *ui, int ch)
{
    if (ch == 'E') {
        export_selected(rs, ui);
        return 1;
    }
    if (ui->mode == DL_UI_TABLE)
        return table_key(rs, ui, ch);
    if (ui->mode == DL_UI_DETAIL && ch == 'c') {
        ui->mode = DL_UI_TABLE;
        return table_key(rs, ui, ch);
    }
    return compare_key(rs, ui, ch);
}

void dl_runs_screen_click(dl_runs_screen *rs, dl_ui_runs *ui, int i)
{
    move_cursor(rs, ui, i);
    const dl_ui_run *r = at_cursor(ui);
    if (r)
        toggle(rs, ui, r);
}

void dl_runs_screen_tag(dl_runs_screen *rs, dl_ui_runs *ui, const char *tag)
{
    int remove = tag[0] == '-';
    const char *t = tag + remove;
    int done = 0, failed = 0;
    for (int i = 0; i < ui->n; i++) {
        dl_ui_run *r = &ui->rows[i];
        if (ui->nsel ? r->slot < 0 : r != at_cursor(ui))
            continue;
        char run[1400];
        snprintf(run, sizeof run, "%s/%s", rs->dir, r->folder);
        int rc = dl_runlog_tag(run, t, remove);
        if (rc < 0) {
            snprintf(ui->note, sizeof ui->note, "tag: %.180s", dl_error_message());
            failed = 1;
            break;
        }
        done += rc;
    }
    if (!failed)
        snprintf(ui->note, sizeof ui->note, "%s %.60s: %d run%s", remove ? "untagged" : "tagged", t,
                 done, done == 1 ? "" : "s");
    load(rs, ui);
}
