"""Stage ``profile_candidate``: the pair table, measured on both arms with the same harness in one job.

Method: two workers, BENCH_BASE and the candidate, on the stack's one
Triton cache (``kgate.cache``), on the same device. For each representative row
(arms alternating which goes first) both arms get the same seeded inputs
(sha256 compared), are warmed, timed and profiled exactly as in
profile_baseline. Per row:

* **path**: ``fallback`` when the candidate still launches a kernel matching
  ``measure.kernels.removed``, else ``optimized``;
* **pair**: the baseline's ``replaced`` kernels (device time per call) against
  the candidate's kernels matching ``replaced`` or ``replacement``; pair
  speedup = baseline pair / candidate pair;
* **implied endpoint speedup** of an optimized row:
  ``endpoint_base / (endpoint_base - (pair_base - pair_cand))`` (Amdahl: only
  the pair changed), 1 for a fallback row;
* **memory**: peak reduction (baseline peak - candidate peak) against the
  temporaries' bytes: an optimized row must drop by at least (1 - tol) of
  them, a fallback row by at most tol of them either way;
* **census**: kernels the candidate launches that the baseline never launched
  (on any profiled row). One that ``replacement`` does not match is a hidden
  replacement: the stage fails;
* **outputs**: after the row's profile, in the same two workers, fresh input
  values and the candidate's sampled outputs and gradients against BENCH_BASE's
  (``kgate.measure.timed_check``; gate ``timed_outputs_match``, tolerance
  ``bench.outputs_rtol``): the code profiled computes what was tested, judged on
  CPU too.

Compile resources per enabled dispatch class (a class with at least one
optimized row): registers, spills, shared memory and an occupancy estimate of
every compiled variant of the replacement kernels the class's rows launched
(``kernel.n_regs``, ``kernel.n_spills``, ``kernel.metadata.shared``), against
the baseline's replaced kernels of the same class. STOP when an enabled class
fails to run or compile, spills more than ``profile.spill_ratio_max`` x the
baseline's (0, the default: any spill), or its occupancy drops below
``profile.occupancy_min_ratio`` of the baseline's; STOP when the geomean of the
implied endpoint speedups is below the bar. On CPU the compile report is
unavailable (the interpreter compiles nothing) and the timed gate is ``skip``;
the census and memory checks run. docs/measurement.md.
"""

from __future__ import annotations

import math
from typing import Any

from kgate import paths
from kgate.gates import env as env_gates
from kgate.gates.bench import gate_timed_outputs, memory_rule
from kgate.measure import coordinator as measure
from kgate.measure.arms import WorkerFailure
from kgate.measure.profile import measure_row, not_measured, per_call, removal_table
from kgate.measure.rows import CPU_TIMING_NOTE, MeasureSpec, Row
from kgate.measure.timed_check import PROFILE_ROUND, fresh_inputs, timed_outputs
from kgate.records import Gate, StageResult
from kgate.stages.common import PROFILE_SHARE, Context, failed_run_gate
from kgate.stats import summarize

#: what the candidate_runs gate requires here
RUNS = "the candidate runs every profiled row"

# arithmetic (pure; tests/test_profile_candidate.py)


