"""The ``whoami`` model (tests/fixtures/python_models/whoami): which serving process answered a request."""

from __future__ import annotations

import numpy as np
import tritonclient.http as httpclient

from tests.python_models import python_model

#: Its repository entry: eight instances, four on each of two workers (a config's instances are
#: dealt out among the workers).
WHOAMI = python_model("whoami")


def whoami(url: str, model: str = "whoami", ms: int = 0, timeout: float = 30.0) -> int:
    """The pid that served one request, over a new connection (so the kernel picks the worker)."""
    client = httpclient.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
    try:
        inp = httpclient.InferInput("MS", [1], "INT32")
        inp.set_data_from_numpy(np.array([ms], np.int32))
        return int(client.infer(model, [inp]).as_numpy("PID")[0])
    finally:
        client.close()
