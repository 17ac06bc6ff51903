/* mamba.c — the Mamba-2 mixer's own ops (Megatron's MambaMixer, megatron/core/ssm/mamba_mixer.py,
 * with mamba_ssm's kernels), the rest of the mixer being LINEAR (in_proj, out_proj) and HEAD_SPLIT:
 *
 *   MAMBA_CONV        y = silu(bias + causal depthwise conv1d(x, w)) over the sequence; x (B,T,C),
 *                     w (C,K), bias (C): y[t,c] = silu(bias[c] + sum_k w[c,k] x[t-K+1+k, c]), zero
 *                     before t = 0 (nn.Conv1d with padding K-1, cut to T, then the activation)
 *   MAMBA_DT          dt = softplus(dt_raw + dt_bias[h]); dt_raw (B,T,H), dt_bias (H)
 *   MAMBA_SCAN        the SSD recurrence per head h of group g = h / (H/G): a_h = -exp(A_log[h]),
 *                     S_t = exp(dt_t a_h) S_{t-1} + dt_t x_t B_t^T (S: P x N), y_t = S_t C_t;
 *                     x (B,T,H*P), dt (B,T,H), A_log (H), BC (B,T,2*G*N) = [B (G*N) | C (G*N)]
 *                     (the conv output's tail, as mamba_ssm splits xBC); y (B,T,H*P)
 *   MAMBA_SKIP        y + D[h] x (the D skip connection, D_has_hdim false)
 *   MAMBA_GATE        y silu(z), y and z (B,T,H*P): the gate mamba_ssm's scan applies when it is
 *                     given z (Megatron's path: mamba_split_conv1d_scan_combined without
 *                     rmsnorm_weight returns the gated output)
 *   MAMBA_GROUP_NORM  Megatron's mixer norm (RMSNormGated called without z, norm_before_gate
 *                     false): each of the G groups of a row normalised by its rms, times w;
 *                     x (B,T,H*P), w (H*P), f[0] eps. Kept apart from the gate because Megatron
 *                     materialises the gated output and the norm saves it for its backward
 *   MAMBA_MIXER       CONV, DT, SCAN and SKIP as one op, as mamba_ssm's
 *                     mamba_split_conv1d_scan_combined runs them for Megatron (use_mem_eff_path):
 *                     xBC (B,T,H*P+2*G*N) before the conv, conv (C,K+1) = [conv1d.weight |
 *                     conv1d.bias], dt_raw (B,T,H), ssm (H,3) = [dt_bias | A_log | D] -> y
 *                     (B,T,H*P), the SSD output with the D skip. What it keeps for the backward is
 *                     what Megatron's path keeps: its inputs (the in_proj output's xBC and dt parts),
 *                     not the conv output, dt or the scan output, which the backward recomputes.
 *                     The per-channel and per-head parameters travel packed so that the backward
 *                     has one gradient per input (an op has at most five outputs, and the
 *                     backward's last is its workspace). The lowering uses MIXER; CONV, DT,
 *                     SCAN and SKIP are its parts, gradient-checked alone.
 * Attributes of SCAN, SKIP and MIXER: i[0] = H, i[1] = P, i[2] = G, i[3] = N; GROUP_NORM: i[0] = G.
 *
 * MIXER, MIXER_BWD and GROUP_NORM_BWD have one more output, last: the fp32 workspace their CUDA
 * kernels take (ROLE_WORKSPACE, 1-D, as many floats as kernels/launch.h stepc_mamba_ws /
 * stepc_mamba_gnorm_ws lay out for the op's shapes: the conv output, the forward's chunk C.B, the backward's
 * chunk states, their gradients and partial sums; the group norm's rstd and weight partials). The memory plan
 * places it for the op alone, so it shares memory with the other transients; the CPU references leave it
 * untouched.
 *
 * The scan keeps nothing for its backward, which replays the recurrence from x, dt, BC (as the
 * chunked SSD kernel recomputes its states). Each backward writes one gradient per forward
 * input, in input order. Reductions run in a fixed order, whatever the threads. */
#ifndef OPS_KERNEL_PASS
#include "kernels/launch.h"
#include "ops/ops.h"

static int m_err_shape(char *err, size_t n, const Op *op) {
  return ops_err(err, n, "%s: inconsistent shapes", op_name(op->kind));
}

static int conv_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *w = ops_in(g, op, 1), *b = ops_in(g, op, 2);
  if (x->ndim != 3 || w->ndim != 2 || w->shape[0] != x->shape[2] || b->ndim != 1 ||
      b->shape[0] != x->shape[2])
    return m_err_shape(err, n, op);
  ops_out_like(&out[0], x, "out");
  return 0;
}

static int dt_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *b = ops_in(g, op, 1);
  if (x->ndim != 3 || b->ndim != 1 || b->shape[0] != x->shape[2]) return m_err_shape(err, n, op);
  ops_out_like(&out[0], x, "dt");
  return 0;
}

/* H, P, G, N against x (B,T,H*P) */
static int hp_ok(const Tensor *x, const Op *op) {
  int64_t h = op->a.i[0], p = op->a.i[1], gg = op->a.i[2], nn = op->a.i[3];
  return h > 0 && p > 0 && gg > 0 && nn > 0 && h % gg == 0 && x->ndim == 3 && x->shape[2] == h * p;
}

static int scan_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *dt = ops_in(g, op, 1), *al = ops_in(g, op, 2), *bc = ops_in(g, op, 3);
  int64_t h = op->a.i[0];
  if (!hp_ok(x, op) || dt->ndim != 3 || dt->shape[2] != h || al->ndim != 1 || al->shape[0] != h ||
      bc->ndim != 3 || bc->shape[2] != 2 * op->a.i[2] * op->a.i[3] || dt->shape[1] != x->shape[1] ||
      bc->shape[1] != x->shape[1])
    return m_err_shape(err, n, op);
  ops_out_like(&out[0], x, "y");
  return 0;
}

/* The op's workspace output: `floats` fp32 words that live within the op (see the top). */
static void ws_out(OpOut *o, long floats) {
  ops_out_shape(o, DT_F32, "workspace", 1, floats, 1, 1, 1);
  o->role = ROLE_WORKSPACE;
}

/* The mixer's workspace floats (kernels/launch.h) for xBC x (B,T,C), conv cw (C,K+1). */
static long mixer_ws(const Op *op, const Tensor *x, const Tensor *cw, int backward) {
  return stepc_mamba_ws(x->shape[0], x->shape[1], op->a.i[0], op->a.i[1], op->a.i[3], op->a.i[2], x->shape[2],
                        cw->shape[1] - 1, backward)
      .floats;
}

