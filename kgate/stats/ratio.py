"""The paired speedup of one row: the AB/BA crossover estimate and its interval.

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
freedom is used instead, with a warning. When the rounds record which pair of
worker processes timed them and pairs were replaced during the run, the
process is a random effect and the interval comes from per-pair means
(:mod:`kgate.stats.pairs`).

Limits
------
* Rounds are assumed independent given the order: a drift that is not linear
  within a round (a step between the two arms) is not removed.
* The t-interval assumes roughly normal round log-ratios; at 5 rounds one wild
  round inflates ``s_p`` (conservative) but a skewed noise can bias one side.
* The between-round CV includes any drift across rounds; the pairing removes
  it from the estimate, not from the reported CV.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kgate.errors import ConfigError
from kgate.stats.distribution_free import DistributionFreeCheck, relabel, signflip
from kgate.stats.pairs import ONE_PAIR, PAIR_METHOD, PAIRS, check_blocks, design, pair_core
from kgate.stats.rounds import (
    AB,
    Round,
    as_positive_array,
    check_confidence,
    check_orders,
    t_quantile,
    t_quantile_real,
)

#: Between-round CV above which a warning is raised.
CV_WARN = 0.05
#: Mean SM-clock difference between arms (log) above which a warning is raised.
CLOCK_SKEW_WARN = 0.01


# the paired estimate


@dataclass(frozen=True, slots=True)
class RatioEstimate:
    """A speedup (``base / cand``; > 1 = candidate faster) with its interval.

    ``log_ratio`` and ``log_se`` are in natural-log units; ``speedup``,
    ``lower``, ``upper`` are ``exp`` of the point and the t-interval ends.
    ``order_effect`` is how much faster the arm measured second in a round
    appears (a ratio; ``None`` when not estimable). ``log_ratios`` and
    ``orders`` are the rounds behind the estimate (per-round row means for a
    geomean over aligned rows; empty for a delta-method geomean); ``blocks``
    the worker pair of each of those rounds (empty when not recorded). With
    the per-pair method (:mod:`kgate.stats.pairs`) ``pair_ids`` and
    ``pair_log_ratios`` are the pairs and their order-adjusted mean
    log-ratios, the units the interval is built from.
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
    blocks: tuple[int | None, ...] = ()
    pair_ids: tuple[int, ...] = ()
    pair_log_ratios: tuple[float, ...] = ()

    @property
    def log_lower(self) -> float:
        return math.log(self.lower)

    @property
    def log_upper(self) -> float:
        return math.log(self.upper)

    @classmethod
    def on_log_scale(cls, point: float, se: float, quantile: float, confidence: float, **rest: Any) -> RatioEstimate:
        """The estimate of a log-ratio ``point`` with standard error ``se``: the speedup exp(point) and its
        interval exp(point -/+ quantile * se) at ``confidence`` (``quantile``: the t quantile of that level);
        ``rest`` holds the other fields."""
        return cls(speedup=math.exp(point), lower=math.exp(point - quantile * se),
                   upper=math.exp(point + quantile * se), confidence=confidence, log_ratio=point, log_se=se, **rest)

    def at_confidence(self, confidence: float) -> tuple[float, float]:
        """The interval ends (speedups) at another ``confidence``, from the same point, standard error and
        degrees of freedom (a family of rows judged at a corrected level: :mod:`kgate.stats.stopping`)."""
        q = t_quantile_real(self.dof, check_confidence(confidence))
        return math.exp(self.log_ratio - q * self.log_se), math.exp(self.log_ratio + q * self.log_se)

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


