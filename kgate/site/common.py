"""What every site check shares: its result, the command runner, the site's facts, and profile reading.

A check is a small function returning a frozen :class:`Check` (``pass``,
``fail``, ``skip`` or ``unavailable`` with a one-line message). Checks run
commands through a :class:`Runner` (``run_cmd`` here; tests pass canned
answers), so none of them raises on a missing or hanging tool: rc 127 means
not found, 124 timed out. :class:`Site` holds the facts the checks need, read
from a Snakemake profile (:func:`read_profile`) or given as flags.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Status = Literal["pass", "fail", "skip", "unavailable"]
DEFAULT_CACHE_DIRS = ("work",)
DEFAULT_INIT_SECONDS = 40  # snakemake-executor-plugin-slurm's default


@dataclass(frozen=True)
class Check:
    """One check's outcome: its name, ``pass``/``fail``/``skip``/``unavailable``, and one line saying why."""

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
    """Run ``cmd`` with no stdin, capturing its output; a missing tool is rc 127, a timeout rc 124 (no raise)."""
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
    python_modules: tuple[str, ...] = ()
    """Modules the stages will run through this interpreter (``kgate.site.node.STAGE_MODULES`` names them)."""

    @property
    def gpu_required(self) -> bool:
        """--require-gpu, or a preflight for a GPU device class."""
        return self.require_gpu or self.expected_class not in (None, "cpu")



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

