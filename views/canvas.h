/* canvas.h - a dot canvas for the charts: braille cells on UTF-8 terminals, one mark a cell in ASCII
 *
 * A canvas is cw x ch cells; each cell holds 2x4 dots (braille) or one
 * dot (ASCII, or when the caller asks for marks so that series stay apart
 * without colour). A cell keeps the role and mark of the last series that
 * touched it. The loss chart (chart.c) and the overlay of runs
 * (overlay.c) draw on it.
 */
#ifndef DL_CANVAS_H
#define DL_CANVAS_H

#include <stdint.h>

#include <curses.h>

typedef struct dl_canvas {
    int cw, ch, dx, dy; /* cells, dots per cell */
    uint8_t *bits;
    uint8_t *role; /* colour role of the last series to touch the cell */
    char *mark;    /* ASCII: the character of the last series */
} dl_canvas;

/* Allocates a canvas of cw x ch cells; marks != 0 forces one dot a cell
 * (ASCII marks) even on a braille terminal. Returns 0 when out of memory
 * (dl_canvas_done still frees what was made). */
int dl_canvas_init(dl_canvas *c, int cw, int ch, int marks);
void dl_canvas_done(dl_canvas *c);
/* One dot at (x, y) in dots, clipped. */
void dl_canvas_plot(dl_canvas *c, int x, int y, int role, char mark);
/* A straight line of dots from (x0, y0) to (x1, y1). */
void dl_canvas_line(dl_canvas *c, int x0, int y0, int x1, int y1, int role, char mark);
/* Draws the touched cells at (top, left) of w. */
void dl_canvas_draw(const dl_canvas *c, WINDOW *w, int top, int left);

#endif
