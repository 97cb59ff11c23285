"""Gate tests that ran out of GPU memory beside other xdist workers are decided by a run alone.

The classifier reads real records: an H100 gate run of Liger's TVD tests with 14 workers (every failure CUDA's
out-of-memory error), an H100 candidate gate at 8 workers whose workers went on failing after their first
out-of-memory error (8 of them "CUDA error: unknown error"), and an H200 fixture run whose failure was Triton's
OutOfResources (shared memory), which is the kernel's own and never rerun, and an H100 fixture run of fla's
attnres tests at 14 workers where cuBLAS could not allocate its handle. The runner is exercised on real
pytest-xdist runs of a toy suite whose two tests "run out of memory" only while both run at once (a stand-in for
a GPU: this machine has none)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kgate.testrun import contention
from kgate.testrun import runner as gate

DATA = Path(__file__).parent / "data"


def test_real_h100_out_of_memory_failures_are_the_sharing() -> None:
    rec = json.loads((DATA / "contention" / "h100_tvd_baseline_run1.json").read_text())
    tests = rec["tests"]
    failed = sorted(i for i, t in tests.items() if t["outcome"] == "failed")
    assert len(failed) == 3
    assert contention.sharing_suspects(tests, workers=14) == failed
    # one worker: nothing else held the GPU, so the failure is the test's own
    assert contention.sharing_suspects(tests, workers=1) == []
    # the runtime's wording (torch.AcceleratorError: CUDA error: out of memory), from the same stage's rerun
    again = rec["rerun1_tests"]
    assert "AcceleratorError" in next(iter(again.values()))["message"]
    assert contention.sharing_suspects(again, workers=14) == list(again)


def test_real_h100_failures_after_a_workers_out_of_memory_are_the_sharing() -> None:
    rec = json.loads((DATA / "contention" / "h100_tvd_candidate_gate_w8.json").read_text())
    tests = rec["tests"]
    failed = [i for i, t in tests.items() if t["outcome"] == "failed"]
    oom = [i for i in failed if contention.PATTERN.search(tests[i]["message"])]
    unknown = [i for i in failed if i not in oom]
    assert len(oom) == 122 and len(unknown) == 8
    assert all("CUDA error: unknown error" in tests[i]["message"] for i in unknown)
    # every one of the 8 ran on a worker that had run out of memory before it ...
    for i in unknown:
        before = list(tests)[:list(tests).index(i)]
        assert any(tests[j]["worker"] == tests[i]["worker"] and j in oom for j in before)
    # ... so all 130 are decided alone, where each passed
    suspects = contention.sharing_suspects(tests, rec["workers"])
    assert suspects == sorted(failed)
    assert all(rec["alone"][i]["outcome"] == "passed" for i in oom)
    # without the workers (an older record), only the out-of-memory failures
    bare = {i: {k: v for k, v in t.items() if k != "worker"} for i, t in tests.items()}
    assert contention.sharing_suspects(bare, rec["workers"]) == sorted(oom)


def test_real_h100_cublas_allocation_failures_are_the_sharing() -> None:
    rec = json.loads((DATA / "contention" / "h100_attnres_fixture_run1.json").read_text())
    tests = rec["tests"]
    failed = sorted(i for i, t in tests.items() if t["outcome"] == "failed")
    cublas = [i for i in failed if "CUBLAS_STATUS_ALLOC_FAILED" in tests[i]["message"]]
    assert len(failed) == 11 and len(cublas) == 3
    # each was its worker's first failure: only the wording makes it a suspect
    for i in cublas:
        before = list(tests)[:list(tests).index(i)]
        assert not any(tests[j]["worker"] == tests[i]["worker"] and tests[j]["outcome"] == "failed" for j in before)
        assert "OutOfMemoryError" not in tests[i]["message"] and "out of memory" not in tests[i]["message"]
    assert contention.sharing_suspects(tests, rec["workers"]) == failed
    # what the stage measured: the 8 others passed alone, these 3 in its reruns
    assert sorted(rec["alone"]) == sorted(set(failed) - set(cublas))
    assert all(t["outcome"] == "passed" for t in rec["alone"].values())
    assert sorted(rec["rerun1_tests"]) == sorted(cublas)
    assert all(t["outcome"] == "passed" for t in rec["rerun1_tests"].values())
    # cuDNN's, cuSOLVER's, cuSPARSE's and cuFFT's wording, and a status that is not an allocation failure
    for msg, suspect in [("CUDNN_STATUS_ALLOC_FAILED", True), ("CUSOLVER_STATUS_ALLOC_FAILED", True),
                         ("CUSPARSE_STATUS_ALLOC_FAILED", True), ("CUFFT_ALLOC_FAILED", True),
                         ("CUBLAS_STATUS_EXECUTION_FAILED", False), ("CUBLAS_STATUS_NOT_SUPPORTED", False)]:
        one = {"t": {"outcome": "failed", "worker": "gw0", "message": f"RuntimeError: CUDA error: {msg}"}}
        assert contention.sharing_suspects(one, 2) == (["t"] if suspect else []), msg


def test_a_failure_before_the_workers_out_of_memory_stands() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory"
    tests = {"w0-wrong": {"outcome": "failed", "worker": "gw0", "message": "assert 2 == 3"},
             "w0-oom": {"outcome": "failed", "worker": "gw0", "message": oom},
             "w0-after": {"outcome": "failed", "worker": "gw0", "message": "CUDA error: unknown error"},
             "w0-passed": {"outcome": "passed", "worker": "gw0", "message": None},
             "w1-wrong": {"outcome": "failed", "worker": "gw1", "message": "assert 2 == 3"}}
    assert contention.sharing_suspects(tests, 2) == ["w0-after", "w0-oom"]
    assert contention.sharing_suspects(tests, 1) == []


def test_triton_out_of_resources_is_the_kernels_own() -> None:
    rec = json.loads((DATA / "fixture_state" / "h200_kda_shared_pick" / "fixture_freeze.json").read_text())
    tests = {t["nodeid"]: t for t in rec["data"]["run"]["tests"]}
    bad = [i for i, t in tests.items() if t["outcome"] == "failed"]
    assert bad and "OutOfResources" in tests[bad[0]]["message"]
    assert contention.sharing_suspects(tests, workers=14) == []


def test_settle_keeps_what_the_shared_run_saw() -> None:
    shared = {"a": {"nodeid": "a", "outcome": "failed", "message": "x" * 1000 + "torch.OutOfMemoryError: CUDA out of memory"},
              "b": {"nodeid": "b", "outcome": "failed", "message": "CUDA error: out of memory"},
              "c": {"nodeid": "c", "outcome": "passed", "message": None}}
    alone = {"a": {"nodeid": "a", "outcome": "passed", "message": None}}
    out = contention.settle(shared, alone, ["a", "b"], workers=8)
    assert out["a"]["outcome"] == "passed" and out["a"]["alone"]["outcome"] == "failed"
    assert out["a"]["alone"]["workers"] == 8 and out["a"]["alone"]["message_end"].endswith("CUDA out of memory")
    assert len(out["a"]["alone"]["message_end"]) == 400
    # not finished alone: the shared failure stands
    assert out["b"]["outcome"] == "failed" and out["b"]["alone"]["outcome_alone"] == "not finished"
    assert out["c"] == shared["c"] and contention.settled_ids(out) == ["a", "b"]


# Two test files, one per xdist worker (--dist loadfile), whose tests each hold a marker file while they run; one
# that sees the other's marker within a few seconds raises torch's out-of-memory error, as a test does when the
# other worker holds the GPU's memory. `wrong` fails alone too (a wrong result), `tight` runs out of memory alone.
CONFTEST = '''
import time
from pathlib import Path
import pytest
import torch

HERE = Path(__file__).parent

@pytest.fixture
def hold():
    def _hold(name, other):
        mine = HERE / f".{name}.running"
        mine.write_text("")
        try:
            end = time.time() + 4
            while time.time() < end:
                if (HERE / f".{other}.running").exists():
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.96 GiB.")
                time.sleep(0.05)
        finally:
            mine.unlink()
    return _hold
'''
FILES = {
    "tests/conftest.py": CONFTEST,
    "tests/test_left.py": "def test_left(hold):\n    hold('left', 'right')\n",
    "tests/test_right.py": "def test_right(hold):\n    hold('right', 'left')\n",
    "tests/test_zother.py": (
        "import torch\n"
        "def test_wrong():\n    assert 1 + 1 == 3\n"
        "def test_tight():\n    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 200.00 GiB.')\n"),
}
LEFT, RIGHT = "tests/test_left.py::test_left", "tests/test_right.py::test_right"
WRONG, TIGHT = "tests/test_zother.py::test_wrong", "tests/test_zother.py::test_tight"


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "target"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _spec(workers: int, select: str) -> gate.GateSpec:
    return gate.GateSpec(tests=("tests",), select=select, pytest_args=("--dist", "loadfile"), forbid_env=(),
                         python_path=(".",), cpu=False, cpu_setup=None, test_timeout_s=60, run_timeout_s=180,
                         workers=workers)


def test_a_run_alone_decides_out_of_memory_beside_other_workers(tmp_path: Path) -> None:
    run = gate.run(_spec(2, "left or right or wrong"), _tree(tmp_path), tmp_path / "out", tmp_path / "cache",
                   tag="gate")
    # at least one of the pair ran out beside the other and was decided alone: passed
    settled = contention.settled_ids(run.tests)
    assert set(settled) & {LEFT, RIGHT} and set(settled) <= {LEFT, RIGHT, WRONG}
    for i in set(settled) - {WRONG}:
        assert run.tests[i]["outcome"] == "passed"
        assert run.tests[i]["alone"]["outcome"] == "failed" and run.tests[i]["alone"]["workers"] == 2
    # the outcomes file names each test's worker
    assert all((t.get("alone") or t)["worker"] in ("gw0", "gw1") for t in run.tests.values())
    # a wrong result fails alone too: it stands, so the run is not green (it ran alone only where its worker
    # had run out of memory before it)
    assert run.tests[WRONG]["outcome"] == "failed" and run.bad_ids == [WRONG] and not run.green
    assert ("alone" in run.tests[WRONG]) == (WRONG in settled)
    assert "decided by a run alone (out of GPU memory, or on a worker that had run out, beside 1 other worker(s))" \
        in run.summary()
    assert run.alone_log and Path(run.alone_log).name == "gate-alone.pytest.log"
    alone_cmd = Path(run.alone_log).read_text().splitlines()[0]
    assert " -n " not in alone_cmd and all(i in alone_cmd for i in settled)
    data = run.as_data()
    assert data["alone"] == settled and data["counts"]["passed"] == 2
    # no measured peaks (kgate.testrun.runner.recovery_fit): no fitted rerun, every suspect alone
    assert run.fitted is None and data["fitted"] is None
    assert not (tmp_path / "out" / "gate-fitted.pytest.log").exists()
    assert all(run.tests[i]["alone"]["decided_at_workers"] == 1 for i in settled)


def test_only_sharing_failures_make_a_green_run(tmp_path: Path) -> None:
    run = gate.run(_spec(2, "left or right"), _tree(tmp_path), tmp_path / "out", tmp_path / "cache", tag="gate")
    assert run.exit_code == 1 and contention.settled_ids(run.tests)
    assert run.green and run.bad_ids == []


def test_out_of_memory_alone_is_the_tests_own(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    run = gate.run(_spec(2, "tight"), root, tmp_path / "out", tmp_path / "cache", tag="gate")
    assert run.tests[TIGHT]["outcome"] == "failed" and run.tests[TIGHT]["alone"]["outcome"] == "failed"
    assert not run.green
    # serial from the start: nothing to decide alone
    serial = gate.run(_spec(1, "tight"), root, tmp_path / "out1", tmp_path / "cache", tag="gate")
    assert "alone" not in serial.tests[TIGHT] and serial.alone_log is None
    assert not (tmp_path / "out1" / "gate-alone.pytest.log").exists()


# A crowd of four test files whose tests each "run out of memory" once three of them run at once (a stand-in for
# four tests whose peaks fit two at a time; this machine has no GPU). In a run of 3 or more workers a test waits
# up to 20 s for the crowd and its marker stays, so every test of that run sees it; in a narrower run it holds
# for half a second and leaves.
CROWD = '''
import os
import time
from pathlib import Path
import pytest
import torch

HERE = Path(__file__).parent

@pytest.fixture
def crowd():
    def _crowd(name):
        n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        mine = HERE / f".crowd-{n}-{name}.running"
        mine.write_text("")
        try:
            end = time.time() + (20 if n >= 3 else 0.5)
            while time.time() < end:
                if len(list(HERE.glob(f".crowd-{n}-*.running"))) >= 3:
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB.")
                time.sleep(0.05)
        finally:
            if n < 3:
                mine.unlink()
    return _crowd
'''
CROWD_IDS = [f"tests/test_crowd{k}.py::test_crowd{k}" for k in range(4)]


def test_suspects_with_measured_peaks_rerun_at_the_count_they_fit_before_any_runs_alone(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "tests" / "conftest.py").write_text(CONFTEST + CROWD.replace("import pytest\nimport torch\n", ""))
    for k in range(4):
        (root / "tests" / f"test_crowd{k}.py").write_text(f"def test_crowd{k}(crowd):\n    crowd('c{k}')\n")
    gib = 1 << 30
    # each test's peak from an earlier run: 20 GiB; 50 GiB free fit two at a time (kgate.testrun.memory_fit)
    peaks = tuple((i, 20 * gib) for i in [*CROWD_IDS, TIGHT])
    spec = gate.GateSpec(**{**{f: getattr(_spec(4, "crowd or tight"), f) for f in gate.GateSpec.__slots__},
                            "peaks": peaks, "free_bytes": 50 * gib})
    run = gate.run(spec, root, tmp_path / "out", tmp_path / "cache", tag="gate")
    # the wide run: all four of the crowd ran out beside each other, and tight as ever
    assert sorted(contention.settled_ids(run.tests)) == sorted([*CROWD_IDS, TIGHT])
    assert run.fitted is not None and run.fitted["workers"] == 2 and sorted(run.fitted["ids"]) == sorted(
        [*CROWD_IDS, TIGHT])
    fitted_cmd = Path(run.fitted["log"]).read_text().splitlines()[0]
    assert " -n 2 " in f"{fitted_cmd} " or "-n=2" in fitted_cmd
    # two at a time, the crowd passed: decided there, none of them alone
    for i in CROWD_IDS:
        t = run.tests[i]
        assert t["outcome"] == "passed" and t["alone"]["decided_at_workers"] == 2
        assert t["alone"]["outcome"] == "failed" and t["alone"]["workers"] == 4
    # tight ran out there too, so it went alone, where it ran out again: its own failure, with both runs kept
    t = run.tests[TIGHT]
    assert t["outcome"] == "failed" and t["alone"]["decided_at_workers"] == 1
    assert t["alone"]["workers"] == 2 and t["alone"]["before"]["workers"] == 4
    assert run.alone_log and TIGHT in Path(run.alone_log).read_text().splitlines()[0]
    assert all(i not in Path(run.alone_log).read_text().splitlines()[0] for i in CROWD_IDS)
    assert run.bad_ids == [TIGHT] and not run.green
    assert "decided by a run at 2 worker(s) fitted to their memory peaks or 1 worker (alone)" in run.summary()
    assert "beside 3 other worker(s)" in run.summary()
    assert run.as_data()["fitted"]["workers"] == 2
