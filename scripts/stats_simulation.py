#!/usr/bin/env python
"""Monte-Carlo check of kgate's A/B benchmark statistics, and the tables of docs/statistics.md.

Every table in docs/statistics.md between ``<!-- stats-simulation:<name>:begin -->``
and ``...:end -->`` is this script's output; one command regenerates them all::

    python scripts/stats_simulation.py --scenario all --trials 2000 --seed 20240601 --write-doc docs/statistics.md

Scenarios (``--scenario``):

* ``default``: one row through the real stopping rule (``kgate.stats.decide_bench``:
  looks at 5, 7, ..., cap 15, outlier screen, worker pairs every ``--every``
  rounds) per between-round CV, with and without a linear drift, on an A/A
  (false-positive rate: the fraction FAST or SLOW) and on a true speedup of
  ``--effect`` (power: the fraction FAST); beside it the naive design that
  interleaving replaces (all baseline rounds, then all candidate rounds, Welch
  t at 95 %). Model of an arm's log round statistic in round ``i``::

      ln t = ln mu_arm + g * time + u_i + e_arm,i
      u_i ~ N(0, rho * cv^2)  (shared by both arms),  e ~ N(0, (1 - rho) * cv^2)

  the first arm of round ``i`` at time ``i + 0.25``, the second at ``i + 0.75``.
* ``variants``: the default table's A/A FPR and power with one setting changed.
* ``direction``, ``straddle``, ``controls``, ``process``, ``outliers``: before and
  after of each rule the statistics changed (scripts/stats_scenarios.py states
  the model and the rules as they were);
* ``records``: the figures of the real H200 A/A records (tests/data/bench/),
  recomputed from their rounds (no simulation); ``replicated``: the same for the
  A/A records timed with a fresh worker pair every round;
* ``summary``: each error rate, simulated and from the records, side by side
  (runs every scenario it quotes); ``all``: every table.

The distribution-free check is not part of any decision and is switched off
for speed. Writes a JSON file when ``--json`` is given and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import stats_scenarios as sc  # noqa: E402

from kgate import stats  # noqa: E402

SCHEMA = "kgate.stats_simulation/2"
SEED = 20240601
CVS = (0.005, 0.01, 0.02, 0.03)
BAR = 1.08
SCENARIOS = ("default", "variants", "direction", "straddle", "controls", "process", "outliers", "records", "replicated",
             "summary")


# the default table: one row, drift and shared noise


@dataclass(frozen=True, slots=True)
class Cell:
    """One condition of the default table."""

    cv: float
    drift_per_round: float
    effect: float
    rho: float = 0.0
    every: int | None = 1
    direction_only: bool = False
    sequential: str = "pocock"
    min_rounds: int = 5
    max_rounds: int = 15
    resolution: float = 0.02

    def name(self) -> str:
        return (f"cv={self.cv} drift={self.drift_per_round} effect={self.effect} rho={self.rho} every={self.every} "
                f"direction_only={self.direction_only} sequential={self.sequential}")

    def config(self) -> stats.ControllerConfig:
        return stats.ControllerConfig(min_rounds=self.min_rounds, max_rounds=self.max_rounds,
                                      resolution=self.resolution,
                                      require_point_beyond_resolution=not self.direction_only,
                                      sequential=self.sequential, distribution_free=False)


def cell_rounds(rng: np.random.Generator, cell: Cell) -> list[stats.Round]:
    """Interleaved rounds of one simulated row, enough for the cap and the excluded rounds."""
    n = cell.max_rounds + cell.max_rounds // 5
    shared = rng.normal(0.0, math.sqrt(cell.rho) * cell.cv, n)
    own = rng.normal(0.0, math.sqrt(1.0 - cell.rho) * cell.cv, (2, n))
    out = []
    for i in range(n):
        order = stats.AB if i % 2 == 0 else stats.BA
        t_base = i + (0.25 if order == stats.AB else 0.75)
        t_cand = i + (0.75 if order == stats.AB else 0.25)
        ln_base = cell.drift_per_round * t_base + shared[i] + own[0, i]
        ln_cand = -math.log1p(cell.effect) + cell.drift_per_round * t_cand + shared[i] + own[1, i]
        out.append(stats.Round(math.exp(ln_base), math.exp(ln_cand), order,
                               block=None if cell.every is None else i // cell.every))
    return out


def naive_changed(rng: np.random.Generator, cell: Cell) -> bool:
    """Sequential design: m baseline rounds, then m candidate rounds; Welch t at 95 %."""
    m = cell.min_rounds
    ln_base = cell.drift_per_round * (np.arange(m) + 0.5) + rng.normal(0.0, cell.cv, m)
    ln_cand = -math.log1p(cell.effect) + cell.drift_per_round * (m + np.arange(m) + 0.5) + rng.normal(0.0, cell.cv, m)
    return bool(sps.ttest_ind(ln_base, ln_cand, equal_var=False).pvalue < 0.05)


def run_cell(cell: Cell, trials: int, seed: int) -> dict[str, Any]:
    """``trials`` rows of one condition through ``decide_bench``; the outcome fractions."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(cell.name().encode())]))
    cfg = cell.config()
    counts = dict.fromkeys((stats.FAST, stats.SAME, stats.SLOW, stats.AMBIGUOUS), 0)
    used, naive = [], 0
    for _ in range(trials):
        rounds = cell_rounds(rng, cell)
        n = cfg.min_rounds
        while True:
            dec = stats.decide_bench({"row": rounds[:n]}, cfg, gated=["row"])
            if not dec.continue_:
                break
            n += 1
        counts[dec.rows["row"].classification] += 1  # type: ignore[index]
        used.append(n)
        naive += naive_changed(rng, cell)
    frac = {k.lower(): v / trials for k, v in counts.items()}
    return {**asdict(cell), "trials": trials, **frac, "fast_or_slow": frac["fast"] + frac["slow"],
            "mean_rounds": float(np.mean(used)), "naive_sequential_changed": naive / trials}


