"""megatron_side.py — Megatron-LM's verdict on one configuration (needs torch and Megatron's source).

A configuration's fields become a Megatron-LM command line (pretrain_gpt.py's flags). Then, as
Megatron-LM does before it builds a model:

  1. parse_args()                                  megatron/training/arguments.py
  2. validate_args(args)                           megatron/training/arguments.py
  3. core_transformer_config_from_args(args)       megatron/training/argument_utils.py, which runs
     TransformerConfig.__post_init__               megatron/core/transformer/transformer_config.py
  4. build_checks(): the divide()/assert checks made when the model, the parallel groups and the
     first batch are built, restated here (they need process groups and a GPU to run for real);
     each names the Megatron source it restates. get_num_layers_to_build (the layers each
     pipeline rank and virtual stage builds) needs neither and is called as Megatron calls it.

An exception in any step is a rejection. Stubs, kept to the minimum that lets the modules import
and run on a CPU-only machine without Transformer Engine or apex:

  - typing.override (Python 3.12) is defined as the identity on 3.11, where Megatron's
    megatron/training/models/hybrid.py imports it;
  - megatron.core.utils.is_te_min_version returns True and get_te_version returns 2.14.0: the
    configurations are judged as on a machine with a current Transformer Engine (Megatron's
    version gates would otherwise reject every fp8 / grouped-GEMM / fused-RoPE recipe);
  - torch.cuda.get_device_capability returns (9, 0) and megatron.training.arguments'
    get_device_arch_version returns 9: the GPU is an H100/H200 (stepc's target), which
    validate_args asks the driver for (grouped GEMM, sequence-parallel overlap choices);
  - --no-rope-fusion is passed, since the RoPE fusion check asks for TE's fused kernel by import.

Two fields have no Megatron-LM flag of their own and are set on the parsed arguments, as a
Megatron Core / Bridge user sets the dataclass field: recompute_modules=[] (the flag takes one
value at least) and cpu_offloading=true (Megatron-LM turns it on from
--cpu-offloading-num-layers > 0 only).
"""
import contextlib
import io
import os
import sys
import typing
import warnings

if not hasattr(typing, "override"):
    typing.override = lambda f: f

_LOADED = None


def load(megatron_root):
    global _LOADED
    if _LOADED:
        return _LOADED
    sys.path.insert(0, megatron_root)
    warnings.simplefilter("ignore")
    from packaging.version import Version
    import megatron.core.utils as mcu
    mcu.is_te_min_version = lambda *a, **k: True
    mcu.get_te_version = lambda: Version("2.14.0")
    import megatron.core.transformer.transformer_config as tc
    tc.is_te_min_version = mcu.is_te_min_version
    tc.get_te_version = mcu.get_te_version
    import torch
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    import megatron.training.arguments as A
    A.get_device_arch_version = lambda: 9
    from megatron.training.argument_utils import core_transformer_config_from_args
    for name in ("is_te_min_version", "get_te_version"):
        if hasattr(A, name):
            setattr(A, name, getattr(mcu, name))
    _LOADED = (A, core_transformer_config_from_args)
    return _LOADED


