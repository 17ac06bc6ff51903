/* test_op_grad.c — every differentiable op alone (the causal mask with the softmax after it,
 * since its -inf outputs cannot be weighted directly) against central finite differences in fp64,
 * with fresh random shapes and inputs each run. The seed is printed; STEPC_TEST_SEED=N reruns one.
 *
 * Objective and tolerance (1e-5, with its reason): op_gradcheck.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "op_gradcheck.h"

static int input_ids(Graph *g, const char *name, int64_t b, int64_t t) {
  int64_t sh[2] = {b, t};
  return graph_tensor(g, name, DT_I32, ROLE_INPUT, 2, sh);
}

typedef struct {
  const int *ids;
  int nids;
  int64_t vocab;
} IdFill;

static void fill_ids(CpuExec *e, const Graph *g, void *ctx) {
  const IdFill *f = ctx;
  for (int i = 0; i < f->nids; i++)
    for (int64_t j = 0, n = tensor_numel(&g->t[f->ids[i]]); j < n; j++) cpu_exec_set(e, f->ids[i], j, (double)rnd(0, f->vocab - 1));
}

/* Differentiates outputs `outs` of the forward graph g and checks every param. ids: int inputs
 * to fill with values in [0, vocab). */
static int check(const char *what, Graph *g, const int *outs, int nout, const int *ids, int nids, int64_t vocab) {
  IdFill f = {ids, nids, vocab};
  return opcheck_run(what, 44, g, outs, nout, fill_ids, &f);
}

