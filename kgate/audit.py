"""``python -m kgate audit``: where campaigns on one target could step on each other.

Campaigns are grouped by target identity: ``repo:<resolved clone path>@<baseline
SHA>`` or ``pypi:<normalized requirement>``. For every pair of campaigns on the
same target the audit reports

* allowed-path overlap: some path could match an allowed glob of both
  campaigns, i.e. both candidates may change the same file. This is the one
  finding that is a warning (exit 1), except for two campaigns whose
  candidates are the same commit (``candidate.ref``): one change judged under
  two contracts, a note;
* frozen-path overlap: both campaigns freeze the same files (common and
  harmless, e.g. a shared ``tests/conftest.py``), shown for information;
* allowed-vs-frozen overlap: one campaign may change a file the other
  freezes; landing the first would move the second's goalposts (a note);
* timed surfaces: the ops (``measure.callable``, ``measure.registry``, a
  ``model`` section) and the rows the timed stages time, from the sections
  the campaign file declares (``measure``, ``profile``, ``bench``, ``model``).
  A campaign that declares none of them says so. Two campaigns timing the
  same op should not run their timed stages on one GPU at the same time (a
  note);

plus each campaign's recorded ``notes`` (duplicate and upstream audits) and
its lane: ``results/<campaign>/``, ``work/<campaign>/``, ``reports/<campaign>/``
and branches ``kgate/<campaign>/...`` in kgate's own clone. Two audited files
with the same campaign name share a lane, which is a warning as well.

Glob overlap is decided by :func:`glob_overlap`: exact for the semantics kgate
uses to check a candidate's diff (``fnmatch.fnmatchcase``: ``*`` matches any
string including ``/``, ``?`` one character, ``[...]`` a class), and
conservative with respect to the target's real files: an overlap is reported
when some path *could* match both patterns, whether or not the target has such
a file. Frozen entries are git pathspecs (a file, a folder, or a glob); each is
widened to ``P`` and ``P/*`` before the check, a superset of what git matches.

Exit 0 when no two campaigns on one target have overlapping allowed paths,
1 when some do, 2 on an error (a campaign that does not load).
kgate never pushes a branch or opens a pull request: all its branches live in
its own clone under work/ (tests/test_audit.py keeps that true).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from packaging.utils import canonicalize_name

from kgate import campaign as campaign_mod
from kgate import paths
from kgate.campaign import Campaign
from kgate.errors import ConfigError

SCHEMA = "kgate.audit/1"
TIMED_SECTIONS = ("measure", "profile", "bench", "model")
NEVER_PUSHES = ("kgate never pushes branches or opens pull requests: its branches (kgate/<campaign>/...) "
                "live only in its own clone work/<campaign>/<gpu>/target.git; what to upstream, and how, "
                "is a person's decision")


_STAR = "*"
# characters tried first when building an example path, so examples read like paths
_FRIENDLY = "abcdefghijklmnopqrstuvwxyz0123456789_-."


@dataclass(frozen=True)
class _Char:
    """One single-character token of a glob: a literal, ``?`` or a ``[...]`` class."""

    text: str                      # the pattern text of the token
    regex: re.Pattern[str]         # fnmatch's own translation of the token
    hints: frozenset[str]          # characters where its membership can change

    def accepts(self, ch: str) -> bool:
        return self.regex.match(ch) is not None


@lru_cache(maxsize=4096)
def _tokens(pattern: str) -> tuple[str | _Char, ...]:
    """Split a glob into ``*`` and single-character tokens, exactly as ``fnmatch.translate`` scans it.

    Each ``[...]`` token is compiled by ``fnmatch.translate`` itself, so its
    meaning (negation, ranges, a leading ``]``, empty classes) is fnmatch's.
    """
    out: list[str | _Char] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if not out or out[-1] != _STAR:
                out.append(_STAR)
            i += 1
            continue
        if c == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j < n:
                text = pattern[i:j + 1]
                hints = set()
                for ch in text[1:-1]:
                    hints.update(chr(x) for x in (ord(ch) - 1, ord(ch), ord(ch) + 1) if 0 <= x <= sys.maxunicode)
                out.append(_Char(text, re.compile(fnmatch.translate(text)), frozenset(hints)))
                i = j + 1
                continue
            # an unclosed '[' is a literal
        text = c
        hints = frozenset() if c == "?" else frozenset({c})
        out.append(_Char(text, re.compile(fnmatch.translate(text)), hints))
        i += 1
    return tuple(out)


def _common_char(a: _Char, b: _Char) -> str | None:
    """A character both tokens accept, or None.

    Exact: a class is a union of ranges (or its complement), so its membership
    only changes at a range's first character or just after its last one; a
    common character, if any exists, is therefore found among the characters
    of both tokens, their neighbours, and U+0000.
    """
    for ch in _FRIENDLY:
        if a.accepts(ch) and b.accepts(ch):
            return ch
    for ch in sorted(a.hints | b.hints | {"\0"}):
        if a.accepts(ch) and b.accepts(ch):
            return ch
    return None


def glob_overlap(a: str, b: str) -> str | None:
    """A path that matches both globs under ``fnmatch.fnmatchcase``, or None when no string can.

    A walk over pairs of token positions (the product of the two patterns'
    automata), memoized: at most len(a) * len(b) states.
    """
    ta, tb = _tokens(a), _tokens(b)
    memo: dict[tuple[int, int], str | None] = {}

    def walk(i: int, j: int) -> str | None:
        key = (i, j)
        if key in memo:
            return memo[key]
        res: str | None = None                        # i + j grows on every step: no cycles
        if i == len(ta) and j == len(tb):
            res = ""
        elif i < len(ta) and ta[i] == _STAR:
            res = walk(i + 1, j)                      # the star matches nothing more
            if res is None and j < len(tb):
                if tb[j] == _STAR:
                    res = walk(i, j + 1)
                else:                                  # the star swallows b's next character
                    ch = _common_char(tb[j], _tokens("?")[0])
                    rest = walk(i, j + 1) if ch is not None else None
                    res = None if rest is None else ch + rest
        elif j < len(tb) and tb[j] == _STAR:
            res = walk(i, j + 1)
            if res is None and i < len(ta):
                ch = _common_char(ta[i], _tokens("?")[0])
                rest = walk(i + 1, j) if ch is not None else None
                res = None if rest is None else ch + rest
        elif i < len(ta) and j < len(tb):
            ch = _common_char(ta[i], tb[j])           # both are single characters here
            rest = walk(i + 1, j + 1) if ch is not None else None
            res = None if rest is None else ch + rest
        memo[key] = res
        return res

    return walk(0, 0)


def _escape(literal: str) -> str:
    """A glob that matches exactly ``literal``."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in literal)


