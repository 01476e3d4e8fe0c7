/* tune_sampler.c - random, grid and TPE (independent Parzen estimators) samplers for studies
 *
 * TPE (Bergstra et al., 2011), one parameter at a time: the finished
 * trials that have the parameter with the same distribution are ranked
 * (complete ones by value, then pruned ones by how far they got); the best
 * n_good = min(ceil(gamma n), gamma_max) form l(x), the rest g(x). Each is
 * a mixture of truncated normals in the parameter's internal space (log
 * space for log parameters; an int covers [v - 0.5, v + 0.5]) plus one
 * flat-ish prior component at the centre with width b - a. A component's
 * width is the larger gap to its sorted neighbours, clipped to
 * [(b - a) / min(100, 1 + k), b - a]. n_ei_candidates values are drawn
 * from l and the one with the largest log l(x) - log g(x) (the expected
 * improvement's monotone proxy) is returned. Older observations are
 * down-weighted linearly once a group holds more than 25. Categoricals use
 * weighted counts plus prior_weight / n per choice.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/rng.h"
#include "engine/tune/tune_sampler.h"

#define RECENT_FULL_WEIGHT 25 /* newest observations of a group at weight 1 */
/* Multivariate kernel width as a share of the range, times m^(-1/(D+4)):
 * narrower than the usual 0.2, which explores too much for budgets of tens
 * of trials (bench_tune: 0.07 against 0.2 halves the regret on hartmann6
 * and rosenbrock5). */
#define JOINT_WIDTH 0.07

/* --- random numbers keyed by (seed, parameter, trial) ------------------------- */

typedef struct draw {
    uint64_t seed, stream, counter, i;
} draw;

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h ^ 0x54554e4500000000ull; /* "TUNE": apart from the engine's small streams */
}

static draw draw_for(uint64_t seed, int trial, const char *name)
{
    draw d = {seed, name_hash(name), (uint64_t)trial, 0};
    return d;
}

/* Uniform in [0, 1) with 53 random bits. */
static double draw_u01(draw *d)
{
    dl_rng4 r = dl_rng_philox(d->seed, d->stream, d->counter, d->i++);
    return ((double)(r.v[0] >> 5) * 67108864.0 + (double)(r.v[1] >> 6)) *
           (1.0 / 9007199254740992.0);
}

