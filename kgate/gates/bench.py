"""The benchmark's gates and what its record keeps per row, from the decided rows (pure; tests/test_bench_gates.py).

Method (docs/measurement.md has the rules and their limits): ``to_rounds``
turns the recorded rounds of one row into ``kgate.stats`` rounds (with the
worker pair that timed each), which ``stats.decide_bench`` decides over all
rows (FAST / SAME / SLOW / AMBIGUOUS with an interval; outlier rounds out).
``evaluate`` computes every gate from the decided rows (``RowOutcome``):
geomean lower bound >= bar (upper bound below it: fail; straddling it:
inconclusive, never fail); each dispatch class has an optimized gated row
FAST; no optimized row SLOW beyond ``row_regression_max``; fallback rows
SAME; controls SAME as a family (``stats.family_classes``); no gated row of
each endpoint kind SLOW; peak memory drops by the temporaries on optimized
rows only; autotune picks of unchanged kernels agree (shared through the
kernel cache where their Triton key is equal; else their rows are SAME); the
GPU stayed exclusive (``exclusive_gate``). An AMBIGUOUS row that decides a
gate makes it ``inconclusive``, never ``pass``. On CPU every timed gate is evaluated and shown with status ``skip``
(``cpu_skip``: "CPU timings are not meaningful"); the model gates use it too.
``describe``, ``host_ahead_share`` and ``behind_note`` say what the record and
its reasons keep about each row, ``replication`` and ``calibration`` what it
keeps about the worker pairs and the rows' intervals. The stage that measures the rows is
``kgate.stages.bench``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scipy.stats import binom

from kgate import stats
from kgate.errors import ConfigError
from kgate.gates.processes import process_speeds
from kgate.measure.rows import CPU_TIMING_NOTE
from kgate.records import Gate
from kgate.stats.pairs import pair_estimates

if TYPE_CHECKING:
    from kgate.measure.rows import MeasureSpec, Row


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """The thresholds of the benchmark gates (from the campaign)."""

    bar: float
    class_key: str | None
    classes: tuple[Any, ...]
    resolution: float = 0.02
    row_regression_max: float = 0.03
    memory_tolerance: float = 0.05
    endpoints: tuple[str, ...] = ("dense", "varlen")
    min_rounds: int = 5
    max_rounds: int = 15
    cpu: bool = False
    rounds_per_pair: int | None = 1

    def controller(self) -> stats.ControllerConfig:
        return stats.ControllerConfig(min_rounds=self.min_rounds, max_rounds=self.max_rounds,
                                      resolution=self.resolution)

    @classmethod
    def from_spec(cls, spec: MeasureSpec, gated: list[Row]) -> BenchConfig:
        """The thresholds of ``spec``; ``gated`` (the gated rows) resolve a null ``bench.endpoints``."""
        b = spec.bench
        lo, hi = spec.rounds()
        return cls(bar=spec.bar, class_key=spec.class_key, classes=spec.classes,
                   resolution=float(b.get("resolution", 0.02)),
                   row_regression_max=float(b.get("row_regression_max", 0.03)),
                   memory_tolerance=float(b.get("memory_tolerance", 0.05)),
                   endpoints=spec.endpoints(gated), min_rounds=lo, max_rounds=hi,
                   cpu=spec.cpu, rounds_per_pair=b["rounds_per_worker_pair"])


@dataclass(frozen=True, slots=True)
class RowOutcome:
    """One timed row: its role, path, decision and memory (what the gates read)."""

    key: str
    row: str
    mode: str
    role: str
    kind: str
    klass: Any
    path: str
    decision: stats.Decision
    peak_base: int | None = None
    peak_cand: int | None = None
    expected_bytes: int = 0
    autotune_diff: tuple[str, ...] = field(default=())
    #: every autotuned kernel the row ran, with both arms' picks (:func:`autotune_picks`)
    autotune_picks: tuple[dict[str, Any], ...] = field(default=())

    @property
    def est(self) -> stats.RatioEstimate:
        assert self.decision.estimate is not None
        return self.decision.estimate

    @property
    def cls(self) -> str:
        assert self.decision.classification is not None
        return self.decision.classification

    def text(self) -> str:
        e = self.est
        return f"{self.row} {e.speedup:.4f}x [{e.lower:.4f}, {e.upper:.4f}] {self.cls}"


def _list(rows: list[RowOutcome], n: int = 6) -> str:
    out = "; ".join(r.text() for r in rows[:n])
    return out + (f"; +{len(rows) - n} more" if len(rows) > n else "")


def gate_geomean(gated: list[RowOutcome], cfg: BenchConfig, evidence: str
                 ) -> tuple[Gate, stats.RatioEstimate]:
    est = stats.geomean([o.est for o in gated])
    threshold = f"lower bound of the geomean over {len(gated)} gated rows >= {cfg.bar}"
    ambiguous = [o for o in gated if o.cls == stats.AMBIGUOUS]
    side = stats.bar_side(est, cfg.bar)
    if side == stats.ABOVE:
        status, detail = "pass", None
    elif side == stats.BELOW:
        status, detail = "fail", f"geomean {est.speedup:.4f}x [{est.lower:.4f}, {est.upper:.4f}] is below the bar {cfg.bar}"
    else:
        # the rounds went on while the geomean straddled (stats.decide_bench): here they reached the cap
        status = "inconclusive"
        why = (f"AMBIGUOUS rows decide it: {_list(ambiguous)}" if ambiguous else
               f"every row is decided, but {est.n} rounds (the cap) did not settle the geomean against the bar")
        detail = f"the interval [{est.lower:.4f}, {est.upper:.4f}] straddles the bar {cfg.bar}; {why}"
    return Gate("geomean_speedup", threshold, round(est.speedup, 6), status, evidence=evidence,
                interval=(round(est.lower, 6), round(est.upper, 6)), unit="x", detail=detail), est


def gate_class(klass: Any, gated: list[RowOutcome], cfg: BenchConfig, evidence: str) -> Gate:
    rows = [o for o in gated if o.klass == klass and o.path == "optimized"]
    name = f"class_{cfg.class_key}{klass}_fast"
    threshold = f"at least one optimized gated row with {cfg.class_key}={klass} is FAST"
    fast = [o for o in rows if o.cls == stats.FAST]
    if fast:
        best = max(fast, key=lambda o: o.est.lower)
        return Gate(name, threshold, best.text(), "pass", evidence=evidence,
                    interval=(round(best.est.lower, 6), round(best.est.upper, 6)), unit="x")
    ambiguous = [o for o in rows if o.cls == stats.AMBIGUOUS]
    if ambiguous:
        return Gate(name, threshold, f"{len(rows)} optimized row(s), none FAST", "inconclusive", evidence=evidence,
                    detail=f"AMBIGUOUS rows could still be FAST: {_list(ambiguous)}")
    if not rows:
        every = [o.row for o in gated if o.klass == klass]
        why = (f"every gated row of the class falls back ({', '.join(every)})" if every
               else "no gated row has this class")
        return Gate(name, threshold, "no optimized row", "fail", evidence=evidence, detail=why)
    return Gate(name, threshold, f"{len(rows)} optimized row(s), none FAST", "fail", evidence=evidence,
                detail=_list(rows))


def gate_no_regression(gated: list[RowOutcome], cfg: BenchConfig, evidence: str) -> Gate:
    r = cfg.row_regression_max
    name, threshold = "no_optimized_row_slow", f"no optimized gated row SLOW by more than {r:.0%}"
    opt = [o for o in gated if o.path == "optimized"]
    if not opt:
        return Gate(name, threshold, "no optimized gated row", "skip", evidence=evidence)
    classes = {o.key: stats.classify(o.est, cfg.resolution, r) for o in opt}
    slow = [o for o in opt if classes[o.key] == stats.SLOW]
    if slow:
        return Gate(name, threshold, f"{len(slow)} SLOW", "fail", evidence=evidence, detail=_list(slow))
    floor = 1.0 / (1.0 + r)
    open_ = [o for o in opt if classes[o.key] == stats.AMBIGUOUS and o.est.lower < floor]
    if open_:
        return Gate(name, threshold, f"{len(open_)} undecided", "inconclusive", evidence=evidence,
                    detail=f"AMBIGUOUS rows whose interval reaches below {floor:.4f}: {_list(open_)}")
    worst = min(opt, key=lambda o: o.est.lower)
    return Gate(name, threshold, f"lowest {worst.text()}", "pass", evidence=evidence,
                interval=(round(worst.est.lower, 6), round(worst.est.upper, 6)), unit="x")


def gate_same(name: str, what: str, rows: list[RowOutcome], cfg: BenchConfig, evidence: str, *,
              family: bool = False) -> Gate:
    """Every row SAME. With ``family`` the rows are judged as a family (``stats.family_classes``): a row is moved
    only when its interval at the Bonferroni-corrected level says so, and SAME at its own level."""
    threshold = f"{what} SAME within +-{cfg.resolution:.0%}"
    if not rows:
        return Gate(name, threshold, f"no {what}", "skip", evidence=evidence)
    classes = {o.key: o.cls for o in rows}
    shown = _list
    if family and len(rows) > 1:
        ctl = cfg.controller()
        level = ctl.family_confidence(len(rows))
        classes = stats.family_classes({o.key: o.est for o in rows}, classes, ctl)
        threshold += (f"; as a family: moved only at {level:.2%} per look (Bonferroni over {len(rows)} rows, "
                      f"{ctl.confidence:.0%} over the family)")

        def shown(some: list[RowOutcome]) -> str:
            return "; ".join(f"{o.text()}, at the family level [{lo:.4f}, {hi:.4f}] {classes[o.key]}"
                             for o in some for lo, hi in [o.est.at_confidence(level)])
    moved = [o for o in rows if classes[o.key] in (stats.FAST, stats.SLOW)]
    if moved:
        return Gate(name, threshold, f"{len(moved)}/{len(rows)} moved", "fail", evidence=evidence, detail=shown(moved))
    ambiguous = [o for o in rows if classes[o.key] == stats.AMBIGUOUS]
    if ambiguous:
        return Gate(name, threshold, f"{len(ambiguous)}/{len(rows)} AMBIGUOUS", "inconclusive", evidence=evidence,
                    detail=shown(ambiguous))
    return Gate(name, threshold, f"{len(rows)}/{len(rows)} SAME", "pass", evidence=evidence)


def gate_endpoint(kind: str, gated: list[RowOutcome], cfg: BenchConfig, evidence: str) -> Gate:
    name, threshold = f"endpoint_{kind}_not_slow", f"no gated {kind} row SLOW"
    rows = [o for o in gated if o.kind == kind]
    if not rows:
        return Gate(name, threshold, f"no gated {kind} row", "fail", evidence=evidence,
                    detail=f"bench.endpoints lists '{kind}' but no gated row has that kind")
    slow = [o for o in rows if o.cls == stats.SLOW]
    if slow:
        return Gate(name, threshold, f"{len(slow)} SLOW", "fail", evidence=evidence, detail=_list(slow))
    floor = 1.0 / (1.0 + cfg.resolution)
    open_ = [o for o in rows if o.cls == stats.AMBIGUOUS and o.est.lower < floor]
    if open_:
        return Gate(name, threshold, f"{len(open_)} undecided", "inconclusive", evidence=evidence,
                    detail=f"AMBIGUOUS rows could be SLOW: {_list(open_)}")
    return Gate(name, threshold, f"{len(rows)} row(s): {_list(rows, 3)}", "pass", evidence=evidence)


#: the least peak-memory growth an in-place change may show (bytes): a workspace, the allocator's granularity
IN_PLACE_SLACK_BYTES = 2**20


def memory_rule(path: str, drop: int, expected: int, base_peak: int, tol: float) -> tuple[bool, str]:
    """Whether a row's peak-memory drop matches the hypothesis, and the rule in words.

    With temporaries (``removes``): an optimized row drops by at least (1 - tol) x their bytes, a fallback
    row by at most tol x them either way. Without (an in-place change): an optimized row grows by at most
    tol x the baseline's peak or 1 MiB, whichever is more (a new per-program workspace, the allocator's block
    granularity), a fallback row changes by at most that either way."""
    if expected > 0:
        if path == "optimized":
            return drop >= expected * (1 - tol), f"drop >= {(1 - tol):.2f} x {expected} B"
        return abs(drop) <= expected * tol, f"|drop| <= {tol:.2f} x {expected} B"
    slack = max(tol * base_peak, IN_PLACE_SLACK_BYTES)
    what = f"max({tol:.2f} x the baseline peak {base_peak} B, {IN_PLACE_SLACK_BYTES} B)"
    if path == "optimized":
        return -drop <= slack, f"growth <= {what}"
    return abs(drop) <= slack, f"|change| <= {what}"


def gate_memory(gated: list[RowOutcome], cfg: BenchConfig, evidence: str) -> Gate:
    tol = cfg.memory_tolerance
    name = "peak_memory_drop"
    threshold = (f"optimized rows: peak drops by >= {1 - tol:.2f} x the temporaries; "
                 f"fallback rows: |drop| <= {tol:.2f} x the temporaries (without temporaries: within {tol:.2f} x "
                 "the baseline peak)")
    bad, seen = [], 0
    for o in gated:
        if o.peak_base is None or o.peak_cand is None:
            continue
        seen += 1
        drop = o.peak_base - o.peak_cand
        ok, rule = memory_rule(o.path, drop, o.expected_bytes, o.peak_base, tol)
        if not ok:
            bad.append(f"{o.row} ({o.path}): drop {drop} B, rule {rule}")
    if not seen:
        return Gate(name, threshold, "no peak measured", "skip", evidence=evidence)
    return Gate(name, threshold, f"{seen - len(bad)}/{seen} rows", "fail" if bad else "pass", evidence=evidence,
                detail="; ".join(bad) if bad else None)


def gate_autotune(outcomes: list[RowOutcome], evidence: str) -> Gate:
    """Unchanged kernels run with the same autotune pick in both arms.

    By construction for a kernel whose Triton key is equal in both arms: the arms share the stack's
    kernel cache and Triton reads the first arm's timings back for the second (``shared``). A kernel
    of identical source whose key differs (it moved in its file, or a function it calls changed) or
    that has no key (the interpreter, an older Triton) is tuned by each arm; a differing pick there
    is allowed only on a SAME row, as before. A ``shared`` kernel with differing picks means the cache
    did not pin them (configs with a pre_hook, which Triton never caches, or Triton < 3.4 without
    TRITON_CACHE_AUTOTUNING): judged by the same rule, and named in the detail.
    """
    name, threshold = "autotune_consistent", ("unchanged kernels pick the same configs in both arms (shared through "
                                              "the kernel cache; else the row is SAME)")
    flagged = [o for o in outcomes if o.autotune_diff]
    moved = [o for o in flagged if o.cls != stats.SAME]
    shared = {(p["kernel"], tuple(p["base"])) for o in outcomes for p in o.autotune_picks if p["status"] == "shared"}
    value = f"{len(shared)} pick(s) shared through the kernel cache, {len(flagged)} row(s) flagged"
    if moved:
        return Gate(name, threshold, value, "inconclusive", evidence=evidence,
                    detail="; ".join(f"{o.key}: {', '.join(o.autotune_diff)} ({o.cls})" for o in moved)
                    + ": the difference may be the config, not the code; warm both caches again or pin configs")
    return Gate(name, threshold, value + (", all SAME" if flagged else ""), "pass", evidence=evidence)


def gate_timed_outputs(recorded: list[dict[str, Any]], tol: float, evidence: str) -> Gate:
    """The timed code is the tested code: after every round (bench) or each row's profile (profile_candidate), on
    fresh inputs, every row's outputs and gradients in the candidate's timing process are within ``tol`` (relative
    RMS at sampled positions, ``kgate.measure.timed_check``) of BENCH_BASE's. A candidate that computes differently
    outside pytest, or returns results cached for other values, fails here. Judged on CPU too: it is not a timing.
    Each checked entry names itself by its ``label`` (profile_candidate's), else as round ``index + 1``."""
    name, threshold = "timed_outputs_match", f"sampled outputs and gradients within {tol:g} (relative RMS) of BENCH_BASE's"
    bad, seen, worst = [], 0, 0.0
    for r in recorded:
        for key, d in (r.get("outputs") or {}).items():
            seen += 1
            worst = max(worst, d["rel"])
            if d["missing"] or d["rel"] > tol:
                what = f"missing {', '.join(d['missing'])}" if d["missing"] else f"{d['tensor']} off by {d['rel']:.3g}"
                bad.append(f"{r.get('label') or 'round ' + str(r['index'] + 1)} {key}: {what}")
    if not seen:
        return Gate(name, threshold, "no round checked", "skip", evidence=evidence)
    return Gate(name, threshold, f"{seen - len(bad)}/{seen} row-rounds, worst {worst:.3g}", "fail" if bad else "pass",
                evidence=evidence, detail="; ".join(bad[:6]) + (f"; +{len(bad) - 6} more" if len(bad) > 6 else "")
                if bad else None)


def cpu_skip(g: Gate) -> Gate:
    """On CPU a timed gate is evaluated and shown, but never decides."""
    would = f"would be {g.status}" + (f": {g.detail}" if g.detail else "")
    return Gate(g.name, g.threshold, g.value, "skip", evidence=g.evidence, interval=g.interval, unit=g.unit,
                detail=f"{CPU_TIMING_NOTE}; {would}")


def evaluate(outcomes: list[RowOutcome], cfg: BenchConfig, evidence: str, *, exclusive: Gate | None = None
             ) -> tuple[list[Gate], stats.RatioEstimate | None]:
    """Every benchmark gate from the decided rows (pure; tests/test_bench_gates.py)."""
    gated = [o for o in outcomes if o.role == "gated"]
    controls = [o for o in outcomes if o.role == "control"]
    if not gated:
        raise ConfigError("bench: no gated row")
    timed: list[Gate] = []
    g, est = gate_geomean(gated, cfg, evidence)
    timed.append(g)
    if cfg.class_key is not None:
        timed += [gate_class(k, gated, cfg, evidence) for k in cfg.classes]
    timed.append(gate_no_regression(gated, cfg, evidence))
    timed.append(gate_same("fallback_rows_same", "fallback gated rows", [o for o in gated if o.path == "fallback"],
                           cfg, evidence))
    timed.append(gate_same("controls_same", "control rows", controls, cfg, evidence, family=True))
    timed += [gate_endpoint(k, gated, cfg, evidence) for k in cfg.endpoints]
    timed.append(gate_autotune(outcomes, evidence))
    if exclusive is not None:
        timed.append(exclusive)
    if cfg.cpu:
        timed = [cpu_skip(x) if x.status != "skip" else x for x in timed]
    return timed + [gate_memory(gated, cfg, evidence)], est


# rows and rounds in the record


def to_rounds(recorded: list[dict[str, Any]], key: str) -> list[stats.Round]:
    """One row's rounds from the recorded ones: both arms' samples, the order, the SM clocks when sampled and the
    worker pair that timed the round (``pair``; absent in records older than replication: None)."""
    out = []
    for r in recorded:
        cell = r["rows"][key]
        clock = {arm: (cell[arm].get("telemetry") or {}).get("sm_clock_mhz") for arm in ("base", "cand")}
        out.append(stats.Round.from_samples(cell["base"]["samples_ms"], cell["cand"]["samples_ms"], r["order"],
                                            base_clock_mhz=clock["base"], cand_clock_mhz=clock["cand"],
                                            block=r.get("pair")))
    return out


#: what :func:`autotune_picks` says about a kernel's picks in the two arms
PICK_STATUS = {
    "shared": "same Triton key in both arms: one tuning, read back from the kernel cache",
    "retuned": "same source, another Triton key (moved in its file, a callee changed, or no key): tuned per arm",
    "changed": "the candidate changed its source: tuned for the candidate",
    "one arm": "ran in one arm only",
}


def _triton_keys(autotune: dict[str, Any], arm: str) -> dict[str, str | None]:
    return {t["kernel"]: t.get("triton_key") for t in autotune[arm].get("tuners", [])}


def autotune_picks(row: str, mode: str, autotune: dict[str, Any], sources: dict[str, dict[str, str | None]]
                   ) -> list[dict[str, Any]]:
    """Every autotuned kernel this row and mode ran, with each arm's picks and a status of :data:`PICK_STATUS`.

    ``autotune`` is both arms' ``autotune`` answer (tuners with their Triton key, row picks) and
    ``sources`` their kernel source hashes. Under the interpreter no kernel has a Triton key, so an
    unchanged kernel is ``retuned`` (kgate's shim picks the same config in both arms there).
    """
    picks = {a: (autotune[a]["row_picks"].get(row) or {}).get(mode) or {} for a in ("base", "cand")}
    keys = {a: _triton_keys(autotune, a) for a in ("base", "cand")}
    out = []
    for kernel in sorted(set(picks["base"]) | set(picks["cand"])):
        if kernel not in picks["base"] or kernel not in picks["cand"]:
            status = "one arm"
        elif sources["base"].get(kernel) is None or sources["base"].get(kernel) != sources["cand"].get(kernel):
            status = "changed"
        elif keys["base"].get(kernel) and keys["base"].get(kernel) == keys["cand"].get(kernel):
            status = "shared"
        else:
            status = "retuned"
        out.append({"kernel": kernel, "status": status, "base": sorted(picks["base"].get(kernel, [])),
                    "cand": sorted(picks["cand"].get(kernel, [])),
                    "same": sorted(picks["base"].get(kernel, [])) == sorted(picks["cand"].get(kernel, []))})
    return out


def autotune_diff(row: str, mode: str, autotune: dict[str, Any], sources: dict[str, dict[str, str | None]]
                  ) -> list[str]:
    """Kernels with identical source in both arms whose autotune picks differ for this row and mode."""
    out = []
    for p in autotune_picks(row, mode, autotune, sources):
        if p["status"] in ("shared", "retuned") and not p["same"]:
            why = " (shared Triton key, not pinned by the cache)" if p["status"] == "shared" else ""
            out.append(f"{p['kernel']} base {p['base']} cand {p['cand']}{why}")
    return out


def describe(o: RowOutcome, recorded: list[dict[str, Any]], cfg: BenchConfig, prof_base: dict[str, Any],
             prof_cand: dict[str, Any], warm: dict[str, Any], excluded: tuple[int, ...] = ()) -> dict[str, Any]:
    """Everything the record keeps about one row (``excluded``: the indices of the outlier rounds taken out; the
    summaries and round medians keep every recorded round)."""
    cells = [r["rows"][o.key] for r in recorded]
    arm_samples = {a: [x for c in cells for x in c[a]["samples_ms"]] for a in ("base", "cand")}
    est = o.est
    return {
        "key": o.key, "row": o.row, "mode": o.mode, "role": o.role, "kind": o.kind, "class": o.klass, "path": o.path,
        "classification": o.cls,
        "regression_classification": stats.classify(est, cfg.resolution, cfg.row_regression_max),
        "speedup": est.speedup, "interval": [est.lower, est.upper], "confidence": est.confidence,
        "decision": o.decision.as_dict(),
        "summary": {a: stats.summarize(s).as_dict() for a, s in arm_samples.items()},
        "round_medians_ms": {a: [stats.summarize(c[a]["samples_ms"]).median_ms for c in cells] for a in ("base", "cand")},
        "host_ahead": host_ahead_share(cells),
        "orders": [r["order"] for r in recorded],
        "telemetry": [{a: c[a].get("telemetry") for a in ("base", "cand")} for c in cells],
        "peak_bytes": {"base": o.peak_base, "cand": o.peak_cand}, "expected_temporary_bytes": o.expected_bytes,
        "peak_drop_bytes": None if o.peak_base is None or o.peak_cand is None else o.peak_base - o.peak_cand,
        "kernels": {"base": sorted(prof_base["kernels"]), "cand": sorted(prof_cand["kernels"])},
        "autotune_diff": list(o.autotune_diff),
        "autotune_picks": list(o.autotune_picks),
        "warm_wall_s": {a: warm[a]["wall_s"] for a in ("base", "cand")},
        "excluded_rounds": list(excluded),
        "process_speeds": process_speeds(recorded, o.key, cfg.resolution),
        "pairs": [{"pair": x["pair"], "rounds": x["rounds"], "speedup": math.exp(x["log_ratio"])}
                  for x in pair_estimates(est.log_ratios, est.orders, est.blocks,
                                          None if est.order_effect is None else math.log(est.order_effect))],
    }


def replication(recorded: list[dict[str, Any]], every: int | None) -> dict[str, Any]:
    """The worker pairs behind the rounds (kgate.measure.replicas): per pair its rounds and process ids, from the
    recorded rounds (a resumed run's earlier pairs included), and the seconds the pair took to start and warm
    (``ready_s``; None for a run's first pair, which is started before any round) with its phases (``phases_s``,
    kgate.measure.replicas; empty where ``ready_s`` is None), from its first round's checkpoint line
    (``pair_ready_s``, ``pair_phases_s``), so a resumed run keeps the earlier pairs' (rounds checkpointed before
    those keys existed have none)."""
    pairs: dict[Any, dict[str, Any]] = {}
    for r in recorded:
        entry = pairs.setdefault(r.get("pair"), {"pair": r.get("pair"), "pids": r.get("pids"), "rounds": [],
                                                 "ready_s": r.get("pair_ready_s"),
                                                 "phases_s": r.get("pair_phases_s") or {}})
        entry["rounds"].append(r["index"])
    sizes = {len(v["rounds"]) for v in pairs.values()}
    method = ("one worker pair: its offset is not in the intervals" if len(pairs) <= 1 else
              "a fresh worker pair every round: the per-round interval holds the pair's offset (kgate.stats.pairs)"
              if sizes == {1} else "per-pair means, the worker pair a random effect (kgate.stats.pairs)")
    return {"rounds_per_worker_pair": every, "method": method, "pairs": list(pairs.values())}


def calibration(outcomes: list[RowOutcome], confidence: float = 0.95) -> dict[str, Any]:
    """What an A/A calibration reads from the rows' intervals: the rows whose interval excludes 1, at the decision's
    per-look level and at a plain ``confidence`` (the same estimates), with the count an A/A expects (each row
    excludes 1 with probability 1 - level) and the one-sided binomial p-value of the count seen (rows share rounds
    and worker pairs, so they are not independent: a guide, not a test). For a candidate that changes code the
    counts are just counts."""
    out: dict[str, Any] = {"rows": len(outcomes)}
    levels = {"look": outcomes[0].est.confidence, "plain": confidence} if outcomes else {}
    for name, level in levels.items():
        keys = [o.key for o in outcomes for lo, hi in [o.est.at_confidence(level)] if not lo <= 1.0 <= hi]
        expected = (1.0 - level) * len(outcomes)
        out[name] = {"confidence": level, "excluding_1": keys, "expected": expected,
                     "binomial_p": float(binom.sf(len(keys) - 1, len(outcomes), 1.0 - level))}
    return out


def host_ahead_share(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per arm: samples timed with the host ahead of the GPU, of all samples; samples timed without the hold
    after it was dropped (``unheld``, kgate.measure.host_ahead); the holds used (ms, empty when none was held); the
    host synchronisations per call torch reported and whether the hold was re-armed after them."""
    if not cells or any("ahead" not in c[a] for c in cells for a in ("base", "cand")):
        return None
    out = {}
    for a in ("base", "cand"):
        holds = [h for c in cells for h in c[a]["hold_ms"]]
        syncs = [c[a]["syncs"] for c in cells if c[a].get("syncs")]
        out[a] = {"ahead": sum(c[a]["ahead"] for c in cells), "samples": sum(len(c[a]["samples_ms"]) for c in cells),
                  "unheld": sum(c[a].get("unheld", 0) for c in cells),
                  "hold_ms": [min(holds), max(holds)] if holds else [],
                  "syncs_per_call": max((x["per_call"] for x in syncs), default=None),
                  "rearmed": any(x["rearmed"] for x in syncs)}
    return out


#: below this share of held samples with the host ahead, a row's spans carry host time worth naming
AHEAD_SHARE_MIN = 0.9


def behind_note(rows: list[dict[str, Any]]) -> list[str]:
    """Reason lines naming the rows where the host fell behind in more than 10 % of an arm's held samples,
    and the rows whose hold was dropped (a call that synchronises inside: kgate.measure.host_ahead), saying when the
    two arms were not timed alike."""
    behind, dropped = [], []
    for r in rows:
        if not (h := r.get("host_ahead")):
            continue
        for a in ("base", "cand"):
            held = h[a]["samples"] - h[a].get("unheld", 0)
            if held and h[a]["ahead"] < AHEAD_SHARE_MIN * held:
                behind.append(f"{r['key']} {a} {held - h[a]['ahead']} of {held}")
        unheld = {a: h[a].get("unheld", 0) for a in ("base", "cand")}
        if any(unheld.values()):
            alike = "" if all(unheld.values()) else " (the arms were NOT timed alike)"
            dropped.append(f"{r['key']} base {unheld['base']}, cand {unheld['cand']} of "
                           f"{h['base']['samples']}{alike}")
    out = []
    if behind:
        out.append(f"host behind the GPU despite the hold (those spans include host time): {'; '.join(behind)}")
    if dropped:
        out.append("hold dropped after samples in a row stayed behind (the call synchronises inside; its spans "
                   f"include the host's work after that point), samples timed without it: {'; '.join(dropped)}")
    return out


def exclusive_gate(recorded: list[dict[str, Any]], before: list[dict[str, Any]], cpu: bool, evidence: str) -> Gate:
    name, threshold = "gpu_exclusive", "no compute process but the two workers on the GPU in any round"
    if cpu:
        return Gate(name, threshold, "unavailable on CPU", "skip", evidence=evidence)
    bad = [r["index"] + 1 for r in recorded if (r.get("exclusive") or {}).get("foreign")]
    if bad:
        return Gate(name, threshold, f"foreign processes after round(s) {bad}", "inconclusive", evidence=evidence,
                    detail="another process used the GPU during the benchmark; rerun on an exclusive allocation")
    checks = list(before) + [r["exclusive"] for r in recorded if r.get("exclusive")]
    # an empty process list before the workers opened their CUDA contexts says nothing once a later check
    # listed every worker: that check did verify
    listed = any(c.get("ours_listed") for c in checks)
    notes = {c["note"] for c in checks if c.get("note") and not (listed and not c.get("apps"))}
    return Gate(name, threshold, f"{len(recorded)} round(s) checked" + (f" ({'; '.join(notes)})" if notes else ""),
                "pass", evidence=evidence)

