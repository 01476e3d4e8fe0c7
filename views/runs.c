/* runs.c - the runs screen: the table (select, sort, filter), a run's page, the comparison of the selected runs */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "views/colors.h"
#include "views/views.h"

/* The last drawn value of a series, for the legend. */
static double last_value(const dl_ui_series *s) { return s->n ? s->y[s->n - 1] : NAN; }

/* The bottom line: the screen's note, else what the keys do here. */
static void footer(WINDOW *w, const dl_ui_runs *u, int y, const char *keys)
{
    if (u->note[0])
        dl_draw_text(w, y, 1, dl_color(DL_COLOR_WARN), "%s", u->note);
    else
        dl_draw_text(w, y, 1, dl_color(DL_COLOR_DIM), "%s", keys);
}

static void table_row(WINDOW *w, int y, int cols, int fw, int wide, const dl_ui_run *r, int cursor,
                      const char *cur)
{
    char acc[16] = "-", loss[16] = "-", wall[16] = "";
    if (isfinite(r->val_acc))
        snprintf(acc, sizeof acc, "%.4f", r->val_acc);
    if (isfinite(r->val_loss))
        snprintf(loss, sizeof loss, "%.4f", r->val_loss);
    int role = !strcmp(r->status, "failed")    ? DL_COLOR_ERROR
               : !strcmp(r->status, "running") ? DL_COLOR_OK
               : !strcmp(r->status, "stopped") ? DL_COLOR_WARN
                                               : DL_COLOR_DEFAULT;
    if (cur[0] && !strcmp(r->folder, cur))
        role = DL_COLOR_NOTE; /* the workbench's own run */
    int attr = cursor ? dl_color(DL_COLOR_SELECT) : dl_color(role);
    if (cursor) {
        wattrset(w, attr);
        mvwhline(w, y, 1, ' ', cols);
    }
    char rest[320] = "";
    if (wide)
        dl_fmt_duration(wall, sizeof wall, r->wall_s);
    snprintf(rest, sizeof rest, "%s%s%s  %s%s%s", wide ? " " : "", wall, wide ? " " : "",
             r->tags[0] ? "#" : "", r->tags, r->tags[0] ? " " : "");
    snprintf(rest + strlen(rest), sizeof rest - strlen(rest), "%s", r->varying);
    /* narrow: the folder without its time stamp, "name-hash8" */
    const char *name = r->folder;
    if (!wide && strlen(name) > 16 && name[8] == '-' && name[15] == '-')
        name += 16;
    dl_draw_text(w, y, 3, attr, "%-*.*s %-9s %7ld %8s %8s%s", fw, fw, name, r->status, r->steps,
                 acc, loss, rest);
    if (cursor)
        dl_draw_text(w, y, 2, attr, ">");
    if (r->slot >= 0)
        dl_draw_text(w, y, 1, dl_color(dl_color_run(r->slot)) | (cursor ? A_REVERSE : 0), "%c",
                     dl_color_run_mark(r->slot));
}

static void draw_table(WINDOW *w, const dl_screen *s, const dl_view_state *v, int rows, int cols)
{
    const dl_ui_runs *u = &s->runs;
    int wide = cols >= 100;
    int fw = wide ? 38 : 22;
    char hdr[256];
    snprintf(hdr, sizeof hdr, "  %-*s %-9s %7s %8s %8s%s", fw, "run", "status", "steps", "val_acc",
             "val_loss", wide ? "      wall  #tags what differs" : "  #tags differs");
    wattrset(w, dl_color(DL_COLOR_HEADER));
    mvwhline(w, 1, 1, ' ', cols);
    dl_draw_text(w, 1, 1, dl_color(DL_COLOR_HEADER), "%s", hdr);
    if (u->nshown == 0) {
        dl_draw_text(w, 2, 2, dl_color(DL_COLOR_DIM),
                     u->n ? "no run matches the filter" : "no runs yet");
    }
    const char *run_dir = s->tele->run.run_dir;
    const char *cur = strrchr(run_dir, '/');
    cur = cur ? cur + 1 : run_dir;
    int body = rows - 2; /* header above, footer below */
    int first = u->cursor >= body ? u->cursor - body + 1 : 0;
    (void)v;
    for (int i = first, y = 2; i < u->nshown && y <= rows - 1; i++, y++)
        table_row(w, y, cols, fw, wide, &u->rows[u->shown[i]], i == u->cursor, cur);
    footer(w, u, rows,
           "Spc select  Enter open  c compare  < > sort  / filter  t tag  u clear  ? keys");
}

