/* session_predict.h - a trained model's predictions for new inputs: class, probability and top-k per sample, or a language model's continuation of a prompt
 *
 * dlbench predict RUN INPUT comes here. INPUT is an HDF5 file's group (as
 * dlbench import writes it: x and y, y unused) or a CSV file of features
 * (as the CSV importer reads them, engine/data/import_csv.h), or a PNG or
 * JPEG file or a folder of them (engine/data/image_files.h: scaled and
 * centre-cropped to the run's [C, H, W] as dlbench import --size does),
 * read with the run's normalisation (its source's scale, mean and std),
 * the rows then naming their files; for a language
 * model (dl.data.text) INPUT is a prompt, continued as dlbench sample does.
 */
#ifndef DL_SESSION_PREDICT_H
#define DL_SESSION_PREDICT_H

#include <stdio.h>

typedef struct dl_predict_options {
    const char *run;        /* a run folder, its name or hash (as --resume) */
    const char *out_dir;    /* where run folders are (NULL: "runs") */
    const char *checkpoint; /* "last" (NULL), "best", or a name given to checkpoint(NAME) */
    const char *input;      /* FILE.h5[:GROUP] (GROUP default: the run's validation group),
                             * FILE.csv, IMAGE.png|.jpg, a folder of images, or a
                             * language model's prompt */
    const char *label;      /* CSV: a label column to leave out (NULL: every column a feature) */
    int top_k;              /* classes listed per sample (>= 1) */
    int logits;             /* also write the model's raw outputs */
    int jsonl;              /* JSON lines; else CSV with a header row */
    int tokens;             /* language model: tokens to generate */
    FILE *out;              /* where the rows go */
} dl_predict_options;

/* Writes one row per input sample to o->out: CSV "index,class,name,
 * probability" then "class_J,name_J,probability_J" for J = 2..top_k and,
 * with logits, "logit_0.."; JSON lines {"index", "class", "name",
 * "probability", "top": [{"class", "name", "probability"}...], "logits"}.
 * Image input adds "file" after "index" (CSV column and JSON field).
 * A model whose loss is not cross-entropy writes only its outputs.
 * Errors: those of dl_run_model_open, an input that does not fit the model
 * (DL_ESHAPE naming both shapes), a CSV or HDF5 input that cannot be read
 * (DL_EINVAL / DL_EIO naming it), a corrupt image, an image whose name's
 * suffix is not its format, a folder without images, image input to a run
 * whose samples are not [C, H, W] u8 images (DL_EINVAL naming it). Rows already written stay in o->out: the caller
 * writes to a temporary file and renames it only on success. */
int dl_session_predict(const dl_predict_options *o);

#endif