static double draw_normal(draw *d)
{
    double u1 = 1.0 - draw_u01(d); /* (0, 1] */
    double u2 = draw_u01(d);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* --- internal space ------------------------------------------------------------------ */

/* Bounds [a, b] of a numeric parameter in internal space. */
static void bounds_of(const dl_tune_param *d, double *a, double *b)
{
    double lo = d->lo, hi = d->hi;
    if (d->kind == DL_PARAM_INT) {
        lo -= 0.5;
        hi += 0.5;
    }
    *a = d->log ? log(lo) : lo;
    *b = d->log ? log(hi) : hi;
}

static double to_internal(const dl_tune_param *d, double v) { return d->log ? log(v) : v; }

/* Back from internal space, rounded for ints and kept within bounds. */
static double from_internal(const dl_tune_param *d, double x)
{
    double v = d->log ? exp(x) : x;
    if (d->kind == DL_PARAM_INT)
        v = round(v);
    if (v < d->lo)
        v = d->lo;
    if (v > d->hi)
        v = d->hi;
    return v;
}

static double sample_random(const dl_tune_param *d, draw *dr)
{
    double u = draw_u01(dr);
    if (d->kind == DL_PARAM_CHOICE) {
        int i = (int)(u * d->n_choices);
        return i < d->n_choices ? i : d->n_choices - 1;
    }
    if (d->kind == DL_PARAM_INT && !d->log) {
        double v = d->lo + floor(u * (d->hi - d->lo + 1));
        return v > d->hi ? d->hi : v;
    }
    double a, b;
    bounds_of(d, &a, &b);
    return from_internal(d, a + u * (b - a));
}

/* --- grid ------------------------------------------------------------------------------- */

long dl_tune_sampler_grid_size(const dl_sampler_config *c, const dl_tune_param *d)
{
    if (d->kind == DL_PARAM_CHOICE)
        return d->n_choices;
    if (d->lo == d->hi)
        return 1;
    if (d->kind == DL_PARAM_INT) {
        double range = d->hi - d->lo + 1;
        return range < c->grid_points ? (long)range : c->grid_points;
    }
    return c->grid_points;
}

static double grid_value(const dl_sampler_config *c, const dl_tune_param *d, long k)
{
    long n = dl_tune_sampler_grid_size(c, d);
    if (d->kind == DL_PARAM_CHOICE)
        return (double)k;
    if (n == 1)
        return d->lo;
    if (d->kind == DL_PARAM_INT && n == (long)(d->hi - d->lo + 1))
        return d->lo + (double)k;
    double a = d->log ? log(d->lo) : d->lo, b = d->log ? log(d->hi) : d->hi;
    double x = a + (b - a) * (double)k / (double)(n - 1);
    double v = d->log ? exp(x) : x;
    if (d->kind == DL_PARAM_INT)
        v = round(v);
    return v < d->lo ? d->lo : v > d->hi ? d->hi : v;
}

/* The parameters suggested so far in this trial are the lower digits of
 * the trial's grid slot (mixed radix, in suggestion order). */
static double sample_grid(const dl_sampler_config *c, const dl_tune_entry *t,
                          const dl_tune_param *d)
{
    long slot = t->grid_slot, radix = 1;
    for (int i = 0; i < t->nparams && radix < (1L << 40); i++)
        radix *= dl_tune_sampler_grid_size(c, &t->params[i]);
    long n = dl_tune_sampler_grid_size(c, d);
    return grid_value(c, d, (slot / radix) % n);
}

/* --- TPE ----------------------------------------------------------------------------------- */

typedef struct obs {
    double x;    /* internal-space value, or the choice index */
    int pruned;  /* ranks after every complete trial */
    double step; /* pruned: last step reached (further is better) */
    double loss; /* lower is better */
    int number;
    int row; /* multivariate: the observation's row of values */
    double weight;
} obs;

static int obs_rank_cmp(const void *pa, const void *pb)
{
    const obs *a = pa, *b = pb;
    if (a->pruned != b->pruned)
        return a->pruned - b->pruned;
    if (a->pruned && a->step != b->step)
        return a->step > b->step ? -1 : 1;
    if (a->loss != b->loss)
        return a->loss < b->loss ? -1 : 1;
    return a->number - b->number;
}

static int obs_number_cmp(const void *pa, const void *pb)
{
    const obs *a = pa, *b = pb;
    return a->number - b->number;
}

/* Weights in trial order: the newest RECENT_FULL_WEIGHT at 1, older ones
 * rising linearly from 1/m. */
static void set_weights(obs *o, int m)
{
    qsort(o, (size_t)m, sizeof *o, obs_number_cmp);
    int old = m - RECENT_FULL_WEIGHT;
    for (int i = 0; i < m; i++) {
        if (i >= old)
            o[i].weight = 1.0;
        else if (old == 1)
            o[i].weight = 1.0 / m;
        else
            o[i].weight = 1.0 / m + (1.0 - 1.0 / m) * (double)i / (double)(old - 1);
    }
}

typedef struct parzen {
    int k;
    double a, b;
    double *mu, *sigma, *logw, *logz; /* logz: log of the mass inside [a, b] */
    double *cum;                      /* cumulative normalised weights */
} parzen;

/* P(lo < Z < hi) for a standard normal, accurate in both tails. */
static double norm_mass(double lo, double hi)
{
    if (lo >= 0)
        return 0.5 * (erfc(lo * M_SQRT1_2) - erfc(hi * M_SQRT1_2));
    if (hi <= 0)
        return 0.5 * (erfc(-hi * M_SQRT1_2) - erfc(-lo * M_SQRT1_2));
    return 1.0 - 0.5 * erfc(hi * M_SQRT1_2) - 0.5 * erfc(-lo * M_SQRT1_2);
}

static double safe_log(double v) { return v > 1e-300 ? log(v) : -690.8; }

typedef struct mu_idx {
    double mu;
    int i;
} mu_idx;

static int mu_cmp(const void *pa, const void *pb)
{
    const mu_idx *a = pa, *b = pb;
    return a->mu < b->mu ? -1 : a->mu > b->mu ? 1 : a->i - b->i;
}

/* Builds the estimator from m observations plus the prior. Buffers come
 * from one allocation the caller frees with parzen_free. */
static int parzen_build(parzen *p, const obs *o, int m, double a, double b, double prior_weight)
{
    int k = m + 1;
    p->k = k;
    p->a = a;
    p->b = b;
    p->mu = malloc((size_t)k * 5 * sizeof(double));
    mu_idx *order = malloc((size_t)k * sizeof *order);
    if (!p->mu || !order) {
        free(p->mu);
        free(order);
        p->mu = NULL;
        return dl_error(DL_ENOMEM, "TPE: out of memory");
    }
    p->sigma = p->mu + k;
    p->logw = p->mu + 2 * k;
    p->logz = p->mu + 3 * k;
    p->cum = p->mu + 4 * k;
    double wsum = prior_weight;
    for (int i = 0; i < m; i++) {
        p->mu[i] = o[i].x;
        wsum += o[i].weight;
    }
    p->mu[m] = 0.5 * (a + b);
    for (int i = 0; i < k; i++)
        order[i] = (mu_idx){p->mu[i], i};
    qsort(order, (size_t)k, sizeof *order, mu_cmp);
    double width = b - a;
    double min_sigma = width / fmin(100.0, 1.0 + k), max_sigma = width;
    for (int j = 0; j < k; j++) {
        double left = j > 0 ? order[j].mu - order[j - 1].mu : 0;
        double right = j < k - 1 ? order[j + 1].mu - order[j].mu : 0;
        double sg = fmax(left, right);
        if (sg < min_sigma)
            sg = min_sigma;
        if (sg > max_sigma)
            sg = max_sigma;
        p->sigma[order[j].i] = sg;
    }
    p->sigma[m] = width; /* the prior */
    double c = 0;
    for (int i = 0; i < k; i++) {
        double w = (i < m ? o[i].weight : prior_weight) / wsum;
        p->logw[i] = safe_log(w);
        c += w;
        p->cum[i] = c;
        p->logz[i] =
            safe_log(norm_mass((a - p->mu[i]) / p->sigma[i], (b - p->mu[i]) / p->sigma[i]));
    }
    free(order);
    return DL_OK;
}

static void parzen_free(parzen *p)
{
    free(p->mu);
    p->mu = NULL;
}

static double parzen_sample(const parzen *p, draw *d)
{
    double u = draw_u01(d) * p->cum[p->k - 1];
    int i = 0;
    while (i < p->k - 1 && p->cum[i] <= u)
        i++;
    for (int tries = 0; tries < 64; tries++) {
        double x = p->mu[i] + p->sigma[i] * draw_normal(d);
        if (x >= p->a && x <= p->b)
            return x;
    }
    return p->a + draw_u01(d) * (p->b - p->a);
}

/* Component i's log weighted density at x, or for an int its log
 * weighted mass over the bin [lo, hi]. */
static double parzen_term(const parzen *p, int i, double x, int bin, double lo, double hi)
{
    if (bin)
        return p->logw[i] - p->logz[i] +
               safe_log(norm_mass((lo - p->mu[i]) / p->sigma[i], (hi - p->mu[i]) / p->sigma[i]));
    double z = (x - p->mu[i]) / p->sigma[i];
    return p->logw[i] - p->logz[i] - log(p->sigma[i]) - 0.5 * z * z -
           0.9189385332046727; /* log sqrt(2 pi) */
}

/* log of the mixture's density at x (or mass of the bin): a log-sum-exp
 * in two passes, so no scratch memory. */
static double parzen_log(const parzen *p, double x, int bin, double lo, double hi)
{
    double mx = -INFINITY, acc = 0;
    for (int i = 0; i < p->k; i++) {
        double t = parzen_term(p, i, x, bin, lo, hi);
        if (t > mx)
            mx = t;
    }
    for (int i = 0; i < p->k; i++)
        acc += exp(parzen_term(p, i, x, bin, lo, hi) - mx);
    return mx + log(acc);
}

/* The internal-space bin of int value v. */
static void int_bin(const dl_tune_param *d, double v, double a, double b, double *lo, double *hi)
{
    *lo = to_internal(d, v - 0.5);
    *hi = to_internal(d, v + 0.5);
    if (*lo < a)
        *lo = a;
    if (*hi > b)
        *hi = b;
}

static int tpe_numeric(const dl_sampler_config *c, const dl_tune_param *d, obs *o, int n,
                       int n_good, draw *dr, double *value)
{
    double a, b;
    bounds_of(d, &a, &b);
    parzen l = {0}, g = {0};
    int rc = parzen_build(&l, o, n_good, a, b, c->prior_weight);
    if (rc == DL_OK)
        rc = parzen_build(&g, o + n_good, n - n_good, a, b, c->prior_weight);
    if (rc < 0) {
        parzen_free(&l);
        return rc;
    }
    int bin = d->kind == DL_PARAM_INT;
    double best = -INFINITY, best_v = from_internal(d, 0.5 * (a + b));
    for (int e = 0; e < c->n_ei_candidates; e++) {
        double x = parzen_sample(&l, dr), v = from_internal(d, x), lo = 0, hi = 0;
        if (bin) {
            int_bin(d, v, a, b, &lo, &hi);
        } else {
            x = to_internal(d, v); /* after clamping */
        }
        double score = parzen_log(&l, x, bin, lo, hi) - parzen_log(&g, x, bin, lo, hi);
        if (score > best) {
            best = score;
            best_v = v;
        }
    }
    parzen_free(&l);
    parzen_free(&g);
    *value = best_v;
    return DL_OK;
}

static int tpe_choice(const dl_sampler_config *sc, const dl_tune_param *d, const obs *o, int n,
                      int n_good, draw *dr, double *value)
{
    int c = d->n_choices;
    double *wl = calloc((size_t)(2 * c), sizeof *wl);
    if (!wl)
        return dl_error(DL_ENOMEM, "TPE: out of memory");
    double *wg = wl + c, sl = 0, sg = 0;
    for (int i = 0; i < c; i++) {
        wl[i] = wg[i] = sc->prior_weight / c;
    }
    for (int i = 0; i < n; i++) {
        int k = (int)o[i].x;
        if (k < 0 || k >= c)
            continue;
        if (i < n_good)
            wl[k] += o[i].weight;
        else
            wg[k] += o[i].weight;
    }
    for (int i = 0; i < c; i++) {
        sl += wl[i];
        sg += wg[i];
    }
    double best = -INFINITY;
    int best_k = 0;
    for (int e = 0; e < sc->n_ei_candidates; e++) {
        double u = draw_u01(dr) * sl, acc = 0;
        int k = 0;
        while (k < c - 1 && (acc += wl[k]) <= u)
            k++;
        double score = log(wl[k] / sl) - log(wg[k] / sg);
        if (score > best) {
            best = score;
            best_k = k;
        }
    }
    free(wl);
    *value = best_k;
    return DL_OK;
}

/* Trial i of h is something a draw for trial `trial` learns from. */
static int observed(const dl_tune_history *h, int i, int trial)
{
    return i != trial && dl_tune_history_finished(&h->trials[i]);
}

/* The rank keys of finished trial u (a pruned one by its last report). */
static void obs_fill(obs *q, const dl_tune_history *h, const dl_tune_entry *u)
{
    q->number = u->number;
    q->pruned = u->state == DL_TRIAL_PRUNED;
    q->step = q->pruned && u->nint ? (double)u->steps[u->nint - 1] : -1;
    q->loss = dl_tune_history_loss(h->direction,
                                   q->pruned && u->nint ? u->values[u->nint - 1] : u->value);
}

/* Ranks the n observations best first, weights the good ones (returned:
 * min(ceil(gamma n), gamma_max), within [1, n - 1]) and the rest. */
static int split_good(const dl_sampler_config *c, obs *o, int n)
{
    qsort(o, (size_t)n, sizeof *o, obs_rank_cmp);
    int n_good = (int)ceil(c->gamma * n);
    if (n_good > c->gamma_max)
        n_good = c->gamma_max;
    if (n_good < 1)
        n_good = 1;
    if (n_good > n - 1)
        n_good = n - 1;
    set_weights(o, n_good);
    set_weights(o + n_good, n - n_good);
    return n_good;
}

static int sample_tpe(const dl_sampler_config *c, const dl_tune_history *h, int trial,
                      const dl_tune_param *d, draw *dr, double *value)
{
    obs *o = malloc((size_t)(h->ntrials + 1) * sizeof *o);
    if (!o)
        return dl_error(DL_ENOMEM, "TPE: out of memory");
    int n = 0;
    for (int i = 0; i < h->ntrials; i++) {
        const dl_tune_entry *u = &h->trials[i];
        if (!observed(h, i, trial))
            continue;
        const dl_tune_param *p = dl_tune_history_find(u->params, u->nparams, d->name);
        if (!p || !dl_tune_history_same_dist(p, d))
            continue;
        obs *q = &o[n++];
        q->x = d->kind == DL_PARAM_CHOICE ? p->value : to_internal(d, p->value);
        obs_fill(q, h, u);
    }
    if (n < c->n_startup || n < 2) {
        free(o);
        *value = sample_random(d, dr);
        return DL_OK;
    }
    int n_good = split_good(c, o, n);
    int rc = d->kind == DL_PARAM_CHOICE ? tpe_choice(c, d, o, n, n_good, dr, value)
                                        : tpe_numeric(c, d, o, n, n_good, dr, value);
    free(o);
    return rc;
}

/* --- multivariate TPE ----------------------------------------------------------------- */

/* The parameters every finished trial shares (same name and distribution),
 * in the first finished trial's order, drawn jointly: each finished trial
 * is one kernel over all of them, a product of truncated normals (width
 * JOINT_WIDTH m^(-1/(D+4)) of the range, clipped as above) and, for
 * choices, (1[c = c_i] + eps) / (1 + n eps) with eps = prior_weight / m.
 * The prior kernel is centred and as wide as each range (uniform over
 * choices). Candidates come from l; the best log l - log g wins. */
typedef struct jmix {
    int k, dims;
    double *mu, *sigma, *cst; /* k x dims: centre, width, log normaliser */
    double *logw, *cum;       /* k */
} jmix;

typedef struct jspace {
    int dims;
    const dl_tune_param **d; /* from the reference trial */
    double *a, *b;
} jspace;

static void jmix_free(jmix *x)
{
    free(x->mu);
    x->mu = NULL;
}

/* rows: m x dims values (internal space or choice index) of the group. */
static int jmix_build(jmix *x, const jspace *sp, const double *rows, const obs *o, int m,
                      double prior_weight)
{
    int k = m + 1, D = sp->dims;
    x->k = k;
    x->dims = D;
    x->mu = malloc(((size_t)3 * k * D + 2 * (size_t)k) * sizeof(double));
    if (!x->mu)
        return dl_error(DL_ENOMEM, "TPE: out of memory");
    x->sigma = x->mu + (size_t)k * D;
    x->cst = x->sigma + (size_t)k * D;
    x->logw = x->cst + (size_t)k * D;
    x->cum = x->logw + k;
    double wsum = prior_weight, c = 0;
    for (int i = 0; i < m; i++)
        wsum += o[i].weight;
    double sigma0 = JOINT_WIDTH * pow((double)(m > 1 ? m : 1), -1.0 / (D + 4));
    double eps = prior_weight / (m > 1 ? m : 1);
    for (int i = 0; i < k; i++) {
        double w = (i < m ? o[i].weight : prior_weight) / wsum;
        x->logw[i] = safe_log(w);
        c += w;
        x->cum[i] = c;
        for (int j = 0; j < D; j++) {
            const dl_tune_param *d = sp->d[j];
            double a = sp->a[j], b = sp->b[j], width = b - a;
            size_t at = (size_t)i * D + j;
            if (d->kind == DL_PARAM_CHOICE) {
                x->mu[at] = i < m ? rows[(size_t)o[i].row * D + j] : -1; /* -1: uniform */
                x->sigma[at] = i < m ? eps : 0;
                x->cst[at] = 0;
                continue;
            }
            double mu = i < m ? rows[(size_t)o[i].row * D + j] : 0.5 * (a + b);
            double sg = i < m ? sigma0 * width : width;
            double lo_clip = width / fmin(100.0, 1.0 + k);
            if (sg < lo_clip)
                sg = lo_clip;
            if (sg > width)
                sg = width;
            x->mu[at] = mu;
            x->sigma[at] = sg;
            double logz = safe_log(norm_mass((a - mu) / sg, (b - mu) / sg));
            x->cst[at] = d->kind == DL_PARAM_INT ? -logz : -logz - log(sg) - 0.9189385332046727;
        }
    }
    return DL_OK;
}

/* Log kernel of component i, dimension j, at value v (internal, or the
 * choice index; ints by their bin). */
static double jterm(const jmix *x, const jspace *sp, int i, int j, double v)
{
    const dl_tune_param *d = sp->d[j];
    size_t at = (size_t)i * x->dims + j;
    if (d->kind == DL_PARAM_CHOICE) {
        int n = d->n_choices;
        if (x->mu[at] < 0)
            return -log((double)n);
        double eps = x->sigma[at];
        return log(((x->mu[at] == v ? 1.0 : 0.0) + eps) / (1.0 + n * eps));
    }
    double mu = x->mu[at], sg = x->sigma[at];
    if (d->kind == DL_PARAM_INT) {
        double lo, hi, val = d->log ? exp(v) : v;
        int_bin(d, round(val), sp->a[j], sp->b[j], &lo, &hi);
        return x->cst[at] + safe_log(norm_mass((lo - mu) / sg, (hi - mu) / sg));
    }
    double z = (v - mu) / sg;
    return x->cst[at] - 0.5 * z * z;
}

static double jmix_log(const jmix *x, const jspace *sp, const double *v)
{
    double mx = -INFINITY, acc = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < x->k; i++) {
            double t = x->logw[i];
            for (int j = 0; j < x->dims; j++)
                t += jterm(x, sp, i, j, v[j]);
            if (pass == 0 && t > mx)
                mx = t;
            else if (pass == 1)
                acc += exp(t - mx);
        }
    return mx + log(acc);
}

