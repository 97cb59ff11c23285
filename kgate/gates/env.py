"""Environment comparison between stages and arms.

Method: the variables a campaign names in ``env.record`` (TRITON_*, FLA_*,
CUDA_*, torch flags) change numerics or dispatch, so two measurements are
comparable only when those variables are equal. kgate records them for every
stage process, every gate test process (at the end of its session, so a
variable the code under test set while running is seen) and every measurement
worker (after it imported the target). ``diff`` compares two such records;
variables kgate sets itself per use (``KGATE_SET``: the stack's Triton
cache and its autotune switch, the worker flag, the import path; the folders
of the campaign's ``cache.target_env``) and those the campaign lists in
``env.compare_ignore`` (device placement) are left out.
"""

from __future__ import annotations

from typing import Any

from kgate.records import Gate

KGATE_SET = frozenset({"TRITON_CACHE_DIR", "TRITON_CACHE_AUTOTUNING", "PYTHONPATH", "KGATE_WORKER", "KGATE_ENV_RECORD"})


def diff(before: dict[str, str], after: dict[str, str], ignore: list[str] | tuple[str, ...],
         labels: tuple[str, str]) -> list[str]:
    """Messages for every compared variable whose value differs (unset counts as a value)."""
    skip = KGATE_SET | set(ignore)
    msgs = []
    for name in sorted((set(before) | set(after)) - skip):
        a, b = before.get(name), after.get(name)
        if a != b:
            msgs.append(f"{name}: {_show(a)} at {labels[0]}, {_show(b)} at {labels[1]}")
    return msgs


def ignored(campaign_data: dict[str, Any]) -> list[str]:
    """``env.compare_ignore`` and the ``cache.target_env`` variables (kgate points them at the kernel cache)."""
    return [*campaign_data.get("env", {}).get("compare_ignore", []),
            *(campaign_data.get("cache") or {}).get("target_env", [])]


def _show(value: str | None) -> str:
    return "unset" if value is None else repr(value)


def arms_gate(campaign_data: dict[str, Any], envs: dict[str, dict[str, str]], evidence: str) -> Gate:
    """Every arm's recorded environment (taken after it imported the target) equals the first one's."""
    names = list(envs)
    ref = names[0]
    diffs = [m for other in names[1:]
             for m in diff(envs[ref], envs[other], ignored(campaign_data), (ref, other))]
    return Gate("same_env", f"recorded environment equal across {', '.join(names)}",
                f"{len(diffs)} difference(s)", "fail" if diffs else "pass", evidence=evidence,
                detail="; ".join(diffs) if diffs else None)
