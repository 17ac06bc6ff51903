/* memrank.c — per-rank memory for a parallel layout, from the single-rank plan by sharding rules
 * per tensor (plan.h). The single-rank graph is planned exactly (memplan.c); a rank's numbers
 * divide each tensor by how Megatron shards it and restrict the plan to the rank's stage:
 *
 *   params      column/row-parallel linears (linear_qkv, linear_proj, linear_fc1, linear_fc2,
 *               MLA projections, experts' fc1/fc2, Mamba's in_proj/out_proj and the mixer's
 *               per-head parameters) and the vocab-parallel embedding and output
 *               layer are split over TP (experts over EP x ETP); norms and position embeddings
 *               are replicated. Main grads follow their param; master weights and Adam moments
 *               too, and are further split over DP with the distributed optimizer (experts over
 *               the expert-DP), Megatron's 6 + 12/DP bytes per param instead of 18.
 *   activations an op between a column-parallel linear and the next row-parallel one works on
 *               TP-split heads/columns (q, k, v, scores, fc1 and activation outputs, logits);
 *               the rest (norms, residuals, dropouts) is split over TP only with sequence
 *               parallelism. Every activation is split over CP (its sequence dimension).
 *               Gradients of activations follow their tensor.
 *   stages      layer l sits on the pipeline stage that builds it, by Megatron's split (pipesplit.c:
 *               even over PP x VPP chunks, or num_layers_in_first/last_pipeline_stage on the first
 *               and last stage and the rest even); the embedding on the first stage, the final
 *               norm, output layer and loss on the last (a tied embedding on both).
 *   in flight   1F1B keeps min(PP - stage, micro-batches) micro-batches' saved activations on a
 *               stage; interleaved, (PP - stage - 1) x 2 + (VPP - 1) x PP + 1 chunk passes
 *               (Megatron's 1 + (PP-1)/(PP VPP) factor on the first stage). The stage's peak is
 *               its planned one-micro-batch peak plus (in flight - 1) x its saved activations.
 *   precision   the bytes of main grads, master weights and moments are Megatron's, from the
 *               Spec's ddp/optimizer precision fields (elem_bytes below), not the single-rank
 *               graph's fp32: the graph is stepc's own step, the per-rank report Megatron's job.
 *   fp8         with model.fp8 set, what Transformer Engine keeps (fp8_scan below): each linear of
 *               a transformer layer saves its input for the wgrad as an fp8 copy (1 byte), and the
 *               bf16 tensor dies after its last forward reader unless another backward op reads
 *               it too; each such linear's weight has an fp8 copy and transpose (2 bytes per
 *               element) for the whole step, beside the bf16 param or, with model.fp8_param,
 *               instead of it (fp8_weight_bytes).
 *   loss        Megatron's cross entropy keeps an fp32 tensor of the logits' shape from the loss's
 *               forward to its backward, on the last stage, unless it is TE's before 2.18
 *               (megatron_loss_bytes).
 *   step        Megatron's optimizer step holds the persistent state plus an fp32 copy of each main
 *               grad (shard) that is not fp32 already (megatron_grad_copy_bytes), and with torch's
 *               AdamW (a local-spec job) the square root of one param group's second moment
 *               (torch_adamw, adam_group); a rank's max allocated is the larger of that and its
 *               forward/backward peak. The first iteration's forward/backward runs before the Adam
 *               moments exist, and its step creates them group by group (first_iteration).
 *   logged      what Megatron prints after iterations 1 and 2, which run before TE captures its
 *               graphs: the step planned without static graph buffers (memrank_readings).
 *   shared      with moe_shared_expert_overlap under sequence parallelism, the shared experts'
 *               fc1 keeps its own all-gathered input (shared_gather_add).
 *   workspace   cuBLAS's 32 MiB Hopper workspace, cuDNN attention's, and TE's four grouped-GEMM
 *               workspaces when the experts use grouped GEMM (te_workspace_bytes).
 *   local       a Megatron job with the local layer spec (transformer_impl "local"): its unfused
 *               DotProductAttention's tensors replace stepc's score-sized ones, its global memory
 *               buffer, GQA expansion and unfused GLU (local_attention_add, global_buffer_bytes).
 *   which job   the report is Megatron's job when spec_megatron_job (train.megatron_job; null: world
 *               size > 1), else stepc's own step, which none of Megatron's terms touch.
 *   outside     what the rank holds outside PyTorch's caching allocator, beside max allocated:
 *               HybridEP's buffers (hybridep_buffer_bytes) and NCCL's ring buffers
 *               (nccl_ring_buffer_bytes); device_total adds them for the fits verdict.
 * The tensors that cross a stage boundary are counted on the stage that makes them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "passes/pipesplit.h"
#include "plan/plan.h"

typedef struct {
  const Graph *g;
  const Spec *s;
  int tp, pp, vpp, cp, ep, etp, dp, edp, nl;
  bool sp;
  PipeSplit split; /* which layers each stage builds */
} Lay;

static bool has(const char *name, const char *part) { return strstr(name, part) != NULL; }

static bool col_parallel(const char *n) {
  return has(n, "linear_qkv") || has(n, "linear_fc1") || has(n, "output_layer") || has(n, "linear_q_proj") ||
         has(n, "linear_q_up_proj") || has(n, "linear_kv_up_proj") || has(n, "word_embeddings") ||
         has(n, "mixer.in_proj");
}
static bool row_parallel(const char *n) {
  return has(n, "linear_proj") || has(n, "linear_fc2") || has(n, "mixer.out_proj");
}
/* Megatron's MambaMixer splits its heads (and groups) over TP: the conv, dt_bias, A_log, D and
 * the gated norm's weight are per channel or per head of the rank (mamba_mixer.py,
 * nheads_local_tp, d_inner_local_tp). */
static bool mamba_tp(const char *n) { return has(n, ".mixer.") && !has(n, "in_proj") && !has(n, "out_proj"); }
static bool expert(const char *n) { return has(n, ".experts."); }

static double dtype_name_bytes(const char *d) {
  return strcmp(d, "fp8") == 0 ? 1 : strcmp(d, "bf16") == 0 || strcmp(d, "fp16") == 0 ? 2 : 4;
}

/* Bytes per element Megatron keeps for a persistent tensor of the optimizer side; every other
 * tensor keeps its graph dtype. One place for Megatron's precision choices:
 *   main grads  the DDP gradient buffer: fp32 when ddp.grad_reduce_in_fp32, else the param dtype
 *               (megatron/core/distributed/distributed_data_parallel.py, DistributedDataParallel
 *               .__init__: grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype). The
 *               precision-aware optimizer reads that buffer as its decoupled grad.
 *   masters     without the precision-aware optimizer the distributed optimizer (or
 *               Float16Optimizer) keeps fp32 copies (distrib_optimizer.py,
 *               _build_model_and_main_param_groups: shard_model_param.clone().float()). With it,
 *               TE's FusedAdam holds them at main_params_dtype (optimizer/__init__.py passes
 *               master_weight_dtype), and with store_param_remainders (TE >= 2.1; Megatron passes
 *               OptimizerConfig.store_param_remainders, default true) an fp32 master of a bf16
 *               param is stored as its 16 low bits: 2 bytes.
 *   moments     exp_avg / exp_avg_sq: fp32 (torch.zeros_like of the fp32 main param), or
 *               exp_avg_dtype / exp_avg_sq_dtype under the precision-aware optimizer (FusedAdam's
 *               exp_avg_dtype, exp_avg_sq_dtype). fp8 moments' per-tensor scales are not counted.
 * Megatron's OptimizerConfig.__post_init__ rejects non-fp32 dtypes without the precision-aware
 * optimizer (STEPC-45), so they are read only with it. */
static double grad_bytes(const Lay *L, const Tensor *param) {
  return L->s->ddp.grad_reduce_in_fp32 ? 4 : param ? (double)dtype_size(param->dtype) : 4;
}

