"""The layering rules of issue #20, checked over the source's ASTs (no servers, nothing imported).

The core (qim/) offers hooks that the apps register; it never imports an app, so an app can be
removed or replaced without editing the core. Import cycles hide the order modules must load
in (and get "fixed" with function-level imports), so there are none: the graph counts
function-level imports too.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("qim", "rooms", "reactions", "registry", "rtc", "push_providers", "qimclient")
APPS = ("rooms", "reactions", "registry", "rtc", "push_providers")
# Wiring: the places that name every app on purpose.
CORE_WIRING = {"qim.settings", "qim.urls", "qim.asgi"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Every .py module of the project's packages, by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "migrations" not in path.parts:
                found[_module_name(path)] = path
    return found


def _imported_names(module: str, path: Path) -> list[tuple[str, int]]:
    """(dotted name, line) for every import in the file, at any depth, relative ones resolved."""
    is_package = path.name == "__init__.py"
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.append((base, node.lineno))
            # `from pkg import mod` imports pkg.mod when that is a module.
            names.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)
    return names


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module an import name loads: itself, or the nearest enclosing package."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, path in modules.items():
        for name, _line in _imported_names(module, path):
            target = _resolve(name, modules)
            if target and target != module:
                graph[module].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; each component as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle through the component's first module, for a readable failure."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(graph[path[-1]] & members)
        if start in nxt and len(path) > 1:
            return path + [start]
        fresh = [n for n in nxt if n not in seen]
        if not fresh:
            return path + [nxt[0]]
        path.append(fresh[0])
        seen.add(fresh[0])


def _app_module_strings(path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """Dotted string constants naming an app's module: imports by name (importlib) count too
    (a bare "reactions" is a frame field more often than a package)."""
    return [
        (node.value, node.lineno)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and "." in node.value and node.value in modules and node.value.split(".")[0] in APPS
    ]


def test_core_imports_no_app():
    modules = project_modules()
    offences = set()
    for module, path in modules.items():
        if module.split(".")[0] != "qim" or module in CORE_WIRING:
            continue
        for name, line in _imported_names(module, path) + _app_module_strings(path, modules):
            if name.split(".")[0] in APPS:
                # One line per import statement: the module it names, not each imported name.
                offences.add(f"{path.relative_to(REPO)}:{line} imports {_resolve(name, modules) or name}")
    assert not offences, "the core must not import an app (offer a hook):\n" + "\n".join(sorted(offences))


def test_no_import_cycles():
    graph = import_graph()
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    message = "\n".join(
        f"{len(c)} modules: {' -> '.join(_cycle_in(c, graph))}  (all: {', '.join(c)})"
        for c in cycles
    )
    assert not cycles, "import cycles among the project's modules:\n" + message


def test_the_checks_see_what_they_check():
    """Guards the two tests above against passing vacuously (a wrong root, a broken resolver)."""
    graph = import_graph()
    assert {"qim.gateway.consumer", "rooms.frames", "registry.cache"} <= set(graph)
    assert {"qim.models", "qim.notify"} <= graph["qim.actions.log"]
    toy = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [c for c in strongly_connected(toy) if len(c) > 1] == [["a", "b", "c"]]
    assert _cycle_in(["a", "b", "c"], toy) == ["a", "b", "c", "a"]


# The core's layers, lowest first (issue #33; docs/architecture.md draws them): a module imports
# its own layer and those below, never one above. An app (rooms, reactions, ...) stands above
# them all and is named by no core module (test_core_imports_no_app). The longest prefix wins.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("qim.clock", "qim.conf", "qim.errors", "qim.settings", "qim.infra")),
    ("models", ("qim.models", "qim.windows")),
    ("node", ("qim.node", "qim.server")),
    ("queries", ("qim.content_types", "qim.render", "qim.hooks", "qim.notify", "qim.queries")),
    ("actions", ("qim.actions", "qim.moderation", "qim.revocation")),
    ("protocol", ("qim.gateway", "qim.frames")),
    ("edges", ("qim.api", "qim.admin", "qim.ops", "qim.push", "qim.management", "qim.urls", "qim.asgi",
               "qim.apps")),
]


def layer_of(module: str) -> int | None:
    """The index in LAYERS of the layer `module` belongs to (None: the bare `qim` package)."""
    best: tuple[int, int] | None = None
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return best[0] if best else None


def test_every_core_module_has_a_layer():
    unplaced = [m for m in project_modules() if m.split(".")[0] == "qim" and m != "qim" and layer_of(m) is None]
    assert not unplaced, "core modules in no layer (add them to LAYERS):\n" + "\n".join(sorted(unplaced))


def test_no_core_module_imports_a_layer_above_its_own():
    upward = []
    for module, targets in import_graph().items():
        own = layer_of(module)
        if module.split(".")[0] != "qim" or own is None:
            continue
        for target in sorted(targets):
            theirs = layer_of(target)
            if target.split(".")[0] == "qim" and theirs is not None and theirs > own:
                upward.append(f"{module} ({LAYERS[own][0]}) imports {target} ({LAYERS[theirs][0]})")
    assert not upward, "imports that go up a layer (move the module, or offer a hook):\n" + "\n".join(upward)


def test_the_layer_check_sees_what_it_checks():
    assert layer_of("qim.gateway.consumer") == 5 and layer_of("qim.actions.log") == 4
    assert layer_of("qim.infra.db_outage") == 0 and layer_of("qim.api.views") == 6 and layer_of("qim") is None
    graph = import_graph()
    assert layer_of(next(iter(graph["qim.frames.messaging"] & {"qim.actions.messages"}))) == 4


def test_the_core_top_level_stays_small():
    """A newcomer maps qim/ from its packages: at most 20 modules beside them."""
    top = sorted(path.name for path in (REPO / "qim").glob("*.py"))
    assert len(top) <= 20, top


# Issue #20's size bar: a module a newcomer can hold in mind, a function that fits a screen.
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def test_no_module_over_400_lines():
    long = [
        f"{path.relative_to(REPO)}: {count} lines"
        for path in project_modules().values()
        if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job):\n" + "\n".join(sorted(long))


def test_no_function_over_60_lines():
    long = []
    for path in project_modules().values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {length} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(sorted(long))
