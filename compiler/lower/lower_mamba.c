/* lower_mamba.c — one Mamba-2 layer of a hybrid model (Megatron's MambaLayer with MambaMixer,
 * megatron/core/ssm/mamba_layer.py and mamba_mixer.py), from its norm to its residual add. Every
 * op is in the `mamba` graph scope (and `layer`): megatron-rules.md §2.2 captures the whole
 * MambaLayer. No selective label reaches inside it (Megatron's labels name TransformerLayer and
 * MoE regions); full recompute takes it as a layer.
 *
 * Sizes (Megatron's fields): H = mamba_num_heads (null: 2 * hidden / mamba_head_dim, the mixer's
 * expand = 2), P = mamba_head_dim, d_inner = H P, G = mamba_num_groups, N = mamba_state_dim,
 * conv kernel 4 (MambaMixer's d_conv):
 *   norm                     RMSNorm of the residual stream (TE fuses it into in_proj)
 *   mixer.in_proj            (B,T,C) -> z (d_inner) | xBC (d_inner + 2 G N) | dt (H)
 *   mixer (MAMBA_MIXER)      conv1d + SiLU, softplus(dt + dt_bias), the SSD scan, + D x
 *   mixer (MAMBA_GATE)       y silu(z), which mamba_ssm's scan returns on Megatron's path
 *   mixer.norm               RMSNorm over G groups (Megatron's norm, called without z)
 *   mixer.out_proj           (B,T,d_inner) -> (B,T,C), then the residual add
 * The mixer's per-channel and per-head parameters are packed (ops/mamba.c): mixer.conv1d.weight
 * holds conv1d.weight and conv1d.bias, mixer.ssm holds dt_bias, A_log and D. Initialisation is
 * stepc's (normal / ones), not Megatron's A ~ U(1, 16) and log-uniform dt: the plan and the
 * gradients do not depend on it.
 *
 * Tensor parallelism (Megatron's MambaMixer: in_proj column-parallel, out_proj row-parallel): each
 * rank holds H/TP heads and G/TP groups — in_proj's rows in five segments [z | x | B | C | dt], the
 * conv's channels in three [x | B | C], the per-head dt_bias, A_log, D and the norm's channels in
 * one — so the rank's xBC is [its x | its B | its C] and its mixer runs its heads over its groups;
 * under SP the norm runs on the rank's rows and in_proj's input is gathered. */
#include <stdio.h>

#include "lower/lower_blocks.h"

enum { MAMBA_D_CONV = 4 };

/* HEAD_SPLIT of the last dim into [a | b] (ops/mla.c with one head, flat parts) */
static int split2(const LowerBlock *L, int x, int64_t a, int64_t b, const char *n1, const char *n2, int *p1,
                  int *p2) {
  char b1[IR_NAME_MAX], b2[IR_NAME_MAX];
  snprintf(b1, sizeof b1, "%s.%s", L->g->cur.module, n1);
  snprintf(b2, sizeof b2, "%s.%s", L->g->cur.module, n2);
  const char *names[2] = {b1, b2};
  OpAttrs at = {.i = {1, a, b, 1, 1 | 2 | 4}};
  int out[2];
  if (graph_op(L->g, OP_HEAD_SPLIT, &x, 1, &at, out, names) < 0) return -1;
  *p1 = out[0], *p2 = out[1];
  return 0;
}

int64_t lower_mamba_heads(const Spec *s) {
  const SpecModel *m = &s->model;
  if (s->present[SPEC_F_model_mamba_num_heads]) return m->mamba_num_heads;
  return m->mamba_head_dim > 0 ? 2 * m->hidden_size / m->mamba_head_dim : 0;
}

int lower_mamba(const LowerBlock *L, int l, int x) {
  const uint32_t S = IR_SCOPE_LAYER | IR_SCOPE_MAMBA;
  const SpecModel *m = &L->s->model;
  Graph *g = L->g;
  int64_t h = lower_mamba_heads(L->s), p = m->mamba_head_dim, gg = m->mamba_num_groups,
          n = m->mamba_state_dim;
  if (h < 1 || p < 1 || gg < 1 || n < 1 || h % gg)
    return graph_fail(g,
                      "Mamba sizes cannot be lowered (heads %lld, head dim %lld, groups %lld dividing the "
                      "heads, state %lld)",
                      (long long)h, (long long)p, (long long)gg, (long long)n);
  if (h % L->tp || gg % L->tp)
    return graph_fail(g, "Mamba heads %lld and groups %lld are not both divisible by TP %lld", (long long)h,
                      (long long)gg, (long long)L->tp);
  int64_t H = h, DI = h * p, GN = gg * n; /* the one-rank sizes */
  h /= L->tp, gg /= L->tp;                /* this rank's heads and groups */
  int64_t di = h * p, cx = di + 2 * gg * n;

  lb_tags(L, l, 0, S, "norm");
  int hn = lb_norm(L, x, L->c);
  lb_tags(L, l, 0, S, "mixer.in_proj");
  int64_t in_seg[5] = {DI, DI, GN, GN, H}; /* [z | x | B | C | dt] */
  int zx = lb_linear_col(L, lb_tp_enter(L, hn), 2 * DI + 2 * GN + H, L->c, L->std, 5, in_seg);
  lb_tags(L, l, 0, S, "mixer");
  int z, rest, xbc, dt;
  if (split2(L, zx, di, cx + h, "z", "xBC_dt", &z, &rest) < 0 ||
      split2(L, rest, cx, h, "xBC", "dt", &xbc, &dt) < 0)
    return -1;
  int64_t cs[2] = {cx, MAMBA_D_CONV + 1}, ss[2] = {h, 3}, conv_seg[3] = {DI, GN, GN};
  int in[4] = {xbc, lb_shard(L, lb_param(L, "conv1d.weight", 2, cs, IR_INIT_NORMAL, L->std), 0, 3, conv_seg),
               dt, lb_shard(L, lb_param(L, "ssm", 2, ss, IR_INIT_NORMAL, L->std), 0, 1, &H)};
  OpAttrs ma = {.i = {h, p, gg, n}};
  int y = graph_op1(g, OP_MAMBA_MIXER, in, 4, &ma, NULL);
  int gt[2] = {y, z};
  y = graph_op1(g, OP_MAMBA_GATE, gt, 2, NULL, NULL);
  lb_tags(L, l, 0, S, "mixer.norm");
  int gn[2] = {y, lb_shard(L, lb_param(L, "weight", 1, &di, IR_INIT_ONES, 0), 0, 1, &DI)};
  OpAttrs na = {.f = {m->layernorm_epsilon}, .i = {gg}};
  y = graph_op1(g, OP_MAMBA_GROUP_NORM, gn, 2, &na, NULL);
  lb_tags(L, l, 0, S, "mixer.out_proj");
  int o = lb_linear_row(L, y, L->c, DI, L->out_std);
  lb_tags(L, l, 0, S, "mamba_bda");
  o = lb_dropout(L, o, m->hidden_dropout, L->sp ? 1 : 0);
  int add[2] = {x, o};
  return graph_op1(g, OP_ADD, add, 2, NULL, NULL);
}
