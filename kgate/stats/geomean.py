"""Geometric means of speedups: over rows with an interval (:func:`geomean`), and of plain values."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kgate.errors import ConfigError
from kgate.stats.ratio import RatioEstimate, distribution_free_check, estimate_core
from kgate.stats.rounds import AB, check_confidence, t_quantile_real


def geomean(estimates: Sequence[RatioEstimate], confidence: float | None = None) -> RatioEstimate:
    """Equal-weight geometric mean of row speedups, with an interval.

    Method, chosen by the data:

    * **aligned rows** (every row has per-round log-ratios with the same round
      count, order sequence and worker pairs, as when all shapes run in every
      round): take the per-round mean of the rows' log-ratios and run the
      rows' estimator on that series (crossover, or per-pair means when worker
      pairs were replicated: :mod:`kgate.stats.pairs`). Its interval includes any correlation between
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
        conf = check_confidence(confidence)
    k = len(rows)
    aligned = (
        all(r.log_ratios for r in rows)
        and len({r.orders for r in rows}) == 1
        and len({r.blocks for r in rows}) == 1
        and len({len(r.log_ratios) for r in rows}) == 1
    )
    warns: list[str] = []
    if aligned:
        series = np.mean(np.array([r.log_ratios for r in rows]), axis=0)
        orders = rows[0].orders
        is_ab = np.array([o == AB for o in orders])
        blocks = rows[0].blocks
        core = estimate_core(series, is_ab, blocks)
        point, se, dof, sd, w = core.point, core.se, core.dof, core.sd, core.order_log
        method = f"geomean over {k} rows: per-round row means, {core.method}"
        log_ratios = tuple(float(v) for v in series)
        n = len(orders)
        order_effect = None if w is None else math.exp(w)
        check = distribution_free_check(series, is_ab, core, 1.0 - conf, 0)
        pairs = (core.pair_ids, core.pair_log_ratios)
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
        blocks = ()
        pairs = ((), ())
        if k > 1:
            warns.append(
                "rows differ in rounds or order, so the geomean interval assumes independent "
                "rows; if they shared rounds it is too narrow: run every row in every round"
            )
    tq = t_quantile_real(dof, conf)
    noisy = sum(1 for r in rows if r.warnings)
    if noisy:
        warns.append(f"{noisy} of {k} rows carry quality warnings; read them before the geomean")
    return RatioEstimate.on_log_scale(
        point, se, tq, conf,
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
        blocks=blocks,
        pair_ids=pairs[0],
        pair_log_ratios=pairs[1],
    )


def geomean_values(values: list[float]) -> float:
    """The plain geometric mean ``exp(mean(ln v))`` of positive values, without an interval.

    Used for the profile stages' best-case and implied speedups over rows. Raises ``ConfigError`` on
    an empty list; a value <= 0 raises ``ValueError`` (``math.log``).
    """
    if not values:
        raise ConfigError("geomean of no values")
    return math.exp(sum(math.log(v) for v in values) / len(values))
