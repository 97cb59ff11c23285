"""The adaptive round controller: when to stop measuring a row.

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

Limits: the Pocock level is exact for normal statistics with known
variance; with t statistics at 3 to 13 degrees of freedom the simulated A/A
rate is about 5 %, slightly above it at very high noise
(docs/statistics.md).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kgate.errors import ConfigError
from kgate.stats.classify import classify_log
from kgate.stats.ratio import RatioEstimate, estimate_rounds
from kgate.stats.rounds import AMBIGUOUS, FAST, SLOW, Round, check_confidence, check_resolution, t_quantile
from kgate.stats.sequential import per_look_confidence


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Settings of the adaptive round controller.

    ``min_rounds`` rounds first, then a look after every ``step`` further
    rounds (2 keeps AB/BA balanced) until ``max_rounds`` (always a look).

    ``confidence`` is the *family* confidence over all looks. With
    ``sequential="pocock"`` (default) each look's interval is a repeated
    confidence interval (Jennison & Turnbull, 1989): its nominal level
    :attr:`look_confidence` comes from the Pocock constant for this look
    schedule (98.35 % per look for 95 % over looks at 5, 7, ..., 15), so that
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
        check_confidence(self.confidence)
        check_resolution(self.resolution, "resolution")
        if self.slow_resolution is not None:
            check_resolution(self.slow_resolution, "slow_resolution")
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
        return per_look_confidence(self.looks(), self.confidence)

    def family_confidence(self, members: int) -> float:
        """Per-look confidence of one of ``members`` rows judged as a family: Bonferroni over the members
        (``1 - (1 - confidence) / members`` over looks), Pocock over the looks as for one row."""
        if members <= 1:
            return self.look_confidence
        conf = 1.0 - (1.0 - self.confidence) / members
        return conf if self.sequential == "none" else per_look_confidence(self.looks(), conf)

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


def _hw_factor(n: int, confidence: float, per_pair: int | None = None) -> float | None:
    """Half-width / sd of the crossover interval with n alternating rounds; with ``per_pair`` rounds per
    worker pair, of the per-pair interval over the complete pairs (sd then of the pairs' means)."""
    if per_pair:
        pairs = n // per_pair
        return t_quantile(pairs - 1, confidence) / math.sqrt(pairs) if pairs >= 2 else None
    if n < 3:
        return None
    n1 = (n + 1) // 2
    n2 = n // 2
    return t_quantile(n - 2, confidence) * 0.5 * math.sqrt(1.0 / n1 + 1.0 / n2)


def rounds_needed(
    sd_log: float,
    log_ratio: float,
    cfg: ControllerConfig | None = None,
    *,
    limit: int = 1000,
    per_pair: int | None = None,
) -> int | None:
    """Rounds after which an interval of today's width would classify.

    Method: plug the observed per-round standard deviation ``sd_log`` and
    point ``log_ratio`` into the crossover half-width
    ``t_{n-2} * sd/2 * sqrt(1/ceil(n/2) + 1/floor(n/2))`` for n = 3, 4, ...
    and return the first ``n`` at which ``[point - hw, point + hw]``
    classifies under ``cfg``; ``None`` if none does by ``limit`` (a point on
    a band edge never does). With ``per_pair`` (rounds per worker pair) the
    half-width is ``t_{J-1} * sd / sqrt(J)`` over the ``J = n // per_pair``
    complete pairs, ``sd_log`` then being the spread of the pairs' means. Test: tests/test_stats.py (monotone in noise,
    ``None`` on a band edge). Limits: a planning figure from noisy inputs,
    never a stopping rule (:func:`decide` is).
    """
    cfg = cfg or ControllerConfig()
    if not (math.isfinite(sd_log) and sd_log >= 0):
        raise ConfigError(f"sd_log: expected a finite value >= 0, got {sd_log!r}")
    conf = cfg.look_confidence
    fast, slow, point_rule = cfg.fast_band, cfg.slow_band, cfg.require_point_beyond_resolution
    for n in range(3, limit + 1):
        f = _hw_factor(n, conf, per_pair)
        if f is None:
            continue
        hw = f * sd_log
        cls = classify_log(log_ratio, log_ratio - hw, log_ratio + hw, fast, slow, point_rule)
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
    cls = classify_log(
        est.log_ratio,
        math.log(est.lower),
        math.log(est.upper),
        cfg.fast_band,
        cfg.slow_band,
        cfg.require_point_beyond_resolution,
    )
    per_pair = max(Counter(est.blocks).values()) if est.pair_ids else None
    need = rounds_needed(est.sd_log or 0.0, est.log_ratio, cfg, limit=max(cfg.max_rounds * 4, 60), per_pair=per_pair)
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
