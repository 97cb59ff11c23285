"""Time to verdict in the report (kgate.report.timing), on real H200 records and edge cases."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from kgate import report
from kgate.report.timing import duration, time_to_verdict

DATA = Path(__file__).parent / "data" / "records"
REAL = DATA / "h200_cumsum_forced_bench"


def _records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if p.name not in ("verdict.json", "history.json")]


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_real_records_sum_span_and_cache() -> None:
    records = _records(REAL)
    t = time_to_verdict(records)
    assert t is not None
    provs = [r["provenance"] for r in records]
    assert len(t.stages_s) == len(records)
    assert abs(t.total_s - sum(p["wall_s"] for p in provs)) < 1e-9
    span = (max(_utc(p["finished_utc"]) for p in provs) - min(_utc(p["started_utc"]) for p in provs)).total_seconds()
    assert t.span_s == span
    # the span holds the gaps between the three machine calls: longer than the stages' own work
    assert t.span_s > t.total_s
    first = min(provs, key=lambda p: _utc(p["started_utc"]))
    assert t.cache_at_start == first["kernel_cache"]["state_at_start"]
    assert t.kernels_added == sum(p["kernel_cache"]["added"]["kernels"] for p in provs if "kernel_cache" in p)
    line = t.line()
    longest = max(t.stages_s, key=lambda x: x[1])
    assert f"{longest[0]} {duration(longest[1])}" in line
    assert duration(t.total_s) in line and duration(t.span_s) in line


def test_no_wall_clock_no_line() -> None:
    assert time_to_verdict([{"stage": "target", "provenance": {}}]) is None
    assert time_to_verdict([]) is None


def test_a_record_without_times_still_counts_its_wall() -> None:
    t = time_to_verdict([{"stage": "a", "provenance": {"wall_s": 5.0}},
                         {"stage": "b", "provenance": {"wall_s": 7.5, "started_utc": "bad", "finished_utc": None}}])
    assert t is not None and t.total_s == 12.5 and t.span_s is None and t.cache_at_start is None
    assert "from the first stage's start" not in t.line()


def test_duration_formats() -> None:
    assert duration(38.21) == "38.2 s"
    assert duration(252) == "4 min 12 s"
    assert duration(3780) == "1 h 03 min"


def test_summary_and_page_show_it(tmp_path: Path) -> None:
    verdict = json.loads((REAL / "verdict.json").read_text())
    records = _records(REAL)
    out = tmp_path / "reports" / verdict["campaign"] / verdict["gpu"]
    report.render(verdict, records, out)
    expected = time_to_verdict(records).line()
    summary = (out / "summary.md").read_text()
    assert any(ln.startswith("Time to verdict: ") and duration(time_to_verdict(records).total_s) in ln
               for ln in summary.splitlines())
    html = (out / "index.html").read_text()
    assert 'id="time-to-verdict"' in html and expected.split(";")[0].split("(")[0].strip() in html


def test_stage_times_falls_back_to_the_stamps() -> None:
    from kgate.records import stage_times

    stamps = {"started_utc": "2026-12-02T07:56:03Z", "finished_utc": "2026-12-02T08:02:21Z"}
    assert stage_times({"provenance": stamps}).wall_s == 378.0
    assert stage_times({"provenance": {**stamps, "wall_s": 377.989}}).wall_s == 377.989
    assert stage_times({"provenance": {"wall_s": True}}).wall_s is None
    assert stage_times({"provenance": {"started_utc": "2026-12-02 07:56"}}).started is None
