"""``python -m kgate plan``: what a run of the campaign would do, before it starts. It writes nothing.

Every stage is a Snakemake checkpoint, so ``snakemake -n`` can list the jobs
only up to the first checkpoint without a record (the DAG after it depends on
that record's status). The plan fills that gap from kgate's side: it resolves
the campaign as the workflow's DAG build does, then lists the preflight and
every stage of ``kgate.protocol.STAGES`` with its record path, the record's
status, what the run would do with it, and an estimate of its time.

Resolution. The config is config/config.yaml with the command line's keys
over it (campaign, gpu, target_path, candidate, force, new_epoch), as
Snakemake merges ``--config``; then ``kgate.workflow.resolve``, the DAG
build's own call, runs in the workdir (``--root``): it validates the config,
loads the campaign with the overrides, asks nvidia-smi for ``gpu: auto``,
computes the candidate id, and checks the epoch ledger read-only
(``kgate.epochs.check``: the epoch the run would be in, or the same one-line
refusal when the contract changed after a freeze without ``new_epoch``). It
writes nothing; the ledger is written only when Snakemake starts jobs
(``kgate.workflow.open_epoch``).

Reuse or run (kgate's view, in this order; the first rule that applies wins):

1. no record at the stage's path: **run**. Candidate stages are keyed by the
   candidate id (``kgate.paths.record``), so a new candidate runs them all
   and reuses the baseline stages;
2. a record stamped with an earlier epoch than the one this run uses:
   **run** (a record without an epoch stamp is taken as it is);
3. a gating input (``kgate.protocol.GATING_INPUTS``) that would run: **run**,
   since its new record will be newer than this one;
4. a record older (file mtime) than an existing gating input's record:
   **run**, Snakemake's mtime rule;
5. otherwise **reuse**.

Then ``kgate.protocol.gated_walk`` runs over these states: a reused record
gives its recorded status, a stage that would run is assumed to pass (its
status is not known before it runs, so the plan shows the most the run can
do). A stage the walk does not reach is **blocked**, naming the record that
stops it (its stage, status and first failing gate). The preflight (doctor)
is not a stage of the protocol: it runs when its record is missing.

Limits. Snakemake decides reruns by file times, the rules' ``params``
(e.g. each rule's ``contract`` section hash, the candidate's overrides),
code and software environment, from its own metadata under .snakemake/,
which the plan does not read: a changed campaign section that reruns a rule
under Snakemake while the epoch stays the same (before a freeze) shows as
reuse here, and ``--forcerun``/``--forceall`` are not modelled.

Estimates. The median ``provenance.wall_s`` (else finished_utc -
started_utc) over every earlier record of the same stage and device class
under results/ (this campaign's and other campaigns', closed epochs'
archives included, each record once); "no earlier record" when there is
none. Wall time of the stage's own process, not queue time. The GPU total
sums the estimates of the rules that hold a GPU (``kgate.protocol.GPU_STAGES``)
among those that would run; stages with no estimate are named, not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kgate import epochs, paths, protocol, workflow
from kgate.campaign import load_yaml
from kgate.errors import FormatVersionError, IncompleteData
from kgate.records import read_record, stage_times

PLAN_SCHEMA = "kgate.plan/1"
CONFIG_FILE = paths.PROJECT / "config" / "config.yaml"


@dataclass(frozen=True, slots=True)
class Blocker:
    """The record that stops the gated walk before a stage: its stage, status and first failing gate."""

    stage: str
    status: str
    gate: str | None
    detail: str | None


@dataclass(frozen=True, slots=True)
class StagePlan:
    """One stage of the plan (see the module docstring for ``action``: reuse, run or blocked)."""

    stage: str
    record: str
    record_exists: bool
    status: str | None
    action: str
    why: str
    gpu: bool
    estimate_s: float | None
    estimate_records: int
    blocked_by: Blocker | None = None


@dataclass(frozen=True, slots=True)
class EpochOutlook:
    """The epoch the run would be in, and how ``kgate.epochs.check`` gets there (its ``Opening.action``)."""

    number: int
    contract: str
    action: str


@dataclass(frozen=True, slots=True)
class Plan:
    campaign: str
    gpu: str
    candidate: str
    force: bool
    epoch: EpochOutlook
    preflight: StagePlan
    stages: tuple[StagePlan, ...]
    unreadable: tuple[str, ...]

    @property
    def running(self) -> list[StagePlan]:
        return [s for s in (self.preflight, *self.stages) if s.action == "run"]

    @property
    def gpu_estimate_s(self) -> float:
        return round(sum(s.estimate_s or 0.0 for s in self.running if s.gpu), 3)

    @property
    def unestimated(self) -> list[str]:
        return [s.stage for s in self.running if s.gpu and s.estimate_s is None]

    @property
    def dry_run_horizon(self) -> str | None:
        """The first checkpoint without a record in the walk: ``snakemake -n`` cannot show the jobs after it."""
        return next((s.stage for s in self.stages if s.action != "blocked" and not s.record_exists), None)

    def as_dict(self) -> dict[str, Any]:
        return {"schema": PLAN_SCHEMA, "campaign": self.campaign, "gpu": self.gpu, "candidate": self.candidate,
                "force": self.force, "epoch": asdict(self.epoch), "preflight": asdict(self.preflight),
                "stages": [asdict(s) for s in self.stages],
                "total": {"gpu_estimate_s": self.gpu_estimate_s,
                          "gpu_stages_run": [s.stage for s in self.running if s.gpu],
                          "unestimated": self.unestimated},
                "dry_run_horizon": self.dry_run_horizon, "unreadable": list(self.unreadable)}


def settings(overrides: dict[str, Any]) -> dict[str, Any]:
    """config/config.yaml with the given keys over it (None values left out), as Snakemake merges ``--config``.

    A campaign given as a relative file path is made absolute here, since the
    workflow resolves it against the workdir, which ``resolve`` enters."""
    cfg = dict(load_yaml(CONFIG_FILE) or {}) if CONFIG_FILE.is_file() else {}
    cfg.update({k: v for k, v in overrides.items() if v is not None})
    spec = cfg.get("campaign")
    if isinstance(spec, str) and Path(spec).suffix in (".yaml", ".yml"):
        cfg["campaign"] = str(Path(spec).expanduser().resolve())
    return cfg


def resolve(config: dict[str, Any], root: Path) -> tuple[workflow.Run, EpochOutlook]:
    """``kgate.workflow.resolve`` (read-only: ``kgate.epochs.check``) in the workdir ``root``, and the epoch outlook."""
    with contextlib.chdir(root):
        run = workflow.resolve(config)
        opening = epochs.check(run.campaign, run.new_epoch)
    return run, EpochOutlook(run.epoch["number"], run.epoch["contract"], opening.action)


def earlier_records(root: Path, stage: str, gpu: str) -> list[Path]:
    """Every record file of ``stage`` on ``gpu`` under root/results/: live trees and closed epochs' archives."""
    base = root / "results"
    keyed = "*/" if stage in protocol.CANDIDATE_STAGES else ""
    found = [*base.glob(f"*/{gpu}/{stage}/{keyed}record.json"),
             *base.glob(f"*/_epochs/*/{gpu}/{stage}/{keyed}record.json")]
    return sorted(found)


