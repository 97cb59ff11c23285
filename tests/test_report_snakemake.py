"""Snakemake's own ``--report`` after a real run carries kgate's report (index.html, verdict.json, summary.md).

One CPU run of the small second campaign (about a minute) in a workdir shared
by this module's tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import Workflow

pytestmark = pytest.mark.campaign
CAMPAIGN = "chunk-local-cumsum-identity"
REPORT = Path("reports") / CAMPAIGN / "cpu"
KGATE_FILES = ("index.html", "verdict.json", "summary.md")


@pytest.fixture(name="wf", scope="module")
def _wf(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    wf = Workflow(tmp_path_factory.mktemp("smk-report"))
    proc = wf.run(f"campaign={CAMPAIGN}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert wf.verdict(CAMPAIGN)["verdict"] == "SMOKE"
    return wf


def test_snakemake_zip_report_holds_kgates_report(wf: Workflow) -> None:
    """``snakemake --report x.zip`` packs kgate's three files, byte for byte, with their captions, under 'kgate'."""
    out = wf.workdir / "smk-report.zip"
    proc = wf.run(f"campaign={CAMPAIGN}", args=("--report", str(out)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        for name in KGATE_FILES:
            packed = [n for n in names if n.endswith("/" + name)]
            assert len(packed) == 1, (name, names)
            assert zf.read(packed[0]) == (wf.workdir / REPORT / name).read_bytes()
        page = zf.read(next(n for n in names if n.endswith("/report.html"))).decode()
    # category, captions and the links between the three results
    assert '"kgate"' in page
    assert f"{CAMPAIGN} on cpu" in page
    assert "kgate&#x27;s go/no-go report" in page or "kgate's go/no-go report" in page
    assert f"{REPORT.as_posix()}/index.html" in page
    assert f"app.showResultInfo('{REPORT.as_posix()}/index.html')" in page


def test_snakemake_html_report_embeds_it(wf: Workflow) -> None:
    """The single-file ``--report x.html`` works too."""
    out = wf.workdir / "smk-report.html"
    proc = wf.run(f"campaign={CAMPAIGN}", args=("--report", str(out)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = out.read_text()
    for name in KGATE_FILES:
        assert f"{REPORT.as_posix()}/{name}" in page


def test_compare_reads_the_run(wf: Workflow) -> None:
    """``python -m kgate compare`` in the workdir: one device class (cpu), its SMOKE verdict and its gates."""
    proc = subprocess.run([sys.executable, "-m", "kgate", "compare", CAMPAIGN], cwd=wf.workdir, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"kgate compare: {CAMPAIGN}, 1 device class: cpu")
    verdict = json.loads((wf.workdir / REPORT / "verdict.json").read_text())
    assert next(x for x in proc.stdout.splitlines() if x.startswith("verdict")).split() == ["verdict", "SMOKE"]
    for gate in verdict["gates"]:
        assert f"{gate['stage']} / {gate['name']}" in proc.stdout
