"""The gate of a change: its test files, their CPU selection, the frozen paths, and a target's conventions.

Method. The covering tests are the target's dependent-test helper's answer
for the changed source files when the campaign can name a helper
(``kgate.testrun.dependents``), else the test files of the base whose imports
reach a changed file (``kgate.init.pyindex``). The fixture's test files join
them: an existing file the fixture appends to is listed as it is; a new file
does not exist at the baseline, where the gate runs first, so its nearest
folder that does is listed instead and, when that folder holds other tests,
pytest's ``python_files`` (``-o`` in ``gate.pytest_args``) narrows the folder
to the gate's file names (explicitly listed files are collected whatever
their name).

Frozen: every ``conftest.py`` pytest loads for a gate file, and every file
of the target a gate file imports (``PyIndex.deps``: test helpers and the
reference implementations the tests compare against), except the changed
source files, which are the candidate (the gate's own files and the
fixture's are frozen by fixture_freeze anyway). A changed source file that a
gate file imports and whose name says it is a reference (``REFERENCE``) is
reported as an edit of the contract, not a candidate file.

The CPU selection: the gate is collected once, with kgate's gate runner
(``--collect-only``; under the interpreter with the campaign's CPU setup on a
machine without a GPU, as a GPU gate run on one). Up to
``CPU_ALL_MAX`` test ids run whole on CPU (``select.cpu: null``); more, or a
collection that fails, leave ``select.cpu`` a TODO. Limits: a count is not
a cost (a few large cases can still be slow under the interpreter); the
collection runs at the head, which holds the fixture's tests and the
candidate; a target convention (``CONVENTIONS``) is recognised by a marker
path only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kgate import device, paths
from kgate.errors import KgateError
from kgate.init import split
from kgate.init.pyindex import PyIndex
from kgate.testrun import missing_deps, runner

#: test ids at most that run whole on CPU under the interpreter without a -k selection
CPU_ALL_MAX = 24
#: a changed source file whose name (or folder) says it is what the tests compare against
REFERENCE = re.compile(r"(^|[_/])(naive|ref|refs|reference|references|oracle|torch_ref)([_/.]|$)")


@dataclass(frozen=True, slots=True)
class Convention:
    """A target convention recognised by a marker path at the base, and the campaign values it sets."""

    name: str
    marker: str
    values: dict[str, Any]
    why: str


#: conventions of targets kgate knows; each value is campaign data (merged into the written campaign)
CONVENTIONS = (
    Convention("fla-dependent-tests", "scripts/find_dependent_tests.py",
               {"gate": {"dependent_tests": {"helper": "scripts/find_dependent_tests.py"}}},
               "flash-linear-attention's dependent-test helper"),
    Convention("fla", "fla/__init__.py",
               {"gate": {"cpu_setup": "kernels/fla/cpu_setup.py", "forbid_env": ["FLA_CI_ENV"]},
                "env": {"record": ["TRITON_*", "FLA_*", "CUDA_*", "TORCH_*", "PYTORCH_*"]}},
               "flash-linear-attention: kgate's CPU setup for fla, FLA_CI_ENV (relaxes its asserts) forbidden"),
)


def conventions(base_files: frozenset[str]) -> list[Convention]:
    """The conventions whose marker the base has (and whose kgate files exist in this checkout)."""
    out = []
    for c in CONVENTIONS:
        setup = c.values.get("gate", {}).get("cpu_setup")
        if c.marker in base_files and (setup is None or (paths.PROJECT / setup).is_file()):
            out.append(c)
    return out


@dataclass(frozen=True, slots=True)
class Gate:
    """What ``gate.tests``, ``gate.pytest_args`` and ``frozen`` become, and how they were found."""

    tests: tuple[str, ...]
    pytest_args: tuple[str, ...]
    covering: tuple[str, ...]
    how: str
    frozen: tuple[str, ...]
    references: dict[str, str] = field(default_factory=dict)


def _existing_folder(path: str, base_files: frozenset[str]) -> str:
    folder = PurePosixPath(path).parent
    while str(folder) not in (".", ""):
        prefix = f"{folder}/"
        if any(f.startswith(prefix) for f in base_files):
            return str(folder)
        folder = folder.parent
    return "."


def _under(path: str, folder: str) -> bool:
    return folder == "." or path.startswith(folder.rstrip("/") + "/")


def compose(index: PyIndex, base_files: frozenset[str], sources: list[str], covering: list[str], how: str,
            appended: list[str], new_tests: list[str], fixture_paths: list[str]) -> Gate:
    """The gate entries, the python_files narrowing, the frozen paths and the references among ``sources``."""
    explicit = sorted(set(covering) | set(appended))
    folders = sorted({_existing_folder(p, base_files) for p in new_tests})
    listed = [*folders, *(t for t in explicit if not any(_under(t, f) for f in folders))]
    inside = [t for t in explicit if any(_under(t, f) for f in folders)]
    others = [f for f in base_files if split.is_test_module(f) and f not in explicit
              and any(_under(f, d) for d in folders)]
    args: tuple[str, ...] = ()
    if others:
        names = sorted({PurePosixPath(p).name for p in [*inside, *new_tests]})
        args = ("-o", "python_files=" + " ".join(names))
    gate_files = [*explicit, *new_tests]
    src = set(sources)
    references: dict[str, str] = {}
    frozen: set[str] = set()
    for t in gate_files:
        frozen |= set(index.conftests(t))
        for d in index.deps(t, via=True):
            if d in src:
                stem = str(PurePosixPath(d).with_suffix(""))
                if REFERENCE.search(stem):
                    references.setdefault(d, t)
                continue
            frozen.add(d)
    auto = set(gate_files) | set(fixture_paths)
    frozen = {f for f in frozen if f in base_files and f not in auto and not any(_under(f, d) for d in folders)}
    return Gate(tests=tuple(listed), pytest_args=args, covering=tuple(covering), how=how, frozen=tuple(sorted(frozen)),
                references=references)


def covering_steps(index: PyIndex, base_files: frozenset[str], sources: list[str]) -> dict[str, int]:
    """Test files of the base whose imports reach a changed source file, each with its fewest import steps
    (``PyIndex.steps``; 1: it imports a changed file itself), sorted by path."""
    targets = set(sources)
    steps = {t: index.steps(t, targets) for t in index.files if t in base_files and split.kind_of(t) == "test"}
    return {t: n for t, n in sorted(steps.items()) if n is not None}


def static_covering(index: PyIndex, base_files: frozenset[str], sources: list[str]) -> list[str]:
    """Test files of the base whose imports reach a changed source file."""
    return list(covering_steps(index, base_files, sources))


@dataclass(frozen=True, slots=True)
class Collected:
    """The gate collected at the head under the interpreter: the ids, or why it could not be collected."""

    ids: tuple[str, ...]
    problem: str | None
    #: pytest's usage error, when the target's own configuration names options nothing here defines
    usage_error: str | None = None


def _usage_error(log: Path) -> str | None:
    """pytest's ``unrecognized arguments`` line in a gate log (a plugin's options this environment lacks)."""
    if not log.exists():
        return None
    return next((ln.split("error: ", 1)[-1].strip() for ln in log.read_text(errors="replace").splitlines()
                 if "unrecognized arguments:" in ln), None)


def collect(worktree: Path, out_dir: Path, tests: tuple[str, ...], pytest_args: tuple[str, ...],
            python_path: tuple[str, ...], cpu_setup: str | None, forbid_env: tuple[str, ...]) -> Collected:
    """pytest's collection of the gate, run as kgate runs a gate on this machine (``kgate.testrun.runner``): under
    the interpreter with the campaign's CPU setup where no GPU is visible, as a GPU gate run elsewhere."""
    cpu = device.detect().klass == "cpu"
    spec = runner.GateSpec(tests=tests, select=None, pytest_args=(*pytest_args, "--collect-only"),
                           forbid_env=forbid_env, python_path=python_path, cpu=cpu,
                           cpu_setup=(paths.PROJECT / cpu_setup) if (cpu and cpu_setup) else None,
                           test_timeout_s=300, run_timeout_s=600)
    try:
        run = runner.run(spec, worktree, out_dir, out_dir / "triton-cache", tag="collect")
    except KgateError as exc:
        return Collected((), str(exc), _usage_error(out_dir / "collect.pytest.log"))
    if run.collect_errors:
        first = run.collect_errors[0]
        where = first.get("nodeid", first) if isinstance(first, dict) else first
        missing = missing_deps.absent(run, worktree)
        lacks = ""
        if missing:
            files = sorted({i for ids in missing.values() for i in ids})
            lacks = (f": this environment lacks module(s) {', '.join(sorted(missing))}, imported by {len(files)} "
                     f"test file(s) (install the target's test dependencies, or leave those files out of "
                     f"gate.tests)")
        return Collected(tuple(run.collected), f"{len(run.collect_errors)} collection error(s), first in {where}"
                                               f"{lacks} (see {run.log})")
    if run.exit_code not in (0, 5):
        return Collected(tuple(run.collected), f"pytest exited {run.exit_code} (see {run.log})",
                         _usage_error(Path(run.log)) if run.log else None)
    return Collected(tuple(run.collected), None)
