"""The measurement worker (``python -m kgate.measure.worker``): protocol, seeded inputs, failures, census.

Every test runs real worker processes on CPU under Triton's interpreter against
a toy target written here: one Triton kernel (``toy_scale_kernel``) inside an
autograd function, so the interpreter's launch census, leaf gradients and
profiler memory events are all exercised in a few seconds.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

from kgate.errors import ProvenanceMismatch
from kgate.measure import arms
from kgate.measure.arms import Arm, Deadline, WorkerFailure
from kgate.measure.rows import eval_expression
from kgate.measure.telemetry import foreign_processes

TOY_PACKAGE = '''\
import os
import time

import torch
import triton
import triton.language as tl


@triton.jit
def toy_scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.empty_like(x)
        toy_scale_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y

    @staticmethod
    def backward(ctx, g):
        return g * 2.0


def op(x, w, *, bias=None):
    delay = float(os.environ.get("TOYOP_SLEEP", "0"))
    if delay:
        time.sleep(delay)
    y = _Scale.apply(x) * w
    if bias is not None:
        y = y + bias
    return y.sum(-1), y
'''

TOY_INPUTS = '''\
import torch


def make_inputs(row, *, device, dtype, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(row["N"], row["D"], generator=gen, device=device, dtype=dtype).requires_grad_(True)
    w = torch.randn(row["D"], generator=gen, device=device, dtype=dtype)
    kwargs = {"bias": "not a tensor"} if row.get("broken") else {}
    return (x, w), kwargs
'''


def toy_worktree(root: Path) -> tuple[Path, Path]:
    """A worktree holding the toy package, and the campaign-side input generator beside it."""
    wt = root / "wt"
    (wt / "toyop").mkdir(parents=True)
    (wt / "toyop" / "__init__.py").write_text(TOY_PACKAGE)
    inputs = root / "toy_inputs.py"
    inputs.write_text(TOY_INPUTS)
    return wt, inputs


def toy_env(wt: Path, cache: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(wt), str(REPO)])
    env.update(TRITON_CACHE_DIR=str(cache), TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


def toy_init(inputs: Path, seed: int = 7) -> dict:
    return {"callable": "toyop:op", "inputs_file": str(inputs), "dtype": "float32", "seed": seed,
            "differentiate": [0], "cpu": True, "cpu_setup": None, "flush_bytes": 4096, "env_record": ["TOY*"]}


def start(name: str, root: Path, inputs: Path, wt: Path, seed: int = 7, **env: str) -> Arm:
    arm = Arm(name, wt, root / f"cache-{name}", toy_env(wt, root / f"cache-{name}", **env), root / f"{name}.log",
              Deadline(300))
    arm.info = arm.request("init", **toy_init(inputs, seed))
    return arm


ROWS = [{"name": "small", "N": 4, "D": 8}, {"name": "wide", "N": 2, "D": 96}]


@pytest.fixture(name="toy")
def _toy(tmp_path: Path):
    wt, inputs = toy_worktree(tmp_path)
    return tmp_path, wt, inputs


class TestProtocol:
    def test_round_trip_of_every_command(self, toy) -> None:
        """init, prepare, warm, time, profile, autotune, resources, probes and release answer in order."""
        root, wt, inputs = toy
        arm = start("a", root, inputs, wt)
        try:
            info = arm.info
            assert info["module_file"] == str(wt / "toyop" / "__init__.py")
            assert info["interpreter"]["interpreter"] is True
            assert info["device"]["kind"] == "cpu" and info["flush"]["bytes"] == 4096
            arms.check_provenance(arm, info)
            prep = arm.request("prepare", rows=ROWS)
            assert set(prep) == {"small", "wide"}
            assert set(prep["small"]["tensors"]) == {"args[0]", "args[1]"}
            warm = arm.request("warm", row="small", mode="fwdbwd", calls=1)
            assert set(warm["grad_hashes"]) == {"grad_outputs[0]"}
            timed = arm.request("time", row="small", mode="fwdbwd", n=3)
            assert len(timed["samples_ms"]) == 3 and min(timed["samples_ms"]) > 0
            # the host-ahead hold is a GPU method: on CPU the request is timed as before and says nothing of it
            held = arm.request("time", row="small", mode="fwdbwd", n=2, hold=True)
            assert len(held["samples_ms"]) == 2 and "ahead" not in held and "hold_ms" not in held
            prof = arm.request("profile", row="small", mode="fwdbwd", iterations=2)
            # one launch of the toy kernel per forward, none in its backward
            assert prof["kernels"]["toy_scale_kernel"]["launches"] == 2
            assert prof["timer"].startswith("Triton interpreter")
            assert prof["alloc_sizes"].get(str(4 * 8 * 4), 0) >= 2
            assert prof["peak_bytes"] > 0
            again = arm.request("profile", row="small", mode="fwdbwd", iterations=1)
            assert again["peak_bytes"] == prof["peak_bytes"], "the peak of a call must not depend on the iteration count"
            fwd = arm.request("profile", row="small", mode="fwd", iterations=1)
            assert fwd["kernels"]["toy_scale_kernel"]["launches"] == 1
            assert arm.request("resources")["available"] is False
            assert arm.request("launch_cost", launches=3, repeats=2)["per_launch_us"] > 0
            assert arm.request("bandwidth", nbytes=2**16, repeats=2)["bytes_per_s"] > 0
            assert "toy_scale_kernel" in arm.request("sources")
            assert arm.request("release", rows=["small"]) == {"released": ["small"]}
            with pytest.raises(WorkerFailure, match="not prepared") as err:
                arm.request("time", row="small", mode="fwd", n=1)
            assert err.value.target is False
        finally:
            arm.close()
        assert arm.proc.returncode == 0

    def test_inputs_are_bit_identical_across_two_workers(self, toy) -> None:
        """Two workers draw the same tensors for a row (same seed), different rows differ, and so does another seed."""
        root, wt, inputs = toy
        a, b = start("a", root, inputs, wt), start("b", root, inputs, wt)
        c = start("c", root, inputs, wt, seed=8)
        try:
            pa, pb, pc = (x.request("prepare", rows=ROWS) for x in (a, b, c))
            for row in ("small", "wide"):
                assert pa[row]["tensors"] == pb[row]["tensors"]
                arms.compare_hashes("input", row, {"a": pa[row]["sha256"], "b": pb[row]["sha256"]})
                assert pa[row]["sha256"] != pc[row]["sha256"]
            assert pa["small"]["sha256"] != pa["wide"]["sha256"]
            ga = a.request("warm", row="wide", mode="fwdbwd", calls=1)["grad_hashes"]
            gb = b.request("warm", row="wide", mode="fwdbwd", calls=1)["grad_hashes"]
            assert ga == gb
            with pytest.raises(ProvenanceMismatch, match="hashes differ"):
                arms.compare_hashes("input", "small", {"a": pa["small"]["sha256"], "c": pc["small"]["sha256"]})
        finally:
            for x in (a, b, c):
                x.close()

    def test_an_error_in_the_target_is_a_target_failure_and_the_worker_lives_on(self, toy) -> None:
        """The op raising is reported with kind 'target' (a measured failure for a candidate); the worker keeps serving."""
        root, wt, inputs = toy
        arm = start("a", root, inputs, wt)
        try:
            arm.request("prepare", rows=[{"name": "bad", "N": 2, "D": 4, "broken": 1}, ROWS[0]])
            with pytest.raises(WorkerFailure) as err:
                arm.request("warm", row="bad", mode="fwd", calls=1)
            assert err.value.target is True and "row bad fwd" in str(err.value)
            with pytest.raises(WorkerFailure) as err:
                arm.request("no_such_command")
            assert err.value.target is False
            assert len(arm.request("time", row="small", mode="fwd", n=1)["samples_ms"]) == 1
        finally:
            arm.close()

    def test_a_target_that_cannot_import_fails_init_as_a_target_failure(self, toy) -> None:
        root, wt, inputs = toy
        (wt / "toyop" / "__init__.py").write_text("raise ImportError('candidate broke the module')\n")
        arm = Arm("a", wt, root / "cache", toy_env(wt, root / "cache"), root / "a.log", Deadline(300))
        try:
            with pytest.raises(WorkerFailure, match="candidate broke the module") as err:
                arm.request("init", **toy_init(inputs))
            assert err.value.target is True
        finally:
            arm.close()

    def test_the_worker_ends_when_its_coordinator_goes_away(self, toy) -> None:
        """End of input (a killed coordinator) ends the worker: no orphan keeps the GPU."""
        root, wt, inputs = toy
        arm = start("a", root, inputs, wt)
        assert arm.proc.stdin is not None
        arm.proc.stdin.close()
        assert arm.proc.wait(timeout=60) == 0


class TestProvenance:
    def test_a_target_imported_from_outside_the_worktree_is_refused(self, tmp_path: Path) -> None:
        class FakeArm:
            name = "cand"
            worktree = tmp_path / "wt"

        with pytest.raises(ProvenanceMismatch, match="not inside the worktree"):
            arms.check_provenance(FakeArm(), {"module_file": "/usr/lib/python3/site-packages/toyop/__init__.py"})  # type: ignore[arg-type]


class TestForeignProcesses:
    def test_only_our_workers_is_exclusive(self) -> None:
        apps = [{"pid": 10, "name": "python", "used_mib": 100.0}, {"pid": 11, "name": "python", "used_mib": 90.0}]
        assert foreign_processes(apps, {10, 11})["foreign"] == []

    def test_another_process_is_foreign(self) -> None:
        apps = [{"pid": 10, "name": "python", "used_mib": 100.0}, {"pid": os.getpid(), "name": "x", "used_mib": 1.0}]
        out = foreign_processes(apps, {10, 11})
        assert [a["pid"] for a in out["foreign"]] == [os.getpid()]

    def test_host_pids_seen_from_a_container_are_taken_as_ours_only_when_counts_match(self) -> None:
        unresolvable = [{"pid": 2**22 + 17, "name": None, "used_mib": 1.0}, {"pid": 2**22 + 19, "name": None, "used_mib": 1.0}]
        same = foreign_processes(unresolvable, {10, 11})
        assert same["foreign"] == [] and "PID namespace" in same["note"]
        assert foreign_processes(unresolvable, {10})["foreign"] == unresolvable

    def test_an_empty_list_with_workers_running_is_unverified_not_exclusive(self) -> None:
        out = foreign_processes([], {10, 11})
        assert out["foreign"] == [] and "unverified" in out["note"]

    def test_cpu_has_nothing_to_check(self) -> None:
        assert foreign_processes(None, {1}) == {"checked": False, "foreign": [], "note": "no GPU"}


class TestExpressions:
    @pytest.mark.parametrize(("expr", "value"), [("B*T*H*D*4", 2 * 3 * 5 * 7 * 4), ("(B + 1) * 2", 6), (8, 8)])
    def test_row_arithmetic(self, expr, value) -> None:
        assert eval_expression(expr, {"B": 2, "T": 3, "H": 5, "D": 7}, "k") == value

    @pytest.mark.parametrize(("expr", "message"), [("B*Q", "uses 'Q'"), ("__import__('os')", "may only use"),
                                                   ("B*", "not an arithmetic expression")])
    def test_anything_else_names_the_key(self, expr, message) -> None:
        with pytest.raises(Exception, match=message) as err:
            eval_expression(expr, {"B": 2}, "measure.temporaries.dq.bytes")
        assert "measure.temporaries.dq.bytes" in str(err.value)


def test_worker_module_does_not_import_torch_at_import_time() -> None:
    """The coordinator imports kgate.measure.worker's helpers without creating a CUDA context (torch loads in init)."""
    import subprocess

    code = "import sys, kgate.measure.worker, kgate.measure.arms, kgate.stages.bench; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


