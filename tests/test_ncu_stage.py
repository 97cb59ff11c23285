"""The ncu stage without a GPU: its command lines, the CPU record, and its plumbing against a stand-in ncu.

The stand-in (``FAKE_NCU`` below) is not Nsight Compute: it answers the
stage's ncu calls the way ncu does (a report file, a log file, CSV exports on
``--import``) and serves the real H200 exports of tests/data/ncu/ as every
report's content, so the stage's own code (commands, exports, parsing,
comparison, gates, record, report) runs for real. The profiled process it
would start needs a GPU and is not run; the stand-in writes its result file.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from kgate import campaign, protocol, report, verdict
from kgate.errors import ConfigError, KgateError
from kgate.measure import rows as measure
from kgate.ncu import export as ncu_export
from kgate.ncu import parse as ncu_parse
from kgate.records import build_record
from kgate.stages import common, ncu
from kgate.stages.common import Context

DATA = REPO / "tests" / "data" / "ncu"
STEM = DATA / "chunk_rwkv6_bwd_B4_T2048_H16_D128"
CAMPAIGN = "rwkv6-bwd-fusion"
CID = "0123456789ab"
ROWS = ("B4_T2048_H16_D128", "B8_T2048_H32_D256", "varlen_D128")

FAKE_NCU = '''
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
data = Path(os.environ["FAKE_NCU_DATA"])
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (stand-in for tests)")
    sys.exit(0)
if "--import" in args:
    rep = json.loads(Path(args[args.index("--import") + 1]).read_text())
    sys.stdout.write(Path(rep[args[args.index("--page") + 1]]).read_text())
    sys.exit(0)
stem, log = args[args.index("--export") + 1], args[args.index("--log-file") + 1]
with open(os.environ["FAKE_NCU_CALLS"], "a") as fh:
    request = json.loads(Path(args[args.index("--request") + 1]).read_text())
    fh.write(json.dumps({"argv": args, "cwd": os.getcwd(), "mode": request["mode"]}) + "\\n")
if int(os.environ.get("FAKE_NCU_DIE_AFTER", "0") or 0) and \\
        len(Path(os.environ["FAKE_NCU_CALLS"]).read_text().splitlines()) > int(os.environ["FAKE_NCU_DIE_AFTER"]):
    sys.exit(137)  # killed mid-profile: no report, no result
if os.environ.get("FAKE_NCU_MODE") == "blocked":
    Path(log).write_text("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                         "Performance Counters on the target device 0.\\n")
    sys.exit(1)
arm, name = Path(stem).name.split(".")
Path(log).write_text("==PROF== Connected to process\\n")
Path(stem + ".ncu-rep").write_text(json.dumps({p: str(data / f"{arm}.{name}.{p}.csv") for p in ("raw", "details")}))
result = args[args.index("--result") + 1]
out = {"ok": True, "inputs": {"sha256": "same-inputs"}, "warm": {}, "range": {},
       "info": {"module_file": os.getcwd() + "/fla/__init__.py", "device": {"uuid": "GPU-standin", "name": "stand-in"}}}
if os.environ.get("FAKE_NCU_MODE") == "cand_fails" and arm == "cand":
    out.update(ok=False, kind="target", error="row B4 fwdbwd: RuntimeError: CUDA error: an illegal memory access")
Path(result).write_text(json.dumps(out))
'''


def identity_only_raw(source: Path) -> str:
    """A raw page with only the identity columns of ``source``'s launches (the source pass's raw page stand-in)."""
    rows = list(csv.reader(io.StringIO(source.read_text())))
    keep = len(ncu_parse.IDENTITY)
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([r[:keep] for r in rows])
    return out.getvalue()


class StandInTelemetry:
    """What kgate.measure.telemetry.Telemetry answers, without a GPU."""

    def __init__(self, uuid: str | None, cpu: bool) -> None:
        self.method = "stand-in"

    def sample(self) -> dict:
        return {"sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0}

    def compute_apps(self) -> list:
        return []


@pytest.fixture(name="standin")
def _standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A workdir with worktrees and input records, and a stand-in ncu serving the real exports for both arms."""
    monkeypatch.chdir(tmp_path)
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir()
    exe.write_text(f"#!{sys.executable}\n" + FAKE_NCU)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    data = tmp_path / "exports"
    data.mkdir()
    for arm in ("base", "cand"):
        shutil.copyfile(f"{STEM}.full.raw.csv", data / f"{arm}.full.raw.csv")
        shutil.copyfile(f"{STEM}.full.details.csv", data / f"{arm}.full.details.csv")
        (data / f"{arm}.source.raw.csv").write_text(identity_only_raw(Path(f"{STEM}.full.raw.csv")))
        shutil.copyfile(f"{STEM}.source.details.csv", data / f"{arm}.source.details.csv")
    monkeypatch.setenv("KGATE_NCU", str(exe))
    monkeypatch.setenv("FAKE_NCU_DATA", str(data))
    monkeypatch.setenv("FAKE_NCU_CALLS", str(tmp_path / "calls.jsonl"))
    monkeypatch.delenv("FAKE_NCU_MODE", raising=False)
    monkeypatch.setattr(common, "verify_worktree", lambda *args: None)
    monkeypatch.setattr(common, "verify_frozen", lambda wt, manifest: None)
    monkeypatch.setattr(ncu, "admin_only", lambda: False)
    monkeypatch.setattr(ncu.measure, "Telemetry", StandInTelemetry)
    for arm in ("bench_base", f"cand-{CID}"):
        (tmp_path / "work" / CAMPAIGN / "h200" / "wt" / arm).mkdir(parents=True)
    return tmp_path, data


