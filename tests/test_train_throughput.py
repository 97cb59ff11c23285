"""kgate/measure/harness/train_throughput.py on CPU with a toy target: the model code in an extension folder appended to the
package's __path__, the kernels from the arm's worktree; both arms as served workers, as the model stage runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from kgate.gates.model import ModelThresholds
from kgate.measure.arms import Arm, Deadline, WorkerFailure, ask_all
from kgate.stages.model import HARNESS, ModelSpec, fit

TOY = REPO / "tests" / "data" / "model_toy"
WORKTREE, EXT = TOY / "worktree", TOY / "ext" / "toylm"


def settings(**over: object) -> dict:
    base = {"config_class": "toylm:ToyConfig", "model_class": "toylm.lm:ToyForCausalLM",
            "config": {"hidden_size": 8, "vocab_size": 32}, "layers": 2, "layers_key": "num_hidden_layers",
            "varlen_key": "cu_seqlens", "batch": 2, "seq_len": 12, "varlen_sequences": 3, "warmup_steps": 1,
            "steps_per_block": 2, "dtype": "float32", "seed": 11, "optimizer": {"lr": 0.001}, "cpu": True,
            "cpu_setup": None, "package_dirs": [["toylm", str(EXT)]], "env_record": ["TRITON_*"]}
    base.update(over)
    return base


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(WORKTREE), str(REPO)])
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e["TRITON_INTERPRET"] = "1"
    return e


def start(name: str, tmp_path: Path, st: dict) -> Arm:
    arm = Arm(name, WORKTREE, tmp_path / f"triton-{name}", env(), tmp_path / f"worker-{name}.log",
              Deadline(300), command=[sys.executable, str(HARNESS), "--serve", "--arm", name])
    arm.info = arm.request("init", settings=st)
    return arm


@pytest.fixture(name="arms", scope="module")
def _arms(tmp_path_factory: pytest.TempPathFactory):
    st, tmp = settings(), tmp_path_factory.mktemp("arms")
    started = [start("base", tmp, st), start("cand", tmp, st)]
    yield {a.name: a for a in started}
    for a in started:
        a.close()


def test_init_takes_the_kernels_from_the_worktree_and_the_model_from_the_extension(arms) -> None:
    """The package's path is the worktree first, then the extension; every module comes from one of them."""
    info = arms["base"].info
    assert info["package_path"] == [str(WORKTREE / "toylm"), str(EXT)]
    assert info["modules"]["worktree"] == 1 and info["modules"]["extensions"] == {str(EXT): 1}
    assert info["modules"]["elsewhere"] == []
    assert info["class_files"]["config_class"] == str(WORKTREE / "toylm" / "__init__.py")
    assert info["class_files"]["model_class"] == str(EXT / "lm.py")
    assert info["device"]["kind"] == "cpu" and info["versions"]["toylm"] == "0.0.1"


def test_both_arms_build_the_same_weights_and_batches(arms) -> None:
    """Same seed, same parameter hash; the layer count reaches the config; both workloads have the same tokens."""
    built = ask_all(list(arms.values()), "build", layers=3)
    assert built["base"]["params_sha256"] == built["cand"]["params_sha256"]
    assert built["base"]["config"]["num_hidden_layers"] == 3
    fewer = arms["base"].request("build", layers=1)
    assert fewer["parameters"] < built["base"]["parameters"] and fewer["params_sha256"] != built["base"]["params_sha256"]
    arms["base"].request("build", layers=3)
    inputs = ask_all(list(arms.values()), "prepare")
    assert inputs["base"] == inputs["cand"]
    dense, varlen = inputs["base"]["dense"], inputs["base"]["varlen"]
    assert dense["tokens_per_step"] == varlen["tokens_per_step"] == 24
    assert dense["shape"] == [2, 12] and varlen["shape"] == [1, 24]
    bounds, lengths = varlen["cu_seqlens"], varlen["lengths"]
    assert bounds[0] == 0 and bounds[-1] == 24 and len(lengths) == 3 and sum(lengths) == 24
    assert len(set(lengths)) > 1 and all(n > 0 for n in lengths)


def test_a_block_reports_tokens_per_s_from_its_own_time(arms) -> None:
    """tokens/s is the block's tokens over its time; one step time per step; the losses are finite."""
    a = arms["base"]
    a.request("build", layers=2)
    a.request("prepare")
    warm = a.request("warm", workload="varlen", steps=2)
    assert warm["oom"] is None and len(warm["wall_s"]) == 2
    b = a.request("block", workload="varlen", steps=3)
    assert b["tokens"] == 3 * 24 and b["tokens_per_s"] == pytest.approx(b["tokens"] / b["block_s"])
    assert len(b["step_ms"]) == 3 and sum(b["step_ms"]) == pytest.approx(b["block_s"] * 1e3, rel=1e-6)
    assert all(x == x for x in b["loss"]) and b["peak_bytes"] > 0 and "ru_maxrss" in b["peak_method"]


def test_out_of_memory_is_answered_not_raised_and_fit_halves_the_layers(tmp_path: Path) -> None:
    """With 4 layers requested and memory for 2, fit() records the OOM and trains both arms with 2 layers."""
    st = settings(config={"hidden_size": 8, "vocab_size": 32, "oom_above_layers": 2})
    arms = {n: start(n, tmp_path, st) for n in ("base", "cand")}
    try:
        run = {"config": st["config"], "layers": 4, "min_layers": 1, "batch": 2, "seq_len": 12, "varlen_sequences": 3,
               "warmup_steps": 1, "steps_per_block": 1}
        spec = ModelSpec(campaign="toy", cpu=True, config_class=st["config_class"], model_class=st["model_class"],
                         layers_key="num_hidden_layers", varlen_key="cu_seqlens", dtype="float32", seed=11,
                         optimizer={}, packages=(), run=run, thresholds=ModelThresholds(cpu=True), cpu_setup=None)
        fitted = fit(arms, spec)
        assert fitted.layers == 2
        assert [a["layers"] for a in fitted.attempts] == [4, 2]
        first = fitted.attempts[0]
        assert first["during"] == "dense warm-up" and set(first["oom"]) == {"base", "cand"}
        assert "simulated: 4 layers do not fit" in first["oom"]["base"]
        assert fitted.built["base"]["config"]["num_hidden_layers"] == 2
        assert arms["cand"].request("block", workload="dense", steps=1)["steps"] == 1
    finally:
        for a in arms.values():
            a.close()


def test_a_failing_step_is_the_targets_failure(tmp_path: Path) -> None:
    """A forward that raises (here: an argument the model does not take) comes back as kind 'target'."""
    arm = start("cand", tmp_path, settings(varlen_key="no_such_argument"))
    try:
        arm.request("build", layers=1)
        arm.request("prepare")
        with pytest.raises(WorkerFailure) as err:
            arm.request("warm", workload="varlen", steps=1)
        assert err.value.target and "no_such_argument" in str(err.value)
    finally:
        arm.close()


def test_one_arm_by_hand_prints_the_distributions(tmp_path: Path) -> None:
    """The standalone mode: one JSON document with per-workload tokens/s summaries over the blocks."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings()))
    proc = subprocess.run([sys.executable, str(HARNESS), "--settings", str(path), "--blocks", "3"], cwd=WORKTREE,
                          env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["schema"] == "kgate.train-throughput/1" and out["build"]["layers"] == 2
    for w in ("dense", "varlen"):
        summary = out["workloads"][w]["tokens_per_s"]
        assert summary["n"] == 3 and summary["min_tokens_per_s"] <= summary["median_tokens_per_s"]
        assert len(out["workloads"][w]["blocks"]) == 3
