"""Site checks of the Slurm cluster: partition, GPU model (GRES type or feature), status polling, compute node.

Each check asks Slurm's clients (``sinfo``, ``scontrol``, ``sacct``, ``srun``)
through a :data:`~kgate.site.common.Runner` and reads their text output; a
check skips when there is no Slurm client here (``sinfo`` not on PATH) unless
told otherwise (``slurm=``). They read what the cluster says now: a node that
goes down after the check is not seen.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kgate.site.common import DEFAULT_INIT_SECONDS, Check, Runner, Site, run_cmd


def have_slurm() -> bool:
    return shutil.which("sinfo") is not None


def default_partition(run: Runner, timeout: float) -> str | None:
    p = run(["sinfo", "-h", "-o", "%P"], timeout)
    if p.rc != 0:
        return None
    for name in p.out.split():
        if name.endswith("*"):
            return name[:-1]
    return None


USABLE_NODE_STATES = ("idle", "mixed", "mix", "allocated", "alloc", "completing", "comp", "planned", "plnd")


def check_partition(partition: str | None, run: Runner = run_cmd, *, timeout: float = 20.0,
                    slurm: bool | None = None, explicit: bool = False) -> Check:
    """The partition exists, is up, and has at least one node that can run jobs."""
    name = "slurm_partition"
    if not (have_slurm() if slurm is None else slurm):
        if explicit:
            return Check(name, "fail", f"partition '{partition}' asked for, but sinfo is not on PATH (no Slurm client here)")
        return Check(name, "skip", "no Slurm here (sinfo not on PATH): runs use profiles/local")
    if partition is None:
        partition = default_partition(run, timeout)
        if partition is None:
            return Check(name, "fail", "no partition given and the cluster has no default partition: pass --partition")
    p = run(["sinfo", "-h", "-p", partition, "-o", "%P|%a|%D|%T"], timeout)
    if p.rc != 0:
        return Check(name, "fail", f"sinfo failed for partition '{partition}': {p.first_error}")
    rows = [r.split("|") for r in p.out.splitlines() if r.strip()]
    if not rows:
        known = run(["sinfo", "-h", "-o", "%P"], timeout)
        avail = ", ".join(x.rstrip("*") for x in known.out.split()) if known.rc == 0 else "?"
        return Check(name, "fail", f"partition '{partition}' does not exist (partitions here: {avail})")
    avail = {r[1] for r in rows if len(r) > 1}
    if avail != {"up"}:
        return Check(name, "fail", f"partition '{partition}' is not up (availability: {', '.join(sorted(avail))})")
    states = [(r[3].rstrip("*~#!%$@^-+").lower(), int(r[2]) if r[2].isdigit() else 0) for r in rows if len(r) > 3]
    usable = sum(n for s, n in states if s in USABLE_NODE_STATES)
    summary = ", ".join(f"{n} {s}" for s, n in states)
    if usable == 0:
        return Check(name, "fail", f"partition '{partition}' is up but has no usable node ({summary})")
    return Check(name, "pass", f"partition '{partition}' is up ({summary})")


def parse_gres_types(gres: str) -> set[str]:
    """'gpu:h200:8(S:0-1),shard:4' -> {'h200'}; 'gpu:2' -> {''} (untyped GPUs)."""
    types: set[str] = set()
    for item in re.split(r",(?![^()]*\))", gres):
        parts = re.sub(r"\(.*?\)", "", item).strip().split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) >= 3 or (len(parts) == 2 and not parts[1].isdigit()):
            types.add(parts[1].lower())
        else:
            types.add("")
    return types


def check_gpu_model(partition: str | None, gpu_model: str | None, constraint: str | None, *,
                    require_gpu: bool = False, run: Runner = run_cmd, timeout: float = 20.0,
                    slurm: bool | None = None) -> Check:
    """The partition offers the GPU model (GRES type or node feature) and the constraint's features."""
    name = "slurm_gpu"
    if not (have_slurm() if slurm is None else slurm):
        return Check(name, "skip", "no Slurm here (sinfo not on PATH)")
    if partition is None:
        partition = default_partition(run, timeout)
    if partition is None:
        return Check(name, "skip", "no partition to look at")
    if not gpu_model and not constraint and not require_gpu:
        return Check(name, "skip", "no --gpu-model, --constraint or --require-gpu given")
    p = run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N|%G|%f"], timeout)
    if p.rc != 0:
        return Check(name, "fail", f"sinfo failed for partition '{partition}': {p.first_error}")
    types: set[str] = set()
    features: set[str] = set()
    for row in p.out.splitlines():
        cols = row.split("|")
        if len(cols) < 3:
            continue
        types |= parse_gres_types(cols[1])
        features |= {f.strip().lower() for f in cols[2].split(",") if f.strip() and f.strip() != "(null)"}
    shown = f"GPU types: {', '.join(sorted(t or 'untyped' for t in types)) or 'none'}; " \
            f"features: {', '.join(sorted(features)) or 'none'}"
    if not types and (require_gpu or gpu_model):
        return Check(name, "fail", f"partition '{partition}' has no GPUs ({shown})")
    if gpu_model and gpu_model.lower() not in types and gpu_model.lower() not in features:
        return Check(name, "fail", f"GPU model '{gpu_model}' is not offered on partition '{partition}' ({shown})")
    if constraint:
        wanted = {w.lower() for w in re.findall(r"[A-Za-z_][\w.-]*", constraint)}
        missing = sorted(wanted - features)
        if missing:
            return Check(name, "fail", f"constraint '{constraint}' names features not on partition "
                                       f"'{partition}': {', '.join(missing)} ({shown})")
    what = ", ".join(x for x in (f"model '{gpu_model}'" if gpu_model else "",
                                 f"constraint '{constraint}'" if constraint else "") if x) or "GPUs"
    return Check(name, "pass", f"partition '{partition}' offers {what} ({shown})")


