"""bench's GPU telemetry through nvidia-smi, against a stand-in ``nvidia-smi`` on PATH.

The stand-in answers like a driver that renamed ``clocks_throttle_reasons`` to
``clocks_event_reasons`` only in newer releases: it rejects the new name, so
the probe must fall back to the old one. Every call's arguments are logged, so
the test sees that each query names the GPU by UUID.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from kgate.measure import telemetry as measure

FAKE_SMI = '''\
#!{python}
import sys
args = " ".join(sys.argv[1:])
with open({log!r}, "a") as fh:
    fh.write(args + "\\n")
if "--query-gpu=clocks_event_reasons.active" in args:
    print('Field "clocks_event_reasons.active" is not a valid field to query.')
    sys.exit(2)
if "--query-gpu=clocks_throttle_reasons.active" in args:
    print("0x0000000000000000")
elif "--query-gpu=" in args:
    print("1980, 3201, 512.34, 45, 0x0000000000000004")
elif "--query-compute-apps" in args:
    print("4242, python, 1234")
    print("4243, python, 999")
'''


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is not None, reason="pynvml is importable: NVML is used instead")
def test_clocks_throttle_reasons_and_compute_apps_via_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "calls.log"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(FAKE_SMI.format(python=sys.executable, log=str(log)))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    tel = measure.Telemetry("GPU-1b2c3d4e", cpu=False)
    assert tel.method.startswith("nvidia-smi")
    sample = tel.sample()
    assert sample is not None
    assert (sample["sm_clock_mhz"], sample["mem_clock_mhz"], sample["power_w"], sample["temperature_c"]) == (
        1980.0, 3201.0, 512.34, 45.0)
    assert sample["throttle_reasons"] == "0x0000000000000004"
    apps = tel.compute_apps()
    assert [a["pid"] for a in apps] == [4242, 4243] and apps[0]["used_mib"] == 1234.0
    assert measure.foreign_processes(apps, {4242, 4243})["foreign"] == []
    assert [a["pid"] for a in measure.foreign_processes(apps, {4242})["foreign"]] == [4243]
    calls = log.read_text().splitlines()
    assert all("--id=GPU-1b2c3d4e" in c and "--format=csv,noheader,nounits" in c for c in calls)
    assert any("clocks_throttle_reasons.active" in c and "clocks.sm" in c for c in calls)


def test_cpu_telemetry_is_unavailable_not_invented() -> None:
    tel = measure.Telemetry(None, cpu=True)
    assert tel.sample() is None and tel.compute_apps() is None and tel.method.startswith("unavailable")


def test_the_exclusivity_gate_reads_every_round() -> None:
    from kgate.gates.bench import exclusive_gate

    clean = [{"index": i, "exclusive": {"checked": True, "foreign": [], "note": None}} for i in range(5)]
    assert exclusive_gate(clean, [{"foreign": [], "note": None}], False, "e").status == "pass"
    dirty = clean[:2] + [{"index": 2, "exclusive": {"checked": True, "foreign": [{"pid": 9}], "note": None}}]
    g = exclusive_gate(dirty, [], False, "e")
    assert g.status == "inconclusive" and "[3]" in g.value
    hidden = [{"foreign": [], "note": "no compute process listed, not even our workers: exclusivity unverified"}]
    assert "unverified" in exclusive_gate(clean, hidden, False, "e").value
    # the same empty list before warm-up (no CUDA context yet), then rounds that list both workers: verified
    seen = [{"index": i, "exclusive": measure.foreign_processes([{"pid": 7}, {"pid": 8}], {7, 8})} for i in range(3)]
    before = [measure.foreign_processes([], {7, 8})]
    assert "unverified" in before[0]["note"] and seen[0]["exclusive"]["ours_listed"]
    assert exclusive_gate(seen, before, False, "e").value == "3 round(s) checked"
    assert exclusive_gate(clean, [], True, "e").status == "skip"


def test_host_load_is_read_and_a_busy_host_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load average against the CPU count; only a busy sample gives a reason line, naming the worst load."""
    monkeypatch.setattr(measure.os, "getloadavg", lambda: (3.0, 2.0, 1.0))
    monkeypatch.setattr(measure.os, "cpu_count", lambda: 4)
    busy = measure.host_load()
    assert busy == {"load_1m": 3.0, "load_5m": 2.0, "cpus": 4, "busy": True}
    monkeypatch.setattr(measure.os, "getloadavg", lambda: (1.5, 2.0, 1.0))
    quiet = measure.host_load()
    assert not quiet["busy"]
    assert measure.busy_note([quiet]) == []
    (line,) = measure.busy_note([quiet, busy, {**busy, "load_1m": 2.5}])
    assert "load 3.0 on 4 CPUs" in line and "may be inflated" in line


def test_an_unstable_launch_probe_is_named_from_real_h200_samples() -> None:
    """The launch-cost probe of two real H200 runs: quiet (10.8-11.2 µs) gives nothing; one that a second
    campaign's compiles shared the host with (11.0 and 20.4 µs) gives a reason naming the range."""
    data = Path(__file__).parent / "data" / "records"

    def samples(scenario: str) -> list[float]:
        record = json.loads((data / scenario / "profile_baseline.json").read_text())
        return record["data"]["launch_cost"]["samples_us"]

    assert measure.spread_note("launch cost", samples("h200_default_profile_stop"), "µs") == []
    (line,) = measure.spread_note("launch cost", samples("h200_default_bench"), "µs", "the median")
    assert line.startswith("launch cost unstable across its 5 samples (11-20.4 µs, x1.85)")
    assert measure.spread_note("launch cost", [5.0], "µs") == []
