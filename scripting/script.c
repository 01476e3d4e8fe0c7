/* script.c - the dlbench Lua module and experiment scripts: hparams, experiment, study, callbacks, running a script */
#include "scripting/script.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include "engine/base/error.h"
#include "engine/data/open.h"
#include "engine/tune/tune.h"
#include "scripting/lua_internal.h"
#include "engine/base/version.h"

#define DEFAULT_DESCRIBE_LIMIT 200000000L
#define CALLBACK_LIMIT 50000000L
#define HOOK_EVERY 1000

static volatile sig_atomic_t interrupted;

/* The most a script's Lua state may hold: describing an experiment needs
 * kilobytes, callbacks that copy parameters some megabytes. */
#define LUA_MEMORY_LIMIT ((size_t)1 << 30)

struct dl_script {
    lua_State *L;
    char path[1024];
    dl_experiment exp;
    int exp_ref;         /* the experiment's table, kept for callbacks */
    long budget, spent;  /* instruction budget of the current Lua call */
    size_t lua_bytes;    /* what the Lua state holds (LUA_MEMORY_LIMIT) */
    dl_lua_trial *trial; /* the objective's trial (anchored by trial_ref) */
    int trial_ref;
};

void dl_script_interrupt(void) { interrupted = 1; }
void dl_script_clear_interrupt(void) { interrupted = 0; }

static dl_script *script_of(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, "dlbench.script");
    dl_script *s = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return s;
}

/* --- the count hook: instruction budget and interruption ------------------ */

static void count_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    dl_script *s = script_of(L);
    if (interrupted) {
        luaL_where(L, 0);
        lua_pushliteral(L, "interrupted");
        lua_concat(L, 2);
        lua_error(L);
    }
    if (!s)
        return;
    s->spent += HOOK_EVERY;
    if (s->budget > 0 && s->spent > s->budget) {
        luaL_where(L, 0); /* in a hook, level 0 is the running Lua function */
        lua_pushfstring(L,
                        "stopped after %d million instructions: the code does not finish "
                        "(an endless loop?); scripts only describe the experiment, C trains it",
                        (int)(s->budget / 1000000));
        lua_concat(L, 2);
        lua_error(L);
    }
}

void dl_lua_budget(lua_State *L, long instructions)
{
    dl_script *s = script_of(L);
    if (s) {
        s->budget = instructions;
        s->spent = 0;
    }
    lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
}

static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Runs the function on the stack (below its nargs arguments) with a
 * traceback and the given budget; on error sets dl_error from it. */
static int protected_call(dl_script *s, int nargs, int nres, long budget)
{
    lua_State *L = s->L;
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, traceback);
    lua_insert(L, base);
    dl_lua_budget(L, budget);
    int rc = lua_pcall(L, nargs, nres, base);
    lua_sethook(L, NULL, 0, 0);
    lua_remove(L, base);
    if (rc == LUA_ERRMEM) {
        dl_error(DL_EINVAL, "%s: the script needs more than %zu MiB of Lua memory (%s)", s->path,
                 (size_t)(LUA_MEMORY_LIMIT >> 20),
                 lua_tostring(L, -1) ? lua_tostring(L, -1) : "not enough memory");
        lua_pop(L, 1);
        return DL_EINVAL;
    }
    if (rc != LUA_OK) {
        dl_error(DL_EINVAL, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
        lua_pop(L, 1);
        return DL_EINVAL;
    }
    return DL_OK;
}

/* --- dl.hparams ----------------------------------------------------------- */

/* Registry tables: overrides (name -> "value"), used (name -> true),
 * declared (name -> resolved value). */
static void registry_table(lua_State *L, const char *name)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, name) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, name);
    }
}

/* Lists the keys of table idx, sorted, as "a, b, c". */
static void push_key_list(lua_State *L, int idx)
{
    idx = lua_absindex(L, idx);
    const char *keys[256];
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING && n < 256)
            keys[n++] = lua_tostring(L, -1); /* anchored by the table */
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
            const char *t = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = t;
        }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; i < n; i++) {
        if (i)
            luaL_addstring(&b, ", ");
        luaL_addstring(&b, keys[i]);
    }
    if (!n)
        luaL_addstring(&b, "none declared");
    luaL_pushresult(&b);
}

static int hp_index(lua_State *L)
{
    const char *k = lua_tostring(L, 2);
    registry_table(L, "dlbench.hp_declared");
    push_key_list(L, -1);
    return dl_lua_error(L, "unknown hyperparameter '%s' (declared: %s)", k ? k : "?",
                        lua_tostring(L, -1));
}

static int hp_newindex(lua_State *L)
{
    const char *k = lua_tostring(L, 2);
    return dl_lua_error(L,
                        "hyperparameters are read-only: declare '%s' in dl.hparams{...} and "
                        "override it as %s=VALUE on the command line",
                        k ? k : "?", k ? k : "NAME");
}

/* Converts override text for hyperparameter name to the type of the value
 * at idx (the declared default); pushes the converted value. */
static void push_override(lua_State *L, const char *name, int idx, const char *text)
{
    char *end;
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            errno = 0;
            long long v = strtoll(text, &end, 0);
            if (*text && !*end && !errno) {
                lua_pushinteger(L, v);
                return;
            }
            double d = strtod(text, &end);
            /* 1e3 is an integer; 1.8e32 is none that fits (and casting it is undefined) */
            if (*text && !*end && d >= -0x1p63 && d < 0x1p63 && d == (double)(long long)d) {
                lua_pushinteger(L, (lua_Integer)d);
                return;
            }
            dl_lua_error(L, "override %s=%s: '%s' is declared as an integer (default %lld)", name,
                         text, name, (long long)lua_tointeger(L, idx));
        } else {
            double d = strtod(text, &end);
            if (*text && !*end) {
                lua_pushnumber(L, d);
                return;
            }
            dl_lua_error(L, "override %s=%s: '%s' is declared as a number (default %g)", name, text,
                         name, lua_tonumber(L, idx));
        }
        break;
    case LUA_TBOOLEAN:
        if (!strcmp(text, "true") || !strcmp(text, "1") || !strcmp(text, "yes"))
            lua_pushboolean(L, 1);
        else if (!strcmp(text, "false") || !strcmp(text, "0") || !strcmp(text, "no"))
            lua_pushboolean(L, 0);
        else
            dl_lua_error(L, "override %s=%s: '%s' is declared as a boolean (true or false)", name,
                         text, name);
        break;
    default: lua_pushstring(L, text); break;
    }
}

