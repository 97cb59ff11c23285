"""Static campaign checks (kgate.campaign_checks): a mistake the file alone shows is refused when the campaign
is loaded, at DAG build and in every job, with one line naming the file and the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from kgate import campaign_checks
from kgate.errors import ConfigError
from kgate.gates.bench import BenchConfig
from kgate.measure.rows import load_spec, row_table

CAMPAIGNS = REPO / "config" / "campaigns"
DEFAULT = CAMPAIGNS / "rwkv6-bwd-fusion.yaml"
UPSTREAM = CAMPAIGNS / "rwkv6-bwd-fusion-upstream.yaml"


def write(tmp_path: Path, mutate, source: Path = DEFAULT) -> Path:
    """A shipped campaign with one change, under its own name in ``tmp_path``."""
    data = yaml.safe_load(source.read_text())
    mutate(data)
    path = tmp_path / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refused(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        campaign_checks.load(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: key '"), msg
    return msg


def row(d: dict, key: str, name: str) -> dict:
    """The row named ``name`` in the row list at the dotted ``key``."""
    node = d
    for part in key.split("."):
        node = node[part]
    return next(r for r in node if r["name"] == name)


def cu(key: str, name: str, value: list[int]):
    return lambda d: row(d, key, name).update(cu_seqlens=value)


@pytest.mark.parametrize(("mutate", "expected"), [
    # regular expressions
    (lambda d: d["dispatch"]["classes"][0].update(tests="-dense-(B\\d+"),
     "key 'dispatch.classes.BT64-D64-dense.tests': '-dense-(B\\d+' is not a regular expression"),
    (lambda d: d["candidate"]["forbid_patterns"][1].update(pattern="allow_tf32["),
     "key 'candidate.forbid_patterns.1.pattern': 'allow_tf32[' is not a regular expression"),
    (lambda d: d["measure"]["kernels"].update(replacement="^chunk_rwkv6_bwd_kernel_fused("),
     "key 'measure.kernels.replacement'"),
    (lambda d: d["ncu"]["kernels"].update(candidate="*fused"), "key 'ncu.kernels.candidate': '*fused'"),
    # row sizes
    (lambda d: row(d, "measure.rows", "B1_T8192_H96_D128").update(H=-96),
     "key 'measure.rows.B1_T8192_H96_D128.H': -96 is negative"),
    (lambda d: row(d, "dispatch.rows", "cmp_dense_BT64_D64").update(D=-64),
     "key 'dispatch.rows.cmp_dense_BT64_D64.D': -64 is negative"),
    (cu("measure.rows", "varlen_D128", [0, 4000, 1000, 8048]),
     "key 'measure.rows.varlen_D128.cu_seqlens': [0, 4000, 1000, 8048] is not strictly increasing (4000 then 1000)"),
    (cu("measure.rows", "varlen_D128", [100, 4000, 8048]),
     "key 'measure.rows.varlen_D128.cu_seqlens': [100, 4000, 8048] must start at 0"),
    (cu("measure.rows", "varlen_D128", [0, 4000, 9000]),
     "key 'measure.rows.varlen_D128.cu_seqlens': [0, 4000, 9000] ends at 9000, not at the row's T=8048"),
    (cu("measure.cpu.rows", "tiny_varlen_D16", [0, 5, 12]),
     "key 'measure.cpu.rows.tiny_varlen_D16.cu_seqlens': [0, 5, 12] ends at 12, not at the row's T=16"),
    (cu("dispatch.cpu_rows", "cmp_varlen_BT64_D16", [0, -7, 20]),
     "key 'dispatch.cpu_rows.cmp_varlen_BT64_D16.cu_seqlens': [0, -7, 20] holds a negative value"),
    (cu("dispatch.rows", "cmp_varlen_BT64_D128", [0, 256, 256, 2048]),
     "key 'dispatch.rows.cmp_varlen_BT64_D128.cu_seqlens': [0, 256, 256, 2048] is not strictly increasing"),
    (lambda d: row(d, "dispatch.rows", "cmp_dense_BT64_D64").update(dispatch="BT99-dense"),
     "key 'dispatch.rows': row cmp_dense_BT64_D64 names dispatch class 'BT99-dense'"),
    (lambda d: d["measure"]["rows"].append(dict(d["measure"]["rows"][0])),
     "key 'measure.rows': row 'B1_T8192_H96_D128' is defined twice"),
    # temporaries
    (lambda d: d["measure"]["mechanism"]["removes"]["temporaries"][0].update(bytes="B*T*H*K*4"),
     "key 'measure.mechanism.removes.temporaries.dq_fp32.bytes': 'B*T*H*K*4' uses 'K', which the row does not define"),
    (lambda d: d["measure"]["mechanism"]["removes"]["temporaries"][1].update(bytes="B*T*(H-100)*D*4"),
     "key 'measure.mechanism.removes.temporaries.dk_fp32.bytes': 'B*T*(H-100)*D*4' is -"),
    # row names
    (lambda d: d["bench"].update(gated=["B1_T8192_H96_D128", "nope"]), "key 'bench.gated': unknown row(s) nope"),
    (lambda d: d["bench"].update(controls=["B4_T2048_H16_D12"]), "key 'bench.controls': unknown row(s) B4_T2048_H16_D12"),
    (lambda d: d["profile"].update(rows=["varlen_D256"]), "key 'profile.rows': unknown row(s) varlen_D256"),
    (lambda d: d["ncu"].update(rows=["varlen"]), "key 'ncu.rows': unknown row(s) varlen"),
    (lambda d: d["measure"]["cpu"].update(controls=["tiny"]), "key 'measure.cpu.controls': unknown row(s) tiny"),
    # the profiled call is the one the bar judges (a fwdbwd profile would bound a call bench never times)
    (lambda d: d["profile"].update(mode="fwd"),
     "key 'profile.mode': fwd, but bench.modes.gated is fwdbwd: the profiled call must be the one the bar judges"),
    # endpoint kinds and classes of the gated rows
    (lambda d: d["bench"].update(endpoints=["dense", "varlen", "paged"]),
     "key 'bench.endpoints': no gated row of kind paged (check bench.gated and measure.rows)"),
    (lambda d: d["bench"].update(gated=["B1_T8192_H96_D128", "B8_T2048_H32_D256", "B8_T1024_H8_D64"]),
     "key 'bench.endpoints': no gated row of kind varlen (check bench.gated"),
    (lambda d: d["measure"]["cpu"].update(gated=["tiny_D16"]),
     "key 'bench.endpoints': no gated row of kind varlen on CPU (check measure.cpu.gated"),
    (lambda d: d["measure"].update(classes=[64, 128, 256, 512]), "key 'measure.classes': no gated row has D=512"),
    (lambda d: d["measure"].update(classes=[64, "128"]), "key 'measure.classes': no gated row has D='128'"),
    (lambda d: d["bench"].update(gated=["B8_T2048_H32_D256", "B8_T1024_H8_D64"], endpoints=["dense"]),
     "key 'measure.classes': no gated row has D=128"),
    # comparison rows without the callable that runs them
    (lambda d: [d.pop(k) for k in ("measure", "profile", "bench", "ncu")],
     "key 'dispatch.rows': the comparison rows need a measure section"),
])
def test_static_mistake_is_one_line_naming_the_key(tmp_path: Path, mutate, expected: str) -> None:
    msg = refused(write(tmp_path, mutate))
    assert expected in msg, msg


def overlay_copy(tmp_path: Path, folder: str, edit) -> str:
    """A copy of a shipped overlay folder in ``tmp_path`` whose first variant's edits are changed by ``edit``."""
    import shutil

    dest = tmp_path / Path(folder).name
    shutil.copytree(REPO / folder, dest)
    manifest = dest / "overlay.yaml"
    data = yaml.safe_load(manifest.read_text())
    edit(data["variants"][0]["edits"])
    manifest.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(dest)


