/* spec.h — the Spec: a recipe's every field, typed and defaulted, with where it was set.
 *
 * The field lists below are the single source of truth: the struct members, the field table the
 * frontend fills from Lua, the defaults, and docs/recipe-reference.md (`stepc fields --markdown`)
 * are all generated from them. Field names are Megatron Core's wherever the concept exists there
 * (flag MC); fields that are stepc's own carry flag SC.
 *
 * X(name, TYPE, default, flags, choices, doc)
 *   TYPE     INT (int64), NUM (double), BOOL, STR (string or null), LIST (list of strings),
 *            FREQ (Megatron's moe_layer_freq: an int N, every N-th layer is MoE, or a 0/1 list)
 *   default  a value in override syntax: "1", "0.1", "true", "RMSNorm", "[]", "null" ("required": no default)
 *   choices  "a|b|c" for STR/LIST fields restricted to a set, "" otherwise
 */
#ifndef STEPC_SPEC_H
#define STEPC_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPEC_LABELS "core_attn|moe_act|layernorm|mla_up_proj|mlp|moe|shared_experts|gdn_norm_out|mlp_act"
#define SPEC_GRAPH_MODULES "attn|mlp|moe|moe_router|moe_preprocess|mamba|full|full_iteration"

#define SPEC_MODEL_FIELDS(X)                                                                                 \
  X(num_layers, INT, "required", MC, "", "Transformer layers (for hybrid models: the pattern length)")       \
  X(hidden_size, INT, "required", MC, "", "Model width h")                                                   \
  X(num_attention_heads, INT, "required", MC, "", "Attention heads a")                                       \
  X(num_query_groups, INT, "null", MC, "", "Key/value heads g for GQA; null means num_attention_heads")      \
  X(kv_channels, INT, "null", MC, "", "Head dim d; null means hidden_size / num_attention_heads")            \
  X(ffn_hidden_size, INT, "null", MC, "", "Dense MLP width; null means 4 * hidden_size")                     \
  X(normalization, STR, "LayerNorm", MC, "LayerNorm|RMSNorm", "Norm kind")                                   \
  X(layernorm_epsilon, NUM, "1e-5", MC, "", "Norm epsilon")                                                  \
  X(gated_linear_unit, BOOL, "false", MC, "", "GLU MLP: SwiGLU with activation_func=silu, GeGLU with gelu")  \
  X(activation_func, STR, "gelu", MC, "gelu|silu|relu|squared_relu",                                         \
    "MLP activation (Megatron takes a callable; stepc its name)")                                            \
  X(add_bias_linear, BOOL, "true", MC, "", "Biases in the linear layers")                                    \
  X(position_embedding_type, STR, "learned_absolute", MC, "learned_absolute|rope|none",                      \
    "Position embedding (GPTModel argument in Megatron)")                                                    \
  X(rotary_base, NUM, "10000", MC, "", "RoPE base")                                                          \
  X(rope_scaling, BOOL, "false", MC, "",                                                                     \
    "Llama 3 RoPE frequency scaling (low_freq_factor 1, high_freq_factor 4, original context 8192)")         \
  X(rope_scaling_factor, NUM, "8.0", MC, "", "Llama 3 RoPE scaling factor (with rope_scaling=true)")         \
  X(attention_dropout, NUM, "0.1", MC, "", "Dropout on attention probabilities")                             \
  X(hidden_dropout, NUM, "0.1", MC, "", "Dropout before each residual add")                                  \
  X(attention_backend, STR, "auto", MC, "auto|flash|fused|unfused",                                          \
    "unfused materialises scores; flash keeps Q,K,V,O,LSE; fused is cuDNN; auto picks")                      \
  X(deterministic_mode, BOOL, "false", MC, "",                                                               \
    "Deterministic kernels only: the attention backward without atomics — under attention_backend=auto "   \
    "stepc's own at head dim 64 (no workspace), else cuDNN's deterministic one (slower, a (B,H,T,T) bf16 "   \
    "workspace)")                                                                                            \
  X(share_embeddings_and_output_weights, BOOL, "false", MC, "", "Tie the output head to the embedding")      \
  X(vocab_size, INT, "required", MC, "", "Vocabulary size")                                                  \
  X(seq_length, INT, "required", MC, "", "Sequence length s")                                                \
  X(bf16, BOOL, "true", MC, "", "bf16 compute with fp32 master weights (stepc's default is true)")           \
  X(multi_latent_attention, BOOL, "false", MC, "", "Multi-latent attention (MLA)")                           \
  X(q_lora_rank, INT, "null", MC, "", "MLA query low-rank dim; null means a full q projection")              \
  X(kv_lora_rank, INT, "512", MC, "", "MLA compressed kv dim")                                               \
  X(qk_head_dim, INT, "128", MC, "", "MLA q/k head dim without the rope part")                               \
  X(qk_pos_emb_head_dim, INT, "64", MC, "", "MLA q/k rope head dim")                                         \
  X(v_head_dim, INT, "128", MC, "", "MLA value head dim")                                                    \
  X(num_moe_experts, INT, "null", MC, "", "Routed experts; null means a dense model")                        \
  X(moe_router_topk, INT, "2", MC, "", "Experts per token")                                                  \
  X(moe_ffn_hidden_size, INT, "null", MC, "", "Expert MLP width; null means ffn_hidden_size")                \
  X(moe_layer_freq, FREQ, "1", MC, "", "Every N-th layer is MoE (int), or a 0/1 list per layer")             \
  X(moe_grouped_gemm, BOOL, "false", MC, "", "Grouped GEMM for the experts")                                 \
  X(moe_shared_expert_intermediate_size, INT, "null", MC, "", "Shared-expert width; null means none")        \
  X(moe_shared_expert_overlap, BOOL, "false", MC, "", "Overlap shared experts with dispatch")                \
  X(moe_token_dispatcher_type, STR, "allgather", MC, "allgather|alltoall|flex", "Token dispatcher")          \
  X(moe_flex_dispatcher_backend, STR, "deepep", MC, "deepep|hybridep",                                       \
    "Backend of the flex dispatcher; per-rank report: HybridEP's own buffers count outside PyTorch's "       \
    "allocator")                                                                                             \
  X(moe_expert_capacity_factor, NUM, "null", MC, "", "Capacity factor; null means no token dropping")        \
  X(moe_pad_expert_input_to_capacity, BOOL, "false", MC, "", "Pad each expert to capacity (drop-and-pad)")   \
  X(moe_input_jitter_eps, NUM, "null", MC, "", "Router input jitter")                                        \
  X(moe_router_padding_for_fp8, BOOL, "false", MC, "", "Pad routing map for fp8")                            \
  X(moe_aux_loss_coeff, NUM, "0", MC, "", "Load-balancing loss coefficient")                                 \
  X(overlap_moe_expert_parallel_comm, BOOL, "false", MC, "", "EP all-to-all overlap")                        \
  X(experimental_attention_variant, STR, "null", MC, "gdn|gdn2", "Gated DeltaNet attention variant")         \
  X(hybrid_override_pattern, STR, "null", MC, "",                                                            \
    "Hybrid layer pattern: M mamba, * attention, - MLP, E MoE (MambaModel argument)")                        \
  X(mamba_state_dim, INT, "128", MC, "", "Mamba SSM state dim")                                              \
  X(mamba_head_dim, INT, "64", MC, "", "Mamba head dim")                                                     \
  X(mamba_num_groups, INT, "8", MC, "", "Mamba groups")                                                      \
  X(mamba_num_heads, INT, "null", MC, "", "Mamba heads; null means 2 * hidden_size / mamba_head_dim")        \
  X(tensor_model_parallel_size, INT, "1", MC, "", "TP")                                                      \
  X(pipeline_model_parallel_size, INT, "1", MC, "", "PP")                                                    \
  X(virtual_pipeline_model_parallel_size, INT, "null", MC, "", "VPP chunks per pipeline rank")               \
  X(num_layers_in_first_pipeline_stage, INT, "null", MC, "",                                                 \
    "Layers of the first pipeline stage (uneven PP; Megatron-LM's --decoder-first-pipeline-num-layers)")     \
  X(num_layers_in_last_pipeline_stage, INT, "null", MC, "",                                                  \
    "Layers of the last pipeline stage (uneven PP; Megatron-LM's --decoder-last-pipeline-num-layers)")       \
  X(account_for_embedding_in_pipeline_split, BOOL, "false", MC, "",                                          \
    "The embedding counts as one layer in the pipeline split (the first stage builds one layer less)")       \
  X(account_for_loss_in_pipeline_split, BOOL, "false", MC, "",                                               \
    "The loss counts as one layer in the pipeline split (the last stage builds one layer less)")             \
  X(context_parallel_size, INT, "1", MC, "", "CP")                                                           \
  X(expert_model_parallel_size, INT, "1", MC, "", "EP")                                                      \
  X(expert_tensor_parallel_size, INT, "null", MC, "", "ETP; null means tensor_model_parallel_size")          \
  X(sequence_parallel, BOOL, "false", MC, "", "Sequence parallelism with TP")                                \
  X(fp8, STR, "null", MC, "e4m3|hybrid",                                                                     \
    "fp8 format; null means no fp8. Runs with fp8_recipe delayed or tensorwise (and fp8_param); routed "     \
    "experts per-expert scaled on the CPU device (no CUDA fp8 grouped GEMMs yet)")                           \
  X(fp8_recipe, STR, "delayed", MC, "delayed|tensorwise|mxfp8|blockwise|custom",                             \
    "fp8 scaling recipe; stepc executes delayed (TE's DelayedScaling) and tensorwise (current scaling)")     \
  X(fp8_margin, INT, "0", MC, "", "Delayed scaling: scale = fp8_max / amax / 2^fp8_margin")                  \
  X(fp8_amax_history_len, INT, "1", MC, "", "Delayed scaling: amax history length per fp8 tensor")           \
  X(fp8_amax_compute_algo, STR, "most_recent", MC, "most_recent|max",                                        \
    "Delayed scaling: the amax the scale uses, the newest entry of the history or its max")                  \
  X(first_last_layers_bf16, BOOL, "false", MC, "",                                                           \
    "Keep the first and last layers' linears in bf16 under fp8")                                             \
  X(num_layers_at_start_in_bf16, INT, "1", MC, "",                                                           \
    "Layers at the start kept in bf16 (first_last_layers_bf16)")                                             \
  X(num_layers_at_end_in_bf16, INT, "1", MC, "", "Layers at the end kept in bf16 (first_last_layers_bf16)")  \
  X(fp8_param, BOOL, "false", MC, "",                                                                        \
    "fp8 primary weights (Bridge's fp8_param_gather): the fp8 linears' fp32 masters cast to fp8 after each " \
    "step, no bf16 param (docs/fp8.md); with the distributed optimizer each master's owner casts it and "    \
    "the fp8 weights are gathered")                                                                          \
  X(recompute_granularity, STR, "null", MC, "full|selective", "Activation recompute granularity")            \
  X(recompute_method, STR, "null", MC, "uniform|block", "Full recompute method")                             \
  X(recompute_num_layers, INT, "null", MC, "", "Layers per group (uniform) or recomputed layers (block)")    \
  X(recompute_modules, LIST, "null", MC, SPEC_LABELS,                                                        \
    "Selective labels; null means [core_attn] as in Megatron")                                               \
  X(distribute_saved_activations, BOOL, "false", MC, "", "Split saved layer inputs across TP ranks")         \
  X(cpu_offloading, BOOL, "false", MC, "", "Offload activations to the host")                                \
  X(cpu_offloading_num_layers, INT, "0", MC, "", "Layers whose activations are offloaded")                   \
  X(cuda_graph_impl, STR, "none", MC, "none|local|transformer_engine|full_iteration",                        \
    "CUDA-graph implementation")                                                                             \
  X(cuda_graph_modules, LIST, "[]", MC, SPEC_GRAPH_MODULES,                                                  \
    "Per-layer graph scopes; [] means the whole layer")                                                      \
  X(cuda_graph_warmup_steps, INT, "3", MC, "", "Eager steps before capture")                                 \
  X(check_for_nan_in_loss_and_grad, BOOL, "true", MC, "", "NaN check on loss and gradients")                 \
  X(cross_entropy_loss_fusion, BOOL, "true", MC, "",                                                         \
    "Fused vocab-parallel cross entropy (Bridge's GPTModelProvider default; Megatron's dataclass "           \
    "default is false). Per-rank report only: the native and unfused paths keep an fp32 logits-sized "       \
    "tensor")                                                                                                \
  X(cross_entropy_fusion_impl, STR, "native", MC, "native|te",                                               \
    "Fused cross entropy: Megatron's own (native) or Transformer Engine's parallel_cross_entropy (te)")      \
  X(transformer_impl, STR, "transformer_engine", MC, "transformer_engine|local",                             \
    "Megatron's layer spec. transformer_engine fuses the attention input norm and the dense pre-MLP "        \
    "norm into the linear after them, so layernorm recompute skips them (MCORE-60); local keeps them "       \
    "separate norms that layernorm recompute discards and replays")                                          \
  X(attention_softmax_in_fp32, BOOL, "true", MC, "",                                                         \
    "Megatron's local DotProductAttention masks and softmaxes the bf16 scores in fp32 (Core's "              \
    "TransformerConfig default; Megatron-LM's CLI default is false). Per-rank report only: it keeps "        \
    "an fp32 softmax output per layer beside the bf16 probabilities")                                        \
  X(bias_activation_fusion, BOOL, "false", MC, "",                                                           \
    "Megatron's fused bias+activation (bias_swiglu/bias_gelu). Per-rank report of the local spec "           \
    "only: unfused, Megatron's GLU also keeps silu(x) and x_linear + offset")                                \
  X(transformer_engine_version, STR, "2.18.0", SC, "",                                                       \
    "The Transformer Engine release the Megatron job runs (MAJOR.MINOR[.PATCH]). Per-rank report only: "     \
    "before 2.18 TE's cross entropy writes the bf16 gradient into the logits, from 2.18 it keeps an fp32 "   \
    "one")                                                                                                   \
  X(output_layer_chunks, INT, "null", SC, "",                                                                \
    "The output layer and loss run over this many chunks of a micro-batch's tokens, one chunk's "            \
    "logits at a time (must divide micro_batch_size * seq_length; 1: the whole logits at once); "            \
    "null means the fewest chunks that divide the tokens and keep a chunk's logits within 512 MiB, "         \
    "on one GPU (world_size 1; more GPUs: 1, the per-rank report being Megatron's; "                         \
    "`train.force_parallel_lowering`: 1, the tensor-parallel output layer running whole)")

