"""Smoke tests of scripts/stats_simulation.py and of the numbers in docs/statistics.md.

The script is run with few trials (seconds). The second test re-measures the
CV 1 % rows that docs/statistics.md quotes and checks them against the doc
within Monte-Carlo error, so a change to the statistics that moves those
numbers fails here until the doc is regenerated.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "stats_simulation.py"
DOC = ROOT / "docs" / "statistics.md"
FRACTIONS = ("fast", "same", "slow", "ambiguous")


def run_sim(tmp_path: Path, *args: str) -> tuple[dict, str]:
    out = tmp_path / "sim.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out), "--workers", "1", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stdout


def test_simulation_json_has_fields_and_sane_ranges(tmp_path: Path) -> None:
    res, stdout = run_sim(tmp_path, "--trials", "60", "--cvs", "0.01", "0.03", "--seed", "7")
    assert res["schema"] == "kgate.stats_simulation/1"
    assert res["seed"] == 7 and res["trials"] == 60
    ctl = res["controller"]
    assert (ctl["min_rounds"], ctl["max_rounds"], ctl["step"]) == (5, 15, 2)
    assert ctl["sequential"] == "pocock" and 0.95 < ctl["look_confidence"] < 0.995
    rows = res["rows"]
    assert len(rows) == 2 * 2 * 2  # CVs x drift on/off x effect 0/2 %
    for row in rows:
        assert row["trials"] == 60
        assert all(0.0 <= row[k] <= 1.0 for k in FRACTIONS)
        assert sum(row[k] for k in FRACTIONS) == pytest.approx(1.0)
        assert row["fast_or_slow"] == pytest.approx(row["fast"] + row["slow"])
        assert 5.0 <= row["mean_rounds"] <= 15.0
        assert 0.0 <= row["naive_sequential_changed"] <= 1.0

    def pick(cv: float, drift: bool, effect: bool) -> dict:
        (row,) = [
            r
            for r in rows
            if r["cv"] == cv and (r["drift_per_round"] > 0) == drift and (r["effect"] > 0) == effect
        ]
        return row

    for drift in (False, True):
        assert pick(0.01, drift, False)["fast_or_slow"] <= 0.10
        assert pick(0.01, drift, False)["same"] >= 0.8
        assert pick(0.01, drift, True)["fast"] >= 0.4
        assert pick(0.01, drift, True)["slow"] <= 0.05
        assert pick(0.03, drift, False)["ambiguous"] >= 0.5
    assert "A/A FPR" in stdout and "seed 7" in stdout


def test_simulation_rejects_bad_arguments(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(tmp_path / "x.json"), "--trials", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--trials" in proc.stderr


def _doc_table() -> tuple[dict[str, str], list[dict[str, str]]]:
    text = DOC.read_text()
    m = re.search(
        r"<!-- stats-simulation:default:begin -->(.*?)<!-- stats-simulation:default:end -->",
        text,
        re.S,
    )
    assert m, "docs/statistics.md lost its default simulation table markers"
    block = m.group(1)
    cmd = re.search(r"python scripts/stats_simulation.py[^\n`]*", block)
    assert cmd, "the default table must state its command"
    lines = [ln.strip() for ln in block.splitlines() if ln.strip().startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    body = [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]
    args = dict(re.findall(r"--([a-z-]+) (\S+)", cmd.group(0)))
    return args, body


def test_doc_numbers_match_a_fresh_run(tmp_path: Path) -> None:
    args, body = _doc_table()
    assert "seed" in args and "trials" in args
    doc_rows = {row["drift/round"]: row for row in body if row["CV"] == "1.0%"}
    assert set(doc_rows) == {"0.00%", "0.20%"}
    trials = 200
    res, _ = run_sim(tmp_path, "--trials", str(trials), "--cvs", "0.01", "--seed", args["seed"])
    for row in res["rows"]:
        doc = doc_rows[f"{row['drift_per_round']:.2%}"]
        if row["effect"] > 0:
            pairs = [(row["fast"], float(doc["power"]))]
        else:
            pairs = [
                (row["fast_or_slow"], float(doc["A/A FPR"])),
                (row["same"], float(doc["A/A SAME"])),
            ]
        for fresh, quoted in pairs:
            tol = 4.0 * math.sqrt(max(quoted * (1 - quoted), 0.01) / trials) + 0.02
            assert abs(fresh - quoted) <= tol, (row, doc)
        # the mean round count is the most sensitive figure: its SE is < 0.2 rounds here
        quoted_rounds = float(doc["effect rounds" if row["effect"] > 0 else "A/A rounds"])
        assert abs(row["mean_rounds"] - quoted_rounds) <= 0.75, (row, doc)
