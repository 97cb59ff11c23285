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

from kgate.stages import bench

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
        b, removes = row["bound"], row["mechanism"]["removes"]
        assert removes["removed_bytes"] == 2 * 2 * 16 * 16 * 4 and removes["removed_launches_per_call"] == 1.0
        assert b["saved_ms"] == pytest.approx(removes["launch_ms"] + removes["traffic_ms"])
        assert b["best_case_speedup"] == pytest.approx(b["endpoint_ms"] / (b["endpoint_ms"] - b["saved_ms"]))
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
    # not a timing: after each row's profile, on fresh values, the identity computes what BENCH_BASE computes
    assert g["timed_outputs_match"]["status"] == "pass" and g["timed_outputs_match"]["value"].startswith("2/2")
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
    # the campaign leaves bench.timer at its default; on CPU no sample is held, so no row counts hosts ahead
    assert data["timer"] == {"setting": "host_ahead", "method": bench.TIMER_METHODS["cpu"]}
    assert all(row["host_ahead"] is None for row in data["rows"])
    g = gates(rec)
    timed = [x for name, x in g.items()
             if name not in ("peak_memory_drop", "gpu_exclusive", "no_optimized_row_slow", "same_env", "timed_outputs_match")]
    # not a timing: the identity's outputs on every round's fresh inputs equal BENCH_BASE's, judged on CPU too
    assert g["timed_outputs_match"]["status"] == "pass" and g["timed_outputs_match"]["value"].startswith("15/15")
    assert g["same_env"]["status"] == "pass", g["same_env"]
    assert all(x["status"] == "skip" and CPU_NOTE in x["detail"] for x in timed), [x["name"] for x in timed]
    assert g["geomean_speedup"]["interval"] is not None
    assert g["peak_memory_drop"]["status"] == "pass"
    lines = Path(data["checkpoint"])
    ckpt = (wf.workdir / lines).read_text().splitlines()
    assert json.loads(ckpt[0])["kind"] == "header" and len(ckpt) == 1 + 5
    # a fresh pair of workers every round (the default), part of the run key, each round naming its pair
    header = json.loads(ckpt[0])
    assert header["parts"]["rounds_per_worker_pair"] == 1
    assert [json.loads(x)["pair"] for x in ckpt[1:]] == [0, 1, 2, 3, 4]
    rep = data["replication"]
    assert rep["rounds_per_worker_pair"] == 1 and [p["rounds"] for p in rep["pairs"]] == [[0], [1], [2], [3], [4]]
    assert len({pid for p in rep["pairs"] for pid in p["pids"].values()}) == 10, "every pair is two fresh processes"
    assert rep["pairs"][0]["ready_s"] is None and all(p["ready_s"] > 0 for p in rep["pairs"][1:])
    for p in rep["pairs"][1:]:
        ph = p["phases_s"]
        assert {k for k in ph if "." not in k} == {"start", "prepare", "warm"}
        # each worker's own init inside the pair's start: torch, the target, the device, each measured
        for arm in ("base", "cand"):
            part = {k.rsplit(".", 1)[1]: v for k, v in ph.items() if k.startswith(f"start.{arm}.")}
            assert set(part) == {"torch", "target", "device", "total"} and part["total"] <= ph["start"] + 0.01
            assert part["torch"] > 0 and part["torch"] + part["target"] + part["device"] <= part["total"] + 0.01
    assert data["stopping"]["valid_rounds"] == 5 and data["stopping"]["excluded_rounds"] == []
    assert data["calibration"]["rows"] == 3 and set(data["calibration"]) == {"rows", "look", "plain"}
    assert all([(p["pair"], p["rounds"]) for p in row["pairs"]] == [(i, 1) for i in range(5)] for row in data["rows"])
    assert not any("one pair of worker processes" in w for row in data["rows"] for w in row["decision"]["warnings"])


def test_the_identity_run_is_a_smoke_verdict(identity) -> None:
    wf, cid = identity
    v = wf.verdict(CAMPAIGN)
    assert v["verdict"] == "SMOKE" and v["candidate"] == cid
    stages = {s["stage"]: s["status"] for s in v["stages"]}
    assert stages["profile_baseline"] == stages["profile_candidate"] == stages["bench"] == "pass"
    assert stages["ncu"] == "unavailable" and "ncu: unavailable on CPU" in v["sentence"]


