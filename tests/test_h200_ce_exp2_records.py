"""Real records of the liger-ce-exp2-1266 replay on H200s (tests/data/bench/h200_liger_ce_exp2_to_bench/README.md):
runs cut short by the device time at 1 and 10 rounds, and the run to its verdict at the cap of 15. What kgate
reads from them must agree with what the stages decided, and an interrupted benchmark must resume from its
checkpoint."""

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


FIFTEEN = DATA / "bench.rounds-fifteen.jsonl"


def test_fifteen_real_rounds_end_at_the_cap_inconclusive_never_failed() -> None:
    """The run to the verdict (2026-12-03, tests/data/records/h200_liger_ce_exp2_inconclusive): fifteen valid
    rounds, a fresh worker pair each. At the cap the small row is still AMBIGUOUS and the geomean's interval
    still straddles the bar: the stopping rule stops there, and a straddle is inconclusive, never a fail. The
    bench record of that run says the same from the same rounds."""
    header, rounds = checkpoints.read_lines(FIFTEEN)
    assert header is not None and len(rounds) == 15 and len({r["pair"] for r in rounds}) == 15
    assert all(r["exclusive"]["checked"] for r in rounds)
    record = json.loads((DATA / "bench-unforced.json").read_text())
    assert header["parts"]["candidate_sha"] == record["data"]["candidate_sha"]
    keys = list(rounds[0]["rows"])
    bar = record["data"]["bar"]
    cfg = BenchConfig(bar=bar, class_key=None, classes=(), endpoints=("dense",))
    dec = stats.decide_bench({k: to_rounds(rounds, k) for k in keys}, cfg.controller(), gated=keys, bar=bar)
    classes = {k.split("_")[0]: d.classification for k, d in dec.rows.items()}
    assert classes == {"BT1024": AMBIGUOUS, "BT4096": FAST, "BT8192": FAST, "BT16384": FAST, "BT32768": FAST}
    assert not dec.continue_ and dec.bar == stats.STRADDLES and "cap of 15" in dec.reason
    assert dec.geomean.lower < bar < dec.geomean.upper
    gate = _gate(record, "geomean_speedup")
    assert record["status"] == gate["status"] == "inconclusive"
    assert math.isclose(gate["value"], dec.geomean.speedup, rel_tol=1e-6)
    assert [round(x, 3) for x in gate["interval"]] == [round(dec.geomean.lower, 3), round(dec.geomean.upper, 3)]


def test_each_fresh_pair_says_where_its_start_up_went() -> None:
    """The unforced bench record (the call that resumed at round 5 and ran to the cap): each fresh pair of that
    call has its ready time split into start, prepare and warm; the rounds of the earlier call, from a
    checkpoint written before the pairs' seconds were kept in it, have none."""
    pairs = json.loads((DATA / "bench-unforced.json").read_text())["data"]["replication"]["pairs"]
    timed = [p for p in pairs if p["ready_s"] is not None]
    assert [p["pair"] for p in timed] == list(range(5, 15))
    for p in timed:
        assert set(p["phases_s"]) == {"start", "prepare", "warm"}
        assert sum(p["phases_s"].values()) <= p["ready_s"] + 0.01
        assert p["phases_s"]["prepare"] > p["phases_s"]["start"] > p["phases_s"]["warm"] > 0
