"""kgate.slurm without a cluster: end states, messages, retry policy, parsers, provenance."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kgate import slurm

ALL_END_STATES = ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def test_every_end_state_is_mapped():
    assert set(slurm.END_STATES) == set(ALL_END_STATES)


@pytest.mark.parametrize("state", ALL_END_STATES)
def test_message_is_one_line_naming_job_and_log(state):
    log = ".snakemake/slurm_logs/rule_bench/4711.log"
    msg = slurm.END_STATES[state].message(4711, log)
    assert "\n" not in msg
    assert "4711" in msg and log in msg and state in msg


def test_message_without_log_says_so():
    assert "no log path known" in slurm.END_STATES["FAILED"].message("12", None)


def test_end_state_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        slurm.END_STATES["FAILED"].retry = "requeue"  # type: ignore[misc]


@pytest.mark.parametrize("state", ["NODE_FAIL", "PREEMPTED", "BOOT_FAIL"])
def test_infrastructure_losses_are_requeued(state):
    es = slurm.END_STATES[state]
    assert es.retry == "requeue"
    assert es.effect(measured=True) == "requeued"


@pytest.mark.parametrize("state", ["FAILED", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED", "DEADLINE"])
def test_never_retried(state):
    assert slurm.END_STATES[state].retry == "never"


@pytest.mark.parametrize("state", ["TIMEOUT", "OUT_OF_MEMORY"])
def test_timeout_and_oom_of_a_measured_stage_are_measured_failures(state):
    es = slurm.END_STATES[state]
    assert es.effect(measured=True) == "fail"
    assert es.effect(measured=False) == "error"


@pytest.mark.parametrize("state", ["FAILED", "CANCELLED", "DEADLINE"])
def test_other_ends_are_infrastructure_errors(state):
    assert slurm.END_STATES[state].effect(measured=True) == "error"


@pytest.mark.parametrize("raw,norm", [
    ("CANCELLED by 0", "CANCELLED"), ("CANCELLED+", "CANCELLED"), ("OUT_OF_ME+", "OUT_OF_MEMORY"),
    ("timeout", "TIMEOUT"), ("  NODE_FAIL ", "NODE_FAIL"), ("COMPLETED", "COMPLETED"), ("", ""),
])
def test_normalize_state(raw, norm):
    assert slurm.normalize_state(raw) == norm


def test_end_state_lookup_and_terminal():
    assert slurm.end_state("CANCELLED by 1000").state == "CANCELLED"
    assert slurm.end_state("COMPLETED") is None
    assert slurm.end_state("RUNNING") is None
    assert slurm.is_terminal("COMPLETED") and slurm.is_terminal("TIMEOUT")
    assert not slurm.is_terminal("PENDING") and not slurm.is_terminal("REQUEUED")


def test_failure_message_for_unknown_state():
    msg = slurm.failure_message("SPECIAL_EXIT", 9, "x/9.log")
    assert "9" in msg and "SPECIAL_EXIT" in msg and "x/9.log" in msg


def test_slurm_log_path_layout():
    assert slurm.slurm_log_path(".snakemake/slurm_logs", "bench", 17) == Path(".snakemake/slurm_logs/rule_bench/17.log")
    assert slurm.slurm_log_path("L", "f", "18", "a_b") == Path("L/rule_f/a_b/18.log")


SNAKEMAKE_ERRORS = """\
Error in rule f:
    message: SLURM-job '12' failed, SLURM status is: 'FAILED'. Detailed failure reason unavailable (status command \
is not 'sacct').For further error details see the cluster/cloud log and the log files of the involved rule(s).
    jobid: 1
    output: out/f_a.txt
    log: logs/f_a.log, /tmp/t3/.snakemake/slurm_logs/rule_f/a/12.log (check log file(s) for error details)
    external_jobid: 12
Error in rule slow:
    message: SLURM-job '31' failed, SLURM status is: 'TIMEOUT'. Reason: Step 0: TimeLimit.
    log: /w/.snakemake/slurm_logs/rule_slow/31.log (check log file(s) for error details)
    external_jobid: 31
Error in rule local_thing:
    jobid: 4
    shell: false
