/* test_tune.c - studies: samplers, pruners, the journal, resume after a kill, concurrent workers */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "engine/tune/tune.h"
#include "tests/check.h"

static char tmp_root[256];

static void rm_rf(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

static dl_sampler_config sampler(int kind) { return dl_tune_sampler_defaults(kind); }

/* --- samplers ----------------------------------------------------------------- */

static void test_bounds_and_types(void)
{
    const char *acts[] = {"relu", "gelu", "tanh"};
    for (int kind = DL_SAMPLER_RANDOM; kind <= DL_SAMPLER_TPE; kind++) {
        dl_sampler_config sc = sampler(kind);
        sc.grid_points = 4;
        dl_study *s;
        CHECK_OK(dl_study_open(&s, NULL, "bounds", DL_STUDY_MINIMIZE, &sc, NULL, 3));
        if (!s)
            return;
        for (int i = 0; i < 60; i++) {
            dl_trial *t;
            int rc = dl_study_ask(s, &t);
            if (rc == DL_STUDY_DONE)
                break;
            CHECK_OK(rc);
            double x = 0, lr = 0;
            long h = 0, k = 0;
            int a = -1;
            CHECK_OK(dl_trial_suggest_float(t, "x", -2.5, 4.0, 0, &x));
            CHECK_OK(dl_trial_suggest_float(t, "lr", 1e-5, 1e-1, 1, &lr));
            CHECK_OK(dl_trial_suggest_int(t, "hidden", 16, 1024, 1, &h));
            CHECK_OK(dl_trial_suggest_int(t, "k", -3, 3, 0, &k));
            CHECK_OK(dl_trial_suggest_choice(t, "act", acts, 3, &a));
            CHECK(x >= -2.5 && x <= 4.0);
            CHECK(lr >= 1e-5 && lr <= 1e-1);
            CHECK(h >= 16 && h <= 1024);
            CHECK(k >= -3 && k <= 3);
            CHECK(a >= 0 && a < 3);
            const dl_tune_param *p = dl_trial_param_find(t, "hidden");
            CHECK(p && p->kind == DL_PARAM_INT && p->value == (double)h);
            p = dl_trial_param_find(t, "act");
            CHECK(p && p->kind == DL_PARAM_CHOICE && strcmp(p->choices[a], acts[a]) == 0);
            double again;
            CHECK_OK(dl_trial_suggest_float(t, "x", -2.5, 4.0, 0, &again));
            CHECK(again == x);
            double y =
                (x - 1) * (x - 1) + fabs(log10(lr) + 3) + (double)(h % 7) + (double)(k * k) + a;
            CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, y));
        }
        CHECK(dl_study_count(s) == 60);
        dl_study_destroy(s);
    }
}

static void test_bad_arguments(void)
{
    dl_study *s;
    CHECK_OK(dl_study_open(&s, NULL, "bad", DL_STUDY_MINIMIZE, NULL, NULL, 1));
    dl_trial *t;
    CHECK_OK(dl_study_ask(s, &t));
    double v;
    long n;
    int c;
    CHECK(dl_trial_suggest_float(t, "x", 2, 1, 0, &v) == DL_EINVAL);
    CHECK(dl_trial_suggest_float(t, "x", 0, 1, 1, &v) == DL_EINVAL);
    CHECK(dl_trial_suggest_int(t, "n", 0, 10, 1, &n) == DL_EINVAL);
    CHECK(dl_trial_suggest_choice(t, "c", NULL, 0, &c) == DL_EINVAL);
    CHECK_OK(dl_trial_suggest_float(t, "x", 0, 1, 0, &v));
    CHECK(dl_trial_suggest_float(t, "x", 0, 2, 0, &v) == DL_EINVAL);
    CHECK(strstr(dl_error_message(), "\"x\"") != NULL);
    CHECK_OK(dl_trial_suggest_float(t, "fixed", 3, 3, 0, &v));
    CHECK(v == 3);
    /* a non-finite objective fails the trial */
    CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, NAN));
    CHECK(dl_trial_state_of(t) == DL_TRIAL_FAILED);
    CHECK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, 1.0) == DL_EINVAL);
    CHECK(dl_study_best(s) == NULL);
    dl_study_destroy(s);
    dl_sampler_config sc;
    dl_pruner_config pc;
    CHECK(dl_tune_sampler_parse("bayes", &sc) == DL_EINVAL);
    CHECK_OK(dl_tune_sampler_parse("grid", &sc));
    CHECK(sc.kind == DL_SAMPLER_GRID);
    CHECK_OK(dl_tune_pruner_parse("successive_halving", &pc));
    CHECK(pc.kind == DL_PRUNER_ASHA);
    CHECK(dl_study_open(&s, NULL, "a/b", DL_STUDY_MINIMIZE, NULL, NULL, 1) == DL_EINVAL);
}

