"""against_one.py REF RUN NAME STEPS LOSS_REL PARAM_ABS — a multi-rank run (tests/api/tp.sh, ep.sh)
against the one-rank step: REF.txt and RUN.txt hold test_dp's "step K loss L grad_norm G" lines,
REF.safetensors and RUN.safetensors the parameters after the steps (the run's gathered into the
one-rank layout by stepc_save_params). Every step's loss and grad norm within LOSS_REL relative,
every parameter element within PARAM_ABS absolute; prints the largest differences."""
import array, json, struct, sys

def steps(p):
    return [tuple(float(x) for x in l.split()[3::2]) for l in open(p + ".txt") if l.startswith("step ")]


def tensors(p):  # name -> (shape, fp32 values) of P.safetensors
    b = open(p + ".safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for k, v in json.loads(b[8:8 + n]).items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        s, e = v["data_offsets"]
        x = array.array("f")
        x.frombytes(b[8 + n + s:8 + n + e])
        out[k] = (v["shape"], x)
    return out



def main():
    ref, run, name = sys.argv[1:4]
    steps_n, loss_rel, param_abs = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
    a, b = steps(ref), steps(run)
    assert len(a) == len(b) == steps_n, (a, b)
    worst = 0.0
    for k, ((la, ga), (lb, gb)) in enumerate(zip(a, b)):
        for x, y, what in ((la, lb, "loss"), (ga, gb, "grad_norm")):
            rel = abs(x - y) / abs(x)
            worst = max(worst, rel)
            if rel > loss_rel:
                sys.exit(f"step {k + 1}: {name} {what} {y!r}, one rank's {x!r} (relative {rel:.2e} > {loss_rel:g})")
    pa, pb = tensors(ref), tensors(run)
    if sorted(pa) != sorted(pb):
        sys.exit(f"{name}: the parameter names differ: {sorted(set(pa) ^ set(pb))}")
    pw, pk, n = 0.0, "", 0
    for k in pa:
        (sa, x), (sb, y) = pa[k], pb[k]
        if sa != sb:
            sys.exit(f"{name}: {k} has shape {sb}, one rank's {sa}")
        for i, (u, v) in enumerate(zip(x, y)):
            d = abs(u - v)
            if d > param_abs:
                sys.exit(f"{name}: {k} element {i} = {v!r}, one rank's {u!r}")
            if d > pw:
                pw, pk = d, k
        n += len(x)
    print(f"ok: {name}: {len(a)} steps' losses and grad norms within {worst:.1e} relative of one rank's; "
          f"all {n} parameters within {param_abs:g} (largest difference {pw:.1e}{', in ' + pk if pk else ''})")


if __name__ == "__main__":
    main()
