"""Rows whose speed is set per worker process (kgate.gates.processes.process_speeds) and the report's line on them.

MEASURED DATA: ``tests/data/bench/h200_identity_liger_replicated/`` (an A/A on an H200 with a fresh worker pair every
round: Liger's LayerNorm at the #945 base in both arms, whose atomic backward gives each process a speed of its own
on five of six rows) and ``h200_identity_rearm/`` (one worker pair for the whole run, rounds without pids).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from kgate.gates.processes import process_speeds
from kgate.report.links import Links
from kgate.report.sections import bench as section

DATA = Path(__file__).parent / "data" / "bench"
STEADY = "R262144_N1024:fwdbwd"


def load(name: str) -> tuple[dict, list[dict]]:
    folder = DATA / name
    lines = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    return json.loads((folder / "record.json").read_text()), [x for x in lines if x.get("kind") == "round"]


def test_processes_of_the_atomic_base_are_flagged_and_the_steady_row_is_not() -> None:
    record, rounds = load("h200_identity_liger_replicated")
    res = record["data"]["controller"]["resolution"]
    flagged = {k for k in rounds[0]["rows"] for arm, v in process_speeds(rounds, k, res).items() if v["per_process"]}
    assert flagged == set(rounds[0]["rows"]) - {STEADY}
    wide = process_speeds(rounds, "R65536_N1024:fwdbwd", res)
    assert all(v["processes"] == 15 and v["between"] > 1.7 and v["within"] < 1.01 for v in wide.values())
    steady = process_speeds(rounds, STEADY, res)
    assert all(v["between"] < 1 + res and not v["per_process"] for v in steady.values())


def test_a_steady_arm_is_not_flagged_when_the_other_arm_is() -> None:
    """The candidate of the same replay kept one speed in every process: here its arm's samples are made one
    steady level per process (the base arm's recorded samples kept)."""
    _, rounds = load("h200_identity_liger_replicated")
    rounds = copy.deepcopy(rounds)
    key = "R65536_N1024:fwdbwd"
    for i, r in enumerate(rounds):
        r["rows"][key]["cand"]["samples_ms"] = [0.569 * (1 + 0.001 * ((i + j) % 3)) for j in range(20)]
    got = process_speeds(rounds, key, 0.02)
    assert got["base"]["per_process"] and not got["cand"]["per_process"]


def test_no_verdict_on_processes_without_pids_or_with_one_pair() -> None:
    _, rounds = load("h200_identity_rearm")
    key = next(iter(rounds[0]["rows"]))
    assert process_speeds(rounds, key, 0.02) is None
    _, rep = load("h200_identity_liger_replicated")
    one = copy.deepcopy(rep)
    for r in one:
        r["pids"] = {"base": 1, "cand": 2}
    assert process_speeds(one, "R65536_N1024:fwdbwd", 0.02) is None


def test_the_report_lists_the_flagged_rows_and_says_nothing_for_older_records() -> None:
    record, rounds = load("h200_identity_liger_replicated")
    data = copy.deepcopy(record["data"])
    for row in data["rows"]:
        row["process_speeds"] = process_speeds(rounds, row["key"], data["controller"]["resolution"])
    view = section.view(data, Links("liger-layer-norm-bwd-945-large-rows", "h200"))
    assert view is not None and len(view["per_process"]) == 10
    assert not [t for t in view["per_process"] if t.startswith("R262144_N1024 ")]
    assert any(t.startswith("R65536_N1024 · fwdbwd base: 15 processes from 0.7") for t in view["per_process"])
    older = section.view(copy.deepcopy(record["data"]), Links("liger-layer-norm-bwd-945-large-rows", "h200"))
    assert older is not None and older["per_process"] is None


def test_the_page_renders_the_line(tmp_path: Path) -> None:
    """The whole page (kgate.report.render) over the large-rows replay's forced records, its bench rows given the
    A/A's process speeds (same row keys): the paragraph and its items are on the page, escaped."""
    from kgate import report

    folder = Path(__file__).parent / "data" / "records" / "h200_large_rows_forced_bench"
    verdict = json.loads((folder / "verdict.json").read_text())
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if p.name != "verdict.json"]
    _, rounds = load("h200_identity_liger_replicated")
    (bench_record,) = [r for r in records if r["stage"] == "bench"]
    for row in bench_record["data"]["rows"]:
        row["process_speeds"] = process_speeds(rounds, row["key"], 0.02)
    report.render(verdict, records, tmp_path, history=None, devices=())
    page = (tmp_path / "index.html").read_text()
    assert "Rows whose speed is set per worker process" in page
    assert "R65536_N1024 · fwdbwd base: 15 processes from 0.7" in page
