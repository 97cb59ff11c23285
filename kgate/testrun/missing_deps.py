"""A baseline or fixture run that failed only because the environment lacks a module: an error, not a verdict.

Method: in the first run of baseline_tests and fixture_freeze (``kgate.testrun.judge.run_with_reruns``), each
collection error and each failed test whose message holds Python's ``ModuleNotFoundError: No module named
'<name>'`` is read for the module's top-level name. When the worktree provides no top-level module of that name
(a folder ``<top>``, a file ``<top>.py`` or ``<top>.*.so`` in a folder without ``__init__.py``), the module
belongs to the environment: the target's tests need a dependency that the stages' interpreter lacks
(Liger-Kernel's tests import transformers, for one), and the run measured the environment, not the code. That is
an infrastructure error naming the module (and, for a submodule of an installed package, that its version lacks
it), the first test file that imports it and the run's log (``MissingDependency``), raised before any rerun; the
baseline and BENCH_BASE are never called NO-GO for it.

Limits: only these two stages, which test the baseline's and BENCH_BASE's code; a candidate that imports a
module nobody installed breaks its own gate and stays NO-GO at candidate_gate. A module the worktree does
provide but could not import (a deleted submodule, a broken ``__init__``) stays a measured failure of the
target. An ``ImportError`` other than a missing module (a name a dependency's version lacks) is not read: a
version mismatch and a broken baseline look alike there, and it stays a failure.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from kgate.errors import MissingDependency
from kgate.testrun.runner import GateRun

#: Python's own wording of a module it could not find
PATTERN = re.compile(r"ModuleNotFoundError: No module named '([A-Za-z_][\w.]*)'")


def provides(worktree: Path, top: str) -> bool:
    """Whether the worktree holds a top-level module named ``top``: a package folder, a file or an extension
    whose folder has no ``__init__.py``, so that it can stand on ``sys.path`` (a source folder, or a folder
    pytest puts there for the tests below it). A subpackage of that name (Liger-Kernel's
    ``test/transformers/``) is not one."""
    for p in worktree.rglob(f"{top}*"):
        if ".git" in p.relative_to(worktree).parts or (p.parent / "__init__.py").exists():
            continue
        if (p.name == top and p.is_dir()) or p.name == f"{top}.py" or (p.name.startswith(f"{top}.")
                                                                        and p.suffix in (".so", ".pyd")):
            return True
    return False


def absent(run_: GateRun, worktree: Path) -> dict[str, list[str]]:
    """{module the environment lacks, as the error names it, whose top-level package the worktree does not
    provide: the ids whose failure names it}."""
    failures = [(e["nodeid"], e.get("message") or "") for e in run_.collect_errors]
    failures += [(i, t.get("message") or "") for i, t in run_.tests.items() if t.get("outcome") in ("failed", "error")]
    out: dict[str, list[str]] = {}
    own: dict[str, bool] = {}
    for nodeid, message in failures:
        for name in PATTERN.findall(message):
            top = name.split(".")[0]
            if top not in own:
                own[top] = provides(worktree, top)
            if not own[top]:
                out.setdefault(name, [])
                if nodeid not in out[name]:
                    out[name].append(nodeid)
    return out


def check(run_: GateRun, worktree: Path) -> None:
    """Raise ``MissingDependency`` when a failure of the run is a module the environment lacks (module doc)."""
    missing = absent(run_, worktree)
    if not missing:
        return
    name, ids = next(iter(missing.items()))
    top = name.split(".")[0]
    # a submodule of an installed package: another version of it may have the module
    version = (f" (package '{top}' is installed: its version lacks the module)"
               if top != name and importlib.util.find_spec(top) is not None else "")
    rest = sorted(m for m in missing if m != name)
    others = f"; also missing: {', '.join(rest)}" if rest else ""
    raise MissingDependency(
        f"the stages' python lacks module '{name}'{version}, which the target's tests import ({ids[0]}"
        f"{f' and {len(ids) - 1} more' if len(ids) > 1 else ''}) and the target does not provide{others}: "
        f"install the target's test dependencies where the stages run (the first python on PATH); log: {run_.log}")
