"""Triton's checks of a ModelInferRequest's parameters: the typed ones (``priority``, ``timeout``,
...) and the reserved ``triton_...`` names."""

from __future__ import annotations

from collections.abc import Mapping

from inferd.contracts.errors import InvalidArgument
from inferd.frontends.grpc import grpc_service_pb2 as pb

#: The one ``triton_...`` request parameter a client may send: an empty response flagged final at the
#: end of a stream. The frontend takes it out of the request's parameters (models never see it).
ENABLE_EMPTY_FINAL = "triton_enable_empty_final_response"
#: Triton's sentence for any other request parameter named ``triton_...``.
RESERVED_PREFIX = (
    "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting "
    f"with 'triton_' are allowed: {ENABLE_EMPTY_FINAL}"
)
#: The request parameters whose kind Triton fixes: name -> the oneof fields it takes.
_TYPED_PARAMETERS: dict[str, tuple[str, ...]] = {
    "priority": ("int64_param", "uint64_param"),
    "timeout": ("int64_param",),
    "sequence_id": ("int64_param", "string_param"),
    "sequence_start": ("bool_param",),
    "sequence_end": ("bool_param",),
    "binary_data_output": ("bool_param",),
}


def check_request_parameters(params: Mapping[str, pb.InferParameter]) -> None:
    """Triton's checks of ``priority``, ``timeout`` and the sequence parameters of a
    ModelInferRequest: the oneof field each may use, and no negative priority or timeout; no
    ``triton_...`` name but :data:`ENABLE_EMPTY_FINAL`."""
    for key, param in params.items():
        if key.startswith("triton_") and key != ENABLE_EMPTY_FINAL:
            raise InvalidArgument(f"{RESERVED_PREFIX}; got '{key}'")
        allowed = _TYPED_PARAMETERS.get(key)
        if allowed is None:
            continue
        which = param.WhichOneof("parameter_choice")
        if which not in allowed:
            raise InvalidArgument(
                f"invalid value type for '{key}' parameter, expected {' or '.join(allowed)}. "
                f"(got {which or 'no value'})"
            )
        if which == "int64_param" and key in ("priority", "timeout") and param.int64_param < 0:
            raise InvalidArgument(f"invalid value for '{key}', expected value >= 0. (got {param.int64_param})")
