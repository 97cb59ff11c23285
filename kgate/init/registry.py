"""Benchmark registries of targets, one adapter per format: the ops a target registers, their rows, their inputs.

An adapter (``Adapter``) knows where a format's registry lives in a target,
reads it in a checkout, and writes the campaign's input generator for one of
its ops. ``ADAPTERS`` maps each format name (the values of the campaign key
``measure.registry.format``) to its adapter; ``detect`` picks the first whose
file the base has. To add a format: an adapter with the same four members,
registered in ``ADAPTERS``, and the format's name in the schema's enum (the
measuring stage's reader, ``kgate.measure.worker_facts``, must read it too).

``fla-ops`` (flash-linear-attention's ``benchmarks/ops/registry.py``):
``list_ops()``, ``get_op(name)`` giving an ``OpConfig`` (``import_path``,
``func_name``, ``inputs``, ``extra_kwargs``, ``skip_backward``,
``dim_constraints``, ``default_shapes``), module-level ``SHAPE_CONFIGS`` and
``generate_inputs(config, B, T, H, D, dtype, device, **extra)``. The listing
runs in a subprocess in kgate init's base worktree (the registry imports
torch and is the target's code), and each op's rows come from the measuring
worker's own reader (``Facts.registry``), so init shows the rows
profile_baseline will read at BENCH_BASE. The input generator it writes calls
the registry's ``generate_inputs`` under a forked torch RNG seeded with the
row's seed: both arms draw the same tensors, with the registry's shapes,
transforms and gradients. Limits: the registry is read at the base (a
change that adds the op's entry gives no rows); tiny CPU rows are chosen by
key (``B=1, T=16, H=1, D=16``, the smallest allowed value where the entry
constrains it, the smallest registry value for other keys), which may be
below what some op accepts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kgate import paths
from kgate.errors import KgateError

#: seconds a registry listing may take (it imports torch and the registry)
READ_TIMEOUT_S = 300
#: tiny values of the usual shape keys for CPU rows under the interpreter
TINY = {"B": 1, "T": 16, "H": 1, "D": 16}
#: row keys that are not shape values
NOT_SHAPE = ("name", "kind", "dispatch")


@dataclass(frozen=True, slots=True)
class RegistryOp:
    """One registered op: its name, the callable it times (``module:function``) and its rows at the base."""

    name: str
    callable: str
    rows: tuple[dict[str, Any], ...]
    skipped: tuple[str, ...]
    skip_backward: bool
    dim_constraints: dict[str, list[Any]]

    @property
    def module(self) -> str:
        return self.callable.partition(":")[0]


@dataclass(frozen=True, slots=True)
class Registry:
    """A target's registry as read at the base: its format, module, file and ops."""

    format: str
    module: str
    file: str
    ops: dict[str, RegistryOp]

    def entry(self, op: RegistryOp) -> str:
        """The value of ``measure.registry.op``: ``<registry module>:<op name>``."""
        return f"{self.module}:{op.name}"


class Adapter(Protocol):
    """One registry format."""

    format: str
    file: str

    def read(self, worktree: Path, python_path: tuple[str, ...]) -> Registry: ...

    def inputs_source(self, registry: Registry, op: RegistryOp) -> str: ...

    def cpu_rows(self, op: RegistryOp) -> list[dict[str, Any]]: ...


_FLA_LIST = r"""
import importlib.util, json, sys
from pathlib import Path
from kgate.measure.worker_facts import Facts

file, module = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location(module, Path.cwd() / file)
mod = importlib.util.module_from_spec(spec)
sys.modules[module] = mod
spec.loader.exec_module(mod)
names = mod.list_ops() if hasattr(mod, "list_ops") else sorted(getattr(mod, "_REGISTRY", None) or mod._OPS)
out = {}
for name in names:
    op = mod.get_op(name)
    # the measuring worker's own reader (it reads no worker state): the rows profile_baseline will see
    got = Facts.registry(None, f"{module}:{name}")
    out[name] = {"callable": f"{op.import_path}:{getattr(op, 'func_name', None) or op.name}",
                 "rows": got["rows"], "skipped": [r["name"] for r in got["skipped"]],
                 "skip_backward": bool(getattr(op, "skip_backward", False)),
                 "dim_constraints": {k: list(v) for k, v in (getattr(op, "dim_constraints", None) or {}).items()}}
print("KGATE-REGISTRY " + json.dumps(out))
"""

