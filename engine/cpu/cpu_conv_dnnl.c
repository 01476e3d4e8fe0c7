/* cpu_conv_dnnl.c - dense convolutions through oneDNN (libdnnl) in its blocked layouts, the batch in fixed chunks on the backend's pool
 *
 * oneDNN's direct convolutions run near the FMA peak in its blocked
 * layouts (nChw16c with AVX-512, nChw8c with AVX2), three to four times
 * faster than im2col + GEMM at the channel counts of small CNNs; on plain
 * NCHW it falls back to a GEMM of its own. So each chunk of images
 * is reordered into the layout the primitive chose, convolved, and
 * reordered back (adding into dx / dw, as the op table's contracts say,
 * through a reorder with a sum post-op). Reorders move a few MB; the
 * products dominate.
 *
 * Determinism: chunks are fixed (chunk_for: by shape, not by thread) and
 * each runs single-threaded inside oneDNN (its OpenMP pool is set to one
 * thread on the calling thread), so the bits do not depend on the thread
 * count; weight gradients of the chunks are summed in chunk order. One
 * thread pool owns the cores: oneDNN never starts its own workers here.
 * Primitives run concurrently on the pool's threads with user-managed
 * scratchpads (carved from the backend's scratch, one region per chunk).
 *
 * Primitives are created on first use per descriptor and chunk size and
 * cached on the backend (dl_cpu_dnnl_free releases them).
 *
 * Winograd. For f32 3x3 stride-1 layers from 32 channels on, each
 * direction asks for oneDNN's Winograd kernels (F(4x4, 3x3): a quarter of
 * the direct products, at a rounding error of the same order as
 * the direct sums' in the tests) by a rule on the shape (wino_wanted),
 * not by timing the candidates at run time: a timed choice would make a
 * run's bits depend on the machine's load at its first step.
 *
 * Low precision the CPU has no arithmetic for (dl_cpu_kernel_type: bf16
 * without AVX512_BF16, fp16 always) runs the f32 primitives, and f32's
 * rules, on operands rounded to the type: each chunk's operand right
 * after its reorder, in cache, the weights once a call; the two backward
 * directions, run together (dl_cpu_dnnl_conv_backward), round a chunk's
 * dy once for both. A product of two
 * rounded operands is exact in f32 and the sums are f32, as in bf16
 * kernels. oneDNN's own bf16 kernels on such a CPU emulate every product
 * (its jit_bf16: 26-31 GFLOP/s on the ResNet's 3x3 layers on an AVX-512
 * Xeon without AVX512_BF16, against 98-150 for f32), and fp16 on the own
 * im2col path ran the ResNet at a tenth of f32.
 */
#include "engine/cpu/cpu.h"

#ifdef DL_HAVE_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"

/* OpenMP's omp_set_num_threads from the runtime libdnnl brought in
 * (libgomp), looked up once; NULL where there is none. */
static void (*omp_threads_fn)(int);
static pthread_once_t omp_once = PTHREAD_ONCE_INIT;

static void find_omp(void)
{
    *(void **)&omp_threads_fn = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
}

/* This thread's OpenMP regions (oneDNN's) run on the thread alone. */
static void omp_single(void)
{
    pthread_once(&omp_once, find_omp);
    if (omp_threads_fn)
        omp_threads_fn(1);
}

/* Images per chunk: enough output pixels per primitive call for oneDNN's
 * kernels to run at speed (small images batch more), and a function of
 * the shape alone, never of the thread count. DLBENCH_CONV_CHUNK sets it
 * (measurements). */
static int chunk_for(const dl_conv_desc *d)
{
    const char *e = getenv("DLBENCH_CONV_CHUNK");
    int chunk = e ? atoi(e) : 0;
    if (chunk <= 0) {
        long px = (long)d->p * d->q;
        chunk = 8;
        while (chunk < 32 && chunk * px < 4096)
            chunk *= 2;
    }
    return chunk < d->n ? chunk : d->n;
}

enum { FWD, BWD_DATA, BWD_W, NDIR };

/* One direction's primitive and the reorders around it, for nb images. */
typedef struct prim {
    dnnl_primitive_t p;
    dnnl_memory_desc_t in_md, in2_md, w_md, out_md; /* the primitive's layouts */
    dnnl_memory_desc_t u_in, u_in2, u_w, u_out;     /* the user's plain ones */
    dnnl_primitive_t r_in, r_in2, r_w, r_out;       /* user -> primitive (r_out: back) */
    dnnl_primitive_t r_out_set; /* BWD_DATA: back, written (NULL: the layouts agree) */
    size_t scratch;             /* the primitive's scratchpad */
    char impl[48];              /* oneDNN's name of its kernel */
} prim;

typedef struct entry {
    dl_conv_desc d;
    int nb;
    dl_dtype compute; /* f32, or bf16 operands (f32 sums and outputs) */
    int wino;         /* bit dir: Winograd asked for in direction dir */
    int failed;       /* oneDNN has no primitive for it: the own kernels run */
    prim dir[NDIR];
    struct entry *next;
} entry;

struct dl_cpu_dnnl {
    dnnl_engine_t eng;
    entry *list;
};

#define DN(call)                                                                                   \
    do {                                                                                           \
        if ((call) != dnnl_success)                                                                \
            return -1;                                                                             \
    } while (0)

