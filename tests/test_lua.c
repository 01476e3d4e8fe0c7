/* test_lua.c - the Lua bindings: runs every tests/lua/NAME.lua through the embedded interpreter, plus script loading and the session's profile mode from C */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/error.h"
#include "scripting/script.h"
#include "scripting/session.h"
#include "tests/check.h"

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Each Lua test script prints its own PASS/FAIL lines per case. */
static int run_lua_scripts(void)
{
    DIR *d = opendir("tests/lua");
    if (!d) {
        printf("FAIL tests/lua: folder missing (run from the repository root)\n");
        return 1;
    }
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".lua"))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    int passed = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof path, "tests/lua/%s", names[i]);
        dl_script_run_tests(path, &passed, &failed);
        fflush(stdout);
        free(names[i]);
    }
    check_passed_tests += passed;
    check_failed_tests += failed;
    return failed;
}

static void test_load_spirals_with_overrides(void)
{
    char *ov[] = {"hidden=16", "lr=0.5", "epochs=2"};
    dl_script_options o = {"scripts/spirals.lua", ov, 3, 0};
    dl_script *s = NULL;
    CHECK_OK(dl_script_load(&s, &o));
    if (!s)
        return;
    dl_experiment *e = dl_script_experiment(s);
    CHECK(!strcmp(e->name, "spirals"));
    CHECK(e->cfg.epochs == 2);
    CHECK_NEAR(e->optim.lr, 0.5, 1e-7);
    CHECK(e->data.kind == DL_DATA_SYNTHETIC);
    CHECK(strstr(e->model_text, "Linear(2, 16)") != NULL);
    int found = 0;
    for (int i = 0; i < e->nhp; i++)
        if (!strcmp(e->hp[i].name, "hidden")) {
            found = 1;
            CHECK(e->hp[i].type == DL_HP_INTEGER && e->hp[i].num == 16 && e->hp[i].overridden);
        }
    CHECK(found);
    for (int i = 1; i < e->nhp; i++)
        CHECK(strcmp(e->hp[i - 1].name, e->hp[i].name) < 0); /* sorted */
    dl_layer *m = dl_script_take_model(s);
    CHECK(m != NULL);
    dl_layer_destroy(m);
    dl_script_destroy(s);
}

static void test_unknown_override_lists_known(void)
{
    char *ov[] = {"hiden=3"};
    dl_script_options o = {"scripts/spirals.lua", ov, 1, 0};
    dl_script *s = NULL;
    CHECK(dl_script_load(&s, &o) == DL_EINVAL);
    CHECK(s == NULL);
    CHECK_MSG(strstr(dl_error_message(), "unknown hyperparameter 'hiden'") &&
                  strstr(dl_error_message(), "batch, epochs, hidden, lr"),
              "%s", dl_error_message());
}

static void test_missing_script(void)
{
    dl_script_options o = {"tests/lua/no-such-script.lua", NULL, 0, 0};
    dl_script *s = NULL;
    CHECK(dl_script_load(&s, &o) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "no-such-script.lua"), "%s", dl_error_message());
}

static void test_instruction_limit(void)
{
    dl_script_options o = {"tests/bad_scripts/endless_loop.lua", NULL, 0, 2000000};
    dl_script *s = NULL;
    CHECK(dl_script_load(&s, &o) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "endless_loop.lua:4:") &&
                  strstr(dl_error_message(), "endless loop"),
              "%s", dl_error_message());
}

static void test_study_is_recognised(void)
{
    dl_script_options o = {"scripts/fmnist_tune.lua", NULL, 0, 0};
    dl_script *s = NULL;
    CHECK_OK(dl_script_load_study(&s, &o, NULL, 1));
    if (s) {
        const dl_experiment *e = dl_script_experiment(s);
        CHECK(e->is_study && e->model == NULL);
        CHECK(!strcmp(e->study.metric, "val_acc") && e->study.maximize);
        CHECK(!strcmp(e->study.sampler, "tpe") && !strcmp(e->study.pruner, "median"));
    }
    dl_script_destroy(s);
}

/* dlbench run on a study: a fixed trial from the k=v overrides */
static void test_study_fixed_trial(void)
{
    char *ov[] = {"lr=0.05", "hidden=16", "act=relu", "epochs=2"};
    dl_script_options o = {"scripts/spirals_tune.lua", ov, 4, 0};
    dl_script *s = NULL;
    CHECK_OK(dl_script_load(&s, &o));
    if (s) {
        dl_experiment *e = dl_script_experiment(s);
        CHECK(e->is_study && e->model != NULL && e->cfg.epochs == 2);
        CHECK_NEAR(e->optim.lr, 0.05, 1e-7);
        CHECK(strstr(e->model_text, "Linear(2, 16)") != NULL);
        CHECK(e->ntrial_params == 3 && e->trial_number == -1);
        CHECK(!strcmp(e->trial_params[0].name, "lr") && e->trial_params[0].num == 0.05);
        CHECK(e->trial_params[1].type == DL_HP_INTEGER && e->trial_params[1].num == 16);
        CHECK(e->trial_params[2].type == DL_HP_STRING && !strcmp(e->trial_params[2].str, "relu"));
    }
    dl_script_destroy(s);
    char *missing[] = {"lr=0.05"};
    dl_script_options m = {"scripts/spirals_tune.lua", missing, 1, 0};
    CHECK(dl_script_load(&s, &m) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "spirals_tune.lua:") &&
                  strstr(dl_error_message(), "study parameter 'hidden' has no value") &&
                  strstr(dl_error_message(), "dlbench tune"),
              "%s", dl_error_message());
    char *unknown[] = {"lr=0.05", "hidden=16", "act=relu", "depth=3"};
    dl_script_options u = {"scripts/spirals_tune.lua", unknown, 4, 0};
    CHECK(dl_script_load(&s, &u) == DL_EINVAL);
    CHECK_MSG(strstr(dl_error_message(), "unknown hyperparameter 'depth'"), "%s",
              dl_error_message());
}

/* The session's mode for dlbench profile: the trainer fitted to the steps
 * asked for, the script's own settings kept, nothing written. */
static void test_session_profile_mode(void)
{
    char *ov[] = {"epochs=1", "n=300"};
    dl_session_options o;
    memset(&o, 0, sizeof o);
    o.script = "scripts/spirals.lua";
    o.overrides = ov;
    o.noverrides = 2;
    o.device = "cpu";
    o.seed = -1;
    o.out_dir = "build/tests/profile-mode-runs";
    o.profile_steps = 12;
    rmdir(o.out_dir);
    dl_session *s = NULL;
    CHECK_OK(dl_session_prepare(&s, &o));
    if (s && dl_session_trainer(s)) {
        const dl_trainer_config *c = dl_trainer_config_of(dl_session_trainer(s));
        long per_epoch = dl_session_steps_per_epoch(s);
        CHECK(c->max_steps == 12 && c->log_every == 1);
        CHECK(per_epoch > 0 && per_epoch < 12 && (long)c->epochs * per_epoch >= 12);
        CHECK(dl_script_experiment(dl_session_script(s))->cfg.epochs == 1);
        CHECK(dl_session_run_dir(s) == NULL);
    }
    dl_session_destroy(s);
    CHECK(access(o.out_dir, F_OK) < 0);
}

int main(void)
{
    run_lua_scripts();
    RUN(test_load_spirals_with_overrides);
    RUN(test_unknown_override_lists_known);
    RUN(test_missing_script);
    RUN(test_instruction_limit);
    RUN(test_study_is_recognised);
    RUN(test_study_fixed_trial);
    RUN(test_session_profile_mode);
    CHECK_EXIT();
}
