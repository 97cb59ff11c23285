"""One campaign across device classes: its gates and measured rows side by side, one column per GPU.

Usage::

    python -m kgate compare rwkv6-bwd-fusion                    # every device class with records
    python -m kgate compare rwkv6-bwd-fusion --gpus h200,b300   # these, in this order
    python -m kgate compare rwkv6-bwd-fusion --candidates A B   # two candidates on one device (compare_runs)
    python -m kgate compare --records X/record.json Y/record.json  # two records of one campaign and stage

    from kgate.report import compare
    comparison = compare.collect(Path("."), "rwkv6-bwd-fusion")
    print(compare.render_text(comparison))

A device class is a folder ``results/<campaign>/<gpu>/`` that holds at least
one stage record (docs/architecture.md). ``kgate.report.outputs.render`` uses the
same comparison for the *Across devices* section of every report whose campaign
has records on more than one device class. This module imports only the leaves
of the report layer (``kgate.report.format``), never the page.

The rule of this module: a device's column is built from that device's own
records only. Every ratio shown is the one its record holds (baseline arm
against candidate arm, both measured on that device); nothing here divides one
device's number by another's, and no number is copied from one column to
another.

Which records make a column:

- the baseline stages' records (``results/<c>/<gpu>/<stage>/record.json``);
- the candidate stages' records of one candidate: the one asked for (the
  report's own candidate, or ``--candidate``; without either, the first
  column's) when the device has records of it; else the candidate of the
  device's own ``reports/<c>/<gpu>/verdict.json``; else the newest candidate
  built on that device (the column says which). Candidate ids are content
  hashes, so the same id on two devices is the same code;
- in stage order (``kgate.protocol.STAGES``), the stages the protocol's gated
  walk (``kgate.protocol.gated_walk``, not forced) asks for, up to and
  including the first record that does not let the next stages through (a
  stale record past a failed gate is left out; a stage with no record is
  passed over); or exactly the stages the device's own verdict lists as
  recorded. Folders under ``results/<c>/<gpu>/`` that are no stage of the
  protocol (the preflight's ``doctor``) are not read.

The verdict word of a column is the one its ``verdict.json`` recorded (for the
report's own device, the verdict being rendered); this module never computes
a verdict.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate import paths, protocol
from kgate.device import describe as describe_device
from kgate.errors import ConfigError, IncompleteData, KgateError
from kgate.records import first_provenance, read_record, read_verdict
from kgate.report.format import (
    LABEL_KEYS,
    STATUS_LABELS,
    clean,
    format_interval,
    format_number,
    format_value,
    interval_of,
    is_number,
)

#: A row's ratio (baseline time / candidate time on one device), first key found wins.
RATIO_KEYS = ("speedup", "ratio", "pair_speedup", "endpoint_ratio")
#: A row's two arms on one device: (baseline key path, candidate key path), first pair found wins.
ARM_KEYS = (
    (("summary", "base", "median_ms"), ("summary", "cand", "median_ms")),
    (("endpoint_base_ms",), ("endpoint_cand_ms",)),
    (("baseline_ms",), ("candidate_ms",)),
    (("base_ms",), ("cand_ms",)),
)
#: Single-arm numbers of a row (e.g. the baseline profile): (key path, label, unit).
SINGLE_KEYS = (
    (("endpoint_ms",), "endpoint", "ms"),
    (("implied_endpoint_speedup",), "implied endpoint", "x"),
    (("bound", "best_case_speedup"), "best case", "x"),
)
CLASS_KEYS = ("classification",)
TEXT_WIDTH = 48
NOTE = ("Each column comes only from that device class's own records; every ratio is baseline vs candidate "
        "measured on the same device. Numbers are never divided across columns.")


@dataclass(frozen=True)
class DeviceRun:
    """One device class's records of a campaign (and its recorded verdict, when there is one)."""

    gpu: str
    candidate: str | None
    records: tuple[dict[str, Any], ...]
    verdict: dict[str, Any] | None = None
    current: bool = False
    notes: tuple[str, ...] = ()
    # why this device's records could not be read (its cells then say so); None when they could
    error: str | None = None

    @property
    def word(self) -> str | None:
        return self.verdict.get("verdict") if self.verdict else None

    @property
    def device(self) -> dict[str, Any]:
        return first_provenance(self.records, "device")

    @property
    def cpu(self) -> bool:
        device = self.device
        return self.gpu == "cpu" or device.get("class") == "cpu" or bool(device.get("interpreter"))

    @property
    def versions(self) -> dict[str, Any]:
        return first_provenance(self.records, "versions")

    def describe(self) -> str:
        """The device in one line: name, compute capability, driver (or the interpreter)."""
        d = dict(self.device)
        parts = describe_device({**d, "name": d.get("name") or d.get("class") or self.gpu})
        return clean(" · ".join(parts))

    def stack(self) -> str:
        v = self.versions
        return clean(" · ".join(f"{k} {v[k]}" for k in ("torch", "triton") if v.get(k)) or "—")