@pytest.mark.parametrize(("which", "edit", "expected"), [
    ("fixture", lambda e: e.append({"path": "fla/ops/rwkv6/chunk.py", "append": e[0]["create"]}),
     "key 'fixture.overlay': the fixture edits non-test path(s) ['fla/ops/rwkv6/chunk.py'] (allowed by "
     "fixture.test_paths: ['tests/**'])"),
    ("fixture", lambda e: e[0].update(path="../tests/test_outside.py"), "'../tests/test_outside.py' leaves the target tree"),
    ("candidate", lambda e: e[0].update(create="no_such_file.py") if "create" in e[0] else e[0].update(append="nope.py"),
     "does not exist"),
])
def test_overlay_mistakes_are_refused_before_any_job(tmp_path: Path, which: str, edit, expected: str) -> None:
    """A fixture that edits a non-test path, an edit that leaves the target tree, an overlay whose edit reads a file
    its folder lacks: the overlay alone shows each, so loading the campaign refuses it (at DAG build) with one line
    naming the campaign's key, instead of fixture_freeze or candidate_build finding it after target and
    baseline_tests have run."""
    source = yaml.safe_load(DEFAULT.read_text())
    folder = overlay_copy(tmp_path / which, source[which]["overlay"], edit)
    msg = refused(write(tmp_path, lambda d: d[which].update(overlay=folder)))
    assert f"key '{which}.overlay'" in msg and expected in msg, msg


