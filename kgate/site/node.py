"""Site checks of this node: its device class, the Python tools the stages run, and on a GPU Nsight Compute's
counter access, PyTorch and Triton.

``check_python_modules`` looks each module up with ``importlib.util.find_spec``
in this interpreter, the one the stages run as (the rules call ``python -m
kgate``), so a tool the stages start with ``python -m`` or load as a pytest
plugin is found missing before the first stage rather than minutes into the
DAG. It does not run the tool: a module that is there but broken is left to
the stage that runs it.

``check_ncu`` finds ncu through ``kgate.ncu.lookup`` (the stage's lookup, so
``$KGATE_NCU`` counts here too), reads the driver's counter restriction and
profiles one tiny kernel; ``check_gpu_arch`` compiles and runs one PyTorch and
one Triton kernel in a subprocess. Both need a GPU visible here and skip (or
fail, when a GPU is required) without one.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
import textwrap
from pathlib import Path

from kgate import device
from kgate.device import Device
from kgate.ncu.lookup import admin_only, find_ncu
from kgate.site.common import Check, Runner, run_cmd

CPU_RUN = "CPU run (--gpu cpu): the stages run under Triton's interpreter, no GPU to check"
GPU_REQUIRED = "no NVIDIA GPU visible here, but a GPU is required (--require-gpu, or --gpu names a GPU class)"


def gpu_visible() -> tuple[bool, str]:
    """(True, name) when an NVIDIA GPU is visible here (kgate.device's detection)."""
    dev = device.detect()
    return dev.klass != "cpu", dev.name


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
                                          f"/opt/nvidia, and KGATE_NCU is not set: {NCU_UNAVAILABLE}")
    ver = run([exe, "--version"], 30)
    version = (ver.out.strip().splitlines() or ["?"])[-1]
    if admin_only():
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


#: what each Python module the stages start through this interpreter is for (every run needs these)
STAGE_MODULES = {
    "pytest": "every gate test run (python -m pytest)",
    "pytest_timeout": "the per-test timeout of gate test runs (pytest --timeout)",
    "xdist": "parallel gate test runs (pytest -n)",
}
#: the lint candidate_build runs on changed Python files when the campaign's candidate.lint.ruff is true
LINT_MODULES = {"ruff": "candidate_build's lint (python -m ruff; candidate.lint.ruff: true)"}


def check_python_modules(modules: tuple[str, ...]) -> Check:
    """Every top-level module in ``modules`` is importable by this interpreter (found, not imported)."""
    name = "python_tools"
    if not modules:
        return Check(name, "skip", "no Python tool to look for")
    why = {**STAGE_MODULES, **LINT_MODULES}
    missing = [mod for mod in modules if importlib.util.find_spec(mod) is None]
    if missing:
        return Check(name, "fail", f"{sys.executable} cannot import "
                                   + "; ".join(f"{m} (needed by {why.get(m, 'a stage')})" for m in missing)
                                   + ": install it where the stages run (pip install -e .)")
    return Check(name, "pass", f"{', '.join(modules)} importable by {sys.executable}")


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


def measure_peaks(*, run: Runner = run_cmd, timeout: float = 300.0) -> tuple[Check, dict | None]:
    """The device's measured copy bandwidth and matrix-product FLOP rates (``python -m kgate.measure.peaks``),
    for the roofline bounds of profile_baseline. A probe that fails is ``unavailable`` (profile_baseline then
    measures the peaks itself), never a failed preflight."""
    name = "device_peaks"
    p = run([sys.executable, "-m", "kgate.measure.peaks"], timeout)
    info = None
    for line in reversed(p.out.splitlines()):
        if line.startswith("{"):
            try:
                info = json.loads(line)
            except ValueError:
                info = None
            break
    if p.rc != 0 or not info or not {"device", "bandwidth", "flops"} <= set(info):
        err = [ln.strip() for ln in p.err.splitlines() if ln.strip()]
        why = err[-1] if err else (p.first_error if p.rc != 0 else "no peak document in its output")
        return Check(name, "unavailable", f"the peak probes did not run: {why}"), None
    rates = info["flops"]["flops_per_s"]
    text = ", ".join(f"{k} {v / 1e12:.0f}" for k, v in rates.items())
    return Check(name, "pass", f"{info['device']}: copy {info['bandwidth']['bytes_per_s'] / 1e9:.0f} GB/s; "
                               f"TFLOP/s {text}"), info
