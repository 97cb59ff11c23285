"""Stage ``target``: resolve the target and its exact baseline.

* ``repo``: a bare ``--shared`` clone of the user's repository under work/
  (the user's working tree and refs are never written); the baseline must be
  a full SHA present there.
* ``pypi``: the pinned sdist is downloaded once into the sdist cache (or put
  there by hand on machines without network), its sha256 must equal the
  campaign's, and its contents plus the campaign's gate suite are committed
  with a fixed identity and date into a fresh repository, so the baseline
  SHA is reproducible; the sdist's sha256 is the baseline identity.

Both end with a detached worktree ``wt/baseline`` at the baseline commit.
A missing clone, SHA or hash mismatch is an infrastructure error (exit 2).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from kgate import gitops, paths
from kgate.campaign import ROOT, Campaign
from kgate.errors import ConfigError, TargetError
from kgate.records import Gate, StageResult
from kgate.stage import Context


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _find_sdist(cache: Path, requirement: str) -> Path | None:
    name, _, version = requirement.partition("==")
    stems = {f"{name}-{version}", f"{name.replace('-', '_')}-{version}", f"{name.replace('_', '-')}-{version}"}
    for p in sorted(cache.glob("*")):
        for stem in stems:
            if p.name.lower() in (f"{stem}.tar.gz".lower(), f"{stem}.zip".lower()):
                return p
    return None


def fetch_sdist(requirement: str, expected_sha256: str, cache: Path) -> Path:
    """Return the cached sdist for ``requirement``, downloading it if absent."""
    cache.mkdir(parents=True, exist_ok=True)
    found = _find_sdist(cache, requirement)
    if found is None:
        # download into a private folder, then rename into the cache: two campaigns fetching
        # the same sdist at once never see a half-written archive
        with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--disable-pip-version-check", "-q", requirement, "-d", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            got = _find_sdist(Path(tmp), requirement)
            if got is not None:
                os.replace(got, cache / got.name)
        found = _find_sdist(cache, requirement)
        if proc.returncode != 0 or found is None:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise TargetError(f"target.pypi.requirement: cannot download the sdist of {requirement} into {cache} "
                              f"({tail}); on a machine without network, put the file there by hand")
    actual = sha256_file(found)
    if actual != expected_sha256:
        raise TargetError(f"target.pypi.sha256: {found} has sha256 {actual}, the campaign pins {expected_sha256}")
    return found


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
            src = ROOT / suite
            for f in sorted(src.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts:
                    d = top / f.relative_to(src)
                    if d in copied:
                        raise ConfigError(f"target.pypi.gate_suite: {f.relative_to(src)} is in more than one folder")
                    d.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(f, d)
                    copied.add(d)
        gitops.init_bare(repo)
        msg = f"kgate: import {spec['requirement']} (sdist sha256 {spec['sha256']})"
        if suites:
            msg += f" + gate suite {', '.join(suites)}"
        sha = gitops.commit_tree_from_dir(repo, top, msg)
    gitops.set_ref(repo, f"refs/heads/{paths.branch(c.name, 'baseline')}", sha)
    return {"kind": "pypi", "requirement": spec["requirement"], "sdist": str(sdist), "sdist_sha256": spec["sha256"],
            "gate_suite": spec.get("gate_suite"), "baseline_sha": sha}


def materialize_repo(c: Campaign, repo: Path) -> dict[str, Any]:
    spec = c.data["target"]["repo"]
    src = Path(spec["path"]).expanduser()
    if not src.is_absolute():
        src = ROOT / src
    if not src.exists():
        raise TargetError(f"target.repo.path: '{src}' does not exist (set --config target_path=<your clone>)")
    gitops.clone_shared(src, repo)
    if not gitops.has_commit(repo, spec["baseline"]):
        gitops.git("--git-dir", str(repo), "fetch", "--quiet", "--no-tags", str(src), check=False)
    if not gitops.has_commit(repo, spec["baseline"]):
        raise TargetError(f"target.repo.baseline: commit {spec['baseline']} is not in {src}")
    return {"kind": "repo", "repo_path": str(src), "baseline_sha": spec["baseline"]}


def run(ctx: Context) -> StageResult:
    c, gpu = ctx.campaign, ctx.gpu
    repo = paths.repo(c.name, gpu)
    if c.target_kind == "pypi":
        data = materialize_pypi(c, repo, Path(ctx.args.sdist_cache))
    else:
        data = materialize_repo(c, repo)
    wt = paths.worktree(c.name, gpu, "baseline")
    gitops.reset_worktree(repo, wt, data["baseline_sha"])
    data.update({"identity": c.target_identity, "clone": str(repo), "worktree": str(wt)})
    identity = data.get("sdist_sha256") or data["baseline_sha"]
    gates = [Gate("target_resolved", "baseline commit exists in kgate's clone", data["baseline_sha"], "pass",
                  evidence=str(paths.record(c.name, gpu, "target"))),
             Gate("baseline_identity", "exact SHA or sdist sha256", identity, "pass")]
    return StageResult(gates=gates, data=data)