/* dl.hparams { name = default, ... }: the values after k=v overrides. */
static int l_hparams(lua_State *L)
{
    const char *fn = "dl.hparams";
    if (!lua_istable(L, 1) || lua_getmetatable(L, 1))
        return dl_lua_argerror(L, fn, 1, "defaults", "a table {name = default, ...}");
    registry_table(L, "dlbench.hp_overrides"); /* 2 */
    registry_table(L, "dlbench.hp_used");      /* 3 */
    registry_table(L, "dlbench.hp_declared");  /* 4 */
    lua_newtable(L);                           /* 5: the result */
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            return dl_lua_error(L, "%s: every hyperparameter needs a name (got a %s key)", fn,
                                luaL_typename(L, -2));
        const char *name = lua_tostring(L, -2);
        int t = lua_type(L, -1);
        if (t != LUA_TNUMBER && t != LUA_TBOOLEAN && t != LUA_TSTRING)
            return dl_lua_error(L,
                                "%s: hyperparameter '%s' must default to a number, boolean "
                                "or string (got a %s)",
                                fn, name, luaL_typename(L, -1));
        if (strlen(name) >= sizeof(((dl_hparam *)0)->name))
            return dl_lua_error(L, "%s: hyperparameter name '%s' is too long", fn, name);
        if (lua_getfield(L, 2, name) == LUA_TSTRING) {
            const char *text = lua_tostring(L, -1);
            push_override(L, name, -2, text);
            lua_remove(L, -2);
            lua_pushboolean(L, 1);
            lua_setfield(L, 3, name);
        } else {
            lua_pop(L, 1);
            lua_pushvalue(L, -1);
        }
        /* stack: key, default, value */
        lua_pushvalue(L, -1);
        lua_setfield(L, 4, name);
        lua_setfield(L, 5, name);
        lua_pop(L, 1);
    }
    luaL_newmetatable(L, DL_HPARAMS_MT);
    lua_pushcfunction(L, hp_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, hp_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_setmetatable(L, 5);
    lua_settop(L, 5);
    return 1;
}

/* --- callbacks -------------------------------------------------------------- */

static int monitor_mode(const char *monitor, const char *mode)
{
    if (!strcmp(mode, "max"))
        return 1;
    if (!strcmp(mode, "min"))
        return 0;
    return strstr(monitor, "acc") != NULL; /* auto */
}

static void check_monitor(lua_State *L, const char *fn, const char *m, const char *mode)
{
    static const char *known[] = {"val_loss", "val_acc", "train_loss", "train_acc", "loss", "acc"};
    int ok = 0;
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        ok |= !strcmp(m, known[i]);
    if (!ok)
        dl_lua_error(L,
                     "%s: monitor '%s' is not a metric (val_loss, val_acc, train_loss, "
                     "train_acc)",
                     fn, m);
    if (strcmp(mode, "min") && strcmp(mode, "max") && strcmp(mode, "auto"))
        dl_lua_error(L, "%s: mode must be \"min\", \"max\" or \"auto\", got \"%s\"", fn, mode);
}

static dl_cb_spec *push_callback(lua_State *L, dl_cb_kind kind)
{
    dl_cb_spec *c = lua_newuserdatauv(L, sizeof *c, 1);
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->ref_step = c->ref_epoch = c->ref_validation = LUA_NOREF;
    luaL_setmetatable(L, DL_CALLBACK_MT);
    return c;
}

/* dl.early_stopping { monitor = "val_loss", patience = 3, min_delta = 0, mode = "auto" } */
static int l_early_stopping(lua_State *L)
{
    const char *fn = "dl.early_stopping";
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 1, 0);
    char monitor[48], mode[8];
    dl_lua_opt_string(&o, "monitor", "val_loss", monitor, sizeof monitor);
    long patience = dl_lua_opt_integer(&o, "patience", 3, 1);
    double min_delta = dl_lua_opt_positive(&o, "min_delta", 0, 1);
    dl_lua_opt_string(&o, "mode", "auto", mode, sizeof mode);
    dl_lua_opt_check(&o);
    check_monitor(L, fn, monitor, mode);
    dl_cb_spec *c = push_callback(L, DL_CB_EARLY_STOPPING);
    snprintf(c->monitor, sizeof c->monitor, "%s", monitor);
    c->patience = (int)patience;
    c->min_delta = min_delta;
    c->mode_max = monitor_mode(monitor, mode);
    snprintf(c->name, sizeof c->name, "early_stopping");
    return 1;
}

/* dl.checkpoint { every_epochs = 1, every_steps = 0, monitor = nil, mode = "auto" }:
 * with monitor, saves only when the metric improved. */
static int l_checkpoint(lua_State *L)
{
    const char *fn = "dl.checkpoint";
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 1, 0);
    long every_epochs = dl_lua_opt_integer(&o, "every_epochs", -1, 0);
    long every_steps = dl_lua_opt_integer(&o, "every_steps", 0, 0);
    char monitor[48], mode[8];
    dl_lua_opt_string(&o, "monitor", "", monitor, sizeof monitor);
    dl_lua_opt_string(&o, "mode", "auto", mode, sizeof mode);
    dl_lua_opt_check(&o);
    if (monitor[0])
        check_monitor(L, fn, monitor, mode);
    if (every_epochs < 0)
        every_epochs = every_steps > 0 ? 0 : 1;
    dl_cb_spec *c = push_callback(L, DL_CB_CHECKPOINT);
    c->every_epochs = (int)every_epochs;
    c->every_steps = every_steps;
    snprintf(c->monitor, sizeof c->monitor, "%s", monitor);
    c->save_best = monitor[0] != 0;
    c->mode_max = monitor[0] ? monitor_mode(monitor, mode) : 0;
    snprintf(c->name, sizeof c->name, "checkpoint");
    return 1;
}

/* dl.from_run("RUN", { checkpoint = "last", exclude = { "Linear4", ... } }):
 * the value of an experiment's init; the session loads the run's
 * parameters and buffers by name and shape, leaving out the excluded
 * layers (or tensors). */