#define SPEC_TRAIN_FIELDS(X)                                                                                 \
  X(micro_batch_size, INT, "1", MC, "", "Sequences per micro-batch per data-parallel rank")                  \
  X(global_batch_size, INT, "null", MC, "", "Sequences per step; null means micro_batch_size * DP")          \
  X(train_iters, INT, "10", MC, "", "Training steps")                                                        \
  X(seed, INT, "1234", MC, "", "Seed for weights, dropout and mock data")                                    \
  X(world_size, INT, "1", SC, "", "GPUs in the job (the launcher's WORLD_SIZE in Megatron)")                 \
  X(megatron_job, BOOL, "null", SC, "",                                                                      \
    "The per-rank report predicts a Megatron-Core job of this recipe (true) or stepc's own step (false); "   \
    "null means true when world_size > 1. A Megatron job lowers as Megatron runs it (the output layer "      \
    "unchunked by default)")                                                                                 \
  X(usable_device_memory_gib, NUM, "null", SC, "",                                                           \
    "Device memory a rank's process may use (GiB, as PyTorch reports the GPU's total); the per-rank "        \
    "report's fits verdict")                                                                                 \
  X(force_parallel_lowering, BOOL, "false", SC, "",                                                          \
    "A build lowers tensor/sequence and expert parallelism even where their sizes are 1: the TP, SP and "    \
    "EP ops and their collectives over groups of one rank, so that one GPU runs a collective backend "       \
    "(NCCL included) through the code a multi-rank job plays. A check, not a speed-up")

