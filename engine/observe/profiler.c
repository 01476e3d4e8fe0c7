/* profiler.c - per-op and per-layer timing aggregates and a bounded Chrome/Perfetto trace */
#include "engine/observe/profiler.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/base/fsutil.h"
#include "engine/base/textout.h"

#define MAX_PHASES 32
#define MAX_PENDING 64 /* event-timed spans per step */
#define INITIAL_EVENTS 4096

typedef struct layer_ent {
    const dl_layer *layer;
    char name[48];
    char kind[24];
    int depth, parent, leaf;
    int no_dx;       /* its backward computes no input gradient */
    double flops_ps; /* self forward FLOPs per sample */
    double in_numel, out_numel, params;
    long fcalls, bcalls;
    double fms, bms; /* inclusive */
    double child_fms, child_bms;
    double frows, brows;
} layer_ent;

typedef struct phase_ent {
    const char *name;
    dl_prof_cat cat;
    long calls;
    double ms, flops, bytes;
} phase_ent;

/* A trace event: a phase (kind 0), a layer forward (1) or backward (2), a step (3). */
typedef struct tev {
    double ts_ms, dur_ms;
    long step;
    short kind, cat;
    int id;
} tev;

typedef struct pending {
    int pair;
    dl_prof_cat cat;
    const char *name;
    double flops, bytes;
    unsigned long long seq; /* its trace event, patched when resolved */
    int traced;
} pending;

struct dl_profiler {
    dl_prof_head head; /* first: the inline recorders of profiler.h read it */
    dl_profiler_options opt;
    atomic_int enabled;
    dl_model *model;
    dl_backend *be;
    int use_events;

    layer_ent *layers;
    int nlayers;
    phase_ent phases[MAX_PHASES];
    int nphases;

    long steps;
    double step_ms;
    long cur_step;
    double step_t0;
    int in_step;

    /* trace: events by absolute sequence number, buffer index seq % cap */
    tev *ev;
    size_t cap;
    unsigned long long seq, trim;   /* next seq; oldest kept seq */
    unsigned long long *step_start; /* ring of ring_steps step start seqs */
    long nstep_starts;
    long dropped;
    double origin_ms;
    int have_origin;

    /* backend events for device-timed spans */
    dl_event *pairs[MAX_PENDING][2];
    int npairs_made;
    pending pend[MAX_PENDING];
    int npend;
};

static const char *cat_names[DL_PROF_NCAT] = {"data",     "copy",      "forward",    "loss",
                                              "backward", "optimizer", "validation", "other"};

const char *dl_prof_cat_name(dl_prof_cat c)
{
    return c >= 0 && c < DL_PROF_NCAT ? cat_names[c] : "?";
}

static double now_ms(void) { return dl_clock_mono_s() * 1e3; }

/* never enabled, never written after start-up: shared by every trainer */
static dl_profiler off_profiler = {.opt = {.ring_steps = 1, .sample_every = 1}};

dl_profiler *dl_profiler_off(void) { return &off_profiler; }

void dl_profiler_options_default(dl_profiler_options *o)
{
    memset(o, 0, sizeof *o);
    o->ring_steps = 10;
    o->max_events = 500000;
    o->sample_every = 1;
}

int dl_profiler_create(dl_profiler **out, const dl_profiler_options *opt)
{
    *out = NULL;
    dl_profiler *p = calloc(1, sizeof *p);
    if (!p)
        return dl_error(DL_ENOMEM, "out of memory creating the profiler");
    if (opt)
        p->opt = *opt;
    else
        dl_profiler_options_default(&p->opt);
    if (p->opt.ring_steps < 1)
        p->opt.ring_steps = 10;
    if (p->opt.sample_every < 1)
        p->opt.sample_every = 1;
    if (p->opt.max_events < 16)
        p->opt.max_events = 500000;
    p->cap = p->opt.max_events < INITIAL_EVENTS ? p->opt.max_events : INITIAL_EVENTS;
    p->ev = malloc(p->cap * sizeof *p->ev);
    p->step_start = calloc((size_t)p->opt.ring_steps, sizeof *p->step_start);
    if (!p->ev || !p->step_start) {
        dl_profiler_destroy(p);
        return dl_error(DL_ENOMEM, "out of memory creating the profiler");
    }
    atomic_store(&p->enabled, 1);
    *out = p;
    return DL_OK;
}

static void free_pairs(dl_profiler *p)
{
    for (int i = 0; i < p->npairs_made; i++)
        for (int k = 0; k < 2; k++)
            if (p->pairs[i][k] && p->be && p->be->ops->event_destroy)
                p->be->ops->event_destroy(p->be, p->pairs[i][k]);
    memset(p->pairs, 0, sizeof p->pairs);
    p->npairs_made = 0;
}

