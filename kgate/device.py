"""Device classes: which kind of accelerator a stage runs on.

The class keys results/ and reports/ so a run on one architecture never
satisfies another's inputs. It is read from nvidia-smi's product name
("NVIDIA H200" -> h200, "NVIDIA B300 SXM6 AC" -> b300) or is ``cpu`` when no
NVIDIA GPU is visible. Every stage re-checks that the device it runs on has
the class its paths claim.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from kgate.errors import ProvenanceMismatch


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask: a Slurm job's or taskset's share), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class Device:
    """The device a process sees."""

    klass: str
    name: str
    uuid: str | None
    capability: str | None
    driver: str | None

    def as_dict(self) -> dict[str, object]:
        return {"class": self.klass, "name": self.name, "uuid": self.uuid,
                "capability": self.capability, "driver": self.driver,
                "interpreter": self.klass == "cpu"}


def class_from_name(name: str) -> str:
    """'NVIDIA H200' -> 'h200'; 'NVIDIA GeForce RTX 4090' -> 'rtx4090'."""
    words = re.sub(r"^NVIDIA\s+", "", name.strip()).replace("GeForce ", "").split()
    if not words:
        return "unknown"
    head = words[0].lower()
    if head in ("rtx", "gtx", "tesla", "quadro") and len(words) > 1:
        head += words[1].lower()
    return re.sub(r"[^a-z0-9]", "", head)


def detect() -> Device:
    """Ask nvidia-smi for the first GPU this process may use (the first entry of
    CUDA_VISIBLE_DEVICES, an index or a UUID, else GPU 0); none means ``cpu``."""
    smi = _nvidia_smi()
    if smi is None:
        return Device("cpu", "cpu", None, None, None)
    exe, first = smi
    q = "name,uuid,compute_cap,driver_version"
    proc = subprocess.run([exe, f"--query-gpu={q}", "--format=csv,noheader", f"--id={first}"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0 or not proc.stdout.strip():
        return Device("cpu", "cpu", None, None, None)
    name, uuid, cap, driver = [x.strip() for x in proc.stdout.strip().splitlines()[0].split(",")]
    return Device(class_from_name(name), name, uuid, cap, driver)


@dataclass(frozen=True, slots=True)
class Memory:
    """The memory of the GPU a process sees, as nvidia-smi reports it (MiB, here in bytes)."""

    total_bytes: int
    used_bytes: int

    @property
    def free_bytes(self) -> int:
        return max(0, self.total_bytes - self.used_bytes)

    def as_dict(self) -> dict[str, int]:
        return {"total_bytes": self.total_bytes, "used_bytes": self.used_bytes, "free_bytes": self.free_bytes}


def _nvidia_smi() -> tuple[str, str] | None:
    """nvidia-smi's path and the ``--id`` of the first GPU this process may use (the first entry of
    CUDA_VISIBLE_DEVICES, an index or a UUID, else GPU 0), or None when it sees none."""
    exe = shutil.which("nvidia-smi")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if exe is None or visible in ("", "-1"):
        return None
    return exe, visible.split(",")[0].strip() if visible else "0"


def memory() -> Memory | None:
    """Total and used memory of the first GPU this process may use, now; None without one (or when nvidia-smi
    cannot say, as on some virtual GPUs: ``[N/A]``). Limits: used memory is every process's, this one's too."""
    smi = _nvidia_smi()
    if smi is None:
        return None
    exe, first = smi
    proc = subprocess.run([exe, "--query-gpu=memory.total,memory.used",
                           "--format=csv,noheader,nounits", f"--id={first}"], capture_output=True, text=True,
                          timeout=60)
    try:
        total, used = (int(x.strip()) for x in proc.stdout.strip().splitlines()[0].split(","))
    except (IndexError, ValueError):
        return None
    return Memory(total << 20, used << 20)


def check_class(expected: str) -> Device:
    """Return the device, or raise if its class is not ``expected``."""
    dev = detect()
    if dev.klass != expected:
        raise ProvenanceMismatch(
            f"this stage belongs to device class '{expected}' but runs on '{dev.klass}' ({dev.name}); "
            f"set --config gpu={dev.klass} or run it on a {expected} node")
    return dev


def describe(device: dict[str, object]) -> list[str]:
    """A recorded device in words: name, compute capability, driver, or the interpreter."""
    parts = [str(device["name"])] if device.get("name") else []
    if device.get("capability"):
        parts.append(f"sm {device['capability']}")
    if device.get("driver"):
        parts.append(f"driver {device['driver']}")
    if device.get("interpreter"):
        parts.append("Triton interpreter")
    return parts
