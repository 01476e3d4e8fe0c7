/* lua_tensor.c - small f32 tensors for scripts: create, index, print, copy to a table
 *
 * The numbers live inside the userdata block itself, so the garbage
 * collector sees their full size and collects big tensors promptly without
 * a manual collectgarbage(). A row t[i] of an n-D tensor is a view: it
 * points into its parent's block and keeps the parent alive through its
 * user value.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "scripting/lua_internal.h"

typedef struct lua_tensor {
    float *data;
    int ndim;
    int64_t dim[DL_MAX_DIMS];
    int64_t numel;
    float own[]; /* data of an owning tensor */
} lua_tensor;

#define MAX_NUMEL ((int64_t)1 << 28)

static lua_tensor *check_tensor(lua_State *L, int idx, const char *fn)
{
    lua_tensor *t = luaL_testudata(L, idx, DL_TENSOR_MT);
    if (!t)
        dl_lua_argerror(L, fn, idx, "tensor", "a tensor");
    return t;
}

static lua_tensor *new_tensor(lua_State *L, int ndim, const int64_t *dim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dim[i];
    lua_tensor *t = lua_newuserdatauv(L, sizeof *t + (size_t)n * sizeof(float), 1);
    t->data = t->own;
    t->ndim = ndim;
    memcpy(t->dim, dim, sizeof(int64_t) * (size_t)ndim);
    t->numel = n;
    memset(t->own, 0, (size_t)n * sizeof(float));
    luaL_setmetatable(L, DL_TENSOR_MT);
    return t;
}

float *dl_lua_push_tensor(lua_State *L, const dl_shape *shape)
{
    return new_tensor(L, shape->ndim, shape->dim)->data;
}

/* Shape from numbers at args first..top: dl.zeros(2, 3). */
static int shape_args(lua_State *L, const char *fn, int first, int64_t *dim)
{
    int top = lua_gettop(L), nd = top - first + 1;
    if (nd < 1 || nd > DL_MAX_DIMS)
        dl_lua_error(L, "%s: expected 1 to %d sizes, got %d", fn, DL_MAX_DIMS, nd < 0 ? 0 : nd);
    int64_t n = 1;
    for (int i = 0; i < nd; i++) {
        dim[i] = dl_lua_check_int(L, fn, first + i, "size", 1);
        n *= dim[i];
        if (n > MAX_NUMEL)
            dl_lua_error(L, "%s: tensor too large for a script (%lld elements at most)", fn,
                         (long long)MAX_NUMEL);
    }
    return nd;
}

/* Walks a nested table to find its shape (first elements), then checks
 * every level against it while copying. */
static int table_shape(lua_State *L, int idx, int64_t *dim, const char *fn)
{
    int nd = 0;
    lua_pushvalue(L, idx);
    while (lua_istable(L, -1)) {
        if (nd == DL_MAX_DIMS)
            dl_lua_error(L, "%s: more than %d nesting levels", fn, DL_MAX_DIMS);
        dim[nd] = (int64_t)luaL_len(L, -1);
        if (dim[nd] == 0)
            dl_lua_error(L, "%s: empty list at nesting level %d", fn, nd + 1);
        nd++;
        lua_geti(L, -1, 1);
        lua_remove(L, -2);
    }
    lua_pop(L, 1);
    return nd;
}

static void table_fill(lua_State *L, int idx, const lua_tensor *t, int level, float **out,
                       const char *fn)
{
    idx = lua_absindex(L, idx);
    if (!lua_istable(L, idx) || (int64_t)luaL_len(L, idx) != t->dim[level])
        dl_lua_error(L, "%s: ragged nested list: level %d should have %lld entries", fn, level + 1,
                     (long long)t->dim[level]);
    for (int64_t i = 0; i < t->dim[level]; i++) {
        lua_geti(L, idx, i + 1);
        if (level + 1 < t->ndim) {
            table_fill(L, -1, t, level + 1, out, fn);
        } else {
            int ok;
            lua_Number v = lua_tonumberx(L, -1, &ok);
            if (!ok)
                dl_lua_error(L, "%s: element %lld at level %d is a %s, expected a number", fn,
                             (long long)i + 1, level + 1, luaL_typename(L, -1));
            *(*out)++ = (float)v;
        }
        lua_pop(L, 1);
    }
}

/* dl.tensor{{1, 2}, {3, 4}} or dl.tensor(2, 3) (zeros). */
static int t_new(lua_State *L)
{
    const char *fn = "dl.tensor";
    int64_t dim[DL_MAX_DIMS];
    if (lua_istable(L, 1)) {
        int nd = table_shape(L, 1, dim, fn);
        int64_t n = 1;
        for (int i = 0; i < nd; i++)
            n *= dim[i];
        if (n > MAX_NUMEL)
            dl_lua_error(L, "%s: tensor too large for a script", fn);
        lua_tensor *t = new_tensor(L, nd, dim);
        float *p = t->data;
        table_fill(L, 1, t, 0, &p, fn);
        return 1;
    }
    if (lua_type(L, 1) != LUA_TNUMBER)
        return dl_lua_argerror(L, fn, 1, NULL, "a nested list of numbers or sizes");
    new_tensor(L, shape_args(L, fn, 1, dim), dim);
    return 1;
}

