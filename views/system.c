/* system.c - the system pane: per-core CPU meters, RAM, GPU (NVML), data wait, sparklines */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tui/colors.h"
#include "views/views.h"

void dl_view_system(WINDOW *w, const dl_snapshot *s, const dl_view_state *v)
{
    werase(w);
    dl_draw_frame(w, "2 System", v->focused);
    int rows = getmaxy(w) - 2, cols = getmaxx(w) - 2;
    if (rows < 2 || cols < 20)
        return;
    int y = 1;
    const dl_sys_sample *m = &s->sys;
    if (!s->have_sys) {
        dl_draw_text(w, y++, 2, dl_color(DL_COLOR_DIM), "no system samples yet");
    } else {
        /* per-core meters: two columns when wide */
        int ncol = cols >= 70 ? 2 : 1;
        int cw = (cols - 2) / ncol;
        int room = rows - 5; /* RAM, GPU, wait, sparklines */
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
                     "%.1f/%.1fG rss %.0fM", m->ram_used_mb / 1024, m->ram_total_mb / 1024,
                     m->rss_mb);
        for (int g = 0; g < m->ngpu && y < rows - 1; g++) {
            const dl_gpu_sample *gp = &m->gpu[g];
            dl_draw_text(w, y, 2, dl_color(DL_COLOR_GPU), "GPU");
            dl_draw_meter(w, y, 6, cols / 2 > 16 ? cols / 2 : 16, gp->util_pct);
            char t[128];
            snprintf(t, sizeof t, "%.0f/%.0fG %.0fW %.0fC", gp->mem_used_mb / 1024,
                     gp->mem_total_mb / 1024, gp->power_w, gp->temp_c);
            dl_draw_text(w, y++, 6 + (cols / 2 > 16 ? cols / 2 : 16) + 1, dl_color(DL_COLOR_DIM),
                         "%s", t);
        }
    }
    if (!s->have_sys || m->ngpu == 0)
        dl_draw_text(w, y++, 2, dl_color(DL_COLOR_DIM), "GPU  %s",
                     s->gpu_status[0] ? s->gpu_status : "no GPU data");
    if (y < rows + 1) {
        int role = s->data_wait > 0.2 ? DL_COLOR_WARN : DL_COLOR_DEFAULT;
        dl_draw_text(w, y++, 2, dl_color(role), "data wait %4.1f%% of step time%s",
                     100 * s->data_wait, s->data_wait > 0.2 ? "  (input-bound)" : "");
    }
    int spw = cols - 14;
    if (y < rows + 1 && spw > 4 && s->nhist_cpu > 0) {
        dl_draw_text(w, y, 2, dl_color(DL_COLOR_DEFAULT), "cpu     ");
        dl_draw_spark(w, y++, 12, spw, s->hist_cpu, s->nhist_cpu, 100, dl_color(DL_COLOR_METER_LOW));
    }
    if (y < rows + 1 && spw > 4 && s->nhist_sps > 0) {
        dl_draw_text(w, y, 2, dl_color(DL_COLOR_DEFAULT), "samp/s  ");
        dl_draw_spark(w, y++, 12, spw, s->hist_sps, s->nhist_sps, 0, dl_color(DL_COLOR_LOSS));
    }
}
