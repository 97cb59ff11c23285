"""Tests of kgate.testrun.interp (the Triton interpreter shim) and kgate.testrun.interp_plugin.

``install()`` must run before Triton is imported and patches Triton's classes
for the rest of the process, so every test that runs Triton code does it in a
fresh Python subprocess (``_python``/``_pytest``); the pytest process itself
never imports Triton. Pure helpers are tested in-process. The Triton tests are
skipped when triton or torch is not installed. With any one of the three
patches disabled, the probe crashes (autotune benchmarks through a missing
driver; a loop variable is an int without ``.to``) or the bf16 checks fail
(elementwise, fp32/int32/fp16 -> bf16 casts, dot, sum and cumsum run on raw
bits); bf16 -> fp32/int32 casts and max/min are also right without the shim
and are kept as regression checks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from kgate.errors import KgateError
from kgate.testrun import interp

REPO = Path(__file__).resolve().parent.parent
HAVE_TRITON = all(importlib.util.find_spec(name) is not None for name in ("triton", "torch", "numpy"))
needs_triton = pytest.mark.skipif(not HAVE_TRITON, reason="triton, torch and numpy are needed to run kernels")

KERNELS = textwrap.dedent('''
    import json
    import sys

    from kgate.testrun import interp

    record = interp.install(autotune_policy=sys.argv[1])
    import torch
    import triton
    import triton.language as tl
    from triton.runtime.autotuner import Autotuner

    results = {"record": record, "second": interp.install(autotune_policy=sys.argv[1])}
    try:
        interp.install(autotune_policy="largest" if sys.argv[1] == "first" else "first")
        results["switch"] = "no error"
    except interp.KgateError as exc:
        results["switch"] = str(exc)


    @triton.jit
    def loops(out, n):
        acc = tl.zeros([1], dtype=tl.int64)
        for i in range(n):
            acc += i.to(tl.int64)
        for j in tl.range(2, n):
            acc += j.to(tl.int64) * 100
        for c in tl.static_range(3):
            tl.static_assert(not isinstance(c, tl.tensor))
            acc += c * 10000
        tl.store(out + tl.arange(0, 1), acc)


    @triton.jit
    def elementwise(x, y, out, N: tl.constexpr):
        i = tl.arange(0, N)
        a = tl.load(x + i)
        b = tl.load(y + i)
        tl.store(out + i, a + b)
        tl.store(out + N + i, a - b)
        tl.store(out + 2 * N + i, a * b)
        tl.store(out + 3 * N + i, a / b)
        tl.store(out + 4 * N + i, -a)
        tl.store(out + 5 * N + i, tl.maximum(a, b))
        tl.store(out + 6 * N + i, tl.where(a < b, a, b))


    @triton.jit
    def casts(f32, i32, f16, bf_out, bf_in, f32_out, i32_out, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(bf_out + i, tl.load(f32 + i).to(tl.bfloat16))
        tl.store(bf_out + N + i, tl.load(i32 + i).to(tl.bfloat16))
        tl.store(bf_out + 2 * N + i, tl.load(f16 + i).to(tl.bfloat16))
        b = tl.load(bf_in + i)
        tl.store(f32_out + i, b.to(tl.float32))
        tl.store(i32_out + i, b.to(tl.int32))


    @triton.jit
    def dot(a, b, out, M: tl.constexpr):
        r = tl.arange(0, M)
        A = tl.load(a + r[:, None] * M + r[None, :])
        B = tl.load(b + r[:, None] * M + r[None, :])
        tl.store(out + r[:, None] * M + r[None, :], tl.dot(A, B))


    @triton.jit
    def reductions(x, out, N: tl.constexpr):
        i = tl.arange(0, N)
        a = tl.load(x + i)
        tl.store(out, tl.sum(a, 0))
        tl.store(out + 1, tl.max(a, 0))
        tl.store(out + 2, tl.min(a, 0))
        tl.store(out + 3 + i, tl.cumsum(a, 0))


    def keep_large(configs, named_args, **kwargs):
        return [c for c in configs if c.kwargs["BS"] >= 32]


    @triton.autotune(configs=[triton.Config({"BS": 16}), triton.Config({"BS": 64}), triton.Config({"BS": 32})],
                     key=["N"])
    @triton.jit
    def tuned(x, out, N, BS: tl.constexpr):
        i = tl.program_id(0) * BS + tl.arange(0, BS)
        tl.store(out + i, tl.load(x + i, mask=i < N) * 2, mask=i < N)


    @triton.autotune(configs=[triton.Config({"BS": 16}), triton.Config({"BS": 64}), triton.Config({"BS": 32})],
                     key=["N"], prune_configs_by={"early_config_prune": keep_large})
    @triton.jit
    def tuned_pruned(x, out, N, BS: tl.constexpr):
        i = tl.program_id(0) * BS + tl.arange(0, BS)
        tl.store(out + i, tl.load(x + i, mask=i < N) + 1, mask=i < N)


    def same_bits(a, b):
        return bool(torch.equal(a.view(torch.int16), b.view(torch.int16)))


    torch.manual_seed(0)
    out = torch.zeros(1, dtype=torch.int64)
    loops[(1,)](out, 10)
    results["loops"] = out.item()

    N = 64
    x = torch.randn(N).to(torch.bfloat16)
    y = (torch.rand(N) + 0.5).to(torch.bfloat16)
    y[::3] = -y[::3]
    got = torch.empty(7 * N, dtype=torch.bfloat16)
    elementwise[(1,)](x, y, got, N)
    want = [x + y, x - y, x * y, x / y, -x, torch.maximum(x, y), torch.where(x < y, x, y)]
    results["elementwise"] = [same_bits(got[k * N:(k + 1) * N], w) for k, w in enumerate(want)]

    # fp32 values exactly halfway between two bf16 values: ties must go to the even neighbour
    ties = torch.tensor([0x3F808000, 0x3F818000, 0xBF808000, 0x7F7F8000, 0x00008000], dtype=torch.int64)
    f32 = torch.cat([ties.to(torch.int32).view(torch.float32), torch.randn(N - len(ties)) * 1000])
    # |i| < 2**24: torch converts int -> fp32 -> bf16, which is exact only while int -> fp32 is
    i32 = torch.randint(-(2 ** 24), 2 ** 24, (N,), dtype=torch.int32)
    f16 = torch.randn(N, dtype=torch.float16) * 100
    bf_in = torch.randn(N).mul(300).to(torch.bfloat16)
    bf_out = torch.empty(3 * N, dtype=torch.bfloat16)
    f32_out = torch.empty(N)
    i32_out = torch.empty(N, dtype=torch.int32)
    casts[(1,)](f32, i32, f16, bf_out, bf_in, f32_out, i32_out, N)
    # NaN payloads are not compared: torch's own conversion paths disagree on them
    bf_nan = torch.empty(3 * N, dtype=torch.bfloat16)
    casts[(1,)](torch.full((N,), float("nan")), i32, f16, bf_nan, bf_in, f32_out, i32_out, N)
    results["casts"] = {
        "fp32_to_bf16": same_bits(bf_out[:N], f32.to(torch.bfloat16)),
        "nan_stays_nan": bool(torch.isnan(bf_nan[0].float())),
        "int32_to_bf16": same_bits(bf_out[N:2 * N], i32.to(torch.bfloat16)),
        "fp16_to_bf16": same_bits(bf_out[2 * N:], f16.to(torch.bfloat16)),
        "bf16_to_fp32": bool(torch.equal(f32_out, bf_in.float())),
        "bf16_to_int32": bool(torch.equal(i32_out, bf_in.to(torch.int32))),
    }

    # small integers: every product and sum is exact in fp32, so the result is unique
    M = 16
    a = torch.randint(-8, 9, (M, M)).to(torch.bfloat16)
    b = torch.randint(-8, 9, (M, M)).to(torch.bfloat16)
    got = torch.empty(M, M)
    dot[(1,)](a, b, got, M)
    results["dot"] = bool(torch.equal(got, a.float() @ b.float()))

    # multiples of 1/8 in [-8, 8): exact sums, negative values for max/min
    x = (torch.randint(-64, 64, (N,)).float() / 8).to(torch.bfloat16)
    got = torch.empty(3 + N, dtype=torch.bfloat16)
    reductions[(1,)](x, got, N)
    results["reductions"] = {
        "sum": same_bits(got[0:1], x.sum().reshape(1)),
        "max": same_bits(got[1:2], x.max().reshape(1)),
        "min": same_bits(got[2:3], x.min().reshape(1)),
        "cumsum": same_bits(got[3:], x.float().cumsum(0).to(torch.bfloat16)),
    }


    def refuse(*args, **kwargs):
        raise AssertionError("an autotuner benchmarked a config")


    Autotuner._bench = refuse
    x = torch.randn(100)
    got = torch.empty(100)
    tuned[lambda meta: (triton.cdiv(100, meta["BS"]),)](x, got, 100)
    results["tuned"] = {"ok": bool(torch.equal(got, x * 2)), "BS": tuned.best_config.kwargs["BS"]}
    tuned_pruned[lambda meta: (triton.cdiv(100, meta["BS"]),)](x, got, 100)
    results["tuned_pruned"] = {"ok": bool(torch.equal(got, x + 1)), "BS": tuned_pruned.best_config.kwargs["BS"]}
    print("RESULTS " + json.dumps(results))
''')


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "PYTEST_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


def _python(code: str, *args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    script = cwd / "probe.py"
    script.write_text(code)
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def _results(proc: subprocess.CompletedProcess[str]) -> dict:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, f"probe failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return json.loads(lines[-1].removeprefix("RESULTS "))


@pytest.fixture(scope="module", name="first")
def _first(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not HAVE_TRITON:
        pytest.skip("triton, torch and numpy are needed to run kernels")
    return _results(_python(KERNELS, "first", cwd=tmp_path_factory.mktemp("first")))


class TestChooseConfig:
    def test_first_keeps_declaration_order(self) -> None:
        """The "first" policy keeps the first config even when a later one has bigger blocks."""
        configs = [SimpleNamespace(kwargs={"BK": 16}), SimpleNamespace(kwargs={"BK": 64})]
        assert interp.choose_config(configs, "first") is configs[0]

    def test_largest_multiplies_block_sizes(self) -> None:
        """The "largest" policy ranks by the product of integer B* meta-parameters, ties to the first."""
        configs = [SimpleNamespace(kwargs={"BK": 64, "BV": 16, "NUM": 99}),
                   SimpleNamespace(kwargs={"BK": 32, "BV": 64}),
                   SimpleNamespace(kwargs={"BK": 64, "BV": 32})]
        assert interp.choose_config(configs, "largest") is configs[1]

    def test_largest_without_block_sizes_is_first(self) -> None:
        """Configs that differ only in non-block parameters fall back to the first."""
        configs = [SimpleNamespace(kwargs={}), SimpleNamespace(kwargs={"num": 8})]
        assert interp.choose_config(configs, "largest") is configs[0]

    def test_empty_is_an_error(self) -> None:
        """An empty config list is a KgateError, not an IndexError."""
        with pytest.raises(KgateError):
            interp.choose_config([], "first")


class TestInstallArguments:
    def test_unknown_policy(self) -> None:
        """An unknown autotune policy is refused before anything is patched."""
        with pytest.raises(KgateError, match="autotune_policy"):
            interp.install(autotune_policy="fastest")
        assert interp.installed() is None

    def test_version_parse(self) -> None:
        """Versions with local or dev suffixes parse to (major, minor)."""
        assert interp._major_minor("3.9.0") == (3, 9)
        assert interp._major_minor("3.10.0+git1234") == (3, 10)
        with pytest.raises(KgateError):
            interp._major_minor("main")


@needs_triton
class TestInstall:
    def test_provenance(self, first: dict) -> None:
        """install() reports the interpreter, versions, the three fixes and the policy."""
        record = first["record"]
        assert record["interpreter"] is True
        assert record["fixes"] == ["autotune_single_config", "loop_var_tensor", "bf16_decode", "float_scalar_args",
                                   "libdevice_math", "bf16_constant"]
        assert record["autotune_policy"] == "first"
        assert interp.TRITON_TESTED[0] <= interp._major_minor(record["triton"]) < interp.TRITON_TESTED[1]
        json.dumps(record)

    def test_idempotent(self, first: dict) -> None:
        """A second install() with the same policy returns the same record."""
        assert first["second"] == first["record"]

    def test_policy_cannot_switch(self, first: dict) -> None:
        """A second install() with another policy is a KgateError."""
        assert "cannot switch" in first["switch"]

    def test_triton_imported_first(self, tmp_path: Path) -> None:
        """Triton imported without the interpreter makes install() fail with a clear message."""
        code = textwrap.dedent('''
            import triton
            from kgate.testrun import interp
            try:
                interp.install()
            except interp.KgateError as exc:
                print("RESULTS " + __import__("json").dumps(str(exc)))
        ''')
        assert "before the interpreter shim" in _results(_python(code, cwd=tmp_path))

    def test_untested_triton_version(self, tmp_path: Path) -> None:
        """A Triton version outside the tested range is refused before Triton is imported."""
        code = textwrap.dedent('''
            import importlib.metadata, json, sys
            importlib.metadata.version = lambda name: "3.5.1"
            from kgate.testrun import interp
            try:
                interp.install()
            except interp.KgateError as exc:
                print("RESULTS " + json.dumps([str(exc), "triton" in sys.modules]))
        ''')
        message, imported = _results(_python(code, cwd=tmp_path))
        assert "3.5.1" in message and ">=3.7,<3.10" in message
        assert imported is False


@needs_triton
class TestKernels:
    def test_loop_variables_are_tensors(self, first: dict) -> None:
        """range/tl.range loop variables accept .to(tl.int64); static_range ones stay ints."""
        assert first["loops"] == sum(range(10)) + 100 * sum(range(2, 10)) + 10000 * sum(range(3))

    def test_bf16_elementwise_bit_exact(self, first: dict) -> None:
        """bf16 +, -, *, /, negation, maximum and a comparison match torch bit for bit."""
        assert first["elementwise"] == [True] * 7

    def test_bf16_casts_round_to_nearest_even(self, first: dict) -> None:
        """Casts to bf16 (from fp32 ties, int32, fp16) and from bf16 match torch bit for bit."""
        assert first["casts"] == {"fp32_to_bf16": True, "nan_stays_nan": True, "int32_to_bf16": True,
                                  "fp16_to_bf16": True, "bf16_to_fp32": True, "bf16_to_int32": True}

    def test_bf16_dot(self, first: dict) -> None:
        """tl.dot on bf16 operands with an fp32 accumulator equals torch's exact product."""
        assert first["dot"] is True

    def test_bf16_reductions(self, first: dict) -> None:
        """tl.sum, tl.max (with negatives), tl.min and tl.cumsum on bf16 match torch bit for bit."""
        assert first["reductions"] == {"sum": True, "max": True, "min": True, "cumsum": True}

    def test_autotune_first_config_without_benchmark(self, first: dict) -> None:
        """A 3-config autotuned kernel runs with no driver, never benchmarks, and keeps the first config."""
        assert first["tuned"] == {"ok": True, "BS": 16}

    def test_autotune_respects_early_prune(self, first: dict) -> None:
        """The kernel's own early_config_prune runs before the policy picks."""
        assert first["tuned_pruned"] == {"ok": True, "BS": 64}

    def test_autotune_largest(self, tmp_path: Path) -> None:
        """The "largest" policy keeps the config with the biggest block."""
        results = _results(_python(KERNELS, "largest", cwd=tmp_path))
        assert results["record"]["autotune_policy"] == "largest"
        assert results["tuned"] == {"ok": True, "BS": 64}
        assert results["tuned_pruned"] == {"ok": True, "BS": 64}