static int same_desc(const dl_conv_desc *a, const dl_conv_desc *b)
{
    return a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k && a->r == b->r &&
           a->s == b->s && a->stride == b->stride && a->pad == b->pad &&
           dl_conv_dilation(a) == dl_conv_dilation(b) && dl_conv_groups(a) == dl_conv_groups(b) &&
           a->x_blk == b->x_blk && a->y_blk == b->y_blk;
}

/* A reorder from one layout to another (sum: add into the destination);
 * NULL where the layouts are the same (the data is used in place). */
static int make_reorder(dnnl_engine_t eng, const dnnl_memory_desc_t *from,
                        const dnnl_memory_desc_t *to, int sum, dnnl_primitive_t *out)
{
    *out = NULL;
    if (!sum && dnnl_memory_desc_equal(from, to))
        return 0;
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po = NULL;
    DN(dnnl_primitive_attr_create(&attr));
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (sum && dnnl_post_ops_create(&po) == dnnl_success) {
        dnnl_post_ops_append_sum(po, 1.0f);
        dnnl_primitive_attr_set_post_ops(attr, po);
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, attr);
    if (s == dnnl_success)
        s = dnnl_primitive_create(out, pd);
    dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return s == dnnl_success ? 0 : -1;
}

/* The layout of activations in blocks of blk channels (0: plain NCHW). */
static dnnl_format_tag_t act_tag(int blk)
{
    return blk == 16 ? dnnl_nChw16c : blk == 8 ? dnnl_nChw8c : dnnl_nchw;
}

/* The user's layouts of x [nb, c, h, w], w [k, c, r, s], y [nb, k, p, q]
 * (act: "any" for the primitive's, else x and y as d's x_blk and y_blk
 * say). */
static int plain_mds(const dl_conv_desc *d, int nb, dnnl_memory_desc_t *x, dnnl_memory_desc_t *w,
                     dnnl_memory_desc_t *y, dnnl_format_tag_t act, dnnl_format_tag_t wt,
                     const dnnl_data_type_t types[3])
{
    dnnl_dims_t dx = {nb, d->c, d->h, d->w}, dw = {d->k, d->c, d->r, d->s};
    dnnl_dims_t dy = {nb, d->k, d->p, d->q};
    int g = dl_conv_groups(d);
    int any = act == dnnl_format_tag_any;
    DN(dnnl_memory_desc_init_by_tag(x, 4, dx, types[0], any ? act : act_tag(d->x_blk)));
    if (g > 1) {
        /* w [k, c/g, r, s] is [g, k/g, c/g, r, s] in oneDNN's terms */
        dnnl_dims_t dwg = {g, d->k / g, d->c / g, d->r, d->s};
        DN(dnnl_memory_desc_init_by_tag(w, 5, dwg, types[1],
                                        wt == dnnl_format_tag_any ? wt : dnnl_goihw));
    } else {
        DN(dnnl_memory_desc_init_by_tag(w, 4, dw, types[1], wt));
    }
    DN(dnnl_memory_desc_init_by_tag(y, 4, dy, types[2], any ? act : act_tag(d->y_blk)));
    return 0;
}

/* Data types of x, w, y for direction dir: f32, or bf16 operands with the
 * direction's output (y, dx or dw) in f32. */
static void dir_types(int dir, dl_dtype compute, dnnl_data_type_t t[3])
{
    dnnl_data_type_t op = compute == DL_BF16 ? dnnl_bf16 : dnnl_f32;
    t[0] = t[1] = t[2] = op;
    t[dir == FWD ? 2 : dir == BWD_DATA ? 0 : 1] = dnnl_f32;
}

/* The convolution descriptor of direction dir, layouts left to oneDNN. */
static int op_desc(const dl_conv_desc *d, int nb, int dir, dl_dtype compute, dnnl_alg_kind_t alg,
                   dnnl_convolution_desc_t *cd)
{
    dnnl_memory_desc_t x, w, y, b;
    dnnl_data_type_t t[3];
    dir_types(dir, compute, t);
    if (plain_mds(d, nb, &x, &w, &y, dnnl_format_tag_any, dnnl_format_tag_any, t) < 0)
        return -1;
    dnnl_dims_t db = {d->k};
    DN(dnnl_memory_desc_init_by_tag(&b, 1, db, dnnl_f32, dnnl_x));
    dnnl_dims_t st = {d->stride, d->stride}, pad = {d->pad, d->pad};
    dnnl_dims_t dil = {dl_conv_dilation(d) - 1, dl_conv_dilation(d) - 1};
    /* the right padding that makes oneDNN's output size ours */
    dnnl_dims_t pr = {(d->p - 1) * d->stride + (d->r - 1) * dil[0] + d->r - d->h - d->pad,
                      (d->q - 1) * d->stride + (d->s - 1) * dil[1] + d->s - d->w - d->pad};
    if (dir == FWD)
        DN(dnnl_dilated_convolution_forward_desc_init(cd, dnnl_forward_training, alg, &x, &w, &b,
                                                      &y, st, dil, pad, pr));
    else if (dir == BWD_DATA)
        DN(dnnl_dilated_convolution_backward_data_desc_init(cd, alg, &x, &w, &y, st, dil, pad, pr));
    else
        DN(dnnl_dilated_convolution_backward_weights_desc_init(cd, alg, &x, &w, &b, &y, st, dil,
                                                               pad, pr));
    return 0;
}

/* The primitive of one direction and its layouts: in is x (FWD, BWD_W) or
 * dy (BWD_DATA), in2 dy for BWD_W, out y, dx or dw. */
