"""Outlier rounds: a stated rule that takes a wild round out and has its AB/BA pair rerun, never absorbed silently.

One round slowed by a context switch, a clock dip or a hiccup on the host
moves a row's log-ratio far from the others. Kept, it widens the interval
(5 % of rounds at +20 % turn an A/A's SAME into AMBIGUOUS about half the
time at 1 % noise, docs/statistics.md) or, at 5 rounds, shifts the point.

Rule (:func:`screen`), over the rows timed in the same rounds:

1. For each valid round ``i`` and each row, the externally studentized
   residual of its log-ratio under the crossover model
   (``d = tau + w * o + e``) fitted without round ``i``::

       t_i = (d_i - m) / (s * sqrt(1 + 1/k))

   with ``m`` the mean of the other valid rounds in the same order (``k`` of
   them) and ``s`` the pooled within-order standard deviation of the other
   valid rounds (``n - 3`` degrees of freedom). Under normal round noise
   ``t_i`` is Student t with ``n - 3`` dof, so its two-sided p-value is exact.
2. Round ``i`` is an outlier of the row when ``p_i < ALPHA / (n * rows)``
   (:data:`ALPHA` = 0.001, Bonferroni over every valid round and row at this
   count) **and** ``|d_i - m|`` exceeds :data:`FLOOR_SHARE` (a quarter) of the
   resolution, in log units: a smaller deviation cannot move a class, and
   timer-resolution ties would otherwise make a zero spread flag anything.
3. The round with the smallest p-value over all rows is excluded, for every
   row (rows stay aligned for the geomean), and the screen runs again on the
   rest, until no round qualifies or ``limit`` rounds are out. Nothing is
   judged below :data:`MIN_VALID` valid rounds.

The benchmark's stopping rule (:func:`kgate.stats.stopping.paired_out`) takes
each excluded round out with its AB/BA partner (rounds 2k and 2k + 1), so the
valid rounds stay whole crossover pairs, in which the order effect cancels;
the controller counts valid rounds only, so the loop reruns the pair (the
rounds keep alternating AB/BA). The excluded round and its partner stay in the
checkpoint, and the record names the outlier with its row, p-value and
deviation (``stopping.excluded_rounds``), and every round that does not count
(``stopping.rounds_out``). The screen is a pure function of the recorded rounds, so a
resumed run excludes the same rounds; as rounds accumulate, an earlier round
can qualify later.

Limits: with worker pairs replicated, a pair's offset is part of the
residual, which makes the screen slightly more eager than its nominal level;
two outliers in the same order can mask each other at small counts; the
exclusions are data-dependent, so the interval after them is slightly narrower
than nominal under clean noise (the simulation measures the net effect:
docs/statistics.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtr as _stdtr

from kgate.errors import ConfigError
from kgate.stats.rounds import AB, check_resolution

#: family-wise level of one screen, shared (Bonferroni) among every valid round and row
ALPHA = 0.001
#: a deviation must exceed this share of the resolution (log units) to count
FLOOR_SHARE = 0.25
#: fewest valid rounds before anything is judged
MIN_VALID = 5


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A round taken out: its index in the recorded rounds, the row that flagged it, that row's log-ratio,
    its deviation from the other rounds of its order (log), the studentized residual and its p-value."""

    round: int
    row: str
    log_ratio: float
    deviation: float
    t: float
    p_value: float
    threshold: float

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}


def residuals(d: np.ndarray, is_ab: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deviation, studentized residual and two-sided p-value of every round against the others (rule 1).

    ``d`` holds one row's log-ratios per round, or several rows' (rows x
    rounds). Leave-one-out by update formulas: removing ``x`` from its
    order's group (``k + 1`` values, mean ``mu``, sum of squares ``SS``)
    leaves the other rounds of that order a mean ``((k + 1) * mu - x) / k``
    and the groups a sum of squares ``SS_total - (k + 1) / k * (x - mu)^2``.
    A round whose order has no other round, or with no degree of freedom
    left, gets p = 1.
    """
    n = d.shape[-1]
    n_ab = int(is_ab.sum())
    size = np.where(is_ab, n_ab, n - n_ab).astype(float)
    groups = [g for g in (is_ab, ~is_ab) if g.any()]
    mean = np.zeros_like(d, dtype=float)
    ss_total = np.zeros(d.shape[:-1])
    for g in groups:
        mu = d[..., g].mean(axis=-1, keepdims=True)
        mean[..., g] = mu
        ss_total = ss_total + ((d[..., g] - mu) ** 2).sum(axis=-1)
    k = size - 1.0
    ok = k >= 1
    safe_k = np.where(ok, k, 1.0)
    dev = d - (size * mean - d) / safe_k
    ss = ss_total[..., None] - size / safe_k * (d - mean) ** 2
    dof = (n - 1) - np.where(ok, len(groups), len(groups) - 1)
    ok = ok & (dof >= 1)
    scale = np.sqrt(np.maximum(ss, 0.0) / np.maximum(dof, 1)) * np.sqrt(1.0 + 1.0 / safe_k)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(scale > 0, dev / scale, np.where(dev != 0, np.inf, 0.0))
    p = np.where(ok, 2.0 * _stdtr(np.maximum(dof, 1), -np.abs(t)), 1.0)
    return np.where(ok, dev, 0.0), np.where(ok, t, 0.0), p


def screen(log_ratios: Mapping[str, Sequence[float]], orders: Sequence[str], resolution: float, limit: int,
           *, alpha: float = ALPHA) -> tuple[Exclusion, ...]:
    """The rounds to exclude, by the module's rule, in the order they were found.

    ``log_ratios[row][i]`` is round ``i``'s ``ln(base / cand)`` for that row;
    every row has one value per round in ``orders``. ``limit`` caps the
    exclusions (0 turns the screen off).
    """
    res = check_resolution(resolution, "resolution")
    if not (0.0 < alpha < 1.0):
        raise ConfigError(f"alpha: expected (0, 1), got {alpha!r}")
    n_all = len(orders)
    data = {k: np.asarray(v, dtype=float) for k, v in log_ratios.items()}
    for key, d in data.items():
        if d.shape != (n_all,):
            raise ConfigError(f"row {key}: {d.size} log-ratios for {n_all} rounds")
    is_ab_all = np.array([o == AB for o in orders])
    floor = FLOOR_SHARE * math.log1p(res)
    keys = list(data)
    matrix = np.array([data[k] for k in keys]).reshape(len(keys), n_all)
    out: list[Exclusion] = []
    valid = np.ones(n_all, bool)
    while len(out) < limit and keys:
        idx = np.flatnonzero(valid)
        n = idx.size
        if n < MIN_VALID:
            break
        threshold = alpha / (n * len(keys))
        dev, t, p = residuals(matrix[:, idx], is_ab_all[idx])
        p = np.where(np.abs(dev) > floor, p, 1.0)
        r, j = np.unravel_index(int(np.argmin(p)), p.shape)
        if not p[r, j] < threshold:
            break
        out.append(Exclusion(int(idx[j]), keys[r], float(matrix[r, idx[j]]), float(dev[r, j]), float(t[r, j]),
                             float(p[r, j]), threshold))
        valid[idx[j]] = False
    return tuple(out)
