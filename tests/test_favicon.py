"""/favicon.ico, which browsers ask for on every page that names no icon (a JSON answer of the
API opened in a browser, the admin), is the dashboard's icon, to anyone: it was a 404."""
from __future__ import annotations

from django.templatetags.static import static
from django.test import Client


def test_the_icon_browsers_ask_for_is_the_dashboards(db):
    answer = Client().get("/favicon.ico")
    assert answer.status_code == 301 and answer["Location"] == static("dashboard/favicon.svg")
