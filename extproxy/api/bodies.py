"""API: a call's bodies, its curl command and its fixture; a filtered set of fixtures.

    GET /api/calls/<id>/request     the request as received (?pretty=1, ?download=1)
    GET /api/calls/<id>/response    the backend's response as received
    GET /api/calls/<id>/backend-calls/<bc>/request|response   one backend's part (combined)
    GET /api/calls/<id>/curl        a runnable curl command (?url= another target)
    GET /api/calls/<id>/fixture     the call as a JSON test fixture
    GET /api/fixtures/?<filters>    fixtures of the calls /api/calls/ would list, JSON Lines

Bodies can hold what pods carry (redacted secrets aside): every route needs view_bodies
(the developer role). Headers on bodies: `X-Extproxy-Exact` (true: the bytes as received), `X-Extproxy-Marks` (what
differs: redactions, lost nodes; JSON list, at most 20). Thin: the work is in bodies/copyout.
"""
from __future__ import annotations

import json
from typing import Iterator

from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import api_view, permission_classes

from .. import copyout
from ..audit import Action, audit
from ..bodies import Body, not_called_reason, request_of, response_of
from ..redaction import url_without_password
from ..models import BackendCall, Call
from ..roles import Perm
from .filters import CallFilter, filter_calls
from .permissions import needs

CanViewBodies = needs(Perm.VIEW_BODIES)

MAX_MARK_HEADERS = 20
MAX_ID = 2**63 - 1  # larger ids cannot be in the database (and SQLite cannot even be asked)
TRUE = ("1", "true", "yes", "on")


def object_or_404(model, **lookup):
    """get_object_or_404, with an id too large for the database a 404 too."""
    if any(isinstance(v, int) and v > MAX_ID for v in lookup.values()):
        raise Http404(f"no such {model.__name__}")
    return get_object_or_404(model, **lookup)


def flag(params, name: str) -> bool:
    return (params.get(name) or "").lower() in TRUE
FIXTURE_SET_LIMIT = 100_000  # calls per /api/fixtures/ answer; narrow the filters for more


def body_response(body: Body, name: str, params) -> HttpResponse:
    if flag(params, "pretty"):
        text, _, _ = body.pretty(limit=len(body.data))
        response = HttpResponse(text.encode(), content_type="application/json; charset=utf-8")
    else:
        response = HttpResponse(body.data, content_type="application/json")
    response["X-Extproxy-Exact"] = "true" if body.exact else "false"
    response["X-Extproxy-Marks"] = json.dumps(body.marks[:MAX_MARK_HEADERS])
    if body.status is not None:
        response["X-Extproxy-Backend-Status"] = str(body.status)
    if flag(params, "download"):
        response["Content-Disposition"] = f'attachment; filename="{name}.json"'
    return response


BODY_PARAMETERS = [
    OpenApiParameter("pretty", bool, description="indented JSON"),
    OpenApiParameter("download", bool, description="as an attachment"),
]


def _call_body(request, pk: int, which: str):
    call = object_or_404(Call, pk=pk)
    body = request_of(call) if which == "request" else response_of(call)
    audit(request, Action.BODIES_DOWNLOADED, target=f"call {pk} {which}", detail={"part": which})
    return body_response(body, f"call-{pk}-{which}", request.query_params)


def _backend_call_body(request, pk: int, bc: int, which: str):
    part = object_or_404(BackendCall, pk=bc, call_id=pk)
    if reason := not_called_reason(part):
        # Empty bytes marked exact would read as "the backend was sent nothing and answered nothing".
        raise Http404(f"extproxy did not call backend {part.backend}, so there is no {which}: {reason}")
    body = request_of(part) if which == "request" else response_of(part)
    audit(request, Action.BODIES_DOWNLOADED, target=f"call {pk} backend call {bc} {which}",
          detail={"part": which, "backend": part.backend})
    return body_response(body, f"call-{pk}-{part.backend}-{which}", request.query_params)


def _body_view(operation_id: str, function, which: str):
    """One API view per route (each its own operationId in the schema)."""

    def view(request, **kwargs):
        return function(request, which=which, **kwargs)

    view.__name__ = operation_id
    schema = extend_schema(operation_id=operation_id, responses={(200, "application/json"): bytes}, parameters=BODY_PARAMETERS)
    return schema(api_view(["GET"])(permission_classes([CanViewBodies])(view)))


call_request = _body_view("call_request_retrieve", _call_body, "request")
call_response = _body_view("call_response_retrieve", _call_body, "response")
backend_call_request = _body_view("backend_call_request_retrieve", _backend_call_body, "request")
backend_call_response = _body_view("backend_call_response_retrieve", _backend_call_body, "response")


@extend_schema(operation_id="call_curl_retrieve", 
    responses={(200, "text/plain"): str},
    parameters=[OpenApiParameter("url", str, description="send it here instead of the original backend")],
)
@api_view(["GET"])
@permission_classes([CanViewBodies])
def call_curl(request, pk: int):
    call = object_or_404(Call, pk=pk)
    url = request.query_params.get("url") or copyout.original_url(call, request.build_absolute_uri("/"))
    if not url:
        return HttpResponse(
            f"backend {call.backend!r} is not configured now (or lacks the verb): give ?url=",
            status=400, content_type="text/plain; charset=utf-8",
        )
    # one given as ?url= too: the audit trail, read by auditors, keeps no password
    audit(request, Action.COPY_OUT, target=f"call {call.pk}", detail={"as": "curl", "url": url_without_password(url)})
    comment = f"extproxy call {call.pk}: {call.verb} {call.backend} {call.pod_namespace}/{call.pod_name} at {call.started_at.isoformat()}"
    return HttpResponse(copyout.curl_command(request_of(call), url, comment), content_type="text/plain; charset=utf-8")


@extend_schema(operation_id="call_fixture_retrieve", responses={200: dict})
@api_view(["GET"])
@permission_classes([CanViewBodies])
def call_fixture(request, pk: int):
    call = object_or_404(Call, pk=pk)
    audit(request, Action.COPY_OUT, target=f"call {call.pk}", detail={"as": "fixture"})
    response = HttpResponse(json.dumps(copyout.fixture(call), indent=1), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="call-{pk}.fixture.json"'
    return response


def _fixture_lines(queryset) -> Iterator[bytes]:
    for call in queryset.iterator(chunk_size=100):
        yield json.dumps(copyout.fixture(call)).encode() + b"\n"


@extend_schema(operation_id="fixtures_list", 
    responses={(200, "application/x-ndjson"): str},
    parameters=[OpenApiParameter(name, str, description=f.extra.get("help_text") or "")
                for name, f in CallFilter.base_filters.items()],
)
@api_view(["GET"])
@permission_classes([CanViewBodies])
def fixtures(request):
    queryset = filter_calls(Call.objects.order_by("started_at", "id"), request.query_params)[:FIXTURE_SET_LIMIT]
    audit(request, Action.COPY_OUT, target="fixture set", detail={"as": "fixtures", "filters": dict(request.query_params.items())})
    response = StreamingHttpResponse(_fixture_lines(queryset), content_type="application/x-ndjson")
    response["Content-Disposition"] = 'attachment; filename="extproxy-fixtures.jsonl"'
    return response
