"""Measurement core, coordinator side: rows, arms (worker processes) and GPU telemetry.

The timed stages (profile_baseline, profile_candidate, bench) never run the
target in their own process. Each arm is a long-lived ``python -m kgate.worker``
process whose PYTHONPATH starts with that arm's worktree and whose
TRITON_CACHE_DIR is the arm's own (``work/<c>/<g>/triton/bench-base`` or
``bench-cand``); the stage talks to it in JSON lines over stdin/stdout
(:class:`Arm`). Everything op-specific comes from the campaign's ``measure``
section (:class:`MeasureSpec`): the callable, the input generator file, the
rows, the kernel-name regexes and the temporaries the hypothesis removes.

docs/measurement.md states the rules these pieces implement and their limits.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate import gate as gate_mod
from kgate.campaign import ROOT, Campaign
from kgate.errors import ConfigError, KgateError, ProvenanceMismatch

CPU_TIMING_NOTE = "CPU timings are not meaningful"
TELEMETRY_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")


# rows and expressions


@dataclass(frozen=True, slots=True)
class Row:
    """One benchmark row: a name, a kind (dense, varlen, ...) and the values handed to ``make_inputs``."""

    name: str
    kind: str
    values: dict[str, Any]

    def variables(self) -> dict[str, float]:
        """Numeric scalar values, the names usable in ``temporaries[].bytes`` expressions."""
        return {k: v for k, v in self.values.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}

    def klass(self, key: str) -> Any:
        return self.values.get(key)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "values": self.values}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Row:
        return cls(name=d["name"], kind=d["kind"], values=dict(d["values"]))


def row_from_spec(spec: dict[str, Any], source: str) -> Row:
    if "name" not in spec:
        raise ConfigError(f"{source}: every row needs a name (got {spec})")
    values = {k: v for k, v in spec.items() if k != "kind"}
    return Row(name=str(spec["name"]), kind=str(spec.get("kind", "dense")), values=values)


_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
           ast.Pow: lambda a, b: a ** b}


def eval_expression(expr: str | int | float, variables: dict[str, float], key: str) -> float:
    """Evaluate an arithmetic expression over row variables (``B*T*H*D*4``).

    Only numbers, row variable names, + - * / // % ** and parentheses are
    allowed; anything else is a ``ConfigError`` naming ``key``.
    """
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return float(expr)
    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"key '{key}': '{expr}' is not an arithmetic expression ({exc.msg})") from exc

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id not in variables:
                raise ConfigError(f"key '{key}': '{expr}' uses '{node.id}', which the row does not define "
                                  f"(row variables: {', '.join(sorted(variables))})")
            return float(variables[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return float(_BINOPS[type(node.op)](walk(node.left), walk(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        raise ConfigError(f"key '{key}': '{expr}' may only use numbers, row variables and + - * / // % **")

    return walk(tree)


def compile_regex(pattern: str | None, key: str) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"key '{key}': '{pattern}' is not a regular expression ({exc})") from exc


def matching(names: dict[str, Any], rx: re.Pattern[str] | None) -> dict[str, Any]:
    """The entries of a kernel table whose names match ``rx`` (``re.search``)."""
    if rx is None:
        return {}
    return {k: v for k, v in names.items() if rx.search(k)}


# the campaign's measure section


@dataclass(frozen=True, slots=True)
class Temporary:
    name: str
    bytes_expr: str
    accesses: int

    def nbytes(self, row: Row) -> int:
        return int(eval_expression(self.bytes_expr, row.variables(), f"measure.temporaries.{self.name}.bytes"))


@dataclass(frozen=True, slots=True)
class MeasureSpec:
    """The resolved ``measure`` (+ ``profile``, ``bench``) sections for one device kind."""

    campaign: str
    cpu: bool
    callable: str
    inputs: Path
    dtype: str
    seed: int
    differentiate: tuple[int, ...]
    class_key: str
    classes: tuple[Any, ...]
    bar: float
    registry: str | None
    explicit_rows: tuple[Row, ...]
    removed: str
    replaced: str | None
    replacement: str | None
    temporaries: tuple[Temporary, ...]
    profile: dict[str, Any]
    bench: dict[str, Any]
    cpu_settings: dict[str, Any]
    cpu_setup: Path | None
    env_record: tuple[str, ...]

    @property
    def removed_rx(self) -> re.Pattern[str]:
        rx = compile_regex(self.removed, "measure.kernels.removed")
        assert rx is not None
        return rx

    @property
    def replaced_rx(self) -> re.Pattern[str]:
        rx = compile_regex(self.replaced or self.removed, "measure.kernels.replaced")
        assert rx is not None
        return rx

    @property
    def replacement_rx(self) -> re.Pattern[str] | None:
        return compile_regex(self.replacement, "measure.kernels.replacement")

    def expected_bytes(self, row: Row) -> int:
        """Bytes of the temporaries the hypothesis removes (each allocated once per call)."""
        return sum(t.nbytes(row) for t in self.temporaries)

    def removed_traffic_bytes(self, row: Row) -> int:
        """Global-memory traffic the hypothesis removes: each temporary's bytes times its accesses."""
        return sum(t.nbytes(row) * t.accesses for t in self.temporaries)

    def worker_init(self) -> dict[str, Any]:
        """The ``init`` request every worker of this campaign receives (identical for both arms)."""
        return {"callable": self.callable, "inputs_file": str(self.inputs), "dtype": self.dtype,
                "seed": self.seed, "differentiate": list(self.differentiate), "cpu": self.cpu,
                "cpu_setup": str(self.cpu_setup) if self.cpu_setup else None,
                "flush_bytes": self.cpu_settings.get("flush_bytes") if self.cpu else None,
                "env_record": list(self.env_record)}

    # row selection ------------------------------------------------------------

    def select(self, table: dict[str, Row], names: list[str] | None, key: str) -> list[Row]:
        if names is None:
            return list(table.values())
        missing = [n for n in names if n not in table]
        if missing:
            raise ConfigError(f"campaign {self.campaign}: key '{key}': unknown row(s) {', '.join(missing)} "
                              f"(rows: {', '.join(table)})")
        return [table[n] for n in names]

    def profile_rows(self, table: dict[str, Row]) -> list[Row]:
        if self.cpu:
            return self.select(table, self.cpu_settings.get("profile_rows"), "measure.cpu.profile_rows")
        return self.select(table, self.profile.get("rows"), "profile.rows")

    def gated_rows(self, table: dict[str, Row]) -> list[Row]:
        if self.cpu:
            return self.select(table, self.cpu_settings.get("gated"), "measure.cpu.gated")
        return self.select(table, self.bench.get("gated"), "bench.gated")

    def control_rows(self, table: dict[str, Row]) -> list[Row]:
        if self.cpu:
            return self.select(table, list(self.cpu_settings.get("controls", [])), "measure.cpu.controls")
        return self.select(table, list(self.bench.get("controls", [])), "bench.controls")

    def iterations(self) -> int:
        return int(self.cpu_settings["iterations"] if self.cpu else self.profile["iterations"])

    def samples(self) -> int:
        return int(self.cpu_settings["samples"] if self.cpu else self.bench["samples"])

    def endpoint_samples(self) -> int:
        return int(self.cpu_settings["samples"] if self.cpu else self.profile["endpoint_samples"])

    def rounds(self) -> tuple[int, int]:
        r = self.bench["rounds"]
        cap = int(self.cpu_settings["max_rounds"]) if self.cpu else int(r["max"])
        return int(r["min"]), max(cap, int(r["min"]))


