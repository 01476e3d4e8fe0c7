/* lua_internal.h - shared helpers of the Lua bindings (private to scripting/) */
#ifndef DL_LUA_INTERNAL_H
#define DL_LUA_INTERNAL_H

#include <lauxlib.h>
#include <lua.h>

#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "scripting/script.h"

/* Metatable names. */
#define DL_LAYER_MT "dlbench.layer"
#define DL_LOSS_MT "dlbench.loss"
#define DL_OPTIM_MT "dlbench.optimizer"
#define DL_SCHED_MT "dlbench.schedule"
#define DL_DATA_MT "dlbench.data"
#define DL_TENSOR_MT "dlbench.tensor"
#define DL_CALLBACK_MT "dlbench.callback"
#define DL_EXPERIMENT_MT "dlbench.experiment"
#define DL_FROM_RUN_MT "dlbench.from_run"
#define DL_STUDY_MT "dlbench.study"
#define DL_HPARAMS_MT "dlbench.hparams"
#define DL_RUN_MT "dlbench.run"
#define DL_TRIAL_MT "dlbench.trial"
#define DL_MEMSTUDY_MT "dlbench.memory_study"

/* A layer held by Lua. l is NULL once a container or the model took it
 * (text keeps its description for printing). */
typedef struct lua_layer {
    dl_layer *l;
    char text[160];
} lua_layer;

/* Raises "FILE:LINE: bad argument #arg (what) to fn: expected X, got Y".
 * The position is the script's line that called the binding. */
int dl_lua_argerror(lua_State *L, const char *fn, int arg, const char *what, const char *expected);
/* The same for a field of an options table: "bad field 'name' to fn". */
int dl_lua_fielderror(lua_State *L, const char *fn, const char *field, const char *expected);
/* Raises "FILE:LINE: fn: message" (printf-style). */
int dl_lua_error(lua_State *L, const char *fmt, ...);

/* Option tables: arg must be a table (or absent when optional). Each getter
 * reads field name, raising a named error when it has the wrong type. They
 * record the field as known; dl_lua_opt_check then rejects any other key,
 * listing the known ones (catches typos such as "momentun"). */
typedef struct dl_lua_opts {
    lua_State *L;
    const char *fn;
    int idx; /* absolute index of the table, 0 when absent */
    const char *known[32];
    int nknown;
} dl_lua_opts;
void dl_lua_opt_begin(dl_lua_opts *o, lua_State *L, const char *fn, int idx, int required);
double dl_lua_opt_number(dl_lua_opts *o, const char *name, double def);
/* A number > 0 (or >= 0 when zero_ok). */
double dl_lua_opt_positive(dl_lua_opts *o, const char *name, double def, int zero_ok);
long dl_lua_opt_integer(dl_lua_opts *o, const char *name, long def, long min);
/* The same for int fields: at most INT_MAX. */
int dl_lua_opt_int(dl_lua_opts *o, const char *name, int def, int min);
int dl_lua_opt_boolean(dl_lua_opts *o, const char *name, int def);
/* Copies the string into buf (def when absent). */
const char *dl_lua_opt_string(dl_lua_opts *o, const char *name, const char *def, char *buf,
                              size_t size);
/* Pushes the field's value (nil when absent) and marks it known. */
int dl_lua_opt_push(dl_lua_opts *o, const char *name);
void dl_lua_opt_check(dl_lua_opts *o);

/* Checks that value idx is an integer >= min (named argument error). */
long dl_lua_check_int(lua_State *L, const char *fn, int arg, const char *what, long min);

/* Sub-modules: each pushes its table. */
int dl_lua_open_nn(lua_State *L);
int dl_lua_open_optim(lua_State *L);
int dl_lua_open_data(lua_State *L);
int dl_lua_open_tensor(lua_State *L); /* registers the metatable, pushes dl.tensor functions */

/* A study objective's trial (lua_tune.c). t is the study's trial (owned
 * by whoever opened the study, which outlives the Lua state), or NULL for
 * a fixed trial whose values are user value 1: a table name -> value, the
 * k=v overrides' texts when from_overrides (used ones are marked in the
 * registry's dlbench.hp_used). params: what was suggested, in order. */
typedef struct dl_lua_trial {
    struct dl_trial *t;
    int number; /* -1 for a fixed trial */
    int from_overrides;
    int prune_said; /* should_prune() answered true */
    int np;
    dl_hparam params[DL_MAX_TRIAL_PARAMS];
} dl_lua_trial;
/* Pushes a trial object; fixed_idx: the fixed values' table (0 with t). */
dl_lua_trial *dl_lua_push_trial(lua_State *L, struct dl_trial *t, int fixed_idx,
                                int from_overrides);
/* Registers the trial and memory-study metatables; pushes {fixed_trial,
 * memory_study} for the dlbench module. */
int dl_lua_open_tune(lua_State *L);

/* Conversions used by the experiment reader. */
lua_layer *dl_lua_test_layer(lua_State *L, int idx);
int dl_lua_get_loss(lua_State *L, int idx, dl_loss *out);
int dl_lua_get_optim(lua_State *L, int idx, dl_optim *out);
int dl_lua_get_schedule(lua_State *L, int idx, dl_schedule *out);
int dl_lua_get_data(lua_State *L, int idx, dl_data_desc *out);

/* Pushes a new f32 tensor of the given shape (zeroed); returns its data. */
float *dl_lua_push_tensor(lua_State *L, const dl_shape *shape);

/* The instruction counter shared by describing and callbacks. */
void dl_lua_budget(lua_State *L, long instructions);
/* The script's Lua state (the Lua prompt runs lines in it). */
lua_State *dl_script_lua_state(dl_script *s);

#endif
