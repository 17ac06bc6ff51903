/* program.h — the launch program: a compiled step's CUDA work as data, in step.img.
 *
 * `stepc build` lowers every scheduled op to records (compiler/codegen/launch/: the kernel of the
 * shipped cubin with its grid, block, shared memory and typed arguments; a cuBLASLt matmul with
 * every field of the call; a cuDNN fused attention call; a memset or a device copy) and stores
 * them here with the facts the runtime needs to drive them. runtime/cuda/player.c plays them:
 * eagerly, captured whole or per scope. The runtime lowers nothing and needs no IR to play.
 *
 * Addresses: the step has one device allocation — the memory plan's buffers, then the launch
 * scratch (both sized by the compiler; `stepc plan` reports them). A pointer argument or field is
 * stored as LP_PTR | its offset in that allocation (0 stays a null pointer); the player adds the
 * allocation's base. Every other argument is stored as its bits.
 *
 * Sections, each a range of records (first, count):
 *  - point q (the image's program order: point_op[q] is its op): what that op launches (none when
 *    the compiler fused it into another op's launch);
 *  - the initialisation: zero the plan's buffers, initialise every parameter (and master) as the
 *    CPU executor does, reading train.seed from the init_seed slot the player writes first; the
 *    records that write a master are named (init_master), so that a rank of the distributed
 *    optimizer writes only the masters it holds (lp_init_rec);
 *  - begin(mb) / end(mb): copy micro-batch mb's staged tokens, targets and dropout seed into the
 *    fixed slots the step's ops read, and its loss out to its slot;
 *  - hparams(q): for an AdamW point, the hyper-parameter launch it makes before its update (a
 *    distributed-optimizer rank that does not own the tensor plays only this);
 *  - eval(q): for a forward point of the micro program, what it launches in an evaluation
 *    (stepc_eval: begin(mb), every micro point's eval(q), end(mb)): its op lowered with dropout
 *    off and the chunked output layer's loss without its fused backward, so that nothing writes a
 *    gradient, optimizer state or a parameter; empty for every other point. A step whose forward
 *    cannot be played so has no eval section (has_eval 0, eval_refusal says why).
 *  - alt(q): attention_backend=auto (LP_ATTN_AUTO): an attention point's op lowered to stepc's own
 *    flash kernels, where rec(q) is its cuDNN call. The player picks one lowering for the whole
 *    program at open: cuDNN when it loads and has an engine for every attention shape, else every
 *    alt(q) (runtime/cuda/player.c). Empty at every other point and in every other program.
 * The multi-tensor tables (kernels/launch.h) are data: written into the scratch at open; a rank of
 * the distributed optimizer masks rows it does not own (LpRow) and writes them again. So are the TMA
 * tensor maps (rt.h RtTmap): the driver encodes each at open, over the relocated address, into its
 * 128 bytes of the scratch, which the kernels that take it read. */
#ifndef STEPC_PROGRAM_H
#define STEPC_PROGRAM_H

#include <stdint.h>

#include "runtime/rt.h"

#define LP_PTR (1ull << 63)
#define LP_MAX_ARGS 24

/* RT_REC_FORK / RT_REC_JOIN (no fields): the tensor-parallel communication stream waits for everything
 * enqueued on the step's stream so far / the step's stream waits for everything enqueued on the
 * communication stream so far. Between them a collective with RtColl.side = 1 runs on that stream,
 * concurrently with the step's own launches (compiler/passes/schedule.c: schedule_comm_windows). */
typedef enum {
  RT_REC_LAUNCH,
  RT_REC_GEMM,
  RT_REC_MEMSET,
  RT_REC_COPY,
  RT_REC_SDPA,
  RT_REC_COLL,
  RT_REC_FORK,
  RT_REC_JOIN
} RtRecKind;

/* One record: a call with its arguments (a recording device's entry, runtime/record.h, and a
 * program's, pointers then relocated as above). */