@dataclass(frozen=True)
class Cell:
    """What one device shows for one gate or row; ``status`` is a gate status, ``not_run`` or None."""

    text: str
    status: str | None = None
    interval: str = ""
    tag: str = ""
    note: str = ""


@dataclass(frozen=True)
class Line:
    """One gate (or one measured row) of a stage, one cell per device in the comparison's order."""

    stage: str
    name: str
    threshold: str
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class Comparison:
    campaign: str
    devices: tuple[DeviceRun, ...]
    gates: tuple[Line, ...]
    rows: tuple[Line, ...]
    missing: tuple[str, ...] = field(default=())


# finding the records of each device class


def device_classes(root: Path, campaign: str) -> list[str]:
    """Device classes with at least one stage record under results/<campaign>/, sorted (cpu last)."""
    base = Path(root) / paths.campaign_results(campaign)
    if not base.is_dir():
        return []
    found = [
        d.name for d in base.iterdir()
        if d.is_dir() and (any(d.glob("*/record.json")) or any(d.glob("*/*/record.json")))
    ]
    return sorted(found, key=lambda g: (g == "cpu", g))


def _stage_order(name: str) -> tuple[int, str]:
    return (protocol.STAGES.index(name), "") if name in protocol.STAGES else (len(protocol.STAGES), name)


def _finished(record: Mapping[str, Any]) -> str:
    return str((record.get("provenance") or {}).get("finished_utc") or "")


def load_device(root: Path, campaign: str, gpu: str, *, candidate: str | None = None) -> DeviceRun | None:
    """The records of one device class (see the module docstring for which); None when it has none."""
    root = Path(root)
    if not (root / paths.results(campaign, gpu)).is_dir():
        return None
    baseline: dict[str, dict[str, Any]] = {}
    by_candidate: dict[str, dict[str, dict[str, Any]]] = {}
    for stage in protocol.STAGES:
        if stage not in protocol.CANDIDATE_STAGES:
            path = root / paths.record(campaign, gpu, stage)
            if path.is_file():
                baseline[stage] = read_record(path)
            continue
        folder = root / paths.stage_root(campaign, gpu, stage)
        for cand in sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
            path = root / paths.record(campaign, gpu, stage, cand)
            if path.is_file():
                by_candidate.setdefault(cand, {})[stage] = read_record(path)
    if not baseline and not by_candidate:
        return None

    verdict_path = root / paths.verdict_file(campaign, gpu)
    own = read_verdict(verdict_path) if verdict_path.is_file() else None
    notes: list[str] = []
    if candidate is not None and candidate in by_candidate:
        chosen: str | None = candidate
    elif own is not None and own.get("candidate") in by_candidate:
        chosen = own["candidate"]
    elif by_candidate:
        # the newest candidate this device built (or, failing that, ran any stage for)
        # (of candidates built and run at the same instants, the first by id)
        chosen = max(sorted(by_candidate), key=lambda c: (_finished(by_candidate[c].get("candidate_build", {})),
                                                           max(_finished(r) for r in by_candidate[c].values())))
        notes.append(f"newest candidate on {gpu}")
    else:
        chosen = None
    if candidate is not None and chosen is not None and chosen != candidate:
        notes.append(f"{gpu} has no records of candidate {candidate}; showing candidate {chosen}")

    stages = {**baseline, **by_candidate.get(chosen or "", {})}
    verdict = None
    if own is not None and (chosen is None or own.get("candidate") == chosen):
        verdict = own
    elif own is not None:
        notes.append(f"{gpu}'s verdict.json is for candidate {own.get('candidate')}, not {chosen}: no verdict shown")
    records = _walk(stages, verdict)
    return DeviceRun(gpu=gpu, candidate=chosen if chosen is not None else (own or {}).get("candidate"),
                     records=tuple(records), verdict=verdict, notes=tuple(notes))