void dl_profiler_destroy(dl_profiler *p)
{
    if (!p || p == &off_profiler)
        return;
    free_pairs(p);
    free(p->layers);
    free(p->ev);
    free(p->step_start);
    free(p);
}

void dl_profiler_set_enabled(dl_profiler *p, int on)
{
    if (p != &off_profiler)
        atomic_store(&p->enabled, on ? 1 : 0);
}
int dl_profiler_enabled(const dl_profiler *p) { return atomic_load(&((dl_profiler *)p)->enabled); }

int dl_profiler_wants_step(const dl_profiler *p, long step)
{
    return dl_profiler_enabled(p) && step % p->opt.sample_every == 0;
}

/* --- the layer table ------------------------------------------------------------- */

typedef struct walk {
    dl_profiler *p;
    int stack[64]; /* index of the last layer seen at each depth */
    int fail;
    const dl_layer *no_dx; /* the layer whose backward skips the input gradient */
} walk;

static void count_layer(dl_layer *l, int depth, void *arg) { (*(int *)arg)++; }

static void add_layer(dl_layer *l, int depth, void *arg)
{
    walk *w = arg;
    dl_profiler *p = w->p;
    int i = l->id;
    if (i < 0 || i >= p->nlayers) {
        w->fail = 1;
        return;
    }
    layer_ent *e = &p->layers[i];
    e->layer = l;
    snprintf(e->name, sizeof e->name, "%s", l->name);
    snprintf(e->kind, sizeof e->kind, "%s", l->vt->kind);
    e->depth = depth;
    e->parent = depth > 0 && depth <= 64 ? w->stack[depth - 1] : -1;
    if (depth < 64)
        w->stack[depth] = i;
    e->leaf = l->nchild == 0;
    e->no_dx = l == w->no_dx;
    double children = 0;
    for (int c = 0; c < l->nchild; c++)
        children += l->child[c]->flops;
    e->flops_ps = l->nchild ? l->flops - children : l->flops;
    if (e->flops_ps < 0)
        e->flops_ps = 0;
    e->in_numel = (double)dl_shape_numel(&l->in);
    e->out_numel = (double)dl_shape_numel(&l->out);
}

int dl_profiler_attach(dl_profiler *p, dl_model *m, dl_backend *be)
{
    if (p == &off_profiler)
        return DL_OK;
    if (p->model != m) {
        int n = 0;
        dl_model_each_layer(m, count_layer, &n);
        layer_ent *ls = calloc((size_t)(n ? n : 1), sizeof *ls);
        if (!ls)
            return dl_error(DL_ENOMEM, "out of memory profiling %d layers", n);
        free(p->layers);
        p->layers = ls;
        p->nlayers = n;
        p->model = m;
        walk w = {p, {0}, 0, dl_model_input_grad_skipped(m)};
        dl_model_each_layer(m, add_layer, &w);
        for (int i = 0; i < dl_model_num_params(m); i++) {
            const dl_param *prm = dl_model_param(m, i);
            if (prm->layer && prm->layer->id >= 0 && prm->layer->id < n)
                p->layers[prm->layer->id].params += (double)prm->count;
        }
    }
    if (p->be != be) {
        free_pairs(p);
        p->npend = 0;
        p->be = be;
        const dl_backend_ops *o = be ? be->ops : NULL;
        int has = o && o->event_create && o->event_record && o->event_elapsed && o->event_destroy;
        p->use_events = has && (o->device != DL_DEVICE_CPU || p->opt.force_events);
    }
    return DL_OK;
}

void dl_profiler_reset(dl_profiler *p)
{
    for (int i = 0; i < p->nlayers; i++) {
        layer_ent *e = &p->layers[i];
        e->fcalls = e->bcalls = 0;
        e->fms = e->bms = e->child_fms = e->child_bms = e->frows = e->brows = 0;
    }
    p->nphases = 0;
    p->steps = 0;
    p->step_ms = 0;
    p->seq = p->trim = 0;
    p->nstep_starts = 0;
    p->dropped = 0;
    p->have_origin = 0;
    p->npend = 0;
}

/* --- trace storage ---------------------------------------------------------------- */

static int grow(dl_profiler *p)
{
    size_t ncap = p->cap * 2 > p->opt.max_events ? p->opt.max_events : p->cap * 2;
    if (ncap <= p->cap)
        return 0;
    tev *n = malloc(ncap * sizeof *n);
    if (!n)
        return 0;
    for (unsigned long long s = p->trim; s < p->seq; s++)
        n[s % ncap] = p->ev[s % p->cap];
    free(p->ev);
    p->ev = n;
    p->cap = ncap;
    return 1;
}

