/* records.c - run-folder records read into structs, and the system sample's line written */
#include "engine/rundir/records.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/error.h"
#include "engine/rundir/rundir.h"

static double num(const cJSON *o, const char *k, double dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static void str(char *buf, size_t size, const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    snprintf(buf, size, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

/* A line parsed as a JSON object: NULL with *rc 0 (blank) or -1 (not one). */
static cJSON *parse_object(const char *line, int *rc)
{
    cJSON *j = cJSON_Parse(line);
    if (cJSON_IsObject(j))
        return j;
    cJSON_Delete(j);
    *rc = line[strspn(line, " \t\r")] ? -1 : 0;
    return NULL;
}

cJSON *dl_records_load(const char *run_dir, const char *file)
{
    char path[1400];
    return dl_rundir_read_json(dl_rundir_path(run_dir, file, path, sizeof path));
}

double dl_records_value(const dl_run_value *v, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].name, name))
            return v[i].v;
    return NAN;
}

/* --- system ------------------------------------------------------------------------ */

int dl_records_system_format(const dl_run_system *s, char *buf, size_t size)
{
    size_t n = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(buf + (n < size ? n : size), n < size ? size - n : 0, __VA_ARGS__);      \
        if (w_ > 0)                                                                                \
            n += (size_t)w_;                                                                       \
    } while (0)
    PUT("{\"t\":%.3f,\"time\":%.3f,\"cpu_total\":%.1f,\"proc_cpu\":%.1f,\"rss_mb\":%.1f,"
        "\"ram_used_mb\":%.1f,\"ram_total_mb\":%.1f,\"cpu\":[",
        s->t, s->unix_time, s->cpu_total_pct, s->proc_cpu_pct, s->rss_mb, s->ram_used_mb,
        s->ram_total_mb);
    for (int i = 0; i < s->ncpu; i++)
        PUT("%s%.1f", i ? "," : "", (double)s->cpu_pct[i]);
    PUT("],\"gpu\":[");
    for (int i = 0; i < s->ngpu; i++) {
        const dl_run_gpu *g = &s->gpu[i];
        char name[128];
        size_t k = 0;
        for (const char *c = g->name; *c && k < sizeof name - 2; c++)
            if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
                name[k++] = *c;
        name[k] = 0;
        PUT("%s{\"name\":\"%s\",\"util\":%.0f,\"mem_util\":%.0f,\"mem_used_mb\":%.0f,"
            "\"mem_total_mb\":%.0f,\"power_w\":%.1f,\"temp_c\":%.0f,\"sm_clock_mhz\":%.0f,"
            "\"pcie_rx_mbps\":%.1f,\"pcie_tx_mbps\":%.1f,\"energy_j\":%.1f}",
            i ? "," : "", name, g->util_pct, g->mem_util_pct, g->mem_used_mb, g->mem_total_mb,
            g->power_w, g->temp_c, g->sm_clock_mhz, g->pcie_rx_mbps, g->pcie_tx_mbps, g->energy_j);
    }
    PUT("]}");
#undef PUT
    return (int)n;
}

static void gpu_parse(const cJSON *c, dl_run_gpu *g)
{
    str(g->name, sizeof g->name, c, "name");
    g->util_pct = num(c, "util", -1);
    g->mem_util_pct = num(c, "mem_util", -1);
    g->mem_used_mb = num(c, "mem_used_mb", -1);
    g->mem_total_mb = num(c, "mem_total_mb", -1);
    g->power_w = num(c, "power_w", -1);
    g->temp_c = num(c, "temp_c", -1);
    g->sm_clock_mhz = num(c, "sm_clock_mhz", -1);
    g->pcie_rx_mbps = num(c, "pcie_rx_mbps", -1);
    g->pcie_tx_mbps = num(c, "pcie_tx_mbps", -1);
    g->energy_j = num(c, "energy_j", -1);
}

