"""Pinned sdists that add modules to the target's package (a campaign's ``model.packages``).

Method: each sdist is fetched into the sdist cache as the target's own sdist
is (``kgate.source.sdist.fetch_sdist``: downloaded into a private folder and renamed
into the cache, or put there by hand on a machine without network; its
sha256 must equal the campaign's). It is unpacked once into
``work/cache/packages/<sdist sha256, 16 hex>/``: into a temporary folder
beside it, then renamed, so a concurrent stage never sees a half-unpacked
tree, and a folder that exists is reused as it is (its name is the archive's
hash). The folder handed to the arms is the sdist's top-level folder named
``extends`` (``fla`` for flash-linear-attention); the training harness
appends it to that package's ``__path__`` after the arm's worktree, so a
module the target has itself always comes from the worktree.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tarfile
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.errors import ConfigError, TargetError
from kgate.source.sdist import fetch_sdist


def unpack(archive: Path, sha256: str, root: Path = paths.PACKAGE_CACHE) -> Path:
    """The sdist's top-level folder, unpacked once under ``root/<sha256[:16]>``."""
    dest = root / sha256[:16]
    if not dest.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        # mkdir, not mkdtemp (0700): the unpacked tree gets the user's umask like every file kgate writes
        tmp = root / f".unpack-{secrets.token_hex(8)}"
        tmp.mkdir()
        try:
            with tarfile.open(archive) as tf:
                tf.extractall(tmp, filter="data")
            try:
                os.rename(tmp, dest)
            except OSError:
                # another stage unpacked the same archive first: keep theirs
                if not dest.is_dir():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    tops = [p for p in dest.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise TargetError(f"{archive}: expected one top-level folder in the sdist, found {len(tops)} in {dest}")
    return tops[0]


def materialize(packages: list[dict[str, Any]], sdist_cache: Path, root: Path = paths.PACKAGE_CACHE) -> list[dict[str, Any]]:
    """Fetch, verify and unpack every package; return what each arm is given and what the record keeps."""
    out = []
    for i, spec in enumerate(packages):
        archive = fetch_sdist(spec["requirement"], spec["sha256"], sdist_cache)
        top = unpack(archive, spec["sha256"], root)
        folder = top / spec["extends"]
        if not folder.is_dir():
            raise ConfigError(f"model.packages[{i}].extends: {spec['requirement']} has no top-level folder "
                              f"'{spec['extends']}' (it has: {', '.join(sorted(p.name for p in top.iterdir()))})")
        out.append({"requirement": spec["requirement"], "sha256": spec["sha256"], "extends": spec["extends"],
                    "sdist": str(archive), "folder": str(folder.resolve()),
                    "adds": sorted(p.name for p in folder.iterdir() if p.name != "__pycache__")})
    return out
