"""The ncu stage's comparison and gates (pure: tidy tables in, gate rows out).

Method, per profiled row: the baseline side is the baseline arm's kernels that
match ``ncu.kernels.baseline`` (the kernels the hypothesis replaces, summed by
the metric map's combine rules); the candidate side is the candidate arm's
kernels matching ``ncu.kernels.baseline`` or ``ncu.kernels.candidate`` (so a
kernel kept under its old name still counts). Traffic is what the SMs ask L2
for (``l2_load_sectors``/``l2_store_sectors`` x sector bytes), so a temporary
that L2 happens to hold still counts as traffic, less its local-memory (spill)
part (``with_derived``): on the flagship rows fla's inter kernel spills about
as many bytes as the temporaries hold, and a candidate that only stopped
spilling must not pass for one that removed them. The gates, one row each with
every profiled row's numbers:

* ``ncu_removed_launch``: the baseline launches a kernel matching
  ``measure.kernels.removed`` in the profiled call, the candidate launches none
  and a replacement kernel ran instead;
* ``ncu_fp32_traffic_removed``: stores drop by at least (1 - tol) x the
  temporaries' bytes (written once) and loads by at least (1 - tol) x their
  bytes x (accesses - 1) (read back);
* ``ncu_no_hidden_kernels``: the unfiltered census of profile_candidate names
  no kernel new to the candidate that ``measure.kernels.replacement`` misses;
* ``ncu_no_new_spills``: local-memory (spill) traffic at most
  ``spill_ratio_max`` x the baseline side's (0: none at all);
* ``ncu_occupancy_held``: the candidate side's lowest achieved occupancy at
  least ``occupancy_min_ratio`` x the baseline side's lowest;
* ``ncu_same_tensor_work``: tensor-pipe operations per input precision at
  least (1 - ``work_tolerance``) x the baseline side's (no skipped work; more
  is allowed: masked or recomputed tiles are extra work, not less), and none
  in a precision the baseline side does not use (the same numeric flags, e.g.
  no TF32 dot turned BF16); ``skip`` with the numbers when the campaign sets
  no tolerance.

A number a gate needs that is ``unavailable`` makes that gate ``unavailable``;
a row whose profiled call hit ``--launch-count`` makes ``ncu_profiled_every_launch``
inconclusive (the sums would miss launches).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kgate.ncu.parse import UNAVAILABLE, MetricMap, combine, top_stalls
from kgate.records import Gate

SEVERITY = ("fail", "inconclusive", "unavailable", "pass")


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The campaign's ``ncu.gates``."""

    traffic_tolerance: float
    spill_ratio_max: float
    occupancy_min_ratio: float
    work_tolerance: float | None


@dataclass(frozen=True, slots=True)
class Regexes:
    """Kernel-name patterns (``re.search``): the ncu sides and the measure section's removed/replacement."""

    baseline: re.Pattern[str]
    candidate: re.Pattern[str]
    removed: re.Pattern[str] | None
    replacement: re.Pattern[str] | None


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _mb(x: float) -> str:
    return f"{x / 1e6:.1f} MB"


#: byte columns made from sector counts, in the comparison table after the metric map's own columns
DERIVED = ("global_load_bytes", "global_store_bytes", "l2_load_bytes", "l2_store_bytes", "local_bytes")


def with_derived(side: dict[str, Any], mm: MetricMap) -> dict[str, Any]:
    """Add the DERIVED byte columns (sectors x ``mm.sector_bytes``).

    ``l2_load_bytes``/``l2_store_bytes``: everything the SMs ask L2 for, spills included.
    ``global_load_bytes``/``global_store_bytes``: the same less the local-memory (spill) part, so
    that a kernel that stops spilling does not pass for one that stopped writing its temporaries:
    stores less every local store sector (L1 writes through: on the H200 exports the L2 store
    sectors equal global plus local store sectors at L1 to 0.3 %), loads less the local load
    sectors that missed L1 (zero when the kernel has no local loads). ``local_bytes``: local
    loads and stores at L1 (the spill gate's column)."""
    out = dict(side)
    n = {k: _num(side.get(k)) for k in ("l2_load_sectors", "l2_store_sectors", "local_load_sectors",
                                         "local_store_sectors", "local_load_miss_sectors")}
    if n["local_load_miss_sectors"] is None and n["local_load_sectors"] == 0:
        n["local_load_miss_sectors"] = 0.0

    def nbytes(plus: tuple[str, ...], minus: tuple[str, ...] = ()) -> Any:
        if any(n[k] is None for k in plus + minus):
            return UNAVAILABLE
        return (sum(n[k] for k in plus) - sum(n[k] for k in minus)) * mm.sector_bytes  # type: ignore[misc]

    out["l2_load_bytes"] = nbytes(("l2_load_sectors",))
    out["l2_store_bytes"] = nbytes(("l2_store_sectors",))
    out["global_load_bytes"] = nbytes(("l2_load_sectors",), ("local_load_miss_sectors",))
    out["global_store_bytes"] = nbytes(("l2_store_sectors",), ("local_store_sectors",))
    out["local_bytes"] = nbytes(("local_load_sectors", "local_store_sectors"))
    return out


