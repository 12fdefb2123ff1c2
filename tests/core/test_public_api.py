"""The plugin API (``inferd.api``): one listing, nothing a type checker would take for ``Any``,
names imported when first used, and the API version a plugin declares."""

from __future__ import annotations

import ast
import inspect
import logging
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import inferd.api
from inferd.host.plugins import api_refusal

API_FILE = Path(inferd.api.__file__)
REPO = Path(__file__).resolve().parents[2]


def listed() -> dict[str, tuple[str, str]]:
    """``{public name: (module, attribute)}`` as the ``if TYPE_CHECKING:`` block of api.py binds them."""
    tree = ast.parse(API_FILE.read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    names: dict[str, tuple[str, str]] = {}
    for statement in block.body:
        assert isinstance(statement, ast.ImportFrom) and statement.module, ast.unparse(statement)
        for alias in statement.names:
            name = alias.asname or alias.name
            assert name not in names, f"{name} is listed twice"
            names[name] = (statement.module, alias.name)
    return names


def test_all_is_the_listing_and_the_version() -> None:
    assert len(inferd.api.__all__) == len(set(inferd.api.__all__))
    assert set(inferd.api.__all__) == set(listed()) | {"API_VERSION"}
    assert set(dir(inferd.api)) == set(inferd.api.__all__)


def test_every_public_name_is_the_object_its_statement_names() -> None:
    import importlib

    for name, (module, attribute) in listed().items():
        value = getattr(inferd.api, name)
        assert value is getattr(importlib.import_module(module), attribute), name
        assert not isinstance(value, ModuleType), f"{name} is a module, not a contract or helper"
        if (inspect.isclass(value) or inspect.isfunction(value)) and not value.__module__.endswith("_pb2"):
            assert value.__doc__, f"{name} has no docstring"  # the messages: model_config.proto
    assert inferd.api.API_VERSION == (1, 2)
    with pytest.raises(AttributeError, match="has no attribute 'gc_settings'"):
        inferd.api.gc_settings  # noqa: B018  # a module, private now


def test_helpers_that_are_no_contracts_are_private() -> None:
    for name in (
        "did_you_mean",
        "MAX_JSON_DEPTH",
        "gc_settings",
        "concat_inputs",
        "backend_config_setting",
        "WIRE_DATATYPES",
        "Tracer",
        "RequestTrace",
        "settings",
    ):
        assert name not in inferd.api.__all__ and not hasattr(inferd.api, name), name


def test_a_name_is_imported_from_its_module_on_first_use() -> None:
    code = (
        "import sys\n"
        "import inferd.api\n"
        "before = {m for m in sys.modules if m.startswith('inferd.')}\n"
        "from inferd.api import InvalidArgument\n"
        "after = {m for m in sys.modules if m.startswith('inferd.')}\n"
        "print(sorted(before), sorted(after - before))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['inferd.api'] ['inferd.contracts', 'inferd.contracts.errors']"


def test_a_type_checker_sees_every_name_and_no_fallback(tmp_path: Path) -> None:
    """mypy reads the listing as imports: a listed name has its type, an unlisted one is an error
    (no module ``__getattr__`` it could fall back to as ``Any``)."""
    user = tmp_path / "user.py"
    user.write_text(
        "from inferd.api import API_VERSION, InvalidArgument, settle_gc, NoSuchName\n"
        "reveal_type(API_VERSION)\n"
        "reveal_type(InvalidArgument)\n"
        "reveal_type(settle_gc)\n"
    )
    run = [
        sys.executable,
        "-m",
        "mypy",
        "--no-incremental",
        "--follow-imports=silent",
        "--ignore-missing-imports",
        "--no-error-summary",
        "--cache-dir",
        str(tmp_path / "cache"),
        str(user),
    ]
    out = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=600).stdout
    assert 'Module "inferd.api" has no attribute "NoSuchName"' in out, out
    assert 'user.py:2: note: Revealed type is "tuple[int, int]"' in out, out
    assert 'user.py:3: note: Revealed type is "def (message: str, kind: inferd.contracts.errors.ErrorKind' in out, out
    assert 'user.py:4: note: Revealed type is "def ()"' in out, out


@pytest.mark.parametrize(
    ("declared", "words"),
    [
        ((2, 0), "plugin 'p' is built for inferd plugin API 2.0, newer than this inferd's API 1.2; upgrade inferd"),
        ((0, 9), "plugin 'p' is built for inferd plugin API 0.9, which this inferd (API 1.2) no longer provides"),
        ("1.0", "plugin 'p' declares INFERD_API = '1.0'; expected (major, minor)"),
        ((1,), "plugin 'p' declares INFERD_API = (1,); expected (major, minor)"),
        ((True, 0), "plugin 'p' declares INFERD_API = (True, 0); expected (major, minor)"),
    ],
)
def test_a_plugin_of_another_major_or_no_version_is_refused(declared: object, words: str) -> None:
    refused = api_refusal("p", declared)
    assert refused is not None and refused.startswith(words) and refused.endswith("; the plugin is left out")


def test_a_plugin_of_this_major_is_accepted(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="inferd.host.plugins"):
        assert api_refusal("p", None) is None and api_refusal("p", (1, 0)) is None
        assert not caplog.records
        assert api_refusal("p", (1, 7)) is None
    assert [r.getMessage() for r in caplog.records] == [
        "plugin 'p' is built for inferd plugin API 1.7, newer than this inferd's API 1.2"
    ]


def declared_api(hooks: Path) -> object:
    """The literal a plugin's hooks module assigns to ``INFERD_API`` (``None`` when it assigns none)."""
    text = re.sub(r"{{.*?}}", "X", hooks.read_text())  # the template's placeholders
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["INFERD_API"]:
            return ast.literal_eval(node.value)
    return None


def test_every_plugin_here_declares_this_api_and_requires_its_major() -> None:
    major = inferd.api.API_VERSION[0]
    entry_modules = sorted(REPO.glob("plugins/*/src/*/hooks.py"))
    assert len(entry_modules) >= 9
    template = REPO / "cookiecutter" / "{{cookiecutter.__project_slug}}"
    for hooks in [*entry_modules, template / "src" / "{{cookiecutter.__package_name}}" / "hooks.py"]:
        declared = declared_api(hooks)  # the API it was written for: this major, no newer minor
        assert isinstance(declared, tuple) and declared[0] == major and declared <= inferd.api.API_VERSION, hooks
    for pyproject in [*REPO.glob("plugins/*/pyproject.toml"), template / "pyproject.toml"]:
        assert f'dependencies = ["inferd>={major},<{major + 1}"' in pyproject.read_text(), pyproject
