"""The live feed of a replica whose Redis does not answer: the websocket cannot join the stream,
its handshake failed with a 500 after about 15 s, again and again, and the page waited for the
socket's first message to load anything, so it stayed empty ("reconnecting…", shown: 0) while
every call was in the database. A real browser, a real serving process and recorder, Redis
behind a relay that stops answering: the feed shows the recorded calls and says the live
stream is away."""
from __future__ import annotations

import pytest
import requests

from tests.conftest import fixture_bytes
from tests.test_live_browser import ARGS, CHROMIUM
from tests.test_redis_away_login import serving_behind_redis_relay

pytestmark = pytest.mark.browser
POD = "trainer-7d9c5b6f8-b4x2s"  # the pod of filter-request.nodecache-false.json


def test_the_feed_shows_recorded_calls_while_redis_does_not_answer(tmp_path, redis_url):
    from playwright.sync_api import expect, sync_playwright

    with serving_behind_redis_relay(tmp_path, redis_url) as (relay, installation):
        installation.start_recorder()
        for _ in range(3):
            answer = requests.post(installation.url + "/extender/builtin/filter", timeout=30,
                                   data=fixture_bytes("filter-request.nodecache-false.json"))
            assert answer.status_code == 200
        installation.wait_drained()
        relay.swallow()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page()
            page.set_default_timeout(20_000)
            page.goto(installation.url + "/accounts/login/")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", "s3cret")
            page.click("[type=submit]")
            page.wait_for_url(installation.url + "/")
            page.goto(installation.url + "/?view=calls")
            expect(page.locator("#calls tr")).to_have_count(3, timeout=20_000)
            expect(page.locator("#calls")).to_contain_text(POD)
            expect(page.locator("#conn")).to_have_attribute("data-state", "away", timeout=30_000)
            expect(page.locator("#conn")).to_contain_text("live stream unavailable")
            browser.close()


def test_an_open_feed_says_so_when_redis_stops_answering_and_goes_live_again(tmp_path, redis_url):
    """An open socket kept saying "live" while its Redis hung: nothing arrived, nothing said why."""
    from playwright.sync_api import expect, sync_playwright

    with serving_behind_redis_relay(tmp_path, redis_url, EXTPROXY_LIVE_ECHO_SECONDS="2") as (relay, installation):
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page()
            page.goto(installation.url + "/accounts/login/")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", "s3cret")
            page.click("[type=submit]")
            page.wait_for_url(installation.url + "/")
            conn = page.locator("#conn")
            expect(conn).to_have_attribute("data-state", "live", timeout=20_000)
            relay.freeze_after(0)
            expect(conn).to_have_attribute("data-state", "away", timeout=40_000)
            relay.thaw()
            expect(conn).to_have_attribute("data-state", "live", timeout=40_000)
            browser.close()
