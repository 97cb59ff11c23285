"""The protocol's shape: the stages in pipeline order, what gates on what, and the gated walk.

The one home of the stage order. ``kgate.paths`` keys result paths by it,
``kgate.verdict`` walks it, the workflow's report input function asks for
records through ``gated_walk``, and ``kgate report compare`` orders columns by
it. A leaf: it imports nothing of kgate.
"""

from __future__ import annotations

from collections.abc import Callable

STAGES = ("target", "baseline_tests", "fixture_freeze", "profile_baseline", "candidate_build", "candidate_gate",
          "profile_candidate", "bench", "ncu", "model")
CANDIDATE_STAGES = frozenset({"candidate_build", "candidate_gate", "profile_candidate", "bench", "ncu", "model"})
#: The gating inputs of each stage: the earlier stages whose records must have passed before it is scheduled
#: (``gated_walk`` below, the report's input walk) or run (``kgate.stages.common.load_inputs``). Every stage gates
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
#: The rules that hold a GPU (``resources: gpu=1`` in workflow/rules/<rule>.smk): the preflight and every stage but
#: the two local rules, target and candidate_build. ``kgate plan`` sums its GPU-time estimate over them;
#: tests/test_plan.py checks this set against the rule files.
GPU_STAGES = frozenset({PREFLIGHT, "baseline_tests", "fixture_freeze", "profile_baseline", "candidate_gate",
                        "profile_candidate", "bench", "ncu", "model"})


def gated_walk(status_of: Callable[[str], str], force: bool = False) -> list[str]:
    """The stages the report's input function asks for, in order (workflow/rules/common.smk).

    ``status_of(stage)`` makes the stage's checkpoint known (Snakemake runs it
    first) and returns its record's status. A stage is asked for only when
    every one of its gating inputs (``GATING_INPUTS``) let it through
    (``lets_through``: passed; or, in a forced run, stopped, or a
    measuring stage's fail or inconclusive); a record that could not measure
    (``unavailable``) blocks only the stages that gate on it; any other status
    ends the walk, so no stage is ever asked for past a failed integrity or
    correctness gate. Tests: tests/test_model_gates.py.
    """
    asked, passed = [], set()
    for stage in STAGES:
        if any(s not in passed for s in GATING_INPUTS[stage]):
            continue
        asked.append(stage)
        st = status_of(stage)
        if lets_through(stage, st, force):
            passed.add(stage)
        elif st != "unavailable":
            break
    return asked
