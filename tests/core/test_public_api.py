"""The public API (``inferd.api``) and the old flat paths that still import for one release."""

from __future__ import annotations

import subprocess
import sys

import inferd.api
from inferd.moved import MOVED


def test_every_public_name_resolves_to_its_contract() -> None:
    assert sorted(inferd.api.__all__) == sorted(inferd.api._MODULE_OF)
    for name in inferd.api.__all__:
        assert getattr(inferd.api, name) is not None, name
    from inferd.contracts.backend import Backend

    assert inferd.api.Backend is Backend


def test_an_old_path_is_the_new_module_and_warns_once() -> None:
    code = (
        "import warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    from inferd.backend import Backend\n"
        "    import inferd.backend\n"
        "    from inferd.errors import InvalidArgument\n"
        "import inferd.contracts.backend, inferd.contracts.errors\n"
        "assert inferd.backend is inferd.contracts.backend and Backend is inferd.contracts.backend.Backend\n"
        "assert InvalidArgument is inferd.contracts.errors.InvalidArgument\n"
        "print([str(w.message).split(' ')[0] for w in caught if w.category is DeprecationWarning])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['inferd.backend', 'inferd.errors']"


def test_every_old_path_still_imports() -> None:
    code = "import importlib, warnings\nwarnings.simplefilter('ignore')\n" + "".join(
        f"assert importlib.import_module({old!r}) is importlib.import_module({new!r})\n" for old, new in MOVED.items()
    )
    subprocess.run([sys.executable, "-c", code], check=True)
