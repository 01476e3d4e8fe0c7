/* session_init.c - init = dl.from_run(...): a new training starts from another run's parameters and buffers, matched by name and shape */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/rundir/runlog.h"
#include "engine/train/checkpoint.h"
#include "scripting/run_model.h"
#include "scripting/session_internal.h"

/* A growing list of names: "a, b, c". */
typedef struct name_list {
    char *text;
    size_t len, cap;
    int n;
} name_list;

static int list_add(name_list *l, const char *name)
{
    size_t need = l->len + strlen(name) + 3;
    if (need > l->cap) {
        size_t cap = need * 2 + 64;
        char *t = realloc(l->text, cap);
        if (!t)
            return dl_error(DL_ENOMEM, "out of memory");
        l->text = t;
        l->cap = cap;
    }
    l->len += (size_t)snprintf(l->text + l->len, l->cap - l->len, "%s%s", l->n ? ", " : "", name);
    l->n++;
    return DL_OK;
}

static int excluded(const dl_init_spec *in, const char *layer, const char *tensor)
{
    for (int i = 0; i < in->nexclude; i++)
        if (!strcmp(in->exclude[i], layer) || !strcmp(in->exclude[i], tensor))
            return 1;
    return 0;
}

static int same_shape(const dl_checkpoint_contents *c, const dl_checkpoint_tensor *t,
                      const dl_shape *s)
{
    if (c->version < 2) /* version 1 keeps sizes, not shapes */
        return (int64_t)t->count == dl_shape_numel(s);
    if (t->shape.ndim != s->ndim)
        return 0;
    for (int k = 0; k < s->ndim; k++)
        if (t->shape.dim[k] != s->dim[k])
            return 0;
    return 1;
}

typedef struct init_lists {
    name_list loaded, skipped, fresh;
} init_lists;

/* One tensor of the model (name, layer, shape, count floats at dst) from
 * the checkpoint's region src. */
static int take_tensor(dl_session *s, const dl_checkpoint_contents *c, int buffer, const char *name,
                       const char *layer, const dl_shape *shape, size_t count, float *dst,
                       init_lists *l)
{
    const dl_init_spec *in = &s->exp->init;
    if (excluded(in, layer, name))
        return list_add(&l->skipped, name);
    const dl_checkpoint_tensor *t = dl_checkpoint_find(c, name, buffer);
    if (!t)
        return list_add(&l->fresh, name);
    char a[96], b[96];
    if (!same_shape(c, t, shape))
        return dl_error(
            DL_ESHAPE,
            "init = dl.from_run(\"%s\"): %s is %s in %s, %s in this model (exclude "
            "\"%s\" to train it afresh)",
            in->run, name,
            c->version < 2 ? (snprintf(a, sizeof a, "%zu values", t->count), a)
                           : dl_shape_format(&t->shape, a, sizeof a),
            s->init_checkpoint,
            c->version < 2
                ? (snprintf(b, sizeof b, "%lld values", (long long)dl_shape_numel(shape)), b)
                : dl_shape_format(shape, b, sizeof b),
            layer);
    memcpy(dst, c->region[buffer ? 3 : 0] + t->offset, count * sizeof *dst);
    return list_add(&l->loaded, name);
}

/* Every parameter and buffer of the model, taken or listed. */
static int take_all(dl_session *s, const dl_checkpoint_contents *c, float *params, float *buffers,
                    init_lists *l)
{
    dl_model *m = s->model;
    for (int i = 0; i < dl_model_num_params(m); i++) {
        const dl_param *p = dl_model_param(m, i);
        DL_TRY(take_tensor(s, c, 0, p->name, p->layer->name, &p->shape, p->count,
                           params + p->offset, l));
    }
    for (int i = 0; i < dl_model_num_buffers(m); i++) {
        const dl_buffer *b = dl_model_buffer(m, i);
        DL_TRY(take_tensor(s, c, 1, b->name, b->layer->name, &b->shape, b->count,
                           buffers + b->offset, l));
    }
    return DL_OK;
}

