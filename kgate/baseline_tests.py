"""Stage ``baseline_tests``: the untouched gate at the exact baseline.

Method: run the gate once in the baseline worktree (which must sit at the
baseline SHA with a clean tree). Every test that did not pass is rerun
``gate.reruns`` more times on its own. A test that fails every time is a
deterministic baseline failure: terminal NO-GO (the gate is never narrowed to
make room for a candidate). A test that fails only sometimes makes the stage
INCONCLUSIVE, with the ids. Limits: k reruns cannot prove a rare flake
absent; the ids and their outcome sequences are in the record.
"""

from __future__ import annotations

from kgate import gate, gitops, paths
from kgate.errors import ProvenanceMismatch
from kgate.records import Gate, StageResult
from kgate.stage import Context


def verify_worktree(wt, want_head: str) -> None:
    """A worktree must sit at the recorded commit with no uncommitted change."""
    if not wt.exists():
        raise ProvenanceMismatch(f"worktree {wt} is missing; rerun the stage that creates it")
    head = gitops.head(wt)
    if head != want_head:
        raise ProvenanceMismatch(f"worktree {wt} is at {head}, the records say {want_head}")
    dirty = gitops.status_porcelain(wt)
    if dirty:
        raise ProvenanceMismatch(f"worktree {wt} has uncommitted changes: {dirty.splitlines()[:3]}")


def rerun_failures(ctx: Context, spec: gate.GateSpec, first: gate.GateRun, wt, cache, reruns: int):
    """Rerun each non-passing id ``reruns`` times; return {id: [outcome per run]}."""
    history = {i: [first.tests.get(i, {}).get("outcome", "not finished")] for i in first.bad_ids}
    for k in range(reruns):
        if not history:
            break
        again = gate.run(spec, wt, ctx.out_dir, cache, tag=f"rerun{k + 1}", only_ids=sorted(history))
        for i in history:
            history[i].append(again.tests.get(i, {}).get("outcome", "not finished"))
    return history


def judge(first: gate.GateRun, history: dict[str, list[str]], evidence: str, name: str) -> Gate:
    """Turn a gate run plus reruns into one gate row."""
    if first.green:
        return Gate(name, "every collected test passes", first.summary(), "pass", evidence=evidence)
    if first.collect_errors:
        ids = ", ".join(e["nodeid"] for e in first.collect_errors)
        return Gate(name, "every collected test passes", first.summary(), "fail", evidence=evidence,
                    detail=f"collection errors in {ids}")
    always = sorted(i for i, h in history.items() if all(o not in gate.OUTCOMES_OK for o in h))
    flaky = sorted(i for i, h in history.items() if i not in always)
    if always:
        return Gate(name, "every collected test passes", first.summary(), "fail", evidence=evidence,
                    detail=f"deterministic failure ({len(always)}): {', '.join(always)}")
    return Gate(name, "every collected test passes", first.summary(), "inconclusive", evidence=evidence,
                detail=f"intermittent failure ({len(flaky)}): {', '.join(flaky)}")


def run(ctx: Context) -> StageResult:
    c, gpu = ctx.campaign, ctx.gpu
    target = ctx.inputs["target"]
    wt = paths.worktree(c.name, gpu, "baseline")
    verify_worktree(wt, target["data"]["baseline_sha"])
    spec = ctx.gate_spec()
    cache = paths.triton_cache(c.name, gpu, "gate")
    first = gate.run(spec, wt, ctx.out_dir, cache, tag="run1")
    gate.check_imports(first, wt)
    history = {} if first.green else rerun_failures(ctx, spec, first, wt, cache, c.data["gate"]["reruns"])
    row = judge(first, history, first.junit_path, "baseline_gate")
    data = {"baseline_sha": target["data"]["baseline_sha"], "worktree": str(wt), "run": first.as_data(),
            "reruns": history, "triton_cache": str(cache)}
    return StageResult(gates=[row], data=data)
