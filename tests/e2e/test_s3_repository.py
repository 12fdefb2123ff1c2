"""Model repositories in S3 object storage, served from a real S3 API server (moto's server mode).

Each test starts ``moto_server`` on a free port, uploads models with boto3 and points a real
``inferd serve`` at ``s3://127.0.0.1:PORT/bucket/prefix``, as Triton spells an S3-compatible store.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from inferd.testing import ServerProcess, free_port
from tests.e2e import models
from tests.lazy import lazy_import
from tests.triton_clients import add_sub_call, repository_index
from tests.waiting import wait_for

boto3 = lazy_import("boto3", skip="boto3 comes with inferd's s3 extra (make install)")
lazy_import("moto", skip="moto[server] is a test dependency (requirements-dev.txt)")

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
POLL = ["--model-control-mode=poll", "--repository-poll-secs=0.5"]


class S3Server:
    """``moto_server`` in a subprocess; ``auth`` makes it check credentials as AWS does."""

    def __init__(self, tmp: Path, auth: bool = False) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **CREDENTIALS, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if auth else {})}
        moto = Path(sys.executable).with_name("moto_server")
        with open(tmp / f"moto-{self.port}.log", "ab") as log:  # the child keeps its own copy
            self.proc = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(self.port)], env=env,
                                         stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        wait_for(self._up, timeout=60, what="moto_server")
        self.client = boto3.client("s3", endpoint_url=self.endpoint, **_boto_credentials())

    def _up(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                return True
        except OSError:
            return False

    def url(self, bucket: str, prefix: str = "") -> str:
        """The repository's URL as Triton writes an S3-compatible store."""
        return f"s3://127.0.0.1:{self.port}/{bucket}" + (f"/{prefix}" if prefix else "")

    def upload(self, bucket: str, prefix: str, repository: dict[str, dict[str, str]]) -> None:
        for name, files in repository.items():
            for rel, text in files.items():
                self.client.put_object(Bucket=bucket, Key=f"{prefix}/{name}/{rel}".lstrip("/"), Body=text.encode())

    def delete(self, bucket: str, prefix: str, name: str) -> None:
        listed = self.client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{name}/")
        for item in listed.get("Contents", []):
            self.client.delete_object(Bucket=bucket, Key=item["Key"])

    def reset(self) -> None:
        """Every bucket disappears at once (moto's reset API)."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST"), timeout=5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def _boto_credentials() -> dict[str, str]:
    return {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


@pytest.fixture
def s3(tmp_path) -> Iterator[S3Server]:
    server = S3Server(tmp_path)
    yield server
    server.stop()


def inferd(tmp_path: Path, url: str, args: list[str], env: dict[str, str] | None = None) -> ServerProcess:
    return ServerProcess([], ["--model-repository", url, *args], env={**CREDENTIALS, **(env or {})},
                         log_path=tmp_path / "inferd.log")  # fmt: skip


def serve_fails(url: str, args: list[str] = (), env: dict[str, str] | None = None) -> str:
    """Run ``inferd serve`` that must exit with an error; its output."""
    cmd = [sys.executable, "-m", "inferd.host.cli", "serve", "--model-repository", url,
           "--http-port", str(free_port()), "--grpc-port", str(free_port()), "--metrics-port", str(free_port()), *args]  # fmt: skip
    done = subprocess.run(
        cmd, env={**os.environ, **CREDENTIALS, **(env or {})}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0, done.stdout + done.stderr
    return done.stderr


def grpc_add_sub(url: str, model: str) -> np.ndarray:
    client = grpcclient.InferenceServerClient(url)
    a = np.array([[1, 2, 3, 4]], np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [1, 4], "FP32"), grpcclient.InferInput("INPUT1", [1, 4], "FP32")]
    for i in inputs:
        i.set_data_from_numpy(a)
    try:
        return client.infer(model, inputs).as_numpy("OUTPUT0")
    finally:
        client.close()


def test_poll_mode_picks_up_changes_in_the_bucket_under_traffic(s3, tmp_path):
    s3.client.create_bucket(Bucket="models")
    s3.upload("models", "repo/v1", {"add_sub": models.add_sub(offset=0), "late": models.add_sub(offset=1000)})
    srv = inferd(tmp_path, s3.url("models", "repo/v1"), POLL).start()
    failures: list[str] = []
    sent = [0]
    stop = threading.Event()

    def traffic() -> None:
        client = httpclient.InferenceServerClient(srv.http_url)
        while not stop.is_set():
            try:
                add_sub_call(client, "add_sub")  # must never fail while it is being reloaded
                sent[0] += 1
            except Exception as exc:
                failures.append(repr(exc))

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        client = httpclient.InferenceServerClient(srv.http_url)
        np.testing.assert_array_equal(add_sub_call(client, "add_sub"), [[2, 4, 6, 8]])
        np.testing.assert_array_equal(grpc_add_sub(srv.grpc_url, "late"), [[1002, 1004, 1006, 1008]])

        # a new version uploaded: the policy (latest 1) switches to it
        s3.upload("models", "repo/v1", {"add_sub": {"2/model.py": models.add_sub_py(10)}})
        wait_for(lambda: client.get_model_metadata("add_sub")["versions"] == ["2"], what="version 2")
        np.testing.assert_array_equal(add_sub_call(client, "add_sub"), [[12, 14, 16, 18]])

        # a changed config
        config = models.ADD_SUB_CONFIG.replace("max_batch_size: 8", "max_batch_size: 3")
        s3.upload("models", "repo/v1", {"add_sub": {"config.pbtxt": config}})
        wait_for(lambda: client.get_model_config("add_sub")["max_batch_size"] == 3, what="changed config")

        # a broken upload keeps the old version serving, its reason in the index
        s3.upload("models", "repo/v1", {"add_sub": {"2/model.py": models.BROKEN_PY}})
        wait_for(lambda: "cannot import" in repository_index(client)[("add_sub", "2")][1], what="failed reload")
        s3.upload("models", "repo/v1", {"add_sub": {"2/model.py": models.add_sub_py(20)}})
        wait_for(lambda: add_sub_call(client, "add_sub")[0, 0] == 22, what="repaired model")

        # a removed model
        s3.delete("models", "repo/v1", "late")
        # not ready first, then (once its unload is done) out of the index: wait for the end state
        wait_for(lambda: "late" not in {name for name, _ in repository_index(client)}, what="removal")
        assert not client.is_model_ready("late")
        with pytest.raises(InferenceServerException):
            add_sub_call(client, "late")
    finally:
        stop.set()
        worker.join()
        srv.stop()
    assert sent[0] > 10
    assert failures == [], failures[:5]


def test_a_bucket_that_disappears_keeps_the_models_serving(s3, tmp_path):
    s3.client.create_bucket(Bucket="models")
    s3.upload("models", "", {"add_sub": models.add_sub(offset=0)})
    url = s3.url("models")
    with inferd(tmp_path, url, POLL) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert repository_index(client)[("add_sub", "1")] == ("READY", "")

        s3.reset()  # the bucket is deleted
        wait_for(lambda: repository_index(client)[("add_sub", "1")][1] != "", what="reason in the index")
        state, reason = repository_index(client)[("add_sub", "1")]
        assert state == "READY" and reason.startswith(f"failed to poll model repository '{url}': NoSuchBucket"), reason
        np.testing.assert_array_equal(add_sub_call(client, "add_sub"), [[2, 4, 6, 8]])
        assert client.is_server_ready()
        grpc = grpcclient.InferenceServerClient(srv.grpc_url)
        (row,) = grpc.get_model_repository_index(as_json=True)["models"]
        assert (row["state"], row["reason"]) == ("READY", reason)
        grpc.close()

        s3.client.create_bucket(Bucket="models")  # back, with a new version
        s3.upload("models", "", {"add_sub": models.add_sub(offset=5, versions=(1,))})
        # A poll between the bucket's creation and the upload's end sees an empty repository (or a model
        # without its version) and unloads the model: a 404 until the next poll, then the new version.
        wait_for(lambda: _answers(client, 7), what="bucket back")
        assert repository_index(client)[("add_sub", "1")] == ("READY", "")

        s3.stop()  # the server goes away
        wait_for(lambda: "Could not connect" in repository_index(client)[("add_sub", "1")][1], what="unreachable store")
        np.testing.assert_array_equal(grpc_add_sub(srv.grpc_url, "add_sub"), [[7, 9, 11, 13]])
    log = (tmp_path / "inferd.log").read_text()
    assert f"failed to poll model repository '{url}': NoSuchBucket" in log
    assert "Traceback" not in log


def test_explicit_mode_loads_from_the_bucket(s3, tmp_path):
    s3.client.create_bucket(Bucket="models")
    s3.upload("models", "a/b", {"add_sub": models.add_sub(offset=0), "other": models.add_sub(offset=100)})
    args = ["--model-control-mode=explicit", "--load-model=add_sub"]
    with inferd(tmp_path, s3.url("models", "a/b/"), args) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert not client.is_model_ready("other")
        client.load_model("other")
        np.testing.assert_array_equal(add_sub_call(client, "other"), [[102, 104, 106, 108]])
        s3.upload("models", "a/b", {"other": {"1/model.py": models.add_sub_py(200)}})
        client.load_model("other")
        np.testing.assert_array_equal(add_sub_call(client, "other"), [[202, 204, 206, 208]])

        s3.reset()
        with pytest.raises(InferenceServerException) as err:
            client.load_model("other")
        assert "failed to poll model repository" in str(err.value) and "NoSuchBucket" in str(err.value)
        np.testing.assert_array_equal(add_sub_call(client, "other"), [[202, 204, 206, 208]])


def test_a_missing_bucket_at_start_up(s3, tmp_path):
    url = s3.url("nobucket", "models")
    err = serve_fails(url)
    assert f"failed to poll model repository '{url}': NoSuchBucket" in err, err

    # --exit-on-error=false: the server starts, and loads the models once the bucket exists
    args = [*POLL, "--exit-on-error=false", "--strict-readiness=false"]
    with inferd(tmp_path, url, args) as srv:
        client = httpclient.InferenceServerClient(srv.http_url)
        assert client.get_model_repository_index() == []
        s3.client.create_bucket(Bucket="nobucket")
        s3.upload("nobucket", "models", {"add_sub": models.add_sub(offset=0)})
        wait_for(lambda: client.is_model_ready("add_sub"), what="models in the new bucket")


def test_wrong_credentials(tmp_path):
    server = S3Server(tmp_path, auth=True)
    try:
        url = server.url("models")
        err = serve_fails(url, env={"AWS_ACCESS_KEY_ID": "nobody", "AWS_SECRET_ACCESS_KEY": "wrong"})
        assert f"failed to poll model repository '{url}': InvalidAccessKeyId" in err, err
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://", "model repository 's3://': no bucket name (expected s3://[host:port/]bucket/path)"),
        (
            "s3://https://bucket/path",
            "model repository 's3://https://bucket/path': 'https://' must be followed by host:port",
        ),
        (
            "ftp://host/models",
            "model repository 'ftp://host/models': unsupported scheme 'ftp://' (inferd reads s3:// URLs)",
        ),
    ],
)
def test_bad_urls_are_refused_naming_the_url(url, expected):
    assert f"error: {expected}" in serve_fails(url)


def _answers(client: httpclient.InferenceServerClient, first: float) -> bool:
    """Whether ``add_sub`` serves and its first output is ``first``; False while it is not served."""
    try:
        return bool(add_sub_call(client, "add_sub")[0, 0] == first)
    except InferenceServerException as exc:
        if exc.status() != "404":
            raise
        return False