static int l_from_run(lua_State *L)
{
    const char *fn = "dl.from_run";
    const char *run = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
    if (!run || !run[0] || strlen(run) >= sizeof((dl_init_spec *)0)->run)
        return dl_lua_argerror(L, fn, 1, "run", "a run folder, its name or a unique part of it");
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 2, 0);
    dl_init_spec *in = lua_newuserdatauv(L, sizeof *in, 0);
    memset(in, 0, sizeof *in);
    in->set = 1;
    snprintf(in->run, sizeof in->run, "%s", run);
    dl_lua_opt_string(&o, "checkpoint", "last", in->checkpoint, sizeof in->checkpoint);
    int t = dl_lua_opt_push(&o, "exclude");
    if (t == LUA_TSTRING) {
        snprintf(in->exclude[in->nexclude++], sizeof in->exclude[0], "%s", lua_tostring(L, -1));
    } else if (t == LUA_TTABLE) {
        int n = (int)luaL_len(L, -1);
        if (n > DL_MAX_EXCLUDE)
            dl_lua_error(L, "%s: at most %d names to exclude", fn, DL_MAX_EXCLUDE);
        for (int i = 1; i <= n; i++) {
            if (lua_geti(L, -1, i) != LUA_TSTRING)
                dl_lua_error(L, "%s: exclude[%d] is a %s, expected a layer name (\"Linear4\")", fn,
                             i, luaL_typename(L, -1));
            snprintf(in->exclude[in->nexclude++], sizeof in->exclude[0], "%s", lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    } else if (t != LUA_TNIL) {
        dl_lua_fielderror(L, fn, "exclude", "a list of layer names ({ \"Linear4\" })");
    }
    lua_pop(L, 1);
    dl_lua_opt_check(&o);
    luaL_setmetatable(L, DL_FROM_RUN_MT);
    return 1;
}

/* dl.callback { on_step = f, on_epoch = f, on_validation = f, name = "..." }:
 * f(run, metrics) may read run.step, run.epoch, run.lr and the metrics,
 * call run:set_lr(x), run:stop(reason), run:note(text), run:param(name). */
static int l_callback(lua_State *L)
{
    const char *fn = "dl.callback";
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 1, 1);
    static const char *hooks[] = {"on_step", "on_epoch", "on_validation"};
    int any = 0;
    for (int i = 0; i < 3; i++) {
        int t = dl_lua_opt_push(&o, hooks[i]);
        if (t != LUA_TNIL && t != LUA_TFUNCTION)
            dl_lua_fielderror(L, fn, hooks[i], "a function (run, metrics)");
        any |= t == LUA_TFUNCTION;
        lua_pop(L, 1);
    }
    char name[48];
    dl_lua_opt_string(&o, "name", "callback", name, sizeof name);
    dl_lua_opt_check(&o);
    if (!any)
        dl_lua_error(L, "%s: give at least one of on_step, on_epoch, on_validation", fn);
    dl_cb_spec *c = push_callback(L, DL_CB_LUA);
    snprintf(c->name, sizeof c->name, "%s", name);
    lua_pushvalue(L, 1); /* the functions stay reachable through the user value */
    lua_setiuservalue(L, -2, 1);
    return 1;
}

static int callback_tostring(lua_State *L)
{
    dl_cb_spec *c = luaL_checkudata(L, 1, DL_CALLBACK_MT);
    lua_pushfstring(L, "callback(%s)", c->name);
    return 1;
}

/* --- dl.experiment and dl.study ------------------------------------------------ */

static void describe_tree(const dl_layer *l, char *buf, size_t size, size_t *len)
{
    char one[256];
    const char *kind = l->vt->kind;
    int seq = !strcmp(kind, "Sequential"), res = !strcmp(kind, "Residual");
    if (seq || res) {
        *len += (size_t)snprintf(buf + *len, *len < size ? size - *len : 0, "%s(", kind);
        for (int i = 0; i < l->nchild; i++) {
            if (i)
                *len += (size_t)snprintf(buf + *len, *len < size ? size - *len : 0, ", ");
            describe_tree(l->child[i], buf, size, len);
        }
        *len += (size_t)snprintf(buf + *len, *len < size ? size - *len : 0, ")");
        return;
    }
    dl_layer_describe(l, one, sizeof one);
    *len += (size_t)snprintf(buf + *len, *len < size ? size - *len : 0, "%s", one);
}

/* Pushes a shallow copy of the table at index 1 with metatable mt (the
 * mark that tells an experiment from a study): the script's table stays
 * its own. Returns 1 (results pushed). */
static int push_marked_copy(lua_State *L, const char *mt)
{
    lua_newtable(L);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_settable(L, -4);
    }
    luaL_setmetatable(L, mt);
    return 1;
}

/* dl.experiment {...}: checks every field now (errors point at the script
 * line) and returns the table marked as an experiment. */
static int l_experiment(lua_State *L)
{
    const char *fn = "dl.experiment";
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 1, 1);
    char buf[64];
    dl_lua_opt_string(&o, "name", "", buf, sizeof buf);
    if (dl_lua_opt_push(&o, "data") == LUA_TNIL)
        dl_lua_error(L,
                     "%s: data is required (dl.data.hdf5{...}, dl.data.fashion_mnist{...}, "
                     "dl.data.synthetic{...} or dl.data.text{...})",
                     fn);
    if (!luaL_testudata(L, -1, DL_DATA_MT))
        dl_lua_fielderror(
            L, fn, "data",
            "a dataset (dl.data.hdf5{...}, dl.data.synthetic{...}, dl.data.text{...})");
    lua_pop(L, 1);
    if (dl_lua_opt_push(&o, "model") == LUA_TNIL)
        dl_lua_error(L, "%s: model is required (nn.Sequential{...})", fn);
    lua_layer *m = dl_lua_test_layer(L, -1);
    if (!m)
        dl_lua_fielderror(L, fn, "model", "a layer (nn.Sequential{...})");
    if (!m->l)
        dl_lua_error(L, "%s: the model %s is already part of a container", fn, m->text);
    lua_pop(L, 1);
    if (dl_lua_opt_push(&o, "loss") != LUA_TNIL && !luaL_testudata(L, -1, DL_LOSS_MT))
        dl_lua_fielderror(L, fn, "loss", "a loss (nn.CrossEntropy(), nn.MSE(), ...)");
    lua_pop(L, 1);
    if (dl_lua_opt_push(&o, "optimizer") == LUA_TNIL)
        dl_lua_error(L, "%s: optimizer is required (optim.SGD{...}, optim.AdamW{...})", fn);
    if (!luaL_testudata(L, -1, DL_OPTIM_MT))
        dl_lua_fielderror(L, fn, "optimizer", "an optimizer (optim.SGD{lr = ...}, ...)");
    lua_pop(L, 1);
    if (dl_lua_opt_push(&o, "schedule") != LUA_TNIL && !luaL_testudata(L, -1, DL_SCHED_MT))
        dl_lua_fielderror(L, fn, "schedule", "a schedule (optim.cosine{...}, optim.step{...})");
    lua_pop(L, 1);
    dl_lua_opt_int(&o, "batch", 128, 1);
    dl_lua_opt_int(&o, "accumulate", 1, 1);
    dl_lua_opt_int(&o, "epochs", 1, 1);
    dl_lua_opt_integer(&o, "max_steps", 0, 0);
    dl_lua_opt_int(&o, "log_every", 10, 1);
    dl_lua_opt_integer(&o, "seed", 0, 0);
    dl_lua_opt_string(&o, "precision", "fp32", buf, sizeof buf);
    if (dl_precision_parse(buf) < 0)
        dl_lua_error(L, "%s: precision must be \"fp32\", \"bf16\" or \"fp16\", got \"%s\"", fn,
                     buf);
    dl_lua_opt_string(&o, "device", "auto", buf, sizeof buf);
    if (strcmp(buf, "cpu") && strcmp(buf, "cuda") && strcmp(buf, "auto"))
        dl_lua_error(L, "%s: device must be \"cpu\", \"cuda\" or \"auto\", got \"%s\"", fn, buf);
    dl_lua_opt_string(&o, "nonfinite", "stop", buf, sizeof buf);
    if (strcmp(buf, "stop") && strcmp(buf, "skip"))
        dl_lua_error(L, "%s: nonfinite must be \"stop\" or \"skip\", got \"%s\"", fn, buf);
    int t = dl_lua_opt_push(&o, "callbacks");
    if (t == LUA_TTABLE) {
        int n = (int)luaL_len(L, -1);
        if (n > DL_MAX_CALLBACKS)
            dl_lua_error(L, "%s: at most %d callbacks", fn, DL_MAX_CALLBACKS);
        for (int i = 1; i <= n; i++) {
            int et = lua_geti(L, -1, i);
            if (et != LUA_TFUNCTION && !luaL_testudata(L, -1, DL_CALLBACK_MT))
                dl_lua_error(L,
                             "%s: callbacks[%d] is a %s, expected dl.early_stopping{...}, "
                             "dl.checkpoint{...}, dl.callback{...} or a function",
                             fn, i, luaL_typename(L, -1));
            lua_pop(L, 1);
        }
    } else if (t != LUA_TNIL) {
        dl_lua_fielderror(L, fn, "callbacks", "a list of callbacks");
    }
    lua_pop(L, 1);
    if (dl_lua_opt_push(&o, "init") != LUA_TNIL && !luaL_testudata(L, -1, DL_FROM_RUN_MT))
        dl_lua_fielderror(L, fn, "init", "dl.from_run(\"RUN\", {...})");
    lua_pop(L, 1);
    static const char *hooks[] = {"on_step", "on_epoch", "on_validation"};
    for (int i = 0; i < 3; i++) {
        t = dl_lua_opt_push(&o, hooks[i]);
        if (t != LUA_TNIL && t != LUA_TFUNCTION)
            dl_lua_fielderror(L, fn, hooks[i], "a function (run, metrics)");
        lua_pop(L, 1);
    }
    dl_lua_opt_check(&o);
    return push_marked_copy(L, DL_EXPERIMENT_MT);
}

