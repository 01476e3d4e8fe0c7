/* session_state.c - what every step of a session shares: the interrupt flag, its events, loader counts */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine/observe/telemetry.h"
#include "engine/rundir/runlog.h"
#include "scripting/script.h"
#include "scripting/session_internal.h"

static volatile sig_atomic_t session_interrupted;

void dl_session_interrupt(void)
{
    session_interrupted = 1;
    dl_script_interrupt();
}

int dl_session_interrupted(void) { return session_interrupted; }

void session_emit(dl_session *s, const char *kind, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (s->log)
        dl_runlog_event(s->log, kind, "%s", text);
    if (s->opt.telemetry) {
        dl_telemetry *t = s->opt.telemetry;
        dl_telemetry_event(t, kind, text);
        if (!strcmp(kind, "paused"))
            dl_telemetry_set_state(t, DL_TELE_PAUSED, NULL);
        else if (!strcmp(kind, "resumed") && s->trainer)
            dl_telemetry_set_state(t, DL_TELE_RUNNING, NULL);
        else if (!strcmp(kind, "nonfinite"))
            dl_telemetry_flag_nonfinite(t);
    }
    if (s->opt.on_event)
        s->opt.on_event(s->opt.user, kind, text);
}

/* Optimizer steps in one pass over the training set, as the trainer counts. */
long session_steps_per_epoch(dl_source *train, int accumulate)
{
    size_t acc = accumulate > 0 ? (size_t)accumulate : 1;
    return (long)((train->ops->batches(train) + acc - 1) / acc);
}

long dl_session_steps_per_epoch(const dl_session *s)
{
    return s->trainer
               ? session_steps_per_epoch(s->train, dl_trainer_config_of(s->trainer)->accumulate)
               : 0;
}

int dl_session_loader_stats(dl_session *s, dl_loader_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!s->train || !s->train->ops->stats)
        return 0;
    s->train->ops->stats(s->train, out);
    return 1;
}
