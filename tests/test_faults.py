"""Faults: a killed run leaves nothing running and resumes with the same command; a corrupt record is one
line naming its path.

The guard is exercised on real processes in seconds (the lane-safe locks in tests/test_locks.py); the
last test kills a real Snakemake run of the second-op campaign (chunk_local_cumsum, the smallest; up to
its baseline gate) with SIGKILL to its whole process group while the gate's pytest runs, checks that no
process it started survives and that nothing under results/ changes any more, resumes with the very same
command, and checks that a second Snakemake is refused while that one runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, SDIST_CACHE, Workflow, wait_for

from kgate import workflow
from kgate.errors import IncompleteData

CAMPAIGN = "chunk-local-cumsum-identity"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] if Path(f"/proc/{pid}/stat").exists() else "X"
    return state not in ("Z", "X")


def test_the_guard_kills_its_tree_when_the_process_that_started_it_dies(tmp_path: Path) -> None:
    """A parent starts a guarded sleep tree and is SIGKILLed: the guard and its children end too."""
    pids = tmp_path / "pids.json"
    parent = subprocess.Popen([sys.executable, "-c", f"""
import json, subprocess, sys, time
from kgate.testrun.guard import guarded
with guarded([sys.executable, "-c", "import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"]) as proc:
    time.sleep(1.0)
    kids = [int(p) for p in open(f"/proc/{{proc.pid}}/task/{{proc.pid}}/children").read().split()]
    grand = [int(p) for k in kids for p in open(f"/proc/{{k}}/task/{{k}}/children").read().split()]
    json.dump({{"guard": proc.pid, "tree": kids + grand}}, open({str(pids)!r}, "w"))
    time.sleep(600)
"""], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        got = wait_for(lambda: pids.exists() and pids.stat().st_size and json.loads(pids.read_text()), 60,
                       "the guarded tree to start")
        assert len(got["tree"]) == 2 and all(_alive(p) for p in [got["guard"], *got["tree"]])
        assert os.getpgid(got["guard"]) == got["guard"] != os.getpgid(parent.pid), "a session of its own"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        wait_for(lambda: not any(_alive(p) for p in [got["guard"], *got["tree"]]), 30, "the guarded tree to end")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_the_guard_ends_as_its_command_ended() -> None:
    def guard(code: str) -> int:
        r, w = os.pipe()
        try:
            return subprocess.run([sys.executable, "-m", "kgate.testrun.guard", str(r), "--", sys.executable, "-c",
                                   code], pass_fds=(r,), cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}).returncode
        finally:
            os.close(r)
            os.close(w)
    assert guard("import sys; sys.exit(3)") == 3
    assert guard("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)") == -signal.SIGSEGV
    assert guard("import os, signal; os.kill(os.getpid(), signal.SIGKILL)") == -signal.SIGKILL


def test_a_corrupt_record_is_one_error_naming_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rec = Path("results/c/cpu/candidate_gate/abcdefabcdef/record.json")
    rec.parent.mkdir(parents=True)
    rec.write_text('{"schema": "kgate.stage/1", "stage": "candidate_gate", "sta')
    with pytest.raises(IncompleteData, match=f"record {rec} is truncated or corrupt .*remove it to run its stage"):
        workflow.check_records("c", "cpu", "abcdefabcdef")
    workflow.check_records("c", "cpu", "0" * 12)  # another candidate's records are not this run's


def _processes_in(workdir: Path) -> list[str]:
    """Processes whose working directory or command line is inside ``workdir`` (not this test's own)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(p / "cwd")
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (cwd.startswith(str(workdir)) or str(workdir) in cmd) and _alive(int(p.name)):
            out.append(f"{p.name}: {cmd[:200]}")
    return out


def _tree(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} if root.exists() else {}


@pytest.mark.campaign
def test_a_killed_run_leaves_nothing_running_and_resumes_with_the_same_command(tmp_path: Path, fla_sdist: Path) -> None:
    wf = Workflow(tmp_path / "wd")
    wf.workdir.mkdir()
    config = [f"campaign={CAMPAIGN}"]
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONPATH", None)
    # up to the baseline gate: the stage killed below, rerun by the resumed command
    target = f"results/{CAMPAIGN}/cpu/baseline_tests/record.json"
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(wf.workdir), "--profile",
           str(REPO / "profiles/local"), target, "--config", f"sdist_cache={SDIST_CACHE}", *config]

    def start(log: Path) -> subprocess.Popen[bytes]:
        with log.open("w") as fh:
            return subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)

    def gate_running() -> bool:
        return any("-m pytest" in p for p in _processes_in(wf.workdir))

    first = start(tmp_path / "first.log")
    try:
        # SIGKILL to the whole Snakemake process group while the baseline gate's pytest runs (under its guard,
        # in a session of its own)
        wait_for(gate_running, 600, "the baseline gate's pytest")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        wait_for(lambda: not _processes_in(wf.workdir), 30, "every process of the killed run to end")
        results = wf.workdir / "results"
        before = _tree(results)
        time.sleep(3)
        assert _tree(results) == before, "something still writes into results/"
        assert list((wf.workdir / ".snakemake" / "locks").glob("*.lock")), "the kill left Snakemake's locks behind"
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    # the same command again, no --unlock; while it runs, another Snakemake on the directory is refused
    again = start(tmp_path / "again.log")
    try:
        wait_for(gate_running, 600, "the resumed run's gate")
        # the gate is held (SIGSTOP) while the other Snakemake tries, so it cannot finish first on a loaded machine
        gate = [int(p.split(":", 1)[0]) for p in _processes_in(wf.workdir) if "-m pytest" in p]
        try:
            for pid in gate:
                os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pytest.fail("the resumed run's gate ended before it could be held")
        try:
            refused = wf.run(*config, args=(target,), timeout=600)
        finally:
            for pid in gate:
                os.kill(pid, signal.SIGCONT)
        assert refused.returncode != 0 and "Directory cannot be locked" in refused.stdout + refused.stderr, \
            (refused.stdout + refused.stderr)[-3000:]
        assert again.wait(timeout=1200) == 0, (tmp_path / "again.log").read_text()[-3000:]
    finally:
        if again.poll() is None:
            os.killpg(again.pid, signal.SIGKILL)
    assert "Snakemake lock file(s) that no live run holds" in (tmp_path / "again.log").read_text()
    rec = wf.record(CAMPAIGN, "baseline_tests")
    assert rec["status"] == "pass" and rec["data"]["run"]["counts"]["passed"] > 0