static int make_prim(dnnl_engine_t eng, const dl_conv_desc *d, int nb, int dir, dl_dtype compute,
                     int wino, dnnl_primitive_desc_t hint, prim *pr, dnnl_primitive_desc_t *keep)
{
    dnnl_primitive_attr_t attr;
    DN(dnnl_primitive_attr_create(&attr));
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = dnnl_unimplemented;
    /* Winograd where asked for and oneDNN has it, else the direct kernels */
    for (int a = wino ? 0 : 1; a < 2 && s != dnnl_success; a++) {
        dnnl_convolution_desc_t cd;
        if (op_desc(d, nb, dir, compute, a ? dnnl_convolution_direct : dnnl_convolution_winograd,
                    &cd) == 0)
            s = dnnl_primitive_desc_create(&pd, &cd, attr, eng, hint);
    }
    dnnl_primitive_attr_destroy(attr);
    if (s != dnnl_success)
        return -1;
    /* oneDNN's reference kernels (no JIT for this CPU and type) are far
     * slower than the own ones */
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        !impl || !strncmp(impl, "ref", 3)) {
        dnnl_primitive_desc_destroy(pd);
        return -1;
    }
    snprintf(pr->impl, sizeof pr->impl, "%s", impl);
    static const dnnl_data_type_t plain[3] = {dnnl_f32, dnnl_f32, dnnl_f32};
    dnnl_memory_desc_t ux, uw, uy;
    if (plain_mds(d, nb, &ux, &uw, &uy, dnnl_nchw, dnnl_oihw, plain) < 0 ||
        dnnl_primitive_create(&pr->p, pd) != dnnl_success) {
        dnnl_primitive_desc_destroy(pd);
        return -1;
    }
    dnnl_query_t qin = dir == BWD_DATA ? dnnl_query_diff_dst_md : dnnl_query_src_md;
    dnnl_query_t qw = dir == BWD_W ? dnnl_query_diff_weights_md : dnnl_query_weights_md;
    dnnl_query_t qout = dir == FWD        ? dnnl_query_dst_md
                        : dir == BWD_DATA ? dnnl_query_diff_src_md
                                          : dnnl_query_diff_weights_md;
    pr->in_md = *dnnl_primitive_desc_query_md(pd, qin, 0);
    pr->w_md = *dnnl_primitive_desc_query_md(pd, qw, 0);
    pr->out_md = *dnnl_primitive_desc_query_md(pd, qout, 0);
    if (dir == BWD_W)
        pr->in2_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0);
    pr->scratch =
        dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    pr->u_in = dir == BWD_DATA ? uy : ux;
    pr->u_in2 = uy;
    pr->u_w = uw;
    pr->u_out = dir == FWD ? uy : dir == BWD_DATA ? ux : uw;
    if (keep)
        *keep = pd;
    else
        dnnl_primitive_desc_destroy(pd);
    int rc = make_reorder(eng, &pr->u_in, &pr->in_md, 0, &pr->r_in);
    if (rc == 0 && dir == BWD_W)
        rc = make_reorder(eng, &pr->u_in2, &pr->in2_md, 0, &pr->r_in2);
    if (rc == 0 && dir != BWD_W)
        rc = make_reorder(eng, &pr->u_w, &pr->w_md, 0, &pr->r_w);
    /* outputs: y overwritten, dx and dw added into */
    if (rc == 0)
        rc = make_reorder(eng, &pr->out_md, &pr->u_out, dir != FWD, &pr->r_out);
    if (rc == 0 && dir == BWD_DATA)
        rc = make_reorder(eng, &pr->out_md, &pr->u_out, 0, &pr->r_out_set);
    return rc;
}

static void prim_free(prim *p)
{
    dnnl_primitive_t *all[] = {&p->p, &p->r_in, &p->r_in2, &p->r_w, &p->r_out, &p->r_out_set};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (*all[i])
            dnnl_primitive_destroy(*all[i]);
}

/* Whether direction dir of d asks oneDNN for its Winograd kernels
 * (F(4x4, 3x3), f32 with AVX-512; where it has none, the direct ones run).
 * DLBENCH_CONV_WINO=0 or 1 overrides the rule for every 3x3 stride-1
 * shape (bench_conv's comparison). */
static int wino_wanted(const dl_conv_desc *d, dl_dtype compute, int dir)
{
    if (compute != DL_F32 || d->r != 3 || d->s != 3 || d->stride != 1 || dl_conv_dilation(d) != 1 ||
        dl_conv_groups(d) != 1)
        return 0;
    const char *e = getenv("DLBENCH_CONV_WINO"); /* read per call: benches switch */
    if (e && (!strcmp(e, "0") || !strcmp(e, "1")))
        return e[0] == '1';
    /* bench_conv's BENCH_CONV_VS=wino table at 1 and 2 threads: Winograd
     * wins by 1.2-2x from 64 channels on; at 32 input channels the
     * forward wins with 64 outputs or 32x32 planes, the data gradient
     * with "same" padding and 16x16 planes or more, the filter gradient
     * with 64 outputs; at 16 channels, and with 32 on 14x14 planes, the
     * direct kernels are as fast or faster (0.7-1.1x). */
    int px = d->p * d->q;
    if (d->c < 32 || d->k < 32)
        return 0;
    if (dir == FWD)
        return d->k >= 64 || px >= 1024;
    if (dir == BWD_DATA)
        return 2 * d->pad == d->r - 1 && (d->c >= 64 ? d->k >= 64 : px >= 256);
    return d->k >= 64;
}

