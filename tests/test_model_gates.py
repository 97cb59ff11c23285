"""The model stage's gates, stopping rule and layer plan on synthetic blocks (no model, no worker)."""

from __future__ import annotations

import math

import pytest

from kgate import campaign, paths, protocol
from kgate.gates import model as model_gates
from kgate.gates.model import ModelThresholds, decide_all, describe, evaluate, gate_workload, should_stop
from kgate.protocol import gated_walk
from kgate.stages.model import ModelSpec, load_spec

STEPS = 4
TOKENS = 4096


def cell(block_s: float) -> dict:
    return {"steps": STEPS, "tokens": STEPS * TOKENS, "block_s": block_s, "tokens_per_s": STEPS * TOKENS / block_s,
            "step_ms": [block_s * 1e3 / STEPS] * STEPS, "peak_bytes": 1000, "loss": [2.0] * STEPS, "telemetry": None}


def rounds(n: int, *, dense: float, varlen: float, noise: float = 0.002, order_effect: float = 0.0) -> list[dict]:
    """n rounds; the candidate's tokens/s is ``dense``/``varlen`` x the baseline's; the arm that runs second
    in a round is ``order_effect`` faster; a deterministic zig-zag of relative size ``noise`` per block."""
    out = []
    for i in range(n):
        order = "AB" if i % 2 == 0 else "BA"
        wiggle = noise * (1 if (i * 7) % 3 == 0 else -1 if (i * 7) % 3 == 1 else 0.5)
        workloads = {}
        for w, ratio in (("dense", dense), ("varlen", varlen)):
            base_s = 1.0 * (1 + wiggle)
            cand_s = base_s / ratio * (1 - wiggle / 2)
            second = "cand" if order == "AB" else "base"
            times = {"base": base_s, "cand": cand_s}
            times[second] *= 1 - order_effect
            workloads[w] = {a: cell(t) for a, t in times.items()}
        out.append({"kind": "round", "index": i, "order": order, "workloads": workloads, "started": 0.0,
                    "finished": 1.0})
    return out


def statuses(recorded: list[dict], cfg: ModelThresholds) -> dict[str, str]:
    return {g.name: g.status for g in evaluate(decide_all(recorded, cfg), cfg, "ev")}


CFG = ModelThresholds(dense_gain_min=0.03, varlen_tolerance=0.02, min_blocks=5, max_blocks=15)


def test_clear_gain_passes_both_and_stops_at_the_first_look() -> None:
    """A candidate 10 % faster on both workloads passes both gates at 5 blocks, where the loop stops."""
    rec = rounds(5, dense=1.10, varlen=1.10)
    assert statuses(rec, CFG) == {"dense_tokens_per_s_gain": "pass", "varlen_tokens_per_s_neutral": "pass"}
    stop, why = should_stop(decide_all(rec, CFG), CFG)
    assert stop and "every gate decided" in why
    g = gate_workload("dense", decide_all(rec, CFG)["dense"], CFG, "ev")
    assert g.interval[0] >= 1.03 and g.value == pytest.approx(1.10, rel=0.01) and g.unit == "x"


def test_neutral_candidate_fails_the_dense_bar_and_holds_varlen() -> None:
    """An A/A-like candidate: dense cannot reach +3 % (fail), varlen is neutral within 2 % (pass)."""
    rec = rounds(5, dense=1.0, varlen=1.0)
    got = statuses(rec, CFG)
    assert got == {"dense_tokens_per_s_gain": "fail", "varlen_tokens_per_s_neutral": "pass"}
    gates = {g.name: g for g in evaluate(decide_all(rec, CFG), CFG, "ev")}
    assert "below 1.0300" in gates["dense_tokens_per_s_gain"].detail
    assert should_stop(decide_all(rec, CFG), CFG)[0]


def test_regression_fails_both() -> None:
    """A candidate 6 % slower fails the dense bar and the varlen tolerance."""
    rec = rounds(5, dense=0.94, varlen=0.94)
    assert statuses(rec, CFG) == {"dense_tokens_per_s_gain": "fail", "varlen_tokens_per_s_neutral": "fail"}


def test_small_varlen_loss_inside_the_tolerance_passes() -> None:
    """Varlen 1 % slower is within 2 % or better: pass (the interval's lower bound clears 1/1.02)."""
    rec = rounds(7, dense=1.10, varlen=0.99, noise=0.001)
    assert statuses(rec, CFG)["varlen_tokens_per_s_neutral"] == "pass"


