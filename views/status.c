/* status.c - the status bar (run, device, progress, speed, ETA) and the key hint line */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tui/colors.h"
#include "views/views.h"

static int state_role(dl_run_state st)
{
    switch (st) {
    case DL_STATE_RUNNING: return DL_COLOR_OK;
    case DL_STATE_PAUSED:
    case DL_STATE_STOPPING: return DL_COLOR_WARN;
    case DL_STATE_FAILED: return DL_COLOR_ERROR;
    default: return DL_COLOR_STATUS;
    }
}

void dl_view_status(WINDOW *w, const dl_snapshot *s)
{
    int cols = getmaxx(w);
    wbkgdset(w, (chtype)dl_color(DL_COLOR_STATUS) | ' ');
    werase(w);
    char sps[16], eta[16], before[48] = "", step[48], epoch[24] = "", cost[32] = "";
    dl_fmt_si(sps, sizeof sps, s->samples_per_s);
    dl_fmt_duration(eta, sizeof eta, s->eta_s);
    if (s->samples_per_s_before > 0 && s->switched_from[0]) {
        char b[16];
        dl_fmt_si(b, sizeof b, s->samples_per_s_before);
        snprintf(before, sizeof before, " (%s: %s)", s->switched_from, b);
    }
    if (s->total_steps > 0)
        snprintf(step, sizeof step, "step %ld/%ld", s->step, s->total_steps);
    else
        snprintf(step, sizeof step, "step %ld", s->step);
    if (s->epochs > 0)
        snprintf(epoch, sizeof epoch, "ep %d/%d", s->epoch, s->epochs);
    if (s->cost_per_hour > 0 && s->eta_s >= 0)
        snprintf(cost, sizeof cost, "  $%.2f left", s->cost_per_hour * s->eta_s / 3600);
    const char *name = s->run_name[0] ? s->run_name : s->script;
    wattrset(w, dl_color(DL_COLOR_STATUS) | A_BOLD);
    mvwaddnstr(w, 0, 0, " dlbench ", cols);
    wattrset(w, dl_color(DL_COLOR_STATUS));
    char line[512];
    snprintf(line, sizeof line, " %s  %s %s ", name, s->device[0] ? s->device : "-",
             s->precision[0] ? s->precision : "");
    waddnstr(w, line, cols - getcurx(w) > 0 ? cols - getcurx(w) : 0);
    wattrset(w, dl_color(state_role(s->state)) | A_REVERSE);
    snprintf(line, sizeof line, " %s ", dl_state_name(s->state));
    if (getcurx(w) < cols)
        waddnstr(w, line, cols - getcurx(w));
    wattrset(w, dl_color(DL_COLOR_STATUS));
    snprintf(line, sizeof line, cols >= 100 ? "  %s  %s  %s samples/s%s  ETA %s%s"
                                            : " %s %s %s/s%s ETA %s%s",
             epoch, step, sps, before, eta, cost);
    if (getcurx(w) < cols)
        waddnstr(w, line, cols - getcurx(w));
    wattrset(w, A_NORMAL);
}

/* keys: pairs "key", "what"; prompt: when a prompt is open, shown instead. */
void dl_view_hints(WINDOW *w, const char *const *keys, int nkeys, const char *prompt)
{
    int cols = getmaxx(w);
    wbkgdset(w, (chtype)dl_color(DL_COLOR_HINT) | ' ');
    werase(w);
    if (prompt) {
        wattrset(w, dl_color(DL_COLOR_STATUS_KEY));
        mvwaddnstr(w, 0, 0, prompt, cols - 1);
        wattrset(w, A_NORMAL);
        return;
    }
    wmove(w, 0, 0);
    for (int i = 0; i + 1 < nkeys; i += 2) {
        int need = (int)strlen(keys[i]) + (int)strlen(keys[i + 1]) + 2;
        if (getcurx(w) + need > cols)
            break;
        wattrset(w, dl_color(DL_COLOR_STATUS_KEY));
        waddstr(w, keys[i]);
        wattrset(w, dl_color(DL_COLOR_HINT));
        waddstr(w, keys[i + 1]);
        if (getcurx(w) < cols - 1)
            waddch(w, ' ');
    }
    wattrset(w, A_NORMAL);
}
