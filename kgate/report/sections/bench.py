"""The report's view of a bench record: the deciding numbers, one forest plot, the per-row table folded.

Method: ``view(data, links)`` turns the record's ``data`` (kgate.stages.bench) into
text cells and one plot. Shown first: rounds, samples per round, the timer,
the gated geomean speedup with its interval and the bar. The forest plot has
every row's speedup (baseline median / candidate median, per round, combined
over rounds) with its interval and the record's own classification, the
geomean row below a rule, the bar as a line and the SAME band (1 ± the
controller's resolution). Folded below: one row per benchmarked row and arm
with median, mean, std, min, p10, p20, p80, p90 and n of every timed call
(ms), the drift of the per-round medians (least-squares slope per round
relative to the median; the medians themselves stay in the record), class
and path, and peak memory per arm. Rows where an unchanged kernel picked a
different autotune config in the two arms are listed; folded, every autotuned
kernel's picks in both arms with the rows that ran them and whether the pick
was shared through the kernel cache, tuned per arm, or the candidate's own.
Rows and arms whose speed is set per worker process (processes of the same
code differ while each is steady: ``kgate.gates.processes.process_speeds``) are
listed, with their fastest and slowest process; records without worker pids
show no such line. The template escapes
every string; the keys shown here are taken out of the data, and the page
names the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from kgate.report.format import as_float, clean, mb, times
from kgate.report.links import Links
from kgate.report.svg import drift, svg_interval_plot

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
    table, forest, classes, picks, per_process = [], [], [], [], []
    seen_processes = False
    tuned: dict[tuple[str, str, str, str], list[str]] = {}
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
                          "drift": _drift_text((r.get("round_medians_ms") or {}).get(arm)),
                          "peak": mb(peaks.get(arm)), "first": arm == "base"})
        iv = r.get("interval") if isinstance(r.get("interval"), list) else [None, None]
        if as_float(r.get("speedup")) is not None:
            forest.append((f"{_label(r)} ({r.get('path')})", float(r["speedup"]),
                           as_float(iv[0]) if len(iv) == 2 else None, as_float(iv[1]) if len(iv) == 2 else None))
            classes.append(clean(r.get("classification")) if r.get("classification") else None)
        speeds = r.get("process_speeds")
        if isinstance(speeds, Mapping):
            seen_processes = True
            per_process += [_process_text(_label(r), arm, v) for arm, v in speeds.items()
                            if isinstance(v, Mapping) and v.get("per_process")]
        for d in r.get("autotune_diff") or []:
            picks.append({"row": clean(_label(r)), "what": clean(d)})
        for p in r.get("autotune_picks") or []:
            if isinstance(p, Mapping):
                k = (str(p.get("kernel")), str(p.get("status")), ", ".join(map(str, p.get("base") or [])) or "—",
                     ", ".join(map(str, p.get("cand") or [])) or "—")
                tuned.setdefault(k, []).append(_label(r))
    resolution = as_float((data.get("controller") or {}).get("resolution"))
    est = data.get("geomean") if isinstance(data.get("geomean"), Mapping) else {}
    plots: list[Markup] = []
    if forest:
        band = (1 - resolution, 1 + resolution) if resolution else None
        geo = (("geomean (gated rows)", float(est["speedup"]), as_float(est.get("lower")), as_float(est.get("upper")))
               if as_float(est.get("speedup")) is not None else None)
        plots.append(svg_interval_plot(forest, band=band, title="Speedup per row with its interval",
                                       geomean=geo, bar=as_float(data.get("bar")), classes=classes))
    facts = [("rounds", f"{clean(data.get('rounds'))} (resumed from round {clean(data.get('resumed_from_round'))})"
              if data.get("resumed_from_round") else clean(data.get("rounds"))),
             ("samples per round", clean(data.get("samples_per_round"))),
             ("timer", _timer(data.get("timer"), data.get("rows") or [])),
             ("gated geomean speedup", f"{times(est.get('speedup'))} {_interval([est.get('lower'), est.get('upper')])}"
              if est else "—"),
             ("bar", times(data.get("bar")))]
    return {"facts": facts, "stats": [k.removesuffix("_ms") for k in STATS], "rows": table, "plots": plots,
            "picks": picks, "per_process": per_process if seen_processes else None,
            "tuned": [{"kernel": clean(k), "status": clean(st), "base": clean(b), "cand": clean(c),
                       "rows": clean(", ".join(rs))} for (k, st, b, c), rs in sorted(tuned.items())],
            "tuned_counts": ", ".join(f"{n} {st}" for st, n in sorted(_count(st for (_k, st, _b, _c) in tuned).items()))}


def _process_text(label: str, arm: str, v: Mapping[str, Any]) -> str:
    """One row and arm whose speed is set per worker process (kgate.gates.processes.process_speeds)."""
    return clean(f"{label} {arm}: {v.get('processes')} processes from {_ms(v.get('fastest_ms'))} to "
                 f"{_ms(v.get('slowest_ms'))} ms ({times(v.get('between'))}); within one process at most "
                 f"{times(v.get('within'))}")


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def _drift_text(medians: Any) -> str:
    """The per-round medians' drift (slope per round relative to the median) as a signed percentage."""
    values = [float(v) for v in medians if as_float(v) is not None] if isinstance(medians, list) else []
    d = drift(values)
    return "—" if d is None else f"{d:+.2%}"


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
