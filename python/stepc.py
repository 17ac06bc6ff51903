"""stepc.py — drive a compiled stepc training step from Python.

An artifact directory written by `stepc build SPEC -o DIR` holds libstep.so, which exports the C
API of runtime/stepc.h. This module calls that API through ctypes, so there is nothing to compile:
put this file's folder on PYTHONPATH and open the directory.

    import numpy as np, stepc
    with stepc.Step("art/tiny", device="cpu") as s:
        s.init_params(1234)
        rows, T = s.info.batch_shape
        st = s.step()                                # the recipe's own data, or:
        s.bind_batch(tokens, targets)                # NumPy / torch (CPU or CUDA) int arrays
        st = s.step()
        print(st.step, st.loss, st.lr, st.grad_norm)
        val = s.eval(val_tokens, val_targets)        # a validation loss: no update
        val, lp = s.eval(val_tokens, val_targets, logprobs=True)  # and per-token log-probs
        s.save_checkpoint("ckpt")

numpy is imported when a host batch is bound, torch only when a torch tensor or a DLPack object
is: the module itself imports with neither installed. The struct layouts below are the header's,
field for field; libstep.so gets nothing else from us. docs/python.md is the guide.
"""

import ctypes
import dataclasses
import enum
import os
import sys
import warnings

__all__ = ["Step", "StepcError", "Status", "Info", "StepStats", "Measure", "API_VERSION"]

API_VERSION = 8  # STEPC_API_VERSION of the runtime/stepc.h these layouts mirror


class Status(enum.IntEnum):
    """stepc_status."""

    OK = 0
    ERR_ARGUMENT = 1
    ERR_RECIPE = 2
    ERR_UNSUPPORTED = 3
    ERR_NO_DEVICE = 4
    ERR_IO = 5
    ERR_MISMATCH = 6
    ERR_RUNTIME = 7
    ERR_NOMEM = 8


class StepcError(Exception):
    """A call into libstep.so returned a status other than STEPC_OK.

    status is a Status (an int where the library returned one this module does not know),
    status_name the library's stepc_status_name, message its stepc_last_error."""

    def __init__(self, status, status_name, message):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.status_name = status_name
        self.message = message
        super().__init__(f"{status_name}: {message}" if message else status_name)


# ---- runtime/stepc.h's structs, field for field (enums are C ints) ----


class _Options(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_int),
        ("cpu_threads", ctypes.c_int),
        ("graph_mode", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("local_rank", ctypes.c_int),
        ("dp_join", ctypes.c_int),
        ("master_port", ctypes.c_int),
        ("comm_timeout_s", ctypes.c_double),
        ("master_addr", ctypes.c_char * 256),
        ("gemm_tuning", ctypes.c_int),
    ]


class _Info(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_char_p),
        ("gpu", ctypes.c_char_p),
        ("graph_mode", ctypes.c_char_p),
        ("micro_batch_size", ctypes.c_int64),
        ("seq_length", ctypes.c_int64),
        ("num_microbatches", ctypes.c_int64),
        ("vocab_size", ctypes.c_int64),
        ("parameters", ctypes.c_int64),
        ("seed", ctypes.c_uint64),
        ("train_iters", ctypes.c_int64),
        ("step", ctypes.c_int64),
        ("points", ctypes.c_int64),
        ("micro_points", ctypes.c_int64),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("distributed_optimizer", ctypes.c_int),
        ("pad", ctypes.c_int),
        ("comm", ctypes.c_char_p),
    ]


class _StepStats(ctypes.Structure):
    _fields_ = [
        ("step", ctypes.c_int64),
        ("loss", ctypes.c_double),
        ("lr", ctypes.c_double),
        ("grad_norm", ctypes.c_double),
        ("ms", ctypes.c_double),
        ("replayed", ctypes.c_int),
    ]


