"""Numeric settings observed at run time: torch flags, Triton knobs and recorded variables, around each test
and each timed call, even when a call sets one and restores it before it returns.

The watch itself runs in a fresh Python process per test (installing it is once per process and cannot be
undone); the pytest plugin runs in a real pytest process, with and without pytest-xdist; the timing
worker's hook runs in a real worker process on the toy target of tests/test_worker.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO
from test_worker import toy_env, toy_init, toy_worktree

from kgate.gates import numerics as numerics_gates
from kgate.measure import worker_numerics
from kgate.measure.arms import Arm, Deadline, WorkerFailure
from kgate.stages.common import failed_run_gate


def _python(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_window_sees_settings_changed_and_restored_inside_it() -> None:
    got = _python("""
        import json, os, torch
        from kgate.testrun import numeric_state
        w = numeric_state.install(("TRITON_*",))
        w.begin(fresh=True)
        quiet = w.end()
        w.begin(fresh=True)
        name, flag = "TRITON_" + "F32_DEFAULT", "allow_" + "tf32"
        matmul = getattr(torch.backends.cuda, "matmul")
        old = getattr(matmul, flag)
        os.environ[name] = "tf32"; setattr(matmul, flag, True)
        torch.backends.cudnn.allow_tf32 = False     # a setter torch captured at import (a property descriptor)
        torch.backends.cudnn.allow_tf32 = True
        os.environ["OTHER_VARIABLE"] = "not watched"
        setattr(matmul, flag, old); del os.environ[name]
        restored = w.end()
        w.begin(fresh=True)
        torch.set_float32_matmul_precision("medium")   # kept: seen at the end of the window too
        kept = w.end()
        w.begin(fresh=True)
        torch.set_float32_matmul_precision("medium")   # the same value again: no change
        same = w.end()
        print(json.dumps({"quiet": quiet, "restored": restored, "kept": kept, "same": same,
                          "describe": numeric_state.describe(restored)}))
    """)
    assert got["quiet"] == {} and got["same"] == {}
    r = got["restored"]
    assert r["TRITON_F32_DEFAULT"] == {"start": "unset", "during": ["tf32"], "end": "unset"}
    assert r["torch.backends.cuda.matmul.allow_tf32"] == {"start": "False", "during": ["True"], "end": "False"}
    assert r["torch.backends.cudnn.allow_tf32"] == {"start": "True", "during": ["False"], "end": "True"}
    assert "OTHER_VARIABLE" not in r
    assert "TRITON_F32_DEFAULT 'unset' -> 'tf32' (restored after)" in got["describe"]
    assert got["kept"]["torch.get_float32_matmul_precision()"] == {"start": "highest", "during": ["medium"],
                                                                    "end": "medium"}


TESTS = '''
import os

import torch


def test_quiet():
    assert torch.ones(2).sum() == 2


def test_sets_and_restores():
    name = "TRITON_" + "F32_DEFAULT"
    os.environ[name] = "tf32"
    setattr(getattr(torch.backends.cuda, "matmul"), "allow_" + "tf32", True)
    setattr(getattr(torch.backends.cuda, "matmul"), "allow_" + "tf32", False)
    del os.environ[name]
'''


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_the_pytest_plugin_records_each_tests_changes_and_the_end_state(tmp_path: Path, xdist: bool) -> None:
    (tmp_path / "test_flags.py").write_text(TESTS)
    outcomes = tmp_path / "outcomes.json"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "kgate.testrun.outcomes_plugin",
           "-p", "kgate.testrun.numerics_plugin", "--kgate-numerics=TRITON_*", f"--kgate-outcomes={outcomes}",
           f"--rootdir={tmp_path}", "-c", str(REPO / "kgate" / "data" / "pytest-empty.ini"), "test_flags.py"]
    cmd += ["-n", "2"] if xdist else ["-n", "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    state = json.loads(outcomes.read_text())
    tests = state["tests"]
    assert "numerics" not in tests["test_flags.py::test_quiet"]
    call = tests["test_flags.py::test_sets_and_restores"]["numerics"]["call"]
    assert call["TRITON_F32_DEFAULT"]["during"] == ["tf32"] and call["TRITON_F32_DEFAULT"]["end"] == "unset"
    assert call["torch.backends.cuda.matmul.allow_tf32"]["during"] == ["True"]
    assert state["numerics_state"]["torch.backends.cuda.matmul.allow_tf32"] == "False"
    assert state["numerics_state"]["torch.get_float32_matmul_precision()"] == "highest"


LEAKY = '''
import os


def test_sets_it():
    os.environ["TOY_USE_TMA"] = "1"


def test_sets_it_too():
    os.environ["TOY_USE_TMA"] = "1"


def test_starts_without_it():
    assert "TOY_USE_TMA" not in os.environ
'''


def _leaky_run(tmp_path: Path, order: list[str], restore: bool) -> tuple[int, dict]:
    """One serial run of LEAKY's tests in ``order``, with or without --kgate-restore-env; (exit code, outcomes)."""
    folder = tmp_path / ("-".join(order) + ("-restore" if restore else ""))
    folder.mkdir()
    (folder / "test_leaky.py").write_text(LEAKY)
    outcomes = folder / "outcomes.json"
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
           "-p", "kgate.testrun.outcomes_plugin", "-p", "kgate.testrun.numerics_plugin", "--kgate-numerics=TOY_*",
           f"--kgate-outcomes={outcomes}", f"--rootdir={folder}", "-c", str(REPO / "kgate" / "data" / "pytest-empty.ini"),
           *[f"test_leaky.py::test_{t}" for t in order]]
    if restore:
        cmd.append("--kgate-restore-env=TOY_USE_*")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "TOY_"))}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=300, env=env)
    state = json.loads(outcomes.read_text())
    assert [t.split("::")[1] for t in state["tests"]] == [f"test_{t}" for t in order], proc.stdout[-2000:]
    return proc.returncode, state


