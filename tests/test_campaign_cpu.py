"""The default campaign (fla-core 0.6.0 from PyPI) run end to end on CPU, with real candidates.

Every test runs Snakemake on kgate's Snakefile in one shared scratch workdir:
the first run pays for target, baseline_tests and fixture_freeze; the others
reuse that evidence and only build and gate their own candidate, which is
itself part of what is tested.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, Workflow, candidate_id, ran_rules

from kgate import paths

pytestmark = pytest.mark.campaign
CAMPAIGN = "rwkv6-bwd-fusion"
BASELINE_RULES = {"target", "baseline_tests", "fixture_freeze"}


def run_candidate(wf: Workflow, overlay: str) -> tuple[subprocess.CompletedProcess[str], str]:
    source = f"overlay:{overlay}"
    proc = wf.run(f"candidate={source}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, candidate_id(CAMPAIGN, source)


def test_identity_candidate_passes_every_gate(rwkv6_workdir: Workflow) -> None:
    """An A/A candidate goes through every implemented gate; on CPU the verdict is SMOKE, never GO."""
    proc, cid = run_candidate(rwkv6_workdir, "kernels/rwkv6_bwd_fused/identity")
    for stage in ("target", "baseline_tests", "fixture_freeze"):
        assert rwkv6_workdir.record(CAMPAIGN, stage)["status"] == "pass", stage
    for stage in ("candidate_build", "candidate_gate"):
        assert rwkv6_workdir.record(CAMPAIGN, stage, cid)["status"] == "pass", stage
    fx = rwkv6_workdir.record(CAMPAIGN, "fixture_freeze")["data"]
    assert fx["fixture_passed"] > fx["baseline_passed"] > 0
    assert "tests/test_chunk_rwkv6_oracle_bf16.py" in fx["manifest"]
    ncu = rwkv6_workdir.record(CAMPAIGN, "ncu", cid)
    assert ncu["status"] == "unavailable" and "no GPU" in ncu["data"]["reason"]
    assert len([c for r in ncu["data"]["commands_planned"].values() for a in r.values() for c in a.values()]) == 12
    verdict = rwkv6_workdir.verdict(CAMPAIGN)
    assert verdict["verdict"] == "SMOKE"
    assert verdict["candidate"] == cid
    assert {s["stage"]: s["status"] for s in verdict["stages"]}["ncu"] == "unavailable"
    # model gates on bench, not on ncu: the walk reaches it past ncu's unavailable record
    assert rwkv6_workdir.record(CAMPAIGN, "model", cid)["status"] == "pass"
    assert {s["stage"]: s["status"] for s in verdict["stages"]}["model"] == "pass"
    html = (rwkv6_workdir.workdir / "reports" / CAMPAIGN / "cpu" / "index.html").read_text()
    assert "SMOKE" in html
    check = subprocess.run([sys.executable, "-m", "kgate", "verdict", "--check", CAMPAIGN, "--gpu", "cpu"],
                           cwd=rwkv6_workdir.workdir, capture_output=True, text=True)
    assert check.returncode == 3, check.stdout + check.stderr
    # force=true added to a finished run measures nothing again: no input of a stage asks for it, so only the
    # report (whose verdict says whether the run was forced) is redone
    forced = rwkv6_workdir.run("candidate=overlay:kernels/rwkv6_bwd_fused/identity", "force=true", args=("-n",))
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert set(ran_rules(forced)) <= {"report", "all"}, ran_rules(forced)


def test_the_default_candidate_passes_every_gate_to_smoke(rwkv6_workdir: Workflow) -> None:
    """The campaign as the README's first command runs it (its own fused candidate): every stage that measures on
    CPU passes; the frozen gate ran under the Triton interpreter, the optimized rows ran the fused path and the
    fallback rows were bit-identical to BENCH_BASE."""
    proc = rwkv6_workdir.run()
    assert proc.returncode == 0, proc.stderr[-3000:]
    cid = candidate_id(CAMPAIGN)
    verdict = rwkv6_workdir.verdict(CAMPAIGN)
    assert verdict["verdict"] == "SMOKE" and verdict["candidate"] == cid, verdict["sentence"]
    statuses = {s["stage"]: s["status"] for s in verdict["stages"]}
    assert statuses.pop("ncu") == "unavailable" and set(statuses.values()) <= {"pass", "skip"}, statuses
    gate = rwkv6_workdir.record(CAMPAIGN, "candidate_gate", cid)
    rows = {g["name"]: g["status"] for g in gate["gates"]}
    assert rows["gate_tests_pass"] == rows["same_test_ids"] == rows["fallback_bit_identical"] == "pass", rows
    assert gate["data"]["run"]["counts"].get("passed", 0) > 0 and gate["data"]["run"]["interpreter"]
    # nothing compiles under the interpreter: no compile-only worker beside the gate, and the record says why
    assert gate["data"]["precompile"] == {"ran": False, "why": "CPU: the Triton interpreter compiles nothing"}
    outputs = json.loads((rwkv6_workdir.workdir / "results" / CAMPAIGN / "cpu" / "candidate_gate" / cid
                          / "outputs.json").read_text())
    assert {r["path"] for r in outputs["rows"]} == {"optimized", "fallback"}, outputs["rows"]


def test_wrong_gradients_fail_the_candidate_gate(rwkv6_workdir: Workflow) -> None:
    """A candidate whose dq is 1 % off is a measured NO-GO at candidate_gate; baseline evidence is reused."""
    proc, cid = run_candidate(rwkv6_workdir, "tests/data/candidates/rwkv6_wrong_grad")
    assert not BASELINE_RULES & set(ran_rules(proc)), ran_rules(proc)
    assert rwkv6_workdir.record(CAMPAIGN, "candidate_build", cid)["status"] == "pass"
    rec = rwkv6_workdir.record(CAMPAIGN, "candidate_gate", cid)
    assert rec["status"] == "fail"
    row = next(g for g in rec["gates"] if g["name"] == "gate_tests_pass")
    assert row["status"] == "fail" and "not passing" in row["detail"]
    failed = [t for t in rec["data"]["run"]["tests"] if t["outcome"] == "failed"]
    assert failed and all("dq" in t["message"] for t in failed)
    verdict = rwkv6_workdir.verdict(CAMPAIGN)
    assert verdict["verdict"] == "NO-GO"
    assert verdict["decided_by"] == {"stage": "candidate_gate", "gate": "gate_tests_pass"}
    # nothing past the failed gate was scheduled, the model stage included
    assert cid not in rwkv6_workdir.candidate_ids(CAMPAIGN, "model")
    assert not {"bench", "ncu", "model"} & set(ran_rules(proc))
    model = {s["stage"]: s for s in verdict["stages"]}["model"]
    assert model["status"] == "not_run" and model["why"].startswith("blocked by candidate_gate")


@pytest.mark.parametrize(("overlay", "gate", "path"), [
    ("tests/data/candidates/rwkv6_frozen_edit", "frozen_unchanged", "fla/ops/rwkv6/fused_recurrent.py"),
    ("tests/data/candidates/rwkv6_out_of_scope", "scoped_diff", "fla/ops/gla/chunk.py"),
])
def test_bad_diff_stops_at_candidate_build(rwkv6_workdir: Workflow, overlay: str, gate: str, path: str) -> None:
    """A frozen edit or an out-of-scope path stops the DAG at candidate_build: the gate never runs."""
    proc, cid = run_candidate(rwkv6_workdir, overlay)
    rec = rwkv6_workdir.record(CAMPAIGN, "candidate_build", cid)
    assert rec["status"] == "fail"
    row = next(g for g in rec["gates"] if g["name"] == gate)
    assert row["status"] == "fail" and path in row["detail"]
    assert cid not in rwkv6_workdir.candidate_ids(CAMPAIGN, "candidate_gate")
    assert "candidate_gate" not in ran_rules(proc)
    verdict = rwkv6_workdir.verdict(CAMPAIGN)
    assert verdict["verdict"] == "NO-GO"
    assert verdict["decided_by"]["stage"] == "candidate_build"
    later = {s["stage"]: s for s in verdict["stages"]}["candidate_gate"]
    assert later["status"] == "not_run" and later["why"].startswith("blocked by candidate_build")


def test_editing_the_candidate_reruns_only_candidate_stages(rwkv6_workdir: Workflow, tmp_path) -> None:
    """Snakemake's own dry run: after an edit of a candidate file only candidate stages and the report are due.
    The first iteration runs up to its build (``--until`` its candidate_build record): what is due after the edit is
    decided by the candidate id, whatever stages the first iteration reached."""
    overlay = tmp_path / "cand"
    shutil.copytree(REPO / "kernels/rwkv6_bwd_fused/identity", overlay)
    with (overlay / "identity.py").open("a") as fh:
        fh.write("\n# iteration 1 of a candidate under edit\n")
    first = candidate_id(CAMPAIGN, f"overlay:{overlay}")
    until = ("--until", str(paths.record(CAMPAIGN, "cpu", "candidate_build", first)))
    assert rwkv6_workdir.run(f"candidate=overlay:{overlay}", args=until).returncode == 0
    quiet = rwkv6_workdir.run(f"candidate=overlay:{overlay}", args=("-n", *until))
    assert "Nothing to be done" in quiet.stdout + quiet.stderr
    with (overlay / "identity.py").open("a") as fh:
        fh.write("\n# an edit of the candidate\n")
    second = candidate_id(CAMPAIGN, f"overlay:{overlay}")
    assert second != first
    dry = rwkv6_workdir.run(f"candidate=overlay:{overlay}", args=("-n",))
    jobs = _job_stats(dry.stdout + dry.stderr)
    assert jobs == {"candidate_build": 1, "report": 1, "all": 1}, jobs
    assert first in rwkv6_workdir.candidate_ids(CAMPAIGN, "candidate_build")


def test_a_lost_record_is_measured_again_not_hidden_behind_the_report(rwkv6_workdir: Workflow) -> None:
    """A stage record that is gone after the report was rendered (an interrupted --forcerun deletes it) is due
    again: Snakemake alone would see the report's files present and call the DAG up to date."""
    source = "overlay:kernels/rwkv6_bwd_fused/identity"
    rwkv6_workdir.run(f"candidate={source}")
    cid = candidate_id(CAMPAIGN, source)
    record = rwkv6_workdir.workdir / "results" / CAMPAIGN / "cpu" / "candidate_gate" / cid / "record.json"
    kept = record.with_name("record.kept.json")
    record.rename(kept)
    try:
        dry = rwkv6_workdir.run(f"candidate={source}", args=("-n",))
        assert "Nothing to be done" not in dry.stdout + dry.stderr, dry.stdout[-3000:]
        jobs = _job_stats(dry.stdout + dry.stderr)
        assert jobs.get("candidate_gate") == 1 and jobs.get("report") == 1, jobs
    finally:
        kept.rename(record)


def _job_stats(log: str) -> dict[str, int]:
    """Parse the first 'Job stats' table of a Snakemake log."""
    lines = log.splitlines()
    start = lines.index("Job stats:") + 3
    out = {}
    for line in lines[start:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        out[parts[0]] = int(parts[1])
    return out