static int mixer_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *cw = ops_in(g, op, 1), *dt = ops_in(g, op, 2), *sp = ops_in(g, op, 3);
  int64_t h = op->a.i[0], p = op->a.i[1], gg = op->a.i[2], nn = op->a.i[3], c = h * p + 2 * gg * nn;
  if (h < 1 || p < 1 || gg < 1 || nn < 1 || h % gg || x->ndim != 3 || x->shape[2] != c || cw->ndim != 2 ||
      cw->shape[0] != c || cw->shape[1] < 2 || dt->ndim != 3 || dt->shape[1] != x->shape[1] ||
      dt->shape[2] != h || sp->ndim != 2 || sp->shape[0] != h || sp->shape[1] != 3)
    return m_err_shape(err, n, op);
  ops_out_shape(&out[0], x->dtype, "y", 3, x->shape[0], x->shape[1], h * p, 1);
  ws_out(&out[1], mixer_ws(op, x, cw, 0));
  return 0;
}

static int skip_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *y = ops_in(g, op, 0), *x = ops_in(g, op, 1), *d = ops_in(g, op, 2);
  if (!hp_ok(x, op) || !ops_same_shape(x, y) || d->ndim != 1 || d->shape[0] != op->a.i[0])
    return m_err_shape(err, n, op);
  ops_out_like(&out[0], y, "out");
  return 0;
}

static int gate_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *y = ops_in(g, op, 0), *z = ops_in(g, op, 1);
  if (!ops_same_shape(y, z)) return m_err_shape(err, n, op);
  ops_out_like(&out[0], y, "gated");
  return 0;
}

static int gnorm_infer(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  const Tensor *x = ops_in(g, op, 0), *w = ops_in(g, op, 1);
  if (w->ndim != 1 || w->shape[0] != ops_last(x) || op->a.i[0] < 1 || ops_last(x) % op->a.i[0])
    return m_err_shape(err, n, op);
  ops_out_like(&out[0], x, "out");
  return 0;
}

/* Backward infers: gradient i is shaped like forward input i (inputs 1.. of the backward op); the
 * mixer's and the group norm's backward then their workspace. */
/* A backward's inputs after dout are its forward's, with the forward's attributes: they must be
 * what the forward accepts, since the backward's kernels divide and loop by them too (a step image
 * is checked against these rules when it is read: runtime/image_check.c). */
static int grads_like_inputs(const Graph *g, const Op *op, OpOut *out, char *err, size_t n) {
  OpKind fk = op->kind == OP_MAMBA_CONV_BWD    ? OP_MAMBA_CONV
              : op->kind == OP_MAMBA_DT_BWD    ? OP_MAMBA_DT
              : op->kind == OP_MAMBA_SCAN_BWD  ? OP_MAMBA_SCAN
              : op->kind == OP_MAMBA_SKIP_BWD  ? OP_MAMBA_SKIP
              : op->kind == OP_MAMBA_MIXER_BWD ? OP_MAMBA_MIXER
              : op->kind == OP_MAMBA_GATE_BWD  ? OP_MAMBA_GATE
                                               : OP_MAMBA_GROUP_NORM;
  Op f = *op;
  f.kind = fk, f.nin = op->nin - 1;
  memmove(f.in, op->in + 1, (size_t)f.nin * sizeof f.in[0]);
  OpOut fwd[IR_MAX_OUT];
  if (op_info(fk)->infer(g, &f, fwd, err, n) != 0) return -1;
  for (int i = 0; i < f.nin; i++)
    ops_out_like(&out[i], ops_in(g, op, 1 + i), "grad");
  if (op->kind == OP_MAMBA_MIXER_BWD)
    ws_out(&out[f.nin], mixer_ws(op, ops_in(g, op, 1), ops_in(g, op, 2), 1));
  if (op->kind == OP_MAMBA_GROUP_NORM_BWD) {
    const Tensor *x = ops_in(g, op, 1);
    ws_out(&out[f.nin], stepc_mamba_gnorm_ws((long)ops_rows(x), (int)ops_last(x), (int)op->a.i[0]));
  }
  return 0;
}

/* Every backward reads dout then the forward inputs. */
static int m_backward(Graph *g, int op, const int *dout, int *din) {
  Op o = g->op[op];
  if (dout[0] < 0) return 0;
  OpKind bk = o.kind == OP_MAMBA_CONV    ? OP_MAMBA_CONV_BWD
              : o.kind == OP_MAMBA_DT    ? OP_MAMBA_DT_BWD
              : o.kind == OP_MAMBA_SCAN  ? OP_MAMBA_SCAN_BWD
              : o.kind == OP_MAMBA_SKIP  ? OP_MAMBA_SKIP_BWD
              : o.kind == OP_MAMBA_MIXER ? OP_MAMBA_MIXER_BWD
              : o.kind == OP_MAMBA_GATE  ? OP_MAMBA_GATE_BWD
                                         : OP_MAMBA_GROUP_NORM_BWD;
  int in[IR_MAX_IN], of[IR_MAX_OUT], out[IR_MAX_OUT];
  in[0] = dout[0];
  for (int i = 0; i < IR_MAX_OUT; i++)
    of[i] = -1;
  for (int i = 0; i < o.nin; i++)
    in[1 + i] = o.in[i], of[i] = o.in[i];
  if (ops_grad_op(g, bk, in, 1 + o.nin, &o.a, out, of) < 0) return -1;
  for (int i = 0; i < o.nin; i++) /* the gradients; a workspace after them is the backward's own */
    din[i] = out[i];
  return 0;
}

static double conv_flops(const Graph *g, const Op *op) {
  const Tensor *x = ops_in(g, op, op->kind == OP_MAMBA_CONV ? 0 : 1),
               *w = ops_in(g, op, op->kind == OP_MAMBA_CONV ? 1 : 2);
  return (double)tensor_numel(x) * (2.0 * (double)w->shape[1] + 4) * (op->kind == OP_MAMBA_CONV ? 1 : 3);
}

/* forward: 3 P N per step for the state update and 2 P N for the output, per (b, t, h); backward
 * replays the states and takes about twice that again */
static double scan_flops(const Graph *g, const Op *op) {
  const Tensor *x = ops_in(g, op, op->kind == OP_MAMBA_SCAN ? 0 : 1);
  double per = 5.0 * (double)op->a.i[3];
  return (double)tensor_numel(x) * per * (op->kind == OP_MAMBA_SCAN ? 1 : 3);
}

