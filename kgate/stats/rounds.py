"""Vocabulary, input checks, one arm's summary and one measured round.

The names every other module of :mod:`kgate.stats` shares: the round orders
(``AB``: baseline first, ``BA``), the four classes (FAST, SAME, SLOW,
AMBIGUOUS), the checks of times, confidences and resolutions (each raises
``ConfigError``), Student-t quantiles, :func:`summarize` (descriptive
statistics of one arm's samples) and :class:`Round` (each arm's round
median and the order they ran in).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import stats as _sps

from kgate.errors import ConfigError

AB = "AB"
BA = "BA"
FAST = "FAST"
SAME = "SAME"
SLOW = "SLOW"
AMBIGUOUS = "AMBIGUOUS"

Order = Literal["AB", "BA"]


# validation helpers


def as_positive_array(values: Sequence[float], name: str) -> np.ndarray:
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


def check_confidence(confidence: float) -> float:
    if not (isinstance(confidence, (int, float)) and 0.5 <= float(confidence) < 1.0):
        raise ConfigError(f"confidence: expected a number in [0.5, 1), got {confidence!r}")
    return float(confidence)


def check_resolution(value: float, name: str) -> float:
    if not (isinstance(value, (int, float)) and 0.0 < float(value) < 1.0):
        raise ConfigError(f"{name}: expected a fraction in (0, 1), got {value!r}")
    return float(value)


def alternating_orders(n: int, first: Order = AB) -> tuple[str, ...]:
    """The order sequence AB, BA, AB, ... (or starting with BA) for ``n`` rounds."""
    if first not in (AB, BA):
        raise ConfigError(f"first: expected 'AB' or 'BA', got {first!r}")
    other = BA if first == AB else AB
    return tuple(first if i % 2 == 0 else other for i in range(n))


def check_orders(orders: Sequence[str] | None, n: int) -> tuple[str, ...]:
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
def t_quantile(dof: int, confidence: float) -> float:
    return float(_sps.t.ppf(0.5 + confidence / 2.0, dof))


def t_quantile_real(dof: float, confidence: float) -> float:
    if float(dof).is_integer():
        return t_quantile(int(dof), confidence)
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
    arr = as_positive_array(samples_ms, "samples_ms")
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


def tokens_summary(rates: Sequence[float]) -> dict:
    """``summarize`` over per-block tokens/s, keys named by their unit (``median_tokens_per_s``)."""
    return {(k[: -len("_ms")] + "_tokens_per_s" if k.endswith("_ms") else k): v
            for k, v in summarize(rates).as_dict().items()}


# rounds


@dataclass(frozen=True, slots=True)
class Round:
    """One measured round: each arm's round statistic (ms) and the order.

    ``order`` is ``"AB"`` when the baseline ran first. The clock fields are
    optional: the SM clock (MHz) seen while each arm ran (for example the
    mean of NVML readings), used only to flag throttling and clock imbalance.
    ``block`` names the pair of worker processes that timed the round (None
    when not recorded): rounds of one block share that pair's offset, which
    :mod:`kgate.stats.pairs` treats as a random effect.
    """

    base_ms: float
    cand_ms: float
    order: str
    base_clock_mhz: float | None = None
    cand_clock_mhz: float | None = None
    block: int | None = None

    @classmethod
    def from_samples(
        cls,
        base_samples_ms: Sequence[float],
        cand_samples_ms: Sequence[float],
        order: str,
        base_clock_mhz: float | None = None,
        cand_clock_mhz: float | None = None,
        block: int | None = None,
    ) -> Round:
        """A round whose statistic per arm is the median of its samples."""
        return cls(
            base_ms=summarize(base_samples_ms).median_ms,
            cand_ms=summarize(cand_samples_ms).median_ms,
            order=order,
            base_clock_mhz=base_clock_mhz,
            cand_clock_mhz=cand_clock_mhz,
            block=block,
        )

    def as_dict(self) -> dict[str, float | str | None]:
        return {name: getattr(self, name) for name in self.__slots__}