def _walk(stages: Mapping[str, dict[str, Any]], verdict: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The records the device's verdict was made from, else those the protocol's gated walk asks for, in stage order.

    Without a verdict the walk is ``kgate.protocol.gated_walk`` over the
    records' statuses, not forced (the records do not say whether the run
    was): it ends at the first record that does not let the stages after it
    through, which is kept, and a record of ``unavailable`` only leaves out
    the stages that gate on it. A stage with no record on this device is
    passed over, so the stages after it still count (e.g. a device whose
    profile stages were never run).
    """
    if verdict is not None:
        listed = {s.get("stage") for s in verdict.get("stages") or [] if s.get("record")}
        return [stages[s] for s in protocol.STAGES if s in stages and s in listed]
    asked = protocol.gated_walk(lambda s: stages[s].get("status") if s in stages else "pass")
    return [stages[s] for s in asked if s in stages]


def current_device(verdict: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> DeviceRun:
    """The device a report is rendered for, from the verdict and records it renders."""
    return DeviceRun(gpu=str(verdict["gpu"]), candidate=verdict.get("candidate"),
                     records=tuple(dict(r) for r in records), verdict=dict(verdict), current=True)


def other_devices(root: Path, campaign: str, gpu: str, candidate: str | None) -> list[DeviceRun]:
    """Every device class of the campaign but ``gpu``, aligned on ``candidate`` where they have it.

    A device whose records cannot be read (another schema version, broken
    JSON) is kept as a column that says why, so that it cannot stop the
    report of this device.
    """
    out = []
    for other in device_classes(root, campaign):
        if other == gpu:
            continue
        try:
            run = load_device(root, campaign, other, candidate=candidate)
        except KgateError as exc:
            run = DeviceRun(gpu=other, candidate=None, records=(), error=clean(exc))
        if run is not None:
            out.append(run)
    return out


def collect(root: Path, campaign: str, gpus: Sequence[str] | None = None, *,
            candidate: str | None = None) -> Comparison:
    """The comparison of ``gpus`` (default: every device class with records) read from ``root``.

    Raises:
        IncompleteData: no device class asked for has a record.
    """
    names = list(gpus) if gpus else device_classes(root, campaign)
    runs, missing = [], []
    for gpu in names:
        run = load_device(root, campaign, gpu, candidate=candidate)
        (runs.append(run) if run is not None else missing.append(gpu))
    if not runs:
        where = Path(root) / paths.campaign_results(campaign)
        asked = f" (asked for: {', '.join(names)})" if gpus else ""
        raise IncompleteData(f"no stage records of campaign {campaign!r} under {where}/<gpu>/{asked}")
    if candidate is None:
        # align every device on the first device's candidate when the others have it too
        first = next((r.candidate for r in runs if r.candidate), None)
        if first is not None and any(r.candidate != first for r in runs):
            runs = [load_device(root, campaign, r.gpu, candidate=first) or r for r in runs]
    return build(campaign, runs, missing=missing)


# the side-by-side lines


def build(campaign: str, devices: Sequence[DeviceRun], *, missing: Sequence[str] = ()) -> Comparison:
    """Gate lines and row lines, each cell made from one device's own record of that stage."""
    devices = tuple(devices)
    by_device = [{r["stage"]: r for r in d.records} for d in devices]
    stage_names: list[str] = []
    for recs in by_device:
        stage_names += [s for s in recs if s not in stage_names]
    stage_names.sort(key=_stage_order)

    gates: list[Line] = []
    rows: list[Line] = []
    for stage in stage_names:
        names: list[str] = []
        for recs in by_device:
            names += [str(g.get("name")) for g in (recs.get(stage) or {}).get("gates") or []
                      if str(g.get("name")) not in names]
        for name in names:
            found = [_gate_of(recs.get(stage), name) for recs in by_device]
            threshold = next((format_value(g.get("threshold")) for g in found if g is not None), "—")
            cells = tuple(_gate_cell(d, recs.get(stage), g, threshold, stage)
                          for d, recs, g in zip(devices, by_device, found))
            gates.append(Line(stage, clean(name), threshold, cells))
        labels: list[str] = []
        per_device = [dict(_rows_of(recs.get(stage))) for recs in by_device]
        for measured in per_device:
            labels += [k for k in measured if k not in labels]
        for label in labels:
            cells = tuple(_row_cell(d, recs.get(stage), measured.get(label), stage)
                          for d, recs, measured in zip(devices, by_device, per_device))
            rows.append(Line(stage, label, "", cells))
    return Comparison(campaign=campaign, devices=devices, gates=tuple(gates), rows=tuple(rows),
                      missing=tuple(missing))