#define SPEC_OPTIMIZER_FIELDS(X)                                                                             \
  X(optimizer, STR, "adam", MC, "adam", "Optimizer (AdamW, decoupled weight decay)")                         \
  X(lr, NUM, "3e-4", MC, "", "Peak learning rate")                                                           \
  X(min_lr, NUM, "0", MC, "", "Learning rate at the end of the decay")                                       \
  X(lr_warmup_iters, INT, "0", MC, "", "Linear warm-up steps")                                               \
  X(lr_decay_iters, INT, "null", MC, "", "Decay length; null means train_iters")                             \
  X(lr_decay_style, STR, "cosine", MC, "constant|linear|cosine", "Decay after warm-up")                      \
  X(weight_decay, NUM, "0.01", MC, "", "Decoupled weight decay")                                             \
  X(adam_beta1, NUM, "0.9", MC, "", "Adam beta1")                                                            \
  X(adam_beta2, NUM, "0.999", MC, "", "Adam beta2")                                                          \
  X(adam_eps, NUM, "1e-8", MC, "", "Adam epsilon")                                                           \
  X(clip_grad, NUM, "1.0", MC, "", "Clip by global gradient norm; 0 disables")                               \
  X(multi_tensor, BOOL, "true", SC, "",                                                                      \
    "One launch for the global gradient norm and one per AdamW setting (false: one per tensor, as a "        \
    "reference)")                                                                                            \
  X(use_distributed_optimizer, BOOL, "false", MC, "", "Shard master weights and moments over DP")            \
  X(use_precision_aware_optimizer, BOOL, "false", MC, "",                                                    \
    "TE FusedAdam keeps master weights and moments at the dtypes below (needs the distributed optimizer)")   \
  X(main_grads_dtype, STR, "fp32", MC, "fp32|bf16", "Gradients the optimizer reads (precision-aware only)")  \
  X(main_params_dtype, STR, "fp32", MC, "fp32|fp16", "Master weights (precision-aware only)")                \
  X(exp_avg_dtype, STR, "fp32", MC, "fp32|fp16|bf16|fp8", "Adam first moment (precision-aware only)")        \
  X(exp_avg_sq_dtype, STR, "fp32", MC, "fp32|fp16|bf16|fp8", "Adam second moment (precision-aware only)")    \
  X(store_param_remainders, BOOL, "true", MC, "",                                                            \
    "Precision-aware: keep only the 16 low bits of fp32 masters of bf16 params")

