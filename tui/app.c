/* app.c - the curses main loop: layout, one doupdate a frame, keys to actions, prompts, resize, hangup */
#include "tui/app.h"

#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/rundir/records.h"
#include "views/colors.h"
#include "tui/runs_screen.h"
#include "tui/tables.h"
#include "views/views.h"

#define MIN_COLS 60
#define MIN_ROWS 16
#define FRAME_MS 100 /* 10 frames a second at most; never waits on the trainer */
#define NPANES 4     /* chart, system, profile, log */
#define HISTORY 32

enum { PANE_CHART, PANE_SYSTEM, PANE_PROFILE, PANE_LOG, PANE_RUNS, PANE_HELP, PANE_TRIALS, NWIN };

typedef enum {
    PROMPT_NONE,
    PROMPT_NOTE,
    PROMPT_HPARAMS,
    PROMPT_LUA,
    PROMPT_FILTER,
    PROMPT_TAG,
    PROMPT_QUIT
} prompt_kind;

static volatile sig_atomic_t got_winch, got_hup, got_int;

static void on_winch(int sig) { (void)sig, got_winch = 1; }
static void on_hup(int sig) { (void)sig, got_hup = 1; }
static void on_int(int sig) { (void)sig, got_int = 1; }

typedef struct app {
    const dl_app_ops *ops;
    dl_screen *scr; /* scr->tele: the snapshot the panes draw */
    double next_advice, next_trials;
    unsigned advised; /* advice kinds already written to the log (bits) */
    long events_seen;
    double sps_last; /* samples/s of the previous frame (device switches) */
    dl_trials_follow trials;
    dl_runs_screen *runs; /* F2's selection, sort, page and comparison */
    WINDOW *status, *hints, *pane[NWIN];
    int rows, cols;
    int zoom; /* -1: the overview; else the pane shown alone */
    int focus;
    dl_view_state vs[NWIN];
    int log_scale;
    long window;
    prompt_kind prompt;
    char buf[256];
    int len;
    char history[HISTORY][256];
    int nhist, hpos;
    int quitting;
    int dirty_layout;
} app;

static void free_windows(app *a)
{
    if (a->status)
        delwin(a->status);
    if (a->hints)
        delwin(a->hints);
    a->status = a->hints = NULL;
    for (int i = 0; i < NWIN; i++) {
        if (a->pane[i])
            delwin(a->pane[i]);
        a->pane[i] = NULL;
    }
}

/* Creates the windows for the current size and zoom. */
static void layout(app *a)
{
    free_windows(a);
    a->rows = LINES, a->cols = COLS;
    if (a->cols < MIN_COLS || a->rows < MIN_ROWS)
        return;
    a->status = newwin(1, a->cols, 0, 0);
    a->hints = newwin(1, a->cols, a->rows - 1, 0);
    int h = a->rows - 2, w = a->cols, top = 1;
    if (a->zoom >= 0) {
        a->pane[a->zoom] = newwin(h, w, top, 0);
        return;
    }
    int htop = a->rows >= 40 ? h * 3 / 5 : h / 2 + 1;
    int wsys = w >= 160 ? w * 2 / 5 : w >= 120 ? w / 3 : 34;
    a->pane[PANE_CHART] = newwin(htop, w - wsys, top, 0);
    a->pane[PANE_SYSTEM] = newwin(htop, wsys, top, w - wsys);
    int wprof = w / 2;
    a->pane[PANE_PROFILE] = newwin(h - htop, wprof, top + htop, 0);
    a->pane[PANE_LOG] = newwin(h - htop, w - wprof, top + htop, wprof);
}

static const char *prompt_label(prompt_kind k)
{
    switch (k) {
    case PROMPT_NOTE: return "note: ";
    case PROMPT_HPARAMS:
        return "k=v or a --set FIELD=VALUE (batch=64 val_every=3; lr applies now): ";
    case PROMPT_LUA: return "lua> ";
    case PROMPT_FILTER: return "filter (k=v, tag=T or text) /";
    case PROMPT_TAG: return "tag the selected runs (-TAG removes it): ";
    case PROMPT_QUIT:
        return "a training is running: stop it (checkpoint, summary) and quit? [y/N] ";
    default: return "";
    }
}

