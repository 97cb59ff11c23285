"""What every stage does around its own logic.

``execute`` loads and validates the campaign, checks that the device has the
class the paths claim, checks that the previous gate passed (a stage is never
run past a failed gate, even by hand), runs the stage function, and writes the
record with provenance. A stage that uses BENCH_BASE or the candidate's
worktree gets it through ``Context.bench_base`` / ``candidate_worktree``, which
verify it by content first. A ``KgateError`` propagates to the CLI (exit 2, no
record written, so nothing already measured is overwritten by a non-result).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import campaign_checks, epochs, paths, protocol, provenance
from kgate import device as device_mod
from kgate.cache import stack as stack_mod
from kgate.cache.store import KernelCache
from kgate.campaign import Campaign
from kgate.errors import IncompleteData
from kgate.gates import env as env_gates
from kgate.measure import worker_numerics
from kgate.measure.arms import Arm, WorkerFailure
from kgate.records import Gate, StageResult, build_record, read_record, write_json
from kgate.source.worktree import verify_frozen, verify_worktree
from kgate.testrun import memory_fit, runner

StageFn = Callable[["Context"], StageResult]

#: The records whose gate runs measured the per-test GPU memory peaks that size the run of the tests that ran out
#: of memory beside other workers (``kgate.testrun.runner.recovery_fit``)
MEMORY_PEAK_SOURCES = ("baseline_tests", "fixture_freeze")
#: Shares of the stage time limit (``--runtime-min``) given to what a stage starts, one per purpose; the rest
#: of the limit is left for the stage's own work around it before the workflow's limit ends the job.
#: A gate run (pytest: baseline_tests, fixture_freeze, candidate_gate and the dependent tests).
GATE_RUN_SHARE = 0.9
#: The workers of a stage that profiles without a round checkpoint (profile_baseline, profile_candidate, ncu).
PROFILE_SHARE = 0.9
#: The workers of a stage whose rounds checkpoint (bench, model): a killed job resumes, so they run closer to it.
ROUNDS_SHARE = 0.95


@dataclass(frozen=True, slots=True)
class Context:
    """What a stage function receives.

    ``args`` is the stage's parsed command line; stages read it only through the
    properties below (``stage``, ``forced``, ``calibration``, ``workers``,
    ``test_timeout_s``, ``sdist_cache``, ``kernel_cache``, ``deadline_s``), never directly.
    """

    campaign: Campaign
    gpu: str
    candidate: str | None
    args: argparse.Namespace
    device: dict[str, Any]
    inputs: dict[str, dict[str, Any]]
    #: the GPU's memory at the stage's start (``kgate.device.memory``); None on CPU or when it cannot be read
    gpu_memory: device_mod.Memory | None = None

    @property
    def stage(self) -> str:
        """The stage being run (the CLI subcommand)."""
        return str(self.args.stage)

    @property
    def out_dir(self) -> Path:
        return paths.stage_dir(self.campaign.name, self.gpu, self.stage, self.candidate)

    @property
    def forced(self) -> bool:
        """``--force``: the run goes past what ``protocol.lets_through`` lets a forced run past."""
        return bool(getattr(self.args, "force", False))

    @property
    def calibration(self) -> bool:
        """``--calibration`` (model only): an A/A calibration by hand, never GO."""
        return bool(getattr(self.args, "calibration", False))

    @property
    def workers(self) -> int:
        """``--workers``: pytest-xdist workers of a gate run (1 = no xdist); ``auto`` is
        ``runner.resolve_workers`` on this machine's cores, capped by the campaign's ``gate.max_workers``."""
        return runner.resolve_workers(str(self.args.workers), cpu=self.gpu == "cpu",
                                      cap=self.campaign.data["gate"].get("max_workers"))

    def memory_peaks(self) -> dict[str, int]:
        """Each gate test id's largest GPU memory peak in the earlier gate runs among this stage's inputs
        (``MEMORY_PEAK_SOURCES``): what sizes the run of the tests that ran out of memory beside other workers
        (``kgate.testrun.runner.recovery_fit``)."""
        return memory_fit.peaks([d["run"] for d in self._earlier_gate_runs()])

    def _earlier_gate_runs(self) -> list[dict[str, Any]]:
        """The records' data of the earlier gate runs among this stage's inputs (``MEMORY_PEAK_SOURCES``)."""
        return [self.inputs[s]["data"] for s in MEMORY_PEAK_SOURCES
                if s in self.inputs and self.inputs[s]["data"].get("run")]

    def shared_cleanly_at(self) -> int | None:
        """The fewest workers among the earlier gate runs (``MEMORY_PEAK_SOURCES``) when none of them reran a
        test for sharing the GPU (no test decided alone, no fitted rerun), else None (also with no such run, or
        one whose worker count was not recorded)."""
        found = self._earlier_gate_runs()
        if not found or any(d["run"].get("alone") or d["run"].get("fitted") is not None for d in found):
            return None
        counts = [(d.get("workers") or {}).get("workers") for d in found]
        return min(counts) if all(isinstance(n, int) for n in counts) else None

    def workers_basis(self) -> dict[str, Any]:
        """How the gate runs' workers are decided, for the stage's record: the setting, the count, the GPU's
        memory at the stage's start, and how many test ids have a peak from which records."""
        return {"setting": str(self.args.workers), "workers": self.workers,
                "gpu_memory": self.gpu_memory.as_dict() if self.gpu_memory else None,
                "tests_with_peaks": len(self.memory_peaks()),
                "peaks_from": [s for s in MEMORY_PEAK_SOURCES if s in self.inputs]}

    @property
    def kernel_cache(self) -> KernelCache:
        """The kernel cache of this stage's stack under ``--kernel-cache`` (``kgate.cache.store``), with the
        campaign's ``cache.target_env`` variables."""
        root = Path(getattr(self.args, "kernel_cache", None) or paths.KERNEL_CACHE)
        return KernelCache(root, stack_mod.from_device(self.device, self.gpu),
                           tuple((self.campaign.data.get("cache") or {}).get("target_env", [])))

    @property
    def triton_cache(self) -> Path:
        """``TRITON_CACHE_DIR`` of every gate run, worker and ncu process of this stage (the stack's, shared)."""
        return self.kernel_cache.triton

    @property
    def test_timeout_s(self) -> int:
        """``--test-timeout-s``: the per-test timeout unless the campaign sets ``timeouts.test_s``."""
        return int(self.args.test_timeout_s)

    @property
    def sdist_cache(self) -> Path:
        """``--sdist-cache``: the folder of pinned sdists."""
        return Path(self.args.sdist_cache)

    def deadline_s(self, share: float) -> float:
        """Seconds for ``share`` of the stage time limit (``--runtime-min``; the shares above)."""
        return self.args.runtime_min * 60 * share

    def bench_base(self) -> Path:
        """BENCH_BASE's worktree, verified by content against ``fixture_freeze``'s commit and manifest
        (``kgate.source.worktree``: a changed or added file, ignored ones included, or a ``git replace`` of
        an object). A mismatch is an integrity error of the run (``ProvenanceMismatch``: no record), never a
        result charged to a candidate. Every stage after the freeze that uses BENCH_BASE calls it before
        anything runs: candidate_build and candidate_gate first thing, the profiling and timed stages when
        they take their worktrees (``timed_worktrees``), so a stage that measures nothing (ncu on CPU) does
        not need the worktree."""
        fx = self.inputs["fixture_freeze"]
        c = self.campaign
        wt = paths.worktree(c.name, self.gpu, "bench_base")
        verify_worktree(wt, fx["data"]["bench_base"], paths.repo(c.name, self.gpu), "BENCH_BASE's worktree")
        verify_frozen(wt, fx["data"]["manifest"])
        return wt

    def candidate_worktree(self) -> Path:
        """The candidate's worktree, verified by content against ``candidate_build``'s commit, and its frozen
        files against the fixture's manifest (a mismatch is an error, no record)."""
        c = self.campaign
        wt = paths.worktree(c.name, self.gpu, paths.candidate_arm(str(self.candidate)))
        verify_worktree(wt, self.inputs["candidate_build"]["data"]["candidate_sha"], paths.repo(c.name, self.gpu),
                        "the candidate's worktree")
        verify_frozen(wt, self.inputs["fixture_freeze"]["data"]["manifest"])
        return wt

    def timed_worktrees(self) -> tuple[Path, Path]:
        """BENCH_BASE's worktree and the candidate's, each verified by content at the commit its record names
        (``bench_base``, ``candidate_worktree``): what a stage that runs both arms times or profiles."""
        return self.bench_base(), self.candidate_worktree()

    def gate_spec(self) -> runner.GateSpec:
        g = self.campaign.data["gate"]
        cpu = self.gpu == "cpu"
        select = (g.get("select") or {}).get("cpu" if cpu else "gpu")
        setup = g.get("cpu_setup")
        test_timeout = self.campaign.data.get("timeouts", {}).get("test_s") or self.test_timeout_s
        return runner.GateSpec(
            tests=tuple(g["tests"]), select=select, pytest_args=tuple(g.get("pytest_args", [])),
            forbid_env=tuple(g.get("forbid_env", [])),
            python_path=tuple(self.campaign.data["target"].get("python_path", ["."])),
            cpu=cpu, cpu_setup=(paths.PROJECT / setup) if (cpu and setup) else None,
            test_timeout_s=int(test_timeout), run_timeout_s=int(self.deadline_s(GATE_RUN_SHARE)),
            workers=self.workers,
            env_record=tuple(self.campaign.data.get("env", {}).get("record", [])),
            env_set=tuple(sorted((g.get("env") or {}).items())),
            restore_env=tuple(g.get("restore_env", [])),
            cache_env=tuple(sorted(self.kernel_cache.env().items())),
            compile_slots=0 if cpu or g.get("compile_serially") else device_mod.usable_cores(),
            peaks=tuple(sorted(self.memory_peaks().items())),
            free_bytes=self.gpu_memory.free_bytes if self.gpu_memory else None)


