/* overlay.c - the runs' overlay chart: several series on one axis, smoothed, with min-max bands */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "views/canvas.h"
#include "views/colors.h"
#include "views/views.h"

void dl_view_smooth(const double *y, int n, double a, double *out)
{
    double m = 0, wsum = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(y[i]) || a <= 0) {
            out[i] = y[i];
            continue;
        }
        m = a * m + (1 - a) * y[i];
        wsum = a * wsum + (1 - a); /* 1 - a^k: the debiasing factor */
        out[i] = m / wsum;
    }
}

typedef struct range {
    double x0, x1, y0, y1;
    int log;
} range;

static int usable(double y, int logy) { return isfinite(y) && !(logy && y <= 0); }

static double ty(const range *r, double v) { return r->log ? log10(v > 1e-300 ? v : 1e-300) : v; }

static int to_x(const dl_canvas *c, const range *r, double x)
{
    double w = c->cw * c->dx - 1;
    return r->x1 > r->x0 ? (int)lround((x - r->x0) / (r->x1 - r->x0) * w) : 0;
}

static int to_y(const dl_canvas *c, const range *r, double y)
{
    double h = c->ch * c->dy - 1, t = ty(r, y), lo = ty(r, r->y0), hi = ty(r, r->y1);
    return hi > lo ? (int)lround((hi - t) / (hi - lo) * h) : (int)(h / 2);
}

/* The range over every usable point (bands included); 0 when there is none. */
static int fit(range *r, const dl_ui_series *s, int n, int logy)
{
    *r = (range){INFINITY, -INFINITY, INFINITY, -INFINITY, logy};
    int any = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < s[k].n; i++) {
            double ys[3] = {s[k].y[i], s[k].lo ? s[k].lo[i] : NAN, s[k].hi ? s[k].hi[i] : NAN};
            for (int j = 0; j < 3; j++) {
                if (!usable(ys[j], logy) || !isfinite(s[k].x[i]))
                    continue;
                r->x0 = fmin(r->x0, s[k].x[i]), r->x1 = fmax(r->x1, s[k].x[i]);
                r->y0 = fmin(r->y0, ys[j]), r->y1 = fmax(r->y1, ys[j]), any = 1;
            }
        }
    if (!any)
        return 0;
    if (r->y1 - r->y0 < 1e-12) {
        double m = fabs(r->y0) * 0.05 + 1e-3;
        r->y0 = logy ? r->y0 / 2 : r->y0 - m, r->y1 += m;
    } else if (!logy) {
        double m = (r->y1 - r->y0) * 0.05;
        r->y0 = r->y0 >= 0 && r->y0 - m < 0 ? 0 : r->y0 - m;
        r->y1 += m;
    }
    return 1;
}

/* A series' points joined by lines. */
static void polyline(dl_canvas *c, const range *r, const double *x, const double *y, int n,
                     int role, char mark)
{
    int px = -1, py = -1;
    for (int i = 0; i < n; i++) {
        if (!usable(y[i], r->log) || !isfinite(x[i]))
            continue;
        int cx = to_x(c, r, x[i]), cy = to_y(c, r, y[i]);
        if (px >= 0)
            dl_canvas_line(c, px, py, cx, cy, role, mark);
        else
            dl_canvas_plot(c, cx, cy, role, mark);
        px = cx, py = cy;
    }
}

/* The band between lo and hi: every dot column between two points filled
 * from the interpolated lo to hi (braille: every other dot row, lighter). */
