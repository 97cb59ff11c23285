"""The page model: a verdict and its stage records resolved once into what every output of the report shows.

``build_model`` checks the inputs (the ``kgate.verdict/1`` and
``kgate.stage/1`` formats of docs/architecture.md) and resolves them into a
``Model``: the verdict and the number that decided it, the stages in the
verdict's order (records the verdict does not list are appended, so their
evidence still shows), the gates with their values formatted and evidence
linked, the SHAs and job ids, and the candidate history with each value's
change against the candidate before. ``epoch_rows`` adds the campaign's epochs.
``kgate.report.html``, ``kgate.report.summary`` and ``kgate.report.junit``
render a Model; none of them reads a record again. The devices block
(``Model.devices``, a ``kgate.report.compare.Comparison``) is set by
``kgate.report.outputs.render``; this module does not import compare.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate.device import describe as describe_device
from kgate.errors import FormatVersionError, IncompleteData
from kgate.records import STAGE_SCHEMA, VERDICT_SCHEMA, first_provenance
from kgate.report.format import STATUS_LABELS, clean, format_interval, format_value, is_number, truncate
from kgate.report.links import Links
from kgate.report.timing import time_to_verdict

VERDICTS = ("GO", "NO-GO", "STOPPED", "INCONCLUSIVE", "SMOKE")
# gate and stage statuses, most severe first; `not_run` only appears in verdict["stages"]
STATUSES = ("error", "fail", "stop", "inconclusive", "unavailable", "skip", "pass", "not_run")
# where the summary's SHAs come from: (label, stage, data keys tried in order); provenance.git.head is the fallback
SHA_SOURCES = (
    ("target baseline", "target", ("baseline_sha", "baseline", "sha")),
    ("BENCH_BASE", "fixture_freeze", ("bench_base", "bench_base_sha", "commit", "sha")),
    ("candidate", "candidate_build", ("candidate_sha", "commit", "sha")),
)
# characters of the verdict's sentence shown in the banner; the rest folds below it
SENTENCE_HEAD = 240


@dataclass(frozen=True)
class Gate:
    """One gate of the verdict, its values as text and its evidence linked; ``decisive`` when it decided."""

    stage: str
    name: str
    threshold: str
    value: str
    interval: str
    status: str
    detail: str
    evidence: str | None
    href: str | None
    decisive: bool

    @property
    def threshold_head(self) -> str:
        """The threshold without its parenthesised formula (``>= 1.08 x``); the whole of it when it has none."""
        return split_formula(self.threshold)[0]

    @property
    def formula(self) -> str:
        """The threshold's parenthesised formula, or ""."""
        return split_formula(self.threshold)[1]


def split_formula(text: str) -> tuple[str, str]:
    """``"a (b (c))"`` -> ``("a", "b (c)")``: a threshold's statement and the formula that follows it in parentheses."""
    cut = text.find(" (")
    if cut <= 0 or not text.endswith(")"):
        return text, ""
    return text[:cut], text[cut + 2:-1]


@dataclass(frozen=True)
class Stage:
    """One stage in the verdict's order, with its record when the report was given one."""

    name: str
    anchor: str
    status: str
    why: str | None
    record_path: str | None
    record_href: str | None
    record: dict[str, Any] | None


@dataclass(frozen=True)
class Model:
    """What index.html, summary.md and gates.junit.xml show, resolved once by ``build_model``."""

    verdict: dict[str, Any]
    word: str
    campaign: str
    gpu: str
    candidate: str | None
    sentence: str
    sentence_head: str
    forced: bool
    forced_past: tuple[str, ...]
    would_be: str | None
    cpu: bool
    links: Links
    stages: list[Stage]
    gates: list[Gate]
    decisive: Gate | None
    headline: dict[str, Any]
    shas: list[tuple[str, str | None, str]]
    jobs: list[tuple[str, str]]
    history_columns: list[str]
    history: list[dict[str, Any]]
    # the device and software the records ran on, one line for the banner ("" when no record says)
    device_line: str = ""
    # kgate.report.compare.Comparison of this device and the campaign's other device classes, or None
    devices: Any = None
    # the campaign's epochs (kgate.epochs ledger) with the stages of this report that belong to each
    epochs: list[dict[str, Any]] = field(default_factory=list)
    # one sentence under the verdict word: what decided it (the full sentence and formula fold below)
    reason: str = ""
    # the time to verdict from the shown stages' records (kgate.report.timing), "" when none states it
    time_line: str = ""