/* the conv (2 K + 4 per element of xBC) and the scan (5 P N per (b, t, h), over x) */
static double mixer_flops(const Graph *g, const Op *op) {
  int fwd = op->kind == OP_MAMBA_MIXER;
  const Tensor *x = ops_in(g, op, fwd ? 0 : 1), *cw = ops_in(g, op, fwd ? 1 : 2);
  double xs = (double)(x->shape[0] * x->shape[1]) * (double)(op->a.i[0] * op->a.i[1]);
  double f = (double)tensor_numel(x) * (2.0 * (double)(cw->shape[1] - 1) + 4) + xs * 5.0 * (double)op->a.i[3];
  return fwd ? f : 3 * f;
}

/* Bytes of an op with a workspace: its inputs and its other outputs once. The workspace's own
 * traffic (the chunk states written and read back, the partials) is left out: cost_h200.h's Mamba
 * scales were measured against these bytes, and the mixer's classes are timed against the
 * tensor-core ceiling, which its compute sets. */
static double ws_op_bytes(const Graph *g, const Op *op) {
  const Tensor *w = &g->t[op->out[op->nout - 1]];
  return op_tensor_bytes(g, op) - (double)tensor_numel(w) * (double)dtype_size(w->dtype);
}

static double gnorm_flops(const Graph *g, const Op *op) {
  return 8.0 * (double)tensor_numel(ops_in(g, op, op->kind == OP_MAMBA_GROUP_NORM ? 0 : 1));
}

#define OPS_KERNEL_PASS
#define OPS_REAL 32
#include "ops/real.h"
#include __FILE__
#undef OPS_REAL
#define OPS_REAL 64
#include "ops/real.h"
#include __FILE__
#undef OPS_KERNEL_PASS

/* Cost classes (compiler/plan/cost_h200.h calibrates each): the mixer and its parts forward and
 * backward, against the tensor-core ceiling (the chunked SSD is GEMM-shaped work) or DRAM, whichever
 * is slower; the gate and the group norm against DRAM. */
const OpInfo op_mamba_conv_info = {"mamba_conv",
                                   3,
                                   3,
                                   1,
                                   conv_infer,
                                   conv_flops,
                                   m_backward,
                                   {conv_cpu_f32, conv_cpu_f64},
                                   .facts = {.cost = COST_MAMBA_FWD,
                                             .ceiling = CEIL_DRAM,
                                             .inplace = INPLACE_NONE,
                                             .rng = RNG_NONE,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_NONE,
                                             .ew = &OP_EW_NONE}};
const OpInfo op_mamba_conv_bwd_info = {"mamba_conv_bwd",
                                       4,
                                       4,
                                       3,
                                       grads_like_inputs,
                                       conv_flops,
                                       NULL,
                                       {conv_bwd_cpu_f32, conv_bwd_cpu_f64},
                                       .facts = {.cost = COST_MAMBA_BWD,
                                                 .ceiling = CEIL_DRAM,
                                                 .inplace = INPLACE_NONE,
                                                 .rng = RNG_NONE,
                                                 .sink = SINK_NO,
                                                 .matmul = MATMUL_NONE,
                                                 .ew = &OP_EW_NONE}};
const OpInfo op_mamba_dt_info = {"mamba_dt",
                                 2,
                                 2,
                                 1,
                                 dt_infer,
                                 ops_flops_elementwise,
                                 m_backward,
                                 {dt_cpu_f32, dt_cpu_f64},
                                 .facts = {.cost = COST_MAMBA_FWD,
                                           .ceiling = CEIL_DRAM,
                                           .inplace = INPLACE_NONE,
                                           .rng = RNG_NONE,
                                           .sink = SINK_NO,
                                           .matmul = MATMUL_NONE,
                                           .ew = &OP_EW_NONE}};
const OpInfo op_mamba_dt_bwd_info = {"mamba_dt_bwd",
                                     3,
                                     3,
                                     2,
                                     grads_like_inputs,
                                     ops_flops_elementwise,
                                     NULL,
                                     {dt_bwd_cpu_f32, dt_bwd_cpu_f64},
                                     .facts = {.cost = COST_MAMBA_BWD,
                                               .ceiling = CEIL_DRAM,
                                               .inplace = INPLACE_NONE,
                                               .rng = RNG_NONE,
                                               .sink = SINK_NO,
                                               .matmul = MATMUL_NONE,
                                               .ew = &OP_EW_NONE}};
const OpInfo op_mamba_scan_info = {"mamba_scan",
                                   4,
                                   4,
                                   1,
                                   scan_infer,
                                   scan_flops,
                                   m_backward,
                                   {scan_cpu_f32, scan_cpu_f64},
                                   .facts = {.cost = COST_MAMBA_FWD,
                                             .ceiling = CEIL_DRAM,
                                             .inplace = INPLACE_NONE,
                                             .rng = RNG_NONE,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_NONE,
                                             .ew = &OP_EW_NONE}};
const OpInfo op_mamba_scan_bwd_info = {"mamba_scan_bwd",
                                       5,
                                       5,
                                       4,
                                       grads_like_inputs,
                                       scan_flops,
                                       NULL,
                                       {scan_bwd_cpu_f32, scan_bwd_cpu_f64},
                                       .facts = {.cost = COST_MAMBA_BWD,
                                                 .ceiling = CEIL_DRAM,
                                                 .inplace = INPLACE_NONE,
                                                 .rng = RNG_NONE,
                                                 .sink = SINK_NO,
                                                 .matmul = MATMUL_NONE,
                                                 .ew = &OP_EW_NONE}};
const OpInfo op_mamba_skip_info = {"mamba_skip",
                                   3,
                                   3,
                                   1,
                                   skip_infer,
                                   ops_flops_elementwise,
                                   m_backward,
                                   {skip_cpu_f32, skip_cpu_f64},
                                   .facts = {.cost = COST_MAMBA_FWD,
                                             .ceiling = CEIL_DRAM,
                                             .inplace = INPLACE_NONE,
                                             .rng = RNG_NONE,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_NONE,
                                             .ew = &OP_EW_NONE}};
const OpInfo op_mamba_skip_bwd_info = {"mamba_skip_bwd",
                                       4,
                                       4,
                                       3,
                                       grads_like_inputs,
                                       ops_flops_elementwise,
                                       NULL,
                                       {skip_bwd_cpu_f32, skip_bwd_cpu_f64},
                                       .facts = {.cost = COST_MAMBA_BWD,
                                                 .ceiling = CEIL_DRAM,
                                                 .inplace = INPLACE_NONE,
                                                 .rng = RNG_NONE,
                                                 .sink = SINK_NO,
                                                 .matmul = MATMUL_NONE,
                                                 .ew = &OP_EW_NONE}};
