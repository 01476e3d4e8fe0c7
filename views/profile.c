/* profile.c - the profile table: per-op time, share of the step, GFLOP/s */
#include <stdio.h>
#include <string.h>

#include "views/colors.h"
#include "views/views.h"

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
    int wide = cols >= 60;
    int namew = cols - (wide ? 40 : 17);
    if (namew > 40)
        namew = 40;
    char hdr[160];
    if (wide)
        snprintf(hdr, sizeof hdr, "%-*s %7s %9s %8s %6s %6s", namew, "op", "calls", "total ms",
                 "mean ms", "%step", "GF/s");
    else
        snprintf(hdr, sizeof hdr, "%-*s %8s %6s", namew, "op", "mean ms", "%step");
    wattrset(w, dl_color(DL_COLOR_HEADER));
    mvwhline(w, 1, 1, ' ', cols);
    dl_draw_text(w, 1, 1, dl_color(DL_COLOR_HEADER), "%s", hdr);
    int y = 2, skipped = 0;
    for (int i = 0; i < t->nops && y <= rows; i++) {
        const dl_prof_row *p = &t->ops[i];
        if (v->filter[0] && !strstr(p->name, v->filter))
            continue;
        if (skipped++ < v->scroll)
            continue;
        int role = p->pct_step >= 30 ? DL_COLOR_WARN : DL_COLOR_DEFAULT;
        char gf[16];
        if (p->gflops > 0)
            snprintf(gf, sizeof gf, "%6.1f", p->gflops);
        else
            snprintf(gf, sizeof gf, "%6s", "-");
        if (wide)
            dl_draw_text(w, y++, 1, dl_color(role), "%-*.*s %7ld %9.1f %8.3f %6.1f %s", namew,
                         namew, p->name, p->calls, p->total_ms, p->mean_ms, p->pct_step, gf);
        else
            dl_draw_text(w, y++, 1, dl_color(role), "%-*.*s %8.3f %6.1f", namew, namew, p->name,
                         p->mean_ms, p->pct_step);
    }
    if (y <= rows && t->prof.mean_step_ms > 0)
        dl_draw_text(w, y, 1, dl_color(DL_COLOR_DIM), "mean step %.3f ms over %ld steps",
                     t->prof.mean_step_ms, t->prof.steps);
}
