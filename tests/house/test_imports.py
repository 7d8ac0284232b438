"""The package's seams, read from the source (function-level imports included): no import circles;
every module imports only its own layer and the layers below it; no module imports a face (what
people and agents use) but the face itself and the command line that starts them all.

The layers, bottom up (docs/contributing.md has the map): base (errors, logs, text, files),
postgres (connections, the local server, the pool, deploy, logins) and embedders beside it,
settings (which wires them), registry (the domain: records, the write path, search, golden queries),
quality (evaluation, rankings, tuning) and model (the model's lifecycle: switch) beside it, then the faces."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import payrail_embedder

PACKAGE = Path(payrail_embedder.__file__).parent
# The faces people and agents use; the modules below them serve every face alike.
FACES = (
    "payrail_embedder.cli",
    "payrail_embedder.faces.api",
    "payrail_embedder.faces.mcp_server",
    "payrail_embedder.faces.edit",
    "payrail_embedder.faces.status",
    "payrail_embedder.backoffice",
    # The faces' folder itself (its __init__ imports nothing): after its modules, each a face of its own.
    "payrail_embedder.faces",
)
# The command line (a package of modules) starts every other face; the package's own __init__ is
# the Python API's door.
COMMAND_LINE = "payrail_embedder.cli"
STARTERS = {"payrail_embedder.__main__", "payrail_embedder"}
# Each layer below the faces, bottom up, by the folder (or module) that holds it; postgres and the
# embedders know nothing of each other.
LAYERS = {
    "payrail_embedder.base": 0,
    "payrail_embedder.postgres": 1,
    "payrail_embedder.embedders": 1,
    "payrail_embedder.settings": 2,
    "payrail_embedder.registry": 3,
    "payrail_embedder.quality": 4,
    "payrail_embedder.model": 4,
}
FACE_LAYER = 5


def module_name(path: Path) -> str:
    parts = ("payrail_embedder", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that path imports, anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            found |= {f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    # A name taken from a package (its __init__) depends on the whole __init__, even the module's own
    # package: an __init__ imports its modules, so that is a circle.
    return found & modules


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    return {module_name(path): imported_modules(path, modules) for path in paths}


def within(module: str, parent: str) -> bool:
    return module == parent or module.startswith(parent + ".")


def face_of(module: str) -> str | None:
    return next((face for face in FACES if within(module, face)), None)


def layer_of(module: str) -> tuple[str, int] | None:
    """The layer a module belongs to and its height, or None for the package's door and __main__."""
    if face_of(module):
        return face_of(module), FACE_LAYER
    return next(((layer, height) for layer, height in LAYERS.items() if within(module, layer)), None)


def test_the_graph_reads_the_imports():
    graph = import_graph()
    assert "payrail_embedder.registry.agent_path" in graph["payrail_embedder.faces.api"]
    assert "payrail_embedder.embedders" in graph["payrail_embedder.registry.search"]  # names from a package's __init__
    assert "payrail_embedder.backoffice.server" in graph["payrail_embedder.cli.serve"]  # a function-level import
    assert "payrail_embedder.embedders.tuned_models" in graph["payrail_embedder.embedders.local"]  # from . import
    assert "payrail_embedder.embedders.local" in graph["payrail_embedder.embedders"]  # an __init__'s own module


def test_every_module_belongs_to_a_layer():
    assert {module for module in import_graph() if layer_of(module) is None} == {"payrail_embedder", "payrail_embedder.__main__"}


def test_no_import_circles():
    """Every module's imports lead down, never back to it: an order of the modules exists in which
    each imports only modules before it."""
    try:
        TopologicalSorter(import_graph()).prepare()
    except CycleError as error:
        # graphlib lists each module before the one that imports it.
        circle = reversed(error.args[1])
        raise AssertionError(f"an import circle: {' imports '.join(circle)}") from None


def test_every_module_imports_its_own_layer_and_those_below_only():
    wrong = set()
    for module, targets in import_graph().items():
        home = layer_of(module)
        for target in targets:
            there = layer_of(target)
            if home is None or there is None or home[1] == FACE_LAYER:
                continue
            # Above, or beside it on the same height (postgres and the embedders).
            if there[1] > home[1] or (there[1] == home[1] and there[0] != home[0]):
                wrong.add((module, target))
    assert wrong == set()


def test_only_a_face_itself_and_the_command_line_import_a_face():
    wrong = {
        (module, target)
        for module, targets in import_graph().items()
        for target in targets
        if face_of(target) and face_of(target) != face_of(module) and module not in STARTERS and not within(module, COMMAND_LINE)
    }
    assert wrong == set()