def compare_row(row: str, base: list[dict[str, Any]], cand: list[dict[str, Any]], rx: Regexes, mm: MetricMap,
                expected: dict[str, int]) -> dict[str, Any]:
    """The comparison of one row: both sides combined, the metric table, removed launches, stalls.

    The baseline side is every kernel matching ``ncu.kernels.baseline`` or the removed kernels
    (``measure.kernels.removed``); the candidate side every kernel matching either ncu side or the removed
    kernels. A campaign whose ``ncu.kernels.baseline`` names only the kernel that takes the removed work over
    (an in-place edit that makes a division after it unnecessary, with the same kernel name in both arms)
    thus still sees the removed kernels' traffic on the baseline side, and a candidate that keeps launching
    them is charged for it."""
    rm = rx.removed

    def removed(name: str) -> bool:
        return rm is not None and rm.search(name) is not None

    base_side = [k for k in base if rx.baseline.search(k["kernel"]) or removed(k["kernel"])]
    cand_side = [k for k in cand if rx.baseline.search(k["kernel"]) or rx.candidate.search(k["kernel"])
                 or removed(k["kernel"])]
    b = with_derived(_combined(base_side, mm), mm)
    c = with_derived(_combined(cand_side, mm), mm)
    metrics = []
    for key in [*mm.metrics, *DERIVED]:
        vb, vc = _num(b.get(key)), _num(c.get(key))
        metrics.append({"metric": key, "baseline": b.get(key, UNAVAILABLE), "candidate": c.get(key, UNAVAILABLE),
                        "change": vc - vb if vb is not None and vc is not None else UNAVAILABLE,
                        "ratio": vc / vb if vb and vc is not None else UNAVAILABLE})
    return {
        "row": row,
        "baseline_kernels": [k["kernel"] for k in base_side],
        "candidate_kernels": [k["kernel"] for k in cand_side],
        "removed_launches": None if rm is None else {"base": sum(k["launches"] for k in base if rm.search(k["kernel"])),
                                                     "cand": sum(k["launches"] for k in cand if rm.search(k["kernel"]))},
        "replacement_kernels": [k["kernel"] for k in cand_side if rm is None or not rm.search(k["kernel"])],
        "baseline": b, "candidate": c, "metrics": metrics,
        "tensor_ops": {"base": b.get("tensor_ops", UNAVAILABLE), "cand": c.get("tensor_ops", UNAVAILABLE)},
        "top_stalls": {"base": top_stalls(b.get("stall_samples", UNAVAILABLE)),
                       "cand": top_stalls(c.get("stall_samples", UNAVAILABLE))},
        "expected_removed": expected,
    }


def _combined(kernels: list[dict[str, Any]], mm: MetricMap) -> dict[str, Any]:
    """Kernel rows (each already the sum of its launches) as one side; ``launches`` counts every launch."""
    out = combine(kernels, mm)
    out["launches"] = sum(k["launches"] for k in kernels)
    return out


def expected_traffic(temporaries: list[tuple[int, int]]) -> dict[str, int]:
    """Bytes the hypothesis removes from (nbytes, accesses) pairs: each written once, read accesses - 1 times."""
    return {"store_bytes": sum(n for n, _ in temporaries), "load_bytes": sum(n * (a - 1) for n, a in temporaries)}


# gates


