"""The campaign's reference outside the frozen tests: the fla campaigns' float64 recurrence, the error
measure and the judgement of the candidate's error against BENCH_BASE's.

The recurrence of kernels/rwkv6_bwd_fused/reference.py must be the oracle suite's: both are run on the
same float64 inputs (the oracle's functions are taken from its file without importing fla, which the
file imports for its tests).
"""

from __future__ import annotations

import ast
import math
import runpy

import pytest
import torch
from conftest import REPO

from kgate import campaign_checks
from kgate.errors import ConfigError
from kgate.measure import reference

ORACLE = REPO / "kernels/rwkv6_bwd_fused/oracle/tests/test_chunk_rwkv6_oracle.py"


def _oracle_functions() -> dict:
    """``rwkv6_recurrence`` and ``reference_rwkv6`` as the oracle file defines them (fla not needed)."""
    tree = ast.parse(ORACLE.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("rwkv6_recurrence", "reference_rwkv6")]
    ns: dict = {"torch": torch}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(ORACLE), "exec"), ns)  # noqa: S102 - the repo's own file
    return ns


@pytest.mark.parametrize("cu_seqlens", [None, (0, 5, 12, 20)], ids=["dense", "varlen"])
def test_the_reference_is_the_oracles_recurrence(cu_seqlens) -> None:
    oracle = _oracle_functions()
    ref = runpy.run_path(str(REPO / "kernels/rwkv6_bwd_fused/reference.py"))["chunk_rwkv6"]
    gen = torch.Generator().manual_seed(3)
    B = 2 if cu_seqlens is None else 1
    r, k, v = (torch.randn(B, 20, 2, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    w = torch.nn.functional.logsigmoid(torch.randn(B, 20, 2, 8, generator=gen, dtype=torch.float64))
    u = torch.randn(2, 8, generator=gen, dtype=torch.float64)
    cu = None if cu_seqlens is None else torch.tensor(cu_seqlens)
    o, ht = ref(r, k, v, w, u, output_final_state=True, cu_seqlens=cu, chunk_size=32)
    o2, ht2 = oracle["reference_rwkv6"](r, k, v, w, u, 8 ** -0.5, None, cu_seqlens)
    assert torch.equal(o, o2) and torch.equal(ht, ht2)
    assert ref(r, k, v, w, u, cu_seqlens=cu)[1] is None


def test_the_relative_error_and_its_edges() -> None:
    ref = torch.tensor([3.0, 4.0])
    assert reference.rel_error(torch, ref.clone(), ref) == 0.0
    assert reference.rel_error(torch, ref * 1.5, ref) == pytest.approx(0.5)
    assert reference.rel_error(torch, torch.tensor([3.0, float("nan")]), ref) == math.inf
    assert reference.rel_error(torch, torch.tensor([1.0, 0.0]), torch.zeros(2)) == pytest.approx(math.sqrt(0.5))
    assert reference.unit_roundoff(torch, torch.bfloat16) == 2 ** -8
    assert reference.unit_roundoff(torch, torch.float32) == 2 ** -24


def _ref(**kw) -> reference.Reference:
    return reference.Reference(spec="r.py:f", file=REPO / "r.py", function="f", error_ratio_max=kw.get("k", 2.0),
                               base_error_max=kw.get("base_max", 0.1))


def test_the_judgement_is_a_multiple_of_bench_bases_error_never_below_the_dtypes_roundoff() -> None:
    u = 2 ** -8
    result = {"tensors": {"grad[0]": {"base": 0.004, "cand": 0.006, "floor": u},      # 1.5x: within 2x
                          "grad[1]": {"base": 0.004, "cand": 0.5, "floor": u},        # dq * 1.5
                          "output[0]": {"base": 0.0, "cand": 1.5 * u, "floor": u},    # exact base, one rounding
                          "output[1]": {"base": 0.0, "cand": 0.0, "floor": 0.0}}}
    fails = reference.judge(_ref(), "row_a", result)
    assert fails == ["row_a grad[1]: error 0.5 against the reference, BENCH_BASE's 0.004 (125x > 2x)"]
    assert result["tensors"]["output[0]"]["ratio"] == pytest.approx(1.5)
    assert result["tensors"]["output[1]"]["ratio"] == 0.0
    with pytest.raises(ConfigError, match=r"key 'reference.callable'.*0.5 on row row_b, grad\[0\]"):
        reference.judge(_ref(), "row_b", {"tensors": {"grad[0]": {"base": 0.5, "cand": 0.5, "floor": u}}})


def test_the_fla_campaigns_name_a_reference_and_a_missing_file_is_refused(tmp_path) -> None:
    for name in ("rwkv6-bwd-fusion", "rwkv6-bwd-fusion-upstream"):
        ref = reference.load(campaign_checks.load(name).data)
        assert ref is not None and ref.file.is_file() and ref.error_ratio_max == 2.0 and ref.base_error_max == 0.1
    text = (REPO / "config/campaigns/rwkv6-bwd-fusion.yaml").read_text()
    bad = tmp_path / "rwkv6-bwd-fusion.yaml"
    bad.write_text(text.replace("kernels/rwkv6_bwd_fused/reference.py", "kernels/rwkv6_bwd_fused/no_such.py"))
    with pytest.raises(ConfigError, match=r"rwkv6-bwd-fusion.yaml: key 'reference.callable': file "
                                          r"kernels/rwkv6_bwd_fused/no_such.py does not exist"):
        campaign_checks.load(bad)


def test_inputs_are_drawn_again_in_bench_bases_worktree(tmp_path, monkeypatch) -> None:
    """An input generator that reads the target's files relative to its working directory (kgate init's fla-ops
    generator loads benchmarks/ops/registry.py) draws the reference's inputs in BENCH_BASE's worktree, as the
    worker did, whatever the stage process's own directory."""
    import dataclasses

    from kgate.measure.rows import Row, load_spec

    c = campaign_checks.load("rwkv6-bwd-fusion")
    gen = tmp_path / "inputs.py"
    gen.write_text("import torch\nfrom pathlib import Path\n\n"
                   "def make_inputs(row, *, device, dtype, seed):\n"
                   "    scale = float(Path('registry.txt').read_text())\n"
                   "    g = torch.Generator(device=device).manual_seed(seed)\n"
                   "    return (scale * torch.randn(row['N'], generator=g, device=device),), {}\n")
    wt = tmp_path / "bench_base"
    wt.mkdir()
    (wt / "registry.txt").write_text("3.0\n")
    spec = dataclasses.replace(load_spec(c, "cpu"), inputs=gen)
    ev = reference.Evaluator(reference.load(c.data), spec, "cpu", wt)
    monkeypatch.chdir(tmp_path)  # the stage's directory has no registry.txt
    (args, _kw) = ev.draw(Row("r", "dense", {"name": "r", "N": 5}), 11)
    expect = 3.0 * torch.randn(5, generator=torch.Generator().manual_seed(11))
    assert torch.equal(args[0], expect)
