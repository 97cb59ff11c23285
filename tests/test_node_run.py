"""scripts/node-run.sh: `python` made the stages' interpreter, a missing module named, a detached run polled by
its pid and stopped with its process group. Real processes; the GPU node is this machine (no GPU, no wheels)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import zipfile
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


def _wheel(folder: Path, name: str, version: str) -> Path:
    """A real (pure-Python) wheel made by hand: one module and its dist-info; pip installs it as any other."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    files = {f"{name.replace('-', '_')}.py": f"VERSION = {version!r}\n",
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{f},,\n" for f in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for f, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            z.writestr(f, text)
    return path


def test_wheels_of_distributions_the_environment_has_are_skipped_unless_replaced(tmp_path: Path) -> None:
    """A wheelhouse made without the node's list (``node_wheels.py`` without ``--node-has``) may carry
    packages the node has: the node's version wins and each skipped one is named; ``--replace-installed``
    installs them. A fresh virtual environment stands for the node (it lacks torch, so the stack's import check
    then fails, after the wheels)."""
    env = tmp_path / "env"
    subprocess.run([str(BASE), "-m", "venv", str(env)], check=True, timeout=300)
    bin_ = env / "bin"
    path = f"{bin_}:{os.environ['PATH']}"

    def version(dist: str) -> str:
        return subprocess.run([str(bin_ / "python3"), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                              capture_output=True, text=True, timeout=60).stdout.strip()

    pip_before = version("pip")
    first, second = tmp_path / "w1", tmp_path / "w2"
    first.mkdir(), second.mkdir()
    _wheel(first, "kgate-probe", "1.0")
    _wheel(first, "Pip", "0.1")  # the environment's pip under another spelling: never installed over it
    out = node("setup", "--wheels", str(first), "--state", str(tmp_path / "s"), path=path)
    assert out.returncode == 1, out.stdout + out.stderr  # no torch in the fresh environment
    assert f"setup: skipped 1 wheel(s) of distributions {bin_ / 'python3'} already has" in out.stdout
    assert out.stdout.splitlines()[0].endswith(": pip"), out.stdout
    assert f"setup: installed 1 wheel(s) from {first}" in out.stdout
    assert version("kgate-probe") == "1.0" and version("pip") == pip_before

    _wheel(second, "kgate_probe", "2.0")
    out = node("setup", "--wheels", str(second), "--state", str(tmp_path / "s"), path=path)
    assert "skipped 1 wheel(s)" in out.stdout and "setup: installed" not in out.stdout, out.stdout
    assert version("kgate-probe") == "1.0"
    out = node("setup", "--wheels", str(second), "--replace-installed", "--state", str(tmp_path / "s"), path=path)
    assert "skipped" not in out.stdout and f"setup: installed 1 wheel(s) from {second}" in out.stdout, out.stdout
    assert version("kgate-probe") == "2.0"
