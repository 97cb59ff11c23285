"""fixture_freeze's fixture_tests_collected: a test module the fixture creates must add collected ids."""

from __future__ import annotations

from pathlib import Path

from kgate.source import overlay
from kgate.stages.fixture_freeze import created_tests_gate

REPO = Path(__file__).resolve().parent.parent
LARGE_ROWS = REPO / "kernels" / "liger-layer-norm-bwd-945-large-rows" / "fixture"
BASE = "git:397ab301bb5f3237b703c9f08cf987241ddc9460"
NEW = "test/transformers/test_layer_norm_large_rows.py"
# the baseline's ids that a CPU selection keeps (as collected by the Liger campaign on CPU)
OLD = [f"test/transformers/test_layer_norm.py::test_liger_layer_norm[dtype0-1e-05-1e-05-{s}]"
       for s in ("2-8-64", "4-16-128", "1-1-1023", "3-7-256", "1-1-1500")]


def test_created_modules_are_the_create_edits_with_test_names() -> None:
    variant = overlay.select(LARGE_ROWS, BASE)
    assert overlay.created_test_files(variant) == [NEW]
    edits = (
        {"path": "tests/helpers_data.py", "create": "x.py"},
        {"path": "tests/ops/check_test.py", "create": "y.py"},
        {"path": "tests/test_old.py", "append": "z.py"},
    )
    assert overlay.created_test_files(overlay.Variant(LARGE_ROWS, ("*",), edits)) == ["tests/ops/check_test.py"]


def test_a_fixture_module_deselected_by_its_own_file_name() -> None:
    """What happened to this campaign's first CPU smoke: select.cpu '... and not large' also matched the
    fixture's file name (test_layer_norm_large_rows.py), so the run collected 9 -> 9 ids and fixture_only_adds
    passed. The gate names the file and the expression; on a GPU the same is a failure."""
    variant = overlay.select(LARGE_ROWS, BASE)
    cpu = created_tests_gate(variant, OLD, "(not dtype1 or functional) and not large", True, "o.json")
    assert cpu.status == "skip" and NEW in cpu.detail and "not large" in cpu.detail and "file" in cpu.detail
    gpu = created_tests_gate(variant, OLD, "not large", False, "o.json")
    assert gpu.status == "fail" and "select.gpu" in gpu.detail
    # not collected at all (no selection): a name outside python_files, a folder outside gate.tests
    none = created_tests_gate(variant, OLD, None, True, "o.json")
    assert none.status == "fail" and "python_files" in none.detail
    ok = created_tests_gate(variant, [*OLD, f"{NEW}::test_layer_norm_rows_against_float64[fp32-few-R37-N100]"],
                            "(not dtype1 or functional) and not many", True, "o.json")
    assert ok.status == "pass" and ok.value == f"{NEW}: 1"


def test_no_created_module_is_a_skip() -> None:
    variant = overlay.select(REPO / "kernels" / "liger-layer-norm-bwd-945" / "fixture", BASE)
    gate = created_tests_gate(variant, OLD, None, False, None)
    assert gate.status == "skip" and "creates no test module" in gate.value
