/* labkit's kernels on several threads (threads.h says what a job is), in one of two builds.
 *
 * LABKIT_OPENMP (where Python found the OpenMP runtime PyTorch loaded, and links to that very library):
 * a job is one OpenMP parallel region, so the kernels run on PyTorch's own worker threads. Two runtimes
 * in one process fight for the cores: each spins its idle workers for a while after its work (libgomp
 * for about a millisecond), and on the 2-core AMD EPYC a bf16 decode step on a separate pool ran 40 %
 * slower on two threads than on one, because PyTorch's spinning workers sat on the second core.
 *
 * Otherwise (no OpenMP runtime in the process, or LABKIT_NATIVE_THREADS=pool): the pool below.
 *
 * Python tells each calling thread how many threads to use (`labkit_set_threads`, from
 * torch.get_num_threads(): one in the labs, every core in a learner's own script or `labkit serve`). A
 * job runs in that many parts: part 0 on the calling thread, part i on worker i. The pool holds
 * threads - 1 workers, started on first use and kept.
 *
 * Waiting. A decode step calls a kernel every few microseconds, and waking a sleeping thread costs
 * tens of them, so after a job a worker spins (with the CPU's pause hint) for SPIN_NS before it sleeps
 * on a condition variable; the caller spins until its workers are done (yielding the CPU after
 * YIELD_NS, for a machine so busy that a worker lost its core).
 *
 * Every worker acknowledges every job, also one with fewer parts than workers, so a worker can never
 * read the next job's description as its own: the caller waits for all of them before it returns.
 * One job at a time: a second thread that calls a kernel while a job runs computes its own alone
 * (the same bits). A worker never starts a job of its own. After fork() the child has no workers
 * (only the forking thread survives it): it starts new ones when it needs them.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "threads.h"

#define MAX_THREADS 256
#define MIN_PART_COST 65536         /* multiply-adds: below this a part costs less than waking a thread */
#define SPIN_NS 300000              /* a worker spins this long after a job before it sleeps */
#define YIELD_NS 1000000            /* the caller yields its CPU after waiting this long */

/* Parts of the last job split across threads (tests: the split happened). */
static int last_parts = 1;

static _Thread_local int requested = 1;    /* threads this thread asked for */

struct job {
    part_fn fn;
    void *ctx;
    int64_t n, align;
    int parts;
};

/* Outputs [lo, hi) of part i of the job's parts: cut at multiples of align, as evenly as they allow. */
static void run_part(const struct job *j, int i) {
    const int64_t units = (j->n + j->align - 1) / j->align;
    const int64_t a = units * i / j->parts * j->align, b = units * (i + 1) / j->parts * j->align;
    const int64_t lo = a < j->n ? a : j->n, hi = b < j->n ? b : j->n;
    if (lo < hi)
        j->fn(j->ctx, lo, hi);
}

/* How many parts a job of n outputs (cost multiply-adds each) is worth: at most the threads asked for,
 * one per multiple of align, and at least MIN_PART_COST of work a part. */
static int64_t parts_for(int64_t n, int64_t align, int64_t cost) {
    const int64_t units = (n + align - 1) / align, worth = cost > 0 ? n * cost / MIN_PART_COST : units;
    int64_t parts = requested;
    parts = parts < units ? parts : units;
    return parts < worth ? parts : worth;
}

/* What fork() leaves the child (each build's own), registered once. */
static void after_fork(void);

static pthread_once_t fork_handler = PTHREAD_ONCE_INIT;

static void register_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork); }

#if defined(LABKIT_OPENMP)
#include <omp.h>

/* OpenMP's runtime is not fork-safe: a forked child computes alone (PyTorch's does the same). */
static int forked_child = 0;

static void after_fork(void) { forked_child = 1; }

void parallel_parts(part_fn fn, void *ctx, int64_t n, int64_t align, int64_t cost) {
    if (n <= 0)
        return;
    align = align < 1 ? 1 : align;
    pthread_once(&fork_handler, register_fork_handler);
    const int64_t parts = parts_for(n, align, cost);
    if (parts <= 1 || forked_child || omp_in_parallel()) {
        fn(ctx, 0, n);
        return;
    }
#pragma omp parallel num_threads((int)parts)
    {
        const struct job j = {fn, ctx, n, align, omp_get_num_threads()};
        run_part(&j, omp_get_thread_num());
        if (omp_get_thread_num() == 0)
            last_parts = j.parts;
    }
}

