/* fuzz_runlog.c - libFuzzer target: the run folder's readers (config.json, summary.json, metrics.jsonl on resume, the record readers, runs table)
 *
 * The input is split at the first two 0xff bytes into config.json,
 * summary.json and metrics.jsonl of a run folder; then the folder is read
 * as --resume and `dlbench runs` read it.
 */
#include <stdint.h>

#include <cjson/cJSON.h>

#include "engine/base/error.h"
#include "engine/rundir/records.h"
#include "engine/rundir/runlog.h"
#include "tests/fuzz/fuzz_common.h"
#include "tui/cmd/commands.h"

static void count_record(void *user, const dl_run_metrics *m)
{
    (void)user;
    (void)m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[3] = {data, NULL, NULL};
    size_t len[3] = {size, 0, 0};
    for (int k = 1; k < 3; k++) {
        const uint8_t *sep = memchr(part[k - 1], 0xff, len[k - 1]);
        if (!sep)
            break;
        part[k] = sep + 1;
        len[k] = len[k - 1] - (size_t)(part[k] - part[k - 1]);
        len[k - 1] = (size_t)(sep - part[k - 1]);
    }
    static char run[300], out[300];
    if (!run[0]) {
        snprintf(out, sizeof out, "%s/runs", fuzz_dir());
        snprintf(run, sizeof run, "%s/runs/20260101-000000-fuzz-00000000", fuzz_dir());
        mkdir(out, 0700);
        mkdir(run, 0700);
    }
    char path[400];
    static const char *names[3] = {"config.json", "summary.json", "metrics.jsonl"};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "%s/%s", run, names[k]);
        FILE *f = fopen(path, "wb");
        if (!f)
            abort();
        if (part[k] && len[k])
            fwrite(part[k], 1, len[k], f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/config.json", run);
    cJSON_Delete(dl_runlog_read_json(path));
    dl_runlog *r = NULL;
    long step = size ? (long)data[0] * 3 : 0;
    if (dl_runlog_reopen(&r, run, step) == 0) {
        dl_run_totals t = {step, 1, 10};
        dl_runlog_summary(r, "stopped", &t, "fuzz", NULL);
    }
    dl_runlog_destroy(r);
    static dl_run_summary sum; /* the record readers: summary, config, metrics */
    dl_run_config cfg;
    dl_records_summary(run, &sum);
    dl_records_config(run, &cfg);
    dl_records_metrics_each(run, count_record, NULL);
    char *argv[] = {"runs", "--out", out, "--json", NULL};
    dl_cmd_runs(dl_command_find("runs"), 4, argv);
    char *argv2[] = {"runs", "--out", out, "--sort", "val_acc", NULL};
    dl_cmd_runs(dl_command_find("runs"), 5, argv2);
    return 0;
}
