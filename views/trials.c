/* trials.c - the trials screen (F4): a study's trials, the best value so far, parameter importance */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "views/canvas.h"
#include "views/colors.h"
#include "views/views.h"

static int state_role(const char *st)
{
    if (!strcmp(st, "complete"))
        return DL_COLOR_DEFAULT;
    if (!strcmp(st, "running"))
        return DL_COLOR_OK;
    if (!strcmp(st, "pruned"))
        return DL_COLOR_DIM;
    return DL_COLOR_ERROR;
}

static void table(WINDOW *w, const dl_ui_trials *t, const dl_view_state *v, int top, int left,
                  int height, int width)
{
    char hdr[256];
    int pw = width - 36;
    snprintf(hdr, sizeof hdr, "%5s %-9s %10s %8s  %s", "#", "state", "value", "time",
             pw > 10 ? "parameters" : "");
    dl_draw_text(w, top, left, dl_color(DL_COLOR_HEADER), "%-*.*s", width, width, hdr);
    int nrows = height - 1;
    if (nrows < 1)
        return;
    /* the newest at the bottom; scroll moves up */
    int idx[DL_UI_TRIALS], n = 0;
    for (int i = 0; i < t->n; i++)
        if (!v->filter[0] || strstr(t->rows[i].params, v->filter) ||
            strstr(t->rows[i].state, v->filter))
            idx[n++] = i;
    int end = n - v->scroll;
    if (end < 0)
        end = 0;
    int start = end - nrows > 0 ? end - nrows : 0;
    for (int k = start, y = top + 1; k < end; k++, y++) {
        const dl_ui_trial *r = &t->rows[idx[k]];
        char val[16] = "-", dur[16] = "-";
        if (isfinite(r->value))
            snprintf(val, sizeof val, "%10.5g", r->value);
        if (r->duration_s >= 0)
            dl_fmt_duration(dur, sizeof dur, r->duration_s);
        int role = r->number == t->best_number ? DL_COLOR_SELECT : state_role(r->state);
        dl_draw_text(w, y, left, dl_color(role), "%5d %-9s %10s %8s  %.*s", r->number, r->state,
                     val, dur, pw > 0 ? pw : 0, r->params);
    }
}

/* Each complete trial's value as a dot, the best so far as a line. */
static void best_chart(WINDOW *w, const dl_ui_trials *t, int top, int left, int height, int width)
{
    dl_draw_text(w, top, left, dl_color(DL_COLOR_HEADER), "best %s so far (line), each trial (*)",
                 t->maximize ? "(max)" : "(min)");
    int ch = height - 2, cw = width - 9;
    if (ch < 2 || cw < 8)
        return;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->rows[i].state, "complete") && isfinite(t->rows[i].value))
            lo = fmin(lo, t->rows[i].value), hi = fmax(hi, t->rows[i].value);
    if (!(hi >= lo)) {
        dl_draw_text(w, top + 1 + ch / 2, left + 9, dl_color(DL_COLOR_DIM),
                     "no complete trial yet");
        return;
    }
    if (hi - lo < 1e-12)
        hi += 1e-3 + fabs(hi) * 0.01, lo -= 1e-3 + fabs(lo) * 0.01;
    dl_draw_text(w, top + 1, left, dl_color(DL_COLOR_AXIS), "%8.4g", hi);
    dl_draw_text(w, top + ch, left, dl_color(DL_COLOR_AXIS), "%8.4g", lo);
    for (int r = 0; r < ch; r++)
        dl_draw_text(w, top + 1 + r, left + 8, dl_color(DL_COLOR_AXIS), "%s",
                     dl_glyphs_unicode() ? "\u2502" : "|");
    int n = t->n;
    const char *line = dl_glyphs_unicode() ? "\u2500" : "-";
    /* column c shows trial c * (n - 1) / (cw - 1); a trial's own dot sits at
     * the first column that shows it */
    int prev = -1;
    for (int c = 0; c < cw && n > 0; c++) {
        int i = n == 1 ? 0 : (int)((double)c * (n - 1) / (cw - 1));
        const dl_ui_trial *r = &t->rows[i];
        if (isfinite(r->best_so_far)) {
            int y = (int)lround((hi - r->best_so_far) / (hi - lo) * (ch - 1));
            dl_draw_text(w, top + 1 + y, left + 9 + c, dl_color(DL_COLOR_OK), "%s", line);
        }
        if (i != prev && !strcmp(r->state, "complete") && isfinite(r->value)) {
            int y = (int)lround((hi - r->value) / (hi - lo) * (ch - 1));
            dl_draw_text(w, top + 1 + y, left + 9 + c, dl_color(DL_COLOR_ACC), "*");
        }
        prev = i;
        if (n == 1)
            break;
    }
    if (n > 0)
        dl_draw_text(w, top + ch + 1, left + 9, dl_color(DL_COLOR_AXIS), "trial %d",
                     t->rows[0].number);
    if (n > 1) {
        char last[24];
        snprintf(last, sizeof last, "trial %d", t->rows[n - 1].number);
        dl_draw_text(w, top + ch + 1, left + width - (int)strlen(last), dl_color(DL_COLOR_AXIS),
                     "%s", last);
    }
}

