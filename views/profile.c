/* profile.c - the profile table: self and total time per op, shares of the step, validation outside it */
#include <stdio.h>
#include <string.h>

#include "views/colors.h"
#include "views/views.h"

/* Validation runs between steps: its time is not part of the step's 100%. */
static int outside_step(const dl_prof_row *p) { return p->cat == DL_PROF_VALIDATION; }

/* One row: self and total apart (a container's self is small, its total
 * holds its children), each as a share of the summed step time; a row
 * outside the step shows its time in steps instead. */
static void row(WINDOW *w, int y, const dl_prof_row *p, const dl_prof_totals *tot, int namew,
                int wide)
{
    double step = tot->step_ms > 0 ? tot->step_ms : 0;
    char share[40] = "            -";
    if (outside_step(p) && tot->mean_step_ms > 0)
        snprintf(share, sizeof share, "%7.1f steps", p->total_ms / tot->mean_step_ms);
    else if (!outside_step(p))
        snprintf(share, sizeof share, "%6.1f %6.1f", step > 0 ? 100 * p->self_ms / step : 0,
                 step > 0 ? 100 * p->total_ms / step : 0);
    int role = !outside_step(p) && step > 0 && 100 * p->self_ms / step >= 30 ? DL_COLOR_WARN
                                                                             : DL_COLOR_DEFAULT;
    char gf[16] = "     -";
    if (p->gflops > 0)
        snprintf(gf, sizeof gf, "%6.1f", p->gflops);
    if (wide)
        dl_draw_text(w, y, 1, dl_color(role), "%-*.*s %6ld %9.2f %9.2f %s %s", namew, namew,
                     p->name, p->calls, p->self_ms, p->total_ms, share, gf);
    else
        dl_draw_text(w, y, 1, dl_color(role), "%-*.*s %s", namew, namew, p->name, share);
}

void dl_view_profile(WINDOW *w, const dl_screen *s, const dl_view_state *v)
{
    werase(w);
    char title[96];
    const dl_telemetry_snapshot *t = s->tele;
    snprintf(title, sizeof title, "3 Profile%s%s", v->filter[0] ? " /" : "", v->filter);
    dl_draw_frame(w, title, v->focused);
    int rows = getmaxy(w) - 2, cols = getmaxx(w) - 2;
    if (rows < 2 || cols < 20)
        return;
    if (t->nops == 0) {
        dl_draw_text(w, 1, 2, dl_color(DL_COLOR_DIM), "%s",
                     s->prof_note[0] ? s->prof_note : "no profile yet");
        return;
    }
    int wide = cols >= 66;
    int namew = cols - (wide ? 48 : 14);
    if (namew > 36)
        namew = 36;
    char hdr[200];
    if (wide)
        snprintf(hdr, sizeof hdr, "%-*s %6s %9s %9s %6s %6s %6s", namew, "op", "calls", "self ms",
                 "total ms", "self%", "total%", "GF/s");
    else
        snprintf(hdr, sizeof hdr, "%-*s %6s %6s", namew, "op", "self%", "total%");
    wattrset(w, dl_color(DL_COLOR_HEADER));
    mvwhline(w, 1, 1, ' ', cols);
    dl_draw_text(w, 1, 1, dl_color(DL_COLOR_HEADER), "%s", hdr);
    int y = 2, skipped = 0;
    /* the step's rows, then what runs between steps */
    for (int pass = 0; pass < 2; pass++) {
        int titled = 0;
        for (int i = 0; i < t->nops && y <= rows; i++) {
            const dl_prof_row *p = &t->ops[i];
            if (outside_step(p) != pass || (v->filter[0] && !strstr(p->name, v->filter)))
                continue;
            if (skipped++ < v->scroll)
                continue;
            if (pass && !titled && y <= rows) {
                dl_draw_text(w, y++, 1, dl_color(DL_COLOR_DIM),
                             "outside the step (not in its 100%%):");
                titled = 1;
                if (y > rows)
                    break;
            }
            row(w, y++, p, &t->prof, namew, wide);
        }
    }
    if (y <= rows && t->prof.mean_step_ms > 0)
        dl_draw_text(w, y, 1, dl_color(DL_COLOR_DIM),
                     "mean step %.3f ms over %ld steps; self excludes nested ops, total includes "
                     "them",
                     t->prof.mean_step_ms, t->prof.steps);
}
