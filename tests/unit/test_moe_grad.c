/* test_moe_grad.c — the MLA and MoE ops alone against central finite differences in fp64, with
 * fresh random shapes and inputs each run (seed printed; STEPC_TEST_SEED=N reruns one), then a
 * whole routed-MoE chain (router -> top-k -> dispatch -> permute -> grouped experts -> unpermute,
 * plus the aux loss) so that the discrete routing is exercised end to end.
 *
 * Ops that take routing (row_of, expert segments) get it from MOE_DISPATCH over a random routing
 * map given as an input: MOE_DISPATCH has no gradient, so the op under test is still the only
 * differentiable one. Objective: sum_i <out_i, R_i> for fixed random R_i.
 *
 * Tolerance 1e-5, as test_op_grad.c: fp64 with h = 1e-5 puts a correct rule at 1e-11..1e-7. The
 * routing is piecewise constant in the logits: a perturbation of 1e-5 could flip a top-k choice
 * or a capacity decision only if two scores lie within 1e-5, which random normal inputs make
 * improbable (the seed reproduces any such case). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "op_gradcheck.h"

static int routing_input(Graph *g, int64_t t, int64_t k) {
  int64_t sh[2] = {t, k};
  return graph_tensor(g, "routing.idx", DT_I32, ROLE_INPUT, 2, sh);
}

static void fill_routing(CpuExec *e, const Graph *g, int idx, int64_t ne) {
  int64_t t = g->t[idx].shape[0], k = g->t[idx].shape[1];
  for (int64_t r = 0; r < t; r++)
    for (int64_t j = 0; j < k; j++) {
      int64_t x;
      bool dup;
      do {
        x = rnd(0, ne - 1);
        dup = false;
        for (int64_t q = 0; q < j; q++)
          dup |= cpu_exec_get(e, idx, r * k + q) == (double)x;
      } while (dup);
      cpu_exec_set(e, idx, r * k + j, (double)x);
    }
}

typedef struct {
  int idx;
  int64_t ne;
} RouteFill;

static void fill_route(CpuExec *e, const Graph *g, void *ctx) {
  const RouteFill *f = ctx;
  if (f->idx >= 0) fill_routing(e, g, f->idx, f->ne);
}

/* Differentiates outputs `outs` of g and checks every param; idx (or -1) gets a routing map over
 * ne experts. Frees g. */
static int check(const char *what, Graph *g, const int *outs, int nout, int idx, int64_t ne) {
  RouteFill f = {idx, ne};
  return opcheck_run(what, 52, g, outs, nout, fill_route, &f);
}

typedef struct {
  int64_t cap;
  int pad, policy;
  const char *name;
} Cap;

static int64_t rows_for(int64_t t, int64_t k, int64_t ne, const Cap *c) {
  return c->cap ? ne * c->cap : t * k;
}

/* idx input -> MOE_DISPATCH; outputs row_of, seg, tpe. probs: for policy 1 (or -1). */
static void dispatch(Graph *g, int idx, int probs, int64_t ne, const Cap *c, int *out) {
  OpAttrs a = {.i = {ne, c->cap, c->pad, c->policy}};
  int in[2] = {idx, probs};
  graph_op(g, OP_MOE_DISPATCH, in, c->policy == 1 ? 2 : 1, &a, out, NULL);
}

