/* lua_data.c - dl.data: dataset descriptions (HDF5, Fashion-MNIST IDX, synthetic, text) read into a dl_data_desc (engine/data/open.h) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/data/text.h"
#include "scripting/lua_internal.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

static dl_data_desc *push_spec(lua_State *L, dl_data_kind kind)
{
    dl_data_desc *d = lua_newuserdatauv(L, sizeof *d, 0);
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->shuffle = 1;
    d->workers = -1;
    d->prefetch = 4;
    luaL_setmetatable(L, DL_DATA_MT);
    return d;
}

/* mean = {..}, std = {..}: per-channel normalisation. */
static void read_norm(dl_lua_opts *o, dl_data_desc *d)
{
    lua_State *L = o->L;
    int n[2] = {0, 0};
    const char *names[2] = {"mean", "std"};
    for (int k = 0; k < 2; k++) {
        int t = dl_lua_opt_push(o, names[k]);
        if (t == LUA_TNUMBER) {
            float v = (float)lua_tonumber(L, -1);
            if (k == 0)
                d->mean[0] = v;
            else
                d->std[0] = v;
            n[k] = 1;
        } else if (t == LUA_TTABLE) {
            n[k] = (int)luaL_len(L, -1);
            if (n[k] < 1 || n[k] > DL_MAX_CHANNELS)
                dl_lua_fielderror(L, o->fn, names[k],
                                  "a list of 1 to 16 numbers (one per channel)");
            for (int i = 0; i < n[k]; i++) {
                if (lua_geti(L, -1, i + 1) != LUA_TNUMBER) {
                    lua_pop(L, 1);
                    dl_lua_fielderror(L, o->fn, names[k], "a list of numbers");
                }
                float v = (float)lua_tonumber(L, -1);
                lua_pop(L, 1);
                if (k == 0)
                    d->mean[i] = v;
                else
                    d->std[i] = v;
            }
        } else if (t != LUA_TNIL) {
            dl_lua_fielderror(L, o->fn, names[k], "a number or a list of numbers");
        }
        lua_pop(L, 1);
    }
    if (n[0] != n[1])
        dl_lua_error(L, "%s: mean and std must be given together, one value per channel", o->fn);
    for (int i = 0; i < n[1]; i++)
        if (!(d->std[i] > 0))
            dl_lua_error(L, "%s: std[%d] must be positive", o->fn, i + 1);
    d->channels = n[0];
}

static void read_common(dl_lua_opts *o, dl_data_desc *d)
{
    d->scale = (float)dl_lua_opt_positive(o, "scale", 0, 1);
    d->shuffle = dl_lua_opt_boolean(o, "shuffle", 1);
    d->drop_last = dl_lua_opt_boolean(o, "drop_last", 0);
    d->flatten = dl_lua_opt_boolean(o, "flatten", 0);
    read_norm(o, d);
}

/* PyTorch / Keras names with the dl.data.* name that means the same. */
static const char *const hints[][2] = {
    {"num_workers", "workers"},
    {"prefetch_factor", "prefetch"},
    {"batch_size", "set batch in dl.experiment { batch = ... }"},
    {"transform", "augment = { crop = 4, flip = true }"},
    {"budget", "memory_budget"},
    {"window", "shuffle_window"},
};

/* Before dl_lua_opt_check: a known alias gets "did you mean" with the
 * known options listed. */
static void check_hints(dl_lua_opts *o)
{
    lua_State *L = o->L;
    if (!o->idx)
        return;
    for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++) {
        if (lua_getfield(L, o->idx, hints[i][0]) == LUA_TNIL) {
            lua_pop(L, 1);
            continue;
        }
        char list[512] = "";
        size_t len = 0;
        for (int k = 0; k < o->nknown; k++)
            len += (size_t)snprintf(list + len, len < sizeof list ? sizeof list - len : 0, "%s%s",
                                    k ? ", " : "", o->known[k]);
        dl_lua_error(L, "%s: unknown option '%s' (did you mean %s?) (known: %s)", o->fn,
                     hints[i][0], hints[i][1], list);
    }
}

