"""docs/hooks.md, docs/architecture.md and docs/writing-a-backend.md against the code they name.

Their Python compiles and imports only what exists; the complete plugins they show (blocks marked
``<!-- file: path -->``) are written out and served; their excerpts (``<!-- excerpt: path -->``)
are lines of the files they quote; every ``inferd.…`` path, repository path, class, member and
hook they mention exists; architecture.md's layer table is the import test's; and their links, and
the other pages' links to them, lead to a page and a heading that exist.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

import inferd.api
import inferd.testing
from inferd.contracts import hookspecs
from inferd.testing import InProcessServer
from tests.docs.walk import ROOT

DOCS = ROOT / "docs"
PACKAGE = ROOT / "core" / "src" / "inferd"
PAGES = [DOCS / "hooks.md", DOCS / "architecture.md", DOCS / "writing-a-backend.md"]
TEMPLATE = ROOT / "cookiecutter"
FENCE = re.compile(r"(?:^<!-- (file|excerpt): (\S+) -->\n)?^```(\w*)\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
HOOK = re.compile(r"(?<!#)\binferd_(?:register_[a-z_]+|add_options|startup|shutdown)\b")
#: Hook names a page spells wrong on purpose (the error a misspelled hook gets).
MISSPELLED = {"inferd_register_backend"}
HOOKS = {name for name in vars(hookspecs) if name.startswith("inferd_")}
#: Class names the pages use that are not the plugin API's or the test kit's, and where each lives.
HOST_NAMES = {
    "Alone": "inferd.workers.membership",
    "ClusterDataPlane": "inferd.workers.cluster",
    "H1Protocol": "inferd.serving.h1",
    "H2Server": "inferd.serving",
    "HttpRequestParser": "httptools",
    "HttpRoute": "inferd.frontends.http.app",
    "LocalDataPlane": "inferd.dataplane",
    "ModelManager": "inferd.lifecycle.manager",
    "ModelTable": "inferd.engine.model_table",
    "PluginHost": "inferd.host.plugins",
    "Router": "inferd.engine.router",
    "Rpc": "inferd.frontends.grpc.service",
    "Runner": "inferd.serving.runner",
    "Server": "inferd.host.server",
    "ServerHealth": "inferd.engine.health",
    "Tracer": "inferd.engine.trace",
    "UnaryStream": "inferd.serving",
    "VersionBuilder": "inferd.lifecycle.builder",
    "Worker": "inferd.workers.membership",
}


def fences(page: Path) -> Iterator[tuple[str, str, str, str]]:
    """``(marker, marked path, language, text)`` of each fenced block of ``page``."""
    for match in FENCE.finditer(page.read_text()):
        yield match.group(1) or "", match.group(2) or "", match.group(3), match.group(4)


def prose(page: Path) -> str:
    return FENCE.sub("", page.read_text())


def spans(page: Path) -> list[str]:
    """The inline code of ``page``'s prose and tables (``\\|`` inside a table cell unescaped)."""
    return [s.replace("\\|", "|") for s in SPAN.findall(prose(page))]


