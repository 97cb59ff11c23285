"""The kernel cache of one stack: where it lies, what every process gets, and what it held when a stage started.

Method: ``<root>/<stack id>/`` (``kgate.paths.stack_cache``) holds ``triton/`` (``TRITON_CACHE_DIR`` of
every gate run, worker and ncu process on the stack: compiled kernels and autotune results, in
Triton's own layout of one folder per key), ``target/<VARIABLE>/`` for each variable a campaign's
``cache.target_env`` names (the target's own cache of picks), ``stack.json`` (the stack's facts) and,
after ``kgate cache import``, ``imported.json`` (the entries a bundle brought). Every process also
gets ``TRITON_CACHE_AUTOTUNING=1``: Triton (>= 3.4) then writes each autotuner's timings to the cache
and reads them back, so a kernel whose Triton key did not change keeps the pick it got first, in
every stage, arm, rerun and campaign on the stack (docs/cache.md).

A :class:`Census` counts the cache's entries: a folder holding ``__grp__*.json`` is a compiled
kernel, one holding ``*.autotune.json`` an autotuner's timings. A stage *starts* ``cold`` (nothing
there), ``seeded`` (only what bundles brought) or ``warm`` (entries made here by earlier stages);
its record's provenance keeps that, the counts at start and end and the stack
(:meth:`KernelCache.provenance`). Limits: the census reads one folder listing per entry, so it
costs time on a slow shared filesystem in proportion to the entries; entries count by kind, not by
the kernels a stage needs (a cache warm for one campaign is warm for a second on the same target
only where they share kernels, which the counts at the stage's end show).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.cache.stack import Stack
from kgate.errors import ConfigError
from kgate.records import write_json

MANIFEST_SCHEMA = "kgate.cache-stack/1"
IMPORTED_SCHEMA = "kgate.cache-imported/1"
#: what every process on the stack gets besides TRITON_CACHE_DIR (recorded with the environment)
AUTOTUNE_ENV = {"TRITON_CACHE_AUTOTUNING": "1"}
STATES = ("cold", "seeded", "warm")


def entry_kind(names: list[str]) -> str:
    """What a Triton cache entry (the file names in its folder) holds: ``kernel``, ``autotune`` or ``other``
    (a launcher or driver utility compiled for this stack)."""
    if any(n.endswith(".autotune.json") for n in names):
        return "autotune"
    if any(n.startswith("__grp__") and n.endswith(".json") for n in names):
        return "kernel"
    return "other"


@dataclass(frozen=True, slots=True)
class Census:
    """What one kernel cache held at one moment."""

    entries: frozenset[str]
    kernels: int
    autotune: int
    other: int
    target_files: int

    def counts(self) -> dict[str, int]:
        return {"kernels": self.kernels, "autotune": self.autotune, "other": self.other,
                "target_files": self.target_files}


@dataclass(frozen=True, slots=True)
class KernelCache:
    """The kernel cache of ``stack`` under ``root``; ``target_env`` names the campaign's target-cache variables."""

    root: Path
    stack: Stack
    target_env: tuple[str, ...] = ()

    @property
    def folder(self) -> Path:
        return paths.stack_cache(self.root, self.stack.id)

    @property
    def triton(self) -> Path:
        """``TRITON_CACHE_DIR`` of every process on this stack."""
        return paths.triton_cache(self.root, self.stack.id)

    def target_dir(self, variable: str) -> Path:
        return paths.target_cache(self.root, self.stack.id, variable)

    def env(self) -> dict[str, str]:
        """Variables every gate run, worker and ncu process gets besides ``TRITON_CACHE_DIR`` (set by the caller):
        Triton's autotune cache switch and each target-cache variable pointing at its folder."""
        env = dict(AUTOTUNE_ENV)
        for var in self.target_env:
            env[var] = str(self.target_dir(var).resolve())
        return env

    def prepare(self) -> None:
        """Create the folders and write ``stack.json`` once; a manifest naming another stack is refused."""
        self.triton.mkdir(parents=True, exist_ok=True)
        for var in self.target_env:
            self.target_dir(var).mkdir(parents=True, exist_ok=True)
        man = paths.stack_manifest(self.root, self.stack.id)
        if man.exists():
            try:
                have = Stack.from_dict(json.loads(man.read_text())["stack"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"kernel cache: {man} is not a stack manifest ({exc}); move the folder away") from exc
            if have != self.stack:
                raise ConfigError(f"kernel cache: {man} names another stack ({'; '.join(self.stack.differences(have))})")
        else:
            write_json(man, {"schema": MANIFEST_SCHEMA, "stack": self.stack.as_dict()})

    def census(self) -> Census:
        entries: set[str] = set()
        kinds = {"kernel": 0, "autotune": 0, "other": 0}
        if self.triton.is_dir():
            with os.scandir(self.triton) as it:
                for e in it:
                    if not e.is_dir() or e.name.startswith("."):
                        continue
                    try:
                        names = os.listdir(e.path)
                    except FileNotFoundError:  # removed meanwhile (Triton replaces folders atomically)
                        continue
                    entries.add(f"triton/{e.name}")
                    kinds[entry_kind(names)] += 1
        target = 0
        for var in self.target_env:
            base = self.target_dir(var)
            if base.is_dir():
                for f in base.rglob("*"):
                    if f.is_file() and not f.name.startswith("."):
                        entries.add(f"target/{var}/{f.relative_to(base)}")
                        target += 1
        return Census(frozenset(entries), kinds["kernel"], kinds["autotune"], kinds["other"], target)

    def imported(self) -> frozenset[str]:
        """The entries bundles brought (``imported.json``); empty when nothing was imported."""
        led = paths.imported_ledger(self.root, self.stack.id)
        if not led.exists():
            return frozenset()
        return frozenset(json.loads(led.read_text()).get("entries", []))

    def state(self, census: Census) -> str:
        """``cold`` (empty), ``seeded`` (every entry came from an imported bundle) or ``warm``."""
        if not census.entries:
            return "cold"
        return "seeded" if census.entries <= self.imported() else "warm"

    def provenance(self, start: Census, end: Census | None = None) -> dict[str, Any]:
        """What a stage record's provenance keeps (key ``kernel_cache``)."""
        out: dict[str, Any] = {
            "root": str(self.root), "folder": str(self.folder), "triton_cache": str(self.triton),
            "stack": self.stack.as_dict(), "env": self.env(), "state_at_start": self.state(start),
            "at_start": start.counts(),
        }
        if end is not None:
            out["at_end"] = end.counts()
            out["added"] = {k: end.counts()[k] - v for k, v in start.counts().items()}
        return out