DEFAULTS = dict(
    kv_channels=None, num_moe_experts=None, moe_router_topk=2, moe_ffn_hidden_size=None,
    moe_grouped_gemm=False, moe_shared_expert_intermediate_size=None, moe_shared_expert_overlap=False,
    moe_token_dispatcher_type="allgather", moe_expert_capacity_factor=None,
    moe_pad_expert_input_to_capacity=False, moe_input_jitter_eps=None, moe_router_padding_for_fp8=False,
    tensor_model_parallel_size=1, pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=None,
    context_parallel_size=1, expert_model_parallel_size=1, expert_tensor_parallel_size=None,
    sequence_parallel=False, fp8=None, fp8_recipe="delayed", recompute_granularity=None,
    recompute_method=None, recompute_num_layers=None, recompute_modules=None,
    cpu_offloading=False, cpu_offloading_num_layers=0, cuda_graph_impl="none", cuda_graph_modules=[],
    check_for_nan_in_loss_and_grad=True, num_layers_in_first_pipeline_stage=None,
    num_layers_in_last_pipeline_stage=None, account_for_embedding_in_pipeline_split=False,
    account_for_loss_in_pipeline_split=False,
    # the recipe fields of the random configurations (configs.RECIPES); these values are the ones the
    # two fixed bases imply, so their command line is as before
    normalization="RMSNorm", activation="swiglu", add_bias_linear=False, position_embedding_type="rope",
    attention_backend="auto", multi_latent_attention=False, kv_lora_rank=None, qk_head_dim=None,
    qk_pos_emb_head_dim=None, v_head_dim=None, moe_layer_freq=None, moe_flex_dispatcher_backend=None,
    hybrid_override_pattern=None, mamba_state_dim=None, mamba_head_dim=None, mamba_num_heads=None,
    mamba_num_groups=None, distribute_saved_activations=False, use_distributed_optimizer=False,
    fp8_param=False, use_precision_aware_optimizer=False, main_grads_dtype="fp32", exp_avg_dtype="fp32",
    exp_avg_sq_dtype="fp32")


def parse_value(v):
    if v == "true":
        return True
    if v == "false":
        return False
    if v == "null":
        return None
    if v.startswith("["):
        return [x for x in v[1:-1].split(",") if x]
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


def fields_of(base_fields, overrides):
    f = dict(DEFAULTS)
    f.update(base_fields)
    for o in overrides:
        k, v = o.split("=", 1)
        f[k.split(".", 1)[1]] = parse_value(v)
    return f


# (field, flag, MoE only): passed when the field is set (a true bool is the bare flag; a list
# its values; None, false, 0 and [] leave the flag out).
OPTIONAL_FLAGS = [
    ("kv_channels", "--kv-channels", False),
    ("virtual_pipeline_model_parallel_size", "--num-virtual-stages-per-pipeline-rank", False),
    ("num_layers_in_first_pipeline_stage", "--decoder-first-pipeline-num-layers", False),
    ("num_layers_in_last_pipeline_stage", "--decoder-last-pipeline-num-layers", False),
    ("account_for_embedding_in_pipeline_split", "--account-for-embedding-in-pipeline-split", False),
    ("account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split", False),
    ("expert_tensor_parallel_size", "--expert-tensor-parallel-size", False),
    ("sequence_parallel", "--sequence-parallel", False),
    ("moe_ffn_hidden_size", "--moe-ffn-hidden-size", True),
    ("moe_grouped_gemm", "--moe-grouped-gemm", True),
    ("moe_expert_capacity_factor", "--moe-expert-capacity-factor", True),
    ("moe_pad_expert_input_to_capacity", "--moe-pad-expert-input-to-capacity", True),
    ("moe_router_padding_for_fp8", "--moe-router-padding-for-fp8", True),
    ("moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", True),
    ("moe_shared_expert_overlap", "--moe-shared-expert-overlap", True),
    ("moe_input_jitter_eps", "--moe-input-jitter-eps", True),
    ("recompute_granularity", "--recompute-granularity", False),
    ("recompute_method", "--recompute-method", False),
    ("recompute_num_layers", "--recompute-num-layers", False),
    ("recompute_modules", "--recompute-modules", False),
    ("cpu_offloading_num_layers", "--cpu-offloading-num-layers", False),
    ("cuda_graph_modules", "--cuda-graph-modules", False),
    ("distribute_saved_activations", "--distribute-saved-activations", False),
    ("moe_flex_dispatcher_backend", "--moe-flex-dispatcher-backend", True),
    ("kv_lora_rank", "--kv-lora-rank", False),
    ("qk_head_dim", "--qk-head-dim", False),
    ("qk_pos_emb_head_dim", "--qk-pos-emb-head-dim", False),
    ("v_head_dim", "--v-head-dim", False),
    ("hybrid_override_pattern", "--hybrid-layer-pattern", False),
    ("mamba_state_dim", "--mamba-state-dim", False),
    ("mamba_head_dim", "--mamba-head-dim", False),
    ("mamba_num_heads", "--mamba-num-heads", False),
    ("mamba_num_groups", "--mamba-num-groups", False),
    ("use_distributed_optimizer", "--use-distributed-optimizer", False),
    ("fp8_param", "--fp8-param-gather", False),
    ("use_precision_aware_optimizer", "--use-precision-aware-optimizer", False),
]

