"""Statistics of the interleaved A/B benchmark.

Vocabulary
----------
* **Arm A** is the baseline, **arm B** the candidate.
* A **round** measures both arms back to back on the same GPU and reduces each
  arm's samples to one statistic, the round median (``Round.from_samples``).
  Rounds alternate their order: round 0 is ``AB`` (baseline first), round 1 is
  ``BA``, and so on.
* The per-round **log-ratio** is ``d_i = ln(base_i / cand_i)``.
* **Speedup** is ``base / cand``: ``> 1`` means the candidate is faster,
  ``< 1`` slower. Every ratio in this module (point, interval, geomean) uses
  this convention.

Method (the gate)
-----------------
The rounds form a two-sequence crossover design (AB/BA). Model, in log space::

    d_i = tau + o_i * w + e_i,    o_i = +1 for AB rounds, -1 for BA rounds

``tau`` is the log speedup, ``w`` the *order effect* (how much faster the arm
measured second in a round looks: clock ramp, warm caches, and the within-round
part of any linear drift), ``e_i`` round noise. Pairing the two arms of one
round removes everything the round shares (slow drift across rounds, a hot or
cold GPU that round); the balanced estimator::

    tau_hat = (mean(d | AB) + mean(d | BA)) / 2

removes ``w`` exactly, for any number of rounds, including the odd counts
(5, 7, ..., 15) that the adaptive controller produces. A linear drift that
slows everything by ``g`` (log) per round makes the second arm of each round
``g/2`` slower: ``d`` gains ``-g/2`` in AB rounds and ``+g/2`` in BA rounds,
i.e. ``w = -g/2``, which cancels. The plain mean of ``d`` would keep a bias
``w / n`` at odd ``n``.

The interval is a Student-t interval on ``tau_hat`` with the pooled
within-order standard deviation ``s_p`` and ``n - 2`` degrees of freedom::

    se = s_p / 2 * sqrt(1/n_AB + 1/n_BA)
    speedup in exp(tau_hat -/+ t_{n-2, 1-alpha/2} * se)

This is the textbook AB/BA crossover analysis (Hills & Armitage, 1979). With
only two rounds, or rounds all in one order (not interleaved), the order
effect is not estimable and the plain paired mean with ``n - 1`` degrees of
freedom is used instead, with a warning.

Distribution-free check (reported, not gated)
---------------------------------------------
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

Classification
--------------
See :func:`classify`. FAST/SLOW need the interval to exclude 1 *and* the point
estimate to reach the resolution; SAME needs the whole interval inside the
resolution band; everything else is AMBIGUOUS.

Adaptive rounds
---------------
See :func:`decide`: a pure function of the recorded rounds, so a coordinator
can checkpoint rounds and resume. Start at ``min_rounds`` (5), look after each
further pair of rounds (7, 9, ...), stop at the first classification; at
``max_rounds`` (15) an unclassified row is AMBIGUOUS, never a pass.

Looking six times at a plain 95 % interval and stopping at the first decisive
one would call an A/A comparison FAST or SLOW about 13 % of the time when the
noise is high (measured). The controller therefore uses *repeated confidence
intervals* (Jennison & Turnbull, 1989): every look's interval is built at the
nominal level of Pocock's (1977) boundary for the actual look schedule
(:func:`pocock_constant`; 98.35 % per look for 95 % over looks at
5, 7, ..., 15), so all intervals cover the true speedup simultaneously with
about 95 % probability, and any decision read off them inherits that.
``ControllerConfig(sequential="none")`` turns this off.

Limits
------
* Rounds are assumed independent given the order: a drift that is not linear
  within a round (a step between the two arms) is not removed.
* The t-interval assumes roughly normal round log-ratios; at 5 rounds one wild
  round inflates ``s_p`` (conservative) but a skewed noise can bias one side.
* The between-round CV includes any drift across rounds; the pairing removes
  it from the estimate, not from the reported CV.
* The Pocock level is exact for normal statistics with known variance; with
  t statistics at 3 to 13 degrees of freedom the simulated A/A rate is about
  5 %, slightly above it at very high noise (docs/statistics.md).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import stats as _sps
from scipy.optimize import brentq as _brentq
from scipy.special import ndtr as _ndtr

from kgate.errors import ConfigError

__all__ = [
    "AB",
    "BA",
    "FAST",
    "SAME",
    "SLOW",
    "AMBIGUOUS",
    "Summary",
    "summarize",
    "Round",
    "DistributionFreeCheck",
    "RatioEstimate",
    "paired_ratio",
    "estimate_rounds",
    "classify",
    "ControllerConfig",
    "Decision",
    "decide",
    "rounds_needed",
    "geomean",
    "discreteness_floors",
    "pocock_constant",
    "crossover_information",
    "alternating_orders",
]

AB = "AB"
BA = "BA"
FAST = "FAST"
SAME = "SAME"
SLOW = "SLOW"
AMBIGUOUS = "AMBIGUOUS"

Order = Literal["AB", "BA"]

#: Between-round CV above which a warning is raised.
CV_WARN = 0.05
#: Mean SM-clock difference between arms (log) above which a warning is raised.
CLOCK_SKEW_WARN = 0.01
#: Enumerate relabellings exactly up to this many; sample beyond.
EXACT_RELABELLINGS = 65_536
#: Monte-Carlo relabellings when enumeration is too large.
MC_RELABELLINGS = 20_000


# validation helpers


def _as_positive_array(values: Sequence[float], name: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: expected a sequence of numbers ({exc})") from exc
    if arr.ndim != 1:
        raise ConfigError(f"{name}: expected a flat sequence, got shape {arr.shape}")
    if arr.size and not np.all(np.isfinite(arr)):
        raise ConfigError(f"{name}: contains NaN or infinity")
    if arr.size and np.any(arr <= 0):
        raise ConfigError(f"{name}: times must be > 0 ms")
    return arr


def _check_confidence(confidence: float) -> float:
    if not (isinstance(confidence, (int, float)) and 0.5 <= float(confidence) < 1.0):
        raise ConfigError(f"confidence: expected a number in [0.5, 1), got {confidence!r}")
    return float(confidence)


def _check_resolution(value: float, name: str) -> float:
    if not (isinstance(value, (int, float)) and 0.0 < float(value) < 1.0):
        raise ConfigError(f"{name}: expected a fraction in (0, 1), got {value!r}")
    return float(value)


def alternating_orders(n: int, first: Order = AB) -> tuple[str, ...]:
    """The order sequence AB, BA, AB, ... (or starting with BA) for ``n`` rounds."""
    if first not in (AB, BA):
        raise ConfigError(f"first: expected 'AB' or 'BA', got {first!r}")
    other = BA if first == AB else AB
    return tuple(first if i % 2 == 0 else other for i in range(n))


def _check_orders(orders: Sequence[str] | None, n: int) -> tuple[str, ...]:
    if orders is None:
        return alternating_orders(n)
    out = tuple(orders)
    if len(out) != n:
        raise ConfigError(f"orders: {len(out)} entries for {n} rounds")
    bad = sorted({o for o in out if o not in (AB, BA)})
    if bad:
        raise ConfigError(f"orders: expected 'AB' or 'BA', got {bad}")
    return out


@lru_cache(maxsize=4096)
def _t_quantile(dof: int, confidence: float) -> float:
    return float(_sps.t.ppf(0.5 + confidence / 2.0, dof))


def _t_quantile_real(dof: float, confidence: float) -> float:
    if float(dof).is_integer():
        return _t_quantile(int(dof), confidence)
    return float(_sps.t.ppf(0.5 + confidence / 2.0, dof))


# per-arm summary


@dataclass(frozen=True, slots=True)
class Summary:
    """Descriptive statistics of one arm's samples, in milliseconds.

    Quantiles use linear interpolation between order statistics (Hyndman &
    Fan type 7, numpy's default): the p-quantile sits at 0-based position
    ``(n - 1) * p`` of the sorted samples. ``std_ms`` is the sample standard
    deviation (``ddof = 1``) and is ``None`` for a single sample.
    """

    n: int
    median_ms: float
    mean_ms: float
    std_ms: float | None
    min_ms: float
    max_ms: float
    p10_ms: float
    p20_ms: float
    p80_ms: float
    p90_ms: float
    cv: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        """The fields as a JSON-ready dict (keys carry their unit)."""
        return {name: getattr(self, name) for name in self.__slots__}


def summarize(samples_ms: Sequence[float]) -> Summary:
    """Summarise one arm's timing samples (ms).

    Method: median, mean, sample std (ddof=1), min, max and the 10/20/80/90th
    percentiles by linear interpolation (type 7); ``cv = std / mean``.
    Test: tests/test_stats.py checks them against hand-computed values.
    Limits: no outlier removal; the median is the robust centre, the rest are
    reported as they are. Raises ``ConfigError`` on an empty, non-finite or
    non-positive sample set.
    """
    arr = _as_positive_array(samples_ms, "samples_ms")
    if arr.size == 0:
        raise ConfigError("samples_ms: no samples")
    q = np.quantile(arr, [0.1, 0.2, 0.5, 0.8, 0.9], method="linear")
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if arr.size > 1 else None
    return Summary(
        n=int(arr.size),
        median_ms=float(q[2]),
        mean_ms=mean,
        std_ms=std,
        min_ms=float(arr.min()),
        max_ms=float(arr.max()),
        p10_ms=float(q[0]),
        p20_ms=float(q[1]),
        p80_ms=float(q[3]),
        p90_ms=float(q[4]),
        cv=(std / mean) if std is not None else None,
    )


# rounds


@dataclass(frozen=True, slots=True)
class Round:
    """One measured round: each arm's round statistic (ms) and the order.

    ``order`` is ``"AB"`` when the baseline ran first. The clock fields are
    optional: the SM clock (MHz) seen while each arm ran (for example the
    mean of NVML readings), used only to flag throttling and clock imbalance.
    """

    base_ms: float
    cand_ms: float
    order: str
    base_clock_mhz: float | None = None
    cand_clock_mhz: float | None = None

    @classmethod
    def from_samples(
        cls,
        base_samples_ms: Sequence[float],
        cand_samples_ms: Sequence[float],
        order: str,
        base_clock_mhz: float | None = None,
        cand_clock_mhz: float | None = None,
    ) -> Round:
        """A round whose statistic per arm is the median of its samples."""
        return cls(
            base_ms=summarize(base_samples_ms).median_ms,
            cand_ms=summarize(cand_samples_ms).median_ms,
            order=order,
            base_clock_mhz=base_clock_mhz,
            cand_clock_mhz=cand_clock_mhz,
        )

    def as_dict(self) -> dict[str, float | str | None]:
        return {name: getattr(self, name) for name in self.__slots__}


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


def _signflip(d: np.ndarray, alpha: float, seed: int) -> DistributionFreeCheck:
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


def _relabel(d: np.ndarray, is_ab: np.ndarray, alpha: float, seed: int) -> DistributionFreeCheck:
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


def _crossing_probability(c: float, fractions: np.ndarray, grid: int = 301) -> float:
    """P(|Z_k| >= c at some look) for a standardised score process.

    ``S_k = Z_k * sqrt(t_k)`` is Brownian motion in information time ``t``;
    the density of ``S`` on the continuation region is carried from look to
    look by numerical integration (trapezoid rule on ``grid`` points), the
    recursion of Armitage, McPherson & Rowe (1969).
    """
    t0 = float(fractions[0])
    b = c * math.sqrt(t0)
    x = np.linspace(-b, b, grid)
    w = np.full(grid, 2.0 * b / (grid - 1))
    w[0] *= 0.5
    w[-1] *= 0.5
    f = np.exp(-0.5 * x * x / t0) / math.sqrt(2.0 * math.pi * t0)
    p = 2.0 * float(_ndtr(-c))
    for k in range(1, fractions.size):
        sd = math.sqrt(float(fractions[k] - fractions[k - 1]))
        bk = c * math.sqrt(float(fractions[k]))
        fw = f * w
        p += float(fw @ (_ndtr((x - bk) / sd) + _ndtr((-bk - x) / sd)))
        xn = np.linspace(-bk, bk, grid)
        wn = np.full(grid, 2.0 * bk / (grid - 1))
        wn[0] *= 0.5
        wn[-1] *= 0.5
        z = (xn[:, None] - x[None, :]) / sd
        f = (np.exp(-0.5 * z * z) / (sd * math.sqrt(2.0 * math.pi))) @ fw
        x, w = xn, wn
    return p


@lru_cache(maxsize=256)
def _pocock_cached(fractions: tuple[float, ...], alpha: float) -> float:
    arr = np.asarray(fractions, dtype=float)
    if arr.size == 1:
        return float(_sps.norm.isf(alpha / 2.0))
    return float(_brentq(lambda c: _crossing_probability(c, arr) - alpha, 1.0, 8.0, xtol=1e-7))


def pocock_constant(information: Sequence[float], alpha: float = 0.05) -> float:
    """Constant ``c`` with ``P(max_k |Z_k| >= c) = alpha`` over the looks.

    ``information`` is the statistical information at each look (any scale,
    increasing). Method: Pocock's (1977) repeated-significance boundary for
    the given, possibly unequal, look spacing, by recursive numerical
    integration. Test: tests/test_stats.py reproduces the published constants
    for equally spaced looks (K=2: 2.178, K=5: 2.413). Limits: normal
    theory; the controller maps ``c`` to a per-look nominal level and uses t
    quantiles at that level, which is approximate at 3 to 13 degrees of
    freedom (the simulation measures the result).
    """
    info = np.asarray(information, dtype=float)
    if info.ndim != 1 or info.size == 0 or not np.all(np.isfinite(info)) or np.any(info <= 0):
        raise ConfigError("information: expected positive finite values")
    if np.any(np.diff(info) <= 0):
        raise ConfigError("information: expected strictly increasing values")
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha: expected (0, 1), got {alpha!r}")
    fractions = tuple(round(float(v), 12) for v in info / info[-1])
    return _pocock_cached(fractions, float(alpha))


def crossover_information(n: int) -> float:
    """Information of the balanced estimator with ``n`` alternating rounds.

    The inverse of ``(1/ceil(n/2) + 1/floor(n/2)) / 4``, in units of the
    per-round log-ratio variance (``n`` for even ``n``).
    """
    if n < 2:
        raise ConfigError(f"n: expected >= 2, got {n}")
    return 4.0 / (1.0 / ((n + 1) // 2) + 1.0 / (n // 2))


# the paired estimate


@dataclass(frozen=True, slots=True)
class RatioEstimate:
    """A speedup (``base / cand``; > 1 = candidate faster) with its interval.

    ``log_ratio`` and ``log_se`` are in natural-log units; ``speedup``,
    ``lower``, ``upper`` are ``exp`` of the point and the t-interval ends.
    ``order_effect`` is how much faster the arm measured second in a round
    appears (a ratio; ``None`` when not estimable). ``log_ratios`` and
    ``orders`` are the rounds behind the estimate (per-round row means for a
    geomean over aligned rows; empty for a delta-method geomean).
    """

    speedup: float
    lower: float
    upper: float
    confidence: float
    log_ratio: float
    log_se: float
    dof: float
    n: int
    method: str
    sd_log: float | None
    order_effect: float | None
    base_cv: float | None
    cand_cv: float | None
    log_ratios: tuple[float, ...]
    orders: tuple[str, ...]
    distribution_free: DistributionFreeCheck | None
    throttled_rounds: tuple[int, ...] = ()
    rows: int = 1
    warnings: tuple[str, ...] = field(default=())

    @property
    def log_lower(self) -> float:
        return math.log(self.lower)

    @property
    def log_upper(self) -> float:
        return math.log(self.upper)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready dict; the distribution-free check is nested."""
        out: dict[str, object] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, DistributionFreeCheck):
                value = value.as_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out


