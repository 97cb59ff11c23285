"""The end-to-end stage's workloads: a campaign's own builder and patch, varlen boundaries that must matter, dense-only
models, and a campaign without an end-to-end workload (its GO says "kernel-level evidence only").

Real harness processes on CPU (kgate/measure/harness/train_throughput.py) with the toy target of
tests/test_train_throughput.py; the verdict from records built here.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from conftest import REPO
from test_train_throughput import WORKTREE, settings, start

from kgate import protocol, verdict
from kgate.errors import ConfigError
from kgate.measure.arms import WorkerFailure
from kgate.measure.model_spec import ModelSpec, ModelThresholds
from kgate.records import Gate, StageResult, build_record
from kgate.stages import model as model_stage
from kgate.stages.model import check_varlen

BUILDER = '''
from toylm import ToyConfig
from toylm.lm import ToyForCausalLM


def build(config, layers):
    return ToyForCausalLM(ToyConfig(**config, num_hidden_layers=layers))
'''

PATCH = '''
import torch


def scale_head(model, factor):
    with torch.no_grad():
        model.head.weight.mul_(factor)
'''


STEP = '''
def doubled(model, optimizer, input_ids, labels, **boundaries):
    loss = 2.0 * model(input_ids=input_ids, labels=labels, **boundaries).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def no_loss(model, optimizer, input_ids, labels, **boundaries):
    return 0.5
'''


def spec(**over) -> ModelSpec:
    return ModelSpec(campaign="c", cpu=True, config_class=None, model_class=None, layers_key="num_hidden_layers",
                     varlen_key="cu_seqlens", dtype="float32", seed=1, optimizer={}, packages=(), run={},
                     thresholds=ModelThresholds(workloads=("dense", "varlen")), cpu_setup=None, **over)


def test_a_model_that_uses_the_boundaries_passes_the_varlen_check(tmp_path: Path) -> None:
    arm = start("a", tmp_path, settings())
    try:
        arm.request("build", layers=2)
        arm.request("prepare")
        got = arm.request("varlen_check")
        assert got["used"] and got["max_difference"] > 0
        check_varlen(spec(), {"a": got})
    finally:
        arm.close()


def test_a_model_that_ignores_the_boundaries_is_an_error_naming_the_key(tmp_path: Path) -> None:
    st = settings(config={"hidden_size": 8, "vocab_size": 32, "ignore_boundaries": True})
    arm = start("a", tmp_path, st)
    try:
        arm.request("build", layers=2)
        arm.request("prepare")
        got = arm.request("varlen_check")
        assert not got["used"] and got["max_difference"] == 0 and got["loss_with"] == got["loss_without"]
        with pytest.raises(ConfigError, match="key 'model.varlen_key': the model does not use 'cu_seqlens'"):
            check_varlen(spec(), {"a": got})
    finally:
        arm.close()


def test_a_campaign_builder_and_patch_make_the_model_and_dense_only_prepares_dense(tmp_path: Path) -> None:
    (tmp_path / "build.py").write_text(BUILDER)
    (tmp_path / "patch.py").write_text(PATCH)
    common = {"config_class": None, "model_class": None, "builder": f"{tmp_path / 'build.py'}:build",
              "target_package": "toylm", "workloads": ["dense"], "varlen_sequences": None}
    plain = start("plain", tmp_path, settings(**common))
    patched = start("patched", tmp_path, settings(**common, patch={"function": f"{tmp_path / 'patch.py'}:scale_head",
                                                                   "kwargs": {"factor": 2.0}}))
    try:
        a, b = plain.request("build", layers=2), patched.request("build", layers=2)
        assert a["params_sha256"] != b["params_sha256"], "the patch ran before the parameters were hashed"
        assert patched.info["class_files"]["patch"].endswith("patch.py")
        assert patched.info["class_files"]["builder"].endswith("build.py")
        prep = patched.request("prepare")
        assert set(prep) == {"dense"}
        warm = patched.request("warm", workload="dense", steps=1)
        assert warm["oom"] is None and len(warm["loss"]) == 1
    finally:
        plain.close()
        patched.close()


def test_a_patch_named_by_module_path_comes_from_the_arms_worktree(tmp_path: Path) -> None:
    """``patch.function: toylm.patching:scale_head``, a module of the target itself (as
    ``liger_kernel.transformers:apply_liger_kernel_to_llama``): imported from the arm's worktree, run before the
    parameters are hashed; and a campaign naming such a patch gets its package as the target package."""
    plain = start("plain", tmp_path, settings())
    patched = start("patched", tmp_path, settings(patch={"function": "toylm.patching:scale_head",
                                                         "kwargs": {"factor": 2.0}}, target_package=None))
    try:
        a, b = plain.request("build", layers=2), patched.request("build", layers=2)
        assert a["params_sha256"] != b["params_sha256"]
        assert patched.info["class_files"]["patch"] == str(WORKTREE / "toylm" / "patching.py")
        assert patched.info["package"] == "toylm"
    finally:
        plain.close()
        patched.close()
    import yaml

    from kgate import campaign
    from kgate.measure import model_spec

    source = yaml.safe_load((REPO / "config" / "campaigns" / "liger-layer-norm-rows.yaml").read_text())
    model = {k: v for k, v in source["model"].items() if k != "target_package"}
    model["patch"] = {"function": "liger_kernel.transformers:apply_liger_kernel_to_llama", "kwargs": {}}
    path = tmp_path / f"{source['name']}.yaml"
    path.write_text(yaml.safe_dump({**source, "model": model}, sort_keys=False))
    got = model_spec.load_spec(campaign.load(path), "h200")
    assert got is not None and got.target_package == "liger_kernel"
    assert got.settings([])["patch"]["function"] == "liger_kernel.transformers:apply_liger_kernel_to_llama"


def test_a_campaigns_own_training_step_replaces_kgates_in_every_workload(tmp_path: Path) -> None:
    """``model.step``: the campaign's step runs the whole training step (here its loss is twice the model's) in the
    warm-up and the timed blocks, dense and varlen; from the same weights and batch its first loss is exactly twice
    kgate's own step's. A step that returns no scalar tensor is the arm's failure, naming model.step."""
    (tmp_path / "step.py").write_text(STEP)
    plain = start("plain", tmp_path, settings())
    stepped = start("stepped", tmp_path, settings(step=f"{tmp_path / 'step.py'}:doubled"))
    try:
        for arm in (plain, stepped):
            arm.request("build", layers=2)
            arm.request("prepare")
        assert stepped.info["class_files"]["step"].endswith("step.py")
        for workload in ("dense", "varlen"):
            a = plain.request("warm", workload=workload, steps=1)["loss"][0]
            b = stepped.request("warm", workload=workload, steps=1)["loss"][0]
            assert b == pytest.approx(2 * a, rel=1e-6), (workload, a, b)
        block = stepped.request("block", workload="dense", steps=2)
        assert len(block["loss"]) == 2 and block["tokens_per_s"] > 0
    finally:
        plain.close()
        stepped.close()
    bad = start("bad", tmp_path, settings(step=f"{tmp_path / 'step.py'}:no_loss"))
    try:
        bad.request("build", layers=2)
        bad.request("prepare")
        with pytest.raises(WorkerFailure, match="model.step returned float, not the step's loss as a scalar tensor"):
            bad.request("warm", workload="dense", steps=1)
    finally:
        bad.close()


