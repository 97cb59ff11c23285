"""Oracle gate for ``fla.ops.utils.cumsum.chunk_local_cumsum`` against float64 PyTorch.

``chunk_local_cumsum(g, chunk_size, reverse, scale, cu_seqlens, output_dtype)``
sums ``g`` along T inside each chunk of ``chunk_size`` steps; chunks restart at
every sequence start of a packed (varlen) input, and a sequence's last chunk
may be partial. ``g`` is ``[B, T, H]`` (scalar kernel) or ``[B, T, H, S]``
(vector kernel). ``reverse`` sums from the chunk's end, ``scale`` multiplies
the sums, and the result has ``output_dtype`` (None keeps g's dtype).

The reference below computes the same in float64 from the same inputs.
Criterion, as fla's ``assert_close``: pass if max|ref - tri| <= 1e-6, else no
NaN and rms(ref - tri) / rms(ref) < ratio, with the ratio set by the OUTPUT
dtype (``TOLERANCE``). Ids start with the size tag ``tiny`` (CPU interpreter,
``-k tiny``) or ``full`` (GPU scale). Seeds are fixed per case.
"""

from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch

from fla.ops.utils.cumsum import chunk_local_cumsum
from fla.utils import device

ABS_PASS = 1e-6
# Worst ratio measured on the tiny cases (CPU interpreter, triton 3.9.0,
# fla-core 0.6.0): fp32 output 1.4e-7 (sums of <= 64 terms); fp16 output
# 2.0e-4 (one rounding to fp16, unit roundoff 4.9e-4); bf16 output (fixture)
# 1.7e-3 (unit roundoff 2.0e-3). Each bound leaves 6-10x headroom.
TOLERANCE: dict[torch.dtype, float] = {
    torch.float32: 1e-6,
    torch.float16: 2e-3,
    torch.bfloat16: 1e-2,
}
DTYPE_TAGS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclasses.dataclass(frozen=True)
class Case:
    """One oracle case; ``S=None`` selects the scalar ``[B, T, H]`` form."""

    size: str
    T: int
    H: int
    dtype: torch.dtype
    S: int | None = None
    B: int = 1
    chunk_size: int = 64
    cu_seqlens: tuple[int, ...] | None = None
    reverse: bool = False
    scale: float | None = None
    output_dtype: torch.dtype | None = torch.float32

    @property
    def id(self) -> str:
        layout = f"dense-B{self.B}" if self.cu_seqlens is None else "varlen" + "_".join(map(str, self.cu_seqlens))
        shape = "scalar" if self.S is None else f"S{self.S}"
        out = "same" if self.output_dtype is None else DTYPE_TAGS[self.output_dtype]
        return (f"{self.size}-{layout}-T{self.T}-H{self.H}-{shape}-{DTYPE_TAGS[self.dtype]}-out_{out}"
                f"-chunk{self.chunk_size}{'-reverse' if self.reverse else ''}"
                f"{'' if self.scale is None else f'-scale{self.scale:g}'}")

    @property
    def result_dtype(self) -> torch.dtype:
        return self.dtype if self.output_dtype is None else self.output_dtype


def varlen(size: str, cu_seqlens: tuple[int, ...], **kwargs: object) -> Case:
    return Case(size, T=cu_seqlens[-1], cu_seqlens=cu_seqlens, **kwargs)


CASES: list[Case] = [
    # scalar, dense, partial last chunk
    Case("tiny", B=2, T=100, H=2, dtype=torch.float32),
    # vector, dense, partial chunk, chunk 16, reversed and scaled
    Case("tiny", B=2, T=50, H=2, S=40, dtype=torch.float32, chunk_size=16, reverse=True, scale=0.5),
    # vector fp16 in, fp16 out
    Case("tiny", T=64, H=2, S=32, dtype=torch.float16, output_dtype=None),
    # packed unequal sequences: scalar reversed, vector scaled
    varlen("tiny", (0, 17, 81, 128), H=2, dtype=torch.float32, reverse=True),
    varlen("tiny", (0, 9, 33, 70), H=1, S=24, dtype=torch.float16, chunk_size=32, scale=2.0),
    Case("full", B=8, T=4096, H=16, dtype=torch.float32),
    Case("full", B=4, T=4099, H=16, S=128, dtype=torch.float32, reverse=True, scale=0.25),
    Case("full", B=2, T=2048, H=8, S=256, dtype=torch.float16, chunk_size=32, output_dtype=None),
    varlen("full", (0, 15, 100, 300, 1200, 2000, 4096), H=16, S=128, dtype=torch.float32),
]


def reference_local_cumsum(g: torch.Tensor, case: Case) -> torch.Tensor:
    """float64 chunk-local cumulative sum along T, chunks restarting at each sequence start."""
    g = g.double()
    out = torch.zeros_like(g)
    if case.cu_seqlens is None:
        spans = [(b, 0, g.shape[1]) for b in range(g.shape[0])]
    else:
        spans = [(0, bos, eos) for bos, eos in zip(case.cu_seqlens[:-1], case.cu_seqlens[1:])]
    for b, bos, eos in spans:
        for start in range(bos, eos, case.chunk_size):
            end = min(start + case.chunk_size, eos)
            chunk = g[b, start:end]
            sums = chunk.flip(0).cumsum(0).flip(0) if case.reverse else chunk.cumsum(0)
            out[b, start:end] = sums if case.scale is None else sums * case.scale
    return out


def make_input(case: Case) -> torch.Tensor:
    torch.manual_seed(zlib.crc32(case.id.encode()))
    shape = (case.B, case.T, case.H) if case.S is None else (case.B, case.T, case.H, case.S)
    return torch.randn(shape, device=device).to(case.dtype)


def compare(ref: torch.Tensor, tri: torch.Tensor, ratio: float) -> str | None:
    """Apply the oracle criterion; return a failure line or None."""
    if ref.shape != tri.shape:
        return f"shape {tuple(tri.shape)} != reference {tuple(ref.shape)}"
    ref, tri = ref.double(), tri.double()
    max_abs = (ref - tri).abs().max().item()
    if max_abs <= ABS_PASS:
        return None
    if torch.isnan(tri).any():
        return f"NaN in the kernel output ({int(torch.isnan(tri).sum())} of {tri.numel()})"
    rel = (ref - tri).square().mean().sqrt().item() / (ref.square().mean().sqrt().item() + 1e-8)
    if not rel < ratio:
        return f"rms ratio {rel:.3e} >= {ratio:.1e} (max abs {max_abs:.3e})"
    return None


def check_chunk_local_cumsum(case: Case) -> None:
    """Run one case and assert dtype, shape and values."""
    g = make_input(case)
    cu_seqlens = None
    if case.cu_seqlens is not None:
        cu_seqlens = torch.tensor(case.cu_seqlens, dtype=torch.int32, device=device)
    tri = chunk_local_cumsum(g, chunk_size=case.chunk_size, reverse=case.reverse, scale=case.scale,
                             cu_seqlens=cu_seqlens, output_dtype=case.output_dtype)
    assert tri.dtype == case.result_dtype, f"{case.id}: output dtype {tri.dtype}, expected {case.result_dtype}"
    failure = compare(reference_local_cumsum(g, case), tri, TOLERANCE[case.result_dtype])
    assert failure is None, f"{case.id}: {failure}"


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in CASES])
def test_chunk_local_cumsum_oracle(case: Case) -> None:
    check_chunk_local_cumsum(case)
