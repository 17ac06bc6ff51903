/* simt.cc — the scheduler behind simt.h: a launch runs its blocks one after another, each block's
 * threads as coroutines (ucontext) on one OS thread, switched only where simt.h's barriers and warp
 * collectives meet. Deterministic: the same launch runs the same interleaving every time. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include "simt.h"
#include "simt_launch.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#endif
#ifdef SIMT_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace {

enum State { RUN, WAIT_BLOCK, WAIT_WARP, DONE };

struct Thread {
  SimtThread pub;
  ucontext_t ctx;
  char *stack;
  State state;
  void *fake_stack; /* ASan's fake stack of this coroutine while it is switched out */
};

const size_t STACK = 256 * 1024;
const int MAX_THREADS = 1024;

struct Launch {
  const char *name;
  void (*call)(void (*)(), void **);
  void (*fn)();
  void **args;
  Thread *t;
  int n; /* threads a block */
  ucontext_t sched;
  unsigned char *smem;
  size_t smem_bytes;
  /* the warp exchange: two buffers, alternated per collective (simt.h) */
  uint64_t xchg[MAX_THREADS / 32][2][32];
  unsigned xn[MAX_THREADS]; /* per thread: collectives so far */
  /* the mma fragments of a warp's lanes */
  unsigned frag[MAX_THREADS / 32][2][32][6];
  bool reverse; /* this launch's order: warps and lanes last first */
  const void *sched_bottom;
  size_t sched_size;
  void *sched_fake;
  char err[512];
} L;

[[noreturn]] void die(const char *what) {
  fprintf(stderr, "FATAL simt: kernel %s, block (%u, %u, %u): %s\n", L.name, simt_block_idx.x,
          simt_block_idx.y, simt_block_idx.z, what);
  fflush(stderr);
  abort();
}

Thread *self() { return reinterpret_cast<Thread *>(simt_cur); }

/* From a coroutine back to the scheduler, and on when it switches back. */
void yield(State s) {
  Thread *t = self();
  t->state = s;
#ifdef SIMT_ASAN
  __sanitizer_start_switch_fiber(&t->fake_stack, L.sched_bottom, L.sched_size);
#endif
  swapcontext(&t->ctx, &L.sched);
#ifdef SIMT_ASAN
  __sanitizer_finish_switch_fiber(t->fake_stack, &L.sched_bottom, &L.sched_size);
#endif
}

void thread_main() {
#ifdef SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &L.sched_bottom, &L.sched_size);
#endif
  L.call(L.fn, L.args);
  Thread *t = self();
  t->state = DONE;
#ifdef SIMT_ASAN
  __sanitizer_start_switch_fiber(nullptr, L.sched_bottom, L.sched_size);
#endif
  /* uc_link: back to the scheduler */
}

/* Switches to thread t until it reaches a barrier or returns. */
void run_thread(Thread *t) {
  simt_cur = &t->pub;
#ifdef SIMT_ASAN
  __sanitizer_start_switch_fiber(&L.sched_fake, t->stack, STACK);
#endif
  swapcontext(&L.sched, &t->ctx);
#ifdef SIMT_ASAN
  __sanitizer_finish_switch_fiber(L.sched_fake, nullptr, nullptr);
#endif
  if (t->state == RUN) die("a coroutine came back without a barrier");
}

/* Runs warp w as far as it goes alone: its lanes in order until each waits or returns, released
 * at every warp collective all 32 reach, until the warp waits at __syncthreads or has returned. */
void run_warp(int w) {
  int lo = w * 32, hi = lo + 32 < L.n ? lo + 32 : L.n;
  for (;;) {
    for (int k = 0; k < hi - lo; k++) {
      Thread *t = &L.t[L.reverse ? hi - 1 - k : lo + k];
      if (t->state == RUN) run_thread(t);
    }
    int at_warp = 0;
    for (int i = lo; i < hi; i++)
      at_warp += L.t[i].state == WAIT_WARP;
    if (at_warp == 0) return;
    if (at_warp != 32)
      die(hi - lo != 32
              ? "a warp collective in a warp of fewer than 32 threads"
              : "a warp collective that not every lane of the warp reaches (some returned or wait at "
                "__syncthreads)");
    for (int i = lo; i < hi; i++)
      L.t[i].state = RUN;
  }
}

/* Thread i's coroutine, at the start of the kernel (apart: getcontext returns twice). */
__attribute__((noinline)) void make_thread(int i) {
  Thread *t = &L.t[i];
  t->pub.tid = {(unsigned)i, 0, 0};
  t->state = RUN;
  t->fake_stack = nullptr;
  getcontext(&t->ctx);
  t->ctx.uc_stack.ss_sp = t->stack;
  t->ctx.uc_stack.ss_size = STACK;
  t->ctx.uc_link = &L.sched;
  makecontext(&t->ctx, thread_main, 0);
}

/* One block: its warps one after another (the last first when reversed), each as far as it goes
 * alone, then __syncthreads released; until every thread has returned. */
