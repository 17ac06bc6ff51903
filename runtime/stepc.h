/* stepc.h — the public C API for embedding a compiled training step in a trainer.
 *
 * A step comes from an artifact directory written by `stepc build SPEC -o DIR` (step.img,
 * kernels.sm_90.cubin, libstep.so, ...): link the artifact's libstep.so (SONAME libstep.so; this
 * header is the whole of what it exports) or dlopen it. The same calls run the step on the GPU
 * (the planned arena, eager, one captured full-iteration CUDA graph, or scoped graphs) or on the
 * CPU reference executor (fp32, the same schedule, freed memory poisoned). Opening needs neither
 * stepc, Lua nor NVRTC.
 *
 *   stepc_options o = stepc_options_default();
 *   o.device = STEPC_DEVICE_CPU;
 *   stepc_t *s;
 *   if (stepc_open("art/tiny", &o, &s) != STEPC_OK) { puts(stepc_last_error(s)); stepc_close(s); }
 *   stepc_init_params(s, 1234);                  // or stepc_load_params / stepc_load_checkpoint
 *   for (...) {
 *     stepc_bind_batch(s, tokens, targets);      // optional: else the recipe's data (mock or data.path);
 *                                                 // stepc_bind_batch_device for device buffers
 *     stepc_step(s, &st);                        // all micro-batches, then clip + AdamW
 *   }
 *   stepc_eval(s, val_tokens, val_targets, n, &val_loss, NULL); // a validation loss, no update
 *   stepc_save_checkpoint(s, "ckpt");
 *   stepc_close(s);
 *
 * Rules of the house: every function returns a stepc_status; on failure the handle keeps a
 * message (stepc_last_error) until the next call that fails. The library never prints, never
 * exits and never aborts on bad input. A handle is not thread-safe: use it from one thread at a
 * time. C11; link an artifact's libstep.so (or, in stepc's build tree, libstepc_rt + libstepc_ir). */
#ifndef STEPC_H
#define STEPC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STEPC_API_VERSION 8

typedef enum {
  STEPC_OK = 0,
  STEPC_ERR_ARGUMENT = 1,    /* a NULL pointer, a size that does not match the step, a bad option */
  STEPC_ERR_RECIPE = 2,      /* the recipe cannot be loaded or breaks a rule (the message lists why) */
  STEPC_ERR_UNSUPPORTED = 3, /* the step needs something this backend does not run (names the op) */
  STEPC_ERR_NO_DEVICE = 4,   /* device cuda: no CUDA driver or no GPU here */
  STEPC_ERR_IO = 5,          /* a file cannot be read or written, or is malformed */
  STEPC_ERR_MISMATCH = 6,    /* a checkpoint or artifact that belongs to another step */
  STEPC_ERR_RUNTIME = 7,     /* a driver, cuBLASLt or executor failure; a non-finite loss */
  STEPC_ERR_NOMEM = 8,
} stepc_status;

typedef enum {
  STEPC_DEVICE_AUTO = 0, /* cuda when a GPU is there, else the CPU reference executor */
  STEPC_DEVICE_CUDA = 1,
  STEPC_DEVICE_CPU = 2,
} stepc_device;

