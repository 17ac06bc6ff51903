/* plan.h — from a lowered step Graph to a Plan: recompute regions and their replays
 * (recompute.c), CUDA-graph scopes and the containment check (scope.c), one linear schedule
 * (schedule.c), liveness and arena offsets (memplan.c), per-rank memory by sharding rules
 * (memrank.c), and cost (cost.c). plan_build (plan.c) runs them in order.
 *
 * Units: bytes at nominal dtypes (bf16 = 2) unless a function takes `float_bytes` (the CPU
 * executor stores floats in 4 or 8 bytes). Nothing here prints or exits; errors come back as a
 * return code with a message, rule violations as diagnostics (diag.h). */
#ifndef STEPC_PLAN_H
#define STEPC_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/spec.h"
#include "ir.h"
#include "passes/ew_fuse.h"
#include "passes/fusions.h"
#include "passes/pipesplit.h"
#include "runtime/cpu/program.h"
#include "runtime/image.h"
#include "runtime/program.h"
#include "validate/diag.h"

/* ---- plan_util.c ---- */
/* Permutes g's ops into order[0..g->nop) (a permutation of op ids) and fixes every op id held in
 * the graph (Tensor.producer, IrTags.fwd). 0, or -1 with g->err. */
int graph_reorder(Graph *g, const int *order);
/* Whether the op draws random numbers (dropout, attention with dropout). */
bool plan_op_uses_rng(const Graph *g, const Op *op);
/* The input index whose storage output `out` may reuse in place (elementwise kernels that read
 * element i before writing element i), or -1. */
int plan_op_inplace_input(const Op *op, int out);
/* Parses "80GiB", "80GB", "1.5e9" into bytes; -1 when malformed. */
int64_t plan_parse_bytes(const char *s);

/* ---- recompute.c ---- */
typedef struct {
  uint32_t labels; /* IR_LABEL_* of selective recompute (0 = none) */
  bool full;       /* recompute_granularity = full */
  bool block;      /* full: method block (else uniform) */
  int num_layers;  /* full: recompute_num_layers */
  PipeSplit split; /* full recompute groups layers per pipeline stage and virtual chunk */
} RecomputeConfig;

void recompute_config_from_spec(const Spec *s, RecomputeConfig *c);

/* A checkpoint region: forward ops [first, last] (contiguous), one label (or full recompute). */
typedef struct {
  int label;           /* label bit index (0 = core_attn), or -1 for full-layer recompute */
  bool output_discard; /* moe_act, layernorm, mla_up_proj: the output is freed too */
  int layer, layer_last;
  int first, last;     /* forward op ids */
  int outer;           /* the outermost active region containing this one (itself if none) */
  int nfreed;          /* tensors this region's replay unit rebuilds (for the outermost only) */
  int64_t freed_bytes; /* their nominal bytes */
  int nreplay;         /* replay ops (outermost only) */
  double replay_flops;
  int replay_first, replay_last; /* op ids of the replay (after placement), -1 if none */
  int trigger;                   /* the backward op the replay is placed before, -1 if none */
  bool rng;                      /* the replay draws random numbers */
} Region;

typedef struct {
  Region *r;
  int n;
  int nfreed_total;
  int64_t freed_bytes_total;
  int nreplay_total;
  double replay_flops_total;
} RecomputeResult;

/* Marks the regions on g, frees what they free and places replays (phase IR_PHASE_REPLAY, clones
 * of the forward ops with tags.fwd = the original) right before the first backward use of what
 * they rebuild; backward readers are rewired to the replay's fresh tensors. Forward op ids are
 * unchanged. 0, or -1 with err. */
int recompute_apply(Graph *g, const RecomputeConfig *c, RecomputeResult *res, char *err, size_t nerr);
void recompute_result_free(RecomputeResult *res);
const char *recompute_region_name(const Region *r, char *buf, size_t n); /* "core_attn@3", "full@0-1" */

/* ---- schedule.c ---- */
typedef enum { SCHED_OP, SCHED_BUCKET } SchedKind;

typedef struct {
  int64_t bytes;  /* gradient bytes reduced (fp32 main grads) */
  int64_t params; /* elements */
  int ngrads;
  int first;    /* its gradients are grad[first .. first + ngrads) of the Schedule */
  int after_op; /* placed after this backward op (last micro-batch only) */
  int fire_op;  /* the op whose CUDA launch last writes its gradients once the fusions are
                   decided (schedule_bucket_fire): where the CUDA runtime enqueues its
                   reduction; -1 until then */
} Bucket;

typedef struct {
  SchedKind kind;
  int id; /* op id or bucket id */
} SchedItem;

