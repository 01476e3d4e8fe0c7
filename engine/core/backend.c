/* backend.c - finds and opens the CUDA backend module; the type a backend keeps product operands in
 *
 * dlbench links no CUDA library: the CUDA backend is build/dlbench-cuda.so,
 * opened here with dlopen. Its path is $DLBENCH_CUDA_MODULE when set,
 * otherwise the first of these, relative to the running executable:
 *   DIR/dlbench-cuda.so                 (build/dlbench)
 *   DIR/../dlbench-cuda.so              (build/tests/..., build/bench/...)
 *   DIR/../lib/dlbench/dlbench-cuda.so  (make install: bin/ and lib/dlbench/)
 *
 * The libraries the module needs (cudart, cuBLAS, cuDNN) are looked up by
 * the dynamic loader first (LD_LIBRARY_PATH, the ld.so cache, the
 * module's RUNPATH: the toolkit it was built with). One it does not find
 * is searched for by name in, in order:
 *   $CUDNN_HOME/lib, $CUDNN_HOME/lib64, $CUDA_HOME/lib64, $CUDA_PATH/lib64,
 *   $CONDA_PREFIX/lib, /usr/local/cuda/lib64, /usr/local/cuda/lib,
 *   /usr/lib/x86_64-linux-gnu, /usr/lib64, and the pip wheels'
 *   site-packages/nvidia/<package>/lib (NVIDIA's cudnn, cublas and
 *   cuda_runtime wheels, as PyTorch installs them) under $VIRTUAL_ENV,
 *   $CONDA_PREFIX, ~/.local, /usr/local and /usr (python3.*);
 * found, it is loaded globally, so that the module's dependency on it is
 * met, and the module is tried again. A failure names the file that did
 * not load and the loader's reason (dlerror), and where it was searched.
 *
 * The driver (libcuda.so.1) is checked before the module is loaded, which
 * keeps a start without a GPU quick; a module named by
 * $DLBENCH_CUDA_MODULE is loaded first, so a wrong file is reported as
 * such even where there is no driver. The first attempt decides, success
 * or failure, for the whole process.
 */
#include <dlfcn.h>
#include <glob.h>
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

/* The name of the library a dlerror() text says could not be found
 * ("libcudnn.so.9: cannot open shared object file: ..."), into name; -1
 * when the text says something else. */
static int missing_library(const char *err, char *name, size_t size)
{
    const char *end = strstr(err, ": cannot open shared object file");
    if (!end || end == err || (size_t)(end - err) >= size)
        return -1;
    memcpy(name, err, (size_t)(end - err));
    name[end - err] = '\0';
    return strchr(name, '/') || strchr(name, ' ') ? -1 : 0;
}

/* The glob patterns of the directories searched, in order (see the top). */
static int search_dirs(char dirs[][PATH_MAX], int max)
{
    int n = 0;
    const char *home = getenv("HOME");
    static const char *const env_dirs[][2] = {
        {"CUDNN_HOME", "/lib"},  {"CUDNN_HOME", "/lib64"}, {"CUDA_HOME", "/lib64"},
        {"CUDA_PATH", "/lib64"}, {"CONDA_PREFIX", "/lib"},
    };
    for (size_t i = 0; i < sizeof env_dirs / sizeof env_dirs[0] && n < max; i++) {
        const char *v = getenv(env_dirs[i][0]);
        if (v && v[0])
            snprintf(dirs[n++], PATH_MAX, "%.3000s%s", v, env_dirs[i][1]);
    }
    static const char *const fixed[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                                        "/usr/lib/x86_64-linux-gnu", "/usr/lib64"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && n < max; i++)
        snprintf(dirs[n++], PATH_MAX, "%s", fixed[i]);
    const char *roots[] = {getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX"), NULL, "/usr/local",
                           "/usr"};
    char local[PATH_MAX];
    if (home && home[0]) {
        snprintf(local, sizeof local, "%.3000s/.local", home);
        roots[2] = local;
    }
    for (size_t i = 0; i < sizeof roots / sizeof roots[0] && n + 1 < max; i++) {
        if (!roots[i] || !roots[i][0])
            continue;
        snprintf(dirs[n++], PATH_MAX, "%.3000s/lib/python3*/site-packages/nvidia/*/lib", roots[i]);
        snprintf(dirs[n++], PATH_MAX, "%.3000s/lib/python3*/dist-packages/nvidia/*/lib", roots[i]);
    }
    return n;
}

