"""Nsight Compute exports into the tidy table: real H200 exports, and a derived one with renamed/missing metrics."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from kgate.errors import IncompleteData
from kgate.ncu import parse as ncu_parse

DATA = REPO / "tests" / "data" / "ncu"
STEM = DATA / "chunk_rwkv6_bwd_B4_T2048_H16_D128"
INTRA, INTER = "chunk_rwkv6_bwd_kernel_intra", "chunk_rwkv6_bwd_kernel_inter"


def table(*exports: list[ncu_parse.Launch], path: Path = ncu_parse.METRIC_MAP) -> dict[str, dict]:
    launches = ncu_parse.merge(*exports)
    mm = ncu_parse.load_map(ncu_parse.capability(launches), path)
    return {k["kernel"]: k for k in ncu_parse.kernel_table(launches, mm)}


@pytest.fixture(scope="module", name="h200")
def _h200() -> dict[str, dict]:
    return table(ncu_parse.read_raw(Path(f"{STEM}.full.raw.csv")), ncu_parse.read_details(Path(f"{STEM}.full.details.csv")),
                 ncu_parse.read_details(Path(f"{STEM}.source.details.csv")))


def test_raw_export_gives_the_headline_numbers_in_the_units_of_the_key_names(h200) -> None:
    """The H200 export's headline numbers (data README) come out in ns, bytes and % with nothing unavailable."""
    intra, inter = h200[INTRA], h200[INTER]
    assert intra["duration_ns"] == pytest.approx(540224.0) and inter["duration_ns"] == pytest.approx(345600.0)
    assert intra["dram_read_bytes"] == pytest.approx(222_723_584) and intra["dram_write_bytes"] == pytest.approx(121_198_592)
    assert inter["dram_read_bytes"] == pytest.approx(683_147_520) and inter["dram_write_bytes"] == pytest.approx(242_417_152)
    assert inter["dram_throughput_bytes_per_s"] == pytest.approx(2.678139e12)
    assert (intra["registers_per_thread"], inter["registers_per_thread"]) == (128, 255)
    assert intra["achieved_occupancy_pct"] == pytest.approx(24.084191)
    assert inter["achieved_occupancy_pct"] == pytest.approx(12.225619)
    assert (intra["grid_blocks"], inter["grid_blocks"]) == (16384, 8192)
    assert intra["shared_bytes_per_block"] == pytest.approx(19456)
    assert intra["l2_hit_rate_pct"] == pytest.approx(62.784076) and inter["l2_sectors"] == pytest.approx(54_520_634)
    # intra stores exactly the FP32 dq and dk: 2 x B*T*H*D*4 bytes = 4,194,304 sectors of 32 bytes
    assert intra["l2_store_sectors"] * 32 == 2 * 4 * 2048 * 16 * 128 * 4
    # inter already spills on the H200; intra does not
    assert intra["local_load_sectors"] == 0 and inter["local_load_sectors"] == pytest.approx(3_470_904)
    assert inter["spill_requests"] == pytest.approx(1_736_704)
    assert intra["branch_efficiency_pct"] == pytest.approx(100.0) and inter["branch_efficiency_pct"] == pytest.approx(88.89)
    assert intra["tensor_ops"]["tf32_dst_fp32"] == pytest.approx(1_610_612_736) and intra["tensor_ops"]["bf16_dst_fp32"] == 0
    assert inter["tensor_ops"]["bf16_dst_fp32"] == pytest.approx(8_589_934_592)
    assert intra["launches"] == inter["launches"] == 1
    assert intra["unavailable"] == {} and inter["unavailable"] == {}


def test_top_stall_reasons_are_the_largest_shares_without_selected(h200) -> None:
    top = ncu_parse.top_stalls(h200[INTRA]["stall_samples"])
    assert [t["reason"] for t in top] == ["long_scoreboard", "short_scoreboard", "wait"]
    assert top[0]["samples"] == 23517 and top[0]["share_pct"] == pytest.approx(43.0, abs=0.1)
    assert "selected" not in h200[INTRA]["stall_samples"]
    assert not any(k.endswith("_not_issued") for k in h200[INTRA]["stall_samples"])


