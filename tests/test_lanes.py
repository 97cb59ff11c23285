"""Lanes: two campaigns on one target, run at the same time in ONE Snakemake workdir.

The second campaign is a copy of chunk-local-cumsum-identity under another
name (same target, same candidate, same candidate id). Both Snakemake
processes start together, without --nolock: Snakemake 9.27.1 locks files, not
workdirs, so runs with disjoint outputs may share a workdir (docs/lanes.md
has the details and the caveats pinned below). The test then reruns each
lane's candidate stages alone and checks, by sha256 of every file, that the
other lane's results, logs, report, clone and worktrees did not change. The
kernel cache is shared on purpose (docs/cache.md): both lanes name one folder.

Both lanes run through profiles/local. What is tested (locks, refs, worktrees,
records, file sets) is Snakemake's and kgate's, the same under any executor;
that each stage runs as its own Slurm job, and resumes after a cancel, is
tests/test_campaign_slurm.py's. Through the local Slurm cluster this test took
three times as long (609 s against about 200 s), most of it the executor's
status polling.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, SDIST_CACHE, Workflow, candidate_id

pytestmark = pytest.mark.campaign

BASE = "chunk-local-cumsum-identity"
TWIN = "chunk-local-cumsum-twin"        # neither name contains the other
PROFILE = "profiles/local"
LOCK_REFUSED = "Directory cannot be locked"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    return env


def _start(workdir: Path, campaign: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """One Snakemake run of ``campaign`` in ``workdir``, output to ``log`` (the same command as conftest.Workflow)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--profile", str(REPO / PROFILE), *args,
           "--config", f"sdist_cache={SDIST_CACHE}", f"campaign={campaign}"]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=_env())


def _finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = 600) -> str:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"snakemake did not finish in {timeout} s; log {log}")
    return log.read_text(errors="replace")


def _locks(workdir: Path) -> dict[str, set[str]]:
    """Paths listed in Snakemake's lock files, by kind ('input', 'output'); files may vanish while read."""
    out: dict[str, set[str]] = {"input": set(), "output": set()}
    lockdir = workdir / ".snakemake" / "locks"
    for f in sorted(lockdir.glob("*.lock")) if lockdir.is_dir() else []:
        kind = f.name.split(".")[1]
        try:
            out.setdefault(kind, set()).update(ln.strip() for ln in f.read_text().splitlines() if ln.strip())
        except FileNotFoundError:
            continue
    return out


def _holds_lock(workdir: Path, campaign: str) -> bool:
    return any(p.startswith((f"results/{campaign}/", f"reports/{campaign}/")) for p in _locks(workdir)["output"])


