"""Tests of kgate.report: the HTML page, summary.md, gates.junit.xml and the SVG plot helpers.

Each folder under tests/data/records/ is one scenario: one record per stage,
the verdict and, where there is one, the candidate history. The
``synthetic_*`` scenarios are hand-written; ``h200_upstream_baseline_fail``
holds the records of a real H200 run, as the stages wrote them.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from kgate import protocol, report
from kgate import verdict as verdict_mod
from kgate.errors import FormatVersionError, IncompleteData
from kgate.report.format import STATUS_LABELS, clean, format_value, md_code, md_escape
from kgate.report.generic import fold_large
from kgate.report.links import evidence_href
from kgate.report.page import SENTENCE_HEAD, VERDICTS, split_formula
from kgate.report.svg import nice_ticks, svg_bar_chart, svg_interval_plot, svg_series_plot

DATA = Path(__file__).parent / "data" / "records"
OUT = Path(__file__).parent / "_out"
SCENARIOS = sorted(p.name for p in DATA.iterdir() if p.is_dir())
HOSTILE = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "&amp;")
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
# expected JUnit totals per scenario: (tests, failures, skipped, errors)
JUNIT_TOTALS = {
    "synthetic_cpu_smoke": (12, 0, 3, 0),
    "synthetic_cpu_nogo": (12, 2, 3, 0),
    "synthetic_h200_hostile": (11, 0, 7, 0),
    # 3 gates (one failed) and 8 stages blocked behind baseline_tests
    "h200_upstream_baseline_fail": (11, 1, 8, 0),
    # 17 gates (the STOP is skipped) and 5 stages not run yet
    "h200_default_profile_stop": (22, 0, 6, 0),
    # 29 + 13 bench gates (two STOPs, two skips and five inconclusive are skipped; four bench gates failed)
    # and 2 stages not run yet
    "h200_default_bench": (44, 4, 11, 0),
    # 17 gates (one failed, the STOP skipped) and 5 stages blocked behind the failed gate
    "h200_upstream_coverage_fail": (22, 1, 6, 0),
    # 32 gates (the STOP and three bench gates without rows skipped) and ncu, model not run yet
    "h200_cumsum_forced_bench": (41, 0, 9, 0),
    # 44 gates (six without rows or dispatch classes skipped) and ncu, model not run (the device time ended)
    "h200_tvd_incomplete": (46, 0, 8, 0),
    # 40 gates (the STOP, four gates without dispatch rows or helper and two bench gates without rows skipped;
    # bench's geomean failed) and ncu, model not run yet
    "h200_large_rows_forced_bench": (42, 1, 9, 0),
    # 48 gates, none failed (bench's three inconclusive and seven gates without rows, classes or helper are
    # skipped), every stage ran: the forced run collected ncu and model past an INCONCLUSIVE bench
    "h200_liger_ce_exp2_inconclusive": (48, 0, 10, 0),
    # 40 gates (seven without classes, dispatch rows, helper or fallback rows skipped; two bench gates failed on
    # the one SLOW row, the geomean passed) and ncu, model blocked by bench's fail
    "h200_fused_add_rmsnorm_row_slow": (42, 2, 7, 0),
}
REAL = "h200_upstream_baseline_fail"
STOPPED = "h200_default_profile_stop"
PAIRED = "h200_default_bench"
COVERAGE = "h200_upstream_coverage_fail"


def load(name: str) -> tuple[dict, list[dict], list[dict] | None]:
    folder = DATA / name
    verdict = json.loads((folder / "verdict.json").read_text())
    history_path = folder / "history.json"
    history = json.loads(history_path.read_text()) if history_path.exists() else None
    records = [
        json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if p.name not in ("verdict.json", "history.json")
    ]
    return verdict, records, history


def report_dir(root: Path, verdict: dict) -> Path:
    return root / "reports" / verdict["campaign"] / verdict["gpu"]


def repo_relative(path: str, records: list[dict]) -> str:
    """An absolute path under the folder a record was written in (provenance.cwd), relative to that folder."""
    for record in records:
        cwd = record["provenance"].get("cwd")
        if cwd and path.startswith(cwd.rstrip("/") + "/"):
            return path[len(cwd.rstrip("/")) + 1 :]
    return path


class Page(HTMLParser):
    """The parsed page: elements with attributes, text in document order, table rows, nesting errors."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self.errors: list[str] = []
        # body rows of every table: (class of the table, text of each cell)
        self.rows: list[tuple[str, list[str]]] = []
        self.sections: dict[str, str] = {}
        self.doctype = ""
        self._stack: list[str] = []
        self._table_classes: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._section: tuple[str, int, list[str]] | None = None
        self.feed(html)
        self.close()
        if self._stack:
            self.errors.append(f"unclosed: {self._stack}")
        self.text = " ".join(self.texts)

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.elements.append((tag, attributes))
        if tag in VOID:
            return
        self._stack.append(tag)
        if tag == "table":
            self._table_classes.append(attributes.get("class") or "")
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "section" and self._section is None:
            self._section = (attributes.get("id") or "", len(self._stack), [])

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self._stack or self._stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self._stack[-1] if self._stack else 'nothing'}")
            return
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and "thead" not in self._stack:
            self.rows.append((self._table_classes[-1] if self._table_classes else "", self._row))
            self._row = None
        elif tag == "table":
            self._table_classes.pop()
        elif tag == "section" and self._section is not None and self._section[1] == len(self._stack):
            self.sections[self._section[0]] = " ".join(" ".join(self._section[2]).split())
            self._section = None
        self._stack.pop()

    def handle_data(self, data: str) -> None:
        if "style" in self._stack:
            return
        self.texts.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._section is not None:
            self._section[2].append(data)

    def tags(self, name: str) -> list[dict[str, str | None]]:
        return [attrs for tag, attrs in self.elements if tag == name]


@pytest.fixture(name="rendered", params=SCENARIOS, scope="module")
def _rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    verdict, records, history = load(request.param)
    out = report_dir(tmp_path_factory.mktemp(request.param), verdict)
    paths = report.render(verdict, records, out, history=history)
    html = (out / "index.html").read_text()
    return {
        "name": request.param,
        "verdict": verdict,
        "records": records,
        "history": history,
        "out": out,
        "paths": paths,
        "html": html,
        "page": Page(html),
        "summary": (out / "summary.md").read_text(),
        "junit": ET.parse(out / "gates.junit.xml").getroot(),
    }


