"""inferd.auth: the restricted-API flags, the key file, the policy's decisions and the limits."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import grpc
import pytest

from inferd.auth import (
    AccessControl,
    AccessDenied,
    ApiGroup,
    AuthConfigError,
    RestrictionError,
    access_from_flags,
    digest,
)
from inferd.auth.groups import parse_restrictions
from inferd.auth.keys import KeyFile, parse_config
from inferd.auth.limits import TokenBucket
from inferd.contracts.errors import NotFound
from inferd.frontends.grpc.service import RPCS
from inferd.frontends.grpc.service import STATUS as GRPC_STATUS
from inferd.frontends.http.app import INFER_ROUTES, ROUTES
from inferd.frontends.http.errors import STATUS as HTTP_STATUS
from inferd.frontends.http.errors import error_headers

CONFIG = f"""
tenants:
  alice:
    keys: [{digest("alice-key")}]
    models: ["add_*", "exact"]
    rate: 10
    burst: 2
  bob:
    keys: ["sha256:{digest("bob-key")}"]
    apis: [inference, model-repository]
    concurrency: 1
"""


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def statuses(exc: AccessDenied) -> tuple[int, grpc.StatusCode]:
    """A refusal's HTTP status and gRPC code: the frontends' tables turn its kind into them."""
    return HTTP_STATUS[exc.kind], GRPC_STATUS[exc.kind]


def http_headers(exc: AccessDenied) -> tuple[tuple[str, str], ...]:
    """The headers a refusal's HTTP answer carries besides its content type."""
    return tuple((k.decode(), v.decode()) for k, v in error_headers(exc)[1:])


@pytest.fixture
def access(tmp_path: Path) -> AccessControl:
    path = tmp_path / "auth.yaml"
    path.write_text(CONFIG)
    control = access_from_flags(["model-repository:admin-key=s1"], ["inference:k=v"], str(path))
    assert control is not None
    return control


# -- restricted API flags ---------------------------------------------------------------------------


def test_restrictions_parse_groups_keys_and_values():
    parsed = parse_restrictions(["model-repository,logging:Admin-Key=s=1", "health:k=v"], "--http-restricted-api")
    assert parsed[ApiGroup.MODEL_REPOSITORY].key == "admin-key"  # header names are case-insensitive
    assert parsed[ApiGroup.LOGGING].value == "s=1"  # the value may hold '='
    assert parsed[ApiGroup.HEALTH].value == "v"
    assert set(parsed) == {ApiGroup.MODEL_REPOSITORY, ApiGroup.LOGGING, ApiGroup.HEALTH}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["bogus:k=v"], "unknown restricted api 'bogus'"),  # Triton's sentences
        (["health:k=v", "health:k2=v"], "restricted api 'health' can not be specified in multiple config groups"),
        (["health:k"], "--x=health:k: expected <api>[,<api>...]:<key>=<value>"),
        (["health"], "expected <api>"),
    ],
)
def test_bad_restrictions_are_refused_with_triton_sentence(values, message):
    with pytest.raises(RestrictionError) as exc:
        parse_restrictions(values, "--x")
    assert message in str(exc.value)


def test_grpc_restrictions_say_protocol():
    with pytest.raises(RestrictionError, match="^unknown restricted protocol 'model-reposit'"):
        parse_restrictions(["model-reposit,health:k=v"], "--grpc-restricted-protocol", "protocol")
    with pytest.raises(RestrictionError, match="^restricted protocol 'health' can not be specified in multiple"):
        parse_restrictions(["health:k=v", "health:k2=v"], "--grpc-restricted-protocol", "protocol")


def test_every_rpc_and_route_has_a_group():
    assert {rpc.group for rpc in RPCS} == set(ApiGroup)
    assert {route.group for route in (*ROUTES, *INFER_ROUTES)} == set(ApiGroup)


def test_no_flag_means_no_access_control():
    assert access_from_flags([], [], None) is None


def test_a_restricted_group_needs_its_header(access: AccessControl):
    with pytest.raises(AccessDenied) as exc:
        access.http.admit(ApiGroup.MODEL_REPOSITORY, "", {"admin-key": "wrong", **bearer("bob-key")})
    assert statuses(exc.value) == (403, grpc.StatusCode.UNAVAILABLE)
    assert exc.value.message == "This API is restricted, expecting header 'admin-key'"
    grant = access.http.admit(ApiGroup.MODEL_REPOSITORY, "", {"admin-key": "s1", **bearer("bob-key")})
    assert grant.tenant is not None and grant.tenant.name == "bob"
    with pytest.raises(AccessDenied) as exc:  # gRPC: the key in Triton's metadata name
        access.grpc.admit(ApiGroup.INFERENCE, "add_sub", {"k": "v", **bearer("alice-key")})
    assert exc.value.message == "This protocol is restricted, expecting header 'triton-grpc-protocol-k'"
    assert access.grpc.admit(ApiGroup.INFERENCE, "add_sub", {"triton-grpc-protocol-k": "v", **bearer("alice-key")})


