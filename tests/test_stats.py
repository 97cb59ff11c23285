"""Tests of kgate.stats: the A/B benchmark statistics.

Synthetic rounds come from a stated model (log-normal round noise, optional
linear drift, alternating AB/BA order) so each expectation follows from the
model, not from a recorded run.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from kgate.errors import ConfigError, KgateError
from kgate.stats import (
    AB,
    AMBIGUOUS,
    FAST,
    SAME,
    SLOW,
    ControllerConfig,
    Round,
    alternating_orders,
    classify,
    crossover_information,
    decide,
    discreteness_floors,
    estimate_rounds,
    geomean,
    paired_ratio,
    pocock_constant,
    rounds_needed,
    summarize,
)

# helpers


def make_rounds(
    n: int,
    *,
    speedup: float = 1.0,
    cv: float = 0.01,
    drift_per_round: float = 0.0,
    second_arm_gain: float = 0.0,
    seed: int = 0,
    base_ms: float = 1.0,
    first: str = AB,
    interleave: bool = True,
) -> list[Round]:
    """Rounds from the model ln t = ln mu + g*time - gain*[measured second] + noise.

    The first arm of round i runs at time i + 0.25, the second at i + 0.75.
    """
    rng = np.random.default_rng(seed)
    orders = alternating_orders(n, first) if interleave else (first,) * n
    out = []
    for i, order in enumerate(orders):
        base_first = order == AB
        t_base = i + (0.25 if base_first else 0.75)
        t_cand = i + (0.75 if base_first else 0.25)
        ln_b = drift_per_round * t_base + rng.normal(0.0, cv)
        ln_c = -math.log(speedup) + drift_per_round * t_cand + rng.normal(0.0, cv)
        ln_b -= 0.0 if base_first else second_arm_gain
        ln_c -= second_arm_gain if base_first else 0.0
        out.append(Round(base_ms * math.exp(ln_b), base_ms * math.exp(ln_c), order))
    return out


def recorded_style_samples(rng: np.random.Generator, centre_ms: float, k: int = 100) -> list[float]:
    """Per-call timings as a CUDA-event timer reports them.

    0.5 % jitter, quantised to 1 microsecond, and every 40th call hit by a
    3x outlier (a context switch or a late launch); the round median must
    shrug the outliers off.
    """
    x = centre_ms * np.exp(rng.normal(0.0, 0.005, k))
    x[::40] *= 3.0
    return list(np.round(x, 3))


def estimate_with(point: float, lo: float, hi: float) -> object:
    """A RatioEstimate with the given speedup point and interval."""
    base = paired_ratio([1.0, 1.1, 1.05], [1.0, 1.1, 1.05], distribution_free=False)
    return replace(base, speedup=point, lower=lo, upper=hi, log_ratio=math.log(point))


# summarize


def test_summarize_matches_hand_computed_values() -> None:
    s = summarize([float(v) for v in range(1, 11)])
    assert s.n == 10
    assert s.median_ms == pytest.approx(5.5)
    assert s.mean_ms == pytest.approx(5.5)
    assert s.std_ms == pytest.approx(math.sqrt(sum((v - 5.5) ** 2 for v in range(1, 11)) / 9))
    assert (s.min_ms, s.max_ms) == (1.0, 10.0)
    # type 7: position (n-1)p = 0.9, 1.8, 7.2, 8.1 -> 1 + position
    assert s.p10_ms == pytest.approx(1.9)
    assert s.p20_ms == pytest.approx(2.8)
    assert s.p80_ms == pytest.approx(8.2)
    assert s.p90_ms == pytest.approx(9.1)
    assert s.cv == pytest.approx(s.std_ms / 5.5)
    d = s.as_dict()
    assert set(d) >= {
        "median_ms",
        "mean_ms",
        "std_ms",
        "min_ms",
        "p10_ms",
        "p20_ms",
        "p80_ms",
        "p90_ms",
        "n",
    }
    json.dumps(d)


def test_summarize_single_sample_and_bad_input() -> None:
    s = summarize([2.0])
    assert s.std_ms is None and s.cv is None and s.median_ms == 2.0
    for bad in ([], [1.0, float("nan")], [1.0, -1.0], [0.0], [[1.0, 2.0]]):
        with pytest.raises(ConfigError):
            summarize(bad)
    assert issubclass(ConfigError, KgateError)


def test_round_from_recorded_style_samples_uses_the_median() -> None:
    rng = np.random.default_rng(7)
    base = recorded_style_samples(rng, 1.000)
    cand = recorded_style_samples(rng, 0.900)
    r = Round.from_samples(base, cand, AB)
    assert r.base_ms == pytest.approx(float(np.median(base)))
    assert r.cand_ms == pytest.approx(float(np.median(cand)))
    # the mean is dragged up by the three 3x outliers (~ +5 %), the median is not
    assert abs(r.base_ms - 1.0) < 0.005
    assert summarize(base).mean_ms > 1.03


# paired ratio: convention, validity, classification of clear cases


def test_speedup_convention_base_over_candidate() -> None:
    est = paired_ratio([2.0, 2.02, 1.98, 2.01, 1.99], [1.0, 1.01, 0.99, 1.0, 1.0])
    assert est.speedup == pytest.approx(2.0, rel=0.01)
    assert est.lower < est.speedup < est.upper
    assert est.method == "crossover-t"
    assert est.dof == 3 and est.n == 5


def test_clear_win_is_fast_and_stops_at_the_minimum() -> None:
    rounds = make_rounds(5, speedup=1.10, cv=0.01, seed=1)
    dec = decide(rounds)
    assert not dec.continue_
    assert dec.classification == FAST
    assert dec.estimate is not None and dec.estimate.lower > 1.0
    assert dec.rounds == 5


def test_clear_regression_is_slow() -> None:
    rounds = make_rounds(5, speedup=1 / 1.10, cv=0.01, seed=2)
    dec = decide(rounds)
    assert (dec.continue_, dec.classification) == (False, SLOW)
    assert dec.estimate is not None and dec.estimate.upper < 1.0


def test_recorded_style_rounds_classify_a_ten_percent_win() -> None:
    rng = np.random.default_rng(11)
    rounds = []
    for i in range(5):
        order = alternating_orders(5)[i]
        rounds.append(
            Round.from_samples(
                recorded_style_samples(rng, 1.0), recorded_style_samples(rng, 1.0 / 1.1), order
            )
        )
    dec = decide(rounds)
    assert dec.classification == FAST
    assert dec.estimate is not None
    assert dec.estimate.speedup == pytest.approx(1.10, rel=0.01)


def test_fewer_than_two_rounds_and_bad_shapes_raise() -> None:
    with pytest.raises(ConfigError):
        paired_ratio([1.0], [1.0])
    with pytest.raises(ConfigError):
        paired_ratio([1.0, 1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ConfigError):
        paired_ratio([1.0, 1.0], [1.0, 1.0], orders=["AB", "XY"])
    with pytest.raises(ConfigError):
        paired_ratio([1.0, 1.0], [1.0, 1.0], confidence=1.0)
    with pytest.raises(ConfigError):
        estimate_rounds([(1.0, 1.0), (1.0, 1.0)])  # type: ignore[list-item]


def test_two_rounds_fall_back_to_paired_t() -> None:
    est = paired_ratio([1.0, 1.02], [0.99, 1.0])
    assert est.method == "paired-t" and est.dof == 1
    assert est.order_effect is None
    assert any("only 2 rounds" in w for w in est.warnings)


def test_five_pairs_small_n_edge() -> None:
    """5 rounds: the t-interval decides; no randomisation test can reach 0.05."""
    rounds = make_rounds(5, speedup=1.08, cv=0.005, seed=3)
    est = estimate_rounds(rounds)
    assert est.n == 5 and est.dof == 3
    assert est.lower > 1.0  # the t-interval is decisive
    check = est.distribution_free
    assert check is not None and check.exact
    assert check.relabellings == math.comb(5, 3)
    assert check.rounds_favouring_candidate == 5
    assert check.p_value == pytest.approx(0.2)  # its floor, reached by a 5/5 win
    assert check.p_value > 0.05
    assert check.lower is None and check.upper is None  # 95 % is unattainable
    # the sign-flip (a rank-free paired test) on 5 pairs is floored at 2/32
    one_order = paired_ratio(
        [r.base_ms for r in rounds], [r.cand_ms for r in rounds], orders=[AB] * 5
    )
    assert one_order.distribution_free is not None
    assert one_order.distribution_free.p_value == pytest.approx(0.0625)
    assert one_order.distribution_free.lower is None


def test_discreteness_floors_table() -> None:
    """The floors quoted in docs/statistics.md (anchors §12)."""
    expected = {
        4: (0.125, 0.029),
        5: (0.0625, 0.0079),
        6: (0.031, 0.0022),
        7: (0.016, 0.00058),
        9: (0.0039, 0.00004),
    }
    for n, (sign, mwu) in expected.items():
        f = discreteness_floors(n)
        assert f["sign_or_signed_rank"] == pytest.approx(sign, rel=0.03)
        assert f["mann_whitney"] == pytest.approx(mwu, rel=0.05)
    assert discreteness_floors(5)["sign_or_signed_rank"] > 0.05
    assert discreteness_floors(6)["sign_or_signed_rank"] < 0.05
    assert discreteness_floors(5)["crossover_relabelling"] == pytest.approx(0.2)


def _brute_relabel_pvalues(x: np.ndarray, y: np.ndarray, theta: float) -> tuple[float, float]:
    xs, ys = x - theta, y + theta
    z = np.concatenate([xs, ys])
    obs = xs.mean() - ys.mean()
    up = down = total = 0
    for chosen in itertools.combinations(range(z.size), x.size):
        m = np.zeros(z.size, bool)
        m[list(chosen)] = True
        stat = z[m].mean() - z[~m].mean()
        up += stat >= obs - 1e-12
        down += stat <= obs + 1e-12
        total += 1
    return up / total, down / total


def test_exact_relabelling_interval_matches_brute_force_inversion() -> None:
    rounds = make_rounds(9, speedup=1.03, cv=0.01, seed=5)
    est = estimate_rounds(rounds)
    check = est.distribution_free
    assert check is not None and check.lower is not None and check.upper is not None
    d = np.array(est.log_ratios)
    is_ab = np.array([o == AB for o in est.orders])
    x, y = d[is_ab], -d[~is_ab]
    lo, hi = math.log(check.lower), math.log(check.upper)
    eps = 1e-7
    # just outside the interval the one-sided test rejects at 2.5 %, just inside it does not
    assert _brute_relabel_pvalues(x, y, lo - eps)[0] <= 0.025
    assert _brute_relabel_pvalues(x, y, lo + eps)[0] > 0.025
    assert _brute_relabel_pvalues(x, y, hi + eps)[1] <= 0.025
    assert _brute_relabel_pvalues(x, y, hi - eps)[1] > 0.025
    up, down = _brute_relabel_pvalues(x, y, 0.0)
    assert check.p_value == pytest.approx(min(1.0, 2 * min(up, down)))


def test_exact_signflip_interval_matches_brute_force() -> None:
    rng = np.random.default_rng(9)
    d = rng.normal(0.01, 0.01, 8)
    est = paired_ratio(np.exp(d), np.ones(8), orders=[AB] * 8)
    check = est.distribution_free
    assert check is not None and check.lower is not None and check.upper is not None

    def p_upper(theta: float) -> float:
        obs = (d - theta).sum()
        hits = sum(
            (np.array(s) * (d - theta)).sum() >= obs - 1e-12
            for s in itertools.product((1.0, -1.0), repeat=d.size)
        )
        return hits / 2**d.size

    lo = math.log(check.lower)
    assert p_upper(lo - 1e-7) <= 0.025 < p_upper(lo + 1e-7)
    assert check.attained_confidence == pytest.approx(1 - 2 * 6 / 256)


def test_distribution_free_samples_beyond_enumeration_deterministically() -> None:
    rounds = make_rounds(21, speedup=1.02, cv=0.01, seed=4)  # C(21, 11) > 65536
    a = estimate_rounds(rounds, seed=3).distribution_free
    b = estimate_rounds(rounds, seed=3).distribution_free
    assert a is not None and not a.exact and a == b
    assert a.relabellings == 20_001
    est = estimate_rounds(rounds, distribution_free=False)
    assert a.lower is not None and a.upper is not None
    assert a.lower < est.speedup < a.upper


# drift and order effects


def test_interleaving_cancels_linear_drift_exactly_at_odd_n() -> None:
    """Noise-free drift: the balanced estimator is exact, the plain mean is not."""
    g = 0.01  # 1 % per round
    rounds = make_rounds(5, speedup=1.0, cv=0.0, drift_per_round=g)
    est = estimate_rounds(rounds, distribution_free=False)
    assert est.log_ratio == pytest.approx(0.0, abs=1e-12)
    d = np.array(est.log_ratios)
    # AB rounds: candidate half a round later -> d = -g/2; BA rounds: +g/2
    assert d[0] == pytest.approx(-g / 2) and d[1] == pytest.approx(g / 2)
    assert d.mean() == pytest.approx(-g / 10)  # the plain mean keeps -g/(2n)
    assert est.order_effect == pytest.approx(math.exp(-g / 2))
    assert any("zero width" in w for w in est.warnings)


def test_drift_fools_the_naive_sequential_comparison_but_not_the_paired_one() -> None:
    """A/A with drift: baseline-then-candidate says 'change', interleaved says SAME."""
    from scipy import stats as sps

    g, cv, n = 0.004, 0.003, 9
    rng = np.random.default_rng(21)
    # naive: n baseline rounds, then n candidate rounds of the same code
    ln_base = g * (np.arange(n) + 0.5) + rng.normal(0, cv, n)
    ln_cand = g * (n + np.arange(n) + 0.5) + rng.normal(0, cv, n)
    naive = sps.ttest_ind(ln_base, ln_cand, equal_var=False)
    naive_ratio = math.exp(np.median(ln_base) - np.median(ln_cand))
    assert naive.pvalue < 0.001 and naive_ratio < 1 / 1.02  # "a >2 % regression"

    rounds = make_rounds(n, speedup=1.0, cv=cv, drift_per_round=g, seed=21)
    dec = decide(rounds)
    assert dec.classification == SAME
    assert dec.estimate is not None and dec.estimate.lower < 1.0 < dec.estimate.upper


def test_one_order_only_is_biased_by_drift_and_warned() -> None:
    g = 0.01
    rounds = make_rounds(6, speedup=1.0, cv=0.0005, drift_per_round=g, interleave=False, seed=2)
    est = estimate_rounds(rounds, distribution_free=False)
    assert est.method == "paired-t"
    assert est.log_ratio == pytest.approx(-g / 2, abs=0.002)  # the bias the design leaves
    assert any("one order" in w for w in est.warnings)


def test_order_effect_is_removed_and_reported() -> None:
    rounds = make_rounds(9, speedup=1.0, cv=0.002, second_arm_gain=0.02, seed=8)
    est = estimate_rounds(rounds)
    assert est.speedup == pytest.approx(1.0, abs=0.004)
    assert est.order_effect == pytest.approx(math.exp(0.02), abs=0.004)
    assert any("order effect" in w for w in est.warnings)
    assert classify(est) == SAME


# classify


@pytest.mark.parametrize(
    ("point", "lo", "hi", "expected"),
    [
        (1.05, 1.03, 1.07, FAST),
        (1.021, 1.001, 1.04, FAST),  # lower bound > 1 and point >= 1.02
        (1.015, 1.002, 1.03, AMBIGUOUS),  # significant, but point below the resolution
        (1.009, 1.003, 1.015, SAME),  # significant yet inside the band
        (1.0, 0.99, 1.01, SAME),
        (1.0, 0.97, 1.03, AMBIGUOUS),
        (1 / 1.05, 1 / 1.07, 1 / 1.03, SLOW),
        (1 / 1.015, 1 / 1.03, 1 / 1.002, AMBIGUOUS),
        (1.03, 0.99, 1.07, AMBIGUOUS),
    ],
)
def test_classify_rule(point: float, lo: float, hi: float, expected: str) -> None:
    assert classify(estimate_with(point, lo, hi)) == expected  # type: ignore[arg-type]


def test_classify_options() -> None:
    est = estimate_with(1.015, 1.002, 1.03)
    assert classify(est, require_point_beyond_resolution=False) == FAST  # type: ignore[arg-type]
    assert classify(est, resolution=0.01) == FAST  # type: ignore[arg-type]
    slow = estimate_with(1 / 1.012, 1 / 1.019, 1 / 1.004)
    assert classify(slow) == SAME  # type: ignore[arg-type]
    assert classify(slow, slow_resolution=0.01) == SLOW  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        classify(est, resolution=0.0)  # type: ignore[arg-type]


def test_the_direction_only_rule_is_the_stated_one() -> None:
    """FAST when the interval excludes 1 and is not inside the band: a significant change inside the band is SAME
    under both rules (docs/statistics.md states it; the code before called it FAST)."""
    at = estimate_with
    for rule in (True, False):
        assert classify(at(1.009, 1.003, 1.015), require_point_beyond_resolution=rule) == SAME  # type: ignore[arg-type]
    assert classify(at(1.015, 1.002, 1.03), require_point_beyond_resolution=False) == FAST  # type: ignore[arg-type]
    assert classify(at(1 / 1.015, 1 / 1.03, 1 / 1.002), require_point_beyond_resolution=False) == SLOW  # type: ignore[arg-type]
    assert classify(at(1 / 1.009, 1 / 1.015, 1 / 1.003), require_point_beyond_resolution=False) == SAME  # type: ignore[arg-type]


# A/A behaviour


def _run_controller(rounds: list[Round], cfg: ControllerConfig) -> tuple[str, int]:
    n = cfg.min_rounds
    while True:
        dec = decide(rounds[:n], cfg)
        if not dec.continue_:
            assert dec.classification is not None
            return dec.classification, n
        n += 1


@pytest.mark.parametrize("cv", [0.005, 0.01])
def test_aa_is_never_fast_or_slow_for_these_seeds(cv: float) -> None:
    cfg = ControllerConfig(distribution_free=False)
    results = [_run_controller(make_rounds(15, cv=cv, seed=seed), cfg)[0] for seed in range(40)]
    assert FAST not in results and SLOW not in results
    assert results.count(SAME) >= 36


def test_aa_false_positive_rate_with_drift_and_high_noise() -> None:
    """At CV 3 % the cap rarely suffices; FAST/SLOW must stay rare, AMBIGUOUS common."""
    cfg = ControllerConfig(distribution_free=False)
    rng = np.random.default_rng(123)
    outcomes = [
        _run_controller(make_rounds(15, cv=0.03, drift_per_round=0.003, seed=int(s)), cfg)[0]
        for s in rng.integers(0, 2**31, 300)
    ]
    fpr = (outcomes.count(FAST) + outcomes.count(SLOW)) / len(outcomes)
    assert fpr <= 0.10  # ~5 % expected; 0.10 is > 3 binomial SE above it
    assert outcomes.count(AMBIGUOUS) / len(outcomes) > 0.5


def test_sequential_correction_lowers_the_false_positive_rate() -> None:
    """Same data, plain 95 % at every look vs Pocock repeated intervals."""
    plain = ControllerConfig(distribution_free=False, sequential="none")
    pocock = ControllerConfig(distribution_free=False)
    assert pocock.look_confidence > plain.look_confidence == 0.95
    data = [make_rounds(15, cv=0.03, seed=s) for s in range(300)]
    fp_plain = sum(_run_controller(r, plain)[0] in (FAST, SLOW) for r in data)
    fp_pocock = sum(_run_controller(r, pocock)[0] in (FAST, SLOW) for r in data)
    assert fp_pocock < fp_plain


# controller


def test_controller_waits_for_minimum_and_for_complete_pairs() -> None:
    rounds = make_rounds(15, speedup=1.0, cv=0.02, seed=4)
    cfg = ControllerConfig()
    d1 = decide(rounds[:1], cfg)
    assert d1.continue_ and d1.classification is None and d1.estimate is None
    d4 = decide(rounds[:4], cfg)
    assert d4.continue_ and d4.estimate is not None
    d6 = decide(rounds[:6], cfg)
    assert d6.continue_ and "pair" in d6.reason
    assert cfg.looks() == (5, 7, 9, 11, 13, 15)
    assert not cfg.is_look(6) and cfg.is_look(7) and cfg.is_look(16)


def test_controller_cap_gives_ambiguous_never_a_pass() -> None:
    # round log-ratios of +-3..6 %: far too noisy to resolve 2 % in 15 rounds
    d = [v / 100 for v in (5, -4, -6, 5, 3, -5, 4, -3, -5, 6, 2, -4, 5, -6, 1)]
    rounds = [Round(1.0, math.exp(-v), o) for v, o in zip(d, alternating_orders(15))]
    cfg = ControllerConfig()
    for n in cfg.looks()[:-1]:
        assert decide(rounds[:n], cfg).continue_
    final = decide(rounds, cfg)
    assert not final.continue_
    assert final.classification == AMBIGUOUS
    assert "cap" in final.reason
    assert any("cap of 15" in w for w in final.warnings)


def test_controller_is_a_pure_function_of_the_rounds() -> None:
    rounds = make_rounds(9, speedup=1.03, cv=0.01, seed=12)
    a = decide(rounds)
    b = decide(list(rounds))
    assert a == b
    json.dumps(a.as_dict())


def test_controller_small_cap_and_config_validation() -> None:
    cfg = ControllerConfig(min_rounds=3, max_rounds=3)
    assert cfg.look_confidence == pytest.approx(0.95)
    dec = decide(make_rounds(3, speedup=1.0, cv=0.05, seed=1), cfg)
    assert not dec.continue_
    for bad in (
        dict(min_rounds=1),
        dict(max_rounds=4),
        dict(step=0),
        dict(confidence=1.2),
        dict(resolution=0.0),
        dict(sequential="obf"),
        dict(min_rounds=5.0),
    ):
        with pytest.raises(ConfigError):
            ControllerConfig(**bad)  # type: ignore[arg-type]


def test_rounds_needed_grows_with_noise_and_fails_on_a_band_edge() -> None:
    cfg = ControllerConfig()
    assert rounds_needed(0.0, 0.0, cfg) == 3
    small = rounds_needed(0.005, 0.0, cfg)
    large = rounds_needed(0.02, 0.0, cfg)
    assert small is not None and large is not None and small < large
    # a point estimate sitting just under the band edge can never be FAST nor SAME
    edge = math.log(1.02) - 1e-12
    assert rounds_needed(0.01, edge, cfg, limit=200) is None


def test_pocock_constants_match_published_values() -> None:
    # Pocock (1977), Jennison & Turnbull (2000) Table 2.1, alpha = 0.05
    assert pocock_constant([1.0]) == pytest.approx(1.960, abs=1e-3)
    assert pocock_constant([1, 2]) == pytest.approx(2.178, abs=2e-3)
    assert pocock_constant([1, 2, 3, 4, 5]) == pytest.approx(2.413, abs=2e-3)
    info = [crossover_information(n) for n in (5, 7, 9, 11, 13, 15)]
    c = pocock_constant(info)
    assert 2.3 < c < 2.6
    assert crossover_information(4) == pytest.approx(4.0)
    with pytest.raises(ConfigError):
        pocock_constant([2.0, 1.0])


# clocks


def test_throttled_rounds_and_clock_imbalance_are_flagged() -> None:
    rounds = make_rounds(5, speedup=1.05, cv=0.005, seed=2)
    clocked = [
        replace(r, base_clock_mhz=1980.0, cand_clock_mhz=1980.0 if i != 3 else 1200.0)
        for i, r in enumerate(rounds)
    ]
    est = estimate_rounds(clocked)
    assert est.throttled_rounds == (3,)
    assert any("throttled rounds [3]" in w for w in est.warnings)

    fast_clock = [replace(r, base_clock_mhz=1700.0, cand_clock_mhz=1980.0) for r in rounds]
    est2 = estimate_rounds(fast_clock)
    assert est2.throttled_rounds == ()
    assert any("different SM clocks" in w for w in est2.warnings)

    plain = estimate_rounds(rounds)
    assert not any("clock" in w for w in plain.warnings)


def test_between_round_cv_warning_says_what_to_do() -> None:
    est = estimate_rounds(make_rounds(5, cv=0.08, seed=3))
    cv_warn = [w for w in est.warnings if "between-round CV" in w]
    assert cv_warn and "exclusive node" in cv_warn[0]


# geomean


def test_geomean_of_mixed_rows_sharing_rounds() -> None:
    speedups = [1.10, 0.95, 1.00]
    rows = [
        estimate_rounds(make_rounds(7, speedup=s, cv=0.005, seed=10 + i))
        for i, s in enumerate(speedups)
    ]
    g = geomean(rows)
    assert g.rows == 3
    assert "per-round row means" in g.method
    assert g.speedup == pytest.approx(math.exp(np.mean([r.log_ratio for r in rows])))
    assert g.speedup == pytest.approx(float(np.prod(speedups)) ** (1 / 3), rel=0.01)
    assert g.lower < g.speedup < g.upper
    assert len(g.log_ratios) == 7
    # rows are classified too: the geomean must not hide the regressed row
    assert [classify(r) for r in rows] == [FAST, SLOW, SAME]
    json.dumps(g.as_dict())


def test_geomean_keeps_correlation_between_rows_that_share_rounds() -> None:
    """A round effect common to all rows must not shrink by sqrt(k)."""
    base = make_rounds(9, speedup=1.03, cv=0.01, seed=31)
    rng = np.random.default_rng(32)
    rows = []
    for _ in range(4):
        jitter = np.exp(rng.normal(0, 0.0005, 9))
        rows.append(
            estimate_rounds([replace(r, cand_ms=r.cand_ms * j) for r, j in zip(base, jitter)])
        )
    aligned = geomean(rows)
    single_width = math.log(rows[0].upper / rows[0].lower)
    assert math.log(aligned.upper / aligned.lower) > 0.8 * single_width
    # the delta method (rows treated as independent) would be about half as wide
    delta = geomean([rows[0], rows[1], rows[2], estimate_rounds(base[:7])])
    assert "delta method" in delta.method
    assert any("independent" in w for w in delta.warnings)
    assert math.log(delta.upper / delta.lower) < 0.75 * math.log(aligned.upper / aligned.lower)


def test_geomean_delta_method_dof_and_errors() -> None:
    a = estimate_rounds(make_rounds(5, speedup=1.05, cv=0.01, seed=1))
    b = estimate_rounds(make_rounds(9, speedup=1.01, cv=0.01, seed=2))
    g = geomean([a, b])
    assert min(a.dof, b.dof) <= g.dof <= a.dof + b.dof
    assert g.speedup == pytest.approx(math.sqrt(a.speedup * b.speedup))
    assert g.log_se == pytest.approx(math.sqrt(a.log_se**2 + b.log_se**2) / 2)
    single = geomean([a])
    assert single.speedup == pytest.approx(a.speedup)
    assert single.lower == pytest.approx(a.lower)
    with pytest.raises(ConfigError):
        geomean([])
    with pytest.raises(ConfigError):
        geomean([a, estimate_rounds(make_rounds(5, seed=3), confidence=0.9)])