/* The cached entry for (d, nb), made on first use; NULL when oneDNN has
 * none (the caller runs its own kernels). Called on the calling thread. */
static entry *lookup(dl_cpu_ctx *c, const dl_conv_desc *d, int nb, dl_dtype compute)
{
    struct dl_cpu_dnnl *dn = c->dnnl;
    int wino = 0;
    for (int dir = 0; dir < NDIR; dir++)
        wino |= wino_wanted(d, compute, dir) << dir;
    for (entry *e = dn->list; e; e = e->next)
        if (e->nb == nb && e->compute == compute && e->wino == wino && same_desc(&e->d, d))
            return e->failed ? NULL : e;
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->d = *d;
    e->nb = nb;
    e->compute = compute;
    e->wino = wino;
    dnnl_primitive_desc_t fwd_pd = NULL;
    e->failed =
        make_prim(dn->eng, d, nb, FWD, compute, wino & 1, NULL, &e->dir[FWD], &fwd_pd) < 0 ||
        make_prim(dn->eng, d, nb, BWD_DATA, compute, wino & 2, fwd_pd, &e->dir[BWD_DATA], NULL) <
            0 ||
        make_prim(dn->eng, d, nb, BWD_W, compute, wino & 4, fwd_pd, &e->dir[BWD_W], NULL) < 0;
    if (fwd_pd)
        dnnl_primitive_desc_destroy(fwd_pd);
    e->next = dn->list;
    dn->list = e;
    return e->failed ? NULL : e;
}

/* --- execution ---------------------------------------------------------- */

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Bytes one chunk needs: the reordered input(s), output and scratchpads. */
static size_t chunk_bytes(const prim *p)
{
    return up64(dnnl_memory_desc_get_size(&p->in_md)) +
           up64(dnnl_memory_desc_get_size(&p->in2_md)) +
           up64(dnnl_memory_desc_get_size(&p->out_md)) + up64(p->scratch) + 4096;
}

/* Runs prim on one stream: args are (arg id, layout, data) triples. */
static int exec(dnnl_engine_t eng, dnnl_stream_t st, dnnl_primitive_t p, int n, const int *ids,
                const dnnl_memory_desc_t *const *mds, void *const *data)
{
    dnnl_memory_t mem[6];
    dnnl_exec_arg_t args[6] = {{0, NULL}};
    int made = 0, rc = 0;
    for (; made < n; made++) {
        if (dnnl_memory_create(&mem[made], mds[made], eng, data[made]) != dnnl_success) {
            rc = -1;
            break;
        }
        args[made] = (dnnl_exec_arg_t){ids[made], mem[made]};
    }
    if (rc == 0 && (dnnl_primitive_execute(p, st, n, args) != dnnl_success ||
                    dnnl_stream_wait(st) != dnnl_success))
        rc = -1;
    for (int i = 0; i < made; i++)
        dnnl_memory_destroy(mem[i]);
    return rc;
}

/* A reorder of data from (md_from, from) to (md_to, to); a NULL reorder
 * is a no-op (the caller passes the same buffer). */
static int reorder(dnnl_engine_t eng, dnnl_stream_t st, dnnl_primitive_t r,
                   const dnnl_memory_desc_t *mf, const void *from, const dnnl_memory_desc_t *mt,
                   void *to)
{
    if (!r)
        return 0;
    const int ids[] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    const dnnl_memory_desc_t *mds[] = {mf, mt};
    void *data[] = {(void *)from, to};
    return exec(eng, st, r, 2, ids, mds, data);
}

/* Operand src (the user's layout uf) in the primitive's layout md: src
 * itself where the two agree, else reordered into buf; rounded through
 * via into buf where via is not f32 (low precision on f32 primitives, see
 * the file comment). NULL when a reorder fails. */
static const void *operand(struct dl_cpu_dnnl *dn, dnnl_stream_t st, dnnl_primitive_t r,
                           const dnnl_memory_desc_t *uf, const float *src,
                           const dnnl_memory_desc_t *md, char *buf, dl_dtype via)
{
    if (!r && via == DL_F32)
        return src;
    if (reorder(dn->eng, st, r, uf, src, md, buf) < 0)
        return NULL;
    if (via != DL_F32)
        dl_cpu_round_run((float *)buf, r ? (const float *)buf : src, via,
                         dnnl_memory_desc_get_size(md) / sizeof(float));
    return buf;
}

/* The weights in prim p's layout (operand's rules). */
static const void *weights_for(struct dl_cpu_dnnl *dn, dnnl_stream_t st, const prim *p,
                               const float *w, char *buf, dl_dtype via, int *rc)
{
    const void *r = operand(dn, st, p->r_w, &p->u_w, w, &p->w_md, buf, via);
    if (!r)
        *rc = -1;
    return r;
}

