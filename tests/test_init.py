"""``kgate init``: a campaign from a change, on toy git histories built here with real git.

The toy target is a tiny Triton package (a scale op with a forward and a backward kernel inside an autograd
function), its pytest tests, a reference implementation the tests compare against, and a benchmark registry in
flash-linear-attention's format. Its history: the base, a test-only commit (a case appended to the existing test
file and a new test file), and a source commit that changes the forward kernel in place (and the README). Here:
the parts of init (the split, the kernels, the gate, the registry adapter); the command itself is
tests/test_init_cli.py, the end-to-end run of the written campaign through Snakemake tests/test_campaign_init.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from test_worker import FAKE_REGISTRY, FLA_BASELINE, FLA_MIRROR

from kgate.init import kernels as kernels_mod
from kgate.init import registry as registry_mod
from kgate.init import split
from kgate.init.change import read as read_change
from kgate.init.pyindex import PyIndex
from kgate.source import overlay

FWD_BASE = '''@triton.jit
def _scale_fwd_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * alpha, mask=mask)
'''
FWD_FASTER = FWD_BASE.replace("    x = tl.load(x_ptr + offs, mask=mask)\n    tl.store(y_ptr + offs, x * alpha, mask=mask)\n",
                              "    x = tl.load(x_ptr + offs, mask=mask, other=0.0)\n    y = x * alpha\n"
                              "    tl.store(y_ptr + offs, y, mask=mask)\n")
SCALE = '''import torch
import triton
import triton.language as tl

BLOCK = 64


''' + FWD_BASE + '''

@triton.jit
def _scale_bwd_kernel(dy_ptr, dx_ptr, alpha, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask)
    tl.store(dx_ptr + offs, dy * alpha, mask=mask)


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        y = torch.empty_like(x)
        n = x.numel()
        _scale_fwd_kernel[(triton.cdiv(n, BLOCK),)](x, y, alpha, n, BLOCK=BLOCK)
        ctx.alpha = alpha
        return y

    @staticmethod
    def backward(ctx, dy):
        dy = dy.contiguous()
        dx = torch.empty_like(dy)
        n = dy.numel()
        _scale_bwd_kernel[(triton.cdiv(n, BLOCK),)](dy, dx, ctx.alpha, n, BLOCK=BLOCK)
        return dx, None


def scale(x, alpha=2.0):
    return _Scale.apply(x.contiguous(), alpha)
'''
TESTS = '''import pytest
import torch

from toyops import scale
from toyops.naive import scale_ref


@pytest.mark.parametrize("n", [7, 64])
def test_scale_forward(n):
    x = torch.randn(n)
    torch.testing.assert_close(scale(x, 3.0), scale_ref(x, 3.0))


def test_scale_backward():
    x = torch.randn(33, requires_grad=True)
    scale(x, 2.0).sum().backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
'''
APPENDED = '''

def test_scale_partial_block():
    x = torch.randn(65)
    torch.testing.assert_close(scale(x, -1.5), scale_ref(x, -1.5))
'''
NEW_TESTS = '''import pytest
import torch

from toyops import scale


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4)])
def test_scale_keeps_shape(shape):
    x = torch.randn(shape)
    assert scale(x, 2.0).shape == x.shape
'''
CONFTEST = '''import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
'''
# flash-linear-attention's registry format (benchmarks/ops/registry.py): list_ops, get_op, SHAPE_CONFIGS and the
# input factory generate_inputs(config, B, T, H, D, dtype, device)
REGISTRY = '''from dataclasses import dataclass, field

import torch

SHAPE_CONFIGS = {
    "B2_T256_H4_D64": {"B": 2, "T": 256, "H": 4, "D": 64},
    "B4_T1024_H8_D64": {"B": 4, "T": 1024, "H": 8, "D": 64},
}


def shape_BTHD(B, T, H, D, **kw):
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


_REGISTRY = {}


def register_op(config):
    _REGISTRY[config.name] = config


def get_op(name):
    return _REGISTRY[name]


def list_ops():
    return sorted(_REGISTRY)


def generate_inputs(config, B, T, H, D, dtype=torch.bfloat16, device="cuda", **kw):
    out = {}
    for name, spec in config.inputs.items():
        t = torch.randn(spec.shape_fn(B, T, H, D, **kw), dtype=dtype, device=device)
        if spec.requires_grad:
            t.requires_grad_(True)
        out[name] = t
    return out


register_op(OpConfig("scale", "toyops", {"x": TensorSpec(shape_BTHD)}, extra_kwargs={"alpha": 2.0}))
'''
SOURCE_MESSAGE = "Scale: load with a neutral fill so the forward kernel's masked lanes do no work"


#: a fixed identity and date: the toy's commits get the same SHAs in every build, so a campaign written for one
#: build's clone applies to another's
GIT_ENV = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@example.org", "GIT_COMMITTER_NAME": "u",
           "GIT_COMMITTER_EMAIL": "u@example.org", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@dataclass(frozen=True)
class Toy:
    """The toy clone: the base commit and the branch ``faster`` (tests, then source); main stays checked out."""

    path: Path
    base: str
    head: str = "faster"


def toy_target(root: Path, *, registry: bool = True, test_change: dict[str, str] | None = None,
               extra: dict[str, str] | None = None) -> Toy:
    """The toy clone. ``test_change`` replaces the test-only commit's files (to build changes that edit tests);
    ``extra`` adds files to the base commit."""
    clone = root / "toy"
    write(clone, {"toyops/__init__.py": 'from toyops.scale import scale\n\n__all__ = ["scale"]\n',
                  "toyops/naive.py": "def scale_ref(x, alpha):\n    return x * alpha\n",
                  "toyops/scale.py": SCALE, "tests/conftest.py": CONFTEST, "tests/test_scale.py": TESTS,
                  "README.md": "toy ops\n", **({"benchmarks/ops/registry.py": REGISTRY} if registry else {}),
                  **(extra or {})})
    git(clone, "init", "-q", "-b", "main")
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "toy ops")
    base = git(clone, "rev-parse", "HEAD")
    git(clone, "checkout", "-qb", "faster")
    write(clone, test_change if test_change is not None
          else {"tests/test_scale.py": TESTS + APPENDED, "tests/test_scale_shapes.py": NEW_TESTS})
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "tests: a partial block and other shapes")
    write(clone, {"toyops/scale.py": SCALE.replace(FWD_BASE, FWD_FASTER), "README.md": "toy ops, faster\n"})
    git(clone, "commit", "-qam", SOURCE_MESSAGE)
    git(clone, "checkout", "-q", "main")
    return Toy(clone, base)


def run_init(toy: Toy, root: Path, name: str, *args: str, head: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "kgate", "init", "--target", str(toy.path), "--base", toy.base,
                           "--head", head or toy.head, "--name", name, "--root", str(root), *args],
                          capture_output=True, text=True, env=env, timeout=600)


def clone_state(path: Path) -> tuple[str, str, str]:
    """What init must leave as it was: the status, every ref and HEAD."""
    return git(path, "status", "--porcelain"), git(path, "show-ref"), git(path, "rev-parse", "HEAD")


def lines(proc: subprocess.CompletedProcess[str], tag: str) -> list[str]:
    return [ln[len(tag) + 2:] for ln in proc.stdout.splitlines() if ln.startswith(f"{tag}: ")]


# the change split by kind


def _analyse(base: str, head: str, path: str = "tests/test_x.py") -> split.TestChange:
    return split.analyse_test(path, "M", base.encode(), head.encode(), frozenset([path]))


def _applied(tmp_path: Path, base: str, change: split.TestChange) -> str:
    from kgate.init.write import overlay_manifest

    folder = tmp_path / "ov"
    folder.mkdir()
    data, files = overlay_manifest(change.edits, "0" * 40, "head")
    for rel, content in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(content)
    (folder / "overlay.yaml").write_text(yaml.safe_dump(data))
    wt = tmp_path / "wt"
    (wt / "tests").mkdir(parents=True)
    (wt / change.path).write_text(base)
    overlay.apply(overlay.select(folder, "git:" + "0" * 40), wt)
    return (wt / change.path).read_text()


class TestTestAdditions:
    """Which edits of a test file only add tests (the fixture), and the overlay edits that add them."""

    def test_new_tests_between_existing_ones_become_an_anchored_replacement(self, tmp_path: Path) -> None:
        head = TESTS.replace("\n\ndef test_scale_backward", "\n\ndef test_scale_one():\n    assert scale(torch.ones(1), "
                             "2.0).item() == 2.0\n\n\ndef test_scale_backward")
        got = _analyse(TESTS, head)
        assert got.addition and [e.op for e in got.edits] == ["replace"]
        assert _applied(tmp_path, TESTS, got) == head

    def test_a_case_inserted_after_a_decorator_twin_is_slid_between_statements(self, tmp_path: Path) -> None:
        twin = '@pytest.mark.parametrize("n", [7, 64])\ndef test_scale_twice(n):\n    assert n > 0\n\n\n'
        head = TESTS.replace('@pytest.mark.parametrize("n", [7, 64])\ndef test_scale_forward',
                             twin + '@pytest.mark.parametrize("n", [7, 64])\ndef test_scale_forward')
        got = _analyse(TESTS, head)
        assert got.addition, got.why
        assert _applied(tmp_path, TESTS, got) == head

    @pytest.mark.parametrize(("head", "why"), [
        (TESTS.replace("def test_scale_backward", "@pytest.mark.skip\ndef test_scale_backward"),
         "changes test_scale_backward"),
        (TESTS + "\n\ndef test_scale_forward():\n    pass\n", "rebinds `test_scale_forward`"),
        (TESTS + "\n\n@pytest.fixture(autouse=True)\ndef _slow():\n    yield\n", "adds the autouse fixture `_slow`"),
        (TESTS + "\npytestmark = pytest.mark.skip\n", "adds `pytestmark`"),
        (TESTS + "\ntorch.set_default_dtype(torch.float64)\n", "adds a module-level statement"),
        (TESTS.replace("    x = torch.randn(33, requires_grad=True)\n",
                       "    x = torch.randn(33, requires_grad=True)\n    x = x.detach().requires_grad_()\n"),
         "inserts lines into test_scale_backward"),
    ])
    def test_anything_that_changes_an_existing_test_is_an_edit(self, head: str, why: str) -> None:
        got = _analyse(TESTS, head)
        assert not got.addition and why in got.why

    def test_new_files_deletions_and_conftests(self) -> None:
        base_files = frozenset({"tests/test_scale.py", "tests/conftest.py"})
        new = split.analyse_test("tests/test_new.py", "A", None, b"def test_a():\n    pass\n", base_files)
        assert new.addition and new.edits[0].op == "create"
        assert not split.analyse_test("tests/test_scale.py", "D", TESTS.encode(), None, base_files).addition
        assert "beside existing tests" in split.analyse_test("tests/__init__.py", "A", None, b"", base_files).why
        assert "conftest" in split.analyse_test("tests/conftest.py", "M", b"", b"x = 1\n", base_files).why
        other = split.analyse_test("other/conftest.py", "A", None, b"", base_files)
        assert other.addition, "a conftest in a folder without tests changes no existing test"

    def test_kinds_of_paths(self) -> None:
        kinds = {p: split.kind_of(p) for p in ("tests/ops/test_a.py", "tests/utils.py", "conftest.py", "pkg/ops/a.py",
                                               "docs/x.rst", "README.md", ".github/workflows/ci.yml", "setup.py",
                                               "benchmarks/ops/registry.py", "pkg/test_helpers.py")}
        assert kinds == {"tests/ops/test_a.py": "test", "tests/utils.py": "test_support", "conftest.py": "test_support",
                         "pkg/ops/a.py": "source", "docs/x.rst": "docs", "README.md": "docs",
                         ".github/workflows/ci.yml": "ci", "setup.py": "packaging",
                         "benchmarks/ops/registry.py": "bench", "pkg/test_helpers.py": "test"}


# the mechanism: kernels from the diff


def _kernels(tmp_path: Path, before: str, after: str) -> kernels_mod.Kernels:
    repo = tmp_path / "k"
    write(repo, {"pkg/k.py": before})
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    (repo / "pkg/k.py").write_text(after)
    git(repo, "commit", "-qam", "change")
    return kernels_mod.infer(read_change(repo, "main~1", "main"), ["pkg/k.py"])


class TestKernels:
    def test_an_in_place_change_names_the_kernel(self, tmp_path: Path) -> None:
        got = _kernels(tmp_path, SCALE, SCALE.replace(FWD_BASE, FWD_FASTER))
        assert got.changed == {"_scale_fwd_kernel": "its source changed"} and not got.removed and not got.added

    def test_comments_and_formatting_are_no_change(self, tmp_path: Path) -> None:
        after = SCALE.replace("    mask = offs < n\n    x =", "    # the tail\n    mask = (offs < n)\n    x =", 1)
        assert not _kernels(tmp_path, SCALE, after).any

    def test_a_fusion_removes_and_adds_kernels(self, tmp_path: Path) -> None:
        after = SCALE.replace("def _scale_bwd_kernel(", "def _scale_bwd_kernel_fused(").replace(
            "_scale_bwd_kernel[(", "_scale_bwd_kernel_fused[(")
        got = _kernels(tmp_path, SCALE, after)
        assert got.removed == ("_scale_bwd_kernel",) and got.added == ("_scale_bwd_kernel_fused",)
        assert not got.changed

    def test_launches_module_values_and_device_functions(self, tmp_path: Path) -> None:
        launch = SCALE.replace("_scale_fwd_kernel[(triton.cdiv(n, BLOCK),)](x, y, alpha, n, BLOCK=BLOCK)",
                               "_scale_fwd_kernel[(triton.cdiv(n, 128),)](x, y, alpha, n, BLOCK=128)")
        assert _kernels(tmp_path / "a", SCALE, launch).changed == {"_scale_fwd_kernel": "its launch in forward changed"}
        # fla's 231e3d4e: a block size set in the host function, passed through an unchanged launch call
        local = SCALE.replace("        n = x.numel()\n        _scale_fwd_kernel[(triton.cdiv(n, BLOCK),)](x, y, alpha, n, "
                              "BLOCK=BLOCK)", "        n = x.numel()\n        blk = min(64, n)\n        _scale_fwd_kernel"
                              "[(triton.cdiv(n, blk),)](x, y, alpha, n, BLOCK=blk)")
        assert local != SCALE
        got = _kernels(tmp_path / "d", local, local.replace("blk = min(64, n)", "blk = min(32, n)"))
        assert got.changed == {"_scale_fwd_kernel": "it is launched from forward, whose code changed"}
        reads = SCALE.replace("BLOCK = 64\n", "BLOCK = 64\nALPHA = 1.0\n").replace(
            "    tl.store(dx_ptr + offs, dy * alpha, mask=mask)", "    tl.store(dx_ptr + offs, dy * alpha * ALPHA, mask=mask)")
        got = _kernels(tmp_path / "b", reads, reads.replace("ALPHA = 1.0", "ALPHA = 0.5"))
        assert got.changed == {"_scale_bwd_kernel": "it reads the changed module-level value ALPHA"}
        helper = "@triton.jit\ndef _twice(v):\n    return v * 2\n\n\n"
        dev = SCALE.replace(FWD_BASE, helper + FWD_BASE.replace("x * alpha", "_twice(x) * alpha"))
        got = _kernels(tmp_path / "c", dev, dev.replace("return v * 2", "return v + v"))
        assert got.changed == {"_scale_fwd_kernel": "calls the changed device function _twice"}


# the gate: tests that reach the change, frozen paths, references


def test_the_gate_is_the_tests_that_import_the_change_and_references_are_refused(tmp_path: Path) -> None:
    toy = toy_target(tmp_path)
    index = PyIndex.of(toy.path)
    from kgate.init import gate as gate_mod

    base_files = frozenset(index.files)
    assert gate_mod.static_covering(index, base_files, ["toyops/scale.py"]) == ["tests/test_scale.py"]
    assert gate_mod.static_covering(index, base_files, ["toyops/naive.py"]) == ["tests/test_scale.py"]
    g = gate_mod.compose(index, base_files, ["toyops/scale.py", "toyops/naive.py"], ["tests/test_scale.py"], "static",
                         [], [], [])
    assert g.tests == ("tests/test_scale.py",) and g.frozen == ("tests/conftest.py", "toyops/__init__.py")
    assert g.references == {"toyops/naive.py": "tests/test_scale.py"}
    # a reference edited by the change is refused, naming the file
    write(toy.path, {"toyops/naive.py": "def scale_ref(x, alpha):\n    return alpha * x\n"})
    git(toy.path, "commit", "-qam", "reference and source together")
    proc = run_init(toy, tmp_path / "out", "toy-ref", head="main")
    assert proc.returncode == 2
    assert "toyops/naive.py edits a reference implementation the gate imports (tests/test_scale.py)" in proc.stderr


def test_new_test_files_join_the_gate_through_their_folder_narrowed_to_the_gate(tmp_path: Path) -> None:
    from kgate.init import gate as gate_mod

    toy = toy_target(tmp_path)
    write(toy.path, {"tests/test_other.py": "def test_other():\n    pass\n"})
    index = PyIndex.of(toy.path)
    base_files = frozenset(index.files)
    g = gate_mod.compose(index, base_files, ["toyops/scale.py"], ["tests/test_scale.py"], "static", [],
                         ["tests/new/test_new.py"], ["tests/new/test_new.py"])
    # tests/new does not exist at the base: its nearest folder that does is listed, narrowed to the gate's files
    assert g.tests == ("tests",) and g.pytest_args == ("-o", "python_files=test_new.py test_scale.py")
    assert "tests/conftest.py" not in g.frozen, "the listed folder is frozen whole"


def test_a_targets_dependent_test_helper_is_run_from_its_root(tmp_path: Path) -> None:
    from kgate.init import gate as gate_mod
    from kgate.testrun.dependents import helper_tests

    write(tmp_path, {"scripts/deps.py": "import sys, pathlib\nprint(pathlib.Path('tests/a.py').resolve(), 'tests/b.py', "
                                        "' '.join(sys.argv[1:]))\n"})
    assert helper_tests("scripts/deps.py", tmp_path, ["x/y.py"]) == ["tests/a.py", "tests/b.py", "x/y.py"]
    assert helper_tests("scripts/deps.py", tmp_path, []) == []
    with pytest.raises(Exception, match="gate.dependent_tests.helper scripts/none.py failed"):
        helper_tests("scripts/none.py", tmp_path, ["x.py"])
    known = gate_mod.conventions(frozenset({"scripts/find_dependent_tests.py", "fla/__init__.py"}))
    assert [c.name for c in known] == ["fla-dependent-tests", "fla"]
    assert gate_mod.conventions(frozenset({"src/pkg/__init__.py"})) == []


# the registry adapter


def test_the_fla_ops_adapter_reads_the_fla_registry_format(tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    write(wt, {"benchmarks/ops/registry.py": FAKE_REGISTRY, "toyop/__init__.py": "def toyop(x):\n    return x\n"})
    adapter = registry_mod.detect(wt)
    assert adapter is not None and adapter.format == "fla-ops"
    reg = adapter.read(wt, (".",))
    (op,) = reg.ops.values()
    assert (op.name, op.callable, reg.entry(op)) == ("toy", "toyop:toy", "benchmarks.ops.registry:toy")
    # the rows are the measuring worker's (dim_constraints drop D=100); the CPU row takes the smallest allowed D
    assert [r["name"] for r in op.rows] == ["B1_T64_H2_D32"] and op.skipped == ("B2_T64_H2_D100",)
    assert adapter.cpu_rows(op) == [{"name": "tiny_B1_T16_H1_D32", "B": 1, "T": 16, "H": 1, "D": 32}]
    assert registry_mod.detect(tmp_path) is None


def test_the_registry_inputs_are_the_registrys_own_and_seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import torch

    wt = tmp_path / "wt"
    write(wt, {"benchmarks/ops/registry.py": REGISTRY})
    adapter = registry_mod.ADAPTERS["fla-ops"]
    reg = adapter.read(wt, (".",))
    source = tmp_path / "bench_inputs.py"
    source.write_text(adapter.inputs_source(reg, reg.ops["scale"]))
    spec = importlib.util.spec_from_file_location("toy_bench_inputs", source)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.chdir(wt)
    monkeypatch.delitem(sys.modules, "benchmarks.ops.registry", raising=False)
    row = {"name": "r", "B": 1, "T": 4, "H": 2, "D": 3}
    args, kwargs = mod.make_inputs(row, device=torch.device("cpu"), dtype=torch.float32, seed=5)
    again = mod.make_inputs(row, device=torch.device("cpu"), dtype=torch.float32, seed=5)[1]
    other = mod.make_inputs(row, device=torch.device("cpu"), dtype=torch.float32, seed=6)[1]
    assert args == () and sorted(kwargs) == ["alpha", "x"] and kwargs["alpha"] == 2.0
    assert kwargs["x"].shape == (1, 4, 2, 3) and kwargs["x"].requires_grad
    assert torch.equal(kwargs["x"], again["x"]) and not torch.equal(kwargs["x"], other["x"])
    sys.modules.pop("benchmarks.ops.registry", None)
    # the written file is campaign code under the project's linter: a long op path keeps every line in bounds
    import dataclasses
    long_op = dataclasses.replace(reg.ops["scale"], callable="fla.ops.generalized_delta_rule.dplr:chunk_dplr_delta_rule",
                                  name="chunk_dplr_delta_rule_with_a_long_entry_name")
    assert max(map(len, adapter.inputs_source(reg, long_op).splitlines())) <= 127


@pytest.mark.skipif(not FLA_MIRROR.exists(), reason="no local mirror of flash-linear-attention")
def test_the_fla_ops_adapter_on_fla_27967b97(tmp_path: Path) -> None:
    text = subprocess.run(["git", "-C", str(FLA_MIRROR), "show", f"{FLA_BASELINE}:benchmarks/ops/registry.py"],
                          capture_output=True, text=True, check=True).stdout
    write(tmp_path, {"benchmarks/ops/registry.py": text})
    reg = registry_mod.ADAPTERS["fla-ops"].read(tmp_path, (".",))
    op = reg.ops["chunk_rwkv6"]
    assert op.callable == "fla.ops.rwkv6:chunk_rwkv6" and len(reg.ops) > 10
    assert [r["name"] for r in op.rows] == ["B1_T8192_H96_D128", "B2_T16384_H16_D128", "B4_T2048_H16_D128",
                                            "B4_T4096_H64_D128", "B8_T2048_H32_D256", "B8_T1024_H8_D64"]


def test_a_named_gate_replaces_the_covering_tests_and_a_wrong_name_is_one_line(tmp_path: Path) -> None:
    """--gate: the user's narrower (or wider) gate; a path that is no test file of the base is refused, named."""
    toy = toy_target(tmp_path)
    proc = run_init(toy, tmp_path / "bad", "toy-gate", "--gate", "tests/test_scale.py,tests/test_missing.py")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "kgate: error: --gate: tests/test_missing.py is not a test file of the base commit")
    rel = Toy(Path(os.path.relpath(toy.path, Path.cwd())), toy.base, toy.head)
    proc = run_init(rel, tmp_path / "out", "toy-gate", "--gate", "tests/test_scale.py")
    assert proc.returncode == 0, proc.stderr
    # a target given relative to the user's directory is written relative to the kgate checkout, as loaded
    written = yaml.safe_load((tmp_path / "out" / "config" / "campaigns" / "toy-gate.yaml").read_text())
    assert written["target"]["repo"]["path"] == os.path.relpath(toy.path.resolve(), REPO.resolve())
    # the fixture's new test file joins through its folder (narrowed by python_files), as without --gate
    assert "gate.tests tests (1 covering file(s): --gate)" in lines(proc, "decided")


