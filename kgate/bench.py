"""Stage ``bench``: interleaved A/B rounds of the public endpoint, both arms on one device in one job.

Method (docs/measurement.md has the rules and their limits):

1. Two workers, BENCH_BASE (Triton cache ``bench-base``) and the candidate
   (``bench-cand``); both must report the same device. On a GPU the compute
   processes on it must be exactly these two workers, checked before round 1
   and after every round (recorded).
2. Every row (gated rows in the gated mode, controls in the control mode) is
   prepared in both arms from the row's seed; input and output-gradient hashes
   must be equal (a mismatch is an error). Each arm is warmed (compile and
   autotune; never inside a round), then one profiled call per row and arm
   records the kernels it launched (optimized or fallback path), its census
   and its peak memory. Autotune picks are read from both arms.
3. Rounds alternate the arm that goes first (AB, BA, ...). In a round every
   row is timed in both arms: ``samples`` calls per arm, each after an L2
   flush, CUDA events per call; with ``bench.timer: host_ahead`` (the
   default) a spin kernel holds the GPU until the host has enqueued the call,
   so launch-bound rows are timed on the device, not by the host's launch
   rate, and each sample records whether the host was ahead
   (kgate.host_ahead); the round statistic is the median. Clocks,
   power, temperature and throttle reasons are read after each arm's block.
   Each round is appended to ``rounds.jsonl`` (fsync) before the next starts,
   so a killed bench resumes at its last finished round.
4. ``kgate.stats.decide`` decides each row from its rounds (min 5, looks at
   odd counts, cap from the campaign); the loop runs until every row stops.
   Per row and arm: ``summarize`` over all samples. Per row: the paired ratio
   with its interval and FAST / SAME / SLOW / AMBIGUOUS; the equal-weight
   geomean of the gated rows with its interval.
5. Gates (``evaluate``): geomean lower bound >= bar; each dispatch class has
   an optimized gated row FAST; no optimized row SLOW beyond
   ``row_regression_max``; fallback rows and controls SAME; no gated row of
   each endpoint kind SLOW; peak memory drops by the temporaries on optimized
   rows only; autotune picks of unchanged kernels agree (or their rows are
   SAME); the GPU stayed exclusive. An AMBIGUOUS row that decides a gate makes
   it ``inconclusive``, never ``pass``. On CPU every timed gate is evaluated
   and shown with status ``skip`` ("CPU timings are not meaningful").
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate import envdiff, host_ahead, measure, paths, stats
from kgate.baseline_tests import verify_worktree
from kgate.candidate_gate import verify_frozen
from kgate.errors import ConfigError, KgateError
from kgate.measure import CPU_TIMING_NOTE, Arm, MeasureSpec, Row, WorkerFailure
from kgate.profile_baseline import not_measured, per_call
from kgate.records import Gate, StageResult
from kgate.stage import Context

CHECKPOINT = "rounds.jsonl"
CHECKPOINT_SCHEMA = "kgate.bench-rounds/1"
#: bench.timer (kgate.host_ahead): what the samples of each setting measure
TIMER_METHODS = {
    "host_ahead": "CUDA events around each call, after the L2 flush and a spin kernel that holds the GPU until "
                  "the host has enqueued the call: the device's time for it (kgate.host_ahead)",
    "inline": "CUDA events around each call, after the L2 flush: the device's time or the host's launching, "
              "whichever is longer",
    "cpu": "time.perf_counter around each call (CPU: not meaningful)",
}


# what the gates read


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """The thresholds of the benchmark gates (from the campaign)."""

    bar: float
    class_key: str
    classes: tuple[Any, ...]
    resolution: float = 0.02
    row_regression_max: float = 0.03
    memory_tolerance: float = 0.05
    endpoints: tuple[str, ...] = ("dense", "varlen")
    min_rounds: int = 5
    max_rounds: int = 15
    cpu: bool = False

    def controller(self) -> stats.ControllerConfig:
        return stats.ControllerConfig(min_rounds=self.min_rounds, max_rounds=self.max_rounds,
                                      resolution=self.resolution)

    @classmethod
    def from_spec(cls, spec: MeasureSpec) -> BenchConfig:
        b = spec.bench
        lo, hi = spec.rounds()
        return cls(bar=spec.bar, class_key=spec.class_key, classes=spec.classes,
                   resolution=float(b.get("resolution", 0.02)),
                   row_regression_max=float(b.get("row_regression_max", 0.03)),
                   memory_tolerance=float(b.get("memory_tolerance", 0.05)),
                   endpoints=tuple(b.get("endpoints", ("dense", "varlen"))), min_rounds=lo, max_rounds=hi,
                   cpu=spec.cpu)


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
    if est.lower >= cfg.bar:
        status, detail = "pass", None
    elif est.upper < cfg.bar:
        status, detail = "fail", f"geomean {est.speedup:.4f}x [{est.lower:.4f}, {est.upper:.4f}] is below the bar {cfg.bar}"
    elif ambiguous:
        status = "inconclusive"
        detail = (f"the interval [{est.lower:.4f}, {est.upper:.4f}] straddles the bar {cfg.bar} and AMBIGUOUS rows "
                  f"decide it: {_list(ambiguous)}")
    else:
        status = "fail"
        detail = f"every row is decided and the lower bound {est.lower:.4f} is below the bar {cfg.bar}"
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


def gate_same(name: str, what: str, rows: list[RowOutcome], cfg: BenchConfig, evidence: str) -> Gate:
    threshold = f"{what} SAME within +-{cfg.resolution:.0%}"
    if not rows:
        return Gate(name, threshold, f"no {what}", "skip", evidence=evidence)
    moved = [o for o in rows if o.cls in (stats.FAST, stats.SLOW)]
    if moved:
        return Gate(name, threshold, f"{len(moved)}/{len(rows)} moved", "fail", evidence=evidence, detail=_list(moved))
    ambiguous = [o for o in rows if o.cls == stats.AMBIGUOUS]
    if ambiguous:
        return Gate(name, threshold, f"{len(ambiguous)}/{len(rows)} AMBIGUOUS", "inconclusive", evidence=evidence,
                    detail=_list(ambiguous))
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


def gate_memory(gated: list[RowOutcome], cfg: BenchConfig, evidence: str) -> Gate:
    tol = cfg.memory_tolerance
    name = "peak_memory_drop"
    threshold = (f"optimized rows: peak drops by >= {1 - tol:.2f} x the temporaries; "
                 f"fallback rows: |drop| <= {tol:.2f} x the temporaries")
    bad, seen = [], 0
    for o in gated:
        if o.peak_base is None or o.peak_cand is None:
            continue
        seen += 1
        drop = o.peak_base - o.peak_cand
        ok = drop >= o.expected_bytes * (1 - tol) if o.path == "optimized" else abs(drop) <= o.expected_bytes * tol
        if not ok:
            bad.append(f"{o.row} ({o.path}): drop {drop} B, temporaries {o.expected_bytes} B")
    if not seen:
        return Gate(name, threshold, "no peak measured", "skip", evidence=evidence)
    return Gate(name, threshold, f"{seen - len(bad)}/{seen} rows", "fail" if bad else "pass", evidence=evidence,
                detail="; ".join(bad) if bad else None)


def gate_autotune(outcomes: list[RowOutcome], evidence: str) -> Gate:
    name, threshold = "autotune_consistent", "unchanged kernels pick the same configs in both arms (or the row is SAME)"
    flagged = [o for o in outcomes if o.autotune_diff]
    moved = [o for o in flagged if o.cls != stats.SAME]
    if moved:
        return Gate(name, threshold, f"{len(flagged)} row(s) flagged", "inconclusive", evidence=evidence,
                    detail="; ".join(f"{o.key}: {', '.join(o.autotune_diff)} ({o.cls})" for o in moved)
                    + ": the difference may be the config, not the code; warm both caches again or pin configs")
    return Gate(name, threshold, f"{len(flagged)} row(s) flagged" + (", all SAME" if flagged else ""), "pass",
                evidence=evidence)


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
    timed += [gate_class(k, gated, cfg, evidence) for k in cfg.classes]
    timed.append(gate_no_regression(gated, cfg, evidence))
    timed.append(gate_same("fallback_rows_same", "fallback gated rows", [o for o in gated if o.path == "fallback"],
                           cfg, evidence))
    timed.append(gate_same("controls_same", "control rows", controls, cfg, evidence))
    timed += [gate_endpoint(k, gated, cfg, evidence) for k in cfg.endpoints]
    timed.append(gate_autotune(outcomes, evidence))
    if exclusive is not None:
        timed.append(exclusive)
    if cfg.cpu:
        timed = [cpu_skip(x) if x.status != "skip" else x for x in timed]
    return timed + [gate_memory(gated, cfg, evidence)], est


# checkpointed rounds


def run_key(parts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def load_checkpoint(path: Path, key: str) -> tuple[list[dict[str, Any]], str | None]:
    """Rounds recorded under the same run key; a checkpoint of another setup is set aside (renamed)."""
    if not path.exists():
        return [], None
    lines = path.read_text().splitlines()
    header: dict[str, Any] | None = None
    rounds: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise KgateError(f"{path}: line {i + 1} is not JSON; remove the file to start the benchmark over") from None
        if item.get("kind") == "header":
            header = item
        elif item.get("kind") == "round":
            rounds.append(item)
    if header is None or header.get("key") != key:
        stale = path.with_name(f"rounds.stale-{int(time.time())}.jsonl")
        path.rename(stale)
        return [], f"set aside {stale.name}: recorded for another setup (run key differs)"
    if [r["index"] for r in rounds] != list(range(len(rounds))):
        raise KgateError(f"{path}: round indices are not 0..{len(rounds) - 1}; remove the file to start over")
    with path.open("w") as fh:
        # rewrite without a torn last line
        for item in [header, *rounds]:
            fh.write(json.dumps(item) + "\n")
    return rounds, f"resumed after {len(rounds)} recorded round(s)"


def append_line(path: Path, item: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(item, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def to_rounds(recorded: list[dict[str, Any]], key: str) -> list[stats.Round]:
    out = []
    for r in recorded:
        cell = r["rows"][key]
        clock = {arm: (cell[arm].get("telemetry") or {}).get("sm_clock_mhz") for arm in ("base", "cand")}
        out.append(stats.Round.from_samples(cell["base"]["samples_ms"], cell["cand"]["samples_ms"], r["order"],
                                            base_clock_mhz=clock["base"], cand_clock_mhz=clock["cand"]))
    return out


@dataclass
class Plan:
    """The timed rows: (key, row, mode, role)."""

    items: list[tuple[str, Row, str, str]]

    @classmethod
    def build(cls, spec: MeasureSpec, table: dict[str, Row]) -> Plan:
        modes = spec.bench.get("modes") or {}
        gm, cm = modes.get("gated", "fwdbwd"), modes.get("controls", "fwd")
        items = [(f"{r.name}:{gm}", r, gm, "gated") for r in spec.gated_rows(table)]
        items += [(f"{r.name}:{cm}", r, cm, "control") for r in spec.control_rows(table)]
        keys = [k for k, *_ in items]
        if len(set(keys)) != len(keys):
            raise ConfigError("bench: a row is listed twice in the same mode (gated and controls share a mode?)")
        if not any(role == "gated" for *_, role in items):
            raise ConfigError("bench: no gated row")
        return cls(items)


def time_round(index: int, arms: dict[str, Arm], plan: Plan, samples: int, telemetry: measure.Telemetry,
               hold: bool = False) -> dict[str, Any]:
    order = stats.alternating_orders(index + 1)[-1]
    first, second = ("base", "cand") if order == stats.AB else ("cand", "base")
    cells: dict[str, Any] = {}
    t0 = time.time()
    for key, row, mode, _role in plan.items:
        cell: dict[str, Any] = {}
        for name in (first, second):
            res = arms[name].request("time", row=row.name, mode=mode, n=samples, hold=hold)
            cell[name] = {"samples_ms": res["samples_ms"], "telemetry": telemetry.sample()}
            if "ahead" in res:
                cell[name].update(ahead=res["ahead"], hold_ms=res["hold_ms"], unheld=res.get("unheld", 0),
                                  syncs=res.get("syncs"))
        cells[key] = cell
    return {"kind": "round", "index": index, "order": order, "rows": cells, "started": t0, "finished": time.time()}


def run_rounds(arms: dict[str, Arm], plan: Plan, samples: int, telemetry: measure.Telemetry,
               ctl: stats.ControllerConfig, ckpt: Path, key_parts: dict[str, Any], ours: set[int]
               ) -> tuple[list[dict[str, Any]], dict[str, stats.Decision], int, str | None]:
    """Rounds until ``decide`` stops every row, each appended to ``ckpt`` before the next starts.

    Rounds already in ``ckpt`` under the same run key (same commits, rows, samples, inputs, device)
    are kept and the loop continues after them. Returns (rounds, decisions, resumed_from, note).
    """
    rkey = run_key(key_parts)
    recorded, note = load_checkpoint(ckpt, rkey)
    if not recorded:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        ckpt.write_text("")
        append_line(ckpt, {"kind": "header", "key": rkey, "parts": key_parts, "created": time.time()})
    resumed_from = len(recorded)
    if note:
        measure.progress(note)
    while True:
        decisions = {k: stats.decide(to_rounds(recorded, k), ctl) for k, *_ in plan.items}
        if all(not d.continue_ for d in decisions.values()):
            return recorded, decisions, resumed_from, note
        index = len(recorded)
        rnd = time_round(index, arms, plan, samples, telemetry, hold=key_parts.get("timer") == "host_ahead")
        rnd["exclusive"] = measure.foreign_processes(telemetry.compute_apps(), ours)
        append_line(ckpt, rnd)
        recorded.append(rnd)
        for k, *_ in plan.items:
            d = stats.decide(to_rounds(recorded, k), ctl)
            e = d.estimate
            iv = f"{e.speedup:.4f} [{e.lower:.4f}, {e.upper:.4f}]" if e else "n/a (2 rounds needed)"
            measure.progress(f"round {index + 1} (cap {ctl.max_rounds}, {rnd['order']}) {k}: {iv} "
                             f"{d.classification or ''}")


# the stage


def run(ctx: Context) -> StageResult:
    c, gpu, cid = ctx.campaign, ctx.gpu, ctx.candidate
    spec = measure.load_spec(c, gpu)
    if spec is None:
        return not_measured(ctx, "bench")
    cfg = BenchConfig.from_spec(spec)
    fx, pb, build = ctx.inputs["fixture_freeze"], ctx.inputs["profile_baseline"], ctx.inputs["candidate_build"]
    plan = Plan.build(spec, measure.table_from_record(pb))
    kinds = {row.kind for _k, row, _m, role in plan.items if role == "gated"}
    missing = [k for k in cfg.endpoints if k not in kinds]
    if missing:
        key = "measure.cpu.rows" if spec.cpu else "bench.gated"
        raise ConfigError(f"campaign {c.name}: key 'bench.endpoints': no gated row of kind {', '.join(missing)} "
                          f"(check {key})")
    wt_base = paths.worktree(c.name, gpu, "bench_base")
    wt_cand = paths.worktree(c.name, gpu, f"cand-{cid}")
    verify_worktree(wt_base, fx["data"]["bench_base"])
    verify_worktree(wt_cand, build["data"]["candidate_sha"])
    verify_frozen(wt_cand, fx["data"]["manifest"])
    evidence = str(paths.record(c.name, gpu, "bench", cid))
    samples = spec.samples()
    warm_calls = 1 if spec.cpu else int(spec.bench.get("warm_calls", 3))
    deadline = measure.Deadline(ctx.args.runtime_min * 60 * 0.95)
    arm_list: list[Arm] = []
    try:
        arm_list = measure.start_arms(ctx, spec, [("base", wt_base, paths.triton_cache(c.name, gpu, "bench-base")),
                                                  ("cand", wt_cand, paths.triton_cache(c.name, gpu, "bench-cand"))],
                                      deadline)
        arms = {a.name: a for a in arm_list}
        env_gate = envdiff.arms_gate(c.data, {a.name: a.info["env"] for a in arm_list}, evidence)
        if env_gate.status == "fail":
            return StageResult(gates=[env_gate], data={"measured": False, "candidate": cid,
                                                       "workers": {a.name: a.info for a in arm_list}})
        res = _measure(ctx, spec, cfg, plan, arms, samples, warm_calls, evidence, fx, build)
        return StageResult(gates=[env_gate, *res.gates], data=res.data, reasons=res.reasons)
    except WorkerFailure as exc:
        if exc.arm == "cand" and exc.target:
            # the candidate's own code failed (import, a crash, a hang): a measured failure
            return StageResult(gates=[Gate("candidate_runs", "the candidate runs every benchmark row", "failed",
                                           "fail", evidence=str(ctx.out_dir / "worker-cand.log"), detail=str(exc))],
                               data={"measured": True, "failure": str(exc), "candidate": cid})
        raise
    finally:
        for a in arm_list:
            a.close()


def _measure(ctx: Context, spec: MeasureSpec, cfg: BenchConfig, plan: Plan, arms: dict[str, Arm], samples: int,
             warm_calls: int, evidence: str, fx: dict[str, Any], build: dict[str, Any]) -> StageResult:
    device = measure.check_same_device(list(arms.values()))
    uuid = device.get("uuid")
    timer = str(spec.bench.get("timer", "host_ahead"))
    telemetry = measure.Telemetry(f"GPU-{uuid}" if uuid and not str(uuid).startswith("GPU-") else uuid, spec.cpu)
    ours = {a.pid for a in arms.values()}
    exclusive_log = [{"when": "before warm-up", **measure.foreign_processes(telemetry.compute_apps(), ours)}]
    if exclusive_log[0]["foreign"]:
        raise KgateError(f"the GPU runs foreign compute processes {exclusive_log[0]['foreign']}: the benchmark needs "
                         "the GPU to itself (exclusive allocation)")
    rows = {row.name: row for _k, row, _m, _r in plan.items}
    hashes: dict[str, Any] = {}
    both = [arms["base"], arms["cand"]]
    prepared = measure.ask_all(both, "prepare", rows=[r.values for r in rows.values()])
    for rname in rows:
        measure.compare_hashes("input", rname, {a: prepared[a][rname]["sha256"] for a in prepared})
        hashes[rname] = prepared["base"][rname]
    warm: dict[str, dict[str, Any]] = {}
    profiled: dict[str, dict[str, Any]] = {}
    for key, row, mode, _role in plan.items:
        measure.progress(f"warming {key} ({warm_calls} call(s) per arm)")
        warm[key] = {a: arms[a].request("warm", row=row.name, mode=mode, calls=warm_calls) for a in ("base", "cand")}
        measure.compare_hashes("output-gradient", key, {a: warm[key][a]["grad_hashes"] for a in warm[key]})
        profiled[key] = {a: arms[a].request("profile", row=row.name, mode=mode, iterations=1) for a in ("base", "cand")}
    autotune = measure.ask_all(both, "autotune")
    sources = measure.ask_all(both, "sources")

    ckpt = ctx.out_dir / CHECKPOINT
    key_parts = {"schema": CHECKPOINT_SCHEMA, "bench_base": fx["data"]["bench_base"],
                 "candidate_sha": build["data"]["candidate_sha"], "device": uuid or socket.gethostname(),
                 "samples": samples, "timer": timer, "dtype": spec.dtype, "seed": spec.seed,
                 **({"hold": host_ahead.POLICY} if timer == "host_ahead" and not spec.cpu else {}),
                 "rows": [(k, r.values, m) for k, r, m, _ in plan.items],
                 "inputs": {k: v["sha256"] for k, v in hashes.items()}}
    ctl = cfg.controller()
    recorded, decisions, resumed_from, resume_note = run_rounds(arms, plan, samples, telemetry, ctl, ckpt, key_parts,
                                                                ours)
    outcomes, row_data = [], []
    for key, row, mode, role in plan.items:
        d = decisions[key]
        pb_, pc_ = profiled[key]["base"], profiled[key]["cand"]
        removed, _ = per_call(pc_["kernels"], pc_["iterations"], spec.removed_rx)
        path = "control" if role == "control" else ("fallback" if removed > 0 else "optimized")
        diff = autotune_diff(row.name, mode, autotune, sources)
        o = RowOutcome(key=key, row=row.name, mode=mode, role=role, kind=row.kind, klass=row.klass(spec.class_key),
                       path=path, decision=d, peak_base=pb_["peak_bytes"], peak_cand=pc_["peak_bytes"],
                       expected_bytes=spec.expected_bytes(row), autotune_diff=tuple(diff))
        outcomes.append(o)
        row_data.append(describe(o, recorded, cfg, pb_, pc_, warm[key]))
    exclusive = exclusive_gate(recorded, exclusive_log, spec.cpu, evidence)
    gates, est = evaluate(outcomes, cfg, evidence, exclusive=exclusive)
    data = {
        "measured": True, "cpu": spec.cpu, "timings_meaningful": not spec.cpu,
        "candidate": ctx.candidate, "candidate_sha": build["data"]["candidate_sha"],
        "bench_base": fx["data"]["bench_base"], "device": device, "telemetry": telemetry.method,
        "samples_per_round": samples, "warm_calls": warm_calls,
        "timer": {"setting": timer, "method": TIMER_METHODS["cpu" if spec.cpu else timer]},
        "controller": {"min_rounds": cfg.min_rounds, "max_rounds": cfg.max_rounds, "resolution": cfg.resolution,
                       "look_confidence": ctl.look_confidence, "looks": list(ctl.looks())},
        "rounds": len(recorded), "resumed_from_round": resumed_from, "checkpoint": str(ckpt), "resume": resume_note,
        "geomean": est.as_dict() if est else None, "rows": row_data,
        "classes": {o.key: o.cls for o in outcomes}, "input_hashes": hashes,
        "exclusive": exclusive_log + [{"when": f"after round {r['index'] + 1}", **r.get("exclusive", {})}
                                      for r in recorded if r.get("exclusive")],
        "workers": {a.name: a.info for a in arms.values()},
        "triton_cache_state": {a.name: "warm" if a.cache_entries_at_start else "cold" for a in arms.values()},
        "autotune": {a: {"tuners": [t for t in v["tuners"] if t["picks"]], "row_picks": v["row_picks"]}
                     for a, v in autotune.items()},
        "bar": cfg.bar, "forced": bool(getattr(ctx.args, "force", False)),
    }
    host = [((t or {}).get(a) or {}).get("host") or {} for c in row_data for t in c["telemetry"] for a in ("base", "cand")]
    return StageResult(gates=gates, data=data, reasons=measure.busy_note([h for h in host if h]) + behind_note(row_data))


def autotune_diff(row: str, mode: str, autotune: dict[str, Any], sources: dict[str, dict[str, str | None]]
                  ) -> list[str]:
    """Kernels with identical source in both arms whose autotune picks differ for this row and mode."""
    picks = {a: (autotune[a]["row_picks"].get(row) or {}).get(mode) or {} for a in ("base", "cand")}
    out = []
    for kernel in sorted(set(picks["base"]) & set(picks["cand"])):
        same_src = sources["base"].get(kernel) is not None and sources["base"].get(kernel) == sources["cand"].get(kernel)
        if same_src and sorted(picks["base"][kernel]) != sorted(picks["cand"][kernel]):
            out.append(f"{kernel} base {picks['base'][kernel]} cand {picks['cand'][kernel]}")
    return out


def describe(o: RowOutcome, recorded: list[dict[str, Any]], cfg: BenchConfig, prof_base: dict[str, Any],
             prof_cand: dict[str, Any], warm: dict[str, Any]) -> dict[str, Any]:
    """Everything the record keeps about one row."""
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
        "warm_wall_s": {a: warm[a]["wall_s"] for a in ("base", "cand")},
    }


def host_ahead_share(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per arm: samples timed with the host ahead of the GPU, of all samples; samples timed without the hold
    after it was dropped (``unheld``, kgate.host_ahead); the holds used (ms, empty when none was held); the
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
    and the rows whose hold was dropped (a call that synchronises inside: kgate.host_ahead), saying when the
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

