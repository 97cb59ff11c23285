"""A target clone that lacks some blobs (a partial clone, or a mirror that leaves its largest files out).

The repository here is real git: a commit with a large asset, then a bare copy whose object store holds every
object but the asset's blob (packed from the original, as such a mirror is). kgate's own clone of it checks the
commit out sparse, the worktree verifies, kgate's commits keep the asset's entry, and a file planted at the
absent path (or a present file deleted) is still a content mismatch.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kgate.errors import ProvenanceMismatch
from kgate.source import git
from kgate.source.worktree import content_diff, verify_worktree

ASSET = "test/resources/data set [1].arrow"  # a path that needs escaping as a sparse-checkout pattern


def _run(*args: str, cwd: Path, input_bytes: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, input=input_bytes,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}).stdout


@pytest.fixture()
def incomplete(tmp_path: Path) -> tuple[Path, str, str]:
    """(bare repo lacking ASSET's blob, the commit, the asset's blob id)."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "kernel.py").write_text("def f(x):\n    return x\n")
    (src / "test" / "resources").mkdir(parents=True)
    (src / "test" / "test_f.py").write_text("def test_f():\n    assert True\n")
    (src / ASSET).write_bytes(bytes(range(256)) * 64)
    _run("init", "-q", cwd=src)
    _run("add", "-A", cwd=src)
    _run("commit", "-qm", "c", cwd=src)
    commit = _run("rev-parse", "HEAD", cwd=src).decode().strip()
    asset_oid = _run("rev-parse", f"HEAD:{ASSET}", cwd=src).decode().strip()
    objects = _run("rev-list", "--objects", "--all", cwd=src).decode().split("\n")
    keep = "".join(line.split(" ")[0] + "\n" for line in objects if line and not line.startswith(asset_oid))
    pack = _run("pack-objects", "--stdout", cwd=src, input_bytes=keep.encode())
    mirror = tmp_path / "mirror.git"
    _run("init", "-q", "--bare", str(mirror), cwd=tmp_path)
    _run("index-pack", "--stdin", cwd=mirror, input_bytes=pack)
    _run("update-ref", "refs/heads/main", commit, cwd=mirror)
    return mirror, commit, asset_oid


def test_a_shallow_clone_lacking_a_blob_is_borrowed_not_packed(incomplete, tmp_path: Path):
    """A shallow mirror (its commit's parents absent) that also lacks a blob: git's own shared clone of it goes
    through pack-objects and aborts on the absent blob (as a carried target clone did on a GPU node)."""
    mirror, commit, asset_oid = incomplete
    (mirror / "shallow").write_text(commit + "\n")
    failed = subprocess.run(["git", "clone", "-q", "--bare", "--shared", str(mirror), str(tmp_path / "plain.git")],
                            capture_output=True, text=True)
    assert failed.returncode != 0 and "index-pack" in failed.stderr
    repo = tmp_path / "kgate.git"
    git.clone_shared(mirror, repo)
    assert (repo / "shallow").read_text() == commit + "\n"
    assert git.has_commit(repo, commit) and git.absent_blobs(repo, commit) == [ASSET]
    assert _run("rev-parse", "refs/heads/main", cwd=repo).decode().strip() == commit
    assert not (tmp_path / "kgate.git.borrowing").exists()
    wt = tmp_path / "wt"
    git.reset_worktree(repo, wt, commit, branch="kgate/t/bench_base")
    assert (wt / "pkg" / "kernel.py").exists() and not (wt / ASSET).exists()
    verify_worktree(wt, commit, repo, "the test worktree")


def test_absent_blob_checked_out_sparse_and_kept_in_commits(incomplete, tmp_path: Path):
    mirror, commit, asset_oid = incomplete
    repo = tmp_path / "kgate.git"
    git.clone_shared(mirror, repo)
    assert git.absent_blobs(repo, commit) == [ASSET]
    wt = tmp_path / "wt"
    git.reset_worktree(repo, wt, commit, branch="kgate/t/bench_base")
    assert not (wt / ASSET).exists()
    assert (wt / "pkg" / "kernel.py").read_text().startswith("def f")
    verify_worktree(wt, commit, repo)  # the absent file is off disk by design, nothing else differs

    (wt / "pkg" / "kernel.py").write_text("def f(x):\n    return x + 0\n")
    (wt / "test" / "test_g.py").write_text("def test_g():\n    assert True\n")
    new = git.commit_all(wt, "kgate: fixture")
    assert new != commit and git.head(wt) == new
    assert git.git("--git-dir", str(repo), "rev-parse", "kgate/t/bench_base").strip() == new
    assert sorted(f["path"] for f in git.changed_files(wt, commit, new)) == ["pkg/kernel.py", "test/test_g.py"]
    assert git.tree_entries(repo, new)[ASSET] == ("100644", asset_oid)
    verify_worktree(wt, new, repo)

    # a second arm's worktree at the new commit is sparse the same way
    wt2 = tmp_path / "wt2"
    git.reset_worktree(repo, wt2, new)
    assert not (wt2 / ASSET).exists() and (wt2 / "test" / "test_g.py").exists()


def test_planted_or_deleted_files_still_differ(incomplete, tmp_path: Path):
    mirror, commit, _ = incomplete
    repo = tmp_path / "kgate.git"
    git.clone_shared(mirror, repo)
    wt = tmp_path / "wt"
    git.reset_worktree(repo, wt, commit)
    (wt / ASSET).parent.mkdir(parents=True, exist_ok=True)  # the asset's folder holds nothing else
    (wt / ASSET).write_bytes(b"a stand-in for the absent file")
    with pytest.raises(ProvenanceMismatch, match="changed"):
        verify_worktree(wt, commit, repo)
    (wt / ASSET).unlink()
    (wt / "test" / "test_f.py").unlink()
    assert content_diff(wt, repo, commit) == ["missing: test/test_f.py"]


def test_whole_clone_has_no_absent_blobs(incomplete, tmp_path: Path):
    mirror, commit, _ = incomplete
    src = mirror.parent / "src"
    repo = tmp_path / "whole.git"
    git.clone_shared(src, repo)
    assert git.absent_blobs(repo, commit) == []
    wt = tmp_path / "wt"
    git.reset_worktree(repo, wt, commit)
    assert (wt / ASSET).exists()
    assert git.git("config", "--get", "core.sparseCheckout", cwd=wt, check=False).strip() == ""
