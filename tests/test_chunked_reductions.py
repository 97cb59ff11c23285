"""The worker's whole-tensor reductions run a chunk at a time (a float64 or int64 copy of a 32768 x 128256 output
would not fit beside it on the GPU, and a sha256 took two host copies of it): chunking must not change a value,
whatever the chunk boundaries."""

from __future__ import annotations

import hashlib

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


def _sha_whole(t: torch.Tensor) -> str:
    """The digest as it was computed before streaming: one bytes copy of the whole tensor."""
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    data = t.detach().contiguous().reshape(-1)
    if data.numel():
        h.update(data.cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _cases() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    base = torch.randn(5, 13, generator=gen)
    return [base, base.to(torch.bfloat16), base.t(), (base * 50).to(torch.int64), base > 0, torch.tensor(3.5),
            torch.empty(0, 4), base.to(torch.bfloat16)[:, 1::3]]


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 28])
def test_tensor_sha_streamed_equals_whole(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Chunks of 1, 3 and 7 bytes cut inside elements of every width; non-contiguous views, 0-d, empty, bool."""
    monkeypatch.setattr(tensors, "_SHA_CHUNK", chunk)
    for t in _cases():
        assert tensors.tensor_sha(torch, t) == _sha_whole(t), (t.dtype, tuple(t.shape))


def test_tensor_sha_tells_values_dtypes_and_shapes_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensors, "_SHA_CHUNK", 5)
    t = torch.arange(12, dtype=torch.float32)
    u = t.clone()
    u[11] = 12.0
    digests = {tensors.tensor_sha(torch, x) for x in (t, u, t.view(3, 4), t.view(torch.int32))}
    assert len(digests) == 4


@pytest.mark.parametrize("threads", [2, 3, 16])
def test_hashing_on_threads_gives_each_leaf_its_own_digest_in_order(monkeypatch: pytest.MonkeyPatch,
                                                                     threads: int) -> None:
    """The leaves of a row (tensors of every kind, a Python number, None) hashed on a thread pool, largest first:
    the same digests, in the leaves' order, as one at a time and as the whole-copy hash."""
    monkeypatch.setattr(tensors, "_SHA_CHUNK", 7)
    big = torch.randn(300, 40, generator=torch.Generator().manual_seed(3))
    items = [*_cases(), 2.5, None, big, big[:, ::2]]
    got = tensors.hash_leaves(torch, items, threads)
    assert got == tensors.hash_leaves(torch, items, 1)
    assert got[: len(_cases())] == [_sha_whole(t) for t in _cases()]
    assert got[len(_cases())] == hashlib.sha256(b"2.5").hexdigest() and got[-2] == _sha_whole(big)
    assert 1 <= tensors.hash_threads() <= tensors.HASH_THREADS_MAX