def timed_arms(ctx: Context, worktrees: tuple[Path, Path], start: Callable[[list[tuple[str, Path, Path]]], list[Arm]],
               measure: Callable[[dict[str, Arm]], StageResult], runs: str) -> StageResult:
    """Both arms of a timed stage (bench, model) as warm workers, around the stage's own ``measure(arms)``.

    ``start`` gets (name, worktree, Triton cache) for BENCH_BASE's and the
    candidate's ``worktrees`` (both the stack's one cache: Triton keys its entries
    by kernel source, so the arms share what did not change) and returns the started arms. Their environments are judged
    first (``gates.env.arms_gate``): a fail ends the stage before anything is
    timed. ``measure``'s gates follow that runner. A worker failure in the
    candidate's own code (an import, a crash, a hang) is a measured failure,
    gate ``candidate_runs`` (``runs`` says what the candidate had to do), or
    ``numeric_state`` when a call changed a numeric setting
    (:func:`failed_run_gate`); any other worker failure propagates as an error. Every arm is closed on the way out.
    """
    c, gpu, cid = ctx.campaign, ctx.gpu, ctx.candidate
    evidence = str(paths.record(c.name, gpu, ctx.stage, cid))
    wt_base, wt_cand = worktrees
    arm_list: list[Arm] = []
    try:
        arm_list = start([("base", wt_base, ctx.triton_cache), ("cand", wt_cand, ctx.triton_cache)])
        env_gate = env_gates.arms_gate(c.data, {a.name: a.info["env"] for a in arm_list}, evidence)
        if env_gate.status == "fail":
            return StageResult(gates=[env_gate], data={"measured": False, "candidate": cid,
                                                       "workers": {a.name: a.info for a in arm_list}})
        res = measure({a.name: a for a in arm_list})
        return StageResult(gates=[env_gate, *res.gates], data=res.data, reasons=res.reasons)
    except WorkerFailure as exc:
        if exc.arm == "cand" and exc.target:
            # the candidate's own code failed (import, a crash, a hang, a numeric setting changed in a call)
            return StageResult(gates=[failed_run_gate(str(exc), runs, str(ctx.out_dir / "worker-cand.log"))],
                               data={"measured": True, "failure": str(exc), "candidate": cid})
        raise
    finally:
        for a in arm_list:
            a.close()


