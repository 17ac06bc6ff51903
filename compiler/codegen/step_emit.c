/* step_emit.c — step.c, the generated host step (step_emit.h). */
#include "codegen/step_emit.h"

#include <string.h>

#include "kernels/launch.h"
#include "lower.h"
#include "nvrtc.h"
#include "runtime/stepc_gen.h"

int step_plan_build(const Spec *s, int float_bytes, StepPlan *p, char *err, size_t nerr) {
  memset(p, 0, sizeof *p);
  int rc = lower_step(s, &p->g, err, nerr);
  if (rc != LOWER_OK) return rc;
  RecomputeConfig cfg;
  recompute_config_from_spec(s, &cfg);
  if (recompute_apply(p->g, &cfg, &p->rr, err, nerr) != 0 || schedule_build(p->g, s, &p->sc, err, nerr) != 0 ||
      memplan_build(p->g, &p->sc, NULL, float_bytes, &p->mp, err, nerr) != 0 ||
      memplan_verify(p->g, &p->mp, err, nerr) != 0) {
    step_plan_free(p);
    return -1;
  }
  memplan_apply(p->g, &p->mp);
  return 0;
}

void step_plan_free(StepPlan *p) {
  memplan_free(&p->mp);
  schedule_free(&p->sc);
  recompute_result_free(&p->rr);
  graph_free(p->g);
  memset(p, 0, sizeof *p);
}

static bool in_micro(Phase ph) { return ph == IR_PHASE_FORWARD || ph == IR_PHASE_BACKWARD || ph == IR_PHASE_REPLAY; }

static uint64_t mix(uint64_t h, const void *p, size_t n) { return cubin_fnv1a(h, p, n); }

static uint64_t mix_tensor(uint64_t h, const Tensor *t) {
  int32_t v[3] = {t->dtype, t->role, t->ndim};
  h = mix(h, v, sizeof v);
  h = mix(h, t->shape, sizeof t->shape);
  return mix(h, t->name, strlen(t->name));
}

uint64_t step_fingerprint(const Graph *g) {
  uint64_t h = CUBIN_FNV_OFFSET;
  int32_t head[3] = {STEPC_GEN_ABI, g->nop, g->num_microbatches};
  h = mix(h, head, sizeof head);
  for (int pass = 0; pass < 2; pass++)
    for (int o = 0; o < g->nop; o++) {
      const Op *op = &g->op[o];
      if (in_micro(op->tags.phase) != (pass == 0)) continue;
      int32_t v[5] = {o, op->kind, op->tags.phase, op->nin, op->nout};
      h = mix(h, v, sizeof v);
      h = mix(h, op->tags.module, strlen(op->tags.module));
      h = mix(h, op->a.i, sizeof op->a.i);
      h = mix(h, op->a.f, sizeof op->a.f);
      for (int i = 0; i < op->nin; i++) h = mix_tensor(h, &g->t[op->in[i]]);
      for (int i = 0; i < op->nout; i++) h = mix_tensor(h, &g->t[op->out[i]]);
    }
  return h;
}

/* Mirrors the choices of runtime/cuda/op_*.c (which kernel for which shape); CI checks that
 * every name is in the cubin. */