/* Runs n trials of f(x, y) = (x - 1.3)^2 + (y + 0.7)^2 on [-5, 5]^2 and
 * returns the best value; xs records the suggestions when not NULL. */
static double run_quadratic(int kind, uint64_t seed, int n, double *xs)
{
    dl_sampler_config sc = sampler(kind);
    dl_study *s;
    if (dl_study_open(&s, NULL, "quad", DL_STUDY_MINIMIZE, &sc, NULL, seed) < 0)
        return NAN;
    for (int i = 0; i < n; i++) {
        dl_trial *t;
        double x, y;
        if (dl_study_ask(s, &t) < 0 || dl_trial_suggest_float(t, "x", -5, 5, 0, &x) < 0 ||
            dl_trial_suggest_float(t, "y", -5, 5, 0, &y) < 0)
            break;
        if (xs)
            xs[i] = x;
        dl_study_tell(s, t, DL_TRIAL_COMPLETE, (x - 1.3) * (x - 1.3) + (y + 0.7) * (y + 0.7));
    }
    const dl_trial *b = dl_study_best(s);
    double best = b ? dl_trial_value(b) : NAN;
    dl_study_destroy(s);
    return best;
}

static void test_same_seed_same_suggestions(void)
{
    for (int kind = DL_SAMPLER_RANDOM; kind <= DL_SAMPLER_TPE; kind += 2) {
        double a[30], b[30], c[30];
        run_quadratic(kind, 42, 30, a);
        run_quadratic(kind, 42, 30, b);
        run_quadratic(kind, 43, 30, c);
        int same = 1, differ = 0;
        for (int i = 0; i < 30; i++) {
            same &= a[i] == b[i];
            differ += a[i] != c[i];
        }
        CHECK_MSG(same, "sampler %d", kind);
        CHECK_MSG(differ > 25, "sampler %d: %d of 30 differ", kind, differ);
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void test_tpe_beats_random(void)
{
    enum { SEEDS = 9, N = 50 };
    double r[SEEDS], t[SEEDS];
    for (int i = 0; i < SEEDS; i++) {
        r[i] = run_quadratic(DL_SAMPLER_RANDOM, 100 + i, N, NULL);
        t[i] = run_quadratic(DL_SAMPLER_TPE, 100 + i, N, NULL);
    }
    qsort(r, SEEDS, sizeof *r, cmp_d);
    qsort(t, SEEDS, sizeof *t, cmp_d);
    CHECK_MSG(t[SEEDS / 2] < 0.5 * r[SEEDS / 2], "median best: TPE %g, random %g", t[SEEDS / 2],
              r[SEEDS / 2]);
}

static void test_grid_covers_space_once(void)
{
    const char *opt[] = {"sgd", "adam", "adamw"};
    dl_sampler_config sc = sampler(DL_SAMPLER_GRID);
    dl_study *s;
    CHECK_OK(dl_study_open(&s, NULL, "grid", DL_STUDY_MINIMIZE, &sc, NULL, 0));
    int seen[3][4] = {{0}}, asked = 0;
    for (;;) {
        dl_trial *t;
        int rc = dl_study_ask(s, &t);
        CHECK(rc >= 0);
        if (rc != DL_OK || asked > 20)
            break;
        asked++;
        int o;
        long k;
        CHECK_OK(dl_trial_suggest_choice(t, "opt", opt, 3, &o));
        CHECK_OK(dl_trial_suggest_int(t, "k", 1, 4, 0, &k));
        seen[o][k - 1]++;
        CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, (double)(o + k)));
    }
    CHECK(asked == 12);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            CHECK(seen[i][j] == 1);
    dl_study_destroy(s);
}

