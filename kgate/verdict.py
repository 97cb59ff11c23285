"""The verdict: one word and the gate that decided it.

Rule: walk the stages in pipeline order. The first record whose status is
not ``pass`` decides: fail -> NO-GO, stop -> STOPPED, inconclusive or
unavailable -> INCONCLUSIVE; every later stage is listed as not run, blocked
by that gate. On CPU an ``unavailable`` record (a stage that cannot measure
there, such as ncu's hardware counters) decides nothing: it is listed, and the
run stays a smoke. If every stage that ran passed: on CPU the verdict is SMOKE
(the interpreter proves the pipeline, never the kernel's speed); on a GPU it
is GO only when every stage of the full protocol has a passing record, else
INCONCLUSIVE naming the missing evidence; a campaign that declares no
end-to-end workload (``model.none``) passes the model stage with nothing
measured, and its GO sentence begins "kernel-level evidence only"
(``evidence``). A forced run (past a STOP) keeps STOPPED and shows the
would-be verdict beside it; its stages after a measuring stage's fail are not
blocked by it (``protocol.lets_through``: the run collects the remaining
evidence), while a failed integrity or correctness gate blocks them in a
forced run too. ``forced_past`` lists what a forced run walked past (each
record that did not pass with a later stage's record beside it), empty when
forcing changed nothing. ``--check`` exit codes:
0 GO, 1 NO-GO or STOPPED, 3 INCONCLUSIVE or SMOKE, 2 error.
"""

from __future__ import annotations

from typing import Any

from kgate import paths, protocol
from kgate.errors import IncompleteData
from kgate.records import VERDICT_SCHEMA, read_verdict

WORD = {"fail": "NO-GO", "stop": "STOPPED", "inconclusive": "INCONCLUSIVE", "unavailable": "INCONCLUSIVE",
        "error": "INCONCLUSIVE"}
EXIT = {"GO": 0, "NO-GO": 1, "STOPPED": 1, "INCONCLUSIVE": 3, "SMOKE": 3}


def _first_bad_gate(rec: dict[str, Any]) -> dict[str, Any] | None:
    for status in ("fail", "stop", "inconclusive", "unavailable"):
        for g in rec["gates"]:
            if g["status"] == status:
                return g
    return None


def _fmt(g: dict[str, Any]) -> str:
    iv = g.get("interval")
    val = f"{g['value']}" + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else "")
    return f"{g['name']} {g['status']}: {val} (required: {g['threshold']})"


def _walked_past(stages: list[dict[str, Any]], gpu: str) -> list[str]:
    """``stage (status)`` of each record that did not pass while a later stage has a record (CPU's
    ``unavailable`` is not walked past: it blocks nothing there)."""
    ran = [s for s in stages if s["status"] != "not_run"]
    return [f"{s['stage']} ({s['status']})" for s in ran[:-1]
            if s["status"] not in ("pass", "skip") and not (gpu == "cpu" and s["status"] == "unavailable")]