def estimate(root: Path, stage: str, gpu: str) -> tuple[float | None, int, list[str]]:
    """(median wall seconds, records used, unreadable files) over the earlier records of ``stage`` on ``gpu``.

    A record whose stage or device class differs from its path, or with no
    time, is not used; a file that is not a readable record is listed, not used.
    """
    seen: set[tuple[Any, ...]] = set()
    walls: list[float] = []
    unreadable: list[str] = []
    for path in earlier_records(root, stage, gpu):
        try:
            rec = read_record(path)
        except (IncompleteData, FormatVersionError) as exc:
            unreadable.append(f"{path.relative_to(root)}: {exc}")
            continue
        wall = stage_times(rec).wall_s
        if rec.get("stage") != stage or rec.get("gpu") != gpu or wall is None:
            continue
        prov = rec.get("provenance") or {}
        key = (rec.get("campaign"), rec.get("candidate"), prov.get("started_utc"), prov.get("host"), wall)
        if key in seen:
            continue
        seen.add(key)
        walls.append(wall)
    return (round(statistics.median(walls), 3) if walls else None), len(walls), unreadable


def _blocker(stage: str, record: dict[str, Any] | None, status: str) -> Blocker:
    gates = (record or {}).get("gates") or []
    bad = next((g for g in gates if g.get("status") not in ("pass", "skip")), None)
    return Blocker(stage=stage, status=status, gate=bad.get("name") if bad else None,
                   detail=bad.get("detail") if bad else None)


