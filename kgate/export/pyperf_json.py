"""A record's samples as a pyperf JSON file (pyperf's format version 1.0): ``pyperf show``, ``compare_to``, ``hist``.

Method: one pyperf ``Benchmark`` per (row, arm) and, in it, one ``Run`` per
round (bench) or block (model) whose ``values`` are that round's samples in
seconds (``unit: second``), in the order measured; no warm-up values (the
stage's warm-up calls are not in the checkpoint). The file is written as
pyperf's own ``BenchmarkSuite.dump`` lays it out: ``{"version": "1.0",
"metadata": <shared by every benchmark>, "benchmarks": [{"metadata": <shared
by its runs>, "runs": [{"values": [...], "metadata": <this run's>}]}]}``, so
``pyperf.BenchmarkSuite.load`` gives back every value and every key.

Metadata: the suite's names the campaign, gpu, candidate, stage, epoch,
device, torch and triton, ``kgate_export`` (``kgate.export/1``) and
``export_format`` (this file's format and version); a benchmark's names its
row, arm, commit (BENCH_BASE for ``base``, the candidate commit for
``cand``), the row's mode and class and the record's own ratio, interval and
class for the row (the same on both arms: they describe the pair); a run's
its round or block index, the arm order of that round (``AB``/``BA``), the
clocks, power, temperature and host load read with it (``load_avg_1min``, a
key pyperf knows) and, for the model, the block's tokens/s.

Names: with both arms in one file a benchmark is ``<row>/<arm>``; with one
arm (``arms=("base",)``) it is ``<row>``, so that ``python -m pyperf
compare_to base.json cand.json`` pairs the two files' benchmarks by name.
Limits: pyperf's statistics treat a benchmark's values as independent; the
rounds' pairing and order (what kgate's interval is built on) survive only
as metadata, so pyperf's "significant" is not kgate's class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kgate.export.samples import ARMS, ExportError, MetaValue, Samples

#: the pyperf JSON file format version this module writes (pyperf's ``_JSON_VERSION``)
PYPERF_JSON_VERSION = "1.0"
FORMAT = f"pyperf-json/{PYPERF_JSON_VERSION}"


def document(samples: Samples, *, arms: Sequence[str] = ARMS) -> dict[str, Any]:
    """The pyperf JSON document of ``samples`` for ``arms`` (see the module docstring)."""
    single = len(arms) == 1
    suite: dict[str, MetaValue] = {**samples.common(), "export_format": FORMAT}
    if single:
        suite["arm"] = arms[0]
    benchmarks = []
    for series in samples.series:
        if series.arm not in arms:
            continue
        if any(not v > 0 for v in series.values_s):
            raise ExportError(f"{samples.record_path}: {series.row} / {series.arm} has a sample <= 0 s, which pyperf "
                              "cannot hold (its values must be > 0)")
        meta: dict[str, MetaValue] = {"name": series.row if single else f"{series.row}/{series.arm}",
                                      "unit": "second", "row": series.row, "arm": series.arm, **series.facts}
        if series.commit:
            meta["commit"] = series.commit
        if series.items_per_sample:
            meta["items_per_sample"] = series.items_per_sample
        benchmarks.append({
            "metadata": _clean(meta),
            "runs": [{"values": list(run.values_s), "metadata": _clean(run.metadata)} for run in series.runs],
        })
    return {"version": PYPERF_JSON_VERSION, "metadata": _clean(suite), "benchmarks": benchmarks}


def _clean(meta: dict[str, MetaValue]) -> dict[str, MetaValue]:
    """pyperf's rule for metadata: a str value is stripped, never empty and has no newline."""
    out: dict[str, MetaValue] = {}
    for key, value in meta.items():
        if isinstance(value, str):
            value = " ".join(value.split())
            if not value:
                continue
        out[key] = value
    return out