def test_a_details_export_alone_fills_what_its_sections_have() -> None:
    """Without the raw page, the details page's section metrics fill their columns; the rest is unavailable."""
    t = table(ncu_parse.read_details(Path(f"{STEM}.full.details.csv")))
    intra = t[INTRA]
    assert intra["duration_ns"] == pytest.approx(540220.0)
    assert intra["registers_per_thread"] == 128 and intra["spill_requests"] == 0
    assert intra["achieved_occupancy_pct"] == pytest.approx(24.08, abs=0.01)
    assert intra["dram_read_bytes"] == ncu_parse.UNAVAILABLE
    assert "dram__bytes_read.sum" in intra["unavailable"]["dram_read_bytes"]
    assert intra["stall_samples"] == ncu_parse.UNAVAILABLE
    rules = {r["rule"] for r in intra["rules"]}
    assert "SOLBottleneck" in rules


def test_the_derived_export_with_renamed_and_missing_metrics_yields_unavailable_cells() -> None:
    """Renamed, dropped, 'n/a' and wrongly-united metrics are `unavailable` with a reason each; the rest is read."""
    t = table(ncu_parse.read_raw(DATA / "DERIVED-renamed-missing.full.raw.csv"))
    inter = t[INTER]
    for key in ("duration_ns", "dram_read_bytes", "registers_per_thread", "l2_hit_rate_pct", "stall_samples"):
        assert inter[key] == ncu_parse.UNAVAILABLE, key
    reasons = inter["unavailable"]
    assert "gpu__time_duration.sum" in reasons["duration_ns"] and "n/a" in reasons["registers_per_thread"]
    assert "'ratio'" in reasons["l2_hit_rate_pct"]
    assert inter["dram_write_bytes"] == pytest.approx(242_417_152)
    assert inter["achieved_occupancy_pct"] == pytest.approx(12.225619)
    assert ncu_parse.top_stalls(inter["stall_samples"]) == ncu_parse.UNAVAILABLE
    # the weighted columns need durations: with none, they are unavailable too, not a made-up mean
    both = ncu_parse.combine([t[INTRA], inter], ncu_parse.load_map("9.0"))
    assert both["dram_throughput_pct"] == ncu_parse.UNAVAILABLE
    assert both["dram_write_bytes"] == pytest.approx(121_198_592 + 242_417_152)


def test_an_architecture_without_a_counter_marks_it_unavailable(tmp_path: Path) -> None:
    """A per-architecture override of null means that architecture has no such counter."""
    data = yaml.safe_load(ncu_parse.METRIC_MAP.read_text())
    data["architectures"]["9.0"]["metrics"] = {"dram_read_bytes": None}
    path = tmp_path / "map.yaml"
    path.write_text(yaml.safe_dump(data))
    t = table(ncu_parse.read_raw(Path(f"{STEM}.full.raw.csv")), path=path)
    assert t[INTRA]["dram_read_bytes"] == ncu_parse.UNAVAILABLE
    assert "no such counter" in t[INTRA]["unavailable"]["dram_read_bytes"]
    assert t[INTRA]["dram_write_bytes"] == pytest.approx(121_198_592)


def test_an_unknown_architecture_gets_the_defaults_marked_unverified() -> None:
    mm = ncu_parse.load_map("12.7")
    assert mm.verified is None and "no entry" in mm.architecture and "duration_ns" in mm.metrics
    assert ncu_parse.load_map("9.0").verified


