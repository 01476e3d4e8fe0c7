/* cpu_pool.c - a persistent pool of worker threads for the CPU backend's parallel loops */
#include <pthread.h>
#include <stdlib.h>

#include "cpu.h"

struct dl_pool {
    int threads; /* including the calling thread */
    pthread_t *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    /* the job in flight */
    dl_pool_fn fn;
    void *arg;
    size_t n;
    long generation; /* bumped per job; workers run each generation once */
    int pending;     /* workers still running the current job */
    int quit;
};

typedef struct {
    dl_pool *pool;
    int index;
} worker_arg;

/* Static partition: part i of `parts` of [0, n). */
static void part_range(size_t n, int parts, int i, size_t *b, size_t *e)
{
    size_t chunk = n / (size_t)parts, rest = n % (size_t)parts;
    *b = (size_t)i * chunk + ((size_t)i < rest ? (size_t)i : rest);
    *e = *b + chunk + ((size_t)i < rest ? 1 : 0);
}

static void *worker_main(void *p)
{
    worker_arg *wa = p;
    dl_pool *pool = wa->pool;
    int index = wa->index;
    free(wa);
    long seen = 0;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->quit && pool->generation == seen)
            pthread_cond_wait(&pool->wake, &pool->lock);
        if (pool->quit)
            break;
        seen = pool->generation;
        dl_pool_fn fn = pool->fn;
        void *arg = pool->arg;
        size_t b, e;
        part_range(pool->n, pool->threads, index, &b, &e);
        pthread_mutex_unlock(&pool->lock);
        if (b < e)
            fn(arg, b, e);
        pthread_mutex_lock(&pool->lock);
        if (--pool->pending == 0)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

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
    for (int i = 1; i < p->threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        wa->pool = p;
        wa->index = i;
        if (pthread_create(&p->workers[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->threads = i; /* run with what we have */
            break;
        }
    }
    return p;
}

void dl_pool_destroy(dl_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->quit = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->threads; i++)
        pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->workers);
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
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->pending = p->threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    size_t b, e;
    part_range(n, p->threads, 0, &b, &e);
    if (b < e)
        fn(arg, b, e);

    pthread_mutex_lock(&p->lock);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}
