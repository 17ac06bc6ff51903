/* simt.cc — the scheduler behind simt.h: a launch runs its blocks one after another, each block's
 * threads as coroutines on one OS thread, switched only where simt.h's barriers and warp
 * collectives meet. Deterministic: the same launch runs the same interleaving every time.
 *
 * A switch saves the callee-saved registers on the stack and swaps stack pointers (simt_switch,
 * x86-64; ucontext elsewhere, whose switch also saves the signal mask: a system call, ~50 times
 * slower). A warp collective is 64 switches, so this is most of the emulation's time. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <map>

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

/* SPIN: waiting on an mbarrier phase; run again after the other threads have had their turn */
/* WAIT_NAMED: at a named barrier (bar.sync id, count): Thread.bar_id, bar_count */
enum State { RUN, WAIT_BLOCK, WAIT_WARP, WAIT_WG, WAIT_NAMED, SPIN, DONE };

#if defined(__x86_64__)
/* simt_switch(&from, to): the callee-saved registers pushed, the stack pointer saved in *from,
 * to's popped; returns on to's stack. */
extern "C" void simt_switch(void **from, void *to);
asm(".text\n.globl simt_switch\n.type simt_switch,@function\nsimt_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n  ret\n"
    ".size simt_switch, .-simt_switch\n");
struct Ctx {
  void *sp;
};
/* A new context that starts in entry() on the stack [stack, stack + size). */
void ctx_make(Ctx *c, char *stack, size_t size, void (*entry)()) {
  uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
  void **f = reinterpret_cast<void **>(top) - 8; /* r15 r14 r13 r12 rbx rbp, ret = entry, a null return */
  for (int i = 0; i < 6; i++)
    f[i] = nullptr;
  f[6] = reinterpret_cast<void *>(entry), f[7] = nullptr;
  c->sp = f;
}
void ctx_swap(Ctx *from, Ctx *to) { simt_switch(&from->sp, to->sp); }
#else
struct Ctx {
  ucontext_t uc;
};
__attribute__((noinline)) void ctx_make(Ctx *c, char *stack, size_t size, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}
void ctx_swap(Ctx *from, Ctx *to) { swapcontext(&from->uc, &to->uc); }
#endif

struct Thread {
  SimtThread pub;
  Ctx ctx;
  char *stack;
  State state;
  int bar_id, bar_count; /* WAIT_NAMED's barrier */
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
  Ctx sched;
  unsigned char *smem;
  size_t smem_bytes;
  /* the warp exchange: two buffers, alternated per collective (simt.h) */
  uint64_t xchg[MAX_THREADS / 32][2][32];
  unsigned xn[MAX_THREADS]; /* per thread: collectives so far */
  /* the mma fragments of a warp's lanes */
  unsigned frag[MAX_THREADS / 32][2][32][6];
  /* a warpgroup collective's per-thread data (wgmma's register A fragments, descriptors), two buffers */
  unsigned wgfrag[MAX_THREADS / 128][2][128][4];
  unsigned long long wgdesc[MAX_THREADS / 128][2][128][2];
  unsigned wgn[MAX_THREADS]; /* per thread: warpgroup collectives so far */
  bool reverse;              /* this launch's order: warps and lanes last first */
  /* the block's mbarriers by shared address: arrivals a phase takes, arrivals and bytes still
   * pending in the current phase, the current phase's parity */
  struct Mbar {
    unsigned count, pending;
    long long tx;
    unsigned phase;
  };
  std::map<unsigned, Mbar> mbar;
  unsigned long long events; /* what changes a waiting thread's lot: barrier or mbarrier progress */
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
  if (s != SPIN) L.events++;
#ifdef SIMT_ASAN
  __sanitizer_start_switch_fiber(&t->fake_stack, L.sched_bottom, L.sched_size);
#endif
  ctx_swap(&t->ctx, &L.sched);
#ifdef SIMT_ASAN
  __sanitizer_finish_switch_fiber(t->fake_stack, &L.sched_bottom, &L.sched_size);
#endif
}