static double elem_bytes(const Lay *L, const Tensor *x) {
  const SpecOptimizer *o = &L->s->optimizer;
  const Tensor *p = x->of >= 0 ? &L->g->t[x->of] : NULL;
  double pb = p ? (double)dtype_size(p->dtype) : 4;
  bool aware = o->use_precision_aware_optimizer;
  switch (x->role) {
  case ROLE_GRAD: return grad_bytes(L, p);
  case ROLE_MASTER:
    if (!aware) return 4;
    if (strcmp(o->main_params_dtype, "fp32") == 0)
      return o->store_param_remainders && pb == 2 && p && p->dtype == DT_BF16 ? 2 : 4;
    return dtype_name_bytes(o->main_params_dtype);
  case ROLE_OPTIM: {
    if (!p) break; /* step, lr, norm scalars */
    size_t n = strlen(x->name);
    if (n > 11 && strcmp(x->name + n - 11, ".exp_avg_sq") == 0)
      return aware ? dtype_name_bytes(o->exp_avg_sq_dtype) : 4;
    if (n > 8 && strcmp(x->name + n - 8, ".exp_avg") == 0)
      return aware ? dtype_name_bytes(o->exp_avg_dtype) : 4;
    break;
  }
  default: break;
  }
  return (double)dtype_size(x->dtype);
}

/* What Transformer Engine keeps under fp8 (model.fp8 set), per tensor:
 *   - TE's Linear / GroupedLinear forward quantizes its input, and for the wgrad saves only that
 *     fp8 copy (transformer_engine/pytorch/module/linear.py, _Linear.forward: the saved inputmat
 *     is the quantized tensor with its row-wise usage dropped when only the wgrad needs it;
 *     grouped_linear.py likewise). The bf16 input then dies at its last forward reader, unless a
 *     backward op other than the wgrad also reads it (the attention output, which the fused
 *     attention keeps for its own backward): then both stay.
 *   - Their weights are quantized once per step and cached across micro-batches (linear.py,
 *     get_weight_workspace with cache_name "weight" whenever Megatron passes
 *     is_first_microbatch): an fp8 copy plus, on Hopper, its fp8 transpose for the dgrad.
 * fp8 covers the linears of the transformer layers only: Megatron's output layer and the MoE
 * router are not TE fp8 modules (output_layer is Megatron's ColumnParallelLinear; the router
 * computes in moe_router_dtype). Scaling state (one amax and scale per tensor) is not counted. */
typedef struct {
  int cast;     /* program point of the first fp8 linear reading it (-1: not an fp8 linear input) */
  int last_fwd; /* its last forward / replay reader */
  bool keep16;  /* a backward op other than a wgrad reads it too */
} Fp8Use;

static bool fp8_module(const Op *op) {
  if (op_info(op->kind)->facts.matmul != MATMUL_FWD) return false;
  const char *m = op->tags.module;
  return has(m, "layers.") && !has(m, "router") && !has(m, "output_layer");
}

/* Fills u (per tensor) and w (per tensor: 1 for the weight of an fp8 linear); pp[i] is the
 * program point of schedule item i. */
static void fp8_scan(const Graph *g, const Schedule *sc, const int *pp, Fp8Use *u, uint8_t *w) {
  for (int t = 0; t < g->nt; t++)
    u[t] = (Fp8Use){-1, -1, false}, w[t] = 0;
  for (int i = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    const Op *op = &g->op[sc->it[i].id];
    if (op->tags.phase != IR_PHASE_FORWARD && op->tags.phase != IR_PHASE_REPLAY) continue;
    for (int j = 0; j < op->nin; j++) {
      Fp8Use *x = &u[op->in[j]];
      if (j == 0 && fp8_module(op) && x->cast < 0) x->cast = pp[i];
      if (pp[i] > x->last_fwd) x->last_fwd = pp[i];
    }
    if (fp8_module(op)) w[op->in[1]] = 1;
  }
  for (int i = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    const Op *op = &g->op[sc->it[i].id];
    if (op->tags.phase != IR_PHASE_BACKWARD || op_info(op->kind)->facts.matmul == MATMUL_WGRAD) continue;
    for (int j = 0; j < op->nin; j++)
      u[op->in[j]].keep16 = true;
  }
}

/* Bytes per element an fp8 linear's weight adds to (or, with fp8 primary weights, holds instead
 * of) its bf16 param; one place for TE's weight copies:
 *   cached      without fp8_param, TE quantizes the bf16 weight once per step and caches the fp8
 *               copy and, on Hopper, its transpose for the dgrad (linear.py, _Linear.forward:
 *               quantize_weight with cache_name "weight" while Megatron passes
 *               is_first_microbatch): 2 bytes on top of the bf16 param.
 *   fp8_param   with fp8 primary weights (Megatron's fp8_param, set by Bridge's fp8_param_gather;
 *               TE's quantized_model_init) the param itself is a Float8Tensor: 1 byte of data in
 *               the DDP buffer, whose transpose TE builds on the param for the dgrad (linear.py,
 *               backward: weight_fp8.update_usage(columnwise_usage=True)) and keeps: 2 bytes in
 *               all, in place of the bf16 param, and its fp32 scale_inv (4 bytes a tensor — the
 *               routed experts' grouped weight (E, N, K) is E tensors in TE's GroupedLinear, E/EP a
 *               rank: nscales of them; stepc's step keeps as many: the report and the built plan
 *               agree, tests/api/fp8_param.sh, tests/api/fp8_moe.sh). The gradient buffer keeps the
 *               param's nominal dtype (bf16) and the distributed optimizer an fp32 master
 *               (distrib_optimizer.py, _build_model_and_main_param_groups), so elem_bytes is
 *               unchanged for them. */
static double fp8_weight_bytes(const Lay *L, double bf16_bytes, double nscales) {
  double fp8_and_transpose = bf16_bytes; /* numel x (1 byte of data + 1 of transpose) */
  return L->s->model.fp8_param ? fp8_and_transpose + 4 * nscales /* its fp32 scale_invs */
                               : bf16_bytes + fp8_and_transpose;
}

/* Which stage holds layer l: Megatron's split (pipesplit.c). */
static int layer_stage(const Lay *L, int l) { return pipe_layer_stage(&L->split, l); }

static int name_layer(const char *n) {
  const char *p = strstr(n, "layers.");
  return p ? atoi(p + 7) : -1;
}

/* Stage bits (bit s = on stage s) of a tensor; -1 = all stages. */
static int64_t tensor_stages(const Lay *L, int t) {
  const Graph *g = L->g;
  const Tensor *x = &g->t[t];
  if (x->of >= 0 && (x->role == ROLE_GRAD || x->role == ROLE_MASTER || x->role == ROLE_OPTIM))
    return tensor_stages(L, x->of);
  int p = x->producer;
  const char *n = x->name;
  int l = p >= 0 ? g->op[p].tags.layer : name_layer(n);
  if (l >= 0) return 1ll << layer_stage(L, l);
  if (p >= 0) n = g->op[p].tags.module;
  if (has(n, "word_embeddings") && L->s->model.share_embeddings_and_output_weights)
    return (1ll << 0) | (1ll << (L->pp - 1));
  if (has(n, "embedding") || has(n, "input.tokens")) return 1ll << 0;
  if (has(n, "final_layernorm") || has(n, "output_layer") || has(n, "loss") || has(n, "input.targets"))
    return 1ll << (L->pp - 1);
  return -1;
}

/* Activation TP split per tensor, propagated in op order (see the file comment). */
static void act_tp(const Lay *L, const Schedule *sc, uint8_t *tp_split) {
  const Graph *g = L->g;
  for (int i = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    const Op *op = &g->op[sc->it[i].id];
    bool in_split = false;
    for (int j = 0; j < op->nin; j++)
      if (!role_is_persistent(g->t[op->in[j]].role)) in_split |= tp_split[op->in[j]] != 0;
    for (int j = 0; j < op->nout; j++) {
      int t = op->out[j];
      const Tensor *x = &g->t[t];
      if (role_is_persistent(x->role)) continue;
      bool v;
      if (x->role == ROLE_ACT_GRAD && x->of >= 0 && !role_is_persistent(g->t[x->of].role))
        v = tp_split[x->of];
      /* by kind on purpose: which ops stand for Megatron's column-parallel linears, its vocab-parallel
       * loss and embedding is memrank's reading of Megatron's layout, not a fact of the op */
      else if (op->kind == OP_LINEAR)
        v = col_parallel(op->tags.module);
      else if (op->kind == OP_LINEAR_CROSS_ENTROPY)
        v = j == 2 && col_parallel(op->tags.module); /* the logits chunk */
      else if (op->kind == OP_CROSS_ENTROPY || op->kind == OP_EMBED || tensor_numel(x) == 1)
        v = false;
      else
        v = in_split && !row_parallel(op->tags.module);
      tp_split[t] = v;
    }
  }
}

