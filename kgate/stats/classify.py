"""FAST, SAME, SLOW or AMBIGUOUS from a speedup interval.

See :func:`classify`. FAST/SLOW need the interval to exclude 1 *and* the point
estimate to reach the resolution; SAME needs the whole interval inside the
resolution band; everything else is AMBIGUOUS.
"""

from __future__ import annotations

import math

from kgate.stats.ratio import RatioEstimate
from kgate.stats.rounds import AMBIGUOUS, FAST, SAME, SLOW, check_resolution


def classify_log(
    point: float,
    lo: float,
    hi: float,
    fast_band: float,
    slow_band: float,
    require_point: bool,
) -> str:
    """:func:`classify` in log units (bands ``log1p`` of the resolutions).

    The direction-only rule (``require_point`` False) calls FAST when the
    interval excludes 1 and is not inside the band (``hi`` beyond the fast
    band edge), SLOW likewise, so the three decisive classes stay mutually
    exclusive and SAME wins inside the band: ``[1.003, 1.015]`` is SAME under
    both rules.
    """
    if lo > 0.0 and (point >= fast_band if require_point else hi > fast_band):
        return FAST
    if hi < 0.0 and (point <= -slow_band if require_point else lo < -slow_band):
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
    direction-only rule: FAST when ``lo > 1`` and ``hi > 1 + r`` (the
    interval excludes 1 and is not inside the band; SLOW likewise), which
    has more power at exactly ``r`` and a higher false-positive rate
    (docs/statistics.md gives both, measured); a significant change inside
    the band (``[1.003, 1.015]``) is SAME under both rules.

    Test: tests/test_stats.py (each branch, A/A rate). Limits: the rule is
    only as good as the interval's coverage.
    """
    res = check_resolution(resolution, "resolution")
    sres = res if slow_resolution is None else check_resolution(slow_resolution, "slow_resolution")
    return classify_log(
        est.log_ratio,
        math.log(est.lower),
        math.log(est.upper),
        math.log1p(res),
        math.log1p(sres),
        require_point_beyond_resolution,
    )