typedef struct {
  RtRecKind kind;
  int op; /* the op it was recorded for (-1: none); informative */
  /* RT_REC_LAUNCH */
  RtKernel k;
  unsigned grid[3], block, smem;
  int nargs;
  uint64_t arg[LP_MAX_ARGS]; /* each argument's bits (4-byte ones in the low half), by rt_ksig */
  /* RT_REC_GEMM */
  RtGemm gemm;
  /* RT_REC_SDPA */
  RtSdpa sdpa;
  /* RT_REC_COLL: a collective over the rank's TP (or EP) group, through the communicator the API
   * layer gives the device (rt.h RtCollOps) */
  RtColl coll;
  /* RT_REC_MEMSET (dst, bytes), RT_REC_COPY (dst <- src, bytes) */
  CUdeviceptr dst, src;
  uint64_t bytes;
} RtRec;

typedef struct {
  int32_t first, count;
} LpRange;

/* Which attention lowerings a program holds (LpFacts.attn): none (no attention op, or unfused
 * attention), stepc's flash kernels only (attention_backend=flash), cuDNN calls only (fused, or auto
 * with a shape only cuDNN runs: a value head dim unlike the query's), or cuDNN with the flash
 * alternative at every attention point (auto). */
enum { LP_ATTN_NONE = 0, LP_ATTN_FLASH = 1, LP_ATTN_CUDNN = 2, LP_ATTN_AUTO = 3 };

/* Per program point. */
typedef struct {
  LpRange rec;     /* its launches */
  LpRange hparams; /* AdamW: the hyper-parameter launch alone; else empty */
  LpRange eval;    /* a forward point of the micro program: its evaluation's launches; else empty */
  int32_t alone;   /* 1: its launches are its op's alone (no fused group): a rank may skip them */
  int32_t pad;
  int64_t norm_first, norm_count; /* GRAD_SUMSQ: its slice of the global-norm partials (floats); else 0 */
  LpRange alt; /* LP_ATTN_AUTO: rec's op on stepc's flash kernels (played instead when cuDNN has no engine) */
  LpRange solo; /* a point that also runs alone (model.fp8_param's cast of a master after open, init
                   or a load: runtime/api.c api_fp8_param_casts) whose rec reads an amax its producer
                   folded in the step (the master's AdamW): its op with its own amax pass; else empty */
} LpPoint;

/* A row of a multi-tensor table: the word holding the row's element count (a row with count 0
 * does nothing) and the gradient tensor it updates or sums. */
typedef struct {
  int64_t word; /* index into the tables' words */
  int32_t tensor;
  int32_t adamw; /* 1 an AdamW row, 0 a norm row */
} LpRow;

/* An initialisation record that writes a parameter's fp32 master (compiler/codegen/launch/exec.c
 * rt_exec_init_param: init_normal, init_normal_tp or init_ones, the master in its f32 argument, the
 * bf16 param in its b16 one; an fp32 param is its own master: model.fp8_param's primary weights,
 * the MoE router's). With the distributed optimizer (ZeRO-1) the masters live in the
 * optimizer-state region, where each owner packs the state it holds from offset 0, so the masters
 * of tensors other ranks own share offsets with this rank's: a rank plays such a record with that
 * argument null (the kernels skip a null f32) for every master it does not hold (lp_init_rec). */
typedef struct {
  int32_t rec;    /* the record (in the initialisation's range) */
  int32_t arg;    /* its argument holding the master's address (a pointer, 'p' in rt_ksig) */
  int32_t tensor; /* the master (ROLE_MASTER), or the fp32 param itself (ROLE_PARAM) */
  int32_t pad;    /* 0 */
} LpInitMaster;

/* The scratch's parts (compiler/codegen/launch/exec.h's RT_SCRATCH_* order), for reports. */
#define LP_SCRATCH_PARTS 13
extern const char *const lp_scratch_part_name[LP_SCRATCH_PARTS];

