"""Gate integrity on the default campaign (real fla-core 0.6.0, CPU interpreter): each way of passing
by accident or narrowing the contract stops at its gate, with the evidence in the record, and so does
each adversarial candidate of tests/data/candidates (hidden files, binary diffs, code right only under
pytest, a memoized backward, numeric flags set at run time) and a BENCH_BASE tampered with after the freeze.

The campaign is the default one under another name with a three-case CPU gate (``NARROW``: the cases at
T = 40 and T = 50, one of them the fixture's bf16 case), written once for this module: every check here is
kgate's, not the oracle's, so the breadth of the CPU selection adds nothing but interpreter time. The
tests share one workdir, so baseline evidence is reused and each test pays only for its own candidate's
stages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO, Workflow, candidate_id, ran_rules

pytestmark = pytest.mark.campaign
CAMPAIGN = "rwkv6-bwd-fusion-narrow"
NARROW = "tiny and (T40 or T50)"
DATA = "tests/data/candidates"


@dataclass(frozen=True)
class Narrow(Workflow):
    """The default campaign under the name ``CAMPAIGN`` with the CPU gate ``NARROW``, in one workdir."""

    spec: Path

    def run(self, *config: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return super().run(f"campaign={self.spec}", *config, **kw)


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Narrow:
    root = tmp_path_factory.mktemp("gate-integrity")
    data = yaml.safe_load((REPO / "config" / "campaigns" / "rwkv6-bwd-fusion.yaml").read_text())
    data["name"] = CAMPAIGN
    data["gate"]["select"]["cpu"] = NARROW
    spec = root / "campaigns" / f"{CAMPAIGN}.yaml"
    spec.parent.mkdir()
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    (root / "wd").mkdir()
    return Narrow(root / "wd", spec)


def _cid(wf: Narrow, source: str) -> str:
    return candidate_id(str(wf.spec), source)


def _run(wf: Narrow, source: str, **kw: object) -> tuple[str, str]:
    proc = wf.run(f"candidate={source}", **kw)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _cid(wf, source), proc.stdout + proc.stderr


def _gate(rec: dict, name: str) -> dict:
    return next(g for g in rec["gates"] if g["name"] == name)


def _fresh_identity(tmp_path: Path, note: str) -> str:
    """A copy of the identity candidate with its own content hash."""
    overlay = tmp_path / "cand"
    shutil.copytree(REPO / "kernels/rwkv6_bwd_fused/identity", overlay)
    with (overlay / "identity.py").open("a") as fh:
        fh.write(f"\n# {note}\n")
    return f"overlay:{overlay}"


def test_a_tf32_dot_fails_numeric_flags(narrow: Narrow) -> None:
    cid, log = _run(narrow, f"overlay:{DATA}/rwkv6_tf32")
    rec = narrow.record(CAMPAIGN, "candidate_build", cid)
    row = _gate(rec, "numeric_flags")
    assert row["status"] == "fail"
    assert "fla/ops/rwkv6/chunk.py:" in row["detail"] and "dot_precision added (input_precision=\"tf32\"" in row["detail"]
    assert "candidate_gate" not in ran_rules(narrow.run(f"candidate=overlay:{DATA}/rwkv6_tf32"))
    assert narrow.verdict(CAMPAIGN)["decided_by"]["stage"] == "candidate_build"


def test_an_enabled_class_without_a_fixture_case_fails_the_build(narrow: Narrow) -> None:
    cid, _ = _run(narrow, f"overlay:{DATA}/rwkv6_uncovered_class")
    rec = narrow.record(CAMPAIGN, "candidate_build", cid)
    row = _gate(rec, "dispatch_coverage")
    assert row["status"] == "fail" and "BT64-D512-dense" in row["detail"]
    assert rec["data"]["enables"] == ["BT64-D512-dense"]
    assert cid not in narrow.candidate_ids(CAMPAIGN, "candidate_gate")


def test_a_candidate_that_skips_a_test_fails_same_test_ids(narrow: Narrow) -> None:
    cid, _ = _run(narrow, f"overlay:{DATA}/rwkv6_skips_test")
    rec = narrow.record(CAMPAIGN, "candidate_gate", cid)
    assert _gate(rec, "gate_tests_pass")["status"] == "pass", "a skip is not a failure: only the id check sees it"
    row = _gate(rec, "same_test_ids")
    assert row["status"] == "fail"
    assert "T50" in row["detail"] and "passed at BENCH_BASE, skipped now" in row["detail"]
    assert narrow.verdict(CAMPAIGN)["decided_by"] == {"stage": "candidate_gate", "gate": "same_test_ids"}


def test_an_environment_difference_fails_before_the_gate_runs(narrow: Narrow, tmp_path: Path) -> None:
    source = _fresh_identity(tmp_path, "an A/A candidate gated under a different environment")
    cid, _ = _run(narrow, source, extra_env={"TRITON_F32_DEFAULT": "ieee"})
    rec = narrow.record(CAMPAIGN, "candidate_gate", cid)
    row = _gate(rec, "same_env")
    assert row["status"] == "fail"
    assert row["detail"] == "TRITON_F32_DEFAULT: unset at fixture_freeze, 'ieee' at candidate_gate"
    assert _gate(rec, "gate_tests_pass")["status"] == "skip"


def test_a_variable_the_candidate_sets_outside_tests_fails_between_arms(narrow: Narrow) -> None:
    cid, _ = _run(narrow, f"overlay:{DATA}/rwkv6_env_arm")
    gate = narrow.record(CAMPAIGN, "candidate_gate", cid)
    assert gate["status"] == "pass", gate["reasons"]
    assert _gate(gate, "same_env")["status"] == "pass"
    rec = narrow.record(CAMPAIGN, "profile_candidate", cid)
    row = _gate(rec, "same_env")
    assert row["status"] == "fail"
    assert "TRITON_F32_DEFAULT: unset at profile_baseline, 'tf32' at cand" in row["detail"]
    assert cid not in narrow.candidate_ids(CAMPAIGN, "bench")


def test_a_fallback_that_is_not_bit_identical_fails(narrow: Narrow) -> None:
    cid, _ = _run(narrow, f"overlay:{DATA}/rwkv6_fallback_drift")
    rec = narrow.record(CAMPAIGN, "candidate_gate", cid)
    assert _gate(rec, "gate_tests_pass")["status"] == "pass", "the drift is far inside every tolerance"
    row = _gate(rec, "fallback_bit_identical")
    assert row["status"] == "fail"
    assert "cmp_dense_BT32_D16 (BT32-dense)" in row["detail"] and "grad[0]" in row["detail"]
    assert "cmp_dense_BT64_D16 (optimized)" in _gate(rec, "outputs_vs_bench_base")["value"]


def test_a_worktree_modified_between_stages_is_an_error(narrow: Narrow, tmp_path: Path) -> None:
    source = _fresh_identity(tmp_path, "a candidate whose worktree is edited behind kgate's back")
    cid = _cid(narrow, source)
    build = f"results/{CAMPAIGN}/cpu/candidate_build/{cid}/record.json"
    first = narrow.run(f"candidate={source}", args=(build,))
    assert first.returncode == 0, first.stderr[-3000:]
    wt = narrow.workdir / "work" / CAMPAIGN / "cpu" / "wt" / f"cand-{cid}"
    with (wt / "fla/ops/rwkv6/chunk.py").open("a") as fh:
        fh.write("\n# edited after candidate_build\n")
    proc = narrow.run(f"candidate={source}")
    assert proc.returncode != 0
    log = (narrow.workdir / "logs" / CAMPAIGN / "cpu" / "candidate_gate" / cid / "record.log").read_text()
    assert "kgate: error" in log and str(wt.relative_to(narrow.workdir)) in log, log[-2000:]
    assert cid not in narrow.candidate_ids(CAMPAIGN, "candidate_gate") or not (
        narrow.workdir / build.replace("candidate_build", "candidate_gate")).exists()


# Adversarial candidates: each stops at the check that catches it, named in the record and the verdict.

def test_a_self_ignoring_conftest_is_a_changed_file_like_any_other(narrow: Narrow) -> None:
    """A .gitignore that ignores itself and a root conftest.py that turns failures into passes: both are in
    the candidate's commit and its diff, so the build's scope check names them before any test runs."""
    cid, _ = _run(narrow, f"overlay:{DATA}/rwkv6_self_ignoring_conftest")
    rec = narrow.record(CAMPAIGN, "candidate_build", cid)
    assert [f["path"] for f in rec["data"]["diff"]["files"]] == [".gitignore", "conftest.py", "fla/ops/rwkv6/chunk.py"]
    row = _gate(rec, "scoped_diff")
    assert row["status"] == "fail" and row["detail"] == "paths outside the allowed set: .gitignore, conftest.py"
    assert "conftest.py::pytest_runtest_makereport" in rec["data"]["diff"]["changed_functions"]
    assert narrow.verdict(CAMPAIGN)["decided_by"] == {"stage": "candidate_build", "gate": "scoped_diff"}
    assert cid not in narrow.candidate_ids(CAMPAIGN, "candidate_gate")


def test_a_binary_attribute_hides_no_line_of_the_diff(narrow: Narrow) -> None:
    """`*.py binary` in the candidate's own .gitattributes: the diff is still read as text, so the forbidden
    forward and the TileLang switch are found and the changed function is listed."""
    cid, _ = _run(narrow, f"overlay:{DATA}/rwkv6_binary_attributes")
    rec = narrow.record(CAMPAIGN, "candidate_build", cid)
    row = _gate(rec, "forbidden_patterns")
    assert row["status"] == "fail" and row["value"] == "2 match(es)"
    assert "matches /def chunk_rwkv6_fwd/" in row["detail"] and "matches /FLA_TILELANG|tilelang/" in row["detail"]
    assert "fla/ops/rwkv6/chunk.py::chunk_rwkv6_fwd" in rec["data"]["diff"]["changed_functions"]
    assert _gate(rec, "scoped_diff")["detail"] == "paths outside the allowed set: .gitattributes"
    assert "Binary files" not in (narrow.workdir / rec["data"]["diff"]["patch_path"]).read_text()
    assert narrow.verdict(CAMPAIGN)["decided_by"]["stage"] == "candidate_build"


def test_a_candidate_right_only_under_pytest_fails_the_outputs_check(narrow: Narrow) -> None:
    """Correct gradients where the frozen tests look, dq * 1.5 on the optimized path elsewhere: the frozen tests
    pass, the comparison with the float64 reference outside pytest fails, naming the row and the tensor."""
    cid, _ = _run(narrow, f"overlay:{DATA}/rwkv6_pytest_detecting")
    rec = narrow.record(CAMPAIGN, "candidate_gate", cid)
    assert _gate(rec, "gate_tests_pass")["status"] == "pass", "under pytest the candidate is right"
    assert _gate(rec, "fallback_bit_identical")["status"] == "pass"
    row = _gate(rec, "outputs_vs_bench_base")
    assert row["status"] == "fail"
    assert "cmp_dense_BT64_D16 grad[0]: error 0.5 against the reference" in row["detail"]
    assert "cmp_varlen_BT64_D16 grad[0]" in row["detail"] and "BT32" not in row["detail"]
    assert narrow.verdict(CAMPAIGN)["decided_by"] == {"stage": "candidate_gate", "gate": "outputs_vs_bench_base"}
    assert cid not in narrow.candidate_ids(CAMPAIGN, "bench")


def test_a_memoizing_candidate_fails_the_outputs_check_of_the_profiled_code(narrow: Narrow) -> None:
    """A backward cached on its inputs' pointers, shapes, dtypes and strides (outside pytest): every input it
    meets first is right, so the frozen tests and candidate_gate's reference comparison pass; profile_candidate
    writes fresh values into the profiled tensors and the cache's stale gradients fail, naming the row, before
    bench spends a round."""
    cid, _ = _run(narrow, f"overlay:{DATA}/rwkv6_memoizing")
    gate = narrow.record(CAMPAIGN, "candidate_gate", cid)
    assert gate["status"] == "pass", gate["reasons"]
    assert _gate(gate, "outputs_vs_bench_base")["status"] == "pass", "one call per row: nothing stale yet"
    rec = narrow.record(CAMPAIGN, "profile_candidate", cid)
    row = _gate(rec, "timed_outputs_match")
    assert row["status"] == "fail" and row["value"].startswith("0/2 row-rounds"), row
    assert "after profiling tiny_D16:fwdbwd: grad[" in row["detail"], row["detail"]
    assert [c["row"] for c in rec["data"]["outputs_checked"]] == ["tiny_D16", "tiny_varlen_D16"]
    assert narrow.verdict(CAMPAIGN)["decided_by"] == {"stage": "profile_candidate", "gate": "timed_outputs_match"}
    assert cid not in narrow.candidate_ids(CAMPAIGN, "bench")


def test_numeric_flags_set_inside_each_call_and_restored_fail_numeric_state(narrow: Narrow) -> None:
    """TRITON_F32_DEFAULT through os.environ and torch's TF32 matmul flag through setattr, both set inside each
    backward call and restored: no source check sees them, the test processes' watch does."""
    cid, _ = _run(narrow, f"overlay:{DATA}/rwkv6_runtime_flags")
    build = narrow.record(CAMPAIGN, "candidate_build", cid)
    assert build["status"] == "pass", "names built from strings pass every source census"
    rec = narrow.record(CAMPAIGN, "candidate_gate", cid)
    assert _gate(rec, "gate_tests_pass")["status"] == "pass" and _gate(rec, "same_env")["status"] == "pass"
    row = _gate(rec, "numeric_state")
    assert row["status"] == "fail"
    assert "(call): TRITON_F32_DEFAULT 'ieee' -> 'tf32' (restored after); in the fixture run: no change" in row["detail"]
    assert "(call): torch.backends.cuda.matmul.allow_tf32 'False' -> 'True' (restored after)" in row["detail"]
    assert narrow.verdict(CAMPAIGN)["decided_by"] == {"stage": "candidate_gate", "gate": "numeric_state"}