def test_too_few_blocks_are_inconclusive_never_pass() -> None:
    """One block gives no interval; three blocks (minimum five) give one, but the gate stays inconclusive."""
    one = {g.name: g for g in evaluate(decide_all(rounds(1, dense=1.2, varlen=1.2), CFG), CFG, "ev")}
    assert all(g.status == "inconclusive" and "at least 2" in g.detail for g in one.values())
    three = {g.name: g for g in evaluate(decide_all(rounds(3, dense=1.2, varlen=1.2), CFG), CFG, "ev")}
    assert all(g.status == "inconclusive" and "only 3 of the minimum 5" in g.detail for g in three.values())
    assert all(g.interval is not None and g.interval[0] > 1.03 for g in three.values())
    assert not should_stop(decide_all(rounds(3, dense=1.2, varlen=1.2), CFG), CFG)[0]


def test_noise_straddling_the_bar_runs_to_the_cap_and_stays_inconclusive() -> None:
    """A gain near the bar with noisy blocks is undecided at every look; the cap stops it, inconclusive."""
    for n in (5, 7, 9, 11, 13):
        stop, why = should_stop(decide_all(rounds(n, dense=1.03, varlen=1.0, noise=0.03), CFG), CFG)
        assert not stop and "undecided" in why, (n, why)
    rec = rounds(15, dense=1.03, varlen=1.0, noise=0.03)
    assert should_stop(decide_all(rec, CFG), CFG) == (True, "the cap of 15 blocks per arm")
    assert statuses(rec, CFG)["dense_tokens_per_s_gain"] == "inconclusive"


def test_between_looks_the_loop_continues() -> None:
    """Six blocks is not a look (5, 7, ...): even a decided result waits for the pair to complete."""
    stop, why = should_stop(decide_all(rounds(6, dense=1.2, varlen=1.2), CFG), CFG)
    assert not stop and "next look at 7" in why


def test_order_effect_cancels_in_the_crossover_estimate() -> None:
    """The second arm of every round 4 % faster: the estimate still says ratio 1 (AB/BA balance)."""
    d = decide_all(rounds(6, dense=1.0, varlen=1.0, noise=0.0005, order_effect=0.04), CFG)["dense"]
    assert d.estimate.speedup == pytest.approx(1.0, abs=0.002)
    assert d.estimate.order_effect == pytest.approx(1 / 0.96, rel=0.01)


def test_cpu_shows_every_timed_gate_as_skip_with_what_it_would_be() -> None:
    """On CPU the gates never decide: skip, with the CPU note and the would-be status."""
    cpu = ModelThresholds(min_blocks=3, max_blocks=3, cpu=True)
    gates = evaluate(decide_all(rounds(3, dense=1.0, varlen=1.0), cpu), cpu, "ev")
    assert [g.status for g in gates] == ["skip", "skip"]
    assert gates[0].detail.startswith("CPU timings are not meaningful; would be fail")
    assert gates[1].detail.startswith("CPU timings are not meaningful; would be pass")


def test_describe_reports_tokens_per_s_distributions_per_arm() -> None:
    """Per workload and arm: median, mean, std, min, p10..p90 and n of the per-block tokens/s."""
    rec = rounds(5, dense=1.25, varlen=1.0)
    d = describe("dense", rec, decide_all(rec, CFG)["dense"], CFG)
    base, cand = d["tokens_per_s"]["base"], d["tokens_per_s"]["cand"]
    assert set(base) >= {"n", "median_tokens_per_s", "mean_tokens_per_s", "std_tokens_per_s", "min_tokens_per_s",
                         "p10_tokens_per_s", "p20_tokens_per_s", "p80_tokens_per_s", "p90_tokens_per_s"}
    assert base["n"] == cand["n"] == 5 and d["blocks"] == 5
    assert cand["median_tokens_per_s"] / base["median_tokens_per_s"] == pytest.approx(1.25, rel=0.01)
    assert d["orders"] == ["AB", "BA", "AB", "BA", "AB"] and d["ratio"] == pytest.approx(1.25, rel=0.01)
    assert d["peak_bytes"] == {"base": 1000, "cand": 1000} and math.isclose(d["bar"], 1.03)
    assert len(d["step_ms"]["base"]) == 5 * STEPS


def test_layer_plan_halves_down_to_min_layers() -> None:
    """24 layers with a floor of 12 tries 24 then 12; a floor of 5 tries 24, 12, 6, 5; none tries 24 only."""
    spec = load_spec(campaign.load("rwkv6-bwd-fusion"), "h200")
    assert isinstance(spec, ModelSpec) and spec.layer_plan() == [24, 12]
    for floor, plan in ((5, [24, 12, 6, 5]), (None, [24]), (24, [24])):
        run = {**spec.run, "min_layers": floor}
        assert ModelSpec(**{**{f: getattr(spec, f) for f in spec.__slots__}, "run": run}).layer_plan() == plan