def context(gpu: str = "h200", path: Path | None = None) -> Context:
    camp = campaign.load(path or CAMPAIGN)
    spec = measure.load_spec(camp, "h200")
    inputs = {"fixture_freeze": {"data": {"bench_base": "a" * 40, "manifest": {}}},
              "profile_baseline": {"data": {"row_table": [r.as_dict() for r in spec.explicit_rows]}},
              "candidate_build": {"data": {"candidate_sha": "b" * 40}},
              "profile_candidate": {"data": {"rows": [{"row": ROWS[0], "new_kernels": []}], "hidden_kernels": []}}}
    args = argparse.Namespace(stage="ncu", runtime_min=10.0, test_timeout_s=900, workers=1, force=False)
    return Context(campaign=camp, gpu=gpu, candidate=CID, args=args, device={}, inputs=inputs)


def record_of(result, gpu: str = "h200") -> dict:
    return build_record(stage="ncu", campaign=CAMPAIGN, gpu=gpu, candidate=CID, result=result,
                        provenance={"cwd": os.getcwd()})


def test_the_commands_are_the_protocols_passes_with_kgates_range_and_filter() -> None:
    nspec = ncu.load_spec(campaign.load(CAMPAIGN))
    spec = measure.load_spec(campaign.load(CAMPAIGN), "h200")
    assert nspec.rows == ROWS
    kf = nspec.kernel_filter(spec.removed)
    cmds = {p.name: ncu.command("ncu", p, nspec, kf, Path("/r/B4/base.full"), "base") for p in nspec.passes}
    full, source = cmds["full"], cmds["source"]
    assert full[1:7] == ["--set", "full", "--section", "PmSampling", "--section", "PmSampling_WarpStates"]
    assert source[1:5] == ["--set", "source", "--section", "SourceCounters"]
    for cmd in cmds.values():
        text = " ".join(cmd)
        for flag in ("--kernel-name-base demangled", "--profile-from-start off", "--clock-control none",
                     "--launch-skip 0", "--launch-count 16",
                     "--cache-control all", "--export /r/B4/base.full", "--log-file /r/B4/base.full.ncu.log"):
            assert flag in text, flag
        assert cmd[cmd.index("--kernel-name") + 1] == f"regex:{kf}"
        assert cmd[-9:-6] == [sys.executable, "-m", "kgate.ncu.target"]
    rx = re.compile(kf)
    assert all(rx.search(k) for k in ("chunk_rwkv6_bwd_kernel_intra", "chunk_rwkv6_bwd_kernel_inter",
                                      "chunk_rwkv6_bwd_kernel_fused"))
    assert not rx.search("chunk_rwkv6_bwd_kernel_dh") and not rx.search("kgate_l2_flush")


def test_a_pass_may_not_set_what_kgate_sets(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "config" / "campaigns" / f"{CAMPAIGN}.yaml").read_text())
    data["ncu"]["passes"][0]["args"] += ["--launch-count", "1"]
    path = tmp_path / f"{CAMPAIGN}.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"key 'ncu.passes.full.args': --launch-count is set by kgate"):
        ncu.load_spec(campaign.load(path))


