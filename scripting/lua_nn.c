/* lua_nn.c - dl.nn: layers, containers and losses as Lua userdata */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "scripting/lua_internal.h"

/* --- layer userdata ----------------------------------------------------- */

static int layer_gc(lua_State *L)
{
    lua_layer *u = luaL_checkudata(L, 1, DL_LAYER_MT);
    dl_layer_destroy(u->l); /* NULL after a container took it: may run twice */
    u->l = NULL;
    return 0;
}

static int layer_tostring(lua_State *L)
{
    lua_layer *u = luaL_checkudata(L, 1, DL_LAYER_MT);
    if (u->l) {
        char buf[256];
        dl_layer_describe(u->l, buf, sizeof buf);
        lua_pushstring(L, buf);
    } else {
        lua_pushstring(L, u->text);
    }
    return 1;
}

lua_layer *dl_lua_test_layer(lua_State *L, int idx) { return luaL_testudata(L, idx, DL_LAYER_MT); }

/* Creates the empty userdata first, then the layer, so a failure leaves
 * nothing to leak. */
static lua_layer *push_layer(lua_State *L)
{
    lua_layer *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->l = NULL;
    u->text[0] = 0;
    luaL_setmetatable(L, DL_LAYER_MT);
    return u;
}

static int finish_layer(lua_State *L, lua_layer *u, dl_layer *l, const char *fn, const char *name)
{
    if (!l)
        return dl_lua_error(L, "%s: %s", fn, dl_error_message());
    u->l = l;
    if (name && name[0])
        snprintf(l->name, sizeof l->name, "%s", name);
    dl_layer_describe(l, u->text, sizeof u->text);
    return 1;
}

/* The layer argument at idx for container fn: owned by Lua and not yet in
 * another container. */
static lua_layer *check_free_layer(lua_State *L, int idx, const char *fn, int arg, const char *what)
{
    lua_layer *u = luaL_testudata(L, idx, DL_LAYER_MT);
    if (!u)
        dl_lua_argerror(L, fn, arg, what, "a layer (nn.Linear(...), nn.ReLU(), ...)");
    if (!u->l)
        dl_lua_error(L,
                     "%s: layer %s is already part of another container or model "
                     "(create a new layer for each place it is used)",
                     fn, u->text);
    return u;
}

/* Hands u's layer to a container: the userdata keeps only its text. */
static void consume(lua_layer *u)
{
    char buf[sizeof u->text];
    snprintf(buf, sizeof buf, "%s", u->text);
    snprintf(u->text, sizeof u->text, "%.140s (in a container)", buf);
    u->l = NULL;
}

/* Optional trailing options table with name (and extra fields read by the
 * caller). Returns the table's index or 0. */
static int trailing_opts(lua_State *L, int idx) { return lua_istable(L, idx) ? idx : 0; }

static int nn_linear(lua_State *L)
{
    const char *fn = "nn.Linear";
    long in = dl_lua_check_int(L, fn, 1, "in_features", 1);
    long out = dl_lua_check_int(L, fn, 2, "out_features", 1);
    dl_lua_opts o;
    int oi = trailing_opts(L, 3);
    if (!oi && !lua_isnoneornil(L, 3))
        dl_lua_argerror(L, fn, 3, "options", "a table {bias = true, name = \"...\"}");
    dl_lua_opt_begin(&o, L, fn, oi, 0);
    int bias = dl_lua_opt_boolean(&o, "bias", 1);
    char name[48];
    dl_lua_opt_string(&o, "name", "", name, sizeof name);
    dl_lua_opt_check(&o);
    lua_layer *u = push_layer(L);
    return finish_layer(L, u, dl_nn_linear((int)in, (int)out, bias), fn, name);
}

/* nn.Conv2d(in, out, kernel [, stride [, padding]] [, {stride, padding, pad,
 * bias, groups, dilation, name}]): PyTorch's names, pad an alias of padding. */