typedef struct {
  stepc_device device;
  int cpu_threads; /* CPU executor threads; 0 = 2 (results do not depend on it) */
  int graph_mode;  /* cuda: -1 the recipe's model.cuda_graph_impl, 0 eager, 1 full_iteration,
                      2 scoped (one graph per scope instance: local / transformer_engine) */
  /* Data parallel (docs/data-parallel.md). With world_size > 1 (or dp_join), stepc_open joins the
     job: rank 0 listens at master_addr:master_port (that address only), the others connect there,
     each proving the job secret, which every rank reads from STEPC_JOB_SECRET in its environment
     (with world_size > 1 a rank without one is refused at open, STEPC_ERR_ARGUMENT); every rank
     must open an artifact planned for world_size data-parallel ranks, the same one (refused at
     open otherwise). Each rank then draws its own micro-batches, the buckets' main gradients are
     averaged over the ranks as backward completes them on the last micro-batch, and every rank
     takes the same optimizer step. stepc_options_from_env fills these from a launcher. */
  int rank;              /* this process's data-parallel rank, 0 .. world_size-1 */
  int world_size;        /* ranks in the job; 0 or 1: this process alone */
  int local_rank;        /* cuda: the GPU ordinal on this host */
  int dp_join;           /* 1: join a communicator even when alone (NCCL with one rank, in the graph) */
  int master_port;       /* the rendezvous' TCP port (rank 0 listens there) */
  double comm_timeout_s; /* the bound on every wait for another rank; 0: 300 s; negative, NaN,
                            infinite or above 86400: refused at open (STEPC_ERR_ARGUMENT) */
  char master_addr[256]; /* rank 0's host name or address */
  /* cuda (API 8): how each GEMM shape's cuBLASLt algorithm is chosen. 0 (the default): cuBLASLt's
     first-ranked, the same in every session of the same GPU and library. 2 to 16: at open, the
     first gemm_tuning that cuBLASLt ranks are each timed on the step's own shapes and the fastest
     kept for the session (a second or so at open; docs/gpu-runtime.md gives what it gains). Its choice rests
     on timings, so two sessions may choose differently and their bits differ; within a session replay,
     recompute and graphs stay bitwise equal. Not with model.deterministic_mode if runs must repeat bit for
     bit. Other values, or any but 0 on the cpu device, are refused at open (STEPC_ERR_ARGUMENT). */
  int gemm_tuning;
} stepc_options;

/* The defaults: device AUTO, 2 threads, the recipe's graph mode, one rank. */
stepc_options stepc_options_default(void);
/* Fills o's rank, world_size, local_rank, master_addr and master_port from the launcher's
 * environment: torchrun's RANK / WORLD_SIZE / LOCAL_RANK, else Open MPI's OMPI_COMM_WORLD_RANK /
 * _SIZE / _LOCAL_RANK, else Slurm's SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID; MASTER_ADDR and
 * MASTER_PORT (default 127.0.0.1:29500). STEPC_OK: a launcher was found (o filled; dp_join set when it has
 * more than one rank) or none was (o unchanged: one rank); STEPC_ERR_ARGUMENT: its values are malformed (a
 * rank outside the world, not a number, MASTER_PORT not a port; o unchanged). */
stepc_status stepc_options_from_env(stepc_options *o);

typedef struct stepc stepc_t; /* opaque */

/* ---- opening ---- */
/* Opens the artifact directory `dir`: its step image (step.img) and, on cuda, its cubin. No
 * recipe is read and nothing is compiled. On any status but STEPC_ERR_NOMEM, *out is a handle to
 * read the message from and to close, even on failure; use it for nothing else after a failed
 * open. */
stepc_status stepc_open(const char *dir, const stepc_options *opt, stepc_t **out);
void stepc_close(stepc_t *s);
/* The message of the last failure ("" when none). Valid until the next call on s. */
const char *stepc_last_error(const stepc_t *s);
/* What stepc_open chose that the caller should tell its user ("" when nothing), one line: the
 * attention fallback of an attention_backend=auto artifact on cuda, where cuDNN cannot be loaded
 * or has no engine for a shape and stepc's own flash kernels run attention instead; and, with
 * gemm_tuning, how many GEMM shapes were tuned and how many of them run another algorithm than
 * cuBLASLt's first-ranked (API 8). The library never prints it. Valid until stepc_close. */
const char *stepc_notice(const stepc_t *s);
const char *stepc_status_name(stepc_status st);
/* STEPC_API_VERSION of the library (API 8): what a caller loading an artifact's libstep.so
 * checks before it sets a field that older libraries do not read (stepc_options.gemm_tuning). */
int stepc_api_version(void);

