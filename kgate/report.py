"""Render a verdict and its stage records into the report a kernel engineer reads first.

Usage::

    from pathlib import Path
    from kgate import report

    paths = report.render(verdict, records, Path("reports/rwkv6-bwd-fusion/h200"), history=history)

``render`` writes three files into ``out_dir``:

- ``index.html``: one self-contained page (inline CSS and SVG, no JavaScript,
  no network): the verdict and the number that decided it, the gate table,
  the candidate history, then the evidence of every stage;
- ``summary.md``: the verdict line, the gate table, the SHAs and job ids,
  ready to paste into an issue comment;
- ``gates.junit.xml``: one testsuite per stage, one testcase per gate, for CI.

When the campaign has records on other device classes too (``results/<campaign>/<gpu>/``
for more than one ``gpu``), index.html and summary.md get a side-by-side
section, one column per device class, built by ``kgate.compare``: each column
from that device's own records only.

``verdict.json`` is written by ``kgate.verdict``, not here. The inputs follow
the ``kgate.verdict/1`` and ``kgate.stage/1`` formats of docs/architecture.md;
docs/report.md says where every number on the page comes from.

Every run-derived string (test ids, kernel names, messages, paths, env values)
is escaped for the format it lands in: HTML through Jinja's autoescape and
``markupsafe.escape`` in the SVG helpers, XML through ElementTree, Markdown
through ``md_escape``. Terminal colour codes (pytest messages) are dropped;
other characters that XML 1.0 cannot carry, such as NUL, are shown as
``\\xNN`` text.

A stage's test runs (``data.tests``, or a ``tests`` list under a key such as
``data.run``), ``data.manifest``, ``data.diff``, the ncu stage's rows
(``kgate.report_ncu``, ``templates/ncu.html.j2``) and the model stage's
workloads (``kgate.report_model``, ``templates/model.html.j2``) get their own renderers;
any other key is rendered generically (tables of scalars, nested tables, and
plots for numeric series), so a new stage shows up without a code change here.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import shlex
import statistics
import textwrap
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup, escape

from kgate.device import describe as describe_device
from kgate.errors import FormatVersionError, IncompleteData
from kgate.records import STAGE_SCHEMA, VERDICT_SCHEMA, atomic_write_text, first_provenance

VERDICTS = ("GO", "NO-GO", "STOPPED", "INCONCLUSIVE", "SMOKE")
# gate and stage statuses, most severe first; `not_run` only appears in verdict["stages"]
STATUSES = ("error", "fail", "stop", "inconclusive", "unavailable", "skip", "pass", "not_run")
STATUS_LABELS = {
    "pass": "pass",
    "fail": "FAIL",
    "stop": "STOP",
    "skip": "skip",
    "unavailable": "unavailable",
    "inconclusive": "inconclusive",
    "error": "ERROR",
    "not_run": "not run",
}
# JUnit mapping (docs/report.md): fail -> <failure>, error -> <error>, these -> <skipped>
JUNIT_SKIPPED = ("stop", "inconclusive", "unavailable", "skip", "not_run")
FAILED_OUTCOMES = ("failed", "error")
OUTCOME_ORDER = ("failed", "error", "xpassed", "rerun", "passed", "skipped", "xfailed", "deselected")
# where the summary's SHAs come from: (label, stage, data keys tried in order); provenance.git.head is the fallback
SHA_SOURCES = (
    ("target baseline", "target", ("baseline_sha", "baseline", "sha")),
    ("BENCH_BASE", "fixture_freeze", ("bench_base", "bench_base_sha", "commit", "sha")),
    ("candidate", "candidate_build", ("candidate_sha", "commit", "sha")),
)
# record keys carry their unit as a suffix (house style): these make a numeric mapping a bar chart
UNIT_SUFFIXES = {"_ms": "ms", "_us": "µs", "_ns": "ns", "_s": "s", "_bytes": "bytes", "_mb": "MB", "_gb": "GB"}
LABEL_KEYS = ("row", "name", "label", "kernel", "shape", "key", "id")
MAX_TABLE_ROWS = 200
# a record data key whose JSON is longer than this is named with its size, not drawn: it stays in record.json
# (e.g. the resources of a few hundred autotuning variants would make a page of several MB)
GENERIC_MAX_CHARS = 16_000
# characters of the verdict's sentence shown in the banner; the rest folds below it
SENTENCE_HEAD = 240
MAX_DEPTH = 6
TEMPLATES = Path(__file__).with_name("templates")

_ANSI_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_MD_SPECIAL = re.compile(r"([\\`|<>&*\[\]])")
_MD_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_SAFE_CODE = re.compile(r"^[A-Za-z0-9._/:+=@-]+$")
# Okabe-Ito: distinguishable with the common colour-vision deficiencies
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#8C7A00", "#000000")


def render(
    verdict: dict[str, Any],
    records: list[dict[str, Any]],
    out_dir: Path,
    *,
    history: list[dict[str, Any]] | None = None,
    devices: Sequence[Any] | None = None,
) -> list[Path]:
    """Write index.html, summary.md and gates.junit.xml into out_dir and return their paths.

    Args:
        verdict:
            A ``kgate.verdict/1`` dict (what ``kgate.verdict`` writes to verdict.json).
        records:
            The ``kgate.stage/1`` records the verdict was computed from, in any order.
        out_dir:
            The report folder; links to evidence assume it is ``reports/<campaign>/<gpu>/``
            under the repository root, as docs/architecture.md lays it out.
        history:
            Candidates of the same campaign and gpu, this one included, each
            ``{candidate, created_utc, numbers: {name: value}}`` plus any other
            fields (``verdict``, statuses, source), shown newest first with the
            change against the one before. Default: ``None``.
        devices:
            The other device classes' runs of this campaign (``kgate.compare.DeviceRun``),
            shown side by side with this one. Default ``None``: read them from
            ``results/<campaign>/*/`` when out_dir is the repository's
            ``reports/<campaign>/<gpu>/`` folder (nothing otherwise); ``()`` for none.

    Raises:
        FormatVersionError: the verdict or a record carries another schema version.
        IncompleteData: a key the report needs is missing.
    """
    out_dir = Path(out_dir)
    root = _repo_root(out_dir, verdict)
    model = build_model(verdict, records, history or [], root=root)
    model = replace(model, devices=_devices(verdict, records, root, devices),
                    epochs=epoch_rows(_ledger(verdict, root), records))
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = (
        ("index.html", render_html(model)),
        ("summary.md", render_summary(model)),
        ("gates.junit.xml", render_junit(model)),
    )
    paths = []
    for name, text in outputs:
        path = out_dir / name
        atomic_write_text(path, text)
        paths.append(path)
    return paths


def _ledger(verdict: Mapping[str, Any], root: Path | None) -> Mapping[str, Any] | None:
    """The campaign's epoch ledger beside the results, when the report is rendered in the repository."""
    if root is None:
        return None
    path = root / "results" / str(verdict["campaign"]) / "epochs.json"
    return json.loads(path.read_text()) if path.exists() else None


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


def _devices(
    verdict: Mapping[str, Any], records: Sequence[Mapping[str, Any]], root: Path | None, devices: Sequence[Any] | None
) -> Any:
    """The comparison across device classes (this one first), or None when there is no other device."""
    from kgate import compare

    if devices is None:
        if root is None:
            return None
        devices = compare.other_devices(root, verdict["campaign"], verdict["gpu"], verdict.get("candidate"))
    others = [d for d in devices if d.gpu != verdict["gpu"]]
    if not others:
        return None
    return compare.build(verdict["campaign"], [compare.current_device(verdict, records), *others])


def _repo_root(out_dir: Path, verdict: Mapping[str, Any]) -> Path | None:
    """The repository root when out_dir is its reports/<campaign>/<gpu>/ folder, else None."""
    resolved = out_dir.resolve()
    if resolved.parts[-3:] == ("reports", str(verdict.get("campaign")), str(verdict.get("gpu"))):
        return resolved.parents[2]
    return None


# model: the verdict and records resolved into what every output shows


@dataclass(frozen=True)
class Links:
    """Links and short names for paths that records give relative to the repository root (or absolute)."""

    campaign: str
    gpu: str
    root: Path | None = None
    # the working directories the records were written in (provenance.cwd): the run's repository root
    run_roots: tuple[str, ...] = ()

    @property
    def base(self) -> str:
        return f"reports/{self.campaign}/{self.gpu}"

    def href(self, path: Any) -> str | None:
        return evidence_href(path, self.base, self.root, run_roots=self.run_roots)

    def short(self, path: Any) -> str:
        """The path without the repository root and ``results/<campaign>/<gpu>/`` (the link keeps it all)."""
        text = clean(path)
        if os.path.isabs(text):
            roots = ([self.root.as_posix()] if self.root is not None else []) + list(self.run_roots)
            for root in (r.rstrip("/") + "/" for r in roots):
                if text.startswith(root):
                    text = text[len(root):]
                    break
        prefix = f"results/{self.campaign}/{self.gpu}/"
        return text[len(prefix):] if text.startswith(prefix) and len(text) > len(prefix) else text


@dataclass(frozen=True)
class Gate:
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


@dataclass(frozen=True)
class Stage:
    name: str
    anchor: str
    status: str
    why: str | None
    record_path: str | None
    record_href: str | None
    record: dict[str, Any] | None


@dataclass(frozen=True)
class Model:
    verdict: dict[str, Any]
    word: str
    campaign: str
    gpu: str
    candidate: str | None
    sentence: str
    sentence_head: str
    forced: bool
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
    # kgate.compare.Comparison of this device and the campaign's other device classes, or None
    devices: Any = None
    # the campaign's epochs (kgate.epochs ledger) with the stages of this report that belong to each
    epochs: list[dict[str, Any]] = field(default_factory=list)


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
    )


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
            if _is_number(value) and _is_number(before):
                diff = value - before
                note = "±0" if diff == 0 else f"{diff:+.4g}"
                if before not in (0, 0.0):
                    note += f" ({diff / abs(before):+.1%})"
            elif key in values and key in previous and value != before:
                note = f"was {_truncate(_history_text(before), 40)}"
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


# formatting


def clean(value: Any) -> str:
    """The text of a run-derived value: terminal colour codes dropped, other characters XML 1.0 cannot carry shown as \\xNN."""
    return _XML_INVALID.sub(lambda m: f"\\x{ord(m.group()):02x}", _ANSI_CSI.sub("", str(value)))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def format_value(value: Any, unit: Any = None) -> str:
    """A gate's value or threshold as one line of text, with its unit when it has one."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif _is_number(value):
        text = format_number(value)
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if unit not in (None, "") and not isinstance(value, str):
        text = f"{text} {unit}"
    return clean(text)


def format_interval(interval: Any, unit: Any = None) -> str:
    """``[lo, hi]`` from a 2-list or a {lo, hi[, level]} dict; other shapes as text; ``""`` for none."""
    if interval is None:
        return ""
    level = None
    if isinstance(interval, Mapping):
        lo, hi = interval.get("lo", interval.get("low")), interval.get("hi", interval.get("high"))
        level = interval.get("level", interval.get("confidence"))
    elif isinstance(interval, Sequence) and not isinstance(interval, str) and len(interval) == 2:
        lo, hi = interval
    else:
        return format_value(interval)
    text = f"[{format_value(lo)}, {format_value(hi)}]"
    if _is_number(level):
        text += f" {level:.0%}" if level <= 1 else f" {format_number(level)}%"
    if unit not in (None, ""):
        text += f" {unit}"
    return clean(text)


def evidence_href(
    path: Any, base: str, root: Path | None = None, *, run_roots: Sequence[str] = ()
) -> str | None:
    """A relative link from the report folder ``base`` to ``path`` (relative to the repository root).

    An absolute path under ``root`` (the repository root, when known) is made
    relative to it, and so is one under a ``run_roots`` folder (the working
    directory a record was written in, ``provenance.cwd``: the repository root
    of the run, which may have been another machine); other absolute paths
    become file:// links. The result is percent-encoded, so a path can never
    turn into another URL scheme or break out of an attribute.
    """
    if not isinstance(path, str) or not path.strip():
        return None
    if os.path.isabs(path):
        under = next((Path(r) for r in ([root] if root is not None else []) + [Path(r) for r in run_roots]
                      if Path(path).is_relative_to(r)), None)
        if under is None:
            return "file://" + quote(Path(path).as_posix(), errors="replace")
        path = Path(path).relative_to(under).as_posix()
    rel = posixpath.relpath(posixpath.normpath(path.replace(os.sep, "/")), base)
    return quote(rel, errors="replace")


def md_escape(value: Any) -> str:
    """Text that Markdown (GitHub's included) shows literally, on one line, inside a table cell."""
    text = clean(value).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    return _MD_UNDERSCORE.sub(r"\\_", text)


def md_code(value: Any) -> str:
    """A code span for identifier-like values (SHAs, hashes); anything else is escaped text."""
    text = clean(value)
    return f"`{text}`" if _SAFE_CODE.match(text) else md_escape(text)


# summary.md


def render_summary(model: Model) -> str:
    """The verdict line, the gate table, SHAs and job ids in GitHub-flavoured Markdown."""
    cand = f", candidate {md_code(model.candidate)}" if model.candidate else ""
    lines = [
        f"### kgate verdict: **{model.word}** · {md_escape(model.campaign)} on {md_escape(model.gpu)}{cand}",
        "",
    ]
    if model.sentence:
        lines += [md_escape(model.sentence), ""]
    if model.word == "SMOKE":
        lines += ["> **CPU smoke run:** timings are not meaningful, and a CPU run never yields GO.", ""]
    elif model.cpu:
        lines += ["> **CPU run:** timings are not meaningful (correctness results stand); a CPU run never yields GO.", ""]
    if model.forced:
        would = f" (would be {md_escape(model.would_be)})" if model.would_be else ""
        lines += [f"> **Forced run** past a STOP: never GO{would}.", ""]
    lines += ["| stage | gate | threshold | measured | status |", "|---|---|---|---|---|"]
    for g in model.gates:
        measured = g.value + (f" {g.interval}" if g.interval else "")
        if g.detail and g.status != "pass":
            measured += f" ({_truncate(g.detail, 300)})"
        name = f"**{md_escape(g.name)}**" if g.decisive else md_escape(g.name)
        lines.append(
            f"| {md_escape(g.stage)} | {name} | {md_escape(g.threshold)} | {md_escape(measured)} | "
            f"{md_escape(STATUS_LABELS.get(g.status, g.status))} |"
        )
    for s in model.stages:
        if s.status == "not_run":
            lines.append(f"| {md_escape(s.name)} | — | — | not run: {md_escape(s.why or 'no reason given')} | not run |")
    lines += _profile_tables(model)
    lines += ["", "| commit | SHA | from |", "|---|---|---|"]
    for label, sha, source in model.shas:
        lines.append(f"| {label} | {md_code(sha) if sha else '—'} | {md_escape(source)} |")
    if model.jobs:
        lines += ["", "Jobs: " + " · ".join(f"{md_escape(stage)}: {md_escape(job)}" for stage, job in model.jobs)]
    if model.devices is not None:
        lines += ["", "Across devices (each row from that device class's own records; index.html has every gate "
                  "side by side):", "", "| device class | verdict | candidate | device | decided by |",
                  "|---|---|---|---|---|"]
        for d in model.devices.devices:
            decided = (d.verdict or {}).get("decided_by") or {}
            by = " / ".join(str(decided[k]) for k in ("stage", "gate") if decided.get(k)) or "—"
            name = md_escape(d.gpu) + (" (this report)" if d.current else "")
            lines.append(f"| {name} | {md_escape(d.word or '— (no verdict.json)')} | "
                         f"{md_code(d.candidate) if d.candidate else '—'} | {md_escape(d.describe())} | {md_escape(by)} |")
    lines += ["", f"Report: {md_code(model.links.base + '/index.html')}", ""]
    return "\n".join(lines)


def _profile_tables(model: Model) -> list[str]:
    """The plausibility bound and the pair table as Markdown tables, when those stages have records."""
    from kgate import report_profile

    lines: list[str] = []
    for s in model.stages:
        rows = ((s.record or {}).get("data") or {}).get("rows") if isinstance((s.record or {}).get("data"), Mapping) else None
        if not isinstance(rows, list):
            continue
        if s.name == "profile_baseline":
            cells, title = report_profile.bound_cells(rows), "Plausibility bound (profile_baseline):"
        elif s.name == "profile_candidate":
            cells, title = report_profile.pair_cells(rows), "Pair table (profile_candidate):"
        else:
            continue
        if cells:
            lines += ["", title, "", "| " + " | ".join(md_escape(c) for c in cells[0]) + " |",
                      "|" + "---|" * len(cells[0])]
            lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in cells[1:]]
    return lines


# gates.junit.xml


def render_junit(model: Model) -> str:
    """One <testsuite> per stage, one <testcase> per gate.

    pass -> plain testcase; fail -> <failure>; error -> <error>; stop,
    inconclusive, unavailable and skip -> <skipped>; a stage that did not run
    is one skipped testcase named ``not_run`` carrying the reason.
    """
    order: list[str] = [s.name for s in model.stages]
    for g in model.gates:
        if g.stage not in order:
            order.append(g.stage)
    stages = {s.name: s for s in model.stages}
    root = ET.Element("testsuites", name=clean(f"kgate {model.campaign}/{model.gpu}: {model.word}"))
    totals = Counter()
    for name in order:
        stage = stages.get(name)
        suite = ET.SubElement(root, "testsuite", name=clean(name))
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="verdict", value=model.word)
        if stage is not None:
            ET.SubElement(props, "property", name="status", value=clean(stage.status))
            if stage.record_path:
                ET.SubElement(props, "property", name="record", value=clean(stage.record_path))
        counts = Counter()
        for g in (g for g in model.gates if g.stage == name):
            case = ET.SubElement(suite, "testcase", classname=clean(f"kgate.{name}"), name=clean(g.name), time="0")
            measured = g.value + (f" {g.interval}" if g.interval else "")
            message = f"{g.status}: {measured} (threshold: {g.threshold})"
            evidence = f"evidence: {clean(g.evidence) if g.evidence else '—'}"
            body = "\n".join([message, *([g.detail] if g.detail else []), evidence])
            counts["tests"] += 1
            if g.status == "fail":
                ET.SubElement(case, "failure", message=message, type="fail").text = body
                counts["failures"] += 1
            elif g.status in JUNIT_SKIPPED:
                ET.SubElement(case, "skipped", message=message, type=clean(g.status)).text = body
                counts["skipped"] += 1
            elif g.status != "pass":
                ET.SubElement(case, "error", message=message, type=clean(g.status)).text = body
                counts["errors"] += 1
            else:
                ET.SubElement(case, "system-out").text = body
        if stage is not None and stage.status == "not_run":
            case = ET.SubElement(suite, "testcase", classname=clean(f"kgate.{name}"), name="not_run", time="0")
            ET.SubElement(case, "skipped", message=clean(f"not run: {stage.why or 'no reason given'}"), type="not_run")
            counts["tests"] += 1
            counts["skipped"] += 1
        wall = ((stage.record or {}).get("provenance") or {}).get("wall_s") if stage else None
        suite.set("time", f"{wall:.3f}" if _is_number(wall) else "0")
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
        totals.update(counts)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(totals[key]))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# index.html


def render_html(model: Model) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["short"] = model.links.short
    # stage names may wrap after an underscore in the narrow pipeline boxes
    env.filters["wbr"] = lambda name: Markup("_<wbr>").join(escape(clean(name)).split("_"))
    return env.get_template("report.html.j2").render(
        m=model,
        sections=[_stage_view(s, model.links) for s in model.stages],
        labels=STATUS_LABELS,
        anchors={s.name: s.anchor for s in model.stages},
        hypothesis=clean(model.verdict["hypothesis"]) if model.verdict.get("hypothesis") else None,
    )


def _stage_view(stage: Stage, links: Links) -> dict[str, Any]:
    """What one stage's evidence section shows; the template only lays it out."""
    record = stage.record or {}
    data = record.get("data")
    view: dict[str, Any] = {
        "stage": stage,
        "reasons": [clean(r) for r in record.get("reasons") or []],
        "runs": [],
        "manifest": None,
        "diff": None,
        "ncu": None,
        "model": None,
        "profile": None,
        "pair": None,
        "bench": None,
        "generic": None,
        "provenance": _provenance_rows(record.get("provenance")) if record else [],
        "wall": _wall(record),
    }
    if not isinstance(data, Mapping):
        if data is not None:
            view["generic"] = generic_node(data, ctx=_Ctx(stage.name, links))
        return view
    rest = dict(data)
    # test runs: data.tests itself, or a mapping under data (e.g. data.run) that holds a tests list
    if _is_test_list(rest.get("tests")):
        view["runs"].append(_tests_view("tests", rest.pop("tests"), None, links))
    for key, value in list(rest.items()):
        if isinstance(value, Mapping) and _is_test_list(value.get("tests")):
            view["runs"].append(_tests_view(str(key), value["tests"], value, links))
            del rest[key]
    if isinstance(rest.get("manifest"), Mapping):
        view["manifest"] = [(clean(p), format_value(h)) for p, h in sorted(rest.pop("manifest").items())]
    if isinstance(rest.get("diff"), Mapping):
        view["diff"] = _diff_view(rest.pop("diff"), links)
    if stage.name == "profile_baseline":
        from kgate import report_profile

        view["profile"] = report_profile.baseline_view(rest)
    if stage.name == "profile_candidate":
        from kgate import report_profile

        view["pair"] = report_profile.candidate_view(rest)
    if stage.name == "bench":
        from kgate import report_bench

        view["bench"] = report_bench.view(rest)
    if stage.name == "ncu":
        from kgate import report_ncu

        view["ncu"] = report_ncu.view(rest, links)
    if stage.name == "model" and isinstance(rest.get("workloads"), list):
        from kgate import report_model

        view["model"] = report_model.view(rest, links)
    if rest:
        view["generic"] = generic_node(_fold_large(rest, stage.record_path), ctx=_Ctx(stage.name, links))
    return view


def _fold_large(data: Mapping[str, Any], record_path: str | None) -> dict[str, Any]:
    """``data`` with every value longer than GENERIC_MAX_CHARS as JSON replaced by a line naming its size;
    a mapping that long is folded key by key, so its small parts are still drawn."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        size = len(json.dumps(value, default=str))
        if size <= GENERIC_MAX_CHARS:
            out[key] = value
        elif isinstance(value, Mapping):
            out[key] = _fold_large(value, record_path)
        else:
            count = f"{len(value)} entries, " if isinstance(value, list) else ""
            out[key] = f"{count}{size / 1000:,.0f} kB of JSON: not drawn here, kept in {record_path or 'the record'}"
    return out


_PYTEST_E = re.compile(r"^E(?: |$)")
_PYTEST_WHERE = re.compile(r"^\S+:\d+: [A-Za-z_][\w.]*$")


def error_lines(message: str) -> str:
    """The exception of a pytest failure message: its ``E`` lines and the ``file:line: Type`` line after them.

    "" when the message has no ``E`` lines (then the whole message is the error).
    """
    lines = message.splitlines()
    picked = [i for i, line in enumerate(lines) if _PYTEST_E.match(line)]
    if not picked:
        return ""
    body = textwrap.dedent("\n".join(lines[i][1:] for i in picked)).strip("\n")
    where = next((lines[i].strip() for i in range(picked[-1] + 1, len(lines)) if lines[i].strip()), "")
    return body + ("\n" + where if _PYTEST_WHERE.match(where) else "")


def _wall(record: Mapping[str, Any]) -> str:
    wall = (record.get("provenance") or {}).get("wall_s")
    return f"{wall:.1f} s" if _is_number(wall) else ""


def _is_test_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(t, Mapping) and "nodeid" in t for t in value)


# facts of a test run shown in its heading; the rest of the run goes to a collapsed table
RUN_FACTS = ("summary", "exit_code", "wall_s", "timed_out", "crashed", "command", "log", "junit", "outcomes")


def _tests_view(key: str, tests: list[Mapping[str, Any]], run: Mapping[str, Any] | None, links: Links) -> dict[str, Any]:
    counts = Counter(str(t.get("outcome", "unknown")) for t in tests)
    ordered = sorted(counts, key=lambda o: (OUTCOME_ORDER.index(o) if o in OUTCOME_ORDER else len(OUTCOME_ORDER), o))
    failures = [t for t in tests if t.get("outcome") in FAILED_OUTCOMES]
    others = [t for t in tests if t.get("outcome") not in FAILED_OUTCOMES]

    def row(t: Mapping[str, Any]) -> dict[str, Any]:
        duration = t.get("duration_s")
        message = clean(t.get("message") or "")
        return {
            "nodeid": clean(t.get("nodeid", "")),
            "outcome": clean(t.get("outcome", "unknown")),
            "duration": f"{duration:.2f} s" if _is_number(duration) else "—",
            "message": message,
            "error": error_lines(message),
            "lines": message.count("\n") + 1,
        }

    facts: list[tuple[str, Node]] = []
    more = None
    if run is not None:
        ctx = _Ctx(key, links)
        facts = [(k, generic_node(run[k], key=k, ctx=ctx)) for k in RUN_FACTS if k in run]
        # the collected ids repeat the test table
        rest = {k: v for k, v in run.items() if k not in RUN_FACTS and k not in ("tests", "collected")}
        more = generic_node(rest, ctx=ctx) if rest else None
    return {
        "key": clean(key),
        "total": len(tests),
        "total_s": sum(t.get("duration_s") for t in tests if _is_number(t.get("duration_s"))),
        "counts": [(clean(o), counts[o]) for o in ordered],
        "failures": [row(t) for t in failures],
        "others": [row(t) for t in others],
        "facts": facts,
        "more": more,
    }


def _diff_view(diff: Mapping[str, Any], links: Links) -> dict[str, Any]:
    files = [f for f in diff.get("files") or [] if isinstance(f, Mapping)]
    known = ("path", "status", "added", "removed")
    extra: list[str] = []
    for f in files:
        extra += [k for k in f if k not in known and k not in extra]
    rows = [
        {
            "path": clean(f.get("path", "")),
            "status": clean(f.get("status", "")),
            "added": format_value(f.get("added")),
            "removed": format_value(f.get("removed")),
            "extra": [format_value(f.get(k)) for k in extra],
        }
        for f in files
    ]
    functions = diff.get("changed_functions") or []
    rest = {k: v for k, v in diff.items() if k not in ("files", "changed_functions", "patch_path")}
    return {
        "files": rows,
        "extra": [clean(k) for k in extra],
        "added": sum(f.get("added") for f in files if _is_number(f.get("added"))),
        "removed": sum(f.get("removed") for f in files if _is_number(f.get("removed"))),
        "functions": [format_value(fn) for fn in functions] if isinstance(functions, list) else [format_value(functions)],
        "patch": links.short(diff["patch_path"]) if diff.get("patch_path") else None,
        "patch_href": links.href(diff.get("patch_path")),
        "generic": generic_node(rest, ctx=_Ctx("diff", links)) if rest else None,
    }


def _provenance_rows(prov: Any) -> list[tuple[str, str]]:
    """(label, text) rows; keys this list does not know are appended as they are."""
    if not isinstance(prov, Mapping):
        return []
    rows: list[tuple[str, str]] = []
    shown = set()

    def add(label: str, text: Any, *keys: str) -> None:
        shown.update(keys)
        if text not in (None, "", [], {}):
            rows.append((label, clean(text)))

    add("host", prov.get("host"), "host")
    wall = prov.get("wall_s")
    add("wall time", f"{wall:.1f} s" if _is_number(wall) else wall, "wall_s")
    span = " → ".join(str(prov[k]) for k in ("started_utc", "finished_utc") if prov.get(k))
    add("started → finished (UTC)", span, "started_utc", "finished_utc")
    slurm = prov.get("slurm") if isinstance(prov.get("slurm"), Mapping) else {}
    job, node = slurm.get("job_id"), f" on {slurm['node']}" if slurm.get("node") else ""
    local = " (local rule)" if prov.get("local_rule") else ""
    add("slurm job", f"{job}{node}{local}" if job not in (None, "") else f"none: ran locally{local}", "slurm", "local_rule")
    device = prov.get("device")
    if isinstance(device, Mapping):
        parts = [str(device.get("class") or "?"), *describe_device({**device, "name": device.get("name") or ""})]
        if device.get("uuid"):
            parts.append(f"uuid {device['uuid']}")
        known = ("class", "name", "capability", "uuid", "driver", "interpreter")
        extra = {k: v for k, v in device.items() if k not in known}
        if extra:
            parts.append(_compact(extra))
        add("device", " · ".join(p for p in parts if p), "device")
    else:
        add("device", device, "device")
    add("python", prov.get("python"), "python")
    versions = prov.get("versions")
    if isinstance(versions, Mapping):
        versions = " · ".join(f"{k} {format_value(v)}" for k, v in versions.items())
    add("versions", versions, "versions")
    for group in ("git", "env"):
        value = prov.get(group)
        if isinstance(value, Mapping):
            shown.add(group)
            for k, v in value.items():
                add(f"{group} {k}", v if isinstance(v, str) or v is None else _compact(v))
    command = prov.get("command")
    add("command", shlex.join(str(c) for c in command) if isinstance(command, list) else command, "command")
    for k, v in prov.items():
        if k not in shown:
            add(k, v if isinstance(v, str) or _is_number(v) else _compact(v), k)
    return rows


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


# generic rendering of data this module does not know


@dataclass(frozen=True)
class _Ctx:
    """Where a generic value sits: the plot title prefix and how to link paths."""

    title: str
    links: Links | None = None


@dataclass(frozen=True)
class Node:
    """A piece of generic evidence: kind is scalar, pre, link, map, table, list, details or plot."""

    kind: str
    text: str = ""
    href: str | None = None
    items: list[tuple[str, Node]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    hidden: int = 0
    svg: Markup | None = None
    children: list[Node] = field(default_factory=list)


# keys whose string value is a path to evidence: shown as a link
PATH_KEYS = ("log", "junit", "outcomes", "evidence", "record", "patch", "manifest")
# keys ending in _path that name no file (a Python module's import path)
NOT_PATH_KEYS = ("import_path",)
COMMAND_KEYS = ("command", "cmd", "argv")
LONG_LIST = 8
LONG_TEXT_LINES = 15


def generic_node(
    value: Any,
    *,
    key: str = "",
    ctx: _Ctx | None = None,
    depth: int = 0,
    plots: bool = True,
    band: tuple[float, float] | None = None,
) -> Node:
    """Turn any JSON value into nodes: scalars, tables of scalars, nested tables, and plots of numeric series.

    Plots are added beside the table of the same numbers when the value is
    a list of >= 3 numbers, a mapping of names to lists of numbers (one
    series each), a list of rows with ``ratio`` and an interval (interval
    plot; a sibling ``same_band: [lo, hi]`` draws the band), or numbers keyed
    by a unit suffix such as ``_ms`` (bar chart). ``plots=False`` lists
    numbers that a parent's plot already draws. Long lists and texts fold
    into a collapsed block; a path under a key such as ``log`` or
    ``*_path`` becomes a link; a command list is shown as one shell line.
    """
    ctx = ctx or _Ctx("")
    label = f"{ctx.title}: {key}" if ctx.title and key else (ctx.title or key or "value")
    if depth > MAX_DEPTH:
        return Node("pre", text=clean(json.dumps(value, ensure_ascii=False, sort_keys=True, indent=1)))
    if value is None or isinstance(value, (bool, int, float)):
        return Node("scalar", text=format_value(value))
    if isinstance(value, str):
        return _text_node(value, key, ctx)
    if isinstance(value, Mapping):
        if not value:
            return Node("scalar", text="(empty)")
        plot = _mapping_plot(value, key, label) if plots else None
        sibling_band = _band_of(value.get("same_band", value.get("band")))
        # numbers already drawn in the mapping's plot are listed, not drawn again
        items = [
            (clean(k), generic_node(v, key=str(k), ctx=ctx, depth=depth + 1, plots=plot is None, band=sibling_band))
            for k, v in value.items()
        ]
        node = Node("map", items=items)
        return Node("list", children=[plot, node]) if plot else node
    if isinstance(value, Sequence):
        return _sequence_node(list(value), key, label, ctx, depth, plots, band)
    return Node("scalar", text=clean(repr(value)))


def _text_node(value: str, key: str, ctx: _Ctx) -> Node:
    text = clean(value)
    lowered = key.lower()
    is_path = lowered in PATH_KEYS or (lowered.endswith("_path") and lowered not in NOT_PATH_KEYS)
    if is_path and ctx.links is not None and text and "\n" not in text and len(text) < 1000:
        return Node("link", text=ctx.links.short(text), href=ctx.links.href(text))
    lines = text.count("\n") + 1
    if lines > LONG_TEXT_LINES:
        return Node("details", text=f"{lines} lines", children=[Node("pre", text=text)])
    return Node("pre" if "\n" in text or len(text) > 160 else "scalar", text=text)


def _sequence_node(
    items: list[Any], key: str, label: str, ctx: _Ctx, depth: int, plots: bool, band: tuple[float, float] | None
) -> Node:
    if not items:
        return Node("scalar", text="(empty)")
    hidden = max(0, len(items) - MAX_TABLE_ROWS)
    if all(_is_number(v) for v in items):
        text = ", ".join(format_value(v) for v in items[:MAX_TABLE_ROWS]) + (f", … ({hidden} more)" if hidden else "")
        scalar = Node("scalar", text=text)
        if plots and len(items) >= 3:
            plot = svg_series_plot({key or "value": items}, _unit_label(key) or key or "value", title=label)
            return Node("list", children=[Node("plot", svg=plot), scalar])
        return scalar
    if all(v is None or isinstance(v, (str, bool, int, float)) for v in items):
        if key.lower() in COMMAND_KEYS and all(isinstance(v, str) for v in items):
            return Node("pre", text=clean(shlex.join(items)))
        if len(items) <= LONG_LIST and all(len(format_value(v)) <= 40 for v in items):
            return Node("scalar", text=", ".join(format_value(v) for v in items))
        listed = Node("list", children=[generic_node(v, key=key, ctx=ctx, depth=depth + 1) for v in items[:MAX_TABLE_ROWS]],
                      hidden=hidden)
        return Node("details", text=f"{len(items)} items", children=[listed]) if len(items) > LONG_LIST else listed
    if all(isinstance(v, Mapping) for v in items):
        return _table_node(items, label, band if plots else None, plots)
    listed = Node("list", children=[generic_node(v, key=key, ctx=ctx, depth=depth + 1) for v in items[:MAX_TABLE_ROWS]],
                  hidden=hidden)
    return Node("details", text=f"{len(items)} items", children=[listed]) if len(items) > LONG_LIST else listed


def _table_node(items: list[Mapping[str, Any]], label: str, band: tuple[float, float] | None, plots: bool) -> Node:
    columns: list[str] = []
    for row in items:
        columns += [str(k) for k in row if str(k) not in columns]
    rows = []
    for row in items[:MAX_TABLE_ROWS]:
        cells = []
        for col in columns:
            v = row.get(col)
            if col not in row:
                cells.append("")
            elif isinstance(v, (Mapping, list)):
                cells.append(clean(_compact(v)))
            else:
                cells.append(format_value(v))
        rows.append(cells)
    table = Node("table", columns=[clean(c) for c in columns], rows=rows, hidden=max(0, len(items) - MAX_TABLE_ROWS))
    drawn = [_interval_rows_plot(items, band, label), _rows_bar_plot(items, label)] if plots else []
    drawn = [p for p in drawn if p is not None]
    if len(items) > LONG_LIST * 3 and not drawn:
        return Node("details", text=f"{len(items)} rows", children=[table])
    return Node("list", children=[*drawn, table]) if drawn else table


def _unit_of(key: str) -> str | None:
    for suffix, unit in UNIT_SUFFIXES.items():
        if key.lower().endswith(suffix):
            return unit
    return None


def _unit_label(key: str) -> str:
    unit = _unit_of(key)
    return f"{key} ({unit})" if unit else key


def _row_label(row: Mapping[str, Any], index: int) -> str:
    for k in LABEL_KEYS:
        if isinstance(row.get(k), (str, int)) and not isinstance(row.get(k), bool):
            return str(row[k])
    return f"#{index + 1}"


def _interval_of(row: Mapping[str, Any]) -> tuple[float | None, float | None]:
    for k in ("interval", "ci"):
        iv = row.get(k)
        if isinstance(iv, Sequence) and not isinstance(iv, str) and len(iv) == 2 and all(_is_number(x) for x in iv):
            return float(iv[0]), float(iv[1])
        if isinstance(iv, Mapping) and _is_number(iv.get("lo")) and _is_number(iv.get("hi")):
            return float(iv["lo"]), float(iv["hi"])
    for lo_key, hi_key in (("lo", "hi"), ("ci_lo", "ci_hi"), ("low", "high")):
        if _is_number(row.get(lo_key)) and _is_number(row.get(hi_key)):
            return float(row[lo_key]), float(row[hi_key])
    return None, None


def _band_of(value: Any) -> tuple[float, float] | None:
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2 and all(_is_number(x) for x in value):
        return float(value[0]), float(value[1])
    return None


def _interval_rows_plot(items: Sequence[Mapping[str, Any]], band: tuple[float, float] | None, label: str) -> Node | None:
    rows = []
    for i, row in enumerate(items):
        if not _is_number(row.get("ratio")):
            return None
        lo, hi = _interval_of(row)
        rows.append((_row_label(row, i), float(row["ratio"]), lo, hi))
    if not rows:
        return None
    return Node("plot", svg=svg_interval_plot(rows, band=band, title=label))


def _rows_bar_plot(items: Sequence[Mapping[str, Any]], label: str) -> Node | None:
    """Rows with a label and numeric columns of one unit (e.g. baseline_ms, candidate_ms) -> bar chart."""
    if len(items) < 2 or any(_row_label(r, i).startswith("#") for i, r in enumerate(items)):
        return None
    numeric = [k for k in items[0] if _is_number(items[0][k]) and _unit_of(str(k))]
    units = {_unit_of(str(k)) for k in numeric}
    if not numeric or len(units) != 1:
        return None
    series = {str(k): [float(r[k]) if _is_number(r.get(k)) else math.nan for r in items] for k in numeric}
    # all zeros (e.g. no spills anywhere) says nothing a table does not
    if not any(v for vals in series.values() for v in vals if math.isfinite(v)):
        return None
    labels = [_row_label(r, i) for i, r in enumerate(items)]
    return Node("plot", svg=svg_bar_chart(labels, series, units.pop() or "", title=label))


def _mapping_plot(value: Mapping[str, Any], key: str, label: str) -> Node | None:
    values = list(value.values())
    if not values:
        return None
    # {arm: [per-round numbers]} -> one series per arm
    if all(isinstance(v, list) and len(v) >= 2 and all(_is_number(x) for x in v) for v in values):
        series = {str(k): v for k, v in value.items()}
        return Node("plot", svg=svg_series_plot(series, _unit_label(key) or "value", title=label))
    # {kernel: time} under a key with a unit suffix -> bar chart
    unit = _unit_of(key)
    if unit and len(values) >= 2 and all(_is_number(v) for v in values) and any(values):
        return Node("plot", svg=svg_bar_chart([str(k) for k in value], {key: [float(v) for v in values]}, unit, title=label))
    return None


# SVG plots: pure functions returning markup; every text is escaped here


def _f(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, text: Any, cls: str = "pl", *, anchor: str = "", fill: str = "", limit: int = 0) -> str:
    """One escaped <text> element; ``limit`` truncates long labels."""
    body = clean(text)
    body = _truncate(body, limit) if limit else body
    extra = (f' text-anchor="{anchor}"' if anchor else "") + (f' fill="{fill}"' if fill else "")
    return f'<text x="{_f(x)}" y="{_f(y)}" class="{cls}"{extra}>{escape(body)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, attrs: str = 'class="grid"') -> str:
    return f'<line x1="{_f(x1)}" y1="{_f(y1)}" x2="{_f(x2)}" y2="{_f(y2)}" {attrs}/>'


def _svg_open(width: int, height: int, title: str, desc: str) -> str:
    # the first <title> and <desc> children are the plot's accessible name and text alternative
    return (
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img"><title>{escape(clean(title))}</title><desc>{escape(clean(desc))}</desc>'
        + _text(width / 2, 18, title, "pt", anchor="middle", limit=90)
    )


def _truncate(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 2.5, 5 x 10^k steps), about ``count`` of them."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    # the round step whose tick count is closest to the one asked for
    step = min((m * mag for m in (1, 2, 2.5, 5, 10)), key=lambda st: abs((hi - lo) / st - count))
    ticks = []
    t = math.ceil(lo / step - 1e-9) * step
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _padded(values: Iterable[float], pad: float = 0.06) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    if hi == lo:
        spread = abs(lo) * 0.05 or 0.5
        return lo - spread, hi + spread
    span = hi - lo
    return lo - span * pad, hi + span * pad


def _label_width(labels: Iterable[str]) -> int:
    longest = max((len(label) for label in labels), default=4)
    return min(320, max(60, 8 * min(longest, 40) + 16))


def svg_interval_plot(
    rows: Sequence[tuple[str, float, float | None, float | None]],
    ref: float = 1.0,
    band: tuple[float, float] | None = None,
    *,
    title: str = "Ratio per row with its interval",
    x_label: str = "ratio (baseline time / candidate time)",
    higher_is_better: bool = True,
) -> Markup:
    """A forest plot: one row per (label, point, lo, hi), a reference line at ``ref`` and a SAME band.

    A row whose interval lies inside the band is SAME, above it FAST (below it
    SLOW) when ``higher_is_better``, and AMBIGUOUS when the interval crosses a
    band edge. The class is written beside each row, not only coloured.
    """
    rows = [(str(label), float(p), lo, hi) for label, p, lo, hi in rows if _is_number(p) and math.isfinite(p)]
    width, right, top, row_h = 760, 190, 44, 24
    height = top + max(len(rows), 1) * row_h + 52
    plot_bottom = top + max(len(rows), 1) * row_h
    lo_x, hi_x = _padded([ref, *(v for r in rows for v in r[1:] if _is_number(v)), *(band or ())])
    x0, x1 = _label_width(r[0] for r in rows), width - right

    def sx(v: float) -> float:
        return x0 + (v - lo_x) / (hi_x - lo_x) * (x1 - x0)

    def classify(p: float, lo: float | None, hi: float | None) -> str:
        if band is None:
            return ""
        lo, hi = (p if lo is None else lo), (p if hi is None else hi)
        if band[0] <= lo and hi <= band[1]:
            return "SAME"
        if lo > band[1]:
            return "FAST" if higher_is_better else "SLOW"
        if hi < band[0]:
            return "SLOW" if higher_is_better else "FAST"
        return "AMBIGUOUS"

    colours = {"SAME": "#57606a", "FAST": "#1a7f37", "SLOW": "#c62828", "AMBIGUOUS": "#b35c00", "": "#0072B2"}
    values = []
    for _, p, lo, hi in rows:
        iv = f" [{format_number(lo)}, {format_number(hi)}]" if _is_number(lo) and _is_number(hi) else ""
        cls = classify(p, lo, hi)
        values.append(f"{format_number(p)}{iv}{' ' + cls if cls else ''}")
    desc = f"{x_label}; reference line at {format_number(ref)}"
    if band:
        desc += f"; SAME band [{format_number(band[0])}, {format_number(band[1])}]"
    desc += ". " + ("; ".join(f"{r[0]}: {v}" for r, v in zip(rows, values)) if rows else "no rows")
    out = [_svg_open(width, height, title, desc)]
    if band:
        bx0, bx1 = sx(band[0]), sx(band[1])
        out.append(f'<rect x="{_f(bx0)}" y="{top}" width="{_f(bx1 - bx0)}" height="{plot_bottom - top}" fill="#e8ecef"/>')
        out.append(_text((bx0 + bx1) / 2, top - 4, "SAME band", anchor="middle"))
    for t in nice_ticks(lo_x, hi_x, 6):
        out.append(_line(sx(t), top, sx(t), plot_bottom))
        out.append(_text(sx(t), plot_bottom + 16, format_number(t), anchor="middle"))
    out.append(_line(sx(ref), top - 2, sx(ref), plot_bottom, 'stroke="#24292f" stroke-dasharray="4 3"'))
    for i, ((label, p, lo, hi), value) in enumerate(zip(rows, values)):
        y = top + i * row_h + row_h / 2
        colour = colours[classify(p, lo, hi)]
        stroke = f'stroke="{colour}" stroke-width="2"'
        out.append(f"<g><title>{escape(clean(f'{label}: {value}'))}</title>")
        out.append(_text(x0 - 8, y + 4, label, anchor="end", limit=40))
        if _is_number(lo) and _is_number(hi):
            out.append(_line(sx(lo), y, sx(hi), y, stroke))
            out += [_line(e, y - 5, e, y + 5, stroke) for e in (sx(lo), sx(hi))]
        out.append(f'<circle cx="{_f(sx(p))}" cy="{_f(y)}" r="4.5" fill="{colour}"/>')
        out.append(_text(x1 + 10, y + 4, value, fill=colour, limit=30) + "</g>")
    if not rows:
        out.append(_text((x0 + x1) / 2, top + 16, "no rows", anchor="middle"))
    out.append(_text((x0 + x1) / 2, height - 8, x_label, "pa", anchor="middle"))
    out.append("</svg>")
    return Markup("".join(out))


def _drift(values: Sequence[float]) -> float | None:
    """Least-squares slope per round relative to the median, or None for < 3 points."""
    pts = [(i, v) for i, v in enumerate(values) if math.isfinite(v)]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(i for i, _ in pts) / n
    my = sum(v for _, v in pts) / n
    sxx = sum((i - mx) ** 2 for i, _ in pts)
    slope = sum((i - mx) * (v - my) for i, v in pts) / sxx
    med = statistics.median(v for _, v in pts)
    return slope / med if med else None


def svg_series_plot(
    series: Mapping[str, Sequence[float]],
    y_label: str,
    *,
    title: str = "Per-round times per arm",
    x_label: str = "round",
) -> Markup:
    """Lines of per-round values, one per arm, so drift over rounds is visible.

    The legend gives each series' median and its drift (least-squares slope
    per round, relative to the median).
    """
    arms = {str(k): [float(v) if _is_number(v) else math.nan for v in vals] for k, vals in series.items()}
    width, height, left, right, top, bottom = 760, 300, 70, 200, 34, 46
    n = max((len(v) for v in arms.values()), default=0)
    lo_y, hi_y = _padded(v for vals in arms.values() for v in vals)
    x0, x1, y0, y1 = left, width - right, height - bottom, top

    def sx(i: int) -> float:
        return x0 + (i / (n - 1) if n > 1 else 0.5) * (x1 - x0)

    def sy(v: float) -> float:
        return y0 - (v - lo_y) / (hi_y - lo_y) * (y0 - y1)

    stats = []
    for vals in arms.values():
        finite = [v for v in vals if math.isfinite(v)]
        stats.append((statistics.median(finite) if finite else math.nan, _drift(vals)))
    desc = f"{y_label} by {x_label}. " + "; ".join(
        f"{name}: {', '.join(format_number(v) for v in vals[:50])}{' …' if len(vals) > 50 else ''}"
        f" (median {format_number(med)}{f', drift {d:+.2%} per {x_label}' if d is not None else ''})"
        for (name, vals), (med, d) in zip(arms.items(), stats)
    )
    out = [_svg_open(width, height, title, desc)]
    for t in nice_ticks(lo_y, hi_y, 5):
        out.append(_line(x0, sy(t), x1, sy(t)))
        out.append(_text(x0 - 6, sy(t) + 4, format_number(t), anchor="end"))
    for i in range(0, n, max(1, math.ceil(n / 12))):
        out.append(_text(sx(i), y0 + 16, i + 1, anchor="middle"))
    out.append(_line(x0, y0, x1, y0, 'stroke="#57606a"'))
    for k, ((name, vals), (med, drift)) in enumerate(zip(arms.items(), stats)):
        colour = PALETTE[k % len(PALETTE)]
        pts = [(sx(i), sy(v)) for i, v in enumerate(vals) if math.isfinite(v)]
        if len(pts) > 1:
            path = " ".join(f"{_f(x)},{_f(y)}" for x, y in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.8"/>')
        # alternate marker shapes so arms differ without colour too
        for x, y in pts:
            if k % 2 == 0:
                out.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="3" fill="{colour}"/>')
            else:
                out.append(f'<rect x="{_f(x - 3)}" y="{_f(y - 3)}" width="6" height="6" fill="{colour}"/>')
        ly = top + 8 + k * 46
        out.append(f'<rect x="{x1 + 14}" y="{ly - 8}" width="10" height="10" fill="{colour}"/>')
        out.append(_text(x1 + 30, ly + 1, name, limit=24))
        out.append(_text(x1 + 30, ly + 15, f"median {format_number(med)}", "ps"))
        if drift is not None:
            out.append(_text(x1 + 30, ly + 29, f"drift {drift:+.2%} per {_truncate(x_label, 12)}", "ps"))
    if n == 0:
        out.append(_text((x0 + x1) / 2, (y0 + y1) / 2, "no values", anchor="middle"))
    out.append(_text((x0 + x1) / 2, height - 8, x_label, "pa", anchor="middle"))
    out.append(
        f'<text transform="translate(14 {_f((y0 + y1) / 2)}) rotate(-90)" text-anchor="middle" class="pa">'
        f"{escape(_truncate(clean(y_label), 40))}</text>"
    )
    out.append("</svg>")
    return Markup("".join(out))


def svg_bar_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    unit: str,
    *,
    title: str = "Per-kernel time",
) -> Markup:
    """Horizontal bars: one group per label (e.g. a kernel), one bar per series (e.g. an arm), value in ``unit``."""
    labels = [str(label) for label in labels]
    values = {str(k): [float(v) if _is_number(v) else math.nan for v in vals] for k, vals in series.items()}
    names = list(values)
    bar_h, gap = 14, 10
    group_h = bar_h * max(len(names), 1) + gap
    width, right, top = 760, 90, 34 + (20 if len(names) > 1 else 0)
    plot_bottom = top + max(len(labels), 1) * group_h
    height = plot_bottom + 44
    x0, x1 = _label_width(labels), width - right
    finite = [v for vals in values.values() for v in vals if math.isfinite(v)]
    lo, hi = min([0.0, *finite]), max([0.0, *finite]) or 1.0
    ticks = nice_ticks(lo, hi, 5)
    hi = max(hi, ticks[-1])

    def sx(v: float) -> float:
        return x0 + (v - lo) / (hi - lo) * (x1 - x0)

    def value(name: str, i: int) -> float:
        return values[name][i] if i < len(values[name]) else math.nan

    desc = f"{unit} per label. " + "; ".join(
        f"{label}: " + ", ".join(f"{name} {format_number(value(name, i))}" for name in names) for i, label in enumerate(labels)
    )
    out = [_svg_open(width, height, title, desc)]
    if len(names) > 1:
        for k, name in enumerate(names):
            out.append(f'<rect x="{x0 + k * 150}" y="{top - 22}" width="10" height="10" fill="{PALETTE[k % len(PALETTE)]}"/>')
            out.append(_text(x0 + k * 150 + 14, top - 13, name, limit=18))
    for t in ticks:
        out.append(_line(sx(t), top, sx(t), plot_bottom))
        out.append(_text(sx(t), plot_bottom + 16, format_number(t), anchor="middle"))
    for i, label in enumerate(labels):
        gy = top + i * group_h
        out.append(f"<g><title>{escape(clean(label))}</title>")
        out.append(_text(x0 - 8, gy + group_h / 2, label, anchor="end", limit=40))
        for k, name in enumerate(names):
            v, y = value(name, i), gy + k * bar_h
            if math.isfinite(v):
                a, b = sorted((sx(0), sx(v)))
                out.append(
                    f'<rect x="{_f(a)}" y="{_f(y)}" width="{_f(max(b - a, 0.5))}" height="{bar_h - 2}" '
                    f'fill="{PALETTE[k % len(PALETTE)]}"/>'
                )
                out.append(_text(b + 4, y + bar_h - 4, format_number(v), "ps"))
            else:
                out.append(_text(sx(0) + 4, y + bar_h - 4, "n/a", "ps"))
        out.append("</g>")
    out.append(_line(sx(0), top, sx(0), plot_bottom, 'stroke="#57606a"'))
    out.append(_text((x0 + x1) / 2, height - 8, unit, "pa", anchor="middle"))
    out.append("</svg>")
    return Markup("".join(out))