static int nn_conv2d(lua_State *L)
{
    const char *fn = "nn.Conv2d";
    long in = dl_lua_check_int(L, fn, 1, "in_channels", 1);
    long out = dl_lua_check_int(L, fn, 2, "out_channels", 1);
    long k = dl_lua_check_int(L, fn, 3, "kernel_size", 1);
    long stride = 1, pad = 0;
    int arg = 4;
    if (lua_type(L, arg) == LUA_TNUMBER)
        stride = dl_lua_check_int(L, fn, arg++, "stride", 1);
    if (lua_type(L, arg) == LUA_TNUMBER)
        pad = dl_lua_check_int(L, fn, arg++, "padding", 0);
    int oi = trailing_opts(L, arg);
    if (!oi && !lua_isnoneornil(L, arg))
        dl_lua_argerror(L, fn, arg, "options",
                        "a table {stride = 1, padding = 0, bias = true, groups = 1, "
                        "dilation = 1, name = \"...\"}");
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, oi, 0);
    dl_conv2d_opts co = {0};
    co.stride = dl_lua_opt_int(&o, "stride", (int)stride, 1);
    pad = dl_lua_opt_integer(&o, "pad", pad, 0);
    co.padding = dl_lua_opt_int(&o, "padding", (int)pad, 0);
    co.bias = dl_lua_opt_boolean(&o, "bias", 1);
    co.groups = dl_lua_opt_int(&o, "groups", 1, 1);
    co.dilation = dl_lua_opt_int(&o, "dilation", 1, 1);
    char name[48];
    dl_lua_opt_string(&o, "name", "", name, sizeof name);
    dl_lua_opt_check(&o);
    lua_layer *u = push_layer(L);
    return finish_layer(L, u, dl_nn_conv2d_with((int)in, (int)out, (int)k, &co), fn, name);
}

static int pool(lua_State *L, const char *fn, int max)
{
    long k = dl_lua_check_int(L, fn, 1, "kernel_size", 1);
    long stride = k, pad = 0;
    int arg = 2;
    if (lua_type(L, arg) == LUA_TNUMBER)
        stride = dl_lua_check_int(L, fn, arg++, "stride", 1);
    if (lua_type(L, arg) == LUA_TNUMBER)
        pad = dl_lua_check_int(L, fn, arg++, "padding", 0);
    int oi = trailing_opts(L, arg);
    if (!oi && !lua_isnoneornil(L, arg))
        dl_lua_argerror(L, fn, arg, "options", "a table {stride = k, padding = 0}");
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, oi, 0);
    stride = dl_lua_opt_integer(&o, "stride", stride, 1);
    /* padding, as Conv2d and PyTorch name it; pad, its older name here */
    int named = dl_lua_opt_push(&o, "padding") != LUA_TNIL;
    named += dl_lua_opt_push(&o, "pad") != LUA_TNIL;
    lua_pop(L, 2);
    if (named == 2)
        dl_lua_error(L, "%s: give padding or pad, not both (they are the same option)", fn);
    pad = dl_lua_opt_integer(&o, "padding", pad, 0);
    pad = dl_lua_opt_integer(&o, "pad", pad, 0);
    char name[48];
    dl_lua_opt_string(&o, "name", "", name, sizeof name);
    dl_lua_opt_check(&o);
    lua_layer *u = push_layer(L);
    dl_layer *l = max ? dl_nn_maxpool2d((int)k, (int)stride, (int)pad)
                      : dl_nn_avgpool2d((int)k, (int)stride, (int)pad);
    return finish_layer(L, u, l, fn, name);
}

static int nn_maxpool2d(lua_State *L) { return pool(L, "nn.MaxPool2d", 1); }
static int nn_avgpool2d(lua_State *L) { return pool(L, "nn.AvgPool2d", 0); }

static int name_only(lua_State *L, const char *fn, int idx, char *name, size_t size)
{
    int oi = trailing_opts(L, idx);
    if (!oi && !lua_isnoneornil(L, idx))
        dl_lua_argerror(L, fn, idx, "options", "nothing or a table {name = \"...\"}");
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, oi, 0);
    dl_lua_opt_string(&o, "name", "", name, size);
    dl_lua_opt_check(&o);
    return 0;
}

/* nn.AdaptiveAvgPool2d(size | {h, w} [, {name}]): size 1 is global average
 * pooling; nn.GlobalAvgPool2d() is AdaptiveAvgPool2d(1). */