static void importance(WINDOW *w, const dl_ui_trials *t, int top, int left, int height, int width)
{
    dl_draw_text(w, top, left, dl_color(DL_COLOR_HEADER),
                 "importance (|Spearman| numbers, eta choices)");
    int namew = 12, barw = width - namew - 8;
    for (int j = 0; j < t->nparams && j + 1 < height; j++) {
        int y = top + 1 + j;
        dl_draw_text(w, y, left, dl_color(DL_COLOR_DEFAULT), "%-*.*s", namew, namew, t->param[j]);
        if (!isfinite(t->importance[j])) {
            dl_draw_text(w, y, left + namew + 1, dl_color(DL_COLOR_DIM), "needs 3 complete trials");
            continue;
        }
        int fill = barw > 0 ? (int)lround(t->importance[j] * barw) : 0;
        for (int c = 0; c < fill; c++)
            dl_draw_text(w, y, left + namew + 1 + c, dl_color(DL_COLOR_LOSS), "%s",
                         dl_glyphs_unicode() ? "\u2588" : "#");
        dl_draw_text(w, y, left + namew + 2 + (barw > 0 ? barw : 0), dl_color(DL_COLOR_DIM), "%.2f",
                     t->importance[j]);
    }
}

/* A complete trial's objective in [0, 1], 1 the best end; NaN otherwise. */
static double goodness(const dl_ui_trials *t, const dl_ui_trial *r, double lo, double hi)
{
    if (strcmp(r->state, "complete") || !isfinite(r->value))
        return NAN;
    double g = hi > lo ? (r->value - lo) / (hi - lo) : 0.5;
    return t->maximize ? g : 1 - g;
}

/* Its colour and mark by the objective's tercile; the best stands out. */
static void trial_style(const dl_ui_trials *t, const dl_ui_trial *r, double g, int *role,
                        char *mark)
{
    if (r->number == t->best_number)
        *role = DL_COLOR_WARN, *mark = '#';
    else if (g >= 2.0 / 3)
        *role = DL_COLOR_OK, *mark = '*';
    else if (g >= 1.0 / 3)
        *role = DL_COLOR_DEFAULT, *mark = '+';
    else
        *role = DL_COLOR_DIM, *mark = '.';
}

static void value_range(const dl_ui_trials *t, double *lo, double *hi)
{
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->rows[i].state, "complete") && isfinite(t->rows[i].value))
            *lo = fmin(*lo, t->rows[i].value), *hi = fmax(*hi, t->rows[i].value);
}

/* Trials in the order they are drawn: worst first, so better lines lie on
 * top and the best last. */
static int by_goodness(const dl_ui_trials *t, double lo, double hi, int *idx)
{
    int n = 0;
    for (int i = 0; i < t->n; i++)
        if (isfinite(goodness(t, &t->rows[i], lo, hi)))
            idx[n++] = i;
    for (int a = 1; a < n; a++) /* insertion sort: a few hundred trials */
        for (int b = a; b > 0; b--) {
            const dl_ui_trial *x = &t->rows[idx[b - 1]], *y = &t->rows[idx[b]];
            double gx = x->number == t->best_number ? 2 : goodness(t, x, lo, hi);
            double gy = y->number == t->best_number ? 2 : goodness(t, y, lo, hi);
            if (gx <= gy)
                break;
            int tmp = idx[b];
            idx[b] = idx[b - 1], idx[b - 1] = tmp;
        }
    return n;
}

