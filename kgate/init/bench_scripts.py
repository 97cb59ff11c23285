"""Shapes from a target's own benchmark scripts, where it has no registry: rows for the user to confirm.

Format ``liger-scripts`` (Liger-Kernel's ``benchmark/scripts/benchmark_<op>.py``): a dict literal with the
keys ``x_name`` (the swept dimension), ``x_values`` (its values) and optionally
``extra_benchmark_configs`` (a list of dicts of the other dimensions), which the script hands to its
runner. The script of a changed source file ``.../<stem>.py`` is ``benchmark/scripts/benchmark_<stem>.py``
at the base.

Method: the script is read with ``ast``, never imported or run (it is the target's code and imports
torch). A value may be a number, a list, tuple or dict of values, arithmetic on them, ``range(...)``, a
list comprehension over one iterable, or a name bound earlier in the module (at its top level or in its
``if __name__ == "__main__":`` block) to such a value. Rows: one per extra config and x value, keys the
config's numeric values then x, named by them (``B8_T2048_V4096``), the same row from two sweep dicts
once. A config key whose value is no number (``torch.float32``, ``"batchmean"``) is left out of the rows
and named in the account.

Limits: shapes only, never inputs (the scripts make them inside their timing functions); what is not a
literal sweep (a sweep built by a function call, read from a file) gives no rows, said in one line; the
values are the script's at the base, which may differ from those the change's authors timed.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate.errors import KgateError

FORMAT = "liger-scripts"
FOLDER = "benchmark/scripts"
#: the most values a range or comprehension may give (a sweep is a few dozen)
MAX_VALUES = 4096
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Div: operator.truediv, ast.Pow: operator.pow, ast.Mod: operator.mod}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}


class Unreadable(KgateError):
    """A value that is not a literal sweep (internal: becomes an account line, never escapes this module)."""


@dataclass(frozen=True, slots=True)
class ScriptRows:
    """The rows of one benchmark script, what was left out of them and why."""

    file: str
    x_name: str
    rows: tuple[dict[str, Any], ...]
    left_out: tuple[str, ...]
    #: names whose value came from the first branch of an ``if`` (a device-sized sweep), with the condition
    conditional: tuple[str, ...] = ()


def script_for(base: Path, sources: list[str]) -> Path | None:
    """The benchmark script of the first changed source file that has one at the base."""
    for src in sources:
        p = base / FOLDER / f"benchmark_{Path(src).stem}.py"
        if Path(src).suffix == ".py" and p.is_file():
            return p
    return None


def _value(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, names) for e in node.elts]
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_value(k, names): _value(v, names) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, names)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _value(node.left, names), _value(node.right, names)
        if isinstance(node.op, ast.Pow) and (not isinstance(right, int) or abs(right) > 64):
            raise Unreadable(ast.unparse(node))
        try:
            return _BINOPS[type(node.op)](left, right)
        except (TypeError, ZeroDivisionError) as exc:
            raise Unreadable(ast.unparse(node)) from exc
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" \
            and not node.keywords and 1 <= len(node.args) <= 3:
        args = [_value(a, names) for a in node.args]
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in args) or len(range(*args)) > MAX_VALUES:
            raise Unreadable(ast.unparse(node))
        return list(range(*args))
    if isinstance(node, ast.ListComp) and len(node.generators) == 1:
        gen = node.generators[0]
        if not isinstance(gen.target, ast.Name) or gen.is_async:
            raise Unreadable(ast.unparse(node))
        out = []
        for item in _value(gen.iter, names):
            scope = {**names, gen.target.id: item}
            if all(_value(cond, scope) for cond in gen.ifs):
                out.append(_value(node.elt, scope))
            if len(out) > MAX_VALUES:
                raise Unreadable(ast.unparse(node))
        return out
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        return _COMPARE[type(node.ops[0])](_value(node.left, names), _value(node.comparators[0], names))
    raise Unreadable(ast.unparse(node))



def _scopes(tree: ast.Module) -> list[ast.stmt]:
    """The module's top-level statements with its ``if __name__ == "__main__":`` block's spliced in."""
    out: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and "__main__" in ast.unparse(stmt.test):
            out += stmt.body
        else:
            out.append(stmt)
    return out


def _names(stmts: list[ast.stmt], notes: list[str], src: str) -> dict[str, Any]:
    """Names bound by plain assignments in ``stmts`` to readable values, in order (a later binding wins). In an
    ``if`` (a sweep sized by the device: ``if gpu_memory_gbs >= 66: x_max = 17``) the first branch's bindings
    count, each said in ``notes`` with its condition."""
    names: dict[str, Any] = {}
    for stmt in stmts:
        if isinstance(stmt, ast.If):
            for inner in stmt.body:
                if _bind(inner, names):
                    test = ast.get_source_segment(src, stmt.test) or ast.unparse(stmt.test)
                    notes.append(f"{ast.unparse(inner)} (the first branch of `if {test}`)")
        else:
            _bind(stmt, names)
    return names


def _bind(stmt: ast.stmt, names: dict[str, Any]) -> bool:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        try:
            names[stmt.targets[0].id] = _value(stmt.value, names)
            return True
        except Unreadable:
            names.pop(stmt.targets[0].id, None)
    return False


def _sweeps(tree: ast.Module) -> list[ast.Dict]:
    keyed = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"x_name", "x_values"} <= keys:
                keyed.append(node)
    return keyed


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read(base: Path, sources: list[str]) -> ScriptRows | str | None:
    """The rows of the changed code's benchmark script; a one-line reason when it has one but no readable
    sweep; None when it has none."""
    path = script_for(base, sources)
    if path is None:
        return None
    rel = path.relative_to(base).as_posix()
    src = path.read_text(errors="replace")
    try:
        tree = ast.parse(src, filename=rel)
    except SyntaxError as exc:
        return f"{rel}: not Python this interpreter parses ({exc.msg}, line {exc.lineno})"
    notes: list[str] = []
    names = _names(_scopes(tree), notes, src)
    rows: dict[str, dict[str, Any]] = {}
    left_out: list[str] = []
    x_name = ""
    reasons = []
    for sweep in _sweeps(tree):
        fields = {k.value: v for k, v in zip(sweep.keys, sweep.values, strict=True) if isinstance(k, ast.Constant)}
        try:
            x_name = _value(fields["x_name"], names)
            xs = _value(fields["x_values"], names)
        except Unreadable as exc:
            reasons.append(f"x_values is not a literal sweep ({str(exc)[:80]})")
            continue
        extras: list[dict[str, Any]] = [{}]
        if "extra_benchmark_configs" in fields:
            extras = _extras(fields["extra_benchmark_configs"], names, left_out)
        if not isinstance(x_name, str) or not isinstance(xs, list) or not all(_number(x) for x in xs):
            reasons.append(f"x_name {x_name!r} with x_values that are not numbers")
            continue
        for extra in extras:
            for x in xs:
                row = {**extra, x_name: x}
                rows.setdefault(repr(sorted(row.items())), row)
    if not rows:
        why = "; ".join(dict.fromkeys(reasons)) or "no dict with x_name and x_values"
        return f"{rel}: no rows read ({why})"
    return ScriptRows(rel, x_name, _named(list(rows.values())), tuple(dict.fromkeys(left_out)),
                      tuple(dict.fromkeys(notes)))


def _named(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Each row with a name: its integer values (``B8_T2048_V4096``), or every value where those collide."""
    def name(row: dict[str, Any], every: bool) -> str:
        return "_".join(f"{k}{v}" for k, v in row.items() if every or isinstance(v, int))

    every = len({name(r, False) for r in rows}) < len(rows)
    return tuple({"name": name(r, every), **r} for r in rows)


