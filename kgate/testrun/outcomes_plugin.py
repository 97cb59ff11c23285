"""pytest plugin that records what a gate run collected and how each test ended.

Loaded as ``-p kgate.testrun.outcomes_plugin --kgate-outcomes PATH``. The JSON at
PATH is rewritten after every test (so a crash or a hang keeps what finished,
plus the id of the test that was running), and once more at session end. It
holds: collected and deselected ids, one entry per ended test id (its call
reported, or its teardown after a setup that failed or skipped, or
pytest-xdist's report for a test whose worker died; a test still in setup or
call, on any worker, has no entry) with its outcome
(passed, failed, error, skipped, xfailed, xpassed, and unavailable: the Triton interpreter
itself failed under kgate's interpreter plugin), duration and failure
text, collection errors, and where each top-level package of the tested tree
was imported from (so a stage can prove the code under test is the worktree's).

Works with pytest-xdist: workers write their collection beside PATH and the
controller merges them.

GPU memory: in a test process where the code under test initialised CUDA (the
plugin never imports torch), each test's entry gets the process's peak
allocated and reserved bytes from the previous test's teardown (the first
test: from CUDA's start) to the end of its own (``gpu_peak_allocated_bytes``,
``gpu_peak_reserved_bytes``; torch's caching allocator only, so memory taken
outside torch is not counted). After each teardown the allocator's unused
cached blocks go back to the driver (``torch.cuda.empty_cache``): W
pytest-xdist workers share one GPU, and a worker would otherwise hold the
largest reservation any of its tests made for the rest of the run. The return
is the same in every arm and changes no result, only what the other workers
can allocate. A CUDA error these calls raise (one a test left behind) is
recorded as the test's ``gpu_memory_error``, never raised into pytest. Limits:
one device per process (the current one); kernels still running
asynchronously at a teardown are not waited for.

Compiling ahead: with ``--kgate-compile-slots DIR:N`` every autotuner compiles
its configs on up to N threads before it benchmarks them
(``kgate.testrun.parallel_compile``); the record says whether that was
installed (``compile_ahead``), and each test's entry what was compiled ahead
while it ran (``compile_ahead_misses``, ``compile_ahead_configs``,
``compile_ahead_deferred``, ``compile_ahead_abandoned``: cut by a timeout,
``compile_ahead_wall_s``; none when nothing was).
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kgate.testrun import numerics_plugin, parallel_compile, tuning
from kgate.testrun.interp_gaps import UNAVAILABLE

_MAX_MSG = 4000
#: user property carrying a test's GPU memory peaks from the process that ran it to the recorder
GPU_MEMORY = "kgate_gpu_memory"
#: user property carrying what a test compiled ahead (kgate.testrun.parallel_compile)
COMPILE_AHEAD = "kgate_compile_ahead"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kgate-outcomes", default=None, help="Write kgate's outcome record to this JSON path.")
    parser.addoption("--kgate-skip-ids", default=None, help="File of test ids (one per line) an interrupted "
                     "earlier attempt finished: deselected here (kgate.testrun.resume).")
    parser.addoption("--kgate-env", default="", help="Comma-separated glob patterns of variables to record at the "
                                                     "end of the session (kgate.gates.env).")
    parser.addoption("--kgate-compile-slots", default=None, help="DIR:N: autotuners compile their configs on up "
                     "to N threads, sharing N lock files in DIR (kgate.testrun.parallel_compile).")


class _Recorder:
    def __init__(self, path: Path, config: pytest.Config) -> None:
        self.path = path
        self.config = config
        self.worker = getattr(config, "workerinput", {}).get("workerid")
        self.state: dict[str, Any] = {"schema": "kgate.pytest/1", "started_unix": time.time(), "finished": False,
                                      "collected": [], "deselected": [], "tests": {}, "collect_errors": [],
                                      "running": None, "exitstatus": None, "imports": {}, "env": {}}
        self.env_patterns = [p for p in str(config.getoption("--kgate-env") or "").split(",") if p]
        #: entries of tests that started and have not ended (under xdist, on several workers at once)
        self.pending: dict[str, dict[str, Any]] = {}

    def _write(self) -> None:
        target = self.path if self.worker is None else self.path.with_name(f"{self.path.name}.{self.worker}")
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        os.replace(tmp, target)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.state["collected"] = [i.nodeid for i in items]
        self._write()

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.state["deselected"].extend(i.nodeid for i in items)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.state["collect_errors"].append({"nodeid": report.nodeid, "message": _text(report)})
            self._write()

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.state["running"] = nodeid
        self._write()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        t = self.state["tests"].get(report.nodeid) or self.pending.setdefault(
            report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "duration_s": 0.0, "message": None})
        worker = getattr(report, "worker_id", None)
        if worker and "worker" not in t:
            # pytest-xdist's worker that ran it (kgate.testrun.contention reads each worker's tests in order)
            t["worker"] = str(worker)
        t["duration_s"] = round(t["duration_s"] + report.duration, 4)
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                t["outcome"] = "xfailed" if report.skipped else "xpassed"
            elif report.failed:
                t["outcome"] = "failed"
            elif report.skipped:
                t["outcome"] = "skipped"
        elif report.failed and t["outcome"] in ("passed", "skipped"):
            # a setup/teardown failure; a failed call stays "failed" (its message comes first)
            t["outcome"] = "error"
        elif report.skipped and report.when == "setup":
            t["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        for prop in (GPU_MEMORY, COMPILE_AHEAD):
            if dict(report.user_properties).get(prop):
                t.update(dict(report.user_properties)[prop])
        changes = dict(report.user_properties).get(numerics_plugin.PROPERTY)
        if changes:
            t.setdefault("numerics", {})[report.when] = changes
        if (report.failed or report.skipped) and t["message"] is None:
            t["message"] = _text(report)
            if report.skipped and UNAVAILABLE in t["message"]:
                # kgate's interpreter plugin: the interpreter itself failed (kgate.testrun.interp_gaps)
                t["outcome"] = "unavailable"
        elif report.failed:
            t["message"] = (t["message"] + "\n--- " + report.when + " ---\n" + _text(report))[-_MAX_MSG:]
        if report.when != "setup":
            # the call decides the outcome (a teardown error still updates it); a setup that failed or
            # skipped ends at teardown; xdist reports a test whose worker died with another phase name
            if report.nodeid in self.pending:
                self.state["tests"][report.nodeid] = self.pending.pop(report.nodeid)
            if report.when == "teardown":
                self.state["running"] = None
            self._write()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.state["exitstatus"] = int(exitstatus)
        self.state["finished"] = True
        self.state["imports"] = _imports(*_source_roots(Path.cwd()))
        # at the end: a variable the code under test set while it ran is seen
        self.state["env"] = {k: v for k, v in sorted(os.environ.items())
                             if any(fnmatch.fnmatchcase(k, p) for p in self.env_patterns)}
        numerics = numerics_plugin.session_state()
        if numerics is not None:
            self.state["numerics_state"] = numerics
        if self.worker is None:
            workers = [json.loads(f.read_text()) for f in worker_paths(self.path)]
            merge_collection(self.state, workers)
            for w in workers:
                for k, v in w["imports"].items():
                    self.state["imports"].setdefault(k, v)
            for key in ("env", "numerics_state"):
                merged: dict[str, set[str]] = {}
                for w in workers:
                    for k, v in (w.get(key) or {}).items():
                        merged.setdefault(k, set()).add(v)
                if merged:
                    # under xdist the workers ran the code: every value any worker ended with, whichever
                    # worker ran which test (the distribution of tests to workers is not deterministic)
                    self.state[key] = {k: " | ".join(sorted(v)) for k, v in sorted(merged.items())}
        self._write()


def _cuda() -> Any:
    """torch.cuda when the code under test imported torch and initialised CUDA in this process, else None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return cuda if cuda is not None and cuda.is_initialized() else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    """After a test's teardown: its GPU memory peaks onto the report, cached blocks returned, peaks reset."""
    report = yield
    if call.when == "teardown":
        _compile_ahead(report)
    cuda = _cuda() if call.when == "teardown" else None
    if cuda is None:
        return report
    memory: dict[str, Any] = {}
    try:
        memory["gpu_peak_allocated_bytes"] = int(cuda.max_memory_allocated())
        memory["gpu_peak_reserved_bytes"] = int(cuda.max_memory_reserved())
        cuda.empty_cache()
        cuda.reset_peak_memory_stats()
    except RuntimeError as exc:
        # a CUDA error the test left behind (sticky: "unknown error", an illegal address) also fails these
        # calls; raised here it would end the whole session as an internal error, so it goes into the test's
        # entry, and the test's own outcome says what happened
        memory["gpu_memory_error"] = f"{type(exc).__name__}: {exc}"[:_MAX_MSG // 10]
    report.user_properties.append((GPU_MEMORY, memory))
    return report


_AHEAD_SEEN: dict[str, float] = {}


def _compile_ahead(report: pytest.TestReport) -> None:
    """What this process compiled ahead since the previous test's teardown, onto the report (nothing when
    nothing was)."""
    delta = parallel_compile.since(_AHEAD_SEEN)
    _AHEAD_SEEN.update(parallel_compile.TALLY)
    if delta["misses"]:
        report.user_properties.append((COMPILE_AHEAD, parallel_compile.record(delta)))


def worker_paths(path: Path) -> list[Path]:
    """The pytest-xdist workers' outcome files beside ``path`` (not their half-written ``.tmp``)."""
    return [p for p in sorted(path.parent.glob(path.name + ".gw*")) if not p.name.endswith(".tmp")]


def merge_collection(state: dict[str, Any], workers: list[dict[str, Any]]) -> None:
    """Fill the controller's collected and deselected ids (only workers collect) and collection errors."""
    for w in workers:
        state["collected"] = state["collected"] or w.get("collected", [])
        state["deselected"] = state["deselected"] or w.get("deselected", [])
        state["collect_errors"] += [e for e in w.get("collect_errors", []) if e not in state["collect_errors"]]


def _text(report: Any) -> str:
    text = getattr(report, "longreprtext", "") or str(getattr(report, "longrepr", "") or "")
    return text[-_MAX_MSG:]


def _source_roots(root: Path) -> list[Path]:
    """``root`` and every ``PYTHONPATH`` folder inside it (a target's ``python_path``, e.g. a src layout's ``src``)."""
    out = [root]
    top = root.resolve()
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        p = Path(entry).resolve() if entry else None
        if p is not None and p.is_dir() and p != top and p.is_relative_to(top) and p not in out:
            out.append(p)
    return out


def _imports(*roots: Path) -> dict[str, str | None]:
    """For each top-level package or module present in one of ``roots``: where it was imported from."""
    out: dict[str, str | None] = {}
    for entry in (e for root in roots for e in sorted(root.iterdir())):
        name = entry.stem if entry.suffix == ".py" else entry.name
        if not (entry.is_dir() and (entry / "__init__.py").exists()) and entry.suffix != ".py":
            continue
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = getattr(mod, "__file__", None)
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the ids of ``--kgate-skip-ids`` (run first, so the recorder's collected list leaves them out)."""
    path = config.getoption("--kgate-skip-ids")
    if not path:
        return
    skip = set(Path(path).read_text().splitlines())
    gone = [i for i in items if i.nodeid in skip]
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [i for i in items if i.nodeid not in skip]


def pytest_configure(config: pytest.Config) -> None:
    # before any test runs: every autotuner's picks keyed by the constexprs it runs with, and the gate's picks
    # (tuned with other test processes on the GPU) kept from the timed stages' (kgate.testrun.tuning)
    tuning.install(namespace="gate")
    ahead: dict[str, Any] | None = None
    slots = config.getoption("--kgate-compile-slots")
    if slots:
        folder, n = parallel_compile.parse(slots)
        ahead = {"slots": n, "installed": parallel_compile.install(folder, n)}
    path = config.getoption("--kgate-outcomes")
    if path:
        recorder = _Recorder(Path(path).resolve(), config)
        if ahead is not None:
            recorder.state["compile_ahead"] = ahead
        config.pluginmanager.register(recorder, "kgate-recorder")
