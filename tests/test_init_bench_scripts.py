"""kgate.init.bench_scripts: rows read statically from a benchmark script in Liger-Kernel's format (scripts here
are written for the test; nothing is imported or run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kgate.init import bench_scripts


def script(tmp_path: Path, text: str, stem: str = "op") -> Path:
    p = tmp_path / "benchmark" / "scripts" / f"benchmark_{stem}.py"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return tmp_path


def value(expr: str, **names: object) -> object:
    return bench_scripts._value(ast.parse(expr, mode="eval").body, dict(names))


def test_values_a_sweep_is_written_with() -> None:
    assert value("[2**i for i in range(10, n + 1)]", n=12) == [1024, 2048, 4096]
    assert value("[x * 1024 for x in (1, 2, 4) if x > 1]") == [2048, 4096]
    assert value("{'B': 8, 'T': 2048 // 2, 'eps': -1e-6}") == {"B": 8, "T": 1024, "eps": -1e-6}


@pytest.mark.parametrize("expr", ["torch.float32", "get_sizes()", "2 ** 100000", "list(range(10**9))",
                                  "[i for i in range(10**6)]", "undefined_name", "1 / 0", "'a' - 1"])
def test_anything_else_is_unreadable_never_run(expr: str) -> None:
    with pytest.raises(bench_scripts.Unreadable):
        value(expr)


def test_rows_per_config_and_value_named_by_their_integers(tmp_path: Path) -> None:
    base = script(tmp_path, "configs = {'x_name': 'N', 'x_values': [1, 2],\n"
                            "           'extra_benchmark_configs': [{'M': 4, 'eps': 1e-5}, {'M': 8, 'eps': 1e-5}]}\n"
                            "again = {'x_name': 'N', 'x_values': [2], 'extra_benchmark_configs': [{'M': 8, 'eps': 1e-5}]}\n")
    got = bench_scripts.read(base, ["pkg/ops/op.py"])
    assert isinstance(got, bench_scripts.ScriptRows) and got.file == "benchmark/scripts/benchmark_op.py"
    # the second dict repeats a row: once
    assert [r["name"] for r in got.rows] == ["M4_N1", "M4_N2", "M8_N1", "M8_N2"]
    assert got.rows[0] == {"name": "M4_N1", "M": 4, "eps": 1e-5, "N": 1}


def test_rows_that_differ_only_in_a_float_are_named_by_every_value(tmp_path: Path) -> None:
    base = script(tmp_path, "c = {'x_name': 'N', 'x_values': [1],\n"
                            "     'extra_benchmark_configs': [{'eps': 1e-5}, {'eps': 1e-6}]}\n")
    got = bench_scripts.read(base, ["op.py"])
    assert isinstance(got, bench_scripts.ScriptRows)
    assert [r["name"] for r in got.rows] == ["eps1e-05_N1", "eps1e-06_N1"]


def test_no_script_an_unparsable_one_and_one_without_a_sweep(tmp_path: Path) -> None:
    assert bench_scripts.read(tmp_path, ["pkg/op.py"]) is None
    assert bench_scripts.read(script(tmp_path, "x = ("), ["op.py"]).startswith(
        "benchmark/scripts/benchmark_op.py: not Python this interpreter parses")
    assert bench_scripts.read(script(tmp_path, "x = {'kernel_name': 'op'}\n"), ["op.py"]) == \
        "benchmark/scripts/benchmark_op.py: no rows read (no dict with x_name and x_values)"
    # only a changed .py file names a script
    assert bench_scripts.read(script(tmp_path, "c = {'x_name': 'N', 'x_values': [1]}\n"), ["op.md"]) is None


def test_configs_bound_to_a_name_are_read_whole_and_their_other_values_named(tmp_path: Path) -> None:
    base = script(tmp_path, "extras = [{'M': 4, 'mode': 'forward'}]\n"
                            "c = {'x_name': 'N', 'x_values': [1], 'extra_benchmark_configs': extras}\n")
    got = bench_scripts.read(base, ["op.py"])
    assert isinstance(got, bench_scripts.ScriptRows)
    assert got.rows == ({"name": "M4_N1", "M": 4, "N": 1},) and got.left_out == ("mode ('forward')",)