static void draw(app *a)
{
    const dl_screen *s = a->scr;
    dl_tele_state st = s->tele->run.state;
    if (!a->status) {
        dl_view_too_small(stdscr, MIN_COLS, MIN_ROWS);
        wnoutrefresh(stdscr);
        doupdate();
        return;
    }
    dl_view_status(a->status, s);
    wnoutrefresh(a->status);
    for (int i = 0; i < NWIN; i++) {
        WINDOW *w = a->pane[i];
        if (!w)
            continue;
        dl_view_state v = a->vs[i];
        v.focused = a->zoom < 0 ? a->focus == i : 0;
        v.log_scale = a->log_scale;
        v.window = a->window;
        switch (i) {
        case PANE_CHART: dl_view_chart(w, s, &v); break;
        case PANE_SYSTEM: dl_view_system(w, s, &v); break;
        case PANE_PROFILE: dl_view_profile(w, s, &v); break;
        case PANE_LOG: dl_view_log(w, s, &v); break;
        case PANE_RUNS: dl_view_runs(w, s, &v); break;
        case PANE_HELP: dl_view_help(w, &v, a->ops->watching); break;
        case PANE_TRIALS: dl_view_trials(w, s, &v); break;
        }
        wnoutrefresh(w);
    }
    char prompt[600];
    const char *p = NULL;
    if (a->prompt != PROMPT_NONE) {
        snprintf(prompt, sizeof prompt, "%s%s_", prompt_label(a->prompt), a->buf);
        p = prompt;
    } else if (a->quitting) {
        p = "stopping the training: checkpoint and summary...";
    }
    static const char *const ready[] = {"r",   "Start", "?",  "Help",   "e",   "Hparams",
                                        "F2",  "Runs",  "F4", "Trials", "Tab", "Focus",
                                        "1-7", "Zoom",  "q",  "Quit"};
    static const char *const running[] = {
        "Spc",  "Pause", "g",   "GPU",  "c",       "CPU",    "s",    "Ckpt", "n",
        "Note", ":",     "Lua", "e",    "Hparams", "?",      "Help", "l",    "Log",
        "z",    "Zoom",  "F2",  "Runs", "F4",      "Trials", "q",    "Quit"};
    static const char *const paused[] = {"Spc", "Resume", "s", "Ckpt",    "n", "Note",
                                         ":",   "Lua",    "e", "Hparams", "g", "GPU",
                                         "c",   "CPU",    "?", "Help",    "q", "Quit"};
    static const char *const done[] = {"r", "Restart", "n", "Note", "F2", "Runs", "F4", "Trials",
                                       "l", "Log",     "z", "Zoom", "?",  "Help", "q",  "Quit"};
    static const char *const watch[] = {"Spc",  "Pause", "g",    "GPU",  "c",  "CPU", "s",
                                        "Ckpt", "n",     "Note", "e",    "LR", "?",   "Help",
                                        "l",    "Log",   "F2",   "Runs", "q",  "Quit"};
    static const char *const runs_table[] = {"Spc", "Select", "Enter", "Open",   "c", "Compare",
                                             "<>",  "Sort",   "/",     "Filter", "t", "Tag",
                                             "?",   "Keys",   "Esc",   "Back"};
    static const char *const runs_cmp[] = {"m",      "Metric", "x",     "X-axis", "S",
                                           "Smooth", "G",      "Group", "b",      "Baseline",
                                           "l",      "Log",    "Esc",   "Back"};
    static const char *const runs_page[] = {"Spc", "Select", "c", "Compare", "x",   "X-axis",
                                            "S",   "Smooth", "l", "Log",     "Esc", "Back"};
#define N(x) (int)(sizeof x / sizeof *x)
    if (a->zoom == PANE_RUNS && s->runs.mode == DL_UI_TABLE)
        dl_view_hints(a->hints, runs_table, N(runs_table), p);
    else if (a->zoom == PANE_RUNS && s->runs.mode == DL_UI_DETAIL)
        dl_view_hints(a->hints, runs_page, N(runs_page), p);
    else if (a->zoom == PANE_RUNS)
        dl_view_hints(a->hints, runs_cmp, N(runs_cmp), p);
    else if (a->ops->watching && s->live && st <= DL_TELE_PAUSED)
        dl_view_hints(a->hints, watch, N(watch), p);
    else if (a->ops->watching)
        dl_view_hints(a->hints, done + 2, N(done) - 2, p);
    else if (st == DL_TELE_IDLE)
        dl_view_hints(a->hints, ready, N(ready), p);
    else if (st == DL_TELE_RUNNING || st == DL_TELE_PREPARING)
        dl_view_hints(a->hints, running, N(running), p);
    else if (st == DL_TELE_PAUSED)
        dl_view_hints(a->hints, paused, N(paused), p);
    else
        dl_view_hints(a->hints, done, N(done), p);
#undef N
    wnoutrefresh(a->hints);
    doupdate();
}

