/* chart.c - the loss chart: train/validation loss and accuracy in braille dots (ASCII fallback) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "views/canvas.h"
#include "views/colors.h"
#include "views/views.h"

typedef struct axis {
    double x0, x1, y0, y1;
    int log;
} axis;

static double ty(const axis *a, double v) { return a->log ? log10(v > 1e-12 ? v : 1e-12) : v; }

static int to_x(const dl_canvas *c, const axis *a, double x)
{
    double w = c->cw * c->dx - 1;
    return a->x1 > a->x0 ? (int)lround((x - a->x0) / (a->x1 - a->x0) * w) : 0;
}

static int to_y(const dl_canvas *c, const axis *a, double y)
{
    double h = c->ch * c->dy - 1;
    double t = ty(a, y), lo = ty(a, a->y0), hi = ty(a, a->y1);
    return hi > lo ? (int)lround((hi - t) / (hi - lo) * h) : (int)(h / 2);
}

/* A curve on the step axis: a series, with epoch series scaled by the
 * steps of an epoch (x = epoch k ends at step k * steps_per_epoch). */
typedef struct curve {
    const dl_tele_series *s;
    double xscale;
} curve;

static curve curve_of(const dl_telemetry_snapshot *t, const char *name, int per_epoch)
{
    curve c = {dl_telemetry_series(t, name), 1};
    if (per_epoch) {
        c.xscale = (double)t->run.steps_per_epoch;
        if (c.xscale <= 0)
            c.s = NULL; /* the epoch's length is unknown yet: no place on the axis */
    }
    return c;
}

static double cx(const curve *c, int i) { return c->s->x[i] * c->xscale; }

/* The epoch at which validation loss was lowest, when it has risen since
 * while training loss kept falling: where overfitting starts. 0: none. */
static int overfit_epoch(const dl_telemetry_snapshot *t, long *step)
{
    const dl_tele_series *vl = dl_telemetry_series(t, "val_loss");
    const dl_tele_series *tl = dl_telemetry_series(t, "train_loss");
    if (!vl || !tl || vl->n < 3 || tl->n < vl->n)
        return 0;
    int best = -1;
    for (int i = 0; i < vl->n; i++)
        if (isfinite(vl->y[i]) && (best < 0 || vl->y[i] < vl->y[best]))
            best = i;
    int last = vl->n - 1;
    if (best < 0 || best >= last - 1)
        return 0;
    /* train_loss has a point for every epoch val_loss has (same x) */
    double tb = NAN, tlast = tl->y[tl->n - 1];
    for (int i = 0; i < tl->n; i++)
        if (tl->x[i] == vl->x[best])
            tb = tl->y[i];
    if (!(vl->y[last] > vl->y[best] * 1.02) || !(tlast < tb))
        return 0;
    *step = (long)(vl->x[best] * (double)t->run.steps_per_epoch);
    return (int)vl->x[best];
}

static int usable(double y, int acc, int logy)
{
    return isfinite(y) && !(acc && y < 0) && !(logy && y <= 0);
}

/* The axes of a panel: x from the window (v->window steps, else all), y
 * over the usable points in it. Returns whether there is any. */
static int fit_axis(axis *a, const curve cs[2], const dl_view_state *v, int acc)
{
    double last = 0;
    for (int k = 0; k < 2; k++)
        if (cs[k].s && cs[k].s->n)
            last = fmax(last, cx(&cs[k], cs[k].s->n - 1));
    *a = (axis){0, last > 1 ? last : 1, INFINITY, -INFINITY, !acc && v->log_scale};
    if (v->window > 0 && last - (double)v->window > 0)
        a->x0 = last - (double)v->window;
    int any = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; cs[k].s && i < cs[k].s->n; i++) {
            double y = cs[k].s->y[i];
            if (cx(&cs[k], i) < a->x0 || !usable(y, acc, a->log))
                continue;
            a->y0 = fmin(a->y0, y), a->y1 = fmax(a->y1, y), any = 1;
        }
    return any;
}

/* A margin around the y range: a flat curve gets one, losses stay >= 0. */
static void pad_axis(axis *a)
{
    if (a->y1 - a->y0 < 1e-9) {
        double m = fabs(a->y0) * 0.05 + 1e-3;
        a->y0 -= m, a->y1 += m;
        if (a->log && a->y0 <= 0)
            a->y0 = a->y1 / 2;
    } else if (!a->log) {
        double m = (a->y1 - a->y0) * 0.05;
        a->y0 = a->y0 >= 0 && a->y0 - m < 0 ? 0 : a->y0 - m; /* losses stay >= 0 */
        a->y1 += m;
    }
}