def test_restore_env_makes_a_leaking_suite_order_free(tmp_path: Path) -> None:
    """Two tests set a variable and never restore it: which one records the change depends on the order, and a
    later test sees the leftover. With gate.restore_env every test starts from the first test's start."""
    orders = (["sets_it", "sets_it_too", "starts_without_it"], ["sets_it_too", "sets_it", "starts_without_it"])
    leaky = [_leaky_run(tmp_path, order, restore=False) for order in orders]
    assert all(code == 1 for code, _ in leaky), "without the restore the last test sees the leftover"
    assert "numerics" not in leaky[0][1]["tests"]["test_leaky.py::test_sets_it_too"], "it found the value already set"
    assert numerics_gates.differences(leaky[0][1], leaky[1][1]), "the order changed the recorded changes"

    fixed = [_leaky_run(tmp_path, order, restore=True) for order in orders]
    assert all(code == 0 for code, _ in fixed), "every test started without the variable"
    for _, state in fixed:
        for name in ("test_sets_it", "test_sets_it_too"):
            call = state["tests"][f"test_leaky.py::{name}"]["numerics"]["call"]
            assert call["TOY_USE_TMA"] == {"start": "unset", "during": ["1"], "end": "1"}, (name, call)
        assert state["numerics_state"].get("TOY_USE_TMA", "unset") == "unset"
        assert state["tests"]["test_leaky.py::test_starts_without_it"]["outcome"] == "passed"
    assert numerics_gates.differences(fixed[0][1], fixed[1][1]) == []


def _run(tests: dict[str, dict], end: dict[str, str]) -> dict:
    return {"tests": [{"nodeid": k, "outcome": "passed", **({"numerics": v} if v else {})} for k, v in tests.items()],
            "numerics_state": end}


def _change(start: str, *during: str, end: str | None = None) -> dict:
    return {"start": start, "during": list(during), "end": start if end is None else end}