static int check_routed_ops(int64_t t, int64_t ne, int64_t k, int64_t c, const Cap *cp) {
  int fails = 0, d[3], out[4];
  char what[160];
  int64_t n = rows_for(t, k, ne, cp);
  Graph *g;

  /* permute: x and probs to the expert-sorted rows */
  g = graph_new();
  int idx = routing_input(g, t, k), x = param(g, "x", 2, t, c, 1, 1), p = param(g, "probs", 2, t, k, 1, 1);
  dispatch(g, idx, p, ne, cp, d);
  int pin[3] = {x, p, d[0]};
  OpAttrs pa = {.i = {n}};
  graph_op(g, OP_MOE_PERMUTE, pin, 3, &pa, out, NULL);
  snprintf(what, sizeof what, "moe_permute T=%lld E=%lld k=%lld %s", (long long)t, (long long)ne,
           (long long)k, cp->name);
  fails += check(what, g, out, 2, idx, ne);

  /* unpermute: expert rows back to tokens */
  g = graph_new();
  idx = routing_input(g, t, k);
  int yp = param(g, "yp", 2, n, c, 1, 1);
  dispatch(g, idx, -1, ne, &(Cap){cp->cap, cp->pad, 0, ""}, d);
  int uin[2] = {yp, d[0]};
  graph_op(g, OP_MOE_UNPERMUTE, uin, 2, &pa, out, NULL);
  snprintf(what, sizeof what, "moe_unpermute T=%lld E=%lld k=%lld %s", (long long)t, (long long)ne,
           (long long)k, cp->name);
  fails += check(what, g, out, 1, idx, ne);

  /* grouped linear over the segments */
  int64_t nout = rnd(1, 7);
  g = graph_new();
  idx = routing_input(g, t, k);
  int xg = param(g, "x", 2, n, c, 1, 1), w = param(g, "w", 3, ne, nout, c, 1);
  dispatch(g, idx, -1, ne, &(Cap){cp->cap, cp->pad, 0, ""}, d);
  int gin[3] = {xg, w, d[1]};
  graph_op(g, OP_GROUPED_LINEAR, gin, 3, NULL, out, NULL);
  snprintf(what, sizeof what, "grouped_linear E=%lld %lldx%lld %s", (long long)ne, (long long)c,
           (long long)nout, cp->name);
  fails += check(what, g, out, 1, idx, ne);
  return fails;
}

/* router -> top-k -> dispatch -> permute -> fc1 -> act -> fc2 -> unpermute, + aux loss */
static int check_chain(int64_t b, int64_t t, int64_t c, int64_t ne, int64_t k, int64_t f, const Cap *cp,
                       bool aux) {
  Graph *g = graph_new();
  int64_t n = rows_for(b * t, k, ne, cp);
  int x = param(g, "x", 3, b, t, c, 1), wr = param(g, "router.weight", 2, ne, c, 1, 1);
  int lin[2] = {x, wr};
  int logits = graph_op1(g, OP_LINEAR, lin, 2, NULL, "logits");
  OpAttrs ta = {.i = {k, 0}};
  int tk[2];
  graph_op(g, OP_ROUTER_TOPK, &logits, 1, &ta, tk, NULL);
  OpAttrs da = {.i = {ne, cp->cap, cp->pad, cp->policy}};
  int din[2] = {tk[1], tk[0]}, d[3];
  graph_op(g, OP_MOE_DISPATCH, din, cp->policy == 1 ? 2 : 1, &da, d, NULL);
  OpAttrs pa = {.i = {n}};
  int pin[3] = {x, tk[0], d[0]}, pm[2];
  graph_op(g, OP_MOE_PERMUTE, pin, 3, &pa, pm, NULL);
  int w1 = param(g, "fc1.weight", 3, ne, 2 * f, c, 1), w2 = param(g, "fc2.weight", 3, ne, c, f, 1);
  int g1[3] = {pm[0], w1, d[1]};
  int h = graph_op1(g, OP_GROUPED_LINEAR, g1, 3, NULL, "fc1");
  OpAttrs aa = {.i = {1, 0}};
  int ain[2] = {h, pm[1]};
  int act = graph_op1(g, OP_MOE_ACT, ain, 2, &aa, "act");
  int g2[3] = {act, w2, d[1]};
  int yp = graph_op1(g, OP_GROUPED_LINEAR, g2, 3, NULL, "fc2");
  int uin[2] = {yp, d[0]}, outs[2];
  outs[0] = graph_op1(g, OP_MOE_UNPERMUTE, uin, 2, &pa, "y");
  int nout = 1;
  if (aux) {
    int sc = graph_op1(g, OP_SOFTMAX, &logits, 1, NULL, "scores");
    OpAttrs xa = {.f = {0.37}, .i = {k}};
    int ai[2] = {sc, tk[1]};
    outs[nout++] = graph_op1(g, OP_MOE_AUX_LOSS, ai, 2, &xa, "aux");
  }
  char what[160];
  snprintf(what, sizeof what, "moe chain B=%lld T=%lld E=%lld k=%lld %s%s", (long long)b, (long long)t,
           (long long)ne, (long long)k, cp->name, aux ? " +aux" : "");
  return check(what, g, outs, nout, -1, ne);
}

