"""An export's range at its edges, as auditors type it: times with digits past the microsecond
(nanoseconds, as Go writes them) and a `+` offset typed into a URL unencoded (it arrives as a
space). Calls are made through a real extproxy and its recorder; their stored times (whole
microseconds) are read back from an export, and each edge is put one nanosecond past one of
them: `since` (inclusive) must leave that call out, `until` (exclusive) must keep it."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone as tz

import pytest
import requests

from tests.conftest import fixture_bytes, pass_all
from tests.test_export_real_traffic import export, installation, records, send, token_of  # noqa: F401 (fixture)
from tests.test_live_browser import browser_page, log_in  # noqa: F401 (fixture)
from tests.test_live_export_browser import auditor_login, off_the_loop, _newest_export_id  # noqa: F401 (fixture)
from tests.test_per_backend import config_for, post
from tests.test_replay import NAMES

pytestmark = pytest.mark.timeout(300)
ONE_HOUR_EAST = tz(timedelta(hours=1))


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso(moment: datetime) -> str:
    return moment.astimezone(tz.utc).isoformat().replace("+00:00", "Z")


def nanos(moment: datetime, digits: str, zone: tz = tz.utc) -> str:
    """`moment` written with nine digits of fraction, the last three `digits`, in `zone`."""
    local = moment.astimezone(zone)
    offset = "Z" if zone is tz.utc else local.strftime("%z")[:3] + ":" + local.strftime("%z")[3:]
    return f"{local:%Y-%m-%dT%H:%M:%S}.{local.microsecond:06d}{digits}{offset}"


def stored_times(inst, tmp_path, calls: int) -> list[datetime]:
    """Make `calls` calls a little apart; their stored start times, oldest first."""
    for _ in range(calls):
        send(inst, 1)
        time.sleep(0.02)
    everything = tmp_path / "all.ndjson"
    assert export(inst, everything)["calls"] == calls
    times = [parse(t) for t in dict.fromkeys(r["time"] for r in records(everything))]
    assert len(times) == calls
    return times


def call_times(body: bytes) -> list[datetime]:
    return [parse(t) for t in dict.fromkeys(json.loads(line)["time"] for line in body.splitlines())]


def test_nanoseconds_at_either_edge_select_the_calls_stored_in_the_range(installation, tmp_path):
    t = stored_times(installation, tmp_path, 4)
    since, until = nanos(t[0], "001"), nanos(t[2], "001")  # one ns after the first call, and after the third
    # The command: since rounds up past t0 (left out), until rounds up past t2 (kept).
    out = tmp_path / "edge.ndjson"
    manifest = export(installation, out, "--since", since, "--until", until)
    assert call_times(out.read_bytes()) == t[1:3]  # were t0 and t1: both edges cut down to the microsecond
    assert manifest["range"] == {"since": iso(t[0] + timedelta(microseconds=1)),
                                 "until": iso(t[2] + timedelta(microseconds=1))}
    # Zeros past the microsecond are the microsecond itself: nothing moves.
    zeros = tmp_path / "zeros.ndjson"
    export(installation, zeros, "--since", nanos(t[1], "000"), "--until", nanos(t[3], "000"))
    assert call_times(zeros.read_bytes()) == t[1:3]
    # The API, the same range, and its manifest.
    headers = {"Authorization": "Token " + token_of(installation, "auditor")}
    answer = requests.get(f"{installation.url}/api/export/", params={"format": "ndjson", "since": since, "until": until},
                          headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert call_times(answer.content) == t[1:3]
    kept = requests.get(f"{installation.url}/api/export/{answer.headers['X-Export-Id']}/manifest/", headers=headers,
                        timeout=30).json()
    assert kept["range"] == manifest["range"] and kept["calls"] == 2


def test_a_plus_offset_typed_unencoded_into_the_url_is_read_as_plus(installation, tmp_path):
    t = stored_times(installation, tmp_path, 3)
    headers = {"Authorization": "Token " + token_of(installation, "auditor")}
    since = t[1].astimezone(ONE_HOUR_EAST).isoformat()  # 2026-...T10:00:00.123456+01:00
    assert "+01:00" in since
    # As typed into a browser's address bar or a shell's curl: the + not encoded, so it arrives as a space.
    typed = requests.get(f"{installation.url}/api/export/?format=ndjson&since={since}", headers=headers, timeout=30)
    assert typed.status_code == 200, typed.text  # was 400: "Enter a valid date/time."
    assert call_times(typed.content) == t[1:]
    encoded = requests.get(f"{installation.url}/api/export/", params={"format": "ndjson", "since": since},
                           headers=headers, timeout=30)
    assert encoded.status_code == 200 and call_times(encoded.content) == t[1:]
    manifest = requests.get(f"{installation.url}/api/export/{typed.headers['X-Export-Id']}/manifest/",
                            headers=headers, timeout=30).json()
    assert manifest["range"]["since"] == iso(t[1]) and manifest["filters"]["since"] == since
    # With nanoseconds too, and the audit trail's export reads its range the same way.
    typed = requests.get(f"{installation.url}/api/export/?format=ndjson&since={nanos(t[0], '500', ONE_HOUR_EAST)}",
                         headers=headers, timeout=30)
    assert typed.status_code == 200 and call_times(typed.content) == t[1:], typed.text
    audit = requests.get(f"{installation.url}/api/audit/export/?format=ndjson&since={since}", headers=headers,
                         timeout=30)
    assert audit.status_code == 200, audit.text
    # The command reads its range as the API does (a + lost on the way through a script, say).
    out = tmp_path / "spaced.ndjson"
    assert export(installation, out, "--since", since.replace("+", " "))["calls"] == 2
    assert call_times(out.read_bytes()) == t[1:]
    # What still cannot be read is refused as before, naming the field.
    bad = requests.get(f"{installation.url}/api/export/?format=ndjson&since=2026-12-07T10:00:00 1:00",
                       headers=headers, timeout=30)
    assert bad.status_code == 400 and "since" in bad.json()


@pytest.mark.browser
def test_the_export_form_reads_an_offset_and_nanoseconds_as_meant(backend_server, proxy, write_config, auditor_login,
                                                                  browser_page, tmp_path):
    page = browser_page
    backend = backend_server({"filter": pass_all})
    server = proxy(write_config(config_for(backend.url, nodeCacheCapable=True)))
    for _ in range(3):
        post(server, "/extender/gpu/filter", fixture_bytes(NAMES))
        time.sleep(0.02)
    server.flush()
    auditor = auditor_login[2]
    listed = auditor.get(server.url + "/api/calls/?verb=filter").json()["results"]
    t = sorted(parse(c["started_at"]) for c in listed)
    assert len(t) == 3

    log_in(page, server.url, auditor_login)
    page.fill("#export input[name=since]", nanos(t[0], "001", ONE_HOUR_EAST))  # just after the first call
    page.fill("#export input[name=until]", nanos(t[2], "001", ONE_HOUR_EAST))  # just after the last
    with page.expect_download() as download:
        page.click("#export button[value=ndjson]")
    path = tmp_path / "calls.ndjson"
    download.value.save_as(path)
    assert call_times(path.read_bytes()) == t[1:]  # were the first two: both edges cut down
    manifest = auditor.get(server.url + f"/api/export/{off_the_loop(_newest_export_id)}/manifest/").json()
    assert manifest["range"]["since"] == iso(t[0] + timedelta(microseconds=1)) and manifest["calls"] == 2
