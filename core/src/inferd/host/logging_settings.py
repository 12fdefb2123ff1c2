"""Log settings: Triton's logging extension applied live to Python logging.

Python logging is process-wide, so these settings are too (:data:`SETTINGS`). They own one handler
on the root logger (the console, or ``--log-file``), whose filter applies ``log_info`` /
``log_warning`` / ``log_error`` / ``log_verbose_level`` and whose formatter writes Triton's line
layouts::

    default:  I1129 10:30:57.801325 18421 dataplane.py:120] [request id: r7] message
    ISO8601:  2025-11-29T10:30:57Z I 18421 dataplane.py:120] [request id: r7] message

``[request id: ...]`` appears on lines logged while a request is handled (:data:`REQUEST_ID`).
``--log-format json`` (inferd's own) writes one JSON object per line instead, for log pipelines::

    {"time": "2025-11-29T10:30:57.801325Z", "level": "INFO", "logger": "inferd.engine.router", "message": "...",
     "request_id": "r7", "model": "add_sub", "pid": 18421, "file": "router.py:120"}

``request_id`` and ``model`` are null outside requests; a traceback is in ``exception``.

Text a request controls (model names, ids, header values) reaches messages, so every format
escapes control characters (C0, DEL, C1, U+2028/2029): ``\n`` becomes the two characters ``\n``,
ESC ``\x1b``, so one request cannot start a forged log line or drive a terminal. A traceback keeps
its line breaks, each of its lines indented, so no line of it can pass for a log line; so does a
:data:`BLOCK` (the start-up summary), whose text is escaped before its lines are joined.
Verbose level *n* is Python level ``DEBUG - (n - 1)``: level 1 shows ``log.debug``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from typing import Any

from inferd.contracts.errors import InvalidArgument, Unsupported
from inferd.contracts.log_context import REQUEST_ID, REQUEST_MODEL

FORMATS = ("default", "ISO8601", "json")
_OWNED = "_inferd_log_handler"

# Control characters a log line must not carry raw: C0 (but TAB), DEL, C1, and the Unicode line
# and paragraph separators some viewers break lines at.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def escape_controls(text: str) -> str:
    """``text`` with its control characters written as escapes (``\\n``, ``\\x1b``); the common
    case, text without any, is one regex scan and returns ``text`` itself."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escape_one, text)


#: ``extra=`` for a message that is a block of lines, each built from escaped text (the start-up
#: summary): its line breaks are kept, each line escaped and the lines after the first indented.
BLOCK = {"inferd_block": True}


def _message(record: logging.LogRecord) -> str:
    """The record's message, escaped; a :data:`BLOCK` keeps its line breaks."""
    message = record.getMessage()
    if getattr(record, "inferd_block", False):
        return "\n  ".join(escape_controls(line) for line in message.split("\n"))
    return escape_controls(message)


def _traceback_lines(text: str) -> str:
    """A traceback, its lines indented and each escaped: none can pass for a log line."""
    return "\n".join("    " + escape_controls(line) for line in text.split("\n"))