def _crossover_core(
    d: np.ndarray, is_ab: np.ndarray
) -> tuple[float, float, float, float | None, float | None, str]:
    """Point, se, dof, sd, order effect (log) and method name."""
    n = d.size
    n1 = int(is_ab.sum())
    n2 = n - n1
    if n >= 3 and n1 >= 1 and n2 >= 1:
        m1 = float(d[is_ab].mean())
        m2 = float(d[~is_ab].mean())
        ss = float(((d[is_ab] - m1) ** 2).sum() + ((d[~is_ab] - m2) ** 2).sum())
        dof = n - 2
        sd = math.sqrt(ss / dof)
        se = 0.5 * sd * math.sqrt(1.0 / n1 + 1.0 / n2)
        return 0.5 * (m1 + m2), se, float(dof), sd, 0.5 * (m1 - m2), "crossover-t"
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    return mean, sd / math.sqrt(n), float(n - 1), sd, None, "paired-t"


def _clock_checks(
    rounds_base_mhz: Sequence[float | None] | None,
    rounds_cand_mhz: Sequence[float | None] | None,
    n: int,
    reference_mhz: float | None,
    throttle_fraction: float,
) -> tuple[tuple[int, ...], list[str]]:
    if rounds_base_mhz is None and rounds_cand_mhz is None:
        return (), []
    base = [None] * n if rounds_base_mhz is None else list(rounds_base_mhz)
    cand = [None] * n if rounds_cand_mhz is None else list(rounds_cand_mhz)
    if len(base) != n or len(cand) != n:
        raise ConfigError(f"clock data: expected {n} entries per arm")
    values = [v for v in base + cand if v is not None]
    if not values:
        return (), []
    for v in values:
        if not (math.isfinite(v) and v > 0):
            raise ConfigError(f"clock data: expected MHz > 0, got {v!r}")
    if not (0.0 < throttle_fraction < 1.0):
        raise ConfigError(f"throttle_fraction: expected (0, 1), got {throttle_fraction!r}")
    ref = float(reference_mhz) if reference_mhz is not None else max(values)
    limit = throttle_fraction * ref
    throttled = tuple(
        i
        for i in range(n)
        if (base[i] is not None and base[i] < limit) or (cand[i] is not None and cand[i] < limit)
    )
    warns: list[str] = []
    if throttled:
        warns.append(
            f"throttled rounds {list(throttled)}: SM clock below {throttle_fraction:.0%} of "
            f"{ref:.0f} MHz; check cooling/power limits or rerun these rounds"
        )
    logs = [math.log(b / c) for b, c in zip(base, cand) if b is not None and c is not None]
    if logs:
        skew = float(np.mean(logs))
        if abs(skew) > CLOCK_SKEW_WARN:
            higher = "baseline" if skew > 0 else "candidate"
            warns.append(
                f"arms ran at different SM clocks (the {higher}'s was "
                f"{math.expm1(abs(skew)):.1%} higher on average): part of the speedup may be "
                "clock, not code; compare in cycle space (time x clock) or lock clocks"
            )
    return throttled, warns