/* One rank's order. The micro program [0, micro_end) runs once per micro-batch (forward, then
 * backward with replays; PP = 1 gradient accumulation), the tail [micro_end, n) once per step
 * (gradient reduction, clipping, optimizer). Buckets sit in the micro program after the op that
 * completes them and fire on the last micro-batch. */
typedef struct {
  SchedItem *it;
  int n, micro_end;
  int *pos; /* op id -> position in it[], -1 if not scheduled */
  int nops; /* SCHED_OP items */
  Bucket *b;
  int nb;
  int *grad; /* main-gradient tensor ids in the order backward completes them */
  int ngrad;
  int nmicro;
  int64_t bucket_params; /* Megatron's DDP bucket size in elements */
  int dp;                /* data-parallel ranks (spec_data_parallel_size) */
  int tp, ep;            /* tensor- and expert-parallel ranks (1 unless a per-rank build asks for more) */
  /* expert-data-parallel ranks (dp x tp / ep with ETP 1: the ranks holding the same experts); job
   * rank w (dp_rank x tp + tp_rank) is data-parallel rank w / tp and expert-data-parallel rank w / ep */
  int edp;
  /* the distributed optimizer (optimizer.use_distributed_optimizer, Megatron's ZeRO-1), else NULL:
   * per tensor, the rank that owns it — a main gradient, its param, master and moments — or -1
   * (not sharded: activations, the optimizer's scalars, a gradient outside every bucket). Each
   * bucket is cut into dp equal ranges of its elements, at whole-tensor granularity: a gradient
   * belongs to the rank whose range holds its first element; an AdamW op's outputs follow its
   * gradient. Under expert parallelism an expert's state (graph_expert_state) is cut the same
   * way over the edp expert-data-parallel ranks: its owner is an expert-data-parallel rank. */
  int *owner;
  /* the communication stream (comm_overlap.c), after comm_overlap_windows: per op id, for a tensor-parallel
   * backward collective that runs on the communication stream, the program point after whose launches the
   * step's stream waits for it; -1 for every other op (NULL before the windows are placed) */
  int *comm_end;
  int ncomm; /* such collectives */
} Schedule;

int schedule_build(const Graph *g, const Spec *s, Schedule *sc, char *err, size_t nerr);
/* After the fusion pass (fuse.h): each bucket's fire_op. The CPU executor runs every op on its
 * own, so there a bucket is complete after after_op; the CUDA executor runs the fusions, which
 * move a gradient's write into another launch — into its producer's kernel for a weight gradient
 * sunk into its main gradient (earlier), into the op that runs the fused group absorbing the
 * writer (later). fire_op is the last, in the micro program's order, of the launches that write
 * any of the bucket's gradients. 0, or -1 with err naming a gradient no launch writes. */
int schedule_bucket_fire(const Graph *g, const Fusions *fz, Schedule *sc, char *err, size_t nerr);
void schedule_free(Schedule *sc);

/* ---- scope.c ---- */
typedef enum { SCOPE_NONE, SCOPE_LOCAL, SCOPE_TE, SCOPE_FULL_ITERATION } ScopeImpl;

/* A captured run of the schedule: positions [first, last] of Schedule.it. */
typedef struct {
  int scope; /* IR_SCOPE_* bit index, or -1 for the full iteration */
  int layer;
  Phase phase; /* forward, or backward (backward + its replays) */
  int first, last;
  int nstatic; /* tensors produced inside and read outside: static graph outputs */
  int64_t static_bytes;
} ScopeInst;

typedef struct {
  ScopeImpl impl;
  uint32_t modules; /* IR_SCOPE_* selected (per-layer impls) */
  ScopeInst *s;
  int n;
  uint8_t *is_static; /* per tensor: a static graph output (pinned for the step) */
  int64_t static_bytes;
} ScopeResult;

/* Maps cuda_graph_impl / cuda_graph_modules onto the schedule (docs/megatron-rules.md §2.2). */
int scope_build(const Graph *g, const Spec *s, const Schedule *sc, ScopeResult *out, char *err, size_t nerr);
/* The containment and RNG checks (STEPC-40..43); returns the number of errors added. */
int scope_check(const Graph *g, const Spec *s, const Schedule *sc, const RecomputeResult *rr,
                const ScopeResult *sr, DiagList *d);
void scope_free(ScopeResult *sr);

/* ---- comm_overlap.c: tensor parallelism's backward collectives beside the weight-gradient GEMMs ---- */
/* Moves each backward collective of an activation gradient (TP_SCATTER; TP_ALLREDUCE of an activation
 * gradient) to right after the op producing its input, ahead of the independent ops between them (the
 * weight gradient). On the lowered graph, before recompute_apply. 0, or -1 with err. */
