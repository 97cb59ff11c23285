"""A record's samples as an NVBench JSON result (JSON file version 1.0.0) with its sample-times files.

Method: NVBench's ``--json`` output as its ``json_printer`` writes it:
``meta`` (``argv`` and ``version.json`` = 1.0.0), ``devices`` and
``benchmarks``, each with ``states`` and per state ``summaries`` of
``{tag, name, hint, description, hide, data: [{name, type, value}]}``, every
number written as a string. One benchmark per (row, arm), no axes, one state
(``Device=0``) holding every sample of that row and arm, rounds in order;
its summaries are NVBench's cold GPU-time statistics recomputed from those
samples as NVBench computes them (mean; unbiased standard deviation and its
ratio to the mean; quartiles by rank ``round(p * (n - 1))`` of the sorted
samples; IQR and its ratio to the median), and the model's item rate
(tokens per step / mean step time, NVBench's ``nv/cold/bw/item_rate``).
The SM clock (``nv/cold/sm_clock_rate/mean``, which
``nvbench-compare-robust`` needs to confirm a clear gap in cycles) is the
mean of the one NVML reading taken per round and arm, in Hz, written only
when every round has one.

The samples themselves go where NVBench puts them: a summary tagged
``nv/json/bin:nv/cold/sample_times`` names ``<json name>-bin/<index>.bin``
(relative to the JSON's folder) and its ``size``; the file holds the sample
times in seconds as little-endian float32. This is what
``cuda.bench.results.BenchmarkResult`` and ``nvbench-compare-robust`` read.

Names: with both arms a benchmark is ``<row>/<arm>``; with one arm it is
``<row>``, so ``nvbench-compare-robust base.json cand.json`` pairs the two
files' benchmarks by name. ``meta.kgate`` holds what NVBench's format has no
place for: campaign, gpu, candidate, stage, ``kgate_export``, the format,
and per benchmark its row, arm, commit, the record's own ratio, interval and
class, and how many samples each round holds (the round boundaries of the
pooled samples). Limits: NVBench's other statistics (CPU times, batch
times, walltime, per-sample clock frequencies) are not written: kgate does
not measure them per sample; float32 keeps about 7 significant digits of each time; NVBench's
classes (``nvbench-compare-robust``) treat the pooled samples as
independent, not as kgate's paired rounds.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

from kgate.export.samples import ARMS, Samples, Series

#: the NVBench JSON file version this module writes (NVBench's ``json_printer::get_json_file_version``)
NVBENCH_JSON_VERSION = (1, 0, 0)
FORMAT = "nvbench-json/{}.{}.{}".format(*NVBENCH_JSON_VERSION)
SAMPLE_TIMES_TAG = "nv/json/bin:nv/cold/sample_times"
HIDDEN = "Hidden by default."


def document(samples: Samples, json_name: str, *,
             arms: Sequence[str] = ARMS) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
    """The NVBench JSON root for ``samples`` and its sample-times files as (path relative to the JSON, bytes).

    ``json_name`` is the JSON file's own name (its sample-times folder is ``<json_name>-bin``).
    """
    single = len(arms) == 1
    chosen = [s for s in samples.series if s.arm in arms]
    benchmarks, files, described = [], [], {}
    for index, series in enumerate(chosen):
        name = series.row if single else f"{series.row}/{series.arm}"
        values = series.values_s
        rel = f"{json_name}-bin/{index}.bin"
        files.append((rel, struct.pack(f"<{len(values)}f", *values)))
        per_round = len(series.runs[0].values_s) if series.runs else 0
        state = {"name": "Device=0", "min_samples": per_round, "device": 0, "type_config_index": 0,
                 "axis_values": [], "summaries": _summaries(series, values, rel, samples.sample), "is_skipped": False}
        benchmarks.append({"name": name, "index": index, "min_samples": per_round, "devices": [0], "axes": [],
                           "states": [state]})
        described[name] = {"row": series.row, "arm": series.arm, "commit": series.commit, **series.facts,
                           "samples_per_round": [len(r.values_s) for r in series.runs]}
    version = dict(zip(("major", "minor", "patch"), NVBENCH_JSON_VERSION))
    meta = {
        "argv": list(samples.command),
        "version": {"json": {**version, "string": "{}.{}.{}".format(*NVBENCH_JSON_VERSION)}},
        "kgate": {**samples.common(), "export_format": FORMAT, "record": samples.record_path.as_posix(),
                  "arms": list(arms), "benchmarks": described},
    }
    return {"meta": meta, "devices": [_device(samples)], "benchmarks": benchmarks}, files


def _device(samples: Samples) -> dict[str, Any]:
    """NVBench's device entry from what the record says of the GPU (keys it does not know are left out)."""
    d = samples.device
    out: dict[str, Any] = {"id": 0, "name": str(d.get("name") or d.get("class") or samples.gpu)}
    cap = d.get("capability")
    if isinstance(cap, str) and cap.replace(".", "").isdigit() and "." in cap:
        major, minor = cap.split(".", 1)
        out["sm_version"] = int(major) * 100 + int(minor) * 10
    for ours, theirs in (("sm_count", "number_of_sms"), ("max_threads_per_sm", "max_threads_per_sm"),
                         ("regs_per_sm", "registers_per_sm"), ("total_bytes", "global_memory_size"),
                         ("l2_bytes", "l2_cache_size"), ("smem_per_sm", "shared_memory_per_sm")):
        if isinstance(d.get(ours), int) and not isinstance(d.get(ours), bool):
            out[theirs] = d[ours]
    return out