@pytest.mark.parametrize(("mutate", "expected"), [
    # the attnres replay as first written: its fixture module beside the one file gate.tests named
    (lambda d: d["gate"].update(tests=["tests/test_chunk_rwkv6_oracle.py"]),
     "key 'gate.tests': the fixture creates test module(s) ['tests/test_chunk_rwkv6_oracle_bf16.py'] under no "
     "gate.tests file or folder (['tests/test_chunk_rwkv6_oracle.py'])"),
    # the module itself: absent at the baseline (the attnres replay's second GPU run found baseline_tests empty)
    (lambda d: d["gate"].update(tests=["tests/test_chunk_rwkv6_oracle.py", "tests/test_chunk_rwkv6_oracle_bf16.py"]),
     "key 'gate.tests': names test module(s) ['tests/test_chunk_rwkv6_oracle_bf16.py'] that the fixture creates, "
     "absent at the baseline"),
    (lambda d: d["gate"].update(tests=["tests", "./tests/test_chunk_rwkv6_oracle_bf16.py::test_x"]),
     "names test module(s) ['tests/test_chunk_rwkv6_oracle_bf16.py']"),
    # a folder that only shares the prefix, and a node id of another file
    (lambda d: d["gate"].update(tests=["tes", "tests/test_x.py::test_y"]), "key 'gate.tests': the fixture creates"),
    (lambda d: d["gate"].update(pytest_args=["-o", "python_files=check_*.py"]),
     "key 'gate.pytest_args': the fixture creates test module(s) ['tests/test_chunk_rwkv6_oracle_bf16.py'] whose "
     "names are outside its python_files ['check_*.py']"),
    (lambda d: d["gate"].update(pytest_args=["--override-ini=python_files=oracle_*.py *_check.py"]),
     "outside its python_files ['oracle_*.py', '*_check.py']"),
])
def test_a_fixture_module_the_gate_would_not_collect_is_refused(tmp_path: Path, mutate, expected: str) -> None:
    """A test module the fixture creates outside every gate.tests path, or named outside the python_files the
    campaign's pytest arguments set: fixture_freeze's fixture_tests_collected gate would fail it after target
    and baseline_tests had run (the attnres replay's first GPU run did, on an H100); the file shows it."""
    msg = refused(write(tmp_path, mutate))
    assert expected in msg, msg