# Fields whose explicit 0 is a value of its own (the flag's default is None), passed as 0.
ZERO_PASSED = {"recompute_num_layers"}


def recipe_argv(f):
    """The flags of a recipe's architecture that differ from the llama base (RMSNorm, SwiGLU, no
    bias, RoPE, GQA), as pretrain_gpt.py / pretrain_hybrid.py take them."""
    a = ["--normalization", f["normalization"]]
    a += {"swiglu": ["--swiglu"], "squared_relu": ["--squared-relu"], "gelu": []}[f["activation"]]
    a += [] if f["add_bias_linear"] else ["--disable-bias-linear"]
    a += ["--position-embedding-type", f["position_embedding_type"]]
    if f["position_embedding_type"] == "rope":
        a += ["--no-rope-fusion"]
    if f["num_query_groups"] is not None and not f["multi_latent_attention"]:
        a += ["--group-query-attention", "--num-query-groups", f["num_query_groups"]]
    if f["multi_latent_attention"]:
        a += ["--multi-latent-attention"]
    if f["attention_backend"] != "auto":
        a += ["--attention-backend", f["attention_backend"]]
    if f["moe_layer_freq"] is not None and f["num_moe_experts"] is not None:
        a += ["--moe-layer-freq", "[" + ",".join(str(x) for x in f["moe_layer_freq"]) + "]"]
    for k in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
        if f[k] != "fp32":
            a += ["--" + k.replace("_", "-"), f[k]]
    return a


def argv_of(f):
    a = ["--num-layers", f["num_layers"], "--hidden-size", f["hidden_size"],
         "--num-attention-heads", f["num_attention_heads"], *recipe_argv(f),
         "--ffn-hidden-size", f["ffn_hidden_size"], "--seq-length", f["seq_length"],
         "--max-position-embeddings", f["seq_length"], "--micro-batch-size", f["micro_batch_size"],
         "--global-batch-size", f["global_batch_size"], "--bf16",
         "--attention-dropout", f["attention_dropout"], "--hidden-dropout", f["hidden_dropout"],
         "--mock-data", "--train-iters", 20, "--lr", 3e-4, "--vocab-size", 32000,
         "--tokenizer-type", "NullTokenizer",
         "--tensor-model-parallel-size", f["tensor_model_parallel_size"],
         "--pipeline-model-parallel-size", f["pipeline_model_parallel_size"],
         "--context-parallel-size", f["context_parallel_size"],
         "--expert-model-parallel-size", f["expert_model_parallel_size"]]
    moe = f["num_moe_experts"] is not None
    if moe:
        a += ["--num-experts", f["num_moe_experts"], "--moe-router-topk", f["moe_router_topk"],
              "--moe-token-dispatcher-type", f["moe_token_dispatcher_type"], "--moe-aux-loss-coeff", 0]
    if f["fp8"] is not None:
        a += ["--fp8-format", f["fp8"], "--fp8-recipe", f["fp8_recipe"]]
    if f["cuda_graph_impl"] != "none":
        a += ["--cuda-graph-impl", f["cuda_graph_impl"]]
    if not f["check_for_nan_in_loss_and_grad"]:
        a += ["--no-check-for-nan-in-loss-and-grad"]
    for field, flag, only_moe in OPTIONAL_FLAGS:
        v = f[field]
        if (only_moe and not moe) or v is None or v is False or v == [] or (v == 0 and field not in ZERO_PASSED):
            continue
        a += [flag] if v is True else [flag, *v] if isinstance(v, list) else [flag, v]
    return [str(x) for x in a]


