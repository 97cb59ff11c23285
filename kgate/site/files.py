"""Site checks of files: the target clone is readable and kgate's folders are writable, here.

The same two checks from a compute node are one short Slurm job
(``kgate.site.cluster.check_compute_node``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kgate.site.common import Check


def check_target_path(path: str | None, hint: str = "") -> Check:
    """The target clone exists and is readable here; ``hint`` is appended to a failure."""
    name = "target_path"
    if not path:
        return Check(name, "skip", "no --target-path given")
    p = Path(path).expanduser()
    if not p.exists():
        return Check(name, "fail", f"target path {p} does not exist{f' ({hint})' if hint else ''}")
    if not os.access(p, os.R_OK) or (p.is_dir() and not os.access(p, os.X_OK)):
        return Check(name, "fail", f"target path {p} is not readable by uid {os.geteuid()}")
    if p.is_dir() and not (p / ".git").exists():
        return Check(name, "pass", f"target path {p} is readable (note: not a git clone)")
    return Check(name, "pass", f"target path {p} is readable")


def check_caches(dirs: Sequence[str]) -> Check:
    name = "caches"
    bad: list[str] = []
    for d in dirs:
        p = Path(d).expanduser()
        try:
            p.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=p, prefix=".kgate-doctor-"):
                pass
        except OSError as exc:
            bad.append(f"{p} ({exc.strerror or exc})")
    if bad:
        return Check(name, "fail", f"not writable: {'; '.join(bad)}")
    return Check(name, "pass", f"writable: {', '.join(str(Path(d).expanduser()) for d in dirs)}")