def pathspec_globs(spec: str) -> list[str]:
    """Globs covering everything a git pathspec (a file, a folder, or a glob) can match.

    A superset: ``P`` and ``P/*`` (a folder matches everything under it; a
    glob's ``*`` already crosses ``/`` in git's default pathspec matching),
    and for a pathspec with wildcards also its literal reading (git matches a
    file literally named ``a[1].py`` too).
    """
    spec = spec.rstrip("/") or spec
    bases = [_escape(spec)]
    if any(c in spec for c in "*?["):
        bases.insert(0, spec)
    return [g for base in bases for g in (base, base + "/*")]



@dataclass(frozen=True)
class Audited:
    """What the audit reads from one campaign."""

    name: str
    file: str
    target: str
    allowed: tuple[str, ...]
    frozen: tuple[str, ...]          # campaign frozen paths plus the gate's test files
    timed_declared: tuple[str, ...]  # which of TIMED_SECTIONS the file declares
    ops: dict[str, list[str]] = field(default_factory=dict)   # op -> timed row names
    notes: tuple[str, ...] = ()
    change: str | None = None        # the candidate's ``ref`` (a commit of the target), when it is one


def target_key(c: Campaign) -> str:
    """Target identity: the clone's resolved path and the baseline SHA, or the PyPI requirement."""
    t = c.data["target"]
    if "repo" in t:
        return f"repo:{c.repo_path.resolve()}@{t['repo']['baseline']}"
    name, _, version = t["pypi"]["requirement"].partition("==")
    return f"pypi:{canonicalize_name(name)}=={version}"


def _row_names(rows: Any) -> list[str]:
    out = []
    for r in rows or []:
        if isinstance(r, dict) and isinstance(r.get("name"), str):
            out.append(r["name"])
        elif isinstance(r, str):
            out.append(r)
    return out


