"""Tests of kgate.report.compare and ``python -m kgate compare``: one campaign side by side across device classes.

The records here are synthetic (built below, not measured): one campaign on
h200, b300 and cpu, with bench rows whose numbers differ per device, so a
number that strayed into another device's column, or a ratio taken across
devices, would show.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kgate.cli import main
from kgate.errors import ConfigError, FormatVersionError, IncompleteData
from kgate.records import STAGE_SCHEMA, VERDICT_SCHEMA
from kgate.report import compare, compare_runs

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


# two candidates, or two records, of one campaign (kgate.report.compare_runs), on the committed H200 records

DATA = Path(__file__).parent / "data"
H200 = "rwkv6-bwd-fusion"
IDENTITY, FUSED = "6294a6be4c4d", "f6b3512413ea"


def lay_out(root: Path, gpu: str = "h200") -> Path:
    """The identity (A/A) and fused candidates' real bench and model records, as the stages lay them out."""
    sources = {
        ("bench", IDENTITY): DATA / "bench" / "h200_identity_rearm" / "record.json",
        ("bench", FUSED): DATA / "bench" / "h200_fused_rearm" / "record.json",
        ("model", IDENTITY): DATA / "model" / "h200_identity" / "record.json",
        ("model", FUSED): DATA / "model" / "h200_fused" / "record.json",
        ("candidate_build", FUSED): DATA / "records" / "h200_default_bench" / "candidate_build.json",
    }
    for (stage, cand), src in sources.items():
        dest = root / "results" / H200 / gpu / stage / cand / "record.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
    return root


def own(record: Path, key: str) -> tuple[str, str, str]:
    """A bench row's ratio, interval and class as the record holds them, in the comparison's number format."""
    row = next(r for r in json.loads(record.read_text())["data"]["rows"] if r["key"] == key)
    lo, hi = row["interval"]
    fmt = compare.format_number
    return f"{fmt(row['speedup'])}x", f"[{fmt(lo)}, {fmt(hi)}]", row["classification"]


