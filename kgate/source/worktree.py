"""Checks that a worktree holds exactly what the records say, before a stage runs anything in it.

Method: ``verify_worktree`` compares the worktree's HEAD with the commit a
record names and requires ``git status --porcelain`` to be empty;
``verify_frozen`` recomputes the sha256 of every path of the BENCH_BASE
manifest (``kgate.source.manifest``) in the worktree and requires each to be
unchanged. Either mismatch is a ``ProvenanceMismatch`` (an error, never a
result). Limits: ignored files are not part of ``git status`` and are not
checked; ``verify_frozen`` checks the manifest's paths only, not files added
beside them.
"""

from __future__ import annotations

from pathlib import Path

from kgate.errors import ProvenanceMismatch
from kgate.source import git, manifest


def verify_worktree(wt: Path, want_head: str) -> None:
    """A worktree must sit at the recorded commit with no uncommitted change."""
    if not wt.exists():
        raise ProvenanceMismatch(f"worktree {wt} is missing; rerun the stage that creates it")
    head = git.head(wt)
    if head != want_head:
        raise ProvenanceMismatch(f"worktree {wt} is at {head}, the records say {want_head}")
    dirty = git.status_porcelain(wt)
    if dirty:
        raise ProvenanceMismatch(f"worktree {wt} has uncommitted changes: {dirty.splitlines()[:3]}")


def verify_frozen(wt: Path, expected: dict[str, str]) -> None:
    """Every frozen path of the manifest (``{path: sha256}``) still has its BENCH_BASE hash in ``wt``."""
    changed = manifest.diff(expected, manifest.compute(wt, sorted(expected)))
    if changed:
        raise ProvenanceMismatch(f"frozen file(s) differ from the BENCH_BASE manifest in {wt}: {', '.join(changed)}")