int comm_overlap_order(Graph *g, char *err, size_t nerr);
/* After the fusions and the buckets' fire points: which of those collectives run on the communication
 * stream and where the step's stream joins each (Schedule.comm_end). 0, or -1 with err. */
int comm_overlap_windows(const Graph *g, const Fusions *fz, const ScopeResult *sr, Schedule *sc, char *err,
                         size_t nerr);

/* ---- memplan.c ---- */
/* roles + static graph buffers + the distributed optimizer's staging (MemPlan.zstage_bytes) */
enum { MEM_ROLE_GRAPH = ROLE_COUNT, MEM_ROLE_ZERO_STAGING, MEM_NROLES };

typedef struct {
  int ntensors;
  int npos;         /* program points: micro program ops, then tail ops */
  int *start, *end; /* per tensor: first and last program point it is live (-1: never) */
  int *slot;        /* per tensor: storage slot (in-place reuse shares one) */
  int64_t *size;    /* per tensor: bytes */
  int64_t *offset;  /* per tensor: arena offset */
  int64_t arena;    /* arena bytes */
  int64_t peak;     /* max over program points of live bytes */
  int peak_pos;
  int64_t *live;      /* per program point: live bytes */
  int64_t *live_role; /* npos x MEM_NROLES: live bytes by role */
  int ninplace;
  int64_t persistent; /* params, grads, masters, optimizer state, static graph buffers (in the arena) */
  /* The distributed optimizer's region (buffer 1; Schedule.owner set): the fp32 masters and Adam
   * moments (the optimizer's scalars stay in the arena), each rank's packed from offset 0 — first
   * the state every rank holds (owner -1), then the rank's own tensors in id order, each at
   * MEMPLAN_REGION_ALIGN. A tensor's offset is the one its owner gives it, the same number on every
   * rank; a rank holds only its own (the runtime gives the others 0 bytes), so the region's size
   * is the largest rank's shard (under EP: the data-parallel ranks' shards, then the experts' after the
   * largest of them, each expert-data-parallel rank's from there). The region is live for the whole step:
   * live[] and peak count it whole, live_role its largest rank's masters and moments. */
  uint8_t *buffer;       /* per tensor: 0 the arena, 1 the region */
  int *owner;            /* per tensor: Schedule.owner's copy (NULL without a region) */
  int64_t region;        /* bytes per rank (0: no region) */
  int64_t region_common; /* bytes every rank holds (the state of gradients outside every bucket) */
  int64_t *shard;        /* per job rank (dp x tp of them): the bytes of the region it holds */
  int nshard;
  int tp, ep;      /* Schedule's: job rank w holds data-parallel rank w / tp's and expert-DP rank w / ep's */
  int region_rank; /* the job rank whose shard is the region (the lowest of the largest) */
  /* The distributed optimizer's staging on cuda (runtime/zero_coll.h: each bucket's gradients packed
   * owner by owner and reduce-scattered there, the params all-gathered through it): in the device plan
   * (float_bytes 0) of a Schedule.owner step with buckets, an arena slot of no tensor's, zc_staging_bytes
   * bytes (the same on every rank), live from the point after the first bucket's fire point (the last
   * micro-batch's backward, where most activations are free) to the last point (the params' gather follows
   * the tail). Counted in live[] and peak, in live_role as MEM_ROLE_ZERO_STAGING. 0 bytes: none. */
  int64_t zstage_bytes, zstage_offset;
  int zstage_start;
} MemPlan;

#define MEMPLAN_REGION_ALIGN                                                                                 \
  16 /* the CUDA executor's slot alignment; no padding between fp32 tensors of 4k elements */

/* Liveness over the schedule and best-fit offsets in one arena. float_bytes: 0 nominal, 4/8 CPU.
 * The fusions fz (fusions.h) keep a fused group's tensors live across the group and, in the device
 * plan (float_bytes 0), give a sunk weight gradient no bytes. sr may be NULL. 0, or -1 with err. */
int memplan_build(const Graph *g, const Fusions *fz, const Schedule *sc, const ScopeResult *sr,
                  int float_bytes, MemPlan *mp, char *err, size_t nerr);
/* Writes (buffer, offset, bytes) into every tensor and the buffers' sizes into g (the arena; the
 * region, when there is one). */
void memplan_apply(Graph *g, const MemPlan *mp);
/* Checks the invariants: no two live slots overlap, the peak is the max live sum, every tensor
 * fits the arena. 0, or -1 with a message. */
