/* canvas.c - the charts' dot canvas: braille cells or ASCII marks, lines, drawing into a window */
#include "views/canvas.h"

#include <stdlib.h>

#include "views/colors.h"

int dl_canvas_init(dl_canvas *c, int cw, int ch, int marks)
{
    c->cw = cw, c->ch = ch;
    c->dx = dl_glyphs_unicode() && !marks ? 2 : 1;
    c->dy = dl_glyphs_unicode() && !marks ? 4 : 1;
    size_t n = (size_t)cw * (size_t)ch;
    c->bits = calloc(n, 1);
    c->role = calloc(n, 1);
    c->mark = calloc(n, 1);
    return c->bits && c->role && c->mark;
}

void dl_canvas_done(dl_canvas *c)
{
    free(c->bits);
    free(c->role);
    free(c->mark);
}

/* Braille dot bit for the dot at (x, y) within its cell. */
static uint8_t dot_bit(int x, int y)
{
    static const uint8_t left[4] = {0x01, 0x02, 0x04, 0x40};
    static const uint8_t right[4] = {0x08, 0x10, 0x20, 0x80};
    return x ? right[y] : left[y];
}

void dl_canvas_plot(dl_canvas *c, int x, int y, int role, char mark)
{
    if (x < 0 || y < 0 || x >= c->cw * c->dx || y >= c->ch * c->dy)
        return;
    size_t i = (size_t)(y / c->dy) * (size_t)c->cw + (size_t)(x / c->dx);
    c->bits[i] |= c->dx == 2 ? dot_bit(x % 2, y % 4) : 1;
    c->role[i] = (uint8_t)role;
    c->mark[i] = mark;
}

void dl_canvas_line(dl_canvas *c, int x0, int y0, int x1, int y1, int role, char mark)
{
    int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
    int dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    for (int n = 0; n < 4096; n++) {
        dl_canvas_plot(c, x0, y0, role, mark);
        if (x0 == x1 && y0 == y1)
            break;
        int e2 = 2 * err;
        if (e2 >= dy)
            err += dy, x0 += sx;
        if (e2 <= dx)
            err += dx, y0 += sy;
    }
}

void dl_canvas_draw(const dl_canvas *c, WINDOW *w, int top, int left)
{
    for (int r = 0; r < c->ch; r++) {
        for (int k = 0; k < c->cw; k++) {
            size_t i = (size_t)r * (size_t)c->cw + (size_t)k;
            if (!c->bits[i])
                continue;
            wattrset(w, dl_color(c->role[i]));
            if (c->dx == 2) {
                unsigned cp = 0x2800u + c->bits[i];
                char u[4] = {(char)(0xE0 | (cp >> 12)), (char)(0x80 | ((cp >> 6) & 0x3F)),
                             (char)(0x80 | (cp & 0x3F)), 0};
                mvwaddstr(w, top + r, left + k, u);
            } else {
                mvwaddch(w, top + r, left + k, (chtype)(unsigned char)c->mark[i]);
            }
        }
    }
    wattrset(w, A_NORMAL);
}