static void test_reuse_equal_parameters(void)
{
    const char *c[] = {"a", "b"};
    dl_sampler_config sc = sampler(DL_SAMPLER_RANDOM);
    dl_study *s;
    CHECK_OK(dl_study_open(&s, NULL, "reuse", DL_STUDY_MAXIMIZE, &sc, NULL, 5));
    int reused = 0, trained = 0;
    for (int i = 0; i < 20; i++) {
        dl_trial *t;
        int k;
        long n;
        CHECK_OK(dl_study_ask(s, &t));
        CHECK_OK(dl_trial_suggest_choice(t, "c", c, 2, &k));
        CHECK_OK(dl_trial_suggest_int(t, "n", 1, 2, 0, &n));
        int rc = dl_study_reuse(s, t);
        CHECK(rc >= 0);
        if (rc == 1) {
            reused++;
            CHECK(dl_trial_state_of(t) == DL_TRIAL_COMPLETE);
            CHECK(dl_trial_value(t) == (double)(10 * k + n));
            CHECK(dl_trial_attr(t, "reused_from") != NULL);
            continue;
        }
        trained++;
        CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, (double)(10 * k + n)));
    }
    CHECK_MSG(trained <= 4 && reused == 20 - trained, "trained %d reused %d", trained, reused);
    const dl_trial *b = dl_study_best(s);
    CHECK(b && dl_trial_value(b) == 12);
    dl_study_destroy(s);
}

/* --- pruners ------------------------------------------------------------------- */

/* Feeds trial curves c_i / (1 + step) for steps 0..steps-1, telling each
 * trial complete or pruned; returns a bitmask of the pruned trials. */
static unsigned run_curves(const dl_pruner_config *pc, const double *c, int n, int steps,
                           int direction)
{
    dl_study *s;
    unsigned pruned = 0;
    if (dl_study_open(&s, NULL, "curves", direction, NULL, pc, 0) < 0)
        return ~0u;
    for (int i = 0; i < n; i++) {
        dl_trial *t;
        if (dl_study_ask(s, &t) < 0)
            break;
        double v = NAN;
        int stop = 0;
        for (int st = 0; st < steps && !stop; st++) {
            v = c[i] / (1.0 + st);
            if (direction == DL_STUDY_MAXIMIZE)
                v = -v;
            dl_trial_report(t, st, v);
            stop = dl_trial_should_prune(t) == 1;
        }
        if (stop)
            pruned |= 1u << i;
        dl_study_tell(s, t, stop ? DL_TRIAL_PRUNED : DL_TRIAL_COMPLETE, stop ? NAN : v);
    }
    dl_study_destroy(s);
    return pruned;
}

static void test_median_pruner(void)
{
    dl_pruner_config pc = dl_tune_pruner_defaults(DL_PRUNER_MEDIAN);
    pc.min_trials = 3;
    pc.warmup_steps = 2;
    /* three complete first; then worse (5), better (1.5), worse (2.5), NaN-free best (0.5) */
    const double c[] = {1, 2, 3, 5, 1.5, 2.5, 0.5};
    unsigned p = run_curves(&pc, c, 7, 6, DL_STUDY_MINIMIZE);
    CHECK_MSG(p == ((1u << 3) | (1u << 5)), "pruned mask 0x%x", p);
    /* the same with maximize (values negated) */
    p = run_curves(&pc, c, 7, 6, DL_STUDY_MAXIMIZE);
    CHECK_MSG(p == ((1u << 3) | (1u << 5)), "maximize: pruned mask 0x%x", p);
    /* not before the warm-up: a trial stopped at step 1 is never judged */
    dl_study *s;
    CHECK_OK(dl_study_open(&s, NULL, "warm", DL_STUDY_MINIMIZE, NULL, &pc, 0));
    for (int i = 0; i < 4; i++) {
        dl_trial *t;
        CHECK_OK(dl_study_ask(s, &t));
        for (int st = 0; st < 2; st++) {
            CHECK_OK(dl_trial_report(t, st, i < 3 ? 1.0 : 100.0));
            CHECK(dl_trial_should_prune(t) == 0);
        }
        CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, 1.0));
    }
    dl_study_destroy(s);
}

