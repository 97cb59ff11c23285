"""Stage ``bench``: interleaved A/B rounds of the public endpoint, both arms on one device in one job.

Method (docs/measurement.md has the rules and their limits):

1. Two workers, BENCH_BASE and the candidate, on the stack's one Triton
   cache (``kgate.cache``); both must report the same device. On a GPU the compute
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
   (kgate.measure.host_ahead); the round statistic is the median. Clocks,
   power, temperature and throttle reasons are read after each arm's block.
   Each round is appended to ``rounds.jsonl`` (fsync) before the next starts,
   so a killed bench resumes at its last finished round
   (kgate.measure.checkpoints). Every ``bench.rounds_per_worker_pair`` rounds
   the pair of workers is replaced by a fresh one, checked and warmed before
   its first round (kgate.measure.replicas, ``ready_pair``); each round
   records its pair, which the intervals treat as a random effect
   (kgate.stats.pairs).
4. ``kgate.stats.decide_bench`` decides (min 5 valid rounds, looks at odd
   counts, cap from the campaign): outlier rounds out (kgate.stats.outliers),
   each row by ``kgate.stats.decide``, and the loop runs until every row
   stops, the geomean of the gated rows is off the bar and the controls are
   decided as a family (or the cap). Per row and arm: ``summarize`` over all
   samples. Per row: the paired ratio with its interval and FAST / SAME /
   SLOW / AMBIGUOUS; the equal-weight geomean of the gated rows with its
   interval; the worker pairs and the rows' exclusion counts (what an A/A
   calibration reads).
5. Gates (``kgate.gates.bench.evaluate``): geomean lower bound >= bar (a
   straddle at the cap is inconclusive); each dispatch class has an
   optimized gated row FAST; no optimized row SLOW beyond
   ``row_regression_max``; fallback rows SAME, controls SAME as a family; no gated
   row of each endpoint kind SLOW; peak memory drops by the temporaries on
   optimized rows only; autotune picks of unchanged kernels agree (shared
   through the kernel cache where their Triton key is equal; else their
   rows are SAME; every pick is listed per row); the GPU stayed exclusive. An AMBIGUOUS row that decides a
   gate makes it ``inconclusive``, never ``pass``. On CPU every timed gate
   is evaluated and shown with status ``skip`` ("CPU timings are not
   meaningful").
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths, stats
from kgate.errors import ConfigError, KgateError, ProvenanceMismatch
from kgate.gates import env as env_gates
from kgate.gates.bench import (
    BenchConfig,
    RowOutcome,
    autotune_diff,
    autotune_picks,
    behind_note,
    calibration,
    describe,
    evaluate,
    exclusive_gate,
    gate_timed_outputs,
    replication,
    to_rounds,
)
from kgate.measure import checkpoints, host_ahead
from kgate.measure import coordinator as measure
from kgate.measure.arms import Arm
from kgate.measure.profile import not_measured, removal_table
from kgate.measure.replicas import WorkerPairs
from kgate.measure.rows import MeasureSpec, Row
from kgate.measure.timed_check import fresh_inputs, timed_outputs
from kgate.records import StageResult
from kgate.stages.common import ROUNDS_SHARE, Context, timed_arms

CHECKPOINT = "rounds.jsonl"
CHECKPOINT_SCHEMA = "kgate.stages.bench-rounds/1"
#: bench.timer (kgate.measure.host_ahead): what the samples of each setting measure
TIMER_METHODS = {
    "host_ahead": "CUDA events around each call, after the L2 flush and a spin kernel that holds the GPU until "
                  "the host has enqueued the call: the device's time for it (kgate.measure.host_ahead)",
    "inline": "CUDA events around each call, after the L2 flush: the device's time or the host's launching, "
              "whichever is longer",
    "cpu": "time.perf_counter around each call (CPU: not meaningful)",
}


# checkpointed rounds


@dataclass
class Plan:
    """The timed rows: (key, row, mode, role)."""

    items: list[tuple[str, Row, str, str]]

    @classmethod
    def build(cls, spec: MeasureSpec, table: dict[str, Row]) -> Plan:
        gm, cm = spec.gated_mode, spec.control_mode
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


def run_rounds(pairs: WorkerPairs, plan: Plan, samples: int, telemetry: measure.Telemetry,
               ctl: stats.ControllerConfig, ckpt: Path, key_parts: dict[str, Any], *, bar: float | None = None
               ) -> tuple[list[dict[str, Any]], stats.BenchDecision, int, str | None]:
    """Rounds until ``stats.decide_bench`` stops (every row decided, the geomean of the gated rows off the ``bar``,
    the controls decided as a family, or the cap), each appended to ``ckpt`` before the next starts.

    Each round is timed by ``pairs``' current workers, which are replaced by a fresh, warmed pair between rounds
    every ``pairs.every`` rounds; the round records its pair and their pids. Rounds already in ``ckpt`` under
    the same run key (same commits, rows, samples, inputs, device, replication) are kept and the loop continues
    after them with a new pair. Returns (rounds, decision, resumed_from, note).
    """
    recorded, note = checkpoints.resume(ckpt, key_parts)
    resumed_from = len(recorded)
    if note:
        measure.progress(note)
    pairs.number_from(max((r.get("pair", -1) for r in recorded), default=-1) + 1)
    roles = {role: [k for k, *_, r in plan.items if r == role] for role in ("gated", "control")}
    while True:
        dec = stats.decide_bench({k: to_rounds(recorded, k) for k, *_ in plan.items}, ctl, gated=roles["gated"],
                                 controls=roles["control"], bar=bar)
        if len(recorded) > resumed_from:
            for k, d in dec.rows.items():
                e = d.estimate
                iv = f"{e.speedup:.4f} [{e.lower:.4f}, {e.upper:.4f}]" if e else "n/a (2 rounds needed)"
                measure.progress(f"round {len(recorded)} (cap {ctl.max_rounds}, {recorded[-1]['order']}, worker pair "
                                 f"{recorded[-1]['pair']}) {k}: {iv} {d.classification or ''}")
            measure.progress(dec.reason)
        if not dec.continue_:
            return recorded, dec, resumed_from, note
        pairs.before_round()
        index = len(recorded)
        fresh_inputs(index, pairs.arms, [row.name for _k, row, _m, _r in plan.items])
        rnd = time_round(index, pairs.arms, plan, samples, telemetry, hold=key_parts.get("timer") == "host_ahead")
        rnd["outputs"] = timed_outputs(index, pairs.arms, plan.items)
        rnd.update(pair=pairs.pair, pids=pairs.pids, pair_ready_s=pairs.history[-1]["ready_s"] or None,
                   pair_phases_s=pairs.history[-1]["phases_s"])
        rnd["exclusive"] = measure.foreign_processes(telemetry.compute_apps(), pairs.ours)
        checkpoints.append_line(ckpt, rnd)
        recorded.append(rnd)
        pairs.after_round(index)


def ready_pair(new: dict[str, Arm], first: dict[str, Arm], device: dict[str, Any], plan: Plan,
               hashes: dict[str, Any], warm_calls: int, ignore_env: list[str]) -> dict[str, float]:
    """A fresh worker pair before its first round (kgate.measure.replicas): on the first pair's device, with the
    first pair's recorded environment per arm and its input hashes, every row warmed ``warm_calls`` times per arm
    (output-gradient hashes equal across arms). A difference is an error, never a result. Returns the seconds of
    its phases (``prepare``: inputs made and hashed in both arms at once; ``warm``: the warm calls)."""
    uuid = measure.check_same_device(list(new.values())).get("uuid")
    if uuid != device.get("uuid"):
        raise ProvenanceMismatch(f"a fresh worker pair runs on device {uuid}, the first ran on {device.get('uuid')}")
    for name, arm in new.items():
        diffs = env_gates.diff(first[name].info["env"], arm.info["env"], ignore_env, ("the first pair", "a fresh pair"))
        if diffs:
            raise KgateError(f"arm {name}: a fresh worker's recorded environment differs: {'; '.join(diffs)}")
    rows = {row.name: row for _k, row, _m, _r in plan.items}
    t0 = time.monotonic()
    prepared = measure.ask_all(list(new.values()), "prepare", rows=[r.values for r in rows.values()])
    for rname in rows:
        measure.compare_hashes("input", rname, {"first pair": hashes[rname]["sha256"],
                                                **{a: prepared[a][rname]["sha256"] for a in prepared}})
    t1 = time.monotonic()
    for key, row, mode, _role in plan.items:
        warm = {a: new[a].request("warm", row=row.name, mode=mode, calls=warm_calls) for a in ("base", "cand")}
        measure.compare_hashes("output-gradient", key, {a: warm[a]["grad_hashes"] for a in warm})
    phases = {"prepare": t1 - t0, "warm": time.monotonic() - t1}
    measure.progress(f"fresh worker pair ready: prepare {phases['prepare']:.1f} s, warm {phases['warm']:.1f} s")
    return phases


# the stage


def run(ctx: Context) -> StageResult:
    c, gpu, cid = ctx.campaign, ctx.gpu, ctx.candidate
    spec = measure.load_spec(c, gpu)
    if spec is None:
        return not_measured(ctx, "bench")
    fx, pb, build = ctx.inputs["fixture_freeze"], ctx.inputs["profile_baseline"], ctx.inputs["candidate_build"]
    plan = Plan.build(spec, measure.table_from_record(pb))
    cfg = BenchConfig.from_spec(spec, [row for _k, row, _m, role in plan.items if role == "gated"])
    kinds = {row.kind for _k, row, _m, role in plan.items if role == "gated"}
    missing = [k for k in cfg.endpoints if k not in kinds]
    if missing:
        key = "measure.cpu.rows" if spec.cpu else "bench.gated"
        raise ConfigError(f"campaign {c.name}: key 'bench.endpoints': no gated row of kind {', '.join(missing)} "
                          f"(check {key})")
    wt_base, wt_cand = ctx.timed_worktrees()
    evidence = str(paths.record(c.name, gpu, "bench", cid))
    samples = spec.samples()
    warm_calls = 1 if spec.cpu else int(spec.bench.get("warm_calls", 3))
    deadline = measure.Deadline(ctx.deadline_s(ROUNDS_SHARE))
    started: list[tuple[str, Path, Path]] = []

    def start(arms: list[tuple[str, Path, Path]]) -> list[Arm]:
        started[:] = arms
        return measure.start_arms(ctx, spec, arms, deadline)

    def fresh() -> dict[str, Arm]:
        # a fresh pair of the same arms (kgate.measure.replicas), within the same stage deadline
        return {a.name: a for a in measure.start_arms(ctx, spec, started, deadline)}

    return timed_arms(ctx, (wt_base, wt_cand), start,
                      lambda arms: _measure(ctx, spec, cfg, plan, arms, samples, warm_calls, evidence, fx, build, fresh),
                      "the candidate runs every benchmark row")


def _measure(ctx: Context, spec: MeasureSpec, cfg: BenchConfig, plan: Plan, arms: dict[str, Arm], samples: int,
             warm_calls: int, evidence: str, fx: dict[str, Any], build: dict[str, Any],
             fresh: Callable[[], dict[str, Arm]]) -> StageResult:
    device, telemetry, exclusive_log = measure.claim_device(list(arms.values()), spec.cpu, "the benchmark")
    uuid = device.get("uuid")
    timer = str(spec.bench.get("timer", "host_ahead"))
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
                 "inputs": {k: v["sha256"] for k, v in hashes.items()},
                 "rounds_per_worker_pair": cfg.rounds_per_pair}
    ctl = cfg.controller()
    ignore_env = env_gates.ignored(ctx.campaign.data)
    pairs = WorkerPairs(arms, cfg.rounds_per_pair, fresh,
                        lambda new: ready_pair(new, arms, device, plan, hashes, warm_calls, ignore_env))
    try:
        recorded, dec, resumed_from, resume_note = run_rounds(pairs, plan, samples, telemetry, ctl, ckpt, key_parts,
                                                              bar=cfg.bar)
    finally:
        pairs.close()
    excluded = dec.out
    outcomes, row_data = [], []
    enabled = tuple(build["data"].get("enables") or ())
    for key, row, mode, role in plan.items:
        d = dec.rows[key]
        pb_, pc_ = profiled[key]["base"], profiled[key]["cand"]
        path = "control" if role == "control" else spec.row_path(row, enabled, removal_table(pc_), pc_["iterations"])[0]
        diff = autotune_diff(row.name, mode, autotune, sources)
        o = RowOutcome(key=key, row=row.name, mode=mode, role=role, kind=row.kind, klass=row.klass(spec.class_key),
                       path=path, decision=d, peak_base=pb_["peak_bytes"], peak_cand=pc_["peak_bytes"],
                       expected_bytes=spec.expected_bytes(row), autotune_diff=tuple(diff),
                       autotune_picks=tuple(autotune_picks(row.name, mode, autotune, sources)))
        outcomes.append(o)
        row_data.append(describe(o, recorded, cfg, pb_, pc_, warm[key], excluded))
    exclusive = exclusive_gate(recorded, exclusive_log, spec.cpu, evidence)
    gates, est = evaluate(outcomes, cfg, evidence, exclusive=exclusive)
    gates.append(gate_timed_outputs(recorded, float(spec.bench.get("outputs_rtol", 0.05)), evidence))
    data = {
        "measured": True, "cpu": spec.cpu, "timings_meaningful": not spec.cpu,
        "candidate": ctx.candidate, "candidate_sha": build["data"]["candidate_sha"],
        "bench_base": fx["data"]["bench_base"], "device": device, "telemetry": telemetry.method,
        "samples_per_round": samples, "warm_calls": warm_calls,
        "timer": {"setting": timer, "method": TIMER_METHODS["cpu" if spec.cpu else timer]},
        "controller": {"min_rounds": cfg.min_rounds, "max_rounds": cfg.max_rounds, "resolution": cfg.resolution,
                       "look_confidence": ctl.look_confidence, "looks": list(ctl.looks())},
        "rounds": len(recorded), "resumed_from_round": resumed_from, "checkpoint": str(ckpt), "resume": resume_note,
        "stopping": {"reason": dec.reason, "valid_rounds": dec.valid_rounds, "geomean_vs_bar": dec.bar,
                     "controls_as_family": dec.controls, "excluded_rounds": [e.as_dict() for e in dec.excluded],
                     "rounds_out": list(dec.out)},
        "replication": replication(recorded, cfg.rounds_per_pair),
        "calibration": calibration(outcomes),
        "geomean": est.as_dict() if est else None, "rows": row_data,
        "classes": {o.key: o.cls for o in outcomes}, "input_hashes": hashes,
        "exclusive": exclusive_log + [{"when": f"after round {r['index'] + 1}", **r.get("exclusive", {})}
                                      for r in recorded if r.get("exclusive")],
        "workers": {a.name: a.info for a in arms.values()},
        "autotune": {a: {"tuners": [t for t in v["tuners"] if t["picks"]], "row_picks": v["row_picks"]}
                     for a, v in autotune.items()},
        "bar": cfg.bar, "forced": ctx.forced,
    }
    host = [((t or {}).get(a) or {}).get("host") or {} for c in row_data for t in c["telemetry"] for a in ("base", "cand")]
    return StageResult(gates=gates, data=data,
                       reasons=measure.busy_note([h for h in host if h]) + behind_note(row_data) + list(dec.notes))

