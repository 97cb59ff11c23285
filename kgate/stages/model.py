"""Stage ``model``: training throughput of the target's causal LM, dense and packed varlen, both arms in one job.

Method (docs/measurement.md, "model", has the rules and their limits):

1. The model code: the campaign's ``model.packages`` (pinned sdists such as
   flash-linear-attention for fla-core) are fetched and unpacked
   (``kgate.source.packages``); each arm appends their folders to the target
   package's ``__path__`` after its own worktree. A target that has the
   model code itself (a clone of fla) needs none.
2. Two warm worker processes of ``kgate/measure/harness/train_throughput.py``, BENCH_BASE
   and the candidate, each with its worktree first on PYTHONPATH and its own
   Triton cache (the bench arms' caches, so kernels compiled there are
   reused), on the same device (same UUID). Every module of the target
   package must come from the arm's worktree or a package folder.
3. Both arms build the model from the same seed (parameter hashes must be
   equal), prepare the same token batches (hashes equal) and warm both
   workloads (on a GPU one arm after the other, so autotuning never runs
   beside the other arm). Out of memory while building or warming (two arms
   share the device) halves the layer count, not below ``min_layers``, and
   rebuilds both; the requested and used counts and the cause are recorded.
4. Rounds: round ``i`` runs one block of ``steps_per_block`` steps per arm
   and workload, the baseline first in even rounds (AB) and second in odd
   ones (BA); clocks, power and throttle reasons are read after every block;
   each round is appended to ``blocks.jsonl`` (fsync), so a killed stage
   resumes at its last finished round (kgate.measure.checkpoints). The loop stops as
   ``kgate.gates.model.should_stop`` says, or before the stage's time runs
   out (the gates then say how many blocks ran).
5. Gates (``kgate.gates.model``): dense tokens/s gain >= the bar and varlen
   within the tolerance, each from the crossover interval of the block
   ratios; the arms' environment equal; the GPU exclusive. On CPU the timed
   gates are shown as skip (timings under the interpreter mean nothing).
"""

from __future__ import annotations

import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths, stats
from kgate.errors import ConfigError, IncompleteData, KgateError, ProvenanceMismatch
from kgate.gates.bench import exclusive_gate
from kgate.gates.model import WORKLOADS, decide_all, describe, evaluate, should_stop
from kgate.measure import checkpoints
from kgate.measure import coordinator as measure
from kgate.measure.arms import Arm, Deadline
from kgate.measure.model_spec import ModelSpec, declared_absent, load_spec
from kgate.measure.rows import CPU_TIMING_NOTE
from kgate.records import Gate, StageResult
from kgate.source import packages
from kgate.stages.common import ROUNDS_SHARE, Context, timed_arms

HARNESS = paths.PACKAGE / "measure" / "harness" / "train_throughput.py"
CHECKPOINT = "blocks.jsonl"
#: an A/A calibration by hand (--calibration) keeps its own blocks, so a gated run never resumes from them
CALIBRATION_CHECKPOINT = "blocks.calibration.jsonl"
CHECKPOINT_SCHEMA = "kgate.stages.model-blocks/1"


def not_measured(ctx: Context) -> StageResult:
    """A campaign without a model section: nothing to train (skip on CPU, unavailable on a GPU). A campaign that
    declares none (``model.none``) passes with nothing measured: its GO says "kernel-level evidence only"."""
    reason = declared_absent(ctx.campaign)
    if reason:
        return StageResult(gates=[Gate("end_to_end_workload", "an end-to-end workload, or a reason for none",
                                       "none declared", "pass", detail=f"no end-to-end workload: {reason}")],
                           data={"measured": False, "declared_absent": reason})
    status = "skip" if ctx.gpu == "cpu" else "unavailable"
    return StageResult(gates=[Gate("model_measured", "the campaign defines a model section", "no model section",
                                   status, detail="the campaign has no 'model' section: no training throughput")],
                       data={"measured": False})


def start_arms(ctx: Context, settings: dict[str, Any], arms: list[tuple[str, Path, Path]],
               deadline: Deadline) -> list[Arm]:
    """One harness process per (name, worktree, Triton cache), initialised in parallel; each must have
    imported the target package from its own worktree and the rest of it only from the package folders."""
    started: list[Arm] = []
    try:
        for name, worktree, cache in arms:
            cmd = [sys.executable, str(HARNESS), "--serve", "--arm", name]
            started.append(Arm(name, worktree, cache, measure.worker_env(ctx, worktree, cache),
                               ctx.out_dir / f"worker-{name}.log", deadline, command=cmd))
        for arm in started:
            arm.send("init", settings=settings)
        for arm in started:
            arm.info = arm.receive()
            measure.check_provenance(arm, arm.info)
            stray = arm.info["modules"]["elsewhere"]
            if stray:
                raise ProvenanceMismatch(f"arm {arm.name}: module(s) of {arm.info['package']} imported from outside "
                                         f"its worktree and the package folders: {'; '.join(stray[:5])}; uninstall "
                                         "the target from the environment so each arm runs its own code")
    except BaseException:
        for arm in started:
            arm.close()
        raise
    return started