class TestRender:
    def test_writes_the_three_report_files(self, rendered: dict) -> None:
        """render returns index.html, summary.md and gates.junit.xml, and leaves verdict.json to the verdict module."""
        out = rendered["out"]
        assert rendered["paths"] == [out / "index.html", out / "summary.md", out / "gates.junit.xml"]
        assert sorted(p.name for p in out.iterdir()) == ["gates.junit.xml", "index.html", "summary.md"]

    def test_verdict_is_the_heading(self, rendered: dict) -> None:
        """The one h1 holds the verdict word, and the sentence follows."""
        page, verdict = rendered["page"], rendered["verdict"]
        assert len(page.tags("h1")) == 1
        h1 = re.search(r"<h1>(.*?)</h1>", rendered["html"]).group(1)
        assert h1 == verdict["verdict"]
        assert verdict["sentence"] in page.text
        assert page.text.index(verdict["verdict"]) < page.text.index(verdict["sentence"])

    def test_decisive_gate_is_in_the_header(self, rendered: dict) -> None:
        """The gate named by decided_by is shown with its value before the gate table."""
        verdict, page = rendered["verdict"], rendered["page"]
        decided = verdict["decided_by"]
        header = rendered["html"].split('<h2 id="gates">')[0]
        if decided["gate"] is None:
            # a stage without a record decided it (evidence missing): the header names the stage as not run
            stage = next(s for s in verdict["stages"] if s["stage"] == decided["stage"])
            assert stage["status"] == "not_run"
            assert f"decided by {decided['stage']} not run" in " ".join(Page(header).text.split())
            assert not [cells for cls, cells in page.rows if cls == "gates" and "(decided)" in cells[1]]
            return
        gate = next(g for g in verdict["gates"] if (g["stage"], g["name"]) == (decided["stage"], decided["gate"]))
        assert f"{decided['stage']} / {decided['gate']}" in Page(header).text
        assert format_value(gate["value"], gate.get("unit")) in Page(header).text
        decisive_rows = [cells for cls, cells in page.rows if cls == "gates" and "(decided)" in cells[1]]
        assert len(decisive_rows) == 1

    def test_every_gate_has_a_row(self, rendered: dict) -> None:
        """Each verdict gate is one row of the gate table: stage, name, threshold, value, status, evidence."""
        rows = [cells for cls, cells in rendered["page"].rows if cls == "gates"]
        gate_rows = [cells for cells in rows if cells[1] != "—"]
        assert len(gate_rows) == len(rendered["verdict"]["gates"])
        for gate, cells in zip(rendered["verdict"]["gates"], gate_rows):
            assert cells[0] == gate["stage"]
            assert cells[1].removesuffix(" (decided)") == gate["name"]
            # the threshold's statement, its parenthesised formula folded under "formula"
            head, formula = split_formula(gate["threshold"])
            assert cells[2].replace(" ", "") == (f"{head}formula{formula}" if formula else head).replace(" ", "")
            # a long value folds: its first 90 characters are the summary, the whole value follows
            value = format_value(gate["value"], gate.get("unit"))
            assert cells[3].startswith(value) or (len(value) > 110 and value in cells[3])
            assert cells[4] == STATUS_LABELS[gate["status"]]
            prefix = f"results/{rendered['verdict']['campaign']}/{rendered['verdict']['gpu']}/"
            evidence = repo_relative(gate["evidence"], rendered["records"]) if gate["evidence"] else None
            # the link text is the file's name; its href (checked in TestLinks) is the whole path
            assert cells[5] == (evidence.removeprefix(prefix).rsplit("/", 1)[-1] if evidence else "—")

    def test_stages_that_did_not_run_say_why(self, rendered: dict) -> None:
        """A not_run stage has a gate-table row and a section, both with its reason."""
        rows = [cells for cls, cells in rendered["page"].rows if cls == "gates" and cells[1] == "—"]
        not_run = [s for s in rendered["verdict"]["stages"] if s["status"] == "not_run"]
        assert [r[0] for r in rows] == [s["stage"] for s in not_run]
        for stage, cells in zip(not_run, rows):
            assert cells[2] == f"not run: {stage['why']}"
            assert cells[3] == "not run"

    def test_every_stage_has_a_section(self, rendered: dict) -> None:
        """Each stage of the verdict gets an evidence section naming it, in order, with its record link."""
        sections = rendered["page"].sections
        stages = rendered["verdict"]["stages"]
        assert len(sections) == len(stages)
        for (anchor, text), stage in zip(sections.items(), stages):
            assert anchor.endswith(stage["stage"])
            assert stage["stage"] in text
            if stage["status"] == "not_run":
                assert stage["why"] in text
            else:
                assert stage["record"].split("/", 3)[3] in text
        records = {r["stage"]: r for r in rendered["records"]}
        for anchor, text in sections.items():
            record = next((r for name, r in records.items() if anchor.endswith("-" + name)), None)
            if record is None:
                continue
            for reason in record["reasons"]:
                assert reason in text
            assert record["provenance"]["host"] in text

    def test_test_evidence_lists_failures_first(self, rendered: dict) -> None:
        """Counts per outcome are shown, and failing test ids with their messages come before passing ones."""
        for record in rendered["records"]:
            tests = record["data"].get("tests")
            if not tests:
                continue
            section = next(t for a, t in rendered["page"].sections.items() if a.endswith("-" + record["stage"]))
            assert f"Tests: {len(tests)} collected" in section
            failed = [t for t in tests if t["outcome"] == "failed"]
            passed = [t for t in tests if t["outcome"] == "passed"]
            assert f"{len(passed)} passed" in section
            for t in failed:
                assert f"failed: {t['nodeid']}" in section
                first_message_line = clean(t["message"]).split("\n")[0]
                assert " ".join(first_message_line.split()) in section
                assert section.index(t["nodeid"]) < min(section.index(p["nodeid"]) for p in passed)

    def test_manifest_diff_and_provenance(self, rendered: dict) -> None:
        """The frozen manifest, the scoped diff and the provenance (host, job, device, env, git) are on the page."""
        text = rendered["page"].text
        for record in rendered["records"]:
            data, prov = record["data"], record["provenance"]
            for path, digest in (data.get("manifest") or {}).items():
                assert path in text and digest in text
            if "diff" in data:
                for f in data["diff"]["files"]:
                    assert f["path"] in text and f"+{f['added']}" in text
                for fn in data["diff"]["changed_functions"]:
                    assert fn in text
            if prov.get("git"):
                assert prov["git"]["head"] in text
            if prov["slurm"]["job_id"]:
                assert prov["slurm"]["job_id"] in text
            for value in prov["env"].values():
                assert value in text
            assert f"{prov['wall_s']:.1f} s" in text

    def test_history_compares_each_candidate_with_the_one_before(self, rendered: dict) -> None:
        """Candidate history is newest first, marks this report's candidate, and shows changes against the previous."""
        history = rendered["history"]
        if not history:
            assert "Candidate history" not in rendered["page"].text
            return
        rows = [cells for cls, cells in rendered["page"].rows if cls == "grid" and cells and cells[0][:12] in
                {h["candidate"] for h in history}]
        assert [r[0][:12] for r in rows] == [h["candidate"] for h in reversed(history)]
        assert rows[0][0].endswith("(this report)")
        # 7d41b0e2c9aa failed 2 tests, its predecessor 0
        assert rows[0][3] == "2 +2"
        assert rows[0][4] == "6 -2 (-25.0%)"

    def test_page_is_wellformed_and_self_contained(self, rendered: dict) -> None:
        """HTML5 doctype, lang, charset, balanced tags, unique ids, and nothing loaded from elsewhere."""
        page = rendered["page"]
        assert page.doctype.lower() == "doctype html"
        assert page.errors == []
        assert page.tags("html")[0].get("lang") == "en"
        assert page.tags("meta")[0].get("charset") == "utf-8"
        assert len(page.tags("title")) >= 1
        ids = [a["id"] for _, a in page.elements if a.get("id")]
        assert len(ids) == len(set(ids))
        for tag in ("script", "link", "iframe", "img", "object", "embed"):
            assert page.tags(tag) == [], tag
        for _, attrs in page.elements:
            assert not any(k.startswith("on") for k in attrs)
            assert "src" not in attrs
            href = attrs.get("href") or ""
            assert not href.startswith(("http:", "https:", "//", "javascript:"))
        for href in (a.get("href") for a in page.tags("a")):
            if href and href.startswith("#"):
                assert href[1:] in ids