typedef struct run_job {
    struct dl_cpu_dnnl *dn;
    int dir;
    int set; /* BWD_DATA: dx written, not added */
    const dl_conv_desc *d;
    int chunk;                /* images per chunk (chunk_for) */
    dl_dtype via;             /* f32, or bf16/fp16: operands rounded for f32 primitives */
    dl_dtype via_in, via_in2; /* in's and in2's: via, or f32 where d says they are rounded */
    entry *full, *last;       /* chunk images; the last, shorter chunk (may be full) */
    const float *in, *in2;    /* x or dy; dy for BWD_W */
    const void *w, *w_last;   /* weights in the primitives' layouts (FWD, BWD_DATA) */
    const float *b;           /* bias (FWD) */
    float *out;               /* y, dx (FWD, BWD_DATA) */
    char *scratch;            /* [chunks][per chunk] */
    size_t per_chunk;
    float *dw_parts, *db_parts; /* BWD_W: per chunk, the primitive's layout */
    size_t dw_bytes;
    int failed;
} run_job;

/* The chunk's buffers: reordered input(s), output, scratchpad. */
static void carve_chunk(const run_job *j, const prim *p, size_t ci, char **in, char **in2,
                        char **out, char **pad)
{
    char *s = j->scratch + ci * j->per_chunk;
    s = (char *)(((uintptr_t)s + 63) & ~(uintptr_t)63);
    *in = p->r_in || j->via_in != DL_F32 ? s : NULL;
    s += up64(dnnl_memory_desc_get_size(&p->in_md));
    *in2 = p->r_in2 || j->via_in2 != DL_F32 ? s : NULL;
    s += up64(dnnl_memory_desc_get_size(&p->in2_md));
    *out = s;
    s += up64(dnnl_memory_desc_get_size(&p->out_md));
    *pad = s;
}

/* Chunk ci of job j. given: the chunk's input (in) already in the
 * primitive's layout and rounded (the filter gradient's dy, shared with
 * the data gradient), NULL to prepare it here; *dy_used (when asked) gets
 * the filter gradient's dy as its primitive read it. */
static int run_chunk(const run_job *j, size_t ci, dnnl_stream_t st, const void *given,
                     const void **dy_used)
{
    const dl_conv_desc *d = j->d;
    int n0 = (int)ci * j->chunk, nb = d->n - n0 < j->chunk ? d->n - n0 : j->chunk;
    const prim *p = &(nb == j->chunk ? j->full : j->last)->dir[j->dir];
    dnnl_engine_t eng = j->dn->eng;
    size_t in_img = j->dir == BWD_DATA ? (size_t)d->k * d->p * d->q : (size_t)d->c * d->h * d->w;
    size_t out_img = j->dir == FWD ? (size_t)d->k * d->p * d->q : (size_t)d->c * d->h * d->w;
    const float *uin = j->in + (size_t)n0 * in_img;
    char *in, *in2, *out, *pad;
    carve_chunk(j, p, ci, &in, &in2, &out, &pad);
    const void *src =
        given ? given : operand(j->dn, st, p->r_in, &p->u_in, uin, &p->in_md, in, j->via_in);
    if (!src)
        return -1;
    if (j->dir == BWD_W) {
        const float *udy = j->in2 + (size_t)n0 * d->k * d->p * d->q;
        const void *dy = operand(j->dn, st, p->r_in2, &p->u_in2, udy, &p->in2_md, in2, j->via_in2);
        if (!dy)
            return -1;
        if (dy_used)
            *dy_used = dy;
        const int ids[] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS,
                           DNNL_ARG_DIFF_BIAS, DNNL_ARG_SCRATCHPAD};
        dnnl_memory_desc_t bmd, smd;
        dnnl_dims_t db = {d->k}, ds = {(dnnl_dim_t)p->scratch};
        dnnl_memory_desc_init_by_tag(&bmd, 1, db, dnnl_f32, dnnl_x);
        dnnl_memory_desc_init_by_tag(&smd, 1, ds, dnnl_u8, dnnl_x);
        const dnnl_memory_desc_t *mds[] = {&p->in_md, &p->in2_md, &p->out_md, &bmd, &smd};
        void *data[] = {(void *)src, (void *)dy, (char *)j->dw_parts + ci * j->dw_bytes,
                        j->db_parts + ci * d->k, pad};
        return exec(eng, st, p->p, 5, ids, mds, data);
    }
    float *uout = j->out + (size_t)n0 * out_img;
    /* y, and a written dx, go straight to the user's buffer when the
     * layouts agree; an added dx always through the adding reorder */
    dnnl_primitive_t back = j->set ? p->r_out_set : p->r_out;
    int direct = (j->dir == FWD || j->set) && !back;
    char *dst = direct ? (char *)uout : out;
    dnnl_memory_desc_t bmd, smd;
    dnnl_dims_t db = {d->k}, ds = {(dnnl_dim_t)p->scratch};
    dnnl_memory_desc_init_by_tag(&bmd, 1, db, dnnl_f32, dnnl_x);
    dnnl_memory_desc_init_by_tag(&smd, 1, ds, dnnl_u8, dnnl_x);
    int rc;
    if (j->dir == FWD) {
        const int ids[] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST,
                           DNNL_ARG_SCRATCHPAD};
        const dnnl_memory_desc_t *mds[] = {&p->in_md, &p->w_md, &bmd, &p->out_md, &smd};
        void *data[] = {(void *)src, (void *)(nb == j->chunk ? j->w : j->w_last), (void *)j->b, dst,
                        pad};
        rc = exec(eng, st, p->p, 5, ids, mds, data);
    } else {
        const int ids[] = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC,
                           DNNL_ARG_SCRATCHPAD};
        const dnnl_memory_desc_t *mds[] = {&p->in_md, &p->w_md, &p->out_md, &smd};
        void *data[] = {(void *)src, (void *)(nb == j->chunk ? j->w : j->w_last), dst, pad};
        rc = exec(eng, st, p->p, 4, ids, mds, data);
    }
    if (rc == 0 && !direct)
        rc = reorder(eng, st, back, &p->out_md, out, &p->u_out, uout);
    return rc;
}

