"""One small client facade over ``tritonclient.http`` and ``tritonclient.grpc`` for the contract tests.

Both clients are imported when a facade is made, so ``inferd.testing`` imports without
tritonclient installed. Errors come back as :class:`CallError` with the protocol's status spelled
as a kind (``INVALID_ARG``, ``NOT_FOUND``...) next to the raw status.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PROTOCOLS = ("http", "grpc")

#: HTTP status / gRPC status code -> error kind.
_KINDS = {
    "400": "INVALID_ARG",
    "404": "NOT_FOUND",
    "500": "INTERNAL",
    "501": "UNSUPPORTED",
    "503": "UNAVAILABLE",
    "StatusCode.INVALID_ARGUMENT": "INVALID_ARG",
    "StatusCode.NOT_FOUND": "NOT_FOUND",
    "StatusCode.INTERNAL": "INTERNAL",
    "StatusCode.UNIMPLEMENTED": "UNSUPPORTED",
    "StatusCode.UNAVAILABLE": "UNAVAILABLE",
}


@dataclass
class CallError(Exception):
    """A failed call: ``kind`` (INVALID_ARG, NOT_FOUND...), raw ``status`` and the server's message."""

    protocol: str
    status: str
    message: str

    @property
    def kind(self) -> str:
        return _KINDS.get(self.status, "UNKNOWN")

    def __str__(self) -> str:
        return f"{self.protocol} call failed with {self.status} ({self.kind}): {self.message}"


class ProtocolClient:
    """``tritonclient.http`` or ``tritonclient.grpc`` behind one interface."""

    def __init__(self, protocol: str, http_url: str, grpc_url: str) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        self.protocol = protocol
        if protocol == "http":
            import tritonclient.http as module
            from tritonclient.utils import InferenceServerException

            self.url = http_url
        else:
            import tritonclient.grpc as module
            from tritonclient.utils import InferenceServerException

            self.url = grpc_url
        self.module = module
        self._error = InferenceServerException
        self.client = module.InferenceServerClient(self.url)

    def close(self) -> None:
        self.client.close()

    def _call(self, method: str, *args: Any, **kw: Any) -> Any:
        try:
            return getattr(self.client, method)(*args, **kw)
        except self._error as exc:
            raise CallError(self.protocol, str(exc.status()), str(exc.message())) from None

    # -- health, metadata, repository ------------------------------------------------------------

    def server_live(self) -> bool:
        return bool(self._call("is_server_live"))

    def server_ready(self) -> bool:
        return bool(self._call("is_server_ready"))

    def model_ready(self, model: str) -> bool:
        return bool(self._call("is_model_ready", model))

    def metadata(self, model: str) -> dict[str, Any]:
        """Model metadata as a dict, shapes as lists of ints on both protocols."""
        if self.protocol == "http":
            meta = self._call("get_model_metadata", model)
        else:
            meta = self._call("get_model_metadata", model, as_json=True)
        for key in ("inputs", "outputs"):
            for tensor in meta.get(key, []):
                tensor["shape"] = [int(d) for d in tensor.get("shape", [])]
        return dict(meta)

    def load(self, model: str) -> None:
        self._call("load_model", model)

    def unload(self, model: str) -> None:
        self._call("unload_model", model)

    def repository_index(self) -> list[dict[str, Any]]:
        if self.protocol == "http":
            return list(self._call("get_model_repository_index"))
        return list(self._call("get_model_repository_index", as_json=True).get("models", []))

    # -- inference -------------------------------------------------------------------------------

    def infer(
        self,
        model: str,
        arrays: Mapping[str, np.ndarray],
        datatypes: Mapping[str, str] | None = None,
        outputs: Sequence[str] = (),
    ) -> dict[str, np.ndarray]:
        """Send ``arrays`` (wire datatypes from ``datatypes`` or the arrays' dtypes); return outputs by name."""
        from tritonclient.utils import np_to_triton_dtype

        inputs = []
        for name, array in arrays.items():
            datatype = (datatypes or {}).get(name) or np_to_triton_dtype(array.dtype)
            tensor = self.module.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        requested = [self.module.InferRequestedOutput(o) for o in outputs] or None
        result = self._call("infer", model, inputs, outputs=requested)
        if self.protocol == "http":
            names = [o["name"] for o in result.get_response().get("outputs", [])]
        else:
            names = [o.name for o in result.get_response().outputs]
        return {name: result.as_numpy(name) for name in names}

    def infer_concurrently(self, model: str, requests: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
        """Send every request at once, each from its own thread and client; results in order.

        Each result is the outputs dict or the :class:`CallError` raised.
        """
        results: list[Any] = [None] * len(requests)
        barrier = threading.Barrier(len(requests))

        def send(index: int) -> None:
            client = ProtocolClient(self.protocol, self.url, self.url)
            try:
                barrier.wait(timeout=30)
                results[index] = client.infer(model, requests[index])
            except CallError as exc:
                results[index] = exc
            finally:
                client.close()

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        return results