static void jmix_sample(const jmix *x, const jspace *sp, draw *dr, double *v)
{
    double u = draw_u01(dr) * x->cum[x->k - 1];
    int i = 0;
    while (i < x->k - 1 && x->cum[i] <= u)
        i++;
    for (int j = 0; j < x->dims; j++) {
        const dl_tune_param *d = sp->d[j];
        size_t at = (size_t)i * x->dims + j;
        if (d->kind == DL_PARAM_CHOICE) {
            int n = d->n_choices;
            if (x->mu[at] < 0) {
                int c = (int)(draw_u01(dr) * n);
                v[j] = c < n ? c : n - 1;
            } else {
                double eps = x->sigma[at], r = draw_u01(dr) * (1.0 + n * eps);
                /* the own choice holds 1 + eps, every other eps */
                int c = (int)x->mu[at];
                if (r < 1.0 + eps)
                    v[j] = c;
                else {
                    int o = (int)((r - 1.0 - eps) / eps);
                    if (o >= n - 1)
                        o = n - 2;
                    v[j] = o >= c ? o + 1 : o;
                }
            }
            continue;
        }
        double xv = NAN;
        for (int tries = 0; tries < 64; tries++) {
            double t = x->mu[at] + x->sigma[at] * draw_normal(dr);
            if (t >= sp->a[j] && t <= sp->b[j]) {
                xv = t;
                break;
            }
        }
        if (isnan(xv))
            xv = sp->a[j] + draw_u01(dr) * (sp->b[j] - sp->a[j]);
        /* round ints and clamp, back in internal space */
        v[j] = d->kind == DL_PARAM_CHOICE ? xv : to_internal(d, from_internal(d, xv));
    }
}

