"""``python -m kgate init`` on the toy history of tests/test_init.py: what it refuses, what it writes, what it
leaves to fill in (refused by key at the DAG build and a dry run), the candidate it names, and that it never
writes into the user's clone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from test_init import (
    APPENDED,
    FWD_BASE,
    FWD_FASTER,
    NEW_TESTS,
    SCALE,
    SOURCE_MESSAGE,
    TESTS,
    Toy,
    clone_state,
    git,
    lines,
    run_init,
    toy_target,
    write,
)

from kgate import campaign as campaign_mod
from kgate import campaign_checks
from kgate.errors import ConfigError
from kgate.init import split
from kgate.init.change import read as read_change
from kgate.source import candidate as candidate_mod
from kgate.source import overlay


def test_a_change_that_edits_an_existing_test_is_refused_with_one_line_naming_the_file(tmp_path: Path) -> None:
    loosened = TESTS.replace("torch.testing.assert_close(scale(x, 3.0), scale_ref(x, 3.0))",
                             "torch.testing.assert_close(scale(x, 3.0), scale_ref(x, 3.0), atol=0.1, rtol=0.1)")
    toy = toy_target(tmp_path, test_change={"tests/test_scale.py": loosened})
    before = clone_state(toy.path)
    proc = run_init(toy, tmp_path / "out", "toy-edit")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kgate: error: the change edits the correctness contract")
    line = TESTS.splitlines().index("    torch.testing.assert_close(scale(x, 3.0), scale_ref(x, 3.0))") + 1
    assert f"tests/test_scale.py changes or deletes line {line} of the base version" in err[0]
    assert "tolerances change" in err[0] and "--test-edits" in err[0]
    assert not (tmp_path / "out" / "config").exists(), "nothing is written for a refused change"
    assert clone_state(toy.path) == before


def test_test_edits_fixture_freezes_the_edited_test_and_omit_leaves_it_out(tmp_path: Path) -> None:
    from kgate.init import compose

    edited = TESTS.replace("[7, 64]", "[7, 64, 100]")
    toy = toy_target(tmp_path, test_change={"tests/test_scale.py": edited})
    out = tmp_path / "out"
    proc = run_init(toy, out, "toy-fixture", "--test-edits", "fixture", "--cpu-select", "all")
    assert proc.returncode == 0, proc.stderr
    assert any(ln.startswith("fixture: tests/test_scale.py (changes or deletes line") for ln in lines(proc, "decided"))
    variant = overlay.select(out / "kernels" / "toy-fixture" / "fixture", f"git:{toy.base}")
    assert [(e["path"], e["replace"]["find"], e["replace"]["with"]) for e in variant.edits] == [
        ("tests/test_scale.py", '@pytest.mark.parametrize("n", [7, 64])\n',
         '@pytest.mark.parametrize("n", [7, 64, 100])\n')]
    # omit: neither the fixture nor the candidate gets the edit
    change = read_change(toy.path, toy.base, toy.head)
    opts = compose.Options(target=str(toy.path), base=toy.base, head=toy.head, name="toy-omit", test_edits="omit")
    acc = compose._Account()
    edits: list[split.Edit] = []
    sources = compose._route_contract(opts, change, {"tests/test_scale.py": "edits it"}, ["toyops/scale.py"], edits, acc)
    assert sources == ["toyops/scale.py"] and edits == []
    assert acc == [("left out", "tests/test_scale.py (edits it; --test-edits omit)")]


# what init writes, what it leaves to fill in, and the candidate it names


def test_init_writes_a_campaign_whose_todos_the_checks_refuse_by_key(tmp_path: Path) -> None:
    toy = toy_target(tmp_path, registry=False)
    before = clone_state(toy.path)
    out = tmp_path / "out"
    proc = run_init(toy, out, "toy-todo")
    assert proc.returncode == 0, proc.stderr
    assert clone_state(toy.path) == before, "init never writes into the user's clone"
    todo = [ln.split(":", 1)[0] for ln in lines(proc, "TODO")]
    assert todo == ["measure.callable", "measure.inputs", "measure.rows", "measure.cpu.rows", "measure.bar",
                    "measure.mechanism.speeds_up.0.bytes", "measure.mechanism.speeds_up.0.flops", "ncu.rows",
                    "model.none"]
    assert "left out" in proc.stdout and "README.md (documentation)" in proc.stdout
    assert "mechanism speeds_up _scale_fwd_kernel (toyops/scale.py: its source changed): confirm" in proc.stdout
    path = out / "config" / "campaigns" / "toy-todo.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["hypothesis"] == f"tests: a partial block and other shapes; {SOURCE_MESSAGE}"
    assert data["gate"] == {"tests": ["tests"], "select": {"cpu": None, "gpu": None}}
    assert data["candidate"] == {"ref": "faster", "diff_paths": ["toyops/scale.py"], "allowed_paths": ["toyops/scale.py"]}
    assert data["frozen"] == ["toyops/__init__.py", "toyops/naive.py"]
    # each refusal is one line naming its key; filling them in one by one moves it to the next
    fill = {"measure.callable": "toyops:scale", "measure.inputs": str(out / "kernels" / "toy-todo" / "bench_inputs.py"),
            "measure.rows": [{"name": "r", "B": 1, "T": 8, "H": 1, "D": 4}],
            "measure.cpu.rows": [{"name": "t", "B": 1, "T": 8, "H": 1, "D": 4}], "measure.bar": 1.1,
            "measure.mechanism.speeds_up.0.bytes": "2*B*T*H*D*dtype_bytes",
            "measure.mechanism.speeds_up.0.flops": 0, "ncu.rows": ["r"], "model.none": "a toy op"}
    for key in todo:
        with pytest.raises(ConfigError) as exc:
            campaign_checks.load(path)
        msg = str(exc.value)
        assert "\n" not in msg and msg.startswith(f"{path}: key '{key}': written by kgate init: fill in: ")
        node = data
        *parents, last = key.split(".")
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[last] = fill[key]
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    campaign_checks.load(path)


@pytest.fixture(scope="module", name="written")
def _written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Toy, Path]:
    """The toy (with its registry) and the campaign init wrote for it, its TODOs left as they are."""
    root = tmp_path_factory.mktemp("init-written")
    toy = toy_target(root)
    proc = run_init(toy, root / "out", "toy-written", "--cpu-select", "all")
    assert proc.returncode == 0, proc.stderr
    return toy, root / "out" / "config" / "campaigns" / "toy-written.yaml"


def test_a_dry_run_refuses_a_todo_in_one_line(written: tuple[Toy, Path], tmp_path: Path) -> None:
    _, campaign = written
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d",
                           str(tmp_path / "wd"), "--profile", str(REPO / "profiles/local"), "--config",
                           f"campaign={campaign}"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0
    assert f"{campaign}: key 'measure.bar': written by kgate init: fill in: the speedup" in proc.stdout + proc.stderr


def test_the_candidate_is_the_source_part_of_the_change(written: tuple[Toy, Path], tmp_path: Path) -> None:
    written_toy, campaign = written
    toy = toy_target(tmp_path)
    assert toy.base == written_toy.base
    data = yaml.safe_load(campaign.read_text())
    data["target"]["repo"]["path"] = str(toy.path)
    data["measure"]["bar"] = 1.1
    data["measure"]["mechanism"]["speeds_up"][0].update(bytes="2*B*T*H*D*dtype_bytes", flops=0)
    data["model"] = {"none": "a toy op"}
    path = tmp_path / "toy-written.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    first = candidate_mod.identity(campaign_mod.load(path))
    git(toy.path, "checkout", "-q", "faster")
    write(toy.path, {"tests/test_scale_shapes.py": NEW_TESTS + "\n# another test commit\n"})
    git(toy.path, "commit", "-qam", "tests only")
    assert candidate_mod.identity(campaign_mod.load(path)) == first, "test files are outside candidate.diff_paths"
    write(toy.path, {"toyops/scale.py": SCALE.replace(FWD_BASE, FWD_FASTER) + "\n# a source edit\n"})
    git(toy.path, "commit", "-qam", "source")
    assert candidate_mod.identity(campaign_mod.load(path)) != first
    # a worktree head: the checkout's files against the base, untracked ones included
    git(toy.path, "checkout", "-q", "main")
    write(toy.path, {"toyops/scale.py": SCALE.replace(FWD_BASE, FWD_FASTER), "toyops/extra.py": "X = 1\n",
                     "tests/test_scale.py": TESTS + APPENDED})
    before = clone_state(toy.path)
    proc = run_init(toy, tmp_path / "out", "toy-wt", "--cpu-select", "all", head=str(toy.path))
    assert proc.returncode == 0, proc.stderr
    assert clone_state(toy.path) == before
    wt = yaml.safe_load((tmp_path / "out" / "config" / "campaigns" / "toy-wt.yaml").read_text())
    assert wt["candidate"] == {"worktree": str(toy.path), "diff_paths": ["toyops/extra.py", "toyops/scale.py"],
                               "allowed_paths": ["toyops/extra.py", "toyops/scale.py"]}
    assert "fixture: tests/test_scale.py: adds to the file (1 overlay edit)" in lines(proc, "decided")


def test_a_head_is_named_by_its_branch_or_by_a_commit_that_does_not_move(tmp_path: Path) -> None:
    toy = toy_target(tmp_path)
    sha = git(toy.path, "rev-parse", "faster")
    assert read_change(toy.path, toy.base, "faster").candidate_value == "faster"
    assert read_change(toy.path, toy.base, sha[:10]).candidate_value == sha
    assert read_change(toy.path, toy.base, "faster~1").candidate_value == git(toy.path, "rev-parse", "faster~1")
    with pytest.raises(ConfigError, match="--head: 'nope' is not a commit of"):
        read_change(toy.path, toy.base, "nope")


def test_todo_values_anywhere_are_found_in_file_order() -> None:
    mark = campaign_mod.TODO_MARK
    data = {"a": 1, "b": {"c": f"{mark}: first", "d": [0, {"e": f"{mark}: second"}]}, "f": "TODO but not ours"}
    assert campaign_mod.todos(data) == [("b.c", "first"), ("b.d.1.e", "second")]
    with pytest.raises(ConfigError, match=r"^src: key 'b.c': written by kgate init: fill in: first \(1 more: b.d.1.e\)$"):
        campaign_mod.refuse_todos(data, "src")


# A benchmark script in Liger-Kernel's format (written here): a sweep sized by the device, a dtype in its configs
BENCH_SCRIPT = '''
import torch
from utils import parse_benchmark_script_args, run_benchmarks

def bench_speed_scale(input):
    n = input.x * input.extra_benchmark_config["M"]
    return n

if __name__ == "__main__":
    args = parse_benchmark_script_args()
    if torch.cuda.get_device_properties(0).total_memory > 60e9:
        x_max = 14
    else:
        x_max = 12
    common_configs = {
        "kernel_name": "scale",
        "x_name": "N",
        "x_values": [2**i for i in range(10, x_max + 1)],
        "kernel_providers": ["liger", "torch"],
        "extra_benchmark_configs": [{"M": 64, "alpha": 2.0, "dtype": torch.float32}, {"M": 256, "alpha": 2.0}],
        "overwrite": args.overwrite,
    }
    run_benchmarks(bench_test_fn=bench_speed_scale, **common_configs)
'''


def test_rows_come_from_the_targets_benchmark_script_where_it_has_no_registry(tmp_path: Path) -> None:
    toy = toy_target(tmp_path, registry=False, extra={"benchmark/scripts/benchmark_scale.py": BENCH_SCRIPT})
    proc = run_init(toy, tmp_path / "out", "toy-script")
    assert proc.returncode == 0, proc.stderr
    todo = [ln.split(":", 1)[0] for ln in lines(proc, "TODO")]
    assert "measure.rows" not in todo and "ncu.rows" not in todo and "measure.inputs" in todo
    data = yaml.safe_load((tmp_path / "out" / "config" / "campaigns" / "toy-script.yaml").read_text())
    rows = data["measure"]["rows"]
    # the first branch's x_max (14): N 1024..16384 for each config, the dtype left out, float values kept unnamed
    assert [r["name"] for r in rows] == [f"M{m}_N{2 ** i}" for m in (64, 256) for i in range(10, 15)]
    assert rows[0] == {"name": "M64_N1024", "M": 64, "alpha": 2.0, "N": 1024}
    assert data["ncu"]["rows"] == ["M64_N1024", "M256_N16384"]
    decided = " ".join(lines(proc, "decided"))
    assert "measure.rows from the target's benchmark script benchmark/scripts/benchmark_scale.py" in decided
    assert any("x_max = 14 (the first branch of `if torch.cuda.get_device_properties(0).total_memory > 60e9`)" in w
               for w in lines(proc, "warning"))
    assert any("dtype (torch.float32)" in w for w in lines(proc, "left out"))


def test_a_script_without_a_literal_sweep_is_one_warning_and_the_rows_stay_yours(tmp_path: Path) -> None:
    script = BENCH_SCRIPT.replace("[2**i for i in range(10, x_max + 1)]", "sweep_from_file()")
    toy = toy_target(tmp_path, registry=False, extra={"benchmark/scripts/benchmark_scale.py": script})
    proc = run_init(toy, tmp_path / "out", "toy-script-bad")
    assert proc.returncode == 0, proc.stderr
    assert "measure.rows" in [ln.split(":", 1)[0] for ln in lines(proc, "TODO")]
    assert "benchmark/scripts/benchmark_scale.py: no rows read (x_values is not a literal sweep (sweep_from_file()))" \
        in lines(proc, "warning")
