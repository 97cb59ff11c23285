"""Before/after scenarios of the benchmark's statistics, and the figures of the real H200 A/A records.

Imported by scripts/stats_simulation.py, which states the commands and writes
the tables of docs/statistics.md. Every scenario drives the real code
(``kgate.stats.decide_bench`` and the gates of ``kgate.gates.bench``) for
"now"; "before" is the rule as the code had it before, written out here
(``rows_then``, ``geomean_then``, ``controls_then``, ``classify_then``).

Model of one simulated row: round ``i``'s log time of each arm is
``ln mu_arm + p_arm,j(i) + e_arm,i (+ ln 1.2 in an outlier round, one arm)``
with ``e ~ N(0, sd^2 / 2)`` (so the round log-ratio has standard deviation
``sd``), ``p`` the offset of the worker process that timed it
(``N(0, process_sd^2)`` per process and row; pair ``j(i) = i // every``, or
one pair for the run), and outliers in a share of the rounds. Rows are
independent given their processes. The candidate's true speedup is
``effect`` on every gated row and 1 on every control.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kgate import stats
from kgate.gates import bench as gates
from kgate.measure import checkpoints
from kgate.records import read_record
from kgate.stats.classify import classify_log

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "tests" / "data" / "bench"
#: the real A/A runs (identity candidate, default campaign, H200): tests/data/bench/<name>/
AA_RUNS = ("h200_identity", "h200_identity_quiet", "h200_identity_host_ahead", "h200_identity_rearm")
#: the real A/A runs with a fresh worker pair every round (identity candidate of the Liger LayerNorm #945 replay,
#: H200): tests/data/bench/<name>/
REPLICATED_AA_RUNS = ("h200_identity_liger_replicated",)
OUTLIER_FACTOR = 1.2


# the real records


def load_run(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A bench run's record and the rounds of its checkpoint (tests/data/bench/<name>/)."""
    folder = RECORDS / name
    _, rounds = checkpoints.read_lines(folder / "rounds.jsonl")
    return read_record(folder / "record.json"), rounds


def run_config(record: dict[str, Any], **kw: Any) -> stats.ControllerConfig:
    ctl = record["data"]["controller"]
    return stats.ControllerConfig(min_rounds=ctl["min_rounds"], max_rounds=ctl["max_rounds"],
                                  resolution=ctl["resolution"], **kw)


def row_sds(name: str, keys: list[str] | None = None) -> dict[str, float]:
    """Each row's standard deviation of round log-ratios in a recorded run (crossover residuals, all rounds)."""
    record, rounds = load_run(name)
    keys = keys or [r["key"] for r in record["data"]["rows"]]
    return {k: float(stats.estimate_rounds(gates.to_rounds(rounds, k), distribution_free=False).sd_log or 0.0)
            for k in keys}


def roles(record: dict[str, Any]) -> tuple[list[str], list[str]]:
    rows = record["data"]["rows"]
    return [r["key"] for r in rows if r["role"] == "gated"], [r["key"] for r in rows if r["role"] == "control"]


# the rules as the code had them before


def rows_then(data: dict[str, list[stats.Round]], cfg: stats.ControllerConfig) -> tuple[dict[str, stats.Decision], int]:
    """The loop before: every row decided by ``stats.decide`` on all rounds, stop when every row stops."""
    n = cfg.min_rounds
    while True:
        decs = {k: stats.decide(v[:n], cfg) for k, v in data.items()}
        if not any(d.continue_ for d in decs.values()):
            return decs, n
        n += 1


def geomean_then(est: stats.RatioEstimate, classes: list[str], bar: float) -> str:
    """The geomean gate before: a straddle with every gated row decided was ``fail``."""
    side = stats.bar_side(est, bar)
    if side == stats.ABOVE:
        return "pass"
    if side == stats.BELOW:
        return "fail"
    return "inconclusive" if stats.AMBIGUOUS in classes else "fail"


def controls_then(classes: list[str]) -> str:
    """The controls gate before: any control FAST or SLOW at its own level failed the run."""
    if any(c in (stats.FAST, stats.SLOW) for c in classes):
        return "fail"
    return "inconclusive" if stats.AMBIGUOUS in classes else "pass"


def classify_then(point: float, lo: float, hi: float, fast: float, slow: float, require_point: bool) -> str:
    """``classify_log`` before: the direction-only rule called FAST on ``lo > 1`` alone, inside the band too."""
    if lo > 0.0 and (not require_point or point >= fast):
        return stats.FAST
    if hi < 0.0 and (not require_point or point <= -slow):
        return stats.SLOW
    if lo >= -slow and hi <= fast:
        return stats.SAME
    return stats.AMBIGUOUS


