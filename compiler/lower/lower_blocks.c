/* lower_blocks.c — building helpers shared by the MLA, MoE and Mamba builders and lower.c's
 * dense MLP (see lower_blocks.h).
 * They mirror lower.c's own helpers, which are static there; the parameter names and inits are
 * the same so that both paths name weights alike. */
#include "lower/lower_blocks.h"

#include <stdio.h>
#include <string.h>

#include "ops/fp8.h"

void lb_tags(const LowerBlock *L, int l, uint32_t labels, uint32_t scopes, const char *sub) {
  graph_set_layer(L->g, l);
  graph_set_labels(L->g, labels);
  graph_set_scopes(L->g, scopes);
  graph_module(L->g, "layers.%d.%s", l, sub);
}

int lb_param(const LowerBlock *L, const char *suffix, int ndim, const int64_t *shape, IrInit init,
             double std) {
  char name[IR_NAME_MAX];
  snprintf(name, sizeof name, "%s.%s", L->g->cur.module, suffix);
  return graph_param(L->g, name, L->dt, ndim, shape, init, std);
}

int lb_linear(const LowerBlock *L, int x, int64_t n_out, int64_t n_in, double std) {
  int64_t ws[2] = {n_out, n_in};
  int in[3] = {x, lb_param(L, "weight", 2, ws, IR_INIT_NORMAL, std), -1};
  if (L->s->model.add_bias_linear) in[2] = lb_param(L, "bias", 1, &n_out, IR_INIT_ZEROS, 0);
  return lb_linear_op(L->g, L->s, in, L->s->model.add_bias_linear ? 3 : 2);
}

/* Delayed scaling's state of one kind of fp8 tensor (ir/ops/fp8.h), created on first use and widened
 * by ncols columns for every further group of tensors (one for a linear, one an expert for the
 * routed experts' grouped linears): its id, and the group's first column in *col. */
static int delayed_state(Graph *g, const Spec *s, const char *name, int64_t ncols, int64_t *col) {
  int id = graph_find_tensor(g, name);
  if (id >= 0) {
    *col = g->t[id].shape[1];
    g->t[id].shape[1] += ncols;
    return id;
  }
  int64_t shape[2] = {1 + s->model.fp8_amax_history_len, ncols};
  *col = 0;
  return graph_tensor(g, name, DT_F32, ROLE_OPTIM, 2, shape);
}

/* The three kinds' states (weights, inputs, output gradients) of a group of ncols fp8 tensors of each
 * kind, under delayed scaling: st[] and their first columns col[]; without it none (-1). */
static int delayed_states(Graph *g, const Spec *s, int64_t ncols, int st[3], int64_t col[3]) {
  static const char *const names[3] = {LB_FP8_STATE_WEIGHTS, LB_FP8_STATE_INPUTS, LB_FP8_STATE_GRADS};
  for (int k = 0; k < 3; k++) {
    st[k] = -1, col[k] = 0;
    if (spec_fp8_delayed(s) && (st[k] = delayed_state(g, s, names[k], ncols, &col[k])) < 0) return -1;
  }
  return 0;
}

/* The weight w's fp8 copies, named "<w>.fp8", ".fp8_t", ".scale_inv", in q[3]: made by its cast op,
 * or, under model.fp8_param (fp8 primary weights), persistent tensors (ROLE_PARAM_FP8) that
 * lb_fp8_param_casts writes at the end of the optimizer phase from w, which becomes the fp32 master
 * (the optimizer updates it, no bf16 copy). w is (N, K), cast by FP8_QUANT, or the experts' (E, N, K),
 * cast by FP8_QUANT_GROUPED (a transpose and a scale an expert); the cast's attributes qa and delayed
 * state st (-1 none). 0, or -1 with g->err. */
static int weight_fp8(Graph *g, const Spec *s, int w, int st, const OpAttrs *qa, int q[3]) {
  char names[3][IR_NAME_MAX];
  const char *np[3] = {names[0], names[1], names[2]}, *sfx[3] = {"fp8", "fp8_t", "scale_inv"};
  for (int i = 0; i < 3; i++)
    snprintf(names[i], sizeof names[i], "%s.%s", g->t[w].name, sfx[i]);
  bool grouped = g->t[w].ndim == 3;
  if (!s->model.fp8_param) {
    int qin[2] = {w, st};
    return graph_op(g, grouped ? OP_FP8_QUANT_GROUPED : OP_FP8_QUANT, qin, st >= 0 ? 2 : 1, qa, q, np) < 0
               ? -1
               : 0;
  }
  Tensor *t = &g->t[w];
  t->dtype = DT_F32;
  int nd = t->ndim;
  int64_t ts[3], ns = grouped ? t->shape[0] : 1;
  for (int d = 0; d < nd; d++)
    ts[d] = t->shape[d];
  ts[nd - 2] = t->shape[nd - 1], ts[nd - 1] = t->shape[nd - 2];
  q[0] = graph_tensor(g, names[0], DT_F8E4M3, ROLE_PARAM_FP8, nd, t->shape);
  q[1] = graph_tensor(g, names[1], DT_F8E4M3, ROLE_PARAM_FP8, nd, ts);
  q[2] = graph_tensor(g, names[2], DT_F32, ROLE_PARAM_FP8, 1, &ns);
  for (int i = 0; i < 3; i++)
    if (q[i] < 0)
      return -1;
    else
      g->t[q[i]].of = w;
  return 0;
}

