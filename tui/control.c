/* control.c - the control socket of a live run: JSON-line commands to the trainer, peer uid checked */
#include "tui/control.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "engine/rundir/rundir.h"

#define LINE_MAX_BYTES 4096

struct dl_control {
    dl_trainer *t;
    int fd;      /* listening socket */
    int wake[2]; /* a pipe: stop asks the thread to leave */
    pthread_t thread;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

static void reply_error(char *reply, size_t size, const char *msg)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddBoolToObject(r, "ok", 0);
    cJSON_AddStringToObject(r, "error", msg);
    char *s = cJSON_PrintUnformatted(r);
    snprintf(reply, size, "%s", s ? s : "{\"ok\":false}");
    free(s);
    cJSON_Delete(r);
}

static void reply_ok(char *reply, size_t size, dl_trainer *t, const char *queued)
{
    cJSON *r = cJSON_CreateObject();
    cJSON_AddBoolToObject(r, "ok", 1);
    if (queued)
        cJSON_AddStringToObject(r, "queued", queued);
    dl_trainer_status st; /* this is the socket's thread: the published copy */
    dl_trainer_status_get(t, &st);
    cJSON_AddNumberToObject(r, "step", (double)st.step);
    cJSON_AddNumberToObject(r, "epoch", st.epoch + 1);
    cJSON_AddBoolToObject(r, "paused", st.paused);
    cJSON_AddBoolToObject(r, "stopping", st.stopping);
    cJSON_AddStringToObject(r, "device", st.device);
    cJSON_AddNumberToObject(r, "lr", st.lr);
    char *s = cJSON_PrintUnformatted(r);
    snprintf(reply, size, "%s", s ? s : "{\"ok\":true}");
    free(s);
    cJSON_Delete(r);
}

/* Posts the command c (not "status") with its fields from j. Returns 1
 * when posted (*rc: the queue's answer), 0 when refused, the reason in
 * reply: a bad field or an unknown command. */
static int post(dl_trainer *t, const char *c, const cJSON *j, int *rc, char *reply, size_t size)
{
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(j, "value");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(j, "device");
    if (!strcmp(c, "pause")) {
        *rc = dl_trainer_post(t, DL_CMD_PAUSE, 0, NULL);
    } else if (!strcmp(c, "resume")) {
        *rc = dl_trainer_post(t, DL_CMD_RESUME, 0, NULL);
    } else if (!strcmp(c, "stop")) {
        *rc = dl_trainer_post(t, DL_CMD_STOP, 0, NULL);
    } else if (!strcmp(c, "checkpoint")) {
        if (name && !cJSON_IsString(name)) {
            reply_error(reply, size, "checkpoint: \"name\" must be a string");
            return 0;
        }
        *rc = dl_trainer_post(t, DL_CMD_CHECKPOINT, 0, name ? name->valuestring : "");
    } else if (!strcmp(c, "note")) {
        if (!cJSON_IsString(text) || !text->valuestring[0] || strchr(text->valuestring, '\n')) {
            reply_error(reply, size, "note: \"text\" must be a non-empty one-line string");
            return 0;
        }
        *rc = dl_trainer_post(t, DL_CMD_NOTE, 0, text->valuestring);
    } else if (!strcmp(c, "lr")) {
        if (!cJSON_IsNumber(value) || !(value->valuedouble > 0) || !isfinite(value->valuedouble)) {
            reply_error(reply, size, "lr: \"value\" must be a positive number");
            return 0;
        }
        *rc = dl_trainer_post(t, DL_CMD_SET_LR, value->valuedouble, NULL);
    } else if (!strcmp(c, "device")) {
        if (!cJSON_IsString(dev) ||
            (strcmp(dev->valuestring, "cpu") && strcmp(dev->valuestring, "cuda"))) {
            reply_error(reply, size, "device: \"device\" must be \"cpu\" or \"cuda\"");
            return 0;
        }
        *rc = dl_trainer_post(t, DL_CMD_SWITCH, 0, dev->valuestring);
    } else if (!strcmp(c, "parity")) {
        const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
        if ((dev && (!cJSON_IsString(dev) || strlen(dev->valuestring) > 16)) ||
            (steps &&
             (!cJSON_IsNumber(steps) || !(steps->valuedouble >= 1) || steps->valuedouble > 1000 ||
              steps->valuedouble != (int)steps->valuedouble))) {
            reply_error(reply, size,
                        "parity: \"device\" must be \"cuda\", \"cpu\" or \"cpu:T\", "
                        "\"steps\" a whole number from 1 to 1000 (default 5)");
            return 0;
        }
        *rc = dl_trainer_post(t, DL_CMD_PARITY, steps ? steps->valuedouble : 5,
                              dev ? dev->valuestring : "");
    } else if (!strcmp(c, "probe")) {
        const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
        if (steps && (!cJSON_IsNumber(steps) || !(steps->valuedouble >= 1) ||
                      steps->valuedouble > 1000 || steps->valuedouble != (int)steps->valuedouble)) {
            reply_error(reply, size,
                        "probe: \"steps\" must be a whole number from 1 to 1000 "
                        "(default 20)");
            return 0;
        }
        *rc = dl_trainer_post(t, DL_CMD_PROBE, steps ? steps->valuedouble : 20, NULL);
    } else {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "unknown cmd \"%.40s\" (pause, resume, stop, checkpoint, note, lr, device, "
                 "parity, probe, status)",
                 c);
        reply_error(reply, size, msg);
        return 0;
    }
    return 1;
}

