"""One gate run judged with reruns: pass, deterministic failure (fail) or intermittent failure (inconclusive).

Method: the gate runs once (``tag="run1"``) and the target's imports are
checked (``runner.check_imports``), as is every failure that names a module
the environment lacks (``kgate.testrun.missing_deps``: an error, never a
verdict). Every test id that did not pass is rerun
``reruns`` more times on its own (``only_ids``). ``judge`` turns the first run
and the rerun outcomes into one gate row: green is ``pass``; a collection
error, or an id that failed every run, is ``fail``; ids that passed at least
once are ``inconclusive``, named. Limits: k reruns cannot prove a rare flake
absent; the ids and their outcome sequences are returned for the record.
Used by the ``baseline_tests`` and ``fixture_freeze`` stages.
"""

from __future__ import annotations

from pathlib import Path

from kgate.records import Gate
from kgate.testrun import interp_gaps, missing_deps, runner


def rerun_failures(spec: runner.GateSpec, first: runner.GateRun, wt: Path, out_dir: Path, cache: Path,
                   reruns: int) -> dict[str, list[str]]:
    """Rerun each non-passing id ``reruns`` times; return {id: [outcome per run]}."""
    history = {i: [first.tests.get(i, {}).get("outcome", "not finished")] for i in first.bad_ids}
    for k in range(reruns):
        if not history:
            break
        again = runner.run(spec, wt, out_dir, cache, tag=f"rerun{k + 1}", only_ids=sorted(history))
        for i in history:
            history[i].append(again.tests.get(i, {}).get("outcome", "not finished"))
    return history


def run_with_reruns(spec: runner.GateSpec, wt: Path, out_dir: Path, cache: Path, reruns: int
                    ) -> tuple[runner.GateRun, dict[str, list[str]]]:
    """The first run (imports checked) and, when it was not green, the reruns of its non-passing ids."""
    first = runner.run(spec, wt, out_dir, cache, tag="run1")
    runner.check_imports(first, wt)
    missing_deps.check(first, wt)
    history = {} if first.green else rerun_failures(spec, first, wt, out_dir, cache, reruns)
    return first, history


def judge(first: runner.GateRun, history: dict[str, list[str]], evidence: str, name: str) -> Gate:
    """Turn a gate run plus reruns into one gate row.

    Tests the Triton interpreter itself could not run (outcome ``unavailable``, CPU only) are neither
    passes nor failures: they are named; when no test ran at all because of it, the gate is ``unavailable``
    ("cannot run on CPU"), never a failure of the target."""
    if first.green:
        na = sorted(i for i, t in first.tests.items() if t["outcome"] == "unavailable")
        if na:
            ran = [i for i, t in first.tests.items() if t["outcome"] not in ("unavailable", "skipped")]
            first_error = (first.tests[na[0]].get("message") or "").split(interp_gaps.UNAVAILABLE)[-1].strip()
            detail = (f"cannot run on CPU ({len(na)} test(s), the Triton interpreter itself failed; first: "
                      f"{first_error}): {', '.join(na[:8])}" + (f" and {len(na) - 8} more" if len(na) > 8 else ""))
            return Gate(name, "every collected test passes", first.summary(), "pass" if ran else "unavailable",
                        evidence=evidence, detail=detail)
        return Gate(name, "every collected test passes", first.summary(), "pass", evidence=evidence)
    if first.collect_errors:
        ids = ", ".join(e["nodeid"] for e in first.collect_errors)
        return Gate(name, "every collected test passes", first.summary(), "fail", evidence=evidence,
                    detail=f"collection errors in {ids}")
    always = sorted(i for i, h in history.items() if all(o not in runner.OUTCOMES_OK for o in h))
    flaky = sorted(i for i, h in history.items() if i not in always)
    if always:
        return Gate(name, "every collected test passes", first.summary(), "fail", evidence=evidence,
                    detail=f"deterministic failure ({len(always)}): {', '.join(always)}")
    return Gate(name, "every collected test passes", first.summary(), "inconclusive", evidence=evidence,
                detail=f"intermittent failure ({len(flaky)}): {', '.join(flaky)}")
