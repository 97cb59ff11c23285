"""The Triton kernels a change touches, read from the two versions of its source files.

Method: in every changed Python source file that imports Triton, a Triton
function is a function decorated with ``jit`` (``@triton.jit``, with or
without ``autotune``/``heuristics`` above it). A Triton function that
another one in the same file calls, and that no code launches
(``name[grid](...)``), is a device function; every other one is a kernel.
Versions are compared by their syntax trees without docstrings (formatting
and comments do not count; decorators, such as autotune configurations, do).
Over the change's files together (a kernel moved between files is the same
kernel):

- changed in place: a kernel in both versions whose tree differs; a kernel
  that calls a changed device function (in its file, or imported from the
  changed file by another file of the head); a kernel launched from a host
  function whose tree changed (its grid, block sizes or warps may have);
- removed: a kernel of the base that the head no longer has;
- added: a kernel only the head has.

Limits: kernels are known by function name (two kernels of one name in
different files are one entry); a launch through a variable, a kernel
generated at run time or a device function called under another name is not
seen; a kernel whose own source is unchanged but whose behaviour changes
through a constant or a Python helper it reads is reported only when its
launch call changed, and a launch call that changed only in the names of its
arguments is reported too.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field

from kgate.init.change import Change
from kgate.init.pyindex import PyIndex


@dataclass(frozen=True, slots=True)
class Kernels:
    """What the change does to Triton kernels: ``changed`` maps each to why; ``files`` maps each to its file."""

    changed: dict[str, str] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)

    @property
    def any(self) -> bool:
        return bool(self.changed or self.removed or self.added)


@dataclass(frozen=True, slots=True)
class _Module:
    jit: dict[str, ast.FunctionDef]
    kernels: frozenset[str]
    host: dict[str, ast.AST]
    launched_in: dict[str, dict[str, list[str]]]
    calls: dict[str, frozenset[str]]
    #: module-level values (name -> the trees of the statements that bind it) and the names each Triton function reads
    values: dict[str, str]
    reads: dict[str, frozenset[str]]


def _is_jit(dec: ast.expr) -> bool:
    d = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(d, ast.Attribute) and d.attr == "jit") or (isinstance(d, ast.Name) and d.id == "jit")


def _imports_triton(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "triton" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "triton":
            return True
    return False


def _launch_calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
            and isinstance(n.func.value, ast.Name)]


def _launches(node: ast.AST) -> frozenset[str]:
    """Names launched as ``name[grid](...)`` inside ``node``."""
    return frozenset(n.func.value.id for n in _launch_calls(node))  # type: ignore[attr-defined]


def _launch_shapes(node: ast.AST) -> dict[str, list[str]]:
    """Each kernel launched in ``node`` and the trees of its launch calls (grid, arguments, options)."""
    out: dict[str, list[str]] = {}
    for call in _launch_calls(node):
        out.setdefault(call.func.value.id, []).append(ast.dump(call))  # type: ignore[attr-defined]
    return {k: sorted(v) for k, v in out.items()}


def _called(node: ast.AST) -> frozenset[str]:
    return frozenset(n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name))


def _module(source: str | None) -> _Module | None:
    if source is None:
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if not _imports_triton(tree):
        return None
    jit: dict[str, ast.FunctionDef] = {}
    host: dict[str, ast.AST] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_is_jit(d) for d in node.decorator_list) and isinstance(node, ast.FunctionDef):
                jit[node.name] = node
            else:
                host.setdefault(node.name, node)
    launched = _launches(tree)
    calls = {n: _called(f) & set(jit) for n, f in jit.items()}
    device = {c for n in jit for c in calls[n] if c != n} - launched
    values: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        for name in {n.id for n in _scope(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}:
            values[name] = values.get(name, "") + ast.dump(node)
    reads = {n: _free_reads(f) for n, f in jit.items()}
    return _Module(jit=jit, kernels=frozenset(set(jit) - device), host=host,
                   launched_in={n: _launch_shapes(f) for n, f in host.items()}, calls=calls, values=values,
                   reads=reads)


_NESTED = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)


def _scope(node: ast.AST) -> list[ast.AST]:
    """The nodes of ``node`` in its own scope: comprehensions and lambdas (their own scopes) are not entered."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, _NESTED))
    return out


def _free_reads(fn: ast.FunctionDef) -> frozenset[str]:
    """Names a function (with its decorators) reads that are neither its parameters nor assigned in it."""
    a = fn.args
    params = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                              *([a.kwarg] if a.kwarg else [])]}
    names = [x for x in ast.walk(fn) if isinstance(x, ast.Name)]
    local = {x.id for x in names if isinstance(x.ctx, ast.Store)}
    return frozenset(x.id for x in names if isinstance(x.ctx, ast.Load)) - params - local