static double shard(const Lay *L, const uint8_t *tp_split, int t) {
  const Tensor *x = &L->g->t[t];
  int q = x->of >= 0 && role_is_persistent(x->role) ? x->of : t;
  const char *n = L->g->t[q].name;
  if (role_is_persistent(x->role) ||
      (x->role == ROLE_ACT_GRAD && x->of >= 0 && L->g->t[x->of].role == ROLE_PARAM)) {
    if (x->role == ROLE_ACT_GRAD) n = L->g->t[x->of].name;
    if (x->role == ROLE_OPTIM && x->of < 0) return 1; /* step, lr, norm scalars */
    double f = expert(n) ? (double)L->ep * L->etp
               : ((col_parallel(n) || row_parallel(n)) && has(n, "weight")) || mamba_tp(n) ? L->tp
                                                                                           : 1;
    if (has(n, "word_embeddings") || (has(n, "output_layer") && has(n, "weight"))) f = L->tp;
    if (L->s->optimizer.use_distributed_optimizer && (x->role == ROLE_MASTER || x->role == ROLE_OPTIM))
      f *= expert(n) ? L->edp : L->dp;
    return f;
  }
  double f = tp_split[t] || L->sp ? L->tp : 1;
  if (tensor_numel(x) > 1) f *= L->cp;
  return f;
}

/* What Megatron's loss holds beyond stepc's own, on the stage with the output layer (GPTModel /
 * HybridModel -> LanguageModule.compute_language_model_loss; Megatron-LM 24bad8e677, the revision
 * the guide ran, and d98e8a64dd), from the loss's forward to the start of its backward; *from and
 * *to get those program points. The bf16 logits themselves (alive from the output layer to the end
 * of the loss's forward) and the bf16 gradient (from the loss's backward through the output
 * layer's) are what stepc's own plan already holds as its logits, which its loss backward
 * overwrites in place (fuse.c). On top of them, per loss path:
 *   native    the fused Megatron path (fusions/fused_cross_entropy.py): calculate_logits_max takes
 *             vocab_parallel_logits.float(), the rest works in place on that copy and saves it as
 *             the softmax (ctx.save_for_backward(exp_logits, ...)); backward turns it into the
 *             gradient in place and casts to bf16 (calculate_gradients: .to(torch.bfloat16)). An
 *             fp32 tensor of the logits' shape (per rank: tokens x vocab / TP, over CP).
 *   unfused   tensor_parallel/cross_entropy.py, _VocabParallelCrossEntropy: the same .float() copy
 *             and the same saved softmax.
 *   te        cross_entropy_loss_fusion with cross_entropy_fusion_impl "te": TE's
 *             parallel_cross_entropy, whose buffer depends on the release (model.
 *             transformer_engine_version). Up to 2.17 (v2.17.1: common/triton/cross_entropy.py,
 *             cross_entropy_kernel stores X_block.to(grad_dtype) at X_ptr; CrossEntropyFunction
 *             saves inp.detach() and returns it as the gradient) it writes the bf16 gradient into
 *             the logits in place: nothing beyond the logits. From 2.18 (TE 01bbe3eea, "Fix the
 *             numerical issue with the Fused CE loss", #3193: triton/cross_entropy.py
 *             cross_entropy_forward, grad_input = torch.empty_like(_input, dtype=torch.float32),
 *             saved and returned as the gradient, which autograd casts to bf16) it keeps an fp32
 *             tensor of the logits' shape, as native does. The guide's Bridge (600d069b) locks
 *             TE 2.17.1 (uv.lock).
 * The last stage runs a micro-batch's backward right after its forward (1F1B), so this tensor is
 * not multiplied by the micro-batches in flight. A step whose output layer runs in chunks
 * (LINEAR_CROSS_ENTROPY) holds one chunk of the bf16 logits: the other chunks' count here too.
 * Returns its bytes, 0 when the graph has no loss. Not applied to stepc's own step (not a Megatron job,
 * spec_megatron_job), whose report is stepc's own step (plan.activations). */
static bool megatron_loss_fp32_copy(const Spec *s) {
  const SpecModel *m = &s->model;
  bool te = m->cross_entropy_loss_fusion && strcmp(m->cross_entropy_fusion_impl, "te") == 0;
  return !te || spec_te_at_least(s, 2, 18);
}

static double megatron_loss_bytes(const Lay *L, const Schedule *sc, const uint8_t *tp_split, int *from,
                                  int *to) {
  const Graph *g = L->g;
  int logits = -1;
  double numel = 0, chunks = 1;
  *from = *to = -1;
  for (int i = 0, q = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    const Op *op = &g->op[sc->it[i].id];
    if (op->kind == OP_CROSS_ENTROPY && op->tags.phase == IR_PHASE_FORWARD)
      logits = op->in[0], numel = (double)tensor_numel(&g->t[logits]), *from = q;
    else if (op->kind == OP_LINEAR_CROSS_ENTROPY &&
             op->tags.phase == IR_PHASE_FORWARD) /* chunked: its chunk stands for them */
      logits = op->out[2], chunks = (double)op->a.i[0], numel = (double)tensor_numel(&g->t[logits]) * chunks,
      *from = q;
    else if (*from >= 0 && *to < 0 && op->tags.phase == IR_PHASE_BACKWARD)
      *to = q;
    q++;
  }
  if (logits < 0 || *to < 0) return 0;
  /* a chunked step's plan holds one chunk of the bf16 logits that Megatron's holds whole */
  double fp32_copy = megatron_loss_fp32_copy(L->s) ? 4 : 0;
  return numel * (fp32_copy + 2 * (chunks - 1) / chunks) / shard(L, tp_split, logits);
}

/* What Megatron's shared experts keep beyond stepc's own graph when they overlap the token
 * dispatch (model.moe_shared_expert_overlap) under sequence parallelism: SharedExpertMLP
 * .pre_forward_comm all-gathers the layer's sequence-parallel input into cached_fc1_input on the
 * side stream, and linear_fc1, whose TE parallel_mode the overlap sets to None (so TE does no
 * gather of its own), saves that full-sequence copy for its wgrad (Megatron-LM 24bad8e677, the
 * revision the guide ran, and d98e8a64dd: megatron/core/transformer/moe/shared_experts.py,
 * __init__ and pre_forward_comm; TE linear.py, _Linear.forward saves its input). Without the
 * overlap TE's column-parallel linear saves the rank's own sequence shard, the norm output that
 * stepc's plan already holds. So per MoE layer with shared experts: tokens x hidden of the input's
 * dtype (1 byte under fp8, TE's saved copy), not split over TP, from the last forward or replay
 * of the shared fc1 to its wgrad. Adds those intervals to diff (program points) and returns the
 * bytes alive at the last forward point in *saved. Not applied to stepc's own step (not a Megatron job
 * step), nor without TP > 1 and sequence parallelism (then the gather is the identity). */
static void shared_gather_add(const Lay *L, const Schedule *sc, int stage, int last_fwd, double *diff,
                              double *saved) {
  const Graph *g = L->g;
  const SpecModel *m = &L->s->model;
  if (!m->moe_shared_expert_overlap || !L->sp || L->tp < 2) return;
  int from_op[4096]; /* per layer: the program point of its shared fc1's last forward or replay */
  for (int l = 0; l < (int)(sizeof from_op / sizeof *from_op); l++)
    from_op[l] = -1;
  for (int i = 0, q = 0; i < sc->n; i++) {
    if (sc->it[i].kind != SCHED_OP) continue;
    const Op *op = &g->op[sc->it[i].id];
    int at = q++;
    if (!has(op->tags.module, "shared_experts.linear_fc1") || op->tags.layer < 0) continue;
    if (layer_stage(L, op->tags.layer) != stage) continue;
    int l = op->tags.layer;
    if (l >= (int)(sizeof from_op / sizeof *from_op)) continue;
    if (op->kind == OP_LINEAR && (op->tags.phase == IR_PHASE_FORWARD || op->tags.phase == IR_PHASE_REPLAY)) {
      from_op[l] = at;
      continue;
    }
    if (op->kind != OP_LINEAR_WGRAD || op->tags.phase != IR_PHASE_BACKWARD) continue;
    if (from_op[l] < 0 || op->nin < 2) continue;
    const Tensor *x = &g->t[op->in[1]]; /* LINEAR_WGRAD reads (dy, x) */
    double b = (double)tensor_numel(x) * (m->fp8[0] ? 1 : (double)dtype_size(x->dtype)) / L->cp;
    int s0 = from_op[l];
    diff[s0] += b, diff[at + 1] -= b;
    if (s0 <= last_fwd && at > last_fwd) *saved += b;
  }
}

