"""Stage ``baseline_tests``: the untouched gate at the exact baseline.

Method: run the gate once in the baseline worktree (which must hold exactly
the baseline commit's files, ``kgate.source.worktree``). Every test that did not pass is rerun
``gate.reruns`` more times on its own. A test that fails every time is a
deterministic baseline failure: terminal NO-GO (the gate is never narrowed to
make room for a candidate). A test that fails only sometimes makes the stage
INCONCLUSIVE, with the ids. Limits: k reruns cannot prove a rare flake
absent; the ids and their outcome sequences are in the record. The run, the
reruns and the judging are ``kgate.testrun.judge``.
"""

from __future__ import annotations

from kgate import paths
from kgate.records import StageResult
from kgate.source.worktree import verify_worktree
from kgate.stages.common import Context
from kgate.testrun.judge import judge, run_with_reruns


def run(ctx: Context) -> StageResult:
    c, gpu = ctx.campaign, ctx.gpu
    target = ctx.inputs["target"]
    wt = paths.worktree(c.name, gpu, "baseline")
    verify_worktree(wt, target["data"]["baseline_sha"], paths.repo(c.name, gpu), "the baseline's worktree")
    spec = ctx.gate_spec()
    cache = ctx.triton_cache
    first, history = run_with_reruns(spec, wt, ctx.out_dir, cache, c.data["gate"]["reruns"])
    row = judge(first, history, first.junit_path, "baseline_gate")
    data = {"baseline_sha": target["data"]["baseline_sha"], "worktree": str(wt), "run": first.as_data(),
            "reruns": history, "triton_cache": str(cache), "workers": ctx.workers_basis()}
    return StageResult(gates=[row], data=data)
