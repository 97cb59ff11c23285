"""Stage ``ncu``: the protocol's Nsight Compute passes on both arms, parsed and compared.

Method: for every row of ``ncu.rows`` (arms alternating which goes first) and
every pass of ``ncu.passes`` (the protocol's ``--set full --section PmSampling
--section PmSampling_WarpStates`` and ``--set source --section
SourceCounters``), ncu runs one process of the arm (``python -m
kgate.ncu.target``: the timed stages' worker code, in the arm's worktree with
the arm's Triton cache and environment). It imports the target, prepares the
row's seeded inputs, warms it ``ncu.warm_calls`` times (compile and autotune
outside anything profiled) and makes one call between cudaProfilerStart and
cudaProfilerStop. ncu runs with ``--profile-from-start off``, so it profiles
only launches in that call whose kernel matches ``ncu.kernels`` or
``measure.kernels.removed`` (``--kernel-name regex:``), every one of them
(``--launch-skip 0``; ``--launch-count`` is a cap that marks a profile
incomplete), with ``--clock-control`` as the campaign says (``none``: clocks as
found) and caches flushed before each replay (``--cache-control all``). The
command of every process is recorded. The ``.ncu-rep`` reports stay under
``results/`` (never in git); each is exported with ``ncu --import --csv``
(``--page raw`` and ``--page details``) beside it and parsed by
:mod:`kgate.ncu.parse` into a tidy table per arm and kernel; :mod:`kgate.gates.ncu`
makes the comparison and the gates.

Resume: a pass that measured leaves ``<arm>.<pass>.pass.json`` beside its
exports, holding what the record keeps of it and a key: sha256 over the ncu
command line, the request (worker settings, row, mode, warm-up calls), the
arm's commit, the ncu version and the GPU's UUID. A later run of the stage
(an interrupted one, or the next machine with the results restored) keeps a
pass whose key matches and whose CSV exports exist instead of profiling it
again, and says so (``resumed`` per pass, ``passes_resumed`` in the record);
any difference in those parts profiles it afresh. The ``.ncu-rep`` need not
survive: the stage reads the CSV exports.

Where ncu is missing, cannot read the counters (``ERR_NVGPUCTRPERM``; counters
restricted to admins) or there is no GPU (CPU), the record is ``unavailable``
with the reason and the commands that would have run: never GO.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.campaign import Campaign
from kgate.errors import ConfigError, KgateError, ProvenanceMismatch
from kgate.gates import ncu as ncu_gates
from kgate.measure import coordinator as measure
from kgate.measure.checkpoints import run_key
from kgate.measure.rows import MeasureSpec, Row
from kgate.ncu import parse as ncu_parse
from kgate.ncu.export import export_commands
from kgate.ncu.lookup import admin_only, find_ncu
from kgate.records import Gate, StageResult
from kgate.stages.common import PROFILE_SHARE, Context
from kgate.testrun.guard import guarded

#: flags kgate sets itself; a campaign's pass may not set them
OWN_FLAGS = ("--kernel-name", "-k", "--kernel-id", "--launch-skip", "-s", "--launch-count", "-c", "--export", "-o",
             "--profile-from-start", "--clock-control", "--log-file", "--target-processes", "--force-overwrite", "-f",
             "--cache-control", "--kernel-name-base")
COUNTER_BLOCKED = ("ERR_NVGPUCTRPERM",)


@dataclass(frozen=True, slots=True)
class Pass:
    """One ncu pass: a name (used in file names) and its section arguments."""

    name: str
    args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NcuSpec:
    """The campaign's ``ncu`` section, resolved."""

    rows: tuple[str, ...]
    baseline: str
    candidate: str
    mode: str | None  # ncu.mode; None follows bench.modes.gated (resolved by ``for_call``)
    warm_calls: int
    launch_count: int
    clock_control: str
    passes: tuple[Pass, ...]
    thresholds: ncu_gates.Thresholds

    def for_call(self, spec: MeasureSpec) -> NcuSpec:
        """This spec with its profiled call decided (``MeasureSpec.profiled_call`` of ``ncu.mode``)."""
        return replace(self, mode=spec.profiled_call(self.mode))

    def kernel_filter(self, removed: str | None) -> str:
        """The ncu ``--kernel-name regex:`` filter: the two sides and the removed kernels (if any)."""
        return "|".join(f"({p})" for p in dict.fromkeys((self.baseline, self.candidate, removed)) if p)

    def regexes(self, spec: MeasureSpec) -> ncu_gates.Regexes:
        base = measure.compile_regex(self.baseline, "ncu.kernels.baseline")
        cand = measure.compile_regex(self.candidate, "ncu.kernels.candidate")
        assert base is not None and cand is not None
        return ncu_gates.Regexes(base, cand, spec.removed_rx, spec.replacement_rx)