void run_block() {
  memset(L.smem, 0xff, L.smem_bytes);
  memset(L.xn, 0, sizeof L.xn);
  for (int i = 0; i < L.n; i++)
    make_thread(i);
  int nw = (L.n + 31) / 32;
  for (;;) {
    for (int k = 0; k < nw; k++)
      run_warp(L.reverse ? nw - 1 - k : k);
    int live = 0;
    for (int i = 0; i < L.n; i++)
      live += L.t[i].state != DONE;
    if (live == 0) return;
    for (int i = 0; i < L.n; i++)
      if (L.t[i].state == WAIT_BLOCK) L.t[i].state = RUN;
  }
}

} // namespace

SimtThread *simt_cur;
simt_dim3 simt_block_idx, simt_block_dim, simt_grid_dim;

void simt_syncthreads() { yield(WAIT_BLOCK); }
void simt_syncwarp() { yield(WAIT_WARP); }

void *simt_dynamic_smem() { return L.smem; }

uint64_t simt_warp_exchange(uint64_t mine, int src) {
  int tid = (int)self()->pub.tid.x, w = tid / 32, lane = tid % 32, par = (int)(L.xn[tid]++ & 1u);
  L.xchg[w][par][lane] = mine;
  yield(WAIT_WARP);
  return L.xchg[w][par][src & 31];
}

void simt_warp_gather(uint64_t mine, uint64_t *all) {
  int tid = (int)self()->pub.tid.x, w = tid / 32, lane = tid % 32, par = (int)(L.xn[tid]++ & 1u);
  L.xchg[w][par][lane] = mine;
  yield(WAIT_WARP);
  memcpy(all, L.xchg[w][par], sizeof L.xchg[w][par]);
}

void simt_mma_m16n8k8_tf32(float *c, const unsigned *a, unsigned b0, unsigned b1) {
  int tid = (int)self()->pub.tid.x, w = tid / 32, lane = tid % 32, par = (int)(L.xn[tid]++ & 1u);
  unsigned *f = L.frag[w][par][lane];
  f[0] = a[0], f[1] = a[1], f[2] = a[2], f[3] = a[3], f[4] = b0, f[5] = b1;
  yield(WAIT_WARP);
  /* the m16n8k8 tf32 fragments: lane (g, t) = (lane / 4, lane % 4) holds A(g, t) A(g + 8, t)
   * A(g, t + 4) A(g + 8, t + 4), B(t, g) B(t + 4, g), C(g, 2t) C(g, 2t + 1) C(g + 8, 2t) C(g + 8, 2t + 1) */
  auto A = [&](int m, int k) {
    return __uint_as_float(L.frag[w][par][(m % 8) * 4 + k % 4][(m >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)]);
  };
  auto B = [&](int k, int n) { return __uint_as_float(L.frag[w][par][n * 4 + k % 4][4 + (k >= 4 ? 1 : 0)]); };
  int g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; e++) {
    int m = g + 8 * (e / 2), n = 2 * t + e % 2;
    float s = 0.0f;
    for (int k = 0; k < 8; k++)
      s += A(m, k) * B(k, n);
    c[e] += s;
  }
}

int simt_run(const char *name, void (*call)(void (*)(), void **), void (*fn)(), void **args, unsigned gx,
             unsigned gy, unsigned gz, unsigned block, unsigned smem, int reverse, char *err, size_t nerr) {
  if (block == 0 || block > (unsigned)MAX_THREADS)
    return snprintf(err, nerr, "kernel %s: %u threads a block (1 to %d)", name, block, MAX_THREADS), -1;
  if (smem > 227u * 1024u)
    return snprintf(err, nerr, "kernel %s: %u bytes of dynamic shared memory (the H200 has 227 KiB)", name,
                    smem),
           -1;
  L.name = name, L.call = call, L.fn = fn, L.args = args, L.n = (int)block, L.reverse = reverse != 0;
  L.t = static_cast<Thread *>(calloc(block, sizeof(Thread)));
  L.smem_bytes = smem;
  L.smem = static_cast<unsigned char *>(malloc(smem ? smem : 1));
  if (!L.t || !L.smem) return free(L.t), free(L.smem), snprintf(err, nerr, "out of memory"), -1;
  int rc = 0;
  for (unsigned i = 0; i < block && rc == 0; i++)
    if (!(L.t[i].stack = static_cast<char *>(malloc(STACK)))) rc = -1, snprintf(err, nerr, "out of memory");
  simt_grid_dim = {gx, gy, gz}, simt_block_dim = {block, 1, 1};
  for (unsigned z = 0; z < gz && rc == 0; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        simt_block_idx = {x, y, z};
        run_block();
      }
  for (unsigned i = 0; i < block; i++)
    free(L.t[i].stack);
  free(L.t), free(L.smem);
  L.t = nullptr, L.smem = nullptr, simt_cur = nullptr;
  return rc;
}
