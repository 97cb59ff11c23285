"""The change split by kind: test additions (the fixture), source (the candidate), the rest left out.

Method, per changed path (``kind_of``): a path with a folder named ``tests``,
``test`` or ``testing`` above it, or a ``conftest.py`` anywhere, is a test
path (a test module when its name is ``test_*.py`` or ``*_test.py``, test
support otherwise); documentation, examples, CI and repository configuration,
packaging metadata and benchmark scripts are left out (named, with why); every
other path is source, the candidate.

A test path joins the fixture only when it adds and changes nothing that
existed (``analyse_test``): a new file (not a ``conftest.py`` or
``__init__.py`` beside existing tests, which would change how they run), or a
Python file whose base version survives line for line, with new top-level
statements between the old ones (``difflib`` on lines; an insertion is slid
over equal lines to a place between statements, as a diff may show it inside
one). The new statements must be definitions (functions, classes, imports,
assignments, strings) that bind no name the base binds, add no autouse
fixture, no ``pytest_*`` hook and no module-wide ``pytestmark``,
``pytest_plugins`` or ``collect_ignore``: each would change the existing
tests. Anything else (an edited line, a deleted file, an edited conftest or
test data) is an edit of the correctness contract, reported with why;
``numerics.compare`` names changed tolerances.

The fixture's edits are an overlay (``kgate.overlay/1``): a new file is a
``create``, statements added at the end an ``append``, statements added in
between an anchored ``replace`` whose anchor grows line by line until it is
unique in the file as the earlier edits left it (``anchored_edits``; the same
builds arbitrary edits of existing tests when the user puts them into the
fixture with ``--test-edits fixture``). Limits: the rules read the syntax
tree, not what a statement does at run time (a new helper function that an
existing test already calls by a name it looked up dynamically is not seen);
a binary edit cannot be an overlay edit.
"""

from __future__ import annotations

import ast
import difflib
import fnmatch
from dataclasses import dataclass
from pathlib import PurePosixPath

from kgate.source import numerics

TEST_FOLDERS = frozenset({"tests", "test", "testing"})
TEST_MODULES = ("test_*.py", "*_test.py")
#: module-level names pytest reads for the whole module, and hook functions: adding one changes the existing tests
MODULE_WIDE = frozenset({"pytestmark", "pytest_plugins", "collect_ignore", "collect_ignore_glob"})
#: top-level statements a test addition may add
ADDITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Assign,
             ast.AnnAssign)
#: what is left out of both the fixture and the candidate, and why
LEFT_OUT = {"docs": "documentation", "examples": "examples", "ci": "CI and repository configuration",
            "packaging": "packaging metadata (kgate does not reinstall the target)",
            "bench": "benchmark scripts (the registry is read at BENCH_BASE)"}
_CI = (".github/", ".gitlab/", ".circleci/", ".buildkite/")
_CI_FILES = frozenset({".pre-commit-config.yaml", ".gitignore", ".gitattributes", ".editorconfig", "codecov.yml",
                       ".readthedocs.yaml", ".readthedocs.yml", ".flake8", ".pylintrc", ".clang-format"})