/* ---- what the step is ---- */
typedef struct {
  const char *device;       /* "cuda" or "cpu" */
  const char *gpu;          /* the GPU's name on cuda, "" on cpu */
  const char *graph_mode;   /* "eager", "full_iteration", "scoped" (cuda) or "cpu" */
  int64_t micro_batch_size; /* sequences per micro-batch */
  int64_t seq_length;       /* tokens per sequence */
  int64_t num_microbatches; /* micro-batches per step (global_batch_size / micro_batch_size) */
  int64_t vocab_size;
  int64_t parameters; /* parameter elements */
  uint64_t seed;      /* train.seed */
  int64_t train_iters;
  int64_t step;              /* optimizer steps taken (restored by stepc_load_checkpoint) */
  int64_t points;            /* program points (scheduled ops): the micro-batch program's, then the tail's */
  int64_t micro_points;      /* how many of them run once per micro-batch */
  int rank;                  /* this process's data-parallel rank */
  int world_size;            /* the data-parallel ranks the artifact was planned for (and runs with) */
  int distributed_optimizer; /* 1: optimizer state sharded over the ranks (ZeRO-1) */
  int pad;
  const char *comm; /* the collectives: "none" (alone), "host" (cpu: TCP, sums in rank order), "nccl",
                       "host-staged (ranks share a GPU)" (cuda tensor parallelism: runtime/coll_host.h) */
} stepc_info;
stepc_status stepc_get_info(const stepc_t *s, stepc_info *info);

/* ---- parameters ---- */
/* Weights from the seed (normal(0, 0.02), output projections scaled, norms 1, biases 0: the same
 * on cpu and cuda); optimizer state, gradients and the step counter to zero. */
stepc_status stepc_init_params(stepc_t *s, uint64_t seed);
/* Parameters alone (the model, no optimizer state) as safetensors: tensor names are the
 * parameter paths ("layers.0.self_attention.linear_qkv.weight"), dtypes the step's (BF16 for
 * bf16 recipes). Loading takes F32 or BF16 for any float tensor; the fp32 master weights are set
 * from the loaded values. Every parameter must be in the file, with its shape, and the file may
 * hold no other tensor (STEPC_ERR_MISMATCH: another step's file); no step fingerprint is compared,
 * so weights carry into another step of the same shapes (stepc import's files load here). Saving
 * replaces only an absent path or a regular file (a symbolic link, a directory, a device, a FIFO:
 * STEPC_ERR_IO, left as they are); a path that is not a regular file is not read (STEPC_ERR_IO).
 * Data parallel: every rank loads, then the ranks compare their files' checksums. */
stepc_status stepc_save_params(stepc_t *s, const char *path);
stepc_status stepc_load_params(stepc_t *s, const char *path);

/* ---- checkpoints: parameters, optimizer state, step counter, RNG and data position ----
 * dir/model.safetensors (as stepc_save_params), dir/optimizer.safetensors (fp32 master weights,
 * Adam moments, the optimizer's step/lr/norm scalars), dir/state.json (step, seed, data source).
 * A resumed run continues bitwise as the uninterrupted one would have (same device).
 * Saving replaces dir only when it is absent, an empty directory or a stepc checkpoint (its
 * state.json and only a checkpoint's files); anything else is STEPC_ERR_IO and left untouched.
 * Loading refuses (STEPC_ERR_MISMATCH) a checkpoint of another step: another step fingerprint
 * (unless only the plain-DP world size differs), a tensor missing or extra, another seed or
 * layout. Data parallel: after a load the ranks compare (status, step, state.json checksum) and
 * all refuse when one failed or they differ, naming each rank's values. docs/c-api.md. */
stepc_status stepc_save_checkpoint(stepc_t *s, const char *dir);
stepc_status stepc_load_checkpoint(stepc_t *s, const char *dir);

/* ---- data ---- */
/* Binds the next step's batch: num_microbatches * micro_batch_size * seq_length int32 tokens
 * and as many targets (the next token; a target outside [0, vocab), -100 for one, masks its token:
 * see stepc_step for the loss), micro-batch major. `count` is that element count (checked). The buffers are
 * copied; the binding holds for one stepc_step. Without a binding a step draws from the recipe's data (mock
 * tokens from train.seed, or data.path windows), a pure function of (seed, step). */
