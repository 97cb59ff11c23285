"""Slurm facts for kgate: end states, their messages and retry policy, and the
job's provenance for stage records.

Everything here is pure (no subprocesses): callers run ``squeue``/``sacct``/
``scontrol`` themselves and hand the text in.

Retry policy (``EndState.retry``):

* ``requeue`` -- NODE_FAIL, PREEMPTED, BOOT_FAIL. The job never got a fair run;
  Slurm requeues the same job id when it was submitted with ``--requeue``
  (``slurm-requeue: true`` in the profiles). The stage starts from scratch in
  the new allocation and records nothing from the lost one.
* ``never`` -- FAILED, OUT_OF_MEMORY, TIMEOUT, CANCELLED, DEADLINE. A measured
  stage that ran out of time or memory has measured something (the candidate
  or the baseline did it); running it again would hide an intermittent failure
  and burn GPU hours. FAILED means the stage exited non-zero, i.e. it could not
  measure: fix the cause, then rerun the same command (finished stages are
  kept). CANCELLED and DEADLINE are a person's or the site's decision.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Retry = Literal["requeue", "never"]

#: what a job that ended in this state means for a stage record when no record
#: was written: ``fail`` is a measured failure (NO-GO), ``error`` an
#: infrastructure error (no verdict), ``requeued`` still on its way.
Effect = Literal["fail", "error", "requeued"]


@dataclass(frozen=True)
class EndState:
    """One terminal (or requeueing) Slurm job state."""

    state: str
    template: str
    retry: Retry
    measured_failure: bool
    """True where a measured stage that ended so has measured a failure."""

    def message(self, job_id: str | int, log: str | Path | None) -> str:
        """One line naming the job id and its log path."""
        return self.template.format(job_id=job_id, log=log if log not in (None, "") else "(no log path known)")

    def effect(self, measured: bool) -> Effect:
        """How a stage without a record should be reported after this end."""
        if self.retry == "requeue":
            return "requeued"
        return "fail" if (measured and self.measured_failure) else "error"


END_STATES: Mapping[str, EndState] = {
    s.state: s
    for s in (
        EndState("FAILED", "Slurm job {job_id} FAILED: the stage exited non-zero (it could not measure); "
                 "fix the cause and rerun; log: {log}", "never", False),
        EndState("CANCELLED", "Slurm job {job_id} was CANCELLED (scancel by a user or an admin); "
                 "rerun the same command to continue; log: {log}", "never", False),
        EndState("TIMEOUT", "Slurm job {job_id} hit its TIMEOUT (time limit = resources.runtime minutes) "
                 "and was killed; not retried; log: {log}", "never", True),
        EndState("OUT_OF_MEMORY", "Slurm job {job_id} ran OUT_OF_MEMORY (limit = resources.mem_mb) "
                 "and was killed; not retried; log: {log}", "never", True),
        EndState("NODE_FAIL", "Slurm job {job_id} lost its node (NODE_FAIL); Slurm requeues it "
                 "(same job id); log: {log}", "requeue", False),
        EndState("PREEMPTED", "Slurm job {job_id} was PREEMPTED by a higher-priority job; Slurm requeues it "
                 "(same job id); log: {log}", "requeue", False),
        EndState("BOOT_FAIL", "Slurm job {job_id} never started: its node failed to boot (BOOT_FAIL); "
                 "Slurm requeues it (same job id); log: {log}", "requeue", False),
        EndState("DEADLINE", "Slurm job {job_id} missed its DEADLINE (--deadline) and was cancelled; "
                 "not retried; log: {log}", "never", False),
    )
}

#: states in which a job is still on its way (not an end state)
ACTIVE_STATES = frozenset({
    "PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
    "RESIZING", "RESV_DEL_HOLD", "SIGNALING", "STAGE_OUT", "STOPPED", "SUSPENDED", "SPECIAL_EXIT",
})


def normalize_state(state: str) -> str:
    """``'CANCELLED by 0'``, ``'CANCELLED+'``, ``'out_of_memory'`` -> the plain state name.

    sacct appends `` by <uid>`` to CANCELLED and truncates long names with
    ``+`` (``OUT_OF_ME+``); a truncated name is completed when it is the
    prefix of exactly one known state.
    """
    s = state.strip().split()[0].upper() if state.strip() else ""
    if s.endswith("+"):
        stem = s.rstrip("+")
        known = [k for k in (*END_STATES, *ACTIVE_STATES, "COMPLETED") if k.startswith(stem)]
        if len(known) == 1:
            return known[0]
        return stem
    return s


def end_state(state: str) -> EndState | None:
    """The EndState for a Slurm state string; None for COMPLETED and active states."""
    return END_STATES.get(normalize_state(state))


def is_terminal(state: str) -> bool:
    s = normalize_state(state)
    return s == "COMPLETED" or s in END_STATES


def failure_message(state: str, job_id: str | int, log: str | Path | None) -> str:
    """One line for any non-successful state (unknown states get a generic line)."""
    es = end_state(state)
    if es is not None:
        return es.message(job_id, log)
    s = normalize_state(state) or "UNKNOWN"
    return f"Slurm job {job_id} ended in state {s}; log: {log if log not in (None, '') else '(no log path known)'}"




def slurm_log_path(logdir: str | Path, rule: str, job_id: str | int, wildcards: str = "") -> Path:
    """Where snakemake-executor-plugin-slurm writes a job's log.

    ``<logdir>/rule_<rule>/<wildcards>/<jobid>.log``; logdir defaults to
    ``<workdir>/.snakemake/slurm_logs``. ``wildcards`` is the plugin's
    rendering of the job's wildcard values joined with ``_`` ("" when none).
    """
    base = Path(logdir) / f"rule_{rule}"
    if wildcards:
        base = base / wildcards
    return base / f"{job_id}.log"


@dataclass(frozen=True)
class SlurmFailure:
    """One failed Slurm job as Snakemake reported it."""

    rule: str | None
    job_id: str
    state: str
    log: str | None

    def message(self) -> str:
        return failure_message(self.state, self.job_id, self.log)


_ERR_RULE = re.compile(r"^Error in rule (?P<rule>[\w.-]+):", re.M)
_ERR_MSG = re.compile(r"SLURM-job '(?P<job>[\d_]+)' failed(?: due to a node failure)?, "
                      r"SLURM status is: '(?P<state>[A-Z_]+)'")


def parse_snakemake_failures(text: str) -> list[SlurmFailure]:
    """Failed Slurm jobs from Snakemake's output (stderr or .snakemake/log/*.log).

    Reads each ``Error in rule <r>:`` block of the Slurm executor: the job id
    and state from its message line and the Slurm log from its ``log:`` line
    (the path ending in ``/<jobid>.log``). One entry per job id, first seen.
    """
    out: list[SlurmFailure] = []
    seen: set[str] = set()
    starts = [m.start() for m in _ERR_RULE.finditer(text)] + [len(text)]
    for a, b in zip(starts, starts[1:]):
        block = text[a:b]
        m = _ERR_MSG.search(block)
        if m is None:
            continue
        rule = _ERR_RULE.match(block)
        job = m.group("job")
        if job in seen:  # Snakemake repeats error blocks in its summary
            continue
        seen.add(job)
        log = None
        lm = re.search(rf"(\S*/{re.escape(job)}\.log)\b", block)
        if lm:
            log = lm.group(1).rstrip(",")
        out.append(SlurmFailure(rule.group("rule") if rule else None, job, m.group("state"), log))
    return out




def parse_scontrol_job(text: str) -> dict[str, str]:
    """``scontrol show job <id>`` (or ``-o``) output -> {Key: value}.

    Values run to the next `` Key=``; keys that appear more than once keep the
    first value. Useful keys: JobId, JobState, Reason, RunTime, TimeLimit,
    Restarts, NodeList, Partition, StdOut, ExitCode.
    """
    fields: dict[str, str] = {}
    for m in re.finditer(r"(?:^|\s)([A-Za-z][\w:/]*)=(.*?)(?=\s+[A-Za-z][\w:/]*=|\s*$)", text, re.M):
        fields.setdefault(m.group(1), m.group(2).strip())
    return fields


def parse_state_table(text: str) -> dict[str, str]:
    """``<jobid>|<state>`` lines (squeue ``-o '%i|%T'``, sacct ``--parsable2``) -> {jobid: state}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            out[parts[0].strip()] = normalize_state(parts[1])
    return out



