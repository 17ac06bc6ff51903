"""fp8_grads.py INIT EXACT ONE NAME RUN... — the first step's gradients of fp8 runs under tensor
parallelism against the one-rank fp8 step, measured against fp8's own quantization error
(tests/api/fp8_parallel.sh).

Each *.safetensors holds the parameters after one step of AdamW with beta1 = beta2 = 0, eps = 1000,
lr 1, no weight decay and no clipping: the update is lr g / (|g| + eps), so INIT - AFTER = g / 1000
to within |g| / 1000 relative (|g| < 1 here): the first step's gradient, read from the parameters.
EXACT is the same model without fp8 (fp32 products): the gradient fp8 approximates. ONE is the
one-rank fp8 step, each RUN a multi-rank fp8 step (its parameters gathered to the one-rank layout).

fp8 rounds every cast input to 3 (E4M3) or 2 (E5M2) mantissa bits, so two correct fp8 steps whose
sums are ordered differently (a row-parallel linear's partial products summed over the TP group,
the one-rank step's single GEMM) or whose casts are scaled differently (Transformer Engine scales a
rank's shard of a weight, a row-parallel input and a column-parallel output gradient by the
shard's own amax; stepc does the same) round some elements to neighbouring fp8 values, and the
gradients differ by noise of fp8's own size. The check: for every tensor, the distance between RUN's
gradient and ONE's is at most RATIO times the distance between ONE's and EXACT's (fp8's error, the
size of that noise), and over all tensors together at most RATIO_ALL times. A shard cut or placed
wrongly, a scale from the wrong tensor, or a collective over the wrong dimension moves a gradient by
its own size — far more (the sequence-parallel reduce-scatter of a 2-D fp8 dgrad along the
hidden dimension, fixed with these tests: 0.59 against 0.07)."""
import math, sys

from against_one import tensors

RATIO, RATIO_ALL = 2.0, 1.5


def grads(init, after):
    return {k: [(a - b) * 1000.0 for a, b in zip(init[k][1], after[k][1])] for k in init}


def dist(u, v):
    return math.sqrt(sum((a - b) ** 2 for a, b in zip(u, v)))


def params(path):  # tensors() takes the path without ".safetensors"
    return tensors(path[:-len(".safetensors")])


def main():
    init = params(sys.argv[1])
    exact, one = grads(init, params(sys.argv[2])), grads(init, params(sys.argv[3]))
    ok = True
    for name, path in zip(sys.argv[4::2], sys.argv[5::2]):
        run = grads(init, params(path))
        worst, tot_run, tot_ref = (0.0, ""), 0.0, 0.0
        for k in sorted(one):
            e_ref, e_run = dist(one[k], exact[k]), dist(run[k], one[k])
            tot_ref, tot_run = tot_ref + e_ref**2, tot_run + e_run**2
            r = e_run / max(e_ref, 1e-12)
            if r > worst[0]:
                worst = (r, k)
            if r > RATIO:
                ok = False
                print(f"FAIL {name}: {k}: |g - g_one| {e_run:.3e} is {r:.2f} x fp8's error |g_one - g_exact| {e_ref:.3e}")
        r_all = math.sqrt(tot_run / tot_ref)
        if r_all > RATIO_ALL:
            ok = False
            print(f"FAIL {name}: over all tensors |g - g_one| is {r_all:.2f} x fp8's error")
        print(f"{'ok' if ok else 'FAIL'}: {name}: first-step gradients {r_all:.2f} x fp8's own error from the one-rank "
              f"fp8 step (all tensors; limit {RATIO_ALL}), worst tensor {worst[0]:.2f} x ({worst[1]}; limit {RATIO})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