/* MOE_DISPATCH's layout on a fixed case, and ROUTER_TOPK's tie-break: T = 5 tokens, k = 1,
 * E = 2, experts [0 0 0 1 0], probs [.1 .9 .5 1 .7], capacity 2. */
static int check_layout(void) {
  static const struct {
    int64_t cap;
    int pad, policy;
    int32_t row_of[5], seg[4];
  } cases[] = {
      {0, 0, 0, {0, 1, 2, 4, 3}, {0, 4, 4, 1}},   /* no capacity: contiguous, by expert then token */
      {2, 0, 0, {0, 1, -1, 2, -1}, {0, 2, 2, 1}}, /* position: the earliest two of expert 0 */
      {2, 1, 0, {0, 1, -1, 2, -1}, {0, 2, 2, 2}}, /* pad: expert 1 computes 2 rows, one zero */
      {2, 0, 1, {-1, 0, -1, 2, 1}, {0, 2, 2, 1}}, /* probs: tokens 1 (.9) and 4 (.7), in token order */
  };
  int bad = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    Graph *g = graph_new();
    int64_t sh[2] = {5, 1};
    int idx = graph_tensor(g, "idx", DT_I32, ROLE_INPUT, 2, sh),
        p = graph_tensor(g, "p", DT_F32, ROLE_INPUT, 2, sh), d[3];
    dispatch(g, idx, p, 2, &(Cap){cases[c].cap, cases[c].pad, cases[c].policy, ""}, d);
    int64_t lsh[2] = {2, 3};
    int lg = graph_tensor(g, "logits", DT_F32, ROLE_INPUT, 2, lsh), tk[2];
    OpAttrs ta = {.i = {2, 1}};
    graph_op(g, OP_ROUTER_TOPK, &lg, 1, &ta, tk, NULL);
    graph_plan_trivial(g, 4);
    char err[256];
    CpuExec *e = cpu_exec_new(g, CPU_F32, 2, err, sizeof err);
    if (!e) return printf("layout: %s\n", err), 1;
    static const double ex[5] = {0, 0, 0, 1, 0}, pr[5] = {.1, .9, .5, 1, .7}, lv[6] = {1, 2, 2, 3, 3, 3};
    for (int i = 0; i < 5; i++)
      cpu_exec_set(e, idx, i, ex[i]), cpu_exec_set(e, p, i, pr[i]);
    for (int i = 0; i < 6; i++)
      cpu_exec_set(e, lg, i, lv[i]);
    cpu_exec_run(e, IR_PHASE_BIT(IR_PHASE_FORWARD));
    for (int i = 0; i < 5; i++)
      bad += cpu_exec_get(e, d[0], i) != cases[c].row_of[i];
    for (int i = 0; i < 4; i++)
      bad += cpu_exec_get(e, d[1], i) != cases[c].seg[i];
    bad += cpu_exec_get(e, d[2], 0) != 4 || cpu_exec_get(e, d[2], 1) != 1;
    /* ties go to the lower expert index: row 0 picks 1 then 2, row 1 picks 0 then 1 */
    bad += cpu_exec_get(e, tk[1], 0) != 1 || cpu_exec_get(e, tk[1], 1) != 2;
    bad += cpu_exec_get(e, tk[1], 2) != 0 || cpu_exec_get(e, tk[1], 3) != 1;
    cpu_exec_free(e);
    graph_free(g);
  }
  printf("%-52s %s\n", "moe_dispatch layouts, router_topk tie-break", bad ? "FAILED" : "ok");
  return bad != 0;
}

/* A group of two whose other rank sends what this one does plus 100 (int32 elements). */
static int twin_gather(CpuTp *tp, const void *send, void *recv, int64_t bytes) {
  (void)tp;
  int32_t *r = recv;
  memcpy(r, send, (size_t)bytes);
  for (int64_t i = 0; i < bytes / 4; i++)
    r[bytes / 4 + i] = r[i] + 100;
  return 0;
}

/* The allgather dispatcher's pieces (compiler/lower/lower_moe.c) on the fixture of check_layout:
 * MOE_DISPATCH's local expert range (i[4] = El = 1 of E = 2) on EP rank 0 (no group: experts [0, 1))
 * and rank 1 (experts [1, 2)), and TP_GATHER of int32 indices over the EP group (i[1] = 1), in both
 * executor precisions (the f64 pass copies the int32 bytes too). */
