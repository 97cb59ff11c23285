"""Snakemake's Slurm executor against the REAL local cluster (scripts/slurm-local.sh start),
with profiles/slurm-local and a tiny standalone workflow in a scratch folder.

(a) every rule runs as its own Slurm job, a gpu=1 rule gets one of the
cluster's GPUs and a gpu=0 rule none; (b) a rule over its time limit ends as
TIMEOUT and kgate.slurm's message names the job id and the log. A job
cancelled with scancel mid-run, and the same command resuming without redoing
finished rules, is tested on kgate's own stages only
(tests/test_campaign_slurm.py). TIMEOUT stays standalone: a kgate stage stops
its gate runs at 90 % of its runtime and records a measured failure, so by
design it never reaches Slurm's limit.

Skipped, with the reason, where no cluster answers. Snakemake runs under
``timeout -s INT``: SIGINT makes it scancel its jobs and exit, SIGTERM does not.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import job_state

from kgate import slurm

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "slurm-local"


def _why_not() -> str | None:
    if shutil.which("sinfo") is None:
        return "no Slurm here: sinfo not on PATH (start one with scripts/slurm-local.sh start)"
    p = subprocess.run(["sinfo", "-h", "-p", "debug", "-o", "%a"], capture_output=True, text=True, timeout=30)
    if p.returncode != 0 or "up" not in p.stdout:
        return f"no local cluster answers ({(p.stderr or p.stdout).strip()[:120]}); run scripts/slurm-local.sh start"
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        return "snakemake-executor-plugin-slurm is not installed"
    return None


WHY_NOT = _why_not()
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]


def snakemake_cmd(limit_s: int, *extra: str) -> list[str]:
    return ["timeout", "-s", "INT", "-k", "30", str(limit_s), sys.executable, "-m", "snakemake",
            "--profile", str(PROFILE), *extra]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = str(Path(sys.executable).parent) + os.pathsep + e.get("PATH", "")
    e["PYTHONPATH"] = str(REPO)  # jobs import kgate (sbatch --export=ALL)
    return e


def run_snakemake(workdir: Path, *extra: str, limit_s: int = 240) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(snakemake_cmd(limit_s, *extra), cwd=workdir, env=env(), capture_output=True, text=True,
                       timeout=limit_s + 60)
    (workdir / f"snakemake-{time.time():.0f}.out").write_text(p.stdout + p.stderr)
    return p


def slurm_logs(workdir: Path, rule: str) -> list[Path]:
    return sorted((workdir / ".snakemake" / "slurm_logs" / f"rule_{rule}").rglob("*.log"))


# one line a rule writes: its Slurm job id, node and GPU
JOB = 'echo "$SLURM_JOB_ID $SLURMD_NODENAME ${{CUDA_VISIBLE_DEVICES:-none}}"'



SNAKEFILE_JOBS = """
rule all:
    input: "out/summary.txt"

rule part:
    output: "out/part_{i}.txt"
    shell: '@JOB@ > {output}'

rule gpu:
    output: "out/gpu.txt"
    resources: gpu=1
    shell: '@JOB@ > {output}'

rule summary:
    input: "out/part_1.txt", "out/gpu.txt"
    output: "out/summary.txt", "out/provenance.json"
    shell:
        'cat {input} > {output[0]}; @JOB@ >> {output[0]}; '
        '@PY@ -c "import json, os; from kgate.slurm import slurm_provenance; '
        'print(json.dumps(slurm_provenance(os.environ)))" > {output[1]}'
