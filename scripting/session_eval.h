/* session_eval.h - a trained model measured on a data set: loss, accuracy, the confusion matrix; perplexity and bits per character for a language model
 *
 * dlbench eval RUN comes here. The run's script copy, checkpoint and data
 * description are opened by scripting/run_model.h (on the CPU backend, at
 * the run's batch size); loss and accuracy come from the trainer's own
 * evaluation (engine/train: what training logged as val_loss / val_acc),
 * the confusion matrix from a second pass over the model's outputs.
 */
#ifndef DL_SESSION_EVAL_H
#define DL_SESSION_EVAL_H

#include <stddef.h>

typedef struct dl_eval_options {
    const char *run;        /* a run folder, its name or hash (as --resume) */
    const char *out_dir;    /* where run folders are (NULL: "runs") */
    const char *checkpoint; /* "last" (NULL), "best", or a name given to checkpoint(NAME) */
    const char *data;       /* FILE[:GROUP] (NULL: the run's validation split) */
} dl_eval_options;

typedef struct dl_eval_report {
    char run[1024];        /* the run folder */
    char checkpoint[1200]; /* the checkpoint file */
    char data[1200];       /* "FILE:GROUP" evaluated ("" for generated data: its name) */
    long step;             /* the checkpoint's optimizer step and epoch */
    int epoch;
    const char *loss_name; /* "CrossEntropy", ... */
    long samples;          /* rows evaluated */
    double loss;           /* mean per sample (per token for a language model) */
    double acc;            /* NaN where the loss has none (MSE) */
    int lm;                /* a language model: per-token loss, then */
    double ppl, bpc;       /* exp(loss) and loss / ln 2 (bits per character or byte) */
    int classes;           /* a classifier: K, the confusion matrix's side (else 0) */
    char (*names)[64];     /* [classes]: the data's class names, or "0", "1"... */
    int named;             /* the names came from the data file */
    long *confusion;       /* [classes * classes]: row = true class, column = predicted */
} dl_eval_report;

/* Evaluates run o->run's checkpoint on its validation split (or o->data)
 * into r (zeroed first; release it with dl_eval_report_done). Errors:
 * those of dl_run_model_open (no such run, no checkpoint, another model's
 * checkpoint, a damaged file: DL_EINVAL / DL_EIO naming the file), a run
 * without a validation split and no --data (DL_EINVAL), data that does not
 * fit the model (DL_ESHAPE naming both shapes). */
int dl_session_eval_run(const dl_eval_options *o, dl_eval_report *r);

/* Frees what dl_session_eval_run allocated in r (r may be zeroed). */
void dl_eval_report_done(dl_eval_report *r);

/* Precision and recall of class k from r's confusion matrix (NaN when the
 * class was never predicted / never present), and its support. */
void dl_eval_report_class(const dl_eval_report *r, int k, double *precision, double *recall,
                          long *support);

#endif