/* Parallel coordinates: an axis per parameter and one for the objective,
 * a line per complete trial coloured by its objective, the best on top. */
static void parallel(WINDOW *w, const dl_ui_trials *t, int top, int height, int width)
{
    int naxes = t->nparams + 1, ch = height - 3, cw = width - 2;
    if (naxes < 2 || ch < 3 || cw < 4 * naxes) {
        dl_draw_text(w, top + 1, 2, dl_color(DL_COLOR_DIM), "too small for %d axes", naxes);
        return;
    }
    double lo, hi;
    value_range(t, &lo, &hi);
    static int idx[DL_UI_TRIALS];
    int n = isfinite(lo) ? by_goodness(t, lo, hi, idx) : 0;
    dl_canvas c;
    if (!dl_canvas_init(&c, cw, ch, !dl_colors_enabled())) {
        dl_canvas_done(&c);
        return;
    }
    int dw = c.cw * c.dx - 1, dh = c.ch * c.dy - 1;
    for (int k = 0; k < n; k++) {
        const dl_ui_trial *r = &t->rows[idx[k]];
        double g = goodness(t, r, lo, hi);
        int role;
        char mark;
        trial_style(t, r, g, &role, &mark);
        int px = -1, py = -1;
        for (int a = 0; a < naxes; a++) {
            double p = a < t->nparams ? r->pv[a] : (hi > lo ? (r->value - lo) / (hi - lo) : 0.5);
            if (!isfinite(p))
                continue;
            int x = (int)lround((double)a / (naxes - 1) * dw), y = (int)lround((1 - p) * dh);
            if (px >= 0)
                dl_canvas_line(&c, px, py, x, y, role, mark);
            px = x, py = y;
        }
    }
    dl_canvas_draw(&c, w, top + 1, 1);
    dl_canvas_done(&c);
    for (int a = 0; a < naxes; a++) { /* the axes' names and ends over the lines */
        int x = 1 + (int)lround((double)a / (naxes - 1) * (cw - 1));
        int lw = cw / naxes - 1, lx = a == naxes - 1 ? x - lw + 1 : a ? x - lw / 2 : x;
        char top_l[20], bot_l[20];
        const char *name = a < t->nparams ? t->param[a] : "objective";
        snprintf(top_l, sizeof top_l, "%s", a < t->nparams ? t->phi[a] : "");
        snprintf(bot_l, sizeof bot_l, "%s", a < t->nparams ? t->plo[a] : "");
        if (a == t->nparams && isfinite(lo))
            snprintf(top_l, sizeof top_l, "%.4g", hi), snprintf(bot_l, sizeof bot_l, "%.4g", lo);
        dl_draw_text(w, top, lx, dl_color(DL_COLOR_AXIS), "%.*s", lw, top_l);
        dl_draw_text(w, top + ch + 1, lx, dl_color(DL_COLOR_AXIS), "%.*s", lw, bot_l);
        dl_draw_text(w, top + ch + 2, lx, dl_color(DL_COLOR_TITLE), "%.*s", lw, name);
    }
}