""".replace("@PY@", sys.executable).replace("@JOB@", JOB)


def test_each_rule_runs_as_its_own_slurm_job(tmp_path):
    (tmp_path / "Snakefile").write_text(SNAKEFILE_JOBS)
    t0 = time.monotonic()
    p = run_snakemake(tmp_path)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "SLURM run ID" in p.stderr + p.stdout

    rows = {}
    for name in ("part_1", "gpu"):
        job, node, cvd = (tmp_path / "out" / f"{name}.txt").read_text().split()
        rows[name] = (job, node, cvd)
    summary_lines = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    rows["summary"] = tuple(summary_lines[-1].split())
    ids = [r[0] for r in rows.values()]
    assert all(i.isdigit() for i in ids), rows
    assert len(set(ids)) == 3, f"three jobs, three Slurm jobs: {rows}"
    assert all(r[1] == "localhost" for r in rows.values())
    assert rows["gpu"][2] in ("0", "1"), "the gpu=1 rule got one of the two fake GPUs"
    assert rows["part_1"][2] == "none", "a CPU rule (gpu=0) gets no GPU"

    # every job's log is kept, named by its job id (slurm-keep-successful-logs)
    for rule, job in (("part", rows["part_1"][0]), ("gpu", rows["gpu"][0]),
                      ("summary", rows["summary"][0])):
        assert any(log.name == f"{job}.log" for log in slurm_logs(tmp_path, rule)), (rule, job)

    import json
    prov = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert prov["job_id"] == rows["summary"][0] and prov["node"] == "localhost" and prov["partition"] == "debug"
    print(f"[timing] 3 jobs, 2 levels via Slurm: {took:.1f} s")



SNAKEFILE_TIMEOUT = """
rule all:
    input: "out/overrun.txt"

rule overrun:
    output: "out/overrun.txt"
    resources: runtime=1
    shell: 'echo "started $SLURM_JOB_ID"; sleep 600; touch {output}'
"""


def test_time_limit_ends_as_timeout_with_job_and_log_named(tmp_path):
    # Slurm counts time limits in whole minutes and slurmctld sweeps them every 30 s,
    # so a 1-minute job is killed 60-90 s after it starts (measured 71-88 s; KillWait=5 s
    # and OverTimeLimit=0 in the local cluster). The executor polls `init` s after the
    # submission, then each poll that sees no finished job waits 10 s longer; with
    # init=11 the kill is seen at most ~104 s after submission (profile's 5 s: up to
    # ~125 s). After reporting a failure Snakemake still sleeps one more poll interval
    # (40-50 s) before it exits; nothing is left running by then, so the test stops it
    # as soon as the failure is reported (its exit on failure is covered by the
    # scancel test).
    (tmp_path / "Snakefile").write_text(SNAKEFILE_TIMEOUT)
    t0 = time.monotonic()
    proc = subprocess.Popen(snakemake_cmd(300, "--slurm-init-seconds-before-status-checks", "11"), cwd=tmp_path,
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    failures: list[slurm.SlurmFailure] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded by `timeout -s INT 300`
            lines.append(line)
            if line.strip().startswith("external_jobid:"):
                failures = slurm.parse_snakemake_failures("".join(lines))
                if failures:
                    break
    finally:
        took = time.monotonic() - t0
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        (tmp_path / "snakemake.out").write_text("".join(lines))
    out = "".join(lines)
    assert len(failures) == 1 and failures[0].rule == "overrun" and failures[0].state == "TIMEOUT", out[-3000:]
    f = failures[0]
    log = Path(f.log)
    assert log == tmp_path / ".snakemake" / "slurm_logs" / "rule_overrun" / f"{f.job_id}.log"
    assert log.exists() and "DUE TO TIME LIMIT" in log.read_text()
    assert job_state(f.job_id) == "TIMEOUT"

    msg = f.message()
    assert f.job_id in msg and str(log) in msg and "TIMEOUT" in msg and "\n" not in msg
    es = slurm.end_state("TIMEOUT")
    assert es.retry == "never" and es.effect(measured=True) == "fail"
    fields = slurm.parse_scontrol_job(subprocess.run(["scontrol", "show", "job", f.job_id], capture_output=True,
                                                     text=True, timeout=30).stdout)
    assert fields["JobState"] == "TIMEOUT" and fields["TimeLimit"] == "00:01:00"
    print(f"[timing] TIMEOUT reported after {took:.1f} s; {msg}")