/* Appends an event; returns its sequence number or ~0 when dropped. */
static unsigned long long append(dl_profiler *p, short kind, short cat, int id, double t0,
                                 double dur)
{
    if (!p->have_origin) {
        p->origin_ms = t0;
        p->have_origin = 1;
    }
    if (p->seq - p->trim >= p->cap && !grow(p)) {
        if (p->opt.whole_run) { /* keep the beginning; count what is lost */
            p->dropped++;
            return ~0ULL;
        }
        p->trim++; /* the ring overwrites its oldest event */
        p->dropped++;
    }
    tev *e = &p->ev[p->seq % p->cap];
    e->ts_ms = t0;
    e->dur_ms = dur;
    e->step = p->cur_step;
    e->kind = kind;
    e->cat = cat;
    e->id = id;
    return p->seq++;
}

/* --- recording ------------------------------------------------------------------------ */

static int phase_index(dl_profiler *p, dl_prof_cat cat, const char *name)
{
    for (int i = 0; i < p->nphases; i++)
        if (p->phases[i].cat == cat &&
            (p->phases[i].name == name || !strcmp(p->phases[i].name, name)))
            return i;
    if (p->nphases == MAX_PHASES)
        return MAX_PHASES - 1; /* folded into the last one; never reached by the trainer */
    phase_ent *e = &p->phases[p->nphases];
    memset(e, 0, sizeof *e);
    e->name = name;
    e->cat = cat;
    return p->nphases++;
}

static void account(dl_profiler *p, int ph, double ms, double flops, double bytes)
{
    phase_ent *e = &p->phases[ph];
    e->calls++;
    e->ms += ms;
    e->flops += flops;
    e->bytes += bytes;
}

void dl_profiler_step_begin(dl_profiler *p, long step)
{
    p->cur_step = step;
    p->in_step = 1;
    if (!p->opt.whole_run) {
        /* the oldest of ring_steps kept steps starts the trace */
        long r = p->opt.ring_steps;
        p->step_start[p->nstep_starts % r] = p->seq;
        p->nstep_starts++;
        if (p->nstep_starts > r) {
            unsigned long long oldest = p->step_start[p->nstep_starts % r];
            if (oldest > p->trim)
                p->trim = oldest;
        }
    }
    p->step_t0 = now_ms();
}

static void resolve_pending(dl_profiler *p)
{
    for (int i = 0; i < p->npend; i++) {
        pending *q = &p->pend[i];
        float ms = 0;
        if (p->be->ops->event_elapsed(p->be, p->pairs[q->pair][0], p->pairs[q->pair][1], &ms) < 0)
            ms = 0;
        account(p, phase_index(p, q->cat, q->name), ms, q->flops, q->bytes);
        if (q->traced && q->seq >= p->trim && q->seq < p->seq)
            p->ev[q->seq % p->cap].dur_ms = ms;
    }
    p->npend = 0;
}

void dl_prof_step_begin(dl_profiler *p, long step)
{
    if (dl_profiler_wants_step(p, step)) {
        p->head.recording = 1;
        dl_profiler_step_begin(p, step);
    } else if (p->head.recording) {
        p->head.recording = 0; /* a step left by an error */
    }
}

dl_prof_span dl_prof_begin_aside(dl_profiler *p)
{
    if (!dl_profiler_enabled(p))
        return (dl_prof_span){0, -1, 0};
    dl_prof_span s = dl_profiler_begin(p);
    s.on = 1;
    return s;
}

void dl_profiler_step_end(dl_profiler *p)
{
    if (!p->in_step)
        return;
    if (p->npend)
        resolve_pending(p); /* waits for the step's last event: the device is done */
    double t1 = now_ms();
    p->steps++;
    p->step_ms += t1 - p->step_t0;
    append(p, 3, DL_PROF_OTHER, 0, p->step_t0, t1 - p->step_t0);
    p->in_step = 0;
}

void dl_profiler_step_discard(dl_profiler *p)
{
    if (!p->in_step)
        return;
    if (p->npend)
        resolve_pending(p);
    p->step_ms += now_ms() - p->step_t0;
    p->in_step = 0;
}

dl_prof_span dl_profiler_begin(dl_profiler *p)
{
    dl_prof_span s = {now_ms(), -1, 0};
    if (p->use_events && p->npend < MAX_PENDING) {
        int k = p->npend;
        if (k >= p->npairs_made) {
            p->pairs[k][0] = p->be->ops->event_create(p->be);
            p->pairs[k][1] = p->be->ops->event_create(p->be);
            p->npairs_made = k + 1;
        }
        if (p->pairs[k][0] && p->pairs[k][1] &&
            p->be->ops->event_record(p->be, p->pairs[k][0]) == DL_OK)
            s.ev = k;
    }
    return s;
}

