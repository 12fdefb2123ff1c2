"""How ``--model-repository`` URLs for object storage are read (Triton's spelling)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from inferd.repository.object_store import S3Location, is_url, parse_s3_url


@pytest.mark.parametrize(
    ("url", "endpoint", "bucket", "prefix"),
    [
        ("s3://bucket", None, "bucket", ""),
        ("s3://bucket/", None, "bucket", ""),
        ("s3://bucket/path/to/repo", None, "bucket", "path/to/repo/"),
        ("s3://bucket//path//repo/", None, "bucket", "path/repo/"),
        ("s3://localhost:9000/bucket/models", "http://localhost:9000", "bucket", "models/"),
        ("s3://10.0.0.5:80/bucket", "http://10.0.0.5:80", "bucket", ""),
        ("s3://http://minio.local:9000/b/p", "http://minio.local:9000", "b", "p/"),
        ("s3://https://minio.local:9443/b/p/q", "https://minio.local:9443", "b", "p/q/"),
    ],
)
def test_s3_urls_as_triton_spells_them(url, endpoint, bucket, prefix):
    assert parse_s3_url(url) == S3Location(url, endpoint, bucket, prefix)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "no bucket name"),
        ("s3://host:9000", "no bucket name"),
        ("s3://https://bucket/path", "'https://' must be followed by host:port"),
        ("gs://bucket/path", "unsupported scheme 'gs://'"),
    ],
)
def test_bad_urls_name_the_url(url, message):
    with pytest.raises(ValueError, match=f"^model repository '{re.escape(url)}': ") as err:
        parse_s3_url(url)
    assert message in str(err.value)


def test_what_counts_as_a_url():
    assert is_url("s3://bucket") and is_url("gs://b/p")
    assert not is_url("/models") and not is_url("relative/dir")


def test_without_boto3_the_error_names_the_extra():
    code = (
        "import sys; sys.modules['boto3'] = None\n"
        "from inferd.host.cli import main\n"
        # one process: the one whose boto3 import is blocked (workers would import it afresh)
        "sys.exit(main(['serve', '--model-repository', 's3://bucket/models', '--workers', '1']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert (
        "error: model repository 's3://bucket/models': reading s3:// repositories needs boto3; "
        "install the extra: pip install 'inferd[s3]'"
    ) in done.stderr, done.stderr
