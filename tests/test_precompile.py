"""Compilation beside the frozen gate: the compile-only mode, the precompile worker and the rows it covers.

The worker runs for real on CPU under Triton's interpreter against test_worker's toy target. The
interpreter compiles nothing, so what is checked here is what the mode and the worker do around a
compile (each launch counted, nothing run, stop, failure, the record); that the GPU build fills the
kernel cache needs a GPU and is not shown here."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from test_worker import toy_env, toy_init, toy_worktree

from kgate import campaign_checks
from kgate.measure import precompile
from kgate.measure.rows import load_spec, row_table
from kgate.measure.worker import COMPILE_ONLY_NICE
from kgate.testrun import parallel_compile

COMPILE_ONLY_PROBE = '''
import torch, triton, triton.language as tl
from kgate.testrun import compile_only

@triton.jit
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})],
                 key=["n"])
@triton.jit
def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

x = torch.ones(100)
y = torch.zeros(100)
double[(2,)](x, y, 100, BLOCK=64)
assert float(y.sum()) == 200.0, "a plain launch runs"
assert not compile_only.installed()
compile_only.install()
assert compile_only.installed()
y.zero_()
double[(2,)](x, y, 100, BLOCK=64)
double[(2,)](x, y, 100, BLOCK=64)
assert float(y.sum()) == 0.0, "a compile-only launch runs nothing"
tuned[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100)
assert float(y.sum()) == 0.0 and tuned.cache == {}, "no config ran, no pick was made"
print(compile_only.TALLY)
'''


def test_compile_only_counts_launches_and_runs_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO), "TRITON_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", COMPILE_ONLY_PROBE], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # two launches of the plain kernel; every config of the autotuned one compiled once
    assert out.stdout.strip() == "{'double': 2, 'tuned': 3}"


ROWS = [{"name": "small", "N": 4, "D": 8}, {"name": "wide", "N": 2, "D": 96}]


def _start(tmp_path: Path, items: list[precompile.Item], *, share: int = 2, budget_bytes: int | None = None,
           compile_slots: str | None = None, **env: str) -> precompile.Precompile:
    tmp_path.mkdir(parents=True, exist_ok=True)
    wt, inputs = toy_worktree(tmp_path)
    cache = tmp_path / "cache"
    return precompile.start(wt, cache, toy_env(wt, cache, **env), tmp_path / "worker-precompile.log",
                            toy_init(inputs), items, deadline_s=120, share=share, budget_bytes=budget_bytes,
                            compile_slots=compile_slots)


def test_every_row_and_mode_is_compiled_once(tmp_path: Path) -> None:
    pre = _start(tmp_path, [precompile.Item(ROWS[0], ("fwd", "fwdbwd")), precompile.Item(ROWS[1], ("fwd",))])
    assert pre.thread is not None
    pre.thread.join(timeout=120)
    rec = pre.stop()
    assert rec["ended"] == "done", rec
    assert [(c["row"], c["mode"]) for c in rec["calls"]] == [("small", "fwd"), ("small", "fwdbwd"), ("wide", "fwd")]
    # one launch of the toy kernel per forward (its backward launches none), compiled and not run
    assert all(c["compiles"] == {"toy_scale_kernel": 1} for c in rec["calls"])
    assert rec["compiles_by_kernel"] == {"toy_scale_kernel": 3}
    assert rec["worker"]["module_file"].endswith("toyop/__init__.py")
    assert pre.stop() is rec, "stop is idempotent"
    assert pre.arm.proc.poll() is not None, "the worker is gone"


def test_given_the_gate_runs_slots_the_worker_records_them_and_what_it_compiled_side_by_side(tmp_path: Path) -> None:
    slots = parallel_compile.option(tmp_path / "slots", 3)
    pre = _start(tmp_path / "ok", [precompile.Item(ROWS[0], ("fwd",))], compile_slots=slots)
    assert pre.thread is not None
    pre.thread.join(timeout=120)
    # opportunistic work: the worker runs at a lower CPU priority than the gate's processes (this one's)
    stat = Path(f"/proc/{pre.arm.proc.pid}/stat").read_text()
    assert int(stat.rpartition(")")[2].split()[16]) == min(os.nice(0) + COMPILE_ONLY_NICE, 19)
    rec = pre.stop()
    assert rec["ended"] == "done", rec
    assert f"--compile-slots={slots}" in pre.arm.proc.args
    # the toy op's kernel is not autotuned, and the interpreter compiles nothing: nothing went ahead
    assert rec["compile_slots"] == slots and rec["compile_ahead_configs"] == 0 == rec["compile_ahead_misses"]
    assert rec["calls"][0]["compile_ahead_configs"] == 0
    # a bad option ends the worker at its start: recorded, deciding nothing, the option named in its log
    bad = _start(tmp_path / "bad", [precompile.Item(ROWS[0], ("fwd",))], compile_slots="nowhere")
    assert bad.thread is not None
    bad.thread.join(timeout=120)
    rec = bad.stop()
    assert rec["ended"] == "failed" and rec["calls"] == []
    assert "--compile-slots: 'nowhere' is not DIR:N" in (tmp_path / "bad" / "worker-precompile.log").read_text()


def test_the_gates_end_stops_it_and_keeps_what_it_did(tmp_path: Path) -> None:
    # every call of the toy op sleeps 60 s: the gate's run ends first
    pre = _start(tmp_path, [precompile.Item(ROWS[0], ("fwd",))], TOYOP_SLEEP="60")
    time.sleep(3)
    t0 = time.monotonic()
    rec = pre.stop()
    assert time.monotonic() - t0 < 30
    assert rec["ended"] == "stopped" and rec["calls"] == [] and "error" not in rec
    assert pre.arm.proc.poll() is not None


def test_a_failure_is_recorded_and_decides_nothing(tmp_path: Path) -> None:
    pre = _start(tmp_path, [precompile.Item({**ROWS[0], "broken": True}, ("fwd",)),
                            precompile.Item(ROWS[1], ("fwd",))])
    assert pre.thread is not None
    pre.thread.join(timeout=120)
    rec = pre.stop()
    assert rec["ended"] == "failed" and "row small fwd" in rec["error"], rec
    assert rec["calls"] == [], "it stops at the first failure"


def test_the_rows_are_those_later_stages_time_in_their_modes() -> None:
    c = campaign_checks.load("rwkv6-bwd-fusion")
    spec = load_spec(c, "h200")
    assert spec is not None
    table = row_table(spec.explicit_rows)
    items = precompile.items_for(spec, table, c.data["ncu"]["rows"], c.data["ncu"].get("mode"))
    by_row = {i.row["name"]: i.modes for i in items}
    # every row is made once; profile's rows come first, in its order
    assert [i.row["name"] for i in items][:4] == c.data["profile"]["rows"]
    assert set(by_row) == set(table)
    # bench's controls are timed forward-only as well as in the gated mode
    assert by_row["B4_T2048_H16_D128"] == ("fwdbwd", "fwd")
    assert all(by_row[n] == ("fwdbwd",) for n in table if n not in c.data["bench"]["controls"])
    tvd = campaign_checks.load("liger-tvd-fused-scale-1127")
    tspec = load_spec(tvd, "h200")
    assert tspec is not None
    titems = precompile.items_for(tspec, row_table(tspec.explicit_rows), tvd.data["ncu"]["rows"], None)
    # a forward-only bar: every stage calls the forward
    assert {i.modes for i in titems} == {("fwd",)} and len(titems) == 4


def test_a_row_over_its_share_of_gpu_memory_is_skipped_before_or_after_its_inputs_are_made(tmp_path: Path) -> None:
    """The budget is given here (this machine has no GPU memory to divide): ``wide``'s profiled sizes are over
    it before anything is made; ``small``, unprofiled, is made, found over a 1-byte budget and released."""
    wide = precompile.Item(ROWS[1], ("fwd",), input_bytes=6 << 30, peak_bytes=3 << 30)
    assert wide.need_bytes() == 9 << 30 and wide.need_bytes(inputs=100) == 100 + (3 << 30)
    assert precompile.Item(ROWS[0], ("fwd",)).need_bytes() is None
    assert precompile.Item(ROWS[0], ("fwd",)).need_bytes(inputs=100) == 200, "unprofiled: the inputs again"
    pre = _start(tmp_path, [wide, precompile.Item(ROWS[0], ("fwd",))], budget_bytes=8 << 30)
    assert pre.thread is not None
    pre.thread.join(timeout=120)
    rec = pre.stop()
    assert rec["ended"] == "done" and rec["budget_bytes"] == 8 << 30 and rec["budget_from"] == "given"
    assert rec["skipped"] == [{"row": "wide", "need_bytes": 9 << 30, "budget_bytes": 8 << 30,
                               "why": "profiled sizes"}]
    assert [c["row"] for c in rec["calls"]] == ["small"]

    tiny = _start(tmp_path / "tiny", [precompile.Item(ROWS[0], ("fwd",))], budget_bytes=1)
    assert tiny.thread is not None
    tiny.thread.join(timeout=120)
    rec = tiny.stop()
    (skip,) = rec["skipped"]
    assert rec["ended"] == "done" and rec["calls"] == []
    # the toy row's inputs as the worker made them: N x D float32 values and more, counted by their storages
    assert skip["row"] == "small" and skip["why"] == "inputs as made" and skip["need_bytes"] >= 2 * 4 * 8 * 4


def test_without_a_budget_the_share_of_the_devices_memory_is_the_budget(tmp_path: Path) -> None:
    """On CPU the worker reports no device memory: no budget, every row compiled, and the share recorded."""
    pre = _start(tmp_path, [precompile.Item(ROWS[0], ("fwd",), input_bytes=1 << 40, peak_bytes=0)], share=9)
    assert pre.thread is not None
    pre.thread.join(timeout=120)
    rec = pre.stop()
    assert rec["budget_bytes"] is None and rec["budget_from"] is None and rec["share"] == 9 and rec["skipped"] == []
    assert [c["row"] for c in rec["calls"]] == ["small"]


def test_a_rows_bytes_count_each_storage_once() -> None:
    """What a row holds: views share their storage; a sparse tensor counts as its dense size."""
    import torch

    from kgate.measure.tensors import storage_bytes

    x = torch.zeros(64, 32)
    assert storage_bytes(torch, [x, x[1:], x.t(), x.view(-1)]) == 64 * 32 * 4
    y = torch.zeros(10, dtype=torch.float16)
    assert storage_bytes(torch, [x, y]) == 64 * 32 * 4 + 20
    sp = torch.eye(5).to_sparse()
    assert storage_bytes(torch, [sp]) == sp.element_size() * sp.numel()


def _gate_context(tmp_path: Path, gpu: str):
    """candidate_gate's context for ``gpu`` (a named GPU device record: none exists here)."""
    import argparse

    from kgate import campaign
    from kgate.stages.common import Context

    device = {"class": "cpu", "name": "cpu"} if gpu == "cpu" else {
        "class": gpu, "name": "NVIDIA H200", "uuid": "GPU-0", "capability": "9.0", "driver": "580.159.04"}
    args = argparse.Namespace(stage="candidate_gate", kernel_cache=str(tmp_path / "kernels"), workers="2",
                              runtime_min=10.0, test_timeout_s=900, force=False)
    return Context(campaign=campaign.load("rwkv6-bwd-fusion"), gpu=gpu, candidate="c1", args=args,
                   device=device, inputs={})


