"""Figures the docs quote from committed H200 records match those records."""

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