def resolve(dotted: str) -> object:
    """The module or attribute ``dotted`` names: its longest importable prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise ImportError(dotted)


def has_member(owner: object, member: str) -> bool:
    """Whether ``owner`` has ``member``: an attribute, a field, or an annotated attribute."""
    if hasattr(owner, member) or member in getattr(owner, "__dataclass_fields__", {}):
        return True
    return any(member in getattr(cls, "__annotations__", {}) for cls in getattr(owner, "__mro__", ()))


def known(name: str) -> object:
    """The class or function a page names without a module (a class the template generates for
    the backend ``echo``: its source)."""
    for where in (inferd.api, inferd.testing, builtins):
        if name in getattr(where, "__all__", dir(where)):
            return getattr(where, name)
    if name.startswith("Echo"):
        generated = name.replace("Echo", "{{ cookiecutter.__class_prefix }}", 1)
        sources = [p.read_text() for p in TEMPLATE.rglob("*.py")]
        return next(s for s in sources if f"class {generated}(" in s)
    return getattr(importlib.import_module(HOST_NAMES[name]), name)


@pytest.fixture(params=PAGES, ids=lambda p: p.name)
def page(request: pytest.FixtureRequest) -> Path:
    return Path(request.param)


@pytest.mark.parametrize("name", ["hooks.md", "writing-a-backend.md"])
def test_python_blocks_compile_and_import_what_exists(name: str) -> None:
    page = DOCS / name
    blocks = [text for _, _, lang, text in fences(page) if lang == "python"]
    assert blocks, page.name
    for text in blocks:
        tree = ast.parse(text)
        compile(tree, page.name, "exec")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "inferd":
                module = importlib.import_module(node.module)
                missing = [a.name for a in node.names if not hasattr(module, a.name)]
                assert not missing, f"{page.name}: {node.module} has no {missing}"
            if isinstance(node, ast.FunctionDef) and node.name.startswith("inferd_"):
                assert node.name in HOOKS, f"{page.name}: {node.name} is no hook"


def test_inferd_paths_resolve(page: Path) -> None:
    names = {m for span in spans(page) for m in re.findall(r"\binferd(?:\.\w+)+", span)}
    loggers = set(re.findall(r'getLogger\("([\w.]+)"\)', (PACKAGE / "host" / "plugins.py").read_text()))
    assert names, page.name
    bad = []
    for name in sorted(names - loggers):
        try:
            resolve(name)
        except (ImportError, AttributeError) as exc:
            bad.append(f"{name}: {exc}")
    assert not bad, f"{page.name} names what does not exist:\n" + "\n".join(bad)


def test_repository_paths_exist(page: Path) -> None:
    """A path whose first part is a folder of the repository or of the package exists (relative to
    the repository, else to ``core/src/inferd``)."""
    roots = {p.name for p in ROOT.iterdir()} | {p.name for p in PACKAGE.iterdir()}
    paths = [s for s in spans(page) if re.fullmatch(r"[\w.-]+(/[\w.-]*)*", s) and ("/" in s or s.endswith(".py"))]
    checked = [p for p in paths if p.split("/")[0] in roots]
    missing = [p for p in checked if not (ROOT / p).exists() and not (PACKAGE / p).exists()]
    assert checked and not missing, f"{page.name}: {missing}"


def test_classes_and_members_exist(page: Path) -> None:
    """``Name``, ``Name(args)``, ``Name.member`` and ``await Name.member(...)`` name a class or
    function of the plugin API, the test kit or :data:`HOST_NAMES`, and a member it has."""
    form = re.compile(r"(?:async |await )?([A-Z]\w*[a-z]\w*)(?:\.(\w+))?(?:\(.*\))?(?: -> .*)?")
    matches = [m for m in map(form.fullmatch, spans(page)) if m is not None]
    assert matches, page.name
    bad = []
    for match in matches:
        span = match.group(0)
        name, member = match.groups()
        if name.startswith("TRITON"):  # Triton's C API (TRITONBACKEND_ModelInstanceReady)
            continue
        try:
            owner = known(name)
        except (KeyError, AttributeError, StopIteration):
            bad.append(span)
            continue
        if member is not None and not has_member(owner, member):
            bad.append(span)
    assert not bad, f"{page.name} names what does not exist: {bad}"


#: The tables of members, by page and section, and the classes whose members they list.
MEMBER_TABLES = {
    ("hooks.md", "Backend, Model, Instance"): ("Backend", "Model"),
    ("hooks.md", "Scheduler"): ("Scheduler",),
    ("hooks.md", "ResponseCache"): ("ResponseCache",),
    ("hooks.md", "Frontend"): ("Frontend",),
    ("hooks.md", "DataPlane"): ("DataPlane",),
    ("writing-a-backend.md", "The backend contract"): ("BackendContract",),
}


def section(page: Path, title: str) -> str:
    """The prose of ``page`` under the heading ``title``, up to the next heading."""
    parts = re.split(r"^#{2,4} (.+)$", prose(page), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))[title]


def parameters(owner: Any, member: str) -> list[str]:
    """The parameters of ``owner.member`` (without ``self``); an attribute annotated with a
    callable Protocol of the API (``DataPlane.infer: Infer``) has those of its ``__call__``."""
    value = inspect.getattr_static(owner, member, None)
    if value is None:
        value = getattr(inferd.api, owner.__annotations__[member]).__call__
    if isinstance(value, property):
        return []
    return [p for p in inspect.signature(inspect.unwrap(value)).parameters if p != "self"]


def test_member_tables_name_members_and_their_parameters() -> None:
    """A member a table lists (``name``, ``name(a, b=...)``, ``await name(...) -> T``) exists on
    one of the section's classes, with those parameters, in that order."""
    call = re.compile(r"(?:async |await )?([a-z_]\w*)(?:\((.*)\))?(?: -> .*)?")
    bad = []
    for (name, title), owners in MEMBER_TABLES.items():
        classes = [known(owner) for owner in owners]
        rows = [line for line in section(DOCS / name, title).splitlines() if line.startswith("| ")]
        cells = [re.split(r"(?<!\\)\|", row)[1] for row in rows]
        listed = [m for cell in cells for m in map(call.fullmatch, SPAN.findall(cell.replace("\\|", "|"))) if m]
        assert listed, title
        for match in listed:
            member, args = match.groups()
            owner = next((c for c in classes if has_member(c, member)), None)
            if owner is None:
                bad.append(f"{title}: {match.group(0)}")
            elif args and args != "...":
                given = [a.split("=")[0].split(":")[0].strip() for a in args.split(",")]
                if given != parameters(owner, member)[: len(given)]:
                    bad.append(f"{title}: {match.group(0)} (parameters {parameters(owner, member)})")
    assert not bad, bad


