"""The timed code is the tested code: fresh input values in both arms, and the candidate's outputs and gradients
on them against BENCH_BASE's, in the timing processes themselves (bench after every round, profile_candidate
after each row's profile).

Method: ``fresh_inputs`` asks both arms for new values of a row's floating-point inputs, written into the row's
own tensors (``Calls.refresh``: the row's seed moved by a round index; integer and bool tensors keep their
values), and compares their fingerprints across arms. ``timed_outputs`` then makes one more untimed call per row
in each arm and samples every output and gradient at positions drawn from a seed both arms share
(``Calls.sample_outputs``); ``outputs_difference`` is the RMS of the differences at those positions over
BENCH_BASE's RMS over the whole tensor, for the worst tensor. Limits: a sample of positions (1024 per tensor)
can miss a difference confined to a few elements, which the frozen tests are there to catch; a candidate that
computes right on every input it has seen before and wrong only on values it has never met twice is caught only
when a round's values are new to it (they are, every round).
"""

from __future__ import annotations

import math
import zlib
from typing import Any

from kgate.measure import coordinator as measure
from kgate.measure.arms import Arm

#: the round index profile_candidate refreshes with: values no bench round uses (bench counts rounds from 0)
PROFILE_ROUND = 1_000_000


def fresh_inputs(index: int, arms: dict[str, Arm], rows: list[str]) -> None:
    """Untimed: new input values for ``rows`` in both arms, written into the same tensors (``Calls.refresh``:
    the row's seed moved by ``index``), equal across arms by their fingerprints."""
    names = list(dict.fromkeys(rows))
    got = {a: arms[a].request("refresh", rows=names, round=index) for a in ("base", "cand")}
    for name in names:
        measure.compare_hashes("fresh input", name, {a: {k: str(v) for k, v in got[a][name].items()} for a in got})


def timed_outputs(index: int, arms: dict[str, Arm], items: list[tuple[str, Any, str, str]]) -> dict[str, Any]:
    """Untimed: one more call per item (key, row, mode, role) in each arm on the current inputs; the candidate's
    outputs and gradients at sampled positions against BENCH_BASE's (``outputs_difference``), by key."""
    out = {}
    for key, row, mode, _role in items:
        seed = row_seed_for(index, key)
        got = {a: arms[a].request("sample_outputs", row=row.name, mode=mode, seed=seed) for a in ("base", "cand")}
        out[key] = outputs_difference(got["base"], got["cand"])
    return out


def row_seed_for(index: int, key: str) -> int:
    """The positions sampled after round ``index`` of row ``key`` (the same in both arms, new every round)."""
    return (zlib.crc32(key.encode()) + 104729 * (index + 1)) % 2**31


def outputs_difference(base: dict[str, Any], cand: dict[str, Any]) -> dict[str, Any]:
    """The candidate's sampled outputs and gradients against BENCH_BASE's (``Calls.sample_outputs`` of one row):
    per tensor, the RMS of the differences at the sampled positions over BENCH_BASE's RMS over the whole tensor;
    the worst tensor, and tensors one arm has and the other has not."""
    worst, name = 0.0, None
    missing = sorted(set(base) ^ set(cand))
    for k in sorted(set(base) & set(cand)):
        b, c = base[k]["values"], cand[k]["values"]
        if len(b) != len(c):
            missing.append(k)
            continue
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(b, c)) / max(len(b), 1))
        rel = diff / max(float(base[k]["rms"]), 1e-30) if diff else 0.0
        if not math.isfinite(rel):
            rel = math.inf
        if rel > worst or name is None:
            worst, name = rel, k
    return {"rel": worst, "tensor": name, "missing": missing}
