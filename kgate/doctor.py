"""``python -m kgate doctor``: the preflight. Fails in seconds, one line per problem.

Each check is a small function returning a frozen :class:`Check`
(``pass``, ``fail``, ``skip`` or ``unavailable`` with a one-line message)::

    slurm_partition   the partition exists, is up and has a usable node (sinfo)
    slurm_gpu         the GPU model (GRES type or node feature) is offered there
    slurm_status      the executor's status polling will work (sacct needs
                      accounting; squeue needs MinJobAge >= 3 x init seconds)
    target_path       the target clone is readable here
    caches            the cache folders are writable here
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
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kgate.device import Device
from kgate.errors import ConfigError, KgateError

if TYPE_CHECKING:
    from kgate.campaign import Campaign

Status = Literal["pass", "fail", "skip", "unavailable"]
SCHEMA = "kgate.doctor/1"
DEFAULT_CACHE_DIRS = ("work",)
DEFAULT_INIT_SECONDS = 40  # snakemake-executor-plugin-slurm's default


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    message: str


@dataclass(frozen=True)
class Proc:
    """What a command did: rc 127 = not found, 124 = timed out."""

    rc: int
    out: str
    err: str

    @property
    def first_error(self) -> str:
        for line in (self.err + "\n" + self.out).splitlines():
            if line.strip():
                return line.strip()
        return f"exit code {self.rc}"


Runner = Callable[[Sequence[str], float], Proc]


def run_cmd(cmd: Sequence[str], timeout: float) -> Proc:
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return Proc(127, "", f"{cmd[0]}: command not found")
    except subprocess.TimeoutExpired:
        return Proc(124, "", f"{' '.join(cmd[:2])} did not answer within {timeout:g} s")
    return Proc(p.returncode, p.stdout, p.stderr)


@dataclass(frozen=True)
class Site:
    """The facts the checks need (flags win over the profile)."""

    partition: str | None = None
    account: str | None = None
    gpu_model: str | None = None
    constraint: str | None = None
    status_command: str | None = None
    init_seconds: int = DEFAULT_INIT_SECONDS
    target_path: str | None = None
    cache_dirs: tuple[str, ...] = DEFAULT_CACHE_DIRS
    require_gpu: bool = False
    timeout_s: float = 20.0
    srun_wait_s: int = 30
    explicit_partition: bool = False
    profile: str | None = None
    expected_class: str | None = None
    """Device class the run's paths claim (preflight); None: not checked."""
    preflight: bool = False
    """Run as the workflow's first rule (see the module docstring)."""

    @property
    def gpu_required(self) -> bool:
        """--require-gpu, or a preflight for a GPU device class."""
        return self.require_gpu or self.expected_class not in (None, "cpu")


class PreflightError(KgateError):
    """The preflight found a site problem; the message names every failed check."""




def _unquote(v: object) -> str:
    s = str(v).strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        s = s[1:-1]
    return s


def read_profile(path: str | Path) -> dict[str, object]:
    """A Snakemake profile's config.yaml -> {'default-resources': {k: v}, other keys as they are}."""
    import yaml

    p = Path(path)
    if p.is_dir():
        p = p / "config.yaml"
    data = yaml.safe_load(p.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{p}: not a YAML mapping")
    dr = data.get("default-resources") or {}
    if isinstance(dr, list):
        parsed = {}
        for item in dr:
            k, _, v = str(item).partition("=")
            parsed[k.strip()] = _unquote(v)
        dr = parsed
    else:
        dr = {str(k): _unquote(v) for k, v in dr.items()}
    data["default-resources"] = dr
    return data


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
        cache_dirs=tuple(args.cache_dir) if args.cache_dir else DEFAULT_CACHE_DIRS,
        require_gpu=args.require_gpu,
        timeout_s=args.timeout,
        srun_wait_s=args.srun_wait,
        explicit_partition=bool(args.partition),
        profile=str(args.profile) if args.profile else None,
        expected_class=args.gpu,
    )




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




