/* test_target.c - the projection to a target recovers a known log curve's epoch, with noise, and says when it is out of reach */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/observe/target.h"
#include "tests/check.h"

static double noise(uint64_t *st)
{
    uint64_t z = (*st += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2 - 1;
}

/* acc = 0.70 + 0.05 ln(epoch): 0.85 at epoch e^3 = 20.09. Seen to epoch 8
 * without noise: the projection is exact; with noise the interval holds
 * it; the time and cost follow from the epoch time and price. */
static void test_log_curve(void)
{
    double x[40], y[40];
    for (int i = 0; i < 8; i++)
        x[i] = i + 1, y[i] = 0.70 + 0.05 * log(i + 1.0);
    dl_target_projection p;
    dl_target_project(x, y, 8, 0.85, 1, 10.0, 3.6, 30, &p);
    CHECK(p.ok && !p.reached && p.reachable);
    CHECK_NEAR(p.epoch, exp(3.0), 1e-9);
    CHECK_NEAR(p.seconds, (exp(3.0) - 8) * 10, 1e-6);
    CHECK_NEAR(p.cost, p.seconds / 1000, 1e-9); /* $3.6/h = $0.001/s */
    CHECK(!p.beyond_plan);
    int hold = 0;
    for (uint64_t seed = 1; seed <= 50; seed++) {
        uint64_t st = seed;
        for (int i = 0; i < 16; i++)
            x[i] = i + 1, y[i] = 0.70 + 0.05 * log(i + 1.0) + 0.004 * noise(&st);
        dl_target_project(x, y, 16, 0.85, 1, 10.0, 0, 30, &p);
        CHECK(p.ok && p.epoch_lo <= p.epoch && p.epoch <= p.epoch_hi && p.cost < 0);
        hold += p.epoch_lo <= exp(3.0) && exp(3.0) <= p.epoch_hi;
    }
    CHECK_MSG(hold >= 45, "the interval held the true epoch %d times of 50", hold);
    /* planned 10 epochs: the warning; a loss target from above */
    dl_target_project(x, y, 8, 0.85, 1, 10.0, 0, 10, &p);
    CHECK(p.beyond_plan);
    for (int i = 0; i < 8; i++)
        y[i] = 1.0 - 0.1 * log(i + 1.0);
    dl_target_project(x, y, 8, 0.5, 0, 1.0, 0, 0, &p);
    CHECK_NEAR(p.epoch, exp(5.0), 1e-9);
}

/* Reached already, flat or moving away (never), too few points. */
static void test_edges(void)
{
    double x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {0.5, 0.6, 0.91, 0.8, 0.8, 0.8};
    dl_target_projection p;
    dl_target_project(x, y, 6, 0.9, 1, 1, 0, 0, &p);
    CHECK(p.reached && p.epoch == 3);
    double down[6] = {0.8, 0.79, 0.78, 0.77, 0.76, 0.75};
    dl_target_project(x, down, 6, 0.9, 1, 1, 0, 0, &p);
    CHECK(p.ok && !p.reachable && isinf(p.epoch) && isinf(p.seconds_hi));
    dl_target_project(x, down, 2, 0.9, 1, 1, 0, 0, &p);
    CHECK(!p.ok);
}

int main(void)
{
    RUN(test_log_curve);
    RUN(test_edges);
    CHECK_EXIT();
}
