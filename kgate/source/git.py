"""Git plumbing for kgate's own clone of the target.

kgate never writes into the user's clone: it makes a bare clone with
``--shared`` (objects are read through alternates, so any commit of the
user's repository can be checked out, reachable or not) under work/, and
every arm gets its own worktree on a kgate-owned branch. Commits kgate makes
(sdist import, fixture, candidate) use a fixed author and date, so the same
inputs give the same SHA on every machine.

What kgate reads is the objects' own content, whatever the target's files say:
every git command runs with ``GIT_NO_REPLACE_OBJECTS`` (a ``git replace`` cannot
substitute a commit or tree), kgate's clone carries ``info/attributes``
(:data:`NEUTRAL_ATTRIBUTES`, which outranks every ``.gitattributes``: no end-of-line
conversion, filter, ident or encoding between the objects and the files, and every
diff is text), commits take every file of the worktree, ignored ones included, and
diffs are read with ``--text``. A target's ``.gitignore`` or ``.gitattributes`` is a
file like any other: it cannot hide a file from a commit nor a change from a diff.

A clone may lack some blobs (a partial clone, ``--filter=blob:limit=...``, or a
mirror that leaves its largest files out): kgate's clone reads objects through
alternates and cannot fetch them. Such a commit is checked out sparse: every
file whose blob is absent stays off disk (the worktree's sparse-checkout lists
each by path, :func:`absent_blobs`), and kgate's commits keep those entries as
the tree has them (``write-tree --missing-ok``), so a fixture or candidate
commit differs from its parent only by what was changed. A test that reads
such a file fails or skips the same way in every arm; the target record lists
the paths, and a frozen, fixture or candidate path among them is refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from kgate.errors import KgateError, TargetError
from kgate.records import atomic_write_text

COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "kgate", "GIT_AUTHOR_EMAIL": "kgate@localhost",
    "GIT_COMMITTER_NAME": "kgate", "GIT_COMMITTER_EMAIL": "kgate@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}

#: kgate's clone's ``info/attributes``: the highest-precedence attributes, for every path. Files are checked
#: out and hashed as their bytes (no text/eol conversion, no filter, no ident, no working-tree encoding) and
#: diffed and merged as text, whatever a ``.gitattributes`` of the target or the candidate sets.
NEUTRAL_ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding diff merge\n"


def git(*args: str, cwd: Path | str | None = None, env: dict[str, str] | None = None,
        check: bool = True, input_text: str | None = None, errors: str = "strict") -> str:
    """Run git; on failure raise ``KgateError`` with the command and its stderr. ``errors`` decodes the
    output (``replace`` for a text diff that may hold a binary file's bytes)."""
    full_env = dict(os.environ)
    # objects as they are: a `git replace` ref (or a graft) never substitutes what kgate reads or checks out
    full_env.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "GIT_NO_REPLACE_OBJECTS": "1"})
    if env:
        full_env.update(env)
    proc = subprocess.run(["git", *args], cwd=cwd, env=full_env, capture_output=True, text=True, errors=errors,
                          input=input_text)
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
    if git("rev-parse", "--is-shallow-repository", cwd=src).strip() == "true":
        _borrow_shallow(src, dest)
    else:
        git("clone", "--bare", "--shared", "--no-tags", "--quiet", str(src), str(dest))
    neutral_attributes(dest)


def _borrow_shallow(src: Path, dest: Path) -> None:
    """What ``clone --bare --shared --no-tags`` makes of a non-shallow ``src``, for a shallow one: git clones a
    shallow repository through pack-objects even with ``--shared``, which aborts on the first object the
    clone lacks (a mirror's left-out blob). Here nothing is packed: ``dest`` borrows ``src``'s object store
    (``objects/info/alternates``), takes its branches and HEAD, and its ``shallow`` list (the commits whose
    parents are absent). A temporary name until complete: an interrupted borrow leaves no half clone."""
    common = Path(git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=src).strip())
    tmp = dest.with_name(dest.name + ".borrowing")
    if tmp.exists():
        shutil.rmtree(tmp)
    git("init", "--bare", "--quiet", str(tmp))
    atomic_write_text(tmp / "objects" / "info" / "alternates", f"{common / 'objects'}\n")
    if (common / "shallow").exists():
        atomic_write_text(tmp / "shallow", (common / "shallow").read_text())
    refs = git("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", cwd=src)
    git("update-ref", "--stdin", cwd=tmp,
        input_text="".join(f"create {ref} {oid}\n" for oid, ref in (ln.split(" ", 1) for ln in refs.splitlines())))
    head = git("symbolic-ref", "-q", "HEAD", cwd=src, check=False).strip()
    if head:
        git("symbolic-ref", "HEAD", head, cwd=tmp)
    tmp.rename(dest)