/* DistributedDataParallelConfig (Megatron-Bridge's cfg.ddp). */
#define SPEC_DDP_FIELDS(X)                                                                                   \
  X(grad_reduce_in_fp32, BOOL, "true", MC, "",                                                               \
    "fp32 gradient buffer (main grads); false keeps it in the param dtype. The dataclass default is "        \
    "false, but Megatron-LM forces true under bf16 and Bridge's bf16 mixed precision sets it")

#define SPEC_DATA_FIELDS(X)                                                                                  \
  X(mock, BOOL, "null", MC, "", "Mock tokens drawn from train.seed; null means true unless path is set")     \
  X(path, STR, "null", SC, "",                                                                               \
    "A text file read as bytes (vocab 256): any regular file you can read, read window by window (never "    \
    "held whole, never mapped)")

typedef enum {
  SPEC_SEC_MODEL,
  SPEC_SEC_TRAIN,
  SPEC_SEC_OPTIMIZER,
  SPEC_SEC_DDP,
  SPEC_SEC_DATA,
  SPEC_NSECTIONS
} SpecSection;
typedef enum { SPEC_T_INT, SPEC_T_NUM, SPEC_T_BOOL, SPEC_T_STR, SPEC_T_LIST, SPEC_T_FREQ } SpecType;