_DOC_NAMES = ("README", "LICENSE", "CHANGELOG", "AUTHORS", "CONTRIBUTING", "CITATION", "NOTICE")
_PACKAGING = frozenset({"setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "environment.yml"})


def kind_of(path: str) -> str:
    """test, test_support, docs, examples, ci, packaging, bench or source."""
    p = PurePosixPath(path)
    name, top = p.name, p.parts[0] if len(p.parts) > 1 else ""
    if name == "conftest.py":
        return "test_support"
    if TEST_FOLDERS & set(p.parts[:-1]):
        return "test" if is_test_module(path) else "test_support"
    if path.startswith(_CI) or name in _CI_FILES:
        return "ci"
    if top in ("docs", "doc") or p.suffix in (".md", ".rst") or name.upper().startswith(_DOC_NAMES):
        return "docs"
    if top in ("examples", "example"):
        return "examples"
    if name in _PACKAGING or name.startswith("requirements"):
        return "packaging"
    if top in ("benchmarks", "benchmark", "bench"):
        return "bench"
    if is_test_module(path):
        return "test"
    return "source"


def is_test_module(path: str) -> bool:
    name = PurePosixPath(path).name
    return any(fnmatch.fnmatchcase(name, g) for g in TEST_MODULES)


@dataclass(frozen=True, slots=True)
class Edit:
    """One overlay edit of a target file: ``create`` (content), ``append`` (content) or ``replace`` (find, with)."""

    path: str
    op: str
    content: bytes = b""
    find: str = ""
    with_: str = ""


@dataclass(frozen=True, slots=True)
class TestChange:
    """What a changed test path is: an addition with its overlay edits, or an edit of the contract with why."""

    path: str
    addition: bool
    why: str
    edits: tuple[Edit, ...] = ()


def analyse_test(path: str, status: str, base: bytes | None, head: bytes | None,
                 base_files: frozenset[str]) -> TestChange:
    """Whether a changed test path only adds (and the fixture edits that add it), else why it edits the contract."""
    if status == "D":
        return TestChange(path, False, "deletes an existing test file" if is_test_module(path)
                          else "deletes a test support file")
    if status == "A":
        name = PurePosixPath(path).name
        folder = str(PurePosixPath(path).parent)
        if name in ("conftest.py", "__init__.py") and _has_tests_below(base_files, folder):
            return TestChange(path, False, f"adds {name} beside existing tests, which changes how they run")
        assert head is not None
        return TestChange(path, True, "new file", (Edit(path, "create", content=head),))
    assert base is not None and head is not None
    if PurePosixPath(path).name == "conftest.py":
        return TestChange(path, False, "edits a conftest.py, which every test below it loads")
    if not path.endswith(".py"):
        return TestChange(path, False, "edits test data or support files")
    b_text, h_text = base.decode("utf-8", errors="replace"), head.decode("utf-8", errors="replace")
    why = _only_adds(b_text, h_text)
    if why is not None:
        tol = [m for m in numerics.compare(b_text, h_text, path) if ": tolerance " in m]
        return TestChange(path, False, why + (f"; tolerances change ({tol[0].split(': ', 1)[1]})" if tol else ""))
    edits = anchored_edits(path, b_text, h_text)
    if edits is None:
        return TestChange(path, False, "adds tests at places no unique anchor marks (cannot be an overlay edit)")
    n = len(edits)
    return TestChange(path, True, f"adds to the file ({n} overlay edit{'s' if n > 1 else ''})", tuple(edits))


def _has_tests_below(base_files: frozenset[str], folder: str) -> bool:
    prefix = "" if folder == "." else folder + "/"
    return any(f.startswith(prefix) and is_test_module(f) for f in base_files)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _spans(tree: ast.Module) -> list[tuple[int, int, ast.stmt]]:
    """(first line with decorators, last line, statement) of every top-level statement."""
    out = []
    for node in tree.body:
        decos = [d.lineno for d in getattr(node, "decorator_list", [])]
        out.append((min([*decos, node.lineno]), node.end_lineno or node.lineno, node))
    return out


def _name(node: ast.stmt) -> str:
    return getattr(node, "name", None) or type(node).__name__.lower()


def _inside(p: int, spans: list[tuple[int, int, ast.stmt]]) -> ast.stmt | None:
    """The statement an insertion after base line ``p`` (1-based; 0 = at the top) would fall into."""
    return next((n for s, e, n in spans if s <= p < e), None)


def _insertions(b: list[str], h: list[str]) -> list[tuple[int, list[str]]] | str:
    """Insert-only opcodes as (position, lines), or why the change is more than insertions."""
    out = []
    for tag, i1, _i2, j1, j2 in difflib.SequenceMatcher(None, b, h, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag != "insert":
            return f"changes or deletes line {i1 + 1} of the base version ({b[i1].strip()[:60]!r})"
        out.append((i1, h[j1:j2]))
    return out


def _slide(b: list[str], ins: list[tuple[int, list[str]]], spans: list[tuple[int, int, ast.stmt]]
           ) -> list[tuple[int, list[str]]] | str:
    """Move each insertion over equal lines (the same text) to a place between top-level statements."""
    out = []
    for k, (p, lines) in enumerate(ins):
        lo = ins[k - 1][0] if k else 0
        hi = ins[k + 1][0] if k + 1 < len(ins) else len(b)
        options = [(p, lines)]
        q, cur = p, list(lines)
        while q > lo and b[q - 1] == cur[-1]:
            cur, q = [b[q - 1], *cur[:-1]], q - 1
            options.append((q, cur))
        q, cur = p, list(lines)
        while q < hi and b[q] == cur[0]:
            cur, q = [*cur[1:], b[q]], q + 1
            options.append((q, cur))
        good = [o for o in options if _inside(o[0], spans) is None]
        if not good:
            node = _inside(p, spans)
            assert node is not None
            return f"inserts lines into {_name(node)} (line {p + 1})"
        out.append(min(good, key=lambda o: abs(o[0] - p)))
    return out


def _bound(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds in the module (over-approximated for compound statements)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Import):
        return {a.asname or a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom):
        return {a.asname or a.name for a in node.names}
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in sub.names}
    return names


def _autouse(node: ast.stmt) -> bool:
    for d in getattr(node, "decorator_list", []):
        if isinstance(d, ast.Call) and any(k.arg == "autouse" and not (isinstance(k.value, ast.Constant)
                                                                        and k.value.value is False)
                                           for k in d.keywords):
            return True
    return False


def _new_statement_problem(node: ast.stmt, base_names: set[str]) -> str | None:
    line = getattr(node, "lineno", 0)
    docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    if not isinstance(node, ADDITIONS) and not docstring:
        return f"adds a module-level statement that runs when the tests are collected (line {line})"
    names = _bound(node)
    if "*" in names:
        return f"adds a star import, which may rebind the module's names (line {line})"
    wide = sorted(n for n in names if n in MODULE_WIDE or n.startswith("pytest_"))
    if wide:
        return f"adds `{wide[0]}`, which applies to every test of the module (line {line})"
    again = sorted(names & base_names)
    if again:
        return f"rebinds `{again[0]}`, which the base version defines (line {line})"
    if _autouse(node):
        return f"adds the autouse fixture `{_name(node)}`, which runs for the existing tests too (line {line})"
    return None


def _only_adds(base: str, head: str) -> str | None:
    """None when ``head`` is ``base`` plus new top-level definitions only; else why not (one phrase)."""
    if base and not base.endswith("\n") and head.startswith(base + "\n"):
        base += "\n"
    try:
        b_tree, h_tree = ast.parse(base), ast.parse(head)
    except SyntaxError as exc:
        return f"does not parse as Python (line {exc.lineno})"
    b, h = _lines(base), _lines(head)
    ins = _insertions(b, h)
    if isinstance(ins, str):
        return ins
    b_spans = _spans(b_tree)
    slid = _slide(b, ins, b_spans)
    if isinstance(slid, str):
        return slid
    inserted: list[bool] = []
    at = 0
    for p, lines in slid:
        inserted += [False] * (p - at) + [True] * len(lines)
        at = p
    inserted += [False] * (len(b) - at)
    old, base_names = [], set().union(*(_bound(n) for _, _, n in b_spans)) if b_spans else set()
    for s, e, node in _spans(h_tree):
        flags = inserted[s - 1:e]
        if all(flags):
            why = _new_statement_problem(node, base_names)
            if why:
                return why
        elif any(flags):
            return f"changes {_name(node)} (line {s})"
        else:
            old.append(node)
    if [ast.dump(n) for n in old] != [ast.dump(n) for _, _, n in b_spans]:
        return "changes the module's existing statements"
    return None


def anchored_edits(path: str, base: str, head: str) -> list[Edit] | None:
    """Overlay edits that turn ``base`` into ``head``: an ``append`` for lines added at the end, else a
    ``replace`` per changed block whose anchor (the block plus the fewest lines around it) is unique in the file
    as the earlier edits leave it. None when some block has no unique anchor."""
    if base and not base.endswith("\n") and head.startswith(base + "\n"):
        return [Edit(path, "append", content=head[len(base) + 1:].encode())] if head != base + "\n" else []
    b, h = _lines(base), _lines(head)
    ops = [op for op in difflib.SequenceMatcher(None, b, h, autojunk=False).get_opcodes() if op[0] != "equal"]
    edits: list[Edit] = []
    current, prev_end = base, 0
    for tag, i1, i2, j1, j2 in ops:
        if tag == "insert" and i1 == len(b):
            edits.append(Edit(path, "append", content="".join(h[j1:j2]).encode()))
            current += "".join(h[j1:j2])
            continue
        found = None
        for n in range(0, len(b) + 1):
            # context after the block first (an insertion anchors on what follows it), never into an earlier edit
            for after in range(n, -1, -1):
                before = n - after
                if i1 - before < prev_end or i2 + after > len(b):
                    continue
                find = "".join(b[i1 - before:i2 + after])
                if find.strip() and current.count(find) == 1:
                    found = (find, "".join(b[i1 - before:i1] + h[j1:j2] + b[i2:i2 + after]))
                    break
            if found:
                break
        if found is None:
            return None
        edits.append(Edit(path, "replace", find=found[0], with_=found[1]))
        current = current.replace(found[0], found[1])
        prev_end = i2
    return edits