static int adaptive_pool(lua_State *L, const char *fn, int global)
{
    long h = 1, w = 1;
    int arg = 1;
    if (!global && lua_type(L, 1) == LUA_TTABLE && !lua_getmetatable(L, 1) && luaL_len(L, 1) == 2) {
        lua_geti(L, 1, 1);
        lua_geti(L, 1, 2);
        if (!lua_isinteger(L, -2) || !lua_isinteger(L, -1) || lua_tointeger(L, -2) < 1 ||
            lua_tointeger(L, -1) < 1)
            dl_lua_argerror(L, fn, 1, "output_size", "a positive integer or {h, w} of them");
        h = (long)lua_tointeger(L, -2);
        w = (long)lua_tointeger(L, -1);
        lua_pop(L, 2);
        arg = 2;
    } else if (!global) {
        if (!lua_isinteger(L, 1) || lua_tointeger(L, 1) < 1)
            dl_lua_argerror(L, fn, 1, "output_size",
                            "a positive integer or {h, w} of them (1: global average pooling)");
        h = w = (long)lua_tointeger(L, 1);
        arg = 2;
    }
    char name[48];
    name_only(L, fn, arg, name, sizeof name);
    lua_layer *u = push_layer(L);
    return finish_layer(L, u, dl_nn_adaptive_avgpool2d((int)h, (int)w), fn, name);
}

static int nn_adaptive_avgpool2d(lua_State *L)
{
    return adaptive_pool(L, "nn.AdaptiveAvgPool2d", 0);
}
static int nn_global_avgpool2d(lua_State *L) { return adaptive_pool(L, "nn.GlobalAvgPool2d", 1); }

static int activation(lua_State *L, const char *fn, dl_act kind)
{
    char name[48];
    name_only(L, fn, 1, name, sizeof name);
    lua_layer *u = push_layer(L);
    return finish_layer(L, u, dl_nn_activation(kind), fn, name);
}

static int nn_relu(lua_State *L) { return activation(L, "nn.ReLU", DL_ACT_RELU); }
static int nn_gelu(lua_State *L) { return activation(L, "nn.GELU", DL_ACT_GELU); }
static int nn_tanh(lua_State *L) { return activation(L, "nn.Tanh", DL_ACT_TANH); }
static int nn_sigmoid(lua_State *L) { return activation(L, "nn.Sigmoid", DL_ACT_SIGMOID); }
static int nn_silu(lua_State *L) { return activation(L, "nn.SiLU", DL_ACT_SILU); }

static int nn_dropout(lua_State *L)
{
    const char *fn = "nn.Dropout";
    double p = 0.5;
    int arg = 1;
    if (lua_type(L, 1) == LUA_TNUMBER) {
        p = lua_tonumber(L, 1);
        arg = 2;
    }
    if (!(p >= 0 && p < 1))
        dl_lua_argerror(L, fn, 1, "p", "a drop probability in [0, 1)");
    char name[48];
    name_only(L, fn, arg, name, sizeof name);
    lua_layer *u = push_layer(L);
    return finish_layer(L, u, dl_nn_dropout((float)p), fn, name);
}

static int norm(lua_State *L, const char *fn, int batch)
{
    long f = dl_lua_check_int(L, fn, 1, "num_features", 1);
    int oi = trailing_opts(L, 2);
    if (!oi && !lua_isnoneornil(L, 2))
        dl_lua_argerror(L, fn, 2, "options",
                        batch ? "a table {eps = 1e-5, momentum = 0.1}" : "a table {eps = 1e-5}");
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, oi, 0);
    double eps = dl_lua_opt_positive(&o, "eps", 1e-5, 0);
    double momentum = batch ? dl_lua_opt_positive(&o, "momentum", 0.1, 0) : 0;
    char name[48];
    dl_lua_opt_string(&o, "name", "", name, sizeof name);
    dl_lua_opt_check(&o);
    if (batch && momentum > 1) {
        lua_getfield(L, oi, "momentum");
        dl_lua_fielderror(L, fn, "momentum", "a number in (0, 1]");
    }
    lua_layer *u = push_layer(L);
    dl_layer *l = batch ? dl_nn_batchnorm((int)f, (float)eps, (float)momentum)
                        : dl_nn_layernorm((int)f, (float)eps);
    return finish_layer(L, u, l, fn, name);
}

static int nn_batchnorm(lua_State *L) { return norm(L, "nn.BatchNorm", 1); }
static int nn_layernorm(lua_State *L) { return norm(L, "nn.LayerNorm", 0); }

static int nn_flatten(lua_State *L)
{
    char name[48];
    name_only(L, "nn.Flatten", 1, name, sizeof name);
    lua_layer *u = push_layer(L);
    return finish_layer(L, u, dl_nn_flatten(), "nn.Flatten", name);
}

