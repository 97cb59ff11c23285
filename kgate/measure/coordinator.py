"""The coordinator side of a measurement in one namespace, as the timed stages use it.

The stages (profile_baseline, profile_candidate, bench, ncu, model) import this module as
``measure`` and call ``measure.load_spec``, ``measure.start_arms``, ``measure.Telemetry`` ...
Nothing is defined here: every name has its home in :mod:`kgate.measure.rows` (rows and the
campaign's measure section), :mod:`kgate.measure.arms` (worker processes and the checks across
them), :mod:`kgate.measure.telemetry` (GPU telemetry, foreign processes, host load) or
:mod:`kgate.stats.geomean`. New code imports those modules directly.
"""

from kgate.measure.arms import (
    Arm,
    Deadline,
    WorkerFailure,
    ask_all,
    check_provenance,
    check_same_device,
    compare_hashes,
    progress,
    start_arms,
    worker_env,
)
from kgate.measure.rows import (
    CPU_TIMING_NOTE,
    MeasureSpec,
    Row,
    Temporary,
    compile_regex,
    eval_expression,
    inputs_fingerprint,
    load_spec,
    matching,
    row_from_spec,
    row_table,
    table_from_record,
)
from kgate.measure.telemetry import (
    HOST_BUSY_SHARE,
    PROBE_SPREAD_LIMIT,
    TELEMETRY_FIELDS,
    Telemetry,
    busy_note,
    claim_device,
    foreign_processes,
    host_load,
    spread_note,
)
from kgate.stats.geomean import geomean_values

__all__ = [
    "CPU_TIMING_NOTE",
    "HOST_BUSY_SHARE",
    "PROBE_SPREAD_LIMIT",
    "TELEMETRY_FIELDS",
    "Arm",
    "Deadline",
    "MeasureSpec",
    "Row",
    "Telemetry",
    "Temporary",
    "WorkerFailure",
    "ask_all",
    "busy_note",
    "claim_device",
    "check_provenance",
    "check_same_device",
    "compare_hashes",
    "compile_regex",
    "eval_expression",
    "foreign_processes",
    "geomean_values",
    "host_load",
    "inputs_fingerprint",
    "load_spec",
    "matching",
    "progress",
    "row_from_spec",
    "row_table",
    "spread_note",
    "start_arms",
    "table_from_record",
    "worker_env",
]