void dl_profiler_end(dl_profiler *p, dl_prof_span s, dl_prof_cat cat, const char *name,
                     double flops, double bytes)
{
    if (s.ev >= 0 && s.ev == p->npend &&
        p->be->ops->event_record(p->be, p->pairs[s.ev][1]) == DL_OK) {
        /* duration known when the step ends */
        pending *q = &p->pend[p->npend++];
        q->pair = s.ev;
        q->cat = cat;
        q->name = name;
        q->flops = flops;
        q->bytes = bytes;
        int ph = phase_index(p, cat, name);
        q->seq = append(p, 0, (short)cat, ph, s.t0_ms, 0);
        q->traced = q->seq != ~0ULL;
        if (!p->in_step)
            resolve_pending(p);
        return;
    }
    double t1 = now_ms();
    int ph = phase_index(p, cat, name);
    account(p, ph, t1 - s.t0_ms, flops, bytes);
    append(p, 0, (short)cat, ph, s.t0_ms, t1 - s.t0_ms);
}

static void layer_hook(void *user, const dl_layer *l, int backward, int n, double t0, double t1)
{
    dl_profiler *p = user;
    int i = l->id;
    if (i < 0 || i >= p->nlayers || p->layers[i].layer != l)
        return; /* a layer of another model */
    layer_ent *e = &p->layers[i];
    double ms = t1 - t0;
    if (backward) {
        e->bcalls++;
        e->bms += ms;
        e->brows += n;
        if (e->parent >= 0)
            p->layers[e->parent].child_bms += ms;
    } else {
        e->fcalls++;
        e->fms += ms;
        e->frows += n;
        if (e->parent >= 0)
            p->layers[e->parent].child_fms += ms;
    }
    append(p, backward ? 2 : 1, backward ? DL_PROF_BACKWARD : DL_PROF_FORWARD, i, t0, ms);
}

void dl_profiler_arm_pass(dl_profiler *p, dl_pass *pass)
{
    pass->profile = 1;
    pass->prof_hook = layer_hook;
    pass->prof_user = p;
}

/* --- results ---------------------------------------------------------------------- */

static double layer_flops(const layer_ent *e, int backward, double rows)
{
    double f = e->flops_ps * rows;
    /* a parameter layer's backward is the weight gradient and, unless
     * nothing reads it, the input gradient: each as much as the forward */
    return backward ? (e->params > 0 && !e->no_dx ? 2 * f : f) : f;
}

/* Compulsory traffic estimate in bytes (f32): forward reads x and the
 * parameters, writes y; backward reads x, y, dy and the parameters, writes
 * dx and updates the parameter gradients. Containers: 0 (children count). */
static double layer_bytes(const layer_ent *e, int backward, double rows, long calls)
{
    if (!e->leaf)
        return 0;
    if (!backward)
        return 4 * (rows * (e->in_numel + e->out_numel) + (double)calls * e->params);
    return 4 * (rows * (2 * e->in_numel + 2 * e->out_numel) + 3 * (double)calls * e->params);
}

void dl_profiler_totals(const dl_profiler *p, dl_prof_totals *t)
{
    memset(t, 0, sizeof *t);
    t->steps = p->steps;
    t->step_ms = p->step_ms;
    t->mean_step_ms = p->steps ? p->step_ms / (double)p->steps : 0;
    for (int i = 0; i < p->nphases; i++) {
        if (p->phases[i].cat == DL_PROF_VALIDATION)
            continue;
        t->timed_ms += p->phases[i].ms;
        if (p->phases[i].cat == DL_PROF_DATA)
            t->data_ms += p->phases[i].ms;
    }
    t->untimed_ms = t->step_ms - t->timed_ms;
    if (t->untimed_ms < 0)
        t->untimed_ms = 0;
    double leaf_calls = 0, leaf_ms = 0;
    for (int i = 0; i < p->nlayers; i++) {
        const layer_ent *e = &p->layers[i];
        t->flops += layer_flops(e, 0, e->frows) + layer_flops(e, 1, e->brows);
        if (e->leaf) {
            leaf_calls += (double)(e->fcalls + e->bcalls);
            leaf_ms += e->fms + e->bms;
        }
    }
    t->achieved_flops_per_s = t->step_ms > 0 ? t->flops / (t->step_ms * 1e-3) : 0;
    t->leaf_calls_per_step = p->steps ? leaf_calls / (double)p->steps : 0;
    t->mean_leaf_ms = leaf_calls > 0 ? leaf_ms / leaf_calls : 0;
    t->events_kept = (long)(p->seq - p->trim);
    t->events_dropped = p->dropped;
}