/* The chunks of one job (first; then NULL), or of both gradients, chunk
 * by chunk: the filter's (first), then the data's (then) on the same
 * images while their dy is in cache; share: the data gradient reads the
 * filter's dy operand as it is (same layout, rounded the same way)
 * instead of preparing its own. A failure is flagged on first. */
typedef struct chunk_plan {
    run_job *first, *then;
    int share;
} chunk_plan;

static void chunk_task(void *arg, size_t begin, size_t end)
{
    chunk_plan *c = arg;
    omp_single();
    dnnl_stream_t st;
    if (dnnl_stream_create(&st, c->first->dn->eng, dnnl_stream_default_flags) != dnnl_success) {
        c->first->failed = 1;
        return;
    }
    for (size_t ci = begin; ci < end; ci++) {
        const void *dy = NULL;
        if (run_chunk(c->first, ci, st, NULL, &dy) < 0 ||
            (c->then && run_chunk(c->then, ci, st, c->share ? dy : NULL, NULL) < 0))
            c->first->failed = 1;
    }
    dnnl_stream_destroy(st);
}

/* --- entry point -------------------------------------------------------- */

static struct dl_cpu_dnnl *engine_of(dl_cpu_ctx *c)
{
    if (!c->dnnl) {
        struct dl_cpu_dnnl *dn = calloc(1, sizeof *dn);
        if (!dn || dnnl_engine_create(&dn->eng, dnnl_cpu, 0) != dnnl_success) {
            free(dn);
            return NULL;
        }
        c->dnnl = dn;
    }
    return c->dnnl;
}

int dl_cpu_dnnl_conv_wanted(const dl_conv_desc *d, dl_dtype compute)
{
    const char *e = getenv("DLBENCH_CONV"); /* own: never (read per call: tests switch) */
    int mode = !(e && !strcmp(e, "own"));
    /* below 8 input channels (a stem on grey or RGB images) oneDNN's
     * kernels for the plain layout are slower than the own direct ones:
     * bench_conv's first row */
    return mode && (compute == DL_F32 || compute == DL_BF16 || compute == DL_F16) &&
           dl_conv_groups(d) >= 1 && d->n > 0 && d->c >= 8;
}

/* Below 8 input channels in f32, direction by direction (bench_conv's
 * stem and LeNet rows, DLBENCH_CONV=dnnl against the own paths, 1 and 2
 * threads): oneDNN's filter gradient is 1.1-3x the own im2col one at 1,
 * 3 and 6 channels; its forward 1.5-3x from 16 outputs or 4 channels
 * (0.9x at 1 -> 6); its data gradient only from 4 channels (6 -> 16:
 * 1.3-1.9x; at 1 and 3 channels a fifth to a half of the own one). A
 * network's first layer needs no data gradient at all. Measured on an
 * AVX-512 CPU. With AVX2's kernels (ONEDNN_MAX_CPU_ISA=AVX2
 * DLBENCH_CPU_AVX512=0 on that CPU) the stem's two directions ran as fast
 * as the own ones (0.8-1.05x), and its y then comes in channel blocks, so
 * the whole first stage keeps them: the ResNet 462/465 -> 492/481
 * samples/s at one thread, cnn-user 1388/1156 -> 1468/1447. The rule is
 * the same on both. */
int dl_cpu_dnnl_conv_wanted_dir(const dl_conv_desc *d, dl_dtype compute, int dir)
{
    if (dl_cpu_dnnl_conv_wanted(d, compute))
        return 1;
    const char *e = getenv("DLBENCH_CONV");
    if ((e && !strcmp(e, "own")) || compute != DL_F32 || dl_conv_groups(d) != 1 || d->n <= 0)
        return 0;
    if (dir == 0)
        return d->k >= 16 || d->c >= 4;
    return dir == 2 || d->c >= 4;
}

/* Sums the chunks' weight and bias gradients into dw and db, in order. */
static int sum_parts(struct dl_cpu_dnnl *dn, dnnl_stream_t st, const run_job *j, size_t chunks,
                     float *dw, float *db)
{
    for (size_t ci = 0; ci < chunks; ci++) {
        int n0 = (int)ci * j->chunk, nb = j->d->n - n0 < j->chunk ? j->d->n - n0 : j->chunk;
        const prim *p = &(nb == j->chunk ? j->full : j->last)->dir[BWD_W];
        if (reorder(dn->eng, st, p->r_out, &p->out_md, (char *)j->dw_parts + ci * j->dw_bytes,
                    &p->u_out, dw) < 0)
            return -1;
        if (db)
            for (int k = 0; k < j->d->k; k++)
                db[k] += j->db_parts[ci * j->d->k + k];
    }
    return 0;
}

/* Bytes of scratch job j needs over chunks chunks (sets its per_chunk and
 * dw_bytes): the zero bias, the weights of both primitives, the chunks,
 * the weight-gradient parts; carve_job lays them out. */
