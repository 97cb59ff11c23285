"""pytest plugin: run a target's Triton kernels on CPU under ``kgate.testrun.interp``.

Usage::

    python -m pytest -p kgate.testrun.interp_plugin \\
        [--kgate-autotune first|largest] \\
        [--kgate-setup kernels/<campaign>/cpu_setup.py] \\
        [--kgate-interp-record results/.../interp.json] \\
        tests/...

At load, before any conftest or test module is imported (the plugin's
``pytest_load_initial_conftests`` runs first), it:

1. calls ``kgate.testrun.interp.install(autotune_policy=...)``, so ``TRITON_INTERPRET=1``
   is set before the target imports Triton;
2. if ``--kgate-setup PATH`` is given, executes that Python file (the
   campaign's target-specific CPU setup) and, if the file defines
   ``setup()``, calls it; a dict it returns is recorded;
3. if ``--kgate-interp-record PATH`` is given, writes the provenance as JSON
   (``kgate.interp/1``): the install record plus ``setup`` = ``{path, sha256,
   result}`` or null. Under pytest-xdist only the controller writes it; every
   worker installs the same shim with the same options.

An install or setup problem is a usage error: pytest prints one line and exits
with status 4, never a test failure.

A test that fails because of the interpreter itself (``kgate.testrun.interp_gaps.interpreter_failure``)
is reported as skipped with the reason ``kgate: cannot run on CPU: <error>``; kgate's outcome
recorder records it as ``unavailable`` (not a failure of the target, and not a pass).
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
from pathlib import Path
from typing import Any

import pytest

from kgate.errors import KgateError
from kgate.records import atomic_write_text
from kgate.testrun import interp, interp_gaps

RECORD_SCHEMA = "kgate.interp/1"
_record_key = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kgate", "kgate: Triton interpreter shim")
    group.addoption("--kgate-autotune", choices=interp.AUTOTUNE_POLICIES, default="first",
                    help="which config an autotuned kernel keeps under the interpreter (default: first)")
    group.addoption("--kgate-setup", metavar="PATH", default=None,
                    help="Python file with the target's CPU setup, run after the shim is installed")
    group.addoption("--kgate-interp-record", metavar="PATH", default=None,
                    help="write the interpreter provenance as JSON to PATH")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    options = early_config.known_args_namespace
    try:
        record: dict[str, Any] = {"schema": RECORD_SCHEMA, **interp.install(autotune_policy=options.kgate_autotune)}
        record["setup"] = _run_setup(options.kgate_setup) if options.kgate_setup else None
    except KgateError as exc:
        raise pytest.UsageError(f"kgate: {exc}") from exc
    early_config.stash[_record_key] = record
    if options.kgate_interp_record and "PYTEST_XDIST_WORKER" not in os.environ:
        _write_json(Path(options.kgate_interp_record), record)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failure of the interpreter itself becomes a skip that says so (recorded as ``unavailable``)."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is None or not report.failed:
        return
    why = interp_gaps.interpreter_failure(call.excinfo.value)
    if why:
        path, line, _ = item.location
        report.outcome = "skipped"
        report.longrepr = (str(item.path), (line or 0) + 1, f"{interp_gaps.UNAVAILABLE} {why}")


def pytest_report_header(config: pytest.Config) -> str | None:
    record = config.stash.get(_record_key, None)
    if record is None:
        return None
    setup = record["setup"]["path"] if record["setup"] else "none"
    return (f"kgate interp: triton {record['triton']}, numpy {record['numpy']}, "
            f"fixes {','.join(record['fixes'])}, autotune {record['autotune_policy']}, setup {setup}")


def _run_setup(path_text: str) -> dict[str, Any]:
    path = Path(path_text).resolve()
    if not path.is_file():
        msg = f"--kgate-setup {path_text}: no such file"
        raise KgateError(msg)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    namespace = runpy.run_path(str(path), run_name="kgate_target_setup")
    setup = namespace.get("setup")
    result = setup() if callable(setup) else None
    if result is not None and not isinstance(result, dict):
        msg = f"--kgate-setup {path_text}: setup() returned {type(result).__name__}, expected a dict or None"
        raise KgateError(msg)
    try:
        json.dumps(result)
    except TypeError as exc:
        msg = f"--kgate-setup {path_text}: setup() returned a dict that is not JSON-serialisable ({exc})"
        raise KgateError(msg) from exc
    return {"path": str(path), "sha256": digest, "result": result}


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    """The provenance file, written like every kgate record (the user's umask, fsynced, atomic)."""
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")
