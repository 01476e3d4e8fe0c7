/* session_sample.c - text from a trained language model: the run's script, checkpoint and vocabulary, tokens drawn one at a time */
#include "scripting/session_sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/data/text.h"
#include "engine/base/rng.h"
#include "engine/core/backend.h"
#include "engine/nn/optim.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog.h"
#include "engine/train/checkpoint.h"
#include "scripting/script.h"
#include "scripting/session.h"

#define SAMPLE_STREAM 0x73616d70ULL /* "samp": the draws' RNG stream */

typedef struct sampler {
    const dl_sample_options *o;
    char run_dir[1024];
    char data_path[1024];
    char **ovs; /* the run's k=v overrides */
    int nov;
    uint64_t seed; /* the run's */
    dl_script *script;
    dl_model *m;
    dl_source *train, *val;
    int T, V;
    dl_text_vocab vocab; /* the token file's, through engine/data/text.h */
    /* the token history: prompt, then what was drawn */
    int32_t *ids;
    size_t nids, cap;
    float *probs; /* [V] */
    float *host;  /* [max(T, V)]: the input ids, the logits */
} sampler;

/* --- the run's configuration ---------------------------------------------- */

static int read_overrides(sampler *s, const cJSON *c)
{
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(c, "overrides");
    int n = cJSON_GetArraySize(ov);
    s->ovs = calloc((size_t)n + 1, sizeof *s->ovs);
    if (!s->ovs)
        return dl_error(DL_ENOMEM, "out of memory");
    for (const cJSON *x = ov ? ov->child : NULL; x; x = x->next)
        if (cJSON_IsString(x) && (s->ovs[s->nov] = strdup(x->valuestring)))
            s->nov++;
    return DL_OK;
}

/* config.json: the overrides, the seed and the data file (a token file). */
static int read_config(sampler *s)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/" DL_RUN_FILE_CONFIG, s->run_dir);
    cJSON *c = dl_runlog_read_json(path);
    if (!c)
        return dl_error(DL_EINVAL, "sample %s: %s", s->o->run, dl_error_message());
    int rc = read_overrides(s, c);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(c, "seed");
    if (cJSON_IsNumber(seed) && seed->valuedouble >= 0 && seed->valuedouble < 0x1p63)
        s->seed = (uint64_t)seed->valuedouble;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(c, "data");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(data, "kind");
    const cJSON *dpath = cJSON_GetObjectItemCaseSensitive(data, "path");
    if (rc == DL_OK &&
        !(cJSON_IsString(kind) && !strcmp(kind->valuestring, "text") && cJSON_IsString(dpath)))
        rc = dl_error(DL_EINVAL,
                      "sample %s: not a language model: its data is %s, not a token file "
                      "(dl.data.text)",
                      s->run_dir, cJSON_IsString(kind) ? kind->valuestring : "unnamed");
    if (rc == DL_OK)
        snprintf(s->data_path, sizeof s->data_path, "%s", dpath->valuestring);
    cJSON_Delete(c);
    return rc;
}

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

static int checkpoint_path(const sampler *s, char *path, size_t size)
{
    const char *c = s->o->checkpoint;
    if (!c || !strcmp(c, "last"))
        snprintf(path, size, "%s/" DL_RUN_FILE_CHECKPOINT, s->run_dir);
    else if (!strcmp(c, "best"))
        snprintf(path, size, "%s/" DL_RUN_FILE_CHECKPOINT_BEST, s->run_dir);
    else if (strchr(c, '/') || c[0] == '.')
        return dl_error(DL_EINVAL, "--checkpoint %s: expected best, last or a checkpoint name", c);
    else
        snprintf(path, size, "%s/" DL_RUN_FILE_CHECKPOINT_TAG, s->run_dir, c);
    return DL_OK;
}

/* The script copy with the run's overrides, the model on the data's
 * sample shape, its checkpoint on the CPU backend. */
static int load_model(sampler *s)
{
    char script[1200], fp[512], path[1200];
    snprintf(script, sizeof script, "%s/" DL_RUN_FILE_SCRIPT, s->run_dir);
    dl_script_options so = {script, s->ovs, s->nov, 0};
    DL_TRY(dl_script_load_study(&s->script, &so, NULL, 0));
    dl_experiment *e = dl_script_experiment(s->script);
    dl_backend *cpu = dl_backend_cpu(0);
    DL_TRY(dl_script_open_data(s->script, 1, s->seed, cpu, &s->train, &s->val, fp, sizeof fp));
    DL_TRY(dl_model_create(&s->m, dl_script_take_model(s->script), &s->train->info.sample));
    DL_TRY(check_lm(s));
    DL_TRY(checkpoint_path(s, path, sizeof path));
    DL_TRY(dl_model_init_state(s->m, cpu, dl_optim_moments(&e->optim), s->seed));
    dl_checkpoint_info info;
    DL_TRY(dl_checkpoint_load(path, s->m, &info));
    return dl_model_plan(s->m, 1);
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
    for (int i = 0; i < s->nov; i++)
        free(s->ovs[i]);
    free(s->ovs);
    dl_model_destroy(s->m);
    dl_source_destroy(s->train);
    dl_source_destroy(s->val);
    dl_script_destroy(s->script);
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

static int sample_steps(sampler *s)
{
    const dl_sample_options *o = s->o;
    DL_TRY(
        dl_runlog_resolve(o->out_dir ? o->out_dir : "runs", o->run, s->run_dir, sizeof s->run_dir));
    DL_TRY(read_config(s));
    DL_TRY(read_vocab(s));
    DL_TRY(load_model(s));
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
        snprintf(s.run_dir, sizeof s.run_dir, "%s",
                 dl_session_run_dir(ses) ? dl_session_run_dir(ses) : "this training");
        snprintf(s.data_path, sizeof s.data_path, "%s", dl_script_experiment(sc)->data.path);
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
