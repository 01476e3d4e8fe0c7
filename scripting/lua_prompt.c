/* lua_prompt.c - the workbench's Lua prompt: a line in the training's own Lua state, between two steps */
#include "scripting/lua_prompt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "engine/base/error.h"
#include "scripting/lua_internal.h"
#include "scripting/session_sample.h"

#define PROMPT_BUDGET 50000000L
#define TRAINER_KEY "dlbench.prompt.trainer"
#define SESSION_KEY "dlbench.prompt.session"

/* The trainer of the line being run; raises outside it (a closure kept
 * in a global and called later from a script callback). */
static dl_trainer *trainer_of(lua_State *L, const char *fn)
{
    lua_getfield(L, LUA_REGISTRYINDEX, TRAINER_KEY);
    dl_trainer *t = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!t)
        dl_lua_error(L, "run.%s: only available at the workbench's prompt", fn);
    return t;
}

static int p_set_lr(lua_State *L)
{
    dl_trainer *t = trainer_of(L, "set_lr");
    if (lua_type(L, 1) != LUA_TNUMBER || !(lua_tonumber(L, 1) > 0))
        return dl_lua_argerror(L, "run.set_lr", 1, "lr", "a positive number");
    dl_trainer_set_base_lr(t, (float)lua_tonumber(L, 1));
    lua_pushnumber(L, dl_trainer_base_lr(t));
    return 1;
}

static int p_note(lua_State *L)
{
    dl_trainer *t = trainer_of(L, "note");
    const char *text = luaL_checkstring(L, 1);
    dl_trainer_post(t, DL_CMD_NOTE, 0, text);
    return 0;
}

static int p_checkpoint(lua_State *L)
{
    dl_trainer *t = trainer_of(L, "checkpoint");
    dl_trainer_post(t, DL_CMD_CHECKPOINT, 0,
                    luaL_optstring(L, 1, "")); /* a name: checkpoint-NAME.h5 */
    return 0;
}

static int p_pause(lua_State *L)
{
    dl_trainer_post(trainer_of(L, "pause"), DL_CMD_PAUSE, 0, NULL);
    return 0;
}

static int p_stop(lua_State *L)
{
    dl_trainer_post(trainer_of(L, "stop"), DL_CMD_STOP, 0, NULL);
    return 0;
}

static int p_params(lua_State *L)
{
    dl_model *m = dl_trainer_model(trainer_of(L, "params"));
    lua_createtable(L, dl_model_num_params(m), 0);
    for (int i = 0; i < dl_model_num_params(m); i++) {
        lua_pushstring(L, dl_model_param(m, i)->name);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* The parameter called name copied to a new tensor on the stack. */
static float *push_param(lua_State *L, const char *fn, const char *name, size_t *count)
{
    dl_model *m = dl_trainer_model(trainer_of(L, fn));
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        if (strcmp(p->name, name))
            continue;
        dl_model_state st;
        dl_model_get_state(m, &st);
        dl_backend *be = dl_model_backend(m);
        float *dst = dl_lua_push_tensor(L, &p->shape);
        if (be->ops->to_host(be, dst, st.params + p->offset, p->count * sizeof(float)) < 0)
            dl_lua_error(L, "run.%s: %s", fn, dl_error_message());
        *count = p->count;
        return dst;
    }
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; i < dl_model_num_params(m); i++) {
        if (i)
            luaL_addstring(&b, ", ");
        luaL_addstring(&b, dl_model_param(m, i)->name);
    }
    luaL_pushresult(&b);
    dl_lua_error(L, "run.%s: no parameter '%s' (parameters: %s)", fn, name, lua_tostring(L, -1));
    return NULL;
}

static int p_param(lua_State *L)
{
    size_t n;
    push_param(L, "param", luaL_checkstring(L, 1), &n);
    return 1;
}

static int p_norm(lua_State *L)
{
    size_t n;
    const float *v = push_param(L, "norm", luaL_checkstring(L, 1), &n);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)v[i] * v[i];
    lua_pop(L, 1);
    lua_pushnumber(L, sqrt(sum));
    return 1;
}

static int p_profiler(lua_State *L)
{
    dl_profiler *p = dl_trainer_profiler(trainer_of(L, "profiler"));
    if (!p)
        return dl_lua_error(L, "run.profiler: no profiler is attached to this training");
    int on = lua_isnoneornil(L, 1) ? !dl_profiler_enabled(p) : lua_toboolean(L, 1);
    dl_profiler_set_enabled(p, on);
    lua_pushboolean(L, on);
    return 1;
}

/* The text run.sample collects. */
typedef struct text_buf {
    char *p;
    size_t n, cap;
    int failed;
} text_buf;