def build(config: dict[str, Any], root: Path | str = ".") -> Plan:
    """The plan of the run ``config`` describes (the workflow's config keys), over the tree at ``root``."""
    root = Path(root).resolve()
    run, outlook = resolve(settings(config), root)
    camp, gpu, cand, force = run.campaign, run.gpu, run.candidate, run.force
    unreadable: list[str] = []

    def rel(stage: str) -> Path:
        return paths.record(camp.name, gpu, stage, cand if stage in protocol.CANDIDATE_STAGES else None)

    records: dict[str, dict[str, Any] | None] = {}
    fresh: dict[str, tuple[bool, str]] = {}
    for stage in protocol.STAGES:
        path = root / rel(stage)
        records[stage] = read_record(path) if path.exists() else None
        fresh[stage] = _freshness(stage, records, fresh, root, rel, outlook)

    statuses: dict[str, str] = {}

    def status_of(stage: str) -> str:
        rec = records[stage]
        statuses[stage] = rec["status"] if fresh[stage][0] and rec is not None else "pass"
        return statuses[stage]

    asked = protocol.gated_walk(status_of, force)
    stopped = [s for s in asked if not protocol.lets_through(s, statuses[s], force)]
    rows = []
    for stage in protocol.STAGES:
        wall, n, bad = estimate(root, stage, gpu)
        unreadable += bad
        rec = records[stage]
        reused, why = fresh[stage]
        blocked = None
        if stage not in asked:
            by = next((s for s in stopped if s in protocol.GATING_INPUTS[stage]), stopped[-1])
            blocked = _blocker(by, records[by], statuses[by])
            action = "blocked"
            why = f"the gated walk stops at {by} ({statuses[by]}" + (f": {blocked.gate})" if blocked.gate else ")")
        else:
            action = "reuse" if reused else "run"
        rows.append(StagePlan(stage=stage, record=str(rel(stage)), record_exists=rec is not None,
                              status=rec["status"] if rec else None, action=action, why=why,
                              gpu=stage in protocol.GPU_STAGES, estimate_s=wall, estimate_records=n,
                              blocked_by=blocked))
    pre_rel = paths.record(camp.name, gpu, protocol.PREFLIGHT)
    pre_path = root / pre_rel
    pre = read_record(pre_path) if pre_path.exists() else None
    wall, n, bad = estimate(root, protocol.PREFLIGHT, gpu)
    unreadable += bad
    preflight = StagePlan(stage=protocol.PREFLIGHT, record=str(pre_rel), record_exists=pre is not None,
                          status=pre["status"] if pre else None, action="reuse" if pre else "run",
                          why="the preflight's record exists" if pre else "no record",
                          gpu=protocol.PREFLIGHT in protocol.GPU_STAGES, estimate_s=wall, estimate_records=n)
    return Plan(campaign=camp.name, gpu=gpu, candidate=cand, force=force, epoch=outlook, preflight=preflight,
                stages=tuple(rows), unreadable=tuple(unreadable))


