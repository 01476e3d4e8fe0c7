/* table.c - the one command table: names, functions, synopses, options; --help is written from it */
#include <stdio.h>
#include <string.h>

#include "engine/base/error.h"
#include "engine/base/version.h"
#include "tui/cmd/commands.h"

/* Subcommands live in their own files; a build without one of them still
 * links and says so (weak references: the table holds NULL). */
#pragma weak dl_cmd_import
#pragma weak dl_cmd_run
#pragma weak dl_cmd_runs
#pragma weak dl_cmd_note
#pragma weak dl_cmd_sample
#pragma weak dl_cmd_export
#pragma weak dl_cmd_eval
#pragma weak dl_cmd_predict
#pragma weak dl_cmd_watch
#pragma weak dl_cmd_tune
#pragma weak dl_cmd_profile
#pragma weak dl_cmd_advise
#pragma weak dl_cmd_workbench
#pragma weak dl_cmd_export_metrics
#pragma weak dl_cmd_tag

#define HELP                                                                                       \
    {                                                                                              \
        DL_OPT_HELP, "--help", "-h", NULL, "show this help and exit", 0                            \
    }
#define END                                                                                        \
    {                                                                                              \
        0, NULL, NULL, NULL, NULL, 0                                                               \
    }
#define DEVICE(what)                                                                               \
    {                                                                                              \
        DL_OPT_DEVICE, "--device", NULL, "cpu|cuda|auto", what, 0                                  \
    }
#define PRICE(what)                                                                                \
    {                                                                                              \
        DL_OPT_PRICE, "--price-per-hour", NULL, "P", what, 0                                       \
    }