static void finish_row(dl_prof_row *r, double step_ms, int use_self)
{
    r->mean_ms = r->calls ? r->total_ms / (double)r->calls : 0;
    r->pct_step = step_ms > 0 ? 100.0 * r->self_ms / step_ms : 0;
    double ms = use_self ? r->self_ms : r->total_ms;
    r->gflops = ms > 0 ? r->flops / (ms * 1e-3) * 1e-9 : 0;
    r->gbps = ms > 0 ? r->bytes / (ms * 1e-3) * 1e-9 : 0;
}

static dl_prof_sort sort_key;

static int cmp_rows(const void *a, const void *b)
{
    const dl_prof_row *x = a, *y = b;
    double u = 0, v = 0;
    switch (sort_key) {
    case DL_PROF_SORT_SELF:
        u = x->self_ms;
        v = y->self_ms;
        break;
    case DL_PROF_SORT_CALLS:
        u = (double)x->calls;
        v = (double)y->calls;
        break;
    case DL_PROF_SORT_MEAN:
        u = x->mean_ms;
        v = y->mean_ms;
        break;
    case DL_PROF_SORT_FLOPS:
        u = x->flops;
        v = y->flops;
        break;
    case DL_PROF_SORT_NAME: return strcmp(x->name, y->name);
    default:
        u = x->total_ms;
        v = y->total_ms;
        break;
    }
    return u < v ? 1 : u > v ? -1 : strcmp(x->name, y->name);
}

int dl_prof_sort_parse(const char *key)
{
    static const char *keys[] = {"total", "self", "calls", "mean", "flops", "name", "none"};
    for (int i = 0; i < (int)(sizeof keys / sizeof *keys); i++)
        if (!strcmp(key, keys[i]))
            return i;
    return -1;
}

/* The layer view: one row per layer, in model order. */
static int layer_rows(const dl_profiler *p, dl_prof_row *r)
{
    int n = 0;
    for (int i = 0; i < p->nlayers; i++) {
        const layer_ent *e = &p->layers[i];
        dl_prof_row *x = &r[n++];
        snprintf(x->name, sizeof x->name, "%s", e->name);
        snprintf(x->kind, sizeof x->kind, "%s", e->kind);
        /* a ReLU run inside the MaxPool2d after it, a BatchNorm inside
         * the ReLU after it (nn.h: fused) */
        const char *next =
            i + 1 < p->nlayers && p->layers[i + 1].fcalls ? p->layers[i + 1].kind : "";
        if (!e->fcalls && !strcmp(e->kind, "ReLU") && !strcmp(next, "MaxPool2d"))
            snprintf(x->kind, sizeof x->kind, "ReLU, fused in next");
        if (!e->fcalls && !strcmp(e->kind, "BatchNorm") && !strcmp(next, "ReLU"))
            snprintf(x->kind, sizeof x->kind, "BatchNorm, fused in next");
        /* a ReLU run inside the Residual before it (its time is there):
         * the previous layer at the same depth */
        int before = i - 1;
        while (before >= 0 && p->layers[before].depth > e->depth)
            before--;
        if (!e->fcalls && !strcmp(e->kind, "ReLU") && before >= 0 &&
            p->layers[before].depth == e->depth && p->layers[before].fcalls &&
            !strcmp(p->layers[before].kind, "Residual"))
            snprintf(x->kind, sizeof x->kind, "ReLU, fused in Residual");
        x->cat = DL_PROF_FORWARD;
        x->depth = e->depth;
        x->calls = e->fcalls;
        x->fwd_ms = e->fms;
        x->bwd_ms = e->bms;
        x->total_ms = e->fms + e->bms;
        x->self_ms = x->total_ms - e->child_fms - e->child_bms;
        if (x->self_ms < 0)
            x->self_ms = 0;
        x->flops = 0;
        x->bytes = 0;
        /* inclusive FLOPs and bytes: this layer and those under it */
        for (int k = i; k < p->nlayers; k++) {
            const layer_ent *c = &p->layers[k];
            if (k > i && c->depth <= e->depth)
                break;
            x->flops += layer_flops(c, 0, c->frows) + layer_flops(c, 1, c->brows);
            x->bytes +=
                layer_bytes(c, 0, c->frows, c->fcalls) + layer_bytes(c, 1, c->brows, c->bcalls);
        }
        finish_row(x, p->step_ms, 0);
    }
    return n;
}

/* Whether a layer above layer i is of its kind (a Sequential in a
 * Sequential, a Residual in a Residual's branch). */
static int inside_own_kind(const dl_profiler *p, int i)
{
    for (int a = p->layers[i].parent; a >= 0; a = p->layers[a].parent)
        if (!strcmp(p->layers[a].kind, p->layers[i].kind))
            return 1;
    return 0;
}