def pair_row(spec: MeasureSpec, row: Row, base: dict[str, Any], cand: dict[str, Any], tol: float,
             enabled: tuple[str, ...] = ()) -> dict[str, Any]:
    """One row of the pair table from the two arms' measurements (``measure_row`` results); ``enabled``: the
    dispatch classes the candidate enables (``MeasureSpec.row_path`` decides the row's path)."""
    kb, ib = base["profile"]["kernels"], base["profile"]["iterations"]
    kc, ic = cand["profile"]["kernels"], cand["profile"]["iterations"]
    _, base_pair_us = per_call(kb, ib, spec.replaced_rx)
    rep = spec.replacement_rx
    cand_hit = {k: v for k, v in kc.items() if spec.replaced_rx.search(k) or (rep is not None and rep.search(k))}
    cand_pair_us = sum(v["device_us"] for v in cand_hit.values()) / ic
    launched = removal_table(cand["profile"])
    removed_n = per_call(launched, ic, spec.removed_rx)[0] if spec.removed_rx is not None else 0.0
    path, why = spec.row_path(row, enabled, launched, ic)
    end_b = summarize(base["samples_ms"]).median_ms
    end_c = summarize(cand["samples_ms"]).median_ms
    pair = base_pair_us / cand_pair_us if cand_pair_us > 0 else None
    saved_ms = (base_pair_us - cand_pair_us) / 1e3
    if path == "optimized" and pair is not None and saved_ms < end_b:
        implied = end_b / (end_b - saved_ms)
    elif path == "optimized":
        implied = None
    else:
        implied = 1.0
    expected = spec.expected_bytes(row)
    reduction = base["profile"]["peak_bytes"] - cand["profile"]["peak_bytes"]
    mem_ok, mem_rule = memory_rule(path, reduction, expected, base["profile"]["peak_bytes"], tol)
    return {
        "row": row.name, "kind": row.kind, "class": row.klass(spec.class_key) if spec.class_key else None,
        "dispatch": spec.row_class(row), "path": path, "path_reason": why,
        "removed_launches_per_call": removed_n,
        "baseline_pair_us": base_pair_us, "candidate_pair_us": cand_pair_us, "pair_speedup": pair,
        "baseline_pair_kernels": sorted(measure.matching(kb, spec.replaced_rx)),
        "candidate_pair_kernels": sorted(cand_hit),
        "endpoint_base_ms": end_b, "endpoint_cand_ms": end_c, "endpoint_ratio": end_b / end_c,
        "implied_endpoint_speedup": implied,
        "peak_base_bytes": base["profile"]["peak_bytes"], "peak_cand_bytes": cand["profile"]["peak_bytes"],
        "peak_reduction_bytes": reduction, "expected_temporary_bytes": expected, "memory_ok": mem_ok,
        "memory_rule": mem_rule,
        "census_base": sorted(kb), "census_cand": sorted(kc),
        "new_kernels": sorted(set(kc) - set(kb)), "gone_kernels": sorted(set(kb) - set(kc)),
        "timer": cand["profile"]["timer"], "iterations": {"base": ib, "cand": ic},
    }


def outputs_check(index: int, row: Row, mode: str, arms: dict[str, Any]) -> dict[str, Any]:
    """After a row's profile, in the same two workers: fresh input values (``PROFILE_ROUND``, values no bench round
    uses), then the candidate's sampled outputs and gradients against BENCH_BASE's (``kgate.measure.timed_check``);
    an entry for ``gate_timed_outputs``."""
    fresh_inputs(PROFILE_ROUND, arms, [row.name])
    key = f"{row.name}:{mode}"
    return {"index": index, "label": "after profiling", "row": row.name,
            "outputs": timed_outputs(PROFILE_ROUND, arms, [(key, row, mode, "profiled")])}


def path_mismatches(spec: MeasureSpec, rows: list[dict[str, Any]]) -> list[str]:
    """Rows whose dispatch class decided the path but whose kernels say otherwise: an optimized row that still
    launches the removed kernels, a fallback row that no longer does (only with a ``removes`` mechanism)."""
    if spec.removed_rx is None:
        return []
    out = []
    for r in rows:
        if r.get("dispatch") is None:
            continue
        if r["path"] == "optimized" and r["removed_launches_per_call"] > 0:
            out.append(f"{r['row']} ({r['dispatch']} enabled) still launches /{spec.removed}/")
        if r["path"] == "fallback" and r["removed_launches_per_call"] <= 0:
            out.append(f"{r['row']} ({r['dispatch']} not enabled) no longer launches /{spec.removed}/")
    return out


def hidden_kernels(spec: MeasureSpec, rows: list[dict[str, Any]]) -> list[str]:
    """Kernels the candidate launches, the baseline never launched, and ``replacement`` does not name."""
    base = {k for r in rows for k in r["census_base"]}
    cand = {k for r in rows for k in r["census_cand"]}
    rep = spec.replacement_rx
    return sorted(k for k in cand - base if rep is None or not rep.search(k))


def group(r: dict[str, Any]) -> Any:
    """What a pair-table row is grouped by for compile resources: its class value (``measure.class_key``), else
    its dispatch class, else one group of every row."""
    if r.get("class") is not None:
        return r["class"]
    return r.get("dispatch") or "every row"


def _variants(resources: dict[str, Any], arm: str, rows: list[str], rx: Any, mode: str,
              launched_on: dict[tuple[str, str], list[str]]) -> list[dict[str, Any]]:
    """The arm's distinct variants of kernels matching ``rx`` on ``rows``; ``launched_on`` gets each one's rows."""
    res = resources.get(arm) or {}
    table = res.get("launched_by_row") or res.get("compiled_by_row") or {}
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for name in rows:
        for v in table.get(f"{name}:{mode}", []):
            if rx is not None and rx.search(v["kernel"]):
                seen[(v["kernel"], v["key"])] = v
                on = launched_on.setdefault((arm, v["key"]), [])
                if name not in on:
                    on.append(name)
    return list(seen.values())