/* memory_budget: bytes, or a string "512MiB" (B, KiB, MiB, GiB, TiB). */
static double read_budget(dl_lua_opts *o)
{
    lua_State *L = o->L;
    const char *want = "a number of bytes or a size such as \"512MiB\" or \"2GiB\"";
    int t = dl_lua_opt_push(o, "memory_budget");
    double v = 0;
    if (t == LUA_TNUMBER) {
        v = lua_tonumber(L, -1);
    } else if (t == LUA_TSTRING) {
        const char *str = lua_tostring(L, -1);
        char *end;
        v = strtod(str, &end);
        while (*end == ' ')
            end++;
        static const char *units[] = {"", "B", "KiB", "MiB", "GiB", "TiB"};
        static const double mul[] = {1, 1, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
        int u = -1;
        for (int i = 0; i < 6 && u < 0; i++)
            if (!strcmp(end, units[i]))
                u = i;
        if (end == str || u < 0)
            dl_lua_fielderror(L, o->fn, "memory_budget", want);
        v *= mul[u];
    } else if (t != LUA_TNIL) {
        dl_lua_fielderror(L, o->fn, "memory_budget", want);
    }
    if (!(v >= 0) || v > 1e18 || (t != LUA_TNIL && v < 1))
        dl_lua_fielderror(L, o->fn, "memory_budget", want); /* the value on the stack */
    lua_pop(L, 1);
    return v;
}

/* augment = { crop = pixels, flip = true }: training-split augmentation. */
static void read_augment(dl_lua_opts *o, dl_data_desc *d)
{
    lua_State *L = o->L;
    int t = dl_lua_opt_push(o, "augment");
    if (t == LUA_TTABLE) {
        dl_lua_opts a;
        dl_lua_opt_begin(&a, L, "dl.data.hdf5 augment", -1, 1);
        d->crop_pad = dl_lua_opt_int(&a, "crop", 0, 0);
        d->hflip = dl_lua_opt_boolean(&a, "flip", 0);
        dl_lua_opt_check(&a);
    } else if (t != LUA_TNIL) {
        dl_lua_fielderror(L, o->fn, "augment", "a table { crop = 4, flip = true }");
    }
    lua_pop(L, 1);
}

static void read_mode(dl_lua_opts *o, dl_data_desc *d)
{
    static const char *modes[] = {"auto", "memory", "streaming"};
    int t = dl_lua_opt_push(o, "mode");
    d->mode = t == LUA_TNIL ? 0 : -1;
    for (int i = 0; i < 3 && t == LUA_TSTRING; i++)
        if (!strcmp(lua_tostring(o->L, -1), modes[i]))
            d->mode = i;
    if (d->mode < 0) /* the value still on the stack: the message shows it */
        dl_lua_fielderror(o->L, o->fn, "mode", "\"memory\", \"streaming\" or \"auto\"");
    lua_pop(o->L, 1);
}

/* dl.data.hdf5 { path, train = "/train", val = "/test", x = "x", y = "y",
 * scale, workers, prefetch, shuffle, drop_last, flatten, mean, std, limit,
 * val_limit, augment = { crop, flip }, mode = "auto", memory_budget,
 * shuffle_window } */
static int data_hdf5(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "dl.data.hdf5", 1, 1);
    dl_data_desc *d = push_spec(L, DL_DATA_HDF5);
    dl_lua_opt_string(&o, "path", NULL, d->path, sizeof d->path);
    dl_lua_opt_string(&o, "train", "/train", d->train, sizeof d->train);
    dl_lua_opt_string(&o, "val", "", d->val, sizeof d->val);
    dl_lua_opt_string(&o, "x", "", d->x_name, sizeof d->x_name);
    dl_lua_opt_string(&o, "y", "", d->y_name, sizeof d->y_name);
    d->workers = dl_lua_opt_int(&o, "workers", -1, -1);
    d->prefetch = dl_lua_opt_int(&o, "prefetch", 4, 1);
    d->limit = dl_lua_opt_integer(&o, "limit", 0, 0);
    d->val_limit = dl_lua_opt_integer(&o, "val_limit", 0, 0);
    read_common(&o, d);
    read_augment(&o, d);
    read_mode(&o, d);
    d->memory_budget = read_budget(&o);
    d->shuffle_window = dl_lua_opt_integer(&o, "shuffle_window", 0, 0);
    check_hints(&o);
    dl_lua_opt_check(&o);
    if (!d->path[0])
        dl_lua_error(L, "dl.data.hdf5: path (the .h5 file) is required");
    return 1;
}