static int nn_identity(lua_State *L)
{
    char name[48];
    name_only(L, "nn.Identity", 1, name, sizeof name);
    lua_layer *u = push_layer(L);
    return finish_layer(L, u, dl_nn_identity(), "nn.Identity", name);
}

static int nn_embedding(lua_State *L)
{
    const char *fn = "nn.Embedding";
    long vocab = dl_lua_check_int(L, fn, 1, "num_embeddings", 1);
    long dim = dl_lua_check_int(L, fn, 2, "embedding_dim", 1);
    char name[48];
    name_only(L, fn, 3, name, sizeof name);
    lua_layer *u = push_layer(L);
    return finish_layer(L, u, dl_nn_embedding((int)vocab, (int)dim), fn, name);
}

/* nn.MultiheadAttention(embed_dim, num_heads [, {causal, dropout, bias, batch_first, name}]):
 * self-attention over per-sample [t, embed_dim] inputs (batch_first, as
 * every dlbench sample is). */
static int nn_multihead_attention(lua_State *L)
{
    const char *fn = "nn.MultiheadAttention";
    long d = dl_lua_check_int(L, fn, 1, "embed_dim", 1);
    long heads = dl_lua_check_int(L, fn, 2, "num_heads", 1);
    int oi = trailing_opts(L, 3);
    if (!oi && !lua_isnoneornil(L, 3))
        dl_lua_argerror(L, fn, 3, "options",
                        "a table {causal = false, dropout = 0, bias = true, name = \"...\"}");
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, oi, 0);
    int causal = dl_lua_opt_boolean(&o, "causal", 0);
    double dropout = dl_lua_opt_positive(&o, "dropout", 0, 1);
    int bias = dl_lua_opt_boolean(&o, "bias", 1);
    int batch_first = dl_lua_opt_boolean(&o, "batch_first", 1);
    char name[48];
    dl_lua_opt_string(&o, "name", "", name, sizeof name);
    dl_lua_opt_check(&o);
    if (!batch_first) {
        lua_getfield(L, oi, "batch_first");
        dl_lua_fielderror(L, fn, "batch_first", "true (samples are [t, embed_dim])");
    }
    lua_layer *u = push_layer(L);
    dl_layer *l = dl_nn_multihead_attention((int)d, (int)heads, causal, (float)dropout, bias);
    return finish_layer(L, u, l, fn, name);
}

/* nn.PositionalEmbedding(max_len, embedding_dim [, {name}]) */
static int nn_positional_embedding(lua_State *L)
{
    const char *fn = "nn.PositionalEmbedding";
    long max_len = dl_lua_check_int(L, fn, 1, "max_len", 1);
    long dim = dl_lua_check_int(L, fn, 2, "embedding_dim", 1);
    char name[48];
    name_only(L, fn, 3, name, sizeof name);
    lua_layer *u = push_layer(L);
    return finish_layer(L, u, dl_nn_positional_embedding((int)max_len, (int)dim), fn, name);
}

/* nn.Sequential { l1, l2, ... } or nn.Sequential(l1, l2, ...). The children
 * are checked before any is taken, so an error leaves them all usable. */
