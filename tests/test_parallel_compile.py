"""Compiling an autotuner's configs ahead, side by side (kgate.testrun.parallel_compile).

The autotuner tests run Triton's real autotuner and compiler (for sm_90, with ptxas) in a subprocess whose
CUDA driver is a named fake (tests/data/no_gpu/nogpu.py: no GPU exists here; a launch is only counted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from kgate.errors import KgateError
from kgate.testrun import parallel_compile, runner

NO_GPU = Path(__file__).parent / "data" / "no_gpu"
SCRIPT = NO_GPU / "autotune_ahead.py"
ROOT = Path(__file__).resolve().parents[1]


def _autotune(tmp_path: Path, mode: str, *extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / f"cache-{mode}")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(NO_GPU), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, str(SCRIPT), mode, *extra], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def triton_cuda() -> None:
    pytest.importorskip("triton")
    pytest.importorskip("triton.backends.nvidia.driver")
    if not parallel_compile.available():
        pytest.skip("this Triton has no AsyncCompileMode")


def test_every_config_is_compiled_before_the_first_benchmark_and_the_pick_is_unchanged(tmp_path, triton_cuda):
    plain = _autotune(tmp_path, "plain")
    ahead = _autotune(tmp_path, "ahead")
    # Triton alone compiles each config at its own benchmark launch: 0, 1, ... kernels there before it
    assert plain["compiled_at_bench"] == list(range(8)) and plain["most_compiles_at_once"] == 1
    # compiled ahead: all eight are there when the first benchmark starts, two compiled at once (two slots)
    assert ahead["compiled_at_bench"] == [8] * 8 and ahead["most_compiles_at_once"] == 2
    assert ahead["compiled"] == plain["compiled"] == 8
    assert ahead["pick"] == plain["pick"]
    assert ahead["tally"]["configs"] == 8
    # compiling ahead launches nothing: eight benchmark launches and the call's own, as without it
    assert ahead["launches"] == plain["launches"] == 9


def test_configs_with_a_pre_hook_compile_at_their_benchmark(tmp_path, triton_cuda):
    # a hook may change the specialisation (a TMA descriptor's block shape): nothing compiled before it runs
    plain = _autotune(tmp_path, "plain", "prehook")
    ahead = _autotune(tmp_path, "ahead", "prehook")
    assert ahead["compiled_at_bench"] == plain["compiled_at_bench"] == list(range(8))
    assert ahead["tally"]["configs"] == 0 and ahead["pick"] == plain["pick"]


def test_inside_a_targets_own_async_compile_nothing_is_compiled_ahead(tmp_path, triton_cuda):
    plain = _autotune(tmp_path, "plain", "nested")
    ahead = _autotune(tmp_path, "ahead", "nested")
    assert "error" not in ahead and ahead["pick"] == plain["pick"]
    assert ahead["tally"]["misses"] == 0 and ahead["launches"] == plain["launches"]


def test_a_pick_read_from_disk_compiles_nothing_ahead(tmp_path, triton_cuda):
    ahead = _autotune(tmp_path, "ahead")
    # the second call found the pick on disk: nothing benchmarked, and the one miss is the first call's
    assert ahead["again"] == {"pick": ahead["pick"], "compiled_at_bench": []}
    assert ahead["tally"]["misses"] == 1


def test_a_config_that_cannot_compile_fails_at_its_benchmark_as_before(tmp_path, triton_cuda):
    plain = _autotune(tmp_path, "plain", "bad")
    ahead = _autotune(tmp_path, "ahead", "bad")
    assert plain["error"] == ahead["error"] == "CompilationError"
    # the twelve configs were submitted; the four of BLOCK=3 failed in the pool and again at their launch
    assert ahead["tally"]["configs"] == 12
    assert ahead["compiled_at_bench"][0] == 8 and plain["compiled_at_bench"][0] == 0


def test_a_config_whose_launch_raises_before_compiling_raises_at_its_benchmark_as_before(tmp_path, triton_cuda):
    plain = _autotune(tmp_path, "plain", "unbound")
    ahead = _autotune(tmp_path, "ahead", "unbound")
    assert "error" in plain and ahead["error"] == plain["error"]
    # the ninth config names a parameter the kernel lacks: left to its benchmark launch, the other eight compiled
    assert ahead["tally"]["deferred"] == 1 and ahead["compiled_at_bench"] == [8] * 9
    assert plain["compiled_at_bench"] == list(range(9))


_HOLDER = textwrap.dedent("""
    import sys, threading, time
    from pathlib import Path
    from kgate.testrun.parallel_compile import slot
    folder, slots, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    def hold():
        with slot(folder, slots):
            t0 = time.monotonic_ns()
            time.sleep(0.3)
            with out.open("a") as fh:
                fh.write(f"{t0} {time.monotonic_ns()}\\n")
    threads = [threading.Thread(target=hold) for _ in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
""")


def test_slots_bound_the_compiles_of_all_processes_together(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path / "slots"), "2",
                               str(tmp_path / f"held-{i}")], env=env) for i in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    spans = [tuple(map(int, line.split())) for i in range(2) for line in (tmp_path / f"held-{i}").read_text().split("\n")
             if line]
    assert len(spans) == 6
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    level, most = 0, 0
    for _, step in edges:
        level += step
        most = max(most, level)
    # six holders in two processes, two slots: never more than two at once, and two at once did happen
    assert most == 2


def test_a_bad_slots_option_is_one_line_naming_it():
    for value in ("/tmp/x:0", "/tmp/x", ":3", "/tmp/x:n"):
        with pytest.raises(KgateError, match="--kgate-compile-slots"):
            parallel_compile.parse(value)
    assert parallel_compile.parse("/tmp/a:b:4") == (Path("/tmp/a:b"), 4)


def _spec(**kw) -> runner.GateSpec:
    base = dict(tests=("t",), select=None, pytest_args=(), forbid_env=(), python_path=(".",), cpu=False,
                cpu_setup=None, test_timeout_s=1, run_timeout_s=1)
    return runner.GateSpec(**{**base, **kw})


def test_the_runner_gives_a_gpu_run_its_own_slots_folder_or_its_callers_and_the_interpreter_none(tmp_path):
    assert runner.compile_slots(_spec(compile_slots=4, cpu=True)).__enter__() is None
    with runner.compile_slots(_spec(compile_slots=0)) as none:
        assert none is None
    with runner.compile_slots(_spec(compile_slots=4)) as value:
        folder, n = parallel_compile.parse(value)
        assert n == 4 and folder.is_dir()
    assert not folder.exists()
    # a caller's slots (shared with its own compiling beside the run) are used as given and left in place
    given = parallel_compile.option(tmp_path, 4)
    with runner.compile_slots(_spec(compile_slots=4), given) as value:
        assert value == given
    assert tmp_path.is_dir()
    # ... never on the interpreter, nor when the campaign compiles serially
    with runner.compile_slots(_spec(compile_slots=0), given) as none:
        assert none is None
    with runner.compile_slots(_spec(compile_slots=4, cpu=True), given) as none:
        assert none is None


def test_the_precompile_workers_autotuner_compiles_its_configs_side_by_side_within_slots(tmp_path, triton_cuda):
    serial = _autotune(tmp_path, "compile-only")
    slotted = _autotune(tmp_path, "compile-only-slots")
    hooked = _autotune(tmp_path, "compile-only-slots", "prehook")
    for out in (serial, slotted, hooked):
        # compile only: all eight configs compiled, each once, nothing benchmarked, launched or picked
        assert out["compiled"] == 8 == out["compile_calls"]
        assert out["compiled_at_bench"] == [] and out["launches"] == 0
        assert out["pick"] is None and out["compile_only"] == {"k": 8}
    assert serial["most_compiles_at_once"] == 1 and serial["tally"]["configs"] == 0
    # within two slots: two at a time, all eight submitted by one miss
    assert slotted["most_compiles_at_once"] == 2
    assert slotted["tally"]["configs"] == 8 and slotted["tally"]["misses"] == 1
    # configs with a pre_hook too: no hook runs in compile only, with or without compiling ahead, so the
    # kernels are the same either way
    assert hooked["most_compiles_at_once"] == 2 and hooked["tally"]["configs"] == 8


_CONFTEST = """
import nogpu
nogpu.install()
"""


def _gate_pytest(tmp_path: Path, name: str, text: str, slots: int, *options: str) -> tuple[Any, dict]:
    """pytest on one test file ``text`` behind the no-GPU driver, with kgate's outcome plugin compiling ahead
    on ``slots`` slots (as a gate run on a GPU loads it): the process and its outcome record."""
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / name).write_text(text)
    out = tmp_path / "o.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(NO_GPU)]), TRITON_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "kgate.testrun.outcomes_plugin",
                          f"--kgate-compile-slots={parallel_compile.option(tmp_path / 'slots', slots)}",
                          f"--kgate-outcomes={out}", *options, "-p", "no:cacheprovider", name],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert out.exists(), res.stdout[-3000:] + res.stderr[-3000:]
    return res, json.loads(out.read_text())


_TALLY_TESTS = """
import torch
from tuned import tuned


def test_a_tuned():
    tuned[(1,)](torch.zeros(64), 64)


def test_b_nothing_to_tune():
    tuned[(1,)](torch.zeros(64), 64)
"""


def test_the_plugin_records_what_was_installed_and_what_each_test_compiled_ahead(tmp_path, triton_cuda):
    started = time.time()
    res, record = _gate_pytest(tmp_path, "test_tally.py", _TALLY_TESTS, 3)
    assert res.returncode == 0, res.stdout[-3000:]
    assert record["started_unix"] >= started - 1
    assert record["compile_ahead"] == {"slots": 3, "installed": True}
    tuned, again = (record["tests"][f"test_tally.py::{n}"] for n in ("test_a_tuned", "test_b_nothing_to_tune"))
    assert (tuned["compile_ahead_misses"], tuned["compile_ahead_configs"], tuned["compile_ahead_deferred"],
            tuned["compile_ahead_abandoned"]) == (1, 3, 0, 0)
    assert tuned["compile_ahead_wall_s"] > 0
    # the second test found the pick in memory: nothing compiled ahead, so no compile_ahead keys
    assert not any(k.startswith("compile_ahead") for k in again)


def test_slots_leave_the_processs_random_numbers_alone(tmp_path):
    import random

    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    with parallel_compile.slot(tmp_path / "slots", 4):
        pass
    assert [random.random() for _ in range(3)] == expected


def test_a_filesystem_without_flock_is_an_error_and_leaks_no_descriptor(tmp_path, monkeypatch):
    import errno

    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "flock not supported")

    monkeypatch.setattr(parallel_compile.fcntl, "flock", no_flock)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(OSError, match="flock not supported"):
            with parallel_compile.slot(tmp_path / "slots", 2):
                pass
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_gpu_stage_gives_its_gate_the_usable_cores_and_the_campaign_can_turn_it_off(tmp_path):
    import argparse

    from kgate import campaign, epochs
    from kgate.device import usable_cores
    from kgate.stages.common import Context

    h200 = {"class": "h200", "name": "NVIDIA H200", "uuid": "GPU-0", "capability": "9.0", "driver": "580.159.04"}
    args = argparse.Namespace(stage="baseline_tests", kernel_cache=str(tmp_path), workers="1", runtime_min=10.0,
                              test_timeout_s=900, force=False)

    def spec(gpu: str, device: dict, off: bool = False) -> runner.GateSpec:
        c = campaign.load("rwkv6-bwd-fusion")
        if off:
            c.data["gate"]["compile_serially"] = True
        return Context(campaign=c, gpu=gpu, candidate=None, args=args, device=device, inputs={}).gate_spec()

    assert spec("h200", h200).compile_slots == usable_cores() >= 1
    assert spec("h200", h200, off=True).compile_slots == 0
    assert spec("cpu", {"class": "cpu", "name": "cpu"}).compile_slots == 0
    # the key's default is off, so a campaign's contract is the one it had before kgate knew the key
    c = campaign.load("rwkv6-bwd-fusion")
    assert c.data["gate"]["compile_serially"] is False
    with_key = epochs.contract(c).digest
    del c.data["gate"]["compile_serially"]
    assert epochs.contract(c).digest == with_key


_TIMEOUT_TESTS = """
import fcntl, os, threading
from pathlib import Path
import pytest, torch
from tuned import other, tuned


def test_1_cold_compiles_outlast_the_timeout(request):
    # another process's compile holds the run's only slot for 8 s, longer than this test's 4 s (which leave a
    # loaded machine time to reach the compile-ahead before the timeout: a 1 s limit once fired before it did)
    folder = Path(request.config.getoption("--kgate-compile-slots").rpartition(":")[0])
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "slot-0", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(8.0, lambda: (fcntl.flock(fd, fcntl.LOCK_UN), os.close(fd))).start()
    tuned[(1,)](torch.zeros(64), 64)


def test_2_an_unrelated_kernel_compiles():
    other[(1,)](torch.zeros(64), B=16)


@pytest.mark.timeout(120)
def test_3_the_interrupted_kernel_compiles_and_tunes():
    tuned[(1,)](torch.zeros(64), 64)
    assert tuned.best_config is not None
"""


def test_a_timeout_during_compiling_ahead_leaves_the_next_tests_of_the_process_sound(tmp_path, triton_cuda):
    res, record = _gate_pytest(tmp_path, "test_timeout.py", _TIMEOUT_TESTS, 1,
                               "--timeout=4", "--timeout-method=signal")
    tests = {i.split("::")[1]: t for i, t in record["tests"].items()}
    assert tests["test_1_cold_compiles_outlast_the_timeout"]["outcome"] == "failed", res.stdout[-3000:]
    assert "Timeout" in tests["test_1_cold_compiles_outlast_the_timeout"]["message"]
    # the cut compile-ahead is counted, with the time it took before the timeout
    cut = tests["test_1_cold_compiles_outlast_the_timeout"]
    assert (cut["compile_ahead_misses"], cut["compile_ahead_abandoned"]) == (1, 1), cut
    assert cut["compile_ahead_wall_s"] >= 0.5
    # Triton's async mode is off again and no placeholder of an abandoned compile is left in a JIT cache
    assert tests["test_2_an_unrelated_kernel_compiles"]["outcome"] == "passed", res.stdout[-3000:]
    assert tests["test_3_the_interrupted_kernel_compiles_and_tunes"]["outcome"] == "passed", res.stdout[-3000:]


def test_the_docs_compile_figures_are_those_of_the_committed_records():
    """docs/cache.md quotes each scripts/bench_parallel_compile.py record: its file, kernels, threads, the
    serial and threaded ranges and the median gain, as the record has them."""
    from decimal import ROUND_HALF_UP, Decimal

    def f(x: float) -> str:  # two decimals, half up, from the record's own digits (1.775 -> 1.78)
        return str(Decimal(str(x)).quantize(Decimal("0.01"), ROUND_HALF_UP))

    doc = " ".join((ROOT / "docs" / "cache.md").read_text().split())
    records = sorted((ROOT / "tests" / "data" / "timing").glob("parallel_compile_*.json"))
    assert len(records) >= 2
    for path in records:
        rec = json.loads(path.read_text())
        assert rec["schema"] == "kgate.bench-parallel-compile/1"
        serial, threaded = sorted(rec["serial_wall_s"]), sorted(rec["threaded_wall_s"])
        quoted = (f"{rec['kernels']} kernels took {f(serial[0])}-{f(serial[-1])} s one at a time and "
                  f"{f(threaded[0])}-{f(threaded[-1])} s on {rec['threads']} threads: {f(rec['speedup_median'])}x "
                  f"(`tests/data/timing/{path.name}`")
        assert quoted in doc, quoted
