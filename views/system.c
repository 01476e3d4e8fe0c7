/* system.c - the system pane: per-core CPU meters, RAM, GPU (NVML), data wait, sparklines */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "views/colors.h"
#include "views/views.h"

/* Per-core CPU meters (two columns when wide; the total alone when the
 * cores do not fit), RAM, then a line per GPU from NVML. Returns the next
 * row. */
static int draw_machine(WINDOW *w, const dl_sys_sample *m, int y, int rows, int cols)
{
    int ncol = cols >= 70 ? 2 : 1;
    int cw = (cols - 2) / ncol;
    int room = rows - 6; /* RAM, GPU, wait, loader, sparklines */
    int ncpu = m->ncpu;
    int lines = (ncpu + ncol - 1) / ncol;
    if (lines > room && room > 0) { /* too many cores: the total only */
        dl_draw_text(w, y, 2, dl_color(DL_COLOR_DEFAULT), "CPU%3d", ncpu);
        dl_draw_meter(w, y++, 9, cols - 9, m->cpu_total_pct);
    } else {
        for (int i = 0; i < ncpu; i++) {
            int r = i / ncol, c = i % ncol;
            dl_draw_text(w, y + r, 2 + c * cw, dl_color(DL_COLOR_DEFAULT), "%3d", i);
            dl_draw_meter(w, y + r, 6 + c * cw, cw - 6, m->cpu_pct[i]);
        }
        y += lines;
    }
    double ram = m->ram_total_mb > 0 ? 100.0 * m->ram_used_mb / m->ram_total_mb : 0;
    dl_draw_text(w, y, 2, dl_color(DL_COLOR_DEFAULT), "Mem");
    dl_draw_meter(w, y, 6, cols / 2 > 16 ? cols / 2 : 16, ram);
    dl_draw_text(w, y++, 6 + (cols / 2 > 16 ? cols / 2 : 16) + 1, dl_color(DL_COLOR_DIM),
                 "%.1f/%.1fG rss %.0fM", m->ram_used_mb / 1024, m->ram_total_mb / 1024, m->rss_mb);
    for (int g = 0; g < m->ngpu && y < rows - 1; g++) {
        const dl_gpu_sample *gp = &m->gpu[g];
        dl_draw_text(w, y, 2, dl_color(DL_COLOR_GPU), "GPU");
        dl_draw_meter(w, y, 6, cols / 2 > 16 ? cols / 2 : 16, gp->util_pct);
        char t[128];
        snprintf(t, sizeof t, "%.0f/%.0fG %.0fW %.0fC", gp->mem_used_mb / 1024,
                 gp->mem_total_mb / 1024, gp->power_w, gp->temp_c);
        dl_draw_text(w, y++, 6 + (cols / 2 > 16 ? cols / 2 : 16) + 1, dl_color(DL_COLOR_DIM), "%s",
                     t);
    }
    return y;
}

/* The loader's line: its queue's fill as a meter, or "synchronous". */
static void draw_loader(WINDOW *w, const dl_telemetry_snapshot *s, int y, int cols)
{
    const dl_tele_run *run = &s->run;
    const dl_tele_loader *l = &s->loader;
    int empty = l->queue_size > 0 && l->queue_fill == 0;
    char wk[24] = "";
    if (run->workers >= 0)
        snprintf(wk, sizeof wk, ", %d worker%s", run->workers, run->workers == 1 ? "" : "s");
    dl_draw_text(w, y, 2, dl_color(empty ? DL_COLOR_WARN : DL_COLOR_DEFAULT), "loader");
    if (l->queue_size > 0) {
        int mw = cols / 3 > 10 ? cols / 3 : 10;
        dl_draw_meter(w, y, 9, mw, 100.0 * l->queue_fill / l->queue_size);
        dl_draw_text(w, y, 9 + mw + 1, dl_color(DL_COLOR_DIM), "queue %d/%d%s", l->queue_fill,
                     l->queue_size, wk);
    } else {
        dl_draw_text(w, y, 9, dl_color(DL_COLOR_DIM), "synchronous (no queue)%s", wk);
    }
}

/* Sparklines while rows remain: CPU total from the system samples,
 * samples/s from its series. Returns the next row. */
static int draw_sparks(WINDOW *w, const dl_telemetry_snapshot *s, int y, int rows, int cols)
{
    float hist[DL_TELE_SYS_SAMPLES];
    int spw = cols - 14;
    if (y < rows + 1 && spw > 4 && s->nsys > 0) {
        for (int i = 0; i < s->nsys; i++)
            hist[i] = (float)s->sys[i].cpu_total_pct;
        dl_draw_text(w, y, 2, dl_color(DL_COLOR_DEFAULT), "cpu     ");
        dl_draw_spark(w, y++, 12, spw, hist, s->nsys, 100, dl_color(DL_COLOR_METER_LOW));
    }
    const dl_tele_series *sps = dl_telemetry_series(s, "samples_per_s");
    if (y < rows + 1 && spw > 4 && sps && sps->n > 0) {
        int n = sps->n < DL_TELE_SYS_SAMPLES ? sps->n : DL_TELE_SYS_SAMPLES;
        for (int i = 0; i < n; i++)
            hist[i] = (float)sps->y[sps->n - n + i];
        dl_draw_text(w, y, 2, dl_color(DL_COLOR_DEFAULT), "samp/s  ");
        dl_draw_spark(w, y++, 12, spw, hist, n, 0, dl_color(DL_COLOR_LOSS));
    }
    return y;
}

void dl_view_system(WINDOW *w, const dl_screen *scr, const dl_view_state *v)
{
    const dl_telemetry_snapshot *s = scr->tele;
    const dl_tele_run *run = &s->run;
    int have_sys = s->nsys > 0;
    werase(w);
    dl_draw_frame(w, "2 System", v->focused);
    int rows = getmaxy(w) - 2, cols = getmaxx(w) - 2;
    if (rows < 2 || cols < 20)
        return;
    int y = 1;
    const dl_sys_sample *m = have_sys ? &s->sys[s->nsys - 1] : NULL;
    if (!have_sys)
        dl_draw_text(w, y++, 2, dl_color(DL_COLOR_DIM), "no system samples yet");
    else
        y = draw_machine(w, m, y, rows, cols);
    if (!have_sys || m->ngpu == 0)
        dl_draw_text(w, y++, 2, dl_color(DL_COLOR_DIM), "GPU  %s",
                     s->gpu_status[0] ? s->gpu_status : "no GPU data");
    if (y < rows + 1) {
        double dw = run->data_wait_share;
        int role = dw > 0.2 ? DL_COLOR_WARN : DL_COLOR_DEFAULT;
        dl_draw_text(w, y++, 2, dl_color(role), "data wait %4.1f%% of step time%s", 100 * dw,
                     dw > 0.2 ? "  (input-bound)" : "");
    }
    if (y < rows + 1 && s->have_loader)
        draw_loader(w, s, y++, cols);
    y = draw_sparks(w, s, y, rows, cols);
    if (y < rows + 1 && scr->nadvice > 0) {
        const dl_advice *ad = &scr->advice[0];
        dl_draw_text(w, y++, 2,
                     dl_color(ad->level >= DL_ADV_WARNING ? DL_COLOR_WARN : DL_COLOR_NOTE),
                     "advisor: %s - %s", ad->title, ad->remedy);
    }
}