def load_spec(campaign: Campaign) -> NcuSpec | None:
    """The campaign's ncu settings, or None when it has no ``ncu`` section."""
    n = campaign.data.get("ncu")
    if not n:
        return None
    passes = tuple(Pass(p["name"], tuple(str(a) for a in p["args"])) for p in n["passes"])
    for p in passes:
        own = [a for a in p.args if a.split("=", 1)[0] in OWN_FLAGS]
        if own:
            raise ConfigError(f"{campaign.path}: key 'ncu.passes.{p.name}.args': {', '.join(own)} is set by kgate "
                              "(kernel filter, launch range, clock control, output)")
    g = n["gates"]
    spec = NcuSpec(rows=tuple(n["rows"]), baseline=n["kernels"]["baseline"], candidate=n["kernels"]["candidate"],
                   mode=n["mode"], warm_calls=int(n["warm_calls"]), launch_count=int(n["launch_count"]),
                   clock_control=n["clock_control"], passes=passes,
                   thresholds=ncu_gates.Thresholds(float(g["traffic_tolerance"]), float(g["spill_ratio_max"]),
                                                     float(g["occupancy_min_ratio"]),
                                                     None if g["work_tolerance"] is None else float(g["work_tolerance"])))
    measure.compile_regex(spec.baseline, "ncu.kernels.baseline")
    measure.compile_regex(spec.candidate, "ncu.kernels.candidate")
    return spec


def command(exe: str, p: Pass, spec: NcuSpec, kernel_filter: str, stem: Path, arm: str) -> list[str]:
    """The ncu command line of one pass for one arm and row (run in the arm's worktree).

    The filter sees demangled names (``--kernel-name-base demangled``), the names torch.profiler reports and
    the campaign's regexes are written against: ncu's default base (``function``) drops namespaces and
    template arguments, so a regex naming a functor (``BUnaryFunctor<.*MulFunctor``, torch's tensor-times-
    scalar kernel) would select nothing there. A Triton kernel's name is the same under either base."""
    return [exe, *p.args, "--kernel-name-base", "demangled", "--kernel-name", f"regex:{kernel_filter}",
            "--launch-skip", "0", "--launch-count", str(spec.launch_count), "--profile-from-start", "off",
            "--clock-control", spec.clock_control, "--cache-control", "all", "--target-processes", "all",
            "--export", str(stem), "--force-overwrite", "--log-file", f"{stem}.ncu.log",
            sys.executable, "-m", "kgate.ncu.target", "--arm", arm,
            "--request", f"{stem}.request.json", "--result", f"{stem}.result.json"]


def counters_blocked(text: str) -> str | None:
    """The line saying ncu may not read the GPU's counters, if there is one."""
    return next((ln.strip() for ln in text.splitlines() if any(m in ln for m in COUNTER_BLOCKED)), None)


def unavailable(reason: str, data: dict[str, Any], evidence: str | None = None) -> StageResult:
    """The record of a stage that could not read counters here: never GO."""
    gate = Gate("ncu_counters", "Nsight Compute reads the GPU's performance counters", "unavailable", "unavailable",
                evidence=evidence, detail=reason)
    return StageResult(gates=[gate], data={"available": False, "reason": reason, **data})