PLUGIN_TEST = textwrap.dedent('''
    import os

    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def add(x, y, out, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(out + i, tl.load(x + i) + tl.load(y + i))


    def test_runs_under_the_shim():
        import setup_marker
        assert setup_marker.CALLS == 1
        assert os.environ["TRITON_INTERPRET"] == "1"
        x = torch.randn(16).to(torch.bfloat16)
        y = torch.randn(16).to(torch.bfloat16)
        out = torch.empty(16, dtype=torch.bfloat16)
        add[(1,)](x, y, out, 16)
        assert torch.equal(out.view(torch.int16), (x + y).view(torch.int16))
''')

PLUGIN_SETUP = textwrap.dedent('''
    import sys
    import types

    import triton  # the shim is already installed: importing triton here is allowed

    def setup():
        marker = sys.modules.setdefault("setup_marker", types.ModuleType("setup_marker"))
        marker.CALLS = getattr(marker, "CALLS", 0) + 1
        return {"marked": True, "interpret": triton.knobs.runtime.interpret}
''')


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "kgate.testrun.interp_plugin", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)


@needs_triton
class TestPlugin:
    def test_installs_runs_setup_and_records(self, tmp_path: Path) -> None:
        """The plugin installs the shim before collection, runs the setup file and writes the record."""
        (tmp_path / "test_probe.py").write_text(PLUGIN_TEST)
        (tmp_path / "cpu_setup.py").write_text(PLUGIN_SETUP)
        record_path = tmp_path / "out" / "interp.json"
        proc = _pytest(tmp_path, "--kgate-autotune", "largest", "--kgate-setup", "cpu_setup.py",
                       "--kgate-interp-record", str(record_path), "test_probe.py")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "kgate interp: triton" in proc.stdout
        record = json.loads(record_path.read_text())
        assert record["schema"] == "kgate.interp/1"
        assert record["autotune_policy"] == "largest"
        assert record["setup"]["path"] == str((tmp_path / "cpu_setup.py").resolve())
        assert record["setup"]["result"] == {"marked": True, "interpret": True}
        assert len(record["setup"]["sha256"]) == 64

    def test_missing_setup_is_a_usage_error(self, tmp_path: Path) -> None:
        """A --kgate-setup path that does not exist stops pytest with exit 4 and one clear line."""
        (tmp_path / "test_probe.py").write_text("def test_nothing():\n    pass\n")
        proc = _pytest(tmp_path, "--kgate-setup", "nope.py", "test_probe.py")
        assert proc.returncode == 4
        assert "kgate: --kgate-setup nope.py: no such file" in proc.stderr
