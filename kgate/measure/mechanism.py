"""The hypothesis' mechanism and the best case it allows (pure; tests/test_mechanism.py).

A campaign's ``measure.mechanism`` names one or more kinds (docs/measurement.md,
"Plausibility bounds"); each turns profile_baseline's measurements of BENCH_BASE
on one row into time the hypothesis can save at best:

* ``removes`` (a fusion): the removed kernels' launches per call x the measured
  launch cost + the temporaries' bytes x accesses / the measured bandwidth;
* ``speeds_up`` (named kernels faster in place, or replaced): the roofline.
  Each entry's kernels take their measured device time per call ``t``; their
  floor is ``max(bytes / bandwidth, flops / peak[precision])`` from the
  campaign's per-row model and the device's measured peaks; saved =
  ``max(0, t - floor)``;
* ``declared`` (the engineer's stated kernel speedup ``s``): Amdahl over the
  named kernels' time, saved = ``t x (1 - 1/s)``. The weakest evidence.

The kinds add up per row; a kernel matched by a ``speeds_up`` entry is not
counted again by ``declared``, and a kernel matched by two entries of one kind
counts under the first. Best case = ``endpoint / (endpoint - saved)`` (None
when saved >= endpoint: the bound limits nothing). Limits: the roofline floor
uses the peaks the device reached in kgate's probes (a copy, a large matrix
product), not the datasheet's, so a kernel can in principle beat its floor by
the probes' shortfall; the bytes and flops are the campaign's model, not
counters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kgate.errors import ConfigError

#: the precisions a ``speeds_up`` entry may name (the FLOP peaks the preflight measures)
PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16")
#: bytes per element of the campaign's ``measure.dtype`` (the ``dtype_bytes`` expression variable)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
KINDS = ("removes", "speeds_up", "declared")
LABELS = {"removes": "removed launches and temporaries (measured)",
          "speeds_up": "roofline of the named kernels (measured times, modelled bytes and flops)",
          "declared": "declared kernel speedup (the engineer's number: the weakest evidence)"}


@dataclass(frozen=True, slots=True)
class Temporary:
    """A temporary the hypothesis removes: its size expression and how many global-memory passes go with it."""

    name: str
    bytes_expr: str
    accesses: int


@dataclass(frozen=True, slots=True)
class Work:
    """One ``speeds_up`` entry: the kernels and the least bytes and flops a call of them needs."""

    kernels: str
    bytes_expr: str
    flops_expr: str
    precision: str


@dataclass(frozen=True, slots=True)
class Declared:
    """One ``declared`` entry: kernels and the speedup the engineer states for them."""

    kernels: str
    speedup: float
    why: str


@dataclass(frozen=True, slots=True)
class Mechanism:
    """The campaign's ``measure.mechanism``, resolved."""

    removed: str | None
    temporaries: tuple[Temporary, ...]
    speeds_up: tuple[Work, ...]
    declared: tuple[Declared, ...]

    @property
    def kinds(self) -> tuple[str, ...]:
        have = {"removes": self.removed is not None, "speeds_up": bool(self.speeds_up),
                "declared": bool(self.declared)}
        return tuple(k for k in KINDS if have[k])

    def named(self) -> str:
        """One regular expression matching every kernel the mechanism names (the pair table's default)."""
        parts = ([self.removed] if self.removed else []) + [w.kernels for w in self.speeds_up] \
            + [d.kernels for d in self.declared]
        return "|".join(f"(?:{p})" for p in parts)

    def expressions(self) -> list[tuple[str, str]]:
        """(key, expression) of every byte and flop expression, for the static checks."""
        out = [(f"measure.mechanism.removes.temporaries.{t.name}.bytes", t.bytes_expr) for t in self.temporaries]
        for i, w in enumerate(self.speeds_up):
            out += [(f"measure.mechanism.speeds_up[{i}].bytes", w.bytes_expr),
                    (f"measure.mechanism.speeds_up[{i}].flops", w.flops_expr)]
        return out

    def regexes(self) -> list[tuple[str, str]]:
        """(key, pattern) of every kernel expression."""
        out = [("measure.mechanism.removes.kernels", self.removed)] if self.removed else []
        out += [(f"measure.mechanism.speeds_up[{i}].kernels", w.kernels) for i, w in enumerate(self.speeds_up)]
        out += [(f"measure.mechanism.declared[{i}].kernels", d.kernels) for i, d in enumerate(self.declared)]
        return out

    @classmethod
    def from_data(cls, m: dict[str, Any]) -> Mechanism:
        rem = m.get("removes")
        temps = tuple(Temporary(str(t["name"]), str(t["bytes"]), int(t.get("accesses", 2)))
                      for t in (rem or {}).get("temporaries", []))
        work = tuple(Work(str(w["kernels"]), str(w["bytes"]), str(w.get("flops", 0)), str(w.get("precision", "fp32")))
                     for w in m.get("speeds_up") or [])
        dec = tuple(Declared(str(d["kernels"]), float(d["speedup"]), str(d["why"])) for d in m.get("declared") or [])
        mech = cls(removed=rem["kernels"] if rem else None, temporaries=temps, speeds_up=work, declared=dec)
        for key, pattern in mech.regexes():
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"key '{key}': '{pattern}' is not a regular expression ({exc})") from exc
        return mech


