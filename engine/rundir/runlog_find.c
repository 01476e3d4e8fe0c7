/* runlog_find.c - finding runs under OUT: by name or part of it, the newest, a finished one with the same config */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/base/error.h"
#include "engine/rundir/rundir.h"
#include "engine/rundir/runlog.h"

int dl_runlog_find_finished(const char *out_dir, const char *hash, char *found, size_t size)
{
    DIR *dir = opendir(out_dir);
    if (!dir)
        return 0;
    int hit = 0;
    struct dirent *e;
    char best_name[256] = "";
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.' || !strstr(e->d_name, "-"))
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s/" DL_RUN_FILE_SUMMARY, out_dir, e->d_name);
        cJSON *s = dl_rundir_read_json(path);
        if (!s)
            continue;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(s, "status");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(s, "config_hash");
        if (cJSON_IsString(st) && !strcmp(st->valuestring, "finished") && cJSON_IsString(h) &&
            !strcmp(h->valuestring, hash) && strcmp(e->d_name, best_name) > 0) {
            snprintf(best_name, sizeof best_name, "%s", e->d_name); /* the latest */
            snprintf(found, size, "%s/%s", out_dir, e->d_name);
            hit = 1;
        }
        cJSON_Delete(s);
    }
    closedir(dir);
    dl_error_clear();
    return hit;
}

int dl_runlog_is_run(const char *path)
{
    char p[1600];
    struct stat st;
    return stat(dl_rundir_path(path, DL_RUN_FILE_CONFIG, p, sizeof p), &st) == 0;
}

int dl_runlog_resolve(const char *out_dir, const char *run, char *path, size_t size)
{
    if (dl_runlog_is_run(run)) {
        snprintf(path, size, "%s", run);
        size_t l = strlen(path);
        while (l > 1 && path[l - 1] == '/')
            path[--l] = 0;
        return DL_OK;
    }
    DIR *dir = opendir(out_dir);
    if (!dir)
        return dl_error(DL_EINVAL, "no run '%s': %s is not a run folder and %s cannot be read", run,
                        run, out_dir);
    int hits = 0;
    char names[512] = "";
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", out_dir, e->d_name);
        if (!dl_runlog_is_run(p))
            continue;
        if (!strcmp(e->d_name, run)) {
            hits = 1;
            snprintf(path, size, "%s", p);
            break;
        }
        if (strstr(e->d_name, run)) {
            if (hits++ == 0)
                snprintf(path, size, "%s", p);
            size_t l = strlen(names);
            snprintf(names + l, sizeof names - l, "%s%s", l ? ", " : "", e->d_name);
        }
    }
    closedir(dir);
    if (hits == 1)
        return DL_OK;
    if (hits == 0)
        return dl_error(DL_EINVAL, "no run matches '%s' in %s", run, out_dir);
    return dl_error(DL_EINVAL, "'%s' matches %d runs in %s: %s", run, hits, out_dir, names);
}

int dl_runlog_newest(const char *out_dir, char *path, size_t size)
{
    DIR *d = opendir(out_dir);
    if (!d)
        return -1;
    char best[512] = "";
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", out_dir, e->d_name);
        if (dl_runlog_is_run(p) && strcmp(e->d_name, best) > 0)
            snprintf(best, sizeof best, "%.500s", e->d_name);
    }
    closedir(d);
    if (!best[0])
        return -1;
    snprintf(path, size, "%s/%s", out_dir, best);
    return 0;
}
