"""Static campaign checks: what the campaign file alone decides, refused at DAG build.

:func:`load` is ``kgate.campaign.load`` (the schema and the path checks) followed
by :func:`check`; the DAG build (``kgate.workflow.resolve``) and every stage job
(``kgate.stages.common.execute``) load through it, so they refuse a campaign the
same way: one ``ConfigError`` line
``<campaign file>: key '<dotted.key>': <what is wrong, with the value>``.
The campaign's settings differ only between CPU and GPU runs
(``kgate.measure.rows.load_spec``: ``gpu == "cpu"``), so both kinds are checked
whatever device the run is on. Checked, with the helpers the stages use:

- regular expressions (Python ``re``): ``candidate.forbid_patterns[].pattern``,
  ``dispatch.classes[].tests``, ``measure.kernels.*`` (``load_spec``) and
  ``ncu.kernels.*`` (``kgate.measure.rows.compile_regex``);
- rows (``measure.rows``, ``measure.cpu.rows``, ``dispatch.rows``,
  ``dispatch.cpu_rows``): no negative value (row values are sizes); a row's
  ``cu_seqlens`` (packed sequence boundaries) starts at 0, increases strictly
  and ends at the row's ``T`` when it has one; a dispatch row names a declared
  class and has a ``measure`` section (``kgate.measure.rows.dispatch_rows``);
- ``measure`` per device kind (``load_spec``): the callable, the kernel regexes,
  ``temporaries[].bytes`` over every explicit row (and not negative); the row
  names in ``profile.rows``, ``bench.gated``, ``bench.controls``, ``ncu.rows``
  and ``measure.cpu.*`` (``MeasureSpec.select``); ``bench.endpoints``: each
  kind has a gated row (``MeasureSpec.endpoints``, the endpoint gates'
  kinds); ``measure.classes`` (the benchmark's ``class_*`` gates): each class
  is the ``class_key`` value of a gated row, on a GPU only (on CPU those gates
  never decide);
- ``measure.differentiate: []`` (an op without a backward): ``profile.mode``,
  ``bench.modes`` and ``ncu.mode`` say ``fwd``;
- ``reference.callable``: its file exists, and the campaign has a ``measure``
  section (``kgate.measure.reference.load``);
- the fixture's test modules (``kgate.source.overlay.created_test_files``): each
  lies under a ``gate.tests`` folder and is not an entry itself (it does not
  exist at the baseline, where the same paths run), and its name matches the
  ``python_files`` that ``gate.pytest_args`` sets with ``-o``/``--override-ini``,
  if it sets one (else fixture_freeze's fixture_tests_collected would fail after
  two stages of GPU time: the attnres replay's first GPU run did).

Not checkable here, left to the stages: rows a ``measure.registry`` gives are
read from BENCH_BASE at run time (``profile_baseline``), so on a GPU with a
registry the row names not among the explicit rows are not checked, the
registry counts as giving gated rows of kind ``dense`` (the kind its rows get)
and the classes are not checked; ``bench`` and ``ncu`` keep their own checks.
Neither are a row's values checked against the input generator's own rules
(e.g. ``B == 1`` for a packed row), nor ``gate.select`` (pytest ``-k``), nor a
``python_files`` the target's own pytest configuration sets (fixture_freeze's
fixture_tests_collected gate catches a module those leave out).
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kgate import campaign as campaign_mod
from kgate.campaign import Campaign
from kgate.errors import ConfigError
from kgate.measure import model_spec, reference
from kgate.measure.rows import MeasureSpec, Row, compile_regex, dispatch_rows, load_spec, row_from_spec, row_table
from kgate.source import overlay

#: the row value that holds packed sequence boundaries, and the total it must end at
CU_SEQLENS, TOKENS = "cu_seqlens", "T"
#: the row lists of the campaign (key, path in the data)
ROW_LISTS = (("measure.rows", ("measure", "rows")), ("measure.cpu.rows", ("measure", "cpu", "rows")),
             ("dispatch.rows", ("dispatch", "rows")), ("dispatch.cpu_rows", ("dispatch", "cpu_rows")))
#: the kind of every registry row (kgate.stages.profile_baseline.registry_rows)
REGISTRY_KIND = "dense"


def load(spec: str | Path, overrides: dict[str, Any] | None = None) -> Campaign:
    """``kgate.campaign.load`` and then every static check: the campaign a run may use."""
    c = campaign_mod.load(spec, overrides)
    check(c)
    return c


def check(c: Campaign) -> None:
    """Every static check of a loaded campaign; the first problem is one ``ConfigError`` line."""
    d = c.data
    _regexes(c)
    _overlays(c)
    for key, where in ROW_LISTS:
        node: Any = d
        for part in where:
            node = (node or {}).get(part)
        for spec in node or []:
            with _named(c, key):
                _row(row_from_spec(spec, f"key '{key}'"), key)
    for cpu in (False, True):
        with _named(c, "dispatch.cpu_rows" if cpu else "dispatch.rows"):
            if dispatch_rows(d, cpu) and not d.get("measure"):
                raise ConfigError(f"key '{'dispatch.cpu_rows' if cpu else 'dispatch.rows'}': the comparison rows "
                                  "need a measure section (its callable and inputs)")
    for gpu in ("gpu", "cpu"):
        with _named(c, "measure"):
            spec = load_spec(c, gpu)
        if spec is not None:
            _measure(c, spec)
        with _named(c, "model"):
            model_spec.load_spec(c, gpu)
    with _named(c, "reference.callable"):
        if reference.load(d) is not None and not d.get("measure"):
            raise ConfigError("key 'reference': the reference runs on the inputs of measure.inputs and needs a "
                              "measure section")


def _overlays(c: Campaign) -> None:
    """The overlays' edits, read without a target: the fixture's stay inside ``fixture.test_paths``, and no edit of
    the fixture or an overlay candidate leaves the tree or reads a file its folder lacks. (A candidate's paths
    against ``candidate.allowed_paths`` stay a gate of candidate_build: a verdict, not a configuration error.)"""
    with _named(c, "fixture.overlay"):
        touched = overlay.edit_paths(overlay.select(c.data["fixture"]["overlay"], c.target_identity))
        allowed = c.fixture_test_paths
        outside = [p for p in touched if not any(fnmatch.fnmatchcase(p, g) for g in allowed)]
        if outside:
            raise ConfigError(f"key 'fixture.overlay': the fixture edits non-test path(s) {outside} "
                              f"(allowed by fixture.test_paths: {list(allowed)})")
        _created_tests_run(c, overlay.created_test_files(
            overlay.select(c.data["fixture"]["overlay"], c.target_identity)))
    source = c.candidate_source
    if source.kind == "overlay":
        with _named(c, "candidate.overlay"):
            overlay.edit_paths(overlay.select(source.value, c.target_identity))


def _created_tests_run(c: Campaign, created: list[str]) -> None:
    """Each test module the fixture creates is one the gate's pytest run collects: under a ``gate.tests`` folder
    (not named itself: the same paths run at the baseline, where it does not exist yet; an entry with ``::``
    names tests of an existing file, so it covers none), with a name inside the ``python_files`` of
    ``gate.pytest_args`` when it sets one."""
    entries = [posixpath.normpath(t) for t in c.data["gate"]["tests"] if "::" not in t]
    named = [p for p in created if any(posixpath.normpath(t.split("::")[0]) == p for t in c.data["gate"]["tests"])]
    if named:
        raise ConfigError(f"key 'gate.tests': names test module(s) {named} that the fixture creates, absent at the "
                          "baseline, so baseline_tests would collect nothing from them: name their folder and narrow "
                          "it with python_files in gate.pytest_args")
    outside = [p for p in created if not any(t == "." or p == t or p.startswith(t.rstrip("/") + "/") for t in entries)]
    if outside:
        raise ConfigError(f"key 'gate.tests': the fixture creates test module(s) {outside} under no gate.tests "
                          f"file or folder ({list(c.data['gate']['tests'])}): the gate would never run them")
    names = _python_files(list(c.data["gate"].get("pytest_args") or []))
    unnamed = [p for p in created if names and not any(fnmatch.fnmatchcase(posixpath.basename(p), g) for g in names)]
    if unnamed:
        raise ConfigError(f"key 'gate.pytest_args': the fixture creates test module(s) {unnamed} whose names are "
                          f"outside its python_files {names}: pytest would not collect them")


def _python_files(args: list[str]) -> list[str]:
    """The ``python_files`` globs pytest arguments set (``-o python_files=...``, ``-opython_files=...``,
    ``--override-ini[=]python_files=...``; the last one wins, as in pytest); empty when none is set."""
    found: list[str] = []
    for i, arg in enumerate(args):
        value = None
        if arg in ("-o", "--override-ini") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--override-ini="):
            value = arg.removeprefix("--override-ini=")
        elif arg.startswith("-o") and arg != "-o":
            value = arg[2:]
        if value and value.startswith("python_files="):
            found = value.removeprefix("python_files=").split()
    return found


@contextmanager
def _named(c: Campaign, key: str) -> Iterator[None]:
    """Re-raise a helper's ConfigError as one line naming the campaign file (and ``key`` if it names none)."""
    try:
        yield
    except ConfigError as exc:
        msg = str(exc)
        if msg.startswith(f"{c.path}:"):
            raise
        msg = msg.removeprefix(f"campaign {c.name}: ")
        if not msg.startswith("key '"):
            msg = f"key '{key}': {msg}"
        raise ConfigError(f"{c.path}: {msg}") from exc


