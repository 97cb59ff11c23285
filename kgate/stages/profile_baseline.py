"""Stage ``profile_baseline``: where BENCH_BASE spends its time, and whether the hypothesis can reach its bar.

Method: one worker on the BENCH_BASE worktree (the stack's Triton cache,
``kgate.cache``) reads the benchmark registry once if the campaign names one,
then, in the same job, measures the device's launch cost (a one-store kernel
launched back to back) and copy bandwidth. For each representative row it
warms the op (compile and autotune), times the endpoint (flushed calls, CUDA
events, median), and profiles ``iterations`` flushed calls under
torch.profiler: per-kernel device time and launches per call (kgate's own
flush kernel excluded and listed apart), an unfiltered census of every kernel
launched, peak allocated memory, and every allocation's size, against which
the campaign's temporaries are attributed.

The plausibility bound per row is the best case of the hypothesis' mechanism
(``measure.mechanism``; the arithmetic of each kind is
:mod:`kgate.measure.mechanism`)::

    saved      = removes (launches x launch cost + temporaries' bytes / bandwidth)
               + speeds_up (per named kernel group: time - max(bytes / bandwidth, flops / peak))
               + declared (named kernels' time x (1 - 1/speedup))
    best case  = endpoint / (endpoint - saved)

The roofline's bandwidth and FLOP peaks are the preflight's (the doctor
record of this campaign and device class, when its device is the one
profiled), else measured here by the same probes (:mod:`kgate.measure.peaks`).
The stage STOPs when the geomean of the per-row best cases is below the
campaign's bar, or when a premise of the mechanism does not hold at the
baseline (the removed or named kernels never launch, the temporaries are not
allocated). A bound that rests on a ``declared`` speedup says so. On CPU every
number is recorded and labelled; the bound never stops a CPU run (interpreter
timings say nothing about a GPU), so its gate is ``skip``.
docs/measurement.md.
"""

from __future__ import annotations

from typing import Any

from kgate import paths
from kgate.measure import coordinator as measure
from kgate.measure import mechanism
from kgate.measure.arms import Arm
from kgate.measure.profile import measure_row, not_measured, per_call, removal_table
from kgate.measure.rows import CPU_TIMING_NOTE, MeasureSpec, Row
from kgate.protocol import PREFLIGHT
from kgate.records import Gate, StageResult, read_record
from kgate.stages.common import PROFILE_SHARE, Context
from kgate.stats import summarize

LAUNCH_PROBE = {"gpu": 2000, "cpu": 20}
BANDWIDTH_PROBE_BYTES = {"gpu": 2**30, "cpu": 32 * 2**20}
ALLOC_GRANULE = 512
# the CUDA caching allocator splits a cached block only when more than 1 MiB would remain
CUDA_BLOCK_SLACK = 2**20
FORMULA = ("best case = endpoint / (endpoint - saved); saved = removes (launches x launch cost + temporaries' "
           "bytes / bandwidth) + speeds_up (time - roofline floor) + declared (time x (1 - 1/speedup))")


# arithmetic (pure; tests/test_profile_bound.py)


def kernel_table(kernels: dict[str, dict[str, float]], iterations: int, spec: MeasureSpec | None = None
                 ) -> list[dict[str, Any]]:
    """Per-call launches and device time of every kernel, largest first, with the campaign's labels."""
    total = sum(k["device_us"] for k in kernels.values()) or 1.0
    out = []
    for name, k in kernels.items():
        row = {"kernel": name, "launches_per_call": k["launches"] / iterations,
               "device_us_per_call": k["device_us"] / iterations, "share": k["device_us"] / total}
        if spec is not None:
            row["removed"] = bool(spec.removed_rx.search(name)) if spec.removed_rx is not None else False
            row["replaced"] = bool(spec.replaced_rx.search(name))
            rx = spec.replacement_rx
            row["replacement"] = bool(rx.search(name)) if rx else False
        out.append(row)
    return sorted(out, key=lambda r: -r["device_us_per_call"])