def _gate_of(record: Mapping[str, Any] | None, name: str) -> dict[str, Any] | None:
    for g in (record or {}).get("gates") or []:
        if str(g.get("name")) == name:
            return dict(g)
    return None


def _not_run(device: DeviceRun, stage: str) -> Cell:
    if device.error is not None:
        return Cell("unreadable", "error", note=device.error)
    why = next((s.get("why") for s in (device.verdict or {}).get("stages") or []
                if s.get("stage") == stage and s.get("why")), None)
    return Cell("not run", "not_run", note=clean(why or f"no record of {stage} on {device.gpu}"))


def _gate_cell(device: DeviceRun, record: Mapping[str, Any] | None, gate: Mapping[str, Any] | None,
               threshold: str, stage: str) -> Cell:
    if record is None:
        return _not_run(device, stage)
    if gate is None:
        return Cell("—", None, note=f"{stage} on {device.gpu} has no such gate")
    notes = []
    own = format_value(gate.get("threshold"))
    if own != threshold:
        notes.append(f"threshold here: {own}")
    if gate.get("detail") not in (None, "") and gate.get("status") != "pass":
        notes.append(format_value(gate["detail"]))
    return Cell(text=format_value(gate.get("value"), gate.get("unit")), status=clean(gate.get("status", "")),
                interval=format_interval(gate.get("interval"), gate.get("unit")), note=" · ".join(notes))


def _get(row: Mapping[str, Any], path: Sequence[str]) -> Any:
    value: Any = row
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _label(row: Mapping[str, Any], index: int) -> str:
    label = next((str(row[k]) for k in LABEL_KEYS
                  if isinstance(row.get(k), (str, int)) and not isinstance(row.get(k), bool)), f"#{index + 1}")
    mode = row.get("mode")
    return clean(f"{label} ({mode})" if isinstance(mode, str) and mode and mode not in label else label)