/* dl.study {...}: checks the study's settings now (errors point at the
 * script line) and returns the table marked as a study. The tuner calls
 * objective(trial) once per trial; `dlbench run` calls it once with a
 * fixed trial whose values are the k=v overrides. */
static int l_study(lua_State *L)
{
    const char *fn = "dl.study";
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 1, 1);
    char buf[64], metric[48];
    dl_lua_opt_string(&o, "name", "", buf, sizeof buf);
    if (strchr(buf, '/') || !strcmp(buf, ".") || !strcmp(buf, ".."))
        dl_lua_fielderror(L, fn, "name",
                          "a name without '/' (the study's folder is "
                          "runs/studies/NAME)");
    dl_lua_opt_string(&o, "metric", "val_loss", metric, sizeof metric);
    check_monitor(L, fn, metric, "auto");
    dl_lua_opt_string(&o, "direction", strstr(metric, "acc") ? "maximize" : "minimize", buf,
                      sizeof buf);
    if (strcmp(buf, "minimize") && strcmp(buf, "maximize"))
        dl_lua_error(L, "%s: direction must be \"minimize\" or \"maximize\", got \"%s\"", fn, buf);
    dl_sampler_config sc;
    dl_pruner_config pc;
    dl_lua_opt_string(&o, "sampler", "tpe", buf, sizeof buf);
    if (dl_tune_sampler_parse(buf, &sc) < 0)
        dl_lua_error(L, "%s: sampler must be \"tpe\", \"random\" or \"grid\", got \"%s\"", fn, buf);
    dl_lua_opt_string(&o, "pruner", "none", buf, sizeof buf);
    if (strcmp(buf, "halving") && dl_tune_pruner_parse(buf, &pc) < 0)
        dl_lua_error(L,
                     "%s: pruner must be \"none\", \"median\" or \"asha\" (also "
                     "\"successive_halving\", \"halving\"), got \"%s\"",
                     fn, buf);
    dl_lua_opt_integer(&o, "trials", 20, 1);
    dl_lua_opt_integer(&o, "seed", 0, 0);
    if (dl_lua_opt_push(&o, "objective") != LUA_TFUNCTION)
        dl_lua_fielderror(L, fn, "objective", "a function (trial) returning dl.experiment{...}");
    lua_pop(L, 1);
    dl_lua_opt_check(&o);
    return push_marked_copy(L, DL_STUDY_MT);
}

/* --- the module ------------------------------------------------------------- */

static int luaopen_dlbench(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"hparams", l_hparams},       {"experiment", l_experiment},
        {"study", l_study},           {"early_stopping", l_early_stopping},
        {"checkpoint", l_checkpoint}, {"callback", l_callback},
        {"from_run", l_from_run},     {NULL, NULL}};
    luaL_newmetatable(L, DL_CALLBACK_MT);
    lua_pushcfunction(L, callback_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    luaL_newmetatable(L, DL_EXPERIMENT_MT);
    lua_pop(L, 1);
    luaL_newmetatable(L, DL_FROM_RUN_MT);
    lua_pop(L, 1);
    luaL_newmetatable(L, DL_STUDY_MT);
    lua_pop(L, 1);
    luaL_newlib(L, fns);
    dl_lua_open_nn(L);
    lua_setfield(L, -2, "nn");
    dl_lua_open_optim(L);
    lua_setfield(L, -2, "optim");
    dl_lua_open_data(L);
    lua_setfield(L, -2, "data");
    dl_lua_open_tensor(L);
    /* dl.tensor, dl.zeros, dl.ones at the top level */
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_settable(L, -5);
    }
    lua_pop(L, 1);
    dl_lua_open_tune(L); /* dl.fixed_trial, dl.memory_study */
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_settable(L, -5);
    }
    lua_pop(L, 1);
    lua_pushstring(L, DL_VERSION);
    lua_setfield(L, -2, "version");
    return 1;
}

/* --- loading a script -------------------------------------------------------- */

static int cmp_hparam(const void *a, const void *b)
{
    return strcmp(((const dl_hparam *)a)->name, ((const dl_hparam *)b)->name);
}

