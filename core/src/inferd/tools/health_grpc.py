"""``inferd health grpc://host:port``: the same probe over KServe v2 gRPC (``ServerLive``,
``ServerReady``, ``RepositoryIndex``); ``grpcs://`` verifies the server with ``--cacert``."""

from __future__ import annotations

import argparse
from typing import Any

import grpc

from inferd.frontends.grpc import grpc_service_pb2 as pb
from inferd.frontends.grpc.grpc_service_pb2_grpc import GRPCInferenceServiceStub
from inferd.tools.probe_headers import request_headers
from inferd.tools.wrong_port import answered_http1, http_port


def _channel(address: str, secure: bool, cacert: str | None) -> grpc.Channel:
    if not secure:
        return grpc.insecure_channel(address)
    roots = None
    if cacert:
        with open(cacert, "rb") as f:
            roots = f.read()
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(roots))


def _metadata(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The HTTP probe's headers as gRPC metadata (lower-case keys)."""
    return [(name.lower(), value) for name, value in request_headers(args).items()]


def _error(address: str, exc: grpc.RpcError) -> str:
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    if answered_http1(details or ""):
        return http_port(address, f"use the gRPC port with grpc://, or http://{address}")
    return f"{exc.code().name if isinstance(exc, grpc.Call) else 'UNAVAILABLE'}: {details}"


def probe(args: argparse.Namespace) -> dict[str, Any]:
    """What the server's gRPC port says: live, ready, its models (or why they could not be listed)."""
    scheme, _, address = args.url.partition("://")
    result: dict[str, Any] = {"url": args.url.rstrip("/"), "live": False, "ready": False, "models": None}
    address = address.rstrip("/")
    metadata = _metadata(args)
    with _channel(address, scheme == "grpcs", args.cacert) as channel:
        stub = GRPCInferenceServiceStub(channel)
        try:
            result["live"] = stub.ServerLive(pb.ServerLiveRequest(), timeout=args.timeout, metadata=metadata).live
        except grpc.RpcError as exc:
            result["error"] = _error(address, exc)
            return result
        if not result["live"]:
            result["error"] = "ServerLive answered live: false"
            return result
        try:
            ready = stub.ServerReady(pb.ServerReadyRequest(), timeout=args.timeout, metadata=metadata)
            result["ready"] = ready.ready
        except grpc.RpcError:
            result["ready"] = False
        try:
            index = stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=args.timeout, metadata=metadata)
        except grpc.RpcError as exc:
            result["models_error"] = _error(address, exc)
            return result
    result["models"] = [
        {k: v for k, v in (("name", m.name), ("version", m.version), ("state", m.state), ("reason", m.reason)) if v}
        for m in index.models
    ]
    return result
