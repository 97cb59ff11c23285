"""The benchmark's stopping rule over all its rows (kgate.stats.decide_bench), worker pairs and outlier rounds.

SYNTHETIC DATA: every round below comes from a stated model (seeded normal
log-ratios, or values written out), not from a measurement. Each test first
asserts the premise it needs (a row FAST at its own level, an interval that
straddles the bar), so a change in kgate.stats that moves a premise shows up
as a failed premise, not as a silent change of what is tested.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kgate import stats
from kgate.errors import ConfigError
from kgate.gates.bench import BenchConfig, RowOutcome, gate_geomean, gate_same
from kgate.stats import AMBIGUOUS, FAST, SLOW, ControllerConfig, Round, decide, decide_bench
from kgate.stats.outliers import screen
from kgate.stats.pairs import PAIR_METHOD

CFG = ControllerConfig(distribution_free=False)


def rows_of(log_ratios: dict[str, list[float]], every: int | None = None) -> dict[str, list[Round]]:
    """SYNTHETIC: rounds with the given per-round log-ratios (base 1 ms), alternating AB/BA, pairs of ``every``."""
    n = len(next(iter(log_ratios.values())))
    orders = stats.alternating_orders(n)
    return {k: [Round(1.0, math.exp(-d), orders[i], block=None if every is None else i // every)
                for i, d in enumerate(v)] for k, v in log_ratios.items()}


def normal_rows(spec: dict[str, tuple[float, float]], n: int, seed: int) -> dict[str, list[float]]:
    """SYNTHETIC: per row (true speedup, sd of the log-ratio) n normal round log-ratios."""
    rng = np.random.default_rng(seed)
    return {k: list(math.log(s) + rng.normal(0.0, sd, n)) for k, (s, sd) in spec.items()}


def outcome(key: str, dec: stats.Decision, role: str) -> RowOutcome:
    return RowOutcome(key=key, row=key, mode="fwdbwd", role=role, kind="dense", klass=None,
                      path="optimized" if role == "gated" else "control", decision=dec)


BCFG = BenchConfig(bar=1.08, class_key="D", classes=())


def test_a_geomean_that_straddles_the_bar_keeps_rounds_going_and_is_inconclusive_at_the_cap() -> None:
    """Three rows truly 1.082x at 0.6 % noise: every row is FAST at 5 rounds, the geomean straddles 1.08. Before,
    the loop stopped there and the gate said fail; now the rounds go on to the cap and a straddle left there is
    inconclusive, never fail."""
    data = rows_of(normal_rows({f"r{i}": (1.082, 0.006) for i in range(3)}, 15, seed=4))
    first = {k: decide(v[:5], CFG) for k, v in data.items()}
    assert all(not d.continue_ and d.classification == FAST for d in first.values()), "premise: rows FAST at 5"
    at5 = decide_bench({k: v[:5] for k, v in data.items()}, CFG, gated=list(data), bar=1.08)
    assert at5.bar == stats.STRADDLES and at5.continue_ and "straddles the bar" in at5.reason
    assert not decide_bench({k: v[:5] for k, v in data.items()}, CFG, gated=list(data)).continue_, "no bar, no wait"
    n = 5
    while (dec := decide_bench({k: v[:n] for k, v in data.items()}, CFG, gated=list(data), bar=1.08)).continue_:
        n += 1
    assert n in CFG.looks() and n > 5
    gate = gate_geomean([outcome(k, d, "gated") for k, d in dec.rows.items()], BCFG, "synthetic")[0]
    if dec.bar == stats.STRADDLES:
        assert n == CFG.max_rounds and gate.status == "inconclusive" and "the cap" in gate.detail
    else:
        assert gate.status == {stats.ABOVE: "pass", stats.BELOW: "fail"}[dec.bar]
    # the same straddle read at 5 rounds: inconclusive too (the gate never fails a straddle)
    early = gate_geomean([outcome(k, d, "gated") for k, d in first.items()], BCFG, "synthetic")[0]
    assert early.status == "inconclusive" and early.interval[0] < 1.08 <= early.interval[1]


def test_controls_are_judged_as_a_family() -> None:
    """Two unchanged controls, one slow at its own 98.35 % level but not at the family level (Bonferroni over 2):
    AMBIGUOUS as a family, so the run continues, and at the cap the gate is inconclusive, not fail. A control
    slow at the family level fails; a single control is judged as a row."""
    rng = np.random.default_rng(11)
    raw = rng.normal(0.0, 0.03, 15)
    centred = stats.estimate_rounds(rows_of({"c": list(raw)})["c"], CFG.look_confidence, distribution_free=False)
    base = list(raw - centred.log_ratio)  # crossover point exactly 0
    hw_own = math.log(centred.upper / centred.lower) / 2
    hw_family = math.log(np.divide(*centred.at_confidence(CFG.family_confidence(2))[::-1])) / 2
    shift = (max(hw_own, math.log(1.02)) + hw_family) / 2
    slow_own = [v - shift for v in base]
    est = stats.estimate_rounds(rows_of({"c": slow_own})["c"], CFG.look_confidence, distribution_free=False)
    lo, hi = est.at_confidence(CFG.family_confidence(2))
    assert est.upper < 1.0 and est.speedup < 1 / 1.02 and lo < 1.0 < hi, "premise: SLOW alone, not as one of two"
    data = rows_of({"g": list(np.log(1.2) + rng.normal(0.0, 0.002, 15)), "c1": slow_own, "c2": base})
    dec = decide_bench(data, CFG, gated=["g"], controls=["c1", "c2"])
    assert dec.rows["c1"].classification == SLOW and dec.controls["c1"] == AMBIGUOUS
    assert not dec.continue_ and dec.valid_rounds == 15 and "undecided as a family" in dec.reason
    longer = ControllerConfig(max_rounds=17, distribution_free=False)  # 15 rounds is then a look before the cap
    before_cap = decide_bench(data, longer, gated=["g"], controls=["c1", "c2"])
    assert [d.continue_ for d in before_cap.rows.values()] == [False] * 3, "premise: every row decided at 15"
    assert before_cap.controls["c1"] == AMBIGUOUS and before_cap.continue_ and "family level" in before_cap.reason
    outs = [outcome(k, dec.rows[k], "control") for k in ("c1", "c2")]
    gate = gate_same("controls_same", "control rows", outs, BCFG, "synthetic", family=True)
    assert gate.status == "inconclusive" and "family level" in gate.detail and "Bonferroni over 2" in gate.threshold
    assert gate_same("controls_same", "control rows", outs, BCFG, "synthetic").status == "fail", "per row: fail"
    clearly = rows_of({"c1": [v - 0.1 for v in base], "c2": base})
    outs = [outcome(k, decide(v, CFG), "control") for k, v in clearly.items()]
    assert gate_same("controls_same", "control rows", outs, BCFG, "synthetic", family=True).status == "fail"
    one = decide(rows_of({"c": slow_own})["c"], CFG)
    assert stats.family_classes({"c": one.estimate}, {"c": one.classification}, CFG) == {"c": SLOW}


def test_an_outlier_round_is_excluded_from_every_row_and_replaced() -> None:
    """One round with one arm 20 % slow in one of three rows: excluded (named, with its p-value), from every row,
    with its AB/BA partner, so the valid rounds stay whole crossover pairs and the loop reruns the pair; a clean
    run excludes nothing."""
    logs = normal_rows({"a": (1.0, 0.01), "b": (1.04, 0.01), "c": (1.0, 0.005)}, 11, seed=5)
    clean = rows_of(logs)
    assert decide_bench(clean, CFG, gated=["a", "b", "c"]).excluded == ()
    logs["b"][6] += math.log(1.2)
    dirty = rows_of(logs)
    dec = decide_bench(dirty, CFG, gated=["a", "b", "c"])
    (ex,) = dec.excluded
    assert (ex.round, ex.row) == (6, "b") and ex.p_value < ex.threshold and ex.deviation > 0.15
    assert dec.out == (6, 7), "round 7 (AB, index 6) and its partner round 8 (BA)"
    assert dec.valid_rounds == 9 and dec.rounds == 11 and all(d.rounds == 9 for d in dec.rows.values())
    assert [r.order for i, r in enumerate(dirty["a"]) if i not in dec.out] == list(stats.alternating_orders(9))
    assert "round 7 excluded as an outlier of b" in dec.notes[0] and "its AB/BA partner, round 8, goes" in dec.notes[0]
    assert "at 9 valid rounds" in dec.reason, "the look is decided on the 9 valid rounds, not the 11 recorded"
    # an outlier in the last, unpaired round: its partner, not yet run, is taken out when it is recorded
    logs = normal_rows({"a": (1.0, 0.01), "b": (1.04, 0.01), "c": (1.0, 0.005)}, 11, seed=5)
    logs["b"][10] += math.log(1.2)
    last = decide_bench(rows_of(logs), CFG, gated=["a", "b", "c"])
    assert [e.round for e in last.excluded] == [10] and last.out == (10,) and last.valid_rounds == 10
    assert "round 12 (the next), goes with it" in last.notes[0]
    more = normal_rows({"a": (1.0, 0.01), "b": (1.04, 0.01), "c": (1.0, 0.005)}, 12, seed=5)
    more["b"][10] += math.log(1.2)
    after = decide_bench(rows_of(more), CFG, gated=["a", "b", "c"])
    assert after.out == (10, 11) and after.valid_rounds == 10
    off = decide_bench(dirty, CFG, gated=["a", "b", "c"], max_excluded=0)
    assert off.excluded == () and off.valid_rounds == 11
    assert off.rows["b"].estimate.upper - off.rows["b"].estimate.lower > \
        2 * (dec.rows["b"].estimate.upper - dec.rows["b"].estimate.lower)


def test_the_screen_has_a_floor_a_limit_and_needs_five_rounds() -> None:
    """A deviation below a quarter of the resolution is never an outlier however extreme its t; at most ``limit``
    rounds go; below 5 valid rounds nothing is judged; the screen is a pure function."""
    orders = stats.alternating_orders(9)
    tight = [0.0001 * (-1) ** i for i in range(9)]
    tight[4] = 0.004  # 40 sds away, below 0.25 * ln(1.02) = 0.00495
    assert screen({"r": tight}, orders, 0.02, 3) == ()
    tight[4] = 0.006
    assert [e.round for e in screen({"r": tight}, orders, 0.02, 3)] == [4]
    wild = list(np.random.default_rng(1).normal(0.0, 0.001, 15))
    wild[3] += 0.05
    wild[8] += 0.2
    long = stats.alternating_orders(15)
    assert [e.round for e in screen({"r": wild}, long, 0.02, 3)] == [8, 3]
    assert [e.round for e in screen({"r": wild}, long, 0.02, 1)] == [8] and screen({"r": wild}, long, 0.02, 0) == ()
    assert screen({"r": wild[:4]}, long[:4], 0.02, 3) == ()
    assert screen({"r": wild}, long, 0.02, 3) == screen({"r": wild}, long, 0.02, 3)
    with pytest.raises(ConfigError):
        screen({"r": wild[:5]}, orders, 0.02, 3)


def test_worker_pairs_are_a_random_effect_in_the_interval() -> None:
    """Rounds recorded with their worker pair: replicated pairs give per-pair means with J - 1 dof; one pair for the
    run keeps the per-round interval and warns that the process offset is left out; one round per pair is the
    per-round interval (the offset is part of round noise); rounds without pairs are decided as before."""
    logs = normal_rows({"r": (1.0, 0.01)}, 10, seed=2)["r"]
    paired = stats.estimate_rounds(rows_of({"r": logs}, every=2)["r"], distribution_free=False)
    assert paired.method == PAIR_METHOD and paired.dof == 4 and paired.pair_ids == (0, 1, 2, 3, 4)
    assert paired.blocks == (0, 0, 1, 1, 2, 2, 3, 3, 4, 4)
    means = [(logs[2 * j] + logs[2 * j + 1]) / 2 for j in range(5)]
    assert paired.pair_log_ratios == pytest.approx(means)  # complete AB/BA pairs need no order adjustment
    one = stats.estimate_rounds([Round(r.base_ms, r.cand_ms, r.order, block=0) for r in rows_of({"r": logs})["r"]],
                                distribution_free=False)
    assert one.method == "crossover-t" and any("one pair of worker processes" in w for w in one.warnings)
    each = stats.estimate_rounds(rows_of({"r": logs}, every=1)["r"], distribution_free=False)
    old = stats.estimate_rounds(rows_of({"r": logs})["r"], distribution_free=False)
    assert each.method == old.method == "crossover-t" and (each.lower, each.upper) == (old.lower, old.upper)
    assert not any("worker" in w for w in each.warnings + old.warnings)
    # an odd round at a look forms a partial pair, adjusted by the order effect measured within pairs
    odd = stats.estimate_rounds(rows_of({"r": logs[:9]}, every=2)["r"], distribution_free=False)
    w = float(np.mean([(logs[2 * j] - logs[2 * j + 1]) / 2 for j in range(4)]))
    assert odd.dof == 4 and odd.pair_log_ratios[-1] == pytest.approx(logs[8] - w)
    # the geomean of rows timed by the same pairs keeps the pairs
    other = normal_rows({"s": (1.05, 0.01)}, 10, seed=3)["s"]
    g = stats.geomean([paired, stats.estimate_rounds(rows_of({"s": other}, every=2)["s"], distribution_free=False)])
    assert g.method.endswith(PAIR_METHOD) and g.dof == 4 and g.pair_ids == paired.pair_ids


def test_decide_bench_checks_its_input() -> None:
    data = rows_of({"a": [0.0] * 5, "b": [0.0] * 5})
    with pytest.raises(ConfigError, match="rows must share rounds"):
        decide_bench({"a": data["a"], "b": data["b"][:4]}, CFG, gated=["a"])
    with pytest.raises(ConfigError):
        decide_bench(data, CFG, gated=[])
    with pytest.raises(ConfigError):
        decide_bench(data, CFG, gated=["a"], controls=["zz"])
    assert decide_bench({"a": data["a"][:1]}, CFG, gated=["a"]).continue_


def test_the_reason_between_looks_says_so_instead_of_calling_decided_rows_undecided() -> None:
    """SYNTHETIC: two rows clearly FAST (1.2x at 0.5 % noise) and one AMBIGUOUS (1.0x at 20 %). At a look (5, 7)
    the reason counts the one open row; at 6 rounds, between looks, every row continues by the schedule, and the
    reason names the schedule (a progress line once read "3 of 3 rows undecided" there); below the minimum it
    counts the minimum."""
    data = rows_of(normal_rows({"a": (1.2, 0.005), "b": (1.2, 0.005), "c": (1.0, 0.2)}, 7, seed=11))
    assert decide(data["c"][:5], CFG).classification == AMBIGUOUS, "premise: row c AMBIGUOUS at 5"
    at = {n: decide_bench({k: v[:n] for k, v in data.items()}, CFG, gated=list(data)) for n in (3, 5, 6, 7)}
    assert all(d.continue_ for d in at.values())
    assert at[5].reason == "1 of 3 rows undecided at 5 valid rounds"
    assert at[6].reason == "6 valid rounds: between looks, the next at 7"
    assert at[7].reason == "1 of 3 rows undecided at 7 valid rounds"
    assert at[3].reason == f"3 of {CFG.min_rounds} minimum valid rounds"