static size_t job_bytes(run_job *j, size_t chunks)
{
    const prim *pf = &j->full->dir[j->dir], *pl = &j->last->dir[j->dir];
    j->per_chunk = chunk_bytes(pf) > chunk_bytes(pl) ? chunk_bytes(pf) : chunk_bytes(pl);
    j->dw_bytes = 0;
    if (j->dir == BWD_W) {
        size_t a = dnnl_memory_desc_get_size(&pf->out_md),
               b = dnnl_memory_desc_get_size(&pl->out_md);
        j->dw_bytes = up64(a > b ? a : b);
    }
    return up64((size_t)j->d->k * sizeof(float)) + up64(dnnl_memory_desc_get_size(&pf->w_md)) +
           up64(dnnl_memory_desc_get_size(&pl->w_md)) + chunks * (j->per_chunk + j->dw_bytes) +
           up64(chunks * (size_t)j->d->k * sizeof(float)) + 128;
}

/* Lays out job_bytes(j, chunks) from s: returns the zero bias; *wf and *wl
 * get the room for the two primitives' weights. */
static char *carve_job(run_job *j, size_t chunks, char *s, char **wf, char **wl)
{
    const prim *pf = &j->full->dir[j->dir], *pl = &j->last->dir[j->dir];
    s = (char *)(((uintptr_t)s + 63) & ~(uintptr_t)63);
    char *zero = s;
    memset(zero, 0, (size_t)j->d->k * sizeof(float));
    *wf = s + up64((size_t)j->d->k * sizeof(float));
    *wl = *wf + up64(dnnl_memory_desc_get_size(&pf->w_md));
    j->scratch = *wl + up64(dnnl_memory_desc_get_size(&pl->w_md));
    j->dw_parts = (float *)(j->scratch + chunks * j->per_chunk);
    j->db_parts = (float *)((char *)j->dw_parts + chunks * j->dw_bytes);
    return zero;
}

/* Job j for direction dir of d over *chunks chunks, on the cached
 * primitives (made on first use): 1, or 0 where oneDNN has none for d. */
static int job_init(dl_backend *be, run_job *j, int dir, const dl_conv_desc *d, dl_dtype compute,
                    size_t *chunks)
{
    dl_cpu_ctx *c = dl_cpu(be);
    dl_dtype pt = dl_cpu_kernel_type(be, compute);
    /* before primitives are made: oneDNN plans them for the OpenMP thread
     * count of the thread that creates them */
    omp_single();
    struct dl_cpu_dnnl *dn = engine_of(c);
    if (!dn)
        return 0;
    int chunk = chunk_for(d);
    *chunks = ((size_t)d->n + chunk - 1) / chunk;
    int rest = d->n - (int)(*chunks - 1) * chunk;
    *j = (run_job){.dn = dn,
                   .dir = dir,
                   .d = d,
                   .chunk = chunk,
                   .via = pt == compute ? DL_F32 : compute,
                   .full = lookup(c, d, chunk, pt)};
    j->last = rest == chunk ? j->full : lookup(c, d, rest, pt);
    /* in: x (forward, filter) or dy (data); in2: the filter's dy */
    int in_bit = dir == BWD_DATA ? DL_CONV_DY_ROUNDED : DL_CONV_X_ROUNDED;
    j->via_in = d->rounded & in_bit ? DL_F32 : j->via;
    j->via_in2 = d->rounded & DL_CONV_DY_ROUNDED ? DL_F32 : j->via;
    return j->full && j->last;
}

static int run_failed(const dl_conv_desc *d)
{
    return dl_error(DL_ERR, "conv (oneDNN) failed on [%d, %d, %d, %d] -> %d", d->n, d->c, d->h,
                    d->w, d->k);
}

int dl_cpu_dnnl_conv(dl_backend *be, int dir, const dl_conv_desc *d, dl_dtype compute, float *out,
                     float *out2, const float *in, const float *in2, const float *w, const float *b)
{
    int set = dir == 3; /* backward data, dx written */
    if (set)
        dir = BWD_DATA;
    run_job j;
    size_t chunks;
    if (!job_init(be, &j, dir, d, compute, &chunks))
        return 0; /* no oneDNN primitive for this shape */
    j.set = set;
    j.in = in;
    j.in2 = in2;
    j.b = b;
    j.out = out;
    char *wf, *wl, *s = dl_cpu_scratch(be, DL_CPU_SCRATCH_CONV, job_bytes(&j, chunks));
    if (!s)
        return dl_error(DL_ENOMEM, "conv (oneDNN): out of memory for its scratch");
    char *zero = carve_job(&j, chunks, s, &wf, &wl);
    if (!j.b)
        j.b = (const float *)zero;
    dnnl_stream_t st;
    if (dnnl_stream_create(&st, j.dn->eng, dnnl_stream_default_flags) != dnnl_success)
        return dl_error(DL_ERR, "conv (oneDNN): could not create a stream");
    int rc = 0;
    if (dir != BWD_W) {
        j.w = weights_for(j.dn, st, &j.full->dir[dir], w, wf, j.via, &rc);
        j.w_last = weights_for(j.dn, st, &j.last->dir[dir], w, wl, j.via, &rc);
    }
    if (rc == 0) {
        chunk_plan plan = {&j, NULL, 0};
        dl_pool_for(dl_cpu(be)->pool, chunks, 1, chunk_task, &plan);
        rc = j.failed ? -1 : 0;
    }
    if (rc == 0 && dir == BWD_W)
        rc = sum_parts(j.dn, st, &j, chunks, out, out2);
    dnnl_stream_destroy(st);
    return rc < 0 ? run_failed(d) : 1;
}