static int nn_sequential(lua_State *L)
{
    const char *fn = "nn.Sequential";
    int top = lua_gettop(L), list = 0, n;
    char name[48] = "";
    if (top == 1 && lua_istable(L, 1) && !lua_getmetatable(L, 1)) {
        list = 1;
        n = (int)luaL_len(L, 1);
        dl_lua_opts o;
        dl_lua_opt_begin(&o, L, fn, 1, 1);
        dl_lua_opt_string(&o, "name", "", name, sizeof name);
        /* integer keys are the layers; only "name" is a valid other key */
        lua_pushnil(L);
        while (lua_next(L, 1)) {
            lua_pop(L, 1);
            if (lua_isinteger(L, -1)) {
                lua_Integer k = lua_tointeger(L, -1);
                if (k < 1 || k > n)
                    dl_lua_error(L, "%s: layer list has a hole at index %lld (a nil layer?)", fn,
                                 (long long)k);
            } else if (!(lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "name"))) {
                dl_lua_error(L, "%s: unexpected key '%s' in the layer list", fn,
                             luaL_tolstring(L, -1, NULL));
            }
        }
    } else {
        n = top;
    }
    if (n == 0)
        dl_lua_error(L, "%s: needs at least one layer", fn);
    lua_layer **kids = lua_newuserdatauv(L, sizeof *kids * (size_t)n, 0);
    int scratch = lua_gettop(L);
    for (int i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "layer %d", i + 1);
        if (list) {
            lua_geti(L, 1, i + 1);
            if (!luaL_testudata(L, -1, DL_LAYER_MT))
                dl_lua_error(L, "%s: element %d of the list is a %s, expected a layer", fn, i + 1,
                             lua_typename(L, lua_type(L, -1)));
            kids[i] = check_free_layer(L, -1, fn, 1, what);
            lua_pop(L, 1);
        } else {
            kids[i] = check_free_layer(L, i + 1, fn, i + 1, what);
        }
        for (int j = 0; j < i; j++)
            if (kids[j] == kids[i])
                dl_lua_error(L, "%s: layer %s appears twice (create a new layer for each place)",
                             fn, kids[i]->text);
    }
    lua_layer *u = push_layer(L);
    dl_layer *seq = dl_nn_sequential();
    if (!seq)
        return dl_lua_error(L, "%s: %s", fn, dl_error_message());
    u->l = seq; /* from here the userdata owns it (and the children added) */
    for (int i = 0; i < n; i++) {
        if (dl_nn_sequential_add(seq, kids[i]->l) < 0)
            return dl_lua_error(L, "%s: %s", fn, dl_error_message());
        consume(kids[i]);
    }
    if (name[0])
        snprintf(seq->name, sizeof seq->name, "%s", name);
    dl_layer_describe(seq, u->text, sizeof u->text);
    lua_remove(L, scratch);
    return 1;
}

/* nn.Residual(block [, {shortcut = layer, name}]): block(x) + shortcut(x),
 * the identity when no shortcut is given. */
static int nn_residual(lua_State *L)
{
    const char *fn = "nn.Residual";
    lua_layer *b = check_free_layer(L, 1, fn, 1, "block");
    int oi = trailing_opts(L, 2);
    if (!oi && !lua_isnoneornil(L, 2))
        dl_lua_argerror(L, fn, 2, "options", "a table {shortcut = layer, name = \"...\"}");
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, oi, 0);
    char name[48];
    dl_lua_opt_string(&o, "name", "", name, sizeof name);
    lua_layer *sc = NULL;
    if (dl_lua_opt_push(&o, "shortcut") != LUA_TNIL) {
        sc = luaL_testudata(L, -1, DL_LAYER_MT);
        if (!sc)
            dl_lua_fielderror(L, fn, "shortcut", "a layer (nn.Conv2d(...), nn.Sequential{...})");
        if (!sc->l)
            dl_lua_error(L, "%s: shortcut %s is already part of another container or model", fn,
                         sc->text);
        if (sc == b)
            dl_lua_error(L, "%s: the block and the shortcut must be different layers", fn);
    }
    lua_pop(L, 1);
    dl_lua_opt_check(&o);
    lua_layer *u = push_layer(L);
    dl_layer *r = dl_nn_residual_shortcut(b->l, sc ? sc->l : NULL);
    if (!r)
        return dl_lua_error(L, "%s: %s", fn, dl_error_message());
    consume(b);
    if (sc)
        consume(sc);
    return finish_layer(L, u, r, fn, name);
}

/* --- losses --------------------------------------------------------------- */

/* The loss userdata: a dl_loss first (dl_lua_get_loss copies it), then
 * whether the script named an ignore_index (for its printed form). */
typedef struct lua_loss {
    dl_loss loss;
    int has_ignore;
} lua_loss;

static int loss_tostring(lua_State *L)
{
    lua_loss *u = luaL_checkudata(L, 1, DL_LOSS_MT);
    dl_loss *l = &u->loss;
    if (l->kind == DL_LOSS_XENT && u->has_ignore)
        lua_pushfstring(L, "CrossEntropy{smoothing = %f, ignore_index = %d}", (double)l->smoothing,
                        l->ignore_index);
    else if (l->kind == DL_LOSS_XENT && l->smoothing > 0)
        lua_pushfstring(L, "CrossEntropy{smoothing = %f}", (double)l->smoothing);
    else
        lua_pushfstring(L, "%s()", dl_loss_name(l->kind));
    return 1;
}

static lua_loss *push_loss(lua_State *L, dl_loss_kind kind, float smoothing)
{
    lua_loss *u = lua_newuserdatauv(L, sizeof *u, 0);
    memset(u, 0, sizeof *u);
    u->loss.kind = kind;
    u->loss.smoothing = smoothing;
    u->loss.ignore_index = DL_IGNORE_NONE;
    luaL_setmetatable(L, DL_LOSS_MT);
    return u;
}

