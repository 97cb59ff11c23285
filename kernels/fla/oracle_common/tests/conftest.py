"""Shared fixtures of kgate's oracle suites (copied into the target as ``tests/conftest.py``).

NaN-poisoned allocations
    Every test runs with ``torch.empty``, ``torch.empty_like``,
    ``torch.empty_strided``, ``Tensor.new_empty`` and
    ``Tensor.new_empty_strided`` patched: when the *direct caller* is code in a
    module whose ``__name__`` starts with ``fla`` (the package under test, or a
    candidate placed inside it), a floating or complex result is filled with
    NaN. A kernel that reads memory it did not write then produces NaN, which
    the oracle's NaN check rejects. Allocations made by tests, by PyTorch, by
    Triton, or with ``requires_grad=True`` are left alone. Unlike upstream
    fla's conftest, the decision looks at the caller's module name only (no
    path substrings), so it is cheap and has no ``test_``/``inflate`` quirks.

IEEE fp32 dots
    ``TRITON_F32_DEFAULT=ieee`` is set for every test (as fla's own RWKV6
    test does), so fp32 ``tl.dot`` does not use TF32 on a GPU and the fp32
    tolerances of the oracle hold there too. The previous value is restored.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

POISON_PREFIX = "fla"


def _called_from_target(depth: int = 2) -> bool:
    # depth 2: the frame that called the patched allocator
    name = sys._getframe(depth).f_globals.get("__name__", "")
    return name == POISON_PREFIX or name.startswith(POISON_PREFIX + ".")


def _poison(result: torch.Tensor) -> torch.Tensor:
    if result.is_floating_point():
        result.fill_(float("nan"))
    elif result.is_complex():
        result.fill_(complex(float("nan"), float("nan")))
    return result


def _poisoning(original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    def allocate(*args: Any, **kwargs: Any) -> torch.Tensor:
        result = original(*args, **kwargs)
        if kwargs.get("requires_grad", False) or not _called_from_target():
            return result
        return _poison(result)

    allocate.__name__ = getattr(original, "__name__", "allocate")
    allocate.__wrapped__ = original
    return allocate


POISONED_ALLOCATORS: tuple[tuple[Any, str], ...] = (
    (torch, "empty"),
    (torch, "empty_like"),
    (torch, "empty_strided"),
    (torch.Tensor, "new_empty"),
    (torch.Tensor, "new_empty_strided"),
)


@pytest.fixture(autouse=True)
def poison_uninitialised_allocations(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fill float tensors that fla code allocates uninitialised with NaN."""
    for owner, name in POISONED_ALLOCATORS:
        monkeypatch.setattr(owner, name, _poisoning(getattr(owner, name)))
    yield


@pytest.fixture(autouse=True)
def ieee_fp32_dots(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep fp32 tl.dot in IEEE fp32 (no TF32) for the duration of a test."""
    monkeypatch.setenv("TRITON_F32_DEFAULT", "ieee")
    yield
