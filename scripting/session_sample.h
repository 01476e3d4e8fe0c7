/* session_sample.h - text from a trained language model: a run's script, checkpoint and vocabulary, tokens drawn one at a time
 *
 * dlbench sample RUN and run.sample{...} at the workbench's Lua prompt both
 * come here. A language model is a run whose data is a token file (the
 * root attribute kind = "text", written by dlbench import --text), whose
 * model reads token ids with an Embedding and outputs [T, V] logits.
 */
#ifndef DL_SESSION_SAMPLE_H
#define DL_SESSION_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dl_sample_options {
    const char *run;        /* a run folder, its name or hash (as --resume) */
    const char *out_dir;    /* where run folders are (NULL: "runs") */
    const char *prompt;     /* the text to continue (NULL or "": a newline) */
    int tokens;             /* tokens to generate (>= 0) */
    double temperature;     /* logits divided by it; 0: always the likeliest token */
    int top_k;              /* draw among the k likeliest (0: all) */
    uint64_t seed;          /* the draws: dl_rng_uniform(seed, ., token, 0) */
    const char *checkpoint; /* "last" (NULL), "best", or a name given to checkpoint(NAME) */
    /* the text of each token as it is drawn (the prompt is not repeated) */
    void (*emit)(void *user, const char *text, size_t len);
    void *user;
} dl_sample_options;

/* Loads the run's script copy with its overrides, its checkpoint (on the
 * CPU backend) and the vocabulary of its data file, encodes the prompt and
 * generates o->tokens tokens autoregressively: the context is the last T
 * tokens (T: the model's input length), each drawn from the softmax of the
 * logits at the context's last position (temperature, top-k). Errors:
 * DL_EINVAL naming the run for one that is not a language model (data not
 * text, no Embedding, output not [T, V]), a prompt character outside the
 * vocabulary (named), bad options or a missing checkpoint; the loaders'
 * own errors otherwise. Tokens already emitted stay emitted. */
int dl_session_sample(const dl_sample_options *o);

typedef struct dl_session dl_session; /* scripting/session.h */

/* The same from a live training's model as it is now (run.sample at the
 * workbench's prompt: between two steps, on the training thread), on the
 * training's own device; o->run, out_dir and checkpoint are not read. The
 * vocabulary comes from the experiment's data file. */
int dl_session_sample_live(dl_session *s, const dl_sample_options *o);

#endif