/* F4: which study, by the rule in app.h (ops->study, the run's, the newest). */
static void open_trials(app *a)
{
    const char *out = a->ops->out_dir ? a->ops->out_dir : "runs";
    char studies[1024], name[128] = "", prefer[128] = "";
    snprintf(studies, sizeof studies, "%s/studies", out);
    if (a->ops->study) {
        snprintf(prefer, sizeof prefer, "%s", a->ops->study);
    } else if (a->scr->tele->run.run_dir[0]) { /* a trial's run names its study */
        dl_run_config c;
        if (dl_records_config(a->scr->tele->run.run_dir, &c) == DL_OK)
            snprintf(prefer, sizeof prefer, "%s", c.study);
    }
    if (dl_tables_pick_study(studies, prefer[0] ? prefer : NULL, name, sizeof name) < 0) {
        dl_tables_trials_close(&a->trials);
        a->scr->trials.have = 0;
        snprintf(a->scr->trials.note, sizeof a->scr->trials.note,
                 "no study in %.80s/ (dlbench tune SCRIPT --out %.40s makes one)", studies, out);
        return;
    }
    if (strcmp(name, a->trials.name) || strcmp(studies, a->trials.studies)) {
        dl_tables_trials_close(&a->trials);
        snprintf(a->trials.name, sizeof a->trials.name, "%s", name);
        snprintf(a->trials.studies, sizeof a->trials.studies, "%s", studies);
    }
    a->next_trials = 0; /* sample it this frame */
}

static void set_zoom(app *a, int pane)
{
    a->zoom = a->zoom == pane ? -1 : pane;
    if (a->zoom == PANE_RUNS)
        dl_runs_screen_open(a->runs, &a->scr->runs, a->ops->out_dir ? a->ops->out_dir : "runs");
    if (a->zoom == PANE_TRIALS)
        open_trials(a);
    a->dirty_layout = 1;
}

/* The sample step of the loop: the owner's part, the telemetry copy, the
 * advisor, a device switch's before/after, the open table's refresh. */
static void sample(app *a)
{
    dl_screen *s = a->scr;
    if (a->ops->sample)
        a->ops->sample(a->ops->user, s);
    dl_telemetry_read(a->ops->tele, s->tele);
    const dl_telemetry_snapshot *t = s->tele;
    double now = dl_clock_mono_s();
    if (t->run.state == DL_TELE_IDLE || t->run.state == DL_TELE_PREPARING) {
        s->nadvice = 0, a->advised = 0, s->switched_from[0] = 0;
    } else if (now >= a->next_advice) {
        a->next_advice = now + 1;
        s->nadvice = dl_telemetry_advise(t, s->advice, DL_UI_ADVICE);
        /* each kind of advice once per run in the log, the first time it is seen */
        for (int i = 0; i < s->nadvice; i++) {
            unsigned bit = 1u << s->advice[i].kind;
            if (a->advised & bit)
                continue;
            a->advised |= bit;
            char text[600];
            snprintf(text, sizeof text, "%s: %s; %s", s->advice[i].title, s->advice[i].evidence,
                     s->advice[i].remedy);
            dl_telemetry_event(a->ops->tele, "advice", text);
        }
    }
    /* a hot switch: keep the speed before it for the status bar */
    long first = t->events_total - t->nevents;
    for (long k = a->events_seen > first ? a->events_seen : first; k < t->events_total; k++) {
        const dl_tele_event *e = &t->events[k - first];
        char from[16];
        const char *m = !strcmp(e->kind, "device") ? strstr(e->text, "moved from ") : NULL;
        if (m && sscanf(m, "moved from %15s", from) == 1) {
            snprintf(s->switched_from, sizeof s->switched_from, "%s", from);
            s->sps_before = a->sps_last;
        }
    }
    if (t->events_total < a->events_seen) /* a new run in the same store */
        s->switched_from[0] = 0;
    a->events_seen = t->events_total;
    a->sps_last = t->run.samples_per_s;
    if (a->zoom == PANE_RUNS)
        dl_runs_screen_sample(a->runs, &s->runs, a->vs[PANE_RUNS].filter);
    if (a->zoom == PANE_TRIALS && a->trials.name[0] && now >= a->next_trials) {
        a->next_trials = now + 1;
        dl_tables_sample_trials(&a->trials, &s->trials);
    }
}