def test_a_targets_addopts_for_a_missing_plugin_are_dropped_from_the_gate_and_said(tmp_path: Path) -> None:
    """Liger-Kernel's pytest addopts name pytest-cov's options: where the plugin is missing pytest stops with a
    usage error (exit 4). init collects again without the target's addopts and, when that works, writes it."""
    toy = toy_target(tmp_path, extra={"pytest.ini": "[pytest]\naddopts = --toy-coverage-report=term\n"})
    proc = run_init(toy, tmp_path / "out", "toy-addopts", "--gate", "tests/test_scale.py")
    assert proc.returncode == 0, proc.stderr
    decided = lines(proc, "decided")
    assert any(d.startswith("gate.pytest_args -o addopts=: the target's pytest addopts fail here") and
               "unrecognized arguments: --toy-coverage-report=term" in d for d in decided), decided
    assert any(d.startswith("gate.select.cpu null: all 6 collected") for d in decided), decided
    written = yaml.safe_load((tmp_path / "out" / "config" / "campaigns" / "toy-addopts.yaml").read_text())
    assert written["gate"]["pytest_args"][-2:] == ["-o", "addopts="]


def test_a_gate_file_importing_a_module_the_environment_lacks_is_named_in_the_todo(tmp_path: Path) -> None:
    """Liger-Kernel's convergence tests import `datasets`: init's collection names the missing module and how
    many of the gate's files import it, not only "collection errors"."""
    toy = toy_target(tmp_path, extra={"tests/test_needs_lib.py": (
        "import kgate_absent_lib_q\nfrom toyops import scale\n\n\ndef test_uses_lib():\n    assert scale\n")})
    proc = run_init(toy, tmp_path / "out", "toy-lib")
    assert proc.returncode == 0, proc.stderr
    todo = [t for t in lines(proc, "TODO") if t.startswith("gate.select.cpu")]
    assert len(todo) == 1 and "1 collection error(s), first in tests/test_needs_lib.py: this environment lacks " \
        "module(s) kgate_absent_lib_q, imported by 1 test file(s)" in todo[0], todo