def load_spec(campaign: Campaign, gpu: str) -> MeasureSpec | None:
    """The campaign's measurement settings, or None when it has no ``measure`` section."""
    d = campaign.data
    m = d.get("measure")
    if not m:
        return None
    inputs = ROOT / m["inputs"]
    if not inputs.is_file():
        raise ConfigError(f"{campaign.path}: key 'measure.inputs': file '{m['inputs']}' does not exist")
    cpu = gpu == "cpu"
    rows_src = m["cpu"]["rows"] if cpu else m.get("rows", [])
    rows = tuple(row_from_spec(r, f"{campaign.path}: key '{'measure.cpu.rows' if cpu else 'measure.rows'}'")
                 for r in rows_src)
    kernels = m["kernels"]
    temps = tuple(Temporary(t["name"], str(t["bytes"]), int(t.get("accesses", 2))) for t in m.get("temporaries", []))
    setup = d["gate"].get("cpu_setup")
    spec = MeasureSpec(
        campaign=campaign.name, cpu=cpu, callable=m["callable"], inputs=inputs, dtype=m["dtype"],
        seed=int(m["seed"]), differentiate=tuple(int(i) for i in m["differentiate"]),
        class_key=m["class_key"], classes=tuple(m["classes"]), bar=float(m["bar"]),
        registry=m.get("registry"), explicit_rows=rows,
        removed=kernels["removed"], replaced=kernels.get("replaced"), replacement=kernels.get("replacement"),
        temporaries=temps, profile=d.get("profile") or {}, bench=d.get("bench") or {},
        cpu_settings=m["cpu"], cpu_setup=(ROOT / setup) if (cpu and setup) else None,
        env_record=tuple(d.get("env", {}).get("record", [])))
    # fail at construction: every regex and expression the stages will use
    spec.removed_rx, spec.replaced_rx, spec.replacement_rx  # noqa: B018
    if ":" not in spec.callable:
        raise ConfigError(f"{campaign.path}: key 'measure.callable': expected 'module.path:name', got '{spec.callable}'")
    for row in rows:
        spec.expected_bytes(row)
    return spec