int dl_cpu_dnnl_conv_backward(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, float *dw,
                              float *dx, int set, const float *x, const float *dy, const float *w)
{
    run_job jw, jd;
    size_t chunks;
    if (!job_init(be, &jw, BWD_W, d, compute, &chunks) ||
        !job_init(be, &jd, BWD_DATA, d, compute, &chunks))
        return 0;
    jw.in = x;
    jw.in2 = dy;
    jw.out = dw;
    jd.set = set;
    jd.in = dy;
    jd.out = dx;
    size_t bw = job_bytes(&jw, chunks), bd = job_bytes(&jd, chunks);
    char *wf, *wl, *s = dl_cpu_scratch(be, DL_CPU_SCRATCH_CONV, bw + bd);
    if (!s)
        return dl_error(DL_ENOMEM, "conv (oneDNN): out of memory for its scratch");
    carve_job(&jw, chunks, s, &wf, &wl);
    carve_job(&jd, chunks, s + bw, &wf, &wl);
    /* the data gradient reads the filter's dy operand where both
     * primitives take dy in the same layout */
    chunk_plan plan = {
        &jw, &jd,
        dnnl_memory_desc_equal(&jw.full->dir[BWD_W].in2_md, &jd.full->dir[BWD_DATA].in_md) &&
            dnnl_memory_desc_equal(&jw.last->dir[BWD_W].in2_md, &jd.last->dir[BWD_DATA].in_md)};
    dnnl_stream_t st;
    if (dnnl_stream_create(&st, jw.dn->eng, dnnl_stream_default_flags) != dnnl_success)
        return dl_error(DL_ERR, "conv (oneDNN): could not create a stream");
    int rc = 0;
    jd.w = weights_for(jd.dn, st, &jd.full->dir[BWD_DATA], w, wf, jd.via, &rc);
    jd.w_last = weights_for(jd.dn, st, &jd.last->dir[BWD_DATA], w, wl, jd.via, &rc);
    if (rc == 0) {
        dl_pool_for(dl_cpu(be)->pool, chunks, 1, chunk_task, &plan);
        rc = jw.failed ? -1 : 0;
    }
    if (rc == 0)
        rc = sum_parts(jw.dn, st, &jw, chunks, dw, NULL);
    dnnl_stream_destroy(st);
    return rc < 0 ? run_failed(d) : 1;
}

int dl_cpu_dnnl_conv_describe(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, char *buf,
                              size_t size)
{
    dl_cpu_ctx *c = dl_cpu(be);
    omp_single();
    int chunk = chunk_for(d);
    dl_dtype pt = dl_cpu_kernel_type(be, compute);
    entry *e = engine_of(c) ? lookup(c, d, chunk, pt) : NULL;
    if (!e)
        return 0;
    /* the directions oneDNN runs for d (all three from 8 channels on) */
    static const char *names[NDIR] = {"fwd", "data", "filter"};
    size_t used = (size_t)snprintf(buf, size, "cpu oneDNN");
    const char *sep = " ";
    for (int dir = 0; dir < NDIR && used < size; dir++)
        if (dl_cpu_dnnl_conv_wanted_dir(d, pt, dir)) {
            used += (size_t)snprintf(buf + used, size - used, "%s%s (%s)", sep, e->dir[dir].impl,
                                     names[dir]);
            sep = ", ";
        }
    if (used < size)
        snprintf(buf + used, size - used, ", %d images a chunk%s", chunk,
                 pt == compute ? ""
                 : compute == DL_BF16
                     ? ", f32 on operands rounded to bf16 (no bf16 arithmetic here)"
                     : ", f32 on operands rounded to fp16 (no fp16 arithmetic here)");
    return 1;
}

void dl_cpu_dnnl_free(dl_cpu_ctx *c)
{
    struct dl_cpu_dnnl *dn = c->dnnl;
    if (!dn)
        return;
    for (entry *e = dn->list, *next; e; e = next) {
        next = e->next;
        for (int i = 0; i < NDIR; i++)
            prim_free(&e->dir[i]);
        free(e);
    }
    dnnl_engine_destroy(dn->eng);
    free(dn);
    c->dnnl = NULL;
}

/* oneDNN's f32 GEMM on the calling thread alone (see cpu_gemm.c). */
int dl_cpu_dnnl_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    omp_single();
    return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                      beta, c, ldc) == dnnl_success
               ? 0
               : -1;
}

#else
int dl_cpu_dnnl_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                      int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    return -1;
}

int dl_cpu_dnnl_conv_wanted(const dl_conv_desc *d, dl_dtype compute) { return 0; }
int dl_cpu_dnnl_conv_wanted_dir(const dl_conv_desc *d, dl_dtype compute, int dir) { return 0; }
int dl_cpu_dnnl_conv(dl_backend *be, int dir, const dl_conv_desc *d, dl_dtype compute, float *out,
                     float *out2, const float *in, const float *in2, const float *w, const float *b)
{
    return 0;
}
int dl_cpu_dnnl_conv_describe(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, char *buf,
                              size_t size)
{
    return 0;
}
int dl_cpu_dnnl_conv_backward(dl_backend *be, const dl_conv_desc *d, dl_dtype compute, float *dw,
                              float *dx, int set, const float *x, const float *dy, const float *w)
{
    return 0;
}
void dl_cpu_dnnl_free(dl_cpu_ctx *c) {}

#endif /* DL_HAVE_DNNL */
