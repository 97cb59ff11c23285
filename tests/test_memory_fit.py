"""The rerun of gate tests that ran out of GPU memory, at a worker count fitted to their peaks (kgate.testrun.memory_fit).

The record (tests/data/contention/h100_attnres_peaks.json) is fla's attnres tests on an H100 80GB: cold,
baseline_tests passed 15 of 15 at 14 workers; warm, fixture_freeze's first run at 14 workers had 11 of 15 fail
with out-of-memory errors (8 passed alone, 3 in both reruns). That run did not record the GPU's free memory; a later run of the
same campaign on the same kind of card did (81559 MiB, none used, at baseline_tests' start), and the tests take
that, showing the answer holds across a stated range around it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
from pathlib import Path

import pytest

from kgate import campaign
from kgate import device as device_mod
from kgate.stages.common import Context
from kgate.testrun import memory_fit, runner

DATA = Path(__file__).parent / "data" / "contention" / "h100_attnres_peaks.json"
GIB = 1 << 30


def _record() -> dict:
    return json.loads(DATA.read_text())


#: the H100 80GB's free memory at a stage's start, as a later run recorded it
FREE = _record()["later_run"]["gpu_memory_at_baseline_tests"]["free_bytes"]


def test_real_h100_attnres_peaks_fit_three_workers_where_fourteen_ran_out() -> None:
    rec = _record()
    base = memory_fit.peaks([rec["baseline_tests"]["run"]])
    assert len(base) == 15
    fit = memory_fit.fit(base, FREE)
    assert fit is not None and fit.workers == 3
    # the 3 largest with their overhead fit the budget; the 4th does not
    top = sorted(base.values(), reverse=True)
    assert sum(top[:3]) + 3 * memory_fit.PROCESS_OVERHEAD_BYTES <= fit.budget_bytes
    assert sum(top[:4]) + 4 * memory_fit.PROCESS_OVERHEAD_BYTES > fit.budget_bytes
    assert [b for _, b in fit.deciding] == top[:4]
    # the same answer for any free memory between 74 and 97 GiB
    assert FREE == 81559 << 20
    for free_gib in (74.5, 78.0, 97.0):
        assert memory_fit.fit(base, int(free_gib * GIB)).workers == 3
    # what the 14 workers of fixture_freeze's first run held at once: the tests that failed there needed, alone,
    # far more than the card has, and each that ran out of memory was one of the large ones
    shared = rec["fixture_freeze"]["run1_shared"]
    settled = memory_fit.peaks([rec["fixture_freeze"]["run"]])
    oom = [t["nodeid"] for t in shared if t.get("error") == "OutOfMemoryError"]
    assert len(oom) == 8 and sum(settled[i] for i in oom) > 1.75 * FREE
    assert all(settled[i] > 10 * GIB for i in oom)
    # fixture_freeze's settled run (peaks alone) gives candidate_gate the same bound
    both = memory_fit.peaks([rec["baseline_tests"]["run"], rec["fixture_freeze"]["run"]])
    assert memory_fit.fit(both, FREE).workers == 3
    assert all(both[i] >= base[i] for i in base)


def test_the_fit_is_the_largest_count_whose_largest_peaks_fit() -> None:
    rng = random.Random(7)
    for _ in range(300):
        peaks = {f"t{i}": rng.randrange(0, 30 * GIB) for i in range(rng.randrange(1, 9))}
        free = rng.randrange(0, 100 * GIB)
        fit = memory_fit.fit(peaks, free)
        budget = int(free * memory_fit.HEADROOM)
        # brute force: the worst W tests at once are the W largest, over every subset of that size
        best = 0
        for w in range(1, len(peaks) + 1):
            worst = max(sum(c) for c in itertools.combinations(peaks.values(), w))
            if worst + w * memory_fit.PROCESS_OVERHEAD_BYTES <= budget:
                best = w
        assert fit is not None and fit.workers == max(1, best), (peaks, free)


def test_no_peak_no_bound_and_a_test_too_large_still_gets_one_worker() -> None:
    assert memory_fit.fit({}, 80 * GIB) is None
    assert memory_fit.peaks([{"tests": [{"nodeid": "a", "outcome": "passed"}]}]) == {}
    fit = memory_fit.fit({"huge": 200 * GIB, "small": GIB}, 80 * GIB)
    assert fit.workers == 1 and fit.deciding == (("huge", 200 * GIB),)
    with pytest.raises(ValueError, match="headroom"):
        memory_fit.fit({"a": 1}, 80 * GIB, headroom=0.0)


def _context(workers: str, inputs: dict, memory: device_mod.Memory | None, gpu: str = "h100") -> Context:
    args = argparse.Namespace(stage="fixture_freeze", workers=workers, runtime_min=10.0, test_timeout_s=900,
                              force=False, kernel_cache="work/cache/kernels")
    return Context(campaign=campaign.load("rwkv6-bwd-fusion"), gpu=gpu, candidate=None, args=args,
                   device={"class": gpu, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "capability": "9.0",
                           "driver": "580.159.04"}, inputs=inputs, gpu_memory=memory)


def _spec(workers: int, peaks: dict[str, int], free: int | None) -> runner.GateSpec:
    return runner.GateSpec(tests=("tests",), select=None, pytest_args=(), forbid_env=(), python_path=(".",),
                           cpu=False, cpu_setup=None, test_timeout_s=60, run_timeout_s=60, workers=workers,
                           peaks=tuple(sorted(peaks.items())), free_bytes=free)


def test_the_real_suspects_rerun_at_three_workers_before_any_runs_alone() -> None:
    rec = _record()
    base = memory_fit.peaks([rec["baseline_tests"]["run"]])
    suspects = sorted(t["nodeid"] for t in rec["fixture_freeze"]["run1_shared"] if t["outcome"] == "failed")
    assert len(suspects) == 11
    fit = runner.recovery_fit(_spec(14, base, FREE), suspects)
    assert fit is not None and fit.workers == 3 and fit.tests_measured == 11
    # never more than the run's own workers, nor more than there are suspects
    assert runner.recovery_fit(_spec(2, base, FREE), suspects).workers == 2
    small = sorted(suspects, key=base.get)[:2]
    assert runner.recovery_fit(_spec(14, base, FREE), small).workers == 2
    # a suspect no earlier run measured (a fixture's new test), or no free memory read: all go alone
    assert runner.recovery_fit(_spec(14, base, FREE), [*suspects, "tests/new.py::t"]) is None
    assert runner.recovery_fit(_spec(14, base, None), suspects) is None


def test_a_stage_hands_its_earlier_runs_peaks_and_the_free_memory_to_the_gate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "usable_cores", lambda: 16)
    rec = _record()
    inputs = {"fixture_freeze": {"data": {"run": rec["fixture_freeze"]["run"]}},
              "baseline_tests": {"data": {"run": rec["baseline_tests"]["run"]}}}
    card = device_mod.Memory(FREE, 5 * GIB)
    ctx = _context("auto", inputs, card)
    spec = ctx.gate_spec()
    both = memory_fit.peaks([rec["baseline_tests"]["run"], rec["fixture_freeze"]["run"]])
    assert dict(spec.peaks) == both and spec.free_bytes == FREE - 5 * GIB
    # the first run keeps the cores: its tests compile side by side, and what runs out of memory is rerun
    assert spec.workers == 14
    basis = ctx.workers_basis()
    assert basis["tests_with_peaks"] == 15 and basis["peaks_from"] == ["baseline_tests", "fixture_freeze"]
    assert basis["gpu_memory"]["used_bytes"] == 5 * GIB
    # baseline_tests (no earlier run) and CPU: nothing to size a rerun by
    assert _context("auto", {}, card).gate_spec().peaks == ()
    assert _context("auto", inputs, None).gate_spec().free_bytes is None


FAKE_SMI = '''\
#!{python}
import sys
args = " ".join(sys.argv[1:])
with open({log!r}, "a") as fh:
    fh.write(args + "\\n")
if "--query-gpu=memory.total,memory.used" in args:
    print({answer!r})
'''


@pytest.mark.parametrize(("answer", "expected"), [("81559, 517", (81559 << 20, 517 << 20)), ("[N/A], [N/A]", None),
                                                  ("", None)])
def test_gpu_memory_is_read_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str,
                                            expected: tuple[int, int] | None) -> None:
    # FAKE: a stand-in nvidia-smi on PATH (no GPU here); it answers as a driver does, in MiB
    log = tmp_path / "calls.log"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(FAKE_SMI.format(python=sys.executable, log=str(log), answer=answer))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1b2c3d4e,1")
    mem = device_mod.memory()
    assert (None if mem is None else (mem.total_bytes, mem.used_bytes)) == expected
    if mem is not None:
        assert mem.free_bytes == (81559 - 517) << 20
    assert "--id=GPU-1b2c3d4e" in log.read_text()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert device_mod.memory() is None



def test_the_later_run_at_three_workers_ran_every_fixture_test_with_no_memory_failure() -> None:
    """What three workers did on the card (a run of the first version of this fit, which capped the whole run):
    24 of 24 passed beside each other, none decided alone, and the fixture's new cases are small."""
    later = _record()["later_run"]["fixture_freeze"]
    tests = later["run"]["tests"]
    assert later["workers"] == 3 and len(tests) == 24
    assert all(t["outcome"] == "passed" and "alone" not in t for t in tests)
    cases = [t for t in tests if "test_attnres_cases.py" in t["nodeid"]]
    assert len(cases) == 9 and max(t["gpu_peak_reserved_bytes"] for t in cases) < GIB
    assert memory_fit.fit(memory_fit.peaks([later["run"]]), FREE).workers == 3


