"""Static imports of a checkout: what a file's imports resolve to, and which tests reach a changed file.

Method: the Python files of a worktree (tracked and untracked, not ignored)
are parsed once each. A module name resolves under the import roots (the
target's ``python_path``: ``.``, ``src``, ...) to ``<module>.py`` or
``<module>/__init__.py``. ``from M import name`` resolves as Python does, to
the file that defines ``name``: ``M``'s file when it binds the name, followed
through its own ``from X import name`` re-exports (a package's
``__init__``) for a few steps, else the submodule ``M.name``; the
re-exporting files on the way are kept apart (frozen with the gate, not
followed when looking for covering tests); ``import a.b`` resolves to ``a/b``
alone (not every package ``__init__`` on the way, which would make every
file depend on a package root that imports everything). A test covers a
changed file when that file is reachable from the test's imports in at most
``DEPTH`` steps (a test of a layer reaches the op the layer imports), as the
dependent-test helpers of targets such as flash-linear-attention do.

Limits: imports done at run time (``importlib``, strings, plugins) and names
that a module builds dynamically are not seen; compiled extensions are
outside the index; a module that is reachable only through a package
``__init__`` imported for its side effects is not followed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kgate.source import git

#: import steps from a test to a changed file that still count as covering it
DEPTH = 4


@dataclass(frozen=True, slots=True)
class PyIndex:
    """The Python files of one worktree, their syntax trees (parsed on first use) and import roots."""

    root: Path
    import_roots: tuple[str, ...]
    files: frozenset[str]
    _trees: dict[str, ast.Module | None] = field(default_factory=dict, compare=False, repr=False)
    _deps: dict[str, frozenset[str]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, root: Path, import_roots: tuple[str, ...] = (".",)) -> PyIndex:
        listed = git.git("ls-files", "--cached", "--others", "--exclude-standard", "--", "*.py", cwd=root)
        return cls(root=root, import_roots=import_roots, files=frozenset(listed.splitlines()))

    def tree(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            try:
                self._trees[path] = ast.parse((self.root / path).read_bytes())
            except (SyntaxError, ValueError, OSError):
                self._trees[path] = None
        return self._trees[path]

    def module_file(self, module: str) -> str | None:
        """The file of a dotted module name under the import roots, None outside the checkout."""
        rel = module.replace(".", "/")
        for r in self.import_roots:
            stem = rel if r in (".", "") else f"{r.rstrip('/')}/{rel}"
            for cand in (f"{stem}.py", f"{stem}/__init__.py"):
                if cand in self.files:
                    return cand
        return None

    def module_of(self, path: str) -> str | None:
        """The dotted module name of a file under the first import root that holds it."""
        p = PurePosixPath(path)
        for r in self.import_roots:
            base = PurePosixPath(r)
            try:
                rel = p.relative_to(base) if r not in (".", "") else p
            except ValueError:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts and parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join(parts) if parts else None
        return None

    def absolute(self, node: ast.ImportFrom, path: str) -> str | None:
        """The absolute module a ``from ... import`` in ``path`` names (relative imports resolved)."""
        if not node.level:
            return node.module
        mod = self.module_of(path)
        if mod is None:
            return None
        parts = mod.split(".")
        if not path.endswith("__init__.py"):
            parts = parts[:-1]
        if node.level > 1:
            parts = parts[:len(parts) - (node.level - 1)]
        return ".".join([*parts, node.module] if node.module else parts) or None

    def resolve(self, module: str, name: str, depth: int = DEPTH) -> set[str]:
        """The file that defines ``name`` for ``from module import name`` (empty outside the checkout)."""
        return self._resolve(module, name, depth)[0]

    def _resolve(self, module: str, name: str, depth: int) -> tuple[set[str], set[str]]:
        """(the defining file, the files that re-export ``name`` on the way there)."""
        f = self.module_file(module)
        tree = self.tree(f) if f is not None else None
        if f is not None and tree is not None and depth > 0 and name not in _defined(tree):
            for node in _top_imports(tree):
                if not isinstance(node, ast.ImportFrom):
                    continue
                src = self.absolute(node, f)
                for alias in node.names:
                    if src and alias.name != "*" and (alias.asname or alias.name) == name:
                        found, via = self._resolve(src, alias.name, depth - 1)
                        return (found, via | {f}) if found else ({f}, set())
                    if src and alias.name == "*":
                        found, via = self._resolve(src, name, depth - 1)
                        if found:
                            return found, via | {f}
        if f is not None and tree is not None and name in _defined(tree):
            return {f}, set()
        # not bound by the package itself: Python imports the submodule of that name
        sub = self.module_file(f"{module}.{name}")
        if sub is not None:
            return {sub}, ({f} if f is not None else set())
        return ({f}, set()) if f is not None else (set(), set())

    def deps(self, path: str, *, via: bool = False) -> frozenset[str]:
        """The checkout's files that ``path``'s imports resolve to (any nesting level); ``via``: with the package
        files that re-export the names on the way (what the import executes besides the defining file)."""
        key = f"{path}\0{via}"
        if key in self._deps:
            return self._deps[key]
        out: set[str] = set()
        tree = self.tree(path)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                out |= {f for a in node.names if (f := self.module_file(a.name))}
            elif isinstance(node, ast.ImportFrom):
                src = self.absolute(node, path)
                if not src:
                    continue
                for a in node.names:
                    if a.name == "*":
                        out |= {f for f in [self.module_file(src)] if f}
                    else:
                        found, through = self._resolve(src, a.name, DEPTH)
                        out |= found | (through if via else set())
        out.discard(path)
        self._deps[key] = frozenset(out)
        return self._deps[key]

    def steps(self, path: str, targets: set[str], depth: int = DEPTH) -> int | None:
        """The fewest import steps from ``path`` to one of ``targets`` (1: one of its own imports resolves to
        it; each further step follows what those files import), None beyond ``depth`` steps past its own."""
        seen: set[str] = set()
        frontier = set(self.deps(path))
        for n in range(1, depth + 2):
            if frontier & targets:
                return n
            seen |= frontier
            frontier = {d for f in frontier for d in self.deps(f)} - seen
        return None

    def reaches(self, path: str, targets: set[str], depth: int = DEPTH) -> bool:
        """Whether one of ``targets`` is reachable from ``path``'s imports in at most ``depth`` steps past them."""
        return self.steps(path, targets, depth) is not None

    def conftests(self, path: str) -> list[str]:
        """Every ``conftest.py`` pytest loads for a test file: in its folder and each folder above."""
        out = []
        parts = PurePosixPath(path).parts[:-1]
        for i in range(len(parts) + 1):
            cand = "/".join([*parts[:i], "conftest.py"])
            if cand in self.files:
                out.append(cand)
        return out


def _top_imports(tree: ast.Module) -> list[ast.stmt]:
    """Import statements of the module body, including those under top-level if/try/with blocks."""
    out: list[ast.stmt] = []
    stack = list(tree.body)
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            stack[:0] = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                         *[s for h in getattr(node, "handlers", []) for s in h.body]]
    return out


def _defined(tree: ast.Module) -> set[str]:
    """Names a module defines itself at top level (functions, classes, assignments), not those it imports."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


def import_roots(files: frozenset[str], sources: list[str]) -> tuple[str, ...]:
    """The target's import roots: the folder above the top package of each changed source file, then ``.``."""
    roots: list[str] = []
    for path in sources:
        if not path.endswith(".py"):
            continue
        folder = PurePosixPath(path).parent
        while str(folder) not in (".", "") and f"{folder}/__init__.py" in files:
            folder = folder.parent
        r = str(folder) if str(folder) not in ("", ".") else "."
        if r != "." and r not in roots and folder != PurePosixPath(path).parent:  # a package below a plain folder
            roots.append(r)
    return (*roots, ".")