def test_the_gate_compares_changes_test_by_test_and_the_end_state_with_the_fixture_run() -> None:
    base_end = {"torch.backends.cuda.matmul.allow_tf32": "False"}
    fixture = _run({"t::a": {"call": {"TRITON_F32_DEFAULT": _change("unset", "ieee", end="ieee")}}, "t::b": {}},
                   base_end)
    # the same changes, from another start (another distribution of tests to xdist workers): equal
    same = _run({"t::a": {"call": {"TRITON_F32_DEFAULT": _change("tf32", "ieee", end="ieee")}}, "t::b": {}},
                base_end)
    assert numerics_gates.differences(fixture, same) == []
    assert numerics_gates.gate(fixture, same, "ev").status == "pass"
    restored = _run({"t::a": {"call": {"TRITON_F32_DEFAULT": _change("unset", "ieee", end="ieee")}},
                     "t::b": {"call": {"torch.backends.cuda.matmul.allow_tf32": _change("False", "True")}}}, base_end)
    row = numerics_gates.gate(fixture, restored, "ev")
    assert row.status == "fail"
    assert row.detail == ("t::b (call): torch.backends.cuda.matmul.allow_tf32 'False' -> 'True' (restored after); "
                          "in the fixture run: no change")
    kept = _run({"t::a": {"call": {"TRITON_F32_DEFAULT": _change("unset", "ieee", end="ieee")}}, "t::b": {}},
                {"torch.backends.cuda.matmul.allow_tf32": "True"})
    assert numerics_gates.differences(fixture, kept) == [
        "torch.backends.cuda.matmul.allow_tf32: 'True' at the end of the run, 'False' at the end of the fixture run"]
    dropped = _run({"t::a": {}, "t::b": {}}, base_end)
    assert numerics_gates.differences(fixture, dropped) == [
        "t::a (call): TRITON_F32_DEFAULT: no change; in the fixture run: TRITON_F32_DEFAULT 'unset' -> 'ieee' (kept)"]
    old_fixture = {"tests": fixture["tests"]}
    assert numerics_gates.gate(old_fixture, restored, "ev").status == "skip"


FLAG_OP = '''

def flagged(x, w, *, bias=None):
    """The toy op, setting and restoring a watched variable and torch's TF32 flag inside each call."""
    name, matmul = "TOY" + "_PRECISION", getattr(torch.backends.cuda, "mat" + "mul")
    os.environ[name] = "fast"
    setattr(matmul, "allow_" + "tf32", True)
    try:
        return op(x, w, bias=bias)
    finally:
        setattr(matmul, "allow_" + "tf32", False)
        del os.environ[name]
'''


def test_the_timing_worker_fails_a_call_that_changes_a_numeric_setting(tmp_path: Path) -> None:
    wt, inputs = toy_worktree(tmp_path)
    with (wt / "toyop" / "__init__.py").open("a") as fh:
        fh.write(FLAG_OP)
    cache = tmp_path / "cache"
    arm = Arm("cand", wt, cache, {**toy_env(wt, cache), "KGATE_ENV_RECORD": "TOY*"}, tmp_path / "cand.log",
              Deadline(300))
    try:
        arm.info = arm.request("init", **{**toy_init(inputs), "callable": "toyop:flagged"})
        arm.request("prepare", rows=[{"name": "small", "N": 4, "D": 8}])
        with pytest.raises(WorkerFailure) as err:
            arm.request("time", row="small", mode="fwd", n=3)
    finally:
        arm.close()
    assert err.value.target is True
    msg = str(err.value)
    assert worker_numerics.MARK in msg and "row small fwd" in msg
    assert "TOY_PRECISION 'unset' -> 'fast' (restored after)" in msg
    assert "torch.backends.cuda.matmul.allow_tf32 'False' -> 'True' (restored after)" in msg
    row = failed_run_gate(msg, "the candidate runs every row", "worker-cand.log")
    assert (row.name, row.status) == ("numeric_state", "fail") and row.detail == msg
    other = failed_run_gate("arm cand: 'time' failed: row small fwd: RuntimeError: boom", "runs", "log", status="stop")
    assert (other.name, other.status) == ("candidate_runs", "stop")
