/* watch.c - `dlbench watch [RUN]`: the workbench's views drawn from a run folder, commands through its socket */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/observe/telemetry.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog.h"
#include "tui/app.h"
#include "tui/cmd/commands.h"
#include "tui/control.h"
#include "tui/tables.h"

/* This command's row of the table (its options and help), set on entry. */
static const dl_command *this_cmd;

typedef struct watch {
    dl_telemetry *tele;
    dl_tele_follow fw;
    const char *out_dir;
    int quit;
} watch;

static void sample(void *user, dl_screen *scr)
{
    watch *w = user;
    dl_telemetry_follow(w->tele, &w->fw);
    char path[1200];
    struct stat st;
    dl_rundir_path(w->fw.dir, DL_RUN_FILE_CONTROL, path, sizeof path);
    scr->live = stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
    snprintf(scr->source, sizeof scr->source, "watch");
    snprintf(scr->prof_note, sizeof scr->prof_note,
             "no " DL_RUN_FILE_PROFILE " in the run (dlbench profile SCRIPT writes one)");
}

/* Sends one command and logs the reply. */
static void send_cmd(watch *w, cJSON *j)
{
    char *line = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!line)
        return;
    char reply[1024];
    if (dl_control_send(w->fw.dir, line, reply, sizeof reply) < 0) {
        dl_telemetry_event(w->tele, "error", reply);
    } else {
        cJSON *r = cJSON_Parse(reply);
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(r, "ok");
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(r, "error");
        if (cJSON_IsTrue(ok)) {
            char msg[300];
            snprintf(msg, sizeof msg, "sent %s", line);
            dl_telemetry_event(w->tele, "info", msg);
        } else {
            dl_telemetry_event(w->tele, "error", cJSON_IsString(err) ? err->valuestring : reply);
        }
        cJSON_Delete(r);
    }
    free(line);
}

static cJSON *cmd(const char *name)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "cmd", name);
    return j;
}

static void action(void *user, dl_action a, const char *arg)
{
    watch *w = user;
    cJSON *j;
    switch (a) {
    case DL_ACT_QUIT: w->quit = 1; return;
    case DL_ACT_START:
        dl_telemetry_event(w->tele, "info", "watch cannot start runs: dlbench SCRIPT does");
        return;
    case DL_ACT_LUA:
        dl_telemetry_event(w->tele, "info", "the Lua prompt is only in the workbench that trains");
        return;
    case DL_ACT_PAUSE: send_cmd(w, cmd(arg && !strcmp(arg, "resume") ? "resume" : "pause")); return;
    case DL_ACT_GPU:
    case DL_ACT_CPU:
        j = cmd("device");
        cJSON_AddStringToObject(j, "device", a == DL_ACT_GPU ? "cuda" : "cpu");
        send_cmd(w, j);
        return;
    case DL_ACT_CHECKPOINT: send_cmd(w, cmd("checkpoint")); return;
    case DL_ACT_PARITY: send_cmd(w, cmd("parity")); return;
    case DL_ACT_PROBE: send_cmd(w, cmd("probe")); return;
    case DL_ACT_NOTE: {
        char reply[1024];
        j = cmd("note");
        cJSON_AddStringToObject(j, "text", arg);
        char *line = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
        /* a live run logs it itself; a finished one gets it appended */
        if (line && dl_control_send(w->fw.dir, line, reply, sizeof reply) < 0 &&
            dl_runlog_append_event(w->fw.dir, "note", arg) < 0)
            dl_telemetry_event(w->tele, "error", dl_error_message());
        free(line);
    }
        return;
    case DL_ACT_HPARAMS:
        if (!strncmp(arg, "lr=", 3)) {
            char *end;
            double lr = strtod(arg + 3, &end);
            j = cmd("lr");
            cJSON_AddNumberToObject(j, "value", lr);
            send_cmd(w, j);
        } else {
            dl_telemetry_event(w->tele, "info", "watch changes only lr=VALUE of a live run");
        }
        return;
    }
}

