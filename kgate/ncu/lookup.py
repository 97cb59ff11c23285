"""Where Nsight Compute is, and whether it may read the GPU's counters here: the one ncu lookup.

The preflight (``kgate.site.gpu.check_ncu``), the ncu stage and ``python -m
kgate ncu-export --reexport`` all find ncu through :func:`find_ncu`, so doctor
never calls ncu missing where the stage would find it. Method: ``$KGATE_NCU``
when set and not empty (taken as given, not checked), else ``ncu`` on PATH,
else ``/usr/local/cuda/bin/ncu``, else the last in sorted order (string
order, not version order) of ``/opt/nvidia/nsight-compute/*/ncu``.
:func:`admin_only` reads the driver's setting only; whether ncu really reads
counters shows when it runs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: the folders searched after PATH, in order
CUDA_GLOBS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
#: where the driver says who may read performance counters
NVIDIA_PARAMS = Path("/proc/driver/nvidia/params")


def find_ncu() -> str | None:
    """``$KGATE_NCU``, else ncu on PATH or in the usual CUDA folders (``CUDA_GLOBS``); None when none is there."""
    override = os.environ.get("KGATE_NCU")
    if override:
        return override
    exe = shutil.which("ncu")
    if exe:
        return exe
    for pattern in CUDA_GLOBS:
        hits = sorted(Path("/").glob(pattern.lstrip("/")))
        if hits:
            return str(hits[-1])
    return None


def admin_only() -> bool:
    """The driver restricts performance counters to admins (RmProfilingAdminOnly=1) and this is not root."""
    try:
        restricted = "RmProfilingAdminOnly: 1" in NVIDIA_PARAMS.read_text()
    except OSError:
        return False
    return restricted and os.geteuid() != 0
