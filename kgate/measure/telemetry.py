"""What the GPU and the host did while measuring: GPU telemetry, foreign processes, host load, notes.

:class:`Telemetry` reads clocks, power, temperature and throttle reasons of one GPU and the compute
processes on it (pynvml when importable, else ``nvidia-smi``; nothing on a CPU run).
:func:`foreign_processes` tells this stage's workers from anything else on the GPU, :func:`host_load`
reads the host's load average, and :func:`busy_note` / :func:`spread_note` turn a busy host or an
unstable probe into a reason line of the record. Each function's docstring states its method and
limits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kgate.errors import KgateError
from kgate.measure.arms import check_same_device

TELEMETRY_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")


class Telemetry:
    """Clocks, power, temperature and throttle reasons of one GPU; compute processes on it.

    Uses pynvml when importable, else ``nvidia-smi --query-gpu``. On a CPU run
    every query returns None (recorded as unavailable).
    """

    def __init__(self, uuid: str | None, cpu: bool) -> None:
        self.uuid = uuid
        self.cpu = cpu
        self.method = "unavailable (CPU)" if cpu else "nvidia-smi"
        self._nvml: Any = None
        self._handle: Any = None
        self._reason_field: str | None = None
        if cpu:
            return
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            self._handle = (pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid
                            else pynvml.nvmlDeviceGetHandleByIndex(0))
            self._nvml = pynvml
            self.method = "pynvml"
        except Exception as exc:  # noqa: BLE001 - pynvml is optional; the reason is recorded
            self.method = f"nvidia-smi (pynvml not usable: {type(exc).__name__})"
            if shutil.which("nvidia-smi") is None:
                raise KgateError("GPU run without nvidia-smi or pynvml: clocks and foreign processes cannot be "
                                 "checked; install the NVIDIA driver tools") from exc

    def _smi(self, *args: str) -> str:
        cmd = ["nvidia-smi", *args, "--format=csv,noheader,nounits"]
        if self.uuid:
            cmd.append(f"--id={self.uuid}")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise KgateError(f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def sample(self) -> dict[str, Any] | None:
        """One reading: sm/mem clock (MHz), power (W), temperature (C), active throttle reasons."""
        if self.cpu:
            return None
        if self._nvml is not None:
            n, h = self._nvml, self._handle
            reasons = n.nvmlDeviceGetCurrentClocksThrottleReasons(h) if hasattr(
                n, "nvmlDeviceGetCurrentClocksThrottleReasons") else n.nvmlDeviceGetCurrentClocksEventReasons(h)
            return {"sm_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                    "mem_clock_mhz": float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
                    "power_w": n.nvmlDeviceGetPowerUsage(h) / 1000.0,
                    "temperature_c": float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
                    "throttle_reasons": hex(int(reasons)), "host": host_load(), "t": time.time()}
        if self._reason_field is None:
            # the field was renamed in newer drivers; probe once
            for name in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
                try:
                    self._smi(f"--query-gpu={name}")
                    self._reason_field = name
                    break
                except KgateError:
                    continue
            else:
                self._reason_field = ""
        fields = list(TELEMETRY_FIELDS) + ([self._reason_field] if self._reason_field else [])
        parts = [p.strip() for p in self._smi(f"--query-gpu={','.join(fields)}").strip().splitlines()[0].split(",")]

        def num(text: str) -> float | None:
            try:
                return float(text)
            except ValueError:
                return None

        return {"sm_clock_mhz": num(parts[0]), "mem_clock_mhz": num(parts[1]), "power_w": num(parts[2]),
                "temperature_c": num(parts[3]), "throttle_reasons": parts[4] if len(parts) > 4 else None,
                "host": host_load(), "t": time.time()}

    def compute_apps(self) -> list[dict[str, Any]] | None:
        """Processes with a CUDA context on this GPU (pid, name, used MiB); None on CPU."""
        if self.cpu:
            return None
        if self._nvml is not None:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
            return [{"pid": int(p.pid), "name": None,
                     "used_mib": (p.usedGpuMemory or 0) / 2**20 if p.usedGpuMemory is not None else None}
                    for p in procs]
        out = []
        for line in self._smi("--query-compute-apps=pid,process_name,used_memory").strip().splitlines():
            if not line.strip() or "No running" in line:
                continue
            pid, name, used = [x.strip() for x in line.split(",")][:3]
            out.append({"pid": int(pid), "name": name, "used_mib": float(used) if used.isdigit() else None})
        return out


def foreign_processes(apps: list[dict[str, Any]] | None, ours: set[int]) -> dict[str, Any]:
    """Which compute processes on the GPU are not this stage's workers.

    nvidia-smi reports host PIDs; inside a PID namespace our workers' PIDs
    differ. A listed PID that is ours, or that runs ``kgate.measure.worker`` in this
    namespace, is ours. When no listed PID resolves here but their count
    equals the number of our workers, the PIDs are taken to be ours seen from
    the host namespace (recorded as such).
    """
    if apps is None:
        return {"checked": False, "foreign": [], "note": "no GPU"}
    foreign = []
    resolved = 0
    for app in apps:
        pid = app["pid"]
        if pid in ours:
            resolved += 1
        else:
            # includes another kgate worker (another stage sharing this GPU)
            foreign.append(app)
    note = None
    if foreign and resolved == 0 and len(apps) == len(ours) and not any(
            Path(f"/proc/{a['pid']}").exists() for a in apps):
        note = (f"{len(apps)} process(es) listed, none resolvable in this PID namespace and as many as our "
                "workers: taken to be ours")
        foreign = []
    elif not apps and ours:
        note = "no compute process listed, not even our workers (a container hides them?): exclusivity unverified"
    return {"checked": True, "apps": apps, "ours": sorted(ours), "foreign": foreign, "note": note,
            "ours_listed": bool(ours) and resolved == len(ours)}


#: a host whose 1-minute load exceeds this share of its CPUs is called busy
HOST_BUSY_SHARE = 0.5


def host_load() -> dict[str, Any]:
    """The host's load average (1 and 5 minutes, runnable processes) against its CPU count.

    Method: ``os.getloadavg`` at the moment of the call; ``busy`` when the
    1-minute load exceeds ``HOST_BUSY_SHARE`` of ``os.cpu_count()``. Limits: a
    load average lags (an exponential average) and counts every process on the
    host, inside this job's allocation or not; it cannot say which CPUs the
    workers ran on. It flags host-side time (Python overhead, launches) that
    other work may have inflated; GPU-side time is unaffected.
    """
    one, five, _ = os.getloadavg()
    cpus = os.cpu_count() or 1
    return {"load_1m": round(one, 2), "load_5m": round(five, 2), "cpus": cpus, "busy": one > HOST_BUSY_SHARE * cpus}


def busy_note(samples: Sequence[dict[str, Any]]) -> list[str]:
    """A reason line when any host-load sample was busy (else nothing)."""
    busy = [x for x in samples if x.get("busy")]
    if not busy:
        return []
    worst = max(busy, key=lambda x: x["load_1m"])
    return [f"host busy while measuring (load {worst['load_1m']} on {worst['cpus']} CPUs): host-side time in the "
            "endpoints (Python overhead, launches) may be inflated; device times are not"]


# max/min of a probe's repeated samples above which the probe is named unstable (a quiet host repeats
# the no-op launch probe within a few percent)
PROBE_SPREAD_LIMIT = 1.25


def spread_note(what: str, samples: Sequence[float], unit: str, used: str = "the median") -> list[str]:
    """A reason line when repeated samples of one probe spread beyond PROBE_SPREAD_LIMIT (max/min), else nothing.

    Method: the ratio of the largest to the smallest sample, no statistics: the probe repeats a fixed
    workload, so a wide ratio means something else shared the host or the GPU while it ran."""
    good = [float(x) for x in samples if x and x > 0]
    if len(good) < 2:
        return []
    lo, hi = min(good), max(good)
    if hi / lo <= PROBE_SPREAD_LIMIT:
        return []
    return [f"{what} unstable across its {len(good)} samples ({lo:.3g}-{hi:.3g} {unit}, x{hi / lo:.2f}): the host or "
            f"GPU was not quiet while it ran; the record uses {used}"]



def claim_device(arms: Sequence[Any], cpu: bool, stage: str) -> tuple[dict[str, Any], Telemetry, list[dict[str, Any]]]:
    """A timed stage's start on its device: both arms on one device (``arms.check_same_device``), telemetry
    for that device, and no foreign compute process on it before warm-up (a ``KgateError`` naming them:
    ``stage`` needs the GPU to itself). Returns the device, the telemetry and the exclusivity log's first entry."""
    device = check_same_device(list(arms))
    uuid = device.get("uuid")
    telemetry = Telemetry(f"GPU-{uuid}" if uuid and not str(uuid).startswith("GPU-") else uuid, cpu)
    ours = {a.pid for a in arms}
    exclusive_log = [{"when": "before warm-up", **foreign_processes(telemetry.compute_apps(), ours)}]
    if exclusive_log[0]["foreign"]:
        raise KgateError(f"the GPU runs foreign compute processes {exclusive_log[0]['foreign']}: {stage} needs "
                         "the GPU to itself (exclusive allocation)")
    return device, telemetry, exclusive_log