# the scenarios' conditions


def scenario_specs(name: str, args: argparse.Namespace) -> list[Any]:
    """The conditions of one scenario: ``Cell`` for default and variants, ``sc.Spec`` otherwise."""
    if name == "default":
        return [Cell(cv, drift, effect, args.rho, args.every) for cv in args.cvs
                for drift in (0.0, args.drift_per_round) for effect in (0.0, args.effect)]
    if name == "variants":
        return [replace(Cell(cv, 0.0, effect, every=args.every), **over) for _, over, effect_v in VARIANTS
                for cv in CVS for effect in (0.0, effect_v)]
    root2 = math.sqrt(2.0)
    if name == "direction":
        return [sc.Spec("direction", f"cv={cv} {rule} effect={effect}", (cv * root2,), effect=effect, every=None,
                        screen=False, direction=None if rule == "point" else rule)
                for cv in CVS for rule in ("then", "now", "point") for effect in (1.0, 1.02)]
    if name == "straddle":
        sds = tuple(sc.row_sds("h200_identity_host_ahead", sc.roles(sc.load_run("h200_identity_host_ahead")[0])[0])
                    .values())
        return [sc.Spec("straddle", f"g={g} {rule}", sds, effect=g, bar=BAR, **kw)
                for g in (1.08, 1.09, 1.10) for rule, kw in RULE_KW.items()]
    if name == "controls":
        record = sc.load_run("h200_identity_rearm")[0]
        gated, controls = sc.roles(record)
        sds = sc.row_sds("h200_identity_rearm")
        noise = {f"cv={cv}": ((cv * root2,) * len(gated), (cv * root2,) * len(controls)) for cv in (0.01, 0.02, 0.03)}
        noise["rearm x4"] = (tuple(4 * sds[k] for k in gated), tuple(4 * sds[k] for k in controls))
        out = []
        for label, (g, c) in noise.items():
            for m in (2, 4) if label in ("cv=0.02", "cv=0.03") else (2,):
                cs = (c * 2)[:m]
                out += [sc.Spec("controls", f"{label} m={m} {rule}", g, effect=1.12, controls=cs, **kw)
                        for rule, kw in RULE_KW.items()]
        return out
    if name == "process":
        return [sc.Spec("process", f"sp={sp} every={every} effect={effect}", (0.01 * root2,), effect=effect,
                        process_sd=sp, every=every)
                for sp in (0.0, 0.0025, 0.005) for every in (None, 1, 2, 3) for effect in (1.0, 1.04)]
    if name == "outliers":
        return [sc.Spec("outliers", f"share={share} screen={screen} effect={effect}", (0.01 * root2,), effect=effect,
                        outliers=share, every=1, screen=screen)
                for share in (0.0, 0.05) for screen in (False, True) for effect in (1.0, 1.04)]
    return []


