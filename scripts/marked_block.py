"""Replace the lines between two marker lines of a text file (the README's generated tables).

Method: the first line that is ``begin`` (stripped) and the first ``end`` after it delimit the block; the new
lines go between them, indented as the ``begin`` line is; nothing else in the file changes, and the file is
written atomically. A file without the pair is an error naming the file and the markers.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kgate.records import atomic_write_text  # noqa: E402


def replace_block(path: Path, begin: str, end: str, lines: list[str], who: str) -> None:
    """Write ``lines`` between the ``begin`` and ``end`` lines of ``path`` (``who`` names the caller in errors)."""
    text = path.read_text()
    src = text.splitlines()
    try:
        b = next(i for i, ln in enumerate(src) if ln.strip() == begin)
        e = next(i for i, ln in enumerate(src) if ln.strip() == end and i > b)
    except StopIteration:
        raise SystemExit(f"{who}: {path} has no {begin} ... {end} block") from None
    indent = src[b][: len(src[b]) - len(src[b].lstrip())]
    body = [f"{indent}{ln}" if ln else "" for ln in lines]
    atomic_write_text(path, "\n".join([*src[: b + 1], *body, *src[e:]]) + ("\n" if text.endswith("\n") else ""))
