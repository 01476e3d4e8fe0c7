/* status.c - the status bar (run, device, progress, speed, ETA) and the key hint line */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "views/colors.h"
#include "views/views.h"

static int state_role(const dl_screen *s)
{
    switch (s->tele->run.state) {
    case DL_TELE_RUNNING: return s->stopping ? DL_COLOR_WARN : DL_COLOR_OK;
    case DL_TELE_PAUSED: return DL_COLOR_WARN;
    case DL_TELE_FAILED: return DL_COLOR_ERROR;
    default: return DL_COLOR_STATUS;
    }
}

/* Adds " text" when it fits in the bar. */
static void seg(WINDOW *w, int cols, int attr, const char *text)
{
    int room = cols - getcurx(w);
    if ((int)strlen(text) > room)
        return;
    wattrset(w, attr);
    waddstr(w, text);
}

void dl_view_status(WINDOW *w, const dl_screen *s)
{
    const dl_telemetry_snapshot *t = s->tele;
    const dl_tele_run *r = &t->run;
    int cols = getmaxx(w), wide = cols >= 100;
    wbkgdset(w, (chtype)dl_color(DL_COLOR_STATUS) | ' ');
    werase(w);
    wattrset(w, dl_color(DL_COLOR_STATUS) | A_BOLD);
    mvwaddnstr(w, 0, 0, " dlbench ", cols);
    char line[512], a[32], b[32];
    const char *name = r->name[0] ? r->name : s->script;
    snprintf(line, sizeof line, " %.*s  %s %s ", wide ? 40 : 14, name,
             r->device[0] ? r->device : "-",
             wide && (r->step > 0 || r->state > DL_TELE_PREPARING) ? r->precision_name : "");
    seg(w, cols, dl_color(DL_COLOR_STATUS), line);
    snprintf(line, sizeof line, " %s ", dl_state_name(s));
    seg(w, cols, dl_color(state_role(s)) | A_REVERSE, line);
    long total = r->total_steps > 0                        ? r->total_steps
                 : r->epochs > 0 && r->steps_per_epoch > 0 ? r->epochs * r->steps_per_epoch
                                                           : 0;
    if (r->epochs > 0 && wide) {
        snprintf(line, sizeof line, "  ep %d/%d", r->step > 0 ? r->epoch + 1 : 0, r->epochs);
        seg(w, cols, dl_color(DL_COLOR_STATUS), line);
    }
    if (total > 0 && wide) {
        snprintf(line, sizeof line, "  step %ld/%ld", r->step, total);
    } else if (total > 0) { /* narrow: the total in short units */
        dl_fmt_si(b, sizeof b, (double)total);
        snprintf(line, sizeof line, " step %ld/%s", r->step, b);
    } else {
        snprintf(line, sizeof line, " %sstep %ld", wide ? " " : "", r->step);
    }
    seg(w, cols, dl_color(DL_COLOR_STATUS), line);
    dl_fmt_si(a, sizeof a, r->samples_per_s);
    snprintf(line, sizeof line, wide ? "  %s samples/s" : " %s/s", a);
    seg(w, cols, dl_color(DL_COLOR_STATUS), line);
    if (s->sps_before > 0 && s->switched_from[0]) {
        dl_fmt_si(b, sizeof b, s->sps_before);
        snprintf(line, sizeof line, " (%s: %s)", s->switched_from, b);
        seg(w, cols, dl_color(DL_COLOR_STATUS), line);
    }
    int running = r->state == DL_TELE_RUNNING || r->state == DL_TELE_PAUSED;
    if (t->price_per_hour > 0 && t->cost.cost_so_far >= 0) {
        dl_fmt_money(a, sizeof a, t->cost.cost_so_far);
        if (t->cost.cost_projected >= 0 && running) {
            dl_fmt_money(b, sizeof b, t->cost.cost_projected);
            snprintf(line, sizeof line, wide ? "  cost %s of %s" : " %s/%s", a, b);
        } else {
            snprintf(line, sizeof line, wide ? "  cost %s" : " %s", a);
        }
        seg(w, cols, dl_color(DL_COLOR_STATUS), line);
    }
    if (running) {
        dl_fmt_duration(a, sizeof a, t->cost.eta_s);
        snprintf(line, sizeof line, wide ? "  ETA %s" : " ETA %s", a);
        seg(w, cols, dl_color(DL_COLOR_STATUS), line);
    }
    if (t->cost.mfu >= 0 && r->step > 0) {
        snprintf(line, sizeof line, wide ? "  MFU %.1f%%" : " MFU %.0f%%", 100 * t->cost.mfu);
        seg(w, cols, dl_color(DL_COLOR_STATUS), line);
    }
    if (s->nadvice > 0 && cols - getcurx(w) > 24) {
        snprintf(line, sizeof line, "  ! %s", s->advice[0].title);
        seg(w, cols,
            dl_color(DL_COLOR_STATUS) | (s->advice[0].level >= DL_ADV_WARNING ? A_BOLD : 0), line);
    }
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
