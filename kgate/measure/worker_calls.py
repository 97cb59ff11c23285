"""The worker's rows and calls: seeded inputs, one call of the op, the saved outputs.

Method: a row's inputs come from the campaign's ``make_inputs`` with the row's own seed
(:func:`kgate.measure.tensors.row_seed`), every tensor hashed and fingerprinted on its device. An op
that writes into its inputs is noticed by :meth:`Calls.check_inputs` (the fingerprints after calls,
outside any timing): undeclared, it is the arm's failure naming ``measure.writes_inputs``; declared,
every input is copied back from a pristine copy before every call (untimed), so every call sees the
same values. A call is the op on the row's inputs;
mode ``fwdbwd`` adds ``torch.autograd.backward`` on the outputs the campaign differentiates, with
output gradients drawn once per row from the row's seed. Leaf gradients are set to None and cyclic
garbage is collected before every call (outside timing). An exception of the op is an
:class:`~kgate.measure.worker_state.ArmTargetError`, except a ``ValueError``: that is re-raised as it
is (kgate's own checks raise it; the protocol answers it with kind ``internal``), whoever raised it.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from kgate.measure import census
from kgate.measure.tensors import (
    combined,
    fingerprint,
    hash_leaves,
    hash_threads,
    leaves,
    leaves_of,
    row_seed,
    storage_bytes,
    tensor_sha,
    tensors_of,
)
from kgate.measure.worker_numerics import around_call
from kgate.measure.worker_state import ArmTargetError, RowState, State

#: how far a round's input seed moves from the row's (kgate.stages.bench: fresh values every round)
REFRESH_STRIDE = 7919


class Calls:
    """The base of :class:`kgate.measure.worker.Worker`: its state and the row and call primitives."""

    def __init__(self, arm: str) -> None:
        self.arm = arm
        self.s = State()

    def prepare(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """Each row's inputs made (in row order: the RNG is seeded per row) and then hashed, every row's leaves
        together on :func:`hash_threads` threads (the digests are those of one at a time)."""
        s, torch = self.s, self.s.torch
        out = {}
        named: list[tuple[str, str, Any]] = []
        for values in rows:
            name = values["name"]
            seed = row_seed(s.seed, name)
            torch.manual_seed(seed)
            made = s.make_inputs(dict(values), device=s.device, dtype=s.dtype, seed=seed)
            if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict)):
                raise ValueError(f"make_inputs({name}) must return (args, kwargs), got {type(made).__name__}")
            args, kwargs = tuple(made[0]), made[1]
            named += [(name, path, leaf) for prefix, tree in (("args", list(args)), ("kwargs", kwargs))
                      for path, leaf in leaves(torch, tree, prefix)]
            rs = RowState(name=name, values=dict(values), seed=seed, args=args, kwargs=kwargs,
                          leaves=leaves_of(torch, [args, kwargs]))
            tensors_of(torch, list(args), "args", rs.tensors)
            tensors_of(torch, kwargs, "kwargs", rs.tensors)
            rs.fingerprints = {k: fingerprint(torch, t) for k, t in rs.tensors.items()}
            if s.writes_inputs:
                rs.pristine = {k: t.detach().clone() for k, t in rs.tensors.items()}
            s.rows[name] = rs
            out[name] = {"seed": seed, "tensors": {}, "bytes": storage_bytes(torch, rs.tensors.values())}
        for (name, path, _), digest in zip(named, hash_leaves(torch, [leaf for *_, leaf in named], hash_threads()),
                                           strict=True):
            out[name]["tensors"][path] = digest
        for entry in out.values():
            entry["sha256"] = combined(entry["tensors"])
        self._sync()
        return out

    def release(self, rows: list[str]) -> dict[str, Any]:
        for name in rows:
            self.s.rows.pop(name, None)
        if self.s.cuda:
            self.s.torch.cuda.empty_cache()
        return {"released": rows}

    def _sync(self) -> None:
        if self.s.cuda:
            self.s.torch.cuda.synchronize()

    def _flush(self) -> None:
        if self.s.cuda:
            from kgate.measure import kernels as measure_kernels

            measure_kernels.flush(self.s.flush_buf)
        else:
            self.s.flush_buf.zero_()

    def _zero_grads(self, rs: RowState) -> None:
        for t in rs.leaves:
            t.grad = None

    def _prep(self, rs: RowState) -> None:
        """Before every call, untimed: drop leaf gradients, restore the inputs of an op that writes into them
        (``measure.writes_inputs``), collect the previous call's cyclic garbage (the interpreter and some host
        code build reference cycles that hold tensors)."""
        self._zero_grads(rs)
        self._restore(rs)
        gc.collect()

    def _restore(self, rs: RowState) -> None:
        if rs.pristine is None:
            return
        with self.s.torch.no_grad():
            for k, t in rs.tensors.items():
                t.copy_(rs.pristine[k])

    def check_inputs(self, rs: RowState, after: str) -> None:
        """The row's inputs still hold what was prepared (after restoring them, when the op writes into them).

        Undeclared writes are the arm's failure (``ArmTargetError``): its calls would be timed on different data
        each time; with ``measure.writes_inputs`` a restore that does not bring the values back is."""
        torch = self.s.torch
        self._restore(rs)
        changed = [k for k, t in rs.tensors.items() if fingerprint(torch, t) != rs.fingerprints[k]]
        if not changed:
            return
        if rs.pristine is None:
            raise ArmTargetError(f"row {rs.name}: the op wrote into its inputs ({', '.join(changed)} changed {after}); "
                                 "its calls would be timed on different data each time: declare "
                                 "measure.writes_inputs: true if the op does this by design")
        raise ArmTargetError(f"row {rs.name}: {', '.join(changed)} differ from their pristine copies after the "
                             f"restore ({after}): the inputs are not what was prepared")

    def _grads_for(self, rs: RowState, outs: list[Any]) -> list[Any]:
        torch = self.s.torch
        grads = []
        hashes: dict[str, str] = {}
        for i, o in zip(self.s.differentiate, outs):
            if o is None or not getattr(o, "requires_grad", False):
                raise ValueError(f"row {rs.name}: output {i} is {'None' if o is None else 'not differentiable'}; "
                                 "fix measure.differentiate")
            gen = torch.Generator(device=o.device).manual_seed(rs.seed + 1 + i)
            g = torch.randn(o.shape, generator=gen, device=o.device, dtype=torch.float32).to(o.dtype)
            grads.append(g)
            hashes[f"grad_outputs[{i}]"] = tensor_sha(torch, g)
        rs.grad_hashes = hashes
        return grads

    def _call(self, rs: RowState, mode: str) -> list[Any]:
        """One call of the op; returns its outputs (a caller that drops them frees them at once)."""
        # every call of the op is a window of kgate.measure.worker_numerics (a numeric setting it changes fails it)
        with around_call(rs.name, mode):
            return self._call_op(rs, mode)

    def _call_op(self, rs: RowState, mode: str) -> list[Any]:
        torch = self.s.torch
        if mode == "fwdbwd" and not self.s.differentiate:
            raise ValueError(f"row {rs.name}: mode fwdbwd, but measure.differentiate is [] (the op has no backward)")
        try:
            out = self.s.fn(*rs.args, **rs.kwargs)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            if mode == "fwdbwd":
                try:
                    sel = [outs[i] for i in self.s.differentiate]
                except IndexError as exc:
                    raise ValueError(f"measure.differentiate {list(self.s.differentiate)}: the op returned "
                                     f"{len(outs)} output(s)") from exc
                if rs.grads is None:
                    rs.grads = self._grads_for(rs, sel)
                torch.autograd.backward(sel, rs.grads)
            elif mode != "fwd":
                raise ValueError(f"unknown mode {mode!r} (fwd or fwdbwd)")
            del out
            return outs
        except ValueError:
            raise
        except Exception as exc:
            raise ArmTargetError(f"row {rs.name} {mode}: {type(exc).__name__}: {exc}") from exc

    def _results(self, rs: RowState, mode: str) -> dict[str, Any]:
        """One call (after the usual preparation) and what it produced: every tensor output and, for
        ``fwdbwd``, every leaf gradient, by name (``output[i]``, ``grad[j]``)."""
        torch = self.s.torch
        self._prep(rs)
        outs = self._call(rs, mode)
        tensors = {f"output[{i}]": o.detach() for i, o in enumerate(outs) if isinstance(o, torch.Tensor)}
        tensors.update({f"grad[{j}]": t.grad for j, t in enumerate(rs.leaves)
                        if isinstance(t, torch.Tensor) and t.grad is not None})
        self._sync()
        return tensors

    def outputs(self, row: str, path: str) -> dict[str, Any]:
        """One fwdbwd call (fwd for an op without a backward: ``measure.differentiate`` empty) on the row's inputs;
        every tensor output and every leaf gradient is saved (CPU copies, ``torch.save``) to ``path`` for kgate's
        BENCH_BASE comparison. Returns their sha256."""
        torch = self.s.torch
        tensors = self._results(self._row(row), "fwdbwd" if self.s.differentiate else "fwd")
        torch.save({k: v.cpu() for k, v in tensors.items()}, path)
        return {"sha256": {k: tensor_sha(torch, v) for k, v in tensors.items()},
                "shapes": {k: list(v.shape) for k, v in tensors.items()},
                "dtypes": {k: str(v.dtype) for k, v in tensors.items()}}

    def refresh(self, rows: list[str], round: int) -> dict[str, Any]:
        """New input values for a round, written into the row's own tensors (the same storage, so an op that
        caches on pointers and shapes sees new values at old addresses): ``make_inputs`` with the row's seed moved
        by the round, for the floating-point tensors only. Integer and bool tensors are the row's structure
        (sequence offsets, lengths, indices): they keep their values, since a target may cache what it derives
        from them by tensor identity (fla's ``tensor_cache`` of chunk indices does), which new values in the same
        tensor would turn stale. Returns each row's input fingerprints (equal in both arms: the coordinator checks)."""
        s, torch = self.s, self.s.torch
        out = {}
        for name in rows:
            rs = self._row(name)
            seed = (rs.seed + REFRESH_STRIDE * (int(round) + 1)) % 2**63
            torch.manual_seed(seed)
            args, kwargs = s.make_inputs(dict(rs.values), device=s.device, dtype=s.dtype, seed=seed)
            fresh: dict[str, Any] = {}
            tensors_of(torch, list(args), "args", fresh)
            tensors_of(torch, kwargs, "kwargs", fresh)
            if set(fresh) != set(rs.tensors):
                raise ValueError(f"row {name}: make_inputs gave tensors {sorted(fresh)} for a new seed, not "
                                 f"{sorted(rs.tensors)}")
            with torch.no_grad():
                for k, t in rs.tensors.items():
                    # values change, structure stays: integer and bool tensors (offsets, lengths, indices) keep the
                    # row's values, which targets legitimately cache derived data for by tensor identity
                    if t.is_floating_point() or t.is_complex():
                        t.copy_(fresh[k])
            rs.fingerprints = {k: fingerprint(torch, t) for k, t in rs.tensors.items()}
            if rs.pristine is not None:
                rs.pristine = {k: t.detach().clone() for k, t in rs.tensors.items()}
            out[name] = rs.fingerprints
        self._sync()
        return out

    def sample_outputs(self, row: str, mode: str, seed: int, k: int = 1024) -> dict[str, Any]:
        """One untimed call on the row's current inputs; per output and gradient, its values at ``k`` positions
        drawn from ``seed`` (the same in both arms) and its RMS, for the coordinator's comparison with BENCH_BASE."""
        torch = self.s.torch
        tensors = self._results(self._row(row), mode)
        gen = torch.Generator(device="cpu").manual_seed(int(seed))
        out = {}
        for name, t in tensors.items():
            flat = t.detach().reshape(-1)
            idx = torch.randint(0, max(flat.numel(), 1), (min(int(k), flat.numel()),), generator=gen)
            picked = flat[idx.to(flat.device)].double()
            out[name] = {"values": picked.cpu().tolist(), "rms": _rms(torch, flat)}
        return out

    def compile(self, row: str, mode: str) -> dict[str, Any]:
        """One call of the op in a worker started with ``--compile-only``: every Triton kernel it launches is
        compiled (each autotuner's kept configs too) into the kernel cache, none runs, no pick is made. Returns
        the compiles asked for, by kernel (``kgate.testrun.compile_only.TALLY``'s growth), what of them was
        compiled side by side (``kgate.testrun.parallel_compile.record`` of its tally's growth; zeros without
        compile slots), and the call's wall time. Outputs are whatever their allocations held: nothing about
        them is returned or checked."""
        from kgate.testrun import compile_only, parallel_compile

        if not compile_only.installed():
            raise ValueError("'compile' needs a worker started with --compile-only")
        before = dict(compile_only.TALLY)
        ahead = dict(parallel_compile.TALLY)
        rs = self._row(row)
        t0 = time.perf_counter()
        self._zero_grads(rs)
        self._call(rs, mode)
        self._sync()
        grew = {k: n - before.get(k, 0) for k, n in sorted(compile_only.TALLY.items()) if n != before.get(k, 0)}
        return {"row": row, "mode": mode, "compiles": grew, "wall_s": round(time.perf_counter() - t0, 3),
                **parallel_compile.record(parallel_compile.since(ahead))}

    def _row(self, row: str) -> RowState:
        if row not in self.s.rows:
            raise ValueError(f"row {row} was not prepared")
        return self.s.rows[row]

    def _variant(self, fn: Any, key: str, kernel: Any) -> dict[str, Any]:
        return census.variant(fn, key, kernel, self.s.info.get("device") or {})


# elements per float64 chunk of an RMS: 2**25 doubles are 256 MiB, whatever the tensor's size
_RMS_CHUNK = 1 << 25


def _rms(torch: Any, flat: Any) -> float:
    """Root mean square of a flat tensor in float64, a chunk at a time: a whole-tensor float64 copy of a large
    output (32768 x 128256 logits' gradient: 31 GiB) would not fit beside the row's inputs."""
    n = flat.numel()
    if n == 0:
        return float("nan")
    total = 0.0
    for start in range(0, n, _RMS_CHUNK):
        chunk = flat[start:start + _RMS_CHUNK].double()
        total += float(chunk.mul_(chunk).sum())
    return (total / n) ** 0.5
