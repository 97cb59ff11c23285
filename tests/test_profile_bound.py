"""The profile stages' arithmetic: plausibility bound, temporaries, pair table, compile resources.

Inputs are hand-written kernel tables and measurements (SYNTHETIC, not
measured); the expected numbers are computed by hand in each test. The DESIGN
facts (H200, B8_T2048_H16_D64: 268 MB of FP32 dq/dk round trip, about 62 us at
4.3 TB/s, 2.56 ms endpoint) are the first case.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kgate import campaign
from kgate.measure import rows as measure
from kgate.measure.rows import Row
from kgate.measure.worker import occupancy
from kgate.stages.profile_baseline import (
    analyse,
    attribute_temporaries,
    bound_gate,
    kernel_table,
    structural_gates,
)
from kgate.stages.profile_candidate import candidate_gates, class_resources, hidden_kernels, pair_gate, pair_row

SPEC = measure.load_spec(campaign.load("rwkv6-bwd-fusion"), "h200")
ROW = Row("B8_T2048_H16_D64", "dense", {"name": "B8_T2048_H16_D64", "B": 8, "T": 2048, "H": 16, "D": 64})
INTRA, INTER, FUSED = "chunk_rwkv6_bwd_kernel_intra", "chunk_rwkv6_bwd_kernel_inter", "chunk_rwkv6_bwd_kernel_fused"
#: the fused candidate's dispatch classes (kernels/rwkv6_bwd_fused/candidate/overlay.yaml): ROW is BT64-D64-dense
FUSED_ENABLES = ("BT64-D64-dense", "BT64-D64-varlen", "BT64-D128-dense", "BT64-D128-varlen", "BT64-D256-dense",
                 "BT64-D256-varlen")


def removes_bound(endpoint_ms: float, launches: float, launch_us: float, bytes_per_s: float) -> dict:
    """The removes kind's bound on ROW through the mechanism arithmetic (kgate.measure.mechanism)."""
    from kgate.measure import mechanism

    kernels = {INTRA: {"launches": launches, "device_us": 100.0}}
    saved = mechanism.row_savings(SPEC.mechanism, lambda e, k: SPEC.evaluate(ROW, e, k), kernels, 1, launch_us,
                                  bytes_per_s, None)
    return saved["removes"] | mechanism.best_case(endpoint_ms, saved)


class TestPlausibility:
    def test_the_design_example(self) -> None:
        """2 x 16.8M x (4 B write + 4 B read) = 268 MB at 4.3 TB/s is 62.4 us; plus one 5 us launch."""
        traffic = SPEC.removed_traffic_bytes(ROW)
        assert traffic == 2 * (8 * 2048 * 16 * 64) * 4 * 2 == 268_435_456
        b = removes_bound(2.56, 1.0, 5.0, 4.3e12)
        assert b["traffic_ms"] == pytest.approx(268_435_456 / 4.3e12 * 1e3)
        assert b["traffic_ms"] == pytest.approx(0.0624, abs=1e-4)
        assert b["saved_ms"] == pytest.approx(0.005 + 0.0624, abs=1e-4)
        assert b["best_case_speedup"] == pytest.approx(2.56 / (2.56 - b["saved_ms"]))
        assert 1.025 < b["best_case_speedup"] < 1.028
        assert "= 1.02" in b["arithmetic"] and b["by_kind"]["removes"] == b["best_case_speedup"]

    def test_removable_beyond_the_endpoint_is_reported_not_capped(self) -> None:
        assert removes_bound(0.01, 10, 5.0, 1e12)["best_case_speedup"] is None

    def test_the_gate_stops_below_the_bar_and_passes_above(self) -> None:
        rows = [{"row": "a", "bound": {"best_case_speedup": 1.02}}, {"row": "b", "bound": {"best_case_speedup": 1.04}}]
        g = bound_gate(rows, 1.08, cpu=False, evidence="x")
        assert g.status == "stop" and g.value == pytest.approx(math.sqrt(1.02 * 1.04), abs=1e-6)
        assert "lowest 1.0200x at a" in g.detail and "below the bar 1.08" in g.detail
        high = [{"row": "a", "bound": {"best_case_speedup": 1.2}}, {"row": "b", "bound": {"best_case_speedup": 1.1}}]
        assert bound_gate(high, 1.08, cpu=False, evidence="x").status == "pass"

    def test_on_cpu_the_bound_is_shown_but_never_stops(self) -> None:
        rows = [{"row": "a", "bound": {"best_case_speedup": 1.001}}]
        g = bound_gate(rows, 1.08, cpu=True, evidence="x")
        assert g.status == "skip" and g.value == pytest.approx(1.001)
        assert g.detail.startswith("CPU timings are not meaningful")