/* The op view's layer rows: layer kinds by direction, after the n rows
 * already in r; returns the new count. A kind's total counts a nested
 * layer of the same kind once, in the outermost one's time (a ResNet's
 * Sequential.backward read 194% of the step when each level's time was
 * added); its calls and mean count every layer (build_rows). */
static int kind_rows(const dl_profiler *p, dl_prof_row *r, int n)
{
    for (int dir = 0; dir < 2; dir++) {
        for (int i = 0; i < p->nlayers; i++) {
            const layer_ent *e = &p->layers[i];
            long calls = dir ? e->bcalls : e->fcalls;
            if (!calls)
                continue;
            char name[64];
            snprintf(name, sizeof name, "%s.%s", e->kind, dir ? "backward" : "forward");
            dl_prof_row *x = NULL;
            for (int k = 0; k < n; k++)
                if (!strcmp(r[k].name, name))
                    x = &r[k];
            if (!x) {
                x = &r[n++];
                snprintf(x->name, sizeof x->name, "%s", name);
                snprintf(x->kind, sizeof x->kind, "%s", e->kind);
                x->cat = dir ? DL_PROF_BACKWARD : DL_PROF_FORWARD;
            }
            double ms = dir ? e->bms : e->fms;
            double child = dir ? e->child_bms : e->child_fms;
            double rows = dir ? e->brows : e->frows;
            x->calls += calls;
            if (!inside_own_kind(p, i))
                x->total_ms += ms;
            x->self_ms += ms - child > 0 ? ms - child : 0;
            x->flops += layer_flops(e, dir, rows);
            x->bytes += layer_bytes(e, dir, rows, calls);
            if (dir)
                x->bwd_ms += ms;
            else
                x->fwd_ms += ms;
        }
    }
    return n;
}

/* The op view's phase rows and the untimed remainder, after the n rows
 * already in r; returns the new count. */
static int phase_rows(const dl_profiler *p, dl_prof_row *r, int n)
{
    /* the root's time, to find what the forward/backward phases spent outside it */
    double root_f = p->nlayers ? p->layers[0].fms : 0, root_b = p->nlayers ? p->layers[0].bms : 0;
    double step = 0;
    for (int i = 0; i < p->nphases; i++) {
        const phase_ent *e = &p->phases[i];
        dl_prof_row *x = &r[n++];
        x->cat = e->cat;
        snprintf(x->kind, sizeof x->kind, "%s", dl_prof_cat_name(e->cat));
        x->calls = e->calls;
        x->total_ms = e->ms;
        x->self_ms = e->ms;
        x->flops = e->flops;
        x->bytes = e->bytes;
        if (e->cat == DL_PROF_FORWARD || e->cat == DL_PROF_BACKWARD) {
            /* the layers are rows of their own; this row is what remains */
            double inside = e->cat == DL_PROF_FORWARD ? root_f : root_b;
            snprintf(x->name, sizeof x->name, "%s (outside layers)", e->name);
            x->self_ms = e->ms - inside > 0 ? e->ms - inside : 0;
            x->total_ms = x->self_ms;
        } else {
            snprintf(x->name, sizeof x->name, "%s", e->name);
        }
        if (e->cat != DL_PROF_VALIDATION)
            step += e->ms;
    }
    if (p->steps && p->step_ms - step > 0) {
        dl_prof_row *x = &r[n++];
        snprintf(x->name, sizeof x->name, "untimed (between spans)");
        snprintf(x->kind, sizeof x->kind, "other");
        x->cat = DL_PROF_OTHER;
        x->calls = p->steps;
        x->total_ms = x->self_ms = p->step_ms - step;
    }
    return n;
}

/* Builds every row of a view into a fresh array (caller frees). */
static int build_rows(const dl_profiler *p, dl_prof_group g, dl_prof_row **out)
{
    int cap = g == DL_PROF_BY_LAYER ? p->nlayers : 2 * p->nlayers + p->nphases + 4;
    dl_prof_row *r = calloc((size_t)(cap ? cap : 1), sizeof *r);
    *out = r;
    if (!r)
        return 0;
    if (g == DL_PROF_BY_LAYER)
        return layer_rows(p, r);
    int n = phase_rows(p, r, kind_rows(p, r, 0));
    for (int i = 0; i < n; i++) {
        finish_row(&r[i], p->step_ms, 1);
        if (r[i].calls && r[i].fwd_ms + r[i].bwd_ms > 0) /* a kind's row: every call's time */
            r[i].mean_ms = (r[i].fwd_ms + r[i].bwd_ms) / (double)r[i].calls;
    }
    return n;
}