def direction_then(rounds: list[stats.Round], cfg: stats.ControllerConfig) -> tuple[str, int]:
    """One row through the controller's looks with :func:`classify_then` (the controller's rules otherwise)."""
    for n in cfg.looks():
        est = stats.estimate_rounds(rounds[:n], cfg.look_confidence, distribution_free=False)
        cls = classify_then(est.log_ratio, math.log(est.lower), math.log(est.upper), cfg.fast_band, cfg.slow_band,
                            cfg.require_point_beyond_resolution)
        if cls != stats.AMBIGUOUS or n >= cfg.max_rounds:
            return cls, n
    raise AssertionError("the cap is a look")


# simulated runs


@dataclass(frozen=True, slots=True)
class Spec:
    """One simulated condition (module docstring for the model).

    ``gated``/``controls``: each row's round log-ratio standard deviation;
    ``every``: rounds per worker pair (None: one pair); ``rule``: ``now`` (the
    code: ``decide_bench``, its gates) or ``then`` (the loop and gates before,
    without the outlier screen); ``screen``: the outlier screen (now only);
    ``direction``: None (the point rule), ``now`` or ``then`` (direction-only
    as classified now or before).
    """

    scenario: str
    cell: str
    gated: tuple[float, ...]
    effect: float = 1.0
    controls: tuple[float, ...] = ()
    process_sd: float = 0.0
    every: int | None = None
    outliers: float = 0.0
    bar: float | None = None
    rule: str = "now"
    screen: bool = True
    direction: str | None = None
    max_rounds: int = 15

    def seed(self, seed: int) -> np.random.SeedSequence:
        """Stable per condition, so one cell can be rerun alone with the same draws."""
        return np.random.SeedSequence([seed, zlib.crc32(f"{self.scenario}/{self.cell}".encode())])

    def config(self) -> stats.ControllerConfig:
        return stats.ControllerConfig(max_rounds=self.max_rounds, distribution_free=False,
                                      require_point_beyond_resolution=self.direction is None)