# the bounds of one row (pure)


def _per_call(kernels: dict[str, dict[str, float]], iterations: int, names: list[str]) -> tuple[float, float]:
    return (sum(kernels[n]["launches"] for n in names) / iterations,
            sum(kernels[n]["device_us"] for n in names) / iterations)


def row_savings(mech: Mechanism, evaluate: Any, kernels: dict[str, dict[str, float]], iterations: int,
                launch_us: float, bytes_per_s: float, flops_per_s: dict[str, float] | None) -> dict[str, Any]:
    """Each kind's saving on one row, with every term (milliseconds per call).

    ``evaluate(expr, key) -> float`` evaluates a byte or flop expression over the row;
    ``kernels`` is the profiled table (name -> launches, device_us over ``iterations`` calls);
    ``flops_per_s`` the device's peaks per precision (None: unknown, the floor is bytes only,
    said so in the term).
    """
    out: dict[str, Any] = {}
    if mech.removed is not None:
        rx = re.compile(mech.removed)
        n, _ = _per_call(kernels, iterations, [k for k in kernels if rx.search(k)])
        removed_bytes = sum(evaluate(t.bytes_expr, f"temporaries.{t.name}.bytes") * t.accesses
                            for t in mech.temporaries)
        launch_ms, traffic_ms = n * launch_us / 1e3, removed_bytes / bytes_per_s * 1e3
        out["removes"] = {"saved_ms": launch_ms + traffic_ms, "removed_launches_per_call": n,
                          "launch_cost_us": launch_us, "launch_ms": launch_ms, "removed_bytes": removed_bytes,
                          "traffic_ms": traffic_ms}
    claimed: set[str] = set()
    if mech.speeds_up:
        entries = []
        for i, w in enumerate(mech.speeds_up):
            rx = re.compile(w.kernels)
            names = [k for k in kernels if rx.search(k) and k not in claimed]
            claimed.update(names)
            _, t_us = _per_call(kernels, iterations, names)
            nbytes = evaluate(w.bytes_expr, f"speeds_up[{i}].bytes")
            flops = evaluate(w.flops_expr, f"speeds_up[{i}].flops")
            peak = (flops_per_s or {}).get(w.precision)
            mem_ms = nbytes / bytes_per_s * 1e3
            flop_ms = flops / peak * 1e3 if peak else None
            floor = max(mem_ms, flop_ms or 0.0)
            t_ms = t_us / 1e3
            entries.append({"kernels": w.kernels, "matched": sorted(names), "time_ms": t_ms, "bytes": nbytes,
                            "flops": flops, "precision": w.precision, "memory_floor_ms": mem_ms,
                            "compute_floor_ms": flop_ms, "floor_ms": floor, "bound_by":
                            "compute" if flop_ms is not None and flop_ms > mem_ms else "memory",
                            "fraction_of_roofline": floor / t_ms if t_ms > 0 else None,
                            "saved_ms": max(0.0, t_ms - floor),
                            "peak_flops_per_s": peak, "note": None if peak or not flops else
                            f"no measured {w.precision} peak: the floor is the memory term only"})
        out["speeds_up"] = {"saved_ms": sum(e["saved_ms"] for e in entries), "entries": entries}
    if mech.declared:
        entries = []
        for d in mech.declared:
            rx = re.compile(d.kernels)
            names = [k for k in kernels if rx.search(k) and k not in claimed]
            claimed.update(names)
            _, t_us = _per_call(kernels, iterations, names)
            saved = t_us / 1e3 * (1.0 - 1.0 / d.speedup)
            entries.append({"kernels": d.kernels, "matched": sorted(names), "time_ms": t_us / 1e3,
                            "speedup": d.speedup, "why": d.why, "saved_ms": saved})
        out["declared"] = {"saved_ms": sum(e["saved_ms"] for e in entries), "entries": entries}
    return out


def best_case(endpoint_ms: float, savings: dict[str, Any]) -> dict[str, Any]:
    """The best-case endpoint speedup of every kind together, and of each kind alone."""
    def ratio(saved: float) -> float | None:
        return endpoint_ms / (endpoint_ms - saved) if saved < endpoint_ms else None

    saved = sum(v["saved_ms"] for v in savings.values())
    terms = " + ".join(f"{k} {v['saved_ms']:.4f} ms" for k, v in savings.items())
    best = ratio(saved)
    text = (f"{endpoint_ms:.4f} ms / ({endpoint_ms:.4f} ms - ({terms})) = "
            + (f"{best:.4f}" if best is not None else "unbounded (saved >= endpoint)"))
    return {"endpoint_ms": endpoint_ms, "saved_ms": saved, "best_case_speedup": best,
            "by_kind": {k: ratio(v["saved_ms"]) for k, v in savings.items()}, "arithmetic": text}


def weakest(kinds: list[str] | tuple[str, ...]) -> str | None:
    """``declared`` when the bound rests on it (the report labels such a bound)."""
    return "declared" if "declared" in kinds else None
