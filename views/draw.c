/* draw.c - drawing helpers shared by the panes: frames, clipped text, meters, sparklines, units */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "views/colors.h"
#include "views/views.h"

void dl_draw_frame(WINDOW *w, const char *title, int focused)
{
    wattrset(w, dl_color(DL_COLOR_BORDER));
    if (dl_glyphs_unicode())
        box(w, 0, 0);
    else
        wborder(w, '|', '|', '-', '-', '+', '+', '+', '+');
    wattrset(w, dl_color(focused ? DL_COLOR_TITLE_FOCUS : DL_COLOR_TITLE));
    int max = getmaxx(w) - 4;
    if (max > 0)
        mvwprintw(w, 0, 1, " %.*s ", max - 2 > 0 ? max - 2 : 0, title);
    wattrset(w, A_NORMAL);
}

/* How many bytes of s fit in max cells. */
static int fit(const char *s, int max)
{
    int n = 0, i = 0;
    for (; s[i]; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (n == max)
                break;
            n++;
        }
    }
    return i;
}

void dl_draw_text(WINDOW *w, int y, int x, int role, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    int maxx = getmaxx(w), maxy = getmaxy(w);
    if (y < 0 || y >= maxy || x >= maxx - 1)
        return;
    int room = maxx - 1 - x; /* keep the right border */
    wattrset(w, role);
    mvwaddnstr(w, y, x, buf, fit(buf, room));
    wattrset(w, A_NORMAL);
}

void dl_draw_meter(WINDOW *w, int y, int x, int width, double pct)
{
    if (width < 8)
        return;
    if (!isfinite(pct) || pct < 0)
        pct = 0;
    if (pct > 100)
        pct = 100;
    int inner = width - 7; /* "[" bars "]" " 100%" */
    int fill = (int)lround(pct / 100.0 * inner);
    int role = pct < 50 ? DL_COLOR_METER_LOW : pct < 85 ? DL_COLOR_METER_MID : DL_COLOR_METER_HIGH;
    wattrset(w, dl_color(DL_COLOR_AXIS));
    mvwaddch(w, y, x, '[');
    wattrset(w, dl_color(role));
    for (int i = 0; i < inner; i++)
        waddch(w, i < fill ? '|' : ' ');
    wattrset(w, dl_color(DL_COLOR_AXIS));
    waddch(w, ']');
    wattrset(w, A_NORMAL);
    wprintw(w, "%4.0f%%", pct);
}

void dl_draw_spark(WINDOW *w, int y, int x, int width, const float *v, int n, double max, int role)
{
    static const char *blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                   "\u2585", "\u2586", "\u2587", "\u2588"};
    static const char ascii[] = "_.-:=+*#";
    if (width <= 0 || n <= 0)
        return;
    int first = n > width ? n - width : 0;
    if (max <= 0)
        for (int i = first; i < n; i++)
            if (v[i] > max)
                max = v[i];
    if (max <= 0)
        max = 1;
    wattrset(w, role);
    wmove(w, y, x);
    for (int i = first; i < n; i++) {
        double f = v[i] / max;
        int k = (int)(f * 7.999);
        k = k < 0 ? 0 : k > 7 ? 7 : k;
        if (dl_glyphs_unicode())
            waddstr(w, blocks[k]);
        else
            waddch(w, (chtype)ascii[k]);
    }
    wattrset(w, A_NORMAL);
}

void dl_fmt_si(char *buf, int size, double v)
{
    const char *unit = "";
    double a = fabs(v);
    if (a >= 1e9)
        v /= 1e9, unit = "G";
    else if (a >= 1e6)
        v /= 1e6, unit = "M";
    else if (a >= 1e4)
        v /= 1e3, unit = "k";
    if (fabs(v) >= 100 || !*unit)
        snprintf(buf, (size_t)size, "%.0f%s", v, unit);
    else
        snprintf(buf, (size_t)size, "%.1f%s", v, unit);
}

void dl_fmt_duration(char *buf, int size, double s)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, (size_t)size, "-");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, (size_t)size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, (size_t)size, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, (size_t)size, "%lds", t);
}

const char *dl_state_name(const dl_screen *s)
{
    dl_tele_state st = s->tele->run.state;
    if (st == DL_TELE_IDLE)
        return strcmp(s->source, "watch") ? "ready" : "watching";
    if (s->stopping && (st == DL_TELE_RUNNING || st == DL_TELE_PAUSED))
        return "stopping";
    return dl_tele_state_name(st);
}

void dl_fmt_money(char *buf, int size, double v)
{
    if (v < 0)
        snprintf(buf, (size_t)size, "-");
    else if (v >= 100)
        snprintf(buf, (size_t)size, "$%.0f", v);
    else if (v >= 1)
        snprintf(buf, (size_t)size, "$%.2f", v);
    else
        snprintf(buf, (size_t)size, "$%.4f", v);
}

void dl_view_too_small(WINDOW *w, int need_cols, int need_rows)
{
    werase(w);
    int rows = getmaxy(w), cols = getmaxx(w);
    char a[64], b[64];
    snprintf(a, sizeof a, "enlarge the terminal");
    snprintf(b, sizeof b, "need %dx%d, have %dx%d", need_cols, need_rows, cols, rows);
    int y = rows / 2 - 1;
    if (y < 0)
        y = 0;
    wattrset(w, dl_color(DL_COLOR_WARN));
    mvwaddnstr(w, y, (cols - (int)strlen(a)) / 2 > 0 ? (cols - (int)strlen(a)) / 2 : 0, a, cols);
    wattrset(w, A_NORMAL);
    if (y + 1 < rows)
        mvwaddnstr(w, y + 1, (cols - (int)strlen(b)) / 2 > 0 ? (cols - (int)strlen(b)) / 2 : 0, b,
                   cols);
}