const OpInfo op_mamba_mixer_info = {"mamba_mixer",
                                    4,
                                    4,
                                    2,
                                    mixer_infer,
                                    mixer_flops,
                                    m_backward,
                                    {mixer_cpu_f32, mixer_cpu_f64},
                                    .facts = {.cost = COST_MAMBA_FWD,
                                              .ceiling = CEIL_GEMM,
                                              .inplace = INPLACE_NONE,
                                              .rng = RNG_NONE,
                                              .sink = SINK_NO,
                                              .matmul = MATMUL_NONE,
                                              .ew = &OP_EW_NONE},
                                    .bytes = ws_op_bytes};
const OpInfo op_mamba_mixer_bwd_info = {"mamba_mixer_bwd",
                                        5,
                                        5,
                                        5,
                                        grads_like_inputs,
                                        mixer_flops,
                                        NULL,
                                        {mixer_bwd_cpu_f32, mixer_bwd_cpu_f64},
                                        .facts = {.cost = COST_MAMBA_BWD,
                                                  .ceiling = CEIL_GEMM,
                                                  .inplace = INPLACE_NONE,
                                                  .rng = RNG_NONE,
                                                  .sink = SINK_NO,
                                                  .matmul = MATMUL_NONE,
                                                  .ew = &OP_EW_NONE},
                                        .bytes = ws_op_bytes};
const OpInfo op_mamba_gate_info = {"mamba_gate",
                                   2,
                                   2,
                                   1,
                                   gate_infer,
                                   ops_flops_elementwise,
                                   m_backward,
                                   {gate_cpu_f32, gate_cpu_f64},
                                   .facts = {.cost = COST_MAMBA_GATE_NORM,
                                             .ceiling = CEIL_DRAM,
                                             .inplace = INPLACE_NONE,
                                             .rng = RNG_NONE,
                                             .sink = SINK_NO,
                                             .matmul = MATMUL_NONE,
                                             .ew = &OP_EW_NONE}};
const OpInfo op_mamba_gate_bwd_info = {"mamba_gate_bwd",
                                       3,
                                       3,
                                       2,
                                       grads_like_inputs,
                                       ops_flops_elementwise,
                                       NULL,
                                       {gate_bwd_cpu_f32, gate_bwd_cpu_f64},
                                       .facts = {.cost = COST_MAMBA_GATE_NORM,
                                                 .ceiling = CEIL_DRAM,
                                                 .inplace = INPLACE_NONE,
                                                 .rng = RNG_NONE,
                                                 .sink = SINK_NO,
                                                 .matmul = MATMUL_NONE,
                                                 .ew = &OP_EW_NONE}};
const OpInfo op_mamba_group_norm_info = {"mamba_group_norm",
                                         2,
                                         2,
                                         1,
                                         gnorm_infer,
                                         gnorm_flops,
                                         m_backward,
                                         {gn_cpu_f32, gn_cpu_f64},
                                         .facts = {.cost = COST_MAMBA_GATE_NORM,
                                                   .ceiling = CEIL_DRAM,
                                                   .inplace = INPLACE_NONE,
                                                   .rng = RNG_NONE,
                                                   .sink = SINK_NO,
                                                   .matmul = MATMUL_NONE,
                                                   .ew = &OP_EW_NONE}};
const OpInfo op_mamba_group_norm_bwd_info = {"mamba_group_norm_bwd",
                                             3,
                                             3,
                                             3,
                                             grads_like_inputs,
                                             gnorm_flops,
                                             NULL,
                                             {gn_bwd_cpu_f32, gn_bwd_cpu_f64},
                                             .facts = {.cost = COST_MAMBA_GATE_NORM,
                                                       .ceiling = CEIL_DRAM,
                                                       .inplace = INPLACE_NONE,
                                                       .rng = RNG_NONE,
                                                       .sink = SINK_NO,
                                                       .matmul = MATMUL_NONE,
                                                       .ew = &OP_EW_NONE},
                                             .bytes = ws_op_bytes};

#else /* OPS_KERNEL_PASS */

static real K(m_sigmoid)(real v) { return 1 / (1 + REXP(-v)); }

/* ---- MAMBA_CONV ---- */
typedef struct {
  const real *x, *w, *b, *dy;
  real *y, *dx, *dw, *db;
  int64_t bt, t, c, k; /* bt = B*T rows */
} K(ConvArgs);

static real K(conv_pre)(const K(ConvArgs) * a, int64_t row, int64_t ch) {
  int64_t t = row % a->t;
  real s = a->b[ch];
  for (int64_t j = 0; j < a->k; j++) {
    int64_t src = t - (a->k - 1) + j;
    if (src >= 0) s += a->w[ch * a->k + j] * a->x[(row - t + src) * a->c + ch];
  }
  return s;
}

/* channels: each channel's rows, weights and bias are its own */
static void K(conv_range)(void *p, int64_t lo, int64_t hi) {
  const K(ConvArgs) *a = p;
  for (int64_t ch = lo; ch < hi; ch++)
    for (int64_t r = 0; r < a->bt; r++) {
      real v = K(conv_pre)(a, r, ch);
      a->y[r * a->c + ch] = v * K(m_sigmoid)(v);
    }
}

static void K(conv_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]], *w = &c->g->t[op->in[1]];
  K(ConvArgs)
  a = {.x = in[0],
       .w = in[1],
       .b = in[2],
       .y = out[0],
       .bt = x->shape[0] * x->shape[1],
       .t = x->shape[1],
       .c = x->shape[2],
       .k = w->shape[1]};
  c->parallel_for(c, a.c, K(conv_range), &a);
}

static void K(conv_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(ConvArgs) *a = p;
  for (int64_t ch = lo; ch < hi; ch++) {
    real db = 0;
    for (int64_t j = 0; j < a->k; j++)
      a->dw[ch * a->k + j] = 0;
    for (int64_t r = 0; r < a->bt; r++)
      a->dx[r * a->c + ch] = 0;
    for (int64_t r = 0; r < a->bt; r++) {
      int64_t t = r % a->t;
      real v = K(conv_pre)(a, r, ch), s = K(m_sigmoid)(v);
      real g = a->dy[r * a->c + ch] * s * (1 + v * (1 - s));
      db += g;
      for (int64_t j = 0; j < a->k; j++) {
        int64_t src = t - (a->k - 1) + j;
        if (src < 0) continue;
        int64_t xi = (r - t + src) * a->c + ch;
        a->dw[ch * a->k + j] += g * a->x[xi];
        a->dx[xi] += g * a->w[ch * a->k + j];
      }
    }
    a->db[ch] = db;
  }
}