/* dl.data.fashion_mnist { dir, limit, val_limit, scale = 1/255, shuffle } */
static int data_fmnist(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "dl.data.fashion_mnist", 1, 0);
    dl_data_desc *d = push_spec(L, DL_DATA_FASHION_MNIST);
    dl_lua_opt_string(&o, "dir", FMNIST_DIR, d->path, sizeof d->path);
    d->limit = dl_lua_opt_integer(&o, "limit", 0, 0);
    d->val_limit = dl_lua_opt_integer(&o, "val_limit", 0, 0);
    int val = dl_lua_opt_boolean(&o, "val", 1);
    read_common(&o, d);
    dl_lua_opt_check(&o);
    if (d->scale == 0)
        d->scale = 1.0f / 255.0f;
    snprintf(d->val, sizeof d->val, "%s", val ? "t10k" : "");
    snprintf(d->train, sizeof d->train, "train");
    return 1;
}

/* dl.data.synthetic { kind = "spirals" | "blobs", n, val, classes, noise, seed } */
static int data_synthetic(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "dl.data.synthetic", 1, 0);
    dl_data_desc *d = push_spec(L, DL_DATA_SYNTHETIC);
    dl_lua_opt_string(&o, "kind", "spirals", d->synth, sizeof d->synth);
    d->n = dl_lua_opt_integer(&o, "n", 2000, 1);
    d->n_val = dl_lua_opt_integer(&o, "val", 500, 0);
    d->classes = dl_lua_opt_int(&o, "classes", 2, 2);
    d->noise = dl_lua_opt_positive(&o, "noise", 0.1, 1);
    d->data_seed = (uint64_t)dl_lua_opt_integer(&o, "seed", 1, 0);
    read_common(&o, d);
    dl_lua_opt_check(&o);
    if (strcmp(d->synth, "spirals") && strcmp(d->synth, "blobs"))
        dl_lua_error(L, "dl.data.synthetic: kind must be \"spirals\" or \"blobs\", got \"%s\"",
                     d->synth);
    if (d->classes > 1000)
        dl_lua_error(L, "dl.data.synthetic: at most 1000 classes");
    if (d->n > 10000000 || d->n_val > 10000000)
        dl_lua_error(L, "dl.data.synthetic: at most 10 million samples");
    if (d->scale == 0)
        d->scale = 1;
    return 1;
}

/* dl.data.text { path, train = "/train", val = "/test", context, limit,
 * val_limit, shuffle = true, drop_last, workers }: a token file written by
 * dlbench import --text. Its vocab_size is read now (data.vocab for the
 * script's nn.Embedding); the splits are read when the run opens them.
 * workers is accepted for symmetry with dl.data.hdf5: windows are
 * assembled in the trainer's thread. val = "" for no validation. */
