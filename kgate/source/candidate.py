"""Candidate identity and materialization.

A candidate comes from an overlay folder under kernels/, a git ref of the
user's clone, or the uncommitted state of a checkout. Its identity is a
content hash (12 hex digits of sha256): of the overlay's manifest and files,
or of the diff against the baseline (plus untracked files). A ref or worktree candidate with
``candidate.diff_paths`` is that part of the diff alone (git pathspecs, the
untracked files under them), in its identity and in what is applied: the
rest of a change (its tests, already in the fixture) stays out. The hash is
computed every time the DAG is built (cheap: reads only), so any edit yields
a new id and reruns exactly the candidate stages; reading never writes into
the user's repository.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from kgate import paths
from kgate.campaign import Campaign
from kgate.errors import ConfigError
from kgate.source import git, overlay


@dataclass(frozen=True, slots=True)
class Materialized:
    """What was applied to the candidate worktree."""

    kind: str
    source: str
    touched: list[str]


def _worktree_path(value: str) -> Path:
    """A ``worktree:`` candidate's folder (relative: from the kgate checkout), refused when it is not one."""
    p = Path(value).expanduser()
    p = p if p.is_absolute() else (paths.PROJECT / p)
    if not p.is_dir():
        raise ConfigError(f"key 'candidate.worktree' (or --config candidate=worktree:<folder>): {p} is not a folder")
    return p


def _diff_against(path: Path, base: str, tip: str | None, only: list[str] | None = None) -> tuple[str, list[str]]:
    """(patch, untracked files) of ``path`` relative to ``base``; tip None = working tree; ``only``: the
    pathspecs the diff is restricted to (``candidate.diff_paths``), None = everything."""
    if git.git("cat-file", "-t", base, cwd=path, check=False).strip() != "commit":
        raise ConfigError(f"key 'candidate': {path} does not contain the baseline commit {base}")
    spec = ["--", *only] if only else []
    if tip is None:
        patch = git.git("diff", "--binary", "--no-renames", base, *spec, cwd=path)
        untracked = git.git("ls-files", "--others", "--exclude-standard", *spec, cwd=path).splitlines()
        return patch, sorted(untracked)
    return git.git("diff", "--binary", "--no-renames", base, tip, *spec, cwd=path), []


def _diff_paths(c: Campaign) -> list[str] | None:
    """``candidate.diff_paths`` (ref and worktree candidates), None when the whole diff is the candidate."""
    return c.data["candidate"].get("diff_paths") or None


def _baseline_for_diff(c: Campaign) -> str:
    t = c.data["target"]
    if "repo" not in t:
        raise ConfigError("key 'candidate': ref and worktree candidates need a target.repo (a git baseline)")
    return t["repo"]["baseline"]


def identity(c: Campaign) -> str:
    """The candidate's content hash."""
    src = c.candidate_source
    if src.kind == "overlay":
        return overlay.content_hash(paths.PROJECT / src.value, c.target_identity)
    base = _baseline_for_diff(c)
    h = hashlib.sha256()
    if src.kind == "ref":
        repo = c.existing_repo_path()
        patch, _ = _diff_against(repo, base, src.value, _diff_paths(c))
        h.update(patch.encode())
    else:
        wt = _worktree_path(src.value)
        patch, untracked = _diff_against(wt, base, None, _diff_paths(c))
        h.update(patch.encode())
        for f in untracked:
            h.update(f.encode() + b"\0" + (wt / f).read_bytes())
    return h.hexdigest()[:12]


def materialize(c: Campaign, worktree: Path) -> Materialized:
    """Apply the candidate to ``worktree`` (sitting at BENCH_BASE); the caller commits."""
    src = c.candidate_source
    if src.kind == "overlay":
        variant = overlay.select(paths.PROJECT / src.value, c.target_identity)
        return Materialized("overlay", src.value, overlay.apply(variant, worktree))
    base = _baseline_for_diff(c)
    if src.kind == "ref":
        patch, untracked = _diff_against(c.existing_repo_path(), base, src.value,
                                         _diff_paths(c))
        origin = None
    else:
        origin = _worktree_path(src.value)
        patch, untracked = _diff_against(origin, base, None, _diff_paths(c))
    if patch.strip():
        git.git("apply", "--3way", "--whitespace=nowarn", "-", cwd=worktree, input_text=patch)
    for f in untracked:
        assert origin is not None
        dest = worktree / f
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(origin / f, dest)
    touched = sorted({line.split(" b/", 1)[-1] for line in patch.splitlines() if line.startswith("diff --git ")}
                     | set(untracked))
    return Materialized(src.kind, src.value, touched)


def enabled_classes(c: Campaign) -> tuple[str, ...]:
    """Dispatch classes the candidate declares it enables: its overlay's ``enables``, else the
    campaign's ``candidate.enables``; none declared means every class must fall back.
    A name the campaign's ``dispatch.classes`` does not declare is a ConfigError."""
    src = c.candidate_source
    declared: list[str] | None = None
    where = "candidate.enables"
    if src.kind == "overlay":
        declared = overlay.enables(paths.PROJECT / src.value)
        where = f"{src.value}/overlay.yaml: key 'enables'"
    if declared is None:
        declared = list(c.data["candidate"].get("enables") or [])
    known = [k["name"] for k in (c.data.get("dispatch") or {}).get("classes", [])]
    unknown = [n for n in declared if n not in known]
    if unknown:
        raise ConfigError(f"{where}: unknown dispatch class(es) {', '.join(unknown)} "
                          f"(declared in dispatch.classes: {', '.join(known) or 'none'})")
    return tuple(declared)