# -- keys and tenants -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "missing API key: send it as 'Authorization: Bearer <key>'"),
        ({"x-api-key": "alice-key"}, "missing API key"),  # a key in the wrong header
        ({"authorization": "alice-key"}, "the Authorization header must be 'Bearer <key>'"),
        ({"authorization": "Bearer "}, "the Authorization header must be 'Bearer <key>'"),
        ({"authorization": "Bearer nope"}, "unknown API key"),
        ({"authorization": "Bearer " + "x" * 100_000}, "the Authorization header is 100007 bytes long, at most 4096"),
    ],
)
def test_no_or_a_bad_key_is_unauthenticated(access: AccessControl, headers, message):
    with pytest.raises(AccessDenied) as exc:
        access.http.admit(ApiGroup.METADATA, "add_sub", headers)
    assert statuses(exc.value) == (401, grpc.StatusCode.UNAUTHENTICATED)
    assert message in exc.value.message
    assert ("www-authenticate", "Bearer") in http_headers(exc.value)
    assert access.limits.counts["", "unauthenticated"] == 1


def test_the_bearer_scheme_is_case_insensitive(access: AccessControl):
    assert access.http.admit(ApiGroup.METADATA, "add_sub", {"authorization": "bearer alice-key"}).tenant.name == "alice"


def test_a_group_outside_the_tenant_rights_is_forbidden(access: AccessControl):
    with pytest.raises(AccessDenied) as exc:
        access.http.admit(ApiGroup.METADATA, "add_sub", bearer("bob-key"))
    assert statuses(exc.value) == (403, grpc.StatusCode.PERMISSION_DENIED)
    assert exc.value.message == "tenant 'bob' may not use the metadata API"
    with pytest.raises(AccessDenied):  # alice has the default groups: no administration
        access.http.admit(ApiGroup.LOGGING, "", bearer("alice-key"))


def test_an_unseen_model_answers_as_an_unknown_one(access: AccessControl):
    with pytest.raises(NotFound) as exc:
        access.http.admit(ApiGroup.INFERENCE, "secret", bearer("alice-key"))
    assert exc.value.message == "Request for unknown model: 'secret' is not found"
    assert access.http.admit(ApiGroup.INFERENCE, "exact", bearer("alice-key")).visible
    assert access.http.admit(ApiGroup.INFERENCE, "add_sub", bearer("alice-key")).visible
    # health and model-repository requests get a grant saying so: the frontend answers as unknown
    assert not access.http.admit(ApiGroup.HEALTH, "secret", bearer("alice-key")).visible


def test_server_health_is_open_but_model_health_needs_a_key(access: AccessControl):
    assert access.http.admit(ApiGroup.HEALTH, "", {}).tenant is None
    with pytest.raises(AccessDenied):
        access.http.admit(ApiGroup.HEALTH, "add_sub", {})


def test_closed_health_needs_a_key(tmp_path: Path):
    path = tmp_path / "auth.json"
    path.write_text(f'{{"open_health": false, "tenants": {{"t": {{"keys": ["{digest("k")}"]}}}}}}')
    control = access_from_flags([], [], str(path))
    with pytest.raises(AccessDenied):
        control.http.admit(ApiGroup.HEALTH, "", {})
    assert control.http.admit(ApiGroup.HEALTH, "", bearer("k")).tenant.name == "t"


# -- limits -----------------------------------------------------------------------------------------