@pytest.mark.parametrize("tests", [["tests"], ["tests/"], ["."], ["./tests"]])
def test_a_fixture_module_under_a_gate_path_passes(tmp_path: Path, tests: list[str]) -> None:
    c = campaign_checks.load(write(tmp_path, lambda d: d["gate"].update(
        tests=tests, pytest_args=["-o", "python_files=test_*.py"])))
    assert c.data["gate"]["tests"] == tests


def test_registry_rows_are_not_judged_statically(tmp_path: Path) -> None:
    """With measure.registry the GPU row table is known at run time only: the registry counts as dense gated rows,
    row names it may hold and the classes are left to the stages; the explicit rows and the CPU side are checked."""
    def unknowable(d: dict) -> None:
        d["bench"].update(gated=["B4_T2048_H16_D128", "varlen_D128"], controls=["B8_T1024_H8_D64"])
        d["measure"].update(classes=[64, 128, 256, 512])
    campaign_checks.load(write(tmp_path, unknowable, UPSTREAM))
    msg = refused(write(tmp_path, lambda d: d["bench"].update(endpoints=["dense", "varlen", "paged"]), UPSTREAM))
    assert "key 'bench.endpoints': no gated row of kind paged" in msg and "kinds: dense, varlen" in msg, msg
    msg = refused(write(tmp_path, lambda d: d["bench"].update(gated=["B4_T2048_H16_D128"]), UPSTREAM))
    assert "no gated row of kind varlen" in msg, msg
    msg = refused(write(tmp_path, cu("measure.rows", "varlen_D128", [0, 4000, 8000]), UPSTREAM))
    assert "key 'measure.rows.varlen_D128.cu_seqlens'" in msg, msg
    msg = refused(write(tmp_path, lambda d: d["measure"]["cpu"].update(profile_rows=["tiny_D32"]), UPSTREAM))
    assert "key 'measure.cpu.profile_rows': unknown row(s) tiny_D32" in msg, msg


@pytest.mark.parametrize("gpu", ["cpu", "h200"])
@pytest.mark.parametrize("name", sorted(p.stem for p in CAMPAIGNS.glob("*.yaml")))
def test_shipped_campaigns_pass(name: str, gpu: str) -> None:
    c = campaign_checks.load(name)
    spec = load_spec(c, gpu)
    if spec is not None:
        gated = spec.gated_rows(row_table(spec.explicit_rows)) if not spec.registry else []
        assert BenchConfig.from_spec(spec, gated).endpoints == spec.endpoints(gated)


def test_dag_build_refuses_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    """``snakemake -n`` on a campaign with an invalid dispatch regex: one ``kgate: error:`` line naming the key."""
    path = write(tmp_path, lambda d: d["dispatch"]["classes"][2].update(tests="-dense-B\\d+-D(?:6[5-9]"))
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"),
                           "-d", str(tmp_path / "wd"), "--profile", str(REPO / "profiles/local"),
                           "--config", f"campaign={path}"], capture_output=True, text=True, env=env, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    lines = [ln for ln in out.splitlines() if ln.startswith("kgate: error:")]
    assert len(lines) == 1, out
    assert f"{path}: key 'dispatch.classes.BT64-D128-dense.tests'" in lines[0] and "not a regular expression" in lines[0]
    assert proc.stderr.strip().splitlines()[-1] == lines[0]
    assert "Traceback" not in out, out
    assert not (tmp_path / "wd" / "results").exists()


LIGER = CAMPAIGNS / "liger-layer-norm-rows.yaml"


def speeds_up(d: dict, i: int = 0) -> dict:
    return d["measure"]["mechanism"]["speeds_up"][i]


