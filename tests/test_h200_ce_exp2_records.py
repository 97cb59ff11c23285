"""Real records of the liger-ce-exp2-1266 replay on an H200, run through bench's first round before the device
time ran out (tests/data/bench/h200_liger_ce_exp2_to_bench/README.md): what kgate reads from them must agree
with what the stages decided, and the interrupted benchmark must resume from its checkpoint."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from conftest import REPO

from kgate.measure import checkpoints

DATA = REPO / "tests" / "data" / "bench" / "h200_liger_ce_exp2_to_bench"


def _record(stage: str) -> dict:
    return json.loads((DATA / f"{stage}.json").read_text())


def _gate(record: dict, name: str) -> dict:
    return next(g for g in record["gates"] if g["name"] == name)


def test_every_stage_before_bench_passed_on_the_h200() -> None:
    for stage in ("target", "baseline_tests", "fixture_freeze", "profile_baseline", "candidate_build",
                  "candidate_gate", "profile_candidate"):
        rec = _record(stage)
        assert rec["gpu"] == "h200" and rec["campaign"] == "liger-ce-exp2-1266", stage
        assert rec["status"] == "pass", (stage, rec["reasons"])
    assert _gate(_record("fixture_freeze"), "fixture_only_adds")["value"] == "177 -> 185 collected (+8)"


def test_the_pair_bound_is_the_geomean_of_its_rows_implied_endpoints() -> None:
    rec = _record("profile_candidate")
    rows = rec["data"]["rows"]
    assert {r["path"] for r in rows} == {"optimized"}  # an in-place change: every row is on the optimized path
    implied = [r["endpoint_base_ms"] / (r["endpoint_base_ms"] - (r["baseline_pair_us"] - r["candidate_pair_us"]) / 1e3)
               for r in rows]
    for r, value in zip(rows, implied):
        assert math.isclose(value, r["implied_endpoint_speedup"], rel_tol=1e-9), r["row"]
    geomean = math.exp(sum(map(math.log, implied)) / len(implied))
    gate = _gate(rec, "pair_supports_bar")
    assert math.isclose(gate["value"], geomean, rel_tol=1e-5)
    assert gate["value"] >= rec["data"]["bar"] == 1.11


def test_the_benchmark_timed_the_code_the_gates_passed_and_resumes_from_its_round(tmp_path: Path) -> None:
    path = tmp_path / "rounds.jsonl"
    shutil.copy(DATA / "bench.rounds.jsonl", path)
    header, rounds = checkpoints.read_lines(path)
    assert header is not None and len(rounds) == 1
    profiled = _record("profile_candidate")["data"]
    assert header["parts"]["candidate_sha"] == profiled["candidate_sha"]
    assert header["parts"]["bench_base"] == profiled["bench_base"]
    kept, note = checkpoints.resume(path, header["parts"])
    assert [r["index"] for r in kept] == [0] and note == "resumed after 1 recorded round(s)"
    # another setup (here: another seed) sets the checkpoint aside instead of mixing its round in
    other = dict(header["parts"], seed=header["parts"]["seed"] + 1)
    kept, note = checkpoints.resume(path, other)
    assert kept == [] and note.startswith("set aside rounds.stale-")
