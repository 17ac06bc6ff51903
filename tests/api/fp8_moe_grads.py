"""fp8_moe_grads.py INIT EXACT NAME RUN [RATIO] — the first step's gradients of an fp8 MoE step
(tests/api/fp8_moe.sh) against the same step without fp8 (fp32 products), the routed experts'
grouped fp8 linears measured against the dense fp8 linears of the same step.

The parameters are read as in fp8_grads.py (AdamW with beta1 = beta2 = 0, eps = 1000, lr 1: INIT -
AFTER = g / 1000). For every tensor, its relative distance |g_fp8 - g_exact| / |g_exact| is fp8's
quantization error on that gradient. Two groups: the routed experts' weights (`.mlp.experts.`, cast
by FP8_QUANT_GROUPED / GROUPED_LINEAR_FP8 with per-expert scales) and the dense fp8 linears'
(every other `linear_*` weight of the layers: attention's, the dense MLP's, the shared expert's; the
router, embedding and output layer stay fp32). Checked: over each group together (root of the
summed squared distances over the root of the summed squared gradients) the experts' relative error
is at most RATIO (default 1.0) times the dense linears' — per-expert scaling keeps each expert's
casts as accurate as a dense linear's — and above 1e-3: the experts ran in fp8 (the fp32 step would
be 0). A shared scale across the experts, or an expert's rows cast with another's, shows as a far
larger error (tests/unit/test_fp8_grouped.c); the experts' gradients in bf16/fp32 as 0."""
import math, sys

from fp8_grads import dist, grads, params

init, exact = params(sys.argv[1]), None
exact = grads(init, params(sys.argv[2]))
name, run = sys.argv[3], grads(init, params(sys.argv[4]))
ratio = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0


def group(k):
    if ".mlp.experts." in k:
        return "experts"
    if k.startswith("layers.") and ".linear_" in k and k.endswith(".weight"):
        return "dense"
    return None


acc = {"experts": [0.0, 0.0, 0, (0.0, "")], "dense": [0.0, 0.0, 0, (0.0, "")]}
for k in sorted(exact):
    gname = group(k)
    if gname is None:
        continue
    d, n = dist(run[k], exact[k]), math.sqrt(sum(a * a for a in exact[k]))
    a = acc[gname]
    a[0], a[1], a[2] = a[0] + d * d, a[1] + n * n, a[2] + 1
    if d / max(n, 1e-30) > a[3][0]:
        a[3] = (d / max(n, 1e-30), k)
rel = {g: math.sqrt(a[0] / a[1]) if a[1] > 0 else float("nan") for g, a in acc.items()}
for g, a in acc.items():
    print(f"{name}: {g}: {a[2]} tensors, relative error {rel[g]:.4f} from the fp32 step (worst {a[3][0]:.4f}, {a[3][1]})")
ok = acc["experts"][2] > 0 and acc["dense"][2] > 0
if not ok:
    print(f"FAIL {name}: no expert or no dense fp8 tensors")
elif rel["experts"] > ratio * rel["dense"]:
    ok = False
    print(f"FAIL {name}: the experts' error {rel['experts']:.4f} is above {ratio} x the dense fp8 linears' {rel['dense']:.4f}")
elif rel["experts"] < 1e-3:
    ok = False
    print(f"FAIL {name}: the experts' gradients are the fp32 step's ({rel['experts']:.2e}): not fp8")
else:
    print(f"ok: {name}: the experts' gradients {rel['experts'] / rel['dense']:.2f} x the dense fp8 linears' relative "
          f"error from the fp32 step (limit {ratio})")
sys.exit(0 if ok else 1)