def _model_ops(model: Any) -> list[str]:
    """Names a ``model`` section gives to what it times (its format is open: strings or a mapping)."""
    if isinstance(model, str):
        return [f"model:{model}"]
    if isinstance(model, list):
        return [op for m in model for op in _model_ops(m)]
    if isinstance(model, dict):
        for key in ("model_class", "callable", "name", "model", "module", "path", "id"):
            if isinstance(model.get(key), str):
                return [f"model:{model[key]}"]
        return ["model:<unnamed>"]
    return []


def timed_surfaces(raw: dict[str, Any]) -> tuple[tuple[str, ...], dict[str, list[str]]]:
    """(declared timed sections, op -> row names) from the campaign file as written.

    Read from the file as written, not the loaded campaign: loading fills
    schema defaults into ``profile`` and ``bench``, which declares nothing.
    """
    declared = tuple(s for s in TIMED_SECTIONS if raw.get(s) not in (None, {}, []))
    ops: dict[str, list[str]] = {}
    measure = raw.get("measure") if isinstance(raw.get("measure"), dict) else {}
    profile = raw.get("profile") if isinstance(raw.get("profile"), dict) else {}
    bench = raw.get("bench") if isinstance(raw.get("bench"), dict) else {}
    rows = set(_row_names(measure.get("rows")))
    rows |= set(_row_names((measure.get("cpu") or {}).get("rows") if isinstance(measure.get("cpu"), dict) else []))
    rows |= set(_row_names(profile.get("rows")))
    rows |= set(_row_names(bench.get("gated"))) | set(_row_names(bench.get("controls")))
    if isinstance(measure.get("callable"), str):
        ops[f"op:{measure['callable']}"] = sorted(rows)
    if isinstance(measure.get("registry"), str):
        ops[f"registry:{measure['registry']}"] = ["(rows read from the registry at BENCH_BASE)"]
    for op in _model_ops(raw.get("model")):
        ops.setdefault(op, [])
    if rows and not ops:
        ops["op:<undeclared>"] = sorted(rows)
    return declared, ops


def audit_campaign(c: Campaign) -> Audited:
    raw = yaml.safe_load(c.path.read_text()) or {}
    declared, ops = timed_surfaces(raw)
    frozen = tuple(dict.fromkeys([*c.data.get("frozen", []), *c.data["gate"]["tests"]]))
    return Audited(name=c.name, file=_display(c.path), target=target_key(c),
                   allowed=tuple(c.data["candidate"]["allowed_paths"]), frozen=frozen,
                   timed_declared=declared, ops=ops, notes=tuple(c.data.get("notes") or ()),
                   change=c.data["candidate"].get("ref"))


def _display(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(paths.PROJECT))
    except ValueError:
        return str(p)


def campaign_specs(arg: str | None) -> list[str]:
    """The campaigns to audit: the named ones (names or YAML paths, comma separated), else every file
    under config/campaigns/."""
    if arg:
        specs = [s.strip() for s in arg.split(",") if s.strip()]
        if not specs:
            raise ConfigError("--campaigns: no campaign named")
        return specs
    files = sorted(paths.CAMPAIGNS.glob("*.yaml"))
    if not files:
        raise ConfigError(f"no campaign files under {paths.CAMPAIGNS}")
    return [str(f) for f in files]



def _cross(globs_a: dict[str, list[str]], globs_b: dict[str, list[str]]) -> list[dict[str, str]]:
    """Every (entry of a, entry of b) whose globs intersect, with an example path."""
    out = []
    for ea, ga in globs_a.items():
        for eb, gb in globs_b.items():
            for x in ga:
                example = next((w for y in gb if (w := glob_overlap(x, y)) is not None), None)
                if example is not None:
                    out.append({"a": ea, "b": eb, "example": example})
                    break
    return out


def _allowed_globs(c: Audited) -> dict[str, list[str]]:
    return {g: [g] for g in c.allowed}


def _frozen_globs(c: Audited) -> dict[str, list[str]]:
    return {p: pathspec_globs(p) for p in c.frozen}


