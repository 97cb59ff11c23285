"""Real records of the liger-ce-exp2-1266 replay on an H200, run through bench's first round before the device
time ran out (tests/data/bench/h200_liger_ce_exp2_to_bench/README.md): what kgate reads from them must agree
with what the stages decided, and the interrupted benchmark must resume from its checkpoint."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from conftest import REPO

from kgate import stats
from kgate.gates.bench import BenchConfig, to_rounds
from kgate.measure import checkpoints
from kgate.stats import AMBIGUOUS, FAST

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


TEN = DATA / "bench.rounds-ten.jsonl"


def test_ten_real_rounds_leave_the_geomean_straddling_the_bar_and_the_run_open(tmp_path: Path) -> None:
    """A later machine's run (bench.rounds-ten.jsonl, its profile_candidate record beside it): ten valid rounds,
    a fresh worker pair each, before the device time ran out. kgate's stopping rule on them: the small row
    (BT1024) still AMBIGUOUS, the four others FAST, the gated geomean's interval straddling the bar 1.11, so
    the run goes on (between looks at 10); a rerun on that machine resumes after the ten rounds, and one on
    another device sets them aside."""
    header, rounds = checkpoints.read_lines(TEN)
    assert header is not None and len(rounds) == 10
    assert len({r["pair"] for r in rounds}) == 10 and all(r["exclusive"]["checked"] for r in rounds)
    profiled = json.loads((DATA / "profile_candidate-ten.json").read_text())["data"]
    assert header["parts"]["candidate_sha"] == profiled["candidate_sha"] == _record("profile_candidate")["data"][
        "candidate_sha"], "the candidate commit is the same on both machines"
    keys = list(rounds[0]["rows"])
    bar = profiled["bar"]
    cfg = BenchConfig(bar=bar, class_key=None, classes=(), endpoints=("dense",))
    dec = stats.decide_bench({k: to_rounds(rounds, k) for k in keys}, cfg.controller(), gated=keys, bar=bar)
    classes = {k.split("_")[0]: d.classification for k, d in dec.rows.items()}
    assert classes == {"BT1024": AMBIGUOUS, "BT4096": FAST, "BT8192": FAST, "BT16384": FAST, "BT32768": FAST}
    assert dec.continue_ and dec.bar == stats.STRADDLES and dec.reason.endswith("between looks, the next at 11")
    assert bar == 1.11 and dec.geomean is not None and dec.geomean.lower < bar < dec.geomean.upper
    path = tmp_path / "rounds.jsonl"
    shutil.copy(TEN, path)
    kept, note = checkpoints.resume(path, header["parts"])
    assert len(kept) == 10 and note == "resumed after 10 recorded round(s)"
    kept, note = checkpoints.resume(path, dict(header["parts"], device="another-gpu"))
    assert kept == [] and note.startswith("set aside rounds.stale-")