#: before (the loop and gates as they were, one worker pair) and now (a fresh worker pair every round; with no
#: process offset in these scenarios, the same interval as one pair: the rules alone differ)
RULE_KW: dict[str, dict[str, Any]] = {"then": {"rule": "then"}, "now": {"every": 1}}

#: the variants table: (flag as shown, Cell overrides, effect for the power column)
VARIANTS = (("defaults", {}, 0.02), ("`--sequential none` (plain 95 % every look)", {"sequential": "none"}, 0.02),
            ("`--direction-only` (no point rule)", {"direction_only": True}, 0.02),
            ("`--rho 0.5` (half the round noise shared by both arms)", {"rho": 0.5}, 0.02),
            ("`--effect 0.04` (power at a true 4 % speedup)", {}, 0.04))


def _job(job: tuple[str, Any, int, int]) -> tuple[str, str, dict[str, Any]]:
    name, spec, trials, seed = job
    if isinstance(spec, Cell):
        return name, spec.name(), run_cell(spec, trials, seed)
    return name, spec.cell, sc.run_spec(spec, trials, seed)


def simulate(names: list[str], args: argparse.Namespace) -> dict[str, dict[str, dict[str, Any]]]:
    """Results by scenario and condition."""
    jobs = [(n, s, args.trials, args.seed) for n in names for s in scenario_specs(n, args)]
    if args.workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            done = list(pool.map(_job, jobs))
    else:
        done = [_job(j) for j in jobs]
    out: dict[str, dict[str, dict[str, Any]]] = {n: {} for n in names}
    for name, key, res in done:
        out[name][key] = res
    return out


# tables


def fmt(v: float) -> str:
    return f"{v:.3f}"


def table(header: list[str], body: list[list[str]], style: str) -> str:
    if style == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header)))
                 + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    return "\n".join(lines + ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in body])


def default_table(res: dict[str, dict[str, Any]], args: argparse.Namespace) -> tuple[list[str], list[list[str]]]:
    header = ["CV", "drift/round", "A/A FPR", "A/A SAME", "A/A AMBIG", "A/A rounds", "power", "effect AMBIG",
              "effect SAME", "effect rounds", "naive A/A"]
    body = []
    for cv in args.cvs:
        for drift in (0.0, args.drift_per_round):
            aa = res[Cell(cv, drift, 0.0, args.rho, args.every).name()]
            fx = res[Cell(cv, drift, args.effect, args.rho, args.every).name()]
            body.append([f"{cv:.1%}", f"{drift:.2%}", fmt(aa["fast_or_slow"]), fmt(aa["same"]), fmt(aa["ambiguous"]),
                         f"{aa['mean_rounds']:.1f}", fmt(fx["fast"]), fmt(fx["ambiguous"]), fmt(fx["same"]),
                         f"{fx['mean_rounds']:.1f}", fmt(aa["naive_sequential_changed"])])
    return header, body


def variants_table(res: dict[str, dict[str, Any]], args: argparse.Namespace) -> tuple[list[str], list[list[str]]]:
    header = ["flag", "CV 1 % A/A FPR", "CV 3 % A/A FPR", "power at CV 0.5 / 1 / 2 / 3 % (no drift)"]
    body = []
    for label, over, effect in VARIANTS:
        def get(cv: float, eff: float, key: str, over: dict = over) -> float:
            return res[replace(Cell(cv, 0.0, eff, every=args.every), **over).name()][key]
        body.append([label, fmt(get(0.01, 0.0, "fast_or_slow")), fmt(get(0.03, 0.0, "fast_or_slow")),
                     " / ".join(fmt(get(cv, effect, "fast")) for cv in CVS)])
    return header, body


RULES = {"then": "before", "now": "now"}


