"""The campaign's reference outside the frozen tests: how far BENCH_BASE and the candidate are from it.

Method: for one row of ``dispatch.rows`` (``dispatch.cpu_rows`` on CPU), in the stage's own process, on
the arms' device: the row's inputs are drawn again with the campaign's ``make_inputs`` and the row's seed,
exactly as each arm's worker drew them, in BENCH_BASE's worktree as the working directory, where its worker
drew them (an input generator may read the target's files: ``kgate init``'s fla-ops one loads the
registry); their sha256 must equal the workers', else it is an error; and
the output gradients again from the row's seed for the outputs ``measure.differentiate`` names, with the
dtypes and shapes the arms returned (the method of ``kgate.measure.worker_calls.Calls._grads_for``). The
reference callable (campaign key ``reference.callable``) runs on float64 copies of the floating-point
inputs (the leaves that need gradients stay leaves) and is differentiated with the same output
gradients, upcast. For every output and leaf gradient both arms saved, the error of an arm is the
relative RMS error ``rms(arm - ref) / rms(ref)`` in float64 (the absolute RMS when the reference is all
zeros; infinite when the arm has a non-finite value where the reference is finite).

Judgement (``judge``): the candidate's error may be at most ``reference.error_ratio_max`` times
BENCH_BASE's on the same row and tensor, where an error below the tensor dtype's unit roundoff
(``finfo.eps / 2``: bfloat16 3.9e-3, float16 4.9e-4, float32 6.0e-8) counts as that roundoff, so a
BENCH_BASE that happens to be exact does not make one rounding step a failure. A BENCH_BASE error above
``reference.base_error_max`` on any tensor means the reference does not describe the op (another
signature, other semantics): an error naming the key, never a judgement against it.

Limits: the reference runs where the arms ran, in float64, once per row (its cost is the campaign's
business: a per-timestep recurrence on the GPU rows takes seconds); a tensor the reference does not
return is listed, not judged; output gradients are drawn by a copy of the worker's method, which the
input hashes and the ``base_error_max`` check guard.
"""

from __future__ import annotations

import contextlib
import math
import runpy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.errors import ConfigError, ProvenanceMismatch
from kgate.measure.rows import MeasureSpec, Row
from kgate.measure.tensors import hash_tree, leaves_of, row_seed


@dataclass(frozen=True, slots=True)
class Reference:
    """The campaign's ``reference`` section."""

    spec: str
    file: Path
    function: str
    error_ratio_max: float
    base_error_max: float


def load(campaign_data: dict[str, Any]) -> Reference | None:
    """The reference section, or None when the campaign has none (the comparison is then reported only)."""
    sec = campaign_data.get("reference")
    if not sec:
        return None
    file_text, _, function = sec["callable"].rpartition(":")
    path = Path(file_text)
    path = path if path.is_absolute() else paths.PROJECT / path
    if not path.is_file():
        raise ConfigError(f"key 'reference.callable': file {file_text} does not exist")
    return Reference(spec=sec["callable"], file=path, function=function,
                     error_ratio_max=float(sec.get("error_ratio_max", 2.0)),
                     base_error_max=float(sec.get("base_error_max", 0.1)))


def unit_roundoff(torch: Any, dtype: Any) -> float:
    """Half the machine epsilon of a floating dtype (0 for anything else)."""
    return float(torch.finfo(dtype).eps) / 2 if dtype.is_floating_point else 0.0


def rel_error(torch: Any, got: Any, ref: Any) -> float:
    """``rms(got - ref) / rms(ref)`` in float64 (the absolute RMS when ``ref`` is all zeros); infinite when
    ``got`` is not finite where ``ref`` is."""
    g, r = got.detach().double().cpu(), ref.detach().double().cpu()
    if bool((~torch.isfinite(g) & torch.isfinite(r)).any()):
        return math.inf
    mask = torch.isfinite(r)
    diff = (g - r)[mask]
    if diff.numel() == 0:
        return 0.0
    err = float(diff.square().mean().sqrt())
    base = float(r[mask].square().mean().sqrt())
    return err / base if base > 0 else err