def planned(spec: MeasureSpec, nspec: NcuSpec, exe: str, out_dir: Path) -> dict[str, Any]:
    """What the stage runs, per row, arm and pass (recorded even when it cannot run)."""
    kf = nspec.kernel_filter(spec.removed)
    return {row: {arm: {p.name: command(exe, p, nspec, kf, out_dir / row / f"{arm}.{p.name}", arm)
                        for p in nspec.passes} for arm in ("base", "cand")} for row in nspec.rows}


# running one pass


PASS_SCHEMA = "kgate.stages.ncu-pass/1"


def pass_key(cmd: list[str], request: dict[str, Any], identity: dict[str, Any]) -> str:
    """What a kept pass must share with this one (module docstring: Resume), hashed by ``checkpoints.run_key``."""
    return run_key({"schema": PASS_SCHEMA, "command": cmd, "request": request, **identity})


def kept_pass(stem: Path, key: str) -> dict[str, Any] | None:
    """An earlier run's pass with this key whose exports still exist, marked resumed; else None."""
    saved = Path(f"{stem}.pass.json")
    if not saved.exists():
        return None
    old = json.loads(saved.read_text())
    run_ = old.get("run") or {}
    if old.get("schema") != PASS_SCHEMA or old.get("key") != key or not run_.get("exports"):
        return None
    if not all(Path(e["path"]).exists() for e in run_["exports"].values()):
        return None
    return {**run_, "resumed": True}


def run_pass(ctx: Context, spec: MeasureSpec, nspec: NcuSpec, exe: str, p: Pass, arm: str, worktree: Path,
             row: Row, deadline: measure.Deadline, telemetry: measure.Telemetry,
             identity: dict[str, Any]) -> dict[str, Any]:
    """One ncu process: profile, export the report to CSV, and return what happened (paths, result, launches,
    the GPU's clocks and compute processes just before and its clocks just after). A pass an earlier run
    measured under the same key (command, request and ``identity``: the arm's commit, ncu's version, the GPU)
    is kept instead."""
    cache = ctx.triton_cache
    stem = (ctx.out_dir / row.name / f"{arm}.{p.name}").resolve()
    stem.parent.mkdir(parents=True, exist_ok=True)
    request = {"init": spec.worker_init(), "row": row.values, "mode": nspec.mode, "warm_calls": nspec.warm_calls}
    cmd = command(exe, p, nspec, nspec.kernel_filter(spec.removed), stem, arm)
    key = pass_key(cmd, request, identity)
    if (kept := kept_pass(stem, key)) is not None:
        measure.progress(f"{row.name}: ncu pass {p.name} on arm {arm} kept from an earlier run (same key)")
        return kept
    for suffix in (".ncu-rep", ".result.json", ".ncu.log", ".raw.csv", ".details.csv", ".pass.json"):
        Path(f"{stem}{suffix}").unlink(missing_ok=True)
    Path(f"{stem}.request.json").write_text(json.dumps(request, indent=1) + "\n")
    log = Path(f"{stem}.log")
    measure.progress(f"{row.name}: ncu pass {p.name} on arm {arm}")
    before = {"clocks": telemetry.sample(), "compute_apps": telemetry.compute_apps()}
    t0 = time.monotonic()
    # a session of its own (a timeout kills the tree), guarded: it never outlives this stage (kgate.testrun.guard)
    with log.open("w") as fh, guarded(cmd, cwd=worktree, env=measure.worker_env(ctx, worktree, cache),
                                      stdin=subprocess.DEVNULL, stdout=fh, stderr=fh) as proc:
        try:
            rc = proc.wait(timeout=max(deadline.left(), 1.0))
        except subprocess.TimeoutExpired as exc:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise KgateError(f"ncu pass {p.name} on arm {arm}, row {row.name}: no end within the stage's time "
                             f"limit; see {log}") from exc
    ncu_log = Path(f"{stem}.ncu.log")
    text = (ncu_log.read_text(errors="replace") if ncu_log.exists() else "") + log.read_text(errors="replace")
    result_path = Path(f"{stem}.result.json")
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    out: dict[str, Any] = {"command": cmd, "cwd": str(worktree), "returncode": rc, "wall_s": time.monotonic() - t0,
                           "log": _rel(log), "ncu_log": _rel(ncu_log), "result": result,
                           "blocked": counters_blocked(text), "rep": None, "exports": {}, "launches": 0,
                           "telemetry": {"method": telemetry.method, "before": before,
                                         "after": {"clocks": telemetry.sample()}}}
    rep = Path(f"{stem}.ncu-rep")
    if rep.exists():
        out["rep"] = _rel(rep)
        for page, ecmd in export_commands(exe, rep).items():
            target = Path(f"{stem}.{page}.csv")
            with target.open("w") as fh:
                ep = subprocess.run(ecmd, stdout=fh, stderr=subprocess.PIPE, text=True, timeout=600)
            if ep.returncode != 0:
                raise KgateError(f"{' '.join(ecmd)} failed ({ep.stderr.strip()[-300:]}); see {rep}")
            out["exports"][page] = {"path": _rel(target), "command": ecmd}
        out["launches"] = len(ncu_parse.read_raw(Path(f"{stem}.raw.csv")))
    out["capped"] = out["launches"] >= nspec.launch_count
    out["resumed"] = False
    if rc == 0 and result is not None and result.get("ok") and out["exports"]:
        Path(f"{stem}.pass.json").write_text(json.dumps({"schema": PASS_SCHEMA, "key": key, "run": out}, indent=1)
                                             + "\n")
    return out