int dl_records_system_parse(const char *line, dl_run_system *s)
{
    int rc;
    cJSON *j = parse_object(line, &rc);
    if (!j)
        return rc;
    memset(s, 0, sizeof *s);
    s->t = num(j, "t", 0);
    s->unix_time = num(j, "time", 0);
    s->cpu_total_pct = num(j, "cpu_total", 0);
    s->proc_cpu_pct = num(j, "proc_cpu", 0);
    s->rss_mb = num(j, "rss_mb", 0);
    s->ram_used_mb = num(j, "ram_used_mb", 0);
    s->ram_total_mb = num(j, "ram_total_mb", 0);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "cpu"))
    {
        if (s->ncpu < DL_RUN_MAX_CPUS && cJSON_IsNumber(c))
            s->cpu_pct[s->ncpu++] = (float)c->valuedouble;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "gpu"))
    {
        if (s->ngpu == DL_RUN_MAX_GPUS)
            break;
        gpu_parse(c, &s->gpu[s->ngpu++]);
    }
    cJSON_Delete(j);
    return 1;
}

FILE *dl_records_system_open(const char *path)
{
    FILE *f = fopen(path, "a");
    if (!f)
        dl_error(DL_EIO, "%s: cannot open for appending: %s", path, strerror(errno));
    return f;
}

int dl_records_system_append(FILE *f, const dl_run_system *s)
{
    char line[8192];
    int n = dl_records_system_format(s, line, sizeof line);
    if (n <= 0 || (size_t)n >= sizeof line)
        return dl_error(DL_EINVAL, "a system sample longer than %zu bytes", sizeof line);
    if (fprintf(f, "%s\n", line) < 0 || fflush(f) != 0)
        return dl_error(DL_EIO, DL_RUN_FILE_SYSTEM ": write failed: %s", strerror(errno));
    return DL_OK;
}

/* --- metrics ----------------------------------------------------------------------- */

int dl_records_metrics_parse(const char *line, dl_run_metrics *m)
{
    int rc;
    cJSON *j = parse_object(line, &rc);
    if (!j)
        return rc;
    const cJSON *v;
    str(m->kind, sizeof m->kind, j, "kind");
    m->has_step = cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "step"));
    m->step = m->has_step ? v->valuedouble : NAN;
    m->has_epoch = cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "epoch"));
    m->epoch = m->has_epoch ? v->valuedouble : NAN;
    m->has_time = cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "time"));
    m->time = m->has_time ? v->valuedouble : NAN;
    m->n = 0;
    for (const cJSON *c = j->child; c && m->n < DL_RUN_MAX_VALUES; c = c->next) {
        if (!c->string || !strcmp(c->string, "kind") || !strcmp(c->string, "step") ||
            !strcmp(c->string, "epoch") || !strcmp(c->string, "time"))
            continue;
        dl_run_value *x = &m->v[m->n++];
        snprintf(x->name, sizeof x->name, "%s", c->string);
        x->v = cJSON_IsNumber(c) ? c->valuedouble : NAN; /* null: not finite */
    }
    cJSON_Delete(j);
    return 1;
}

int dl_records_metrics_each(const char *run_dir, void (*fn)(void *user, const dl_run_metrics *m),
                            void *user)
{
    char path[1400];
    FILE *f = fopen(dl_rundir_path(run_dir, DL_RUN_FILE_METRICS, path, sizeof path), "r");
    if (!f)
        return -1;
    dl_run_metrics *m = malloc(sizeof *m);
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (m && getline(&line, &cap, f) > 0)
        if (dl_records_metrics_parse(line, m) > 0) {
            fn(user, m);
            n++;
        }
    free(line);
    free(m);
    fclose(f);
    return n;
}

/* --- events ------------------------------------------------------------------------ */

void dl_records_event_parse(const char *line, dl_run_event *e)
{
    const char *sp = strchr(line, ' ');
    const char *colon = sp ? strstr(sp + 1, ": ") : NULL;
    e->wall = 0;
    if (sp) {
        char stamp[64];
        snprintf(stamp, sizeof stamp, "%.*s", (int)(sp - line) < 63 ? (int)(sp - line) : 63, line);
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        const char *end = strptime(stamp, "%Y-%m-%dT%H:%M:%S", &tm);
        if (end && (*end == 'Z' || *end == '.' || !*end))
            e->wall = (double)timegm(&tm);
    }
    if (!sp || !colon) {
        snprintf(e->kind, sizeof e->kind, "log");
        snprintf(e->text, sizeof e->text, "%s", line);
    } else {
        snprintf(e->kind, sizeof e->kind, "%.*s", (int)(colon - sp - 1), sp + 1);
        snprintf(e->text, sizeof e->text, "%s", colon + 2);
    }
}