def paired_ratio(
    base_rounds_ms: Sequence[float],
    cand_rounds_ms: Sequence[float],
    confidence: float = 0.95,
    *,
    orders: Sequence[str] | None = None,
    base_clock_mhz: Sequence[float | None] | None = None,
    cand_clock_mhz: Sequence[float | None] | None = None,
    reference_clock_mhz: float | None = None,
    throttle_fraction: float = 0.75,
    distribution_free: bool = True,
    seed: int = 0,
) -> RatioEstimate:
    """Paired speedup of the candidate over the baseline from round statistics.

    ``base_rounds_ms[i]`` and ``cand_rounds_ms[i]`` are round ``i``'s statistic
    (the round median) of each arm, measured back to back; ``orders[i]`` is
    ``"AB"`` (baseline first) or ``"BA"``, default alternating from ``"AB"``.

    Method: crossover estimator on ``d_i = ln(base_i / cand_i)`` with a Student
    t interval (``n - 2`` dof), see the module docstring; paired mean with
    ``n - 1`` dof when only two rounds or one order are given. With
    ``distribution_free`` the exact randomisation interval is computed too
    (seeded only when it must be sampled).

    Quality warnings (each says what to do): between-round CV above 5 %, fewer
    than 5 rounds, a significant order effect, rounds all in one order,
    identical log-ratios (timer too coarse), and, with clock data, throttled
    rounds (a clock below ``throttle_fraction`` of ``reference_clock_mhz``,
    default the highest clock seen; nvbench's 75 % rule) and a mean SM-clock
    difference between arms above 1 %. Throttled rounds are flagged, not
    dropped: dropping one would unbalance the AB/BA design.

    Test: tests/test_stats.py (FAST/SLOW/SAME cases, drift cancellation, the
    exact intervals against brute force). Limits: see the module docstring.
    Raises ``ConfigError`` for fewer than 2 rounds, unequal lengths, or
    non-positive/non-finite times.
    """
    conf = _check_confidence(confidence)
    base = _as_positive_array(base_rounds_ms, "base_rounds_ms")
    cand = _as_positive_array(cand_rounds_ms, "cand_rounds_ms")
    if base.size != cand.size:
        raise ConfigError(
            f"rounds: {base.size} baseline vs {cand.size} candidate values; rounds must be paired"
        )
    n = int(base.size)
    if n < 2:
        raise ConfigError(f"rounds: need at least 2 paired rounds, got {n}")
    ords = _check_orders(orders, n)
    d = np.log(base) - np.log(cand)
    is_ab = np.array([o == AB for o in ords])
    point, se, dof, sd, w, method = _crossover_core(d, is_ab)
    tq = _t_quantile(int(dof), conf)
    warns: list[str] = []

    base_cv = float(base.std(ddof=1) / base.mean())
    cand_cv = float(cand.std(ddof=1) / cand.mean())
    worst = max(base_cv, cand_cv)
    if worst > CV_WARN:
        warns.append(
            f"between-round CV is {worst:.1%} (> {CV_WARN:.0%}): the GPU is shared, throttling "
            "or the rounds are too short; use an exclusive node, lengthen rounds, lock clocks "
            "if permitted"
        )
    if n < 5:
        warns.append(f"only {n} rounds: run at least 5 interleaved rounds")
    if method == "paired-t":
        if is_ab.all() or (~is_ab).all():
            warns.append(
                "all rounds ran in one order: the order effect is confounded with the "
                "speedup; alternate AB/BA"
            )
    elif w is not None and se > 0 and abs(w) > tq * se:
        warns.append(
            f"order effect: the arm measured second in a round looks "
            f"{math.expm1(w):+.1%} faster; the estimate removes it, but warm both arms "
            "after switching (untimed calls) to regain precision"
        )
    if sd is not None and sd < 1e-9:
        warns.append(
            "every round gave the same log-ratio: the interval has zero width; check that the "
            "timer resolution is much finer than the kernel time"
        )

    throttled, clock_warns = _clock_checks(
        base_clock_mhz, cand_clock_mhz, n, reference_clock_mhz, throttle_fraction
    )
    warns.extend(clock_warns)

    check: DistributionFreeCheck | None = None
    if distribution_free:
        alpha = 1.0 - conf
        if method == "crossover-t":
            check = _relabel(d, is_ab, alpha, seed)
        else:
            check = _signflip(d, alpha, seed)

    return RatioEstimate(
        speedup=math.exp(point),
        lower=math.exp(point - tq * se),
        upper=math.exp(point + tq * se),
        confidence=conf,
        log_ratio=point,
        log_se=se,
        dof=dof,
        n=n,
        method=method,
        sd_log=sd,
        order_effect=None if w is None else math.exp(w),
        base_cv=base_cv,
        cand_cv=cand_cv,
        log_ratios=tuple(float(v) for v in d),
        orders=ords,
        distribution_free=check,
        throttled_rounds=throttled,
        warnings=tuple(warns),
    )


