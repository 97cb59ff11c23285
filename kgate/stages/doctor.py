"""``python -m kgate doctor``: the preflight. Fails in seconds, one line per problem.

This module orders the checks, prints them and writes the preflight's record;
the checks themselves live in ``kgate.site`` (``cluster``: Slurm; ``files``:
target and folders; ``node``: device class, ncu, GPU architecture). Each is a
small function returning a frozen ``kgate.site.common.Check`` (``pass``,
``fail``, ``skip`` or ``unavailable`` with a one-line message)::

    slurm_partition   the partition exists, is up and has a usable node (sinfo)
    slurm_gpu         the GPU model (GRES type or node feature) is offered there
    slurm_status      the executor's status polling will work (sacct needs
                      accounting; squeue needs MinJobAge >= 3 x init seconds)
    target_path       the target clone is readable here
    caches            the cache folders (kgate's work folder, the kernel caches'
                      root: --kernel-cache or the profile's kernel_cache) are
                      writable here
    python_tools      the modules the stages run through this interpreter
                      (pytest and its timeout and xdist plugins; ruff when
                      the candidate's lint is on) are importable here: a
                      missing one fails here, not minutes into the DAG
    compute_node      both again from a compute node of the partition (one
                      short ``srun`` job)
    device_class      this node's device class is the one the run's paths
                      claim (``--gpu``)
    ncu               Nsight Compute is there and may read the GPU's counters
                      (GPU hosts only; skipped with the reason on CPU). Missing
                      ncu or blocked counters (ERR_NVGPUCTRPERM) are
                      ``unavailable``, not a failure: the campaign runs, its
                      ncu stage records ``unavailable`` and the verdict can
                      then not be GO (INCONCLUSIVE at best); doctor says so
    gpu_arch          PyTorch and Triton compile and run for this GPU's
                      architecture (GPU hosts only)

Site facts come from ``--profile`` (its default-resources and
slurm-status-command) unless given as flags. Exit 0 when everything passes or
is skipped, 2 on any failure. ``--json OUT`` writes the checks as
``kgate.doctor/1``.

Inside a Slurm job (``SLURM_JOB_ID`` set) the node running doctor *is* a
compute node: the partition defaults to the job's own, and ``compute_node``
passes without submitting another job (a nested ``srun`` would wait for the
allocation doctor itself holds).

**Preflight** (``--record``): the workflow's first rule
(``workflow/rules/doctor.smk``) runs doctor as a job with the GPU stages'
resources, so it sees what they will see. It reads the target clone's path
from ``--campaign-file``, checks kgate's own folders for this campaign and
device class, and requires a GPU when ``--gpu`` is not ``cpu`` (on CPU the GPU
checks are skipped, not failed). Outside a Slurm job (a local executor) the
Slurm checks are skipped; inside one, status polling is left to the submit
host, where Snakemake polls (``python -m kgate doctor --profile ...``). Any
failed check raises :class:`PreflightError` (``kgate: error: ...``, exit 2,
no record), so the DAG stops before its first stage; otherwise a
``kgate.stage/1`` record (stage ``doctor``, one gate per check, provenance
with the Slurm job) is written.

Typical use::

    python -m kgate doctor --profile profiles/slurm --target-path ~/src/fla
    srun -p gpu --gpus=1 python -m kgate doctor --require-gpu      # on a GPU node
    python -m kgate doctor --record results/C/G/doctor/record.json \
        --campaign-file config/campaigns/C.yaml --gpu G              # the workflow's first rule
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgate import paths
from kgate.device import Device
from kgate.errors import ConfigError, KgateError
from kgate.site import cluster, files, node
from kgate.site.common import DEFAULT_CACHE_DIRS, DEFAULT_INIT_SECONDS, Check, Runner, Site, read_profile, run_cmd

if TYPE_CHECKING:
    from kgate.campaign import Campaign

SCHEMA = "kgate.doctor/1"


class PreflightError(KgateError):
    """The preflight found a site problem; the message names every failed check."""


def site_from_args(args: argparse.Namespace) -> Site:
    res: dict[str, object] = {}
    prof: dict[str, object] = {}
    if args.profile:
        prof = read_profile(args.profile)
        res = prof["default-resources"]  # type: ignore[assignment]
    init = prof.get("slurm-init-seconds-before-status-checks", DEFAULT_INIT_SECONDS)
    return Site(
        partition=args.partition or (str(res["slurm_partition"]) if res.get("slurm_partition") else None),
        account=args.account or (str(res["slurm_account"]) if res.get("slurm_account") else None),
        gpu_model=args.gpu_model or (str(res["gpu_model"]) if res.get("gpu_model") else None),
        constraint=args.constraint or (str(res["constraint"]) if res.get("constraint") else None),
        status_command=args.status_command or (str(prof["slurm-status-command"])
                                               if prof.get("slurm-status-command") else None),
        init_seconds=int(init) if str(init).isdigit() else DEFAULT_INIT_SECONDS,
        target_path=args.target_path,
        cache_dirs=tuple(args.cache_dir) if args.cache_dir else (
            *DEFAULT_CACHE_DIRS, *([str(args.kernel_cache or res["kernel_cache"])]
                                   if (args.kernel_cache or res.get("kernel_cache")) else [])),
        require_gpu=args.require_gpu,
        python_modules=tuple(node.STAGE_MODULES),
        timeout_s=args.timeout,
        srun_wait_s=args.srun_wait,
        explicit_partition=bool(args.partition),
        profile=str(args.profile) if args.profile else None,
        expected_class=args.gpu,
    )


def run_checks(site: Site, run: Runner = run_cmd, *, job: Mapping[str, Any] | None = None,
               dev: Device | None = None) -> list[Check]:
    """Every check in a fixed order (the order of the module docstring).

    ``job`` is this process's Slurm job (``kgate.slurm.slurm_provenance``; read
    from the environment when None) and ``dev`` its ``kgate.device.Device``
    (detected when None). A failed partition check skips the checks that
    need the partition. Inside a Slurm job the partition defaults to the
    job's own and ``compute_node`` passes: this is a compute node. A preflight
    outside a Slurm job skips every Slurm check (a local executor runs the
    stages), and inside one leaves status polling to the submit host unless a
    status command was given.
    """
    from kgate import device
    from kgate.slurm import slurm_provenance

    job = slurm_provenance(dict(os.environ)) if job is None else job
    dev = device.detect() if dev is None else dev
    in_job = cluster.in_slurm_job(job)
    partition = site.partition or (job.get("partition") if in_job else None)
    if site.preflight and not in_job:
        slurm, part_ok = False, False
        why = "not a Slurm job: this run's stages run with a local executor"
        checks = [Check(n, "skip", why) for n in ("slurm_partition", "slurm_gpu", "slurm_status")]
    else:
        slurm = cluster.have_slurm()
        first = cluster.check_partition(partition, run, timeout=site.timeout_s, slurm=slurm,
                                        explicit=site.explicit_partition)
        checks = [first]
        part_ok = first.status == "pass"
        if slurm and first.status == "fail":
            why = f"skipped: {first.name} failed"
            checks += [Check("slurm_gpu", "skip", why), Check("slurm_status", "skip", why)]
        else:
            if site.expected_class == "cpu" and not (site.gpu_model or site.constraint or site.require_gpu):
                checks.append(Check("slurm_gpu", "skip", node.CPU_RUN))
            else:
                checks.append(cluster.check_gpu_model(partition, site.gpu_model, site.constraint,
                                                      require_gpu=site.gpu_required, run=run, timeout=site.timeout_s,
                                                      slurm=slurm))
            if site.preflight and site.status_command is None:
                checks.append(Check("slurm_status", "skip", "Snakemake polls job states from the submit host: "
                                                            "check there with python -m kgate doctor --profile "
                                                            "<profile>"))
            else:
                checks.append(cluster.check_status_polling(site.status_command, site.init_seconds, run=run,
                                                           timeout=site.timeout_s, slurm=slurm))
    if site.preflight and not site.target_path:
        checks.append(Check("target_path", "skip", "the campaign names no clone (a PyPI target: the target stage "
                                                   "materializes the pinned sdist under work/)"))
    else:
        checks.append(files.check_target_path(site.target_path, "set --config target_path=<your clone>"
                                              if site.preflight else ""))
    checks.append(files.check_caches(site.cache_dirs))
    checks.append(node.check_python_modules(site.python_modules))
    if in_job:
        checks.append(Check("compute_node", "pass", f"the checks ran on compute node {job.get('node')} inside Slurm "
                                                    f"job {job.get('job_id')} (partition {job.get('partition')})"))
    elif slurm and part_ok:
        checks.append(cluster.check_compute_node(replace(site, partition=partition), run, slurm=slurm))
    elif site.preflight:
        checks.append(Check("compute_node", "skip", "not a Slurm job: the checks ran where the stages run"))
    else:
        checks.append(Check("compute_node", "skip", "no usable Slurm partition" if slurm else "no Slurm here"))
    if site.expected_class is not None:
        checks.append(node.check_device_class(site.expected_class, dev))
    if site.expected_class == "cpu" and not site.require_gpu:
        checks += [Check("ncu", "skip", node.CPU_RUN), Check("gpu_arch", "skip", node.CPU_RUN)]
        return checks
    visible = (dev.klass != "cpu", dev.name)
    checks.append(node.check_ncu(gpu=visible, require_gpu=site.gpu_required, run=run))
    checks.append(node.check_gpu_arch(gpu=visible, require_gpu=site.gpu_required, run=run))
    return checks


def exit_code(checks: Sequence[Check]) -> int:
    return 2 if any(c.status == "fail" for c in checks) else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="read site facts (partition, account, gpu_model, constraint, status command) "
                             "from this Snakemake profile, e.g. profiles/slurm; flags win")
    parser.add_argument("--partition", default=None, help="Slurm partition to check (default: profile's, else the "
                                                          "cluster's default partition)")
    parser.add_argument("--account", default=None, help="Slurm account for the compute-node job")
    parser.add_argument("--gpu-model", default=None, help="GPU model the partition must offer (GRES type or feature)")
    parser.add_argument("--constraint", default=None, help="node features the partition must offer")
    parser.add_argument("--status-command", choices=("sacct", "squeue"), default=None,
                        help="Snakemake's slurm-status-command (default: profile's, else sacct)")
    parser.add_argument("--target-path", default=None, help="the target clone; must be readable here and on compute nodes")
    parser.add_argument("--cache-dir", action="append", default=None,
                        help=f"cache folder that must be writable (repeatable; default: {', '.join(DEFAULT_CACHE_DIRS)})")
    parser.add_argument("--kernel-cache", default=None,
                        help="root of the kernel caches (default: the profile's kernel_cache; with --record: "
                             f"{paths.KERNEL_CACHE}); must be writable, on storage every node shares")
    parser.add_argument("--require-gpu", action="store_true",
                        help="fail instead of skip when no GPU is visible here or the partition has none")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds for each Slurm query (default 20)")
    parser.add_argument("--srun-wait", type=int, default=30,
                        help="seconds the compute-node job may wait for a node (srun --immediate; default 30)")
    parser.add_argument("--json", metavar="OUT", default=None, help=f"write the checks as {SCHEMA} JSON")
    pre = parser.add_argument_group("preflight (the workflow's first rule, workflow/rules/doctor.smk)")
    pre.add_argument("--record", metavar="PATH", default=None,
                     help="run as the preflight and write a kgate.stage/1 record here when no check fails "
                          "(needs --campaign-file and --gpu); any failure is an error: exit 2, no record")
    pre.add_argument("--campaign-file", default=None,
                     help="campaign YAML: the target clone to check (target.repo.path, or --target-path)")
    pre.add_argument("--gpu", default=None,
                     help="device class the run's paths claim (cpu, h200, ...): this node must have it, and "
                          "a GPU class requires the GPU checks to pass (also without --record)")


def print_checks(checks: Sequence[Check]) -> None:
    """One line per check (status, name, message), then a summary line."""
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{c.status.upper():11}  {c.name:<{width}}  {c.message}")
    failed = [c.name for c in checks if c.status == "fail"]
    limited = [c.name for c in checks if c.status == "unavailable"]
    note = f" (unavailable: {', '.join(limited)})" if limited else ""
    print(f"kgate doctor: {'FAIL: ' + ', '.join(failed) if failed else 'ok'}{note}")


#: what each check requires, as the threshold of its gate in the preflight record
REQUIREMENTS = {
    "slurm_partition": "the partition is up and has a usable node",
    "slurm_gpu": "the partition offers the GPU model (or GPUs)",
    "slurm_status": "Snakemake's status polling sees jobs end",
    "target_path": "the target clone is readable on this node",
    "caches": "kgate's folders are writable on this node",
    "python_tools": "the Python tools the stages run are importable on this node",
    "compute_node": "the checks ran where the stages run",
    "device_class": "this node has the run's device class",
    "ncu": "ncu reads the counters of one kernel",
    "gpu_arch": "PyTorch and Triton compile and run for this GPU",
    "device_peaks": "the device's copy bandwidth and FLOP rates are measured (the roofline bounds' ceilings)",
}



def preflight_dirs(campaign: str, gpu: str, kernel_cache: str | Path = paths.KERNEL_CACHE) -> tuple[str, ...]:
    """The folders every stage of a campaign on a device class writes: its work
    folder (clone, worktrees), results and logs, and the kernel caches' root (shared by campaigns)."""
    return (str(paths.work(campaign, gpu)), str(paths.results(campaign, gpu)), str(paths.logs(campaign, gpu)),
            str(kernel_cache))