def test_a_tenant_over_its_rate_gets_429_with_retry_after(access: AccessControl):
    for _ in range(2):  # the burst
        access.http.admit(ApiGroup.INFERENCE, "add_sub", bearer("alice-key")).release()
    with pytest.raises(AccessDenied) as exc:
        access.http.admit(ApiGroup.INFERENCE, "add_sub", bearer("alice-key"))
    assert statuses(exc.value) == (429, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "tenant 'alice' is over its rate limit of 10 requests/s (burst 2)" in exc.value.message
    assert http_headers(exc.value) == (("retry-after", "1"),)
    # bob is not slowed by alice: his own budget
    access.http.admit(ApiGroup.INFERENCE, "add_sub", bearer("bob-key")).release()
    assert access.limits.counts["alice", "admitted"] == 2
    assert access.limits.counts["alice", "rate_limited"] == 1


def test_concurrent_requests_are_limited_until_one_is_released(access: AccessControl):
    first = access.http.admit(ApiGroup.INFERENCE, "m", bearer("bob-key"))
    with pytest.raises(AccessDenied) as exc:
        access.grpc.admit(ApiGroup.INFERENCE, "m", {"triton-grpc-protocol-k": "v", **bearer("bob-key")})
    assert statuses(exc.value)[0] == 429
    assert "tenant 'bob' already has 1 requests in flight (its limit is 1)" in exc.value.message
    first.release()
    access.http.admit(ApiGroup.INFERENCE, "m", bearer("bob-key")).release()
    assert access.limits.states["bob"].in_flight == 0


def test_token_bucket_refills_at_its_rate():
    bucket = TokenBucket(rate=100.0, burst=1.0)
    assert bucket.take() == 0.0
    wait = bucket.take()
    assert 0.0 < wait <= 0.01
    time.sleep(0.02)
    assert bucket.take() == 0.0


def test_counters_are_exposed_per_tenant(access: AccessControl):
    access.http.admit(ApiGroup.INFERENCE, "add_sub", bearer("alice-key")).release()
    families = {f.name: f for f in access.collect()}
    samples = {
        (s.labels["tenant"], s.labels["outcome"]): s.value for s in families["inferd_tenant_requests_total"].samples
    }
    assert samples == {("alice", "admitted"): 1}


# -- the key file -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "text", "message"),
    [
        (".yaml", "tenants:\n  a:\n    keys: [x\n", ":4: not valid YAML"),
        (".json", '{"tenants": {"a": }}', ":1: not valid JSON"),
        (".yaml", "tenants: []\n", ":1: expected a mapping with 'tenants"),
        (".yaml", "tenants:\n  a:\n    keys: [abc]\n", ":2: tenant 'a': key 'abc...' is not a sha256 hex digest"),
        (".yaml", f"tenants:\n  a:\n    keys: [{digest('k')}]\n    apis: [bogus]\n", "unknown restricted api 'bogus'"),
        (".yaml", f"tenants:\n  a:\n    keys: [{digest('k')}]\n    rate: -1\n", "'rate' must be a number > 0"),
        (".yaml", f"tenants:\n  a:\n    keys: [{digest('k')}]\n    model: [x]\n", "unknown field 'model'"),
        (".yaml", f"tenants:\n  a:\n    keys: [{digest('k')}]\n  b:\n    keys: [{digest('k')}]\n", "also tenant 'a''s"),
    ],
)
def test_a_malformed_key_file_names_file_and_line(tmp_path: Path, suffix, text, message):
    path = tmp_path / f"auth{suffix}"
    path.write_text(text)
    with pytest.raises(AuthConfigError) as exc:
        KeyFile(path)
    assert str(exc.value).startswith(str(path))
    assert message in str(exc.value)


def test_a_missing_key_file_is_an_error(tmp_path: Path):
    with pytest.raises(AuthConfigError, match="cannot read the auth config"):
        KeyFile(tmp_path / "none.yaml")


def _touch(path: Path, text: str) -> None:
    stat = path.stat()
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_key_file_changes_apply_and_a_bad_change_keeps_the_old_keys(tmp_path: Path, caplog):
    path = tmp_path / "auth.yaml"
    path.write_text(f"tenants:\n  a:\n    keys: [{digest('one')}]\n")
    keys = KeyFile(path)
    assert digest("one") in keys.current().by_digest
    _touch(path, f"tenants:\n  a:\n    keys: [{digest('two')}]\n")
    assert keys.reload_if_changed()
    assert set(keys.current().by_digest) == {digest("two")}
    with caplog.at_level(logging.ERROR, logger="inferd.auth"):
        _touch(path, "tenants: [\n")
        assert not keys.reload_if_changed()
    assert set(keys.current().by_digest) == {digest("two")}
    assert "auth config not reloaded, the previous keys stay in force" in caplog.text
    assert f"{path}:" in caplog.text


def test_a_key_is_stored_as_the_sha256_hex_digest_the_docs_tell_operators_to_compute():
    """docs/security.md: ``printf %s "$KEY" | sha256sum`` (the FIPS 180-2 test vector for "abc")."""
    assert digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_parse_config_defaults():
    config = parse_config(Path("x.yaml"), f"tenants:\n  a:\n    keys: [{digest('k')}]\n")
    tenant = config.tenants["a"]
    assert config.open_health and tenant.models == ("*",) and tenant.rate is None and tenant.concurrency is None
    assert ApiGroup.INFERENCE in tenant.apis and ApiGroup.MODEL_REPOSITORY not in tenant.apis
