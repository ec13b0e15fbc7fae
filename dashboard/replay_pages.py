"""Dashboard pages of the replay lane: one call with its bodies and copy-out.

The call page shows what the scheduler sent and what came back (pretty, cut at
bodies.PRETTY_LIMIT, with downloads of the whole bodies), what redaction changed, each
backend's part of a combined call, and the call as curl and as a fixture. Thin: the work is in
extproxy.bodies and extproxy.copyout; rendering is autoescaped.
"""
from __future__ import annotations

from django.shortcuts import get_object_or_404, render

from extproxy import copyout
from extproxy.bodies import request_of, response_of
from extproxy.models import Call
from extproxy.roles import Perm, requires

bodies_required = requires(Perm.VIEW_BODIES)  # the call page shows bodies
replay_required = requires(Perm.REPLAY_CALLS)


def _body_context(body) -> dict:
    text, cut = body.pretty()
    return {"text": text, "cut": cut, "size": len(body.data), "exact": body.exact, "marks": body.marks}


@bodies_required
def call(request, pk: int):
    record = get_object_or_404(Call, pk=pk)
    request_body = request_of(record)
    url = copyout.original_url(record, request.build_absolute_uri("/"))
    parts = []
    for part in record.backend_calls.all() if record.form == "combined" else ():
        parts.append({"call": part, "request": _body_context(request_of(part)), "response": _body_context(response_of(part))})
    context = {
        "call": record,
        "json": record.to_json(decisions=False),
        "request_body": _body_context(request_body),
        "response_body": _body_context(response_of(record)),
        "parts": parts,
        "curl": copyout.curl_command(request_body, url) if url and len(request_body.data) <= 1024 * 1024 else "",
        "curl_url": url,
    }
    return render(request, "dashboard/call.html", context)
