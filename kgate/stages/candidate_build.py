"""Stage ``candidate_build``: the candidate as one commit on BENCH_BASE, checked before any GPU time.

Method: a worktree on ``kgate/<campaign>/cand-<id>`` at BENCH_BASE gets the
candidate (overlay, ref diff or worktree diff) and one commit of every file in
the worktree, ignored ones included, verified by content afterwards
(``kgate.source.worktree``): a ``.gitignore`` or ``.gitattributes`` the
candidate adds is a changed file like any other and hides nothing, and the
diff is read as text whatever the attributes say (``kgate.source.git``). Gates, each
with its evidence: the content hash still equals the id the DAG was built
with; the diff touches only ``candidate.allowed_paths``; every frozen file
still has its BENCH_BASE hash; no added line matches a forbidden pattern;
every changed Python file compiles; ruff reports no finding on changed files
that the same files did not already have at BENCH_BASE. The changed
functions are listed from the diff's hunks and the files' syntax trees.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.errors import ProvenanceMismatch
from kgate.records import Gate, StageResult, atomic_write_text
from kgate.source import candidate, git, manifest, numerics
from kgate.source.worktree import verify_worktree
from kgate.stages.common import Context

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def added_lines(patch: str) -> dict[str, list[tuple[int, str]]]:
    """{path: [(new line number, text)]} of lines the patch adds."""
    out: dict[str, list[tuple[int, str]]] = {}
    path, lineno = None, 0
    for line in patch.splitlines():
        if line.startswith("+++ "):
            path = None if line[4:] == "/dev/null" else line[6:]
            continue
        m = _HUNK.match(line)
        if m:
            lineno = int(m.group(1))
            continue
        if path is None or line.startswith(("--- ", "diff --git", "index ")):
            continue
        if line.startswith("+"):
            out.setdefault(path, []).append((lineno, line[1:]))
            lineno += 1
        elif line.startswith(" "):
            lineno += 1
    return out


def changed_functions(worktree: Path, added: dict[str, list[tuple[int, str]]]) -> list[str]:
    """Qualified names of functions/classes whose body holds an added line."""
    names: set[str] = set()
    for path, lines in added.items():
        if not path.endswith(".py") or not (worktree / path).is_file():
            continue
        try:
            tree = ast.parse((worktree / path).read_text())
        except SyntaxError:
            continue
        spans: list[tuple[int, int, str]] = []

        def walk(node: ast.AST, prefix: str, spans: list[tuple[int, int, str]] = spans) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    q = f"{prefix}{child.name}"
                    start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                    spans.append((start, child.end_lineno or child.lineno, q))
                    walk(child, q + ".", spans)
        walk(tree, "")
        for n, text in lines:
            inner = [s for s in spans if s[0] <= n <= s[1]]
            if inner:
                names.add(f"{path}::{max(inner, key=lambda s: s[0])[2]}")
            elif text.strip() and not text.lstrip().startswith("#"):
                names.add(f"{path}::<module>")
    return sorted(names)


def ruff_findings(worktree: Path, files: list[str], select: str | None) -> list[dict[str, Any]]:
    """ruff's findings on ``files`` (JSON), run with the target's own configuration."""
    present = [f for f in files if (worktree / f).is_file()]
    if not present:
        return []
    cmd = [sys.executable, "-m", "ruff", "check", "--output-format=json", "--no-cache", "--exit-zero"]
    if not _has_ruff_config(worktree):
        # no configuration of the target's own: never pick up one from a folder above the worktree
        cmd.append("--isolated")
    if select:
        cmd += ["--select", select]
    proc = subprocess.run(cmd + present, cwd=worktree, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ProvenanceMismatch(f"ruff could not run in {worktree}: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout or "[]")


def _has_ruff_config(root: Path) -> bool:
    if (root / "ruff.toml").exists() or (root / ".ruff.toml").exists():
        return True
    py = root / "pyproject.toml"
    return py.exists() and "[tool.ruff" in py.read_text(errors="replace")


def _finding_key(f: dict[str, Any], worktree: Path) -> tuple[str, str, str]:
    rel = str(Path(f["filename"]).resolve().relative_to(worktree.resolve()))
    return rel, f.get("code") or "", f.get("message", "")


def numeric_flags_gate(wt: Path, bench_base: str, files: list[dict[str, Any]], evidence: str) -> Gate:
    """kgate's numeric-settings census (kgate.source.numerics) of every changed Python file, BENCH_BASE vs candidate."""
    msgs: list[str] = []
    notes: list[str] = []
    for f in files:
        if not f["path"].endswith(".py"):
            continue
        before = git.git("show", f"{bench_base}:{f['path']}", cwd=wt) if f["status"] != "A" else ""
        after = (wt / f["path"]).read_text(errors="replace") if (wt / f["path"]).is_file() else ""
        found = numerics.diff(before, after, f["path"])
        msgs += found.flagged
        notes += found.notes
    detail = "; ".join([*msgs[:10], *notes[:10]]) or None
    return Gate("numeric_flags", "no numeric setting (precision, TF32, fast-math, accumulator, tolerance) "
                "added or removed", f"{len(msgs)} change(s)" + (f", {len(notes)} removed with their calls" if notes
                                                               else ""),
                "fail" if msgs else "pass", evidence=evidence, detail=detail)


