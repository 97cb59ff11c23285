"""The report's view of the two profile stages: the plausibility bound and the protocol's pair table.

Method: ``baseline_view(data, links)`` turns a profile_baseline record's ``data``
into text cells and plots: one row per profiled row with every term of the
bound (endpoint, removed launches x launch cost, removed bytes / bandwidth,
best case, and the share of the removed kernels' own device time), the
temporaries the campaign names and where they were found among the
allocations, one plot of every row's best case against the bar with the
bound (their geomean), and, folded, per row a bar chart of the kernels'
device time per call (the unfiltered census, flush kernels excluded) and the
formula. ``candidate_view(data, links)`` does
the same for profile_candidate: per row the baseline's replaced kernels
against the candidate's replacement, the pair speedup, the implied endpoint
speedup, the peak memory of both arms with the reduction against the expected
temporaries (the pair table, no plot), and the compile resources per
enabled class summarised per kernel (variant count, register, spill, shared
memory, warp and occupancy ranges; each variant's compile metadata stays in
the record). The template lays the cells out with autoescape on; every
string from a run is escaped. The keys shown here are taken out of the data;
the page names the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgate.report.format import as_float, clean, format_number, mb, ms, times, us
from kgate.report.links import Links
from kgate.report.svg import svg_interval_plot

#: kernels per bar chart: the largest by device time; the census table lists every one
TOP_KERNELS = 10
#: kernels per row in the page's census table (by device time); the record lists every one
CENSUS_SHOWN = 5


def _spread(endpoint: Any) -> str:
    if not isinstance(endpoint, Mapping):
        return "—"
    lo, hi, n = as_float(endpoint.get("p10_ms")), as_float(endpoint.get("p90_ms")), endpoint.get("n")
    return "—" if lo is None or hi is None else f"p10–p90 {lo:.4g}–{hi:.4g} ms, n={clean(n)}"


def _role(k: Mapping[str, Any]) -> str:
    return ("removed" if k.get("removed") else "replaced" if k.get("replaced")
            else "replacement" if k.get("replacement") else "")


def _kernel_rows(kernels: Any) -> list[dict[str, str]]:
    if not isinstance(kernels, list):
        return []
    return [{"kernel": clean(k.get("kernel")), "role": _role(k), "launches": format_number(k.get("launches_per_call")),
             "device": us(k.get("device_us_per_call")), "share": (f"{k['share']:.1%}" if as_float(k.get("share")) is not None
                                                                   else "—")}
            for k in kernels if isinstance(k, Mapping)]


def baseline_view(data: dict[str, Any], links: Links) -> dict[str, Any] | None:
    """The plausibility table, temporaries and per-row kernel bars; pops what it shows from ``data``."""
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, Mapping) and "bound" in r for r in rows):
        return None
    data.pop("rows")
    table, temps, plots, census = [], [], [], []
    mech = data.pop("mechanism", None)
    for r in rows:
        b = r.get("bound") or {}
        removed = r.get("removed") or {}
        if isinstance(r.get("mechanism"), Mapping):
            table.append(_mechanism_row(r, b))
            census.append(_census(r))
            continue
        table.append({
            "row": clean(r.get("row")), "kind": clean(r.get("kind")), "class": clean(r.get("class")),
            "endpoint": ms(r.get("endpoint_ms")), "spread": _spread(r.get("endpoint")),
            "kernel_sum": ms(r.get("kernel_sum_ms")),
            "launches": format_number(b.get("removed_launches_per_call")),
            "launch_us": us(b.get("launch_cost_us")),
            "bytes": mb(b.get("removed_bytes")),
            "traffic_us": us(as_float(b.get("traffic_ms")) * 1e3 if as_float(b.get("traffic_ms")) is not None else None),
            "best": times(b.get("best_case_speedup")),
            "removed_time": us(removed.get("device_us_per_call")),
            "removed_share": (f"{removed['share_of_endpoint']:.1%}" if as_float(removed.get("share_of_endpoint")) is not None
                              else "—"),
            "amdahl": times(removed.get("amdahl_if_their_whole_time_vanished")),
            "arithmetic": clean(b.get("arithmetic")),
            "peak": mb(r.get("peak_bytes")),
        })
        for t in r.get("temporaries") or []:
            if isinstance(t, Mapping):
                temps.append({"row": clean(r.get("row")), "name": clean(t.get("name")), "bytes": mb(t.get("bytes")),
                              "accesses": clean(t.get("accesses")), "found": "yes" if t.get("found") else "NO",
                              "allocs": format_number(t.get("allocations_per_call_of_this_size"))})
        census.append(_census(r))
    launch, bw = data.pop("launch_cost", None), data.pop("bandwidth", None)
    bound, bar = as_float(data.get("bound_geomean")), as_float(data.get("bar"))
    best = [(str(r.get("row")), float(x), None, None) for r in rows
            if (x := as_float((r.get("bound") or {}).get("best_case_speedup"))) is not None]
    what = ("if the hypothesis' mechanism works at its physical best" if mech
            else "if the hypothesis' launches and temporaries vanish")
    bound_plot = (svg_interval_plot(best, title=f"Best case per row {what}",
                                    x_label="best-case endpoint speedup", geomean=("bound (geomean)", bound, None, None)
                                    if bound is not None else None, bar=bar) if best else None)
    formula = clean(data.pop("formula", ""))
    facts = [("bound (geomean of rows)", times(data.pop("bound_geomean", None))),
             ("bar", times(data.get("bar")))]
    if isinstance(launch, Mapping):
        facts.append(("launch cost", f"{us(launch.get('per_launch_us'))} ({clean(launch.get('method'))})"))
    if isinstance(bw, Mapping):
        gbs = as_float(bw.get("bytes_per_s"))
        facts.append(("bandwidth", f"{gbs / 1e9:,.1f} GB/s ({clean(bw.get('method'))})" if gbs else "—"))
    peaks = data.pop("device_peaks", None)
    if isinstance(mech, Mapping):
        labels = mech.get("labels") or {}
        facts.insert(0, ("mechanism", "; ".join(f"{k}: {clean(v)}" for k, v in labels.items()) or "—"))
        if mech.get("weakest"):
            facts.insert(1, ("evidence", "the bound rests on a DECLARED speedup (the engineer's number, not a measurement)"))
    if isinstance(peaks, Mapping) and isinstance(peaks.get("flops_per_s"), Mapping):
        rates = ", ".join(f"{k} {as_float(v) / 1e12:,.0f}" for k, v in peaks["flops_per_s"].items() if as_float(v))
        facts.append(("device peaks", f"{(as_float(peaks.get('bytes_per_s')) or 0) / 1e9:,.0f} GB/s; TFLOP/s {rates} "
                                      f"({clean(peaks.get('source'))})"))
    facts += _host_facts(data.pop("host_load", None))
    return {"facts": facts, "rows": table, "temporaries": temps, "plots": plots, "census": census,
            "bound_plot": bound_plot, "formula": formula, "mechanism": bool(mech)}


def _census(r: Mapping[str, Any]) -> dict[str, Any]:
    ks = r.get("kernels") if isinstance(r.get("kernels"), list) else []
    top = sorted((k for k in ks if isinstance(k, Mapping)), key=lambda k: -(as_float(k.get("device_us_per_call")) or 0.0))
    return {"row": clean(r.get("row")), "kernels": _kernel_rows(top[:CENSUS_SHOWN]), "total": len(ks)}


def _mechanism_row(r: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """One row of the plausibility table of a record with per-kind savings (kgate.measure.mechanism)."""
    kinds = r["mechanism"]
    terms, named = [], []
    for kind, v in kinds.items():
        saved = as_float((v or {}).get("saved_ms"))
        terms.append(f"{kind} {us(saved * 1e3) if saved is not None else '—'}")
        for e in (v or {}).get("entries") or []:
            t, floor = as_float(e.get("time_ms")), as_float(e.get("floor_ms"))
            if kind == "speeds_up":
                frac = as_float(e.get("fraction_of_roofline"))
                named.append(f"{clean(e.get('kernels'))}: {us(t * 1e3) if t is not None else '—'} → floor "
                             f"{us(floor * 1e3) if floor is not None else '—'} ({clean(e.get('bound_by'))}"
                             + (f", at {frac:.0%} of it" if frac is not None else "") + ")")
            else:
                named.append(f"{clean(e.get('kernels'))}: {us(t * 1e3) if t is not None else '—'} / "
                             f"{clean(e.get('speedup'))} (declared: {clean(e.get('why'))})")
    return {"row": clean(r.get("row")), "kind": clean(r.get("kind")), "class": clean(r.get("class") or r.get("dispatch")),
            "endpoint": ms(r.get("endpoint_ms")), "spread": _spread(r.get("endpoint")),
            "kernel_sum": ms(r.get("kernel_sum_ms")), "saved": "; ".join(terms), "named": named,
            "best": times(b.get("best_case_speedup")), "arithmetic": clean(b.get("arithmetic")),
            "peak": mb(r.get("peak_bytes"))}


def _host_facts(host: Any) -> list[tuple[str, str]]:
    """The host's load before and after the measurement (kgate.measure.telemetry.host_load), when recorded."""
    if not isinstance(host, Mapping):
        return []
    cells = []
    for when in ("before", "after"):
        h = host.get(when)
        if isinstance(h, Mapping):
            cells.append(f"{when} {clean(h.get('load_1m'))} on {clean(h.get('cpus'))} CPUs"
                         + (" (busy)" if h.get("busy") else ""))
    return [("host load (1 min)", " · ".join(cells) or "—")]