static int check_local_range(void) {
  int bad = 0;
  for (int prec = 0; prec < 2; prec++)
    for (int rank = 0; rank < 2; rank++) {
      Graph *g = graph_new();
      int64_t sh[3] = {1, 5, 1};
      int idx = graph_tensor(g, "idx", DT_I32, ROLE_INPUT, 3, sh), d[3];
      OpAttrs ga = {.i = {2, 1}}, da = {.i = {2, 0, 0, 0, 1}};
      int all = graph_op1(g, OP_TP_GATHER, &idx, 1, &ga, NULL); /* (1, 10, 1) */
      graph_op(g, OP_MOE_DISPATCH, &idx, 1, &da, d, NULL);
      if (g->err[0]) return printf("local range: %s\n", g->err), 1;
      graph_plan_trivial(g, 4);
      char err[256];
      CpuExec *e = cpu_exec_new(g, prec ? CPU_F64 : CPU_F32, 2, err, sizeof err);
      if (!e) return printf("local range: %s\n", err), 1;
      CpuTp tp = {.rank = rank, .size = 2, .all_gather = twin_gather};
      cpu_exec_set_ep(e, &tp);
      static const double ex[5] = {0, 0, 0, 1, 0};
      static const int32_t row_of[2][5] = {{0, 1, 2, -1, 3}, {-1, -1, -1, 0, -1}}, seg[2][2] = {{0, 4}, {0, 1}};
      for (int i = 0; i < 5; i++)
        cpu_exec_set(e, idx, i, ex[i]);
      cpu_exec_run(e, IR_PHASE_BIT(IR_PHASE_FORWARD));
      for (int i = 0; i < 5; i++)
        bad += cpu_exec_get(e, d[0], i) != row_of[rank][i];
      bad += cpu_exec_get(e, d[1], 0) != seg[rank][0] || cpu_exec_get(e, d[1], 1) != seg[rank][1];
      bad += cpu_exec_get(e, d[2], 0) != seg[rank][1] || g->t[d[1]].shape[0] != 1;
      for (int i = 0; i < 10; i++)
        bad += cpu_exec_get(e, all, i) != ex[i % 5] + (i < 5 ? 0 : 100);
      bad += tp.failed;
      cpu_exec_free(e);
      graph_free(g);
    }
  printf("%-52s %s\n", "moe_dispatch local range, int32 gather over EP", bad ? "FAILED" : "ok");
  return bad != 0;
}