def draw(rng: np.random.Generator, spec: Spec) -> tuple[dict[str, list[stats.Round]], list[str], list[str]]:
    """One run's rounds for every row (enough for the cap plus the excluded rounds)."""
    n = spec.max_rounds + spec.max_rounds // 5
    orders = stats.alternating_orders(n)
    blocks = [0] * n if spec.every is None else [i // spec.every for i in range(n)]
    idx = np.array(blocks)
    rows = [(f"g{i}", sd, spec.effect) for i, sd in enumerate(spec.gated)]
    rows += [(f"c{i}", sd, 1.0) for i, sd in enumerate(spec.controls)]
    data = {}
    for key, sd, effect in rows:
        e = rng.normal(0.0, sd / math.sqrt(2.0), (2, n))
        p = rng.normal(0.0, spec.process_sd, (2, n))[:, idx]
        hit = rng.random(n) < spec.outliers
        arm = rng.random(n) < 0.5
        ln_b = e[0] + p[0] + math.log(OUTLIER_FACTOR) * (hit & arm)
        ln_c = -math.log(effect) + e[1] + p[1] + math.log(OUTLIER_FACTOR) * (hit & ~arm)
        data[key] = [stats.Round(math.exp(ln_b[i]), math.exp(ln_c[i]), orders[i], block=blocks[i]) for i in range(n)]
    return data, [k for k, *_ in rows if k.startswith("g")], [k for k, *_ in rows if k.startswith("c")]


def bench_now(data: dict[str, list[stats.Round]], gated: list[str], controls: list[str], spec: Spec,
              cfg: stats.ControllerConfig) -> tuple[stats.BenchDecision, int]:
    """The stage's loop: ``decide_bench`` after every round until it stops (it continues below the minimum)."""
    n = cfg.min_rounds
    while True:
        dec = stats.decide_bench({k: v[:n] for k, v in data.items()}, cfg, gated=gated, controls=controls,
                                 bar=spec.bar, max_excluded=None if spec.screen else 0)
        if not dec.continue_:
            return dec, n
        n += 1


def outcome(rng: np.random.Generator, spec: Spec) -> dict[str, Any]:
    """One simulated run: the first gated row's class, the gates that the scenario judges, the rounds used."""
    data, gated, controls = draw(rng, spec)
    cfg = spec.config()
    out: dict[str, Any] = {}
    if spec.direction == "then":
        cls, n = direction_then(data["g0"], cfg)
        return {"cls": cls, "rounds": n, "excluded": 0, "excludes_1": None}
    if spec.rule == "then":
        decs, n = rows_then(data, cfg)
        excluded = 0
    else:
        dec, n = bench_now(data, gated, controls, spec, cfg)
        decs, excluded = dec.rows, len(dec.excluded)
    first = decs["g0"]
    assert first.estimate is not None and first.classification is not None
    # the calibration figure: the first gated row's 95 % interval over a fixed count (the cap), no stopping, no screen
    fixed = stats.estimate_rounds(data["g0"][:spec.max_rounds], 0.95, distribution_free=False)
    out.update(cls=first.classification, rounds=n, excluded=excluded, excludes_1=not fixed.lower <= 1.0 <= fixed.upper)
    bcfg = gates.BenchConfig(bar=spec.bar or 1.0, class_key="D", classes=(), resolution=cfg.resolution,
                             min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds)
    if spec.bar is not None:
        est = stats.geomean([decs[k].estimate for k in gated])  # type: ignore[misc]
        classes = [decs[k].classification for k in gated]
        out["geomean"] = (geomean_then(est, classes, spec.bar) if spec.rule == "then"  # type: ignore[arg-type]
                          else gates.gate_geomean(_outcomes(decs, gated, "gated"), bcfg, "sim")[0].status)
    if controls:
        classes = [decs[k].classification for k in controls]
        out["controls"] = (controls_then(classes) if spec.rule == "then"  # type: ignore[arg-type]
                           else gates.gate_same("controls_same", "control rows", _outcomes(decs, controls, "control"),
                                                bcfg, "sim", family=True).status)
    return out


def _outcomes(decs: dict[str, stats.Decision], keys: list[str], role: str) -> list[gates.RowOutcome]:
    return [gates.RowOutcome(key=k, row=k, mode="fwdbwd", role=role, kind="dense", klass=None,
                             path="optimized" if role == "gated" else "control", decision=decs[k]) for k in keys]


def run_spec(spec: Spec, trials: int, seed: int) -> dict[str, Any]:
    """``trials`` simulated runs of one condition; fractions of each outcome."""
    rng = np.random.default_rng(spec.seed(seed))
    runs = [outcome(rng, spec) for _ in range(trials)]
    res: dict[str, Any] = {"scenario": spec.scenario, "cell": spec.cell, "trials": trials}
    for c in (stats.FAST, stats.SAME, stats.SLOW, stats.AMBIGUOUS):
        res[c.lower()] = sum(r["cls"] == c for r in runs) / trials
    res["fast_or_slow"] = res["fast"] + res["slow"]
    res["mean_rounds"] = float(np.mean([r["rounds"] for r in runs]))
    res["with_excluded"] = sum(r["excluded"] > 0 for r in runs) / trials
    if runs[0]["excludes_1"] is not None:
        res["excludes_1_at_95"] = sum(r["excludes_1"] for r in runs) / trials
    for gate in ("geomean", "controls"):
        if gate in runs[0]:
            for status in ("pass", "fail", "inconclusive"):
                res[f"{gate}_{status}"] = sum(r[gate] == status for r in runs) / trials
    return res


# the records' figures


def records_figures() -> dict[str, Any]:
    """Per A/A run and in total, recomputed from the recorded rounds: row intervals excluding 1 (at 95 % and at the
    decision's per-look level), rows FAST or SLOW as decided then and now (``decide_bench`` on the same rounds:
    outlier rounds out, controls as a family), the controls gate then and now, the outlier rounds the screen takes
    out, and rows FAST or SLOW under the direction-only rule as coded before and as stated now."""
    runs = []
    for name in AA_RUNS:
        record, rounds = load_run(name)
        gated, controls = roles(record)
        cfg = run_config(record)
        keys = gated + controls
        data = {k: gates.to_rounds(rounds, k) for k in keys}
        then = {k: stats.decide(data[k], cfg) for k in keys}
        now = stats.decide_bench(data, cfg, gated=gated, controls=controls, bar=record["data"]["bar"])
        direction = {"then": 0, "now": 0}
        for k in keys:
            e = then[k].estimate
            assert e is not None
            args = (e.log_ratio, math.log(e.lower), math.log(e.upper), cfg.fast_band, cfg.slow_band, False)
            direction["then"] += classify_then(*args) in (stats.FAST, stats.SLOW)
            direction["now"] += classify_log(*args) in (stats.FAST, stats.SLOW)
        outs = _outcomes(now.rows, controls, "control")
        bcfg = gates.BenchConfig(bar=record["data"]["bar"], class_key="D", classes=(), resolution=cfg.resolution,
                                 min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds)
        cal = gates.calibration(_outcomes(then, keys, "gated"))
        runs.append({
            "run": name, "rounds": len(rounds), "rows": len(keys),
            "excluding_1_at_95": len(cal["plain"]["excluding_1"]), "excluding_1_at_look": len(cal["look"]["excluding_1"]),
            "look_confidence": cal["look"]["confidence"],
            "moved_then": sum(then[k].classification in (stats.FAST, stats.SLOW) for k in keys),
            "moved_now": sum(now.rows[k].classification in (stats.FAST, stats.SLOW) for k in gated)
            + sum(now.controls[k] in (stats.FAST, stats.SLOW) for k in controls),
            "controls_then": controls_then([then[k].classification for k in controls]),  # type: ignore[misc]
            "controls_now": gates.gate_same("controls_same", "control rows", outs, bcfg, "records", family=True).status,
            "excluded_rounds": [e.round for e in now.excluded],
            "direction_moved_then": direction["then"], "direction_moved_now": direction["now"],
        })
    total = {k: sum(r[k] for r in runs) for k in ("rows", "excluding_1_at_95", "excluding_1_at_look", "moved_then",
                                                   "moved_now", "direction_moved_then", "direction_moved_now")}
    total["excluded_rounds"] = sum(len(r["excluded_rounds"]) for r in runs)
    total["controls_fail_then"] = sum(r["controls_then"] == "fail" for r in runs)
    total["controls_fail_now"] = sum(r["controls_now"] == "fail" for r in runs)
    total["runs"] = len(runs)
    from scipy.stats import binom
    n = total["rows"]
    total["p_95"] = float(binom.sf(total["excluding_1_at_95"] - 1, n, 0.05))
    look = runs[0]["look_confidence"]
    total["p_look"] = float(binom.sf(total["excluding_1_at_look"] - 1, n, 1 - look))
    return {"runs": runs, "total": total, "replicated": replicated_figures()}


def replicated_figures() -> dict[str, Any]:
    """Per replicated A/A run, recomputed from the recorded rounds (each round timed by its own fresh worker pair):
    the gated rows' decisions by ``stats.decide_bench`` (rows FAST or SLOW, SAME, AMBIGUOUS), their intervals
    excluding 1 at 95 % and at the per-look level with the count expected (``gates.calibration``), and what one
    pair for the whole run would have carried: the row-rounds whose two processes' medians differ by more than
    the resolution (with one pair for the run, such a difference is a fixed offset of every round of the row,
    which no number of rounds narrows), and the largest of them."""
    runs = []
    for name in REPLICATED_AA_RUNS:
        record, rounds = load_run(name)
        gated, controls = roles(record)
        keys = gated + controls
        cfg = run_config(record)
        data = {k: gates.to_rounds(rounds, k) for k in keys}
        now = stats.decide_bench(data, cfg, gated=gated, controls=controls, bar=record["data"]["bar"])
        cal = gates.calibration(_outcomes(now.rows, gated, "gated"))
        band = math.log(1.0 + cfg.resolution)
        offsets = [abs(math.log(float(np.median(r["rows"][k]["base"]["samples_ms"]))
                                / float(np.median(r["rows"][k]["cand"]["samples_ms"]))))
                   for r in rounds for k in keys]
        classes = [now.rows[k].classification for k in gated]
        runs.append({
            "run": name, "rounds": len(rounds), "rows": len(gated),
            "pairs": len({r.get("pair") for r in rounds}),
            "excluding_1_at_95": len(cal["plain"]["excluding_1"]), "excluding_1_at_look": len(cal["look"]["excluding_1"]),
            "expected_at_95": cal["plain"]["expected"],
            "moved": sum(c in (stats.FAST, stats.SLOW) for c in classes),
            "same": classes.count(stats.SAME), "ambiguous": classes.count(stats.AMBIGUOUS),
            "row_rounds": len(offsets), "row_rounds_beyond_resolution": sum(o > band for o in offsets),
            "largest_process_ratio": math.exp(max(offsets)) if offsets else 1.0,
        })
    return {"runs": runs}