/* The backward's fp8 format: E5M2 under "hybrid", E4M3 under "e4m3" (Format.HYBRID / Format.E4M3). */
static int64_t bwd_format(const Spec *s) { return strcmp(s->model.fp8, "hybrid") == 0 ? FP8_E5M2 : FP8_E4M3; }

/* What an fp8 linear over weight w needs before its op (ncols columns a kind in the delayed states:
 * 1, or one an expert): the states st[3] (-1 none), the linear's attributes *la (forward and
 * backward formats, delayed, its input's and output gradient's first columns) and the weight's fp8
 * copies q[3]. 0, or -1 with g->err. */
static int fp8_linear_setup(Graph *g, const Spec *s, int w, int64_t ncols, int st[3], OpAttrs *la, int q[3]) {
  bool delayed = spec_fp8_delayed(s);
  int64_t col[3];
  if (delayed_states(g, s, ncols, st, col) < 0) return -1;
  OpAttrs qa = {.i = {FP8_E4M3, delayed, col[0]}};
  *la = (OpAttrs){.i = {FP8_E4M3, bwd_format(s), delayed, col[1], col[2]}};
  if (weight_fp8(g, s, w, st[0], &qa, q) < 0) return -1;
  /* under fp8_param the weight's cast after the optimizer takes the input's columns
   * (lb_fp8_param_casts): each kind's state grows by ncols a linear, so they are the same */
  if (s->model.fp8_param && col[0] != col[1])
    return graph_fail(g, "fp8 delayed scaling: the weight's state columns are not its input's");
  return 0;
}

int lb_linear_op(Graph *g, const Spec *s, const int *in, int nin) {
  if (!s->per_rank || !spec_layer_fp8(s, g->cur.layer)) return graph_op1(g, OP_LINEAR, in, nin, NULL, NULL);
  /* Transformer Engine's fp8 linear: the weight cast once a micro-batch (E4M3; its copy, transpose and
   * scale_inv named after it), the input cast in the product's launch; the backward's format E5M2
   * under "hybrid", E4M3 under "e4m3" (Format.HYBRID / Format.E4M3). Under delayed scaling each of the
   * three casts has its column in its kind's state. */
  int st[3], q[3], out[4];
  OpAttrs la;
  if (fp8_linear_setup(g, s, in[1], 1, st, &la, q) < 0) return -1;
  int lin[7] = {in[0], q[0], q[1], q[2]}, n = 4;
  if (nin == 3) lin[n++] = in[2];
  if (st[1] >= 0) lin[n++] = st[1], lin[n++] = st[2];
  if (graph_op(g, OP_LINEAR_FP8, lin, n, &la, out, NULL) < 0) return -1;
  return out[0];
}

int lb_grouped_linear_op(Graph *g, const Spec *s, int x, int w, int seg) {
  if (!s->per_rank || !spec_layer_fp8(s, g->cur.layer)) {
    int in[3] = {x, w, seg};
    return graph_op1(g, OP_GROUPED_LINEAR, in, 3, NULL, NULL);
  }
  /* Transformer Engine's GroupedLinear under fp8: each expert's weight, input rows and output-gradient
   * rows cast with their own scale (under delayed scaling, a column an expert in each kind's state) */
  int st[3], q[3], out[4];
  OpAttrs la;
  if (fp8_linear_setup(g, s, w, g->t[w].shape[0], st, &la, q) < 0) return -1;
  int lin[7] = {x, q[0], q[1], q[2], seg, st[1], st[2]};
  if (graph_op(g, OP_GROUPED_LINEAR_FP8, lin, st[1] >= 0 ? 7 : 5, &la, out, NULL) < 0) return -1;
  return out[0];
}

