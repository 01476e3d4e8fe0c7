/* lua_util.c - argument checking and option tables for the Lua bindings: errors that name the function, the argument and what was expected */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "scripting/lua_internal.h"

/* The script position of the caller of the binding: level 1 is the C
 * function, level 2 the Lua code that called it. */
static void push_where(lua_State *L)
{
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "Sl", &ar);
        if (ar.currentline > 0) {
            lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
            return;
        }
    }
    lua_pushliteral(L, "");
}

static const char *got_text(lua_State *L, int idx, char *buf, size_t size)
{
    int t = lua_type(L, idx);
    if (t == LUA_TNUMBER) {
        if (lua_isinteger(L, idx))
            snprintf(buf, size, "%lld", (long long)lua_tointeger(L, idx));
        else
            snprintf(buf, size, "%g", lua_tonumber(L, idx));
        return buf;
    }
    if (t == LUA_TSTRING) {
        snprintf(buf, size, "\"%.40s\"", lua_tostring(L, idx));
        return buf;
    }
    if (t == LUA_TNONE)
        return "nothing";
    int mt = luaL_getmetafield(L, idx, "__name"); /* pushes nothing when absent */
    if (mt == LUA_TSTRING) {
        const char *n = lua_tostring(L, -1);
        snprintf(buf, size, "%s", strncmp(n, "dlbench.", 8) ? n : n + 8);
        lua_pop(L, 1);
        return buf;
    }
    if (mt != LUA_TNIL)
        lua_pop(L, 1);
    return lua_typename(L, t);
}

int dl_lua_argerror(lua_State *L, const char *fn, int arg, const char *what, const char *expected)
{
    char got[64];
    const char *g = got_text(L, arg, got, sizeof got);
    push_where(L);
    if (what && what[0])
        lua_pushfstring(L, "bad argument #%d (%s) to %s: expected %s, got %s", arg, what, fn,
                        expected, g);
    else
        lua_pushfstring(L, "bad argument #%d to %s: expected %s, got %s", arg, fn, expected, g);
    lua_concat(L, 2);
    return lua_error(L);
}

int dl_lua_error(lua_State *L, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    push_where(L);
    lua_pushstring(L, msg);
    lua_concat(L, 2);
    return lua_error(L);
}

int dl_lua_fielderror(lua_State *L, const char *fn, const char *field, const char *expected)
{
    /* the offending value is on top of the stack */
    char got[64];
    const char *g = got_text(L, -1, got, sizeof got);
    return dl_lua_error(L, "bad field '%s' to %s: expected %s, got %s", field, fn, expected, g);
}

long dl_lua_check_int(lua_State *L, const char *fn, int arg, const char *what, long min)
{
    int ok = 0;
    lua_Integer v = lua_tointegerx(L, arg, &ok);
    if (!ok || v < min || v > INT_MAX) { /* sizes and counts: ints in the engine */
        char exp[64];
        if (min == 0)
            snprintf(exp, sizeof exp, "a non-negative integer");
        else if (min == 1)
            snprintf(exp, sizeof exp, "a positive integer");
        else
            snprintf(exp, sizeof exp, "an integer >= %ld", min);
        if (ok && v > INT_MAX)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), " up to %d", INT_MAX);
        dl_lua_argerror(L, fn, arg, what, exp);
    }
    return (long)v;
}

/* --- option tables ------------------------------------------------------ */

void dl_lua_opt_begin(dl_lua_opts *o, lua_State *L, const char *fn, int idx, int required)
{
    memset(o, 0, sizeof *o);
    o->L = L;
    o->fn = fn;
    idx = lua_absindex(L, idx);
    if (lua_istable(L, idx) && !lua_getmetatable(L, idx)) {
        o->idx = idx;
        return;
    }
    if (lua_istable(L, idx))
        lua_pop(L, 1); /* the metatable */
    if (lua_isnoneornil(L, idx) && !required)
        return;
    dl_lua_argerror(L, fn, idx, NULL, "a table of options {name = value, ...}");
}

static int opt_get(dl_lua_opts *o, const char *name)
{
    if (o->nknown < (int)(sizeof o->known / sizeof o->known[0]))
        o->known[o->nknown++] = name;
    if (!o->idx) {
        lua_pushnil(o->L);
        return LUA_TNIL;
    }
    return lua_getfield(o->L, o->idx, name);
}

int dl_lua_opt_push(dl_lua_opts *o, const char *name) { return opt_get(o, name); }

double dl_lua_opt_number(dl_lua_opts *o, const char *name, double def)
{
    int t = opt_get(o, name);
    double v = def;
    if (t == LUA_TNUMBER)
        v = lua_tonumber(o->L, -1);
    else if (t != LUA_TNIL)
        dl_lua_fielderror(o->L, o->fn, name, "a number");
    lua_pop(o->L, 1);
    return v;
}