def check_target_path(path: str | None, hint: str = "") -> Check:
    """The target clone exists and is readable here; ``hint`` is appended to a failure."""
    name = "target_path"
    if not path:
        return Check(name, "skip", "no --target-path given")
    p = Path(path).expanduser()
    if not p.exists():
        return Check(name, "fail", f"target path {p} does not exist{f' ({hint})' if hint else ''}")
    if not os.access(p, os.R_OK) or (p.is_dir() and not os.access(p, os.X_OK)):
        return Check(name, "fail", f"target path {p} is not readable by uid {os.geteuid()}")
    if p.is_dir() and not (p / ".git").exists():
        return Check(name, "pass", f"target path {p} is readable (note: not a git clone)")
    return Check(name, "pass", f"target path {p} is readable")


def check_caches(dirs: Sequence[str]) -> Check:
    name = "caches"
    bad: list[str] = []
    for d in dirs:
        p = Path(d).expanduser()
        try:
            p.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=p, prefix=".kgate-doctor-"):
                pass
        except OSError as exc:
            bad.append(f"{p} ({exc.strerror or exc})")
    if bad:
        return Check(name, "fail", f"not writable: {'; '.join(bad)}")
    return Check(name, "pass", f"writable: {', '.join(str(Path(d).expanduser()) for d in dirs)}")


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




CPU_RUN = "CPU run (--gpu cpu): the stages run under Triton's interpreter, no GPU to check"
GPU_REQUIRED = "no NVIDIA GPU visible here, but a GPU is required (--require-gpu, or --gpu names a GPU class)"


def gpu_visible() -> tuple[bool, str]:
    """(True, name) when an NVIDIA GPU is visible here (kgate.device's detection)."""
    from kgate import device

    dev = device.detect()
    return dev.klass != "cpu", dev.name


def find_ncu() -> str | None:
    exe = shutil.which("ncu")
    if exe:
        return exe
    for pattern in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu"):
        hits = sorted(Path("/").glob(pattern.lstrip("/")))
        if hits:
            return str(hits[-1])
    return None


_NCU_PROBE = textwrap.dedent("""\
    import torch
    x = torch.ones(4, device="cuda")
    (x + 1).sum().item()
    torch.cuda.synchronize()
""")


#: what an unreadable or missing ncu means for the campaign (it does not stop the run)
NCU_UNAVAILABLE = ("the ncu stage will record unavailable, so the verdict cannot be GO (INCONCLUSIVE at best); "
                   "ask the admins for counter access (NVreg_RestrictProfilingToAdminUsers=0)")


def check_ncu(*, gpu: tuple[bool, str] | None = None, require_gpu: bool = False, run: Runner = run_cmd,
              timeout: float = 120.0, probe: bool = True) -> Check:
    """ncu exists and may read counters: a quick driver-setting check, then one profiled kernel."""
    name = "ncu"
    has_gpu, gpu_name = gpu if gpu is not None else gpu_visible()
    if not has_gpu:
        if require_gpu:
            return Check(name, "fail", GPU_REQUIRED)
        return Check(name, "skip", "no NVIDIA GPU visible here (CPU host): run doctor inside a GPU job "
                                   "(srun -p <partition> --gpus=1 python -m kgate doctor --require-gpu)")
    exe = find_ncu()
    if exe is None:
        return Check(name, "unavailable", "ncu (Nsight Compute) not found on PATH, in /usr/local/cuda/bin or "
                                          f"/opt/nvidia: {NCU_UNAVAILABLE}")
    ver = run([exe, "--version"], 30)
    version = (ver.out.strip().splitlines() or ["?"])[-1]
    params = Path("/proc/driver/nvidia/params")
    try:
        admin_only = "RmProfilingAdminOnly: 1" in params.read_text()
    except OSError:
        admin_only = False
    if admin_only and os.geteuid() != 0:
        return Check(name, "unavailable", "GPU counters are restricted to admins (RmProfilingAdminOnly=1) and kgate "
                                          f"is not root: ncu would fail with ERR_NVGPUCTRPERM; {NCU_UNAVAILABLE}")
    if not probe:
        return Check(name, "pass", f"{version} at {exe}; counters not restricted to admins")
    with tempfile.TemporaryDirectory(prefix="kgate-doctor-") as tmp:
        script = Path(tmp) / "probe.py"
        script.write_text(_NCU_PROBE)
        p = run([exe, "--clock-control", "none", "--metrics", "sm__cycles_elapsed.avg", "--launch-count", "1",
                 "--target-processes", "all", sys.executable, str(script)], timeout)
    text = p.out + "\n" + p.err
    bad = [ln.strip() for ln in text.splitlines()
           if "ERR_NVGPUCTRPERM" in ln or "==ERROR==" in ln or "No kernels were profiled" in ln]
    if p.rc != 0 or bad or "sm__cycles_elapsed.avg" not in text:
        return Check(name, "unavailable", f"ncu cannot read counters on {gpu_name}: "
                                          f"{bad[0] if bad else p.first_error}; {NCU_UNAVAILABLE}")
    return Check(name, "pass", f"{version} read counters of one kernel on {gpu_name}")