class TestCandidates:
    def test_rows_side_by_side_with_their_own_intervals(self, tmp_path: Path) -> None:
        root = lay_out(tmp_path)
        columns = compare_runs.collect_candidates(root, H200, [IDENTITY, FUSED])
        assert columns.labels == (IDENTITY, FUSED)
        assert [d.gpu for d in columns.comparison.devices] == ["h200", "h200"]
        row = line(columns.comparison.rows, "bench", "B1_T8192_H96_D128 (fwdbwd)")
        ident = DATA / "bench" / "h200_identity_rearm" / "record.json"
        fused = DATA / "bench" / "h200_fused_rearm" / "record.json"
        got = [(c.text, c.interval, c.tag) for c in row.cells]
        assert got == [own(ident, "B1_T8192_H96_D128:fwdbwd"), own(fused, "B1_T8192_H96_D128:fwdbwd")]
        assert [c.tag for c in row.cells] == ["SAME", "SLOW"]
        dense = line(columns.comparison.rows, "model", "dense")
        assert [(c.text, c.interval, c.tag) for c in dense.cells] == [
            ("1x", "[0.9981, 1.003]", "SAME"), ("0.9959x", "[0.9938, 0.998]", "SAME")]
        gate = line(columns.comparison.gates, "bench", "geomean_speedup")
        assert gate.threshold == "lower bound of the geomean over 7 gated rows >= 1.08"
        assert [(c.text, c.status) for c in gate.cells] == [("0.9998 x", "fail"), ("0.8947 x", "fail")]
        # the identity candidate's build record is not in this tree: its cell says so, the fused one's is shown
        build = line(columns.comparison.gates, "candidate_build", "frozen_unchanged")
        assert [c.status for c in build.cells] == ["not_run", "pass"]

    def test_text_and_cli(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        root = lay_out(tmp_path)
        assert main(["compare", H200, "--candidates", IDENTITY, FUSED, "--root", str(root)]) == 0
        out = capsys.readouterr().out
        assert out == compare_runs.render(compare_runs.collect_candidates(root, H200, [IDENTITY, FUSED], "h200"))
        assert out.startswith(f"kgate compare: {H200} on h200, candidates {IDENTITY} vs {FUSED}\n")
        row = next(x for x in out.splitlines() if x.startswith("bench / varlen_D128 (fwdbwd)"))
        assert "0.9148x [0.9063, 0.9234] SLOW" in row and "1x [0.9865, 1.014] SAME" in row
        gate = next(x for x in out.splitlines() if x.startswith("model / dense_tokens_per_s_gain"))
        assert "lower bound of the dense tokens/s ratio" in gate and gate.count("FAIL") == 2
        # no ratio between the candidates' numbers (0.8812 / 0.9999 for the first row) is shown
        assert compare.format_number(0.8812257225622961 / 0.9999050959590596) not in out

    def test_refusals(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        root = lay_out(tmp_path)
        with pytest.raises(IncompleteData, match=f"no device class .* has records of every candidate .*{'b' * 12}"):
            compare_runs.collect_candidates(root, H200, [IDENTITY, "b" * 12])
        with pytest.raises(IncompleteData, match=f"no records of candidate {'b' * 12} under"):
            compare_runs.collect_candidates(root, H200, [IDENTITY, "b" * 12], "h200")
        with pytest.raises(ConfigError, match="named twice"):
            compare_runs.collect_candidates(root, H200, [IDENTITY, IDENTITY])
        lay_out(root, "b300")
        with pytest.raises(ConfigError, match="records on b300, h200: pass --gpu"):
            compare_runs.collect_candidates(root, H200, [IDENTITY, FUSED])
        assert compare_runs.collect_candidates(root, H200, [IDENTITY, FUSED], "b300").comparison.devices[0].gpu == "b300"
        assert main(["compare", "--candidates", IDENTITY, FUSED, "--root", str(root)]) == 2
        assert main(["compare", "--root", str(root)]) == 2
        errs = capsys.readouterr().err.splitlines()
        assert errs == ["kgate: error: compare --candidates: name the campaign (python -m kgate compare CAMPAIGN "
                        "--candidates A B)",
                        "kgate: error: compare: name the campaign (python -m kgate compare CAMPAIGN), or give --records X Y"]


class TestRecords:
    def test_two_bench_records(self, capsys: pytest.CaptureFixture[str]) -> None:
        a = DATA / "bench" / "h200_identity" / "record.json"
        b = DATA / "bench" / "h200_fused_rearm" / "record.json"
        assert main(["compare", "--records", str(a), str(b)]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"kgate compare: {H200}, bench records {IDENTITY} vs {FUSED}\n")
        row = next(x for x in out.splitlines() if x.startswith("bench / B8_T1024_H8_D64 (fwdbwd)"))
        text, interval, cls = own(b, "B8_T1024_H8_D64:fwdbwd")
        assert f"{text} {interval} {cls}" in row
        assert "- the columns are of different epochs (6294a6be4c4d: 1, f6b3512413ea: 2)" in out

    def test_same_candidate_twice_is_told_apart_by_folder(self) -> None:
        a = DATA / "bench" / "h200_fused_rearm" / "record.json"
        b = DATA / "bench" / "h200_fused_host_ahead" / "record.json"
        columns = compare_runs.collect_records([a, b])
        assert columns.labels == (f"{FUSED} (h200_fused_rearm)", f"{FUSED} (h200_fused_host_ahead)")
        geomean = line(columns.comparison.rows, "bench", "geomean")
        assert [c.text for c in geomean.cells] == ["0.8947x", "0.9001x"]

    def test_two_stages_or_campaigns_are_refused(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        bench_rec = DATA / "bench" / "h200_fused_rearm" / "record.json"
        model_rec = DATA / "model" / "h200_fused" / "record.json"
        assert main(["compare", "--records", str(bench_rec), str(model_rec)]) == 2
        other = json.loads(bench_rec.read_text())
        other["campaign"] = "another-campaign"
        (tmp_path / "record.json").write_text(json.dumps(other))
        assert main(["compare", "--records", str(bench_rec), str(tmp_path / "record.json")]) == 2
        assert main(["compare", H200, "--records", str(bench_rec), str(bench_rec)]) == 2
        assert main(["compare", "--records", str(bench_rec), str(bench_rec)]) == 2
        errs = capsys.readouterr().err.splitlines()
        assert len(errs) == 4
        assert errs[0].startswith(f"kgate: error: records of two stages: {bench_rec} is of stage 'bench', {model_rec} "
                                  "of 'model'")
        assert errs[1].startswith("kgate: error: records of two campaigns:") and "'another-campaign'" in errs[1]
        assert "drop the campaign argument" in errs[2] and "a file is named twice" in errs[3]
