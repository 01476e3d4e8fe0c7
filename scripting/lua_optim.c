/* lua_optim.c - dl.optim: optimizers (SGD, Adam, AdamW) and learning-rate schedules as Lua values */
#include <stdio.h>
#include <string.h>

#include "scripting/lua_internal.h"

static void read_betas(dl_lua_opts *o, dl_optim *opt)
{
    lua_State *L = o->L;
    if (dl_lua_opt_push(o, "betas") != LUA_TNIL) {
        int ok = lua_istable(L, -1) && luaL_len(L, -1) == 2;
        if (ok) {
            lua_geti(L, -1, 1);
            lua_geti(L, -2, 2);
            ok = lua_type(L, -2) == LUA_TNUMBER && lua_type(L, -1) == LUA_TNUMBER;
            double b1 = lua_tonumber(L, -2), b2 = lua_tonumber(L, -1);
            lua_pop(L, 2);
            ok = ok && b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1;
            opt->beta1 = (float)b1;
            opt->beta2 = (float)b2;
        }
        if (!ok)
            dl_lua_fielderror(L, o->fn, "betas", "a pair {beta1, beta2} of numbers in [0, 1)");
    }
    lua_pop(L, 1);
    double b1 = dl_lua_opt_positive(o, "beta1", opt->beta1, 1);
    double b2 = dl_lua_opt_positive(o, "beta2", opt->beta2, 1);
    if (b1 >= 1 || b2 >= 1)
        dl_lua_error(L, "%s: beta1 and beta2 must be below 1 (got %g, %g)", o->fn, b1, b2);
    opt->beta1 = (float)b1;
    opt->beta2 = (float)b2;
    opt->eps = (float)dl_lua_opt_positive(o, "eps", opt->eps, 0);
}

static int push_optim(lua_State *L, const dl_optim *o)
{
    dl_optim *u = lua_newuserdatauv(L, sizeof *u, 0);
    *u = *o;
    luaL_setmetatable(L, DL_OPTIM_MT);
    return 1;
}

static int optim_sgd(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "optim.SGD", 1, 1);
    double lr = dl_lua_opt_positive(&o, "lr", 0.01, 0);
    double momentum = dl_lua_opt_positive(&o, "momentum", 0, 1);
    int nesterov = dl_lua_opt_boolean(&o, "nesterov", 0);
    double wd = dl_lua_opt_positive(&o, "weight_decay", 0, 1);
    double clip = dl_lua_opt_positive(&o, "clip", 0, 1);
    dl_lua_opt_check(&o);
    if (momentum >= 1)
        dl_lua_error(L, "optim.SGD: momentum must be below 1 (got %g)", momentum);
    if (nesterov && momentum == 0)
        dl_lua_error(L, "optim.SGD: nesterov needs a momentum > 0");
    dl_optim opt = dl_optim_sgd((float)lr, (float)momentum, nesterov, (float)wd);
    opt.clip_norm = (float)clip;
    return push_optim(L, &opt);
}

static int adam(lua_State *L, const char *fn, int decoupled)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 1, 0);
    dl_optim opt = decoupled ? dl_optim_adamw(1e-3f, 0.01f) : dl_optim_adam(1e-3f, 0);
    opt.lr = (float)dl_lua_opt_positive(&o, "lr", opt.lr, 0);
    opt.weight_decay = (float)dl_lua_opt_positive(&o, "weight_decay", opt.weight_decay, 1);
    read_betas(&o, &opt);
    opt.clip_norm = (float)dl_lua_opt_positive(&o, "clip", 0, 1);
    dl_lua_opt_check(&o);
    return push_optim(L, &opt);
}

static int optim_adam(lua_State *L) { return adam(L, "optim.Adam", 0); }
static int optim_adamw(lua_State *L) { return adam(L, "optim.AdamW", 1); }

static int optim_tostring(lua_State *L)
{
    dl_optim *o = luaL_checkudata(L, 1, DL_OPTIM_MT);
    char buf[256];
    if (o->kind == DL_OPT_SGD)
        snprintf(buf, sizeof buf, "SGD{lr = %g, momentum = %g, nesterov = %s, weight_decay = %g}",
                 o->lr, o->momentum, o->nesterov ? "true" : "false", o->weight_decay);
    else
        snprintf(buf, sizeof buf, "%s{lr = %g, betas = {%g, %g}, eps = %g, weight_decay = %g}",
                 dl_optim_name(o->kind), o->lr, o->beta1, o->beta2, o->eps, o->weight_decay);
    lua_pushstring(L, buf);
    return 1;
}

/* optimizer.lr reads the base learning rate. */
static int optim_index(lua_State *L)
{
    dl_optim *o = luaL_checkudata(L, 1, DL_OPTIM_MT);
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "lr"))
        lua_pushnumber(L, o->lr);
    else if (!strcmp(k, "kind"))
        lua_pushstring(L, dl_optim_name(o->kind));
    else if (!strcmp(k, "weight_decay"))
        lua_pushnumber(L, o->weight_decay);
    else if (!strcmp(k, "momentum"))
        lua_pushnumber(L, o->momentum);
    else
        lua_pushnil(L);
    return 1;
}

int dl_lua_get_optim(lua_State *L, int idx, dl_optim *out)
{
    dl_optim *o = luaL_testudata(L, idx, DL_OPTIM_MT);
    if (!o)
        return 0;
    *out = *o;
    return 1;
}

