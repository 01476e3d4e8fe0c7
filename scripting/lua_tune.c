/* lua_tune.c - trial objects for study objectives: trial:float/int/choice/report/should_prune, fixed trials, in-memory studies */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/tune/tune.h"
#include "scripting/lua_internal.h"

#define MAX_CHOICES 64
#define LABEL_SIZE 64

/* A study kept in memory for Lua (dl.memory_study): trials it hands out
 * hold it in their user value, so it outlives them. */
typedef struct lua_memstudy {
    dl_study *s;
} lua_memstudy;

/* ---- small helpers --------------------------------------------------------- */

/* The shortest text that reads back as exactly v. */
static void number_text(double v, char *buf, size_t size)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

/* The text a choice is recorded under: strings as they are, integers,
 * numbers read back exactly, true/false. 0 for other types. */
static int choice_label(lua_State *L, int idx, char *buf, size_t size)
{
    switch (lua_type(L, idx)) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        if (len >= size || len == 0)
            return 0;
        memcpy(buf, s, len + 1);
        return 1;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            snprintf(buf, size, "%lld", (long long)lua_tointeger(L, idx));
        else
            number_text(lua_tonumber(L, idx), buf, size);
        return 1;
    case LUA_TBOOLEAN:
        snprintf(buf, size, "%s", lua_toboolean(L, idx) ? "true" : "false");
        return 1;
    default: return 0;
    }
}

static dl_lua_trial *check_trial(lua_State *L, const char *fn)
{
    dl_lua_trial *t = luaL_testudata(L, 1, DL_TRIAL_MT);
    if (!t)
        dl_lua_argerror(L, fn, 1, "self", "a trial (call it as trial:method(...))");
    return t;
}

static const char *check_name(lua_State *L, const char *fn)
{
    size_t len = 0;
    const char *name = lua_type(L, 2) == LUA_TSTRING ? lua_tolstring(L, 2, &len) : NULL;
    if (!name || len == 0 || len >= sizeof(((dl_hparam *)0)->name) || strchr(name, '='))
        dl_lua_argerror(L, fn, 2, "name",
                        "a parameter name (a non-empty string of at most 63 "
                        "characters, without '=')");
    return name;
}

static double check_finite(lua_State *L, const char *fn, int arg, const char *what)
{
    if (lua_type(L, arg) != LUA_TNUMBER || !isfinite(lua_tonumber(L, arg)))
        dl_lua_argerror(L, fn, arg, what, "a finite number");
    return lua_tonumber(L, arg);
}

static long check_integer(lua_State *L, const char *fn, int arg, const char *what)
{
    int ok = 0;
    lua_Integer v = lua_tointegerx(L, arg, &ok);
    if (lua_type(L, arg) != LUA_TNUMBER || !ok)
        dl_lua_argerror(L, fn, arg, what, "an integer");
    return (long)v;
}

/* {log = true}: the only option of trial:float and trial:int. */
static int log_option(lua_State *L, const char *fn, int arg)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, arg, 0);
    int log = dl_lua_opt_boolean(&o, "log", 0);
    dl_lua_opt_check(&o);
    return log;
}

static dl_hparam *find_param(dl_lua_trial *t, const char *name)
{
    for (int i = 0; i < t->np; i++)
        if (!strcmp(t->params[i].name, name))
            return &t->params[i];
    return NULL;
}

