"""Log lines as Triton's own QA (``qa/L0_logging/log_format_test.py``) parses them, against a real
``inferd serve`` with ``--log-format default`` and ``--log-format ISO8601``: every record of an error,
a warning and the information lines matches Triton's record pattern, its fields are valid, and its
message is one inferd does not quote (Triton's layout with ``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0``;
see "Differences from Triton" in docs/configuration.md).
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.e2e import models
from tests.servers import Servers

# Triton's record patterns, as its QA writes them (qa/L0_logging/log_format_test.py, 2.51); lines
# observed from Triton 2.51 that they parse:
#   E1206 01:27:52.186853 22510 server.cc:241] "CudaDriverHelper has not been initialized."
#   2026-12-06T01:32:17Z E 699 model_lifecycle.cc:642] "failed to load 'boom' version 1: ..."
DEFAULT_RECORD = re.compile(
    r"(?P<level>\w)(?P<month>\d{2})(?P<day>\d{2}) (?P<timestamp>\d{2}:\d{2}:\d{2}\.\d{6}) (?P<pid>\d+) "
    r"(?P<file>[\w\.]+):(?P<line>\d+)] (?P<message>.*)",
    re.DOTALL,
)
ISO8601_RECORD = re.compile(
    r"(?P<ISO8601_timestamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) (?P<level>\w+) (?P<pid>\d+) "
    r"(?P<file>.+):(?P<line>\d+)] (?P<message>.*)",
    re.DOTALL,
)
TABLE_BORDER = re.compile(r"^\+[-+]+\+$")
TABLE_ROW = re.compile(r"^\| (?P<row>.*?) \|$")
WARNS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pb_utils.Logger.log_warn("a warning from initialize")
        pb_utils.Logger.log_error("an error from initialize")

    def execute(self, requests):
        return []
"""


def _records(text: str, pattern: re.Pattern[str]) -> list[str]:
    """The log's records as QA groups them: a line the pattern finds starts one, the others continue it."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if pattern.search(line) or not records:
            records.append([line])
        else:
            records[-1].append(line)
    return ["\n".join(lines) for lines in records]


def _check_table(lines: list[str]) -> None:
    assert TABLE_BORDER.search(lines[0]) and TABLE_ROW.search(lines[1]) and TABLE_BORDER.search(lines[2])
    header = len(TABLE_ROW.search(lines[1]).group("row").split("|"))  # type: ignore[union-attr]
    for line in lines[3:]:
        row = TABLE_ROW.search(line)
        assert row is None or len(row.group("row").split("|")) == header, line
    assert TABLE_BORDER.search(lines[-1])


def _check(record: str, pattern: re.Pattern[str]) -> str:
    """QA's validators for one record (the unescaped ones); its level."""
    match = pattern.search(record)
    assert match, f"not a log record: {record[:300]!r}"
    fields = match.groupdict()
    assert fields["level"] in {"E", "W", "I"}, record
    if "month" in fields:
        assert 1 <= int(fields["month"]) <= 12 and 1 <= int(fields["day"]) <= 31
        hours, minutes, seconds = fields["timestamp"].split(":")
        datetime.timedelta(hours=int(hours), minutes=int(minutes), seconds=float(seconds))
    else:
        datetime.datetime.fromisoformat(fields["ISO8601_timestamp"].rstrip("Z"))
    assert fields["pid"].isdigit() and fields["line"].isdigit() and Path(fields["file"]).name
    heading, *rest = fields["message"].split("\n")
    if heading:
        with pytest.raises(json.JSONDecodeError):
            json.loads(heading)
    if rest and TABLE_BORDER.search(rest[0]):
        _check_table(rest)
    return fields["level"]


@pytest.mark.parametrize(("log_format", "pattern"), [("default", DEFAULT_RECORD), ("ISO8601", ISO8601_RECORD)])
def test_every_record_parses_as_triton_qa_parses_it(
    serve: Servers, tmp_path: Path, log_format: str, pattern: re.Pattern[str]
) -> None:
    log_file = tmp_path / "server.log"
    repo = {"add_sub": models.add_sub(), "warns": models.simple(models.ADD_SUB_CONFIG, WARNS)}
    flags = [f"--log-format={log_format}", f"--log-file={log_file}", "--log-verbose=1"]
    with serve(repo, *flags) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        client.is_model_ready("add_sub")
        client.close()
    records = _records(log_file.read_text(), pattern)
    levels = {_check(record, pattern) for record in records}
    assert levels == {"E", "W", "I"}, levels
    assert any("a warning from initialize" in r for r in records)