static const dl_opt workbench_opts[] = {
    {0, "SCRIPT", NULL, NULL, "an experiment script (default: scripts/fmnist_mlp.lua)", 0},
    {0, "k=v", NULL, NULL, "override a hyperparameter the script declares", 0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders go (default: runs)", 0},
    DEVICE("train on cpu, cuda or auto (default: the script's choice)"),
    {DL_OPT_SEED, "--seed", NULL, "N", "the random seed (default: the script's, else 0)", 0},
    {DL_OPT_START, "--start", NULL, NULL, "start the training at once (else press r)", 0},
    {DL_OPT_FORCE, "--force", NULL, NULL, "train even if a finished run has the same configuration",
     0},
    PRICE("what the machine costs an hour (default: $DLBENCH_PRICE_PER_HOUR): cost in the "
          "status bar and summary.json"),
    {DL_OPT_NO_MOUSE, "--no-mouse", NULL, NULL,
     "leave the mouse to the terminal (no click to select, no wheel scrolling)", 0},
    HELP,
    END};

#define SET                                                                                        \
    {                                                                                              \
        DL_OPT_SET, "--set", NULL, "FIELD=VALUE",                                                  \
            "set the experiment's own field, declared as a hyperparameter or not (repeat): "       \
            "batch, accumulate, epochs, max_steps, precision, lr, workers, prefetch, mode, "       \
            "val_every, val_limit, early_stopping (patience), log_every",                          \
            0                                                                                      \
    }

static const dl_opt run_opts[] = {
    {0, "k=v", NULL, NULL, "override a hyperparameter the script declares with dl.hparams", 0},
    SET,
    {DL_OPT_TARGET, "--target", NULL, "METRIC=VALUE",
     "after each epoch, project the time (and cost, with --price-per-hour) to reach it from "
     "the curve so far, with an interval; warn early when the planned epochs will not",
     0},
    DEVICE("run on cpu, cuda or auto (default: the script's choice)"),
    {DL_OPT_SEED, "--seed", NULL, "N", "the random seed (default: the script's, else 0)", 0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders go (default: runs)", 0},
    {DL_OPT_RESUME, "--resume", NULL, "RUN",
     "continue RUN (folder, name or hash) from its checkpoint", 0},
    {DL_OPT_FORCE, "--force", NULL, NULL, "run even if a finished run has the same configuration",
     0},
    {DL_OPT_STOP_AFTER, "--stop-after", NULL, "N",
     "stop cleanly after N optimizer steps (checkpoint, \"stopped\")", 0},
    PRICE("the machine's price per hour (default: $DLBENCH_PRICE_PER_HOUR): cost in "
          "summary.json and at the end"),
    {DL_OPT_QUIET, "--quiet", "-q", NULL, "no progress lines, only the end summary", 0},
    {DL_OPT_HPARAMS, "--hparams", NULL, NULL,
     "print the hyperparameters SCRIPT declares (NAME=VALUE, one a line) and exit", 0},
    {DL_OPT_CHECK_PARITY, "--check-parity", NULL, "N",
     "train nothing: compare N steps on the run's device and on another (see below)", 0},
    {DL_OPT_PARITY_DEVICE, "--parity-device", NULL, "DEV",
     "the other device: cuda, cpu, or cpu:T (default cuda from the CPU, cpu from a GPU)", 0},
    {DL_OPT_PARITY_TOL, "--parity-tol", NULL, "X",
     "the largest relative difference allowed (default 1e-3 fp32, 1e-2 fp16, 2e-2 bf16)", 0},
    HELP,
    END};

static const dl_opt watch_opts[] = {
    {0, "RUN", NULL, NULL, "a run folder, its name or a unique part of it (default: the newest)",
     0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders are (default: runs)", 0},
    {DL_OPT_STUDY, "--study", NULL, "NAME|auto",
     "open on the trials screen (F4) of study NAME in DIR/studies/ (auto: the newest)", 0},
    {DL_OPT_NO_MOUSE, "--no-mouse", NULL, NULL,
     "leave the mouse to the terminal (no click to select, no wheel scrolling)", 0},
    HELP,
    END};

static const dl_opt tune_opts[] = {
    {0, "SCRIPT", NULL, NULL, "returns dl.study{...}: its objective(trial) returns an experiment",
     0},
    {0, "k=v", NULL, NULL, "override a hyperparameter the script declares with dl.hparams", 0},
    {DL_OPT_TRIALS, "--trials", NULL, "N",
     "the study's total number of trials (default: the "
     "script's)",
     0},
    {DL_OPT_JOBS, "--jobs", NULL, "N", "run N worker processes sharing the study (default 1)", 0},
    {DL_OPT_SEED, "--seed", NULL, "N", "the sampler's seed (default: the script's, else 0)", 0},
    {DL_OPT_OUT, "--out", NULL, "DIR",
     "run folders go to DIR, the study to DIR/studies/NAME (default: runs)", 0},
    DEVICE("train trials on cpu, cuda or auto (default: the script's choice)"),
    {DL_OPT_REPORT, "--report", NULL, NULL,
     "print the best trial, the trials and the command that reproduces the best run", 0},
    {DL_OPT_QUIET, "--quiet", "-q", NULL, "no updating status line", 0},
    {DL_OPT_WORKER, "--worker", NULL, "K", "internal: worker K of --jobs", 1},
    HELP,
    END};

static const dl_opt runs_opts[] = {
    {0, "KEY, k", NULL, NULL,
     "a column (status, name, device, precision, duration), a "
     "hyperparameter (lr) or a metric (val_acc: its best value)",
     0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders are (default: runs)", 0},
    {DL_OPT_JSON, "--json", NULL, NULL, "print the runs' config and summary as a JSON array", 0},
    {DL_OPT_SORT, "--sort", NULL, "KEY", "sort by KEY (default: by folder name, oldest first)", 0},
    {DL_OPT_DESC, "--desc", NULL, NULL, "sort the other way round", 0},
    {DL_OPT_FILTER, "--filter", NULL, "k=v",
     "only runs whose k is v (repeat for more); tag=T: runs tagged T", 0},
    {DL_OPT_CSV, "--csv", NULL, NULL,
     "print the runs as CSV: status, totals, tags, every hyperparameter, final and best metrics",
     0},
    HELP,
    END};

static const dl_opt export_metrics_opts[] = {
    {0, "RUN...", NULL, NULL, "run folders, their names or unique parts of them", 0},
    {DL_OPT_CSV, "--csv", NULL, NULL, "CSV with a header line (the default)", 0},
    {DL_OPT_JSONL, "--jsonl", NULL, NULL, "one JSON object a line", 0},
    {DL_OPT_OUTPUT, "--output", "-o", "FILE", "write FILE (whole or not at all) instead of stdout",
     0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders are (default: runs)", 0},
    HELP,
    END};

static const dl_opt tag_opts[] = {
    {0, "RUN", NULL, NULL, "a run folder, its name or a unique part of it", 0},
    {0, "TAG...", NULL, NULL, "tags: letters, digits and _ . : + - (no spaces)", 0},
    {DL_OPT_REMOVE, "--remove", NULL, NULL, "take the tags away instead", 0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders are (default: runs)", 0},
    HELP,
    END};

static const dl_opt note_opts[] = {
    {0, "RUN", NULL, NULL, "a run folder, its name or a unique part of it", 0},
    {0, "TEXT", NULL, NULL, "the note, quoted as one argument", 0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders are (default: runs)", 0},
    HELP,
    END};

static const dl_opt sample_opts[] = {
    {0, "RUN", NULL, NULL, "a language model's run folder, its name or a unique part of it", 0},
    {DL_OPT_PROMPT, "--prompt", NULL, "TEXT", "the text to continue (default: a newline)", 0},
    {DL_OPT_TOKENS, "--tokens", NULL, "N", "how many tokens to generate (default: 200)", 0},
    {DL_OPT_TEMPERATURE, "--temperature", NULL, "X",
     "divide the logits by X (default: 1; 0: always the likeliest token)", 0},
    {DL_OPT_TOP_K, "--top-k", NULL, "K", "draw among the K likeliest tokens (default: 0, all)", 0},
    {DL_OPT_SEED, "--seed", NULL, "N",
     "the draws' seed: the same seed gives the same text (default 0)", 0},
    {DL_OPT_CHECKPOINT, "--checkpoint", NULL, "best|last|NAME",
     "which checkpoint of the run (default: last)", 0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders are (default: runs)", 0},
    HELP,
    END};

static const dl_opt export_opts[] = {
    {0, "RUN", NULL, NULL, "a run folder, its name or a unique part of it", 0},
    {DL_OPT_FORMAT, "--format", NULL, "onnx|safetensors",
     "ONNX (opset 17: graph and weights) or safetensors (the tensors only)", 0},
    {DL_OPT_OUTPUT, "--output", "-o", "FILE",
     "where to write (default: RUN's name with .onnx or .safetensors, here)", 0},
    {DL_OPT_CHECKPOINT, "--checkpoint", NULL, "best|last|NAME",
     "which checkpoint of the run (default: last)", 0},
    {DL_OPT_NAMES, "--names", NULL, "torch|dlbench",
     "tensor names: the equivalent torch.nn.Sequential's state_dict() names (0.weight, "
     "default) or the engine's (Linear1.weight)",
     0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders are (default: runs)", 0},
    HELP,
    END};

static const dl_opt eval_opts[] = {
    {0, "RUN", NULL, NULL, "a run folder, its name or a unique part of it", 0},
    {DL_OPT_DATA, "--data", NULL, "FILE[:GROUP]",
     "evaluate on this HDF5 file's group (default GROUP: the run's validation group; default: "
     "the run's validation split)",
     0},
    {DL_OPT_CHECKPOINT, "--checkpoint", NULL, "best|last|NAME",
     "which checkpoint of the run (default: last)", 0},
    {DL_OPT_JSON, "--json", NULL, NULL,
     "print one JSON object: loss, accuracy, classes (precision, recall, support), confusion", 0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders are (default: runs)", 0},
    HELP,
    END};

static const dl_opt predict_opts[] = {
    {0, "RUN", NULL, NULL, "a run folder, its name or a unique part of it", 0},
    {0, "INPUT", NULL, NULL,
     "FILE.h5[:GROUP] (as dlbench import writes it), FILE.csv of features, a PNG or JPEG "
     "file or a folder of them, or a language model's prompt",
     0},
    {DL_OPT_OUTPUT, "--output", "-o", "FILE",
     "write there (whole or not at all) instead of stdout; FILE.jsonl means --format jsonl", 0},
    {DL_OPT_FORMAT, "--format", NULL, "csv|jsonl", "CSV with a header row, or JSON lines", 0},
    {DL_OPT_TOP_K, "--top-k", NULL, "K",
     "the K likeliest classes per sample (default 1); a language model draws among them", 0},
    {DL_OPT_LOGITS, "--logits", NULL, NULL, "also write the model's raw outputs", 0},
    {DL_OPT_LABEL, "--label", NULL, "COLUMN",
     "CSV: a label column to leave out (name or 0-based index)", 0},
    {DL_OPT_TOKENS, "--tokens", NULL, "N", "language model: tokens to generate (default 200)", 0},
    {DL_OPT_CHECKPOINT, "--checkpoint", NULL, "best|last|NAME",
     "which checkpoint of the run (default: last)", 0},
    {DL_OPT_OUT, "--out", NULL, "DIR", "where run folders are (default: runs)", 0},
    HELP,
    END};

static const dl_opt profile_opts[] = {
    {0, "k=v", NULL, NULL, "override a hyperparameter the script declares", 0},
    SET,
    {DL_OPT_STEPS, "--steps", NULL, "N", "optimizer steps to profile (default 50)", 0},
    {DL_OPT_WARMUP, "--warmup", NULL, "N", "steps run first and not counted (default 5)", 0},
    {DL_OPT_SORT, "--sort", NULL, "total|self|calls|mean|flops|name",
     "the op table's order (default total)", 0},
    {DL_OPT_BY, "--by", NULL, "op|layer|both", "op table, layer table or both (default both)", 0},
    {DL_OPT_TRACE, "--trace", NULL, "PATH",
     "Chrome/Perfetto trace (default trace.json; '-' for none)", 0},
    {DL_OPT_WHOLE_RUN, "--whole-run", NULL, NULL,
     "keep every profiled step in the trace (default: the last --ring)", 0},
    {DL_OPT_RING, "--ring", NULL, "N", "steps kept in the trace ring (default 10)", 0},
    DEVICE("profile on cpu, cuda or auto (default: the script's choice)"),
    {DL_OPT_ROWS, "--rows", NULL, "N", "rows of each table (default 0: all)", 0},
    PRICE("projected cost of the script's whole training"),
    {DL_OPT_NO_MONITOR, "--no-monitor", NULL, NULL, "do not sample CPU and GPU use meanwhile", 0},
    HELP,
    END};

static const dl_opt advise_opts[] = {
    {0, "k=v", NULL, NULL, "override a hyperparameter the script declares", 0},
    SET,
    {DL_OPT_STEPS, "--steps", NULL, "N",
     "optimizer steps each candidate is measured for (default 30)", 0},
    {DL_OPT_WARMUP, "--warmup", NULL, "N", "steps run first and not counted (default 3)", 0},
    {DL_OPT_BUDGET, "--budget", NULL, "SECONDS",
     "stop probing when this much wall time is spent (default 120)", 0},
    {DL_OPT_LR_RANGE, "--lr-range", NULL, NULL,
     "also try the learning rate x0.1, x0.3, x3 and x10 (a short LR range test)", 0},
    DEVICE("probe on cpu, cuda or auto (default: the script's choice)"),
    PRICE("what the machine costs an hour: the projected cost of each candidate"),
    HELP,
    END};

static const dl_opt import_opts[] = {
    {0, "SRC", NULL, NULL,
     "a folder of IDX files or CIFAR-10/100 binary batches, an image folder (one sub-folder "
     "per class), an IDX images file (labels found by name) or a CSV file with a header row",
     0},
    {DL_OPT_INSPECT, "--inspect", NULL, NULL,
     "print what FILE.h5 holds (splits, datasets, shapes, dtypes, classes, vocabulary, "
     "sources) and write nothing",
     0},
    {DL_OPT_TEXT, "--text", NULL, NULL,
     "the paths are text files or folders of them: token ids for a language model", 0},
    {DL_OPT_VOCAB, "--vocab", NULL, "bytes|chars",
     "--text: ids are the bytes, or the UTF-8 characters seen (default chars)", 0},
    {DL_OPT_LABEL, "--label", NULL, "COLUMN",
     "CSV: the label column (name, or 0-based index); CIFAR-100: fine|coarse (default fine)", 0},
    {DL_OPT_REGRESSION, "--regression", NULL, NULL,
     "CSV: the --label column is f32 targets (for nn.MSE), even when its values are integers", 0},
    {DL_OPT_VAL_FRACTION, "--val-fraction", NULL, "F",
     "move a random fraction F of /train to /val (images: F of each class; --text: the last "
     "F of each file's tokens to /test, default 0.1)",
     0},
    {DL_OPT_SIZE, "--size", NULL, "HxW",
     "images: scale the shorter side to fit (area averaging), then crop the centre to HxW", 0},
    {DL_OPT_CHANNELS, "--channels", NULL, "1|3",
     "images: grey or RGB (default: 1 when every image is grey, else 3)", 0},
    {DL_OPT_WORKERS, "--workers", NULL, "N",
     "images: decoding threads (default: the CPU count, at most 8)", 0},
    {DL_OPT_STRICT, "--strict", NULL, NULL,
     "images: fail on the first bad entry instead of skipping it", 0},
    {DL_OPT_SPLIT, "--split", NULL, "train|test|val",
     "group for a single IDX pair (default: from the name)", 0},
    {DL_OPT_CLASS_NAMES, "--class-names", NULL, "LIST",
     "comma-separated, or fashion-mnist, mnist, none", 0},
    {DL_OPT_SYNTHETIC, "--synthetic", NULL, "spirals|blobs",
     "generate a data set instead (/test gets N/4 samples)", 0},
    {DL_OPT_SAMPLES, "--samples", NULL, "N", "--synthetic: samples in /train (default 2000)", 0},
    {DL_OPT_CLASSES, "--classes", NULL, "K", "--synthetic: classes (default 2)", 0},
    {DL_OPT_NOISE, "--noise", NULL, "F", "--synthetic: noise (default 0.1)", 0},
    {DL_OPT_SEED, "--seed", NULL, "S",
     "for --val-fraction and --synthetic (default 0; --text draws nothing at random)", 0},
    {DL_OPT_CHUNK, "--chunk", NULL, "ROWS", "rows per HDF5 chunk (default: about 1 MiB)", 0},
    {DL_OPT_GZIP, "--gzip", NULL, "LEVEL", "compress chunks (0-9, default 0: fastest to read)", 0},
    HELP,
    END};

static const dl_command table[] = {
    {"", dl_cmd_workbench, "[SCRIPT]", "[SCRIPT] [k=v ...] [options]",
     "the workbench (default: scripts/fmnist_mlp.lua)", workbench_opts,
     "Keys: ? in the workbench. Without a terminal, train headless with dlbench run.",
     DL_COMPLETE_SCRIPT},
    {"run", dl_cmd_run, "SCRIPT [k=v..]",
     "SCRIPT [k=v ...] [options]\n"
     "--resume RUN [options]\n"
     "SCRIPT --check-parity N [--parity-device DEV] [--parity-tol X]",
     "headless training, progress on stdout", run_opts,
     "--check-parity N trains nothing: it runs N steps from the start on the run's device and "
     "on another from the same state, prints each step's loss on both and the largest relative "
     "loss and parameter differences (no run folder; exit 0 within the tolerance, 1 over it or "
     "when the other device is not available).\n"
     "exit status: 0 finished or stopped, 1 failed, 2 bad input, 3 duplicate refused, "
     "130 interrupted",
     DL_COMPLETE_SCRIPT},
    {"watch", dl_cmd_watch, "[RUN]", "[RUN] [--out DIR] [--study NAME|auto]",
     "attach the workbench to a live or finished run", watch_opts,
     "Draws the workbench's views from the run's files as they grow; when the run is live, "
     "Space/g/c/s/n/e send pause, device, checkpoint, note and lr through RUN/control.sock. "
     "q leaves (the run goes on).",
     DL_COMPLETE_RUN},
    {"tune", dl_cmd_tune, "SCRIPT", "SCRIPT [k=v ...] [options]", "a hyperparameter study",
     tune_opts,
     "A study stopped or killed part-way resumes when the same command runs again.\n"
     "exit status: 0 done, 1 failed trials stopped the study, 2 bad input, 130 interrupted",
     DL_COMPLETE_SCRIPT},
    {"runs", dl_cmd_runs, "[diff A B]",
     "[--out DIR] [--json|--csv] [--sort KEY] [--desc] [--filter k=v ...]\n"
     "diff A B [--out DIR]",
     "the experiment table; differences of two runs", runs_opts, NULL, DL_COMPLETE_RUNS},
    {"export-metrics", dl_cmd_export_metrics, "RUN...",
     "RUN... [--csv|--jsonl] [-o FILE] [--out DIR]",
     "every metric of the runs in one CSV or JSON-lines file", export_metrics_opts,
     "A row per logged step or epoch of each run: the run's folder, name and tags, its "
     "hyperparameters (and seed) as columns, kind, step, epoch, time and every metric "
     "(empty where a record has none). A hyperparameter named like another column is "
     "hp_NAME.",
     DL_COMPLETE_RUN},
    {"tag", dl_cmd_tag, "RUN TAG...", "RUN TAG... [--remove] [--out DIR]",
     "tag a run (runs --filter tag=T, the runs screen's / and t)", tag_opts, NULL, DL_COMPLETE_RUN},
    {"note", dl_cmd_note, "RUN TEXT", "RUN TEXT [--out DIR]", "add a note to a run's events.log",
     note_opts, NULL, DL_COMPLETE_RUN},
    {"sample", dl_cmd_sample, "RUN", "RUN [--prompt TEXT] [--tokens N] [options]",
     "text from a trained language model", sample_opts,
     "Loads the run's script copy, checkpoint and the vocabulary of its token file, and prints "
     "the prompt and the generated text as it is produced (on the CPU).\n"
     "exit status: 0 done, 1 failed, 2 bad input or not a language model",
     DL_COMPLETE_RUN},
    {"export", dl_cmd_export, "RUN --format F",
     "RUN --format onnx|safetensors [-o FILE] [--checkpoint best|last|NAME] [--names "
     "torch|dlbench]",
     "ONNX or safetensors for other tools", export_opts,
     "Loads the run's script copy and checkpoint on the CPU and writes FILE whole or not at all. "
     "ONNX: input \"input\" [batch, sample...] (int64 token ids for a model that starts with an "
     "Embedding, else float, after the run's normalisation: metadata dlbench_input_scale, _mean, "
     "_std), output \"logits\"; the batch dimension is symbolic. A layer ONNX cannot express is "
     "refused, naming it.\n"
     "exit status: 0 written, 1 failed, 2 bad input (no such run or checkpoint, a layer ONNX "
     "cannot express, -o into a missing folder)",
     DL_COMPLETE_RUN},
    {"eval", dl_cmd_eval, "RUN", "RUN [--data FILE[:GROUP]] [--checkpoint best|last|NAME] [--json]",
     "metrics of a trained model on a data set", eval_opts,
     "Loads the run's script copy and checkpoint (on the CPU) and measures the model on the "
     "run's validation split or --data, read with the run's scale, mean and std: loss and "
     "accuracy as training computes them, then per class precision, recall and support and the "
     "confusion matrix (rows: true class) with the data's class names; for a language model "
     "(dl.data.text) the per-token loss, perplexity and bits per character.\n"
     "exit status: 0 done, 1 failed, 2 bad input (no such run or checkpoint, a damaged or "
     "foreign checkpoint, data that does not fit the model)",
     DL_COMPLETE_RUN},
    {"predict", dl_cmd_predict, "RUN INPUT",
     "RUN INPUT [-o FILE] [--top-k K] [--format csv|jsonl] [--logits]",
     "predictions of a trained model for new inputs", predict_opts,
     "Loads the run's script copy and checkpoint (on the CPU) and reads INPUT with the run's "
     "normalisation (its data's scale, mean and std): per sample its index, the likeliest "
     "class (number, name from the data's class names) and probability (softmax), then the "
     "next K-1 classes; a language model (dl.data.text) continues INPUT as dlbench sample "
     "does. INPUT is FILE.h5[:GROUP] (default group: the run's validation group), a CSV of "
     "features (--label COL left out), a PNG or JPEG file, or a folder of them (searched "
     "recursively, files in path order, other files ignored; an ImageFolder tree works as it "
     "is): each image is scaled on its shorter side and centre-cropped to the run's [C, H, W] "
     "and converted to C channels, as dlbench import --size HxW does, and each row names its "
     "file.\n"
     "exit status: 0 done, 1 failed, 2 bad input (no such run or checkpoint, a damaged or "
     "foreign checkpoint, input that does not fit the model, a corrupt image or one whose "
     "name's suffix is not its format, a folder without images, images for a run whose "
     "samples are not [C, H, W] pixels)",
     DL_COMPLETE_RUN},
    {"profile", dl_cmd_profile, "SCRIPT", "SCRIPT [k=v ...] [options]",
     "profile N steps, print the table, write a trace", profile_opts,
     "exit status: 0 done, 1 failed, 2 bad input", DL_COMPLETE_SCRIPT},
    {"advise", dl_cmd_advise, "SCRIPT [k=v..]", "SCRIPT [k=v ...] [--set F=V ...] [options]",
     "measured what-if probes: what to change, and what it saves", advise_opts,
     "Each candidate change (the precisions this device computes natively, batch x2 and x4 "
     "with the learning rate scaled, batch x2 with accumulation keeping the effective batch, "
     "loader workers, in-memory or streaming data, validation every few epochs, early "
     "stopping) is prepared from the same script and seed - the same initial state - and "
     "trained for N steps after the warm-up; the table gives its samples/s and step time "
     "against the baseline, the loss after N steps against the baseline's, the projected "
     "wall time (and cost) of the whole training and the command that applies it. Nothing "
     "is written: no run folder.\n"
     "exit status: 0 done, 1 failed, 2 bad input",
     DL_COMPLETE_SCRIPT},
    {"import", dl_cmd_import, "SRC OUT.h5",
     "[options] SRC OUT.h5\n"
     "[options] IMAGES.idx LABELS.idx OUT.h5\n"
     "--synthetic spirals|blobs [options] OUT.h5\n"
     "--text FILE|DIR... OUT.h5 [--vocab bytes|chars] [--val-fraction F]\n"
     "--inspect FILE.h5",
     "IDX, CIFAR, image folders, CSV or text into HDF5 (--synthetic NAME too)", import_opts,
     "IDX files are train-/t10k-images-idx3-ubyte and -labels-idx1-ubyte, gzipped or not. "
     "CIFAR-10 is data_batch_1..5.bin and test_batch.bin, CIFAR-100 train.bin and test.bin "
     "(class names from batches.meta.txt, fine_label_names.txt or coarse_label_names.txt). "
     "An image folder is DIR/CLASS/IMAGE (PNG or JPEG; classes sorted by name, label = index) "
     "or DIR/train/CLASS/... with DIR/val and DIR/test as further splits; a corrupt, "
     "non-image or odd-sized file and an empty or unreadable class folder are skipped and "
     "counted (--strict: exit 2), a folder that yields no image exits 2. "
     "--text reads every regular file of a folder in name order (not *.dat, dot-files or "
     "links to a file already read), each ending with a newline; /test is the last F of each "
     "file's tokens, /train the rest (dl.data.text reads them). "
     "OUT.h5 appears only when it is complete.\n"
     "exit status: 0 done, 1 the output could not be written, 2 bad input",
     DL_COMPLETE_FILE},
};

const dl_command *dl_command_at(int i)
{
    return i >= 0 && i < (int)(sizeof table / sizeof *table) ? &table[i] : NULL;
}

const dl_command *dl_command_find(const char *name)
{
    for (const dl_command *c = table; c < table + sizeof table / sizeof *table; c++)
        if (!strcmp(c->name, name))
            return c;
    return NULL;
}

void dl_command_overview(FILE *f)
{
    fprintf(f, "dlbench %s - a terminal workbench for training neural networks cheaply\n\n",
            DL_VERSION);
    for (const dl_command *c = table; c < table + sizeof table / sizeof *table; c++) {
        char left[64];
        snprintf(left, sizeof left, "dlbench%s%s %s", c->name[0] ? " " : "", c->name, c->brief);
        fprintf(f, "  %-28s %s%s\n", left, c->summary, c->fn ? "" : " (not in this build)");
    }
    fprintf(f, "  %-28s %s\n", "dlbench help [COMMAND]",
            "a command's options (also: dlbench COMMAND --help)");
    fprintf(f, "\n  dlbench --help | --version\n");
}
