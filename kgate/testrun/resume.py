"""Resuming a gate run that was interrupted (a machine's or a Slurm job's time limit, Ctrl-C).

Method: before pytest starts, ``kgate.testrun.runner.run`` writes ``<tag>.attempt.json``
beside the outcomes: the attempt's key, a sha256 over the pytest command line,
the worktree's commit, the variables the gate sets and the Python executable.
When the same stage runs again with the same key (same code, same tests, same
settings) and the earlier attempt did not finish (``finished: false`` in its
outcomes), the tests that attempt finished are carried over: their outcome
entries are kept as they were measured (a failure stays a failure) and pytest
deselects their ids (``--kgate-skip-ids``), so only the rest runs, starting
with the test that was running when it was cut. The per-worker outcome files
under pytest-xdist say exactly which tests each worker had finished; without
xdist the one outcomes file does. The attempt file accumulates what it
carried, so a resumed attempt that is cut again loses nothing either.

Limits: a worktree with uncommitted changes to tracked files, or no commit,
is never resumed; a finished attempt is never resumed (a rerun of a finished
stage measures afresh); only full runs resume (the reruns of failing ids in
baseline_tests do not); the JUnit file and log of a resumed attempt hold only
the tests it ran (the record's outcome list holds all of them, and says which
were carried over).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from kgate.errors import KgateError
from kgate.testrun import outcomes_plugin

ATTEMPT_SCHEMA = "kgate.testrun.runner-attempt/1"


def attempt_key(cmd: list[str], worktree: Path, env_set: tuple[tuple[str, str], ...], python: str) -> str | None:
    """The attempt's identity, or None when the worktree has no commit or tracked changes."""
    head = subprocess.run(["git", "-C", str(worktree), "rev-parse", "--verify", "-q", "HEAD"],
                          capture_output=True, text=True)
    if head.returncode != 0:
        return None
    dirty = subprocess.run(["git", "-C", str(worktree), "diff", "--quiet", "HEAD", "--"], capture_output=True)
    if dirty.returncode != 0:
        return None
    blob = json.dumps({"cmd": cmd, "head": head.stdout.strip(), "env_set": sorted(env_set), "python": python})
    return hashlib.sha256(blob.encode()).hexdigest()


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise KgateError(f"{path} is corrupt ({exc}); remove it to run the gate from the start") from exc


def carried(out_dir: Path, tag: str, key: str | None) -> dict[str, dict[str, Any]]:
    """Outcome entries (id -> entry) of the tests an interrupted earlier attempt with ``key`` finished."""
    sidecar = out_dir / f"{tag}.attempt.json"
    if key is None or not sidecar.exists():
        return {}
    attempt = _load(sidecar)
    if attempt.get("schema") != ATTEMPT_SCHEMA or attempt.get("key") != key:
        return {}
    main = out_dir / f"{tag}.outcomes.json"
    state = _load(main) if main.exists() else None
    if state is not None and state.get("finished"):
        return {}
    done: dict[str, dict[str, Any]] = dict(attempt.get("carried", {}))
    sources = [_load(p) for p in outcomes_plugin.worker_paths(main)] or ([state] if state else [])
    collected: set[str] = set()
    for s in sources:
        collected.update(s.get("collected", []))
        done.update({k: t for k, t in s.get("tests", {}).items() if k != s.get("running")})
    if collected and collected <= set(done):
        # every test finished, but the session did not: nothing would be left to run; measure afresh
        return {}
    return done


def write_attempt(out_dir: Path, tag: str, key: str | None, carried_over: dict[str, dict[str, Any]]) -> Path | None:
    """Write this attempt's key and what it carries; the ids pytest must skip go to ``<tag>.skip-ids.txt``."""
    sidecar = out_dir / f"{tag}.attempt.json"
    skip = out_dir / f"{tag}.skip-ids.txt"
    skip.unlink(missing_ok=True)
    if key is None:
        sidecar.unlink(missing_ok=True)
        return None
    sidecar.write_text(json.dumps({"schema": ATTEMPT_SCHEMA, "key": key, "carried": carried_over}, indent=1))
    if not carried_over:
        return None
    skip.write_text("".join(f"{i}\n" for i in sorted(carried_over)))
    return skip.resolve()