static void test_asha_pruner(void)
{
    dl_pruner_config pc = dl_tune_pruner_defaults(DL_PRUNER_ASHA);
    pc.reduction_factor = 2;
    pc.min_resource = 1;
    /* rungs at steps 1, 2, 4. Trial 0 alone goes on; trial 1 (worse) stops
     * at rung 0; trial 2 (best) goes on; trial 3 is second of four at rung 0
     * (keep 2) but second of three at rung 1 (keep 1): stops at step 2. */
    const double c[] = {2, 3, 1, 1.5};
    unsigned p = run_curves(&pc, c, 4, 6, DL_STUDY_MINIMIZE);
    CHECK_MSG(p == ((1u << 1) | (1u << 3)), "pruned mask 0x%x", p);
    /* where each stopped */
    dl_study *s;
    CHECK_OK(dl_study_open(&s, NULL, "asha", DL_STUDY_MINIMIZE, NULL, &pc, 0));
    long stopped[4] = {0};
    for (int i = 0; i < 4; i++) {
        dl_trial *t;
        CHECK_OK(dl_study_ask(s, &t));
        int st;
        for (st = 0; st < 6; st++) {
            CHECK_OK(dl_trial_report(t, st, c[i] / (1.0 + st)));
            if (dl_trial_should_prune(t) == 1)
                break;
        }
        stopped[i] = st;
        CHECK_OK(dl_study_tell(s, t, st < 6 ? DL_TRIAL_PRUNED : DL_TRIAL_COMPLETE,
                               st < 6 ? NAN : c[i] / 6));
    }
    CHECK(stopped[0] == 6 && stopped[1] == 1 && stopped[2] == 6 && stopped[3] == 2);
    CHECK(dl_trial_state_of(dl_study_trial(s, 1)) == DL_TRIAL_PRUNED);
    CHECK_NEAR(dl_trial_value(dl_study_trial(s, 1)), 1.5, 1e-12); /* last report */
    dl_study_destroy(s);
}

/* --- persistence --------------------------------------------------------------------- */

static double objective(dl_trial *t, double *x_out)
{
    double x, y;
    long k;
    if (dl_trial_suggest_float(t, "x", -3, 3, 0, &x) < 0 ||
        dl_trial_suggest_float(t, "y", 1e-3, 1, 1, &y) < 0 ||
        dl_trial_suggest_int(t, "k", 1, 5, 0, &k) < 0)
        return NAN;
    if (x_out)
        *x_out = x;
    return x * x + log(y) * log(y) + (double)k;
}

/* A child that completes `complete` trials, then starts one, suggests and
 * reports, and dies without telling it. */
static void child_dies_mid_trial(const char *dir, int complete)
{
    dl_study *s;
    dl_sampler_config sc = sampler(DL_SAMPLER_TPE);
    if (dl_study_open(&s, dir, "resume", DL_STUDY_MINIMIZE, &sc, NULL, 9) < 0)
        _exit(2);
    for (int i = 0; i < complete; i++) {
        dl_trial *t;
        if (dl_study_ask(s, &t) != DL_OK)
            _exit(3);
        dl_study_tell(s, t, DL_TRIAL_COMPLETE, objective(t, NULL));
    }
    dl_trial *t;
    if (dl_study_ask(s, &t) != DL_OK)
        _exit(4);
    objective(t, NULL);
    dl_trial_report(t, 0, 1.0);
    _exit(0); /* killed mid-trial: no tell, no destroy */
}

