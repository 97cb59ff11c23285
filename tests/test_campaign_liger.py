"""A campaign on a target that is not fla: Liger-Kernel's Triton LayerNorm rewritten in place (row tiles).

The pinned liger-kernel 0.8.5 sdist (with its own tests) runs through Snakemake to SMOKE under Triton's CPU
interpreter, every stage included: the gate is Liger's LayerNorm test file, the mechanism is ``speeds_up`` (the
roofline of the two named kernels), every row is optimized with the same kernel names in both arms, and the end
to end stage trains transformers' GPT-NeoX with its LayerNorms swapped for Liger's by the campaign's patch.
"""

from __future__ import annotations

import pytest
from conftest import Workflow, candidate_id

pytestmark = pytest.mark.campaign
CAMPAIGN = "liger-layer-norm-rows"


def test_the_liger_campaign_runs_to_smoke(tmp_path) -> None:
    wf = Workflow(tmp_path)
    proc = wf.run(f"campaign={CAMPAIGN}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    cid = candidate_id(CAMPAIGN)
    base = wf.record(CAMPAIGN, "baseline_tests")
    assert base["status"] == "pass" and base["data"]["run"]["counts"].get("passed", 0) >= 5, base["data"]["run"]
    fixture = wf.record(CAMPAIGN, "fixture_freeze")
    assert fixture["status"] == "pass"
    pb = wf.record(CAMPAIGN, "profile_baseline")
    assert pb["data"]["mechanism"]["kinds"] == ["speeds_up"]
    entries = pb["data"]["rows"][0]["mechanism"]["speeds_up"]["entries"]
    assert [e["matched"] for e in entries] == [["_layer_norm_forward_kernel"], ["_layer_norm_backward_kernel"]]
    build = wf.record(CAMPAIGN, "candidate_build", cid)
    assert build["status"] == "pass"
    assert [f["path"] for f in build["data"]["diff"]["files"]] == ["src/liger_kernel/ops/layer_norm.py"]
    assert wf.record(CAMPAIGN, "candidate_gate", cid)["status"] == "pass"
    pc = wf.record(CAMPAIGN, "profile_candidate", cid)
    assert pc["status"] == "pass"
    for r in pc["data"]["rows"]:
        assert r["path"] == "optimized" and r["path_reason"].startswith("no dispatch class")
        assert r["baseline_pair_kernels"] == r["candidate_pair_kernels"] == ["_layer_norm_backward_kernel",
                                                                              "_layer_norm_forward_kernel"]
    bench = wf.record(CAMPAIGN, "bench", cid)
    assert bench["status"] == "pass" and {r["path"] for r in bench["data"]["rows"]} == {"optimized"}
    model = wf.record(CAMPAIGN, "model", cid)
    assert model["status"] == "pass" and model["data"]["model"]["workloads"] == ["dense"]
    assert model["data"]["model"]["patch"]["function"].endswith("model_patch.py:swap_layer_norms")
    assert wf.record(CAMPAIGN, "ncu", cid)["status"] == "unavailable"
    v = wf.verdict(CAMPAIGN)
    assert v["verdict"] == "SMOKE" and "never yields GO" in v["sentence"]