def _rank(q: float, n: int) -> int:
    """NVBench's percentile rank: round(q * (n - 1)), halves away from zero."""
    return int(math.floor(q * (n - 1) + 0.5))


def _summaries(series: Series, values: tuple[float, ...], rel: str, sample: str) -> list[dict[str, Any]]:
    n = len(values)
    mean = math.fsum(values) / n
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.inf
    ordered = sorted(values)
    q1, median, q3 = (ordered[_rank(q, n)] for q in (0.25, 0.5, 0.75))
    what = f"of kgate's samples, one sample = {sample}"
    out = [
        _summary("nv/cold/sample_size", "Samples", "sample_size", f"Number {what}", None, int64=n),
        _summary("nv/cold/time/gpu/min", "Min GPU Time", "duration", f"Minimum {what}", HIDDEN, float64=ordered[0]),
        _summary("nv/cold/time/gpu/max", "Max GPU Time", "duration", f"Maximum {what}", HIDDEN, float64=ordered[-1]),
        _summary("nv/cold/time/gpu/mean", "GPU Time", "duration", f"Mean {what}", None, float64=mean),
        _summary("nv/cold/time/gpu/stdev/absolute", "Noise", "duration", f"Standard deviation {what}", HIDDEN,
                 float64=stdev),
        _summary("nv/cold/time/gpu/stdev/relative", "Noise", "percentage", f"Relative standard deviation {what}", None,
                 float64=stdev / mean if math.isfinite(stdev) and mean > 0 else math.inf),
        _summary("nv/cold/time/gpu/q1", "Q1 GPU Time", "duration", f"First quartile {what}", HIDDEN, float64=q1),
        _summary("nv/cold/time/gpu/median", "Median GPU Time", "duration", f"Median {what}", HIDDEN, float64=median),
        _summary("nv/cold/time/gpu/q3", "Q3 GPU Time", "duration", f"Third quartile {what}", HIDDEN, float64=q3),
        _summary("nv/cold/time/gpu/iqr/absolute", "IQR", "duration", f"Interquartile range {what}", HIDDEN,
                 float64=q3 - q1),
    ]
    if median > 0:
        out.append(_summary("nv/cold/time/gpu/iqr/relative", "Rel IQR", "percentage",
                            f"Relative interquartile range {what}", HIDDEN, float64=(q3 - q1) / median))
    clocks = [run.metadata.get("sm_clock_mhz") for run in series.runs]
    if clocks and all(isinstance(c, float) and c > 0 for c in clocks):
        out.append(_summary("nv/cold/sm_clock_rate/mean", "Clock Rate", "frequency",
                            "Mean SM clock rate (Hz) over the rounds: one NVML reading per round and arm, not per "
                            "sample", HIDDEN, float64=math.fsum(clocks) / len(clocks) * 1e6))
    if series.items_per_sample and mean > 0:
        out.append(_summary("nv/cold/bw/item_rate", "Elem/s", "item_rate",
                            f"Tokens per second: {series.items_per_sample} tokens per sample / the mean {what}", None,
                            float64=series.items_per_sample / mean))
    out.append({"tag": SAMPLE_TIMES_TAG, "name": "Sample Times File", "description":
                "Binary file containing sample times as little-endian float32.", "hint": "file/sample_times",
                "hide": "Not needed in table.", "data": [{"name": "filename", "type": "string", "value": rel},
                                                         {"name": "size", "type": "int64", "value": str(n)}]})
    return out


def _summary(tag: str, name: str, hint: str, description: str, hide: str | None, *,
             int64: int | None = None, float64: float | None = None) -> dict[str, Any]:
    """One summary as NVBench writes it: its value a string (NVBench writes int64 and float64 as strings)."""
    summ: dict[str, Any] = {"tag": tag, "name": name, "description": description, "hint": hint}
    if hide:
        summ["hide"] = hide
    if int64 is not None:
        summ["data"] = [{"name": "value", "type": "int64", "value": str(int64)}]
    else:
        summ["data"] = [{"name": "value", "type": "float64", "value": repr(float(float64))}]
    return summ
