"""Export endpoints: `GET /api/export/?format=ndjson|csv` (decision logs, the calls filters),
`GET /api/audit/export/?format=...` (the audit trail, its filters), and
`GET /api/export/<export_id>/manifest/` (the signed manifest, once the file was sent).

Views stay thin: extproxy/export.py builds the records, the chain and the manifest. Under ASGI
the body is an async iterator (served from the event loop chunk by chunk); elsewhere a plain
generator. The export is in the audit trail before its first byte goes out. since and until
are read as meant (RangeAsMeant, exporttimes.py) before the filters read them.
"""
from __future__ import annotations

import datetime as dt

from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from .. import export, exportsigning, exportstream, exporttimes
from ..audit import Action, audit, source_of
from ..models import AuditEvent, Call, Export
from ..roles import Perm
from .filters import AuditFilter, ExportCallFilter, StrictFilterBackend
from .permissions import needs, needs_one_of

CONTENT_TYPES = {"ndjson": "application/x-ndjson", "csv": "text/csv; charset=utf-8"}
ACCEPT = {"application/x-ndjson": "ndjson", "application/jsonl": "ndjson", "text/csv": "csv"}
FORMAT_PARAMETER = OpenApiParameter(
    "format", OpenApiTypes.STR, enum=list(CONTENT_TYPES), description="ndjson (default) or csv; or send Accept"
)


class FormatFromQuery(DefaultContentNegotiation):
    """Errors are JSON; the export's own format comes from ?format= or Accept (read by the view),
    so an unknown format is a 400 naming it rather than DRF's 404."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def chosen_format(request) -> str:
    fmt = request.query_params.get("format")
    if fmt is None:
        accept = request.META.get("HTTP_ACCEPT", "")
        fmt = next((f for media, f in ACCEPT.items() if media in accept), "ndjson")
    if fmt not in CONTENT_TYPES:
        raise ValidationError({"format": [f"must be one of {', '.join(CONTENT_TYPES)}"]})
    return fmt


class RangeAsMeant(StrictFilterBackend):
    """The filters read since and until as meant (exporttimes.py: digits past the microsecond
    rounded up, a `+` sent unencoded read as `+`); the manifest records them so."""

    def get_filterset_kwargs(self, request, queryset, view):
        kwargs = super().get_filterset_kwargs(request, queryset, view)
        try:
            changed = exporttimes.range_as_meant(kwargs["data"])
        except exporttimes.TimeProblem as exc:
            raise ValidationError({exc.field: [str(exc)]}) from None
        if changed:
            data = kwargs["data"].copy()  # a QueryDict: setting a key replaces all its values
            for name, value in changed.items():
                data[name] = value
            kwargs["data"] = data
        return kwargs


class _ExportView(generics.GenericAPIView):
    kind = ""
    filter_backends = [RangeAsMeant]
    extra_query_params = ("format",)
    renderer_classes = [JSONRenderer]
    content_negotiation_class = FormatFromQuery
    pagination_class = None

    def get(self, request, *args, **kwargs):
        fmt = chosen_format(request)
        try:  # before the first byte: a manifest that cannot be signed would leave a file without proof
            exportsigning.private_key()
        except exportsigning.SigningKeyError as exc:
            return Response({"detail": f"exports are refused until the signing key is mended: {exc}"}, status=503)
        filterset = RangeAsMeant().filterset(request, self.get_queryset(), self)
        cleaned = filterset.form.cleaned_data
        since, until = cleaned.get("since"), cleaned.get("until") or timezone.now()
        since, until = (since.astimezone(dt.timezone.utc) if since else None), until.astimezone(dt.timezone.utc)
        problem = export.range_problem(since, until)
        if problem is not None:
            raise ValidationError({"until": [problem]})
        end = {f"{self.time_field}__lt": until}  # a fixed end: what "now" was
        queryset = filterset.qs.filter(**end)
        unindexed = getattr(filterset, "unindexed", None)
        run = export.ExportRun(
            kind=self.kind, fmt=fmt, filters=dict(filterset.data.items()), since=since, until=until,
            user=request.user.get_username(), source=source_of(request),
            unindexed_calls=None if unindexed is None else unindexed.filter(**end),
        )
        audit(request, Action.EXPORT if self.kind == "calls" else Action.AUDIT_EXPORT,
              target=f"{self.kind} as {fmt}", detail={"export_id": run.export_id, "filters": run.filters})
        if self.kind == "calls":
            records = export.call_records(queryset, run.tally, cleaned.get("node") or None)
        else:
            records = export.audit_records(queryset, run.tally)
        chunks = exportstream.stream(run, records)
        body = exportstream.as_async(chunks, run) if isinstance(request._request, ASGIRequest) else chunks
        response = StreamingHttpResponse(body, content_type=CONTENT_TYPES[fmt])
        stamp = run.started_at.strftime("%Y%m%dT%H%M%SZ")
        response["Content-Disposition"] = f'attachment; filename="extproxy-{self.kind}-{stamp}.{fmt}"'
        response["X-Export-Id"] = run.export_id
        response["Link"] = f'</api/export/{run.export_id}/manifest/>; rel="describedby"'
        return response


@extend_schema(parameters=[FORMAT_PARAMETER], responses={(200, "text/csv"): OpenApiTypes.STR,
                                                         (200, "application/x-ndjson"): OpenApiTypes.STR})
class CallExportView(_ExportView):
    """Decision logs: one record per decision, one per call without decisions; hash-chained."""

    kind = "calls"
    time_field = "started_at"
    queryset = Call.objects.all()
    filterset_class = ExportCallFilter
    permission_classes = [needs(Perm.EXPORT_CALLS)]


@extend_schema(parameters=[FORMAT_PARAMETER], responses={(200, "text/csv"): OpenApiTypes.STR,
                                                         (200, "application/x-ndjson"): OpenApiTypes.STR})
class AuditExportView(_ExportView):
    """The audit trail, exported with the same chain and manifest."""

    kind = "audit"
    time_field = "at"
    queryset = AuditEvent.objects.all()
    filterset_class = AuditFilter
    permission_classes = [needs(Perm.VIEW_AUDIT)]


class ManifestView(generics.GenericAPIView):
    """The signed manifest of a finished export (409 while it runs or if it never finished)."""

    # Whoever may make an export of a kind may read its manifests: a principal with view_audit
    # alone exports the audit trail and must be able to prove it.
    permission_classes = [needs_one_of(Perm.EXPORT_CALLS, Perm.VIEW_AUDIT)]
    renderer_classes = [JSONRenderer]
    pagination_class = None
    permission_of_kind = {"calls": Perm.EXPORT_CALLS, "audit": Perm.VIEW_AUDIT}

    @extend_schema(responses={200: OpenApiResponse(description="the signed manifest (JSON)"), 409: None})
    def get(self, request, export_id: str):
        row = Export.objects.filter(export_id=export_id).first()
        if row is None:
            raise NotFound("no export with this id")
        if not request.user.has_perm(self.permission_of_kind.get(row.kind, Perm.EXPORT_CALLS)):
            raise NotFound("no export with this id")  # one it could not have made: not even that it exists
        if row.manifest is None:
            return Response({"detail": "this export has not finished (or was interrupted): no manifest"}, status=409)
        return Response(row.manifest)
