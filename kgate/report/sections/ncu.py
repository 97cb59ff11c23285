"""The report's view of an ncu record: the comparison table per row, the kernels, the profiles.

Method: ``view(data, links)`` turns the record's ``data`` (kgate.stages.ncu) into
plain text cells; ``templates/ncu.html.j2`` lays them out, with Jinja's
autoescape, so every string from the run (kernel names, commands, paths,
stall reasons) is escaped. Numbers are shown in the unit their key names
(``_ns`` as µs, ``_bytes`` as MB, ``_pct`` as %); ``unavailable`` stays the
word. The parts the view does not show (``rows``, ``commands_planned``) are
taken out of the data; the page names the rest.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from kgate.report.format import clean, format_number
from kgate.report.links import Links

UNAVAILABLE = "unavailable"
# the comparison's rows in the order a reader checks the hypothesis
ORDER = ("duration_ns", "global_load_bytes", "global_store_bytes", "l2_load_bytes", "l2_store_bytes",
         "dram_read_bytes", "dram_write_bytes",
         "dram_throughput_bytes_per_s", "dram_throughput_pct", "l2_sectors", "l2_hit_rate_pct", "sm_throughput_pct",
         "memory_throughput_pct", "tensor_pipe_pct", "achieved_occupancy_pct", "theoretical_occupancy_pct",
         "registers_per_thread", "local_bytes", "spill_requests", "warps_active_per_scheduler",
         "warps_eligible_per_scheduler", "inst_executed")
KERNEL_COLUMNS = (("launches", "launches"), ("duration_ns", "duration"), ("dram_read_bytes", "DRAM read"),
                  ("dram_write_bytes", "DRAM write"), ("registers_per_thread", "regs/thread"),
                  ("achieved_occupancy_pct", "occupancy"), ("local_load_sectors", "local ld sectors"),
                  ("local_store_sectors", "local st sectors"), ("warps_eligible_per_scheduler", "eligible warps"))


def cell(value: Any, key: str) -> str:
    """A number in the unit its key names, or the text as it is (``unavailable``)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return clean(value) if value is not None else "—"
    if key.endswith("_ns"):
        return f"{value / 1e3:,.1f} µs"
    if key.endswith("_bytes_per_s"):
        return f"{value / 1e9:,.1f} GB/s"
    if key.endswith("_bytes"):
        return f"{value / 1e6:,.1f} MB"
    if key.endswith("_pct"):
        return f"{value:.1f} %"
    return f"{value:,.0f}" if float(value).is_integer() else format_number(float(value))


def change(value: Any, key: str) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return clean(value)
    text = cell(abs(value), key)
    return ("+" if value > 0 else "−" if value < 0 else "±") + text


def _stalls(top: Any) -> str:
    if not isinstance(top, list):
        return clean(top)
    return " · ".join(f"{clean(s['reason'])} {s['share_pct']:.0f} %" for s in top) or "—"


