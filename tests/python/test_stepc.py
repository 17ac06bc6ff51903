#!/usr/bin/env python3
"""test_stepc.py STEPC — python/stepc.py on the CPU device, against an artifact of models/tiny.lua
that STEPC (this build tree's stepc) builds into a temporary folder: the info fields, bitwise
equal losses for one batch bound through NumPy, through the C call with plain ctypes buffers and
as a strided int64 view, the artifact's own `train` against an unbound Step, the errors (shape,
dtype, status with the library's message, device memory on the cpu device), a checkpoint resumed
by a fresh Step bitwise, and examples/train.py. Exit 77 (skip) only where numpy is not
importable; the torch cases skip alone where torch is not."""

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not importable by", sys.executable)
    sys.exit(77)
try:
    import torch
except ImportError:
    torch = None

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
import stepc  # noqa: E402

STEPC = None  # the stepc binary (argv[1])
TMP = None
ART = None  # the tiny artifact
SEED = 1234
# models/tiny.lua: embedding and head 256*128 each, 4 layers of qkv 128*(128+2*64), proj 128*128,
# SwiGLU 3*128*352 and two RMSNorm weights, the final norm
TINY_PARAMS = 2 * 256 * 128 + 4 * (128 * 256 + 128 * 128 + 3 * 128 * 352 + 2 * 128) + 128


def setUpModule():
    global TMP, ART
    TMP = tempfile.mkdtemp(prefix="stepc-python-")
    ART = os.path.join(TMP, "tiny")
    r = subprocess.run([STEPC, "build", os.path.join(REPO, "models", "tiny.lua"), "-o", ART],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"stepc build models/tiny.lua failed ({r.returncode}):\n{r.stdout}{r.stderr}")


def tearDownModule():
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


