/* backend.c - finds and opens the CUDA backend module
 *
 * dlbench links no CUDA library: the CUDA backend is build/dlbench-cuda.so,
 * opened here with dlopen. Its path is $DLBENCH_CUDA_MODULE when set,
 * otherwise the first of these, relative to the running executable:
 *   DIR/dlbench-cuda.so                 (build/dlbench)
 *   DIR/../dlbench-cuda.so              (build/tests/..., build/bench/...)
 *   DIR/../lib/dlbench/dlbench-cuda.so  (make install: bin/ and lib/dlbench/)
 * The first attempt decides, success or failure, for the whole process.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/backend.h"
#include "engine/base/error.h"

/* DL_BACKEND_MODULE_SET_ERROR_SYMBOL is optional: a module without it
 * still opens (test binaries are not linked with -rdynamic, so it is how
 * the module reaches this process's dl_error). */

#define MODULE_NAME "dlbench-cuda.so"

static pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static int cuda_tried;
static dl_backend *cuda_backend;
static char cuda_why[1024];

static void put_why(char *why, size_t size, const char *msg)
{
    if (why && size)
        snprintf(why, size, "%s", msg);
}

/* Directory of the running executable into dir (no trailing slash); 0 on
 * success. */
static int exe_dir(char *dir, size_t size)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0)
        return -1;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    if ((size_t)snprintf(dir, size, "%s", path[0] ? path : "/") >= size)
        return -1;
    return 0;
}

/* Path of the module into path; on failure the reason into cuda_why. */
static int find_module(char *path, size_t size)
{
    const char *env = getenv("DLBENCH_CUDA_MODULE");
    if (env && env[0]) {
        if (access(env, R_OK) != 0) {
            snprintf(cuda_why, sizeof cuda_why,
                     "CUDA backend module not found (DLBENCH_CUDA_MODULE=%s does not exist)", env);
            return -1;
        }
        snprintf(path, size, "%s", env);
        return 0;
    }
    char dir[PATH_MAX];
    if (exe_dir(dir, sizeof dir) != 0) {
        snprintf(cuda_why, sizeof cuda_why,
                 "CUDA backend module not found (cannot read /proc/self/exe; set "
                 "DLBENCH_CUDA_MODULE)");
        return -1;
    }
    static const char *const rel[] = {"", "../", "../lib/dlbench/"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        if ((size_t)snprintf(path, size, "%s/%s" MODULE_NAME, dir, rel[i]) >= size)
            continue;
        if (access(path, R_OK) == 0)
            return 0;
    }
    snprintf(cuda_why, sizeof cuda_why,
             "CUDA backend module not built (" MODULE_NAME " missing next to %.300s and in "
             "its parent: it is built only when nvcc is found at build time)",
             dir);
    return -1;
}

/* One attempt at opening the module; fills cuda_backend or cuda_why. */
static void open_cuda(void)
{
    char path[PATH_MAX + 64];
    if (find_module(path, sizeof path) != 0)
        return;
    /* the driver library comes with the NVIDIA driver, not the toolkit;
     * cudart would load it later, asking first gives the plain reason */
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) {
        snprintf(cuda_why, sizeof cuda_why, "no CUDA driver (libcuda.so.1 not found)");
        return;
    }
    void *mod = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!mod) {
        const char *err = dlerror();
        snprintf(cuda_why, sizeof cuda_why,
                 "CUDA backend module %.200s could not be loaded: %.200s (are the CUDA "
                 "runtime, cuBLAS and cuDNN libraries on the library path?)",
                 path, err ? err : "unknown error");
        return;
    }
    dl_backend_module_set_error_fn set_error =
        (dl_backend_module_set_error_fn)dlsym(mod, DL_BACKEND_MODULE_SET_ERROR_SYMBOL);
    if (set_error)
        set_error(dl_error);
    dl_backend_module_open_fn open_fn =
        (dl_backend_module_open_fn)dlsym(mod, DL_BACKEND_MODULE_SYMBOL);
    if (!open_fn) {
        snprintf(cuda_why, sizeof cuda_why, "%.300s is not a dlbench CUDA module (no %s)", path,
                 DL_BACKEND_MODULE_SYMBOL);
        dlclose(mod);
        return;
    }
    dl_error_clear();
    dl_backend *be = NULL;
    int rc = open_fn(DL_BACKEND_API_VERSION, &be);
    if (rc < 0 || !be) {
        const char *msg = dl_error_message();
        snprintf(cuda_why, sizeof cuda_why, "%s",
                 msg[0] ? msg : "the CUDA backend module failed to open (no reason given)");
        /* the module stays loaded: unloading CUDA libraries after they
         * initialised is not safe */
        return;
    }
    if (!be->ops || be->ops->api_version != DL_BACKEND_API_VERSION) {
        snprintf(cuda_why, sizeof cuda_why, "module API version %d, dlbench expects %d",
                 be->ops ? be->ops->api_version : -1, DL_BACKEND_API_VERSION);
        if (be->ops && be->ops->destroy)
            be->ops->destroy(be);
        return;
    }
    cuda_backend = be;
}

dl_backend *dl_backend_cuda(char *why, size_t why_size)
{
    pthread_mutex_lock(&cuda_lock);
    if (!cuda_tried) {
        cuda_tried = 1;
        open_cuda();
    }
    dl_backend *be = cuda_backend;
    pthread_mutex_unlock(&cuda_lock);
    if (!be) {
        put_why(why, why_size, cuda_why);
        dl_error(DL_ENODEV, "%s", cuda_why);
    } else {
        put_why(why, why_size, "");
    }
    return be;
}
