"""Stage ``target``: resolve the target and its exact baseline.

* ``repo``: a bare ``--shared`` clone of the user's repository under work/
  (the user's working tree and refs are never written); the baseline must be
  a full SHA present there.
* ``pypi``: the pinned sdist is downloaded once into the sdist cache (or put
  there by hand on machines without network; ``kgate.source.sdist``), its
  sha256 must equal the campaign's, and its contents plus the campaign's gate suite are committed
  with a fixed identity and date into a fresh repository, so the baseline
  SHA is reproducible; the sdist's sha256 is the baseline identity.

Both end with a detached worktree ``wt/baseline`` at the baseline commit.
A missing clone, SHA or hash mismatch is an infrastructure error (exit 2).
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.campaign import Campaign
from kgate.errors import ConfigError, TargetError
from kgate.records import Gate, StageResult
from kgate.source import git
from kgate.source.sdist import fetch_sdist
from kgate.stages.common import Context


def _extract(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")
    tops = [p for p in dest.iterdir()]
    if len(tops) != 1 or not tops[0].is_dir():
        raise TargetError(f"{archive}: expected one top-level folder in the sdist")
    return tops[0]


def materialize_pypi(c: Campaign, repo: Path, cache: Path) -> dict[str, Any]:
    spec = c.data["target"]["pypi"]
    sdist = fetch_sdist(spec["requirement"], spec["sha256"], cache)
    with tempfile.TemporaryDirectory() as tmp:
        top = _extract(sdist, Path(tmp))
        suites = spec.get("gate_suite") or []
        copied: set[Path] = set()
        for suite in suites:
            src = paths.PROJECT / suite
            for f in sorted(src.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    d = top / f.relative_to(src)
                    if d in copied:
                        raise ConfigError(f"target.pypi.gate_suite: {f.relative_to(src)} is in more than one folder")
                    d.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(f, d)
                    copied.add(d)
        git.init_bare(repo)
        msg = f"kgate: import {spec['requirement']} (sdist sha256 {spec['sha256']})"
        if suites:
            msg += f" + gate suite {', '.join(suites)}"
        sha = git.commit_tree_from_dir(repo, top, msg)
    git.set_ref(repo, f"refs/heads/{paths.branch(c.name, 'baseline')}", sha)
    return {"kind": "pypi", "requirement": spec["requirement"], "sdist": str(sdist), "sdist_sha256": spec["sha256"],
            "gate_suite": spec.get("gate_suite"), "baseline_sha": sha}


def materialize_repo(c: Campaign, repo: Path) -> dict[str, Any]:
    spec = c.data["target"]["repo"]
    src = c.existing_repo_path()
    git.clone_shared(src, repo)
    if not git.has_commit(repo, spec["baseline"]):
        git.git("--git-dir", str(repo), "fetch", "--quiet", "--no-tags", str(src), check=False)
    if not git.has_commit(repo, spec["baseline"]):
        raise TargetError(f"target.repo.baseline: commit {spec['baseline']} is not in {src}")
    return {"kind": "repo", "repo_path": str(src), "baseline_sha": spec["baseline"]}


def run(ctx: Context) -> StageResult:
    c, gpu = ctx.campaign, ctx.gpu
    repo = paths.repo(c.name, gpu)
    if c.target_kind == "pypi":
        data = materialize_pypi(c, repo, ctx.sdist_cache)
    else:
        data = materialize_repo(c, repo)
    wt = paths.worktree(c.name, gpu, "baseline")
    absent = git.absent_blobs(repo, data["baseline_sha"])
    frozen_absent = sorted(set(absent) & set(c.data["frozen"]))
    if frozen_absent:
        raise TargetError(f"frozen: {', '.join(frozen_absent)} cannot be frozen: the blob is not in "
                          f"{data.get('repo_path', repo)} (a partial clone or an incomplete mirror)")
    git.reset_worktree(repo, wt, data["baseline_sha"])
    data.update({"identity": c.target_identity, "clone": str(repo), "worktree": str(wt), "absent_blobs": absent})
    identity = data.get("sdist_sha256") or data["baseline_sha"]
    gates = [Gate("target_resolved", "baseline commit exists in kgate's clone", data["baseline_sha"], "pass",
                  evidence=str(paths.record(c.name, gpu, "target"))),
             Gate("baseline_identity", "exact SHA or sdist sha256", identity, "pass"),
             Gate("absent_blobs", "files whose blobs the clone lacks stay off disk in every arm (stated, not gated)",
                  f"{len(absent)} file(s) off disk: {', '.join(absent[:5])}" + (" ..." if len(absent) > 5 else "")
                  if absent else "none", "pass")]
    return StageResult(gates=gates, data=data)