def test_ncu_records_unavailable_on_cpu_with_what_it_would_run(identity) -> None:
    """The Nsight Compute stage runs after bench and, without a GPU, records why it measured nothing."""
    wf, cid = identity
    rec = wf.record(CAMPAIGN, "ncu", cid)
    assert rec["status"] == "unavailable" and rec["data"]["available"] is False
    g = gates(rec)["ncu_counters"]
    assert g["status"] == "unavailable" and "no GPU" in g["detail"]
    planned = rec["data"]["commands_planned"]
    assert list(planned) == ["B4_T2048_H16_D128", "B8_T2048_H32_D256", "varlen_D128"]
    full = planned["B4_T2048_H16_D128"]["cand"]["full"]
    assert "--profile-from-start" in full and full[full.index("--clock-control") + 1] == "none"
    assert "Not measured:" in (wf.workdir / "reports" / CAMPAIGN / "cpu" / "index.html").read_text()


def test_model_trains_both_workloads_in_interleaved_blocks(identity) -> None:
    """The model stage runs past ncu's unavailable record: fla's RWKV6 LM from the flash-linear-attention sdist,
    the kernels from each arm's worktree, dense and packed varlen blocks AB/BA, tokens/s summaries per arm."""
    wf, cid = identity
    rec = wf.record(CAMPAIGN, "model", cid)
    assert rec["status"] == "pass", rec["reasons"]
    data = rec["data"]
    assert data["layers"] == {"requested": 1, "used": 1, "min": None, "reduced": False,
                              "attempts": [{"layers": 1, "oom": None}]}
    assert data["model"]["model_class"] == "fla.models.rwkv6:RWKV6ForCausalLM" and data["model"]["parameters"] > 0
    [pkg] = data["model"]["packages"]
    assert pkg["requirement"] == "flash-linear-attention==0.6.0" and {"layers", "models"} <= set(pkg["adds"])
    for arm in ("base", "cand"):
        info = data["workers"][arm]
        assert info["modules"]["elsewhere"] == [] and info["modules"]["worktree"] > 0
        assert info["class_files"]["model_class"].startswith(pkg["folder"])
        worktree = "bench_base" if arm == "base" else f"cand-{cid}"
        assert info["package_file"].endswith(f"/wt/{worktree}/fla/__init__.py"), info["package_file"]
    sched = data["schedule"]
    assert sched["tokens_per_step"] == 80 and sum(sched["varlen_lengths"]) == 80
    assert len(sched["varlen_lengths"]) == 3 and len(set(sched["varlen_lengths"])) > 1
    assert data["blocks"] == 3 and data["stopped"] == "the cap of 3 blocks per arm"
    for w in data["workloads"]:
        assert w["orders"] == ["AB", "BA", "AB"]
        for arm in ("base", "cand"):
            s = w["tokens_per_s"][arm]
            assert s["n"] == 3 and s["min_tokens_per_s"] <= s["median_tokens_per_s"] <= s["max_tokens_per_s"]
            assert len(w["block_tokens_per_s"][arm]) == 3 and w["peak_bytes"][arm] > 0
        assert w["interval"][0] <= w["ratio"] <= w["interval"][1]
    g = gates(rec)
    for name in ("dense_tokens_per_s_gain", "varlen_tokens_per_s_neutral"):
        assert g[name]["status"] == "skip" and g[name]["detail"].startswith(CPU_NOTE) and g[name]["interval"]
    assert g["same_env"]["status"] == "pass" and g["gpu_exclusive"]["status"] == "skip"
    ckpt = (wf.workdir / data["checkpoint"]).read_text().splitlines()
    assert json.loads(ckpt[0])["kind"] == "header" and len(ckpt) == 1 + 3
    html = (wf.workdir / "reports" / CAMPAIGN / "cpu" / "index.html").read_text()
    assert "Model training throughput" in html and "Model: tokens/s per block, per workload and arm" in html
    assert {s["stage"]: s["status"] for s in wf.verdict(CAMPAIGN)["stages"]}["model"] == "pass"
