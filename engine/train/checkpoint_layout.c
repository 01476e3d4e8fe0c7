/* checkpoint_layout.c - the tensor table of a checkpoint: from a model, to and from the layout attribute, compared with a model */
#include "engine/train/checkpoint_layout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"

int dl_checkpoint_layout_of_model(const dl_model *m, dl_checkpoint_tensor **t, int *n)
{
    int np = dl_model_num_params(m), nb = dl_model_num_buffers(m);
    *n = 0;
    *t = calloc((size_t)(np + nb) + 1, sizeof **t);
    if (!*t)
        return dl_error(DL_ENOMEM, "checkpoint: out of memory");
    for (int i = 0; i < np + nb; i++) {
        dl_checkpoint_tensor *x = &(*t)[i];
        if (i < np) {
            const dl_param *p = dl_model_param(m, i);
            snprintf(x->name, sizeof x->name, "%s", p->name);
            x->offset = p->offset;
            x->count = p->count;
            x->shape = p->shape;
        } else {
            const dl_buffer *b = dl_model_buffer(m, i - np);
            snprintf(x->name, sizeof x->name, "%s", b->name);
            x->buffer = 1;
            x->offset = b->offset;
            x->count = b->count;
            x->shape = b->shape;
        }
    }
    *n = np + nb;
    return DL_OK;
}

/* "512,784" (a scalar: "") */
static void dims_text(const dl_shape *s, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < s->ndim && used < size; i++)
        used +=
            (size_t)snprintf(buf + used, size - used, "%s%lld", i ? "," : "", (long long)s->dim[i]);
}

char *dl_checkpoint_layout_text(const dl_checkpoint_tensor *t, int n, size_t count,
                                size_t buffer_count, int version)
{
    /* a name is under 64 bytes, the numbers under 21 each, the shape under 90 */
    size_t cap = 256 + (size_t)n * (8 + 64 + 2 * 21 + 90 + 4), len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    len += (size_t)snprintf(buf, cap, "count %zu buffers %zu\n", count, buffer_count);
    for (int i = 0; i < n; i++) {
        char dims[96];
        dims_text(&t[i].shape, dims, sizeof dims);
        if (version == 1 && !t[i].buffer)
            len += (size_t)snprintf(buf + len, cap - len, "%s %zu %zu\n", t[i].name, t[i].offset,
                                    t[i].count);
        else if (version >= 2)
            len += (size_t)snprintf(buf + len, cap - len, "%s %s %zu %zu %s\n",
                                    t[i].buffer ? "buffer" : "param", t[i].name, t[i].offset,
                                    t[i].count, dims);
    }
    return buf;
}

static int parse_size(const char *s, size_t *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (!*s || *s == '-' || *end || errno)
        return -1;
    *v = (size_t)x;
    return 0;
}

/* "512,784" into s; "" is a scalar. */
static int parse_dims(const char *text, dl_shape *s)
{
    memset(s, 0, sizeof *s);
    for (const char *p = text; *p;) {
        char *end;
        errno = 0;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || errno || s->ndim == DL_MAX_DIMS || (*end && *end != ','))
            return -1;
        s->dim[s->ndim++] = d;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* One line: [kind] NAME OFFSET COUNT [DIMS]; the name may hold spaces, so
 * the numbers are taken from the right. */
static int parse_line(char *line, int version, dl_checkpoint_tensor *x)
{
    memset(x, 0, sizeof *x);
    char *name = line;
    if (version >= 2) {
        char *sp = strchr(line, ' ');
        if (!sp)
            return -1;
        *sp = 0;
        if (!strcmp(line, "buffer"))
            x->buffer = 1;
        else if (strcmp(line, "param"))
            return -1;
        name = sp + 1;
    }
    char *field[3];
    int nf = version >= 2 ? 3 : 2;
    for (int k = nf - 1; k >= 0; k--) {
        char *sp = strrchr(name, ' ');
        if (!sp)
            return -1;
        *sp = 0;
        field[k] = sp + 1;
    }
    if (!name[0] || strlen(name) >= sizeof x->name || parse_size(field[0], &x->offset) ||
        parse_size(field[1], &x->count))
        return -1;
    snprintf(x->name, sizeof x->name, "%s", name);
    if (version >= 2)
        return parse_dims(field[2], &x->shape) || dl_shape_numel(&x->shape) != (int64_t)x->count
                   ? -1
                   : 0;
    x->shape = dl_shape_make(1, (int64_t[]){(int64_t)x->count});
    return 0;
}

static int parse_lines(const char *path, char *text, int version, dl_checkpoint_contents *c)
{
    int lineno = 1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lineno++) {
        if (lineno == 1) {
            if (sscanf(line, "count %zu buffers %zu", &c->count, &c->buffer_count) != 2)
                return dl_error(DL_EINVAL, "%s: layout line 1 is not \"count P buffers B\"", path);
            continue;
        }
        dl_checkpoint_tensor *x = &c->tensors[c->ntensors];
        if (parse_line(line, version, x) < 0)
            return dl_error(DL_EINVAL, "%s: layout line %d is malformed", path, lineno);
        size_t region = x->buffer ? c->buffer_count : c->count;
        if (x->offset > region || x->count > region - x->offset)
            return dl_error(DL_EINVAL, "%s: layout line %d: %s lies outside its %zu floats", path,
                            lineno, x->name, region);
        c->ntensors++;
    }
    return DL_OK;
}