/* y labels (top, bottom, middle when there is room) left of the axis line,
 * x labels (first step, "step N") on the last row. */
static void draw_labels(WINDOW *w, const axis *a, int top, int ch, int left, int width, int label_w,
                        int acc)
{
    char lab[16];
    snprintf(lab, sizeof lab, acc ? "%6.3f" : "%6.3g", a->y1);
    dl_draw_text(w, top, left, dl_color(DL_COLOR_AXIS), "%s", lab);
    snprintf(lab, sizeof lab, acc ? "%6.3f" : "%6.3g", a->y0);
    dl_draw_text(w, top + ch - 1, left, dl_color(DL_COLOR_AXIS), "%s", lab);
    if (ch >= 6) {
        double mid = a->log ? sqrt(a->y0 * a->y1) : (a->y0 + a->y1) / 2;
        snprintf(lab, sizeof lab, acc ? "%6.3f" : "%6.3g", mid);
        dl_draw_text(w, top + ch / 2, left, dl_color(DL_COLOR_AXIS), "%s", lab);
    }
    dl_draw_text(w, top + ch, left + label_w, dl_color(DL_COLOR_AXIS), "%.0f", a->x0);
    char xr[32];
    snprintf(xr, sizeof xr, "step %.0f", a->x1);
    dl_draw_text(w, top + ch, left + width - (int)strlen(xr) - 1, dl_color(DL_COLOR_AXIS), "%s",
                 xr);
}

/* Per-step points joined by lines (Braille; ASCII: points only). */
static void plot_steps(dl_canvas *c, const axis *a, const curve *cs, int acc)
{
    int px = -1, py = -1;
    int role = acc ? DL_COLOR_ACC : DL_COLOR_LOSS;
    for (int i = 0; cs->s && i < cs->s->n; i++) {
        double y = cs->s->y[i];
        if (cx(cs, i) < a->x0 || !usable(y, acc, a->log))
            continue;
        int x = to_x(c, a, cx(cs, i)), yy = to_y(c, a, y);
        if (px >= 0 && c->dx == 2)
            dl_canvas_line(c, px, py, x, yy, role, '.');
        else
            dl_canvas_plot(c, x, yy, role, '.');
        px = x, py = yy;
    }
}

/* Epoch points as blobs joined by lines. */
static void plot_epochs(dl_canvas *c, const axis *a, const curve *cs, int acc)
{
    int px = -1, py = -1;
    int role = acc ? DL_COLOR_VAL_ACC : DL_COLOR_VAL_LOSS;
    for (int pass = 0; pass < (c->dx == 1 ? 2 : 1); pass++) {
        /* ASCII: epoch points drawn again last so they stay visible */
        for (int i = 0; cs->s && i < cs->s->n; i++) {
            double y = cs->s->y[i];
            if (cx(cs, i) < a->x0 || !usable(y, acc, a->log))
                continue;
            int x = to_x(c, a, cx(cs, i)), yy = to_y(c, a, y);
            if (pass == 1) {
                dl_canvas_plot(c, x, yy, role, 'o');
                continue;
            }
            if (px >= 0)
                dl_canvas_line(c, px, py, x, yy, role, c->dx == 2 ? 'o' : '-');
            dl_canvas_plot(c, x, yy, role, 'o');
            if (c->dx == 2)
                dl_canvas_plot(c, x + 1, yy, role, 'o'), dl_canvas_plot(c, x, yy + 1, role, 'o'),
                    dl_canvas_plot(c, x + 1, yy + 1, role, 'o');
            px = x, py = yy;
        }
    }
}