def build_model(
    verdict: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    history: Sequence[Mapping[str, Any]],
    *,
    root: Path | None = None,
    devices: Any = None,
) -> Model:
    """Check the inputs and resolve links, stages and gates once for all three outputs."""
    if verdict.get("schema") != VERDICT_SCHEMA:
        msg = f"verdict: schema {verdict.get('schema')!r} is not {VERDICT_SCHEMA!r}"
        raise FormatVersionError(msg)
    word = verdict.get("verdict")
    if word not in VERDICTS:
        msg = f"verdict: 'verdict' is {word!r}, expected one of {', '.join(VERDICTS)}"
        raise IncompleteData(msg)
    for key in ("campaign", "gpu"):
        if not isinstance(verdict.get(key), str) or not verdict[key]:
            msg = f"verdict: {key!r} is missing"
            raise IncompleteData(msg)
    for i, record in enumerate(records):
        if record.get("schema") != STAGE_SCHEMA:
            msg = f"record {i} ({record.get('stage')!r}): schema {record.get('schema')!r} is not {STAGE_SCHEMA!r}"
            raise FormatVersionError(msg)
        if not isinstance(record.get("stage"), str) or not isinstance(record.get("status"), str):
            msg = f"record {i}: 'stage' and 'status' are required"
            raise IncompleteData(msg)

    campaign, gpu = verdict["campaign"], verdict["gpu"]
    links = Links(campaign, gpu, root, _run_roots(records))
    candidate = verdict.get("candidate")
    by_stage = _records_by_stage(records, candidate)
    stages: list[Stage] = []
    seen: set[str] = set()
    for entry in verdict.get("stages") or []:
        name = clean(entry.get("stage", ""))
        seen.add(name)
        record = by_stage.get(name)
        record_path = entry.get("record")
        stages.append(
            Stage(
                name=name,
                anchor=_anchor(len(stages), name),
                status=clean(entry.get("status", record.get("status") if record else "not_run")),
                why=clean(entry["why"]) if entry.get("why") else None,
                record_path=record_path,
                record_href=links.href(record_path),
                record=record,
            )
        )
    # records the verdict does not list still show their evidence
    for name, record in by_stage.items():
        if name not in seen:
            stages.append(Stage(name, _anchor(len(stages), name), record["status"], None, None, None, record))

    decided = verdict.get("decided_by") or {}
    gates = []
    for g in verdict.get("gates") or []:
        evidence = g.get("evidence")
        gates.append(
            Gate(
                stage=clean(g.get("stage", "")),
                name=clean(g.get("name", "")),
                threshold=format_value(g.get("threshold")),
                value=format_value(g.get("value"), g.get("unit")),
                interval=format_interval(g.get("interval"), g.get("unit")),
                status=clean(g.get("status", "")),
                detail=format_value(g["detail"]) if g.get("detail") not in (None, "") else "",
                evidence=evidence,
                href=links.href(evidence),
                decisive=decided.get("gate") is not None
                and (g.get("stage"), g.get("name")) == (decided.get("stage"), decided.get("gate")),
            )
        )
    decisive = next((g for g in gates if g.decisive), None)
    device = first_provenance(records, "device")
    cpu = gpu == "cpu" or bool(device.get("interpreter")) or device.get("class") == "cpu"
    return Model(
        verdict=dict(verdict),
        word=word,
        campaign=campaign,
        gpu=gpu,
        candidate=candidate,
        sentence=clean(verdict.get("sentence") or ""),
        sentence_head=_head(clean(verdict.get("sentence") or ""), SENTENCE_HEAD),
        forced=bool(verdict.get("forced")),
        forced_past=_forced_past(verdict),
        would_be=clean(verdict["would_be"]) if verdict.get("would_be") else None,
        cpu=cpu,
        links=links,
        stages=stages,
        gates=gates,
        decisive=decisive,
        headline=_headline(decisive, decided, stages, gates),
        shas=_shas(by_stage),
        jobs=_jobs(stages),
        history_columns=[clean(c) for c in _history_columns(history)],
        history=_history_rows(history, candidate),
        device_line=_device_line(device, records),
        devices=devices,
        reason=_reason(decisive, clean(verdict.get("sentence") or ""), bool(verdict.get("forced")),
                       verdict.get("would_be")),
        time_line=_time_line(stages),
    )