def _row_view(entry: Mapping[str, Any], links: Links) -> dict[str, Any]:
    comp = entry.get("comparison") or {}
    by_key = {m["metric"]: m for m in comp.get("metrics") or []}
    metrics = []
    for key in [k for k in ORDER if k in by_key] + [k for k in by_key if k not in ORDER]:
        m = by_key[key]
        ratio = m.get("ratio")
        metrics.append({"metric": clean(key), "baseline": cell(m.get("baseline"), key),
                        "candidate": cell(m.get("candidate"), key), "change": change(m.get("change"), key),
                        "ratio": f"{ratio:.3f}" if isinstance(ratio, (int, float)) else clean(ratio)})
    ops = comp.get("tensor_ops") or {}
    base_ops, cand_ops = ops.get("base"), ops.get("cand")
    tensor = []
    if isinstance(base_ops, Mapping) and isinstance(cand_ops, Mapping):
        for prec in sorted(set(base_ops) | set(cand_ops)):
            b, c = base_ops.get(prec, 0.0), cand_ops.get(prec, 0.0)
            if b or c:
                tensor.append((clean(prec), cell(b, "ops"), cell(c, "ops")))
    kernels = []
    for arm, table in (entry.get("kernels") or {}).items():
        for k in table:
            missing = k.get("unavailable") or {}
            kernels.append({"arm": clean(arm), "kernel": clean(k.get("kernel")),
                            "cells": [cell(k.get(key), key) for key, _ in KERNEL_COLUMNS],
                            "unavailable": [clean(v) for v in missing.values()]})
    profiles = []
    for arm, passes in (entry.get("passes") or {}).items():
        for name, run in passes.items():
            profiles.append({"arm": clean(arm), "pass": clean(name), "launches": clean(run.get("launches")),
                             "wall": f"{run['wall_s']:.0f} s" if isinstance(run.get("wall_s"), (int, float)) else "—",
                             "rep": links.short(run["rep"]) if run.get("rep") else "no report",
                             "rep_href": links.href(run.get("rep")) if run.get("rep") else None,
                             "log": links.short(run.get("ncu_log") or ""), "log_href": links.href(run.get("ncu_log")),
                             "capped": bool(run.get("capped")),
                             "command": clean(shlex.join(str(c) for c in run.get("command") or []))})
    return {"row": clean(entry.get("row")), "kind": clean(entry.get("kind")), "capability": clean(entry.get("capability")),
            "baseline_kernels": " + ".join(clean(k) for k in comp.get("baseline_kernels") or []) or "none",
            "candidate_kernels": " + ".join(clean(k) for k in comp.get("candidate_kernels") or []) or "none",
            "removed": comp.get("removed_launches") or {}, "metrics": metrics, "tensor": tensor,
            "stalls": {"baseline": _stalls((comp.get("top_stalls") or {}).get("base")),
                       "candidate": _stalls((comp.get("top_stalls") or {}).get("cand"))},
            "kernels": kernels, "kernel_columns": [label for _, label in KERNEL_COLUMNS], "profiles": profiles}


def _matrix(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The comparison of every profiled row in one table: per metric (in ORDER, then the rest, each once) and
    row the baseline side, the candidate and their ratio; then the tensor operations per precision."""
    names: list[str] = []
    for v in views:
        names += [m["metric"] for m in v["metrics"] if m["metric"] not in names]
    out = []
    for name in names:
        cells = []
        for v in views:
            m = next((m for m in v["metrics"] if m["metric"] == name), None)
            cells.append((m["baseline"], m["candidate"], m["ratio"]) if m else ("—", "—", ""))
        out.append({"metric": name, "cells": cells})
    precisions: list[str] = []
    for v in views:
        precisions += [p for p, _, _ in v["tensor"] if p not in precisions]
    for prec in precisions:
        cells = []
        for v in views:
            t = next((t for t in v["tensor"] if t[0] == prec), None)
            cells.append((t[1], t[2], "") if t else ("—", "—", ""))
        out.append({"metric": f"tensor ops {prec}", "cells": cells})
    return out


def view(data: dict[str, Any], links: Links) -> dict[str, Any]:
    """The ncu section's view; takes ``rows`` and ``commands_planned`` out of ``data`` (the caller's copy)."""
    rows = data.pop("rows", None) or []
    planned = data.pop("commands_planned", None) or {}
    mm = data.get("metric_map") or {}
    ncu = data.get("ncu") or {}
    facts = [(label, clean(value)) for label, value in (
        ("ncu", f"{ncu.get('version', '')} ({ncu.get('path', '')})".strip() if ncu else None),
        ("clock control", data.get("clock_control")), ("kernel filter", data.get("kernel_filter")),
        ("metric map", f"{mm.get('architecture')} · verified on: {mm.get('verified') or 'nothing yet'}" if mm else None),
        ("kernel census", (data.get("census") or {}).get("source"))) if value]
    commands = [shlex.join(str(c) for c in cmd) for arms in planned.values() for passes in arms.values()
                for cmd in passes.values()]
    views = [_row_view(e, links) for e in rows if isinstance(e, Mapping)]
    return {"available": bool(data.get("available")), "reason": clean(data.get("reason") or ""), "facts": facts,
            "rows": views, "matrix": _matrix(views),
            "planned": [clean(c) for c in commands] if not data.get("available") else []}
