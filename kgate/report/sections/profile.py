"""The report's view of the two profile stages: the plausibility bound and the protocol's pair table.

Method: ``baseline_view(data, links)`` turns a profile_baseline record's ``data``
into text cells and plots: one row per profiled row with every term of the
bound (endpoint, removed launches x launch cost, removed bytes / bandwidth,
best case, and the share of the removed kernels' own device time), the
temporaries the campaign names and where they were found among the
allocations, and per row a bar chart of the kernels' device time per call
(the unfiltered census, flush kernels excluded). ``candidate_view(data, links)`` does
the same for profile_candidate: per row the baseline's replaced kernels
against the candidate's replacement, the pair speedup, the implied endpoint
speedup, the peak memory of both arms with the reduction against the expected
temporaries, and the compile resources per enabled class. The template lays
the cells out with autoescape on; every string from a run is escaped. The
keys shown here are taken out of the data, so the generic renderer shows the
rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from kgate.report.format import as_float, clean, format_number, mb, ms, times, us
from kgate.report.links import Links
from kgate.report.svg import svg_bar_chart

#: kernels per bar chart: the largest by device time; the census table lists every one
TOP_KERNELS = 10


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


def kernel_plot(row: str, kernels: Any, title: str = "") -> Markup | None:
    """Bars of the largest kernels' device time per call; the hypothesis' kernels are tagged in their label."""
    if not isinstance(kernels, list):
        return None
    ks = sorted((k for k in kernels if isinstance(k, Mapping) and as_float(k.get("device_us_per_call")) is not None),
                key=lambda k: -float(k["device_us_per_call"]))[:TOP_KERNELS]
    if not ks:
        return None
    labels = [(f"[{_role(k)}] " if _role(k) else "") + str(k.get("kernel")) for k in ks]
    return svg_bar_chart(labels, {"device time per call": [float(k["device_us_per_call"]) for k in ks]}, "us",
                         title=title or f"{row}: device time per call, largest {len(ks)} kernels")


def baseline_view(data: dict[str, Any], links: Links) -> dict[str, Any] | None:
    """The plausibility table, temporaries and per-row kernel bars; pops what it shows from ``data``."""
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, Mapping) and "bound" in r for r in rows):
        return None
    data.pop("rows")
    table, temps, plots, census = [], [], [], []
    for r in rows:
        b = r.get("bound") or {}
        removed = r.get("removed") or {}
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
        plot = kernel_plot(str(r.get("row")), r.get("kernels"))
        if plot is not None:
            plots.append(plot)
        census.append({"row": clean(r.get("row")), "kernels": _kernel_rows(r.get("kernels"))})
    launch, bw = data.pop("launch_cost", None), data.pop("bandwidth", None)
    facts = [("formula", clean(data.pop("formula", "—"))),
             ("bound (geomean of rows)", times(data.pop("bound_geomean", None))),
             ("bar", times(data.get("bar")))]
    if isinstance(launch, Mapping):
        facts.append(("launch cost", f"{us(launch.get('per_launch_us'))} ({clean(launch.get('method'))})"))
    if isinstance(bw, Mapping):
        gbs = as_float(bw.get("bytes_per_s"))
        facts.append(("bandwidth", f"{gbs / 1e9:,.1f} GB/s ({clean(bw.get('method'))})" if gbs else "—"))
    facts += _host_facts(data.pop("host_load", None))
    return {"facts": facts, "rows": table, "temporaries": temps, "plots": plots, "census": census}


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
    """Each compiled variant: kernel, registers, spills, shared memory, warps, estimated occupancy."""
    if not isinstance(variants, list) or not variants:
        return "—"
    parts = []
    for v in variants:
        if not isinstance(v, Mapping):
            continue
        occ = (v.get("occupancy") or {}).get("fraction") if isinstance(v.get("occupancy"), Mapping) else None
        bits = [clean(v.get("kernel", "")),
                f"{clean(v.get('n_regs'))} regs", f"{clean(v.get('n_spills'))} spills",
                f"{clean(v.get('shared_bytes'))} B shared", f"{clean(v.get('num_warps'))} warps",
                f"occupancy {occ:.0%}" if as_float(occ) is not None else "occupancy —"]
        parts.append(" · ".join(bits))
    return "; ".join(sorted(set(parts))) or "—"


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
    named = [r for r in rows
             if as_float(r.get("baseline_pair_us")) is not None and as_float(r.get("candidate_pair_us")) is not None]
    plots = []
    if named:
        plots.append(svg_bar_chart([str(r.get("row")) for r in named],
                                   {"baseline replaced kernels": [float(r["baseline_pair_us"]) for r in named],
                                    "candidate": [float(r["candidate_pair_us"]) for r in named]},
                                   "us", title="Pair: device time per call of the replaced kernels vs the candidate's"))
    return {"rows": table, "plots": plots, "resources": _resources(data.pop("classes", None)),
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
