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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate import paths, stats
from kgate.campaign import Campaign
from kgate.errors import ConfigError, IncompleteData, KgateError, ProvenanceMismatch
from kgate.gates.bench import exclusive_gate
from kgate.gates.model import WORKLOADS, ModelThresholds, decide_all, describe, evaluate, should_stop
from kgate.measure import checkpoints
from kgate.measure import coordinator as measure
from kgate.measure.arms import Arm, Deadline
from kgate.measure.rows import CPU_TIMING_NOTE
from kgate.records import Gate, StageResult
from kgate.source import packages
from kgate.stages.common import ROUNDS_SHARE, Context, timed_arms

HARNESS = paths.PACKAGE / "measure" / "harness" / "train_throughput.py"
CHECKPOINT = "blocks.jsonl"
#: an A/A calibration by hand (--calibration) keeps its own blocks, so a gated run never resumes from them
CALIBRATION_CHECKPOINT = "blocks.calibration.jsonl"
CHECKPOINT_SCHEMA = "kgate.stages.model-blocks/1"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The campaign's ``model`` section resolved for one device kind (``gpu`` or ``cpu`` run settings)."""

    campaign: str
    cpu: bool
    config_class: str
    model_class: str
    layers_key: str
    varlen_key: str
    dtype: str
    seed: int
    optimizer: dict[str, Any]
    packages: tuple[dict[str, Any], ...]
    run: dict[str, Any]
    thresholds: ModelThresholds
    cpu_setup: Path | None
    env_record: tuple[str, ...] = field(default=())

    @property
    def layers(self) -> int:
        return int(self.run["layers"])

    @property
    def tokens_per_step(self) -> int:
        return int(self.run["batch"]) * int(self.run["seq_len"])

    def layer_plan(self) -> list[int]:
        """Layer counts to try: the requested one, then halved while not below ``min_layers`` (none if null)."""
        plan = [self.layers]
        floor = self.run.get("min_layers")
        if floor is None:
            return plan
        while plan[-1] > int(floor):
            plan.append(max(int(floor), plan[-1] // 2))
        return plan

    def settings(self, package_dirs: list[tuple[str, str]]) -> dict[str, Any]:
        """The harness's settings (kgate/measure/harness/train_throughput.py), the same for both arms."""
        r = self.run
        return {"config_class": self.config_class, "model_class": self.model_class, "config": dict(r["config"]),
                "layers": self.layers, "layers_key": self.layers_key, "varlen_key": self.varlen_key,
                "batch": int(r["batch"]), "seq_len": int(r["seq_len"]), "varlen_sequences": int(r["varlen_sequences"]),
                "warmup_steps": int(r["warmup_steps"]), "steps_per_block": int(r["steps_per_block"]),
                "dtype": self.dtype, "seed": self.seed, "optimizer": dict(self.optimizer), "cpu": self.cpu,
                "cpu_setup": str(self.cpu_setup) if self.cpu_setup else None,
                "package_dirs": [list(p) for p in package_dirs], "env_record": list(self.env_record)}


def load_spec(campaign: Campaign, gpu: str) -> ModelSpec | None:
    """The campaign's model settings for this device kind, or None when it has no ``model`` section."""
    d = campaign.data
    m = d.get("model")
    if not m:
        return None
    cpu = gpu == "cpu"
    run = m["cpu" if cpu else "gpu"]
    blocks = run.get("blocks") or {}
    gates = m.get("gates") or {}
    th = ModelThresholds(dense_gain_min=float(gates.get("dense_gain_min", 0.03)),
                         varlen_tolerance=float(gates.get("varlen_tolerance", 0.02)),
                         resolution=float(gates.get("resolution", 0.02)), min_blocks=int(blocks.get("min", 5)),
                         max_blocks=int(blocks.get("max", 15)), cpu=cpu)
    if th.max_blocks < th.min_blocks:
        raise ConfigError(f"{campaign.path}: key 'model.{'cpu' if cpu else 'gpu'}.blocks': max {th.max_blocks} "
                          f"is below min {th.min_blocks}")
    key = f"{campaign.path}: key 'model.{'cpu' if cpu else 'gpu'}"
    layers_key = m.get("layers_key", "num_hidden_layers")
    if layers_key in run["config"]:
        raise ConfigError(f"{key}.config': sets {layers_key}; the layer count is model.{'cpu' if cpu else 'gpu'}.layers")
    if int(run["varlen_sequences"]) > int(run["batch"]) * int(run["seq_len"]):
        raise ConfigError(f"{key}.varlen_sequences': {run['varlen_sequences']} sequences do not fit in "
                          f"batch x seq_len = {int(run['batch']) * int(run['seq_len'])} tokens")
    if run.get("min_layers") is not None and int(run["min_layers"]) > int(run["layers"]):
        raise ConfigError(f"{key}.min_layers': {run['min_layers']} is above layers {run['layers']}")
    setup = d["gate"].get("cpu_setup")
    return ModelSpec(campaign=campaign.name, cpu=cpu, config_class=m["config_class"], model_class=m["model_class"],
                     layers_key=layers_key, varlen_key=m.get("varlen_key", "cu_seqlens"),
                     dtype=m.get("dtype", "bfloat16"), seed=int(m.get("seed", 20240601)),
                     optimizer=dict(m.get("optimizer") or {}), packages=tuple(m.get("packages") or ()), run=run,
                     thresholds=th, cpu_setup=(paths.PROJECT / setup) if (cpu and setup) else None,
                     env_record=tuple(d.get("env", {}).get("record", [])))


def not_measured(ctx: Context) -> StageResult:
    """A campaign without a model section: nothing to train (skip on CPU, unavailable on a GPU)."""
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
            for w in WORKLOADS:
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
            return Fitted(layers, attempts, built, inputs, warm)
        attempts.append({"layers": layers, "oom": oom, "during": during})
        measure.progress(f"out of memory with {layers} layer(s) ({during}): {oom}")
        measure.ask_all(both, "release")
    tried = ", ".join(str(a["layers"]) for a in attempts)
    last = attempts[-1]
    hint = ("set model.gpu.min_layers to allow fewer layers, or lower batch or seq_len"
            if spec.run.get("min_layers") is None else "lower min_layers, batch or seq_len")
    raise KgateError(f"model: the two arms do not fit in device memory at {tried} layer(s) (last: {last['during']}, "
                     f"{last['oom']}); {hint}")


def check_equal(kind: str, by_arm: dict[str, Any]) -> None:
    """The arms must start from the same weights and train on the same tokens."""
    values = list(by_arm.values())
    if any(v != values[0] for v in values[1:]):
        raise ProvenanceMismatch(f"model: {kind} differ between arms {by_arm}; building from the seed must be "
                                 "deterministic and both arms must run the same model code")


def time_round(index: int, arms: dict[str, Arm], steps: int, telemetry: measure.Telemetry) -> dict[str, Any]:
    """One round: a block per workload in each arm, in this round's order; telemetry after each block."""
    order = stats.alternating_orders(index + 1)[-1]
    first, second = ("base", "cand") if order == stats.AB else ("cand", "base")
    cells: dict[str, Any] = {}
    t0 = time.time()
    for w in WORKLOADS:
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
        rnd = time_round(len(recorded), arms, steps, telemetry)
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
    for w in WORKLOADS:
        check_equal(f"{w} input hashes", {a: r[w]["sha256"] for a, r in fitted.inputs.items()})
    warm_s = [sum(fitted.warm[a][w]["wall_s"][-1:]) for a in ("base", "cand") for w in WORKLOADS]
    round_estimate = sum(warm_s) * int(spec.run["steps_per_block"])
    th = spec.thresholds
    ckpt = ctx.out_dir / (CALIBRATION_CHECKPOINT if calibration else CHECKPOINT)
    inputs = fitted.inputs["base"]
    key_parts = {"schema": CHECKPOINT_SCHEMA, "bench_base": fx["data"]["bench_base"],
                 "candidate_sha": build["data"]["candidate_sha"], "device": uuid or socket.gethostname(),
                 "settings": {k: v for k, v in settings.items() if k != "package_dirs"},
                 "packages": [p["sha256"] for p in pkgs], "layers": fitted.layers,
                 "params_sha256": fitted.built["base"]["params_sha256"],
                 "inputs": {w: inputs[w]["sha256"] for w in WORKLOADS}, "calibration": calibration}
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
        "model": {"config_class": spec.config_class, "model_class": spec.model_class,
                  "config": dict(spec.run["config"]), "parameters": built["parameters"], "dtype": spec.dtype,
                  "seed": spec.seed, "optimizer": {**spec.optimizer, "fused": built["fused_optimizer"]},
                  "packages": pkgs, "resolved_config": built["config"]},
        "layers": layers,
        "schedule": {"batch": int(spec.run["batch"]), "seq_len": int(spec.run["seq_len"]),
                     "tokens_per_step": spec.tokens_per_step, "varlen_sequences": int(spec.run["varlen_sequences"]),
                     "varlen_boundaries": inputs["varlen"][spec.varlen_key], "varlen_lengths": inputs["varlen"]["lengths"],
                     "warmup_steps": int(spec.run["warmup_steps"]), "steps_per_block": int(spec.run["steps_per_block"]),
                     "blocks": {"min": th.min_blocks, "max": th.max_blocks}},
        "thresholds": {"dense_gain_min": th.dense_gain_min, "varlen_tolerance": th.varlen_tolerance,
                       "resolution": th.resolution},
        "controller": {"min_blocks": ctl.min_rounds, "max_blocks": ctl.max_rounds, "look_confidence": ctl.look_confidence,
                       "looks": list(ctl.looks())},
        "blocks": len(recorded), "stopped": stopped, "resumed_from_block": resumed_from, "checkpoint": str(ckpt),
        "resume": resume_note,
        "workloads": [describe(w, recorded, decisions[w], th) for w in WORKLOADS],
        "warm": {a: {w: {"wall_s": r["wall_s"], "loss": r["loss"]} for w, r in v.items()}
                 for a, v in fitted.warm.items()},
        "input_hashes": {w: inputs[w]["tensors"] for w in WORKLOADS},
        "params_sha256": built["params_sha256"],
        "exclusive": exclusive_log + [{"when": f"after round {r['index'] + 1}", **r.get("exclusive", {})}
                                      for r in recorded if r.get("exclusive")],
        "workers": {a.name: a.info for a in arms.values()},
        "forced": ctx.forced,
    }
    return StageResult(gates=gates, data=data, reasons=reasons)
