"""The package's shape, checked from its source: data flows one way, library internals stay
behind one fence, Streamlit stays in the app, and no module changes process-wide state."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "fusionviz"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _top_level_imports(path: Path, known: set[str], *, everywhere: bool = False) -> set[str]:
    """fusionviz modules imported when ``path`` is imported (module level, not in functions;
    ``if TYPE_CHECKING`` blocks excluded); with ``everywhere``, also every import inside a
    function or class body (what the module needs when it runs)."""
    tree = ast.parse(path.read_text())
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    out: set[str] = set()

    def add(name: str) -> None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            out.add(name)

    def visit(body) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("fusionviz"):
                        add(a.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = package.split(".")
                    base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
                if base.startswith("fusionviz"):
                    for a in node.names:
                        add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
            elif everywhere and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(node.body)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or (
                    everywhere and hasattr(node, "body") and isinstance(node.body, list)):
                visit(getattr(node, "body", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle between distinct modules, or None. A package importing its own
    submodules (``__init__`` re-exports) is not a cycle unless a submodule imports it back."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if d == m:
                continue
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = dfs(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = dfs(m)
            if found:
                return found
    return None


def _graph(*, everywhere: bool = False) -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    graph = {}
    for name, path in mods.items():
        deps = _top_level_imports(path, known, everywhere=everywhere)
        # a submodule importing its parent package is how Python loads it anyway: not an edge
        graph[name] = {d for d in deps if not name.startswith(d + ".")}
    return graph


def test_no_import_cycles_in_the_package():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycles_counting_imports_inside_functions():
    """A function-level import is still a dependency: no cycle among fusionviz modules even
    counting them (a lazy import may hide a load-order failure, never a design cycle)."""
    cycle = _cycle(_graph(everywhere=True))
    assert cycle is None, "import cycle through function-level imports: " + " -> ".join(cycle)


def test_the_import_reader_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "fusionviz"
    pkg.mkdir()
    path = pkg / "a.py"
    path.write_text("import fusionviz.b\n\ndef f():\n    from fusionviz import c\n\n"
                    "class K:\n    def g(self):\n        if True:\n            import fusionviz.d\n")
    known = {"fusionviz", "fusionviz.a", "fusionviz.b", "fusionviz.c", "fusionviz.d"}
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert _top_level_imports(path, known) == {"fusionviz.b"}
        assert _top_level_imports(path, known, everywhere=True) == {"fusionviz.b", "fusionviz.c", "fusionviz.d"}
    finally:
        ROOT = old


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_backend_layers_do_not_import_the_ui():
    graph = _graph(everywhere=True)
    for name, deps in graph.items():
        if not name.startswith("fusionviz.ui"):
            assert not {d for d in deps if d.startswith("fusionviz.ui")}, f"{name} imports the UI"


def test_streamlit_only_in_the_app_and_ui():
    for path in PKG.rglob("*.py"):
        if "ui" in path.relative_to(PKG).parts:
            continue
        text = path.read_text()
        assert "import streamlit" not in text and "from streamlit" not in text, path


def test_no_module_changes_the_working_directory():
    for path in [*PKG.rglob("*.py"), ROOT / "app.py"]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "chdir":
                raise AssertionError(f"{path.relative_to(ROOT)}:{node.lineno} changes the working directory")


def test_passes_declare_what_they_mirror_in_onnxruntime():
    """The Passes page's "What ORT basic does" preset is read from the pass classes, not guessed
    from pass names in the UI."""
    from fusionviz.ortlevels import LEVELS
    from fusionviz.passes import all_passes, registry

    declared = {p.name: p.mirrors_ort for p in all_passes() if p.mirrors_ort is not None}
    assert set(declared.values()) <= set(LEVELS)
    basic = registry.mirroring("basic")
    assert "fold_batchnorm" in basic and "fold_constants" in basic
    assert "fuse_attention" not in basic and "nchwc_layout" not in basic  # extended / layout in onnxruntime
    page = (PKG / "ui" / "passes_page.py").read_text()
    assert "_BASIC_KEYS" not in page and "registry.mirroring(\"basic\")" in page


def test_pages_only_lay_out_and_call():
    """No page starts a thread, builds benchmark variants or classifies passes by name: that is
    fusionviz.experiment's (jobs, plan, build) and the passes' own declarations."""
    for path in (PKG / "ui").glob("*_page.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "Thread":
                raise AssertionError(f"{path.name}:{node.lineno} starts a thread")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Variant", "Builder"):
                raise AssertionError(f"{path.name}:{node.lineno} builds a benchmark variant")
