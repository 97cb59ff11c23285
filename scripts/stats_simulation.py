#!/usr/bin/env python
"""Monte-Carlo check of kgate's A/B benchmark statistics at their defaults.

For each between-round CV, with and without a linear drift, it simulates
interleaved AB/BA rounds and runs the real adaptive controller
(``kgate.stats.decide``: look at 5 rounds, then every 2 more, cap 15) on

* an A/A comparison (no effect): the false-positive rate is the fraction of
  rows classified FAST or SLOW;
* a true speedup of ``--effect`` (default 2 %): the power is the fraction
  classified FAST.

It also runs the naive design that interleaving replaces: all baseline rounds
then all candidate rounds (``--min-rounds`` each), Welch t-test on the log
round statistics at 95 %; its A/A "change" rate shows what drift does to it.

Model of the log round statistic of an arm in round ``i``::

    ln t = ln mu_arm + g * time + u_i + e_arm,i
    u_i ~ N(0, rho * cv^2)        (shared by both arms of the round)
    e   ~ N(0, (1 - rho) * cv^2)  (per arm)

``time`` is in rounds: the first arm of round ``i`` runs at ``i + 0.25``, the
second at ``i + 0.75``; ``g`` is ``--drift-per-round``. ``cv`` is thus the
between-round CV of one arm's round statistic, and ``rho`` the correlation of
the two arms within a round (0, the default, gives pairing no credit).

The distribution-free check is not part of the decision, so it is switched
off here for speed. Writes a JSON file and prints a table.

Example::

    python scripts/stats_simulation.py --trials 2000 --seed 20240601 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kgate.stats import (  # noqa: E402
    AB,
    AMBIGUOUS,
    BA,
    FAST,
    SAME,
    SLOW,
    ControllerConfig,
    Round,
    decide,
)

SCHEMA = "kgate.stats_simulation/1"


@dataclass(frozen=True, slots=True)
class Cell:
    """One simulated condition."""

    cv: float
    drift_per_round: float
    effect: float
    rho: float
    trials: int
    seed: int
    index: int
    min_rounds: int
    max_rounds: int
    resolution: float
    direction_only: bool
    sequential: str


def _config(cell: Cell) -> ControllerConfig:
    return ControllerConfig(
        min_rounds=cell.min_rounds,
        max_rounds=cell.max_rounds,
        resolution=cell.resolution,
        require_point_beyond_resolution=not cell.direction_only,
        sequential=cell.sequential,
        distribution_free=False,
    )


def _rounds(rng: np.random.Generator, cell: Cell) -> list[Round]:
    """``max_rounds`` interleaved rounds of one simulated row."""
    n = cell.max_rounds
    shared = rng.normal(0.0, math.sqrt(cell.rho) * cell.cv, n)
    own = rng.normal(0.0, math.sqrt(1.0 - cell.rho) * cell.cv, (2, n))
    out = []
    for i in range(n):
        order = AB if i % 2 == 0 else BA
        t_base = i + (0.25 if order == AB else 0.75)
        t_cand = i + (0.75 if order == AB else 0.25)
        ln_base = cell.drift_per_round * t_base + shared[i] + own[0, i]
        ln_cand = -math.log1p(cell.effect) + cell.drift_per_round * t_cand + shared[i] + own[1, i]
        out.append(Round(base_ms=math.exp(ln_base), cand_ms=math.exp(ln_cand), order=order))
    return out


def _naive_changed(rng: np.random.Generator, cell: Cell) -> bool:
    """Sequential design: m baseline rounds, then m candidate rounds; Welch t."""
    m = cell.min_rounds
    times_base = np.arange(m) + 0.5
    times_cand = m + np.arange(m) + 0.5
    ln_base = cell.drift_per_round * times_base + rng.normal(0.0, cell.cv, m)
    ln_cand = (
        -math.log1p(cell.effect) + cell.drift_per_round * times_cand + rng.normal(0.0, cell.cv, m)
    )
    va = ln_base.var(ddof=1) / m
    vb = ln_cand.var(ddof=1) / m
    t = (ln_base.mean() - ln_cand.mean()) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (m - 1) + vb**2 / (m - 1))
    return bool(2.0 * sps.t.sf(abs(t), dof) < 0.05)


def run_cell(cell: Cell) -> dict[str, object]:
    """Simulate ``cell.trials`` rows; return the outcome fractions."""
    rng = np.random.default_rng(np.random.SeedSequence([cell.seed, cell.index]))
    cfg = _config(cell)
    counts = {FAST: 0, SAME: 0, SLOW: 0, AMBIGUOUS: 0}
    rounds_used = []
    naive = 0
    for _ in range(cell.trials):
        rounds = _rounds(rng, cell)
        n = cfg.min_rounds
        while True:
            dec = decide(rounds[:n], cfg)
            if not dec.continue_:
                break
            n = min(n + cfg.step, cfg.max_rounds)  # decide() continues between looks
        assert dec.classification is not None
        counts[dec.classification] += 1
        rounds_used.append(n)
        naive += _naive_changed(rng, cell)
    t = cell.trials
    frac = {k.lower(): v / t for k, v in counts.items()}
    return {
        "cv": cell.cv,
        "drift_per_round": cell.drift_per_round,
        "effect": cell.effect,
        "rho": cell.rho,
        "trials": t,
        **frac,
        "fast_or_slow": (counts[FAST] + counts[SLOW]) / t,
        "mean_rounds": float(np.mean(rounds_used)),
        "at_cap": float(np.mean(np.array(rounds_used) >= cell.max_rounds)),
        "naive_sequential_changed": naive / t,
        "mc_se_max": math.sqrt(0.25 / t),
    }


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", required=True, type=Path, help="where to write the results")
    p.add_argument("--trials", type=int, default=2000, help="rows per condition")
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--cvs", type=float, nargs="+", default=[0.005, 0.01, 0.02, 0.03])
    p.add_argument("--effect", type=float, default=0.02, help="true speedup - 1 for power")
    p.add_argument("--drift-per-round", type=float, default=0.002, help="log drift per round")
    p.add_argument("--rho", type=float, default=0.0, help="within-round arm correlation")
    p.add_argument("--min-rounds", type=int, default=5)
    p.add_argument("--max-rounds", type=int, default=15)
    p.add_argument("--resolution", type=float, default=0.02)
    p.add_argument(
        "--direction-only",
        action="store_true",
        help="FAST/SLOW without the point-beyond-resolution rule",
    )
    p.add_argument(
        "--sequential",
        choices=("pocock", "none"),
        default="pocock",
        help="per-look interval level: Pocock repeated CI (default) or the plain level",
    )
    p.add_argument("--format", choices=("text", "markdown"), default="text")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = p.parse_args(argv)
    if args.trials < 1:
        p.error("--trials must be >= 1")
    if not 0.0 <= args.rho < 1.0:
        p.error("--rho must be in [0, 1)")
    if args.effect <= 0:
        p.error("--effect must be > 0")
    return args


COLUMNS = (
    "CV",
    "drift/round",
    "A/A FPR",
    "A/A SAME",
    "A/A AMBIG",
    "A/A rounds",
    "power",
    "effect AMBIG",
    "effect SAME",
    "effect rounds",
    "naive A/A",
)


def _table_rows(rows: list[dict[str, object]]) -> list[list[str]]:
    keyed = {(r["cv"], r["drift_per_round"], r["effect"] > 0): r for r in rows}
    out = []
    for cv, drift, has_effect in sorted(keyed):
        if has_effect:
            continue
        aa = keyed[(cv, drift, False)]
        fx = keyed[(cv, drift, True)]
        out.append(
            [
                f"{cv:.1%}",
                f"{drift:.2%}",
                f"{aa['fast_or_slow']:.3f}",
                f"{aa['same']:.3f}",
                f"{aa['ambiguous']:.3f}",
                f"{aa['mean_rounds']:.1f}",
                f"{fx['fast']:.3f}",
                f"{fx['ambiguous']:.3f}",
                f"{fx['same']:.3f}",
                f"{fx['mean_rounds']:.1f}",
                f"{aa['naive_sequential_changed']:.3f}",
            ]
        )
    return out


def _table(rows: list[dict[str, object]], effect: float, fmt: str) -> str:
    body = _table_rows(rows)
    if fmt == "markdown":
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---:|" * len(COLUMNS)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
    else:
        widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(COLUMNS)]
        lines = ["  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths))]
        lines.append("-" * len(lines[0]))
        lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in body]
    lines.append("")
    lines.append(
        f"FPR = fraction FAST or SLOW with no effect; power = fraction FAST at a true "
        f"{effect:.1%} speedup; naive A/A = baseline rounds then candidate rounds, Welch t "
        "at 95 %, calling a change"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    started = time.perf_counter()
    cells = []
    for cv in args.cvs:
        for drift in (0.0, args.drift_per_round):
            for effect in (0.0, args.effect):
                cells.append(
                    Cell(
                        cv=cv,
                        drift_per_round=drift,
                        effect=effect,
                        rho=args.rho,
                        trials=args.trials,
                        seed=args.seed,
                        index=len(cells),
                        min_rounds=args.min_rounds,
                        max_rounds=args.max_rounds,
                        resolution=args.resolution,
                        direction_only=args.direction_only,
                        sequential=args.sequential,
                    )
                )
    if args.workers > 1:
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            rows = list(pool.map(run_cell, cells))
    else:
        rows = [run_cell(c) for c in cells]
    wall = time.perf_counter() - started
    cfg = _config(cells[0])
    result = {
        "schema": SCHEMA,
        "command": [
            "python",
            "scripts/stats_simulation.py",
            *(argv if argv is not None else sys.argv[1:]),
        ],
        "seed": args.seed,
        "trials": args.trials,
        "effect": args.effect,
        "drift_per_round": args.drift_per_round,
        "rho": args.rho,
        "controller": {
            "min_rounds": cfg.min_rounds,
            "max_rounds": cfg.max_rounds,
            "step": cfg.step,
            "confidence": cfg.confidence,
            "resolution": cfg.resolution,
            "require_point_beyond_resolution": cfg.require_point_beyond_resolution,
            "sequential": cfg.sequential,
            "look_confidence": cfg.look_confidence,
        },
        "rows": rows,
        "cells": [asdict(c) for c in cells],
        "wall_s": round(wall, 2),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.json.with_suffix(args.json.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(args.json)
    print(_table(rows, args.effect, args.format))
    print(
        f"seed {args.seed}, {args.trials} trials per cell, rho {args.rho}, "
        f"drift {args.drift_per_round:.2%}/round, {wall:.1f} s; JSON: {args.json}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
