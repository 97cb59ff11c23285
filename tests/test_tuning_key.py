"""Complete autotune keys (kgate.testrun.tuning): a pick tuned at one constexpr is never read at another.

The H200 failure this guards against: fla's ``chunk_kda_bwd_kernel_inter`` keys its autotuner on ``BT``
alone while ``K`` and ``V`` are constexprs; a pick tuned at K <= 128 (every config fitting) was read back
from the shared kernel cache at K = 256, where it needs more shared memory than the GPU has, and fla's own
``test_chunk_varlen[...D256...]`` failed with OutOfResources in the fixture gate after passing cold in
baseline_tests. Here the same mechanism runs through Triton's real autotuner and its on-disk cache with
one stand-in: the GPU (named FAKE below), whose launch raises Triton's own OutOfResources when a config's
shared memory exceeds a limit, and whose benchmarker times bigger tiles as faster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

KERNELS = textwrap.dedent('''\
    import triton
    import triton.language as tl

    CONFIGS = [triton.Config({"BK": bk}, num_warps=4, num_stages=s) for bk in (32, 64) for s in (2, 4)]


    @triton.autotune(configs=CONFIGS, key=["BT"])
    @triton.jit
    def inter(x_ptr, T, BT: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
        i = tl.arange(0, BK)
        tl.store(x_ptr + i, tl.load(x_ptr + i) * K)
''')

# FAKE (no GPU here): a device with LIMIT bytes of shared memory per block. A launch needs BK * K * stages * 4
# bytes and raises Triton's OutOfResources above LIMIT (as a real launch does); the benchmarker calls the
# launch and times a config by its tile, bigger being faster (more stages breaking ties), so at K = 64 the
# largest config wins and at K = 256 BK 32 with 4 stages.
STAND_IN = textwrap.dedent('''\
    import json, sys
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.errors import OutOfResources
    from triton.runtime.jit import JITFunction

    LIMIT = 232448
    last = {}
    benched = []

    class StandInDriver:
        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)
        def get_benchmarker(self):
            def bench(kernel_call, quantiles):
                benched.append(1)
                kernel_call()
                return [1.0 / (last["BK"] * last["num_stages"]) - 1e-6 * last["num_stages"]] * 3
            return bench
        def get_active_torch_device(self):
            raise RuntimeError("no device")

    def launch(self, *args, **kwargs):
        last.update(kwargs)
        need = kwargs["BK"] * kwargs["K"] * kwargs["num_stages"] * 4
        if need > LIMIT:
            raise OutOfResources(need, LIMIT, "shared memory")

    driver.set_active(StandInDriver())
    JITFunction.run = launch
''')

ARM = STAND_IN + textwrap.dedent('''\
    if sys.argv[1] == "complete":
        from kgate.testrun import tuning
        tuning.install()
    import kernels
    out = {}
    for k in map(int, sys.argv[2].split(",")):
        try:
            kernels.inter[(1,)](0, 1000, BT=64, K=k)
            out[k] = str(kernels.inter.best_config)
        except OutOfResources as exc:
            out[k] = f"OutOfResources: {exc}"
    out["key"] = list(kernels.inter.keys)
    out["benched"] = len(benched)
    print(json.dumps(out))
''')


def _worktree(tmp_path: Path) -> Path:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "kernels.py").write_text(KERNELS)
    return wt


def _env(wt: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "PYTEST_XDIST"))}
    env.update(PYTHONPATH=os.pathsep.join([str(wt), str(REPO)]), PYTHONDONTWRITEBYTECODE="1",
               TRITON_CACHE_DIR=str(cache), TRITON_CACHE_AUTOTUNING="1")
    return env


def _arm(wt: Path, cache: Path, keys: str, ks: str) -> dict:
    p = subprocess.run([sys.executable, "-c", ARM, keys, ks], cwd=wt, env=_env(wt, cache), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _picks_on_disk(cache: Path) -> int:
    return sum(1 for _ in cache.rglob("inter.autotune.json"))


@pytest.mark.parametrize("keys", ["target", "complete"])
def test_a_pick_tuned_at_one_constexpr_is_read_back_only_at_that_constexpr(tmp_path: Path, keys: str) -> None:
    """One process tunes at K = 64 and writes its pick to the shared cache; a second runs K = 256 then K = 64.
    Under the target's key the second reads the K = 64 pick at K = 256 and fails with OutOfResources (the H200
    failure); with kgate's complete key it tunes K = 256 itself, and still reads the first process's pick at
    K = 64 (sharing across processes and arms holds where the constexprs are equal)."""
    wt, cache = _worktree(tmp_path), tmp_path / "cache"
    first = _arm(wt, cache, keys, "64")
    assert first["64"].startswith("BK: 64") and "num_stages: 4" in first["64"], first
    second = _arm(wt, cache, keys, "256,64")
    if keys == "target":
        assert second["key"] == ["BT"]
        assert second["256"].startswith("OutOfResources") and "shared memory" in second["256"], second
        assert _picks_on_disk(cache) == 1
    else:
        assert second["key"] == ["BT", "K"]
        assert not second["256"].startswith("OutOfResources"), second
        assert 32 * 256 * 4 * 4 <= 232448 < 64 * 256 * 4 * 4  # BK 64 at 4 stages no longer fits; BK 32 does
        assert second["256"].startswith("BK: 32") and "num_stages: 4" in second["256"], second
        assert second["64"] == first["64"]
        assert _picks_on_disk(cache) == 2


GATE_TEST = STAND_IN + textwrap.dedent('''\
    import kernels


    def test_two_shapes_in_one_process():
        kernels.inter[(1,)](0, 1000, BT=64, K=64)
        kernels.inter[(1,)](0, 1000, BT=64, K=256)
''')


@pytest.mark.parametrize("plugin", [True, False])
def test_gate_runs_complete_every_autotuners_key(tmp_path: Path, plugin: bool) -> None:
    """A gate's pytest (kgate's outcome plugin loaded) tunes each shape of one process by itself; the same test
    without kgate's plugin fails as the target's key makes it (the K = 64 pick launched at K = 256)."""
    wt = _worktree(tmp_path)
    (wt / "test_shapes.py").write_text(GATE_TEST)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shapes.py"]
    if plugin:
        cmd[3:3] = ["-p", "kgate.testrun.outcomes_plugin", f"--kgate-outcomes={tmp_path / 'outcomes.json'}"]
    p = subprocess.run(cmd, cwd=wt, env=_env(wt, tmp_path / "cache"), capture_output=True, text=True, timeout=300)
    if plugin:
        assert p.returncode == 0, p.stdout[-3000:]
        record = json.loads((tmp_path / "outcomes.json").read_text())
        assert [t["outcome"] for t in record["tests"].values()] == ["passed"]
    else:
        assert p.returncode == 1 and "OutOfResources" in p.stdout, p.stdout[-3000:]


WORKER_PACKAGE = textwrap.dedent('''\
    import torch
    import triton
    import triton.language as tl


    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=[])
    @triton.jit
    def tuned_scale(x_ptr, y_ptr, n, D: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * D, mask=mask)


    def op(x):
        y = torch.empty_like(x)
        tuned_scale[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel(), D=x.shape[-1])
        return y
''')
WORKER_INPUTS = textwrap.dedent('''\
    import torch


    def make_inputs(row, *, device, dtype, seed):
        gen = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(row["N"], row["D"], generator=gen, device=device, dtype=dtype),), {}
''')


def test_timing_workers_complete_every_autotuners_key_and_record_what_they_added(tmp_path: Path) -> None:
    """A timing worker (CPU, Triton's interpreter) keys the toy autotuner, whose key is empty, by its constexpr D:
    two rows of different D get a pick each, and the worker's autotune facts name the key and what kgate added."""
    from kgate.measure.arms import Arm, Deadline

    wt = tmp_path / "wt"
    (wt / "toyop").mkdir(parents=True)
    (wt / "toyop" / "__init__.py").write_text(WORKER_PACKAGE)
    inputs = tmp_path / "inputs.py"
    inputs.write_text(WORKER_INPUTS)
    env = _env(wt, tmp_path / "cache")
    env["TRITON_INTERPRET"] = "1"
    arm = Arm("a", wt, tmp_path / "cache", env, tmp_path / "a.log", Deadline(300))
    try:
        arm.request("init", callable="toyop:op", inputs_file=str(inputs), dtype="float32", seed=7, differentiate=[],
                    cpu=True, cpu_setup=None, flush_bytes=4096, env_record=[])
        arm.request("prepare", rows=[{"name": "d8", "N": 4, "D": 8}, {"name": "d96", "N": 2, "D": 96}])
        for row in ("d8", "d96"):
            arm.request("warm", row=row, mode="fwd", calls=1)
        (tuner,) = arm.request("autotune")["tuners"]
    finally:
        arm.close()
    assert tuner["kernel"] == "tuned_scale"
    assert tuner["key"] == ["D"] and tuner["key_added"] == ["D"]
    assert sorted(tuner["picks"]) == ["(8, 'torch.float32', 'torch.float32')", "(96, 'torch.float32', 'torch.float32')"]


GATE_TUNE = STAND_IN + textwrap.dedent('''\
    import pathlib
    import kernels


    def test_one_shape():
        kernels.inter[(1,)](0, 1000, BT=64, K=64)
        pathlib.Path("benched.txt").write_text(str(len(benched)))
''')


def test_gate_picks_serve_gate_runs_but_never_a_timed_stage(tmp_path: Path) -> None:
    """A gate run's picks (tuned beside other test processes) are read by the next gate run, which tunes
    nothing, while a timed stage's worker on the same cache tunes the same shape itself; the timed picks
    are then shared by every later timed process (both arms)."""
    wt, cache = _worktree(tmp_path), tmp_path / "cache"
    (wt / "test_tune.py").write_text(GATE_TUNE)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "kgate.testrun.outcomes_plugin",
           "test_tune.py"]

    def gate() -> int:
        p = subprocess.run(cmd, cwd=wt, env=_env(wt, cache), capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout[-3000:]
        return int((wt / "benched.txt").read_text())

    assert gate() == 4  # cold: the four configs timed
    assert gate() == 0  # the gate's own pick read back
    timed = _arm(wt, cache, "complete", "64")
    assert timed["benched"] == 4, timed  # not the gate's pick: tuned again, alone on the GPU
    assert _arm(wt, cache, "complete", "64")["benched"] == 0  # the other arm reads the timed pick
    assert _picks_on_disk(cache) == 2


def test_one_process_files_its_picks_under_one_namespace(tmp_path: Path) -> None:
    script = "from kgate.testrun import tuning\ntuning.install(namespace='gate')\ntuning.install(namespace='gate')\n" \
             "tuning.install(namespace='timed')\n"
    p = subprocess.run([sys.executable, "-c", script], env=_env(tmp_path, tmp_path / "cache"), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0 and "already filed under namespace 'gate', not 'timed'" in p.stderr, p.stderr[-2000:]