static void submit(app *a)
{
    prompt_kind k = a->prompt;
    a->prompt = PROMPT_NONE;
    a->buf[a->len] = 0;
    if (k == PROMPT_FILTER) {
        int pane = a->zoom >= 0 ? a->zoom : a->focus;
        snprintf(a->vs[pane].filter, sizeof a->vs[pane].filter, "%.63s", a->buf);
        a->vs[pane].scroll = 0;
        return;
    }
    if (!a->len)
        return;
    if (k == PROMPT_TAG) {
        dl_runs_screen_tag(a->runs, &a->scr->runs, a->buf);
        return;
    }
    if (k == PROMPT_LUA) {
        if (!a->nhist || strcmp(a->history[(a->nhist - 1) % HISTORY], a->buf)) {
            snprintf(a->history[a->nhist % HISTORY], sizeof a->history[0], "%s", a->buf);
            a->nhist++;
        }
        a->ops->action(a->ops->user, DL_ACT_LUA, a->buf);
    } else if (k == PROMPT_NOTE) {
        a->ops->action(a->ops->user, DL_ACT_NOTE, a->buf);
    } else if (k == PROMPT_HPARAMS) {
        a->ops->action(a->ops->user, DL_ACT_HPARAMS, a->buf);
    }
}

static void open_prompt(app *a, prompt_kind k)
{
    a->prompt = k;
    a->len = 0;
    a->buf[0] = 0;
    a->hpos = a->nhist;
    if (k == PROMPT_FILTER) {
        int pane = a->zoom >= 0 ? a->zoom : a->focus;
        snprintf(a->buf, sizeof a->buf, "%s", a->vs[pane].filter);
        a->len = (int)strlen(a->buf);
    }
}

static void prompt_key(app *a, int ch)
{
    if (a->prompt == PROMPT_QUIT) {
        a->prompt = PROMPT_NONE;
        if (ch == 'y' || ch == 'Y') {
            a->quitting = 1;
            a->ops->action(a->ops->user, DL_ACT_QUIT, NULL);
        }
        return;
    }
    if (ch == 27) { /* Esc */
        a->prompt = PROMPT_NONE;
    } else if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
        submit(a);
    } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
        if (a->len > 0)
            a->buf[--a->len] = 0;
    } else if (a->prompt == PROMPT_LUA && (ch == KEY_UP || ch == KEY_DOWN) && a->nhist) {
        int oldest = a->nhist > HISTORY ? a->nhist - HISTORY : 0;
        if (ch == KEY_UP && a->hpos > oldest)
            a->hpos--;
        else if (ch == KEY_DOWN && a->hpos < a->nhist)
            a->hpos++;
        if (a->hpos == a->nhist)
            a->buf[0] = 0;
        else
            snprintf(a->buf, sizeof a->buf, "%s", a->history[a->hpos % HISTORY]);
        a->len = (int)strlen(a->buf);
    } else if (ch >= 32 && ch < 256 && ch != 127 && a->len < (int)sizeof a->buf - 1) {
        a->buf[a->len++] = (char)ch;
        a->buf[a->len] = 0;
    }
}

