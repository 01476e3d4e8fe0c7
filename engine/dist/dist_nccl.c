/* dist_nccl.c - NCCL loaded with dlopen for GPU ranks; MPI only hands out the unique id */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dist/dist_internal.h"
#include "engine/base/error.h"

/* NCCL's and the CUDA runtime's C ABI, as much as is used: a communicator
 * and a stream are opaque pointers, results and enums are ints, the unique
 * id is 128 bytes (NCCL_UNIQUE_ID_BYTES, stable since NCCL 2.0). */
#define NCCL_ID_BYTES 128
#define NCCL_FLOAT32 7
#define NCCL_SUM 0
typedef struct nccl_comm_s *nccl_comm;
typedef struct cuda_stream_s *cuda_stream;
typedef struct {
    char internal[NCCL_ID_BYTES];
} nccl_id;

struct dl_nccl {
    dl_nccl_host host;
    void *lib, *rt;
    int (*GetVersion)(int *version);
    int (*GetUniqueId)(nccl_id *id);
    int (*CommInitRank)(nccl_comm *comm, int nranks, nccl_id id, int rank);
    int (*CommDestroy)(nccl_comm comm);
    int (*AllReduce)(const void *s, void *r, size_t n, int type, int op, nccl_comm comm,
                     cuda_stream st);
    int (*Broadcast)(const void *s, void *r, size_t n, int type, int root, nccl_comm comm,
                     cuda_stream st);
    const char *(*GetErrorString)(int rc);
    int (*SetDevice)(int dev);
    int (*StreamCreate)(cuda_stream *st);
    int (*StreamDestroy)(cuda_stream st);
    int (*StreamSynchronize)(cuda_stream st);
    nccl_comm comm;
    cuda_stream stream;
};

static void *sym(void *lib, const char *name, char *why, size_t size, int *missing)
{
    void *p = dlsym(lib, name);
    if (!p && !*missing) {
        snprintf(why, size, "%s not found in the NCCL or CUDA runtime library", name);
        *missing = 1;
    }
    return p;
}

static int load(dl_nccl *n, char *why, size_t size)
{
    n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        snprintf(why, size, "libnccl.so.2 not found (%s)", dlerror());
        return DL_ENODEV;
    }
    static const char *rts[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    for (size_t i = 0; i < sizeof rts / sizeof *rts && !n->rt; i++)
        n->rt = dlopen(rts[i], RTLD_NOW | RTLD_LOCAL);
    if (!n->rt) {
        snprintf(why, size, "no CUDA runtime library (libcudart.so.13 or .12) found");
        return DL_ENODEV;
    }
    int missing = 0;
    *(void **)&n->GetVersion = sym(n->lib, "ncclGetVersion", why, size, &missing);
    *(void **)&n->GetUniqueId = sym(n->lib, "ncclGetUniqueId", why, size, &missing);
    *(void **)&n->CommInitRank = sym(n->lib, "ncclCommInitRank", why, size, &missing);
    *(void **)&n->CommDestroy = sym(n->lib, "ncclCommDestroy", why, size, &missing);
    *(void **)&n->AllReduce = sym(n->lib, "ncclAllReduce", why, size, &missing);
    *(void **)&n->Broadcast = sym(n->lib, "ncclBroadcast", why, size, &missing);
    *(void **)&n->GetErrorString = sym(n->lib, "ncclGetErrorString", why, size, &missing);
    *(void **)&n->SetDevice = sym(n->rt, "cudaSetDevice", why, size, &missing);
    *(void **)&n->StreamCreate = sym(n->rt, "cudaStreamCreate", why, size, &missing);
    *(void **)&n->StreamDestroy = sym(n->rt, "cudaStreamDestroy", why, size, &missing);
    *(void **)&n->StreamSynchronize = sym(n->rt, "cudaStreamSynchronize", why, size, &missing);
    return missing ? DL_ENODEV : DL_OK;
}

