"""Inputs for kgate's timed stages, from the target's own benchmark registry.

Op: ``fla.ops.attnres:fused_attnres``
Registry: ``benchmarks/ops/registry.py``, entry ``fused_attnres``

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

REGISTRY_FILE = "benchmarks/ops/registry.py"
REGISTRY_MODULE = "benchmarks.ops.registry"
OP = "fused_attnres"


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
    shape = {k: int(v) for k, v in row.items()
             if k not in ('name', 'kind', 'dispatch') and isinstance(v, (int, float)) and not isinstance(v, bool)}
    forked = [device] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=forked):
        torch.manual_seed(seed)
        inputs = reg.generate_inputs(op, dtype=dtype, device=device, **shape)
    return (), {**inputs, **dict(getattr(op, "extra_kwargs", None) or {})}