static int data_text(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "dl.data.text", 1, 1);
    dl_data_desc *d = push_spec(L, DL_DATA_TEXT);
    dl_lua_opt_string(&o, "path", NULL, d->path, sizeof d->path);
    dl_lua_opt_string(&o, "train", "/train", d->train, sizeof d->train);
    dl_lua_opt_string(&o, "val", "/test", d->val, sizeof d->val);
    d->context = dl_lua_opt_int(&o, "context", 0, 0);
    d->limit = dl_lua_opt_integer(&o, "limit", 0, 0);
    d->val_limit = dl_lua_opt_integer(&o, "val_limit", 0, 0);
    d->shuffle = dl_lua_opt_boolean(&o, "shuffle", 1);
    d->drop_last = dl_lua_opt_boolean(&o, "drop_last", 0);
    /* accepted like dl.data.hdf5's, but no thread assembles text windows:
     * 0 is what the loader really uses (telemetry and the advisor read it) */
    dl_lua_opt_int(&o, "workers", -1, -1);
    d->workers = 0;
    d->scale = 1;
    check_hints(&o);
    dl_lua_opt_check(&o);
    if (!d->path[0])
        dl_lua_error(L, "dl.data.text: path (the .h5 file from dlbench import --text) is required");
    if (d->context < 1)
        dl_lua_fielderror(L, "dl.data.text", "context",
                          "the tokens per window, an integer >= 1 (context = 64)");
    dl_text_vocab v;
    if (dl_text_vocab_read(&v, d->path) < 0)
        dl_lua_error(L, "dl.data.text: path: %s", dl_error_message());
    d->vocab = v.size;
    dl_text_vocab_done(&v);
    return 1;
}

/* data.classes: the training group's class_names attribute as an array
 * of strings, read from the file now; nil without one. */
static void push_class_names(lua_State *L, const dl_data_desc *d)
{
    char *buf;
    size_t len;
    int n = dl_data_class_names(d->path, d->train, &buf, &len);
    if (n == 0) {
        lua_pushnil(L);
        return;
    }
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, buf + (size_t)i * len);
        lua_rawseti(L, -2, i + 1);
    }
    free(buf);
}

/* data.vocab (text: the vocabulary size) and data.context; data.mode
 * (hdf5: the mode asked for, "auto" until the run opens the file) and
 * data.classes (hdf5); nil
 * otherwise. */
static int data_index(lua_State *L)
{
    dl_data_desc *d = luaL_checkudata(L, 1, DL_DATA_MT);
    const char *k = lua_tostring(L, 2);
    if (d->kind == DL_DATA_TEXT && k && !strcmp(k, "vocab"))
        lua_pushinteger(L, d->vocab);
    else if (d->kind == DL_DATA_TEXT && k && !strcmp(k, "context"))
        lua_pushinteger(L, d->context);
    else if (d->kind == DL_DATA_HDF5 && k && !strcmp(k, "mode"))
        lua_pushstring(L, d->mode == 1 ? "memory" : d->mode == 2 ? "streaming" : "auto");
    else if (d->kind == DL_DATA_HDF5 && k && !strcmp(k, "classes"))
        push_class_names(L, d);
    else
        lua_pushnil(L);
    return 1;
}

static int data_tostring(lua_State *L)
{
    dl_data_desc *d = luaL_checkudata(L, 1, DL_DATA_MT);
    switch (d->kind) {
    case DL_DATA_HDF5: lua_pushfstring(L, "data.hdf5(%s:%s)", d->path, d->train); break;
    case DL_DATA_FASHION_MNIST: lua_pushfstring(L, "data.fashion_mnist(%s)", d->path); break;
    case DL_DATA_TEXT:
        lua_pushfstring(L, "data.text(%s:%s, context = %d, vocab = %d)", d->path, d->train,
                        d->context, d->vocab);
        break;
    default: lua_pushfstring(L, "data.synthetic(%s, n = %d)", d->synth, (int)d->n); break;
    }
    return 1;
}

int dl_lua_get_data(lua_State *L, int idx, dl_data_desc *out)
{
    dl_data_desc *d = luaL_testudata(L, idx, DL_DATA_MT);
    if (!d)
        return 0;
    *out = *d;
    return 1;
}

int dl_lua_open_data(lua_State *L)
{
    luaL_newmetatable(L, DL_DATA_MT);
    lua_pushcfunction(L, data_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushcfunction(L, data_index);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"hdf5", data_hdf5},
                                   {"fashion_mnist", data_fmnist},
                                   {"synthetic", data_synthetic},
                                   {"text", data_text},
                                   {NULL, NULL}};
    luaL_newlib(L, fns);
    return 1;
}