static void test_resume_after_kill(void)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/resume", tmp_root);
    pid_t pid = fork();
    if (pid == 0)
        child_dies_mid_trial(dir, 6);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    dl_study *s;
    dl_sampler_config sc = sampler(DL_SAMPLER_TPE);
    CHECK_OK(dl_study_open(&s, dir, "resume", DL_STUDY_MINIMIZE, &sc, NULL, 9));
    if (!s)
        return;
    CHECK(dl_study_count(s) == 7);
    double before[6];
    for (int i = 0; i < 6; i++) {
        const dl_trial *t = dl_study_trial(s, i);
        CHECK(dl_trial_state_of(t) == DL_TRIAL_COMPLETE);
        before[i] = dl_trial_value(t);
    }
    const dl_trial *lost = dl_study_trial(s, 6);
    CHECK(dl_trial_state_of(lost) == DL_TRIAL_FAILED);
    CHECK(dl_trial_attr(lost, "reason") && strstr(dl_trial_attr(lost, "reason"), "lost"));
    double lost_x = dl_trial_param_find(lost, "x")->value;
    dl_study_set_budget(s, 12);
    int asked = 0;
    double first_x = NAN;
    for (;;) {
        dl_trial *t;
        int rc = dl_study_ask(s, &t);
        CHECK(rc >= 0);
        if (rc != DL_OK || asked > 12)
            break;
        double x, v = objective(t, &x);
        if (asked++ == 0)
            first_x = x;
        CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, v));
    }
    CHECK_MSG(asked == 6, "asked %d", asked); /* 12 - 6 complete; the failed one does not count */
    CHECK(first_x == lost_x);                 /* the lost trial's parameters, queued again */
    dl_study_destroy(s);

    /* reopened: nothing lost, nothing repeated, nothing skipped */
    CHECK_OK(dl_study_open(&s, dir, "resume", DL_STUDY_MINIMIZE, &sc, NULL, 9));
    if (!s)
        return;
    int complete = 0;
    for (int i = 0; i < dl_study_count(s); i++) {
        const dl_trial *t = dl_study_trial(s, i);
        CHECK(dl_trial_number(t) == i);
        complete += dl_trial_state_of(t) == DL_TRIAL_COMPLETE;
        if (i < 6)
            CHECK(dl_trial_value(t) == before[i]);
    }
    CHECK(complete == 12 && dl_study_count(s) == 13);
    CHECK(dl_study_skipped_lines(s) == 0);
    dl_study_set_budget(s, 12);
    dl_trial *t;
    CHECK(dl_study_ask(s, &t) == DL_STUDY_DONE);
    /* the direction is the study's */
    dl_study *m;
    CHECK(dl_study_open(&m, dir, "resume", DL_STUDY_MAXIMIZE, NULL, NULL, 9) == DL_EINVAL);
    dl_study_destroy(s);
}

static void test_torn_last_line(void)
{
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/torn", tmp_root);
    dl_study *s;
    CHECK_OK(dl_study_open(&s, dir, "t", DL_STUDY_MINIMIZE, NULL, NULL, 1));
    if (!s)
        return;
    for (int i = 0; i < 3; i++) {
        dl_trial *t;
        CHECK_OK(dl_study_ask(s, &t));
        CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, objective(t, NULL)));
    }
    dl_study_destroy(s);
    snprintf(path, sizeof path, "%s/t/journal.jsonl", dir);
    int fd = open(path, O_WRONLY | O_APPEND);
    CHECK(fd >= 0);
    const char torn[] = "{\"op\":\"finish\",\"trial\":2,\"state\":\"fa";
    CHECK(write(fd, torn, sizeof torn - 1) == (ssize_t)(sizeof torn - 1));
    close(fd);
    CHECK_OK(dl_study_open(&s, dir, "t", DL_STUDY_MINIMIZE, NULL, NULL, 1));
    if (!s)
        return;
    CHECK(dl_study_skipped_lines(s) == 1);
    /* named by its line: 1 study record, then 3 trials of ask/params/finish... */
    long lines = 0;
    FILE *f = fopen(path, "r");
    for (int c; f && (c = getc(f)) != EOF;)
        lines += c == '\n';
    if (f)
        fclose(f);
    CHECK_MSG(dl_study_first_skipped_line(s) == lines, "first skipped %ld, journal lines %ld",
              dl_study_first_skipped_line(s), lines);
    CHECK(dl_study_count(s) == 3 && dl_trial_state_of(dl_study_trial(s, 2)) == DL_TRIAL_COMPLETE);
    dl_trial *t;
    CHECK_OK(dl_study_ask(s, &t));
    CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, 0.5));
    dl_study_destroy(s);
    CHECK_OK(dl_study_open(&s, dir, "t", DL_STUDY_MINIMIZE, NULL, NULL, 1));
    if (!s)
        return;
    CHECK(dl_study_count(s) == 4 && dl_study_skipped_lines(s) == 1);
    CHECK(dl_study_best(s) && dl_trial_number(dl_study_best(s)) == 3);
    dl_study_destroy(s);
}

/* A writer killed between a whole record and its newline: the record is
 * kept (applied, the line terminated), nothing is skipped. */