int dl_checkpoint_layout_parse(const char *path, const char *text, int version,
                               dl_checkpoint_contents *c)
{
    int lines = 1;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    char *copy = strdup(text);
    c->tensors = calloc((size_t)lines + 1, sizeof *c->tensors);
    c->ntensors = 0;
    int rc = copy && c->tensors ? parse_lines(path, copy, version, c)
                                : dl_error(DL_ENOMEM, "%s: out of memory", path);
    free(copy);
    return rc;
}

static const dl_checkpoint_tensor *find(const dl_checkpoint_tensor *t, int n, const char *name,
                                        int buffer)
{
    for (int i = 0; i < n; i++)
        if (t[i].buffer == buffer && !strcmp(t[i].name, name))
            return &t[i];
    return NULL;
}

/* The first tensor of a that b lacks or holds otherwise; DL_OK when none. */
static int compare(const char *path, const dl_checkpoint_tensor *a, int na,
                   const dl_checkpoint_tensor *b, int nb, int a_is_model, int shaped)
{
    const char *in_a = a_is_model ? "this model" : "the checkpoint";
    const char *in_b = a_is_model ? "the checkpoint" : "this model";
    for (int i = 0; i < na; i++) {
        if (!shaped && a[i].buffer)
            continue; /* version 1 names no buffers */
        const dl_checkpoint_tensor *y = find(b, nb, a[i].name, a[i].buffer);
        char sa[96], sb[96];
        if (!y)
            return dl_error(DL_EINVAL,
                            "%s: the checkpoint was written for another model: %s has %s %s %s, "
                            "%s has none",
                            path, in_a, a[i].buffer ? "buffer" : "parameter", a[i].name,
                            dl_shape_format(&a[i].shape, sa, sizeof sa), in_b);
        int same_shape = shaped ? dl_shape_numel(&a[i].shape) == dl_shape_numel(&y->shape) &&
                                      !strcmp(dl_shape_format(&a[i].shape, sa, sizeof sa),
                                              dl_shape_format(&y->shape, sb, sizeof sb))
                                : a[i].count == y->count;
        if (!same_shape) {
            const dl_checkpoint_tensor *m = a_is_model ? &a[i] : y, *k = a_is_model ? y : &a[i];
            if (shaped)
                return dl_error(DL_EINVAL,
                                "%s: the checkpoint was written for another model: %s is %s in "
                                "the checkpoint, %s in this model",
                                path, a[i].name, dl_shape_format(&k->shape, sa, sizeof sa),
                                dl_shape_format(&m->shape, sb, sizeof sb));
            return dl_error(DL_EINVAL,
                            "%s: the checkpoint was written for another model: %s holds %zu "
                            "values in the checkpoint, %zu in this model",
                            path, a[i].name, k->count, m->count);
        }
        if (a[i].offset != y->offset)
            return dl_error(DL_EINVAL,
                            "%s: the checkpoint was written for another model: %s lies at "
                            "another place in the state (layers in another order?)",
                            path, a[i].name);
    }
    return DL_OK;
}

int dl_checkpoint_layout_match(const char *path, const dl_checkpoint_contents *c, const dl_model *m)
{
    dl_checkpoint_tensor *mine;
    int n;
    DL_TRY(dl_checkpoint_layout_of_model(m, &mine, &n));
    int shaped = c->version >= 2;
    int rc = compare(path, mine, n, c->tensors, c->ntensors, 1, shaped);
    if (rc == DL_OK)
        rc = compare(path, c->tensors, c->ntensors, mine, n, 0, shaped);
    if (rc == DL_OK && (c->count != dl_model_param_count(m)))
        rc = dl_error(DL_EINVAL, "%s: the checkpoint holds %zu parameter values, this model %zu",
                      path, c->count, dl_model_param_count(m));
    free(mine);
    return rc;
}