static void collect(void *user, const char *text, size_t len)
{
    text_buf *b = user;
    if (b->n + len + 1 > b->cap) {
        size_t cap = (b->cap ? 2 * b->cap : 256) + len;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, text, len);
    b->n += len;
}

/* run.sample { prompt = "", tokens = 100, temperature = 1, top_k = 0,
 * seed = 0 }: text from the model as it is now (a language model). */
static int p_sample(lua_State *L)
{
    trainer_of(L, "sample");
    lua_getfield(L, LUA_REGISTRYINDEX, SESSION_KEY);
    dl_session *ses = lua_touserdata(L, -1);
    lua_pop(L, 1);
    char prompt[4096];
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "run.sample", 1, 0);
    dl_sample_options so = {0};
    so.prompt = dl_lua_opt_string(&o, "prompt", "", prompt, sizeof prompt);
    so.tokens = dl_lua_opt_int(&o, "tokens", 100, 0);
    so.temperature = dl_lua_opt_positive(&o, "temperature", 1.0, 1);
    so.top_k = dl_lua_opt_int(&o, "top_k", 0, 0);
    so.seed = (uint64_t)dl_lua_opt_integer(&o, "seed", 0, 0);
    dl_lua_opt_check(&o);
    text_buf b = {0};
    so.emit = collect;
    so.user = &b;
    int rc = dl_session_sample_live(ses, &so);
    if (rc == DL_OK && b.failed)
        rc = dl_error(DL_ENOMEM, "out of memory");
    if (rc == DL_OK)
        lua_pushlstring(L, b.p ? b.p : "", b.n);
    free(b.p);
    if (rc < 0)
        return dl_lua_error(L, "run.sample: %s", dl_error_message());
    return 1;
}

static void push_run(lua_State *L, dl_trainer *t)
{
    static const luaL_Reg fns[] = {
        {"set_lr", p_set_lr}, {"note", p_note}, {"checkpoint", p_checkpoint},
        {"pause", p_pause},   {"stop", p_stop}, {"params", p_params},
        {"param", p_param},   {"norm", p_norm}, {"profiler", p_profiler},
        {"sample", p_sample}, {NULL, NULL}};
    luaL_newlib(L, fns);
    lua_pushinteger(L, dl_trainer_step_count(t));
    lua_setfield(L, -2, "step");
    lua_pushinteger(L, dl_trainer_epoch(t) + 1);
    lua_setfield(L, -2, "epoch");
    lua_pushnumber(L, dl_trainer_current_lr(t));
    lua_setfield(L, -2, "lr");
    lua_pushnumber(L, dl_trainer_base_lr(t));
    lua_setfield(L, -2, "base_lr");
    lua_pushstring(L, dl_trainer_backend(t)->ops->name);
    lua_setfield(L, -2, "device");
}

static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    return 1;
}

int dl_session_eval(dl_session *s, const char *line, char *out, size_t size)
{
    out[0] = 0;
    dl_script *sc = dl_session_script(s);
    dl_trainer *t = dl_session_trainer(s);
    if (!sc || !t) {
        snprintf(out, size, "no live training");
        return -1;
    }
    lua_State *L = dl_script_lua_state(sc);
    int top = lua_gettop(L);
    lua_pushlightuserdata(L, t);
    lua_setfield(L, LUA_REGISTRYINDEX, TRAINER_KEY);
    lua_pushlightuserdata(L, s);
    lua_setfield(L, LUA_REGISTRYINDEX, SESSION_KEY);
    push_run(L, t);
    lua_setglobal(L, "run");

    /* an expression first ("run.lr"), else a statement */
    lua_pushcfunction(L, traceback);
    const char *expr = lua_pushfstring(L, "return %s;", line);
    int rc = luaL_loadbuffer(L, expr, strlen(expr), "=prompt");
    lua_remove(L, -2); /* the formatted text */
    if (rc != LUA_OK) {
        lua_pop(L, 1);
        rc = luaL_loadbuffer(L, line, strlen(line), "=prompt");
    }
    int ok = -1;
    if (rc == LUA_OK) {
        dl_lua_budget(L, PROMPT_BUDGET);
        rc = lua_pcall(L, 0, LUA_MULTRET, top + 1);
        lua_sethook(L, NULL, 0, 0);
    }
    if (rc == LUA_OK) {
        size_t used = 0;
        for (int i = top + 2; i <= lua_gettop(L) && used < size; i++) {
            const char *v = luaL_tolstring(L, i, NULL);
            used += (size_t)snprintf(out + used, size - used, "%s%s", i > top + 2 ? "\t" : "", v);
            lua_pop(L, 1);
        }
        ok = 0;
    } else {
        const char *msg = lua_tostring(L, -1);
        snprintf(out, size, "%s", msg ? msg : "error");
    }
    lua_settop(L, top);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, TRAINER_KEY);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, SESSION_KEY);
    return ok;
}