def run(ctx: Context) -> StageResult:
    c, gpu, cid = ctx.campaign, ctx.gpu, ctx.candidate
    spec = load_spec(c, gpu)
    if spec is None:
        return not_measured(ctx)
    calibration = ctx.calibration
    need = ["fixture_freeze", "candidate_build"] + ([] if calibration else ["bench"])
    missing = [s for s in need if s not in ctx.inputs]
    if missing:
        raise IncompleteData(f"model: no passing {', '.join(missing)} record among the input records; the stage runs "
                             "after bench passed (an A/A calibration by hand, without bench: --calibration)")
    fx, build = ctx.inputs["fixture_freeze"], ctx.inputs["candidate_build"]
    wt_base, wt_cand = ctx.timed_worktrees()
    evidence = str(paths.record(c.name, gpu, "model", cid))
    pkgs = packages.materialize(list(spec.packages), ctx.sdist_cache)
    settings = spec.settings([(p["extends"], p["folder"]) for p in pkgs])
    deadline = Deadline(ctx.deadline_s(ROUNDS_SHARE))

    def measured(arms: dict[str, Arm]) -> StageResult:
        res = _measure(ctx, spec, settings, pkgs, arms, deadline, evidence, fx, build, calibration)
        if not calibration:
            return res
        return StageResult(gates=[*res.gates, Gate(
            "calibration", "a gated run (bench passed)", "A/A calibration by hand", "inconclusive", evidence=evidence,
            detail="run with --calibration, bench not required: the gates describe the stage's noise and never "
                   "count for a verdict")], data=res.data, reasons=res.reasons)

    return timed_arms(ctx, (wt_base, wt_cand), lambda arms: start_arms(ctx, settings, arms, deadline), measured,
                      "the candidate trains both workloads")


@dataclass(frozen=True, slots=True)
class Fitted:
    """What building and warming found: the layer count that fits, the build, inputs and warm-up answers."""

    layers: int
    attempts: list[dict[str, Any]]
    built: dict[str, dict[str, Any]]
    inputs: dict[str, dict[str, Any]]
    warm: dict[str, dict[str, dict[str, Any]]]
    varlen: dict[str, dict[str, Any]] | None = None


def fit(arms: dict[str, Arm], spec: ModelSpec) -> Fitted:
    """Build, prepare and warm both arms at the first layer count of ``spec.layer_plan()`` that fits.

    Out of memory in either arm (building, or any warm-up step) releases both
    models and tries the next count; none fitting is an error. On a GPU the
    arms warm one after the other (autotuning never runs beside the other
    arm); on CPU in parallel (the interpreter keeps one config, times nothing).
    """
    both = [arms["base"], arms["cand"]]
    steps = int(spec.run["warmup_steps"])
    attempts: list[dict[str, Any]] = []
    for layers in spec.layer_plan():
        measure.progress(f"building both arms with {layers} layer(s)")
        built = measure.ask_all(both, "build", layers=layers)
        oom = {a: r["oom"] for a, r in built.items() if r["oom"]}
        during = "build"
        inputs: dict[str, dict[str, Any]] = {}
        warm: dict[str, dict[str, dict[str, Any]]] = {"base": {}, "cand": {}}
        if not oom:
            inputs = measure.ask_all(both, "prepare")
            for w in spec.workloads:
                measure.progress(f"warming {w} ({steps} step(s) per arm)")
                if spec.cpu:
                    answers = measure.ask_all(both, "warm", workload=w, steps=steps)
                else:
                    answers = {a.name: a.request("warm", workload=w, steps=steps) for a in both}
                for a, r in answers.items():
                    warm[a][w] = r
                oom = {a: r["oom"] for a, r in answers.items() if r["oom"]}
                if oom:
                    during = f"{w} warm-up"
                    break
        if not oom:
            attempts.append({"layers": layers, "oom": None})
            # after the warm-up, so a forward without gradients fits where training steps did
            varlen = measure.ask_all(both, "varlen_check") if "varlen" in spec.workloads else None
            if varlen is not None:
                check_varlen(spec, varlen)
            return Fitted(layers, attempts, built, inputs, warm, varlen)
        attempts.append({"layers": layers, "oom": oom, "during": during})
        measure.progress(f"out of memory with {layers} layer(s) ({during}): {oom}")
        measure.ask_all(both, "release")
    tried = ", ".join(str(a["layers"]) for a in attempts)
    last = attempts[-1]
    hint = ("set model.gpu.min_layers to allow fewer layers, or lower batch or seq_len"
            if spec.run.get("min_layers") is None else "lower min_layers, batch or seq_len")
    raise KgateError(f"model: the two arms do not fit in device memory at {tried} layer(s) (last: {last['during']}, "
                     f"{last['oom']}); {hint}")


