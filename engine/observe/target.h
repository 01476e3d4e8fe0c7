/* target.h - time and cost to reach a metric target, projected from the curve so far, with an interval */
#ifndef DL_TARGET_H
#define DL_TARGET_H

typedef struct dl_target_projection {
    int ok;          /* enough points to say anything */
    int reached;     /* the target was reached already (at epoch `epoch`) */
    int reachable;   /* the trend reaches it (within 100x the epochs seen) */
    double epoch;    /* the projected epoch (1-based, fractional) */
    double epoch_lo; /* the interval: where the fit's band crosses the target */
    double epoch_hi; /* (INFINITY: that end never gets there) */
    double seconds, seconds_lo, seconds_hi; /* more wall time from now */
    double cost, cost_lo, cost_hi;          /* at the price (< 0 without one) */
    int beyond_plan;                        /* the interval's near end is past the planned epochs */
} dl_target_projection;

/* Projects when a per-epoch metric y[n] (epochs x[n], 1-based; NaN points
 * skipped) reaches target (maximize: from below, as accuracy; else from
 * above, as a loss). The trend is a line in log(epoch) fitted to the last
 * half of the points (at least 3), the interval where its 3-sigma band
 * crosses the target. epoch_s: the mean wall seconds an epoch; price_per_hour <= 0: no
 * cost; planned: the epochs the run will train (0 unknown). */
void dl_target_project(const double *x, const double *y, int n, double target, int maximize,
                       double epoch_s, double price_per_hour, int planned,
                       dl_target_projection *out);

#endif
