"""Where files go: docs/ holds prose and figures, the raw outputs behind the figures live in results/, and the
research probes, their raw outputs and the notebook of earlier runs live in experiments/."""

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


def test_experiments_readme_names_every_probe_and_entry() -> None:
    readme = (REPO / "experiments" / "README.md").read_text()
    probes = [p.name for p in (REPO / "experiments").iterdir() if p.is_file() and p.suffix in {".py", ".sh"}]
    entries = [p.name + ("/" if p.is_dir() else "") for p in (REPO / "experiments" / "results").iterdir()]
    missing = [e for e in probes + entries if f"`{e}`" not in readme]
    assert not missing, f"experiments/README.md does not say what {missing} are (and which command wrote them)."


def test_experiments_hold_probes_notes_and_their_results_only() -> None:
    top = sorted(p.name for p in (REPO / "experiments").iterdir()
                 if not (p.is_file() and p.suffix in {".py", ".sh", ".md"}) and p.name not in {"results", "__pycache__"})
    assert not top, (f"{top}: experiments/ keeps the probes (.py, .sh), README.md and NOTEBOOK.md at its top level "
                     "and their raw outputs in experiments/results/.")


def test_the_library_does_not_import_the_experiments() -> None:
    users = [str(p.relative_to(REPO)) for d in ("training", "eval", "qrag_integrations", "scripts", "examples")
             for p in (REPO / d).rglob("*.py") if "experiments" in _imports_any(p)]
    assert not users, f"{users} import from experiments/: what the library or a user script needs belongs outside it."


def _imports_any(path: Path) -> set[str]:
    """The top-level names `path` imports (import x, from x import y)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


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