int step_op_kernels(const Graph *g, const Op *op, const char **k, int max) {
  int n = 0;
#define K(name) (n < max ? (void)(k[n++] = (name)) : (void)0)
  const Tensor *in0 = op->nin > 0 ? &g->t[op->in[0]] : NULL;
  switch (op->kind) {
  case OP_ADD: K("residual_add"); break;
  case OP_ACCUM: K(in0 && in0->dtype == DT_F32 ? "grad_accumulate_f32" : "grad_accumulate_bf16"); break;
  case OP_FILL: K("fill_f32"); break;
  case OP_LINEAR_BGRAD: K("bias_backward_partial"), K("colsum_accumulate"); break;
  case OP_EMBED: K("embedding_forward"); break;
  case OP_EMBED_BWD: K("embedding_backward_token"); break;
  case OP_POS_ADD: K("pos_add"); break;
  case OP_POS_ADD_BWD: K("embedding_backward_position"); break;
  case OP_RMSNORM: K("rmsnorm_forward"); break;
  case OP_LAYERNORM: K("layernorm_forward"); break;
  case OP_RMSNORM_BWD: K("rmsnorm_backward_input"), K("norm_backward_weight_partial"), K("colsum_accumulate"); break;
  case OP_LAYERNORM_BWD: K("layernorm_backward_input"), K("norm_backward_weight_partial"), K("colsum_accumulate"); break;
  case OP_ROPE: K(op->a.i[0] > 0 ? "rope_forward" : "rope_backward"); break;
  case OP_DROPOUT: K("dropout_forward"); break;
  case OP_DROPOUT_BWD: K("dropout_backward"); break;
  case OP_SWIGLU: K("swiglu_forward"); break;
  case OP_SWIGLU_BWD: K("swiglu_backward"); break;
  case OP_GELU: K("gelu_forward"); break;
  case OP_GELU_BWD: K("gelu_backward"); break;
  case OP_SPLIT_QKV: K("split_qkv"); break;
  case OP_CONCAT_QKV: K("concat_qkv"); break;
  case OP_FLASH_ATTN:
  case OP_FLASH_ATTN_BWD: {
    const Tensor *q = &g->t[op->in[op->kind == OP_FLASH_ATTN ? 0 : 1]];
    int64_t T = q->shape[1], D = q->shape[3];
    bool flash = (D == 64 || D == 128) && T % STEPC_FLASH_T_MULTIPLE == 0;
    if (op->kind == OP_FLASH_ATTN) K(!flash ? "attn_plain_forward" : D == 64 ? "flash_attention_forward_d64" : "flash_attention_forward_d128");
    else if (!flash) {
      K("attn_plain_backward_q"), K("attn_plain_backward_kv");
    } else {
      K("flash_attention_backward_preprocess");
      K(D == 64 ? "flash_attention_backward_dkdv_d64" : "flash_attention_backward_dkdv_d128");
      K(D == 64 ? "flash_attention_backward_dq_d64" : "flash_attention_backward_dq_d128");
    }
    break;
  }
  case OP_CAUSAL_MASK: K("causal_mask_fill"); break; /* ATTN_SCORES/PV and their backward: cuBLASLt */
  case OP_SOFTMAX: K("softmax_causal_forward"); break;
  case OP_SOFTMAX_BWD: K("softmax_causal_backward"); break;
  case OP_CROSS_ENTROPY: K("cross_entropy_forward_backward"), K("loss_reduce"); break;
  case OP_GRAD_SUMSQ: K("norm_squared_partial"); break;
  case OP_CLIP_COEF: K("global_norm_finalize"); break;
  case OP_LR_SCHED: K("lr_schedule"); break;
  case OP_ADAMW: K("adamw_hparams"), K("adamw_update"); break;
  default: break;
  }
#undef K
  return n;
}

static void tensor_line(FILE *f, const char *tag, const Graph *g, int id) {
  const Tensor *t = &g->t[id];
  fprintf(f, "   *   %s %s (", tag, t->name);
  for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
  fprintf(f, ") %s %s @ buffer %d + %lld\n", dtype_name(t->dtype), role_name(t->role), t->buffer, (long long)t->offset);
}

static const char *kind_sym(OpKind k, char *buf, size_t n) {
  size_t i = 0;
  for (const char *c = op_name(k); *c && i + 1 < n; c++) buf[i++] = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
  buf[i] = 0;
  return buf;
}

static void emit_op(FILE *f, const Graph *g, int point, int o) {
  const Op *op = &g->op[o];
  char sym[64];
  fprintf(f, "  /* %s  %s  [%s, layer %d]\n", op_name(op->kind), op->tags.module, phase_name(op->tags.phase), op->tags.layer);
  for (int i = 0; i < op->nin; i++) tensor_line(f, "in ", g, op->in[i]);
  for (int i = 0; i < op->nout; i++) tensor_line(f, "out", g, op->out[i]);
  bool any = false;
  for (int i = 0; i < IR_MAX_IATTR; i++) any |= op->a.i[i] != 0;
  for (int i = 0; i < IR_MAX_FATTR; i++) any |= op->a.f[i] != 0;
  if (any) {
    fprintf(f, "   *   attrs i {");
    for (int i = 0; i < IR_MAX_IATTR; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)op->a.i[i]);
    fprintf(f, "} f {");
    for (int i = 0; i < IR_MAX_FATTR; i++) fprintf(f, "%s%.9g", i ? ", " : "", op->a.f[i]);
    fprintf(f, "}\n");
  }
  const char *k[8];
  int nk = step_op_kernels(g, op, k, 8);
  bool gemm = op->kind == OP_LINEAR || op->kind == OP_LINEAR_DGRAD || op->kind == OP_LINEAR_WGRAD;
  fprintf(f, "   *   cuda:");
  if (gemm) fprintf(f, " cuBLASLt GEMM");
  else if (op->kind == OP_ZERO) fprintf(f, " memset");
  for (int i = 0; i < nk; i++) fprintf(f, " kernel:%s", k[i]);
  if (!gemm && !nk && op->kind != OP_ZERO) fprintf(f, " none of its own (fused into a neighbour, or not run on CUDA)");
  fprintf(f, " */\n");
  long long off = op->nout > 0 ? (long long)g->t[op->out[0]].offset : -1;
  fprintf(f, "  OP(%d, %d, K_%s, %lldLL);\n", point, o, kind_sym(op->kind, sym, sizeof sym), off);
}