class Evaluator:
    """The reference on the rows of one stage: inputs and output gradients drawn again, the reference run
    in float64, each arm's error per tensor (module docstring)."""

    def __init__(self, ref: Reference, spec: MeasureSpec, device: str, inputs_cwd: Path) -> None:
        import torch

        self.inputs_cwd = inputs_cwd
        self.torch = torch
        self.ref = ref
        self.spec = spec
        self.device = torch.device(device)
        self.dtype = getattr(torch, spec.dtype)
        self.make_inputs = runpy.run_path(str(spec.inputs), run_name="kgate_bench_inputs")["make_inputs"]
        ns = runpy.run_path(str(ref.file), run_name="kgate_reference")
        fn = ns.get(ref.function)
        if not callable(fn):
            raise ConfigError(f"key 'reference.callable': {ref.file} defines no function {ref.function}")
        self.fn = fn

    def draw(self, row: Row, seed: int) -> tuple[Any, Any]:
        """The row's inputs, drawn as BENCH_BASE's worker drew them: same seed, same working directory."""
        self.torch.manual_seed(seed)
        with contextlib.chdir(self.inputs_cwd):
            return self.make_inputs(dict(row.values), device=self.device, dtype=self.dtype, seed=seed)

    def errors(self, row: Row, worker_hashes: dict[str, str], arms: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """``{tensor: {"base": error, "cand": error, "floor": unit roundoff}}`` for every tensor both arms
        (``arms``: arm -> {tensor name -> tensor}) and the reference have; ``unjudged`` lists the others."""
        torch = self.torch
        seed = row_seed(self.spec.seed, row.name)
        args, kwargs = self.draw(row, seed)
        hashes: dict[str, str] = {}
        hash_tree(torch, list(args), "args", hashes)
        hash_tree(torch, kwargs, "kwargs", hashes)
        if hashes != worker_hashes:
            raise ProvenanceMismatch(f"row {row.name}: the inputs drawn again for the reference differ from the "
                                     "workers' (their sha256); the input generator must be deterministic")
        up = [self._up(a) for a in args], {k: self._up(v) for k, v in kwargs.items()}
        leaves = leaves_of(torch, list(up))
        out = self.fn(*up[0], **up[1])
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        base = arms["base"]
        sel, grads = [], []
        for i in self.spec.differentiate:
            like = base.get(f"output[{i}]")
            if like is None or i >= len(outs) or outs[i] is None:
                raise ConfigError(f"key 'reference.callable': output {i} (measure.differentiate) is missing from "
                                  f"the reference or from BENCH_BASE on row {row.name}")
            gen = torch.Generator(device=self.device).manual_seed(seed + 1 + i)
            g = torch.randn(tuple(like.shape), generator=gen, device=self.device, dtype=torch.float32).to(like.dtype)
            sel.append(outs[i])
            grads.append(g.double())
        torch.autograd.backward(sel, grads)
        ref_t = {f"output[{i}]": o.detach() for i, o in enumerate(outs) if isinstance(o, torch.Tensor)}
        ref_t.update({f"grad[{j}]": t.grad for j, t in enumerate(leaves) if t.grad is not None})
        names = sorted(set(arms["base"]) & set(arms["cand"]))
        result: dict[str, Any] = {"tensors": {}, "unjudged": [n for n in names if n not in ref_t]}
        for name in names:
            if name not in ref_t:
                continue
            b, c, r = arms["base"][name], arms["cand"][name], ref_t[name]
            if tuple(b.shape) != tuple(r.shape) or tuple(c.shape) != tuple(r.shape):
                result["unjudged"].append(name)
                continue
            result["tensors"][name] = {"base": rel_error(torch, b, r), "cand": rel_error(torch, c, r),
                                       "floor": unit_roundoff(torch, b.dtype)}
        return result

    def _up(self, x: Any) -> Any:
        torch = self.torch
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.detach().to(torch.float64).requires_grad_(x.requires_grad)
        return x


def judge(ref: Reference, row: str, result: dict[str, Any]) -> list[str]:
    """Failure lines of one row: a candidate error above ``error_ratio_max`` x max(BENCH_BASE's, roundoff).
    A BENCH_BASE error above ``base_error_max`` is a ``ConfigError`` (the reference does not describe the op)."""
    out = []
    for name, e in result["tensors"].items():
        if e["base"] > ref.base_error_max:
            raise ConfigError(f"key 'reference.callable': BENCH_BASE's error against {ref.spec} is "
                              f"{e['base']:.3g} on row {row}, {name} (reference.base_error_max {ref.base_error_max:g}):"
                              " the reference does not describe the op (signature, semantics, output gradients)")
        scale = max(e["base"], e["floor"])
        e["ratio"] = e["cand"] / scale if scale > 0 else (0.0 if e["cand"] == 0 else math.inf)
        if not e["cand"] <= ref.error_ratio_max * scale:
            out.append(f"{row} {name}: error {e['cand']:.3g} against the reference, BENCH_BASE's {e['base']:.3g} "
                       f"({e['ratio']:.3g}x > {ref.error_ratio_max:g}x)")
    return out
