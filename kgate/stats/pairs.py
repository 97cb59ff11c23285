"""Worker processes as a level of variance: the estimate of one row from per-worker-pair means.

Each arm of a benchmark runs in a worker process, and a process carries an
offset of its own for its whole life (allocation addresses, warm state,
autotune picks): identical code timed in two processes differs by a small
fixed amount. When one pair of processes times every round, that offset is
the same in every round, so the rounds cannot see it and the interval
shrinks around it: on the real H200 A/A records 8 of 36 row intervals at
95 % exclude 1 (1.8 expected). bench therefore replaces the pair every few
rounds (campaign key ``bench.rounds_per_worker_pair``) and records which pair
timed each round (``Round.block``). The model is::

    d_i = tau + o_i * w + p_j(i) + e_i,   p_j ~ N(0, s_p^2),  e_i ~ N(0, s_e^2)

with ``o_i`` +1 in AB rounds, -1 in BA rounds, ``p_j`` the offset of worker
pair ``j`` (a random effect) and ``e_i`` round noise.

Method (:func:`pair_core`), per-pair means:

1. the order effect from within pairs, where ``p_j`` cancels:
   ``w_hat = sum (o_i - c_j)(d_i - m_j) / sum (o_i - c_j)^2`` over the rounds
   ``i`` of each pair ``j``, with ``m_j`` and ``c_j`` the pair's mean log-ratio
   and mean order;
2. each pair's mean, adjusted: ``a_j = m_j - w_hat * c_j`` (a complete AB/BA
   pair has ``c_j = 0``);
3. ``tau_hat = mean(a_j)``, ``se = sd(a_j) / sqrt(J)``, Student t with
   ``J - 1`` degrees of freedom (``J`` pairs).

For complete pairs of equal size the ``a_j`` are independent
``N(tau, s_p^2 + s_e^2 / r)``, so the interval is exact whatever ``s_p`` is.
A partial pair (the odd round at a look) has a larger variance; with equal
weights the sample variance of the ``a_j`` still estimates the mean's
variance without bias, and the t quantile is then an approximation
(tests/test_stats_simulation.py measures the coverage). When every pair timed
one round, the per-round crossover interval already is this model (``p_j`` is
part of the round noise); with a single pair ``s_p`` cannot be estimated.
:func:`design` tells the three apart. The price of the random effect is the
degrees of freedom: ``J - 1`` instead of ``n - 2``; with 2 rounds per pair and
no process offset an interval is about 40 % wider at 5 rounds, 20 % at 9 and
10 % at 15 (docs/statistics.md measures what that costs a decision).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kgate.errors import ConfigError

#: design names (see :func:`design`)
PAIRS = "pairs"
ROUNDS = "rounds"
ONE_PAIR = "one pair"
UNRECORDED = "unrecorded"

PAIR_METHOD = "worker-pair means, t"


def check_blocks(blocks: Sequence[int | None] | None, n: int) -> tuple[int | None, ...]:
    """The block (worker pair) of each of ``n`` rounds; empty when none is given."""
    if blocks is None:
        return ()
    out = tuple(blocks)
    if len(out) != n:
        raise ConfigError(f"blocks: {len(out)} entries for {n} rounds")
    for b in out:
        if b is not None and (not isinstance(b, (int, np.integer)) or isinstance(b, bool)):
            raise ConfigError(f"blocks: expected integers (worker pair ids) or None, got {b!r}")
    return tuple(None if b is None else int(b) for b in out)


def design(blocks: Sequence[int | None]) -> str:
    """How worker pairs enter the estimate.

    * ``pairs``: at least two pairs and some pair timed two rounds or more:
      :func:`pair_core`;
    * ``rounds``: every round had its own pair: the per-round interval;
    * ``one pair``: one pair timed every round: the per-round interval, which
      leaves the pair's offset out (a warning says so);
    * ``unrecorded``: no block recorded for some round (records older than
      replication): the per-round interval, as decided then.
    """
    if not blocks or any(b is None for b in blocks):
        return UNRECORDED
    ids = set(blocks)
    if len(ids) == 1:
        return ONE_PAIR
    if len(ids) == len(blocks):
        return ROUNDS
    return PAIRS


def index(blocks: Sequence[int | None]) -> tuple[tuple[int, ...], np.ndarray]:
    """The pair ids in the order they first appear, and each round's position among them."""
    first: dict[int, int] = {}
    pos = [first.setdefault(b, len(first)) for b in blocks]  # type: ignore[arg-type]
    return tuple(first), np.array(pos, dtype=int)


@dataclass(frozen=True, slots=True)
class PairCore:
    """The per-pair estimate in log units; ``adjusted`` are the pairs' order-adjusted means ``a_j``."""

    point: float
    se: float
    dof: float
    sd: float
    order_log: float | None
    ids: tuple[int, ...]
    sizes: tuple[int, ...]
    adjusted: tuple[float, ...]


def pair_core(d: np.ndarray, is_ab: np.ndarray, blocks: Sequence[int | None]) -> PairCore:
    """Point, standard error and ``J - 1`` degrees of freedom from per-pair means (module docstring).

    ``order_log`` is ``w_hat``; None when no pair has rounds in both orders
    (the order effect is then not removed: rounds all in one order are
    warned about by the caller).
    """
    ids, pos = index(blocks)
    k = len(ids)
    if k < 2:
        raise ConfigError(f"worker pairs: need at least 2 pairs, got {k}")
    o = np.where(is_ab, 1.0, -1.0)
    size = np.bincount(pos, minlength=k).astype(float)
    centres = np.bincount(pos, o, minlength=k) / size
    means = np.bincount(pos, d, minlength=k) / size
    oc = o - centres[pos]
    den = float((oc * oc).sum())
    w = float((oc * (d - means[pos])).sum()) / den if den > 0 else None
    adjusted = means - (w or 0.0) * centres
    sd = float(adjusted.std(ddof=1))
    return PairCore(point=float(adjusted.mean()), se=sd / math.sqrt(k), dof=float(k - 1), sd=sd, order_log=w, ids=ids,
                    sizes=tuple(int(v) for v in size), adjusted=tuple(float(v) for v in adjusted))


def pair_estimates(d: Sequence[float], orders: Sequence[str], blocks: Sequence[int | None], order_log: float | None
                   ) -> list[dict[str, float | int]]:
    """Each worker pair's own estimate, what an A/A calibration compares across pairs: its rounds and its mean
    log-ratio adjusted by the row's order effect ``order_log`` (``m_j - w * c_j``; the crossover's ``w`` when
    every round had its own pair). Empty when the rounds carry no pair."""
    if not blocks or any(b is None for b in blocks):
        return []
    ids, pos = index(blocks)
    arr = np.asarray(d, dtype=float)
    o = np.array([1.0 if x == "AB" else -1.0 for x in orders])
    size = np.bincount(pos, minlength=len(ids)).astype(float)
    adjusted = np.bincount(pos, arr, minlength=len(ids)) / size - (order_log or 0.0) * (
        np.bincount(pos, o, minlength=len(ids)) / size)
    return [{"pair": b, "rounds": int(n), "log_ratio": float(a)} for b, n, a in zip(ids, size, adjusted)]