/* Legend entries packed into lines from y; returns the next free line. */
static int legend(WINDOW *w, const dl_ui_runs *u, int y, int cols, int max_lines)
{
    int x = 2, lines = 1;
    for (int k = 0; k < u->nseries; k++) {
        const dl_ui_series *se = &u->series[k];
        char val[24] = "-", item[120];
        if (isfinite(last_value(se)))
            snprintf(val, sizeof val, "%.4g", last_value(se));
        char letter[4] = "";
        for (int j = 0; j < u->ncols && u->mode == DL_UI_COMPARE && !u->group[0]; j++)
            if (u->colslot[j] == se->slot)
                snprintf(letter, sizeof letter, "%c ", 'A' + j);
        snprintf(item, sizeof item, "%c %s%s%s %s",
                 se->slot >= 0 ? dl_color_run_mark(se->slot) : '.', letter, se->label,
                 se->lo ? " +band" : "", val);
        int len = (int)strlen(item) + 2;
        if (x > 2 && x + len > cols) {
            if (lines == max_lines)
                break;
            y++, lines++, x = 2;
        }
        dl_draw_text(w, y, x, dl_color(se->slot >= 0 ? dl_color_run(se->slot) : DL_COLOR_DIM), "%s",
                     item);
        x += len;
    }
    return y + 1;
}

static void draw_detail(WINDOW *w, const dl_screen *s, const dl_view_state *v, int rows, int cols)
{
    const dl_ui_runs *u = &s->runs;
    int nl = u->nlines < rows / 2 ? u->nlines : rows / 2;
    int y = 1;
    for (int i = 0; i < nl; i++, y++) {
        int note = !strncmp(u->lines[i], "  note:", 7); /* the user's notes stand out */
        dl_draw_text(w, y, 2, dl_color(note ? DL_COLOR_NOTE : DL_COLOR_DEFAULT), "%s", u->lines[i]);
    }
    y = legend(w, u, y, cols, 1);
    int h = rows - y; /* the footer below */
    if (h >= 4)
        dl_view_overlay(w, y, 1, h, cols, u->series, u->nseries, dl_ui_smooth_weights[u->smooth],
                        v->log_scale, dl_ui_xaxis_name(u->xaxis), !dl_colors_enabled());
    footer(w, u, rows, "Esc back  Spc select  c compare  x x-axis  S smooth  l log");
}

/* One cell of the diff table: the value, and its delta against the
 * baseline when both are numbers and there is room. */
static void diff_cell(char *buf, size_t size, const dl_ui_diff *d, int j, int base, int width)
{
    snprintf(buf, size, "%s", d->text[j]);
    if (j == base || !isfinite(d->num[j]) || !isfinite(d->num[base]))
        return;
    char delta[32];
    double dd = d->num[j] - d->num[base];
    snprintf(delta, sizeof delta, " (%+.3g)", dd);
    if ((int)(strlen(buf) + strlen(delta)) < width)
        snprintf(buf + strlen(buf), size - strlen(buf), "%s", delta);
}

static void draw_diff(WINDOW *w, const dl_ui_runs *u, int y, int last, int cols)
{
    if (y > last)
        return;
    int kw = 16, cw = u->ncols ? (cols - kw - 1) / u->ncols : cols;
    cw = cw > 26 ? 26 : cw;
    wattrset(w, dl_color(DL_COLOR_HEADER));
    mvwhline(w, y, 1, ' ', cols);
    dl_draw_text(w, y, 2, dl_color(DL_COLOR_HEADER), "%-*s", kw - 1, "differs");
    for (int j = 0; j < u->ncols && kw + 1 + j * cw + 2 < cols; j++)
        dl_draw_text(w, y, kw + 1 + j * cw, dl_color(DL_COLOR_HEADER), "%c%s", 'A' + j,
                     j == u->baseline ? " baseline" : "");
    y++;
    int shown_metric = 0;
    for (int i = 0; i < u->ndiff && y <= last; i++, y++) {
        const dl_ui_diff *d = &u->diff[i];
        if (d->metric && !shown_metric) {
            shown_metric = 1;
            dl_draw_text(w, y++, 2, dl_color(DL_COLOR_DIM), "final metrics");
            if (y > last)
                break;
        }
        dl_draw_text(w, y, 2, dl_color(d->metric ? DL_COLOR_DEFAULT : DL_COLOR_TITLE), "%-*.*s",
                     kw - 1, kw - 1, d->key);
        for (int j = 0; j < u->ncols; j++) {
            char cell[64];
            diff_cell(cell, sizeof cell, d, j, u->baseline, cw - 1);
            int role = j == u->baseline ? DL_COLOR_DEFAULT : dl_color_run(u->colslot[j]);
            dl_draw_text(w, y, kw + 1 + j * cw, dl_color(role), "%-*.*s", cw - 1, cw - 1, cell);
        }
    }
    if (y <= last)
        dl_draw_text(w, y, 2, dl_color(DL_COLOR_DIM), "(%d hyperparameter%s the same in all)",
                     u->nsame, u->nsame == 1 ? "" : "s");
}

