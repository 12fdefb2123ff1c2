"""The shape of the ``inferd`` package: no import cycles, the seams' import rules, small modules.

The import graph is read from the source with ``ast`` (nothing is imported). Every import
statement counts, wherever it is: module level, inside functions, under ``if TYPE_CHECKING:``.

How imports become edges:

- A module is a node; a package is the node of its ``__init__.py`` (``inferd.config``).
- ``import a.b.c`` and ``from a.b import c`` give an edge to the most specific module they name:
  ``a.b.c`` when it is a submodule, else ``a.b`` (then ``c`` is a name re-exported by, or defined
  in, ``a/b/__init__.py`` and the edge goes to that ``__init__``). Relative imports are resolved.
- Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``, so the edge also goes to
  those packages, except to the importer's own enclosing packages: Python has started them
  before the importer runs, so re-exports a package makes of its own children (``config/__init__``
  importing ``config.parse``, which imports ``config.normalize``) are not cycles. An explicit
  import of one's own package (``from inferd.config import X`` inside ``inferd.config.parse``) is
  an edge, and a cycle when that ``__init__`` imports the module back.
- A module importing itself is not an edge.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import inferd
from tests.package_layers import LAYERS

PACKAGE = Path(inferd.__file__).resolve().parent
#: Every plugin's packages (``plugins/<plugin>/src/<package>``), from this checkout.
PLUGIN_PACKAGES = sorted(p.parent for p in (PACKAGE.parents[2] / "plugins").glob("*/src/*/__init__.py"))
MAX_MODULE_P90 = 350
MAX_FUNCTION_P90 = 25
#: The most lines a module of a plugin may have: past it, a module has more than one job.
MAX_PLUGIN_MODULE = 500
#: Every plugin (the directories under ``plugins/``), each held to :data:`MAX_PLUGIN_MODULE`.
PLUGINS = sorted({p.parents[1].name for p in PLUGIN_PACKAGES})

#: What the built-in plugins may import besides their own package: the API, the contracts and the
#: datatypes, the services underneath it, and the data plane they receive.
BUILT_IN_PLUGINS = ("inferd.frontends", "inferd.schedulers", "inferd.caches")
BUILT_IN_MAY_IMPORT = (
    *("inferd.api", "inferd.contracts", "inferd.datatypes", "inferd.config", "inferd.auth", "inferd.serving"),
    *("inferd.shared_memory", "inferd.dataplane", "inferd.views"),
)
#: The one host module a plugin's source under ``plugins/``, the cookiecutter template and
#: ``docs/examples/`` may import.
PUBLIC = ("inferd.api",)
#: What a plugin's tests may import besides: the test kit (servers, clients, the backend contract),
#: as a pytest plugin's tests use pytest's own.
TEST_KIT = ("inferd.testing",)

#: The only modules that may import grpc (``grpc``, ``grpc_*``, ``tritonclient.grpc``), each with
#: the modules under it: the gRPC frontend, the serving layer's transports, and the gRPC clients of
#: ``inferd perf`` and of the contract tests. Everything else (errors, access rules, the request
#: engine) names what happened with an ``inferd.contracts.errors.ErrorKind``; the gRPC frontend's table
#: turns a kind into a status.
#: The command line: the only modules that end the process (``raise SystemExit``, ``sys.exit``,
#: ``os._exit``); library code raises ``StartupError`` and the command line turns it into a status.
COMMAND_LINE = ("inferd.host.cli", "inferd.host.serve_command")

#: ``inferd.contracts`` only declares: its classes are ABCs, Protocols, dataclasses, errors or enums
#: (or subclasses of its own), and its only functions are hook specifications and these helpers,
#: which still wait for a home outside it (the list only shrinks).
CONTRACT_BASES = frozenset({"abc.ABC", "Protocol", "Exception", "enum.Enum"})
CONTRACT_HELPERS = frozenset(
    {
        "backend.process_cores",
        "errors.error_response",
        "errors.poll_failure",
        "flags._bad_setting",
        "flags.parse_bool",
        "flags.setting_flag",
        "flags.setting_integer",
        "hints.closest",
        "hints.did_you_mean",
    }
)

GRPC_IMPORTERS = (
    "inferd.frontends.grpc",
    "inferd.serving",
    "inferd.tools.perf.transport_grpc",
    "inferd.tools.health_grpc",
    "inferd.testing.clients",
)


@dataclass(frozen=True)
class Import:
    """One imported module: where the statement is and what it resolves to."""

    importer: str
    target: str
    line: int
    typing_only: bool = False


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    """``{dotted module name: source file}`` for every module of the package."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(module: str, modules: dict[str, Path]) -> bool:
    return modules[module].name == "__init__.py"


