"""Overlays: fixtures and candidates as our own files plus edit instructions.

An overlay folder holds ``overlay.yaml`` (schema kgate.overlay/1) and the
files it names. ``apply`` performs the edits of the variant that matches the
target identity; ``content_hash`` is the candidate's identity: sha256 over the
manifest and every file the chosen variant reads, so editing any of them
makes a new candidate id (and only that reruns candidate stages).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kgate import paths
from kgate.campaign import load_yaml, validate
from kgate.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Variant:
    """The edits of one overlay variant."""

    folder: Path
    applies_to: tuple[str, ...]
    edits: tuple[dict[str, Any], ...]


def _matches(pattern: str, identity: str) -> bool:
    if pattern == "*" or pattern == identity:
        return True
    if pattern.startswith("git:") and identity.startswith("git:"):
        p = pattern[4:]
        return len(p) >= 7 and identity[4:].startswith(p)
    return False


def select(folder: Path | str, identity: str) -> Variant:
    """Load ``folder/overlay.yaml`` and return the variant for ``identity``."""
    folder = Path(folder)
    if not folder.is_absolute():
        folder = paths.PROJECT / folder
    manifest = folder / "overlay.yaml"
    data = load_yaml(manifest)
    validate(data, "overlay", str(manifest))
    for v in data["variants"]:
        if any(_matches(p, identity) for p in v["applies_to"]):
            return Variant(folder, tuple(v["applies_to"]), tuple(v["edits"]))
    raise ConfigError(f"{manifest}: key 'variants': no variant applies to target {identity}")


def enables(folder: Path | str) -> list[str] | None:
    """The overlay's declared dispatch classes (``enables``), or None when it declares none."""
    folder = Path(folder)
    if not folder.is_absolute():
        folder = paths.PROJECT / folder
    data = load_yaml(folder / "overlay.yaml")
    validate(data, "overlay", str(folder / "overlay.yaml"))
    return list(data["enables"]) if "enables" in data else None


def _source(variant: Variant, edit: dict[str, Any], key: str) -> Path:
    src = variant.folder / edit[key]
    if not src.is_file():
        raise ConfigError(f"{variant.folder / 'overlay.yaml'}: key 'edits.{key}': file '{edit[key]}' does not exist")
    return src


def content_hash(folder: Path | str, identity: str) -> str:
    """12 hex digits of sha256 over overlay.yaml and the files the variant reads."""
    v = select(folder, identity)
    h = hashlib.sha256()
    h.update((v.folder / "overlay.yaml").read_bytes())
    for edit in v.edits:
        for key in ("create", "append"):
            if key in edit:
                h.update(edit[key].encode() + b"\0" + _source(v, edit, key).read_bytes())
    return h.hexdigest()[:12]


def edit_paths(variant: Variant) -> list[str]:
    """The target paths the variant's edits touch, checked without a target tree: each stays inside it (relative,
    no ``..``) and every file a ``create`` or ``append`` reads exists in the overlay folder. The checks
    :func:`apply` can only make against the tree (a created file that exists, an anchor's count) stay there."""
    out = []
    for edit in variant.edits:
        rel = edit["path"]
        if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts:
            raise ConfigError(f"{variant.folder / 'overlay.yaml'}: key 'edits.path': '{rel}' leaves the target tree")
        for key in ("create", "append"):
            if key in edit:
                _source(variant, edit, key)
        out.append(rel)
    return out


def created_test_files(variant: Variant) -> list[str]:
    """The Python test modules the variant creates (``test*.py`` or ``*_test.py``, pytest's default names)."""
    out = []
    for edit in variant.edits:
        name = PurePosixPath(edit["path"]).name
        if "create" in edit and name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py")):
            out.append(edit["path"])
    return out


def apply(variant: Variant, worktree: Path) -> list[str]:
    """Apply every edit to ``worktree``; return the target paths touched."""
    touched = []
    for edit in variant.edits:
        rel = edit["path"]
        dest = (worktree / rel).resolve()
        if not str(dest).startswith(str(worktree.resolve()) + "/"):
            raise ConfigError(f"overlay edit path '{rel}' leaves the target tree")
        if "create" in edit:
            if dest.exists():
                raise ConfigError(f"overlay edit 'create' {rel}: the file already exists in the target")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(_source(variant, edit, "create").read_bytes())
        elif "append" in edit:
            if not dest.is_file():
                raise ConfigError(f"overlay edit 'append' {rel}: no such file in the target")
            text = dest.read_text()
            if text and not text.endswith("\n"):
                text += "\n"
            dest.write_text(text + _source(variant, edit, "append").read_text())
        else:
            spec = edit["replace"]
            if not dest.is_file():
                raise ConfigError(f"overlay edit 'replace' {rel}: no such file in the target")
            text = dest.read_text()
            found = text.count(spec["find"])
            want = spec.get("count", 1)
            if found != want:
                raise ConfigError(f"overlay edit 'replace' {rel}: expected {want} match(es) of the anchor, found {found}")
            dest.write_text(text.replace(spec["find"], spec["with"]))
        touched.append(rel)
    return touched