/* Collects dl.hparams' resolved values into s->exp.hp, sorted. */
static int collect_hparams(dl_script *s)
{
    lua_State *L = s->L;
    registry_table(L, "dlbench.hp_declared");
    registry_table(L, "dlbench.hp_used");
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        n++;
        lua_pop(L, 1);
    }
    s->exp.hp = calloc(n ? (size_t)n : 1, sizeof *s->exp.hp);
    if (!s->exp.hp)
        return dl_error(DL_ENOMEM, "out of memory");
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        dl_hparam *h = &s->exp.hp[s->exp.nhp++];
        snprintf(h->name, sizeof h->name, "%s", lua_tostring(L, -2));
        if (lua_isinteger(L, -1)) {
            h->type = DL_HP_INTEGER;
            h->num = (double)lua_tointeger(L, -1);
        } else if (lua_type(L, -1) == LUA_TNUMBER) {
            h->type = DL_HP_NUMBER;
            h->num = lua_tonumber(L, -1);
        } else if (lua_type(L, -1) == LUA_TBOOLEAN) {
            h->type = DL_HP_BOOLEAN;
            h->num = lua_toboolean(L, -1);
        } else {
            h->type = DL_HP_STRING;
            snprintf(h->str, sizeof h->str, "%s", lua_tostring(L, -1));
        }
        lua_pop(L, 1);
        h->overridden = lua_getfield(L, -2, h->name) == LUA_TBOOLEAN;
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    qsort(s->exp.hp, (size_t)s->exp.nhp, sizeof *s->exp.hp, cmp_hparam);
    return DL_OK;
}

/* Every override must name a declared hyperparameter. */
static int check_overrides(dl_script *s)
{
    lua_State *L = s->L;
    registry_table(L, "dlbench.hp_overrides");
    registry_table(L, "dlbench.hp_used");
    lua_pushnil(L);
    while (lua_next(L, -3)) {
        lua_pop(L, 1);
        const char *k = lua_tostring(L, -1);
        if (lua_getfield(L, -2, k) == LUA_TNIL) {
            lua_pop(L, 1);
            registry_table(L, "dlbench.hp_declared");
            push_key_list(L, -1);
            int rc = dl_error(DL_EINVAL,
                              "%s: unknown hyperparameter '%s' in override %s=... "
                              "(known hyperparameters: %s)",
                              s->path, k, k, lua_tostring(L, -1));
            lua_pop(L, 5);
            return rc;
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    return DL_OK;
}

static int read_int_field(lua_State *L, int tbl, const char *name, long def)
{
    long v = def;
    if (lua_getfield(L, tbl, name) == LUA_TNUMBER)
        v = (long)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return (int)v;
}

static void read_string_field(lua_State *L, int tbl, const char *name, const char *def, char *buf,
                              size_t size)
{
    if (lua_getfield(L, tbl, name) == LUA_TSTRING)
        snprintf(buf, size, "%s", lua_tostring(L, -1));
    else
        snprintf(buf, size, "%s", def);
    lua_pop(L, 1);
}

/* Adds a Lua callback spec for a function (or a dl.callback's table) at
 * the top of the stack. */
static int add_lua_hooks(dl_script *s, int tbl_or_fn, const char *name, int as_epoch)
{
    lua_State *L = s->L;
    dl_experiment *e = &s->exp;
    if (e->ncb == DL_MAX_CALLBACKS)
        return dl_error(DL_EINVAL, "%s: at most %d callbacks", s->path, DL_MAX_CALLBACKS);
    dl_cb_spec *c = &e->cb[e->ncb++];
    memset(c, 0, sizeof *c);
    c->kind = DL_CB_LUA;
    c->ref_step = c->ref_epoch = c->ref_validation = LUA_NOREF;
    snprintf(c->name, sizeof c->name, "%s", name);
    if (as_epoch) {
        lua_pushvalue(L, tbl_or_fn);
        c->ref_epoch = luaL_ref(L, LUA_REGISTRYINDEX);
        return DL_OK;
    }
    int *refs[3] = {&c->ref_step, &c->ref_epoch, &c->ref_validation};
    static const char *hooks[] = {"on_step", "on_epoch", "on_validation"};
    for (int i = 0; i < 3; i++) {
        if (lua_getfield(L, tbl_or_fn, hooks[i]) == LUA_TFUNCTION)
            *refs[i] = luaL_ref(L, LUA_REGISTRYINDEX);
        else
            lua_pop(L, 1);
    }
    return DL_OK;
}

static const char *base_name(const char *path, char *buf, size_t size)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(buf, size, "%s", b);
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf)
        *dot = 0;
    return buf;
}

/* Reads the experiment table at idx into s->exp (types were checked by
 * dl.experiment). */