def _resolve_from(node: ast.ImportFrom, importer: str, modules: dict[str, Path]) -> str:
    """The module a ``from X import ...`` names, relative imports resolved."""
    if node.level == 0:
        return node.module or ""
    package = importer.split(".") if _is_package(importer, modules) else importer.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _named(node: ast.Import | ast.ImportFrom, importer: str, modules: dict[str, Path]) -> Iterator[str]:
    """The most specific module each alias of an import statement names."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = _resolve_from(node, importer, modules)
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        yield sub if sub in modules else base


def _with_packages(target: str, importer: str, modules: dict[str, Path]) -> Iterator[str]:
    """``target`` and the enclosing packages its import runs (not the importer's own ones)."""
    yield target
    own = {".".join(importer.split(".")[:i]) for i in range(1, importer.count(".") + 2)}
    parts = target.split(".")
    for i in range(1, len(parts)):
        package = ".".join(parts[:i])
        if package in modules and package not in own:
            yield package


def imports_of(importer: str, modules: dict[str, Path]) -> list[Import]:
    """Every import of ``importer`` that lands in the package, TYPE_CHECKING and function-level included."""
    tree = ast.parse(modules[importer].read_text(), str(modules[importer]))
    typing_only = _under_type_checking(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for named in _named(node, importer, modules):
            found.extend(
                Import(importer, target, node.lineno, id(node) in typing_only)
                for target in _with_packages(named, importer, modules)
                if target in modules and target != importer
            )
    return found


def _under_type_checking(tree: ast.Module) -> set[int]:
    """The ids of the import statements inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            inside.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return inside


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """``{importer: {imported module: first line importing it}}``."""
    graph: dict[str, dict[str, int]] = {m: {} for m in modules}
    for module in modules:
        for imp in imports_of(module, modules):
            graph[module].setdefault(imp.target, imp.line)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def shortest_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A shortest cycle through the first module of a component, as a path ending where it starts."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for succ in sorted(graph[node]):
                if succ == start:
                    return paths[node] + [start]
                if succ in members and succ not in paths:
                    paths[succ] = paths[node] + [succ]
                    nxt.append(succ)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {component}")


def describe_cycles(graph: dict[str, dict[str, int]]) -> list[str]:
    """One line per cycle group: a shortest cycle (with the importing lines) and the group's size."""
    lines = []
    for component in strongly_connected(graph):
        cycle = shortest_cycle(graph, component)
        hops = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False))
        lines.append(f"{' -> '.join(cycle)}   [{hops} -> {cycle[0]}; {len(component)} modules in this group: "
                     f"{', '.join(component)}]")  # fmt: skip
    return lines


def _forbidden(importers: Iterable[str], banned: str, modules: dict[str, Path]) -> list[str]:
    """``importer:line imports target`` for each direct import of ``banned`` or a module under it."""
    bad = {
        f"{importer}:{imp.line} imports {imp.target}"
        for importer in importers
        for imp in imports_of(importer, modules)
        if imp.target == banned or imp.target.startswith(banned + ".")
    }
    return sorted(bad)


def _is_grpc(name: str) -> bool:
    top = name.split(".")[0]
    return top == "grpc" or top.startswith("grpc_") or (name + ".").startswith("tritonclient.grpc.")


def grpc_imports(modules: dict[str, Path]) -> list[str]:
    """``module:line imports name`` for each import of grpc (or a gRPC client) anywhere in a module."""
    found = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            found += [f"{module}:{node.lineno} imports {name}" for name in names if _is_grpc(name)]
    return sorted(set(found))