void dl_nccl_close(dl_nccl *n)
{
    if (!n)
        return;
    if (n->comm)
        n->CommDestroy(n->comm);
    if (n->stream)
        n->StreamDestroy(n->stream);
    if (n->lib)
        dlclose(n->lib);
    if (n->rt)
        dlclose(n->rt);
    free(n);
}

/* Rank 0 makes the unique id, every rank picks its device; a failure
 * anywhere is everyone's (ok = MIN). */
static int make_id(dl_nccl *n, int rc, const dl_nccl_host *h, nccl_id *id, char *why, size_t size)
{
    memset(id, 0, sizeof *id);
    if (rc == DL_OK && h->rank == 0) {
        int r = n->GetUniqueId(id);
        if (r != 0) {
            snprintf(why, size, "ncclGetUniqueId: %s", n->GetErrorString(r));
            rc = DL_ERR;
        }
    }
    if (rc == DL_OK && n->SetDevice(0) != 0) {
        snprintf(why, size, "cudaSetDevice(0) failed (no GPU visible to this rank?)");
        rc = DL_ENODEV;
    }
    double ok = rc == DL_OK;
    if (h->min(h->ctx, &ok) < 0 || !(ok > 0)) {
        if (rc == DL_OK)
            snprintf(why, size, "another rank could not load NCCL");
        return rc < 0 ? rc : DL_ENODEV;
    }
    if (h->bcast(h->ctx, id, sizeof *id, 0) < 0) {
        snprintf(why, size, "broadcast of the NCCL id failed");
        return DL_ERR;
    }
    return DL_OK;
}

/* The stream and the communicator of every rank; the ranks agree. */
static int make_comm(dl_nccl *n, const dl_nccl_host *h, nccl_id id, char *why, size_t size)
{
    int r = n->StreamCreate(&n->stream);
    if (r == 0) {
        h->busy_begin(h->ctx, "ncclCommInitRank");
        r = n->CommInitRank(&n->comm, h->size, id, h->rank);
        h->busy_end(h->ctx);
        if (r != 0) {
            snprintf(why, size, "ncclCommInitRank: %s", n->GetErrorString(r));
            n->comm = NULL;
        }
    } else {
        snprintf(why, size, "cudaStreamCreate failed (%d)", r);
        n->stream = NULL;
    }
    double ok = r == 0;
    if (h->min(h->ctx, &ok) < 0 || !(ok > 0)) {
        if (r == 0)
            snprintf(why, size, "another rank could not create its NCCL communicator");
        return DL_ENODEV;
    }
    return DL_OK;
}

int dl_nccl_open(dl_nccl **out, const dl_nccl_host *host, char *why, size_t size)
{
    *out = NULL;
    dl_nccl *n = calloc(1, sizeof *n);
    int rc = n ? load(n, why, size) : DL_ENOMEM;
    nccl_id id;
    rc = make_id(n, rc, host, &id, why, size);
    if (rc == DL_OK)
        rc = make_comm(n, host, id, why, size);
    if (rc < 0) {
        dl_nccl_close(n);
        return rc;
    }
    n->host = *host;
    *out = n;
    return DL_OK;
}

static int wait(dl_nccl *n, int r, const char *call)
{
    if (r != 0)
        return dl_error(DL_ERR, "%s: %s", call, n->GetErrorString(r));
    n->host.busy_begin(n->host.ctx, call);
    int s = n->StreamSynchronize(n->stream);
    n->host.busy_end(n->host.ctx);
    return s == 0 ? DL_OK : dl_error(DL_ERR, "%s: the CUDA stream failed (error %d)", call, s);
}

int dl_nccl_allreduce_sum(dl_nccl *n, float *p, size_t count)
{
    return wait(n, n->AllReduce(p, p, count, NCCL_FLOAT32, NCCL_SUM, n->comm, n->stream),
                "ncclAllReduce");
}

int dl_nccl_bcast(dl_nccl *n, float *p, size_t count, int root)
{
    return wait(n, n->Broadcast(p, p, count, NCCL_FLOAT32, root, n->comm, n->stream),
                "ncclBroadcast");
}
