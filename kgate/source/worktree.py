"""Checks that a worktree holds exactly what the records say, before a stage runs anything in it.

Method: ``verify_worktree`` requires (1) no object substitution in kgate's
clone (no ``refs/replace/*`` ref, no grafts file: kgate never makes either,
so one is tampering, named by the object it replaces), (2) the worktree's
HEAD at the commit a record names, and (3) the worktree's files to be, by
content, exactly that commit's tree: every file on disk is hashed as a git
blob (its bytes, no attribute applied: kgate's clone neutralises
``.gitattributes``, ``kgate.source.git``) and compared with the commit's
entries read from the clone itself (not through the worktree's ``.git``
file), executable bit and symlink targets included. A file the commit lacks
(untracked or ignored: ``.gitignore`` plays no part), a changed file and a
missing file are each named (a file whose blob kgate's clone lacks is off disk
by design: ``kgate.source.git``, sparse worktrees). ``verify_frozen`` recomputes the sha256 of
every path of the BENCH_BASE manifest (``kgate.source.manifest``) in a
worktree and requires each to be unchanged. Any mismatch is a
``ProvenanceMismatch`` (an error, never a result).

Limits: empty folders are not compared (git does not track them, and an
empty folder imports nothing); a submodule (gitlink) entry must be an
empty folder or absent; the check reads every file once (milliseconds for a
target of a few thousand files), so it holds at the moment it runs: a
process that writes into a worktree later is seen by the next stage's check.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from kgate.errors import ProvenanceMismatch
from kgate.source import git, manifest

#: names listed per kind of difference before "+N more"
_SHOWN = 5


def verify_worktree(wt: Path, want_head: str, repo: Path, what: str = "worktree") -> None:
    """``wt`` must sit at ``want_head`` and hold exactly that commit's files (see the module docstring).
    ``what`` names the worktree in the message (e.g. "BENCH_BASE's worktree")."""
    if not wt.exists():
        raise ProvenanceMismatch(f"{what} {wt} is missing; rerun the stage that creates it")
    subs = git.substitutions(repo)
    if subs:
        raise ProvenanceMismatch(f"integrity: kgate's clone {repo} has an object substitution, which kgate never "
                                 f"makes: {'; '.join(subs)}; {what} {wt} cannot be trusted")
    head = git.head(wt)
    if head != want_head:
        raise ProvenanceMismatch(f"{what} {wt} is at {head}, the records say {want_head}")
    diffs = content_diff(wt, repo, want_head)
    if diffs:
        raise ProvenanceMismatch(f"integrity: {what} {wt} differs from commit {want_head[:12]} by content: "
                                 + "; ".join(diffs))


def content_diff(wt: Path, repo: Path, commit: str) -> list[str]:
    """What differs between ``wt``'s files and ``commit``'s tree, one message per kind (empty: identical)."""
    entries = git.tree_entries(repo, commit)
    algo = git.object_format(repo)
    gitlinks = {p for p, (mode, _) in entries.items() if mode == "160000"}
    changed: list[str] = []
    extra: list[str] = []
    seen: set[str] = set()
    root = str(wt)
    for folder, dirs, files in os.walk(wt):
        rel_folder = os.path.relpath(folder, root)
        rel_folder = "" if rel_folder == "." else rel_folder + "/"
        if not rel_folder:
            files = [f for f in files if f != ".git"]  # the linked worktree's pointer to the clone
            dirs[:] = [d for d in dirs if d != ".git"]
        for d in list(dirs):
            full = os.path.join(folder, d)
            if os.path.islink(full):  # a symlink to a folder is a file entry of git's
                dirs.remove(d)
                files.append(d)
            elif rel_folder + d in gitlinks:
                dirs.remove(d)
                inside = os.listdir(full)
                if inside:
                    extra.append(f"{rel_folder}{d}/ (a submodule's folder, not empty)")
                seen.add(rel_folder + d)
        for name in files:
            rel = rel_folder + name
            want = entries.get(rel)
            if want is None:
                extra.append(rel)
                continue
            seen.add(rel)
            mode, oid = want
            got_mode, got_oid = _file_id(os.path.join(folder, name), algo)
            if got_oid is None:
                changed.append(f"{rel} (not a regular file or symlink)")
            elif got_oid != oid or got_mode != mode:
                changed.append(rel + ("" if got_oid != oid else f" (mode {got_mode}, committed {mode})"))
    missing = sorted(p for p in entries if p not in seen and p not in gitlinks)
    if missing:  # a file whose blob the clone lacks is off disk by design (kgate.source.git, sparse worktrees)
        absent = set(git.absent_blobs(repo, commit))
        missing = [p for p in missing if p not in absent]
    out = []
    for label, names in (("changed", sorted(changed)), ("not in the commit (untracked or ignored)", sorted(extra)),
                         ("missing", missing)):
        if names:
            more = f" (+{len(names) - _SHOWN} more)" if len(names) > _SHOWN else ""
            out.append(f"{label}: {', '.join(names[:_SHOWN])}{more}")
    return out


def _file_id(path: str, algo: str) -> tuple[str, str | None]:
    """(git mode, blob id) of a file on disk as git would store it with no attribute applied; id None for
    anything that is neither a regular file nor a symlink (a fifo, a socket, a device)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        data = os.fsencode(os.readlink(path))
        mode = "120000"
    elif stat.S_ISREG(st.st_mode):
        with open(path, "rb") as fh:
            data = fh.read()
        mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
    else:
        return "", None
    h = hashlib.new(algo)
    h.update(b"blob %d\0" % len(data))
    h.update(data)
    return mode, h.hexdigest()


def verify_frozen(wt: Path, expected: dict[str, str]) -> None:
    """Every frozen path of the manifest (``{path: sha256}``) still has its BENCH_BASE hash in ``wt``."""
    changed = manifest.diff(expected, manifest.compute(wt, sorted(expected)))
    if changed:
        raise ProvenanceMismatch(f"frozen file(s) differ from the BENCH_BASE manifest in {wt}: {', '.join(changed)}")