def _gate(name: str, threshold: str, rows: list[tuple[str, str, str]], evidence: str, unit: str | None = None) -> Gate:
    """One gate from per-row (row, status, text): the worst status decides; every row's numbers are the value."""
    status = next((s for s in SEVERITY if any(r[1] == s for r in rows)), "pass")
    value = "; ".join(f"{r}: {text}" for r, _, text in rows)
    bad = [f"{r} ({s}): {text}" for r, s, text in rows if s != "pass"]
    return Gate(name, threshold, value, status, evidence=evidence, unit=unit, detail="; ".join(bad) or None)


def removed_launch_gate(rows: list[dict[str, Any]], evidence: str) -> Gate | None:
    """None when the mechanism removes no kernel (``removed_launches`` is None on every row)."""
    if all(r["removed_launches"] is None for r in rows):
        return None
    out = []
    for r in rows:
        nb, nc = r["removed_launches"]["base"], r["removed_launches"]["cand"]
        rep = ", ".join(r["replacement_kernels"]) or "none"
        text = f"removed-kernel launches {nb} -> {nc}; replacement: {rep}"
        if nc > 0:
            status = "fail"
        elif nb == 0:
            status, text = "inconclusive", text + " (the baseline launched no removed kernel in the profiled call)"
        elif not r["replacement_kernels"]:
            status, text = "fail", text + " (no replacement kernel ran: skipped work?)"
        else:
            status = "pass"
        out.append((r["row"], status, text))
    return _gate("ncu_removed_launch", "baseline launches the removed kernel, the candidate does not and a "
                 "replacement kernel runs", out, evidence)


def traffic_gate(rows: list[dict[str, Any]], tol: float, evidence: str) -> Gate:
    threshold = (f"global-memory L2 stores drop >= {1 - tol:.2f} x the temporaries' bytes and loads >= {1 - tol:.2f} "
                 "x their read-back bytes (baseline side - candidate side; spill traffic not counted)")
    out = []
    for r in rows:
        exp = r["expected_removed"]
        if not exp["store_bytes"]:
            out.append((r["row"], "pass", "the campaign lists no temporaries: nothing to remove"))
            continue
        parts, status = [], "pass"
        for kind, key, removed in (("stores", "global_store_bytes", exp["store_bytes"]),
                                   ("loads", "global_load_bytes", exp["load_bytes"])):
            need = (1 - tol) * removed
            vb, vc = _num(r["baseline"].get(key)), _num(r["candidate"].get(key))
            if vb is None or vc is None:
                status = "unavailable" if status == "pass" else status
                parts.append(f"{kind} unavailable ({key})")
                continue
            drop = vb - vc
            ok = drop >= need
            status = status if ok else "fail"
            parts.append(f"{kind} -{_mb(drop)} (need >= {_mb(need)})")
        dram = [_num(r["baseline"].get(k)) for k in ("dram_read_bytes", "dram_write_bytes")]
        dram_c = [_num(r["candidate"].get(k)) for k in ("dram_read_bytes", "dram_write_bytes")]
        if None not in dram and None not in dram_c:
            parts.append(f"DRAM read+write {_mb(sum(dram))} -> {_mb(sum(dram_c))}")  # type: ignore[arg-type]
        out.append((r["row"], status, ", ".join(parts)))
    return _gate("ncu_fp32_traffic_removed", threshold, out, evidence)


def hidden_gate(census_hidden: list[str] | None, census_source: str, evidence: str) -> Gate:
    threshold = "no kernel new to the candidate outside measure.kernels.replacement (unfiltered census)"
    if census_hidden is None:
        return Gate("ncu_no_hidden_kernels", threshold, UNAVAILABLE, "unavailable", evidence=evidence,
                    detail=f"no kernel census: {census_source}")
    if census_hidden:
        return Gate("ncu_no_hidden_kernels", threshold, f"{len(census_hidden)} hidden", "fail", evidence=evidence,
                    detail=f"hidden replacement kernel(s) in {census_source}: {', '.join(census_hidden)}")
    return Gate("ncu_no_hidden_kernels", threshold, f"0 hidden ({census_source})", "pass", evidence=evidence)


