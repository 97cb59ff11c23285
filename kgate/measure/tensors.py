"""A row's tensors: content hashes, the leaves that get gradients, the row's seed (worker and training harness).

Method: a tensor's hash is sha256 over ``dtype|shape|`` and its raw bytes (contiguous, on the host);
a nested structure of tensors is hashed leaf by leaf under a path name (``args[0]``, ``kwargs.x``;
anything that is not a tensor by its ``repr``); :func:`combined` hashes the sorted name -> hash map.
Two arms drew the same inputs exactly when their hashes agree. torch is passed in, never imported
here, so the coordinator can import this module without creating a CUDA context.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kgate.device import usable_cores

# bytes of a tensor copied to the host and hashed at a time (256 MiB)
_SHA_CHUNK = 1 << 28


def tensor_sha(torch: Any, t: Any) -> str:
    """sha256 over ``dtype|shape|`` and the tensor's raw bytes in order, streamed: a chunk of ``_SHA_CHUNK`` bytes
    at a time is copied to the host (a view, no copy, for a host tensor) and fed to the hash through the buffer
    protocol. The digest equals one over all the bytes at once; the host holds one chunk, not the whole tensor
    twice (an 8 GiB device tensor once took a host copy and a ``bytes`` copy of it per hash)."""
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    data = t.detach().contiguous().reshape(-1)
    if data.numel():
        raw = data.view(torch.uint8)
        for start in range(0, raw.numel(), _SHA_CHUNK):
            h.update(memoryview(raw[start:start + _SHA_CHUNK].cpu().numpy()))
    return h.hexdigest()


def leaves(torch: Any, obj: Any, prefix: str) -> Any:
    """(path name, leaf) of a nested structure of lists, tuples and dicts (``args[0]``, ``kwargs.x``)."""
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Tensor):
        for i, x in enumerate(obj):
            yield from leaves(torch, x, f"{prefix}[{i}]")
    elif isinstance(obj, dict):
        for k in sorted(obj):
            yield from leaves(torch, obj[k], f"{prefix}.{k}")
    else:
        yield prefix, obj


def hash_tree(torch: Any, obj: Any, prefix: str, out: dict[str, str]) -> None:
    named = list(leaves(torch, obj, prefix))
    out.update(zip((n for n, _ in named), hash_leaves(torch, [leaf for _, leaf in named], threads=1), strict=True))


#: the most threads one worker hashes its inputs on
HASH_THREADS_MAX = 8


def hash_threads() -> int:
    """Threads a worker hashes its inputs on: half the cores it may run on (the other arm's worker hashes at the
    same time), between 1 and :data:`HASH_THREADS_MAX`."""
    return max(1, min(HASH_THREADS_MAX, usable_cores() // 2))


def hash_leaves(torch: Any, items: list[Any], threads: int) -> list[str]:
    """Each leaf's hash, in order: :func:`tensor_sha` for a tensor, sha256 of its ``repr`` otherwise. With
    ``threads`` > 1 the tensors are hashed that many at a time, largest first, on a thread pool: hashlib releases
    the GIL while it hashes a chunk, so one process hashes several tensors on several cores. The digests are
    the same as one at a time (each tensor's stream is still hashed in order by one thread); the host then
    holds up to ``threads`` chunks of ``_SHA_CHUNK`` bytes at once."""
    def one(leaf: Any) -> str:
        return (tensor_sha(torch, leaf) if isinstance(leaf, torch.Tensor)
                else hashlib.sha256(repr(leaf).encode()).hexdigest())

    if threads <= 1 or len(items) <= 1:
        return [one(leaf) for leaf in items]
    order = sorted(range(len(items)), key=lambda i: -(items[i].numel() * items[i].element_size()
                                                       if isinstance(items[i], torch.Tensor) else 0))
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        futures = {i: pool.submit(one, items[i]) for i in order}
        return [futures[i].result() for i in range(len(items))]


def combined(hashes: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def storage_bytes(torch: Any, tensors: Any) -> int:
    """Bytes the tensors hold: each distinct storage of a strided tensor once (views share theirs), any other
    layout (sparse, nested) as its dense size (element size x numel), an upper bound."""
    seen: dict[int, int] = {}
    other = 0
    for t in tensors:
        if t.layout == torch.strided:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        else:
            other += t.element_size() * t.numel()
    return sum(seen.values()) + other


def tensors_of(torch: Any, obj: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    """Every tensor of a nested structure under its path name (``args[0]``, ``kwargs.x``)."""
    out.update((name, leaf) for name, leaf in leaves(torch, obj, prefix) if isinstance(leaf, torch.Tensor))
    return out


# words per int64 chunk of a fingerprint (512 MiB); even, so every chunk starts at an even position and the odd
# positions of a chunk are odd positions of the tensor
_FINGERPRINT_CHUNK = 1 << 26


def fingerprint(torch: Any, t: Any) -> list[int]:
    """A cheap content fingerprint computed on the tensor's device: the int64 sums of its 32-bit words (or bytes)
    at all and at odd positions. Any write that changes a value changes it except by a collision of both sums;
    used to notice an op that writes into its inputs between calls, where a sha256 of every input per round
    would copy gigabytes to the host."""
    flat = t.detach().contiguous().reshape(-1)
    if not flat.numel():
        return [0, 0]
    raw = flat.view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
    # int64 sums a chunk at a time (integer sums are exact and order-free, so chunking changes no value): a
    # whole-tensor int64 copy of 8 GiB of logits would need 16 GiB beside them
    total = odd = 0
    step = _FINGERPRINT_CHUNK
    for start in range(0, words.numel(), step):
        w = words[start:start + step].to(torch.int64)
        total += int(w.sum())
        odd += int(w[1::2].sum())
    return [total, odd]


def leaves_of(torch: Any, obj: Any) -> list[Any]:
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.requires_grad and obj.is_leaf else []
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in leaves_of(torch, x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in leaves_of(torch, x)]
    return []


def row_seed(seed: int, name: str) -> int:
    """Each row's own seed: the campaign seed plus the CRC32 of the row name."""
    return (seed + zlib.crc32(name.encode())) % 2**63