def compare(a: Audited, b: Audited) -> dict[str, Any]:
    """Overlaps of two campaigns on one target."""
    timed: dict[str, Any]
    shared_ops = sorted(set(a.ops) & set(b.ops))
    if not a.timed_declared and not b.timed_declared:
        timed = {"shared": [], "why": "none declared by either campaign"}
    elif not a.timed_declared or not b.timed_declared:
        missing = a.name if not a.timed_declared else b.name
        timed = {"shared": [], "why": f"{missing} declares no timed surface"}
    else:
        timed = {"shared": [{"op": op, "rows": sorted(set(a.ops[op]) & set(b.ops[op]))} for op in shared_ops],
                 "why": None if shared_ops else "no op timed by both"}
    allowed = _cross(_allowed_globs(a), _allowed_globs(b))
    # two campaigns judging one change (the same candidate commit) under different contracts change the same
    # files by construction: that is not two candidates stepping on each other
    same_change = a.change is not None and a.change == b.change
    return {
        "a": a.name, "b": b.name,
        "allowed": [] if same_change else allowed,
        "same_change": {"ref": a.change, "allowed": allowed} if same_change else None,
        "frozen": _cross(_frozen_globs(a), _frozen_globs(b)),
        "a_allowed_b_frozen": _cross(_allowed_globs(a), _frozen_globs(b)),
        "b_allowed_a_frozen": _cross(_allowed_globs(b), _frozen_globs(a)),
        "timed": timed,
    }


def lane(name: str) -> dict[str, str]:
    """A campaign's own folders and branches (``kgate.paths``); ``<gpu>`` stands for the device class."""
    return {"results": f"{paths.results(name, '<gpu>')}/", "work": f"{paths.work(name, '<gpu>')}/",
            "reports": f"{paths.report_dir(name, '<gpu>')}/", "branches": paths.branch(name, "...")}


def audit(specs: list[str]) -> dict[str, Any]:
    """Load the campaigns and compute every finding; raises ConfigError on a campaign that does not load."""
    audited = [audit_campaign(campaign_mod.load(s)) for s in specs]
    warnings: list[str] = []
    notices: list[str] = []
    by_name: dict[str, list[Audited]] = {}
    for a in audited:
        by_name.setdefault(a.name, []).append(a)
    for name, same in sorted(by_name.items()):
        if len(same) > 1:
            warnings.append(f"warning: lane collision: {', '.join(x.file for x in same)} all name campaign "
                            f"'{name}' and would share {paths.campaign_results(name)}/, "
                            f"{paths.work(name, '<gpu>').parent}/ and branches {paths.branch(name, '')}")
    groups: dict[str, list[Audited]] = {}
    for a in audited:
        groups.setdefault(a.target, []).append(a)
    targets = []
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda x: (x.name, x.file))
        pairs = []
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if a.name == b.name:
                    continue
                p = compare(a, b)
                pairs.append(p)
                for o in p["allowed"]:
                    warnings.append(f"warning: {a.name} and {b.name} (target {key}) may both change "
                                    f"{o['example']}: {a.name} allows {o['a']}, {b.name} allows {o['b']}")
                if p["same_change"]:
                    notices.append(f"note: {a.name} and {b.name} (target {key}) judge the same change "
                                   f"{str(p['same_change']['ref'])[:12]} under two contracts: their allowed paths "
                                   "overlap by construction")
                for side, x, y in (("a_allowed_b_frozen", a, b), ("b_allowed_a_frozen", b, a)):
                    for o in p[side]:
                        notices.append(f"note: {x.name} may change {o['example']} ({x.name} allows {o['a']}), "
                                       f"which {y.name} freezes ({o['b']}): landing {x.name} moves {y.name}'s gate")
                for s in p["timed"]["shared"]:
                    notices.append(f"note: {a.name} and {b.name} both time {s['op']}: run their timed stages on "
                                   f"different GPUs or one after the other (docs/lanes.md)")
        targets.append({"target": key, "campaigns": [m.name for m in members], "pairs": pairs})
    overlap = any(p["allowed"] for t in targets for p in t["pairs"])
    collision = any(len(v) > 1 for v in by_name.values())
    return {
        "schema": SCHEMA,
        "campaigns": [{"name": a.name, "file": a.file, "target": a.target, "allowed_paths": list(a.allowed),
                       "frozen_paths": list(a.frozen), "timed_sections": list(a.timed_declared),
                       "timed": a.ops, "notes": list(a.notes), "lane": lane(a.name)} for a in audited],
        "targets": targets,
        "warnings": warnings,
        "notices": notices,
        "never_pushes": NEVER_PUSHES,
        "exit": 1 if (overlap or collision) else 0,
    }



