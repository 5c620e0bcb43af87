"""How the packages depend on each other: no import cycle, `nas` never imports `tagger`, and the
library modules (everything outside the `cli` command packages) never import click.

The import graph is read from the source, every import statement counted, those inside functions
too (a function-local import only postpones a cycle to run time), so no module is run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nas", "tagger")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, name: str) -> set[str]:
    """Every dotted name the module imports, relative imports resolved (`from a import b` gives a.b)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a dotted name counts as its longest module prefix:
    `from a import b` is an import of module a.b if there is one, else of a)."""
    paths = {module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        targets = set()
        for imported in imported_names(path, name):
            parts = imported.split(".")
            for end in range(len(parts), 0, -1):
                if ".".join(parts[:end]) in paths:
                    targets.add(".".join(parts[:end]))
                    break
        graph[name] = targets - {name} if path.name == "__init__.py" else targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a → … → a) through each strongly connected group of modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

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
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph[v]:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_round(group, graph) for group in groups]


def _path_round(group: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first module back to it, inside the group."""
    start = min(group)
    paths = {w: [start, w] for w in graph[start] if w in group}
    for _ in range(len(group)):
        if start in paths:
            break
        paths = {w: path + [w] for path in paths.values() for w in sorted(graph[path[-1]]) if w in group}
    return paths[start]


def test_no_import_cycle_in_the_project():
    found = cycles(import_graph(ROOT, PACKAGES))
    assert not found, "import cycles: " + "; ".join(" → ".join(c) for c in found)


def test_nas_never_imports_tagger():
    graph = import_graph(ROOT, PACKAGES)
    bad = sorted(
        f"{m} → {t}"
        for m, targets in graph.items()
        if m.split(".")[0] == "nas"
        for t in targets
        if t.split(".")[0] == "tagger"
    )
    assert not bad, bad


def test_the_cells_import_nothing_from_the_fast_paths():
    """nas/cells is the definition in plain torch: a fast path reaches it only as the backend a model's builder
    injects (nas.cells.backend, nas.fast.backends), never by an import."""
    graph = import_graph(ROOT, PACKAGES)
    bad = sorted(
        f"{m} → {t}"
        for m, targets in graph.items()
        if m.startswith("nas.cells")
        for t in targets
        if t == "nas.fast" or t.startswith("nas.fast.")
    )
    assert not bad, bad
    assert "nas.cells.cell" in graph and "nas.fast.backends" in graph  # the check reads the modules it names


def test_library_modules_never_import_click():
    bad = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = module_name(path, ROOT)
            if "cli" not in name.split("."):
                if any(n.split(".")[0] == "click" for n in imported_names(path, name)):
                    bad.append(name)
    assert not bad, f"library modules importing click: {bad}"


def test_a_cycle_held_open_by_a_function_local_import_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("import os\n\ndef f():\n    from ..c import g\n")
    (pkg / "c.py").write_text("from pkg import a\n\ng = 1\n")
    (pkg / "d.py").write_text("from . import c\n")  # reaches the cycle, is not part of it
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.d"] == {"pkg.c"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]


