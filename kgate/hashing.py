"""Content hashes of files: the one ``sha256_file``.

Method: sha256 over the file's bytes, read in 1 MiB chunks (a large sdist never sits in memory at
once); the hex digest. Used for pinned sdists (:mod:`kgate.source.sdist`) and the campaign's input
generator (:func:`kgate.measure.rows.inputs_fingerprint`). Limits: the bytes only, not the name,
mode or times.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """The sha256 hex digest of the file at ``path``."""
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