/* The mouse: on the runs table a click moves the cursor to the row and
 * selects it (as Space), the wheel moves the cursor; on another zoomed
 * pane the wheel scrolls it; in the overview a click focuses the pane
 * under the pointer. */
static void mouse(app *a)
{
    MEVENT ev;
    if (getmouse(&ev) != OK)
        return;
    int wheel = ev.bstate & BUTTON4_PRESSED ? -1 : ev.bstate & BUTTON5_PRESSED ? 1 : 0;
    int click = (ev.bstate & (BUTTON1_PRESSED | BUTTON1_CLICKED)) != 0;
    int pane = a->zoom >= 0 ? a->zoom : a->focus;
    if (!wheel && !click)
        return; /* a release, a drag */
    if (a->zoom == PANE_RUNS && a->pane[PANE_RUNS]) {
        dl_ui_runs *u = &a->scr->runs;
        if (wheel) {
            dl_runs_screen_key(a->runs, u, wheel < 0 ? KEY_UP : KEY_DOWN);
            return;
        }
        int body = getmaxy(a->pane[PANE_RUNS]) - 4; /* the view's rows between header and footer */
        int first = u->cursor >= body ? u->cursor - body + 1 : 0;
        int y = ev.y - getbegy(a->pane[PANE_RUNS]) - 2;
        if (u->mode == DL_UI_TABLE && y >= 0 && y < body && first + y < u->nshown)
            dl_runs_screen_click(a->runs, u, first + y);
        return;
    }
    if (wheel && a->zoom >= 0) {
        int up = pane == PANE_LOG || pane == PANE_TRIALS ? -wheel : wheel;
        a->vs[pane].scroll = a->vs[pane].scroll + up > 0 ? a->vs[pane].scroll + up : 0;
        return;
    }
    for (int i = 0; i < NPANES && a->zoom < 0; i++)
        if (a->pane[i] && wenclose(a->pane[i], ev.y, ev.x))
            a->focus = i;
}

/* One key: edits the open prompt, or is a command of the screen. A quit
 * (q, or y to the prompt while a training runs) sets a->quitting and hands
 * DL_ACT_QUIT to the owner; the loop ends once ops->done agrees. */
