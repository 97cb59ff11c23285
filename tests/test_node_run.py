"""scripts/node-run.sh: `python` made the stages' interpreter, a missing module named, a detached run polled by
its pid and stopped with its process group. Real processes; the GPU node is this machine (no GPU, no wheels)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO

SCRIPT = REPO / "scripts" / "node-run.sh"
BASE = Path(getattr(sys, "_base_executable", sys.executable))


def node(*args: str, path: str | None = None, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_a_python_of_another_environment_gets_a_wrapper_to_python3(tmp_path: Path) -> None:
    """The device's pitfall: `python` on PATH is a link to an interpreter outside the environment that holds
    torch and kgate's dependencies; python3 is that environment's. setup writes a wrapper, never a link, and the
    wrapper's python imports the stack."""
    links = tmp_path / "links"
    links.mkdir()
    (links / "python").symlink_to(BASE)
    venv_bin = Path(sys.executable).parent
    assert (venv_bin / "python3").exists() and sys.prefix != sys.base_prefix, "the tests run in a virtual env"
    out = node("setup", "--state", str(tmp_path / "s"), path=f"{links}:{venv_bin}:{os.environ['PATH']}")
    assert out.returncode == 0, out.stdout + out.stderr
    wrapper = tmp_path / "s" / "bin" / "python"
    assert wrapper.is_file() and not wrapper.is_symlink()
    assert wrapper.read_text() == f'#!/bin/sh\nexec {venv_bin / "python3"} "$@"\n'
    assert f"runs in {sys.base_prefix}, python3 in {sys.prefix}" in out.stdout
    assert "setup: python is" in out.stdout and "torch" in out.stdout
    prefix = subprocess.run([str(wrapper), "-c", "import sys, kgate; print(sys.prefix)"], capture_output=True,
                            text=True, timeout=60).stdout.strip()
    assert prefix == sys.prefix


def test_a_python3_without_the_stack_fails_naming_the_module(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    (links / "python3").symlink_to(BASE)
    (links / "python").symlink_to(BASE)
    out = node("setup", "--state", str(tmp_path / "s"), path=f"{links}:{os.environ['PATH']}")
    assert out.returncode == 1
    first = next(x for x in (out.stdout + out.stderr).splitlines() if "cannot import" in x)
    # the base interpreter has none of the stack; the first module missing is named, with Python's error
    assert re.match(r"setup: \S+ cannot import torch: ModuleNotFoundError: No module named 'torch'$", first), first


def test_a_detached_run_is_polled_by_its_pid_and_stopped_with_its_group(tmp_path: Path) -> None:
    s = str(tmp_path / "s")
    out = node("launch", "--state", s, "--", "bash", "-c", "echo begun; sleep 3; echo ended; exit 3")
    assert out.returncode == 0 and out.stdout.startswith("launched pid ")
    assert node("wait", "0", "--state", s).stdout.startswith("RUNNING")
    again = node("launch", "--state", s, "--", "true")
    assert again.returncode == 1 and "still runs" in again.stderr
    done = node("wait", "30", "--state", s)
    assert done.stdout.startswith("FINISHED exit 3") and "begun\nended" in done.stdout
    # a run whose children outlive its shell: stop ends the whole group
    marker = f"sleep 97.{os.getpid()}"
    node("launch", "--state", s, "--", "bash", "-c", f"{marker} & {marker}; echo never")
    time.sleep(1)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout
    assert node("stop", "--state", s).stdout.startswith("stopped process group")
    time.sleep(1)
    assert not subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout
    assert node("wait", "1", "--state", s).stdout.startswith("FINISHED exit unknown (killed)")