@pytest.mark.parametrize(("source", "mutate", "expected"), [
    # the mechanism's kernels and its per-row model
    (LIGER, lambda d: speeds_up(d).update(kernels="^_layer_norm_forward_kernel("),
     "key 'measure.mechanism.speeds_up[0].kernels': '^_layer_norm_forward_kernel(' is not a regular expression"),
    (LIGER, lambda d: speeds_up(d, 1).update(bytes="3*R*H*dtype_bytes"),
     "key 'measure.mechanism.speeds_up[1].bytes': '3*R*H*dtype_bytes' uses 'H', which the row does not define"),
    (LIGER, lambda d: speeds_up(d).update(flops="8*R*(N-100000)"),
     "key 'measure.mechanism.speeds_up[0].flops': '8*R*(N-100000)' is -"),
    (LIGER, lambda d: speeds_up(d).update(precision="fp8"), "key 'measure.mechanism.speeds_up.0.precision'"),
    (LIGER, lambda d: d["measure"]["mechanism"].update(declared=[{"kernels": "x", "speedup": 0.9, "why": "w"}]),
     "key 'measure.mechanism.declared.0.speedup'"),
    (LIGER, lambda d: d["measure"].update(mechanism={}), "key 'measure.mechanism'"),
    (LIGER, lambda d: d["measure"].update(class_key="N"), "key 'measure'"),
    # a row's dispatch class
    (DEFAULT, lambda d: d["measure"].update(dispatch_of="BT64-D{D}-{layout}"),
     "key 'measure.dispatch_of': 'BT64-D{D}-{layout}' cannot be formatted for row B1_T8192_H96_D128"),
    (DEFAULT, lambda d: d["measure"].update(dispatch_of="BT32-D{D}-{kind}"),
     "key 'measure.dispatch_of': row B1_T8192_H96_D128 has dispatch class 'BT32-D128-dense', not one of"),
    # the end-to-end workload
    (LIGER, lambda d: d["model"].update(workloads=["dense", "varlen"]),
     "key 'model.varlen_key' is required: model.workloads has varlen"),
    (LIGER, lambda d: d["model"].update(builder="kernels/liger_layer_norm_rows/model_patch.py:build"),
     "key 'model': give either config_class and model_class, or builder"),
    (LIGER, lambda d: d["model"]["patch"].update(function="kernels/liger_layer_norm_rows/nope.py:swap"),
     "key 'model.patch.function': file 'kernels/liger_layer_norm_rows/nope.py' does not exist"),
    (LIGER, lambda d: d["model"].update(none="no model"),
     "key 'model.none': no other model key may be set with it"),
    (LIGER, lambda d: d["model"].pop("cpu"), "key 'model.cpu' is required"),
    # an op without a backward times and profiles its forward only
    (LIGER, lambda d: d["measure"].update(differentiate=[]),
     "key 'profile.mode': fwdbwd, but measure.differentiate is [] (the op has no backward): set it to fwd"),
    (LIGER, lambda d: (d["measure"].update(differentiate=[]), d.setdefault("profile", {}).update(mode="fwd"),
                       d["ncu"].update(mode="fwd")),
     "key 'bench.modes.gated': fwdbwd, but measure.differentiate is []"),
])
def test_new_static_mistakes_are_refused_naming_the_key(tmp_path: Path, source: Path, mutate, expected: str) -> None:
    msg = refused(write(tmp_path, mutate, source))
    assert expected in msg, msg


def test_a_campaign_may_declare_no_end_to_end_workload(tmp_path: Path) -> None:
    from kgate.measure import model_spec

    c = campaign_checks.load(write(tmp_path, lambda d: d.update(model={"none": "the op has no model here"}), LIGER))
    assert model_spec.declared_absent(c) == "the op has no model here"
    assert model_spec.load_spec(c, "h200") is None and model_spec.load_spec(c, "cpu") is None
    absent = campaign_checks.load(write(tmp_path, lambda d: d.pop("model"), LIGER))
    assert "model" not in absent.data, "an absent optional section is not filled in with defaults"