def parse_scontrol_config(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def _seconds(v: str | None) -> int | None:
    m = re.match(r"^(\d+)\s*([a-zA-Z]*)", v or "")
    if not m:
        return None
    n, unit = int(m.group(1)), m.group(2).lower()
    return n * 3600 if unit in ("h", "hour", "hours") else n * 60 if unit in ("min", "m") else n


def check_status_polling(status_command: str | None, init_seconds: int = DEFAULT_INIT_SECONDS, *,
                         run: Runner = run_cmd, timeout: float = 20.0, slurm: bool | None = None) -> Check:
    """Snakemake's Slurm executor can learn when jobs end.

    sacct (the executor's default when sacct exists) needs slurmdbd accounting:
    without it every job looks queued forever. squeue needs finished jobs to
    stay visible: MinJobAge >= 3 x slurm-init-seconds-before-status-checks,
    else the executor silently switches back to sacct.
    """
    name = "slurm_status"
    if not (have_slurm() if slurm is None else slurm):
        return Check(name, "skip", "no Slurm here (sinfo not on PATH)")
    cmd = status_command or "sacct"
    p = run(["scontrol", "show", "config"], timeout)
    if p.rc != 0:
        return Check(name, "fail", f"scontrol show config failed: {p.first_error}")
    conf = parse_scontrol_config(p.out)
    storage = conf.get("AccountingStorageType", "")
    min_age = _seconds(conf.get("MinJobAge"))
    need = 3 * init_seconds
    if cmd == "sacct":
        if storage.endswith("/none") or not storage:
            return Check(name, "fail", "status command sacct, but accounting is disabled "
                                       f"(AccountingStorageType={storage or 'unset'}): Snakemake would wait forever; "
                                       "use --slurm-status-command squeue (profiles/slurm-local does)")
        q = run(["sacct", "-n", "-X", "-o", "JobID", "-S", "now-1minutes"], timeout)
        if q.rc != 0:
            return Check(name, "fail", f"status command sacct does not answer: {q.first_error}")
        return Check(name, "pass", f"sacct answers ({storage})")
    if cmd == "squeue":
        if min_age is None or min_age < need:
            fallback = "sacct, which hangs without accounting" if storage.endswith("/none") else "sacct"
            return Check(name, "fail", f"status command squeue needs MinJobAge >= {need} s (3 x {init_seconds} s), "
                                       f"cluster has {conf.get('MinJobAge', 'unset')}: the executor would fall back "
                                       f"to {fallback}")
        return Check(name, "pass", f"squeue polling: MinJobAge {min_age} s >= {need} s")
    return Check(name, "fail", f"unknown status command '{cmd}' (sacct or squeue)")


_COMPUTE_SCRIPT = (
    'r=0; t=$1; shift; '
    'if [ -n "$t" ] && ! test -r "$t"; then echo "unreadable: $t"; r=1; fi; '
    'for d in "$@"; do mkdir -p "$d" 2>/dev/null && f=$(mktemp -p "$d" .kgate-doctor-XXXXXX 2>/dev/null) '
    '&& rm -f "$f" || { echo "unwritable: $d"; r=1; }; done; exit $r'
)


def check_compute_node(site: Site, run: Runner = run_cmd, *, slurm: bool | None = None) -> Check:
    """Target readable and caches writable from a compute node: one short srun job."""
    name = "compute_node"
    if not (have_slurm() if slurm is None else slurm):
        return Check(name, "skip", "no Slurm here (sinfo not on PATH)")
    partition = site.partition or default_partition(run, site.timeout_s)
    if partition is None:
        return Check(name, "skip", "no partition to run on")
    target = str(Path(site.target_path).expanduser().resolve()) if site.target_path else ""
    caches = [str(Path(d).expanduser().resolve()) for d in site.cache_dirs]
    cmd = ["srun", "-p", partition, "--time=1", "-n1", "-c1", "--mem=100", f"--immediate={site.srun_wait_s}",
           "--job-name=kgate-doctor", "--quiet"]
    if site.account:
        cmd.append(f"--account={site.account}")
    cmd += ["sh", "-c", _COMPUTE_SCRIPT, "kgate-doctor", target, *caches]
    p = run(cmd, site.srun_wait_s + site.timeout_s + 30)
    what = " and ".join(x for x in ("target path readable" if target else "", "caches writable") if x)
    if p.rc == 0:
        return Check(name, "pass", f"{what} from a compute node of partition '{partition}'")
    problems = [ln.strip() for ln in p.out.splitlines() if ln.startswith(("unreadable:", "unwritable:"))]
    if problems:
        return Check(name, "fail", f"from a compute node of partition '{partition}': {'; '.join(problems)}")
    err = p.first_error
    if "busy" in err.lower() or "immediate" in err.lower():
        return Check(name, "skip", f"no compute node of partition '{partition}' free within {site.srun_wait_s} s: {err}")
    return Check(name, "fail", f"could not run a job on partition '{partition}': {err}")


def in_slurm_job(job: Mapping[str, Any]) -> bool:
    """True when ``job`` (``kgate.slurm.slurm_provenance``) names a Slurm job."""
    return bool(job.get("job_id"))
