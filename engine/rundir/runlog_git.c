/* runlog_git.c - the git commit of the working folder, for config.json */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/rundir/runlog.h"

extern char **environ;

/* Runs argv with stdout into buf (stderr discarded); returns the exit
 * status, or -1 when it could not run. */
static int run_capture(char *const argv[], char *buf, size_t size)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        return -1;
    }
    size_t n = 0;
    for (;;) {
        char tmp[512];
        ssize_t r = read(fds[0], tmp, sizeof tmp);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r && n + 1 < size; i++)
            buf[n++] = tmp[i];
    }
    if (size)
        buf[n < size ? n : size - 1] = 0;
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int dl_runlog_git(const char *dir, char commit[41], int *dirty)
{
    char out[4096];
    const char *d = dir ? dir : ".";
    char *rev[] = {"git", "-C", (char *)d, "rev-parse", "--verify", "-q", "HEAD", NULL};
    if (run_capture(rev, out, sizeof out) != 0)
        return 0;
    size_t k = 0;
    while (k < 40 && ((out[k] >= '0' && out[k] <= '9') || (out[k] >= 'a' && out[k] <= 'f')))
        k++;
    if (k != 40)
        return 0;
    memcpy(commit, out, 40);
    commit[40] = 0;
    char *st[] = {"git", "-C", (char *)d, "status", "--porcelain", "--untracked-files=no", NULL};
    *dirty = run_capture(st, out, sizeof out) == 0 ? out[0] != 0 : 0;
    return 1;
}