class _Measure(ctypes.Structure):
    _fields_ = [
        ("last_step_ms", ctypes.c_double),
        ("max_allocated_bytes", ctypes.c_int64),
        ("arena_bytes", ctypes.c_int64),
        ("predicted_peak_bytes", ctypes.c_int64),
        ("replay_ops", ctypes.c_int64),
        ("graph_nodes", ctypes.c_int64),
        ("optimizer_state_bytes", ctypes.c_int64),
        ("optimizer_region_bytes", ctypes.c_int64),
    ]


@dataclasses.dataclass(frozen=True)
class Info:
    """stepc_info: what the step is. batch_shape is what bind_batch takes."""

    device: str  # "cuda" or "cpu"
    gpu: str  # the GPU's name on cuda, "" on cpu
    graph_mode: str  # "eager", "full_iteration", "scoped" (cuda) or "cpu"
    micro_batch_size: int
    seq_length: int
    num_microbatches: int
    vocab_size: int
    parameters: int
    seed: int
    train_iters: int
    step: int  # optimizer steps taken
    points: int  # program points (scheduled ops) per step
    micro_points: int  # of them, those run once per micro-batch
    rank: int = 0  # this process's data-parallel rank
    world_size: int = 1  # data-parallel ranks (docs/data-parallel.md)
    distributed_optimizer: bool = False  # optimizer state sharded over the ranks
    comm: str = "none"  # the collectives: "none", "host" (cpu, rank-ordered sums) or "nccl"

    @property
    def batch_shape(self):
        """(num_microbatches * micro_batch_size, seq_length): one step's tokens, micro-batch major."""
        return (self.num_microbatches * self.micro_batch_size, self.seq_length)


@dataclasses.dataclass(frozen=True)
class StepStats:
    """stepc_step_stats of one optimizer step."""

    step: int  # 1-based, after this step
    loss: float
    lr: float
    grad_norm: float  # before clipping
    ms: float  # cuda: GPU time of the step; cpu: wall time
    replayed: bool  # cuda full_iteration: a graph replay


@dataclasses.dataclass(frozen=True)
class Measure:
    """stepc_measure."""

    last_step_ms: float
    max_allocated_bytes: int
    arena_bytes: int
    predicted_peak_bytes: int
    replay_ops: int
    graph_nodes: int
    optimizer_state_bytes: int = 0  # master weights + moments this rank holds (ZeRO-1: its shard)
    optimizer_region_bytes: int = 0  # ZeRO-1: the optimizer-state region allocated per rank (in arena_bytes)


def _struct_dict(cs):
    return {name: getattr(cs, name) for name, _ in cs._fields_}


_DEVICES = {"auto": 0, "cuda": 1, "cpu": 2}
_GRAPH_MODES = {None: -1, "eager": 0, "full_iteration": 1, "scoped": 2}


def _check_sum(path):
    """libstep.so against its libstep.sum (size and FNV-1a 64, written by stepc build): the dynamic
    loader maps a truncated library and the process dies of SIGBUS inside ctypes.CDLL."""
    sum_path = os.path.join(os.path.dirname(path), "libstep.sum")
    try:
        with open(sum_path, encoding="ascii") as f:
            name, size, digest = f.read(256).split()[:3]
        want_size, want_hash = int(size), int(digest, 16)
    except (OSError, ValueError) as e:
        raise OSError(f"{sum_path} is missing or malformed ({e}): rebuild the artifact with stepc build") from None
    if name != "libstep.so" or os.path.getsize(path) != want_size:
        raise OSError(f"{path} is damaged: {os.path.getsize(path)} bytes, {sum_path} records {want_size}: "
                      "rebuild the artifact")
    h, prime, mask = 0xcbf29ce484222325, 0x100000001b3, 0xFFFFFFFFFFFFFFFF
    with open(path, "rb") as f:
        for c in f.read():
            h = ((h ^ c) * prime) & mask
    if h != want_hash:
        raise OSError(f"{path} is damaged: hash {h:016x}, {sum_path} records {want_hash:016x}: rebuild the artifact")


