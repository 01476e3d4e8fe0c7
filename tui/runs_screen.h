/* runs_screen.h - the runs screen (F2): selection, sort, filter, tags, a run's page, the comparison
 *
 * The state behind views/views.h dl_ui_runs, on the main loop's thread.
 * The table is read when the screen opens and every two seconds while it
 * shows; a run folder that went away is dropped (from the selection too)
 * with a note. The selection is kept by folder name, so a run keeps its
 * colour while the table is re-sorted, filtered or re-read.
 */
#ifndef DL_RUNS_SCREEN_H
#define DL_RUNS_SCREEN_H

#include "views/views.h"

typedef struct dl_runs_screen dl_runs_screen;

dl_runs_screen *dl_runs_screen_create(void);
/* Frees the screen and ui's rows; accepts NULL. */
void dl_runs_screen_destroy(dl_runs_screen *rs, dl_ui_runs *ui);
/* The screen opened on runs_dir: the table read now. */
void dl_runs_screen_open(dl_runs_screen *rs, dl_ui_runs *ui, const char *runs_dir);
/* Once a frame while it shows: the filter applied (k=v words, else text),
 * the table re-read when due, compared runs re-read when their metrics
 * grew, gone folders dropped. */
void dl_runs_screen_sample(dl_runs_screen *rs, dl_ui_runs *ui, const char *filter);
/* A key of the screen (curses codes); 1 when the screen used it, 0 to
 * leave it to the workbench (q, ?, F-keys, /, t, Esc on the table). */
int dl_runs_screen_key(dl_runs_screen *rs, dl_ui_runs *ui, int ch);
/* A click on the table's row shown-index i: the cursor moves there and
 * the run is selected or unselected (as Space, without moving on). */
void dl_runs_screen_click(dl_runs_screen *rs, dl_ui_runs *ui, int i);
/* Tags the selected runs, or the run under the cursor when none is
 * selected ("-tag" removes it); the result goes to ui->note. */
void dl_runs_screen_tag(dl_runs_screen *rs, dl_ui_runs *ui, const char *tag);

#endif