def _rows_of(record: Mapping[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """(label, row) for each measured row of a record's ``data.rows``, its ``data.geomean``, its ``data.workloads``."""
    data = (record or {}).get("data")
    if not isinstance(data, Mapping):
        return []
    out = []
    items = data.get("rows")
    if isinstance(items, list):
        for i, row in enumerate(items):
            if isinstance(row, Mapping) and _row_parts(row):
                out.append((_label(row, i), dict(row)))
    geomean = data.get("geomean")
    if isinstance(geomean, Mapping) and _row_parts(geomean):
        out.append(("geomean", dict(geomean)))
    # the model stage's workloads (dense, varlen): each its own tokens/s ratio, interval and class
    workloads = data.get("workloads")
    if isinstance(workloads, list):
        for w in workloads:
            if isinstance(w, Mapping) and isinstance(w.get("workload"), str) and _row_parts(w):
                out.append((clean(w["workload"]), dict(w)))
    return out


def _row_parts(row: Mapping[str, Any]) -> tuple[str, str, str, list[str]]:
    """(ratio text, its interval, its class, other numbers) of one row; all empty when it has no number we know."""
    ratio = interval = tag = ""
    for key in RATIO_KEYS:
        if is_number(row.get(key)):
            ratio = f"{format_number(row[key])}x"
            lo, hi = interval_of(row)
            if lo is None and is_number(row.get("lower")) and is_number(row.get("upper")):
                lo, hi = row["lower"], row["upper"]
            interval = f"[{format_number(lo)}, {format_number(hi)}]" if lo is not None and hi is not None else ""
            break
    for key in CLASS_KEYS:
        if isinstance(row.get(key), str) and row[key]:
            tag = clean(row[key])
            break
    others = []
    for base_path, cand_path in ARM_KEYS:
        base, cand = _get(row, base_path), _get(row, cand_path)
        if is_number(base) and is_number(cand):
            others.append(f"base {format_number(base)} ms · cand {format_number(cand)} ms")
            break
    for path, label, unit in SINGLE_KEYS:
        value = _get(row, path)
        if is_number(value):
            others.append(f"{label} {format_number(value)}{'x' if unit == 'x' else ' ' + unit}")
    if isinstance(row.get("path"), str) and row["path"] and (ratio or others):
        others.append(clean(row["path"]))
    return ratio, interval, tag, others


def _row_cell(device: DeviceRun, record: Mapping[str, Any] | None, row: Mapping[str, Any] | None,
              stage: str) -> Cell:
    if record is None:
        return _not_run(device, stage)
    if row is None:
        return Cell("—", None, note=f"not measured on {device.gpu}")
    ratio, interval, tag, others = _row_parts(row)
    # the ratio leads when there is one; the arms' own numbers follow as its note
    text, note = (ratio, " · ".join(others)) if ratio else (" · ".join(others), "")
    if device.cpu:
        note = " · ".join(p for p in (note, "CPU: timings not meaningful") if p)
    return Cell(text=clean(text), interval=interval, tag=tag, note=clean(note))


# plain text for a terminal


def cell_text(cell: Cell, *, note: bool = False) -> str:
    """A cell on one line: status label, value, interval, class (and its note when ``note``)."""
    parts = []
    if cell.status and cell.status != "not_run":
        parts.append(STATUS_LABELS.get(cell.status, cell.status))
    parts.append(cell.text)
    if cell.interval:
        parts.append(cell.interval)
    if cell.tag:
        parts.append(cell.tag)
    if note and cell.note and cell.status != "not_run":
        parts.append(f"· {cell.note}")
    return " ".join(p for p in parts if p)


def fit_text(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def text_table(header: Sequence[str], body: Sequence[Sequence[str]], width: int) -> list[str]:
    first = min(max([len(header[0]), *(len(r[0]) for r in body)]), 56)
    widths = [first] + [
        min(max([len(header[i]), *(len(r[i]) for r in body)]), width) for i in range(1, len(header))
    ]
    out = []
    for i, row in enumerate([header, *body]):
        out.append("  ".join(fit_text(c, w).ljust(w) for c, w in zip(row, widths)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def render_text(comparison: Comparison, *, width: int = TEXT_WIDTH) -> str:
    """The comparison as plain-text tables: devices, gates, rows, then notes."""
    devs = comparison.devices
    names = [d.gpu + (" (this report)" if d.current else "") for d in devs]
    lines = [f"kgate compare: {comparison.campaign}, {len(devs)} device class{'es' if len(devs) != 1 else ''}: "
             f"{', '.join(d.gpu for d in devs)}", NOTE, ""]
    lines += text_table(["device class", *names], [
        ["device", *(d.describe() for d in devs)],
        ["verdict", *((d.word or "— (no verdict.json)") for d in devs)],
        ["candidate", *((d.candidate or "—") for d in devs)],
        ["torch / triton", *(d.stack() for d in devs)],
        ["records", *(", ".join(r["stage"] for r in d.records) for d in devs)],
    ], width)
    if comparison.gates:
        lines.append("")
        lines += text_table(["stage / gate", *names],
                        [[f"{g.stage} / {g.name}", *(cell_text(c) for c in g.cells)] for g in comparison.gates], width)
    if comparison.rows:
        lines.append("")
        lines += text_table(["stage / row", *names],
                        [[f"{r.stage} / {r.name}", *(cell_text(c, note=True) for c in r.cells)]
                         for r in comparison.rows], width + 28)
    notes = []
    for d in devs:
        if d.error:
            notes.append(f"{d.gpu}: records could not be read: {d.error}")
        if d.cpu:
            notes.append(f"{d.gpu}: CPU run, timings are not meaningful (correctness results stand)")
        notes += [f"{d.gpu}: {n}" for n in d.notes]
        if d.verdict and d.verdict.get("sentence"):
            notes.append(f"{d.gpu}: {d.word}: {clean(d.verdict['sentence'])}")
    notes += [f"{g}: no stage records under {paths.results(comparison.campaign, g).as_posix()}/" for g in comparison.missing]
    for line in (*comparison.gates, *comparison.rows):
        for d, c in zip(devs, line.cells):
            if c.note and c.status not in (None, "pass", "skip", "not_run"):
                notes.append(f"{d.gpu}: {line.stage} / {line.name}: {c.note}")
    if notes:
        lines += ["", *(f"- {fit_text(n, 240)}" for n in notes)]
    return "\n".join(lines) + "\n"


# python -m kgate compare


def run_cli(args: argparse.Namespace) -> int:
    """``python -m kgate compare CAMPAIGN``: device classes side by side (``--candidates`` and ``--records``:
    ``kgate.report.compare_runs``)."""
    if not args.campaign:
        raise ConfigError("compare: name the campaign (python -m kgate compare CAMPAIGN), or give --records X Y")
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    print(render_text(collect(Path(args.root), args.campaign, gpus, candidate=args.candidate)), end="")
    return 0
