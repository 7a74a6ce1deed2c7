"""Where files go: docs/ holds prose and figures, the raw outputs behind the figures live in results/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_docs_hold_prose_and_figures_only() -> None:
    stray = sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*")
                   if p.is_file() and p.suffix not in {".md", ".png"})
    assert not stray, (f"{stray}: docs/ keeps prose and figures (.md, .png); move raw outputs (JSON, JSONL, logs, "
                       "archives) to results/ and say in results/README.md what each is and which command wrote it.")


def test_results_readme_names_every_entry() -> None:
    readme = (REPO / "results" / "README.md").read_text()
    entries = [p.name + ("/" if p.is_dir() else "") for p in (REPO / "results").iterdir() if p.name != "README.md"]
    gpu = [p.name for p in (REPO / "results" / "gpu").iterdir()]
    missing = [e for e in entries + gpu if f"`{e}`" not in readme]
    assert not missing, f"results/README.md does not say what {missing} are (and which command wrote them)."