FAKE_REGISTRY = '''\
from dataclasses import dataclass, field

SHAPE_CONFIGS = {
    "B1_T64_H2_D32": {"B": 1, "T": 64, "H": 2, "D": 32},
    "B2_T64_H2_D100": {"B": 2, "T": 64, "H": 2, "D": 100},
}


def shape_bthd(B, T, H, D, **kw):
    return (B, T, H, D)


@dataclass
class TensorSpec:
    shape_fn: object
    requires_grad: bool = True
    dtype: str = "default"
    transform: object = None


@dataclass
class OpConfig:
    name: str
    import_path: str
    inputs: dict
    func_name: str = None
    extra_kwargs: dict = field(default_factory=dict)
    skip_backward: bool = False
    dim_constraints: dict = None
    default_shapes: dict = None


_OPS = {"toy": OpConfig("toy", "toyop", {"x": TensorSpec(shape_bthd)}, dim_constraints={"D": [32, 64]})}


def get_op(name):
    return _OPS[name]
'''
FLA_MIRROR = Path("/work/.mirror/fla-org+flash-linear-attention/repo")
FLA_BASELINE = "27967b970eaaf982a6960abf6cba8add9c34c7cc"


class TestRegistry:
    def read(self, root: Path, wt: Path, spec: str) -> dict:
        arm = Arm("base", wt, root / "cache", toy_env(wt, root / "cache"), root / "base.log", Deadline(120))
        try:
            return arm.request("registry", spec=spec)
        finally:
            arm.close()

    def test_rows_come_from_the_worktrees_registry_with_its_constraints(self, toy) -> None:
        """fla's registry format: get_op(name), SHAPE_CONFIGS, dim_constraints filter the rows."""
        root, wt, _ = toy
        (wt / "benchmarks" / "ops").mkdir(parents=True)
        (wt / "benchmarks" / "ops" / "registry.py").write_text(FAKE_REGISTRY)
        reg = self.read(root, wt, "benchmarks.ops.registry:toy")
        assert reg["rows"] == [{"name": "B1_T64_H2_D32", "B": 1, "T": 64, "H": 2, "D": 32}]
        assert [r["name"] for r in reg["skipped"]] == ["B2_T64_H2_D100"]
        assert reg["file"] == str(wt / "benchmarks" / "ops" / "registry.py")
        assert reg["op"]["inputs"]["x"]["shape_fn"] == "shape_bthd"

    def test_a_missing_registry_names_the_key(self, toy) -> None:
        root, wt, _ = toy
        with pytest.raises(WorkerFailure, match="measure.registry"):
            self.read(root, wt, "benchmarks.ops.registry:toy")

    @pytest.mark.skipif(not FLA_MIRROR.exists(), reason="no local mirror of flash-linear-attention")
    def test_fla_27967b97_registry_gives_the_six_chunk_rwkv6_rows(self, toy) -> None:
        import subprocess

        root, wt, _ = toy
        text = subprocess.run(["git", "-C", str(FLA_MIRROR), "show", f"{FLA_BASELINE}:benchmarks/ops/registry.py"],
                              capture_output=True, text=True, check=True).stdout
        (wt / "benchmarks" / "ops").mkdir(parents=True)
        (wt / "benchmarks" / "ops" / "registry.py").write_text(text)
        reg = self.read(root, wt, "benchmarks.ops.registry:chunk_rwkv6")
        assert [r["name"] for r in reg["rows"]] == ["B1_T8192_H96_D128", "B2_T16384_H16_D128", "B4_T2048_H16_D128",
                                                    "B4_T4096_H64_D128", "B8_T2048_H32_D256", "B8_T1024_H8_D64"]
        assert reg["op"]["inputs"]["u"]["requires_grad"] is False
        assert reg["op"]["inputs"]["w"]["transform"] == "log_sigmoid"


