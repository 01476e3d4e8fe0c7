/* dist_mpi.c - Open MPI loaded with dlopen: collectives, bucketed gradient all-reduce, watchdog */
#include "engine/dist/comm.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/base/error.h"
#include "engine/dist/dist_internal.h"

/* Open MPI's C ABI, declared here so that no mpi.h is needed to build:
 * handles are pointers to its internal structs, the predefined ones are
 * global objects whose addresses are the handles (MPI_COMM_WORLD is
 * &ompi_mpi_comm_world), MPI_IN_PLACE is (void *)1, MPI_STATUS_IGNORE and
 * MPI_STATUSES_IGNORE are NULL. Other MPI libraries (MPICH's integer
 * handles) have another ABI and are not supported. */
typedef struct ompi_handle_s *mpi_handle;
#define MPI_IN_PLACE_ ((void *)1)
#define MPI_SUCCESS_ 0
#define MPI_THREAD_FUNNELED_ 1
#define MPI_THREAD_MULTIPLE_ 3
#define MPI_LIBVERSION_MAX 256

typedef struct mpi_api {
    void *lib;
    int (*Init_thread)(int *argc, char ***argv, int required, int *provided);
    int (*Initialized)(int *flag);
    int (*Finalize)(void);
    int (*Comm_rank)(mpi_handle comm, int *rank);
    int (*Comm_size)(mpi_handle comm, int *size);
    int (*Allreduce)(const void *sbuf, void *rbuf, int count, mpi_handle type, mpi_handle op,
                     mpi_handle comm);
    int (*Iallreduce)(const void *sbuf, void *rbuf, int count, mpi_handle type, mpi_handle op,
                      mpi_handle comm, mpi_handle *req);
    int (*Test)(mpi_handle *req, int *flag, void *status);
    int (*Waitall)(int count, mpi_handle *reqs, void *statuses);
    int (*Bcast)(void *buf, int count, mpi_handle type, int root, mpi_handle comm);
    int (*Barrier)(mpi_handle comm);
    int (*Abort)(mpi_handle comm, int code);
    int (*Get_library_version)(char *version, int *len);
    double (*Wtime)(void);
    mpi_handle world, t_float, t_double, t_byte, op_sum, op_max, op_min;
} mpi_api;

typedef struct bucket {
    size_t lo, hi;
} bucket;

struct dl_comm {
    mpi_api mpi;
    int rank, size, thread_level;
    char desc[160];
    double timeout_s;
    size_t bucket_floats; /* 0: one blocking all-reduce */

    /* watchdog */
    pthread_t dog;
    int dog_running;
    pthread_mutex_t dog_lock;
    pthread_cond_t dog_cond;
    int dog_quit;
    _Atomic double busy_since; /* dl_clock_mono_s; 0: not in a collective */
    const char *_Atomic busy_what;
    _Atomic double signal_at; /* when the launcher signalled (0: never) */
    void (*on_failure)(void *user, const char *why);
    void *failure_user;

    /* the gradient region and its buckets, in launch order (from the end) */
    dl_backend *be;
    float *grad;
    size_t grad_n;
    bucket *buckets;
    mpi_handle *reqs;
    int nbuckets, next, done;
    double seconds;
    const char *path;
    float *host; /* staging for device memory without NCCL */
    size_t host_n;
    dl_nccl *nccl;
    int nccl_tried;
};

int dl_comm_launched(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        /* Slurm's task count only means an MPI launch when PMIx is there */
        if (v && *v && (i < 2 || getenv("PMIX_RANK")))
            return atoi(v) > 0 ? atoi(v) : 0;
    }
    return 0;
}

/* --- watchdog ---------------------------------------------------------------- */

/* Brackets a wait that may hang: the watchdog times it. */
static void busy_begin(dl_comm *c, const char *what)
{
    atomic_store(&c->busy_what, what);
    atomic_store(&c->busy_since, dl_clock_mono_s());
}

static void busy_end(dl_comm *c) { atomic_store(&c->busy_since, 0); }