void dl_control_handle(dl_trainer *t, const char *line, char *reply, size_t size)
{
    cJSON *j = cJSON_Parse(line);
    if (!cJSON_IsObject(j)) {
        reply_error(reply, size, "not a JSON object (send e.g. {\"cmd\":\"pause\"})");
        cJSON_Delete(j);
        return;
    }
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(j, "cmd");
    if (!cJSON_IsString(cmd)) {
        reply_error(reply, size,
                    "missing \"cmd\" (pause, resume, stop, checkpoint, note, lr, "
                    "device, status)");
        cJSON_Delete(j);
        return;
    }
    const char *c = cmd->valuestring;
    int rc = 0;
    if (!strcmp(c, "status")) {
        reply_ok(reply, size, t, NULL);
    } else if (post(t, c, j, &rc, reply, size)) {
        if (rc < 0)
            reply_error(reply, size, "the trainer's command queue is full; try again");
        else
            reply_ok(reply, size, t, c);
    }
    cJSON_Delete(j);
}

/* Serves one client until it hangs up, goes quiet for 5 s, or stop. */
static void serve_client(dl_control *c, int fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    char reply[1024];
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != geteuid()) {
        reply_error(reply, sizeof reply, "refused: connection from another user");
        size_t n = strlen(reply);
        reply[n++] = '\n';
        ssize_t w = send(fd, reply, n, MSG_NOSIGNAL);
        (void)w;
        return;
    }
    char buf[LINE_MAX_BYTES + 1];
    size_t have = 0;
    int overlong = 0;
    for (;;) {
        struct pollfd p[2] = {{fd, POLLIN, 0}, {c->wake[0], POLLIN, 0}};
        int r = poll(p, 2, 5000);
        if (r <= 0 || p[1].revents)
            return;
        ssize_t n = recv(fd, buf + have, LINE_MAX_BYTES - have, 0);
        if (n <= 0)
            return;
        have += (size_t)n;
        char *nl;
        while ((nl = memchr(buf, '\n', have))) {
            *nl = 0;
            if (overlong)
                reply_error(reply, sizeof reply, "line too long");
            else
                dl_control_handle(c->t, buf, reply, sizeof reply);
            overlong = 0;
            size_t rl = strlen(reply);
            reply[rl++] = '\n';
            if (send(fd, reply, rl, MSG_NOSIGNAL) < 0)
                return;
            size_t used = (size_t)(nl - buf) + 1;
            memmove(buf, buf + used, have - used);
            have -= used;
        }
        if (have == LINE_MAX_BYTES) { /* no newline in 4 KiB: drop it, answer at its end */
            have = 0;
            overlong = 1;
        }
    }
}

