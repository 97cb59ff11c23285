"""pytest plugin that watches the numeric settings around every test (``kgate.testrun.numeric_state``).

Loaded as ``-p kgate.testrun.numerics_plugin --kgate-numerics=PATTERNS`` (PATTERNS: the campaign's
``env.record`` globs, comma-separated; torch's flags and Triton's knobs are always watched). Each phase of
each test (setup, call, teardown) is one window: the settings it changed, even ones it restored before it
ended, go into that phase's report as the user property ``kgate_numerics``
(``{setting: {"start", "during", "end"}}``), which pytest-xdist carries to the controller; the outcome
recorder (``kgate.testrun.outcomes_plugin``) files them under the test's entry (``numerics``) and records
the settings as they stand at the end of the session (``numerics_state``). candidate_gate compares both
with the fixture run's (``kgate.gates.numerics``). Windows read their start, so what a test changes is
told apart from what earlier tests (or imports) left behind.

``--kgate-restore-env=PATTERNS`` (the campaign's ``gate.restore_env``) also puts every environment variable
matching those globs back, after each test's teardown, to the value it had when the process's first test
started (unset included). A suite whose tests set a variable process-wide and never restore it then gives
every test the same start, whatever ran before it in its process: under pytest-xdist the order in which
tests share a process no longer changes what a test sees or what the watch records. The restore runs
outside every window, so it is never recorded as a test's change. Limits: a test that relied on an earlier
test's leftover now sees the session's value (``gate.env`` pins such a value for every test); state other
than the environment (a module that read a variable at import, a compiled kernel) is not put back.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Generator
from typing import Any

import pytest

from kgate.testrun import numeric_state

PROPERTY = "kgate_numerics"
_CHANGES = pytest.StashKey[dict[str, dict[str, Any]]]()


class Restore:
    """The variables matching ``patterns``, as they stood when the first test started, put back after each test."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        self.start: dict[str, str] | None = None

    def _names(self) -> set[str]:
        return {n for n in os.environ if any(fnmatch.fnmatchcase(n, p) for p in self.patterns)}

    def take(self) -> None:
        """Note the start once, before the first test's setup."""
        if self.start is None:
            self.start = {n: os.environ[n] for n in self._names()}

    def apply(self) -> None:
        """Put every matching variable back to the start."""
        if self.start is None:
            return
        for name in sorted(self._names() | set(self.start)):
            want = self.start.get(name)
            if want is None:
                os.environ.pop(name, None)
            elif os.environ.get(name) != want:
                os.environ[name] = want


_RESTORE: list[Restore] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kgate-numerics", default=None,
                     help="Watch numeric settings around every test; the value is the comma-separated globs of "
                          "environment variables to watch (kgate.testrun.numeric_state).")
    parser.addoption("--kgate-restore-env", default=None,
                     help="Put the environment variables matching these comma-separated globs back after every "
                          "test to their values when the first test started (the campaign's gate.restore_env).")


def pytest_configure(config: pytest.Config) -> None:
    patterns = config.getoption("--kgate-numerics")
    if patterns is not None:
        numeric_state.install(tuple(p for p in str(patterns).split(",") if p))
    restore = config.getoption("--kgate-restore-env")
    if restore:
        _RESTORE[:] = [Restore(tuple(p for p in str(restore).split(",") if p))]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    for r in _RESTORE:
        r.take()


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    for r in _RESTORE:
        r.apply()


def _window(item: pytest.Item) -> Generator[None, Any, Any]:
    watch = numeric_state.installed()
    if watch is None:
        return (yield)
    watch.begin(fresh=True)
    try:
        return (yield)
    finally:
        item.stash[_CHANGES] = watch.end()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _window(item))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _window(item))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    return (yield from _window(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, Any]:
    report = yield
    changes = item.stash.get(_CHANGES, None)
    if changes:
        report.user_properties.append((PROPERTY, changes))
    item.stash[_CHANGES] = {}
    return report


def session_state() -> dict[str, str] | None:
    """The settings at the end of the session (None when the plugin is not watching in this process)."""
    return numeric_state.state() if numeric_state.installed() is not None else None
