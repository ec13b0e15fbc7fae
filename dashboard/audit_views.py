"""The audit trail page (auditors): events newest first, filtered like /api/audit/, with links
that export the same selection (CSV, JSON Lines), the recent exports with their manifests, and
the latest gaps in the records (calls dropped or pruned, audit events pruned, each said for what
it is: what makes an export of its kind incomplete).

Read-only; bad filter values are shown on the page, never a 500. Rendering is autoescaped:
actors, targets and details are text someone else chose.
"""
from __future__ import annotations

import json
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.shortcuts import render

from extproxy.api.filters import AuditFilter
from extproxy.audit import TEXTS, readable
from extproxy.gaps import kind_of
from extproxy.models import AuditEvent, Export, RecordingGap
from extproxy.roles import Perm, requires

PAGE = 100
GAPS_SHOWN = 20  # the latest gaps; all of them: /api/gaps/


@requires(Perm.VIEW_AUDIT)
def audit(request):
    params = {k: v for k, v in request.GET.items() if k in AuditFilter.base_filters and v}
    filterset = AuditFilter(params, queryset=AuditEvent.objects.all())
    errors = {} if filterset.is_valid() else {k: " ".join(v) for k, v in filterset.errors.items()}
    events = filterset.qs if not errors else AuditEvent.objects.none()
    page = Paginator(events.order_by("-at", "-id"), PAGE).get_page(request.GET.get("page"))
    rows = [_row(e) for e in page.object_list]
    query = urlencode(params)
    context = {
        "page": page,
        "rows": rows,
        "filters": {k: request.GET.get(k, "") for k in AuditFilter.base_filters},
        "errors": errors,
        "query": query,
        "export_links": {fmt: f"/api/audit/export/?{urlencode(dict(params, format=fmt))}" for fmt in ("csv", "ndjson")},
        "exports": Export.objects.order_by("-started_at", "-id")[:20] if request.user.has_perm(Perm.EXPORT_CALLS) else [],
        "gaps": [{"gap": g, "kind": kind_of(g.reason)}
                 for g in RecordingGap.objects.order_by("-first_at", "-id")[:GAPS_SHOWN]],
    }
    return render(request, "dashboard/audit.html", context)


def _row(event: AuditEvent) -> dict:
    """An event as the page shows it: its texts readable (an event stored with a lone surrogate
    shows "?", as exports write it), its detail as JSON text."""
    shown = {name: readable(getattr(event, name)) for name in TEXTS}
    shown["detail"] = json.dumps(shown["detail"], sort_keys=True, ensure_ascii=False) if shown["detail"] else ""
    return {"event": event, **shown}
