"""Real campaigns through profiles/slurm-local on the local single-node cluster (scripts/slurm-local.sh).

- The cheap second-op campaign's running baseline_tests job is cancelled with
  scancel: Snakemake fails with the CANCELLED message naming the job id and
  its log; the same command again completes to SMOKE without redoing the
  preflight or target; dry runs then show that the preflight never reruns a
  finished stage. In the finished run the preflight (rule doctor) and every
  compute stage ran as its own Slurm job (distinct job ids in the records,
  each job's log kept under its rule); target and candidate_build ran on the
  submit host and say so. (The default campaign itself runs locally in the
  shared workdir's tests: the Slurm path is the same for every campaign.)
- A site problem that the preflight finds on the compute node fails the run
  before any stage, naming the check.

Snakemake runs under ``timeout -s INT``: SIGINT makes it scancel its jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, SDIST_CACHE, Workflow, candidate_id, job_state, ran_rules, slurm_up, wait_for

from kgate import protocol, slurm

SECOND_OP = "chunk-local-cumsum-identity"
PROFILE = "profiles/slurm-local"


pytestmark = [pytest.mark.campaign, pytest.mark.slurm,
              pytest.mark.skipif(not slurm_up(), reason="no local Slurm: run scripts/slurm-local.sh start")]


def snakemake_cmd(workdir: Path, *config: str, args: tuple[str, ...] = (), limit_s: int = 1800) -> list[str]:
    """kgate's Snakefile in ``workdir`` with the local cluster's profile, stopped by SIGINT after ``limit_s``."""
    return ["timeout", "-s", "INT", "-k", "30", str(limit_s), sys.executable, "-m", "snakemake",
            "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--profile", str(REPO / PROFILE), *args,
            "--config", f"sdist_cache={SDIST_CACHE}", *config]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = str(Path(sys.executable).parent) + os.pathsep + e.get("PATH", "")
    e.pop("PYTHONPATH", None)
    return e


def run(workdir: Path, *config: str, args: tuple[str, ...] = (), limit_s: int = 1800,
        name: str = "snakemake") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(snakemake_cmd(workdir, *config, args=args, limit_s=limit_s), capture_output=True,
                          text=True, env=env(), timeout=limit_s + 120)
    (workdir / f"{name}-{time.time():.0f}.log").write_text(proc.stdout + proc.stderr)
    return proc


def slurm_logs(workdir: Path, rule: str) -> list[Path]:
    return sorted((workdir / ".snakemake" / "slurm_logs" / f"rule_{rule}").rglob("*.log"))


def stage_records(wf: Workflow, campaign: str, cid: str) -> dict[str, dict]:
    """Every record of the run (the preflight, baseline stages, the candidate's stages), by stage."""
    out = {}
    for stage_dir in sorted((wf.workdir / "results" / campaign / "cpu").iterdir()):
        if stage_dir.name == "report":
            continue
        cand = cid if (stage_dir / cid).is_dir() else None
        if (stage_dir / (cand or "") / "record.json").is_file():
            out[stage_dir.name] = wf.record(campaign, stage_dir.name, cand)
    return out


def snapshot(path: Path) -> tuple[str, int]:
    return path.read_text(), path.stat().st_mtime_ns


def test_every_compute_stage_is_its_own_slurm_job_and_a_cancelled_one_resumes(tmp_path) -> None:
    """The cheap campaign through Slurm: its running baseline_tests job is cancelled, the same command completes
    the run, and then every compute stage of the finished run was its own Slurm job."""
    config = (f"campaign={SECOND_OP}",)
    results = tmp_path / "results" / SECOND_OP / "cpu"
    t0 = time.monotonic()
    with open(tmp_path / "run1.log", "w") as out:
        proc = subprocess.Popen(snakemake_cmd(tmp_path, *config, limit_s=900), env=env(), stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            logs = wait_for(lambda: slurm_logs(tmp_path, "baseline_tests"), 300, "baseline_tests' Slurm job")
            job = logs[0].stem
            # the kgate stage itself has started inside the job (its log is opened by the rule's shell)
            stage_log = tmp_path / "logs" / SECOND_OP / "cpu" / "baseline_tests" / "record.log"
            wait_for(stage_log.exists, 120, "the baseline_tests stage to start in its job")
            assert job_state(job) == "RUNNING"
            before = {s: snapshot(results / s / "record.json") for s in (protocol.PREFLIGHT, "target")}
            subprocess.run(["scancel", job], check=True, timeout=30)
            rc = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.send_signal(2)
                proc.wait(timeout=240)
    t1 = time.monotonic()
    run1 = (tmp_path / "run1.log").read_text()
    assert rc != 0, run1[-3000:]
    assert job_state(job) == "CANCELLED"
    failures = slurm.parse_snakemake_failures(run1)
    assert [(f.rule, f.job_id, f.state) for f in failures] == [("baseline_tests", job, "CANCELLED")], run1[-3000:]
    msg = failures[0].message()
    assert job in msg and str(logs[0]) in msg and "CANCELLED" in msg and "rerun the same command" in msg
    assert not (results / "baseline_tests" / "record.json").exists()

    proc2 = run(tmp_path, *config, limit_s=900, name="run2")  # the same command again
    t2 = time.monotonic()
    assert proc2.returncode == 0, proc2.stderr[-4000:]
    wf = Workflow(tmp_path)
    assert wf.verdict(SECOND_OP)["verdict"] == "SMOKE"
    rules = ran_rules(proc2)
    assert "baseline_tests" in rules and not {"doctor", "target"} & set(rules), rules
    for stage, snap in before.items():
        assert snapshot(results / stage / "record.json") == snap, f"finished stage {stage} was redone"
    resumed = wf.record(SECOND_OP, "baseline_tests")["provenance"]["slurm"]["job_id"]
    assert resumed.isdigit() and resumed != job

    # Rerunning never redoes a finished stage because of the preflight: not after the run, not when its
    # record is newer than every stage's, not when the preflight itself is forced again (target takes its
    # record as ancient()).
    dry = run(tmp_path, *config, args=("-n",), limit_s=300, name="dry")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]
    later = time.time() + 60
    os.utime(results / protocol.PREFLIGHT / "record.json", (later, later))
    dry = run(tmp_path, *config, args=("-n",), limit_s=300, name="dry-newer")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]
    dry = run(tmp_path, *config, args=("-n", "--forcerun", "doctor"), limit_s=300, name="dry-forced")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert ran_rules(dry) == ["doctor"], ran_rules(dry)
    check_jobs(tmp_path, SECOND_OP, cancelled=job)
    print(f"[timing] run until the cancel was reported: {t1 - t0:.1f} s; rerun to SMOKE: {t2 - t1:.1f} s")


