"""A real campaign through the Slurm profile on the local single-node cluster (scripts/slurm-local.sh).

Every compute stage must run as its own Slurm job (distinct job ids in the
records); rules that need no compute node run on the submit host and say so.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import Workflow, candidate_id

CAMPAIGN = "chunk-local-cumsum-identity"


def _cluster_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    return proc.returncode == 0 and any(state in proc.stdout for state in ("idle", "mix", "alloc"))


pytestmark = [pytest.mark.campaign, pytest.mark.slurm,
              pytest.mark.skipif(not _cluster_up(), reason="no local Slurm: run scripts/slurm-local.sh start")]


def test_each_compute_stage_is_its_own_slurm_job(tmp_path) -> None:
    wf = Workflow(tmp_path)
    proc = wf.run(f"campaign={CAMPAIGN}", profile="profiles/slurm-local", timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    cid = candidate_id(CAMPAIGN)
    assert wf.verdict(CAMPAIGN)["verdict"] == "SMOKE"
    records = {}
    for stage_dir in sorted((tmp_path / "results" / CAMPAIGN / "cpu").iterdir()):
        if stage_dir.name == "report":
            continue
        cand = cid if (stage_dir / cid).is_dir() else None
        records[stage_dir.name] = wf.record(CAMPAIGN, stage_dir.name, cand)
    compute = {s: r for s, r in records.items() if not r["provenance"]["local_rule"]}
    local = {s: r for s, r in records.items() if r["provenance"]["local_rule"]}
    assert {"baseline_tests", "fixture_freeze", "candidate_gate"} <= set(compute)
    assert {"target", "candidate_build"} <= set(local)
    job_ids = [r["provenance"]["slurm"]["job_id"] for r in compute.values()]
    assert all(job_ids), {s: r["provenance"]["slurm"] for s, r in compute.items()}
    assert len(set(job_ids)) == len(job_ids), job_ids
    for r in compute.values():
        assert r["provenance"]["slurm"]["node"] == "localhost"
    for r in local.values():
        assert not (r["provenance"]["slurm"] or {}).get("job_id")
    logs = list((tmp_path / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert len(logs) >= len(compute), "successful jobs' logs are kept as evidence"
