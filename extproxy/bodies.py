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

import msgspec

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


# How the combined form words the finding (combined.py); the pages and the API say "not called"
# themselves, so the reason they show is what follows it.
_NOT_CALLED = "extproxy did not call this backend: "


def not_called_reason(part: BackendCall) -> str:
    """Why extproxy never called this backend in a combined call, or "" when it did. Such a
    part has no request and no reply: its empty bodies are not "the bytes as received"."""
    for finding in part.findings or ():
        if isinstance(finding, dict) and finding.get("kind") == "not-called":
            why = str(finding.get("detail") or "").removeprefix(_NOT_CALLED).strip()
            return why or "no reason was recorded"  # never "", which would read as "called"
    return ""


def request_of(call: Call | BackendCall) -> Body:
    return _restore(call.request_body)


def response_of(call: Call | BackendCall) -> Body:
    return _restore(call.response_body, call.http_status)


class _Binding(msgspec.Struct, forbid_unknown_fields=True):
    """ExtenderBindingArgs in the scheduler's own form: its exact keys, strings."""

    PodName: str = ""
    PodNamespace: str = ""
    PodUID: str = ""
    Node: str = ""


def bind_target(stored: bytes) -> str | None:
    """The node a bind's stored request names, read as the scheduler's decoder reads it; None
    when it cannot be read (a raw record of bytes that are no binding). A bind carries no Node
    object, so nothing is loaded from the node store. Must not raise: an export reads it for
    each bind, and one record must not end a file mid-stream."""
    from .protocol import decode_binding_args

    try:
        body = restore(bytes(stored), lambda shas: {}).body
        fast = _plain_bind_target(body)
        return fast if fast is not None else decode_binding_args(body).node
    except (ValueError, RecursionError, zlib.error, IndexError, KeyError, TypeError):
        return None


def _plain_bind_target(body: bytes) -> str | None:
    """The node of a binding in the scheduler's own form (_Binding, no escapes), read directly;
    None for any other form, which the Go-faithful decoder reads (keys in any case, escapes,
    null and invalid UTF-8 as Go reads them: 50 µs a bind, this 1 µs)."""
    if b"\\" in body:
        return None
    try:
        return msgspec.json.decode(body, type=_Binding).Node
    except ValueError:
        return None