static void *serve(void *arg)
{
    dl_control *c = arg;
    for (;;) {
        struct pollfd p[2] = {{c->fd, POLLIN, 0}, {c->wake[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        if (p[0].revents & POLLIN) {
            int fd = accept(c->fd, NULL, NULL);
            if (fd < 0)
                continue;
            serve_client(c, fd);
            close(fd);
        }
    }
    return NULL;
}

int dl_control_start(dl_control **out, const char *run_dir, dl_trainer *t, char *why,
                     size_t why_size)
{
    *out = NULL;
    dl_control *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, why_size, "out of memory");
        return -1;
    }
    c->t = t;
    c->fd = -1;
    c->wake[0] = c->wake[1] = -1;
    int n = snprintf(c->path, sizeof c->path, "%s/" DL_RUN_FILE_CONTROL, run_dir);
    if (n < 0 || (size_t)n >= sizeof c->path) {
        snprintf(why, why_size,
                 "%s/" DL_RUN_FILE_CONTROL ": path longer than a Unix socket allows (%zu)", run_dir,
                 sizeof c->path - 1);
        free(c);
        return -1;
    }
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, c->path, strlen(c->path) + 1);
    unlink(c->path); /* a stale socket of a crashed process */
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    mode_t old = umask(0177); /* created 0600: no window where others may connect */
    int rc = c->fd < 0 ? -1 : bind(c->fd, (struct sockaddr *)&a, sizeof a);
    umask(old);
    if (rc == 0)
        rc = chmod(c->path, 0600);
    if (rc == 0)
        rc = listen(c->fd, 4);
    if (rc == 0)
        rc = pipe2(c->wake, O_CLOEXEC);
    if (rc == 0 && pthread_create(&c->thread, NULL, serve, c) != 0)
        rc = -1, errno = EAGAIN;
    if (rc != 0) {
        snprintf(why, why_size, "%s: %s", c->path, strerror(errno));
        if (c->fd >= 0)
            close(c->fd);
        if (c->wake[0] >= 0)
            close(c->wake[0]), close(c->wake[1]);
        unlink(c->path);
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void dl_control_stop(dl_control *c)
{
    if (!c)
        return;
    ssize_t w = write(c->wake[1], "x", 1);
    (void)w;
    pthread_join(c->thread, NULL);
    close(c->fd);
    close(c->wake[0]);
    close(c->wake[1]);
    unlink(c->path);
    free(c);
}

int dl_control_send(const char *run_dir, const char *line, char *reply, size_t size)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    int n = snprintf(a.sun_path, sizeof a.sun_path, "%s/" DL_RUN_FILE_CONTROL, run_dir);
    if (n < 0 || (size_t)n >= sizeof a.sun_path) {
        snprintf(reply, size, "%s/" DL_RUN_FILE_CONTROL ": path too long for a Unix socket",
                 run_dir);
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        snprintf(reply, size, "the run is not live (%s: %s)", a.sun_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t len = strlen(line);
    char *msg = malloc(len + 2);
    if (!msg) {
        close(fd);
        snprintf(reply, size, "out of memory");
        return -1;
    }
    memcpy(msg, line, len);
    msg[len] = '\n';
    ssize_t w = send(fd, msg, len + 1, MSG_NOSIGNAL);
    free(msg);
    size_t have = 0;
    int rc = -1;
    while (w >= 0 && have + 1 < size) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 3000) <= 0)
            break;
        ssize_t r = recv(fd, reply + have, size - 1 - have, 0);
        if (r <= 0)
            break;
        have += (size_t)r;
        reply[have] = 0;
        char *nl = strchr(reply, '\n');
        if (nl) {
            *nl = 0;
            rc = 0;
            break;
        }
    }
    close(fd);
    if (rc < 0)
        snprintf(reply, size, "no reply from %s", a.sun_path);
    return rc;
}
