"""CPU check of the fused RWKV6 backward candidate against fla's original two-kernel backward.

Usage::

    PYTHONPATH=<kgate repo root> python kernels/rwkv6_bwd_fused/candidate/verify_cpu.py \\
        --fla-src <folder holding an unmodified fla/ package> \\
        --identity pypi:fla-core==0.6.0 | git:27967b970eaaf982a6960abf6cba8add9c34c7cc \\
        [--quick] [--json OUT.json] [--workdir DIR]

The parent process copies ``<fla-src>/fla`` into a work folder, applies this
candidate's ``overlay.yaml`` variant for ``--identity`` with ``kgate.source.overlay``
(the same code the pipeline uses), and runs the checks in a child process whose
``PYTHONPATH`` is that tree plus the kgate repo. The child installs
``kgate.testrun.interp`` first, so every Triton kernel runs on the CPU interpreter.

Checks, all in one process with both paths present:

``wiring``
    ``chunk_rwkv6_bwd`` is rebound to the dispatching host function; the saved
    ``_kgate_unfused_chunk_rwkv6_bwd`` is fla's original; the code of
    ``ChunkRWKV6Function.backward`` reads ``chunk_rwkv6_bwd`` from the module's
    globals at call time; ``kgate_fused_enabled`` answers the class table
    (CUDA capabilities are simulated by replacing the capability query).
``kernel``
    per case: fla's own intermediates (gi, ge, h, dh, dA) feed both fla's
    ``chunk_rwkv6_bwd_dqk_intra`` + ``chunk_rwkv6_bwd_dqkgu`` (then the casts
    the autograd backward applies) and the fused launch. ``matched`` pins the
    fused kernel to the tile sizes the interpreter gives fla's inter kernel
    (same V split, so the same FP32 summation order): expected bit-identical.
    Every production tiling in ``KGATE_FUSED_CONFIGS`` is run as well: a
    different BV splits the inter dot differently, so FP32 results differ in
    the last bits and bf16/fp16 results by at most a rounding step.
``host``
    the whole backward, original vs fused host function: dq, dk, dv, dw (dg),
    du and dh0.
``dispatch``
    ``chunk_rwkv6_bwd`` takes the path the class table says; on a fallback
    class its outputs are bit-identical to the original's.
``autograd``
    ``chunk_rwkv6`` forward + ``.backward()`` reaches the rebound host function
    (counted) and returns exactly its gradients.

Every allocation made while a backward runs is filled with NaN first (as fla's
and kgate's conftests do), so an element a kernel forgets to write shows up.

Differences are reported per tensor as max|a - b| and rms(a - b) / rms(a)
(fla's ``get_err_ratio``). The interpreter checks numerics only: registers,
spills, TF32 and speed need a GPU (see README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TENSORS = ("dq", "dk", "dv", "dg", "du", "dh0")


@dataclasses.dataclass(frozen=True)
class Case:
    """One input configuration; ``cu`` set means packed varlen with B=1."""

    B: int
    T: int
    H: int
    K: int
    V: int
    BT: int
    dtype: str
    h0: bool
    dht: bool
    cu: tuple[int, ...] | None = None
    autograd: bool = False
    quick: bool = False

    @property
    def name(self) -> str:
        lay = f"varlen{list(self.cu)}" if self.cu else f"B{self.B}_T{self.T}"
        return (f"{lay}_H{self.H}_K{self.K}_V{self.V}_BT{self.BT}_{self.dtype}"
                f"{'_h0' if self.h0 else ''}{'_dht' if self.dht else ''}")


CASES = (
    Case(1, 15, 2, 32, 32, 64, "fp32", True, True, quick=True),
    Case(2, 100, 2, 32, 16, 64, "fp32", True, True, autograd=True),
    Case(1, 128, 1, 64, 64, 64, "fp32", False, False),
    Case(1, 64, 2, 60, 48, 64, "fp32", True, True),
    Case(2, 40, 2, 16, 32, 16, "fp32", True, True, autograd=True, quick=True),
    Case(1, 77, 2, 32, 32, 32, "fp32", True, False),
    Case(1, 128, 2, 32, 32, 64, "fp32", True, True, cu=(0, 17, 81, 128), autograd=True, quick=True),
    Case(1, 111, 1, 64, 32, 32, "fp32", True, True, cu=(0, 15, 100, 111)),
    Case(1, 70, 2, 16, 16, 16, "fp32", False, True, cu=(0, 5, 40, 70)),
    Case(1, 64, 1, 128, 32, 64, "fp32", True, True),
    Case(1, 80, 1, 128, 64, 64, "bf16", True, True, cu=(0, 23, 80)),
    Case(1, 40, 1, 256, 32, 64, "bf16", False, True),
    Case(1, 100, 2, 64, 64, 64, "bf16", True, True, quick=True),
    Case(2, 33, 1, 32, 32, 32, "bf16", True, True),
    Case(1, 128, 2, 64, 64, 64, "bf16", True, True, cu=(0, 50, 128), autograd=True),
    Case(1, 48, 2, 32, 32, 16, "bf16", False, True),
    Case(1, 47, 1, 32, 32, 16, "bf16", True, False, cu=(0, 30, 47)),
    Case(1, 90, 2, 32, 32, 64, "fp16", True, True),
)


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fla-src", type=Path, help="folder that holds an unmodified fla/ package")
    p.add_argument("--identity", help="target identity that selects the overlay variant")
    p.add_argument("--workdir", type=Path, help="where to assemble the patched tree (default: a temp folder)")
    p.add_argument("--quick", action="store_true", help="only the cases marked quick")
    p.add_argument("--json", type=Path, help="write every measured number here")
    p.add_argument("--autotune", default="first", choices=("first", "largest"),
                   help="kgate.testrun.interp autotune policy for fla's own kernels")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    return p.parse_args()


def _assemble(args: argparse.Namespace) -> int:
    from kgate.source import overlay

    if args.fla_src is None or args.identity is None:
        sys.exit("--fla-src and --identity are required")
    if not (args.fla_src / "fla" / "ops" / "rwkv6" / "chunk.py").is_file():
        sys.exit(f"{args.fla_src} holds no fla/ops/rwkv6/chunk.py")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="kgate-rwkv6-fused-"))
    tree = work / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(args.fla_src / "fla", tree / "fla")
    touched = overlay.apply(overlay.select(HERE, args.identity), tree)
    print(f"assembled {tree} ({args.identity}): appended to {', '.join(touched)}", flush=True)
    repo_root = Path(overlay.__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(repo_root)]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(tree), "--autotune", args.autotune]
    cmd += ["--identity", args.identity]
    if args.quick:
        cmd.append("--quick")
    if args.json:
        cmd += ["--json", str(args.json.resolve())]
    return subprocess.call(cmd, env=env)


def _tolerate_stale_autotune_keys() -> None:
    # fla at 27967b97 declares an autotune key that is not a kernel argument
    # (fla/ops/cp/chunk_delta_h.py, key 'BT'); Triton >= 3.9 raises at decoration
    # time, older Triton (the GPU hosts run 3.6) silently ignores the name. This
    # wraps Triton's own __init__ (so it runs before kgate.testrun.interp wraps it, with
    # TRITON_INTERPRET already set, as kgate.testrun.interp requires)
    os.environ["TRITON_INTERPRET"] = "1"
    from triton.runtime.autotuner import Autotuner

    init = Autotuner.__init__
    signature = inspect.signature(init)

    def __init__(self: Any, *a: Any, **kw: Any) -> None:
        bound = signature.bind(self, *a, **kw)
        names, key = bound.arguments.get("arg_names"), bound.arguments.get("key")
        if names and key:
            bound.arguments["key"] = [n for n in key if n in names]
        init(*bound.args, **bound.kwargs)

    Autotuner.__init__ = __init__


@contextlib.contextmanager
def _nan_poison(torch: Any):
    """Fill every floating allocation from empty/empty_like/new_empty with NaN."""
    originals = (torch.empty, torch.empty_like, torch.Tensor.new_empty)

    def fill(t: Any) -> Any:
        if (t.is_floating_point() or t.is_complex()) and not t.requires_grad:
            t.fill_(float("nan"))
        return t

    torch.empty = lambda *a, **k: fill(originals[0](*a, **k))
    torch.empty_like = lambda *a, **k: fill(originals[1](*a, **k))
    torch.Tensor.new_empty = lambda self, *a, **k: fill(originals[2](self, *a, **k))
    try:
        yield
    finally:
        torch.empty, torch.empty_like, torch.Tensor.new_empty = originals


def _diff(torch: Any, a: Any, b: Any) -> dict[str, Any]:
    if a is None or b is None:
        return {"present": [a is not None, b is not None]}
    if a.dtype != b.dtype or a.shape != b.shape:
        return {"mismatch": f"{a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"}
    x, y = a.double(), b.double()
    nan = bool(torch.isnan(x).any() or torch.isnan(y).any())
    d = (x - y)
    ref = x.pow(2).mean().sqrt().item()
    return {
        "bitwise": bool(torch.equal(a, b)) and not nan,
        "max_abs": d.abs().max().item() if d.numel() else 0.0,
        "rel_rms": (d.pow(2).mean().sqrt().item() / ref) if ref > 0 else 0.0,
        "nan": nan,
    }


class _Child:
    """The checks; runs inside the process that imports the patched fla tree."""

    def __init__(self, args: argparse.Namespace) -> None:
        from kgate.testrun import interp

        _tolerate_stale_autotune_keys()
        self.interp = interp.install(args.autotune)
        import fla.ops.rwkv6.chunk as C
        import torch
        import triton
        from fla.ops.rwkv6 import chunk_rwkv6
        from fla.ops.utils import prepare_chunk_indices
        from fla.ops.utils.constant import RCP_LN2

        self.args, self.torch, self.triton, self.C = args, torch, triton, C
        self.chunk_rwkv6, self.prepare_chunk_indices, self.RCP_LN2 = chunk_rwkv6, prepare_chunk_indices, RCP_LN2
        self.dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
        self.failures: list[str] = []
        self.results: dict[str, Any] = {"schema": "kgate.cpu_verify/1", "identity": args.identity,
                                        "interp": self.interp, "torch": torch.__version__, "cases": []}

    def fail(self, msg: str) -> None:
        self.failures.append(msg)
        print(f"FAIL {msg}", flush=True)

    def autotuner(self, kernel: Any) -> Any:
        from triton.runtime.autotuner import Autotuner

        while not isinstance(kernel, Autotuner):
            kernel = kernel.fn
        return kernel

    def wiring(self) -> None:
        C, torch = self.C, self.torch
        checks = {
            "rebound": C.chunk_rwkv6_bwd is C.kgate_chunk_rwkv6_bwd,
            "saved_is_original": (C._kgate_unfused_chunk_rwkv6_bwd.__name__ == "chunk_rwkv6_bwd"
                                  and C._kgate_unfused_chunk_rwkv6_bwd.__module__ == C.__name__),
        }
        fn = inspect.unwrap(C.ChunkRWKV6Function.backward)
        checks["backward_reads_global"] = ("chunk_rwkv6_bwd" in fn.__code__.co_names
                                           and fn.__globals__ is vars(C))
        enabled = {(bt, d, lay) for bt in (16, 32, 64) for d in (16, 32, 60, 64, 100, 128, 256, 512)
                   for lay in ("dense", "varlen")
                   if C.kgate_fused_enabled(d, d, bt, lay == "varlen", torch.device("cpu"))}
        expect = {(bt, d, lay) for bt, d, lay in enabled if (bt, C.kgate_d_class(d), lay) in C.KGATE_FUSED_CLASSES}
        checks["class_table_cpu"] = enabled == expect and bool(enabled)
        # no GPU here: answer the capability query with each value in turn
        saved = C._kgate_capability
        try:
            cuda = []
            for cap in ((8, 0), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0)):
                C._kgate_capability = lambda device, cap=cap: cap
                cuda.append(C.kgate_fused_enabled(64, 64, 64, False, "cuda:0") == (cap in C.KGATE_FUSED_CAPABILITIES))
            checks["capability_exact"] = all(cuda)
        finally:
            C._kgate_capability = saved
        self.results["wiring"] = checks
        self.results["classes"] = sorted(C.KGATE_FUSED_CLASSES)
        self.results["enabled_cpu"] = sorted(enabled)
        for name, ok in checks.items():
            print(f"wiring {name}: {'ok' if ok else 'FAIL'}", flush=True)
            if not ok:
                self.fail(f"wiring {name}")

    def inputs(self, case: Case) -> dict[str, Any]:
        torch = self.torch
        gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
        dt = self.dtypes[case.dtype]
        N = case.B if case.cu is None else len(case.cu) - 1

        def rnd(*shape: int) -> Any:
            return torch.randn(*shape, generator=gen)
        x = dict(
            q=rnd(case.B, case.T, case.H, case.K).to(dt),
            k=rnd(case.B, case.T, case.H, case.K).to(dt),
            v=rnd(case.B, case.T, case.H, case.V).to(dt),
            g=torch.nn.functional.logsigmoid(rnd(case.B, case.T, case.H, case.K)).to(dt),
            u=rnd(case.H, case.K).to(dt),
            h0=rnd(N, case.H, case.K, case.V) if case.h0 else None,
            do=rnd(case.B, case.T, case.H, case.V).to(dt),
            dht=rnd(N, case.H, case.K, case.V) if case.dht else None,
        )
        x["cu"] = torch.tensor(case.cu, dtype=torch.long) if case.cu else None
        x["ci"] = self.prepare_chunk_indices(x["cu"], case.BT) if case.cu else None
        x["scale"] = case.K ** -0.5
        return x

    def bwd_args(self, case: Case, x: dict[str, Any], A: Any) -> dict[str, Any]:
        return dict(q=x["q"], k=x["k"], v=x["v"], g=x["g"], u=x["u"], scale=x["scale"], initial_state=x["h0"],
                    A=A, do=x["do"], dht=x["dht"], cu_seqlens=x["cu"], chunk_size=case.BT, chunk_indices=x["ci"])

    def cast(self, x: dict[str, Any], out: tuple[Any, ...]) -> dict[str, Any]:
        # what ChunkRWKV6Function.backward hands to autograd
        dq, dk, dv, dg, du, dh0 = out
        return dict(dq=dq.to(x["q"]), dk=dk.to(x["k"]), dv=dv.to(x["v"]), dg=dg.to(x["g"]), du=du.to(x["u"]), dh0=dh0)

    def compare(self, case: Case, check: str, a: dict[str, Any], b: dict[str, Any], want_bitwise: bool,
                rel_max: float | None) -> dict[str, Any]:
        row = {}
        for name in TENSORS:
            if name not in a:
                continue
            r = self._check_one(a[name], b[name], want_bitwise, rel_max)
            row[name] = r
            if r.get("problem"):
                self.fail(f"{case.name} {check} {name}: {r['problem']}")
        text = " ".join(f"{n}={self._fmt(r)}" for n, r in row.items())
        print(f"  {check:<26} {text}", flush=True)
        return row

    def _check_one(self, a: Any, b: Any, want_bitwise: bool, rel_max: float | None) -> dict[str, Any]:
        r = _diff(self.torch, a, b)
        if "present" in r:
            if r["present"][0] != r["present"][1]:
                r["problem"] = f"present {r['present']}"
        elif "mismatch" in r:
            r["problem"] = r["mismatch"]
        elif r["nan"]:
            r["problem"] = "NaN"
        elif want_bitwise and not r["bitwise"]:
            r["problem"] = f"not bit-identical (max_abs {r['max_abs']:.2e})"
        elif rel_max is not None and r["max_abs"] > 1e-6 and r["rel_rms"] > rel_max:
            r["problem"] = f"rel_rms {r['rel_rms']:.2e} > {rel_max:.0e}"
        return r

    @staticmethod
    def _fmt(r: dict[str, Any]) -> str:
        if "present" in r:
            return "-"
        if r.get("bitwise"):
            return "=="
        return f"{r.get('max_abs', float('nan')):.1e}/{r.get('rel_rms', float('nan')):.1e}"

    def kernel_level(self, case: Case, x: dict[str, Any], rec: dict[str, Any], rel_max: float) -> None:
        C, triton = self.C, self.triton
        gi, ge = C.chunk_rwkv6_fwd_cumsum(x["g"], chunk_size=case.BT, scale=self.RCP_LN2, cu_seqlens=x["cu"],
                                          chunk_indices=x["ci"])
        h, _ = C.chunk_fwd_h(k=x["k"], v=x["v"], g=None, gk=gi, gv=None, h0=x["h0"], output_final_state=False,
                             cu_seqlens=x["cu"], chunk_size=case.BT, states_in_fp32=True)
        dh, _ = C.chunk_rwkv6_bwd_dh(q=x["q"], k=x["k"], v=x["v"], gi=gi, ge=ge, do=x["do"], h0=x["h0"],
                                     dht=x["dht"], scale=x["scale"], cu_seqlens=x["cu"], chunk_size=case.BT,
                                     states_in_fp32=True, chunk_indices=x["ci"])
        dA = C.chunk_gla_bwd_dA(v=x["v"], do=x["do"], scale=x["scale"], cu_seqlens=x["cu"], chunk_size=case.BT,
                                chunk_indices=x["ci"])
        common = dict(q=x["q"], k=x["k"], gi=gi, ge=ge, dA=dA, cu_seqlens=x["cu"], chunk_size=case.BT,
                      chunk_indices=x["ci"])
        with _nan_poison(self.torch):
            dq1, dk1 = C.chunk_rwkv6_bwd_dqk_intra(**common)
            dq2, dk2, dg2, du2 = C.chunk_rwkv6_bwd_dqkgu(v=x["v"], h=h, g=x["g"], u=x["u"], do=x["do"], dh=dh, dq=dq1,
                                                          dk=dk1, scale=x["scale"], **{n: common[n] for n in (
                                                              "q", "k", "gi", "ge", "dA", "cu_seqlens", "chunk_size",
                                                              "chunk_indices")})
        ref = dict(dq=dq2.to(x["q"]), dk=dk2.to(x["k"]), dg=dg2.to(x["g"]), du=du2.to(x["u"]))
        inter = self.autotuner(C.chunk_rwkv6_bwd_kernel_inter)
        from kgate.testrun.interp import choose_config
        picked = choose_config(inter.configs, self.interp["autotune_policy"])
        tilings = [("matched", picked.kwargs["BK"], picked.kwargs["BV"], picked.num_warps)]
        tilings += [(f"BK{bk}_BV{bv}_w{w}", bk, bv, w) for bk, bv, w in C.KGATE_FUSED_CONFIGS]
        fused = self.autotuner(C.chunk_rwkv6_bwd_kernel_fused)
        saved = list(fused.configs)
        try:
            for label, bk, bv, w in tilings:
                fused.configs = [triton.Config({"BK": bk, "BV": bv}, num_warps=w)]
                fused.cache.clear()
                with _nan_poison(self.torch):
                    dq, dk, dg, du = C.kgate_chunk_rwkv6_bwd_dqkgu_fused(
                        v=x["v"], h=h, g=x["g"], u=x["u"], do=x["do"], dh=dh, scale=x["scale"], **common)
                got = dict(dq=dq, dk=dk, dg=dg, du=du.to(x["u"]))
                want_bitwise = label == "matched"
                rec["kernel"][label] = self.compare(case, f"kernel {label} (BK{bk} BV{bv})", ref, got, want_bitwise,
                                                    rel_max)
        finally:
            fused.configs = saved
            fused.cache.clear()

    def run_case(self, case: Case) -> None:
        C, torch = self.C, self.torch
        t0 = time.time()
        x = self.inputs(case)
        enabled = C.kgate_fused_enabled(case.K, case.V, case.BT, case.cu is not None, x["q"].device)
        print(f"case {case.name}: class ({case.BT}, D{C.kgate_d_class(case.K)}, "
              f"{'varlen' if case.cu else 'dense'}) -> {'fused' if enabled else 'fallback'}", flush=True)
        rec: dict[str, Any] = {"case": dataclasses.asdict(case), "name": case.name, "fused_path": enabled,
                               "kernel": {}}
        # bf16/fp16 results are compared after the same final rounding on both sides
        rel_max = {"fp32": 1e-5, "bf16": 1e-2, "fp16": 2e-3}[case.dtype]
        A, _, _, _ = C.chunk_rwkv6_fwd(x["q"], x["k"], x["v"], x["g"], x["u"], x["scale"], x["h0"], True, x["cu"],
                                       case.BT, x["ci"])
        self.kernel_level(case, x, rec, rel_max)

        a = self.bwd_args(case, x, A)
        with _nan_poison(torch):
            ref = self.cast(x, C._kgate_unfused_chunk_rwkv6_bwd(**a))
            new = self.cast(x, C.kgate_fused_chunk_rwkv6_bwd(**a))
        rec["host"] = self.compare(case, "host original vs fused", ref, new, False, rel_max)

        calls = {"fused": 0, "original": 0}
        fused_fn, orig_fn = C.kgate_fused_chunk_rwkv6_bwd, C._kgate_unfused_chunk_rwkv6_bwd

        def count(name: str, fn: Any) -> Any:
            def wrapped(**kw: Any) -> Any:
                calls[name] += 1
                return fn(**kw)
            return wrapped
        C.kgate_fused_chunk_rwkv6_bwd, C._kgate_unfused_chunk_rwkv6_bwd = count("fused", fused_fn), count("original",
                                                                                                          orig_fn)
        try:
            with _nan_poison(torch):
                disp = self.cast(x, C.chunk_rwkv6_bwd(**a))
            took = "fused" if calls["fused"] else "original"
            rec["dispatch"] = {"took": took, "calls": dict(calls)}
            if (took == "fused") != enabled or sum(calls.values()) != 1:
                self.fail(f"{case.name} dispatch took {took} ({calls}), class says {'fused' if enabled else 'fallback'}")
            print(f"  dispatch                   took {took}", flush=True)
            if not enabled:
                rec["fallback"] = self.compare(case, "fallback vs original", ref, disp, True, None)
            if case.autograd:
                calls.update(fused=0, original=0)
                rec["autograd"] = self.autograd(case, x, disp)
                rec["autograd"]["calls"] = dict(calls)
                if calls["fused" if enabled else "original"] != 1 or sum(calls.values()) != 1:
                    self.fail(f"{case.name} autograd reached {calls}")
                print(f"  autograd                   reached {calls}", flush=True)
        finally:
            C.kgate_fused_chunk_rwkv6_bwd, C._kgate_unfused_chunk_rwkv6_bwd = fused_fn, orig_fn
        rec["seconds"] = round(time.time() - t0, 1)
        self.results["cases"].append(rec)

    def autograd(self, case: Case, x: dict[str, Any], direct: dict[str, Any]) -> dict[str, Any]:
        torch = self.torch
        leaves = {n: x[n].clone().requires_grad_() for n in ("q", "k", "v", "g", "u")}
        h0 = x["h0"].clone().requires_grad_() if x["h0"] is not None else None
        o, ht = self.chunk_rwkv6(leaves["q"], leaves["k"], leaves["v"], leaves["g"], leaves["u"], scale=x["scale"],
                                 initial_state=h0, output_final_state=True, cu_seqlens=x["cu"], chunk_size=case.BT)
        # autograd cases carry a dht, so backward receives exactly the direct call's do and dht
        loss = (o * x["do"]).sum() + (ht * x["dht"]).sum()
        with _nan_poison(torch):
            loss.backward()
        got = dict(dq=leaves["q"].grad, dk=leaves["k"].grad, dv=leaves["v"].grad, dg=leaves["g"].grad,
                   du=leaves["u"].grad, dh0=h0.grad if h0 is not None else None)
        return self.compare(case, "autograd vs direct call", direct, got, True, None)

    def main(self) -> int:
        self.wiring()
        cases = [c for c in CASES if c.quick or not self.args.quick]
        for case in cases:
            self.run_case(case)
        self.results["failures"] = self.failures
        if self.args.json:
            self.args.json.parent.mkdir(parents=True, exist_ok=True)
            self.args.json.write_text(json.dumps(self.results, indent=1, default=str))
        print(f"{len(cases)} cases, {len(self.failures)} failure(s)", flush=True)
        return 1 if self.failures else 0


if __name__ == "__main__":
    ARGS = _parse()
    sys.exit(_Child(ARGS).main() if ARGS.child else _assemble(ARGS))