def _load(path):
    """libstep.so at path with every stepc.h prototype set (ctypes would otherwise pass 64-bit
    arguments and structs returned by value wrongly)."""
    lib = ctypes.CDLL(path)
    h, p = ctypes.c_void_p, ctypes.c_char_p
    st = ctypes.c_int
    protos = {
        "stepc_options_default": (_Options, []),
        "stepc_options_from_env": (st, [ctypes.POINTER(_Options)]),
        "stepc_open": (st, [p, ctypes.POINTER(_Options), ctypes.POINTER(h)]),
        "stepc_close": (None, [h]),
        "stepc_last_error": (p, [h]),
        "stepc_status_name": (p, [st]),
        "stepc_get_info": (st, [h, ctypes.POINTER(_Info)]),
        "stepc_init_params": (st, [h, ctypes.c_uint64]),
        "stepc_save_params": (st, [h, p]),
        "stepc_load_params": (st, [h, p]),
        "stepc_save_checkpoint": (st, [h, p]),
        "stepc_load_checkpoint": (st, [h, p]),
        "stepc_bind_batch": (st, [h, h, h, ctypes.c_size_t]),
        "stepc_bind_batch_device": (st, [h, h, h, ctypes.c_size_t]),
        "stepc_step": (st, [h, ctypes.POINTER(_StepStats)]),
        "stepc_get_measure": (st, [h, ctypes.POINTER(_Measure)]),
        "stepc_eval": (st, [h, h, h, ctypes.c_size_t, ctypes.POINTER(ctypes.c_double), h]),
        "stepc_api_version": (ctypes.c_int, []),
    }
    for name, (res, args) in protos.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise OSError(f"{path} does not export {name}: not a libstep.so of runtime/stepc.h "
                          f"version {API_VERSION}") from None
        fn.restype, fn.argtypes = res, args
    return lib


def _decode(b):
    return b.decode("utf-8", "replace") if b else ""