static int pool_workers(void) { return 0; }

#define USES_OPENMP 1

#else

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct {
    pthread_mutex_t lock;           /* guards sleeping and waking */
    pthread_cond_t wake;
    pthread_mutex_t busy;           /* held by the thread whose job runs */
    int workers;                    /* started and running */
    atomic_uint generation;         /* one more per job */
    atomic_int pending;             /* workers yet to acknowledge the current job */
    struct job job;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, {0}};

/* The generation each worker was started at: a worker started for a job must not take that job's
 * generation as one it has seen (it may first run after the job was published). */
static unsigned started_at[MAX_THREADS];

static _Thread_local int is_worker = 0;

static void *worker(void *arg) {
    const int me = (int)(intptr_t)arg;      /* 1 .. workers */
    is_worker = 1;
    unsigned seen = started_at[me];
    for (;;) {
        unsigned g = atomic_load_explicit(&pool.generation, memory_order_acquire);
        const int64_t start = now_ns();
        for (int spins = 1; g == seen; spins++) {
            if ((spins & 1023) == 0 && now_ns() - start > SPIN_NS) {
                pthread_mutex_lock(&pool.lock);
                while ((g = atomic_load_explicit(&pool.generation, memory_order_acquire)) == seen)
                    pthread_cond_wait(&pool.wake, &pool.lock);
                pthread_mutex_unlock(&pool.lock);
                break;
            }
            relax();
            g = atomic_load_explicit(&pool.generation, memory_order_acquire);
        }
        seen = g;
        const struct job j = pool.job;      /* written before the generation was released */
        if (me < j.parts)
            run_part(&j, me);
        atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel);
    }
    return NULL;
}

/* Only the forking thread survives fork(): the child forgets the workers and starts new ones. */
static void after_fork(void) {
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_mutex_init(&pool.busy, NULL);
    pool.workers = 0;
    atomic_store(&pool.pending, 0);
}

/* Start workers up to `wanted` (called with pool.busy held). Returns how many there are. */
static int start_workers(int wanted) {
    pthread_once(&fork_handler, register_fork_handler);
    while (pool.workers < wanted && pool.workers + 1 < MAX_THREADS) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started_at[pool.workers + 1] = atomic_load(&pool.generation);
        const int failed = pthread_create(&t, &attr, worker, (void *)(intptr_t)(pool.workers + 1));
        pthread_attr_destroy(&attr);
        if (failed)
            break;
        pool.workers++;
    }
    return pool.workers;
}

void parallel_parts(part_fn fn, void *ctx, int64_t n, int64_t align, int64_t cost) {
    if (n <= 0)
        return;
    align = align < 1 ? 1 : align;
    int64_t parts = parts_for(n, align, cost);
    if (parts <= 1 || is_worker || pthread_mutex_trylock(&pool.busy) != 0) {
        fn(ctx, 0, n);
        return;
    }
    const int have = start_workers((int)parts - 1);     /* fewer where the system refused a thread */
    parts = parts < have + 1 ? parts : have + 1;
    if (parts <= 1) {
        pthread_mutex_unlock(&pool.busy);
        fn(ctx, 0, n);
        return;
    }
    const struct job j = {fn, ctx, n, align, (int)parts};
    last_parts = j.parts;
    pthread_mutex_lock(&pool.lock);
    pool.job = j;
    atomic_store_explicit(&pool.pending, pool.workers, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    run_part(&j, 0);

    const int64_t start = now_ns();
    for (int spins = 1; atomic_load_explicit(&pool.pending, memory_order_acquire) > 0; spins++) {
        if ((spins & 1023) == 0 && now_ns() - start > YIELD_NS)
            sched_yield();
        else
            relax();
    }
    pthread_mutex_unlock(&pool.busy);
}

static int pool_workers(void) { return pool.workers; }

#define USES_OPENMP 0

#endif

/* The entry points. */
void labkit_set_threads(int n) { requested = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n; }

int labkit_threads(void) { return requested; }

int labkit_last_parts(void) { return last_parts; }

int labkit_pool_workers(void) { return pool_workers(); }

int labkit_threads_openmp(void) { return USES_OPENMP; }