/* --- schedules ------------------------------------------------------------ */

static int push_sched(lua_State *L, const dl_schedule *s)
{
    dl_schedule *u = lua_newuserdatauv(L, sizeof *u, 0);
    *u = *s;
    luaL_setmetatable(L, DL_SCHED_MT);
    return 1;
}

static dl_schedule sched_base(dl_sched_kind kind)
{
    dl_schedule s = dl_schedule_constant();
    s.kind = kind;
    return s;
}

static int sched_constant(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "optim.constant", 1, 0);
    dl_lua_opt_check(&o);
    dl_schedule s = sched_base(DL_SCHED_CONSTANT);
    return push_sched(L, &s);
}

static int sched_step(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "optim.step", 1, 1);
    dl_schedule s = sched_base(DL_SCHED_STEP);
    s.step_size = dl_lua_opt_integer(&o, "step_size", 0, 1);
    s.gamma = (float)dl_lua_opt_positive(&o, "gamma", 0.1, 0);
    dl_lua_opt_check(&o);
    if (s.step_size == 0)
        dl_lua_error(L, "optim.step: step_size (optimizer steps between decays) is required");
    return push_sched(L, &s);
}

static int sched_cosine(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "optim.cosine", 1, 0);
    dl_schedule s = sched_base(DL_SCHED_COSINE);
    s.warmup = dl_lua_opt_integer(&o, "warmup", 0, 0);
    s.min_lr = (float)dl_lua_opt_positive(&o, "min_lr", 0, 1);
    dl_lua_opt_check(&o);
    return push_sched(L, &s);
}

static int sched_warmup(lua_State *L)
{
    const char *fn = "optim.warmup";
    dl_schedule s = sched_base(DL_SCHED_WARMUP);
    if (lua_type(L, 1) == LUA_TNUMBER) {
        s.warmup = dl_lua_check_int(L, fn, 1, "steps", 1);
        return push_sched(L, &s);
    }
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 1, 1);
    s.warmup = dl_lua_opt_integer(&o, "steps", 0, 1);
    dl_lua_opt_check(&o);
    if (s.warmup == 0)
        dl_lua_error(L, "%s: steps (the warmup length in optimizer steps) is required", fn);
    return push_sched(L, &s);
}

static int sched_onecycle(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "optim.onecycle", 1, 0);
    dl_schedule s = sched_base(DL_SCHED_ONECYCLE);
    s.max_lr = (float)dl_lua_opt_positive(&o, "max_lr", 0, 1);
    s.pct_start = (float)dl_lua_opt_positive(&o, "pct_start", 0.3, 0);
    s.div_factor = (float)dl_lua_opt_positive(&o, "div_factor", 25, 0);
    s.final_div = (float)dl_lua_opt_positive(&o, "final_div", 1e4, 0);
    dl_lua_opt_check(&o);
    if (s.pct_start >= 1)
        dl_lua_error(L, "optim.onecycle: pct_start must be below 1 (got %g)", (double)s.pct_start);
    return push_sched(L, &s);
}

static int sched_plateau(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "optim.plateau", 1, 0);
    dl_schedule s = sched_base(DL_SCHED_PLATEAU);
    s.factor = (float)dl_lua_opt_positive(&o, "factor", 0.1, 0);
    s.patience = dl_lua_opt_int(&o, "patience", 10, 0);
    s.threshold = (float)dl_lua_opt_positive(&o, "threshold", 1e-4, 1);
    char mode[8];
    dl_lua_opt_string(&o, "mode", "min", mode, sizeof mode);
    dl_lua_opt_check(&o);
    if (strcmp(mode, "min") && strcmp(mode, "max"))
        dl_lua_error(L, "optim.plateau: mode must be \"min\" or \"max\", got \"%s\"", mode);
    if (s.factor >= 1)
        dl_lua_error(L, "optim.plateau: factor must be below 1 (got %g)", (double)s.factor);
    s.mode_max = !strcmp(mode, "max");
    return push_sched(L, &s);
}

static int sched_tostring(lua_State *L)
{
    dl_schedule *s = luaL_checkudata(L, 1, DL_SCHED_MT);
    lua_pushfstring(L, "schedule(%s)", dl_schedule_name(s->kind));
    return 1;
}

int dl_lua_get_schedule(lua_State *L, int idx, dl_schedule *out)
{
    dl_schedule *s = luaL_testudata(L, idx, DL_SCHED_MT);
    if (!s)
        return 0;
    *out = *s;
    return 1;
}

int dl_lua_open_optim(lua_State *L)
{
    luaL_newmetatable(L, DL_OPTIM_MT);
    lua_pushcfunction(L, optim_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, optim_index);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    luaL_newmetatable(L, DL_SCHED_MT);
    lua_pushcfunction(L, sched_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"SGD", optim_sgd},         {"Adam", optim_adam},
                                   {"AdamW", optim_adamw},     {"constant", sched_constant},
                                   {"step", sched_step},       {"cosine", sched_cosine},
                                   {"warmup", sched_warmup},   {"onecycle", sched_onecycle},
                                   {"plateau", sched_plateau}, {NULL, NULL}};
    luaL_newlib(L, fns);
    return 1;
}