double dl_lua_opt_positive(dl_lua_opts *o, const char *name, double def, int zero_ok)
{
    int t = opt_get(o, name);
    double v = def;
    if (t == LUA_TNUMBER) {
        v = lua_tonumber(o->L, -1);
        if (!(zero_ok ? v >= 0 : v > 0) || v != v)
            dl_lua_fielderror(o->L, o->fn, name, zero_ok ? "a number >= 0" : "a positive number");
    } else if (t != LUA_TNIL) {
        dl_lua_fielderror(o->L, o->fn, name, zero_ok ? "a number >= 0" : "a positive number");
    }
    lua_pop(o->L, 1);
    return v;
}

long dl_lua_opt_integer(dl_lua_opts *o, const char *name, long def, long min)
{
    int t = opt_get(o, name);
    long v = def;
    if (t != LUA_TNIL) {
        int ok = 0;
        lua_Integer i = lua_tointegerx(o->L, -1, &ok);
        if (t != LUA_TNUMBER || !ok || i < min) {
            char exp[64];
            if (min == 0)
                snprintf(exp, sizeof exp, "a non-negative integer");
            else if (min == 1)
                snprintf(exp, sizeof exp, "a positive integer");
            else
                snprintf(exp, sizeof exp, "an integer >= %ld", min);
            dl_lua_fielderror(o->L, o->fn, name, exp);
        }
        v = (long)i;
    }
    lua_pop(o->L, 1);
    return v;
}

int dl_lua_opt_int(dl_lua_opts *o, const char *name, int def, int min)
{
    int t = opt_get(o, name);
    lua_Integer i = def;
    if (t != LUA_TNIL) {
        int ok = 0;
        i = lua_tointegerx(o->L, -1, &ok);
        if (t != LUA_TNUMBER || !ok || i < min || i > INT_MAX) {
            char exp[64];
            if (min == 0 || min == 1)
                snprintf(exp, sizeof exp, "a %s integer%s", min ? "positive" : "non-negative",
                         ok && i > INT_MAX ? " up to 2147483647" : "");
            else
                snprintf(exp, sizeof exp, "an integer from %d to %d", min, INT_MAX);
            dl_lua_fielderror(o->L, o->fn, name, exp);
        }
    }
    lua_pop(o->L, 1);
    return (int)i;
}

int dl_lua_opt_boolean(dl_lua_opts *o, const char *name, int def)
{
    int t = opt_get(o, name);
    int v = def;
    if (t == LUA_TBOOLEAN)
        v = lua_toboolean(o->L, -1);
    else if (t != LUA_TNIL)
        dl_lua_fielderror(o->L, o->fn, name, "true or false");
    lua_pop(o->L, 1);
    return v;
}

const char *dl_lua_opt_string(dl_lua_opts *o, const char *name, const char *def, char *buf,
                              size_t size)
{
    int t = opt_get(o, name);
    if (t == LUA_TSTRING) {
        size_t len;
        const char *s = lua_tolstring(o->L, -1, &len);
        if (len >= size)
            dl_lua_fielderror(o->L, o->fn, name, "a shorter string");
        memcpy(buf, s, len + 1);
    } else if (t == LUA_TNIL) {
        if (def)
            snprintf(buf, size, "%s", def);
        else if (size)
            buf[0] = 0;
    } else {
        dl_lua_fielderror(o->L, o->fn, name, "a string");
    }
    lua_pop(o->L, 1);
    return buf;
}

void dl_lua_opt_check(dl_lua_opts *o)
{
    if (!o->idx)
        return;
    lua_State *L = o->L;
    lua_pushnil(L);
    while (lua_next(L, o->idx)) {
        lua_pop(L, 1);
        int found = 0;
        if (lua_type(L, -1) == LUA_TSTRING) {
            const char *k = lua_tostring(L, -1);
            for (int i = 0; i < o->nknown && !found; i++)
                found = !strcmp(k, o->known[i]);
        }
        if (!found) {
            char list[512] = "";
            size_t len = 0;
            for (int i = 0; i < o->nknown; i++)
                len += (size_t)snprintf(list + len, len < sizeof list ? sizeof list - len : 0,
                                        "%s%s", i ? ", " : "", o->known[i]);
            if (lua_type(L, -1) == LUA_TSTRING)
                dl_lua_error(L, "%s: unknown option '%s' (known: %s)", o->fn, lua_tostring(L, -1),
                             list);
            dl_lua_error(L, "%s: options must be named (known: %s)", o->fn, list);
        }
    }
}
