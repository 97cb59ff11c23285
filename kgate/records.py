"""Stage records: JSON with a schema version, written atomically.

Every stage writes exactly one record (see docs/architecture.md); the report
writes the verdict. Every file goes through ``atomic_write_text``: the user's
umask, fsynced, renamed into place. The readers here (``read_record``, ``read_verdict``) are
the only ones: they check the schema version and raise ``FormatVersionError``
on an unknown one, ``IncompleteData`` on a missing or torn file.
"""

from __future__ import annotations

import calendar
import errno
import json
import os
import secrets
import time
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
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, never a torn one.

    Method: the text goes to a new temporary file beside ``path`` (same folder,
    so the rename cannot cross filesystems), created with ``os.open(...,
    O_CREAT | O_EXCL, 0o666)``: the kernel applies the process umask (and a
    folder's default ACL), so the file gets the mode any ``open(path, "w")``
    would, 0644 under umask 022, 0600 under 077; nothing reads or changes the
    process-wide umask. The file is flushed and fsynced, renamed over ``path``
    (``os.replace``, atomic on POSIX) and the folder fsynced, so the rename
    survives a crash. On any error the temporary file is removed. Limits: the
    folder sync is skipped on a filesystem that does not support syncing a
    folder (EINVAL/ENOTSUP), where the rename is as durable as that filesystem
    makes it; a replaced file takes the new file's mode, not the old one's.
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def _create_beside(path: Path) -> tuple[int, Path]:
    """A new, exclusively created ``.<name>.<random>.tmp`` in ``path``'s folder, mode 0o666 less the umask."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name} after 100 tries")


def _fsync_dir(folder: Path) -> None:
    """fsync a folder, so a rename in it is on disk; a filesystem that cannot sync folders is left as it is."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """:func:`atomic_write_text`'s method for bytes (the text is UTF-8 encoded first; e.g. an NVBench sample-times
    file is written as it is): umask, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_beside(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON with :func:`atomic_write_text` (the user's umask, fsynced, atomic)."""
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


def read_versioned(path: Path | str, schema: str, what: str) -> dict[str, Any]:
    """Read a JSON file of kgate's, checking that it carries ``schema``; ``what`` names it in errors."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise IncompleteData(f"{what} {p} is missing") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise IncompleteData(f"{what} {p} is truncated or corrupt (not valid JSON: {exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != schema:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise FormatVersionError(f"{what} {p} has schema {got!r}, expected {schema}")
    return data


def read_record(path: Path | str) -> dict[str, Any]:
    """Read a stage record, checking its schema version."""
    return read_versioned(path, STAGE_SCHEMA, "record")


def read_verdict(path: Path | str) -> dict[str, Any]:
    """Read a verdict (``verdict.json``, written by ``kgate report``), checking its schema version."""
    return read_versioned(path, VERDICT_SCHEMA, "verdict")


def first_provenance(records: Any, key: str) -> dict[str, Any]:
    """The first record's ``provenance[key]`` that is a mapping (e.g. ``device``, ``versions``); {} if none."""
    for record in records:
        value = (record.get("provenance") or {}).get(key)
        if isinstance(value, dict):
            return dict(value)
    return {}


@dataclass(frozen=True, slots=True)
class StageTimes:
    """A record's own clock (provenance): wall seconds, start and finish as POSIX seconds (None when absent)."""

    wall_s: float | None
    started: float | None
    finished: float | None


def _utc_seconds(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def stage_times(record: Any) -> StageTimes:
    """``provenance.wall_s`` (else finished - started) and the ``started_utc``/``finished_utc`` stamps."""
    prov = (record.get("provenance") if isinstance(record, dict) else None) or {}
    started, finished = _utc_seconds(prov.get("started_utc")), _utc_seconds(prov.get("finished_utc"))
    wall = prov.get("wall_s")
    if isinstance(wall, (int, float)) and not isinstance(wall, bool) and wall >= 0:
        wall_s: float | None = float(wall)
    elif started is not None and finished is not None:
        wall_s = finished - started
    else:
        wall_s = None
    return StageTimes(wall_s, started, finished)

