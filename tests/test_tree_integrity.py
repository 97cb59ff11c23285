"""The checked tree is the run tree: commits take every file, diffs are text, worktrees are verified by content.

Real git on small scratch repositories shaped like kgate's own (a bare clone with linked worktrees):
a target's or a candidate's ``.gitignore`` and ``.gitattributes`` hide nothing, and every way of making a
worktree differ from its commit (an edit, an untracked or ignored file, a lost file, a mode, a
``git replace``) is an error that names the file or the object.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kgate.errors import ProvenanceMismatch
from kgate.source import git
from kgate.source.worktree import content_diff, verify_worktree
from kgate.stages.candidate_build import added_lines, changed_functions


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@example.org", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(name="clone")
def _clone(tmp_path: Path) -> tuple[Path, Path, str]:
    """kgate's layout: a bare clone (neutral attributes) of a target whose own .gitattributes would convert
    line ends and mark Python binary, and a linked worktree at its commit."""
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "op.py").write_text("# $Id$\ndef op(x):\n    return x\n")
    (src / "pkg" / "tool.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "pkg" / "tool.sh").chmod(0o755)
    (src / "notes.txt").write_text("line one\nline two\n")
    (src / ".gitattributes").write_text("*.txt text eol=crlf\n*.py ident\n")
    (src / ".gitignore").write_text("*.log\n")
    _git(src, "init", "-q", "-b", "main")
    _git(src, "add", "-A")
    _git(src, "commit", "-qm", "baseline")
    repo = tmp_path / "target.git"
    git.clone_shared(src, repo)
    wt = tmp_path / "wt"
    head = _git(src, "rev-parse", "HEAD")
    git.reset_worktree(repo, wt, head, branch="kgate/t/base")
    return repo, wt, head


def test_a_fresh_worktree_holds_exactly_its_commits_bytes(clone) -> None:
    repo, wt, head = clone
    assert (repo / "info" / "attributes").read_text() == git.NEUTRAL_ATTRIBUTES
    # no end-of-line conversion, no ident expansion on checkout, whatever the target's .gitattributes says
    assert (wt / "notes.txt").read_bytes() == b"line one\nline two\n"
    assert (wt / "pkg" / "op.py").read_text().startswith("# $Id$\n")
    verify_worktree(wt, head, repo)
    assert content_diff(wt, repo, head) == []


@pytest.mark.parametrize(("tamper", "kind", "name"), [
    (lambda wt: (wt / "pkg" / "op.py").write_text("# $Id$\ndef op(x):\n    return 2 * x\n"), "changed", "pkg/op.py"),
    (lambda wt: (wt / "conftest.py").write_text("# untracked\n"), "not in the commit", "conftest.py"),
    # ignored by the target's own .gitignore: `git status --porcelain` calls this tree clean
    (lambda wt: (wt / "pkg" / "hidden.log").write_text("x\n"), "not in the commit", "pkg/hidden.log"),
    (lambda wt: (wt / "pkg" / "__pycache__").mkdir() or (wt / "pkg" / "__pycache__" / "op.cpython-311.pyc")
     .write_bytes(b"\0pyc"), "not in the commit", "pkg/__pycache__/op.cpython-311.pyc"),
    (lambda wt: (wt / "notes.txt").unlink(), "missing", "notes.txt"),
    (lambda wt: (wt / "pkg" / "tool.sh").chmod(0o644), "changed", "pkg/tool.sh (mode 100644, committed 100755)"),
    (lambda wt: (wt / "pkg" / "op.py").unlink() or os.symlink("tool.sh", wt / "pkg" / "op.py"), "changed",
     "pkg/op.py"),
])
def test_every_difference_from_the_commit_is_named(clone, tamper, kind: str, name: str) -> None:
    repo, wt, head = clone
    tamper(wt)
    with pytest.raises(ProvenanceMismatch) as err:
        verify_worktree(wt, head, repo, "BENCH_BASE's worktree")
    msg = str(err.value)
    assert msg.startswith("integrity: BENCH_BASE's worktree") and f"{kind}" in msg and name in msg, msg


def test_an_ignored_file_is_invisible_to_git_status_but_not_to_the_check(clone) -> None:
    repo, wt, head = clone
    (wt / "debug.log").write_text("x\n")
    assert _git(wt, "status", "--porcelain") == "", "the old clean-tree check passed this tree"
    assert content_diff(wt, repo, head) == ["not in the commit (untracked or ignored): debug.log"]


def test_a_git_replace_of_the_commit_is_named_by_object(clone) -> None:
    repo, wt, head = clone
    (wt / "pkg" / "op.py").write_text("# $Id$\ndef op(x):\n    return 3 * x\n")
    _git(wt, "add", "-A")
    other = _git(wt, "commit-tree", _git(wt, "write-tree"), "-m", "swapped")
    _git(wt, "reset", "-q", "--hard", head)
    _git(wt, "replace", head, other)
    # through the replacement, git shows the other content under the same id, and a checkout gets it
    assert _git(wt, "show", f"{head}:pkg/op.py").endswith("3 * x")
    with pytest.raises(ProvenanceMismatch, match=f"refs/replace/{head} replaces object {head} with {other}"):
        verify_worktree(wt, head, repo)
    # kgate itself never reads through a replacement
    assert git.git("show", f"{head}:pkg/op.py", cwd=wt).endswith("return x\n")


def test_commits_take_ignored_files_and_diffs_are_text_whatever_the_attributes(clone) -> None:
    """The self-ignoring .gitignore and the `*.py binary` .gitattributes of an adversarial candidate."""
    repo, wt, head = clone
    (wt / ".gitignore").write_text(".gitignore\nconftest.py\n")
    (wt / "conftest.py").write_text("import pytest\n")
    (wt / ".gitattributes").write_text("*.py binary\n")
    with (wt / "pkg" / "op.py").open("a") as fh:
        fh.write("\n\ndef chunk_fwd(x):\n    return 'tilelang'\n")
    assert "conftest.py" not in _git(wt, "status", "--porcelain"), "git add -A would skip it"
    sha = git.commit_all(wt, "candidate")
    verify_worktree(wt, sha, repo)
    files = {f["path"]: f for f in git.changed_files(wt, head, sha)}
    assert set(files) == {".gitignore", ".gitattributes", "conftest.py", "pkg/op.py"}
    assert files["pkg/op.py"]["added"] == 4, "line counts, not a binary file's '-'"
    patch = git.patch(wt, head, sha)
    assert "Binary files" not in patch
    added = added_lines(patch)
    assert (7, "    return 'tilelang'") in added["pkg/op.py"]
    assert changed_functions(wt, added) == ["conftest.py::<module>", "pkg/op.py::chunk_fwd"]