def _time_line(stages: Sequence[Stage]) -> str:
    timing = time_to_verdict([s.record for s in stages if s.record is not None])
    return clean(timing.line()) if timing is not None else ""


def _device_line(device: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> str:
    """Device name, compute capability, driver, then the torch and triton versions of the first record that has them."""
    parts = describe_device(dict(device))
    versions = next((v for r in records if isinstance(v := (r.get("provenance") or {}).get("versions"), Mapping)), {})
    parts += [f"{k} {versions[k]}" for k in ("torch", "triton") if versions.get(k)]
    return clean(" · ".join(parts))


def _run_roots(records: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The absolute working directories (provenance.cwd) the records were written in, each once."""
    out: list[str] = []
    for record in records:
        cwd = (record.get("provenance") or {}).get("cwd")
        if isinstance(cwd, str) and os.path.isabs(cwd) and len(Path(cwd).parts) > 1:
            cwd = Path(cwd).as_posix().rstrip("/")
            if cwd not in out:
                out.append(cwd)
    return tuple(out)


def _headline(
    decisive: Gate | None, decided: Mapping[str, Any], stages: Sequence[Stage], gates: Sequence[Gate]
) -> dict[str, Any]:
    """The number beside the verdict: the deciding gate's value, else the deciding stage, else the gate tally."""
    if decisive is not None:
        return {"kind": "gate", "gate": decisive}
    stage = next((s for s in stages if s.name == decided.get("stage")), None) if decided.get("stage") else None
    if stage is not None:
        reasons = (stage.record or {}).get("reasons") or []
        return {"kind": "stage", "stage": stage, "note": clean(stage.why or (reasons[0] if reasons else ""))}
    counts = Counter(g.status for g in gates)
    others = [f"{n} {STATUS_LABELS.get(st, st)}" for st, n in sorted(counts.items(), key=_status_order) if st != "pass"]
    not_run = sum(1 for s in stages if s.status == "not_run")
    if not_run:
        others.append(f"{not_run} stage{'s' if not_run > 1 else ''} not run")
    return {"kind": "tally", "big": f"{counts['pass']} of {len(gates)} gates pass", "note": " · ".join(others)}


def _forced_past(verdict: dict[str, Any]) -> tuple[str, ...]:
    """What a forced run walked past (``kgate.verdict``'s ``forced_past``; a verdict written before that key
    existed said only that it was forced past a STOP)."""
    if not verdict.get("forced"):
        return ()
    return tuple(clean(x) for x in verdict.get("forced_past", ["a STOP"]))


def _reason(decisive: Gate | None, sentence: str, forced: bool, would_be: Any) -> str:
    """One sentence: the deciding gate and its detail (else its value against the threshold's statement),
    and for a forced run the would-be verdict; without a deciding gate the verdict's sentence, cut."""
    if decisive is None:
        return _head(sentence, SENTENCE_HEAD)
    what = decisive.detail if decisive.detail and len(decisive.detail) <= 200 and decisive.status != "pass" else (
        f"{decisive.value}{' ' + decisive.interval if decisive.interval else ''} against {decisive.threshold_head}")
    text = f"{decisive.stage} / {decisive.name} {STATUS_LABELS.get(decisive.status, decisive.status)}: {what}."
    if forced and would_be:
        text += f" Forced on past it, the run would be {clean(would_be)}."
    return _head(text, SENTENCE_HEAD)


def _head(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a space, with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > limit // 2 else limit].rstrip(" ,;:—-") + " …"


def _status_order(item: tuple[str, int]) -> int:
    return STATUSES.index(item[0]) if item[0] in STATUSES else len(STATUSES)


def _records_by_stage(records: Sequence[Mapping[str, Any]], candidate: str | None) -> dict[str, dict[str, Any]]:
    """One record per stage; of several candidates' records the verdict's candidate wins."""
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        name = record["stage"]
        kept = out.get(name)
        if kept is None or (record.get("candidate") == candidate and kept.get("candidate") != candidate):
            out[name] = dict(record)
    return out


def _anchor(index: int, name: str) -> str:
    return f"stage-{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", name)[:40]


def _shas(by_stage: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str | None, str]]:
    """(label, sha or None, where it came from) for target baseline, BENCH_BASE and candidate."""
    out = []
    for label, stage, keys in SHA_SOURCES:
        record = by_stage.get(stage)
        sha, source = None, "no record"
        if record is not None:
            data = record.get("data") or {}
            source = f"{stage}: not recorded"
            for key in keys:
                if isinstance(data, dict) and isinstance(data.get(key), str) and data[key]:
                    sha, source = data[key], f"{stage} data.{key}"
                    break
            else:
                head = ((record.get("provenance") or {}).get("git") or {}).get("head")
                if isinstance(head, str) and head:
                    sha, source = head, f"{stage} provenance.git.head"
        out.append((label, sha, source))
    return out


def _jobs(stages: Sequence[Stage]) -> list[tuple[str, str]]:
    out = []
    for stage in stages:
        if stage.record is None:
            continue
        prov = stage.record.get("provenance") or {}
        slurm = prov.get("slurm") or {}
        if slurm.get("job_id") not in (None, ""):
            job = f"slurm {slurm['job_id']}" + (f" on {slurm['node']}" if slurm.get("node") else "")
        elif prov.get("host"):
            job = f"local on {prov['host']}"
        else:
            job = "local"
        out.append((stage.name, job))
    return out


HISTORY_ROW_KEYS = ("candidate", "created_utc")
HISTORY_NUMBER_KEYS = ("numbers", "key_numbers")


def _history_columns(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """The verdict, then every other field of the entries, then every key number."""
    fields = ["verdict"] if any("verdict" in h for h in history) else []
    for h in history:
        fields += [str(k) for k in h if k not in HISTORY_ROW_KEYS + HISTORY_NUMBER_KEYS and str(k) not in fields]
    for h in history:
        fields += [k for k in _history_cells(h) if k not in fields]
    return fields


def _history_cells(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry's fields and key numbers in one mapping (a key number wins over a field of the same name)."""
    cells = {str(k): v for k, v in entry.items() if k not in HISTORY_ROW_KEYS + HISTORY_NUMBER_KEYS}
    numbers = next((entry[k] for k in HISTORY_NUMBER_KEYS if isinstance(entry.get(k), Mapping)), {})
    cells.update({str(k): v for k, v in numbers.items()})
    return cells


def _history_text(value: Any) -> str:
    if isinstance(value, Mapping) and all(not isinstance(v, (Mapping, list)) for v in value.values()):
        return clean(", ".join(f"{k}={format_value(v)}" for k, v in value.items()))
    return format_value(value)


def _history_rows(history: Sequence[Mapping[str, Any]], candidate: str | None) -> list[dict[str, Any]]:
    """Newest first; each cell carries its change against the previous (older) candidate.

    A number gets its difference (and relative change); any other value that
    changed gets "was <previous>".
    """
    rows = sorted((dict(h) for h in history), key=lambda h: str(h.get("created_utc") or ""))
    columns = _history_columns(rows)
    out = []
    previous: dict[str, Any] = {}
    for h in rows:
        values = _history_cells(h)
        cells = []
        for key in columns:
            value, before = values.get(key), previous.get(key)
            note = None
            if is_number(value) and is_number(before):
                diff = value - before
                note = "±0" if diff == 0 else f"{diff:+.4g}"
                if before not in (0, 0.0):
                    note += f" ({diff / abs(before):+.1%})"
            elif key in values and key in previous and value != before:
                note = f"was {truncate(_history_text(before), 40)}"
            cells.append((_history_text(value) if key in values else "—", note))
        out.append(
            {
                "candidate": format_value(h.get("candidate")),
                "created_utc": format_value(h.get("created_utc")),
                "current": candidate is not None and h.get("candidate") == candidate,
                "cells": cells,
            }
        )
        previous = values
    out.reverse()
    return out


def epoch_rows(ledger: Mapping[str, Any] | None, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per epoch: number, why it opened, what changed, where it was frozen, and which of
    this report's stage records belong to it (by the epoch stamped in each record)."""
    if not ledger:
        return []
    rows = []
    for e in ledger.get("epochs", []):
        stages = [clean(r.get("stage")) for r in records if (r.get("epoch") or {}).get("number") == e.get("number")]
        frozen = ", ".join(f"{clean(g)} (BENCH_BASE {clean(str(v.get('bench_base', ''))[:12])})"
                           for g, v in (e.get("frozen") or {}).items())
        rows.append({"number": clean(e.get("number")), "reason": clean(e.get("reason", "")),
                     "changed": clean(", ".join(e.get("changed") or [])) or "-", "opened": clean(e.get("opened_utc", "")),
                     "frozen": frozen or "not frozen yet", "contract": clean(e.get("contract", "")),
                     "stages": ", ".join(stages) or "-"})
    return rows
