"""The backends page's time labels: uPlot's own time axes said "1:45pm" (12-hour) beside the
heatmap's "13:45" and the rest of the dashboard's 24-hour UTC times (the live feed's clock, the
pages' "Y-m-d H:i:s"). Every time label on the page, in each of its windows, is now HH:MM in
24-hour UTC. Debian's chromium through Playwright, real traffic through the real proxy."""
from __future__ import annotations

import re

import pytest

from tests.test_dashboard_browser import log_in
from tests.test_dashboard_traffic import per_backend_attempt, scene  # noqa: F401 (fixture)
from tests.test_live_browser import browser_page, viewer_login  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

CLOCK = re.compile(r"(?:[01]\d|2[0-3]):[0-5]\d")  # 24-hour HH:MM, as the feed shows its times


def test_every_time_label_on_the_backends_page_is_24_hour(scene, viewer_login, browser_page):
    page = browser_page
    per_backend_attempt(scene, "trainer-a")
    per_backend_attempt(scene, "trainer-b")
    scene.flush()
    log_in(page, scene.url, viewer_login)

    for minutes in (15, 60, 360, 1440):
        page.goto(f"{scene.url}/backends/?minutes={minutes}")
        page.wait_for_selector(".charts .uplot")
        page.wait_for_selector(".charts canvas")
        axes = page.evaluate("window.__extproxyPlots.map((u) => u.axes[0]._values || [])")
        heatmaps = page.evaluate("window.__extproxyCharts.filter((c) => c.times).map((c) => c.times)")
        labels = [label for values in axes + heatmaps for label in values]
        assert len(axes) >= 4 and all(axes) and len(heatmaps) >= 2, (minutes, axes, heatmaps)
        odd = [label for label in labels if not CLOCK.fullmatch(label)]
        assert odd == [], (minutes, odd)
    assert page.console_errors == []  # type: ignore[attr-defined]
