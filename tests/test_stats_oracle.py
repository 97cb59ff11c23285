"""scipy as an independent oracle for kgate.stats' intervals and randomisation tests.

SYNTHETIC DATA: seeded normal log-ratios. kgate computes its t intervals and
its exact relabelling and sign-flip tests itself; here the same quantities
come from scipy.stats (``ttest_ind``, ``ttest_1samp``, ``permutation_test``
with exact enumeration), which shares no code with kgate.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from kgate import stats
from kgate.stats import AB, Round

LEVELS = (0.95, 0.9835165777670722)


def rounds(d: np.ndarray, orders: tuple[str, ...], blocks: list[int] | None = None) -> list[Round]:
    return [Round(1.0, math.exp(-v), o, block=None if blocks is None else blocks[i])
            for i, (v, o) in enumerate(zip(d, orders))]


def diff_of_means(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


@pytest.mark.parametrize("n", [3, 5, 8, 15])
@pytest.mark.parametrize("level", LEVELS)
def test_the_crossover_interval_is_scipys_pooled_two_sample_t(n: int, level: float) -> None:
    """tau = (mean(d|AB) + mean(d|BA)) / 2 is half the difference of means of x = d|AB and y = -d|BA, and the pooled
    within-order sd is the pooled two-sample sd: the interval is scipy's equal-variance t interval, halved."""
    rng = np.random.default_rng(n)
    orders = stats.alternating_orders(n)
    d = rng.normal(0.02, 0.01, n) + np.where(np.array(orders) == AB, 0.004, -0.004)  # with an order effect
    est = stats.estimate_rounds(rounds(d, orders), level, distribution_free=False)
    is_ab = np.array([o == AB for o in orders])
    ci = sps.ttest_ind(d[is_ab], -d[~is_ab], equal_var=True).confidence_interval(level)
    assert est.method == "crossover-t"
    assert (math.log(est.lower), math.log(est.upper)) == pytest.approx((ci.low / 2, ci.high / 2), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("level", LEVELS)
def test_the_paired_interval_and_the_per_pair_interval_are_scipys_one_sample_t(level: float) -> None:
    """Rounds all in one order: the paired t. Worker pairs of one AB and one BA round each: the one-sample t over
    the pairs' means (the order effect cancels inside each pair)."""
    rng = np.random.default_rng(7)
    d = rng.normal(0.01, 0.01, 7)
    one = stats.estimate_rounds(rounds(d, (AB,) * 7), level, distribution_free=False)
    ci = sps.ttest_1samp(d, 0.0).confidence_interval(level)
    assert one.method == "paired-t" and (math.log(one.lower), math.log(one.upper)) == pytest.approx((ci.low, ci.high))
    d = rng.normal(0.01, 0.01, 12) + rng.normal(0.0, 0.005, 6).repeat(2)  # a pair offset shared by its 2 rounds
    orders = stats.alternating_orders(12)
    est = stats.estimate_rounds(rounds(d, orders, [i // 2 for i in range(12)]), level, distribution_free=False)
    means = d.reshape(6, 2).mean(axis=1)
    ci = sps.ttest_1samp(means, 0.0).confidence_interval(level)
    assert est.dof == 5 and (math.log(est.lower), math.log(est.upper)) == pytest.approx((ci.low, ci.high))
    # the geomean of two rows timed by the same pairs: the one-sample t over the pairs' means of the row means
    e2 = rng.normal(-0.01, 0.01, 12)
    g = stats.geomean([est, stats.estimate_rounds(rounds(e2, orders, [i // 2 for i in range(12)]), level,
                                                  distribution_free=False)])
    ci = sps.ttest_1samp(((d + e2) / 2).reshape(6, 2).mean(axis=1), 0.0).confidence_interval(level)
    assert (math.log(g.lower), math.log(g.upper)) == pytest.approx((ci.low, ci.high))


def test_the_sign_flip_test_is_scipys_exact_permutation_test_and_its_interval_inverts_it() -> None:
    rng = np.random.default_rng(9)
    d = rng.normal(0.012, 0.01, 9)
    est = stats.paired_ratio(np.exp(d), np.ones(9), orders=[AB] * 9)
    check = est.distribution_free
    assert check is not None and check.exact and check.lower is not None and check.upper is not None

    def p(data: np.ndarray, alternative: str) -> float:
        return sps.permutation_test((data,), np.mean, permutation_type="samples", n_resamples=np.inf,
                                    alternative=alternative, vectorized=True).pvalue

    assert check.p_value == pytest.approx(p(d, "two-sided"))
    a = (1 - check.attained_confidence) / 2 + 1e-12  # type: ignore[operator]
    lo, hi = math.log(check.lower), math.log(check.upper)
    assert p(d - (lo - 1e-7), "greater") <= a < p(d - (lo + 1e-7), "greater")
    assert p(d - (hi + 1e-7), "less") <= a < p(d - (hi - 1e-7), "less")


def test_the_crossover_relabelling_is_scipys_exact_two_sample_permutation_test_and_its_interval_inverts_it() -> None:
    rng = np.random.default_rng(10)
    orders = stats.alternating_orders(11)
    d = rng.normal(0.015, 0.01, 11)
    est = stats.estimate_rounds(rounds(d, orders))
    check = est.distribution_free
    assert check is not None and check.exact and check.lower is not None and check.upper is not None
    is_ab = np.array([o == AB for o in orders])
    x, y = d[is_ab], -d[~is_ab]

    def p(theta: float, alternative: str) -> float:
        # the speedup shifted by theta (log): x - theta, y + theta
        return sps.permutation_test((x - theta, y + theta), diff_of_means, permutation_type="independent",
                                    n_resamples=np.inf, alternative=alternative, vectorized=True).pvalue

    assert check.p_value == pytest.approx(p(0.0, "two-sided"))
    a = (1 - check.attained_confidence) / 2 + 1e-12  # type: ignore[operator]
    lo, hi = math.log(check.lower), math.log(check.upper)
    assert p(lo - 1e-7, "greater") <= a < p(lo + 1e-7, "greater")
    assert p(hi + 1e-7, "less") <= a < p(hi - 1e-7, "less")


def test_with_worker_pairs_the_sign_flip_runs_on_the_pairs_means() -> None:
    rng = np.random.default_rng(12)
    orders = stats.alternating_orders(10)
    d = rng.normal(0.01, 0.01, 10)
    est = stats.estimate_rounds(rounds(d, orders, [i // 2 for i in range(10)]))
    check = est.distribution_free
    assert check is not None and check.relabellings == 2**5
    means = d.reshape(5, 2).mean(axis=1)
    ref = sps.permutation_test((means,), np.mean, permutation_type="samples", n_resamples=np.inf, vectorized=True)
    assert check.p_value == pytest.approx(ref.pvalue)
