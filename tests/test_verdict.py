"""Verdict rules: the first gate that did not pass decides; CPU is SMOKE; GO needs the whole protocol."""

from __future__ import annotations

import pytest

from kgate import protocol, verdict
from kgate.records import Gate, StageResult, build_record

ORDER = ("target", "baseline_tests", "fixture_freeze", "candidate_build", "candidate_gate")


def rec(stage: str, status: str = "pass", gpu: str = "cpu") -> dict:
    g = Gate(f"{stage}_gate", "holds", "measured", status, detail=None if status == "pass" else "why it failed")
    cid = "0123456789ab" if stage in protocol.CANDIDATE_STAGES else None
    return build_record(stage=stage, campaign="c", gpu=gpu, candidate=cid, result=StageResult(gates=[g]), provenance={})


def test_cpu_run_with_every_gate_passing_is_smoke() -> None:
    v = verdict.compute([rec(s) for s in ORDER], campaign="c", gpu="cpu", candidate="0123456789ab")
    assert v["verdict"] == "SMOKE"
    assert "never yields GO" in v["sentence"]
    assert verdict.EXIT[v["verdict"]] == 3


def test_gpu_run_missing_protocol_stages_is_inconclusive_not_go() -> None:
    v = verdict.compute([rec(s, gpu="h200") for s in ORDER], campaign="c", gpu="h200", candidate="0123456789ab")
    assert v["verdict"] == "INCONCLUSIVE"
    assert "profile_baseline" in v["sentence"] and "bench" in v["sentence"]


def test_gpu_run_with_the_whole_protocol_passing_is_go() -> None:
    v = verdict.compute([rec(s, gpu="h200") for s in protocol.STAGES], campaign="c", gpu="h200",
                        candidate="0123456789ab", implemented=protocol.STAGES)
    assert v["verdict"] == "GO"


@pytest.mark.parametrize(("status", "word"), [("fail", "NO-GO"), ("stop", "STOPPED"),
                                              ("inconclusive", "INCONCLUSIVE"), ("unavailable", "INCONCLUSIVE")])
def test_first_bad_gate_decides_and_blocks_later_stages(status: str, word: str) -> None:
    records = [rec("target"), rec("baseline_tests"), rec("fixture_freeze", status)]
    v = verdict.compute(records, campaign="c", gpu="h200", candidate=None)
    assert v["verdict"] == word
    assert v["decided_by"] == {"stage": "fixture_freeze", "gate": "fixture_freeze_gate"}
    assert "why it failed" not in v["sentence"] or status != "pass"
    by = {s["stage"]: s for s in v["stages"]}
    assert by["candidate_gate"]["status"] == "not_run"
    assert by["candidate_gate"]["why"] == f"blocked by fixture_freeze: fixture_freeze_gate {status}"


def test_a_failure_on_cpu_is_still_no_go() -> None:
    """Correctness measured under the interpreter is real: a wrong candidate is NO-GO on CPU too."""
    records = [rec(s) for s in ORDER[:-1]] + [rec("candidate_gate", "fail")]
    assert verdict.compute(records, campaign="c", gpu="cpu", candidate="0123456789ab")["verdict"] == "NO-GO"


def test_a_forced_run_past_a_stop_is_never_go() -> None:
    records = [rec(s, gpu="h200") for s in protocol.STAGES]
    records[3] = rec("profile_baseline", "stop", gpu="h200")
    v = verdict.compute(records, campaign="c", gpu="h200", candidate="0123456789ab", forced=True,
                        implemented=protocol.STAGES)
    assert v["verdict"] == "STOPPED"
    by = {s["stage"]: s for s in v["stages"]}
    assert by["bench"]["status"] == "pass"


@pytest.mark.parametrize(("later", "would_be"), [("pass", "GO"), ("fail", "NO-GO")])
def test_a_forced_run_shows_what_it_would_be_without_the_stop(later: str, would_be: str) -> None:
    """The would-be verdict is the same walk with the STOP read as a pass: GO if all else passed, NO-GO on a fail."""
    records = [rec(s, gpu="h200") for s in protocol.STAGES]
    records[3] = rec("profile_baseline", "stop", gpu="h200")
    records[-2] = rec("ncu", later, gpu="h200")
    v = verdict.compute(records, campaign="c", gpu="h200", candidate="0123456789ab", forced=True,
                        implemented=protocol.STAGES)
    assert v["verdict"] == "STOPPED" and v["would_be"] == would_be
    assert v["decided_by"] == {"stage": "profile_baseline", "gate": "profile_baseline_gate"}
    assert (f"forced run past 1 STOP(s) (profile_baseline / profile_baseline_gate): read as passes, it would be "
            f"{would_be}") in v["sentence"]
    unforced = verdict.compute(records[:4], campaign="c", gpu="h200", candidate="0123456789ab",
                               implemented=protocol.STAGES)
    assert unforced["verdict"] == "STOPPED" and unforced["would_be"] is None