def build_checks(f, cfg):
    """The checks Megatron makes while building the parallel groups, the model and the first
    batch, restated from the source (d98e8a64). Returns the first failure or None."""
    tp, pp, cp = cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size
    ep, etp = cfg.expert_model_parallel_size, cfg.expert_tensor_parallel_size or tp
    ws, heads, g = f["world_size"], cfg.num_attention_heads, cfg.num_query_groups
    kv = cfg.kv_channels
    # core/parallel_state.py initialize_model_parallel: the expert layout must tile the world.
    if ws % (etp * ep * pp):
        return f"parallel_state: world_size {ws} not divisible by etp*ep*pp {etp * ep * pp}"
    # core/transformer/attention.py Attention.__init__: divide() of the heads over TP; with
    # fewer groups than TP ranks, each rank takes one replicated kv head.
    if g >= tp:
        if g % tp:
            return f"attention.py: divide(num_query_groups {g}, tp {tp})"
        if heads % tp:
            return f"attention.py: divide(num_attention_heads {heads}, tp {tp})"
    elif heads % g:
        return f"attention.py: divide(num_attention_heads {heads}, num_query_groups {g})"
    # Transformer Engine's DotProductAttention (the core attention of Megatron's default TE layer
    # spec) asserts num_attention_heads % num_gqa_groups == 0 when it is built.
    if heads % g:
        return f"TE DotProductAttention: num_attention_heads {heads} % num_gqa_groups {g}"
    # tensor_parallel/layers.py ColumnParallelLinear: divide(output_size, tp) for linear_qkv (MLA
    # has no linear_qkv; its heads are Attention's, checked above).
    if not cfg.multi_latent_attention and ((heads + 2 * g) * kv) % tp:
        return "layers.py: linear_qkv output not divisible by tp"
    why = mamba_checks(f, cfg, tp)
    if why:
        return why
    # mlp.py / layers.py: the dense MLP widths are split over TP (gated: 2*ffn); a MoE model has
    # dense layers where moe_layer_freq has a 0 (GPT) or the hybrid pattern a '-'.
    pattern = f["hybrid_override_pattern"]
    freq = cfg.moe_layer_freq if isinstance(cfg.moe_layer_freq, list) else [1]
    dense = cfg.num_moe_experts is None or (("-" in pattern) if pattern else 0 in freq)
    if dense and cfg.ffn_hidden_size % tp:
        return f"layers.py: divide(ffn_hidden_size {cfg.ffn_hidden_size}, tp {tp})"
    if cfg.num_moe_experts is not None:
        # moe/moe_layer.py: assert num_moe_experts % ep_size == 0.
        if cfg.num_moe_experts % ep:
            return f"moe_layer.py: num_moe_experts {cfg.num_moe_experts} % ep {ep}"
        if cfg.moe_ffn_hidden_size % etp:
            return f"experts.py: divide(moe_ffn_hidden_size, etp {etp})"
        # moe/router.py: torch.topk over the experts fails when k > experts (first forward).
        if cfg.moe_router_topk > cfg.num_moe_experts:
            return "router.py: topk > num_moe_experts"
        # moe/moe_layer.py / token dispatcher: MoE with TP > 1 needs sequence parallelism
        # (the dispatcher asserts it at the first forward).
        if tp > 1 and not cfg.sequence_parallel:
            return "moe: tensor parallelism without sequence_parallel"
    # training/utils.py get_batch_on_this_cp_rank: the sequence is viewed as 2*cp chunks.
    if cp > 1 and f["seq_length"] % (2 * cp):
        return "get_batch_on_this_cp_rank: seq_length % (2*cp)"
    # scatter_to_sequence_parallel_region: tokens split over TP.
    if cfg.sequence_parallel and (f["seq_length"] // cp) % tp:
        return "sequence parallel: seq_length/cp % tp"
    # core/transformer/transformer_block.py get_num_layers_to_build: called by Megatron itself
    # (not restated) for every pipeline rank and virtual stage, as each rank does when it builds
    # its model chunks; it asserts that the layers divide evenly over the stages and chunks
    # unless num_layers_in_first/last_pipeline_stage place them.
    if f["hybrid_override_pattern"]:
        return hybrid_split(f, cfg)
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    vpp = cfg.virtual_pipeline_model_parallel_size
    for pp_rank in range(pp):
        for vp_stage in (range(vpp) if vpp is not None else [None]):
            try:
                get_num_layers_to_build(cfg, vp_stage=vp_stage, pp_rank=pp_rank)
            except AssertionError as e:
                return f"transformer_block.py get_num_layers_to_build: {str(e).split(chr(10))[0].strip()}"
    # global batch: whole micro-batches per step (validate_args checks the same; kept for safety).
    return None


def mamba_checks(f, cfg, tp):
    """core/ssm/mamba_mixer.py MambaMixer.__init__ (lines 241-274 at d98e8a64): the heads, the groups
    and TP, restated (the mixer needs process groups)."""
    if not (f["hybrid_override_pattern"] and "M" in f["hybrid_override_pattern"]):
        return None
    nheads = cfg.mamba_num_heads or (2 * cfg.hidden_size) // cfg.mamba_head_dim
    if cfg.mamba_num_heads is None and (2 * cfg.hidden_size) % cfg.mamba_head_dim:
        return "mamba_mixer.py: d_inner % headdim"
    if nheads % tp:
        return "mamba_mixer.py: nheads % tp_size"
    if cfg.mamba_num_groups % tp:
        return "mamba_mixer.py: ngroups % tp_size"
    if nheads % cfg.mamba_num_groups:
        return "mamba_mixer.py: nheads % ngroups"
    return None


class _Group:
    """A pipeline process group of one rank, for select_pipeline_segment."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size


def hybrid_split(f, cfg):
    """core/models/hybrid/hybrid_model.py builds its layers with select_pipeline_segment
    (hybrid_layer_allocation.py), not get_num_layers_to_build; called as Megatron calls it, once
    per pipeline rank, with torch.distributed's rank/size answered for the group."""
    import torch.distributed as dist
    from megatron.core.models.hybrid import hybrid_layer_allocation as H
    saved = dist.get_rank, dist.get_world_size
    dist.get_rank = lambda g=None: g.rank
    dist.get_world_size = lambda g=None: g.size
    H.log_on_each_pipeline_stage = lambda *a, **k: None
    try:
        pp = cfg.pipeline_model_parallel_size
        for r in range(pp):
            H.select_pipeline_segment(f["hybrid_override_pattern"], _Group(r, pp) if pp > 1 else None, None,
                                      cfg.num_layers_in_first_pipeline_stage,
                                      cfg.num_layers_in_last_pipeline_stage)
    except ValueError as e:
        return f"hybrid_layer_allocation.py select_pipeline_segment: {str(e).splitlines()[0]}"
    finally:
        dist.get_rank, dist.get_world_size = saved
    return None


def verdict(megatron_root, base_fields, overrides):
    """('accept' | 'reject', reason)."""
    A, to_config = load(megatron_root)
    f = fields_of(base_fields, overrides)
    os.environ["WORLD_SIZE"] = str(f["world_size"])
    os.environ["RANK"] = "0"
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # as Megatron-LM's launch scripts set it
    saved = sys.argv
    sys.argv = ["pretrain_gpt.py", *argv_of(f)]
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            args = A.parse_args()
            if f["recompute_modules"] == []:
                args.recompute_modules = []
            if f["cpu_offloading"]:
                args.cpu_offloading = True
            A.validate_args(args)
            cfg = to_config(args)
        why = build_checks(f, cfg)
        if why:
            return "reject", "build: " + why
        return "accept", ""
    except SystemExit as e:
        return "reject", f"argparse exit {e.code}: {sink.getvalue().strip().splitlines()[-1:]}"
    except Exception as e:  # noqa: BLE001 — any failure is Megatron refusing the configuration
        return "reject", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        sys.argv = saved