def crossover_core(
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


@dataclass(frozen=True, slots=True)
class Core:
    """What the interval is built from: point, se, dof and sd in log units, the order effect (log), the method,
    the units the distribution-free check relabels (rounds, or pairs' adjusted means), the design of worker
    pairs (:func:`kgate.stats.pairs.design`) and, with pairs, their ids and adjusted means."""

    point: float
    se: float
    dof: float
    sd: float | None
    order_log: float | None
    method: str
    design: str
    pair_ids: tuple[int, ...] = ()
    pair_log_ratios: tuple[float, ...] = ()


def estimate_core(d: np.ndarray, is_ab: np.ndarray, blocks: tuple[int | None, ...]) -> Core:
    """The per-pair estimate when worker pairs were replicated (:mod:`kgate.stats.pairs`), else the per-round
    crossover (or paired) estimate."""
    des = design(blocks)
    if des == PAIRS:
        pc = pair_core(d, is_ab, blocks)
        return Core(pc.point, pc.se, pc.dof, pc.sd, pc.order_log, PAIR_METHOD, des, pc.ids, pc.adjusted)
    point, se, dof, sd, w, method = crossover_core(d, is_ab)
    return Core(point, se, dof, sd, w, method, des)


def distribution_free_check(d: np.ndarray, is_ab: np.ndarray, core: Core, alpha: float, seed: int
                            ) -> DistributionFreeCheck:
    """Koch's relabelling for crossover data, the sign flip otherwise (on the pairs' adjusted means with
    worker pairs, the units of their interval)."""
    if core.method == "crossover-t":
        return relabel(d, is_ab, alpha, seed)
    return signflip(np.array(core.pair_log_ratios) if core.pair_ids else d, alpha, seed)


ONE_PAIR_WARNING = ("one pair of worker processes timed every round: the interval leaves out the offset between "
                    "processes (a fixed bias the rounds cannot see); replace the pair every few rounds")


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
    blocks: Sequence[int | None] | None = None,
) -> RatioEstimate:
    """Paired speedup of the candidate over the baseline from round statistics.

    ``base_rounds_ms[i]`` and ``cand_rounds_ms[i]`` are round ``i``'s statistic
    (the round median) of each arm, measured back to back; ``orders[i]`` is
    ``"AB"`` (baseline first) or ``"BA"``, default alternating from ``"AB"``.

    Method: crossover estimator on ``d_i = ln(base_i / cand_i)`` with a Student
    t interval (``n - 2`` dof), see the module docstring; paired mean with
    ``n - 1`` dof when only two rounds or one order are given. ``blocks[i]``
    is the worker pair that timed round ``i``: when pairs were replicated the
    interval comes from per-pair means with ``J - 1`` dof instead
    (:mod:`kgate.stats.pairs`). With ``distribution_free`` the exact randomisation interval is computed too
    (seeded only when it must be sampled).

    Quality warnings (each says what to do): between-round CV above 5 %, fewer
    than 5 rounds, one worker pair for every round, a significant order effect, rounds all in one order,
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
    conf = check_confidence(confidence)
    base = as_positive_array(base_rounds_ms, "base_rounds_ms")
    cand = as_positive_array(cand_rounds_ms, "cand_rounds_ms")
    if base.size != cand.size:
        raise ConfigError(
            f"rounds: {base.size} baseline vs {cand.size} candidate values; rounds must be paired"
        )
    n = int(base.size)
    if n < 2:
        raise ConfigError(f"rounds: need at least 2 paired rounds, got {n}")
    ords = check_orders(orders, n)
    blk = check_blocks(blocks, n)
    d = np.log(base) - np.log(cand)
    is_ab = np.array([o == AB for o in ords])
    core = estimate_core(d, is_ab, blk)
    point, se, dof, sd, w, method = core.point, core.se, core.dof, core.sd, core.order_log, core.method
    tq = t_quantile(int(dof), conf)
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
    if core.design == ONE_PAIR and n > 1:
        warns.append(ONE_PAIR_WARNING)
    if method != "crossover-t" and w is None:
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

    check = distribution_free_check(d, is_ab, core, 1.0 - conf, seed) if distribution_free else None

    return RatioEstimate.on_log_scale(
        point, se, tq, conf,
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
        blocks=blk,
        pair_ids=core.pair_ids,
        pair_log_ratios=core.pair_log_ratios,
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
        blocks=[r.block for r in rounds],
    )
