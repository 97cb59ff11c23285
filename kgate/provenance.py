"""Provenance: what every record says about where and how it was made.

Versions come from package metadata (no imports of heavy packages), the
environment from the campaign's recorded patterns, Slurm facts from the job's
environment. Nothing defaults to 'unknown': an absent fact is ``None``.
"""

from __future__ import annotations

import fnmatch
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from kgate.slurm import slurm_provenance

PACKAGES = ("torch", "triton", "numpy", "snakemake", "snakemake-executor-plugin-slurm", "pytest", "ruff")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def recorded_env(patterns: list[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """Variables whose names match any glob in ``patterns`` (sorted)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if any(fnmatch.fnmatchcase(k, p) for p in patterns)}


def utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@dataclass
class Clock:
    """Wall clock of one stage (started at construction)."""

    start: float = field(default_factory=time.time)

    def stamp(self) -> dict[str, Any]:
        end = time.time()
        return {"started_utc": utc(self.start), "finished_utc": utc(end), "wall_s": round(end - self.start, 3)}


def collect(*, clock: Clock, device: dict[str, Any], env_patterns: list[str], local_rule: bool,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    prov: dict[str, Any] = {
        "host": socket.gethostname(),
        **clock.stamp(),
        "command": [sys.executable, *sys.argv],
        "cwd": os.getcwd(),
        "versions": versions(),
        "device": device,
        "env": recorded_env(env_patterns),
        "slurm": slurm_provenance(dict(os.environ)),
        "local_rule": local_rule,
    }
    if extra:
        prov.update(extra)
    return prov