typedef struct {
  int64_t alloc_bytes;   /* the one device allocation: the plan's buffers, then the scratch */
  int64_t buffers_bytes; /* its first part: the plan's buffers (what the initialisation zeroes) */
  int64_t scratch_bytes; /* the launch scratch */
  int64_t part_at[LP_SCRATCH_PARTS],
      part_bytes[LP_SCRATCH_PARTS]; /* each part: offset in the allocation, bytes */
  int64_t ntok;                     /* tokens per micro-batch (B*T) */
  int32_t nmb;                      /* micro-batches */
  int32_t sm_count;                 /* the SM count grids and partial sums were sized for */
  int64_t inputs_at, seeds_at, losses_at, init_seed_at; /* offsets in the allocation */
  int64_t
      loss_den_at; /* the step's loss denominator (fp32, 4 bytes; ir/ops/loss.c), staged with the inputs */
  int64_t norm_at, norm_count; /* the global-norm partials: offset, floats */
  int64_t tables_at, ntable;   /* the multi-tensor tables: offset, words */
  int64_t attn_workspace;      /* the cuDNN attention workspace the shapes predict (bytes) */
  int64_t eval_token_at;       /* the loss op's per-token losses (ntok fp32) after its eval launch; -1 none */
  int32_t has_eval;            /* 1: the points' eval ranges hold the evaluation */
  int32_t eval_alt_ok; /* 1: every flash alternative (attention_backend=auto) of a forward point is also its
                          evaluation (no attention dropout to turn off), so an evaluation after a cuDNN
                          fallback plays it; 0: such an evaluation is refused */
  char eval_refusal[256]; /* has_eval 0: why the forward cannot be played as an evaluation */
  LpRange init;
  int32_t nrec, nrow;
  int32_t attn;     /* LP_ATTN_*: the attention lowerings the records hold */
  int32_t attn_pad; /* 0 */
  int64_t tmaps_at; /* the TMA tensor maps' RT_TMAP_BYTES each, in LaunchProgram.tmap's order: offset */
  int64_t ntmap;
  int32_t ninit_master, init_master_pad; /* LaunchProgram.init_master's rows; 0 */
} LpFacts;

typedef struct {
  LpFacts f;
  RtRec *rec;
  LpPoint *point;     /* npoints (the image's) */
  LpRange *micro;     /* 2 * nmb: begin(mb) at 2 mb, end(mb) at 2 mb + 1 */
  int64_t *tensor_at; /* per tensor: its offset in the allocation (after the compiler's aliasing), -1 none */
  uint64_t *table;    /* ntable words */
  LpRow *row;
  RtTmap *tmap; /* ntmap: what the player encodes into the scratch at open (ptr relocated: LP_PTR | offset) */
  LpInitMaster *init_master; /* ninit_master, in record order */
} LaunchProgram;

void lp_free(LaunchProgram *lp);
/* The libraries a machine must have to run the program on CUDA, derived from its records: libcuda
 * and cuBLASLt always (the runtime opens both), cuDNN 9 where it holds cuDNN attention calls (with
 * what happens without an engine: auto falls back, fused refuses), NCCL where the step is planned for
 * dp_size > 1 data-parallel ranks. One line into buf (no newline); its length. */
int lp_runtime_libs(const LaunchProgram *lp, int dp_size, char *buf, size_t n);
/* The address slots of record r — a launch's arguments whose signature letter (sig, the kernel's
 * row) is 'p', a GEMM's or an attention call's pointer fields, a memset's or copy's ends — as
 * pointers into r, in slot (room for LP_MAX_ARGS); their count. What relocates, plays and checks a
 * record walks these. */
int lp_rec_addrs(RtRec *r, const char *sig, uint64_t **slot);
/* Record i of lp as a rank plays it, in *out: the record, with the master argument of an
 * initialisation record that writes a master (LpInitMaster) set to 0 (a null pointer) when the rank
 * does not hold that master (held[tensor] == 0; held NULL: it holds every tensor). The one rule
 * runtime/cuda/player.c plays the initialisation by and tests/api/zero_play.c simulates. 1 when it
 * nulled an argument, else 0. */
int lp_init_rec(const LaunchProgram *lp, int i, const uint8_t *held, RtRec *out);

#endif
