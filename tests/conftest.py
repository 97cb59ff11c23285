"""Shared fixtures: running real campaigns through Snakemake in a scratch workdir."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SDIST_CACHE = REPO / "work" / "cache" / "sdists"


@dataclass(frozen=True)
class Workflow:
    """A Snakemake working directory for kgate's Snakefile (results/, work/, reports/ live there)."""

    workdir: Path

    def run(self, *config: str, args: tuple[str, ...] = (), profile: str = "profiles/local",
            timeout: int = 1800, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env.update(extra_env or {})
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        env.pop("PYTHONPATH", None)
        cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(self.workdir),
               "--profile", str(REPO / profile), *args,
               "--config", f"sdist_cache={SDIST_CACHE}", *config]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        (self.workdir / "last-snakemake.log").write_text(proc.stdout + proc.stderr)
        return proc

    def record(self, campaign: str, stage: str, cand: str | None = None, gpu: str = "cpu") -> dict:
        base = self.workdir / "results" / campaign / gpu / stage
        path = (base / cand if cand else base) / "record.json"
        return json.loads(path.read_text())

    def verdict(self, campaign: str, gpu: str = "cpu") -> dict:
        return json.loads((self.workdir / "reports" / campaign / gpu / "verdict.json").read_text())

    def candidate_ids(self, campaign: str, stage: str, gpu: str = "cpu") -> set[str]:
        base = self.workdir / "results" / campaign / gpu / stage
        return {p.name for p in base.iterdir()} if base.exists() else set()


def candidate_id(campaign: str, candidate: str | None = None) -> str:
    from kgate import campaign as campaign_mod
    from kgate import candidate as candidate_mod
    return candidate_mod.identity(campaign_mod.load(campaign, {"candidate": candidate}))


def ran_rules(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """Names of the rules Snakemake executed, from its log."""
    out = []
    for line in (proc.stdout + proc.stderr).splitlines():
        for kind in ("localcheckpoint ", "checkpoint ", "localrule ", "rule "):
            if line.startswith(kind) and line.endswith(":"):
                out.append(line[len(kind):-1])
    return out


def slurm_up() -> bool:
    """A Slurm cluster answers here with a usable node (CI starts one: scripts/slurm-local.sh)."""
    if shutil.which("sinfo") is None:
        return False
    proc = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    return proc.returncode == 0 and any(state in proc.stdout for state in ("idle", "mix", "alloc"))


def job_state(job_id: str) -> str:
    """A Slurm job's state as squeue reports it (all states), '' once it left squeue."""
    p = subprocess.run(["squeue", "-h", "-j", job_id, "--states=all", "-o", "%T"], capture_output=True, text=True,
                       timeout=30)
    return p.stdout.strip()


def wait_for(pred, timeout_s: float, what: str, step: float = 0.5):
    """Poll ``pred`` until it returns something truthy (returned), else fail naming ``what``."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


@pytest.fixture(scope="session")
def rwkv6_workdir(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    """One workdir shared by the default campaign's tests, so baseline evidence is reused across candidates."""
    return Workflow(tmp_path_factory.mktemp("rwkv6-bwd-fusion"))
