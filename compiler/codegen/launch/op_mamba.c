/* op_mamba.c — dispatch of the Mamba-2 mixer's ops (ir/ops/mamba.c) that the lowering builds
 * (compiler/lower/lower_mamba.c): MAMBA_MIXER (conv1d + SiLU, dt softplus, the chunked SSD scan and the
 * D skip), MAMBA_GATE and MAMBA_GROUP_NORM, and their backwards. Kernels in
 * kernels/mamba.cuh, geometry in kernels/launch.h.
 *
 * The mixer (kernels/mamba.cuh): a conv pre-pass into fp32, then sequential scans over the chunks,
 * a block a slice of one head's state (the forward's output; the backward's states entering and
 * gradients leaving each chunk), then the backward's chunk-parallel gradients. The conv output, the
 * backward's states and partial sums live in the op's workspace output (its last, ir/ops/mamba.c,
 * laid out by kernels/launch.h stepc_mamba_ws), a transient the memory plan places for the op
 * alone; so do the group norm backward's rstd and weight partials. Capturable (static grids, no
 * host sync) and deterministic: every sum in a fixed order, the group's B/C gradients summed over
 * its heads in head order inside one block. The mixer's parts run alone (MAMBA_CONV, DT, SCAN,
 * SKIP: the gradient-checked pieces of MAMBA_MIXER, which no lowering emits) have no row: the
 * executor refuses them by name. */
#include "codegen/launch/exec_internal.h"
#include "codegen/launch/launchers.h"
#include "kernels/launch.h"

/* Every input and the first `nout` outputs bf16 (the mixer's parameters are bf16 weights of a
 * bf16 recipe). */
static int bf16_operands(RtExec *x, const Op *op, int nout) {
  for (int i = 0; i < op->nin + nout; i++) {
    int t = i < op->nin ? op->in[i] : op->out[i - op->nin];
    if (rt_t(x, t)->dtype != DT_BF16)
      return rt_fail(x->d, "%s: %s is %s, the CUDA kernel takes bf16", op_name(op->kind), rt_t(x, t)->name,
                     dtype_name(rt_t(x, t)->dtype));
  }
  return RT_OK;
}

/* A weight gradient the compiler sank into its fp32 main gradient: the Mamba kernels write their
 * bf16 gradient tensors (ir/ops/mamba.c's ops are not sinkable), so a sink here is a plan this
 * executor does not run. */
static int no_sink(RtExec *x, const Op *op) {
  for (int i = 0; i < op->nout; i++)
    if (x->fz->sink[op->out[i]] >= 0)
      return rt_fail(
          x->d, "%s: its gradient %s is accumulated into a main gradient, which the CUDA kernel does not do",
          op_name(op->kind), rt_t(x, op->out[i])->name);
  return RT_OK;
}

/* The mixer's sizes from its attributes and xBC / conv shapes; RT_OK or a refusal naming the
 * limit the kernels have. */
typedef struct {
  int B, T, H, P, G, N, K, C;
} MixDims;

static MixDims mix_sizes(const Graph *g, const Op *op, int xin) {
  const Tensor *xbc = &g->t[op->in[xin]], *cw = &g->t[op->in[xin + 1]];
  return (MixDims){.B = (int)xbc->shape[0],
                   .T = (int)xbc->shape[1],
                   .H = (int)op->a.i[0],
                   .P = (int)op->a.i[1],
                   .G = (int)op->a.i[2],
                   .N = (int)op->a.i[3],
                   .K = (int)cw->shape[1] - 1,
                   .C = (int)xbc->shape[2]};
}

static StepcMambaWs mix_ws(const MixDims *m, int backward) {
  return stepc_mamba_ws(m->B, m->T, m->H, m->P, m->N, m->G, m->C, m->K, backward);
}

/* The op's workspace (its last output): fp32 and at least the `floats` words its kernels lay out.
 * The step image's check holds the output to ir/ops/mamba.c's shape rule, which reads the same
 * layout; this guards a graph built some other way. */