static void K(conv_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[1]], *w = &c->g->t[op->in[2]];
  K(ConvArgs)
  a = {.dy = in[0],
       .x = in[1],
       .w = in[2],
       .b = in[3],
       .dx = out[0],
       .dw = out[1],
       .db = out[2],
       .bt = x->shape[0] * x->shape[1],
       .t = x->shape[1],
       .c = x->shape[2],
       .k = w->shape[1]};
  c->parallel_for(c, a.c, K(conv_bwd_range), &a);
}

/* ---- MAMBA_DT ---- */
typedef struct {
  const real *x, *bias, *dy;
  real *y, *dx, *db;
  int64_t rows, h;
} K(DtArgs);

static real K(softplus)(real v) { return v > 20 ? v : RLOG(1 + REXP(v)); }

static void K(dt_range)(void *p, int64_t lo, int64_t hi) {
  const K(DtArgs) *a = p;
  for (int64_t i = lo; i < hi; i++)
    a->y[i] = K(softplus)(a->x[i] + a->bias[i % a->h]);
}

static void K(dt_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  K(DtArgs) a = {.x = in[0], .bias = in[1], .y = out[0], .rows = ops_rows(x), .h = ops_last(x)};
  c->parallel_for(c, a.rows * a.h, K(dt_range), &a);
}

/* heads: dx of every row of the head, then its bias gradient in row order */
static void K(dt_bwd_range)(void *p, int64_t lo, int64_t hi) {
  const K(DtArgs) *a = p;
  for (int64_t h = lo; h < hi; h++) {
    real s = 0;
    for (int64_t r = 0; r < a->rows; r++) {
      int64_t i = r * a->h + h;
      real g = a->dy[i] * K(m_sigmoid)(a->x[i] + a->bias[h]);
      a->dx[i] = g;
      s += g;
    }
    a->db[h] = s;
  }
}

static void K(dt_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[1]];
  K(DtArgs)
  a = {.dy = in[0],
       .x = in[1],
       .bias = in[2],
       .dx = out[0],
       .db = out[1],
       .rows = ops_rows(x),
       .h = ops_last(x)};
  c->parallel_for(c, a.h, K(dt_bwd_range), &a);
}

/* ---- MAMBA_SCAN ---- */
typedef struct {
  const real *x, *dt, *alog, *bc, *dy;
  real *y, *dx, *ddt, *dalog, *dbc;
  real *da; /* backward: per (b, h) partial of d a_h, reduced in order after the parallel part */
  int64_t b, t, h, p, g, n;
} K(ScanArgs);

#define SX(a, b_, t_, h_) ((((b_) * (a)->t + (t_)) * (a)->h + (h_)) * (a)->p)
#define SDT(a, b_, t_, h_) (((b_) * (a)->t + (t_)) * (a)->h + (h_))
#define SB(a, b_, t_, g_) (((b_) * (a)->t + (t_)) * 2 * (a)->g * (a)->n + (g_) * (a)->n)
#define SC(a, b_, t_, g_) (SB(a, b_, t_, g_) + (a)->g * (a)->n)

/* (b, h) pairs: each head's recurrence is its own */
static void K(scan_range)(void *pv, int64_t lo, int64_t hi) {
  const K(ScanArgs) *a = pv;
  real *s = malloc((size_t)(a->p * a->n) * sizeof *s);
  if (!s) return;
  for (int64_t bh = lo; bh < hi; bh++) {
    int64_t b = bh / a->h, h = bh % a->h, g = h / (a->h / a->g);
    real av = -REXP(a->alog[h]);
    for (int64_t i = 0; i < a->p * a->n; i++)
      s[i] = 0;
    for (int64_t t = 0; t < a->t; t++) {
      real dt = a->dt[SDT(a, b, t, h)], da = REXP(dt * av);
      const real *x = a->x + SX(a, b, t, h), *bb = a->bc + SB(a, b, t, g), *cc = a->bc + SC(a, b, t, g);
      real *y = a->y + SX(a, b, t, h);
      for (int64_t pi = 0; pi < a->p; pi++) {
        real acc = 0;
        for (int64_t ni = 0; ni < a->n; ni++) {
          real v = da * s[pi * a->n + ni] + dt * x[pi] * bb[ni];
          s[pi * a->n + ni] = v;
          acc += v * cc[ni];
        }
        y[pi] = acc;
      }
    }
  }
  free(s);
}

static void K(scan_dims)(const CpuCtx *c, const Op *op, int xin, K(ScanArgs) * a) {
  const Tensor *x = &c->g->t[op->in[xin]];
  a->b = x->shape[0], a->t = x->shape[1], a->h = op->a.i[0], a->p = op->a.i[1], a->g = op->a.i[2],
  a->n = op->a.i[3];
}

static void K(scan_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(ScanArgs) a = {.x = in[0], .dt = in[1], .alog = in[2], .bc = in[3], .y = out[0]};
  K(scan_dims)(c, op, 0, &a);
  c->parallel_for(c, a.b * a.h, K(scan_range), &a);
}

/* (b, g) pairs: the heads of a group share B and C, so one worker owns the group's dB, dC; it
 * replays each head's states forward, then walks back:
 *   dC_t += y-grad^T S_t;  dS_t += dy_t C_t^T;  with S_t = e S_{t-1} + dt x_t B_t^T, e = exp(dt a):
 *   d dt += sum dS_t (a e S_{t-1} + x_t B_t^T);  d a += dt e sum dS_t S_{t-1};
 *   dx_t = dt dS_t B_t;  dB_t += dt dS_t^T x_t;  dS_{t-1} = e dS_t */