def check_jobs(workdir: Path, campaign: str, cancelled: str) -> None:
    """The preflight and every compute stage ran as its own Slurm job (distinct job ids in the records, each
    job's log kept under its rule; the cancelled job's log kept beside its rerun's), target and candidate_build
    on the submit host, the preflight first and on the compute node; the report names every stage's job."""
    wf = Workflow(workdir)
    cid = candidate_id(campaign)
    verdict = wf.verdict(campaign)
    assert verdict["verdict"] == "SMOKE" and verdict["candidate"] == cid, verdict["sentence"]
    records = stage_records(wf, campaign, cid)
    ran = {s["stage"] for s in verdict["stages"] if s["status"] != "not_run"}
    assert set(records) == ran | {protocol.PREFLIGHT}, (sorted(records), sorted(ran))
    assert set(protocol.STAGES) == ran, sorted(ran)
    compute = {s: r for s, r in records.items() if not r["provenance"]["local_rule"]}
    local = {s: r for s, r in records.items() if r["provenance"]["local_rule"]}
    assert set(compute) == protocol.GPU_STAGES, sorted(compute)
    assert set(local) == {"target", "candidate_build"}, sorted(local)
    jobs = {s: r["provenance"]["slurm"] for s, r in compute.items()}
    ids = [j["job_id"] for j in jobs.values()]
    assert all(i and i.isdigit() for i in ids), jobs
    assert len(set(ids)) == len(ids) and cancelled not in ids, f"one Slurm job per compute stage: {jobs}"
    for stage, job in jobs.items():
        assert job["node"] == "localhost" and job["partition"] == "debug", (stage, job)
        # the job's log is kept under its own rule, named by the job id (slurm-keep-successful-logs)
        kept = [p.name for p in slurm_logs(workdir, stage)]
        assert kept == sorted([f"{job['job_id']}.log"] + ([f"{cancelled}.log"] if stage == "baseline_tests" else [])), (
            stage, kept)
    for stage, r in local.items():
        assert not (r["provenance"]["slurm"] or {}).get("job_id"), stage
        assert not slurm_logs(workdir, stage), f"{stage} is a local rule: no Slurm job"
    gate_rec = records["candidate_gate"]
    assert gate_rec["data"]["run"]["counts"].get("passed", 0) > 0 and gate_rec["data"]["run"]["interpreter"]

    doctor = records[protocol.PREFLIGHT]
    gates = {g["name"]: g for g in doctor["gates"]}
    assert doctor["status"] == "pass" and gates["device_class"]["status"] == "pass"
    assert gates["compute_node"]["status"] == "pass" and jobs[protocol.PREFLIGHT]["job_id"] in gates["compute_node"]["value"]
    assert gates["slurm_partition"]["status"] == "pass" and "'debug'" in gates["slurm_partition"]["value"]
    assert gates["ncu"]["status"] == gates["gpu_arch"]["status"] == "skip", "a CPU run skips the GPU checks"
    assert doctor["provenance"]["finished_utc"] <= records["target"]["provenance"]["started_utc"]

    summary = (workdir / "reports" / campaign / "cpu" / "summary.md").read_text()
    for stage in ("baseline_tests", "candidate_gate", "bench"):
        assert f"{stage}: slurm {jobs[stage]['job_id']} on localhost" in summary, stage
    check = subprocess.run([sys.executable, "-m", "kgate", "verdict", "--check", campaign, "--gpu", "cpu"],
                           cwd=workdir, capture_output=True, text=True, timeout=60)
    assert check.returncode == 3, check.stdout + check.stderr