_FLA_INPUTS = '''"""Inputs for kgate's timed stages, from the target's own benchmark registry.

Op: ``{callable}``
Registry: ``{file}``, entry ``{op}``

Written by ``kgate init`` (campaign data, not kgate code). Named by the campaign's ``measure.inputs`` and loaded
inside each arm's worker, whose working folder is the arm's worktree. ``make_inputs(row, *, device, dtype,
seed)`` builds the op's inputs with the registry's own input factory (its ``generate_inputs``: the entry's
shapes, transforms and gradients) under a forked torch RNG seeded with ``seed``, so both arms draw
bit-identical tensors (kgate hashes them), and passes them with the entry's constant keyword arguments.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

REGISTRY_FILE = "{file}"
REGISTRY_MODULE = "{module}"
OP = "{op}"


def _registry() -> Any:
    if REGISTRY_MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(REGISTRY_MODULE, Path.cwd() / REGISTRY_FILE)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[REGISTRY_MODULE] = mod
        spec.loader.exec_module(mod)
    return sys.modules[REGISTRY_MODULE]


def make_inputs(row: dict[str, Any], *, device: torch.device, dtype: torch.dtype,
                seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    reg = _registry()
    op = reg.get_op(OP)
    shape = {{k: int(v) for k, v in row.items()
             if k not in {not_shape!r} and isinstance(v, (int, float)) and not isinstance(v, bool)}}
    forked = [device] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=forked):
        torch.manual_seed(seed)
        inputs = reg.generate_inputs(op, dtype=dtype, device=device, **shape)
    return (), {{**inputs, **dict(getattr(op, "extra_kwargs", None) or {{}})}}
'''


@dataclass(frozen=True, slots=True)
class FlaOps:
    """flash-linear-attention's ``benchmarks/ops/registry.py`` (module docstring)."""

    format: str = "fla-ops"
    file: str = "benchmarks/ops/registry.py"

    @property
    def module(self) -> str:
        return self.file.removesuffix(".py").replace("/", ".")

    def read(self, worktree: Path, python_path: tuple[str, ...]) -> Registry:
        env = dict(os.environ)
        entries = [str((worktree / p).resolve()) for p in python_path] + [str(paths.PACKAGE.parent)]
        env["PYTHONPATH"] = os.pathsep.join(entries + [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        try:
            proc = subprocess.run([sys.executable, "-c", _FLA_LIST, self.file, self.module], cwd=worktree, env=env,
                                  capture_output=True, text=True, timeout=READ_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise KgateError(f"{self.file}: reading the registry took more than {READ_TIMEOUT_S} s") from exc
        line = next((x for x in proc.stdout.splitlines() if x.startswith("KGATE-REGISTRY ")), None)
        if proc.returncode != 0 or line is None:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise KgateError(f"{self.file}: the registry could not be read at the base ({tail})")
        ops = {n: RegistryOp(name=n, callable=o["callable"], rows=tuple(o["rows"]), skipped=tuple(o["skipped"]),
                             skip_backward=o["skip_backward"], dim_constraints=o["dim_constraints"])
               for n, o in json.loads(line.split(" ", 1)[1]).items()}
        return Registry(format=self.format, module=self.module, file=self.file, ops=ops)

    def inputs_source(self, registry: Registry, op: RegistryOp) -> str:
        return _FLA_INPUTS.format(callable=op.callable, file=registry.file, module=registry.module, op=op.name,
                                  not_shape=NOT_SHAPE)

    def cpu_rows(self, op: RegistryOp) -> list[dict[str, Any]]:
        if not op.rows:
            return []
        values: dict[str, Any] = {}
        for key in op.rows[0]:
            if key in NOT_SHAPE or not isinstance(op.rows[0][key], int):
                continue
            allowed = op.dim_constraints.get(key)
            smallest = min(int(r[key]) for r in op.rows if isinstance(r.get(key), int))
            values[key] = min(allowed) if allowed else min(TINY.get(key, smallest), smallest)
        name = "tiny_" + "_".join(f"{k}{v}" for k, v in values.items())
        return [{"name": name, **values}]


ADAPTERS: dict[str, Adapter] = {a.format: a for a in (FlaOps(),)}


def detect(worktree: Path) -> Adapter | None:
    """The first adapter whose registry file the worktree has."""
    return next((a for a in ADAPTERS.values() if (worktree / a.file).is_file()), None)