def test_model_step_names_a_file_relative_to_kgate_or_a_module(tmp_path: Path) -> None:
    """A file step resolves to an absolute path in the harness's settings; a missing file is refused naming the
    key; a module step is passed as written."""
    import yaml

    from kgate import campaign
    from kgate.measure import model_spec

    source = yaml.safe_load((REPO / "config" / "campaigns" / "liger-layer-norm-rows.yaml").read_text())
    for value, expect in (("kernels/liger_layer_norm_rows/model_patch.py:apply", "abs"),
                          ("liger_kernel.transformers.trainer:step", "module"),
                          ("kernels/no_such_step.py:step", "missing")):
        data = dict(source, model={**source["model"], "step": value})
        path = tmp_path / f"{source['name']}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        if expect == "missing":
            with pytest.raises(ConfigError, match="key 'model.step': file 'kernels/no_such_step.py' does not exist"):
                model_spec.load_spec(campaign.load(path), "h200")
            continue
        got = model_spec.load_spec(campaign.load(path), "h200")
        assert got is not None
        st = got.settings([])
        assert st["step"] == (f"{REPO / value.split(':')[0]}:apply" if expect == "abs" else value)


def rec(stage: str, gpu: str = "h200", data: dict | None = None) -> dict:
    g = Gate(f"{stage}_gate", "holds", "measured", "pass")
    cid = "0123456789ab" if stage in protocol.CANDIDATE_STAGES else None
    return build_record(stage=stage, campaign="c", gpu=gpu, candidate=cid,
                        result=StageResult(gates=[g], data=data or {}), provenance={})


def test_no_end_to_end_workload_passes_the_model_stage_and_says_so_on_the_go() -> None:
    ctx = types.SimpleNamespace(gpu="h200", campaign=types.SimpleNamespace(data={"model": {"none": "no model"}}))
    result = model_stage.not_measured(ctx)  # type: ignore[arg-type]
    assert result.status == "pass" and result.data == {"measured": False, "declared_absent": "no model"}
    model = build_record(stage="model", campaign="c", gpu="h200", candidate="0123456789ab", result=result,
                         provenance={})
    records = [rec(s) for s in protocol.STAGES if s != "model"] + [model]
    v = verdict.compute(records, campaign="c", gpu="h200", candidate="0123456789ab")
    assert v["verdict"] == "GO" and v["evidence"] == "kernel-level only"
    assert v["sentence"].startswith("kernel-level evidence only (no end-to-end workload: no model)")
    full = verdict.compute([rec(s) for s in protocol.STAGES], campaign="c", gpu="h200", candidate="0123456789ab")
    assert full["verdict"] == "GO" and full["evidence"] is None and not full["sentence"].startswith("kernel-level")


def test_without_a_model_section_a_gpu_run_is_never_go() -> None:
    ctx = types.SimpleNamespace(gpu="h200", campaign=types.SimpleNamespace(data={}))
    assert model_stage.not_measured(ctx).status == "unavailable"  # type: ignore[arg-type]
