"""Figures the docs quote from committed GPU records match those records."""

from __future__ import annotations

import json

from conftest import REPO


def test_fresh_pair_cost_in_statistics_doc_is_the_records() -> None:
    record = json.loads((REPO / "tests" / "data" / "records" / "h200_cumsum_forced_bench" / "bench.json").read_text())
    ready = [p["ready_s"] for p in record["data"]["replication"]["pairs"] if p["ready_s"] is not None]
    assert record["data"]["replication"]["rounds_per_worker_pair"] == 1 and len(ready) == record["data"]["rounds"] - 1
    doc = " ".join((REPO / "docs" / "statistics.md").read_text().split())
    assert f"{min(ready):.1f}-{max(ready):.1f} s to start, check and warm" in doc
    assert f"{sum(ready):.0f} s of the stage's {record['provenance']['wall_s']:.0f} s for five rounds" in doc


def test_fresh_pair_phases_in_measurement_doc_are_the_records() -> None:
    """docs/measurement.md's split of a fresh pair's start-up on the H200 (the cross-entropy replay's bench)."""
    path = REPO / "tests" / "data" / "bench" / "h200_liger_ce_exp2_to_bench" / "bench-unforced.json"
    pairs = [p for p in json.loads(path.read_text())["data"]["replication"]["pairs"] if p["ready_s"] is not None]

    def span(values: list[float]) -> str:
        return f"{round(min(values))}-{round(max(values))}"

    phases = {k: [p["phases_s"][k] for p in pairs] for k in ("start", "prepare", "warm")}
    assert max(phases["warm"]) < 0.5, phases["warm"]
    doc = " ".join((REPO / "docs" / "measurement.md").read_text().split())
    assert (f"after {span([p['ready_s'] for p in pairs])} s (`phases_s`: start {span(phases['start'])} s, "
            f"prepare {span(phases['prepare'])} s, warm under 0.5 s)") in doc


def test_default_campaign_cold_figures_in_cache_doc_are_the_records() -> None:
    """docs/cache.md's account of the default campaign from cold on an H100, and the README's summary of it."""
    root = REPO / "tests" / "data" / "timing" / "h100_default_cut"
    rec = json.loads((root / "time-to-verdict.json").read_text())
    assert rec["machine"]["stack"]["gpu"] == "NVIDIA H100 80GB HBM3" and rec["machine"]["gate_workers_auto"] == 14
    stage = {(s, st["stage"]): st for s, sc in rec["scenarios"].items() for ph in sc["phases"].values()
             for st in ph["stages"]}
    cold, warm = stage[("cold", "baseline_tests")], stage[("warm", "baseline_tests")]
    assert cold["cache_state"] == "cold" and warm["cache_state"] == "warm"
    tests = json.loads((root / "cold-baseline_tests.outcomes.json").read_text())["tests"]
    durations = [t["duration_s"] for t in tests.values()]
    per_worker: dict[str, float] = {}
    for t in tests.values():
        per_worker[t["worker"]] = per_worker.get(t["worker"], 0.0) + t["duration_s"]
    twice = sum(1 for w in per_worker if sum(t["worker"] == w for t in tests.values()) == 2)
    peaks = [t["gpu_peak_allocated_bytes"] / 1e6 for t in tests.values()]
    reserved = [t["gpu_peak_reserved_bytes"] / 1e6 for t in tests.values()]
    fx_warm = json.loads((root / "warm-fixture_freeze.cut-outcomes.json").read_text())["tests"]
    bf16 = sorted(t["duration_s"] for k, t in fx_warm.items() if "bf16" in k)
    doc = " ".join((REPO / "docs" / "cache.md").read_text().split())
    assert f"Cold baseline_tests took {cold['wall_s']:.1f} s for the {len(tests)} oracle cases" in doc
    added = cold["cache_added"]
    assert f"It added {added['kernels']} compiled kernels and {added['autotune']} autotune picks" in doc
    assert (f"Each case took {min(durations):.0f}-{max(durations):.0f} s, {sum(durations):.0f} s summed over the "
            f"{len(per_worker)} workers. {['No', 'One', 'Two', 'Three', 'Four', 'Five', 'Six'][twice]} workers ran "
            f"two cases one after the other; the busiest finished after {max(per_worker.values()):.0f} s.") in doc
    assert f"warm baseline_tests took {warm['wall_s']:.1f} s" in doc
    assert f"at least {sum(durations):.0f} / 16 = {sum(durations) / 16:.0f} s" in doc
    assert f"with {len(bf16)} of the 9 bf16 cases done, in {bf16[0]:.0f}-{bf16[-1]:.0f} s each" in doc
    assert (f"{min(peaks):.0f}-{max(peaks):.0f} MB allocated, {min(reserved):.0f}-{max(reserved):.0f} MB "
            "reserved") in doc
    readme = " ".join((REPO / "README.md").read_text().split())
    assert (f"cold baseline_tests took {cold['wall_s']:.1f} s ({added['kernels']} kernels compiled, "
            f"{added['autotune']} autotune picks), warm {warm['wall_s']:.1f} s") in readme
