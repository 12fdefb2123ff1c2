"""Errors carry a kind; each frontend's one table turns every kind into its status."""

from __future__ import annotations

import grpc
import pytest

from inferd.contracts.errors import ErrorKind
from inferd.frontends.grpc.service import STATUS as GRPC_STATUS
from inferd.frontends.http.errors import STATUS as HTTP_STATUS

#: The refusals of ``inferd.auth``: HTTP status and gRPC code (Triton's for a restricted API).
ACCESS = {
    ErrorKind.RESTRICTED: (403, grpc.StatusCode.UNAVAILABLE),
    ErrorKind.UNAUTHENTICATED: (401, grpc.StatusCode.UNAUTHENTICATED),
    ErrorKind.FORBIDDEN: (403, grpc.StatusCode.PERMISSION_DENIED),
    ErrorKind.LIMITED: (429, grpc.StatusCode.RESOURCE_EXHAUSTED),
}


def test_every_kind_has_a_grpc_status():
    assert set(GRPC_STATUS) == set(ErrorKind)


def test_the_access_kinds_have_their_own_statuses():
    assert {kind: (HTTP_STATUS[kind], GRPC_STATUS[kind]) for kind in ACCESS} == ACCESS


def test_the_openai_frontend_answers_every_access_kind():
    access = pytest.importorskip("inferd_frontend_openai.access")
    assert set(access.REFUSALS) == set(ACCESS)
    assert {kind: status for kind, (status, _, _) in access.REFUSALS.items()} == {k: v[0] for k, v in ACCESS.items()}
