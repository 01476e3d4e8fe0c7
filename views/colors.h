/* colors.h - colour roles and glyph sets for the workbench (themes, NO_COLOR, ASCII terminals)
 *
 * Views ask for a role (DL_COLOR_LOSS), never a colour pair: the mapping to
 * pairs and attributes lives in colors.c, so a monochrome terminal or
 * NO_COLOR gets bold/reverse/underline instead, for free. Glyphs likewise:
 * braille and block characters on a UTF-8 terminal, plain ASCII on a vt100
 * or in a non-UTF-8 locale.
 */
#ifndef DL_COLORS_H
#define DL_COLORS_H

typedef enum {
    DL_COLOR_DEFAULT,
    DL_COLOR_BORDER,
    DL_COLOR_TITLE,
    DL_COLOR_TITLE_FOCUS,
    DL_COLOR_STATUS,     /* the top status bar */
    DL_COLOR_STATUS_KEY, /* a key in the hint line */
    DL_COLOR_HINT,       /* the hint line */
    DL_COLOR_LOSS,       /* training loss */
    DL_COLOR_VAL_LOSS,
    DL_COLOR_ACC,
    DL_COLOR_VAL_ACC,
    DL_COLOR_AXIS,
    DL_COLOR_METER_LOW,
    DL_COLOR_METER_MID,
    DL_COLOR_METER_HIGH,
    DL_COLOR_GPU,
    DL_COLOR_WARN,
    DL_COLOR_ERROR,
    DL_COLOR_NOTE,
    DL_COLOR_OK,
    DL_COLOR_DIM,
    DL_COLOR_SELECT,
    DL_COLOR_HEADER, /* table headers */
    DL_COLOR_RUN0,   /* the runs compared: one role per selection slot (DL_COLOR_RUN0 + k) */
    DL_COLOR_RUN1,
    DL_COLOR_RUN2,
    DL_COLOR_RUN3,
    DL_COLOR_RUN4,
    DL_COLOR_RUN5,
    DL_COLOR_RUN6,
    DL_COLOR_RUN7,
    DL_COLOR_RUN8,
    DL_COLOR_RUN9,
    DL_COLOR_RUN10,
    DL_COLOR_RUN11,
    DL_COLOR_NROLES
} dl_color_role;

/* Sets up pairs after initscr(): colours when the terminal has them and
 * NO_COLOR is unset or empty, attributes otherwise. */
void dl_colors_init(void);
/* The curses attribute for a role (pair and bold/reverse/dim). */
int dl_color(dl_color_role role);
int dl_colors_enabled(void);
/* The role and the ASCII mark of selection slot k (0..11): the colour a
 * selected run keeps, and the character that tells it apart without one. */
int dl_color_run(int k);
char dl_color_run_mark(int k);

/* Decides the glyph set before initscr(): Unicode (braille, blocks, box
 * lines) when the locale is UTF-8 and TERM is not a vt100/vt220/linux/dumb
 * console; ASCII otherwise. DLBENCH_ASCII=1 forces ASCII. */
void dl_glyphs_init(void);
int dl_glyphs_unicode(void);

#endif