def _table(rows: list[list[list[str]]], indent: str = "  ") -> list[str]:
    """A plain-text table; each cell is a list of lines (one path per line)."""
    rows = [[cell or [""] for cell in r] for r in rows]
    widths = [max(len(line) for r in rows for line in r[k]) for k in range(len(rows[0]))]
    out = []
    for n, r in enumerate(rows):
        for k in range(max(len(cell) for cell in r)):
            parts = [(cell[k] if k < len(cell) else "").ljust(w) for cell, w in zip(r, widths)]
            out.append(indent + "  ".join(parts).rstrip())
        if n == 0:
            out.append(indent + "  ".join("-" * w for w in widths))
    return out


def _timed_cell(c: dict[str, Any]) -> list[str]:
    if not c["timed_sections"]:
        return ["none declared (no measure,", "profile, bench or model section)"]
    if not c["timed"]:
        return [f"{', '.join(c['timed_sections'])} declared,", "no op named"]
    return [f"{op.split(':', 1)[1]} ({len(rows)} rows)" if op.startswith("op:") else op
            for op, rows in c["timed"].items()]


def _overlap_cell(found: list[dict[str, str]]) -> list[str]:
    if not found:
        return ["none"]
    return [o["a"] if o["a"] == o["b"] else f"{o['a']} ~ {o['b']}" for o in found]


def render(result: dict[str, Any]) -> str:
    camps = {c["name"]: c for c in result["campaigns"]}
    lines = [f"kgate audit: {len(result['campaigns'])} campaign(s) on {len(result['targets'])} target(s)", ""]
    for t in result["targets"]:
        lines.append(f"target {t['target']}: {', '.join(t['campaigns'])}")
        rows = [[["campaign"], ["allowed paths"], ["frozen paths (+ gate tests)"], ["timed surfaces"]]]
        for name in t["campaigns"]:
            c = camps[name]
            rows.append([[name], c["allowed_paths"], c["frozen_paths"], _timed_cell(c)])
        lines += _table(rows)
        if t["pairs"]:
            lines.append("")
            rows = [[["pair"], ["allowed overlap"], ["frozen overlap"], ["allowed vs frozen"], ["timed overlap"]]]
            for p in t["pairs"]:
                cross = p["a_allowed_b_frozen"] + p["b_allowed_a_frozen"]
                timed = [x["op"] for x in p["timed"]["shared"]] or ["none", f"({p['timed']['why']})"]
                rows.append([[p["a"], f"x {p['b']}"], _overlap_cell(p["allowed"]), _overlap_cell(p["frozen"]),
                             sorted({o["example"] for o in cross}) or ["none"], timed])
            lines += _table(rows)
        else:
            lines.append("  (the only campaign on this target: nothing to overlap)")
        lines.append("")
    lines.append("notes (duplicate and upstream audits):")
    for c in result["campaigns"]:
        if c["notes"]:
            lines.append(f"  {c['name']}:")
            lines += [f"    - {n}" for n in c["notes"]]
        else:
            lines.append(f"  {c['name']}: none recorded (no duplicate or upstream audit noted in the campaign)")
    lines.append("")
    lines.append("lanes (each campaign's own; <gpu> is the device class):")
    for c in result["campaigns"]:
        ln = c["lane"]
        lines.append(f"  {c['name']}: {ln['results']}  {ln['work']}  {ln['reports']}  branches {ln['branches']}")
    lines.append("")
    lines += result["notices"]
    lines += result["warnings"]
    lines.append(result["never_pushes"] + ".")
    if result["exit"]:
        lines.append("result: overlap between campaigns on one target (exit 1)")
    else:
        lines.append("result: no allowed-path overlap between campaigns on one target (exit 0)")
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--campaigns", default=None, metavar="A,B,...",
                        help="campaign names or YAML paths, comma separated (default: every config/campaigns/*.yaml)")
    parser.add_argument("--json", default=None, metavar="OUT",
                        help=f"also write the findings as {SCHEMA} JSON to OUT ('-': JSON on stdout, no table)")


def run_audit(args: argparse.Namespace) -> int:
    """Print the table (and write JSON); 0 no overlap, 1 overlap. ConfigError propagates (exit 2)."""
    result = audit(campaign_specs(args.campaigns))
    if args.json == "-":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return int(result["exit"])
    sys.stdout.write(render(result))
    if args.json:
        from kgate.records import write_json
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json(out, result)
    return int(result["exit"])