def test_default_campaign_resolves_a_tiny_cpu_model_and_the_protocols_gpu_model() -> None:
    """The default campaign's CPU run is tiny (1 layer, T=80 > 64 so chunk_rwkv6 runs); the GPU run is the protocol's."""
    c = campaign.load("rwkv6-bwd-fusion")
    cpu, gpu = load_spec(c, "cpu"), load_spec(c, "h200")
    assert cpu.cpu and cpu.layers == 1 and cpu.run["seq_len"] > 64 and cpu.thresholds.cpu
    assert cpu.cpu_setup is not None and cpu.cpu_setup.name == "cpu_setup.py"
    assert gpu.thresholds == ModelThresholds(0.03, 0.02, 0.02, 5, 15, False)
    assert gpu.tokens_per_step == 4 * 4096 and gpu.run["config"]["hidden_size"] == 2048
    assert [p["extends"] for p in gpu.packages] == ["fla"]
    s = cpu.settings([("fla", "/x/fla")])
    assert s["package_dirs"] == [["fla", "/x/fla"]] and s["cpu"] is True and s["layers_key"] == "num_hidden_layers"
    assert load_spec(campaign.load("chunk-local-cumsum-identity"), "cpu") is None
    assert model_gates.WORKLOADS == ("dense", "varlen")


def walk(statuses: dict[str, str], force: bool = False) -> list[str]:
    """The stages the report's input function asks for when each stage records ``statuses[stage]`` (default pass)."""
    return gated_walk(lambda stage: statuses.get(stage, "pass"), force)


def test_the_walk_reaches_model_past_an_unavailable_ncu() -> None:
    """ncu unavailable (CPU, no counters) blocks nothing: model gates on bench and is asked for."""
    assert walk({"ncu": "unavailable"})[-2:] == ["ncu", "model"]
    assert protocol.GATING_INPUTS["model"] == protocol.STAGES[:protocol.STAGES.index("bench") + 1]
    assert "ncu" not in protocol.GATING_INPUTS["model"]


@pytest.mark.parametrize("bad", ["fail", "stop", "inconclusive"])
@pytest.mark.parametrize("at", ["candidate_gate", "bench", "ncu"])
def test_no_stage_is_asked_for_past_a_failed_gate(bad: str, at: str) -> None:
    """A failed gate anywhere ends the walk: the model stage is never scheduled after it, not even after ncu."""
    asked = walk({at: bad})
    assert asked[-1] == at and asked == list(protocol.STAGES[: protocol.STAGES.index(at) + 1])


@pytest.mark.parametrize("bad", ["fail", "inconclusive"])
def test_a_forced_walk_goes_past_a_measured_fail_not_past_a_failed_correctness_gate(bad: str) -> None:
    """Force collects the remaining evidence past a measuring stage's fail; a wrong candidate is never measured."""
    assert walk({"bench": bad}, force=True)[-2:] == ["ncu", "model"]
    assert walk({"profile_candidate": bad, "bench": bad}, force=True) == list(protocol.STAGES)
    for at in ("fixture_freeze", "candidate_build", "candidate_gate"):
        assert walk({at: bad}, force=True)[-1] == at


def test_an_unavailable_bench_blocks_model_and_a_forced_stop_walks_on() -> None:
    """unavailable blocks exactly the stages that gate on it; a forced run walks past a stop."""
    assert "model" not in walk({"bench": "unavailable"}) and "ncu" not in walk({"bench": "unavailable"})
    assert walk({"profile_baseline": "stop"}, force=True) == list(protocol.STAGES)
    assert walk({"profile_baseline": "stop"})[-1] == "profile_baseline"


@pytest.mark.parametrize(("change", "message"), [
    ({"config": {"hidden_size": 32, "num_hidden_layers": 3}}, "sets num_hidden_layers; the layer count is model.cpu.layers"),
    ({"varlen_sequences": 81}, "81 sequences do not fit in batch x seq_len = 80 tokens"),
    ({"min_layers": 2}, "min_layers': 2 is above layers 1"),
    ({"blocks": {"min": 4, "max": 3}}, "max 3 is below min 4"),
])
def test_inconsistent_model_settings_fail_at_load_naming_the_key(tmp_path, change: dict, message: str) -> None:
    """Settings the schema cannot relate are refused with the key named (model.smk checks them at DAG build)."""
    import yaml

    from kgate.errors import ConfigError

    data = yaml.safe_load((paths.PROJECT / "config/campaigns/rwkv6-bwd-fusion.yaml").read_text())
    data["model"]["cpu"].update(change)
    path = tmp_path / "rwkv6-bwd-fusion.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_spec(campaign.load(str(path)), "cpu")