/* The finished trials but `trial`: their count, and the first of them in *ref. */
static int finished_of(const dl_tune_history *h, int trial, const dl_tune_entry **ref)
{
    int n = 0;
    *ref = NULL;
    for (int i = 0; i < h->ntrials; i++) {
        if (!observed(h, i, trial))
            continue;
        if (!*ref)
            *ref = &h->trials[i];
        n++;
    }
    return n;
}

/* 1 when every finished trial but `trial` has d's name and distribution. */
static int shared_by_all(const dl_tune_history *h, int trial, const dl_tune_param *d)
{
    for (int i = 0; i < h->ntrials; i++) {
        const dl_tune_entry *u = &h->trials[i];
        if (!observed(h, i, trial))
            continue;
        const dl_tune_param *q = dl_tune_history_find(u->params, u->nparams, d->name);
        if (!q || !dl_tune_history_same_dist(q, d))
            return 0;
    }
    return 1;
}

/* The joint space: ref's parameters that every finished trial shares and
 * that can vary, in ref's order. sp's arrays hold ref->nparams. */
static void joint_space(const dl_tune_history *h, int trial, const dl_tune_entry *ref, jspace *sp)
{
    int D = 0;
    for (int j = 0; j < ref->nparams; j++) {
        const dl_tune_param *d = &ref->params[j];
        if (!shared_by_all(h, trial, d) || (d->kind != DL_PARAM_CHOICE && d->lo == d->hi))
            continue;
        sp->d[D] = d;
        if (d->kind == DL_PARAM_CHOICE)
            sp->a[D] = sp->b[D] = 0;
        else
            bounds_of(d, &sp->a[D], &sp->b[D]);
        D++;
    }
    sp->dims = D;
}

