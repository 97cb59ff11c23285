"""The run-time numeric-settings gate of candidate_gate (``numeric_state``).

Method: the gate's test processes watch the numeric settings (torch's backend flags, Triton's language
knobs, the variables of ``env.record``) around every test phase (``kgate.testrun.numerics_plugin``). The
candidate's run must show, test by test and phase by phase, the same changes as the fixture run of
BENCH_BASE: a setting a test changes, even one restored before the test ends, is compared by the values
it took and whether it was restored, never by its start value (under pytest-xdist the start depends on
which tests a worker ran before). The settings as they stand at the end of the session must equal the
fixture run's too. A difference either way (the candidate changes a setting BENCH_BASE does not, or no
longer changes one it did) fails the gate with the test id, the phase and the values.

Limits: a test the fixture run did not finish is not compared; a suite whose tests change settings
process-wide without restoring them can show distribution-dependent changes under pytest-xdist (the
campaign pins such a setting with ``gate.env``, as it does for the environment comparison, or has it put
back after every test with ``gate.restore_env``).
"""

from __future__ import annotations

from typing import Any

from kgate.records import Gate
from kgate.testrun.numeric_state import describe

THRESHOLD = ("no numeric setting (torch flags, Triton knobs, env.record variables) changes during a test, "
             "even restored, or differs at the end of the run, other than as in the fixture run")


def _signature(changes: dict[str, dict[str, Any]]) -> dict[str, tuple[tuple[str, ...], bool]]:
    """Per setting: the values it took other than its start (sorted) and whether it was restored."""
    out = {}
    for name, c in changes.items():
        values = {v for v in [*c["during"], c["end"]] if v != c["start"]}
        out[name] = (tuple(sorted(values)), c["end"] == c["start"])
    return out


def _per_test(run: dict[str, Any]) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    tests = run.get("tests") or []
    items = tests.values() if isinstance(tests, dict) else tests
    return {t["nodeid"]: t.get("numerics") or {} for t in items}


def differences(ref: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Messages for every difference between the fixture run ``ref`` and the candidate's run ``got`` (the
    ``run`` data of their records: tests with their ``numerics``, and ``numerics_state``)."""
    msgs = []
    ref_tests, got_tests = _per_test(ref), _per_test(got)
    for nodeid in sorted(set(ref_tests) & set(got_tests)):
        for phase in ("setup", "call", "teardown"):
            a = ref_tests[nodeid].get(phase) or {}
            b = got_tests[nodeid].get(phase) or {}
            sa, sb = _signature(a), _signature(b)
            for name in sorted(set(sa) | set(sb)):
                if sa.get(name) == sb.get(name):
                    continue
                now = describe({name: b[name]}) if name in b else f"{name}: no change"
                then = describe({name: a[name]}) if name in a else "no change"
                msgs.append(f"{nodeid} ({phase}): {now}; in the fixture run: {then}")
    end_ref, end_got = ref.get("numerics_state") or {}, got.get("numerics_state") or {}
    for name in sorted(set(end_ref) | set(end_got)):
        if end_ref.get(name) != end_got.get(name):
            msgs.append(f"{name}: {end_got.get(name, 'not recorded')!r} at the end of the run, "
                        f"{end_ref.get(name, 'not recorded')!r} at the end of the fixture run")
    return msgs


def gate(ref: dict[str, Any], got: dict[str, Any], evidence: str | None) -> Gate:
    """``numeric_state``: skip when the fixture record predates the recording, else fail on any difference."""
    if ref.get("numerics_state") is None:
        return Gate("numeric_state", THRESHOLD, "the fixture record predates numeric-settings recording", "skip")
    msgs = differences(ref, got)
    return Gate("numeric_state", THRESHOLD, f"{len(msgs)} difference(s)", "fail" if msgs else "pass",
                evidence=evidence, detail="; ".join(msgs[:10]) + (f" (+{len(msgs) - 10} more)" if len(msgs) > 10
                                                                 else "") if msgs else None)