def test_every_shipped_campaign_states_its_end_to_end_workload_or_why_it_has_none() -> None:
    """Without a ``model`` section a GPU run is never GO (the model stage is unavailable): every shipped campaign
    names a workload or says ``model: {none: <reason>}``."""

    bare = [p.name for p in sorted(CAMPAIGNS.glob("*.yaml")) if "model" not in (yaml.safe_load(p.read_text()) or {})]
    assert not bare, f"campaigns without a model section: {bare}"


def test_neutral_defaults_and_fla_conventions_stated_by_the_campaigns() -> None:
    liger = campaign_checks.load("liger-layer-norm-rows")
    assert liger.fixture_test_paths == ("test/transformers/**",), "null: the gate's own folders"
    spec = load_spec(liger, "h200")
    gated = spec.gated_rows(row_table(spec.explicit_rows))
    assert spec.endpoints(gated) == ("dense",) and spec.class_key is None
    for name in ("rwkv6-bwd-fusion", "rwkv6-bwd-fusion-upstream"):
        d = campaign_checks.load(name).data
        assert d["fixture"]["test_paths"] == ["tests/**"] and d["bench"]["endpoints"] == ["dense", "varlen"]
        assert d["model"]["workloads"] == ["dense", "varlen"] and d["model"]["varlen_key"] == "cu_seqlens"
        assert d["measure"].get("registry") is None or d["measure"]["registry"]["format"] == "fla-ops"


def test_the_profiled_call_follows_the_gated_mode_unless_set(tmp_path: Path) -> None:
    """profile.mode unset follows bench.modes.gated (a forward-only claim is bounded on the forward); set to the
    same call it is accepted."""
    def fwd_bar(d: dict) -> None:
        d["bench"]["modes"] = {"gated": "fwd", "controls": "fwd"}
        d["profile"].pop("mode", None)
        d.get("ncu", {}).pop("mode", None)
    c = campaign_checks.load(write(tmp_path, fwd_bar))
    spec = load_spec(c, "h200")
    assert (spec.profile_mode, spec.gated_mode) == ("fwd", "fwd")
    campaign_checks.load(write(tmp_path, lambda d: (fwd_bar(d), d["profile"].update(mode="fwd"))))
    msg = refused(write(tmp_path, lambda d: (fwd_bar(d), d["profile"].update(mode="fwdbwd"))))
    assert "key 'profile.mode': fwdbwd, but bench.modes.gated is fwd" in msg, msg


def _dry_run(tmp_path: Path, *config: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"),
                           "-d", str(tmp_path / "wd"), "--profile", str(REPO / "profiles/local"),
                           "--config", *config], capture_output=True, text=True, env=env, timeout=300)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    lines = [ln for ln in out.splitlines() if ln.startswith("kgate: error:")]
    assert len(lines) == 1 and "Traceback" not in out, out
    return lines[0]


def test_a_campaign_that_cannot_run_on_cpu_is_refused_there_with_its_reason_and_runs_on_gpus(tmp_path: Path) -> None:
    why = "the target refuses CPU tensors"
    path = write(tmp_path, lambda d: d["gate"].update(cpu_unavailable=why))
    line = _one_error_line(_dry_run(tmp_path, f"campaign={path}", "gpu=cpu"))
    assert line == (f"kgate: error: {path}: key 'gate.cpu_unavailable': campaign rwkv6-bwd-fusion does not run on "
                    f"CPU: {why}")
    ok = _dry_run(tmp_path, f"campaign={path}", "gpu=h200")
    assert ok.returncode == 0 and "kgate: error" not in ok.stdout + ok.stderr, ok.stdout + ok.stderr
    assert not (tmp_path / "wd" / "results").exists()
    with pytest.raises(ConfigError, match="gate.cpu_unavailable"):
        campaign_checks.load(write(tmp_path, lambda d: d["gate"].update(cpu_unavailable="")))