def _resources(classes: Any) -> list[dict[str, str]]:
    out = []
    for k in classes if isinstance(classes, list) else []:
        if not isinstance(k, Mapping):
            continue
        out.append({"class": clean(k.get("class")), "rows": ", ".join(clean(r) for r in k.get("rows") or []),
                    "candidate": _variants(k.get("candidate_variants")), "baseline": _variants(k.get("baseline_variants")),
                    "problems": "; ".join(clean(p) for p in k.get("problems") or []) or "none"})
    return out


def _variants(variants: Any) -> str:
    """The compiled variants summarised per kernel: count, register range, most spills, shared memory range,
    warps and estimated occupancy range (each variant's constexprs and metadata stay in the record)."""
    if not isinstance(variants, list) or not variants:
        return "—"
    by_kernel: dict[str, list[Mapping[str, Any]]] = {}
    for v in variants:
        if isinstance(v, Mapping):
            by_kernel.setdefault(clean(v.get("kernel", "")), []).append(v)

    def span(vs: list[Mapping[str, Any]], key: str, fmt: str = "{:g}") -> str:
        got = sorted({float(x) for v in vs if (x := as_float(v.get(key))) is not None})
        if not got:
            return "—"
        return fmt.format(got[0]) if len(got) == 1 else f"{fmt.format(got[0])}–{fmt.format(got[-1])}"

    parts = []
    for kernel, vs in sorted(by_kernel.items()):
        occ = [{"o": (v.get("occupancy") or {}).get("fraction")} for v in vs if isinstance(v.get("occupancy"), Mapping)]
        parts.append(f"{kernel}: {len(vs)} variant{'' if len(vs) == 1 else 's'} · {span(vs, 'n_regs')} regs · "
                     f"{span(vs, 'n_spills')} spills · {span(vs, 'shared_bytes')} B shared · {span(vs, 'num_warps')} warps"
                     f" · occupancy {span(occ, 'o', '{:.0%}')}")
    return "; ".join(parts) or "—"