int lb_fp8_delayed_updates(Graph *g, const Spec *s) {
  int st[3] = {graph_find_tensor(g, LB_FP8_STATE_INPUTS), graph_find_tensor(g, LB_FP8_STATE_GRADS),
               graph_find_tensor(g, LB_FP8_STATE_WEIGHTS)};
  if (st[0] < 0) return 0;
  if (st[1] < 0 || st[2] < 0) return graph_fail(g, "fp8 delayed scaling: a state tensor is missing");
  int bwd = (int)bwd_format(s),
      algo = strcmp(s->model.fp8_amax_compute_algo, "max") == 0 ? FP8_AMAX_MAX : FP8_AMAX_MOST_RECENT;
  int fmt[3] = {FP8_E4M3, bwd, FP8_E4M3};
  Phase ph[3] = {IR_PHASE_BACKWARD, IR_PHASE_BACKWARD, IR_PHASE_OPTIMIZER};
  /* Megatron's amax reduction group (TP x DP x CP: every rank, with no pipeline stages): the ranks
   * of a TP group hold shards of one tensor (or, after a sequence-parallel gather, the same one), the
   * data-parallel ranks other micro-batches of it, so the amaxes are maxed over every rank before each
   * update and every rank's scales are alike (under TP the one-rank step's) */
  int amax_group = s->train.world_size > 1 || s->train.force_parallel_lowering;
  IrTags saved = g->cur;
  int rc = 0;
  for (int k = 0; k < 3 && rc == 0; k++) {
    g->cur = (IrTags){.phase = ph[k], .layer = -1, .fwd = -1};
    snprintf(g->cur.module, sizeof g->cur.module, "fp8_delayed");
    OpAttrs a = {.i = {fmt[k], algo, s->model.fp8_margin, amax_group}};
    rc = graph_op_into(g, OP_FP8_SCALE_UPDATE, NULL, 0, &st[k], 1, &a) < 0 ? -1 : 0;
  }
  g->cur = saved;
  return rc;
}

int lb_fp8_param_casts(Graph *g, const Spec *s) {
  if (!s->model.fp8_param) return 0;
  bool delayed = spec_fp8_delayed(s);
  int sw = delayed ? graph_find_tensor(g, LB_FP8_STATE_WEIGHTS) : -1;
  IrTags saved = g->cur;
  int rc = 0;
  for (int o = 0, nop = g->nop; o < nop && rc == 0; o++) {
    const Op *op = &g->op[o];
    bool grouped = op->kind == OP_GROUPED_LINEAR_FP8;
    if ((op->kind != OP_LINEAR_FP8 && !grouped) || g->t[op->in[1]].role != ROLE_PARAM_FP8) continue;
    int w = g->t[op->in[1]].of, in[2] = {w, sw}, out[3] = {op->in[1], op->in[2], op->in[3]};
    bool done = false; /* a weight read by two linears is cast once */
    for (int k = nop; k < g->nop && !done; k++)
      done = g->op[k].out[0] == out[0];
    if (done) continue;
    g->cur = (IrTags){.phase = IR_PHASE_OPTIMIZER, .layer = op->tags.layer, .fwd = -1};
    snprintf(g->cur.module, sizeof g->cur.module, "%s", op->tags.module);
    OpAttrs qa = {.i = {FP8_E4M3, delayed, delayed ? op->a.i[3] : 0}};
    rc = graph_op_into(g, grouped ? OP_FP8_QUANT_GROUPED : OP_FP8_QUANT, in, delayed ? 2 : 1, out, 3, &qa) < 0
             ? -1
             : 0;
  }
  g->cur = saved;
  return rc;
}

int lb_norm(const LowerBlock *L, int x, int64_t width) {
  bool ln = strcmp(L->s->model.normalization, "LayerNorm") == 0;
  int in[3] = {x, lb_param(L, "weight", 1, &width, IR_INIT_ONES, 0),
               ln ? lb_param(L, "bias", 1, &width, IR_INIT_ZEROS, 0) : -1};
  OpAttrs a = {.f = {L->s->model.layernorm_epsilon}};
  return graph_op1(L->g, ln ? OP_LAYERNORM : OP_RMSNORM, in, ln ? 3 : 2, &a, NULL);
}

int lb_dropout(const LowerBlock *L, int x, double p, int split) {
  if (p <= 0) return x;
  OpAttrs a = {.f = {p}, .i = {(*L->stream)++, L->tp_on ? split : 0}};
  return graph_op1(L->g, OP_DROPOUT, &x, 1, &a, NULL);
}

int lb_shard(const LowerBlock *L, int id, int dim, int nseg, const int64_t *seg) {
  if (id < 0 || L->tp <= 1) return id;
  Tensor *t = &L->g->t[id];
  t->tp_dim = dim, t->tp_nseg = nseg, t->tp_size = (int32_t)L->tp;
  for (int k = 0; k < nseg; k++)
    t->tp_seg[k] = seg[k];
  return id;
}

