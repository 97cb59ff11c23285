"""Stage ``fixture_freeze``: extend the gate with test-only cases, commit BENCH_BASE, freeze.

Method: in a worktree on ``kgate/<campaign>/bench_base`` at the baseline,
apply the fixture overlay (every edited path must match ``fixture.test_paths``),
commit every file of the worktree with kgate's fixed identity (so BENCH_BASE is
reproducible; ignored files too, and the worktree is verified against the
commit by content, ``kgate.source.worktree``), run the
full gate against the untouched production code, and require it green and a
superset of the baseline's test ids (a fixture only adds), and every test
module it creates to contribute collected ids (``created_tests_gate``); a failing test that passed in
baseline_tests is named as such (``passed_at_baseline``). Then write the
manifest: sha256 of the frozen paths and of the gate's test files.
"""

from __future__ import annotations

from dataclasses import replace

from kgate import epochs, paths
from kgate.records import Gate, StageResult, write_json
from kgate.source import git, manifest, overlay
from kgate.source.worktree import verify_worktree
from kgate.stages.common import Context
from kgate.testrun import runner
from kgate.testrun.judge import judge, run_with_reruns


def frozen_patterns(ctx: Context, fixture_paths: list[str]) -> list[str]:
    """Frozen: the campaign's list, the gate's test paths and every path the fixture wrote."""
    return sorted(set(ctx.campaign.data["frozen"]) | set(ctx.campaign.data["gate"]["tests"]) | set(fixture_paths))


def created_tests_gate(variant: overlay.Variant, collected: list[str], select: str | None, cpu: bool,
                       evidence: str | None) -> Gate:
    """Every test module the fixture creates contributes collected ids to the run.

    A created module with no collected id adds nothing to the contract: pytest did not collect it (its name is
    outside ``python_files``, its folder outside ``gate.tests``) or the device's selection deselects all of it
    (``-k`` also matches file, class and function names: ``not large`` drops a file named ``*large*``). Fail,
    except on CPU with a selection, where a fixture may be all GPU-sized (skip, with the file named)."""
    created = overlay.created_test_files(variant)
    counts = {path: sum(1 for i in collected if i.startswith(f"{path}::")) for path in created}
    empty = [p for p, n in counts.items() if n == 0]
    threshold = "every test module the fixture creates has collected test ids"
    if not created:
        return Gate("fixture_tests_collected", threshold, "the fixture creates no test module", "skip",
                    evidence=evidence)
    value = ", ".join(f"{p}: {n}" for p, n in counts.items())
    if not empty:
        return Gate("fixture_tests_collected", threshold, value, "pass", evidence=evidence)
    why = (f"deselected by select.{'cpu' if cpu else 'gpu'} {select!r} (pytest -k also matches file, class and "
           "function names)" if select else "not collected (gate.tests folders, pytest's python_files)")
    status = "skip" if (cpu and select) else "fail"
    return Gate("fixture_tests_collected", threshold, value, status, evidence=evidence,
                detail=f"no collected id from {', '.join(empty)}: {why}")


def passed_at_baseline(gate: Gate, first: runner.GateRun, base: dict) -> Gate:
    """A failed fixture gate names the failing tests that passed in baseline_tests: the fixture adds tests
    only, so such a failure comes from the run's state (test order, a shared cache) or from the fixture's own
    files (a conftest, a module-level side effect), not from the base's code."""
    if gate.status == "pass":
        return gate
    passed = {t["nodeid"] for t in base["data"]["run"]["tests"] if t["outcome"] in runner.OUTCOMES_OK}
    failing = sorted(i for i, t in first.tests.items() if t["outcome"] not in runner.OUTCOMES_OK and i in passed)
    if not failing:
        return gate
    note = (f"{len(failing)} of the failing test(s) passed in baseline_tests on the same source ({', '.join(failing)}): "
            "the fixture adds tests only, so the run's state (test order, a shared cache) or the fixture's own "
            "files made them fail")
    return replace(gate, detail=f"{gate.detail}; {note}" if gate.detail else note)


def run(ctx: Context) -> StageResult:
    c, gpu = ctx.campaign, ctx.gpu
    target, base = ctx.inputs["target"], ctx.inputs["baseline_tests"]
    baseline_sha = target["data"]["baseline_sha"]
    repo = paths.repo(c.name, gpu)
    wt = paths.worktree(c.name, gpu, "bench_base")
    git.reset_worktree(repo, wt, baseline_sha, branch=paths.branch(c.name, "bench_base"))
    fx = c.data["fixture"]
    variant = overlay.select(paths.PROJECT / fx["overlay"], c.target_identity)
    # inside fixture.test_paths: checked whenever the campaign is loaded (kgate.campaign_checks), this job too
    touched = overlay.apply(variant, wt)
    bench_base = git.commit_all(wt, f"kgate: fixture for {c.name} ({fx['overlay']})")
    # every file of the worktree is in BENCH_BASE (ignored ones too): later stages verify it by content
    verify_worktree(wt, bench_base, repo, "BENCH_BASE's worktree")
    spec = ctx.gate_spec()
    cache = ctx.triton_cache
    first, history = run_with_reruns(spec, wt, ctx.out_dir, cache, c.data["gate"]["reruns"])
    gates = [passed_at_baseline(judge(first, history, first.junit_path, "fixture_gate_green"), first, base)]
    base_ids = set(base["data"]["run"]["collected"])
    lost = sorted(base_ids - set(first.collected))
    added = sorted(set(first.collected) - base_ids)
    gates.append(Gate("fixture_only_adds", "fixture run collects every baseline test id",
                      f"{len(base_ids)} -> {len(first.collected)} collected (+{len(added)})",
                      "fail" if lost else "pass", evidence=first.outcomes_path,
                      detail=f"baseline ids missing after the fixture: {', '.join(lost)}" if lost else None))
    gates.append(created_tests_gate(variant, first.collected, spec.select, gpu == "cpu", first.outcomes_path))
    files = manifest.expand(wt, frozen_patterns(ctx, touched))
    sums = manifest.compute(wt, files)
    man_path = ctx.out_dir / "manifest.json"
    write_json(man_path, {"schema": "kgate.manifest/1", "bench_base": bench_base, "files": sums})
    gates.append(Gate("frozen_manifest", "sha256 of every frozen path recorded", f"{len(sums)} files", "pass",
                      evidence=str(man_path)))
    data = {"baseline_sha": baseline_sha, "bench_base": bench_base, "branch": paths.branch(c.name, "bench_base"),
            "worktree": str(wt), "fixture_paths": touched, "manifest": sums, "manifest_path": str(man_path),
            "run": first.as_data(), "reruns": history, "baseline_passed": base["data"]["run"]["counts"].get("passed", 0),
            "fixture_passed": first.counts.get("passed", 0), "added_ids": added,
            "patch": git.patch(wt, baseline_sha, bench_base), "workers": ctx.workers_basis()}
    result = StageResult(gates=gates, data=data)
    if result.status == "pass":
        # the contract is fixed from here on: a later change needs new_epoch=true
        epochs.mark_frozen(c, gpu, bench_base)
    return result
