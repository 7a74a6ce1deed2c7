"""Where files go: docs/ holds prose and figures, the raw outputs behind the figures live in results/, and the
research probes, their raw outputs and the notebook of earlier runs live in experiments/."""

from __future__ import annotations

import sys
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


PACKAGE_OF = {"qrag_integrations": "integrations"}  # the folders install as qrag.training, qrag.integrations, qrag.eval


def _module_graph(folder: str) -> dict[str, set[str]]:
    """Every module of `qrag.<folder>` (subpackages included) → the modules of it that it imports: every import
    statement counts (top level, inside functions, under TYPE_CHECKING); `from a.b import c` names the module
    `a.b.c` where c is one, else `a.b`."""
    import ast

    root = REPO / folder
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(("qrag", PACKAGE_OF.get(folder, folder), *parts))
        modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                found.update(subs or ([base] if base in modules else []))
        graph[name] = found - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("folder", ["training", "eval", "qrag_integrations"])
def test_no_import_cycle(folder: str) -> None:
    graph = _module_graph(folder)
    assert len(graph) > 5, f"found only {sorted(graph)} under {folder}/"
    assert not _cycles(graph), f"import cycles in {folder}/: {_cycles(graph)}"


def test_the_finder_sees_a_cycle_inside_a_function(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "training"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from qrag.training.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from qrag.training import a\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _cycles(_module_graph("training")) == [["qrag.training.a", "qrag.training.b"]]


FLOORS = {"data": 1, "model": 2, "search": 3, "learn": 4}
"""The core's floors (docs/GUIDE.md, "The layout"): each imports only the floors below it and the helpers beside
them at the top of `training/` (atomic writes, config overlays, input checks), which import no floor."""


def test_each_floor_imports_only_the_floors_below_it() -> None:
    def floor(module: str) -> int:
        part = module.split(".")[2] if module.count(".") >= 2 else ""
        return FLOORS.get(part, 0 if module.count(".") >= 2 else 5)  # 0: a helper module, 5: the package itself

    upward = sorted(f"{a} -> {b}" for a, deps in _module_graph("training").items() for b in deps
                    if floor(a) < 5 and floor(b) > floor(a))
    assert not upward, f"imports that point up a floor: {upward}"


def test_the_adapters_import_the_core_through_the_search_and_model_facades() -> None:
    used = {b for deps in _module_graph("qrag_integrations").values() for b in deps}
    import ast

    core = set()
    for path in (REPO / "qrag_integrations").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qrag.training"):
                core.add(node.module)
    assert core == {"qrag.training.model", "qrag.training.search"}, core
    assert "qrag.integrations.metric" in used  # the adapters' own modules are seen (a check of the finder)


@pytest.mark.parametrize("folder", ["training", "eval", "qrag_integrations"])
def test_every_module_says_in_one_line_what_it_holds(folder: str) -> None:
    import ast

    unsaid = []
    for path in sorted((REPO / folder).rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        lines = (doc or "").splitlines()
        if not lines or not lines[0].strip() or (len(lines) > 1 and lines[1].strip()):
            unsaid.append(str(path.relative_to(REPO)))
    assert not unsaid, (f"{unsaid}: a module's docstring opens with one line that says what it holds (then a blank "
                        "line before any more)")