class TestAttribution:
    def test_temporaries_match_exact_or_allocator_rounded_sizes(self) -> None:
        n = 8 * 2048 * 16 * 64 * 4
        got = attribute_temporaries(SPEC, ROW, {str(n): 6, "64": 3}, iterations=2)
        assert [t["found"] for t in got] == [True, True]
        assert got[0]["allocations_per_call_of_this_size"] == 3.0 and got[0]["temporaries_of_this_size"] == 2
        odd = Row("odd", "dense", {"name": "odd", "B": 1, "T": 3, "H": 1, "D": 5})
        rounded = attribute_temporaries(SPEC, odd, {"512": 2}, iterations=1)
        assert all(t["found"] for t in rounded), "60 B temporaries live in 512 B caching-allocator blocks"

    def test_on_cuda_an_unsplit_cached_block_up_to_1_mib_larger_still_counts(self) -> None:
        n = 8 * 2048 * 16 * 64 * 4
        got = attribute_temporaries(SPEC, ROW, {str(n + 2**19): 2}, iterations=1, slack=2**20)
        assert all(t["found"] for t in got)
        assert not any(t["found"] for t in attribute_temporaries(SPEC, ROW, {str(n + 2**21): 2}, 1, slack=2**20))
        assert not any(t["found"] for t in attribute_temporaries(SPEC, ROW, {str(n + 2**19): 2}, 1))

    def test_one_allocation_of_the_size_is_not_two_temporaries(self) -> None:
        n = 8 * 2048 * 16 * 64 * 4
        assert [t["found"] for t in attribute_temporaries(SPEC, ROW, {str(n): 1}, iterations=1)] == [False, False]

    def test_kernel_table_is_per_call_and_labelled(self) -> None:
        table = kernel_table({INTRA: {"launches": 4, "device_us": 400.0}, INTER: {"launches": 4, "device_us": 200.0},
                              "other": {"launches": 8, "device_us": 1000.0}}, 4, SPEC)
        assert [r["kernel"] for r in table] == ["other", INTRA, INTER]
        intra = table[1]
        assert intra["launches_per_call"] == 1 and intra["device_us_per_call"] == 100.0
        assert intra["removed"] and intra["replaced"] and not table[2]["removed"] and table[2]["replaced"]
        assert intra["share"] == pytest.approx(400 / 1600)

    def test_analyse_puts_every_term_in_the_record(self) -> None:
        n = 8 * 2048 * 16 * 64 * 4
        m = {"inputs": {"sha256": "abc"}, "warm": {}, "samples_ms": [2.5, 2.56, 2.6],
             "profile": {"iterations": 2, "kernels": {INTRA: {"launches": 2, "device_us": 1080.0},
                                                       INTER: {"launches": 2, "device_us": 580.0}},
                         "flush_kernels": {"kgate_l2_flush": {"launches": 2, "device_us": 100.0}},
                         "timer": "t", "alloc_sizes": {str(n): 4}, "peak_bytes": 10, "peak_method": "m"}}
        a = analyse(SPEC, ROW, m, launch_us=5.0, bytes_per_s=4.3e12)
        assert a["endpoint_ms"] == 2.56
        assert a["removed"] == {"launches_per_call": 1.0, "device_us_per_call": 540.0,
                                "share_of_endpoint": pytest.approx(0.54 / 2.56)}
        assert a["replaced"]["amdahl_if_their_whole_time_vanished"] == pytest.approx(2.56 / (2.56 - 0.83))
        assert a["kernel_sum_ms"] == pytest.approx(0.83)
        assert a["census"] == [INTER, INTRA] and "kgate_l2_flush" in a["flush_kernels"]
        assert a["bound"]["best_case_speedup"] == pytest.approx(2.56 / (2.56 - 0.005 - 268_435_456 / 4.3e9))
        gates = structural_gates(SPEC, [a], "e", "stop")
        assert [g.status for g in gates] == ["pass", "pass"]
        a["removed"]["launches_per_call"] = 0
        assert structural_gates(SPEC, [a], "e", "stop")[0].status == "stop"


