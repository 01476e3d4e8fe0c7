/* lua_prompt.h - one line of Lua run in a live training's own Lua state (the workbench's `:` prompt) */
#ifndef DL_LUA_PROMPT_H
#define DL_LUA_PROMPT_H

#include <stddef.h>

#include "scripting/session.h"

/* Runs line in the session's Lua state, on the training thread, between
 * two steps (call it from the on_idle sink). The line is tried first as an
 * expression ("run.lr"), then as a statement ("run.set_lr(0.01)"). A global
 * `run` gives: step, epoch, lr, base_lr, device (values), set_lr(x),
 * note(text), checkpoint([name]), pause(), stop(), params() (names),
 * norm(name) (L2 norm of a parameter), param(name) (a tensor copy),
 * profiler([on]) (toggle or set; returns the new state), sample{prompt,
 * tokens, temperature, top_k, seed} (a language model's text, from the
 * model as it is now: scripting/session_sample.h). The script's own
 * globals are there too. Runs under an instruction budget; any error is
 * caught. Returns 0 with the results (tostring, tab separated; "" for
 * none) in out, or -1 with the error message in out. Never stops the
 * training by itself. */
int dl_session_eval(dl_session *s, const char *line, char *out, size_t size);

#endif