def row_table(explicit: tuple[Row, ...] | list[Row], registry_rows: list[Row] | None = None) -> dict[str, Row]:
    table: dict[str, Row] = {}
    for row in list(registry_rows or []) + list(explicit):
        if row.name in table:
            raise ConfigError(f"row '{row.name}' is defined twice (registry and measure.rows, or twice in a list)")
        table[row.name] = row
    return table


def table_from_record(profile_record: dict[str, Any]) -> dict[str, Row]:
    """The row table profile_baseline resolved (registry rows are read once, there)."""
    return {r["name"]: Row.from_dict(r) for r in profile_record["data"]["row_table"]}


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# worker processes


class WorkerFailure(KgateError):
    """A worker request failed. ``target`` is True when the arm's own code raised (or the
    process died) while running the op: for a candidate that is a measured failure."""

    def __init__(self, arm: str, message: str, *, target: bool, detail: str | None = None) -> None:
        super().__init__(f"arm {arm}: {message}")
        self.arm = arm
        self.target = target
        self.detail = detail


@dataclass
class Deadline:
    """The stage's time limit; every worker request waits at most the time that is left."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)


class Arm:
    """One arm's worker process and its JSON-lines channel.

    The worker's stdout carries only protocol lines; everything the target
    prints goes to its stderr, which is appended to ``log``.
    """

    def __init__(self, name: str, worktree: Path, triton_cache: Path, env: dict[str, str], log: Path,
                 deadline: Deadline, command: list[str] | None = None) -> None:
        self.name = name
        self.worktree = worktree
        self.triton_cache = triton_cache
        self.log = log
        self.deadline = deadline
        self._next = 0
        self._pending = ""
        self.info: dict[str, Any] = {}
        triton_cache.mkdir(parents=True, exist_ok=True)
        self.cache_entries_at_start = sum(1 for _ in triton_cache.iterdir())
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = log.open("a")
        self._log_fh.write(f"--- kgate worker {name}: {worktree}\n")
        self._log_fh.flush()
        # the worker speaks kgate.worker's protocol; another harness may too (scripts/train_throughput.py)
        argv = command or [sys.executable, "-m", "kgate.worker", "--arm", name]
        self.proc = subprocess.Popen(argv, cwd=worktree, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log_fh, text=True,
                                     bufsize=1)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, cmd: str, **args: Any) -> None:
        """Send one request; :meth:`receive` waits for its answer."""
        self._next += 1
        self._pending = cmd
        msg = json.dumps({"id": self._next, "cmd": cmd, "args": args})
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(msg + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise WorkerFailure(self.name, f"worker died before '{cmd}' ({self._tail()})", target=True) from exc

    def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """The answer to the last request (at most ``timeout`` or the stage's time left)."""
        cmd = self._pending
        wait = self.deadline.left() if timeout is None else min(timeout, self.deadline.left())
        try:
            line = self._lines.get(timeout=max(wait, 1.0))
        except queue.Empty as exc:
            self.kill()
            raise WorkerFailure(self.name, f"'{cmd}' did not answer within {wait:.0f} s (stage time limit); "
                                           f"see {self.log}", target=True) from exc
        if line is None:
            code = self.proc.wait()
            raise WorkerFailure(self.name, f"worker exited with {code} during '{cmd}' ({self._tail()}); see {self.log}",
                                target=True)
        resp = json.loads(line)
        if resp.get("id") != self._next:
            raise KgateError(f"arm {self.name}: protocol error: answer {resp.get('id')} to request {self._next}")
        if not resp["ok"]:
            self._log_fh.write(resp.get("traceback") or "")
            self._log_fh.flush()
            raise WorkerFailure(self.name, f"'{cmd}' failed: {resp['error']}", target=resp.get("kind") == "target",
                                detail=resp.get("traceback"))
        return resp["result"]

    def request(self, cmd: str, timeout: float | None = None, **args: Any) -> dict[str, Any]:
        """Send one request and wait for its answer."""
        self.send(cmd, **args)
        return self.receive(timeout)

    def _tail(self, n: int = 5) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return " | ".join(lines[-n:]) or "no output"

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"id": self._next + 1, "cmd": "quit", "args": {}}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                self.kill()
        self._log_fh.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def ask_all(arms: list[Arm], cmd: str, **args: Any) -> dict[str, dict[str, Any]]:
    """The same request to every arm at once (for requests that time nothing), answers by arm name."""
    for arm in arms:
        arm.send(cmd, **args)
    return {arm.name: arm.receive() for arm in arms}


