"""Bundles of one stack's kernel cache: ``python -m kgate cache export|import|info``.

Method: a bundle is a tar file (gzip-compressed when its name ends in ``.gz`` or ``.tgz``) whose first
member is ``manifest.json`` (schema ``kgate.cache-bundle/1``: the stack's facts, what it holds, and the
sha256 of every file), followed by the Triton cache entries it carries as ``triton/<entry>/<file>``
and the target-cache files as ``target/<VARIABLE>/<path>``. ``export`` takes every entry holding
autotune timings (``*.autotune.json``) and every target-cache file; with ``kernels=True`` also the
compiled kernels and launchers. ``import`` reads the manifest first and refuses a bundle of another
stack with one line naming every differing fact, before anything is written; then it checks every
member against the manifest (a name outside the layout, a link, or a wrong sha256 is refused), unpacks
each entry into a temporary folder beside the cache and renames it into place, keeps an entry that
is already there, and adds what it placed to ``imported.json`` (a stage that then starts on
nothing else starts ``seeded``, ``kgate.cache.store``).

Limits: a bundle is as trustworthy as its maker: Triton loads the compiled kernels it carries
without recompiling, so import bundles you made or trust. The stack check compares the facts of
``kgate.cache.stack.FIELDS``; Triton's own key (its version and source, the ptxas version, the
architecture) still decides per entry whether an imported entry is ever used.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgate import paths
from kgate.cache.stack import Stack
from kgate.cache.store import IMPORTED_SCHEMA, MANIFEST_SCHEMA, KernelCache, entry_kind
from kgate.errors import ConfigError, IncompleteData
from kgate.records import write_json

BUNDLE_SCHEMA = "kgate.cache-bundle/1"
MANIFEST = "manifest.json"
_TRITON_MEMBER = re.compile(r"^triton/([A-Za-z0-9_=-]+)/([^/]+)$")
_TARGET_MEMBER = re.compile(r"^target/([A-Za-z_][A-Za-z0-9_]*)/(.+)$")


@dataclass(frozen=True, slots=True)
class Imported:
    """What one import did."""

    placed: int
    kept: int
    target_files: int
    stack: Stack


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _selected(cache: KernelCache, kernels: bool) -> list[tuple[str, Path]]:
    """(member name, file) of everything an export carries, in a stable order."""
    out: list[tuple[str, Path]] = []
    if cache.triton.is_dir():
        for entry in sorted(p for p in cache.triton.iterdir() if p.is_dir() and not p.name.startswith(".")):
            files = sorted(f for f in entry.iterdir() if f.is_file() and not f.name.startswith("."))
            kind = entry_kind([f.name for f in files])
            if kind == "autotune" or kernels:
                out += [(f"triton/{entry.name}/{f.name}", f) for f in files]
    target = cache.folder / "target"
    if target.is_dir():
        for f in sorted(p for p in target.rglob("*") if p.is_file() and not p.name.startswith(".")):
            out.append((f"target/{f.relative_to(target)}", f))
    return out


def export(cache: KernelCache, out: Path, *, kernels: bool = False) -> dict[str, Any]:
    """Write the bundle of ``cache`` to ``out`` (atomically: a temporary file beside it, renamed); return its manifest."""
    members = _selected(cache, kernels)
    files = {name: _sha256(f) for name, f in members}
    entries = sorted({name.split("/")[1] for name in files if name.startswith("triton/")})
    manifest = {
        "schema": BUNDLE_SCHEMA, "stack": cache.stack.as_dict(), "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kernels": kernels, "source": str(cache.folder),
        "counts": {"entries": len(entries), "files": len(files),
                   "autotune": sum(1 for n in files if n.endswith(".autotune.json")),
                   "target_files": sum(1 for n in files if n.startswith("target/"))},
        "files": files,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{secrets.token_hex(6)}.tmp"
    mode = "w:gz" if out.name.endswith((".gz", ".tgz")) else "w"
    try:
        with tmp.open("xb") as fh, tarfile.open(fileobj=fh, mode=mode) as tf:  # type: ignore[call-overload]
            data = json.dumps(manifest, indent=1).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tf.addfile(info, io.BytesIO(data))
            for name, f in members:
                tf.add(str(f), arcname=name, recursive=False)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return manifest


def read_manifest(tf: tarfile.TarFile, bundle: Path) -> dict[str, Any]:
    first = tf.next()
    if first is None or first.name != MANIFEST or not first.isfile():
        raise IncompleteData(f"cache import: {bundle} is not a kgate cache bundle (its first member is not {MANIFEST})")
    fh = tf.extractfile(first)
    assert fh is not None
    try:
        man = json.loads(fh.read())
    except json.JSONDecodeError as exc:
        raise IncompleteData(f"cache import: {bundle}: {MANIFEST} is not JSON ({exc})") from exc
    if man.get("schema") != BUNDLE_SCHEMA:
        raise IncompleteData(f"cache import: {bundle} has schema {man.get('schema')!r}, not {BUNDLE_SCHEMA}")
    return man


def check_stack(man: dict[str, Any], here: Stack, bundle: Path) -> Stack:
    """The bundle's stack, which must be ``here``; else one line naming every difference."""
    try:
        theirs = Stack.from_dict(man["stack"])
    except (KeyError, TypeError, ValueError) as exc:
        raise IncompleteData(f"cache import: {bundle}: its manifest names no valid stack ({exc})") from exc
    diffs = here.differences(theirs)
    if diffs:
        raise ConfigError(f"cache import: {bundle} is a bundle of another stack: {'; '.join(diffs)}; "
                          f"nothing imported")
    return theirs