int dl_profiler_rows(const dl_profiler *p, dl_prof_group g, dl_prof_sort sort, dl_prof_row *rows,
                     int max)
{
    dl_prof_row *all;
    int n = build_rows(p, g, &all);
    if (!all)
        return 0;
    if (sort != DL_PROF_SORT_NONE) {
        sort_key = sort; /* qsort has no context argument; results are single-threaded */
        qsort(all, (size_t)n, sizeof *all, cmp_rows);
    }
    if (rows && max > 0)
        memcpy(rows, all, (size_t)(n < max ? n : max) * sizeof *rows);
    free(all);
    return n;
}

static void fmt_ms(char *b, size_t n, double ms)
{
    if (ms >= 1000)
        snprintf(b, n, "%.3fs", ms / 1000);
    else if (ms >= 1)
        snprintf(b, n, "%.3fms", ms);
    else
        snprintf(b, n, "%.3fus", ms * 1000);
}

/* The layers' notes (the convolution algorithms each backend chose). */
static void print_notes(const dl_profiler *p, FILE *f)
{
    int head = 0;
    for (int i = 0; i < p->nlayers; i++) {
        char note[256];
        const layer_ent *e = &p->layers[i];
        if (!e->layer || !dl_layer_note(e->layer, note, sizeof note))
            continue;
        if (!head++)
            fputs("Algorithms:\n", f);
        fprintf(f, "  %s (%s): %s\n", e->name, e->kind, note);
    }
}

/* One row of the printed table; per_step > 0: the Self % column holds
 * the row's time in steps of that length (a row outside the step). */
static void print_row(FILE *f, const dl_prof_row *r, dl_prof_group g, double per_step)
{
    char name[160], self[16], tot[16], mean[16], fl[16], pct[16];
    if (g == DL_PROF_BY_LAYER)
        snprintf(name, sizeof name, "%*s%s (%s)", 2 * r->depth, "", r->name, r->kind);
    else
        snprintf(name, sizeof name, "%s", r->name);
    fmt_ms(self, sizeof self, r->self_ms);
    fmt_ms(tot, sizeof tot, r->total_ms);
    fmt_ms(mean, sizeof mean, r->mean_ms);
    if (r->flops >= 1e9)
        snprintf(fl, sizeof fl, "%.2fG", r->flops * 1e-9);
    else if (r->flops >= 1e6)
        snprintf(fl, sizeof fl, "%.2fM", r->flops * 1e-6);
    else if (r->flops > 0)
        snprintf(fl, sizeof fl, "%.0f", r->flops);
    else
        snprintf(fl, sizeof fl, "-");
    if (per_step > 0)
        snprintf(pct, sizeof pct, "%6.1f st", r->total_ms / per_step);
    else
        snprintf(pct, sizeof pct, "%8.2f%%", r->pct_step);
    fprintf(f, "%-35.35s  %9s  %6ld  %10s  %10s  %10s  %10s  %9.2f  %8.2f\n", name, pct, r->calls,
            self, tot, mean, fl, r->gflops, r->gbps);
}

void dl_profiler_print(const dl_profiler *p, dl_prof_group g, dl_prof_sort sort, int max_rows,
                       FILE *f)
{
    dl_prof_row *all;
    int n = build_rows(p, g, &all);
    if (!all)
        return;
    if (sort != DL_PROF_SORT_NONE) {
        sort_key = sort;
        qsort(all, (size_t)n, sizeof *all, cmp_rows);
    }
    int shown = max_rows > 0 && max_rows < n ? max_rows : n;
    const char *sep = "-----------------------------------  ---------  ------  ----------  "
                      "----------  ----------  ----------  ---------  --------\n";
    fputs(sep, f);
    fprintf(f, "%-35s  %9s  %6s  %10s  %10s  %10s  %10s  %9s  %8s\n",
            g == DL_PROF_BY_LAYER ? "Layer" : "Name", "Self %", "Calls", "Self", "Total", "Mean",
            "FLOPs", "GFLOP/s", "GB/s");
    fputs(sep, f);
    int outside = 0;
    for (int i = 0; i < shown; i++) {
        if (all[i].cat == DL_PROF_VALIDATION) { /* between steps: not in the step's 100% */
            outside++;
            continue;
        }
        print_row(f, &all[i], g, 0);
    }
    fputs(sep, f);
    dl_prof_totals t;
    dl_profiler_totals(p, &t);
    char st[16], ms[16];
    fmt_ms(st, sizeof st, t.step_ms);
    fmt_ms(ms, sizeof ms, t.mean_step_ms);
    fprintf(f, "Steps: %ld  step time total: %s  mean: %s  achieved: %.2f GFLOP/s", t.steps, st, ms,
            t.achieved_flops_per_s * 1e-9);
    if (shown < n)
        fprintf(f, "  (%d more rows)", n - shown);
    fputc('\n', f);
    if (outside) {
        fprintf(f, "Outside the step (Self %% column: its time in mean steps):\n");
        for (int i = 0; i < shown; i++)
            if (all[i].cat == DL_PROF_VALIDATION)
                print_row(f, &all[i], g, t.mean_step_ms);
    }
    print_notes(p, f);
    free(all);
}