def _rel(path: Path) -> str:
    """A path as records keep it: relative to the workdir when it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _tail(path: str, n: int = 6) -> str:
    try:
        lines = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " | ".join(lines[-n:]) or "empty log"


def check_result(run: dict[str, Any], arm: str, worktree: Path, p: Pass, row: Row) -> str | None:
    """None when the pass measured; the candidate's own failure as text (a measured failure); else raise."""
    res = run["result"]
    where = f"ncu pass {p.name}, arm {arm}, row {row.name}"
    if res is None or (res["ok"] is False and res.get("kind") != "target"):
        why = res["error"] if res else f"ncu exited {run['returncode']} without a result ({_tail(run['ncu_log'])})"
        raise KgateError(f"{where}: {why}; see {run['log']}")
    if not res["ok"]:
        if arm == "cand":
            return f"{where}: {res['error']}"
        raise KgateError(f"{where}: the baseline failed: {res['error']}; see {run['log']}")
    root = str(worktree.resolve())
    for what in ("module_file", "package_file"):
        got = res["info"].get(what)
        if got and not str(Path(got).resolve()).startswith(root + os.sep):
            raise ProvenanceMismatch(f"{where}: {what} {got} is not inside the worktree {root}")
    if run["returncode"] != 0:
        raise KgateError(f"{where}: ncu exited {run['returncode']} ({_tail(run['ncu_log'])}); see {run['ncu_log']}")
    return None


