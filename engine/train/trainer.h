/* trainer.h - the C training loop: epochs of steps, accumulation, mixed precision, validation, commands */
#ifndef DL_TRAINER_H
#define DL_TRAINER_H

#include <stdint.h>

#include "engine/core/backend.h"
#include "engine/data/data.h"
#include "engine/nn/nn.h"
#include "engine/nn/optim.h"
#include "engine/observe/profiler.h"
#include "engine/train/parity.h"
#include "engine/train/probe.h"
#include "engine/train/reducer.h"
#include "engine/train/snapshot.h"

typedef struct dl_trainer dl_trainer;

typedef enum { DL_NONFINITE_STOP, DL_NONFINITE_SKIP } dl_nonfinite_policy;

typedef struct dl_trainer_config {
    int epochs;             /* >= 1 */
    int batch;              /* micro-batch rows, as the source yields them */
    int accumulate;         /* micro-batches per optimizer step (>= 1) */
    dl_precision precision; /* f32, bf16 (no scaling), f16 (dynamic loss scaling) */
    uint64_t seed;
    long max_steps; /* stop after this many optimizer steps (0: no limit) */
    int log_every;  /* steps between on_step callbacks (>= 1) */
    dl_nonfinite_policy nonfinite;
    float loss_scale;      /* f16 initial scale (65536) */
    int loss_scale_window; /* clean steps before the scale doubles (2000) */
    int val_every;         /* validate every N epochs, and after the last (0 or 1: every) */
} dl_trainer_config;

/* Sensible defaults: 1 epoch, batch 128, accumulate 1, f32, seed 0,
 * log every 10 steps, stop on non-finite. */
dl_trainer_config dl_trainer_config_default(void);

/* Callbacks: return 0 to go on, 1 to stop the run cleanly, or a negative
 * code to fail it (with dl_error set). */
typedef struct dl_callbacks {
    void *user;
    int (*on_step)(void *user, dl_trainer *t, const dl_step_info *info);
    int (*on_epoch)(void *user, dl_trainer *t, const dl_epoch_info *info);
    /* Plain-text events: "device switched", "loss scale halved", ... */
    void (*on_event)(void *user, dl_trainer *t, const char *kind, const char *text);
    /* Between steps, after the command queue is drained (hook for a Lua
     * prompt or the workbench's state copy). */
    int (*on_idle)(void *user, dl_trainer *t);
} dl_callbacks;

/* Creates a trainer. The model must be built (dl_model_create); the
 * trainer allocates its state on be and plans activations. train and val
 * (val may be NULL) are borrowed and must outlive the trainer. */
int dl_trainer_create(dl_trainer **out, dl_model *model, const dl_loss *loss, const dl_optim *optim,
                      const dl_schedule *schedule, dl_source *train, dl_source *val,
                      const dl_trainer_config *cfg, dl_backend *be);
void dl_trainer_destroy(dl_trainer *t);
void dl_trainer_set_callbacks(dl_trainer *t, const dl_callbacks *cb);
/* The devices the switch and parity commands may open by name (borrowed;
 * dl_devices_builtin in a program that links the backends). Without a
 * table those commands answer that the training has none to move to;
 * dl_trainer_switch_device with a backend in hand works either way. */
void dl_trainer_set_devices(dl_trainer *t, const dl_devices *d);
/* Profiles every step with prof (borrowed; it must outlive its use by the
 * trainer; NULL detaches): phases, layers, validation. Attaches the model
 * and backend to prof (DL_ENOMEM on failure). With no profiler the
 * trainer holds dl_profiler_off(): its calls cost a test of one field. */
int dl_trainer_set_profiler(dl_trainer *t, dl_profiler *prof);
dl_profiler *dl_trainer_profiler(const dl_trainer *t); /* NULL: none attached */

/* Makes the trainer rank r->rank of a data-parallel job of r->size ranks
 * (the table is copied; its context is borrowed and must outlive the
 * trainer; engine/dist's dl_comm_reducer fills one). Collective: every
 * rank calls it, after any checkpoint was loaded and before training.
 * Then the parameters, optimizer moments, buffers and the cursor are
 * broadcast from rank 0; each step takes this rank's rows of every global
 * batch (train's batch is the global batch: the same script gives the
 * same training on any number of ranks), the gradients are summed across
 * ranks (bucketed, overlapping backward on the CPU) and divided by the
 * rows of all ranks; the reported loss, accuracy and throughput are the
 * job's. Commands go to rank 0 (pause, stop and the LR reach every rank;
 * a device switch is refused). Validation runs whole on every rank. r
 * NULL or of one rank: no effect. Errors: DL_ENOMEM, or the reducer's. */
int dl_trainer_set_reducer(dl_trainer *t, const dl_reducer *r);

/* Runs epochs until done, max_steps, a stop command or a callback's stop.
 * Returns DL_OK (finished or stopped: see dl_trainer_stopped) or an error. */
