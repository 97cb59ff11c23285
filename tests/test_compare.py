"""Tests of kgate.report.compare and ``python -m kgate compare``: one campaign side by side across device classes.

The records here are synthetic (built below, not measured): one campaign on
h200, b300 and cpu, with bench rows whose numbers differ per device, so a
number that strayed into another device's column, or a ratio taken across
devices, would show.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kgate.cli import main
from kgate.errors import FormatVersionError, IncompleteData
from kgate.records import STAGE_SCHEMA, VERDICT_SCHEMA
from kgate.report import compare

C = "xarch"
A, B = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
CANDIDATE_STAGES = ("candidate_build", "candidate_gate", "profile_candidate", "bench")
DEVICES = {
    "h200": {"class": "h200", "name": "NVIDIA H200", "uuid": "GPU-h200", "capability": "9.0", "driver": "580.1",
             "interpreter": False},
    "b300": {"class": "b300", "name": "NVIDIA B300", "uuid": "GPU-b300", "capability": "10.3", "driver": "590.2",
             "interpreter": False},
    "cpu": {"class": "cpu", "name": "cpu", "uuid": None, "capability": None, "interpreter": True},
}
# per device: (record's paired speedup, its interval, class, baseline median ms, candidate median ms)
BENCH = {
    "h200": (1.19, [1.15, 1.23], "FAST", 2.4, 2.0),
    "b300": (1.04, [1.01, 1.07], "SAME", 1.05, 1.0),
}


def rec(stage: str, gpu: str, *, status: str = "pass", gates: list[dict] | None = None, data: dict | None = None,
        candidate: str | None = None, finished: str = "2026-11-29T10:00:00Z") -> dict:
    gates = gates if gates is not None else [{"name": f"{stage}_ok", "threshold": "holds", "value": f"{stage} on {gpu}",
                                             "status": status, "evidence": None, "interval": None, "unit": None,
                                             "detail": None if status == "pass" else f"{stage} broke on {gpu}"}]
    return {"schema": STAGE_SCHEMA, "stage": stage, "campaign": C, "gpu": gpu, "candidate": candidate,
            "status": status, "reasons": [], "gates": gates, "data": data or {},
            "provenance": {"host": f"node-{gpu}", "finished_utc": finished, "wall_s": 1.0,
                           "versions": {"torch": f"torch-{gpu}", "triton": f"triton-{gpu}"},
                           "device": DEVICES[gpu], "slurm": {"job_id": None}}}


def bench(gpu: str, candidate: str) -> dict:
    speedup, interval, cls, base_ms, cand_ms = BENCH[gpu]
    row = {"key": "B4_T2048:fwdbwd", "row": "B4_T2048", "mode": "fwdbwd", "class": 64, "path": "optimized",
           "classification": cls, "speedup": speedup, "interval": interval,
           "summary": {"base": {"median_ms": base_ms}, "cand": {"median_ms": cand_ms}}}
    gate = {"name": "geomean_bar", "threshold": ">= 1.08 x", "value": speedup, "status": "pass" if cls == "FAST" else "stop",
            "evidence": None, "interval": interval, "unit": "x", "detail": None}
    return rec("bench", gpu, status=gate["status"], gates=[gate], candidate=candidate,
               data={"rows": [row], "geomean": {"speedup": speedup, "lower": interval[0], "upper": interval[1]}})


def write(root: Path, record: dict) -> Path:
    base = root / "results" / record["campaign"] / record["gpu"] / record["stage"]
    path = (base / record["candidate"] if record["stage"] in CANDIDATE_STAGES else base) / "record.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def write_verdict(root: Path, gpu: str, word: str, candidate: str | None, stages: list[str]) -> None:
    verdict = {"schema": VERDICT_SCHEMA, "campaign": C, "gpu": gpu, "candidate": candidate, "verdict": word,
               "sentence": f"{word} on {gpu}", "decided_by": {"stage": None, "gate": None}, "forced": False,
               "stages": [{"stage": s, "status": "pass", "record": f"results/{C}/{gpu}/{s}/record.json"} for s in stages],
               "gates": []}
    path = root / "reports" / C / gpu / "verdict.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(verdict))


@pytest.fixture(name="root")
def _root(tmp_path: Path) -> Path:
    """h200 and b300 ran candidate A to the bench (h200 also an older B); cpu failed baseline_tests."""
    for gpu in ("h200", "b300"):
        for stage in ("target", "baseline_tests", "fixture_freeze"):
            write(tmp_path, rec(stage, gpu))
        for stage in ("candidate_build", "candidate_gate"):
            write(tmp_path, rec(stage, gpu, candidate=A, finished="2026-11-29T12:00:00Z"))
        write(tmp_path, bench(gpu, A))
    write(tmp_path, rec("candidate_build", "h200", candidate=B, finished="2026-11-28T12:00:00Z"))
    write(tmp_path, rec("candidate_gate", "h200", candidate=B, status="fail", finished="2026-11-28T12:00:00Z"))
    write(tmp_path, rec("target", "cpu"))
    write(tmp_path, rec("baseline_tests", "cpu", status="fail"))
    # a stale record from an earlier cpu run, past today's failed gate
    write(tmp_path, rec("fixture_freeze", "cpu", finished="2026-11-01T00:00:00Z"))
    write_verdict(tmp_path, "h200", "GO", A, ["target", "baseline_tests", "fixture_freeze", "candidate_build",
                                              "candidate_gate", "bench"])
    write_verdict(tmp_path, "b300", "STOPPED", A, ["target", "baseline_tests", "fixture_freeze", "candidate_build",
                                                   "candidate_gate", "bench"])
    # the report folder of the campaign itself is not a device class, nor is a folder without records
    (tmp_path / "results" / C / "a100" / "target").mkdir(parents=True)
    return tmp_path


def column(comparison: compare.Comparison, gpu: str) -> int:
    return [d.gpu for d in comparison.devices].index(gpu)


def line(lines: tuple[compare.Line, ...], stage: str, name: str) -> compare.Line:
    return next(x for x in lines if (x.stage, x.name) == (stage, name))


class TestCollect:
    def test_device_classes_are_the_folders_with_records(self, root: Path) -> None:
        """A device class is results/<campaign>/<gpu>/ with a record in it; cpu sorts last."""
        assert compare.device_classes(root, C) == ["b300", "h200", "cpu"]
        assert compare.device_classes(root, "nothing") == []

    def test_each_gate_cell_comes_from_its_own_device(self, root: Path) -> None:
        """A gate's cell in a column holds exactly what that device's record says."""
        comparison = compare.collect(root, C)
        for gpu in ("h200", "b300", "cpu"):
            cell = line(comparison.gates, "target", "target_ok").cells[column(comparison, gpu)]
            assert (cell.text, cell.status) == (f"target on {gpu}", "pass")
        cpu = line(comparison.gates, "baseline_tests", "baseline_tests_ok").cells[column(comparison, "cpu")]
        assert (cell.status, cpu.status, cpu.note) == ("pass", "fail", "baseline_tests broke on cpu")
        geomean = line(comparison.gates, "bench", "geomean_bar")
        assert [geomean.cells[column(comparison, g)].text for g in ("h200", "b300")] == ["1.19 x", "1.04 x"]
        assert geomean.cells[column(comparison, "b300")].interval == "[1.01, 1.07] x"

    def test_rows_show_each_devices_own_ratio_and_arms(self, root: Path) -> None:
        """A row's cell is the record's own speedup, interval and class, with that device's two arms."""
        comparison = compare.collect(root, C)
        row = line(comparison.rows, "bench", "B4_T2048 (fwdbwd)")
        h200, b300 = row.cells[column(comparison, "h200")], row.cells[column(comparison, "b300")]
        assert (h200.text, h200.interval, h200.tag) == ("1.19x", "[1.15, 1.23]", "FAST")
        assert h200.note == "base 2.4 ms · cand 2 ms · optimized"
        assert (b300.text, b300.interval, b300.tag) == ("1.04x", "[1.01, 1.07]", "SAME")
        assert b300.note == "base 1.05 ms · cand 1 ms · optimized"
        assert line(comparison.rows, "bench", "geomean").cells[column(comparison, "h200")].interval == "[1.15, 1.23]"
        # the cpu run never reached the bench
        assert row.cells[column(comparison, "cpu")].status == "not_run"

    def test_no_ratio_is_taken_across_devices(self, root: Path) -> None:
        """Neither a cross-device ratio nor a ratio recomputed from the medians appears anywhere."""
        comparison = compare.collect(root, C)
        text = compare.render_text(comparison)
        shown = json.dumps([[c.__dict__ for c in x.cells] for x in (*comparison.gates, *comparison.rows)]) + text
        for gpu, (_, _, _, base_ms, cand_ms) in BENCH.items():
            # the medians' own ratio differs from the paired estimate the record holds
            assert f"{compare.format_number(base_ms / cand_ms)}x" not in shown, gpu
            for other, (_, _, _, other_base, other_cand) in BENCH.items():
                if other != gpu:
                    assert f"{compare.format_number(base_ms / other_cand)}x" not in shown
                    assert f"{compare.format_number(other_base / cand_ms)}x" not in shown

    def test_stale_record_past_a_failed_gate_is_left_out(self, root: Path) -> None:
        """As in the workflow's gate walk, a device's records stop at its first record that did not pass."""
        cpu = compare.load_device(root, C, "cpu")
        assert [r["stage"] for r in cpu.records] == ["target", "baseline_tests"]
        comparison = compare.collect(root, C)
        cell = line(comparison.gates, "fixture_freeze", "fixture_freeze_ok").cells[column(comparison, "cpu")]
        assert (cell.text, cell.status) == ("not run", "not_run")

    def test_candidates_are_aligned_on_the_one_asked_for(self, root: Path) -> None:
        """The asked-for candidate is shown where it exists; elsewhere the device's own, with a note."""
        comparison = compare.collect(root, C, ["h200", "b300"], candidate=B)
        h200, b300 = comparison.devices
        assert (h200.candidate, b300.candidate) == (B, A)
        assert [r["stage"] for r in h200.records][-1] == "candidate_gate"
        assert h200.records[-1]["status"] == "fail"
        assert b300.notes == (f"b300 has no records of candidate {B}; showing candidate {A}",)
        # h200's verdict.json is about candidate A, so it is not shown for B
        assert h200.word is None and any("verdict.json is for candidate" in n for n in h200.notes)
        assert b300.word == "STOPPED"

    def test_default_candidate_is_the_verdicts(self, root: Path) -> None:
        """Without a candidate asked for, a device shows its verdict's candidate (A), not only the newest."""
        h200 = compare.load_device(root, C, "h200")
        assert h200.candidate == A and h200.word == "GO"
        assert compare.load_device(root, C, "a100") is None

    def test_newest_candidate_without_a_verdict(self, root: Path) -> None:
        """With no verdict.json, the newest candidate built is shown and the column says so."""
        (root / "reports" / C / "h200" / "verdict.json").unlink()
        h200 = compare.load_device(root, C, "h200")
        assert h200.candidate == A and h200.word is None
        assert h200.notes == ("newest candidate on h200",)

    def test_other_schema_is_an_error(self, root: Path) -> None:
        """A record of another format version is refused, not guessed at."""
        bad = rec("target", "b300")
        bad["schema"] = "kgate.stage/0"
        write(root, bad)
        with pytest.raises(FormatVersionError, match="kgate.stage/1"):
            compare.collect(root, C)

    def test_no_records_at_all(self, tmp_path: Path) -> None:
        with pytest.raises(IncompleteData, match="no stage records"):
            compare.collect(tmp_path, C)