def test_on_cpu_the_stage_records_unavailable_with_the_commands_it_would_run() -> None:
    """No GPU: status unavailable, the reason, and the 12 planned ncu commands; the verdict stays SMOKE."""
    result = ncu.run(context("cpu"))
    assert result.status == "unavailable"
    gate = result.gates[0]
    assert gate.name == "ncu_counters" and gate.status == "unavailable" and "no GPU" in gate.detail
    planned = result.data["commands_planned"]
    assert list(planned) == list(ROWS) and all(set(planned[r]) == {"base", "cand"} for r in ROWS)
    assert sum(len(p) for r in planned.values() for p in r.values()) == 12
    rec = record_of(result, "cpu")
    others = [build_record(stage=s, campaign=CAMPAIGN, gpu="cpu", candidate=CID, result=_passing(), provenance={})
              for s in ("target", "baseline_tests", "fixture_freeze", "profile_baseline", "candidate_build",
                        "candidate_gate", "profile_candidate", "bench")]
    v = verdict.compute(others + [rec], campaign=CAMPAIGN, gpu="cpu", candidate=CID)
    assert v["verdict"] == "SMOKE" and "ncu: unavailable on CPU" in v["sentence"]
    assert {s["stage"]: s["status"] for s in v["stages"]}["ncu"] == "unavailable"


def test_unavailable_on_a_gpu_is_inconclusive_never_go() -> None:
    result = ncu.unavailable("ncu cannot read the GPU's counters: ERR_NVGPUCTRPERM", {})
    others = [build_record(stage=s, campaign=CAMPAIGN, gpu="h200", candidate=CID, result=_passing(), provenance={})
              for s in protocol.STAGES if s not in ("ncu", "model")]
    v = verdict.compute(others + [record_of(result)], campaign=CAMPAIGN, gpu="h200", candidate=CID)
    assert v["verdict"] == "INCONCLUSIVE" and v["decided_by"] == {"stage": "ncu", "gate": "ncu_counters"}
    assert "ERR_NVGPUCTRPERM" in record_of(result)["reasons"][0]


def _passing():
    from kgate.records import Gate, StageResult
    return StageResult(gates=[Gate("g", "holds", "ok", "pass")])


