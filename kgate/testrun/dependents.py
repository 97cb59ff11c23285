"""A target's own dependent-test helper: the test files that depend on a list of changed files.

Method: the helper (``gate.dependent_tests.helper``, a script of the target)
runs with this Python from the root of a worktree of the target, the changed
paths as its arguments; it prints test paths separated by whitespace,
absolute or relative to the root. Returned relative to the root, sorted and
without duplicates. Limits: the helper is the target's code and its rules
are its own; a helper that fails or runs past ``TIMEOUT_S`` is an error
naming the key.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kgate.errors import KgateError

#: seconds the helper may run
TIMEOUT_S = 600


def helper_tests(helper: str, worktree: Path, changed: list[str]) -> list[str]:
    """The helper's test files for ``changed``, relative to ``worktree``."""
    if not changed:
        return []
    try:
        proc = subprocess.run([sys.executable, helper, *changed], cwd=worktree, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise KgateError(f"gate.dependent_tests.helper {helper} ran longer than {TIMEOUT_S} s") from exc
    if proc.returncode != 0:
        raise KgateError(f"gate.dependent_tests.helper {helper} failed: {proc.stderr.strip()[-300:]}")
    out = set()
    for tok in proc.stdout.split():
        p = Path(tok)
        out.add(str(p.resolve().relative_to(worktree.resolve()) if p.is_absolute() else p))
    return sorted(out)