def worker_env(ctx: Any, worktree: Path, cache: Path) -> dict[str, str]:
    """The gate's worker environment (worktree first on PYTHONPATH, own Triton cache, interpreter on CPU)."""
    env = gate_mod.build_env(ctx.gate_spec(), worktree, cache)
    env["KGATE_WORKER"] = "1"
    return env


def start_arms(ctx: Any, spec: MeasureSpec, arms: list[tuple[str, Path, Path]], deadline: Deadline) -> list[Arm]:
    """Start one worker per (name, worktree, triton cache), initialise them in parallel, and check
    that each imported the target from its own worktree. On any failure every worker is stopped."""
    started: list[Arm] = []
    try:
        for name, worktree, cache in arms:
            log = ctx.out_dir / f"worker-{name}.log"
            started.append(Arm(name, worktree, cache, worker_env(ctx, worktree, cache), log, deadline))
        for arm in started:
            arm.send("init", **spec.worker_init())
        for arm in started:
            arm.info = arm.receive()
            check_provenance(arm, arm.info)
    except BaseException:
        for arm in started:
            arm.close()
        raise
    return started


def check_provenance(arm: Arm, info: dict[str, Any]) -> None:
    root = str(arm.worktree.resolve())
    for what in ("module_file", "package_file"):
        where = info.get(what)
        if where and not str(Path(where).resolve()).startswith(root + os.sep):
            raise ProvenanceMismatch(f"arm {arm.name}: {what} {where} is not inside the worktree {root}; "
                                     "uninstall the target from the environment so each arm runs its own code")


def check_same_device(arms: list[Arm]) -> dict[str, Any]:
    """Both arms must see the same device (same GPU UUID); return that device."""
    devices = {a.name: a.info["device"] for a in arms}
    uuids = {d.get("uuid") for d in devices.values()}
    if len(uuids) != 1:
        raise ProvenanceMismatch(f"arms run on different devices: {devices}")
    return next(iter(devices.values()))


def compare_hashes(kind: str, row: str, by_arm: dict[str, dict[str, str]]) -> None:
    """Inputs (and output gradients) must be bit-identical across arms."""
    values = list(by_arm.values())
    if any(v != values[0] for v in values[1:]):
        raise ProvenanceMismatch(f"row {row}: {kind} hashes differ between arms {by_arm}; the generator "
                                 "must be deterministic in (row, seed, device, dtype)")


# GPU telemetry and exclusivity (nvidia-smi, or pynvml when importable)


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
    differ. A listed PID that is ours, or that runs ``kgate.worker`` in this
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


# small helpers shared by the stages


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


def geomean_values(values: list[float]) -> float:
    if not values:
        raise ConfigError("geomean of no values")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def fmt_bytes(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def inputs_fingerprint(campaign: Campaign) -> str:
    """sha256 of the campaign's input generator (a rule param: editing it reruns the timed stages)."""
    m = campaign.data.get("measure")
    if not m:
        return "no-measure"
    path = ROOT / m["inputs"]
    return sha256_file(path) if path.is_file() else "missing"
