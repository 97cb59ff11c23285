"""The change ``kgate init`` reads: a base commit and a head (a commit of the clone, or a checkout's files).

Method: the user's clone is only read, with git plumbing that writes nothing
(``rev-parse``, ``diff`` of two trees or of a tree and the files on disk,
``show``, ``log``; ``kgate.source.git``). A head that names an existing folder
is a checkout whose files (tracked and untracked, as ``git status`` sees
them) are compared with the base; anything else is a ref of the clone,
resolved to its commit. Running anything of the target (its helper, its
registry, a pytest collection) happens in kgate's own bare ``--shared``
clone under ``work/init/<campaign>/`` (``kgate.source.git.clone_shared``),
in two detached worktrees: the base, and the head (the head commit, or the
base with the checkout's changed files written over it).

Limits: renames are read as a deletion and an addition (``--no-renames``, as
the candidate's own diff is); a worktree head's ignored files are not part
of the change.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kgate import paths
from kgate.errors import ConfigError, TargetError
from kgate.source import git

#: the commit messages read for the hypothesis: at most this many commits of base..head
MESSAGE_COMMITS = 20


@dataclass(frozen=True, slots=True)
class ChangedFile:
    """One path of the change: ``status`` A (added), M (modified) or D (deleted)."""

    path: str
    status: str


@dataclass(frozen=True, slots=True)
class Change:
    """base..head of the user's clone, read without writing to it."""

    target: Path
    base: str
    #: the head as the user gave it: a ref of the clone, or the path of a checkout
    head: str
    #: the head's commit for a ref head; None for a checkout
    head_sha: str | None
    #: the checkout for a checkout head; None for a ref
    checkout: Path | None
    files: tuple[ChangedFile, ...]

    @property
    def candidate_value(self) -> str:
        """What the candidate names: the checkout's folder; a branch or tag by its name (its later commits are
        later candidates); any other revision (a SHA, ``HEAD~1``) by its commit, which does not move."""
        if self.checkout is not None:
            return str(self.checkout)
        assert self.head_sha is not None
        named = any(_exists(self.target, f"refs/{kind}/{self.head}") for kind in ("heads", "tags", "remotes"))
        return self.head if named else self.head_sha

    @property
    def head_kind(self) -> str:
        """``ref`` or ``worktree``: the kind of candidate the head becomes."""
        return "ref" if self.checkout is None else "worktree"

    def status(self, path: str) -> str | None:
        return next((f.status for f in self.files if f.path == path), None)

    def base_bytes(self, path: str) -> bytes | None:
        """The file at the base, None where it does not exist there."""
        return _show(self.target, self.base, path)

    def head_bytes(self, path: str) -> bytes | None:
        """The file at the head, None where the head deletes it."""
        if self.checkout is None:
            assert self.head_sha is not None
            return _show(self.target, self.head_sha, path)
        p = self.checkout / path
        return p.read_bytes() if p.is_file() else None

    def base_text(self, path: str) -> str | None:
        data = self.base_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def head_text(self, path: str) -> str | None:
        data = self.head_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def messages(self) -> list[str]:
        """The commit messages of base..head, oldest first (none for a checkout head)."""
        if self.head_sha is None:
            return []
        out = git.git("log", "--reverse", f"--max-count={MESSAGE_COMMITS}", "--format=%B%x00",
                      f"{self.base}..{self.head_sha}", cwd=self.target)
        return [m.strip() for m in out.split("\0") if m.strip()]


def _exists(repo: Path, ref: str) -> bool:
    return subprocess.run(["git", "show-ref", "--verify", "--quiet", ref], cwd=repo).returncode == 0


def _show(repo: Path, commit: str, path: str) -> bytes | None:
    proc = subprocess.run(["git", "cat-file", "blob", f"{commit}:{path}"], cwd=repo, capture_output=True)
    return proc.stdout if proc.returncode == 0 else None


def _commit(repo: Path, rev: str, what: str) -> str:
    sha = git.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=repo, check=False).strip()
    if not sha:
        raise ConfigError(f"--{what}: '{rev}' is not a commit of {repo}")
    return sha


def read(target: Path | str, base: str, head: str) -> Change:
    """The change of ``target`` from ``base`` to ``head`` (a ref, or a checkout's folder)."""
    clone = Path(target).expanduser().resolve()
    if not (clone / ".git").exists() and not (clone / "HEAD").exists():
        raise TargetError(f"--target: '{clone}' is not a git repository")
    base_sha = _commit(clone, base, "base")
    folder = Path(head).expanduser()
    if folder.is_dir():
        checkout = folder.resolve()
        if git.git("cat-file", "-t", base_sha, cwd=checkout, check=False).strip() != "commit":
            raise ConfigError(f"--head: the checkout {checkout} does not contain the base commit {base_sha}")
        listed = git.changed_files(checkout, base_sha, None)
        untracked = git.git("ls-files", "--others", "--exclude-standard", cwd=checkout).splitlines()
        files = [ChangedFile(str(f["path"]), str(f["status"])[:1]) for f in listed]
        files += [ChangedFile(p, "A") for p in untracked if p not in {f.path for f in files}]
        head_sha = None
    else:
        checkout = None
        head_sha = _commit(clone, head, "head")
        files = [ChangedFile(str(f["path"]), str(f["status"])[:1]) for f in git.changed_files(clone, base_sha, head_sha)]
    if not files:
        raise ConfigError(f"--head: '{head}' changes nothing against the base {base_sha}")
    return Change(target=clone, base=base_sha, head=head, head_sha=head_sha, checkout=checkout,
                  files=tuple(sorted(files, key=lambda f: f.path)))


@dataclass(frozen=True, slots=True)
class Trees:
    """kgate's own worktrees of the change: the base and the head, under ``work/init/<campaign>/``."""

    base: Path
    head: Path


def checkout_trees(change: Change, root: Path, campaign: str) -> Trees:
    """(Re)create kgate's base and head worktrees of ``change`` in a fresh bare shared clone (never the user's):
    an earlier run's scratch folder, perhaps of another target, is removed first."""
    work = paths.init_work(root, campaign)
    if work.exists():
        shutil.rmtree(work)
    repo = work / "target.git"
    git.clone_shared(change.target, repo)
    base, head = work / "wt" / "base", work / "wt" / "head"
    git.reset_worktree(repo, base, change.base)
    if change.head_sha is not None:
        git.reset_worktree(repo, head, change.head_sha)
        return Trees(base=base, head=head)
    git.reset_worktree(repo, head, change.base)
    for f in change.files:
        dest = head / f.path
        data = change.head_bytes(f.path)
        if data is None:
            if dest.is_dir():
                shutil.rmtree(dest)
            dest.unlink(missing_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return Trees(base=base, head=head)
