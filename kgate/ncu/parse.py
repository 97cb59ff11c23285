"""Nsight Compute CSV exports into a tidy per-kernel table (pure; no ncu needed).

Method: ``ncu --import R --csv --page raw`` gives one row per profiled launch
(identity columns, then one column per metric; the first data row holds the
units), ``--page details`` one row per section metric or rule. Both are read
into :class:`Launch` objects (metric name -> value and unit). The metric map
(``kgate/data/ncu_metrics.yaml``, per compute capability) says which metric
fills which tidy column; the first source present in any of a launch's exports
wins and its value is converted from the export's unit (``us``, ``Mbyte``,
``Tbyte/s``, ``%``, ...) to the column's (``ns``, ``bytes``, ``bytes_per_s``,
``pct``, ``count``). A column no source fills, or whose unit cannot be
converted, is the string ``unavailable`` and its reason is kept: never an
exception. Launches of the same kernel name add up by the map's ``combine``
rule (sum, max, min, or a mean weighted by duration).
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kgate import paths
from kgate.errors import ConfigError, IncompleteData

UNAVAILABLE = "unavailable"
METRIC_MAP = paths.DATA / "ncu_metrics.yaml"
IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
            "Grid Size", "Device", "CC")
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_BYTES = re.compile(r"^([KMGTP]?)(byte|B)$")
_COUNT_UNITS = {"", "sector", "inst", "warp", "thread", "block", "cycle", "register/thread", "branches", "request",
                "SM", "cluster", "pass", "register", "wavefront"}


@dataclass(frozen=True, slots=True)
class Launch:
    """One profiled launch: identity and every metric of the exports read for it (value text, unit)."""

    kernel: str
    index: int
    cc: str | None
    grid: str | None
    block: str | None
    raw: dict[str, tuple[str, str]] = field(default_factory=dict)
    details: dict[str, tuple[str, str]] = field(default_factory=dict)
    rules: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class MetricMap:
    """The metric map for one architecture: tidy column -> sources, unit and combine rule."""

    capability: str | None
    architecture: str
    verified: str | None
    sector_bytes: int
    metrics: dict[str, dict[str, Any] | None]
    families: dict[str, dict[str, Any]]
    sha256: str


def load_map(capability: str | None, path: Path = METRIC_MAP) -> MetricMap:
    """The metric map for a compute capability: the defaults with that architecture's overrides
    (an unknown architecture gets the defaults, marked unverified)."""
    text = path.read_text()
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or data.get("schema") != 1:
        raise ConfigError(f"{path}: not a kgate ncu metric map (schema 1)")
    arch = (data.get("architectures") or {}).get(capability or "", {}) or {}
    metrics: dict[str, dict[str, Any] | None] = dict(data["metrics"])
    for key, entry in (arch.get("metrics") or {}).items():
        metrics[key] = entry
    return MetricMap(capability=capability, architecture=arch.get("name") or f"sm {capability} (no entry: defaults)",
                     verified=arch.get("verified"), sector_bytes=int(data["sector_bytes"]), metrics=metrics,
                     families=dict(data.get("families") or {}), sha256=hashlib.sha256(text.encode()).hexdigest())


# reading the exports


def _rows(text: str) -> list[dict[str, str]]:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    if not reader.fieldnames or "Kernel Name" not in reader.fieldnames:
        raise IncompleteData("not an Nsight Compute CSV export: no 'Kernel Name' column "
                             f"(columns: {', '.join((reader.fieldnames or [])[:8]) or 'none'})")
    return list(reader)


def _csv_text(source: str | Path) -> str:
    if isinstance(source, Path):
        try:
            return source.read_text(errors="replace")
        except OSError as exc:
            raise IncompleteData(f"cannot read Nsight Compute export {source}: {exc.strerror}") from exc
    return source


def read_raw(source: str | Path) -> list[Launch]:
    """Launches of a ``--page raw`` export, in profiling order (the units row is the one without an ID)."""
    rows = _rows(_csv_text(source))
    units: dict[str, str] = {}
    if rows and not rows[0].get("ID", "").strip():
        units = {k: v or "" for k, v in rows[0].items() if k}
        rows = rows[1:]
    out = []
    seen: dict[str, int] = {}
    for row in rows:
        name = row.get("Kernel Name") or ""
        metrics = {k: (v or "", units.get(k, "")) for k, v in row.items() if k and k not in IDENTITY}
        out.append(Launch(kernel=name, index=seen.get(name, 0), cc=row.get("CC") or None,
                          grid=row.get("Grid Size") or None, block=row.get("Block Size") or None, raw=metrics))
        seen[name] = seen.get(name, 0) + 1
    return out


def read_details(source: str | Path) -> list[Launch]:
    """Launches of a ``--page details`` export: section metrics as ``Section/Metric`` and the rules."""
    by_id: dict[str, dict[str, Any]] = {}
    for row in _rows(_csv_text(source)):
        entry = by_id.setdefault(row.get("ID", ""), {"row": row, "metrics": {}, "rules": []})
        if row.get("Metric Name"):
            key = f"{row.get('Section Name', '')}/{row['Metric Name']}"
            entry["metrics"][key] = (row.get("Metric Value") or "", row.get("Metric Unit") or "")
        elif row.get("Rule Name"):
            entry["rules"].append({"section": row.get("Section Name", ""), "rule": row["Rule Name"],
                                   "type": row.get("Rule Type", ""), "description": row.get("Rule Description", ""),
                                   "estimated_speedup_type": row.get("Estimated Speedup Type", ""),
                                   "estimated_speedup": row.get("Estimated Speedup", "")})
    out = []
    seen: dict[str, int] = {}
    for entry in by_id.values():
        row = entry["row"]
        name = row.get("Kernel Name") or ""
        out.append(Launch(kernel=name, index=seen.get(name, 0), cc=row.get("CC") or None,
                          grid=row.get("Grid Size") or None, block=row.get("Block Size") or None,
                          details=entry["metrics"], rules=tuple(entry["rules"])))
        seen[name] = seen.get(name, 0) + 1
    return out


def merge(*exports: list[Launch]) -> list[Launch]:
    """One launch per (kernel, occurrence) with the metrics of every export (the first export's order;
    earlier exports win for a metric present in several)."""
    merged: dict[tuple[str, int], Launch] = {}
    for launches in exports:
        for la in launches:
            key = (la.kernel, la.index)
            old = merged.get(key)
            if old is None:
                merged[key] = la
                continue
            merged[key] = Launch(kernel=la.kernel, index=la.index, cc=old.cc or la.cc, grid=old.grid or la.grid,
                                 block=old.block or la.block, raw={**la.raw, **old.raw},
                                 details={**la.details, **old.details}, rules=old.rules + la.rules)
    return list(merged.values())


# values and units


def number(text: str) -> float | None:
    """'16,384' -> 16384.0; 'n/a', '' or anything else that is not a number -> None."""
    t = text.strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def convert(value: float, unit: str, target: str) -> float | None:
    """``value`` in the export's ``unit`` expressed in ``target`` (ns, bytes, bytes_per_s, pct, count); None when
    the unit does not fit the target."""
    u = unit.strip()
    if target == "ns":
        return value * _TIME[u] if u in _TIME else None
    if target == "pct":
        return value if u == "%" else None
    if target == "bytes":
        m = _BYTES.match(u.removesuffix("/block"))
        return value * _PREFIX[m.group(1)] if m else None
    if target == "bytes_per_s":
        head, _, per = u.partition("/")
        m = _BYTES.match(head)
        if not m or per not in _TIME:
            return None
        return value * _PREFIX[m.group(1)] / (_TIME[per] / 1e9)
    if target == "count":
        if u in _COUNT_UNITS:
            return value
        if u[:1] in ("K", "M", "G") and u[1:] in _COUNT_UNITS - {""}:
            return value * _PREFIX[u[0]]
        return None
    raise ConfigError(f"ncu metric map: unknown unit '{target}' (ns, bytes, bytes_per_s, pct, count)")


def metric_value(launch: Launch, key: str, entry: dict[str, Any] | None, mm: MetricMap) -> tuple[Any, str | None]:
    """(value, None) or (UNAVAILABLE, reason) for one tidy column of one launch."""
    if entry is None:
        return UNAVAILABLE, f"{key}: no such counter on {mm.architecture} (metric map)"
    tried = []
    for source, names in (("raw", entry.get("raw") or []), ("details", entry.get("details") or [])):
        table = launch.raw if source == "raw" else launch.details
        for name in names:
            tried.append(name)
            if name not in table:
                continue
            text, unit = table[name]
            value = number(text)
            if value is None:
                return UNAVAILABLE, f"{key}: {name} = {text!r} is not a number"
            out = convert(value, unit, entry["unit"])
            if out is None:
                return UNAVAILABLE, f"{key}: {name} has unit {unit!r}, not convertible to {entry['unit']}"
            return out, None
    return UNAVAILABLE, f"{key}: none of {', '.join(tried) or 'no source'} in the export"


def family(launch: Launch, spec: dict[str, Any]) -> dict[str, float] | str:
    """A metric family (``prefix<name><suffix>`` -> value), or UNAVAILABLE when the export has none of it."""
    prefix, suffix = spec["prefix"], spec.get("suffix", "")
    out: dict[str, float] = {}
    for name, (text, _unit) in launch.raw.items():
        if not (name.startswith(prefix) and name.endswith(suffix)):
            continue
        middle = name[len(prefix):len(name) - len(suffix)] if suffix else name[len(prefix):]
        if not middle or "." in middle or middle in spec.get("exclude", []):
            continue
        if spec.get("exclude_suffix") and middle.endswith(spec["exclude_suffix"]):
            continue
        value = number(text)
        if value is not None:
            out[middle] = value
    return out if out else UNAVAILABLE


# the tidy table


def tidy_launch(launch: Launch, mm: MetricMap) -> dict[str, Any]:
    """One launch as a tidy row: every mapped column (a number or ``unavailable``), families, rules."""
    row: dict[str, Any] = {"kernel": launch.kernel, "launch": launch.index, "cc": launch.cc, "grid": launch.grid,
                           "block": launch.block}
    missing: dict[str, str] = {}
    for key, entry in mm.metrics.items():
        value, reason = metric_value(launch, key, entry, mm)
        row[key] = value
        if reason:
            missing[key] = reason
    for name, spec in mm.families.items():
        row[name] = family(launch, spec)
        if row[name] == UNAVAILABLE:
            missing[name] = f"{name}: no {spec['prefix']}* metric in the export"
    row["rules"] = [r for r in launch.rules if r.get("type") in ("OPT", "WRN", "ERR")]
    row["unavailable"] = missing
    return row


def combine(rows: list[dict[str, Any]], mm: MetricMap) -> dict[str, Any]:
    """Several tidy rows (launches of one kernel, or the kernels on one side of a comparison) as one.

    Each column adds up by its ``combine`` rule; ``weighted`` is the mean weighted by ``duration_ns``.
    A column that is ``unavailable`` in any row is ``unavailable`` in the result (a partial sum would
    look like a measurement). Families add up name by name.
    """
    out: dict[str, Any] = {"kernels": sorted({r["kernel"] for r in rows}), "launches": len(rows)}
    for key, entry in mm.metrics.items():
        values = [r.get(key, UNAVAILABLE) for r in rows]
        if not rows or any(not isinstance(v, (int, float)) for v in values):
            out[key] = UNAVAILABLE
            continue
        how = (entry or {}).get("combine", "sum")
        if how == "sum":
            out[key] = sum(values)
        elif how == "max":
            out[key] = max(values)
        elif how == "min":
            out[key] = min(values)
        elif how == "weighted":
            weights = [r.get("duration_ns") for r in rows]
            if all(isinstance(w, (int, float)) for w in weights) and sum(weights) > 0:
                out[key] = sum(v * w for v, w in zip(values, weights)) / sum(weights)
            else:
                out[key] = UNAVAILABLE
        else:
            raise ConfigError(f"ncu metric map: {key}: unknown combine rule '{how}' (sum, max, min, weighted)")
    for name in mm.families:
        parts = [r.get(name, UNAVAILABLE) for r in rows]
        if not rows or any(not isinstance(p, dict) for p in parts):
            out[name] = UNAVAILABLE
            continue
        total: dict[str, float] = {}
        for p in parts:
            for k, v in p.items():
                total[k] = total.get(k, 0.0) + v
        out[name] = total
    return out


def kernel_table(launches: list[Launch], mm: MetricMap) -> list[dict[str, Any]]:
    """Per kernel name (profiling order): its launches combined, with ``launches`` = how many were profiled."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for la in launches:
        by_name.setdefault(la.kernel, []).append(tidy_launch(la, mm))
    out = []
    for name, rows in by_name.items():
        row = combine(rows, mm)
        row["kernel"] = name
        row.pop("kernels", None)
        row["grid"] = sorted({r["grid"] for r in rows if r["grid"]})
        row["block"] = sorted({r["block"] for r in rows if r["block"]})
        row["unavailable"] = {k: v for r in rows for k, v in r["unavailable"].items()}
        row["rules"] = [rule for r in rows for rule in r["rules"]]
        out.append(row)
    return out


def top_stalls(stalls: dict[str, float] | str, n: int = 3) -> list[dict[str, Any]] | str:
    """The ``n`` largest stall reasons with their share of all stall samples, largest first."""
    if not isinstance(stalls, dict):
        return UNAVAILABLE
    total = sum(stalls.values())
    ranked = sorted(stalls.items(), key=lambda kv: -kv[1])[:n]
    return [{"reason": k, "samples": v, "share_pct": 100.0 * v / total if total else 0.0} for k, v in ranked]


def capability(launches: list[Launch]) -> str | None:
    """The compute capability the exports were taken on (their CC column)."""
    ccs = sorted({la.cc for la in launches if la.cc})
    if len(ccs) > 1:
        raise IncompleteData(f"exports mix compute capabilities {', '.join(ccs)}")
    return ccs[0] if ccs else None