static void *watchdog_main(void *arg)
{
    dl_comm *c = arg;
    pthread_mutex_lock(&c->dog_lock);
    while (!c->dog_quit) {
        /* the launcher sends SIGKILL 1 s after SIGTERM (Open MPI's
         * odls_base_sigkill_timeout): rank 0 must have marked its run
         * failed by then, so a signal is noticed within 50 ms */
        struct timespec ts = dl_clock_deadline_ms(50);
        pthread_cond_timedwait(&c->dog_cond, &c->dog_lock, &ts);
        double since = atomic_load(&c->busy_since);
        if (c->dog_quit || since == 0)
            continue;
        double now = dl_clock_mono_s(), sig = atomic_load(&c->signal_at);
        double waited = now - since;
        /* a signal while waiting: live ranks finish a collective in far less */
        int lost = sig != 0 && now - (sig > since ? sig : since) > 0.3;
        if (waited < c->timeout_s && !lost)
            continue;
        const char *what = atomic_load(&c->busy_what);
        char why[512];
        if (lost)
            snprintf(why, sizeof why,
                     "rank %d of %d: the launcher ended the job while this rank "
                     "waited in %s: another rank has died (or the job was cancelled)",
                     c->rank, c->size, what ? what : "a collective");
        else
            snprintf(why, sizeof why,
                     "rank %d of %d: %s made no progress for %.0f s: another "
                     "rank has died or hangs; ending the job (DLBENCH_COMM_TIMEOUT=%g)",
                     c->rank, c->size, what ? what : "a collective", waited, c->timeout_s);
        fprintf(stderr, "dlbench: %s\n", why);
        fflush(stderr);
        if (c->on_failure)
            c->on_failure(c->failure_user, why);
        if (lost)
            _exit(3);
        /* MPI_Abort from this thread is only allowed with MPI_THREAD_MULTIPLE;
         * without it, a non-zero exit makes the launcher end the other ranks */
        if (c->thread_level >= MPI_THREAD_MULTIPLE_)
            c->mpi.Abort(c->mpi.world, 3);
        _exit(3);
    }
    pthread_mutex_unlock(&c->dog_lock);
    return NULL;
}

/* --- loading --------------------------------------------------------------------- */

static int load_mpi(mpi_api *m, char *why, size_t size)
{
    static const char *names[] = {"libmpi.so.40", "libmpi.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names && !m->lib; i++)
        /* global: Open MPI's own plugins resolve symbols of libmpi */
        m->lib = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (!m->lib) {
        snprintf(why, size,
                 "Open MPI is not installed (libmpi.so.40: %s); on Debian: "
                 "apt-get install libopenmpi-dev openmpi-bin",
                 dlerror());
        return DL_ENODEV;
    }
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"MPI_Init_thread", (void **)&m->Init_thread},
        {"MPI_Initialized", (void **)&m->Initialized},
        {"MPI_Finalize", (void **)&m->Finalize},
        {"MPI_Comm_rank", (void **)&m->Comm_rank},
        {"MPI_Comm_size", (void **)&m->Comm_size},
        {"MPI_Allreduce", (void **)&m->Allreduce},
        {"MPI_Iallreduce", (void **)&m->Iallreduce},
        {"MPI_Test", (void **)&m->Test},
        {"MPI_Waitall", (void **)&m->Waitall},
        {"MPI_Bcast", (void **)&m->Bcast},
        {"MPI_Barrier", (void **)&m->Barrier},
        {"MPI_Abort", (void **)&m->Abort},
        {"MPI_Get_library_version", (void **)&m->Get_library_version},
        {"MPI_Wtime", (void **)&m->Wtime},
        {"ompi_mpi_comm_world", (void **)&m->world},
        {"ompi_mpi_float", (void **)&m->t_float},
        {"ompi_mpi_double", (void **)&m->t_double},
        {"ompi_mpi_byte", (void **)&m->t_byte},
        {"ompi_mpi_op_sum", (void **)&m->op_sum},
        {"ompi_mpi_op_max", (void **)&m->op_max},
        {"ompi_mpi_op_min", (void **)&m->op_min},
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        void *p = dlsym(m->lib, syms[i].name);
        if (!p) {
            snprintf(why, size, "libmpi.so.40 lacks %s: only Open MPI 4 or later is supported",
                     syms[i].name);
            dlclose(m->lib);
            m->lib = NULL;
            return DL_ENODEV;
        }
        *syms[i].slot = p;
    }
    return DL_OK;
}

static double env_double(const char *name, double dflt)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v)
        return dflt;
    double x = strtod(v, &end);
    return *end ? dflt : x;
}

