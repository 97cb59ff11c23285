"""Stage ``candidate_gate``: the full frozen gate on the candidate.

Method: before running anything, the candidate worktree must hold exactly
the commit candidate_build made, by content (untracked and ignored files
count), with every frozen file at its BENCH_BASE hash (a mismatch is an
error, not a result). Then the frozen gate
runs exactly as in fixture_freeze (same files, selection, arguments, per-test
timeout), plus the target's dependent tests when the campaign names its
helper. Any failure, error, crash or hang of the candidate in the frozen gate
is a measured NO-GO. The collected test ids and their outcomes must equal the
fixture run's: a test that disappears, is deselected or changes from passed to
skipped fails the gate with its id. The numeric settings each test changed at
run time (torch flags, Triton knobs, recorded variables, even restored before
the test ended) and those at the end of the run must equal the fixture run's
(``numeric_state``, ``kgate.gates.numerics``). On a GPU, while the frozen gate runs,
a compile-only worker of the candidate compiles the kernels the timed stages will launch
into the stack's kernel cache (``kgate.measure.precompile``; ``data.precompile``); it
decides nothing and ends before any test runs alone.

Dependent tests are not part of the frozen contract (the helper picks them from
the candidate's diff), so nothing froze their state at BENCH_BASE. When their
run completes with failures, kgate reruns exactly the failing ids on the
BENCH_BASE worktree, same settings and cache: an id that also fails there is
the target's own (pre-existing, listed in the row's detail), an id that passes
there is the candidate's and fails the gate. Limits: a candidate run that
crashed, hung or had collection errors fails without attribution (rerunning
everything unfinished could cost the whole run again); one rerun cannot tell a
flaky test from a broken one, so a test that flakes at the candidate and
passes at BENCH_BASE counts as the candidate's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from kgate import paths, provenance
from kgate.errors import KgateError
from kgate.gates import env as env_gates
from kgate.gates import numerics as numerics_gates
from kgate.measure import output_diff, precompile
from kgate.measure import rows as measure_rows
from kgate.measure.arms import WorkerFailure, worker_env
from kgate.measure.rows import dispatch_rows
from kgate.records import Gate, StageResult, read_record, write_json
from kgate.stages.common import GATE_RUN_SHARE, Context
from kgate.testrun import memory_fit, runner


def dependent_tests(ctx: Context, wt: Path, changed: list[str]) -> list[str]:
    """Run the target's dependency helper; return test paths relative to the worktree."""
    spec = ctx.campaign.data["gate"].get("dependent_tests")
    if not spec or not changed:
        return []
    # no bytecode written into the worktree: it must keep exactly the candidate's files
    proc = subprocess.run([sys.executable, spec["helper"], *changed], cwd=wt, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if proc.returncode != 0:
        raise KgateError(f"gate.dependent_tests.helper {spec['helper']} failed: {proc.stderr.strip()[-300:]}")
    out = []
    for tok in proc.stdout.split():
        p = Path(tok)
        rel = p.resolve().relative_to(wt.resolve()) if p.is_absolute() else p
        out.append(str(rel))
    frozen = set(ctx.campaign.data["gate"]["tests"])
    return sorted(set(out) - frozen)


def outcome_diff(ref: dict, got: runner.GateRun) -> list[str]:
    """Differences in collected ids and outcomes against the fixture run."""
    ref_tests = {t["nodeid"]: t["outcome"] for t in ref["tests"]}
    msgs = []
    for i in sorted(set(ref["collected"]) - set(got.collected)):
        msgs.append(f"{i}: collected at BENCH_BASE, not collected now")
    for i in sorted(set(got.collected) - set(ref["collected"])):
        msgs.append(f"{i}: new test id")
    for i in sorted(set(got.deselected) - set(ref["deselected"])):
        msgs.append(f"{i}: deselected now")
    for i, o in sorted(ref_tests.items()):
        now = got.tests.get(i, {}).get("outcome")
        if now is not None and now != o and now in runner.OUTCOMES_OK:
            msgs.append(f"{i}: {o} at BENCH_BASE, {now} now")
    return msgs


DEPENDENT_THRESHOLD = "every dependent test passes, or fails at BENCH_BASE too"


def attributable(dep: runner.GateRun) -> bool:
    """The candidate's dependent run completed (no crash, hang or collection error) with ids not passing."""
    return not (dep.green or dep.crashed or dep.timed_out or dep.collect_errors or not dep.bad_ids)


def dependent_gate(dep: runner.GateRun, base: runner.GateRun | None) -> tuple[Gate, dict]:
    """The dependent_tests_pass row and its attribution: ids not passing at the candidate split into
    those that pass at BENCH_BASE (the candidate's) and those that do not pass there either."""
    threshold = DEPENDENT_THRESHOLD
    if dep.green:
        return Gate("dependent_tests_pass", threshold, dep.summary(), "pass", evidence=dep.junit_path), {}
    if base is None:
        why = ("process died" if dep.crashed else "run timed out" if dep.timed_out
               else "collection error(s)" if dep.collect_errors else "not passing")
        fails = dep.bad_ids + [e["nodeid"] for e in dep.collect_errors]
        return Gate("dependent_tests_pass", threshold, dep.summary(), "fail", evidence=dep.junit_path,
                    detail=f"{why}, not attributed at BENCH_BASE: {', '.join(fails[:20])}"), {}
    new = [i for i in dep.bad_ids if base.tests.get(i, {}).get("outcome") in runner.OUTCOMES_OK]
    old = [i for i in dep.bad_ids if i not in new]
    data = {"candidates": new, "pre_existing": old}
    value = f"{dep.summary()}; {len(old)} of {len(dep.bad_ids)} not passing at BENCH_BASE either"
    if new:
        return Gate("dependent_tests_pass", threshold, value, "fail", evidence=dep.junit_path,
                    detail=f"pass at BENCH_BASE, not with the candidate: {', '.join(new[:20])}"), data
    return Gate("dependent_tests_pass", threshold, value, "pass", evidence=base.junit_path,
                detail=f"pre-existing, failing at BENCH_BASE too: {', '.join(old[:20])}"), data


def outputs_gates(ctx: Context, green: bool, fx: dict, build: dict, wt: Path) -> list[Gate]:
    """The BENCH_BASE output comparison (kgate.measure.output_diff), once the frozen tests passed."""
    c, gpu = ctx.campaign, ctx.gpu
    rows = dispatch_rows(c.data, gpu == "cpu")
    evidence = str(ctx.out_dir / "outputs.json")
    if not rows:
        return output_diff.gates(None, "the campaign lists no dispatch rows for this device", evidence)
    if not green:
        return output_diff.gates(None, "not run: the frozen tests did not pass", evidence)
    wt_base = ctx.bench_base()
    try:
        result = output_diff.compare(ctx, wt_base, wt, rows, tuple(build["data"].get("enables", [])))
    except WorkerFailure as exc:
        if exc.arm == "cand" and exc.target:
            return [Gate("outputs_vs_bench_base", "the candidate runs every dispatch row", "failed", "fail",
                         evidence=str(ctx.out_dir / "worker-cand.log"), detail=str(exc))]
        raise
    write_json(Path(evidence), {"schema": "kgate.outputs/1", **result})
    return output_diff.gates(result, None, evidence)


def run(ctx: Context) -> StageResult:
    c, gpu, cid = ctx.campaign, ctx.gpu, ctx.candidate
    build, fx = ctx.inputs["candidate_build"], ctx.inputs["fixture_freeze"]
    # BENCH_BASE (the outputs comparison, the dependent tests' attribution) and the candidate, by content
    ctx.bench_base()
    wt = ctx.candidate_worktree()
    spec = ctx.gate_spec()
    ignore = env_gates.ignored(c.data)
    # the stage's own environment first: a difference makes the run incomparable, so nothing is run
    env_now = provenance.recorded_env(list(spec.env_record))
    stage_diff = env_gates.diff(fx["provenance"]["env"], env_now, ignore, ("fixture_freeze", "candidate_gate"))
    if stage_diff:
        return StageResult(gates=[
            Gate("same_env", "recorded environment equals the fixture run's", f"{len(stage_diff)} difference(s)",
                 "fail", evidence=str(paths.record(c.name, gpu, "fixture_freeze")), detail="; ".join(stage_diff)),
            Gate("gate_tests_pass", "every frozen test passes", "not run: the environment differs", "skip")],
            data={"candidate": cid, "env_diff": stage_diff, "env": env_now})
    cache = ctx.triton_cache
    main, pre_record = gate_run(ctx, spec, wt)
    runner.check_imports(main, wt)
    gates = []
    if main.green:
        gates.append(Gate("gate_tests_pass", "every frozen test passes", main.summary(), "pass",
                          evidence=main.junit_path))
    else:
        fails = main.bad_ids + [e["nodeid"] for e in main.collect_errors]
        gates.append(Gate("gate_tests_pass", "every frozen test passes", main.summary(), "fail",
                          evidence=main.junit_path, detail=f"{len(fails)} not passing: {', '.join(fails[:20])}"))
    diffs = outcome_diff(fx["data"]["run"], main)
    gates.append(Gate("same_test_ids", "collected ids and outcomes equal the fixture run's",
                      f"{len(main.collected)} collected, {len(diffs)} difference(s)",
                      "fail" if diffs else "pass", evidence=main.outcomes_path,
                      detail="; ".join(diffs[:20]) if diffs else None))
    ref_env = fx["data"]["run"].get("test_env")
    if ref_env is None:
        gates.append(Gate("same_env", "test processes' environment equals the fixture run's",
                          "the fixture record predates environment recording", "skip"))
    else:
        env_diffs = env_gates.diff(ref_env, main.test_env, ignore, ("fixture_freeze", "candidate_gate"))
        gates.append(Gate("same_env", "test processes' environment equals the fixture run's",
                          f"{len(main.test_env)} recorded, {len(env_diffs)} difference(s)",
                          "fail" if env_diffs else "pass", evidence=main.outcomes_path,
                          detail="; ".join(env_diffs) if env_diffs else None))
    # run-time numeric settings, test by test, against the fixture run's (kgate.gates.numerics)
    gates.append(numerics_gates.gate(fx["data"]["run"], main.as_data(), main.outcomes_path))
    gates += outputs_gates(ctx, main.green, fx, build, wt)
    changed = [f["path"] for f in build["data"]["diff"]["files"]]
    dep_files = dependent_tests(ctx, wt, changed)
    dep_data = base_data = attribution = None
    if dep_files:
        dsel = (c.data["gate"]["dependent_tests"].get("select") or {}).get("cpu" if gpu == "cpu" else "gpu")
        dspec = runner.GateSpec(**{**{f: getattr(spec, f) for f in spec.__slots__}, "tests": tuple(dep_files),
                                 "select": dsel})
        dep = runner.run(dspec, wt, ctx.out_dir, cache, tag="dependent")
        dep_data = dep.as_data()
        base = None
        if attributable(dep):
            wt_base = ctx.bench_base()
            # exactly the ids that did not pass, on BENCH_BASE's worktree
            base = runner.run(dspec, wt_base, ctx.out_dir, cache, tag="dependent-base", only_ids=dep.bad_ids)
            base_data = base.as_data()
        row, attribution = dependent_gate(dep, base)
        gates.append(row)
    else:
        gates.append(Gate("dependent_tests_pass", DEPENDENT_THRESHOLD,
                          "no helper in this campaign" if not c.data["gate"].get("dependent_tests")
                          else "helper listed no further tests", "skip"))
    data = {"candidate": cid, "candidate_sha": build["data"]["candidate_sha"], "bench_base": fx["data"]["bench_base"],
            "worktree": str(wt), "run": main.as_data(), "dependent": dep_data, "dependent_files": dep_files,
            "dependent_at_bench_base": base_data, "dependent_attribution": attribution,
            "triton_cache": str(cache), "precompile": pre_record, "workers": ctx.workers_basis()}
    return StageResult(gates=gates, data=data)


def gate_run(ctx: Context, spec: runner.GateSpec, wt: Path) -> tuple[runner.GateRun, dict[str, Any]]:
    """The frozen gate's run on the candidate and the precompile worker's record (``data.precompile``). The
    timed stages' kernels compile beside the run (untimed), within the run's own compile slots (the same
    ``DIR:N``, so the two together never compile more configs side by side than the slots allow), and the
    worker stops before any test runs alone; it is stopped and recorded however the run ends."""
    with runner.compile_slots(spec) as slots:
        pre, pre_why = start_precompile(ctx, wt, slots)
        try:
            main = runner.run(spec, wt, ctx.out_dir, ctx.triton_cache, tag="gate",
                              before_alone=pre.stop if pre else None, slots=slots)
        finally:
            pre_record = pre.stop() if pre else {"ran": False, "why": pre_why}
    return main, pre_record


def precompile_budget(ctx: Context) -> tuple[int | None, str | None]:
    """The precompile worker's per-row GPU memory budget and what it came from. When the earlier gate runs
    (baseline_tests, fixture_freeze) ran at least this run's workers and reran no test for sharing the GPU, their
    tests fit side by side as run: (None, why), and the worker takes a share of the device's total. When one of
    them did, the GPU is already short: what the free memory at the stage's start leaves beside the gate's
    workers running the tests with the largest earlier peaks at once (``kgate.testrun.memory_fit.beside``, the
    worst case; often 0, and then every row compiles in its own stage). (None, None) without a memory reading or
    measured peaks. Measured on an H200 (143771 MiB): Liger's TVD tests peak at up to 23.5 GiB, their 14 largest
    sum to 293.6 GiB, yet 200 and 360 tests ran at 14 workers with none rerun; the worst case alone would have
    left the worker nothing there."""
    test_peaks = ctx.memory_peaks()
    if ctx.gpu_memory is None or not test_peaks:
        return None, None
    clean = ctx.shared_cleanly_at()
    if clean is not None and clean >= ctx.workers:
        return None, (f"{precompile.SHARE_RULE}: the earlier gate runs at {clean} workers reran no test for "
                      "sharing the GPU")
    budget = memory_fit.beside(test_peaks, ctx.gpu_memory.free_bytes, ctx.workers)
    return budget, (f"free bytes at the stage's start beside the {min(ctx.workers, len(test_peaks))} largest of "
                    f"{len(test_peaks)} measured test peaks (kgate.testrun.memory_fit.beside)")


def start_precompile(ctx: Context, wt: Path, slots: str | None = None
                     ) -> tuple[precompile.Precompile | None, str | None]:
    """The candidate's compile-only worker over the rows later stages time (``kgate.measure.precompile``),
    within the gate run's compile ``slots`` when it has them, or None and why it does not run: on CPU (the
    interpreter compiles nothing), without a measure section, or without profile_baseline's row table."""
    c, gpu = ctx.campaign, ctx.gpu
    if gpu == "cpu":
        return None, "CPU: the Triton interpreter compiles nothing"
    spec = measure_rows.load_spec(c, gpu)
    if spec is None:
        return None, "the campaign has no measure section"
    pb_path = paths.record(c.name, gpu, "profile_baseline")
    if not pb_path.exists():
        return None, f"no row table: {pb_path} does not exist"
    ncu = c.data.get("ncu") or {}
    try:
        pb = read_record(pb_path)
        sizes = {r["row"]: (r.get("input_bytes"), r.get("peak_bytes")) for r in pb["data"].get("rows", [])}
        items = precompile.items_for(spec, measure_rows.table_from_record(pb), ncu.get("rows"), ncu.get("mode"),
                                     sizes)
        env = worker_env(ctx, wt, ctx.triton_cache)
        budget, budget_from = precompile_budget(ctx)
        return precompile.start(wt, ctx.triton_cache, env, ctx.out_dir / "worker-precompile.log",
                                spec.worker_init(), items, ctx.deadline_s(GATE_RUN_SHARE),
                                share=ctx.workers + 1, compile_slots=slots, budget_bytes=budget,
                                budget_from=budget_from), None
    except (KgateError, OSError) as exc:
        # it decides nothing: a precompile that cannot start is recorded, and the gate runs as ever
        return None, f"could not start: {type(exc).__name__}: {exc}"