def class_resources(spec: MeasureSpec, rows: list[dict[str, Any]], resources: dict[str, Any], mode: str,
                    min_ratio: float, spill_ratio: float = 0.0) -> list[dict[str, Any]]:
    """Per enabled class: the replacement variants' registers, spills, shared memory and occupancy,
    against the baseline's replaced kernels of the same class.

    Spills are Triton's ``n_spills`` (the kernel's local memory per thread in 32-bit words): a problem
    for each candidate variant that spills more than ``spill_ratio`` x the baseline's most-spilling
    replaced variant of the class (0: any spill). Each problem names the variant's launch settings and
    the rows that launched it."""
    out = []
    enabled = sorted({group(r) for r in rows if r["path"] == "optimized"}, key=str)
    # the candidate's kernels: its named replacement, else (an in-place change) the same names as the baseline's
    rep = spec.replacement_rx or spec.replaced_rx
    for klass in enabled:
        names = [r["row"] for r in rows if group(r) == klass]
        opt = [r["row"] for r in rows if group(r) == klass and r["path"] == "optimized"]

        launched_on: dict[tuple[str, str], list[str]] = {}
        cand_v = _variants(resources, "cand", opt, rep, mode, launched_on)
        base_v = _variants(resources, "base", names, spec.replaced_rx, mode, launched_on)
        problems = []
        if not cand_v:
            # neither arm compiled one: e.g. a fusion whose named kernels are all torch's
            hint = ("" if base_v else " in either arm: name the compiled kernel that takes the work over in "
                    "measure.kernels.replaced (or measure.kernels.replacement)")
            problems.append(f"no compiled variant of /{rep.pattern}/ ran on rows {', '.join(opt)}{hint}")
        errors = [f"{v['kernel']}: {v['error']}" for v in cand_v if v.get("error")]
        problems += [f"does not load: {e}" for e in errors]
        base_spills = max((int(v.get("n_spills") or 0) for v in base_v), default=0)
        allowed = spill_ratio * base_spills
        for v in cand_v:
            n = int(v.get("n_spills") or 0)
            if n and n > allowed:
                limit = (f"the baseline's replaced variants spill {base_spills}, limit {spill_ratio:g} x"
                         if spill_ratio else "limit 0")
                problems.append(
                    f"spills: {v['kernel']} {n} x 32-bit local memory per thread ({v.get('n_regs')} registers, "
                    f"num_warps {v.get('num_warps')}, num_stages {v.get('num_stages')}; launched on "
                    f"{', '.join(launched_on.get(('cand', v['key']), [])) or 'no recorded row'}; {limit})")
        occ_c = [v["occupancy"]["fraction"] for v in cand_v
                 if (v.get("occupancy") or {}).get("fraction") is not None]
        occ_b = [v["occupancy"]["fraction"] for v in base_v
                 if (v.get("occupancy") or {}).get("fraction") is not None]
        ratio = None
        if occ_c and occ_b and min(occ_b) > 0:
            ratio = min(occ_c) / min(occ_b)
            if ratio < min_ratio:
                problems.append(f"occupancy collapses: {min(occ_c):.3f} vs the baseline's {min(occ_b):.3f} "
                                f"({ratio:.2f} < {min_ratio})")
        elif cand_v:
            problems.append("occupancy could not be estimated (device limits or kernel metadata missing)")
        out.append({"class": klass, "rows": opt, "candidate_variants": cand_v, "baseline_variants": base_v,
                    "occupancy_ratio": ratio, "baseline_spills": base_spills, "problems": problems})
    return out


def pair_gate(rows: list[dict[str, Any]], bar: float, cpu: bool, evidence: str) -> Gate:
    threshold = f">= {bar} x (geomean over profiled rows of endpoint / (endpoint - (pair_base - pair_cand)); fallback rows 1)"
    undefined = [r["row"] for r in rows if r["implied_endpoint_speedup"] is None]
    if undefined:
        detail = (f"optimized rows without a measurable pair ({', '.join(undefined)}): the candidate launches no "
                  "kernel the campaign's replaced/replacement regexes match")
        return Gate("pair_supports_bar", threshold, None, "skip" if cpu else "stop", evidence=evidence,
                    detail=(f"{CPU_TIMING_NOTE}: " if cpu else "") + detail)
    value = measure.geomean_values([r["implied_endpoint_speedup"] for r in rows])
    opt = [r for r in rows if r["path"] == "optimized"]
    pairs = ", ".join(f"{r['row']} {r['pair_speedup']:.3f}x" for r in opt) or "none (every row falls back)"
    detail = f"implied endpoint geomean {value:.4f}x; optimized pair speedups: {pairs}"
    if cpu:
        return Gate("pair_supports_bar", threshold, round(value, 6), "skip", evidence=evidence, unit="x",
                    detail=f"{CPU_TIMING_NOTE}: {detail}")
    return Gate("pair_supports_bar", threshold, round(value, 6), "pass" if value >= bar else "stop",
                evidence=evidence, unit="x", detail=None if value >= bar else detail + f" < bar {bar}")