static void key(app *a, int ch)
{
    if (ch == KEY_RESIZE) /* resizeterm queues one; the SIGWINCH flag did the work */
        return;
    if (ch == KEY_MOUSE) {
        if (a->prompt == PROMPT_NONE)
            mouse(a);
        return;
    }
    if (a->prompt != PROMPT_NONE) {
        prompt_key(a, ch);
        return;
    }
    if (a->zoom == PANE_TRIALS && (ch == 'v' || ch == 'p')) {
        dl_ui_trials *t = &a->scr->trials;
        if (ch == 'v')
            t->view = (t->view + 1) % 3;
        else
            t->sparam = t->nparams ? (t->sparam + 1) % t->nparams : 0;
        return;
    }
    if (a->zoom == PANE_RUNS) {
        if (ch == 't') {
            open_prompt(a, PROMPT_TAG);
            return;
        }
        a->scr->runs.note[0] = ch == '/' ? 0 : a->scr->runs.note[0];
        if (dl_runs_screen_key(a->runs, &a->scr->runs, ch))
            return;
    }
    dl_tele_state st = a->scr->tele->run.state;
    int pane = a->zoom >= 0 ? a->zoom : a->focus;
    switch (ch) {
    case 'q':
    case KEY_F(10):
        if (a->quitting)
            return;
        if (!a->ops->watching && a->ops->busy(a->ops->user)) {
            a->prompt = PROMPT_QUIT;
        } else {
            a->quitting = 1;
            a->ops->action(a->ops->user, DL_ACT_QUIT, NULL);
        }
        break;
    case '?':
    case 'h':
    case KEY_F(1): set_zoom(a, PANE_HELP); break;
    case KEY_F(2): set_zoom(a, PANE_RUNS); break;
    case KEY_F(3): set_zoom(a, PANE_PROFILE); break;
    case KEY_F(4): set_zoom(a, PANE_TRIALS); break;
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7': set_zoom(a, ch - '1'); break;
    case 27:
        if (a->zoom >= 0)
            a->zoom = -1, a->dirty_layout = 1;
        break;
    case '\t': a->focus = (a->focus + 1) % NPANES; break;
    case KEY_BTAB: a->focus = (a->focus + NPANES - 1) % NPANES; break;
    case KEY_RIGHT:
        if (a->zoom < 0)
            a->focus = (a->focus + 1) % NPANES;
        break;
    case KEY_LEFT:
        if (a->zoom < 0)
            a->focus = (a->focus + NPANES - 1) % NPANES;
        break;
    case KEY_UP:
        if (pane == PANE_LOG || pane == PANE_TRIALS)
            a->vs[pane].scroll++;
        else if (a->vs[pane].scroll > 0)
            a->vs[pane].scroll--;
        break;
    case KEY_DOWN:
        if (pane == PANE_LOG || pane == PANE_TRIALS) {
            if (a->vs[pane].scroll > 0)
                a->vs[pane].scroll--;
        } else {
            a->vs[pane].scroll++;
        }
        break;
    case KEY_PPAGE:
        if (pane == PANE_LOG || pane == PANE_TRIALS)
            a->vs[pane].scroll += 10;
        break;
    case KEY_NPAGE:
        a->vs[pane].scroll = a->vs[pane].scroll > 10 ? a->vs[pane].scroll - 10 : 0;
        break;
    case 'l': a->log_scale = !a->log_scale; break;
    case 'z':
        a->window = a->window == 0 ? 1000 : a->window == 1000 ? 200 : a->window == 200 ? 50 : 0;
        break;
    case '/': open_prompt(a, PROMPT_FILTER); break;
    case 'r':
        if (!a->ops->watching)
            a->ops->action(a->ops->user, DL_ACT_START, NULL);
        break;
    case ' ':
    case 'p':
        a->ops->action(a->ops->user, DL_ACT_PAUSE, st == DL_TELE_PAUSED ? "resume" : "pause");
        break;
    case 'g': a->ops->action(a->ops->user, DL_ACT_GPU, NULL); break;
    case 'c': a->ops->action(a->ops->user, DL_ACT_CPU, NULL); break;
    case 'P': a->ops->action(a->ops->user, DL_ACT_PARITY, NULL); break;
    case 'A': a->ops->action(a->ops->user, DL_ACT_PROBE, NULL); break;
    case 's': a->ops->action(a->ops->user, DL_ACT_CHECKPOINT, NULL); break;
    case 'n': open_prompt(a, PROMPT_NOTE); break;
    case 'e': open_prompt(a, PROMPT_HPARAMS); break;
    case ':': open_prompt(a, PROMPT_LUA); break;
    default: break;
    }
}

static void resize(app *a)
{
    struct winsize ws;
    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0)
        resizeterm(ws.ws_row, ws.ws_col);
    clearok(curscr, TRUE);
    werase(stdscr);
    wnoutrefresh(stdscr);
    a->dirty_layout = 1;
}

/* The handlers' flags are set from here on; the old handlers come back
 * in signals_restore. */
typedef struct saved_signals {
    struct sigaction winch, hup, intr, term;
} saved_signals;

static void signals_install(saved_signals *old)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, &old->winch);
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, &old->hup);
    sa.sa_handler = on_int;
    sigaction(SIGINT, &sa, &old->intr);
    sigaction(SIGTERM, &sa, &old->term);
    signal(SIGPIPE, SIG_IGN);
}

/* After a hangup SIGHUP stays ignored: the terminal is gone, the process
 * goes on (a training runs to its end). */
static void signals_restore(const saved_signals *old, dl_app_end end)
{
    sigaction(SIGWINCH, &old->winch, NULL);
    sigaction(SIGINT, &old->intr, NULL);
    sigaction(SIGTERM, &old->term, NULL);
    if (end != DL_APP_HANGUP)
        sigaction(SIGHUP, &old->hup, NULL);
    else
        signal(SIGHUP, SIG_IGN);
}

