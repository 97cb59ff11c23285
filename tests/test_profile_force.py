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

from conftest import REPO

from kgate import stage
from kgate.errors import IncompleteData

CAMPAIGN = "rwkv6-bwd-fusion"


def write_record(workdir: Path, name: str, status: str, when: float) -> Path:
    path = workdir / "results" / CAMPAIGN / "cpu" / name / "record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "kgate.stage/1", "stage": name, "campaign": CAMPAIGN, "gpu": "cpu",
                                "candidate": None, "status": status, "reasons": ["synthetic"], "gates": [],
                                "data": {}, "provenance": {}}))
    os.utime(path, (when, when))
    return path


def dry_run(workdir: Path, *config: str) -> dict[str, int]:
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
                           "--profile", str(REPO / "profiles/local"), "-n", "--config", f"campaign={CAMPAIGN}", "gpu=cpu",
                           "candidate=overlay:kernels/rwkv6_bwd_fused/identity", *config],
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
        raise AssertionError("force never runs past a failed gate")
