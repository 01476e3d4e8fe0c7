/* control.h - RUN/control.sock: commands to a live training from `dlbench watch` (or any local client)
 *
 * The process that trains serves a Unix stream socket in the run folder
 * (mode 0600; a peer whose uid differs from ours, read with SO_PEERCRED,
 * is refused). The protocol is JSON lines: one object per line in, one
 * reply line out.
 *
 *   {"cmd":"pause"} {"cmd":"resume"} {"cmd":"stop"} {"cmd":"status"}
 *   {"cmd":"checkpoint"} or {"cmd":"checkpoint","name":"before-lr-drop"}
 *   {"cmd":"note","text":"..."}  {"cmd":"lr","value":0.01}
 *   {"cmd":"device","device":"cpu"|"cuda"}
 *
 * Replies: {"ok":true,...} or {"ok":false,"error":"..."}. A malformed
 * line (not JSON, unknown command, missing or wrong argument) gets an
 * error and changes nothing. Commands are queued on the trainer
 * (dl_trainer_post) and applied at the next step boundary; their effects
 * show in events.log.
 */
#ifndef DL_CONTROL_H
#define DL_CONTROL_H

#include <stddef.h>

#include "engine/train/trainer.h"

typedef struct dl_control dl_control;

/* Creates RUN/control.sock and a thread serving it for t (borrowed: stop
 * the server before destroying the trainer). Returns 0, or -1 with why
 * filled (path too long, bind failed...); the training goes on either way. */
int dl_control_start(dl_control **out, const char *run_dir, dl_trainer *t, char *why,
                     size_t why_size);
/* Stops the thread and removes the socket; accepts NULL. */
void dl_control_stop(dl_control *c);

/* Client side: connects to RUN/control.sock, sends line (a newline is
 * added), waits up to 3 s for the reply line. Returns 0 with the reply, or
 * -1 with the reason in reply. */
int dl_control_send(const char *run_dir, const char *line, char *reply, size_t size);

/* The reply to one request line (used by the server; exposed for tests). */
void dl_control_handle(dl_trainer *t, const char *line, char *reply, size_t size);

#endif
