"""The arms of a measurement, coordinator side: worker processes and the checks across them.

The timed stages (profile_baseline, profile_candidate, bench) never run the
target in their own process. Each arm is a long-lived ``python -m kgate.measure.worker``
process whose PYTHONPATH starts with that arm's worktree and whose
TRITON_CACHE_DIR is the stack's kernel cache, shared by both arms (``kgate.cache``; Triton
keys its entries by kernel source and options, so an arm never runs the other's kernels); the
stage talks to it in JSON lines over stdin/stdout (:class:`Arm`). Everything op-specific comes
from the campaign's ``measure`` section (:class:`kgate.measure.rows.MeasureSpec`). Before any timing, :func:`start_arms` checks
that each arm imported the target from its own worktree, :func:`check_same_device` that both arms
see one GPU, :func:`compare_hashes` that their inputs are bit-identical.

docs/measurement.md states the rules these pieces implement and their limits.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate.errors import KgateError, ProvenanceMismatch
from kgate.measure.rows import MeasureSpec
from kgate.testrun import runner


class WorkerFailure(KgateError):
    """A worker request failed. ``target`` is True when the arm's own code raised (or the
    process died) while running the op: for a candidate that is a measured failure."""

    def __init__(self, arm: str, message: str, *, target: bool, detail: str | None = None,
                 unavailable: bool = False) -> None:
        super().__init__(f"arm {arm}: {message}")
        self.arm = arm
        self.target = target
        self.detail = detail
        #: the Triton interpreter itself failed (CPU): the op cannot run here, in either arm
        self.unavailable = unavailable


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
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_fh = log.open("a")
        self._log_fh.write(f"--- kgate worker {name}: {worktree}\n")
        self._log_fh.flush()
        # the worker speaks kgate.measure.worker's protocol; so does kgate/measure/harness/train_throughput.py
        argv = command or [sys.executable, "-m", "kgate.measure.worker", "--arm", name]
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
                                unavailable=resp.get("kind") == "unavailable",
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
        """End the worker and every process it started (a compiler's ``ptxas`` mid-compile): the worker is
        stopped first (it can start no more), its descendants are read from ``/proc`` and killed, then it is.
        Limits: a descendant that left the worker's tree before the stop (a daemon that double-forked) is not
        found; without ``/proc/PID/task/*/children`` only the worker is killed."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGSTOP)
                for pid in descendants(self.proc.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended on its own meanwhile; wait() below reaps it
            self.proc.kill()
            self.proc.wait()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children before their own (``/proc/PID/task/TID/children``, Linux); a
    process that ends while it is read is left out; [] where the kernel does not list children."""
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(c) for c in children.read_text().split()]
            except OSError:
                continue  # the thread or the process ended meanwhile
            found += kids
            todo += kids
    return found


def ask_all(arms: list[Arm], cmd: str, **args: Any) -> dict[str, dict[str, Any]]:
    """The same request to every arm at once (for requests that time nothing), answers by arm name."""
    for arm in arms:
        arm.send(cmd, **args)
    return {arm.name: arm.receive() for arm in arms}


def worker_env(ctx: Any, worktree: Path, cache: Path) -> dict[str, str]:
    """The gate's worker environment (worktree first on PYTHONPATH, own Triton cache, interpreter on CPU, the
    env.record globs the worker watches)."""
    spec = ctx.gate_spec()
    env = runner.build_env(spec, worktree, cache)
    env["KGATE_WORKER"] = "1"
    # the variables kgate.measure.worker_numerics watches around every call (the campaign's env.record)
    env["KGATE_ENV_RECORD"] = ",".join(spec.env_record)
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



def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