static void K(scan_bwd_range)(void *pv, int64_t lo, int64_t hi) {
  const K(ScanArgs) *a = pv;
  int64_t pn = a->p * a->n, hpg = a->h / a->g;
  real *st = malloc((size_t)((a->t + 1) * pn) * sizeof *st), *ds = malloc((size_t)pn * sizeof *ds);
  if (!st || !ds) {
    free(st), free(ds);
    return;
  }
  for (int64_t bg = lo; bg < hi; bg++) {
    int64_t b = bg / a->g, g = bg % a->g;
    for (int64_t t = 0; t < a->t; t++)
      for (int64_t i = 0; i < 2 * a->n; i++)
        a->dbc[SB(a, b, t, g) + (i < a->n ? i : a->g * a->n + i - a->n)] = 0;
    for (int64_t h = g * hpg; h < (g + 1) * hpg; h++) {
      real av = -REXP(a->alog[h]), dav = 0;
      for (int64_t i = 0; i < pn; i++)
        st[i] = 0, ds[i] = 0;
      for (int64_t t = 0; t < a->t; t++) { /* st[(t+1) pn ...] = S_t */
        real dt = a->dt[SDT(a, b, t, h)], e = REXP(dt * av);
        const real *x = a->x + SX(a, b, t, h), *bb = a->bc + SB(a, b, t, g);
        for (int64_t pi = 0; pi < a->p; pi++)
          for (int64_t ni = 0; ni < a->n; ni++)
            st[(t + 1) * pn + pi * a->n + ni] = e * st[t * pn + pi * a->n + ni] + dt * x[pi] * bb[ni];
      }
      for (int64_t t = a->t - 1; t >= 0; t--) {
        real dt = a->dt[SDT(a, b, t, h)], e = REXP(dt * av), ddt = 0, dae = 0;
        const real *x = a->x + SX(a, b, t, h), *bb = a->bc + SB(a, b, t, g), *cc = a->bc + SC(a, b, t, g);
        const real *dy = a->dy + SX(a, b, t, h), *s1 = st + (t + 1) * pn, *s0 = st + t * pn;
        real *dbb = a->dbc + SB(a, b, t, g), *dcc = a->dbc + SC(a, b, t, g), *dx = a->dx + SX(a, b, t, h);
        for (int64_t pi = 0; pi < a->p; pi++) {
          real dxp = 0;
          for (int64_t ni = 0; ni < a->n; ni++) {
            int64_t i = pi * a->n + ni;
            dcc[ni] += dy[pi] * s1[i];
            real d = ds[i] + dy[pi] * cc[ni];
            ddt += d * (av * e * s0[i] + x[pi] * bb[ni]);
            dae += d * s0[i];
            dxp += d * bb[ni];
            dbb[ni] += dt * d * x[pi];
            ds[i] = e * d;
          }
          dx[pi] = dt * dxp;
        }
        a->ddt[SDT(a, b, t, h)] = ddt;
        dav += dt * e * dae;
      }
      a->da[b * a->h + h] = dav;
    }
  }
  free(st), free(ds);
}

static void K(scan_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(ScanArgs)
  a = {.dy = in[0],
       .x = in[1],
       .dt = in[2],
       .alog = in[3],
       .bc = in[4],
       .dx = out[0],
       .ddt = out[1],
       .dalog = out[2],
       .dbc = out[3]};
  K(scan_dims)(c, op, 1, &a);
  a.da = malloc((size_t)(a.b * a.h) * sizeof *a.da);
  if (!a.da) return;
  c->parallel_for(c, a.b * a.g, K(scan_bwd_range), &a);
  for (int64_t h = 0; h < a.h; h++) { /* d A_log = d a * a, a = -exp(A_log) */
    real s = 0;
    for (int64_t b = 0; b < a.b; b++)
      s += a.da[b * a.h + h];
    a.dalog[h] = s * -REXP(a.alog[h]);
  }
  free(a.da);
}

#undef SX
#undef SDT
#undef SB
#undef SC

/* ---- MAMBA_SKIP ---- */
typedef struct {
  const real *y, *x, *d, *dout;
  real *out, *dy, *dx, *dd;
  int64_t rows, h, p;
} K(SkipArgs);

static void K(skip_range)(void *pv, int64_t lo, int64_t hi) {
  const K(SkipArgs) *a = pv;
  for (int64_t i = lo; i < hi; i++)
    a->out[i] = a->y[i] + a->d[(i / a->p) % a->h] * a->x[i];
}

static void K(skip_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *y = &c->g->t[op->in[0]];
  K(SkipArgs)
  a = {.y = in[0],
       .x = in[1],
       .d = in[2],
       .out = out[0],
       .rows = ops_rows(y),
       .h = op->a.i[0],
       .p = op->a.i[1]};
  c->parallel_for(c, tensor_numel(y), K(skip_range), &a);
}

/* heads: dy and dx of the head's columns in every row, then dD in row order */
static void K(skip_bwd_range)(void *pv, int64_t lo, int64_t hi) {
  const K(SkipArgs) *a = pv;
  for (int64_t h = lo; h < hi; h++) {
    real s = 0;
    for (int64_t r = 0; r < a->rows; r++)
      for (int64_t pi = 0; pi < a->p; pi++) {
        int64_t i = (r * a->h + h) * a->p + pi;
        a->dy[i] = a->dout[i];
        a->dx[i] = a->d[h] * a->dout[i];
        s += a->dout[i] * a->x[i];
      }
    a->dd[h] = s;
  }
}

static void K(skip_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *y = &c->g->t[op->in[1]];
  K(SkipArgs)
  a = {.dout = in[0],
       .y = in[1],
       .x = in[2],
       .d = in[3],
       .dy = out[0],
       .dx = out[1],
       .dd = out[2],
       .rows = ops_rows(y),
       .h = op->a.i[0],
       .p = op->a.i[1]};
  c->parallel_for(c, a.h, K(skip_bwd_range), &a);
}

/* ---- MAMBA_MIXER: the parts above, on scratch buffers ---- */
typedef struct {
  int64_t b, t, h, p, g, n, c, k, rows; /* c = H*P + 2*G*N channels, k conv taps, rows = B*T */
  real *w, *bias, *dtb, *alog, *d;      /* unpacked parameters */
  real *xc, *dt;                        /* conv output (B,T,C), dt (B,T,H) */
} K(MixBuf);

static void K(mix_free)(K(MixBuf) * m) {
  free(m->w), free(m->bias), free(m->dtb), free(m->alog), free(m->d), free(m->xc), free(m->dt);
}