#define MAX_DIRS 24

/* The first file called name in the searched directories, into path. */
static int find_library(const char *name, char *path, size_t size)
{
    static char dirs[MAX_DIRS][PATH_MAX];
    int n = search_dirs(dirs, MAX_DIRS);
    for (int i = 0; i < n; i++) {
        char pattern[PATH_MAX + 256];
        snprintf(pattern, sizeof pattern, "%s/%s", dirs[i], name);
        glob_t g;
        int rc = glob(pattern, 0, NULL, &g);
        int found =
            rc == 0 && g.gl_pathc > 0 && (size_t)snprintf(path, size, "%s", g.gl_pathv[0]) < size;
        globfree(&g);
        if (found)
            return 0;
    }
    return -1;
}

/* dlopen(path), meeting dependencies the loader cannot find by searching
 * for them (loaded RTLD_GLOBAL first); NULL with the reason in err (the
 * file that failed and dlerror's words). */
static void *load_searching(const char *path, int flags, char *err, size_t size, int depth)
{
    for (int tries = 0; tries < 16; tries++) {
        void *h = dlopen(path, flags);
        if (h)
            return h;
        const char *e = dlerror();
        snprintf(err, size, "%s", e ? e : "unknown error");
        char name[256], found[PATH_MAX];
        if (depth >= 4 || missing_library(err, name, sizeof name) != 0)
            return NULL;
        if (find_library(name, found, sizeof found) != 0) {
            size_t len = strlen(err);
            snprintf(err + len, size - len,
                     " (not on the library path, nor in $CUDNN_HOME, $CUDA_HOME, "
                     "/usr/local/cuda or a pip wheel's nvidia/*/lib)");
            return NULL;
        }
        char sub[512];
        if (!load_searching(found, RTLD_NOW | RTLD_GLOBAL, sub, sizeof sub, depth + 1)) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%.200s, needed by %.200s, could not be loaded: %.400s",
                     found, path, sub);
            size_t n = strlen(msg) < size ? strlen(msg) : size - 1;
            memcpy(err, msg, n);
            err[n] = '\0';
            return NULL;
        }
    }
    return NULL;
}

/* The module at path opened (dependencies searched for), or NULL with
 * the reason in cuda_why. */
static void *load_module(const char *path)
{
    char err[768];
    void *mod = load_searching(path, RTLD_NOW | RTLD_LOCAL, err, sizeof err, 0);
    if (!mod)
        snprintf(cuda_why, sizeof cuda_why,
                 "CUDA backend module %.200s could not be loaded: %.700s", path, err);
    return mod;
}

/* Hands the module our dl_error, opens the backend and checks its
 * version; fills cuda_backend or cuda_why. */
static void open_backend(void *mod, const char *path)
{
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

/* One attempt at opening the module; fills cuda_backend or cuda_why. */
static void open_cuda(void)
{
    char path[PATH_MAX + 64];
    if (find_module(path, sizeof path) != 0)
        return;
    const char *env = getenv("DLBENCH_CUDA_MODULE");
    void *mod = NULL;
    if (env && env[0] && !(mod = load_module(path)))
        return; /* the file named: its own problem first */
    /* the driver library comes with the NVIDIA driver, not the toolkit;
     * cudart would load it later, asking first gives the plain reason */
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) {
        snprintf(cuda_why, sizeof cuda_why, "no CUDA driver (libcuda.so.1 not found)");
        return;
    }
    if (!mod && !(mod = load_module(path)))
        return;
    open_backend(mod, path);
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

dl_dtype dl_backend_operand_type(const dl_backend *be, dl_dtype compute)
{
    if (compute != DL_BF16 && compute != DL_F16)
        return compute;
    if (!(be->lowp & DL_LOWP_KNOWN))
        return compute;
    int native = be->lowp & (compute == DL_BF16 ? DL_LOWP_BF16 : DL_LOWP_F16);
    return native ? compute : DL_F32;
}