static void test_torn_newline_only(void)
{
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/torn-nl", tmp_root);
    dl_study *s;
    CHECK_OK(dl_study_open(&s, dir, "t", DL_STUDY_MINIMIZE, NULL, NULL, 1));
    if (!s)
        return;
    for (int i = 0; i < 2; i++) {
        dl_trial *t;
        CHECK_OK(dl_study_ask(s, &t));
        CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, 1.0 - i));
    }
    dl_study_destroy(s);
    snprintf(path, sizeof path, "%s/t/journal.jsonl", dir);
    struct stat st;
    CHECK(stat(path, &st) == 0 && truncate(path, st.st_size - 1) == 0);
    CHECK_OK(dl_study_open(&s, dir, "t", DL_STUDY_MINIMIZE, NULL, NULL, 1));
    if (!s)
        return;
    CHECK(dl_study_skipped_lines(s) == 0 && dl_study_first_skipped_line(s) == 0);
    CHECK(dl_study_count(s) == 2 && dl_trial_state_of(dl_study_trial(s, 1)) == DL_TRIAL_COMPLETE);
    CHECK(dl_study_best(s) && dl_trial_number(dl_study_best(s)) == 1);
    dl_trial *t;
    CHECK_OK(dl_study_ask(s, &t));
    CHECK_OK(dl_study_tell(s, t, DL_TRIAL_COMPLETE, 0.5));
    dl_study_destroy(s);
    CHECK_OK(dl_study_open(&s, dir, "t", DL_STUDY_MINIMIZE, NULL, NULL, 1));
    if (!s)
        return;
    CHECK(dl_study_count(s) == 3 && dl_study_skipped_lines(s) == 0);
    dl_study_destroy(s);
}

/* Each worker asks, suggests, reports, checks pruning and tells until the
 * budget is spent. */
static void worker(const char *dir, uint64_t seed)
{
    dl_study *s;
    dl_pruner_config pc = dl_tune_pruner_defaults(DL_PRUNER_MEDIAN);
    if (dl_study_open(&s, dir, "conc", DL_STUDY_MINIMIZE, NULL, &pc, seed) < 0)
        _exit(2);
    dl_study_set_budget(s, 60);
    for (;;) {
        dl_trial *t;
        int rc = dl_study_ask(s, &t);
        if (rc == DL_STUDY_DONE)
            break;
        if (rc < 0)
            _exit(3);
        double v = objective(t, NULL);
        for (int st = 0; st < 3; st++) {
            if (dl_trial_report(t, st, v + 1.0 / (st + 1)) < 0 || dl_trial_should_prune(t) < 0)
                _exit(4);
        }
        if (dl_study_tell(s, t, DL_TRIAL_COMPLETE, v) < 0)
            _exit(5);
    }
    dl_study_destroy(s);
    _exit(0);
}

static void test_concurrent_workers(void)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/conc", tmp_root);
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            worker(dir, 77); /* the same seed: trial numbers keep them apart */
    }
    for (int i = 0; i < 3; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d status %d", i, status);
    }
    dl_study *s;
    CHECK_OK(dl_study_open(&s, dir, "conc", DL_STUDY_MINIMIZE, NULL, NULL, 0));
    if (!s)
        return;
    CHECK_MSG(dl_study_count(s) == 60, "%d trials", dl_study_count(s));
    CHECK(dl_study_skipped_lines(s) == 0);
    int complete = 0, pids_seen = 0;
    for (int i = 0; i < dl_study_count(s); i++) {
        const dl_trial *t = dl_study_trial(s, i);
        CHECK(dl_trial_number(t) == i);
        CHECK(dl_trial_param_count(t) == 3);
        CHECK(dl_trial_intermediate(t, NULL, NULL, 0) == 3);
        complete += dl_trial_state_of(t) == DL_TRIAL_COMPLETE;
    }
    CHECK(complete == 60);
    /* the same x twice would mean two workers sampled one trial */
    for (int i = 0; i < dl_study_count(s); i++)
        for (int j = i + 1; j < dl_study_count(s); j++)
            pids_seen += dl_trial_param(dl_study_trial(s, i), 0)->value ==
                         dl_trial_param(dl_study_trial(s, j), 0)->value;
    CHECK(pids_seen == 0);
    dl_study_destroy(s);
}

int main(void)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/dl_test_tune.XXXXXX");
    if (!mkdtemp(tmp_root)) {
        printf("FAIL main: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    RUN(test_bounds_and_types);
    RUN(test_bad_arguments);
    RUN(test_same_seed_same_suggestions);
    RUN(test_tpe_beats_random);
    RUN(test_grid_covers_space_once);
    RUN(test_reuse_equal_parameters);
    RUN(test_median_pruner);
    RUN(test_asha_pruner);
    RUN(test_resume_after_kill);
    RUN(test_torn_last_line);
    RUN(test_torn_newline_only);
    RUN(test_concurrent_workers);
    rm_rf(tmp_root);
    CHECK_EXIT();
}
