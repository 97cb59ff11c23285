"""The statistics' measured error rates: one-sided bounds on fresh simulations, and the tables of docs/statistics.md.

SYNTHETIC DATA: every rate here is simulated by scripts/stats_simulation.py's
models (normal round noise, worker-process offsets, outlier rounds; stated in
the script), except the records' figures, recomputed from the real H200 A/A
rounds in tests/data/bench/.

* Guarantees: a rate the statistics promise to hold (an A/A's false FAST/SLOW
  at most 5 %, a wrong GO at the bar at most 2.5 %, a family of controls
  falsely failed at most 5 %, a row interval excluding 1 at its level with
  replicated workers) must not be refuted: the one-sided Clopper-Pearson
  lower bound at 99.9 % of the simulated rate stays at or below the promise.
  A rate twice the promise fails with these trial counts (300 runs for a
  5 % promise, 600 for 2.5 %).
* The doc: the records' table and the records column of the summary are
  recomputed exactly; each simulated figure the summary quotes is rerun with
  fewer trials (same seed, same draws first) and must be consistent with the
  doc's figure (exact binomial test, each tail at 0.001).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import beta, binom

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "stats_simulation.py"
DOC = ROOT / "docs" / "statistics.md"
FRACTIONS = ("fast", "same", "slow", "ambiguous")
TAIL = 1e-3


def _load():
    spec = importlib.util.spec_from_file_location("stats_simulation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("stats_simulation", module)
    spec.loader.exec_module(module)
    return module


ss = _load()
sc = sys.modules["stats_scenarios"]


def lower_bound(rate: float, trials: int) -> float:
    """One-sided Clopper-Pearson lower bound at 1 - TAIL of a binomial rate."""
    k = round(rate * trials)
    return 0.0 if k == 0 else float(beta.ppf(TAIL, k, trials - k + 1))


def consistent(fresh: float, trials: int, quoted: float) -> bool:
    """Whether k = fresh * trials is a plausible draw of Binomial(trials, quoted): each tail at TAIL."""
    k = round(fresh * trials)
    q = min(max(quoted, 0.5 / (10 * trials)), 1 - 0.5 / (10 * trials))
    return binom.cdf(k, trials, q) > TAIL and binom.sf(k - 1, trials, q) > TAIL


def block(name: str) -> str:
    m = re.search(rf"<!-- stats-simulation:{name}:begin -->\n(.*?)\n<!-- stats-simulation:{name}:end -->", DOC.read_text(),
                  re.S)
    assert m, f"docs/statistics.md lost its {name} block"
    return m.group(1)


def table_rows(text: str) -> list[list[str]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def doc_seed() -> int:
    m = re.search(r"--seed (\d+)", block("summary"))
    assert m
    return int(m.group(1))


# guarantees


def test_an_a_a_row_is_called_fast_or_slow_at_most_5_percent_of_the_time() -> None:
    """The defaults (Pocock looks, point rule, a fresh worker pair every round, outlier screen) at CV 3 %, where the
    cap rarely suffices and the t approximation is at its weakest."""
    res = ss.run_cell(ss.Cell(0.03, 0.0, 0.0), 500, 1)
    assert lower_bound(res["fast_or_slow"], 500) <= 0.05, res
    assert res["ambiguous"] > 0.5


def test_a_wrong_go_at_a_true_geomean_on_the_bar_stays_below_2_5_percent() -> None:
    """Two gated rows truly at the bar 1.08: the geomean's lower bound, looked at with the rows' repeated
    intervals while it straddles, clears the bar in at most (1 - 95 %) / 2 of the runs."""
    res = sc.run_spec(sc.Spec("test", "bar", (0.015,) * 2, effect=1.08, bar=1.08, every=1), 600, 2)
    assert lower_bound(res["geomean_pass"], 600) <= 0.025, res
    assert res["geomean_fail"] < 0.1


def test_a_family_of_unchanged_controls_is_falsely_failed_at_most_5_percent_of_the_time() -> None:
    res = sc.run_spec(sc.Spec("test", "controls", (0.004,), effect=1.12, controls=(0.03,) * 3, every=1), 300, 3)
    assert lower_bound(res["controls_fail"], 300) <= 0.05, res


@pytest.mark.parametrize("every", [1, 2])
def test_replicated_worker_pairs_keep_a_row_interval_at_its_level(every: int) -> None:
    """A 0.5 % offset per worker process at 1 % round noise, 15 rounds: with one pair for the run the A/A row's 95 %
    interval excludes 1 far more often than 5 %; with a fresh pair every round (per-round interval) or every 2
    rounds (per-pair means) it does not."""
    one = sc.run_spec(sc.Spec("test", "one", (0.014,), process_sd=0.005, every=None), 300, 4)
    replicated = sc.run_spec(sc.Spec("test", f"every {every}", (0.014,), process_sd=0.005, every=every), 300, 4)
    assert lower_bound(one["excludes_1_at_95"], 300) > 0.05, one
    assert lower_bound(replicated["excludes_1_at_95"], 300) <= 0.05, replicated


# the doc


def test_the_records_table_and_the_summarys_records_column_are_recomputed_exactly() -> None:
    fig = sc.records_figures()
    header, body = ss.records_table(fig)
    assert table_rows(block("records")) == body
    _, summary = ss.summary_table({}, fig, sim=False)
    assert [r[2] for r in table_rows(block("summary"))] == [r[2] for r in summary]


def test_the_replicated_a_a_table_is_recomputed_exactly_and_holds_the_nominal_rate() -> None:
    """MEASURED DATA (tests/data/bench/h200_identity_liger_replicated/): the doc's table is the script's output, and
    with a fresh worker pair every round no row interval excludes 1 although most row-rounds' two processes differ
    beyond the resolution (the atomic base's speed is set per process)."""
    fig = sc.records_figures()
    _, body = ss.replicated_table(fig)
    assert table_rows(block("replicated")) == body
    (run,) = fig["replicated"]["runs"]
    assert run["pairs"] == run["rounds"] and run["excluding_1_at_95"] == 0 and run["moved"] == 0
    assert run["row_rounds_beyond_resolution"] > run["row_rounds"] / 2


def test_every_simulated_figure_the_summary_quotes_agrees_with_a_fresh_run() -> None:
    quoted = [r[1] for r in table_rows(block("summary"))]
    assert len(quoted) == len(ss.SUMMARY)
    args = ss.parse(["--trials", "1"])
    specs = {(name, (s.name() if hasattr(s, "name") else s.cell)): s for name in ss.summary_needs()
             for s in ss.scenario_specs(name, args)}
    seed = doc_seed()
    for (label, then, now, _), text in zip(ss.SUMMARY, quoted):
        numbers = [float(v) for v in text.split(" -> ")]
        for ref, value in zip([r for r in (then, now) if r], numbers):
            spec = specs[(ref[0], ref[1])]
            trials = 40 if ref[0] in ("straddle", "controls") else 200
            fresh = (ss.run_cell(spec, trials, seed) if isinstance(spec, ss.Cell) else sc.run_spec(spec, trials, seed))
            assert consistent(fresh[ref[2]], trials, value), (label, ref, fresh[ref[2]], value)


def test_the_default_table_agrees_with_a_fresh_run() -> None:
    rows = {r[1]: r for r in table_rows(block("default")) if r[0] == "1.0%"}
    assert set(rows) == {"0.00%", "0.20%"}
    for drift in (0.0, 0.002):
        doc = rows[f"{drift:.2%}"]
        aa = ss.run_cell(ss.Cell(0.01, drift, 0.0), 200, doc_seed())
        fx = ss.run_cell(ss.Cell(0.01, drift, 0.02), 200, doc_seed())
        for fresh, quoted in ((aa["fast_or_slow"], doc[2]), (aa["same"], doc[3]), (fx["fast"], doc[6])):
            assert consistent(fresh, 200, float(quoted)), (drift, fresh, quoted)
        assert abs(aa["mean_rounds"] - float(doc[5])) <= 1.0


def test_the_script_writes_json_and_the_doc_blocks(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    doc = tmp_path / "statistics.md"
    doc.write_text(DOC.read_text())
    proc = subprocess.run([sys.executable, str(SCRIPT), "--scenario", "records", "--json", str(out), "--write-doc",
                           str(doc), "--workers", "1"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert doc.read_text() == DOC.read_text(), "the committed records block is not what the script writes"
    res = json.loads(out.read_text())
    assert res["schema"] == "kgate.stats_simulation/2" and res["records"]["total"]["rows"] == 36
    proc = subprocess.run([sys.executable, str(SCRIPT), "--trials", "30", "--cvs", "0.01", "--seed", "7", "--json",
                           str(out), "--workers", "1"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    rows = list(res["results"]["default"].values())
    assert len(rows) == 4 and "A/A FPR" in proc.stdout and "seed 7" in proc.stdout
    for row in rows:
        assert row["trials"] == 30 and sum(row[k] for k in FRACTIONS) == pytest.approx(1.0)
        assert 5.0 <= row["mean_rounds"] <= 18.0 and 0.0 <= row["naive_sequential_changed"] <= 1.0


def test_the_script_rejects_bad_arguments(tmp_path: Path) -> None:
    for bad in (["--trials", "0"], ["--every", "0"]):
        proc = subprocess.run([sys.executable, str(SCRIPT), *bad], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and bad[0] in proc.stderr