def _shape(node: ast.AST) -> str:
    """The tree of a function without its docstring, as text (line numbers excluded)."""
    n = copy.deepcopy(node)
    body = getattr(n, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        n.body = body[1:] or [ast.Pass()]
    return ast.dump(n)


def _callers(mod: _Module, changed_device: set[str], calls: dict[str, frozenset[str]] | None = None) -> dict[str, str]:
    """Kernels of ``mod`` that call one of ``changed_device`` directly or through other device functions
    (``calls``: who calls whom, default the module's own Triton functions)."""
    calls = mod.calls if calls is None else calls
    out: dict[str, str] = {}
    for k in mod.kernels:
        seen, stack = set(), [k]
        while stack:
            f = stack.pop()
            for c in calls.get(f, ()):
                if c in changed_device and k not in out:
                    out[k] = f"calls the changed device function {c}"
                if c not in seen and c not in mod.kernels:
                    seen.add(c)
                    stack.append(c)
    return out


def infer(change: Change, sources: list[str], head_index: PyIndex | None = None) -> Kernels:
    """The kernels the change's source files change, remove and add (module docstring)."""
    base_k: dict[str, tuple[str, str]] = {}
    head_k: dict[str, tuple[str, str]] = {}
    changed: dict[str, str] = {}
    files: dict[str, str] = {}
    changed_device: dict[str, set[str]] = {}
    for path in sources:
        if not path.endswith(".py"):
            continue
        b, h = _module(change.base_text(path)), _module(change.head_text(path))
        for mod, into in ((b, base_k), (h, head_k)):
            for name in (mod.kernels if mod else ()):
                into[name] = (_shape(mod.jit[name]), path)
        if b is None or h is None:
            continue
        moved = {n for n in set(b.values) | set(h.values) if b.values.get(n) != h.values.get(n)}
        for k in sorted(b.kernels & h.kernels):
            if h.reads[k] & moved:
                changed.setdefault(k, f"it reads the changed module-level value {sorted(h.reads[k] & moved)[0]}")
                files.setdefault(k, path)
        dev = {n for n in (set(b.jit) - b.kernels) & (set(h.jit) - h.kernels)
               if _shape(b.jit[n]) != _shape(h.jit[n]) or h.reads[n] & moved}
        changed_device[path] = dev
        for k, why in _callers(h, dev).items():
            changed.setdefault(k, why)
            files.setdefault(k, path)
        for name, launches in h.launched_in.items():
            before = b.launched_in.get(name, {})
            host_changed = name in b.host and _shape(b.host[name]) != _shape(h.host[name])
            for k in sorted(set(launches) & set(h.jit)):
                if k in before and before[k] != launches[k]:
                    changed.setdefault(k, f"its launch in {name} changed")
                    files.setdefault(k, path)
                elif k in before and host_changed:
                    # the launch call reads the same names, whose values the host function now sets otherwise
                    changed.setdefault(k, f"it is launched from {name}, whose code changed")
                    files.setdefault(k, path)
    for name in set(base_k) & set(head_k):
        if base_k[name][0] != head_k[name][0]:
            changed[name] = "its source changed"
        files.setdefault(name, head_k[name][1])
    if head_index is not None:
        for k, (why, path) in _importers(head_index, changed_device, set(sources)).items():
            changed.setdefault(k, why)
            files.setdefault(k, path)
    for name in set(base_k) - set(head_k):
        files[name] = base_k[name][1]
    for name in set(head_k) - set(base_k):
        files[name] = head_k[name][1]
    # a kernel that is new or gone is not "changed in place"
    changed = {k: v for k, v in changed.items() if k in base_k and k in head_k or k not in base_k and k not in head_k}
    return Kernels(changed=dict(sorted(changed.items())), removed=tuple(sorted(set(base_k) - set(head_k))),
                   added=tuple(sorted(set(head_k) - set(base_k))), files=dict(sorted(files.items())))


def _importers(index: PyIndex, changed_device: dict[str, set[str]], sources: set[str]) -> dict[str, tuple[str, str]]:
    """Kernels in other files of the head that call a changed device function imported from its file."""
    out: dict[str, tuple[str, str]] = {}
    wanted = {(path, name) for path, names in changed_device.items() for name in names}
    if not wanted:
        return out
    for path in sorted(index.files - sources):
        tree = index.tree(path)
        if tree is None or not _imports_triton(tree):
            continue
        local: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                src = index.absolute(node, path)
                for a in node.names:
                    if src and any((f, a.name) in wanted for f in index.resolve(src, a.name)):
                        local.add(a.asname or a.name)
        if not local:
            continue
        mod = _module((index.root / path).read_text(errors="replace"))
        if mod is None:
            continue
        calls = {n: _called(f) & (set(mod.jit) | local) for n, f in mod.jit.items()}
        for k, why in _callers(mod, local, calls).items():
            out.setdefault(k, (why, path))
    return out