/* A coroutine's body: the kernel, then back to the scheduler for good. */
[[noreturn]] void thread_main() {
#ifdef SIMT_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &L.sched_bottom, &L.sched_size);
#endif
  L.call(L.fn, L.args);
  Thread *t = self();
  t->state = DONE;
  L.events++;
#ifdef SIMT_ASAN
  __sanitizer_start_switch_fiber(nullptr, L.sched_bottom, L.sched_size);
#endif
  ctx_swap(&t->ctx, &L.sched);
  abort(); /* a returned thread is never switched to */
}

/* Switches to thread t until it reaches a barrier or returns. */
void run_thread(Thread *t) {
  simt_cur = &t->pub;
#ifdef SIMT_ASAN
  __sanitizer_start_switch_fiber(&L.sched_fake, t->stack, STACK);
#endif
  ctx_swap(&L.sched, &t->ctx);
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
    int at_warp = 0, at_wg = 0, spin = 0;
    for (int i = lo; i < hi; i++)
      at_warp += L.t[i].state == WAIT_WARP, at_wg += L.t[i].state == WAIT_WG, spin += L.t[i].state == SPIN;
    if (at_warp == 0) {
      if (at_wg != 0 && at_wg + spin != hi - lo) die("a warpgroup collective that not every lane of a warp reaches");
      return;
    }
    if (at_warp + spin == hi - lo && spin) return; /* the spinning lanes come to it later */
    if (at_warp != 32)
      die(hi - lo != 32
              ? "a warp collective in a warp of fewer than 32 threads"
              : "a warp collective that not every lane of the warp reaches (some returned or wait at "
                "__syncthreads)");
    for (int i = lo; i < hi; i++)
      L.t[i].state = RUN;
  }
}

/* Thread i's coroutine, at the start of the kernel. */
void make_thread(int i) {
  Thread *t = &L.t[i];
  t->pub.tid = {(unsigned)i, 0, 0};
  t->state = RUN;
  t->fake_stack = nullptr;
  ctx_make(&t->ctx, t->stack, STACK, thread_main);
}

/* Lets every warpgroup whose 128 threads all wait at a collective go on; whether there was one. */
bool release_warpgroups() {
  bool any = false;
  for (int w0 = 0; w0 + 128 <= L.n; w0 += 128) {
    int n = 0;
    for (int i = w0; i < w0 + 128; i++)
      n += L.t[i].state == WAIT_WG;
    if (n == 128) {
      for (int i = w0; i < w0 + 128; i++)
        L.t[i].state = RUN;
      any = true;
    }
  }
  return any;
}

/* Lets the threads of every named barrier that `count` threads wait at go on; whether there was one. */
bool release_named() {
  bool any = false;
  for (int id = 0; id < 16; id++) {
    int n = 0, count = -1;
    for (int i = 0; i < L.n; i++)
      if (L.t[i].state == WAIT_NAMED && L.t[i].bar_id == id) {
        if (count >= 0 && L.t[i].bar_count != count) die("bar.sync: threads name one barrier with different counts");
        count = L.t[i].bar_count, n++;
      }
    if (n > 0 && n == count) {
      for (int i = 0; i < L.n; i++)
        if (L.t[i].state == WAIT_NAMED && L.t[i].bar_id == id) L.t[i].state = RUN;
      any = true;
    } else if (n > count && count >= 0)
      die("bar.sync: more threads wait at a named barrier than its count");
  }
  return any;
}

/* One block: its warps one after another (the last first when reversed), each as far as it goes
 * alone, then __syncthreads released; until every thread has returned. */
