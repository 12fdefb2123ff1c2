"""The flags of ``tritonserver --help`` (2.51) that inferd accepts without acting on them.

Triton command lines and Helm values run unchanged: each of these flags takes one value (``--flag
value`` or ``--flag=value``, as Triton's getopt does; booleans too) and is answered with one
warning line naming it and why it does not apply. (Triton's security flags — TLS, restricted
APIs — are not here: inferd implements them.)
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from typing import Any

_DEVICES = "memory and devices are managed by each backend's framework"
_KEEPALIVE = "inferd's gRPC server keeps its own HTTP/2 keepalive and connection settings"

#: flag -> why inferd does not act on it (the warning's reason).
NOT_APPLICABLE: dict[str, str] = {
    "--model-load-retry-count": "a failed load is not retried; load it again through the repository API",
    "--enable-peer-access": _DEVICES,
    "--reuse-http-port": "ports are shared only between inferd's own --workers",
    "--http-thread-count": "HTTP runs on an event loop per process; use --workers N for more processes",
    "--reuse-grpc-port": "ports are shared only between inferd's own --workers",
    "--grpc-infer-allocation-pool-size": "inferd keeps no pool of gRPC request objects",
    "--grpc-infer-response-compression-level": "gRPC responses are sent uncompressed",
    "--grpc-keepalive-time": _KEEPALIVE,
    "--grpc-keepalive-timeout": _KEEPALIVE,
    "--grpc-keepalive-permit-without-calls": _KEEPALIVE,
    "--grpc-http2-max-pings-without-data": _KEEPALIVE,
    "--grpc-http2-min-recv-ping-interval-without-data": _KEEPALIVE,
    "--grpc-http2-max-ping-strikes": _KEEPALIVE,
    "--grpc-max-connection-age": _KEEPALIVE,
    "--grpc-max-connection-age-grace": _KEEPALIVE,
    "--allow-sagemaker": "inferd has no SageMaker endpoint",
    "--sagemaker-port": "inferd has no SageMaker endpoint",
    "--sagemaker-safe-port-range": "inferd has no SageMaker endpoint",
    "--sagemaker-thread-count": "inferd has no SageMaker endpoint",
    "--allow-vertex-ai": "inferd has no Vertex AI endpoint",
    "--vertex-ai-port": "inferd has no Vertex AI endpoint",
    "--vertex-ai-thread-count": "inferd has no Vertex AI endpoint",
    "--vertex-ai-default-model": "inferd has no Vertex AI endpoint",
    "--backend-directory": "backends are Python plugins (see 'inferd plugins'), not shared libraries",
    "--repoagent-directory": "repository agents are not supported",
    "--pinned-memory-pool-byte-size": _DEVICES,
    "--cuda-memory-pool-byte-size": _DEVICES,
    "--cuda-virtual-address-size": _DEVICES,
    "--min-supported-compute-capability": _DEVICES,
    "--buffer-manager-thread-count": "tensors are not copied by a buffer manager",
    "--host-policy": _DEVICES,
    "--model-load-gpu-limit": _DEVICES,
}

#: Flags refused at start-up (exit code 2), with what to do instead (the restricted-API flags are
#: real ``inferd serve`` options now: see ``inferd.auth``).
_PREFIX = "triton_na_"


def _dest(flag: str) -> str:
    return _PREFIX + flag.lstrip("-").replace("-", "_")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Accept every flag of :data:`NOT_APPLICABLE`, each with one value."""
    group = parser.add_argument_group(
        "Triton flags that do not apply",
        "accepted so Triton command lines run unchanged, each with a warning naming it: "
        + ", ".join(sorted(NOT_APPLICABLE)),
    )
    for flag in NOT_APPLICABLE:
        group.add_argument(flag, dest=_dest(flag), action="append", metavar="VALUE", help=argparse.SUPPRESS)


def is_own_dest(dest: str) -> bool:
    """Whether an argparse ``dest`` is one of this module's (kept out of ``ServerOptions.extra``)."""
    return dest.startswith(_PREFIX)


def given(values: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(flag, value)`` for each of these flags on the command line, in flag order."""
    for flag in NOT_APPLICABLE:
        for value in values.get(_dest(flag)) or ():
            yield flag, value


#: Triton's start-up warning for its deprecated spelling (observed from Triton 2.51).
STRICT_MODEL_CONFIG_DEPRECATED = (
    "Warning: '--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead."
)


def warnings(values: Mapping[str, Any]) -> list[str]:
    """One line per not-applicable flag given: ``--http-thread-count=8 does not apply to inferd
    (ignored): <why>``; and Triton's warning for ``--strict-model-config``, which still works."""
    lines = [
        f"{flag}={value} does not apply to inferd (ignored): {NOT_APPLICABLE[flag]}"
        for flag, value in given(values)
        if flag in NOT_APPLICABLE
    ]
    if values.get("strict_model_config") is not None:
        lines.append(STRICT_MODEL_CONFIG_DEPRECATED)
    return lines