#define SPEC_MAX_LIST 16
#define SPEC_MAX_LAYERS 512
#define SPEC_MAX_STR 256

typedef struct {
  int n;
  char items[SPEC_MAX_LIST][32];
} SpecList;

typedef struct {
  int64_t every;                    /* > 0: every N-th layer is MoE, from layer 0; 0: use pattern */
  int n;                            /* pattern length when every == 0 */
  uint8_t pattern[SPEC_MAX_LAYERS]; /* 1 = MoE layer */
} SpecFreq;

typedef char SpecStr[SPEC_MAX_STR]; /* "" when null */

#define SPEC_CT_INT int64_t
#define SPEC_CT_NUM double
#define SPEC_CT_BOOL bool
#define SPEC_CT_STR SpecStr
#define SPEC_CT_LIST SpecList
#define SPEC_CT_FREQ SpecFreq
#define SPEC_MEMBER(name, type, def, flags, choices, doc) SPEC_CT_##type name;

typedef struct {
  SPEC_MODEL_FIELDS(SPEC_MEMBER)
} SpecModel;
typedef struct {
  SPEC_TRAIN_FIELDS(SPEC_MEMBER)
} SpecTrain;
typedef struct {
  SPEC_OPTIMIZER_FIELDS(SPEC_MEMBER)
} SpecOptimizer;
typedef struct {
  SPEC_DDP_FIELDS(SPEC_MEMBER)
} SpecDdp;
typedef struct {
  SPEC_DATA_FIELDS(SPEC_MEMBER)
} SpecData;