/* nn.CrossEntropy { smoothing (label_smoothing) = 0, ignore_index = none } */
static int nn_cross_entropy(lua_State *L)
{
    const char *fn = "nn.CrossEntropy";
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, fn, 1, 0);
    double s = dl_lua_opt_positive(&o, "smoothing", 0, 1);
    const char *which = s > 0 ? "smoothing" : "label_smoothing";
    s = dl_lua_opt_positive(&o, "label_smoothing", s, 1);
    int ignore = dl_lua_opt_int(&o, "ignore_index", INT_MIN, INT_MIN + 1);
    if (s >= 1) {
        lua_getfield(L, 1, which);
        dl_lua_fielderror(L, fn, which, "a number in [0, 1)");
    }
    dl_lua_opt_check(&o);
    lua_loss *u = push_loss(L, DL_LOSS_XENT, (float)s);
    u->has_ignore = ignore != INT_MIN;
    if (u->has_ignore)
        u->loss.ignore_index = ignore;
    return 1;
}

/* The ignore_index of the loss at idx for dl_loss_xent_tokens:
 * DL_IGNORE_NONE when the script set none (or idx is no loss). */
int dl_lua_loss_ignore_index(lua_State *L, int idx)
{
    lua_loss *u = luaL_testudata(L, idx, DL_LOSS_MT);
    return u ? u->loss.ignore_index : DL_IGNORE_NONE;
}

static int nn_mse(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "nn.MSE", 1, 0);
    dl_lua_opt_check(&o);
    push_loss(L, DL_LOSS_MSE, 0);
    return 1;
}

static int nn_bce(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "nn.BCEWithLogits", 1, 0);
    dl_lua_opt_check(&o);
    push_loss(L, DL_LOSS_BCE, 0);
    return 1;
}

int dl_lua_get_loss(lua_State *L, int idx, dl_loss *out)
{
    dl_loss *l = luaL_testudata(L, idx, DL_LOSS_MT);
    if (!l)
        return 0;
    *out = *l;
    return 1;
}

int dl_lua_open_nn(lua_State *L)
{
    static const luaL_Reg layer_meta[] = {
        {"__gc", layer_gc}, {"__close", layer_gc}, {"__tostring", layer_tostring}, {NULL, NULL}};
    luaL_newmetatable(L, DL_LAYER_MT);
    luaL_setfuncs(L, layer_meta, 0);
    lua_pop(L, 1);
    luaL_newmetatable(L, DL_LOSS_MT);
    lua_pushcfunction(L, loss_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);

    static const luaL_Reg fns[] = {{"Linear", nn_linear},
                                   {"Conv2d", nn_conv2d},
                                   {"MaxPool2d", nn_maxpool2d},
                                   {"AvgPool2d", nn_avgpool2d},
                                   {"AdaptiveAvgPool2d", nn_adaptive_avgpool2d},
                                   {"GlobalAvgPool2d", nn_global_avgpool2d},
                                   {"ReLU", nn_relu},
                                   {"GELU", nn_gelu},
                                   {"Tanh", nn_tanh},
                                   {"Sigmoid", nn_sigmoid},
                                   {"SiLU", nn_silu},
                                   {"Dropout", nn_dropout},
                                   {"BatchNorm", nn_batchnorm},
                                   {"BatchNorm1d", nn_batchnorm},
                                   {"BatchNorm2d", nn_batchnorm},
                                   {"LayerNorm", nn_layernorm},
                                   {"Flatten", nn_flatten},
                                   {"Identity", nn_identity},
                                   {"Embedding", nn_embedding},
                                   {"MultiheadAttention", nn_multihead_attention},
                                   {"PositionalEmbedding", nn_positional_embedding},
                                   {"Sequential", nn_sequential},
                                   {"Residual", nn_residual},
                                   {"CrossEntropy", nn_cross_entropy},
                                   {"CrossEntropyLoss", nn_cross_entropy},
                                   {"MSE", nn_mse},
                                   {"MSELoss", nn_mse},
                                   {"BCEWithLogits", nn_bce},
                                   {"BCEWithLogitsLoss", nn_bce},
                                   {NULL, NULL}};
    luaL_newlib(L, fns);
    return 1;
}