/* One observation and one row of sp->dims values (internal space, or the
 * choice index) per finished trial; returns their count. */
static int joint_rows(const dl_tune_history *h, int trial, const jspace *sp, obs *o, double *rows)
{
    int m = 0, D = sp->dims;
    for (int i = 0; i < h->ntrials; i++) {
        const dl_tune_entry *u = &h->trials[i];
        if (!observed(h, i, trial))
            continue;
        obs *q = &o[m];
        q->row = m;
        obs_fill(q, h, u);
        for (int j = 0; j < D; j++) {
            const dl_tune_param *p = dl_tune_history_find(u->params, u->nparams, sp->d[j]->name);
            double v = p->kind == DL_PARAM_CHOICE ? p->value : to_internal(p, p->value);
            rows[(size_t)m * D + j] = v;
        }
        m++;
    }
    return m;
}

/* The best of n_ei_candidates draws from l by log l - log g, into best_v
 * (v: scratch of sp->dims values). */
static void joint_best(const dl_sampler_config *c, uint64_t seed, int trial, const jmix *l,
                       const jmix *g, const jspace *sp, double *v, double *best_v)
{
    draw dr = {seed, 0x4a4f494e54ull << 16, (uint64_t)trial, 0}; /* "JOINT" */
    double best = -INFINITY;
    for (int e = 0; e < c->n_ei_candidates; e++) {
        jmix_sample(l, sp, &dr, v);
        double score = jmix_log(l, sp, v) - jmix_log(g, sp, v);
        if (score > best) {
            best = score;
            memcpy(best_v, v, (size_t)sp->dims * sizeof *v);
        }
    }
}

