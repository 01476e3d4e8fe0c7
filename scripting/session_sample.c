/* session_sample.c - text from a trained language model: the run's script, checkpoint and vocabulary, tokens drawn one at a time */
#include "scripting/session_sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/data/text.h"
#include "engine/base/rng.h"
#include "scripting/run_model.h"
#include "scripting/script.h"
#include "scripting/session.h"

#define SAMPLE_STREAM 0x73616d70ULL /* "samp": the draws' RNG stream */

typedef struct sampler {
    const dl_sample_options *o;
    dl_run_model run; /* dlbench sample: the run opened (unused live) */
    const char *run_dir;
    const char *data_path;
    uint64_t seed; /* the run's */
    dl_model *m;   /* run.model, or the live training's (borrowed) */
    int T, V;
    dl_text_vocab vocab; /* the token file's, through engine/data/text.h */
    /* the token history: prompt, then what was drawn */
    int32_t *ids;
    size_t nids, cap;
    float *probs; /* [V] */
    float *host;  /* [max(T, V)]: the input ids, the logits */
} sampler;

/* --- the vocabulary --------------------------------------------------------- */

static int read_vocab(sampler *s)
{
    int rc = dl_text_vocab_read(&s->vocab, s->data_path);
    return rc < 0 ? dl_error(rc, "sample %s: %s", s->run_dir, dl_error_message()) : DL_OK;
}

static int push_id(sampler *s, int32_t id)
{
    if (s->nids == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        int32_t *n = realloc(s->ids, cap * sizeof *n);
        if (!n)
            return dl_error(DL_ENOMEM, "out of memory");
        s->ids = n;
        s->cap = cap;
    }
    s->ids[s->nids++] = id;
    return DL_OK;
}

/* The prompt as token ids; an empty prompt starts from a newline (or id 0
 * where the vocabulary has none). */
static int encode_prompt(sampler *s, const char *prompt)
{
    int32_t nl;
    if (!prompt || !prompt[0])
        return push_id(s, dl_text_vocab_encode(&s->vocab, "\n", 1, &nl, 1) == 1 ? nl : 0);
    size_t len = strlen(prompt);
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    if (!ids)
        return dl_error(DL_ENOMEM, "out of memory");
    long n = dl_text_vocab_encode(&s->vocab, prompt, len, ids, len);
    int rc = n < 0 ? dl_error((int)n, "prompt: %s of %s", dl_error_message(), s->data_path) : DL_OK;
    for (long i = 0; rc == DL_OK && i < n; i++)
        rc = push_id(s, ids[i]);
    free(ids);
    return rc;
}

/* --- the model --------------------------------------------------------------- */

/* The model of a language model: an Embedding reads [T] ids, the output is
 * [T, V] with V covering the vocabulary. */
static int check_lm(sampler *s)
{
    int emb = 0;
    for (int i = 0; i < dl_model_num_params(s->m) && !emb; i++)
        emb = !strcmp(dl_model_param(s->m, i)->layer->vt->kind, "Embedding");
    const dl_shape *in = dl_model_input_shape(s->m), *out = dl_model_output_shape(s->m);
    char a[64];
    if (!emb)
        return dl_error(DL_EINVAL,
                        "sample %s: not a language model: the model has no Embedding to read "
                        "token ids",
                        s->run_dir);
    if (in->ndim != 1 || out->ndim != 2 || out->dim[0] != in->dim[0])
        return dl_error(DL_EINVAL,
                        "sample %s: not a language model: it outputs %s, not [T, V] logits "
                        "for its %lld input tokens",
                        s->run_dir, dl_shape_format(out, a, sizeof a), (long long)in->dim[0]);
    s->T = (int)in->dim[0];
    s->V = (int)out->dim[1];
    if (s->V < s->vocab.size)
        return dl_error(DL_EINVAL, "sample %s: the model outputs %d classes, the vocabulary has %d",
                        s->run_dir, s->V, s->vocab.size);
    return DL_OK;
}

