/* log.c - the log pane: run events, warnings, notes, Lua prompt output, newest at the bottom */
#include <stdio.h>
#include <string.h>

#include "tui/colors.h"
#include "views/views.h"

static int kind_role(const char *k)
{
    if (!strcmp(k, "error") || !strcmp(k, "failed") || !strcmp(k, "lua error"))
        return DL_COLOR_ERROR;
    if (!strcmp(k, "warning") || !strcmp(k, "early_stop") || !strcmp(k, "stop") ||
        !strcmp(k, "paused"))
        return DL_COLOR_WARN;
    if (!strcmp(k, "note") || !strcmp(k, "lua") || !strcmp(k, "print"))
        return DL_COLOR_NOTE;
    if (!strcmp(k, "device") || !strcmp(k, "finished") || !strcmp(k, "started") ||
        !strcmp(k, "resumed"))
        return DL_COLOR_OK;
    return DL_COLOR_DEFAULT;
}

void dl_view_log(WINDOW *w, const dl_snapshot *s, const dl_view_state *v)
{
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
    /* newest at the bottom; filter applies */
    int idx[DL_SNAP_LOG], n = 0;
    for (int i = 0; i < s->nlog; i++)
        if (!v->filter[0] || strstr(s->log[i].text, v->filter) || strstr(s->log[i].kind, v->filter))
            idx[n++] = i;
    int end = n - v->scroll;
    if (end < 0)
        end = 0;
    int start = end - rows;
    if (start < 0)
        start = 0;
    int show_time = cols >= 60;
    for (int k = start, y = 1; k < end; k++, y++) {
        const dl_snap_line *l = &s->log[idx[k]];
        int x = 1;
        if (show_time) {
            dl_draw_text(w, y, x, dl_color(DL_COLOR_DIM), "%s", l->when);
            x += (int)strlen(l->when) + 1;
        }
        dl_draw_text(w, y, x, dl_color(kind_role(l->kind)), "%s", l->kind);
        x += (int)strlen(l->kind);
        dl_draw_text(w, y, x, dl_color(DL_COLOR_DEFAULT), " %s", l->text);
    }
}