def test_preflight_failure_on_the_compute_node_stops_before_any_stage(tmp_path) -> None:
    # the upstream campaign reads the user's clone from the compute nodes: here it is not there
    missing = tmp_path / "no-such-clone"
    t0 = time.monotonic()
    proc = run(tmp_path, "campaign=rwkv6-bwd-fusion-upstream", f"target_path={missing}", limit_s=300)
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    failures = slurm.parse_snakemake_failures(out)
    assert [(f.rule, f.state) for f in failures] == [("doctor", "FAILED")], out[-3000:]
    line = next(ln for ln in out.splitlines() if ln.startswith("kgate: error: preflight failed"))
    assert f"Slurm job {failures[0].job_id}" in line and "target_path" in line and str(missing) in line
    assert "set --config target_path=" in line
    assert set(ran_rules(proc)) == {"doctor"}, ran_rules(proc)  # (the job's own log repeats the rule)
    assert not (tmp_path / "results" / "rwkv6-bwd-fusion-upstream" / "cpu" / "target").exists()
    assert not (tmp_path / "results" / "rwkv6-bwd-fusion-upstream" / "cpu" / "doctor" / "record.json").exists()
    print(f"[timing] preflight failure through Slurm, until Snakemake exited: {took:.1f} s")


def test_missing_partition_fails_at_the_first_submission(tmp_path) -> None:
    # A site layer naming a partition the cluster does not have: the preflight is the first job submitted,
    # so sbatch refuses it in seconds and no stage runs.
    resources = ("slurm_partition='nope'", "slurm_account='kgate'", "gpu_model='tesla'", "gpu=0", "runtime=120",
                 "test_timeout_s=900", "test_workers='auto'", "kernel_cache='work/cache/kernels'", "mem_mb=1000",
                 "cpus_per_task=1")
    t0 = time.monotonic()
    proc = run(tmp_path, f"campaign={SECOND_OP}", args=("--default-resources", *resources), limit_s=300)
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Error in rule doctor:" in out and "invalid partition specified: nope" in out, out[-3000:]
    assert not (tmp_path / "results" / SECOND_OP / "cpu" / "target").exists()
    assert took < 60, f"took {took:.1f} s"
    print(f"[timing] missing partition reported after {took:.1f} s")