int main(void) {
  const char *env = getenv("STEPC_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
  printf("test_moe_grad: seed %llu (rerun with STEPC_TEST_SEED=%llu)\n", (unsigned long long)seed,
         (unsigned long long)seed);
  rng_state = seed;
  int fails = check_layout() + check_local_range();
  char what[160];
  for (int round = 0; round < 2; round++) {
    int64_t b = rnd(1, 2), t = rnd(2, 7), c = rnd(2, 9), ne = rnd(2, 6), f = rnd(1, 5);
    int64_t rows = b * t;
    Graph *g;
    int out[4];

    /* router top-k: k = 1, 2 and a random k; both modes */
    for (int64_t k = 1; k <= 3; k++) {
      int64_t kk = k == 3 ? rnd(1, ne) : (k <= ne ? k : ne);
      for (int mode = 0; mode < 2; mode++) {
        g = graph_new();
        int x = param(g, "logits", 3, b, t, ne, 1);
        OpAttrs a = {.i = {kk, mode}};
        graph_op(g, OP_ROUTER_TOPK, &x, 1, &a, out, NULL);
        snprintf(what, sizeof what, "router_topk E=%lld k=%lld %s", (long long)ne, (long long)kk,
                 mode ? "(gather, pre-softmax)" : "(softmax over top-k)");
        fails += check(what, g, out, 1, -1, ne);
      }
    }

    /* aux loss over a fixed random routing map; k < E, because with every expert chosen each
     * count is T and the loss is coeff·E/k·Σ_t Σ_e p_te / T = constant: its gradient is exactly 0
     * and a relative error against finite-difference round-off means nothing */
    for (int64_t k = 1; k <= 2 && k < ne; k++) {
      g = graph_new();
      int idx = routing_input(g, rows, k), x = param(g, "logits", 2, rows, ne, 1, 1);
      int sc = graph_op1(g, OP_SOFTMAX, &x, 1, NULL, "scores");
      OpAttrs xa = {.f = {0.01 * (double)rnd(1, 100)}, .i = {k}};
      int ai[2] = {sc, idx};
      graph_op(g, OP_MOE_AUX_LOSS, ai, 2, &xa, out, NULL);
      snprintf(what, sizeof what, "softmax + moe_aux_loss E=%lld k=%lld", (long long)ne, (long long)k);
      fails += check(what, g, out, 1, idx, ne);
    }

    /* moe_act: every activation, gated and not */
    for (int glu = 0; glu < 2; glu++)
      for (int act = 0; act < 4; act++) {
        int64_t n = rnd(1, 9);
        g = graph_new();
        int in[2] = {param(g, "h", 2, n, glu ? 2 * f : f, 1, 1), param(g, "pp", 1, n, 1, 1, 1)};
        OpAttrs a = {.i = {glu, act}};
        graph_op(g, OP_MOE_ACT, in, 2, &a, out, NULL);
        static const char *names[] = {"silu", "gelu", "relu", "squared_relu"};
        snprintf(what, sizeof what, "moe_act %s%s", glu ? "glu " : "", names[act]);
        fails += check(what, g, out, 1, -1, ne);
      }

    /* routed ops under every capacity setting, k = 1 and 2 */
    for (int64_t k = 1; k <= 2 && k <= ne; k++) {
      int64_t cap = (int64_t)ceil((double)(rows * k) / (double)ne * 0.6); /* factor 0.6: drops */
      Cap caps[] = {{0, 0, 0, "no capacity"},
                    {cap, 0, 0, "capacity (drop by position)"},
                    {cap, 1, 0, "capacity + pad"},
                    {cap, 0, 1, "capacity (drop by probs)"}};
      for (int i = 0; i < 4; i++)
        fails += check_routed_ops(rows, ne, k, c, &caps[i]);
      for (int i = 0; i < 4; i++)
        fails += check_chain(b, t, c, ne, k, f, &caps[i], i == 0 || i == 3);
    }

    /* MLA head split / concat */
    int64_t h = rnd(1, 4), a1 = rnd(1, 5), a2 = rnd(1, 5);
    for (int shared = 0; shared < 2; shared++)
      for (int flags = 0; flags < 8; flags++) {
        if (shared && (flags & 4)) continue; /* a flat shared part2 is the same as the 4D one */
        int64_t h2 = shared ? 1 : h;
        OpAttrs sa = {.i = {h, a1, a2, h2, flags}};
        g = graph_new();
        int x = flags & 1 ? param(g, "joined", 3, b, t, h * (a1 + a2), 1)
                          : param(g, "joined", 4, b, t, h, a1 + a2);
        graph_op(g, OP_HEAD_SPLIT, &x, 1, &sa, out, NULL);
        snprintf(what, sizeof what, "head_split H=%lld a=%lld b=%lld H2=%lld flags=%d", (long long)h,
                 (long long)a1, (long long)a2, (long long)h2, flags);
        fails += check(what, g, out, 2, -1, 0);

        g = graph_new();
        int p1 = flags & 2 ? param(g, "p1", 3, b, t, h * a1, 1) : param(g, "p1", 4, b, t, h, a1);
        int p2 = flags & 4 ? param(g, "p2", 3, b, t, h2 * a2, 1) : param(g, "p2", 4, b, t, h2, a2);
        int cin[2] = {p1, p2};
        graph_op(g, OP_HEAD_CONCAT, cin, 2, &sa, out, NULL);
        snprintf(what, sizeof what, "head_concat H=%lld a=%lld b=%lld H2=%lld flags=%d", (long long)h,
                 (long long)a1, (long long)a2, (long long)h2, flags);
        fails += check(what, g, out, 1, -1, 0);
      }
    g = graph_new();
    int v = param(g, "v", 4, b, t, h, a1);
    OpAttrs pad = {.i = {h, a1, a2, h, 0}};
    graph_op(g, OP_HEAD_CONCAT, &v, 1, &pad, out, NULL);
    fails += check("head_concat zero padding (v to the qk head dim)", g, out, 1, -1, 0);
  }
  if (fails) {
    printf("test_moe_grad: %d FAILED (seed %llu)\n", fails, (unsigned long long)seed);
    return 1;
  }
  printf("test_moe_grad: ok\n");
  return 0;
}