void run_block() {
  memset(L.smem, 0xff, L.smem_bytes);
  memset(L.xn, 0, sizeof L.xn);
  memset(L.wgn, 0, sizeof L.wgn);
  L.mbar.clear();
  for (int i = 0; i < L.n; i++)
    make_thread(i);
  int nw = (L.n + 31) / 32;
  for (;;) {
    unsigned long long events = L.events;
    for (int k = 0; k < nw; k++)
      run_warp(L.reverse ? nw - 1 - k : k);
    int live = 0, at_wg = 0, at_named = 0, at_block = 0, spin = 0;
    for (int i = 0; i < L.n; i++)
      live += L.t[i].state != DONE, at_wg += L.t[i].state == WAIT_WG, at_named += L.t[i].state == WAIT_NAMED,
          at_block += L.t[i].state == WAIT_BLOCK, spin += L.t[i].state == SPIN;
    if (live == 0) return;
    /* whole warpgroups at a collective and complete named barriers go on */
    bool released = (at_wg && release_warpgroups()) | (at_named && release_named());
    if (spin) { /* threads waiting on mbarriers: their turn again, unless nothing moved this round */
      if (!released && L.events == events) die("a deadlock: threads wait on mbarrier phases that nothing completes");
      for (int i = 0; i < L.n; i++)
        if (L.t[i].state == SPIN) L.t[i].state = RUN;
      continue;
    }
    if (released) continue;
    if (at_wg)
      die("a warpgroup collective that not every thread of the warpgroup reaches (some returned or wait at "
          "__syncthreads)");
    if (at_named) die("a named barrier (bar.sync) that fewer threads reach than its count");
    if (at_block != live) die("__syncthreads that not every thread reaches");
    for (int i = 0; i < L.n; i++)
      if (L.t[i].state == WAIT_BLOCK) L.t[i].state = RUN;
  }
}

} // namespace

SimtThread *simt_cur;
simt_dim3 simt_block_idx, simt_block_dim, simt_grid_dim;

void simt_syncthreads() { yield(WAIT_BLOCK); }
void simt_bar_sync(int id, int count) {
  if (id < 1 || id > 15 || count <= 0 || count % 32 || count > L.n)
    die("bar.sync: a barrier id outside 1..15 or a count that is not whole warps of the block");
  self()->bar_id = id, self()->bar_count = count;
  yield(WAIT_NAMED);
}
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

/* An mma.sync's meeting: this lane's A and B registers in, the warp's 32 lanes' out (frags[lane][0..5]);
 * *lane this lane's. */
typedef unsigned Frags[32][6];
static const Frags &mma_meet(const unsigned *a, unsigned b0, unsigned b1, int *lane) {
  int tid = (int)self()->pub.tid.x, w = tid / 32, par = (int)(L.xn[tid]++ & 1u);
  *lane = tid % 32;
  unsigned *f = L.frag[w][par][*lane];
  f[0] = a[0], f[1] = a[1], f[2] = a[2], f[3] = a[3], f[4] = b0, f[5] = b1;
  yield(WAIT_WARP);
  return L.frag[w][par];
}

/* C += A B of an m16n8kK mma for this lane's four C elements: (g, 2q), (g, 2q + 1), (g + 8, 2q),
 * (g + 8, 2q + 1), g = lane / 4, q = lane % 4; each a sum over k in order. */
template <class FA, class FB> static void mma_accumulate(float *c, int lane, int K, FA A, FB B) {
  for (int e = 0; e < 4; e++) {
    int m = lane / 4 + 8 * (e / 2), n = 2 * (lane % 4) + e % 2;
    float s = 0.0f;
    for (int k = 0; k < K; k++)
      s += A(m, k) * B(k, n);
    c[e] += s;
  }
}

void simt_mma_m16n8k8_tf32(float *c, const unsigned *a, unsigned b0, unsigned b1) {
  int lane;
  const Frags &fr = mma_meet(a, b0, b1, &lane);
  /* the m16n8k8 tf32 fragments: lane (g, t) = (lane / 4, lane % 4) holds A(g, t) A(g + 8, t)
   * A(g, t + 4) A(g + 8, t + 4), B(t, g) B(t + 4, g), C(g, 2t) C(g, 2t + 1) C(g + 8, 2t) C(g + 8, 2t + 1) */
  auto A = [&](int m, int k) {
    return __uint_as_float(fr[(m % 8) * 4 + k % 4][(m >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)]);
  };
  auto B = [&](int k, int n) { return __uint_as_float(fr[n * 4 + k % 4][4 + (k >= 4 ? 1 : 0)]); };
  mma_accumulate(c, lane, 8, A, B);
}

unsigned simt_smem_addr(const void *p) {
  const unsigned char *c = static_cast<const unsigned char *>(p);
  if (c < L.smem || c > L.smem + L.smem_bytes)
    die("cvta.to.shared of an address outside the dynamic shared memory");
  return (unsigned)(c - L.smem);
}

