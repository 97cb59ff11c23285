"""The host-ahead hold of bench's GPU timer (kgate.measure.host_ahead): its sizing, its adaptation and its rate.

The spin kernel and the event query run only on a GPU; what decides how long the GPU is held is plain
arithmetic and is tested here, with the bench record's per-row summary of the samples that were ahead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgate.gates.bench import behind_note, host_ahead_share
from kgate.measure.host_ahead import GIVE_UP, Hold, cycles_per_ms
from kgate.stages.bench import TIMER_METHODS


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
    grown = [h := h.after(False) for _ in range(3)]
    assert [g.ms for g in grown] == pytest.approx([3.0, 6.0, 10.0])
    assert grown[-1].after(True).ms == pytest.approx(10.0) and grown[-1].after(True).behind == 0


def test_a_hold_that_never_puts_the_host_ahead_is_dropped_and_stays_dropped() -> None:
    h = Hold.first(1.0)
    # behind, behind, ahead: the run of samples behind starts again
    h = h.after(False).after(False).after(True)
    assert h.on and h.behind == 0 and h.ms == pytest.approx(6.0)
    for i in range(GIVE_UP):
        assert h.on, i
        h = h.after(False)
    assert not h.on and h.ms == pytest.approx(1.5 * 2 ** (GIVE_UP + 2))
    assert h.after(True) == h and h.after(False) == h


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
    schema = yaml.safe_load((Path(__file__).parents[1] / "kgate" / "schemas" / "campaign.schema.yaml").read_text())
    timer = schema["properties"]["bench"]["properties"]["timer"]
    assert set(timer["enum"]) | {"cpu"} == set(TIMER_METHODS) and timer["default"] in TIMER_METHODS


def test_the_record_counts_held_samples_per_arm_across_rounds() -> None:
    def cell(ahead: int, n: int, holds: list[float], unheld: int = 0) -> dict:
        return {"samples_ms": [1.0] * n, "ahead": ahead, "hold_ms": holds, "unheld": unheld}

    cells = [{"base": cell(20, 20, [3.0, 3.0]), "cand": cell(18, 20, [3.0, 6.0])},
             {"base": cell(20, 20, [3.0, 3.0]), "cand": cell(20, 20, [6.0, 6.0])}]
    share = host_ahead_share(cells)
    none = {"syncs_per_call": None, "rearmed": False}
    assert share == {"base": {"ahead": 40, "samples": 40, "unheld": 0, "hold_ms": [3.0, 3.0], **none},
                     "cand": {"ahead": 38, "samples": 40, "unheld": 0, "hold_ms": [3.0, 6.0], **none}}
    # a row whose hold was dropped in the first round: later rounds hold nothing
    dropped = [{"base": cell(0, 20, [2.0, 16.0], unheld=16), "cand": cell(1, 20, [2.0, 32.0], unheld=12)},
               {"base": cell(0, 20, [], unheld=20), "cand": cell(0, 20, [], unheld=20)}]
    assert host_ahead_share(dropped) == {"base": {"ahead": 0, "samples": 40, "unheld": 36, "hold_ms": [2.0, 16.0], **none},
                                         "cand": {"ahead": 1, "samples": 40, "unheld": 32, "hold_ms": [2.0, 32.0], **none}}
    # a re-armed row: the synchronisations per call as counted, once per worker
    synced = [{a: {**cell(20, 20, [3.0, 3.0]), "syncs": {"per_call": 2, "through_methods": 2, "rearmed": True}}
               for a in ("base", "cand")}]
    assert host_ahead_share(synced)["cand"] == {"ahead": 20, "samples": 20, "unheld": 0, "hold_ms": [3.0, 3.0],
                                                "syncs_per_call": 2, "rearmed": True}
    # rounds timed without the hold (inline, CPU, or checkpoints from before the setting) count nothing
    assert host_ahead_share([{"base": {"samples_ms": [1.0]}, "cand": {"samples_ms": [1.0]}}]) is None
    assert host_ahead_share([]) is None


def test_the_report_names_the_timer_and_how_often_the_host_kept_ahead() -> None:
    from kgate.report.sections.bench import _timer

    rows = [{"host_ahead": {"base": {"ahead": 40, "samples": 40}, "cand": {"ahead": 37, "samples": 40}}},
            {"host_ahead": None}]
    text = _timer({"setting": "host_ahead", "method": TIMER_METHODS["host_ahead"]}, rows)
    assert text.startswith("CUDA events around each call, after the L2 flush and a spin kernel")
    assert text.endswith("host ahead in 77 of 80 held samples")
    rows.append({"host_ahead": {a: {"ahead": 0, "samples": 40, "unheld": 36} for a in ("base", "cand")}})
    text = _timer({"setting": "host_ahead", "method": TIMER_METHODS["host_ahead"]}, rows)
    assert text.endswith("host ahead in 77 of 88 held samples; 72 samples timed without the hold "
                         "(calls that synchronise inside)")
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
    # dropped holds: named with their counts, and a row whose arms were timed differently says so; the few
    # held samples of a dropped row (all behind) are behind too
    both = {"ahead": 0, "samples": 100, "unheld": 96, "hold_ms": [3.0, 48.0]}
    rows = [{"key": "v:fwdbwd", "host_ahead": {"base": both, "cand": both}},
            {"key": "w:fwdbwd", "host_ahead": {"base": ok, "cand": both}}]
    held, dropped = behind_note(rows)
    assert "v:fwdbwd base 4 of 4" in held and "w:fwdbwd cand 4 of 4" in held and "w:fwdbwd base" not in held
    assert "v:fwdbwd base 96, cand 96 of 100;" in dropped and "NOT timed alike" not in dropped.split(";")[0]
    assert dropped.endswith("w:fwdbwd base 0, cand 96 of 100 (the arms were NOT timed alike)")


class SimulatedGPU:
    """NAMED FAKE (no GPU can exist here): a stream clock for ``torch.cuda`` as the held timer uses it.

    The host enqueues work; the device runs it in order. ``_sleep(cycles)`` occupies the device for
    cycles / rate ms, a call for ``call_ms`` of device time, while the host needs ``enqueue_ms`` to
    enqueue a call. An event completes when the device reaches it; ``query()`` compares that moment
    with the host's clock, which is what decides whether the host was ahead.
    """

    def __init__(self, call_ms: float, enqueue_ms: list[float], rate: float = 1000.0) -> None:
        self.call_ms, self.enqueue_ms, self.rate = call_ms, list(enqueue_ms), rate
        self.host = self.device = 0.0
        self.slept: list[int] = []
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = None

            def record(self) -> None:
                gpu.device = max(gpu.device, gpu.host)
                self.at = gpu.device

            def query(self) -> bool:
                return self.at <= gpu.host

            def elapsed_time(self, other: Event) -> float:
                return other.at - self.at

        def _sleep(cycles: int) -> None:
            gpu.slept.append(cycles)
            gpu.device = max(gpu.device, gpu.host) + cycles / gpu.rate

        def synchronize() -> None:
            gpu.host = max(gpu.host, gpu.device)

        self.debug = 0

        def set_sync_debug_mode(mode: int) -> None:
            gpu.debug = mode

        class Tensor:
            """A CUDA tensor whose ``item()`` makes the host wait for the device (and says so in debug mode)."""

            is_cuda = True

            def item(self) -> int:
                gpu.sync_point()
                return 0

            def tolist(self) -> list:
                gpu.sync_point()
                return []

        self.Tensor = Tensor
        self.cuda = type("cuda", (), {"Event": Event, "_sleep": staticmethod(_sleep),
                                      "synchronize": staticmethod(synchronize),
                                      "set_sync_debug_mode": staticmethod(set_sync_debug_mode)})

    def sync_point(self) -> None:
        """A synchronising operation: the host waits for the device; torch's debug mode would warn."""
        if self.debug:
            import warnings
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=2)
        self.cuda.synchronize()

    def call(self) -> None:
        """The host enqueues a call kernel by kernel; the device runs each once both have got there."""
        need = self.enqueue_ms.pop(0) if len(self.enqueue_ms) > 1 else self.enqueue_ms[0]
        kernels = 10
        for _ in range(kernels):
            self.host += need / kernels
            self.device = max(self.device, self.host) + self.call_ms / kernels


