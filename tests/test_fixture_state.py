"""A fixture gate that fails a test baseline_tests passed says so (kgate.stages.fixture_freeze.passed_at_baseline).

MEASURED DATA: ``tests/data/fixture_state/h200_kda_shared_pick/`` (its README): on an H200 fla's own
``test_chunk_varlen[...D256...]`` passed in baseline_tests and failed three times in fixture_freeze on
the same production code, because a shared autotune pick tuned at another K was read back. The fixture
adds tests only, so the gate's row must name the test as one that passed at baseline.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kgate.stages.fixture_freeze import passed_at_baseline
from kgate.testrun import runner
from kgate.testrun.judge import judge

DATA = Path(__file__).parent / "data" / "fixture_state" / "h200_kda_shared_pick"
D256 = ("tests/ops/test_kda.py::test_chunk_varlen[H4-D256-mask_p0-cu_seqlens[0, 15, 100, 300, 1200, 4096]"
        "-torch.float16-tmaFalse]")


def _record(stage: str) -> dict:
    return json.loads((DATA / f"{stage}.json").read_text())


def _gate_run(data: dict) -> runner.GateRun:
    names = {f.name for f in dataclasses.fields(runner.GateRun)}
    fields = {k: v for k, v in data.items() if k in names}
    fields.update(tests={t["nodeid"]: t for t in data["tests"]}, interp=data["interpreter"],
                  outcomes_path=data["outcomes"], junit_path=data["junit"], carried=tuple(data["carried_over"]))
    return runner.GateRun(**fields)


def test_the_h200_fixture_failure_is_named_as_a_test_that_passed_at_baseline() -> None:
    base, fixture = _record("baseline_tests"), _record("fixture_freeze")
    first = _gate_run(fixture["data"]["run"])
    assert first.counts == {"passed": 50, "failed": 1}
    gate = passed_at_baseline(judge(first, fixture["data"]["reruns"], first.junit_path, "fixture_gate_green"),
                              first, base)
    assert gate.status == "fail"
    assert gate.detail.startswith(f"deterministic failure (1): {D256}; 1 of the failing test(s) passed in "
                                  f"baseline_tests on the same source ({D256})"), gate.detail
    assert "OutOfResources: out of resource: shared memory, Required: 245760" in first.tests[D256]["message"]
    assert {t["nodeid"]: t["outcome"] for t in base["data"]["run"]["tests"]}[D256] == "passed"


def test_a_failure_new_to_the_fixture_run_gets_no_such_note() -> None:
    """A failing test baseline_tests never ran (one the fixture added) is not called a state failure."""
    base, fixture = _record("baseline_tests"), _record("fixture_freeze")
    first = _gate_run(fixture["data"]["run"])
    base["data"]["run"]["tests"] = [t for t in base["data"]["run"]["tests"] if t["nodeid"] != D256]
    gate = passed_at_baseline(judge(first, fixture["data"]["reruns"], first.junit_path, "fixture_gate_green"),
                              first, base)
    assert gate.detail == f"deterministic failure (1): {D256}"
