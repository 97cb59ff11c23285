"""A STOP at profile_baseline ends the DAG unless the run is forced (Snakemake's own dry run).

The records below are hand-written (the stages did not run): three baseline
stages that passed and a profile_baseline that stopped. Snakemake's dry run
shows which jobs the gate walk asks for next.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, candidate_id

from kgate.errors import IncompleteData
from kgate.stages import common as stage
from kgate.workflow import force_flag

CAMPAIGN = "rwkv6-bwd-fusion"


IDENTITY = "overlay:kernels/rwkv6_bwd_fused/identity"


def write_record(workdir: Path, name: str, status: str, when: float, candidate: str | None = None) -> Path:
    path = workdir / "results" / CAMPAIGN / "cpu" / name / (candidate or "") / "record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "kgate.stage/1", "stage": name, "campaign": CAMPAIGN, "gpu": "cpu",
                                "candidate": candidate, "status": status, "reasons": ["synthetic"], "gates": [],
                                "data": {}, "provenance": {}}))
    os.utime(path, (when, when))
    return path


def dry_run(workdir: Path, *config: str) -> dict[str, int]:
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
                           "--profile", str(REPO / "profiles/local"), "-n", "--config", f"campaign={CAMPAIGN}", "gpu=cpu",
                           f"candidate={IDENTITY}", *config],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    start = lines.index("Job stats:") + 3
    jobs = {}
    for line in lines[start:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        jobs[parts[0]] = int(parts[1])
    return jobs


def test_a_stop_blocks_the_dag_unless_forced(tmp_path: Path) -> None:
    """Without force only the report runs; with force=true the walk goes on to candidate_build."""
    t0 = time.time() - 1000
    for i, (name, status) in enumerate([("target", "pass"), ("baseline_tests", "pass"), ("fixture_freeze", "pass"),
                                        ("profile_baseline", "stop")]):
        write_record(tmp_path, name, status, t0 + 10 * i)
    assert dry_run(tmp_path) == {"report": 1, "all": 1}
    assert dry_run(tmp_path, "force=True") == {"candidate_build": 1, "report": 1, "all": 1}


def test_a_stage_reads_a_stopped_input_only_when_forced(tmp_path: Path) -> None:
    path = write_record(tmp_path, "profile_baseline", "stop", time.time())
    try:
        stage.load_inputs([str(path)])
    except IncompleteData as exc:
        assert "status 'stop'" in str(exc)
    else:
        raise AssertionError("a stopped input must block an unforced stage")
    assert stage.load_inputs([str(path)], force=True)["profile_baseline"]["status"] == "stop"
    failed = write_record(tmp_path, "fixture_freeze", "fail", time.time())
    try:
        stage.load_inputs([str(failed)], force=True)
    except IncompleteData as exc:
        assert "status 'fail'" in str(exc)
    else:
        raise AssertionError("force never runs past a failed correctness gate")
    measured = write_record(tmp_path, "bench", "fail", time.time(), "0123456789ab")
    with pytest.raises(IncompleteData, match="status 'fail'"):
        stage.load_inputs([str(measured)])
    assert stage.load_inputs([str(measured)], force=True)["bench"]["status"] == "fail"


@pytest.mark.parametrize(("failed", "forced_jobs"), [
    (["bench"], {"ncu": 1, "report": 1, "all": 1}),
    (["bench", "ncu"], {"model": 1, "report": 1, "all": 1}),
    (["candidate_gate"], {"report": 1, "all": 1}),
])
def test_a_forced_run_walks_past_a_measured_fail_but_not_a_failed_correctness_gate(
        tmp_path: Path, failed: list[str], forced_jobs: dict[str, int]) -> None:
    """bench (then ncu) failed, measurements: force schedules ncu, then model, which collect why; candidate_gate
    failed (the candidate is wrong): nothing more is measured, forced or not. (The walk asks for ncu first and
    for model once ncu's checkpoint is known, so a dry run shows one of them at a time.)"""
    cid = candidate_id(CAMPAIGN, IDENTITY)
    t0 = time.time() - 1000
    stages = [("target", "pass"), ("baseline_tests", "pass"), ("fixture_freeze", "pass"), ("profile_baseline", "stop"),
              ("candidate_build", "pass"), ("candidate_gate", "pass"), ("profile_candidate", "stop"), ("bench", "pass"),
              ("ncu", "pass")]
    stages = [(n, "fail" if n in failed else st) for n, st in stages[:[n for n, _ in stages].index(failed[-1]) + 1]]
    for i, (name, status) in enumerate(stages):
        write_record(tmp_path, name, status, t0 + 10 * i, cid if i >= 4 else None)
    assert dry_run(tmp_path) == {"report": 1, "all": 1}
    assert dry_run(tmp_path, "force=True") == forced_jobs


def test_a_stage_gets_force_only_when_an_input_needs_it(tmp_path: Path) -> None:
    """The measuring rules' ``force`` param (kgate.workflow.force_flag): in a forced run, ``--force`` only for a
    stage with an input record that would block it unforced, or that is not there yet; so adding force=true
    after an unforced run changes no param of a stage whose inputs passed (Snakemake would rerun it)."""
    t = time.time()
    passed = [str(write_record(tmp_path, s, "pass", t)) for s in ("fixture_freeze", "profile_baseline")]
    stopped = str(write_record(tmp_path, "profile_candidate", "stop", t, "0123456789ab"))
    inconclusive = str(write_record(tmp_path, "bench", "inconclusive", t, "0123456789ab"))
    assert force_flag(True, passed) == ""
    assert force_flag(True, [*passed, stopped]) == force_flag(True, [*passed, inconclusive]) == "--force"
    assert force_flag(True, [*passed, str(tmp_path / "missing" / "record.json")]) == "--force"
    assert force_flag(False, [*passed, stopped]) == ""