static int op_ws(RtExec *x, const Op *op, long floats, CUdeviceptr *ws) {
  const Tensor *t = rt_t(x, op->out[op->nout - 1]);
  if (op->nout != op_info(op->kind)->nout || t->role != ROLE_WORKSPACE || t->dtype != DT_F32 ||
      tensor_numel(t) < floats)
    return rt_fail(x->d, "%s: its last output %s is not the %ld-word fp32 workspace its kernels take",
                   op_name(op->kind), t->name, floats);
  *ws = rt_out(x, op, op->nout - 1);
  return RT_OK;
}

static int mix_dims(RtExec *x, const Op *op, int xin, MixDims *m) {
  *m = mix_sizes(x->g, op, xin);
  const char *why = m->K > STEPC_MAMBA_KMAX          ? "the conv kernel has at most 8 taps"
                    : m->N > STEPC_MAMBA_NMAX        ? "the state dim is at most 128"
                    : m->P % 4 != 0 || m->N % 4 != 0 ? "the scans read head dim and state dim in fours"
                    : stepc_mamba_chunk_bwd_smem(m->P, m->N) > STEPC_MAMBA_SMEM_MAX
                        ? "head dim x state dim too large for the chunk kernels' shared memory"
                        : NULL;
  if (why)
    return rt_fail(x->d, "%s (heads %d, head dim %d, groups %d, state %d, conv %d): %s", op_name(op->kind),
                   m->H, m->P, m->G, m->N, m->K, why);
  return RT_OK;
}

static CUdeviceptr ws_at(CUdeviceptr ws, long floats) { return ws + (CUdeviceptr)(4 * floats); }

/* The conv output u = silu(conv(xBC)) (B, T, C) fp32 into the workspace at `u`. */
static int mix_conv(RtExec *x, const Op *op, const MixDims *m, CUdeviceptr u, int xin) {
  return rt_launch_mamba_conv_forward(
      x->d,
      rt_dim((unsigned)((m->C + 255) / 256),
             (unsigned)((m->T + STEPC_MAMBA_CONV_ROWS - 1) / STEPC_MAMBA_CONV_ROWS), (unsigned)m->B),
      256, 0, u, rt_in(x, op, xin), rt_in(x, op, xin + 1), m->T, m->C, m->K);
}

static unsigned mix_slices(const MixDims *m) {
  return (unsigned)((m->P + STEPC_MAMBA_SLICE - 1) / STEPC_MAMBA_SLICE);
}

/* MAMBA_MIXER in (xBC (B,T,C), conv (C,K+1), dt_raw (B,T,H), ssm (H,3)) out (y (B,T,H*P), workspace):
 * the conv, the chunks' C.B, then one scan over the chunks for every head (the forward keeps no
 * states). */
static int rt_op_mamba_mixer(RtExec *x, const Op *op) {
  MixDims m;
  CUdeviceptr ws;
  if (bf16_operands(x, op, 1) || mix_dims(x, op, 0, &m)) return RT_ERROR;
  StepcMambaWs w = mix_ws(&m, 0);
  if (op_ws(x, op, w.floats, &ws) || mix_conv(x, op, &m, ws_at(ws, w.u), 0)) return RT_ERROR;
  unsigned nc = (unsigned)((m.T + STEPC_MAMBA_CHUNK - 1) / STEPC_MAMBA_CHUNK);
  if (rt_launch_mamba_chunk_cb(x->d, rt_dim(nc, (unsigned)m.G, (unsigned)m.B), STEPC_MAMBA_THREADS,
                               stepc_mamba_cb_smem(m.N), ws_at(ws, w.cb), ws_at(ws, w.u), m.T, m.H, m.P, m.G,
                               m.N))
    return RT_ERROR;
  return rt_launch_mamba_scan_forward(x->d, rt_dim(mix_slices(&m), (unsigned)m.H, (unsigned)m.B),
                                      STEPC_MAMBA_THREADS, stepc_mamba_scan_smem(m.N), rt_out(x, op, 0),
                                      ws_at(ws, w.u), ws_at(ws, w.cb), rt_in(x, op, 2), rt_in(x, op, 3), m.T,
                                      m.H, m.P, m.G, m.N);
}

