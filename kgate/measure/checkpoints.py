"""Append-only round checkpoints: a killed stage resumes at its last finished round (bench, model).

Method: a checkpoint is a JSON-lines file; its first line is a header holding
``run_key(parts)`` (sha256 over the sorted JSON of everything the rounds
depend on: commits, rows or settings, samples, inputs, device) and the parts
themselves; every further line is one finished round, written with an fsync
before the next starts (``append_line``). ``resume`` keeps the rounds recorded
under the same key (``load_checkpoint``): a torn last line (a kill while
writing) is dropped and the file rewritten without it; a checkpoint of another
setup is renamed aside (``rounds.stale-<time>.jsonl``) and a fresh one begun.
Limits: a malformed line before the last, or round indices not 0..n-1, is an
error (remove the file to start over); the key covers only what the caller
puts in ``parts``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from kgate.errors import KgateError


def run_key(parts: dict[str, Any]) -> str:
    """sha256 over the sorted JSON of ``parts`` (values JSON cannot hold are written as ``str``)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def read_lines(path: Path, hint: str = "") -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A checkpoint's header line and its round (or block) lines, in file order.

    A torn last line (the round being written when the stage was killed) is
    dropped; any other line that is not a JSON object is a ``KgateError``
    naming the file and line, followed by ``hint``.
    """
    lines = path.read_text().splitlines()
    header: dict[str, Any] | None = None
    rounds: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise KgateError(f"{path}: line {i + 1} is not JSON{hint}") from None
        if not isinstance(item, dict):
            raise KgateError(f"{path}: line {i + 1} is not a JSON object{hint}")
        if item.get("kind") == "header":
            header = item
        elif item.get("kind") == "round":
            rounds.append(item)
    return header, rounds


def load_checkpoint(path: Path, key: str) -> tuple[list[dict[str, Any]], str | None]:
    """Rounds recorded under the same run key; a checkpoint of another setup is set aside (renamed)."""
    if not path.exists():
        return [], None
    header, rounds = read_lines(path, "; remove the file to start the benchmark over")
    if header is None or header.get("key") != key:
        stale = path.with_name(f"rounds.stale-{int(time.time())}.jsonl")
        path.rename(stale)
        return [], f"set aside {stale.name}: recorded for another setup (run key differs)"
    if [r["index"] for r in rounds] != list(range(len(rounds))):
        raise KgateError(f"{path}: round indices are not 0..{len(rounds) - 1}; remove the file to start over")
    with path.open("w") as fh:
        # rewrite without a torn last line
        for item in [header, *rounds]:
            fh.write(json.dumps(item) + "\n")
    return rounds, f"resumed after {len(rounds)} recorded round(s)"


def append_line(path: Path, item: dict[str, Any]) -> None:
    """Append ``item`` as one JSON line and fsync it, so a finished round survives a kill."""
    with path.open("a") as fh:
        fh.write(json.dumps(item, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def resume(path: Path, parts: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The rounds already in ``path`` under ``run_key(parts)`` and the note saying what happened to the file;
    when none are kept, ``path`` is started afresh with its header line."""
    key = run_key(parts)
    recorded, note = load_checkpoint(path, key)
    if not recorded:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        append_line(path, {"kind": "header", "key": key, "parts": parts, "created": time.time()})
    return recorded, note