def init_bare(dest: Path) -> None:
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        git("init", "--bare", "--quiet", str(dest))
    neutral_attributes(dest)


def neutral_attributes(repo: Path) -> None:
    """Write :data:`NEUTRAL_ATTRIBUTES` to ``repo``'s ``info/attributes`` (shared by all its worktrees)."""
    path = Path(repo) / "info" / "attributes"
    if not (path.is_file() and path.read_text() == NEUTRAL_ATTRIBUTES):
        atomic_write_text(path, NEUTRAL_ATTRIBUTES)


def has_commit(repo: Path, sha: str) -> bool:
    return subprocess.run(["git", "--git-dir", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode == 0


def missing_paths(repo: Path, commit: str, rels: list[str]) -> list[str] | None:
    """Which of ``rels`` (files or folders, relative to the root) ``commit``'s tree lacks, read with
    ``git ls-tree`` (one call a path) in ``repo`` (a clone or a bare repository); None when ``repo`` is no git
    repository or lacks ``commit``."""
    gitdir = git("-C", str(repo), "rev-parse", "--absolute-git-dir", check=False).strip()
    if not gitdir or not has_commit(Path(gitdir), commit):
        return None
    wanted = [r for r in rels if PurePosixPath(r).as_posix() not in (".", "")]
    if not wanted:
        return []
    # trees only (ls-tree, one path a call: a path and a file below it in one call list only the file), so a
    # partial clone's absent blobs are never fetched
    return [r for r in wanted if PurePosixPath(r).as_posix() not in git(
        "--git-dir", gitdir, "ls-tree", "-z", "--name-only", "--full-tree", commit, "--",
        PurePosixPath(r).as_posix()).split("\0")]


def commit_tree_from_dir(repo: Path, src_dir: Path, message: str) -> str:
    """Commit the files of ``src_dir`` as a root commit in bare ``repo``; return its SHA."""
    repo = repo.resolve()
    neutral_attributes(repo)
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
    neutral_attributes(repo)
    git("--git-dir", str(repo), "worktree", "prune")
    if path.exists():
        git("--git-dir", str(repo), "worktree", "remove", "--force", str(path), check=False)
        if path.exists():
            shutil.rmtree(path)
        git("--git-dir", str(repo), "worktree", "prune")
    path.parent.mkdir(parents=True, exist_ok=True)
    absent = absent_blobs(repo, commit)
    where = ["-B", branch] if branch else ["--detach"]
    if not absent:
        git("--git-dir", str(repo), "worktree", "add", "--quiet", *where, str(path), commit)
        return
    # sparse: the absent blobs' paths stay off disk, every other file is checked out
    git("--git-dir", str(repo), "worktree", "add", "--quiet", "--no-checkout", *where, str(path), commit)
    patterns = "/*\n" + "".join(f"!/{_escape_pattern(p)}\n" for p in absent)
    git("sparse-checkout", "set", "--no-cone", "--stdin", cwd=path, input_text=patterns)
    git("read-tree", "--reset", "-u", "HEAD", cwd=path)


def _escape_pattern(rel: str) -> str:
    """``rel`` as a literal sparse-checkout (gitignore-syntax) pattern."""
    return "".join("\\" + ch if ch in "*?[]\\!# " else ch for ch in rel)


def absent_blobs(repo: Path, commit: str) -> list[str]:
    """Paths of ``commit``'s files whose blobs are not in ``repo``'s object store (sorted; empty for a whole
    clone). One ``cat-file --batch-check`` over the tree's blob ids."""
    entries = {p: oid for p, (mode, oid) in tree_entries(repo, commit).items() if mode != "160000"}
    if not entries:
        return []
    missing = missing_objects(repo, entries.values())
    return sorted(p for p, oid in entries.items() if oid in missing)


def missing_objects(repo: Path, oids: Iterable[str]) -> set[str]:
    """Which of ``oids`` ``repo`` (a git dir or a work tree) does not hold: one ``cat-file --batch-check``."""
    wanted = sorted(set(oids))
    if not wanted:
        return set()
    out = git("-C", str(repo), "cat-file", "--batch-check=%(objectname)", input_text="\n".join(wanted) + "\n")
    return {line.split()[0] for line in out.splitlines() if line.endswith(" missing")}


def commit_all(worktree: Path, message: str) -> str:
    """Stage every file in ``worktree``, ignored ones included (``--force``: a ``.gitignore`` hides nothing),
    and commit with kgate's fixed identity. In a sparse worktree (absent blobs) the files left off disk keep
    their entries: the tree is written with ``--missing-ok`` and committed by plumbing."""
    git("add", "-A", "--force", cwd=worktree)
    if git("config", "--get", "core.sparseCheckout", cwd=worktree, check=False).strip() != "true":
        git("commit", "--quiet", "--allow-empty", "--no-verify", "-m", message, cwd=worktree, env=COMMIT_ENV)
        return head(worktree)
    tree = git("write-tree", "--missing-ok", cwd=worktree).strip()
    sha = git("commit-tree", tree, "-p", "HEAD", "-m", message, cwd=worktree, env=COMMIT_ENV).strip()
    git("update-ref", "HEAD", sha, cwd=worktree)
    return sha


def head(worktree: Path) -> str:
    return git("rev-parse", "HEAD", cwd=worktree).strip()


def changed_files(worktree: Path, base: str, tip: str | None = "HEAD") -> list[dict[str, object]]:
    """Files changed between two commits (tip None: between ``base`` and the checkout's tracked files, as they
    are on disk), with status and line counts, every file read as text. Reads only (``git diff`` of trees, or of
    a tree and the files)."""
    tips = [tip] if tip is not None else []
    status = {}
    for line in git("diff", "--name-status", "--no-renames", base, *tips, cwd=worktree).splitlines():
        st, _, path = line.partition("\t")
        status[path] = st
    out = []
    for line in git("diff", "--numstat", "--text", "--no-renames", base, *tips, cwd=worktree,
                    errors="replace").splitlines():
        added, removed, path = line.split("\t", 2)
        out.append({"path": path, "status": status.get(path, "M"),
                    "added": None if added == "-" else int(added),
                    "removed": None if removed == "-" else int(removed)})
    return out


def patch(worktree: Path, base: str, tip: str = "HEAD") -> str:
    """The diff between two commits, every file read as text (``--text``: attributes cannot make it binary)."""
    return git("diff", "--no-renames", "--text", base, tip, cwd=worktree, errors="replace")


def object_format(repo: Path) -> str:
    """The repository's hash algorithm (``sha1`` or ``sha256``)."""
    return git("--git-dir", str(repo), "rev-parse", "--show-object-format").strip() or "sha1"


def tree_entries(repo: Path, commit: str) -> dict[str, tuple[str, str]]:
    """Every path of ``commit``'s tree (recursively): ``{path: (mode, object id)}``, as stored."""
    out: dict[str, tuple[str, str]] = {}
    listing = git("--git-dir", str(repo), "ls-tree", "-r", "-z", "--full-tree", commit)
    for item in listing.split("\0"):
        if not item:
            continue
        meta, _, path = item.partition("\t")
        mode, _kind, oid = meta.split(" ")
        out[path] = (mode, oid)
    return out


def substitutions(repo: Path) -> list[str]:
    """What could make git show other content under a commit's id: ``refs/replace/*`` refs and a grafts
    file; one line each, naming the replaced object (kgate never creates either)."""
    out = [f"refs/replace/{line.split()[0]} replaces object {line.split()[0]} with {line.split()[1]}"
           for line in git("--git-dir", str(repo), "for-each-ref", "--format=%(refname:lstrip=2) %(objectname)",
                           "refs/replace/").splitlines() if line.strip()]
    grafts = Path(repo) / "info" / "grafts"
    if grafts.exists():
        out.append(f"{grafts} exists (grafts rewrite commits' parents)")
    return out
