"""The report's model section: settings, tokens/s distributions per arm and workload, ratios, plots, escaping."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from test_model_gates import rounds

from kgate import protocol, report
from kgate import verdict as verdict_mod
from kgate.gates.model import ModelThresholds, decide_all, describe, evaluate
from kgate.records import StageResult, build_record

HOSTILE = "<script>alert(1)</script>"
PROV = {"host": "gpu-node-3", "started_utc": "2026-03-02T09:14:08Z", "finished_utc": "2026-03-02T09:34:08Z",
        "wall_s": 1200.0, "command": ["python", "-m", "kgate", "model"], "python": "3.12.3",
        "versions": {"torch": "2.11.0"}, "device": {"class": "h200", "name": "NVIDIA H200"}, "env": {},
        "git": {}, "slurm": {"job_id": "5501", "node": "gpu-node-3"}, "local_rule": False}


def model_record(*, hostile: bool = False) -> dict:
    cfg = ModelThresholds()
    rec = rounds(7, dense=1.05, varlen=0.995, noise=0.001)
    decisions = decide_all(rec, cfg)
    workloads = [describe(w, rec, decisions[w], cfg) for w in ("dense", "varlen")]
    data = {
        "measured": True, "cpu": False, "timings_meaningful": True, "note": None,
        "model": {"config_class": "fla.models.rwkv6:RWKV6Config", "model_class": "fla.models.rwkv6:RWKV6ForCausalLM",
                  "config": {"hidden_size": 2048, "num_heads": HOSTILE if hostile else 4}, "parameters": 1_234_567,
                  "dtype": "bfloat16", "seed": 1, "optimizer": {"lr": 0.0003, "fused": True},
                  "packages": [{"requirement": "flash-linear-attention==0.6.0", "sha256": "4110ff0f" * 8,
                                "extends": "fla", "adds": ["layers", "models"]}]},
        "layers": {"requested": 24, "used": 12, "min": 12, "reduced": True,
                   "attempts": [{"layers": 24, "oom": {"cand": "OutOfMemoryError: CUDA out of memory"},
                                 "during": "dense warm-up"}, {"layers": 12, "oom": None}]},
        "schedule": {"batch": 4, "seq_len": 4096, "tokens_per_step": 16384, "varlen_sequences": 3,
                     "varlen_boundaries": [0, 5000, 9000, 16384], "varlen_lengths": [5000, 4000, 7384],
                     "warmup_steps": 16, "steps_per_block": 8, "blocks": {"min": 5, "max": 15}},
        "thresholds": {"dense_gain_min": 0.03, "varlen_tolerance": 0.02, "resolution": 0.02},
        "blocks": 7, "stopped": "look at 7 blocks: both gates decided",
        "checkpoint": "results/c/h200/model/0123456789ab/blocks.jsonl", "workloads": workloads,
    }
    gates = evaluate(decisions, cfg, "results/c/h200/model/0123456789ab/record.json")
    return build_record(stage="model", campaign="c", gpu="h200", candidate="0123456789ab",
                        result=StageResult(gates=gates, data=data), provenance=PROV)


def render(tmp_path: Path, record: dict) -> str:
    v = verdict_mod.compute([record], campaign="c", gpu="h200", candidate="0123456789ab")
    out = tmp_path / "reports" / "c" / "h200"
    report.render(v, [copy.deepcopy(record)], out, history=[], devices=())
    return (out / "index.html").read_text()


def test_the_section_shows_settings_distributions_ratios_and_plots(tmp_path: Path) -> None:
    """Layers requested vs used with the cause, both arms' tokens/s columns, the ratio line and three plots."""
    html = render(tmp_path, model_record())
    section = html[html.index('id="st-model"') if 'id="st-model"' in html else html.index("Model training throughput"):]
    assert "12 of the 24 requested: reduced by device memory" in section
    assert "CUDA out of memory" in section and "dense warm-up" in section
    assert "4 x 4096 = 16384 tokens" in section and "lengths 5000, 4000, 7384" in section
    assert "flash-linear-attention==0.6.0" in section
    for head in ("median tokens/s", "mean tokens/s", "std tokens/s", "min tokens/s", "p10 tokens/s", "p90 tokens/s"):
        assert head in section
    assert section.count("<td>baseline</td>") == 2 and section.count("<td>candidate</td>") == 2
    assert "tokens/s ratio (candidate / baseline): <b>1.05" in section
    # one plot: tokens/s per block, a line per workload and arm
    assert section.count("<svg ") == 1 and "Model: tokens/s per block, per workload and arm" in section
    for line in ("dense baseline", "dense candidate", "varlen baseline", "varlen candidate"):
        assert f"{line}: " in section
    assert "blocks.jsonl" in section
    # the gate rows carry their intervals
    assert "dense_tokens_per_s_gain" in html and "varlen_tokens_per_s_neutral" in html


def test_every_string_is_escaped(tmp_path: Path) -> None:
    """A config value carrying markup lands as text, never as a tag."""
    html = render(tmp_path, model_record(hostile=True))
    assert HOSTILE not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_summary_and_verdict_name_the_model_gates(tmp_path: Path) -> None:
    """A GPU record whose dense gate passes and varlen passes: the model gates are in verdict.json's gate list."""
    record = model_record()
    v = verdict_mod.compute([record], campaign="c", gpu="h200", candidate="0123456789ab")
    names = {g["name"]: g["status"] for g in v["gates"]}
    assert names == {"dense_tokens_per_s_gain": "pass", "varlen_tokens_per_s_neutral": "pass"}
    # other stages have no record: a GPU run cannot be GO without them
    assert v["verdict"] == "INCONCLUSIVE"
    assert json.loads(json.dumps(v))["stages"][-1]["stage"] == "model"


def passing(stage: str) -> dict:
    from kgate.records import Gate

    cand = "0123456789ab" if stage in protocol.CANDIDATE_STAGES else None
    return build_record(stage=stage, campaign="c", gpu="h200", candidate=cand,
                        result=StageResult(gates=[Gate(f"{stage}_ok", "holds", "yes", "pass")]), provenance=PROV)


def test_a_gpu_run_is_go_only_with_a_passing_model_record() -> None:
    """Every other stage passed on an H200: without the model record INCONCLUSIVE naming it; with it GO;
    with the model's dense gate failed NO-GO decided by that gate."""

    others = [passing(s) for s in protocol.STAGES if s != "model"]
    v = verdict_mod.compute(others, campaign="c", gpu="h200", candidate="0123456789ab")
    assert v["verdict"] == "INCONCLUSIVE" and v["decided_by"] == {"stage": "model", "gate": None}
    assert "missing: model" in v["sentence"]
    v = verdict_mod.compute([*others, passing("model")], campaign="c", gpu="h200", candidate="0123456789ab")
    assert v["verdict"] == "GO"
    cfg = ModelThresholds()
    failed = build_record(stage="model", campaign="c", gpu="h200", candidate="0123456789ab", provenance=PROV,
                          result=StageResult(gates=evaluate(decide_all(rounds(5, dense=1.0, varlen=1.0), cfg), cfg,
                                                            "ev")))
    v = verdict_mod.compute([*others, failed], campaign="c", gpu="h200", candidate="0123456789ab")
    assert v["verdict"] == "NO-GO" and v["decided_by"] == {"stage": "model", "gate": "dense_tokens_per_s_gain"}