def _extras(node: ast.AST, names: dict[str, Any], left_out: list[str]) -> list[dict[str, Any]]:
    """The extra configs' numeric values, each other key named in ``left_out`` with its source. The list may be
    written out (each value read on its own) or a name bound to it (read whole)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        configs: list[Any] = node.elts
    else:
        try:
            configs = _value(node, names)
        except Unreadable as exc:
            left_out.append(f"extra_benchmark_configs ({str(exc)[:60]})")
            return [{}]
    out = []
    for item in configs if isinstance(configs, list) else []:
        if isinstance(item, dict):
            pairs = [(k, v, repr(v)) for k, v in item.items()]
        elif isinstance(item, ast.Dict):
            pairs = [(k.value, *_lenient(v, names)) for k, v in zip(item.keys, item.values, strict=True)
                     if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        else:
            left_out.append(f"extra_benchmark_configs entry ({ast.unparse(item)[:60]})")
            continue
        config: dict[str, Any] = {}
        for key, value, shown in pairs:
            if _number(value):
                config[key] = value
            else:
                left_out.append(f"{key} ({shown[:40]})")
        out.append(config)
    return out or [{}]


def _lenient(node: ast.AST, names: dict[str, Any]) -> tuple[Any, str]:
    """The value (None when unreadable) and its source."""
    try:
        return _value(node, names), ast.unparse(node)
    except Unreadable:
        return None, ast.unparse(node)
