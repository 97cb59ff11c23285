"""The report's view of a model record: the settings, tokens/s per workload and arm, the ratios and their plots.

Method: ``view(data, links)`` turns the record's ``data`` (kgate.stages.model) into
plain text cells and SVG plots; ``templates/model.html.j2`` lays them out
with Jinja's autoescape, and the plots come from ``kgate.report.svg``'s SVG
helpers, which escape every label. Shown: the model and its settings (the
requested and the used layer count, a reduction and its cause), each
workload's per-arm tokens/s distribution (median, mean, std, min, p10, p20,
p80, p90, n of the blocks) and peak memory, the candidate/baseline ratio
with its interval and the gate's bar, and one line plot of tokens/s per
block, one line per workload and arm. The parts shown here are taken out of
the data (the caller's copy); the page names the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from kgate.report.format import clean, format_number
from kgate.report.links import Links
from kgate.report.svg import svg_series_plot

ARMS = (("base", "baseline"), ("cand", "candidate"))
STATS = ("median", "mean", "std", "min", "p10", "p20", "p80", "p90")


def rate(value: Any) -> str:
    """tokens/s as a number with thousands separators (small CPU rates keep a decimal)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "—" if value is None else clean(value)
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def mib(value: Any) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "—"
    return f"{value / 2**20:,.1f} MiB"


def _facts(data: Mapping[str, Any], workloads: list[Mapping[str, Any]]) -> list[tuple[str, str]]:
    peak_method = next((w.get("peak_method") for w in workloads if w.get("peak_method")), None)
    model = data.get("model") or {}
    layers = data.get("layers") or {}
    sched = data.get("schedule") or {}
    th = data.get("thresholds") or {}
    opt = model.get("optimizer") or {}
    blocks = sched.get("blocks") or {}
    if layers.get("reduced"):
        cause = next((a for a in layers.get("attempts") or [] if a.get("oom")), {})
        why = "; ".join(f"{arm}: {msg}" for arm, msg in (cause.get("oom") or {}).items())
        layer_text = (f"{layers.get('used')} of the {layers.get('requested')} requested: reduced by device memory "
                      f"(out of memory with {cause.get('layers')} layers during {cause.get('during')}; {why})")
    else:
        layer_text = f"{layers.get('used')} (as requested)"
    packages = "; ".join(f"{p.get('requirement')} (sha256 {str(p.get('sha256', ''))[:12]}…) adds "
                         f"{', '.join(p.get('adds') or [])} to {p.get('extends')}" for p in model.get("packages") or [])
    rows = [
        ("timings", data.get("note") or ""),
        ("model", f"{model.get('model_class')} from {model.get('config_class')}"),
        ("config", ", ".join(f"{k}={v}" for k, v in (model.get("config") or {}).items())),
        ("parameters", f"{model.get('parameters'):,}" if isinstance(model.get("parameters"), int) else None),
        ("layers", layer_text if layers else None),
        ("dtype", model.get("dtype")),
        ("dense step", f"{sched.get('batch')} x {sched.get('seq_len')} = {sched.get('tokens_per_step')} tokens"
         if sched else None),
        ("varlen step", f"1 x {sched.get('tokens_per_step')} tokens in {sched.get('varlen_sequences')} sequences "
                        f"(lengths {', '.join(str(n) for n in sched.get('varlen_lengths') or [])})" if sched else None),
        ("schedule", f"{sched.get('warmup_steps')} warm-up step(s) per workload and arm, then blocks of "
                     f"{sched.get('steps_per_block')} step(s), AB/BA; {data.get('blocks')} block(s) per arm ran "
                     f"(min {blocks.get('min')}, max {blocks.get('max')}): stopped at {data.get('stopped')}"
         if sched else None),
        ("optimizer", "AdamW " + ", ".join(f"{k}={v}" for k, v in opt.items()) if opt else None),
        ("seed", model.get("seed")),
        ("gates", f"dense: lower bound >= 1 + {th.get('dense_gain_min')}; varlen: lower bound >= "
                  f"1/(1 + {th.get('varlen_tolerance')})" if th else None),
        ("model code", packages or None),
        ("peak memory", peak_method),
        ("clocks", data.get("telemetry")),
    ]
    return [(label, clean(value)) for label, value in rows if value not in (None, "")]


def _workload_view(w: Mapping[str, Any]) -> dict[str, Any]:
    arms = []
    per = w.get("tokens_per_s") or {}
    peaks = w.get("peak_bytes") or {}
    for key, label in ARMS:
        s = per.get(key) or {}
        arms.append({"arm": label, "n": clean(s.get("n", "—")),
                     "cells": [rate(s.get(f"{k}_tokens_per_s")) for k in STATS], "peak": mib(peaks.get(key))})
    iv = w.get("interval")
    ratio = w.get("ratio")
    text = (f"{format_number(ratio)} [{format_number(iv[0])}, {format_number(iv[1])}]"
            if isinstance(ratio, (int, float)) and isinstance(iv, list) and len(iv) == 2 else "no interval")
    conf = w.get("confidence")
    return {"workload": clean(w.get("workload")), "arms": arms, "ratio": clean(text),
            "confidence": f"{conf:.2%}" if isinstance(conf, (int, float)) else "",
            "classification": clean(w.get("classification") or "—"),
            "bar": format_number(w["bar"]) if isinstance(w.get("bar"), (int, float)) else "—",
            "blocks": clean(w.get("blocks"))}


def _plots(workloads: list[Mapping[str, Any]]) -> list[Markup]:
    """One plot: tokens/s per block, one line per workload and arm (the ratios are in the table above it)."""
    series = {f"{clean(w.get('workload'))} {label}": (w.get("block_tokens_per_s") or {}).get(key) or []
              for w in workloads for key, label in ARMS}
    if not any(len(v) >= 2 for v in series.values()):
        return []
    return [svg_series_plot(series, "tokens/s", title="Model: tokens/s per block, per workload and arm", x_label="block")]


def view(data: dict[str, Any], links: Links) -> dict[str, Any] | None:
    """The model section's view; takes what it shows out of ``data`` (the caller's copy).

    None, and ``data`` untouched, when the record has no ``workloads`` list.
    """
    if not isinstance(data.get("workloads"), list):
        return None
    workloads = [w for w in data.pop("workloads", None) or [] if isinstance(w, Mapping)]
    facts = _facts(data, workloads)
    for key in ("model", "layers", "schedule", "thresholds", "note"):
        data.pop(key, None)
    checkpoint = data.get("checkpoint")
    return {"measured": bool(data.get("measured")), "facts": facts,
            "workloads": [_workload_view(w) for w in workloads], "stats": list(STATS),
            "plots": _plots(workloads),
            "checkpoint": links.short(checkpoint) if checkpoint else None,
            "checkpoint_href": links.href(checkpoint) if checkpoint else None}
