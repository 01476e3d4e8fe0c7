/* trials.c - the trials screen (F4): a study's trials, the best value so far, parameter importance */
#include <math.h>
#include <stdio.h>
#include <string.h>

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