def candidate_view(data: dict[str, Any], links: Links) -> dict[str, Any] | None:
    """The pair table, memory per arm and compile resources per class; pops what it shows from ``data``."""
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, Mapping) and "pair_speedup" in r for r in rows):
        return None
    data.pop("rows")
    table = []
    for r in rows:
        table.append({
            "row": clean(r.get("row")), "class": clean(r.get("class")), "path": clean(r.get("path")),
            "baseline_pair": us(r.get("baseline_pair_us")), "candidate_pair": us(r.get("candidate_pair_us")),
            "pair": times(r.get("pair_speedup")), "implied": times(r.get("implied_endpoint_speedup")),
            "endpoints": f"{ms(r.get('endpoint_base_ms'))} → {ms(r.get('endpoint_cand_ms'))}",
            "peak_base": mb(r.get("peak_base_bytes")), "peak_cand": mb(r.get("peak_cand_bytes")),
            "drop": mb(r.get("peak_reduction_bytes")), "expected": mb(r.get("expected_temporary_bytes")),
            "memory_ok": "yes" if r.get("memory_ok") else "NO",
            "kernels": (", ".join(clean(k) for k in r.get("baseline_pair_kernels") or []) or "—") + " → "
                       + (", ".join(clean(k) for k in r.get("candidate_pair_kernels") or []) or "—"),
            "new": ", ".join(clean(k) for k in r.get("new_kernels") or []) or "—",
        })
    return {"rows": table, "plots": [], "resources": _resources(data.pop("classes", None)),
            "facts": _host_facts(data.pop("host_load", None))}


def pair_cells(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """The pair table's cells for summary.md (header first), from a profile_candidate record's ``data.rows``."""
    out = [["row", "class", "path", "baseline replaced", "candidate", "pair", "implied endpoint", "peak drop (expected)"]]
    for r in rows:
        if isinstance(r, Mapping) and "pair_speedup" in r:
            out.append([clean(r.get("row")), clean(r.get("class")), clean(r.get("path")), us(r.get("baseline_pair_us")),
                        us(r.get("candidate_pair_us")), times(r.get("pair_speedup")), times(r.get("implied_endpoint_speedup")),
                        f"{mb(r.get('peak_reduction_bytes'))} ({mb(r.get('expected_temporary_bytes'))})"])
    return out if len(out) > 1 else []


def bound_cells(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """The plausibility bound per row for summary.md (header first), from a profile_baseline record's ``data.rows``."""
    out = [["row", "class", "endpoint (median)", "removable (launches + traffic)", "best case"]]
    for r in rows:
        b = r.get("bound") if isinstance(r, Mapping) else None
        if isinstance(b, Mapping):
            removable = as_float(b.get("removable_ms"))
            out.append([clean(r.get("row")), clean(r.get("class")), ms(r.get("endpoint_ms")),
                        us(removable * 1e3 if removable is not None else None), times(b.get("best_case_speedup"))])
    return out if len(out) > 1 else []