static void band(dl_canvas *c, const range *r, const dl_ui_series *s)
{
    for (int i = 0; i + 1 < s->n; i++) {
        if (!usable(s->lo[i], r->log) || !usable(s->hi[i], r->log) ||
            !usable(s->lo[i + 1], r->log) || !usable(s->hi[i + 1], r->log))
            continue;
        int xa = to_x(c, r, s->x[i]), xb = to_x(c, r, s->x[i + 1]);
        for (int x = xa; x <= xb; x++) {
            double f = xb > xa ? (double)(x - xa) / (xb - xa) : 0;
            int ylo = to_y(c, r, s->lo[i] + f * (s->lo[i + 1] - s->lo[i]));
            int yhi = to_y(c, r, s->hi[i] + f * (s->hi[i + 1] - s->hi[i]));
            for (int y = yhi; y <= ylo; y += c->dy > 1 ? 2 : 1)
                dl_canvas_plot(c, x, y, DL_COLOR_DIM, ':');
        }
    }
}

static void labels(WINDOW *w, const range *r, int top, int ch, int left, int width,
                   const char *xname)
{
    char lab[16];
    int role = dl_color(DL_COLOR_AXIS);
    snprintf(lab, sizeof lab, "%6.3g", r->y1);
    dl_draw_text(w, top, left, role, "%s", lab);
    snprintf(lab, sizeof lab, "%6.3g", r->y0);
    dl_draw_text(w, top + ch - 1, left, role, "%s", lab);
    if (ch >= 6) {
        snprintf(lab, sizeof lab, "%6.3g", r->log ? sqrt(r->y0 * r->y1) : (r->y0 + r->y1) / 2);
        dl_draw_text(w, top + ch / 2, left, role, "%s", lab);
    }
    char a[16], b[16], xr[48];
    dl_fmt_si(a, sizeof a, r->x0);
    dl_fmt_si(b, sizeof b, r->x1);
    if (fabs(r->x1) < 100 && r->x1 != floor(r->x1))
        snprintf(b, sizeof b, "%.1f", r->x1);
    dl_draw_text(w, top + ch, left + 8, role, "%s", a);
    snprintf(xr, sizeof xr, "%s %s", xname, b);
    dl_draw_text(w, top + ch, left + width - (int)strlen(xr) - 1, role, "%s", xr);
}

void dl_view_overlay(WINDOW *w, int top, int left, int height, int width, const dl_ui_series *s,
                     int n, double smooth, int log_scale, const char *xname, int marks)
{
    const int label_w = 7;
    int cw = width - label_w - 1, ch = height - 1; /* the last row: x labels */
    if (cw < 4 || ch < 2)
        return;
    wattrset(w, dl_color(DL_COLOR_AXIS));
    for (int r = 0; r < ch; r++)
        mvwaddch(w, top + r, left + label_w, dl_glyphs_unicode() ? ACS_VLINE : '|');
    wattrset(w, A_NORMAL);
    range r;
    if (!fit(&r, s, n, log_scale)) {
        dl_draw_text(w, top + ch / 2, left + label_w + 2, dl_color(DL_COLOR_DIM),
                     "no points of this metric in the runs");
        return;
    }
    labels(w, &r, top, ch, left, width, xname);
    dl_canvas c;
    if (!dl_canvas_init(&c, cw, ch, marks)) {
        dl_canvas_done(&c);
        return;
    }
    for (int k = 0; k < n; k++)
        if (s[k].lo && s[k].hi)
            band(&c, &r, &s[k]);
    for (int k = 0; k < n && smooth > 0; k++) /* the raw lines, faint, behind */
        polyline(&c, &r, s[k].x, s[k].y, s[k].n, DL_COLOR_DIM, '.');
    for (int k = 0; k < n; k++) {
        double *y = malloc((size_t)(s[k].n ? s[k].n : 1) * sizeof *y);
        if (!y)
            break;
        dl_view_smooth(s[k].y, s[k].n, smooth, y);
        int role = s[k].slot >= 0 ? dl_color_run(s[k].slot) : DL_COLOR_DIM;
        polyline(&c, &r, s[k].x, y, s[k].n, role,
                 s[k].slot >= 0 ? dl_color_run_mark(s[k].slot) : '.');
        free(y);
    }
    dl_canvas_draw(&c, w, top, left + label_w + 1);
    dl_canvas_done(&c);
}