static int read_experiment(dl_script *s, int idx)
{
    lua_State *L = s->L;
    dl_experiment *e = &s->exp;
    char def[64];
    read_string_field(L, idx, "name", base_name(s->path, def, sizeof def), e->name, sizeof e->name);
    lua_getfield(L, idx, "data");
    dl_lua_get_data(L, -1, &e->data);
    lua_pop(L, 1);
    e->loss.kind = DL_LOSS_XENT;
    e->loss.ignore_index = DL_IGNORE_NONE;
    lua_getfield(L, idx, "loss");
    dl_lua_get_loss(L, -1, &e->loss);
    lua_pop(L, 1);
    lua_getfield(L, idx, "optimizer");
    dl_lua_get_optim(L, -1, &e->optim);
    lua_pop(L, 1);
    e->schedule = dl_schedule_constant();
    lua_getfield(L, idx, "schedule");
    dl_lua_get_schedule(L, -1, &e->schedule);
    lua_pop(L, 1);
    e->cfg = dl_trainer_config_default();
    e->cfg.batch = read_int_field(L, idx, "batch", 128);
    e->cfg.accumulate = read_int_field(L, idx, "accumulate", 1);
    e->cfg.epochs = read_int_field(L, idx, "epochs", 1);
    e->cfg.log_every = read_int_field(L, idx, "log_every", 10);
    e->cfg.max_steps = read_int_field(L, idx, "max_steps", 0);
    lua_getfield(L, idx, "seed");
    e->seed_set = !lua_isnil(L, -1);
    e->cfg.seed = (uint64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    char buf[16];
    read_string_field(L, idx, "precision", "fp32", buf, sizeof buf);
    e->cfg.precision = (dl_precision)dl_precision_parse(buf);
    read_string_field(L, idx, "nonfinite", "stop", buf, sizeof buf);
    e->cfg.nonfinite = !strcmp(buf, "skip") ? DL_NONFINITE_SKIP : DL_NONFINITE_STOP;
    read_string_field(L, idx, "device", "auto", e->device, sizeof e->device);
    lua_getfield(L, idx, "init");
    const dl_init_spec *init = luaL_testudata(L, -1, DL_FROM_RUN_MT);
    if (init)
        e->init = *init;
    lua_pop(L, 1);

    /* callbacks */
    if (lua_getfield(L, idx, "callbacks") == LUA_TTABLE) {
        int n = (int)luaL_len(L, -1);
        for (int i = 1; i <= n; i++) {
            lua_geti(L, -1, i);
            int rc = DL_OK;
            if (lua_isfunction(L, -1)) {
                rc = add_lua_hooks(s, lua_gettop(L), "function", 1);
            } else {
                dl_cb_spec *c = luaL_testudata(L, -1, DL_CALLBACK_MT);
                if (c && c->kind == DL_CB_LUA) {
                    lua_getiuservalue(L, -1, 1);
                    rc = add_lua_hooks(s, lua_gettop(L), c->name, 0);
                    lua_pop(L, 1);
                } else if (c) {
                    if (e->ncb == DL_MAX_CALLBACKS)
                        rc = dl_error(DL_EINVAL, "%s: too many callbacks", s->path);
                    else
                        e->cb[e->ncb++] = *c;
                }
            }
            lua_pop(L, 1);
            if (rc < 0)
                return rc;
        }
    }
    lua_pop(L, 1);
    int has_hooks = 0;
    static const char *hooks[] = {"on_step", "on_epoch", "on_validation"};
    for (int i = 0; i < 3; i++) {
        has_hooks |= lua_getfield(L, idx, hooks[i]) == LUA_TFUNCTION;
        lua_pop(L, 1);
    }
    if (has_hooks)
        DL_TRY(add_lua_hooks(s, idx, "experiment", 0));

    /* the model: taken from its userdata last, when nothing else can fail */
    lua_getfield(L, idx, "model");
    lua_layer *u = dl_lua_test_layer(L, -1);
    if (!u || !u->l) {
        lua_pop(L, 1);
        return dl_error(DL_EINVAL, "%s: the experiment's model was already used elsewhere",
                        s->path);
    }
    size_t len = 0;
    describe_tree(u->l, e->model_text, sizeof e->model_text, &len);
    e->model = u->l;
    u->l = NULL;
    snprintf(u->text, sizeof u->text, "%.130s (in the experiment)", e->model_text);
    lua_pop(L, 1);
    return DL_OK;
}

/* Splits "k=v" overrides into the registry table before the script runs. */
static int store_overrides(dl_script *s, const dl_script_options *opt)
{
    lua_State *L = s->L;
    registry_table(L, "dlbench.hp_overrides");
    for (int i = 0; i < opt->noverrides; i++) {
        const char *kv = opt->overrides[i];
        const char *eq = strchr(kv, '=');
        if (!eq || eq == kv) {
            lua_pop(L, 1);
            return dl_error(DL_EINVAL, "override '%s': expected NAME=VALUE", kv);
        }
        lua_pushlstring(L, kv, (size_t)(eq - kv));
        lua_pushvalue(L, -1);
        if (lua_gettable(L, -3) != LUA_TNIL) {
            lua_pop(L, 3);
            return dl_error(DL_EINVAL, "override '%s': %.*s is given twice", kv, (int)(eq - kv),
                            kv);
        }
        lua_pop(L, 1);
        lua_pushstring(L, eq + 1);
        lua_settable(L, -3);
    }
    lua_pop(L, 1);
    return DL_OK;
}

/* Lua's allocator with a ceiling: a script that builds tables without end
 * gets "not enough memory" instead of taking the machine's memory. */
static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    dl_script *s = ud;
    size_t old = ptr ? osize : 0; /* without ptr, osize is a type tag */
    if (nsize == 0) {
        free(ptr);
        s->lua_bytes -= old;
        return NULL;
    }
    if (nsize > old && s->lua_bytes - old + nsize > LUA_MEMORY_LIMIT)
        return NULL;
    void *p = realloc(ptr, nsize);
    if (p)
        s->lua_bytes = s->lua_bytes - old + nsize;
    return p;
}

static int panic(lua_State *L)
{
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "dlbench: Lua error outside a protected call: %s\n", msg ? msg : "?");
    return 0; /* Lua aborts */
}

static int open_state(dl_script *s)
{
    lua_State *L = lua_newstate(limited_alloc, s);
    if (!L)
        return dl_error(DL_ENOMEM, "cannot create a Lua state (out of memory)");
    lua_atpanic(L, panic);
    s->L = L;
    luaL_openlibs(L);
    lua_pushlightuserdata(L, s);
    lua_setfield(L, LUA_REGISTRYINDEX, "dlbench.script");
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_dlbench);
    lua_setfield(L, -2, "dlbench");
    lua_pop(L, 1);
    return DL_OK;
}

static int has_metatable(lua_State *L, int idx, const char *name);

/* Reads the study table at idx (checked by dl.study) into s->exp.study. */
static void read_study(dl_script *s, int idx)
{
    lua_State *L = s->L;
    dl_experiment *e = &s->exp;
    dl_study_spec *st = &e->study;
    char def[64];
    e->is_study = 1;
    e->trial_number = -1;
    read_string_field(L, idx, "name", base_name(s->path, def, sizeof def), st->name,
                      sizeof st->name);
    snprintf(e->name, sizeof e->name, "%s", st->name);
    read_string_field(L, idx, "metric", "val_loss", st->metric, sizeof st->metric);
    if (!strcmp(st->metric, "loss"))
        snprintf(st->metric, sizeof st->metric, "train_loss"); /* as epochs name them */
    else if (!strcmp(st->metric, "acc"))
        snprintf(st->metric, sizeof st->metric, "train_acc");
    read_string_field(L, idx, "direction", strstr(st->metric, "acc") ? "maximize" : "minimize", def,
                      sizeof def);
    st->maximize = !strcmp(def, "maximize");
    read_string_field(L, idx, "sampler", "tpe", st->sampler, sizeof st->sampler);
    read_string_field(L, idx, "pruner", "none", st->pruner, sizeof st->pruner);
    if (!strcmp(st->pruner, "halving"))
        snprintf(st->pruner, sizeof st->pruner, "asha");
    st->trials = read_int_field(L, idx, "trials", 20);
    lua_getfield(L, idx, "seed");
    st->seed = (long long)lua_tointeger(L, -1);
    lua_pop(L, 1);
}

/* Calls the study's objective (table at idx) with a trial: trial, or
 * a fixed trial reading the k=v overrides. Leaves the experiment it
 * returned on the stack and reads it into s->exp. */
static int call_objective(dl_script *s, int idx, const dl_script_options *opt,
                          struct dl_trial *trial)
{
    lua_State *L = s->L;
    lua_getfield(L, idx, "objective");
    int fixed = 0;
    if (!trial) {
        registry_table(L, "dlbench.hp_overrides");
        fixed = lua_gettop(L);
    }
    s->trial = dl_lua_push_trial(L, trial, fixed, fixed != 0);
    lua_pushvalue(L, -1);
    s->trial_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (fixed)
        lua_remove(L, fixed);
    DL_TRY(protected_call(
        s, 1, 1, opt->instruction_limit > 0 ? opt->instruction_limit : DEFAULT_DESCRIBE_LIMIT));
    int res = lua_gettop(L);
    if (!has_metatable(L, res, DL_EXPERIMENT_MT))
        return dl_error(DL_EINVAL,
                        "%s: the study's objective must return dl.experiment{...} (it "
                        "returned %s)",
                        s->path, luaL_typename(L, res));
    dl_experiment *e = &s->exp;
    e->ntrial_params = s->trial->np;
    memcpy(e->trial_params, s->trial->params, (size_t)s->trial->np * sizeof *e->trial_params);
    e->trial_number = s->trial->number;
    return read_experiment(s, res);
}