def import_bundle(root: Path, bundle: Path, here: Stack) -> Imported:
    """Check ``bundle`` against ``here`` and place its entries in ``here``'s cache under ``root``."""
    cache = KernelCache(root, here)
    with tarfile.open(bundle, mode="r:*") as tf:
        man = read_manifest(tf, bundle)
        check_stack(man, here, bundle)
        cache.prepare()
        expected: dict[str, str] = man.get("files") or {}
        staged: dict[str, Path] = {}
        stage_root = cache.folder / f".import-{secrets.token_hex(6)}"
        stage_root.mkdir()
        try:
            for m in tf:
                if m.name == MANIFEST:
                    continue
                if m.name not in expected or not m.isfile():
                    raise IncompleteData(f"cache import: {bundle}: member {m.name!r} is not a file its manifest lists")
                if not (_TRITON_MEMBER.match(m.name) or _TARGET_MEMBER.match(m.name)) or ".." in m.name.split("/"):
                    raise IncompleteData(f"cache import: {bundle}: member {m.name!r} is outside the bundle layout")
                dest = stage_root / m.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(m)
                assert src is not None
                h = hashlib.sha256()
                with dest.open("xb") as out:
                    while chunk := src.read(1 << 20):
                        h.update(chunk)
                        out.write(chunk)
                if h.hexdigest() != expected[m.name]:
                    raise IncompleteData(f"cache import: {bundle}: {m.name} does not match its sha256 in the manifest")
                staged[m.name] = dest
            missing = sorted(set(expected) - set(staged))
            if missing:
                raise IncompleteData(f"cache import: {bundle} lacks {len(missing)} file(s) its manifest lists "
                                     f"(first: {missing[0]})")
            placed, kept, target_files = _place(cache, stage_root, staged)
        finally:
            shutil.rmtree(stage_root, ignore_errors=True)
    led = paths.imported_ledger(root, here.id)
    before = set(cache.imported())
    write_json(led, {"schema": IMPORTED_SCHEMA, "stack": here.id,
                     "bundles": [*_bundles(led), {"bundle": str(bundle), "created_utc": man.get("created_utc"),
                                                  "placed": len(placed), "kept": kept,
                                                  "imported_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ")}],
                     "entries": sorted(before | placed)})
    return Imported(placed=len([p for p in placed if p.startswith("triton/")]), kept=kept,
                    target_files=target_files, stack=here)


def _bundles(led: Path) -> list[dict[str, Any]]:
    return json.loads(led.read_text()).get("bundles", []) if led.exists() else []


def _place(cache: KernelCache, stage_root: Path, staged: dict[str, Path]) -> tuple[set[str], int, int]:
    """Rename every staged Triton entry into place unless it is there already; write missing target files."""
    placed: set[str] = set()
    kept = 0
    target_files = 0
    entries = sorted({name.split("/")[1] for name in staged if name.startswith("triton/")})
    for entry in entries:
        dest = cache.triton / entry
        if dest.exists():
            kept += 1
            continue
        try:
            os.rename(stage_root / "triton" / entry, dest)
        except OSError:
            if not dest.is_dir():  # a concurrent import or stage placed it first: keep theirs
                raise
            kept += 1
            continue
        placed.add(f"triton/{entry}")
    for name, f in staged.items():
        m = _TARGET_MEMBER.match(name)
        if not m:
            continue
        dest = paths.target_cache(cache.root, cache.stack.id, m.group(1)) / m.group(2)
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(f, dest)
        placed.add(name)
        target_files += 1
    return placed, kept, target_files


def info(root: Path, here: Stack) -> dict[str, Any]:
    """Every stack's cache under ``root``: facts, counts, bytes, imports; ``here`` marks this machine's."""
    stacks = []
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            man = folder / "stack.json"
            if not man.is_file():
                continue
            data = json.loads(man.read_text())
            if data.get("schema") != MANIFEST_SCHEMA:
                continue
            stack = Stack.from_dict(data["stack"])
            cache = KernelCache(root, stack, tuple(sorted(p.name for p in (folder / "target").glob("*")
                                                          if p.is_dir())))
            census = cache.census()
            size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
            stacks.append({"id": stack.id, "this_machine": stack == here, "describe": stack.describe(),
                           "stack": stack.as_dict(), "folder": str(folder), "counts": census.counts(),
                           "bytes": size, "imported_entries": len(cache.imported()), "state": cache.state(census)})
    return {"schema": "kgate.cache-info/1", "root": str(root), "this_machine": here.as_dict(), "stacks": stacks}