stepc_status stepc_bind_batch(stepc_t *s, const int32_t *tokens, const int32_t *targets, size_t count);
/* The same from device memory (cuda only; ERR_UNSUPPORTED on the cpu device): tokens and targets
 * are CUDA device addresses of int32 buffers in the device's primary context (cudaMalloc'd by a
 * runtime-API trainer, for instance), laid out as for stepc_bind_batch. Nothing is copied at bind:
 * the next stepc_step copies them on the device, on stepc's stream, before its work — the caller's
 * writes to them must be complete (synchronise the producing stream) and the buffers must stay
 * valid until that stepc_step returns. Token values are not checked (that would need a copy to the
 * host); one outside [0, vocab) embeds as a zero row. A target outside masks its token, as on the
 * host path; the step copies the targets to the host to count the kept ones (stepc_step). */
stepc_status stepc_bind_batch_device(stepc_t *s, const void *tokens, const void *targets, size_t count);

/* ---- stepping ---- */
typedef struct {
  int64_t step;     /* 1-based, after this step */
  double loss;      /* sum of the kept tokens' losses over the global batch / their count */
  double lr;        /* the learning rate this step used */
  double grad_norm; /* global L2 norm of the gradient before clipping */
  double ms;        /* cuda: the step's GPU time (events); cpu: wall time */
  int replayed;     /* cuda full_iteration: this step was a graph replay */
} stepc_step_stats;
/* One optimizer step: every micro-batch's forward and backward (gradients accumulate), the
 * global norm, clipping and AdamW. The loss is Megatron's: the kept tokens' cross entropies summed
 * over the global batch (every micro-batch, every rank) / the number of kept tokens in it, and the
 * gradients are that loss's. A global batch that masks every target is STEPC_ERR_ARGUMENT before
 * anything runs: parameters, optimizer state and step count unchanged. A non-finite loss is
 * STEPC_ERR_RUNTIME. Data parallel: grad_norm is that of the averaged gradients (the same on
 * every rank); a rank that failed, exited or hangs makes this STEPC_ERR_RUNTIME within the
 * communicator's timeout, naming the rank. */
stepc_status stepc_step(stepc_t *s, stepc_step_stats *st);

/* The evaluation of a batch (API 7): the loss the next stepc_step would report on it before its update
 * (the same micro-batches, each its forward alone), with no update: no gradient is written, no
 * optimizer state, parameter, step counter, data position or RNG stream changes, so the next
 * stepc_step is bitwise what it would have been without the call, and a binding made for it still
 * holds. Dropout is off (p = 0: every element kept, as a framework's eval mode), so on a recipe with
 * dropout the loss is the deterministic one, not a training step's. tokens and targets are laid out
 * as for stepc_bind_batch (count elements, checked; a target outside [0, vocab), -100 say, is
 * ignored); they are read during the call only. *loss (may be NULL) receives the mean over the
 * micro-batches of each one's loss, exactly as stepc_step_stats.loss (with MoE layers it includes
 * their load-balancing loss). logprobs (NULL: not wanted) receives count floats: each token's
 * log-probability of its target, log softmax(logits)[target] = -(the token's loss), as the
 * step's loss kernel computes it (fp32; on cuda from the bf16 logits), and 0 for an ignored target.
 * The device runs the artifact's evaluation section eagerly (cuda, in every graph mode: the launch
 * program's forward points lowered with dropout off and the fused output-layer loss without its
 * backward; an artifact whose forward cannot be played alone refuses with STEPC_ERR_UNSUPPORTED
 * and the reason); cpu, the micro program's forward ops. Data parallel: every rank calls it with
 * its own micro-batches, and *loss is the mean over every rank's. Under fp8 delayed scaling the
 * casts use the step's current scales and record no amax; a step of several micro-batches rescales
 * its inputs' casts between them and an evaluation does not (nor does Transformer Engine's no-grad
 * forward), so there the loss is not the step's (docs/fp8.md). */