class Step:
    """One compiled training step, opened from an artifact directory.

    device: "auto" (cuda when a GPU is there, else the CPU reference executor), "cuda" or "cpu".
    graph_mode (cuda): None for the recipe's model.cuda_graph_impl, "eager", "full_iteration" or
    "scoped". cpu_threads: CPU executor threads, 0 for the library's default (results do not
    depend on it). launcher_env: read torchrun's, mpirun's or Slurm's variables (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT), so that this process joins a data-parallel job as one
    rank (every rank needs the job secret in STEPC_JOB_SECRET: docs/data-parallel.md);
    comm_timeout_s bounds every wait on another rank (0: 300 s; at most 86400). gemm_tuning (cuda): 0
    for cuBLASLt's first-ranked algorithm of each GEMM shape, 2 to 16 to time that many at open and
    keep the fastest (runtime/stepc.h, stepc_options.gemm_tuning: two such sessions may differ in
    their bits). Not thread-safe: use one Step from one thread at a time."""

    def __init__(self, artifact_dir, device="auto", graph_mode=None, cpu_threads=0, launcher_env=True,
                 comm_timeout_s=0.0, gemm_tuning=0):
        if device not in _DEVICES:
            raise ValueError(f"stepc.Step: device {device!r} is not one of 'auto', 'cuda', 'cpu'")
        if graph_mode not in _GRAPH_MODES:
            raise ValueError(f"stepc.Step: graph_mode {graph_mode!r} is not one of None, 'eager', "
                             "'full_iteration', 'scoped'")
        if not isinstance(cpu_threads, int) or cpu_threads < 0:
            raise ValueError(f"stepc.Step: cpu_threads must be an int >= 0, not {cpu_threads!r}")
        if not isinstance(gemm_tuning, int) or isinstance(gemm_tuning, bool):
            raise ValueError(f"stepc.Step: gemm_tuning must be an int, not {gemm_tuning!r}")
        self._h = None
        self._device_refs = None
        self.artifact_dir = os.path.abspath(os.fspath(artifact_dir))
        so = os.path.join(self.artifact_dir, "libstep.so")
        if not os.path.isfile(so):
            raise FileNotFoundError(f"{so}: no such file (is {artifact_dir} a directory written by `stepc build -o`?)")
        _check_sum(so)
        self._lib = _load(so)
        opt = self._lib.stepc_options_default()
        opt.device = _DEVICES[device]
        opt.graph_mode = _GRAPH_MODES[graph_mode]
        opt.cpu_threads = cpu_threads
        # under torchrun, mpirun or srun this process is one data-parallel rank (docs/data-parallel.md)
        if launcher_env and self._lib.stepc_options_from_env(ctypes.byref(opt)) != Status.OK:
            raise StepcError(Status.ERR_ARGUMENT, "bad argument", "the launcher's environment is malformed: RANK / "
                             "WORLD_SIZE (or OMPI_COMM_WORLD_*, SLURM_PROCID / SLURM_NTASKS) must be numbers with the "
                             "rank below the world size, MASTER_PORT a TCP port")
        opt.comm_timeout_s = float(comm_timeout_s)
        opt.gemm_tuning = gemm_tuning
        h = ctypes.c_void_p()
        status = self._lib.stepc_open(os.fsencode(self.artifact_dir), ctypes.byref(opt), ctypes.byref(h))
        if status != Status.OK:
            # a failed open still hands back a handle, for the message only (NULL when out of memory)
            msg = _decode(self._lib.stepc_last_error(h)) if h.value else "out of memory"
            self._lib.stepc_close(h)
            # say where: the library's message names the directory only when a file in it is at fault
            where = "" if self.artifact_dir in msg else f"{self.artifact_dir}: "
            raise StepcError(status, _decode(self._lib.stepc_status_name(status)), where + msg)
        self._h = h
        # API 7: what the open chose that the user should hear (the attention fallback), once, as a warning
        notice = getattr(self._lib, "stepc_notice", None)
        if notice is not None:
            notice.restype, notice.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
        self.notice = _decode(notice(h)) if notice is not None else ""
        if self.notice:
            warnings.warn(f"stepc: {self.notice}", RuntimeWarning, stacklevel=2)

    # ---- lifetime ----

    def close(self):
        """Frees the step (its arena, graphs, device memory). Further calls raise ValueError."""
        if self._h is not None:
            self._lib.stepc_close(self._h)
            self._h = None
            self._device_refs = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) is not None and not sys.is_finalizing():
            self.close()

    def _handle(self):
        if self._h is None:
            raise ValueError(f"stepc.Step({self.artifact_dir}): the step is closed")
        return self._h

    def _check(self, status):
        if status != Status.OK:
            name = _decode(self._lib.stepc_status_name(status))
            raise StepcError(status, name, _decode(self._lib.stepc_last_error(self._h)))

    # ---- what the step is ----

    @property
    def info(self):
        """An Info, read afresh (its step counter moves with every step and checkpoint load)."""
        ci = _Info()
        self._check(self._lib.stepc_get_info(self._handle(), ctypes.byref(ci)))
        d = _struct_dict(ci)
        for k in ("device", "gpu", "graph_mode", "comm"):
            d[k] = _decode(d[k])
        d["distributed_optimizer"] = bool(d["distributed_optimizer"])
        d.pop("pad")
        return Info(**d)

    def measure(self):
        cm = _Measure()
        self._check(self._lib.stepc_get_measure(self._handle(), ctypes.byref(cm)))
        return Measure(**_struct_dict(cm))

    # ---- parameters and checkpoints ----

    def init_params(self, seed):
        """Weights from seed; optimizer state and the step counter to zero."""
        self._check(self._lib.stepc_init_params(self._handle(), ctypes.c_uint64(seed)))

    def save_params(self, path):
        """The parameters alone, as one safetensors file."""
        self._check(self._lib.stepc_save_params(self._handle(), os.fsencode(os.fspath(path))))

    def load_params(self, path):
        self._check(self._lib.stepc_load_params(self._handle(), os.fsencode(os.fspath(path))))

    def save_checkpoint(self, path):
        """Parameters, optimizer state, step counter (the whole RNG and data position) into the
        directory path; load_checkpoint resumes bitwise on the same device."""
        self._check(self._lib.stepc_save_checkpoint(self._handle(), os.fsencode(os.fspath(path))))

    def load_checkpoint(self, path):
        self._check(self._lib.stepc_load_checkpoint(self._handle(), os.fsencode(os.fspath(path))))

    # ---- data ----

    def bind_batch(self, tokens, targets):
        """Binds the next step's batch. tokens and targets: integer arrays of shape
        info.batch_shape, (num_microbatches, micro_batch_size, seq_length) or flat, micro-batch
        major. Host data (NumPy arrays, CPU torch tensors, lists) is copied now, as int32.
        Device data (CUDA torch tensors, __cuda_array_interface__ or CUDA DLPack objects) must
        already be int32 and contiguous; it is read by the next step(), which waits for torch's
        current stream (or the interface's stream) first and keeps the buffers alive until it
        returns."""
        self._bind("bind_batch", tokens, targets)

    def bind_batch_device(self, tokens, targets):
        """As bind_batch for device memory only: host data here is a ValueError rather than a
        copy, so that a trainer that means to feed the GPU directly learns when it does not."""
        self._bind("bind_batch_device", tokens, targets)

    def _bind(self, fn, tokens, targets):
        h = self._handle()
        (kt, a), (kg, b) = _classify(tokens, "tokens"), _classify(targets, "targets")
        if fn == "bind_batch_device":
            for kind, x, name in ((kt, tokens, "tokens"), (kg, targets, "targets")):
                if kind != "device":
                    raise ValueError(
                        f"stepc.Step.{fn}: {name} is {_describe(x)} in host memory; this call takes CUDA memory "
                        "(a CUDA torch tensor, __cuda_array_interface__ or a CUDA DLPack object): "
                        "use bind_batch for host data")
        if kt != kg:
            raise TypeError(f"stepc.Step.{fn}: tokens are in {kt} memory and targets in {kg} memory; "
                            "bind both from one side")
        shapes = self._batch_shapes()
        if kt == "device":
            a, b = _device_view(a, "tokens", fn, shapes), _device_view(b, "targets", fn, shapes)
            self._check(self._lib.stepc_bind_batch_device(h, a.ptr, b.ptr, a.count))
            self._device_refs = (a, b)
            return
        a, b = _host_int32(a, "tokens", fn, shapes), _host_int32(b, "targets", fn, shapes)
        # the library copies host data at once and the binding replaces any device one
        self._check(self._lib.stepc_bind_batch(h, a.ctypes.data, b.ctypes.data, a.size))
        self._device_refs = None

    def _batch_shapes(self):
        i = self.info
        rows, t = i.batch_shape
        return {(rows * t,), (rows, t), (i.num_microbatches, i.micro_batch_size, t)}, i

    # ---- stepping ----

    def step(self):
        """One optimizer step over every micro-batch (the bound batch, or the recipe's data);
        returns its StepStats."""
        h = self._handle()
        cs = _StepStats()
        # the producer's writes must be complete before stepc's stream copies the buffers; a
        # failure here leaves the binding (and its buffers) pending for the next step
        for v in self._device_refs or ():
            v.sync()
        try:
            status = self._lib.stepc_step(h, ctypes.byref(cs))
        finally:
            # a binding holds for one step: the buffers may go once the step has returned
            self._device_refs = None
        self._check(status)
        d = _struct_dict(cs)
        d["replayed"] = bool(d["replayed"])
        return StepStats(**d)

    def eval(self, tokens, targets, logprobs=False):
        """The loss of a batch with no update (stepc_eval): what the next step() would report on it
        before its update, with dropout off; no parameter, optimizer state, step counter or binding
        changes. tokens and targets as bind_batch takes host data (a target outside [0, vocab),
        -100 say, is ignored). Returns the loss (a float), or with logprobs=True (loss, lp): lp a
        float32 NumPy array of the tokens' shape, each token's log-probability of its target
        (-its loss; 0 where the target is ignored)."""
        h = self._handle()
        (kt, a), (kg, b) = _classify(tokens, "tokens"), _classify(targets, "targets")
        if kt != "host" or kg != "host":
            raise ValueError("stepc.Step.eval: tokens and targets must be host data (NumPy arrays, CPU torch "
                             "tensors, lists); copy device tensors to the host first")
        shapes = self._batch_shapes()
        a, b = _host_int32(a, "tokens", "eval", shapes), _host_int32(b, "targets", "eval", shapes)
        loss = ctypes.c_double(0)
        lp = _numpy("logprobs").zeros(a.shape, dtype="float32") if logprobs else None
        self._check(self._lib.stepc_eval(h, a.ctypes.data, b.ctypes.data, a.size, ctypes.byref(loss),
                                         lp.ctypes.data if logprobs else None))
        return (loss.value, lp) if logprobs else loss.value


