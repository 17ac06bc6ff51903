/* comm_bf16.c — runtime/comm.h's group collectives on bf16 (unit.comm_bf16): four ranks as
 * threads in one job, each collective against a sequential reference computed here (fp32
 * accumulation over the members in group order, one round to nearest even at the end; max as
 * floats), bitwise. Groups: {0,1} {2,3} (stride 1), {0,2} {1,3} (stride 2 inside the 4-rank job),
 * {0,1,2} (rank 3 meanwhile combines {1,2,3}: every rank moves the same bytes), {0,1,2} beside {3}
 * alone (a group of one, for the hand-checked values), and the whole job through
 * rt_comm_allreduce_sum / rt_comm_reduce_scatter_sum. Values of magnitudes far apart, so that
 * rounding after every addition, or another order, gives other bits; hand-checked ties (round
 * to even) and the single rounding; f32 and f64 unchanged beside them. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../gpu/host_bits.h"
#include "../free_port.h"
#include "runtime/comm.h"

#define N 4
#define LEN 1003 /* not a multiple of 8, nor of the group sizes */

static int fails, port;
#define CHECK(c, ...)                                                                                        \
  do {                                                                                                       \
    if (!(c)) {                                                                                              \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                   \
      fprintf(stderr, __VA_ARGS__);                                                                          \
      fprintf(stderr, "\n");                                                                                 \
      __atomic_add_fetch(&fails, 1, __ATOMIC_SEQ_CST);                                                       \
    }                                                                                                        \
  } while (0)

/* rank r's element i of collective `salt`: a bf16 of magnitude 2^-12 .. 2^20, either sign */
static uint16_t val(int salt, int r, int i) {
  uint32_t h = (uint32_t)(salt * 7919 + r * 104729 + i * 2654435761u);
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12;
  float m = 1.0f + (float)(h & 0xffff) / 65536.0f;
  float f = ldexpf(m, (int)((h >> 16) % 33) - 12) * ((h >> 30) & 1 ? -1.0f : 1.0f);
  return host_f32_to_bf16(f);
}

typedef struct {
  int first, stride, count, member;
} Grp;

static RtCommGroup group_of(const Grp *g) { return (RtCommGroup){g->first, g->stride, g->count}; }

/* the reference: member 0 + member 1 + ... in fp32, rounded once (max: as floats) */
static uint16_t ref(const Grp *g, int salt, int i, int max) {
  float acc = host_bf16_to_f32(val(salt, g->first, i));
  uint16_t best = val(salt, g->first, i);
  for (int k = 1; k < g->count; k++) {
    uint16_t v = val(salt, g->first + k * g->stride, i);
    acc += host_bf16_to_f32(v);
    if (host_bf16_to_f32(v) > host_bf16_to_f32(best)) best = v;
  }
  return max ? best : host_f32_to_bf16(acc);
}

/* The rank's group in one layout: 0 {0,1}{2,3}; 1 {0,2}{1,3}; 2 {0,1,2} (rank 3: {1,2,3}); 3 the
 * whole job */
static Grp layout(int which, int r) {
  switch (which) {
  case 0: return (Grp){r / 2 * 2, 1, 2, r % 2};
  case 1: return (Grp){r % 2, 2, 2, r / 2};
  case 2: return r < 3 ? (Grp){0, 1, 3, r} : (Grp){1, 1, 3, 2};
  default: return (Grp){0, 1, N, r};
  }
}

static void check_all(int r, RtComm *c) {
  uint16_t *b = malloc(LEN * N * sizeof *b), *out = malloc(LEN * sizeof *out);
  for (int which = 0; which < 4; which++) {
    Grp g = layout(which, r);
    RtCommGroup cg = group_of(&g);
    int salt = which * 10;
    /* all-reduce, sum and max */
    for (int max = 0; max < 2; max++) {
      for (int i = 0; i < LEN; i++)
        b[i] = val(salt + max, r, i);
      int rc = which == 3 && !max ? rt_comm_allreduce_sum(c, b, LEN, RT_COMM_BF16)
                                  : rt_comm_group_allreduce(c, &cg, b, LEN, RT_COMM_BF16, max);
      CHECK(rc == 0, "rank %d layout %d all-reduce %s: %s", r, which, max ? "max" : "sum", rt_comm_error(c));
      for (int i = 0; i < LEN && rc == 0; i++)
        if (b[i] != ref(&g, salt + max, i, max)) {
          CHECK(0, "rank %d layout %d all-reduce %s [%d] = %#06x, the reference %#06x", r, which,
                max ? "max" : "sum", i, b[i], ref(&g, salt + max, i, max));
          break;
        }
    }
    /* reduce-scatter: every rank holds count blocks of n; member m receives block m's sum */
    size_t n = LEN / (size_t)g.count;
    for (size_t i = 0; i < n * (size_t)g.count; i++)
      b[i] = val(salt + 5, r, (int)i);
    int rc = which == 3 ? rt_comm_reduce_scatter_sum(c, b, out, n, RT_COMM_BF16)
                        : rt_comm_group_reduce_scatter(c, &cg, g.member, b, out, n, RT_COMM_BF16);
    CHECK(rc == 0, "rank %d layout %d reduce-scatter: %s", r, which, rt_comm_error(c));
    for (size_t i = 0; i < n && rc == 0; i++) {
      uint16_t want = ref(&g, salt + 5, (int)((size_t)g.member * n + i), 0);
      if (out[i] != want) {
        CHECK(0, "rank %d layout %d reduce-scatter [%zu] = %#06x, the reference %#06x", r, which, i, out[i],
              want);
        break;
      }
    }
  }
  free(b), free(out);
}

