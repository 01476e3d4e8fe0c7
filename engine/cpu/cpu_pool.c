/* cpu_pool.c - a persistent pool of worker threads for the CPU backend's parallel loops
 *
 * A training step issues a few dozen parallel loops of tens of microseconds
 * to a millisecond, separated by short serial stretches (bias, small
 * products, the loss), so a wake-up through a condition variable (a futex
 * round trip and a scheduler pass, 5-20 us, more on a loaded machine)
 * would be a large part of a loop. Workers therefore poll the job counter
 * for SPIN_NS after each job, which covers the gaps inside a step, and
 * only then sleep on the condition variable; the caller likewise polls
 * briefly for the workers' chunks before it sleeps. Polling uses pause,
 * never sched_yield, and stays short: on a shared machine a thread that
 * spins long loses its scheduler credit for when it has work. A job that
 * finds the workers asleep pays one broadcast.
 *
 * A job is cut into a fixed number of chunks (fixed boundaries, so what a
 * chunk computes never depends on timing), and the chunks into one home
 * range per thread: thread i runs chunk after chunk of its own range, then
 * takes what is left of the others'. So on a shared machine a worker that
 * is descheduled mid-job no longer holds up the others, who take its
 * chunks; and a thread mostly gets the same part of a tensor in every
 * job. That matters where the two cores share no cache: reading what the
 * other core just wrote ran at 28 GB/s there against 103 GB/s from the
 * own cache (256 KB), and an optimizer pass whose chunks went to whichever
 * thread came first read half of its weights from the other core each
 * step (the bf16 MLP at 2 threads: 108-109k samples/s, 117k with home
 * ranges).
 *
 * Hand-over protocol (all atomics sequentially consistent):
 *   job:   caller publishes each home range's ticket = (generation + 1 <<
 *          32 | 0), which retires the last job's, then stores
 *          fn/arg/n/chunks, resets `finished`, then bumps `generation`; it
 *          broadcasts `wake` only when `sleepers` is non-zero. A worker
 *          bumps `sleepers` before it re-reads `generation` under the lock,
 *          so one of the two always sees the other.
 *   claim: compare-and-swap of a range's ticket to its next chunk, valid
 *          only while its generation half matches; so a late worker can
 *          never claim a chunk of a job that has moved on, and the job's
 *          fields are stable from a successful claim until that chunk is
 *          counted.
 *   done:  each chunk bumps `finished`; whoever completes the last one
 *          signals `done` when the caller has announced itself in
 *          `waiting` (the same pairing as for sleepers).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "engine/base/clock.h"
#include "engine/cpu/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* How long a worker keeps polling for the next job, and the caller for
 * the workers' parts, before sleeping. */
#define SPIN_NS 30000L

/* Chunks a job is cut into per thread (fewer when the grain says so). */
#define CHUNKS_PER_THREAD 4

/* A thread's home range of a job's chunks, on a cache line of its own. */
struct pool_slot {
    _Alignas(64) _Atomic unsigned long long ticket;
    struct dl_pool *pool; /* for the worker that owns it */
    int index;
};

struct dl_pool {
    int threads; /* including the calling thread */
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    /* the job in flight (written before generation is bumped) */
    dl_pool_fn fn;
    void *arg;
    size_t n;
    _Atomic size_t chunks;   /* atomic: a late worker may compare against it
                            * while the next job is being set up (its claim
                            * then fails on the generation) */
    _Atomic long generation; /* bumped per job */
    /* per thread: generation << 32 | next chunk of its home range */
    struct pool_slot *slot;
    _Atomic size_t finished; /* chunks of the current job done */
    _Atomic int sleepers;    /* workers blocked (or about to block) on wake */
    _Atomic int waiting;     /* the caller blocked (or about to block) on done */
    _Atomic int quit;
};

/* Static partition: part i of `parts` of [0, n). */
static void part_range(size_t n, int parts, int i, size_t *b, size_t *e)
{
    size_t chunk = n / (size_t)parts, rest = n % (size_t)parts;
    *b = (size_t)i * chunk + ((size_t)i < rest ? (size_t)i : rest);
    *e = *b + chunk + ((size_t)i < rest ? 1 : 0);
}

/* Called every 64 polls of a spin: whether SPIN_NS have passed since its
 * first call (*start 0 before it). */
static int spin_expired(double *start)
{
    double t = dl_clock_mono_s();
    if (!*start) {
        *start = t;
        return 0;
    }
    return t - *start > SPIN_NS * 1e-9;
}

/* Polls until *flag != value or SPIN_NS pass; returns whether it changed. */
static int spin_while_long(_Atomic long *flag, long value)
{
    double start = 0;
    for (int i = 0;; i++) {
        if (atomic_load_explicit(flag, memory_order_acquire) != value)
            return 1;
        CPU_RELAX();
        if ((i & 63) == 63 && spin_expired(&start))
            return 0;
    }
}

static int spin_until_finished(dl_pool *pool)
{
    double start = 0;
    for (int i = 0;; i++) {
        if (atomic_load_explicit(&pool->finished, memory_order_acquire) ==
            atomic_load_explicit(&pool->chunks, memory_order_relaxed))
            return 1;
        CPU_RELAX();
        if ((i & 63) == 63 && spin_expired(&start))
            return 0;
    }
}