def test_launches_of_one_kernel_add_up_by_each_columns_rule() -> None:
    """Two launches of a kernel: durations and bytes add, registers take the max, occupancy the min,
    throughput percentages the duration-weighted mean."""
    raw = ncu_parse.read_raw(Path(f"{STEM}.full.raw.csv"))
    intra = next(la for la in raw if la.kernel == INTRA)
    inter_as_intra = next(la for la in raw if la.kernel == INTER)
    second = ncu_parse.Launch(kernel=INTRA, index=1, cc=intra.cc, grid=inter_as_intra.grid, block=intra.block,
                              raw=inter_as_intra.raw)
    row = ncu_parse.kernel_table([intra, second], ncu_parse.load_map("9.0"))[0]
    assert row["launches"] == 2
    assert row["duration_ns"] == pytest.approx(540224 + 345600)
    assert row["registers_per_thread"] == 255 and row["achieved_occupancy_pct"] == pytest.approx(12.225619)
    expected = (13.230455 * 540224 + 55.659449 * 345600) / (540224 + 345600)
    assert row["dram_throughput_pct"] == pytest.approx(expected)
    assert row["grid"] == ["(128, 64, 1)", "(256, 64, 1)"]


@pytest.mark.parametrize(("value", "unit", "target", "expected"), [
    (540.224, "us", "ns", 540224.0), (1.5, "ms", "ns", 1.5e6), (7.0, "nsecond", "ns", 7.0),
    (222.723584, "Mbyte", "bytes", 222_723_584.0), (19.456, "Kbyte/block", "bytes", 19456.0), (3.0, "byte", "bytes", 3.0),
    (0.636629, "Tbyte/s", "bytes_per_s", 636.629e9), (701.4, "Gbyte/s", "bytes_per_s", 701.4e9),
    (1.0, "byte/second", "bytes_per_s", 1.0), (24.1, "%", "pct", 24.1), (3.0, "sector", "count", 3.0),
    (2.0, "Msector", "count", 2e6), (255, "register/thread", "count", 255),
    (1.0, "Mbyte", "ns", None), (1.0, "%", "bytes", None), (1.0, "ratio", "pct", None),
    (1.0, "Gbyte/cycle", "bytes_per_s", None),
])
def test_units_convert_or_refuse(value: float, unit: str, target: str, expected: float | None) -> None:
    got = ncu_parse.convert(value, unit, target)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(("text", "expected"), [("16,384", 16384.0), ("975,651", 975651.0), ("0.627824", 0.627824),
                                                ("n/a", None), ("", None), ("PolicySpread", None)])
def test_numbers_drop_thousands_separators(text: str, expected: float | None) -> None:
    assert ncu_parse.number(text) == expected


def test_a_file_that_is_not_an_ncu_export_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(IncompleteData, match="no 'Kernel Name' column"):
        ncu_parse.read_raw(path)
    with pytest.raises(IncompleteData, match="cannot read"):
        ncu_parse.read_raw(tmp_path / "missing.csv")


def test_exports_of_two_architectures_do_not_mix() -> None:
    raw = ncu_parse.read_raw(Path(f"{STEM}.full.raw.csv"))
    other = [ncu_parse.Launch(kernel=la.kernel, index=la.index, cc="10.3", grid=la.grid, block=la.block) for la in raw]
    with pytest.raises(IncompleteData, match="10.3, 9.0"):
        ncu_parse.capability(raw + other)


# The candidate's real H200 exports (tests/data/ncu/h200_fused_f6b3512413ea/, PROVENANCE.json): the fused kernel
# and, from the same run, the baseline's intra + inter, for the three ncu rows (dense D128, D256, packed varlen; the
# stage's own record beside them). The expected numbers are read from the CSV
# columns here with the csv module, independently of the parser.

FUSED_DATA = DATA / "h200_fused_f6b3512413ea"
FUSED_ROWS = ("B4_T2048_H16_D128", "B8_T2048_H32_D256", "varlen_D128")
FUSED = "chunk_rwkv6_bwd_kernel_fused"
CAMPAIGN = yaml.safe_load((REPO / "config" / "campaigns" / "rwkv6-bwd-fusion.yaml").read_text())
_SCALE = {"ns": 1.0, "us": 1e3, "ms": 1e6, "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "%": 1.0,
          "sector": 1.0, "register/thread": 1.0, "request": 1.0, "": 1.0}