class TestVerdictKinds:
    @pytest.mark.parametrize("word", VERDICTS)
    def test_each_verdict_renders_big_and_coloured(self, word: str, tmp_path: Path) -> None:
        """Every verdict word is the heading and picks its own colour class; only SMOKE carries the smoke banner."""
        verdict, records, _ = load("synthetic_cpu_smoke")
        verdict = {**verdict, "verdict": word}
        report.render(verdict, records, tmp_path)
        html = (tmp_path / "index.html").read_text()
        cls = {"GO": "go", "NO-GO": "nogo", "STOPPED": "stopped", "INCONCLUSIVE": "inconclusive", "SMOKE": "smoke"}[word]
        assert f'class="verdict v-{cls}"' in html
        assert f"<h1>{word}</h1>" in html
        text = Page(html).text
        assert ("CPU SMOKE RUN: timings are NOT meaningful." in text) == (word == "SMOKE")
        assert "never yields GO" in text

    def test_gpu_run_has_no_cpu_warning(self, tmp_path: Path) -> None:
        """The CPU warning is absent from a GPU run's page."""
        verdict, records, _ = load("synthetic_h200_hostile")
        report.render(verdict, records, tmp_path)
        assert "timings are NOT meaningful" not in (tmp_path / "index.html").read_text()

    def test_forced_run_is_marked(self, tmp_path: Path) -> None:
        """A forced run says so in the header, in a warning, and in summary.md, with the would-be verdict."""
        verdict, records, _ = load("synthetic_h200_hostile")
        assert verdict["forced"]
        report.render(verdict, records, tmp_path)
        text = Page((tmp_path / "index.html").read_text()).text
        assert "FORCED RUN · would be INCONCLUSIVE" in text
        assert "Forced run past a STOP." in text
        assert "**Forced run** past a STOP: never GO (would be INCONCLUSIVE)." in (tmp_path / "summary.md").read_text()

    def test_long_sentence_folds_below_the_banner(self, tmp_path: Path) -> None:
        """The banner says in one sentence which gate decided and why; the verdict's long sentence folds below it."""
        verdict, records, _ = load("synthetic_cpu_nogo")
        ids = ", ".join(f"tests/ops/test_toy_scan.py::test_bwd[case{i}]" for i in range(12))
        sentence = f"candidate_gate gate_tests_pass fail: 12 failed — not passing: {ids}"
        report.render({**verdict, "sentence": sentence}, records, tmp_path)
        html = (tmp_path / "index.html").read_text()
        banner = Page(html.split("</header>")[0]).text
        assert sentence not in banner
        head = re.search(r'<p class="sentence">(.*?)</p>', html).group(1)
        assert len(head) <= SENTENCE_HEAD + 2 and head.startswith("candidate_gate / gate_tests_pass FAIL: ")
        folded = re.search(r'<details class="fullsentence">(.*?)</details>', html, flags=re.S).group(1)
        assert sentence in Page(folded).text
        # with no deciding gate the banner holds the verdict's sentence, cut at a word
        report.render({**verdict, "sentence": sentence, "decided_by": {"stage": None, "gate": None}}, records, tmp_path)
        html = (tmp_path / "index.html").read_text()
        head = re.search(r'<p class="sentence">(.*?)</p>', html).group(1)
        assert head.endswith(" …") and len(head) <= SENTENCE_HEAD + 2
        assert sentence.startswith(head.removesuffix(" …"))
        assert sentence in Page(html).text

    def test_rejects_other_schema_versions(self, tmp_path: Path) -> None:
        """A verdict or record of another format version is an error, not a guess."""
        verdict, records, _ = load("synthetic_cpu_smoke")
        with pytest.raises(FormatVersionError, match="kgate.verdict/1"):
            report.render({**verdict, "schema": "kgate.verdict/2"}, records, tmp_path)
        with pytest.raises(FormatVersionError, match="kgate.stage/1"):
            report.render(verdict, [{**records[0], "schema": "kgate.stage/0"}], tmp_path)
        with pytest.raises(IncompleteData, match="MAYBE"):
            report.render({**verdict, "verdict": "MAYBE"}, records, tmp_path)