def process_exits(modules: dict[str, Path]) -> list[str]:
    """``module:line what`` for each ``raise SystemExit`` and each ``sys.exit()``/``os._exit()``/``exit()`` call."""
    found = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(raised, ast.Name) and raised.id == "SystemExit":
                    found.append(f"{module}:{node.lineno} raises SystemExit")
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "os._exit", "exit", "quit"):
                found.append(f"{module}:{node.lineno} calls {ast.unparse(node.func)}()")
    return sorted(found)


def implementation_in(modules: dict[str, Path], package: str) -> tuple[list[str], set[str]]:
    """In ``package``'s modules: ``module:line class`` for each class that is no contract (none of
    :data:`CONTRACT_BASES`, no dataclass, no subclass of one of the package's classes), and
    ``module.function`` (the module's last name) for each module-level function but hook specifications."""
    classes, functions = [], set()
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in modules.items() if _under(m, [package])}
    own = {n.name for tree in trees.values() for n in tree.body if isinstance(n, ast.ClassDef)}
    for module, tree in trees.items():
        for node in tree.body:
            decorators = [ast.unparse(d).split("(")[0] for d in getattr(node, "decorator_list", [])]
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b) for b in node.bases}
                if not (bases & (CONTRACT_BASES | own) or "dataclass" in decorators):
                    classes.append(f"{module}:{node.lineno} {node.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "hookspec" not in decorators:
                functions.add(f"{module.rsplit('.', 1)[-1]}.{node.name}")
    return sorted(classes), functions


def _under(module: str, roots: Iterable[str]) -> bool:
    return any(module == root or module.startswith(root + ".") for root in roots)


def p90(values: list[int]) -> int:
    """The nearest-rank 90th percentile."""
    ordered = sorted(values)
    return ordered[math.ceil(0.9 * len(ordered)) - 1]


def shaped_files(modules: dict[str, Path]) -> dict[str, Path]:
    """The modules the size rules apply to: all but the generated ``*_pb2*.py``."""
    return {m: p for m, p in modules.items() if "_pb2" not in p.name}


def function_lengths(modules: dict[str, Path]) -> dict[str, int]:
    """``{module:line qualified name: lines from def to last line}`` for every function and method."""
    lengths = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                lengths[f"{module}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    return lengths


def _longest(sizes: dict[str, int], n: int = 10) -> str:
    return "\n".join(f"  {size:5d}  {name}" for name, size in sorted(sizes.items(), key=lambda kv: -kv[1])[:n])


# -- the rules ------------------------------------------------------------------------------------


def test_no_import_cycles_among_inferd_modules() -> None:
    cycles = describe_cycles(import_graph(module_files()))
    assert not cycles, "import cycles (TYPE_CHECKING and function-level imports count):\n" + "\n".join(cycles)


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_no_import_cycles_within_a_plugin(package: Path) -> None:
    cycles = describe_cycles(import_graph(module_files(package)))
    assert not cycles, f"import cycles in {package.name}:\n" + "\n".join(cycles)


def test_every_plugin_is_checked() -> None:
    assert {p.parents[1].name for p in PLUGIN_PACKAGES} >= {"backend_python", "backend_pytorch", "backend_tensorrt"}


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the layer holding ``module`` (the most specific prefix wins)."""
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _under(module, [prefix]) and prefix.count(".") > best and (prefix != "inferd" or module == "inferd"):
                best, rank = prefix.count("."), index
    return rank


def test_every_module_has_a_layer() -> None:
    missing = [m for m in module_files() if layer_of(m) < 0]
    assert not missing, "modules in no layer of LAYERS (add their package there and to docs/architecture.md):\n" + (
        "\n".join(missing)
    )


def layer_violations(modules: dict[str, Path]) -> list[str]:
    """``importer:line imports target (layer -> higher layer)`` for every run-time import that points up."""
    bad = []
    for importer in modules:
        for imp in imports_of(importer, modules):
            low, high = layer_of(importer), layer_of(imp.target)
            if not imp.typing_only and high > low:
                bad.append(f"{importer}:{imp.line} imports {imp.target} ({LAYERS[low][0]} -> {LAYERS[high][0]})")
    return sorted(set(bad))


def test_layers_import_only_downwards() -> None:
    bad = layer_violations(module_files())
    assert not bad, "imports that point up the layers (docs/architecture.md):\n" + "\n".join(bad)


def test_built_in_plugins_import_only_what_a_plugin_may() -> None:
    modules = module_files()
    bad = []
    for importer in (m for m in modules if _under(m, BUILT_IN_PLUGINS)):
        own = importer.split(".")[:2]
        for imp in imports_of(importer, modules):
            if imp.target == "inferd" or _under(imp.target, BUILT_IN_MAY_IMPORT) or imp.target.split(".")[:2] == own:
                continue
            bad.append(f"{importer}:{imp.line} imports {imp.target}")
    assert not bad, "built-in plugins reach past the public API and the contracts:\n" + "\n".join(sorted(set(bad)))


def plugin_imports(root: Path) -> list[tuple[Path, int, str]]:
    """``(file, line, module)`` for every ``inferd`` module a plugin's or template's source names."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "build" in path.parts or ".venv" in path.parts:
            continue
        text = path.read_text()
        try:
            tree = ast.parse(re.sub(r"{{.*?}}|{%.*?%}", "X", text), str(path))  # the template's placeholders
        except SyntaxError as exc:
            raise AssertionError(f"{path} does not parse: {exc}") from None
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names if node.module == "inferd"]
            found.extend((path, node.lineno, name) for name in names if name == "inferd" or name.startswith("inferd."))
    return found


REPO = PACKAGE.parents[2]


def past_the_api(root: Path, found: list[tuple[Path, int, str]]) -> list[str]:
    """``file:line imports module`` for each import of ``found`` (under ``root``) of another host
    module than :data:`PUBLIC`, or for a file under a ``tests`` folder, :data:`TEST_KIT`."""
    bad = []
    for path, line, name in found:
        in_tests = "tests" in path.relative_to(root).parts
        if name not in PUBLIC and not (in_tests and name in TEST_KIT):
            bad.append(f"{path.relative_to(root)}:{line} imports {name}")
    return bad


@pytest.mark.parametrize("root", [*sorted((REPO / "plugins").glob("*/src")), REPO / "cookiecutter", REPO / "docs" / "examples"],
                         ids=lambda p: p.parent.name if p.name == "src" else p.name)  # fmt: skip
def test_plugins_import_only_the_public_api(root: Path) -> None:
    found = plugin_imports(root)
    bad = past_the_api(root, found)
    assert not bad, "plugins import inferd only through inferd.api (tests: also inferd.testing):\n" + "\n".join(bad)
    if root.name in ("cookiecutter", "examples"):
        assert found, "the template imports nothing from inferd: the check would pass on anything"


def test_built_in_schedulers_import_nothing_from_the_engine() -> None:
    modules = module_files()
    schedulers = [m for m in modules if _under(m, ["inferd.schedulers"])]
    assert "inferd.schedulers.ensemble.scheduler" in schedulers
    bad = _forbidden(schedulers, "inferd.engine", modules)
    assert not bad, "scheduler modules import the engine:\n" + "\n".join(bad)


def test_hookspecs_import_nothing_from_inferd_server() -> None:
    bad = _forbidden(["inferd.contracts.hookspecs"], "inferd.host.server", module_files())
    assert not bad, "inferd.contracts.hookspecs imports inferd.host.server:\n" + "\n".join(bad)


def test_contracts_only_declare() -> None:
    classes, functions = implementation_in(module_files(), "inferd.contracts")
    assert not classes, "classes in inferd.contracts that are no contract (move them where they are used):\n" + (
        "\n".join(classes)
    )
    assert not functions - CONTRACT_HELPERS, f"functions in inferd.contracts: {sorted(functions - CONTRACT_HELPERS)}"
    assert not CONTRACT_HELPERS - functions, f"gone from inferd.contracts: {sorted(CONTRACT_HELPERS - functions)}"


def test_only_the_grpc_transports_and_clients_import_grpc() -> None:
    modules = module_files()
    assert all(any(_under(m, [root]) for m in modules) for root in GRPC_IMPORTERS), "a GRPC_IMPORTERS entry is gone"
    bad = [line for line in grpc_imports(modules) if not _under(line.split(":")[0], GRPC_IMPORTERS)]
    assert not bad, "modules outside GRPC_IMPORTERS import grpc:\n" + "\n".join(bad)


def test_only_the_command_line_ends_the_process() -> None:
    modules = module_files()
    assert all(m in modules for m in COMMAND_LINE)
    bad = [line for line in process_exits(modules) if line.split(":")[0] not in COMMAND_LINE]
    assert not bad, "library code ends the process (raise inferd.api.StartupError instead):\n" + "\n".join(bad)


def test_module_length_p90() -> None:
    sizes = {m: len(p.read_text().splitlines()) for m, p in shaped_files(module_files()).items()}
    value = p90(list(sizes.values()))
    assert value <= MAX_MODULE_P90, f"module length p90 is {value} lines (> {MAX_MODULE_P90}); longest:\n" + _longest(
        sizes
    )


def test_function_length_p90() -> None:
    lengths = function_lengths(shaped_files(module_files()))
    value = p90(list(lengths.values()))
    assert value <= MAX_FUNCTION_P90, f"function length p90 is {value} lines (> {MAX_FUNCTION_P90}); longest:\n" + (
        _longest(lengths)
    )


@pytest.mark.parametrize("plugin", PLUGINS)
def test_no_module_of_a_plugin_is_longer_than_the_limit(plugin: str) -> None:
    packages = [p for p in PLUGIN_PACKAGES if p.parents[1].name == plugin]
    assert packages, f"no package under plugins/{plugin}/src"
    sizes = {}
    for package in packages:
        sizes.update({m: len(p.read_text().splitlines()) for m, p in shaped_files(module_files(package)).items()})
    long = {m: n for m, n in sizes.items() if n > MAX_PLUGIN_MODULE}
    assert not long, f"modules of plugins/{plugin} over {MAX_PLUGIN_MODULE} lines:\n" + _longest(long)


# -- the checker itself, on a package written here ------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return module_files(root / "pkg")


def test_the_checker_finds_type_checking_function_level_and_relative_cycles(tmp_path: Path) -> None:
    modules = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
        "pkg/b.py": "def f():\n    from . import c\n",
        "pkg/c.py": "from .a import A\n",
        "pkg/d.py": "import pkg.a\n",
    })  # fmt: skip
    graph = import_graph(modules)
    assert graph["pkg.b"] == {"pkg.c": 2} and graph["pkg.c"] == {"pkg.a": 1}
    assert strongly_connected(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert describe_cycles(graph)[0].startswith("pkg.a -> pkg.b -> pkg.c -> pkg.a ")


def test_the_checker_counts_package_inits_as_documented(tmp_path: Path) -> None:
    modules = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from pkg.sub.impl import Thing\n",
        "pkg/sub/impl.py": "from pkg.sub.helper import h\nfrom pkg.user import u\n",
        "pkg/sub/helper.py": "",
        "pkg/user.py": "from pkg.sub.helper import h\n",
        "pkg/own.py": "",
    })  # fmt: skip
    graph = import_graph(modules)
    assert set(graph["pkg.sub.impl"]) == {"pkg.sub.helper", "pkg.user"}  # its own package's init: no edge
    assert set(graph["pkg.user"]) == {"pkg.sub.helper", "pkg.sub"}  # the init it runs: an edge
    assert strongly_connected(graph) == [["pkg.sub", "pkg.sub.impl", "pkg.user"]]
    modules = _write(tmp_path, {"pkg/user.py": "", "pkg/sub/helper.py": "from pkg.sub import Thing\n"})
    graph = import_graph(modules)
    assert strongly_connected(graph) == [["pkg.sub", "pkg.sub.helper", "pkg.sub.impl"]]  # explicit own-init


