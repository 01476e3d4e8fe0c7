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

/* dl.data.hdf5 { path, train = "/train", val = "/test", scale, workers,
 * prefetch, shuffle, mean, std, limit, val_limit } */
static int data_hdf5(lua_State *L)
{
    dl_lua_opts o;
    dl_lua_opt_begin(&o, L, "dl.data.hdf5", 1, 1);
    dl_data_desc *d = push_spec(L, DL_DATA_HDF5);
    dl_lua_opt_string(&o, "path", NULL, d->path, sizeof d->path);
    dl_lua_opt_string(&o, "train", "/train", d->train, sizeof d->train);
    dl_lua_opt_string(&o, "val", "", d->val, sizeof d->val);
    d->workers = dl_lua_opt_int(&o, "workers", -1, -1);
    d->prefetch = dl_lua_opt_int(&o, "prefetch", 4, 1);
    d->limit = dl_lua_opt_integer(&o, "limit", 0, 0);
    d->val_limit = dl_lua_opt_integer(&o, "val_limit", 0, 0);
    read_common(&o, d);
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

/* data.vocab (text: the vocabulary size) and data.context; nil otherwise. */
static int data_index(lua_State *L)
{
    dl_data_desc *d = luaL_checkudata(L, 1, DL_DATA_MT);
    const char *k = lua_tostring(L, 2);
    if (d->kind == DL_DATA_TEXT && k && !strcmp(k, "vocab"))
        lua_pushinteger(L, d->vocab);
    else if (d->kind == DL_DATA_TEXT && k && !strcmp(k, "context"))
        lua_pushinteger(L, d->context);
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