def estimate_rounds(
    rounds: Sequence[Round],
    confidence: float = 0.95,
    *,
    reference_clock_mhz: float | None = None,
    throttle_fraction: float = 0.75,
    distribution_free: bool = True,
    seed: int = 0,
) -> RatioEstimate:
    """:func:`paired_ratio` over recorded :class:`Round` objects."""
    rounds = list(rounds)
    for i, r in enumerate(rounds):
        if not isinstance(r, Round):
            raise ConfigError(f"rounds[{i}]: expected a Round, got {type(r).__name__}")
    has_clock = any(r.base_clock_mhz is not None or r.cand_clock_mhz is not None for r in rounds)
    return paired_ratio(
        [r.base_ms for r in rounds],
        [r.cand_ms for r in rounds],
        confidence,
        orders=[r.order for r in rounds],
        base_clock_mhz=[r.base_clock_mhz for r in rounds] if has_clock else None,
        cand_clock_mhz=[r.cand_clock_mhz for r in rounds] if has_clock else None,
        reference_clock_mhz=reference_clock_mhz,
        throttle_fraction=throttle_fraction,
        distribution_free=distribution_free,
        seed=seed,
    )


# classification


def _classify_log(
    point: float,
    lo: float,
    hi: float,
    fast_band: float,
    slow_band: float,
    require_point: bool,
) -> str:
    if lo > 0.0 and (not require_point or point >= fast_band):
        return FAST
    if hi < 0.0 and (not require_point or point <= -slow_band):
        return SLOW
    if lo >= -slow_band and hi <= fast_band:
        return SAME
    return AMBIGUOUS


