"""The report's *Across devices* section: a campaign with records on several device classes.

Synthetic records (built in tests/test_compare.py, not measured) on h200, b300
and cpu, and the hand-written synthetic-fusion scenarios laid out as one
campaign on cpu and h200 (the latter carries the hostile strings).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_compare import A, C, bench, rec, write, write_verdict
from test_report import CHROMIUM, HOSTILE, OUT, Page, load

from kgate import report, verdict
from kgate.errors import FormatVersionError
from kgate.report import compare


def three_devices(root: Path) -> Path:
    """h200 and b300 ran candidate A to the bench (b300 has a verdict.json); cpu failed baseline_tests."""
    for gpu in ("h200", "b300"):
        for stage in ("target", "baseline_tests", "fixture_freeze"):
            write(root, rec(stage, gpu))
        for stage in ("candidate_build", "candidate_gate"):
            write(root, rec(stage, gpu, candidate=A))
        write(root, bench(gpu, A))
    write(root, rec("target", "cpu"))
    write(root, rec("baseline_tests", "cpu", status="fail"))
    stages = ["target", "baseline_tests", "fixture_freeze", "candidate_build", "candidate_gate", "bench"]
    write_verdict(root, "b300", "STOPPED", A, stages)
    return root


@pytest.fixture(name="root")
def _root(tmp_path: Path) -> Path:
    return three_devices(tmp_path)


def render_device(root: Path, gpu: str, **kwargs) -> tuple[Path, dict]:
    """The report of one device as the workflow renders it: verdict from that device's records, out_dir in the root."""
    records = list(compare.load_device(root, C, gpu).records)
    v = verdict.compute(records, campaign=C, gpu=gpu, candidate=A)
    out = root / "reports" / C / gpu
    report.render(v, records, out, **kwargs)
    return out, v


def xdev_rows(page: Page) -> list[list[str]]:
    return [cells for cls, cells in page.rows if cls == "xdev"]


class TestSection:
    def test_other_devices_are_read_from_the_results(self, root: Path) -> None:
        """The h200 page gets a column per device class, this one first, one row per gate and per measured row."""
        out, _ = render_device(root, "h200")
        html = (out / "index.html").read_text()
        page = Page(html)
        assert page.errors == []
        assert 'id="devices"' in html
        section = html.split('<h2 id="devices">')[1].split('<h2 id="run">')[0]
        heads = Page(section).text
        assert heads.index("h200 (this report)") < heads.index("b300") < heads.index("cpu")
        assert "NVIDIA B300 · sm 10.3 · driver 590.2" in heads and "CPU: timings are not meaningful" in heads
        assert "STOPPED" in heads and "no verdict.json" in heads
        comparison = compare.collect(root, C, ["h200", "b300", "cpu"])
        rows = xdev_rows(page)
        assert len(rows) == len(comparison.gates) + len(comparison.rows)
        geomean = next(r for r in rows if r[:2] == ["bench", "geomean_bar"])
        assert geomean[3:] == ["pass 1.19 x [1.15, 1.23] x", "STOP 1.04 x [1.01, 1.07] x", "not run no record of bench on cpu"]
        row = next(r for r in rows if r[:2] == ["bench", "B4_T2048 (fwdbwd)"])
        assert row[2] == "1.19x [1.15, 1.23] FAST base 2.4 ms · cand 2 ms · optimized"
        assert row[3] == "1.04x [1.01, 1.07] SAME base 1.05 ms · cand 1 ms · optimized"

    def test_each_page_puts_its_own_device_first(self, root: Path) -> None:
        """The b300 page shows the same numbers with b300 first: no column borrows from another."""
        out, _ = render_device(root, "b300")
        rows = xdev_rows(Page((out / "index.html").read_text()))
        geomean = next(r for r in rows if r[:2] == ["bench", "geomean_bar"])
        assert geomean[3:5] == ["STOP 1.04 x [1.01, 1.07] x", "pass 1.19 x [1.15, 1.23] x"]

    def test_summary_lists_every_device(self, root: Path) -> None:
        out, v = render_device(root, "h200")
        summary = (out / "summary.md").read_text()
        assert "| device class | verdict | candidate | device | decided by |" in summary
        assert f"| h200 (this report) | {v['verdict']} | `{A}` | NVIDIA H200 · sm 9.0 · driver 580.1 | " in summary
        assert f"| b300 | STOPPED | `{A}` | NVIDIA B300 · sm 10.3 · driver 590.2 | — |" in summary
        assert "| cpu | — (no verdict.json) | — | cpu · Triton interpreter | — |" in summary

    def test_no_section_for_one_device_or_when_turned_off(self, root: Path, tmp_path_factory) -> None:
        out, _ = render_device(root, "h200", devices=())
        assert 'id="devices"' not in (out / "index.html").read_text()
        assert "Across devices" not in (out / "summary.md").read_text()
        alone = tmp_path_factory.mktemp("alone")
        for r in compare.load_device(root, C, "h200").records:
            write(alone, r)
        out, _ = render_device(alone, "h200")
        assert 'id="devices"' not in (out / "index.html").read_text()

    def test_an_unreadable_device_does_not_stop_this_report(self, root: Path) -> None:
        """Another device's record of another schema version shows as that column's error, not as a failed report."""
        path = root / "results" / C / "b300" / "target" / "record.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "schema": "kgate.stage/0"}))
        out, _ = render_device(root, "h200")
        page = Page((out / "index.html").read_text())
        assert "records could not be read:" in page.text and "kgate.stage/0" in page.text
        geomean = next(r for r in xdev_rows(page) if r[:2] == ["bench", "geomean_bar"])
        assert geomean[4].startswith("ERROR unreadable")
        # the terminal view, asked for explicitly, refuses instead
        with pytest.raises(FormatVersionError):
            compare.collect(root, C)

    def test_devices_can_be_given(self, root: Path, tmp_path: Path) -> None:
        """Runs passed as devices= are used as they are, wherever the report is written."""
        records = list(compare.load_device(root, C, "h200").records)
        v = verdict.compute(records, campaign=C, gpu="h200", candidate=A)
        report.render(v, records, tmp_path, devices=[compare.load_device(root, C, "b300")])
        heads = Page((tmp_path / "index.html").read_text()).text
        assert "b300" in heads and "NVIDIA B300" in heads