/* MAMBA_MIXER_BWD in (dy, xBC, conv, dt_raw, ssm) out (dxBC, dconv, ddt_raw, dssm, workspace): the
 * conv into gpre's place, then per pass of groups the states both ways and the chunk gradients
 * (which overwrite the pass's channels of u with theirs), then the conv's and the parameters'
 * gradients. */
static int rt_op_mamba_mixer_bwd(RtExec *x, const Op *op) {
  MixDims m;
  CUdeviceptr ws;
  if (bf16_operands(x, op, 4) || no_sink(x, op) || mix_dims(x, op, 1, &m)) return RT_ERROR;
  StepcMambaWs w = mix_ws(&m, 1);
  unsigned nc = (unsigned)((m.T + STEPC_MAMBA_CHUNK - 1) / STEPC_MAMBA_CHUNK);
  int segs = stepc_mamba_segs(m.T), nparam = m.C * (m.K + 1) + 3 * m.H;
  if (op_ws(x, op, w.floats, &ws) || mix_conv(x, op, &m, ws_at(ws, w.u), 1)) return RT_ERROR;
  for (int g0 = 0; g0 < m.G; g0 += w.gpp)
    if (rt_launch_mamba_scan_states(x->d, rt_dim(mix_slices(&m), (unsigned)w.hp, (unsigned)(2 * m.B)),
                                    STEPC_MAMBA_THREADS, stepc_mamba_scan_states_smem(m.N), ws_at(ws, w.st),
                                    ws_at(ws, w.dst), ws_at(ws, w.u), rt_in(x, op, 0), rt_in(x, op, 3),
                                    rt_in(x, op, 4), m.T, m.H, m.P, m.G, m.N, g0) ||
        rt_launch_mamba_chunk_backward(x->d, rt_dim(nc, (unsigned)w.gpp, (unsigned)m.B), STEPC_MAMBA_THREADS,
                                       stepc_mamba_chunk_bwd_smem(m.P, m.N), ws_at(ws, w.gpre),
                                       rt_out(x, op, 2), ws_at(ws, w.hpart), ws_at(ws, w.st),
                                       ws_at(ws, w.dst), rt_in(x, op, 0), rt_in(x, op, 1), rt_in(x, op, 2),
                                       rt_in(x, op, 3), rt_in(x, op, 4), m.T, m.H, m.P, m.G, m.N, m.K, g0))
      return RT_ERROR;
  if (rt_launch_mamba_conv_backward(x->d,
                                    rt_dim((unsigned)((m.C + 255) / 256), (unsigned)segs, (unsigned)m.B), 256,
                                    0, rt_out(x, op, 0), ws_at(ws, w.cpart), ws_at(ws, w.gpre),
                                    rt_in(x, op, 1), rt_in(x, op, 2), m.T, m.C, m.K, segs))
    return RT_ERROR;
  return rt_launch_mamba_param_grads(x->d, rt_dim1((unsigned)((nparam + 255) / 256)), 256, 0,
                                     rt_out(x, op, 1), rt_out(x, op, 3), ws_at(ws, w.cpart),
                                     ws_at(ws, w.hpart), rt_in(x, op, 4), m.B, m.T, m.H, m.C, m.K, segs);
}

/* MAMBA_GATE in (y, z) out (y silu(z)); MAMBA_GATE_BWD in (dout, y, z) out (dy, dz) */
static int rt_op_mamba_gate(RtExec *x, const Op *op) {
  if (bf16_operands(x, op, op->nout)) return RT_ERROR;
  long n = (long)rt_numel(x, op->in[0]);
  return rt_launch_mamba_gate_forward(x->d, rt_grid_stride(x->d, n), 256, 0, rt_out(x, op, 0),
                                      rt_in(x, op, 0), rt_in(x, op, 1), n);
}