static int t_zeros(lua_State *L)
{
    int64_t dim[DL_MAX_DIMS];
    new_tensor(L, shape_args(L, "dl.zeros", 1, dim), dim);
    return 1;
}

static int t_ones(lua_State *L)
{
    int64_t dim[DL_MAX_DIMS];
    lua_tensor *t = new_tensor(L, shape_args(L, "dl.ones", 1, dim), dim);
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = 1;
    return 1;
}

static int64_t row_size(const lua_tensor *t)
{
    int64_t r = 1;
    for (int i = 1; i < t->ndim; i++)
        r *= t->dim[i];
    return r;
}

static int64_t check_index(lua_State *L, const lua_tensor *t, int idx, int d, const char *fn)
{
    int ok;
    lua_Integer i = lua_tointegerx(L, idx, &ok);
    if (!ok || i < 1 || i > t->dim[d]) {
        char exp[64];
        snprintf(exp, sizeof exp, "an index in 1..%lld", (long long)t->dim[d]);
        dl_lua_argerror(L, fn, idx, "index", exp);
    }
    return (int64_t)i - 1;
}

/* Offset of the element named by args first.. (one index per dimension). */
static int64_t element(lua_State *L, const lua_tensor *t, int first, const char *fn)
{
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++)
        off = off * t->dim[d] + check_index(L, t, first + d, d, fn);
    return off;
}

static int t_get(lua_State *L)
{
    lua_tensor *t = check_tensor(L, 1, "tensor:get");
    if (lua_gettop(L) - 1 != t->ndim)
        return dl_lua_error(L, "tensor:get: expected %d indices for a %d-D tensor, got %d", t->ndim,
                            t->ndim, lua_gettop(L) - 1);
    lua_pushnumber(L, t->data[element(L, t, 2, "tensor:get")]);
    return 1;
}

static int t_set(lua_State *L)
{
    lua_tensor *t = check_tensor(L, 1, "tensor:set");
    int top = lua_gettop(L);
    if (top - 2 != t->ndim)
        return dl_lua_error(L, "tensor:set: expected %d indices and a value, got %d arguments",
                            t->ndim, top - 1);
    if (lua_type(L, top) != LUA_TNUMBER)
        return dl_lua_argerror(L, "tensor:set", top, "value", "a number");
    t->data[element(L, t, 2, "tensor:set")] = (float)lua_tonumber(L, top);
    lua_settop(L, 1);
    return 1;
}

