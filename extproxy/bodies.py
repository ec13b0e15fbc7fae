"""The recorded bodies of a call, read back: request and response as they were received.

Reads a Call's (or BackendCall's) stored bodies and restores them through the recorder's
storage (`recorder.restore`), with the Node objects put back from the node store. What
redaction removed stays removed; `Body.marks` names it. Also the pretty form for pages.

Reads only; never writes a record, never decides what was redacted.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Iterable

from .models import BackendCall, Call, NodeObject
from .recorder import restore

NODE_CHUNK = 500  # shas per query: SQLite's variable limit, and bounded memory per query
PRETTY_LIMIT = 256 * 1024  # bytes of a body a page shows; the download has the rest


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
        except ValueError:
            return False
        return True

    def pretty(self, limit: int = PRETTY_LIMIT) -> tuple[str, bool]:
        """Indented JSON (or the text as received) and whether it was cut at `limit`."""
        text = self.data[:limit].decode("utf-8", "replace")
        if len(self.data) <= limit:
            try:
                text = json.dumps(json.loads(self.data), indent=2, ensure_ascii=False)
            except ValueError:
                pass
            return text, False
        return text, True


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