/* --- summary and config ------------------------------------------------------------ */

/* The members of object o as values (of their "value" member when
 * nested); returns how many. */
static int values(const cJSON *o, int nested, dl_run_value *out)
{
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, o)
    {
        if (n == DL_RUN_MAX_VALUES || !c->string)
            continue;
        dl_run_value *x = &out[n++];
        snprintf(x->name, sizeof x->name, "%s", c->string);
        x->v = nested ? num(c, "value", NAN) : cJSON_IsNumber(c) ? c->valuedouble : NAN;
    }
    return n;
}

void dl_records_summary_parse(const cJSON *j, dl_run_summary *s)
{
    memset(s, 0, sizeof *s);
    str(s->run, sizeof s->run, j, "run");
    str(s->name, sizeof s->name, j, "name");
    str(s->status, sizeof s->status, j, "status");
    str(s->device, sizeof s->device, j, "device");
    s->has_message = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "message"));
    str(s->message, sizeof s->message, j, "message");
    s->steps = num(j, "steps", NAN);
    s->epochs = num(j, "epochs", NAN);
    s->wall_s = num(j, "wall_s", NAN);
    s->samples_per_s = num(j, "samples_per_s", NAN);
    s->cost = num(cJSON_GetObjectItemCaseSensitive(j, "cost"), "cost", NAN);
    s->nfinal = values(cJSON_GetObjectItemCaseSensitive(j, "final"), 0, s->final);
    s->nbest = values(cJSON_GetObjectItemCaseSensitive(j, "best"), 1, s->best);
}

int dl_records_summary(const char *run_dir, dl_run_summary *out)
{
    cJSON *j = dl_records_load(run_dir, DL_RUN_FILE_SUMMARY);
    if (!j)
        return DL_EIO; /* the message names the file */
    dl_records_summary_parse(j, out);
    cJSON_Delete(j);
    return DL_OK;
}

int dl_records_config(const char *run_dir, dl_run_config *c)
{
    cJSON *j = dl_records_load(run_dir, DL_RUN_FILE_CONFIG);
    if (!j)
        return DL_EIO; /* the message names the file */
    memset(c, 0, sizeof *c);
    str(c->name, sizeof c->name, j, "name");
    str(c->device, sizeof c->device, j, "device");
    str(c->backend, sizeof c->backend, j, "backend");
    str(c->precision, sizeof c->precision, j, "precision");
    c->batch = num(j, "batch", 0);
    c->accumulate = num(j, "accumulate", 1);
    c->epochs = num(j, "epochs", 0);
    c->max_steps = num(j, "max_steps", 0);
    c->workers = num(cJSON_GetObjectItemCaseSensitive(j, "data"), "workers", -1);
    /* runs written before train_flops_per_sample: 3 x forward */
    c->train_flops_per_sample = num(j, "train_flops_per_sample", 3 * num(j, "flops_per_sample", 0));
    const cJSON *study = cJSON_GetObjectItemCaseSensitive(j, "study");
    str(c->study, sizeof c->study, study, "name");
    c->trial = num(study, "trial", NAN);
    cJSON_Delete(j);
    return DL_OK;
}

/* --- tags -------------------------------------------------------------------------- */

int dl_records_tags(const char *run_dir, char *buf, size_t size)
{
    char path[1400];
    buf[0] = 0;
    FILE *f = fopen(dl_rundir_path(run_dir, DL_RUN_FILE_TAGS, path, sizeof path), "r");
    if (!f)
        return 0;
    char line[128];
    int n = 0;
    size_t len = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, " \t\r\n")] = 0;
        if (!line[0])
            continue;
        int w = snprintf(buf + len, len < size ? size - len : 0, "%s%s", n ? " " : "", line);
        if (w > 0 && len + (size_t)w < size)
            len += (size_t)w, n++;
    }
    fclose(f);
    return n;
}

int dl_records_has_tag(const char *list, const char *tag)
{
    size_t k = strlen(tag);
    for (const char *p = list; k && (p = strstr(p, tag)); p += k)
        if ((p == list || p[-1] == ' ') && (p[k] == ' ' || !p[k]))
            return 1;
    return 0;
}