static void draw_compare(WINDOW *w, const dl_screen *s, const dl_view_state *v, int rows, int cols)
{
    const dl_ui_runs *u = &s->runs;
    char opts[200], sm[16];
    snprintf(sm, sizeof sm, u->smooth ? "%.2f" : "off", dl_ui_smooth_weights[u->smooth]);
    snprintf(opts, sizeof opts, "m %s  x %s  S smooth %s  G group %s  b base %c%s", u->metric,
             dl_ui_xaxis_name(u->xaxis), sm, u->group[0] ? u->group : "off", 'A' + u->baseline,
             v->log_scale ? "  log" : "");
    dl_draw_text(w, 1, 2, dl_color(DL_COLOR_TITLE), "%s", opts);
    int y = legend(w, u, 2, cols, u->ncols > 4 ? 3 : 2);
    if (u->group[0] && y < rows) { /* the runs behind the groups */
        int x = 2;
        for (int j = 0; j < u->ncols; j++) {
            char item[80];
            snprintf(item, sizeof item, "%c %c %s", 'A' + j, dl_color_run_mark(u->colslot[j]),
                     u->col[j]);
            if (x + (int)strlen(item) + 2 > cols)
                break;
            dl_draw_text(w, y, x, dl_color(DL_COLOR_DIM), "%s", item);
            x += (int)strlen(item) + 2;
        }
        y++;
    }
    int avail = rows - y; /* the footer below */
    int hc = u->ndiff ? avail * 11 / 20 : avail;
    if (hc < 5)
        hc = avail < 5 ? avail : 5;
    if (hc >= 4)
        dl_view_overlay(w, y, 1, hc, cols, u->series, u->nseries, dl_ui_smooth_weights[u->smooth],
                        v->log_scale, dl_ui_xaxis_name(u->xaxis), !dl_colors_enabled());
    draw_diff(w, u, y + hc, rows - 1, cols);
    footer(w, u, rows, "Esc back  m metric  x axis  S smooth  G group  b baseline  l log");
}

void dl_view_runs(WINDOW *w, const dl_screen *s, const dl_view_state *v)
{
    const dl_ui_runs *u = &s->runs;
    werase(w);
    char title[400], sort[64] = "";
    if (u->sort[0])
        snprintf(sort, sizeof sort, "  sort %s%s", u->sort, u->desc ? " desc" : "");
    if (u->mode == DL_UI_DETAIL)
        snprintf(title, sizeof title, "5 Run %s", u->detail);
    else if (u->mode == DL_UI_COMPARE)
        snprintf(title, sizeof title, "5 Runs compared: %d", u->ncols);
    else
        snprintf(title, sizeof title, "5 Runs in %s: %d%s%s%s  %d selected",
                 u->dir[0] ? u->dir : "runs", u->nshown, sort, v->filter[0] ? "  filter /" : "",
                 v->filter, u->nsel);
    dl_draw_frame(w, title, v->focused);
    int rows = getmaxy(w) - 2, cols = getmaxx(w) - 2;
    if (rows < 4 || cols < 30)
        return;
    if (u->mode == DL_UI_DETAIL)
        draw_detail(w, s, v, rows, cols);
    else if (u->mode == DL_UI_COMPARE)
        draw_compare(w, s, v, rows, cols);
    else
        draw_table(w, s, v, rows, cols);
}
