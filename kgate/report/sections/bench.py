"""The report's view of a bench record: the per-row table, the ratio plot, per-round drift, autotune picks.

Method: ``view(data, links)`` turns the record's ``data`` (kgate.stages.bench) into text
cells and plots. The table has one row per benchmarked row and arm: median,
mean, std, min, p10, p20, p80, p90 and n of every timed call (ms), then the
row's speedup (baseline median / candidate median, per round, combined over
rounds) with its interval, classification, class and path (optimized,
fallback or control), and peak memory per arm. The forest plot shows every
row's speedup and interval against the campaign's resolution band; one
series plot per row shows the per-round medians of both arms, so drift over
rounds is visible. Rows where an unchanged kernel picked a different autotune
config in the two arms are listed. The template escapes every string; the
keys shown here are taken out of the data, so the generic renderer shows the
rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from kgate.report.format import as_float, clean, mb, times
from kgate.report.links import Links
from kgate.report.svg import svg_interval_plot, svg_series_plot

STATS = ("median_ms", "mean_ms", "std_ms", "min_ms", "p10_ms", "p20_ms", "p80_ms", "p90_ms")


def _ms(value: Any) -> str:
    v = as_float(value)
    return "—" if v is None else f"{v:.4g}"


def _interval(iv: Any) -> str:
    if isinstance(iv, list) and len(iv) == 2 and all(as_float(x) is not None for x in iv):
        return f"[{iv[0]:.4f}, {iv[1]:.4f}]"
    return "[—]"


def _label(r: Mapping[str, Any]) -> str:
    return f"{r.get('row')} · {r.get('mode')}"


def view(data: dict[str, Any], links: Links) -> dict[str, Any] | None:
    """The bench section; None when the record has no per-row results (e.g. a stage that could not measure).

    ``links`` is not used: the bench record names no evidence file the section links.
    """
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, Mapping) and "summary" in r for r in rows):
        return None
    data.pop("rows")
    table, series, forest, picks = [], [], [], []
    for r in rows:
        summary = r.get("summary") or {}
        peaks = r.get("peak_bytes") or {}
        for arm in ("base", "cand"):
            s = summary.get(arm) or {}
            table.append({"row": clean(_label(r)) if arm == "base" else "", "arm": arm,
                          "cells": [_ms(s.get(k)) for k in STATS], "n": clean(s.get("n")),
                          "speedup": (f"{times(r.get('speedup'))} {_interval(r.get('interval'))}" if arm == "base" else ""),
                          "classification": clean(r.get("classification")) if arm == "base" else "",
                          "where": (f"{clean(r.get('class'))} · {clean(r.get('path'))}" if arm == "base" else ""),
                          "peak": mb(peaks.get(arm)), "first": arm == "base"})
        iv = r.get("interval") if isinstance(r.get("interval"), list) else [None, None]
        if as_float(r.get("speedup")) is not None:
            forest.append((f"{_label(r)} ({r.get('path')})", float(r["speedup"]),
                           as_float(iv[0]) if len(iv) == 2 else None, as_float(iv[1]) if len(iv) == 2 else None))
        medians = r.get("round_medians_ms") or {}
        if all(isinstance(medians.get(a), list) and len(medians[a]) >= 2 for a in ("base", "cand")):
            series.append(svg_series_plot({"baseline": medians["base"], "candidate": medians["cand"]}, "ms",
                                          title=f"{_label(r)}: median per round, per arm"))
        for d in r.get("autotune_diff") or []:
            picks.append({"row": clean(_label(r)), "what": clean(d)})
    resolution = as_float((data.get("controller") or {}).get("resolution"))
    plots: list[Markup] = []
    if forest:
        band = (1 - resolution, 1 + resolution) if resolution else None
        plots.append(svg_interval_plot(forest, band=band, title="Speedup per row with its interval"))
    est = data.get("geomean") if isinstance(data.get("geomean"), Mapping) else {}
    facts = [("rounds", f"{clean(data.get('rounds'))} (resumed from round {clean(data.get('resumed_from_round'))})"
              if data.get("resumed_from_round") else clean(data.get("rounds"))),
             ("samples per round", clean(data.get("samples_per_round"))),
             ("timer", _timer(data.get("timer"), data.get("rows") or [])),
             ("gated geomean speedup", f"{times(est.get('speedup'))} {_interval([est.get('lower'), est.get('upper')])}"
              if est else "—"),
             ("bar", times(data.get("bar")))]
    return {"facts": facts, "stats": [k.removesuffix("_ms") for k in STATS], "rows": table, "plots": plots,
            "series": series, "picks": picks}


def _timer(timer: Any, rows: list[Any]) -> str:
    """The timer's method, and with the host-ahead hold how many samples had the host ahead of the GPU."""
    if not isinstance(timer, Mapping):
        return "CUDA events around each call (recorded before the timer setting existed)"
    ahead = [r["host_ahead"] for r in rows if isinstance(r, Mapping) and isinstance(r.get("host_ahead"), Mapping)]
    text = clean(timer.get("method"))
    if ahead:
        got = sum(a[arm]["ahead"] for a in ahead for arm in a)
        of = sum(a[arm]["samples"] - a[arm].get("unheld", 0) for a in ahead for arm in a)
        unheld = sum(a[arm].get("unheld", 0) for a in ahead for arm in a)
        text += f"; host ahead in {got} of {of} held samples"
        if unheld:
            text += f"; {unheld} samples timed without the hold (calls that synchronise inside)"
        rearmed = sum(1 for a in ahead if any(a[arm].get("rearmed") for arm in a))
        if rearmed:
            text += f"; the hold re-armed after each host synchronisation in {rearmed} row(s)"
    return text