def measured(kernels: dict[str, tuple[int, float]], peak: int, endpoint: float, iterations: int = 1) -> dict:
    return {"samples_ms": [endpoint], "profile": {
        "iterations": iterations, "peak_bytes": peak, "timer": "t",
        "kernels": {k: {"launches": n, "device_us": us} for k, (n, us) in kernels.items()}}}


BASE = measured({INTRA: (1, 1050.0), INTER: (1, 680.0), "chunk_fwd_kernel_h": (2, 900.0)}, 3_000_000_000, 3.72)
TEMP = 8 * 2048 * 16 * 64 * 4 * 2


class TestPairTable:
    def test_an_optimized_row(self) -> None:
        """Protocol's D64 shape: 1.73 ms pair -> 1.6 ms fused; implied endpoint 3.72 / (3.72 - 0.13)."""
        cand = measured({FUSED: (1, 1600.0), "chunk_fwd_kernel_h": (2, 900.0)}, 3_000_000_000 - TEMP, 3.6)
        r = pair_row(SPEC, ROW, BASE, cand, tol=0.05, enabled=FUSED_ENABLES)
        assert r["path"] == "optimized" and r["removed_launches_per_call"] == 0
        assert r["baseline_pair_us"] == 1730.0 and r["candidate_pair_us"] == 1600.0
        assert r["pair_speedup"] == pytest.approx(1730 / 1600)
        assert r["implied_endpoint_speedup"] == pytest.approx(3.72 / (3.72 - 0.13))
        assert r["peak_reduction_bytes"] == TEMP and r["memory_ok"]
        assert r["new_kernels"] == [FUSED] and r["gone_kernels"] == [INTER, INTRA]
        assert hidden_kernels(SPEC, [r]) == []

    def test_a_fallback_row_counts_as_one_and_must_keep_its_memory(self) -> None:
        cand = measured({INTRA: (1, 1040.0), INTER: (1, 690.0), "chunk_fwd_kernel_h": (2, 900.0)}, 3_000_000_000, 3.7)
        r = pair_row(SPEC, ROW, BASE, cand, tol=0.05, enabled=("BT64-D128-dense",))
        assert r["path"] == "fallback" and r["implied_endpoint_speedup"] == 1.0 and r["memory_ok"]
        assert "BT64-D64-dense is not enabled" in r["path_reason"]

    def test_an_enabled_class_that_still_launches_the_removed_kernel_fails_the_path_gate(self) -> None:
        """The dispatch class decides the path; the kernels must agree with it."""
        cand = measured({INTRA: (1, 1040.0), INTER: (1, 690.0), "chunk_fwd_kernel_h": (2, 900.0)}, 3_000_000_000, 3.7)
        r = pair_row(SPEC, ROW, BASE, cand, tol=0.05, enabled=FUSED_ENABLES)
        assert r["path"] == "optimized" and r["removed_launches_per_call"] == 1
        gates = {g.name: g for g in candidate_gates(SPEC, [r], {}, "fwdbwd", 0.05, 0.5, "e")}
        assert gates["path_matches_dispatch"].status == "fail"
        assert "BT64-D64-dense enabled) still launches" in gates["path_matches_dispatch"].detail
        dropped = measured({INTRA: (1, 1040.0), INTER: (1, 690.0)}, 3_000_000_000 - TEMP, 3.7)
        assert not pair_row(SPEC, ROW, BASE, dropped, tol=0.05)["memory_ok"]

    def test_an_optimized_row_with_replacement_scratch_fails_the_memory_rule(self) -> None:
        cand = measured({FUSED: (1, 1600.0)}, 3_000_000_000 - TEMP // 2, 3.6)
        assert not pair_row(SPEC, ROW, BASE, cand, tol=0.05, enabled=FUSED_ENABLES)["memory_ok"]

    def test_a_new_kernel_the_campaign_does_not_name_is_a_hidden_replacement(self) -> None:
        cand = measured({FUSED: (1, 1200.0), "sneaky_dq_kernel": (1, 10.0)}, 3_000_000_000 - TEMP, 3.5)
        r = pair_row(SPEC, ROW, BASE, cand, tol=0.05, enabled=FUSED_ENABLES)
        assert hidden_kernels(SPEC, [r]) == ["sneaky_dq_kernel"]
        gates = {g.name: g for g in candidate_gates(SPEC, [r], {}, "fwdbwd", 0.05, 0.5, "e")}
        assert gates["no_hidden_kernels"].status == "fail" and "sneaky_dq_kernel" in gates["no_hidden_kernels"].detail

    def test_pair_speedups_that_cannot_carry_the_bar_stop(self) -> None:
        """The protocol's B300 table: D64 1.066x, D128 0.952x: the endpoint cannot reach 1.08x."""
        slow = measured({FUSED: (1, 1730 / 0.952)}, 3_000_000_000 - TEMP, 3.8)
        rows = [pair_row(SPEC, ROW, BASE, measured({FUSED: (1, 1730 / 1.066)}, 3_000_000_000 - TEMP, 3.6), 0.05,
                         FUSED_ENABLES),
                pair_row(SPEC, ROW, BASE, slow, 0.05, FUSED_ENABLES)]
        g = pair_gate(rows, 1.08, cpu=False, evidence="e")
        assert g.status == "stop" and g.value < 1.08 and "0.952x" in g.detail
        assert pair_gate(rows, 1.08, cpu=True, evidence="e").status == "skip"

    def test_an_identity_candidate_has_nothing_to_carry_the_bar(self) -> None:
        same = pair_row(SPEC, ROW, BASE, BASE, 0.05)
        g = pair_gate([same], 1.08, cpu=False, evidence="e")
        assert same["path"] == "fallback" and g.value == 1.0 and g.status == "stop"


DEVICE = {"regs_per_sm": 65536, "max_threads_per_sm": 2048, "smem_per_sm": 233472, "warp_size": 32}


class TestResources:
    def test_occupancy_estimate(self) -> None:
        """255 regs x 8 warps: 256 x 32 = 8192 regs per warp -> 1 block of 8 warps = 8/64 = 12.5 %."""
        o = occupancy({"n_regs": 255, "num_warps": 8, "shared_bytes": 0}, DEVICE)
        assert o["fraction"] == pytest.approx(8 / 64) and o["limited_by"] == "registers"
        o = occupancy({"n_regs": 64, "num_warps": 4, "shared_bytes": 100_000}, DEVICE)
        assert o["blocks_per_sm"] == 2 and o["limited_by"] == "shared_memory" and o["fraction"] == pytest.approx(8 / 64)
        assert occupancy({"n_regs": 64, "num_warps": 4}, {})["fraction"] is None

    def variant(self, kernel: str, regs: int, warps: int, spills: int = 0) -> dict:
        v = {"kernel": kernel, "key": f"{kernel}-{regs}", "n_regs": regs, "n_spills": spills, "shared_bytes": 0,
             "num_warps": warps}
        v["occupancy"] = occupancy(v, DEVICE)
        return v

    def resources(self, cand: list[dict]) -> dict:
        base = [self.variant(INTRA, 128, 4), self.variant(INTER, 255, 4)]
        return {"base": {"launched_by_row": {f"{ROW.name}:fwdbwd": base}},
                "cand": {"launched_by_row": {f"{ROW.name}:fwdbwd": cand}}}

    def rows(self) -> list[dict]:
        return [pair_row(SPEC, ROW, BASE, measured({FUSED: (1, 1500.0)}, 3_000_000_000 - TEMP, 3.5), 0.05,
                         FUSED_ENABLES)]

    def test_a_clean_fused_kernel_passes(self) -> None:
        got = class_resources(SPEC, self.rows(), self.resources([self.variant(FUSED, 200, 4)]), "fwdbwd", 0.5)
        assert len(got) == 1 and got[0]["class"] == 64 and got[0]["problems"] == []
        assert got[0]["occupancy_ratio"] == pytest.approx(1.0)

    @pytest.mark.parametrize(("variant", "problem"), [
        ((FUSED, 200, 4, 12), "spills"),
        ((FUSED, 255, 16), "occupancy collapses"),
    ])
    def test_spills_or_occupancy_collapse_stop(self, variant, problem) -> None:
        res = self.resources([self.variant(*variant)])
        got = class_resources(SPEC, self.rows(), res, "fwdbwd", 0.5)
        assert any(problem in p for p in got[0]["problems"]), got[0]["problems"]
        gates = {g.name: g for g in candidate_gates(SPEC, self.rows(), res, "fwdbwd", 0.05, 0.5, "e")}
        assert gates["compile_resources"].status == "stop"

    def test_spill_ratio_against_a_baseline_that_spills(self) -> None:
        """profile.spill_ratio_max: a candidate spilling 12 words passes at 1 x a baseline spilling 12, stops at
        1 x a baseline spilling 6 and at 0; each problem names the variant's settings and the rows it ran on."""
        def res(base_spills: int) -> dict:
            base = [self.variant(INTRA, 128, 4, base_spills), self.variant(INTER, 255, 4)]
            return {"base": {"launched_by_row": {f"{ROW.name}:fwdbwd": base}},
                    "cand": {"launched_by_row": {f"{ROW.name}:fwdbwd": [self.variant(FUSED, 200, 4, 12)]}}}
        assert class_resources(SPEC, self.rows(), res(12), "fwdbwd", 0.5, 1.0)[0]["problems"] == []
        got = class_resources(SPEC, self.rows(), res(6), "fwdbwd", 0.5, 1.0)[0]
        assert got["baseline_spills"] == 6 and len(got["problems"]) == 1
        assert f"{FUSED} 12 x 32-bit" in got["problems"][0] and f"launched on {ROW.name}" in got["problems"][0]
        assert "spill 6, limit 1 x" in got["problems"][0]
        assert class_resources(SPEC, self.rows(), res(12), "fwdbwd", 0.5)[0]["problems"]
        gates = {g.name: g for g in candidate_gates(SPEC, self.rows(), res(12), "fwdbwd", 0.05, 0.5, "e", 1.0)}
        assert gates["compile_resources"].status == "pass"
        assert "spills <= 1 x the baseline's" in gates["compile_resources"].threshold

    def test_real_h200_in_place_candidate_spilling_in_its_autotune_pick(self) -> None:
        """The fla 9406930 replay on an H200 (tests/data/records/h200_cumsum_forced_bench): the candidate's
        BS-32 variant, the autotuner's pick on the two reverse FP32 rows, spills 2 words where the baseline's
        spill none. Recomputed from the record: the stop names that variant and exactly those rows; the value
        says which class; a baseline spilling as much with spill_ratio_max 1 would pass."""
        import json

        rec = json.loads((Path(__file__).parent / "data" / "records" / "h200_cumsum_forced_bench"
                          / "profile_candidate.json").read_text())
        spec = measure.load_spec(campaign.load("fla-cumsum-vector-9406930"), "h200")
        data = rec["data"]
        got = class_resources(spec, data["rows"], data["resources"], data["mode"], 0.5)
        spilling = {k for k, v in data["resources"]["cand"]["compiled_by_row"].items()
                    for x in v if x["n_spills"]}
        assert spilling == {"B8_T4096_H16_K128_rev_fp32:fwd", "B2_T4096_H8_K256_rev_fp32:fwd"}
        # one variant per row (specialised on K): one problem each, naming its row
        problems = got[0]["problems"]
        assert len(got) == 1 and len(problems) == 2, problems
        for problem, row in zip(problems, ("B8_T4096_H16_K128_rev_fp32", "B2_T4096_H8_K256_rev_fp32"), strict=True):
            assert "2 x 32-bit local memory per thread" in problem and "num_warps 2" in problem
            assert f"launched on {row}; limit 0" in problem
        # the record's own gate stopped on the same variant, with the old wording
        gate = next(g for g in rec["gates"] if g["name"] == "compile_resources")
        assert gate["status"] == "stop" and "2 spills" in gate["detail"]
        gates = {g.name: g for g in candidate_gates(spec, data["rows"], data["resources"], data["mode"], 0.05, 0.5, "e")}
        assert gates["compile_resources"].status == "stop"
        assert gates["compile_resources"].value.startswith("1 of 1 enabled class(es): class=every row: spills:")
        resources = json.loads(json.dumps(data["resources"]))
        base = resources["base"]
        for v in [*base["variants"], *(x for key in ("compiled_by_row", "launched_by_row")
                                       for vs in base[key].values() for x in vs)]:
            v["n_spills"] = 2
        assert class_resources(spec, data["rows"], resources, data["mode"], 0.5, 0.5)[0]["problems"]
        assert class_resources(spec, data["rows"], resources, data["mode"], 0.5, 1.0)[0]["problems"] == []

    def test_an_optimized_class_without_a_compiled_replacement_stops(self) -> None:
        got = class_resources(SPEC, self.rows(), self.resources([]), "fwdbwd", 0.5)
        assert "no compiled variant" in got[0]["problems"][0]


def test_campaign_rows_and_classes_resolve(tmp_path: Path) -> None:
    """The default campaign's GPU rows, profile rows and class values are consistent."""
    table = measure.row_table(SPEC.explicit_rows)
    assert [r.name for r in SPEC.profile_rows(table)] == ["B8_T1024_H8_D64", "B4_T2048_H16_D128",
                                                         "B8_T2048_H32_D256", "varlen_D128"]
    assert {r.klass(SPEC.class_key) for r in table.values()} == {64, 128, 256} == set(SPEC.classes)
    assert {r.kind for r in SPEC.gated_rows(table)} == {"dense", "varlen"}


@pytest.mark.parametrize(("gpu", "status", "record_status"), [("cpu", "skip", "pass"), ("h200", "unavailable", "unavailable")])
def test_a_campaign_without_a_measure_section_measures_nothing(gpu: str, status: str, record_status: str) -> None:
    """No measure section: nothing is timed; a CPU smoke goes on, a GPU run can never be GO on it."""
    from types import SimpleNamespace

    from kgate.measure.profile import not_measured

    assert measure.load_spec(campaign.load("chunk-local-cumsum-identity"), gpu) is None
    result = not_measured(SimpleNamespace(gpu=gpu), "bench")  # type: ignore[arg-type]
    assert [g.status for g in result.gates] == [status] and result.status == record_status
    assert result.data == {"measured": False}


class TestRemovedTorchOps:
    """A fusion that removes a torch op (Liger #1127: the divisions after the TV distance kernel). On a GPU CUPTI
    lists torch's elementwise kernel among the device kernels; under the interpreter the census holds Triton
    kernels only, and the profile's ``host_ops`` (the aten ops the region ran) stand in for it. SYNTHETIC tables."""

    TVD = "liger-tvd-fused-scale-1127"
    KERNEL = "_tv_distance_kernel"

    def cpu_measured(self, host_ops: dict[str, int]) -> dict:
        return {"inputs": {"sha256": "abc"}, "warm": {}, "samples_ms": [17.0], "profile": {
            "iterations": 1, "kernels": {self.KERNEL: {"launches": 1, "device_us": 16000.0}},
            "host_ops": {k: {"launches": n, "device_us": 5.0} for k, n in host_ops.items()},
            "flush_kernels": {}, "timer": "t", "alloc_sizes": {"84": 1}, "peak_bytes": 272, "peak_method": "m"}}

    def test_on_cpu_the_removed_division_is_seen_through_its_aten_op(self) -> None:
        spec = measure.load_spec(campaign.load(self.TVD), "cpu")
        row = Row("tiny_M3_V7", "dense", {"name": "tiny_M3_V7", "M": 3, "V": 7})
        base = self.cpu_measured({"aten::div": 2, "aten::sum": 1, "aten::zeros": 1})
        a = analyse(spec, row, base, launch_us=5.0, bytes_per_s=1e9)
        assert a["removed"]["launches_per_call"] == 2.0 and a["census"] == [self.KERNEL]
        assert a["mechanism"]["removes"]["removed_launches_per_call"] == 2.0
        assert structural_gates(spec, [a], "e", "stop")[0].status == "pass"
        none = analyse(spec, row, self.cpu_measured({"aten::sum": 1}), launch_us=5.0, bytes_per_s=1e9)
        assert none["removed"]["launches_per_call"] == 0.0
        assert structural_gates(spec, [none], "e", "stop")[0].status == "stop"

    def test_the_candidate_path_follows_the_aten_op_on_cpu(self) -> None:
        spec = measure.load_spec(campaign.load(self.TVD), "cpu")
        row = Row("tiny_M3_V7", "dense", {"name": "tiny_M3_V7", "M": 3, "V": 7})
        base = self.cpu_measured({"aten::div": 2, "aten::sum": 1})
        fused = pair_row(spec, row, base, self.cpu_measured({"aten::sum": 1}), tol=0.05)
        assert fused["path"] == "optimized" and fused["removed_launches_per_call"] == 0
        still = pair_row(spec, row, base, self.cpu_measured({"aten::div": 1, "aten::sum": 1}), tol=0.05)
        assert still["path"] == "fallback" and still["removed_launches_per_call"] == 1
        assert "still launches" in still["path_reason"]

    def test_on_a_gpu_the_device_kernel_counts_and_there_are_no_host_ops(self) -> None:
        spec = measure.load_spec(campaign.load(self.TVD), "h200")
        row = Row("M16384_V4096", "dense", {"name": "M16384_V4096", "M": 16384, "V": 4096})
        div = "void at::native::vectorized_elementwise_kernel<4, at::native::BUnaryFunctor<float, float, float, " \
              "at::native::binary_internal::DivFunctor<float> > >"
        m = {"inputs": {"sha256": "abc"}, "warm": {}, "samples_ms": [1.0], "profile": {
            "iterations": 2, "kernels": {self.KERNEL: {"launches": 2, "device_us": 1200.0},
                                         div: {"launches": 4, "device_us": 700.0}},
            "flush_kernels": {}, "timer": "t", "alloc_sizes": {str(16384 * 4096 * 4): 2}, "peak_bytes": 1,
            "peak_method": "m"}}
        a = analyse(spec, row, m, launch_us=5.0, bytes_per_s=4.3e12)
        assert a["removed"]["launches_per_call"] == 2.0 and a["removed"]["device_us_per_call"] == 350.0
        assert [g.status for g in structural_gates(spec, [a], "e", "stop")] == ["pass", "pass"]


def test_real_h200_fusion_naming_only_torch_kernels_says_what_to_name() -> None:
    """The TVD replay on an H200 before its campaign named the TVD kernel: the mechanism named only torch's
    division kernels, so neither arm had a compiled variant to compare; the problem says so and names the key.
    With the shipped campaign (measure.kernels.replaced holds the TVD kernel) the same resources pass: its
    variants in both arms keep 0 spills and the same occupancy."""
    import dataclasses
    import json

    rec = json.loads((Path(__file__).parent / "data" / "mechanism"
                      / "h200_tvd_profile_candidate_removed_only.json").read_text())
    data = rec["data"]
    shipped = measure.load_spec(campaign.load("liger-tvd-fused-scale-1127"), "h200")
    unnamed = dataclasses.replace(shipped, replaced=None)
    problems = class_resources(unnamed, data["rows"], data["resources"], data["mode"], 0.5, 1.0)[0]["problems"]
    assert len(problems) == 1 and "in either arm" in problems[0] and "measure.kernels.replaced" in problems[0]
    got = class_resources(shipped, data["rows"], data["resources"], data["mode"], 0.5, 1.0)[0]
    assert got["problems"] == [] and {v["kernel"] for v in got["candidate_variants"]} == {"_tv_distance_kernel"}
