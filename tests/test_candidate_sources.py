"""Git-ref and worktree-diff candidates on a user's clone: their identity is the diff's content
hash, so an edit reruns exactly the candidate stages (Snakemake's own dry run says which).

The clone is made here from the pinned fla-core sdist plus the second-op campaign's oracle
tests, committed as the user's baseline; the campaign is the second-op one pointed at it.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from conftest import REPO, Workflow, candidate_id
from test_campaign_cpu import _job_stats

from kgate import campaign as campaign_mod

pytestmark = pytest.mark.campaign
CAMPAIGN = "chunk-local-cumsum-identity"
CUMSUM = "fla/ops/utils/cumsum.py"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@example.org", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def _user_clone(tmp_path: Path, sdist: Path) -> tuple[Path, str]:
    clone = tmp_path / "fla"
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "sdist", filter="data")
    shutil.copytree(next((tmp_path / "sdist").iterdir()), clone)
    for suite in ("kernels/fla/oracle_common", "kernels/chunk_local_cumsum_identity/oracle"):
        shutil.copytree(REPO / suite, clone, dirs_exist_ok=True)
    _git(clone, "init", "-q", "-b", "main")
    _git(clone, "add", "-A")
    _git(clone, "commit", "-qm", "baseline")
    return clone, _git(clone, "rev-parse", "HEAD")


def _campaign_on(tmp_path: Path, clone: Path, baseline: str) -> Path:
    data = yaml.safe_load(campaign_mod.resolve_campaign_path(CAMPAIGN).read_text())
    data["target"] = {"repo": {"path": str(clone), "baseline": baseline}}
    path = tmp_path / "campaigns" / f"{CAMPAIGN}.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data))
    return path


def _edit(clone: Path, line: str) -> None:
    with (clone / CUMSUM).open("a") as fh:
        fh.write(f"\n# {line}\n")


def test_ref_and_worktree_candidates_rerun_exactly_the_candidate_stages(tmp_path: Path, fla_sdist: Path) -> None:
    clone, baseline = _user_clone(tmp_path, fla_sdist)
    camp = _campaign_on(tmp_path, clone, baseline)
    wf = Workflow(tmp_path / "wd")
    _git(clone, "checkout", "-qb", "cand")
    _edit(clone, "candidate, iteration 1")
    _git(clone, "commit", "-qam", "iteration 1")
    _git(clone, "checkout", "-q", "main")
    proc = wf.run(f"campaign={camp}", "candidate=ref:cand")
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = candidate_id(str(camp), "ref:cand")
    build = wf.record(CAMPAIGN, "candidate_build", first)
    assert build["data"]["source"] == {"kind": "ref", "value": "cand"}
    assert [f["path"] for f in build["data"]["diff"]["files"]] == [CUMSUM]
    assert wf.record(CAMPAIGN, "candidate_gate", first)["status"] == "pass"
    quiet = wf.run(f"campaign={camp}", "candidate=ref:cand", args=("-n",))
    assert "Nothing to be done" in quiet.stdout + quiet.stderr

    # a new commit on the candidate's branch: a new id, only candidate stages are due
    _git(clone, "checkout", "-q", "cand")
    _edit(clone, "candidate, iteration 2")
    _git(clone, "commit", "-qam", "iteration 2")
    second = candidate_id(str(camp), "ref:cand")
    assert second != first
    dry = wf.run(f"campaign={camp}", "candidate=ref:cand", args=("-n",))
    assert _job_stats(dry.stdout + dry.stderr) == {"candidate_build": 1, "report": 1, "all": 1}

    # the same change uncommitted in the user's checkout: a worktree candidate, identified by its diff
    _git(clone, "checkout", "-q", "main")
    _edit(clone, "candidate, uncommitted")
    wt_id = candidate_id(str(camp), f"worktree:{clone}")
    dry = wf.run(f"campaign={camp}", f"candidate=worktree:{clone}", args=("-n",))
    assert _job_stats(dry.stdout + dry.stderr) == {"candidate_build": 1, "report": 1, "all": 1}
    untracked = clone / "fla" / "ops" / "utils" / "new_helper.py"
    untracked.write_text("X = 1\n")
    assert candidate_id(str(camp), f"worktree:{clone}") != wt_id, "untracked files are part of the identity"
    untracked.unlink()
    assert candidate_id(str(camp), f"worktree:{clone}") == wt_id
    # kgate never wrote into the user's clone
    assert _git(clone, "status", "--porcelain") == f"M {CUMSUM}"
    assert _git(clone, "branch", "--list") == "cand\n* main"