/* The workspace of stepc's own Mamba kernels (ir/ops/mamba.c: chunk states at stepc's chunk of 32
 * rows, their gradients and partials). A Megatron job runs mamba_ssm's kernels, whose
 * intermediates differ and are not modelled here: its rank's bytes leave them out (stepc's own
 * step counts them, as its device plan does). */
static bool stepc_mamba_workspace(const Graph *g, int t) {
  int p = g->t[t].producer;
  if (g->t[t].role != ROLE_WORKSPACE || p < 0) return false;
  OpKind k = g->op[p].kind;
  return k == OP_MAMBA_MIXER || k == OP_MAMBA_MIXER_BWD || k == OP_MAMBA_GROUP_NORM_BWD;
}

/* Transformer Engine's workspaces for the experts' grouped GEMMs: get_cublas_workspace(...,
 * grouped_gemm=True) allocates one cuBLAS workspace per compute stream, tex.get_num_cublas_streams()
 * = 4, each get_cublas_workspace_size_bytes() = 32 MiB + 1 KiB on Hopper, through PyTorch's
 * allocator and cached for the run (TE e7c550c5 and v2.17.1 alike, pytorch/cpp_extensions/gemm.py;
 * reached from GroupedLinear's general_grouped_gemm). Counted on a multi-GPU layout whose experts use grouped
 * GEMM (model.moe_grouped_gemm); the single GEMM workspace is the 32 MiB counted beside it. */
static double te_grouped_workspace_bytes(const Spec *s) {
  const SpecModel *m = &s->model;
  if (!m->moe_grouped_gemm || m->num_moe_experts <= 0) return 0;
  return 4 * (32.0 * 1024 * 1024 + 1024);
}

/* The fp32 gradient copies Megatron's optimizer step holds, bytes per element of a main grad whose
 * buffer is `grad_elem_bytes` wide (0 when it makes none). Before the step, the distributed optimizer
 * copies each rank's shard of the gradient buffer into the .grad of its fp32 master
 * (distrib_optimizer.py, DistributedOptimizer._copy_model_grads_to_main_grads:
 * shard_main_param.grad = shard_model_grad.float(); Float16OptimizerWithFloat16Params does the same
 * for whole params, optimizer.py), and those copies live through optimizer.step() (TE's FusedAdam
 * reads p.grad) until the next iteration's optimizer.zero_grad(). `.float()` of an fp32 buffer
 * (ddp.grad_reduce_in_fp32) is the buffer itself; the precision-aware optimizer hands FusedAdam the
 * buffer as decoupled_grad when use_precision_aware_optimizer_no_fp8_or_ds_fp8 holds
 * (optimizer_config.py: non-fp32 masters, or no fp8, or delayed scaling): no copy in either case.
 * Megatron-LM d98e8a64dd, and 3758b54b2b (the revision Bridge pinned for the guide's Llama rows).
 * The copies are sharded as the masters are (elem_bytes's ROLE_MASTER, shard()). */
static double megatron_grad_copy_bytes(const Lay *L, double grad_elem_bytes) {
  const SpecOptimizer *o = &L->s->optimizer;
  const SpecModel *m = &L->s->model;
  bool decoupled = o->use_precision_aware_optimizer && (strcmp(o->main_params_dtype, "fp32") != 0 ||
                                                        !m->fp8[0] || strcmp(m->fp8_recipe, "delayed") == 0);
  return decoupled || grad_elem_bytes >= 4 ? 0 : 4;
}

/* HybridEP's own buffers, allocated by DeepEP outside PyTorch's allocator (cudaMalloc where the
 * GPUs have no fabric handles, as on H100: csrc/hybrid_ep/allocator/allocator.cu,
 * ExtendedMemoryAllocator::allocate), at the DeepEP commit Bridge 600d069b builds
 * (docker/Dockerfile.ci, DEEPEP_COMMIT=34152ae28f). Megatron (24bad8e677, moe/fused_a2a.py
 * init_hybrid_ep_buffer, called from HybridEPDispatch.forward with x.shape[-2:] of the first
 * dispatch) builds HybridEPBuffer(group = the ETP x EP group, hidden_dim, max_num_of_tokens_per_rank
 * = the tokens a rank dispatches, num_local_experts). With DeepEP's defaults (use_shared_buffer: the
 * dispatch side reuses the combine buffers) the rank allocates, for T = max(tokens, 512)
 * (hybrid_ep/config.cuh, Configurer) and M = T x R x N tokens in the worst case (buffer/intranode.cu,
 * NVLCoordinator::init; R ranks per NVLink domain, N = group / R domains):
 *   combine tokens   M x hidden x 2 bytes (allocate_combine_buffers, expert_input_token)
 *   combine probs    M x (local experts x R) x 4 (expert_input_prob)
 *   scaling factors  M x (hidden / 128) x 4, fp8 dispatch or not (allocate_dispatch_buffers)
 *   routing map      experts x T x R x N x 1 byte (extension/allgather.cu, allocate_ag_buffer)
 * Flags and the preprocessing scratch (a few KB) are left out; the peer ranks' buffers are mapped
 * by IPC and take no memory of this rank. R: 8, the GPUs of one HGX H100 NVLink domain, which
 * Bridge's Nemotron 3 Nano H100 recipe also sets (NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=8).
 * Counted only for the flex dispatcher with the hybridep backend. */
static double hybridep_buffer_bytes(const Lay *L) {
  const SpecModel *m = &L->s->model;
  if (m->num_moe_experts <= 0 || strcmp(m->moe_token_dispatcher_type, "flex") != 0 ||
      strcmp(m->moe_flex_dispatcher_backend, "hybridep") != 0)
    return 0;
  const int nvlink_domain = 8;
  int group = L->ep * L->etp, r = group < nvlink_domain ? group : nvlink_domain,
      nodes = group / r > 0 ? group / r : 1;
  double tokens = (double)m->seq_length * (double)L->s->train.micro_batch_size / L->cp / (L->sp ? L->tp : 1);
  if (tokens < 512) tokens = 512;
  double worst = tokens * r * nodes, hidden = (double)m->hidden_size;
  double local_experts = (double)m->num_moe_experts / L->ep;
  return worst * hidden * 2 + worst * local_experts * r * 4 + worst * (double)(m->hidden_size / 128) * 4 +
         (double)m->num_moe_experts * tokens * r * nodes;
}

/* NCCL's connection buffers: each ring channel of a communicator gives a rank one receive
 * connection holding one buffer per protocol (NCCL init.cc: DEFAULT_LL_BUFFSIZE 512 KiB,
 * DEFAULT_LL128_BUFFSIZE 120 x 640 x 8 steps x 8 = 4.69 MiB, DEFAULT_BUFFSIZE 4 MiB), allocated
 * through cuMem (NCCL_CUMEM_ENABLE, the default since 2.19) and so rounded to its 2 MiB granularity:
 * 10 MiB per channel (the 10485760-byte buffers NCCL's ALLOC log shows on H100, NVIDIA/nccl issue
 * 1685). The channel count is NCCL's topology search on the real machine, not in any source: 16 is
 * what NCCL logs for rings over HGX H100 nodes (NVIDIA/nccl issue 1453, "Channel 00/16"); it is a
 * reading, not a fit. Counted: one ring communicator for each group of more than one rank the
 * step reduces over (TP, CP, the data-parallel group, the EP x ETP group, the expert data-parallel
 * group). Not counted: tree and NVLS connections (NVLS is off in Bridge's Nemotron recipes,
 * NCCL_NVLS_ENABLE=0), the all-to-all and pipeline send/recv channels (one per peer), NCCL's
 * per-communicator state, communicators Megatron creates but never uses (NCCL connects at first
 * use). */
static double nccl_ring_buffer_bytes(const Lay *L) {
  const double per_channel = 10.0 * 1024 * 1024, channels = 16;
  int groups[] = {L->tp, L->cp, L->dp, L->s->model.num_moe_experts > 0 ? L->ep * L->etp : 1,
                  L->s->model.num_moe_experts > 0 ? L->edp : 1};
  int rings = 0;
  for (size_t i = 0; i < sizeof groups / sizeof *groups; i++)
    rings += groups[i] > 1;
  return rings * channels * per_channel;
}