def _regexes(c: Campaign) -> None:
    d = c.data
    found: list[tuple[str, str]] = []
    for i, rule in enumerate(d["candidate"].get("forbid_patterns") or []):
        found.append((f"candidate.forbid_patterns.{i}.pattern", rule["pattern"]))
    for k in (d.get("dispatch") or {}).get("classes", []):
        found.append((f"dispatch.classes.{k['name']}.tests", k["tests"]))
    for side, rx in ((d.get("ncu") or {}).get("kernels") or {}).items():
        found.append((f"ncu.kernels.{side}", rx))
    for side, rx in (((d.get("measure") or {}).get("kernels")) or {}).items():
        found.append((f"measure.kernels.{side}", rx))
    for key, rx in found:
        with _named(c, key):
            compile_regex(rx, key)


def _row(row: Row, key: str) -> None:
    """A row's sizes: nothing negative; ``cu_seqlens`` from 0, strictly increasing, to ``T``."""
    for name, value in row.values.items():
        where = f"key '{key}.{row.name}.{name}'"
        if isinstance(value, bool) or name in ("name", "dispatch"):
            continue
        if isinstance(value, (int, float)) and value < 0:
            raise ConfigError(f"{where}: {value} is negative (row values are sizes)")
        if not isinstance(value, list):
            continue
        if any(v < 0 for v in value):
            raise ConfigError(f"{where}: {value} holds a negative value (row values are sizes)")
        if name != CU_SEQLENS:
            continue
        if len(value) < 2 or value[0] != 0:
            raise ConfigError(f"{where}: {value} must start at 0 and hold at least one sequence")
        drop = next((i for i in range(1, len(value)) if value[i] <= value[i - 1]), None)
        if drop is not None:
            raise ConfigError(f"{where}: {value} is not strictly increasing ({value[drop - 1]} then {value[drop]})")
        total = row.values.get(TOKENS)
        if isinstance(total, (int, float)) and not isinstance(total, bool) and value[-1] != total:
            raise ConfigError(f"{where}: {value} ends at {value[-1]}, not at the row's {TOKENS}={total}")


