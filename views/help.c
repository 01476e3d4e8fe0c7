/* help.c - the help screen: every key of the workbench and of watch */
#include <stdio.h>

#include "views/colors.h"
#include "views/views.h"

static const char *const keys[][2] = {
    {"F1 ?", "this help (again: back; Down scrolls)"},
    {"r", "start the training; after it ends, start it again"},
    {"Space p", "pause / resume"},
    {"g  c", "move the training to the GPU / CPU at the next step"},
    {"P", "parity check: 5 steps here and on the other device"},
    {"A", "what-if probes: 20 steps of each variant from this state, put back"},
    {"s", "checkpoint now"},
    {"n", "add a note to the run's events.log"},
    {"e", "edit k=v hyperparameters or --set fields (batch=64; lr live, the rest next start)"},
    {":", "Lua prompt: a line runs in the training's Lua state between two steps"},
    {"Tab  arrows", "move focus between panes / scroll the focused pane"},
    {"1-7", "zoom a pane: 1 loss 2 system 3 profile 4 log 5 runs 6 help 7 trials; again: back"},
    {"l", "loss chart: log scale on/off"},
    {"z", "loss chart: zoom to the last 50/200/1000 steps, then all"},
    {"/", "filter the focused table or log (empty: clear)"},
    {"F2  F3  F4", "runs screen / profile / trials of a study (the run's, else the newest)"},
    {"q  F10", "quit (asks while a training runs; it is stopped with a checkpoint)"},
    {"", "runs screen (F2)"},
    {"Up Down PgUp", "move the cursor (Home End: first, last)"},
    {"Space", "select / unselect the run (each keeps its colour and mark); u: none"},
    {"Enter", "open the run: config, summary, tags, events and notes, its curves"},
    {"c", "compare the selected runs: curves overlaid, what differs, deltas"},
    {"< >  I", "sort by the previous / next column (a hyperparameter too); I: reverse"},
    {"/", "filter: k=v words (lr=0.01, tag=best, status=failed) or text"},
    {"t", "tag the selected runs (or the one under the cursor); -TAG removes"},
    {"E", "export every metric of the selected runs to ./dlbench-export-TIME.csv"},
    {"m  M", "compare: the next / previous metric"},
    {"b", "compare: the next run as the baseline of the deltas"},
    {"S", "compare, run page: smoothing off / EMA 0.6 / 0.9 / 0.97 (raw line faint)"},
    {"x", "compare, run page: x axis step / epoch / samples / wall time"},
    {"G", "compare: groups off / seeds (runs differing only in seed) / by each "
          "hyperparameter that differs: mean line and min-max band"},
    {"Esc Enter", "compare, run page: back to the table; on the table: leave"},
    {"", "trials screen (F4)"},
    {"v", "table and best-so-far / parallel coordinates / parameter against objective"},
    {"p", "the scatter's parameter: the next one"},
    {"mouse",
     "click a run: select it; wheel: move / scroll; click a pane: focus (--no-mouse: off)"},
};

void dl_view_help(WINDOW *w, const dl_view_state *v, int watching)
{
    werase(w);
    dl_draw_frame(w, watching ? "6 Help (watch)" : "6 Help", v->focused);
    int rows = getmaxy(w) - 2;
    int y = 1;
    if (watching && y <= rows)
        dl_draw_text(w, y++, 2, dl_color(DL_COLOR_DIM),
                     "watch: keys act on the run through its control.sock when it is live");
    size_t n = sizeof keys / sizeof *keys;
    size_t first = v->scroll > 0 ? (size_t)v->scroll : 0;
    if (first > n - 1)
        first = n - 1;
    if (first == 0 && n > (size_t)rows && y <= rows)
        dl_draw_text(w, y++, 2, dl_color(DL_COLOR_DIM), "(Down scrolls: %zu keys)", n);
    for (size_t i = first; i < n && y <= rows; i++, y++) {
        if (!keys[i][0][0]) {
            dl_draw_text(w, y, 2, dl_color(DL_COLOR_TITLE), "%s", keys[i][1]);
            continue;
        }
        dl_draw_text(w, y, 2, dl_color(DL_COLOR_STATUS_KEY), "%-12s", keys[i][0]);
        dl_draw_text(w, y, 15, dl_color(DL_COLOR_DEFAULT), "%s", keys[i][1]);
    }
    if (y + 1 <= rows)
        dl_draw_text(w, y + 1, 2, dl_color(DL_COLOR_DIM),
                     "colours: NO_COLOR=1 turns them off; DLBENCH_ASCII=1 forces ASCII drawing");
}