def _freshness(stage: str, records: dict[str, dict[str, Any] | None], fresh: dict[str, tuple[bool, str]],
               root: Path, rel: Callable[[str], Path], outlook: EpochOutlook) -> tuple[bool, str]:
    """(reused, why) by rules 1-4 of the module docstring; earlier stages' entries are in ``fresh``."""
    rec = records[stage]
    if rec is None:
        return False, "no record" + (" for this candidate" if stage in protocol.CANDIDATE_STAGES else "")
    stamp = rec.get("epoch")
    if stamp and stamp.get("number") != outlook.number:
        return False, f"record of epoch {stamp.get('number')}; this run is epoch {outlook.number}"
    inputs = protocol.GATING_INPUTS[stage]
    rerun = [s for s in inputs if not fresh[s][0]]
    if rerun:
        return False, f"its input {rerun[0]} runs again"
    mtime = (root / rel(stage)).stat().st_mtime
    newer = [s for s in inputs if records[s] is not None and (root / rel(s)).stat().st_mtime > mtime]
    if newer:
        return False, f"record older than the {newer[0]} record"
    return True, "record exists" + ("" if stamp else " (no epoch stamp)")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "no earlier record"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def render_text(plan: Plan) -> str:
    """The plan as a table for a terminal."""
    head = (f"kgate plan: campaign {plan.campaign} on {plan.gpu}, candidate {plan.candidate}"
            f"{', forced' if plan.force else ''}; epoch {plan.epoch.number} ({plan.epoch.action})")
    cols = ("stage", "gpu", "status", "action", "estimate", "why")
    table = [cols]
    for s in (plan.preflight, *plan.stages):
        est = _duration(s.estimate_s) + (f" (n={s.estimate_records})" if s.estimate_records else "")
        table.append((s.stage, "yes" if s.gpu else "-", s.status or "none", s.action, est, s.why))
    widths = [max(len(r[i]) for r in table) for i in range(len(cols) - 1)]
    lines = [head, ""]
    for r in table:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])
    lines.append("")
    known = [s.stage for s in plan.running if s.gpu and s.estimate_s is not None]
    total = (f"GPU time of the jobs that would run: about {_duration(plan.gpu_estimate_s)} ({', '.join(known)})"
             if known else "GPU time of the jobs that would run: no estimate")
    if plan.unestimated:
        total += f"; no earlier record of {', '.join(plan.unestimated)} on {plan.gpu}"
    if any(s.gpu for s in plan.running):
        lines.append(total + ". A stage after one that runs is counted as if that one passes.")
    else:
        lines.append("No GPU job would run.")
    if plan.dry_run_horizon:
        lines.append(f"snakemake -n lists the jobs up to the checkpoint {plan.dry_run_horizon}; the ones after it "
                     "depend on its record.")
    lines.append("records:")
    lines += [f"  {s.stage}: {s.record}" for s in (plan.preflight, *plan.stages)]
    lines += [f"unreadable: {u}" for u in plan.unreadable]
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--campaign", default=None, help="campaign name or file (default: config/config.yaml's)")
    p.add_argument("--gpu", default=None, help="device class (default: config/config.yaml's, auto = nvidia-smi)")
    p.add_argument("--target-path", default=None, help="the workflow's target_path: your clone of the target")
    p.add_argument("--candidate-source", default=None,
                   help="the workflow's candidate: overlay:<folder>, ref:<git ref> or worktree:<path>")
    p.add_argument("--force", action="store_true", help="the workflow's force=true: walk on past a STOP")
    p.add_argument("--new-epoch", action="store_true", help="the workflow's new_epoch=true")
    p.add_argument("--root", default=".", help="the folder holding results/ (the Snakemake workdir; default: .)")
    p.add_argument("--json", action="store_true", help=f"print the plan as JSON ({PLAN_SCHEMA})")


def run_cli(args: argparse.Namespace) -> int:
    config = {"campaign": args.campaign, "gpu": args.gpu, "target_path": args.target_path,
              "candidate": args.candidate_source, "force": True if args.force else None,
              "new_epoch": True if args.new_epoch else None}
    plan = build(config, Path(args.root))
    print(json.dumps(plan.as_dict(), indent=2) + "\n" if args.json else render_text(plan), end="")
    return 0