/* Unpacks the parameters and runs the conv and dt; 0 or -1 when out of memory. */
static int K(mix_front)(const CpuCtx *c, const Op *op, void *const *in, int base, K(MixBuf) * m) {
  const Tensor *x = &c->g->t[op->in[base]], *cw = &c->g->t[op->in[base + 1]];
  *m = (K(MixBuf)){.b = x->shape[0],
                   .t = x->shape[1],
                   .h = op->a.i[0],
                   .p = op->a.i[1],
                   .g = op->a.i[2],
                   .n = op->a.i[3],
                   .c = x->shape[2],
                   .k = cw->shape[1] - 1,
                   .rows = x->shape[0] * x->shape[1]};
  m->w = malloc((size_t)(m->c * m->k) * sizeof(real)), m->bias = malloc((size_t)m->c * sizeof(real));
  m->dtb = malloc((size_t)m->h * sizeof(real)), m->alog = malloc((size_t)m->h * sizeof(real));
  m->d = malloc((size_t)m->h * sizeof(real));
  m->xc = malloc((size_t)(m->rows * m->c) * sizeof(real)),
  m->dt = malloc((size_t)(m->rows * m->h) * sizeof(real));
  if (!m->w || !m->bias || !m->dtb || !m->alog || !m->d || !m->xc || !m->dt) return K(mix_free)(m), -1;
  const real *cwp = in[base + 1], *sp = in[base + 3];
  for (int64_t ch = 0; ch < m->c; ch++) {
    for (int64_t j = 0; j < m->k; j++)
      m->w[ch * m->k + j] = cwp[ch * (m->k + 1) + j];
    m->bias[ch] = cwp[ch * (m->k + 1) + m->k];
  }
  for (int64_t h = 0; h < m->h; h++)
    m->dtb[h] = sp[h * 3], m->alog[h] = sp[h * 3 + 1], m->d[h] = sp[h * 3 + 2];
  K(ConvArgs)
  ca = {.x = in[base], .w = m->w, .b = m->bias, .y = m->xc, .bt = m->rows, .t = m->t, .c = m->c, .k = m->k};
  c->parallel_for(c, m->c, K(conv_range), &ca);
  K(DtArgs) da = {.x = in[base + 2], .bias = m->dtb, .y = m->dt, .rows = m->rows, .h = m->h};
  c->parallel_for(c, m->rows * m->h, K(dt_range), &da);
  return 0;
}

/* x' of (B,T,C) rows into (B,T,H*P), and BC' as the scan reads it: the scan and skip kernels index
 * x with stride H*P and BC with stride 2GN, so the conv output is split once into two buffers. */
static int K(mix_split)(const K(MixBuf) * m, real **x, real **bc) {
  int64_t hp = m->h * m->p, w2 = 2 * m->g * m->n;
  *x = malloc((size_t)(m->rows * hp) * sizeof(real)), *bc = malloc((size_t)(m->rows * w2) * sizeof(real));
  if (!*x || !*bc) return free(*x), free(*bc), -1;
  for (int64_t r = 0; r < m->rows; r++) {
    memcpy(*x + r * hp, m->xc + r * m->c, (size_t)hp * sizeof(real));
    memcpy(*bc + r * w2, m->xc + r * m->c + hp, (size_t)w2 * sizeof(real));
  }
  return 0;
}

static void K(mixer_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(MixBuf) m;
  real *x = NULL, *bc = NULL, *ys = NULL;
  if (K(mix_front)(c, op, in, 0, &m)) return;
  int64_t hp = m.h * m.p;
  if (K(mix_split)(&m, &x, &bc) == 0 && (ys = malloc((size_t)(m.rows * hp) * sizeof(real)))) {
    K(ScanArgs)
    sa = {.x = x,
          .dt = m.dt,
          .alog = m.alog,
          .bc = bc,
          .y = ys,
          .b = m.b,
          .t = m.t,
          .h = m.h,
          .p = m.p,
          .g = m.g,
          .n = m.n};
    c->parallel_for(c, m.b * m.h, K(scan_range), &sa);
    K(SkipArgs) ka = {.y = ys, .x = x, .d = m.d, .out = out[0], .rows = m.rows, .h = m.h, .p = m.p};
    c->parallel_for(c, m.rows * hp, K(skip_range), &ka);
  }
  free(x), free(bc), free(ys);
  K(mix_free)(&m);
}

/* dout -> (D skip) dx'_skip, dD; (scan) dx'_scan, ddt, dA_log, dBC; dx' = both; (dt) d dt_raw,
 * d dt_bias; (conv) d xBC, d w, d bias; the parameter gradients packed as their inputs. */
static void K(mixer_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(MixBuf) m;
  if (K(mix_front)(c, op, in, 1, &m)) return;
  int64_t hp = m.h * m.p, w2 = 2 * m.g * m.n;
  real *x = NULL, *bc = NULL;
  real *dxs = malloc((size_t)(m.rows * hp) * sizeof(real)),
       *dxk = malloc((size_t)(m.rows * hp) * sizeof(real));
  real *dbc = malloc((size_t)(m.rows * w2) * sizeof(real)),
       *ddt = malloc((size_t)(m.rows * m.h) * sizeof(real));
  real *dd = malloc((size_t)m.h * sizeof(real)), *dal = malloc((size_t)m.h * sizeof(real)),
       *ddtb = malloc((size_t)m.h * sizeof(real));
  real *dxc = malloc((size_t)(m.rows * m.c) * sizeof(real)), *dw = malloc((size_t)(m.c * m.k) * sizeof(real));
  real *db = malloc((size_t)m.c * sizeof(real)), *dys = malloc((size_t)(m.rows * hp) * sizeof(real));
  if (dxs && dxk && dbc && ddt && dd && dal && ddtb && dxc && dw && db && dys &&
      K(mix_split)(&m, &x, &bc) == 0) {
    const real *dout = in[0];
    K(SkipArgs)
    ka = {.dout = dout, .x = x, .d = m.d, .dy = dys, .dx = dxs, .dd = dd, .rows = m.rows, .h = m.h, .p = m.p};
    c->parallel_for(c, m.h, K(skip_bwd_range), &ka);
    K(ScanArgs)
    sa = {.dy = dout,
          .x = x,
          .dt = m.dt,
          .alog = m.alog,
          .bc = bc,
          .dx = dxk,
          .ddt = ddt,
          .dbc = dbc,
          .b = m.b,
          .t = m.t,
          .h = m.h,
          .p = m.p,
          .g = m.g,
          .n = m.n};
    sa.da = malloc((size_t)(m.b * m.h) * sizeof(real));
    if (sa.da) {
      c->parallel_for(c, m.b * m.g, K(scan_bwd_range), &sa);
      for (int64_t h = 0; h < m.h; h++) {
        real s = 0;
        for (int64_t b = 0; b < m.b; b++)
          s += sa.da[b * m.h + h];
        dal[h] = s * -REXP(m.alog[h]);
      }
      free(sa.da);
      for (int64_t r = 0; r < m.rows; r++) {
        for (int64_t i = 0; i < hp; i++)
          dxc[r * m.c + i] = dxs[r * hp + i] + dxk[r * hp + i];
        memcpy(dxc + r * m.c + hp, dbc + r * w2, (size_t)w2 * sizeof(real));
      }
      K(DtArgs)
      da = {.dy = ddt, .x = in[3], .bias = m.dtb, .dx = out[2], .db = ddtb, .rows = m.rows, .h = m.h};
      c->parallel_for(c, m.h, K(dt_bwd_range), &da);
      K(ConvArgs)
      ca = {.dy = dxc,
            .x = in[1],
            .w = m.w,
            .b = m.bias,
            .dx = out[0],
            .dw = dw,
            .db = db,
            .bt = m.rows,
            .t = m.t,
            .c = m.c,
            .k = m.k};
      c->parallel_for(c, m.c, K(conv_bwd_range), &ca);
      real *dcw = out[1], *dsp = out[3];
      for (int64_t ch = 0; ch < m.c; ch++) {
        for (int64_t j = 0; j < m.k; j++)
          dcw[ch * (m.k + 1) + j] = dw[ch * m.k + j];
        dcw[ch * (m.k + 1) + m.k] = db[ch];
      }
      for (int64_t h = 0; h < m.h; h++)
        dsp[h * 3] = ddtb[h], dsp[h * 3 + 1] = dal[h], dsp[h * 3 + 2] = dd[h];
    }
  }
  free(x), free(bc), free(dxs), free(dxk), free(dbc), free(ddt), free(dd), free(dal), free(ddtb), free(dxc),
      free(dw), free(db), free(dys);
  K(mix_free)(&m);
}

