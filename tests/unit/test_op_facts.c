/* test_op_facts.c — every op kind's row in the op table states every fact the compiler's passes
 * read (ir.h: cost class, roofline ceiling, in-place input, randomness, weight-gradient sink,
 * part in a linear's weight product, elementwise-chain row): no kind is left at a fact's "unset"
 * value, each value is one the readers know, and the facts agree with the row's own arity. The
 * readers (plan_util.c, ew_fuse.c, cost.c's class names) answer from the table. ADAMW's bytes
 * (the roofline's and the profile's) are what its kernel reads and writes per parameter. */
#include <stdio.h>
#include <string.h>

#include "passes/ew_fuse.h"
#include "plan/plan.h"

static int failures;
#define CHECK(k, c)                                                                                          \
  do {                                                                                                       \
    if (!(c)) {                                                                                              \
      fprintf(stderr, "%s:%d: op %s: CHECK(%s) failed\n", __FILE__, __LINE__, op_name(k), #c);               \
      failures++;                                                                                            \
    }                                                                                                        \
  } while (0)

/* Every fact set, and in range. */
static void check_set(OpKind k, const OpFacts *f) {
  CHECK(k, f->cost > COST_UNSET && f->cost < COST_NCLASS);
  /* the cuDNN classes are cost.c's reading of an attention op's attributes, never a row's */
  CHECK(k, f->cost != COST_ATTN_FWD_CUDNN && f->cost != COST_ATTN_BWD_CUDNN);
  CHECK(k, f->ceiling > CEIL_UNSET && f->ceiling <= CEIL_GEMM_FP8);
  CHECK(k, f->inplace > INPLACE_UNSET && f->inplace <= INPLACE_IN1);
  CHECK(k, f->rng > RNG_UNSET && f->rng <= RNG_ATTN_DROPOUT);
  CHECK(k, f->sink > SINK_UNSET && f->sink <= SINK_YES);
  CHECK(k, f->matmul > MATMUL_UNSET && f->matmul <= MATMUL_WGRAD);
  CHECK(k, f->ew != NULL);
}

/* The facts fit the row: an in-place input exists and the op has an output 0; a chain member has
 * one output and reads inputs it always has; an attention-dropout op is an attention op. */
static void check_consistent(OpKind k, const OpInfo *row) {
  const OpFacts *f = &row->facts;
  if (f->inplace == INPLACE_IN0 || f->inplace == INPLACE_IN1) {
    int in = f->inplace == INPLACE_IN0 ? 0 : 1;
    CHECK(k, in < row->nin_min && row->nout >= 1);
  }
  if (f->ew && f->ew->expr) {
    CHECK(k, row->nout == 1 && f->ew->nval >= 1 && f->ew->nval <= row->nin_min);
    CHECK(k, f->ew->scalars && f->ew->setup && f->ew->group);
  } else if (f->ew) {
    CHECK(k, f->ew == &OP_EW_NONE);
  }
  if (f->rng == RNG_ATTN_DROPOUT) CHECK(k, f->ceiling == CEIL_ATTN);
  if (f->ceiling == CEIL_ATTN) CHECK(k, f->cost == COST_ATTN_FWD || f->cost == COST_ATTN_BWD);
  if (f->matmul != MATMUL_NONE) CHECK(k, f->ceiling == CEIL_GEMM || f->ceiling == CEIL_GEMM_FP8);
  if (f->ceiling == CEIL_GEMM_FP8) CHECK(k, f->cost == COST_GEMM_FP8);
}

/* The readers answer from the table. */
static void check_readers(OpKind k, const OpInfo *row) {
  const OpFacts *f = &row->facts;
  Op op;
  memset(&op, 0, sizeof op);
  op.kind = k;
  op.nin = row->nin_min;
  int want = f->inplace == INPLACE_IN0 ? 0 : f->inplace == INPLACE_IN1 ? 1 : -1;
  CHECK(k, plan_op_inplace_input(&op, 0) == want);
  CHECK(k, plan_op_inplace_input(&op, 1) == -1);
  CHECK(k, plan_op_uses_rng(NULL, &op) == (f->rng == RNG_ALWAYS));
  op.a.f[1] = 0.1f; /* attention dropout on */
  CHECK(k, plan_op_uses_rng(NULL, &op) == (f->rng == RNG_ALWAYS || f->rng == RNG_ATTN_DROPOUT));
  CHECK(k, ew_pointwise(k) == (f->ew && f->ew->expr != NULL));
  CHECK(k, strcmp(cost_class_name(f->cost), "?") != 0 && strcmp(cost_class_name(f->cost), "unset") != 0);
}

/* A few rows pinned to the values the passes had as switches before the table carried them, so a
 * slip in a row shows here as well as in the plans. */
static const struct {
  OpKind k;
  OpFacts want; /* ew: non-NULL for a chain member */
} KNOWN[] = {
    {OP_SWIGLU, {COST_ACTIVATION, CEIL_DRAM, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_SWIGLU_BWD, {COST_ACTIVATION, CEIL_DRAM, INPLACE_IN1, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_RELU_ACT, {COST_OTHER, CEIL_DRAM, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_ADD, {COST_ELEMENTWISE, CEIL_DRAM, INPLACE_IN0, RNG_NONE, SINK_NO, MATMUL_NONE, NULL}},
    {OP_DROPOUT, {COST_ELEMENTWISE, CEIL_DRAM, INPLACE_IN0, RNG_ALWAYS, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_DROPOUT_BWD, {COST_ELEMENTWISE, CEIL_DRAM, INPLACE_IN0, RNG_NONE, SINK_NO, MATMUL_NONE, NULL}},
    {OP_CROSS_ENTROPY_BWD, {COST_LOSS, CEIL_DRAM, INPLACE_IN1, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_LINEAR_CROSS_ENTROPY,
     {COST_GEMM, CEIL_DRAM, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_LINEAR_CROSS_ENTROPY_BWD,
     {COST_GEMM, CEIL_DRAM, INPLACE_NONE, RNG_NONE, SINK_YES, MATMUL_NONE, &OP_EW_NONE}},
    {OP_LINEAR_DGRAD, {COST_GEMM, CEIL_GEMM, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_DGRAD, &OP_EW_NONE}},
    {OP_GROUPED_LINEAR_WGRAD,
     {COST_GROUPED_GEMM, CEIL_GEMM, INPLACE_NONE, RNG_NONE, SINK_YES, MATMUL_WGRAD, &OP_EW_NONE}},
    {OP_ATTN_PV, {COST_GEMM, CEIL_GEMM, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_FLASH_ATTN_DV,
     {COST_ATTN_FWD, CEIL_ATTN, INPLACE_NONE, RNG_ATTN_DROPOUT, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_FLASH_ATTN_BWD,
     {COST_ATTN_BWD, CEIL_ATTN, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_RMSNORM_BWD, {COST_NORM, CEIL_DRAM, INPLACE_NONE, RNG_NONE, SINK_YES, MATMUL_NONE, &OP_EW_NONE}},
    {OP_HEAD_SPLIT, {COST_MOE_ROUTING, CEIL_DRAM, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_MAMBA_SCAN, {COST_MAMBA_FWD, CEIL_DRAM, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_MAMBA_MIXER_BWD,
     {COST_MAMBA_BWD, CEIL_GEMM, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
    {OP_MAMBA_GROUP_NORM_BWD,
     {COST_MAMBA_GATE_NORM, CEIL_DRAM, INPLACE_NONE, RNG_NONE, SINK_NO, MATMUL_NONE, &OP_EW_NONE}},
};

static void check_known(void) {
  for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++) {
    const OpFacts *f = &op_info(KNOWN[i].k)->facts, *w = &KNOWN[i].want;
    CHECK(KNOWN[i].k, f->cost == w->cost && f->ceiling == w->ceiling && f->inplace == w->inplace);
    CHECK(KNOWN[i].k, f->rng == w->rng && f->sink == w->sink && f->matmul == w->matmul);
    CHECK(KNOWN[i].k, (f->ew == &OP_EW_NONE) == (w->ew == &OP_EW_NONE));
  }
}

/* ADAMW's bytes are its kernel's traffic (kernels/optimizer.cuh adamw_element): per element it
 * loads grad[i], m[i], v[i] and master[i] (4 x 4 B) and stores m, v, master (3 x 4 B) and the bf16
 * param (2 B): 30 B; with an fp32 parameter (no master) it loads 4 and stores 3 fp32 words: 28 B.
 * Plus the three scalars (coef, lr, step) read once. */
static void check_adamw_bytes(void) {
  for (int fp32 = 0; fp32 < 2; fp32++) {
    Graph *g = graph_new();
    int64_t n = 1000, one = 1;
    int p = graph_tensor(g, "w", fp32 ? DT_F32 : DT_BF16, ROLE_PARAM, 1, &n);
    int gr = graph_tensor(g, "w.grad", DT_F32, ROLE_GRAD, 1, &n);
    int m = graph_tensor(g, "w.exp_avg", DT_F32, ROLE_OPTIM, 1, &n);
    int v = graph_tensor(g, "w.exp_avg_sq", DT_F32, ROLE_OPTIM, 1, &n);
    int ms = graph_tensor(g, "w.master", DT_F32, ROLE_MASTER, 1, &n);
    int coef = graph_tensor(g, "coef", DT_F32, ROLE_OPTIM, 1, &one), lr = graph_tensor(g, "lr", DT_F32, ROLE_OPTIM, 1, &one),
        step = graph_tensor(g, "step", DT_F32, ROLE_OPTIM, 1, &one);
    int in[4] = {gr, coef, lr, step}, out[4] = {p, m, v, ms};
    int o = graph_op_into(g, OP_ADAMW, in, 4, out, fp32 ? 3 : 4, NULL);
    double want = (double)n * (fp32 ? 28 : 30) + 3 * 4;
    CHECK(OP_ADAMW, o >= 0 && op_bytes(g, &g->op[o]) == want);
    if (o >= 0 && op_bytes(g, &g->op[o]) != want)
      fprintf(stderr, "adamw (%s param): %.0f bytes, the kernel moves %.0f\n", fp32 ? "fp32" : "bf16",
              op_bytes(g, &g->op[o]), want);
    graph_free(g);
  }
}

int main(void) {
  check_adamw_bytes();
  for (int k = 0; k < OP_COUNT; k++) {
    const OpInfo *f = op_info((OpKind)k);
    if (!f || !f->name) {
      fprintf(stderr, "op kind %d has no table row\n", k);
      failures++;
      continue;
    }
    check_set((OpKind)k, &f->facts);
    check_consistent((OpKind)k, f);
    check_readers((OpKind)k, f);
  }
  check_known();
  if (failures)
    fprintf(stderr, "%d failures\n", failures);
  else
    printf("op facts: %d kinds, every fact set\n", OP_COUNT);
  return failures != 0;
}