/* One parameter (x, in its search space) against the objective (y). */
static void scatter(WINDOW *w, const dl_ui_trials *t, int top, int height, int width)
{
    int j = t->nparams ? t->sparam % t->nparams : 0, ch = height - 2, cw = width - 10;
    if (!t->nparams || ch < 3 || cw < 10)
        return;
    double lo, hi;
    value_range(t, &lo, &hi);
    if (!isfinite(lo)) {
        dl_draw_text(w, top + 1, 2, dl_color(DL_COLOR_DIM), "no complete trial yet");
        return;
    }
    if (hi - lo < 1e-12)
        hi += 1e-3, lo -= 1e-3;
    static int idx[DL_UI_TRIALS];
    int n = by_goodness(t, lo, hi, idx);
    dl_canvas c;
    if (!dl_canvas_init(&c, cw, ch, !dl_colors_enabled())) {
        dl_canvas_done(&c);
        return;
    }
    for (int k = 0; k < n; k++) {
        const dl_ui_trial *r = &t->rows[idx[k]];
        if (!isfinite(r->pv[j]))
            continue;
        int role;
        char mark;
        trial_style(t, r, goodness(t, r, lo, hi), &role, &mark);
        int x = (int)lround(r->pv[j] * (c.cw * c.dx - 1));
        int y = (int)lround((hi - r->value) / (hi - lo) * (c.ch * c.dy - 1));
        dl_canvas_plot(&c, x, y, role, mark);
        if (c.dx == 2)
            dl_canvas_plot(&c, x + 1, y, role, mark); /* a dot two wide reads better */
    }
    dl_canvas_draw(&c, w, top, 10);
    dl_canvas_done(&c);
    dl_draw_text(w, top, 1, dl_color(DL_COLOR_AXIS), "%8.4g", hi);
    dl_draw_text(w, top + ch - 1, 1, dl_color(DL_COLOR_AXIS), "%8.4g", lo);
    dl_draw_text(w, top + ch, 10, dl_color(DL_COLOR_AXIS), "%s", t->plo[j]);
    dl_draw_text(w, top + ch, 10 + cw / 2 - (int)strlen(t->param[j]) / 2, dl_color(DL_COLOR_TITLE),
                 "%s", t->param[j]);
    dl_draw_text(w, top + ch, 10 + cw - (int)strlen(t->phi[j]), dl_color(DL_COLOR_AXIS), "%s",
                 t->phi[j]);
}

void dl_view_trials(WINDOW *w, const dl_screen *s, const dl_view_state *v)
{
    const dl_ui_trials *t = &s->trials;
    werase(w);
    char title[160];
    snprintf(title, sizeof title, "7 Trials%s%s%s", t->have ? " of " : "", t->have ? t->name : "",
             v->filter[0] ? "  filter /" : "");
    if (v->filter[0])
        snprintf(title + strlen(title), sizeof title - strlen(title), "%s", v->filter);
    dl_draw_frame(w, title, v->focused);
    int rows = getmaxy(w) - 2, cols = getmaxx(w) - 2;
    if (rows < 4 || cols < 40)
        return;
    if (!t->have) {
        dl_draw_text(w, 1, 2, dl_color(DL_COLOR_DIM), "%s",
                     t->note[0] ? t->note : "no study: dlbench tune SCRIPT makes one");
        return;
    }
    char best[64] = "none complete yet";
    if (t->best_number >= 0)
        snprintf(best, sizeof best, "#%d = %.6g", t->best_number, t->best_value);
    dl_draw_text(w, 1, 1, dl_color(DL_COLOR_DEFAULT),
                 "%s, %d trials: %d complete, %d pruned, %d failed, %d running; best %s",
                 t->maximize ? "maximize" : "minimize", t->n, t->ncomplete, t->npruned, t->nfailed,
                 t->nrunning, best);
    if (t->view == 1 || t->view == 2) {
        dl_draw_text(w, 2, 1, dl_color(DL_COLOR_DIM), "%s",
                     t->view == 1 ? "parallel coordinates: a line a trial; # best, * top third, + "
                                    "middle, . bottom (v: next view)"
                                  : "objective against a parameter (p: next parameter, v: next "
                                    "view); # best");
        if (t->view == 1)
            parallel(w, t, 3, rows - 2, cols);
        else
            scatter(w, t, 3, rows - 2, cols);
        return;
    }
    int imp_h = t->nparams + 1;
    if (cols >= 120) { /* table left, charts right */
        int tw = cols * 11 / 20, rw = cols - tw - 2;
        table(w, t, v, 2, 1, rows - 1, tw);
        int ch = rows - 1 - imp_h - 1;
        best_chart(w, t, 2, tw + 3, ch, rw);
        importance(w, t, 2 + ch + 1, tw + 3, imp_h, rw);
    } else { /* stacked: table, then the chart and the bars */
        int ch = rows >= 24 ? 8 : 6;
        int th = rows - 1 - ch - imp_h;
        if (th < 3)
            th = 3, ch = rows - 1 - th - imp_h;
        table(w, t, v, 2, 1, th, cols);
        if (ch >= 4)
            best_chart(w, t, 2 + th, 1, ch, cols - 1);
        importance(w, t, 2 + th + (ch >= 4 ? ch : 0), 1, imp_h, cols - 1);
    }
}
