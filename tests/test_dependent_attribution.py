"""candidate_gate's dependent tests on real pytest processes: ids that fail with the candidate are
rerun at BENCH_BASE, and only those that pass there count against the candidate."""

from __future__ import annotations

from pathlib import Path

from test_gate_runner import spec, tree

from kgate.stages import candidate_gate
from kgate.testrun import runner as gate

DEP_TESTS = ("from toy import f\n"
             "def test_uses_f():\n    assert f(1) == 2\n"
             "def test_broken_upstream():\n    assert False, 'broken before any candidate'\n"
             "def test_independent():\n    pass\n")


def gate_for(tmp_path: Path, cand_body: str) -> tuple[object, dict, gate.GateRun, gate.GateRun | None]:
    """BENCH_BASE's toy (f(x) = x + 1) and the candidate's, each with the same dependent tests."""
    base_wt, cand_wt = (tree(tmp_path / arm, {"toy/__init__.py": f"import os\ndef f(x):\n    {body}\n",
                                              "tests/test_dep.py": DEP_TESTS})
                        for arm, body in (("base", "return x + 1"), ("cand", cand_body)))
    out, cache = tmp_path / "out", tmp_path / "cache"
    dep = gate.run(spec(), cand_wt, out, cache, tag="dependent")
    base = gate.run(spec(), base_wt, out, cache, tag="dependent-base", only_ids=dep.bad_ids) \
        if candidate_gate.attributable(dep) else None
    row, data = candidate_gate.dependent_gate(dep, base)
    return row, data, dep, base


def test_a_failure_that_passes_at_bench_base_is_the_candidates(tmp_path: Path) -> None:
    row, data, dep, base = gate_for(tmp_path, "return x + 2")
    assert dep.bad_ids == ["tests/test_dep.py::test_broken_upstream", "tests/test_dep.py::test_uses_f"]
    assert base is not None and sorted(base.collected) == dep.bad_ids, "only the failing ids rerun at BENCH_BASE"
    assert base.tests["tests/test_dep.py::test_uses_f"]["outcome"] == "passed"
    assert row.status == "fail"
    assert row.detail == "pass at BENCH_BASE, not with the candidate: tests/test_dep.py::test_uses_f"
    assert data == {"candidates": ["tests/test_dep.py::test_uses_f"],
                    "pre_existing": ["tests/test_dep.py::test_broken_upstream"]}
    assert "1 of 2 not passing at BENCH_BASE either" in row.value


def test_a_failure_at_bench_base_too_is_pre_existing(tmp_path: Path) -> None:
    row, data, dep, base = gate_for(tmp_path, "return (x + 1) * 1")
    assert dep.bad_ids == ["tests/test_dep.py::test_broken_upstream"]
    assert base is not None and base.tests["tests/test_dep.py::test_broken_upstream"]["outcome"] == "failed"
    assert row.status == "pass"
    assert row.detail == "pre-existing, failing at BENCH_BASE too: tests/test_dep.py::test_broken_upstream"
    assert row.evidence == base.junit_path
    assert data == {"candidates": [], "pre_existing": ["tests/test_dep.py::test_broken_upstream"]}


def test_a_crashing_candidate_fails_without_attribution(tmp_path: Path) -> None:
    row, data, dep, base = gate_for(tmp_path, "os.abort()")
    assert dep.crashed and base is None
    assert row.status == "fail" and data == {}
    assert row.detail.startswith("process died, not attributed at BENCH_BASE: ")
    assert "tests/test_dep.py::test_uses_f" in row.detail
