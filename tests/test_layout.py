"""Where files go: docs/ holds prose and figures, the raw outputs behind the figures live in results/."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def _imports(path: Path, package: str) -> set[str]:
    """The modules of `package` that `path` imports anywhere (top level, in functions, under TYPE_CHECKING)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + "."):
            found.add(node.module[len(package) + 1 :].split(".")[0])
    return found


@pytest.mark.parametrize("package", ["training", "eval"])
def test_no_import_cycle(package: str) -> None:
    graph = {p.stem: _imports(p, f"qrag.{package}") for p in (REPO / package).glob("*.py")}

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for dep in sorted(graph.get(node, ())):
                if dep == start:
                    return [*path, start]
                if dep not in path:
                    stack.append((dep, [*path, dep]))
        return None

    cycles = [c for c in map(cycle_from, sorted(graph)) if c]
    assert not cycles, f"import cycles in {package}/: {[' -> '.join(c) for c in cycles]}"
