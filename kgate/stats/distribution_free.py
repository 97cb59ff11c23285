"""Distribution-free check of the round log-ratios (reported, not gated).

An exact randomisation interval reported beside the t-interval:

* crossover data: the two-sample relabelling test of Koch (1972) on
  ``x = d | AB`` and ``y = -d | BA`` (exchangeable under "no change" when the
  round noise is symmetric, whatever the order effect); its statistic is
  ``2 * tau_hat``; ``C(n, n_AB)`` relabellings;
* otherwise: the sign-flip test on ``d`` (``2**n`` sign patterns).

Both are inverted exactly: each non-identity relabelling ``S`` has a threshold
``theta_S`` at which it starts to beat the observed statistic, so the
one-sided p-value is monotone in the hypothesised shift and the interval's
ends are order statistics of the thresholds (for the sign flip these are the
subset means, Hartigan 1969). Beyond 65,536 relabellings a seeded Monte-Carlo
sample of 20,000 replaces enumeration.

Why it is not the gate: a randomisation or rank test is discrete. Its smallest
two-sided p-value is ``2 / N``. With 5 rounds the sign-flip (and the sign and
Wilcoxon signed-rank tests on 5 pairs) has ``N = 32``, so ``p >= 0.0625`` even
when the candidate wins every round; the crossover relabelling has
``N = C(5, 3) = 10``, ``p >= 0.2``. Neither can reach 0.05 at the 5-round
minimum, so gating on one would make the minimum pointless
(:func:`discreteness_floors` gives the table). The t-interval has no floor;
its limit is the normality of the round log-ratios, which medians of many
samples make reasonable, and which the check lets a reader audit.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from kgate.errors import ConfigError

#: Enumerate relabellings exactly up to this many; sample beyond.
EXACT_RELABELLINGS = 65_536
#: Monte-Carlo relabellings when enumeration is too large.
MC_RELABELLINGS = 20_000


# exact randomisation intervals


@dataclass(frozen=True, slots=True)
class DistributionFreeCheck:
    """An exact (or seeded Monte-Carlo) randomisation test and interval.

    ``lower``/``upper`` are speedups; ``None`` when the requested confidence is
    unattainable with this many relabellings (``p_floor > 1 - confidence``).
    ``p_value`` tests "no change" (two-sided); ``p_floor`` is the smallest
    p-value this test could ever give with this many rounds.
    """

    method: str
    relabellings: int
    exact: bool
    p_value: float
    p_floor: float
    lower: float | None
    upper: float | None
    attained_confidence: float | None
    rounds_favouring_candidate: int

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


def _invert(
    thresholds: np.ndarray, total: int, always: int, alpha: float
) -> tuple[float | None, float | None, float | None, float, float]:
    """Interval ends, attained confidence, p(0) and floor from thresholds.

    ``total`` relabellings including the identity; ``always`` of them (the
    identity and any relabelling equal to it) beat the observed statistic at
    every shift. One-sided p at shift ``theta`` is
    ``(always + #{thresholds <= theta}) / total`` (upper) and
    ``(always + #{thresholds >= theta}) / total`` (lower).
    """
    srt = np.sort(thresholds)
    k = math.floor(alpha / 2.0 * total + 1e-9) - always  # count allowed below
    if k < 0 or k >= srt.size:
        lo = hi = attained = None
    else:
        lo = float(srt[k])
        hi = float(srt[srt.size - 1 - k])
        attained = 1.0 - 2.0 * (k + always) / total
    p_up = (always + int(np.count_nonzero(srt <= 0.0))) / total
    p_dn = (always + int(np.count_nonzero(srt >= 0.0))) / total
    p = min(1.0, 2.0 * min(p_up, p_dn))
    floor = min(1.0, 2.0 * always / total)
    return lo, hi, attained, p, floor


def signflip(d: np.ndarray, alpha: float, seed: int) -> DistributionFreeCheck:
    """Sign-flip test of the mean of ``d``; thresholds are subset means."""
    n = d.size
    total = 2**n
    if total <= EXACT_RELABELLINGS:
        masks = ((np.arange(1, total)[:, None] >> np.arange(n)) & 1).astype(float)
        exact, always = True, 1
    else:
        rng = np.random.default_rng(seed)
        masks = rng.integers(0, 2, size=(MC_RELABELLINGS, n)).astype(float)
        empty = masks.sum(axis=1) == 0
        always = 1 + int(empty.sum())
        masks = masks[~empty]
        total = MC_RELABELLINGS + 1
        exact = False
    thresholds = (masks @ d) / masks.sum(axis=1)
    return _check("sign-flip on round log-ratios", d, thresholds, total, always, exact, alpha)


def _check(method: str, d: np.ndarray, thresholds: np.ndarray, total: int, always: int, exact: bool,
           alpha: float) -> DistributionFreeCheck:
    """Invert a relabelling distribution into a p-value and an interval on the speedup scale."""
    lo, hi, att, p, floor = _invert(thresholds, total, always, alpha)
    return DistributionFreeCheck(
        method=method,
        relabellings=total,
        exact=exact,
        p_value=p,
        p_floor=floor,
        lower=None if lo is None else math.exp(lo),
        upper=None if hi is None else math.exp(hi),
        attained_confidence=att,
        rounds_favouring_candidate=int(np.count_nonzero(d > 0)),
    )


def relabel(d: np.ndarray, is_ab: np.ndarray, alpha: float, seed: int) -> DistributionFreeCheck:
    """Koch's two-sample relabelling test for the crossover effect."""
    x = d[is_ab]
    y = -d[~is_ab]
    n1, n2 = x.size, y.size
    n = n1 + n2
    z = np.concatenate([x, y])
    from_y = np.concatenate([np.zeros(n1, bool), np.ones(n2, bool)])
    total = math.comb(n, n1)
    if total <= EXACT_RELABELLINGS:
        idx = np.array(list(itertools.combinations(range(n), n1)), dtype=int)
        exact = True
    else:
        rng = np.random.default_rng(seed)
        idx = np.argsort(rng.random((MC_RELABELLINGS, n)), axis=1)[:, :n1]
        total = MC_RELABELLINGS + 1
        exact = False
    chosen = np.zeros((idx.shape[0], n), bool)
    np.put_along_axis(chosen, idx, True, axis=1)
    sum_all = z.sum()
    sum_x = chosen.astype(float) @ z
    stat = sum_x / n1 - (sum_all - sum_x) / n2
    k = (chosen & from_y).sum(axis=1)
    a0 = x.mean() - y.mean()
    moved = k > 0
    always = int(np.count_nonzero(~moved)) + (0 if exact else 1)
    thresholds = (a0 - stat[moved]) / (2.0 * k[moved] * (1.0 / n1 + 1.0 / n2))
    return _check("crossover relabelling (Koch) on AB vs -BA log-ratios", d, thresholds, total, always, exact, alpha)


def discreteness_floors(n: int) -> dict[str, float | int]:
    """Smallest attainable two-sided p-values with ``n`` rounds per arm.

    * ``sign_or_signed_rank``: sign test, Wilcoxon signed-rank and sign-flip
      on ``n`` pairs: ``2 / 2**n``;
    * ``mann_whitney``: Mann-Whitney U, ``n`` vs ``n``: ``2 / C(2n, n)``;
    * ``crossover_relabelling``: Koch's test with ``ceil(n/2)`` AB and
      ``floor(n/2)`` BA rounds: ``2 / C(n, ceil(n/2))``.

    These are exact for continuous data (no ties). Test: tests/test_stats.py
    checks them against the published table. Limits: they say when a test
    *cannot* reject, not how much power it has when it can.
    """
    if n < 1:
        raise ConfigError(f"n: expected >= 1, got {n}")
    return {
        "rounds": n,
        "sign_or_signed_rank": min(1.0, 2.0 / 2**n),
        "mann_whitney": min(1.0, 2.0 / math.comb(2 * n, n)),
        "crossover_relabelling": min(1.0, 2.0 / math.comb(n, (n + 1) // 2)),
    }
