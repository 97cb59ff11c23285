"""Pinned sdists in the sdist cache: found, downloaded when absent, checked against their sha256.

Method: the cache is searched for ``<name>-<version>.tar.gz`` or ``.zip``
(the name as written, with ``-`` as ``_`` and ``_`` as ``-``, case-insensitive).
When absent, ``pip download --no-deps --no-binary :all:`` fetches it into a
private folder inside the cache, then it is renamed into the cache, so two
campaigns fetching the same sdist at once never see a half-written archive.
On a machine without network the file can be put there by hand. The file's
sha256 (``kgate.hashing.sha256_file``) must equal the pinned one. Used by the
``target`` stage (a PyPI target) and by ``kgate.source.packages`` (the model's
packages). Limits: a download failure names pip's last stderr line only;
``requirement`` must be ``name==version``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kgate.errors import TargetError
from kgate.hashing import sha256_file


def _find_sdist(cache: Path, requirement: str) -> Path | None:
    name, _, version = requirement.partition("==")
    stems = {f"{name}-{version}", f"{name.replace('-', '_')}-{version}", f"{name.replace('_', '-')}-{version}"}
    for p in sorted(cache.glob("*")):
        for stem in stems:
            if p.name.lower() in (f"{stem}.tar.gz".lower(), f"{stem}.zip".lower()):
                return p
    return None


def fetch_sdist(requirement: str, expected_sha256: str, cache: Path) -> Path:
    """Return the cached sdist for ``requirement``, downloading it if absent."""
    cache.mkdir(parents=True, exist_ok=True)
    found = _find_sdist(cache, requirement)
    if found is None:
        # download into a private folder, then rename into the cache: two campaigns fetching
        # the same sdist at once never see a half-written archive
        with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--disable-pip-version-check", "-q", requirement, "-d", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            got = _find_sdist(Path(tmp), requirement)
            if got is not None:
                os.replace(got, cache / got.name)
        found = _find_sdist(cache, requirement)
        if proc.returncode != 0 or found is None:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise TargetError(f"target.pypi.requirement: cannot download the sdist of {requirement} into {cache} "
                              f"({tail}); on a machine without network, put the file there by hand")
    actual = sha256_file(found)
    if actual != expected_sha256:
        raise TargetError(f"target.pypi.sha256: {found} has sha256 {actual}, the campaign pins {expected_sha256}")
    return found
