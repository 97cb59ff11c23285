"""scripts/node_wheels.py: which of this environment's packages a node without network gets, and the wheels it gets.

The selection runs on this environment's real ``pip freeze``; the fetch tests download from the package index
(CI reaches it), one wheel for another CPython than this one and one sdist-only package built here.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import node_wheels  # noqa: E402


def here() -> dict[str, str]:
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True,
                            text=True, check=True).stdout
    return node_wheels.parse_freeze(freeze, "pip freeze")


def test_the_node_keeps_its_own_packages_and_never_gets_torch_or_triton() -> None:
    env = here()
    assert "snakemake" in env and "torch" in env  # what kgate's tests run with
    node = node_wheels.parse_freeze("# a CUDA image\nnumpy==2.1.0\nPyYAML==6.0.1\ntorch==2.11.0\n", "node")
    pins = node_wheels.wanted(env, node, ["pulp", "snakemake-interface-*"])
    names = {node_wheels.canonicalize_name(p.split("==")[0]) for p in pins}
    assert env["snakemake"] in pins and env["jsonschema"] in pins
    # the node's own (numpy, PyYAML under its normalised name), the GPU image's, and the excluded ones stay out
    assert not names & {"numpy", "pyyaml", "torch", "triton", "pulp"}
    assert not any(n.startswith(("nvidia-", "snakemake-interface-")) for n in names)


def test_a_node_list_that_is_not_a_freeze_is_one_line_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "node.txt"
    bad.write_text("numpy 2.1.0\n")
    with pytest.raises(SystemExit, match=r"node.txt: not a 'name==version' line: 'numpy 2.1.0'"):
        node_wheels.main(["--out", str(tmp_path / "w"), "--python-version", "3.12", "--node-has", str(bad)])
    assert not (tmp_path / "w").exists()


def test_dry_run_lists_the_pins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = tmp_path / "node.txt"
    node.write_text("jsonschema==4.0.0\n")
    assert node_wheels.main(["--out", str(tmp_path / "w"), "--python-version", "3.12", "--node-has", str(node),
                             "--dry-run"]) == 0
    lines = capsys.readouterr().out.split()
    assert here()["snakemake"] in lines and not any(ln.startswith(("jsonschema==", "torch==")) for ln in lines)
    assert not (tmp_path / "w").exists()


def test_a_wheel_for_the_nodes_python_and_an_sdist_built_here(tmp_path: Path) -> None:
    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
    tag = "cp" + other.replace(".", "")
    assert node_wheels.fetch(here()["pyyaml"], tmp_path, other) == "wheel"
    (whl,) = tmp_path.glob("*.whl")
    assert f"-{tag}-{tag}-" in whl.name and "manylinux" in whl.name and "x86_64" in whl.name
    assert node_wheels.fetch("connection_pool==0.0.3", tmp_path, other) == "built from its sdist"
    (built,) = tmp_path.glob("connection_pool-*.whl")
    assert any(n.endswith(".py") for n in zipfile.ZipFile(built).namelist())
