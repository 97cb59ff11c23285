#!/usr/bin/env python
"""The target's commits for a GPU node without network: a small shallow repository, packed as one tar.gz.

    python scripts/node_target.py --campaign liger-tvd-fused-scale-1127 --out target.tar.gz \\
        [--target <clone>] [--commit SHA ...]
    # on the node:
    mkdir -p target && tar -C target -xzf target.tar.gz
    snakemake --profile <profile> --config campaign=<name> target_path=$PWD/target

Method: the commits are the campaign's ``target.repo.baseline``, its candidate's ``ref`` when it has one, and
each ``--commit``, resolved in the clone (``--target``, else the campaign's ``target.repo.path``); with them
every commit on the way from the baseline to each of the others (``git rev-list --ancestry-path``), so their
history between the two is whole. The objects are those commits, their trees and their blobs, read tree by
tree (``git ls-tree -r -t``), never by walking history, so nothing older is carried; ``git pack-objects``
packs them into a new repository whose ``shallow`` list names every carried commit whose parents are not
carried. Each carried commit gets a branch (``carried/<sha>``), and the baseline is HEAD. The tar holds
that repository's ``.git`` only: kgate makes its own worktrees from it (``kgate.source.git``).

A blob the clone lacks (a mirror that leaves its largest files out, a partial clone) is left out and listed;
kgate checks such a commit out sparse, without those files, exactly as from the clone itself. Limits: a
submodule's commits are not carried (their gitlinks stay in the trees); the clone must hold every carried
commit and tree; the sizes printed are the pack's, before tar's compression.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kgate import campaign as campaign_mod  # noqa: E402
from kgate.errors import KgateError  # noqa: E402
from kgate.source.git import git, missing_objects  # noqa: E402


def commits_to_carry(clone: Path, baseline: str, others: list[str]) -> list[str]:
    """The baseline, the others, and every commit on the ancestry path from the baseline to each other one
    (full SHAs, each once, in that order)."""
    def full(ref: str) -> str:
        sha = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=clone, check=False).strip()
        if not sha:
            raise KgateError(f"{clone} has no commit '{ref}'")
        return sha

    base = full(baseline)
    out = [base]
    for ref in others:
        sha = full(ref)
        path = git("rev-list", "--ancestry-path", f"{base}..{sha}", cwd=clone).split()
        for c in [sha, *path]:
            if c not in out:
                out.append(c)
    return out


def objects_of(clone: Path, commits: list[str]) -> tuple[list[str], list[str]]:
    """Every object the commits need (the commits, their trees and blobs; gitlinks left out) and, apart, the
    ``<commit>:<path>`` of each blob the clone lacks."""
    wanted: dict[str, str] = {}
    for c in commits:
        wanted[c] = ""
        wanted[git("rev-parse", f"{c}^{{tree}}", cwd=clone).strip()] = ""
        for line in git("ls-tree", "-r", "-t", "-z", "--full-tree", c, cwd=clone).split("\0"):
            if not line:
                continue
            meta, path = line.split("\t", 1)
            mode, kind, oid = meta.split()
            if kind != "commit":
                wanted.setdefault(oid, f"{c[:12]}:{path}")
    missing = missing_objects(clone, wanted)
    return [o for o in wanted if o not in missing], sorted(wanted[o] for o in missing)


def build(clone: Path, commits: list[str], dest: Path) -> list[str]:
    """The shallow repository of ``commits`` at ``dest`` (a new folder); returns the absent blobs' places."""
    objects, absent = objects_of(clone, commits)
    git("init", "--quiet", str(dest))
    git("pack-objects", "--quiet", str(dest / ".git" / "objects" / "pack" / "pack"), cwd=clone,
        input_text="\n".join(objects) + "\n")
    carried = set(commits)
    shallow = [c for c in commits
               if any(p not in carried for p in git("rev-parse", f"{c}^@", cwd=clone).split())]
    (dest / ".git" / "shallow").write_text("".join(f"{c}\n" for c in shallow))
    git("update-ref", "--stdin", cwd=dest,
        input_text="".join(f"create refs/heads/carried/{c} {c}\n" for c in commits))
    git("symbolic-ref", "HEAD", f"refs/heads/carried/{commits[0]}", cwd=dest)
    return absent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--campaign", required=True, help="campaign name or file")
    p.add_argument("--out", required=True, type=Path, help="the tar.gz to write")
    p.add_argument("--target", type=Path, default=None, help="the clone (default: the campaign's target.repo.path)")
    p.add_argument("--commit", action="append", default=[], help="one more commit to carry (repeatable)")
    args = p.parse_args(argv)
    over = {"target_path": str(args.target.resolve())} if args.target else {}
    try:
        c = campaign_mod.load(args.campaign, overrides=over)
        return carry(c, args.out, args.commit)
    except KgateError as exc:
        raise SystemExit(f"node_target: {exc}") from None


def carry(c: campaign_mod.Campaign, out: Path, extra: list[str]) -> int:
    """Write ``out`` for campaign ``c`` (module doc) and print what it holds."""
    repo = (c.data.get("target") or {}).get("repo")
    if not repo:
        raise KgateError(f"campaign {c.name} has no target.repo (an sdist target needs no clone)")
    clone = c.existing_repo_path()
    ref = (c.data.get("candidate") or {}).get("ref")
    commits = commits_to_carry(clone, repo["baseline"], [*([ref] if ref else []), *extra])
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "target"
        absent = build(clone, commits, dest)
        size = sum(f.stat().st_size for f in (dest / ".git" / "objects" / "pack").iterdir())
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(out, "w:gz") as tar:
            tar.add(dest / ".git", arcname=".git")
    print(f"node_target: {len(commits)} commit(s) of {clone}, pack {size / 1e6:.1f} MB -> {out}")
    for c_ in commits:
        print(f"  {c_}")
    if absent:
        print(f"node_target: {len(absent)} blob(s) absent from the clone, left out (checked out sparse):")
        for a in absent:
            print(f"  {a}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