def _forward_only(c: Campaign, spec: MeasureSpec) -> None:
    """``measure.differentiate: []`` (an op without a backward): no timed or profiled call may be fwdbwd."""
    if spec.differentiate:
        return
    modes = {"profile.mode": spec.profile_mode, "bench.modes.gated": spec.gated_mode,
             "bench.modes.controls": spec.control_mode,
             "ncu.mode": spec.profiled_call(c.data["ncu"].get("mode")) if c.data.get("ncu") else "fwd"}
    for key, mode in modes.items():
        if mode == "fwdbwd":
            raise ConfigError(f"{c.path}: key '{key}': fwdbwd, but measure.differentiate is [] (the op has no "
                              "backward): set it to fwd")


def _profiled_call(c: Campaign, spec: MeasureSpec) -> None:
    """The profiled call is the gated one: the plausibility bound is a best case for the endpoint the bar judges
    (profiling fwdbwd for a bar on fwd would bound a call bench never times, with kernels the claim never named)."""
    mode = spec.profile.get("mode")
    if mode and mode != spec.gated_mode:
        raise ConfigError(f"{c.path}: key 'profile.mode': {mode}, but bench.modes.gated is "
                          f"{spec.gated_mode}: the profiled call must be the one the bar judges (leave profile.mode "
                          "unset to follow bench)")


def _measure(c: Campaign, spec: MeasureSpec) -> None:
    """One device kind's rows, row names, endpoint kinds and classes."""
    _forward_only(c, spec)
    _profiled_call(c, spec)
    rows_key = "measure.cpu.rows" if spec.cpu else "measure.rows"
    with _named(c, rows_key):
        table = row_table(spec.explicit_rows)
    registry = bool(spec.registry) and not spec.cpu  # on CPU the registry's rows are not run
    with _named(c, rows_key):
        if registry:
            names = spec.bench.get("gated")
            gated = list(table.values()) if names is None else [table[n] for n in names if n in table]
        else:
            spec.profile_rows(table)  # each raises naming its key
            spec.control_rows(table)
            if not spec.cpu and (c.data.get("ncu") or {}).get("rows"):
                spec.select(table, c.data["ncu"]["rows"], "ncu.rows")
            gated = spec.gated_rows(table)
    kinds = {r.kind for r in gated} | ({REGISTRY_KIND} if registry else set())
    missing = [k for k in spec.endpoints(gated) if k not in kinds]
    where = "on CPU (check measure.cpu.gated and measure.cpu.rows)" if spec.cpu else "(check bench.gated and measure.rows)"
    if missing:
        raise ConfigError(f"{c.path}: key 'bench.endpoints': no gated row of kind {', '.join(missing)} {where}; "
                          f"the gated rows' kinds: {', '.join(sorted(kinds)) or 'none'}")
    if spec.cpu or registry or spec.class_key is None:
        return
    have = [r.klass(spec.class_key) for r in gated]
    distinct = [v for i, v in enumerate(have) if v not in have[:i]]
    absent = [k for k in spec.classes if k not in have]
    if absent:
        values = ", ".join(repr(v) for v in sorted(distinct, key=_order)) or "none"
        raise ConfigError(f"{c.path}: key 'measure.classes': no gated row has {spec.class_key}="
                          f"{', '.join(map(repr, absent))} (the bench gate class_{spec.class_key}<value>_fast needs "
                          f"one; the gated rows' {spec.class_key}: {values}; check bench.gated and measure.rows)")


def _order(value: Any) -> tuple[bool, Any]:
    """Numbers first, by value, then anything else by its text (class values are numbers or strings)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (not number, value if number else str(value))