/* Keeps the drawn values in joint, back from internal space. */
static int joint_keep(dl_tune_joint *joint, const jspace *sp, const double *best_v, int ref)
{
    int D = sp->dims;
    joint->names = calloc((size_t)D, sizeof *joint->names);
    joint->values = malloc((size_t)D * sizeof *joint->values);
    if (!joint->names || !joint->values)
        return dl_error(DL_ENOMEM, "TPE: out of memory");
    joint->ref = ref;
    for (int j = 0; j < D; j++) {
        const dl_tune_param *d = sp->d[j];
        joint->names[j] = strdup(d->name);
        if (!joint->names[j])
            return dl_error(DL_ENOMEM, "TPE: out of memory");
        joint->values[j] = d->kind == DL_PARAM_CHOICE ? best_v[j] : from_internal(d, best_v[j]);
        joint->n++;
    }
    return DL_OK;
}

/* Makes trial's joint draw when the history allows one (else leaves it empty). */
static int joint_draw(const dl_sampler_config *c, uint64_t seed, const dl_tune_history *h,
                      int trial, dl_tune_joint *joint)
{
    joint->done = 1;
    const dl_tune_entry *ref;
    int n = finished_of(h, trial, &ref);
    if (!ref || n < c->n_startup || n < 2 || ref->nparams < 2)
        return DL_OK;
    int P = ref->nparams;
    jspace sp = {0, NULL, NULL, NULL};
    sp.d = malloc((size_t)P * sizeof *sp.d);
    sp.a = malloc((size_t)2 * P * sizeof *sp.a);
    obs *o = malloc((size_t)n * sizeof *o);
    double *rows = malloc((size_t)n * P * sizeof *rows);
    double *cand = malloc((size_t)2 * P * sizeof *cand);
    jmix l = {0}, g = {0};
    int rc = DL_OK;
    if (!sp.d || !sp.a || !o || !rows || !cand) {
        rc = dl_error(DL_ENOMEM, "TPE: out of memory");
        goto out;
    }
    sp.b = sp.a + P;
    joint_space(h, trial, ref, &sp);
    if (sp.dims < 2)
        goto out;
    int m = joint_rows(h, trial, &sp, o, rows);
    int n_good = split_good(c, o, m);
    if ((rc = jmix_build(&l, &sp, rows, o, n_good, c->prior_weight)) < 0 ||
        (rc = jmix_build(&g, &sp, rows, o + n_good, m - n_good, c->prior_weight)) < 0)
        goto out;
    joint_best(c, seed, trial, &l, &g, &sp, cand, cand + P);
    rc = joint_keep(joint, &sp, cand + P, ref->number);
out:
    jmix_free(&l);
    jmix_free(&g);
    free(sp.d);
    free(sp.a);
    free(o);
    free(rows);
    free(cand);
    return rc;
}