static int busy(void *user)
{
    (void)user;
    return 0;
}
static int done(void *user) { return ((watch *)user)->quit; }

int dl_cmd_watch(const dl_command *self, int argc, char **argv)
{
    this_cmd = self;
    watch w;
    memset(&w, 0, sizeof w);
    w.out_dir = "runs";
    const char *run = NULL, *study = NULL;
    int no_mouse = 0;
    dl_opts args;
    dl_command_opts(&args, this_cmd, argc, argv);
    for (int id; (id = dl_opts_next(&args)) != DL_OPTS_END;) {
        if (id == DL_OPTS_ERROR) {
            return DL_EXIT_USAGE;
        } else if (id == DL_OPT_HELP) {
            dl_command_usage(this_cmd, stdout);
            return DL_EXIT_OK;
        } else if (id == DL_OPT_OUT) {
            w.out_dir = args.value;
        } else if (id == DL_OPT_STUDY) {
            study = args.value;
        } else if (id == DL_OPT_NO_MOUSE) {
            no_mouse = 1;
        } else if (!run) {
            run = args.value;
        } else {
            fprintf(stderr, "dlbench watch: one run at a time\n");
            return DL_EXIT_USAGE;
        }
    }
    if (run) {
        /* a run folder given as a path is taken as it is */
        if (dl_runlog_resolve(w.out_dir, run, w.fw.dir, sizeof w.fw.dir) != DL_OK) {
            fprintf(stderr, "dlbench watch: %s\n", dl_error_message());
            return DL_EXIT_USAGE;
        }
    } else if (dl_runlog_newest(w.out_dir, w.fw.dir, sizeof w.fw.dir) < 0 && !study) {
        fprintf(stderr, "dlbench watch: no runs in %s/ (give a run folder)\n", w.out_dir);
        return DL_EXIT_USAGE;
    }
    if (study) {
        char studies[1100];
        static char name[128];
        snprintf(studies, sizeof studies, "%s/studies", w.out_dir);
        const char *want = strcmp(study, "auto") ? study : NULL;
        if (dl_tables_pick_study(studies, want, name, sizeof name) < 0 ||
            (want && strcmp(name, want))) {
            fprintf(stderr,
                    "dlbench watch: no study %s in %s/ (dlbench tune SCRIPT --out %s "
                    "makes one)\n",
                    want ? want : "at all", studies, w.out_dir);
            return DL_EXIT_USAGE;
        }
        study = name;
    }
    size_t l = strlen(w.fw.dir);
    while (l > 1 && w.fw.dir[l - 1] == '/')
        w.fw.dir[--l] = 0;
    if (dl_telemetry_create(&w.tele) < 0)
        return 1;
    if (w.fw.dir[0] && dl_telemetry_follow(w.tele, &w.fw) < 0) {
        fprintf(stderr, "dlbench watch: %s is not a run folder (no " DL_RUN_FILE_CONFIG ")\n",
                w.fw.dir);
        dl_telemetry_destroy(w.tele);
        return DL_EXIT_USAGE;
    }
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "dlbench watch: needs a terminal (the run's files are in %s)\n",
                w.fw.dir[0] ? w.fw.dir : w.out_dir);
        dl_telemetry_destroy(w.tele);
        return DL_EXIT_USAGE;
    }
    dl_telemetry_set_gpu_status(w.tele, "no " DL_RUN_FILE_SYSTEM " samples in the run");
    dl_telemetry_event(w.tele, "info", w.fw.dir[0] ? w.fw.dir : "no run folder yet");
    dl_app_ops ops = {&w,     w.tele, w.out_dir, study, study != NULL, sample,
                      action, busy,   done,      1,     no_mouse};
    dl_app_end end = dl_app_run(&ops, STDOUT_FILENO);
    dl_telemetry_destroy(w.tele);
    return end == DL_APP_ERROR ? DL_EXIT_FAILED : DL_EXIT_OK;
}