/* Megatron-Core's local layer spec (model.transformer_impl = "local" in a Megatron job), what it
 * allocates beyond or instead of stepc's own graph; Megatron-LM d98e8a64dd, megatron/core, PyTorch's
 * autograd freeing each node's saved tensors right after its backward ran (retain_graph off). Checked
 * against Megatron-Core on an H200 (tests/plan/megatron_local.c, issue 28's rows).
 *
 *   core attention  get_gpt_layer_local_submodules builds DotProductAttention (transformer/
 *                   dot_product_attention.py) whatever attention_backend says. forward: K and V are
 *                   expanded to every head (repeat_interleave) before anything saves them; the scores
 *                   are torch.baddbmm into a new bf16 tensor (its `input` is the global buffer below,
 *                   beta 0) and stay referenced by the local `matmul_result` until forward returns;
 *                   FusedScaleMaskSoftmax.forward_torch_softmax (fusions/fused_softmax.py) with
 *                   attention_softmax_in_fp32 takes input.float(), masks it in place
 *                   (transformer/utils.py attention_mask_func: masked_fill_, which saves the causal
 *                   mask, a new sq x sk bool from get_default_causal_mask per layer), softmaxes it in
 *                   fp32 (saved by softmax) and casts to bf16 (saved by the PV bmm): an fp32 and a bf16
 *                   probabilities tensor per layer. Without fp32 the mask and softmax work on the bf16
 *                   scores and one bf16 probabilities tensor is saved by both.
 *                   backward: the PV bmm's grad of the probabilities (bf16), cast to fp32; PyTorch's
 *                   CUDA softmax backward (aten/src/ATen/native/cuda/SoftMax.cu,
 *                   softmax_backward_cuda_out: tmp = grad * output) holds the saved output, the
 *                   incoming grad, that temporary and its result: four score-sized tensors of the
 *                   softmax's dtype where stepc plans three bf16 ones; masked_fill_'s backward makes a
 *                   new tensor (grad.masked_fill(mask, 0)), then the cast back to bf16 feeds baddbmm's
 *                   backward.
 *   checkpoint      a recomputed core attention (tensor_parallel/random.py, CheckpointFunction) saves
 *                   its inputs: V is a view of linear_qkv's output (attention.py,
 *                   get_query_key_value_tensors splits mixed_qkv into views), which it keeps whole;
 *                   its first forward runs under no_grad, so its tensors live only until it returns.
 *   GLU             without bias_activation_fusion MLP.forward's glu (transformer/mlp.py) saves
 *                   silu(x_glu) and x_linear + glu_linear_offset for the product's backward, two
 *                   tensors of the activation output's size beside what stepc keeps.
 * The score-sized tensors of stepc's core attention are left out of the plan's sum (local_skip) and
 * Megatron's replace them here, per program point of stepc's schedule (forward or replay ops and
 * their backward ops of the layer). The global memory buffer is counted as workspace. */
typedef struct {
  int s, m, sm, d, pv; /* program points of ATTN_SCORES, CAUSAL_MASK, SOFTMAX, DROPOUT, ATTN_PV; -1 none */
} AttnPts;

static bool local_spec(const Spec *s) {
  return spec_megatron_job(s) && strcmp(s->model.transformer_impl, "local") == 0;
}

static bool core_attn_op(const Op *op) {
  return op->tags.layer >= 0 && has(op->tags.module, "core_attention");
}

/* Marks the score-sized tensors of each layer's core attention (the scores' element count). */
static void local_skip_scan(const Graph *g, uint8_t *skip) {
  for (int t = 0; t < g->nt; t++)
    skip[t] = 0;
  for (int o = 0; o < g->nop; o++) {
    const Op *sc = &g->op[o];
    if (sc->kind != OP_ATTN_SCORES || !core_attn_op(sc)) continue;
    int64_t n = tensor_numel(&g->t[sc->out[0]]);
    for (int t = 0; t < g->nt; t++) {
      int p = g->t[t].producer;
      if (p >= 0 && core_attn_op(&g->op[p]) && g->op[p].tags.layer == sc->tags.layer &&
          tensor_numel(&g->t[t]) == n)
        skip[t] = 1;
    }
  }
}

/* Megatron's global memory buffer (parallel_state.get_global_memory_buffer(), core/utils.py
 * GlobalMemoryBuffer.get_tensor): DotProductAttention asks it for the baddbmm input of the scores'
 * shape and dtype under the name "mpu"; the buffer is allocated at the first attention forward, grown
 * to the largest request and held for the run. */
static double global_buffer_bytes(const Lay *L, const uint8_t *tps) {
  const Graph *g = L->g;
  double b = 0;
  for (int o = 0; o < g->nop; o++) {
    const Op *op = &g->op[o];
    if (op->kind != OP_ATTN_SCORES || !core_attn_op(op)) continue;
    int t = op->out[0];
    double x = (double)tensor_numel(&g->t[t]) * (double)dtype_size(g->t[t].dtype) / shard(L, tps, t);
    if (x > b) b = x;
  }
  return b;
}

/* Adds v bytes over program points [a, b] to diff, and to *saved when alive across the last forward
 * point. */
static void seg(double *diff, int a, int b, double v, int last_fwd, double *saved) {
  if (a < 0 || b < a || v == 0) return;
  diff[a] += v, diff[b + 1] -= v;
  if (a <= last_fwd && b > last_fwd) *saved += v;
}

