"""Stage records: JSON with a schema version, written atomically.

Every stage writes exactly one record (see docs/architecture.md); the report
writes the verdict. The readers here (``read_record``, ``read_verdict``) are
the only ones: they check the schema version and raise ``FormatVersionError``
on an unknown one, ``IncompleteData`` on a missing or torn file.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kgate.errors import FormatVersionError, IncompleteData

STAGE_SCHEMA = "kgate.stage/1"
VERDICT_SCHEMA = "kgate.verdict/1"
STATUSES = ("pass", "fail", "stop", "skip", "unavailable", "inconclusive", "error")


@dataclass(frozen=True, slots=True)
class Gate:
    """One gate row: what was required, what was measured, and the evidence."""

    name: str
    threshold: str
    value: Any
    status: str
    evidence: str | None = None
    interval: tuple[float, float] | None = None
    unit: str | None = None
    detail: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"gate {self.name}: unknown status {self.status!r}")


@dataclass(frozen=True, slots=True)
class StageResult:
    """What a stage hands to ``build_record``: status follows from the gates."""

    gates: list[Gate]
    data: dict[str, Any] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        """The worst gate status, in the order fail > stop > inconclusive > unavailable > pass/skip."""
        order = ["fail", "stop", "inconclusive", "unavailable"]
        statuses = {g.status for g in self.gates}
        for s in order:
            if s in statuses:
                return s
        return "pass"


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename (no torn files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def build_record(*, stage: str, campaign: str, gpu: str, candidate: str | None,
                 result: StageResult, provenance: dict[str, Any],
                 epoch: dict[str, Any] | None = None) -> dict[str, Any]:
    reasons = list(result.reasons)
    for g in result.gates:
        if g.status not in ("pass", "skip") and g.detail:
            reasons.append(f"{g.name}: {g.detail}")
    return {
        "schema": STAGE_SCHEMA,
        "stage": stage,
        "campaign": campaign,
        "gpu": gpu,
        "candidate": candidate,
        "epoch": epoch,
        "status": result.status,
        "reasons": reasons,
        "gates": [_gate_dict(g) for g in result.gates],
        "data": result.data,
        "provenance": provenance,
    }


def _gate_dict(g: Gate) -> dict[str, Any]:
    d = asdict(g)
    d["interval"] = list(g.interval) if g.interval is not None else None
    return d


def _read_versioned(path: Path | str, schema: str, what: str) -> dict[str, Any]:
    """Read a JSON file of kgate's, checking that it carries ``schema``; ``what`` names it in errors."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise IncompleteData(f"{what} {p} is missing") from exc
    except json.JSONDecodeError as exc:
        raise IncompleteData(f"{what} {p} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != schema:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise FormatVersionError(f"{what} {p} has schema {got!r}, expected {schema}")
    return data


def read_record(path: Path | str) -> dict[str, Any]:
    """Read a stage record, checking its schema version."""
    return _read_versioned(path, STAGE_SCHEMA, "record")


def read_verdict(path: Path | str) -> dict[str, Any]:
    """Read a verdict (``verdict.json``, written by ``kgate report``), checking its schema version."""
    return _read_versioned(path, VERDICT_SCHEMA, "verdict")


def first_provenance(records: Any, key: str) -> dict[str, Any]:
    """The first record's ``provenance[key]`` that is a mapping (e.g. ``device``, ``versions``); {} if none."""
    for record in records:
        value = (record.get("provenance") or {}).get(key)
        if isinstance(value, dict):
            return dict(value)
    return {}
