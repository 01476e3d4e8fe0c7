/* runs.c - the runs screen: the experiment table of the runs folder, newest first */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "views/colors.h"
#include "views/views.h"

void dl_view_runs(WINDOW *w, const dl_screen *s, const dl_view_state *v)
{
    werase(w);
    char title[400];
    snprintf(title, sizeof title, "5 Runs in %s%s%s", s->runs.dir[0] ? s->runs.dir : "runs",
             v->filter[0] ? "  filter /" : "", v->filter);
    dl_draw_frame(w, title, v->focused);
    int rows = getmaxy(w) - 2, cols = getmaxx(w) - 2;
    if (rows < 2 || cols < 30)
        return;
    int wide = cols >= 100;
    int fw = wide ? cols - 71 : cols - 42;
    if (fw < 10)
        fw = 10;
    char hdr[256];
    snprintf(hdr, sizeof hdr, "%-*s %-9s %-5s %7s %8s %8s%s", fw, "run", "status", "dev", "steps",
             "val_acc", "val_loss", wide ? "     wall     cost" : "");
    wattrset(w, dl_color(DL_COLOR_HEADER));
    mvwhline(w, 1, 1, ' ', cols);
    dl_draw_text(w, 1, 1, dl_color(DL_COLOR_HEADER), "%s", hdr);
    if (s->runs.n == 0) {
        dl_draw_text(w, 2, 2, dl_color(DL_COLOR_DIM), "no runs yet");
        return;
    }
    int y = 2, skipped = 0;
    for (int i = 0; i < s->runs.n && y <= rows; i++) {
        const dl_ui_run *r = &s->runs.rows[i];
        if (v->filter[0] && !strstr(r->folder, v->filter) && !strstr(r->status, v->filter))
            continue;
        if (skipped++ < v->scroll)
            continue;
        int role = !strcmp(r->status, "failed")    ? DL_COLOR_ERROR
                   : !strcmp(r->status, "running") ? DL_COLOR_OK
                   : !strcmp(r->status, "stopped") ? DL_COLOR_WARN
                                                   : DL_COLOR_DEFAULT;
        const char *run_dir = s->tele->run.run_dir;
        const char *cur = strrchr(run_dir, '/');
        if (run_dir[0] && !strcmp(r->folder, cur ? cur + 1 : run_dir))
            role = DL_COLOR_SELECT;
        char acc[16] = "-", loss[16] = "-", wall[16] = "", cost[16] = "";
        if (isfinite(r->val_acc))
            snprintf(acc, sizeof acc, "%.4f", r->val_acc);
        if (isfinite(r->val_loss))
            snprintf(loss, sizeof loss, "%.4f", r->val_loss);
        if (wide) {
            dl_fmt_duration(wall, sizeof wall, r->wall_s);
            if (isfinite(r->cost))
                dl_fmt_money(cost, sizeof cost, r->cost);
        }
        dl_draw_text(w, y++, 1, dl_color(role), "%-*.*s %-9s %-5s %7ld %8s %8s %8s %8s", fw, fw,
                     r->folder, r->status, r->device, r->steps, acc, loss, wall, cost);
    }
}