static unsigned char *smem_at(unsigned saddr, size_t bytes) {
  if ((size_t)saddr + bytes > L.smem_bytes)
    die("a shared-memory access past the launch's dynamic shared memory");
  return L.smem + saddr;
}

static unsigned short smem_b16(unsigned saddr) {
  unsigned short v;
  memcpy(&v, smem_at(saddr, 2), 2);
  return v;
}

static float bf16f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }

void simt_ldmatrix_x4(unsigned *r, unsigned saddr, bool trans) {
  int tid = (int)self()->pub.tid.x, w = tid / 32, lane = tid % 32, par = (int)(L.xn[tid]++ & 1u);
  if (saddr % 16) die("ldmatrix: a row address not 16-byte aligned");
  L.xchg[w][par][lane] = saddr;
  yield(WAIT_WARP);
  /* matrix j's row i starts at lane 8 j + i's address; this lane gets (row lane / 4, columns
   * 2 (lane % 4) and + 1), or transposed (rows 2 (lane % 4) and + 1 of column lane / 4) */
  for (int j = 0; j < 4; j++) {
    unsigned short e[2];
    for (int h = 0; h < 2; h++) {
      int row = trans ? 2 * (lane % 4) + h : lane / 4, col = trans ? lane / 4 : 2 * (lane % 4) + h;
      e[h] = smem_b16((unsigned)L.xchg[w][par][8 * j + row] + 2u * (unsigned)col);
    }
    r[j] = (unsigned)e[0] | (unsigned)e[1] << 16;
  }
}

static float half_of(unsigned v, int hi) { return bf16f((unsigned short)(hi ? v >> 16 : v & 0xffffu)); }

