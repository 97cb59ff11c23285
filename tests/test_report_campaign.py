"""The CPU campaign's own report in headless Chromium: verdict, every gate, every plot, shown.

The default campaign runs on CPU with the identity candidate (the shared
workdir of tests/test_campaign_cpu.py; when that test ran first nothing is
recomputed). The report the workflow wrote is opened in Chromium: the DOM
must hold the verdict, every gate of verdict.json and the same plots as the
file, each outside any collapsed section; a screenshot is kept under
tests/_out/.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import Workflow, candidate_id
from test_report import CHROMIUM, OUT

pytestmark = pytest.mark.campaign
CAMPAIGN = "rwkv6-bwd-fusion"
#: the one purpose-built plot of each stage that draws one, on a CPU run of the default campaign (their titles):
#: profile_baseline's best case per row, bench's forest plot, the model's tokens/s per block (profile_candidate's
#: evidence is its pair table, ncu's its metric table)
PLOTS = ("Best case per row if the hypothesis' mechanism works at its physical best", "Speedup per row with its interval",
         "Model: tokens/s per block, per workload and arm")


class Plots(HTMLParser):
    """Every <svg>: its title text and whether a closed <details> hides it."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.plots: list[dict[str, object]] = []
        self._stack: list[tuple[str, bool]] = []
        self._svg: dict[str, object] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg" and self._svg is None:
            hidden = any(t == "details" and not is_open for t, is_open in self._stack)
            self._svg = {"hidden": hidden, "text": [], "width": a.get("width"), "height": a.get("height")}
        if tag not in ("br", "img", "meta", "link", "input", "hr", "wbr", "col"):
            self._stack.append((tag, "open" in a))

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            t, _ = self._stack.pop()
            if t == tag:
                break
        if tag == "svg" and self._svg is not None:
            self.plots.append({**self._svg, "text": " ".join(self._svg["text"])})  # type: ignore[arg-type]
            self._svg = None

    def handle_data(self, data: str) -> None:
        if self._svg is not None:
            self._svg["text"].append(data.strip())  # type: ignore[union-attr]


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (CI installs it: apt-get install -y chromium)")
def test_cpu_campaign_report_in_chromium(rwkv6_workdir: Workflow, tmp_path: Path) -> None:
    source = "overlay:kernels/rwkv6_bwd_fused/identity"
    # other tests of the shared workdir render their own candidates' reports: render this one's again
    proc = rwkv6_workdir.run(f"candidate={source}", args=("--forcerun", "report"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = rwkv6_workdir.workdir / "reports" / CAMPAIGN / "cpu"
    verdict = rwkv6_workdir.verdict(CAMPAIGN)
    assert verdict["candidate"] == candidate_id(CAMPAIGN, source)
    html = (folder / "index.html").read_text()
    keep = OUT / "report-cpu-campaign"
    if keep.exists():
        shutil.rmtree(keep)
    shutil.copytree(folder, keep)
    png = OUT / "report-cpu-campaign.png"
    png.unlink(missing_ok=True)
    url = (folder / "index.html").resolve().as_uri()
    shot = chromium(tmp_path / "p1", f"--screenshot={png}", "--window-size=1400,3000", url)
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", shot.stderr[-2000:]
    dom = chromium(tmp_path / "p2", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = dom.stdout
    assert f"<h1>{verdict['verdict']}</h1>" in body and verdict["verdict"] == "SMOKE"
    for gate in verdict["gates"]:
        assert re.search(rf">\s*{re.escape(gate['name'])}\s*<", body), gate["name"]
    in_file, in_dom = Plots(html).plots, Plots(body).plots
    assert len(in_dom) == len(in_file) > 0
    for title in PLOTS:
        shown = [p for p in in_dom if title in str(p["text"])]
        assert shown, f"no plot titled {title!r}"
        assert not any(p["hidden"] for p in shown), f"{title!r} is inside a collapsed section"
        assert all(p["width"] and p["height"] for p in shown)
