"""The call page: one call's facts, its per-node decisions, its bodies and copy-out.

A full-object call carries thousands of Node objects, tens of kB each, and a combined call
repeats them in each backend's part: shown inline, a 5,000-node combined filter made a 3.3 MB
page that took 1.3 s to build (every body restored from the node store and indented), while
its answer to "which backend refused node X, and why" (the replies' FailedNodes) sat past the
256 KiB cut, out of sight. So the page leads with the decisions (per backend the counts by
reason, then each node's verdicts, paged and searchable by node name), and shows a body inline
only when it is small and holds no Node objects; any other body is loaded on demand into the
page (`?body=request|response[&part=<id>]`, an htmx fragment of this same route) and can be
downloaded whole, as before.
"""
from __future__ import annotations

import zlib
from typing import Any

import msgspec
from django.core.paginator import Paginator
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import render

from extproxy import bodyformat, copyout
from extproxy.api.bodies import MAX_ID, object_or_404
from extproxy.bodies import not_called_reason, request_of, response_of
from extproxy.models import BackendCall, Call, ReplayRun
from extproxy.recording import blobs
from extproxy.roles import Perm, requires

from . import queries
from .views import named_like, node_search

bodies_required = requires(Perm.VIEW_BODIES)  # the call page shows bodies

INLINE_BYTES = 32 * 1024  # a body without Node objects up to this size is shown with the page
NODE_PAGE = 100  # node rows per page of the decisions table
REASONS_SHOWN = 20  # per backend, the most frequent reasons; the node table has every one
CURL_MAX_BYTES = 1024 * 1024  # a larger request's curl command is taken from the link


def _body_context(body) -> dict:
    text, cut, note = body.pretty()
    return {"text": text, "cut": cut, "note": note, "size": len(body.data), "exact": body.exact, "marks": body.marks}


def stored_shape(stored: bytes | memoryview | None) -> tuple[int, int] | None:
    """(bytes stored literally, Node objects referenced) of a stored body, read without
    fetching a Node object from the node store; None when the stored form cannot be read
    (then the body is restored, which says what is wrong with it)."""
    try:
        data = blobs.decompress(bytes(stored or b""))
        if data.startswith(bodyformat.SPLICED_MARK):
            pieces, _marks = msgspec.msgpack.decode(data[1:])
            return sum(len(p) for p in pieces if isinstance(p, bytes)), sum(1 for p in pieces if isinstance(p, str))
        if data.startswith(blobs.COMPACT_MARK):  # Node items as {"$node": sha256}
            return len(data) - 1, data.count(b'"$node"')
        return max(0, len(data) - 1), 0
    except (zlib.error, msgspec.DecodeError, TypeError, ValueError):
        return None


def _shown(call: Call | BackendCall, which: str, url: str) -> dict:
    """A body for the page: restored and indented when small, else what loads it from `url`."""
    shape = stored_shape(call.request_body if which == "request" else call.response_body)
    if shape is None or (shape[1] == 0 and shape[0] <= INLINE_BYTES):
        body = request_of(call) if which == "request" else response_of(call)
        return dict(_body_context(body), inline=True)
    return {"inline": False, "literal": shape[0], "node_objects": shape[1], "url": f"{url}body={which}"}


def _decisions(request, record: Call) -> dict[str, Any] | HttpResponseBadRequest:
    search = node_search(request)
    if isinstance(search, HttpResponseBadRequest):
        return search
    nodes, backends, verdicts = queries.node_verdicts([record])
    matching = named_like(nodes, search)
    page = Paginator(matching, NODE_PAGE).get_page(request.GET.get("page"))
    summary = queries.reason_summary([record]) if record.verb == "filter" else []
    for entry in summary:  # thousands of distinct reasons would bury the page: the table has them all
        entry["more_reasons"] = max(0, len(entry.get("reasons", [])) - REASONS_SHOWN)
        entry["reasons"] = sorted(entry.get("reasons", []), key=lambda r: -r["count"])[:REASONS_SHOWN]
    return {
        "node_search": search,
        "node_backends": backends,
        "node_total": len(nodes),
        "node_matching": len(matching),
        "node_page": page,
        "node_rows": [{"node": n, "cells": [verdicts[n].get(b) for b in backends]} for n in page.object_list],
        "summary": summary,
    }


def _body_fragment(request, record: Call):
    """One body of the call or of one of its parts, for the page to show on demand."""
    which = request.GET["body"]
    if which not in ("request", "response"):
        return HttpResponseBadRequest("body: request or response", content_type="text/plain")
    owner: Call | BackendCall = record
    if "part" in request.GET:
        text = request.GET["part"]
        number = int(text) if text.isascii() and text.isdecimal() and len(text) <= 19 else None
        part = record.backend_calls.filter(pk=number).first() if number is not None and number <= MAX_ID else None
        if part is None:
            raise Http404(f"call {record.pk} has no part {text[:40]!r}")
        owner = part
    body = request_of(owner) if which == "request" else response_of(owner)
    download = f"/api/calls/{record.pk}/" + (f"backend-calls/{owner.pk}/" if owner is not record else "") + which
    return render(request, "dashboard/_call_body.html",
                  {"body": _body_context(body), "which": which, "download": download})


@bodies_required
def call(request, pk: int):
    record = object_or_404(Call, pk=pk)
    if "body" in request.GET:
        return _body_fragment(request, record)
    decisions = _decisions(request, record)
    if isinstance(decisions, HttpResponseBadRequest):
        return decisions
    if request.htmx and request.htmx.target == "call-nodes":
        return render(request, "dashboard/_call_nodes.html", dict(decisions, call=record))
    url = copyout.original_url(record, request.build_absolute_uri("/"))
    here = f"/calls/{record.pk}/?"
    request_shown = _shown(record, "request", here)
    parts = []
    for part in record.backend_calls.all() if record.form == "combined" else ():
        reason = not_called_reason(part)
        parts.append({"call": part, "not_called": reason,
                      "request": {} if reason else _shown(part, "request", f"{here}part={part.pk}&"),
                      "response": {} if reason else _shown(part, "response", f"{here}part={part.pk}&")})
    curl = ""
    if url and request_shown["inline"] and request_shown["size"] <= CURL_MAX_BYTES:
        curl = copyout.curl_command(request_of(record), url)
    context = dict(
        decisions,
        call=record,
        json=record.to_json(decisions=False),
        request_body=request_shown,
        response_body=_shown(record, "response", here),
        parts=parts,
        curl=curl,
        curl_url=url,
        can_replay=request.user.has_perm(Perm.REPLAY_CALLS),
        replays=ReplayRun.objects.filter(items__original=record).distinct()[:20],
    )
    return render(request, "dashboard/call.html", context)