int main(void) {
  const char *env = getenv("STEPC_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
  printf("test_op_grad: seed %llu (rerun with STEPC_TEST_SEED=%llu)\n", (unsigned long long)seed, (unsigned long long)seed);
  rng_state = seed;
  int fails = 0;
  for (int round = 0; round < 2; round++) {
    int64_t b = rnd(1, 3), t = rnd(2, 9), c = rnd(3, 12), n = rnd(1, 10), v = rnd(3, 20);
    int64_t gq = rnd(1, 3), rep = rnd(1, 3), h = gq * rep, d = 2 * rnd(1, 4);
    char what[128];
    Graph *g;
    int out[4];

    for (int bias = 0; bias < 2; bias++) {
      g = graph_new();
      int in[3] = {param(g, "x", 3, b, t, c, 1), param(g, "w", 2, n, c, 1, 1), param(g, "b", 1, n, 1, 1, 1)};
      graph_op(g, OP_LINEAR, in, 2 + bias, NULL, out, NULL);
      snprintf(what, sizeof what, "linear%s (%lld,%lld,%lld)->%lld", bias ? "+bias" : "", (long long)b, (long long)t, (long long)c, (long long)n);
      fails += check(what, g, out, 1, NULL, 0, 0);
    }
    g = graph_new();
    int ids = input_ids(g, "tokens", b, t), emb[2] = {ids, param(g, "wte", 2, v, c, 1, 1)};
    graph_op(g, OP_EMBED, emb, 2, NULL, out, NULL);
    snprintf(what, sizeof what, "embed V=%lld C=%lld", (long long)v, (long long)c);
    fails += check(what, g, out, 1, &ids, 1, v);

    g = graph_new();
    int pos[2] = {param(g, "x", 3, b, t, c, 1), param(g, "wpe", 2, t + rnd(0, 3), c, 1, 1)};
    graph_op(g, OP_POS_ADD, pos, 2, NULL, out, NULL);
    fails += check("pos_add (learned positions)", g, out, 1, NULL, 0, 0);

    for (int ln = 0; ln < 2; ln++) {
      g = graph_new();
      int in[3] = {param(g, "x", 3, b, t, c, 1), param(g, "w", 1, c, 1, 1, 1), param(g, "b", 1, c, 1, 1, 1)};
      OpAttrs a = {.f = {1e-5}};
      graph_op(g, ln ? OP_LAYERNORM : OP_RMSNORM, in, ln ? 3 : 2, &a, out, NULL);
      fails += check(ln ? "layernorm" : "rmsnorm", g, out, 1, NULL, 0, 0);
    }
    g = graph_new();
    int x4 = param(g, "x", 4, b, t, h, d);
    OpAttrs ra = {.f = {10000}, .i = {1}};
    graph_op(g, OP_ROPE, &x4, 1, &ra, out, NULL);
    fails += check("rope", g, out, 1, NULL, 0, 0);
    /* Llama 3's scaling (factor 32): base 500000 puts the low head-dim pairs in the scaled bands */
    g = graph_new();
    x4 = param(g, "x", 4, b, t, h, d);
    OpAttrs rs = {.f = {500000, 32}, .i = {1}};
    graph_op(g, OP_ROPE, &x4, 1, &rs, out, NULL);
    fails += check("rope (llama3 scaling)", g, out, 1, NULL, 0, 0);

    g = graph_new();
    int xd = param(g, "x", 3, b, t, c, 1);
    OpAttrs da = {.f = {0.3}, .i = {5}};
    graph_op(g, OP_DROPOUT, &xd, 1, &da, out, NULL);
    fails += check("dropout p=0.3 (mask fixed by the RNG key)", g, out, 1, NULL, 0, 0);

    g = graph_new();
    int xs = param(g, "x", 3, b, t, 2 * c, 1);
    graph_op(g, OP_SWIGLU, &xs, 1, NULL, out, NULL);
    fails += check("swiglu", g, out, 1, NULL, 0, 0);
    g = graph_new();
    int xq = param(g, "x", 3, b, t, 2 * c, 1);
    graph_op(g, OP_GEGLU, &xq, 1, NULL, out, NULL);
    fails += check("geglu", g, out, 1, NULL, 0, 0);
    g = graph_new();
    int xg = param(g, "x", 3, b, t, c, 1);
    graph_op(g, OP_GELU, &xg, 1, NULL, out, NULL);
    fails += check("gelu", g, out, 1, NULL, 0, 0);

    g = graph_new();
    int add[2] = {param(g, "a", 2, t, c, 1, 1), param(g, "b", 2, t, c, 1, 1)};
    graph_op(g, OP_ADD, add, 2, NULL, out, NULL);
    fails += check("add", g, out, 1, NULL, 0, 0);

    g = graph_new();
    int qkv = param(g, "qkv", 3, b, t, (h + 2 * gq) * d, 1);
    OpAttrs sa = {.i = {h, gq, d}};
    graph_op(g, OP_SPLIT_QKV, &qkv, 1, &sa, out, NULL);
    fails += check("split_qkv", g, out, 3, NULL, 0, 0);

    snprintf(what, sizeof what, "attn_scores GQA H=%lld G=%lld D=%lld T=%lld", (long long)h, (long long)gq, (long long)d, (long long)t);
    g = graph_new();
    int qk[2] = {param(g, "q", 4, b, t, h, d), param(g, "k", 4, b, t, gq, d)};
    OpAttrs sc = {.f = {1.0 / sqrt((double)d)}};
    graph_op(g, OP_ATTN_SCORES, qk, 2, &sc, out, NULL);
    fails += check(what, g, out, 1, NULL, 0, 0);

    g = graph_new();
    int s = param(g, "s", 4, b, h, t, t);
    OpAttrs ma = {.i = {0}};
    int m = graph_op1(g, OP_CAUSAL_MASK, &s, 1, &ma, NULL);
    graph_op(g, OP_SOFTMAX, &m, 1, NULL, out, NULL);
    fails += check("causal_mask + softmax", g, out, 1, NULL, 0, 0);

    g = graph_new();
    int pv[2] = {param(g, "p", 4, b, h, t, t), param(g, "v", 4, b, t, gq, d)};
    graph_op(g, OP_ATTN_PV, pv, 2, NULL, out, NULL);
    fails += check("attn_pv GQA", g, out, 1, NULL, 0, 0);

    for (int drop = 0; drop < 2; drop++) {
      g = graph_new();
      int qkv3[3] = {param(g, "q", 4, b, t, h, d), param(g, "k", 4, b, t, gq, d), param(g, "v", 4, b, t, gq, d)};
      OpAttrs fa = {.f = {1.0 / sqrt((double)d), drop ? 0.2 : 0.0}, .i = {3, 1}};
      graph_op(g, OP_FLASH_ATTN, qkv3, 3, &fa, out, NULL);
      snprintf(what, sizeof what, "flash_attn GQA H=%lld G=%lld%s", (long long)h, (long long)gq, drop ? " dropout 0.2" : "");
      fails += check(what, g, out, 1, NULL, 0, 0);
    }

    /* MLA's value heads narrower than q/k (Transformer Engine's fused attention takes them as is) */
    for (int drop = 0; drop < 2; drop++) {
      g = graph_new();
      int64_t dv = d / 2 > 0 ? d / 2 : 1;
      int qkv3[3] = {param(g, "q", 4, b, t, h, d), param(g, "k", 4, b, t, gq, d), param(g, "v", 4, b, t, gq, dv)};
      OpAttrs fa = {.f = {1.0 / sqrt((double)d), drop ? 0.2 : 0.0}, .i = {3, 1}};
      graph_op(g, OP_FLASH_ATTN_DV, qkv3, 3, &fa, out, NULL);
      snprintf(what, sizeof what, "flash_attn_dv D=%lld Dv=%lld%s", (long long)d, (long long)dv, drop ? " dropout 0.2" : "");
      fails += check(what, g, out, 1, NULL, 0, 0);
    }

    /* the Mamba-2 mixer's ops (ir/ops/mamba.c) */
    {
      int64_t mg = rnd(1, 2), mh = mg * rnd(1, 2), mp = rnd(1, 3), mn = rnd(1, 3), kk = rnd(2, 4);
      g = graph_new();
      int cv[3] = {param(g, "x", 3, b, t, c, 1), param(g, "w", 2, c, kk, 1, 1), param(g, "bias", 1, c, 1, 1, 1)};
      graph_op(g, OP_MAMBA_CONV, cv, 3, NULL, out, NULL);
      snprintf(what, sizeof what, "mamba_conv C=%lld K=%lld", (long long)c, (long long)kk);
      fails += check(what, g, out, 1, NULL, 0, 0);

      g = graph_new();
      int dt[2] = {param(g, "dt", 3, b, t, mh, 1), param(g, "dt_bias", 1, mh, 1, 1, 1)};
      graph_op(g, OP_MAMBA_DT, dt, 2, NULL, out, NULL);
      fails += check("mamba_dt", g, out, 1, NULL, 0, 0);

      OpAttrs sa = {.i = {mh, mp, mg, mn}};
      /* dt through its softplus, as in the mixer: with dt > 0 and a < 0 the states decay; a raw
       * negative dt grows them as exp(T |dt a|), beyond what finite differences resolve */
      g = graph_new();
      int dtin[2] = {param(g, "dt_raw", 3, b, t, mh, 1), param(g, "dt_bias", 1, mh, 1, 1, 1)};
      int sc[4] = {param(g, "x", 3, b, t, mh * mp, 1), graph_op1(g, OP_MAMBA_DT, dtin, 2, NULL, NULL),
                   param(g, "A_log", 1, mh, 1, 1, 1), param(g, "BC", 3, b, t, 2 * mg * mn, 1)};
      graph_op(g, OP_MAMBA_SCAN, sc, 4, &sa, out, NULL);
      snprintf(what, sizeof what, "mamba_scan H=%lld P=%lld G=%lld N=%lld", (long long)mh, (long long)mp, (long long)mg,
               (long long)mn);
      fails += check(what, g, out, 1, NULL, 0, 0);

      g = graph_new();
      int sk[3] = {param(g, "y", 3, b, t, mh * mp, 1), param(g, "x", 3, b, t, mh * mp, 1), param(g, "D", 1, mh, 1, 1, 1)};
      graph_op(g, OP_MAMBA_SKIP, sk, 3, &sa, out, NULL);
      fails += check("mamba_skip", g, out, 1, NULL, 0, 0);

      g = graph_new();
      int64_t mc = mh * mp + 2 * mg * mn;
      int mx[4] = {param(g, "xBC", 3, b, t, mc, 1), param(g, "conv1d", 2, mc, kk + 1, 1, 1), param(g, "dt_raw", 3, b, t, mh, 1),
                   param(g, "ssm", 2, mh, 3, 1, 1)};
      graph_op(g, OP_MAMBA_MIXER, mx, 4, &sa, out, NULL);
      snprintf(what, sizeof what, "mamba_mixer H=%lld P=%lld G=%lld N=%lld K=%lld", (long long)mh, (long long)mp,
               (long long)mg, (long long)mn, (long long)kk);
      fails += check(what, g, out, 1, NULL, 0, 0);

      g = graph_new();
      int gt[2] = {param(g, "y", 3, b, t, mh * mp, 1), param(g, "z", 3, b, t, mh * mp, 1)};
      graph_op(g, OP_MAMBA_GATE, gt, 2, NULL, out, NULL);
      fails += check("mamba_gate", g, out, 1, NULL, 0, 0);

      OpAttrs ga = {.f = {1e-5}, .i = {mg}};
      g = graph_new();
      int gn[2] = {param(g, "x", 3, b, t, mg * mp * 2, 1), param(g, "w", 1, mg * mp * 2, 1, 1, 1)};
      graph_op(g, OP_MAMBA_GROUP_NORM, gn, 2, &ga, out, NULL);
      fails += check("mamba_group_norm", g, out, 1, NULL, 0, 0);
    }

    g = graph_new();
    int tg = input_ids(g, "targets", b, t), ce[2] = {param(g, "logits", 3, b, t, v, 1), tg};
    graph_op(g, OP_CROSS_ENTROPY, ce, 2, NULL, out, NULL);
    fails += check("cross_entropy", g, out, 1, &tg, 1, v);
    /* targets drawn from [0, V + 2): some are ignored (loss 0, gradient 0) */
    g = graph_new();
    tg = input_ids(g, "targets", b, t), ce[0] = param(g, "logits", 3, b, t, v, 1), ce[1] = tg;
    graph_op(g, OP_CROSS_ENTROPY, ce, 2, NULL, out, NULL);
    fails += check("cross_entropy, ignored targets", g, out, 1, &tg, 1, v + 2);

    /* the chunked output layer and loss: x and W through every chunk */
    int64_t chunks = rnd(1, b * t);
    while ((b * t) % chunks) chunks--;
    OpAttrs la = {.i = {chunks}};
    g = graph_new();
    tg = input_ids(g, "targets", b, t);
    int lce[3] = {param(g, "x", 3, b, t, c, 1), param(g, "w", 2, v, c, 1, 1), tg};
    graph_op(g, OP_LINEAR_CROSS_ENTROPY, lce, 3, &la, out, NULL);
    snprintf(what, sizeof what, "linear_cross_entropy %lld chunks, ignored targets", (long long)chunks);
    fails += check(what, g, out, 1, &tg, 1, v + 2);
  }
  if (fails) {
    printf("test_op_grad: %d FAILED (seed %llu)\n", fails, (unsigned long long)seed);
    return 1;
  }
  printf("test_op_grad: ok\n");
  return 0;
}