def attribute_temporaries(spec: MeasureSpec, row: Row, alloc_sizes: dict[str, int], iterations: int,
                          slack: int = 0) -> list[dict[str, Any]]:
    """Match each temporary to allocations of its size; found when a call makes at least as many
    allocations of that size as the campaign lists temporaries of it.

    "Its size" is the exact size, the size rounded up to 512 bytes, or (``slack`` > 0, CUDA) up to
    ``slack`` bytes above that: the CUDA caching allocator reports block sizes, and it leaves a block
    unsplit when less than 1 MiB would remain.
    """
    sizes = {int(k): v for k, v in alloc_sizes.items()}
    wanted: dict[int, int] = {}
    size = {t.name: spec.temporary_bytes(row, t) for t in spec.temporaries}
    for t in spec.temporaries:
        wanted[size[t.name]] = wanted.get(size[t.name], 0) + 1
    out = []
    for t in spec.temporaries:
        n = size[t.name]
        rounded = -(-n // ALLOC_GRANULE) * ALLOC_GRANULE
        count = sum(c for s, c in sizes.items() if s == n or rounded <= s <= rounded + slack)
        out.append({"name": t.name, "bytes": n, "accesses": t.accesses,
                    "matched_sizes": [n, rounded + slack] if slack else sorted({n, rounded}),
                    "allocations_per_call_of_this_size": count / iterations,
                    "temporaries_of_this_size": wanted[n], "found": count / iterations >= wanted[n]})
    return out


def bound_gate(rows: list[dict[str, Any]], bar: float, cpu: bool, evidence: str, kinds: tuple[str, ...] = ()) -> Gate:
    """STOP when the geomean of the per-row best cases is below the bar (skip on CPU)."""
    threshold = f">= {bar} x (geomean of per-row best cases; {FORMULA})"
    declared = mechanism.weakest(kinds)
    label = (f"; the bound rests on a declared speedup ({mechanism.LABELS['declared']})" if declared else "")
    unbounded = [r["row"] for r in rows if r["bound"]["best_case_speedup"] is None]
    if unbounded:
        detail = (f"saved time >= endpoint at {', '.join(unbounded)}: the bound does not limit anything; "
                  "check the launch-cost, bandwidth and peak probes in the record" + label)
        return Gate("plausible_speedup", threshold, None, "skip" if cpu else "pass", evidence=evidence, unit="x",
                    detail=(f"{CPU_TIMING_NOTE}: " if cpu else "") + detail)
    value = measure.geomean_values([r["bound"]["best_case_speedup"] for r in rows])
    worst = min(rows, key=lambda r: r["bound"]["best_case_speedup"])
    what = " and ".join(mechanism.LABELS[k].split(" (")[0] for k in kinds) or "the mechanism"
    detail = (f"{what}: at most {value:.4f}x (geomean of {len(rows)} rows; lowest "
              f"{worst['bound']['best_case_speedup']:.4f}x at {worst['row']}), "
              f"{'below' if value < bar else 'above'} the bar {bar}" + label)
    if cpu:
        return Gate("plausible_speedup", threshold, round(value, 6), "skip", evidence=evidence, unit="x",
                    detail=f"{CPU_TIMING_NOTE}: {detail}")
    return Gate("plausible_speedup", threshold, round(value, 6), "pass" if value >= bar else "stop",
                evidence=evidence, unit="x", detail=detail if (value < bar or declared) else None)


def analyse(spec: MeasureSpec, row: Row, m: dict[str, Any], launch_us: float, bytes_per_s: float,
            flops_per_s: dict[str, float] | None = None) -> dict[str, Any]:
    """Everything profile_baseline reports about one row."""
    it = m["profile"]["iterations"]
    kernels = m["profile"]["kernels"]
    endpoint = summarize(m["samples_ms"])
    rx = spec.removed_rx
    launched = removal_table(m["profile"])
    removed_n, removed_us = per_call(launched, it, rx) if rx is not None else (0.0, 0.0)
    replaced_n, replaced_us = per_call(kernels, it, spec.replaced_rx)
    kernel_sum_ms = sum(k["device_us"] for k in kernels.values()) / it / 1e3
    savings = mechanism.row_savings(spec.mechanism, lambda e, key: spec.evaluate(row, e, key), launched, it,
                                    launch_us, bytes_per_s, flops_per_s)
    bound = mechanism.best_case(endpoint.median_ms, savings) | {"formula": FORMULA, "kinds": list(savings)}
    vanish = (endpoint.median_ms / (endpoint.median_ms - replaced_us / 1e3)
              if replaced_us / 1e3 < endpoint.median_ms else None)
    return {
        "row": row.name, "kind": row.kind, "class": row.klass(spec.class_key) if spec.class_key else None,
        "dispatch": spec.row_class(row), "values": row.values,
        "inputs_sha256": m["inputs"]["sha256"], "input_bytes": m["inputs"].get("bytes"),
        "endpoint": endpoint.as_dict(), "endpoint_ms": endpoint.median_ms,
        "kernel_sum_ms": kernel_sum_ms, "kernels": kernel_table(kernels, it, spec),
        "census": sorted(kernels), "flush_kernels": m["profile"]["flush_kernels"], "timer": m["profile"]["timer"],
        "removed": {"launches_per_call": removed_n, "device_us_per_call": removed_us,
                    "share_of_endpoint": removed_us / 1e3 / endpoint.median_ms},
        "replaced": {"launches_per_call": replaced_n, "device_us_per_call": replaced_us,
                     "share_of_endpoint": replaced_us / 1e3 / endpoint.median_ms,
                     "amdahl_if_their_whole_time_vanished": vanish},
        "mechanism": savings,
        "temporaries": attribute_temporaries(spec, row, m["profile"]["alloc_sizes"], it,
                                             slack=0 if spec.cpu else CUDA_BLOCK_SLACK),
        "expected_temporary_bytes": spec.expected_bytes(row), "removed_traffic_bytes": spec.removed_traffic_bytes(row),
        "peak_bytes": m["profile"]["peak_bytes"], "peak_method": m["profile"]["peak_method"],
        "alloc_sizes": m["profile"]["alloc_sizes"], "iterations": it, "warm": m["warm"], "bound": bound,
    }


# the stage


def registry_rows(arm: Arm, spec: MeasureSpec) -> tuple[list[Row], dict[str, Any] | None]:
    if not spec.registry:
        return [], None
    reg = arm.request("registry", spec=spec.registry)
    rows = [Row(name=r["name"], kind="dense", values=r) for r in reg["rows"]]
    return rows, {k: v for k, v in reg.items() if k != "rows"} | {"rows": [r["name"] for r in reg["rows"]]}


def run(ctx: Context) -> StageResult:
    c, gpu = ctx.campaign, ctx.gpu
    spec = measure.load_spec(c, gpu)
    if spec is None:
        return not_measured(ctx, "profile_baseline")
    fx = ctx.inputs["fixture_freeze"]
    wt = ctx.bench_base()
    cache = ctx.triton_cache
    kind = "cpu" if spec.cpu else "gpu"
    mode = spec.profile_mode
    deadline = measure.Deadline(ctx.deadline_s(PROFILE_SHARE))
    host = [measure.host_load()]
    (arm,) = measure.start_arms(ctx, spec, [("base", wt, cache)], deadline)
    try:
        reg_rows, registry = registry_rows(arm, spec)
        # on CPU the registry is read (and recorded) but its GPU-scale rows are not run
        table = measure.row_table(spec.explicit_rows, [] if spec.cpu else reg_rows)
        rows = spec.profile_rows(table)
        launch = arm.request("launch_cost", launches=LAUNCH_PROBE[kind])
        bw = arm.request("bandwidth", nbytes=BANDWIDTH_PROBE_BYTES[kind])
        measure.progress(f"launch cost {launch['per_launch_us']:.3f} us, bandwidth {bw['bytes_per_s'] / 1e9:.1f} GB/s"
                         + (f" ({CPU_TIMING_NOTE})" if spec.cpu else ""))
        peaks = device_peaks(ctx, arm, bw, need_flops=bool(spec.mechanism.speeds_up))
        analysed = []
        for row in rows:
            measure.progress(f"profiling {row.name} ({mode})")
            m = measure_row(arm, row, spec, mode)
            arm.request("release", rows=[row.name])
            a = analyse(spec, row, m, launch["per_launch_us"], peaks["bytes_per_s"], peaks["flops_per_s"])
            analysed.append(a)
            best = a["bound"]["best_case_speedup"]
            measure.progress(f"{row.name}: endpoint {a['endpoint_ms']:.4f} ms, saved at best "
                             f"{a['bound']['saved_ms']:.4f} ms ({', '.join(a['mechanism'])}), best case "
                             + (f"{best:.4f}x" if best is not None else "unbounded"))
        autotune = arm.request("autotune")
        host.append(measure.host_load())
    finally:
        arm.close()
    evidence = str(paths.record(c.name, gpu, "profile_baseline"))
    gates = structural_gates(spec, analysed, evidence, "stop")
    gates.append(bound_gate(analysed, spec.bar, spec.cpu, evidence, spec.mechanism.kinds))
    data = {
        "measured": True, "cpu": spec.cpu, "timings_meaningful": not spec.cpu, "mode": mode, "bar": spec.bar,
        "bench_base": fx["data"]["bench_base"], "worktree": str(wt), "triton_cache": str(cache),
        "row_table": [r.as_dict() for r in table.values()], "registry": registry,
        "profile_rows": [r.name for r in rows], "launch_cost": launch, "bandwidth": bw, "formula": FORMULA,
        "mechanism": {"kinds": list(spec.mechanism.kinds), "labels": {k: mechanism.LABELS[k] for k in spec.mechanism.kinds},
                      "weakest": mechanism.weakest(spec.mechanism.kinds)},
        "device_peaks": peaks,
        "rows": analysed, "bound_geomean": next(g.value for g in gates if g.name == "plausible_speedup"),
        "worker": arm.info, "autotune": {"tuners": [t for t in autotune["tuners"] if t["picks"]],
                                         "row_picks": autotune["row_picks"]},
        "forced": ctx.forced, "host_load": {"before": host[0], "after": host[-1]},
    }
    reasons = [] if spec.cpu else measure.busy_note(host) + measure.spread_note(
        "launch cost", launch.get("samples_us") or [], "µs", f"the median, {launch['per_launch_us']:.3g} µs")
    return StageResult(gates=gates, data=data, reasons=reasons)


def device_peaks(ctx: Context, arm: Arm, bandwidth: dict[str, Any], need_flops: bool) -> dict[str, Any]:
    """The ceilings of the bounds: the preflight's peaks (its record for this campaign and device class, when it
    measured the device this worker runs on), else this job's bandwidth probe and, when a ``speeds_up`` entry needs
    them, FLOP rates measured here."""
    path = paths.record(ctx.campaign.name, ctx.gpu, PREFLIGHT)
    here = (arm.info.get("device") or {}).get("name")
    pre = read_record(path)["data"].get("device_peaks") if path.is_file() else None
    if pre and pre.get("meaningful") and pre.get("device") == here:
        return {"source": f"preflight record {path}", "device": here,
                "bytes_per_s": pre["bandwidth"]["bytes_per_s"], "flops_per_s": pre["flops"]["flops_per_s"],
                "bandwidth": pre["bandwidth"], "flops": pre["flops"]}
    why = ("no preflight record" if not path.is_file() else "the preflight measured no peaks" if not pre
           else f"the preflight measured {pre.get('device')}, this job runs on {here}" if pre.get("meaningful")
           else "the preflight's peaks are not meaningful (CPU)")
    flops = arm.request("flops") if need_flops else None
    return {"source": f"measured in this job ({why})", "device": here, "bytes_per_s": bandwidth["bytes_per_s"],
            "flops_per_s": flops["flops_per_s"] if flops else None, "bandwidth": bandwidth, "flops": flops}


def structural_gates(spec: MeasureSpec, rows: list[dict[str, Any]], evidence: str, bad: str) -> list[Gate]:
    """The hypothesis' premises at the baseline: the removed kernels run, the temporaries are allocated, each
    kernel group the mechanism names (speeds_up, declared) runs."""
    gates = []
    if spec.removed is not None:
        no_kernel = [r["row"] for r in rows if r["removed"]["launches_per_call"] <= 0]
        gates.append(Gate("removed_kernels_launched", f"every profiled row launches /{spec.removed}/",
                          f"{len(rows) - len(no_kernel)}/{len(rows)} rows", bad if no_kernel else "pass",
                          evidence=evidence,
                          detail=(f"the baseline never launches /{spec.removed}/ at {', '.join(no_kernel)}: the "
                                  "hypothesis removes nothing there") if no_kernel else None))
    named = [(kind, e) for r in rows for kind in ("speeds_up", "declared")
             for e in (r["mechanism"].get(kind) or {}).get("entries", [])]
    if named:
        idle = sorted({f"{kind} /{e['kernels']}/" for kind, e in named if not e["matched"]})
        groups = len({(kind, e["kernels"]) for kind, e in named})
        gates.append(Gate("named_kernels_launched", "every kernel group the mechanism names runs at the baseline",
                          f"{groups - len(idle)}/{groups} groups", bad if idle else "pass", evidence=evidence,
                          detail=(f"the baseline never launches {', '.join(idle)} on the profiled rows: the "
                                  "hypothesis speeds up nothing there") if idle else None))
    if spec.temporaries:
        missing = [f"{r['row']}:{t['name']} ({t['bytes']} B)" for r in rows for t in r["temporaries"] if not t["found"]]
        gates.append(Gate("temporaries_allocated", "every profiled row allocates each temporary's size",
                          f"{sum(len(r['temporaries']) for r in rows) - len(missing)}/"
                          f"{sum(len(r['temporaries']) for r in rows)} found", bad if missing else "pass",
                          evidence=evidence,
                          detail=(f"no allocation of the expected size: {', '.join(missing)}") if missing else None))
    return gates
