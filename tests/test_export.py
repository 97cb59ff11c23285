"""``python -m kgate export``: a bench/model record's samples read back by the real pyperf and NVBench readers.

The records are real H200 runs, committed under tests/data (their READMEs say
where they come from): the fused candidate's bench (13 rounds of 20 samples
per arm, ``h200_fused_rearm``) with its ``rounds.jsonl``, and its model stage
(``tests/data/model/h200_fused``). The readers are the registry packages
(pyproject dependencies): ``pyperf`` (``BenchmarkSuite.load``, ``python -m
pyperf compare_to`` and ``show``) and ``cuda-bench`` (NVBench's Python
reader ``cuda.bench.results.BenchmarkResult``, its ``nvbench_json`` file
reader and ``nvbench_compare_robust``), all pure Python, installed on CPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyperf
import pytest
from cuda.bench.results import BenchmarkResult
from cuda.bench.scripts.nvbench_json import reader as nvbench_reader
from cuda.bench.scripts.nvbench_json import version as nvbench_version

from kgate import export, paths
from kgate.cli import main
from kgate.export import ExportError, nvbench_json, pyperf_json

DATA = Path(__file__).parent / "data"
BENCH = DATA / "bench" / "h200_fused_rearm"
MODEL = DATA / "model" / "h200_fused"


@pytest.fixture(name="bench_record")
def _bench_record(tmp_path: Path) -> Path:
    """The committed bench record and its rounds, copied so that exports land in tmp_path."""
    folder = tmp_path / "bench"
    shutil.copytree(BENCH, folder)
    return folder / "record.json"


def ours(record: Path) -> tuple[dict, list[dict]]:
    """The record and the rounds it counts, read straight from the files (not through kgate.export)."""
    rec = json.loads(record.read_text())
    lines = [json.loads(line) for line in (record.parent / "rounds.jsonl").read_text().splitlines()]
    rounds = [x for x in lines if x["kind"] == "round"][: rec["data"]["rounds"]]
    return rec, rounds


def test_checkpoint_names_are_the_stages() -> None:
    from kgate.stages import bench, model
    assert paths.CHECKPOINTS == {"bench": bench.CHECKPOINT, "model": model.CHECKPOINT}


class TestPyperf:
    def test_suite_loads_back_every_sample(self, bench_record: Path) -> None:
        out = bench_record.parent / "x.json"
        export.write(bench_record, "pyperf", out)
        rec, rounds = ours(bench_record)
        suite = pyperf.BenchmarkSuite.load(str(out))
        keys = [r["key"] for r in rec["data"]["rows"]]
        assert suite.get_benchmark_names() == [f"{k}/{arm}" for k in keys for arm in ("base", "cand")]
        for bench in suite.get_benchmarks():
            meta = bench.get_metadata()
            key, arm = meta["name"].rsplit("/", 1)
            assert (meta["row"], meta["arm"]) == (key, arm)
            runs = bench.get_runs()
            assert len(runs) == rec["data"]["rounds"] == 13
            for run, rnd in zip(runs, rounds):
                assert list(run.values) == [v / 1000.0 for v in rnd["rows"][key][arm]["samples_ms"]]
                assert run.get_metadata()["round"] == rnd["index"]
                assert run.get_metadata()["order"] == rnd["order"]
            assert meta["unit"] == "second"
            assert meta["campaign"] == rec["campaign"] == "rwkv6-bwd-fusion"
            assert meta["gpu"] == "h200" and meta["candidate"] == "f6b3512413ea"
            assert meta["commit"] == rec["data"]["bench_base" if arm == "base" else "candidate_sha"]
            row = next(r for r in rec["data"]["rows"] if r["key"] == key)
            assert meta["classification"] == row["classification"]
            assert meta["speedup"] == row["speedup"]
            assert [meta["speedup_lower"], meta["speedup_upper"]] == row["interval"]

    def test_format_version_is_recorded(self, bench_record: Path) -> None:
        out = export.write(bench_record, "pyperf")[0]
        assert out == bench_record.parent / "bench.pyperf.json"
        raw = json.loads(out.read_text())
        assert raw["version"] == "1.0" == pyperf_json.PYPERF_JSON_VERSION
        assert raw["metadata"]["export_format"] == "pyperf-json/1.0"
        assert raw["metadata"]["kgate_export"] == export.EXPORT_SCHEMA

    def test_compare_to_and_show_run_on_the_files(self, bench_record: Path) -> None:
        folder = bench_record.parent
        for arm in ("base", "cand"):
            assert main(["export", "--format", "pyperf", "--arm", arm, str(bench_record),
                         "--out", str(folder / f"{arm}.json")]) == 0
        cmp = subprocess.run([sys.executable, "-m", "pyperf", "compare_to", "base.json", "cand.json"],
                             cwd=folder, capture_output=True, text=True, timeout=120)
        assert cmp.returncode == 0, cmp.stderr
        rec, _ = ours(bench_record)
        for row in rec["data"]["rows"]:
            line = next(x for x in cmp.stdout.splitlines() if x.startswith(row["key"] + ":"))
            if row["classification"] == "SLOW":  # the fused kernel is 8-12 % slower: pyperf must see it too
                assert "slower" in line, line
        show = subprocess.run([sys.executable, "-m", "pyperf", "show", "base.json"],
                              cwd=folder, capture_output=True, text=True, timeout=120)
        assert show.returncode == 0 and "B1_T8192_H96_D128:fwdbwd" in show.stdout, show.stderr


class TestNvbench:
    def test_reader_gives_back_our_sample_times(self, bench_record: Path) -> None:
        out = bench_record.parent / "nv" / "bench.json"
        written = export.write(bench_record, "nvbench", out)
        rec, rounds = ours(bench_record)
        assert len(written) == 1 + 2 * len(rec["data"]["rows"])
        result = BenchmarkResult.from_json(out)
        assert result.devices[0].name == "NVIDIA H200"
        for key in (r["key"] for r in rec["data"]["rows"]):
            for arm in ("base", "cand"):
                (state,) = result[f"{key}/{arm}"].states
                want = np.array([v / 1000.0 for rnd in rounds for v in rnd["rows"][key][arm]["samples_ms"]], "<f4")
                assert state.samples is not None and len(state.samples) == 260
                assert np.array_equal(np.array(state.samples, "<f4"), want)
                mean = state.summaries["nv/cold/time/gpu/mean"].value
                assert mean == pytest.approx(float(np.mean(want.astype(float))), rel=1e-6)
                assert state.summaries["nv/cold/sample_size"].value == 260

    def test_file_version_is_the_readers(self, bench_record: Path, capsys: pytest.CaptureFixture[str]) -> None:
        out = export.write(bench_record, "nvbench")[0]
        assert out == bench_record.parent / "bench.nvbench.json"
        root = nvbench_reader.read_file(str(out))
        assert "WARNING" not in capsys.readouterr().out  # the reader warns on an unversioned or other version
        assert root["meta"]["version"]["json"]["string"] == nvbench_version.file_version_string == "1.0.0"
        assert root["meta"]["kgate"]["export_format"] == nvbench_json.FORMAT == "nvbench-json/1.0.0"
        assert root["meta"]["kgate"]["kgate_export"] == export.EXPORT_SCHEMA
        counts = root["meta"]["kgate"]["benchmarks"]["varlen_D128:fwdbwd/cand"]["samples_per_round"]
        assert counts == [20] * 13

    def test_compare_robust_classifies_from_our_samples(self, bench_record: Path) -> None:
        folder = bench_record.parent
        for arm in ("base", "cand"):
            assert main(["export", "--format", "nvbench", "--arm", arm, str(bench_record),
                         "--out", str(folder / f"{arm}.json")]) == 0
        run = subprocess.run([sys.executable, "-m", "cuda.bench.scripts.nvbench_compare_robust", "--no-color",
                              "base.json", "cand.json"], cwd=folder, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        status = {}
        for block in re.split(r"^# ", run.stdout, flags=re.M)[1:]:
            name = block.splitlines()[0].strip()
            found = re.search(r"\b(FAST|SLOW|SAME|AMBG)\b", block)
            if found and name != "Summary":
                status[name] = found.group(1)
        rec, _ = ours(bench_record)
        slow = [r["key"] for r in rec["data"]["rows"] if r["classification"] == "SLOW"]
        assert len(slow) == 7
        assert {k: status.get(k) for k in slow} == {k: "SLOW" for k in slow}


class TestModel:
    def test_blocks_round_trip(self, tmp_path: Path) -> None:
        shutil.copytree(MODEL, tmp_path / "model")
        record = tmp_path / "model" / "record.json"
        rec = json.loads(record.read_text())
        suite = pyperf.BenchmarkSuite.load(str(export.write(record, "pyperf")[0]))
        root_json = export.write(record, "nvbench")[0]
        result = BenchmarkResult.from_json(root_json)
        for w in rec["data"]["workloads"]:
            for arm in ("base", "cand"):
                bench = suite.get_benchmark(f"{w['workload']}/{arm}")
                runs = bench.get_runs()
                assert [r.get_metadata()["tokens_per_s"] for r in runs] == w["block_tokens_per_s"][arm]
                assert [v for r in runs for v in r.values] == [ms / 1000.0 for ms in w["step_ms"][arm]]
                (state,) = result[f"{w['workload']}/{arm}"].states
                rate = state.summaries["nv/cold/bw/item_rate"].value
                steps = np.array(w["step_ms"][arm]) / 1000.0
                assert rate == pytest.approx(16384 / steps.mean(), rel=1e-9)


class TestBadInput:
    def test_not_a_bench_or_model_record(self, capsys: pytest.CaptureFixture[str]) -> None:
        path = DATA / "records" / "h200_default_bench" / "target.json"
        assert main(["export", "--format", "pyperf", str(path), "--out", os.devnull]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(path) in err and "only bench and model" in err

    def test_bench_record_without_its_rounds(self, tmp_path: Path) -> None:
        src = DATA / "records" / "h200_default_bench" / "bench.json"
        (tmp_path / "record.json").write_text(src.read_text())
        with pytest.raises(ExportError, match=r"rounds\.jsonl: no samples file"):
            export.write(tmp_path / "record.json", "nvbench")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]

    def test_rounds_of_another_run(self, tmp_path: Path) -> None:
        shutil.copy(DATA / "bench" / "h200_identity_rearm" / "record.json", tmp_path / "record.json")
        shutil.copy(BENCH / "rounds.jsonl", tmp_path / "rounds.jsonl")
        with pytest.raises(ExportError, match="recorded for candidate_sha"):
            export.write(tmp_path / "record.json", "pyperf")

    def test_fewer_rounds_than_the_record_counts(self, bench_record: Path) -> None:
        ckpt = bench_record.parent / "rounds.jsonl"
        ckpt.write_text("\n".join(ckpt.read_text().splitlines()[:5]) + "\n")
        with pytest.raises(ExportError, match="holds 4 round"):
            export.write(bench_record, "pyperf")

    def test_not_a_record(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        (tmp_path / "x.json").write_text('{"schema": "other/1"}')
        assert main(["export", "--format", "nvbench", str(tmp_path / "x.json")]) == 2
        assert "x.json has schema 'other/1'" in capsys.readouterr().err


def test_files_follow_the_umask(bench_record: Path) -> None:
    old = os.umask(0o022)
    try:
        written = export.write(bench_record, "nvbench") + export.write(bench_record, "pyperf")
    finally:
        os.umask(old)
    assert {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o644}
