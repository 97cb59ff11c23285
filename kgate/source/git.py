"""Git plumbing for kgate's own clone of the target.

kgate never writes into the user's clone: it makes a bare clone with
``--shared`` (objects are read through alternates, so any commit of the
user's repository can be checked out, reachable or not) under work/, and
every arm gets its own worktree on a kgate-owned branch. Commits kgate makes
(sdist import, fixture, candidate) use a fixed author and date, so the same
inputs give the same SHA on every machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from kgate.errors import KgateError, TargetError

COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "kgate", "GIT_AUTHOR_EMAIL": "kgate@localhost",
    "GIT_COMMITTER_NAME": "kgate", "GIT_COMMITTER_EMAIL": "kgate@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


def git(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None,
        check: bool = True, input_text: str | None = None) -> str:
    """Run git; on failure raise ``KgateError`` with the command and its stderr."""
    full_env = dict(os.environ)
    full_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    if env:
        full_env.update(env)
    proc = subprocess.run(["git", *args], cwd=cwd, env=full_env, capture_output=True, text=True, input=input_text)
    if check and proc.returncode != 0:
        where = f" (in {cwd})" if cwd else ""
        raise KgateError(f"git {' '.join(args[:3])}{where} failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    return proc.stdout


def clone_shared(src: Path, dest: Path) -> None:
    """Bare clone of ``src`` that borrows its objects (no copy, no writes to src)."""
    if not (src / ".git").exists() and not (src / "HEAD").exists():
        raise TargetError(f"target.repo.path '{src}' is not a git repository")
    if dest.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "--bare", "--shared", "--no-tags", "--quiet", str(src), str(dest))


def init_bare(dest: Path) -> None:
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        git("init", "--bare", "--quiet", str(dest))


def has_commit(repo: Path, sha: str) -> bool:
    return subprocess.run(["git", "--git-dir", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode == 0


def commit_tree_from_dir(repo: Path, src_dir: Path, message: str) -> str:
    """Commit the files of ``src_dir`` as a root commit in bare ``repo``; return its SHA."""
    repo = repo.resolve()
    index = repo / "kgate-import.index"
    env = {"GIT_INDEX_FILE": str(index.resolve()), "GIT_WORK_TREE": str(src_dir.resolve()), **COMMIT_ENV}
    try:
        git("--git-dir", str(repo), "add", "-A", "--force", ".", cwd=src_dir, env=env)
        tree = git("--git-dir", str(repo), "write-tree", env=env).strip()
        return git("--git-dir", str(repo), "commit-tree", tree, "-m", message, env=env).strip()
    finally:
        index.unlink(missing_ok=True)


def set_ref(repo: Path, ref: str, sha: str) -> None:
    git("--git-dir", str(repo), "update-ref", ref, sha)


def reset_worktree(repo: Path, path: Path, commit: str, branch: str | None = None) -> None:
    """(Re)create worktree ``path`` at ``commit``; on ``branch`` (forced) or detached."""
    git("--git-dir", str(repo), "worktree", "prune")
    if path.exists():
        git("--git-dir", str(repo), "worktree", "remove", "--force", str(path), check=False)
        if path.exists():
            shutil.rmtree(path)
        git("--git-dir", str(repo), "worktree", "prune")
    path.parent.mkdir(parents=True, exist_ok=True)
    if branch:
        git("--git-dir", str(repo), "worktree", "add", "--quiet", "-B", branch, str(path), commit)
    else:
        git("--git-dir", str(repo), "worktree", "add", "--quiet", "--detach", str(path), commit)


def commit_all(worktree: Path, message: str) -> str:
    """Stage everything in ``worktree`` and commit with kgate's fixed identity."""
    git("add", "-A", cwd=worktree)
    git("commit", "--quiet", "--allow-empty", "--no-verify", "-m", message, cwd=worktree, env=COMMIT_ENV)
    return head(worktree)


def head(worktree: Path) -> str:
    return git("rev-parse", "HEAD", cwd=worktree).strip()


def status_porcelain(worktree: Path) -> str:
    """Uncommitted changes (tracked and untracked); '' means clean."""
    return git("status", "--porcelain", "--untracked-files=all", cwd=worktree)


def changed_files(worktree: Path, base: str, tip: str | None = "HEAD") -> list[dict[str, object]]:
    """Files changed between two commits (tip None: between ``base`` and the checkout's tracked files, as they
    are on disk), with status and line counts. Reads only (``git diff`` of trees, or of a tree and the files)."""
    tips = [tip] if tip is not None else []
    status = {}
    for line in git("diff", "--name-status", "--no-renames", base, *tips, cwd=worktree).splitlines():
        st, _, path = line.partition("\t")
        status[path] = st
    out = []
    for line in git("diff", "--numstat", "--no-renames", base, *tips, cwd=worktree).splitlines():
        added, removed, path = line.split("\t", 2)
        out.append({"path": path, "status": status.get(path, "M"),
                    "added": None if added == "-" else int(added),
                    "removed": None if removed == "-" else int(removed)})
    return out


def patch(worktree: Path, base: str, tip: str = "HEAD") -> str:
    return git("diff", "--no-renames", "--binary", base, tip, cwd=worktree)