def classify(
    est: RatioEstimate,
    resolution: float = 0.02,
    slow_resolution: float | None = None,
    *,
    require_point_beyond_resolution: bool = True,
) -> str:
    """FAST, SAME, SLOW or AMBIGUOUS from a speedup interval.

    With ``r = resolution`` and ``r_s = slow_resolution`` (default ``r``), the
    *resolution band* is ``[1/(1+r_s), 1+r]`` (symmetric in log space when
    ``r_s = r``). With ``[lo, hi]`` the interval and ``s`` the point:

    * FAST: ``lo > 1`` (the candidate is faster at the stated confidence)
      **and** ``s >= 1 + r`` (the best estimate reaches the resolution);
    * SLOW: ``hi < 1`` and ``s <= 1/(1+r_s)``;
    * SAME: ``1/(1+r_s) <= lo`` and ``hi <= 1 + r``: any change is smaller
      than the resolution (it may still be significant, e.g. [1.003, 1.015]);
    * AMBIGUOUS: anything else (the interval straddles a band edge).

    The three decisive classes are mutually exclusive, and an A/A comparison
    converges to SAME as rounds shrink the interval. The point rule means a
    true speedup of exactly ``r`` is called FAST only about half the time
    (the rest stays AMBIGUOUS): set the resolution below the effect the
    hypothesis claims. ``require_point_beyond_resolution=False`` gives the
    direction-only rule (FAST when ``lo > 1`` and the interval is not inside
    the band), which has more power and a higher false-positive rate.

    Test: tests/test_stats.py (each branch, A/A rate). Limits: the rule is
    only as good as the interval's coverage.
    """
    res = _check_resolution(resolution, "resolution")
    sres = res if slow_resolution is None else _check_resolution(slow_resolution, "slow_resolution")
    return _classify_log(
        est.log_ratio,
        math.log(est.lower),
        math.log(est.upper),
        math.log1p(res),
        math.log1p(sres),
        require_point_beyond_resolution,
    )


