"""Files kgate writes get the user's umask, and a failed write leaves no torn or stray file.

A subprocess started with a given umask (the test process keeps its own)
writes what a run writes, through the writers the stages use: a stage record
and a verdict (``kgate.records.write_json``), the rendered report
(``kgate.report.render``: index.html, summary.md, gates.junit.xml) and the epoch
ledger (``kgate.epochs.open_or_check``). Under umask 022 every file is 0644,
under 077 0600, as ``open(path, "w")`` would make them.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from kgate.records import atomic_write_text

SCENARIO = REPO / "tests" / "data" / "records" / "synthetic_cpu_smoke"

WRITER = """
import json, sys
from pathlib import Path
from kgate import campaign, epochs, report
from kgate.records import read_record, write_json

scenario = Path(sys.argv[1])
verdict = json.loads((scenario / "verdict.json").read_text())
records = [read_record(p) for p in sorted(scenario.glob("*.json")) if p.name != "verdict.json"]
write_json(Path("results/synthetic-fusion/cpu/target/record.json"), records[0])
write_json(Path("reports/synthetic-fusion/cpu/verdict.json"), verdict)
report.render(verdict, records, Path("reports/synthetic-fusion/cpu"), history=[])
epochs.open_or_check(campaign.load("chunk-local-cumsum-identity"), False)
"""

EXPECTED = ("results/synthetic-fusion/cpu/target/record.json", "reports/synthetic-fusion/cpu/verdict.json",
            "reports/synthetic-fusion/cpu/index.html", "reports/synthetic-fusion/cpu/summary.md",
            "reports/synthetic-fusion/cpu/gates.junit.xml", "results/chunk-local-cumsum-identity/epochs.json")


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)], ids=["umask-022", "umask-077"])
def test_written_files_follow_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    proc = subprocess.run([sys.executable, "-c", WRITER, str(SCENARIO)], cwd=tmp_path, umask=umask,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert files == sorted(EXPECTED), "every writer renamed its temporary file into place"
    modes = {f: oct(stat.S_IMODE((tmp_path / f).stat().st_mode)) for f in files}
    assert modes == dict.fromkeys(files, oct(mode))
    written = json.loads((tmp_path / "reports/synthetic-fusion/cpu/verdict.json").read_text())
    assert written == json.loads((SCENARIO / "verdict.json").read_text())


def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    atomic_write_text(target, '{"old": true}\n')
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(target, '{"new": "\ud800"}\n')  # a lone surrogate: the write fails midway
    assert target.read_text() == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