static void local_attention_add(const Lay *L, const Schedule *sc, const uint8_t *tps, int stage, int last_fwd,
                                double *diff, double *saved) {
  const Graph *g = L->g;
  const SpecModel *m = &L->s->model;
  for (int l = 0; l < L->nl; l++) {
    if (layer_stage(L, l) != stage) continue;
    AttnPts f[2] = {{-1, -1, -1, -1, -1}, {-1, -1, -1, -1, -1}}, b = {-1, -1, -1, -1, -1};
    int scores = -1, kin = -1, qin = -1, vin = -1, act_at[2] = {-1, -1}, act_bwd = -1, act_out = -1;
    bool qkv_replayed = false;
    for (int i = 0, q = 0; i < sc->n; i++) {
      if (sc->it[i].kind != SCHED_OP) continue;
      const Op *op = &g->op[sc->it[i].id];
      int at = q++;
      if (op->tags.layer != l) continue;
      int ph = op->tags.phase;
      if (ph == IR_PHASE_REPLAY && has(op->tags.module, "linear_qkv")) qkv_replayed = true;
      if (op->kind == OP_SWIGLU && has(op->tags.module, "mlp.activation_func") &&
          !has(op->tags.module, "experts")) {
        if (ph == IR_PHASE_FORWARD || ph == IR_PHASE_REPLAY)
          act_at[ph == IR_PHASE_REPLAY] = at, act_out = op->out[0];
      }
      if (op->kind == OP_SWIGLU_BWD && has(op->tags.module, "mlp.activation_func") &&
          !has(op->tags.module, "experts"))
        act_bwd = at;
      if (!core_attn_op(op)) continue;
      if (ph == IR_PHASE_FORWARD || ph == IR_PHASE_REPLAY) {
        AttnPts *p = &f[ph == IR_PHASE_REPLAY];
        if (op->kind == OP_ATTN_SCORES)
          p->s = at, scores = op->out[0], qin = op->in[0], kin = op->in[1];
        else if (op->kind == OP_CAUSAL_MASK)
          p->m = at;
        else if (op->kind == OP_SOFTMAX)
          p->sm = at;
        else if (op->kind == OP_DROPOUT)
          p->d = at;
        else if (op->kind == OP_ATTN_PV)
          p->pv = at, vin = op->in[1];
      } else if (ph == IR_PHASE_BACKWARD) {
        if (op->kind == OP_ATTN_SCORES_BWD)
          b.s = at;
        else if (op->kind == OP_CAUSAL_MASK)
          b.m = at;
        else if (op->kind == OP_SOFTMAX_BWD)
          b.sm = at;
        else if (op->kind == OP_DROPOUT_BWD)
          b.d = at;
        else if (op->kind == OP_ATTN_PV_BWD)
          b.pv = at;
      }
    }
    /* the GLU's two saved tensors (not with the fused bias_swiglu, which saves its input only) */
    if (act_out >= 0 && !m->bias_activation_fusion) {
      double x = 2.0 * (double)tensor_numel(&g->t[act_out]) * (double)dtype_size(g->t[act_out].dtype) /
                 shard(L, tps, act_out);
      bool re = act_at[1] >= 0;
      seg(diff, re ? act_at[1] : act_at[0], act_bwd, x, last_fwd, saved);
      if (re) seg(diff, act_at[0], act_at[0], x, last_fwd, saved); /* under no_grad: until the product */
    }
    if (scores < 0 || f[0].s < 0 || f[0].m < 0 || f[0].sm < 0 || f[0].pv < 0 || b.s < 0 || b.m < 0 ||
        b.sm < 0 || b.pv < 0)
      continue;
    const Tensor *st = &g->t[scores];
    double n = (double)tensor_numel(st), sh = shard(L, tps, scores);
    double s2 = n * (double)dtype_size(st->dtype) / sh, s1 = n / sh;
    bool fp = m->attention_softmax_in_fp32 && dtype_size(st->dtype) == 2;
    double sF = fp ? 2 * s2 : s2;
    bool drop = f[0].d >= 0;
    double mk =
        (double)m->seq_length * (double)m->seq_length / ((double)L->cp * L->cp); /* the causal mask, bool */
    double dr = drop ? s2 + s1 : 0;                                              /* dropped probs + mask */
    double keep = fp ? sF + (drop ? 0 : s2) : s2; /* saved probabilities: fp32 (+ bf16 for the bmm) or bf16 */
    double kx = 0, vx = 0;                        /* GQA: K and V expanded to every head */
    if (qin >= 0 && kin >= 0 && vin >= 0 && tensor_numel(&g->t[kin]) > 0) {
      double ratio = (double)tensor_numel(&g->t[qin]) / (double)tensor_numel(&g->t[kin]);
      if (ratio > 1) {
        kx = (double)tensor_numel(&g->t[kin]) * (ratio - 1) * (double)dtype_size(g->t[kin].dtype) /
             shard(L, tps, kin);
        vx = (double)tensor_numel(&g->t[vin]) * (ratio - 1) * (double)dtype_size(g->t[vin].dtype) /
             shard(L, tps, vin);
      }
    }
    /* stepc's replay skips the PV product when linear_proj keeps the context (compiler/passes/recompute.c):
     * Megatron's recomputed forward ends there too, right after the softmax and its dropout */
    bool re = f[1].s >= 0 && f[1].m >= 0 && f[1].sm >= 0;
    if (re && f[1].pv < 0) f[1].pv = f[1].d > f[1].sm ? f[1].d : f[1].sm;
    const AttnPts *c = re ? &f[1] : &f[0];
    if (re) { /* the checkpointed first forward, under no_grad */
      const AttnPts *t = &f[0];
      seg(diff, t->s, t->m - 1, s2, last_fwd, saved);
      seg(diff, t->m, t->sm - 1, s2 + (fp ? sF : 0), last_fwd, saved);
      seg(diff, t->sm, t->sm, fp ? 2 * s2 + 2 * sF : 2 * s2, last_fwd, saved);
      seg(diff, t->sm + 1, t->pv, 2 * s2 + dr, last_fwd, saved);
      seg(diff, t->m, t->pv, mk, last_fwd, saved);
      seg(diff, t->s, t->pv, kx + vx, last_fwd, saved);
      /* CheckpointFunction saves V, a view of linear_qkv's whole output, when only core_attn is
       * recomputed (full recompute saves the layer input instead) */
      int sp = vin >= 0 ? g->t[vin].producer : -1;
      if (!qkv_replayed && sp >= 0 && g->op[sp].kind == OP_SPLIT_QKV) {
        int qkv = g->op[sp].in[0];
        double x = ((double)tensor_numel(&g->t[qkv]) - (double)tensor_numel(&g->t[vin])) *
                   (double)dtype_size(g->t[qkv].dtype) / shard(L, tps, qkv);
        seg(diff, t->pv + 1, b.s, x, last_fwd, saved);
      }
    }
    seg(diff, c->s, c->m - 1, s2, last_fwd, saved);
    seg(diff, c->m, c->sm - 1, s2 + (fp ? sF : 0), last_fwd, saved);
    seg(diff, c->sm, c->sm, fp ? 2 * s2 + 2 * sF : 2 * s2, last_fwd, saved);
    seg(diff, c->sm + 1, c->pv, s2 + keep + dr, last_fwd, saved);
    seg(diff, c->pv + 1, b.pv - 1, keep + dr, last_fwd, saved);
    seg(diff, b.pv, b.pv, keep + dr + s2, last_fwd, saved);
    double kp = fp ? sF : s2; /* the softmax's saved output, and its dtype for the backward */
    if (drop && b.d > b.pv) {
      seg(diff, b.pv + 1, b.d, kp + s1 + 2 * s2, last_fwd, saved);
      seg(diff, b.d + 1, b.sm - 1, kp + s2, last_fwd, saved);
    } else {
      seg(diff, b.pv + 1, b.sm - 1, kp + s2, last_fwd, saved);
    }
    seg(diff, b.sm, b.sm, 4 * kp, last_fwd, saved);
    seg(diff, b.sm + 1, b.m - 1, kp, last_fwd, saved);
    seg(diff, b.m, b.m, 2 * kp, last_fwd, saved);
    seg(diff, b.m + 1, b.s, s2, last_fwd, saved);
    seg(diff, c->m, b.m, mk, last_fwd, saved);
    seg(diff, c->s, b.s, kx, last_fwd, saved);
    seg(diff, c->s, b.pv, vx, last_fwd, saved);
  }
}

static bool ends(const char *n, const char *tail) {
  size_t a = strlen(n), b = strlen(tail);
  return a > b && strcmp(n + a - b, tail) == 0;
}

static bool is_moment(const Tensor *x) { return ends(x->name, ".exp_avg") || ends(x->name, ".exp_avg_sq"); }

/* Megatron-Core without Transformer Engine or apex, which is how a local-spec job is modelled (the
 * H200 checks run it so): get_megatron_optimizer falls back to torch.optim.AdamW
 * (optimizer/__init__.py: TE's FusedAdam, else apex's, else torch's, USING_PYTORCH_OPTIMIZER), whose
 * default foreach implementation (torch/optim/adam.py, _multi_tensor_adam, decoupled weight decay in
 * place) allocates exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs): one temporary of the second
 * moment's size for the param group being stepped, freed when the group is done. Optimizer.step
 * visits its param groups one by one, and Adam._init_group creates a group's exp_avg and exp_avg_sq
 * (zeros_like) right before that group's update, so in the first step the moments of the groups not
 * yet visited do not exist. TE's and apex's FusedAdam update in one fused kernel and hold nothing. */
static bool torch_adamw(const Spec *s) { return local_spec(s); }

/* The order in which Megatron's step visits a param's torch param group (0..3): the dense
 * optimizer, then the expert one (ChainedOptimizer over get_megatron_optimizer's list; expert
 * params form their own optimizer only when they use the expert process groups:
 * tensor_parallel/layers.py, use_expert_pgs = is_expert and (EP > 1 or ETP != TP), else
 * param.allreduce stays True and they join the dense one); within each, the weight-decayed group
 * before the no-weight-decay one (_get_param_groups sorts the None override first;
 * get_standard_config_overrides gives wd_mult 0 to 1-D params and biases). */
static int adam_group(const Lay *L, const Tensor *param) {
  bool own = (L->ep > 1 || L->etp != L->tp) && expert(param->name);
  bool no_wd = param->ndim < 2 || ends(param->name, ".bias");
  return (own ? 2 : 0) + (no_wd ? 1 : 0);
}

