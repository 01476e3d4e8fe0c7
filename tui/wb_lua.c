/* wb_lua.c - the Lua prompt's queue between the screen and the training thread */
#include "tui/wb_lua.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scripting/lua_prompt.h"

#define QUEUE 8

struct dl_wb_lua {
    pthread_mutex_t lock;
    char lines[QUEUE][256];
    int n;
};

dl_wb_lua *dl_wb_lua_create(void)
{
    dl_wb_lua *q = calloc(1, sizeof *q);
    if (q)
        pthread_mutex_init(&q->lock, NULL);
    return q;
}

void dl_wb_lua_destroy(dl_wb_lua *q)
{
    if (!q)
        return;
    pthread_mutex_destroy(&q->lock);
    free(q);
}

int dl_wb_lua_push(dl_wb_lua *q, const char *line)
{
    pthread_mutex_lock(&q->lock);
    int ok = q->n < QUEUE;
    if (ok)
        snprintf(q->lines[q->n++], sizeof q->lines[0], "%s", line);
    pthread_mutex_unlock(&q->lock);
    return ok ? 0 : -1;
}

void dl_wb_lua_poll(dl_wb_lua *q, dl_session *s, dl_telemetry *tele)
{
    char lines[QUEUE][256];
    pthread_mutex_lock(&q->lock);
    int n = q->n; /* one check of an int per step when idle */
    if (n)
        memcpy(lines, q->lines, sizeof lines);
    q->n = 0;
    pthread_mutex_unlock(&q->lock);
    for (int i = 0; i < n; i++) {
        char out[1024];
        int rc = dl_session_eval(s, lines[i], out, sizeof out);
        fflush(stdout); /* print() output reaches the log before the result */
        if (rc < 0)
            dl_telemetry_event(tele, "lua error", out);
        else
            dl_telemetry_event(tele, "lua", out[0] ? out : "ok");
    }
}
