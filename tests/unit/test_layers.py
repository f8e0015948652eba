"""Imports run one way, and never in a loop (docs/architecture.md, "Layers").

Every module under raylog/ and actors/ is read with ``ast``: every import counts, also one
inside a function (a lazy import is still an arrow), under ``TYPE_CHECKING``, or through
``importlib.import_module("...")`` with a written name. Each module belongs to the layer of
the longest prefix in ``LAYERS``; an arrow to a layer its own layer may not import fails, as
does any loop of modules, and any loop of the feature folders of raylog/.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The layers, top first: the prefixes of the modules in each, and the layers it may import
# besides its own. Written once; docs/architecture.md draws it.
LAYERS: dict[str, tuple[list[str], set[str]]] = {
    "command line": (["raylog.cli"], {"integrations", "entry point", "clients", "core"}),
    "integrations": (["raylog.integrations", "raylog.mirror"],
                     {"entry point", "clients", "core"}),
    # the raylog package's names and raylog.init, which may start the controller
    "entry point": (["raylog", "raylog.session"], {"actors", "clients", "core"}),
    "actors": (["actors"], {"clients", "core"}),
    "clients": (["raylog.client", "raylog.schemas.client", "raylog.kafka.gateway"], {"core"}),
    "core": (["raylog.errors", "raylog.types", "raylog.util", "raylog.records",
              "raylog.storage", "raylog.replica", "raylog.metadata", "raylog.groups",
              "raylog.schemas", "raylog.kafka", "raylog.transactions", "raylog.tiered",
              "raylog.quotas"], set()),
}

def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(root, p): p for top in ("raylog", "actors")
            for p in sorted((root / top).rglob("*.py"))}


def _imported(node: ast.AST, package: str) -> list[str]:
    """The dotted names one node imports (a ``from X import a`` gives X.a and X: which of
    them is a module is decided by the caller)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        return [f"{base}.{alias.name}" for alias in node.names] + [base]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module" and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return [node.args[0].value]
    return []


def arrows(root: Path) -> dict[str, set[str]]:
    """Each module of raylog/ and actors/ and the modules of raylog/ and actors/ it imports.
    ``from X import a`` is an arrow to X.a when that is a module, else to X."""
    found = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = _imported(node, package)
            if isinstance(node, ast.ImportFrom):
                submodules = [n for n in names[:-1] if n in found]
                names = submodules if len(submodules) == len(names) - 1 else names
            for target in names:
                while target and target not in found:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def layer_of(module: str) -> str:
    best, length = "", -1
    for layer, (prefixes, _) in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = layer, len(prefix)
    return best


def upward(graph: dict[str, set[str]]) -> list[str]:
    """The arrows that leave a layer for one it may not import."""
    bad = []
    for source in sorted(graph):
        here = layer_of(source)
        for target in sorted(graph[source]):
            there = layer_of(target)
            if there != here and there not in LAYERS[here][1]:
                bad.append(f"{source} ({here}) -> {target} ({there})")
    return bad


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def folder_of(module: str) -> str:
    """The feature folder of a module of raylog/ (``raylog.replica``,
    ``raylog.integrations.spark``), or the module itself when it is loose."""
    parts = module.split(".")
    depth = 3 if parts[:2] == ["raylog", "integrations"] else 2
    return ".".join(parts[:depth])


def folders(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for source, targets in graph.items():
        if source.startswith("raylog."):
            out.setdefault(folder_of(source), set()).update(
                folder_of(t) for t in targets
                if t.startswith("raylog.") and folder_of(t) != folder_of(source))
    return out


def _describe(components: Iterable[list[str]], graph: dict[str, set[str]]) -> str:
    lines = []
    for component in components:
        members = set(component)
        lines.append(f"loop of {len(component)}: " + ", ".join(component))
        lines += [f"    {a} -> {b}" for a in component for b in sorted(graph[a]) if b in members]
    return "\n".join(lines)


def for_loops(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The arrows that can make a loop: not a package's to its own modules (how packages
    work: ``raylog/__init__.py`` hands out names of its clients)."""
    return {a: {b for b in targets if not b.startswith(a + ".")}
            for a, targets in graph.items()}


# -- the repository -------------------------------------------------------------------------


def test_every_module_is_in_a_layer():
    unplaced = [m for m in modules(ROOT) if not layer_of(m)]
    assert unplaced == [], (f"modules in no layer of LAYERS (tests/unit/test_layers.py): "
                            f"{unplaced}; add their folder to the layer they belong to")


def test_imports_run_one_way():
    bad = upward(arrows(ROOT))
    assert bad == [], ("imports against the layers (command line and integrations -> "
                       "raylog.init -> actors -> clients -> plain core; clients find actors "
                       "by name):\n" + "\n".join(bad))


def test_no_import_loop():
    graph = for_loops(arrows(ROOT))
    found = loops(graph)
    assert found == [], "import loops:\n" + _describe(found, graph)


def test_the_feature_folders_import_each_other_without_a_loop():
    graph = folders(for_loops(arrows(ROOT)))
    found = loops(graph)
    assert found == [], "feature folders of raylog/ in a loop:\n" + _describe(found, graph)


# -- the checks themselves, on a made-up tree ---------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_lazy_import_of_an_actor_by_a_client_is_an_upward_arrow(tmp_path):
    root = _tree(tmp_path, {
        "raylog/__init__.py": "",
        "raylog/errors.py": "",
        "raylog/client/__init__.py": "",
        "raylog/client/connection.py": ("from raylog import errors\n"
                                        "def start():\n"
                                        "    from actors.controller import ControllerActor\n"),
        "actors/__init__.py": "",
        "actors/controller.py": "from raylog.client import connection\n",
    })
    graph = arrows(root)
    assert graph["raylog.client.connection"] == {"raylog.errors", "actors.controller"}
    assert upward(graph) == ["raylog.client.connection (clients) -> actors.controller (actors)"]
    assert loops(for_loops(graph)) == [["actors.controller", "raylog.client.connection"]]


def test_relative_imports_and_import_module_count(tmp_path):
    root = _tree(tmp_path, {
        "raylog/__init__.py": "import importlib\nimportlib.import_module('raylog.cli.main')\n",
        "raylog/cli/__init__.py": "",
        "raylog/cli/main.py": "",
        "raylog/storage/__init__.py": "",
        "raylog/storage/log.py": "from ..cli import main\n",
    })
    graph = arrows(root)
    assert graph["raylog"] == {"raylog.cli.main"}
    assert upward(graph) == [
        "raylog (entry point) -> raylog.cli.main (command line)",
        "raylog.storage.log (core) -> raylog.cli.main (command line)",
    ]


def test_folders_in_a_loop_are_found(tmp_path):
    root = _tree(tmp_path, {
        "raylog/metadata/topics.py": "from raylog.replica.isr import LAG\n",
        "raylog/replica/isr.py": "LAG = 1\n",
        "raylog/replica/partition.py": "from raylog.metadata import topics\n",
    })
    graph = arrows(root)
    assert loops(for_loops(graph)) == []  # no loop of modules...
    assert loops(folders(for_loops(graph))) == [["raylog.metadata", "raylog.replica"]]  # folders