def compute(records: list[dict[str, Any]], *, campaign: str, gpu: str, candidate: str | None,
            forced: bool = False, implemented: tuple[str, ...] = protocol.STAGES) -> dict[str, Any]:
    """Verdict dict (schema kgate.verdict/1) from the records that ran, in order."""
    by_stage = {r["stage"]: r for r in records}
    gates = [{"stage": r["stage"], **g} for r in records for g in r["gates"]]
    stages: list[dict[str, Any]] = []
    decided: dict[str, Any] | None = None
    word = None
    blocker = None
    hard_blocker = None  # the first gate a forced run does not walk past (protocol.lets_through)
    for stage in protocol.STAGES:
        rec = by_stage.get(stage)
        if rec is not None:
            stages.append({"stage": stage, "status": rec["status"],
                           "record": str(paths.record(campaign, gpu, stage, rec.get("candidate")))})
            cpu_only = gpu == "cpu" and rec["status"] == "unavailable"
            if rec["status"] not in ("pass", "skip") and not cpu_only:
                bad = _first_bad_gate(rec)
                label = f"{stage}: {bad['name'] if bad else rec['status']} {rec['status']}"
                if decided is None:
                    decided = {"stage": stage, "gate": bad["name"] if bad else None}
                    word = WORD.get(rec["status"], "INCONCLUSIVE")
                    blocker = label
                    sentence = f"{stage}: {_fmt(bad)}" if bad else f"{stage}: {rec['status']}"
                if not protocol.lets_through(stage, rec["status"], True) and hard_blocker is None:
                    hard_blocker = label
            continue
        if hard_blocker:
            why = f"blocked by {hard_blocker}"
        elif blocker and not forced:
            why = f"blocked by {blocker}"
        elif stage not in implemented:
            why = "stage not implemented in this kgate version"
        else:
            why = "no record (not run yet)"
        stages.append({"stage": stage, "status": "not_run", "why": why})
    would_be = None
    if word is None:
        missing = [s["stage"] for s in stages if s["status"] == "not_run"]
        if gpu == "cpu":
            word = "SMOKE"
            na = [r["stage"] for r in records if r["status"] == "unavailable"]
            sentence = (f"CPU smoke run: the {len(records) - len(na)} stages that measured passed their gates under "
                        "the Triton interpreter" + (f" ({', '.join(na)}: unavailable on CPU)" if na else "")
                        + "; CPU timings mean nothing and a CPU run never yields GO")
            decided = {"stage": None, "gate": None}
        elif missing:
            word = "INCONCLUSIVE"
            sentence = f"every gate that ran passed, but the protocol's evidence is missing: {', '.join(missing)}"
            decided = {"stage": missing[0], "gate": None}
        else:
            word = "GO"
            sentence = f"every gate of the protocol passed ({len(gates)} gates)"
            decided = {"stage": None, "gate": None}
            absent = (by_stage.get("model") or {}).get("data", {}).get("declared_absent")
            if absent:
                sentence = f"kernel-level evidence only (no end-to-end workload: {absent}); {sentence}"
    forced_past = _walked_past(stages, gpu) if forced else []
    evidence = "kernel-level only" if (by_stage.get("model") or {}).get("data", {}).get("declared_absent") else None
    if forced and any(r["status"] == "stop" for r in records):
        # the would-be verdict: the same walk with every STOP read as a pass
        unstopped = [{**r, "status": "pass" if r["status"] == "stop" else r["status"],
                      "gates": [{**g, "status": "pass"} if g["status"] == "stop" else g for g in r["gates"]]}
                     for r in records]
        inner = compute(unstopped, campaign=campaign, gpu=gpu, candidate=candidate, implemented=implemented)
        would_be = inner["verdict"]
        if word == "STOPPED":
            stops = [f"{r['stage']} / {g['name']}" for r in records for g in r["gates"] if g["status"] == "stop"]
            sentence = (f"{sentence}; forced run past {len(stops)} STOP(s) ({', '.join(stops)}): read as passes, "
                        f"it would be {would_be} ({inner['sentence']})")
    return {"schema": VERDICT_SCHEMA, "campaign": campaign, "gpu": gpu, "candidate": candidate, "verdict": word,
            "would_be": would_be, "sentence": sentence, "evidence": evidence, "decided_by": decided, "forced": forced,
            "forced_past": forced_past, "stages": stages, "gates": gates}


def check(campaign: str, gpu: str) -> int:
    """Exit code for the recorded verdict of ``campaign`` on ``gpu``."""
    path = paths.verdict_file(campaign, gpu)
    if not path.exists():
        raise IncompleteData(f"no verdict at {path}: run the workflow first")
    data = read_verdict(path)
    print(f"{data['verdict']}: {data['sentence']}")
    return EXIT[data["verdict"]]