def test_the_flush_kernel_zeroes_its_whole_buffer_under_the_interpreter(tmp_path: Path) -> None:
    """kgate_l2_flush (the GPU's L2 flush) run by Triton's interpreter: every element of an odd-sized buffer is 0."""
    import subprocess

    code = ("from kgate.testrun import interp; interp.install()\n"
            "import torch\nfrom kgate.measure import kernels as measure_kernels\n"
            "buf = torch.ones(3 * measure_kernels.FLUSH_BLOCK + 5, dtype=torch.int32)\n"
            "measure_kernels.flush(buf)\nprint(int(buf.abs().sum()), buf.numel())\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), TRITON_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0", str(3 * 4096 + 5)]


UNSUPPORTED_PACKAGE = TOY_PACKAGE.replace(
    "tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)",
    "x = tl.load(x_ptr + offs, mask=mask)\n"
    "    y = tl.inline_asm_elementwise('mov.b32 $0, $1;', '=r,r', [x], dtype=tl.float32, is_pure=True, pack=1)\n"
    "    tl.store(y_ptr + offs, y, mask=mask)")


def _unsupported(root: Path) -> Arm:
    """A worker whose op launches a kernel the Triton interpreter cannot run (inline PTX)."""
    wt, inputs = toy_worktree(root)
    (wt / "toyop" / "__init__.py").write_text(UNSUPPORTED_PACKAGE)
    return start("cand", root, inputs, wt)