int memplan_verify(const Graph *g, const MemPlan *mp, char *err, size_t nerr);
void memplan_free(MemPlan *mp);
/* The role a tensor's bytes are reported under (MEM_ROLE_GRAPH for static graph outputs). */
int memplan_role(const Graph *g, const ScopeResult *sr, int t);
const char *memplan_role_name(int role);

/* ---- memrank.c: per-rank memory by sharding rules ---- */
typedef struct {
  char name[48]; /* "pp0 (first stage)" */
  int stage;
  double weights, grads, optimizer; /* bytes: params, main grads, master + moments at Megatron's dtypes */
  double activations;               /* peak activation bytes incl. micro-batches in flight */
  double saved_per_micro;           /* activations held from forward to backward, one micro-batch */
  double inflight;                  /* micro-batches (in units of the stage's layers) in flight */
  double workspace;
  double graph_buffers;
  double max_allocated;   /* predicted: max(forward/backward peak, optimizer_step) */
  double optimizer_step;  /* Megatron's optimizer step: persistent state + its fp32 grad copies + workspace */
  double first_iteration; /* max allocated over the first iteration, whose forward/backward runs before the
                           * Adam moments exist (created inside its optimizer step) */
  double after_iteration[2]; /* the peak max allocated Megatron prints after iterations 1 and 2, when TE's
                              * graphs may not be captured yet (memrank_capture_iteration) */
  /* device memory the rank holds outside PyTorch's caching allocator, which max_memory_allocated does
   * not see (memrank.c, outside_allocator): */
  double hybridep_buffers; /* HybridEP's dispatch/combine buffers (DeepEP's own cudaMalloc) */
  double nccl_buffers;     /* NCCL's ring connection buffers of the communicators the step uses */
  double device_total;     /* max_allocated + the items above: what the fits verdict compares */
  int64_t params;          /* elements on this rank */
  int layer_first, layer_last;
} RankMem;

typedef struct {
  int tp, pp, vpp, cp, ep, etp, dp;
  bool sp, dist_opt;
  RankMem r[3]; /* first stage, last stage (when PP > 1), middle (when PP > 2) */
  int n;
  double usable; /* train.usable_device_memory_gib in bytes; 0 when the recipe gives none */
} RankReport;

int memrank_build(const Graph *g, const Fusions *fz, const Spec *s, const Schedule *sc, const ScopeResult *sr,
                  const MemPlan *mp, RankReport *rr, char *err, size_t nerr);
/* memrank_build, and each reported rank's one-micro-batch transient bytes (activations, their
 * gradients, workspace tensors, the loss's fp32 copy) at every program point into curve (3 x
 * mp->npos doubles, rank k at k * mp->npos): the curve whose maximum is RankMem.activations less
 * the other micro-batches in flight ((inflight - 1) x saved_per_micro). */
int memrank_curves(const Graph *g, const Fusions *fz, const Spec *s, const Schedule *sc,
                   const ScopeResult *sr, const MemPlan *mp, RankReport *rr, double *curve, char *err,
                   size_t nerr);
/* The first iteration (1-based) that runs with the recipe's CUDA graphs and their static buffers. */
int memrank_capture_iteration(const Spec *s);
/* Fills rr's after_iteration from rr (the step with its graphs) and eager (the same step planned
 * without them; NULL when the graphs change nothing). */
void memrank_readings(const Spec *s, RankReport *rr, const RankReport *eager);

/* ---- cost.c ---- */
/* CostClass: ir.h (an op's class is a fact of its op table row). */
const char *cost_class_name(CostClass c);
/* Its class as fused: a LINEAR+ADD pair a GEMM, ADD+norm and norm backward+ADD a norm. */
CostClass cost_op_class(const Graph *g, const Fusions *fz, int op);

typedef struct {
  double gemm_flops_per_s;     /* H200 bf16 GEMM at layer shapes */
  double gemm_fp8_flops_per_s; /* H200 fp8 GEMM (twice the bf16 tensor-core rate) */
  double attn_flops_per_s;     /* fused / flash attention */
  double bytes_per_s;          /* DRAM */
  double launch_s;             /* per-op overhead */
  /* measured time / roofline time per class on this device (1: the roofline), from a profile
   * (`stepc run --profile`); the calibration data is kept in the repository (cost.c says where) */
  double class_scale[COST_NCLASS];
  const char *calibration; /* where the scales come from */
} Device;
void cost_device_h200(Device *d);
/* The roofline alone (every class_scale 1): what a profile compares against. */
void cost_device_h200_roofline(Device *d);
/* One op's predicted seconds (a fused group's: at its last op, the group's sum; an absorbed op: 0),
 * its FLOPs and bytes. */