def held_worker(gpu: SimulatedGPU, monkeypatch: pytest.MonkeyPatch):
    """A worker whose torch is the simulated GPU and whose host clock (``perf_counter``) is the simulation's."""
    import time

    from kgate.measure import worker as w
    from kgate.measure import worker_timing

    monkeypatch.setattr(worker_timing, "time", type("clock", (), {"perf_counter": staticmethod(lambda: gpu.host / 1e3),
                                                      "time": staticmethod(time.time)}))
    wk = w.Worker("base")
    wk.s.torch, wk.s.cuda = gpu, True
    wk.s.rows["r"] = w.RowState("r", {}, 0, (), {}, [])
    wk._prep = lambda rs: None
    wk._flush = lambda: None
    wk._call = lambda rs, mode: gpu.call()
    return wk


def test_with_the_hold_a_launch_bound_call_is_timed_by_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1 ms of kernels that the host needs 3 ms to launch: inline the span is the host's 3 ms
    gpu = SimulatedGPU(call_ms=1.0, enqueue_ms=[3.0])
    wk = held_worker(gpu, monkeypatch)
    inline = wk.time("r", "fwdbwd", 4)
    assert inline["samples_ms"] == pytest.approx([3.0] * 4, rel=0.05) and "ahead" not in inline
    held = wk.time("r", "fwdbwd", 4, hold=True)
    assert held["samples_ms"] == pytest.approx([1.0] * 4) and held["ahead"] == 4
    assert held["hold_ms"] == pytest.approx([4.5, 4.5])  # 1.5 x the measured 3 ms enqueue time
    assert gpu.slept and all(c == round(4.5 * 1000.0) for c in gpu.slept[3:])


