"""The model stage's statistics and gates, from the recorded blocks (pure; tests/test_model_gates.py).

Method
------
Each workload the campaign trains (``dense``, ``varlen``) is a two-sequence crossover like a
bench row: round ``i`` is one block of training steps per arm, the arm that
goes first alternating (AB, BA, ...). A round's statistic per arm is the
block's time per step (ms). Both arms train on the same tokens per step, so
the candidate/baseline tokens/s ratio of a round equals its baseline/candidate
time ratio, which is ``kgate.stats``' speedup. ``stats.decide`` gives the
estimate: the crossover point (the order effect removed) with its Student-t
interval at the per-look confidence of a Pocock repeated confidence interval
for the look schedule ``min, min + 2, ..., max`` blocks (95 % over all looks),
so an interval stays valid whichever look the stage stops at. The same call
classifies the ratio FAST / SAME / SLOW / AMBIGUOUS at the campaign's
resolution; that class is shown, it decides no gate.

Gates (ratio = candidate tokens/s over baseline tokens/s, ``[lo, hi]`` its interval):

* ``dense_tokens_per_s_gain``: pass when ``lo >= 1 + dense_gain_min`` (the
  protocol's "at least 3 % median tokens/s", held by the whole interval);
  fail when ``hi < 1 + dense_gain_min``; inconclusive otherwise.
* ``varlen_tokens_per_s_neutral``: pass when ``lo >= 1 / (1 + varlen_tolerance)``
  (within 2 % or better); fail when ``hi`` is below it; inconclusive otherwise.
* Fewer blocks than ``min`` (the stage's time ran out) make both gates
  inconclusive whatever the interval says; fewer than 2 leave no interval.

Stopping: below ``min`` blocks, continue; at a look, stop once both gates are
decided (pass or fail); stop at ``max`` regardless. On CPU every gate is
evaluated and then shown with status ``skip`` and the CPU note (as bench does):
a CPU run never decides on timings.

Limits: the crossover interval assumes roughly normal log block times and
independent blocks given their order; see docs/statistics.md. A block's time
includes the optimizer step and everything the training step launches, so the
kernel under test is diluted by the rest of the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kgate import stats
from kgate.gates.bench import cpu_skip
from kgate.measure.model_spec import WORKLOADS, ModelThresholds

__all__ = ["WORKLOADS", "ModelThresholds", "block_rounds", "decide_all", "describe", "evaluate", "gate_workload",
           "should_stop"]
from kgate.records import Gate


def block_rounds(recorded: Sequence[dict[str, Any]], workload: str) -> list[stats.Round]:
    """The workload's rounds: per arm the block's time per step (ms) and its SM clock when sampled."""
    out = []
    for r in recorded:
        cell = r["workloads"][workload]
        per_step = {a: cell[a]["block_s"] * 1e3 / cell[a]["steps"] for a in ("base", "cand")}
        clock = {a: (cell[a].get("telemetry") or {}).get("sm_clock_mhz") for a in ("base", "cand")}
        out.append(stats.Round(base_ms=per_step["base"], cand_ms=per_step["cand"], order=r["order"],
                               base_clock_mhz=clock["base"], cand_clock_mhz=clock["cand"]))
    return out


def decide_all(recorded: Sequence[dict[str, Any]], cfg: ModelThresholds) -> dict[str, stats.Decision]:
    ctl = cfg.controller()
    return {w: stats.decide(block_rounds(recorded, w), ctl) for w in cfg.workloads}


def gate_workload(workload: str, decision: stats.Decision, cfg: ModelThresholds, evidence: str) -> Gate:
    """One workload's gate from its decision (see the module docstring for the rule)."""
    bar = cfg.bar(workload)
    if workload == "dense":
        name = "dense_tokens_per_s_gain"
        threshold = f"lower bound of the dense tokens/s ratio (candidate/baseline) >= {bar:.4f} (+{cfg.dense_gain_min:.0%})"
    else:
        name = "varlen_tokens_per_s_neutral"
        threshold = (f"lower bound of the varlen tokens/s ratio (candidate/baseline) >= {bar:.4f} "
                     f"(within {cfg.varlen_tolerance:.0%} or better)")
    n = decision.rounds
    est = decision.estimate
    if est is None:
        return Gate(name, threshold, f"{n} block(s) per arm", "inconclusive", evidence=evidence, unit="x",
                    detail=f"{n} block(s) per arm: an interval needs at least 2 (the minimum is {cfg.min_blocks})")
    value, interval = round(est.speedup, 6), (round(est.lower, 6), round(est.upper, 6))
    text = f"{est.speedup:.4f}x [{est.lower:.4f}, {est.upper:.4f}] over {n} blocks"
    if n < cfg.min_blocks:
        return Gate(name, threshold, value, "inconclusive", evidence=evidence, interval=interval, unit="x",
                    detail=f"only {n} of the minimum {cfg.min_blocks} blocks per arm ran: {text}")
    if est.lower >= bar:
        status, detail = "pass", None
    elif est.upper < bar:
        status, detail = "fail", f"{text}: the whole interval is below {bar:.4f}"
    else:
        status, detail = "inconclusive", f"{text}: the interval straddles {bar:.4f}"
    return Gate(name, threshold, value, status, evidence=evidence, interval=interval, unit="x", detail=detail)


