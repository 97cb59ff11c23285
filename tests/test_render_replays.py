"""scripts/render_replays.py: the README's replay table from config/replays.yaml and the committed reports."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))

import render_replays  # noqa: E402

from kgate.errors import ConfigError  # noqa: E402


def test_the_shipped_list_names_shipped_campaigns_and_renders() -> None:
    entries = render_replays.load_replays(REPO / "config" / "replays.yaml")
    assert entries and all((REPO / "config" / "campaigns" / f"{e['campaign']}.yaml").exists() for e in entries)
    lines = render_replays.table(REPO, "h200")
    assert len(lines) == 2 + len(entries)


def root_with(tmp_path: Path, campaign: str, entry: dict) -> Path:
    root = tmp_path / "root"
    (root / "config" / "campaigns").mkdir(parents=True)
    shutil.copy(REPO / "config" / "campaigns" / f"{campaign}.yaml", root / "config" / "campaigns")
    (root / "config" / "replays.yaml").write_text(yaml.safe_dump({"schema": 1, "replays": [entry]}))
    return root


ENTRY = {"campaign": "liger-layer-norm-rows", "repository": "linkedin/Liger-Kernel", "commit": "0123abcd",
         "change": "row tiles", "claim": "faster | rows"}


def test_a_row_holds_the_reports_verdict_and_its_deciding_numbers(tmp_path: Path) -> None:
    """The committed H200 report of the Liger campaign, read as a replay's would be: verdict, the deciding gate's
    sentence, the bench geomean with its interval; without a report the row says so."""
    root = root_with(tmp_path, "liger-layer-norm-rows", ENTRY)
    missing = render_replays.table(root, "h200")[2]
    assert "not run on h200" in missing and "faster \\| rows" in missing and "| 1.25 |" in missing
    (root / "reports" / "liger-layer-norm-rows" / "h200").mkdir(parents=True)
    shutil.copy(REPO / "reports" / "liger-layer-norm-rows" / "h200" / "verdict.json",
                root / "reports" / "liger-layer-norm-rows" / "h200")
    row = render_replays.table(root, "h200")[2]
    assert "**INCONCLUSIVE**" in row and "| model: dense_tokens_per_s_gain inconclusive: 1.015661" in row
    assert "bench geomean 1.924x [1.923, 1.926] (pass)" in row


def test_a_row_names_the_deciding_gates_detail_and_a_passing_geomean_beside_it(tmp_path: Path) -> None:
    """The H200 NO-GO of the fused add + RMSNorm replay: one row SLOW decided it while the geomean cleared the bar;
    the row names the SLOW row and shows the geomean, which a reader would otherwise take for the failure."""
    entry = {**ENTRY, "campaign": "liger-fused-add-rmsnorm-bwd-1187"}
    root = root_with(tmp_path, "liger-fused-add-rmsnorm-bwd-1187", entry)
    folder = root / "reports" / "liger-fused-add-rmsnorm-bwd-1187" / "h200"
    folder.mkdir(parents=True)
    shutil.copy(REPO / "reports" / "liger-fused-add-rmsnorm-bwd-1187" / "h200" / "verdict.json", folder)
    row = render_replays.table(root, "h200")[2]
    assert "**NO-GO**" in row and "| bench: no_optimized_row_slow fail: 1 SLOW" in row
    assert ": M2048_H4096 0.9649x [0.9610, 0.9688] SLOW; bench geomean 1.309x [1.306, 1.311] (pass)" in row
    verdict = json.loads((folder / "verdict.json").read_text())
    long = [dict(g, detail="x" * 400) if g["name"] == "no_optimized_row_slow" else g for g in verdict["gates"]]
    assert render_replays.deciding_detail({**verdict, "gates": long}) == "x" * 157 + "..."


def test_write_replaces_only_the_marked_block_and_a_bad_list_is_one_line(tmp_path: Path) -> None:
    root = root_with(tmp_path, "liger-layer-norm-rows", ENTRY)
    readme = tmp_path / "README.md"
    readme.write_text("before\n<!-- replays:begin -->\nold\n<!-- replays:end -->\nafter\n")
    render_replays.main(["--gpu", "h200", "--root", str(root), "--write", str(readme)])
    text = readme.read_text()
    assert text.startswith("before\n<!-- replays:begin -->\n| campaign |") and text.endswith("<!-- replays:end -->\nafter\n")
    assert "old" not in text
    bad = root_with(tmp_path / "bad", "liger-layer-norm-rows", {**ENTRY, "claimed": "x"})
    with pytest.raises(ConfigError, match=r"replays.yaml: key 'replays.0': unknown key\(s\) claimed"):
        render_replays.table(bad, "h200")


def test_a_forced_record_adds_its_bench_geomean_beside_the_stop(tmp_path: Path) -> None:
    """The real H200 replay of fla 9406930: STOPPED unforced; the forced run's committed bench record adds its
    geomean (read from the record, said to be forced); a missing record is one line naming the key."""
    campaign = "fla-cumsum-vector-9406930"
    record = "tests/data/records/h200_cumsum_forced_bench/bench.json"
    entry = {**ENTRY, "campaign": campaign, "forced": {"gpu": "h200", "bench_record": record}}
    root = root_with(tmp_path, campaign, entry)
    (root / "reports" / campaign / "h200").mkdir(parents=True)
    shutil.copy(REPO / "reports" / campaign / "h200" / "verdict.json", root / "reports" / campaign / "h200")
    (root / record).parent.mkdir(parents=True)
    shutil.copy(REPO / record, root / record)
    bench = yaml.safe_load((REPO / record).read_text())
    gate = next(g for g in bench["gates"] if g["name"] == "geomean_speedup")
    row = render_replays.table(root, "h200")[2]
    assert "**STOPPED**" in row and "compile_resources stop" in row
    lo, hi = gate["interval"]
    assert f"forced past it, bench geomean {gate['value']:.3f}x [{lo:.3f}, {hi:.3f}] ({gate['status']})" in row
    # the forced figure belongs to its device class only
    assert "forced past it" not in render_replays.table(root, "a100")[2]
    (root / record).unlink()
    with pytest.raises(SystemExit, match="forced.bench_record"):
        render_replays.table(root, "h200")


def test_a_forced_record_that_is_not_a_bench_record_is_one_line(tmp_path: Path) -> None:
    campaign = "fla-cumsum-vector-9406930"
    record = "tests/data/records/h200_cumsum_forced_bench/profile_candidate.json"
    root = root_with(tmp_path, campaign, {**ENTRY, "campaign": campaign, "forced": {"gpu": "h200", "bench_record": record}})
    (root / "reports" / campaign / "h200").mkdir(parents=True)
    shutil.copy(REPO / "reports" / campaign / "h200" / "verdict.json", root / "reports" / campaign / "h200")
    (root / record).parent.mkdir(parents=True)
    shutil.copy(REPO / record, root / record)
    with pytest.raises(SystemExit, match="'profile_candidate' record, not bench's"):
        render_replays.table(root, "h200")
    (root / record).write_text('{"schema": "kgate.stage/0"}')
    with pytest.raises(SystemExit, match="forced.bench_record"):
        render_replays.table(root, "h200")


def test_an_incomplete_report_says_why_its_stages_are_missing(tmp_path: Path) -> None:
    """An INCONCLUSIVE report whose later stages did not run (the TVD replay's H200 run, where the device time
    ended during ncu): the row keeps the measured bench geomean and adds the entry's ``incomplete`` reason; the
    same reason is not shown beside a verdict that is not INCONCLUSIVE."""
    entry = {**ENTRY, "campaign": "liger-tvd-fused-scale-1127", "incomplete": "device time ended during ncu"}
    root = root_with(tmp_path, "liger-tvd-fused-scale-1127", entry)
    folder = root / "reports" / "liger-tvd-fused-scale-1127" / "h200"
    folder.mkdir(parents=True)
    verdict = json.loads((REPO / "reports" / "liger-tvd-fused-scale-1127" / "h200" / "verdict.json").read_text())
    (folder / "verdict.json").write_text(json.dumps(verdict))
    row = render_replays.table(root, "h200")[2]
    assert "**INCONCLUSIVE**" in row and "evidence is missing: ncu, model (device time ended during ncu)" in row, row
    assert "bench geomean 1.665x" in row, row
    (folder / "verdict.json").write_text(json.dumps({**verdict, "verdict": "NO-GO"}))
    assert "device time ended" not in render_replays.table(root, "h200")[2]


def test_reports_on_other_devices_follow_the_tables_own(tmp_path: Path) -> None:
    """The TVD replay's committed reports: INCONCLUSIVE on the H200 (cut during ncu), GO on an H100 from a full run.
    The h200 table keeps its own verdict and adds the H100's after it; the h100 table the other way round; a
    report of another schema is one line naming its file."""
    entry = {**ENTRY, "campaign": "liger-tvd-fused-scale-1127"}
    root = root_with(tmp_path, "liger-tvd-fused-scale-1127", entry)
    for gpu in ("h200", "h100"):
        (root / "reports" / "liger-tvd-fused-scale-1127" / gpu).mkdir(parents=True)
        shutil.copy(REPO / "reports" / "liger-tvd-fused-scale-1127" / gpu / "verdict.json",
                    root / "reports" / "liger-tvd-fused-scale-1127" / gpu)
    h200 = render_replays.table(root, "h200")[2]
    assert "| **INCONCLUSIVE** |" in h200 and h200.endswith("; on h100: GO, bench geomean 1.662x [1.659, 1.664] (pass) |")
    h100 = render_replays.table(root, "h100")[2]
    assert "| **GO** |" in h100
    assert h100.endswith("; on h200: INCONCLUSIVE at ncu, bench geomean 1.665x [1.663, 1.666] (pass) |")
    assert "h100 verdict" in render_replays.table(root, "h100")[0]
    (root / "reports" / "liger-tvd-fused-scale-1127" / "h100" / "verdict.json").write_text('{"schema": "x"}')
    with pytest.raises(SystemExit, match="h100/verdict.json: schema 'x'"):
        render_replays.table(root, "h200")