def tidy(runs: dict[str, dict[str, Any]], mm_for: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The arm's kernel table from every pass's exports (first pass first), and the capability they name."""
    exports = []
    for run in runs.values():
        if run["exports"]:
            exports.append(ncu_parse.read_raw(Path(run["exports"]["raw"]["path"])))
            exports.append(ncu_parse.read_details(Path(run["exports"]["details"]["path"])))
    launches = ncu_parse.merge(*exports)
    cc = ncu_parse.capability(launches)
    return ncu_parse.kernel_table(launches, mm_for(cc)), cc


# the stage


def analyse_row(entry: dict[str, Any], row: Row, spec: MeasureSpec, nspec: NcuSpec, mm_for: Any) -> dict[str, Any]:
    """A row both arms profiled: equal inputs, each arm's kernel table, and the comparison (added to ``entry``)."""
    hashes = {f"{arm}/{p}": {"sha256": r["result"]["inputs"]["sha256"]}
              for arm, passes in entry["passes"].items() for p, r in passes.items()}
    measure.compare_hashes("input", row.name, hashes)
    tables = {arm: tidy(entry["passes"][arm], mm_for) for arm in ("base", "cand")}
    entry["capability"] = tables["base"][1] or tables["cand"][1]
    entry["kernels"] = {arm: tables[arm][0] for arm in tables}
    rx = nspec.regexes(spec)
    if not any(rx.baseline.search(k["kernel"]) for k in entry["kernels"]["base"]):
        seen = ", ".join(k["kernel"] for k in entry["kernels"]["base"]) or "none"
        raise KgateError(f"row {row.name}: ncu profiled no baseline kernel matching ncu.kernels.baseline "
                         f"'{nspec.baseline}' (profiled: {seen}); fix the campaign's regex")
    expected = ncu_gates.expected_traffic([(spec.temporary_bytes(row, t), t.accesses) for t in spec.temporaries])
    entry["comparison"] = ncu_gates.compare_row(row.name, entry["kernels"]["base"], entry["kernels"]["cand"], rx,
                                                  mm_for(entry["capability"]), expected)
    return entry


def census_hidden(pc: dict[str, Any] | None, rows: tuple[str, ...], spec: MeasureSpec) -> tuple[list[str] | None, str]:
    """Hidden kernels from profile_candidate's unfiltered census: of the ncu rows it profiled, else of all its rows."""
    data = (pc or {}).get("data") or {}
    profiled = [r for r in data.get("rows") or [] if "new_kernels" in r]
    if not profiled:
        return None, "profile_candidate recorded no kernel census"
    mine = [r for r in profiled if r["row"] in rows]
    rep = spec.replacement_rx
    if mine:
        hidden = sorted({k for r in mine for k in r["new_kernels"] if rep is None or not rep.search(k)})
        return hidden, f"profile_candidate census of {', '.join(r['row'] for r in mine)}"
    return sorted(data.get("hidden_kernels") or []), \
        f"profile_candidate census of its rows {', '.join(r['row'] for r in profiled)} (no ncu row among them)"


def run(ctx: Context) -> StageResult:
    c, gpu, cid = ctx.campaign, ctx.gpu, ctx.candidate
    spec = measure.load_spec(c, gpu)
    nspec = load_spec(c)
    if spec is None or nspec is None:
        missing = "measure" if spec is None else "ncu"
        return unavailable(f"the campaign has no '{missing}' section: nothing to profile", {"candidate": cid})
    nspec = nspec.for_call(spec)
    exe = find_ncu()
    plan = planned(spec, nspec, exe or "ncu", ctx.out_dir)
    base_data = {"candidate": cid, "rows_planned": list(nspec.rows), "commands_planned": plan,
                 "kernel_filter": nspec.kernel_filter(spec.removed), "clock_control": nspec.clock_control}
    if gpu == "cpu":
        return unavailable("no GPU: Nsight Compute reads a GPU's hardware counters; a CPU run (Triton interpreter) "
                           "has none", base_data)
    if exe is None:
        return unavailable("ncu (Nsight Compute) not found: not on PATH, in /usr/local/cuda/bin or /opt/nvidia, "
                           "and KGATE_NCU is not set", base_data)
    if admin_only():
        return unavailable("ERR_NVGPUCTRPERM: the driver restricts GPU performance counters to admins "
                           "(RmProfilingAdminOnly=1) and kgate does not run as root", base_data)
    lines = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
    version = lines[-1].strip() if lines else "unknown"
    fx, pb, build = ctx.inputs["fixture_freeze"], ctx.inputs["profile_baseline"], ctx.inputs["candidate_build"]
    rows = spec.select(measure.table_from_record(pb), list(nspec.rows), "ncu.rows")
    wt_base, wt_cand = ctx.timed_worktrees()
    worktrees = {"base": wt_base, "cand": wt_cand}
    deadline = measure.Deadline(ctx.deadline_s(PROFILE_SHARE))
    telemetry = measure.Telemetry(ctx.device.get("uuid"), cpu=False)
    evidence = str(paths.record(c.name, gpu, "ncu", cid))
    maps: dict[str | None, ncu_parse.MetricMap] = {}

    def mm_for(cc: str | None) -> ncu_parse.MetricMap:
        return maps.setdefault(cc, ncu_parse.load_map(cc))

    ncu_info = {"path": exe, "version": version}
    shas = {"base": fx["data"]["bench_base"], "cand": build["data"]["candidate_sha"]}
    measured: list[dict[str, Any]] = []
    devices: dict[str, Any] = {}
    for i, row in enumerate(rows):
        entry: dict[str, Any] = {"row": row.name, "kind": row.kind, "passes": {},
                                 "class": row.klass(spec.class_key) if spec.class_key else spec.row_class(row)}
        for arm in (("base", "cand") if i % 2 == 0 else ("cand", "base")):
            entry["passes"][arm] = {}
            for p in nspec.passes:
                run_ = run_pass(ctx, spec, nspec, exe, p, arm, worktrees[arm], row, deadline, telemetry,
                                identity={"commit": shas[arm], "ncu": version, "device": ctx.device.get("uuid")})
                entry["passes"][arm][p.name] = run_
                so_far = {**base_data, "ncu": ncu_info, "rows": [*measured, entry]}
                if run_["blocked"]:
                    return unavailable(f"ncu cannot read the GPU's counters: {run_['blocked']}", so_far,
                                       evidence=run_["ncu_log"])
                failure = check_result(run_, arm, worktrees[arm], p, row)
                if failure:
                    return StageResult(gates=[Gate("ncu_candidate_runs", "the candidate runs every row under ncu",
                                                   f"failed at {row.name}", "fail", evidence=run_["log"],
                                                   detail=failure)], data={**so_far, "available": True})
                devices[f"{row.name}/{arm}/{p.name}"] = run_["result"]["info"]["device"]
        measured.append(analyse_row(entry, row, spec, nspec, mm_for))
    uuids = {d.get("uuid") for d in devices.values()}
    if len(uuids) != 1:
        raise ProvenanceMismatch(f"ncu passes ran on different devices: {devices}")
    hidden, source = census_hidden(ctx.inputs.get("profile_candidate"), nspec.rows, spec)
    capped = [f"{e['row']}/{a}/{p}" for e in measured for a, ps in e["passes"].items() for p, r in ps.items()
              if r["capped"]]
    gates = [Gate("ncu_counters", "Nsight Compute reads the GPU's performance counters",
                  f"{sum(len(ps) for e in measured for ps in e['passes'].values())} profiles", "pass",
                  evidence=evidence),
             *ncu_gates.gates([e["comparison"] for e in measured], nspec.thresholds, hidden, source, capped,
                                nspec.launch_count, evidence)]
    mm = mm_for(measured[0]["capability"]) if measured else mm_for(None)
    data = {**base_data, "available": True, "ncu": ncu_info, "device": next(iter(devices.values())),
            "mode": nspec.mode, "warm_calls": nspec.warm_calls, "launch_count": nspec.launch_count,
            "passes": {p.name: list(p.args) for p in nspec.passes}, "candidate_sha": build["data"]["candidate_sha"],
            "bench_base": fx["data"]["bench_base"], "thresholds": asdict(nspec.thresholds),
            "metric_map": {"file": str(ncu_parse.METRIC_MAP.relative_to(ncu_parse.METRIC_MAP.parents[2])),
                           "sha256": mm.sha256, "architecture": mm.architecture, "verified": mm.verified},
            "census": {"hidden": hidden, "source": source}, "rows": measured,
            "passes_resumed": sum(bool(r.get("resumed")) for e in measured for ps in e["passes"].values()
                                  for r in ps.values())}
    return StageResult(gates=gates, data=data)