def direction_table(res: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["CV", "rule", "A/A FAST or SLOW", "A/A SAME", "power at 2 %"]
    label = {"then": "direction-only as coded before (FAST on lo > 1)", "now": "direction-only as stated (now)",
             "point": "point rule (default)"}
    return header, [[f"{cv:.1%}", label[rule], fmt(res[f"cv={cv} {rule} effect=1.0"]["fast_or_slow"]),
                     fmt(res[f"cv={cv} {rule} effect=1.0"]["same"]), fmt(res[f"cv={cv} {rule} effect=1.02"]["fast"])]
                    for cv in CVS for rule in ("then", "now", "point")]


def straddle_table(res: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["true geomean", "rule", "GO (geomean gate pass)", "fail", "inconclusive", "rounds"]
    body = []
    for g in (1.08, 1.09, 1.10):
        for rule in RULE_KW:
            r = res[f"g={g} {rule}"]
            body.append([f"{g:.2f}" + (" (the bar)" if g == BAR else ""), RULES[rule], fmt(r["geomean_pass"]),
                         fmt(r["geomean_fail"]), fmt(r["geomean_inconclusive"]), f"{r['mean_rounds']:.1f}"])
    return header, body


def controls_table(res: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["round noise", "controls", "rule", "a control called moved", "controls pass", "inconclusive", "rounds"]
    body = []
    for key in sorted({k.rsplit(" ", 1)[0] for k in res}, key=lambda k: (k.startswith("rearm"), k)):
        noise, m = key.split(" m=")
        for rule in RULE_KW:
            r = res[f"{key} {rule}"]
            shown = f"CV {float(noise[3:]):.0%}" if noise.startswith("cv=") else "re-arm A/A x 4"
            body.append([shown, m, RULES[rule], fmt(r["controls_fail"]), fmt(r["controls_pass"]),
                         fmt(r["controls_inconclusive"]), f"{r['mean_rounds']:.1f}"])
    return header, body


def process_table(res: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["offset per process", "worker pairs", "A/A FAST or SLOW", "A/A SAME", "A/A 95 % interval excludes 1",
              "power at 4 %", "A/A rounds"]
    body = []
    for sp in (0.0, 0.0025, 0.005):
        for every in (None, 1, 2, 3):
            aa, fx = (res[f"sp={sp} every={every} effect={e}"] for e in (1.0, 1.04))
            design = "one for the run (before)" if every is None else f"fresh every {every} round{'s' * (every > 1)}"
            body.append([f"{sp:.2%}", design, fmt(aa["fast_or_slow"]), fmt(aa["same"]), fmt(aa["excludes_1_at_95"]),
                         fmt(fx["fast"]), f"{aa['mean_rounds']:.1f}"])
    return header, body


def outliers_table(res: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = ["rounds at +20 %", "outlier screen", "A/A SAME", "A/A FAST or SLOW", "power at 4 %",
              "A/A runs with a round excluded", "A/A rounds"]
    body = []
    for share in (0.0, 0.05):
        for screen in (False, True):
            aa, fx = (res[f"share={share} screen={screen} effect={e}"] for e in (1.0, 1.04))
            body.append([f"{share:.0%}", "on (now)" if screen else "off (before)", fmt(aa["same"]),
                         fmt(aa["fast_or_slow"]), fmt(fx["fast"]), fmt(aa["with_excluded"]), f"{aa['mean_rounds']:.1f}"])
    return header, body


def records_table(fig: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["A/A run", "rounds", "rows", "intervals excluding 1 at 95 %", "at the per-look level",
              "rows FAST or SLOW, then -> now", "controls gate, then -> now", "outlier rounds now",
              "direction-only FAST or SLOW, then -> now"]
    body = [[f"`{r['run']}`", str(r["rounds"]), str(r["rows"]), str(r["excluding_1_at_95"]),
             str(r["excluding_1_at_look"]), f"{r['moved_then']} -> {r['moved_now']}",
             f"{r['controls_then']} -> {r['controls_now']}",
             ", ".join(f"round {i + 1}" for i in r["excluded_rounds"]) or "none",
             f"{r['direction_moved_then']} -> {r['direction_moved_now']}"] for r in fig["runs"]]
    t = fig["total"]
    look = fig["runs"][0]["look_confidence"]
    body.append(["all", "", str(t["rows"]),
                 f"{t['excluding_1_at_95']} (expected {0.05 * t['rows']:.1f}, p = {t['p_95']:.1g})",
                 f"{t['excluding_1_at_look']} (expected {(1 - look) * t['rows']:.1f}, p = {t['p_look']:.1g})",
                 f"{t['moved_then']} -> {t['moved_now']}",
                 f"fail in {t['controls_fail_then']} -> {t['controls_fail_now']} of {t['runs']}", str(t["excluded_rounds"]),
                 f"{t['direction_moved_then']} -> {t['direction_moved_now']}"])
    return header, body


def replicated_table(fig: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["A/A run", "rounds", "worker pairs", "rows", "intervals excluding 1 at 95 %", "at the per-look level",
              "rows FAST or SLOW", "rows SAME / AMBIGUOUS", "row-rounds whose two processes differ beyond the resolution",
              "largest ratio of two processes in a round"]
    body = [[f"`{r['run']}`", str(r["rounds"]), str(r["pairs"]), str(r["rows"]),
             f"{r['excluding_1_at_95']} (expected {r['expected_at_95']:.1f})", str(r["excluding_1_at_look"]),
             str(r["moved"]), f"{r['same']} / {r['ambiguous']}",
             f"{r['row_rounds_beyond_resolution']} of {r['row_rounds']}", f"{r['largest_process_ratio']:.3f}"]
            for r in fig["replicated"]["runs"]]
    return header, body


#: the summary: (error rate, simulated (scenario, condition, figure) before and now (None: no before), records figure)
SUMMARY = (
    ("A/A row called FAST or SLOW, CV 1 %, defaults", None, ("default", Cell(0.01, 0.0, 0.0).name(), "fast_or_slow"),
     ("moved_then", "moved_now", "rows")),
    ("A/A row interval excluding 1 at 95 %, 0.5 % offset per process",
     ("process", "sp=0.005 every=None effect=1.0", "excludes_1_at_95"), ("process", "sp=0.005 every=1 effect=1.0",
                                                                       "excludes_1_at_95"),
     ("excluding_1_at_95", None, "rows")),
    ("GO at a true geomean exactly at the bar 1.08 (wrong GO)", ("straddle", "g=1.08 then", "geomean_pass"),
     ("straddle", "g=1.08 now", "geomean_pass"), None),
    ("GO at a true geomean of 1.09 against the bar 1.08", ("straddle", "g=1.09 then", "geomean_pass"),
     ("straddle", "g=1.09 now", "geomean_pass"), None),
    ("an unchanged control called moved, 2 controls, re-arm A/A noise x 4", ("controls", "rearm x4 m=2 then",
                                                                            "controls_fail"),
     ("controls", "rearm x4 m=2 now", "controls_fail"), ("controls_fail_then", "controls_fail_now", "runs")),
    ("A/A SAME with 5 % of rounds at +20 %, CV 1 %", ("outliers", "share=0.05 screen=False effect=1.0", "same"),
     ("outliers", "share=0.05 screen=True effect=1.0", "same"), None),
    ("power at 4 % with 5 % of rounds at +20 %, CV 1 %", ("outliers", "share=0.05 screen=False effect=1.04", "fast"),
     ("outliers", "share=0.05 screen=True effect=1.04", "fast"), None),
    ("direction-only rule: A/A row called FAST or SLOW, CV 1 %", ("direction", "cv=0.01 then effect=1.0",
                                                                   "fast_or_slow"),
     ("direction", "cv=0.01 now effect=1.0", "fast_or_slow"), ("direction_moved_then", "direction_moved_now", "rows")),
)


def summary_needs() -> list[str]:
    return sorted({ref[0] for _, then, now, _ in SUMMARY for ref in (then, now) if ref})


def summary_table(res: dict[str, dict[str, dict[str, Any]]], fig: dict[str, Any], sim: bool = True
                  ) -> tuple[list[str], list[list[str]]]:
    """The summary's rows; ``sim`` False leaves the simulated column empty (the records' column alone)."""
    header = ["error rate", "simulation, before -> now", "H200 A/A records, as decided then -> now"]
    body = []
    t = fig["total"]
    for label, then, now, rec in SUMMARY:
        shown_sim = ""
        if sim:
            shown_sim = fmt(res[now[0]][now[1]][now[2]])
            if then:
                shown_sim = f"{fmt(res[then[0]][then[1]][then[2]])} -> {shown_sim}"
        if rec is None:
            shown = "no record"
        elif rec[1] is None:
            rep = fig["replicated"]["runs"]
            shown = (f"{t[rec[0]]} of {t[rec[2]]} with one worker pair per run; "
                     f"{sum(r[rec[0]] for r in rep)} of {sum(r[rec[2]] for r in rep)} with a fresh pair every round")
        else:
            shown = f"{t[rec[0]]} -> {t[rec[1]]} of {t[rec[2]]}"
        body.append([label, shown_sim, shown])
    return header, body


# output


def blocks(names: list[str], res: dict[str, Any], fig: dict[str, Any] | None, args: argparse.Namespace,
           style: str) -> dict[str, str]:
    makers = {"default": lambda: default_table(res["default"], args),
              "variants": lambda: variants_table(res["variants"], args),
              "direction": lambda: direction_table(res["direction"]), "straddle": lambda: straddle_table(res["straddle"]),
              "controls": lambda: controls_table(res["controls"]), "process": lambda: process_table(res["process"]),
              "outliers": lambda: outliers_table(res["outliers"]), "records": lambda: records_table(fig),  # type: ignore[arg-type]
              "replicated": lambda: replicated_table(fig),  # type: ignore[arg-type]
              "summary": lambda: summary_table(res, fig)}  # type: ignore[arg-type]
    out = {}
    for name in names:
        header, body = makers[name]()
        meta = ("recomputed from the recorded rounds; no simulation" if name in ("records", "replicated") else
                f"seed {args.seed}, {args.trials} trials per condition")
        out[name] = f"Command: `{command(args)}` ({meta})\n\n{table(header, body, style)}"
    return out


def command(args: argparse.Namespace) -> str:
    return (f"python scripts/stats_simulation.py --scenario all --trials {args.trials} --seed {args.seed} "
            "--write-doc docs/statistics.md")


def write_doc(path: Path, made: dict[str, str]) -> None:
    """Replace each scenario's marked block in ``path`` (the markers must exist)."""
    text = path.read_text()
    for name, block in made.items():
        begin, end = f"<!-- stats-simulation:{name}:begin -->", f"<!-- stats-simulation:{name}:end -->"
        rx = re.compile(re.escape(begin) + r"\n(.*?\n)?" + re.escape(end), re.S)
        if not rx.search(text):
            raise SystemExit(f"{path}: no block {begin} ... {end}")
        text = rx.sub(lambda m, new=f"{begin}\n{block}\n{end}": new, text)
    path.write_text(text)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="default")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--write-doc", type=Path, help="replace the scenarios' tables in this file (docs/statistics.md)")
    p.add_argument("--trials", type=int, default=2000, help="simulated runs per condition")
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--cvs", type=float, nargs="+", default=list(CVS), help="default scenario: between-round CVs")
    p.add_argument("--effect", type=float, default=0.02, help="default scenario: true speedup - 1 for power")
    p.add_argument("--drift-per-round", type=float, default=0.002, help="default scenario: log drift per round")
    p.add_argument("--rho", type=float, default=0.0, help="default scenario: within-round arm correlation")
    p.add_argument("--every", type=lambda v: None if v == "none" else int(v), default=1,
                   help="default scenario: rounds per worker pair ('none': one pair for the run)")
    p.add_argument("--format", choices=("text", "markdown"), default="text")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    args = p.parse_args(argv)
    if args.trials < 1:
        p.error("--trials must be >= 1")
    if not 0.0 <= args.rho < 1.0:
        p.error("--rho must be in [0, 1)")
    if args.effect <= 0:
        p.error("--effect must be > 0")
    if args.every is not None and args.every < 1:
        p.error("--every must be >= 1 or 'none'")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    sim = sorted({*(n for n in names if n not in ("records", "replicated", "summary")),
                  *(summary_needs() if "summary" in names else ())})
    res = simulate(sim, args)
    fig = sc.records_figures() if {"records", "replicated", "summary"} & set(names) else None
    made = blocks(names, res, fig, args, "markdown" if args.write_doc else args.format)
    wall = time.perf_counter() - started
    for name in names:
        print(f"## {name}\n\n{made[name]}\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"schema": SCHEMA, "command": ["python", "scripts/stats_simulation.py",
                                                                       *(argv if argv is not None else sys.argv[1:])],
                                         "seed": args.seed, "trials": args.trials, "results": res, "records": fig,
                                         "wall_s": round(wall, 2), "python": platform.python_version(),
                                         "numpy": np.__version__}, indent=2) + "\n")
    if args.write_doc:
        write_doc(args.write_doc, made)
    print(f"seed {args.seed}, {args.trials} trials per condition, {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
