"""Shared fixtures: running real campaigns through Snakemake in a scratch workdir.

The suite runs in three pytest-xdist workers (pyproject: ``-n 3 --dist loadscope``) on
CI's two cores: a campaign mostly keeps one core busy, and Slurm-bound tests often
wait for the cluster's status polling, so a third worker fills those waits.
``UNITS`` below says what must stay together on one worker; ``-n 0`` runs
everything serially in the same order.
"""

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

# Work units of the parallel run: every test of a unit runs on one worker, in the order below. Other tests
# form one unit per module. (xdist_group marks with --dist loadgroup do not group under pytest 9.2: xdist
# 3.8 renames items through an attribute pytest no longer reads, pytest-xdist#1386; hence units by node id.)
SLURM_UNIT = "slurm-cluster"       # the local cluster has two CPUs: one Slurm-bound test at a time
RWKV6_UNIT = "rwkv6-workdir"       # the tests sharing the session's default-campaign workdir and its baseline
UNITS: dict[str, tuple[str, ...]] = {
    SLURM_UNIT: ("tests/test_campaign_slurm.py::", "tests/test_slurm_cluster.py::",
                 "tests/test_doctor.py::test_cluster_"),
    RWKV6_UNIT: ("tests/test_bench_campaign.py::", "tests/test_campaign_cpu.py::", "tests/test_report_campaign.py::"),
}

# pytest-xdist sets these in its workers; a gate's own pytest run reads PYTEST_XDIST_WORKER to tell
# whether it is a worker of *its* xdist session (kgate.testrun.interp_plugin), so they must not leak into the
# processes the tests start (Snakemake, stages, gate runs), as they do not in a serial run.
for _name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
    os.environ.pop(_name, None)


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
    from kgate.source import candidate as candidate_mod
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


@pytest.fixture(scope="session")
def fla_sdist() -> Path:
    """The pinned fla-core sdist in the tests' sdist cache (fetched once; safe when workers race)."""
    from kgate import campaign as campaign_mod
    from kgate.source.sdist import fetch_sdist

    pin = campaign_mod.load("chunk-local-cumsum-identity").data["target"]["pypi"]
    return fetch_sdist(pin["requirement"], pin["sha256"], SDIST_CACHE)


def unit_of(nodeid: str) -> str:
    """The work unit of a test: the Slurm or the shared-workdir unit, else its module."""
    for unit, members in UNITS.items():
        if nodeid.startswith(members):
            return unit
    return nodeid.split("::", 1)[0]  # one module per unit: module and class fixtures are set up once


def _member(nodeid: str) -> int:
    """Position of a test's entry in its ``UNITS`` row (0 for tests outside the table)."""
    for members in UNITS.values():
        for i, prefix in enumerate(members):
            if nodeid.startswith(prefix):
                return i
    return 0


def _rank(unit: str, members: list[pytest.Item]) -> int:
    """Longest units first: the table's (in its order), units running a campaign, then the rest."""
    if unit in UNITS:
        return list(UNITS).index(unit)
    return len(UNITS) + (0 if any(i.get_closest_marker("campaign") is not None for i in members) else 1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check that Slurm tests and users of the shared workdir sit in their units; run the long units first."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        unit = unit_of(item.nodeid)
        if item.get_closest_marker("slurm") is not None and unit != SLURM_UNIT:
            raise pytest.UsageError(f"{item.nodeid} uses the Slurm cluster: list it in UNITS[{SLURM_UNIT!r}] "
                                    "(tests/conftest.py)")
        if "rwkv6_workdir" in getattr(item, "fixturenames", ()) and unit != RWKV6_UNIT:
            raise pytest.UsageError(f"{item.nodeid} uses rwkv6_workdir: list it in UNITS[{RWKV6_UNIT!r}] "
                                    "(tests/conftest.py)")
        units.setdefault(unit, []).append(item)
    order = sorted(units, key=lambda u: _rank(u, units[u]))
    items[:] = [item for unit in order for item in sorted(units[unit], key=lambda i: _member(i.nodeid))]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadscope`` with this suite's units (``unit_of``) as its scopes."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)