class TestText:
    def test_table_has_a_column_per_device(self, root: Path) -> None:
        """Header row of device classes, then device, verdict, candidate, versions; a line per gate and row."""
        text = compare.render_text(compare.collect(root, C, ["h200", "b300"]))
        lines = text.splitlines()
        assert lines[0] == f"kgate compare: {C}, 2 device classes: h200, b300"
        header = next(x for x in lines if x.startswith("device class"))
        assert header.split() == ["device", "class", "h200", "b300"]
        assert next(x for x in lines if x.startswith("verdict")).split() == ["verdict", "GO", "STOPPED"]
        device = next(x for x in lines if x.startswith("device ") and not x.startswith("device class"))
        assert "NVIDIA H200 · sm 9.0 · driver 580.1" in device and "NVIDIA B300 · sm 10.3" in device
        assert "torch torch-h200 · triton triton-h200" in text
        gate = next(x for x in lines if x.startswith("bench / geomean_bar"))
        assert gate.index("pass 1.19 x [1.15, 1.23] x") < gate.index("STOP 1.04 x [1.01, 1.07] x")
        row = next(x for x in lines if x.startswith("bench / B4_T2048 (fwdbwd)"))
        assert "1.19x [1.15, 1.23] FAST · base 2.4 ms · cand 2 ms" in row
        assert "1.04x [1.01, 1.07] SAME · base 1.05 ms · cand 1 ms" in row

    def test_cpu_and_failures_are_noted(self, root: Path) -> None:
        text = compare.render_text(compare.collect(root, C))
        assert "- cpu: CPU run, timings are not meaningful (correctness results stand)" in text
        assert "- cpu: baseline_tests / baseline_tests_ok: baseline_tests broke on cpu" in text
        assert "- b300: STOPPED: STOPPED on b300" in text


class TestCli:
    def test_prints_the_table(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["compare", C, "--root", str(root), "--gpus", "h200,b300"]) == 0
        out = capsys.readouterr().out
        assert out == compare.render_text(compare.collect(root, C, ["h200", "b300"]))

    def test_missing_device_is_noted(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["compare", C, "--root", str(root), "--gpus", "h200,a100"]) == 0
        assert f"- a100: no stage records under results/{C}/a100/" in capsys.readouterr().out

    def test_no_device_with_records_exits_2(self, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["compare", C, "--root", str(root), "--gpus", "a100"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("kgate: error: no stage records of campaign 'xarch'") and "a100" in err
        assert main(["compare", "other", "--root", str(root)]) == 2

    def test_module_entry_point(self, root: Path) -> None:
        """``python -m kgate compare`` from the folder that holds results/ (the default --root)."""
        proc = subprocess.run([sys.executable, "-m", "kgate", "compare", C], cwd=root, capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"kgate compare: {C}, 3 device classes: b300, h200, cpu")