def test_the_forbidden_import_check_and_p90(tmp_path: Path) -> None:
    modules = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/model.py": "",
        "pkg/ok.py": "import pkg.modelling\n",
        "pkg/modelling.py": "",
        "pkg/bad.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import model\n",
    })  # fmt: skip
    assert _forbidden(["pkg.ok", "pkg.bad"], "pkg.model", modules) == ["pkg.bad:3 imports pkg.model"]
    assert p90(list(range(1, 11))) == 9 and p90([5]) == 5 and p90(list(range(1, 101))) == 90


def test_the_contracts_check(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/c.py": "import abc\nfrom dataclasses import dataclass\nclass A(abc.ABC): ...\nclass B(A): ...\n"
            "@dataclass(frozen=True)\nclass D: ...\nclass Impl:\n    pass\n@hookspec\ndef h(): ...\n"
            "def helper(): return 1\n",
        },
    )
    assert implementation_in(modules, "pkg") == (["pkg.c:7 Impl"], {"c.helper"})


def test_the_grpc_import_check(tmp_path: Path) -> None:
    modules = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    import grpc.aio\n",
        "pkg/b.py": "from tritonclient import grpc as client\nimport grpcio_tools_not\n",
        "pkg/c.py": "from grpc_status import rpc_status\nfrom . import grpc\nimport mygrpc\n",
        "pkg/grpc.py": "",
    })  # fmt: skip
    assert grpc_imports(modules) == ["pkg.a:2 imports grpc.aio", "pkg.b:1 imports tritonclient.grpc",
                                     "pkg.c:1 imports grpc_status", "pkg.c:1 imports grpc_status.rpc_status"]  # fmt: skip