def test_the_gate_run_and_the_precompile_worker_share_one_set_of_compile_slots(tmp_path, monkeypatch) -> None:
    """The worker gets exactly the slots the gate run compiles in (one folder, one N), stops before any test
    runs alone, and is stopped and recorded however the run ends. The worker and the run are stand-ins here
    (both need a GPU): what is checked is what candidate_gate hands each."""
    from kgate.stages import candidate_gate
    from kgate.testrun import runner

    seen: dict[str, object] = {}

    class Worker:
        stops = 0

        def stop(self) -> dict:
            Worker.stops += 1
            return {"ran": True, "compile_slots": seen["worker"]}

    def start(ctx, wt, slots):
        seen["worker"] = slots
        assert Path(parallel_compile.parse(slots)[0]).parent.exists()
        return Worker(), None

    def run(spec, wt, out_dir, cache, *, tag, before_alone, slots):
        seen.update(run=slots, before_alone=before_alone, tag=tag, cache=cache)
        if seen.get("raise"):
            raise RuntimeError("the gate run died")
        return "the run"

    monkeypatch.setattr(candidate_gate, "start_precompile", start)
    monkeypatch.setattr(runner, "run", run)
    ctx = _gate_context(tmp_path, "h200")
    spec = ctx.gate_spec()
    main, record = candidate_gate.gate_run(ctx, spec, tmp_path)
    assert main == "the run" and seen["tag"] == "gate" and seen["cache"] == ctx.triton_cache
    folder, n = parallel_compile.parse(seen["run"])
    assert seen["worker"] == seen["run"] and n == spec.compile_slots >= 1
    assert seen["before_alone"].__self__.__class__ is Worker  # the worker ends before anything runs alone
    assert record == {"ran": True, "compile_slots": seen["run"]} and Worker.stops == 1
    assert not folder.exists()  # the run's own slots folder goes with it

    seen["raise"] = True
    with pytest.raises(RuntimeError, match="the gate run died"):
        candidate_gate.gate_run(ctx, spec, tmp_path)
    assert Worker.stops == 2


def test_on_cpu_the_gate_runs_without_slots_and_the_record_says_why_no_worker_ran(tmp_path, monkeypatch) -> None:
    from kgate.stages import candidate_gate
    from kgate.testrun import runner

    seen: dict[str, object] = {}

    def run(spec, wt, out_dir, cache, *, tag, before_alone, slots):
        seen.update(slots=slots, before_alone=before_alone)
        return "the run"

    monkeypatch.setattr(runner, "run", run)
    ctx = _gate_context(tmp_path, "cpu")
    main, record = candidate_gate.gate_run(ctx, ctx.gate_spec(), tmp_path)
    assert seen == {"slots": None, "before_alone": None}
    assert record == {"ran": False, "why": "CPU: the Triton interpreter compiles nothing"}
