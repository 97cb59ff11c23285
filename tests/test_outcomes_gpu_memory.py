"""The outcome record's per-test GPU memory peaks and the return of cached blocks between tests.

This machine has no GPU, so CUDA's side is a fake named as such: ``FAKE_CUDA`` below replaces five functions
of the real ``torch.cuda`` inside the test process (initialised, the two peaks, empty_cache, the peak reset)
with a counter the tests drive. The plugin, pytest, pytest-xdist and the record are real. Without the fake,
torch imported on CPU never initialises CUDA, and the record holds no GPU keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kgate.testrun import runner

REPO = Path(__file__).resolve().parent.parent

FAKE_CUDA = '''
# FAKE CUDA (the machine running kgate's tests has no GPU): a caching allocator reduced to three numbers
import json, os, torch

class FakeCudaAllocator:
    def __init__(self):
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self.empty_cache_calls = 0

    def allocate(self, nbytes):
        self.allocated += nbytes
        self.reserved = max(self.reserved, self.allocated)
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, nbytes):
        self.allocated -= nbytes  # the cached block stays reserved until empty_cache

    def empty_cache(self):
        self.empty_cache_calls += 1
        self.reserved = self.allocated
        with open(os.environ["FAKE_CUDA_LOG"], "a") as fh:
            fh.write(json.dumps({"empty_cache": self.empty_cache_calls, "reserved": self.reserved}) + "\\n")

    def reset_peaks(self):
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

FAKE = FakeCudaAllocator()
torch.cuda.is_initialized = lambda: True
torch.cuda.max_memory_allocated = lambda device=None: FAKE.peak_allocated
torch.cuda.max_memory_reserved = lambda device=None: FAKE.peak_reserved
torch.cuda.empty_cache = FAKE.empty_cache
torch.cuda.reset_peak_memory_stats = lambda device=None: FAKE.reset_peaks()
'''

TESTS = '''
from conftest import FAKE

GB = 1 << 30

def test_big():
    FAKE.allocate(6 * GB)
    FAKE.free(6 * GB)

def test_small_after_big():
    FAKE.allocate(GB // 2)
    FAKE.free(GB // 2)

def test_keeps_one_alive():
    FAKE.allocate(GB)  # held past the test, e.g. a module-level cache of the code under test
'''


def run(folder: Path, *extra: str) -> dict:
    outcomes = folder / "outcomes.json"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "kgate.testrun.outcomes_plugin",
           f"--kgate-outcomes={outcomes}", f"--rootdir={folder}", "-c", str(REPO / "kgate" / "data" / "pytest-empty.ini"),
           *extra, "test_memory.py"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = str(REPO)
    env["FAKE_CUDA_LOG"] = str(folder / "fake_cuda.jsonl")
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(outcomes.read_text())["tests"]


def gate_run(tests: dict) -> runner.GateRun:
    """A gate run holding the recorded tests (the record's other fields do not matter here)."""
    return runner.GateRun(command=["pytest"], exit_code=0, wall_s=1.0, timed_out=False, crashed=False,
                          collected=list(tests), deselected=[], tests=tests, collect_errors=[], running_at_end=None,
                          imports={}, env={}, log="l", outcomes_path="o", junit_path="j")


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_each_test_gets_its_own_peak_and_the_cache_is_returned_after_it(tmp_path: Path, xdist: bool) -> None:
    (tmp_path / "conftest.py").write_text(FAKE_CUDA)
    (tmp_path / "test_memory.py").write_text(TESTS)
    tests = run(tmp_path, *(["-n", "1"] if xdist else ["-n", "0"]))
    gb = 1 << 30
    big, small, alive = (tests[f"test_memory.py::{n}"] for n in ("test_big", "test_small_after_big", "test_keeps_one_alive"))
    assert big["gpu_peak_allocated_bytes"] == big["gpu_peak_reserved_bytes"] == 6 * gb
    # the peaks were reset after test_big and its 6 GB cached block returned: the next test's own figures
    assert small["gpu_peak_allocated_bytes"] == small["gpu_peak_reserved_bytes"] == gb // 2
    assert alive["gpu_peak_allocated_bytes"] == gb
    log = [json.loads(line) for line in (tmp_path / "fake_cuda.jsonl").read_text().splitlines()]
    # one return after every test; what a test keeps alive stays reserved, nothing else
    assert [e["reserved"] for e in log] == [0, 0, gb]
    if xdist:
        assert big["worker"] == "gw0"
    run_ = gate_run(tests)
    assert run_.as_data()["gpu_peak"] == {"tests_measured": 3, "nodeid": "test_memory.py::test_big",
                                          "peak_allocated_bytes": 6 * gb, "peak_reserved_bytes": 6 * gb}


STICKY = '''
import torch
from conftest import FAKE

def test_leaves_a_sticky_error():
    FAKE.allocate(1 << 20)

    def broken(device=None):
        raise RuntimeError("CUDA error: unknown error")

    torch.cuda.max_memory_allocated = broken  # what every CUDA call raises after such an error

def test_after_it():
    pass
'''


def test_a_cuda_error_left_by_a_test_is_recorded_and_the_session_goes_on(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(FAKE_CUDA)
    (tmp_path / "test_memory.py").write_text(STICKY)
    tests = run(tmp_path, "-n", "0")
    first, after = tests["test_memory.py::test_leaves_a_sticky_error"], tests["test_memory.py::test_after_it"]
    assert first["outcome"] == after["outcome"] == "passed"
    assert first["gpu_memory_error"] == after["gpu_memory_error"] == "RuntimeError: CUDA error: unknown error"
    assert "gpu_peak_allocated_bytes" not in first


def test_no_gpu_keys_where_the_tests_never_start_cuda(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("import torch\n")
    (tmp_path / "test_memory.py").write_text("import torch\n\ndef test_cpu():\n    assert torch.ones(3).sum() == 3\n")
    tests = run(tmp_path, "-n", "0")
    assert tests["test_memory.py::test_cpu"]["outcome"] == "passed"
    assert not any(k.startswith("gpu_") for k in tests["test_memory.py::test_cpu"])
    assert not (tmp_path / "fake_cuda.jsonl").exists()
    run_ = gate_run(tests)
    assert run_.gpu_peak is None
