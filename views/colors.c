/* colors.c - colour roles to curses pairs and attributes; Unicode or ASCII glyphs */
#include "views/colors.h"

#include <langinfo.h>
#include <stdlib.h>
#include <string.h>

#include <curses.h>

static int attrs[DL_COLOR_NROLES];
static int enabled;
static int unicode;

/* Role -> foreground, background (-1: terminal default), extra attribute. */
static const struct {
    short fg, bg;
    int attr;
    int mono; /* attribute without colours */
} theme[DL_COLOR_NROLES] = {
    [DL_COLOR_DEFAULT] = {-1, -1, 0, 0},
    [DL_COLOR_BORDER] = {COLOR_BLUE, -1, 0, 0},
    [DL_COLOR_TITLE] = {COLOR_CYAN, -1, A_BOLD, A_BOLD},
    [DL_COLOR_TITLE_FOCUS] = {COLOR_BLACK, COLOR_CYAN, A_BOLD, A_REVERSE},
    [DL_COLOR_STATUS] = {COLOR_BLACK, COLOR_CYAN, 0, A_REVERSE},
    [DL_COLOR_STATUS_KEY] = {COLOR_WHITE, -1, A_BOLD, A_BOLD},
    [DL_COLOR_HINT] = {COLOR_BLACK, COLOR_CYAN, 0, A_REVERSE},
    [DL_COLOR_LOSS] = {COLOR_YELLOW, -1, A_BOLD, A_BOLD},
    [DL_COLOR_VAL_LOSS] = {COLOR_MAGENTA, -1, A_BOLD, A_UNDERLINE},
    [DL_COLOR_ACC] = {COLOR_GREEN, -1, 0, 0},
    [DL_COLOR_VAL_ACC] = {COLOR_CYAN, -1, 0, A_UNDERLINE},
    [DL_COLOR_AXIS] = {COLOR_WHITE, -1, A_DIM, A_DIM},
    [DL_COLOR_METER_LOW] = {COLOR_GREEN, -1, 0, 0},
    [DL_COLOR_METER_MID] = {COLOR_YELLOW, -1, 0, A_BOLD},
    [DL_COLOR_METER_HIGH] = {COLOR_RED, -1, A_BOLD, A_BOLD},
    [DL_COLOR_GPU] = {COLOR_GREEN, -1, A_BOLD, A_BOLD},
    [DL_COLOR_WARN] = {COLOR_YELLOW, -1, A_BOLD, A_BOLD},
    [DL_COLOR_ERROR] = {COLOR_RED, -1, A_BOLD, A_BOLD | A_UNDERLINE},
    [DL_COLOR_NOTE] = {COLOR_CYAN, -1, 0, A_UNDERLINE},
    [DL_COLOR_OK] = {COLOR_GREEN, -1, A_BOLD, A_BOLD},
    [DL_COLOR_DIM] = {COLOR_WHITE, -1, A_DIM, A_DIM},
    [DL_COLOR_SELECT] = {COLOR_BLACK, COLOR_YELLOW, 0, A_REVERSE},
    [DL_COLOR_HEADER] = {COLOR_BLACK, COLOR_GREEN, 0, A_REVERSE},
    [DL_COLOR_RUN0] = {COLOR_YELLOW, -1, A_BOLD, A_BOLD},
    [DL_COLOR_RUN1] = {COLOR_CYAN, -1, A_BOLD, A_UNDERLINE},
    [DL_COLOR_RUN2] = {COLOR_MAGENTA, -1, A_BOLD, 0},
    [DL_COLOR_RUN3] = {COLOR_GREEN, -1, A_BOLD, A_BOLD | A_UNDERLINE},
    [DL_COLOR_RUN4] = {COLOR_RED, -1, A_BOLD, 0},
    [DL_COLOR_RUN5] = {COLOR_BLUE, -1, A_BOLD, A_BOLD},
    [DL_COLOR_RUN6] = {COLOR_WHITE, -1, A_BOLD, A_UNDERLINE},
    [DL_COLOR_RUN7] = {COLOR_YELLOW, -1, 0, 0},
    [DL_COLOR_RUN8] = {COLOR_CYAN, -1, 0, A_DIM},
    [DL_COLOR_RUN9] = {COLOR_MAGENTA, -1, 0, A_DIM | A_UNDERLINE},
    [DL_COLOR_RUN10] = {COLOR_GREEN, -1, 0, A_REVERSE},
    [DL_COLOR_RUN11] = {COLOR_RED, -1, 0, A_DIM | A_BOLD},
};

void dl_colors_init(void)
{
    const char *nc = getenv("NO_COLOR");
    enabled = has_colors() && !(nc && nc[0]);
    if (enabled && start_color() == ERR)
        enabled = 0;
    if (enabled)
        use_default_colors();
    for (int r = 0; r < DL_COLOR_NROLES; r++) {
        if (!enabled) {
            attrs[r] = theme[r].mono;
            continue;
        }
        if (r == DL_COLOR_DEFAULT) {
            attrs[r] = 0;
            continue;
        }
        short bg = theme[r].bg;
        if (COLORS < 8)
            bg = -1;
        init_pair((short)r, theme[r].fg, bg);
        attrs[r] = (int)COLOR_PAIR(r) | theme[r].attr;
    }
}

int dl_color(dl_color_role role) { return role >= 0 && role < DL_COLOR_NROLES ? attrs[role] : 0; }

int dl_colors_enabled(void) { return enabled; }

int dl_color_run(int k) { return DL_COLOR_RUN0 + ((k % 12) + 12) % 12; }

char dl_color_run_mark(int k) { return "*+xo#@%&=~$^"[((k % 12) + 12) % 12]; }

void dl_glyphs_init(void)
{
    const char *force = getenv("DLBENCH_ASCII");
    const char *term = getenv("TERM");
    const char *cs = nl_langinfo(CODESET);
    unicode = cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8"));
    if (!term || !strncmp(term, "vt", 2) || !strcmp(term, "dumb") || !strcmp(term, "linux") ||
        !strcmp(term, "ansi"))
        unicode = 0;
    if (force && force[0] && strcmp(force, "0"))
        unicode = 0;
}

int dl_glyphs_unicode(void) { return unicode; }