stepc_status stepc_eval(stepc_t *s, const int32_t *tokens, const int32_t *targets, size_t count, double *loss,
                        float *logprobs);

/* One optimizer step as stepc_step, run eagerly (a graph mode is not used for it; the step
 * counts like any other) with the time of every program point measured: ms[q] receives point q's
 * time, summed over the step's micro-batches (cuda: CUDA events around each point, so each op's
 * GPU time including its launch gap; cpu: wall time). n is ms's length, at least
 * stepc_info.points. The artifact's step.img names the op each point runs. */
stepc_status stepc_profile_step(stepc_t *s, stepc_step_stats *st, double *ms, int64_t n);

/* The timeline of the last stepc_profile_step (API 4): one span per program point and micro-batch
 * on the step's stream, and one per collective of a data-parallel step on the communication
 * stream, each from the step's start. cuda: CUDA events (the point spans as stepc_profile_step
 * measures them; a collective's two events recorded on the communication stream around it, so
 * its span is when it ran there, beside the backward still running on the step's stream); cpu:
 * wall time, the host collectives run between the points (nothing overlaps). *n receives the
 * number of spans; the first min(cap, *n) are written (spans may be NULL with cap 0). */
typedef enum {
  STEPC_SPAN_POINT = 0,   /* id: the program point; micro: its micro-batch, -1 in the tail */
  STEPC_SPAN_BUCKET = 1,  /* id: the gradient bucket (its all-reduce, or ZeRO-1's reduce to the owners) */
  STEPC_SPAN_NORM = 2,    /* ZeRO-1: the gradient norm's per-tensor sums exchanged */
  STEPC_SPAN_PARAMS = 3,  /* ZeRO-1: the updated parameters sent from their owners */
  STEPC_SPAN_TP_COLL = 4, /* id: the program point of a tensor-parallel backward collective run on the
                             launch program's communication stream (stream 2) beside the weight-gradient
                             GEMM; micro: its micro-batch */
} stepc_span_kind;
typedef struct {
  int32_t kind;            /* stepc_span_kind */
  int32_t stream;          /* 0 the step's stream, 1 the communication stream (the data-parallel
                              collectives), 2 the launch program's (STEPC_SPAN_TP_COLL) */
  int32_t id, micro;       /* as the kind says; -1 when none */
  double start_ms, end_ms; /* from the step's start */
} stepc_span;
stepc_status stepc_profile_timeline(stepc_t *s, stepc_span *spans, int64_t cap, int64_t *n);

/* ---- measurements ---- */
typedef struct {
  double last_step_ms;            /* as stepc_step_stats.ms */
  int64_t max_allocated_bytes;    /* cuda: peak of stepc's own cuMemAlloc (the step's allocation +
                                     cuBLASLt and cuDNN workspaces); cpu: the fp32 arena + region */
  int64_t arena_bytes;            /* the planned memory as allocated: cuda, the step's one
                                     allocation (the arena, with the distributed optimizer the
                                     optimizer-state region, then the launch scratch); cpu, the fp32
                                     arena and region */
  int64_t predicted_peak_bytes;   /* cuda: the memory plan's peak (the region counted whole) +
                                     the launch scratch + cuBLASLt and cuDNN workspaces; cpu: the
                                     fp32 plan's peak */
  int64_t replay_ops;             /* recompute replay ops per micro-batch */
  int64_t graph_nodes;            /* nodes of the captured full-iteration graph, 0 if none */
  int64_t optimizer_state_bytes;  /* master weights and Adam moments this rank holds, at their
                                     nominal dtypes: all of them, or with the distributed optimizer
                                     this rank's shard (memrank.c predicts 12/DP bytes per
                                     parameter) */
  int64_t optimizer_region_bytes; /* API 5. The distributed optimizer's region as allocated on
                                    every rank (part of arena_bytes): the largest rank's shard,
                                    padded (stepc plan prints it and each rank's); 0 without it */
} stepc_measure;
stepc_status stepc_get_measure(stepc_t *s, stepc_measure *m);

#ifdef __cplusplus
}
#endif
#endif