# adaptive controller


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Settings of the adaptive round controller.

    ``min_rounds`` rounds first, then a look after every ``step`` further
    rounds (2 keeps AB/BA balanced) until ``max_rounds`` (always a look).

    ``confidence`` is the *family* confidence over all looks. With
    ``sequential="pocock"`` (default) each look's interval is a repeated
    confidence interval (Jennison & Turnbull, 1989): its nominal level
    :attr:`look_confidence` comes from the Pocock constant for this look
    schedule (98.6 % per look for 95 % over looks at 5, 7, ..., 15), so that
    the chance that *any* look's interval misses the true speedup stays about
    ``1 - confidence`` however early the controller stops. ``"none"`` uses
    ``confidence`` at every look (more power, and a false FAST/SLOW rate that
    grows with the number of looks).
    """

    min_rounds: int = 5
    max_rounds: int = 15
    step: int = 2
    confidence: float = 0.95
    resolution: float = 0.02
    slow_resolution: float | None = None
    require_point_beyond_resolution: bool = True
    distribution_free: bool = True
    sequential: str = "pocock"
    reference_clock_mhz: float | None = None
    throttle_fraction: float = 0.75
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("min_rounds", "max_rounds", "step"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{name}: expected an integer, got {value!r}")
        if self.min_rounds < 2:
            raise ConfigError(f"min_rounds: expected >= 2, got {self.min_rounds}")
        if self.max_rounds < self.min_rounds:
            raise ConfigError(
                f"max_rounds: {self.max_rounds} is below min_rounds {self.min_rounds}"
            )
        if self.step < 1:
            raise ConfigError(f"step: expected >= 1, got {self.step}")
        _check_confidence(self.confidence)
        _check_resolution(self.resolution, "resolution")
        if self.slow_resolution is not None:
            _check_resolution(self.slow_resolution, "slow_resolution")
        if self.sequential not in ("pocock", "none"):
            raise ConfigError(f"sequential: expected 'pocock' or 'none', got {self.sequential!r}")

    def looks(self) -> tuple[int, ...]:
        """The scheduled decision points (round counts)."""
        out = list(range(self.min_rounds, self.max_rounds + 1, self.step))
        if out[-1] != self.max_rounds:
            out.append(self.max_rounds)
        return tuple(out)

    @property
    def look_confidence(self) -> float:
        """Nominal confidence of each look's interval (see the class doc)."""
        if self.sequential == "none":
            return self.confidence
        return _look_confidence(self.looks(), self.confidence)

    @property
    def fast_band(self) -> float:
        return math.log1p(self.resolution)

    @property
    def slow_band(self) -> float:
        return math.log1p(self.resolution if self.slow_resolution is None else self.slow_resolution)

    def is_look(self, n: int) -> bool:
        """Whether ``n`` rounds is a scheduled decision point."""
        if n >= self.max_rounds:
            return True
        return n >= self.min_rounds and (n - self.min_rounds) % self.step == 0


@lru_cache(maxsize=64)
def _look_confidence(looks: tuple[int, ...], confidence: float) -> float:
    info = [crossover_information(max(n, 2)) for n in looks]
    c = pocock_constant(info, 1.0 - confidence)
    return 1.0 - 2.0 * float(_ndtr(-c))