/* Records a suggested value in suggestion order (for the run's config). */
static void remember(lua_State *L, dl_lua_trial *t, const char *name, dl_hp_type type, double num,
                     const char *str)
{
    if (find_param(t, name))
        return;
    if (t->np == DL_MAX_TRIAL_PARAMS)
        dl_lua_error(L, "trial: at most %d parameters per trial", DL_MAX_TRIAL_PARAMS);
    dl_hparam *p = &t->params[t->np++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->type = type;
    p->num = num;
    if (str)
        snprintf(p->str, sizeof p->str, "%s", str);
}

/* Fixed trials: pushes the value given for name (a k=v override's text or
 * a dl.fixed_trial table's value) and marks an override used; raises when
 * there is none, saying how to give one. */
static void push_fixed(lua_State *L, dl_lua_trial *t, const char *fn, const char *name,
                       const char *what)
{
    lua_getiuservalue(L, 1, 1);
    if (lua_getfield(L, -1, name) == LUA_TNIL) {
        if (t->from_overrides)
            dl_lua_error(L,
                         "%s: study parameter '%s' has no value: this script returns a study; "
                         "tune it with `dlbench tune SCRIPT`, or run one trial by giving every "
                         "parameter as NAME=VALUE (%s=%s)",
                         fn, name, name, what);
        dl_lua_error(L, "%s: the fixed trial has no value for '%s' (%s)", fn, name, what);
    }
    lua_remove(L, -2);
    if (t->from_overrides) {
        lua_getfield(L, LUA_REGISTRYINDEX, "dlbench.hp_used");
        if (lua_istable(L, -1)) {
            lua_pushboolean(L, 1);
            lua_setfield(L, -2, name);
        }
        lua_pop(L, 1);
    }
}

/* The number given for a fixed float or int parameter, checked against
 * its bounds. */
static double fixed_number(lua_State *L, dl_lua_trial *t, const char *fn, const char *name,
                           double lo, double hi, int integer)
{
    char what[160];
    snprintf(what, sizeof what, "%s in [%.10g, %.10g]", integer ? "an integer" : "a number", lo,
             hi);
    push_fixed(L, t, fn, name, what);
    double v = NAN;
    if (lua_type(L, -1) == LUA_TNUMBER) {
        v = lua_tonumber(L, -1);
    } else if (lua_type(L, -1) == LUA_TSTRING) {
        char *end;
        const char *text = lua_tostring(L, -1);
        v = strtod(text, &end);
        if (!*text || *end)
            v = NAN;
    }
    if (!isfinite(v) || (integer && v != floor(v)) || v < lo || v > hi) {
        char got[64];
        snprintf(got, sizeof got, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
        dl_lua_error(L, "%s: %s=%s: expected %s", fn, name, got, what);
    }
    lua_pop(L, 1);
    return v;
}

/* ---- trial methods -------------------------------------------------------- */

/* trial:float(name, lo, hi [, {log = true}]) -> number */
static int trial_float(lua_State *L)
{
    const char *fn = "trial:float";
    dl_lua_trial *t = check_trial(L, fn);
    const char *name = check_name(L, fn);
    double lo = check_finite(L, fn, 3, "lo");
    double hi = check_finite(L, fn, 4, "hi");
    int log = log_option(L, fn, 5);
    char exp[96];
    if (log && !(lo > 0))
        dl_lua_argerror(L, fn, 3, "lo", "a number > 0 (log = true samples in log space)");
    if (hi < lo) {
        snprintf(exp, sizeof exp, "a number >= lo (%g)", lo);
        dl_lua_argerror(L, fn, 4, "hi", exp);
    }
    double v;
    if (t->t) {
        if (dl_trial_suggest_float(t->t, name, lo, hi, log, &v) < 0)
            return dl_lua_error(L, "%s", dl_error_message());
    } else {
        v = fixed_number(L, t, fn, name, lo, hi, 0);
    }
    remember(L, t, name, DL_HP_NUMBER, v, NULL);
    lua_pushnumber(L, v);
    return 1;
}

/* trial:int(name, lo, hi [, {log = true}]) -> integer */
static int trial_int(lua_State *L)
{
    const char *fn = "trial:int";
    dl_lua_trial *t = check_trial(L, fn);
    const char *name = check_name(L, fn);
    long lo = check_integer(L, fn, 3, "lo");
    long hi = check_integer(L, fn, 4, "hi");
    int log = log_option(L, fn, 5);
    char exp[96];
    if (log && lo < 1)
        dl_lua_argerror(L, fn, 3, "lo", "an integer >= 1 (log = true samples in log space)");
    if (hi < lo) {
        snprintf(exp, sizeof exp, "an integer >= lo (%ld)", lo);
        dl_lua_argerror(L, fn, 4, "hi", exp);
    }
    long v;
    if (t->t) {
        if (dl_trial_suggest_int(t->t, name, lo, hi, log, &v) < 0)
            return dl_lua_error(L, "%s", dl_error_message());
    } else {
        v = (long)fixed_number(L, t, fn, name, (double)lo, (double)hi, 1);
    }
    remember(L, t, name, DL_HP_INTEGER, (double)v, NULL);
    lua_pushinteger(L, v);
    return 1;
}

/* trial:choice(name, {a, b, ...}) -> the chosen element itself */
static int trial_choice(lua_State *L)
{
    const char *fn = "trial:choice";
    dl_lua_trial *t = check_trial(L, fn);
    const char *name = check_name(L, fn);
    const char *expected = "a non-empty list of strings, numbers or booleans";
    if (!lua_istable(L, 3))
        dl_lua_argerror(L, fn, 3, "choices", expected);
    int n = (int)luaL_len(L, 3);
    if (n < 1 || n > MAX_CHOICES)
        dl_lua_argerror(L, fn, 3, "choices", n < 1 ? expected : "at most 64 choices");
    if (!lua_isnone(L, 4))
        dl_lua_argerror(L, fn, 4, NULL, "no more arguments (trial:choice(name, {...}))");
    char(*labels)[LABEL_SIZE] = lua_newuserdatauv(L, (size_t)n * LABEL_SIZE, 0); /* scratch */
    const char *ptrs[MAX_CHOICES];
    for (int i = 0; i < n; i++) {
        lua_geti(L, 3, i + 1);
        if (!choice_label(L, -1, labels[i], LABEL_SIZE))
            dl_lua_error(L,
                         "bad argument #3 (choices) to %s: choice %d is a %s; expected a "
                         "string (1 to 63 characters), a number or a boolean",
                         fn, i + 1, luaL_typename(L, -1));
        lua_pop(L, 1);
        for (int j = 0; j < i; j++)
            if (!strcmp(labels[i], labels[j]))
                dl_lua_error(L, "bad argument #3 (choices) to %s: \"%s\" is listed twice", fn,
                             labels[i]);
        ptrs[i] = labels[i];
    }
    int index = -1;
    if (t->t) {
        if (dl_trial_suggest_choice(t->t, name, ptrs, n, &index) < 0)
            return dl_lua_error(L, "%s", dl_error_message());
    } else {
        char what[512];
        size_t len = (size_t)snprintf(what, sizeof what, "one of");
        for (int i = 0; i < n && len < sizeof what; i++)
            len += (size_t)snprintf(what + len, sizeof what - len, " %s", labels[i]);
        push_fixed(L, t, fn, name, what);
        char given[LABEL_SIZE] = "";
        if (choice_label(L, -1, given, sizeof given))
            for (int i = 0; i < n && index < 0; i++)
                if (!strcmp(given, labels[i]))
                    index = i;
        if (index < 0)
            dl_lua_error(L, "%s: %s=%s: expected %s", fn, name,
                         lua_tostring(L, -1) ? lua_tostring(L, -1) : luaL_typename(L, -1), what);
        lua_pop(L, 1);
    }
    if (index < 0 || index >= n)
        return dl_lua_error(L, "%s: the study chose no valid element", fn);
    remember(L, t, name, DL_HP_STRING, index, labels[index]);
    lua_geti(L, 3, index + 1);
    return 1;
}

/* trial:report(step, value): an intermediate value (the trainer reports the
 * study's metric after each epoch by itself). */
static int trial_report(lua_State *L)
{
    const char *fn = "trial:report";
    dl_lua_trial *t = check_trial(L, fn);
    long step = dl_lua_check_int(L, fn, 2, "step", 0);
    if (lua_type(L, 3) != LUA_TNUMBER)
        return dl_lua_argerror(L, fn, 3, "value", "a number");
    if (t->t && dl_trial_report(t->t, step, lua_tonumber(L, 3)) < 0)
        return dl_lua_error(L, "%s: %s", fn, dl_error_message());
    return 0;
}

/* trial:should_prune() -> boolean: the pruner's verdict on the values
 * reported so far (a fixed trial is never pruned). */
static int trial_should_prune(lua_State *L)
{
    const char *fn = "trial:should_prune";
    dl_lua_trial *t = check_trial(L, fn);
    int prune = 0;
    if (t->t) {
        prune = dl_trial_should_prune(t->t);
        if (prune < 0)
            return dl_lua_error(L, "%s: %s", fn, dl_error_message());
    }
    t->prune_said |= prune;
    lua_pushboolean(L, prune);
    return 1;
}

static void push_params(lua_State *L, const dl_lua_trial *t)
{
    lua_createtable(L, 0, t->np);
    for (int i = 0; i < t->np; i++) {
        const dl_hparam *p = &t->params[i];
        if (p->type == DL_HP_INTEGER)
            lua_pushinteger(L, (lua_Integer)p->num);
        else if (p->type == DL_HP_NUMBER)
            lua_pushnumber(L, p->num);
        else
            lua_pushstring(L, p->str);
        lua_setfield(L, -2, p->name);
    }
}

static int trial_index(lua_State *L)
{
    dl_lua_trial *t = check_trial(L, "trial");
    const char *k = lua_tostring(L, 2);
    static const luaL_Reg methods[] = {{"float", trial_float},
                                       {"int", trial_int},
                                       {"choice", trial_choice},
                                       {"report", trial_report},
                                       {"should_prune", trial_should_prune},
                                       {NULL, NULL}};
    if (k && !strcmp(k, "number")) {
        lua_pushinteger(L, t->number);
        return 1;
    }
    if (k && !strcmp(k, "params")) {
        push_params(L, t);
        return 1;
    }
    for (int i = 0; k && methods[i].name; i++)
        if (!strcmp(k, methods[i].name)) {
            lua_pushcfunction(L, methods[i].func);
            return 1;
        }
    return dl_lua_error(L,
                        "trial has no field '%s' (float, int, choice, report, should_prune, "
                        "number, params)",
                        k ? k : luaL_typename(L, 2));
}

static int trial_newindex(lua_State *L)
{
    return dl_lua_error(L, "trial is read-only: suggest values with trial:float/int/choice");
}

static int trial_tostring(lua_State *L)
{
    dl_lua_trial *t = luaL_checkudata(L, 1, DL_TRIAL_MT);
    if (t->t)
        lua_pushfstring(L, "trial %d", t->number);
    else
        lua_pushliteral(L, "trial (fixed)");
    return 1;
}

static void trial_metatable(lua_State *L)
{
    if (luaL_newmetatable(L, DL_TRIAL_MT)) {
        lua_pushcfunction(L, trial_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, trial_newindex);
        lua_setfield(L, -2, "__newindex");
        lua_pushcfunction(L, trial_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
}

dl_lua_trial *dl_lua_push_trial(lua_State *L, dl_trial *trial, int fixed_idx, int from_overrides)
{
    if (fixed_idx)
        fixed_idx = lua_absindex(L, fixed_idx);
    trial_metatable(L);
    dl_lua_trial *t = lua_newuserdatauv(L, sizeof *t, 2);
    memset(t, 0, sizeof *t);
    t->t = trial;
    t->number = trial ? dl_trial_number(trial) : -1;
    t->from_overrides = from_overrides;
    if (fixed_idx)
        lua_pushvalue(L, fixed_idx);
    else
        lua_newtable(L);
    lua_setiuservalue(L, -2, 1);
    luaL_setmetatable(L, DL_TRIAL_MT);
    return t;
}

/* dl.fixed_trial { name = value, ... }: a trial whose suggestions return
 * the given values (checked against each suggestion's bounds), for calling
 * an objective by hand. */
static int l_fixed_trial(lua_State *L)
{
    if (!lua_istable(L, 1))
        return dl_lua_argerror(L, "dl.fixed_trial", 1, "values", "a table {name = value, ...}");
    dl_lua_push_trial(L, NULL, 1, 0);
    return 1;
}

/* ---- dl.memory_study -------------------------------------------------------- */

static lua_memstudy *check_memstudy(lua_State *L, const char *fn)
{
    lua_memstudy *m = luaL_testudata(L, 1, DL_MEMSTUDY_MT);
    if (!m)
        dl_lua_argerror(L, fn, 1, "self", "a study from dl.memory_study{...}");
    if (!m->s)
        dl_lua_error(L, "%s: the study is closed", fn);
    return m;
}

/* dl.memory_study { direction =, sampler =, pruner =, seed =, trials = }:
 * a study kept in memory, driven by study:ask() and study:tell(). */
static int l_memory_study(lua_State *L)
{
    const char *fn = "dl.memory_study";
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 1, 0);
    char dir[16], sampler[24], pruner[24];
    dl_lua_opt_string(&o, "direction", "minimize", dir, sizeof dir);
    dl_lua_opt_string(&o, "sampler", "tpe", sampler, sizeof sampler);
    dl_lua_opt_string(&o, "pruner", "none", pruner, sizeof pruner);
    long seed = dl_lua_opt_integer(&o, "seed", 0, 0);
    long trials = dl_lua_opt_integer(&o, "trials", 0, 0);
    dl_lua_opt_check(&o);
    if (strcmp(dir, "minimize") && strcmp(dir, "maximize"))
        return dl_lua_error(L, "%s: direction must be \"minimize\" or \"maximize\", got \"%s\"", fn,
                            dir);
    dl_sampler_config sc;
    dl_pruner_config pc;
    if (dl_tune_sampler_parse(sampler, &sc) < 0 || dl_tune_pruner_parse(pruner, &pc) < 0)
        return dl_lua_error(L, "%s: %s", fn, dl_error_message());
    lua_memstudy *m = lua_newuserdatauv(L, sizeof *m, 0);
    m->s = NULL; /* empty before the resource: __gc may run on a failed open */
    luaL_setmetatable(L, DL_MEMSTUDY_MT);
    if (dl_study_open(&m->s, NULL, "lua",
                      strcmp(dir, "maximize") ? DL_STUDY_MINIMIZE : DL_STUDY_MAXIMIZE, &sc, &pc,
                      (uint64_t)seed) < 0)
        return dl_lua_error(L, "%s: %s", fn, dl_error_message());
    if (trials > 0)
        dl_study_set_budget(m->s, (int)trials);
    return 1;
}

/* study:ask() -> trial, or nil when the budget is spent */
static int memstudy_ask(lua_State *L)
{
    lua_memstudy *m = check_memstudy(L, "study:ask");
    dl_trial *t = NULL;
    int rc = dl_study_ask(m->s, &t);
    if (rc == DL_STUDY_DONE)
        return 0;
    if (rc < 0)
        return dl_lua_error(L, "study:ask: %s", dl_error_message());
    dl_lua_push_trial(L, t, 0, 0);
    lua_pushvalue(L, 1); /* the trial keeps the study alive */
    lua_setiuservalue(L, -2, 2);
    return 1;
}

/* study:tell(trial, value | "pruned" | "failed") */
static int memstudy_tell(lua_State *L)
{
    const char *fn = "study:tell";
    lua_memstudy *m = check_memstudy(L, fn);
    dl_lua_trial *t = luaL_testudata(L, 2, DL_TRIAL_MT);
    if (!t || !t->t)
        return dl_lua_argerror(L, fn, 2, "trial", "a trial from study:ask()");
    lua_getiuservalue(L, 2, 2);
    int mine = lua_rawequal(L, -1, 1);
    lua_pop(L, 1);
    if (!mine)
        return dl_lua_argerror(L, fn, 2, "trial", "a trial of this study");
    dl_trial_state st = DL_TRIAL_COMPLETE;
    double v = NAN;
    if (lua_type(L, 3) == LUA_TNUMBER)
        v = lua_tonumber(L, 3);
    else if (lua_type(L, 3) == LUA_TSTRING && !strcmp(lua_tostring(L, 3), "pruned"))
        st = DL_TRIAL_PRUNED;
    else if (lua_type(L, 3) == LUA_TSTRING && !strcmp(lua_tostring(L, 3), "failed"))
        st = DL_TRIAL_FAILED;
    else
        return dl_lua_argerror(L, fn, 3, "result", "a number, \"pruned\" or \"failed\"");
    if (dl_study_tell(m->s, t->t, st, v) < 0)
        return dl_lua_error(L, "%s: %s", fn, dl_error_message());
    return 0;
}

/* study:best() -> value, trial number, {params}; nil when no trial is complete */
static int memstudy_best(lua_State *L)
{
    lua_memstudy *m = check_memstudy(L, "study:best");
    const dl_trial *b = dl_study_best(m->s);
    if (!b)
        return 0;
    lua_pushnumber(L, dl_trial_value(b));
    lua_pushinteger(L, dl_trial_number(b));
    lua_createtable(L, 0, dl_trial_param_count(b));
    for (int i = 0; i < dl_trial_param_count(b); i++) {
        const dl_tune_param *p = dl_trial_param(b, i);
        if (p->kind == DL_PARAM_CHOICE)
            lua_pushstring(L, p->choices[(int)p->value]);
        else if (p->kind == DL_PARAM_INT)
            lua_pushinteger(L, (lua_Integer)p->value);
        else
            lua_pushnumber(L, p->value);
        lua_setfield(L, -2, p->name);
    }
    return 3;
}

static int memstudy_len(lua_State *L)
{
    lua_memstudy *m = check_memstudy(L, "#study");
    lua_pushinteger(L, dl_study_count(m->s));
    return 1;
}

/* __gc and __close: may run twice */
static int memstudy_close(lua_State *L)
{
    lua_memstudy *m = luaL_checkudata(L, 1, DL_MEMSTUDY_MT);
    dl_study_destroy(m->s);
    m->s = NULL;
    return 0;
}

int dl_lua_open_tune(lua_State *L)
{
    trial_metatable(L);
    if (luaL_newmetatable(L, DL_MEMSTUDY_MT)) {
        static const luaL_Reg methods[] = {{"ask", memstudy_ask},
                                           {"tell", memstudy_tell},
                                           {"best", memstudy_best},
                                           {"close", memstudy_close},
                                           {NULL, NULL}};
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, memstudy_len);
        lua_setfield(L, -2, "__len");
        lua_pushcfunction(L, memstudy_close);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, memstudy_close);
        lua_setfield(L, -2, "__close");
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"fixed_trial", l_fixed_trial}, {"memory_study", l_memory_study}, {NULL, NULL}};
    luaL_newlib(L, fns);
    return 1;
}
