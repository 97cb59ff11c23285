"""Tests of kgate.plan and ``python -m kgate plan``: the run's plan from a results tree, which it never writes.

The trees are built in tmp_path from the committed H200 records of
tests/data/records/ (real runs of the default and upstream campaigns, whose
candidate id is the current overlay's) and the synthetic ones, under their
own campaign and device class, with file times set from each record's
finished_utc in stage order, as a run leaves them. The epoch ledger holds the
current contract, so the records' epoch 1 is this run's epoch.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import shutil
import statistics
import time
from pathlib import Path

import pytest

from kgate import epochs, paths, plan, protocol
from kgate.campaign import load
from kgate.cli import main
from kgate.errors import ConfigError
from kgate.records import StageResult, build_record, write_json

DATA = Path(__file__).parent / "data" / "records"
DEFAULT, UPSTREAM = "rwkv6-bwd-fusion", "rwkv6-bwd-fusion-upstream"


def _stamp(record: dict) -> float:
    return float(calendar.timegm(time.strptime(record["provenance"]["finished_utc"], "%Y-%m-%dT%H:%M:%SZ")))


def _place(root: Path, scenario: str, *, under: Path | None = None) -> dict[str, dict]:
    """Copy a scenario's stage records to their result paths (byte for byte); mtimes = finished_utc."""
    placed = {}
    for stage in protocol.STAGES:
        src = DATA / scenario / f"{stage}.json"
        if not src.exists():
            continue
        rec = json.loads(src.read_text())
        rel = paths.record(rec["campaign"], rec["gpu"], stage, rec["candidate"])
        dest = root / (under / rel.relative_to("results") if under else rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        os.utime(dest, (_stamp(rec), _stamp(rec)))
        placed[stage] = rec
    return placed


def _ledger(root: Path, name: str, *, frozen: bool = True, contract: str | None = None) -> None:
    cur = epochs.contract(load(name))
    entry = {"number": 1, "contract": contract or cur.digest, "parts": cur.parts, "opened_utc": "2026-11-30T05:00:00Z",
             "reason": "first run", "changed": [],
             "frozen": {"h200": {"bench_base": "0" * 40, "utc": "2026-11-30T05:25:07Z"}} if frozen else {}}
    write_json(root / paths.epochs_ledger(name), {"schema": epochs.LEDGER_SCHEMA, "campaign": name, "epochs": [entry]})


def _doctor(root: Path, wall_s: float) -> None:
    rec = build_record(stage="doctor", campaign=DEFAULT, gpu="h200", candidate=None, result=StageResult(gates=[]),
                       provenance={"started_utc": "2026-11-30T05:23:40Z", "finished_utc": "2026-11-30T05:23:44Z",
                                   "wall_s": wall_s, "host": "node-a"})
    path = root / paths.record(DEFAULT, "h200", "doctor")
    write_json(path, rec)
    os.utime(path, (_stamp(rec), _stamp(rec)))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The default campaign's H200 run (stopped by profile_baseline, forced on to a failed bench), the upstream
    campaign's run (a failed candidate_build) and the synthetic campaign on h200 and cpu."""
    _place(tmp_path, "h200_default_bench")
    _place(tmp_path, "h200_upstream_coverage_fail")
    _place(tmp_path, "synthetic_h200_hostile")
    _place(tmp_path, "synthetic_cpu_smoke")
    _ledger(tmp_path, DEFAULT)
    _ledger(tmp_path, UPSTREAM)
    _doctor(tmp_path, 4.25)
    return tmp_path


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _median_wall(stage: str, gpu: str, scenarios: list[str]) -> float | None:
    """Independently of kgate.plan: the median wall_s of the committed records placed in the tree."""
    walls = []
    for s in scenarios:
        f = DATA / s / f"{stage}.json"
        if f.exists() and json.loads(f.read_text())["gpu"] == gpu:
            walls.append(json.loads(f.read_text())["provenance"]["wall_s"])
    return statistics.median(walls) if walls else None


SCENARIOS = ["h200_default_bench", "h200_upstream_coverage_fail", "synthetic_h200_hostile", "synthetic_cpu_smoke"]


def test_passing_records_are_reused_and_the_first_failed_gate_blocks_the_rest(tree: Path) -> None:
    p = plan.build({"campaign": DEFAULT, "gpu": "h200"}, tree)
    rows = {s.stage: s for s in p.stages}
    assert [s.stage for s in p.stages] == list(protocol.STAGES)
    for stage in ("target", "baseline_tests", "fixture_freeze", "profile_baseline"):
        assert rows[stage].action == "reuse", rows[stage]
    assert rows["profile_baseline"].status == "stop"
    stop_gate = next(g["name"] for g in json.loads((DATA / "h200_default_bench" / "profile_baseline.json").read_text())
                     ["gates"] if g["status"] not in ("pass", "skip"))
    for stage in protocol.STAGES[protocol.STAGES.index("candidate_build"):]:
        assert rows[stage].action == "blocked", rows[stage]
        assert rows[stage].blocked_by == plan.Blocker("profile_baseline", "stop", stop_gate,
                                                      rows[stage].blocked_by.detail)
        assert stop_gate in rows[stage].why
    # candidate stages are keyed by the candidate id: their records exist at the current candidate's paths
    assert rows["bench"].record == f"results/{DEFAULT}/h200/bench/{p.candidate}/record.json"
    assert rows["bench"].record_exists and rows["bench"].status == "fail"
    assert p.preflight.action == "reuse" and p.gpu_estimate_s == 0.0 and p.running == []


def test_forced_run_reuses_the_measured_stages_and_runs_the_missing_ones(tree: Path) -> None:
    p = plan.build({"campaign": DEFAULT, "gpu": "h200", "force": True}, tree)
    actions = {s.stage: s.action for s in p.stages}
    assert actions == {**{s: "reuse" for s in protocol.STAGES[:8]}, "ncu": "run", "model": "run"}
    assert p.unestimated == ["ncu", "model"] and p.dry_run_horizon == "ncu"


def test_a_failed_integrity_gate_blocks_a_forced_run_and_is_named(tree: Path) -> None:
    p = plan.build({"campaign": UPSTREAM, "gpu": "h200", "force": "true"}, tree)
    rows = {s.stage: s for s in p.stages}
    assert rows["candidate_build"].action == "reuse" and rows["candidate_build"].status == "fail"
    gate = next(g["name"] for g in json.loads((DATA / "h200_upstream_coverage_fail" / "candidate_build.json")
                                              .read_text())["gates"] if g["status"] == "fail")
    for stage in ("candidate_gate", "profile_candidate", "bench", "ncu", "model"):
        assert rows[stage].action == "blocked"
        assert (rows[stage].blocked_by.stage, rows[stage].blocked_by.gate) == ("candidate_build", gate)
    # no doctor record for this campaign: the preflight would run, estimated from the default campaign's
    assert p.preflight.action == "run" and p.preflight.estimate_s == 4.25 and p.gpu_estimate_s == 4.25


def test_estimates_are_the_median_of_earlier_records_of_the_stage_on_the_device_class(tree: Path) -> None:
    p = plan.build({"campaign": DEFAULT, "gpu": "h200"}, tree)
    for s in p.stages:
        want = _median_wall(s.stage, "h200", SCENARIOS)
        assert s.estimate_s == (round(want, 3) if want is not None else None), s.stage
    # three campaigns on h200 (41.28, 62.852, 241.0); the cpu record (8.9) is another device class
    assert {s.stage: s for s in p.stages}["baseline_tests"].estimate_records == 3
    cpu = plan.build({"campaign": DEFAULT, "gpu": "cpu"}, tree)
    assert {s.stage: s.estimate_s for s in cpu.stages}["baseline_tests"] == 8.9
    assert all(s.action == "run" and not s.record_exists for s in cpu.stages)


def test_new_epoch_reruns_everything_and_totals_the_gpu_stages(tree: Path) -> None:
    _ledger(tree, DEFAULT, contract="bd0a9bd28c6b7ffd")   # the records' own epoch 1, frozen with another contract
    with pytest.raises(ConfigError, match="contract changed since epoch 1 was frozen"):
        plan.build({"campaign": DEFAULT, "gpu": "h200"}, tree)
    # the archive new_epoch=true would make (a copy of the live records) counts once in the estimates
    _place(tree, "h200_default_bench", under=paths.epoch_archive(DEFAULT, 1).relative_to("results"))
    p = plan.build({"campaign": DEFAULT, "gpu": "h200", "new_epoch": True}, tree)
    assert p.epoch.number == 2 and p.epoch.action == "new epoch"
    assert all(s.action == "run" for s in p.stages)
    assert "epoch 1" in p.stages[0].why
    want = sum(_median_wall(s, "h200", SCENARIOS) or 0.0 for s in protocol.STAGES if s in protocol.GPU_STAGES)
    assert p.gpu_estimate_s == pytest.approx(want, abs=1e-3)
    assert {s.stage: s.estimate_records for s in p.stages}["bench"] == 1
    assert p.unestimated == ["ncu", "model"]


def test_a_record_older_than_its_input_reruns_it_and_what_follows(tree: Path) -> None:
    fixture = tree / paths.record(DEFAULT, "h200", "fixture_freeze")
    later = tree / paths.record(DEFAULT, "h200", "profile_baseline")
    os.utime(fixture, (later.stat().st_mtime + 60, later.stat().st_mtime + 60))
    rows = {s.stage: s for s in plan.build({"campaign": DEFAULT, "gpu": "h200", "force": True}, tree).stages}
    assert [rows[s].action for s in ("target", "baseline_tests", "fixture_freeze")] == ["reuse"] * 3
    assert rows["profile_baseline"].action == "run" and "fixture_freeze" in rows["profile_baseline"].why
    assert rows["bench"].action == "run" and "runs again" in rows["bench"].why


def test_the_plan_writes_nothing(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(tree)
    assert main(["plan", "--campaign", DEFAULT, "--gpu", "h200", "--root", str(tree)]) == 0
    text = capsys.readouterr().out
    assert main(["plan", "--campaign", DEFAULT, "--gpu", "h200", "--force", "--root", str(tree), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    empty = tree / "fresh"
    empty.mkdir()
    assert main(["plan", "--campaign", DEFAULT, "--gpu", "h200", "--root", str(empty)]) == 0
    capsys.readouterr()
    assert _snapshot(tree) == before and list(empty.iterdir()) == []
    assert re.search(r"^profile_baseline\s+yes\s+stop\s+reuse\s+", text, re.M)
    assert re.search(r"^bench\s+yes\s+fail\s+blocked\s+.*profile_baseline \(stop: ", text, re.M)
    assert data["schema"] == "kgate.plan/1" and data["total"]["gpu_stages_run"] == ["ncu", "model"]
    assert [s["stage"] for s in data["stages"]] == list(protocol.STAGES)
    assert {"estimate_s", "record", "action", "blocked_by"} <= set(data["stages"][0])


def test_a_bad_campaign_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--campaign", "no-such-campaign", "--gpu", "h200", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-campaign" in err and err.startswith("kgate: error: ")


def test_gpu_stages_are_the_rules_that_declare_a_gpu() -> None:
    rules = paths.PROJECT / "workflow" / "rules"
    declared = {f.stem for f in rules.glob("*.smk") if re.search(r"^\s+gpu=1,", f.read_text(), re.M)}
    assert declared == protocol.GPU_STAGES
