"""The software stack a kernel cache belongs to: GPU model, driver, CUDA, torch, Triton, Python.

Method: the device facts come from ``kgate.device`` (nvidia-smi: the product name, compute capability
and driver version of the GPU this process may use; ``cpu`` without one), the versions from package
metadata, and CUDA's version from ``torch/version.py`` read as text (torch is not imported: a stage
that only runs git must not pay for it). A stack's id is ``<device class>-<sha256 of its canonical
JSON, 16 hex>``: equal facts give the same folder on every machine, any differing fact another.

Limits: the id covers what is listed in :data:`FIELDS`, nothing else. Two GPUs of one product name
with different firmware, clocks or power limits share a stack (their autotune picks then come from
whichever ran first); a CUDA toolkit installed apart from torch's (ptxas on the PATH) is not part of
it, but Triton's own key holds the ptxas version of every compiled kernel.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
from dataclasses import asdict, dataclass, fields
from importlib import metadata, util
from pathlib import Path
from typing import Any

#: the facts of a stack, in the order a difference is reported
FIELDS = ("device_class", "gpu", "capability", "driver", "cuda", "torch", "triton", "python")


@dataclass(frozen=True, slots=True)
class Stack:
    """One device class and software stack. ``None`` is an absent fact (no GPU: no driver, no CUDA)."""

    device_class: str
    gpu: str | None
    capability: str | None
    driver: str | None
    cuda: str | None
    torch: str | None
    triton: str | None
    python: str

    @property
    def id(self) -> str:
        """``<device class>-<16 hex>``: the folder of this stack's cache (``kgate.paths.stack_cache``)."""
        return f"{self.device_class}-{hashlib.sha256(self.canonical().encode()).hexdigest()[:16]}"

    def canonical(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, **asdict(self)}

    def describe(self) -> str:
        """One line: ``h200: NVIDIA H200 (sm 9.0), driver 580.159.04, CUDA 12.8, torch 2.11.0, Triton 3.6.0``."""
        dev = self.gpu or ("Triton interpreter" if self.device_class == "cpu" else "no GPU name")
        if self.capability:
            dev += f" (sm {self.capability})"
        parts = [f"{self.device_class}: {dev}"]
        parts += [f"{label} {v}" for label, v in (("driver", self.driver), ("CUDA", self.cuda), ("torch", self.torch),
                                                  ("Triton", self.triton), ("Python", self.python)) if v]
        return ", ".join(parts)

    def differences(self, other: Stack) -> list[str]:
        """``field: <self's> here, <other's> in <what>`` for every fact that differs (FIELDS order)."""
        out = []
        for name in FIELDS:
            a, b = getattr(self, name), getattr(other, name)
            if a != b:
                out.append(f"{name} {_show(b)} there, {_show(a)} here")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Stack:
        """A stack from :meth:`as_dict` (its ``id`` is recomputed, and must match when given)."""
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(data))
        if missing:
            raise ValueError(f"stack facts missing: {', '.join(missing)}")
        stack = cls(**{k: data[k] for k in names})
        if "id" in data and data["id"] != stack.id:
            raise ValueError(f"stack id {data['id']} does not match its facts ({stack.id})")
        return stack


def _show(v: str | None) -> str:
    return "none" if v is None else v


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def torch_cuda() -> str | None:
    """CUDA's version torch was built with (``torch.version.cuda``), read from torch/version.py without importing torch."""
    spec = util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    f = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    if not f.is_file():
        return None
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", f.read_text(errors="replace"), re.M)
    return m.group(1) if m else None


def from_device(device: dict[str, Any], device_class: str | None = None) -> Stack:
    """This process's stack on ``device`` (``kgate.device.Device.as_dict()``; the stage's ``ctx.device``)."""
    klass = str(device_class or device.get("class") or "cpu")
    gpu = device.get("name") if klass != "cpu" else None
    return Stack(device_class=klass, gpu=str(gpu) if gpu else None,
                 capability=str(device["capability"]) if device.get("capability") else None,
                 driver=str(device["driver"]) if device.get("driver") else None,
                 cuda=torch_cuda() if klass != "cpu" else None,
                 torch=_version("torch"), triton=_version("triton"),
                 python=".".join(platform.python_version_tuple()[:2]))


def detect() -> Stack:
    """The stack of this process on the GPU it may use (``kgate.device.detect``)."""
    from kgate import device

    return from_device(device.detect().as_dict())
