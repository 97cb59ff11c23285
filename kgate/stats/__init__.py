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
  ``< 1`` slower. Every ratio in this package (point, interval, geomean) uses
  this convention.

Modules
-------
* :mod:`kgate.stats.rounds`: the vocabulary (orders, classes), input checks,
  :func:`summarize` and :class:`Round`;
* :mod:`kgate.stats.ratio`: the paired AB/BA crossover estimate of one row
  (:func:`paired_ratio`, :func:`estimate_rounds`), the method that gates;
* :mod:`kgate.stats.distribution_free`: the exact randomisation check reported
  beside it, and :func:`discreteness_floors`;
* :mod:`kgate.stats.classify`: FAST, SAME, SLOW or AMBIGUOUS from an interval;
* :mod:`kgate.stats.sequential`: Pocock's boundary for repeated looks;
* :mod:`kgate.stats.controller`: the adaptive round controller (:func:`decide`);
* :mod:`kgate.stats.geomean`: the geometric mean over rows;
* :mod:`kgate.stats.pairs`: worker processes as a random effect (per-pair means);
* :mod:`kgate.stats.outliers`: the outlier-round rule (:func:`screen`);
* :mod:`kgate.stats.stopping`: the stopping rule of a benchmark over all its
  rows (:func:`decide_bench`: rows, the geomean against the bar, controls as
  a family, outlier rounds).

Each module's docstring states its method and limits; this package only
re-exports the public names.
"""

from kgate.stats.classify import classify
from kgate.stats.controller import ControllerConfig, Decision, decide, rounds_needed
from kgate.stats.distribution_free import DistributionFreeCheck, discreteness_floors
from kgate.stats.geomean import geomean
from kgate.stats.outliers import Exclusion, screen
from kgate.stats.ratio import RatioEstimate, estimate_rounds, paired_ratio
from kgate.stats.rounds import (
                                AB,
                                AMBIGUOUS,
                                BA,
                                FAST,
                                SAME,
                                SLOW,
                                Round,
                                Summary,
                                alternating_orders,
                                summarize,
                                tokens_summary,
)
from kgate.stats.sequential import crossover_information, pocock_constant
from kgate.stats.stopping import ABOVE, BELOW, STRADDLES, BenchDecision, bar_side, decide_bench, family_classes

__all__ = [
    "AB",
    "BA",
    "FAST",
    "SAME",
    "SLOW",
    "AMBIGUOUS",
    "Summary",
    "summarize",
    "tokens_summary",
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
    "Exclusion",
    "screen",
    "ABOVE",
    "BELOW",
    "STRADDLES",
    "BenchDecision",
    "bar_side",
    "decide_bench",
    "family_classes",
]