def _wait_for(pred, procs: list[subprocess.Popen[bytes]], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        if any(p.poll() is not None for p in procs):
            pytest.fail(f"a run ended before {what}")
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def _lane_files(workdir: Path, campaign: str) -> dict[str, str]:
    """sha256 of every file of a lane (results, logs, report, kgate's clone, worktrees)."""
    out = {}
    for top in ("results", "logs", "reports", "work"):
        base = workdir / top / campaign
        for p in sorted(base.rglob("*")) if base.exists() else []:
            rel = str(p.relative_to(workdir))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _strings(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


def _check_lane(workdir: Path, me: str, other: str, cid: str) -> Path:
    """Branches, worktrees and records of lane ``me`` are its own; returns the kernel cache it shares."""
    lane = (workdir / "work" / me / "cpu").resolve()
    repo = lane / "target.git"
    refs = _git(repo, "for-each-ref", "--format=%(refname)").split()
    assert refs and all(r.startswith(f"refs/heads/kgate/{me}/") for r in refs), refs
    trees = [ln.split(" ", 1)[1] for ln in _git(repo, "worktree", "list", "--porcelain").splitlines()
             if ln.startswith("worktree ")]
    trees = [Path(t).resolve() for t in trees if Path(t).resolve() != repo]
    assert {t.name for t in trees} >= {"baseline", "bench_base"}, trees
    assert all(t.is_relative_to(lane / "wt") for t in trees), trees
    assert not (lane / "triton").exists(), "a lane has a Triton cache of its own again"
    gate = json.loads((workdir / "results" / me / "cpu" / "candidate_gate" / cid / "record.json").read_text())
    assert Path(workdir / gate["data"]["worktree"]).resolve().is_relative_to(lane / "wt")
    # the kernel cache is shared on purpose (docs/cache.md): the stack's one folder, the same in both lanes
    shared = (workdir / gate["provenance"]["kernel_cache"]["triton_cache"]).resolve()
    assert Path(workdir / gate["data"]["triton_cache"]).resolve() == shared
    assert shared.is_relative_to((workdir / "work" / "cache" / "kernels").resolve())
    for rec in sorted((workdir / "results" / me).rglob("*.json")):
        text = rec.read_text()
        assert other not in text, f"{rec} mentions the other lane {other}"
        for s in _strings(json.loads(text)):
            if (s.startswith("work/") or str(workdir / "work") in s) and "work/cache/" not in s:
                assert f"work/{me}/" in s, f"{rec}: {s} is outside lane {me}"
    return shared


def test_two_lanes_on_one_target_run_at_once_in_one_workdir(tmp_path: Path) -> None:
    workdir = tmp_path / "wd"
    workdir.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    # both campaign files are snapshots, so an edit of config/campaigns/ during the test changes neither run
    text = (REPO / "config" / "campaigns" / f"{BASE}.yaml").read_text()
    base_file, twin_file = tmp_path / "campaigns" / f"{BASE}.yaml", tmp_path / "campaigns" / f"{TWIN}.yaml"
    base_file.parent.mkdir()
    base_file.write_text(text)
    twin_file.write_text(yaml.safe_dump({**yaml.safe_load(text), "name": TWIN}, sort_keys=False))
    wf = Workflow(workdir)

    # 1. both lanes start together, each with its own lock
    a = _start(workdir, str(base_file), logs / "a.log")
    b = _start(workdir, str(twin_file), logs / "b.log")
    _wait_for(lambda: _holds_lock(workdir, BASE) and _holds_lock(workdir, TWIN), [a, b], 120,
              "both lanes to hold their locks")
    locks = _locks(workdir)
    owners = {p: [n for n in (BASE, TWIN) if f"/{n}/" in p] for p in locks["input"] | locks["output"]}
    assert all(len(o) == 1 for o in owners.values()), f"a file locked by both lanes: {owners}"
    # a second run of a running lane wants the same files: Snakemake refuses it and touches nothing
    dup = _start(workdir, str(base_file), logs / "dup.log")
    dup_log = _finish(dup, logs / "dup.log", timeout=180)
    assert dup.returncode != 0 and LOCK_REFUSED in dup_log, dup_log[-2000:]
    if a.poll() is None and b.poll() is None:
        assert _holds_lock(workdir, BASE) and _holds_lock(workdir, TWIN), "the refused run removed a lock"
    a_log, b_log = _finish(a, logs / "a.log"), _finish(b, logs / "b.log")
    assert a.returncode == 0, a_log[-4000:]
    assert b.returncode == 0, b_log[-4000:]
    assert LOCK_REFUSED not in a_log + b_log

    for name in (BASE, TWIN):
        v = wf.verdict(name)
        assert (v["campaign"], v["verdict"]) == (name, "SMOKE"), v["sentence"]
    cid = candidate_id(str(base_file))
    assert candidate_id(str(twin_file)) == cid             # same candidate, same id: only the lane differs
    assert _check_lane(workdir, BASE, TWIN, cid) == _check_lane(workdir, TWIN, BASE, cid)
    refs = {n: set(_git(workdir / "work" / n / "cpu" / "target.git", "for-each-ref", "--format=%(refname)").split())
            for n in (BASE, TWIN)}
    assert not refs[BASE] & refs[TWIN]
    files = {n: _lane_files(workdir, n) for n in (BASE, TWIN)}
    assert not set(files[BASE]) & set(files[TWIN])

    # 2. each lane reruns its candidate stages (new commit, branch reset, worktree re-added, gate,
    #    timed stages, report) while the other lane's files are compared, byte for byte
    for me, spec, other in ((BASE, str(base_file), TWIN), (TWIN, str(twin_file), BASE)):
        before_other = _lane_files(workdir, other)
        before_build = wf.record(me, "candidate_build", cid)["provenance"]["finished_utc"]
        time.sleep(1.1)                                    # records carry whole seconds
        run = _start(workdir, spec, logs / f"{me}-rerun.log", "--forcerun", "candidate_build")
        if me == BASE:
            # a no-op run of the other lane ends while this one is still running: it removes its own locks
            # only (kgate.locks; Snakemake 9.27.1 alone deletes .snakemake/locks, every lane's locks included)
            _wait_for(lambda: _holds_lock(workdir, BASE), [run], 120, "the rerun's lock")
            noop = _start(workdir, str(twin_file), logs / "noop.log")
            noop_log = _finish(noop, logs / "noop.log", timeout=180)
            assert noop.returncode == 0 and "Nothing to be done" in noop_log, noop_log[-2000:]
            if run.poll() is None:
                assert _holds_lock(workdir, BASE), "a run that ended removed another lane's locks"
        log = _finish(run, logs / f"{me}-rerun.log")
        assert run.returncode == 0, log[-4000:]
        assert wf.record(me, "candidate_build", cid)["provenance"]["finished_utc"] != before_build
        assert wf.verdict(me)["verdict"] == "SMOKE"
        after_other = _lane_files(workdir, other)
        changed = sorted(k for k in set(before_other) | set(after_other) if before_other.get(k) != after_other.get(k))
        assert not changed, f"rerunning {me} changed {other}'s files: {changed[:20]}"
