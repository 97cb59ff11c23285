"""``python -m kgate doctor``: unit tests with canned command output, the preflight as the
DAG's first rule (local executor), then the real local cluster (scripts/slurm-local.sh
start) where one answers. The preflight through Slurm: tests/test_campaign_slurm.py."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import Workflow, ran_rules

from kgate.device import Device
from kgate.records import read_record
from kgate.site import cluster, common, files, node
from kgate.site.common import Check, Proc, Site
from kgate.slurm import slurm_provenance
from kgate.stages import doctor

REPO = Path(__file__).resolve().parent.parent


def fake(answers: dict[tuple[str, ...], Proc]):
    """A Runner answering by command prefix; anything else is 'not found'."""
    calls: list[list[str]] = []

    def run(cmd, timeout):
        calls.append(list(cmd))
        for prefix, proc in answers.items():
            if tuple(cmd[: len(prefix)]) == prefix:
                return proc
        return Proc(127, "", f"{cmd[0]}: command not found")

    run.calls = calls  # type: ignore[attr-defined]
    return run


def ok(out: str) -> Proc:
    return Proc(0, out, "")




def test_missing_partition_names_it_and_lists_known_ones():
    run = fake({("sinfo", "-h", "-p"): ok(""), ("sinfo", "-h", "-o", "%P"): ok("debug*\ngpu\n")})
    c = cluster.check_partition("nope", run, slurm=True)
    assert c == Check("slurm_partition", "fail", "partition 'nope' does not exist (partitions here: debug, gpu)")


def test_partition_down_or_without_usable_nodes():
    run = fake({("sinfo", "-h", "-p"): ok("gpu|down|4|idle\n")})
    assert "is not up" in cluster.check_partition("gpu", run, slurm=True).message
    run = fake({("sinfo", "-h", "-p"): ok("gpu|up|3|drained\ngpu|up|1|down*\n")})
    c = cluster.check_partition("gpu", run, slurm=True)
    assert c.status == "fail" and "no usable node" in c.message and "3 drained" in c.message


def test_partition_up():
    run = fake({("sinfo", "-h", "-p"): ok("gpu|up|2|mixed\ngpu|up|1|drained\n")})
    assert cluster.check_partition("gpu", run, slurm=True) == Check(
        "slurm_partition", "pass", "partition 'gpu' is up (2 mixed, 1 drained)")


def test_partition_default_when_none_given():
    run = fake({("sinfo", "-h", "-o", "%P"): ok("cpu\ngpu*\n"), ("sinfo", "-h", "-p"): ok("gpu|up|1|idle\n")})
    assert "'gpu'" in cluster.check_partition(None, run, slurm=True).message


def test_no_slurm_skips_unless_a_partition_was_asked_for():
    assert cluster.check_partition(None, fake({}), slurm=False).status == "skip"
    c = cluster.check_partition("gpu", fake({}), slurm=False, explicit=True)
    assert c.status == "fail" and "'gpu'" in c.message


def test_sinfo_error_is_one_line():
    run = fake({("sinfo",): Proc(1, "", "slurm_load_partitions: Unable to contact slurm controller (connect failure)\n")})
    c = cluster.check_partition("gpu", run, slurm=True)
    assert c.status == "fail" and "Unable to contact slurm controller" in c.message and "\n" not in c.message




@pytest.mark.parametrize("gres,types", [
    ("gpu:h200:8(S:0-1)", {"h200"}), ("gpu:tesla:2", {"tesla"}), ("gpu:4", {""}), ("gpu", {""}),
    ("gpu:b300:4,shard:8", {"b300"}), ("(null)", set()), ("gpu:nvidia_h200:4(S:0),gpu:a100:2", {"nvidia_h200", "a100"}),
])
def test_parse_gres_types(gres, types):
    assert cluster.parse_gres_types(gres) == types


SINFO_NODES = "n1|gpu:h200:8(S:0-1)|h200,ib\nn2|gpu:h200:8(S:0-1)|h200,ib\n"


def test_gpu_model_offered_by_gres_or_feature():
    run = fake({("sinfo", "-h", "-N"): ok(SINFO_NODES)})
    assert cluster.check_gpu_model("gpu", "h200", None, run=run, slurm=True).status == "pass"
    assert cluster.check_gpu_model("gpu", "H200", "ib", run=run, slurm=True).status == "pass"
    c = cluster.check_gpu_model("gpu", "b300", None, run=run, slurm=True)
    assert c.status == "fail" and "'b300'" in c.message and "'gpu'" in c.message and "h200" in c.message
    c = cluster.check_gpu_model("gpu", None, "h200&nvlink", run=run, slurm=True)
    assert c.status == "fail" and "nvlink" in c.message


def test_gpu_partition_without_gpus():
    run = fake({("sinfo", "-h", "-N"): ok("c1|(null)|cpu\n")})
    assert cluster.check_gpu_model("cpu", None, None, require_gpu=True, run=run, slurm=True).status == "fail"
    assert cluster.check_gpu_model("cpu", None, None, run=run, slurm=True).status == "skip"




def config(storage: str, min_age: str) -> Proc:
    return ok(f"AccountingStorageType   = {storage}\nMinJobAge               = {min_age}\nKillWait = 5 sec\n")


def test_sacct_without_accounting_fails_with_the_fix():
    run = fake({("scontrol",): config("accounting_storage/none", "300 sec")})
    c = cluster.check_status_polling("sacct", run=run, slurm=True)
    assert c.status == "fail" and "--slurm-status-command squeue" in c.message


def test_sacct_with_accounting():
    run = fake({("scontrol",): config("accounting_storage/slurmdbd", "300 sec"), ("sacct",): ok("")})
    assert cluster.check_status_polling(None, run=run, slurm=True).status == "pass"


def test_squeue_needs_min_job_age():
    run = fake({("scontrol",): config("accounting_storage/none", "300 sec")})
    assert cluster.check_status_polling("squeue", 5, run=run, slurm=True).status == "pass"
    run = fake({("scontrol",): config("accounting_storage/none", "60 sec")})
    c = cluster.check_status_polling("squeue", 40, run=run, slurm=True)
    assert c.status == "fail" and "120" in c.message and "hangs without accounting" in c.message




def test_target_path(tmp_path):
    assert files.check_target_path(None).status == "skip"
    assert files.check_target_path(str(tmp_path)).status == "pass"
    c = files.check_target_path(str(tmp_path / "missing"))
    assert c.status == "fail" and "missing" in c.message


def test_caches(tmp_path):
    assert files.check_caches([str(tmp_path / "a" / "b")]).status == "pass"
    (tmp_path / "file").write_text("x")
    c = files.check_caches([str(tmp_path / "file" / "sub")])
    assert c.status == "fail" and "file/sub" in c.message


def test_python_tools_names_each_missing_module_and_what_needs_it():
    c = node.check_python_modules(("pytest", "kgate_absent_tool", "ruff"))
    assert c.status == "fail" and "\n" not in c.message
    assert "kgate_absent_tool (needed by a stage)" in c.message and sys.executable in c.message
    assert "pytest" not in c.message.split("cannot import")[1], "only the missing module is named"
    assert node.check_python_modules(("pytest", "xdist", "pytest_timeout", "ruff")).status == "pass"
    assert node.check_python_modules(()).status == "skip"


def test_a_missing_stage_tool_fails_the_checks(tmp_path):
    site = Site(preflight=True, expected_class="cpu", cache_dirs=(str(tmp_path / "c"),),
                python_modules=("pytest", "kgate_absent_tool"))
    checks = by_name(doctor.run_checks(site, fake({}), job=NO_JOB, dev=CPU))
    assert checks["python_tools"].status == "fail" and "kgate_absent_tool" in checks["python_tools"].message
    assert doctor.exit_code(list(checks.values())) == 2


def test_the_lint_tool_is_required_only_when_the_candidate_lints(tmp_path):
    from kgate import campaign

    on = campaign.load(UPSTREAM, {})
    assert doctor.required_modules(on) == ("pytest", "pytest_timeout", "xdist", "ruff")
    data = yaml.safe_load(Path(UPSTREAM).read_text())
    data["candidate"]["lint"] = {"ruff": False}
    off_file = tmp_path / f"{data['name']}.yaml"
    off_file.write_text(yaml.safe_dump(data, sort_keys=False))
    assert "ruff" not in doctor.required_modules(campaign.load(off_file, {}))


def _doctor_without(tmp_path: Path, prefix: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``python -m kgate doctor`` on a real interpreter that lacks the packages whose names start with ``prefix``:
    this environment's packages minus those, linked into a folder the base interpreter reads without site."""
    import site as site_mod

    env_dir = tmp_path / f"site-without-{prefix}"
    env_dir.mkdir()
    for sp in site_mod.getsitepackages():
        for entry in Path(sp).iterdir():
            if not entry.name.lower().startswith(prefix) and not (env_dir / entry.name).exists():
                (env_dir / entry.name).symlink_to(entry)
    base_python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    clone = tmp_path / "clone"
    clone.mkdir()
    out = tmp_path / "record.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(env_dir)])}
    proc = subprocess.run([str(base_python), "-S", "-m", "kgate", "doctor", "--record", str(out), "--campaign-file",
                           UPSTREAM, "--gpu", "cpu", "--target-path", str(clone), "--cache-dir", str(tmp_path / "c")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return proc, out


def test_preflight_without_ruff_stops_before_any_stage(tmp_path):
    """A real interpreter without ruff (this environment's packages minus ruff, linked into a folder the base
    interpreter reads without site): the preflight fails naming ruff and candidate_build, and writes no record."""
    proc, out = _doctor_without(tmp_path, "ruff")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("kgate: error:")]
    assert len(err) == 1 and "python_tools:" in err[0] and "ruff (needed by candidate_build's lint" in err[0], proc.stderr
    assert "FAIL         python_tools" in proc.stdout
    assert not out.exists()


def test_an_interpreter_without_kgates_dependencies_is_one_line_naming_the_module(tmp_path):
    """A job whose ``python`` lacks one of kgate's dependencies (here attrs, which jsonschema imports; on a node
    where ``python`` is a link to a virtual environment's interpreter, Python starts outside the environment)
    fails before any stage code with one line naming the module, its importer and the interpreter: no import
    traceback, no record."""
    proc, out = _doctor_without(tmp_path, "attrs")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgate: error: "), proc.stderr
    assert "cannot import 'attrs' (imported by jsonschema" in lines[0] and "python" in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not out.exists()


def test_gpu_checks_skip_on_cpu_and_fail_when_required():
    cpu = (False, "cpu")
    assert node.check_ncu(gpu=cpu).status == "skip"
    assert node.check_gpu_arch(gpu=cpu).status == "skip"
    assert node.check_ncu(gpu=cpu, require_gpu=True).status == "fail"
    assert node.check_gpu_arch(gpu=cpu, require_gpu=True).status == "fail"


def test_gpu_arch_failure_is_reported(monkeypatch):
    run = fake({(sys.executable,): Proc(1, "", "Traceback ...\nRuntimeError: no kernel image is available\n")})
    c = node.check_gpu_arch(gpu=(True, "NVIDIA B300"), run=run)
    assert c.status == "fail" and "no kernel image" in c.message and "B300" in c.message


def test_profiles_carry_the_site_facts():
    site = common.read_profile(REPO / "profiles" / "slurm")
    res = site["default-resources"]
    assert res["slurm_partition"] == "gpu" and res["gpu_model"] == "h200"
    assert site["slurm-status-command"] == "sacct"
    local = common.read_profile(REPO / "profiles" / "slurm-local")
    assert local["default-resources"]["slurm_partition"] == "debug"
    assert local["slurm-status-command"] == "squeue"
    for prof in ("slurm", "slurm-local", "local"):
        res = common.read_profile(REPO / "profiles" / prof)["default-resources"]
        assert res["runtime"] == "120" and res["test_timeout_s"] == "900" and res["gpu"] == "0"
        # gate runs use the node's cores; one kernel cache root per workdir (docs/cache.md)
        assert res["test_workers"] == "auto" and res["kernel_cache"] == "work/cache/kernels"


def test_doctor_checks_the_profiles_kernel_cache(tmp_path):
    site = doctor.site_from_args(parse("--profile", str(REPO / "profiles/slurm")))
    assert "work/cache/kernels" in site.cache_dirs
    site = doctor.site_from_args(parse("--profile", str(REPO / "profiles/slurm"), "--kernel-cache", str(tmp_path / "k")))
    assert str(tmp_path / "k") in site.cache_dirs and "work/cache/kernels" not in site.cache_dirs
    assert doctor.preflight_dirs("c", "h200", tmp_path / "k")[-1] == str(tmp_path / "k")


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    doctor.add_arguments(p)
    return p.parse_args(list(argv))


def test_flags_win_over_profile():
    site = doctor.site_from_args(parse("--profile", str(REPO / "profiles/slurm"), "--gpu-model", "b300"))
    assert site.partition == "gpu" and site.gpu_model == "b300" and site.status_command == "sacct"
    assert site.init_seconds == 30




def cluster_state() -> str | None:
    """None when a cluster answers, else why not."""
    if shutil.which("sinfo") is None:
        return "no Slurm here: sinfo not on PATH (start one with scripts/slurm-local.sh start)"
    p = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        return f"sinfo found but no cluster answers ({p.stderr.strip()[:120]}); run scripts/slurm-local.sh start"
    return None


CLUSTER_STATE = cluster_state()  # sinfo waits ~10 s when no controller answers: ask once
needs_cluster = pytest.mark.skipif(CLUSTER_STATE is not None, reason=str(CLUSTER_STATE))


def kgate_doctor(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "kgate", "doctor", *argv], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


@pytest.mark.slurm
@needs_cluster
def test_cluster_missing_partition_fails_fast(tmp_path):
    t0 = time.monotonic()
    p = kgate_doctor("--partition", "nope", "--cache-dir", str(tmp_path / "c"), "--json", str(tmp_path / "d.json"))
    took = time.monotonic() - t0
    assert p.returncode == 2, p.stdout + p.stderr
    line = next(ln for ln in p.stdout.splitlines() if "slurm_partition" in ln)
    assert line.startswith("FAIL") and "'nope'" in line and "does not exist" in line
    assert took < 15, f"doctor took {took:.1f} s"
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["schema"] == "kgate.doctor/1" and data["ok"] is False
    assert {"name": "slurm_partition", "status": "fail"}.items() <= data["checks"][0].items()


@pytest.mark.slurm
@needs_cluster
def test_cluster_local_profile_passes(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    p = kgate_doctor("--profile", "profiles/slurm-local", "--target-path", str(target),
                     "--cache-dir", str(tmp_path / "cache"))
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    for name in ("slurm_partition", "slurm_gpu", "slurm_status", "target_path", "caches", "compute_node"):
        assert any(ln.startswith("PASS") and f" {name} " in ln for ln in out.splitlines()), out


@pytest.mark.slurm
@needs_cluster
def test_cluster_wrong_gpu_model_and_missing_target(tmp_path):
    p = kgate_doctor("--partition", "debug", "--gpu-model", "b300", "--target-path", str(tmp_path / "nowhere"),
                     "--cache-dir", str(tmp_path / "c"))
    assert p.returncode == 2
    lines = {ln.split()[1]: ln for ln in p.stdout.splitlines() if ln[:4] in ("PASS", "FAIL", "SKIP")}
    assert lines["slurm_gpu"].startswith("FAIL") and "'b300'" in lines["slurm_gpu"] and "tesla" in lines["slurm_gpu"]
    assert lines["target_path"].startswith("FAIL")
    assert lines["compute_node"].startswith("FAIL") and "unreadable" in lines["compute_node"]


@pytest.mark.slurm
@needs_cluster
def test_cluster_status_command_matches_accounting(tmp_path):
    conf = cluster.parse_scontrol_config(subprocess.run(["scontrol", "show", "config"], capture_output=True,
                                                       text=True, timeout=30).stdout)
    accounting = not conf.get("AccountingStorageType", "").endswith("/none")
    c = cluster.check_status_polling("sacct", 30)
    assert c.status == ("pass" if accounting else "fail"), c.message
    assert cluster.check_status_polling("squeue", 5).status == "pass"


# --- the preflight: the workflow's first rule (python -m kgate doctor --record) ---

CPU = Device("cpu", "cpu", None, None, None)
H200 = Device("h200", "NVIDIA H200", "GPU-0000", "9.0", "580.65")
NO_JOB = slurm_provenance({})
IN_JOB = slurm_provenance({"SLURM_JOB_ID": "77", "SLURMD_NODENAME": "gpu-n1", "SLURM_JOB_PARTITION": "gpu"})
ARCH_OK = ok('{"arch": "sm_90", "torch": "2.13.0", "triton": "3.9.0", "torch_archs": ["sm_90"], "ok": true}\n')
UPSTREAM = str(REPO / "config" / "campaigns" / "rwkv6-bwd-fusion-upstream.yaml")


def by_name(checks) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_preflight_outside_slurm_runs_no_slurm_command_and_skips_gpu_checks_on_cpu(tmp_path):
    run = fake({})
    site = Site(preflight=True, expected_class="cpu", cache_dirs=(str(tmp_path / "c"),))
    checks = by_name(doctor.run_checks(site, run, job=NO_JOB, dev=CPU))
    assert run.calls == [], "a local executor's preflight asks Slurm nothing"
    for name in ("slurm_partition", "slurm_gpu", "slurm_status", "compute_node", "ncu", "gpu_arch"):
        assert checks[name].status == "skip", checks[name]
    assert checks["device_class"].status == "pass" and checks["caches"].status == "pass"
    assert doctor.exit_code(list(checks.values())) == 0


def test_preflight_in_a_gpu_job_checks_its_own_partition_without_a_nested_job(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "have_slurm", lambda: True)
    monkeypatch.setattr(node, "find_ncu", lambda: None)
    run = fake({("sinfo", "-h", "-p"): ok("gpu|up|2|mixed\n"), ("sinfo", "-h", "-N"): ok(SINFO_NODES),
                (sys.executable,): ARCH_OK})
    site = Site(preflight=True, expected_class="h200", cache_dirs=(str(tmp_path / "c"),))
    checks = by_name(doctor.run_checks(site, run, job=IN_JOB, dev=H200))
    assert checks["slurm_partition"].status == "pass" and "'gpu'" in checks["slurm_partition"].message
    assert checks["slurm_gpu"].status == "pass", "a GPU class needs a partition with GPUs"
    assert checks["slurm_status"].status == "skip", "status polling is the submit host's"
    assert checks["compute_node"].status == "pass" and "job 77" in checks["compute_node"].message
    assert not [c for c in run.calls if c[0] in ("srun", "scontrol")], run.calls
    assert checks["device_class"].status == "pass" and checks["gpu_arch"].status == "pass"
    ncu = checks["ncu"]
    assert ncu.status == "unavailable" and "not found" in ncu.message and "cannot be GO" in ncu.message
    assert doctor.exit_code(list(checks.values())) == 0, "no ncu limits the verdict; it does not stop the run"


def test_preflight_device_class_mismatch_fails_and_requires_the_gpu(tmp_path):
    site = Site(preflight=True, expected_class="h200", cache_dirs=(str(tmp_path / "c"),))
    checks = by_name(doctor.run_checks(site, fake({}), job=NO_JOB, dev=CPU))
    assert checks["device_class"].status == "fail" and "--config gpu=cpu" in checks["device_class"].message
    assert checks["ncu"].status == checks["gpu_arch"].status == "fail"


def test_preflight_writes_a_stage_record(tmp_path):
    clone = tmp_path / "clone"
    clone.mkdir()
    out = tmp_path / "results" / "doctor" / "record.json"
    args = parse("--record", str(out), "--campaign-file", UPSTREAM, "--gpu", "cpu", "--target-path", str(clone),
                 "--cache-dir", str(tmp_path / "c"))
    assert doctor.run_preflight(args, fake({}), job=NO_JOB, dev=CPU) == 0
    rec = read_record(out)
    assert (rec["stage"], rec["status"], rec["gpu"], rec["candidate"]) == ("doctor", "pass", "cpu", None)
    gates = {g["name"]: g for g in rec["gates"]}
    assert list(gates) == [k for k in doctor.REQUIREMENTS if k != "device_peaks"], "one gate per check, in order"
    assert rec["data"]["device_peaks"] is None, "a CPU run measures no peaks"
    assert all(g["threshold"] == doctor.REQUIREMENTS[n] for n, g in gates.items())
    assert gates["target_path"]["status"] == "pass" and str(clone) in gates["target_path"]["value"]
    assert rec["data"]["target_path"] == str(clone) and rec["data"]["schema"] == doctor.SCHEMA
    assert rec["provenance"]["local_rule"] is False and rec["provenance"]["device"]["class"] == "cpu"


def test_preflight_failure_names_every_failed_check_and_writes_no_record(tmp_path, monkeypatch):
    monkeypatch.setattr(node, "find_ncu", lambda: "/opt/nvidia/ncu")
    denied = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    run = fake({("/opt/nvidia/ncu", "--version"): ok("Version 2025.3.0.0 (build 36273991)\n"),
                ("/opt/nvidia/ncu",): Proc(1, denied + "\n", ""),
                (sys.executable,): Proc(1, "", "RuntimeError: Triton: no kernel image for sm_103\n")})
    out = tmp_path / "record.json"
    args = parse("--record", str(out), "--campaign-file", UPSTREAM, "--gpu", "h200",
                 "--target-path", str(tmp_path / "no-clone"), "--cache-dir", str(tmp_path / "c"))
    with pytest.raises(doctor.PreflightError) as info:
        doctor.run_preflight(args, run, job=NO_JOB, dev=H200)
    msg = str(info.value)
    assert msg.startswith("preflight failed") and "\n" not in msg
    for part in ("target_path:", "no-clone", "set --config target_path=", "gpu_arch:", "sm_103"):
        assert part in msg, part
    assert "caches:" not in msg and "device_class:" not in msg
    assert "ncu:" not in msg, "blocked counters make the ncu stage unavailable; they fail nothing"
    assert not out.exists()


def test_preflight_with_blocked_counters_runs_and_records_ncu_unavailable(tmp_path, monkeypatch, capsys):
    """ERR_NVGPUCTRPERM (a cluster without counter access): the preflight passes, says the verdict cannot be
    GO, and its record keeps ncu as unavailable."""
    monkeypatch.setattr(node, "find_ncu", lambda: "/opt/nvidia/ncu")
    denied = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    # a stand-in for the peak probes' output on an H200 (their real run needs a GPU: kgate.measure.peaks)
    peaks = {"device": "NVIDIA H200", "cuda": True, "meaningful": True, "bandwidth": {"bytes_per_s": 4.2e12},
             "flops": {"flops_per_s": {"bf16": 7.9e14, "fp32": 5.0e13}}}
    run = fake({(sys.executable, "-m", "kgate.measure.peaks"): ok(json.dumps(peaks) + "\n"),
                ("/opt/nvidia/ncu", "--version"): ok("Version 2025.3.0.0 (build 36273991)\n"),
                ("/opt/nvidia/ncu",): Proc(1, denied + "\n", ""), (sys.executable,): ARCH_OK})
    clone = tmp_path / "clone"
    clone.mkdir()
    out = tmp_path / "record.json"
    args = parse("--record", str(out), "--campaign-file", UPSTREAM, "--gpu", "h200", "--target-path", str(clone),
                 "--cache-dir", str(tmp_path / "c"))
    assert doctor.run_preflight(args, run, job=NO_JOB, dev=H200) == 0
    rec = read_record(out)
    assert rec["data"]["device_peaks"] == peaks, "the roofline bounds read the preflight's peaks from its record"
    assert {g["name"]: g for g in rec["gates"]}["device_peaks"]["value"].startswith("NVIDIA H200: copy 4200 GB/s")
    ncu = {g["name"]: g for g in rec["gates"]}["ncu"]
    assert ncu["status"] == "unavailable" and "ERR_NVGPUCTRPERM" in ncu["value"] and "cannot be GO" in ncu["value"]
    assert rec["status"] == "unavailable"
    printed = capsys.readouterr().out
    assert "UNAVAILABLE  ncu" in printed and "kgate doctor: ok (unavailable: ncu)" in printed


def test_preflight_needs_campaign_and_gpu(tmp_path):
    with pytest.raises(doctor.ConfigError, match="--campaign-file and --gpu"):
        doctor.run_preflight(parse("--record", str(tmp_path / "r.json"), "--gpu", "cpu"), fake({}))


def dot_edges(dot: str) -> set[tuple[str, str]]:
    """Rule-name edges (from, to) of `snakemake --dag` output."""
    names = {m.group(1): m.group(2) for m in re.finditer(r'^\s*(\d+)\[label = "([\w-]+)', dot, re.M)}
    return {(names[a], names[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)", dot, re.M)}


def test_preflight_is_the_first_rule_of_the_dag(tmp_path):
    proc = Workflow(tmp_path).run(args=("--dag",))
    assert proc.returncode == 0, proc.stderr[-3000:]
    edges = dot_edges(proc.stdout)
    assert ("doctor", "target") in edges, edges
    assert not [e for e in edges if e[1] == "doctor"], "the preflight depends on nothing"


def test_local_preflight_failure_stops_the_dag_before_target(tmp_path):
    t0 = time.monotonic()
    proc = Workflow(tmp_path).run("campaign=rwkv6-bwd-fusion-upstream", f"target_path={tmp_path / 'no-clone'}")
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "kgate: error: preflight failed (no Slurm job); no stage ran: target_path:" in out, out[-3000:]
    assert ran_rules(proc) == ["doctor"], ran_rules(proc)
    assert not (tmp_path / "results" / "rwkv6-bwd-fusion-upstream" / "cpu" / "target").exists()
    assert took < 90, f"took {took:.1f} s"


def test_rerun_preflight_never_reruns_a_finished_stage(tmp_path):
    wf = Workflow(tmp_path)
    until = ("--until", "target")
    proc = wf.run(args=until)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ran_rules(proc) == ["doctor", "target"], ran_rules(proc)
    target = tmp_path / "results" / "rwkv6-bwd-fusion" / "cpu" / "target" / "record.json"
    before = (target.read_text(), target.stat().st_mtime_ns)
    record = tmp_path / "results" / "rwkv6-bwd-fusion" / "cpu" / "doctor" / "record.json"
    later = time.time() + 60
    os.utime(record, (later, later))  # newer than target's record
    dry = wf.run(args=("-n", *until))
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]
    forced = wf.run(args=("--forcerun", "doctor", *until))  # the preflight again, for real
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert ran_rules(forced) == ["doctor"], ran_rules(forced)
    assert (target.read_text(), target.stat().st_mtime_ns) == before
    assert json.loads(record.read_text())["provenance"]["started_utc"] >= json.loads(before[0])["provenance"][
        "started_utc"]
