"""The worker's whole-tensor reductions run a chunk at a time (a float64 or int64 copy of a 32768 x 128256 output
would not fit beside it on the GPU): chunking must not change a value, whatever the chunk boundaries."""

from __future__ import annotations

import pytest
import torch

from kgate.measure import tensors, worker_calls


def _fingerprint_whole(t: torch.Tensor) -> list[int]:
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
    w = words.to(torch.int64)
    return [int(w.sum()), int(w[1::2].sum())]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1001])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8])
def test_fingerprint_chunked_equals_whole(monkeypatch: pytest.MonkeyPatch, n: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(n)
    t = (torch.randn(n, generator=gen) * 100).to(dtype)
    whole = _fingerprint_whole(t)
    assert tensors.fingerprint(torch, t) == whole
    # a tiny chunk puts boundaries everywhere; odd positions must stay the odd ones across chunks
    monkeypatch.setattr(tensors, "_FINGERPRINT_CHUNK", 2)
    assert tensors.fingerprint(torch, t) == whole
    # one changed element changes the fingerprint
    u = t.clone()
    u.view(-1)[n // 2] += 1
    assert tensors.fingerprint(torch, u) != whole


@pytest.mark.parametrize("n", [1, 5, 7, 8, 100])
def test_rms_chunked_equals_whole(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    t = torch.randn(n, generator=torch.Generator().manual_seed(n)).to(torch.bfloat16)
    whole = float(t.double().pow(2).mean().sqrt())
    monkeypatch.setattr(worker_calls, "_RMS_CHUNK", 3)
    assert worker_calls._rms(torch, t) == pytest.approx(whole, rel=1e-12)


def test_rms_of_nothing_is_nan() -> None:
    assert worker_calls._rms(torch, torch.empty(0)) != worker_calls._rms(torch, torch.empty(0))
