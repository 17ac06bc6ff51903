#!/usr/bin/env python3
"""python_torch.py ARTIFACT_DIR [--steps N] [--graph-mode eager|full_iteration|scoped] — python/stepc.py
with PyTorch on the GPU (by hand on the GPU machine; not in CI). Builds nothing: ARTIFACT_DIR is
a `stepc build` output (e.g. of models/tiny.lua). One batch sequence, N steps (default 5) from the
same seed, bound five ways, each in its own Step on cuda:
  numpy   host int32 arrays (stepc_bind_batch)
  torch   CUDA int32 tensors made on a side stream just before the bind, the caller's reference
          dropped and the memory handed to a garbage tensor before step(): the Step must wait for
          the stream and keep the buffers (stepc_bind_batch_device)
  cai     an object with only __cuda_array_interface__ (version 3, the producer's stream)
  dlpack  an object with only __dlpack__ / __dlpack_device__ (through torch.from_dlpack)
  torch_host  CPU torch int64 tensors (converted through NumPy)
Every way's losses must be bitwise the numpy way's; an int64 CUDA tensor, a non-contiguous one and a
host array given to bind_batch_device must be refused. Prints one line of JSON; exit 0 when all
holds, 1 otherwise (torch, CUDA or the artifact missing included)."""

import argparse
import json
import os
import sys
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))


def main():
    ap = argparse.ArgumentParser(description="stepc's Python module with PyTorch CUDA tensors, bitwise against NumPy")
    ap.add_argument("artifact")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--graph-mode", choices=["eager", "full_iteration", "scoped"], default=None)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    result = {"test": "python_torch", "artifact": os.path.abspath(args.artifact), "steps": args.steps, "ok": False}
    try:
        run(args, result)
    except Exception as e:  # one line of JSON whatever went wrong, the traceback on stderr
        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(result))
    return 0 if result["ok"] else 1


class CudaArray:
    """Only __cuda_array_interface__, as CuPy or Numba would hand it over."""

    def __init__(self, t, stream):
        self._t = t  # owns the memory
        cai = dict(t.__cuda_array_interface__)
        cai.update(version=3, stream=stream)
        self.__cuda_array_interface__ = cai


class DLPackOnly:
    def __init__(self, t):
        self._t = t

    def __dlpack__(self, **kw):  # stream=, and max_version= etc. where torch is newer
        return self._t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def run(args, result):
    import numpy as np
    import torch
    import stepc

    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    dev = torch.device("cuda", 0)

    def open_step():
        return stepc.Step(args.artifact, device="cuda", graph_mode=args.graph_mode)

    with open_step() as s:
        info = s.info
    result.update(gpu=info.gpu, graph_mode=info.graph_mode, generated=info.generated)
    rows, t = info.batch_shape
    rng = np.random.default_rng(args.seed)
    seqs = rng.integers(0, info.vocab_size, size=(args.steps, rows, t + 1), dtype=np.int32)
    host = [(np.ascontiguousarray(q[:, :-1]), np.ascontiguousarray(q[:, 1:])) for q in seqs]
    on_dev = [(torch.from_numpy(a).to(dev), torch.from_numpy(b).to(dev)) for a, b in host]
    torch.cuda.synchronize()
    side = torch.cuda.Stream(dev)

    def train(bind):
        with open_step() as s:
            s.init_params(args.seed)
            out = []
            for k in range(args.steps):
                bind(s, k)
                out.append(s.step().loss)
            return out

    def bind_numpy(s, k):
        s.bind_batch(*host[k])

    def bind_torch(s, k):
        with torch.cuda.stream(side):
            side.wait_stream(torch.cuda.default_stream(dev))
            tok, tg = on_dev[k][0].clone(), on_dev[k][1].clone()
            s.bind_batch(tok, tg)
            del tok, tg
            # the caching allocator hands the freed blocks to the next tensor of their size: had
            # the Step not kept them, this garbage would be the batch
            junk = [torch.full((rows, t), info.vocab_size - 1, dtype=torch.int32, device=dev) for _ in range(2)]
            del junk

    def bind_cai(s, k):
        tok, tg = on_dev[k][0].clone(), on_dev[k][1].clone()
        stream = torch.cuda.current_stream(dev).cuda_stream or 1  # 0 is not a valid version-3 stream
        s.bind_batch(CudaArray(tok, stream), CudaArray(tg, stream))

    def bind_dlpack(s, k):
        s.bind_batch(DLPackOnly(on_dev[k][0].clone()), DLPackOnly(on_dev[k][1].clone()))

    def bind_torch_host(s, k):
        s.bind_batch(torch.from_numpy(host[k][0]).long(), torch.from_numpy(host[k][1]).long())

    ways = {"numpy": bind_numpy, "torch": bind_torch, "cai": bind_cai, "dlpack": bind_dlpack, "torch_host": bind_torch_host}
    losses = {name: train(bind) for name, bind in ways.items()}
    result["losses"] = losses
    same = {name: l == losses["numpy"] for name, l in losses.items()}
    result["bitwise_equal"] = same

    refused = {}
    with open_step() as s:
        tok, tg = on_dev[0]
        cases = {
            "int64": (TypeError, lambda: s.bind_batch(tok.long(), tg.long())),
            "non_contiguous": (ValueError, lambda: s.bind_batch(tok.t().contiguous().t(), tg)),
            "host_to_device_call": (ValueError, lambda: s.bind_batch_device(*host[0])),
            "shape": (ValueError, lambda: s.bind_batch(tok[:1], tg[:1])),
        }
        for name, (exc, call) in cases.items():
            try:
                call()
                refused[name] = "accepted"
            except exc as e:
                refused[name] = str(e)
        s.bind_batch(tok, tg)  # a good binding after the refused ones still steps
        s.step()
    result["refused"] = refused
    result["ok"] = all(same.values()) and not any(v == "accepted" for v in refused.values())


if __name__ == "__main__":
    sys.exit(main())