/* The joint draw's value for d, when it has one for this distribution. */
static int joint_value(const dl_tune_history *h, const dl_tune_joint *joint, const dl_tune_param *d,
                       double *value)
{
    for (int j = 0; j < joint->n; j++) {
        if (strcmp(joint->names[j], d->name) != 0)
            continue;
        const dl_tune_entry *ref = &h->trials[joint->ref];
        const dl_tune_param *p = dl_tune_history_find(ref->params, ref->nparams, d->name);
        if (!p || !dl_tune_history_same_dist(p, d))
            return 0;
        *value = joint->values[j];
        return 1;
    }
    return 0;
}

void dl_tune_sampler_joint_done(dl_tune_joint *j)
{
    for (int i = 0; i < j->n; i++)
        free(j->names[i]);
    free(j->names);
    free(j->values);
    memset(j, 0, sizeof *j);
}

/* --- the sampler ---------------------------------------------------------------------- */

int dl_tune_sampler_suggest(const dl_sampler_config *c, uint64_t seed, const dl_tune_history *h,
                            int trial, dl_tune_joint *joint, const dl_tune_param *d, double *value)
{
    if (d->kind != DL_PARAM_CHOICE && d->lo == d->hi) {
        *value = d->lo;
        return DL_OK;
    }
    if (d->kind == DL_PARAM_CHOICE && d->n_choices == 1) {
        *value = 0;
        return DL_OK;
    }
    draw dr = draw_for(seed, trial, d->name);
    switch (c->kind) {
    case DL_SAMPLER_GRID:
        if (h->trials[trial].grid_slot >= 0) {
            *value = sample_grid(c, &h->trials[trial], d);
            return DL_OK;
        }
        break;
    case DL_SAMPLER_TPE:
        if (c->multivariate && !joint->done)
            DL_TRY(joint_draw(c, seed, h, trial, joint));
        if (joint_value(h, joint, d, value))
            return DL_OK;
        return sample_tpe(c, h, trial, d, &dr, value);
    default: break;
    }
    *value = sample_random(d, &dr);
    return DL_OK;
}

dl_sampler_config dl_tune_sampler_defaults(int kind)
{
    dl_sampler_config c = {kind, 10, 24, 0.1, 25, 1.0, 10, 1};
    return c;
}

int dl_tune_sampler_parse(const char *name, dl_sampler_config *out)
{
    static const char *const names[] = {"random", "grid", "tpe"};
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, names[i]) == 0) {
            *out = dl_tune_sampler_defaults(i);
            return DL_OK;
        }
    return dl_error(DL_EINVAL, "sampler \"%s\": expected \"tpe\", \"random\" or \"grid\"",
                    name ? name : "(null)");
}
