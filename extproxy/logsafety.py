"""Keeps tokens and passwords out of every log line the process writes, and bounds what a
client's text can add to one.

A log-record factory (installed once, from the app's ready()) passes each record's string
arguments, and its message, through `redaction.redact_text` with the default rules: so a
websocket URL `/ws/live/?token=...` that uvicorn logs, an `Authorization: Token ...` header in
an error, or `password=...` in a message comes out as `[redacted]`, whichever logger wrote it
and whatever handler or formatter prints it. Arguments are scrubbed one by one so formatters
that unpack them (uvicorn's access log) keep working. Tracebacks are not redacted.

Then each string argument is cut to MAX_ARGUMENT_CHARS, and the message, and each line of a
traceback, to MAX_MESSAGE_CHARS, with a marker saying how many characters were cut. A path, a
query or a header value reaches a log line as an argument (Django's "Not Found: %s", uvicorn's
access log) or inside an exception's message (Django's DisallowedHost quotes the Host header in
its message and again in its traceback). Before, a 60 kB path wrote 60 kB to the log on every
404, and a 60 kB Host header 240 kB, from anyone, without logging in.
"""
from __future__ import annotations

import logging
import traceback
from typing import Any

from .config import RedactionConfig
from .redaction import redact_text

_RULES = RedactionConfig()
# A scheduler's or a browser's path, a backend's name, an error's reason fit; the rest is cut.
MAX_ARGUMENT_CHARS = 1000
# A message may quote several arguments, or one a client sent (an exception's text).
MAX_MESSAGE_CHARS = 4000


def cut(text: str, bound: int) -> str:
    if len(text) <= bound:
        return text
    return f"{text[:bound]}...[{len(text) - bound} characters cut]"


def _scrub(value: Any) -> Any:
    return cut(redact_text(value, _RULES), MAX_ARGUMENT_CHARS) if isinstance(value, str) else value


def _bounded_traceback(record: logging.LogRecord) -> None:
    """Renders the record's traceback now, each line cut, when its exception's text is over the
    bound (formatters print record.exc_text as it is when it is set)."""
    exc_info = record.exc_info
    if not exc_info or exc_info[1] is None or record.exc_text:
        return
    try:
        if len(str(exc_info[1])) <= MAX_MESSAGE_CHARS:
            return
    except Exception:  # an exception whose str() fails: the formatter copes with it as before
        return
    lines = "".join(traceback.format_exception(*exc_info)).rstrip("\n").split("\n")
    record.exc_text = "\n".join(cut(line, MAX_MESSAGE_CHARS) for line in lines)


def scrub_record(record: logging.LogRecord) -> logging.LogRecord:
    if isinstance(record.args, tuple):
        record.args = tuple(_scrub(a) for a in record.args)
    elif isinstance(record.args, dict):
        record.args = {k: _scrub(v) for k, v in record.args.items()}
    msg = record.msg if isinstance(record.msg, str) else str(record.msg)
    if redact_text(msg, _RULES) != msg or len(msg) > MAX_MESSAGE_CHARS:
        # The template itself names a secret (`"token=%s"`), or is itself long (a message made
        # with client text in it): format first, then scrub and cut the line.
        try:
            msg = msg % record.args if record.args else msg
        except (TypeError, ValueError, KeyError):
            pass
        record.msg, record.args = cut(redact_text(msg, _RULES), MAX_MESSAGE_CHARS), None
    _bounded_traceback(record)
    return record


def install() -> None:
    previous = logging.getLogRecordFactory()
    if getattr(previous, "extproxy_scrubs", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return scrub_record(previous(*args, **kwargs))

    factory.extproxy_scrubs = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