void simt_mma_m16n8k16_bf16(float *c, const unsigned *a, unsigned b0, unsigned b1) {
  int lane;
  const Frags &fr = mma_meet(a, b0, b1, &lane);
  /* A (16 x 16): a0 (g, 2q..), a1 (g + 8, 2q..), a2 (g, 8 + 2q..), a3 (g + 8, 8 + 2q..); B (16 x 8):
   * b0 (k 2q.., n g), b1 (k 8 + 2q.., n g); C: c0, c1 (g, 2q..), c2, c3 (g + 8, 2q..) */
  auto A = [&](int m, int k) {
    return half_of(fr[(m % 8) * 4 + (k % 8) / 2][(m >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k % 2);
  };
  auto B = [&](int k, int n) { return half_of(fr[n * 4 + (k % 8) / 2][4 + (k >= 8 ? 1 : 0)], k % 2); };
  mma_accumulate(c, lane, 16, A, B);
}

void simt_cp_async16(unsigned saddr, const void *gmem, bool full) {
  if (saddr % 16) die("cp.async: a shared address not 16-byte aligned");
  unsigned char *d = smem_at(saddr, 16);
  if (full)
    memcpy(d, gmem, 16);
  else
    memset(d, 0, 16);
}

/* Element (mn, k) of a wgmma operand in the 128-byte-swizzled layouts of kernels/wgmma.cuh, from its
 * descriptor: K-major, row mn of 128-byte rows (k contiguous) in groups of 8 rows SBO apart;
 * MN-major, k row k % 8 of the group k / 8 (SBO apart) of the 64-column block mn / 64 (LBO apart).
 * The swizzle: 16-byte chunk bits 4..6 of the address XOR its bits 7..9 (1024-aligned tiles). */
/* The shared address of element (mn, k) of `bytes`-byte elements (MN-major: bf16 only). */
static unsigned wg_addr(unsigned long long desc, int mn, int k, int mn_major, unsigned bytes) {
  unsigned start = (unsigned)(desc & 0x3FFF) << 4, lbo = (unsigned)((desc >> 16) & 0x3FFF) << 4,
           sbo = (unsigned)((desc >> 32) & 0x3FFF) << 4;
  if ((desc >> 62) != 1) die("wgmma: a descriptor without the 128-byte swizzle");
  unsigned a = mn_major ? start + (unsigned)(mn / 64) * lbo + (unsigned)(k / 8) * sbo +
                              (unsigned)(k % 8) * 128 + (unsigned)(mn % 64) * bytes
                        : start + (unsigned)(mn / 8) * sbo + (unsigned)(mn % 8) * 128 + (unsigned)k * bytes;
  return a ^ ((a >> 7) & 7u) << 4;
}

static float wg_elem(unsigned long long desc, int mn, int k, int mn_major) {
  return bf16f(smem_b16(wg_addr(desc, mn, k, mn_major, 2)));
}

/* A wgmma's meeting of its warpgroup's 128 threads: this thread's descriptors (and register A
 * fragment, or NULL) in; every thread must pass the same descriptors. Its warpgroup's fragment slot. */
static unsigned (*wg_meet(unsigned long long da, const unsigned *a, unsigned long long db))[4] {
  int tid = (int)self()->pub.tid.x, g = tid / 128, t = tid % 128, par = (int)(L.wgn[tid]++ & 1u);
  if (L.n % 128 != 0) die("wgmma in a block that is not whole warpgroups");
  if (a) memcpy(L.wgfrag[g][par][t], a, sizeof L.wgfrag[g][par][t]);
  L.wgdesc[g][par][t][0] = a ? 0 : da, L.wgdesc[g][par][t][1] = db;
  yield(WAIT_WG);
  for (int i = 0; i < 128; i++)
    if (L.wgdesc[g][par][i][1] != db || (!a && L.wgdesc[g][par][i][0] != da))
      die("wgmma: the warpgroup's threads pass different descriptors");
  return L.wgfrag[g][par];
}

void simt_wgmma(float *d, int n, unsigned long long da, const unsigned *a, unsigned long long db, int tnspA,
                int tnspB, int acc) {
  unsigned (*frag)[4] = wg_meet(da, a, db);
  int t = (int)self()->pub.tid.x % 128, w = t / 32, lane = t % 32;
  auto A = [&](int m, int k) {
    if (!a) return wg_elem(da, m, k, tnspA);
    /* row m is warp m / 16's, within it mma.m16n8k16's A fragment (simt_mma_m16n8k16_bf16) */
    int mm = m % 16;
    return half_of(
        frag[(m / 16) * 32 + (mm % 8) * 4 + (k % 8) / 2][(mm >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)],
        k % 2);
  };
  for (int i = 0; i < n / 8; i++)
    for (int h = 0; h < 4; h++) {
      int row = 16 * w + lane / 4 + 8 * (h / 2), col = 8 * i + 2 * (lane % 4) + h % 2;
      float s = 0.0f;
      for (int k = 0; k < 16; k++)
        s += A(row, k) * wg_elem(db, col, k, tnspB);
      d[4 * i + h] = acc ? d[4 * i + h] + s : s;
    }
}

/* ---- mbarriers and the tensor memory accelerator ---- */

static Launch::Mbar &mbar_at(unsigned bar) {
  if (bar % 8) die("an mbarrier at a shared address not 8-byte aligned");
  smem_at(bar, 8);
  auto it = L.mbar.find(bar);
  if (it == L.mbar.end()) die("an mbarrier used before mbarrier.init");
  return it->second;
}

/* A phase completes when its arrivals and bytes are all in: the next phase begins. */
static void mbar_settle(Launch::Mbar &m) {
  if (m.tx < 0) die("mbarrier: more bytes completed than the phase expects");
  if (m.pending == 0 && m.tx == 0) m.phase ^= 1u, m.pending = m.count;
}

void simt_mbar_init(unsigned bar, unsigned count) {
  if (bar % 8) die("an mbarrier at a shared address not 8-byte aligned");
  smem_at(bar, 8);
  if (count == 0) die("mbarrier.init with no arrivals");
  L.mbar[bar] = {count, count, 0, 0};
  L.events++;
}

void simt_mbar_arrive(unsigned bar, unsigned expect_tx) {
  Launch::Mbar &m = mbar_at(bar);
  if (m.pending == 0) die("mbarrier: an arrival beyond the phase's count");
  m.tx += expect_tx, m.pending--;
  L.events++;
  mbar_settle(m);
}

void simt_mbar_wait(unsigned bar, unsigned parity) {
  for (;;) {
    if (mbar_at(bar).phase != (parity & 1u)) { /* the phase of that parity has completed */
      L.events++;
      return;
    }
    yield(SPIN);
  }
}

void simt_tma_load(unsigned dst, const void *map, unsigned bar, const int *c, int rank) {
  const SimtTmap *m = static_cast<const SimtTmap *>(map);
  if (!m || m->magic != SIMT_TMAP_MAGIC) die("cp.async.bulk.tensor: not a tensor map the CPU harness wrote");
  if (m->rank != rank) die("cp.async.bulk.tensor: the instruction's dimensions are not the tensor map's");
  if (m->swizzle == 128 && (dst % 1024 || m->box[0] * m->stride[0] != 128))
    die("cp.async.bulk.tensor: a 128-byte swizzle needs a 1024-aligned destination and 128-byte box rows");
  if (dst % 128) die("cp.async.bulk.tensor: a destination not 128-byte aligned");
  /* Hopper raises "an illegal instruction" when the box starts at a byte of its rows that is not a
   * multiple of 16 (the H100 did, 2026-12-05, for grouped_fp8_wgrad_ws's rows as the inner coordinate) */
  if (((long long)c[0] * (long long)m->stride[0]) % 16)
    die("cp.async.bulk.tensor: the innermost coordinate is not 16-byte aligned (an illegal instruction on the GPU)");
  unsigned long long es = m->stride[0], n = 1;
  for (int i = 0; i < rank; i++)
    n *= m->box[i];
  unsigned char *d = smem_at(dst, (size_t)(n * es));
  for (unsigned long long idx = 0; idx < n; idx++) {
    unsigned long long rest = idx, off = 0;
    bool in = true;
    for (int i = 0; i < rank; i++) {
      long long g = (long long)c[i] + (long long)(rest % m->box[i]);
      rest /= m->box[i];
      in = in && g >= 0 && (unsigned long long)g < m->dim[i];
      off += (unsigned long long)g * m->stride[i];
    }
    unsigned long long o = idx * es;
    if (m->swizzle == 128) o ^= ((o >> 7) & 7u) << 4;
    if (in)
      memcpy(d + o, m->base + off, es);
    else
      memset(d + o, 0, es);
  }
  Launch::Mbar &b = mbar_at(bar);
  b.tx -= (long long)(n * es);
  L.events++;
  mbar_settle(b);
}

/* An fp8 code's value (E4M3: bias 7, no infinities, S.1111.111 NaN; E5M2: bias 15, IEEE-like). */
static float fp8_value(unsigned char c, int e5m2) {
  int M = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, e = (c & 0x7f) >> M, m = c & ((1 << M) - 1);
  float sign = c & 0x80 ? -1.0f : 1.0f;
  if (e5m2 && e == 31) return m ? NAN : sign * INFINITY;
  if (!e5m2 && e == 15 && m == 7) return NAN;
  return e == 0 ? sign * ldexpf((float)m, 1 - bias - M) : sign * ldexpf((float)((1 << M) | m), e - bias - M);
}

/* Byte k of row mn of a K-major fp8 operand (kernels/wgmma.cuh's layout, 1-byte elements). */
static unsigned char wg_byte(unsigned long long desc, int mn, int k) { return *smem_at(wg_addr(desc, mn, k, 0, 1), 1); }

void simt_wgmma_fp8(float *d, int n, unsigned long long da, unsigned long long db, int fa, int fb) {
  wg_meet(da, nullptr, db);
  int t = (int)self()->pub.tid.x % 128, w = t / 32, lane = t % 32;
  for (int i = 0; i < n / 8; i++)
    for (int h = 0; h < 4; h++) {
      int row = 16 * w + lane / 4 + 8 * (h / 2), col = 8 * i + 2 * (lane % 4) + h % 2;
      float s = 0.0f;
      for (int k = 0; k < 32; k++)
        s += fp8_value(wg_byte(da, row, k), fa) * fp8_value(wg_byte(db, col, k), fb);
      d[4 * i + h] += s;
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
  L.smem = static_cast<unsigned char *>(aligned_alloc(1024, ((size_t)smem + 1023) / 1024 * 1024 + 1024));
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