int dl_comm_create(dl_comm **out, const dl_comm_options *opt)
{
    *out = NULL;
    dl_comm *c = calloc(1, sizeof *c);
    if (!c)
        return dl_error(DL_ENOMEM, "out of memory");
    char why[512];
    int rc = load_mpi(&c->mpi, why, sizeof why);
    if (rc < 0) {
        free(c);
        return dl_error(rc, "%s", why);
    }
    c->timeout_s =
        opt && opt->timeout_s > 0 ? opt->timeout_s : env_double("DLBENCH_COMM_TIMEOUT", 300);
    if (!(c->timeout_s > 0))
        c->timeout_s = 300;
    double kb = opt && opt->bucket_bytes ? (double)opt->bucket_bytes / 1024
                                         : env_double("DLBENCH_COMM_BUCKET_KB", 4096);
    c->bucket_floats = kb > 0 ? (size_t)(kb * 1024 / sizeof(float)) : 0;
    c->path = "mpi";

    /* one GPU per rank on a shared machine, before any CUDA context exists */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const char *lsize = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!local)
        local = getenv("SLURM_LOCALID");
    if (local && (!lsize || atoi(lsize) > 1) && !getenv("CUDA_VISIBLE_DEVICES"))
        setenv("CUDA_VISIBLE_DEVICES", local, 0);

    int inited = 0;
    c->mpi.Initialized(&inited);
    if (!inited &&
        c->mpi.Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE_, &c->thread_level) != MPI_SUCCESS_) {
        dlclose(c->mpi.lib);
        free(c);
        return dl_error(DL_ERR, "MPI_Init_thread failed");
    }
    c->mpi.Comm_rank(c->mpi.world, &c->rank);
    c->mpi.Comm_size(c->mpi.world, &c->size);
    char ver[MPI_LIBVERSION_MAX * 2] = "";
    int len = 0;
    c->mpi.Get_library_version(ver, &len);
    ver[strcspn(ver, ",\n")] = 0;
    snprintf(c->desc, sizeof c->desc, "MPI (%.100s), %d rank%s", ver[0] ? ver : "Open MPI", c->size,
             c->size == 1 ? "" : "s");

    pthread_mutex_init(&c->dog_lock, NULL);
    pthread_cond_init(&c->dog_cond, NULL);
    if (pthread_create(&c->dog, NULL, watchdog_main, c) == 0)
        c->dog_running = 1;
    *out = c;
    return DL_OK;
}

void dl_comm_destroy(dl_comm *c)
{
    if (!c)
        return;
    dl_comm_barrier(c);
    if (c->dog_running) {
        pthread_mutex_lock(&c->dog_lock);
        c->dog_quit = 1;
        pthread_cond_signal(&c->dog_cond);
        pthread_mutex_unlock(&c->dog_lock);
        pthread_join(c->dog, NULL);
    }
    pthread_mutex_destroy(&c->dog_lock);
    pthread_cond_destroy(&c->dog_cond);
    dl_nccl_close(c->nccl);
    c->mpi.Finalize();
    /* libmpi stays loaded: its atexit handlers and plugins may still run */
    free(c->buckets);
    free(c->reqs);
    free(c->host);
    free(c);
}

void dl_comm_on_failure(dl_comm *c, void (*fn)(void *user, const char *why), void *user)
{
    pthread_mutex_lock(&c->dog_lock);
    c->on_failure = fn;
    c->failure_user = user;
    pthread_mutex_unlock(&c->dog_lock);
}

void dl_comm_signal(dl_comm *c)
{
    double zero = 0; /* dl_clock_mono_s is async-signal-safe */
    atomic_compare_exchange_strong(&c->signal_at, &zero, dl_clock_mono_s());
}

int dl_comm_rank(const dl_comm *c) { return c ? c->rank : 0; }
int dl_comm_size(const dl_comm *c) { return c ? c->size : 1; }
const char *dl_comm_describe(const dl_comm *c) { return c->desc; }

void dl_comm_abort(dl_comm *c, int code, const char *msg)
{
    fprintf(stderr, "dlbench: rank %d of %d: %s\n", c->rank, c->size, msg);
    fflush(stderr);
    c->mpi.Abort(c->mpi.world, code);
    _exit(code);
}

/* --- host collectives ------------------------------------------------------------ */

static int mpi_check(int rc, const char *call)
{
    return rc == MPI_SUCCESS_ ? DL_OK : dl_error(DL_ERR, "%s failed (MPI error %d)", call, rc);
}