/* The model's state on the host, patched from c, back on its device. */
static int patch_state(dl_session *s, const dl_checkpoint_contents *c, init_lists *l)
{
    dl_model_state st;
    dl_model_get_state(s->model, &st);
    dl_backend *be = dl_model_backend(s->model);
    float *params = malloc((st.count + 1) * sizeof *params);
    float *buffers = malloc((st.buffer_count + 1) * sizeof *buffers);
    int rc = params && buffers ? DL_OK : dl_error(DL_ENOMEM, "out of memory");
    if (rc == DL_OK)
        rc = be->ops->to_host(be, params, st.params, st.count * sizeof *params);
    if (rc == DL_OK && st.buffer_count)
        rc = be->ops->to_host(be, buffers, st.buffers, st.buffer_count * sizeof *buffers);
    if (rc == DL_OK)
        rc = take_all(s, c, params, buffers, l);
    if (rc == DL_OK)
        rc = be->ops->to_device(be, st.params, params, st.count * sizeof *params);
    if (rc == DL_OK && st.buffer_count)
        rc = be->ops->to_device(be, st.buffers, buffers, st.buffer_count * sizeof *buffers);
    if (rc == DL_OK)
        dl_trainer_params_changed(s->trainer);
    free(params);
    free(buffers);
    return rc;
}

/* The report: three lines kept for session_init_report. */
static int keep_report(dl_session *s, const init_lists *l)
{
    const name_list *ls[3] = {&l->loaded, &l->skipped, &l->fresh};
    static const char *what[3] = {"loaded", "skipped (excluded)", "new (initialised afresh)"};
    size_t size = 512;
    for (int i = 0; i < 3; i++)
        size += ls[i]->len + 64;
    free(s->init_report);
    s->init_report = malloc(size);
    if (!s->init_report)
        return dl_error(DL_ENOMEM, "out of memory");
    size_t len = 0;
    for (int i = 0; i < 3; i++)
        len += (size_t)snprintf(s->init_report + len, size - len, "%s%s %d: %s", i ? "\n" : "",
                                what[i], ls[i]->n, ls[i]->n ? ls[i]->text : "none");
    return DL_OK;
}

int session_init_from_run(dl_session *s)
{
    const dl_init_spec *in = &s->exp->init;
    if (!in->set || s->resumed)
        return DL_OK;
    char dir[1024];
    int rc = dl_runlog_resolve(s->opt.out_dir, in->run, dir, sizeof dir);
    if (rc < 0)
        return dl_error(rc, "init = dl.from_run(\"%s\"): %s", in->run, dl_error_message());
    DL_TRY(dl_run_model_checkpoint_path(dir, in->checkpoint, s->init_checkpoint,
                                        sizeof s->init_checkpoint));
    dl_checkpoint_contents c;
    rc = dl_checkpoint_read(s->init_checkpoint, &c);
    if (rc < 0)
        return dl_error(rc, "init = dl.from_run(\"%s\"): %s", in->run, dl_error_message());
    init_lists l;
    memset(&l, 0, sizeof l);
    s->init_step = c.info.cursor.step;
    rc = patch_state(s, &c, &l);
    if (rc == DL_OK)
        rc = keep_report(s, &l);
    free(l.loaded.text);
    free(l.skipped.text);
    free(l.fresh.text);
    dl_checkpoint_contents_done(&c);
    return rc;
}

void session_init_report(dl_session *s)
{
    if (!s->init_report)
        return;
    session_emit(s, "init", "from %s", s->init_checkpoint);
    for (char *line = s->init_report, *end; line && *line; line = end ? end + 1 : NULL) {
        end = strchr(line, '\n');
        session_emit(s, "init", "%.*s", end ? (int)(end - line) : (int)strlen(line), line);
    }
    free(s->init_report);
    s->init_report = NULL;
}
