/* app.h - the curses main loop shared by the workbench and watch: layout, frames, keys, prompts, signals
 *
 * The loop owns curses (only it touches the screen). Each frame it asks
 * the owner to sample (ops->sample), copies the run's telemetry into a
 * snapshot (dl_telemetry_read), runs the advisor over it (once a second),
 * re-reads the runs table or the study when their screen shows, lays the
 * panes out for the terminal size and zoom, draws each pane into its own
 * window (wnoutrefresh) and shows them with one doupdate. Keys become
 * actions handed to ops->action; text prompts (note, hyperparameters, Lua,
 * filter) are edited in the hint line. SIGWINCH and SIGHUP handlers only
 * set flags; the loop does the work.
 */
#ifndef DL_APP_H
#define DL_APP_H

#include "engine/observe/telemetry.h"
#include "views/views.h"

typedef enum {
    DL_ACT_START,      /* r */
    DL_ACT_PAUSE,      /* Space, p: toggles */
    DL_ACT_GPU,        /* g */
    DL_ACT_CPU,        /* c */
    DL_ACT_PARITY,     /* P: parity check against the other device */
    DL_ACT_PROBE,      /* A: what-if probes between two steps */
    DL_ACT_CHECKPOINT, /* s */
    DL_ACT_NOTE,       /* n: arg is the text */
    DL_ACT_HPARAMS,    /* e: arg is "k=v ..." */
    DL_ACT_LUA,        /* ':': arg is a Lua line */
    DL_ACT_QUIT        /* q confirmed */
} dl_action;

typedef struct dl_app_ops {
    void *user;
    dl_telemetry *tele;  /* the run the panes draw */
    const char *out_dir; /* run folders (F2); studies in out_dir/studies (F4) */
    const char *study;   /* F4's study; NULL: the run's, else the newest */
    int open_trials;     /* start on the trials screen */
    /* once a frame, before the copy: the owner's part of the screen (source,
     * script, live, prof_note), and its own sampling (watch: the files) */
    void (*sample)(void *user, dl_screen *s);
    void (*action)(void *user, dl_action a, const char *arg);
    int (*busy)(void *user); /* a training runs: q asks first */
    int (*done)(void *user); /* after QUIT: may the loop end? */
    int watching;            /* watch: keys go to the socket */
    int no_mouse;            /* --no-mouse: curses leaves the mouse to the terminal */
} dl_app_ops;

typedef enum { DL_APP_QUIT, DL_APP_HANGUP, DL_APP_ERROR } dl_app_end;

/* Runs the loop until quit (after ops->done) or a hangup. On HANGUP the
 * terminal is gone: curses is ended without drawing. term_fd: the
 * terminal's output (the caller may have redirected stdout). */
dl_app_end dl_app_run(const dl_app_ops *ops, int term_fd);

#endif