/* ---- MAMBA_GATE ---- */
typedef struct {
  const real *y, *z, *dout;
  real *out, *dy, *dz;
} K(GateArgs);

static void K(gate_range)(void *pv, int64_t lo, int64_t hi) {
  const K(GateArgs) *a = pv;
  for (int64_t i = lo; i < hi; i++)
    a->out[i] = a->y[i] * a->z[i] * K(m_sigmoid)(a->z[i]);
}

static void K(gate_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(GateArgs) a = {.y = in[0], .z = in[1], .out = out[0]};
  c->parallel_for(c, tensor_numel(&c->g->t[op->in[0]]), K(gate_range), &a);
}

static void K(gate_bwd_range)(void *pv, int64_t lo, int64_t hi) {
  const K(GateArgs) *a = pv;
  for (int64_t i = lo; i < hi; i++) {
    real s = K(m_sigmoid)(a->z[i]);
    a->dy[i] = a->dout[i] * a->z[i] * s;
    a->dz[i] = a->dout[i] * a->y[i] * s * (1 + a->z[i] * (1 - s));
  }
}

static void K(gate_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  K(GateArgs) a = {.dout = in[0], .y = in[1], .z = in[2], .dy = out[0], .dz = out[1]};
  c->parallel_for(c, tensor_numel(&c->g->t[op->in[1]]), K(gate_bwd_range), &a);
}

/* ---- MAMBA_GROUP_NORM ---- */
typedef struct {
  const real *x, *w, *dout;
  real *out, *dx, *dw;
  int64_t rows, c, gs; /* gs = c / G, the group width */
  real eps;
} K(GnArgs);

/* 1/rms of group [j0, j0 + gs) of row r */
static real K(gn_rstd)(const K(GnArgs) * a, int64_t r, int64_t j0) {
  real ss = 0;
  for (int64_t j = j0; j < j0 + a->gs; j++)
    ss += a->x[r * a->c + j] * a->x[r * a->c + j];
  return 1 / RSQRT(ss / (real)a->gs + a->eps);
}

static void K(gn_range)(void *pv, int64_t lo, int64_t hi) {
  const K(GnArgs) *a = pv;
  for (int64_t r = lo; r < hi; r++)
    for (int64_t j0 = 0; j0 < a->c; j0 += a->gs) {
      real rs = K(gn_rstd)(a, r, j0);
      for (int64_t j = j0; j < j0 + a->gs; j++)
        a->out[r * a->c + j] = a->x[r * a->c + j] * rs * a->w[j];
    }
}

static void K(gn_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[0]];
  K(GnArgs)
  a = {.x = in[0], .w = in[1], .out = out[0], .rows = ops_rows(x), .c = ops_last(x), .eps = (real)op->a.f[0]};
  a.gs = a.c / op->a.i[0];
  c->parallel_for(c, a.rows, K(gn_range), &a);
}

/* rows, per group: dx = rstd (g - x rstd^2 mean(g x)) with g = dout w */
static void K(gn_bwd_rows)(void *pv, int64_t lo, int64_t hi) {
  const K(GnArgs) *a = pv;
  for (int64_t r = lo; r < hi; r++)
    for (int64_t j0 = 0; j0 < a->c; j0 += a->gs) {
      real rs = K(gn_rstd)(a, r, j0), sgx = 0;
      for (int64_t j = j0; j < j0 + a->gs; j++)
        sgx += a->dout[r * a->c + j] * a->w[j] * a->x[r * a->c + j];
      sgx /= (real)a->gs;
      for (int64_t j = j0; j < j0 + a->gs; j++) {
        int64_t i = r * a->c + j;
        a->dx[i] = rs * (a->dout[i] * a->w[j] - a->x[i] * rs * rs * sgx);
      }
    }
}

/* columns: dw_j = sum over rows of dout x rstd, rows in order */
static void K(gn_bwd_cols)(void *pv, int64_t lo, int64_t hi) {
  const K(GnArgs) *a = pv;
  for (int64_t j = lo; j < hi; j++) {
    real s = 0;
    for (int64_t r = 0; r < a->rows; r++)
      s += a->dout[r * a->c + j] * a->x[r * a->c + j] * K(gn_rstd)(a, r, j - j % a->gs);
    a->dw[j] = s;
  }
}

static void K(gn_bwd_cpu)(const CpuCtx *c, const Op *op, void *const *in, void *const *out) {
  const Tensor *x = &c->g->t[op->in[1]];
  K(GnArgs)
  a = {.dout = in[0],
       .x = in[1],
       .w = in[2],
       .dx = out[0],
       .dw = out[1],
       .rows = ops_rows(x),
       .c = ops_last(x),
       .eps = (real)op->a.f[0]};
  a.gs = a.c / op->a.i[0];
  c->parallel_for(c, a.rows, K(gn_bwd_rows), &a);
  c->parallel_for(c, a.c, K(gn_bwd_cols), &a);
}

#endif