def test_an_interpreter_failure_in_a_timed_call_is_unavailable_not_the_targets(tmp_path: Path) -> None:
    """The interpreter's own NotImplementedError inside a timed call: the worker answers ``unavailable`` ("cannot
    run on CPU"), which no stage charges to the arm as its failure."""
    arm = _unsupported(tmp_path)
    try:
        arm.request("prepare", rows=[ROWS[0]])
        with pytest.raises(WorkerFailure) as info:
            arm.request("warm", row="small", mode="fwdbwd", calls=1)
    finally:
        arm.close()
    assert info.value.unavailable and info.value.arm == "cand"
    assert "cannot run on CPU: InterpreterError: NotImplementedError('inline_asm not supported" in str(info.value)


def test_a_stage_whose_op_cannot_run_on_cpu_records_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """``kgate.stages.common.execute`` around a stage body that times the unsupported op on a real worker: the
    record is ``unavailable`` (gate ``runs_here``, naming the worker's log), never ``fail``, and the CPU verdict
    it feeds is never NO-GO."""
    import argparse
    import json

    from kgate import verdict
    from kgate.stages import common

    monkeypatch.chdir(tmp_path)

    def body(ctx: common.Context):
        arm = _unsupported(tmp_path / "arm")
        try:
            arm.request("prepare", rows=[ROWS[0]])
            arm.request("time", row="small", mode="fwdbwd", n=2)
        finally:
            arm.close()
        raise AssertionError("the unsupported op ran")

    record = tmp_path / "record.json"
    args = argparse.Namespace(
        stage="profile_baseline", campaign_file=str(REPO / "config/campaigns/chunk-local-cumsum-identity.yaml"),
        target_path=None, candidate=None, candidate_source=None, gpu="cpu", input_record=[], local_rule=True,
        record=str(record), runtime_min=10, sdist_cache=str(tmp_path / "sdists"), test_timeout_s=60, workers="1",
        kernel_cache=str(tmp_path / "kernels"))
    (tmp_path / "arm").mkdir()
    assert common.execute("profile_baseline", body, args) == 0
    rec = json.loads(record.read_text())
    assert rec["status"] == "unavailable", rec["reasons"]
    [gate] = rec["gates"]
    assert gate["name"] == "runs_here" and gate["status"] == "unavailable"
    assert "cannot run on CPU" in gate["detail"] and gate["evidence"].endswith("worker-cand.log")
    assert verdict.WORD[rec["status"]] != "NO-GO"