def lay_out(root: Path, name: str) -> None:
    """A scenario's records and verdict where the workflow would have written them."""
    v, records, _ = load(name)
    for r in records:
        write(root, r)
    path = root / "reports" / v["campaign"] / v["gpu"] / "verdict.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(v))


class TestHostileAcrossDevices:
    def test_hostile_values_stay_text_in_the_device_columns(self, tmp_path: Path) -> None:
        """The hostile h200 scenario beside the cpu one: escaped, and its other candidate is named."""
        lay_out(tmp_path, "synthetic_h200_hostile")
        lay_out(tmp_path, "synthetic_cpu_nogo")
        # a hostile row label and gate threshold in h200's profile_baseline record
        path = tmp_path / "results" / "synthetic-fusion" / "h200" / "profile_baseline" / "record.json"
        record = json.loads(path.read_text())
        record["data"]["rows"][0]["row"] = HOSTILE[0]
        record["gates"][0]["threshold"] = HOSTILE[1] + " " + HOSTILE[2]
        path.write_text(json.dumps(record))
        v, records, history = load("synthetic_cpu_nogo")
        out = tmp_path / "reports" / v["campaign"] / "cpu"
        report.render(v, records, out, history=history)
        html = (out / "index.html").read_text()
        page = Page(html)
        assert page.errors == []
        assert page.tags("script") == [] and page.tags("img") == []
        section = Page(html.split('<h2 id="devices">')[1].split('<h2 id="run">')[0]).text
        assert "cpu (this report)" in section and "h200" in section
        assert f"h200 has no records of candidate {v['candidate']}; showing candidate 9e8d7c6b5a40" in section
        # the hostile gate value of h200's candidate_gate, as text
        assert "1 intermittent | `flaky`" in section
        for s in HOSTILE:
            assert s in section, s


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (CI installs it: apt-get install -y chromium)")
def test_devices_page_in_chromium(tmp_path: Path) -> None:
    """A screenshot of the h200 page of the three-device campaign; the browser's DOM has every device's column."""
    root = OUT / "report-devices"
    if root.exists():
        shutil.rmtree(root)
    three_devices(root)
    out, _ = render_device(root, "h200")
    png = OUT / "report-devices.png"
    png.unlink(missing_ok=True)
    url = (out / "index.html").resolve().as_uri()
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    shot = subprocess.run([*base, f"--user-data-dir={tmp_path / 'p1'}", f"--screenshot={png}",
                           "--window-size=1400,2400", url], capture_output=True, text=True, timeout=120, check=False)
    assert png.is_file(), shot.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dom = subprocess.run([*base, f"--user-data-dir={tmp_path / 'p2'}", "--dump-dom", url], capture_output=True,
                         text=True, timeout=120, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="devices"' in dom.stdout
    for text in ("h200", "b300", "cpu", "1.19x", "1.04x"):
        assert text in dom.stdout