def dispatch_coverage_gate(data: dict[str, Any], enabled: tuple[str, ...], fx: dict[str, Any]) -> Gate:
    """Every dispatch class the candidate enables has a case in the fixture (its test ids, any device)."""
    classes = {k["name"]: k for k in (data.get("dispatch") or {}).get("classes", [])}
    if not classes:
        return Gate("dispatch_coverage", "the fixture holds a case of every enabled class",
                    "the campaign declares no dispatch classes", "skip")
    run_ = fx["data"]["run"]
    ids = list(run_["collected"]) + list(run_.get("deselected", []))
    covered = {n: [i for i in ids if re.search(classes[n]["tests"], i)] for n in enabled}
    missing = [n for n, hits in covered.items() if not hits]
    return Gate("dispatch_coverage", "the fixture holds a case of every enabled class",
                f"{len(enabled) - len(missing)}/{len(enabled)} enabled class(es) covered"
                + ("" if enabled else " (the candidate enables none: every class falls back)"),
                "fail" if missing else "pass", evidence=fx["data"]["run"].get("outcomes"),
                detail=(f"no fixture case for enabled class(es) {', '.join(missing)}" if missing else None))


def run(ctx: Context) -> StageResult:
    c, gpu, cid = ctx.campaign, ctx.gpu, ctx.candidate
    fx = ctx.inputs["fixture_freeze"]
    bench_base = fx["data"]["bench_base"]
    # BENCH_BASE by content first: a tampered one is the run's integrity error, never this candidate's NO-GO
    base_wt = ctx.bench_base()
    now = candidate.identity(c)
    if now != cid:
        raise ProvenanceMismatch(f"candidate changed while the workflow ran (id {cid} at DAG build, {now} now); rerun")
    repo = paths.repo(c.name, gpu)
    wt = paths.worktree(c.name, gpu, paths.candidate_arm(cid))
    git.reset_worktree(repo, wt, bench_base, branch=paths.branch(c.name, paths.candidate_arm(cid)))
    mat = candidate.materialize(c, wt)
    cand_sha = git.commit_all(wt, f"kgate: candidate {cid} ({mat.kind}:{mat.source})")
    # every file of the worktree is in the commit (ignored ones too): what the gates below read is what runs
    verify_worktree(wt, cand_sha, repo, "the candidate's worktree")
    files = git.changed_files(wt, bench_base, cand_sha)
    patch_text = git.patch(wt, bench_base, cand_sha)
    patch_path = ctx.out_dir / "candidate.patch"
    atomic_write_text(patch_path, patch_text)
    added = added_lines(patch_text)
    cand = c.data["candidate"]
    gates = [Gate("candidate_identity", "content hash equals the id the DAG was built with", cid, "pass")]

    expected = fx["data"]["manifest"]
    changed_frozen = manifest.diff(expected, manifest.compute(wt, sorted(expected)))
    gates.append(Gate("frozen_unchanged", "every frozen file keeps its BENCH_BASE sha256",
                      f"{len(expected) - len(changed_frozen)}/{len(expected)} unchanged",
                      "fail" if changed_frozen else "pass", evidence=fx["data"]["manifest_path"],
                      detail=f"frozen file(s) changed: {', '.join(changed_frozen)}" if changed_frozen else None))

    outside = [f["path"] for f in files if not any(fnmatch.fnmatchcase(f["path"], g) for g in cand["allowed_paths"])]
    gates.append(Gate("scoped_diff", f"diff touches only {', '.join(cand['allowed_paths'])}",
                      f"{len(files)} file(s) changed", "fail" if outside else "pass", evidence=str(patch_path),
                      detail=f"paths outside the allowed set: {', '.join(outside)}" if outside else None))

    hits = []
    for rule in cand.get("forbid_patterns", []):
        rx = re.compile(rule["pattern"])
        for path, lines in added.items():
            hits += [f"{path}:{n} matches /{rule['pattern']}/ ({rule['why']})" for n, t in lines if rx.search(t)]
    gates.append(Gate("forbidden_patterns", "no added line matches a forbidden pattern", f"{len(hits)} match(es)",
                      "fail" if hits else "pass", evidence=str(patch_path),
                      detail="; ".join(hits[:10]) if hits else None))

    gates.append(numeric_flags_gate(wt, bench_base, files, str(patch_path)))
    enabled = candidate.enabled_classes(c)
    gates.append(dispatch_coverage_gate(c.data, enabled, fx))

    py = [f["path"] for f in files if f["path"].endswith(".py") and (wt / f["path"]).is_file()]
    syntax = []
    for f in py:
        try:
            compile((wt / f).read_text(), f, "exec")
        except SyntaxError as exc:
            syntax.append(f"{f}:{exc.lineno}: {exc.msg}")
    gates.append(Gate("compiles", "every changed Python file compiles", f"{len(py) - len(syntax)}/{len(py)}",
                      "fail" if syntax else "pass", detail="; ".join(syntax) if syntax else None))

    new_findings: list[str] = []
    if cand["lint"]["ruff"] and py:
        # a multiset: a further instance of a finding the file already had is still new
        allowance = Counter(_finding_key(f, base_wt) for f in ruff_findings(base_wt, py, cand["lint"]["select"]))
        new_findings = []
        for f in ruff_findings(wt, py, cand["lint"]["select"]):
            k = _finding_key(f, wt)
            if allowance[k] > 0:
                allowance[k] -= 1
            else:
                new_findings.append(f"{k[0]}:{f['location']['row']}: {k[1]} {k[2]}")
        gates.append(Gate("lint", "ruff: no new finding on changed files", f"{len(new_findings)} new finding(s)",
                          "fail" if new_findings else "pass", detail="; ".join(new_findings[:10]) or None))
    else:
        gates.append(Gate("lint", "ruff: no new finding on changed files", "no Python file changed"
                          if not py else "disabled by campaign", "skip"))

    data = {"candidate": cid, "source": {"kind": mat.kind, "value": mat.source}, "bench_base": bench_base,
            "candidate_sha": cand_sha, "branch": paths.branch(c.name, paths.candidate_arm(cid)), "worktree": str(wt),
            "diff": {"files": files, "changed_functions": changed_functions(wt, added), "patch_path": str(patch_path)},
            "lint_findings": new_findings, "enables": list(enabled)}
    return StageResult(gates=gates, data=data)
