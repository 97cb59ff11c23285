"""Running a correctness gate: the target's own pytest files in a worker process.

Method: pytest runs in a fresh process (in a session of its own, under
``kgate.testrun.guard``, so that it never outlives the stage) with cwd = the arm's worktree and
PYTHONPATH = that worktree's source folders first (then kgate's folder and the
inherited entries; where the target was imported from is verified), its own Triton cache, a per-test timeout
(pytest-timeout) and a whole-run timeout. ``kgate.testrun.outcomes_plugin`` records
every collected id and outcome as the run goes, so a crash or a hang still
leaves the finished tests and the id that was running; ``kgate.testrun.numerics_plugin``
records the numeric settings each test changed (torch flags, Triton knobs, the
recorded environment), even ones restored before the test ended. On CPU the Triton
interpreter shim (``kgate.testrun.interp_plugin``) and the campaign's cpu_setup file
are loaded inside the worker; nothing is written into the worktree.

Classification: failures, errors, collection errors in the target's code, a
crash (a fatal signal such as SIGSEGV or SIGABRT) or a hang (run timeout) are
*measured* results of the code under test, except CUDA out-of-memory failures beside other
pytest-xdist workers, which a run alone decides (``kgate.testrun.contention``); a worker killed from outside
(SIGKILL, SIGTERM, SIGINT that kgate did not send) is an error. Usage errors, internal pytest errors, an empty selection
and a target imported from outside the worktree are infrastructure errors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.device import usable_cores
from kgate.errors import ConfigError, KgateError, ProvenanceMismatch
from kgate.testrun import contention, memory_fit, outcomes_plugin, parallel_compile, resume
from kgate.testrun.guard import guarded

#: outcomes that are not failures; ``unavailable``: the Triton interpreter itself could not run the test (CPU)
OUTCOMES_OK = frozenset({"passed", "skipped", "xfailed", "unavailable"})
#: deaths by these signals are not the candidate's doing (a crash is SIGSEGV, SIGABRT, SIGBUS, SIGFPE, ...)
_EXTERNAL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT})


@dataclass(frozen=True, slots=True)
class GateSpec:
    """Everything that defines one gate run (the same for every arm)."""

    tests: tuple[str, ...]
    select: str | None
    pytest_args: tuple[str, ...]
    forbid_env: tuple[str, ...]
    python_path: tuple[str, ...]
    cpu: bool
    cpu_setup: Path | None
    test_timeout_s: int
    run_timeout_s: int
    workers: int = 1
    env_record: tuple[str, ...] = ()
    env_set: tuple[tuple[str, str], ...] = ()
    #: globs of variables put back after every test (``gate.restore_env``, ``kgate.testrun.numerics_plugin``)
    restore_env: tuple[str, ...] = ()
    #: what the kernel cache sets besides TRITON_CACHE_DIR (``kgate.cache.store.KernelCache.env``)
    cache_env: tuple[tuple[str, str], ...] = ()
    #: configs an autotuner may compile at once, all workers together (``kgate.testrun.parallel_compile``;
    #: 0: one at a time, as Triton does; never under the interpreter, which compiles nothing)
    compile_slots: int = 0
    #: each test id's largest GPU memory peak in the campaign's earlier gate runs (``kgate.testrun.memory_fit``)
    peaks: tuple[tuple[str, int], ...] = ()
    #: the GPU's free memory at the stage's start; None: on CPU, or not read
    free_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class GateRun:
    """What one pytest process measured."""

    command: list[str]
    exit_code: int | None
    wall_s: float
    timed_out: bool
    crashed: bool
    collected: list[str]
    deselected: list[str]
    tests: dict[str, dict[str, Any]]
    collect_errors: list[dict[str, Any]]
    running_at_end: str | None
    imports: dict[str, str | None]
    env: dict[str, str]
    log: str
    outcomes_path: str
    junit_path: str
    interp: dict[str, Any] | None = field(default=None)
    test_env: dict[str, str] = field(default_factory=dict)
    #: ids whose outcomes were carried over from an interrupted earlier attempt (kgate.testrun.resume)
    carried: tuple[str, ...] = ()
    #: the numeric settings at the end of the session (kgate.testrun.numerics_plugin); None: not recorded
    numerics_state: dict[str, str] | None = None
    #: the log of the run alone of the tests that ran out of GPU memory beside other workers, if any
    alone_log: str | None = None
    #: the run of those tests at a worker count fitted to their memory peaks, before any run alone
    #: (``kgate.testrun.memory_fit``: the fit, the ids it ran and its log), if any
    fitted: dict[str, Any] | None = None

    @property
    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {}
        for t in self.tests.values():
            c[t["outcome"]] = c.get(t["outcome"], 0) + 1
        return c

    @property
    def bad_ids(self) -> list[str]:
        """Ids that did not pass: failed/error/xpassed, plus collected ids that never finished."""
        bad = [k for k, t in self.tests.items() if t["outcome"] not in OUTCOMES_OK]
        bad += [i for i in self.collected if i not in self.tests]
        return sorted(set(bad))

    @property
    def green(self) -> bool:
        # pytest's exit 1 (tests failed) is green when every failure was decided passed by a run alone
        ok_exit = self.exit_code == 0 or (self.exit_code == 1 and bool(contention.settled_ids(self.tests)))
        return ok_exit and not self.timed_out and not self.crashed and not self.collect_errors and not self.bad_ids

    @property
    def gpu_peak(self) -> dict[str, Any] | None:
        """The largest per-test GPU memory peak (kgate.testrun.outcomes_plugin) with its test; None: none measured."""
        measured = [t for t in self.tests.values() if "gpu_peak_allocated_bytes" in t]
        if not measured:
            return None
        top = max(measured, key=lambda t: (t["gpu_peak_allocated_bytes"], t["nodeid"]))
        return {"tests_measured": len(measured), "nodeid": top["nodeid"],
                "peak_allocated_bytes": top["gpu_peak_allocated_bytes"],
                "peak_reserved_bytes": top.get("gpu_peak_reserved_bytes")}

    def summary(self) -> str:
        parts = [f"{n} {k}" for k, n in sorted(self.counts.items())]
        missing = len([i for i in self.collected if i not in self.tests])
        if missing:
            parts.append(f"{missing} not finished")
        if self.collect_errors:
            parts.append(f"{len(self.collect_errors)} collection error(s)")
        alone = contention.settled_ids(self.tests)
        if alone:
            first = self.tests[alone[0]]["alone"]
            workers = (first.get("before") or first)["workers"]
            at = sorted({int(self.tests[i]["alone"].get("decided_at_workers", 1)) for i in alone})
            how = "a run alone" if at == [1] else "a run at " + " or ".join(
                f"{w} worker(s) fitted to their memory peaks" if w > 1 else "1 worker (alone)" for w in reversed(at))
            parts.append(f"{len(alone)} of them decided by {how} (out of GPU memory, or on a worker that had "
                         f"run out, beside {workers - 1} other worker(s))")
        if self.carried:
            parts.append(f"{len(self.carried)} of them carried over from an interrupted attempt of the same commit")
        if self.timed_out:
            parts.append(f"run timed out after {self.wall_s:.0f} s (running: {self.running_at_end})")
        elif self.crashed:
            parts.append(f"process died (exit {self.exit_code}; running: {self.running_at_end})")
        return ", ".join(parts) or "nothing ran"

    def as_data(self) -> dict[str, Any]:
        return {
            "command": self.command, "exit_code": self.exit_code, "wall_s": round(self.wall_s, 3),
            "timed_out": self.timed_out, "crashed": self.crashed, "summary": self.summary(),
            "counts": self.counts, "collected": self.collected, "deselected": self.deselected,
            "tests": sorted(self.tests.values(), key=lambda t: t["nodeid"]),
            "collect_errors": self.collect_errors, "running_at_end": self.running_at_end,
            "imports": self.imports, "env": self.env, "test_env": self.test_env, "log": self.log,
            "outcomes": self.outcomes_path, "junit": self.junit_path, "interpreter": self.interp,
            "carried_over": list(self.carried), "numerics_state": self.numerics_state,
            "alone": contention.settled_ids(self.tests), "alone_log": self.alone_log, "fitted": self.fitted,
            "gpu_peak": self.gpu_peak,
        }


#: ``auto`` workers on a GPU: the cores less two (the stage and xdist's controller), at most this many
GPU_WORKERS_MAX = 16
#: ``auto`` workers under the CPU interpreter: one per four cores, at most this many (CI's 2 cores: 1, no xdist)
CPU_WORKERS_MAX = 4


def resolve_workers(setting: str, *, cpu: bool, cap: int | None = None, cores: int | None = None) -> int:
    """pytest-xdist workers of a gate run from ``--workers`` (a number, or ``auto``).

    ``auto`` on a GPU: the usable cores less two, between 1 and :data:`GPU_WORKERS_MAX` (each worker
    compiles Triton kernels on a core of its own and shares the one GPU); under the CPU interpreter,
    where every worker is a Python process running kernels in NumPy: a quarter of the cores, between 1
    and :data:`CPU_WORKERS_MAX`. ``cap`` (the campaign's ``gate.max_workers``, for a suite whose tests
    depend on running in one process in file order) bounds both. Limits: the core count is the affinity
    mask, not the load other jobs put on those cores.
    """
    n = usable_cores() if cores is None else cores
    if setting == "auto":
        workers = max(1, min(CPU_WORKERS_MAX, n // 4)) if cpu else max(1, min(GPU_WORKERS_MAX, n - 2))
    else:
        try:
            workers = int(setting)
        except ValueError as exc:
            raise ConfigError(f"--workers (resource test_workers): {setting!r} is neither a number nor 'auto'") from exc
        if workers < 1:
            raise ConfigError(f"--workers (resource test_workers): {workers} is below 1")
    return min(workers, cap) if cap else workers


def build_env(spec: GateSpec, worktree: Path, triton_cache: Path) -> dict[str, str]:
    """The worker's environment: inherited, with the worktree first on PYTHONPATH, plus kgate's settings."""
    for name in spec.forbid_env:
        if name in os.environ:
            raise ConfigError(f"gate.forbid_env: variable {name} is set in the environment; unset it and rerun")
    env = dict(os.environ)
    # the worktree first; then the folder holding kgate (for its pytest plugins); then what was
    # inherited (tools installed into a target folder). A copy of the target's package further
    # down the path can never win, and check_imports proves where it came from.
    entries = [str((worktree / p).resolve()) for p in spec.python_path]
    entries.append(str(paths.PACKAGE.parent))
    entries += [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e and e not in entries]
    env["PYTHONPATH"] = os.pathsep.join(entries)
    for name, value in spec.env_set:
        if name in spec.forbid_env:
            raise ConfigError(f"gate.env: {name} is also in gate.forbid_env")
        env[name] = value
    env.update(dict(spec.cache_env))
    env["TRITON_CACHE_DIR"] = str(triton_cache.resolve())
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if spec.cpu:
        env["TRITON_INTERPRET"] = "1"
    return env


def run(spec: GateSpec, worktree: Path, out_dir: Path, triton_cache: Path, *, tag: str,
        only_ids: list[str] | None = None, before_alone: Callable[[], object] | None = None,
        slots: str | None = None) -> GateRun:
    """Run the gate (or only ``only_ids``) once; write outcomes, junit and log under ``out_dir``.
    A full run resumes an interrupted earlier attempt of the same key (kgate.testrun.resume). Tests that
    ran out of GPU memory beside other workers run once more alone, and that run decides them
    (``kgate.testrun.contention``; its files are tagged ``<tag>-alone``); ``before_alone`` is called first
    (a caller's own GPU work beside the run ends there). ``slots``: compile slots the caller shares with its
    own compiling beside the run (:func:`compile_slots`); None: the run makes its own."""
    alone_tag = f"{tag}-alone"
    for p in out_dir.glob(f"{alone_tag}.*"):
        p.unlink()
    fitted_tag = f"{tag}-fitted"
    for p in out_dir.glob(f"{fitted_tag}.*"):
        p.unlink()
    first = _run_once(spec, worktree, out_dir, triton_cache, tag=tag, only_ids=only_ids, slots=slots)
    ids = contention.sharing_suspects(first.tests, spec.workers)
    if not ids:
        return first
    if before_alone is not None:
        before_alone()
    tests, workers, fitted = first.tests, spec.workers, None
    fit = recovery_fit(spec, ids)
    if fit is not None and fit.workers > 1:
        # the suspects at the count their peaks fit; what runs out of memory there too goes alone
        mid = _run_once(dataclasses.replace(spec, workers=fit.workers), worktree, out_dir, triton_cache,
                        tag=fitted_tag, only_ids=ids, slots=slots)
        tests = contention.settle(tests, mid.tests, ids, workers, decided_at=fit.workers)
        fitted = {**fit.as_data(), "ids": ids, "log": mid.log}
        ids = sorted(set(contention.sharing_suspects(mid.tests, fit.workers)) | {i for i in ids if i not in mid.tests})
        workers = fit.workers
        if not ids:
            return dataclasses.replace(first, tests=tests, fitted=fitted)
    solo = _run_once(dataclasses.replace(spec, workers=1), worktree, out_dir, triton_cache, tag=alone_tag,
                     only_ids=ids, slots=slots)
    return dataclasses.replace(first, tests=contention.settle(tests, solo.tests, ids, workers),
                               alone_log=solo.log, fitted=fitted)


def recovery_fit(spec: GateSpec, ids: list[str]) -> memory_fit.Fit | None:
    """The worker count the sharing suspects ``ids``, run by themselves, fit at by their earlier peaks
    (``spec.peaks``), at most the run's own and one per suspect; None when the free memory is unknown or any of
    them has no measured peak (then all go alone)."""
    known = dict(spec.peaks)
    if spec.free_bytes is None or not ids or any(i not in known for i in ids):
        return None
    return memory_fit.fit({i: known[i] for i in ids}, spec.free_bytes, most=spec.workers)


def _run_once(spec: GateSpec, worktree: Path, out_dir: Path, triton_cache: Path, *, tag: str,
              only_ids: list[str] | None, slots: str | None = None) -> GateRun:
    out_dir.mkdir(parents=True, exist_ok=True)
    triton_cache.mkdir(parents=True, exist_ok=True)
    outcomes = (out_dir / f"{tag}.outcomes.json").resolve()
    junit = (out_dir / f"{tag}.junit.xml").resolve()
    log = (out_dir / f"{tag}.pytest.log").resolve()
    interp_record = (out_dir / f"{tag}.interpreter.json").resolve()
    cmd = [sys.executable, "-m", "pytest", *(only_ids or spec.tests), *_isolation(worktree),
           "-p", "kgate.testrun.outcomes_plugin",
           "-p", "kgate.testrun.numerics_plugin", f"--kgate-numerics={','.join(spec.env_record)}",
           f"--kgate-outcomes={outcomes}", f"--junitxml={junit}", "-p", "no:cacheprovider", "-q", "-rfE",
           f"--timeout={spec.test_timeout_s}", "--timeout-method=thread" if spec.cpu else "--timeout-method=signal"]
    if spec.cpu:
        cmd += ["-p", "kgate.testrun.interp_plugin", f"--kgate-interp-record={interp_record}"]
        if spec.cpu_setup is not None:
            cmd.append(f"--kgate-setup={spec.cpu_setup.resolve()}")
    if spec.env_record:
        cmd.append(f"--kgate-env={','.join(spec.env_record)}")
    if spec.restore_env:
        cmd.append(f"--kgate-restore-env={','.join(spec.restore_env)}")
    if spec.select and not only_ids:
        cmd += ["-k", spec.select]
    if spec.workers > 1:
        cmd += ["-n", str(spec.workers)]
    cmd += list(spec.pytest_args)
    key = None if only_ids else resume.attempt_key(cmd, worktree, spec.env_set, sys.executable)
    carried = resume.carried(out_dir, tag, key)
    for p in [outcomes, junit, log, interp_record, *out_dir.glob(f"{tag}.outcomes.json.gw*")]:
        p.unlink(missing_ok=True)
    skip_file = resume.write_attempt(out_dir, tag, key, carried)
    env = build_env(spec, worktree, triton_cache)
    run_cmd = [*cmd, f"--kgate-skip-ids={skip_file}"] if skip_file else cmd
    start = time.time()
    timed_out = False
    with compile_slots(spec, slots) as held, log.open("w") as fh:
        # the slots' folder is the run's own or its caller's: not part of the attempt's key (kgate.testrun.resume)
        run_cmd = [*run_cmd, f"--kgate-compile-slots={held}"] if held else run_cmd
        fh.write("$ " + " ".join(run_cmd) + "\n")
        if carried:
            fh.write(f"kgate: {len(carried)} test(s) carried over from an interrupted attempt of the same commit "
                     f"and settings ({skip_file}); running the rest\n")
        fh.flush()
        # its own session (a timeout kills the whole tree at once) under kgate.testrun.guard, which kills that
        # session's group as soon as this process is gone, however it died: the run never outlives the stage
        with guarded(run_cmd, cwd=worktree, env=env, stdout=fh, stderr=subprocess.STDOUT) as proc, \
                _forward_signals(proc):
            try:
                code: int | None = proc.wait(timeout=spec.run_timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = None
    wall = time.time() - start
    if code is not None and -code in _EXTERNAL_SIGNALS:
        # SIGKILL/SIGTERM/SIGINT that kgate did not send come from outside (the OOM killer, scancel,
        # an admin): not a measurement of the candidate, so no record is written and a rerun measures
        raise KgateError(f"the test process was killed by {signal.Signals(-code).name} from outside kgate "
                         f"(out of memory, scancel, an operator?); nothing recorded, rerun the stage; see {log}")
    state = _read_outcomes(outcomes, log)
    if state.get("finished"):
        # the controller merged what the xdist workers wrote: their files served only an interrupted run
        for p in outcomes_plugin.worker_paths(outcomes):
            p.unlink()
    crashed = code is not None and (code < 0 or (code not in (0, 1, 2, 3, 4, 5)))
    if code in (3, 4) and not state.get("tests"):
        raise KgateError(f"pytest could not run the gate (exit {code}); see {log}")
    if code == 5:
        raise ConfigError(f"gate: no test was collected (tests {list(spec.tests)}, -k {spec.select!r}); see {log}")
    if code == 2 and not state.get("collect_errors") and not state.get("tests"):
        raise KgateError(f"pytest was interrupted before any test ran (exit 2); see {log}")
    interp = json.loads(interp_record.read_text()) if interp_record.exists() else None
    collected = [*carried, *(i for i in state.get("collected", []) if i not in carried)]
    return GateRun(command=run_cmd, exit_code=code, wall_s=wall, timed_out=timed_out, crashed=crashed,
                   collected=collected, deselected=[i for i in state.get("deselected", []) if i not in carried],
                   tests={**carried, **state.get("tests", {})}, collect_errors=state.get("collect_errors", []),
                   running_at_end=state.get("running"), imports=state.get("imports", {}),
                   env={k: env[k] for k in ("PYTHONPATH", "TRITON_CACHE_DIR", "TRITON_INTERPRET") if k in env},
                   log=str(log), outcomes_path=str(outcomes), junit_path=str(junit), interp=interp,
                   test_env=state.get("env", {}), carried=tuple(carried), numerics_state=state.get("numerics_state"))


@contextlib.contextmanager
def compile_slots(spec: GateSpec, given: str | None = None) -> Iterator[str | None]:
    """``DIR:N`` for ``--kgate-compile-slots``: ``given`` (a caller's, shared with its own compiling beside
    the run) or a folder of its own, removed after the block; None when the run compiles one config at a
    time (``compile_slots`` 0, or the interpreter)."""
    if spec.cpu or spec.compile_slots < 1:
        yield None
        return
    if given is not None:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="kgate-compile-slots-") as folder:
        yield parallel_compile.option(folder, spec.compile_slots)


@contextlib.contextmanager
def _forward_signals(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """While the worker runs, SIGTERM/SIGINT (scancel, Ctrl-C, a workflow shutting down) kill
    its whole process group and end this stage as an error: nothing is left running and no
    half-measured record is written."""
    def handler(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise KgateError(f"interrupted by signal {signal.Signals(signum).name}; the gate run was killed")
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _has_pytest_config(root: Path) -> bool:
    if (root / "pytest.ini").exists() or (root / ".pytest.ini").exists():
        return True
    for name, marker in (("pyproject.toml", "[tool.pytest.ini_options]"), ("tox.ini", "[pytest]"),
                         ("setup.cfg", "[tool:pytest]")):
        f = root / name
        if f.exists() and marker in f.read_text(errors="replace"):
            return True
    return False


def _isolation(worktree: Path) -> list[str]:
    """Keep pytest's rootdir, configuration and conftest search inside the worktree."""
    root = str(worktree.resolve())
    args = [f"--rootdir={root}", f"--confcutdir={root}"]
    if not _has_pytest_config(worktree):
        args.append(f"-c={paths.DATA / 'pytest-empty.ini'}")
    return args


def _load_outcomes(path: Path, log: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise KgateError(f"outcome record {path} is corrupt ({exc}); see {log}") from exc


def _read_outcomes(path: Path, log: Path) -> dict[str, Any]:
    """The run's outcome record. When pytest-xdist's controller did not finish (a timeout or a crash
    of the controller), its file lacks what only the workers knew: the collection, and the tests a
    worker ended that the controller had not yet heard of. Those come from the workers' own files
    (written after each test ends), and ``running`` lists what each worker was running."""
    state = _load_outcomes(path, log) if path.exists() else {}
    workers = [_load_outcomes(p, log) for p in outcomes_plugin.worker_paths(path)]
    if state.get("finished") or not workers:
        return state
    state = {"collected": [], "deselected": [], "tests": {}, "collect_errors": [], **state}
    outcomes_plugin.merge_collection(state, workers)
    for w in workers:
        for k, t in w.get("tests", {}).items():
            state["tests"].setdefault(k, t)
    running = sorted({w["running"] for w in workers if w.get("running") and w["running"] not in state["tests"]})
    state["running"] = ", ".join(running) or None
    return state


def check_imports(run_: GateRun, worktree: Path) -> None:
    """The code under test must come from the worktree, never from site-packages."""
    root = str(worktree.resolve())
    for name, where in run_.imports.items():
        if where is not None and not str(Path(where).resolve()).startswith(root + os.sep):
            raise ProvenanceMismatch(f"package '{name}' was imported from {where}, not from the worktree {root}; "
                                     f"uninstall it from the environment (pip uninstall) so the arm's code is tested")