static int t_size(lua_State *L)
{
    lua_tensor *t = check_tensor(L, 1, "tensor:size");
    if (!lua_isnoneornil(L, 2)) {
        long d = dl_lua_check_int(L, "tensor:size", 2, "dim", 1);
        if (d > t->ndim)
            return dl_lua_error(L, "tensor:size: dimension %ld of a %d-D tensor", d, t->ndim);
        lua_pushinteger(L, t->dim[d - 1]);
        return 1;
    }
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, t->dim[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int t_dim(lua_State *L)
{
    lua_pushinteger(L, check_tensor(L, 1, "tensor:dim")->ndim);
    return 1;
}

static int t_numel(lua_State *L)
{
    lua_pushinteger(L, check_tensor(L, 1, "tensor:numel")->numel);
    return 1;
}

static void push_table(lua_State *L, const lua_tensor *t, int level, const float **p)
{
    lua_createtable(L, (int)t->dim[level], 0);
    for (int64_t i = 0; i < t->dim[level]; i++) {
        if (level + 1 < t->ndim)
            push_table(L, t, level + 1, p);
        else
            lua_pushnumber(L, *(*p)++);
        lua_rawseti(L, -2, i + 1);
    }
}

static int t_totable(lua_State *L)
{
    lua_tensor *t = check_tensor(L, 1, "tensor:totable");
    const float *p = t->data;
    push_table(L, t, 0, &p);
    return 1;
}

static int t_fill(lua_State *L)
{
    lua_tensor *t = check_tensor(L, 1, "tensor:fill");
    if (lua_type(L, 2) != LUA_TNUMBER)
        return dl_lua_argerror(L, "tensor:fill", 2, "value", "a number");
    float v = (float)lua_tonumber(L, 2);
    for (int64_t i = 0; i < t->numel; i++)
        t->data[i] = v;
    lua_settop(L, 1);
    return 1;
}

static int t_clone(lua_State *L)
{
    lua_tensor *t = check_tensor(L, 1, "tensor:clone");
    lua_tensor *c = new_tensor(L, t->ndim, t->dim);
    memcpy(c->data, t->data, (size_t)t->numel * sizeof(float));
    return 1;
}

static int reduce(lua_State *L, const char *fn, int kind)
{
    lua_tensor *t = check_tensor(L, 1, fn);
    double acc = kind == 0 || kind == 3 ? 0 : t->data[0];
    for (int64_t i = 0; i < t->numel; i++) {
        double v = t->data[i];
        if (kind == 0 || kind == 3)
            acc += v;
        else if (kind == 1 ? v < acc : v > acc)
            acc = v;
    }
    if (kind == 3)
        acc /= (double)t->numel;
    lua_pushnumber(L, acc);
    return 1;
}

static int t_sum(lua_State *L) { return reduce(L, "tensor:sum", 0); }
static int t_min(lua_State *L) { return reduce(L, "tensor:min", 1); }
static int t_max(lua_State *L) { return reduce(L, "tensor:max", 2); }
static int t_mean(lua_State *L) { return reduce(L, "tensor:mean", 3); }

static int t_len(lua_State *L)
{
    lua_pushinteger(L, check_tensor(L, 1, "#tensor")->dim[0]);
    return 1;
}

static int t_index(lua_State *L)
{
    lua_tensor *t = check_tensor(L, 1, "tensor[]");
    if (lua_type(L, 2) != LUA_TNUMBER) {
        /* methods */
        luaL_getmetatable(L, DL_TENSOR_MT);
        lua_getfield(L, -1, "methods");
        lua_pushvalue(L, 2);
        lua_gettable(L, -2);
        return 1;
    }
    int64_t i = check_index(L, t, 2, 0, "tensor[]");
    if (t->ndim == 1) {
        lua_pushnumber(L, t->data[i]);
        return 1;
    }
    /* a view of row i, keeping the parent alive */
    lua_tensor *v = lua_newuserdatauv(L, sizeof *v, 1);
    int64_t r = row_size(t);
    v->data = t->data + i * r;
    v->ndim = t->ndim - 1;
    for (int d = 1; d < t->ndim; d++)
        v->dim[d - 1] = t->dim[d];
    v->numel = r;
    luaL_setmetatable(L, DL_TENSOR_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

static int t_newindex(lua_State *L)
{
    lua_tensor *t = check_tensor(L, 1, "tensor[]=");
    int64_t i = check_index(L, t, 2, 0, "tensor[]=");
    if (lua_type(L, 3) != LUA_TNUMBER)
        return dl_lua_argerror(L, "tensor[]=", 3, "value", "a number");
    float v = (float)lua_tonumber(L, 3);
    int64_t r = row_size(t);
    for (int64_t j = 0; j < r; j++)
        t->data[i * r + j] = v;
    return 0;
}

static int t_eq(lua_State *L)
{
    lua_tensor *a = luaL_testudata(L, 1, DL_TENSOR_MT), *b = luaL_testudata(L, 2, DL_TENSOR_MT);
    int eq = a && b && a->ndim == b->ndim &&
             !memcmp(a->dim, b->dim, sizeof(int64_t) * (size_t)a->ndim) &&
             !memcmp(a->data, b->data, (size_t)a->numel * sizeof(float));
    lua_pushboolean(L, eq);
    return 1;
}

/* "tensor [2, 3]" then the values, rows on lines, at most 8 rows x 10. */
static int t_tostring(lua_State *L)
{
    lua_tensor *t = check_tensor(L, 1, "tostring");
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    char buf[64];
    luaL_addstring(&b, "tensor [");
    for (int i = 0; i < t->ndim; i++) {
        snprintf(buf, sizeof buf, "%s%lld", i ? ", " : "", (long long)t->dim[i]);
        luaL_addstring(&b, buf);
    }
    luaL_addstring(&b, "]");
    int64_t cols = t->dim[t->ndim - 1], rows = t->numel / cols;
    for (int64_t r = 0; r < rows && r < 8; r++) {
        luaL_addstring(&b, "\n ");
        for (int64_t c = 0; c < cols && c < 10; c++) {
            snprintf(buf, sizeof buf, " %.6g", (double)t->data[r * cols + c]);
            luaL_addstring(&b, buf);
        }
        if (cols > 10)
            luaL_addstring(&b, " ...");
    }
    if (rows > 8)
        luaL_addstring(&b, "\n  ...");
    luaL_pushresult(&b);
    return 1;
}

int dl_lua_open_tensor(lua_State *L)
{
    static const luaL_Reg meta[] = {{"__index", t_index}, {"__newindex", t_newindex},
                                    {"__len", t_len},     {"__tostring", t_tostring},
                                    {"__eq", t_eq},       {NULL, NULL}};
    static const luaL_Reg methods[] = {{"get", t_get},   {"set", t_set},     {"size", t_size},
                                       {"dim", t_dim},   {"numel", t_numel}, {"totable", t_totable},
                                       {"fill", t_fill}, {"clone", t_clone}, {"sum", t_sum},
                                       {"mean", t_mean}, {"min", t_min},     {"max", t_max},
                                       {NULL, NULL}};
    luaL_newmetatable(L, DL_TENSOR_MT);
    luaL_setfuncs(L, meta, 0);
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "methods");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {
        {"tensor", t_new}, {"zeros", t_zeros}, {"ones", t_ones}, {NULL, NULL}};
    luaL_newlib(L, fns);
    return 1;
}