_ARCH_PROBE = textwrap.dedent("""\
    import json, torch, triton, triton.language as tl

    @triton.jit
    def _inc(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr) + 1)

    cap = torch.cuda.get_device_capability()
    x = torch.zeros(1, device="cuda")
    y = (x + 1).item()                      # PyTorch has kernels for this arch
    _inc[(1,)](x)                           # Triton compiles and runs for it
    torch.cuda.synchronize()
    print(json.dumps({"arch": f"sm_{cap[0]}{cap[1]}", "torch": torch.__version__, "triton": triton.__version__,
                      "torch_archs": torch.cuda.get_arch_list(), "ok": y == 1.0 and x.item() == 1.0}))
""")


def check_gpu_arch(*, gpu: tuple[bool, str] | None = None, require_gpu: bool = False, run: Runner = run_cmd,
                   timeout: float = 180.0) -> Check:
    """PyTorch and Triton can target this GPU's architecture (one tiny kernel each)."""
    import json

    name = "gpu_arch"
    has_gpu, gpu_name = gpu if gpu is not None else gpu_visible()
    if not has_gpu:
        if require_gpu:
            return Check(name, "fail", GPU_REQUIRED)
        return Check(name, "skip", "no NVIDIA GPU visible here: the CPU smoke runs Triton's interpreter")
    with tempfile.TemporaryDirectory(prefix="kgate-doctor-") as tmp:
        script = Path(tmp) / "arch_probe.py"
        script.write_text(_ARCH_PROBE)
        p = run([sys.executable, str(script)], timeout)
    info = None
    for line in reversed(p.out.splitlines()):
        if line.startswith("{"):
            try:
                info = json.loads(line)
            except ValueError:
                pass
            break
    if p.rc != 0 or not info or not info.get("ok"):
        err = [ln.strip() for ln in p.err.splitlines() if ln.strip()]
        return Check(name, "fail", f"PyTorch/Triton cannot run on {gpu_name}: {err[-1] if err else p.first_error}")
    return Check(name, "pass", f"{gpu_name} {info['arch']}: torch {info['torch']} and triton {info['triton']} "
                               "compile and run for it")




def check_device_class(expected: str | None, dev: Device) -> Check:
    """This node's device class (``kgate.device.detect``) is the one the run's paths claim.

    Every stage re-checks this and stops with an error on a mismatch; the
    preflight says it before any stage runs.
    """
    name = "device_class"
    if expected is None:
        return Check(name, "skip", "no --gpu given")
    if dev.klass != expected:
        return Check(name, "fail", f"this run's paths are for device class '{expected}' but this node has "
                                   f"'{dev.klass}' ({dev.name}): set --config gpu={dev.klass} or give the GPU "
                                   f"rules '{expected}' nodes (the profile's gpu_model)")
    return Check(name, "pass", f"device class '{expected}' ({dev.name})")