# the stage


def run(ctx: Context) -> StageResult:
    c, gpu, cid = ctx.campaign, ctx.gpu, ctx.candidate
    spec = measure.load_spec(c, gpu)
    if spec is None:
        return not_measured(ctx, "profile_candidate")
    fx, pb, build = ctx.inputs["fixture_freeze"], ctx.inputs["profile_baseline"], ctx.inputs["candidate_build"]
    rows = spec.profile_rows(measure.table_from_record(pb))
    wt_base, wt_cand = ctx.timed_worktrees()
    mode = spec.profile_mode
    tol = float(spec.profile.get("memory_tolerance", 0.05))
    min_ratio = float(spec.profile.get("occupancy_min_ratio", 0.5))
    spill_ratio = float(spec.profile.get("spill_ratio_max", 0))
    evidence = str(paths.record(c.name, gpu, "profile_candidate", cid))
    deadline = measure.Deadline(ctx.deadline_s(PROFILE_SHARE))
    try:
        arms = measure.start_arms(ctx, spec, [("base", wt_base, ctx.triton_cache),
                                              ("cand", wt_cand, ctx.triton_cache)],
                                  deadline)
    except WorkerFailure as exc:
        if exc.arm == "cand" and exc.target:
            return StageResult(gates=[failed_run_gate(str(exc), RUNS, str(ctx.out_dir / "worker-cand.log"),
                                                      value="failed to start", status="stop")],
                               data={"measured": True, "failure": {"row": None, "error": str(exc)}, "candidate": cid})
        raise
    base, cand = arms
    env_gate = env_gates.arms_gate(c.data, {"profile_baseline": pb["data"]["worker"]["env"], "base": base.info["env"],
                                      "cand": cand.info["env"]}, evidence)
    if env_gate.status == "fail":
        for arm in arms:
            arm.close()
        return StageResult(gates=[env_gate], data={"measured": False, "candidate": cid,
                                                   "workers": {a.name: a.info for a in arms}})
    table: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    failure: dict[str, Any] | None = None
    resources: dict[str, Any] = {}
    autotune: dict[str, Any] = {}
    host = [measure.host_load()]
    try:
        device = measure.check_same_device(arms)
        for i, row in enumerate(rows):
            order = (base, cand) if i % 2 == 0 else (cand, base)
            got: dict[str, dict[str, Any]] = {}
            for arm in order:
                measure.progress(f"{row.name}: profiling arm {arm.name} ({mode})")
                try:
                    got[arm.name] = measure_row(arm, row, spec, mode)
                except WorkerFailure as exc:
                    if arm is cand and exc.target:
                        failure = {"row": row.name, "class": row.klass(spec.class_key) if spec.class_key else None,
                                   "error": str(exc)}
                        break
                    raise
            if failure:
                break
            measure.compare_hashes("input", row.name, {a: got[a]["inputs"]["sha256"] for a in got})
            measure.compare_hashes("output-gradient", row.name, {a: got[a]["warm"]["grad_hashes"] for a in got})
            try:
                checks.append(outputs_check(i, row, mode, {"base": base, "cand": cand}))
            except WorkerFailure as exc:
                if exc.arm == "cand" and exc.target:
                    failure = {"row": row.name, "class": row.klass(spec.class_key) if spec.class_key else None,
                               "error": str(exc)}
                    break
                raise
            for arm in arms:
                arm.request("release", rows=[row.name])
            pr = pair_row(spec, row, got["base"], got["cand"], tol, tuple(build["data"].get("enables") or ()))
            table.append(pr)
            measure.progress(f"{row.name}: {pr['path']}, pair {_fmt(pr['pair_speedup'])}x, implied endpoint "
                             f"{_fmt(pr['implied_endpoint_speedup'])}x, peak drop {pr['peak_reduction_bytes']} B")
        alive = [arm for arm in arms if not (arm is cand and failure)]
        resources = measure.ask_all(alive, "resources")
        autotune = measure.ask_all(alive, "autotune")
        host.append(measure.host_load())
    finally:
        for arm in arms:
            arm.close()
    gates: list[Gate] = [env_gate]
    if failure:
        gates.append(failed_run_gate(failure["error"], RUNS, str(cand.log), value=f"failed at {failure['row']}",
                                     status="stop"))
    else:
        gates.append(Gate("candidate_runs", RUNS, f"{len(rows)} rows", "pass",
                          evidence=str(cand.log)))
        gates.append(gate_timed_outputs(checks, float(spec.bench.get("outputs_rtol", 0.05)), evidence))
        gates += candidate_gates(spec, table, resources, mode, tol, min_ratio, evidence, spill_ratio)
    data = {
        "measured": True, "cpu": spec.cpu, "timings_meaningful": not spec.cpu, "mode": mode, "bar": spec.bar,
        "candidate": cid, "candidate_sha": build["data"]["candidate_sha"], "bench_base": fx["data"]["bench_base"],
        "device": device, "rows": table, "outputs_checked": checks, "failure": failure, "memory_tolerance": tol,
        "hidden_kernels": hidden_kernels(spec, table) if table else [],
        "resources": resources,
        "classes": class_resources(spec, table, resources, mode, min_ratio, spill_ratio) if table else [],
        "workers": {a.name: a.info for a in arms},
        "autotune": {k: {"tuners": [t for t in v["tuners"] if t["picks"]], "row_picks": v["row_picks"]}
                     for k, v in autotune.items()},
        "baseline_profile": {r["row"]: r["endpoint_ms"] for r in pb["data"].get("rows", [])},
        "forced": ctx.forced, "host_load": {"before": host[0], "after": host[-1]},
    }
    return StageResult(gates=gates, data=data, reasons=[] if spec.cpu else measure.busy_note(host))