def package_of(module: str) -> str:
    """The package a module belongs to: its folder (`nas.cells` for nas.cells.cell, `nas` for nas/__init__)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (ROOT / Path(*parts)).is_dir() else parts[0]


def package_graph(graph: dict[str, set[str]], package=package_of) -> dict[str, set[str]]:
    """Package → the other packages its modules import."""
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        packages.setdefault(package(module), set()).update(package(t) for t in targets)
    return {p: targets - {p} for p, targets in packages.items()}


def test_no_import_cycle_between_packages():
    """No cycle between the wings of `nas`, nor between `tagger` and its commands (`tagger.cli` imports `tagger`,
    never the other way), even where every module-level path is acyclic: a package is a unit a reader takes in,
    or leaves out, whole."""
    found = cycles(package_graph(import_graph(ROOT, PACKAGES)))
    assert not found, "package cycles: " + "; ".join(" → ".join(c) for c in found)


def test_a_cycle_between_packages_is_found_though_the_modules_have_none(tmp_path):
    for name, text in {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "",
        "pkg/a/one.py": "from pkg.b import two\n",
        "pkg/a/three.py": "",
        "pkg/b/__init__.py": "",
        "pkg/b/two.py": "",
        "pkg/b/four.py": "from pkg.a import three\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, ("pkg",))
    assert not cycles(graph)
    packages = package_graph(graph, lambda m: ".".join(m.split(".")[:2]))
    assert cycles(packages) == [["pkg.a", "pkg.b", "pkg.a"]]


def tagger_surface() -> set[str]:
    """The `nas` modules docs/layout.md names as what `tagger` may import (besides all of `nas.common`)."""
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    section = text.split("## What `tagger` takes from `nas`", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`(nas(?:\.[a-z_]+)*)`", section)) - {"nas.common"}


def test_tagger_imports_nas_only_through_the_surface_docs_layout_names():
    graph = import_graph(ROOT, PACKAGES)
    used = {
        t for m, targets in graph.items() if m.split(".")[0] == "tagger" for t in targets if t.split(".")[0] == "nas"
    }
    surface = tagger_surface()
    outside = sorted(t for t in used - surface if not t.startswith("nas.common"))
    assert not outside, f"tagger imports nas modules docs/layout.md does not name: {outside}"
    assert not surface - used, f"docs/layout.md names modules tagger no longer imports: {sorted(surface - used)}"


LAYOUT = ROOT / "docs" / "layout.md"


def _modules(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}


def test_docs_layout_names_every_module_and_nothing_that_is_gone():
    """docs/layout.md's tree of `nas` lists each wing's modules, its `nas/common` paragraph each of
    those, its `tagger/` table each of tagger's; every path it writes out exists."""
    text = LAYOUT.read_text(encoding="utf-8")
    listed: dict[str, set[str]] = {}
    folder = None
    for line in text.split("```\nnas/\n", 1)[1].split("```", 1)[0].splitlines():
        if match := re.match(r"  ([a-z]+)/\s", line):
            folder = match.group(1)
        listed.setdefault(folder, set()).update(re.findall(r"[a-z_]+\.py", line))
    wings = [p.name for p in sorted((ROOT / "nas").iterdir()) if (p / "__init__.py").is_file()]
    problems = [
        f"nas/{wing}: {sorted(_modules(ROOT / 'nas' / wing) ^ listed.get(wing, set()))}"
        for wing in wings
        if wing not in ("common", "cli") and _modules(ROOT / "nas" / wing) != listed.get(wing, set())
    ]
    for folder, start, end in (("nas/common", "**`nas/common/`**", "\n\n"), ("tagger", "**`tagger/`**", "**`nas/")):
        named = set(re.findall(r"`([a-z_]+\.py)`", text.split(start, 1)[1].split(end, 1)[0]))
        if not _modules(ROOT / folder) <= named:
            problems.append(f"{folder}: not named {sorted(_modules(ROOT / folder) - named)}")
    paths = set(re.findall(r"((?:nas|tagger|tests|bench|reference)/[\w/.-]+\.(?:py|cpp))", text))
    problems += [f"named but absent: {path}" for path in sorted(paths) if not (ROOT / path).exists()]
    assert not problems, problems


# docs/layout.md, "Reading the DARTS core": the five files a DARTS reader opens, and what their cells are made of
READING = ("nas.cells.ops", "nas.cells.cell", "nas.cells.search_cell", "nas.cells.mixing", "nas.methods.architect")
CORE = READING + (
    "nas.cells.masks",
    "nas.cells.waves",
    "nas.cells.recurrence",
    "nas.cells.backend",
    "nas.cells.gates",
    "nas.cells.attention",
)


def test_the_core_imports_only_torch():
    """The op table and the genotype, the cell and the search cell, the mixing rules, the α step (first and
    second order) and the bilevel step read in plain torch: they import torch, the standard library and one
    another, nothing of the project's plumbing or speed layer."""
    project = import_graph(ROOT, PACKAGES)
    bad = sorted(f"{m} → {t}" for m in CORE for t in project[m] if t not in CORE)
    assert not bad, bad
    import sys

    foreign = {
        name.split(".")[0]
        for m in CORE
        for name in imported_names(ROOT / Path(*m.split(".")).with_suffix(".py"), m)
        if name.split(".")[0] not in ("nas", "torch", "__future__")
    }
    assert foreign <= set(sys.stdlib_module_names), sorted(foreign - set(sys.stdlib_module_names))


def test_docs_layout_lists_the_five_files_of_the_darts_core():
    """The reading list names the files in `READING`, in that order, and they hold what it says."""
    section = LAYOUT.read_text(encoding="utf-8").split("## Reading the DARTS core", 1)[1].split("\n## ", 1)[0]
    listed = [path[:-3].replace("/", ".") for path in re.findall(r"^\d\. `(nas/[\w/]+\.py)`", section, re.M)]
    assert listed == list(READING)
    source = {m: (ROOT / Path(*m.split("."))).with_suffix(".py").read_text(encoding="utf-8") for m in READING}
    for module, name in (
        ("nas.cells.ops", "class Genotype"),
        ("nas.cells.cell", "def cell_step"),
        ("nas.cells.search_cell", "def search_step"),
        ("nas.cells.mixing", "class SoftmaxPerEdge"),
        ("nas.methods.architect", "def bilevel_step"),
    ):
        assert name in source[module], (module, name)