def check_varlen(spec: ModelSpec, answers: dict[str, dict[str, Any]]) -> None:
    """A packed batch's loss must change with its boundaries: a model that ignores (or refuses) ``varlen_key`` would
    train the varlen workload as one dense sequence and name it varlen."""
    for arm, r in answers.items():
        if not r["used"]:
            raise ConfigError(f"campaign {spec.campaign}: key 'model.varlen_key': the model does not use "
                              f"{spec.varlen_key!r} (arm {arm}: {r['why']}); list only dense in model.workloads, or "
                              "name the forward argument that takes sequence boundaries")


def check_equal(kind: str, by_arm: dict[str, Any]) -> None:
    """The arms must start from the same weights and train on the same tokens."""
    values = list(by_arm.values())
    if any(v != values[0] for v in values[1:]):
        raise ProvenanceMismatch(f"model: {kind} differ between arms {by_arm}; building from the seed must be "
                                 "deterministic and both arms must run the same model code")


def time_round(index: int, arms: dict[str, Arm], steps: int, telemetry: measure.Telemetry,
               workloads: tuple[str, ...] = WORKLOADS) -> dict[str, Any]:
    """One round: a block per workload in each arm, in this round's order; telemetry after each block."""
    order = stats.alternating_orders(index + 1)[-1]
    first, second = ("base", "cand") if order == stats.AB else ("cand", "base")
    cells: dict[str, Any] = {}
    t0 = time.time()
    for w in workloads:
        cell: dict[str, Any] = {}
        for name in (first, second):
            res = arms[name].request("block", workload=w, steps=steps)
            res["telemetry"] = telemetry.sample()
            cell[name] = res
        cells[w] = cell
    return {"kind": "round", "index": index, "order": order, "workloads": cells, "started": t0, "finished": time.time()}


def run_blocks(arms: dict[str, Arm], spec: ModelSpec, telemetry: measure.Telemetry, ckpt: Path,
               key_parts: dict[str, Any], ours: set[int], deadline: Deadline, round_estimate_s: float
               ) -> tuple[list[dict[str, Any]], int, str | None, str]:
    """Rounds until ``should_stop`` (or the stage's time would run out), each appended to ``ckpt`` first.

    Returns (rounds, resumed_from, resume note, why the loop stopped).
    """
    recorded, note = checkpoints.resume(ckpt, key_parts)
    resumed_from = len(recorded)
    if note:
        measure.progress(note)
    th = spec.thresholds
    steps = int(spec.run["steps_per_block"])
    while True:
        stop, why = should_stop(decide_all(recorded, th), th)
        if stop:
            return recorded, resumed_from, note, why
        last = max((r["finished"] - r["started"] for r in recorded[resumed_from:]), default=round_estimate_s)
        if deadline.left() < 1.5 * last + 30:
            return recorded, resumed_from, note, (f"the stage's time limit: {deadline.left():.0f} s left, a round "
                                                  f"takes about {last:.0f} s")
        rnd = time_round(len(recorded), arms, steps, telemetry, spec.workloads)
        rnd["exclusive"] = measure.foreign_processes(telemetry.compute_apps(), ours)
        checkpoints.append_line(ckpt, rnd)
        recorded.append(rnd)
        for w, d in decide_all(recorded, th).items():
            e = d.estimate
            iv = f"{e.speedup:.4f} [{e.lower:.4f}, {e.upper:.4f}]" if e else "n/a (2 blocks needed)"
            measure.progress(f"round {len(recorded)} (cap {th.max_blocks}, {rnd['order']}) {w} tokens/s ratio: {iv}")