/* Claims chunk by chunk from home range `s` of job `gen`; runs each. */
static void run_slot(dl_pool *pool, long gen, int s)
{
    _Atomic unsigned long long *tk = &pool->slot[s].ticket;
    unsigned long long t = atomic_load(tk);
    for (;;) {
        size_t chunks = atomic_load_explicit(&pool->chunks, memory_order_relaxed), b, e;
        part_range(chunks, pool->threads, s, &b, &e);
        if ((long)(t >> 32) != (gen & 0xffffffffL) || b + (t & 0xffffffffu) >= e)
            return;
        if (!atomic_compare_exchange_weak(tk, &t, t + 1))
            continue; /* t now holds the current value */
        size_t i = b + (size_t)(t & 0xffffffffu), cb, ce;
        part_range(pool->n, (int)chunks, (int)i, &cb, &ce);
        if (cb < ce)
            pool->fn(pool->arg, cb, ce);
        if (atomic_fetch_add(&pool->finished, 1) + 1 == chunks && atomic_load(&pool->waiting)) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
        t = atomic_load(tk);
    }
}

/* Thread `self` runs its home range of job `gen`, then what is left of
 * the others'. */
static void run_chunks(dl_pool *pool, long gen, int self)
{
    for (int k = 0; k < pool->threads; k++)
        run_slot(pool, gen, (self + k) % pool->threads);
}

static void *worker_main(void *p)
{
    struct pool_slot *own = p;
    dl_pool *pool = own->pool;
    long seen = 0;
    for (;;) {
        if (!spin_while_long(&pool->generation, seen)) {
            pthread_mutex_lock(&pool->lock);
            atomic_fetch_add(&pool->sleepers, 1);
            while (!atomic_load(&pool->quit) && atomic_load(&pool->generation) == seen)
                pthread_cond_wait(&pool->wake, &pool->lock);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->lock);
        }
        if (atomic_load(&pool->quit))
            break;
        seen = atomic_load(&pool->generation);
        run_chunks(pool, seen, own->index);
    }
    return NULL;
}

/* Creates a pool of `threads` (including the caller; < 1 counts as 1).
 * If a worker cannot be started the pool runs with the ones it has.
 * Returns NULL when out of memory. */
dl_pool *dl_pool_create(int threads)
{
    dl_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->threads = threads < 1 ? 1 : threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->workers = calloc((size_t)p->threads, sizeof *p->workers);
    p->slot = aligned_alloc(64, (size_t)p->threads * sizeof *p->slot);
    if (!p->workers || !p->slot) {
        free(p->workers);
        free(p->slot);
        p->workers = NULL;
        p->slot = NULL;
        p->threads = 1;
        return p;
    }
    for (int i = 0; i < p->threads; i++) {
        atomic_init(&p->slot[i].ticket, 0);
        p->slot[i].pool = p;
        p->slot[i].index = i;
    }
    for (int i = 1; i < p->threads; i++)
        if (pthread_create(&p->workers[i], NULL, worker_main, &p->slot[i]) != 0) {
            p->threads = i; /* run with what we have */
            break;
        }
    return p;
}

void dl_pool_destroy(dl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->threads; i++)
        pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->workers);
    free(p->slot);
    free(p);
}

int dl_pool_threads(const dl_pool *p) { return p ? p->threads : 1; }

void dl_pool_for(dl_pool *p, size_t n, size_t grain, dl_pool_fn fn, void *arg)
{
    if (n == 0)
        return;
    if (!p || p->threads == 1 || n < grain * 2) {
        fn(arg, 0, n);
        return;
    }
    /* a few chunks per thread, so that others can take over from a
     * descheduled one, but none under the grain */
    size_t chunks = n / (grain ? grain : 1);
    if (chunks > (size_t)p->threads * CHUNKS_PER_THREAD)
        chunks = (size_t)p->threads * CHUNKS_PER_THREAD;
    /* Retire the last job's ticket before its fields change. A worker late
     * from that job may still hold its exhausted ticket (gen, k) and test k
     * against `chunks`: had the new, larger chunk count been stored first,
     * its compare-and-swap would have succeeded and run chunk k of the new
     * job under the old generation, a second time (seen as one slice of a
     * filter gradient added twice). */
    long gen = atomic_load(&p->generation) + 1;
    for (int i = 0; i < p->threads; i++)
        atomic_store(&p->slot[i].ticket, (unsigned long long)(gen & 0xffffffffL) << 32);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    atomic_store_explicit(&p->chunks, chunks, memory_order_relaxed);
    atomic_store(&p->finished, 0);
    atomic_store(&p->generation, gen);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }

    run_chunks(p, gen, 0);

    if (!spin_until_finished(p)) {
        pthread_mutex_lock(&p->lock);
        atomic_store(&p->waiting, 1);
        while (atomic_load(&p->finished) < chunks)
            pthread_cond_wait(&p->done, &p->lock);
        atomic_store(&p->waiting, 0);
        pthread_mutex_unlock(&p->lock);
    }
}