def failed_run_gate(error: str, runs: str, evidence: str, *, value: str = "failed", status: str = "fail") -> Gate:
    """The gate a failure of the candidate's own code in a worker fails (``error``: the failure's message):
    ``numeric_state`` (always a fail) when a call changed a numeric setting (``kgate.measure.worker_numerics``),
    else ``candidate_runs`` with ``value`` and ``status`` (``runs`` says what the candidate had to do)."""
    if worker_numerics.MARK in error:
        return Gate("numeric_state", "no numeric setting (torch flags, Triton knobs, env.record variables) changes "
                    "during a call of the op, even restored", "changed", "fail", evidence=evidence, detail=error)
    return Gate("candidate_runs", runs, value, status, evidence=evidence, detail=error)


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--campaign-file", required=True, help="Campaign YAML (validated again here).")
    p.add_argument("--gpu", required=True, help="Device class the results belong to (cpu, h200, ...).")
    p.add_argument("--candidate", default=None, help="Candidate id (content hash) for candidate stages.")
    p.add_argument("--candidate-source", default=None, help="overlay:<dir>, ref:<ref> or worktree:<path> override.")
    p.add_argument("--target-path", default=None, help="Override of target.repo.path.")
    p.add_argument("--record", required=True, help="Where to write this stage's record.")
    p.add_argument("--input-record", action="append", default=[], help="Records of the stages this one needs.")
    p.add_argument("--local-rule", action="store_true", help="The workflow runs this rule on the submit host.")
    p.add_argument("--runtime-min", type=float, default=120.0, help="Stage time limit (minutes); gate runs get 90 %%.")
    p.add_argument("--test-timeout-s", type=int, default=900, help="Per-test timeout unless the campaign sets one.")
    p.add_argument("--workers", default="auto",
                   help="pytest-xdist workers for gate runs: a number (1 = no xdist) or 'auto' (this machine's cores; "
                        "kgate.testrun.runner.resolve_workers).")
    p.add_argument("--sdist-cache", default="work/cache/sdists", help="Folder of pinned sdists.")
    p.add_argument("--kernel-cache", default=str(paths.KERNEL_CACHE),
                   help="Root of the kernel caches, one folder per device class and software stack (docs/cache.md).")
    p.add_argument("--force", action="store_true",
                   help="Run past an input that stopped, or a measuring stage's fail or inconclusive (config "
                        "force=true; protocol.EVIDENCE_STAGES); the verdict stays STOPPED or NO-GO, never GO.")


