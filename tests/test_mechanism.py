"""Mechanism kinds and their plausibility bounds, the optimized path of in-place edits, inputs an op writes into.

Real records where they exist: ``tests/data/liger/h200/`` is the Liger LayerNorm campaign on an
H200 (a ``speeds_up`` bound that passes), ``h200_default_profile_stop/`` the RWKV6 fusion (a ``removes`` bound that
STOPs), ``h200_tvd_incomplete/`` Liger's TV distance replay (a ``removes`` bound that passes: the division after the
kernel and its M x V temporary), and ``tests/data/mechanism/h200_swiglu_probe.jsonl`` a measurement of Liger's SwiGLU
kernels against their copy-bandwidth floor on an H200 (not a kgate record: a probe of CUDA-event times, used as the
roofline STOP case). Bounds of the ``declared`` kind have no real record: their numbers are synthetic and computed by
hand in each test, as is the hand-sized passing ``removes`` case beside the real one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import REPO
from test_worker import ROWS, start, toy_worktree

from kgate import campaign
from kgate.measure import mechanism
from kgate.measure.arms import WorkerFailure
from kgate.measure.mechanism import Mechanism
from kgate.measure.rows import Row, load_spec
from kgate.stages.profile_baseline import bound_gate, structural_gates

DATA = REPO / "tests" / "data"
LIGER = DATA / "liger" / "h200"


def rec(path: Path) -> dict:
    return json.loads(path.read_text())


def evaluate_on(spec, row):
    return lambda expr, key: spec.evaluate(row, expr, key)


class TestSpeedsUpFromTheH200Record:
    """Liger's LayerNorm on an H200: the roofline bound recomputed from the record's own measurements."""

    def setup_method(self) -> None:
        self.record = rec(LIGER / "profile_baseline.json")
        self.spec = load_spec(campaign.load("liger-layer-norm-rows"), "h200")
        self.peaks = self.record["data"]["device_peaks"]

    def test_the_peaks_came_from_the_preflight(self) -> None:
        doctor = rec(LIGER / "doctor.json")["data"]["device_peaks"]
        assert self.peaks["source"].startswith("preflight record")
        assert self.peaks["bytes_per_s"] == doctor["bandwidth"]["bytes_per_s"] > 3e12
        assert self.peaks["flops_per_s"]["bf16"] > 5e14 > self.peaks["flops_per_s"]["fp32"]

    @pytest.mark.parametrize("i", range(3))
    def test_each_rows_bound_follows_from_its_kernels_and_the_peaks(self, i: int) -> None:
        r = self.record["data"]["rows"][i]
        row = Row(r["row"], r["kind"], r["values"])
        kernels = {k["kernel"]: {"launches": k["launches_per_call"] * r["iterations"],
                                 "device_us": k["device_us_per_call"] * r["iterations"]} for k in r["kernels"]}
        saved = mechanism.row_savings(self.spec.mechanism, evaluate_on(self.spec, row), kernels, r["iterations"],
                                      0.0, self.peaks["bytes_per_s"], self.peaks["flops_per_s"])
        assert list(saved) == ["speeds_up"]
        fwd, bwd = saved["speeds_up"]["entries"]
        # the forward moves X and Y once: 2 x R x N x 2 bytes (+ W, B, mean, rstd) at the measured bandwidth
        R, N = r["values"]["R"], r["values"]["N"]
        assert fwd["bytes"] == 2 * R * N * 2 + 2 * N * 2 + 8 * R
        assert fwd["memory_floor_ms"] == pytest.approx(fwd["bytes"] / self.peaks["bytes_per_s"] * 1e3)
        assert fwd["bound_by"] == bwd["bound_by"] == "memory"
        best = mechanism.best_case(r["endpoint_ms"], saved)
        assert best["best_case_speedup"] == pytest.approx(r["bound"]["best_case_speedup"], rel=1e-9)
        # the one-row backward runs far from its floor: that is where the hypothesis has room
        assert bwd["fraction_of_roofline"] < 0.6 < fwd["fraction_of_roofline"]

    def test_the_bound_passes_the_bar_and_a_higher_bar_stops_it(self) -> None:
        rows = self.record["data"]["rows"]
        g = bound_gate(rows, 1.25, cpu=False, evidence="e", kinds=("speeds_up",))
        assert g.status == "pass" and g.value == pytest.approx(self.record["data"]["bound_geomean"])
        high = bound_gate(rows, 3.0, cpu=False, evidence="e", kinds=("speeds_up",))
        assert high.status == "stop" and "roofline of the named kernels" in high.detail
        assert [x.status for x in structural_gates(self.spec, rows, "e", "stop")] == ["pass"]


class TestSpeedsUpStopsNearTheRoofline:
    """Liger's SwiGLU on an H200 already runs at 84-100 % of its copy-bandwidth floor (the large shapes at 94-100 %):
    no in-place rewrite of it can carry a 1.08x bar on the geomean of these shapes (the probe's CUDA-event times;
    the bound's arithmetic on them)."""

    def test_swiglu_cannot_reach_the_bar(self) -> None:
        lines = [json.loads(x) for x in (DATA / "mechanism" / "h200_swiglu_probe.jsonl").read_text().splitlines()]
        bw = lines[0]["copy_bw_GBps"] * 1e9
        mech = Mechanism(removed=None, temporaries=(), declared=(), speeds_up=(
            mechanism.Work("^_swiglu_forward_kernel$", "3*T*N*2", "0", "fp32"),
            mechanism.Work("^_swiglu_backward_kernel$", "5*T*N*2", "0", "fp32")))
        best = []
        for p in lines[1:]:
            kernels = {"_swiglu_forward_kernel": {"launches": 1, "device_us": p["fwd_base"] * 1e3},
                       "_swiglu_backward_kernel": {"launches": 1, "device_us": p["bwd_base"] * 1e3}}
            saved = mechanism.row_savings(mech, lambda e, k, p=p: float(eval(e, {}, {"T": p["T"], "N": p["N"]})),
                                          kernels, 1, 0.0, bw, None)
            # the endpoint is the two kernels alone here: the most generous endpoint for the hypothesis
            best.append(mechanism.best_case(p["fwd_base"] + p["bwd_base"], saved)["best_case_speedup"])
        geo = math.exp(sum(math.log(b) for b in best) / len(best))
        assert len(best) == 12 and min(best) < 1.02
        g = bound_gate([{"row": str(i), "bound": {"best_case_speedup": b}} for i, b in enumerate(best)], 1.08,
                       cpu=False, evidence="e", kinds=("speeds_up",))
        assert g.status == "stop" and g.value == pytest.approx(geo, abs=1e-6) and geo < 1.08


class TestRemovesAndDeclared:
    def test_the_fusions_h200_stop_is_the_removes_bound(self) -> None:
        """The RWKV6 fusion's real STOP: removing one launch and two FP32 temporaries buys at most ~1.03x."""
        r = rec(DATA / "records" / "h200_default_profile_stop" / "profile_baseline.json")
        gate = next(g for g in r["gates"] if g["name"] == "plausible_speedup")
        assert gate["status"] == "stop" and gate["value"] < 1.08
        spec = load_spec(campaign.load("rwkv6-bwd-fusion"), "h200")
        assert spec.mechanism.kinds == ("removes",)
        launch, bw = r["data"]["launch_cost"]["per_launch_us"], r["data"]["bandwidth"]["bytes_per_s"]
        for x in r["data"]["rows"]:
            row = Row(x["row"], x["kind"], x["values"])
            kernels = {k["kernel"]: {"launches": k["launches_per_call"], "device_us": k["device_us_per_call"]}
                       for k in x["kernels"]}
            saved = mechanism.row_savings(spec.mechanism, evaluate_on(spec, row), kernels, 1, launch, bw, None)
            assert mechanism.best_case(x["endpoint_ms"], saved)["best_case_speedup"] == pytest.approx(
                x["bound"]["best_case_speedup"], rel=1e-9)

    def test_the_tvd_replays_h200_pass_is_the_removes_bound(self) -> None:
        """Liger's TV distance replay (a non-fla target, an in-place edit that makes the division after the kernel
        unnecessary): the real pass, each row's best case recomputed from the record's kernels, launch cost and
        bandwidth with the campaign's removed kernels and M x V temporary, above the bar 1.53."""
        r = rec(DATA / "records" / "h200_tvd_incomplete" / "profile_baseline.json")
        gate = next(g for g in r["gates"] if g["name"] == "plausible_speedup")
        spec = load_spec(campaign.load("liger-tvd-fused-scale-1127"), "h200")
        assert spec.mechanism.kinds == ("removes",)
        assert gate["status"] == "pass" and gate["value"] >= spec.bar == 1.53
        # the preflight's measured bandwidth (the record's device_peaks), as the stage used it
        launch, bw = r["data"]["launch_cost"]["per_launch_us"], r["data"]["device_peaks"]["bytes_per_s"]
        bests = []
        for x in r["data"]["rows"]:
            row = Row(x["row"], x["kind"], x["values"])
            kernels = {k["kernel"]: {"launches": k["launches_per_call"], "device_us": k["device_us_per_call"]}
                       for k in x["kernels"]}
            saved = mechanism.row_savings(spec.mechanism, evaluate_on(spec, row), kernels, 1, launch, bw, None)
            assert saved["removes"]["saved_ms"] > 0
            best = mechanism.best_case(x["endpoint_ms"], saved)["best_case_speedup"]
            assert best == pytest.approx(x["bound"]["best_case_speedup"], rel=1e-9)
            bests.append(best)
        assert math.prod(bests) ** (1 / len(bests)) == pytest.approx(gate["value"], rel=1e-6)

    def test_a_removes_bound_that_passes(self) -> None:
        """SYNTHETIC: 10 launches of 5 us and 1 GB of round trips at 4 TB/s out of a 1 ms endpoint: 1/(1-0.3)."""
        mech = Mechanism(removed="^k$", temporaries=(mechanism.Temporary("t", "2**29", 2),), speeds_up=(), declared=())
        saved = mechanism.row_savings(mech, lambda e, k: float(eval(e)), {"k": {"launches": 10, "device_us": 1}}, 1,
                                      5.0, 2**30 / 0.25e-3, None)
        assert saved["removes"]["saved_ms"] == pytest.approx(0.05 + 0.25)
        assert mechanism.best_case(1.0, saved)["best_case_speedup"] == pytest.approx(1 / 0.7)

    def test_declared_is_amdahl_over_the_named_kernels_and_labelled(self) -> None:
        """SYNTHETIC: a 0.4 ms kernel declared 2x faster in a 1 ms endpoint: 1 / (1 - 0.2) = 1.25."""
        mech = Mechanism(removed=None, temporaries=(), speeds_up=(),
                         declared=(mechanism.Declared("^gemm$", 2.0, "a paper's number"),))
        saved = mechanism.row_savings(mech, None, {"gemm": {"launches": 1, "device_us": 400.0}}, 1, 0.0, 1e12, None)
        best = mechanism.best_case(1.0, saved)["best_case_speedup"]
        assert best == pytest.approx(1.25)
        rows = [{"row": "r", "bound": {"best_case_speedup": best}}]
        passing = bound_gate(rows, 1.2, cpu=False, evidence="e", kinds=("declared",))
        assert passing.status == "pass" and "DECLARED" not in passing.detail and "declared speedup" in passing.detail
        assert bound_gate(rows, 1.3, cpu=False, evidence="e", kinds=("declared",)).status == "stop"

    def test_a_kernel_named_twice_counts_once_under_speeds_up(self) -> None:
        mech = Mechanism(removed=None, temporaries=(), speeds_up=(mechanism.Work("^k$", "0", "0", "fp32"),),
                         declared=(mechanism.Declared("^k$", 4.0, "x"),))
        saved = mechanism.row_savings(mech, lambda e, k: 0.0, {"k": {"launches": 1, "device_us": 100.0}}, 1, 0.0,
                                      1e12, None)
        assert saved["speeds_up"]["saved_ms"] == pytest.approx(0.1) and saved["declared"]["saved_ms"] == 0.0


class TestOptimizedPath:
    def test_an_in_place_edit_is_optimized_on_every_row(self) -> None:
        spec = load_spec(campaign.load("liger-layer-norm-rows"), "h200")
        row = spec.explicit_rows[0]
        kernels = {"_layer_norm_forward_kernel": {"launches": 1, "device_us": 1.0}}
        assert spec.row_path(row, (), kernels, 1) == ("optimized", "no dispatch class: the in-place change applies "
                                                                   "on every row")

    def test_the_h200_rows_of_the_in_place_candidate_are_optimized_with_the_same_kernel_names(self) -> None:
        pc = rec(LIGER / "profile_candidate.json")
        for r in pc["data"]["rows"]:
            assert r["path"] == "optimized" and r["baseline_pair_kernels"] == r["candidate_pair_kernels"]
            assert r["candidate_pair_kernels"] == ["_layer_norm_backward_kernel", "_layer_norm_forward_kernel"]
            assert r["pair_speedup"] > 1.25
        bench = rec(LIGER / "bench.json")
        assert {r["path"] for r in bench["data"]["rows"]} == {"optimized"}

    def test_a_dispatch_class_decides_before_kernel_names(self) -> None:
        spec = load_spec(campaign.load("rwkv6-bwd-fusion"), "h200")
        row = next(r for r in spec.explicit_rows if r.name == "B4_T2048_H16_D128")
        intra = {"chunk_rwkv6_bwd_kernel_intra": {"launches": 1, "device_us": 1.0}}
        assert spec.row_path(row, ("BT64-D128-dense",), {}, 1)[0] == "optimized"
        assert spec.row_path(row, ("BT64-D64-dense",), intra, 1)[0] == "fallback"
        # the kernels disagreeing with the class is the path gate's business (profile_candidate), not hidden here
        assert spec.row_path(row, ("BT64-D128-dense",), intra, 1)[0] == "optimized"


MUTATING_PACKAGE = '''\
import torch


def op(x, w):
    y = x * w
    if getattr(op, "write", True):
        x.data.mul_(1.5)  # an op that writes into its input, as a backward storing gradients in place does
    return y.sum(-1), y
'''


class TestInputsWrittenByTheOp:
    """Real worker processes on CPU with a toy op that writes into its first input."""

    def worktree(self, root: Path) -> tuple[Path, Path]:
        wt, inputs = toy_worktree(root)
        (wt / "toyop" / "__init__.py").write_text(MUTATING_PACKAGE)
        return wt, inputs

    def test_undeclared_writes_are_the_arms_failure_naming_the_key(self, tmp_path: Path) -> None:
        wt, inputs = self.worktree(tmp_path)
        arm = start("a", tmp_path, inputs, wt)
        try:
            arm.request("prepare", rows=ROWS[:1])
            with pytest.raises(WorkerFailure) as info:
                arm.request("warm", row="small", mode="fwd", calls=1)
            assert info.value.target and "args[0] changed" in str(info.value)
            assert "measure.writes_inputs" in str(info.value)
        finally:
            arm.close()

    def test_declared_writes_are_restored_before_every_call(self, tmp_path: Path) -> None:
        wt, inputs = self.worktree(tmp_path)
        arm = start("a", tmp_path, inputs, wt)
        arm.close()
        arm = start_declared("b", tmp_path, inputs, wt)
        try:
            prep = arm.request("prepare", rows=ROWS[:1])
            arm.request("warm", row="small", mode="fwd", calls=3)
            timed = arm.request("time", row="small", mode="fwd", n=4)
            assert len(timed["samples_ms"]) == 4
            # the worker's own check: after the calls and a restore the inputs hash as prepared
            again = arm.request("prepare", rows=ROWS[:1])
            assert again["small"]["sha256"] == prep["small"]["sha256"]
        finally:
            arm.close()


def start_declared(name: str, root: Path, inputs: Path, wt: Path):
    """A worker whose campaign declares measure.writes_inputs."""
    from test_worker import toy_env, toy_init

    from kgate.measure.arms import Arm, Deadline

    arm = Arm(name, wt, root / f"cache-{name}", toy_env(wt, root / f"cache-{name}"), root / f"{name}.log",
              Deadline(300))
    arm.info = arm.request("init", **toy_init(inputs), writes_inputs=True)
    return arm


MEMO_PACKAGE = '''\
import torch

_CACHE = {}


def op(x, w):
    # an adversary: results cached on where the inputs live, not on what they hold
    key = (x.data_ptr(), tuple(x.shape), x.dtype, x.stride(), w.data_ptr())
    if key not in _CACHE:
        _CACHE[key] = (x * w).detach()
    y = _CACHE[key] + 0 * x * w  # keeps the autograd graph (gradients of the honest op)
    return y.sum(-1), y
'''

HONEST_PACKAGE = '''\
def op(x, w):
    y = x * w
    return y.sum(-1), y
'''


class TestTheTimedCodeIsTheTestedCode:
    """The bench stage's round hooks (fresh values before a round, sampled outputs after it) on real workers: an
    op that memoizes on pointers and shapes is caught at ``timed_outputs_match``; an honest pair passes."""

    def pair(self, root: Path, cand_source: str):
        from kgate.stages.bench import Plan

        arms_ = {}
        for name, source in (("base", HONEST_PACKAGE), ("cand", cand_source)):
            wt, inputs = toy_worktree(root / name)
            (wt / "toyop" / "__init__.py").write_text(source)
            arms_[name] = start(name, root / name, inputs, wt)
        row = Row("small", "dense", dict(ROWS[0]))
        plan = Plan([("small:fwdbwd", row, "fwdbwd", "gated")])
        for a in arms_.values():
            a.request("prepare", rows=[row.values])
            a.request("warm", row="small", mode="fwdbwd", calls=1)
        return arms_, plan

    def rounds(self, arms_, plan, n: int = 2) -> list[dict]:
        from kgate.measure.timed_check import fresh_inputs, timed_outputs
        from kgate.stages.bench import time_round

        recorded = []
        for i in range(n):
            fresh_inputs(i, arms_, [row.name for _k, row, _m, _r in plan.items])
            rnd = time_round(i, arms_, plan, 1, _NoTelemetry())
            rnd["outputs"] = timed_outputs(i, arms_, plan.items)
            recorded.append(rnd)
        return recorded

    @pytest.mark.parametrize(("source", "status"), [(MEMO_PACKAGE, "fail"), (HONEST_PACKAGE, "pass")])
    def test_memoizing_on_pointers_fails_and_an_honest_candidate_passes(self, tmp_path: Path, source: str,
                                                                         status: str) -> None:
        from kgate.gates.bench import gate_timed_outputs

        arms_, plan = self.pair(tmp_path, source)
        try:
            gate = gate_timed_outputs(self.rounds(arms_, plan), 0.05, "e")
        finally:
            for a in arms_.values():
                a.close()
        assert gate.name == "timed_outputs_match" and gate.status == status, gate
        if status == "fail":
            assert "round 1 small:fwdbwd: output[0] off by" in gate.detail


class _NoTelemetry:
    def sample(self) -> None:
        return None


def test_the_h200_fixture_run_gates_the_fixtures_own_cases() -> None:
    """The corrected gate on an H200: the fixture's 16 partial-tile cases are collected beside Liger's 16, and both
    arms pass all 32 (tests/data/liger/README.md)."""
    run = DATA / "liger" / "h200_fixture_run"
    fx, gate = rec(run / "fixture_freeze.json"), rec(run / "candidate_gate.json")
    only_adds = next(g for g in fx["gates"] if g["name"] == "fixture_only_adds")
    assert only_adds["status"] == "pass" and only_adds["value"] == "16 -> 32 collected (+16)"
    passed = {g["name"]: g for g in gate["gates"]}
    assert passed["gate_tests_pass"]["value"] == "32 passed" and passed["same_test_ids"]["status"] == "pass"
    assert gate["provenance"]["device"]["name"].startswith("NVIDIA H200")


INDEX_INPUTS = '''\
import torch


def make_inputs(row, *, device, dtype, seed):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(row["N"], row["D"], generator=gen, device=device, dtype=dtype).requires_grad_(True)
    lengths = torch.randint(1, row["D"] + 1, (row["N"],), generator=gen, device=device)
    return (x, lengths), {}
'''

INDEX_PACKAGE = '''\
def op(x, lengths):
    return x * (x.new_ones(x.shape[-1]).cumsum(0)[None, :] <= lengths[:, None]).to(x.dtype)
'''


def test_fresh_round_inputs_change_values_and_keep_the_rows_structure(tmp_path: Path) -> None:
    """Before each round floating-point inputs get new values; integer ones (offsets, lengths) keep the row's, so a
    target's cache keyed on their identity (fla's chunk indices of cu_seqlens) stays valid."""
    wt, inputs = toy_worktree(tmp_path)
    (wt / "toyop" / "__init__.py").write_text(INDEX_PACKAGE)
    inputs.write_text(INDEX_INPUTS)
    arm = start("base", tmp_path, inputs, wt)
    try:
        arm.request("prepare", rows=[dict(ROWS[0])])
        prints = [arm.request("refresh", rows=["small"], round=r)["small"] for r in (0, 1)]
    finally:
        arm.close()
    assert prints[0]["args[0]"] != prints[1]["args[0]"], "the float input gets new values every round"
    assert prints[0]["args[1]"] == prints[1]["args[1]"], "the integer input keeps the row's values"