static void draw_panel(WINDOW *w, const dl_telemetry_snapshot *t, const dl_view_state *v, int top,
                       int height, int left, int width, int acc)
{
    const int label_w = 7;
    int cw = width - label_w - 1, ch = height - 1; /* last row: x labels */
    if (cw < 4 || ch < 2)
        return;
    curve cs[2] = {curve_of(t, acc ? "acc" : "loss", 0),
                   curve_of(t, acc ? "val_acc" : "val_loss", 1)};
    axis a;
    int any = fit_axis(&a, cs, v, acc);
    wattrset(w, dl_color(DL_COLOR_AXIS));
    for (int r = 0; r < ch; r++)
        mvwaddch(w, top + r, left + label_w, dl_glyphs_unicode() ? ACS_VLINE : '|');
    if (!any) {
        dl_draw_text(w, top + ch / 2, left + label_w + 2, dl_color(DL_COLOR_DIM),
                     acc ? "accuracy: no points yet" : "loss: no points yet (r starts)");
        return;
    }
    pad_axis(&a);
    draw_labels(w, &a, top, ch, left, width, label_w, acc);

    dl_canvas c;
    if (!dl_canvas_init(&c, cw, ch, 0)) {
        dl_canvas_done(&c);
        return;
    }
    /* overfitting marker: a dotted vertical line */
    long ostep;
    int oep = !acc ? overfit_epoch(t, &ostep) : 0;
    if (oep && (double)ostep >= a.x0) {
        int x = to_x(&c, &a, (double)ostep);
        for (int y = 0; y < ch * c.dy; y += 2)
            dl_canvas_plot(&c, x, y, DL_COLOR_WARN, ':');
    }
    plot_steps(&c, &a, &cs[0], acc);
    plot_epochs(&c, &a, &cs[1], acc);
    dl_canvas_draw(&c, w, top, left + label_w + 1);
    dl_canvas_done(&c);
}

static double last_y(const dl_telemetry_snapshot *t, const char *name)
{
    const dl_tele_series *s = dl_telemetry_series(t, name);
    return s && s->n ? s->y[s->n - 1] : NAN;
}

/* A legend value, or "-" before the series has a point. */
static void value_text(char *buf, size_t size, const char *fmt, double v)
{
    if (isnan(v))
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, fmt, v);
}

void dl_view_chart(WINDOW *w, const dl_screen *scr, const dl_view_state *v)
{
    const dl_telemetry_snapshot *t = scr->tele;
    werase(w);
    char title[96];
    snprintf(title, sizeof title, "1 Loss%s", v->log_scale ? " (log)" : "");
    if (v->window > 0)
        snprintf(title, sizeof title, "1 Loss%s, last %ld steps", v->log_scale ? " (log)" : "",
                 v->window);
    dl_draw_frame(w, title, v->focused);
    int rows = getmaxy(w) - 2, cols = getmaxx(w) - 2;
    if (rows < 3 || cols < 16)
        return;
    /* legend */
    int x = 2;
    const char *dash = dl_glyphs_unicode() ? "\u2501" : "-";
    char buf[64];
    char v1[16], v2[16], v3[16], v4[16];
    value_text(v1, sizeof v1, "%.4g", last_y(t, "loss"));
    value_text(v2, sizeof v2, "%.4g", last_y(t, "val_loss"));
    value_text(v3, sizeof v3, "%.3f", last_y(t, "acc"));
    value_text(v4, sizeof v4, "%.3f", last_y(t, "val_acc"));
    snprintf(buf, sizeof buf, "%s loss %s ", dash, v1);
    dl_draw_text(w, 1, x, dl_color(DL_COLOR_LOSS), "%s", buf);
    x += (int)strlen(buf) - (dl_glyphs_unicode() ? 2 : 0);
    snprintf(buf, sizeof buf, "o val_loss %s ", v2);
    dl_draw_text(w, 1, x, dl_color(DL_COLOR_VAL_LOSS), "%s", buf);
    x += (int)strlen(buf);
    snprintf(buf, sizeof buf, "%s acc %s ", dash, v3);
    dl_draw_text(w, 1, x, dl_color(DL_COLOR_ACC), "%s", buf);
    x += (int)strlen(buf) - (dl_glyphs_unicode() ? 2 : 0);
    snprintf(buf, sizeof buf, "o val_acc %s", v4);
    dl_draw_text(w, 1, x, dl_color(DL_COLOR_VAL_ACC), "%s", buf);
    long ostep;
    int oep = overfit_epoch(t, &ostep);
    int top = 2, h = rows - 1;
    if (oep && h > 4) {
        dl_draw_text(w, top, 2, dl_color(DL_COLOR_WARN),
                     ": overfitting: val_loss lowest at epoch %d, rising since", oep);
        top++, h--;
    }
    if (h >= 12) {
        int hl = h * 3 / 5;
        draw_panel(w, t, v, top, hl, 1, cols, 0);
        draw_panel(w, t, v, top + hl, h - hl, 1, cols, 1);
    } else {
        draw_panel(w, t, v, top, h, 1, cols, 0);
    }
}
