"""Python-backend models the end-to-end tests serve (tests/fixtures/python_models), written into
temporary repositories.

- ``add_sub``: OUTPUT0 = INPUT0 + INPUT1 + OFFSET, OUTPUT1 = INPUT0 - INPUT1 (FP32, [4], batching up
  to 8); OFFSET lets a test tell versions apart.
- ``picky``: Y = 2 X (INT64), and the whole ``execute`` fails when any request has a negative value.
- ``echo``: TEXT reversed, and META: the request's id and parameters, so tests see what reached the model.
- ``slow``: sleeps for the milliseconds it is sent (MS, INT32), then answers with them; four instances.
"""

from __future__ import annotations

import json

from tests.python_models import source

ADD_SUB_CONFIG = source("add_sub", "config.pbtxt")
PICKY_CONFIG = source("picky", "config.pbtxt")
PICKY_PY = source("picky")
ECHO_CONFIG = source("echo", "config.pbtxt")
ECHO_PY = source("echo")
SLOW_CONFIG = source("slow", "config.pbtxt")
SLOW_PY = source("slow")
#: A model.py that fails to import.
BROKEN_PY = "raise RuntimeError('cannot import this model')\n"
_ONES = {"shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
#: An HTTP infer request body for ``add_sub``: INPUT0 and INPUT1 both [[1, 2, 3, 4]].
ADD_SUB_JSON = json.dumps({"inputs": [{"name": "INPUT0", **_ONES}, {"name": "INPUT1", **_ONES}]}).encode()


def add_sub_py(offset: int = 0) -> str:
    """``add_sub``'s model.py with ``OFFSET = offset``."""
    return source("add_sub").replace("OFFSET = 0\n", f"OFFSET = {offset}\n")


def add_sub(offset: int = 0, versions: tuple[int, ...] = (1,), config: str = ADD_SUB_CONFIG) -> dict[str, str]:
    """``add_sub`` as a repository entry: ``config`` and its model.py (with ``offset``) in each version."""
    files = {"config.pbtxt": config}
    for v in versions:
        files[f"{v}/model.py"] = add_sub_py(offset)
    return files


def simple(config: str, code: str) -> dict[str, str]:
    """A model of one version: ``config`` and ``code`` as its model.py."""
    return {"config.pbtxt": config, "1/model.py": code}