#define SPEC_ENUM_MODEL(name, ...) SPEC_F_model_##name,
#define SPEC_ENUM_TRAIN(name, ...) SPEC_F_train_##name,
#define SPEC_ENUM_OPTIMIZER(name, ...) SPEC_F_optimizer_##name,
#define SPEC_ENUM_DDP(name, ...) SPEC_F_ddp_##name,
#define SPEC_ENUM_DATA(name, ...) SPEC_F_data_##name,
typedef enum {
  SPEC_MODEL_FIELDS(SPEC_ENUM_MODEL) SPEC_TRAIN_FIELDS(SPEC_ENUM_TRAIN)
      SPEC_OPTIMIZER_FIELDS(SPEC_ENUM_OPTIMIZER) SPEC_DDP_FIELDS(SPEC_ENUM_DDP)
          SPEC_DATA_FIELDS(SPEC_ENUM_DATA) SPEC_NFIELDS
} SpecFieldId;

typedef struct {
  SpecSection section;
  const char *name; /* "hidden_size" */
  const char *path; /* "model.hidden_size" */
  SpecType type;
  const char *def;     /* default in override syntax; "required" or "null" */
  bool megatron;       /* the name is Megatron Core's */
  const char *choices; /* "a|b|c" or "" */
  const char *doc;
  size_t offset; /* into Spec */
} SpecField;

typedef struct Spec {
  SpecModel model;
  SpecTrain train;
  SpecOptimizer optimizer;
  SpecDdp ddp;
  SpecData data;
  bool present[SPEC_NFIELDS];   /* false: null (Megatron's None) */
  char where[SPEC_NFIELDS][96]; /* "models/x.lua:12", "override model.fp8=null", "" = default */
  char recipe_path[SPEC_MAX_STR];
  /* Not a recipe field: the build of an artifact sets it to lower one rank's step (its TP shard,
   * compiler/lower/lower.c) instead of the single-rank math that `stepc plan` and `check` model. */
  bool per_rank;
} Spec;

extern const SpecField spec_fields[SPEC_NFIELDS];
extern const char *const spec_section_names[SPEC_NSECTIONS];

/* Field lookup within one section by bare name; -1 when unknown. */
int spec_field_find_in(SpecSection sec, const char *name);
/* Closest known name (edit distance) for a did-you-mean; NULL when nothing is close. */
const char *spec_suggest(SpecSection sec, const char *name);
size_t spec_edit_distance(const char *a, const char *b);
/* Pointer to a field's storage inside a Spec. */
void *spec_field_ptr(Spec *s, int id);
const void *spec_field_cptr(const Spec *s, int id);
/* Whether value `v` is one of a field's choices (always true when the field has none). */
bool spec_choice_ok(const SpecField *f, const char *v);