@dataclass(frozen=True, slots=True)
class Decision:
    """What the controller says after the recorded rounds.

    ``continue_`` True: run more rounds (``classification`` is then the
    provisional class, or ``None`` before 2 rounds). False: ``classification``
    is final; AMBIGUOUS at the cap is never a pass.
    """

    continue_: bool
    classification: str | None
    estimate: RatioEstimate | None
    reason: str
    rounds: int
    rounds_needed: int | None
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "continue": self.continue_,
            "classification": self.classification,
            "estimate": None if self.estimate is None else self.estimate.as_dict(),
            "reason": self.reason,
            "rounds": self.rounds,
            "rounds_needed": self.rounds_needed,
            "warnings": list(self.warnings),
        }


def _hw_factor(n: int, confidence: float) -> float | None:
    """Half-width / sd of the crossover interval with n alternating rounds."""
    if n < 3:
        return None
    n1 = (n + 1) // 2
    n2 = n // 2
    return _t_quantile(n - 2, confidence) * 0.5 * math.sqrt(1.0 / n1 + 1.0 / n2)


def rounds_needed(
    sd_log: float,
    log_ratio: float,
    cfg: ControllerConfig | None = None,
    *,
    limit: int = 1000,
) -> int | None:
    """Rounds after which an interval of today's width would classify.

    Method: plug the observed per-round standard deviation ``sd_log`` and
    point ``log_ratio`` into the crossover half-width
    ``t_{n-2} * sd/2 * sqrt(1/ceil(n/2) + 1/floor(n/2))`` for n = 3, 4, ...
    and return the first ``n`` at which ``[point - hw, point + hw]``
    classifies under ``cfg``; ``None`` if none does by ``limit`` (a point on
    a band edge never does). Test: tests/test_stats.py (monotone in noise,
    ``None`` on a band edge). Limits: a planning figure from noisy inputs,
    never a stopping rule (:func:`decide` is).
    """
    cfg = cfg or ControllerConfig()
    if not (math.isfinite(sd_log) and sd_log >= 0):
        raise ConfigError(f"sd_log: expected a finite value >= 0, got {sd_log!r}")
    conf = cfg.look_confidence
    fast, slow, point_rule = cfg.fast_band, cfg.slow_band, cfg.require_point_beyond_resolution
    for n in range(3, limit + 1):
        f = _hw_factor(n, conf)
        assert f is not None
        hw = f * sd_log
        cls = _classify_log(log_ratio, log_ratio - hw, log_ratio + hw, fast, slow, point_rule)
        if cls != AMBIGUOUS:
            return n
    return None


def decide(rounds_so_far: Sequence[Round], cfg: ControllerConfig | None = None) -> Decision:
    """Continue or stop, from the rounds recorded so far (a pure function).

    Rules, in order:

    1. fewer than 2 rounds, or fewer than ``min_rounds``: continue;
    2. between scheduled looks (``min_rounds + k*step``; a look completes an
       AB/BA pair): continue, provisional class reported;
    3. at a look, classify (:func:`classify`); a decisive class stops;
    4. AMBIGUOUS before ``max_rounds``: continue; at or beyond
       ``max_rounds``: stop with AMBIGUOUS.

    Every look's interval is built at ``cfg.look_confidence`` (a repeated
    confidence interval, see :class:`ControllerConfig`), so stopping at the
    first decisive look does not inflate the error rate much.

    Test: tests/test_stats.py (early stop on a clear win, the cap, pairing of
    looks, pure-function replay, A/A rates). Limits: the Pocock level is
    approximate for t statistics; docs/statistics.md gives the measured A/A
    rate and power.
    """
    cfg = cfg or ControllerConfig()
    rounds = list(rounds_so_far)
    n = len(rounds)
    if n < 2:
        return Decision(True, None, None, f"{n} round(s): need {cfg.min_rounds}", n, None)
    est = estimate_rounds(
        rounds,
        cfg.look_confidence,
        reference_clock_mhz=cfg.reference_clock_mhz,
        throttle_fraction=cfg.throttle_fraction,
        distribution_free=cfg.distribution_free,
        seed=cfg.seed,
    )
    cls = _classify_log(
        est.log_ratio,
        math.log(est.lower),
        math.log(est.upper),
        cfg.fast_band,
        cfg.slow_band,
        cfg.require_point_beyond_resolution,
    )
    need = rounds_needed(est.sd_log or 0.0, est.log_ratio, cfg, limit=max(cfg.max_rounds * 4, 60))
    level = (
        f"{est.confidence:.1%}"
        if cfg.sequential == "none"
        else f"{est.confidence:.1%} per look, {cfg.confidence:.0%} over {len(cfg.looks())} looks"
    )
    summary = (
        f"speedup {est.speedup:.4f} [{est.lower:.4f}, {est.upper:.4f}] ({level}) over {n} rounds"
    )
    warns = list(est.warnings)
    if n < cfg.min_rounds:
        reason = f"{n} of {cfg.min_rounds} minimum rounds; {summary}"
        return Decision(True, cls, est, reason, n, need, tuple(warns))
    if not cfg.is_look(n):
        return Decision(
            True,
            cls,
            est,
            f"completing a pair of rounds before the next look; {summary}",
            n,
            need,
            tuple(warns),
        )
    check = est.distribution_free
    if cls in (FAST, SLOW) and check is not None and check.lower is not None:
        assert check.upper is not None
        if check.lower <= 1.0 <= check.upper:
            warns.append(
                f"the exact randomisation interval [{check.lower:.4f}, {check.upper:.4f}] "
                f"contains 1 while the t-interval does not: one round may drive the result; "
                "inspect the rounds or run more"
            )
    if cls != AMBIGUOUS:
        if n > cfg.max_rounds:
            warns.append(f"{n} rounds exceed max_rounds {cfg.max_rounds}")
        return Decision(False, cls, est, f"{cls}: {summary}", n, need, tuple(warns))
    if n >= cfg.max_rounds:
        hint = (
            f"at this noise about {need} rounds would be needed"
            if need is not None
            else "the point estimate sits on a band edge, more rounds may not settle it"
        )
        warns.append(
            f"stopped at the cap of {cfg.max_rounds} rounds without a classification; {hint}: "
            "reduce noise (exclusive GPU, longer rounds, locked clocks) or raise max_rounds"
        )
        return Decision(
            False,
            AMBIGUOUS,
            est,
            f"AMBIGUOUS at the cap of {cfg.max_rounds} rounds: {summary}",
            n,
            need,
            tuple(warns),
        )
    return Decision(
        True, AMBIGUOUS, est, f"interval too wide to classify; {summary}", n, need, tuple(warns)
    )