def test_counters_the_driver_withholds_make_the_stage_unavailable(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    """ERR_NVGPUCTRPERM in ncu's log: unavailable with the line, after the first process."""
    monkeypatch.setenv("FAKE_NCU_MODE", "blocked")
    result = ncu.run(context())
    assert result.status == "unavailable"
    assert "ERR_NVGPUCTRPERM" in result.gates[0].detail and result.gates[0].evidence.endswith(".ncu.log")
    calls = (standin[0] / "calls.jsonl").read_text().splitlines()
    assert len(calls) == 1


def test_a_candidate_that_crashes_under_ncu_is_a_measured_failure(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "cand_fails")
    result = ncu.run(context())
    assert result.status == "fail"
    gate = result.gates[0]
    assert gate.name == "ncu_candidate_runs" and "illegal memory access" in gate.detail and "arm cand" in gate.detail


def test_a_baseline_kernel_regex_that_matches_nothing_is_an_error(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    """The campaign's ncu.kernels.baseline must match a kernel the baseline launched: otherwise kgate cannot measure."""
    real = ncu.load_spec

    def wrong(c):
        spec = real(c)
        return ncu.NcuSpec(**{**{f: getattr(spec, f) for f in spec.__slots__}, "baseline": "^no_such_kernel$"})

    monkeypatch.setattr(ncu, "load_spec", wrong)
    with pytest.raises(KgateError, match=r"no baseline kernel matching ncu.kernels.baseline '\^no_such_kernel\$' "
                                         r"\(profiled: chunk_rwkv6_bwd_kernel_intra, chunk_rwkv6_bwd_kernel_inter\)"):
        ncu.run(context())


def test_a_missing_ncu_is_unavailable(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGATE_NCU", "")
    monkeypatch.setattr("kgate.stages.ncu.find_ncu", lambda: None)
    result = ncu.run(context())
    assert result.status == "unavailable" and "ncu (Nsight Compute) not found" in result.gates[0].detail


def test_the_stage_profiles_parses_and_compares_an_aa_run(standin) -> None:
    """Both arms serve the real baseline export (an A/A run): every row, arm and pass runs once in its
    worktree, the exports are parsed, and the comparison shows no mechanism (the removed launch stays)."""
    tmp, _ = standin
    result = ncu.run(context())
    calls = [json.loads(line) for line in (tmp / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 12
    assert {Path(c["cwd"]).name for c in calls} == {"bench_base", f"cand-{CID}"}
    by = {g.name: g for g in result.gates}
    assert by["ncu_counters"].status == "pass" and by["ncu_counters"].value == "12 profiles"
    assert by["ncu_removed_launch"].status == "fail" and by["ncu_fp32_traffic_removed"].status == "fail"
    assert by["ncu_no_hidden_kernels"].status == "pass" and ROWS[0] in by["ncu_no_hidden_kernels"].value
    assert by["ncu_profiled_every_launch"].status == "pass"
    assert result.status == "fail"
    data = result.data
    assert data["available"] is True and "stand-in" in data["ncu"]["version"]
    assert data["metric_map"]["architecture"].startswith("Hopper")
    assert data["metric_map"]["file"] == "kgate/data/ncu_metrics.yaml"
    row = data["rows"][0]
    assert row["capability"] == "9.0" and set(row["passes"]) == {"base", "cand"}
    run = row["passes"]["base"]["full"]
    assert run["rep"].startswith(f"results/{CAMPAIGN}/h200/ncu/{CID}/{ROWS[0]}/base.full")
    assert Path(run["exports"]["raw"]["path"]).exists() and run["launches"] == 2
    assert run["telemetry"]["before"]["clocks"]["sm_clock_mhz"] == 1980.0 and run["telemetry"]["before"]["compute_apps"] == []
    kernels = {k["kernel"]: k for k in row["kernels"]["base"]}
    assert kernels["chunk_rwkv6_bwd_kernel_inter"]["branch_efficiency_pct"] == pytest.approx(88.89)
    assert row["comparison"]["removed_launches"] == {"base": 1, "cand": 1}
    json.dumps(data)


def test_an_interrupted_stage_keeps_the_passes_it_measured(standin, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in dies at its 6th profile (a job cut off): an error, five passes kept on disk. The next run
    profiles only the seven left and records five passes as resumed; a different candidate commit (or ncu,
    or GPU) profiles everything afresh."""
    tmp, _ = standin
    calls = tmp / "calls.jsonl"
    monkeypatch.setenv("FAKE_NCU_DIE_AFTER", "5")
    with pytest.raises(KgateError, match="without a result"):
        ncu.run(context())
    assert len(calls.read_text().splitlines()) == 6
    monkeypatch.delenv("FAKE_NCU_DIE_AFTER")
    result = ncu.run(context())
    assert len(calls.read_text().splitlines()) == 6 + 7
    assert result.data["passes_resumed"] == 5 and result.gates[0].value == "12 profiles"
    kept = [r for e in result.data["rows"] for ps in e["passes"].values() for r in ps.values() if r["resumed"]]
    assert len(kept) == 5 and all(Path(r["exports"]["raw"]["path"]).exists() for r in kept)
    again = ncu.run(context())
    assert len(calls.read_text().splitlines()) == 13 and again.data["passes_resumed"] == 12
    assert [g.status for g in again.gates] == [g.status for g in result.gates]
    ctx = context()
    ctx.inputs["candidate_build"]["data"]["candidate_sha"] = "c" * 40
    fresh = ncu.run(ctx)
    # only the candidate arm's passes depend on its commit
    assert len(calls.read_text().splitlines()) == 13 + 6 and fresh.data["passes_resumed"] == 6


def test_the_report_shows_the_comparison_escaped(standin) -> None:
    """The ncu section: the comparison table per row, every run-derived string escaped."""
    tmp, _ = standin
    result = ncu.run(context())
    rec = record_of(result)
    rec["data"]["rows"][0]["comparison"]["baseline_kernels"] = ["<script>alert(1)</script>"]
    v = verdict.compute([rec], campaign=CAMPAIGN, gpu="h200", candidate=CID)
    v["hypothesis"] = "h"
    out = tmp / "reports" / CAMPAIGN / "h200"
    report.render(v, [rec], out, devices=())
    html = (out / "index.html").read_text()
    assert "Nsight Compute: removed baseline kernels (summed) vs the candidate" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "global_store_bytes" in html and "885.8 µs" in html and "long_scoreboard" in html
    assert "tensor ops tf32_dst_fp32" in html and "ncu_removed_launch" in html
    cpu = record_of(ncu.run(context("cpu")), "cpu")
    vc = verdict.compute([cpu], campaign=CAMPAIGN, gpu="cpu", candidate=CID)
    vc["hypothesis"] = "h"
    report.render(vc, [cpu], tmp / "reports" / CAMPAIGN / "cpu", devices=())
    html = (tmp / "reports" / CAMPAIGN / "cpu" / "index.html").read_text()
    assert "Not measured:" in html and "12 ncu commands this stage runs on a GPU" in html


def test_ncu_export_writes_the_stages_csvs_for_tests_data(standin) -> None:
    """`python -m kgate ncu-export`: every profile's CSVs by row, arm and pass, with their provenance."""
    tmp, _ = standin
    result = ncu.run(context())
    rec_path = tmp / "results" / CAMPAIGN / "h200" / "ncu" / CID / "record.json"
    rec_path.parent.mkdir(parents=True, exist_ok=True)
    rec_path.write_text(json.dumps(record_of(result)))
    out = tmp / "exported"
    from kgate.cli import main
    assert main(["ncu-export", CAMPAIGN, "--gpu", "h200", "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 3 * 2 * 2 * 2 + 1 and "PROVENANCE.json" in names
    assert f"{ROWS[0]}.cand.source.details.csv" in names
    prov = json.loads((out / "PROVENANCE.json").read_text())
    assert prov["candidate"] == CID and len(prov["profiles"]) == 12 and prov["kernel_filter"]
    again = ncu_parse.read_raw(out / f"{ROWS[2]}.base.full.raw.csv")
    assert {la.kernel for la in again} == {"chunk_rwkv6_bwd_kernel_intra", "chunk_rwkv6_bwd_kernel_inter"}
    assert main(["ncu-export", CAMPAIGN, "--gpu", "h200", "--out", str(tmp / "again"), "--reexport"]) == 0
    assert (tmp / "again" / f"{ROWS[0]}.base.full.raw.csv").read_text() == (out / f"{ROWS[0]}.base.full.raw.csv").read_text()
    cpu_rec = record_of(ncu.run(context("cpu")), "cpu")
    with pytest.raises(KgateError, match="nothing to export"):
        ncu_export.export(cpu_rec, tmp, tmp / "none")


def test_the_profiled_process_reports_a_target_failure_as_the_arms_own(tmp_path: Path) -> None:
    """`python -m kgate.ncu.target` (what ncu runs): an arm whose callable does not import writes a `target`
    failure to its result file and exits 0; the stage reads it (a candidate's failure is data)."""
    request = {"init": {"callable": "no_such_module_kgate:fn", "inputs_file": str(
        REPO / "kernels" / "rwkv6_bwd_fused" / "bench_inputs.py"), "dtype": "float32", "seed": 0, "differentiate": [0],
        "cpu": False, "cpu_setup": None, "flush_bytes": None, "env_record": []}, "row": {"name": "r"}, "mode": "fwdbwd",
        "warm_calls": 1}
    (tmp_path / "r.request.json").write_text(json.dumps(request))
    proc = subprocess.run([sys.executable, "-m", "kgate.ncu.target", "--arm", "cand", "--request", "r.request.json",
                           "--result", "r.result.json"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr[-2000:]
    out = json.loads((tmp_path / "r.result.json").read_text())
    assert out["ok"] is False and out["kind"] == "target" and "no_such_module_kgate" in out["error"]


def test_the_workflow_runs_ncu_after_bench_and_a_cpu_run_stays_smoke(tmp_path: Path) -> None:
    """Snakemake: with every earlier stage's record passing (written here, nothing measured), the ncu
    checkpoint runs after bench, records unavailable on CPU, and the report says SMOKE."""
    from conftest import Workflow, candidate_id

    from kgate import paths
    from kgate.records import Gate, StageResult, write_json

    cid = candidate_id(CAMPAIGN)
    prov = {"host": "h", "started_utc": "2026-01-01T00:00:00Z", "finished_utc": "2026-01-01T00:00:01Z", "wall_s": 1.0,
            "device": {"class": "cpu", "name": "cpu", "interpreter": True}}
    # "doctor": the workflow's preflight record, which the first stage takes as input; "model" gates on bench,
    # not on ncu, so the walk asks for it after ncu's unavailable record (here it is written, nothing trained)
    for stage in ("doctor", *protocol.STAGES[:protocol.STAGES.index("ncu")], "model"):
        cand = cid if stage in protocol.CANDIDATE_STAGES else None
        rec = build_record(stage=stage, campaign=CAMPAIGN, gpu="cpu", candidate=cand, provenance=prov,
                           result=StageResult(gates=[Gate(f"{stage}_ok", "holds", "ok", "pass")]))
        write_json(tmp_path / paths.record(CAMPAIGN, "cpu", stage, cand), rec)
    wf = Workflow(tmp_path)
    proc = wf.run("gpu=cpu", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = wf.record(CAMPAIGN, "ncu", cid)
    assert rec["status"] == "unavailable" and "no GPU" in rec["reasons"][0]
    assert "ncu" in rec["provenance"]["command"] and rec["candidate"] == cid
    v = wf.verdict(CAMPAIGN)
    assert v["verdict"] == "SMOKE"
    stages = {s["stage"]: s["status"] for s in v["stages"]}
    assert stages["bench"] == "pass" and stages["ncu"] == "unavailable" and stages["model"] == "pass"


@pytest.mark.parametrize("ncu_mode, gated, profiled", [(None, "fwd", "fwd"), (None, "fwdbwd", "fwdbwd"),
                                                         ("fwdbwd", "fwd", "fwdbwd")])
def test_the_profiled_call_follows_the_gated_one_unless_ncu_mode_names_one(standin, ncu_mode, gated, profiled) -> None:
    """ncu.mode unset profiles bench.modes.gated's call (a forward-only bar is explained by the forward's kernels,
    not by a backward bench never times); a value set on purpose is kept. Every profile's request says so, and
    the record states the call profiled."""
    tmp, _ = standin
    data = yaml.safe_load((REPO / "config" / "campaigns" / f"{CAMPAIGN}.yaml").read_text())
    data["ncu"].pop("mode", None)
    if ncu_mode:
        data["ncu"]["mode"] = ncu_mode
    data["bench"]["modes"]["gated"] = gated
    path = tmp / f"{CAMPAIGN}.yaml"
    path.write_text(yaml.safe_dump(data))
    result = ncu.run(context(path=path))
    calls = [json.loads(line) for line in (tmp / "calls.jsonl").read_text().splitlines()]
    assert len(calls) == 12 and {c["mode"] for c in calls} == {profiled}
    assert result.data["mode"] == profiled


def test_the_filter_selects_torch_kernels_by_the_names_the_profiler_reported() -> None:
    """The TVD replay removes torch's tensor-times-scalar kernel, named in the campaign by its functor. Its name in
    the real H200 profile_baseline record (torch.profiler's demangled name) matches the ncu filter, which ncu
    applies to demangled names (the command's --kernel-name-base); the name without namespaces, template
    arguments and parameters (what ncu's default base would give) matches nothing, so with that base the
    removed kernel would never be profiled and its traffic never seen."""
    tvd = campaign.load("liger-tvd-fused-scale-1127")
    spec, nspec = measure.load_spec(tvd, "h200"), ncu.load_spec(tvd)
    kf = re.compile(nspec.kernel_filter(spec.removed))
    record = json.loads((REPO / "tests" / "data" / "records" / "h200_tvd_incomplete" / "profile_baseline.json")
                        .read_text())
    names = {k["kernel"] for r in record["data"]["rows"] for k in r["kernels"]}
    removed = sorted(n for n in names if spec.removed_rx.search(n))
    assert removed and all(n.startswith("void at::native::") for n in removed)
    assert all(kf.search(n) for n in removed)
    assert not any(kf.search(re.sub(r"<.*", "", n).split("::")[-1]) for n in removed)
    assert kf.search("_tv_distance_kernel")
    cmd = ncu.command("ncu", nspec.passes[0], nspec, kf.pattern, Path("/r/x/base.full"), "base")
    assert cmd[cmd.index("--kernel-name-base") + 1] == "demangled"
    for export in ncu_export.export_commands("ncu", Path("/r/x/base.full.ncu-rep")).values():
        assert export[export.index("--print-kernel-base") + 1] == "demangled"