def spill_gate(rows: list[dict[str, Any]], ratio_max: float, evidence: str) -> Gate:
    threshold = ("no local-memory (spill) traffic" if ratio_max == 0 else
                 f"local-memory (spill) traffic <= {ratio_max:g} x the baseline side's")
    out = []
    for r in rows:
        vb, vc = _num(r["baseline"].get("local_bytes")), _num(r["candidate"].get("local_bytes"))
        regs = r["candidate"].get("registers_per_thread")
        regs = f"{regs:g}" if isinstance(regs, float) else regs
        if vb is None or vc is None:
            out.append((r["row"], "unavailable", "local-memory traffic unavailable"))
            continue
        limit = ratio_max * vb
        status = "pass" if vc <= limit else "fail"
        out.append((r["row"], status, f"local {_mb(vb)} -> {_mb(vc)} (max {_mb(limit)}); registers/thread {regs}"))
    return _gate("ncu_no_new_spills", threshold, out, evidence)


def occupancy_gate(rows: list[dict[str, Any]], min_ratio: float, evidence: str) -> Gate:
    threshold = f"lowest achieved occupancy >= {min_ratio:g} x the baseline side's lowest"
    out = []
    for r in rows:
        vb, vc = _num(r["baseline"].get("achieved_occupancy_pct")), _num(r["candidate"].get("achieved_occupancy_pct"))
        if vb is None or vc is None:
            out.append((r["row"], "unavailable", "achieved occupancy unavailable"))
            continue
        status = "pass" if vc >= min_ratio * vb else "fail"
        out.append((r["row"], status, f"{vb:.1f} % -> {vc:.1f} % (min {min_ratio * vb:.1f} %)"))
    return _gate("ncu_occupancy_held", threshold, out, evidence)


def work_gate(rows: list[dict[str, Any]], tol: float | None, evidence: str) -> Gate:
    threshold = ("tensor-pipe operations per input precision"
                 + (f" >= {1 - tol:.2f} x the baseline side's; none in a precision it does not use"
                    if tol is not None else " as the baseline side's (not gated: no ncu.gates.work_tolerance)"))
    out = []
    for r in rows:
        b, c = r["tensor_ops"]["base"], r["tensor_ops"]["cand"]
        if not isinstance(b, dict) or not isinstance(c, dict):
            out.append((r["row"], "unavailable", "tensor-pipe operations unavailable"))
            continue
        parts, status = [], "pass"
        for prec in sorted(set(b) | set(c)):
            vb, vc = b.get(prec, 0.0), c.get(prec, 0.0)
            if not vb and not vc:
                continue
            ok = (vc == 0) if vb == 0 else vc >= (1 - (tol or 0.0)) * vb
            status = status if ok or tol is None else "fail"
            parts.append(f"{prec} {vb:.4g} -> {vc:.4g}")
        out.append((r["row"], status, ", ".join(parts) or "no tensor-pipe operations"))
    gate = _gate("ncu_same_tensor_work", threshold, out, evidence)
    if tol is None:
        return Gate(gate.name, gate.threshold, gate.value, "skip", evidence=evidence,
                    detail="reported, not gated: set ncu.gates.work_tolerance to gate it")
    return gate


def completeness_gate(capped: list[str], launch_count: int, evidence: str) -> Gate:
    threshold = f"every matching launch of the profiled call profiled (fewer than --launch-count {launch_count})"
    if capped:
        return Gate("ncu_profiled_every_launch", threshold, f"{len(capped)} capped", "inconclusive", evidence=evidence,
                    detail=f"these profiles reached --launch-count {launch_count}, so sums may miss launches: "
                           f"{', '.join(capped)}; raise ncu.launch_count")
    return Gate("ncu_profiled_every_launch", threshold, "every profile complete", "pass", evidence=evidence)


def gates(rows: list[dict[str, Any]], th: Thresholds, census_hidden: list[str] | None, census_source: str,
          capped: list[str], launch_count: int, evidence: str) -> list[Gate]:
    """Every comparison gate of the stage, in the order the report shows them."""
    out = [completeness_gate(capped, launch_count, evidence), removed_launch_gate(rows, evidence),
           traffic_gate(rows, th.traffic_tolerance, evidence), hidden_gate(census_hidden, census_source, evidence),
           spill_gate(rows, th.spill_ratio_max, evidence), occupancy_gate(rows, th.occupancy_min_ratio, evidence),
           work_gate(rows, th.work_tolerance, evidence)]
    return [g for g in out if g is not None]
