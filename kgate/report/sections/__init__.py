"""The stage sections of the report page: one registry from stage name to the view of its record's data.

Method: a stage whose name is in ``SECTIONS`` gets its own section on the page:
``Section.view(data, links)`` turns the record's ``data`` (the caller's copy)
into the text cells and plots its template lays out, takes out of ``data``
what it shows (the page names the rest in one line beside the record
link), and returns None when the data is not of its shape (e.g. a stage
that could not measure); the view lands in the stage's view under ``Section.key``,
which the page template (``templates/report.html.j2``) includes on. A section
with ``summary_cells`` also puts a table into summary.md, under
``summary_title``. Any other stage shows its tests, diff, manifest and that line.

The sections import only the leaves of the report layer (``kgate.report.format``,
``kgate.report.links``, ``kgate.report.svg``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kgate.report.links import Links
from kgate.report.sections import bench, model, ncu, profile


@dataclass(frozen=True)
class Section:
    """How the page shows one stage's data (see the module docstring)."""

    key: str
    view: Callable[[dict[str, Any], Links], dict[str, Any] | None]
    summary_title: str | None = None
    summary_cells: Callable[[Sequence[Mapping[str, Any]]], list[list[str]]] | None = None


SECTIONS: dict[str, Section] = {
    "profile_baseline": Section("profile", profile.baseline_view,
                                "Plausibility bound (profile_baseline):", profile.bound_cells),
    "profile_candidate": Section("pair", profile.candidate_view, "Pair table (profile_candidate):", profile.pair_cells),
    "bench": Section("bench", bench.view),
    "ncu": Section("ncu", ncu.view),
    "model": Section("model", model.view),
}
#: the keys of every section's view, each once: a stage's view carries all of them (None but its own)
VIEW_KEYS = tuple(dict.fromkeys(s.key for s in SECTIONS.values()))
