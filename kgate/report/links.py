"""Links from the report folder to the evidence a record names, and short names for those paths.

Records give paths relative to the repository root, or absolute: under the
repository root, under the working directory the record was written in
(``provenance.cwd``: the run's repository root, perhaps on another machine),
or elsewhere. ``evidence_href`` turns each into a relative, percent-encoded
link from ``reports/<campaign>/<gpu>/`` (``kgate.paths.report_dir``), or a
file:// link when it lies outside every known root; ``Links.short`` drops the
root and ``results/<campaign>/<gpu>/`` from the text shown. Imports only
``kgate.report.format`` of the report layer.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kgate import paths
from kgate.report.format import clean


@dataclass(frozen=True)
class Links:
    """Links and short names for paths that records give relative to the repository root (or absolute)."""

    campaign: str
    gpu: str
    root: Path | None = None
    # the working directories the records were written in (provenance.cwd): the run's repository root
    run_roots: tuple[str, ...] = ()

    @property
    def base(self) -> str:
        """The report folder, relative to the repository root (``reports/<campaign>/<gpu>``)."""
        return paths.report_dir(self.campaign, self.gpu).as_posix()

    def href(self, path: Any) -> str | None:
        return evidence_href(path, self.base, self.root, run_roots=self.run_roots)

    def short(self, path: Any) -> str:
        """The path without the repository root and ``results/<campaign>/<gpu>/`` (the link keeps it all)."""
        text = clean(path)
        if os.path.isabs(text):
            roots = ([self.root.as_posix()] if self.root is not None else []) + list(self.run_roots)
            for root in (r.rstrip("/") + "/" for r in roots):
                if text.startswith(root):
                    text = text[len(root):]
                    break
        prefix = paths.results(self.campaign, self.gpu).as_posix() + "/"
        return text[len(prefix):] if text.startswith(prefix) and len(text) > len(prefix) else text


def evidence_href(
    path: Any, base: str, root: Path | None = None, *, run_roots: Sequence[str] = ()
) -> str | None:
    """A relative link from the report folder ``base`` to ``path`` (relative to the repository root).

    An absolute path under ``root`` (the repository root, when known) is made
    relative to it, and so is one under a ``run_roots`` folder (the working
    directory a record was written in, ``provenance.cwd``: the repository root
    of the run, which may have been another machine); other absolute paths
    become file:// links. The result is percent-encoded, so a path can never
    turn into another URL scheme or break out of an attribute.
    """
    if not isinstance(path, str) or not path.strip():
        return None
    if os.path.isabs(path):
        under = next((Path(r) for r in ([root] if root is not None else []) + [Path(r) for r in run_roots]
                      if Path(path).is_relative_to(r)), None)
        if under is None:
            return "file://" + quote(Path(path).as_posix(), errors="replace")
        path = Path(path).relative_to(under).as_posix()
    rel = posixpath.relpath(posixpath.normpath(path.replace(os.sep, "/")), base)
    return quote(rel, errors="replace")