/* Ties and the single rounding by hand, over {0,1,2} (rank 3 alone), and f32 / f64 unchanged. */
static void check_hand(int r, RtComm *c) {
  RtCommGroup cg = r < 3 ? (RtCommGroup){0, 1, 3} : (RtCommGroup){3, 1, 1};
  /* element 0: 1 + 2^-8 + 0: a tie, to even (1.0: 0x3f80)
   * element 1: 1 + 2^-8 + 2^-8 = 1 + 2^-7 exactly in fp32: 0x3f81 (rounding after each add: 0x3f80)
   * element 2: (1 + 2^-7) + 2^-8 + 0: a tie, to even (0x3f82)
   * element 3: 2^127 * 1.99 + the same + 0: overflows to +inf
   * element 4: NaN + 1 + 1: NaN
   * element 5: -0 + -0 + -0 = -0 */
  static const uint16_t in[3][6] = {{0x3f80, 0x3f80, 0x3f81, 0x7f7f, 0x7fc0, 0x8000},
                                    {0x3b80, 0x3b80, 0x3b80, 0x7f7f, 0x3f80, 0x8000},
                                    {0x0000, 0x3b80, 0x0000, 0x0000, 0x3f80, 0x8000}};
  uint16_t b[6];
  memcpy(b, in[r < 3 ? r : 0], sizeof b);
  CHECK(rt_comm_group_allreduce(c, &cg, b, 6, RT_COMM_BF16, 0) == 0, "hand sum: %s", rt_comm_error(c));
  if (r < 3) {
    CHECK(b[0] == 0x3f80, "rank %d: 1 + 2^-8 = %#06x, a tie to even is 0x3f80", r, b[0]);
    CHECK(b[1] == 0x3f81, "rank %d: 1 + 2^-8 + 2^-8 = %#06x, rounded once is 0x3f81", r, b[1]);
    CHECK(b[2] == 0x3f82, "rank %d: (1 + 2^-7) + 2^-8 = %#06x, a tie to even is 0x3f82", r, b[2]);
    CHECK(b[3] == 0x7f80, "rank %d: an overflow = %#06x, not +inf", r, b[3]);
    CHECK((b[4] & 0x7f80) == 0x7f80 && (b[4] & 0x7f), "rank %d: NaN + 1 + 1 = %#06x, not a NaN", r, b[4]);
    CHECK(b[5] == 0x8000, "rank %d: -0 + -0 + -0 = %#06x", r, b[5]);
  } else {
    CHECK(memcmp(b, in[0], sizeof b) == 0, "rank 3, a group of one: its own values changed");
  }
  /* max: -inf, -2, -1 -> -1 (0xbf80); 3 (0x4040) beside 2 and 1 */
  static const uint16_t mx[3][2] = {{0xff80, 0x4040}, {0xc000, 0x4000}, {0xbf80, 0x3f80}};
  uint16_t m[2];
  memcpy(m, mx[r < 3 ? r : 0], sizeof m);
  CHECK(rt_comm_group_allreduce(c, &cg, m, 2, RT_COMM_BF16, 1) == 0, "hand max: %s", rt_comm_error(c));
  CHECK(r < 3 ? m[0] == 0xbf80 && m[1] == 0x4040 : m[0] == 0xff80 && m[1] == 0x4040,
        "rank %d: max %#06x %#06x", r, m[0], m[1]);
  /* f32 and f64, group order in their own precision */
  float f[2] = {r == 0 ? 1e8f : r == 1 ? -1e8f : 3.25f, (float)r};
  CHECK(rt_comm_group_allreduce(c, &cg, f, 2, RT_COMM_F32, 0) == 0, "f32: %s", rt_comm_error(c));
  if (r < 3) CHECK(f[0] == 3.25f && f[1] == 3.0f, "rank %d: f32 sum %g %g", r, f[0], f[1]);
  double d = r + 0.5;
  CHECK(rt_comm_group_allreduce(c, &cg, &d, 1, RT_COMM_F64, 1) == 0, "f64: %s", rt_comm_error(c));
  CHECK(d == (r < 3 ? 2.5 : 3.5), "rank %d: f64 max %g", r, d);
}

static void *rank_main(void *p) {
  int r = (int)(intptr_t)p;
  RtRendezvous rv = {.rank = r,
                     .size = N,
                     .port = port,
                     .timeout_s = 20,
                     .fingerprint = 7,
                     .secret = "comm_bf16's job secret, 0123456789"};
  snprintf(rv.addr, sizeof rv.addr, "127.0.0.1");
  snprintf(rv.what, sizeof rv.what, "comm_bf16");
  RtComm *c;
  char err[600];
  if (rt_comm_open(&rv, &c, err, sizeof err) != 0) {
    CHECK(0, "rank %d: %s", r, err);
    return NULL;
  }
  check_all(r, c);
  check_hand(r, c);
  CHECK(rt_comm_barrier(c) == 0, "barrier: %s", rt_comm_error(c));
  rt_comm_free(c);
  return NULL;
}

int main(void) {
  port = free_port();
  pthread_t th[N];
  for (int r = 0; r < N; r++)
    pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
  for (int r = 0; r < N; r++)
    pthread_join(th[r], NULL);
  if (fails) return 1;
  printf("ok: bf16 group all-reduce (sum, max) and reduce-scatter over {0,1}{2,3}, {0,2}{1,3}, {0,1,2} "
         "({1,2,3}), {3} alone and the whole job of %d ranks, bitwise the sequential reference; ties to "
         "even, one rounding; f32, f64 as before\n",
         N);
  return 0;
}