/* lb_shard, then segment k's parts replicated on rep[k] ranks (Tensor.tp_rep; rep NULL: none). */
static int shard_rep(const LowerBlock *L, int id, int nseg, const int64_t *seg, const int *rep) {
  if ((id = lb_shard(L, id, 0, nseg, seg)) < 0 || !rep || L->g->t[id].tp_nseg == 0) return id;
  for (int k = 0; k < nseg; k++)
    L->g->t[id].tp_rep[k] = rep[k];
  return id;
}

int lb_linear_col(const LowerBlock *L, int x, int64_t n_out, int64_t n_in, double std, int nseg,
                  const int64_t *seg) {
  return lb_linear_col_rep(L, x, n_out, n_in, std, nseg, seg, NULL);
}

int lb_linear_col_rep(const LowerBlock *L, int x, int64_t n_out, int64_t n_in, double std, int nseg,
                      const int64_t *seg, const int *rep) {
  int64_t rows = rep && L->tp > 1 ? 0 : n_out / L->tp; /* the shard's rows: each segment's part */
  for (int k = 0; k < nseg && rep && L->tp > 1; k++)
    rows += seg[k] * (rep[k] > 1 ? rep[k] : 1) / L->tp;
  int64_t ws[2] = {rows, n_in};
  int in[3] = {x, shard_rep(L, lb_param(L, "weight", 2, ws, IR_INIT_NORMAL, std), nseg, seg, rep), -1};
  if (L->s->model.add_bias_linear)
    in[2] = shard_rep(L, lb_param(L, "bias", 1, &rows, IR_INIT_ZEROS, 0), nseg, seg, rep);
  return lb_linear_op(L->g, L->s, in, L->s->model.add_bias_linear ? 3 : 2);
}

int lb_linear_row(const LowerBlock *L, int x, int64_t n_out, int64_t n_in, double std) {
  int64_t ws[2] = {n_out, n_in / L->tp};
  int in[2] = {x, lb_shard(L, lb_param(L, "weight", 2, ws, IR_INIT_NORMAL, std), 1, 1, &n_in)};
  if (!L->tp_on && L->s->model.add_bias_linear) { /* one rank: the plain linear with its bias */
    int in3[3] = {x, in[1], lb_param(L, "bias", 1, &n_out, IR_INIT_ZEROS, 0)};
    return lb_linear_op(L->g, L->s, in3, 3);
  }
  int y = lb_tp_leave(L, lb_linear_op(L->g, L->s, in, 2));
  if (!L->s->model.add_bias_linear) return y;
  int bias[2] = {y, lb_param(L, "bias", 1, &n_out, IR_INIT_ZEROS, 0)};
  return graph_op1(L->g, OP_BIAS_ADD, bias, 2, NULL, NULL);
}

int lb_tp_enter(const LowerBlock *L, int x) {
  if (!L->tp_on) return x;
  OpAttrs a = {.i = {L->tp}};
  return graph_op1(L->g, L->sp ? OP_TP_GATHER : OP_TP_COPY, &x, 1, &a, NULL);
}

int lb_tp_leave(const LowerBlock *L, int x) {
  if (!L->tp_on) return x;
  OpAttrs a = {.i = {L->tp}};
  return graph_op1(L->g, L->sp ? OP_TP_SCATTER : OP_TP_ALLREDUCE, &x, 1, &a, NULL);
}

int lb_attn_impl(const SpecModel *m) {
  if (strcmp(m->attention_backend, "fused") == 0) return ATTN_IMPL_CUDNN;
  return strcmp(m->attention_backend, "auto") == 0 ? ATTN_IMPL_AUTO : ATTN_IMPL_FLASH;
}

/* activation_func x gated_linear_unit -> the op (and its i[0]) */
static const struct {
  const char *func;
  bool glu;
  OpKind kind;
  int64_t i0;
} MLP_ACTS[] = {
    {"silu", true, OP_SWIGLU, 0},
    {"gelu", true, OP_GEGLU, 0},
    {"gelu", false, OP_GELU, 0},
    {"relu", false, OP_RELU_ACT, 0},
    {"squared_relu", false, OP_RELU_ACT, 1},
};

int lb_mlp_act(Graph *g, const SpecModel *m, int u) {
  const char *f = m->activation_func;
  bool glu = m->gated_linear_unit;
  for (size_t i = 0; i < sizeof MLP_ACTS / sizeof *MLP_ACTS; i++)
    if (MLP_ACTS[i].glu == glu && strcmp(MLP_ACTS[i].func, f) == 0) {
      OpAttrs a = {.i = {MLP_ACTS[i].i0}};
      return graph_op1(g, MLP_ACTS[i].kind, &u, 1, &a, NULL);
    }
  return graph_fail(g, "MLPs with activation_func %s%s are not lowered yet", f, glu ? " (gated)" : "");
}
