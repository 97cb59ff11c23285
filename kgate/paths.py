"""Where things live: every path says what made it.

results/<campaign>/<gpu>/<stage>/[<candidate>/]record.json
logs/<campaign>/<gpu>/<stage>/[<candidate>/]record.log      (mirrors results)
work/<campaign>/<gpu>/                                      kgate's clone, worktrees, caches
reports/<campaign>/<gpu>/                                    the rendered report
All paths are relative to the kgate repository root (the Snakemake workdir).
"""

from __future__ import annotations

from pathlib import Path

STAGES = ("target", "baseline_tests", "fixture_freeze", "profile_baseline", "candidate_build", "candidate_gate",
          "profile_candidate", "bench", "ncu", "model")
CANDIDATE_STAGES = frozenset({"candidate_build", "candidate_gate", "profile_candidate", "bench", "ncu", "model"})
#: The gating inputs of each stage: the earlier stages whose records must have passed before it is scheduled
#: (the report's input walk, workflow/rules/common.smk) or run (``kgate.stage.load_inputs``). Every stage gates
#: on all stages before it, except ``model``, which gates on the stages up to ``bench`` and not on ``ncu``: the
#: counters ncu needs are missing on CPU and on many nodes, and the training run does not read ncu's evidence.
GATING_INPUTS: dict[str, tuple[str, ...]] = {stage: STAGES[:i] for i, stage in enumerate(STAGES)}
GATING_INPUTS["model"] = STAGES[:STAGES.index("bench") + 1]
#: Stages that only measure (a baseline, or a candidate already built, scoped and proven correct). In a forced
#: run (``force=true``) their stop, fail or inconclusive blocks no later stage: the run collects the remaining
#: evidence (ncu says why a candidate is slower, model whether the loss survives training) while the verdict
#: stays decided by the first of them and is never GO. A failed integrity or correctness gate (target,
#: baseline_tests, fixture_freeze, candidate_build, candidate_gate) blocks a forced run as well: measuring a
#: candidate that is wrong, or outside its scope, is not evidence.
EVIDENCE_STAGES = frozenset({"profile_baseline", "profile_candidate", "bench", "ncu", "model"})


def lets_through(stage: str, status: str, force: bool) -> bool:
    """Whether a record of ``stage`` with ``status`` lets the stages that gate on it run (see EVIDENCE_STAGES)."""
    if status == "pass":
        return True
    if not force:
        return False
    return status == "stop" or (stage in EVIDENCE_STAGES and status in ("fail", "inconclusive"))


#: the workflow's first rule (``python -m kgate doctor --record``): results/<campaign>/<gpu>/doctor/record.json.
#: Not a gate of the protocol: a failure is a site error (no record), so it is not in STAGES, the verdict or
#: the report; ``target`` depends on its record.
PREFLIGHT = "doctor"


def stage_dir(campaign: str, gpu: str, stage: str, candidate: str | None = None) -> Path:
    base = Path("results") / campaign / gpu / stage
    if stage in CANDIDATE_STAGES:
        if not candidate:
            raise ValueError(f"stage {stage} needs a candidate id")
        return base / candidate
    return base


def record(campaign: str, gpu: str, stage: str, candidate: str | None = None) -> Path:
    return stage_dir(campaign, gpu, stage, candidate) / "record.json"


def log(campaign: str, gpu: str, stage: str, candidate: str | None = None) -> Path:
    return Path("logs") / stage_dir(campaign, gpu, stage, candidate).relative_to("results") / "record.log"


def work(campaign: str, gpu: str) -> Path:
    return Path("work") / campaign / gpu


def repo(campaign: str, gpu: str) -> Path:
    """kgate's own bare clone of the target (the user's clone is never written)."""
    return work(campaign, gpu) / "target.git"


def worktree(campaign: str, gpu: str, arm: str) -> Path:
    return work(campaign, gpu) / "wt" / arm


def triton_cache(campaign: str, gpu: str, use: str) -> Path:
    """Triton caches per use. 'gate' is shared by every correctness stage
    (baseline_tests, fixture_freeze, candidate_gate): Triton keys compiled
    kernels and autotune results by kernel source, so the candidate only
    compiles what it changed. Timed stages get one cache per arm."""
    return work(campaign, gpu) / "triton" / use


def report_dir(campaign: str, gpu: str) -> Path:
    return Path("reports") / campaign / gpu


def branch(campaign: str, arm: str) -> str:
    return f"kgate/{campaign}/{arm}"