def test_the_precompile_worker_gets_what_the_largest_peaks_leave() -> None:
    """Beside 14 workers of the real attnres tests nothing is left for the precompile worker (the old rule gave it
    one 15th of the card, 5.3 GiB); beside 3 the rest of the card minus their peaks and four overheads."""
    rec = _record()
    both = memory_fit.peaks([rec["baseline_tests"]["run"], rec["fixture_freeze"]["run"]])
    top = sorted(both.values(), reverse=True)
    assert memory_fit.beside(both, FREE, 14) == 0 and round(FREE // 15 / GIB, 1) == 5.3
    three = memory_fit.beside(both, FREE, 3)
    assert three == int(FREE * memory_fit.HEADROOM) - sum(top[:3]) - 4 * memory_fit.PROCESS_OVERHEAD_BYTES
    assert 0 < three < memory_fit.beside(both, FREE, 2)
    # more workers than measured tests: every peak counts once, and the overhead only for processes with a test
    small = {"a": GIB, "b": 2 * GIB}
    assert memory_fit.beside(small, 20 * GIB, 8) == int(20 * GIB * 0.9) - 3 * GIB - 3 * GIB
    assert memory_fit.beside({}, FREE, 3) is None
    with pytest.raises(ValueError):
        memory_fit.beside(small, FREE, 0)


def test_candidate_gate_sizes_its_precompile_worker_by_the_measured_peaks(monkeypatch: pytest.MonkeyPatch) -> None:
    from kgate.stages import candidate_gate

    monkeypatch.setattr(runner, "usable_cores", lambda: 16)
    rec = _record()
    inputs = {"fixture_freeze": {"data": {"run": rec["fixture_freeze"]["run"]}},
              "baseline_tests": {"data": {"run": rec["baseline_tests"]["run"]}}}
    ctx = _context("3", inputs, device_mod.Memory(FREE, 0))
    budget, basis = candidate_gate.precompile_budget(ctx)
    both = memory_fit.peaks([rec["baseline_tests"]["run"], rec["fixture_freeze"]["run"]])
    assert budget == memory_fit.beside(both, FREE, 3) and budget > 0
    assert basis is not None and f"3 largest of {len(both)} measured test peaks" in basis and len(both) == 15
    # at 14 workers the largest peaks already fill the card: every row is left to its own stage
    assert candidate_gate.precompile_budget(_context("auto", inputs, device_mod.Memory(FREE, 0)))[0] == 0
    # no peaks (or no memory reading): the worker's own rule (a share of the device's total)
    assert candidate_gate.precompile_budget(_context("3", {}, device_mod.Memory(FREE, 0))) == (None, None)
    assert candidate_gate.precompile_budget(_context("3", inputs, None)) == (None, None)


H200_TVD = Path(__file__).parent / "data" / "contention" / "h200_tvd_peaks.json"


def test_on_the_real_h200_tvd_runs_the_worker_keeps_its_share(monkeypatch: pytest.MonkeyPatch) -> None:
    """Liger's TVD tests on an H200: 200 and 360 tests at 14 workers, none rerun for sharing the GPU, though the
    14 largest peaks sum to twice the card. The worst case would give the worker nothing; the runs as they went
    give it a share of the device's total. A record with a rerun (or run at fewer workers) falls back to the worst
    case."""
    from kgate.stages import candidate_gate

    monkeypatch.setattr(runner, "usable_cores", lambda: 16)  # the H200 machine's 16 cores: 14 workers
    rec = json.loads(H200_TVD.read_text())
    inputs = {s: {"data": {"run": rec[s]["run"], "workers": rec[s]["workers"]}}
              for s in ("baseline_tests", "fixture_freeze")}
    card = rec["baseline_tests"]["workers"]["gpu_memory"]
    memory = device_mod.Memory(card["total_bytes"], card["used_bytes"])
    both = memory_fit.peaks([rec["baseline_tests"]["run"], rec["fixture_freeze"]["run"]])
    top = sorted(both.values(), reverse=True)
    assert len(both) == 360 and round(top[0] / GIB, 1) == 23.5 and round(sum(top[:14]) / GIB, 1) == 293.6
    assert sum(top[:14]) > 2 * memory.free_bytes and memory_fit.beside(both, memory.free_bytes, 14) == 0
    ctx = _context("auto", inputs, memory, gpu="h200")
    assert ctx.workers == 14 and ctx.shared_cleanly_at() == 14
    budget, why = candidate_gate.precompile_budget(ctx)
    assert budget is None and why is not None and "at 14 workers reran no test" in why
    # the same runs judge a gate of fewer workers too, never one of more
    assert candidate_gate.precompile_budget(_context("8", inputs, memory, gpu="h200"))[0] is None
    more = {s: {"data": {**v["data"], "workers": {**v["data"]["workers"], "workers": 6}}} for s, v in inputs.items()}
    assert candidate_gate.precompile_budget(_context("auto", more, memory, gpu="h200"))[0] == 0
    # one test rerun alone in either run: the GPU was short, and the worst case decides
    rerun = json.loads(json.dumps(inputs))
    rerun["fixture_freeze"]["data"]["run"]["alone"] = [{"nodeid": top_id(both)}]
    assert _context("auto", rerun, memory, gpu="h200").shared_cleanly_at() is None
    assert candidate_gate.precompile_budget(_context("auto", rerun, memory, gpu="h200"))[0] == 0


def top_id(test_peaks: dict[str, int]) -> str:
    return max(test_peaks, key=lambda i: test_peaks[i])
