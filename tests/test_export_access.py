"""Who may read an export's manifest: whoever may make an export of its kind (view_audit for
the audit trail, export_calls for decision logs); another kind's manifest is not found."""
from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from extproxy.exportsigning import verify_here as verify
from tests.test_api_strict import traffic
from tests.test_export import auditor

pytestmark = pytest.mark.django_db


def holding(name: str, *codenames: str) -> APIClient:
    user = User.objects.create_user(name, password="pw")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="extproxy", codename__in=codenames))
    return APIClient(HTTP_AUTHORIZATION="Token " + Token.objects.create(user=user).key)


def export(client: APIClient, path: str) -> tuple[bytes, str]:
    response = client.get(path)
    assert response.status_code == 200, response.content
    return b"".join(response.streaming_content), response["X-Export-Id"]


def test_view_audit_alone_exports_the_audit_trail_and_reads_its_manifest():
    traffic()
    trail = holding("olga", "view_audit")
    body, export_id = export(trail, "/api/audit/export/?format=csv")
    response = trail.get(f"/api/export/{export_id}/manifest/")
    assert response.status_code == 200, response.content  # was 403
    assert verify(io.BytesIO(body), response.json()).ok
    _, calls_id = export(auditor(), "/api/export/?format=ndjson")
    assert trail.get(f"/api/export/{calls_id}/manifest/").status_code == 404  # calls: not its kind


def test_export_calls_alone_reads_calls_manifests_only():
    traffic()
    exporter = holding("eve", "export_calls", "view_calls")
    _, calls_id = export(exporter, "/api/export/?format=ndjson")
    assert exporter.get(f"/api/export/{calls_id}/manifest/").status_code == 200
    _, audit_id = export(auditor(), "/api/audit/export/?format=ndjson")
    assert exporter.get(f"/api/export/{audit_id}/manifest/").status_code == 404
    assert holding("vic", "view_calls").get(f"/api/export/{calls_id}/manifest/").status_code == 403