def evaluate(decisions: dict[str, stats.Decision], cfg: ModelThresholds, evidence: str) -> list[Gate]:
    """Each workload's gate (``cfg.workloads``); on CPU each is shown as skip with what it would be."""
    gates = [gate_workload(w, decisions[w], cfg, evidence) for w in cfg.workloads]
    return [cpu_skip(g) for g in gates] if cfg.cpu else gates


def should_stop(decisions: dict[str, stats.Decision], cfg: ModelThresholds) -> tuple[bool, str]:
    """Whether another round of blocks is needed (the rule of the module docstring)."""
    n = min(d.rounds for d in decisions.values())
    ctl = cfg.controller()
    if n >= ctl.max_rounds:
        return True, f"the cap of {ctl.max_rounds} blocks per arm"
    if n < ctl.min_rounds or not ctl.is_look(n):
        return False, f"{n} block(s) per arm; next look at {next(k for k in ctl.looks() if k > n)}"
    raw = [gate_workload(w, decisions[w], cfg, "") for w in cfg.workloads]
    open_ = [g.name for g in raw if g.status not in ("pass", "fail")]
    if open_:
        return False, f"look at {n} blocks: {', '.join(open_)} undecided"
    return True, f"look at {n} blocks: every gate decided"


def describe(workload: str, recorded: Sequence[dict[str, Any]], decision: stats.Decision,
             cfg: ModelThresholds) -> dict[str, Any]:
    """Everything the record keeps about one workload: per-arm distributions, blocks, clocks, the ratio."""
    cells = [r["workloads"][workload] for r in recorded]
    rates = {a: [c[a]["tokens_per_s"] for c in cells] for a in ("base", "cand")}
    est = decision.estimate
    out: dict[str, Any] = {
        "workload": workload,
        "blocks": len(cells),
        "orders": [r["order"] for r in recorded],
        "tokens_per_block": cells[0]["base"]["tokens"] if cells else None,
        "tokens_per_s": {a: stats.tokens_summary(v) for a, v in rates.items() if v},
        "block_tokens_per_s": rates,
        "step_ms": {a: [x for c in cells for x in c[a]["step_ms"]] for a in ("base", "cand")},
        "peak_bytes": {a: max((c[a]["peak_bytes"] for c in cells), default=None) for a in ("base", "cand")},
        "peak_method": cells[0]["base"].get("peak_method") if cells else None,
        "telemetry": [{a: c[a].get("telemetry") for a in ("base", "cand")} for c in cells],
        "loss_last": {a: cells[-1][a]["loss"][-1] if cells else None for a in ("base", "cand")},
        "bar": cfg.bar(workload),
        "decision": decision.as_dict(),
    }
    if est is not None:
        out.update({"ratio": est.speedup, "interval": [est.lower, est.upper], "confidence": est.confidence,
                    "classification": decision.classification,
                    "gain_pct": (est.speedup - 1.0) * 100.0 if math.isfinite(est.speedup) else None})
    return out