int dl_script_trial_prune_said(const dl_script *s) { return s->trial && s->trial->prune_said; }

/* Whether the value at idx is a table carrying the named metatable. */
static int has_metatable(lua_State *L, int idx, const char *name)
{
    if (!lua_istable(L, idx) || !lua_getmetatable(L, idx))
        return 0;
    luaL_getmetatable(L, name);
    int eq = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
    return eq;
}

int dl_script_load(dl_script **out, const dl_script_options *opt)
{
    return dl_script_load_study(out, opt, NULL, 0);
}

int dl_script_load_study(dl_script **out, const dl_script_options *opt, struct dl_trial *trial,
                         int study_only)
{
    *out = NULL;
    dl_script *s = calloc(1, sizeof *s);
    if (!s)
        return dl_error(DL_ENOMEM, "out of memory");
    s->exp_ref = s->trial_ref = LUA_NOREF;
    snprintf(s->path, sizeof s->path, "%s", opt->path);
    int rc = open_state(s);
    if (rc == DL_OK)
        rc = store_overrides(s, opt);
    lua_State *L = s->L;
    if (rc == DL_OK && luaL_loadfile(L, opt->path) != LUA_OK) {
        rc = dl_error(DL_EINVAL, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    if (rc == DL_OK)
        rc = protected_call(
            s, 0, 1, opt->instruction_limit > 0 ? opt->instruction_limit : DEFAULT_DESCRIBE_LIMIT);
    if (rc == DL_OK) {
        int idx = lua_gettop(L);
        if (has_metatable(L, idx, DL_STUDY_MT)) {
            read_study(s, idx);
            if (!study_only) {
                rc = call_objective(s, idx, opt, trial);
                idx = lua_gettop(L);
            }
        } else if (has_metatable(L, idx, DL_EXPERIMENT_MT)) {
            rc = read_experiment(s, idx);
        } else {
            rc = dl_error(DL_EINVAL,
                          "%s: the script must return dl.experiment{...} or dl.study{...} "
                          "(it returned %s)",
                          s->path, luaL_typename(L, idx));
        }
        if (rc == DL_OK) {
            lua_pushvalue(L, idx);
            s->exp_ref = luaL_ref(L, LUA_REGISTRYINDEX);
        }
        lua_settop(L, 0);
    }
    if (rc == DL_OK)
        rc = check_overrides(s);
    if (rc == DL_OK)
        rc = collect_hparams(s);
    if (rc < 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dl_error_message());
        dl_script_destroy(s);
        return dl_error(rc, "%s", msg);
    }
    *out = s;
    return DL_OK;
}

void dl_script_destroy(dl_script *s)
{
    if (!s)
        return;
    dl_layer_destroy(s->exp.model);
    free(s->exp.hp);
    if (s->L)
        lua_close(s->L);
    free(s);
}

dl_experiment *dl_script_experiment(dl_script *s) { return &s->exp; }
lua_State *dl_script_lua_state(dl_script *s) { return s->L; }
const char *dl_script_path(const dl_script *s) { return s->path; }

dl_layer *dl_script_take_model(dl_script *s)
{
    dl_layer *l = s->exp.model;
    s->exp.model = NULL;
    return l;
}

/* --- data -------------------------------------------------------------------- */

int dl_script_open_data(dl_script *s, int batch, uint64_t seed, dl_backend *be, dl_source **train,
                        dl_source **val, char *fp, size_t fp_size)
{
    return dl_data_open(&s->exp.data, batch, seed, be, train, val, fp, fp_size);
}

/* --- callbacks at run time ------------------------------------------------------ */

typedef struct lua_run {
    dl_script_run *run; /* NULL outside the callback */
} lua_run;

static dl_script_run *check_run(lua_State *L, const char *fn)
{
    lua_run *r = luaL_checkudata(L, 1, DL_RUN_MT);
    if (!r->run)
        dl_lua_error(L, "%s: the run object is only valid inside its callback", fn);
    return r->run;
}

static int run_set_lr(lua_State *L)
{
    dl_script_run *r = check_run(L, "run:set_lr");
    if (lua_type(L, 2) != LUA_TNUMBER || !(lua_tonumber(L, 2) > 0))
        return dl_lua_argerror(L, "run:set_lr", 2, "lr", "a positive number");
    if (r->trainer)
        dl_trainer_set_base_lr(r->trainer, (float)lua_tonumber(L, 2));
    return 0;
}

static int run_stop(lua_State *L)
{
    dl_script_run *r = check_run(L, "run:stop");
    r->stop = 1;
    snprintf(r->stop_reason, sizeof r->stop_reason, "%s",
             luaL_optstring(L, 2, "stopped by a script callback"));
    return 0;
}

static int run_note(lua_State *L)
{
    dl_script_run *r = check_run(L, "run:note");
    if (lua_type(L, 2) != LUA_TSTRING && lua_type(L, 2) != LUA_TNUMBER)
        return dl_lua_argerror(L, "run:note", 2, "text", "a string");
    if (r->note)
        r->note(r->user, lua_tostring(L, 2));
    return 0;
}

/* run:param("Linear1.weight"): a copy of a parameter as a tensor. */
static int run_param(lua_State *L)
{
    dl_script_run *r = check_run(L, "run:param");
    const char *name = luaL_checkstring(L, 2);
    if (!r->trainer)
        return 0;
    dl_model *m = dl_trainer_model(r->trainer);
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        if (strcmp(p->name, name))
            continue;
        dl_model_state st;
        dl_model_get_state(m, &st);
        dl_backend *be = dl_model_backend(m);
        float *dst = dl_lua_push_tensor(L, &p->shape);
        if (be->ops->to_host(be, dst, st.params + p->offset, p->count * sizeof(float)) < 0)
            return dl_lua_error(L, "run:param: %s", dl_error_message());
        return 1;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; i < dl_model_num_params(m); i++) {
        if (i)
            luaL_addstring(&b, ", ");
        luaL_addstring(&b, dl_model_param(m, i)->name);
    }
    luaL_pushresult(&b);
    return dl_lua_error(L, "run:param: no parameter '%s' (parameters: %s)", name,
                        lua_tostring(L, -1));
}

