"""Copy a recorded call out: a runnable `curl` command, and a JSON fixture for test suites.

The curl command sends the restored request body byte for byte (read from standard input, so
a 15 MB full-mode body is no command-line argument) to the call's backend as configured now,
or to a URL the developer chooses. The fixture is one JSON object per call, the shape
`manage.py replay --fixtures` reads back:

    {"extproxy_fixture": 1, "call": {...the API's call JSON...},
     "target": {"backend", "verb_string", "url", "node_cache_capable", "weight"},
     "request": <JSON> | "request_base64": "...", "response": {"status", "body" | "body_base64"},
     "decisions": [...], "redactions": [...], "backend_calls": [...]}

Reads only. It does not send anything (replay does).
"""
from __future__ import annotations

import base64
import json
import shlex
from typing import Any

from .bodies import NOT_JSON, Body, escape_surrogates, request_of, response_of
from .config import BackendConfig
from .models import Call
from .redaction import url_without_password

FIXTURE_VERSION = 1


def configured_backend(name: str) -> BackendConfig | None:
    from .engine import get_engine

    return get_engine().config.backend(name)


def original_url(call: Call, proxy_base: str = "") -> str | None:
    """Where the call went: its backend's URL for the verb as configured now (combined calls:
    this proxy's combined endpoint under `proxy_base`); None when that is not known. A password
    in the URL is replaced: the URL is shown, copied out and audited, and none of those may
    carry the backend's credentials."""
    if call.form == "combined":
        return f"{proxy_base.rstrip('/')}/extender/{call.verb}" if proxy_base else None
    backend = configured_backend(call.backend)
    if backend is None or not backend.url_prefix or not backend.verb_string(call.verb):
        return None
    return url_without_password(backend.url_for(backend.verb_string(call.verb)))


def _is_text(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any(ch < " " and ch not in "\n\r\t" for ch in text)


def curl_command(body: Body, url: str, comment: str = "") -> str:
    """A shell command (sh or bash) that POSTs `body` exactly as stored to `url`."""
    lines = [f"# {line}" for line in comment.splitlines() if line]
    if body.marks:
        lines.append(f"# not the exact bytes received: {'; '.join(body.marks[:5])}"
                     + (f" (and {len(body.marks) - 5} more)" if len(body.marks) > 5 else ""))
    curl = f"curl -sS -X POST -H 'Content-Type: application/json' --data-binary @- {shlex.quote(url)}"
    if _is_text(body.data):
        # printf is a shell builtin: no argument-length limit for a large body.
        lines.append(f"printf '%s' {shlex.quote(body.data.decode('utf-8'))} | {curl}")
    else:  # bytes a shell string cannot carry (a raw record of an undecodable call)
        encoded = base64.b64encode(body.data).decode()
        lines.append(f"printf '%s' {encoded} | base64 -d | {curl}")
    return "\n".join(lines) + "\n"


def _json_or_base64(data: bytes, key: str) -> dict[str, Any]:
    try:
        return {key: json.loads(data)}
    except NOT_JSON:  # not JSON, or nested too deep to decode (a raw record): as base64
        return {f"{key}_base64": base64.b64encode(data).decode()}


def _target(call: Call) -> dict[str, Any]:
    backend = None if call.form == "combined" else configured_backend(call.backend)
    if backend is None:
        return {"backend": call.backend, "verb_string": call.verb, "url": None}
    return {
        "backend": backend.name,
        "verb_string": backend.verb_string(call.verb),
        "url": original_url(call),
        "node_cache_capable": backend.node_cache_capable,
        "weight": backend.weight,
    }


def fixture(call: Call) -> dict[str, Any]:
    """The call as a self-contained test fixture (bodies restored, decisions as recorded)."""
    request, response = request_of(call), response_of(call)
    data: dict[str, Any] = {"extproxy_fixture": FIXTURE_VERSION, "call": call.to_json(), "target": _target(call)}
    data.update(_json_or_base64(request.data, "request"))
    data["response"] = {"status": call.http_status, **_json_or_base64(response.data, "body")}
    data["decisions"] = call.decisions()
    data["redactions"] = request.marks + [f"response: {m}" for m in response.marks]
    if call.form == "combined":
        data["backend_calls"] = [
            {
                "backend": bc.backend,
                "verb": bc.verb,
                "outcome": bc.outcome,
                "http_status": bc.http_status,
                "error": bc.error,
                **_json_or_base64(request_of(bc).data, "request"),
                "response": {"status": bc.http_status, **_json_or_base64(response_of(bc).data, "body")},
            }
            for bc in call.backend_calls.all()
        ]
    return data


def fixture_request_bytes(data: dict[str, Any]) -> bytes:
    """The request body a fixture holds (JSON re-encoded compactly, or the base64 bytes)."""
    if "request_base64" in data:
        return base64.b64decode(data["request_base64"])
    # A lone surrogate escape (\ud800) stays an escape: UTF-8 cannot encode it as text.
    return escape_surrogates(json.dumps(data["request"], separators=(",", ":"), ensure_ascii=False)).encode()