int memrank_curves(const Graph *g, const Fusions *fz, const Spec *s, const Schedule *sc,
                   const ScopeResult *sr, const MemPlan *mp, RankReport *rr, double *curve, char *err,
                   size_t nerr) {
  const SpecModel *m = &s->model;
  memset(rr, 0, sizeof *rr);
  Lay L = {.g = g,
           .s = s,
           .tp = (int)m->tensor_model_parallel_size,
           .pp = (int)m->pipeline_model_parallel_size,
           .vpp = s->present[SPEC_F_model_virtual_pipeline_model_parallel_size]
                      ? (int)m->virtual_pipeline_model_parallel_size
                      : 1,
           .cp = (int)m->context_parallel_size,
           .ep = (int)m->expert_model_parallel_size,
           .etp = s->present[SPEC_F_model_expert_tensor_parallel_size] ? (int)m->expert_tensor_parallel_size
                                                                       : (int)m->tensor_model_parallel_size,
           .dp = (int)spec_data_parallel_size(s),
           .nl = (int)m->num_layers,
           .sp = m->sequence_parallel};
  if (L.tp < 1) L.tp = 1;
  if (L.pp < 1) L.pp = 1;
  if (L.vpp < 1) L.vpp = 1;
  if (L.cp < 1) L.cp = 1;
  if (L.ep < 1) L.ep = 1;
  if (L.etp < 1) L.etp = 1;
  if (L.dp < 1) L.dp = 1;
  pipe_split_from_spec(s, &L.split);
  int64_t world = s->train.world_size > 0 ? s->train.world_size : 1;
  L.edp = (int)(world / ((int64_t)L.etp * L.ep * L.pp) > 0 ? world / ((int64_t)L.etp * L.ep * L.pp) : 1);
  rr->tp = L.tp, rr->pp = L.pp, rr->vpp = L.vpp, rr->cp = L.cp, rr->ep = L.ep, rr->etp = L.etp, rr->dp = L.dp;
  rr->sp = L.sp, rr->dist_opt = s->optimizer.use_distributed_optimizer;
  double attn_ws = (double)attn_cudnn_workspace_max(g, NULL);
  int stages[3], ns = 0;
  stages[ns++] = 0;
  if (L.pp > 2) stages[ns++] = L.pp / 2;
  if (L.pp > 1) stages[ns++] = L.pp - 1;
  uint8_t *tps = calloc((size_t)g->nt + 1, 1);
  int64_t *stg = malloc((size_t)(g->nt + 1) * sizeof *stg);
  double *diff = calloc((size_t)mp->npos + 2, sizeof *diff);
  double *slot_b = malloc((size_t)(g->nt + 1) * sizeof *slot_b);
  int *slot_start = malloc((size_t)(g->nt + 1) * sizeof *slot_start),
      *slot_end = malloc((size_t)(g->nt + 1) * sizeof *slot_end);
  if (!tps || !stg || !diff || !slot_b || !slot_start || !slot_end) {
    free(tps), free(stg), free(diff), free(slot_b), free(slot_start), free(slot_end);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  bool fp8 = m->fp8[0] != 0;
  Fp8Use *f8 = fp8 ? malloc((size_t)(g->nt + 1) * sizeof *f8) : NULL;
  uint8_t *f8w = fp8 ? malloc((size_t)g->nt + 1) : NULL;
  int *pp = fp8 ? malloc((size_t)(sc->n + 1) * sizeof *pp) : NULL,
      *nshare = fp8 ? calloc((size_t)g->nt + 1, sizeof *nshare) : NULL;
  if (fp8 && (!f8 || !f8w || !pp || !nshare)) {
    free(tps), free(stg), free(diff), free(slot_b), free(slot_start), free(slot_end), free(f8), free(f8w),
        free(pp), free(nshare);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  if (fp8) {
    for (int i = 0, q = 0; i < sc->n; i++)
      pp[i] = sc->it[i].kind == SCHED_OP ? q++ : q;
    fp8_scan(g, sc, pp, f8, f8w);
    for (int t = 0; t < g->nt; t++)
      if (mp->start[t] >= 0) nshare[mp->slot[t] >= 0 && mp->slot[t] < g->nt ? mp->slot[t] : t]++;
  }
  act_tp(&L, sc, tps);
  bool mj = spec_megatron_job(s), local = local_spec(s);
  uint8_t *local_skip = local ? malloc((size_t)g->nt + 1) : NULL;
  if (local && !local_skip) {
    free(tps), free(stg), free(diff), free(slot_b), free(slot_start), free(slot_end), free(f8), free(f8w),
        free(pp), free(nshare);
    snprintf(err, nerr, "out of memory");
    return -1;
  }
  if (local) local_skip_scan(g, local_skip);
  for (int t = 0; t < g->nt; t++)
    stg[t] = tensor_stages(&L, t);
  int loss_from = -1, loss_to = -1;
  /* stepc's own step (not a Megatron job) reports stepc's own step (plan.activations holds it equal to the
   * plan) */
  double loss_b = mj ? megatron_loss_bytes(&L, sc, tps, &loss_from, &loss_to) : 0;
  int64_t stg_loss = loss_b > 0 ? 1ll << (L.pp - 1) : 0;
  /* the last forward program point */
  int last_fwd = 0, q = 0;
  for (int i = 0; i < sc->n; i++)
    if (sc->it[i].kind == SCHED_OP) {
      if (g->op[sc->it[i].id].tags.phase == IR_PHASE_FORWARD) last_fwd = q;
      q++;
    }
  for (int k = 0; k < ns; k++) {
    RankMem *r = &rr->r[rr->n++];
    int st = stages[k];
    r->stage = st;
    snprintf(r->name, sizeof r->name, "pp%d%s", st,
             L.pp == 1        ? ""
             : st == 0        ? " (first stage)"
             : st == L.pp - 1 ? " (last stage)"
                              : " (middle)");
    r->layer_first = -1;
    for (int l = 0; l < L.nl; l++)
      if (layer_stage(&L, l) == st) {
        if (r->layer_first < 0) r->layer_first = l;
        r->layer_last = l;
      }
    memset(diff, 0, (size_t)(mp->npos + 2) * sizeof *diff);
    for (int t = 0; t < g->nt; t++)
      slot_b[t] = -1;
    double saved = 0, moments = 0, grad_copies = 0;
    double grp_moments[4] = {0}, grp_sqrt[4] = {0}; /* per torch param group (adam_group) */
    for (int t = 0; t < g->nt; t++) {
      if (stg[t] != -1 && !(stg[t] & (1ll << st))) continue;
      const Tensor *x = &g->t[t];
      /* stepc's own step (one GPU): a weight gradient sunk into its main gradient takes no bytes,
       * as in the device plan (memplan.c) */
      if (!mj && fz->sink[t] >= 0) continue;
      if (local && local_skip[t]) continue; /* Megatron's own timeline below (local_attention_add) */
      if (mj && stepc_mamba_workspace(g, t)) continue;
      double b = (double)tensor_numel(x) * elem_bytes(&L, x) / shard(&L, tps, t);
      int role = memplan_role(g, sr, t);
      if (x->role == ROLE_PARAM) /* an fp8 primary weight's fp32 param too, planned as its master */
        r->params += (int64_t)((double)tensor_numel(x) / shard(&L, tps, t));
      /* ... and sharded as one over the data-parallel ranks by the distributed optimizer (Megatron's
       * fp8_param_gather: each rank its shard of the fp32 master, the fp8 weights gathered) */
      if (x->role == ROLE_PARAM && role == ROLE_MASTER && L.s->optimizer.use_distributed_optimizer) b /= L.dp;
      /* an fp8 linear's bf16 param in the modelled step (not a step's own fp8 copy) */
      if (role == ROLE_PARAM)
        r->weights +=
            fp8 && f8w[t] && x->role == ROLE_PARAM
                ? fp8_weight_bytes(&L, b, x->ndim == 3 && expert(x->name) ? (double)x->shape[0] / L.ep : 1)
                : b;
      /* Megatron's main_grad buffers are persistent; stepc's own step with one micro-batch holds a
       * main gradient only from its ZERO in the backward to the optimizer (memplan.c: not pinned
       * over the whole step), so it is counted over its life below, like an activation */
      else if (role == ROLE_GRAD && (mj || (mp->start[t] == 0 && mp->end[t] == mp->npos - 1)))
        r->grads += b;
      else if (role == ROLE_MASTER || role == ROLE_OPTIM) {
        r->optimizer += b;
        if (role == ROLE_OPTIM && x->of >= 0 && is_moment(x)) {
          int k = adam_group(&L, &g->t[x->of]);
          moments += b, grp_moments[k] += b;
          if (ends(x->name, ".exp_avg_sq")) grp_sqrt[k] += b;
        }
        /* the copy of this param's grad shard has the master's elements */
        if (role == ROLE_MASTER)
          grad_copies += (double)tensor_numel(x) *
                         megatron_grad_copy_bytes(&L, grad_bytes(&L, x->of >= 0 ? &g->t[x->of] : NULL)) /
                         shard(&L, tps, t);
      } else if (role == MEM_ROLE_GRAPH)
        r->graph_buffers += b;
      else if (mp->start[t] >= 0) {
        /* tensors that share a slot (in-place reuse) take its bytes once, over their joint life */
        int sl = mp->slot[t] >= 0 && mp->slot[t] < g->nt ? mp->slot[t] : t;
        if (fp8 && f8[t].cast >= 0 && nshare[sl] == 1 && x->dtype == DT_BF16) {
          /* the bf16 tensor until its last forward reader (or its end when a backward op other
           * than the wgrad reads it), its fp8 copy from the cast to its end */
          int s0 = mp->start[t],
              e16 = f8[t].keep16 || f8[t].last_fwd > mp->end[t] ? mp->end[t] : f8[t].last_fwd;
          int c0 = f8[t].cast, e8 = mp->end[t];
          diff[s0] += b, diff[e16 + 1] -= b;
          if (e8 > e16 || f8[t].keep16) diff[c0] += b / 2, diff[e8 + 1] -= b / 2;
          if (s0 <= last_fwd && e16 > last_fwd) saved += b;
          if ((e8 > e16 || f8[t].keep16) && c0 <= last_fwd && e8 > last_fwd) saved += b / 2;
          continue;
        }
        if (slot_b[sl] < 0)
          slot_b[sl] = b, slot_start[sl] = mp->start[t], slot_end[sl] = mp->end[t];
        else {
          if (b > slot_b[sl]) slot_b[sl] = b;
          if (mp->start[t] < slot_start[sl]) slot_start[sl] = mp->start[t];
          if (mp->end[t] > slot_end[sl]) slot_end[sl] = mp->end[t];
        }
      }
    }
    for (int sl = 0; sl < g->nt; sl++) {
      if (slot_b[sl] < 0) continue;
      diff[slot_start[sl]] += slot_b[sl], diff[slot_end[sl] + 1] -= slot_b[sl];
      if (slot_start[sl] <= last_fwd && slot_end[sl] > last_fwd) saved += slot_b[sl];
    }
    /* stepc's own step: the distributed optimizer's staging, an arena slot of no tensor's (memplan.c) */
    if (!mj && mp->zstage_bytes)
      diff[mp->zstage_start] += (double)mp->zstage_bytes, diff[mp->npos] -= (double)mp->zstage_bytes;
    if (stg_loss & (1ll << st)) diff[loss_from] += loss_b, diff[loss_to + 1] -= loss_b;
    if (mj) shared_gather_add(&L, sc, st, last_fwd, diff, &saved);
    if (local) local_attention_add(&L, sc, tps, st, last_fwd, diff, &saved);
    double run = 0, peak = 0;
    for (int p = 0; p < mp->npos; p++) {
      run += diff[p];
      if (run > peak) peak = run;
      if (curve) curve[(size_t)k * mp->npos + p] = run;
    }
    int nmicro = sc->nmicro;
    double infl;
    if (L.vpp > 1) {
      double chunks = (double)(L.pp - st - 1) * 2 + (double)(L.vpp - 1) * L.pp + 1;
      if (chunks > (double)nmicro * L.vpp) chunks = (double)nmicro * L.vpp;
      infl = chunks / L.vpp;
    } else {
      infl = L.pp - st < nmicro ? L.pp - st : nmicro;
    }
    if (infl < 1) infl = 1;
    r->inflight = infl;
    r->saved_per_micro = saved;
    r->activations = peak + (infl - 1) * saved;
    r->workspace = 32.0 * 1024 * 1024 + attn_ws / ((double)L.tp * L.cp) + /* cuBLASLt's + cuDNN attention's */
                   (mj ? te_grouped_workspace_bytes(s) : 0) +             /* + TE's grouped GEMMs' */
                   (local ? global_buffer_bytes(&L, tps) : 0);            /* + Megatron's mpu buffer */
    double state = r->weights + r->grads + r->optimizer + r->graph_buffers + r->workspace;
    double fwd_bwd = state + r->activations;
    /* torch's foreach AdamW (torch_adamw): the largest group's temporary with every moment
     * allocated (iterations >= 2); in the first step, group k's with the moments of groups 0..k.
     * FusedAdam: no temporary, the moments of all groups. (The clip's and the main-to-model copy's
     * per-tensor temporaries, local_multi_tensor_scale's src * scale, are never larger than a group's
     * and come with fewer moments or none: they never set the peak.) */
    bool tadam = mj && torch_adamw(s);
    double adam_tmp = 0, adam_first = 0, cum = 0;
    for (int k = 0; k < 4; k++) {
      double tmp = tadam ? grp_sqrt[k] : 0;
      cum += grp_moments[k];
      if (tmp > adam_tmp) adam_tmp = tmp;
      if (cum + tmp > adam_first) adam_first = cum + tmp;
    }
    /* stepc's own step (not a Megatron job) reports stepc's own step, whose optimizer needs no copies */
    r->optimizer_step = state + (mj ? grad_copies + adam_tmp : 0);
    r->max_allocated = fwd_bwd > r->optimizer_step ? fwd_bwd : r->optimizer_step;
    /* TE's FusedAdam and torch's Adam create exp_avg / exp_avg_sq at the first optimizer.step()
     * (Megatron creates them early only to load a checkpoint's optimizer state); stepc's own step
     * (one GPU) holds its whole arena, moments included, from open */
    double first_step = state - moments + grad_copies + adam_first;
    r->first_iteration = !mj                              ? r->max_allocated
                         : fwd_bwd - moments > first_step ? fwd_bwd - moments
                                                          : first_step;
    /* stepc's own step (not a Megatron job) reports stepc's own step, which holds nothing outside its arena
     * but the CUDA context */
    r->hybridep_buffers = mj ? hybridep_buffer_bytes(&L) : 0;
    r->nccl_buffers = mj ? nccl_ring_buffer_bytes(&L) : 0;
    r->device_total = r->max_allocated + r->hybridep_buffers + r->nccl_buffers;
  }
  rr->usable = s->present[SPEC_F_train_usable_device_memory_gib]
                   ? s->train.usable_device_memory_gib * 1073741824.0
                   : 0;
  free(tps), free(stg), free(diff), free(slot_b), free(slot_start), free(slot_end), free(f8), free(f8w),
      free(pp), free(nshare);
  free(local_skip);
  return 0;
}

int memrank_build(const Graph *g, const Fusions *fz, const Spec *s, const Schedule *sc, const ScopeResult *sr,
                  const MemPlan *mp, RankReport *rr, char *err, size_t nerr) {
  return memrank_curves(g, fz, s, sc, sr, mp, rr, NULL, err, nerr);
}

/* When a rank first holds its CUDA graphs. With cuda_graph_impl "transformer_engine" the trainer
 * runs cuda_graph_warmup_steps iterations eagerly and captures every TE graph (their pool, static
 * inputs and outputs) just before the next one: Megatron-LM d98e8a64dd training.py, train():
 * create_cudagraphs when iteration - start_iteration == args.cuda_graph_warmup_steps;
 * Megatron-Bridge 067f987df0 training/train.py, train(): the same test on train_state.step.
 * TransformerConfig.cuda_graph_warmup_steps defaults to 3 (transformer_config.py), and Bridge's
 * Nemotron 3 Nano H100 perf recipe leaves it there. So iterations 1..warmup hold no graph buffers:
 * each tensor that leaves a graph lives as the eager tensor it is. The other impls keep the step
 * planned with its graphs from iteration 1 (the local manager's own warm-up is not modelled). */
int memrank_capture_iteration(const Spec *s) {
  const SpecModel *m = &s->model;
  if (strcmp(m->cuda_graph_impl, "transformer_engine") != 0) return 1;
  return m->cuda_graph_warmup_steps > 0 ? (int)m->cuda_graph_warmup_steps + 1 : 1;
}

/* What Megatron prints: training_log reports torch.cuda.max_memory_allocated after iteration 1 and
 * again after iteration 2, then stops, so that a reading includes the optimizer state the first
 * step creates (Megatron-Bridge 067f987df0 training/utils/train_utils.py, training_log:
 * report_memory_flag cleared once iteration > loaded_iteration + 1; Megatron-LM's training_log the
 * same). The peak is cumulative: iteration 1 is first_iteration (its forward/backward before the
 * moments), iteration 2 max_allocated; each with its graphs only once they are captured. */
void memrank_readings(const Spec *s, RankReport *rr, const RankReport *eager) {
  int cap = memrank_capture_iteration(s);
  for (int i = 0; i < rr->n; i++) {
    RankMem *r = &rr->r[i];
    const RankMem *e = eager && eager->n == rr->n ? &eager->r[i] : r;
    double it1 = cap <= 1 ? r->first_iteration : e->first_iteration;
    double it2 = cap <= 2 ? r->max_allocated : e->max_allocated;
    r->after_iteration[0] = it1;
    r->after_iteration[1] = it1 > it2 ? it1 : it2;
  }
}