# geomean over rows


def geomean(estimates: Sequence[RatioEstimate], confidence: float | None = None) -> RatioEstimate:
    """Equal-weight geometric mean of row speedups, with an interval.

    Method, chosen by the data:

    * **aligned rows** (every row has per-round log-ratios with the same round
      count and order sequence, as when all shapes run in every round): take
      the per-round mean of the rows' log-ratios and run the crossover
      estimator on that series. Its interval includes any correlation between
      rows (a slow round slows every shape), and it stays valid when rows were
      in fact measured in separate rounds.
    * **otherwise**: delta method. Mean of the row log-ratios, standard error
      ``sqrt(sum se_i^2) / k``, Welch-Satterthwaite degrees of freedom. This
      assumes the rows' errors are independent; rows that shared rounds are
      positively correlated and the interval is then too narrow (a warning
      says so).

    Aligned rows also get the exact randomisation check on the per-round
    series. ``confidence`` defaults to the rows' common confidence. Test:
    tests/test_stats.py (mixed rows, aligned and delta paths). Limits: equal
    weights make a tiny shape count as much as a large one; the geomean hides
    a regressed row behind a faster one, so rows are classified too.
    """
    rows = list(estimates)
    if not rows:
        raise ConfigError("geomean: no rows")
    confs = {r.confidence for r in rows}
    if confidence is None:
        if len(confs) != 1:
            raise ConfigError(f"geomean: rows have different confidences {sorted(confs)}")
        conf = confs.pop()
    else:
        conf = _check_confidence(confidence)
    k = len(rows)
    aligned = (
        all(r.log_ratios for r in rows)
        and len({r.orders for r in rows}) == 1
        and len({len(r.log_ratios) for r in rows}) == 1
    )
    warns: list[str] = []
    if aligned:
        series = np.mean(np.array([r.log_ratios for r in rows]), axis=0)
        orders = rows[0].orders
        is_ab = np.array([o == AB for o in orders])
        point, se, dof, sd, w, method = _crossover_core(series, is_ab)
        method = f"geomean over {k} rows: per-round row means, {method}"
        log_ratios = tuple(float(v) for v in series)
        n = len(orders)
        order_effect = None if w is None else math.exp(w)
        check = (
            _relabel(series, is_ab, 1.0 - conf, 0)
            if method.endswith("crossover-t")
            else _signflip(series, 1.0 - conf, 0)
        )
    else:
        point = float(np.mean([r.log_ratio for r in rows]))
        var = [r.log_se**2 for r in rows]
        se = math.sqrt(sum(var)) / k
        denom = sum(v**2 / r.dof for v, r in zip(var, rows))
        dof = (sum(var) ** 2 / denom) if denom > 0 else float(min(r.dof for r in rows))
        sd = None
        method = f"geomean over {k} rows: delta method, Welch-Satterthwaite dof"
        log_ratios = ()
        orders = ()
        n = min(r.n for r in rows)
        order_effect = None
        check = None
        if k > 1:
            warns.append(
                "rows differ in rounds or order, so the geomean interval assumes independent "
                "rows; if they shared rounds it is too narrow: run every row in every round"
            )
    tq = _t_quantile_real(dof, conf)
    noisy = sum(1 for r in rows if r.warnings)
    if noisy:
        warns.append(f"{noisy} of {k} rows carry quality warnings; read them before the geomean")
    return RatioEstimate(
        speedup=math.exp(point),
        lower=math.exp(point - tq * se),
        upper=math.exp(point + tq * se),
        confidence=conf,
        log_ratio=point,
        log_se=se,
        dof=float(dof),
        n=n,
        method=method,
        sd_log=sd,
        order_effect=order_effect,
        base_cv=None,
        cand_cv=None,
        log_ratios=log_ratios,
        orders=orders,
        distribution_free=check,
        throttled_rounds=tuple(sorted({i for r in rows for i in r.throttled_rounds})),
        rows=k,
        warnings=tuple(warns),
    )