def _measure(ctx: Context, spec: ModelSpec, settings: dict[str, Any], pkgs: list[dict[str, Any]],
             arms: dict[str, Arm], deadline: Deadline, evidence: str, fx: dict[str, Any],
             build: dict[str, Any], calibration: bool = False) -> StageResult:
    device, telemetry, exclusive_log = measure.claim_device(list(arms.values()), spec.cpu, "the model stage")
    ours = {a.pid for a in arms.values()}
    uuid = device.get("uuid")
    fitted = fit(arms, spec)
    check_equal("initial parameter hashes", {a: r["params_sha256"] for a, r in fitted.built.items()})
    for w in spec.workloads:
        check_equal(f"{w} input hashes", {a: r[w]["sha256"] for a, r in fitted.inputs.items()})
    warm_s = [sum(fitted.warm[a][w]["wall_s"][-1:]) for a in ("base", "cand") for w in spec.workloads]
    round_estimate = sum(warm_s) * int(spec.run["steps_per_block"])
    th = spec.thresholds
    ckpt = ctx.out_dir / (CALIBRATION_CHECKPOINT if calibration else CHECKPOINT)
    inputs = fitted.inputs["base"]
    key_parts = {"schema": CHECKPOINT_SCHEMA, "bench_base": fx["data"]["bench_base"],
                 "candidate_sha": build["data"]["candidate_sha"], "device": uuid or socket.gethostname(),
                 "settings": {k: v for k, v in settings.items() if k != "package_dirs"},
                 "packages": [p["sha256"] for p in pkgs], "layers": fitted.layers,
                 "params_sha256": fitted.built["base"]["params_sha256"],
                 "inputs": {w: inputs[w]["sha256"] for w in spec.workloads}, "calibration": calibration}
    recorded, resumed_from, resume_note, stopped = run_blocks(arms, spec, telemetry, ckpt, key_parts, ours, deadline,
                                                              round_estimate)
    decisions = decide_all(recorded, th)
    gates = evaluate(decisions, th, evidence)
    gates.append(exclusive_gate(recorded, exclusive_log, spec.cpu, evidence))
    layers = {"requested": spec.layers, "used": fitted.layers, "min": spec.run.get("min_layers"),
              "reduced": fitted.layers != spec.layers, "attempts": fitted.attempts}
    reasons = []
    if layers["reduced"]:
        cause = fitted.attempts[0]
        reasons.append(f"layer count reduced from {spec.layers} to {fitted.layers} by device memory: out of memory "
                       f"with {cause['layers']} layers ({cause['during']}, arm(s) {', '.join(cause['oom'])})")
    if len(recorded) < th.min_blocks:
        reasons.append(f"stopped after {len(recorded)} of the minimum {th.min_blocks} blocks: {stopped}")
    ctl = th.controller()
    built = fitted.built["base"]
    data = {
        "measured": True, "cpu": spec.cpu, "timings_meaningful": not spec.cpu, "calibration": calibration,
        "note": CPU_TIMING_NOTE if spec.cpu else None,
        "candidate": ctx.candidate, "candidate_sha": build["data"]["candidate_sha"],
        "bench_base": fx["data"]["bench_base"], "device": device, "telemetry": telemetry.method,
        "model": {"config_class": spec.config_class, "model_class": spec.model_class, "builder": spec.builder,
                  "patch": spec.patch, "target_package": spec.target_package, "workloads": list(spec.workloads),
                  "varlen_check": fitted.varlen,
                  "config": dict(spec.run["config"]), "parameters": built["parameters"], "dtype": spec.dtype,
                  "seed": spec.seed, "optimizer": {**spec.optimizer, "fused": built["fused_optimizer"]},
                  "packages": pkgs, "resolved_config": built["config"]},
        "layers": layers,
        "schedule": {"batch": int(spec.run["batch"]), "seq_len": int(spec.run["seq_len"]),
                     "tokens_per_step": spec.tokens_per_step,
                     **({"varlen_sequences": int(spec.run["varlen_sequences"]),
                         "varlen_boundaries": inputs["varlen"][spec.varlen_key],
                         "varlen_lengths": inputs["varlen"]["lengths"]} if "varlen" in spec.workloads else {}),
                     "warmup_steps": int(spec.run["warmup_steps"]), "steps_per_block": int(spec.run["steps_per_block"]),
                     "blocks": {"min": th.min_blocks, "max": th.max_blocks}},
        "thresholds": {"dense_gain_min": th.dense_gain_min, "varlen_tolerance": th.varlen_tolerance,
                       "resolution": th.resolution},
        "controller": {"min_blocks": ctl.min_rounds, "max_blocks": ctl.max_rounds, "look_confidence": ctl.look_confidence,
                       "looks": list(ctl.looks())},
        "blocks": len(recorded), "stopped": stopped, "resumed_from_block": resumed_from, "checkpoint": str(ckpt),
        "resume": resume_note,
        "workloads": [describe(w, recorded, decisions[w], th) for w in spec.workloads],
        "warm": {a: {w: {"wall_s": r["wall_s"], "loss": r["loss"]} for w, r in v.items()}
                 for a, v in fitted.warm.items()},
        "input_hashes": {w: inputs[w]["tensors"] for w in spec.workloads},
        "params_sha256": built["params_sha256"],
        "exclusive": exclusive_log + [{"when": f"after round {r['index'] + 1}", **r.get("exclusive", {})}
                                      for r in recorded if r.get("exclusive")],
        "workers": {a.name: a.info for a in arms.values()},
        "forced": ctx.forced,
    }
    return StageResult(gates=gates, data=data, reasons=reasons)
