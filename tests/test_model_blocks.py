"""The model stage's round loop with fake arms: interleaving, the blocks.jsonl checkpoint, resume, time limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgate.gates.model import ModelThresholds
from kgate.measure import coordinator as measure
from kgate.stages.model import ModelSpec, run_blocks

RUN = {"config": {}, "layers": 1, "batch": 1, "seq_len": 8, "varlen_sequences": 2, "warmup_steps": 1,
       "steps_per_block": 2}


def spec(min_blocks: int = 4, max_blocks: int = 4) -> ModelSpec:
    return ModelSpec(campaign="toy", cpu=True, config_class="m:C", model_class="m:M", layers_key="n",
                     varlen_key="cu_seqlens", dtype="float32", seed=1, optimizer={}, packages=(), run=RUN,
                     thresholds=ModelThresholds(min_blocks=min_blocks, max_blocks=max_blocks, cpu=True), cpu_setup=None)


class FakeArm:
    """Answers ``block`` like the harness; ``fail_at`` raises on that call (a killed or crashed worker)."""

    def __init__(self, name: str, log: list[str], fail_at: int | None = None) -> None:
        self.name, self.log, self.fail_at, self.calls = name, log, fail_at, 0

    def request(self, cmd: str, **args: object) -> dict:
        assert cmd == "block"
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise measure.WorkerFailure(self.name, "worker exited with -9", target=True)
        self.log.append(f"{self.name}:{args['workload']}")
        steps = int(args["steps"])
        return {"workload": args["workload"], "steps": steps, "tokens": steps * 8, "block_s": 0.5,
                "tokens_per_s": steps * 8 / 0.5, "step_ms": [250.0] * steps, "loss": [1.0] * steps,
                "peak_bytes": 1, "peak_method": "fake", "t_start": 0.0, "t_end": 0.5}


def arms(log: list[str], fail_cand_at: int | None = None) -> dict:
    return {"base": FakeArm("base", log), "cand": FakeArm("cand", log, fail_cand_at)}


def go(ckpt: Path, a: dict, key: dict, *, seconds: float = 600.0, s: ModelSpec | None = None):
    return run_blocks(a, s or spec(), measure.Telemetry(None, cpu=True), ckpt, key, set(), measure.Deadline(seconds),
                      1.0)


def test_rounds_alternate_and_each_is_checkpointed(tmp_path: Path) -> None:
    """Round i runs dense then varlen, each in both arms, the baseline first in even rounds; one line per round."""
    log: list[str] = []
    recorded, resumed, note, why = go(tmp_path / "blocks.jsonl", arms(log), {"k": 1})
    assert len(recorded) == 4 and resumed == 0 and note is None and why == "the cap of 4 blocks per arm"
    assert [r["order"] for r in recorded] == ["AB", "BA", "AB", "BA"]
    assert log[:8] == ["base:dense", "cand:dense", "base:varlen", "cand:varlen",
                       "cand:dense", "base:dense", "cand:varlen", "base:varlen"]
    lines = [json.loads(x) for x in (tmp_path / "blocks.jsonl").read_text().splitlines()]
    assert lines[0]["kind"] == "header" and [x["index"] for x in lines[1:]] == [0, 1, 2, 3]


def test_a_killed_stage_resumes_at_its_last_finished_round(tmp_path: Path) -> None:
    """The candidate dies in round 3: rounds 1-2 stay in blocks.jsonl and the rerun adds only rounds 3-4."""
    ckpt = tmp_path / "blocks.jsonl"
    with pytest.raises(measure.WorkerFailure):
        go(ckpt, arms([], fail_cand_at=5), {"k": 1})
    assert len(ckpt.read_text().splitlines()) == 1 + 2
    log: list[str] = []
    recorded, resumed, note, _ = go(ckpt, arms(log), {"k": 1})
    assert resumed == 2 and "resumed after 2" in note and len(recorded) == 4
    assert len(log) == 2 * 4 and [r["order"] for r in recorded] == ["AB", "BA", "AB", "BA"]


def test_another_setup_sets_the_checkpoint_aside(tmp_path: Path) -> None:
    """A checkpoint recorded under another run key (other layers, inputs, commits) is renamed, not reused."""
    ckpt = tmp_path / "blocks.jsonl"
    go(ckpt, arms([]), {"layers": 24})
    recorded, resumed, note, _ = go(ckpt, arms([]), {"layers": 12})
    assert resumed == 0 and "set aside" in note and len(recorded) == 4
    assert len(list(tmp_path.glob("rounds.stale-*.jsonl"))) == 1


def test_the_loop_stops_before_the_stage_time_runs_out(tmp_path: Path) -> None:
    """With too little time left for a round, the loop stops and says why (the gates then say inconclusive)."""
    recorded, _, _, why = go(tmp_path / "blocks.jsonl", arms([]), {"k": 1}, seconds=10)
    assert recorded == [] and why.startswith("the stage's time limit")


def test_the_stage_refuses_to_run_without_a_passed_bench_unless_calibrating() -> None:
    """By hand too, the model stage needs the bench record; only --calibration (an A/A, never GO) goes without it."""
    import argparse

    from kgate import campaign
    from kgate.errors import IncompleteData
    from kgate.stages.common import Context
    from kgate.stages.model import run

    ctx = Context(campaign=campaign.load("rwkv6-bwd-fusion"), gpu="cpu", candidate="0123456789ab",
                  args=argparse.Namespace(stage="model", calibration=False), device={},
                  inputs={"fixture_freeze": {}, "candidate_build": {}})
    with pytest.raises(IncompleteData, match="no passing bench record.*--calibration"):
        run(ctx)