class TritonFormatter(logging.Formatter):
    """Triton's log line layout, in UTC, with the request id when there is one."""

    def __init__(self, log_format: str = "default") -> None:
        super().__init__()
        self.iso = log_format == "ISO8601"
        self.pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        level = "E" if record.levelno >= logging.ERROR else "W" if record.levelno >= logging.WARNING else "I"
        t = time.gmtime(record.created)
        if self.iso:
            head = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', t)} {level}"
        else:
            head = f"{level}{time.strftime('%m%d %H:%M:%S', t)}.{int(record.created % 1 * 1e6):06d}"
        rid = REQUEST_ID.get()
        prefix = f"[request id: {rid}] " if rid else ""
        line = escape_controls(f"{head} {self.pid} {record.filename}:{record.lineno}] {prefix}") + _message(record)
        if record.exc_info:
            line += "\n" + _traceback_lines(self.formatException(record.exc_info))
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, request id, model."""

    def __init__(self) -> None:
        super().__init__()
        self.pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        t = time.gmtime(record.created)
        line: dict[str, Any] = {
            "time": f"{time.strftime('%Y-%m-%dT%H:%M:%S', t)}.{int(record.created % 1 * 1e6):06d}Z",
            "level": record.levelname
            if record.levelno >= logging.INFO
            else f"VERBOSE{logging.DEBUG - record.levelno + 1}",
            "logger": record.name,
            "message": _message(record),
            "request_id": escape_controls(REQUEST_ID.get()) or None,
            "model": escape_controls(REQUEST_MODEL.get()) or None,
            "pid": self.pid,
            "file": f"{record.filename}:{record.lineno}",
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class LevelFilter(logging.Filter):
    """Passes a record when its kind (error, warning, info, verbose level n) is switched on."""

    def __init__(self, settings: LogSettings) -> None:
        super().__init__()
        self.settings = settings

    def filter(self, record: logging.LogRecord) -> bool:
        s, n = self.settings, record.levelno
        if n >= logging.ERROR:
            return s.log_error
        if n >= logging.WARNING:
            return s.log_warning
        if n >= logging.INFO:
            return s.log_info
        return logging.DEBUG - n + 1 <= s.log_verbose_level


class LogSettings:
    """The server's log settings, in Triton's names, and the handler that applies them."""

    def __init__(self) -> None:
        self.log_file = ""
        self.log_info = True
        self.log_warning = True
        self.log_error = True
        self.log_verbose_level = 0
        self.log_format = "default"
        self._handler: logging.Handler | None = None
        self._lock = threading.Lock()

    def as_json(self) -> dict[str, Any]:
        """Triton's JSON (the gRPC frontend maps bool / int / str to its oneof)."""
        return {
            "log_file": self.log_file,
            "log_info": self.log_info,
            "log_warning": self.log_warning,
            "log_error": self.log_error,
            "log_verbose_level": self.log_verbose_level,
            "log_format": self.log_format,
        }

    def update(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Apply a log-settings request (only the named settings change) and return them all."""
        if not isinstance(settings, dict):
            raise InvalidArgument("log settings request must be a JSON object")
        parsed = {name: _parse(name, value) for name, value in settings.items() if value is not None}
        with self._lock:
            for name, value in parsed.items():
                setattr(self, name, value)
            self.apply()
        return self.as_json()

    def configure(self, values: dict[str, Any]) -> None:
        """Start-up values (command line names: log_file, log_info, ..., log_verbose)."""
        with self._lock:
            self.log_file = values.get("log_file") or ""
            for name in ("log_info", "log_warning", "log_error"):
                if values.get(name) is not None:
                    setattr(self, name, bool(values[name]))
            self.log_verbose_level = int(values.get("log_verbose") or 0)
            fmt = values.get("log_format") or "default"
            self.log_format = _parse("log_format", fmt)
            self.apply()

    def apply(self) -> None:
        """Install (or update) the handler on the root logger; replaces the plain console
        handler ``logging.basicConfig`` made, and leaves every other handler alone."""
        root = logging.getLogger()
        handler = self._handler
        target = self.log_file or "<stderr>"
        if handler is None or getattr(handler, _OWNED) != target:
            new = _make_handler(self.log_file)
            setattr(new, _OWNED, target)
            new.addFilter(LevelFilter(self))
            for h in list(root.handlers):
                if h is handler or _is_plain_console(h):
                    root.removeHandler(h)
                    if h is handler:
                        h.close()
            root.addHandler(new)
            self._handler = handler = new
        handler.setFormatter(JsonFormatter() if self.log_format == "json" else TritonFormatter(self.log_format))
        v = self.log_verbose_level
        root.setLevel(logging.DEBUG - (v - 1) if v > 0 else logging.INFO)


def _make_handler(path: str) -> logging.Handler:
    if path:
        try:
            return logging.FileHandler(path, mode="a", encoding="utf-8")
        except OSError as exc:
            raise InvalidArgument(f"cannot open log file '{path}': {exc.strerror}") from None
    return logging.StreamHandler(sys.stderr)


def _is_plain_console(h: logging.Handler) -> bool:
    return type(h) is logging.StreamHandler and getattr(h, "stream", None) in (sys.stderr, sys.stdout)


#: The largest ``log_verbose_level`` (Triton keeps it in an int32, and wraps larger values).
MAX_VERBOSE_LEVEL = (1 << 31) - 1


def _parse(name: str, value: Any) -> Any:
    if name in ("log_info", "log_warning", "log_error"):
        if not isinstance(value, bool):
            raise InvalidArgument(
                f"attempt to access JSON non-boolean as boolean (log setting '{name}' must be a boolean, got {value!r})"
            )
        return value
    if name == "log_verbose_level":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(
                "attempt to access JSON non-unsigned-integer as unsigned-integer "
                f"(log setting 'log_verbose_level' must be an integer >= 0, got {value!r})"
            )
        if value > MAX_VERBOSE_LEVEL:
            raise InvalidArgument(f"log setting 'log_verbose_level' must be at most {MAX_VERBOSE_LEVEL}, got {value}")
        return value
    if name == "log_format":
        if not isinstance(value, str):
            raise InvalidArgument(
                f"attempt to access JSON non-string as string (log setting 'log_format' must be a string, got {value!r})"
            )
        if value not in FORMATS:
            raise InvalidArgument(f"invalid argument for log_format, got: {value}; expected one of {list(FORMATS)}")
        return value
    if name == "log_file":
        raise Unsupported("log file location can not be updated through network protocol")
    raise InvalidArgument(
        f"unknown log setting '{name}'; known settings: log_file, log_info, log_warning, log_error, "
        f"log_verbose_level, log_format"
    )


#: The process's log settings (Python logging is process-wide).
SETTINGS = LogSettings()


def configure_logging(values: dict[str, Any]) -> LogSettings:
    """Configure process logging from command-line values; returns :data:`SETTINGS`."""
    SETTINGS.configure(values)
    return SETTINGS