int step_emit_c(const StepPlan *p, const char *recipe, FILE *f) {
  const Graph *g = p->g;
  const Schedule *sc = &p->sc;
  uint64_t fp = step_fingerprint(g);
  int nmicro = 0;
  for (int i = 0; i < sc->micro_end; i++) nmicro += sc->it[i].kind == SCHED_OP;
  fprintf(f,
          "/* step.c — the planned training step of %s, generated by `stepc build`. Do not edit.\n"
          " *\n"
          " * One OP() per scheduled op in plan order: micro() runs once per micro-batch (forward, backward\n"
          " * with recompute replays; main gradients accumulate), tail() once per step (global norm, clipping,\n"
          " * AdamW, zeroing). OP(point, op, kind, out_offset) calls the runtime (libstepc_rt) to run op `op` at\n"
          " * program point `point`; the runtime checks the literals against the step it rebuilt from\n"
          " * recipe.lua (on cuda also the first output's arena offset) and launches the op's kernels below.\n"
          " * %d ops (%d per micro-batch x %d micro-batches, %d in the tail); nominal-dtype arena %lld bytes,\n"
          " * peak live %lld bytes; %d recompute replay ops per micro-batch. */\n\n",
          recipe, sc->nops, nmicro, g->num_microbatches, sc->nops - nmicro, (long long)p->mp.arena, (long long)p->mp.peak, p->rr.nreplay_total);
  /* the contract, repeated so that step.c compiles without stepc's headers (runtime/stepc_gen.h) */
  fprintf(f, "typedef struct stepc_gen_ctx stepc_gen_ctx;\n"
             "int stepc_gen_op(stepc_gen_ctx *c, int point, int op, int kind, long long out_offset);\n"
             "typedef struct {\n  int abi;\n  unsigned long long fingerprint;\n  int points, micro_points;\n"
             "  int (*micro)(stepc_gen_ctx *c);\n  int (*tail)(stepc_gen_ctx *c);\n  const char *recipe;\n} stepc_generated;\n\n");
  fprintf(f, "/* op kinds (compiler/ops/op_list.h) */\nenum {\n");
  bool used[OP_COUNT] = {false};
  for (int o = 0; o < g->nop; o++) used[g->op[o].kind] = true;
  char sym[64];
  for (int k = 0; k < OP_COUNT; k++)
    if (used[k]) fprintf(f, "  K_%s = %d,\n", kind_sym((OpKind)k, sym, sizeof sym), k);
  fprintf(f, "};\n\n#define OP(point, op, kind, out_offset) \\\n"
             "  if (stepc_gen_op(c, point, op, kind, out_offset)) return -1\n\n");
  int point = 0, micro_points = 0;
  for (int pass = 0; pass < 2; pass++) {
    fprintf(f, "static int %s(stepc_gen_ctx *c) {\n", pass == 0 ? "micro" : "tail");
    for (int i = pass == 0 ? 0 : sc->micro_end; i < (pass == 0 ? sc->micro_end : sc->n); i++) {
      if (sc->it[i].kind != SCHED_OP) {
        fprintf(f, "  /* gradient bucket %d ready (reduced on the last micro-batch; one rank: nothing to do) */\n", sc->it[i].id);
        continue;
      }
      emit_op(f, g, point++, sc->it[i].id);
    }
    fprintf(f, "  return 0;\n}\n\n");
    if (pass == 0) micro_points = point;
  }
  fprintf(f, "const stepc_generated stepc_generated_step = {%d, 0x%016llxULL, %d, %d, micro, tail, \"", STEPC_GEN_ABI,
          (unsigned long long)fp, point, micro_points);
  for (const char *c = recipe; *c; c++) fprintf(f, (*c == '"' || *c == '\\') ? "\\%c" : "%c", *c);
  fprintf(f, "\"};\n");
  return ferror(f) ? -1 : 0;
}