def test_a_ref_candidate_whose_clone_is_missing_is_one_line_naming_the_key(tmp_path: Path) -> None:
    """The target clone a ``ref:`` candidate's diff is read from is not there: the DAG build says which key, once."""
    path = write(tmp_path, lambda d: d["target"]["repo"].update(path=str(tmp_path / "no-clone")),
                 CAMPAIGNS / "fla-attnres-read-once-916.yaml")
    line = _one_error_line(_dry_run(tmp_path, f"campaign={path}", "gpu=h200"))
    assert line == (f"kgate: error: key 'target.repo.path' (or --config target_path=<clone>): {tmp_path / 'no-clone'} "
                    "is not a folder: clone the target there")


def _toy_target(tmp_path: Path, files: list[str]) -> tuple[Path, str]:
    """A git clone in ``tmp_path`` with one commit holding ``files``; its path and the commit."""
    repo = tmp_path / "toy-target"
    for rel in files:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("def test_ok():\n    pass\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.strip()
    return repo, sha


def _on_toy(tmp_path: Path, repo: Path, sha: str, tests: list[str]) -> Path:
    """The upstream campaign on the toy clone, with a fixture that creates one module and the identity candidate
    (overlays for any baseline)."""
    fixture = tmp_path / "fixture"
    fixture.mkdir(parents=True)
    (fixture / "cases.py").write_text("def test_case():\n    pass\n")
    (fixture / "overlay.yaml").write_text(yaml.safe_dump({"schema": "kgate.overlay/1", "description": "one module",
        "variants": [{"applies_to": ["*"], "edits": [{"path": "tests/ops/test_cases.py", "create": "cases.py"}]}]}))

    def mutate(d: dict) -> None:
        d["target"]["repo"].update(path=str(repo), baseline=sha)
        d["gate"]["tests"] = tests
        d["fixture"]["overlay"] = str(fixture)
        d["candidate"]["overlay"] = "kernels/rwkv6_bwd_fused/identity"
    return write(tmp_path, mutate, UPSTREAM)


def test_a_gate_path_absent_at_the_baseline_is_refused_at_dag_build(tmp_path: Path) -> None:
    """gate.tests names a path the target's baseline commit lacks (a typo, or a file only a later commit adds):
    baseline_tests would collect nothing there (the attnres replay's second GPU run did, on an H100, with the
    fixture's own module named). The DAG build reads the clone's trees and says which key and path, once."""
    repo, sha = _toy_target(tmp_path, ["tests/ops/test_rwkv6.py", "fla/__init__.py"])
    bad = _on_toy(tmp_path / "bad", repo, sha, ["tests/ops", "tests/ops/test_rwkv7.py::test_x", "tests/op"])
    line = _one_error_line(_dry_run(tmp_path / "bad", f"campaign={bad}", "gpu=h200"))
    assert line == (f"kgate: error: {bad}: key 'gate.tests': ['tests/ops/test_rwkv7.py', 'tests/op'] not in the "
                    f"baseline {sha[:12]} of {repo}: baseline_tests would have nothing there to collect"), line
    for tests in (["tests/ops"], ["tests/ops/", "./tests/ops/test_rwkv6.py::test_ok"], ["."]):
        good = _on_toy(tmp_path / str(len(tests)) / tests[0].replace("/", "_"), repo, sha, tests)
        proc = _dry_run(tmp_path / "good", f"campaign={good}", "gpu=h200")
        assert proc.returncode == 0 and "kgate: error" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_a_gate_path_is_not_judged_without_the_clone_or_its_baseline(tmp_path: Path) -> None:
    """No clone there, or one without the baseline commit: the target stage says so; the path check has
    nothing to read and stays silent (it neither passes nor refuses on a guess)."""
    from kgate.source import git

    repo, sha = _toy_target(tmp_path, ["tests/ops/test_rwkv6.py"])
    assert git.missing_paths(repo, sha, ["tests/ops", "tests/ops/x.py", "."]) == ["tests/ops/x.py"]
    assert git.missing_paths(repo, "0" * 40, ["tests/ops/x.py"]) is None
    assert git.missing_paths(tmp_path / "nowhere", sha, ["tests/ops/x.py"]) is None
