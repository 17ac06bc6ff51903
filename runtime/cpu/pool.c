/* pool.c — a fixed pool of threads for parallel_for with a static split: thread k of n takes the
 * k-th contiguous slice of [0, count). The caller's thread is worker 0. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "ops/ops.h"
#include "runtime/cpu/exec.h"

#define POOL_MAX 64

struct CpuPool {
  int n;
  pthread_t th[POOL_MAX];
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  uint64_t gen;
  int pending;
  bool quit;
  CpuRangeFn fn;
  void *arg;
  int64_t count;
};

typedef struct {
  CpuPool *p;
  int k;
} Worker;

static void slice(int64_t count, int n, int k, int64_t *lo, int64_t *hi) {
  int64_t per = count / n, extra = count % n;
  *lo = k * per + (k < extra ? k : extra);
  *hi = *lo + per + (k < extra ? 1 : 0);
}

static void *worker_main(void *arg) {
  Worker w = *(Worker *)arg;
  free(arg);
  CpuPool *p = w.p;
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    while (p->gen == seen && !p->quit)
      pthread_cond_wait(&p->go, &p->mu);
    if (p->quit) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = p->gen;
    CpuRangeFn fn = p->fn;
    void *fa = p->arg;
    int64_t count = p->count;
    pthread_mutex_unlock(&p->mu);
    int64_t lo, hi;
    slice(count, p->n, w.k, &lo, &hi);
    if (hi > lo) fn(fa, lo, hi);
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
    pthread_mutex_unlock(&p->mu);
  }
}

CpuPool *cpu_pool_new(int nthreads) {
  if (nthreads <= 0) nthreads = 2;
  if (nthreads > POOL_MAX) nthreads = POOL_MAX;
  CpuPool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = nthreads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  for (int k = 1; k < nthreads; k++) {
    Worker *w = malloc(sizeof *w);
    if (w) *w = (Worker){p, k};
    if (!w || pthread_create(&p->th[k], NULL, worker_main, w) != 0) {
      free(w);
      p->n = k; /* run with the threads we got */
      break;
    }
  }
  return p;
}

void cpu_pool_free(CpuPool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->quit = true;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int k = 1; k < p->n; k++)
    pthread_join(p->th[k], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  free(p);
}

/* The CpuCtx.parallel_for of the executor. */
void cpu_pool_for(const CpuCtx *c, int64_t count, CpuRangeFn fn, void *arg) {
  CpuPool *p = c->pool;
  if (count <= 0) return;
  if (p->n == 1 || count == 1) {
    fn(arg, 0, count);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->arg = arg;
  p->count = count;
  p->pending = p->n - 1;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  int64_t lo, hi;
  slice(count, p->n, 0, &lo, &hi);
  if (hi > lo) fn(arg, lo, hi);
  pthread_mutex_lock(&p->mu);
  while (p->pending > 0)
    pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
