"""``kgate init`` end to end: the campaign it writes for the toy change runs to SMOKE on CPU through Snakemake.

The toy history (tests/test_init.py): a base, a test-only commit (a case appended to the existing test file, a
new test file) and a source commit that changes the forward Triton kernel in place. init decides the fixture, the
candidate, the gate and its CPU selection, the frozen paths, the rows and inputs (the toy's fla-format registry)
and the mechanism; the user fills in what it left (the bar, the kernel's bytes and flops, the end-to-end
workload), and every stage passes under the interpreter. kgate never writes into the user's clone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import Workflow, candidate_id
from test_init import SOURCE_MESSAGE, clone_state, lines, run_init, toy_target

pytestmark = pytest.mark.campaign
NAME = "toy-scale"


def test_a_campaign_from_a_change_runs_to_smoke(tmp_path: Path) -> None:
    toy = toy_target(tmp_path)
    before = clone_state(toy.path)
    out = tmp_path / "out"
    proc = run_init(toy, out, NAME)
    assert proc.returncode == 0, proc.stderr
    decided = lines(proc, "decided")
    assert "fixture: tests/test_scale.py: adds to the file (1 overlay edit)" in decided
    assert "fixture: tests/test_scale_shapes.py: new file" in decided
    assert any(d.startswith("gate.select.cpu null: all 6 collected test(s)") for d in decided)
    assert [ln.split(":", 1)[0] for ln in lines(proc, "TODO")] == [
        "measure.bar", "measure.mechanism.speeds_up.0.bytes", "measure.mechanism.speeds_up.0.flops", "model.none"]
    path = out / "config" / "campaigns" / f"{NAME}.yaml"
    data = yaml.safe_load(path.read_text())
    assert data["measure"]["registry"] == {"op": "benchmarks.ops.registry:scale", "format": "fla-ops"}
    assert data["ncu"]["kernels"] == {"baseline": "^_scale_fwd_kernel$", "candidate": "^_scale_fwd_kernel$"}
    data["measure"]["bar"] = 1.05
    data["measure"]["mechanism"]["speeds_up"][0].update(bytes="2*B*T*H*D*dtype_bytes", flops="B*T*H*D")
    data["model"] = {"none": "a toy op without a model"}
    path.write_text(yaml.safe_dump(data, sort_keys=False))

    wf = Workflow(tmp_path / "wd")
    run = wf.run(f"campaign={path}")
    assert run.returncode == 0, run.stderr[-3000:]
    cid = candidate_id(str(path))
    fixture = wf.record(NAME, "fixture_freeze")
    assert fixture["status"] == "pass"
    assert sorted(fixture["data"]["added_ids"]) == ["tests/test_scale.py::test_scale_partial_block",
                                                    "tests/test_scale_shapes.py::test_scale_keeps_shape[shape0]",
                                                    "tests/test_scale_shapes.py::test_scale_keeps_shape[shape1]"]
    build = wf.record(NAME, "candidate_build", cid)
    assert build["status"] == "pass" and [f["path"] for f in build["data"]["diff"]["files"]] == ["toyops/scale.py"]
    assert build["data"]["source"] == {"kind": "ref", "value": "faster"}
    pb = wf.record(NAME, "profile_baseline")
    assert pb["data"]["registry"]["rows"] == ["B2_T256_H4_D64", "B4_T1024_H8_D64"]
    assert [e["matched"] for e in pb["data"]["rows"][0]["mechanism"]["speeds_up"]["entries"]] == [["_scale_fwd_kernel"]]
    v = wf.verdict(NAME)
    assert v["verdict"] == "SMOKE", v
    assert data["hypothesis"].endswith(SOURCE_MESSAGE)
    assert clone_state(toy.path) == before, "kgate never writes into the user's clone"