# ---- turning user arrays into what stepc.h takes ----


def _is_torch_tensor(x):
    # without importing torch: a module that never imported it cannot hold its tensors
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def _is_numpy(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_MANAGED = 1, 2, 13  # DLDeviceType


def _classify(x, name):
    """("host", array-like) or ("device", object): where x's memory is."""
    if _is_numpy(x):
        return "host", x
    if _is_torch_tensor(x):
        return ("device", x) if x.is_cuda else ("host", x.detach().cpu().numpy())
    if hasattr(x, "__cuda_array_interface__"):
        return "device", x
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        dev_type, _ = x.__dlpack_device__()
        if dev_type in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
            try:
                import torch
            except ImportError:
                raise TypeError(
                    f"stepc: {name} is a CUDA DLPack object ({type(x).__name__}); reading it takes torch "
                    "(torch.from_dlpack), which is not importable here: pass a torch tensor or an object with "
                    "__cuda_array_interface__") from None
            return "device", torch.from_dlpack(x)
        if dev_type == _DLPACK_CPU:
            return "host", _numpy(name).from_dlpack(x)
        raise TypeError(f"stepc: {name} is a DLPack object on device type {dev_type}; "
                        "stepc takes host (1) or CUDA (2) memory")
    return "host", x


def _describe(x):
    if _is_torch_tensor(x):
        return f"a {x.dtype} torch tensor on {x.device}"
    if _is_numpy(x):
        return f"a {x.dtype} NumPy array"
    return f"a {type(x).__name__}"


def _numpy(why):
    try:
        import numpy
    except ImportError:
        raise ImportError(f"stepc: binding {why} from host memory takes numpy, which is not importable here") \
            from None
    return numpy


def _shape_error(fn, name, shape, shapes):
    i = shapes[1]
    rows, t = i.batch_shape
    return ValueError(
        f"stepc.Step.{fn}: {name} has shape {tuple(shape)}; this step takes ({rows}, {t}) "
        f"(num_microbatches {i.num_microbatches} x micro_batch_size {i.micro_batch_size} rows "
        f"of seq_length {t}), "
        f"({i.num_microbatches}, {i.micro_batch_size}, {t}) or flat ({rows * t},)")


def _host_int32(x, name, fn, shapes):
    """x as a C-contiguous int32 NumPy array of an allowed shape (a copy only where needed)."""
    np = _numpy(name)
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise TypeError(f"stepc.Step.{fn}: {name} has dtype {a.dtype}; token ids must be integers "
                        "(int32, or ints that fit it)")
    if tuple(a.shape) not in shapes[0]:
        raise _shape_error(fn, name, a.shape, shapes)
    if a.dtype != np.int32 and a.size:
        lo, hi = int(a.min()), int(a.max())
        if lo < -(2**31) or hi >= 2**31:
            raise ValueError(f"stepc.Step.{fn}: {name} holds {lo if lo < -(2**31) else hi}, which does not fit int32")
    return np.ascontiguousarray(a, dtype=np.int32)


class _DeviceView:
    """A device buffer checked for stepc_bind_batch_device: its address, element count, the object
    that owns it (kept until the step returns) and how to wait for the writes to it."""

    def __init__(self, owner, ptr, count, sync):
        self.owner, self.ptr, self.count, self.sync = owner, ptr, count, sync


def _device_view(x, name, fn, shapes):
    if _is_torch_tensor(x):
        import torch

        if x.dtype != torch.int32:
            raise TypeError(f"stepc.Step.{fn}: {name} is a {x.dtype} CUDA tensor; the device path takes torch.int32 "
                            f"(convert with {name}.to(torch.int32): stepc does not copy device data to convert it)")
        if tuple(x.shape) not in shapes[0]:
            raise _shape_error(fn, name, x.shape, shapes)
        if not x.is_contiguous():
            raise ValueError(f"stepc.Step.{fn}: {name} is not contiguous (strides {tuple(x.stride())}); "
                             f"pass {name}.contiguous()")
        if x.device.index not in (None, 0):
            raise ValueError(f"stepc.Step.{fn}: {name} is on {x.device}; stepc runs on CUDA device 0 (ordinal 0 "
                             "after CUDA_VISIBLE_DEVICES): move it there, or set CUDA_VISIBLE_DEVICES so that its "
                             "GPU is the first")
        stream = torch.cuda.current_stream(x.device)
        return _DeviceView(x, x.data_ptr(), x.numel(), stream.synchronize)
    cai = x.__cuda_array_interface__
    typestr, shape = cai.get("typestr"), tuple(cai.get("shape", ()))
    if typestr != "<i4":
        raise TypeError(f"stepc.Step.{fn}: {name}'s __cuda_array_interface__ typestr is {typestr!r}; "
                        "the device path takes '<i4' (int32)")
    if cai.get("mask") is not None:
        raise ValueError(f"stepc.Step.{fn}: {name}'s __cuda_array_interface__ has a mask; stepc takes every element")
    if shape not in shapes[0]:
        raise _shape_error(fn, name, shape, shapes)
    strides = cai.get("strides")
    if strides is not None:
        want, acc = [], 4
        for n in reversed(shape):
            want.append(acc)
            acc *= n
        if tuple(strides) != tuple(reversed(want)):
            raise ValueError(f"stepc.Step.{fn}: {name} is not C-contiguous "
                             f"(strides {tuple(strides)} bytes for shape {shape})")
    ptr = cai["data"][0]
    count = 1
    for n in shape:
        count *= n
    stream = cai.get("stream")  # version 3: the producer's stream, to wait for before reading
    return _DeviceView(x, ptr, count, (lambda: _cuda_stream_sync(stream, name)) if stream else (lambda: None))


def _cuda_stream_sync(stream, name):
    # through the driver, which libstep.so loads anyway: the producer (CuPy, Numba) need not be torch
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise RuntimeError(f"stepc.Step.step: waiting for {name}'s stream needs libcuda.so.1: {e}") from None
    cuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    rc = cuda.cuStreamSynchronize(ctypes.c_void_p(stream))
    if rc != 0:
        raise RuntimeError(f"stepc.Step.step: cuStreamSynchronize({stream:#x}), the stream of {name}'s "
                           f"__cuda_array_interface__, returned CUDA error {rc}")
