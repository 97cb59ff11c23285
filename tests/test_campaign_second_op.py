"""A second campaign on another fla op (chunk_local_cumsum): nothing in kgate is RWKV6-specific."""

from __future__ import annotations

import pytest
from conftest import Workflow, candidate_id

pytestmark = pytest.mark.campaign
CAMPAIGN = "chunk-local-cumsum-identity"


def test_second_op_campaign_runs_end_to_end(tmp_path) -> None:
    wf = Workflow(tmp_path)
    proc = wf.run(f"campaign={CAMPAIGN}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cid = candidate_id(CAMPAIGN)
    for stage in ("target", "baseline_tests", "fixture_freeze"):
        assert wf.record(CAMPAIGN, stage)["status"] == "pass", stage
    build = wf.record(CAMPAIGN, "candidate_build", cid)
    assert build["status"] == "pass"
    assert [f["path"] for f in build["data"]["diff"]["files"]] == ["fla/ops/utils/cumsum.py"]
    assert wf.record(CAMPAIGN, "candidate_gate", cid)["status"] == "pass"
    assert wf.verdict(CAMPAIGN)["verdict"] == "SMOKE"