def csv_columns(path: Path, *names: str) -> dict[str, dict[str, float]]:
    """Kernel name -> {column: value in ns / bytes / plain units}, straight from a ``--page raw`` export."""
    with path.open() as fh:
        units, *rows = list(csv.DictReader(fh))
    return {r["Kernel Name"]: {n: float(r[n].replace(",", "")) * _SCALE[units[n]] for n in names} for r in rows}


RAW_COLS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "launch__registers_per_thread",
            "sm__warps_active.avg.pct_of_peak_sustained_active", "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
            "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum")


@pytest.mark.parametrize("row", FUSED_ROWS)
def test_the_candidates_full_export_gives_the_fused_kernel_with_every_column(row: str) -> None:
    """The fused kernel, read from the candidate's full pass: the campaign's replacement, one launch, durations,
    registers, spills and DRAM bytes as the CSV's own columns say, nothing unavailable."""
    stem = FUSED_DATA / f"{row}.cand.full"
    t = table(ncu_parse.read_raw(Path(f"{stem}.raw.csv")), ncu_parse.read_details(Path(f"{stem}.details.csv")))
    assert list(t) == [FUSED]
    k = t[FUSED]
    kernels = CAMPAIGN["measure"]["kernels"]
    assert re.search(kernels["replacement"], k["kernel"]) and re.search(CAMPAIGN["ncu"]["kernels"]["candidate"], k["kernel"])
    removed = CAMPAIGN["measure"]["mechanism"]["removes"]["kernels"]
    assert not re.search(removed, k["kernel"]) and not re.search(kernels["replaced"], k["kernel"])
    want = csv_columns(Path(f"{stem}.raw.csv"), *RAW_COLS)[FUSED]
    assert k["launches"] == 1 and k["unavailable"] == {}
    assert k["duration_ns"] > 0 and k["duration_ns"] == pytest.approx(want["gpu__time_duration.sum"])
    assert k["registers_per_thread"] == want["launch__registers_per_thread"] <= 255
    assert k["achieved_occupancy_pct"] == pytest.approx(want["sm__warps_active.avg.pct_of_peak_sustained_active"])
    assert k["local_load_sectors"] == want["l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"]
    assert k["local_store_sectors"] == want["l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"]
    for col, metric in (("dram_read_bytes", "dram__bytes_read.sum"), ("dram_write_bytes", "dram__bytes_write.sum")):
        assert k[col] != ncu_parse.UNAVAILABLE and k[col] == pytest.approx(want[metric]) and k[col] > 0
    # the fused kernel does not spill (234 registers; 236 in its varlen specialisation), where the baseline's
    # inter does (255)
    assert (k["local_load_sectors"], k["local_store_sectors"], k["spill_requests"]) == (0, 0, 0)
    assert k["registers_per_thread"] == (236 if row.startswith("varlen") else 234)
    # the details page alone says the same, to its fewer digits (Duration: "1.16" "ms")
    details = ncu_parse.read_details(Path(f"{stem}.details.csv"))
    d = table(details)[FUSED]
    text, unit = details[0].details["GPU Speed Of Light Throughput/Duration"]
    assert d["duration_ns"] == pytest.approx(float(text) * _SCALE[unit])
    assert d["duration_ns"] == pytest.approx(k["duration_ns"], rel=5e-3)
    assert d["registers_per_thread"] == k["registers_per_thread"] and d["spill_requests"] == 0
    assert d["achieved_occupancy_pct"] == pytest.approx(k["achieved_occupancy_pct"], abs=0.01)


