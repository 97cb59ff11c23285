"""The frozen-file manifest: sha256 of every frozen path at BENCH_BASE.

Folders expand to the files git tracks under them. A later stage recomputes
the manifest in its own worktree; any difference names the paths.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from kgate.errors import ConfigError
from kgate.source import git


def expand(worktree: Path, patterns: list[str]) -> list[str]:
    """Tracked files under each frozen path (a file, a folder, or a glob)."""
    files: set[str] = set()
    for pat in patterns:
        out = git.git("ls-files", "--", pat, cwd=worktree).split()
        if not out:
            raise ConfigError(f"key 'frozen': path '{pat}' matches no tracked file in the target")
        files.update(out)
    return sorted(files)


def compute(worktree: Path, files: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for f in files:
        p = worktree / f
        out[f] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
    return out


def diff(expected: dict[str, str], actual: dict[str, str | None]) -> list[str]:
    """Paths whose hash changed or that disappeared."""
    return sorted(f for f, h in expected.items() if actual.get(f) != h)
