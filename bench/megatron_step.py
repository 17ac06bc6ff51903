"""Megatron-Core training-step memory and time on one GPU, for checking stepc's per-rank peak.

Builds Megatron-Core's GPTModel with the *local* layer spec (get_gpt_layer_local_spec: torch
RMSNorm, ColumnParallelLinear/RowParallelLinear, DotProductAttention = Megatron's own unfused
attention; no Transformer Engine, no apex) at the shape of stepc's models/bench_m.lua, wraps it
as Megatron-LM's get_model does (model.cuda(), Float16Module for bf16, DistributedDataParallel),
builds the optimizer with get_megatron_optimizer, and trains with get_forward_backward_func() on
random tokens, one micro-batch per step. After every iteration it prints
torch.cuda.max_memory_allocated() (never reset: what Megatron-LM / Bridge's training_log prints
after iterations 1 and 2) and at the end one JSON line.

  python3 megatron_step.py --variant none|core_attn|mlp|full [--layers 4] [--mbs 2]
      [--seq 4096] [--steps 4] [--softmax-fp32 1|0] [--adam megatron|fused] [--cpu]

--variant    none: no recompute; LABEL[+LABEL...] (core_attn, mlp, layernorm, moe, moe_act,
             shared_experts, mla_up_proj): recompute_granularity="selective" with
             recompute_modules=[those]; full: recompute_granularity="full", recompute_method="uniform",
             recompute_num_layers=1; full:METHOD:N (uniform|block) sets the method and the layers.
--tied       share_embeddings_and_output_weights (default untied, as bench_m.lua).
--experts N  MoE with the local spec (SequentialMLP experts, moe_grouped_gemm off), the alltoall
             dispatcher at EP 1; --topk, --moe-ffn, --shared-ffn (shared experts), --capacity
             (moe_expert_capacity_factor), --aux-loss (moe_aux_loss_coeff).
--mla        multi-latent attention (MLATransformerConfig, MLASelfAttention of the local spec, its core
             attention DotProductAttention): --q-lora (null: a full q projection), --kv-lora,
             --qk-head, --qk-pos, --v-head; plain RoPE (rope_type "rope").
--softmax-fp32  TransformerConfig.attention_softmax_in_fp32 (Core's default 1; Megatron-LM's CLI
             default is 0, --attention-softmax-in-fp32 turns it on).
--adam       megatron: what get_megatron_optimizer builds without TE/apex (torch.optim.AdamW,
             default foreach implementation); fused: the same call with torch.optim.AdamW patched to
             fused=True (torch's multi-tensor fused kernel, no temporaries, like TE/apex FusedAdam).
--cpu        debug mode: gloo, tiny shapes unless given, use_cpu_initialization, torch.cuda shimmed.
Megatron-Core is imported from $MEGATRON_PATH: a folder holding megatron/core of Megatron-LM d98e8a64dd
(git archive of that commit, megatron/core only; carry it to the GPU machine). bench/megatron_vs_plan.sh
runs a set of configurations through this script and `stepc plan` side by side.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

p = argparse.ArgumentParser()
p.add_argument("--variant", default="none")
p.add_argument("--layers", type=int, default=4)
p.add_argument("--mbs", type=int, default=2)
p.add_argument("--seq", type=int, default=None)
p.add_argument("--hidden", type=int, default=None)
p.add_argument("--heads", type=int, default=None)
p.add_argument("--groups", type=int, default=None)
p.add_argument("--ffn", type=int, default=None)
p.add_argument("--vocab", type=int, default=None)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--softmax-fp32", type=int, default=1)
p.add_argument("--adam", default="megatron", choices=["megatron", "fused"])
p.add_argument("--cpu", action="store_true")
p.add_argument("--tag", default="")
p.add_argument("--tied", action="store_true")
p.add_argument("--experts", type=int, default=0)
p.add_argument("--topk", type=int, default=2)
p.add_argument("--moe-ffn", type=int, default=None)
p.add_argument("--shared-ffn", type=int, default=None)
p.add_argument("--capacity", type=float, default=None)
p.add_argument("--aux-loss", type=float, default=0.0)
p.add_argument("--mla", action="store_true")
p.add_argument("--q-lora", type=int, default=None)
p.add_argument("--kv-lora", type=int, default=512)
p.add_argument("--qk-head", type=int, default=128)
p.add_argument("--qk-pos", type=int, default=64)
p.add_argument("--v-head", type=int, default=128)
p.add_argument("--snapshot", action="store_true",
               help="record the allocator's history and report what is live at the peak, by source line")
args = p.parse_args()

CPU = args.cpu
if CPU:  # tiny shapes for the CPU debug run
    dflt = dict(seq=64, hidden=64, heads=8, groups=2, ffn=256, vocab=512)
else:  # models/bench_m.lua
    dflt = dict(seq=4096, hidden=2048, heads=32, groups=8, ffn=8192, vocab=128256)
for k, v in dflt.items():
    if getattr(args, k) is None:
        setattr(args, k, v)

for path in [os.environ.get("MEGATRON_PATH", "")]:
    if path and os.path.isdir(os.path.join(path, "megatron", "core")):
        sys.path.insert(0, path)
        MEGATRON_PATH = path
        break
else:
    sys.exit("megatron/core not found: set MEGATRON_PATH to the folder that holds megatron/core")

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # as Megatron's launch scripts set
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("LOCAL_RANK", "0")

import warnings  # noqa: E402

warnings.filterwarnings("ignore")
import logging  # noqa: E402

logging.disable(logging.WARNING)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

if CPU:
    # Megatron-Core asks torch.cuda for devices, RNG states and memory; map those to the CPU.
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.set_device = lambda *a, **k: None
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.max_memory_allocated = lambda *a, **k: 0
    torch.cuda.memory_allocated = lambda *a, **k: 0
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    torch.cuda.set_rng_state = lambda s, *a, **k: torch.set_rng_state(s)
    torch.cuda.manual_seed = lambda s: torch.manual_seed(s)
    torch.Tensor.cuda = lambda self, *a, **k: self

    class _Stream:
        def __getattr__(self, name):
            return lambda *a, **k: None

    torch.cuda.current_stream = lambda *a, **k: _Stream()
    torch.nn.Module.cuda = lambda self, *a, **k: self
    from torch.overrides import TorchFunctionMode

    def _cpu(d):
        return "cpu" if d is not None and "cuda" in str(d) else d

    class _CpuDevices(TorchFunctionMode):  # device="cuda" hard-coded in Megatron -> the CPU
        def __torch_function__(self, func, types, a=(), k=None):
            k = dict(k or {})
            if "device" in k:
                k["device"] = _cpu(k["device"])
            if func is torch.Tensor.type and len(a) == 1 and not k:  # Megatron's dtype checks
                return func(*a).replace("torch.", "torch.cuda.", 1)
            if func is torch.Tensor.to:
                a = tuple(_cpu(x) if isinstance(x, (str, torch.device)) else x for x in a)
            return func(*a, **k)

    _CpuDevices().__enter__()

from megatron.core import parallel_state  # noqa: E402
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig  # noqa: E402
from megatron.core.distributed.finalize_model_grads import finalize_model_grads  # noqa: E402
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.models.gpt.gpt_model import GPTModel  # noqa: E402
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # noqa: E402
import megatron.core.optimizer as mopt  # noqa: E402
from megatron.core.pipeline_parallel.schedules import get_forward_backward_func  # noqa: E402
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed  # noqa: E402
from megatron.core.transformer.enums import AttnBackend  # noqa: E402
from megatron.core.transformer.module import Float16Module  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

if CPU:
    import megatron.core.fusions.fused_softmax as _fs
    import megatron.core.tensor_parallel.random as _rnd

    _fs.get_default_causal_mask = lambda sq: torch.triu(torch.ones(sq, sq), diagonal=1).bool()
    _rnd._set_cuda_rng_state = lambda s, *a, **k: torch.set_rng_state(s)
    _rnd._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()

GB = 1e9


def mem():
    return torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()


def peak_breakdown(snap, top=40):
    """Replays the allocator trace of torch.cuda.memory._snapshot(): the blocks live when the
    allocated bytes peaked, grouped by the innermost frame in megatron/ or this script (else the
    innermost Python frame), with the phase (forward/backward/optimizer) the script marked."""
    events = [e for tr in snap.get("device_traces", []) for e in tr]
    live, tot, best, best_live, best_i = {}, 0, -1, {}, -1
    for i, e in enumerate(events):
        a = e.get("action")
        if a == "alloc":
            live[e["addr"]] = e
            tot += e["size"]
            if tot > best:
                best, best_live, best_i = tot, dict(live), i
        elif a == "free_completed" and e["addr"] in live:
            tot -= live.pop(e["addr"])["size"]

    def where(e):
        fr = e.get("frames") or []
        for f in fr:
            fn = f.get("filename", "")
            if "megatron/" in fn or fn.endswith("megatron_step.py"):
                return f"{fn.split('megatron/')[-1] if 'megatron/' in fn else 'megatron_step.py'}:{f.get('line')} {f.get('name')}"
        return f"{fr[0].get('filename','?').split('/')[-1]}:{fr[0].get('line')} {fr[0].get('name')}" if fr else "? (autograd engine)"

    def phase(e):
        fr = e.get("frames") or []
        if not fr:  # allocated by the autograd engine's thread: no Python frames
            return "backward"
        if any("optimizer" in f.get("filename", "") for f in fr):
            return "optimizer"
        if any(f.get("name") in ("backward", "backward_step", "custom_backward") for f in fr):
            return "backward"
        return "forward"

    groups = {}
    for e in best_live.values():
        k = (phase(e), where(e))
        g = groups.setdefault(k, [0, 0, set()])
        g[0] += e["size"]
        g[1] += 1
        g[2].add(e["size"])
    rows = sorted(groups.items(), key=lambda kv: -kv[1][0])
    peak_ev = events[best_i] if best_i >= 0 else {}
    return dict(peak_bytes=best, event_index=best_i, events=len(events),
                peak_event=dict(phase=phase(peak_ev), where=where(peak_ev), size=peak_ev.get("size")),
                at_peak=[dict(phase=k[0], where=k[1], bytes=v[0], count=v[1], sizes=sorted(v[2])[-4:])
                         for k, v in rows[:top]])


def main():
    if CPU:
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    else:
        torch.cuda.set_device(0)
        try:
            torch.distributed.init_process_group("nccl", rank=0, world_size=1,
                                                 device_id=torch.device("cuda", 0))
            t = torch.ones(1, device="cuda")
            torch.distributed.all_reduce(t)
        except Exception as e:  # noqa: BLE001  (world size 1: gloo reduces CUDA tensors too)
            print("NCCL failed, using gloo:", repr(e)[:300], flush=True)
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
            torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(1234)

    rec = {}
    v = args.variant
    labels = ("core_attn", "mlp", "layernorm", "moe", "moe_act", "shared_experts", "mla_up_proj")
    if v == "full" or v.startswith("full:"):
        parts = v.split(":")
        rec = dict(recompute_granularity="full", recompute_method=parts[1] if len(parts) > 1 else "uniform",
                   recompute_num_layers=int(parts[2]) if len(parts) > 2 else 1)
    elif v != "none":
        mods = v.split("+")
        if any(m not in labels for m in mods):
            sys.exit("unknown variant " + v)
        rec = dict(recompute_granularity="selective", recompute_modules=mods)
    moe = {}
    if args.experts:
        moe = dict(num_moe_experts=args.experts, moe_router_topk=args.topk,
                   moe_ffn_hidden_size=args.moe_ffn or args.ffn, moe_grouped_gemm=False,
                   moe_token_dispatcher_type="alltoall", moe_aux_loss_coeff=args.aux_loss,
                   moe_router_load_balancing_type="aux_loss" if args.aux_loss else "none")
        if args.shared_ffn:
            moe["moe_shared_expert_intermediate_size"] = args.shared_ffn
        if args.capacity:
            moe["moe_expert_capacity_factor"] = args.capacity
    mla = {}
    if args.mla:
        mla = dict(multi_latent_attention=True, q_lora_rank=args.q_lora, kv_lora_rank=args.kv_lora,
                   qk_head_dim=args.qk_head, qk_pos_emb_head_dim=args.qk_pos, v_head_dim=args.v_head,
                   rope_type="rope")

    Config = TransformerConfig
    if args.mla:
        from megatron.core.transformer.transformer_config import MLATransformerConfig as Config
    cfg = Config(
        num_layers=args.layers,
        hidden_size=args.hidden,
        num_attention_heads=args.heads,
        num_query_groups=args.groups,
        kv_channels=None if args.mla else args.hidden // args.heads,
        ffn_hidden_size=args.ffn,
        normalization="RMSNorm",
        layernorm_epsilon=1e-5,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        attention_backend=AttnBackend.local,
        transformer_impl="local",
        masked_softmax_fusion=False,  # Megatron's scaled_masked_softmax_cuda kernel is not built
        attention_softmax_in_fp32=bool(args.softmax_fp32),
        bias_activation_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        cross_entropy_loss_fusion=False,
        init_method_std=0.02,
        use_cpu_initialization=CPU,
        **rec, **moe, **mla,
    )
    model = GPTModel(
        config=cfg,
        transformer_layer_spec=get_gpt_layer_local_spec(num_experts=args.experts or None, moe_grouped_gemm=False,
                                                         multi_latent_attention=args.mla, normalization="RMSNorm"),
        vocab_size=args.vocab,
        max_sequence_length=args.seq,
        share_embeddings_and_output_weights=args.tied,
        position_embedding_type="rope",
        rotary_base=500000,
        rotary_percent=1.0,
    )
    nparams = sum(p.numel() for p in model.parameters())
    # as Megatron-LM's get_model: to the GPU, Float16Module for bf16, then DDP
    model.cuda(torch.cuda.current_device())
    model = Float16Module(cfg, model)
    ddp_cfg = DistributedDataParallelConfig(grad_reduce_in_fp32=True, use_distributed_optimizer=False,
                                            overlap_grad_reduce=False)
    model = DistributedDataParallel(config=cfg, ddp_config=ddp_cfg, module=model)
    mem_model = mem()

    if args.adam == "fused":
        _AdamW = torch.optim.AdamW

        class FusedAdamW(_AdamW):
            def __init__(self, *a, **k):
                k["fused"] = True
                super().__init__(*a, **k)

        torch.optim.AdamW = FusedAdamW
    ocfg = OptimizerConfig(optimizer="adam", lr=3e-4, min_lr=3e-5, weight_decay=0.1, adam_beta1=0.9,
                           adam_beta2=0.95, adam_eps=1e-8, bf16=True, use_distributed_optimizer=False,
                           clip_grad=1.0)
    optimizer = get_megatron_optimizer(ocfg, [model])
    inner = optimizer.optimizer
    opt_desc = f"{type(optimizer).__name__}({type(inner).__module__}.{type(inner).__name__}" + (
        f", foreach={inner.defaults.get('foreach')}, fused={inner.defaults.get('fused')})"
        if hasattr(inner, "defaults") else ")")
    # elements per torch param group, per optimizer of the chain, in the order the step visits them
    # (stepc's memrank.c adam_group: at EP 1 the experts join the dense optimizer)
    opt_groups = [[sum(p.numel() for p in g["params"]) for g in o.optimizer.param_groups]
                  for o in getattr(optimizer, "chained_optimizers", [optimizer])
                  if getattr(o, "optimizer", None) is not None]
    mem_opt = mem()
    # as Megatron-LM's setup_model_and_optimizer
    cfg.grad_scale_func = optimizer.scale_loss
    cfg.finalize_model_grads_func = finalize_model_grads

    dev = "cpu" if CPU else "cuda"
    gen = torch.Generator().manual_seed(1234)

    def batches():
        while True:
            toks = torch.randint(0, args.vocab, (args.mbs, args.seq + 1), generator=gen)
            yield {
                "tokens": toks[:, :-1].contiguous().to(dev),
                "labels": toks[:, 1:].contiguous().to(dev),
                "loss_mask": torch.ones(args.mbs, args.seq, device=dev),
                "position_ids": torch.arange(args.seq, device=dev).unsqueeze(0).expand(args.mbs, -1),
            }

    data = batches()

    def forward_step(data_iterator, model):
        b = next(data_iterator)

        def loss_func(loss_mask, output_tensor):  # as pretrain_gpt.py's
            losses = output_tensor.float().view(-1)
            lm = loss_mask.view(-1).float()
            loss = torch.sum(losses * lm)
            ntok = lm.sum().clone().detach().to(torch.int)
            return loss, ntok, {"lm loss": torch.cat([loss.clone().detach().view(1), ntok.view(1)])}

        out = model(b["tokens"], b["position_ids"], None, labels=b["labels"])
        return out, lambda o: loss_func(b["loss_mask"], o)

    if args.snapshot and not CPU:
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=200000)
        base_alloc = torch.cuda.memory_allocated()
    fb = get_forward_backward_func()
    iters = []
    for it in range(1, args.steps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.zero_grad_buffer()
        optimizer.zero_grad()
        losses = fb(forward_step_func=forward_step, data_iterator=data, model=[model], num_microbatches=1,
                    seq_length=args.seq, micro_batch_size=args.mbs, decoder_seq_length=args.seq,
                    forward_only=False)
        torch.cuda.synchronize()
        m_fb = mem()
        ok, grad_norm, _ = optimizer.step()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        m_it = mem()
        ls = losses[0]["lm loss"]
        loss = float(ls[0] / ls[1])
        iters.append(dict(it=it, loss=round(loss, 4), grad_norm=float(grad_norm) if grad_norm is not None else None,
                          ok=bool(ok), time_s=round(dt, 5), max_alloc_after_fwd_bwd=m_fb[0],
                          max_alloc=m_it[0], alloc_end=m_it[1]))
        print(f"[{v}] iteration {it}: loss {loss:.4f} time {dt*1e3:.1f} ms | max allocated after fwd/bwd "
              f"{m_fb[0]/GB:.3f} GB, after iteration {m_it[0]/GB:.3f} GB, allocated {m_it[1]/GB:.3f} GB",
              flush=True)

    times = [x["time_s"] for x in iters[1:]]
    out = dict(
        tool="megatron-core", variant=v, tag=args.tag, layers=args.layers, micro_batch=args.mbs, seq=args.seq,
        hidden=args.hidden, heads=args.heads, query_groups=args.groups, ffn=args.ffn, vocab=args.vocab,
        params=nparams, recompute=rec, tied=args.tied, moe=moe, mla=mla, attention="DotProductAttention (local spec; torch softmax, "
        f"softmax_in_fp32={bool(args.softmax_fp32)}, masked_softmax_fusion=False)",
        optimizer=opt_desc, optimizer_param_groups=opt_groups, adam=args.adam, megatron_path=os.path.relpath(MEGATRON_PATH, ROOT),
        backend=torch.distributed.get_backend(), torch=torch.__version__, device=(torch.cuda.get_device_name(0) if not CPU else "cpu"),
        max_alloc_after_model=mem_model[0], max_alloc_after_optimizer_init=mem_opt[0],
        max_alloc_after_it1=iters[0]["max_alloc"], max_alloc_after_it2=iters[1]["max_alloc"] if len(iters) > 1 else None,
        max_alloc_final=iters[-1]["max_alloc"],
        median_step_s_2_to_n=statistics.median(times) if times else None, iterations=iters,
    )
    if not CPU:
        st = torch.cuda.memory_stats()
        out["max_reserved"] = st.get("reserved_bytes.all.peak")
    if args.snapshot and not CPU:
        try:
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            out["peak_breakdown"] = peak_breakdown(snap)
            out["peak_breakdown"]["allocated_before_recording"] = base_alloc
        except Exception as e:  # noqa: BLE001
            out["peak_breakdown"] = dict(error=repr(e))
    print("JSON " + json.dumps(out), flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one JSON line for a failed variant too
        tb = traceback.format_exc()
        print(tb, file=sys.stderr, flush=True)
        print("JSON " + json.dumps(dict(tool="megatron-core", variant=args.variant, tag=args.tag, error=repr(e)[:2000],
                                        traceback=tb[-3000:])), flush=True)
        sys.exit(1)