def batches(n, shape=(8, 64), vocab=256, seed=7):
    """n (tokens, targets) pairs of int32 arrays, targets the next token as in a language model."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        seq = rng.integers(0, vocab, size=(shape[0], shape[1] + 1), dtype=np.int32)
        out.append((np.ascontiguousarray(seq[:, :-1]), np.ascontiguousarray(seq[:, 1:])))
    return out


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def open_cpu():
    return stepc.Step(ART, device="cpu")


def run(step, bs, bind):
    """Initialises from SEED and steps once per batch, bound by bind(step, tokens, targets)."""
    step.init_params(SEED)
    losses = []
    for tok, tg in bs:
        bind(step, tok, tg)
        losses.append(step.step().loss)
    return losses


def bind_c(step, tok, tg):
    # stepc_bind_batch itself with plain ctypes buffers: the C path, without the module's conversions
    n = tok.size
    a = (ctypes.c_int32 * n)(*tok.ravel().tolist())
    b = (ctypes.c_int32 * n)(*tg.ravel().tolist())
    assert step._lib.stepc_bind_batch(step._h, a, b, n) == 0, step._lib.stepc_last_error(step._h)


class FakeCudaArray:
    """An object that says its memory is on the GPU, for the checks made before any device access
    (the cpu device refuses device bindings before reading the address)."""

    def __init__(self, shape=(8, 64), typestr="<i4", strides=None, ptr=0x7F0000000000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}


class FakeCudaDLPack:
    def __dlpack__(self, stream=None):
        raise AssertionError("a CUDA DLPack object must not be read without torch")

    def __dlpack_device__(self):
        return (2, 0)


class TestStep(unittest.TestCase):
    def test_info(self):
        with open_cpu() as s:
            i = s.info
            self.assertEqual((i.device, i.gpu, i.graph_mode), ("cpu", "", "cpu"))
            self.assertEqual((i.micro_batch_size, i.seq_length, i.num_microbatches, i.vocab_size), (4, 64, 2, 256))
            self.assertEqual((i.parameters, i.seed, i.train_iters, i.step), (TINY_PARAMS, SEED, 200, 0))
            self.assertEqual(i.batch_shape, (8, 64))
            s.step()
            self.assertEqual(s.info.step, 1)
            m = s.measure()
            self.assertGreater(m.arena_bytes, 0)
            self.assertGreater(m.predicted_peak_bytes, 0)
            self.assertGreater(m.last_step_ms, 0)
            self.assertEqual((m.replay_ops, m.graph_nodes), (0, 0))

    def test_unbound_steps_are_the_artifacts_train(self):
        # the artifact's C trainer prints its losses with %.17g: equal floats mean equal doubles,
        # and so the stats struct read through ctypes is the library's
        r = subprocess.run([os.path.join(ART, "train"), "--device", "cpu", "--steps", "3", "--json"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        want = [st["loss"] for st in json.loads(r.stdout)["steps"]]
        with open_cpu() as s:
            got = [s.step() for _ in range(3)]
        self.assertEqual([g.loss for g in got], want)
        self.assertEqual([g.step for g in got], [1, 2, 3])
        self.assertFalse(any(g.replayed for g in got))

    def test_numpy_binding_is_the_c_binding(self):
        bs = batches(3)
        with open_cpu() as s:
            via_c = run(s, bs, bind_c)
        with open_cpu() as s:
            via_numpy = run(s, bs, lambda s, a, b: s.bind_batch(a, b))
        with open_cpu() as s:
            # int64, Fortran order, as (micro-batches, B, T) and flat: converted copies of the same ids
            via_views = run(s, bs, lambda s, a, b: s.bind_batch(np.asfortranarray(a.astype(np.int64)).reshape(2, 4, 64),
                                                                b.astype(np.int16).ravel()))
        with open_cpu() as s:
            via_lists = run(s, bs, lambda s, a, b: s.bind_batch(a.tolist(), b.tolist()))
        with open_cpu() as s:
            unbound = run(s, bs, lambda s, a, b: None)
        print("C", via_c, "numpy", via_numpy)
        self.assertEqual(via_numpy, via_c)
        self.assertEqual(via_views, via_c)
        self.assertEqual(via_lists, via_c)
        self.assertNotEqual(unbound, via_c)

    def test_bad_batches(self):
        (tok, tg), = batches(1)
        with open_cpu() as s:
            with self.assertRaisesRegex(ValueError, r"tokens has shape \(4, 64\); this step takes \(8, 64\)"):
                s.bind_batch(tok[:4], tg)
            with self.assertRaisesRegex(ValueError, r"targets has shape \(511,\)"):
                s.bind_batch(tok, tg.ravel()[:-1])
            with self.assertRaisesRegex(TypeError, r"tokens has dtype float32"):
                s.bind_batch(tok.astype(np.float32), tg)
            wide = tg.astype(np.int64)
            wide[3, 5] = 2**32
            with self.assertRaisesRegex(ValueError, r"targets holds 4294967296, which does not fit int32"):
                s.bind_batch(tok, wide)
            with self.assertRaisesRegex(TypeError, r"tokens are in host memory and targets in device memory"):
                s.bind_batch(tok, FakeCudaArray())
            # the library's own check, with its message
            with self.assertRaises(stepc.StepcError) as e:
                s.bind_batch(tok + 256, tg)
            self.assertEqual(e.exception.status, stepc.Status.ERR_ARGUMENT)
            self.assertEqual(e.exception.status_name, "bad argument")
            self.assertRegex(e.exception.message, r"token 0 is \d+")
            self.assertIn("outside the vocabulary [0, 256)", str(e.exception))

    def test_status_errors_carry_the_message(self):
        missing = os.path.join(TMP, "no-such-checkpoint")
        with open_cpu() as s:
            with self.assertRaises(stepc.StepcError) as e:
                s.load_checkpoint(missing)
            self.assertEqual(e.exception.status, stepc.Status.ERR_IO)
            self.assertEqual(e.exception.status_name, "I/O error")
            self.assertIn(missing, e.exception.message)
            # the handle still works after a failed call
            s.step()
        with self.assertRaisesRegex(FileNotFoundError, "models/libstep.so: no such file"):
            stepc.Step(os.path.join(REPO, "models"), device="cpu")
        with self.assertRaisesRegex(ValueError, "device 'gpu' is not one of"):
            stepc.Step(ART, device="gpu")
        with self.assertRaisesRegex(ValueError, "graph_mode 'full' is not one of"):
            stepc.Step(ART, graph_mode="full")
        with self.assertRaisesRegex(ValueError, "gemm_tuning must be an int"):
            stepc.Step(ART, gemm_tuning="fast")
        # the option reaches the library (the struct's last field, API 8), which refuses it on the cpu
        # device (no cuBLASLt to time) and out of its range
        for bad, why in ((4, "cpu device"), (1, "2 to 16"), (17, "2 to 16")):
            with self.assertRaises(stepc.StepcError) as e:
                stepc.Step(ART, device="cpu", gemm_tuning=bad).close()
            self.assertEqual(e.exception.status, stepc.Status.ERR_ARGUMENT)
            self.assertIn(why, e.exception.message)
        s = open_cpu()
        s.close()
        with self.assertRaisesRegex(ValueError, "the step is closed"):
            s.step()

    def test_save_checkpoint_refuses_the_users_folder(self):
        # docs/promises.md: a save replaces only a checkpoint; the user's folder stays as it was
        mine = os.path.join(TMP, "mine")
        os.makedirs(mine, exist_ok=True)
        with open(os.path.join(mine, "thesis.tex"), "w") as f:
            f.write("x")
        with open_cpu() as s:
            with self.assertRaises(stepc.StepcError) as e:
                s.save_checkpoint(mine)
            self.assertEqual(e.exception.status, stepc.Status.ERR_IO)
            self.assertIn("thesis.tex, which no checkpoint holds", e.exception.message)
        self.assertEqual(os.listdir(mine), ["thesis.tex"])
        with open(os.path.join(mine, "thesis.tex")) as f:
            self.assertEqual(f.read(), "x")

    def test_open_error_carries_the_message(self):
        # the artifact with a damaged step image: a failed open, whose handle gives the message
        broken = os.path.join(TMP, "broken")
        shutil.copytree(ART, broken, symlinks=True)
        img = os.path.join(broken, "step.img")
        data = bytearray(open(img, "rb").read())
        data[len(data) // 2] ^= 0x40
        open(img, "wb").write(bytes(data))
        with self.assertRaises(stepc.StepcError) as cm:
            stepc.Step(broken, device="cpu").close()
        print("open:", cm.exception)
        self.assertEqual(cm.exception.status, stepc.Status.ERR_IO)
        self.assertIn("damaged", cm.exception.message)

    def test_damaged_library_is_refused_before_loading(self):
        # a truncated libstep.so is a SIGBUS inside ctypes.CDLL; a changed byte another library:
        # both are refused against libstep.sum first, as stepc run DIR and train refuse them
        for name, damage in (("truncated", lambda d: d[: len(d) // 2]), ("flipped", lambda d: d[:-1] + bytes([d[-1] ^ 1]))):
            broken = os.path.join(TMP, "lib_" + name)
            shutil.copytree(ART, broken, symlinks=True)
            so = os.path.join(broken, "libstep.so")
            with open(so, "rb") as f:
                data = f.read()
            with open(so, "wb") as f:
                f.write(damage(data))
            with self.assertRaises(OSError) as cm:
                stepc.Step(broken, device="cpu").close()
            print(f"{name} library:", cm.exception)
            self.assertIn("is damaged", str(cm.exception))
        os.remove(os.path.join(broken, "libstep.sum"))
        with self.assertRaises(OSError) as cm:
            stepc.Step(broken, device="cpu").close()
        self.assertIn("libstep.sum is missing", str(cm.exception))

    def test_no_gpu_is_a_status(self):
        try:
            s = stepc.Step(ART, device="cuda")
        except stepc.StepcError as e:
            print("open cuda:", e)
            self.assertEqual(e.status, stepc.Status.ERR_NO_DEVICE, str(e))
            self.assertIn(ART, e.message)
        else:  # a machine with a GPU
            self.assertEqual(s.info.device, "cuda")
            s.close()

    def test_checkpoint_resumes_bitwise(self):
        bs = batches(4, seed=11)
        ckpt = os.path.join(TMP, "ckpt")
        with open_cpu() as s:
            s.init_params(SEED)
            losses = []
            for k, (tok, tg) in enumerate(bs):
                s.bind_batch(tok, tg)
                losses.append(s.step().loss)
                if k == 1:
                    s.save_checkpoint(ckpt)
        with open_cpu() as s:
            s.load_checkpoint(ckpt)
            self.assertEqual(s.info.step, 2)
            resumed = []
            for tok, tg in bs[2:]:
                s.bind_batch(tok, tg)
                st = s.step()
                resumed.append(st.loss)
            self.assertEqual(st.step, 4)
        print("uninterrupted", losses, "resumed", resumed)
        self.assertEqual(resumed, losses[2:])

    def test_params_round_trip(self):
        a, b = os.path.join(TMP, "a.safetensors"), os.path.join(TMP, "b.safetensors")
        with open_cpu() as s:
            s.init_params(99)
            s.save_params(a)
        with open_cpu() as s:
            s.load_params(a)
            s.save_params(b)
        with open(a, "rb") as fa, open(b, "rb") as fb:
            self.assertEqual(fa.read(), fb.read())

    def test_fp32_params_keep_every_bit_in_the_masters(self):
        # a model saved in float32 (a Hugging Face checkpoint, say): the fp32 masters take the
        # file's values, not their bf16 rounding, so training continues from the model as saved
        a, f32, ck = (os.path.join(TMP, n) for n in ("r.safetensors", "f32.safetensors", "f32_ckpt"))
        with open_cpu() as s:
            s.init_params(7)
            s.save_params(a)
        tensors = read_safetensors(a)
        rng = np.random.default_rng(3)
        exact = {}
        for name, (dtype, shape, raw) in tensors.items():
            self.assertEqual(dtype, "BF16")
            bf = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            v = bf.view(np.float32) * (1 + rng.uniform(-2**-10, 2**-10, bf.shape).astype(np.float32))
            exact[name] = ("F32", shape, v.astype(np.float32).tobytes())
        write_safetensors(f32, exact)
        with open_cpu() as s:
            s.load_params(f32)
            s.save_checkpoint(ck)
        masters = read_safetensors(os.path.join(ck, "optimizer.safetensors"))
        params = read_safetensors(os.path.join(ck, "model.safetensors"))
        for name, (_, _, raw) in exact.items():
            self.assertEqual(masters[name + ".master"][2], raw, name + ": the master is not the file's fp32 value")
            # the bf16 param is the master's rounding (round to nearest even)
            m = np.frombuffer(raw, dtype=np.uint32)
            want = ((m + 0x7FFF + ((m >> 16) & 1)) >> 16).astype(np.uint16)
            self.assertEqual(params[name][2], want.tobytes(), name + ": the param is not the master's rounding")

    def test_device_memory_on_the_cpu_device(self):
        (tok, tg), = batches(1)
        with open_cpu() as s:
            with self.assertRaises(stepc.StepcError) as e:
                s.bind_batch(FakeCudaArray(), FakeCudaArray())
            self.assertEqual(e.exception.status, stepc.Status.ERR_UNSUPPORTED)
            self.assertIn("the cpu device takes host buffers", e.exception.message)
            with self.assertRaisesRegex(TypeError, r"typestr is '<i8'; the device path takes '<i4'"):
                s.bind_batch(FakeCudaArray(typestr="<i8"), FakeCudaArray())
            with self.assertRaisesRegex(ValueError, r"tokens is not C-contiguous"):
                s.bind_batch(FakeCudaArray(strides=(4, 32)), FakeCudaArray())
            with self.assertRaisesRegex(ValueError, r"targets has shape \(64, 8\)"):
                s.bind_batch(FakeCudaArray(), FakeCudaArray(shape=(64, 8)))
            with self.assertRaisesRegex(ValueError, r"bind_batch_device: tokens is a int32 NumPy array in host memory"):
                s.bind_batch_device(tok, tg)
            if torch is None:
                with self.assertRaisesRegex(TypeError, r"CUDA DLPack object .* torch .* not importable"):
                    s.bind_batch(FakeCudaDLPack(), FakeCudaDLPack())
            # a failed binding leaves none behind: the step draws the recipe's data
            s.step()

    def test_example_trains_and_resumes(self):
        r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "train.py"), ART, "4"],
                           capture_output=True, text=True, env=dict(os.environ, TEXT=os.path.join(REPO, "README.md")))
        print(r.stdout[-400:], r.stderr[-2000:])
        self.assertEqual(r.returncode, 0)
        self.assertIn("the resumed run continues bitwise", r.stdout)

    @unittest.skipIf(torch is None, "torch is not importable")
    def test_torch_cpu_tensors(self):
        bs = batches(2)
        with open_cpu() as s:
            via_numpy = run(s, bs, lambda s, a, b: s.bind_batch(a, b))
        with open_cpu() as s:
            via_torch = run(s, bs, lambda s, a, b: s.bind_batch(torch.from_numpy(a).long(), torch.from_numpy(b)))
        self.assertEqual(via_torch, via_numpy)
        with open_cpu() as s:
            t = torch.from_numpy(bs[0][0])
            with self.assertRaisesRegex(ValueError, r"tokens is a torch.int32 torch tensor on cpu in host memory; "
                                                    r"this call takes CUDA memory"):
                s.bind_batch_device(t, t)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: test_stepc.py STEPC [unittest options]", file=sys.stderr)
        sys.exit(3)
    STEPC = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
