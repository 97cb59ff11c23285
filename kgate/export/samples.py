"""The samples of a bench or model record, arm by arm, as the exporters write them.

Method: a bench record (``kgate.stage/1``, stage ``bench``) keeps its summary
only; every sample is in the round checkpoint beside it (``rounds.jsonl``,
``kgate.paths.CHECKPOINTS``): a header line, then one line per finished round
holding, per row key and arm, ``samples_ms`` (one timed call each, in the
order taken). ``load`` reads the first ``data.rounds`` rounds (the rounds the
record's statistics were computed from) and keeps, per (row, arm), one
``Run`` per round with that round's samples converted to seconds. A model
record holds its blocks itself (``data.workloads[].step_ms``,
``block_tokens_per_s`` and ``telemetry``): one ``Run`` per block with the
block's training-step times in seconds, its tokens/s and the clocks read
after it.

The checkpoint is read, never rewritten (unlike
``kgate.measure.checkpoints.load_checkpoint``, which sets a stale file aside).
Limits: a checkpoint whose header names another candidate or BENCH_BASE
commit than the record, fewer rounds than the record counts, or a row of the
record missing from a round is refused, with one line naming the file; the
samples are what the stage measured (a CPU record's are interpreter times,
which ``Samples.timings_meaningful`` says).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.errors import KgateError
from kgate.measure import checkpoints
from kgate.records import read_record

#: the version of what kgate adds to an exported file (its metadata keys and their meaning)
EXPORT_SCHEMA = "kgate.export/1"
ARMS = ("base", "cand")
#: the bench checkpoint's header schema, as written before and after the stages' checkpoint names were prefixed
BENCH_ROUNDS_SCHEMAS = ("kgate.bench-rounds/1", "kgate.stages.bench-rounds/1")
MetaValue = str | int | float


class ExportError(KgateError):
    """A record cannot be exported: not a bench/model record, or its samples are missing or inconsistent."""


@dataclass(frozen=True)
class Run:
    """One round (bench) or block (model) of one arm: its samples in seconds and what was recorded with them."""

    index: int
    values_s: tuple[float, ...]
    metadata: dict[str, MetaValue] = field(default_factory=dict)


@dataclass(frozen=True)
class Series:
    """Every run of one row (bench) or workload (model) on one arm, in the order measured."""

    row: str
    arm: str
    commit: str | None
    runs: tuple[Run, ...]
    # facts of the row from the record (mode, class, the record's ratio and interval ...)
    facts: dict[str, MetaValue] = field(default_factory=dict)
    # work units per sample (tokens per training step for the model; None for bench)
    items_per_sample: int | None = None

    @property
    def values_s(self) -> tuple[float, ...]:
        return tuple(v for run in self.runs for v in run.values_s)


@dataclass(frozen=True)
class Samples:
    """A record's samples: one ``Series`` per (row, arm), rows in the record's order, base before cand."""

    record_path: Path
    stage: str
    campaign: str
    gpu: str
    candidate: str | None
    epoch: int | None
    sample: str  # what one sample is, in words
    timings_meaningful: bool
    device: dict[str, Any]
    command: tuple[str, ...]
    versions: dict[str, Any]
    series: tuple[Series, ...]

    @property
    def rows(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.row for s in self.series))

    def common(self) -> dict[str, MetaValue]:
        """The facts every exported benchmark shares: campaign, gpu, candidate, stage, epoch, device, versions."""
        out: dict[str, MetaValue] = {"kgate_export": EXPORT_SCHEMA, "campaign": self.campaign, "gpu": self.gpu,
                                     "stage": self.stage, "timings_meaningful": "yes" if self.timings_meaningful else "no",
                                     "sample": self.sample}
        if self.candidate:
            out["candidate"] = self.candidate
        if self.epoch is not None:
            out["epoch"] = self.epoch
        for key, name in (("name", "device_name"), ("uuid", "device_uuid"), ("capability", "device_capability"),
                          ("driver", "driver")):
            if isinstance(self.device.get(key), str) and self.device[key].strip():
                out[name] = self.device[key].strip()
        for key in ("torch", "triton"):
            if isinstance(self.versions.get(key), str) and self.versions[key].strip():
                out[key] = self.versions[key].strip()
        return out


def load(record_path: Path | str) -> Samples:
    """The samples of the bench or model record at ``record_path`` (see the module docstring).

    Raises:
        ExportError: not a bench or model record, no samples file, or samples that do not match the record.
        IncompleteData, FormatVersionError: the record itself cannot be read (``kgate.records.read_record``).
    """
    path = Path(record_path)
    record = read_record(path)
    stage = record.get("stage")
    data = record.get("data")
    if stage not in paths.CHECKPOINTS:
        raise ExportError(f"{path}: a {stage} record holds no samples; only bench and model records can be exported")
    if not isinstance(data, dict):
        raise ExportError(f"{path}: the record has no data")
    series = _bench_series(path, data) if stage == "bench" else _model_series(path, data)
    prov = record.get("provenance") or {}
    device = dict(prov.get("device") or {})
    device.update({k: v for k, v in (data.get("device") or {}).items() if k not in device})
    epoch = (record.get("epoch") or {}).get("number")
    return Samples(
        record_path=path, stage=stage, campaign=str(record.get("campaign")), gpu=str(record.get("gpu")),
        candidate=record.get("candidate"), epoch=epoch if isinstance(epoch, int) else None,
        sample=("one timed call of the row (kgate bench: " + str((data.get("timer") or {}).get("setting") or "inline")
                + " timer)") if stage == "bench" else "one training step: forward, backward and optimizer step (kgate model)",
        timings_meaningful=bool(data.get("timings_meaningful", not data.get("cpu"))),
        device=device, command=tuple(str(c) for c in prov.get("command") or ()),
        versions=dict(prov.get("versions") or {}), series=tuple(series))


# bench: rounds.jsonl


def _read_rounds(ckpt: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    if not ckpt.is_file():
        raise ExportError(f"{ckpt}: no samples file beside the bench record (the stage writes rounds.jsonl there)")
    header, rounds = checkpoints.read_lines(ckpt)
    if header is None:
        raise ExportError(f"{ckpt}: no header line (not a kgate bench checkpoint)")
    return header, rounds


def _bench_series(path: Path, data: dict[str, Any]) -> list[Series]:
    ckpt = paths.checkpoint_beside(path, "bench")
    header, rounds = _read_rounds(ckpt)
    parts = header.get("parts") or {}
    if parts.get("schema") not in BENCH_ROUNDS_SCHEMAS:
        raise ExportError(f"{ckpt}: header schema {parts.get('schema')!r}, expected one of {', '.join(BENCH_ROUNDS_SCHEMAS)}")
    for key in ("candidate_sha", "bench_base"):
        if data.get(key) and parts.get(key) != data.get(key):
            raise ExportError(f"{ckpt}: recorded for {key} {parts.get(key)}, the record {path} is of {data.get(key)}")
    wanted = data.get("rounds")
    if not isinstance(wanted, int) or wanted < 1:
        raise ExportError(f"{path}: the record counts no measured rounds (data.rounds = {wanted!r})")
    if len(rounds) < wanted:
        raise ExportError(f"{ckpt}: holds {len(rounds)} round(s), the record {path} counts {wanted}")
    rounds = sorted(rounds, key=lambda r: r.get("index", 0))[:wanted]
    if [r.get("index") for r in rounds] != list(range(wanted)):
        raise ExportError(f"{ckpt}: round indices are not 0..{wanted - 1}")
    rows = [r for r in data.get("rows") or [] if isinstance(r, dict) and r.get("key")]
    if not rows:
        raise ExportError(f"{path}: the record has no measured rows")
    commits = {"base": data.get("bench_base"), "cand": data.get("candidate_sha")}
    out = []
    for row in rows:
        key = str(row["key"])
        facts = _bench_facts(row)
        for arm in ARMS:
            runs = []
            for rnd in rounds:
                got = ((rnd.get("rows") or {}).get(key) or {}).get(arm) or {}
                values = got.get("samples_ms")
                if not isinstance(values, list) or not values:
                    raise ExportError(f"{ckpt}: round {rnd['index']} has no samples_ms of {key} / {arm}")
                runs.append(Run(index=int(rnd["index"]), values_s=tuple(float(v) / 1000.0 for v in values),
                                metadata=_round_metadata(rnd, got)))
            out.append(Series(row=key, arm=arm, commit=commits[arm], runs=tuple(runs), facts=facts))
    return out


def _bench_facts(row: dict[str, Any]) -> dict[str, MetaValue]:
    facts: dict[str, MetaValue] = {}
    for key in ("mode", "role", "kind", "path", "classification"):
        if isinstance(row.get(key), str) and row[key].strip():
            facts[key] = row[key].strip()
    if isinstance(row.get("class"), int) and not isinstance(row.get("class"), bool):
        facts["row_class"] = row["class"]
    _ratio_facts(facts, row, "speedup")
    return facts


def _ratio_facts(facts: dict[str, MetaValue], row: dict[str, Any], key: str) -> None:
    """The record's own ratio (baseline time / candidate time, or candidate/baseline tokens/s) and its interval."""
    if _number(row.get(key)):
        facts[key] = float(row[key])
    interval = row.get("interval")
    if isinstance(interval, list) and len(interval) == 2 and all(_number(x) for x in interval):
        facts[f"{key}_lower"], facts[f"{key}_upper"] = float(interval[0]), float(interval[1])
    if _number(row.get("confidence")):
        facts["confidence"] = float(row["confidence"])


