"""The recorded bodies of a call, read back: request and response as they were received.

Reads a Call's (or BackendCall's) stored bodies and restores them through the recorder's
storage (`recorder.restore`), with the Node objects put back from the node store. What
redaction removed stays removed; `Body.marks` names it. Also the pretty form for pages.

Reads only; never writes a record, never decides what was redacted.
"""
from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Iterable

from .models import BackendCall, Call, NodeObject
from .recorder import restore

NODE_CHUNK = 500  # shas per query: SQLite's variable limit, and bounded memory per query
PRETTY_LIMIT = 256 * 1024  # bytes of a body a page shows; the download has the rest
# What reading a stored body as JSON raises: not JSON, or nested deeper than the decoder (or the
# encoder) recurses. The recorder keeps both (a raw record, or just under its own limit), so a
# page or a download must show such a body as text, never fail on it.
NOT_JSON = (ValueError, RecursionError)
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


@dataclass
class Body:
    data: bytes
    exact: bool  # the bytes as received (nothing redacted, nothing lost)
    marks: list[str] = field(default_factory=list)
    status: int | None = None  # the HTTP status this body came with (responses)

    @property
    def is_json(self) -> bool:
        try:
            json.loads(self.data)
        except NOT_JSON:
            return False
        return True

    def pretty(self, limit: int = PRETTY_LIMIT) -> tuple[str, bool, str]:
        """Indented JSON (or the text as received), whether it was cut at `limit`, and why JSON
        could not be indented ("" when it was, or when the bytes are no JSON at all)."""
        text = self.data[:limit].decode("utf-8", "replace")
        if len(self.data) > limit:
            return text, True, ""
        try:
            text = json.dumps(json.loads(self.data), indent=2, ensure_ascii=False)
        except RecursionError:
            return text, False, "nested too deep to indent here: shown as received"
        except ValueError:
            pass
        return escape_surrogates(text), False, ""


def escape_surrogates(text: str) -> str:
    """`text` with each lone UTF-16 surrogate written as its JSON escape (\\ud800).

    A JSON body may escape half a surrogate pair; json.loads makes it a str that UTF-8 cannot
    encode, so the page or the download would fail. The escape is what the body said, and
    it only occurs inside JSON strings, where it stays valid JSON."""
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def load_nodes(shas: Iterable[str]) -> dict[str, bytes]:
    """Node objects by key, from the node store."""
    wanted = list(shas)
    found: dict[str, bytes] = {}
    for start in range(0, len(wanted), NODE_CHUNK):
        rows = NodeObject.objects.filter(sha256__in=wanted[start : start + NODE_CHUNK]).values_list("sha256", "data")
        for sha, data in rows:
            found[sha] = zlib.decompress(bytes(data))
    return found


def _restore(stored: bytes, status: int | None = None) -> Body:
    restored = restore(bytes(stored), load_nodes)
    return Body(restored.body, restored.exact, list(restored.marks), status)


def request_of(call: Call | BackendCall) -> Body:
    return _restore(call.request_body)


def response_of(call: Call | BackendCall) -> Body:
    return _restore(call.response_body, call.http_status)
