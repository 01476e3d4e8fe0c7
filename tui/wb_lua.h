/* wb_lua.h - the workbench's Lua prompt queue: lines typed on the screen, run on the training thread */
#ifndef DL_WB_LUA_H
#define DL_WB_LUA_H

#include "scripting/session.h"
#include "engine/observe/telemetry.h"

typedef struct dl_wb_lua dl_wb_lua;

dl_wb_lua *dl_wb_lua_create(void);
void dl_wb_lua_destroy(dl_wb_lua *q); /* accepts NULL */
/* Queues a line (main thread). Returns -1 when 8 lines already wait. */
int dl_wb_lua_push(dl_wb_lua *q, const char *line);
/* Runs the queued lines in s's Lua state (training thread, from on_idle);
 * results and errors go to the telemetry's events as "lua" / "lua error". */
void dl_wb_lua_poll(dl_wb_lua *q, dl_session *s, dl_telemetry *tele);

#endif