def candidate_gates(spec: MeasureSpec, table: list[dict[str, Any]], resources: dict[str, Any], mode: str, tol: float,
                    min_ratio: float, evidence: str, spill_ratio: float = 0.0) -> list[Gate]:
    """The gates of a candidate that ran every row (pure given the measurements)."""
    gates = []
    hidden = hidden_kernels(spec, table)
    new = sorted({k for r in table for k in r["new_kernels"]})
    gates.append(Gate("no_hidden_kernels", "every kernel new to the candidate matches measure.kernels.replacement",
                      f"{len(new)} new kernel(s), {len(hidden)} unnamed", "fail" if hidden else "pass",
                      evidence=evidence,
                      detail=f"hidden replacement kernel(s): {', '.join(hidden)}" if hidden else None))
    bad_mem = [f"{r['row']} ({r['path']}: drop {r['peak_reduction_bytes']} B, rule {r['memory_rule']})"
               for r in table if not r["memory_ok"]]
    mismatch = path_mismatches(spec, table)
    if spec.removed_rx is not None:
        gates.append(Gate("path_matches_dispatch", "rows of enabled classes launch no removed kernel, other rows do",
                          f"{len(table) - len(mismatch)}/{len(table)} rows", "fail" if mismatch else "pass",
                          evidence=evidence, detail="; ".join(mismatch) if mismatch else None))
    gates.append(Gate("memory_matches_temporaries",
                      f"optimized rows drop the temporaries' bytes (-{tol:.0%}), fallback rows within +-{tol:.0%} "
                      f"(without temporaries: within {tol:.0%} of the baseline peak)",
                      f"{len(table) - len(bad_mem)}/{len(table)} rows", "stop" if bad_mem else "pass",
                      evidence=evidence, detail="; ".join(bad_mem) if bad_mem else None))
    if spec.cpu:
        reason = (resources.get("cand") or {}).get("reason", "unavailable on CPU")
        gates.append(Gate("compile_resources", "enabled classes compile without spills or occupancy collapse",
                          "unavailable", "skip", evidence=evidence, detail=f"unavailable: {reason}"))
    else:
        classes = class_resources(spec, table, resources, mode, min_ratio, spill_ratio)
        bad = [f"{spec.class_key or 'class'}={k['class']}: {'; '.join(k['problems'])}" for k in classes if k["problems"]]
        if not classes:
            value = "no enabled class (every row falls back)"
        elif bad:
            value = f"{len(bad)} of {len(classes)} enabled class(es): {bad[0]}" + (" ..." if len(bad) > 1 else "")
        else:
            value = f"{len(classes)} enabled class(es)"
        spill_rule = "0 spills" if not spill_ratio else f"spills <= {spill_ratio:g} x the baseline's"
        gates.append(Gate("compile_resources",
                          f"each enabled class compiles with {spill_rule} and occupancy >= {min_ratio} x the baseline's",
                          value, "stop" if bad else "pass", evidence=evidence, detail="; ".join(bad) if bad else None))
    gates.append(pair_gate(table, spec.bar, spec.cpu, evidence))
    return gates


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"