def test_the_process_exit_check(tmp_path: Path) -> None:
    modules = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import os, sys\ndef f():\n    raise SystemExit('error: x')\ndef g():\n    sys.exit(1)\n",
            "pkg/b.py": "import os\nraise SystemExit\nos._exit(0)\nparser.exit(2)\nraise ValueError('SystemExit')\n",
        },
    )
    assert process_exits(modules) == [
        "pkg.a:3 raises SystemExit",
        "pkg.a:5 calls sys.exit()",
        "pkg.b:2 raises SystemExit",
        "pkg.b:3 calls os._exit()",
    ]


def test_the_layer_check_finds_run_time_imports_up_and_lets_type_only_ones_pass(tmp_path: Path) -> None:
    files = {
        "inferd/__init__.py": "",
        "inferd/contracts/__init__.py": "",
        "inferd/contracts/a.py": "def f():\n    from inferd.engine import b\n",
        "inferd/contracts/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from inferd.engine.b import B\n",
        "inferd/engine/__init__.py": "",
        "inferd/engine/b.py": "import inferd.contracts.c\n",
    }  # fmt: skip
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = module_files(tmp_path / "inferd")
    assert layer_violations(modules) == [
        "inferd.contracts.a:2 imports inferd.engine (contracts -> engine)",
        "inferd.contracts.a:2 imports inferd.engine.b (contracts -> engine)",
    ]


def test_the_public_api_check_names_what_a_plugin_imports(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("from inferd.api import Backend\nfrom inferd.engine.router import Router\n")
    (tmp_path / "t.py").write_text("class {{ cookiecutter.name }}Model:\n    from inferd import api\n")
    found = [(path.name, line, name) for path, line, name in plugin_imports(tmp_path)]
    assert found == [("p.py", 1, "inferd.api"), ("p.py", 2, "inferd.engine.router"), ("t.py", 2, "inferd"),
                     ("t.py", 2, "inferd.api")]  # fmt: skip
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_p.py").write_text("from inferd.testing import ServerProcess\nimport inferd.config\n")
    (tmp_path / "q.py").write_text("from inferd.testing import ServerProcess\nimport inferd\n")
    assert past_the_api(tmp_path, plugin_imports(tmp_path)) == [
        "p.py:2 imports inferd.engine.router",
        "q.py:1 imports inferd.testing",
        "q.py:2 imports inferd",
        "t.py:2 imports inferd",
        "tests/test_p.py:2 imports inferd.config",
    ]