double cost_op_time(const Graph *g, const Fusions *fz, int op, const Device *d, double *flops, double *bytes);

typedef struct {
  double *op_time; /* per op: seconds */
  double flops[IR_PHASE_COUNT], bytes[IR_PHASE_COUNT],
      time[IR_PHASE_COUNT]; /* one micro-batch (fwd/bwd/replay) or step (others) */
  double step_flops, step_time, step_bytes;
  double model_flops;               /* the bench's convention: 6 (params + head) tokens + causal attention */
  double replay_flops, replay_time; /* per step */
} Cost;

int cost_build(const Graph *g, const Fusions *fz, const Spec *s, const Device *d, Cost *c);
void cost_free(Cost *c);

/* ---- program.c ---- */
/* The step's program as the runtime runs it (runtime/cpu/program.h): schedule order, the micro
 * points first, and with mp (NULL: nothing poisoned) the tensors whose slots die after each point.
 * 0, or -1 out of memory; plan_program_free after. */
typedef struct {
  CpuProgram p;
  int32_t *point_op, *poison_start, *poison;
  int npoison;
} PlanProgram;
int plan_program_build(const Graph *g, const Schedule *sc, const MemPlan *mp, PlanProgram *out);
void plan_program_free(PlanProgram *pp);
/* The scope instances of sr as program-point ranges (out has room for sr->n); their count, or -1
 * out of memory. */
int plan_scope_points(const Schedule *sc, const ScopeResult *sr, ImgScope *out);

/* ---- plan.c ---- */
/* The planned step, one for every verb: check's graph checks, plan, sweep and trace report it,
 * build writes it (plan.json, step.img with its launch program) and run runs what build wrote. Lowered,
 * recompute applied, scheduled, graph scopes built (their static outputs pinned) and checked, fusions
 * decided (Plan.fz, beside the graph), buckets fired, memory planned, verified and applied to the graph
 * (Tensor.offset), then the per-rank report and the cost. */
typedef struct {
  Spec spec;
  Graph *g;
  RecomputeConfig rc;
  RecomputeResult rr;
  Schedule sc;
  ScopeResult sr;
  Fusions *fz;  /* the fusion decisions about g (fuse.h; NULL before fuse_build), the plan's own */
  EwKernels ew; /* the generated kernels of the fused chains (fuse.h) */
  MemPlan mp;
  RankReport rank;
  Cost cost;
  Device dev;
  /* the CUDA plan's launch program (float_bytes 0; compiler/codegen/launch/program.h), lowered for
   * sm_count SMs: its scratch is part of the step's memory. lp_ok 0: the CUDA backend does not run
   * the step (lp_why says why). */
  LaunchProgram lp;
  int lp_ok, sm_count;
  char lp_why[512];
  double build_s; /* wall time of plan_build */
} Plan;

enum { PLAN_OK = 0, PLAN_ERROR = -1, PLAN_UNSUPPORTED = -2 };

/* Lowers the validated Spec and runs every pass; scope violations go to d (may be NULL).
 * float_bytes as in memplan_build: 0 nominal dtypes (reports and the GPU), 4 the CPU executor's
 * fp32. Returns PLAN_OK, PLAN_UNSUPPORTED (lowering not available for this architecture) or
 * PLAN_ERROR, with err; free with plan_free (also after a failure). */
int plan_build(const Spec *s, int float_bytes, Plan *p, DiagList *d, char *err, size_t nerr);
/* plan_build with the launch program lowered for sm_count SMs (stepc build --sms; plan_build uses
 * LAUNCH_DEFAULT_SMS). */
int plan_build_for(const Spec *s, int float_bytes, int sm_count, Plan *p, DiagList *d, char *err,
                   size_t nerr);
/* FNV-1a of a launch program's records and facts, as 16 hex digits into hex[17] (returned). */
const char *program_digest_hex(const LaunchProgram *lp, char hex[17]);
/* The step's device memory at its peak: the memory plan's peak, the launch scratch and, where the
 * CUDA backend runs the step, the libraries' workspaces the runtime opens (cuBLASLt's
 * RT_BLAS_WORKSPACE_BYTES, cuDNN attention's as the shapes predict). The arena and the
 * optimizer-state region rather than the peak of live bytes: the runtime allocates the whole arena,
 * holes included (memplan.c leaves none in the shapes measured). */
int64_t plan_device_peak(const Plan *p);
void plan_free(Plan *p);
/* What `stepc check` adds to the field rules: lower, place regions and scopes, run scope_check.
 * When the model cannot be lowered, a STEPC-44 note says the graph checks did not run. */
int plan_check(const Spec *s, DiagList *d);

#endif
