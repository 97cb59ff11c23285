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
   (kgate.measure.checkpoints).
4. ``kgate.stats.decide`` decides each row from its rounds (min 5, looks at
   odd counts, cap from the campaign); the loop runs until every row stops.
   Per row and arm: ``summarize`` over all samples. Per row: the paired ratio
   with its interval and FAST / SAME / SLOW / AMBIGUOUS; the equal-weight
   geomean of the gated rows with its interval.
5. Gates (``kgate.gates.bench.evaluate``): geomean lower bound >= bar; each
   dispatch class has an optimized gated row FAST; no optimized row SLOW
   beyond ``row_regression_max``; fallback rows and controls SAME; no gated
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths, stats
from kgate.errors import ConfigError
from kgate.gates.bench import (
    BenchConfig,
    RowOutcome,
    autotune_diff,
    autotune_picks,
    behind_note,
    describe,
    evaluate,
    exclusive_gate,
    to_rounds,
)
from kgate.measure import checkpoints, host_ahead
from kgate.measure import coordinator as measure
from kgate.measure.arms import Arm
from kgate.measure.profile import not_measured
from kgate.measure.rows import MeasureSpec, Row
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
    recorded, note = checkpoints.resume(ckpt, key_parts)
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
        checkpoints.append_line(ckpt, rnd)
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
    return timed_arms(ctx, (wt_base, wt_cand), lambda arms: measure.start_arms(ctx, spec, arms, deadline),
                      lambda arms: _measure(ctx, spec, cfg, plan, arms, samples, warm_calls, evidence, fx, build),
                      "the candidate runs every benchmark row")


def _measure(ctx: Context, spec: MeasureSpec, cfg: BenchConfig, plan: Plan, arms: dict[str, Arm], samples: int,
             warm_calls: int, evidence: str, fx: dict[str, Any], build: dict[str, Any]) -> StageResult:
    device, telemetry, exclusive_log = measure.claim_device(list(arms.values()), spec.cpu, "the benchmark")
    ours = {a.pid for a in arms.values()}
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
                 "inputs": {k: v["sha256"] for k, v in hashes.items()}}
    ctl = cfg.controller()
    recorded, decisions, resumed_from, resume_note = run_rounds(arms, plan, samples, telemetry, ctl, ckpt, key_parts,
                                                                ours)
    outcomes, row_data = [], []
    enabled = tuple(build["data"].get("enables") or ())
    for key, row, mode, role in plan.items:
        d = decisions[key]
        pb_, pc_ = profiled[key]["base"], profiled[key]["cand"]
        path = "control" if role == "control" else spec.row_path(row, enabled, pc_["kernels"], pc_["iterations"])[0]
        diff = autotune_diff(row.name, mode, autotune, sources)
        o = RowOutcome(key=key, row=row.name, mode=mode, role=role, kind=row.kind, klass=row.klass(spec.class_key),
                       path=path, decision=d, peak_base=pb_["peak_bytes"], peak_cand=pc_["peak_bytes"],
                       expected_bytes=spec.expected_bytes(row), autotune_diff=tuple(diff),
                       autotune_picks=tuple(autotune_picks(row.name, mode, autotune, sources)))
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
        "autotune": {a: {"tuners": [t for t in v["tuners"] if t["picks"]], "row_picks": v["row_picks"]}
                     for a, v in autotune.items()},
        "bar": cfg.bar, "forced": ctx.forced,
    }
    host = [((t or {}).get(a) or {}).get("host") or {} for c in row_data for t in c["telemetry"] for a in ("base", "cand")]
    return StageResult(gates=gates, data=data, reasons=measure.busy_note([h for h in host if h]) + behind_note(row_data))