def test_every_inferd_api_name_is_listed() -> None:
    """``inferd.api.X`` anywhere in the pages, code included, is a name of the API's listing."""
    named = {n for page in PAGES for n in re.findall(r"\binferd\.api\.(\w+)", page.read_text())}
    assert named and not named - set(inferd.api.__all__), sorted(named - set(inferd.api.__all__))


def test_hook_names_are_the_specifications(page: Path) -> None:
    named = set(HOOK.findall(page.read_text()))
    assert named and MISSPELLED.isdisjoint(HOOKS)
    assert named - MISSPELLED <= HOOKS, f"{page.name}: {sorted(named - MISSPELLED - HOOKS)}"


def test_hooks_md_documents_every_hook_with_its_parameters() -> None:
    headings = dict(re.findall(r"^### `(inferd_\w+)\((\w+)\)`$", (DOCS / "hooks.md").read_text(), re.M))
    assert set(headings) == HOOKS
    for hook, parameter in headings.items():
        assert list(inspect.signature(getattr(hookspecs, hook)).parameters) == [parameter], hook


def test_excerpts_are_lines_of_the_files_they_quote() -> None:
    def code(line: str) -> str:
        return line.split("  # ")[0].strip()

    excerpts = [(page, path, text) for page in PAGES for marker, path, _, text in fences(page) if marker == "excerpt"]
    assert len(excerpts) == 4  # hooks.md's example plugins
    for page, path, text in excerpts:
        lines = {code(line) for line in (ROOT / path).read_text().splitlines()}
        quoted = [code(line) for line in text.splitlines() if code(line) and "..." not in line]
        assert quoted and not [q for q in quoted if q not in lines], f"{page.name}: excerpt of {path}"


def write_files(page: Path, root: Path) -> list[Path]:
    """The blocks of ``page`` marked ``file``, written under ``root``; each model gets version 1."""
    written = []
    for marker, path, _, text in fences(page):
        if marker == "file":
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            written.append(target)
            if target.name == "config.pbtxt":
                (target.parent / "1").mkdir()
    return written


def serve_and_infer(models: Path, plugin: Any, model: str, x: np.ndarray) -> Any:
    server = InProcessServer([models], plugins=[plugin]).start()
    try:
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        return client.infer(model, [tensor]).as_numpy("OUTPUT0")
    finally:
        server.stop()


def test_the_minimal_plugin_of_hooks_md_serves(tmp_path: Path) -> None:
    write_files(DOCS / "hooks.md", tmp_path)
    spec = importlib.util.spec_from_file_location("double_plugin", tmp_path / "double_plugin.py")
    assert spec is not None and spec.loader is not None
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(serve_and_infer(tmp_path / "models", plugin, "doubled", x), x * 2)


def test_the_backend_of_writing_a_backend_md_serves(tmp_path: Path) -> None:
    written = write_files(DOCS / "writing-a-backend.md", tmp_path)
    package = tmp_path / "src" / "inferd_backend_gain"
    assert {p.name for p in written if p.parent == package} == {"hooks.py", "backend.py", "instance.py", "options.py"}
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path / "src"))
    try:
        hooks = importlib.import_module("inferd_backend_gain.hooks")
        assert "inferd_backend_gain.backend" not in sys.modules  # discovery stays light
        x = np.array([[2, 4, 6, 8]], dtype=np.float32)
        np.testing.assert_array_equal(serve_and_infer(tmp_path / "models", hooks, "halve", x), x / 2)
    finally:
        sys.path.remove(str(tmp_path / "src"))
        for name in [m for m in sys.modules if m.split(".")[0] == "inferd_backend_gain"]:
            del sys.modules[name]


def test_the_layers_table_is_the_import_test_s() -> None:
    from tests.package_layers import LAYERS

    text = (DOCS / "architecture.md").read_text()
    table = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| ") and "`" in line]

    def module(folder: str) -> str:
        path = folder.removesuffix("/").removesuffix(".py").removesuffix("__init__").rstrip("/")
        return ".".join(["inferd", *filter(None, path.split("/"))])

    documented = [(layer.strip(), tuple(module(f) for f in SPAN.findall(folders))) for layer, folders in rows]
    assert documented == LAYERS


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_links_of_and_to_these_pages_lead_somewhere() -> None:
    """Every relative link of README.md and these pages, and every link of the other pages to
    these, leads to a file (and a heading of a page) that exists."""
    names = {p.name for p in PAGES}
    checked, bad = 0, []
    for source in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(source)):
            if re.match(r"\w+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            destination = (source.parent / path).resolve() if path else source
            if source.name not in names | {"README.md"} and destination.name not in names:
                continue
            checked += 1
            if not destination.exists():
                bad.append(f"{source.relative_to(ROOT)}: {target}")
            elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
                bad.append(f"{source.relative_to(ROOT)}: {target} (no such heading)")
    assert checked > 20 and not bad, bad
