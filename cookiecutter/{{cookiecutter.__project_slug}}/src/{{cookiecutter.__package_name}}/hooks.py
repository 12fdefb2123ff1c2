"""Plugin registration: what inferd imports when it discovers the plugin.

Keep this module light. It must not import your framework: the server imports every installed
plugin's hooks module at start-up, and a plugin nobody's models use should cost nothing. The
factory imports the backend module the first time a model needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.api import BackendRegister, hookimpl

if TYPE_CHECKING:
    from inferd.api import Backend

#: The inferd plugin API this plugin is written for (``inferd.api``): a host of another major
#: refuses it. Raise it only when you have moved the plugin to that API's names.
INFERD_API = (1, 0)


def _make_backend() -> Backend:
    from {{ cookiecutter.__package_name }}.backend import {{ cookiecutter.__class_prefix }}Backend

    return {{ cookiecutter.__class_prefix }}Backend()


@hookimpl
def inferd_register_backends(register: BackendRegister) -> None:
    """Register the "{{ cookiecutter.backend_name }}" backend (config.pbtxt: ``backend: "{{ cookiecutter.backend_name }}"``)."""
    register("{{ cookiecutter.backend_name }}", _make_backend)
