"""Two candidates, or two records, of one campaign side by side, with each row's interval and class.

Usage::

    python -m kgate compare rwkv6-bwd-fusion --candidates 6294a6be4c4d f6b3512413ea [--gpu h200]
    python -m kgate compare --records results/C/h200/bench/A/record.json results/C/h200/bench/B/record.json

    from kgate.report import compare_runs
    print(compare_runs.render(compare_runs.collect_candidates(Path("."), "C", ["A", "B"])))

Columns: one per candidate (its candidate stages' records on one device
class: ``results/<c>/<gpu>/<stage>/<candidate>/record.json`` for every
candidate stage of ``kgate.protocol.CANDIDATE_STAGES`` that has one; the
baseline stages are the same files for every candidate and are left out), or
one per record file, in the order given. The lines are those of
``kgate.report.compare.build``: per gate its threshold and each column's
value, interval and status; per measured row (bench rows, the geomean, the
model's workloads) each column's own ratio (baseline vs that candidate on
its device), its interval and its class.

The rule of ``kgate.report.compare`` holds: a column's numbers come from its
own records only; nothing is divided across columns (a candidate-vs-candidate
ratio would pair two runs that were never interleaved). Refused, with one
line: records of two campaigns, or of two stages; the same candidate or file
twice; a candidate with no record on the device class. Noted: columns of
different epochs (the campaign's contract changed between them) or devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths, protocol
from kgate.errors import ConfigError, IncompleteData, KgateError
from kgate.records import read_record
from kgate.report.compare import Comparison, DeviceRun, build, cell_text, device_classes, fit_text, text_table

TEXT_WIDTH = 44
NOTE = ("Each column comes only from its own records: every ratio is baseline vs that candidate, measured in one "
        "interleaved run on one device. No ratio is taken across columns.")


@dataclass(frozen=True)
class Columns:
    """A comparison of runs: the lines (``kgate.report.compare.Comparison``), a label and a source per column."""

    comparison: Comparison
    labels: tuple[str, ...]
    sources: tuple[str, ...]
    title: str


def collect_candidates(root: Path, campaign: str, candidates: Sequence[str], gpu: str | None = None) -> Columns:
    """The candidate-stage records of each of ``candidates`` on ``gpu`` (default: the one device class with them all).

    Raises:
        ConfigError: fewer than two candidates, one named twice, or no ``gpu`` given where several would do.
        IncompleteData: a candidate has no candidate-stage record on the device class.
    """
    root = Path(root)
    candidates = [str(c) for c in candidates]
    if len(candidates) < 2:
        raise ConfigError("--candidates: name two candidate ids (or more) to set side by side")
    if len(set(candidates)) != len(candidates):
        raise ConfigError(f"--candidates: a candidate is named twice ({', '.join(candidates)})")
    gpu = gpu or _common_gpu(root, campaign, candidates)
    runs, sources = [], []
    for cand in candidates:
        records = []
        for stage in protocol.STAGES:
            if stage not in protocol.CANDIDATE_STAGES:
                continue
            path = root / paths.record(campaign, gpu, stage, cand)
            if path.is_file():
                records.append(read_record(path))
        if not records:
            where = (paths.results(campaign, gpu) / "<stage>" / cand).as_posix()
            raise IncompleteData(f"no records of candidate {cand} under {root / where}/ (campaign {campaign!r}, gpu {gpu})")
        runs.append(DeviceRun(gpu=gpu, candidate=cand, records=tuple(records)))
        sources.append((paths.results(campaign, gpu) / f"<stage>/{cand}").as_posix())
    return Columns(comparison=build(campaign, runs), labels=tuple(candidates), sources=tuple(sources),
                   title=f"kgate compare: {campaign} on {gpu}, candidates {' vs '.join(candidates)}")


def _has_records(root: Path, campaign: str, gpu: str, cand: str) -> bool:
    return any((root / paths.record(campaign, gpu, s, cand)).is_file() for s in protocol.CANDIDATE_STAGES)


def _common_gpu(root: Path, campaign: str, candidates: Sequence[str]) -> str:
    found = [g for g in device_classes(root, campaign) if all(_has_records(root, campaign, g, c) for c in candidates)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise IncompleteData(f"no device class under {root / paths.campaign_results(campaign)}/ has records of every "
                             f"candidate asked for ({', '.join(candidates)})")
    raise ConfigError(f"candidates {', '.join(candidates)} have records on {', '.join(found)}: pass --gpu")


def collect_records(record_paths: Sequence[Path | str]) -> Columns:
    """The records at ``record_paths``, one column each; they must be of one campaign and one stage.

    Raises:
        ConfigError: fewer than two files, one given twice, or records of two campaigns or two stages.
        IncompleteData, FormatVersionError: a file cannot be read as a stage record.
    """
    files = [Path(p) for p in record_paths]
    if len(files) < 2:
        raise ConfigError("--records: name two record.json files (or more) to set side by side")
    if len({p.resolve() for p in files}) != len(files):
        raise ConfigError(f"--records: a file is named twice ({', '.join(map(str, files))})")
    records = [read_record(p) for p in files]
    for key, what in (("campaign", "campaigns"), ("stage", "stages")):
        first = records[0].get(key)
        for path, rec in zip(files[1:], records[1:]):
            if rec.get(key) != first:
                raise ConfigError(f"records of two {what}: {files[0]} is of {key} {first!r}, {path} of "
                                  f"{rec.get(key)!r}; compare sets side by side records of one campaign and one stage")
    runs = [DeviceRun(gpu=str(r.get("gpu")), candidate=r.get("candidate"), records=(r,)) for r in records]
    labels = _labels(files, records)
    stage = records[0].get("stage")
    return Columns(comparison=build(str(records[0].get("campaign")), runs), labels=labels,
                   sources=tuple(p.as_posix() for p in files),
                   title=f"kgate compare: {records[0].get('campaign')}, {stage} records {' vs '.join(labels)}")


def _labels(files: Sequence[Path], records: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """A column's label: its candidate (and device class when they differ); the file's folder when those repeat."""
    gpus = {r.get("gpu") for r in records}
    labels = [f"{r.get('candidate') or 'baseline'}{'' if len(gpus) == 1 else ' @ ' + str(r.get('gpu'))}" for r in records]
    if len(set(labels)) != len(labels):
        labels = [f"{label} ({p.parent.name or p.name})" for label, p in zip(labels, files)]
    if len(set(labels)) != len(labels):
        labels = [f"#{i + 1} {label}" for i, label in enumerate(labels)]
    return tuple(labels)


# plain text


def _epoch(run: DeviceRun) -> str:
    numbers = sorted({str((r.get("epoch") or {}).get("number")) for r in run.records if r.get("epoch")})
    return ", ".join(numbers) or "—"


def render(columns: Columns, *, width: int = TEXT_WIDTH) -> str:
    """The columns as plain-text tables: what each column is, the gates, the rows with intervals, then notes."""
    comp = columns.comparison
    runs = comp.devices
    names = list(columns.labels)
    lines = [columns.title, NOTE, ""]
    lines += text_table(["column", *names], [
        ["records", *columns.sources],
        ["device", *(r.describe() for r in runs)],
        ["candidate", *((r.candidate or "—") for r in runs)],
        ["epoch", *(_epoch(r) for r in runs)],
        ["stages", *(", ".join(f"{x['stage']} {x.get('status')}" for x in r.records) for r in runs)],
        ["torch / triton", *(r.stack() for r in runs)],
    ], width)
    if comp.gates:
        lines.append("")
        lines += text_table(["stage / gate", "threshold", *names],
                        [[f"{g.stage} / {g.name}", g.threshold, *(cell_text(c) for c in g.cells)] for g in comp.gates],
                        width)
    if comp.rows:
        lines.append("")
        lines += text_table(["stage / row", *names],
                        [[f"{r.stage} / {r.name}", *(cell_text(c) for c in r.cells)] for r in comp.rows], width)
    notes = []
    epochs = {_epoch(r) for r in runs}
    if len(epochs) > 1:
        notes.append("the columns are of different epochs (" + ", ".join(f"{n}: {_epoch(r)}" for n, r in zip(names, runs))
                     + "): the campaign's contract changed between them")
    devices = {r.device.get("uuid") or r.gpu for r in runs}
    if len(devices) > 1:
        notes.append("the columns ran on different GPUs (device uuids differ): each ratio is still its own pair's, "
                     "both arms measured on one GPU")
    for n, r in zip(names, runs):
        if r.cpu:
            notes.append(f"{n}: CPU run, timings are not meaningful (correctness results stand)")
    for line in comp.gates:
        for n, c in zip(names, line.cells):
            if c.note and c.status not in ("pass", "skip", "not_run"):
                notes.append(f"{n}: {line.stage} / {line.name}: {c.note}")
    if notes:
        lines += ["", *(f"- {fit_text(n, 240)}" for n in notes)]
    return "\n".join(lines) + "\n"


def run_cli(campaign: str | None, candidates: Sequence[str] | None, records: Sequence[str] | None,
            gpu: str | None, root: str) -> int:
    """``python -m kgate compare`` with ``--candidates`` or ``--records``."""
    if candidates and records:
        raise ConfigError("compare: give --candidates or --records, not both")
    if records:
        if campaign:
            raise ConfigError("compare --records: the records name their campaign; drop the campaign argument")
        columns = collect_records([Path(p) for p in records])
    elif candidates:
        if not campaign:
            raise ConfigError("compare --candidates: name the campaign (python -m kgate compare CAMPAIGN --candidates A B)")
        columns = collect_candidates(Path(root), campaign, candidates, gpu)
    else:
        raise KgateError("compare: nothing to compare")
    print(render(columns), end="")
    return 0
