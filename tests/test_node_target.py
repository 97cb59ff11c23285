"""scripts/node_target.py: the target's commits carried to a node without network, as a small shallow repository.

A real git history (four commits, one blob then removed from the clone's object store, as a mirror that leaves
its largest files out) is carried from its second commit to its fourth; kgate's own clone and worktrees are then
made from the unpacked result, exactly as the stages make them.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kgate.source import git as git_mod

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import node_target  # noqa: E402


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def history(tmp_path: Path) -> dict[str, str | Path]:
    repo = tmp_path / "clone"
    repo.mkdir()
    _git(repo, "init", "-q")
    a = _commit(repo, {"src/op.py": "x = 1\n", "old.txt": "only in the first commit\n"}, "a")
    b = _commit(repo, {"src/op.py": "x = 2\n", "data/big.bin": "large data\n"}, "b")
    c = _commit(repo, {"src/op.py": "x = 3\n"}, "c")
    d = _commit(repo, {"src/op.py": "x = 4\n", "tests/test_op.py": "def test(): pass\n"}, "d")
    big = _git(repo, "rev-parse", f"{b}:data/big.bin")
    (repo / ".git" / "objects" / big[:2] / big[2:]).unlink()  # the clone lacks this blob from here on
    return {"repo": repo, "a": a, "b": b, "c": c, "d": d, "big": big}


def test_the_carried_repository_holds_the_range_and_kgate_checks_it_out(history: dict, tmp_path: Path) -> None:
    repo: Path = history["repo"]
    commits = node_target.commits_to_carry(repo, history["b"][:10], [history["d"]])
    assert commits == [history["b"], history["d"], history["c"]]
    dest = tmp_path / "carried"
    absent = node_target.build(repo, commits, dest)
    assert absent == [f"{history['b'][:12]}:data/big.bin"]
    # only the carried commits: b is shallow (its parent a stays behind), c and d keep their parents
    assert (dest / ".git" / "shallow").read_text().split() == [history["b"]]
    assert _git(dest, "rev-list", f"{history['b']}..{history['d']}").split() == [history["d"], history["c"]]
    for sha in commits:
        assert _git(dest, "cat-file", "-t", sha) == "commit"
    gone = subprocess.run(["git", "-C", str(dest), "cat-file", "-e", history["a"]], capture_output=True)
    assert gone.returncode != 0
    assert _git(dest, "rev-parse", "HEAD") == history["b"]
    # kgate's clone of it, and a worktree at the baseline: the absent blob's file stays off disk
    bare = tmp_path / "kgate-clone"
    git_mod.clone_shared(dest, bare)
    assert git_mod.absent_blobs(bare, history["b"]) == ["data/big.bin"]
    wt = tmp_path / "wt-base"
    git_mod.reset_worktree(bare, wt, history["b"], "kgate/base")
    assert (wt / "src" / "op.py").read_text() == "x = 2\n" and not (wt / "data" / "big.bin").exists()
    head = tmp_path / "wt-head"
    git_mod.reset_worktree(bare, head, history["d"])
    assert (head / "tests" / "test_op.py").exists() and (head / "src" / "op.py").read_text() == "x = 4\n"


def test_a_commit_the_clone_lacks_is_one_line(history: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # a real campaign whose baseline this toy clone does not hold
    with pytest.raises(SystemExit) as exc:
        node_target.main(["--campaign", "liger-tvd-fused-scale-1127", "--target", str(history["repo"]),
                          "--out", str(tmp_path / "t.tgz")])
    msg = str(exc.value)
    assert msg.startswith("node_target: ") and "has no commit 'de79f63a68764322ec1ade896345deefd6b18121'" in msg
    assert "\n" not in msg and not (tmp_path / "t.tgz").exists()
    # a campaign whose target is an sdist (the default campaign) has no clone to carry: one line as well
    with pytest.raises(SystemExit) as exc:
        node_target.main(["--campaign", "rwkv6-bwd-fusion", "--out", str(tmp_path / "t.tgz")])
    assert str(exc.value) == "node_target: campaign rwkv6-bwd-fusion has no target.repo (an sdist target needs no clone)"


def test_the_tar_unpacks_to_a_repository(history: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole script on a campaign whose baseline and ref the toy clone holds (read through a stand-in loader:
    no committed campaign targets this toy history)."""
    repo: Path = history["repo"]

    class Toy:
        name = "toy"
        data = {"target": {"repo": {"path": str(repo), "baseline": history["c"]}}, "candidate": {"ref": history["d"]}}

        def existing_repo_path(self) -> Path:
            return repo

    monkeypatch.setattr(node_target.campaign_mod, "load", lambda *a, **k: Toy())
    out = tmp_path / "deep" / "target.tar.gz"
    assert node_target.main(["--campaign", "toy", "--out", str(out)]) == 0
    with tarfile.open(out) as tar:
        assert all(m.name == ".git" or m.name.startswith(".git/") for m in tar.getmembers())
        tar.extractall(tmp_path / "node", filter="data")
    node = tmp_path / "node"
    assert _git(node, "rev-parse", "HEAD") == history["c"]
    assert _git(node, "show", f"{history['d']}:src/op.py") == "x = 4"
    assert _git(node, "for-each-ref", "--format=%(refname)").split() == sorted(
        f"refs/heads/carried/{s}" for s in (history["c"], history["d"]))
