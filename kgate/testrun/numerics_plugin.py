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
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from kgate.testrun import numeric_state

PROPERTY = "kgate_numerics"
_CHANGES = pytest.StashKey[dict[str, dict[str, Any]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kgate-numerics", default=None,
                     help="Watch numeric settings around every test; the value is the comma-separated globs of "
                          "environment variables to watch (kgate.testrun.numeric_state).")


def pytest_configure(config: pytest.Config) -> None:
    patterns = config.getoption("--kgate-numerics")
    if patterns is not None:
        numeric_state.install(tuple(p for p in str(patterns).split(",") if p))


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
