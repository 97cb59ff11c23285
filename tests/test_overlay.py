"""Overlays: variant selection, the three edit kinds, and the content hash as candidate identity."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgate.errors import ConfigError
from kgate.source import overlay


def make(tmp_path: Path, edits: str, files: dict[str, str], applies: str = '["*"]') -> Path:
    d = tmp_path / "ov"
    d.mkdir()
    (d / "overlay.yaml").write_text(f"schema: kgate.overlay/1\ndescription: t\nvariants:\n"
                                    f"  - applies_to: {applies}\n    edits:\n{edits}")
    for k, v in files.items():
        (d / k).write_text(v)
    return d


def target(tmp_path: Path) -> Path:
    t = tmp_path / "t"
    (t / "pkg").mkdir(parents=True)
    (t / "pkg" / "a.py").write_text("x = 1\ny = 2\n")
    return t


def test_create_append_replace(tmp_path: Path) -> None:
    d = make(tmp_path, "      - {path: pkg/new.py, create: new.py}\n      - {path: pkg/a.py, append: more.py}\n"
             "      - {path: pkg/a.py, replace: {find: 'y = 2', with: 'y = 3'}}\n",
             {"new.py": "z = 0\n", "more.py": "w = 4\n"})
    t = target(tmp_path)
    touched = overlay.apply(overlay.select(d, "pypi:x==1"), t)
    assert touched == ["pkg/new.py", "pkg/a.py", "pkg/a.py"]
    assert (t / "pkg" / "a.py").read_text() == "x = 1\ny = 3\nw = 4\n"
    assert (t / "pkg" / "new.py").read_text() == "z = 0\n"


def test_replace_anchor_count_must_match(tmp_path: Path) -> None:
    d = make(tmp_path, "      - {path: pkg/a.py, replace: {find: 'q = 9', with: 'q = 8'}}\n", {})
    with pytest.raises(ConfigError, match="expected 1 match"):
        overlay.apply(overlay.select(d, "x"), target(tmp_path))


def test_variant_selection_by_identity(tmp_path: Path) -> None:
    d = make(tmp_path, "      - {path: pkg/a.py, append: more.py}\n", {"more.py": "\n"}, applies='["git:27967b97"]')
    assert overlay.select(d, "git:27967b970eaaf982a6960abf6cba8add9c34c7cc").applies_to == ("git:27967b97",)
    with pytest.raises(ConfigError, match="no variant applies to target pypi:fla-core==0.6.0"):
        overlay.select(d, "pypi:fla-core==0.6.0")


def test_content_hash_follows_the_files_the_variant_reads(tmp_path: Path) -> None:
    d = make(tmp_path, "      - {path: pkg/a.py, append: more.py}\n", {"more.py": "w = 4\n", "README.md": "notes"})
    h1 = overlay.content_hash(d, "x")
    (d / "README.md").write_text("other notes")
    assert overlay.content_hash(d, "x") == h1
    (d / "more.py").write_text("w = 5\n")
    assert overlay.content_hash(d, "x") != h1


def test_an_edit_may_not_leave_the_target(tmp_path: Path) -> None:
    d = make(tmp_path, "      - {path: ../escape.py, create: new.py}\n", {"new.py": ""})
    with pytest.raises(ConfigError, match="leaves the target tree"):
        overlay.apply(overlay.select(d, "x"), target(tmp_path))