def test_a_host_that_falls_behind_is_counted_and_the_hold_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    # the host's enqueue time jumps from 2 ms to 7 ms: that sample outlasts the 3 ms hold (the first four
    # calls are untimed: three measure the host's enqueue time, one counts the call's synchronisations)
    gpu = SimulatedGPU(call_ms=1.0, enqueue_ms=[2.0, 2.0, 2.0, 2.0, 2.0, 7.0, 2.0, 2.0, 2.0])
    wk = held_worker(gpu, monkeypatch)
    res = wk.time("r", "fwdbwd", 5, hold=True)
    assert res["ahead"] == 4 and res["hold_ms"] == pytest.approx([3.0, 6.0])
    slow = res["samples_ms"][1]
    assert slow > 1.0 and all(x == pytest.approx(1.0) for i, x in enumerate(res["samples_ms"]) if i != 1)
    # the grown hold is kept for the row's next round
    assert wk.time("r", "fwdbwd", 2, hold=True)["hold_ms"] == pytest.approx([6.0, 6.0])


class SyncingGPU(SimulatedGPU):
    """NAMED FAKE: a call that synchronises inside: after half its kernels the host waits for the device,
    through ``Tensor.item()`` (as fla's varlen path does), or, with ``hidden``, through an operation the
    worker cannot hook (an explicit synchronisation)."""

    def __init__(self, *args, hidden: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.hidden = hidden

    def call(self) -> None:
        need = self.enqueue_ms[0]
        for k in range(10):
            if k == 5:
                self.sync_point() if self.hidden else self.Tensor().item()
            self.host += need / 10
            self.device = max(self.device, self.host) + self.call_ms / 10


def test_a_call_that_synchronises_out_of_reach_drops_its_hold_instead_of_spinning_at_the_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = SyncingGPU(call_ms=1.0, enqueue_ms=[3.0], hidden=True)
    wk = held_worker(gpu, monkeypatch)
    res = wk.time("r", "fwdbwd", 20, hold=True)
    assert res["syncs"] == {"per_call": 1, "through_methods": 0, "rearmed": False}
    # never ahead; GIVE_UP held samples with doubling holds, then none: no spin after that
    assert res["ahead"] == 0 and res["unheld"] == 20 - GIVE_UP
    first = res["hold_ms"][0]
    assert first == pytest.approx(1.5 * 3.0, rel=0.1) and res["hold_ms"][1] == pytest.approx(first * 2 ** (GIVE_UP - 1))
    spins = len(gpu.slept)
    assert wk.time("r", "fwdbwd", 5, hold=True)["unheld"] == 5 and len(gpu.slept) == spins
    # an unheld span is the call as the host drives it, as the inline timer sees it: host time included
    inline = wk.time("r", "fwdbwd", 3)["samples_ms"]
    assert res["samples_ms"][-1] == pytest.approx(inline[-1]) and inline[-1] > 2.5


def test_a_call_that_synchronises_through_item_is_held_again_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 ms of kernels, 3 ms of host launching, one ``.item()`` halfway: inline the span is host time (over
    2.5 ms); with the hold re-armed after the synchronisation every sample is ahead and measures the device's
    1 ms (the re-armed spin taken out), and the Tensor methods are restored afterwards."""
    gpu = SyncingGPU(call_ms=1.0, enqueue_ms=[3.0])
    wk = held_worker(gpu, monkeypatch)
    inline = wk.time("r", "fwdbwd", 3)["samples_ms"]
    assert min(inline) > 2.5
    res = wk.time("r", "fwdbwd", 20, hold=True)
    assert res["syncs"] == {"per_call": 1, "through_methods": 1, "rearmed": True}
    assert res["ahead"] == 20 and res["unheld"] == 0
    assert res["samples_ms"] == pytest.approx([1.0] * 20)
    # two spins a sample: the hold before the call and the one re-armed after the synchronisation
    calibration = 3  # the spin rate's timed spins
    assert len(gpu.slept) == calibration + 2 * 20
    assert gpu.Tensor.item.__qualname__.endswith("Tensor.item")


def test_a_segment_the_host_lost_counts_the_sample_as_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host stalls after the synchronisation for longer than the re-armed hold: that sample is not ahead,
    and the hold grows for the next one."""
    gpu = SyncingGPU(call_ms=1.0, enqueue_ms=[3.0])
    wk = held_worker(gpu, monkeypatch)
    wk.time("r", "fwdbwd", 1, hold=True)
    stall = iter([0.0, 50.0] + [0.0] * 10)
    orig = SyncingGPU.call

    def slow_after_sync(self) -> None:
        pause = next(stall)
        item = self.Tensor.item

        def late(t):
            out = item(t)
            self.host += pause
            return out
        self.Tensor.item = late
        try:
            orig(self)
        finally:
            self.Tensor.item = item
    monkeypatch.setattr(SyncingGPU, "call", slow_after_sync)
    res = wk.time("r", "fwdbwd", 3, hold=True)
    assert res["ahead"] == 2 and res["hold_ms"][1] == pytest.approx(2 * res["hold_ms"][0])


def test_the_sync_hooks_patch_torchs_tensor_methods_and_restore_them() -> None:
    """With real torch (CPU build): CPU tensors pass through untouched; a tensor that says it is on CUDA (a
    subclass standing in for one) runs the hooks around ``item``/``tolist``; afterwards the methods are torch's
    own again (inherited, not left as attributes of torch.Tensor)."""
    import torch

    from kgate.measure.host_ahead import around_syncs

    class OnCuda(torch.Tensor):
        is_cuda = property(lambda self: True)

    calls: list[str] = []
    with around_syncs(torch, lambda: calls.append("before"), lambda: calls.append("after")):
        assert torch.ones(3).sum().item() == 3.0 and torch.ones(2).tolist() == [1.0, 1.0]
        assert calls == []
        fake = torch.ones(2).as_subclass(OnCuda)
        assert fake.tolist() == [1.0, 1.0] and fake[0].item() == 1.0
        assert calls == ["before", "after"] * 2
        with pytest.raises(RuntimeError):
            torch.ones(2).item()  # the original's own error still reaches the caller
    assert "item" not in torch.Tensor.__dict__ and torch.Tensor.item is torch._C.TensorBase.item
    assert "tolist" not in torch.Tensor.__dict__