/* Curses on term_fd (a dup, written through *term): keys unbuffered and
 * unechoed, keypad on, no cursor, wgetch never waits. NULL with the reason
 * on stderr when the terminal cannot be used. */
static SCREEN *screen_start(int term_fd, FILE **term, int mouse)
{
    *term = fdopen(dup(term_fd), "w");
    SCREEN *scr = *term ? newterm(NULL, *term, stdin) : NULL;
    if (!scr) {
        fprintf(stderr, "dlbench: cannot start the screen (TERM=%s)\n",
                getenv("TERM") ? getenv("TERM") : "unset");
        if (*term)
            fclose(*term);
        return NULL;
    }
    set_term(scr);
    dl_colors_init();
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    wtimeout(stdscr, 0);
    if (mouse) { /* clicks and the wheel, without drag reports */
        mousemask(BUTTON1_CLICKED | BUTTON1_PRESSED | BUTTON4_PRESSED | BUTTON5_PRESSED, NULL);
        mouseinterval(0);
    }
    return scr;
}

/* One turn of the loop: the signal flags, the layout, sample, draw, then
 * the keys that came within a frame. Returns 0 to go on, 1 with *end set
 * to leave. */
static int turn(app *a, dl_app_end *end)
{
    const dl_app_ops *ops = a->ops;
    if (got_hup) {
        *end = DL_APP_HANGUP;
        return 1;
    }
    if (got_int && !a->quitting) {
        got_int = 0;
        a->quitting = 1;
        ops->action(ops->user, DL_ACT_QUIT, NULL);
    }
    if (got_winch) {
        got_winch = 0;
        resize(a);
    }
    if (a->dirty_layout || a->rows != LINES || a->cols != COLS) {
        a->dirty_layout = 0;
        werase(stdscr);
        wnoutrefresh(stdscr);
        layout(a);
    }
    sample(a);
    a->scr->stopping = a->quitting;
    draw(a);
    if (a->quitting && ops->done(ops->user)) {
        *end = DL_APP_QUIT;
        return 1;
    }
    /* wait for a key or the next frame */
    struct pollfd p = {STDIN_FILENO, POLLIN, 0};
    int r = poll(&p, 1, FRAME_MS);
    if (r > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)) && !(p.revents & POLLIN)) {
        *end = DL_APP_HANGUP; /* the terminal is gone without a signal */
        return 1;
    }
    int ch, n = 0;
    while (n++ < 64 && (ch = wgetch(stdscr)) != ERR)
        key(a, ch);
    return 0;
}

static void app_free(app *a)
{
    dl_runs_screen_destroy(a->runs, &a->scr->runs);
    dl_tables_trials_close(&a->trials);
    dl_telemetry_snapshot_destroy(a->scr->tele);
    free(a->scr);
}

dl_app_end dl_app_run(const dl_app_ops *ops, int term_fd)
{
    app a;
    memset(&a, 0, sizeof a);
    a.ops = ops;
    a.zoom = -1;
    a.scr = calloc(1, sizeof *a.scr);
    if (a.scr)
        a.scr->tele = dl_telemetry_snapshot_create();
    a.runs = dl_runs_screen_create();
    if (!a.scr || !a.scr->tele || !a.runs) {
        if (a.scr)
            dl_telemetry_snapshot_destroy(a.scr->tele);
        free(a.scr);
        free(a.runs);
        return DL_APP_ERROR;
    }
    setlocale(LC_ALL, "");
    dl_glyphs_init();

    saved_signals old;
    signals_install(&old);
    FILE *term;
    SCREEN *scr = screen_start(term_fd, &term, !ops->no_mouse);
    if (!scr) {
        app_free(&a);
        return DL_APP_ERROR;
    }
    if (ops->open_trials) {
        a.zoom = -1;
        set_zoom(&a, PANE_TRIALS);
    }
    layout(&a);

    dl_app_end end = DL_APP_QUIT;
    while (!turn(&a, &end))
        ;
    free_windows(&a);
    if (end != DL_APP_HANGUP) /* after a hangup: release curses without drawing */
        endwin();
    delscreen(scr);
    fclose(term);
    signals_restore(&old, end);
    app_free(&a);
    return end;
}
