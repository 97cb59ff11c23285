"""The timed stages of the default campaign, end to end on CPU with the identity (A/A) candidate.

Runs Snakemake on kgate's Snakefile in the session's shared workdir (the
baseline stages are reused when tests/test_campaign_cpu.py ran first). Under
the interpreter every timing is meaningless, so the timed gates are shown
with status skip; what is checked here is everything else the stages promise:
the records, the kernel census, the temporaries, bit-identical inputs, the
rounds and their alternation, memory, and the SMOKE verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Workflow, candidate_id

pytestmark = pytest.mark.campaign
CAMPAIGN = "rwkv6-bwd-fusion"
IDENTITY = "overlay:kernels/rwkv6_bwd_fused/identity"
CPU_NOTE = "CPU timings are not meaningful"


@pytest.fixture(scope="module", name="identity")
def _identity(rwkv6_workdir: Workflow) -> tuple[Workflow, str]:
    proc = rwkv6_workdir.run(f"candidate={IDENTITY}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return rwkv6_workdir, candidate_id(CAMPAIGN, IDENTITY)


def gates(rec: dict) -> dict[str, dict]:
    return {g["name"]: g for g in rec["gates"]}


def test_profile_baseline_attributes_the_hypothesis_and_never_stops_on_cpu(identity) -> None:
    wf, _ = identity
    rec = wf.record(CAMPAIGN, "profile_baseline")
    assert rec["status"] == "pass"
    g = gates(rec)
    assert g["removed_kernels_launched"]["status"] == "pass"
    assert g["temporaries_allocated"]["status"] == "pass"
    bound = g["plausible_speedup"]
    assert bound["status"] == "skip" and bound["detail"].startswith(CPU_NOTE) and "best case" in bound["threshold"]
    data = rec["data"]
    assert data["timings_meaningful"] is False and data["profile_rows"] == ["tiny_D16", "tiny_varlen_D16"]
    for row in data["rows"]:
        assert row["removed"]["launches_per_call"] == 1.0
        assert "chunk_rwkv6_bwd_kernel_intra" in row["census"] and "chunk_rwkv6_bwd_kernel_inter" in row["census"]
        assert all(t["found"] for t in row["temporaries"]) and row["expected_temporary_bytes"] == 2 * 16 * 16 * 4
        b = row["bound"]
        assert b["removed_bytes"] == 2 * 2 * 16 * 16 * 4
        assert b["best_case_speedup"] == pytest.approx(b["endpoint_ms"] / (b["endpoint_ms"] - b["removable_ms"]))
        assert row["peak_bytes"] > 0 and row["timer"].startswith("Triton interpreter")
    assert data["launch_cost"]["per_launch_us"] > 0 and data["bandwidth"]["bytes_per_s"] > 0


def test_profile_candidate_finds_every_identity_row_on_the_fallback_path(identity) -> None:
    wf, cid = identity
    rec = wf.record(CAMPAIGN, "profile_candidate", cid)
    assert rec["status"] == "pass"
    g = gates(rec)
    assert g["no_hidden_kernels"]["status"] == "pass" and g["candidate_runs"]["status"] == "pass"
    assert g["memory_matches_temporaries"]["status"] == "pass"
    assert g["compile_resources"]["status"] == "skip" and "interpreter" in g["compile_resources"]["detail"]
    assert g["pair_supports_bar"]["status"] == "skip"
    for row in rec["data"]["rows"]:
        assert row["path"] == "fallback" and row["implied_endpoint_speedup"] == 1.0
        assert row["peak_reduction_bytes"] == 0 and row["new_kernels"] == [] and row["gone_kernels"] == []
        assert row["census_base"] == row["census_cand"]


def test_bench_runs_interleaved_rounds_on_identical_inputs(identity) -> None:
    wf, cid = identity
    rec = wf.record(CAMPAIGN, "bench", cid)
    assert rec["status"] == "pass"
    data = rec["data"]
    assert data["rounds"] == 5
    keys = [r["key"] for r in data["rows"]]
    assert keys == ["tiny_D16:fwdbwd", "tiny_varlen_D16:fwdbwd", "tiny_D16:fwd"]
    for row in data["rows"]:
        assert row["orders"] == ["AB", "BA", "AB", "BA", "AB"]
        assert row["summary"]["base"]["n"] == row["summary"]["cand"]["n"] == 5
        assert set(row["summary"]["base"]) >= {"median_ms", "mean_ms", "std_ms", "min_ms", "p10_ms", "p20_ms",
                                                "p80_ms", "p90_ms", "n"}
        assert row["path"] == ("control" if row["role"] == "control" else "fallback")
        assert row["decision"]["continue"] is False and row["decision"]["rounds"] == 5
        assert row["peak_drop_bytes"] == 0 and row["kernels"]["base"] == row["kernels"]["cand"]
    assert set(data["input_hashes"]) == {"tiny_D16", "tiny_varlen_D16"}
    g = gates(rec)
    timed = [x for name, x in g.items() if name not in ("peak_memory_drop", "gpu_exclusive", "no_optimized_row_slow")]
    assert all(x["status"] == "skip" and CPU_NOTE in x["detail"] for x in timed), [x["name"] for x in timed]
    assert g["geomean_speedup"]["interval"] is not None
    assert g["peak_memory_drop"]["status"] == "pass"
    lines = Path(data["checkpoint"])
    ckpt = (wf.workdir / lines).read_text().splitlines()
    assert json.loads(ckpt[0])["kind"] == "header" and len(ckpt) == 1 + 5


def test_the_identity_run_is_a_smoke_verdict(identity) -> None:
    wf, cid = identity
    v = wf.verdict(CAMPAIGN)
    assert v["verdict"] == "SMOKE" and v["candidate"] == cid
    stages = {s["stage"]: s["status"] for s in v["stages"]}
    assert stages["profile_baseline"] == stages["profile_candidate"] == stages["bench"] == "pass"
