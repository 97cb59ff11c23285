"""The real H200 A/A benchmark, recomputed from its raw rounds.

MEASURED DATA: ``tests/data/bench/h200_identity/`` holds the record and the
round checkpoint (``rounds.jsonl``) of bench for the identity candidate of
the default campaign (the backward host function rebound to itself, so both
arms run the same kernels) on an NVIDIA H200, copied unchanged (README
there). The statistics are rerun on the recorded samples: kgate must reach
the decisions it recorded, and an A/A must come out neutral where it can
resolve at all.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kgate import bench, stats

DATA = Path(__file__).parent / "data" / "bench" / "h200_identity"


@pytest.fixture(name="aa", scope="module")
def _aa() -> tuple[dict, list[dict]]:
    record = json.loads((DATA / "record.json").read_text())
    lines = [json.loads(line) for line in (DATA / "rounds.jsonl").read_text().splitlines()]
    return record, [item for item in lines if item.get("kind") == "round"]


def test_the_recorded_rounds_reproduce_every_rows_decision(aa) -> None:
    """stats.decide over the checkpointed rounds gives each row's recorded class and interval."""
    record, rounds = aa
    data = record["data"]
    ctl = data["controller"]
    cfg = stats.ControllerConfig(min_rounds=ctl["min_rounds"], max_rounds=ctl["max_rounds"],
                                 resolution=ctl["resolution"])
    assert len(rounds) == data["rounds"] == ctl["max_rounds"]
    assert math.isclose(cfg.look_confidence, ctl["look_confidence"])
    for row in data["rows"]:
        d = stats.decide(bench.to_rounds(rounds, row["key"]), cfg)
        assert not d.continue_ and d.classification == row["classification"], row["key"]
        assert [d.estimate.lower, d.estimate.upper] == pytest.approx(row["interval"], rel=1e-9), row["key"]


def test_the_identity_is_neutral_where_the_bench_resolves(aa) -> None:
    """Same kernels in both arms: the geomean interval holds 1.0, and every row resolved to within 1 %
    is SAME. The launch-bound rows (about 2-3 ms a step, host time varying by up to 1.5x between rounds)
    stay AMBIGUOUS at the 15-round cap, and one of the two forward-only controls came out SLOW: a false
    positive, about what 9 row decisions at 95 % each allow (the family of rows is not corrected)."""
    data = aa[0]["data"]
    g = data["geomean"]
    assert g["lower"] < 1.0 < g["upper"]
    tight = [r for r in data["rows"] if r["interval"][1] - r["interval"][0] < 0.01]
    assert len(tight) == 4 and all(r["classification"] == stats.SAME for r in tight)
    loose = [r for r in data["rows"] if r not in tight]
    assert all(r["interval"][1] - r["interval"][0] > 0.1 for r in loose)
    assert [r["key"] for r in loose if r["classification"] == stats.SLOW] == ["B4_T2048_H16_D128:fwd"]
    assert all(r["path"] in ("fallback", "control") for r in data["rows"])
