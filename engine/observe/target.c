/* target.c - when a metric reaches its target: a line in log(epoch) through the recent curve */
#include "engine/observe/target.h"

#include <math.h>
#include <string.h>

#define MAX_POINTS 1024
#define MAX_REACH 100 /* epochs seen x this: "never" beyond */

/* The epoch where a + b log(e) equals target, or INFINITY when the slope
 * points away from it. */
static double solve(double a, double b, double target, int maximize)
{
    if (maximize ? !(b > 0) : !(b < 0))
        return INFINITY;
    return exp((target - a) / b);
}

static void money(dl_target_projection *p, double last_epoch, double epoch_s, double price)
{
    p->seconds = fmax(0, p->epoch - last_epoch) * epoch_s;
    p->seconds_lo = fmax(0, p->epoch_lo - last_epoch) * epoch_s;
    p->seconds_hi = isfinite(p->epoch_hi) ? fmax(0, p->epoch_hi - last_epoch) * epoch_s : INFINITY;
    double per_s = price > 0 ? price / 3600 : -1;
    p->cost = per_s > 0 ? p->seconds * per_s : -1;
    p->cost_lo = per_s > 0 ? p->seconds_lo * per_s : -1;
    p->cost_hi = per_s > 0 ? p->seconds_hi * per_s : -1;
}

void dl_target_project(const double *x, const double *y, int n, double target, int maximize,
                       double epoch_s, double price_per_hour, int planned,
                       dl_target_projection *out)
{
    memset(out, 0, sizeof *out);
    double lx[MAX_POINTS], ly[MAX_POINTS], ex[MAX_POINTS];
    int m = 0;
    for (int i = 0; i < n && m < MAX_POINTS; i++)
        if (isfinite(y[i]) && x[i] >= 1) {
            ex[m] = x[i];
            lx[m] = log(x[i]);
            ly[m++] = y[i];
        }
    for (int i = 0; i < m; i++)
        if (maximize ? ly[i] >= target : ly[i] <= target) {
            out->ok = out->reached = out->reachable = 1;
            out->epoch = out->epoch_lo = out->epoch_hi = ex[i];
            return;
        }
    if (m < 3)
        return;
    int k = m / 2 >= 3 ? m / 2 : 3, s = m - k; /* the last half */
    double mx = 0, my = 0, sxx = 0, sxy = 0, sse = 0;
    for (int i = s; i < m; i++)
        mx += lx[i] / k, my += ly[i] / k;
    for (int i = s; i < m; i++) {
        sxx += (lx[i] - mx) * (lx[i] - mx);
        sxy += (lx[i] - mx) * (ly[i] - my);
    }
    if (!(sxx > 0))
        return;
    double b = sxy / sxx, a = my - b * mx;
    for (int i = s; i < m; i++) {
        double r = ly[i] - a - b * lx[i];
        sse += r * r;
    }
    double sd = k > 2 ? sqrt(sse / (k - 2)) : 0;
    out->ok = 1;
    out->epoch = solve(a, b, target, maximize);
    /* the interval: where the fit's 3-sigma band around the mean trend (few points: wider than 2)
     * crosses the target (scanned in log epochs up to the reach limit) */
    double last0 = ex[m - 1], lo = INFINITY, hi = INFINITY;
    for (int g = 0; g <= 4000; g++) {
        double L = log(last0) + g * log((double)MAX_REACH) / 4000;
        double fit = a + b * L, band = 3 * sd * sqrt(1.0 / k + (L - mx) * (L - mx) / sxx);
        double near = maximize ? fit + band : fit - band, far = maximize ? fit - band : fit + band;
        if (isinf(lo) && (maximize ? near >= target : near <= target))
            lo = exp(L);
        if (isinf(hi) && (maximize ? far >= target : far <= target))
            hi = exp(L);
    }
    out->epoch_lo = lo;
    out->epoch_hi = hi;
    double last = ex[m - 1], limit = last * MAX_REACH;
    out->reachable = out->epoch <= limit;
    if (!(out->epoch <= limit))
        out->epoch = INFINITY;
    if (!(out->epoch_lo <= limit))
        out->epoch_lo = INFINITY;
    if (!(out->epoch_hi <= limit))
        out->epoch_hi = INFINITY;
    if (out->epoch < out->epoch_lo)
        out->epoch_lo = out->epoch;
    if (out->epoch > out->epoch_hi)
        out->epoch_hi = out->epoch;
    out->beyond_plan = planned > 0 && out->epoch_lo > planned;
    money(out, last, epoch_s, price_per_hour);
}