int dl_comm_allreduce(dl_comm *c, double *buf, int n, dl_comm_op op)
{
    mpi_handle o = op == DL_COMM_MAX   ? c->mpi.op_max
                   : op == DL_COMM_MIN ? c->mpi.op_min
                                       : c->mpi.op_sum;
    busy_begin(c, "an all-reduce of step statistics");
    int rc = c->mpi.Allreduce(MPI_IN_PLACE_, buf, n, c->mpi.t_double, o, c->mpi.world);
    busy_end(c);
    return mpi_check(rc, "MPI_Allreduce");
}

int dl_comm_bcast(dl_comm *c, void *buf, size_t bytes, int root)
{
    busy_begin(c, "a broadcast from rank 0");
    int rc = MPI_SUCCESS_;
    for (size_t off = 0; off < bytes && rc == MPI_SUCCESS_; off += (size_t)1 << 30) {
        size_t n = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
        rc = c->mpi.Bcast((char *)buf + off, (int)n, c->mpi.t_byte, root, c->mpi.world);
    }
    busy_end(c);
    return mpi_check(rc, "MPI_Bcast");
}

int dl_comm_barrier(dl_comm *c)
{
    busy_begin(c, "the barrier at the end of the job");
    int rc = c->mpi.Barrier(c->mpi.world);
    busy_end(c);
    return mpi_check(rc, "MPI_Barrier");
}

/* --- what NCCL's set-up is handed (dist_internal.h) -------------------------------- */

static int host_min(void *ctx, double *v) { return dl_comm_allreduce(ctx, v, 1, DL_COMM_MIN); }

static int host_bcast(void *ctx, void *buf, size_t bytes, int root)
{
    return dl_comm_bcast(ctx, buf, bytes, root);
}

static void host_busy_begin(void *ctx, const char *what) { busy_begin(ctx, what); }
static void host_busy_end(void *ctx) { busy_end(ctx); }

/* NCCL for device memory, tried once; all ranks agree on the outcome. */
static void try_nccl(dl_comm *c)
{
    if (c->nccl_tried)
        return;
    c->nccl_tried = 1;
    char why[512] = "";
    dl_nccl_host host = {
        .ctx = c,
        .rank = c->rank,
        .size = c->size,
        .min = host_min,
        .bcast = host_bcast,
        .busy_begin = host_busy_begin,
        .busy_end = host_busy_end,
    };
    if (getenv("DLBENCH_NO_NCCL") || dl_nccl_open(&c->nccl, &host, why, sizeof why) < 0) {
        c->nccl = NULL;
        if (c->rank == 0)
            fprintf(stderr,
                    "dlbench: NCCL not used (%s): GPU gradients go through host "
                    "memory and MPI\n",
                    why[0] ? why : "DLBENCH_NO_NCCL is set");
    }
}

static int ensure_host(dl_comm *c, size_t n)
{
    if (c->host_n >= n)
        return DL_OK;
    float *h = realloc(c->host, n * sizeof *h);
    if (!h)
        return dl_error(DL_ENOMEM, "out of memory for a %zu-float staging buffer", n);
    c->host = h;
    c->host_n = n;
    return DL_OK;
}

int dl_comm_bcast_floats(dl_comm *c, dl_backend *be, float *p, size_t n, int root)
{
    if (n == 0)
        return DL_OK;
    if (be->ops->device == DL_DEVICE_CPU)
        return dl_comm_bcast(c, p, n * sizeof *p, root);
    try_nccl(c);
    if (c->nccl) {
        DL_TRY(be->ops->sync(be));
        return dl_nccl_bcast(c->nccl, p, n, root);
    }
    DL_TRY(ensure_host(c, n));
    if (c->rank == root)
        DL_TRY(be->ops->to_host(be, c->host, p, n * sizeof *p));
    DL_TRY(dl_comm_bcast(c, c->host, n * sizeof *p, root));
    return c->rank == root ? DL_OK : be->ops->to_device(be, p, c->host, n * sizeof *p);
}

/* --- gradients ------------------------------------------------------------------------ */