def in_slurm_job(job: Mapping[str, Any]) -> bool:
    """True when ``job`` (``kgate.slurm.slurm_provenance``) names a Slurm job."""
    return bool(job.get("job_id"))


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
    in_job = in_slurm_job(job)
    partition = site.partition or (job.get("partition") if in_job else None)
    if site.preflight and not in_job:
        slurm, part_ok = False, False
        why = "not a Slurm job: this run's stages run with a local executor"
        checks = [Check(n, "skip", why) for n in ("slurm_partition", "slurm_gpu", "slurm_status")]
    else:
        slurm = have_slurm()
        first = check_partition(partition, run, timeout=site.timeout_s, slurm=slurm, explicit=site.explicit_partition)
        checks = [first]
        part_ok = first.status == "pass"
        if slurm and first.status == "fail":
            why = f"skipped: {first.name} failed"
            checks += [Check("slurm_gpu", "skip", why), Check("slurm_status", "skip", why)]
        else:
            if site.expected_class == "cpu" and not (site.gpu_model or site.constraint or site.require_gpu):
                checks.append(Check("slurm_gpu", "skip", CPU_RUN))
            else:
                checks.append(check_gpu_model(partition, site.gpu_model, site.constraint,
                                              require_gpu=site.gpu_required, run=run, timeout=site.timeout_s,
                                              slurm=slurm))
            if site.preflight and site.status_command is None:
                checks.append(Check("slurm_status", "skip", "Snakemake polls job states from the submit host: "
                                                            "check there with python -m kgate doctor --profile "
                                                            "<profile>"))
            else:
                checks.append(check_status_polling(site.status_command, site.init_seconds, run=run,
                                                   timeout=site.timeout_s, slurm=slurm))
    if site.preflight and not site.target_path:
        checks.append(Check("target_path", "skip", "the campaign names no clone (a PyPI target: the target stage "
                                                   "materializes the pinned sdist under work/)"))
    else:
        checks.append(check_target_path(site.target_path, "set --config target_path=<your clone>"
                                        if site.preflight else ""))
    checks.append(check_caches(site.cache_dirs))
    if in_job:
        checks.append(Check("compute_node", "pass", f"the checks ran on compute node {job.get('node')} inside Slurm "
                                                    f"job {job.get('job_id')} (partition {job.get('partition')})"))
    elif slurm and part_ok:
        checks.append(check_compute_node(replace(site, partition=partition), run, slurm=slurm))
    elif site.preflight:
        checks.append(Check("compute_node", "skip", "not a Slurm job: the checks ran where the stages run"))
    else:
        checks.append(Check("compute_node", "skip", "no usable Slurm partition" if slurm else "no Slurm here"))
    if site.expected_class is not None:
        checks.append(check_device_class(site.expected_class, dev))
    if site.expected_class == "cpu" and not site.require_gpu:
        checks += [Check("ncu", "skip", CPU_RUN), Check("gpu_arch", "skip", CPU_RUN)]
        return checks
    gpu = (dev.klass != "cpu", dev.name)
    checks.append(check_ncu(gpu=gpu, require_gpu=site.gpu_required, run=run))
    checks.append(check_gpu_arch(gpu=gpu, require_gpu=site.gpu_required, run=run))
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
    "compute_node": "the checks ran where the stages run",
    "device_class": "this node has the run's device class",
    "ncu": "ncu reads the counters of one kernel",
    "gpu_arch": "PyTorch and Triton compile and run for this GPU",
}


def preflight_dirs(campaign: str, gpu: str) -> tuple[str, ...]:
    """The folders every stage of a campaign on a device class writes: its work
    folder (worktrees, Triton caches), results and logs."""
    from kgate import paths

    return (str(paths.work(campaign, gpu) / "triton"), str(Path("results") / campaign / gpu),
            str(Path("logs") / campaign / gpu))


def target_clone(campaign: Campaign, override: str | None) -> str | None:
    """The user's clone a repo campaign reads (kgate's own clone shares its objects), resolved
    like the target stage does (relative to kgate's root); None for a PyPI campaign."""
    from kgate.campaign import ROOT

    spec = campaign.data["target"].get("repo")
    raw = override or (spec or {}).get("path")
    if not raw:
        return None
    p = Path(raw).expanduser()
    return str(p if p.is_absolute() else ROOT / p)


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
                   cache_dirs=tuple(args.cache_dir) if args.cache_dir else preflight_dirs(camp.name, args.gpu))
    job = slurm_provenance(dict(os.environ)) if job is None else job
    dev = device.detect() if dev is None else dev
    checks = run_checks(site, run, job=job, dev=dev)
    print_checks(checks)
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        where = f"node {job['node']}, Slurm job {job['job_id']}" if in_slurm_job(job) else "no Slurm job"
        raise PreflightError(f"preflight failed ({where}); no stage ran: "
                             + "; ".join(f"{c.name}: {c.message}" for c in failed))
    gates = [Gate(c.name, REQUIREMENTS[c.name], c.message, c.status) for c in checks]
    data = {"schema": SCHEMA, "profile": site.profile, "partition": site.partition or job.get("partition"),
            "target_path": site.target_path, "cache_dirs": list(site.cache_dirs),
            "checks": [asdict(c) for c in checks]}
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