/* --- drawing ----------------------------------------------------------------- */

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The next token from logits z [V] (only the vocabulary's ids): greedy at
 * temperature 0, else a draw among the top_k likeliest. */
static int draw(sampler *s, const float *z, long i)
{
    int n = s->vocab.size, best = 0;
    for (int k = 1; k < n; k++)
        if (z[k] > z[best])
            best = k;
    if (!(s->o->temperature > 0))
        return best;
    float cut = -INFINITY;
    if (s->o->top_k > 0 && s->o->top_k < n) {
        memcpy(s->probs, z, (size_t)n * sizeof *z);
        qsort(s->probs, (size_t)n, sizeof *s->probs, cmp_desc);
        cut = s->probs[s->o->top_k - 1];
    }
    double sum = 0, t = s->o->temperature;
    for (int k = 0; k < n; k++)
        sum += s->probs[k] = z[k] >= cut ? (float)exp((z[k] - z[best]) / t) : 0.0f;
    double u = dl_rng_uniform(s->o->seed, SAMPLE_STREAM, (uint64_t)i, 0) * sum, acc = 0;
    for (int k = 0; k < n; k++)
        if (s->probs[k] > 0 && (acc += s->probs[k]) > u)
            return k;
    return best;
}

/* One token: the last T ids at positions 0.., the logits at the last one
 * (a causal model sees no further; the positions start at 0 as in
 * training), drawn and emitted. */
static int next_token(sampler *s, long i)
{
    size_t n = s->nids < (size_t)s->T ? s->nids : (size_t)s->T;
    float *x = s->host; /* [T] in, then the [V] logits of the last position */
    for (int k = 0; k < s->T; k++)
        x[k] = (size_t)k < n ? (float)s->ids[s->nids - n + (size_t)k] : 0.0f;
    dl_backend *be = dl_model_backend(s->m);
    DL_TRY(be->ops->to_device(be, dl_model_input(s->m), x, (size_t)s->T * sizeof *x));
    dl_pass p;
    dl_model_pass(s->m, &p, 1, 0, DL_PREC_F32, s->seed, 0);
    DL_TRY(dl_model_forward(s->m, &p));
    DL_TRY(be->ops->to_host(be, x, dl_model_output(s->m) + (n - 1) * (size_t)s->V,
                            (size_t)s->V * sizeof *x));
    int id = draw(s, x, i);
    DL_TRY(push_id(s, id));
    char text[4];
    int len = dl_text_vocab_decode(&s->vocab, id, text);
    if (s->o->emit && len > 0)
        s->o->emit(s->o->user, text, (size_t)len);
    return DL_OK;
}

static void sampler_done(sampler *s)
{
    dl_run_model_close(&s->run);
    dl_text_vocab_done(&s->vocab);
    free(s->ids);
    free(s->probs);
    free(s->host);
}

static int check_options(const dl_sample_options *o)
{
    if (o->tokens < 0 || !(o->temperature >= 0) || o->top_k < 0)
        return dl_error(DL_EINVAL,
                        "sample: tokens (%d) and top_k (%d) must be >= 0, temperature "
                        "(%g) a number >= 0",
                        o->tokens, o->top_k, o->temperature);
    return DL_OK;
}

/* The prompt encoded, then o->tokens tokens drawn and emitted. */
static int generate(sampler *s)
{
    s->probs = malloc((size_t)s->V * sizeof *s->probs);
    s->host = malloc((size_t)(s->T > s->V ? s->T : s->V) * sizeof *s->host);
    if (!s->probs || !s->host)
        return dl_error(DL_ENOMEM, "out of memory");
    DL_TRY(encode_prompt(s, s->o->prompt));
    for (long i = 0; i < s->o->tokens; i++)
        DL_TRY(next_token(s, i));
    return DL_OK;
}

/* The run's data must be a token file (its vocabulary decodes the ids). */
static int open_run(sampler *s)
{
    const dl_sample_options *o = s->o;
    dl_run_model_options ro = {o->run, o->out_dir, o->checkpoint, "sample", 1, NULL};
    DL_TRY(dl_run_model_open(&s->run, &ro));
    s->run_dir = s->run.dir;
    s->data_path = s->run.data_path;
    s->seed = s->run.seed;
    s->m = s->run.model;
    if (strcmp(s->run.data_kind, "text"))
        return dl_error(DL_EINVAL,
                        "sample %s: not a language model: its data is %s, not a token file "
                        "(dl.data.text)",
                        s->run_dir, s->run.data_kind[0] ? s->run.data_kind : "unnamed");
    DL_TRY(read_vocab(s));
    return check_lm(s);
}

static int sample_steps(sampler *s)
{
    DL_TRY(open_run(s));
    return generate(s);
}

int dl_session_sample(const dl_sample_options *o)
{
    sampler s;
    memset(&s, 0, sizeof s);
    s.o = o;
    int rc = check_options(o);
    if (rc == DL_OK)
        rc = sample_steps(&s);
    sampler_done(&s);
    return rc;
}

int dl_session_sample_live(dl_session *ses, const dl_sample_options *o)
{
    sampler s;
    memset(&s, 0, sizeof s);
    s.o = o;
    dl_trainer *t = dl_session_trainer(ses);
    dl_script *sc = dl_session_script(ses);
    int rc = t && sc ? check_options(o) : dl_error(DL_EINVAL, "run.sample: no live training");
    if (rc == DL_OK) {
        s.run_dir = dl_session_run_dir(ses) ? dl_session_run_dir(ses) : "this training";
        s.data_path = dl_script_experiment(sc)->data.path;
        s.seed = dl_trainer_config_of(t)->seed;
        rc = read_vocab(&s);
    }
    if (rc == DL_OK) {
        s.m = dl_trainer_model(t); /* borrowed: its buffers hold no state between steps */
        rc = check_lm(&s);
        if (rc == DL_OK)
            rc = generate(&s);
        s.m = NULL;
    }
    sampler_done(&s);
    return rc;
}