int dl_comm_grad_plan(dl_comm *c, dl_backend *be, float *p, size_t n, const size_t *cuts, int ncuts)
{
    c->be = be;
    c->grad = p;
    c->grad_n = n;
    c->nbuckets = c->next = c->done = 0;
    int cpu = be->ops->device == DL_DEVICE_CPU;
    if (!cpu) {
        try_nccl(c);
        c->path = c->nccl ? "nccl" : "mpi via host";
    } else {
        c->path = "mpi";
    }
    bucket *b = realloc(c->buckets, ((size_t)ncuts + 2) * sizeof *b);
    mpi_handle *r = realloc(c->reqs, ((size_t)ncuts + 2) * sizeof *r);
    if (b)
        c->buckets = b;
    if (r)
        c->reqs = r;
    if (!b || !r)
        return dl_error(DL_ENOMEM, "out of memory");
    /* from the end downwards; counts must fit MPI's int */
    size_t hi = n, most = (size_t)INT_MAX / 2;
    size_t want = cpu && c->bucket_floats ? c->bucket_floats : n;
    for (int i = ncuts - 1; i >= 0; i--) {
        size_t lo = cuts[i];
        if (lo >= hi)
            continue;
        if (hi - lo >= want || hi - lo > most / 2) {
            c->buckets[c->nbuckets++] = (bucket){lo, hi};
            hi = lo;
        }
    }
    if (hi > 0)
        c->buckets[c->nbuckets++] = (bucket){0, hi};
    return DL_OK;
}

void dl_comm_grad_begin(dl_comm *c)
{
    c->next = 0;
    c->done = 0;
}

static int launch(dl_comm *c, int i)
{
    bucket *b = &c->buckets[i];
    int rc = c->mpi.Iallreduce(MPI_IN_PLACE_, c->grad + b->lo, (int)(b->hi - b->lo), c->mpi.t_float,
                               c->mpi.op_sum, c->mpi.world, &c->reqs[i]);
    return mpi_check(rc, "MPI_Iallreduce");
}

int dl_comm_grad_ready(dl_comm *c, size_t from)
{
    if (c->be->ops->device != DL_DEVICE_CPU || c->bucket_floats == 0 || c->nbuckets < 2)
        return DL_OK;
    double t0 = dl_clock_mono_s();
    while (c->next < c->nbuckets && c->buckets[c->next].lo >= from)
        DL_TRY(launch(c, c->next++));
    /* Open MPI progresses non-blocking collectives inside MPI calls only */
    while (c->done < c->next) {
        int flag = 0;
        DL_TRY(mpi_check(c->mpi.Test(&c->reqs[c->done], &flag, NULL), "MPI_Test"));
        if (!flag)
            break;
        c->done++;
    }
    c->seconds += dl_clock_mono_s() - t0;
    return DL_OK;
}

int dl_comm_grad_finish(dl_comm *c)
{
    double t0 = dl_clock_mono_s();
    int rc = DL_OK;
    if (c->be->ops->device != DL_DEVICE_CPU) {
        DL_TRY(c->be->ops->sync(c->be));
        if (c->nccl) {
            rc = dl_nccl_allreduce_sum(c->nccl, c->grad, c->grad_n);
        } else {
            size_t bytes = c->grad_n * sizeof(float);
            DL_TRY(ensure_host(c, c->grad_n));
            DL_TRY(c->be->ops->to_host(c->be, c->host, c->grad, bytes));
            busy_begin(c, "the gradient all-reduce");
            rc = mpi_check(c->mpi.Allreduce(MPI_IN_PLACE_, c->host, (int)c->grad_n, c->mpi.t_float,
                                            c->mpi.op_sum, c->mpi.world),
                           "MPI_Allreduce");
            busy_end(c);
            if (rc == DL_OK)
                rc = c->be->ops->to_device(c->be, c->grad, c->host, bytes);
        }
    } else if (c->bucket_floats == 0 || c->nbuckets < 2) {
        busy_begin(c, "the gradient all-reduce");
        for (int i = 0; i < c->nbuckets && rc == DL_OK; i++) {
            bucket *b = &c->buckets[i];
            rc = mpi_check(c->mpi.Allreduce(MPI_IN_PLACE_, c->grad + b->lo, (int)(b->hi - b->lo),
                                            c->mpi.t_float, c->mpi.op_sum, c->mpi.world),
                           "MPI_Allreduce");
        }
        busy_end(c);
    } else {
        while (rc == DL_OK && c->next < c->nbuckets)
            rc = launch(c, c->next++);
        if (rc == DL_OK && c->done < c->next) {
            busy_begin(c, "the gradient all-reduce");
            rc = mpi_check(c->mpi.Waitall(c->next - c->done, c->reqs + c->done, NULL),
                           "MPI_Waitall");
            busy_end(c);
            c->done = c->next;
        }
    }
    c->seconds += dl_clock_mono_s() - t0;
    return rc;
}

double dl_comm_take_seconds(dl_comm *c)
{
    double s = c->seconds;
    c->seconds = 0;
    return s;
}

const char *dl_comm_grad_path(const dl_comm *c) { return c->path; }