Error in rule lost:
    message: SLURM-job '40' failed due to a node failure, SLURM status is: 'NODE_FAIL'. Failed nodes will be excluded
    external_jobid: 40
Error in rule slow:
    message: SLURM-job '31' failed, SLURM status is: 'TIMEOUT'. Reason: Step 0: TimeLimit.
    external_jobid: 31
"""


def test_parse_snakemake_failures():
    got = slurm.parse_snakemake_failures(SNAKEMAKE_ERRORS)
    assert got == [
        slurm.SlurmFailure("f", "12", "FAILED", "/tmp/t3/.snakemake/slurm_logs/rule_f/a/12.log"),
        slurm.SlurmFailure("slow", "31", "TIMEOUT", "/w/.snakemake/slurm_logs/rule_slow/31.log"),
        slurm.SlurmFailure("lost", "40", "NODE_FAIL", None),
    ]
    msg = got[1].message()
    assert "31" in msg and "TIMEOUT" in msg and "/w/.snakemake/slurm_logs/rule_slow/31.log" in msg


SCONTROL = """\
JobId=10 JobName=wrap
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   JobState=TIMEOUT Reason=TimeLimit Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=143:0
   RunTime=00:01:27 TimeLimit=00:01:00 TimeMin=N/A
   NodeList=localhost
   TRES=cpu=1,mem=256M,node=1,billing=1
   Command=(null)
   StdOut=/tmp/exp/to-10.out
"""


def test_parse_scontrol_job():
    f = slurm.parse_scontrol_job(SCONTROL)
    assert f["JobId"] == "10" and f["JobState"] == "TIMEOUT" and f["Reason"] == "TimeLimit"
    assert f["Restarts"] == "0" and f["StdOut"] == "/tmp/exp/to-10.out"
    assert f["TRES"] == "cpu=1,mem=256M,node=1,billing=1"
    assert f["UserId"] == "root(0)"


def test_parse_state_table():
    assert slurm.parse_state_table("14|RUNNING\n15|CANCELLED by 0\n\n16_1|COMPLETED\n") == {
        "14": "RUNNING", "15": "CANCELLED", "16_1": "COMPLETED"}


def test_provenance_outside_slurm_is_all_null():
    prov = slurm.slurm_provenance({"CUDA_VISIBLE_DEVICES": "0", "HOME": "/root"})
    assert set(prov) == set(slurm.PROVENANCE_KEYS)
    assert all(v is None for v in prov.values())


def test_provenance_in_a_job_step():
    env = {  # what a rule's shell saw under the Slurm executor on the local cluster
        "SLURM_JOB_ID": "8", "SLURM_JOBID": "8", "SLURMD_NODENAME": "localhost", "SLURM_JOB_NODELIST": "localhost",
        "SLURM_JOB_PARTITION": "debug", "SLURM_CLUSTER_NAME": "kgate", "SLURM_STEP_ID": "0",
        "SLURM_CPUS_PER_TASK": "1", "SLURM_STEP_GPUS": "0", "SLURM_GPUS_ON_NODE": "1",
        "CUDA_VISIBLE_DEVICES": "0", "SLURM_SUBMIT_HOST": "vm",
    }
    prov = slurm.slurm_provenance(env)
    assert prov["job_id"] == "8" and prov["node"] == "localhost" and prov["partition"] == "debug"
    assert prov["cluster"] == "kgate" and prov["step_id"] == "0" and prov["cpus_per_task"] == 1
    assert prov["gpus"] == "0" and prov["cuda_visible_devices"] == "0"
    assert prov["restart_count"] is None  # stripped by the executor's job step


def test_provenance_batch_environment():
    env = {"SLURM_JOB_ID": "99", "SLURM_NODELIST": "gpu[01-02]", "SLURM_RESTART_COUNT": "2",
           "SLURM_JOB_ACCOUNT": "proj", "SLURM_ARRAY_JOB_ID": "98", "SLURM_ARRAY_TASK_ID": "3"}
    prov = slurm.slurm_provenance(env)
    assert prov["node"] == "gpu[01-02]" and prov["nodelist"] == "gpu[01-02]"
    assert prov["restart_count"] == 2 and prov["account"] == "proj"
    assert prov["array_job_id"] == "98" and prov["array_task_id"] == "3"