def test_addopts_for_a_missing_plugin_and_a_missing_module_are_both_said(tmp_path: Path) -> None:
    """Liger-Kernel's shape at its TVD change: pytest-cov's options in addopts and convergence tests importing
    `datasets`. Without the addopts the collection gets past the usage error, so the gate drops them, and the
    TODO names the missing module (not the usage error the first collection stopped at)."""
    toy = toy_target(tmp_path, extra={"pytest.ini": "[pytest]\naddopts = --toy-coverage-report=term\n",
                                      "tests/test_needs_lib.py": ("import kgate_absent_lib_q\nfrom toyops import "
                                                                  "scale\n\n\ndef test_uses_lib():\n    assert scale\n")})
    proc = run_init(toy, tmp_path / "out", "toy-both")
    assert proc.returncode == 0, proc.stderr
    assert any(d.startswith("gate.pytest_args -o addopts=: the target's pytest addopts fail here")
               for d in lines(proc, "decided")), proc.stdout
    todo = [t for t in lines(proc, "TODO") if t.startswith("gate.select.cpu")]
    assert len(todo) == 1 and "lacks module(s) kgate_absent_lib_q" in todo[0] and "unrecognized" not in todo[0], todo


def test_the_covering_tests_say_which_import_a_changed_file_directly(tmp_path: Path) -> None:
    """A test of a layer reaches the changed kernel through the layer's module: it covers the change, and the
    account says which tests import a changed file themselves (an op's own tests), for a narrower --gate."""
    toy = toy_target(tmp_path, extra={
        "toyops/layer.py": "from toyops.scale import scale\n\n\ndef layer(x):\n    return scale(x, 2.0)\n",
        "tests/test_layer.py": "from toyops.layer import layer\n\n\ndef test_layer():\n    assert layer\n"})
    proc = run_init(toy, tmp_path / "out", "toy-layer")
    assert proc.returncode == 0, proc.stderr
    gate = [d for d in lines(proc, "decided") if d.startswith("gate.tests")]
    assert len(gate) == 1 and ("(2 covering file(s): the tests whose imports reach the changed files; 1 of them "
                               "imports one directly (tests/test_scale.py), the other 1 through other modules: "
                               "--gate narrows the gate)") in gate[0], gate