_SPAWNS = """
import subprocess, sys
# a compiler mid-compile, and one it started in turn
child = subprocess.Popen([sys.executable, "-c",
                          "import subprocess, sys, time; g = subprocess.Popen(['sleep', '300']); "
                          "print(g.pid, flush=True); time.sleep(300)"], stdout=subprocess.PIPE, text=True)
grandchild = child.stdout.readline().strip()
print(child.pid, grandchild, flush=True)
child.wait()
"""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_killing_a_worker_kills_what_it_started(tmp_path: Path) -> None:
    """A killed worker (a stopped precompile, a timed-out request) leaves no process it started running: a
    compile's ptxas would otherwise go on taking a core beside the runs that follow."""
    arm = Arm("a", tmp_path, tmp_path / "cache", dict(os.environ), tmp_path / "a.log", Deadline(60),
              command=[sys.executable, "-c", _SPAWNS])
    child, grandchild = (int(p) for p in arm._lines.get(timeout=30).split())
    assert arms.descendants(arm.pid) == [child, grandchild]
    assert _alive(child) and _alive(grandchild)
    arm.kill()
    assert arm.proc.returncode is not None
    deadline = time.monotonic() + 10
    while (_alive(child) or _alive(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child) and not _alive(grandchild)
    arm.close()