@pytest.mark.parametrize("row", FUSED_ROWS)
def test_the_base_arm_of_the_candidate_run_has_intra_and_inter_with_inters_spills(row: str) -> None:
    stem = FUSED_DATA / f"{row}.base.full"
    t = table(ncu_parse.read_raw(Path(f"{stem}.raw.csv")), ncu_parse.read_details(Path(f"{stem}.details.csv")))
    assert list(t) == [INTRA, INTER]
    want = csv_columns(Path(f"{stem}.raw.csv"), *RAW_COLS)
    for name in (INTRA, INTER):
        assert t[name]["duration_ns"] == pytest.approx(want[name]["gpu__time_duration.sum"])
        assert t[name]["dram_read_bytes"] == pytest.approx(want[name]["dram__bytes_read.sum"])
        assert t[name]["local_load_sectors"] == want[name]["l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"]
        assert t[name]["unavailable"] == {}
    # fla's varlen intra kernel is a different specialisation: 233 registers where the dense one takes 128
    assert (t[INTRA]["registers_per_thread"], t[INTER]["registers_per_thread"]) == \
        ((233 if row.startswith("varlen") else 128), 255)
    assert t[INTRA]["local_load_sectors"] == 0 and t[INTER]["local_load_sectors"] > 0 and t[INTER]["spill_requests"] > 0


def stated_excessive(launch: ncu_parse.Launch) -> float | None:
    """The excessive global sectors the UncoalescedGlobalAccess rule states in its words, if it fired."""
    for r in launch.rules:
        if r["rule"] == "UncoalescedGlobalAccess":
            m = re.search(r"a total of (\d+) excessive sectors", r["description"])
            assert m, r["description"]
            return float(m.group(1))
    return None


@pytest.mark.parametrize("row", FUSED_ROWS)
@pytest.mark.parametrize("arm", ["base", "cand"])
def test_the_source_pass_details_and_raw_parse(row: str, arm: str) -> None:
    """The source pass (SourceCounters): branch efficiency from its details page. Its raw page labels
    derived__memory_l2_theoretical_sectors_global_excessive 'Mbyte' (the full pass: 'sector'), so from it alone the
    column is unavailable with the unit as reason; in millions it is the count the rule states in words."""
    names = [FUSED] if arm == "cand" else [INTRA, INTER]
    stem = FUSED_DATA / f"{row}.{arm}.source"
    details = ncu_parse.read_details(Path(f"{stem}.details.csv"))
    raw = ncu_parse.read_raw(Path(f"{stem}.raw.csv"))
    assert [la.kernel for la in details] == [la.kernel for la in raw] == names
    assert ncu_parse.capability(raw + details) == "9.0"
    t = table(raw, details)
    for la, la_raw in zip(details, raw, strict=True):
        k = t[la.kernel]
        value, unit = la.details["Source Counters/Branch Efficiency"]
        assert unit == "%" and k["branch_efficiency_pct"] == pytest.approx(float(value)) and 0 < float(value) <= 100
        text, unit = la_raw.raw["derived__memory_l2_theoretical_sectors_global_excessive"]
        assert unit == "Mbyte" and k["uncoalesced_global_excessive_sectors"] == ncu_parse.UNAVAILABLE
        assert "'Mbyte'" in k["unavailable"]["uncoalesced_global_excessive_sectors"]
        assert float(text) * 1e6 == pytest.approx(stated_excessive(la))
    if arm == "cand":
        assert "UncoalescedGlobalAccess" in {r["rule"] for r in t[FUSED]["rules"]}
    # the full pass's raw page (first, as the stage merges them) fills the column in sectors; with the source
    # pass's details merged in, nothing is unavailable
    full = FUSED_DATA / f"{row}.{arm}.full"
    full_details = ncu_parse.read_details(Path(f"{full}.details.csv"))
    merged = table(ncu_parse.read_raw(Path(f"{full}.raw.csv")), full_details, raw, details)
    for la in full_details:
        k = merged[la.kernel]
        assert k["unavailable"] == {}
        assert k["branch_efficiency_pct"] == pytest.approx(float(la.details["Source Counters/Branch Efficiency"][0]))
        assert k["uncoalesced_global_excessive_sectors"] == stated_excessive(la)
