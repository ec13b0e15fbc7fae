"""Keeps tokens and passwords out of every log line the process writes.

A log-record factory (installed once, from the app's ready()) passes each record's string
arguments, and its message, through `redaction.redact_text` with the default rules: so a
websocket URL `/ws/live/?token=...` that uvicorn logs, an `Authorization: Token ...` header in
an error, or `password=...` in a message comes out as `[redacted]`, whichever logger wrote it
and whatever handler or formatter prints it. Arguments are scrubbed one by one so formatters
that unpack them (uvicorn's access log) keep working. Tracebacks are not rewritten.
"""
from __future__ import annotations

import logging
from typing import Any

from .config import RedactionConfig
from .redaction import redact_text

_RULES = RedactionConfig()


def _scrub(value: Any) -> Any:
    return redact_text(value, _RULES) if isinstance(value, str) else value


def scrub_record(record: logging.LogRecord) -> logging.LogRecord:
    if isinstance(record.args, tuple):
        record.args = tuple(_scrub(a) for a in record.args)
    elif isinstance(record.args, dict):
        record.args = {k: _scrub(v) for k, v in record.args.items()}
    msg = record.msg if isinstance(record.msg, str) else str(record.msg)
    if redact_text(msg, _RULES) != msg:
        # The template itself names a secret (`"token=%s"`): format first, then scrub the line.
        try:
            msg = msg % record.args if record.args else msg
        except (TypeError, ValueError, KeyError):
            pass
        record.msg, record.args = redact_text(msg, _RULES), None
    return record


def install() -> None:
    previous = logging.getLogRecordFactory()
    if getattr(previous, "extproxy_scrubs", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return scrub_record(previous(*args, **kwargs))

    factory.extproxy_scrubs = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
