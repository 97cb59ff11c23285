"""Lane-safe Snakemake locks (kgate.locks) on real Snakemake processes sharing one workdir.

A small Snakefile of the test's own installs kgate's locks exactly as workflow/rules/common.smk does; each
run makes one file, whose name comes from its config, and waits for a ``go`` file before it writes it, so
the test decides when runs are inside their jobs and makes several end at the same moment. Without the
patch Snakemake 9.27.1 removes the whole lock folder when any run ends (so a duplicate of a running lane
is let in), and two runs ending together race in that removal (one exits 1 after its jobs succeeded: seen
in CI with two lanes of one campaign).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, wait_for

REFUSED = "Directory cannot be locked"
SNAKEFILE = """
from kgate import locks
locks.install()

rule all:
    input: f"out/{config['name']}.txt"

rule make:
    output: "out/{name}.txt"
    shell: "while [ ! -e go-{wildcards.name} ] && [ ! -e go ]; do sleep 0.05; done; echo made > {output}"
"""


def _start(wd: Path, name: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "snakemake", "-s", str(wd / "Snakefile"), "-d", str(wd),
                             "--cores", "1", *args, "--config", f"name={name}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 120) -> str:
    out, _ = proc.communicate(timeout=timeout)
    return out


def _owners(wd: Path) -> set[str]:
    """The outputs named by the output locks now in the folder."""
    got = set()
    for f in (wd / ".snakemake" / "locks").glob("*.output.lock") if (wd / ".snakemake" / "locks").is_dir() else []:
        try:
            got |= {ln.strip() for ln in f.read_text().splitlines() if ln.strip()}
        except FileNotFoundError:
            continue
    return got


def _holding(wd: Path, *names: str) -> bool:
    return {f"out/{n}.txt" for n in names} <= _owners(wd)


@pytest.fixture
def wd(tmp_path: Path) -> Path:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    return tmp_path


def test_runs_ending_together_all_succeed_and_each_keeps_its_own_locks(wd: Path) -> None:
    names = [f"lane{i}" for i in range(5)]
    procs = {n: _start(wd, n) for n in names}
    try:
        wait_for(lambda: _holding(wd, *names), 120, "every run to hold its lock")
        # one lane ends while the others run: the others' locks stay, so a duplicate of one is still refused
        (wd / "go-lane0").touch()
        out0 = _finish(procs.pop("lane0"))
        assert "lane0" not in {Path(p).stem for p in _owners(wd)} and _holding(wd, *names[1:]), out0[-2000:]
        dup = _finish(_start(wd, "lane1"))
        assert REFUSED in dup, dup[-2000:]
        assert _holding(wd, *names[1:]), "the refused duplicate removed a lock"
        # the rest end at one moment: none fails in the lock folder's removal
        (wd / "go").touch()
        outs = {n: _finish(p) for n, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    for n, out in outs.items():
        assert procs[n].returncode == 0, out[-3000:]
        assert (wd / "out" / f"{n}.txt").read_text() == "made\n"
    assert not (wd / ".snakemake" / "locks").exists() or not list((wd / ".snakemake" / "locks").iterdir())


def test_a_killed_runs_locks_are_removed_by_the_next_run_while_another_lane_lives(wd: Path) -> None:
    other = _start(wd, "other")
    victim = _start(wd, "victim")
    try:
        wait_for(lambda: _holding(wd, "other", "victim"), 120, "both runs to hold their locks")
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        assert _holding(wd, "victim"), "SIGKILL leaves the lock files (the kernel drops only the flock)"
        (wd / "go-victim").touch()
        again = _start(wd, "victim")
        out = _finish(again)
        assert again.returncode == 0 and REFUSED not in out, out[-3000:]
        assert "removed 2 Snakemake lock file(s) that no live run holds" in out, out[-3000:]
        assert _holding(wd, "other"), "the live lane's locks are not a dead run's"
        # --unlock keeps Snakemake's meaning: every lock goes, a live run's too
        unlock = _finish(_start(wd, "x", "--unlock"))
        assert not _owners(wd), unlock[-2000:]
        (wd / "go").touch()
        assert _finish(other) is not None and other.returncode == 0
    finally:
        for p in (other, victim):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)


def _one_of(wd: Path, copies: int) -> None:
    """Start ``copies`` runs with the same outputs at once: exactly one runs, the others are refused."""
    procs = [_start(wd, "same") for _ in range(copies)]
    try:
        wait_for(lambda: sum(p.poll() is not None for p in procs) >= copies - 1, 120, "the duplicates to be refused")
        time.sleep(0.5)
        running = [p for p in procs if p.poll() is None]
        assert len(running) == 1, [_finish(p)[-1500:] for p in procs if p.poll() is not None]
        assert all(REFUSED in _finish(p) for p in procs if p is not running[0])
        (wd / "go").touch()
        assert _finish(running[0]) is not None and running[0].returncode == 0
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    (wd / "go").unlink()
    (wd / "out" / "same.txt").unlink()


def test_two_duplicates_started_at_once_are_never_both_let_in(wd: Path) -> None:
    """The check and the writing of a run's locks are one step under the mutex: of runs with the same
    outputs started together, exactly one runs (three tries)."""
    for _ in range(3):
        _one_of(wd, 3)