int dl_trainer_run(dl_trainer *t);
/* One optimizer step (accumulate micro-batches). Returns 1 when the epoch
 * has no more batches (no step taken), 0 after a step, < 0 on error. */
int dl_trainer_step(dl_trainer *t);
/* What dl_trainer_outputs hands over per batch: n rows, out [n, outputs]
 * (the model's raw outputs, f32, host memory valid during the call), y the
 * batch's targets as the source yields them (host). Return DL_OK to go on,
 * a negative status to stop the pass with it. */
typedef int (*dl_outputs_fn)(void *user, int n, const float *out, const void *y);
/* Runs the model in eval mode over a whole source (its batches in order,
 * converted as training converts them: scale, mean, std) and calls fn with
 * each batch's outputs. Returns DL_OK, the source's or fn's error. */
int dl_trainer_outputs(dl_trainer *t, dl_source *src, dl_outputs_fn fn, void *user);
/* Mean loss and accuracy of the model over a whole source, eval mode. */
int dl_trainer_evaluate(dl_trainer *t, dl_source *src, double *loss, double *acc);

/* Tells the trainer its model's parameters were replaced (a checkpoint
 * was loaded): the low-precision copy is refreshed before the next step. */
void dl_trainer_params_changed(dl_trainer *t);

/* Commands, thread-safe: queued and applied between two steps.
 * CHECKPOINT and NOTE are not handled by the trainer itself: they reach
 * on_event with kind "checkpoint" (text: a name or "") and "note". */
typedef enum {
    DL_CMD_PAUSE,
    DL_CMD_RESUME,
    DL_CMD_STOP,
    DL_CMD_SET_LR, /* value: new base LR */
    DL_CMD_SWITCH, /* text: "cpu" or "cuda" */
    DL_CMD_CHECKPOINT,
    DL_CMD_NOTE,   /* text */
    DL_CMD_PARITY, /* text: "cuda", "cpu", "cpu:T" or "" (the other device);
                       * value: steps. dl_trainer_check_parity, reported as an
                       * event; training goes on where it was */
    DL_CMD_PROBE   /* value: steps. dl_trainer_probe over dl_trainer_probe_variants,
                       * each variant an event "probe"; training goes on where it was */
} dl_command_kind;
int dl_trainer_post(dl_trainer *t, dl_command_kind kind, double value, const char *text);

/* Moves every parameter, gradient, moment, buffer and the activations to
 * be at the current step boundary; the loader re-targets its buffers and
 * the old backend's memory is freed. The step, loss scale and schedule are
 * host state and carry on. On error (be out of memory: the message gives
 * the size asked) the training stays on the old backend with its state
 * unchanged and nothing left on be (tests/test_switch.c). Call between
 * steps only (the command queue does). */
int dl_trainer_switch_device(dl_trainer *t, dl_backend *be);

/* State and counters. */
dl_model *dl_trainer_model(dl_trainer *t);
dl_backend *dl_trainer_backend(dl_trainer *t);
long dl_trainer_step_count(const dl_trainer *t);
int dl_trainer_epoch(const dl_trainer *t);
long dl_trainer_epoch_step(const dl_trainer *t);
int dl_trainer_stopped(const dl_trainer *t);
int dl_trainer_paused(const dl_trainer *t);
float dl_trainer_loss_scale(const dl_trainer *t);
float dl_trainer_base_lr(const dl_trainer *t);
void dl_trainer_set_base_lr(dl_trainer *t, float lr);
double dl_trainer_current_lr(const dl_trainer *t);
const dl_trainer_config *dl_trainer_config_of(const dl_trainer *t);
/* Per-token cross-entropy (a language model): the tokens T per sample of
 * the model's [T, V] output, whose losses are means per kept token; 0 when
 * the loss is per sample. */
int dl_trainer_tokens(const dl_trainer *t);
void dl_trainer_request_stop(dl_trainer *t);

/* Resume support: the cursor and counters a checkpoint must hold. Setting
 * them restarts the epoch at that batch, with the epoch's running totals
 * and the open logging window's, so a resumed run logs the same metrics
 * (train_loss of a resumed epoch included) as an uninterrupted one. */
typedef struct dl_trainer_cursor {
    long step;
    int epoch;
    long epoch_step; /* optimizer steps done in the epoch */
    float loss_scale;
    int clean_steps; /* steps since the loss scale last changed */
    long skipped;
    float base_lr;
    float sched_scale; /* plateau state */
    double sched_best;
    int sched_bad;
    double ep_loss, ep_correct; /* the epoch's sums over logged windows */
    long ep_samples;
    long rep_samples, rep_steps; /* the window not yet logged */
    float rep_loss, rep_correct;
} dl_trainer_cursor;
/* Reads the cursor (the window's sums from the device: 0 if that fails). */
void dl_trainer_get_cursor(dl_trainer *t, dl_trainer_cursor *c);
int dl_trainer_set_cursor(dl_trainer *t, const dl_trainer_cursor *c);

#endif
