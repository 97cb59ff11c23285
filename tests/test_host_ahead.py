"""The host-ahead hold of bench's GPU timer (kgate.host_ahead): its sizing, its adaptation and its rate.

The spin kernel and the event query run only on a GPU; what decides how long the GPU is held is plain
arithmetic and is tested here, with the bench record's per-row summary of the samples that were ahead.
"""

from __future__ import annotations

import pytest

from kgate.bench import TIMER_METHODS, behind_note, host_ahead_share
from kgate.host_ahead import TIMERS, Hold, cycles_per_ms


def test_the_first_hold_covers_the_hosts_enqueue_time_within_its_floor_and_cap() -> None:
    assert Hold.first(2.0).ms == pytest.approx(3.0)
    assert Hold.first(0.01).ms == pytest.approx(0.2)
    assert Hold.first(500.0).ms == pytest.approx(100.0)
    assert Hold.first(2.0, margin=2.0, cap_ms=3.5).ms == pytest.approx(3.5)
    with pytest.raises(ValueError, match="host enqueue time"):
        Hold.first(float("nan"))


def test_a_sample_the_host_lost_doubles_the_next_hold_up_to_the_cap() -> None:
    h = Hold.first(1.0, cap_ms=10.0)
    assert h.after(True) == h
    grown = [h := h.after(False) for _ in range(4)]
    assert [g.ms for g in grown] == pytest.approx([3.0, 6.0, 10.0, 10.0])
    assert grown[-1].after(True).ms == pytest.approx(10.0)


def test_spin_cycles_follow_the_calibrated_rate() -> None:
    rate = cycles_per_ms(1_000_000, [0.52, 0.50, 0.51])
    assert rate == pytest.approx(1_000_000 / 0.51)
    assert cycles_per_ms(10, [2.0, 4.0]) == pytest.approx(10 / 3.0)
    assert Hold(2.0).cycles(rate) == round(2.0 * rate)
    assert Hold(1e-9).cycles(rate) == 1
    for bad in ([], [0.0, -1.0]):
        with pytest.raises(ValueError, match="spin calibration"):
            cycles_per_ms(1_000_000, bad)
    with pytest.raises(ValueError, match="spin rate"):
        Hold(1.0).cycles(0.0)


def test_every_timer_setting_has_its_method_in_the_record() -> None:
    assert set(TIMERS) | {"cpu"} == set(TIMER_METHODS)


def test_the_record_counts_held_samples_per_arm_across_rounds() -> None:
    def cell(ahead: int, n: int, lo: float, hi: float) -> dict:
        return {"samples_ms": [1.0] * n, "ahead": ahead, "hold_ms": [lo, hi]}

    cells = [{"base": cell(20, 20, 3.0, 3.0), "cand": cell(18, 20, 3.0, 6.0)},
             {"base": cell(20, 20, 3.0, 3.0), "cand": cell(20, 20, 6.0, 6.0)}]
    share = host_ahead_share(cells)
    assert share == {"base": {"ahead": 40, "samples": 40, "hold_ms": [3.0, 3.0]},
                     "cand": {"ahead": 38, "samples": 40, "hold_ms": [3.0, 6.0]}}
    # rounds timed without the hold (inline, CPU, or checkpoints from before the setting) count nothing
    assert host_ahead_share([{"base": {"samples_ms": [1.0]}, "cand": {"samples_ms": [1.0]}}]) is None
    assert host_ahead_share([]) is None


def test_the_report_names_the_timer_and_how_often_the_host_kept_ahead() -> None:
    from kgate.report_bench import _timer

    rows = [{"host_ahead": {"base": {"ahead": 40, "samples": 40}, "cand": {"ahead": 37, "samples": 40}}},
            {"host_ahead": None}]
    text = _timer({"setting": "host_ahead", "method": TIMER_METHODS["host_ahead"]}, rows)
    assert text.startswith("CUDA events around each call, after the L2 flush and a spin kernel")
    assert text.endswith("host ahead in 77 of 80 samples")
    assert _timer({"setting": "inline", "method": TIMER_METHODS["inline"]}, [{"host_ahead": None}]) == \
        TIMER_METHODS["inline"]
    assert "before the timer setting existed" in _timer(None, rows)


def test_rows_where_the_host_fell_behind_are_named_in_the_reasons() -> None:
    ok = {"ahead": 95, "samples": 100, "hold_ms": [3.0, 3.0]}
    bad = {"ahead": 60, "samples": 100, "hold_ms": [3.0, 100.0]}
    rows = [{"key": "a:fwdbwd", "host_ahead": {"base": ok, "cand": ok}},
            {"key": "b:fwdbwd", "host_ahead": {"base": ok, "cand": bad}},
            {"key": "c:fwd", "host_ahead": None}]
    (line,) = behind_note(rows)
    assert line.endswith("b:fwdbwd cand 40 of 100") and "a:fwdbwd" not in line
    assert behind_note(rows[:1] + rows[2:]) == []