/* --- trace ------------------------------------------------------------------------ */

static cJSON *rows_json(const dl_profiler *p, dl_prof_group g)
{
    dl_prof_row *all;
    int n = build_rows(p, g, &all);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; all && i < n; i++) {
        const dl_prof_row *r = &all[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", r->name);
        cJSON_AddStringToObject(o, "kind", r->kind);
        cJSON_AddStringToObject(o, "cat", dl_prof_cat_name(r->cat));
        cJSON_AddNumberToObject(o, "depth", r->depth);
        cJSON_AddNumberToObject(o, "calls", (double)r->calls);
        cJSON_AddNumberToObject(o, "total_ms", r->total_ms);
        cJSON_AddNumberToObject(o, "self_ms", r->self_ms);
        cJSON_AddNumberToObject(o, "fwd_ms", r->fwd_ms);
        cJSON_AddNumberToObject(o, "bwd_ms", r->bwd_ms);
        cJSON_AddNumberToObject(o, "flops", r->flops);
        cJSON_AddNumberToObject(o, "bytes", r->bytes);
        cJSON_AddItemToArray(a, o);
    }
    free(all);
    return a;
}

int dl_profiler_write_trace(const dl_profiler *p, const char *path)
{
    char tmp[1100];
    DL_TRY(dl_fs_tmp_name(path, tmp, sizeof tmp));
    FILE *f = fopen(tmp, "w");
    if (!f)
        return dl_error(DL_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
    fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,"
          "\"args\":{\"name\":\"dlbench\"}},\n"
          "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,"
          "\"args\":{\"name\":\"trainer\"}}",
          f);
    for (unsigned long long s = p->trim; s < p->seq; s++) {
        const tev *e = &p->ev[s % p->cap];
        char name[96];
        const char *cat = dl_prof_cat_name((dl_prof_cat)e->cat);
        if (e->kind == 0)
            snprintf(name, sizeof name, "%s", e->id < p->nphases ? p->phases[e->id].name : "?");
        else if (e->kind == 3)
            snprintf(name, sizeof name, "step %ld", e->step), cat = "step";
        else
            snprintf(name, sizeof name, "%s.%s", e->id < p->nlayers ? p->layers[e->id].name : "?",
                     e->kind == 2 ? "backward" : "forward");
        fputs(",\n{\"name\":", f);
        dl_json_string(f, name);
        fprintf(f,
                ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
                "\"args\":{\"step\":%ld",
                cat, (e->ts_ms - p->origin_ms) * 1e3, e->dur_ms * 1e3, e->step);
        if (e->kind == 1 || e->kind == 2) {
            fputs(",\"kind\":", f);
            dl_json_string(f, e->id < p->nlayers ? p->layers[e->id].kind : "?");
        }
        fputs("}}", f);
    }
    fputs("\n],\n\"dlbench\":", f);
    cJSON *meta = cJSON_CreateObject();
    dl_prof_totals t;
    dl_profiler_totals(p, &t);
    cJSON_AddNumberToObject(meta, "steps", (double)t.steps);
    cJSON_AddNumberToObject(meta, "step_ms", t.step_ms);
    cJSON_AddNumberToObject(meta, "flops", t.flops);
    cJSON_AddNumberToObject(meta, "events_kept", (double)t.events_kept);
    cJSON_AddNumberToObject(meta, "events_dropped", (double)t.events_dropped);
    cJSON_AddStringToObject(meta, "mode", p->opt.whole_run ? "whole run" : "ring");
    cJSON_AddNumberToObject(meta, "ring_steps", p->opt.ring_steps);
    cJSON_AddItemToObject(meta, "ops", rows_json(p, DL_PROF_BY_OP));
    cJSON_AddItemToObject(meta, "layers", rows_json(p, DL_PROF_BY_LAYER));
    char *text = cJSON_PrintUnformatted(meta);
    cJSON_Delete(meta);
    fputs(text ? text : "{}", f);
    free(text);
    fputs("}\n", f);
    int bad = ferror(f) != 0;
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    int e = errno;
    bad |= fclose(f) != 0;
    if (bad) {
        unlink(tmp);
        return dl_error(DL_EIO, "%s: write failed: %s", tmp, strerror(e));
    }
    return dl_fs_commit(tmp, path);
}