def h200(n: int, **statuses: str) -> list[dict]:
    """Records of the protocol's first ``n`` stages on an H200, each passing unless ``statuses`` names it."""
    return [rec(s, statuses.get(s, "pass"), gpu="h200") for s in protocol.STAGES[:n]]


def protocol_verdict(records: list[dict], forced: bool = False) -> dict:
    return verdict.compute(records, campaign="c", gpu="h200", candidate="0123456789ab", forced=forced,
                           implemented=protocol.STAGES)


def test_a_forced_run_that_stopped_early_would_be_inconclusive() -> None:
    """Past the STOP nothing else ran yet: the would-be verdict names the missing evidence."""
    v = protocol_verdict(h200(4, profile_baseline="stop"), forced=True)
    assert (v["verdict"], v["would_be"]) == ("STOPPED", "INCONCLUSIVE")
    assert "candidate_build" in v["sentence"]


def test_a_forced_run_past_a_measured_fail_leaves_the_later_stages_unblocked() -> None:
    """bench failed in a forced run: ncu and model are not blocked (they collect the evidence), the verdict
    stays STOPPED, and the would-be verdict is NO-GO from bench, not from anything measured after it."""
    records = h200(8, profile_baseline="stop", bench="fail")
    v = protocol_verdict(records, forced=True)
    assert (v["verdict"], v["would_be"]) == ("STOPPED", "NO-GO")
    later = {s["stage"]: s["why"] for s in v["stages"] if s["status"] == "not_run"}
    assert later == {"ncu": "no record (not run yet)", "model": "no record (not run yet)"}
    v = protocol_verdict([*records, rec("ncu", gpu="h200"), rec("model", "fail", gpu="h200")], forced=True)
    assert (v["verdict"], v["would_be"]) == ("STOPPED", "NO-GO") and "bench" in v["sentence"]
    unforced = protocol_verdict(records)
    assert all(s["why"].startswith("blocked by profile_baseline") for s in unforced["stages"]
               if s["status"] == "not_run")


def test_a_forced_run_does_not_walk_past_a_failed_gate() -> None:
    """Force walks past a STOP and a measured fail only: the stages after a later failed correctness or
    integrity gate are blocked by that gate."""
    records = h200(5, profile_baseline="stop", candidate_build="fail")
    v = protocol_verdict(records, forced=True)
    assert (v["verdict"], v["would_be"]) == ("STOPPED", "NO-GO")
    later = [s for s in v["stages"] if s["status"] == "not_run"]
    assert [s["stage"] for s in later] == list(protocol.STAGES[5:])
    assert all(s["why"] == "blocked by candidate_build: candidate_build_gate fail" for s in later)
    unforced = protocol_verdict(records[:4])
    assert all(s["why"].startswith("blocked by profile_baseline") for s in unforced["stages"]
               if s["status"] == "not_run")


def test_a_forced_run_names_what_it_walked_past_and_nothing_when_it_walked_past_nothing() -> None:
    """``forced_past``: each record that did not pass with a later stage's record beside it. A forced run whose
    last record is its only non-pass walked past nothing (the report then shows no forced-run warning); an
    unforced run lists nothing; CPU's unavailable ncu blocks nothing there, so it is not walked past."""
    v = protocol_verdict(h200(len(protocol.STAGES), profile_baseline="stop", bench="inconclusive"), forced=True)
    assert v["forced_past"] == ["profile_baseline (stop)", "bench (inconclusive)"]
    v = protocol_verdict(h200(protocol.STAGES.index("bench") + 1, bench="inconclusive"), forced=True)
    assert v["forced"] and v["forced_past"] == [] and v["verdict"] == "INCONCLUSIVE"
    v = protocol_verdict(h200(len(protocol.STAGES), bench="fail"))
    assert v["forced_past"] == []
    cpu = [rec(s, "unavailable" if s == "ncu" else "pass") for s in protocol.STAGES]
    v = verdict.compute(cpu, campaign="c", gpu="cpu", candidate="0123456789ab", forced=True)
    assert v["verdict"] == "SMOKE" and v["forced_past"] == []
