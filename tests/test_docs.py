"""What the documents promise: every document a project file names exists, every "METHOD.md §n" in the repository
names a section of docs/METHOD.md, every `RESULTS.md, "name"` names a heading or a bold row of docs/RESULTS.md, and
every relative link of the README and the guides leads to a file."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".cfg", ".txt"}
SKIP_DIRS = {".git", ".venv", ".venv-latest", "runs", "outputs", "node_modules", "__pycache__"}

SECTION = re.compile(r"§\s*(\d+(?:\.\d+)*)")
DOC_NAME = re.compile(r"[\w-]+\.md\b")


@functools.cache
def _project_text_files() -> tuple[Path, ...]:
    """The project's text files, walked once; virtual environments and run folders pruned, not walked."""
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        found += [Path(folder) / f for f in sorted(files) if Path(f).suffix in TEXT_SUFFIXES]
    return tuple(found)


def method_sections() -> set[str]:
    """The numbers of docs/METHOD.md's numbered headings ('3', '3.4', ...)."""
    found = set()
    for line in (REPO / "docs" / "METHOD.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", line)
        if match:
            found.add(match.group(1))
    return found


def method_citations(text: str, cites_method: bool) -> list[tuple[int, str]]:
    """(line, section) of every METHOD.md citation in `text`: a § number whose nearest document name before it on
    its line is METHOD.md, or, in a file that cites METHOD.md, a § number with no document name before it."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for match in SECTION.finditer(line):
            names = DOC_NAME.findall(line[: match.start()])
            if (names and names[-1] == "METHOD.md") or (not names and cites_method):
                found.append((n, match.group(1)))
    return found


def test_method_citations_are_read_as_meant() -> None:
    text = 'see METHOD.md §3.4 and §2.3; BENCHMARKS.md §2 is another file\n(§4) here\nMETHOD.md §1, §2, §4'
    assert method_citations(text, cites_method=True) == [(1, "3.4"), (1, "2.3"), (2, "4"), (3, "1"), (3, "2"), (3, "4")]
    assert method_citations("(§4) here", cites_method=False) == []


def test_every_method_citation_names_a_section_of_docs_method() -> None:
    sections = method_sections()
    assert {"1", "2", "2.3", "3", "3.4", "3.5", "4", "4.1", "5"} <= sections, sorted(sections)
    wrong = []
    for path in _project_text_files():
        if path == REPO / "docs" / "METHOD.md":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if "§" not in text:
            continue
        for line, number in method_citations(text, "METHOD.md" in text):
            if number not in sections:
                wrong.append(f"{path.relative_to(REPO)}:{line}: §{number}")
    assert not wrong, f"these cite sections docs/METHOD.md does not have ({sorted(sections)}): {wrong}"


RESULTS_CITATION = re.compile(r"RESULTS\.md(?:'s\s+|,\s*|\s+\()\"([^\"]+)\"")
"""`RESULTS.md, "name"`, `RESULTS.md ("name"` or `RESULTS.md's "name"`: a section or row named by how it begins."""


def results_names() -> list[str]:
    """docs/RESULTS.md's headings and bold labels (the first cell of a row of figures), whitespace made single."""
    text = (REPO / "docs" / "RESULTS.md").read_text(encoding="utf-8")
    heads = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    return [" ".join(name.split()) for name in heads + re.findall(r"\*\*([^*]+)\*\*", text)]


def results_citations(text: str) -> list[tuple[int, str]]:
    """(line, name) of every citation of a docs/RESULTS.md section or row in `text`, a name broken across lines
    read as one."""
    return [(text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split())) for m in RESULTS_CITATION.finditer(text)]


def test_results_citations_are_read_as_meant() -> None:
    text = 'a (docs/RESULTS.md, "Speed on CPU") b\nRESULTS.md ("Paragraph\n  text") and RESULTS.md\'s "Word pairs"; RESULTS.md.'
    assert results_citations(text) == [(1, "Speed on CPU"), (2, "Paragraph text"), (3, "Word pairs")]


def test_every_results_citation_names_a_section_or_row_of_docs_results() -> None:
    names = results_names()
    assert "The shipped checkpoints" in names and "Precision per CPU" in names
    wrong = []
    for path in _project_text_files():
        # HISTORY names where each of its sections stood in RESULTS, not where it stands now
        if path in (REPO / "results" / "HISTORY.md", Path(__file__).resolve()):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for line, name in results_citations(text) if "RESULTS.md" in text else ():
            if not any(n.startswith(name) for n in names):
                wrong.append(f"{path.relative_to(REPO)}:{line}: {name!r}")
    assert not wrong, ("these cite a section or row docs/RESULTS.md does not have (its headings and bold labels; "
                       f"what moved is in results/HISTORY.md or experiments/NOTEBOOK.md): {wrong}")


INLINE_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)


def relative_links(text: str) -> list[str]:
    """Link targets of a Markdown text that point into the repository (no scheme, no bare #anchor), anchors cut."""
    targets = INLINE_LINK.findall(text) + REFERENCE_LINK.findall(text)
    return [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_relative_links_are_read_as_meant() -> None:
    text = '[a](docs/A.md) [b](https://x.org/B.md) [c](#top) [d](../e/F.md#part "title")\n[ref]: training/G.md\n'
    assert relative_links(text) == ["docs/A.md", "../e/F.md", "training/G.md"]


def test_every_relative_link_of_the_readme_and_the_guides_resolves() -> None:
    documents = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "results" / "README.md",
                 *sorted((REPO / "experiments").glob("*.md"))]
    broken = [f"{doc.relative_to(REPO)}: {target}" for doc in documents
              for target in relative_links(doc.read_text(encoding="utf-8"))
              if not (doc.parent / target).exists()]
    assert not broken, f"links to files that do not exist: {broken}"


def test_every_document_a_project_file_names_is_in_the_repository() -> None:
    present = {p.name for p in _project_text_files() if p.suffix == ".md"}
    missing = sorted({f"{name} (named in {path.relative_to(REPO)})" for path in _project_text_files()
                      if path != Path(__file__).resolve()
                      for name in re.findall(r"\b[A-Z][A-Z_]*\.md\b", path.read_text(encoding="utf-8", errors="replace"))
                      if name not in present})
    assert not missing, f"documents named but not in the repository: {missing}"