static int run_index(lua_State *L)
{
    dl_script_run *r = check_run(L, "run");
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "step"))
        lua_pushinteger(L, r->step);
    else if (!strcmp(k, "epoch"))
        lua_pushinteger(L, r->epoch + 1);
    else if (!strcmp(k, "lr"))
        lua_pushnumber(L, r->trainer ? dl_trainer_current_lr(r->trainer) : 0);
    else if (!strcmp(k, "base_lr"))
        lua_pushnumber(L, r->trainer ? dl_trainer_base_lr(r->trainer) : 0);
    else if (!strcmp(k, "metrics")) {
        lua_createtable(L, 0, r->nmetrics);
        for (int i = 0; i < r->nmetrics; i++) {
            lua_pushnumber(L, r->values[i]);
            lua_setfield(L, -2, r->names[i]);
        }
    } else {
        static const luaL_Reg m[] = {{"set_lr", run_set_lr},
                                     {"stop", run_stop},
                                     {"note", run_note},
                                     {"param", run_param},
                                     {NULL, NULL}};
        for (int i = 0; m[i].name; i++)
            if (!strcmp(k, m[i].name)) {
                lua_pushcfunction(L, m[i].func);
                return 1;
            }
        return dl_lua_error(L,
                            "run has no field '%s' (step, epoch, lr, base_lr, metrics, "
                            "set_lr, stop, note, param)",
                            k);
    }
    return 1;
}

int dl_script_has_hooks(const dl_script *s, dl_hook hook)
{
    for (int i = 0; i < s->exp.ncb; i++) {
        const dl_cb_spec *c = &s->exp.cb[i];
        int ref = hook == DL_HOOK_STEP    ? c->ref_step
                  : hook == DL_HOOK_EPOCH ? c->ref_epoch
                                          : c->ref_validation;
        if (c->kind == DL_CB_LUA && ref != LUA_NOREF)
            return 1;
    }
    return 0;
}

int dl_script_call_hooks(dl_script *s, dl_hook hook, dl_script_run *run)
{
    lua_State *L = s->L;
    if (luaL_newmetatable(L, DL_RUN_MT)) {
        lua_pushcfunction(L, run_index);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    for (int i = 0; i < s->exp.ncb; i++) {
        const dl_cb_spec *c = &s->exp.cb[i];
        int ref = hook == DL_HOOK_STEP    ? c->ref_step
                  : hook == DL_HOOK_EPOCH ? c->ref_epoch
                                          : c->ref_validation;
        if (c->kind != DL_CB_LUA || ref == LUA_NOREF)
            continue;
        lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
        lua_run *r = lua_newuserdatauv(L, sizeof *r, 0);
        r->run = run;
        luaL_setmetatable(L, DL_RUN_MT);
        lua_pushvalue(L, -1);
        int keep = luaL_ref(L, LUA_REGISTRYINDEX); /* to invalidate it afterwards */
        lua_createtable(L, 0, run->nmetrics);
        for (int k = 0; k < run->nmetrics; k++) {
            lua_pushnumber(L, run->values[k]);
            lua_setfield(L, -2, run->names[k]);
        }
        int rc = protected_call(s, 2, 0, CALLBACK_LIMIT);
        lua_rawgeti(L, LUA_REGISTRYINDEX, keep);
        ((lua_run *)lua_touserdata(L, -1))->run = NULL;
        lua_pop(L, 1);
        luaL_unref(L, LUA_REGISTRYINDEX, keep);
        if (rc < 0) {
            static const char *names[] = {"on_step", "on_epoch", "on_validation"};
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", dl_error_message());
            return dl_error(DL_EINVAL, "callback %s (%s) failed: %s", c->name, names[hook], msg);
        }
        if (run->stop)
            break;
    }
    return DL_OK;
}

/* --- Lua test scripts ------------------------------------------------------------ */

static const char *test_prelude =
    "local counts = ...\n"
    "local function where(name) return (counts.file .. ':' .. name) end\n"
    "function skip(why) error({skip = why}, 0) end\n"
    "function test(name, fn)\n"
    "  local ok, err = xpcall(fn, debug.traceback)\n"
    "  if ok then counts.passed = counts.passed + 1; print('PASS ' .. where(name))\n"
    "  elseif type(err) == 'table' and err.skip then print('SKIP ' .. where(name) .. ': ' .. "
    "err.skip)\n"
    "  else counts.failed = counts.failed + 1\n"
    "    print('FAIL ' .. where(name) .. ': ' .. tostring(err):gsub('\\n', '\\n    ')) end\n"
    "  io.stdout:flush()\n"
    "end\n"
    "function expect_error(fragment, fn, ...)\n"
    "  local ok, err = pcall(fn, ...)\n"
    "  if ok then error('expected an error containing \\\"' .. fragment .. '\\\", got none', 2) "
    "end\n"
    "  if not tostring(err):find(fragment, 1, true) then\n"
    "    error('expected an error containing \\\"' .. fragment .. '\\\", got: ' .. tostring(err), "
    "2)\n"
    "  end\n"
    "  return err\n"
    "end\n";

int dl_script_run_tests(const char *path, int *passed, int *failed)
{
    dl_script *s = calloc(1, sizeof *s);
    if (!s)
        return dl_error(DL_ENOMEM, "out of memory");
    s->exp_ref = LUA_NOREF;
    snprintf(s->path, sizeof s->path, "%s", path);
    int rc = open_state(s);
    if (rc < 0) {
        free(s);
        (*failed)++;
        return rc;
    }
    lua_State *L = s->L;
    lua_newtable(L);
    int counts = lua_gettop(L);
    lua_pushinteger(L, 0);
    lua_setfield(L, counts, "passed");
    lua_pushinteger(L, 0);
    lua_setfield(L, counts, "failed");
    const char *base = strrchr(path, '/');
    lua_pushstring(L, base ? base + 1 : path);
    lua_setfield(L, counts, "file");
    if (rc == DL_OK && luaL_loadstring(L, test_prelude) != LUA_OK)
        rc = dl_error(DL_ERR, "test prelude: %s", lua_tostring(L, -1));
    if (rc == DL_OK) {
        lua_pushvalue(L, counts);
        rc = protected_call(s, 1, 0, 0);
    }
    if (rc == DL_OK && luaL_loadfile(L, path) != LUA_OK) {
        rc = dl_error(DL_EINVAL, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    if (rc == DL_OK)
        rc = protected_call(s, 0, 0, 2000000000L);
    lua_getfield(L, counts, "passed");
    lua_getfield(L, counts, "failed");
    *passed += (int)lua_tointeger(L, -2);
    *failed += (int)lua_tointeger(L, -1) + (rc < 0);
    if (rc < 0)
        printf("FAIL %s: %s\n", path, dl_error_message());
    dl_script_destroy(s);
    return rc;
}