def test_bench_base_tampered_after_the_freeze_is_an_integrity_error_not_a_no_go(narrow: Narrow,
                                                                                tmp_path: Path) -> None:
    """A frozen file edited in BENCH_BASE's worktree, a file added beside them (ignored by nothing), and a
    `git replace` of its commit: each stops the next stage with one error naming the file or the object,
    and no candidate is charged with it."""
    wf = narrow
    fx_rec = f"results/{CAMPAIGN}/cpu/fixture_freeze/record.json"
    # the stages before candidate_build, so that the workflow below goes straight to it
    assert wf.run(args=(fx_rec, f"results/{CAMPAIGN}/cpu/profile_baseline/record.json")).returncode == 0
    bench_base = wf.record(CAMPAIGN, "fixture_freeze")["data"]["bench_base"]
    wt = wf.workdir / "work" / CAMPAIGN / "cpu" / "wt" / "bench_base"
    source = _fresh_identity(tmp_path, "a candidate built after BENCH_BASE was tampered with")
    cid = _cid(narrow, source)
    record = tmp_path / "record.json"

    def stage() -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return subprocess.run([sys.executable, "-m", "kgate", "candidate_build", "--campaign-file",
                               str(narrow.spec), "--gpu", "cpu", "--candidate",
                               cid, "--candidate-source", source, "--record", str(record), "--input-record", fx_rec],
                              cwd=wf.workdir, capture_output=True, text=True, env=env, timeout=600)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@x", *args], cwd=wt, check=True,
                              capture_output=True, text=True).stdout.strip()

    frozen = wt / "fla" / "ops" / "rwkv6" / "fused_recurrent.py"
    original = frozen.read_bytes()
    try:
        frozen.write_bytes(original + b"\n# edited after the freeze\n")
        proc = stage()
        assert proc.returncode == 2 and not record.exists()
        assert proc.stderr.strip().splitlines()[-1] == (
            f"kgate: error: integrity: BENCH_BASE's worktree {wt.relative_to(wf.workdir)} differs from commit "
            f"{bench_base[:12]} by content: changed: fla/ops/rwkv6/fused_recurrent.py")
        frozen.write_bytes(original)
        (wt / "fla" / "__pycache__").mkdir()
        (wt / "fla" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
        proc = stage()
        assert proc.returncode == 2 and not record.exists()
        assert "not in the commit (untracked or ignored): fla/__pycache__/__init__.cpython-311.pyc" in proc.stderr
        shutil.rmtree(wt / "fla" / "__pycache__")
        # a commit with the frozen file edited, put in BENCH_BASE's place: a checkout would now give its files
        frozen.write_bytes(original + b"\n# swapped in\n")
        git("add", "-A")
        other = git("commit-tree", git("write-tree"), "-p", bench_base, "-m", "swapped")
        git("reset", "-q", "--hard", bench_base)
        git("replace", bench_base, other)
        # through the whole workflow: an error of the run, and no record of the candidate's build
        run = wf.run(f"candidate={source}")
        assert run.returncode != 0
        log = (wf.workdir / "logs" / CAMPAIGN / "cpu" / "candidate_build" / cid / "record.log").read_text()
        assert f"refs/replace/{bench_base} replaces object {bench_base} with {other}" in log, log[-2000:]
        assert cid not in wf.candidate_ids(CAMPAIGN, "candidate_build")
    finally:
        subprocess.run(["git", "replace", "-d", bench_base], cwd=wt, capture_output=True)
        shutil.rmtree(wt / "fla" / "__pycache__", ignore_errors=True)
        subprocess.run(["git", "reset", "-q", "--hard", bench_base], cwd=wt, check=True)
    proc = stage()
    assert proc.returncode == 0, proc.stderr[-2000:]
