/* log.c - the log pane: run events, warnings, notes, Lua prompt output, newest at the bottom */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "views/colors.h"
#include "views/views.h"

static int kind_role(const char *k)
{
    if (!strcmp(k, "error") || !strcmp(k, "failed") || !strcmp(k, "lua error"))
        return DL_COLOR_ERROR;
    if (!strcmp(k, "warning") || !strcmp(k, "early_stop") || !strcmp(k, "stop") ||
        !strcmp(k, "paused") || !strcmp(k, "advice") || !strcmp(k, "pruned"))
        return DL_COLOR_WARN;
    if (!strcmp(k, "note") || !strcmp(k, "lua") || !strcmp(k, "print"))
        return DL_COLOR_NOTE;
    if (!strcmp(k, "device") || !strcmp(k, "finished") || !strcmp(k, "started") ||
        !strcmp(k, "resumed"))
        return DL_COLOR_OK;
    return DL_COLOR_DEFAULT;
}

/* A displayed line: an event, or one line of a multi-line event's text. */
typedef struct row {
    int ev;
    const char *text;
    int len;
    int first;
} row;

void dl_view_log(WINDOW *w, const dl_screen *s, const dl_view_state *v)
{
    const dl_telemetry_snapshot *t = s->tele;
    werase(w);
    char title[64];
    if (v->scroll > 0)
        snprintf(title, sizeof title, "4 Log (%d up)", v->scroll);
    else
        snprintf(title, sizeof title, "4 Log");
    dl_draw_frame(w, title, v->focused);
    int rows = getmaxy(w) - 2, cols = getmaxx(w) - 2;
    if (rows < 1 || cols < 10)
        return;
    /* newest at the bottom; a Lua traceback spans lines; the filter applies */
    static row r[DL_TELE_MAX_EVENTS * 8]; /* the main thread only */
    int n = 0;
    for (int i = 0; i < t->nevents; i++) {
        const dl_tele_event *e = &t->events[i];
        if (v->filter[0] && !strstr(e->text, v->filter) && !strstr(e->kind, v->filter))
            continue;
        const char *p = e->text;
        int first = 1;
        do {
            const char *nl = strchr(p, '\n');
            int len = nl ? (int)(nl - p) : (int)strlen(p);
            if (n < (int)(sizeof r / sizeof *r))
                r[n++] = (row){i, p, len, first};
            first = 0;
            p = nl ? nl + 1 : NULL;
        } while (p && *p);
    }
    int end = n - v->scroll;
    if (end < 0)
        end = 0;
    int start = end - rows;
    if (start < 0)
        start = 0;
    int show_time = cols >= 60;
    for (int k = start, y = 1; k < end; k++, y++) {
        const dl_tele_event *e = &t->events[r[k].ev];
        int x = 1;
        if (show_time) {
            char when[16] = "        ";
            if (e->wall > 0 && r[k].first) {
                time_t tt = (time_t)e->wall;
                struct tm tm;
                localtime_r(&tt, &tm);
                strftime(when, sizeof when, "%H:%M:%S", &tm);
            }
            dl_draw_text(w, y, x, dl_color(DL_COLOR_DIM), "%s", when);
            x += 9;
        }
        if (r[k].first) {
            dl_draw_text(w, y, x, dl_color(kind_role(e->kind)), "%s", e->kind);
            x += (int)strlen(e->kind);
        } else {
            x += 2;
        }
        dl_draw_text(w, y, x, dl_color(DL_COLOR_DEFAULT), " %.*s", r[k].len, r[k].text);
    }
}
