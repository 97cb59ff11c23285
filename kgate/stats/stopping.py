"""The benchmark's stopping rule over all its rows: each row, the geomean against the bar, the controls as a family,
outlier rounds.

:func:`decide_bench` is a pure function of every row's recorded rounds (rows
timed in the same rounds), so a coordinator can checkpoint rounds and resume,
as with :func:`kgate.stats.decide` for one row. Rules, in order:

1. **Outlier rounds** (:mod:`kgate.stats.outliers`): at most ``max_excluded``
   rounds (default a fifth of the cap) are taken out of every row, each with
   its AB/BA partner (rounds 2k and 2k + 1), so the valid rounds stay whole
   crossover pairs and the loop reruns the pair; the rest are the valid
   rounds, and only they count.
2. **Each row** is decided by :func:`kgate.stats.decide` on the valid rounds:
   between looks, below the minimum, or AMBIGUOUS at a look before the cap,
   the run continues.
3. **The geomean** of the gated rows (:func:`kgate.stats.geomean`, aligned
   rows, at the per-look confidence of the rows) against ``bar``: while its
   interval straddles the bar at a look before the cap, the run continues;
   at the cap a straddle is left open, and the gate reads it as
   ``inconclusive``, never ``fail``. The geomean is looked at on the rows'
   look schedule at the rows' per-look (Pocock) level, so its intervals are
   repeated confidence intervals too: the chance that any look's lower bound
   clears a true geomean sitting exactly on the bar stays about
   ``(1 - confidence) / 2`` (measured: docs/statistics.md).
4. **Controls as a family** (:func:`family_classes`): with ``m`` controls, a
   control is FAST or SLOW only when its interval at the family level
   (Bonferroni, per-look level of ``1 - (1 - confidence) / m`` over looks:
   :meth:`ControllerConfig.family_confidence`) says so, which bounds the
   chance that any unchanged control is called moved by ``1 - confidence``;
   it is SAME when its own interval is inside the band (an
   intersection-union rule: every control must be SAME, which needs no
   correction); otherwise AMBIGUOUS, and the run continues while one is, up
   to the cap.

At the cap (``max_rounds`` valid rounds) the run stops whatever is open.

Test: tests/test_stats_stopping.py (each rule), tests/test_stats_simulation.py
(the measured rates). Limits: the geomean and the family level inherit the
rows' t approximations; the Bonferroni level is conservative when controls are
correlated (they share rounds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kgate.errors import ConfigError
from kgate.stats.classify import classify_log
from kgate.stats.controller import ControllerConfig, Decision, decide
from kgate.stats.geomean import geomean
from kgate.stats.outliers import Exclusion, screen
from kgate.stats.ratio import RatioEstimate
from kgate.stats.rounds import AMBIGUOUS, FAST, SAME, SLOW, Round

ABOVE = "above"
BELOW = "below"
STRADDLES = "straddles"


def bar_side(est: RatioEstimate, bar: float) -> str:
    """Where an interval sits against the bar: ``above`` (lower bound >= bar), ``below`` (upper bound < bar) or
    ``straddles``."""
    if est.lower >= bar:
        return ABOVE
    if est.upper < bar:
        return BELOW
    return STRADDLES


def family_classes(estimates: Mapping[str, RatioEstimate], classes: Mapping[str, str], cfg: ControllerConfig
                   ) -> dict[str, str]:
    """Each member's class when the rows are judged as a family (module docstring, rule 4).

    ``classes`` are the members' own classes (at ``cfg.look_confidence``); a
    single member is judged as a row.
    """
    m = len(estimates)
    if m <= 1:
        return dict(classes)
    level = cfg.family_confidence(m)
    out = {}
    for key, est in estimates.items():
        lo, hi = est.at_confidence(level)
        wide = classify_log(est.log_ratio, math.log(lo), math.log(hi), cfg.fast_band, cfg.slow_band,
                            cfg.require_point_beyond_resolution)
        out[key] = wide if wide in (FAST, SLOW) else (SAME if classes[key] == SAME else AMBIGUOUS)
    return out


@dataclass(frozen=True, slots=True)
class BenchDecision:
    """What the stopping rule says after the recorded rounds (module docstring).

    ``rows``: each row's decision on the valid rounds; ``geomean``: the gated
    rows' geomean (None before 2 valid rounds) and ``bar`` its side of the
    bar; ``controls``: the controls' family classes; ``excluded``: the outlier
    rounds taken out; ``valid_rounds``: the rounds that count.
    """

    continue_: bool
    rows: dict[str, Decision]
    geomean: RatioEstimate | None
    bar: str | None
    controls: dict[str, str]
    excluded: tuple[Exclusion, ...]
    valid_rounds: int
    reason: str
    rounds: int = 0
    notes: tuple[str, ...] = field(default=())
    #: every recorded round that does not count: the outliers and their AB/BA partners (``paired_out``)
    out: tuple[int, ...] = field(default=())


def decide_bench(rounds: Mapping[str, Sequence[Round]], cfg: ControllerConfig, *, gated: Sequence[str],
                 controls: Sequence[str] = (), bar: float | None = None, max_excluded: int | None = None
                 ) -> BenchDecision:
    """Continue or stop a benchmark of several rows (a pure function of their rounds; module docstring).

    ``rounds[key]`` are row ``key``'s recorded rounds, the same rounds for
    every row (index ``i`` is the same round). ``gated`` rows enter the
    geomean, ``controls`` are judged as a family; ``bar`` None leaves the
    geomean out of the stopping rule. ``max_excluded`` caps the outlier
    rounds (default ``cfg.max_rounds // 5``; 0 turns the screen off).
    """
    keys = list(rounds)
    lengths = {len(rounds[k]) for k in keys}
    if len(lengths) != 1:
        raise ConfigError(f"rows have different round counts {sorted(lengths)}: rows must share rounds")
    missing = [k for k in [*gated, *controls] if k not in rounds]
    if missing or not gated:
        raise ConfigError(f"decide_bench: gated rows needed, unknown rows {missing}")
    total = lengths.pop()
    limit = cfg.max_rounds // 5 if max_excluded is None else max_excluded
    excluded: tuple[Exclusion, ...] = ()
    if limit > 0 and total:
        orders = [r.order for r in rounds[keys[0]]]
        logs = {k: [math.log(r.base_ms / r.cand_ms) for r in rounds[k]] for k in keys}
        excluded = screen(logs, orders, cfg.resolution, limit)
    orders_all = [r.order for r in rounds[keys[0]]]
    out = set(paired_out(excluded, orders_all))
    valid = {k: [r for i, r in enumerate(rounds[k]) if i not in out] for k in keys}
    n = total - len(out)
    rows = {k: decide(valid[k], cfg) for k in keys}
    est = None
    side = None
    if n >= 2:
        est = geomean([rows[k].estimate for k in gated])  # type: ignore[misc]
        side = None if bar is None else bar_side(est, bar)
    fam = {}
    if n >= 2 and controls:
        fam = family_classes({k: rows[k].estimate for k in controls},  # type: ignore[misc]
                             {k: rows[k].classification for k in controls}, cfg)  # type: ignore[misc]
    open_rows = [k for k in keys if rows[k].continue_]
    open_controls = [k for k, c in fam.items() if c == AMBIGUOUS]
    capped = n >= cfg.max_rounds
    if open_rows and not cfg.is_look(n):
        upcoming = next(k for k in cfg.looks() if k > n)
        go, reason = True, (f"{n} of {cfg.min_rounds} minimum valid rounds" if n < cfg.min_rounds
                            else f"{n} valid rounds: between looks, the next at {upcoming}")
    elif open_rows:
        go, reason = True, f"{len(open_rows)} of {len(keys)} rows undecided at {n} valid rounds"
    elif side == STRADDLES and not capped:
        assert est is not None
        go, reason = True, (f"every row decided, but the geomean {est.speedup:.4f} [{est.lower:.4f}, {est.upper:.4f}] "
                            f"straddles the bar {bar}: continuing to the next look")
    elif open_controls and not capped:
        go, reason = True, (f"every row decided, but control(s) {', '.join(open_controls)} are not decided at the "
                            f"family level ({len(fam)} controls): continuing to the next look")
    else:
        go = False
        ambiguous = [k for k in keys if rows[k].classification == AMBIGUOUS]
        left = ([f"{len(ambiguous)} row(s) AMBIGUOUS"] if ambiguous else []) + \
               ([f"the geomean straddling the bar {bar}"] if side == STRADDLES else []) + \
               ([f"control(s) {', '.join(open_controls)} undecided" + (" as a family" if len(fam) > 1 else "")]
                if open_controls else [])
        reason = (f"stopped at the cap of {cfg.max_rounds} valid rounds with {' and '.join(left)}" if left
                  else f"every row, the geomean and the controls decided at {n} valid rounds")
    notes = tuple(f"round {e.round + 1} excluded as an outlier of {e.row}: log-ratio {e.log_ratio:+.4f}, "
                  f"{e.deviation:+.4f} from its order's other rounds (t = {e.t:.1f}, p = {e.p_value:.1e} < "
                  f"{e.threshold:.1e}); {_pair_note(e.round, orders_all)}" for e in excluded)
    return BenchDecision(go, rows, est, side, fam, excluded, n, reason, total, notes, tuple(sorted(out)))


def partner(index: int, orders: Sequence[str]) -> int | None:
    """The AB/BA partner of round ``index``: rounds 2k and 2k + 1 form a crossover pair when their orders differ
    (the benchmark alternates AB, BA, ... from round 0); None when the orders do not pair that way."""
    other = index + 1 if index % 2 == 0 else index - 1
    if other < len(orders) and orders[other] == orders[index]:
        return None
    return other


def paired_out(excluded: Sequence[Exclusion], orders: Sequence[str]) -> tuple[int, ...]:
    """The recorded rounds that do not count: each outlier and its AB/BA partner (``partner``), so the valid
    rounds stay whole crossover pairs and the loop reruns the pair; a partner not yet run is taken out when it
    is recorded."""
    out = set()
    for e in excluded:
        out.add(e.round)
        other = partner(e.round, orders)
        if other is not None and other < len(orders):
            out.add(other)
    return tuple(sorted(out))


def _pair_note(index: int, orders: Sequence[str]) -> str:
    other = partner(index, orders)
    if other is None:
        return "a further round replaces it"
    if other < len(orders):
        return f"its AB/BA partner, round {other + 1}, goes with it, and a further pair replaces both"
    return f"its AB/BA partner, round {other + 1} (the next), goes with it, and a further pair replaces both"
