/* names.c - tensor names for export: the engine's ("Linear2.weight") or the equivalent torch module's ("2.weight") */
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/export/export.h"

/* The name of child i inside container c, as its torch module calls it. */
static void child_name(const dl_layer *c, int i, char *buf, size_t size)
{
    if (!strcmp(c->vt->kind, "Residual"))
        snprintf(buf, size, "%s", i == 0 ? "block" : "shortcut");
    else
        snprintf(buf, size, "%d", i);
}

/* Appends cur's path to target into buf[len..]: 1 when target is in cur's
 * subtree (buf then "a.b." with its trailing dot), 0 when not, -1 when the
 * path does not fit. */
static int path_of(const dl_layer *cur, const dl_layer *target, char *buf, size_t size, size_t len)
{
    if (cur == target) {
        buf[len] = 0;
        return 1;
    }
    for (int i = 0; i < cur->nchild; i++) {
        char part[32];
        child_name(cur, i, part, sizeof part);
        int n = snprintf(buf + len, size - len, "%s.", part);
        if (n < 0 || (size_t)n >= size - len)
            return -1;
        int rc = path_of(cur->child[i], target, buf, size, len + (size_t)n);
        if (rc != 0)
            return rc;
        buf[len] = 0;
    }
    return 0;
}

int dl_export_tensor_name(const dl_model *m, const dl_layer *l, const char *engine_name,
                          dl_export_names names, char *out, size_t size)
{
    if (names == DL_EXPORT_NAMES_DLBENCH) {
        if (snprintf(out, size, "%s", engine_name) >= (int)size)
            return dl_error(DL_EINVAL, "tensor name %s is too long", engine_name);
        return DL_OK;
    }
    /* the tensor's own part: engine_name without "<layer>." */
    size_t ln = strlen(l->name);
    const char *own = engine_name;
    if (!strncmp(engine_name, l->name, ln) && engine_name[ln] == '.')
        own = engine_name + ln + 1;
    char path[256];
    int rc = path_of(dl_model_root(m), l, path, sizeof path, 0);
    if (rc < 0)
        return dl_error(DL_EINVAL, "the torch name of %s is too long", engine_name);
    if (rc == 0)
        return dl_error(DL_EINVAL, "tensor %s: layer %s is not in the model", engine_name, l->name);
    if (snprintf(out, size, "%s%s", path, own) >= (int)size)
        return dl_error(DL_EINVAL, "the torch name of %s is too long", engine_name);
    return DL_OK;
}