PROVENANCE_KEYS = (
    "job_id", "array_job_id", "array_task_id", "step_id", "node", "nodelist", "partition", "account",
    "qos", "cluster", "restart_count", "cpus_per_task", "gpus", "cuda_visible_devices", "submit_host",
)


def _int_or_none(v: str | None) -> int | None:
    try:
        return int(v) if v not in (None, "") else None
    except ValueError:
        return None


def slurm_provenance(environ: Mapping[str, str]) -> dict[str, Any]:
    """The Slurm job a stage ran in, from its environment (all values None outside Slurm).

    Under Snakemake's Slurm executor the job step sees SLURM_JOB_ID,
    SLURMD_NODENAME, SLURM_JOB_NODELIST, SLURM_JOB_PARTITION, SLURM_STEP_ID,
    SLURM_CLUSTER_NAME, SLURM_CPUS_PER_TASK, SLURM_STEP_GPUS and
    CUDA_VISIBLE_DEVICES; the executor strips SLURM_RESTART_COUNT and
    SLURM_JOB_ACCOUNT before its inner srun, so those are None there (read
    ``Restarts=`` from ``scontrol show job`` when needed).
    """
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job_id:
        return dict.fromkeys(PROVENANCE_KEYS)
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    gpus = (environ.get("SLURM_STEP_GPUS") or environ.get("SLURM_JOB_GPUS") or environ.get("SLURM_GPUS_ON_NODE")
            or environ.get("SLURM_GPUS"))
    restart = environ.get("SLURM_RESTART_COUNT")
    return {
        "job_id": job_id,
        "array_job_id": environ.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": environ.get("SLURM_ARRAY_TASK_ID"),
        "step_id": environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID"),
        "node": environ.get("SLURMD_NODENAME") or nodelist,
        "nodelist": nodelist,
        "partition": environ.get("SLURM_JOB_PARTITION"),
        "account": environ.get("SLURM_JOB_ACCOUNT"),
        "qos": environ.get("SLURM_JOB_QOS"),
        "cluster": environ.get("SLURM_CLUSTER_NAME"),
        "restart_count": _int_or_none(restart),
        "cpus_per_task": _int_or_none(environ.get("SLURM_CPUS_PER_TASK")),
        "gpus": gpus,
        "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
        "submit_host": environ.get("SLURM_SUBMIT_HOST"),
    }