/* Convenience predicates on the Spec used by the validator and lowering. */
bool spec_list_has(const SpecList *l, const char *item);
int64_t spec_num_query_groups(const Spec *s);
int64_t spec_kv_channels(const Spec *s);
int64_t spec_ffn_hidden_size(const Spec *s);
int64_t spec_moe_ffn_hidden_size(const Spec *s);
bool spec_is_moe(const Spec *s);
/* Whether a build (Spec.per_rank) lowers tensor parallelism's ops (TP > 1, or
 * train.force_parallel_lowering: at TP 1 too), and expert parallelism's (an MoE recipe at EP > 1, or
 * forced). */
bool spec_lowers_tp(const Spec *s);
/* Whether the recipe shards no tensors or experts (TP 1, EP 1, no forced parallel lowering): then one
 * rank's step is the recipe's whole step, and `stepc plan` plans the step a build runs
 * (compiler/plan/plan.c: Spec.per_rank, whose only difference is then the fp8 linears). */
bool spec_one_rank_step(const Spec *s);
bool spec_lowers_ep(const Spec *s);
bool spec_layer_is_moe(const Spec *s, int layer); /* layer in 0..num_layers-1 */
/* Whether layer l's linears run in fp8 (ir/ops/fp8.c): model.fp8 set with fp8_recipe "tensorwise" or
 * "delayed", and not a layer first_last_layers_bf16 keeps in bf16 (Megatron's is_first_last_bf16_layer: l <
 * num_layers_at_start_in_bf16, or l >= num_layers - num_layers_at_end_in_bf16); never outside the layers (l <
 * 0: embedding, output layer). */
bool spec_layer_fp8(const Spec *s, int layer);
/* Whether fp8_recipe is one stepc executes: "tensorwise" (current scaling) or "delayed" (Transformer
 * Engine's DelayedScaling, ir/ops/fp8.c); and whether fp8 is set with the delayed recipe. */
bool spec_fp8_executes(const Spec *s);
bool spec_fp8_delayed(const Spec *s);
int64_t spec_data_parallel_size(const Spec *s);
int64_t spec_global_batch_size(const Spec *s);
/* Chunks of the output layer and loss: model.output_layer_chunks, or when null the fewest that
 * divide the micro-batch's tokens and keep one chunk's logits (tokens / chunks x vocab at the
 * compute dtype) within SPEC_LOGITS_CHUNK_BYTES, on one GPU; 1 when world_size > 1 (the per-rank
 * report models Megatron's layout, whose loss holds the whole logits: compiler/plan/memrank.c). */
#define SPEC_LOGITS_CHUNK_BYTES ((int64_t)512 << 20)
int64_t spec_output_layer_chunks(const Spec *s);
/* Whether the per-rank report predicts Megatron-Core's job (train.megatron_job; null: world_size > 1)
 * rather than stepc's own step. */
bool spec_megatron_job(const Spec *s);
/* Fields another field implies, applied once the recipe and its overrides are read (the frontend
 * calls it): in a Megatron job, transformer_impl=local with attention_backend "auto" (the default)
 * means "unfused" (what Megatron's local spec runs); `where` then says so. */
void spec_imply(Spec *s);
/* model.transformer_engine_version as numbers: false unless it reads MAJOR.MINOR or
 * MAJOR.MINOR.PATCH (STEPC-50 rejects the rest). */
bool spec_te_version(const Spec *s, int *major, int *minor, int *patch);
/* Whether the job's Transformer Engine is MAJOR.MINOR or newer (an unreadable version counts as
 * the default's, the newest stepc models). */
bool spec_te_at_least(const Spec *s, int major, int minor);

/* Writes a field's current value in override syntax ("[core_attn,mlp]", "null", "4096"). */
void spec_value_str(const Spec *s, int id, char *buf, size_t n);
/* The field reference as Markdown (docs/recipe-reference.md). */
void spec_write_reference(void *FILE_out);

#endif
