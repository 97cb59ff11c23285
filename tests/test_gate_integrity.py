"""Gate integrity on the default campaign (real fla-core 0.6.0, CPU interpreter): each way of passing
by accident or narrowing the contract stops at its gate, with the evidence in the record.

The tests share the session's workdir with tests/test_campaign_cpu.py, so baseline evidence is
reused and each test pays only for its own candidate's stages.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import REPO, Workflow, candidate_id, ran_rules

pytestmark = pytest.mark.campaign
CAMPAIGN = "rwkv6-bwd-fusion"
DATA = "tests/data/candidates"


def _run(wf: Workflow, source: str, **kw: object) -> tuple[str, str]:
    proc = wf.run(f"candidate={source}", **kw)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return candidate_id(CAMPAIGN, source), proc.stdout + proc.stderr


def _gate(rec: dict, name: str) -> dict:
    return next(g for g in rec["gates"] if g["name"] == name)


def _fresh_identity(tmp_path: Path, note: str) -> str:
    """A copy of the identity candidate with its own content hash."""
    overlay = tmp_path / "cand"
    shutil.copytree(REPO / "kernels/rwkv6_bwd_fused/identity", overlay)
    with (overlay / "identity.py").open("a") as fh:
        fh.write(f"\n# {note}\n")
    return f"overlay:{overlay}"


def test_a_tf32_dot_fails_numeric_flags(rwkv6_workdir: Workflow) -> None:
    cid, log = _run(rwkv6_workdir, f"overlay:{DATA}/rwkv6_tf32")
    rec = rwkv6_workdir.record(CAMPAIGN, "candidate_build", cid)
    row = _gate(rec, "numeric_flags")
    assert row["status"] == "fail"
    assert "fla/ops/rwkv6/chunk.py:" in row["detail"] and "dot_precision added (input_precision=\"tf32\"" in row["detail"]
    assert "candidate_gate" not in ran_rules(rwkv6_workdir.run(f"candidate=overlay:{DATA}/rwkv6_tf32"))
    assert rwkv6_workdir.verdict(CAMPAIGN)["decided_by"]["stage"] == "candidate_build"


def test_an_enabled_class_without_a_fixture_case_fails_the_build(rwkv6_workdir: Workflow) -> None:
    cid, _ = _run(rwkv6_workdir, f"overlay:{DATA}/rwkv6_uncovered_class")
    rec = rwkv6_workdir.record(CAMPAIGN, "candidate_build", cid)
    row = _gate(rec, "dispatch_coverage")
    assert row["status"] == "fail" and "BT64-D512-dense" in row["detail"]
    assert rec["data"]["enables"] == ["BT64-D512-dense"]
    assert cid not in rwkv6_workdir.candidate_ids(CAMPAIGN, "candidate_gate")


def test_a_candidate_that_skips_a_test_fails_same_test_ids(rwkv6_workdir: Workflow) -> None:
    cid, _ = _run(rwkv6_workdir, f"overlay:{DATA}/rwkv6_skips_test")
    rec = rwkv6_workdir.record(CAMPAIGN, "candidate_gate", cid)
    assert _gate(rec, "gate_tests_pass")["status"] == "pass", "a skip is not a failure: only the id check sees it"
    row = _gate(rec, "same_test_ids")
    assert row["status"] == "fail"
    assert "T50" in row["detail"] and "passed at BENCH_BASE, skipped now" in row["detail"]
    assert rwkv6_workdir.verdict(CAMPAIGN)["decided_by"] == {"stage": "candidate_gate", "gate": "same_test_ids"}


def test_an_environment_difference_fails_before_the_gate_runs(rwkv6_workdir: Workflow, tmp_path: Path) -> None:
    source = _fresh_identity(tmp_path, "an A/A candidate gated under a different environment")
    cid, _ = _run(rwkv6_workdir, source, extra_env={"TRITON_F32_DEFAULT": "ieee"})
    rec = rwkv6_workdir.record(CAMPAIGN, "candidate_gate", cid)
    row = _gate(rec, "same_env")
    assert row["status"] == "fail"
    assert row["detail"] == "TRITON_F32_DEFAULT: unset at fixture_freeze, 'ieee' at candidate_gate"
    assert _gate(rec, "gate_tests_pass")["status"] == "skip"


def test_a_variable_the_candidate_sets_outside_tests_fails_between_arms(rwkv6_workdir: Workflow) -> None:
    cid, _ = _run(rwkv6_workdir, f"overlay:{DATA}/rwkv6_env_arm")
    gate = rwkv6_workdir.record(CAMPAIGN, "candidate_gate", cid)
    assert gate["status"] == "pass", gate["reasons"]
    assert _gate(gate, "same_env")["status"] == "pass"
    rec = rwkv6_workdir.record(CAMPAIGN, "profile_candidate", cid)
    row = _gate(rec, "same_env")
    assert row["status"] == "fail"
    assert "TRITON_F32_DEFAULT: unset at profile_baseline, 'tf32' at cand" in row["detail"]
    assert cid not in rwkv6_workdir.candidate_ids(CAMPAIGN, "bench")


def test_a_fallback_that_is_not_bit_identical_fails(rwkv6_workdir: Workflow) -> None:
    cid, _ = _run(rwkv6_workdir, f"overlay:{DATA}/rwkv6_fallback_drift")
    rec = rwkv6_workdir.record(CAMPAIGN, "candidate_gate", cid)
    assert _gate(rec, "gate_tests_pass")["status"] == "pass", "the drift is far inside every tolerance"
    row = _gate(rec, "fallback_bit_identical")
    assert row["status"] == "fail"
    assert "cmp_dense_BT32_D16 (BT32-dense)" in row["detail"] and "grad[0]" in row["detail"]
    assert "cmp_dense_BT64_D16 (optimized)" in _gate(rec, "outputs_vs_bench_base")["value"]


def test_a_worktree_modified_between_stages_is_an_error(rwkv6_workdir: Workflow, tmp_path: Path) -> None:
    source = _fresh_identity(tmp_path, "a candidate whose worktree is edited behind kgate's back")
    cid = candidate_id(CAMPAIGN, source)
    build = f"results/{CAMPAIGN}/cpu/candidate_build/{cid}/record.json"
    first = rwkv6_workdir.run(f"candidate={source}", args=(build,))
    assert first.returncode == 0, first.stderr[-3000:]
    wt = rwkv6_workdir.workdir / "work" / CAMPAIGN / "cpu" / "wt" / f"cand-{cid}"
    with (wt / "fla/ops/rwkv6/chunk.py").open("a") as fh:
        fh.write("\n# edited after candidate_build\n")
    proc = rwkv6_workdir.run(f"candidate={source}")
    assert proc.returncode != 0
    log = (rwkv6_workdir.workdir / "logs" / CAMPAIGN / "cpu" / "candidate_gate" / cid / "record.log").read_text()
    assert "kgate: error" in log and str(wt.relative_to(rwkv6_workdir.workdir)) in log, log[-2000:]
    assert cid not in rwkv6_workdir.candidate_ids(CAMPAIGN, "candidate_gate") or not (
        rwkv6_workdir.workdir / build.replace("candidate_build", "candidate_gate")).exists()