def target_clone(campaign: Campaign, override: str | None) -> str | None:
    """The user's clone a repo campaign reads (kgate's own clone shares its objects), resolved
    like the target stage does (relative to the kgate checkout, ``kgate.paths.PROJECT``); None for a PyPI campaign."""
    spec = campaign.data["target"].get("repo")
    raw = override or (spec or {}).get("path")
    if not raw:
        return None
    p = Path(raw).expanduser()
    return str(p if p.is_absolute() else paths.PROJECT / p)


def required_modules(campaign: Campaign) -> tuple[str, ...]:
    """The Python modules this campaign's stages run: every run's (``node.STAGE_MODULES``), and the lint's
    when the candidate's ``lint.ruff`` is on."""
    return (*node.STAGE_MODULES, *(node.LINT_MODULES if campaign.data["candidate"]["lint"]["ruff"] else ()))


def run_preflight(args: argparse.Namespace, run: Runner = run_cmd, *, job: Mapping[str, Any] | None = None,
                  dev: Device | None = None) -> int:
    """The workflow's first rule: every check, then a stage record, or PreflightError.

    Loads the campaign (``--campaign-file``, ``--target-path`` override), checks
    the target clone and :func:`preflight_dirs` unless ``--cache-dir`` names
    others, requires the GPU checks when ``--gpu`` is a GPU class, and writes
    ``--record`` (stage ``doctor``: one gate per check, the checks as data,
    provenance with the Slurm job) only when no check failed. ``job`` and
    ``dev`` as in :func:`run_checks` (read from this process when None).
    """
    from kgate import campaign as campaign_mod
    from kgate import device, provenance
    from kgate.records import Gate, StageResult, build_record, write_json
    from kgate.slurm import slurm_provenance

    if not args.campaign_file or not args.gpu:
        raise ConfigError("doctor --record needs --campaign-file and --gpu")
    clock = provenance.Clock()
    camp = campaign_mod.load(args.campaign_file, {"target_path": args.target_path})
    try:
        site = site_from_args(args)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"doctor: cannot read profile {args.profile}: {exc}") from exc
    site = replace(site, preflight=True, expected_class=args.gpu, target_path=target_clone(camp, args.target_path),
                   python_modules=required_modules(camp),
                   cache_dirs=tuple(args.cache_dir) if args.cache_dir
                   else preflight_dirs(camp.name, args.gpu, args.kernel_cache or paths.KERNEL_CACHE))
    job = slurm_provenance(dict(os.environ)) if job is None else job
    dev = device.detect() if dev is None else dev
    checks = run_checks(site, run, job=job, dev=dev)
    peaks = None
    if args.gpu != "cpu" and not any(c.status == "fail" for c in checks):
        peak_check, peaks = node.measure_peaks(run=run)
        checks.append(peak_check)
    print_checks(checks)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        where = f"node {job['node']}, Slurm job {job['job_id']}" if cluster.in_slurm_job(job) else "no Slurm job"
        raise PreflightError(f"preflight failed ({where}); no stage ran: "
                             + "; ".join(f"{c.name}: {c.message}" for c in failed))
    gates = [Gate(c.name, REQUIREMENTS[c.name], c.message, c.status) for c in checks]
    data = {"schema": SCHEMA, "profile": site.profile, "partition": site.partition or job.get("partition"),
            "target_path": site.target_path, "cache_dirs": list(site.cache_dirs),
            "checks": [asdict(c) for c in checks], "device_peaks": peaks}
    prov = provenance.collect(clock=clock, device=dev.as_dict(),
                              env_patterns=camp.data.get("env", {}).get("record", []), local_rule=False)
    record = build_record(stage="doctor", campaign=camp.name, gpu=args.gpu, candidate=None,
                          result=StageResult(gates=gates, data=data), provenance=prov)
    write_json(Path(args.record), record)
    if args.json:
        write_json(Path(args.json), {"schema": SCHEMA, "ok": True, "profile": site.profile,
                                     "partition": data["partition"], "checks": data["checks"]})
    print(f"kgate doctor: {record['status']}")
    return 0


def run_doctor(args: argparse.Namespace, run: Runner = run_cmd) -> int:
    if getattr(args, "record", None):
        return run_preflight(args, run)
    try:
        site = site_from_args(args)
    except (OSError, ValueError) as exc:
        print(f"kgate doctor: cannot read profile {args.profile}: {exc}", file=sys.stderr)
        return 2
    checks = run_checks(site, run)
    print_checks(checks)
    code = exit_code(checks)
    if args.json:
        from kgate.records import write_json

        write_json(Path(args.json), {"schema": SCHEMA, "ok": code == 0, "profile": site.profile,
                                     "partition": site.partition, "checks": [asdict(c) for c in checks]})
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kgate doctor", description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        return run_doctor(parser.parse_args(argv))
    except KgateError as exc:
        print(f"kgate: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
