/* parity.h - the same steps on two backends, from the same state: how far their losses and parameters drift */
#ifndef DL_PARITY_H
#define DL_PARITY_H

#include "engine/core/backend.h"

typedef struct dl_trainer dl_trainer;

/* What dl_trainer_check_parity measured. Relative differences: of a loss,
 * |a - b| / |a|; of a parameter tensor, max |a - b| over its elements
 * divided by max |a| (so a tensor of small weights is judged against its
 * own scale); exactly 0 when the values are bit-identical. */
typedef struct dl_parity_report {
    int steps;               /* steps run on each backend */
    long first_step;         /* the step count the check started from */
    double *loss_a, *loss_b; /* [steps]: each step's mean training loss */
    double max_loss_rel;
    int worst_loss_step; /* 1-based, within the check (0: none) */
    double max_param_rel;
    double worst_param_abs;                /* max |a - b| of the worst tensor */
    char worst_param[64];                  /* its name ("" when every tensor is identical) */
    int params_identical;                  /* 1: every parameter bit-identical */
    int same_backend;                      /* B was A: no move, the restore alone was checked */
    double seconds_a, seconds_b, switch_s; /* time of each leg and of the moves */
    char device_a[128], device_b[128];     /* backend descriptions */
} dl_parity_report;

/* Runs `steps` optimizer steps from the current state on the trainer's
 * backend (A) and records each step's loss, puts the state back, moves
 * the training to `other` (B), runs the same steps, moves back to A and
 * puts the state back again: afterwards the training is where it was, on
 * A, as if the check had not run. The steps stop early at the end of the
 * training (epochs, max_steps). Callbacks do not run during the check
 * (no logging, no Lua hooks); validation at an epoch end does. other may
 * be A itself (then only the restore is checked: every difference must be
 * 0). Fills *r (release with dl_parity_report_done, also after an
 * error). Errors: DL_EINVAL (steps < 1), DL_EUNSUPPORTED (data parallel),
 * DL_ENOMEM and the like when B cannot take the training (the message is
 * the backend's: size asked, memory free), or a step's failure; the
 * training is back on A with its state restored whenever that is
 * possible. */
int dl_trainer_check_parity(dl_trainer *t, dl_backend *other, int steps, dl_parity_report *r);
void dl_parity_report_done(dl_parity_report *r);

#endif
