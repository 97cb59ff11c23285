"""A baseline whose tests import a module the environment lacks is an error naming it, never a NO-GO.

Real pytest runs of toy targets through the baseline's and fixture's runner (``judge.run_with_reruns``); the
module names are ones no environment holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_gate_runner import TOY, spec, tree

from kgate.errors import MissingDependency
from kgate.testrun import judge, missing_deps


def run(tmp_path: Path, files: dict[str, str]):
    root = tree(tmp_path, files)
    return root, lambda: judge.run_with_reruns(spec(), root, tmp_path / "out", tmp_path / "cache", reruns=1)


def test_a_module_missing_at_collection_is_an_error_naming_it_the_file_and_the_log(tmp_path: Path) -> None:
    _, go = run(tmp_path, {**TOY, "tests/test_a.py": "import kgate_absent_dep_x.sub\ndef test_1():\n    pass\n",
                           "tests/test_b.py": "from toy import f\ndef test_2():\n    assert f(1) == 2\n"})
    with pytest.raises(MissingDependency) as err:
        go()
    text = str(err.value)
    assert "lacks module 'kgate_absent_dep_x'" in text and "tests/test_a.py" in text
    assert "is installed" not in text
    log = Path(text.rsplit("log: ", 1)[1])
    assert log.is_file() and "kgate_absent_dep_x" in log.read_text()


def test_a_module_missing_inside_a_test_is_the_same_error_and_names_every_module(tmp_path: Path) -> None:
    _, go = run(tmp_path, {**TOY, "tests/test_a.py": (
        "def test_1():\n    import kgate_absent_dep_y\n"
        "def test_2():\n    import kgate_absent_dep_z\n"
        "def test_3():\n    pass\n")})
    with pytest.raises(MissingDependency, match=r"lacks module 'kgate_absent_dep_y'.*also missing: kgate_absent_dep_z"):
        go()


def test_a_module_of_the_target_that_is_gone_stays_the_targets_failure(tmp_path: Path) -> None:
    """``toy.gone`` is the target's own (the worktree provides ``toy``): a broken baseline, judged as ever."""
    root, go = run(tmp_path, {**TOY, "tests/test_a.py": "import toy.gone\ndef test_1():\n    pass\n"})
    first, history = go()
    assert missing_deps.absent(first, root) == {}
    gate = judge.judge(first, history, "e", "baseline_gate")
    assert gate.status == "fail" and "collection errors in tests/test_a.py" in gate.detail


def test_a_subpackage_named_like_the_missing_module_does_not_provide_it(tmp_path: Path) -> None:
    """Liger-Kernel's shape: its tests live in the package ``test.transformers`` and import the transformers
    library; the subpackage is no top-level module, so the library is the environment's to provide."""
    root, go = run(tmp_path, {**TOY, "tests/__init__.py": "", "tests/kgate_absent_dep_w/__init__.py": "",
                              "tests/kgate_absent_dep_w/test_a.py": "import kgate_absent_dep_w.models\n"
                                                                    "def test_1():\n    pass\n"})
    assert not missing_deps.provides(root, "kgate_absent_dep_w") and missing_deps.provides(root, "toy")
    with pytest.raises(MissingDependency, match="lacks module 'kgate_absent_dep_w'[^.]"):
        go()


def test_a_submodule_an_installed_package_lacks_names_the_version(tmp_path: Path) -> None:
    """A test importing a submodule that this version of an installed package does not have (pytest here; a
    Triton module of another release, in life): the environment's, and the message says the version lacks it."""
    _, go = run(tmp_path, {**TOY, "tests/test_a.py": "import pytest.kgate_absent_sub\ndef test_1():\n    pass\n"})
    with pytest.raises(MissingDependency, match=r"lacks module 'pytest.kgate_absent_sub' \(package 'pytest' is "
                                                r"installed: its version lacks the module\)"):
        go()