static int rt_op_mamba_gate_bwd(RtExec *x, const Op *op) {
  if (bf16_operands(x, op, op->nout)) return RT_ERROR;
  long n = (long)rt_numel(x, op->in[0]);
  return rt_launch_mamba_gate_backward(x->d, rt_grid_stride(x->d, n), 256, 0, rt_out(x, op, 0),
                                       rt_out(x, op, 1), rt_in(x, op, 0), rt_in(x, op, 1), rt_in(x, op, 2),
                                       n);
}

/* MAMBA_GROUP_NORM in (x (..., C), w (C)) out (y); i[0] = G, f[0] = eps. A warp per (row, group). */
static int rt_op_mamba_group_norm(RtExec *x, const Op *op) {
  if (bf16_operands(x, op, op->nout)) return RT_ERROR;
  const Tensor *t = rt_t(x, op->in[0]);
  long rows = (long)ops_rows(t);
  int C = (int)ops_last(t), G = (int)op->a.i[0];
  return rt_launch_mamba_group_norm_forward(x->d, rt_dim1((unsigned)((rows * G + 7) / 8)), 256, 0,
                                            rt_out(x, op, 0), rt_in(x, op, 0), rt_in(x, op, 1), rows, C, G,
                                            (float)op->a.f[0]);
}

/* MAMBA_GROUP_NORM_BWD in (dout, x, w) out (dx, dw, workspace): dx a warp per (row, group), dw in
 * row segments (into the fp32 main gradient where the compiler sank it, else the bf16 dw). */
static int rt_op_mamba_group_norm_bwd(RtExec *x, const Op *op) {
  int sink = x->fz->sink[op->out[1]];
  if (bf16_operands(x, op, sink >= 0 ? 1 : 2)) return RT_ERROR;
  const Tensor *t = rt_t(x, op->in[1]);
  long rows = (long)ops_rows(t);
  int C = (int)ops_last(t), G = (int)op->a.i[0],
      segs = stepc_mamba_segs((int)(rows < 1 << 30 ? rows : 1 << 30));
  float eps = (float)op->a.f[0];
  CUdeviceptr ws;
  if (op_ws(x, op, stepc_mamba_gnorm_ws(rows, C, G), &ws)) return RT_ERROR;
  CUdeviceptr rstd = ws, part = ws_at(ws, stepc_mamba_align(rows * G));
  if (rt_launch_mamba_group_norm_backward_input(x->d, rt_dim1((unsigned)((rows * G + 7) / 8)), 256, 0,
                                                rt_out(x, op, 0), rstd, rt_in(x, op, 0), rt_in(x, op, 1),
                                                rt_in(x, op, 2), rows, C, G, eps) ||
      rt_launch_mamba_group_norm_backward_weight(x->d, rt_dim((unsigned)((C + 255) / 256), (unsigned)segs, 1),
                                                 256, 0, part, rt_in(x, op, 0), rt_in(x, op, 1), rstd, rows,
                                                 C, G, segs))
    return RT_ERROR;
  return rt_launch_mamba_group_norm_weight_reduce(x->d, rt_dim1((unsigned)((C + 255) / 256)), 256, 0,
                                                  sink < 0 ? rt_out(x, op, 1) : 0,
                                                  sink >= 0 ? rt_exec_ptr(x, sink) : 0, part, C, segs);
}

/* This family's rows of the per-kind launch table (exec.c gathers every family's). */
const RtOpRow RT_OPS_MAMBA[] = {
    {OP_MAMBA_MIXER, rt_op_mamba_mixer},
    {OP_MAMBA_MIXER_BWD, rt_op_mamba_mixer_bwd},
    {OP_MAMBA_GATE, rt_op_mamba_gate},
    {OP_MAMBA_GATE_BWD, rt_op_mamba_gate_bwd},
    {OP_MAMBA_GROUP_NORM, rt_op_mamba_group_norm},
    {OP_MAMBA_GROUP_NORM_BWD, rt_op_mamba_group_norm_bwd},
    {OP_COUNT, NULL},
};