def render_scenario(name: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One scenario rendered into a fresh folder: its verdict, records by stage, page and summary."""
    verdict, records, history = load(name)
    out = report_dir(tmp_path_factory.mktemp(name), verdict)
    report.render(verdict, records, out, history=history)
    html = (out / "index.html").read_text()
    return {"verdict": verdict, "records": {r["stage"]: r for r in records}, "out": out, "html": html,
            "page": Page(html), "summary": (out / "summary.md").read_text()}


def check_forced_verdict(rendered: dict, campaign: str, would_be: str) -> dict:
    """A real forced run's verdict.json is kgate.verdict.compute over its records: STOPPED, with ``would_be``
    beside it in the page's header. Returns the computed verdict."""
    records = rendered["records"]
    ordered = [records[s] for s in protocol.STAGES if s in records]
    expected = verdict_mod.compute(ordered, campaign=campaign, gpu="h200", candidate="f6b3512413ea", forced=True)
    for key in ("verdict", "would_be", "decided_by", "sentence", "gates", "stages"):
        assert rendered["verdict"][key] == expected[key], key
    assert (expected["verdict"], expected["would_be"]) == ("STOPPED", would_be)
    header = Page(rendered["html"].split("</header>")[0]).text
    assert f"FORCED RUN · would be {would_be}" in header
    return expected


@pytest.fixture(name="real", scope="module")
def _real(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return render_scenario(REAL, tmp_path_factory)


class TestRealH200:
    """The records of a real H200 run: fla's own RWKV6 tests failed at the baseline (CUDA misaligned address)."""

    FAILING = "tests/ops/test_rwkv6.py::test_chunk_with_chunk_size[B1-T64-H2-D32-gate1.0-torch.float32-chunk32]"
    CUDA = "torch.AcceleratorError: CUDA error: misaligned address"

    def test_fixture_verdict_is_what_kgate_computes(self, real: dict) -> None:
        """verdict.json is kgate.verdict.compute over the two records (plus the campaign's hypothesis)."""
        records = real["records"]
        assert set(records) == {"target", "baseline_tests"}
        expected = verdict_mod.compute([records["target"], records["baseline_tests"]], campaign=records["target"]["campaign"],
                                       gpu="h200", candidate=None)
        for key in ("verdict", "decided_by", "sentence", "gates", "stages"):
            assert real["verdict"][key] == expected[key], key
        assert real["verdict"]["verdict"] == "NO-GO"
        assert records["baseline_tests"]["provenance"]["device"]["name"] == "NVIDIA H200"

    def test_no_go_decided_by_the_baseline_gate(self, real: dict) -> None:
        html, page = real["html"], real["page"]
        assert re.search(r"<h1>(.*?)</h1>", html).group(1) == "NO-GO"
        assert 'class="verdict v-nogo"' in html
        header = Page(html.split("</header>")[0]).text
        assert "baseline_tests / baseline_gate" in header and "1 error, 12 passed" in header
        assert self.FAILING in header
        assert "timings are NOT meaningful" not in page.text

    def test_failing_test_and_cuda_error_are_shown(self, real: dict) -> None:
        """The failing test id heads its failure block, and the CUDA error is pulled out above the traceback."""
        html = real["html"]
        section = next(t for a, t in real["page"].sections.items() if a.endswith("-baseline_tests"))
        assert f"error: {self.FAILING}" in section
        assert "1 error" in section and "12 passed" in section
        err = re.search(r'<pre class="err">(.*?)</pre>', html, flags=re.S).group(1)
        assert err.startswith(self.CUDA)
        assert "cudaErrorMisalignedAddress" in err and err.rstrip().endswith("AcceleratorError")
        # the three runs of the failing test, from the record's reruns
        assert "error, error, error" in section

    def test_provenance_names_the_gpu_and_the_stack(self, real: dict) -> None:
        """Device name, UUID, compute capability, driver, and torch/triton versions, in the banner and the provenance."""
        text = real["page"].text
        for fact in ("NVIDIA H200", "GPU-a6cbc9a0-b408-f845-15f3-bdf4117b715d", "sm 9.0", "driver 580.159.04",
                     "torch 2.11.0", "triton 3.6.0", "python 3.12.3", "CUDA_VERSION", "13.0.2"):
            assert fact in text, fact
        banner = Page(real["html"].split("</header>")[0]).text
        assert "NVIDIA H200 · sm 9.0 · driver 580.159.04 · torch 2.11.0 · triton 3.6.0" in banner

    def test_absolute_evidence_links_are_relative_to_the_runs_folder(self, real: dict) -> None:
        """The record's absolute paths (under provenance.cwd on the GPU machine) link into results/ beside the report."""
        hrefs = {a["href"] for a in real["page"].tags("a")}
        folder = "../../../results/rwkv6-bwd-fusion-upstream/h200/baseline_tests/"
        assert {folder + f for f in ("run1.junit.xml", "run1.pytest.log", "run1.outcomes.json")} <= hrefs
        assert "file:///tmp/fla" in hrefs

    def test_summary_and_junit(self, real: dict) -> None:
        summary = real["summary"]
        assert summary.startswith("### kgate verdict: **NO-GO** · rwkv6-bwd-fusion-upstream on h200")
        assert "| baseline_tests | **baseline_gate** | every collected test passes | 1 error, 12 passed (" in summary
        root = ET.parse(real["out"] / "gates.junit.xml").getroot()
        failure = next(c for c in root.iter("testcase") if c.get("name") == "baseline_gate").find("failure")
        assert failure is not None and self.FAILING in failure.text


@pytest.fixture(name="stopped", scope="module")
def _stopped(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return render_scenario(STOPPED, tmp_path_factory)


class TestRealH200ProfileStop:
    """The records of a real forced H200 run of the default campaign that profile_baseline stopped."""

    def test_fixture_verdict_is_what_kgate_computes(self, stopped: dict) -> None:
        check_forced_verdict(stopped, "rwkv6-bwd-fusion", "INCONCLUSIVE")

    def test_plausibility_table_shows_every_term_of_each_row(self, stopped: dict) -> None:
        """One row per profiled row, with the record's endpoint, removed bytes and best case, and the formula."""
        rows = stopped["records"]["profile_baseline"]["data"]["rows"]
        table = [cells for cls, cells in stopped["page"].rows if cls == "grid profile"]
        assert [c[0].split()[0] for c in table] == [r["row"] for r in rows]
        for cells, r in zip(table, rows, strict=True):
            b = r["bound"]
            assert cells[1] == str(r["class"])
            assert cells[2].startswith(f"{r['endpoint_ms']:.4g} ms")
            assert cells[5] == f"{b['removed_bytes'] / 1e6:,.1f} MB"
            assert cells[7].startswith(f"{b['best_case_speedup']:.4f}x") and b["arithmetic"] in cells[7]
        text = stopped["page"].text
        assert "best case = endpoint / (endpoint - (removed launches x launch cost + removed bytes / bandwidth))" in text
        assert "1.0238x" in text and "4,195.5 GB/s" in text

    def test_kernel_bars_and_temporaries(self, stopped: dict) -> None:
        """One plot of the best case per row against the bar; the census names the removed kernel in every row;
        both temporaries found in every row."""
        html = stopped["html"]
        plot = re.search(r'<svg [^>]*role="img"><title>Best case per row[^<]*</title><desc>(.*?)</desc>', html).group(1)
        for row in ("B8_T1024_H8_D64", "B4_T2048_H16_D128", "B8_T2048_H32_D256", "varlen_D128"):
            assert f"{row}: " in plot
        assert "bar 1.08" in plot and "bound (geomean): 1.024" in plot
        census = [cells for cls, cells in stopped["page"].rows if cls == "grid" and len(cells) == 6
                  and cells[1] == "chunk_rwkv6_bwd_kernel_intra"]
        assert len(census) == 4 and all(c[2] == "removed" for c in census)
        temps = [cells for cls, cells in stopped["page"].rows if cls == "grid" and len(cells) == 6 and
                 cells[1] in ("dq_fp32", "dk_fp32")]
        assert len(temps) == 8 and all(c[4] == "yes" for c in temps)

    def test_summary_has_the_bound_table(self, stopped: dict) -> None:
        summary = stopped["summary"]
        assert "Plausibility bound (profile_baseline):" in summary
        assert "| B8_T2048_H32_D256 | 256 | 16.94 ms | 522.7 µs | 1.0318x |" in summary
        assert "> **Forced run** past a STOP: never GO (would be INCONCLUSIVE)." in summary


@pytest.fixture(name="paired", scope="module")
def _paired(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return render_scenario(PAIRED, tmp_path_factory)


class TestRealH200PairTable:
    """The records of a real forced H200 run of the default campaign through bench (two STOPs, then bench failed)."""

    def test_fixture_verdict_is_what_kgate_computes(self, paired: dict) -> None:
        expected = check_forced_verdict(paired, "rwkv6-bwd-fusion", "NO-GO")
        records = paired["records"]
        assert ("forced run past 2 STOP(s) (profile_baseline / plausible_speedup, profile_candidate / "
                "pair_supports_bar)") in expected["sentence"] and "(bench: geomean_speedup fail" in expected["sentence"]
        assert records["candidate_gate"]["status"] == "pass" and records["profile_candidate"]["status"] == "stop"
        assert records["bench"]["status"] == "fail"

    def test_a_measured_bench_fail_leaves_ncu_and_model_to_the_forced_run(self, paired: dict) -> None:
        """bench failed on timings: in this forced run ncu and model are not blocked by it, only not run yet."""
        for stage in ("ncu", "model"):
            assert f"| {stage} | — | — | not run: no record (not run yet) | not run |" in paired["summary"]

    def test_bench_table_shows_each_rows_interval_and_class(self, paired: dict) -> None:
        """One bench row per timed (row, mode), the record's speedup, interval and classification in it."""
        bench = paired["records"]["bench"]["data"]
        table = [cells for cls, cells in paired["page"].rows if cls == "grid bench"]
        text = " ".join(" ".join(c) for c in table)
        for r in bench["rows"]:
            lo, hi = r["interval"]
            assert f"{r['speedup']:.4f}x [{lo:.4f}, {hi:.4f}]" in text and r["classification"] in text
        g = bench["geomean"]
        assert f"{g['speedup']:.4f}x [{g['lower']:.4f}, {g['upper']:.4f}]" in paired["page"].text
        assert bench["rounds"] == 15 and g["upper"] < 1  # the fused kernel lost the registry rows on this H200

    def test_pair_table_shows_each_rows_measurements(self, paired: dict) -> None:
        """One row per profiled row: the record's pair times, pair speedup, implied endpoint and peak drop."""
        rows = paired["records"]["profile_candidate"]["data"]["rows"]
        table = [cells for cls, cells in paired["page"].rows if cls == "grid pair"]
        assert [c[0] for c in table] == [r["row"] for r in rows]
        for cells, r in zip(table, rows, strict=True):
            assert cells[2] == r["path"] == "optimized"
            assert cells[5] == f"{r['pair_speedup']:.4f}x"
            assert cells[6] == f"{r['implied_endpoint_speedup']:.4f}x"
            assert cells[10].startswith(f"{r['peak_reduction_bytes'] / 1e6:,.1f} MB")
            assert cells[11] == "yes"
        assert all(r["pair_speedup"] < 1 for r in rows)  # the fused kernel lost every pair on this H200

    def test_resources_per_class_name_spills_and_occupancy(self, paired: dict) -> None:
        classes = paired["records"]["profile_candidate"]["data"]["classes"]
        table = [cells for cls, cells in paired["page"].rows if cls == "grid" and len(cells) == 5]
        shown = {c[0] for c in table}
        assert {str(k["class"]) for k in classes} <= shown
        fused = [c for c in table if "chunk_rwkv6_bwd_kernel_fused" in c[2]]
        assert fused and all("0 spills" in c[2] and c[4] == "none" for c in fused)

    def test_outputs_and_summary(self, paired: dict) -> None:
        """The outputs comparison (fallback rows bit-identical) and the summary's pair table."""
        text = paired["page"].text
        assert "2/2 fallback row(s) identical" in text
        summary = paired["summary"]
        assert "Pair table (profile_candidate):" in summary
        row = paired["records"]["profile_candidate"]["data"]["rows"][2]
        assert f"| {row['row']} | 256 | optimized |" in summary and f"{row['pair_speedup']:.4f}x" in summary

    def test_hundreds_of_compiled_variants_are_named_not_drawn(self, paired: dict) -> None:
        """The candidate's autotuning compiled 429 variants: the page names their count and points at the record."""
        variants = paired["records"]["profile_candidate"]["data"]["resources"]["cand"]["variants"]
        assert len(variants) > 100
        section = next(t for a, t in paired["page"].sections.items() if a.endswith("-profile_candidate"))
        assert f"{len(variants)} variants" not in section  # the classes' summaries count their own variants
        assert "resources (" in section and "Also in the record" in section
        assert "constexprs" not in paired["html"]
        assert len(paired["html"]) < 200_000


@pytest.fixture(name="coverage", scope="module")
def _coverage(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return render_scenario(COVERAGE, tmp_path_factory)


class TestRealH200UpstreamCoverage:
    """A real forced H200 run of the upstream campaign: STOP at profile_baseline, then a failed build gate."""

    def test_verdict_is_stopped_and_would_be_no_go(self, coverage: dict) -> None:
        check_forced_verdict(coverage, "rwkv6-bwd-fusion-upstream", "NO-GO")

    def test_the_failed_gate_names_the_uncovered_class_and_blocks_the_rest(self, coverage: dict) -> None:
        gate = next(g for g in coverage["records"]["candidate_build"]["gates"] if g["name"] == "dispatch_coverage")
        assert gate["status"] == "fail" and "BT64-D128-dense" in gate["detail"]
        summary = coverage["summary"]
        assert "| candidate_build | dispatch_coverage |" in summary and "BT64-D128-dense" in summary
        for stage in ("candidate_gate", "profile_candidate", "bench", "ncu", "model"):
            assert f"| {stage} | — | — | not run: blocked by candidate_build: dispatch_coverage fail |" in summary
        root = ET.parse(coverage["out"] / "gates.junit.xml").getroot()
        failure = next(c for c in root.iter("testcase") if c.get("name") == "dispatch_coverage").find("failure")
        assert failure is not None and "BT64-D128-dense" in failure.text


CE_EXP2 = "h200_liger_ce_exp2_inconclusive"


class TestRealH200ForcedPastInconclusive:
    """A real forced H200 run of a non-fla in-place replay: bench INCONCLUSIVE, ncu and model collected past it."""

    def test_the_forced_run_names_the_inconclusive_bench_it_walked_past(self, tmp_path: Path) -> None:
        verdict, records, _ = load(CE_EXP2)
        ordered = [next(r for r in records if r["stage"] == s) for s in protocol.STAGES]
        expected = verdict_mod.compute(ordered, campaign="liger-ce-exp2-1266", gpu="h200", candidate="760d446ef70c",
                                       forced=True)
        for key in ("verdict", "would_be", "decided_by", "sentence", "forced_past", "gates", "stages"):
            assert verdict[key] == expected[key], key
        assert (expected["verdict"], expected["would_be"], expected["forced_past"]) == (
            "INCONCLUSIVE", None, ["bench (inconclusive)"])
        report.render(verdict, records, tmp_path)
        summary = (tmp_path / "summary.md").read_text()
        assert "> **Forced run** past bench (inconclusive): never GO." in summary
        page = Page((tmp_path / "index.html").read_text()).text
        assert "Forced run past bench (inconclusive)." in page and "FORCED RUN" in page
        assert "past a STOP" not in summary + page

    def test_a_forced_run_that_walked_past_nothing_shows_no_forced_warning(self, tmp_path: Path) -> None:
        """The same records up to bench, forced: bench is the last record, so nothing was walked past."""
        _, records, _ = load(CE_EXP2)
        upto = [next(r for r in records if r["stage"] == s) for s in protocol.STAGES[:protocol.STAGES.index("bench") + 1]]
        v = verdict_mod.compute(upto, campaign="liger-ce-exp2-1266", gpu="h200", candidate="760d446ef70c", forced=True)
        assert v["forced"] and v["forced_past"] == [] and v["verdict"] == "INCONCLUSIVE"
        report.render(v, upto, tmp_path)
        assert "Forced run" not in (tmp_path / "summary.md").read_text()
        assert "FORCED RUN" not in Page((tmp_path / "index.html").read_text()).text


def test_a_large_data_value_is_named_with_its_size() -> None:
    """Values over GENERIC_MAX_CHARS become one line; a large mapping is folded key by key."""
    big = [{"kernel": f"k{i}", "n_regs": i} for i in range(2000)]
    folded = fold_large({"small": 1, "outer": {"variants": big, "device": "x"}}, "results/c/g/s/record.json")
    assert folded["small"] == 1 and folded["outer"]["device"] == "x"
    line = folded["outer"]["variants"]
    assert line.startswith("2000 entries, ") and line.endswith("kept in results/c/g/s/record.json")


class TestLinks:
    def test_evidence_href_is_relative_to_the_report_folder(self) -> None:
        """Paths relative to the repository root become links from reports/<campaign>/<gpu>/."""
        base = "reports/c/g"
        junit = "results/c/g/candidate_gate/abc/junit.xml"
        assert evidence_href(junit, base) == "../../../" + junit
        assert evidence_href("reports/c/g/verdict.json", base) == "verdict.json"
        assert evidence_href("./logs/c/g/x.log", base) == "../../../logs/c/g/x.log"
        assert evidence_href("/abs/a b.txt", base) == "file:///abs/a%20b.txt"
        assert evidence_href(None, base) is None
        assert evidence_href("", base) is None

    def test_evidence_href_cannot_become_another_scheme(self) -> None:
        """A path that looks like a URL stays a relative, percent-encoded path."""
        href = evidence_href('javascript:alert(1)"><b>', "reports/c/g")
        assert href.startswith("../../../javascript%3Aalert%281%29")
        assert not set('"<> ') & set(href)

    @pytest.mark.parametrize("name", SCENARIOS)
    def test_links_resolve_to_the_evidence_files(self, name: str, tmp_path: Path) -> None:
        """Every link on the page, followed from reports/<campaign>/<gpu>/index.html, reaches the file the record names."""
        verdict, records, history = load(name)
        named = {g["evidence"] for g in verdict["gates"] if g.get("evidence")}
        named |= {s["record"] for s in verdict["stages"] if s.get("record")}
        named |= {r["data"]["diff"]["patch_path"] for r in records if "diff" in r["data"]}
        # a test run's log, JUnit and outcomes files are links too
        named |= {run[k] for r in records for run in r["data"].values() if isinstance(run, dict) and "tests" in run
                  for k in ("log", "junit", "outcomes") if run.get(k)}
        # an ncu pass's report and Nsight Compute's own log are links
        named |= {run[k] for r in records if r["stage"] == "ncu" for row in r["data"].get("rows") or []
                  for passes in (row.get("passes") or {}).values() for run in passes.values()
                  for k in ("rep", "ncu_log") if run.get(k)}
        # absolute paths under the folder the run was in (another machine's) are read relative to it
        named = {repo_relative(p, records) for p in named}
        assert not any(p.startswith("/") for p in named)
        for rel in named:
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text("evidence")
        # the target's clone is a folder; inside the run's folder it is a relative link like the evidence
        clones = {repo_relative(r["data"]["repo_path"], records) for r in records
                  if r["stage"] == "target" and isinstance(r["data"].get("repo_path"), str)}
        clones = {c for c in clones if not c.startswith("/")}
        for rel in clones:
            (tmp_path / rel).mkdir(parents=True, exist_ok=True)
        out = report_dir(tmp_path, verdict)
        report.render(verdict, records, out, history=history)
        page = Page((out / "index.html").read_text())
        hrefs = {a["href"] for a in page.tags("a") if not a["href"].startswith("#")}
        # a path outside the run's folder (e.g. the user's clone of the target) is a file:// link to where it was
        outside = {h for h in hrefs if h.startswith("file://")}
        hrefs -= outside
        dumped = json.dumps(records)
        for href in outside:
            path = unquote(href.removeprefix("file://"))
            assert json.dumps(path) in dumped and repo_relative(path, records) == path, href
        reached = set()
        for href in hrefs:
            target = (out / unquote(href)).resolve()
            rel = target.relative_to(tmp_path.resolve()).as_posix()
            assert target.is_file() or (rel in clones and target.is_dir()), href
            reached.add(rel)
        assert reached - clones == named


@pytest.fixture(name="hostile", scope="module")
def _hostile(tmp_path_factory: pytest.TempPathFactory) -> dict:
    verdict, records, history = load("synthetic_h200_hostile")
    out = report_dir(tmp_path_factory.mktemp("hostile"), verdict)
    report.render(verdict, records, out, history=history)
    return {"out": out, "html": (out / "index.html").read_text(), "verdict": verdict}


class TestHostileStrings:
    def test_fixture_carries_the_hostile_strings(self) -> None:
        """The fixture puts the hostile strings in a test id, a kernel name, a message and an env value."""
        _, records, _ = load("synthetic_h200_hostile")
        gate = next(r for r in records if r["stage"] == "candidate_gate")
        build = next(r for r in records if r["stage"] == "candidate_build")
        assert any(HOSTILE[0] in t["nodeid"] for t in gate["data"]["tests"])
        assert any(HOSTILE[1] in (t["message"] or "") and HOSTILE[2] in t["message"] for t in gate["data"]["tests"])
        assert any(HOSTILE[1] == k["name"] for k in build["data"]["kernels"])
        assert HOSTILE[1] in gate["provenance"]["env"].values()
        assert any(HOSTILE[2] in v for v in gate["provenance"]["env"].values())

    def test_hostile_strings_are_text_not_markup(self, hostile: dict) -> None:
        """No script element or onerror attribute exists, and the literal strings are readable text."""
        page = Page(hostile["html"])
        assert page.errors == []
        assert page.tags("script") == []
        assert page.tags("img") == []
        assert not any("onerror" in attrs for _, attrs in page.elements)
        for s in HOSTILE:
            assert s in page.text, s
        # the skipped test's message "<b>bold</b>" is text, so the page's own <b> elements carry no attributes
        assert "<b>bold</b>" in page.text
        assert all(attrs == {} for attrs in page.tags("b"))

    def test_hostile_strings_are_text_in_svg(self, hostile: dict) -> None:
        """Labels inside the SVG plots are escaped: each plot helper, given the hostile strings, parses as XML
        with the strings as text; every plot on the page parses too."""
        made = [svg_interval_plot([(HOSTILE[0], 0.9, 0.85, 0.95), (HOSTILE[1], 1.0, 0.99, 1.01)], band=(0.98, 1.02),
                                  geomean=(HOSTILE[2], 0.95, 0.9, 1.0), bar=1.08, classes=[HOSTILE[0], None]),
                svg_series_plot({HOSTILE[0]: [1.0, 2.0, 3.0]}, HOSTILE[1], title=HOSTILE[2]),
                svg_bar_chart([HOSTILE[0]], {HOSTILE[1]: [1.0]}, HOSTILE[2])]
        page = re.findall(r"<svg .*?</svg>", hostile["html"], flags=re.S)
        texts = []
        for svg in [*made, *page]:
            root = ET.fromstring(svg)
            texts += ["".join(e.itertext()) for e in root.iter()]
            assert not any(e.tag.endswith(("script", "foreignObject", "image")) for e in root.iter())
        for s in HOSTILE:
            assert any(s in x for x in texts), s

    def test_hostile_href_stays_inside_its_attribute(self, hostile: dict) -> None:
        """An evidence path with quotes and angle brackets becomes one percent-encoded href."""
        page = Page(hostile["html"])
        hrefs = [a["href"] for a in page.tags("a") if "img" in (a.get("href") or "")]
        folder = "../../../results/synthetic-fusion/h200/candidate_gate/9e8d7c6b5a40/"
        assert hrefs == [folder + "%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E.xml"]

    def test_summary_escapes_markdown(self, hostile: dict) -> None:
        """Pipes, backticks and angle brackets from run data are escaped, so each table row keeps its cells."""
        summary = (hostile["out"] / "summary.md").read_text()
        assert "<script>" not in summary and "<img" not in summary
        assert r"1 intermittent \| \`flaky\` (failed 1 of 3 runs)" in summary
        assert r"\<script\>alert(1)\</script\>" in summary
        for line in summary.splitlines():
            if line.startswith("| "):
                assert len(re.findall(r"(?<!\\)\|", line)) in (4, 6), line

    def test_junit_keeps_hostile_text(self, hostile: dict) -> None:
        """The JUnit file parses and carries the hostile value verbatim in the skipped message."""
        root = ET.parse(hostile["out"] / "gates.junit.xml").getroot()
        case = next(c for c in root.iter("testcase") if c.get("name") == "gate_tests_pass")
        assert "1 intermittent | `flaky`" in case.find("skipped").get("message")
        assert HOSTILE[1] in case.find("skipped").text


class TestJunit:
    def test_one_suite_per_stage_one_case_per_gate(self, rendered: dict) -> None:
        """Suites follow the verdict's stages; a suite's testcases are that stage's gates (or one not_run case)."""
        root, verdict = rendered["junit"], rendered["verdict"]
        assert root.tag == "testsuites"
        suites = root.findall("testsuite")
        assert [s.get("name") for s in suites] == [s["stage"] for s in verdict["stages"]]
        for suite, stage in zip(suites, verdict["stages"]):
            names = [c.get("name") for c in suite.findall("testcase")]
            expected = [g["name"] for g in verdict["gates"] if g["stage"] == stage["stage"]]
            assert names == (expected or ["not_run"])
            assert int(suite.get("tests")) == len(names)

    def test_failure_and_skipped_counts(self, rendered: dict) -> None:
        """fail -> <failure>; stop, inconclusive, unavailable, skip and not_run -> <skipped>; totals add up."""
        root = rendered["junit"]
        tests, failures, skipped, errors = JUNIT_TOTALS[rendered["name"]]
        assert len(root.findall(".//testcase")) == tests == int(root.get("tests"))
        assert len(root.findall(".//failure")) == failures == int(root.get("failures"))
        assert len(root.findall(".//skipped")) == skipped == int(root.get("skipped"))
        assert len(root.findall(".//error")) == errors == int(root.get("errors"))
        for gate in rendered["verdict"]["gates"]:
            case = next(c for c in root.iter("testcase") if c.get("name") == gate["name"] and
                        c.get("classname") == f"kgate.{gate['stage']}")
            kind = {"fail": "failure", "pass": None}.get(gate["status"], "skipped")
            assert [e.tag for e in case if e.tag in ("failure", "skipped", "error")] == ([kind] if kind else [])

    def test_control_characters_do_not_break_xml(self, tmp_path: Path) -> None:
        """A NUL or an escape character in a gate value still gives parseable XML."""
        verdict, records, _ = load("synthetic_cpu_nogo")
        verdict = copy.deepcopy(verdict)
        verdict["gates"][-1]["value"] = "bad\x00byte \x1b[31mred\x1b[0m \x07bell"
        report.render(verdict, records, tmp_path)
        root = ET.parse(tmp_path / "gates.junit.xml").getroot()
        messages = [f.get("message") for f in root.iter("failure")]
        assert any("bad\\x00byte red \\x07bell" in m for m in messages)


class TestSummary:
    def test_verdict_line_and_gate_table(self, rendered: dict) -> None:
        """summary.md opens with the verdict, then a Markdown table with a row per gate and per not-run stage."""
        summary, verdict = rendered["summary"], rendered["verdict"]
        lines = summary.splitlines()
        assert lines[0].startswith(f"### kgate verdict: **{verdict['verdict']}**")
        header = lines.index("| stage | gate | threshold | measured | status |")
        assert lines[header + 1] == "|---|---|---|---|---|"
        rows = lines[header + 2 : header + 2 + len(verdict["gates"])]
        for gate, row in zip(verdict["gates"], rows):
            assert md_escape(gate["name"]) in row
            assert row.endswith(f"| {md_escape(STATUS_LABELS[gate['status']])} |")
        not_run = [s for s in verdict["stages"] if s["status"] == "not_run"]
        after = lines[header + 2 + len(verdict["gates"]) :][: len(not_run)]
        assert [r.split(" | ")[0] for r in after] == [f"| {md_escape(s['stage'])}" for s in not_run]

    def test_shas_and_job_ids(self, rendered: dict) -> None:
        """Target baseline, BENCH_BASE and candidate SHAs and each stage's job are listed."""
        summary = rendered["summary"]
        records = {r["stage"]: r for r in rendered["records"]}
        assert f"| target baseline | `{records['target']['data']['baseline_sha']}` |" in summary
        if "fixture_freeze" in records:
            assert f"| BENCH_BASE | `{records['fixture_freeze']['data']['bench_base']}` |" in summary
        else:
            assert "| BENCH_BASE | — | no record |" in summary
        if "candidate_build" in records:
            build = records["candidate_build"]["data"]
            assert f"| candidate | `{build.get('candidate_sha') or build['commit']}` |" in summary
        else:
            assert "| candidate | — | no record |" in summary
        for record in rendered["records"]:
            job = record["provenance"]["slurm"]["job_id"]
            assert (f"slurm {job}" if job else f"local on {record['provenance']['host']}") in summary

    def test_sha_falls_back_to_provenance(self, tmp_path: Path) -> None:
        """Without a SHA in data, the stage's provenance.git.head is used and named as the source."""
        verdict, records, _ = load("synthetic_cpu_smoke")
        records = copy.deepcopy(records)
        for r in records:
            r["data"].pop("bench_base", None)
        report.render(verdict, records, tmp_path)
        assert "| BENCH\\_BASE |" not in (tmp_path / "summary.md").read_text()
        assert "| BENCH_BASE | `a1b2c3d4e5f60718293a4b5c6d7e8f9012345678` | fixture_freeze provenance.git.head |" in (
            tmp_path / "summary.md"
        ).read_text()

    def test_md_escape(self) -> None:
        """Markdown specials are backslash-escaped; intraword underscores and plain text stay readable."""
        assert md_escape("a|b`c`") == r"a\|b\`c\`"
        assert md_escape("<img src=x>") == r"\<img src=x\>"
        assert md_escape("&amp; *x* [l](u)") == r"\&amp; \*x\* \[l\](u)"
        assert md_escape("gate_tests_pass") == "gate_tests_pass"
        assert md_escape("_lead and trail_") == r"\_lead and trail\_"
        assert md_escape("two\nlines") == "two lines"
        assert md_code("3f2a9c1e0b7d") == "`3f2a9c1e0b7d`"
        assert md_code("a`b") == r"a\`b"


class TestGenericData:
    def test_unknown_stage_and_data_render_generically(self, tmp_path: Path) -> None:
        """Data no section knows is named in one line beside the record link, not drawn: no generic plot or table."""
        verdict, records, _ = load("synthetic_cpu_smoke")
        new = copy.deepcopy(records[0])
        new.update(stage="bench", candidate="3f2a9c1e0b7d", status="inconclusive", reasons=["row B1 AMBIGUOUS"])
        new["data"] = {
            "rows": [{"row": "B1_T64", "ratio": 1.03, "interval": [0.99, 1.07], "class": "AMBIGUOUS"}],
            "rounds_ms": {"baseline": [2.0, 2.1, 2.05, 2.2], "candidate": [1.8, 1.85, 1.9, 1.95]},
            "clocks_mhz": [1980, 1980, 1965, 1950],
            "log_path": "results/synthetic-fusion/cpu/bench/3f2a9c1e0b7d/bench.log",
            "flag": True,
            "nothing": None,
            "note": "x" * 200,
        }
        verdict = copy.deepcopy(verdict)
        verdict["stages"] = [s for s in verdict["stages"] if s["stage"] != "bench"]
        out = report_dir(tmp_path, verdict)
        report.render(verdict, [*records, new], out)
        html = (out / "index.html").read_text()
        page = Page(html)
        assert page.errors == []
        section = next(t for a, t in page.sections.items() if a.endswith("-bench"))
        assert "row B1 AMBIGUOUS" in section
        line = re.search(r'<p class="note other">(.*?)</p>', html.split('-bench"')[-1], flags=re.S).group(1)
        text = Page(line).text
        for fact in ("rows (1 item)", "rounds_ms (2 keys)", "clocks_mhz (4 items)", "flag true", "nothing —",
                     "note (text, 200 characters)", "bench.log"):
            assert fact in " ".join(text.split()), fact
        assert "../../../results/synthetic-fusion/cpu/bench/3f2a9c1e0b7d/bench.log" in line
        assert "1980" not in section and "<svg" not in html.split('-bench"')[-1]

    def test_scalar_data_and_missing_fields(self, tmp_path: Path) -> None:
        """A record with data that is not a mapping and no provenance still renders."""
        verdict, records, _ = load("synthetic_cpu_smoke")
        records = copy.deepcopy(records)
        records[0]["data"] = "just text"
        del records[0]["provenance"]
        records[1]["data"] = None
        report.render(verdict, records, tmp_path)
        assert "just text" in Page((tmp_path / "index.html").read_text()).text


class TestStageRecordShapes:
    """Shapes the stages write beside the documented ones: nested test runs, gate details, absolute paths."""

    def test_nested_test_run(self, tmp_path: Path) -> None:
        """A test list under data.run gets the test view; its command is one shell line and its log a link."""
        verdict, records, _ = load("synthetic_cpu_nogo")
        records = copy.deepcopy(records)
        gate = next(r for r in records if r["stage"] == "candidate_gate")
        tests = gate["data"].pop("tests")
        gate["data"]["run"] = {
            "summary": "2 failed, 6 passed", "exit_code": 1, "command": ["python", "-m", "pytest", "tests/a b.py"],
            "log": "results/synthetic-fusion/cpu/candidate_gate/7d41b0e2c9aa/gate.pytest.log",
            "collected": [t["nodeid"] for t in tests], "tests": tests, "env": {"TRITON_INTERPRET": "1"},
        }
        out = report_dir(tmp_path, verdict)
        report.render(verdict, records, out)
        page = Page((out / "index.html").read_text())
        section = next(t for a, t in page.sections.items() if a.endswith("-candidate_gate"))
        assert "Tests: 8 collected" in section
        assert "failed: tests/ops/test_toy_scan.py::test_bwd[float32-B1-T64-H2-D32]" in section
        assert "python -m pytest 'tests/a b.py'" in section
        assert "more about this run" in section
        hrefs = [a["href"] for a in page.tags("a")]
        assert "../../../results/synthetic-fusion/cpu/candidate_gate/7d41b0e2c9aa/gate.pytest.log" in hrefs

    def test_absolute_evidence_under_the_repository_is_linked_relatively(self, tmp_path: Path) -> None:
        """An absolute evidence path inside the repository gets a relative link and a short name."""
        verdict, records, _ = load("synthetic_cpu_nogo")
        verdict = copy.deepcopy(verdict)
        junit = tmp_path / "results/synthetic-fusion/cpu/candidate_gate/7d41b0e2c9aa/junit.xml"
        verdict["gates"][-1]["evidence"] = str(junit)
        out = report_dir(tmp_path, verdict)
        report.render(verdict, records, out)
        page = Page((out / "index.html").read_text())
        hrefs = [a["href"] for a in page.tags("a")]
        assert "../../../results/synthetic-fusion/cpu/candidate_gate/7d41b0e2c9aa/junit.xml" in hrefs
        assert not any(h.startswith("file:") for h in hrefs)
        row = next(cells for cls, cells in page.rows if cls == "gates" and cells[1] == verdict["gates"][-1]["name"])
        assert row[5] == "junit.xml"
        # outside reports/<campaign>/<gpu>/ the repository root is unknown: a file:// link
        report.render(verdict, records, tmp_path / "elsewhere")
        hrefs = [a["href"] for a in Page((tmp_path / "elsewhere/index.html").read_text()).tags("a")]
        assert junit.as_uri() in hrefs

    def test_gate_detail_reaches_every_output(self, tmp_path: Path) -> None:
        """A gate's detail (e.g. the failing ids) is in the gate table, summary.md and the JUnit failure."""
        verdict, records, _ = load("synthetic_cpu_nogo")
        verdict = copy.deepcopy(verdict)
        detail = "2 not passing: tests/ops/test_toy_scan.py::test_bwd[float32-B1-T64-H2-D32], ..."
        gate = next(g for g in verdict["gates"] if g["name"] == "gate_tests_pass")
        gate["detail"] = detail
        report.render(verdict, records, tmp_path)
        page = Page((tmp_path / "index.html").read_text())
        row = next(cells for cls, cells in page.rows if cls == "gates" and cells[1].startswith("gate_tests_pass"))
        assert detail in row[3]
        assert md_escape(detail) in (tmp_path / "summary.md").read_text()
        root = ET.parse(tmp_path / "gates.junit.xml").getroot()
        failure = next(c for c in root.iter("testcase") if c.get("name") == "gate_tests_pass").find("failure")
        assert detail in failure.text

    def test_headline_without_a_deciding_gate(self, tmp_path: Path) -> None:
        """With no deciding gate the header tallies the gates; with only a deciding stage it names that stage."""
        verdict, records, _ = load("synthetic_cpu_smoke")
        report.render({**verdict, "decided_by": {"stage": None, "gate": None}}, records, tmp_path)
        header = Page((tmp_path / "index.html").read_text().split('<h2 id="gates">')[0]).text
        assert "9 of 9 gates pass" in header and "3 stages not run" in header
        undecided = {**verdict, "verdict": "INCONCLUSIVE", "decided_by": {"stage": "bench", "gate": None}}
        report.render(undecided, records, tmp_path)
        header = Page((tmp_path / "index.html").read_text().split('<h2 id="gates">')[0]).text
        assert "bench not run CPU run: the timing stages need a GPU" in " ".join(header.split())

    def test_history_without_verdicts(self, tmp_path: Path) -> None:
        """History entries carrying other fields (statuses, a source mapping) show them, with what changed."""
        verdict, records, _ = load("synthetic_cpu_nogo")
        history = [
            {"candidate": "1e0c5a7b3d92", "created_utc": "2026-03-01T16:40:00Z", "source": {"kind": "overlay", "value": "k/"},
             "build": "pass", "gate": "pass", "numbers": {"gate_tests_pass": "8 passed"}},
            {"candidate": "7d41b0e2c9aa", "created_utc": "2026-03-02T11:02:25Z", "source": {"kind": "overlay", "value": "k/"},
             "build": "pass", "gate": "fail", "numbers": {"gate_tests_pass": "2 failed, 6 passed"}},
        ]
        report.render(verdict, records, tmp_path, history=history)
        page = Page((tmp_path / "index.html").read_text())
        rows = [cells for cls, cells in page.rows if cls == "grid" and cells[0][:12] in ("1e0c5a7b3d92", "7d41b0e2c9aa")]
        assert rows[0] == ["7d41b0e2c9aa (this report)", "2026-03-02T11:02:25Z", "kind=overlay, value=k/", "pass",
                           "fail was pass", "2 failed, 6 passed was 8 passed"]
        assert rows[1][4:] == ["pass", "8 passed"]


class TestPlots:
    def test_interval_plot(self) -> None:
        """Rows are classified against the band, in words; title, desc and axis label are present; labels escaped."""
        svg = svg_interval_plot(
            [("fast <row>", 1.12, 1.09, 1.15), ("same", 1.0, 0.99, 1.01), ("slow", 0.9, 0.88, 0.93),
             ("amb", 1.02, 0.99, 1.06)],
            ref=1.0,
            band=(0.98, 1.02),
        )
        root = ET.fromstring(str(svg))
        ns = "{http://www.w3.org/2000/svg}"
        assert root.find(f"{ns}title").text == "Ratio per row with its interval"
        desc = root.find(f"{ns}desc").text
        assert "fast <row>: 1.12 [1.09, 1.15] FAST" in desc
        assert "same: 1 [0.99, 1.01] SAME" in desc
        assert "slow: 0.9 [0.88, 0.93] SLOW" in desc
        assert "amb: 1.02 [0.99, 1.06] AMBIGUOUS" in desc
        texts = ["".join(e.itertext()) for e in root.iter(f"{ns}text")]
        assert "SAME band" in texts
        assert "ratio (baseline time / candidate time)" in texts
        assert root.get("role") == "img"

    def test_series_plot_shows_drift(self) -> None:
        """Each arm is one line; the legend and desc give the median and the drift per round."""
        svg = svg_series_plot({"A": [1.0, 1.01, 1.02, 1.03], "B": [0.9, 0.9, 0.9, 0.9]}, "time (ms)")
        root = ET.fromstring(str(svg))
        ns = "{http://www.w3.org/2000/svg}"
        desc = root.find(f"{ns}desc").text
        assert "A: 1, 1.01, 1.02, 1.03 (median 1.015, drift +0.99% per round)" in desc
        assert "B: 0.9, 0.9, 0.9, 0.9 (median 0.9, drift +0.00% per round)" in desc
        assert len(root.findall(f"{ns}polyline")) == 2
        texts = ["".join(e.itertext()) for e in root.iter(f"{ns}text")]
        assert "round" in texts and "time (ms)" in texts

    def test_bar_chart(self) -> None:
        """One bar per label and series, values written, legend for several series."""
        svg = svg_bar_chart(["k1", "k<2>"], {"baseline": [0.5, 0.9], "candidate": [0.4, float("nan")]}, "ms")
        root = ET.fromstring(str(svg))
        ns = "{http://www.w3.org/2000/svg}"
        assert "k<2>: baseline 0.9, candidate nan" in root.find(f"{ns}desc").text
        texts = ["".join(e.itertext()) for e in root.iter(f"{ns}text")]
        assert {"baseline", "candidate", "n/a", "ms", "k<2>"} <= set(texts)

    @pytest.mark.parametrize(
        "make",
        [
            lambda: svg_interval_plot([]),
            lambda: svg_interval_plot([("x", 1.0, None, None)], band=(1.0, 1.0)),
            lambda: svg_series_plot({}, "y"),
            lambda: svg_series_plot({"a": [float("nan"), 1.0]}, "y"),
            lambda: svg_series_plot({"a": [5.0]}, "y"),
            lambda: svg_bar_chart([], {}, "ms"),
            lambda: svg_bar_chart(["a"], {"s": [-1.0]}, "ms"),
        ],
    )
    def test_degenerate_input_still_gives_valid_svg(self, make) -> None:
        """Empty, constant, single-point, negative and NaN inputs give parseable SVG, never an exception."""
        root = ET.fromstring(str(make()))
        assert root.tag == "{http://www.w3.org/2000/svg}svg"

    def test_nice_ticks(self) -> None:
        """Ticks are round numbers covering the range."""
        assert nice_ticks(0, 1, 5) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
        assert nice_ticks(0.97, 1.13, 6) == [0.975, 1.0, 1.025, 1.05, 1.075, 1.1, 1.125]


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (CI installs it: apt-get install -y chromium)")
class TestChromium:
    @staticmethod
    def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", *args,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)

    @pytest.mark.parametrize("name", SCENARIOS)
    def test_page_loads_and_shows_the_verdict(self, name: str, tmp_path: Path) -> None:
        """Headless Chromium renders a non-trivial screenshot, and its DOM holds the verdict and every gate name as text."""
        verdict, records, history = load(name)
        out = OUT / f"report-{name}" / "reports" / verdict["campaign"] / verdict["gpu"]
        if out.exists():
            shutil.rmtree(out)
        report.render(verdict, records, out, history=history)
        png = OUT / f"report-{name}.png"
        png.unlink(missing_ok=True)
        url = (out / "index.html").resolve().as_uri()
        shot = self._chromium(tmp_path / "p1", f"--screenshot={png}", "--window-size=1400,3000", url)
        assert png.is_file(), shot.stderr[-2000:]
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert len(data) > 20_000
        dom = self._chromium(tmp_path / "p2", "--dump-dom", url)
        assert dom.returncode == 0, dom.stderr[-2000:]
        body = dom.stdout
        assert f"<h1>{verdict['verdict']}</h1>" in body
        for gate in verdict["gates"]:
            assert gate["name"] in body
        if name == REAL:
            assert TestRealH200.CUDA in body and TestRealH200.FAILING in body
        # hostile strings stayed text once a browser parsed the page
        assert "<script" not in body.lower()
        assert "<img" not in body.lower()


def test_the_autotune_picks_of_every_tuned_kernel_are_listed_per_pick(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The real H200 cumsum replay: the candidate's edited kernel was tuned in each arm (status changed). The
    bench section lists every distinct (kernel, status, base pick, candidate pick) once with the rows that chose
    it, and counts the picks by status; the rows of the record are all there."""
    rendered = render_scenario("h200_cumsum_forced_bench", tmp_path_factory)
    picks = [(f"{r['row']} · {r['mode']}", p) for r in rendered["records"]["bench"]["data"]["rows"]
             for p in r.get("autotune_picks") or []]
    assert picks
    table = [cells for cls, cells in rendered["page"].rows if cls == "grid" and len(cells) == 5
             and cells[0] == "chunk_local_cumsum_vector_kernel"]
    expected = {}
    for row, p in picks:
        expected.setdefault((p["kernel"], p["status"], ", ".join(p["base"]), ", ".join(p["cand"])), []).append(row)
    assert sorted(tuple(c[:4]) for c in table) == sorted(expected)
    for cells in table:
        assert set(cells[4].split(", ")) == set(expected[tuple(cells[:4])])
    assert f"Autotune picks of every tuned kernel in both arms ({len(expected)} changed)" in rendered["page"].text