def _round_metadata(rnd: dict[str, Any], arm: dict[str, Any]) -> dict[str, MetaValue]:
    meta: dict[str, MetaValue] = {"round": int(rnd["index"])}
    if isinstance(rnd.get("order"), str) and rnd["order"]:
        meta["order"] = rnd["order"]
    meta.update(_telemetry(arm.get("telemetry")))
    return meta


def _telemetry(tel: Any) -> dict[str, MetaValue]:
    """The clocks, power and temperature read with a round or block; the host's 1-minute load as pyperf names it."""
    meta: dict[str, MetaValue] = {}
    if not isinstance(tel, dict):
        return meta
    for key in ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c"):
        if _number(tel.get(key)) and tel[key] >= 0:
            meta[key] = float(tel[key])
    load = (tel.get("host") or {}).get("load_1m") if isinstance(tel.get("host"), dict) else None
    if _number(load) and load >= 0:
        meta["load_avg_1min"] = float(load)
    return meta


# model: the record's blocks


def _model_series(path: Path, data: dict[str, Any]) -> list[Series]:
    workloads = [w for w in data.get("workloads") or [] if isinstance(w, dict) and w.get("workload")]
    if not workloads or not any((w.get("block_tokens_per_s") or {}).get("base") for w in workloads):
        raise ExportError(f"{path}: the model record holds no measured blocks (data.workloads[].block_tokens_per_s)")
    commits = {"base": data.get("bench_base"), "cand": data.get("candidate_sha")}
    schedule = data.get("schedule") or {}
    out = []
    for w in workloads:
        name = str(w["workload"])
        facts: dict[str, MetaValue] = {"workload": name}
        if isinstance(w.get("classification"), str) and w["classification"]:
            facts["classification"] = w["classification"]
        _ratio_facts(facts, w, "ratio")
        tokens_per_block = w.get("tokens_per_block")
        for arm in ARMS:
            rates = (w.get("block_tokens_per_s") or {}).get(arm) or []
            steps = (w.get("step_ms") or {}).get(arm) or []
            if not rates or len(steps) % len(rates):
                raise ExportError(f"{path}: workload {name} / {arm}: {len(steps)} step times do not split into "
                                  f"{len(rates)} blocks")
            per_block = len(steps) // len(rates)
            orders = w.get("orders") or []
            telemetry = w.get("telemetry") if isinstance(w.get("telemetry"), list) else []
            runs = []
            for i, rate in enumerate(rates):
                meta: dict[str, MetaValue] = {"block": i, "tokens_per_s": float(rate)}
                if i < len(orders) and isinstance(orders[i], str):
                    meta["order"] = orders[i]
                if i < len(telemetry) and isinstance(telemetry[i], dict):
                    meta.update(_telemetry(telemetry[i].get(arm)))
                if isinstance(tokens_per_block, int) and tokens_per_block > 0:
                    meta["tokens"] = tokens_per_block
                values = tuple(float(v) / 1000.0 for v in steps[i * per_block:(i + 1) * per_block])
                runs.append(Run(index=i, values_s=values, metadata=meta))
            items = (tokens_per_block // per_block if isinstance(tokens_per_block, int) and per_block
                     else schedule.get("tokens_per_step"))
            out.append(Series(row=name, arm=arm, commit=commits[arm], runs=tuple(runs), facts=facts,
                              items_per_sample=items if isinstance(items, int) and items > 0 else None))
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