def load_inputs(records: list[str], force: bool = False) -> dict[str, dict[str, Any]]:
    """Read input records by stage; a previous gate that did not pass blocks this stage, except what
    ``protocol.lets_through`` lets a forced run past (a stop; a measuring stage's fail or inconclusive)."""
    out = {}
    for r in records:
        rec = read_record(r)
        if not protocol.lets_through(rec["stage"], rec["status"], force):
            raise IncompleteData(f"blocked: input {r} has status '{rec['status']}' "
                                 f"({'; '.join(rec['reasons'][:2])}); this stage does not run past a failed gate")
        out[rec["stage"]] = rec
    return out


def execute(stage: str, fn: StageFn, args: argparse.Namespace) -> int:
    clock = provenance.Clock()
    overrides = {"target_path": args.target_path, "candidate": args.candidate_source}
    camp = campaign_checks.load(args.campaign_file, overrides)
    epoch = epochs.current(camp)
    dev = device_mod.check_class(args.gpu)
    inputs = load_inputs(args.input_record, force=bool(getattr(args, "force", False)))
    ctx = Context(campaign=camp, gpu=args.gpu, candidate=args.candidate, args=args,
                  device=dev.as_dict(), inputs=inputs, gpu_memory=None if dev.klass == "cpu" else device_mod.memory())
    cache = ctx.kernel_cache
    cache.prepare()
    at_start = cache.census()
    try:
        result = fn(ctx)
    except WorkerFailure as exc:
        if not exc.unavailable:
            raise
        # the Triton interpreter itself cannot run the op: recorded, never the target's failure (nor a GO)
        result = StageResult(gates=[Gate("runs_here", "the op runs on this device", "cannot run on CPU",
                                         "unavailable", evidence=str(ctx.out_dir / f"worker-{exc.arm}.log"),
                                         detail=str(exc))], data={"measured": False, "unavailable": str(exc)})
    env_patterns = camp.data.get("env", {}).get("record", [])
    prov = provenance.collect(clock=clock, device=dev.as_dict(), env_patterns=env_patterns,
                              local_rule=bool(args.local_rule),
                              extra={"kernel_cache": cache.provenance(at_start, cache.census())})
    record = build_record(stage=stage, campaign=camp.name, gpu=args.gpu, candidate=args.candidate,
                          result=result, provenance=prov,
                          epoch={"number": epoch["number"], "contract": epoch["contract"]} if epoch else None)
    write_json(Path(args.record), record)
    print(f"kgate {stage}: {record['status']}" + (f" ({'; '.join(record['reasons'])})" if record["reasons"] else ""))
    return 0
